/* model_shape.c - the shape arithmetic of every model kind (model_shape.h):
 * each kind's sizes and FLOPs from its layouts (mlp_layout.h,
 * gpt_layout.h, llama_layout.h), the table per kind, the pp_stage_* functions that
 * dispatch to it, and the sizes every kind shares. */
#include "model_shape.h"

#include "tensor.h"

#include "gpt_layout.h"
#include "llama_layout.h"
#include "mlp_layout.h"

/* ------------------------------------------------------------------------ */
/* mlp                                                                       */

static size_t mlp_param_count(const pp_model *m, int S, int s)
{
    shape sh = shape_of(m, S, s);
    return param_layout_of(&sh).total;
}

static size_t mlp_stash_bytes(const pp_model *m, int S, int s)
{
    shape sh = shape_of(m, S, s);
    return stash_layout_of(&sh).total;
}

static size_t mlp_stash_bytes_split(const pp_model *m, int S, int s)
{
    shape sh = shape_of(m, S, s);
    return stash_layout_of(&sh).total_split;
}

static size_t mlp_workspace_bytes(const pp_model *m, int S, int s)
{
    shape sh = shape_of(m, S, s);
    return work_layout_of(&sh).total;
}

/* Only the GEMMs count; elementwise work (GELU, biases, the layer norms,
 * the softmax) is noise next to them and is not counted. Backward runs two
 * GEMMs (input gradient and weight gradient) per forward GEMM. */
static double mlp_flops(const pp_model *m, int S, int s, int backward)
{
    shape sh = shape_of(m, S, s);
    double B = sh.B, D = sh.D, F = sh.F;
    double f = sh.nb * (2.0 * B * F * D + 2.0 * B * D * F);
    if (sh.last)
        f += 2.0 * B * PP_VOCAB * D;
    return backward ? 2.0 * f : f;
}

/* ------------------------------------------------------------------------ */
/* gpt                                                                       */

static size_t gpt_param_count(const pp_model *m, int S, int s)
{
    gpt_shape sh = gpt_shape_of(m, S, s);
    return gpt_param_layout_of(&sh).total;
}

static size_t gpt_stash_bytes(const pp_model *m, int S, int s)
{
    gpt_shape sh = gpt_shape_of(m, S, s);
    return gpt_stash_layout_of(&sh).total;
}

static size_t gpt_stash_bytes_split(const pp_model *m, int S, int s)
{
    gpt_shape sh = gpt_shape_of(m, S, s);
    return gpt_stash_layout_of(&sh).total_split;
}

static size_t gpt_workspace_bytes(const pp_model *m, int S, int s)
{
    gpt_shape sh = gpt_shape_of(m, S, s);
    return gpt_work_layout_of(&sh).total;
}

/* The GEMMs only, 2 FLOPs per multiply-add: per layer qkv (3A x C), attproj
 * (C x A), fc (F x C) and fcproj (C x F) on BT rows, plus attention's
 * q k^T and P v counted as full T x T (2 B T T A each, A = C unless
 * tensor-parallel; the causal half the
 * kernels actually skip is not subtracted, the usual convention); the head's
 * V x C on the last stage. Backward: twice the forward. */
static double gpt_flops(const pp_model *m, int S, int s, int backward)
{
    gpt_shape sh = gpt_shape_of(m, S, s);
    double B = sh.B, T = sh.T, C = sh.C, A = sh.A, F = sh.F, V = sh.V, BT = B * T;
    double layer = 2.0 * BT * (3.0 * A * C + A * C + 2.0 * C * F) + 2.0 * 2.0 * B * T * T * A;
    double f = sh.L * layer;
    if (sh.last)
        f += 2.0 * BT * C * V;
    return backward ? 2.0 * f : f;
}

/* ------------------------------------------------------------------------ */
/* llama                                                                     */

static size_t llama_param_count(const pp_model *m, int S, int s)
{
    llama_shape sh = llama_shape_of(m, S, s);
    return llama_param_layout_of(&sh).total;
}

static size_t llama_stash_bytes(const pp_model *m, int S, int s)
{
    llama_shape sh = llama_shape_of(m, S, s);
    return llama_stash_layout_of(&sh).total;
}

static size_t llama_stash_bytes_split(const pp_model *m, int S, int s)
{
    llama_shape sh = llama_shape_of(m, S, s);
    return llama_stash_layout_of(&sh).total_split;
}

static size_t llama_workspace_bytes(const pp_model *m, int S, int s)
{
    llama_shape sh = llama_shape_of(m, S, s);
    return llama_work_layout_of(&sh).total;
}

/* The GEMMs only, as gpt_flops: per layer the fused q, k, v projection
 * (Q x C), wo (C x A), gate and up (2F x C) and down (C x F) on BT rows,
 * attention's q k^T and P v as full T x T (A = C unless tensor-parallel),
 * and the head's V x C on the last stage. Backward: twice the forward. */
static double llama_flops(const pp_model *m, int S, int s, int backward)
{
    llama_shape sh = llama_shape_of(m, S, s);
    double B = sh.B, T = sh.T, C = sh.C, A = sh.A, F = sh.F, V = sh.V, Q = sh.Q, BT = B * T;
    double layer = 2.0 * BT * (Q * C + C * A + 3.0 * C * F) + 2.0 * 2.0 * B * T * T * A;
    double f = sh.L * layer;
    if (sh.last)
        f += 2.0 * BT * C * V;
    return backward ? 2.0 * f : f;
}

/* ------------------------------------------------------------------------ */
/* The table and the dispatch                                                */

static const pp_model_shape shapes[PP_MODEL_COUNT] = {
    [PP_MODEL_MLP] = {"mlp", mlp_param_count, mlp_stash_bytes, mlp_stash_bytes_split,
                      mlp_workspace_bytes, mlp_flops},
    [PP_MODEL_GPT] = {"gpt", gpt_param_count, gpt_stash_bytes, gpt_stash_bytes_split,
                      gpt_workspace_bytes, gpt_flops},
    [PP_MODEL_LLAMA] = {"llama", llama_param_count, llama_stash_bytes, llama_stash_bytes_split,
                        llama_workspace_bytes, llama_flops},
};

const pp_model_shape *pp_model_shape_of(const pp_model *m)
{
    return m->kind < PP_MODEL_COUNT ? &shapes[m->kind] : NULL;
}

/* Every size below is one rank's: under tensor = T, its shard's
 * (isa/tensor.h's pp_model_shard). */
size_t pp_stage_param_count(const pp_model *m, int S, int s)
{
    const pp_model_shape *t = pp_model_shape_of(m);
    pp_model sh = pp_model_shard(m);
    return t ? t->param_count(&sh, S, s) : 0;
}

size_t pp_stage_stash_bytes(const pp_model *m, int S, int s)
{
    const pp_model_shape *t = pp_model_shape_of(m);
    pp_model sh = pp_model_shard(m);
    return t ? t->stash_bytes(&sh, S, s) : 0;
}

size_t pp_stage_stash_bytes_split(const pp_model *m, int S, int s)
{
    const pp_model_shape *t = pp_model_shape_of(m);
    pp_model sh = pp_model_shard(m);
    return t ? t->stash_bytes_split(&sh, S, s) : 0;
}

size_t pp_stage_workspace_bytes(const pp_model *m, int S, int s)
{
    const pp_model_shape *t = pp_model_shape_of(m);
    pp_model sh = pp_model_shard(m);
    return t ? t->workspace_bytes(&sh, S, s) : 0;
}

double pp_stage_flops(const pp_model *m, int S, int s, int backward)
{
    const pp_model_shape *t = pp_model_shape_of(m);
    pp_model sh = pp_model_shard(m);
    return t ? t->flops(&sh, S, s, backward) : 0.0;
}

/* ------------------------------------------------------------------------ */
/* Tied embeddings                                                           */

/* A rank's, as every size above: under tensor = T the head sits after its
 * shard's layers (the embedding and the head are whole on every rank). */
size_t pp_stage_tied_offset(const pp_model *m, int S, int s)
{
    pp_model r = pp_model_shard(m);
    if (m->kind == PP_MODEL_LLAMA) {
        llama_shape sh = llama_shape_of(&r, S, s);
        llama_param_layout P = llama_param_layout_of(&sh);
        return s == 0 ? P.wte : P.wlm;
    }
    gpt_shape sh = gpt_shape_of(&r, S, s);
    gpt_param_layout P = gpt_param_layout_of(&sh);
    return s == 0 ? P.wte : P.wlm;
}

/* ------------------------------------------------------------------------ */
/* What every kind shares                                                    */

size_t pp_stage_compute_bytes(const pp_model *m, int S, int s)
{
    return pp_stage_param_count(m, S, s) * pp_precision_weight_bytes(m->precision);
}

size_t pp_act_bytes(const pp_model *m)
{
    return (size_t)m->batch * pp_model_width(m) * pp_act_elem_bytes(m);
}

size_t pp_act_f32_bytes(const pp_model *m)
{
    return (size_t)m->batch * pp_model_width(m) * sizeof(float);
}

size_t pp_tokens_bytes(const pp_model *m)
{
    return (size_t)m->batch * (m->context + 1) * sizeof(int32_t);
}
