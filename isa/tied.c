/* tied.c - tied embeddings stored once (tied.h): which owner keeps the
 * tied tensor once, and what it stores for its stages. */
#include "tied.h"

#include "model_shape.h"

int pp_tied_shared(const pp_model *m, int S, int owns_first, int owns_last)
{
    return m->tie && S >= 2 && pp_model_tensor(m) == 1 && owns_first && owns_last;
}

int pp_plan_tied_shared(const pp_plan *p)
{
    int S = (int)p->S;
    return S >= 2 && pp_tied_shared(&p->model, S, (p->stage_role[0] & PP_ROLE_OWNER) != 0,
                                    (p->stage_role[S - 1] & PP_ROLE_OWNER) != 0);
}

size_t pp_stage_own_count(const pp_model *m, int S, int s, int shared)
{
    size_t n = pp_stage_param_count(m, S, s);
    return shared && s == S - 1 ? n - pp_tied_floats(m) : n;
}

uint64_t pp_plan_owned_bytes(const pp_plan *p)
{
    const pp_model *m = &p->model;
    int S = (int)p->S, shared = pp_plan_tied_shared(p);
    uint64_t bytes = 0;
    for (int s = 0; s < S; s++) {
        if (!(p->stage_role[s] & PP_ROLE_OWNER))
            continue;
        uint64_t n = pp_stage_own_count(m, S, s, shared);
        bytes += (1 + (uint64_t)pp_optimizer_state_floats(m->optimizer)) * n * sizeof(float);
        bytes += pp_stage_param_count(m, S, s) * sizeof(float); /* the gradients */
        if (m->precision != PP_PREC_FP32)
            bytes += n * pp_precision_weight_bytes(m->precision);
    }
    return bytes;
}
