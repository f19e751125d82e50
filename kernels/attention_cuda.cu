/* attention_cuda.cu - causal multi-head attention on a GPU (attention_cuda.h):
 * pp_attention_forward/_backward's blocks, per (sample b, group of hb
 * heads, block of R' query rows), as strided-batched GEMMs over the group's
 * heads and the row-block kernels of cuda_kernels.h. The notation is
 * cpu_kernels.c's: q, k, v are head h's [T][hs] slices of qkv (row stride
 * 3C, columns h*hs, C + h*hs, 2C + h*hs); out's slice has row stride C.
 * With bf16, qkv and dout are bf16 (uint16_t) and every GEMM here is a bf16
 * strided-batched GEMM: the kernels round P and dS (fp32 storage, for the
 * arithmetic after them) and pp_cu_attn_pack_bf16 then packs each block
 * row to bf16 in place, a bf16 matrix of leading dimension 2T at the
 * block's address. */
#include "attention_cuda.h"

#include <math.h>
#include <stddef.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

/* For each of `batch` products (X_i = X + i * sX elements): C_i = alpha
 * op(A_i) op(B_i) + beta C_i, row-major with explicit row strides
 * (pp_gemm_ld's contract): cuBLAS computes C^T = op(B)^T op(A)^T
 * column-major. A and B fp32 (cublasSgemmStridedBatched) or, with bf16,
 * bf16 (cublasGemmStridedBatchedEx, fp32 accumulation); C fp32, or with
 * c16 bf16 (the fp32 result rounded once; bf16 operands only). K > 0. */
static void gemm_sb_c(cublasHandle_t blas, int ta, int tb, int M, int N, int K, float alpha,
                      const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                      int bf16, float beta, void *C, int c16, int ldc, long long sC, int batch)
{
    if (M <= 0 || N <= 0 || batch <= 0)
        return;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (bf16)
        cublasCheck(cublasGemmStridedBatchedEx(blas, opb, opa, N, M, K, &alpha, B, CUDA_R_16BF, ldb,
                                               sB, A, CUDA_R_16BF, lda, sA, &beta, C,
                                               c16 ? CUDA_R_16BF : CUDA_R_32F, ldc, sC, batch,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        cublasCheck(cublasSgemmStridedBatched(blas, opb, opa, N, M, K, &alpha, (const float *)B,
                                              ldb, sB, (const float *)A, lda, sA, &beta, (float *)C,
                                              ldc, sC, batch));
}
static void gemm_sb(cublasHandle_t blas, int ta, int tb, int M, int N, int K, float alpha,
                    const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                    int bf16, float beta, float *C, int ldc, long long sC, int batch)
{
    gemm_sb_c(blas, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, bf16, beta, C, 0, ldc, sC,
              batch);
}

/* The group shape: hb heads of Rg rows each share the CPU's R-row scratch. */
static void group_of(int NH, int rows, int *hb, int *Rg)
{
    *hb = NH < rows ? NH : rows;
    *Rg = rows / *hb;
}

/* Element e of qkv, out or dout: fp32, or with bf16 two bytes. */
static const void *elem(const void *p, size_t e, int bf16)
{
    return (const char *)p + e * (bf16 ? 2 : 4);
}

void pp_cu_attention_forward(cublasHandle_t blas, cudaStream_t st, const void *qkv, void *out,
                             float *lse, int B, int T, int C, int NH, int rows, float *scratch,
                             int bf16)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
        return;
    int hs = C / NH, C3 = 3 * C, hb, Rg;
    float scale = 1.0f / sqrtf((float)hs);
    group_of(NH, rows, &hb, &Rg);
    long long sS = (long long)Rg * T; /* one head's block of scores, ld T */
    /* P as bf16, packed at the start of its float rows: ld 2T, head stride
     * 2 sS (bf16 elements) */
    int ldP = bf16 ? 2 * T : T;
    long long sP = bf16 ? 2 * sS : sS;
    for (int b = 0; b < B; b++)
        for (int h0 = 0; h0 < NH; h0 += hb) {
            int nh = NH - h0 < hb ? NH - h0 : hb;
            size_t qoff = (size_t)b * T * C3 + (size_t)h0 * hs;
            void *o = (void *)elem(out, (size_t)b * T * C + (size_t)h0 * hs, bf16);
            float *l = lse + ((size_t)b * NH + h0) * T;
            for (int r0 = 0; r0 < T; r0 += Rg) {
                int R = T - r0 < Rg ? T - r0 : Rg, nk = r0 + R;
                /* S = q k^T * scale, the block's rows against keys 0..nk-1 */
                gemm_sb(blas, 0, 1, R, nk, hs, scale, elem(qkv, qoff + (size_t)r0 * C3, bf16), C3,
                        hs, elem(qkv, qoff + C, bf16), C3, hs, bf16, 0.0f, scratch, T, sS, nh);
                cudaCheck(pp_cu_attn_softmax(scratch, T, sS, R, nh, r0, l + r0, T, bf16, st));
                if (bf16)
                    cudaCheck(pp_cu_attn_pack_bf16(scratch, T, sS, R, nh, nk, st));
                /* out = P v (with bf16 written in bf16) */
                gemm_sb_c(blas, 0, 0, R, hs, nk, 1.0f, scratch, ldP, sP,
                          elem(qkv, qoff + 2 * (size_t)C, bf16), C3, hs, bf16, 0.0f,
                          (void *)elem(o, (size_t)r0 * C, bf16), bf16, C, hs, nh);
            }
        }
}

void pp_cu_attention_backward(cublasHandle_t blas, cudaStream_t st, const void *qkv,
                              const void *out, const void *dout, const float *lse, float *dqkv,
                              int B, int T, int C, int NH, int rows, float *scratch, int bf16)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
        return;
    int hs = C / NH, C3 = 3 * C, hb, Rg;
    float scale = 1.0f / sqrtf((float)hs);
    group_of(NH, rows, &hb, &Rg);
    long long sS = (long long)Rg * T;
    int ldP = bf16 ? 2 * T : T;
    long long sP = bf16 ? 2 * sS : sS;
    float *P = scratch, *dP = scratch + (size_t)hb * sS, *D = dP + (size_t)hb * sS;
    cudaCheck(cudaMemsetAsync(dqkv, 0, (size_t)B * T * C3 * sizeof(float), st));
    for (int b = 0; b < B; b++)
        for (int h0 = 0; h0 < NH; h0 += hb) {
            int nh = NH - h0 < hb ? NH - h0 : hb;
            size_t qoff = (size_t)b * T * C3 + (size_t)h0 * hs;
            size_t ooff = (size_t)b * T * C + (size_t)h0 * hs;
            const void *q = elem(qkv, qoff, bf16), *k = elem(qkv, qoff + C, bf16),
                       *v = elem(qkv, qoff + 2 * (size_t)C, bf16);
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const void *o = elem(out, ooff, bf16);
            const float *l = lse + ((size_t)b * NH + h0) * T;
            for (int r0 = 0; r0 < T; r0 += Rg) {
                int R = T - r0 < Rg ? T - r0 : Rg, nk = r0 + R;
                const void *qr = elem(q, (size_t)r0 * C3, bf16);
                const void *dOr = elem(dout, ooff + (size_t)r0 * C, bf16);
                const void *oR = elem(o, (size_t)r0 * C, bf16);
                /* P, recomputed from the forward's lse; D_i */
                gemm_sb(blas, 0, 1, R, nk, hs, scale, qr, C3, hs, k, C3, hs, bf16, 0.0f, P, T, sS,
                        nh);
                if (bf16)
                    cudaCheck(pp_cu_attn_probs_bf16d(P, T, sS, R, nh, r0, l + r0, T,
                                                     (const uint16_t *)oR, (const uint16_t *)dOr, C,
                                                     hs, D, st));
                else
                    cudaCheck(pp_cu_attn_probs(P, T, sS, R, nh, r0, l + r0, T, (const float *)oR,
                                               (const float *)dOr, C, hs, D, 0, st));
                /* dP = dout v^T */
                gemm_sb(blas, 0, 1, R, nk, hs, 1.0f, dOr, C, hs, v, C3, hs, bf16, 0.0f, dP, T, sS,
                        nh);
                /* dS = P o (dP - D_i), into dP; with bf16 then P and dS as bf16 */
                cudaCheck(pp_cu_attn_dscores(P, dP, T, sS, R, nh, r0, D, bf16, st));
                if (bf16) {
                    cudaCheck(pp_cu_attn_pack_bf16(P, T, sS, R, nh, nk, st));
                    cudaCheck(pp_cu_attn_pack_bf16(dP, T, sS, R, nh, nk, st));
                }
                /* dv += P^T dout */
                gemm_sb(blas, 1, 0, nk, hs, R, 1.0f, P, ldP, sP, dOr, C, hs, bf16, 1.0f, dv, C3, hs,
                        nh);
                /* dq = dS k * scale (the block's rows, written once) */
                gemm_sb(blas, 0, 0, R, hs, nk, scale, dP, ldP, sP, k, C3, hs, bf16, 0.0f,
                        dq + (size_t)r0 * C3, C3, hs, nh);
                /* dk += dS^T q * scale */
                gemm_sb(blas, 1, 0, nk, hs, R, scale, dP, ldP, sP, qr, C3, hs, bf16, 1.0f, dk, C3,
                        hs, nh);
            }
        }
}
