/* model_layout.h - where everything of a stage lives: the shapes, the
 * parameter layout and the stash layout of kernels/model.c, shared by the
 * CPU model and its GPU twin (model_cuda.cu) so the two cannot drift, and
 * the sizes the compiler allocates (pp_stage_param_count, _stash_bytes)
 * are the ones both use. The layouts themselves are described in model.c's
 * file header. Header-only: included from C and from CUDA C++. */
#ifndef PP_MODEL_LAYOUT_H
#define PP_MODEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../isa/model_desc.h"

typedef struct {
    int B, C, E, D, F, nb;
    int first, last;
} shape;

static inline shape shape_of(const pp_model *m, int S, int s) {
    shape sh;
    sh.B = (int)m->batch;
    sh.C = (int)m->context;
    sh.E = (int)m->embed;
    sh.D = (int)pp_model_width(m);
    sh.F = (int)m->ffn;
    sh.nb = (int)m->blocks;
    sh.first = s == 0;
    sh.last = s == S - 1;
    return sh;
}

/* Offsets (in floats) into a stage's parameter array; grads share it. */
typedef struct {
    size_t E;                    /* embedding [V][embed], first stage */
    size_t blocks, block_stride; /* block k starts at blocks + k*block_stride */
    size_t W1, b1, W2, b2;       /* relative to the block's start */
    size_t Wh, bh;               /* head, last stage */
    size_t total;
} param_layout;

static inline param_layout param_layout_of(const shape *sh) {
    param_layout P;
    size_t D = (size_t)sh->D, F = (size_t)sh->F;
    size_t n = 0;
    P.E = n;
    if (sh->first) n += (size_t)PP_VOCAB * (size_t)sh->E;
    P.W1 = 0;
    P.b1 = P.W1 + F * D;
    P.W2 = P.b1 + F;
    P.b2 = P.W2 + D * F;
    P.block_stride = P.b2 + D;
    P.blocks = n;
    n += (size_t)sh->nb * P.block_stride;
    P.Wh = n;
    P.bh = P.Wh + (size_t)PP_VOCAB * D;
    if (sh->last) n = P.bh + PP_VOCAB;
    P.total = n;
    return P;
}

/* Byte offsets into the stash; the layout is model.c's file header. */
typedef struct {
    size_t tokens;
    size_t blocks, block_stride, h, a; /* x_k at blocks + k*block_stride */
    size_t xh, probs, targets;
    size_t logits, dh, dx;             /* scratch */
    size_t total;
    /* split backward: what B leaves for W, after the above */
    size_t wblocks, wblock_stride, wdh; /* dy_k at wblocks + k*wblock_stride, dh_k at +wdh */
    size_t wdlogits, wdx0;
    size_t total_split;
} stash_layout;

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Reserves `bytes` at the cursor and returns their offset. */
static inline size_t take(size_t *cur, size_t bytes) {
    size_t off = *cur;
    *cur += round16(bytes);
    return off;
}

static inline stash_layout stash_layout_of(const shape *sh) {
    stash_layout L;
    size_t B = (size_t)sh->B, D = (size_t)sh->D, F = (size_t)sh->F, V = PP_VOCAB;
    size_t xbytes = B * D * sizeof(float), hbytes = B * F * sizeof(float);
    size_t cur = 0;
    memset(&L, 0, sizeof L);
    if (sh->first) L.tokens = take(&cur, B * (size_t)(sh->C + 1) * sizeof(int32_t));
    L.h = round16(xbytes);
    L.a = L.h + round16(hbytes);
    L.block_stride = L.a + round16(hbytes);
    L.blocks = cur;
    cur += (size_t)sh->nb * L.block_stride;
    if (sh->last) {
        L.xh = take(&cur, xbytes);
        L.probs = take(&cur, B * V * sizeof(float));
        L.targets = take(&cur, B * sizeof(int32_t));
        L.logits = take(&cur, B * V * sizeof(float));
    }
    if (sh->nb > 0) L.dh = take(&cur, hbytes);
    L.dx = take(&cur, xbytes);
    L.total = cur;
    L.wdh = round16(xbytes);
    L.wblock_stride = L.wdh + round16(hbytes);
    L.wblocks = cur;
    cur += (size_t)sh->nb * L.wblock_stride;
    if (sh->last) L.wdlogits = take(&cur, B * V * sizeof(float));
    if (sh->first) L.wdx0 = take(&cur, xbytes);
    L.total_split = cur;
    return L;
}

#endif
