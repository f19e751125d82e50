/* model_cuda.cu - the demo model's pipeline stages on a GPU (see
 * model_cuda.h): the twin of model.c, step for step, with the GEMMs on
 * cuBLAS and everything else in the kernels of cuda_kernels.h. The notation
 * is model.c's: B = batch, C = context, D = C * embed, F = ffn, V = 256,
 * nb = blocks per stage.
 *
 * Parameters: exactly model.c's layout (a params or grads array may be
 * copied between the CPU and the GPU as it is).
 *
 * Stash: the same regions at the same offsets as model.c's stash (one
 * layout, model_layout.h), so it fits pp_stage_stash_bytes (and
 * pp_stage_stash_bytes_split) by construction.
 * Three regions of the last stage hold something else on the GPU, because
 * its forward computes the loss gradient in the same pass as the loss:
 *   CPU probs   [B][V]  -> dlogits [B][V] = (softmax - onehot) * loss_scale,
 *                          written by F, read by B and W (never modified)
 *   CPU targets [B]     -> loss    [B] float, the rows' cross-entropy (F's
 *                          scratch: the targets are read straight from the
 *                          tokens, so B needs no copy of them)
 *   CPU logits  [B][V]  -> logits in F (scratch); unused by B
 * and the split region's dlogits [B][V] is unused (W reads dlogits where F
 * left them). Everything else has model.c's meaning: tokens; per block x_k,
 * u_k, mean_k, rstd_k, h_k, a_k; the head's xh, z, meanf, rstdf; the dh, du
 * and dx scratch; and the split region's dy_k, dh_k, du_k, duf and dx0.
 * As on the CPU, B writes only the scratch and split tails of the stash it
 * receives as const, so B may be repeated on the same stash.
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
#include "model_layout.h"

extern "C" {
#include "model.h"
}

struct pp_cuda_model {
    cudaStream_t st;
    cublasHandle_t blas;
    double *d_loss; /* summed cross-entropy since the last pp_cuda_loss_take */
};

/* ------------------------------------------------------------------------ */
/* Layouts: model.c's (model_layout.h); on the last stage the stash's probs
 * region holds dlogits and its targets region the rows' loss (file header). */

typedef struct {
    shape sh;
    param_layout P;
    stash_layout L;
} layouts;

static layouts layouts_of(const pp_model *m, int S, int s)
{
    layouts y;
    y.sh = shape_of(m, S, s);
    y.P = param_layout_of(&y.sh);
    y.L = stash_layout_of(&y.sh);
    return y;
}

/* ------------------------------------------------------------------------ */
/* GEMM: pp_gemm's row-major contract on cuBLAS                              */

/* C[M][N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when
 * ta/tb set; A is [M][K] (or [K][M] if ta), B is [K][N] (or [N][K] if tb).
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
static void gemm(pp_cuda_model *cm, int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, const float *B, float beta, float *C)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (beta == 0.0f)
            cudaCheck(cudaMemsetAsync(C, 0, (size_t)M * (size_t)N * sizeof(float), cm->st));
        else if (beta != 1.0f)
            cublasCheck(cublasSscal(cm->blas, M * N, &beta, C, 1));
        return;
    }
    int lda = ta ? M : K;
    int ldb = tb ? K : N;
    cublasCheck(cublasSgemm(cm->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                            N, M, K, &alpha, B, ldb, A, lda, &beta, C, N));
}

static void copy_d2d(pp_cuda_model *cm, void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes > 0)
        cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cm->st));
}

/* ------------------------------------------------------------------------ */
/* Context                                                                   */

static int create_fail(pp_cuda_model *cm, char *err, size_t errlen, const char *what,
                       const char *why)
{
    if (err && errlen) snprintf(err, errlen, "%s failed: %s", what, why);
    if (cm) {
        if (cm->blas) (void)cublasDestroy(cm->blas); /* best effort: already failing */
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
    *out = cm;
    return 0;
}

void pp_cuda_model_destroy(pp_cuda_model *cm)
{
    if (!cm) return;
    /* cublasDestroy synchronises the device (cuBLAS documents it), so no
     * forward still adds to d_loss when it is freed. */
    cublasCheck(cublasDestroy(cm->blas));
    cudaCheck(cudaFree(cm->d_loss));
    free(cm);
}

cudaStream_t pp_cuda_model_stream(const pp_cuda_model *cm) { return cm->st; }

double pp_cuda_loss_take(pp_cuda_model *cm)
{
    double loss = 0.0;
    cudaCheck(cudaMemcpyAsync(&loss, cm->d_loss, sizeof loss, cudaMemcpyDeviceToHost, cm->st));
    cudaCheck(cudaStreamSynchronize(cm->st));
    cudaCheck(cudaMemsetAsync(cm->d_loss, 0, sizeof(double), cm->st));
    return loss;
}

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */

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
static void block_forward(pp_cuda_model *cm, const shape *sh, const param_layout *P,
                          const float *p, const block_acts *s, float *y)
{
    int B = sh->B, D = sh->D, F = sh->F;
    cudaCheck(pp_cu_layernorm_forward(s->x, p + P->ln_g, p + P->ln_b, B, D, s->u, s->mean,
                                      s->rstd, cm->st));
    gemm(cm, 0, 1, B, F, D, 1.0f, s->u, p + P->W1, 0.0f, s->h);
    cudaCheck(pp_cu_bias_gelu_forward(s->h, p + P->b1, s->a, B, F, cm->st));
    gemm(cm, 0, 1, B, D, F, 1.0f, s->a, p + P->W2, 0.0f, y);
    cudaCheck(pp_cu_residual_bias_add(y, s->x, p + P->b2, B, D, cm->st));
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
static void head_forward(pp_cuda_model *cm, const shape *sh, const param_layout *P,
                         const stash_layout *L, const float *params, const int32_t *tgt,
                         char *st, float loss_scale)
{
    int B = sh->B, D = sh->D;
    float *logits = (float *)(st + L->logits), *z = (float *)(st + L->z);
    float *dlogits = (float *)(st + L->probs);
    float *loss = (float *)(st + L->targets);
    cudaCheck(pp_cu_layernorm_forward((const float *)(st + L->xh), params + P->lnf_g,
                                      params + P->lnf_b, B, D, z, (float *)(st + L->meanf),
                                      (float *)(st + L->rstdf), cm->st));
    gemm(cm, 0, 1, B, PP_VOCAB, D, 1.0f, z, params + P->Wh, 0.0f, logits);
    cudaCheck(pp_cu_bias_add(logits, params + P->bh, B, PP_VOCAB, cm->st));
    cudaCheck(pp_cu_softmax_xent_fused(logits, tgt + sh->C, sh->C + 1, B, PP_VOCAB, loss_scale,
                                       dlogits, loss, cm->st));
    cudaCheck(pp_cu_sum_into(loss, B, cm->d_loss, cm->st));
}

void pp_cuda_stage_forward(pp_cuda_model *cm, const pp_model *m, int S, int s,
                           const float *params, const void *in, const int32_t *tgt, void *stash,
                           float *out, float loss_scale)
{
    layouts y = layouts_of(m, S, s);
    const shape *sh = &y.sh;
    const param_layout *P = &y.P;
    const stash_layout *L = &y.L;
    char *st = (char *)stash;

    float *x0 = x_slot(sh, L, st, out, 0);
    if (sh->first) {
        int32_t *tokens = (int32_t *)(st + L->tokens);
        copy_d2d(cm, tokens, in, pp_tokens_bytes(m));
        cudaCheck(pp_cu_embedding_forward(tokens, sh->B, sh->C, params + P->E, sh->E, x0,
                                          cm->st));
    } else {
        copy_d2d(cm, x0, in, pp_act_bytes(m)); /* nothing to do when in is out (nb == 0) */
    }
    for (int k = 0; k < sh->nb; k++) {
        block_acts acts = block_acts_of(L, st, k);
        block_forward(cm, sh, P, params + P->blocks + (size_t)k * P->block_stride, &acts,
                      x_slot(sh, L, st, out, k + 1));
    }
    if (sh->last) head_forward(cm, sh, P, L, params, tgt, st, loss_scale);
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
static void block_dh(pp_cuda_model *cm, const shape *sh, const param_layout *P, const float *p,
                     const float *h, const float *dy, float *dh)
{
    int B = sh->B, D = sh->D, F = sh->F;
    gemm(cm, 0, 0, B, F, D, 1.0f, dy, p + P->W2, 0.0f, dh); /* da = dy W2 */
    cudaCheck(pp_cu_gelu_backward(h, dh, dh, (size_t)B * F, cm->st));
}

static void block_du(pp_cuda_model *cm, const shape *sh, const param_layout *P, const float *p,
                     const float *dh, float *du)
{
    int B = sh->B, D = sh->D, F = sh->F;
    gemm(cm, 0, 0, B, D, F, 1.0f, dh, p + P->W1, 0.0f, du); /* du = dh W1 */
}

/* The layer norm's parameter pass needs no gamma (so W needs no params). */
static void block_weight_grads(pp_cuda_model *cm, const shape *sh, const param_layout *P,
                               float *g, const block_acts *s, const float *dy, const float *dh,
                               const float *du)
{
    int B = sh->B, D = sh->D, F = sh->F;
    gemm(cm, 1, 0, D, F, B, 1.0f, dy, s->a, 1.0f, g + P->W2); /* dW2 += dy^T a */
    cudaCheck(pp_cu_bias_grad(dy, B, D, g + P->b2, cm->st));
    gemm(cm, 1, 0, F, D, B, 1.0f, dh, s->u, 1.0f, g + P->W1); /* dW1 += dh^T u */
    cudaCheck(pp_cu_bias_grad(dh, B, F, g + P->b1, cm->st));
    cudaCheck(pp_cu_layernorm_backward(s->x, NULL, s->mean, s->rstd, du, B, D, NULL,
                                       g + P->ln_g, g + P->ln_b, cm->st));
}

/* dx = dy + LN_backward(du): the residual copy, then the layer norm's input
 * gradient accumulated onto it. */
static void block_dx(pp_cuda_model *cm, const shape *sh, const param_layout *P, const float *p,
                     const block_acts *s, const float *dy, const float *du, float *dx)
{
    int B = sh->B, D = sh->D;
    copy_d2d(cm, dx, dy, (size_t)B * D * sizeof(float)); /* residual path */
    cudaCheck(pp_cu_layernorm_backward(s->x, p + P->ln_g, s->mean, s->rstd, du, B, D, dx, NULL,
                                       NULL, cm->st));
}

static void head_weight_grads(pp_cuda_model *cm, const shape *sh, const param_layout *P,
                              const stash_layout *L, float *grads, const void *stash,
                              const float *duf)
{
    int B = sh->B, D = sh->D;
    const float *dlogits = saved(stash, L->probs);
    gemm(cm, 1, 0, PP_VOCAB, D, B, 1.0f, dlogits, saved(stash, L->z), 1.0f, grads + P->Wh);
    cudaCheck(pp_cu_bias_grad(dlogits, B, PP_VOCAB, grads + P->bh, cm->st));
    cudaCheck(pp_cu_layernorm_backward(saved(stash, L->xh), NULL, saved(stash, L->meanf),
                                       saved(stash, L->rstdf), duf, B, D, NULL,
                                       grads + P->lnf_g, grads + P->lnf_b, cm->st));
}

/* dxh = LN_f_backward(duf): the layer norm accumulates, so dx starts at 0. */
static void head_dx(pp_cuda_model *cm, const shape *sh, const param_layout *P,
                    const stash_layout *L, const float *params, const void *stash,
                    const float *duf, float *dx)
{
    int B = sh->B, D = sh->D;
    cudaCheck(cudaMemsetAsync(dx, 0, (size_t)B * D * sizeof(float), cm->st));
    cudaCheck(pp_cu_layernorm_backward(saved(stash, L->xh), params + P->lnf_g,
                                       saved(stash, L->meanf), saved(stash, L->rstdf), duf, B,
                                       D, dx, NULL, NULL, cm->st));
}

/* The backward walk, fused (grads non-NULL: weight gradients as it goes) or
 * the input half of a split backward (grads NULL: dy_k, dh_k, du_k, duf and
 * the embedding's gradient are saved in the stash's split region for W). */
static void backward_walk(pp_cuda_model *cm, const pp_model *m, int S, int s,
                          const float *params, float *grads, const void *stash,
                          const float *dout, float *din)
{
    layouts y = layouts_of(m, S, s);
    const shape *sh = &y.sh;
    const param_layout *P = &y.P;
    const stash_layout *L = &y.L;
    /* The scratch and split tails of the stash are writable by contract. */
    char *st = const_cast<char *>(static_cast<const char *>(stash));
    float *dx = (float *)(st + L->dx);
    size_t xbytes = (size_t)sh->B * sh->D * sizeof(float);

    /* The running gradient w.r.t. the current point of the stage. The very
     * last input gradient of a non-first stage is written straight to din. */
    const float *dy = dout;
    if (sh->last) {
        float *dst = (sh->nb == 0 && !sh->first) ? din : dx;
        float *duf = (float *)(st + (grads ? L->du : L->wduf));
        gemm(cm, 0, 0, sh->B, sh->D, PP_VOCAB, 1.0f, saved(stash, L->probs), params + P->Wh,
             0.0f, duf); /* duf = dlogits Wh */
        if (grads) head_weight_grads(cm, sh, P, L, grads, stash, duf);
        head_dx(cm, sh, P, L, params, stash, duf, dst);
        dy = dst;
    }
    for (int k = sh->nb - 1; k >= 0; k--) {
        block_acts acts = block_acts_of(L, stash, k);
        size_t wblk = L->wblocks + (size_t)k * L->wblock_stride;
        size_t pk = P->blocks + (size_t)k * P->block_stride;
        float *dst = (k == 0 && !sh->first) ? din : dx;
        float *dh = (float *)(st + (grads ? L->dh : wblk + L->wdh));
        float *du = (float *)(st + (grads ? L->du : wblk + L->wdu));
        block_dh(cm, sh, P, params + pk, acts.h, dy, dh);
        block_du(cm, sh, P, params + pk, dh, du);
        if (grads)
            block_weight_grads(cm, sh, P, grads + pk, &acts, dy, dh, du);
        else
            copy_d2d(cm, st + wblk, dy, xbytes); /* dy_k, before dx may overwrite it */
        block_dx(cm, sh, P, params + pk, &acts, dy, du, dst);
        dy = dst;
    }
    if (sh->first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L->tokens);
        if (grads)
            cudaCheck(pp_cu_embedding_backward(tokens, sh->B, sh->C, dy, sh->E, grads + P->E,
                                               cm->st));
        else
            copy_d2d(cm, st + L->wdx0, dy, xbytes);
    } else {
        /* A middle stage without blocks is the identity. */
        copy_d2d(cm, din, dy, pp_act_bytes(m));
    }
}

void pp_cuda_stage_backward(pp_cuda_model *cm, const pp_model *m, int S, int s,
                            const float *params, float *grads, const void *stash,
                            const float *dout, float *din)
{
    backward_walk(cm, m, S, s, params, grads, stash, dout, din);
}

void pp_cuda_stage_backward_input(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                  const float *params, const void *stash, const float *dout,
                                  float *din)
{
    backward_walk(cm, m, S, s, params, NULL, stash, dout, din);
}

/* Exactly the weight-gradient work of the fused walk, in its order, from
 * what B saved. */
void pp_cuda_stage_backward_weight(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                   float *grads, const void *stash)
{
    layouts y = layouts_of(m, S, s);
    const shape *sh = &y.sh;
    const param_layout *P = &y.P;
    const stash_layout *L = &y.L;
    if (sh->last) head_weight_grads(cm, sh, P, L, grads, stash, saved(stash, L->wduf));
    for (int k = sh->nb - 1; k >= 0; k--) {
        block_acts acts = block_acts_of(L, stash, k);
        size_t wblk = L->wblocks + (size_t)k * L->wblock_stride;
        size_t pk = P->blocks + (size_t)k * P->block_stride;
        block_weight_grads(cm, sh, P, grads + pk, &acts, saved(stash, wblk),
                           saved(stash, wblk + L->wdh), saved(stash, wblk + L->wdu));
    }
    if (sh->first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L->tokens);
        cudaCheck(pp_cu_embedding_backward(tokens, sh->B, sh->C, saved(stash, L->wdx0), sh->E,
                                           grads + P->E, cm->st));
    }
}
