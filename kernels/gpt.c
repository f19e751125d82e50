/* gpt.c - GPT-2's layers on the CPU (pp_model_gpt, stage.h), as llm.c and
 * nanoGPT write the model: deterministic initialisation, the token and
 * position embeddings, a layer's forward, backward and weight-gradient
 * parts, and the head with its loss, which the stage skeleton (stage.c)
 * runs as F(s,b), B(s,b) and the split B and W. The sizes and FLOPs are
 * isa/model_shape.c's.
 *
 * Notation: B = batch, T = context, C = embed, NH = heads, hs = C/NH,
 * F = ffn, V = vocab, L = pp_model_layers(m, s), BT = B*T rows.
 * Stage 0 embeds:  x_0 = wte[token] + wpe[position]            [BT][C]
 * Layer l maps x -> y, pre-LN (llm.c's names):
 *   ln1  = LN(x; ln1w, ln1b)                 eps 1e-5, biased variance
 *   qkv  = ln1 qkvw^T + qkvb                 [BT][3C], row [q | k | v]
 *   atty = causal attention(q, k, v)         [BT][C], NH heads of hs,
 *                                            scale 1/sqrt(hs)
 *   res  = x + atty attprojw^T + attprojb
 *   ln2  = LN(res; ln2w, ln2b)
 *   fch  = ln2 fcw^T + fcb                   [BT][F]
 *   fcg  = gelu(fch)                         tanh approximation (pp_gelu_*:
 *                                            PyTorch's GELU(approximate='tanh'))
 *   y    = res + fcg fcprojw^T + fcprojb
 * The last stage: lnf = LN(x_L; lnfw, lnfb), logits = lnf wlm^T (no bias,
 * untied from wte), softmax cross-entropy against every position's next
 * token; F returns the sum over the BT positions.
 * The layouts (parameters = weight files, stash, split stash, workspace)
 * are gpt_layout.h's, described there; kernels/README.md has the summary.
 *
 * Attention is pp_attention_forward/_backward (cpu_kernels.c): per (b, h)
 * and per block of GPT_ATT_ROWS query rows, that block's scores only, the
 * per-row log-sum-exp kept in the stash; the backward recomputes P from it.
 *
 * Initialisation (init.h: element i of stage s from (seed, s, i)): GPT-2's
 * normal(0, 0.02) as a uniform with the same standard deviation (scale
 * 0.02 sqrt 3) for wte, qkvw, fcw and wlm; the residual projections
 * attprojw and fcprojw scaled further by 1/sqrt(2 * Ltotal), Ltotal the
 * layers over all stages (GPT-2's 1/sqrt(2 * n_layer)); wpe std 0.01;
 * layer norm weights 1; biases 0. With wlm's small logits the loss at init
 * is close to ln V.
 *
 * Tensor parallelism (isa/tensor.h, tensor_shard.h): a rank of a plan with
 * tensor = T runs its shard, heads/T heads (attention width A = C/T) and
 * ffn/T; with the VM's all-reduce hook set, attproj's and fcproj's
 * row-parallel products are summed over the group before the residual and
 * bias (tensor_gemm.h's pp_row_parallel), and dln2 = dh fcw and dln1 = dqkv qkvw before they
 * are read (Megatron's g and f). Unset, the arithmetic is the old one.
 *
 * The split backward (backward_input then backward_weight) saves at every
 * GEMM output the gradient that the weight-gradient GEMM or bias sum needs
 * (gpt_layout.h's split region), and W performs exactly the fused
 * backward's weight-gradient work on the same operands, so B then W gives
 * the fused backward's bits. */
#include "stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "gpt_acts.h"
#include "init.h"
#include "tensor_gemm.h"
#include "tensor_shard.h"

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */

static void gpt_init(const pp_model *m, int S, int s, uint64_t seed, float *params)
{
    gpt_shape sh = gpt_shape_of(m, S, s);
    gpt_param_layout P = gpt_param_layout_of(&sh);
    uint64_t key = pp_init_stage_key(seed, s);
    size_t C = (size_t)sh.C, F = (size_t)sh.F, V = (size_t)sh.V, T = (size_t)sh.T;
    float a = 0.02f * sqrtf(3.0f); /* uniform [-a, a): std 0.02 */
    int Ltotal = 0;                /* layers over all stages (the plan reader bounds the sum) */
    for (int i = 0; i < S; i++)
        Ltotal += (int)pp_model_layers(m, i);
    float ares = a / sqrtf(2.0f * (float)(Ltotal > 0 ? Ltotal : 1));

    memset(params, 0, P.total * sizeof *params);
    if (sh.first) {
        init_uniform(params, P.wte, V * C, a, key);
        init_uniform(params, P.wpe, T * C, 0.5f * a, key);
    }
    for (int l = 0; l < sh.L; l++) {
        size_t base = P.layers + (size_t)l * P.layer_stride;
        fill(params + base + P.ln1w, C, 1.0f);
        init_uniform(params, base + P.qkvw, 3 * C * C, a, key);
        init_uniform(params, base + P.attprojw, C * C, ares, key);
        fill(params + base + P.ln2w, C, 1.0f);
        init_uniform(params, base + P.fcw, F * C, a, key);
        init_uniform(params, base + P.fcprojw, C * F, ares, key);
    }
    if (sh.last) {
        fill(params + P.lnfw, C, 1.0f);
        if (m->tie) { /* tied: stage 0's wte (at offset 0 of stage 0), element for element */
            uint64_t key0 = pp_init_stage_key(seed, 0);
            for (size_t i = 0; i < V * C; i++)
                params[P.wlm + i] = a * uniform_pm1(key0, i);
        } else {
            init_uniform(params, P.wlm, V * C, a, key);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Precision (mlp.c's rule): with bf16 the weights are bf16 values (the
 * widened compute copy) and every GEMM's activation operands are rounded to
 * bf16 into the workspace's ca (first operand) and cb (second); the
 * attention's GEMMs, all activation x activation, see qkv rounded into ca
 * and dout rounded into cb, and round their P and dS blocks themselves
 * (pp_attention_forward). Accumulation is fp32 throughout. The stash keeps
 * ln1, qkv, atty, ln2, fch, fcg and lnf (gpt_layout.h's `act` regions) in
 * bf16: F makes each in fp32 in a scratch region (cb, the workspace's dqkv,
 * datt, dh or dln: backward scratch, free during F), computes from the
 * fp32 value (GELU reads fch, attproj rounds atty as it always did) and
 * stores it rounded (pp_act_put); B and W widen them back (pp_act_get,
 * pp_gemm_sw, pp_gemm_as), so every GEMM reads the bits it read when the
 * stash was fp32, and GELU's derivative and the attention backward's D_i
 * read the bf16 values, as the GPU's kernels do. */
typedef pp_stage_gemms gemms;

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* Where F makes an `act` in fp32 before pp_act_put stores it: the stash
 * region itself (fp32), or with bf16 the scratch region given. */
static float *act_made(const gemms *g, void *stash, float *scratch)
{
    return g->bf16 ? scratch : (float *)stash;
}

/* qkv as the attention's GEMMs read it: itself, or rounded into ca. */
static const float *att_qkv(const gpt_shape *sh, const gemms *g, const float *qkv)
{
    if (!g->bf16)
        return qkv;
    pp_round_bf16(qkv, g->ca, (size_t)sh->B * sh->T * 3 * sh->A);
    return g->ca;
}

/* F's scratch for the `act`s it makes with bf16 (act_made): [BT][C] for a
 * layer norm's output, [BT][3A] for qkv, [BT][A] for atty, [BT][F] for fch
 * and for fcg. fch may share ln's region: ln2 is spent (rounded into ca)
 * before fc's GEMM writes fch. */
typedef struct {
    float *ln, *qkv, *atty, *fch, *fcg;
} act_scratch;

static void layer_forward(const gpt_shape *sh, const gemms *g, const gpt_param_layout *P,
                          const float *p, const gpt_layer_acts *a, const act_scratch *t,
                          float *att_scratch, float *y)
{
    int BT = sh->B * sh->T, C = sh->C, A = sh->A, F = sh->F;
    size_t xn = (size_t)BT * C, qn = (size_t)BT * 3 * A, hn = (size_t)BT * F;
    float *ln1 = act_made(g, a->ln1, t->ln), *qkv = act_made(g, a->qkv, t->qkv);
    float *atty = act_made(g, a->atty, t->atty), *ln2 = act_made(g, a->ln2, t->ln);
    float *fch = act_made(g, a->fch, t->fch), *fcg = act_made(g, a->fcg, t->fcg);
    pp_layernorm_forward(a->x, p + P->ln1w, p + P->ln1b, BT, C, ln1, a->ln1_mean, a->ln1_rstd);
    pp_act_put(g, ln1, a->ln1, xn);
    pp_gemm_aw(g, 0, 1, BT, 3 * A, C, ln1, p + P->qkvw, 0.0f, qkv);
    pp_bias_add(qkv, p + P->qkvb, BT, 3 * A);
    pp_act_put(g, qkv, a->qkv, qn);
    pp_attention_forward(att_qkv(sh, g, qkv), atty, a->lse, sh->B, sh->T, A, sh->NH,
                         gpt_att_rows(sh), att_scratch, sh->bf16);
    pp_act_put(g, atty, a->atty, (size_t)BT * A);
    pp_row_parallel(g, BT, C, A, atty, p + P->attprojw, a->x, a->res);
    pp_bias_add(a->res, p + P->attprojb, BT, C);
    pp_layernorm_forward(a->res, p + P->ln2w, p + P->ln2b, BT, C, ln2, a->ln2_mean, a->ln2_rstd);
    pp_act_put(g, ln2, a->ln2, xn);
    pp_gemm_aw(g, 0, 1, BT, F, C, ln2, p + P->fcw, 0.0f, fch);
    pp_bias_gelu_forward(fch, p + P->fcb, fcg, BT, F); /* one pass */
    pp_act_put(g, fch, a->fch, hn);
    pp_act_put(g, fcg, a->fcg, hn);
    pp_row_parallel(g, BT, C, F, fcg, p + P->fcprojw, a->res, y);
    pp_bias_add(y, p + P->fcprojb, BT, C);
}

static double head_forward(const gpt_shape *sh, const gemms *g, const gpt_param_layout *P,
                           const gpt_stash_layout *L, const float *params, const int32_t *tgt,
                           char *st, float *logits, float *lnf_scratch)
{
    int B = sh->B, T = sh->T, C = sh->C, V = sh->V, BT = B * T;
    int32_t *targets = (int32_t *)(st + L->targets);
    float *lnf = act_made(g, st + L->lnf, lnf_scratch);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            targets[b * T + t] = tgt[(size_t)b * (T + 1) + t + 1];
    pp_layernorm_forward((const float *)(st + L->xf), params + P->lnfw, params + P->lnfb, BT, C,
                         lnf, (float *)(st + L->lnf_mean), (float *)(st + L->lnf_rstd));
    pp_act_put(g, lnf, st + L->lnf, (size_t)BT * C);
    pp_gemm_aw(g, 0, 1, BT, V, C, lnf, params + P->wlm, 0.0f, logits);
    return pp_softmax_xent_forward(logits, targets, 1, BT, V, (float *)(st + L->probs));
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

/* The gradients of one layer's backward: where they live (workspace when
 * fused, the stash's split region for B of a split backward). */
typedef struct {
    float *dh, *dln2, *dres, *datt, *dqkv, *dln1;
} layer_grads;

/* The MLP half's weight gradients (W's work, also run inline when fused). */
static void mlp_weight_grads(const gpt_shape *sh, const gemms *mm, const gpt_param_layout *P,
                             float *g, const gpt_layer_acts *a, const float *dy, const float *dh,
                             const float *dln2)
{
    int BT = sh->B * sh->T, C = sh->C, F = sh->F;
    pp_gemm_as(mm, 1, 0, C, F, BT, dy, a->fcg, g + P->fcprojw); /* dfcprojw += dy^T fcg */
    pp_bias_grad(dy, BT, C, g + P->fcprojb);
    pp_gemm_as(mm, 1, 0, F, C, BT, dh, a->ln2, g + P->fcw); /* dfcw += dh^T ln2 */
    pp_bias_grad(dh, BT, F, g + P->fcb);
    pp_layernorm_backward(a->res, NULL, a->ln2_mean, a->ln2_rstd, dln2, BT, C, NULL, g + P->ln2w,
                          g + P->ln2b);
}

/* The attention half's weight gradients. */
static void att_weight_grads(const gpt_shape *sh, const gemms *mm, const gpt_param_layout *P,
                             float *g, const gpt_layer_acts *a, const float *dres,
                             const float *dqkv, const float *dln1)
{
    int BT = sh->B * sh->T, C = sh->C, A = sh->A;
    pp_gemm_as(mm, 1, 0, C, A, BT, dres, a->atty, g + P->attprojw); /* dattprojw += dres^T atty */
    pp_bias_grad(dres, BT, C, g + P->attprojb);
    pp_gemm_as(mm, 1, 0, 3 * A, C, BT, dqkv, a->ln1, g + P->qkvw); /* dqkvw += dqkv^T ln1 */
    pp_bias_grad(dqkv, BT, 3 * A, g + P->qkvb);
    pp_layernorm_backward(a->x, NULL, a->ln1_mean, a->ln1_rstd, dln1, BT, C, NULL, g + P->ln1w,
                          g + P->ln1b);
}

/* The reverse of layer_forward: dy (the gradient at y) to dx (at x). grads
 * non-NULL: the weight gradients as it goes (fused); NULL: the gradients
 * W needs stay in d (the split region). dx may be dy's buffer: dy is read
 * for the last time before dx is written. With bf16, out_wide ([BT][A],
 * the workspace's dln, whose dln2 is spent and dln1 not yet made) takes
 * the attention's output widened for its backward. */
static void layer_backward(const gpt_shape *sh, const gemms *g, const gpt_param_layout *P,
                           const float *p, float *grads, const gpt_layer_acts *a,
                           const layer_grads *d, float *att_scratch, float *out_wide,
                           const float *dy, float *dx)
{
    int BT = sh->B * sh->T, C = sh->C, A = sh->A, F = sh->F;
    size_t xn = (size_t)BT * C;
    /* MLP: dh = (dy fcprojw) * gelu'(fch); dln2 = dh fcw; dres = dy + LN2'.
     * Tensor-parallel, fcw is column-parallel, so dh fcw is a partial sum
     * (Megatron's f in the backward): summed over the group, a no-op when
     * the hook is unset; likewise dln1 below. */
    pp_gemm_aw(g, 0, 0, BT, F, C, dy, p + P->fcprojw, 0.0f, d->dh);
    /* fch widened into ca, which dy's rounding has left */
    pp_gelu_backward(pp_act_get(g, a->fch, (size_t)BT * F, g->ca), d->dh, d->dh, (size_t)BT * F);
    pp_gemm_aw(g, 0, 0, BT, C, F, d->dh, p + P->fcw, 0.0f, d->dln2);
    pp_tensor_allreduce(d->dln2, xn);
    if (grads)
        mlp_weight_grads(sh, g, P, grads, a, dy, d->dh, d->dln2);
    memcpy(d->dres, dy, xn * sizeof *d->dres);
    pp_layernorm_backward(a->res, p + P->ln2w, a->ln2_mean, a->ln2_rstd, d->dln2, BT, C, d->dres,
                          NULL, NULL);
    /* Attention: datt = dres attprojw; dqkv; dln1 = dqkv qkvw; dx = dres + LN1'. */
    pp_gemm_aw(g, 0, 0, BT, A, C, d->dres, p + P->attprojw, 0.0f, d->datt);
    {
        /* qkv as the forward's attention read it (att_qkv): a bf16 stash
         * widened into ca is those values */
        const float *qkv = pp_act_get(g, a->qkv, (size_t)BT * 3 * A, g->ca), *dout = d->datt;
        if (g->bf16) {
            pp_round_bf16(d->datt, g->cb, (size_t)BT * A);
            dout = g->cb;
        }
        const float *out = pp_act_get(g, a->atty, (size_t)BT * A, out_wide);
        pp_attention_backward(qkv, out, dout, a->lse, d->dqkv, sh->B, sh->T, A, sh->NH,
                              gpt_att_rows(sh), att_scratch, sh->bf16);
    }
    pp_gemm_aw(g, 0, 0, BT, C, 3 * A, d->dqkv, p + P->qkvw, 0.0f, d->dln1);
    pp_tensor_allreduce(d->dln1, xn);
    if (grads)
        att_weight_grads(sh, g, P, grads, a, d->dres, d->dqkv, d->dln1);
    memcpy(dx, d->dres, xn * sizeof *dx);
    pp_layernorm_backward(a->x, p + P->ln1w, a->ln1_mean, a->ln1_rstd, d->dln1, BT, C, dx, NULL,
                          NULL);
}

static void head_weight_grads(const gpt_shape *sh, const gemms *g, const gpt_param_layout *P,
                              const gpt_stash_layout *L, float *grads, const void *stash,
                              const float *dlogits, const float *dlnf)
{
    int BT = sh->B * sh->T, C = sh->C;
    pp_gemm_as(g, 1, 0, sh->V, C, BT, dlogits, (const char *)stash + L->lnf, grads + P->wlm);
    pp_layernorm_backward(pp_saved(stash, L->xf), NULL, pp_saved(stash, L->lnf_mean),
                          pp_saved(stash, L->lnf_rstd), dlnf, BT, C, NULL, grads + P->lnfw,
                          grads + P->lnfb);
}

/* ------------------------------------------------------------------------ */
/* The layers, as the stage skeleton (stage.c) calls them                    */

static void gpt_open(pp_stage *c)
{
    c->y.gpt = gpt_layouts_of(c->m, c->S, c->s);
    c->f = gpt_frame_of(&c->y.gpt);
}

static void gpt_embed_forward(const pp_stage *c, const int32_t *tokens, float *x0)
{
    const gpt_layouts *y = &c->y.gpt;
    pp_embedding_pos_forward(tokens, y->sh.B, y->sh.T, c->params + y->P.wte, c->params + y->P.wpe,
                             y->sh.C, x0);
}

static void gpt_embed_backward(const pp_stage *c, const int32_t *tokens, const float *dx0,
                               float *grads)
{
    const gpt_layouts *y = &c->y.gpt;
    pp_embedding_pos_backward(tokens, y->sh.B, y->sh.T, dx0, y->sh.C, grads + y->P.wte,
                              grads + y->P.wpe);
}

static void gpt_block_forward(const pp_stage *c, int l, const float *p, float *out)
{
    const gpt_layouts *y = &c->y.gpt;
    gpt_layer_acts acts = gpt_layer_acts_of(&y->L, c->st, l);
    act_scratch t = {c->g.cb, (float *)(c->wk + y->W.dqkv), (float *)(c->wk + y->W.datt), c->g.cb,
                     (float *)(c->wk + y->W.dh)};
    layer_forward(&y->sh, &c->g, &y->P, p, &acts, &t, (float *)(c->wk + y->W.att), out);
}

/* Fused (gl non-NULL): the layer's gradients in the workspace (dln2 and
 * dln1 share dln: dln2 is spent by then). B of a split backward: in the
 * split region, for W. */
static void gpt_block_backward(const pp_stage *c, int l, const float *p, float *gl, const float *dy,
                               float *dx)
{
    const gpt_layouts *y = &c->y.gpt;
    gpt_layer_acts acts = gpt_layer_acts_of(&y->L, c->st, l);
    char *wk = c->wk;
    layer_grads d;
    d.datt = (float *)(wk + y->W.datt);
    if (gl) {
        d.dh = (float *)(wk + y->W.dh);
        d.dln2 = (float *)(wk + y->W.dln);
        d.dres = (float *)(wk + y->W.dres);
        d.dqkv = (float *)(wk + y->W.dqkv);
        d.dln1 = (float *)(wk + y->W.dln);
    } else {
        char *wl = c->st + y->L.wlayers + (size_t)l * y->L.wlayer_stride;
        d.dh = (float *)(wl + y->L.wdh);
        d.dln2 = (float *)(wl + y->L.wdln2);
        d.dres = (float *)(wl + y->L.wdres);
        d.dqkv = (float *)(wl + y->L.wdqkv);
        d.dln1 = (float *)(wl + y->L.wdln1);
    }
    layer_backward(&y->sh, &c->g, &y->P, p, gl, &acts, &d, (float *)(wk + y->W.att),
                   (float *)(wk + y->W.dln), dy, dx);
}

static void gpt_block_weight(const pp_stage *c, int l, float *gl)
{
    const gpt_layouts *y = &c->y.gpt;
    const gpt_stash_layout *L = &y->L;
    gpt_layer_acts acts = gpt_layer_acts_of(L, c->st, l);
    size_t wl = L->wlayers + (size_t)l * L->wlayer_stride;
    mlp_weight_grads(&y->sh, &c->g, &y->P, gl, &acts, pp_saved(c->st, wl),
                     pp_saved(c->st, wl + L->wdh), pp_saved(c->st, wl + L->wdln2));
    att_weight_grads(&y->sh, &c->g, &y->P, gl, &acts, pp_saved(c->st, wl + L->wdres),
                     pp_saved(c->st, wl + L->wdqkv), pp_saved(c->st, wl + L->wdln1));
}

static double gpt_head_forward(const pp_stage *c, const int32_t *tgt)
{
    const gpt_layouts *y = &c->y.gpt;
    return head_forward(&y->sh, &c->g, &y->P, &y->L, c->params, tgt, c->st,
                        (float *)(c->wk + y->W.logits), (float *)(c->wk + y->W.dln));
}

/* dlogits and dlnf in the workspace (fused) or the split region (B). */
static void gpt_head_backward(const pp_stage *c, float *grads, float loss_scale, float *dx)
{
    const gpt_layouts *y = &c->y.gpt;
    const gpt_stash_layout *L = &y->L;
    const gpt_param_layout *P = &y->P;
    int BT = y->sh.B * y->sh.T, C = y->sh.C, V = y->sh.V;
    const int32_t *targets = (const int32_t *)(c->st + L->targets);
    float *dlogits = (float *)(grads ? c->wk + y->W.logits : c->st + L->wdlogits);
    float *dlnf = (float *)(grads ? c->wk + y->W.dln : c->st + L->wdlnf);
    pp_softmax_xent_backward(pp_saved(c->st, L->probs), targets, 1, BT, V, loss_scale, dlogits);
    pp_gemm_aw(&c->g, 0, 0, BT, C, V, dlogits, c->params + P->wlm, 0.0f,
               dlnf); /* dlnf = dlogits wlm */
    if (grads)
        head_weight_grads(&y->sh, &c->g, P, L, grads, c->st, dlogits, dlnf);
    memset(dx, 0, (size_t)BT * C * sizeof(float));
    pp_layernorm_backward(pp_saved(c->st, L->xf), c->params + P->lnfw, pp_saved(c->st, L->lnf_mean),
                          pp_saved(c->st, L->lnf_rstd), dlnf, BT, C, dx, NULL, NULL);
}

static void gpt_head_weight(const pp_stage *c, float *grads)
{
    const gpt_layouts *y = &c->y.gpt;
    head_weight_grads(&y->sh, &c->g, &y->P, &y->L, grads, c->st, pp_saved(c->st, y->L.wdlogits),
                      pp_saved(c->st, y->L.wdlnf));
}

const pp_model_impl pp_model_gpt = {
    .name = "gpt",
    .open = gpt_open,
    .init = gpt_init,
    .embed_forward = gpt_embed_forward,
    .embed_backward = gpt_embed_backward,
    .block_forward = gpt_block_forward,
    .block_backward = gpt_block_backward,
    .block_weight = gpt_block_weight,
    .head_forward = gpt_head_forward,
    .head_backward = gpt_head_backward,
    .head_weight = gpt_head_weight,
};
