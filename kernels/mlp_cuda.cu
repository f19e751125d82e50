/* mlp_cuda.cu - the mlp model's pipeline stages on a GPU (see model_cuda.h;
 * model_cuda.cu dispatches here for PP_MODEL_MLP): the twin of mlp.c, step
 * for step, with the GEMMs on cuBLAS (cuda_stage.h) and everything else in
 * the kernels of cuda_kernels.h. The notation is mlp.c's: B = batch, C = context, D = C * embed, F = ffn, V = 256,
 * nb = blocks per stage.
 *
 * Parameters: exactly mlp.c's layout (a params or grads array may be
 * copied between the CPU and the GPU as it is). F and B read the stage's
 * compute copy (model.h): the fp32 weights, or with bf16 a bf16 copy at the
 * same element offsets. The stage code is a template over the weights'
 * type W (float or uint16_t), instantiated once per precision.
 *
 * Precision bf16 (mlp.c's arithmetic): every GEMM takes bf16 operands
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
 * Stash: the same regions at the same offsets as mlp.c's stash (one
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
 * left them). Everything else has mlp.c's meaning: tokens; per block x_k,
 * u_k, mean_k, rstd_k, h_k, a_k; the head's xh, z, meanf, rstdf; and the
 * split region's dy_k, dh_k, du_k, duf and dx0.
 * Workspace: mlp.c's (logits, dh, du, dx; with bf16 ca and cb, bf16
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_stage.h"
#include "../isa/mlp_layout.h"

extern "C" {
#include "model.h"
}

/* ------------------------------------------------------------------------ */
/* Layouts: mlp.c's (mlp_layout.h); on the last stage the stash's probs
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

/* The bf16 operand regions of this stage's workspace. */
static run run_for(pp_cuda_model *cm, const shape *sh, const work_layout *Wk, void *work)
{
    return run_of(cm, sh->bf16, (char *)work + Wk->ca, (char *)work + Wk->cb);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* Block k's activations in the stash (mlp.c's layout): written by F,
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
    const run rr = run_for(cm, sh, &y.Wk, work), *r = &rr;
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

static void mlp_forward(pp_cuda_model *cm, const pp_model *m, int S, int s,
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

/* The reverse of block_forward, in mlp.c's parts: dh = (dy W2) *
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
    const run rr = run_for(cm, sh, Wk, work), *r = &rr;
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

static void mlp_backward(pp_cuda_model *cm, const pp_model *m, int S, int s,
                            const void *weights, float *grads, const void *stash, void *work,
                            const float *dout, float *din)
{
    if (m->precision == PP_PREC_BF16)
        backward_walk(cm, m, S, s, (const uint16_t *)weights, grads, stash, work, dout, din);
    else
        backward_walk(cm, m, S, s, (const float *)weights, grads, stash, work, dout, din);
}

static void mlp_backward_input(pp_cuda_model *cm, const pp_model *m, int S, int s,
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
static void mlp_backward_weight(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                   float *grads, const void *stash, void *work)
{
    layouts y = layouts_of(m, S, s);
    const shape *sh = &y.sh;
    const param_layout *P = &y.P;
    const stash_layout *L = &y.L;
    const run rr = run_for(cm, sh, &y.Wk, work), *r = &rr;
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

extern const pp_cuda_model_impl pp_cuda_model_mlp = {mlp_forward, mlp_backward,
                                                     mlp_backward_input, mlp_backward_weight};
