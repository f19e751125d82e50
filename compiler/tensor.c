/* tensor.c - a worker's plan made into its T tensor-parallel ranks' plans
 * (tensor.h): peers, replica groups and tensor groups renumbered, and the
 * tensor all-reduces placed before the jobs that make them. */
#include "tensor.h"

#include <stdlib.h>
#include <string.h>

#include "../isa/tensor.h"

int pp_tensor_ranks(int W, const pp_model *m) { return W * (int)pp_model_tensor(m); }

int pp_tensor_override(pp_diag *d, pp_schedule *sch, long long T)
{
    const pp_model *m = &sch->model;
    if (T < 1 || T > PP_MAX_TENSOR)
        diag_error_noloc(d, "--tensor %lld: expected 1 to %u", T, PP_MAX_TENSOR);
    else if (m->kind == PP_MODEL_GPT && m->heads % T)
        diag_error_noloc(d,
                         "--tensor %lld does not divide the model's heads (%u): the attention is "
                         "split by heads",
                         T, m->heads);
    else if (m->kind == PP_MODEL_LLAMA && m->kv_heads % T)
        diag_error_noloc(d,
                         "--tensor %lld does not divide the model's kv_heads (%u): the attention "
                         "is split by key/value heads",
                         T, m->kv_heads);
    else if (m->ffn % T)
        diag_error_noloc(d,
                         "--tensor %lld does not divide the model's ffn (%u): the MLP's inner "
                         "layer is split in equal column shards",
                         T, m->ffn);
    else {
        sch->model.tensor = (uint32_t)T;
        return 0;
    }
    return 1;
}

/* Whether op is a job that makes tensor all-reduces: F, B, the input half
 * of a split backward (W computes its shard's weight gradients only) and a
 * re-run forward (Recompute makes the forward's all-reduces again). */
static int makes_allreduces(int op)
{
    return op == PP_OP_Forward || op == PP_OP_Backward || op == PP_OP_BackwardInput ||
           op == PP_OP_Recompute;
}

/* The group table every rank's plan carries: each of the G replica groups
 * once per t, then the W tensor groups. */
static int copy_groups(const pp_plan *src, int W, int T, pp_plan *p)
{
    uint32_t G = src->ngroups;
    p->ngroups = G * (uint32_t)T + (uint32_t)W;
    p->groups = calloc(p->ngroups, sizeof *p->groups);
    if (!p->groups)
        return -1;
    for (uint32_t g = 0; g < G; g++)
        for (int t = 0; t < T; t++) {
            pp_group *q = &p->groups[g * (uint32_t)T + (uint32_t)t];
            q->n = src->groups[g].n;
            q->member = malloc(q->n * sizeof *q->member);
            if (!q->member)
                return -1;
            for (uint32_t k = 0; k < q->n; k++)
                q->member[k] = src->groups[g].member[k] * (uint32_t)T + (uint32_t)t;
        }
    for (int w = 0; w < W; w++) {
        pp_group *q = &p->groups[G * (uint32_t)T + (uint32_t)w];
        q->n = (uint32_t)T;
        q->member = malloc((size_t)T * sizeof *q->member);
        if (!q->member)
            return -1;
        for (int t = 0; t < T; t++)
            q->member[t] = (uint32_t)(w * T + t);
    }
    return 0;
}

/* Rank w*T + t's plan from worker w's. */
static int expand_one(const pp_plan *src, int W, int T, int w, int t, pp_plan *p)
{
    *p = *src;
    p->stage_role = NULL;
    p->slot_bytes = NULL;
    p->groups = NULL;
    p->code = NULL;
    p->model.layers = NULL;
    p->rank = (uint32_t)(w * T + t);
    p->world = (uint32_t)(W * T);
    if (pp_plan_set_model(p, &src->model))
        return -1;
    p->stage_role = malloc(src->S);
    p->slot_bytes = malloc((src->nslots + 1) * sizeof *p->slot_bytes);
    uint32_t n = src->ninstr;
    for (uint32_t i = 0; i < src->ninstr; i++)
        n += makes_allreduces(src->code[i].op);
    p->code = malloc(((size_t)n + 1) * sizeof *p->code);
    if (!p->stage_role || !p->slot_bytes || !p->code || copy_groups(src, W, T, p))
        return -1;
    memcpy(p->stage_role, src->stage_role, src->S);
    memcpy(p->slot_bytes, src->slot_bytes, src->nslots * sizeof *p->slot_bytes);
    int32_t tensor_group = (int32_t)(src->ngroups * (uint32_t)T) + w;
    uint32_t k = 0;
    for (uint32_t i = 0; i < src->ninstr; i++) {
        pp_instr in = src->code[i];
        if (makes_allreduces(in.op)) {
            pp_instr ar = {.op = PP_OP_TensorReduce,
                           .stage = in.stage,
                           .mb = in.mb,
                           .peer = -1,
                           .group = tensor_group};
            for (int j = 0; j < PP_MAX_SLOTS; j++)
                ar.slot[j] = -1;
            p->code[k++] = ar;
        }
        if (in.peer >= 0)
            in.peer = in.peer * T + t;
        if (in.group >= 0)
            in.group = in.group * T + t;
        p->code[k++] = in;
    }
    p->ninstr = k;
    return 0;
}

int pp_tensor_expand(pp_plan **plans, int W, const pp_model *m, pp_diag *d)
{
    int T = (int)pp_model_tensor(m);
    if (T == 1)
        return 0;
    pp_plan *out = calloc((size_t)W * T, sizeof *out);
    if (!out) {
        diag_nomem(d, "for %d tensor-parallel plans", W * T);
        return -1;
    }
    for (int w = 0; w < W; w++)
        for (int t = 0; t < T; t++)
            if (expand_one(&(*plans)[w], W, T, w, t, &out[w * T + t])) {
                for (int r = 0; r <= w * T + t; r++)
                    pp_plan_free(&out[r]);
                free(out);
                diag_nomem(d, "for rank %d's tensor-parallel plan", w * T + t);
                return -1;
            }
    uint64_t id = pp_plans_id(out, W * T);
    for (int r = 0; r < W * T; r++)
        out[r].plan_id = id;
    for (int w = 0; w < W; w++)
        pp_plan_free(&(*plans)[w]);
    free(*plans);
    *plans = out;
    return 0;
}
