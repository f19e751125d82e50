/* model_cuda.cu - the demo model's pipeline stages on a GPU (see
 * model_cuda.h): the twin of model.c, step for step, with the GEMMs on
 * cuBLAS and everything else in the kernels of cuda_kernels.h. The notation
 * is model.c's: B = batch, C = context, D = C * embed, F = ffn, V = 256,
 * nb = blocks per stage.
 *
 * Parameters: exactly model.c's layout (a params or grads array may be
 * copied between the CPU and the GPU as it is). F and B read the stage's
 * compute copy (model.h): the fp32 weights, or with bf16 a bf16 copy at the
 * same element offsets. The stage code is a template over the weights'
 * type W (float or uint16_t), instantiated once per precision.
 *
 * Precision bf16 (model.c's arithmetic): every GEMM takes bf16 operands
 * and accumulates and writes fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F). A
 * weight operand is the compute copy itself; an activation operand (u, a,
 * z, dy, dh, dlogits, and both operands of a weight-gradient GEMM) is first
 * rounded to bf16 (pp_cu_f32_to_bf16, round to nearest even, as the CPU's
 * pp_f32_to_bf16) into the workspace's ca (first operand) or cb (second)
 * region, of which it uses half. The kernels that read parameters
 * read the bf16 copy (the _bf16w variants, as overloads); everything else,
 * stash, gradients and loss included, is fp32. The CPU rounds the same
 * operands, so the two differ by summation order, as with fp32. Precision
 * fp32 runs exactly the fp32 code as before: cublasSgemm in the default
 * math mode (no TF32).
 *
 * Stash: the same regions at the same offsets as model.c's stash (one
 * layout, mlp_layout.h), so it fits pp_stage_stash_bytes (and
 * pp_stage_stash_bytes_split) by construction.
 * Two regions of the last stage hold something else on the GPU, because
 * its forward computes the loss gradient in the same pass as the loss:
 *   CPU probs   [B][V]  -> dlogits [B][V] = (softmax - onehot) * loss_scale,
 *                          written by F, read by B and W (never modified)
 *   CPU targets [B]     -> loss    [B] float, the rows' cross-entropy (F's
 *                          scratch: the targets are read straight from the
 *                          tokens, so B needs no copy of them)
 * and the split region's dlogits [B][V] is unused (W reads dlogits where F
 * left them). Everything else has model.c's meaning: tokens; per block x_k,
 * u_k, mean_k, rstd_k, h_k, a_k; the head's xh, z, meanf, rstdf; and the
 * split region's dy_k, dh_k, du_k, duf and dx0.
 * Workspace: model.c's (logits, dh, du, dx; with bf16 ca and cb, bf16
 * here), so pp_stage_workspace_bytes bounds it; logits is F's only (B
 * starts from the dlogits F stashed).
 * As on the CPU, B writes only the workspace and the split tail of the
 * stash it receives as const, so B may be repeated on the same stash.
 *
 * Every call only enqueues work on the context's stream; the one host
 * synchronisation is pp_cuda_loss_take. */
#include "model_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "gemm_lt.h"
#include "mlp_layout.h"

extern "C" {
#include "model.h"
}

struct pp_cuda_model {
    cudaStream_t st;
    cublasHandle_t blas;
    pp_lt *lt;      /* cuBLASLt: handle, workspace, the fused problems' cache */
    int epilogues;  /* fused epilogues where cuBLASLt offers them (default 1) */
    double *d_loss; /* summed cross-entropy since the last pp_cuda_loss_take */
};

/* ------------------------------------------------------------------------ */
/* Layouts: model.c's (mlp_layout.h); on the last stage the stash's probs
 * region holds dlogits and its targets region the rows' loss (file header). */

typedef struct {
    shape sh;
    param_layout P;
    stash_layout L;
    work_layout Wk;
} layouts;

static layouts layouts_of(const pp_model *m, int S, int s)
{
    layouts y;
    y.sh = shape_of(m, S, s);
    y.P = param_layout_of(&y.sh);
    y.L = stash_layout_of(&y.sh);
    y.Wk = work_layout_of(&y.sh);
    return y;
}

/* ------------------------------------------------------------------------ */
/* The stage code's context                                                  */

/* What the stage code works with: the model context, its stream and, with
 * bf16, where GEMM operands are rounded to (the workspace's ca and cb
 * regions, as bf16; NULL with fp32). Each entry point makes one for its
 * workspace. */
typedef struct {
    pp_cuda_model *cm;
    cudaStream_t st;
    uint16_t *ca, *cb;
} run;

static run run_of(pp_cuda_model *cm, const shape *sh, const work_layout *Wk, void *work)
{
    run r = {cm, cm->st, NULL, NULL};
    if (sh->bf16) {
        r.ca = (uint16_t *)((char *)work + Wk->ca);
        r.cb = (uint16_t *)((char *)work + Wk->cb);
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
static void gemm(const run *r, int ta, int tb, int M, int N, int K, float alpha, const void *A,
                 const void *B, int bf16, float beta, float *C)
{
    cublasHandle_t blas = r->cm->blas;
    if (M <= 0 || N <= 0) return;
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
static const uint16_t *rounded(const run *r, const float *x, size_t n, uint16_t *dst)
{
    cudaCheck(pp_cu_f32_to_bf16(x, dst, n, r->st));
    return dst;
}

/* A weight GEMM's activation operand as the GEMM takes it: fp32 as it is;
 * with bf16 weights rounded into ca. */
static const float *operand(const run *, const float *A, size_t, const float *) { return A; }
static const uint16_t *operand(const run *r, const float *A, size_t n, const uint16_t *)
{
    return rounded(r, A, n, r->ca);
}
static int is_bf16(const float *) { return 0; }
static int is_bf16(const uint16_t *) { return 1; }

/* A GEMM of activations A (fp32) with weights W from the compute copy, in
 * B's place: fp32 as it is; with bf16 weights, A rounded into ca first. */
template <typename W>
static void gemm_w(const run *r, int ta, int tb, int M, int N, int K, const float *A,
                   const W *w, float beta, float *C)
{
    gemm(r, ta, tb, M, N, K, 1.0f, operand(r, A, (size_t)M * K, w), w, is_bf16(w), beta, C);
}

/* A weight-gradient GEMM, C += op(A) op(B) of two activations: with bf16
 * both rounded first (A into ca, B into cb). */
static void gemm_grad(const run *r, int ta, int tb, int M, int N, int K, const float *A,
                      const float *B, float *C)
{
    if (!r->ca)
        gemm(r, ta, tb, M, N, K, 1.0f, A, B, 0, 1.0f, C);
    else
        gemm(r, ta, tb, M, N, K, 1.0f, rounded(r, A, (size_t)M * K, r->ca),
             rounded(r, B, (size_t)K * N, r->cb), 1, 1.0f, C);
}

static void copy_d2d(const run *r, void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes > 0)
        cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, r->st));
}

/* ------------------------------------------------------------------------ */
/* Fused epilogues (gemm_lt.h)                                               */


/* The epilogues a site asks for. cuBLASLt takes the bias in D's type
 * (fp32), so with a bf16 compute copy (bf16 biases) the bias epilogues are
 * PP_LT_NONE: never fused. */
static pp_lt_epilogue epi_bias(const float *bias, const float *c)
{
    pp_lt_epilogue e = {PP_LT_BIAS, bias, NULL, c};
    return e;
}
static pp_lt_epilogue epi_bias(const uint16_t *, const float *)
{
    pp_lt_epilogue e = {PP_LT_NONE, NULL, NULL, NULL};
    return e;
}
static pp_lt_epilogue epi_gelu_aux_bias(const float *bias, float *aux)
{
    pp_lt_epilogue e = {PP_LT_GELU_AUX_BIAS, bias, aux, NULL};
    return e;
}
static pp_lt_epilogue epi_gelu_aux_bias(const uint16_t *, float *)
{
    pp_lt_epilogue e = {PP_LT_NONE, NULL, NULL, NULL};
    return e;
}
static pp_lt_epilogue epi_dgelu(const float *aux)
{
    pp_lt_epilogue e = {PP_LT_DGELU, NULL, const_cast<float *>(aux), NULL};
    return e;
}

/* D = the fused GEMM (gemm()'s contract, alpha 1), when the epilogues are on
 * and cuBLASLt has an algorithm for it: 1. Otherwise 0, nothing enqueued,
 * and the caller runs gemm() and its kernel. */
static int gemm_fused(const run *r, int ta, int tb, int M, int N, int K, const void *A,
                      const void *B, int bf16, pp_lt_epilogue e, float *D)
{
    if (!r->cm->epilogues) return 0;
    return pp_lt_gemm(r->cm->lt, r->st, ta, tb, M, N, K, A, B, bf16, &e, D);
}

/* ------------------------------------------------------------------------ */
/* Context                                                                   */

static int create_fail(pp_cuda_model *cm, char *err, size_t errlen, const char *what,
                       const char *why)
{
    if (err && errlen) snprintf(err, errlen, "%s failed: %s", what, why);
    if (cm) {
        if (cm->blas) (void)cublasDestroy(cm->blas); /* best effort: already failing */
        if (cm->lt) pp_lt_destroy(cm->lt);
        if (cm->d_loss) (void)cudaFree(cm->d_loss);
        free(cm);
    }
    return -1;
}

int pp_cuda_model_create(pp_cuda_model **out, cudaStream_t st, char *err, size_t errlen)
{
    *out = NULL;
    pp_cuda_model *cm = (pp_cuda_model *)calloc(1, sizeof *cm);
    if (!cm) return create_fail(NULL, err, errlen, "malloc", "out of memory");
    cm->st = st;
    cm->epilogues = 1;

    cudaError_t ce = cudaMalloc((void **)&cm->d_loss, sizeof(double));
    if (ce != cudaSuccess) {
        cm->d_loss = NULL;
        return create_fail(cm, err, errlen, "cudaMalloc (loss accumulator)",
                           cudaGetErrorString(ce));
    }
    ce = cudaMemsetAsync(cm->d_loss, 0, sizeof(double), st);
    if (ce != cudaSuccess)
        return create_fail(cm, err, errlen, "cudaMemsetAsync (loss accumulator)",
                           cudaGetErrorString(ce));

    cublasStatus_t bs = cublasCreate(&cm->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cm->blas = NULL;
        return create_fail(cm, err, errlen, "cublasCreate", cublasGetStatusString(bs));
    }
    bs = cublasSetStream(cm->blas, st);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return create_fail(cm, err, errlen, "cublasSetStream", cublasGetStatusString(bs));
    /* FP32 GEMMs in full FP32: the default math mode, never TF32, so the GPU
     * matches the CPU up to summation order. Set explicitly so the intent
     * survives a change of cuBLAS defaults. */
    bs = cublasSetMathMode(cm->blas, CUBLAS_DEFAULT_MATH);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return create_fail(cm, err, errlen, "cublasSetMathMode", cublasGetStatusString(bs));
    /* cuBLASLt for the fused epilogues, with its workspace
     * (PP_LT_WORKSPACE_BYTES, 32 MiB): allocated here, never in a step. */
    char lerr[256];
    if (pp_lt_create(&cm->lt, lerr, sizeof lerr))
        return create_fail(cm, err, errlen, "cuBLASLt set-up", lerr);
    *out = cm;
    return 0;
}

void pp_cuda_model_destroy(pp_cuda_model *cm)
{
    if (!cm) return;
    /* cublasDestroy synchronises the device (cuBLAS documents it), so no
     * forward still adds to d_loss when it is freed. */
    cublasCheck(cublasDestroy(cm->blas));
    pp_lt_destroy(cm->lt);
    cudaCheck(cudaFree(cm->d_loss));
    free(cm);
}

cudaStream_t pp_cuda_model_stream(const pp_cuda_model *cm) { return cm->st; }

void pp_cuda_model_set_epilogues(pp_cuda_model *cm, int on) { cm->epilogues = on != 0; }

double pp_cuda_loss_take(pp_cuda_model *cm)
{
    double loss = 0.0;
    cudaCheck(cudaMemcpyAsync(&loss, cm->d_loss, sizeof loss, cudaMemcpyDeviceToHost, cm->st));
    cudaCheck(cudaStreamSynchronize(cm->st));
    cudaCheck(cudaMemsetAsync(cm->d_loss, 0, sizeof(double), cm->st));
    return loss;
}

/* ------------------------------------------------------------------------ */
/* Initialisation and the compute copy                                       */

void pp_cuda_stage_init(pp_cuda_model *cm, const pp_model *m, int S, int s, uint64_t seed,
                        float *params)
{
    size_t n = pp_stage_param_count(m, S, s);
    if (n == 0) return; /* a middle stage without blocks */
    float *host = (float *)malloc(n * sizeof(float));
    if (!host) {
        fprintf(stderr, "ppvm: out of memory initialising stage %d (%zu floats)\n", s, n);
        pp_cuda_fatal();
    }
    pp_stage_init(m, S, s, seed, host);
    /* On the context's stream (a plain cudaMemcpy may return before the copy
     * lands, unordered with a non-blocking stream), then wait: start-up only. */
    cudaCheck(cudaMemcpyAsync(params, host, n * sizeof(float), cudaMemcpyHostToDevice, cm->st));
    cudaCheck(cudaStreamSynchronize(cm->st));
    free(host);
}

void pp_cuda_stage_compute_copy(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                const float *master, void *copy)
{
    size_t n = pp_stage_param_count(m, S, s);
    if (m->precision == PP_PREC_BF16)
        cudaCheck(pp_cu_f32_to_bf16(master, (uint16_t *)copy, n, cm->st));
    else if (copy != master && n > 0)
        cudaCheck(cudaMemcpyAsync(copy, master, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                  cm->st));
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* Block k's activations in the stash (model.c's layout): written by F,
 * only read by B and W (hence the cast from const). */
typedef struct {
    float *x, *u, *mean, *rstd, *h, *a;
} block_acts;

static block_acts block_acts_of(const stash_layout *L, const void *stash, int k)
{
    char *blk = const_cast<char *>(static_cast<const char *>(stash)) + L->blocks +
                (size_t)k * L->block_stride;
    block_acts b = {(float *)blk, (float *)(blk + L->u), (float *)(blk + L->mean),
                    (float *)(blk + L->rstd), (float *)(blk + L->h), (float *)(blk + L->a)};
    return b;
}

/* y = x + gelu(LN(x) W1^T + b1) W2^T + b2, saving u = LN(x), its mean and
 * rstd, h and a for the backward. y must not alias x. */
template <typename W>
static void block_forward(const run *r, const shape *sh, const param_layout *P, const W *p,
                          const block_acts *s, float *y)
{
    int B = sh->B, D = sh->D, F = sh->F;
    cudaCheck(pp_cu_layernorm_forward(s->x, p + P->ln_g, p + P->ln_b, B, D, s->u, s->mean,
                                      s->rstd, r->st));
    int bf16 = is_bf16(p);
    /* h = u W1^T + b1, a = gelu(h): one GEMM with a GELU_AUX_BIAS epilogue
     * (D = a, aux = h), or the GEMM and pp_cu_bias_gelu_forward */
    const void *u = operand(r, s->u, (size_t)B * D, p);
    if (!gemm_fused(r, 0, 1, B, F, D, u, p + P->W1, bf16, epi_gelu_aux_bias(p + P->b1, s->h),
                    s->a)) {
        gemm(r, 0, 1, B, F, D, 1.0f, u, p + P->W1, bf16, 0.0f, s->h);
        cudaCheck(pp_cu_bias_gelu_forward(s->h, p + P->b1, s->a, B, F, r->st));
    }
    /* y = (a W2^T + x) + b2: one GEMM with C = x (beta 1) and a BIAS
     * epilogue, or the GEMM and pp_cu_residual_bias_add (the same order) */
    const void *a = operand(r, s->a, (size_t)B * F, p);
    if (!gemm_fused(r, 0, 1, B, D, F, a, p + P->W2, bf16, epi_bias(p + P->b2, s->x), y)) {
        gemm(r, 0, 1, B, D, F, 1.0f, a, p + P->W2, bf16, 0.0f, y);
        cudaCheck(pp_cu_residual_bias_add(y, s->x, p + P->b2, B, D, r->st));
    }
}

/* Where x_k lives: the stash for block inputs and the head's input; the
 * caller's `out` for the output of a non-final stage. */
static float *x_slot(const shape *sh, const stash_layout *L, char *st, float *out, int k)
{
    if (k < sh->nb) return (float *)(st + L->blocks + (size_t)k * L->block_stride);
    return sh->last ? (float *)(st + L->xh) : out;
}

/* z = LN_f(xh), logits = z Wh^T + bh; then, in one pass, the rows'
 * cross-entropy and dlogits = (softmax - onehot) * loss_scale; the summed
 * loss goes to the accumulator. Targets: the last column of the tokens,
 * stride C + 1. */
template <typename W>
static void head_forward(const run *r, const shape *sh, const param_layout *P,
                         const stash_layout *L, const W *params, const int32_t *tgt, char *st,
                         float *logits, float loss_scale)
{
    int B = sh->B, D = sh->D;
    float *z = (float *)(st + L->z);
    float *dlogits = (float *)(st + L->probs);
    float *loss = (float *)(st + L->targets);
    cudaCheck(pp_cu_layernorm_forward((const float *)(st + L->xh), params + P->lnf_g,
                                      params + P->lnf_b, B, D, z, (float *)(st + L->meanf),
                                      (float *)(st + L->rstdf), r->st));
    /* logits = z Wh^T + bh: a BIAS epilogue, or the GEMM and pp_cu_bias_add */
    int bf16 = is_bf16(params);
    const void *zo = operand(r, z, (size_t)B * D, params);
    if (!gemm_fused(r, 0, 1, B, PP_VOCAB, D, zo, params + P->Wh, bf16,
                    epi_bias(params + P->bh, NULL), logits)) {
        gemm(r, 0, 1, B, PP_VOCAB, D, 1.0f, zo, params + P->Wh, bf16, 0.0f, logits);
        cudaCheck(pp_cu_bias_add(logits, params + P->bh, B, PP_VOCAB, r->st));
    }
    cudaCheck(pp_cu_softmax_xent_fused(logits, tgt + sh->C, sh->C + 1, B, PP_VOCAB, loss_scale,
                                       dlogits, loss, r->st));
    cudaCheck(pp_cu_sum_into(loss, B, r->cm->d_loss, r->st));
}

template <typename W>
static void forward(pp_cuda_model *cm, const pp_model *m, int S, int s, const W *params,
                    const void *in, const int32_t *tgt, void *stash, void *work, float *out,
                    float loss_scale)
{
    layouts y = layouts_of(m, S, s);
    const shape *sh = &y.sh;
    const param_layout *P = &y.P;
    const stash_layout *L = &y.L;
    const run rr = run_of(cm, sh, &y.Wk, work), *r = &rr;
    char *st = (char *)stash;

    float *x0 = x_slot(sh, L, st, out, 0);
    if (sh->first) {
        int32_t *tokens = (int32_t *)(st + L->tokens);
        copy_d2d(r, tokens, in, pp_tokens_bytes(m));
        cudaCheck(pp_cu_embedding_forward(tokens, sh->B, sh->C, params + P->E, sh->E, x0,
                                          r->st));
    } else {
        copy_d2d(r, x0, in, pp_act_bytes(m)); /* nothing to do when in is out (nb == 0) */
    }
    for (int k = 0; k < sh->nb; k++) {
        block_acts acts = block_acts_of(L, st, k);
        block_forward(r, sh, P, params + P->blocks + (size_t)k * P->block_stride, &acts,
                      x_slot(sh, L, st, out, k + 1));
    }
    if (sh->last)
        head_forward(r, sh, P, L, params, tgt, st, (float *)((char *)work + y.Wk.logits),
                     loss_scale);
}

void pp_cuda_stage_forward(pp_cuda_model *cm, const pp_model *m, int S, int s,
                           const void *weights, const void *in, const int32_t *tgt, void *stash,
                           void *work, float *out, float loss_scale)
{
    if (m->precision == PP_PREC_BF16)
        forward(cm, m, S, s, (const uint16_t *)weights, in, tgt, stash, work, out, loss_scale);
    else
        forward(cm, m, S, s, (const float *)weights, in, tgt, stash, work, out, loss_scale);
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

/* Stash regions saved by the forward, read-only here. */
static const float *saved(const void *stash, size_t off)
{
    return (const float *)((const char *)stash + off);
}

/* The reverse of block_forward, in model.c's parts: dh = (dy W2) *
 * gelu'(h); du = dh W1; the weight gradients from dy, dh and du; dx = dy +
 * LN_backward(du). dx may be dy's buffer (dy is consumed by then); du must
 * be a buffer of its own (the layer norm's backward reads du after
 * accumulating into dx). */
template <typename W>
static void block_dh(const run *r, const shape *sh, const param_layout *P, const W *p,
                     const float *h, const float *dy, float *dh)
{
    int B = sh->B, D = sh->D, F = sh->F;
    /* dh = (dy W2) * gelu'(h): a DGELU epilogue (aux = h), or the GEMM
     * (da = dy W2) and pp_cu_gelu_backward */
    int bf16 = is_bf16(p);
    const void *dyo = operand(r, dy, (size_t)B * D, p);
    if (!gemm_fused(r, 0, 0, B, F, D, dyo, p + P->W2, bf16, epi_dgelu(h), dh)) {
        gemm(r, 0, 0, B, F, D, 1.0f, dyo, p + P->W2, bf16, 0.0f, dh);
        cudaCheck(pp_cu_gelu_backward(h, dh, dh, (size_t)B * F, r->st));
    }
}

template <typename W>
static void block_du(const run *r, const shape *sh, const param_layout *P, const W *p,
                     const float *dh, float *du)
{
    int B = sh->B, D = sh->D, F = sh->F;
    gemm_w(r, 0, 0, B, D, F, dh, p + P->W1, 0.0f, du); /* du = dh W1 */
}

/* The layer norm's parameter pass needs no gamma (so W needs no params). */
static void block_weight_grads(const run *r, const shape *sh, const param_layout *P, float *g,
                               const block_acts *s, const float *dy, const float *dh,
                               const float *du)
{
    int B = sh->B, D = sh->D, F = sh->F;
    gemm_grad(r, 1, 0, D, F, B, dy, s->a, g + P->W2); /* dW2 += dy^T a */
    cudaCheck(pp_cu_bias_grad(dy, B, D, g + P->b2, r->st));
    gemm_grad(r, 1, 0, F, D, B, dh, s->u, g + P->W1); /* dW1 += dh^T u */
    cudaCheck(pp_cu_bias_grad(dh, B, F, g + P->b1, r->st));
    cudaCheck(pp_cu_layernorm_backward(s->x, (const float *)NULL, s->mean, s->rstd, du, B, D,
                                       NULL, g + P->ln_g, g + P->ln_b, r->st));
}

/* dx = dy + LN_backward(du): the residual copy, then the layer norm's input
 * gradient accumulated onto it. */
template <typename W>
static void block_dx(const run *r, const shape *sh, const param_layout *P, const W *p,
                     const block_acts *s, const float *dy, const float *du, float *dx)
{
    int B = sh->B, D = sh->D;
    copy_d2d(r, dx, dy, (size_t)B * D * sizeof(float)); /* residual path */
    cudaCheck(pp_cu_layernorm_backward(s->x, p + P->ln_g, s->mean, s->rstd, du, B, D, dx, NULL,
                                       NULL, r->st));
}

static void head_weight_grads(const run *r, const shape *sh, const param_layout *P,
                              const stash_layout *L, float *grads, const void *stash,
                              const float *duf)
{
    int B = sh->B, D = sh->D;
    const float *dlogits = saved(stash, L->probs);
    gemm_grad(r, 1, 0, PP_VOCAB, D, B, dlogits, saved(stash, L->z), grads + P->Wh);
    cudaCheck(pp_cu_bias_grad(dlogits, B, PP_VOCAB, grads + P->bh, r->st));
    cudaCheck(pp_cu_layernorm_backward(saved(stash, L->xh), (const float *)NULL,
                                       saved(stash, L->meanf), saved(stash, L->rstdf), duf, B,
                                       D, NULL, grads + P->lnf_g, grads + P->lnf_b, r->st));
}

/* dxh = LN_f_backward(duf): the layer norm accumulates, so dx starts at 0. */
template <typename W>
static void head_dx(const run *r, const shape *sh, const param_layout *P,
                    const stash_layout *L, const W *params, const void *stash,
                    const float *duf, float *dx)
{
    int B = sh->B, D = sh->D;
    cudaCheck(cudaMemsetAsync(dx, 0, (size_t)B * D * sizeof(float), r->st));
    cudaCheck(pp_cu_layernorm_backward(saved(stash, L->xh), params + P->lnf_g,
                                       saved(stash, L->meanf), saved(stash, L->rstdf), duf, B,
                                       D, dx, NULL, NULL, r->st));
}

/* The backward walk, fused (grads non-NULL: weight gradients as it goes) or
 * the input half of a split backward (grads NULL: dy_k, dh_k, du_k, duf and
 * the embedding's gradient are saved in the stash's split region for W). */
template <typename W>
static void backward_walk(pp_cuda_model *cm, const pp_model *m, int S, int s, const W *params,
                          float *grads, const void *stash, void *work, const float *dout,
                          float *din)
{
    layouts y = layouts_of(m, S, s);
    const shape *sh = &y.sh;
    const param_layout *P = &y.P;
    const stash_layout *L = &y.L;
    const work_layout *Wk = &y.Wk;
    const run rr = run_of(cm, sh, Wk, work), *r = &rr;
    /* The split tail of the stash is writable by contract. */
    char *st = const_cast<char *>(static_cast<const char *>(stash)), *wk = (char *)work;
    float *dx = (float *)(wk + Wk->dx);
    size_t xbytes = (size_t)sh->B * sh->D * sizeof(float);

    /* The running gradient w.r.t. the current point of the stage. The very
     * last input gradient of a non-first stage is written straight to din. */
    const float *dy = dout;
    if (sh->last) {
        float *dst = (sh->nb == 0 && !sh->first) ? din : dx;
        float *duf = (float *)(grads ? wk + Wk->du : st + L->wduf);
        gemm_w(r, 0, 0, sh->B, sh->D, PP_VOCAB, saved(stash, L->probs), params + P->Wh, 0.0f,
               duf); /* duf = dlogits Wh */
        if (grads) head_weight_grads(r, sh, P, L, grads, stash, duf);
        head_dx(r, sh, P, L, params, stash, duf, dst);
        dy = dst;
    }
    for (int k = sh->nb - 1; k >= 0; k--) {
        block_acts acts = block_acts_of(L, stash, k);
        size_t wblk = L->wblocks + (size_t)k * L->wblock_stride;
        size_t pk = P->blocks + (size_t)k * P->block_stride;
        float *dst = (k == 0 && !sh->first) ? din : dx;
        float *dh = (float *)(grads ? wk + Wk->dh : st + wblk + L->wdh);
        float *du = (float *)(grads ? wk + Wk->du : st + wblk + L->wdu);
        block_dh(r, sh, P, params + pk, acts.h, dy, dh);
        block_du(r, sh, P, params + pk, dh, du);
        if (grads)
            block_weight_grads(r, sh, P, grads + pk, &acts, dy, dh, du);
        else
            copy_d2d(r, st + wblk, dy, xbytes); /* dy_k, before dx may overwrite it */
        block_dx(r, sh, P, params + pk, &acts, dy, du, dst);
        dy = dst;
    }
    if (sh->first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L->tokens);
        if (grads)
            cudaCheck(pp_cu_embedding_backward(tokens, sh->B, sh->C, dy, sh->E, grads + P->E,
                                               r->st));
        else
            copy_d2d(r, st + L->wdx0, dy, xbytes);
    } else {
        /* A middle stage without blocks is the identity. */
        copy_d2d(r, din, dy, pp_act_bytes(m));
    }
}

void pp_cuda_stage_backward(pp_cuda_model *cm, const pp_model *m, int S, int s,
                            const void *weights, float *grads, const void *stash, void *work,
                            const float *dout, float *din)
{
    if (m->precision == PP_PREC_BF16)
        backward_walk(cm, m, S, s, (const uint16_t *)weights, grads, stash, work, dout, din);
    else
        backward_walk(cm, m, S, s, (const float *)weights, grads, stash, work, dout, din);
}

void pp_cuda_stage_backward_input(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                  const void *weights, void *stash, void *work,
                                  const float *dout, float *din)
{
    if (m->precision == PP_PREC_BF16)
        backward_walk(cm, m, S, s, (const uint16_t *)weights, NULL, stash, work, dout, din);
    else
        backward_walk(cm, m, S, s, (const float *)weights, NULL, stash, work, dout, din);
}

/* Exactly the weight-gradient work of the fused walk, in its order, from
 * what B saved (with bf16 rounding the same operands again). */
void pp_cuda_stage_backward_weight(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                   float *grads, const void *stash, void *work)
{
    layouts y = layouts_of(m, S, s);
    const shape *sh = &y.sh;
    const param_layout *P = &y.P;
    const stash_layout *L = &y.L;
    const run rr = run_of(cm, sh, &y.Wk, work), *r = &rr;
    if (sh->last) head_weight_grads(r, sh, P, L, grads, stash, saved(stash, L->wduf));
    for (int k = sh->nb - 1; k >= 0; k--) {
        block_acts acts = block_acts_of(L, stash, k);
        size_t wblk = L->wblocks + (size_t)k * L->wblock_stride;
        size_t pk = P->blocks + (size_t)k * P->block_stride;
        block_weight_grads(r, sh, P, grads + pk, &acts, saved(stash, wblk),
                           saved(stash, wblk + L->wdh), saved(stash, wblk + L->wdu));
    }
    if (sh->first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L->tokens);
        cudaCheck(pp_cu_embedding_backward(tokens, sh->B, sh->C, saved(stash, L->wdx0), sh->E,
                                           grads + P->E, r->st));
    }
}
