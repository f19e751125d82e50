/* tensor_gemm.h - the row-parallel GEMM of tensor parallelism on the CPU
 * (isa/tensor.h, tensor_shard.h), shared by the gpt and llama layers: a
 * residual layer's output projection whose partial sums are all-reduced
 * over the tensor group before the residual is added once. */
#ifndef PP_TENSOR_GEMM_H
#define PP_TENSOR_GEMM_H

#include "stage_gemm.h"

/* out = x + in W^T, in [BT][K], W [C][K], x and out [BT][C]: the residual
 * accumulated onto x by the GEMM; or, tensor-parallel (the hook set,
 * tensor_shard.h), W row-parallel: in W^T is this rank's partial sum,
 * summed over the group (Megatron's g) before every rank adds x once. */
void pp_row_parallel(const pp_stage_gemms *g, int BT, int C, int K, const float *in, const float *w,
                     const float *x, float *out);

#endif
