/* test_llama.c - unit tests of the llama model (kernels/llama.c,
 * llama_kernels.c, isa/llama_layout.h): its kernels (RMSNorm's backward by
 * finite differences, the rotation's inverse, the key/value repeat's sum as
 * its adjoint), finite-difference gradient checks of whole pipelines (every
 * parameter tensor and the inputs, grouped-query attention, a stage of 0
 * layers, S = 1), split backward == fused bit for bit with a NaN-poisoned
 * workspace in fp32 and bf16, bf16 near fp32, the sizes, and the loss at
 * init and after a few AdamW steps. PP_TEST_VERBOSE=1 prints the worst
 * errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/llama_layout.h"
#include "../../kernels/llama_kernels.h"
#include "../../kernels/model.h"
#include "pipeline.h"
#include "suites.h"

/* B 2, T 5, C 8, 2 heads of 4 sharing 1 kv head, F 12, V 11, 2 layers. */
static const pp_model small = {.kind = PP_MODEL_LLAMA,
                               .vocab = 11,
                               .context = 5,
                               .embed = 8,
                               .heads = 2,
                               .kv_heads = 1,
                               .ffn = 12,
                               .blocks = 2,
                               .batch = 2,
                               .rope_theta = 10000,
                               .norm_eps = 1e-5f};

static int verbose(void) { return getenv("PP_TEST_VERBOSE") != NULL; }

static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

static float urand(uint32_t *st) { return (float)lcg(st) / 8388608.0f - 1.0f; }

static void fill_rand(float *x, size_t n, float scale, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * urand(&seed);
}

static void rand_tokens(const pp_model *m, int32_t *tok, uint32_t seed)
{
    size_t n = (size_t)m->batch * (m->context + 1);
    for (size_t i = 0; i < n; i++)
        tok[i] = (int32_t)(lcg(&seed) % m->vocab);
}

static void pipe_init_noisy(pipeline *pl, const pp_model *m, int S, uint64_t seed, float noise)
{
    pipe_init(pl, m, S, seed);
    uint32_t st = (uint32_t)seed * 7919u + 1u;
    for (int s = 0; s < S; s++)
        for (size_t i = 0; i < pl->n[s]; i++)
            pl->p[s][i] += noise * urand(&st);
    pipe_refresh(pl);
}

/* Central difference, double checked with a smaller step (test_gpt.c's). */
typedef double (*objective)(void *ctx);

static double fd_at(float *x, objective f, void *ctx, float eps)
{
    float keep = *x;
    *x = keep + eps;
    float up = *x;
    double fp = f(ctx);
    *x = keep - eps;
    float down = *x;
    double fm = f(ctx);
    *x = keep;
    return (fp - fm) / ((double)up - (double)down);
}

static double fd_err(double g, double fd, double floor)
{
    return fabs(g - fd) / (fmax(fabs(g), fabs(fd)) + floor);
}

static double fd_check(float *x, double g, objective f, void *ctx, double floor, double *fd_out)
{
    double h = fd_at(x, f, ctx, 1e-2f), best = fd_err(g, h, floor);
    *fd_out = h;
    if (best <= 2e-3)
        return best;
    double h2 = fd_at(x, f, ctx, 5e-3f), cand[3] = {h2, (4.0 * h2 - h) / 3.0, 0.0};
    cand[2] = fd_at(x, f, ctx, 2.5e-3f);
    for (int k = 0; k < 3; k++) {
        double e = fd_err(g, cand[k], floor);
        if (e < best)
            best = e, *fd_out = cand[k];
    }
    return best;
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */

typedef struct {
    float *x, *w, *R, *y, *rstd;
    int rows, cols;
} rms_ctx;

static double rms_objective(void *vc)
{
    rms_ctx *c = vc;
    pp_rmsnorm_forward(c->x, c->w, c->rows, c->cols, 1e-5f, c->y, c->rstd);
    double j = 0.0;
    for (int i = 0; i < c->rows * c->cols; i++)
        j += (double)c->y[i] * c->R[i];
    return j;
}

START_TEST(test_rmsnorm_gradients)
{
    enum { ROWS = 3, COLS = 7 };
    float x[ROWS * COLS], w[COLS], R[ROWS * COLS], y[ROWS * COLS], rstd[ROWS];
    float dx[ROWS * COLS] = {0}, dw[COLS] = {0}, dx2[ROWS * COLS] = {0}, dw2[COLS] = {0};
    fill_rand(x, ROWS * COLS, 1.0f, 1);
    fill_rand(w, COLS, 1.0f, 2);
    fill_rand(R, ROWS * COLS, 1.0f, 3);
    rms_ctx c = {x, w, R, y, rstd, ROWS, COLS};
    rms_objective(&c);
    pp_rmsnorm_backward(x, w, rstd, R, ROWS, COLS, dx, dw);
    /* the two halves of a split backward give the fused call's bits */
    pp_rmsnorm_backward(x, w, rstd, R, ROWS, COLS, dx2, NULL);
    pp_rmsnorm_backward(x, NULL, rstd, R, ROWS, COLS, NULL, dw2);
    ck_assert_int_eq(memcmp(dx, dx2, sizeof dx), 0);
    ck_assert_int_eq(memcmp(dw, dw2, sizeof dw), 0);
    double fd;
    for (int i = 0; i < ROWS * COLS; i++) {
        double e = fd_check(&x[i], dx[i], rms_objective, &c, 5e-3, &fd);
        ck_assert_msg(e <= 1e-2, "rmsnorm dx[%d]: analytic %g, fd %g", i, dx[i], fd);
    }
    for (int i = 0; i < COLS; i++) {
        double e = fd_check(&w[i], dw[i], rms_objective, &c, 5e-3, &fd);
        ck_assert_msg(e <= 1e-2, "rmsnorm dw[%d]: analytic %g, fd %g", i, dw[i], fd);
    }
}
END_TEST

/* The rotation keeps norms, its inverse undoes it, position 0 is the
 * identity; the repeat's sum is its adjoint (<E a, b> = <a, R b>). */
START_TEST(test_rope_and_gqa)
{
    enum { T = 5, HS = 6, NH = 4, KV = 2, C = NH * HS, ROWS = 2 * T };
    float cs[T * HS], x[ROWS * C], y[ROWS * C];
    pp_rope_table(T, HS, 10000.0, cs);
    fill_rand(x, ROWS * C, 1.0f, 9);
    memcpy(y, x, sizeof x);
    pp_rope_apply(y, ROWS, T, C, NH, HS, cs, 0);
    for (int i = 0; i < C; i++)
        ck_assert_msg(y[i] == x[i], "position 0 rotated: col %d %g -> %g", i, x[i], y[i]);
    ck_assert_msg(memcmp(x + C, y + C, C * sizeof(float)) != 0, "position 1 not rotated");
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < NH; h++) {
            double n0 = 0, n1 = 0;
            for (int i = 0; i < HS; i++) {
                n0 += (double)x[r * C + h * HS + i] * x[r * C + h * HS + i];
                n1 += (double)y[r * C + h * HS + i] * y[r * C + h * HS + i];
            }
            ck_assert_msg(fabs(n0 - n1) <= 1e-5 * n0, "row %d head %d norm %g -> %g", r, h, n0, n1);
        }
    pp_rope_apply(y, ROWS, T, C, NH, HS, cs, 1);
    for (int i = 0; i < ROWS * C; i++)
        ck_assert_msg(fabs(y[i] - x[i]) <= 1e-6, "inverse: [%d] %g, was %g", i, y[i], x[i]);

    enum { Q = C + 2 * KV * HS };
    float a[ROWS * Q], e[ROWS * 3 * C], b[ROWS * 3 * C], rb[ROWS * Q];
    fill_rand(a, ROWS * Q, 1.0f, 10);
    fill_rand(b, ROWS * 3 * C, 1.0f, 11);
    pp_gqa_expand(a, e, ROWS, C, NH, KV);
    pp_gqa_reduce(b, rb, ROWS, C, NH, KV);
    double l = 0, r = 0;
    for (int i = 0; i < ROWS * 3 * C; i++)
        l += (double)e[i] * b[i];
    for (int i = 0; i < ROWS * Q; i++)
        r += (double)a[i] * rb[i];
    ck_assert_msg(fabs(l - r) <= 1e-5 * fabs(l), "<E a, b> %g but <a, R b> %g", l, r);
    /* query head 3 reads kv head 1 (G = 2) */
    ck_assert(memcmp(e + C + 3 * HS, a + C + 1 * HS, HS * sizeof(float)) == 0);
    ck_assert(memcmp(e + 2 * C + 2 * HS, a + C + KV * HS + 1 * HS, HS * sizeof(float)) == 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Sizes                                                                     */

START_TEST(test_llama_sizes)
{
    size_t C = 8, F = 12, V = 11, Q = 8 + 2 * 4;
    size_t layer = C + Q * C + C * C + C + 2 * F * C + C * F;
    ck_assert_uint_eq(pp_stage_param_count(&small, 3, 0), V * C + 2 * layer);
    ck_assert_uint_eq(pp_stage_param_count(&small, 3, 1), 2 * layer);
    ck_assert_uint_eq(pp_stage_param_count(&small, 3, 2), 2 * layer + C + V * C);
    ck_assert_uint_eq(pp_stage_param_count(&small, 1, 0), V * C + 2 * layer + C + V * C);
    double BT = 10, T = 5;
    double f = 2 * BT * (Q * C + C * C + 3 * C * F) + 4 * 2 * T * T * C;
    ck_assert(pp_stage_flops(&small, 3, 1, 0) == 2 * f);
    ck_assert(pp_stage_flops(&small, 3, 2, 0) == 2 * f + 2 * BT * C * V);
    ck_assert(pp_stage_flops(&small, 3, 2, 1) == 2 * (2 * f + 2 * BT * C * V));
    ck_assert_uint_gt(pp_stage_stash_bytes_split(&small, 3, 1), pp_stage_stash_bytes(&small, 3, 1));
    pp_model b = small;
    b.precision = PP_PREC_BF16;
    /* bf16 stashes n1, qkv [BT][3C], atty [BT][C], n2, gu [BT][2F] and h
     * [BT][F] (the GEMM and attention operands, the attention's output and
     * SwiGLU's input) at 2 bytes an element, half their fp32 bytes (all
     * multiples of 16 here), and the last stage's nf too; x, res, the rstds
     * and lse stay fp32, and so does the split region */
    size_t half = (size_t)BT * (C + 3 * C + C + C + 2 * F + F) * 2;
    ck_assert_uint_eq(pp_stage_stash_bytes(&small, 3, 1) - pp_stage_stash_bytes(&b, 3, 1),
                      2 * half);
    ck_assert_uint_eq(pp_stage_stash_bytes(&small, 3, 2) - pp_stage_stash_bytes(&b, 3, 2),
                      2 * half + (size_t)BT * C * 2);
    ck_assert_uint_eq(pp_stage_stash_bytes_split(&b, 3, 1) - pp_stage_stash_bytes(&b, 3, 1),
                      pp_stage_stash_bytes_split(&small, 3, 1) -
                          pp_stage_stash_bytes(&small, 3, 1));
    ck_assert_uint_ge(pp_stage_workspace_bytes(&b, 3, 1),
                      pp_stage_workspace_bytes(&small, 3, 1) +
                          pp_stage_param_count(&small, 3, 1) * 4);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Gradients of whole pipelines                                              */

typedef struct {
    pipeline *pl;
    const int32_t *tokens;
} pipe_ctx;

static double pipe_objective(void *vc)
{
    pipe_ctx *c = vc;
    pipe_refresh(c->pl);
    return pipe_forward(c->pl, c->tokens);
}

/* Every stage's parameters (all of them, the model is small) against
 * finite differences of the pipeline's loss. */
static void pipeline_gradient_check(const pp_model *m, int S, uint64_t seed)
{
    pipeline pl;
    int32_t *tokens = malloc(pp_tokens_bytes(m));
    pipe_init_noisy(&pl, m, S, seed, 0.2f);
    rand_tokens(m, tokens, (uint32_t)seed * 3u);
    pipe_ctx c = {&pl, tokens};
    pipe_forward(&pl, tokens);
    pipe_backward(&pl, 1.0f);
    double worst = 0.0, fd;
    for (int s = 0; s < S; s++)
        for (size_t i = 0; i < pl.n[s]; i += (pl.n[s] > 900 ? 3 : 1)) {
            double e = fd_check(&pl.p[s][i], pl.g[s][i], pipe_objective, &c, 5e-3, &fd);
            ck_assert_msg(e <= 1e-2, "llama S=%d stage %d param %zu of %zu: analytic %.6g, fd %.6g",
                          S, s, i, pl.n[s], pl.g[s][i], fd);
            worst = fmax(worst, e);
        }
    if (verbose())
        fprintf(stderr, "llama pipeline check S=%d KV=%u: worst rel error %.3g\n", S, m->kv_heads,
                worst);
    free(tokens);
    pipe_free(&pl);
}

START_TEST(test_llama_pipeline_gradients)
{
    pipeline_gradient_check(&small, 1, 1);
    pipeline_gradient_check(&small, 3, 2);
    pp_model mha = small; /* kv_heads = heads: plain multi-head attention */
    mha.kv_heads = 2;
    pipeline_gradient_check(&mha, 2, 3);
    uint32_t layers[3] = {1, 0, 2}; /* a stage of no layers */
    pp_model per = small;
    per.layers = layers;
    pipeline_gradient_check(&per, 3, 4);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Split backward, workspace, bf16                                           */

static void split_and_scratch(const pp_model *m, int S)
{
    int32_t *tokens = malloc(pp_tokens_bytes(m));
    pipeline fused, split;
    pipe_init_noisy(&fused, m, S, 11, 0.05f);
    pipe_init_noisy(&split, m, S, 11, 0.05f);
    rand_tokens(m, tokens, 77);
    pipe_forward(&fused, tokens);
    pipe_backward(&fused, 0.5f);
    for (int s = 0; s < S; s++) {
        const void *in = s == 0 ? (const void *)tokens : (const void *)split.act[s - 1];
        memset(split.work, 0xff, split.work_bytes);
        pp_stage_forward(m, S, s, split.w[s], in, tokens, split.stash[s], split.work,
                         s < S - 1 ? split.act[s] : NULL);
    }
    for (int s = S - 1; s >= 0; s--) {
        memset(split.work, 0xff, split.work_bytes);
        pp_stage_backward_input(m, S, s, split.w[s], split.stash[s], split.work,
                                s < S - 1 ? split.dact[s + 1] : NULL, s > 0 ? split.dact[s] : NULL,
                                0.5f);
    }
    for (int s = 0; s < S; s++) {
        memset(split.work, 0xff, split.work_bytes);
        pp_stage_backward_weight(m, S, s, split.g[s], split.stash[s], split.work);
    }
    for (int s = 0; s < S; s++) {
        ck_assert_msg(memcmp(fused.g[s], split.g[s], fused.n[s] * 4) == 0,
                      "llama %s S=%d stage %d: split gradients differ from fused",
                      pp_precision_name(m->precision), S, s);
        if (s > 0)
            ck_assert_msg(memcmp(fused.dact[s], split.dact[s], pp_act_bytes(m)) == 0,
                          "llama S=%d stage %d: split input gradient differs", S, s);
        for (size_t i = 0; i < fused.n[s]; i++)
            ck_assert_msg(isfinite(fused.g[s][i]), "stage %d grad %zu not finite", s, i);
    }
    free(tokens);
    pipe_free(&fused);
    pipe_free(&split);
}

START_TEST(test_llama_split_matches_fused)
{
    uint32_t layers[3] = {2, 0, 1};
    pp_model m = small, bf;
    split_and_scratch(&m, 3);
    split_and_scratch(&m, 1);
    m.layers = layers;
    split_and_scratch(&m, 3);
    pp_model lng = small; /* more than one attention row block */
    lng.context = 70;
    lng.blocks = 1;
    split_and_scratch(&lng, 2);
    bf = small;
    bf.precision = PP_PREC_BF16;
    split_and_scratch(&bf, 3);
    lng.precision = PP_PREC_BF16;
    split_and_scratch(&lng, 2);
}
END_TEST

START_TEST(test_llama_bf16_near_fp32)
{
    pp_model f = {.kind = PP_MODEL_LLAMA,
                  .vocab = 64,
                  .context = 16,
                  .embed = 32,
                  .heads = 4,
                  .kv_heads = 2,
                  .ffn = 64,
                  .blocks = 1,
                  .batch = 2,
                  .rope_theta = 10000,
                  .norm_eps = 1e-5f};
    pp_model b = f;
    b.precision = PP_PREC_BF16;
    int32_t *tokens = malloc(pp_tokens_bytes(&f));
    rand_tokens(&f, tokens, 5);
    pipeline p16, p32;
    pipe_init_noisy(&p16, &b, 3, 13, 0.05f);
    pipe_init_noisy(&p32, &f, 3, 13, 0.05f);
    double l16 = pipe_forward(&p16, tokens), l32 = pipe_forward(&p32, tokens);
    pipe_backward(&p16, 0.5f);
    pipe_backward(&p32, 0.5f);
    ck_assert_msg(fabs(l16 - l32) <= 0.01 * fabs(l32), "loss bf16 %g, fp32 %g", l16, l32);
    ck_assert_msg(l16 != l32, "bf16 loss equals fp32's bit for bit");
    for (int s = 0; s < 3; s++) {
        double r = pipe_rel_diff(p16.g[s], p32.g[s], p16.n[s]);
        ck_assert_msg(r < 0.05, "stage %d gradients differ by %g (relative)", s, r);
    }
    free(tokens);
    pipe_free(&p16);
    pipe_free(&p32);
}
END_TEST

/* Near ln V at init; AdamW brings it down on a repeated microbatch. A tied
 * model's last stage starts with stage 0's embedding as its head. */
START_TEST(test_llama_loss_at_init_and_training)
{
    pp_model m = {.kind = PP_MODEL_LLAMA,
                  .vocab = 256,
                  .context = 16,
                  .embed = 32,
                  .heads = 4,
                  .kv_heads = 2,
                  .ffn = 64,
                  .blocks = 1,
                  .batch = 4,
                  .rope_theta = 10000,
                  .norm_eps = 1e-5f};
    enum { S = 2 };
    pipeline pl;
    int32_t *tokens = malloc(pp_tokens_bytes(&m));
    rand_tokens(&m, tokens, 21);
    pipe_init(&pl, &m, S, 7);
    double n = (double)m.batch * m.context;
    double l0 = pipe_forward(&pl, tokens) / n;
    ck_assert_msg(fabs(l0 - log(256.0)) < 0.05, "loss at init %g, ln V %g", l0, log(256.0));
    float *state[S];
    pp_optim o = pp_optim_defaults(PP_OPT_ADAMW);
    for (int s = 0; s < S; s++)
        state[s] = calloc(2 * pl.n[s], sizeof(float));
    for (int step = 1; step <= 10; step++) {
        pipe_forward(&pl, tokens);
        pipe_backward(&pl, (float)(1.0 / n));
        for (int s = 0; s < S; s++)
            pp_optimizer_step(PP_OPT_ADAMW, &o, pl.p[s], pl.g[s], state[s], pl.n[s], step);
        pipe_refresh(&pl);
    }
    double l1 = pipe_forward(&pl, tokens) / n;
    if (verbose())
        fprintf(stderr, "llama loss %.4f -> %.4f after 10 AdamW steps\n", l0, l1);
    ck_assert_msg(l1 < l0 - 1.0, "loss %g -> %g after 10 steps", l0, l1);
    for (int s = 0; s < S; s++)
        free(state[s]);
    pipe_free(&pl);

    pp_model t = m;
    t.tie = 1;
    pipe_init(&pl, &t, S, 7);
    llama_shape s0 = llama_shape_of(&t, S, 0), s1 = llama_shape_of(&t, S, 1);
    llama_param_layout P0 = llama_param_layout_of(&s0), P1 = llama_param_layout_of(&s1);
    ck_assert_msg(memcmp(pl.p[0] + P0.wte, pl.p[1] + P1.wlm, (size_t)t.vocab * t.embed * 4) == 0,
                  "tied: the head's copy differs from stage 0's embedding");
    pipe_free(&pl);
    free(tokens);
}
END_TEST

Suite *llama_suite(void)
{
    Suite *s = suite_create("llama");
    TCase *tc = tcase_create("llama");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rmsnorm_gradients);
    tcase_add_test(tc, test_rope_and_gqa);
    tcase_add_test(tc, test_llama_sizes);
    tcase_add_test(tc, test_llama_pipeline_gradients);
    tcase_add_test(tc, test_llama_split_matches_fused);
    tcase_add_test(tc, test_llama_bf16_near_fp32);
    tcase_add_test(tc, test_llama_loss_at_init_and_training);
    suite_add_tcase(s, tc);
    return s;
}
