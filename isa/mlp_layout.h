/* mlp_layout.h - where everything of an mlp stage lives: the shape, the
 * parameter layout, the stash layout and the workspace layout. The sizes
 * the compiler allocates (model_shape.h: pp_stage_param_count,
 * _stash_bytes, _workspace_bytes) are computed from them, and the CPU model
 * (kernels/mlp.c) and its GPU twin (kernels/mlp_cuda.cu) place their
 * tensors by them, so the three cannot drift. The layouts themselves are
 * described in kernels/mlp.c's file header. Header-only: included from C
 * and from CUDA C++. */
#ifndef PP_MODEL_LAYOUT_H
#define PP_MODEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model_desc.h"

typedef struct {
    int B, C, E, D, F, nb;
    int first, last;
    int bf16; /* precision bf16: weights are the bf16 copy, GEMM operands bf16 */
} shape;

static inline shape shape_of(const pp_model *m, int S, int s)
{
    shape sh;
    sh.B = (int)m->batch;
    sh.C = (int)m->context;
    sh.E = (int)m->embed;
    sh.D = (int)pp_model_width(m);
    sh.F = (int)m->ffn;
    sh.nb = (int)pp_model_layers(m, s);
    sh.first = s == 0;
    sh.last = s == S - 1;
    sh.bf16 = m->precision == PP_PREC_BF16;
    return sh;
}

/* Offsets (in floats) into a stage's parameter array; grads share it. The
 * order is model.h's: each block's layer norm, then its MLP; the head's
 * final layer norm, then its projection. */
typedef struct {
    size_t E;                    /* embedding [V][embed], first stage */
    size_t blocks, block_stride; /* block k starts at blocks + k*block_stride */
    size_t ln_g, ln_b;           /* the block's layer norm gamma, beta [D] */
    size_t W1, b1, W2, b2;       /* (all relative to the block's start) */
    size_t lnf_g, lnf_b;         /* final layer norm gamma, beta [D], last stage */
    size_t Wh, bh;               /* head, last stage */
    size_t total;
} param_layout;

static inline param_layout param_layout_of(const shape *sh)
{
    param_layout P;
    size_t D = (size_t)sh->D, F = (size_t)sh->F;
    size_t n = 0;
    P.E = n;
    if (sh->first)
        n += (size_t)PP_VOCAB * (size_t)sh->E;
    P.ln_g = 0;
    P.ln_b = P.ln_g + D;
    P.W1 = P.ln_b + D;
    P.b1 = P.W1 + F * D;
    P.W2 = P.b1 + F;
    P.b2 = P.W2 + D * F;
    P.block_stride = P.b2 + D;
    P.blocks = n;
    n += (size_t)sh->nb * P.block_stride;
    P.lnf_g = n;
    P.lnf_b = P.lnf_g + D;
    P.Wh = P.lnf_b + D;
    P.bh = P.Wh + (size_t)PP_VOCAB * D;
    if (sh->last)
        n = P.bh + PP_VOCAB;
    P.total = n;
    return P;
}

/* Byte offsets into the stash (what F leaves for B); the layout is
 * kernels/mlp.c's file header. With bf16, u, a and z (GEMM operands, read
 * by nothing else) are the bf16 values the GEMMs consume, 2 bytes each, as
 * gpt_layout.h's `act` regions (which say why the rest stays fp32). */
typedef struct {
    size_t tokens;
    size_t blocks, block_stride; /* x_k at blocks + k*block_stride, */
    size_t u, mean, rstd, h, a;  /* the others relative to x_k */
    size_t xh, z, meanf, rstdf, probs, targets;
    size_t total;
    /* split backward: what B leaves for W, after the above */
    size_t wblocks, wblock_stride; /* dy_k at wblocks + k*wblock_stride, */
    size_t wdh, wdu;               /* dh_k and du_k relative to it */
    size_t wdlogits, wduf, wdx0;
    size_t total_split;
} stash_layout;

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Reserves `bytes` at the cursor and returns their offset. */
static inline size_t take(size_t *cur, size_t bytes)
{
    size_t off = *cur;
    *cur += round16(bytes);
    return off;
}

static inline stash_layout stash_layout_of(const shape *sh)
{
    stash_layout L;
    size_t B = (size_t)sh->B, D = (size_t)sh->D, F = (size_t)sh->F, V = PP_VOCAB;
    size_t xbytes = B * D * sizeof(float), hbytes = B * F * sizeof(float);
    size_t rbytes = B * sizeof(float);         /* one float per row: mean, rstd */
    size_t act = sh->bf16 ? 2 : sizeof(float); /* u, a, z: bf16 with bf16 */
    size_t cur = 0, blk = 0;
    memset(&L, 0, sizeof L);
    if (sh->first)
        L.tokens = take(&cur, B * (size_t)(sh->C + 1) * sizeof(int32_t));
    (void)take(&blk, xbytes); /* x_k */
    L.u = take(&blk, B * D * act);
    L.mean = take(&blk, rbytes);
    L.rstd = take(&blk, rbytes);
    L.h = take(&blk, hbytes);
    L.a = take(&blk, B * F * act);
    L.block_stride = blk;
    L.blocks = cur;
    cur += (size_t)sh->nb * L.block_stride;
    if (sh->last) {
        L.xh = take(&cur, xbytes);
        L.z = take(&cur, B * D * act);
        L.meanf = take(&cur, rbytes);
        L.rstdf = take(&cur, rbytes);
        L.probs = take(&cur, B * V * sizeof(float));
        L.targets = take(&cur, B * sizeof(int32_t));
    }
    /* A middle stage without blocks keeps nothing, but every F names a
     * stash slot, and a slot is never empty. */
    if (cur == 0)
        (void)take(&cur, 16);
    L.total = cur;
    blk = 0;
    (void)take(&blk, xbytes); /* dy_k */
    L.wdh = take(&blk, hbytes);
    L.wdu = take(&blk, xbytes);
    L.wblock_stride = blk;
    L.wblocks = cur;
    cur += (size_t)sh->nb * L.wblock_stride;
    if (sh->last) {
        L.wdlogits = take(&cur, B * V * sizeof(float));
        L.wduf = take(&cur, xbytes);
    }
    if (sh->first)
        L.wdx0 = take(&cur, xbytes);
    L.total_split = cur;
    return L;
}

/* Byte offsets into the workspace: scratch whose contents mean nothing
 * between calls, so one workspace per rank serves every F and B it runs
 * (they run one at a time) instead of one per stash held. */
typedef struct {
    size_t logits, dh, du, dx;
    size_t ca, cb; /* bf16 only: GEMM operands rounded */
    size_t wide;   /* bf16 only: the compute copy widened to fp32 (the CPU's) */
    size_t total;
} work_layout;

static inline work_layout work_layout_of(const shape *sh)
{
    work_layout W;
    size_t B = (size_t)sh->B, D = (size_t)sh->D, F = (size_t)sh->F, V = PP_VOCAB;
    size_t xbytes = B * D * sizeof(float), hbytes = B * F * sizeof(float);
    size_t cur = 0;
    memset(&W, 0, sizeof W);
    if (sh->last)
        W.logits = take(&cur, B * V * sizeof(float));
    if (sh->nb > 0)
        W.dh = take(&cur, hbytes);
    if (sh->nb > 0 || sh->last)
        W.du = take(&cur, xbytes);
    W.dx = take(&cur, xbytes);
    if (sh->bf16) {
        /* Room for any activation operand of a GEMM ([B][D], [B][F] or
         * [B][V]) as floats: the CPU rounds into them, the GPU casts into
         * them (using half). */
        size_t widest = (size_t)(D > F ? D : F);
        if (widest < V)
            widest = V;
        W.ca = take(&cur, B * widest * sizeof(float));
        W.cb = take(&cur, B * widest * sizeof(float));
        /* The CPU's GEMMs read fp32: every job widens the bf16 weights
         * (exactly) into this region, sized here so that no job allocates
         * and the plan's workspace is all a rank needs. */
        W.wide = take(&cur, param_layout_of(sh).total * sizeof(float));
    }
    W.total = cur;
    return W;
}

#endif
