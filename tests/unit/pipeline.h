/* pipeline.h - a model's stages run as one pipeline on one thread: F(0..S-1)
 * on a microbatch, then B(S-1..0), through the pp_stage_* interface, so the
 * model tests (test_model.c, test_gpt.c) exercise any model kind the same
 * way a rank would: one workspace shared by every stage, a stash per stage
 * large enough for a split backward, and the compute copy F and B read. */
#ifndef PP_TEST_PIPELINE_H
#define PP_TEST_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "../../kernels/model.h"

enum { PIPE_MAX_S = 8 };

typedef struct {
    pp_model m;
    int S;
    size_t n[PIPE_MAX_S];                 /* each stage's parameters */
    float *p[PIPE_MAX_S], *g[PIPE_MAX_S]; /* fp32 master weights and gradients */
    void *w[PIPE_MAX_S]; /* the compute copy F and B read: p[s] itself, or its bf16 copy */
    void *stash[PIPE_MAX_S];
    void *work; /* one workspace for every stage, as a rank has */
    size_t work_bytes;
    float *act[PIPE_MAX_S];  /* act[s]: output of F(s), s < S-1 */
    float *dact[PIPE_MAX_S]; /* dact[s]: input gradient of B(s), s > 0 */
} pipeline;

/* Allocates and initialises (pp_stage_init with seed) S stages of m. */
void pipe_init(pipeline *pl, const pp_model *m, int S, uint64_t seed);
/* The compute copies again, after the master weights p changed. */
void pipe_refresh(pipeline *pl);
void pipe_free(pipeline *pl);
/* F of every stage on tokens; the last stage's summed loss. */
double pipe_forward(pipeline *pl, const int32_t *tokens);
/* B of every stage, last to first, accumulating into g. */
void pipe_backward(pipeline *pl, float loss_scale);
/* |a - b| / |b| in the 2-norm (|a - b| when b is 0): how far a pipeline's
 * gradients a are from another's b. */
double pipe_rel_diff(const float *a, const float *b, size_t n);

#endif
