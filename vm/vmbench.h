/* vmbench.h - ppvm --no-compute, the interpreter's benchmark mode: what the
 * VM itself costs per instruction (vm/README.md, "Benchmark mode").
 *
 * In this mode the backends run every instruction's dispatch, slot lookups,
 * waits for sends in flight, stream events (cuda) and transport calls, but
 * no kernel body (no forward, backward, optimizer update, microbatch
 * generation, zeroing or gradient sum) and move messages of one float
 * (4 bytes) instead of the plan's sizes; the driver reads the clock after
 * each instruction (one clock_gettime each) and adds the time since the
 * previous read to the instruction's opcode. At the end, rank 0 prints
 * each opcode's and each family's count per step (all ranks) and ns per
 * instruction; no loss (none is computed). */
#ifndef PP_VM_VMBENCH_H
#define PP_VM_VMBENCH_H

#include <stdint.h>
#include <time.h>

#include "../isa/opcodes.h"
#include "../isa/plan.h"
#include "guard.h"

/* The size of every message in --no-compute mode, in bytes: one float. */
#define PP_NO_COMPUTE_MSG_BYTES 4

typedef struct {
    uint64_t n[PP_OP_COUNT];    /* instructions run, counted steps only */
    uint64_t ns[PP_OP_COUNT];   /* their time, in ns */
    uint64_t wait[PP_OP_COUNT]; /* of it, blocked waiting (pp_run's waited_ns) */
    uint64_t step_ns;           /* the counted steps' wall time on this rank, in ns */
    int steps;                  /* steps counted */
    int counting;               /* the step in progress is counted */
    int warmed;                 /* a first step ran uncounted */
    uint64_t start;             /* the clock at the step's start */
    uint64_t last;              /* the clock at the last read */
} pp_vmbench;

static inline uint64_t pp_vmbench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Before a step's first instruction: step (from 0) is counted unless it is
 * the first of several (it warms up: MPI's first messages open its
 * connections, the first touches of every buffer fault its pages). */
void pp_vmbench_step_begin(pp_vmbench *b, int step, int steps);

/* After each instruction: its time since the previous read, and what of it
 * the backend spent blocked (*waited, which this takes), to its opcode. */
static inline void pp_vmbench_tick(pp_vmbench *b, int op, unsigned long long *waited)
{
    uint64_t now = pp_vmbench_now();
    if (b->counting) {
        b->n[op]++;
        b->ns[op] += now - b->last;
        b->wait[op] += *waited;
    }
    *waited = 0;
    b->last = now;
}

/* A backend's blocking call, timed into *waited in --no-compute mode, or
 * under the cpu backend's --profile (on):
 * PP_WAITED(on, &run->waited_ns, MPI_Recv(...)). Two clock reads, only
 * when on; always marked as a wait for the watchdog's heartbeats
 * (pp_guard_waiting), so that a rank waiting here is not called stalled. */
#define PP_WAITED(on, waited, call)                                                                \
    do {                                                                                           \
        uint64_t pp_w0_ = (on) ? pp_vmbench_now() : 0;                                             \
        pp_guard_waiting(1);                                                                       \
        call;                                                                                      \
        pp_guard_waiting(0);                                                                       \
        if (on)                                                                                    \
            *(waited) += pp_vmbench_now() - pp_w0_;                                                \
    } while (0)

/* After the step's end (the backend's end_step, which waits for every
 * send): the step's wall time. */
void pp_vmbench_step_end(pp_vmbench *b);

/* Collective (every rank): rank 0 prints the table (vm/README.md). */
void pp_vmbench_report(const pp_vmbench *b, const pp_plan *p, int me, int world);

/* The family an opcode is reported under: "compute", "optimizer",
 * "transfer", "weights", "collective" or "bookkeeping". */
const char *pp_vmbench_family(int op);

#endif
