/* tensor_shard.h - tensor parallelism on the CPU (issue 27, isa/tensor.h):
 * the all-reduce hook the mlp and gpt blocks call inside F and B, and a
 * stage's shards cut from and put back into the whole stage.
 *
 * The hook: the VM sets it to an all-reduce over the rank's tensor group
 * (vm/interp.c, at a TensorReduce); with it set, an mlp block (a gpt
 * or llama layer's attention and MLP each) sums its row-parallel output and its
 * layer-norm-input gradient over the group.
 * Unset (every T = 1 run, the reference), the blocks run exactly as they
 * always did. The compute functions of model.h take the plan's model and
 * work on its shard (pp_model_shard) themselves.
 *
 * Shards: rank t of a worker holds, of each block, W1's rows and b1's
 * entries [t*F/T, (t+1)*F/T) and W2's columns in that range; everything
 * else whole (model_desc.h's layouts, isa/mlp_layout.h). A whole stage is
 * what the reference trains and what --save writes, so T is free to change
 * between runs. gpt and llama: gpt_shard_copy and llama_shard_copy in
 * tensor_shard.c (isa/tensor.h). */
#ifndef PP_TENSOR_SHARD_H
#define PP_TENSOR_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/model_desc.h"

typedef void (*pp_tensor_allreduce_fn)(void *ctx, float *buf, size_t n);

/* Sets (fn non-NULL) or clears the hook. */
void pp_tensor_hook_set(pp_tensor_allreduce_fn fn, void *ctx);
/* Whether it is set. */
int pp_tensor_hook_active(void);
/* Sums buf[0..n) over the group in place (nothing when unset). */
void pp_tensor_allreduce(float *buf, size_t n);

/* Floats of the whole stage s (m as if tensor = 1). */
size_t pp_stage_whole_count(const pp_model *m, int S, int s);
/* shard (pp_stage_param_count(m, ...) floats) = rank t's part of whole. */
void pp_stage_shard_cut(const pp_model *m, int S, int s, int t, const float *whole, float *shard);
/* The inverse: rank t's part of whole = shard (the rest untouched; the
 * replicated parts are written by every t, identically). */
void pp_stage_shard_put(const pp_model *m, int S, int s, int t, const float *shard, float *whole);
/* Rank t's shard of the whole stage pp_stage_init would make: 0, or -1
 * out of memory. */
int pp_stage_shard_init(const pp_model *m, int S, int s, uint64_t seed, int t, float *shard);

#endif
