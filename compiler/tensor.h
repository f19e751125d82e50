/* tensor.h - lowering tensor parallelism (issue 27): a worker's plan made
 * into the plans of its T tensor-parallel ranks.
 *
 * Under `tensor = T` the simulation and the lowering work per worker, as
 * for T = 1; this step then gives worker w's plan to each of its ranks
 * w*T + t (isa/tensor.h), with
 *   - every peer p (a worker) made p*T + t: activations and gradients go
 *     (w,t) -> (w',t), weight fetches and gradient returns too;
 *   - every replica group g made T groups, g*T + t with members m*T + t, so
 *     replica all-reduces work per t;
 *   - W tensor groups after those, worker w's at T*G + w, members w*T ..
 *     w*T + T - 1;
 *   - a TensorReduce(s, b, tensor group) before every Forward, Backward
 *     and BackwardInput: the collectives that job makes (a BackwardWeight
 *     makes none), which the deadlock proof (isa/commcheck.c) matches
 *     across the group in order, as NCCL requires.
 * Sizes are already the shard's (pp_model_shard). The plan id is computed
 * again over all W*T plans. T = 1 leaves the plans as they are. */
#ifndef PP_COMPILER_TENSOR_H
#define PP_COMPILER_TENSOR_H

#include "../isa/plan.h"
#include "diag.h"
#include "schedule.h"

/* *plans holds W plans of one compile; with pp_model_tensor(m) = T > 1 it is
 * replaced by an array of W*T (the old one freed). Returns 0, or -1 out of
 * memory (reported through d, *plans untouched). */
int pp_tensor_expand(pp_plan **plans, int W, const pp_model *m, pp_diag *d);

/* ppc --tensor T (and the search's): the schedule's model made T-way
 * tensor-parallel, with the checks of the `tensor` statement (T in
 * [1, 64], dividing ffn, no gpt or overlap yet). Returns 0, or 1 after an
 * error reported through d. */
int pp_tensor_override(pp_diag *d, pp_schedule *sch, long long T);

/* How many plans a compile of W workers makes: W * T. */
int pp_tensor_ranks(int W, const pp_model *m);

#endif
