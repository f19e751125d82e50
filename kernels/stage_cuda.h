/* stage_cuda.h - internal to the CUDA models (mlp_cuda.cu, gpt_cuda.cu;
 * C++ only): the stage skeleton on the GPU, written once, the twin of the
 * CPU's stage.c. F embeds the tokens (first stage) or takes the
 * activations, runs the blocks in order (each block's input kept in the
 * stash) and on the last stage the head and the loss; B walks back from
 * the head (last stage) or the output gradient through the blocks in
 * reverse, into the embedding's gradients (first stage) or the input
 * gradient; a split backward's B saves what W needs in the stash's split
 * region and W replays the weight-gradient work from it.
 *
 * A model kind K supplies its blocks as static member functions (the
 * kind's table, checked at compile time), W being the compute copy's
 * element type (float, or uint16_t for bf16):
 *   layouts, layouts_of(m, S, s), frame_of(&y)  (stage_frame.h)
 *   embed_forward<W>(r, y, params, tokens, x0)
 *   embed_backward(r, y, tokens, dx0, grads)
 *   block_forward<W>(r, y, k, p, stash, work, out)
 *   block_backward<W>(r, y, k, p, g, stash, work, dy, dx)   g NULL: split B
 *   block_weight(r, y, k, g, stash)
 *   head_forward<W>(r, y, params, tgt, stash, work, loss_scale)
 *   head_backward<W>(r, y, params, grads, stash, work, dx)  grads NULL: split B
 *   head_weight(r, y, grads, stash)
 * and cuda_stage<K>'s forward_any, backward_any, backward_input_any and
 * backward_weight are its pp_cuda_model_impl (cuda_stage.h).
 * Every call only enqueues work on the context's stream. */
#ifndef PP_STAGE_CUDA_H
#define PP_STAGE_CUDA_H

#include <stdint.h>

#include "cuda_stage.h"
#include "stage_frame.h"

extern "C" {
#include "../isa/model_shape.h"
}

template <typename K> struct cuda_stage {
    typedef typename K::layouts Y;

    /* Where block k's input lives: the stash for the blocks and the head;
     * the caller's `out` for the output of a non-final stage. */
    static float *x_slot(const pp_stage_frame *f, char *st, float *out, int k)
    {
        if (k < f->nb)
            return (float *)(st + f->blocks + (size_t)k * f->block_stride);
        return f->last ? (float *)(st + f->head_in) : out;
    }

    static run run_for(pp_cuda_model *cm, const pp_stage_frame *f, void *work)
    {
        return run_of(cm, f->bf16, (char *)work + f->ca, (char *)work + f->cb);
    }

    /* With precision bf16 what crosses a stage boundary is bf16 (stage.c,
     * pp_stage_forward): the input widened into the first block's input,
     * a non-last stage's output built in the workspace's dx and rounded
     * into out; in the backward dout widened into dx, the input gradient
     * built in dx and rounded into din. */
    template <typename W>
    static void forward(pp_cuda_model *cm, const pp_model *m, int S, int s, const W *params,
                        const void *in, const int32_t *tgt, void *stash, void *work, float *out,
                        float loss_scale)
    {
        Y y = K::layouts_of(m, S, s);
        pp_stage_frame f = K::frame_of(&y);
        const run rr = run_for(cm, &f, work), *r = &rr;
        char *st = (char *)stash;
        int round_out = f.bf16 && !f.last;
        float *yout = round_out ? (float *)((char *)work + f.dx) : out; /* fp32 output */
        size_t n = pp_act_f32_bytes(m) / sizeof(float);
        float *x0 = x_slot(&f, st, yout, 0);
        if (f.first) {
            int32_t *tokens = (int32_t *)(st + f.tokens);
            copy_d2d(r, tokens, in, pp_tokens_bytes(m));
            K::embed_forward(r, &y, params, tokens, x0);
        } else if (f.bf16) {
            cudaCheck(pp_cu_bf16_to_f32((const uint16_t *)in, x0, n, r->st));
        } else {
            copy_d2d(r, x0, in, pp_act_bytes(m)); /* nothing when in is out (no blocks) */
        }
        for (int k = 0; k < f.nb; k++)
            K::block_forward(r, &y, k, params + f.pblocks + (size_t)k * f.pblock_stride, stash,
                             work, x_slot(&f, st, yout, k + 1));
        if (round_out)
            cudaCheck(pp_cu_f32_to_bf16(yout, (uint16_t *)out, n, r->st));
        if (f.last)
            K::head_forward(r, &y, params, tgt, stash, work, loss_scale);
    }

    /* The backward walk, fused (grads non-NULL: weight gradients as it
     * goes) or the input half of a split backward (grads NULL: what W
     * needs goes to the stash's split region, which is writable by
     * contract). The very last input gradient of a non-first stage is
     * written straight to din (fp32; bf16: made in dx, then rounded). */
    template <typename W>
    static void backward_walk(pp_cuda_model *cm, const pp_model *m, int S, int s, const W *params,
                              float *grads, const void *stash, void *work, const float *dout,
                              float *din)
    {
        Y y = K::layouts_of(m, S, s);
        pp_stage_frame f = K::frame_of(&y);
        const run rr = run_for(cm, &f, work), *r = &rr;
        char *st = const_cast<char *>(static_cast<const char *>(stash));
        float *dx = (float *)((char *)work + f.dx);
        size_t xbytes = pp_act_f32_bytes(m), n = xbytes / sizeof(float);
        float *din32 = f.bf16 ? dx : din;
        const float *dy = dout;
        if (f.bf16 && !f.last) {
            cudaCheck(pp_cu_bf16_to_f32((const uint16_t *)dout, dx, n, r->st));
            dy = dx;
        }
        if (f.last) {
            float *dst = (f.nb == 0 && !f.first) ? din32 : dx;
            K::head_backward(r, &y, params, grads, stash, work, dst);
            dy = dst;
        }
        for (int k = f.nb - 1; k >= 0; k--) {
            size_t pk = f.pblocks + (size_t)k * f.pblock_stride;
            float *dst = (k == 0 && !f.first) ? din32 : dx;
            if (!grads) /* dy, before dst may overwrite it */
                copy_d2d(r, st + f.wblocks + (size_t)k * f.wblock_stride, dy, xbytes);
            K::block_backward(r, &y, k, params + pk, grads ? grads + pk : NULL, stash, work, dy,
                              dst);
            dy = dst;
        }
        if (f.first) {
            const int32_t *tokens = (const int32_t *)(st + f.tokens);
            if (grads)
                K::embed_backward(r, &y, tokens, dy, grads);
            else
                copy_d2d(r, st + f.wdx0, dy, xbytes);
        } else if (f.bf16) {
            cudaCheck(pp_cu_f32_to_bf16(dy, (uint16_t *)din, n, r->st));
        } else {
            copy_d2d(r, din, dy, xbytes); /* a middle stage without blocks is the identity */
        }
    }

    /* Exactly the weight-gradient work of the fused walk, in its order,
     * from what B saved (with bf16 rounding the same operands again). */
    static void backward_weight(pp_cuda_model *cm, const pp_model *m, int S, int s, float *grads,
                                const void *stash, void *work)
    {
        Y y = K::layouts_of(m, S, s);
        pp_stage_frame f = K::frame_of(&y);
        const run rr = run_for(cm, &f, work), *r = &rr;
        const char *st = (const char *)stash;
        if (f.last)
            K::head_weight(r, &y, grads, stash);
        for (int k = f.nb - 1; k >= 0; k--)
            K::block_weight(r, &y, k, grads + f.pblocks + (size_t)k * f.pblock_stride, stash);
        if (f.first)
            K::embed_backward(r, &y, (const int32_t *)(st + f.tokens), (const float *)(st + f.wdx0),
                              grads);
    }

    /* The entry points (pp_cuda_model_impl): the compute copy's type from
     * the model's precision. */
    static void forward_any(pp_cuda_model *cm, const pp_model *m, int S, int s, const void *weights,
                            const void *in, const int32_t *tgt, void *stash, void *work, float *out,
                            float loss_scale)
    {
        if (m->precision == PP_PREC_BF16)
            forward(cm, m, S, s, (const uint16_t *)weights, in, tgt, stash, work, out, loss_scale);
        else
            forward(cm, m, S, s, (const float *)weights, in, tgt, stash, work, out, loss_scale);
    }

    static void backward_any(pp_cuda_model *cm, const pp_model *m, int S, int s,
                             const void *weights, float *grads, const void *stash, void *work,
                             const float *dout, float *din)
    {
        if (m->precision == PP_PREC_BF16)
            backward_walk(cm, m, S, s, (const uint16_t *)weights, grads, stash, work, dout, din);
        else
            backward_walk(cm, m, S, s, (const float *)weights, grads, stash, work, dout, din);
    }

    static void backward_input_any(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                   const void *weights, void *stash, void *work, const float *dout,
                                   float *din)
    {
        backward_any(cm, m, S, s, weights, NULL, stash, work, dout, din);
    }
};

#endif
