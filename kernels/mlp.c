/* mlp.c - the demo model's pipeline stages on the CPU (pp_model_mlp, see
 * model.h):
 * parameter and stash sizes, FLOP counts, deterministic initialisation,
 * F(s,b), B(s,b) and plain SGD.
 *
 * Notation: B = batch, C = context, D = C * embed, F = ffn, V = 256,
 * nb = blocks per stage. Block k of a stage maps x_k -> x_{k+1}, pre-LN:
 *   u_k = LN(x_k; g, beta)     [B][D]  per row, eps 1e-5, biased variance
 *   h_k = u_k W1^T + b1        [B][F]
 *   a_k = gelu(h_k)            [B][F]
 *   x_{k+1} = x_k + a_k W2^T + b2
 * and the last stage's head, after a final layer norm:
 *   z = LN_f(x_nb; gf, betaf)  [B][D]
 *   logits = z Wh^T + bh       [B][V], softmax cross-entropy
 *
 * Stash layout (byte offsets; every region starts at a multiple of 16 so the
 * float and int32 views stay aligned in a 16-byte aligned malloc'd stash):
 *   s == 0:        tokens   int32 [B][C+1]  copy of the loaded microbatch
 *   each block k:  x_k      float [B][D]    the block's input
 *                  u_k      float [B][D]    its layer norm's output
 *                  mean_k   float [B]       the layer norm's row means
 *                  rstd_k   float [B]       and 1/sqrt(var + eps)
 *                  h_k      float [B][F]    pre-GELU
 *                  a_k      float [B][F]    post-GELU
 *   s == S-1:      xh       float [B][D]    the head's input (= x_nb)
 *                  z        float [B][D]    LN_f's output
 *                  meanf    float [B]       LN_f's row means
 *                  rstdf    float [B]       and 1/sqrt(var + eps)
 *                  probs    float [B][V]    softmax output
 *                  targets  int32 [B]       the target bytes, compacted
 * The last block's output of a non-final stage goes straight to `out`: B
 * does not need it. F writes the stash; B and W only read it (B can be
 * repeated on the same stash and gives the same result), except that a
 * split B writes the split region below.
 *
 * Workspace layout (pp_stage_workspace_bytes; contents meaningless between
 * calls, so a rank needs one, however many stashes it holds):
 *   s == S-1:      logits   float [B][V]    logits in F, dlogits in B
 *   nb > 0:        dh       float [B][F]    da, then dh, of the current block
 *   nb > 0 or s == S-1:
 *                  du       float [B][D]    gradient at the current layer
 *                                           norm's output (du_k or duf)
 *   always:        dx       float [B][D]    the running input gradient
 *   bf16:          ca, cb   float [B][max(D, F, V)]  GEMM operands rounded
 *                  wide     float [params]  the compute copy widened to fp32
 * It lets F and B run without allocating in the step loop.
 *
 * A split backward (B then W, pp_stage_backward_input/_weight) needs a larger
 * stash, pp_stage_stash_bytes_split: after the above, what B leaves for W:
 *   each block k:  dy_k     float [B][D]    gradient at the block's output
 *                  dh_k     float [B][F]    gradient before GELU
 *                  du_k     float [B][D]    gradient at u_k (for dg, dbeta)
 *   s == S-1:      dlogits  float [B][V]
 *                  duf      float [B][D]    gradient at z (for dgf, dbetaf)
 *   s == 0:        dx0      float [B][D]    gradient at the embedding's output
 * W then performs exactly the weight-gradient work the fused B performs
 * (GEMMs, bias sums and the layer norms' parameter passes), with the same
 * operands, so split and fused give the same bits. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "stage_gemm.h"
#include "init.h"
#include "../isa/mlp_layout.h"

/* ------------------------------------------------------------------------ */
/* Initialisation (init.h's counter-based generator). */

/* Scales: linear weights U(-1,1)/sqrt(fan_in) keep activations O(1) at any
 * width. The embedding is U(-1,1), the same rule for a one-hot input
 * (fan_in 1); a 0.1 scale starved the head of signal and trained visibly
 * slower. W2 gets half its rule so the residual stream grows slowly with
 * depth. The head's 1/sqrt(D) keeps the initial logits small (std ~0.6 of
 * LN_f's unit-variance rows), so the loss starts near ln 256. Layer norms
 * start as the identity normalisation (gamma 1, beta 0); biases at zero. */
static void mlp_init(const pp_model *m, int S, int s, uint64_t seed, float *params) {
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    uint64_t key = pp_init_stage_key(seed, s);
    size_t D = (size_t)sh.D, F = (size_t)sh.F;

    memset(params, 0, P.total * sizeof *params);
    if (sh.first) init_uniform(params, P.E, (size_t)PP_VOCAB * (size_t)sh.E, 1.0f, key);
    for (int k = 0; k < sh.nb; k++) {
        size_t base = P.blocks + (size_t)k * P.block_stride;
        fill(params + base + P.ln_g, D, 1.0f);
        init_uniform(params, base + P.W1, F * D, 1.0f / sqrtf((float)D), key);
        init_uniform(params, base + P.W2, D * F, 0.5f / sqrtf((float)F), key);
    }
    if (sh.last) {
        fill(params + P.lnf_g, D, 1.0f);
        init_uniform(params, P.Wh, (size_t)PP_VOCAB * D, 1.0f / sqrtf((float)D), key);
    }
}

/* ------------------------------------------------------------------------ */
/* Precision                                                                 */

/* With fp32 a GEMM is pp_gemm. With bf16 (model_desc.h) its operands are
 * bf16 values and it accumulates in fp32, which is cuBLAS's bf16 GEMM with
 * fp32 compute on the GPU: the weights already are bf16 values (the widened
 * compute copy), and the operands that are activations are rounded into
 * the workspace's ca (first operand) and cb (second) regions. A product of two
 * bf16 values is exact in fp32, so the GPU differs only in summation order,
 * as with fp32. */
typedef pp_stage_gemms gemms;

static gemms gemms_of(const shape *sh, const work_layout *W, void *work) {
    return pp_stage_gemms_of(sh->bf16, work, W->ca, W->cb);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* Block k's activations in the stash (the layout in this file's header):
 * written by F, only read by B and W (hence the cast from const). */
typedef struct {
    float *x, *u, *mean, *rstd, *h, *a;
} block_acts;

static block_acts block_acts_of(const stash_layout *L, const void *stash, int k) {
    char *blk = (char *)(uintptr_t)stash + L->blocks + (size_t)k * L->block_stride;
    block_acts b = {(float *)blk, (float *)(blk + L->u), (float *)(blk + L->mean),
                    (float *)(blk + L->rstd), (float *)(blk + L->h), (float *)(blk + L->a)};
    return b;
}

/* y = x + gelu(LN(x) W1^T + b1) W2^T + b2, saving u = LN(x), its mean and
 * rstd, h and a for the backward. */
static void block_forward(const shape *sh, const gemms *g, const param_layout *P, const float *p,
                          const block_acts *s, float *y) {
    int B = sh->B, D = sh->D, F = sh->F;
    pp_layernorm_forward(s->x, p + P->ln_g, p + P->ln_b, B, D, s->u, s->mean, s->rstd);
    pp_gemm_aw(g, 0, 1, B, F, D, s->u, p + P->W1, 0.0f, s->h);
    pp_bias_gelu_forward(s->h, p + P->b1, s->a, B, F); /* one pass: h += b1, a = gelu(h) */
    memcpy(y, s->x, (size_t)B * D * sizeof *y); /* residual: accumulate onto x */
    pp_gemm_aw(g, 0, 1, B, D, F, s->a, p + P->W2, 1.0f, y);
    pp_bias_add(y, p + P->b2, B, D);
}

/* Where x_k lives: the stash for block inputs and the head's input; the
 * caller's `out` for the output of a non-final stage. */
static float *x_slot(const shape *sh, const stash_layout *L, char *st, float *out, int k) {
    if (k < sh->nb) return (float *)(st + L->blocks + (size_t)k * L->block_stride);
    return sh->last ? (float *)(st + L->xh) : out;
}

/* z = LN_f(xh), logits = z Wh^T + bh; returns the summed cross-entropy. */
static double head_forward(const shape *sh, const gemms *g, const param_layout *P,
                           const stash_layout *L, const float *params, const int32_t *tgt,
                           char *st, float *logits) {
    int B = sh->B, D = sh->D;
    float *z = (float *)(st + L->z);
    int32_t *targets = (int32_t *)(st + L->targets);
    for (int r = 0; r < B; r++) targets[r] = tgt[(size_t)r * (sh->C + 1) + sh->C];
    pp_layernorm_forward((const float *)(st + L->xh), params + P->lnf_g, params + P->lnf_b, B, D,
                         z, (float *)(st + L->meanf), (float *)(st + L->rstdf));
    pp_gemm_aw(g, 0, 1, B, PP_VOCAB, D, z, params + P->Wh, 0.0f, logits);
    pp_bias_add(logits, params + P->bh, B, PP_VOCAB);
    return pp_softmax_xent_forward(logits, targets, 1, B, PP_VOCAB, (float *)(st + L->probs));
}

static double mlp_forward(const pp_model *m, int S, int s, const void *weights, const void *in,
                        const int32_t *tgt, void *stash, void *work, float *out) {
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    stash_layout L = stash_layout_of(&sh);
    work_layout W = work_layout_of(&sh);
    gemms g = gemms_of(&sh, &W, work);
    const float *params = pp_stage_params_of(sh.bf16, P.total, weights, (char *)work + W.wide);
    char *st = stash;

    float *x0 = x_slot(&sh, &L, st, out, 0);
    if (sh.first) {
        int32_t *tokens = (int32_t *)(st + L.tokens);
        memcpy(tokens, in, pp_tokens_bytes(m));
        pp_embedding_forward(tokens, sh.B, sh.C, params + P.E, sh.E, x0);
    } else {
        memmove(x0, in, pp_act_bytes(m)); /* memmove: in may be out when nb == 0 */
    }
    for (int k = 0; k < sh.nb; k++) {
        block_acts acts = block_acts_of(&L, st, k);
        block_forward(&sh, &g, &P, params + P.blocks + (size_t)k * P.block_stride, &acts,
                      x_slot(&sh, &L, st, out, k + 1));
    }
    double loss = sh.last ? head_forward(&sh, &g, &P, &L, params, tgt, st,
                                         (float *)((char *)work + W.logits))
                          : 0.0;
    return loss;
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

/* Stash regions saved by the forward, read-only here. */
static const float *saved(const void *stash, size_t off) {
    return (const float *)((const char *)stash + off);
}

/* The reverse of block_forward, in parts so that a split backward can run
 * the weight part later: dh = (dy W2) * gelu'(h); du = dh W1; the weight
 * gradients from dy, dh and du; dx = dy + LN_backward(du). dx may be dy's
 * buffer: dy is consumed before dx is written. du must be a buffer of its
 * own: the layer norm's backward accumulates into dx while reading du. */
static void block_dh(const shape *sh, const gemms *g, const param_layout *P, const float *p,
                     const float *h, const float *dy, float *dh) {
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm_aw(g, 0, 0, B, F, D, dy, p + P->W2, 0.0f, dh);  /* da = dy W2 */
    pp_gelu_backward(h, dh, dh, (size_t)B * F);           /* dh = da * gelu'(h) */
}

static void block_du(const shape *sh, const gemms *g, const param_layout *P, const float *p,
                     const float *dh, float *du) {
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm_aw(g, 0, 0, B, D, F, dh, p + P->W1, 0.0f, du); /* du = dh W1 */
}

/* dgamma, dbeta need no gamma: the layer norm's parameter pass reads only
 * x, mean, rstd and du, which is why W needs no parameters. */
static void block_weight_grads(const shape *sh, const gemms *mm, const param_layout *P, float *g,
                               const block_acts *s, const float *dy, const float *dh,
                               const float *du) {
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm_aa(mm, 1, 0, D, F, B, dy, s->a, g + P->W2); /* dW2 += dy^T a */
    pp_bias_grad(dy, B, D, g + P->b2);
    pp_gemm_aa(mm, 1, 0, F, D, B, dh, s->u, g + P->W1); /* dW1 += dh^T u */
    pp_bias_grad(dh, B, F, g + P->b1);
    pp_layernorm_backward(s->x, NULL, s->mean, s->rstd, du, B, D, NULL, g + P->ln_g,
                          g + P->ln_b);
}

static void block_dx(const shape *sh, const param_layout *P, const float *p,
                     const block_acts *s, const float *dy, const float *du, float *dx) {
    int B = sh->B, D = sh->D;
    if (dx != dy) memcpy(dx, dy, (size_t)B * D * sizeof *dx); /* residual path */
    pp_layernorm_backward(s->x, p + P->ln_g, s->mean, s->rstd, du, B, D, dx, NULL, NULL);
}

/* dlogits = (probs - onehot) * loss_scale. */
static void head_dlogits(const shape *sh, const stash_layout *L, const void *stash,
                         float loss_scale, float *dlogits) {
    const int32_t *targets = (const int32_t *)((const char *)stash + L->targets);
    pp_softmax_xent_backward(saved(stash, L->probs), targets, 1, sh->B, PP_VOCAB, loss_scale,
                             dlogits);
}

static void head_weight_grads(const shape *sh, const gemms *g, const param_layout *P,
                              const stash_layout *L, float *grads, const void *stash,
                              const float *dlogits, const float *duf) {
    int B = sh->B, D = sh->D;
    pp_gemm_aa(g, 1, 0, PP_VOCAB, D, B, dlogits, saved(stash, L->z), grads + P->Wh);
    pp_bias_grad(dlogits, B, PP_VOCAB, grads + P->bh);
    pp_layernorm_backward(saved(stash, L->xh), NULL, saved(stash, L->meanf),
                          saved(stash, L->rstdf), duf, B, D, NULL, grads + P->lnf_g,
                          grads + P->lnf_b);
}

/* dxh = LN_f_backward(duf): the layer norm accumulates, so dx starts at 0. */
static void head_dx(const shape *sh, const param_layout *P, const stash_layout *L,
                    const float *params, const void *stash, const float *duf, float *dx) {
    int B = sh->B, D = sh->D;
    memset(dx, 0, (size_t)B * D * sizeof *dx);
    pp_layernorm_backward(saved(stash, L->xh), params + P->lnf_g, saved(stash, L->meanf),
                          saved(stash, L->rstdf), duf, B, D, dx, NULL, NULL);
}

/* The backward walk, fused (grads non-NULL: weight gradients as it goes,
 * dh, du and dlogits in the workspace) or as the input half of a split
 * backward (grads NULL: dy, dh, du, dlogits, duf and the embedding's
 * gradient are saved in the stash's split region for W; dh, du and dlogits
 * are computed there in place). */
static void backward_walk(const pp_model *m, int S, int s, const void *weights, float *grads,
                          const void *stash, void *work, const float *dout, float *din,
                          float loss_scale) {
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    stash_layout L = stash_layout_of(&sh);
    work_layout W = work_layout_of(&sh);
    gemms g = gemms_of(&sh, &W, work);
    const float *params = pp_stage_params_of(sh.bf16, P.total, weights, (char *)work + W.wide);
    /* The split tail of the stash is writable by contract. */
    char *st = (char *)(uintptr_t)stash, *wk = work;
    float *dx = (float *)(wk + W.dx);
    size_t xbytes = (size_t)sh.B * sh.D * sizeof(float);

    /* The running gradient w.r.t. the current point of the stage. The very
     * last input gradient of a non-first stage is written straight to din. */
    const float *dy = dout;
    if (sh.last) {
        float *dlogits = (float *)(grads ? wk + W.logits : st + L.wdlogits);
        float *duf = (float *)(grads ? wk + W.du : st + L.wduf);
        float *dst = (sh.nb == 0 && !sh.first) ? din : dx;
        head_dlogits(&sh, &L, stash, loss_scale, dlogits);
        pp_gemm_aw(&g, 0, 0, sh.B, sh.D, PP_VOCAB, dlogits, params + P.Wh, 0.0f,
                duf); /* duf = dlogits Wh */
        if (grads) head_weight_grads(&sh, &g, &P, &L, grads, stash, dlogits, duf);
        head_dx(&sh, &P, &L, params, stash, duf, dst);
        dy = dst;
    }
    for (int k = sh.nb - 1; k >= 0; k--) {
        block_acts acts = block_acts_of(&L, stash, k);
        size_t wblk = L.wblocks + (size_t)k * L.wblock_stride;
        size_t pk = P.blocks + (size_t)k * P.block_stride;
        float *dst = (k == 0 && !sh.first) ? din : dx;
        float *dh = (float *)(grads ? wk + W.dh : st + wblk + L.wdh);
        float *du = (float *)(grads ? wk + W.du : st + wblk + L.wdu);
        block_dh(&sh, &g, &P, params + pk, acts.h, dy, dh);
        block_du(&sh, &g, &P, params + pk, dh, du);
        if (grads)
            block_weight_grads(&sh, &g, &P, grads + pk, &acts, dy, dh, du);
        else
            memcpy(st + wblk, dy, xbytes); /* dy_k, before dx may overwrite it */
        block_dx(&sh, &P, params + pk, &acts, dy, du, dst);
        dy = dst;
    }
    if (sh.first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L.tokens);
        if (grads)
            pp_embedding_backward(tokens, sh.B, sh.C, dy, sh.E, grads + P.E);
        else
            memcpy(st + L.wdx0, dy, xbytes);
    } else if (dy != din) {
        /* A middle stage without blocks is the identity. */
        memmove(din, dy, pp_act_bytes(m));
    }
}

static void mlp_backward(const pp_model *m, int S, int s, const void *weights, float *grads,
                       const void *stash, void *work, const float *dout, float *din,
                       float loss_scale) {
    backward_walk(m, S, s, weights, grads, stash, work, dout, din, loss_scale);
}

static void mlp_backward_input(const pp_model *m, int S, int s, const void *weights,
                             void *stash, void *work, const float *dout, float *din,
                             float loss_scale) {
    backward_walk(m, S, s, weights, NULL, stash, work, dout, din, loss_scale);
}

static void mlp_backward_weight(const pp_model *m, int S, int s, float *grads, const void *stash,
                              void *work) {
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    stash_layout L = stash_layout_of(&sh);
    work_layout W = work_layout_of(&sh);
    gemms g = gemms_of(&sh, &W, work);
    if (sh.last)
        head_weight_grads(&sh, &g, &P, &L, grads, stash, saved(stash, L.wdlogits),
                          saved(stash, L.wduf));
    for (int k = sh.nb - 1; k >= 0; k--) {
        block_acts acts = block_acts_of(&L, stash, k);
        size_t wblk = L.wblocks + (size_t)k * L.wblock_stride;
        size_t pk = P.blocks + (size_t)k * P.block_stride;
        block_weight_grads(&sh, &g, &P, grads + pk, &acts, saved(stash, wblk),
                           saved(stash, wblk + L.wdh), saved(stash, wblk + L.wdu));
    }
    if (sh.first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L.tokens);
        pp_embedding_backward(tokens, sh.B, sh.C, saved(stash, L.wdx0), sh.E, grads + P.E);
    }
}

const pp_model_impl pp_model_mlp = {
    .name = "mlp",
    .init = mlp_init,
    .forward = mlp_forward,
    .backward = mlp_backward,
    .backward_input = mlp_backward_input,
    .backward_weight = mlp_backward_weight,
};
