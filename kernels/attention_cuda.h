/* attention_cuda.h - causal multi-head self-attention on a GPU: the twins
 * of pp_attention_forward and pp_attention_backward (cpu_kernels.h), with
 * the same arguments, layouts and precision rule, the score GEMMs on cuBLAS
 * strided-batched GEMMs (one batch entry per head) and the softmax, the lse
 * save, D_i = rowsum(dout o out) and dS = P o (dP - D_i) in the row-block
 * kernels of cuda_kernels.h. Like the CPU, only a block of rows of the
 * T x T scores exists at a time, in `scratch` (gpt_att_scratch_floats(T,
 * rows) floats, as the CPU's): the GPU splits the same scratch between a
 * group of hb heads of R' = rows / hb rows each (hb = min(NH, rows)), so
 * one strided-batched GEMM serves hb heads, and the blocks of a stage never
 * outgrow the workspace the compiler allocated.
 *
 * `blas` must be bound to `st` (cublasSetStream); every call enqueues on st
 * and never synchronises; a CUDA or cuBLAS error ends the process
 * (cuda_check.h). All pointers are device pointers.
 *
 * bf16 (the CPU's rule, which takes qkv and dout already rounded): here
 * qkv and dout are given as bf16 (uint16_t, the caller's rounding of them
 * to nearest even); P is rounded before P v and P^T dout, dS before dS k
 * and dS^T q, and every GEMM takes bf16 operands (qkv's slices, dout, and
 * the P and dS blocks, packed to bf16 in place in the scratch) with fp32
 * accumulation: cublasGemmStridedBatchedEx, P v writing out in bf16 (the
 * fp32 sum rounded once, as the CPU rounds its fp32 out into the stash).
 * Scores, softmax, lse and D_i (from out and dout's bf16 values) stay fp32.
 * Without bf16, qkv, out and dout are fp32 and the GEMMs
 * cublasSgemmStridedBatched. */
#ifndef PP_ATTENTION_CUDA_H
#define PP_ATTENTION_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* qkv: [B][T][3C]; out, dout: [B][T][C]; fp32, or bf16 with bf16. lse,
 * dqkv: fp32. */
void pp_cu_attention_forward(cublasHandle_t blas, cudaStream_t st, const void *qkv, void *out,
                             float *lse, int B, int T, int C, int NH, int rows, float *scratch,
                             int bf16);
void pp_cu_attention_backward(cublasHandle_t blas, cudaStream_t st, const void *qkv,
                              const void *out, const void *dout, const float *lse, float *dqkv,
                              int B, int T, int C, int NH, int rows, float *scratch, int bf16);

#ifdef __cplusplus
}
#endif

#endif
