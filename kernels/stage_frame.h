/* stage_frame.h - the stage skeleton's view of a stage, shared by the CPU
 * skeleton (stage.c) and the CUDA one (stage_cuda.h): where the pieces it
 * moves between blocks live (pp_stage_frame), and each model kind's
 * layouts gathered in one struct with the frame they give. Header-only:
 * included from C and from CUDA C++. */
#ifndef PP_STAGE_FRAME_H
#define PP_STAGE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/gpt_layout.h"
#include "../isa/mlp_layout.h"

/* Offsets the skeleton needs, taken from the kind's layouts. */
typedef struct {
    int nb; /* blocks (mlp) or layers (gpt) of the stage */
    int first, last, bf16;
    size_t params;                 /* floats of parameters */
    size_t pblocks, pblock_stride; /* params: block k at pblocks + k*pblock_stride */
    size_t tokens;                 /* stash: the tokens' copy (first stage) */
    size_t blocks, block_stride;   /* stash: block k's input at blocks + k*block_stride */
    size_t head_in;                /* stash: the head's input (last stage) */
    size_t wblocks, wblock_stride; /* split region: block k's dy at wblocks + k*wblock_stride */
    size_t wdx0;                   /* split region: the embedding's gradient (first stage) */
    size_t dx;                     /* workspace: the running input gradient */
    size_t wide, ca, cb;           /* workspace, bf16 only: widened weights, rounded operands */
} pp_stage_frame;

/* ------------------------------------------------------------------------ */
/* mlp                                                                       */

typedef struct {
    shape sh;
    param_layout P;
    stash_layout L;
    work_layout W;
} mlp_layouts;

static inline mlp_layouts mlp_layouts_of(const pp_model *m, int S, int s)
{
    mlp_layouts y;
    y.sh = shape_of(m, S, s);
    y.P = param_layout_of(&y.sh);
    y.L = stash_layout_of(&y.sh);
    y.W = work_layout_of(&y.sh);
    return y;
}

static inline pp_stage_frame mlp_frame_of(const mlp_layouts *y)
{
    pp_stage_frame f;
    f.nb = y->sh.nb;
    f.first = y->sh.first;
    f.last = y->sh.last;
    f.bf16 = y->sh.bf16;
    f.params = y->P.total;
    f.pblocks = y->P.blocks;
    f.pblock_stride = y->P.block_stride;
    f.tokens = y->L.tokens;
    f.blocks = y->L.blocks;
    f.block_stride = y->L.block_stride;
    f.head_in = y->L.xh;
    f.wblocks = y->L.wblocks;
    f.wblock_stride = y->L.wblock_stride;
    f.wdx0 = y->L.wdx0;
    f.dx = y->W.dx;
    f.wide = y->W.wide;
    f.ca = y->W.ca;
    f.cb = y->W.cb;
    return f;
}

/* ------------------------------------------------------------------------ */
/* transformers: gpt, and llama (llama_frame.h)                              */

/* gpt's and llama's layouts name their fields alike (isa/gpt_layout.h,
 * isa/llama_layout.h), so one definition gives each kind its
 * KIND_layouts struct, KIND_layouts_of and KIND_frame_of. */
#define PP_TRANSFORMER_FRAME(KIND)                                                                 \
    typedef struct {                                                                               \
        KIND##_shape sh;                                                                           \
        KIND##_param_layout P;                                                                     \
        KIND##_stash_layout L;                                                                     \
        KIND##_work_layout W;                                                                      \
        size_t BT; /* rows: batch * context */                                                     \
    } KIND##_layouts;                                                                              \
                                                                                                   \
    static inline KIND##_layouts KIND##_layouts_of(const pp_model *m, int S, int s)                \
    {                                                                                              \
        KIND##_layouts y;                                                                          \
        y.sh = KIND##_shape_of(m, S, s);                                                           \
        y.P = KIND##_param_layout_of(&y.sh);                                                       \
        y.L = KIND##_stash_layout_of(&y.sh);                                                       \
        y.W = KIND##_work_layout_of(&y.sh);                                                        \
        y.BT = (size_t)y.sh.B * (size_t)y.sh.T;                                                    \
        return y;                                                                                  \
    }                                                                                              \
                                                                                                   \
    static inline pp_stage_frame KIND##_frame_of(const KIND##_layouts *y)                          \
    {                                                                                              \
        pp_stage_frame f;                                                                          \
        f.nb = y->sh.L;                                                                            \
        f.first = y->sh.first;                                                                     \
        f.last = y->sh.last;                                                                       \
        f.bf16 = y->sh.bf16;                                                                       \
        f.params = y->P.total;                                                                     \
        f.pblocks = y->P.layers;                                                                   \
        f.pblock_stride = y->P.layer_stride;                                                       \
        f.tokens = y->L.tokens;                                                                    \
        f.blocks = y->L.layers;                                                                    \
        f.block_stride = y->L.layer_stride;                                                        \
        f.head_in = y->L.xf;                                                                       \
        f.wblocks = y->L.wlayers;                                                                  \
        f.wblock_stride = y->L.wlayer_stride;                                                      \
        f.wdx0 = y->L.wdx0;                                                                        \
        f.dx = y->W.dx;                                                                            \
        f.wide = y->W.wide;                                                                        \
        f.ca = y->W.ca;                                                                            \
        f.cb = y->W.cb;                                                                            \
        return f;                                                                                  \
    }

PP_TRANSFORMER_FRAME(gpt)

#endif
