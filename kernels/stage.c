/* stage.c - the stage skeleton every model kind shares on the CPU (see
 * stage.h): which kind's blocks serve a model, and F, B, the split B and W
 * written once around them (model.h's pp_stage_* compute functions). */
#include "stage.h"

#include <string.h>

#include "../isa/tensor.h"
#include "cpu_kernels.h"

static const pp_model_impl *impl_of(const pp_model *m)
{
    switch (m->kind) {
    case PP_MODEL_MLP:
        return &pp_model_mlp;
    case PP_MODEL_GPT:
        return &pp_model_gpt;
    case PP_MODEL_LLAMA:
        return &pp_model_llama;
    default:
        return NULL; /* refused by the plan reader and the compiler */
    }
}

/* Under tensor = T a job computes its rank's shard of the stage, the model
 * with the MLP's inner width cut T ways (isa/tensor.h); m then names the
 * shard for the rest of the function. */
#define SHARD(model)                                                                               \
    pp_model shard_ = pp_model_shard(model);                                                       \
    const pp_model *m = &shard_

/* The stage as a job sees it. weights NULL: W, which reads no weights. */
static pp_stage open_stage(const pp_model_impl *k, const pp_model *m, int S, int s,
                           const void *weights, const void *stash, void *work)
{
    pp_stage c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.S = S;
    c.s = s;
    k->open(&c);
    c.st = (char *)(uintptr_t)stash; /* the split tail is writable by contract */
    c.wk = work;
    c.g = pp_stage_gemms_of(c.f.bf16, work, c.f.ca, c.f.cb);
    if (weights)
        c.params = pp_stage_params_of(c.f.bf16, c.f.params, weights, c.wk + c.f.wide);
    return c;
}

/* Where block k's input lives: the stash for the blocks and the head; the
 * caller's `out` for the output of a non-final stage (B does not need it). */
static float *x_slot(const pp_stage *c, float *out, int k)
{
    if (k < c->f.nb)
        return (float *)(c->st + c->f.blocks + (size_t)k * c->f.block_stride);
    return c->f.last ? (float *)(c->st + c->f.head_in) : out;
}

void pp_stage_init(const pp_model *m, int S, int s, uint64_t seed, float *params)
{
    const pp_model_impl *k = impl_of(m);
    if (k)
        k->init(m, S, s, seed, params);
}

/* With precision bf16 what crosses a stage boundary is bf16
 * (model_shape.h's pp_act_bytes): F widens the activations it receives
 * into the first block's input (exact) and a non-last stage builds its
 * output in fp32 in the workspace's dx region (which no forward of a
 * non-last stage uses) and rounds it into `out`, round to nearest even. */
double pp_stage_forward(const pp_model *model, int S, int s, const void *weights, const void *in,
                        const int32_t *tgt, void *stash, void *work, float *out)
{
    SHARD(model);
    const pp_model_impl *k = impl_of(m);
    if (!k)
        return 0.0;
    pp_stage c = open_stage(k, m, S, s, weights, stash, work);
    int round_out = c.f.bf16 && !c.f.last;
    float *y = round_out ? (float *)(c.wk + c.f.dx) : out; /* the stage's fp32 output */
    size_t n = pp_act_f32_bytes(m) / sizeof(float);
    float *x0 = x_slot(&c, y, 0);
    if (c.f.first) {
        int32_t *tokens = (int32_t *)(c.st + c.f.tokens);
        memcpy(tokens, in, pp_tokens_bytes(m));
        k->embed_forward(&c, tokens, x0);
    } else if (c.f.bf16) {
        pp_bf16_to_f32((const uint16_t *)in, x0, n);
    } else {
        memmove(x0, in, pp_act_bytes(m)); /* memmove: in may be out when nb == 0 */
    }
    for (int b = 0; b < c.f.nb; b++)
        k->block_forward(&c, b, c.params + c.f.pblocks + (size_t)b * c.f.pblock_stride,
                         x_slot(&c, y, b + 1));
    if (round_out)
        pp_f32_to_bf16(y, (uint16_t *)out, n);
    return c.f.last ? k->head_forward(&c, tgt) : 0.0;
}

/* The backward walk, fused (grads non-NULL: weight gradients as it goes)
 * or as B of a split backward (grads NULL: what W needs goes to the
 * stash's split region). The very last input gradient of a non-first stage
 * is written straight to din (fp32), or with bf16 built in dx and rounded
 * into din; a bf16 dout is first widened into dx (the blocks take dy == dx,
 * as every block after the stage's last does). */
static void backward_walk(const pp_model_impl *k, const pp_model *m, int S, int s,
                          const void *weights, float *grads, const void *stash, void *work,
                          const float *dout, float *din, float loss_scale)
{
    pp_stage c = open_stage(k, m, S, s, weights, stash, work);
    float *dx = (float *)(c.wk + c.f.dx);
    size_t xbytes = pp_act_f32_bytes(m), n = xbytes / sizeof(float);
    float *din32 = c.f.bf16 ? dx : din; /* where the input gradient is made */
    const float *dy = dout;             /* the gradient at the current point of the stage */
    if (c.f.bf16 && !c.f.last) {
        pp_bf16_to_f32((const uint16_t *)dout, dx, n);
        dy = dx;
    }
    if (c.f.last) {
        float *dst = (c.f.nb == 0 && !c.f.first) ? din32 : dx;
        k->head_backward(&c, grads, loss_scale, dst);
        dy = dst;
    }
    for (int b = c.f.nb - 1; b >= 0; b--) {
        size_t pb = c.f.pblocks + (size_t)b * c.f.pblock_stride;
        float *dst = (b == 0 && !c.f.first) ? din32 : dx;
        if (!grads) /* dy, before dst may overwrite it */
            memcpy(c.st + c.f.wblocks + (size_t)b * c.f.wblock_stride, dy, xbytes);
        k->block_backward(&c, b, c.params + pb, grads ? grads + pb : NULL, dy, dst);
        dy = dst;
    }
    if (c.f.first) {
        const int32_t *tokens = (const int32_t *)(c.st + c.f.tokens);
        if (grads)
            k->embed_backward(&c, tokens, dy, grads);
        else
            memcpy(c.st + c.f.wdx0, dy, xbytes);
    } else if (c.f.bf16) {
        pp_f32_to_bf16(dy, (uint16_t *)din, n);
    } else if (dy != din) {
        memmove(din, dy, xbytes); /* a middle stage without blocks is the identity */
    }
}

void pp_stage_backward(const pp_model *model, int S, int s, const void *weights, float *grads,
                       const void *stash, void *work, const float *dout, float *din,
                       float loss_scale)
{
    SHARD(model);
    const pp_model_impl *k = impl_of(m);
    if (k)
        backward_walk(k, m, S, s, weights, grads, stash, work, dout, din, loss_scale);
}

void pp_stage_backward_input(const pp_model *model, int S, int s, const void *weights, void *stash,
                             void *work, const float *dout, float *din, float loss_scale)
{
    SHARD(model);
    const pp_model_impl *k = impl_of(m);
    if (k)
        backward_walk(k, m, S, s, weights, NULL, stash, work, dout, din, loss_scale);
}

/* Exactly the weight-gradient work of the fused walk, in its order, from
 * what B saved. */
void pp_stage_backward_weight(const pp_model *model, int S, int s, float *grads, const void *stash,
                              void *work)
{
    SHARD(model);
    const pp_model_impl *k = impl_of(m);
    if (!k)
        return;
    pp_stage c = open_stage(k, m, S, s, NULL, stash, work);
    if (c.f.last)
        k->head_weight(&c, grads);
    for (int b = c.f.nb - 1; b >= 0; b--)
        k->block_weight(&c, b, grads + c.f.pblocks + (size_t)b * c.f.pblock_stride);
    if (c.f.first)
        k->embed_backward(&c, (const int32_t *)(c.st + c.f.tokens), pp_saved(c.st, c.f.wdx0),
                          grads);
}
