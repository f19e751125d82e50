/* jobtable.h - a checked schedule evaluated at every job: where each job
 * computes, where its stage's weights live, its priority and its cost.
 * This is the whole input of the simulator and the lowering. */
#ifndef PP_JOBTABLE_H
#define PP_JOBTABLE_H

#include "jobs.h"
#include "schedule.h"

typedef struct {
    pp_jobspace js;
    int W;
    int *worker;         /* [N] compute(s,b,d) */
    int *owner;          /* [N] weights(s,b,d) */
    long long *priority; /* [N] */
    double *cost;        /* [N] */
    long long *inflight; /* [W] or NULL */
} pp_jobtable;

/* Evaluates every function at every job; reports placements outside
 * [0, W), division by zero and non-positive costs with the (s,b,d) where they
 * happened. Returns the number of errors. */
int pp_jobtable_build(pp_jobtable *t, const pp_schedule *sch);
void pp_jobtable_free(pp_jobtable *t);

#endif
