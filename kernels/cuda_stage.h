/* cuda_stage.h - internal to the CUDA models (model_cuda.cu, mlp_cuda.cu,
 * gpt_cuda.cu; C++ only): the context pp_cuda_model, each model kind's
 * table of stage functions (model_cuda.cu dispatches on m->kind as stage.c
 * does on the CPU), and the GEMM helpers every kind's stage code shares:
 * pp_gemm's row-major contract on cuBLAS, in fp32 or on bf16 operands with
 * fp32 accumulation, plain or strided-batched, and cuBLASLt's fused
 * epilogues (gemm_lt.h). */
#ifndef PP_CUDA_STAGE_H
#define PP_CUDA_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "gemm_lt.h"
#include "model_cuda.h"

struct pp_cuda_model {
    cudaStream_t st;
    cublasHandle_t blas;
    pp_lt *lt;      /* cuBLASLt: handle, workspace, the fused problems' cache */
    int epilogues;  /* fused epilogues where cuBLASLt offers them (default 1) */
    double *d_loss; /* summed loss since the last pp_cuda_loss_take */
    /* tensor = T (issue 27): the all-reduce over the rank's tensor group
     * the mlp and gpt blocks call on st (pp_cuda_model_set_tensor), or NULL */
    void (*tp_fn)(void *ctx, float *buf, size_t n, cudaStream_t st);
    void *tp_ctx;
    /* pp_cuda_model_grads_zero: the next backward's gradients hold zeros,
     * so its weight-gradient GEMMs write (beta 0) rather than add (beta 1) */
    int grads_zero;
};

/* One model kind's stages on the device: the pp_cuda_stage_* functions of
 * model_cuda.h (which dispatch here) for that kind; each kind's is the
 * stage skeleton (stage_cuda.h) around its blocks. */
typedef struct {
    void (*forward)(pp_cuda_model *cm, const pp_model *m, int S, int s, const void *weights,
                    const void *in, const int32_t *tgt, void *stash, void *work, float *out,
                    float loss_scale);
    void (*backward)(pp_cuda_model *cm, const pp_model *m, int S, int s, const void *weights,
                     float *grads, const void *stash, void *work, const float *dout, float *din);
    void (*backward_input)(pp_cuda_model *cm, const pp_model *m, int S, int s, const void *weights,
                           void *stash, void *work, const float *dout, float *din);
    void (*backward_weight)(pp_cuda_model *cm, const pp_model *m, int S, int s, float *grads,
                            const void *stash, void *work);
} pp_cuda_model_impl;

extern const pp_cuda_model_impl pp_cuda_model_mlp;   /* mlp_cuda.cu */
extern const pp_cuda_model_impl pp_cuda_model_gpt;   /* gpt_cuda.cu */
extern const pp_cuda_model_impl pp_cuda_model_llama; /* llama_cuda.cu */

/* ------------------------------------------------------------------------ */
/* The stage code's context                                                  */

/* What the stage code works with: the model context, its stream and, with
 * bf16, where GEMM operands are rounded to (two workspace regions, as bf16;
 * NULL with fp32). Each entry point makes one for its workspace. */
typedef struct {
    pp_cuda_model *cm;
    cudaStream_t st;
    uint16_t *ca, *cb;
} run;

static inline run run_of(pp_cuda_model *cm, int bf16, void *ca, void *cb)
{
    run r = {cm, cm->st, NULL, NULL};
    if (bf16) {
        r.ca = (uint16_t *)ca;
        r.cb = (uint16_t *)cb;
    }
    return r;
}

/* ------------------------------------------------------------------------ */
/* GEMM: pp_gemm's row-major contract on cuBLAS                              */

/* C[M][N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when
 * ta/tb set; A is [M][K] (or [K][M] if ta), B is [K][N] (or [N][K] if tb).
 * A and B are fp32 (cublasSgemm), or with bf16 set bf16 (cublasGemmEx with
 * fp32 accumulation); C is fp32 either way.
 *
 * cuBLAS is column-major, and a row-major [R][S] matrix is, read
 * column-major, its transpose [S][R] with leading dimension S. So we ask
 * cuBLAS for C^T = op(B)^T op(A)^T, an N x M column-major product:
 *   first operand op(B)^T (N x K): B as stored is, column-major, N x K with
 *     ld N when !tb (no transpose), or K x N with ld K when tb (transpose);
 *   second operand op(A)^T (K x M): A as stored is K x M with ld K when !ta,
 *     or M x K with ld M when ta (transpose);
 *   C^T is N x M with ld N.
 * The leading dimensions are those of pp_gemm's cblas row-major call. As
 * with the BLAS, beta == 0 does not read C. K == 0 leaves C = beta * C (the
 * BLAS would reject a leading dimension of 0). */
static inline void gemm(const run *r, int ta, int tb, int M, int N, int K, float alpha,
                        const void *A, const void *B, int bf16, float beta, float *C)
{
    cublasHandle_t blas = r->cm->blas;
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        if (beta == 0.0f)
            cudaCheck(cudaMemsetAsync(C, 0, (size_t)M * (size_t)N * sizeof(float), r->st));
        else if (beta != 1.0f)
            cublasCheck(cublasSscal(blas, M * N, &beta, C, 1));
        return;
    }
    int lda = ta ? M : K;
    int ldb = tb ? K : N;
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (bf16)
        cublasCheck(cublasGemmEx(blas, opb, opa, N, M, K, &alpha, B, CUDA_R_16BF, ldb, A,
                                 CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    else
        cublasCheck(cublasSgemm(blas, opb, opa, N, M, K, &alpha, (const float *)B, ldb,
                                (const float *)A, lda, &beta, C, N));
}

/* n activations rounded to bf16 into dst (ca or cb); returns dst. */
static inline const uint16_t *rounded(const run *r, const float *x, size_t n, uint16_t *dst)
{
    cudaCheck(pp_cu_f32_to_bf16(x, dst, n, r->st));
    return dst;
}

/* A weight GEMM's activation operand as the GEMM takes it: fp32 as it is;
 * with bf16 weights rounded into ca. */
static inline const float *operand(const run *, const float *A, size_t, const float *) { return A; }
static inline const uint16_t *operand(const run *r, const float *A, size_t n, const uint16_t *)
{
    return rounded(r, A, n, r->ca);
}
static inline int is_bf16(const float *) { return 0; }
static inline int is_bf16(const uint16_t *) { return 1; }

/* A GEMM of activations A (fp32) with weights W from the compute copy, in
 * B's place: fp32 as it is; with bf16 weights, A rounded into ca first. */
template <typename W>
static inline void gemm_w(const run *r, int ta, int tb, int M, int N, int K, const float *A,
                          const W *w, float beta, float *C)
{
    gemm(r, ta, tb, M, N, K, 1.0f, operand(r, A, (size_t)M * K, w), w, is_bf16(w), beta, C);
}

/* A weight-gradient GEMM, C += op(A) op(B) of two activations: with bf16
 * both rounded first (A into ca, B into cb). When the caller said the
 * gradients hold zeros (pp_cuda_model_grads_zero: the first backward of a
 * step into freshly zeroed gradients) it writes C = op(A) op(B) instead:
 * beta 0 reads no C (0 + x is x, so the same numbers, -0 aside), and an
 * H100 ran a beta-1 weight-gradient GEMM in 260 us against 112 us at beta
 * 0 (tests/bench/HISTORY.md). Every stage writes each weight's gradient
 * region with one such GEMM per backward, so no GEMM overwrites another's. */
static inline void gemm_grad(const run *r, int ta, int tb, int M, int N, int K, const float *A,
                             const float *B, float *C)
{
    float beta = r->cm->grads_zero ? 0.0f : 1.0f;
    if (!r->ca)
        gemm(r, ta, tb, M, N, K, 1.0f, A, B, 0, beta, C);
    else
        gemm(r, ta, tb, M, N, K, 1.0f, rounded(r, A, (size_t)M * K, r->ca),
             rounded(r, B, (size_t)K * N, r->cb), 1, beta, C);
}

/* gemm_grad with B a stashed activation (a stash layout's `act` region,
 * isa/gpt_layout.h): fp32, or with bf16 the bf16 values the forward's GEMM
 * read, taken as they are (no rounding pass; A is rounded into ca). */
static inline void gemm_grad_act(const run *r, int ta, int tb, int M, int N, int K, const float *A,
                                 const void *B, float *C)
{
    if (!r->ca) {
        gemm_grad(r, ta, tb, M, N, K, A, (const float *)B, C);
        return;
    }
    float beta = r->cm->grads_zero ? 0.0f : 1.0f;
    gemm(r, ta, tb, M, N, K, 1.0f, rounded(r, A, (size_t)M * K, r->ca), B, 1, beta, C);
}

/* gemm_grad_act with A also given as the GEMM takes it: fp32 (A16 unused),
 * or with bf16 A16, A's bf16 values rounded once already for another GEMM
 * too; A16 NULL: A rounded here (into ca). */
static inline void gemm_grad_pre(const run *r, int ta, int tb, int M, int N, int K, const float *A,
                                 const void *A16, const void *B, float *C)
{
    if (!r->ca || !A16) {
        gemm_grad_act(r, ta, tb, M, N, K, A, B, C);
        return;
    }
    float beta = r->cm->grads_zero ? 0.0f : 1.0f;
    gemm(r, ta, tb, M, N, K, 1.0f, A16, B, 1, beta, C);
}

/* gemm_w with A16 as in gemm_grad_pre (A16 NULL: gemm_w itself). */
template <typename W>
static inline void gemm_w_pre(const run *r, int ta, int tb, int M, int N, int K, const float *A,
                              const void *A16, const W *w, float beta, float *C)
{
    if (!A16)
        gemm_w(r, ta, tb, M, N, K, A, w, beta, C);
    else
        gemm(r, ta, tb, M, N, K, 1.0f, A16, w, is_bf16(w), beta, C);
}

static inline void copy_d2d(const run *r, void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes > 0)
        cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, r->st));
}

/* ------------------------------------------------------------------------ */
/* Fused epilogues (gemm_lt.h)                                               */

/* The epilogues a site asks for. cuBLASLt takes the bias in D's type
 * (fp32), so with a bf16 compute copy (bf16 biases) the bias epilogues are
 * PP_LT_NONE: never fused. */
static inline pp_lt_epilogue epi_bias(const float *bias, const float *c)
{
    pp_lt_epilogue e = {PP_LT_BIAS, bias, NULL, c};
    return e;
}
static inline pp_lt_epilogue epi_bias(const uint16_t *, const float *)
{
    pp_lt_epilogue e = {PP_LT_NONE, NULL, NULL, NULL};
    return e;
}
static inline pp_lt_epilogue epi_gelu_aux_bias(const float *bias, float *aux)
{
    pp_lt_epilogue e = {PP_LT_GELU_AUX_BIAS, bias, aux, NULL};
    return e;
}
static inline pp_lt_epilogue epi_gelu_aux_bias(const uint16_t *, float *)
{
    pp_lt_epilogue e = {PP_LT_NONE, NULL, NULL, NULL};
    return e;
}
static inline pp_lt_epilogue epi_dgelu(const float *aux)
{
    pp_lt_epilogue e = {PP_LT_DGELU, NULL, const_cast<float *>(aux), NULL};
    return e;
}
/* A bf16 aux (the bf16 stash's fch): the epilogue reads fp32 aux, so never
 * fused; the GEMM and pp_cu_gelu_backward_bf16x. */
static inline pp_lt_epilogue epi_dgelu(const uint16_t *)
{
    pp_lt_epilogue e = {PP_LT_NONE, NULL, NULL, NULL};
    return e;
}

/* D = the fused GEMM (gemm()'s contract, alpha 1), when the epilogues are on
 * and cuBLASLt has an algorithm for it: 1. Otherwise 0, nothing enqueued,
 * and the caller runs gemm() and its kernel. */
static inline int gemm_fused(const run *r, int ta, int tb, int M, int N, int K, const void *A,
                             const void *B, int bf16, pp_lt_epilogue e, float *D)
{
    if (!r->cm->epilogues)
        return 0;
    return pp_lt_gemm(r->cm->lt, r->st, ta, tb, M, N, K, A, B, bf16, &e, D);
}

#endif
