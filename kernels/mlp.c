/* mlp.c - the demo model's blocks on the CPU (pp_model_mlp, stage.h):
 * deterministic initialisation, the embedding, a block's forward, backward
 * and weight-gradient parts, and the head with its loss, which the stage
 * skeleton (stage.c) runs as F(s,b), B(s,b) and the split B and W. The
 * sizes and layouts are isa/mlp_layout.h's.
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
 *                  u_k      act   [B][D]    its layer norm's output
 *                  mean_k   float [B]       the layer norm's row means
 *                  rstd_k   float [B]       and 1/sqrt(var + eps)
 *                  h_k      float [B][F]    pre-GELU
 *                  a_k      act   [B][F]    post-GELU
 *   s == S-1:      xh       float [B][D]    the head's input (= x_nb)
 *                  z        act   [B][D]    LN_f's output
 *                  meanf    float [B]       LN_f's row means
 *                  rstdf    float [B]       and 1/sqrt(var + eps)
 *                  probs    float [B][V]    softmax output
 *                  targets  int32 [B]       the target bytes, compacted
 * act: float, or with bf16 the bf16 value a GEMM consumes (isa/gpt_layout.h's
 * rule: F makes it in fp32 in a scratch region, cb for u, the workspace's dh
 * for a and du for z, and stores it rounded, pp_act_put; B and W widen it),
 * the same bits as an fp32 stash rounded by every GEMM, half the bytes.
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
#include "stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "init.h"
#include "tensor_shard.h"

/* ------------------------------------------------------------------------ */
/* Initialisation (init.h's counter-based generator). */

/* Scales: linear weights U(-1,1)/sqrt(fan_in) keep activations O(1) at any
 * width. The embedding is U(-1,1), the same rule for a one-hot input
 * (fan_in 1); a 0.1 scale starved the head of signal and trained visibly
 * slower. W2 gets half its rule so the residual stream grows slowly with
 * depth. The head's 1/sqrt(D) keeps the initial logits small (std ~0.6 of
 * LN_f's unit-variance rows), so the loss starts near ln 256. Layer norms
 * start as the identity normalisation (gamma 1, beta 0); biases at zero. */
static void mlp_init(const pp_model *m, int S, int s, uint64_t seed, float *params)
{
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    uint64_t key = pp_init_stage_key(seed, s);
    size_t D = (size_t)sh.D, F = (size_t)sh.F;

    memset(params, 0, P.total * sizeof *params);
    if (sh.first)
        init_uniform(params, P.E, (size_t)PP_VOCAB * (size_t)sh.E, 1.0f, key);
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

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* Block k's activations in the stash (the layout in this file's header):
 * written by F, only read by B and W (hence the cast from const). */
typedef struct {
    float *x;
    void *u; /* act */
    float *mean, *rstd, *h;
    void *a; /* act */
} block_acts;

static block_acts block_acts_of(const stash_layout *L, const void *stash, int k)
{
    char *blk = (char *)(uintptr_t)stash + L->blocks + (size_t)k * L->block_stride;
    block_acts b = {
        (float *)blk,          blk + L->u, (float *)(blk + L->mean), (float *)(blk + L->rstd),
        (float *)(blk + L->h), blk + L->a};
    return b;
}

/* Where F makes an act in fp32: the stash itself, or with bf16 scratch. */
static float *act_made(const gemms *g, void *stash, float *scratch)
{
    return g->bf16 ? scratch : (float *)stash;
}

/* y = x + gelu(LN(x) W1^T + b1) W2^T + b2, saving u = LN(x), its mean and
 * rstd, h and a for the backward. */
static void block_forward(const shape *sh, const gemms *g, const param_layout *P, const float *p,
                          const block_acts *s, float *a_scratch, float *y)
{
    int B = sh->B, D = sh->D, F = sh->F;
    float *u = act_made(g, s->u, g->cb), *a = act_made(g, s->a, a_scratch);
    pp_layernorm_forward(s->x, p + P->ln_g, p + P->ln_b, B, D, u, s->mean, s->rstd);
    pp_act_put(g, u, s->u, (size_t)B * D);
    pp_gemm_aw(g, 0, 1, B, F, D, u, p + P->W1, 0.0f, s->h);
    pp_bias_gelu_forward(s->h, p + P->b1, a, B, F); /* one pass: h += b1, a = gelu(h) */
    pp_act_put(g, a, s->a, (size_t)B * F);
    if (pp_tensor_hook_active()) {
        /* tensor parallel (tensor_shard.h): W2 is row-parallel, so a W2^T
         * is this rank's partial sum; summed over the group before b2 and
         * the residual, which every rank adds once */
        pp_gemm_aw(g, 0, 1, B, D, F, a, p + P->W2, 0.0f, y);
        pp_tensor_allreduce(y, (size_t)B * D);
        for (size_t i = 0; i < (size_t)B * D; i++)
            y[i] += s->x[i];
    } else {
        memcpy(y, s->x, (size_t)B * D * sizeof *y); /* residual: accumulate onto x */
        pp_gemm_aw(g, 0, 1, B, D, F, a, p + P->W2, 1.0f, y);
    }
    pp_bias_add(y, p + P->b2, B, D);
}

/* z = LN_f(xh), logits = z Wh^T + bh; returns the summed cross-entropy. */
static double head_forward(const shape *sh, const gemms *g, const param_layout *P,
                           const stash_layout *L, const float *params, const int32_t *tgt, char *st,
                           float *logits, float *z_scratch)
{
    int B = sh->B, D = sh->D;
    float *z = act_made(g, st + L->z, z_scratch);
    int32_t *targets = (int32_t *)(st + L->targets);
    for (int r = 0; r < B; r++)
        targets[r] = tgt[(size_t)r * (sh->C + 1) + sh->C];
    pp_layernorm_forward((const float *)(st + L->xh), params + P->lnf_g, params + P->lnf_b, B, D, z,
                         (float *)(st + L->meanf), (float *)(st + L->rstdf));
    pp_act_put(g, z, st + L->z, (size_t)B * D);
    pp_gemm_aw(g, 0, 1, B, PP_VOCAB, D, z, params + P->Wh, 0.0f, logits);
    pp_bias_add(logits, params + P->bh, B, PP_VOCAB);
    return pp_softmax_xent_forward(logits, targets, 1, B, PP_VOCAB, (float *)(st + L->probs));
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

/* The reverse of block_forward, in parts so that a split backward can run
 * the weight part later: dh = (dy W2) * gelu'(h); du = dh W1; the weight
 * gradients from dy, dh and du; dx = dy + LN_backward(du). dx may be dy's
 * buffer: dy is consumed before dx is written. du must be a buffer of its
 * own: the layer norm's backward accumulates into dx while reading du. */
static void block_dh(const shape *sh, const gemms *g, const param_layout *P, const float *p,
                     const float *h, const float *dy, float *dh)
{
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm_aw(g, 0, 0, B, F, D, dy, p + P->W2, 0.0f, dh); /* da = dy W2 */
    pp_gelu_backward(h, dh, dh, (size_t)B * F);            /* dh = da * gelu'(h) */
}

static void block_du(const shape *sh, const gemms *g, const param_layout *P, const float *p,
                     const float *dh, float *du)
{
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm_aw(g, 0, 0, B, D, F, dh, p + P->W1, 0.0f, du); /* du = dh W1 */
    /* tensor parallel: W1 is column-parallel, so du is a partial sum (the f
     * operator's backward); a no-op when the hook is unset */
    pp_tensor_allreduce(du, (size_t)B * D);
}

/* dgamma, dbeta need no gamma: the layer norm's parameter pass reads only
 * x, mean, rstd and du, which is why W needs no parameters. */
static void block_weight_grads(const shape *sh, const gemms *mm, const param_layout *P, float *g,
                               const block_acts *s, const float *dy, const float *dh,
                               const float *du)
{
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm_as(mm, 1, 0, D, F, B, dy, s->a, g + P->W2); /* dW2 += dy^T a */
    pp_bias_grad(dy, B, D, g + P->b2);
    pp_gemm_as(mm, 1, 0, F, D, B, dh, s->u, g + P->W1); /* dW1 += dh^T u */
    pp_bias_grad(dh, B, F, g + P->b1);
    pp_layernorm_backward(s->x, NULL, s->mean, s->rstd, du, B, D, NULL, g + P->ln_g, g + P->ln_b);
}

static void block_dx(const shape *sh, const param_layout *P, const float *p, const block_acts *s,
                     const float *dy, const float *du, float *dx)
{
    int B = sh->B, D = sh->D;
    if (dx != dy)
        memcpy(dx, dy, (size_t)B * D * sizeof *dx); /* residual path */
    pp_layernorm_backward(s->x, p + P->ln_g, s->mean, s->rstd, du, B, D, dx, NULL, NULL);
}

/* dlogits = (probs - onehot) * loss_scale. */
static void head_dlogits(const shape *sh, const stash_layout *L, const void *stash,
                         float loss_scale, float *dlogits)
{
    const int32_t *targets = (const int32_t *)((const char *)stash + L->targets);
    pp_softmax_xent_backward(pp_saved(stash, L->probs), targets, 1, sh->B, PP_VOCAB, loss_scale,
                             dlogits);
}

static void head_weight_grads(const shape *sh, const gemms *g, const param_layout *P,
                              const stash_layout *L, float *grads, const void *stash,
                              const float *dlogits, const float *duf)
{
    int B = sh->B, D = sh->D;
    pp_gemm_as(g, 1, 0, PP_VOCAB, D, B, dlogits, (const char *)stash + L->z, grads + P->Wh);
    pp_bias_grad(dlogits, B, PP_VOCAB, grads + P->bh);
    pp_layernorm_backward(pp_saved(stash, L->xh), NULL, pp_saved(stash, L->meanf),
                          pp_saved(stash, L->rstdf), duf, B, D, NULL, grads + P->lnf_g,
                          grads + P->lnf_b);
}

/* dxh = LN_f_backward(duf): the layer norm accumulates, so dx starts at 0. */
static void head_dx(const shape *sh, const param_layout *P, const stash_layout *L,
                    const float *params, const void *stash, const float *duf, float *dx)
{
    int B = sh->B, D = sh->D;
    memset(dx, 0, (size_t)B * D * sizeof *dx);
    pp_layernorm_backward(pp_saved(stash, L->xh), params + P->lnf_g, pp_saved(stash, L->meanf),
                          pp_saved(stash, L->rstdf), duf, B, D, dx, NULL, NULL);
}

/* ------------------------------------------------------------------------ */
/* The blocks, as the stage skeleton (stage.c) calls them                    */

static void mlp_open(pp_stage *c)
{
    c->y.mlp = mlp_layouts_of(c->m, c->S, c->s);
    c->f = mlp_frame_of(&c->y.mlp);
}

static void mlp_embed_forward(const pp_stage *c, const int32_t *tokens, float *x0)
{
    const mlp_layouts *y = &c->y.mlp;
    pp_embedding_forward(tokens, y->sh.B, y->sh.C, c->params + y->P.E, y->sh.E, x0);
}

static void mlp_embed_backward(const pp_stage *c, const int32_t *tokens, const float *dx0,
                               float *grads)
{
    const mlp_layouts *y = &c->y.mlp;
    pp_embedding_backward(tokens, y->sh.B, y->sh.C, dx0, y->sh.E, grads + y->P.E);
}

static void mlp_block_forward(const pp_stage *c, int k, const float *p, float *out)
{
    const mlp_layouts *y = &c->y.mlp;
    block_acts acts = block_acts_of(&y->L, c->st, k);
    block_forward(&y->sh, &c->g, &y->P, p, &acts, (float *)(c->wk + y->W.dh), out);
}

/* Fused (gk non-NULL): dh and du in the workspace, the weight gradients as
 * they exist. B of a split backward: dh_k and du_k in the split region. */
static void mlp_block_backward(const pp_stage *c, int k, const float *p, float *gk, const float *dy,
                               float *dx)
{
    const mlp_layouts *y = &c->y.mlp;
    block_acts acts = block_acts_of(&y->L, c->st, k);
    char *wblk = c->st + y->L.wblocks + (size_t)k * y->L.wblock_stride;
    float *dh = (float *)(gk ? c->wk + y->W.dh : wblk + y->L.wdh);
    float *du = (float *)(gk ? c->wk + y->W.du : wblk + y->L.wdu);
    block_dh(&y->sh, &c->g, &y->P, p, acts.h, dy, dh);
    block_du(&y->sh, &c->g, &y->P, p, dh, du);
    if (gk)
        block_weight_grads(&y->sh, &c->g, &y->P, gk, &acts, dy, dh, du);
    block_dx(&y->sh, &y->P, p, &acts, dy, du, dx);
}

static void mlp_block_weight(const pp_stage *c, int k, float *gk)
{
    const mlp_layouts *y = &c->y.mlp;
    block_acts acts = block_acts_of(&y->L, c->st, k);
    size_t wblk = y->L.wblocks + (size_t)k * y->L.wblock_stride;
    block_weight_grads(&y->sh, &c->g, &y->P, gk, &acts, pp_saved(c->st, wblk),
                       pp_saved(c->st, wblk + y->L.wdh), pp_saved(c->st, wblk + y->L.wdu));
}

static double mlp_head_forward(const pp_stage *c, const int32_t *tgt)
{
    const mlp_layouts *y = &c->y.mlp;
    return head_forward(&y->sh, &c->g, &y->P, &y->L, c->params, tgt, c->st,
                        (float *)(c->wk + y->W.logits), (float *)(c->wk + y->W.du));
}

/* dlogits and duf in the workspace (fused) or the split region (B). */
static void mlp_head_backward(const pp_stage *c, float *grads, float loss_scale, float *dx)
{
    const mlp_layouts *y = &c->y.mlp;
    float *dlogits = (float *)(grads ? c->wk + y->W.logits : c->st + y->L.wdlogits);
    float *duf = (float *)(grads ? c->wk + y->W.du : c->st + y->L.wduf);
    head_dlogits(&y->sh, &y->L, c->st, loss_scale, dlogits);
    pp_gemm_aw(&c->g, 0, 0, y->sh.B, y->sh.D, PP_VOCAB, dlogits, c->params + y->P.Wh, 0.0f,
               duf); /* duf = dlogits Wh */
    if (grads)
        head_weight_grads(&y->sh, &c->g, &y->P, &y->L, grads, c->st, dlogits, duf);
    head_dx(&y->sh, &y->P, &y->L, c->params, c->st, duf, dx);
}

static void mlp_head_weight(const pp_stage *c, float *grads)
{
    const mlp_layouts *y = &c->y.mlp;
    head_weight_grads(&y->sh, &c->g, &y->P, &y->L, grads, c->st, pp_saved(c->st, y->L.wdlogits),
                      pp_saved(c->st, y->L.wduf));
}

const pp_model_impl pp_model_mlp = {
    .name = "mlp",
    .open = mlp_open,
    .init = mlp_init,
    .embed_forward = mlp_embed_forward,
    .embed_backward = mlp_embed_backward,
    .block_forward = mlp_block_forward,
    .block_backward = mlp_block_backward,
    .block_weight = mlp_block_weight,
    .head_forward = mlp_head_forward,
    .head_backward = mlp_head_backward,
    .head_weight = mlp_head_weight,
};
