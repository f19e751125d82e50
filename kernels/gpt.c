/* gpt.c - GPT-2's pipeline stages on the CPU (pp_model_gpt, see model.h):
 * sizes, FLOP counts, deterministic initialisation, F(s,b), B(s,b) and the
 * split backward, as llm.c and nanoGPT write the model.
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
 * The split backward (backward_input then backward_weight) saves at every
 * GEMM output the gradient that the weight-gradient GEMM or bias sum needs
 * (gpt_layout.h's split region), and W performs exactly the fused
 * backward's weight-gradient work on the same operands, so B then W gives
 * the fused backward's bits. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "stage_gemm.h"
#include "../isa/gpt_layout.h"
#include "init.h"

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */

static void gpt_init(const pp_model *m, int S, int s, uint64_t seed, float *params) {
    gpt_shape sh = gpt_shape_of(m, S, s);
    gpt_param_layout P = gpt_param_layout_of(&sh);
    uint64_t key = pp_init_stage_key(seed, s);
    size_t C = (size_t)sh.C, F = (size_t)sh.F, V = (size_t)sh.V, T = (size_t)sh.T;
    float a = 0.02f * sqrtf(3.0f); /* uniform [-a, a): std 0.02 */
    int Ltotal = 0; /* layers over all stages (the plan reader bounds the sum) */
    for (int i = 0; i < S; i++) Ltotal += (int)pp_model_layers(m, i);
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
        init_uniform(params, P.wlm, V * C, a, key);
    }
}

/* ------------------------------------------------------------------------ */
/* Precision (mlp.c's rule): with bf16 the weights are bf16 values (the
 * widened compute copy) and every GEMM's activation operands are rounded to
 * bf16 into the workspace's ca (first operand) and cb (second); the
 * attention's GEMMs, all activation x activation, see qkv rounded into ca
 * and dout rounded into cb, and round their P and dS blocks themselves
 * (pp_attention_forward). Accumulation is fp32 throughout. */
typedef pp_stage_gemms gemms;

static gemms gemms_of(const gpt_shape *sh, const gpt_work_layout *W, void *work) {
    return pp_stage_gemms_of(sh->bf16, work, W->ca, W->cb);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* Layer l's activations in the stash: written by F, read by B and W. */
typedef struct {
    float *x, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *res, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fcg;
} layer_acts;

static layer_acts layer_acts_of(const gpt_stash_layout *L, const void *stash, int l) {
    char *p = (char *)(uintptr_t)stash + L->layers + (size_t)l * L->layer_stride;
    layer_acts a = {(float *)p,
                    (float *)(p + L->ln1),
                    (float *)(p + L->ln1_mean),
                    (float *)(p + L->ln1_rstd),
                    (float *)(p + L->qkv),
                    (float *)(p + L->atty),
                    (float *)(p + L->lse),
                    (float *)(p + L->res),
                    (float *)(p + L->ln2),
                    (float *)(p + L->ln2_mean),
                    (float *)(p + L->ln2_rstd),
                    (float *)(p + L->fch),
                    (float *)(p + L->fcg)};
    return a;
}

/* qkv as the attention's GEMMs read it: itself, or rounded into ca. */
static const float *att_qkv(const gpt_shape *sh, const gemms *g, const float *qkv) {
    if (!g->bf16) return qkv;
    pp_round_bf16(qkv, g->ca, (size_t)sh->B * sh->T * 3 * sh->C);
    return g->ca;
}

static void layer_forward(const gpt_shape *sh, const gemms *g, const gpt_param_layout *P,
                          const float *p, const layer_acts *a, float *att_scratch, float *y) {
    int BT = sh->B * sh->T, C = sh->C, F = sh->F;
    size_t xn = (size_t)BT * C;
    pp_layernorm_forward(a->x, p + P->ln1w, p + P->ln1b, BT, C, a->ln1, a->ln1_mean,
                         a->ln1_rstd);
    pp_gemm_aw(g, 0, 1, BT, 3 * C, C, a->ln1, p + P->qkvw, 0.0f, a->qkv);
    pp_bias_add(a->qkv, p + P->qkvb, BT, 3 * C);
    pp_attention_forward(att_qkv(sh, g, a->qkv), a->atty, a->lse, sh->B, sh->T, C, sh->NH,
                         gpt_att_rows(sh), att_scratch, sh->bf16);
    memcpy(a->res, a->x, xn * sizeof *a->res);
    pp_gemm_aw(g, 0, 1, BT, C, C, a->atty, p + P->attprojw, 1.0f, a->res);
    pp_bias_add(a->res, p + P->attprojb, BT, C);
    pp_layernorm_forward(a->res, p + P->ln2w, p + P->ln2b, BT, C, a->ln2, a->ln2_mean,
                         a->ln2_rstd);
    pp_gemm_aw(g, 0, 1, BT, F, C, a->ln2, p + P->fcw, 0.0f, a->fch);
    pp_bias_gelu_forward(a->fch, p + P->fcb, a->fcg, BT, F); /* one pass */
    memcpy(y, a->res, xn * sizeof *y);
    pp_gemm_aw(g, 0, 1, BT, C, F, a->fcg, p + P->fcprojw, 1.0f, y);
    pp_bias_add(y, p + P->fcprojb, BT, C);
}

/* Where x_l lives: the stash for layer inputs and lnf's input; the
 * caller's `out` for a non-final stage's output. */
static float *x_slot(const gpt_shape *sh, const gpt_stash_layout *L, char *st, float *out, int l) {
    if (l < sh->L) return (float *)(st + L->layers + (size_t)l * L->layer_stride);
    return sh->last ? (float *)(st + L->xf) : out;
}

static double head_forward(const gpt_shape *sh, const gemms *g, const gpt_param_layout *P,
                           const gpt_stash_layout *L, const float *params, const int32_t *tgt,
                           char *st, float *logits) {
    int B = sh->B, T = sh->T, C = sh->C, V = sh->V, BT = B * T;
    int32_t *targets = (int32_t *)(st + L->targets);
    float *lnf = (float *)(st + L->lnf);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) targets[b * T + t] = tgt[(size_t)b * (T + 1) + t + 1];
    pp_layernorm_forward((const float *)(st + L->xf), params + P->lnfw, params + P->lnfb, BT, C,
                         lnf, (float *)(st + L->lnf_mean), (float *)(st + L->lnf_rstd));
    pp_gemm_aw(g, 0, 1, BT, V, C, lnf, params + P->wlm, 0.0f, logits);
    return pp_softmax_xent_forward(logits, targets, 1, BT, V, (float *)(st + L->probs));
}

static double gpt_forward(const pp_model *m, int S, int s, const void *weights, const void *in,
                          const int32_t *tgt, void *stash, void *work, float *out) {
    gpt_shape sh = gpt_shape_of(m, S, s);
    gpt_param_layout P = gpt_param_layout_of(&sh);
    gpt_stash_layout L = gpt_stash_layout_of(&sh);
    gpt_work_layout W = gpt_work_layout_of(&sh);
    gemms g = gemms_of(&sh, &W, work);
    const float *params = pp_stage_params_of(sh.bf16, P.total, weights, (char *)work + W.wide);
    char *st = stash, *wk = work;

    float *x0 = x_slot(&sh, &L, st, out, 0);
    if (sh.first) {
        int32_t *tokens = (int32_t *)(st + L.tokens);
        memcpy(tokens, in, pp_tokens_bytes(m));
        pp_embedding_pos_forward(tokens, sh.B, sh.T, params + P.wte, params + P.wpe, sh.C, x0);
    } else {
        memmove(x0, in, pp_act_bytes(m)); /* memmove: in may be out when L == 0 */
    }
    for (int l = 0; l < sh.L; l++) {
        layer_acts acts = layer_acts_of(&L, st, l);
        layer_forward(&sh, &g, &P, params + P.layers + (size_t)l * P.layer_stride, &acts,
                      (float *)(wk + W.att), x_slot(&sh, &L, st, out, l + 1));
    }
    double loss = sh.last ? head_forward(&sh, &g, &P, &L, params, tgt, st,
                                         (float *)(wk + W.logits))
                          : 0.0;
    return loss;
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

static const float *saved(const void *stash, size_t off) {
    return (const float *)((const char *)stash + off);
}

/* The gradients of one layer's backward: where they live (workspace when
 * fused, the stash's split region for B of a split backward). */
typedef struct {
    float *dh, *dln2, *dres, *datt, *dqkv, *dln1;
} layer_grads;

/* The MLP half's weight gradients (W's work, also run inline when fused). */
static void mlp_weight_grads(const gpt_shape *sh, const gemms *mm, const gpt_param_layout *P,
                             float *g, const layer_acts *a, const float *dy, const float *dh,
                             const float *dln2) {
    int BT = sh->B * sh->T, C = sh->C, F = sh->F;
    pp_gemm_aa(mm, 1, 0, C, F, BT, dy, a->fcg, g + P->fcprojw); /* dfcprojw += dy^T fcg */
    pp_bias_grad(dy, BT, C, g + P->fcprojb);
    pp_gemm_aa(mm, 1, 0, F, C, BT, dh, a->ln2, g + P->fcw); /* dfcw += dh^T ln2 */
    pp_bias_grad(dh, BT, F, g + P->fcb);
    pp_layernorm_backward(a->res, NULL, a->ln2_mean, a->ln2_rstd, dln2, BT, C, NULL, g + P->ln2w,
                          g + P->ln2b);
}

/* The attention half's weight gradients. */
static void att_weight_grads(const gpt_shape *sh, const gemms *mm, const gpt_param_layout *P,
                             float *g, const layer_acts *a, const float *dres, const float *dqkv,
                             const float *dln1) {
    int BT = sh->B * sh->T, C = sh->C;
    pp_gemm_aa(mm, 1, 0, C, C, BT, dres, a->atty, g + P->attprojw); /* dattprojw += dres^T atty */
    pp_bias_grad(dres, BT, C, g + P->attprojb);
    pp_gemm_aa(mm, 1, 0, 3 * C, C, BT, dqkv, a->ln1, g + P->qkvw); /* dqkvw += dqkv^T ln1 */
    pp_bias_grad(dqkv, BT, 3 * C, g + P->qkvb);
    pp_layernorm_backward(a->x, NULL, a->ln1_mean, a->ln1_rstd, dln1, BT, C, NULL, g + P->ln1w,
                          g + P->ln1b);
}

/* The reverse of layer_forward: dy (the gradient at y) to dx (at x). grads
 * non-NULL: the weight gradients as it goes (fused); NULL: the gradients
 * W needs stay in d (the split region). dx may be dy's buffer: dy is read
 * for the last time before dx is written. */
static void layer_backward(const gpt_shape *sh, const gemms *g, const gpt_param_layout *P,
                           const float *p, float *grads, const layer_acts *a,
                           const layer_grads *d, float *att_scratch, const float *dy,
                           float *dx) {
    int BT = sh->B * sh->T, C = sh->C, F = sh->F;
    size_t xn = (size_t)BT * C;
    /* MLP: dh = (dy fcprojw) * gelu'(fch); dln2 = dh fcw; dres = dy + LN2'. */
    pp_gemm_aw(g, 0, 0, BT, F, C, dy, p + P->fcprojw, 0.0f, d->dh);
    pp_gelu_backward(a->fch, d->dh, d->dh, (size_t)BT * F);
    pp_gemm_aw(g, 0, 0, BT, C, F, d->dh, p + P->fcw, 0.0f, d->dln2);
    if (grads) mlp_weight_grads(sh, g, P, grads, a, dy, d->dh, d->dln2);
    memcpy(d->dres, dy, xn * sizeof *d->dres);
    pp_layernorm_backward(a->res, p + P->ln2w, a->ln2_mean, a->ln2_rstd, d->dln2, BT, C,
                          d->dres, NULL, NULL);
    /* Attention: datt = dres attprojw; dqkv; dln1 = dqkv qkvw; dx = dres + LN1'. */
    pp_gemm_aw(g, 0, 0, BT, C, C, d->dres, p + P->attprojw, 0.0f, d->datt);
    {
        const float *qkv = att_qkv(sh, g, a->qkv), *dout = d->datt;
        if (g->bf16) {
            pp_round_bf16(d->datt, g->cb, xn);
            dout = g->cb;
        }
        pp_attention_backward(qkv, a->atty, dout, a->lse, d->dqkv, sh->B, sh->T, C, sh->NH,
                              gpt_att_rows(sh), att_scratch, sh->bf16);
    }
    pp_gemm_aw(g, 0, 0, BT, C, 3 * C, d->dqkv, p + P->qkvw, 0.0f, d->dln1);
    if (grads) att_weight_grads(sh, g, P, grads, a, d->dres, d->dqkv, d->dln1);
    memcpy(dx, d->dres, xn * sizeof *dx);
    pp_layernorm_backward(a->x, p + P->ln1w, a->ln1_mean, a->ln1_rstd, d->dln1, BT, C, dx, NULL,
                          NULL);
}

static void head_weight_grads(const gpt_shape *sh, const gemms *g, const gpt_param_layout *P,
                              const gpt_stash_layout *L, float *grads, const void *stash,
                              const float *dlogits, const float *dlnf) {
    int BT = sh->B * sh->T, C = sh->C;
    pp_gemm_aa(g, 1, 0, sh->V, C, BT, dlogits, saved(stash, L->lnf), grads + P->wlm);
    pp_layernorm_backward(saved(stash, L->xf), NULL, saved(stash, L->lnf_mean),
                          saved(stash, L->lnf_rstd), dlnf, BT, C, NULL, grads + P->lnfw,
                          grads + P->lnfb);
}

/* The backward walk, fused (grads non-NULL) or as B of a split backward
 * (grads NULL: what W needs goes to the stash's split region). */
static void backward_walk(const pp_model *m, int S, int s, const void *weights, float *grads,
                          const void *stash, void *work, const float *dout, float *din,
                          float loss_scale) {
    gpt_shape sh = gpt_shape_of(m, S, s);
    gpt_param_layout P = gpt_param_layout_of(&sh);
    gpt_stash_layout L = gpt_stash_layout_of(&sh);
    gpt_work_layout W = gpt_work_layout_of(&sh);
    gemms g = gemms_of(&sh, &W, work);
    const float *params = pp_stage_params_of(sh.bf16, P.total, weights, (char *)work + W.wide);
    char *st = (char *)(uintptr_t)stash, *wk = work; /* the split tail is writable */
    float *dx = (float *)(wk + W.dx);
    int BT = sh.B * sh.T, C = sh.C;
    size_t xbytes = (size_t)BT * C * sizeof(float);

    const float *dy = dout;
    if (sh.last) {
        const int32_t *targets = (const int32_t *)(st + L.targets);
        float *dlogits = (float *)(grads ? wk + W.logits : st + L.wdlogits);
        float *dlnf = (float *)(grads ? wk + W.dln : st + L.wdlnf);
        float *dst = (sh.L == 0 && !sh.first) ? din : dx;
        pp_softmax_xent_backward(saved(stash, L.probs), targets, 1, BT, sh.V, loss_scale,
                                 dlogits);
        pp_gemm_aw(&g, 0, 0, BT, C, sh.V, dlogits, params + P.wlm, 0.0f, dlnf); /* dlnf = dlogits wlm */
        if (grads) head_weight_grads(&sh, &g, &P, &L, grads, stash, dlogits, dlnf);
        memset(dst, 0, xbytes);
        pp_layernorm_backward(saved(stash, L.xf), params + P.lnfw, saved(stash, L.lnf_mean),
                              saved(stash, L.lnf_rstd), dlnf, BT, C, dst, NULL, NULL);
        dy = dst;
    }
    for (int l = sh.L - 1; l >= 0; l--) {
        layer_acts acts = layer_acts_of(&L, stash, l);
        size_t pl = P.layers + (size_t)l * P.layer_stride;
        float *dst = (l == 0 && !sh.first) ? din : dx;
        layer_grads d;
        d.datt = (float *)(wk + W.datt);
        if (grads) {
            d.dh = (float *)(wk + W.dh);
            d.dln2 = (float *)(wk + W.dln);
            d.dres = (float *)(wk + W.dres);
            d.dqkv = (float *)(wk + W.dqkv);
            d.dln1 = (float *)(wk + W.dln); /* dln2 is spent by then */
        } else {
            char *wl = st + L.wlayers + (size_t)l * L.wlayer_stride;
            memcpy(wl, dy, xbytes); /* dy, before dx may overwrite it */
            d.dh = (float *)(wl + L.wdh);
            d.dln2 = (float *)(wl + L.wdln2);
            d.dres = (float *)(wl + L.wdres);
            d.dqkv = (float *)(wl + L.wdqkv);
            d.dln1 = (float *)(wl + L.wdln1);
        }
        layer_backward(&sh, &g, &P, params + pl, grads ? grads + pl : NULL, &acts, &d,
                       (float *)(wk + W.att), dy, dst);
        dy = dst;
    }
    if (sh.first) {
        const int32_t *tokens = (const int32_t *)(st + L.tokens);
        if (grads)
            pp_embedding_pos_backward(tokens, sh.B, sh.T, dy, C, grads + P.wte, grads + P.wpe);
        else
            memcpy(st + L.wdx0, dy, xbytes);
    } else if (dy != din) {
        memmove(din, dy, pp_act_bytes(m)); /* a middle stage without layers */
    }
}

static void gpt_backward(const pp_model *m, int S, int s, const void *weights, float *grads,
                         const void *stash, void *work, const float *dout, float *din,
                         float loss_scale) {
    backward_walk(m, S, s, weights, grads, stash, work, dout, din, loss_scale);
}

static void gpt_backward_input(const pp_model *m, int S, int s, const void *weights,
                               void *stash, void *work, const float *dout, float *din,
                               float loss_scale) {
    backward_walk(m, S, s, weights, NULL, stash, work, dout, din, loss_scale);
}

static void gpt_backward_weight(const pp_model *m, int S, int s, float *grads, const void *stash,
                                void *work) {
    gpt_shape sh = gpt_shape_of(m, S, s);
    gpt_param_layout P = gpt_param_layout_of(&sh);
    gpt_stash_layout L = gpt_stash_layout_of(&sh);
    gpt_work_layout W = gpt_work_layout_of(&sh);
    gemms g = gemms_of(&sh, &W, work);
    if (sh.last)
        head_weight_grads(&sh, &g, &P, &L, grads, stash, saved(stash, L.wdlogits),
                          saved(stash, L.wdlnf));
    for (int l = sh.L - 1; l >= 0; l--) {
        layer_acts acts = layer_acts_of(&L, stash, l);
        size_t wl = L.wlayers + (size_t)l * L.wlayer_stride;
        float *gl = grads + P.layers + (size_t)l * P.layer_stride;
        mlp_weight_grads(&sh, &g, &P, gl, &acts, saved(stash, wl), saved(stash, wl + L.wdh),
                         saved(stash, wl + L.wdln2));
        att_weight_grads(&sh, &g, &P, gl, &acts, saved(stash, wl + L.wdres),
                         saved(stash, wl + L.wdqkv), saved(stash, wl + L.wdln1));
    }
    if (sh.first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L.tokens);
        pp_embedding_pos_backward(tokens, sh.B, sh.T, saved(stash, L.wdx0), sh.C, grads + P.wte,
                                  grads + P.wpe);
    }
}

const pp_model_impl pp_model_gpt = {
    .name = "gpt",
    .init = gpt_init,
    .forward = gpt_forward,
    .backward = gpt_backward,
    .backward_input = gpt_backward_input,
    .backward_weight = gpt_backward_weight,
};
