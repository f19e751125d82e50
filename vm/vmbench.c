/* vmbench.c - ppvm --no-compute's counters and its table (vmbench.h,
 * vm/README.md "Benchmark mode"): per opcode, the instructions run and
 * their time, summed over every rank on rank 0, which prints each opcode's
 * and each family's count per step and ns per instruction (the mean over
 * all ranks' instructions, of it the time blocked in calls that wait for
 * a peer or the device, and the mean of the rank where it is highest). An
 * opcode's family is a column of the opcode table (isa/opcodes.h). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "../isa/ops.h"
#include "check.h"
#include "vmbench.h"

const char *pp_vmbench_family(int op) { return pp_family_name(pp_op_family_of(op)); }

void pp_vmbench_step_begin(pp_vmbench *b, int step, int steps)
{
    b->counting = steps < 2 || step > 0;
    b->warmed |= !b->counting;
    b->start = b->last = pp_vmbench_now();
}

void pp_vmbench_step_end(pp_vmbench *b)
{
    if (!b->counting)
        return;
    b->step_ns += pp_vmbench_now() - b->start;
    b->steps++;
}

/* What one read of the clock costs here, in ns: it is inside every figure,
 * once per instruction. */
static double clock_cost(void)
{
    enum { READS = 10000 };
    uint64_t t0 = pp_vmbench_now(), t = t0;
    for (int i = 0; i < READS; i++)
        t = pp_vmbench_now();
    return (double)(t - t0) / READS;
}

/* This rank's mean ns per instruction of each opcode and family (-1 where
 * it ran none), for the slowest-rank column. */
static void rank_means(const pp_vmbench *b, double *op_mean, double *fam_mean)
{
    uint64_t fn[PP_FAMILY_COUNT] = {0}, fns[PP_FAMILY_COUNT] = {0};
    for (int op = 0; op < PP_OP_COUNT; op++) {
        op_mean[op] = b->n[op] ? (double)b->ns[op] / (double)b->n[op] : -1;
        fn[pp_op_family_of(op)] += b->n[op];
        fns[pp_op_family_of(op)] += b->ns[op];
    }
    for (int f = 0; f < PP_FAMILY_COUNT; f++)
        fam_mean[f] = fn[f] ? (double)fns[f] / (double)fn[f] : -1;
}

static void row(const char *family, const char *op, uint64_t n, uint64_t ns, uint64_t wait,
                double slowest, int steps)
{
    printf("%-12s %-15s %10llu %10.1f %10.1f %12.1f\n", family, op, (unsigned long long)(n / steps),
           n ? (double)ns / (double)n : 0.0, n ? (double)wait / (double)n : 0.0, slowest);
}

void pp_vmbench_report(const pp_vmbench *b, const pp_plan *p, int me, int world)
{
    /* per opcode, then per family, then all: the means of this rank */
    double mine[PP_OP_COUNT + PP_FAMILY_COUNT + 1], worst[PP_OP_COUNT + PP_FAMILY_COUNT + 1];
    uint64_t n[PP_OP_COUNT], ns[PP_OP_COUNT], wait[PP_OP_COUNT], all_n = 0, all_ns = 0;
    rank_means(b, mine, mine + PP_OP_COUNT);
    for (int op = 0; op < PP_OP_COUNT; op++) {
        all_n += b->n[op];
        all_ns += b->ns[op];
    }
    mine[PP_OP_COUNT + PP_FAMILY_COUNT] = all_n ? (double)all_ns / (double)all_n : -1;
    /* the mean counted step's wall time on this rank */
    double step = b->steps ? (double)b->step_ns / b->steps : 0, step_max = 0;
    mpiCheck(MPI_Reduce(b->n, n, PP_OP_COUNT, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Reduce(b->ns, ns, PP_OP_COUNT, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Reduce(b->wait, wait, PP_OP_COUNT, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Reduce(mine, worst, PP_OP_COUNT + PP_FAMILY_COUNT + 1, MPI_DOUBLE, MPI_MAX, 0,
                        MPI_COMM_WORLD));
    mpiCheck(MPI_Reduce(&step, &step_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    unsigned long long ninstr = p->ninstr, max_instr = 0, sum_instr = 0;
    mpiCheck(
        MPI_Reduce(&ninstr, &max_instr, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD));
    mpiCheck(
        MPI_Reduce(&ninstr, &sum_instr, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    if (me != 0)
        return;
    int steps = b->steps > 0 ? b->steps : 1;
    printf("no-compute: %d rank%s, %d step%s counted%s; no kernel ran and every message was "
           "%d bytes; one clock read (%.1f ns) is inside each instruction's time\n",
           world, world == 1 ? "" : "s", b->steps, b->steps == 1 ? "" : "s",
           b->warmed ? " (the first step warms up and is not)" : "", PP_NO_COMPUTE_MSG_BYTES,
           clock_cost());
    if (!b->steps) {
        printf("no step ran: nothing was counted\n");
        fflush(stdout);
        return;
    }
    printf("%-12s %-15s %10s %10s %10s %12s\n", "family", "opcode", "per step", "ns/instr",
           "waiting", "slowest rank");
    for (int f = 0; f < PP_FAMILY_COUNT; f++)
        for (int op = 0; op < PP_OP_COUNT; op++)
            if ((int)pp_op_family_of(op) == f && n[op])
                row(pp_family_name((pp_op_family)f), pp_op_name(op), n[op], ns[op], wait[op],
                    worst[op], steps);
    uint64_t fn[PP_FAMILY_COUNT] = {0}, fns[PP_FAMILY_COUNT] = {0}, fw[PP_FAMILY_COUNT] = {0},
             tn = 0, tns = 0, tw = 0;
    for (int op = 0; op < PP_OP_COUNT; op++) {
        fn[pp_op_family_of(op)] += n[op];
        fns[pp_op_family_of(op)] += ns[op];
        fw[pp_op_family_of(op)] += wait[op];
        tn += n[op];
        tns += ns[op];
        tw += wait[op];
    }
    for (int f = 0; f < PP_FAMILY_COUNT; f++)
        if (fn[f])
            row(pp_family_name((pp_op_family)f), "*", fn[f], fns[f], fw[f], worst[PP_OP_COUNT + f],
                steps);
    row("all", "*", tn, tns, tw, worst[PP_OP_COUNT + PP_FAMILY_COUNT], steps);
    printf("plan: %llu instructions a step on all ranks (the busiest rank %llu); step time "
           "%.1f us (slowest rank), %.1f ns per instruction of the busiest rank\n",
           sum_instr, max_instr, step_max * 1e-3, max_instr ? step_max / max_instr : 0.0);
    fflush(stdout);
}
