/* tensor_shard.c - tensor parallelism's CPU side (tensor_shard.h): the mlp
 * stage's shards cut from and put into the whole stage. */
#include "tensor_shard.h"

#include <stdlib.h>
#include <string.h>

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

/* Copies between the whole stage and shard t, one way or the other. */
static void shard_copy(const pp_model *m, int S, int s, int t, float *whole, float *shard,
                       int to_shard)
{
    pp_model w = whole_of(m), sh = pp_model_shard(m);
    shape ws = shape_of(&w, S, s), ss = shape_of(&sh, S, s);
    param_layout WP = param_layout_of(&ws), SP = param_layout_of(&ss);
    size_t D = (size_t)ws.D, F = (size_t)ws.F, Fs = (size_t)ss.F, off = (size_t)t * Fs;
#define COPY(wo, so, n)                                                                            \
    do {                                                                                           \
        if (to_shard)                                                                              \
            memcpy(shard + (so), whole + (wo), (n) * sizeof(float));                               \
        else                                                                                       \
            memcpy(whole + (wo), shard + (so), (n) * sizeof(float));                               \
    } while (0)
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
