/* llama.c - a Llama-style transformer's layers on the CPU (pp_model_llama,
 * stage.h), which the stage skeleton (stage.c) runs as F(s,b), B(s,b) and
 * the split B and W. The sizes and FLOPs are isa/model_shape.c's, every
 * layout isa/llama_layout.h's.
 *
 * Notation: B = batch, T = context, C = embed, NH = heads, KV = kv_heads,
 * G = NH/KV, hs = C/NH, Kd = KV*hs, Q = C + 2Kd, F = ffn, V = vocab,
 * BT = B*T rows. No biases anywhere.
 * Stage 0 embeds:  x_0 = wte[token]                             [BT][C]
 * Layer l maps x -> y, pre-norm:
 *   n1   = RMSNorm(x; n1w)                   eps norm_eps, mean of squares
 *   qkvc = n1 wqkv^T                         [BT][Q], row [q | k | v], k
 *                                            and v KV heads of hs
 *   q, k rotated (rotary embeddings, rotate-half: pair i with i + hs/2,
 *                 angle t * rope_theta^(-2i/hs), t the position)
 *   qkv  = [q | k, v each repeated to NH heads: kv head j serves query heads
 *           jG .. jG+G-1]                    [BT][3C]
 *   atty = causal attention(qkv)             the GPT's kernel, scale 1/sqrt(hs)
 *   res  = x + atty wo^T
 *   n2   = RMSNorm(res; n2w)
 *   gu   = n2 wgu^T                          [BT][2F] = [gate | up]
 *   h    = silu(gate) * up                   SwiGLU
 *   y    = res + h wd^T
 * The last stage: nf = RMSNorm(x_L; nfw), logits = nf wlm^T, softmax
 * cross-entropy against every position's next token; F returns the sum.
 * With tie = 1 wlm is the token embedding: the last stage keeps its own
 * copy (initialised as stage 0's wte), and the pipeline sums the two
 * gradients before either optimizer step, so the copies stay equal.
 *
 * Initialisation (init.h): wte, wqkv, wgu and wlm uniform with std 0.02;
 * wo and wd further scaled by 1/sqrt(2 Ltotal); the norms' weights 1.
 *
 * Tensor parallelism (isa/tensor.h, tensor_shard.h): a rank of a plan with
 * tensor = T runs its shard, heads/T query and kv_heads/T key/value heads
 * (attention width A = C/T: q's width in qkvc and the attention's, C
 * elsewhere) and ffn/T; with the VM's all-reduce hook set, wo's and wd's
 * row-parallel products are summed over the group before the residual
 * (tensor_gemm.h's pp_row_parallel), and dn2 = dgu wgu and dn1 = dqkvc
 * wqkv before they are read (Megatron's g and f). Unset, the arithmetic is
 * the old one.
 *
 * The split backward saves, per layer, the gradients the weight GEMMs and
 * norm weights need (llama_layout.h's split region); W then does exactly
 * the fused backward's weight-gradient work on them, so B then W gives the
 * fused backward's bits. */
#include "stage.h"

#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "init.h"
#include "llama_acts.h"
#include "llama_kernels.h"
#include "tensor_gemm.h"
#include "tensor_shard.h"

typedef pp_stage_gemms gemms;

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */

static void llama_init(const pp_model *m, int S, int s, uint64_t seed, float *params)
{
    llama_shape sh = llama_shape_of(m, S, s);
    llama_param_layout P = llama_param_layout_of(&sh);
    uint64_t key = pp_init_stage_key(seed, s);
    size_t C = (size_t)sh.C, F = (size_t)sh.F, V = (size_t)sh.V, Q = (size_t)sh.Q;
    float a = 0.02f * sqrtf(3.0f);
    int Ltotal = 0;
    for (int i = 0; i < S; i++)
        Ltotal += (int)pp_model_layers(m, i);
    float ares = a / sqrtf(2.0f * (float)(Ltotal > 0 ? Ltotal : 1));

    memset(params, 0, P.total * sizeof *params);
    if (sh.first)
        init_uniform(params, P.wte, V * C, a, key);
    for (int l = 0; l < sh.L; l++) {
        size_t base = P.layers + (size_t)l * P.layer_stride;
        fill(params + base + P.n1w, C, 1.0f);
        init_uniform(params, base + P.wqkv, Q * C, a, key);
        init_uniform(params, base + P.wo, C * C, ares, key);
        fill(params + base + P.n2w, C, 1.0f);
        init_uniform(params, base + P.wgu, 2 * F * C, a, key);
        init_uniform(params, base + P.wd, C * F, ares, key);
    }
    if (sh.last) {
        fill(params + P.nfw, C, 1.0f);
        if (m->tie) { /* stage 0's wte (at offset 0 of stage 0), element for element */
            uint64_t key0 = pp_init_stage_key(seed, 0);
            for (size_t i = 0; i < V * C; i++)
                params[P.wlm + i] = a * uniform_pm1(key0, i);
        } else {
            init_uniform(params, P.wlm, V * C, a, key);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* One layer                                                                 */

/* A layer's `act` regions (llama_acts.h): F makes each in fp32 in scratch
 * (cb, the workspace's dqkv, datt, dgu, dh or dln: backward scratch, free
 * during F), computes from the fp32 value and stores it rounded
 * (pp_act_put); B and W widen it (pp_act_get, pp_gemm_as): the bits of an
 * fp32 stash every GEMM rounded, half the bytes, and SwiGLU's derivative
 * and the attention backward's D_i read the bf16 values (gpt.c's rule). */

/* Where F makes an act in fp32: the stash itself, or with bf16 scratch. */
static float *act_made(const gemms *g, void *stash, float *scratch)
{
    return g->bf16 ? scratch : (float *)stash;
}

/* qkv as the attention's GEMMs read it: itself, or rounded into ca. */
static const float *att_qkv(const llama_shape *sh, const gemms *g, const float *qkv)
{
    if (!g->bf16)
        return qkv;
    pp_round_bf16(qkv, g->ca, (size_t)sh->B * sh->T * 3 * sh->A);
    return g->ca;
}

/* The rotary table for this shape, into the workspace. */
static const float *rope_of(const llama_layouts *y, char *wk)
{
    float *cs = (float *)(wk + y->W.rope);
    pp_rope_table(y->sh.T, y->sh.hs, y->sh.theta, cs);
    return cs;
}

static void layer_forward(const llama_layouts *y, const gemms *g, const float *p,
                          const llama_layer_acts *a, char *wk, float *out)
{
    const llama_shape *sh = &y->sh;
    const llama_param_layout *P = &y->P;
    int BT = sh->B * sh->T, C = sh->C, A = sh->A, F = sh->F, Q = sh->Q;
    float *qkvc = (float *)(wk + y->W.qkvc);
    const float *cs = rope_of(y, wk);
    size_t xn = (size_t)BT * C;
    float *n1 = act_made(g, a->n1, g->cb), *n2 = act_made(g, a->n2, g->cb);
    float *qkv = act_made(g, a->qkv, (float *)(wk + y->W.dqkv));
    float *h = act_made(g, a->h, (float *)(wk + y->W.dh));
    float *atty = act_made(g, a->atty, (float *)(wk + y->W.datt));
    float *gu = act_made(g, a->gu, (float *)(wk + y->W.dgu));
    pp_rmsnorm_forward(a->x, p + P->n1w, BT, C, sh->eps, n1, a->n1_rstd);
    pp_act_put(g, n1, a->n1, xn);
    pp_gemm_aw(g, 0, 1, BT, Q, C, n1, p + P->wqkv, 0.0f, qkvc);
    pp_rope_apply(qkvc, BT, sh->T, (size_t)Q, sh->NH, sh->hs, cs, 0);
    pp_rope_apply(qkvc + A, BT, sh->T, (size_t)Q, sh->KV, sh->hs, cs, 0);
    pp_gqa_expand(qkvc, qkv, BT, A, sh->NH, sh->KV);
    pp_act_put(g, qkv, a->qkv, (size_t)BT * 3 * A);
    pp_attention_forward(att_qkv(sh, g, qkv), atty, a->lse, sh->B, sh->T, A, sh->NH,
                         llama_att_rows(sh), (float *)(wk + y->W.att), sh->bf16);
    pp_act_put(g, atty, a->atty, (size_t)BT * A);
    pp_row_parallel(g, BT, C, A, atty, p + P->wo, a->x, a->res);
    pp_rmsnorm_forward(a->res, p + P->n2w, BT, C, sh->eps, n2, a->n2_rstd);
    pp_act_put(g, n2, a->n2, xn);
    pp_gemm_aw(g, 0, 1, BT, 2 * F, C, n2, p + P->wgu, 0.0f, gu);
    pp_swiglu_forward(gu, h, BT, F);
    pp_act_put(g, gu, a->gu, (size_t)BT * 2 * F);
    pp_act_put(g, h, a->h, (size_t)BT * F);
    pp_row_parallel(g, BT, C, F, h, p + P->wd, a->res, out);
}

/* Where one layer's backward keeps the gradients W needs: the workspace
 * (fused) or the stash's split region (B of a split backward). */
typedef struct {
    float *dgu, *dn2, *dres, *dqkvc, *dn1;
} layer_grads;

static void mlp_weight_grads(const llama_layouts *y, const gemms *mm, float *g,
                             const llama_layer_acts *a, const float *dy, const float *dgu,
                             const float *dn2)
{
    const llama_shape *sh = &y->sh;
    const llama_param_layout *P = &y->P;
    int BT = sh->B * sh->T, C = sh->C, F = sh->F;
    pp_gemm_as(mm, 1, 0, C, F, BT, dy, a->h, g + P->wd);        /* dwd += dy^T h */
    pp_gemm_as(mm, 1, 0, 2 * F, C, BT, dgu, a->n2, g + P->wgu); /* dwgu += dgu^T n2 */
    pp_rmsnorm_backward(a->res, NULL, a->n2_rstd, dn2, BT, C, NULL, g + P->n2w);
}

static void att_weight_grads(const llama_layouts *y, const gemms *mm, float *g,
                             const llama_layer_acts *a, const float *dres, const float *dqkvc,
                             const float *dn1)
{
    const llama_shape *sh = &y->sh;
    const llama_param_layout *P = &y->P;
    int BT = sh->B * sh->T, C = sh->C;
    pp_gemm_as(mm, 1, 0, C, sh->A, BT, dres, a->atty, g + P->wo);  /* dwo += dres^T atty */
    pp_gemm_as(mm, 1, 0, sh->Q, C, BT, dqkvc, a->n1, g + P->wqkv); /* dwqkv += dqkvc^T n1 */
    pp_rmsnorm_backward(a->x, NULL, a->n1_rstd, dn1, BT, C, NULL, g + P->n1w);
}

/* dy (at y) to dx (at x); grads non-NULL: the weight gradients as it goes.
 * dx may be dy's buffer: dy is read for the last time before dx is
 * written. With bf16 the stash's gu is widened into ca (which dy's
 * rounding has left) and atty into the workspace's dln (dn2 spent, dn1
 * not yet made). */
static void layer_backward(const llama_layouts *y, const gemms *g, const float *p, float *grads,
                           const llama_layer_acts *a, const layer_grads *d, char *wk,
                           const float *dy, float *dx)
{
    const llama_shape *sh = &y->sh;
    const llama_param_layout *P = &y->P;
    int BT = sh->B * sh->T, C = sh->C, A = sh->A, F = sh->F, Q = sh->Q;
    size_t xn = (size_t)BT * C;
    float *dh = (float *)(wk + y->W.dh), *datt = (float *)(wk + y->W.datt);
    float *dqkv = (float *)(wk + y->W.dqkv);
    /* MLP: dh = dy wd; dgu through SwiGLU; dn2 = dgu wgu; dres = dy + N2'.
     * Tensor-parallel, wgu is column-parallel, so dgu wgu is a partial sum
     * (Megatron's f in the backward): summed over the group, a no-op when
     * the hook is unset; likewise dn1 below. */
    pp_gemm_aw(g, 0, 0, BT, F, C, dy, p + P->wd, 0.0f, dh);
    pp_swiglu_backward(pp_act_get(g, a->gu, (size_t)BT * 2 * F, g->ca), dh, d->dgu, BT, F);
    pp_gemm_aw(g, 0, 0, BT, C, 2 * F, d->dgu, p + P->wgu, 0.0f, d->dn2);
    pp_tensor_allreduce(d->dn2, xn);
    if (grads)
        mlp_weight_grads(y, g, grads, a, dy, d->dgu, d->dn2);
    memcpy(d->dres, dy, xn * sizeof *d->dres);
    pp_rmsnorm_backward(a->res, p + P->n2w, a->n2_rstd, d->dn2, BT, C, d->dres, NULL);
    /* Attention: datt = dres wo; the attention's backward; back through the
     * repeat and the rotation; dn1 = dqkvc wqkv; dx = dres + N1'. */
    pp_gemm_aw(g, 0, 0, BT, A, C, d->dres, p + P->wo, 0.0f, datt);
    {
        /* the values att_qkv gave the forward's attention */
        const float *qkv = pp_act_get(g, a->qkv, (size_t)BT * 3 * A, g->ca), *dout = datt;
        if (g->bf16) {
            pp_round_bf16(datt, g->cb, (size_t)BT * A);
            dout = g->cb;
        }
        const float *out = pp_act_get(g, a->atty, (size_t)BT * A, (float *)(wk + y->W.dln));
        pp_attention_backward(qkv, out, dout, a->lse, dqkv, sh->B, sh->T, A, sh->NH,
                              llama_att_rows(sh), (float *)(wk + y->W.att), sh->bf16);
    }
    pp_gqa_reduce(dqkv, d->dqkvc, BT, A, sh->NH, sh->KV);
    {
        const float *cs = rope_of(y, wk);
        pp_rope_apply(d->dqkvc, BT, sh->T, (size_t)Q, sh->NH, sh->hs, cs, 1);
        pp_rope_apply(d->dqkvc + A, BT, sh->T, (size_t)Q, sh->KV, sh->hs, cs, 1);
    }
    pp_gemm_aw(g, 0, 0, BT, C, Q, d->dqkvc, p + P->wqkv, 0.0f, d->dn1);
    pp_tensor_allreduce(d->dn1, xn);
    if (grads)
        att_weight_grads(y, g, grads, a, d->dres, d->dqkvc, d->dn1);
    memcpy(dx, d->dres, xn * sizeof *dx);
    pp_rmsnorm_backward(a->x, p + P->n1w, a->n1_rstd, d->dn1, BT, C, dx, NULL);
}

/* ------------------------------------------------------------------------ */
/* The layers, as the stage skeleton (stage.c) calls them                    */

static void llama_open(pp_stage *c)
{
    c->y.llama = llama_layouts_of(c->m, c->S, c->s);
    c->f = llama_frame_of(&c->y.llama);
}

static void llama_embed_forward(const pp_stage *c, const int32_t *tokens, float *x0)
{
    const llama_layouts *y = &c->y.llama;
    pp_tok_embed_forward(tokens, y->sh.B, y->sh.T, c->params + y->P.wte, y->sh.C, x0);
}

static void llama_embed_backward(const pp_stage *c, const int32_t *tokens, const float *dx0,
                                 float *grads)
{
    const llama_layouts *y = &c->y.llama;
    pp_tok_embed_backward(tokens, y->sh.B, y->sh.T, dx0, y->sh.C, grads + y->P.wte);
}

static void llama_block_forward(const pp_stage *c, int l, const float *p, float *out)
{
    const llama_layouts *y = &c->y.llama;
    llama_layer_acts acts = llama_layer_acts_of(&y->L, c->st, l);
    layer_forward(y, &c->g, p, &acts, c->wk, out);
}

/* Fused (gl non-NULL): the gradients in the workspace (dn2 and dn1 share
 * dln: dn2 is spent by then). B of a split backward: the split region. */
static void llama_block_backward(const pp_stage *c, int l, const float *p, float *gl,
                                 const float *dy, float *dx)
{
    const llama_layouts *y = &c->y.llama;
    llama_layer_acts acts = llama_layer_acts_of(&y->L, c->st, l);
    char *wk = c->wk;
    layer_grads d;
    if (gl) {
        d.dgu = (float *)(wk + y->W.dgu);
        d.dn2 = (float *)(wk + y->W.dln);
        d.dres = (float *)(wk + y->W.dres);
        d.dqkvc = (float *)(wk + y->W.qkvc);
        d.dn1 = (float *)(wk + y->W.dln);
    } else {
        char *wl = c->st + y->L.wlayers + (size_t)l * y->L.wlayer_stride;
        d.dgu = (float *)(wl + y->L.wdgu);
        d.dn2 = (float *)(wl + y->L.wdn2);
        d.dres = (float *)(wl + y->L.wdres);
        d.dqkvc = (float *)(wl + y->L.wdqkv);
        d.dn1 = (float *)(wl + y->L.wdn1);
    }
    layer_backward(y, &c->g, p, gl, &acts, &d, wk, dy, dx);
}

static void llama_block_weight(const pp_stage *c, int l, float *gl)
{
    const llama_layouts *y = &c->y.llama;
    const llama_stash_layout *L = &y->L;
    llama_layer_acts acts = llama_layer_acts_of(L, c->st, l);
    size_t wl = L->wlayers + (size_t)l * L->wlayer_stride;
    mlp_weight_grads(y, &c->g, gl, &acts, pp_saved(c->st, wl), pp_saved(c->st, wl + L->wdgu),
                     pp_saved(c->st, wl + L->wdn2));
    att_weight_grads(y, &c->g, gl, &acts, pp_saved(c->st, wl + L->wdres),
                     pp_saved(c->st, wl + L->wdqkv), pp_saved(c->st, wl + L->wdn1));
}

static double llama_head_forward(const pp_stage *c, const int32_t *tgt)
{
    const llama_layouts *y = &c->y.llama;
    const llama_stash_layout *L = &y->L;
    int B = y->sh.B, T = y->sh.T, C = y->sh.C, V = y->sh.V, BT = B * T;
    int32_t *targets = (int32_t *)(c->st + L->targets);
    float *nf = act_made(&c->g, c->st + L->nf, (float *)(c->wk + y->W.dln));
    float *logits = (float *)(c->wk + y->W.logits);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            targets[b * T + t] = tgt[(size_t)b * (T + 1) + t + 1];
    pp_rmsnorm_forward((const float *)(c->st + L->xf), c->params + y->P.nfw, BT, C, y->sh.eps, nf,
                       (float *)(c->st + L->nf_rstd));
    pp_act_put(&c->g, nf, c->st + L->nf, (size_t)BT * C);
    pp_gemm_aw(&c->g, 0, 1, BT, V, C, nf, c->params + y->P.wlm, 0.0f, logits);
    return pp_softmax_xent_forward(logits, targets, 1, BT, V, (float *)(c->st + L->probs));
}

static void head_weight_grads(const pp_stage *c, float *grads, const float *dlogits,
                              const float *dnf)
{
    const llama_layouts *y = &c->y.llama;
    const llama_stash_layout *L = &y->L;
    int BT = y->sh.B * y->sh.T, C = y->sh.C;
    pp_gemm_as(&c->g, 1, 0, y->sh.V, C, BT, dlogits, c->st + L->nf, grads + y->P.wlm);
    pp_rmsnorm_backward(pp_saved(c->st, L->xf), NULL, pp_saved(c->st, L->nf_rstd), dnf, BT, C, NULL,
                        grads + y->P.nfw);
}

static void llama_head_backward(const pp_stage *c, float *grads, float loss_scale, float *dx)
{
    const llama_layouts *y = &c->y.llama;
    const llama_stash_layout *L = &y->L;
    int BT = y->sh.B * y->sh.T, C = y->sh.C, V = y->sh.V;
    const int32_t *targets = (const int32_t *)(c->st + L->targets);
    float *dlogits = (float *)(grads ? c->wk + y->W.logits : c->st + L->wdlogits);
    float *dnf = (float *)(grads ? c->wk + y->W.dln : c->st + L->wdnf);
    pp_softmax_xent_backward(pp_saved(c->st, L->probs), targets, 1, BT, V, loss_scale, dlogits);
    pp_gemm_aw(&c->g, 0, 0, BT, C, V, dlogits, c->params + y->P.wlm, 0.0f, dnf);
    if (grads)
        head_weight_grads(c, grads, dlogits, dnf);
    memset(dx, 0, (size_t)BT * C * sizeof(float));
    pp_rmsnorm_backward(pp_saved(c->st, L->xf), c->params + y->P.nfw, pp_saved(c->st, L->nf_rstd),
                        dnf, BT, C, dx, NULL);
}

static void llama_head_weight(const pp_stage *c, float *grads)
{
    const llama_layouts *y = &c->y.llama;
    head_weight_grads(c, grads, pp_saved(c->st, y->L.wdlogits), pp_saved(c->st, y->L.wdnf));
}

const pp_model_impl pp_model_llama = {
    .name = "llama",
    .open = llama_open,
    .init = llama_init,
    .embed_forward = llama_embed_forward,
    .embed_backward = llama_embed_backward,
    .block_forward = llama_block_forward,
    .block_backward = llama_block_backward,
    .block_weight = llama_block_weight,
    .head_forward = llama_head_forward,
    .head_backward = llama_head_backward,
    .head_weight = llama_head_weight,
};
