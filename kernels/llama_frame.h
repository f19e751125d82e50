/* llama_frame.h - the llama kind's layouts gathered in one struct and the
 * stage frame (stage_frame.h) they give the skeleton, as stage_frame.h does
 * for mlp and gpt. Header-only. */
#ifndef PP_LLAMA_FRAME_H
#define PP_LLAMA_FRAME_H

#include "../isa/llama_layout.h"
#include "stage_frame.h"

typedef struct {
    llama_shape sh;
    llama_param_layout P;
    llama_stash_layout L;
    llama_work_layout W;
    size_t BT;
} llama_layouts;

static inline llama_layouts llama_layouts_of(const pp_model *m, int S, int s)
{
    llama_layouts y;
    y.sh = llama_shape_of(m, S, s);
    y.P = llama_param_layout_of(&y.sh);
    y.L = llama_stash_layout_of(&y.sh);
    y.W = llama_work_layout_of(&y.sh);
    y.BT = (size_t)y.sh.B * (size_t)y.sh.T;
    return y;
}

static inline pp_stage_frame llama_frame_of(const llama_layouts *y)
{
    pp_stage_frame f;
    f.nb = y->sh.L;
    f.first = y->sh.first;
    f.last = y->sh.last;
    f.bf16 = y->sh.bf16;
    f.params = y->P.total;
    f.pblocks = y->P.layers;
    f.pblock_stride = y->P.layer_stride;
    f.tokens = y->L.tokens;
    f.blocks = y->L.layers;
    f.block_stride = y->L.layer_stride;
    f.head_in = y->L.xf;
    f.wblocks = y->L.wlayers;
    f.wblock_stride = y->L.wlayer_stride;
    f.wdx0 = y->L.wdx0;
    f.dx = y->W.dx;
    f.wide = y->W.wide;
    f.ca = y->W.ca;
    f.cb = y->W.cb;
    return f;
}

#endif
