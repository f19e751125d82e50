/* guard.h - what keeps a rank from hanging or dying uncleanly: the
 * watchdog thread behind --timeout, on every backend, and the stop signals
 * (SIGTERM, SIGINT) behind --grace. vm/guard.c implements it; vm/README.md
 * ("A lost rank, signals") says what each message means.
 *
 * The watchdog watches a progress record that the driver updates: the
 * phase (start-up, the barrier before a step, the step's instructions, the
 * end of the step, after training), the step, and inside a step the
 * instruction in progress (its index, opcode, stage, microbatch and peer).
 * A phase not finished --timeout seconds after it began (a step counts as
 * one phase from its barrier to its end-of-step collective) makes the
 * thread print one line naming this rank, the step, the instruction and,
 * for a transfer, the peer it waits on, and end the process with _exit(1):
 * the thread never calls MPI, since the main thread is blocked inside it,
 * and Open MPI's mpirun then ends the job non-zero.
 *
 * The first SIGTERM or SIGINT (or SIGUSR1, SIGUSR2: the two relayed by
 * bin/pprun) only sets a flag (pp_guard_signal); the
 * driver has the ranks agree on it at the end of the step and stop together.
 * A second one, or --grace seconds without the step ending, ends the
 * process at once with status 128 + the signal's number. */
#ifndef PP_VM_GUARD_H
#define PP_VM_GUARD_H

#include <stdint.h>

#include "../isa/ops.h"

typedef enum {
    PP_AT_STARTUP,    /* MPI_Init done, until the first step: the hand-shake, connect */
    PP_AT_LOAD,       /* start-up, reading this rank's plan and data (local) */
    PP_AT_BARRIER,    /* the barrier that starts a step */
    PP_AT_STEP,       /* the step's instructions (pp_guard_instr says which) */
    PP_AT_STEP_END,   /* sends completing, the end-of-step agreement */
    PP_AT_CHECKPOINT, /* writing the checkpoint of steps 0 .. step (its own clock) */
    PP_AT_RESUME,     /* start-up: reading and agreeing on --resume's checkpoint */
    PP_AT_FINISH,     /* after the last step: --profile's probe, --save, freeing the backend */
    PP_AT_FINALIZE,   /* MPI_Finalize, everything else done (its own clock) */
} pp_phase;

/* Installs the stop signals' handlers: SIGTERM, SIGINT, and SIGUSR1 and
 * SIGUSR2, which bin/pprun relays them as (taken as SIGTERM and SIGINT).
 * Called first thing in main, so that a signal during MPI_Init stops the
 * run rather than ending the process; 0, or -1. */
int pp_guard_signals(void);

/* Installs the stop signals' handlers (again) and starts the watchdog thread,
 * in phase PP_AT_STARTUP. timeout, grace: seconds (> 0). Returns 0, or -1
 * when the thread cannot be started (said on stderr). */
int pp_guard_start(int me, int world, double timeout, double grace);

/* Collective, once, from the main thread after pp_guard_start: sets up
 * the watchdogs' heartbeats (UDP datagrams between the ranks' watchdog
 * threads, outside MPI), so that a watchdog that times out names the ranks
 * it has not heard from (stopped, dead or cut off) rather than the peer
 * its own instruction waits on. 0, or -1 on every rank when some rank
 * cannot (no socket, or more than 512 ranks): the lines then guess as
 * before. */
int pp_guard_heartbeats(void);

/* Enter phase `ph` of step `step` (from 0; ignored at start-up, resume
 * and finish). Every phase but PP_AT_STEP_END restarts the clock: a step's
 * time runs from the end of its barrier to the end of its agreement, as
 * the cuda backend's own watchdog counts it (vm/interp_cuda.c); a
 * checkpoint's writes and fsyncs, which grow with the model and the disk,
 * are not a step's and get a --timeout of their own. */
void pp_guard_phase(pp_phase ph, int step);

/* Inside a step: instruction `index` of the plan, `in`, is in progress. */
void pp_guard_instr(uint32_t index, const pp_instr *in);

/* A backend's blocking wait on other ranks begins (1) or ends (0): the
 * heartbeats tell the other ranks that this rank waits, not that it is
 * stalled (PP_WAITED in vmbench.h brackets every such wait). */
void pp_guard_waiting(int on);

/* This rank stops making progress on purpose (PPVM_TEST_KILL's -stall):
 * it waits on nobody, so the others' watchdogs name it as stalled. */
void pp_guard_stalled(void);

/* The first stop signal received (SIGTERM or SIGINT), or 0. */
int pp_guard_signal(void);

/* Name of a stop signal: "SIGTERM", "SIGINT". */
const char *pp_guard_signal_name(int sig);

#endif
