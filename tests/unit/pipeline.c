/* pipeline.c - a model's stages as one pipeline on one thread (see
 * pipeline.h). */
#include "pipeline.h"

#include <math.h>
#include <stdlib.h>

void pipe_init(pipeline *pl, const pp_model *m, int S, uint64_t seed)
{
    *pl = (pipeline){.m = *m, .S = S};
    for (int s = 0; s < S; s++)
        if (pp_stage_workspace_bytes(m, S, s) > pl->work_bytes)
            pl->work_bytes = pp_stage_workspace_bytes(m, S, s);
    pl->work = malloc(pl->work_bytes);
    for (int s = 0; s < S; s++) {
        pl->n[s] = pp_stage_param_count(m, S, s);
        pl->p[s] = malloc(pl->n[s] * sizeof(float) + 4); /* + 4: never malloc(0) */
        pl->g[s] = calloc(pl->n[s] + 1, sizeof(float));
        pl->stash[s] = malloc(pp_stage_stash_bytes_split(m, S, s)); /* fits both */
        pl->act[s] = malloc(pp_act_bytes(m));
        pl->dact[s] = malloc(pp_act_bytes(m));
        pp_stage_init(m, S, s, seed, pl->p[s]);
        pl->w[s] = pl->p[s];
        if (m->precision == PP_PREC_BF16) {
            pl->w[s] = malloc(pp_stage_compute_bytes(m, S, s) + 2);
            pp_stage_compute_copy(m, S, s, pl->p[s], pl->w[s]);
        }
    }
}

void pipe_refresh(pipeline *pl)
{
    for (int s = 0; s < pl->S; s++)
        pp_stage_compute_copy(&pl->m, pl->S, s, pl->p[s], pl->w[s]);
}

void pipe_free(pipeline *pl)
{
    for (int s = 0; s < pl->S; s++) {
        if (pl->w[s] != pl->p[s])
            free(pl->w[s]);
        free(pl->p[s]);
        free(pl->g[s]);
        free(pl->stash[s]);
        free(pl->act[s]);
        free(pl->dact[s]);
    }
    free(pl->work);
}

double pipe_forward(pipeline *pl, const int32_t *tokens)
{
    double loss = 0.0;
    for (int s = 0; s < pl->S; s++) {
        const void *in = s == 0 ? (const void *)tokens : (const void *)pl->act[s - 1];
        loss = pp_stage_forward(&pl->m, pl->S, s, pl->w[s], in, tokens, pl->stash[s], pl->work,
                                s < pl->S - 1 ? pl->act[s] : NULL);
    }
    return loss;
}

void pipe_backward(pipeline *pl, float loss_scale)
{
    for (int s = pl->S - 1; s >= 0; s--)
        pp_stage_backward(&pl->m, pl->S, s, pl->w[s], pl->g[s], pl->stash[s], pl->work,
                          s < pl->S - 1 ? pl->dact[s + 1] : NULL, s > 0 ? pl->dact[s] : NULL,
                          loss_scale);
}

double pipe_rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d / (r > 0 ? r : 1));
}
