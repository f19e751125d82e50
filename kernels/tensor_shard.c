/* tensor_shard.c - tensor parallelism's CPU side (tensor_shard.h): an mlp,
 * gpt or llama stage's shards cut from and put into the whole stage. */
#include "tensor_shard.h"

#include <stdlib.h>
#include <string.h>

#include "../isa/gpt_layout.h"
#include "../isa/llama_layout.h"
#include "../isa/mlp_layout.h"
#include "../isa/model_shape.h"
#include "../isa/tensor.h"
#include "model.h"

static pp_model whole_of(const pp_model *m)
{
    pp_model w = *m;
    w.tensor = 1;
    return w;
}

size_t pp_stage_whole_count(const pp_model *m, int S, int s)
{
    pp_model w = whole_of(m);
    return pp_stage_param_count(&w, S, s);
}

#define COPY(wo, so, n)                                                                            \
    do {                                                                                           \
        if (to_shard)                                                                              \
            memcpy(shard + (so), whole + (wo), (n) * sizeof(float));                               \
        else                                                                                       \
            memcpy(whole + (wo), shard + (so), (n) * sizeof(float));                               \
    } while (0)

/* gpt (isa/tensor.h): of each layer, rank t holds heads [t*NH/T,
 * (t+1)*NH/T) of q, k and v (rows [t*A, (t+1)*A) of each third of qkvw
 * and qkvb), attprojw's input columns of those heads, fcw's rows and fcb's
 * entries [t*F/T, (t+1)*F/T) and fcprojw's columns there; the rest whole. */
static void gpt_shard_copy(const pp_model *m, int S, int s, int t, float *whole, float *shard,
                           int to_shard)
{
    pp_model w = whole_of(m), sh = pp_model_shard(m);
    gpt_shape ws = gpt_shape_of(&w, S, s), ss = gpt_shape_of(&sh, S, s);
    gpt_param_layout WP = gpt_param_layout_of(&ws), SP = gpt_param_layout_of(&ss);
    size_t C = (size_t)ws.C, V = (size_t)ws.V, F = (size_t)ws.F, Fs = (size_t)ss.F;
    size_t A = (size_t)ss.A, aoff = (size_t)t * A, foff = (size_t)t * Fs;
    if (ws.first) {
        COPY(WP.wte, SP.wte, V * C);
        COPY(WP.wpe, SP.wpe, (size_t)ws.T * C);
    }
    for (int l = 0; l < ws.L; l++) {
        size_t wl = WP.layers + (size_t)l * WP.layer_stride;
        size_t sl = SP.layers + (size_t)l * SP.layer_stride;
        COPY(wl + WP.ln1w, sl + SP.ln1w, C);
        COPY(wl + WP.ln1b, sl + SP.ln1b, C);
        for (size_t k = 0; k < 3; k++) { /* q, k, v: rows [aoff, aoff+A) of each [C][C] */
            COPY(wl + WP.qkvw + (k * C + aoff) * C, sl + SP.qkvw + k * A * C, A * C);
            COPY(wl + WP.qkvb + k * C + aoff, sl + SP.qkvb + k * A, A);
        }
        for (size_t r = 0; r < C; r++) /* columns [aoff, aoff+A) of [C][C] */
            COPY(wl + WP.attprojw + r * C + aoff, sl + SP.attprojw + r * A, A);
        COPY(wl + WP.attprojb, sl + SP.attprojb, C);
        COPY(wl + WP.ln2w, sl + SP.ln2w, C);
        COPY(wl + WP.ln2b, sl + SP.ln2b, C);
        COPY(wl + WP.fcw + foff * C, sl + SP.fcw, Fs * C); /* rows of [F][C] */
        COPY(wl + WP.fcb + foff, sl + SP.fcb, Fs);
        for (size_t r = 0; r < C; r++) /* columns [foff, foff+Fs) of [C][F] */
            COPY(wl + WP.fcprojw + r * F + foff, sl + SP.fcprojw + r * Fs, Fs);
        COPY(wl + WP.fcprojb, sl + SP.fcprojb, C);
    }
    if (ws.last) {
        COPY(WP.lnfw, SP.lnfw, C);
        COPY(WP.lnfb, SP.lnfb, C);
        COPY(WP.wlm, SP.wlm, V * C);
    }
}

/* llama (isa/tensor.h): of each layer, rank t holds query heads [t*NH/T,
 * (t+1)*NH/T) and kv heads [t*KV/T, (t+1)*KV/T): rows [t*A, (t+1)*A) of
 * wqkv's q and [t*Kd', (t+1)*Kd') of its k and of its v (Kd' the shard's
 * Kd), wo's input columns of those heads, rows [t*F', (t+1)*F') of each
 * half (gate, up) of wgu and wd's columns there; the rest whole. */
static void llama_shard_copy(const pp_model *m, int S, int s, int t, float *whole, float *shard,
                             int to_shard)
{
    pp_model w = whole_of(m), sh = pp_model_shard(m);
    llama_shape ws = llama_shape_of(&w, S, s), ss = llama_shape_of(&sh, S, s);
    llama_param_layout WP = llama_param_layout_of(&ws), SP = llama_param_layout_of(&ss);
    size_t C = (size_t)ws.C, V = (size_t)ws.V, F = (size_t)ws.F, Fs = (size_t)ss.F;
    size_t A = (size_t)ss.A, Kd = (size_t)ws.Kd, Kds = (size_t)ss.Kd;
    size_t aoff = (size_t)t * A, koff = (size_t)t * Kds, foff = (size_t)t * Fs;
    if (ws.first)
        COPY(WP.wte, SP.wte, V * C);
    for (int l = 0; l < ws.L; l++) {
        size_t wl = WP.layers + (size_t)l * WP.layer_stride;
        size_t sl = SP.layers + (size_t)l * SP.layer_stride;
        COPY(wl + WP.n1w, sl + SP.n1w, C);
        COPY(wl + WP.wqkv + aoff * C, sl + SP.wqkv, A * C); /* q rows */
        for (size_t k = 0; k < 2; k++) /* k, then v: rows [koff, koff+Kds) of each [Kd][C] */
            COPY(wl + WP.wqkv + (C + k * Kd + koff) * C, sl + SP.wqkv + (A + k * Kds) * C, Kds * C);
        for (size_t r = 0; r < C; r++) /* columns [aoff, aoff+A) of [C][C] */
            COPY(wl + WP.wo + r * C + aoff, sl + SP.wo + r * A, A);
        COPY(wl + WP.n2w, sl + SP.n2w, C);
        for (size_t k = 0; k < 2; k++) /* gate, then up: rows [foff, foff+Fs) of each [F][C] */
            COPY(wl + WP.wgu + (k * F + foff) * C, sl + SP.wgu + k * Fs * C, Fs * C);
        for (size_t r = 0; r < C; r++) /* columns [foff, foff+Fs) of [C][F] */
            COPY(wl + WP.wd + r * F + foff, sl + SP.wd + r * Fs, Fs);
    }
    if (ws.last) {
        COPY(WP.nfw, SP.nfw, C);
        COPY(WP.wlm, SP.wlm, V * C);
    }
}

/* Copies between the whole stage and shard t, one way or the other. */
static void shard_copy(const pp_model *m, int S, int s, int t, float *whole, float *shard,
                       int to_shard)
{
    if (m->kind == PP_MODEL_GPT) {
        gpt_shard_copy(m, S, s, t, whole, shard, to_shard);
        return;
    }
    if (m->kind == PP_MODEL_LLAMA) {
        llama_shard_copy(m, S, s, t, whole, shard, to_shard);
        return;
    }
    pp_model w = whole_of(m), sh = pp_model_shard(m);
    shape ws = shape_of(&w, S, s), ss = shape_of(&sh, S, s);
    param_layout WP = param_layout_of(&ws), SP = param_layout_of(&ss);
    size_t D = (size_t)ws.D, F = (size_t)ws.F, Fs = (size_t)ss.F, off = (size_t)t * Fs;
    if (ws.first)
        COPY(WP.E, SP.E, (size_t)PP_VOCAB * (size_t)ws.E);
    for (int k = 0; k < ws.nb; k++) {
        size_t wb = WP.blocks + (size_t)k * WP.block_stride;
        size_t sb = SP.blocks + (size_t)k * SP.block_stride;
        COPY(wb + WP.ln_g, sb + SP.ln_g, D);
        COPY(wb + WP.ln_b, sb + SP.ln_b, D);
        COPY(wb + WP.W1 + off * D, sb + SP.W1, Fs * D); /* rows [off, off+Fs) of [F][D] */
        COPY(wb + WP.b1 + off, sb + SP.b1, Fs);
        for (size_t r = 0; r < D; r++) /* columns [off, off+Fs) of [D][F] */
            COPY(wb + WP.W2 + r * F + off, sb + SP.W2 + r * Fs, Fs);
        COPY(wb + WP.b2, sb + SP.b2, D);
    }
    if (ws.last) {
        COPY(WP.lnf_g, SP.lnf_g, D);
        COPY(WP.lnf_b, SP.lnf_b, D);
        COPY(WP.Wh, SP.Wh, (size_t)PP_VOCAB * D);
        COPY(WP.bh, SP.bh, (size_t)PP_VOCAB);
    }
#undef COPY
}

void pp_stage_shard_cut(const pp_model *m, int S, int s, int t, const float *whole, float *shard)
{
    shard_copy(m, S, s, t, (float *)(uintptr_t)whole, shard, 1);
}

void pp_stage_shard_put(const pp_model *m, int S, int s, int t, const float *shard, float *whole)
{
    shard_copy(m, S, s, t, whole, (float *)(uintptr_t)shard, 0);
}

int pp_stage_shard_init(const pp_model *m, int S, int s, uint64_t seed, int t, float *shard)
{
    pp_model w = whole_of(m);
    float *whole = malloc(pp_stage_param_count(&w, S, s) * sizeof *whole + 1);
    if (!whole)
        return -1;
    pp_stage_init(&w, S, s, seed, whole);
    pp_stage_shard_cut(m, S, s, t, whole, shard);
    free(whole);
    return 0;
}
