/* commcheck.h - proves that a set of per-rank plans cannot hang under
 * NCCL's communication rules, by replaying every rank's stream.
 *
 * The model (the strictest, NCCL-like case):
 *   - point-to-point operations are matched per (sender, receiver) pair in
 *     issue order: the k-th send from a to b meets the k-th receive at b
 *     from a; an operation blocks its rank until its partner has been
 *     reached too (a rendezvous: no buffering at all);
 *     the pairs are the opcode table's (isa/opcodes.h: SendActivation with
 *     RecvActivation, SendGrad with RecvGrad, SendWeights with FetchWeights,
 *     SendWeightGrad with RecvWeightGrad),
 *     and a matched pair must agree on kind, stage and microbatch;
 *   - a collective on group g (ReduceGrads) completes when every member of
 *     plans[r].groups[g] has reached its next collective on g, and all of
 *     them must be the same operation on the same stage;
 *   - every other instruction never blocks.
 * The replay is O(total instructions + W + collective members). */
#ifndef PP_COMMCHECK_H
#define PP_COMMCHECK_H

#include <stddef.h>

#include "plan.h"

/* Replays all ranks' streams under NCCL's rules; returns 0 if every stream
 * runs to its end, else -1 with a report in msg: which ranks are blocked, at
 * which instruction (index, opcode, stage, microbatch, peer), what each waits
 * for, and the cycle of waits (e.g. "rank 0 @12 RecvGrad(s=1,b=0) from 1 ->
 * rank 1 @9 RecvActivation(s=0,b=1) from 0 -> rank 0"). Also rejects matched
 * pairs that disagree (a send of X matched to a receive of Y) and collectives
 * whose members reach different instructions.
 *
 * plans[r] must be rank r of a world of W; msg (msglen bytes, may be NULL
 * or 0) always receives a NUL-terminated message ("ok" on success), cut to
 * fit. Messages start with "deadlock:", "mismatch:", "invalid:" (a plan this
 * checker cannot replay: a peer or group out of range, a rank outside its
 * own group, group tables that differ between members) or "error:" (out of
 * memory). */
int pp_comm_check(const pp_plan *plans, int W, char *msg, size_t msglen);

#endif
