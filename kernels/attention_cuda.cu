/* attention_cuda.cu - causal multi-head attention on a GPU (attention_cuda.h):
 * pp_attention_forward/_backward's blocks, per (sample b, group of hb
 * heads, block of R' query rows), as strided-batched GEMMs over the group's
 * heads and the row-block kernels of cuda_kernels.h. The notation is
 * cpu_kernels.c's: q, k, v are head h's [T][hs] slices of qkv (row stride
 * 3C, columns h*hs, C + h*hs, 2C + h*hs); out's slice has row stride C. */
#include "attention_cuda.h"

#include <math.h>
#include <stddef.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

/* For each of `batch` products (X_i = X + i * sX floats): C_i = alpha op(A_i)
 * op(B_i) + beta C_i, row-major with explicit row strides (pp_gemm_ld's
 * contract): cuBLAS computes C^T = op(B)^T op(A)^T column-major. K > 0. */
static void gemm_sb(cublasHandle_t blas, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, long long sA, const float *B, int ldb,
                    long long sB, float beta, float *C, int ldc, long long sC, int batch)
{
    if (M <= 0 || N <= 0 || batch <= 0) return;
    cublasCheck(cublasSgemmStridedBatched(blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                                          ldb, sB, A, lda, sA, &beta, C, ldc, sC, batch));
}

/* The group shape: hb heads of Rg rows each share the CPU's R-row scratch. */
static void group_of(int NH, int rows, int *hb, int *Rg)
{
    *hb = NH < rows ? NH : rows;
    *Rg = rows / *hb;
}

void pp_cu_attention_forward(cublasHandle_t blas, cudaStream_t st, const float *qkv, float *out,
                             float *lse, int B, int T, int C, int NH, int rows, float *scratch,
                             int bf16)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH, C3 = 3 * C, hb, Rg;
    float scale = 1.0f / sqrtf((float)hs);
    group_of(NH, rows, &hb, &Rg);
    long long sS = (long long)Rg * T; /* one head's block of scores, ld T */
    for (int b = 0; b < B; b++)
        for (int h0 = 0; h0 < NH; h0 += hb) {
            int nh = NH - h0 < hb ? NH - h0 : hb;
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h0 * hs;
            const float *k = q + C, *v = q + 2 * C;
            float *o = out + (size_t)b * T * C + (size_t)h0 * hs;
            float *l = lse + ((size_t)b * NH + h0) * T;
            for (int r0 = 0; r0 < T; r0 += Rg) {
                int R = T - r0 < Rg ? T - r0 : Rg, nk = r0 + R;
                /* S = q k^T * scale, the block's rows against keys 0..nk-1 */
                gemm_sb(blas, 0, 1, R, nk, hs, scale, q + (size_t)r0 * C3, C3, hs, k, C3, hs,
                        0.0f, scratch, T, sS, nh);
                cudaCheck(pp_cu_attn_softmax(scratch, T, sS, R, nh, r0, l + r0, T, bf16, st));
                /* out = P v */
                gemm_sb(blas, 0, 0, R, hs, nk, 1.0f, scratch, T, sS, v, C3, hs, 0.0f,
                        o + (size_t)r0 * C, C, hs, nh);
            }
        }
}

void pp_cu_attention_backward(cublasHandle_t blas, cudaStream_t st, const float *qkv,
                              const float *out, const float *dout, const float *lse,
                              float *dqkv, int B, int T, int C, int NH, int rows,
                              float *scratch, int bf16)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH, C3 = 3 * C, hb, Rg;
    float scale = 1.0f / sqrtf((float)hs);
    group_of(NH, rows, &hb, &Rg);
    long long sS = (long long)Rg * T;
    float *P = scratch, *dP = scratch + (size_t)hb * sS, *D = dP + (size_t)hb * sS;
    cudaCheck(cudaMemsetAsync(dqkv, 0, (size_t)B * T * C3 * sizeof(float), st));
    for (int b = 0; b < B; b++)
        for (int h0 = 0; h0 < NH; h0 += hb) {
            int nh = NH - h0 < hb ? NH - h0 : hb;
            size_t qoff = (size_t)b * T * C3 + (size_t)h0 * hs;
            size_t ooff = (size_t)b * T * C + (size_t)h0 * hs;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *o = out + ooff, *dO = dout + ooff;
            const float *l = lse + ((size_t)b * NH + h0) * T;
            for (int r0 = 0; r0 < T; r0 += Rg) {
                int R = T - r0 < Rg ? T - r0 : Rg, nk = r0 + R;
                /* P, recomputed from the forward's lse; D_i */
                gemm_sb(blas, 0, 1, R, nk, hs, scale, q + (size_t)r0 * C3, C3, hs, k, C3, hs,
                        0.0f, P, T, sS, nh);
                cudaCheck(pp_cu_attn_probs(P, T, sS, R, nh, r0, l + r0, T, o + (size_t)r0 * C,
                                           dO + (size_t)r0 * C, C, hs, D, bf16, st));
                /* dP = dout v^T */
                gemm_sb(blas, 0, 1, R, nk, hs, 1.0f, dO + (size_t)r0 * C, C, hs, v, C3, hs, 0.0f,
                        dP, T, sS, nh);
                /* dv += P^T dout */
                gemm_sb(blas, 1, 0, nk, hs, R, 1.0f, P, T, sS, dO + (size_t)r0 * C, C, hs, 1.0f,
                        dv, C3, hs, nh);
                /* dS = P o (dP - D_i), into dP */
                cudaCheck(pp_cu_attn_dscores(P, dP, T, sS, R, nh, r0, D, bf16, st));
                /* dq = dS k * scale (the block's rows, written once) */
                gemm_sb(blas, 0, 0, R, hs, nk, scale, dP, T, sS, k, C3, hs, 0.0f,
                        dq + (size_t)r0 * C3, C3, hs, nh);
                /* dk += dS^T q * scale */
                gemm_sb(blas, 1, 0, nk, hs, R, scale, dP, T, sS, q + (size_t)r0 * C3, C3, hs,
                        1.0f, dk, C3, hs, nh);
            }
        }
}
