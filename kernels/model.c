/* model.c - the model interface (model.h): which table serves a model
 * kind, the pp_stage_* functions that dispatch to it, and what every kind
 * shares (the compute copy, the activation and token sizes, the
 * optimizers). */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "kprof.h"
#include "vmath.h"

const pp_model_impl *pp_model_impl_of(const pp_model *m) {
    switch (m->kind) {
    case PP_MODEL_MLP: return &pp_model_mlp;
    case PP_MODEL_GPT: return &pp_model_gpt;
    default:
        /* The plan reader and the compiler reject other kinds before any
         * stage is sized or run. */
        fprintf(stderr, "pp: model kind %u is unknown (expected 0 for mlp or 1 for gpt)\n",
                m->kind);
        abort();
    }
}

size_t pp_stage_param_count(const pp_model *m, int S, int s) {
    return pp_model_impl_of(m)->param_count(m, S, s);
}

size_t pp_stage_stash_bytes(const pp_model *m, int S, int s) {
    return pp_model_impl_of(m)->stash_bytes(m, S, s);
}

size_t pp_stage_stash_bytes_split(const pp_model *m, int S, int s) {
    return pp_model_impl_of(m)->stash_bytes_split(m, S, s);
}

size_t pp_stage_workspace_bytes(const pp_model *m, int S, int s) {
    return pp_model_impl_of(m)->workspace_bytes(m, S, s);
}

double pp_stage_flops(const pp_model *m, int S, int s, int backward) {
    return pp_model_impl_of(m)->flops(m, S, s, backward);
}

void pp_stage_init(const pp_model *m, int S, int s, uint64_t seed, float *params) {
    pp_model_impl_of(m)->init(m, S, s, seed, params);
}

double pp_stage_forward(const pp_model *m, int S, int s, const void *weights, const void *in,
                        const int32_t *tgt, void *stash, void *work, float *out) {
    return pp_model_impl_of(m)->forward(m, S, s, weights, in, tgt, stash, work, out);
}

void pp_stage_backward(const pp_model *m, int S, int s, const void *weights, float *grads,
                       const void *stash, void *work, const float *dout, float *din,
                       float loss_scale) {
    pp_model_impl_of(m)->backward(m, S, s, weights, grads, stash, work, dout, din, loss_scale);
}

void pp_stage_backward_input(const pp_model *m, int S, int s, const void *weights,
                             void *stash, void *work, const float *dout, float *din,
                             float loss_scale) {
    pp_model_impl_of(m)->backward_input(m, S, s, weights, stash, work, dout, din, loss_scale);
}

void pp_stage_backward_weight(const pp_model *m, int S, int s, float *grads, const void *stash,
                              void *work) {
    pp_model_impl_of(m)->backward_weight(m, S, s, grads, stash, work);
}

/* ------------------------------------------------------------------------ */
/* What every kind shares                                                    */

size_t pp_stage_compute_bytes(const pp_model *m, int S, int s) {
    return pp_stage_param_count(m, S, s) * pp_precision_weight_bytes(m->precision);
}

void pp_stage_compute_copy(const pp_model *m, int S, int s, const float *master, void *copy) {
    size_t n = pp_stage_param_count(m, S, s);
    if (m->precision == PP_PREC_BF16)
        pp_f32_to_bf16(master, copy, n);
    else if (copy != master)
        memcpy(copy, master, n * sizeof(float));
}

size_t pp_act_bytes(const pp_model *m) {
    return (size_t)m->batch * pp_model_width(m) * sizeof(float);
}

size_t pp_tokens_bytes(const pp_model *m) {
    return (size_t)m->batch * (m->context + 1) * sizeof(int32_t);
}

pp_optim pp_optim_defaults(uint32_t optimizer) {
    if (optimizer == PP_OPT_ADAMW)
        return (pp_optim){.lr = 4e-3f, .weight_decay = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                          .eps = 1e-8f};
    return (pp_optim){.lr = 0.3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
}

void pp_optimizer_step(uint32_t optimizer, const pp_optim *o, float *p, float *g, float *state,
                       size_t n, int t) {
    if (optimizer == PP_OPT_ADAMW)
        pp_adamw_step(p, g, state, state + n, n, t, pp_optim_lr(o, t), o->beta1, o->beta2, o->eps,
                      o->weight_decay);
    else
        pp_sgd_step(p, g, n, pp_optim_lr(o, t));
}

/* 8 lanes at a time (vmath.h), the same p - lr * g per element. */
PP_HOT void pp_sgd_step(float *p, float *g, size_t n, float lr) {
    KPROF_BEGIN();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8_store(p + i, v8_load(p + i) - lr * v8_load(g + i));
        v8_store(g + i, v8_set(0.0f));
    }
    for (; i < n; i++) {
        p[i] -= lr * g[i];
        g[i] = 0.0f;
    }
    KPROF_END(PP_K_OPTIM);
}
