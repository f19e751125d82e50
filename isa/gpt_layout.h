/* gpt_layout.h - where everything of a gpt stage lives: the shape, the
 * parameter layout (= the weight file layout), the stash layout and the
 * workspace layout. The sizes the compiler allocates (model_shape.h:
 * pp_stage_param_count, _stash_bytes, _workspace_bytes) are computed from
 * them, and the CPU model (kernels/gpt.c) and its GPU twin
 * (kernels/gpt_cuda.cu) place their tensors by them, so the three cannot
 * drift. The model itself is described in gpt.c's file header and in
 * kernels/README.md ("The GPT model"). Header-only: included from C and from
 * CUDA C++. Every name starts with gpt_ so it can sit beside mlp_layout.h.
 *
 * Notation: B = batch, T = context, C = embed, NH = heads, hs = A / NH,
 * A = the attention's inner width (C; C / T on a rank of tensor = T),
 * F = ffn, V = vocab, L = pp_model_layers(m, s) (this stage's layers),
 * BT = B * T rows (a row is one position of one sample). */
#ifndef PP_GPT_LAYOUT_H
#define PP_GPT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model_desc.h"

/* Query rows per attention block: the attention kernels hold one block of
 * rows of the T x T score matrix at a time (GPT_ATT_ROWS x T floats, two
 * such blocks in the backward). */
#define GPT_ATT_ROWS 64

typedef struct {
    /* A: the attention's inner width, NH * hs: C, or C / T on one rank of a
     * tensor-parallel stage (NH then its heads / T; model_desc.h's attn) */
    int B, T, C, NH, hs, A, F, V, L;
    int first, last;
    int bf16; /* precision bf16: weights are the bf16 copy, GEMM operands bf16 */
} gpt_shape;

static inline gpt_shape gpt_shape_of(const pp_model *m, int S, int s)
{
    gpt_shape sh;
    sh.B = (int)m->batch;
    sh.T = (int)m->context;
    sh.C = (int)m->embed;
    sh.NH = (int)m->heads;
    sh.A = m->attn ? (int)m->attn : sh.C;
    sh.hs = sh.NH > 0 ? sh.A / sh.NH : 0;
    sh.F = (int)m->ffn;
    sh.V = (int)m->vocab;
    sh.L = (int)pp_model_layers(m, s);
    sh.first = s == 0;
    sh.last = s == S - 1;
    sh.bf16 = m->precision == PP_PREC_BF16;
    /* (not the layers of all stages: only gpt_init needs them, and summing
     * them here made every size query O(S), ppc and the VM O(S^2)) */
    return sh;
}

/* Query rows per attention block for this shape: min(GPT_ATT_ROWS, T). */
static inline int gpt_att_rows(const gpt_shape *sh)
{
    return sh->T < GPT_ATT_ROWS ? sh->T : GPT_ATT_ROWS;
}

/* Offsets (in floats) into a stage's parameter array; grads share it, and
 * the weight files ppvm --save writes are this array. In order:
 *   s == 0:    wte [V][C], wpe [T][C]
 *   layer l (at layers + l*layer_stride), llm.c's order:
 *              ln1w [C], ln1b [C], qkvw [3A][C], qkvb [3A],
 *              attprojw [C][A], attprojb [C], ln2w [C], ln2b [C],
 *              fcw [F][C], fcb [F], fcprojw [C][F], fcprojb [C]
 *   s == S-1:  lnfw [C], lnfb [C], wlm [V][C] (no bias; untied from wte)
 * qkvw's rows are [q (A rows) | k (A) | v (A)], head h's rows of each at
 * h*hs. The per-layer offsets are relative to the layer's start. */
typedef struct {
    size_t wte, wpe;             /* first stage */
    size_t layers, layer_stride; /* layer l starts at layers + l*layer_stride */
    size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb;
    size_t ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    size_t lnfw, lnfb, wlm; /* last stage */
    size_t total;
} gpt_param_layout;

static inline gpt_param_layout gpt_param_layout_of(const gpt_shape *sh)
{
    gpt_param_layout P;
    size_t C = (size_t)sh->C, F = (size_t)sh->F, V = (size_t)sh->V, T = (size_t)sh->T;
    size_t A = (size_t)sh->A;
    size_t n = 0;
    memset(&P, 0, sizeof P);
    if (sh->first) {
        P.wte = n;
        n += V * C;
        P.wpe = n;
        n += T * C;
    }
    P.ln1w = 0;
    P.ln1b = P.ln1w + C;
    P.qkvw = P.ln1b + C;
    P.qkvb = P.qkvw + 3 * A * C;
    P.attprojw = P.qkvb + 3 * A;
    P.attprojb = P.attprojw + C * A;
    P.ln2w = P.attprojb + C;
    P.ln2b = P.ln2w + C;
    P.fcw = P.ln2b + C;
    P.fcb = P.fcw + F * C;
    P.fcprojw = P.fcb + F;
    P.fcprojb = P.fcprojw + C * F;
    P.layer_stride = P.fcprojb + C;
    P.layers = n;
    n += (size_t)sh->L * P.layer_stride;
    if (sh->last) {
        P.lnfw = n;
        P.lnfb = n + C;
        P.wlm = n + 2 * C;
        n = P.wlm + V * C;
    }
    P.total = n;
    return P;
}

/* Bytes of one stashed GEMM operand (the stash layout's `act`): bf16's 2,
 * or a float. */
static inline size_t gpt_act_bytes(const gpt_shape *sh) { return sh->bf16 ? 2 : sizeof(float); }

static inline size_t gpt_round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Reserves `bytes` at the cursor and returns their offset. */
static inline size_t gpt_take(size_t *cur, size_t bytes)
{
    size_t off = *cur;
    *cur += gpt_round16(bytes);
    return off;
}

/* Byte offsets into the stash (what F leaves for B). Every region starts at
 * a multiple of 16 bytes. `act` is float, or with bf16 a bf16 value (2
 * bytes): mixed precision's stash, as PyTorch autocast and FlashAttention-2
 * keep it, half the bytes. ln1, qkv, ln2, fcg and lnf are GEMM (or
 * attention) operands read by nothing else, so their bf16 copy is the value
 * every reader rounded them to anyway; atty and fch are the bf16 outputs of
 * the attention and of fc, as those frameworks' linear and attention
 * outputs are bf16: the attention backward's D_i = rowsum(dout o out) and
 * GELU's derivative are taken from the bf16 values (in fp32). What stays
 * fp32 does so for accuracy: x and res are the residual stream (fp32 sums;
 * layer norm's backward reads them), the layer-norm statistics and lse are
 * per-row reductions a bf16 rounding would bias, and probs (the loss's
 * softmax, dlogits on the GPU) are the loss's values.
 *   s == 0:       tokens  int32 [B][T+1]   the loaded microbatch
 *   layer l (at layers + l*layer_stride; x at offset 0, the rest relative):
 *                 x       float [BT][C]    the layer's input
 *                 ln1     act   [BT][C]    ln1's output
 *                 ln1_mean, ln1_rstd float [BT]
 *                 qkv     act   [BT][3A]   row = [q | k | v]
 *                 atty    act   [BT][A]    attention output (before attproj)
 *                 lse     float [B][NH][T] per query row: log sum exp of its
 *                                          scaled scores (the attention's
 *                                          backward recomputes P from it)
 *                 res     float [BT][C]    x + attproj(atty): ln2's input
 *                 ln2     act   [BT][C]    ln2's output
 *                 ln2_mean, ln2_rstd float [BT]
 *                 fch     act   [BT][F]    fc's output, before GELU
 *                 fcg     act   [BT][F]    GELU's output
 *   s == S-1:     xf      float [BT][C]    lnf's input (the last layer's output)
 *                 lnf     act   [BT][C]    lnf's output
 *                 lnf_mean, lnf_rstd float [BT]
 *                 probs   float [BT][V]    softmax of the logits
 *                 targets int32 [BT]       each position's next token
 * A non-final stage's last layer writes its output straight to `out`.
 * A split backward's B (backward_input) then leaves for W, after the above:
 *   layer l (at wlayers + l*wlayer_stride; dy at offset 0):
 *                 dy      float [BT][C]    gradient at the layer's output
 *                 dh      float [BT][F]    gradient at fch (before GELU)
 *                 dln2    float [BT][C]    gradient at ln2's output
 *                 dres    float [BT][C]    gradient at res
 *                 dqkv    float [BT][3A]   gradient at qkv
 *                 dln1    float [BT][C]    gradient at ln1's output
 *   s == S-1:     dlogits float [BT][V], dlnf float [BT][C]
 *   s == 0:       dx0     float [BT][C]    gradient at the embeddings' sum
 */
typedef struct {
    size_t tokens;
    size_t layers, layer_stride;
    size_t ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res, ln2, ln2_mean, ln2_rstd, fch, fcg;
    size_t xf, lnf, lnf_mean, lnf_rstd, probs, targets;
    size_t total;
    size_t wlayers, wlayer_stride;
    size_t wdh, wdln2, wdres, wdqkv, wdln1;
    size_t wdlogits, wdlnf, wdx0;
    size_t total_split;
} gpt_stash_layout;

static inline gpt_stash_layout gpt_stash_layout_of(const gpt_shape *sh)
{
    gpt_stash_layout L;
    size_t BT = (size_t)sh->B * (size_t)sh->T, C = (size_t)sh->C, F = (size_t)sh->F;
    size_t V = (size_t)sh->V;
    size_t xb = BT * C * sizeof(float), hb = BT * F * sizeof(float);
    size_t ab = BT * (size_t)sh->A * sizeof(float), rb = BT * sizeof(float);
    size_t act = gpt_act_bytes(sh); /* bytes of an `act` element */
    size_t cur = 0, blk = 0;
    memset(&L, 0, sizeof L);
    if (sh->first)
        L.tokens = gpt_take(&cur, (size_t)sh->B * (size_t)(sh->T + 1) * sizeof(int32_t));
    (void)gpt_take(&blk, xb); /* x */
    L.ln1 = gpt_take(&blk, BT * C * act);
    L.ln1_mean = gpt_take(&blk, rb);
    L.ln1_rstd = gpt_take(&blk, rb);
    L.qkv = gpt_take(&blk, BT * 3 * (size_t)sh->A * act);
    L.atty = gpt_take(&blk, BT * (size_t)sh->A * act);
    L.lse = gpt_take(&blk, (size_t)sh->B * (size_t)sh->NH * (size_t)sh->T * sizeof(float));
    L.res = gpt_take(&blk, xb);
    L.ln2 = gpt_take(&blk, BT * C * act);
    L.ln2_mean = gpt_take(&blk, rb);
    L.ln2_rstd = gpt_take(&blk, rb);
    L.fch = gpt_take(&blk, BT * F * act);
    L.fcg = gpt_take(&blk, BT * F * act);
    L.layer_stride = blk;
    L.layers = cur;
    cur += (size_t)sh->L * L.layer_stride;
    if (sh->last) {
        L.xf = gpt_take(&cur, xb);
        L.lnf = gpt_take(&cur, BT * C * act);
        L.lnf_mean = gpt_take(&cur, rb);
        L.lnf_rstd = gpt_take(&cur, rb);
        L.probs = gpt_take(&cur, BT * V * sizeof(float));
        L.targets = gpt_take(&cur, BT * sizeof(int32_t));
    }
    /* A middle stage without layers keeps nothing, but a stash slot is
     * never empty. */
    if (cur == 0)
        (void)gpt_take(&cur, 16);
    L.total = cur;
    blk = 0;
    (void)gpt_take(&blk, xb); /* dy */
    L.wdh = gpt_take(&blk, hb);
    L.wdln2 = gpt_take(&blk, xb);
    L.wdres = gpt_take(&blk, xb);
    L.wdqkv = gpt_take(&blk, 3 * ab);
    L.wdln1 = gpt_take(&blk, xb);
    L.wlayer_stride = blk;
    L.wlayers = cur;
    cur += (size_t)sh->L * L.wlayer_stride;
    if (sh->last) {
        L.wdlogits = gpt_take(&cur, BT * V * sizeof(float));
        L.wdlnf = gpt_take(&cur, xb);
    }
    if (sh->first)
        L.wdx0 = gpt_take(&cur, xb);
    L.total_split = cur;
    return L;
}

/* Byte offsets into the workspace: scratch whose contents mean nothing
 * between calls (one per rank serves every F and B it runs).
 *   s == S-1:         logits float [BT][V]  logits in F, dlogits in B
 *   L > 0:            dh     float [BT][F]  d(gelu out), then d(fch)
 *                     dres   float [BT][C]  gradient at res
 *                     datt   float [BT][A]  gradient at atty
 *                     dqkv   float [BT][3A] gradient at qkv
 *                     att    float [2*R*T + R] attention scratch, R =
 *                                           gpt_att_rows: one row block of
 *                                           scores/P, one of dP/dS, and the
 *                                           block's D_i = rowsum(dout o out)
 *   L > 0 or s == S-1: dln   float [BT][C]  gradient at a layer norm's output
 *   always:           dx     float [BT][C]  the running input gradient
 *   bf16:             ca, cb float [BT][max(C, 3A, F, V)]  GEMM operands rounded
 *                                           (ca: the first operand, or qkv
 *                                           for the attention; cb: the
 *                                           second, or the attention's dout;
 *                                           on the GPU, whose activations
 *                                           are bf16, cb's second half also
 *                                           holds a gradient rounded once
 *                                           for its two GEMMs)
 *                     wide   float [params] the compute copy widened to fp32
 *                                           (the CPU's GEMMs read fp32; the
 *                                           GPU reads bf16 and leaves it)
 */
typedef struct {
    size_t logits, dh, dres, datt, dqkv, att, dln, dx;
    size_t ca, cb;
    size_t wide;
    size_t total;
} gpt_work_layout;

/* Floats of attention scratch: one block of R rows of scores (forward), or
 * of P and dP plus R row sums (backward). */
static inline size_t gpt_att_scratch_floats(int T, int R)
{
    return 2 * (size_t)R * (size_t)T + (size_t)R;
}

/* The widest GEMM operand row, max(C, 3A, F, V): ca and cb hold BT such
 * rows of floats. */
static inline size_t gpt_work_widest(const gpt_shape *sh)
{
    size_t w = 3 * (size_t)sh->A;
    if (w < (size_t)sh->C)
        w = (size_t)sh->C;
    if (w < (size_t)sh->F)
        w = (size_t)sh->F;
    if (w < (size_t)sh->V)
        w = (size_t)sh->V;
    return w;
}

static inline gpt_work_layout gpt_work_layout_of(const gpt_shape *sh)
{
    gpt_work_layout W;
    size_t BT = (size_t)sh->B * (size_t)sh->T, C = (size_t)sh->C, F = (size_t)sh->F;
    size_t V = (size_t)sh->V;
    size_t xb = BT * C * sizeof(float), ab = BT * (size_t)sh->A * sizeof(float);
    size_t cur = 0;
    memset(&W, 0, sizeof W);
    if (sh->last)
        W.logits = gpt_take(&cur, BT * V * sizeof(float));
    if (sh->L > 0) {
        W.dh = gpt_take(&cur, BT * F * sizeof(float));
        W.dres = gpt_take(&cur, xb);
        W.datt = gpt_take(&cur, ab);
        W.dqkv = gpt_take(&cur, 3 * ab);
        W.att = gpt_take(&cur, gpt_att_scratch_floats(sh->T, gpt_att_rows(sh)) * sizeof(float));
    }
    if (sh->L > 0 || sh->last)
        W.dln = gpt_take(&cur, xb);
    W.dx = gpt_take(&cur, xb);
    if (sh->bf16) {
        size_t widest = gpt_work_widest(sh);
        W.ca = gpt_take(&cur, BT * widest * sizeof(float));
        W.cb = gpt_take(&cur, BT * widest * sizeof(float));
        W.wide = gpt_take(&cur, gpt_param_layout_of(sh).total * sizeof(float));
    }
    W.total = cur;
    return W;
}

#endif
