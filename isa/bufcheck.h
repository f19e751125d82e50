/* bufcheck.h - proves that a plan cannot corrupt its buffers: the other
 * half of the proof commcheck.h gives (that no plan hangs).
 *
 * The model is the most concurrent execution any backend allows:
 *   - the members of one GroupStart..GroupEnd run concurrently (NCCL orders
 *     a group's operations only per peer, and the cuda backend records the
 *     members' events only at GroupEnd);
 *   - the two jobs after an Overlap marker run concurrently (the cuda
 *     backend runs them on two streams);
 *   - every other pair of operations on one buffer runs in plan order (the
 *     cuda backend chains them through the buffer's event, whatever stream
 *     each runs on; the cpu backend runs them in order), and operations on
 *     different buffers are not ordered at all, which cannot matter.
 * A buffer is a slot, or the rank's own weights or gradients of a stage.
 * What each instruction reads and writes, and what a slot must hold when
 * read, come from the opcode table (isa/opcodes.h via pp_instr_touches).
 * Two checks, both O(instructions):
 *   1. no two members of one group touch one buffer unless both only read,
 *      nor do the two jobs of an overlapped pair;
 *   2. no instruction has two operands in one slot unless both only read;
 *   3. replaying the plan in order, every slot an instruction reads holds
 *      what the table says it needs (F(s-1,b)'s output for Forward s b's
 *      `in`, the stash B(s,b) left for BackwardWeight s b, ...): nothing is
 *      read before it arrives or out of order, and nothing still needed is
 *      overwritten first (a reused stash, a receive into a slot whose data
 *      is yet to be sent). Offload (issue 26) leaves its device slot
 *      holding nothing, so a B that reads the stash before its Reload is
 *      refused, as is a Reload whose host slot no Offload filled and a
 *      Reload into a slot whose content is still to be read;
 *   4. offload's host slots (pp_plan_host_slots) hold only stashes an
 *      Offload wrote: no job or transfer touches one, and every Offload
 *      and Reload moves between a device slot and a host slot.
 * Out of scope: the order of updates to a rank's own weights and gradients
 * and to a wgrad slot (e.g. an accumulation after the SendWeightGrad that
 * returns it): those follow from the job order the simulator proves, and
 * the replay tracks what slots hold, not how often they were added to. */
#ifndef PP_BUFCHECK_H
#define PP_BUFCHECK_H

#include <stddef.h>

#include "plan.h"

/* Checks one rank's plan; returns 0 if safe, else -1 with a message in msg
 * (msglen bytes, may be NULL or 0; "ok" on success, cut to fit) naming the
 * rank, the instructions (plan addresses, as in the listing) and the slot:
 * "hazard: ..." (a group's members, or a pair's jobs, conflict), "alias: ..." (one
 * instruction's operands share a slot it writes), "dataflow: ..." (a read
 * of the wrong content) or "error: out of memory". */
int pp_buffer_check_plan(const pp_plan *p, char *msg, size_t msglen);

/* The same for plans[0..W), stopping at the first rank that fails. */
int pp_buffer_check(const pp_plan *plans, int W, char *msg, size_t msglen);

#endif
