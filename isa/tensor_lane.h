/* tensor_lane.h - overlapped pairs under tensor parallelism (issue 27): where
 * an Overlap pair's two jobs stand, and which lane each TensorReduce's
 * all-reduces go over.
 *
 * Under tensor = T > 1 every job comes right after its TensorReduce
 * (isa/tensor.h), an overlapped one too, so a pair reads
 *
 *     Overlap, TensorReduce(j1), j1, TensorReduce(j2), j2
 *
 * (with T = 1: Overlap, j1, j2). Overlap marks the next two jobs; the
 * TensorReduces between are no jobs (the VM's pair count skips them).
 *
 * Lanes. The cuda backend runs a pair's two jobs at once on two streams,
 * so their all-reduces would reach one NCCL communicator from two streams
 * in an order nothing fixes, and two ranks of a group could meet each
 * other's other job's all-reduce (a hang, or sums of the wrong buffers).
 * So each tensor group has PP_TENSOR_LANES communicators, its lanes: the
 * second job of a pair makes its all-reduces on lane 1, every other job
 * (a pair's first included) on lane 0. On one lane a rank's all-reduces
 * follow its plan's order, so members that issue the same TensorReduces
 * in the same order per lane (isa/commcheck.c proves it, the lane counted
 * as part of the communicator) meet the same all-reduces on each
 * communicator, and a host issues the lanes' operations in one fixed plan
 * order, the same on every member. The lane is the TensorReduce's place
 * in the pair, not an operand: a plan's bytes say it already, and plans
 * without pairs are unchanged. */
#ifndef PP_TENSOR_LANE_H
#define PP_TENSOR_LANE_H

#include <stdint.h>

#include "plan.h"

#define PP_TENSOR_LANES 2

/* The instruction at i, or the one after it when i is a TensorReduce (the
 * job it precedes). */
static inline uint32_t pp_pair_job_at(const pp_plan *p, uint32_t i)
{
    return i < p->ninstr && p->code[i].op == PP_OP_TensorReduce ? i + 1 : i;
}

/* The two jobs of the Overlap at i: their indices in *a and *b. 1, or 0
 * when the plan ends before them. */
static inline int pp_pair_jobs(const pp_plan *p, uint32_t i, uint32_t *a, uint32_t *b)
{
    *a = pp_pair_job_at(p, i + 1);
    *b = *a < p->ninstr ? pp_pair_job_at(p, *a + 1) : p->ninstr;
    return *b < p->ninstr;
}

/* The lane of the TensorReduce at i: 1 when it precedes the second job of
 * an Overlap pair (Overlap, TensorReduce, job, this), else 0. */
static inline int pp_tensor_lane(const pp_plan *p, uint32_t i)
{
    return i >= 3 && i < p->ninstr && p->code[i].op == PP_OP_TensorReduce &&
           p->code[i - 3].op == PP_OP_Overlap && p->code[i - 2].op == PP_OP_TensorReduce;
}

#endif
