/* model_shape.h - the shape arithmetic of a model's pipeline stages: how
 * many parameters a stage has, how many bytes its stash, split stash,
 * workspace and compute copy take, the activations and tokens one
 * microbatch moves, its FLOPs and the loss's divisor. Everything a plan's
 * sizes and a report's figures are made of, and nothing that computes a
 * tensor: the compiler links this and no kernel; the VM and the kernels
 * (kernels/model.h, the compute) use the same functions, so all agree.
 *
 * One table of shape functions per model kind (pp_model_shape), indexed by
 * pp_model_kind; the pp_stage_* functions below dispatch to m->kind's. The
 * layouts they are computed from are mlp_layout.h's and gpt_layout.h's.
 * Every function takes (m, S, s): the model, the number of stages and the
 * stage. m->kind must be a pp_model_kind: the plan reader and the compiler
 * refuse any other before a stage is sized (pp_model_shape_of returns NULL
 * for one, and the sizes below are then 0). */
#ifndef PP_MODEL_SHAPE_H
#define PP_MODEL_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "model_desc.h"

typedef struct {
    const char *name;
    size_t (*param_count)(const pp_model *m, int S, int s);
    size_t (*stash_bytes)(const pp_model *m, int S, int s);
    size_t (*stash_bytes_split)(const pp_model *m, int S, int s);
    size_t (*workspace_bytes)(const pp_model *m, int S, int s);
    double (*flops)(const pp_model *m, int S, int s, int backward);
} pp_model_shape;

/* m->kind's table, or NULL for a kind that is not a pp_model_kind. */
const pp_model_shape *pp_model_shape_of(const pp_model *m);

/* Floats of stage s's parameters (and of its gradients, which share the
 * layout): the weight file's layout. */
size_t pp_stage_param_count(const pp_model *m, int S, int s);

/* Bytes of the stage's compute copy, the weights jobs read and fetches
 * move: the fp32 weights themselves, or with precision bf16 a bf16 copy
 * (model_desc.h; kernels/model.h's pp_stage_compute_copy makes it). */
size_t pp_stage_compute_bytes(const pp_model *m, int S, int s);

/* Bytes of what F(s,b) leaves for B(s,b), and of the larger stash a split
 * backward needs (B leaves there what W reads). */
size_t pp_stage_stash_bytes(const pp_model *m, int S, int s);
size_t pp_stage_stash_bytes_split(const pp_model *m, int S, int s);

/* Bytes of F's, B's and W's scratch: one workspace, the largest of the
 * stages a rank runs, serves all its jobs (contents mean nothing between
 * calls). */
size_t pp_stage_workspace_bytes(const pp_model *m, int S, int s);

/* What moves between stages per microbatch (activations forward,
 * gradients backward; the plan's activation buffers): batch * width
 * elements of the precision's activation type, fp32 (4 bytes) or, with
 * precision bf16, bf16 (2: pp_act_elem_bytes). Inside a stage activations
 * are fp32 (pp_act_f32_bytes): the stage widens what it receives and rounds
 * what it sends (kernels/stage.c). */
size_t pp_act_bytes(const pp_model *m);
size_t pp_act_f32_bytes(const pp_model *m); /* batch * width * 4 */
static inline size_t pp_act_elem_bytes(const pp_model *m)
{
    return m->precision == PP_PREC_BF16 ? 2 : 4;
}
size_t pp_tokens_bytes(const pp_model *m); /* batch * (context+1) * 4 */

/* FLOPs of one F(s,b) and one B(s,b) on a microbatch (2 per multiply-add;
 * the GEMMs only). */
double pp_stage_flops(const pp_model *m, int S, int s, int backward);

/* The loss_scale of a step of B microbatches: the loss is the mean over its
 * B * batch samples' predictions (pp_model_predictions each). One
 * definition, so the VM and the reference agree. */
static inline double pp_loss_count(const pp_model *m, int B)
{
    return (double)B * (double)m->batch * (double)pp_model_predictions(m);
}
static inline float pp_loss_scale(const pp_model *m, int B)
{
    return 1.0f / ((float)B * (float)m->batch * (float)pp_model_predictions(m));
}

/* Tied embeddings (model tie = 1, gpt and llama): the float offset of the
 * tied tensor in stage s's parameters (= its gradients), stage 0's token
 * embedding wte or stage S-1's head wlm, and its size in floats (vocab x
 * embed). S >= 2: the compiler refuses a tied model of one stage. */
size_t pp_stage_tied_offset(const pp_model *m, int S, int s);
static inline size_t pp_tied_floats(const pp_model *m) { return (size_t)m->vocab * m->embed; }

/* (Optimizer-state floats per weight: pp_optimizer_state_floats in
 * model_desc.h.) */

#endif
