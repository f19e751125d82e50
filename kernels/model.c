/* model.c - the model interface (model.h): which table serves a model
 * kind, the pp_stage_* compute functions that dispatch to it, and what
 * every kind shares (the compute copy, the optimizers). The sizes are
 * isa/model_shape.c's. */
#include "model.h"

#include <string.h>

#include "cpu_kernels.h"
#include "kprof.h"
#include "vmath.h"

const pp_model_impl *pp_model_impl_of(const pp_model *m) {
    switch (m->kind) {
    case PP_MODEL_MLP: return &pp_model_mlp;
    case PP_MODEL_GPT: return &pp_model_gpt;
    default: return NULL; /* refused by the plan reader and the compiler */
    }
}

void pp_stage_init(const pp_model *m, int S, int s, uint64_t seed, float *params) {
    const pp_model_impl *k = pp_model_impl_of(m);
    if (k) k->init(m, S, s, seed, params);
}

double pp_stage_forward(const pp_model *m, int S, int s, const void *weights, const void *in,
                        const int32_t *tgt, void *stash, void *work, float *out) {
    const pp_model_impl *k = pp_model_impl_of(m);
    return k ? k->forward(m, S, s, weights, in, tgt, stash, work, out) : 0.0;
}

void pp_stage_backward(const pp_model *m, int S, int s, const void *weights, float *grads,
                       const void *stash, void *work, const float *dout, float *din,
                       float loss_scale) {
    const pp_model_impl *k = pp_model_impl_of(m);
    if (k) k->backward(m, S, s, weights, grads, stash, work, dout, din, loss_scale);
}

void pp_stage_backward_input(const pp_model *m, int S, int s, const void *weights,
                             void *stash, void *work, const float *dout, float *din,
                             float loss_scale) {
    const pp_model_impl *k = pp_model_impl_of(m);
    if (k) k->backward_input(m, S, s, weights, stash, work, dout, din, loss_scale);
}

void pp_stage_backward_weight(const pp_model *m, int S, int s, float *grads, const void *stash,
                              void *work) {
    const pp_model_impl *k = pp_model_impl_of(m);
    if (k) k->backward_weight(m, S, s, grads, stash, work);
}

/* ------------------------------------------------------------------------ */
/* What every kind shares                                                    */

void pp_stage_compute_copy(const pp_model *m, int S, int s, const float *master, void *copy) {
    size_t n = pp_stage_param_count(m, S, s);
    if (m->precision == PP_PREC_BF16)
        pp_f32_to_bf16(master, copy, n);
    else if (copy != master)
        memcpy(copy, master, n * sizeof(float));
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
