/* attention_fused_cuda.h - the fused attention's CUDA kernels
 * (attention_fused.h has the algorithm, the tiles and the plain C
 * reference). Enqueued on st, never synchronising; a launch error ends the
 * process (cuda_check.h). All pointers are device pointers; the shape must
 * pass pp_attention_fused_ok. */
#ifndef PP_ATTENTION_FUSED_CUDA_H
#define PP_ATTENTION_FUSED_CUDA_H

#include <cuda_runtime_api.h>

#include "attention_fused.h"

#ifdef __cplusplus
extern "C" {
#endif

/* qkv, out, dout: fp32, or bf16 (uint16_t) with bf16 (the forward writes
 * out rounded to nearest even: the reference's fp32 out rounded, and the
 * backward's D_i is summed from its bf16 values). lse, dqkv: fp32. */
void pp_cu_attention_fused_forward(cudaStream_t st, const void *qkv, void *out, float *lse, int B,
                                   int T, int C, int NH, int bf16);
void pp_cu_attention_fused_backward(cudaStream_t st, const void *qkv, const void *out,
                                    const void *dout, const float *lse, float *dqkv, int B, int T,
                                    int C, int NH, int bf16);

/* Whether the cuda backend's GPT uses these kernels for this shape: 1 when
 * pp_attention_fused_ok and the environment does not say PP_ATTENTION=
 * blocked; else 0 (the caller runs attention_cuda.h's blocked GEMMs), and a
 * shape the kernels do not take is said once on stderr with the reason. */
int pp_cu_attention_fused_use(int C, int NH);

#ifdef __cplusplus
}
#endif

#endif
