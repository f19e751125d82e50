/* stage.h - internal to the CPU models (stage.c, mlp.c, gpt.c): the stage
 * skeleton's view of one stage and the table through which a model kind
 * supplies its blocks.
 *
 * Every kind's stage has the same structure, which stage.c writes once:
 * F embeds the tokens (first stage) or takes the activations, runs the
 * blocks (mlp) or layers (gpt) in order, each block's input kept in the
 * stash, and on the last stage runs the head and the loss; B walks back
 * from the loss (last stage) or the output gradient, through the blocks in
 * reverse, into the embedding's gradients (first stage) or the input
 * gradient; a split backward's B saves what W needs in the stash's split
 * region and W replays the weight-gradient work from it. With bf16 the
 * weights are widened into the workspace first. A kind fills a
 * pp_stage_frame (stage_frame.h: where the skeleton finds the pieces it
 * moves) and supplies its blocks' arithmetic (pp_model_impl). The CUDA
 * twin of this skeleton is stage_cuda.h. */
#ifndef PP_STAGE_H
#define PP_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "llama_frame.h"
#include "stage_frame.h"
#include "stage_gemm.h"

/* One job on one stage, as the blocks see it. */
typedef struct pp_stage {
    const pp_model *m;
    int S, s;
    pp_stage_frame f;
    union {
        mlp_layouts mlp;
        gpt_layouts gpt;
        llama_layouts llama;
    } y;                 /* the kind's layouts (its open fills its member) */
    const float *params; /* the weights as fp32 (NULL in W, which reads none) */
    char *st, *wk;       /* the stash and the workspace */
    pp_stage_gemms g;    /* the GEMMs' precision (stage_gemm.h) */
} pp_stage;

/* One model kind's blocks. p and g point at block k's parameters and
 * gradients; g NULL in block_backward and head_backward means B of a split
 * backward: the gradients W needs go to the stash's split region (the
 * skeleton has saved dy at the block's split slot already). dx may be dy's
 * buffer. */
typedef struct {
    const char *name;
    /* Fill c->f and the kind's member of c->y from (c->m, c->S, c->s). */
    void (*open)(pp_stage *c);
    void (*init)(const pp_model *m, int S, int s, uint64_t seed, float *params);
    void (*embed_forward)(const pp_stage *c, const int32_t *tokens, float *x0);
    void (*embed_backward)(const pp_stage *c, const int32_t *tokens, const float *dx0,
                           float *grads);
    void (*block_forward)(const pp_stage *c, int k, const float *p, float *y);
    void (*block_backward)(const pp_stage *c, int k, const float *p, float *g, const float *dy,
                           float *dx);
    void (*block_weight)(const pp_stage *c, int k, float *g);
    /* Returns the summed cross-entropy over the microbatch's predictions. */
    double (*head_forward)(const pp_stage *c, const int32_t *tgt);
    void (*head_backward)(const pp_stage *c, float *grads, float loss_scale, float *dx);
    void (*head_weight)(const pp_stage *c, float *grads);
} pp_model_impl;

extern const pp_model_impl pp_model_mlp;   /* mlp.c */
extern const pp_model_impl pp_model_gpt;   /* gpt.c */
extern const pp_model_impl pp_model_llama; /* llama.c */

/* A stash region saved by F, read-only for B and W. */
static inline const float *pp_saved(const void *stash, size_t off)
{
    return (const float *)((const char *)stash + off);
}

#endif
