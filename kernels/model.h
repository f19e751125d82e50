/* model.h - a model's pipeline stages on the CPU: initialisation, forward
 * and backward (fused and split) and the optimizers, behind one table of
 * functions per model kind (pp_model_impl, stage.h): stage.c writes a
 * stage's structure once, and mlp.c (the demo model) and gpt.c (GPT-2)
 * supply their blocks. The shapes (sizes, layouts, FLOPs) are not
 * here but below both tools, in isa/model_shape.h, which this header
 * includes: the compiler uses those and links no kernel. Used by the VM's
 * cpu backend and the reference trainer (ppvm --reference), so both run
 * exactly the same arithmetic. A third model is one new file pair (its
 * layout in isa/, its blocks here), one line in stage.c and one in
 * isa/model_shape.c.
 *
 * Every model's stages share these conventions:
 * Tokens (a microbatch as loaded): int32 [batch][context + 1]; a sample's
 * inputs are its first `context` tokens, its targets the tokens after them
 * (mlp: the last one only; gpt: each position's next token).
 * Activations between stages: float [batch][pp_model_width] (gpt:
 * [batch][context][embed]).
 * Parameters: one float array per stage (pp_stage_param_count), laid out as
 * the model's layout header says (isa/mlp_layout.h, isa/gpt_layout.h);
 * gradients share the layout. The weight files ppvm --save writes are these
 * arrays (vm/README.md).
 * The stash is what F(s,b) leaves for B(s,b): opaque bytes, sized by
 * pp_stage_stash_bytes. The workspace is F's and B's scratch, sized by
 * pp_stage_workspace_bytes: its contents mean nothing between calls, so one
 * workspace (the largest of the stages a rank runs) serves all its jobs. */
#ifndef PP_MODEL_H
#define PP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/model_shape.h"

/* m->kind must be a pp_model_kind: the plan reader and the compiler refuse
 * any other before a job runs (for one, the functions below do nothing). */

/* The weights F and B read (the `weights` arguments below) are the stage's
 * compute copy: with precision fp32 the fp32 weights themselves; with bf16
 * (mixed precision, model_desc.h) a bf16 copy of the fp32 master weights,
 * which pp_stage_compute_copy makes after every update. Fetches move this
 * copy, so it is also what a fetched-weights slot holds. */
/* copy = the compute copy of `master` (a memcpy for fp32). */
void pp_stage_compute_copy(const pp_model *m, int S, int s, const float *master, void *copy);

/* Deterministic initialisation: element i of stage s depends only on
 * (seed, s, i), so any rank initialises any stage identically. */
void pp_stage_init(const pp_model *m, int S, int s, uint64_t seed, float *params);

/* F(s,b). in: tokens (s == 0) or activations. tgt: tokens holding the
 * targets (read only when s == S-1). out: activations (s < S-1), else
 * unused (may be NULL). Activations, like dout and din below, are the
 * precision's type (pp_act_bytes of them: fp32, or bf16 with precision
 * bf16, despite the float pointers); the stage computes in fp32 between. Returns the summed (not averaged) cross-entropy over
 * the microbatch's predictions when s == S-1, else 0. */
double pp_stage_forward(const pp_model *m, int S, int s, const void *weights, const void *in,
                        const int32_t *tgt, void *stash, void *work, float *out);

/* B(s,b). dout: gradient w.r.t. the stage's output (s < S-1; NULL on the last
 * stage, where the loss gradient is computed from the stash and multiplied by
 * loss_scale, pp_loss_scale for a mean over the step). Accumulates (+=)
 * weight gradients into grads (same layout as params). din: gradient w.r.t.
 * the stage's input (s > 0), else unused (may be NULL). */
void pp_stage_backward(const pp_model *m, int S, int s, const void *weights, float *grads,
                       const void *stash, void *work, const float *dout, float *din,
                       float loss_scale);

/* A split backward (zero bubble): B computes only the input gradient and
 * saves what the weight gradient needs in the stash, which must then be
 * pp_stage_stash_bytes_split bytes; W, later, accumulates the weight
 * gradients. B then W gives the same bits as pp_stage_backward. */
void pp_stage_backward_input(const pp_model *m, int S, int s, const void *weights, void *stash,
                             void *work, const float *dout, float *din, float loss_scale);
void pp_stage_backward_weight(const pp_model *m, int S, int s, float *grads, const void *stash,
                              void *work);

/* Plain SGD: p -= lr * g; then g = 0. */
void pp_sgd_step(float *p, float *g, size_t n, float lr);

/* The optimizer's settings (ppvm --lr, --weight-decay). AdamW's betas and
 * eps are PyTorch's defaults, 0.9, 0.999 and 1e-8. */
typedef struct {
    float lr, weight_decay, beta1, beta2, eps;
    int warmup; /* steps of linear learning-rate warmup (ppvm --warmup; 0: none) */
} pp_optim;

/* The learning rate of step t (t >= 1): lr * t / warmup for t < warmup,
 * then lr. One definition for every backend and the reference. */
static inline float pp_optim_lr(const pp_optim *o, int t)
{
    return o->warmup > 0 && t < o->warmup ? o->lr * (float)t / (float)o->warmup : o->lr;
}

/* ppvm's defaults for the plan's optimizer (a pp_optimizer): lr 0.3 for SGD,
 * 4e-3 and weight decay 0.01 for AdamW (SGD ignores weight_decay). */
pp_optim pp_optim_defaults(uint32_t optimizer);

/* One stage's update at the end of step t (t >= 1): SGD, or AdamW with
 * state = its first then its second moments (2n floats, zero before step
 * 1; pp_optimizer_state_floats(optimizer) * n in all). Then g = 0. */
void pp_optimizer_step(uint32_t optimizer, const pp_optim *o, float *p, float *g, float *state,
                       size_t n, int t);

#endif
