/* model.c - what every model kind shares on the CPU (model.h): the
 * compute copy and the optimizers. The stages' structure is stage.c's, the
 * kinds' blocks mlp.c's and gpt.c's, the sizes isa/model_shape.c's. */
#include "model.h"

#include <string.h>

#include "cpu_kernels.h"
#include "kprof.h"
#include "vmath.h"

/* ------------------------------------------------------------------------ */
/* What every kind shares                                                    */

void pp_stage_compute_copy(const pp_model *m, int S, int s, const float *master, void *copy)
{
    size_t n = pp_stage_param_count(m, S, s);
    if (m->precision == PP_PREC_BF16)
        pp_f32_to_bf16(master, copy, n);
    else if (copy != master)
        memcpy(copy, master, n * sizeof(float));
}

pp_optim pp_optim_defaults(uint32_t optimizer)
{
    if (optimizer == PP_OPT_ADAMW)
        return (pp_optim){
            .lr = 4e-3f, .weight_decay = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    return (pp_optim){.lr = 0.3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
}

void pp_optimizer_step(uint32_t optimizer, const pp_optim *o, float *p, float *g, float *state,
                       size_t n, int t)
{
    if (optimizer == PP_OPT_ADAMW)
        pp_adamw_step(p, g, state, state + n, n, t, pp_optim_lr(o, t), o->beta1, o->beta2, o->eps,
                      o->weight_decay);
    else
        pp_sgd_step(p, g, n, pp_optim_lr(o, t));
}

/* 8 lanes at a time (vmath.h), the same p - lr * g per element. */
PP_HOT void pp_sgd_step(float *p, float *g, size_t n, float lr)
{
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
