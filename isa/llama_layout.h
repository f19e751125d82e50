/* llama_layout.h - where everything of a llama stage lives: the shape, the
 * parameter layout (= the weight file layout), the stash layout and the
 * workspace layout. The sizes the compiler allocates (model_shape.c) are
 * computed from them and the CPU model (kernels/llama.c) places its tensors
 * by them, so the two cannot drift. The model is described in llama.c's
 * file header and in kernels/README.md ("The Llama model"). Header-only;
 * every name starts with llama_.
 *
 * Notation: B = batch, T = context, C = embed, NH = heads, KV = kv_heads,
 * A = the attention's width (C; C / T on a rank of tensor = T, NH and KV
 * then heads / T and kv_heads / T: isa/tensor.h), hs = A / NH, Kd = KV * hs
 * (the width of k and of v), Q = A + 2 Kd (one row of the fused q, k, v
 * projection), F = ffn, V = vocab, L = the stage's layers, BT = B * T rows. */
#ifndef PP_LLAMA_LAYOUT_H
#define PP_LLAMA_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gpt_layout.h" /* GPT_ATT_ROWS, gpt_take, gpt_att_scratch_floats: the same attention */
#include "model_desc.h"

typedef struct {
    int B, T, C, NH, KV, A, hs, Kd, Q, F, V, L;
    int first, last;
    int bf16;
    float eps;    /* RMSNorm's epsilon */
    double theta; /* the rotary base */
} llama_shape;

static inline llama_shape llama_shape_of(const pp_model *m, int S, int s)
{
    llama_shape sh;
    sh.B = (int)m->batch;
    sh.T = (int)m->context;
    sh.C = (int)m->embed;
    sh.NH = (int)m->heads;
    sh.KV = (int)m->kv_heads;
    sh.A = m->attn ? (int)m->attn : sh.C;
    sh.hs = sh.NH > 0 ? sh.A / sh.NH : 0;
    sh.Kd = sh.KV * sh.hs;
    sh.Q = sh.A + 2 * sh.Kd;
    sh.F = (int)m->ffn;
    sh.V = (int)m->vocab;
    sh.L = (int)pp_model_layers(m, s);
    sh.first = s == 0;
    sh.last = s == S - 1;
    sh.bf16 = m->precision == PP_PREC_BF16;
    sh.eps = m->norm_eps;
    sh.theta = (double)m->rope_theta;
    return sh;
}

static inline int llama_att_rows(const llama_shape *sh)
{
    return sh->T < GPT_ATT_ROWS ? sh->T : GPT_ATT_ROWS;
}

/* Offsets (in floats) into a stage's parameter array (= its gradients, its
 * weight file). In order:
 *   s == 0:    wte [V][C]
 *   layer l (at layers + l*layer_stride):
 *              n1w [C], wqkv [Q][C] (rows [q (A) | k (Kd) | v (Kd)], head h
 *              of q at rows h*hs, kv head j of k and v at j*hs), wo [C][A],
 *              n2w [C], wgu [2F][C] (rows [gate (F) | up (F)]), wd [C][F]
 *   s == S-1:  nfw [C], wlm [V][C]
 * No biases. */
typedef struct {
    size_t wte;
    size_t layers, layer_stride;
    size_t n1w, wqkv, wo, n2w, wgu, wd;
    size_t nfw, wlm;
    size_t total;
} llama_param_layout;

static inline llama_param_layout llama_param_layout_of(const llama_shape *sh)
{
    llama_param_layout P;
    size_t C = (size_t)sh->C, F = (size_t)sh->F, V = (size_t)sh->V, Q = (size_t)sh->Q;
    size_t A = (size_t)sh->A, n = 0;
    memset(&P, 0, sizeof P);
    if (sh->first) {
        P.wte = n;
        n += V * C;
    }
    P.n1w = 0;
    P.wqkv = P.n1w + C;
    P.wo = P.wqkv + Q * C;
    P.n2w = P.wo + C * A;
    P.wgu = P.n2w + C;
    P.wd = P.wgu + 2 * F * C;
    P.layer_stride = P.wd + C * F;
    P.layers = n;
    n += (size_t)sh->L * P.layer_stride;
    if (sh->last) {
        P.nfw = n;
        P.wlm = n + C;
        n = P.wlm + V * C;
    }
    P.total = n;
    return P;
}

/* Byte offsets into the stash (what F leaves for B), 16-byte aligned.
 * `act`: float, or with bf16 a bf16 value, 2 bytes (gpt_layout.h's rule,
 * which says why the rest stays fp32): the GEMM and attention operands n1,
 * qkv, n2, h and nf, and the bf16 outputs of the attention (atty) and of
 * the gate/up projection (gu, SwiGLU's input: its derivative is taken in
 * fp32 from the bf16 values).
 *   s == 0:       tokens  int32 [B][T+1]
 *   layer l (at layers + l*layer_stride; x at offset 0):
 *                 x       float [BT][C]    the layer's input
 *                 n1      act   [BT][C]    RMSNorm 1's output
 *                 n1_rstd float [BT]
 *                 qkv     act   [BT][3A]   q and k rotated, k and v repeated
 *                                          to NH heads: the attention's input
 *                 atty    act   [BT][A]    attention output (before wo)
 *                 lse     float [B][NH][T]
 *                 res     float [BT][C]    x + atty wo^T
 *                 n2      act   [BT][C]    RMSNorm 2's output
 *                 n2_rstd float [BT]
 *                 gu      act   [BT][2F]   [gate | up] before SwiGLU
 *                 h       act   [BT][F]    silu(gate) * up
 *   s == S-1:     xf float, nf act [BT][C], nf_rstd float [BT], probs float
 *                 [BT][V], targets int32 [BT]
 * A split backward's B leaves for W, after the above:
 *   layer l (at wlayers + l*wlayer_stride; dy at offset 0):
 *                 dy [BT][C], dgu [BT][2F], dn2 [BT][C], dres [BT][C],
 *                 dqkv [BT][Q] (at the projection's output), dn1 [BT][C]
 *   s == S-1:     dlogits [BT][V], dnf [BT][C]
 *   s == 0:       dx0 [BT][C] */
typedef struct {
    size_t tokens;
    size_t layers, layer_stride;
    size_t n1, n1_rstd, qkv, atty, lse, res, n2, n2_rstd, gu, h;
    size_t xf, nf, nf_rstd, probs, targets;
    size_t total;
    size_t wlayers, wlayer_stride;
    size_t wdgu, wdn2, wdres, wdqkv, wdn1;
    size_t wdlogits, wdnf, wdx0;
    size_t total_split;
} llama_stash_layout;

static inline llama_stash_layout llama_stash_layout_of(const llama_shape *sh)
{
    llama_stash_layout L;
    size_t BT = (size_t)sh->B * (size_t)sh->T, C = (size_t)sh->C, F = (size_t)sh->F;
    size_t V = (size_t)sh->V, Q = (size_t)sh->Q;
    size_t xb = BT * C * sizeof(float), fb = BT * F * sizeof(float), rb = BT * sizeof(float);
    size_t cur = 0, blk = 0;
    size_t act = sh->bf16 ? 2 : sizeof(float); /* an `act` element */
    memset(&L, 0, sizeof L);
    if (sh->first)
        L.tokens = gpt_take(&cur, (size_t)sh->B * (size_t)(sh->T + 1) * sizeof(int32_t));
    (void)gpt_take(&blk, xb); /* x */
    L.n1 = gpt_take(&blk, BT * C * act);
    L.n1_rstd = gpt_take(&blk, rb);
    L.qkv = gpt_take(&blk, BT * 3 * (size_t)sh->A * act);
    L.atty = gpt_take(&blk, BT * (size_t)sh->A * act);
    L.lse = gpt_take(&blk, (size_t)sh->B * (size_t)sh->NH * (size_t)sh->T * sizeof(float));
    L.res = gpt_take(&blk, xb);
    L.n2 = gpt_take(&blk, BT * C * act);
    L.n2_rstd = gpt_take(&blk, rb);
    L.gu = gpt_take(&blk, 2 * BT * F * act);
    L.h = gpt_take(&blk, BT * F * act);
    L.layer_stride = blk;
    L.layers = cur;
    cur += (size_t)sh->L * L.layer_stride;
    if (sh->last) {
        L.xf = gpt_take(&cur, xb);
        L.nf = gpt_take(&cur, BT * C * act);
        L.nf_rstd = gpt_take(&cur, rb);
        L.probs = gpt_take(&cur, BT * V * sizeof(float));
        L.targets = gpt_take(&cur, BT * sizeof(int32_t));
    }
    if (cur == 0) /* a stash slot is never empty */
        (void)gpt_take(&cur, 16);
    L.total = cur;
    blk = 0;
    (void)gpt_take(&blk, xb); /* dy */
    L.wdgu = gpt_take(&blk, 2 * fb);
    L.wdn2 = gpt_take(&blk, xb);
    L.wdres = gpt_take(&blk, xb);
    L.wdqkv = gpt_take(&blk, BT * Q * sizeof(float));
    L.wdn1 = gpt_take(&blk, xb);
    L.wlayer_stride = blk;
    L.wlayers = cur;
    cur += (size_t)sh->L * L.wlayer_stride;
    if (sh->last) {
        L.wdlogits = gpt_take(&cur, BT * V * sizeof(float));
        L.wdnf = gpt_take(&cur, xb);
    }
    if (sh->first)
        L.wdx0 = gpt_take(&cur, xb);
    L.total_split = cur;
    return L;
}

/* Byte offsets into the workspace (scratch, nothing kept between calls).
 *   s == S-1:          logits float [BT][V]   logits in F, dlogits in B
 *   L > 0:             dh    float [BT][F]    gradient at h
 *                      dgu   float [BT][2F]   gradient at gu
 *                      dres  float [BT][C]
 *                      datt  float [BT][A]    gradient at atty
 *                      dqkv  float [BT][3A]   gradient at the attention's qkv
 *                      qkvc  float [BT][Q]    the projection's output (F), its
 *                                             gradient (B)
 *                      rope  float [T][hs]    cos then sin per position
 *                      att   float [2RT + R]  attention scratch
 *   L > 0 or s == S-1: dln   float [BT][C]
 *   always:            dx    float [BT][C]
 *   bf16:              ca, cb float [BT][max(C, 3A, 2F, V)], wide float [params]
 *                      (on the GPU cb's second half also holds a gradient
 *                      rounded once for its two GEMMs, gpt_layout.h's rule) */
typedef struct {
    size_t logits, dh, dgu, dres, datt, dqkv, qkvc, rope, att, dln, dx;
    size_t ca, cb, wide;
    size_t total;
} llama_work_layout;

/* The widest GEMM operand row, max(C, 3A, 2F, V) (Q <= 3A): ca and cb
 * hold BT such rows of floats. */
static inline size_t llama_work_widest(const llama_shape *sh)
{
    size_t w = 3 * (size_t)sh->A;
    if (w < (size_t)sh->C)
        w = (size_t)sh->C;
    if (w < 2 * (size_t)sh->F)
        w = 2 * (size_t)sh->F;
    if (w < (size_t)sh->V)
        w = (size_t)sh->V;
    return w;
}

static inline llama_work_layout llama_work_layout_of(const llama_shape *sh)
{
    llama_work_layout W;
    size_t BT = (size_t)sh->B * (size_t)sh->T, C = (size_t)sh->C, F = (size_t)sh->F;
    size_t V = (size_t)sh->V, Q = (size_t)sh->Q;
    size_t xb = BT * C * sizeof(float), ab = BT * (size_t)sh->A * sizeof(float);
    size_t cur = 0;
    memset(&W, 0, sizeof W);
    if (sh->last)
        W.logits = gpt_take(&cur, BT * V * sizeof(float));
    if (sh->L > 0) {
        W.dh = gpt_take(&cur, BT * F * sizeof(float));
        W.dgu = gpt_take(&cur, 2 * BT * F * sizeof(float));
        W.dres = gpt_take(&cur, xb);
        W.datt = gpt_take(&cur, ab);
        W.dqkv = gpt_take(&cur, 3 * ab);
        W.qkvc = gpt_take(&cur, BT * Q * sizeof(float));
        W.rope = gpt_take(&cur, (size_t)sh->T * (size_t)sh->hs * sizeof(float));
        W.att = gpt_take(&cur, gpt_att_scratch_floats(sh->T, llama_att_rows(sh)) * sizeof(float));
    }
    if (sh->L > 0 || sh->last)
        W.dln = gpt_take(&cur, xb);
    W.dx = gpt_take(&cur, xb);
    if (sh->bf16) {
        size_t widest = llama_work_widest(sh);
        W.ca = gpt_take(&cur, BT * widest * sizeof(float));
        W.cb = gpt_take(&cur, BT * widest * sizeof(float));
        W.wide = gpt_take(&cur, llama_param_layout_of(sh).total * sizeof(float));
    }
    W.total = cur;
    return W;
}

#endif
