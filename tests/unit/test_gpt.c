/* test_gpt.c - unit tests of the gpt model (kernels/gpt.c, gpt_layout.h)
 * and its attention kernels (cpu_kernels.c): the row-blocked attention
 * against the naive full-matrix reference, sizes and initialisation,
 * finite-difference gradient checks of single stages (first, middle, last,
 * S = 1) and of chained pipelines (3 and 4 stages, per-stage layer counts
 * with a stage of 0 layers), split backward == fused bit for bit, the
 * workspace as pure scratch, and bf16. PP_TEST_VERBOSE=1 prints the worst
 * errors and the losses. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu_kernels.h"
#include "../../isa/gpt_layout.h"
#include "../../kernels/model.h"
#include "pipeline.h"
#include "suites.h"

/* B 2, T 5, C 8, 2 heads of 4, F 12, V 11, 2 layers a stage. */
static const pp_model small = {.kind = PP_MODEL_GPT,
                               .vocab = 11,
                               .context = 5,
                               .embed = 8,
                               .heads = 2,
                               .ffn = 12,
                               .blocks = 2,
                               .batch = 2};
enum { MAX_S = 4 };

static int verbose(void) { return getenv("PP_TEST_VERBOSE") != NULL; }

static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

/* Uniform in [-1, 1). */
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

/* ------------------------------------------------------------------------ */
/* Attention kernels against the naive reference                             */

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* One shape: the blocked forward and backward against the reference, in
 * fp32 (tight) and bf16 (loose: its operands are rounded). */
static void attention_case(int B, int T, int C, int NH, int rows)
{
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = malloc(nq * sizeof *qkv), *dout = malloc(no * sizeof *dout);
    float *out = malloc(no * sizeof *out), *ref = malloc(no * sizeof *ref);
    float *lse = malloc(nl * sizeof *lse), *lref = malloc(nl * sizeof *lref);
    float *dq = malloc(nq * sizeof *dq), *dref = malloc(nq * sizeof *dref);
    float *scratch = malloc(gpt_att_scratch_floats(T, rows) * sizeof *scratch);
    float *qr = malloc(nq * sizeof *qr), *dr = malloc(no * sizeof *dr);
    fill_rand(qkv, nq, 2.0f, (uint32_t)(T * 131 + C));
    fill_rand(dout, no, 1.0f, (uint32_t)(T * 17 + NH));

    pp_attention_forward_ref(qkv, ref, lref, B, T, C, NH);
    pp_attention_forward(qkv, out, lse, B, T, C, NH, rows, scratch, 0);
    double eo = max_abs_diff(out, ref, no), el = max_abs_diff(lse, lref, nl);
    ck_assert_msg(eo < 2e-5 && el < 2e-5, "T=%d C=%d NH=%d rows=%d: out %g, lse %g", T, C, NH, rows,
                  eo, el);
    pp_attention_backward_ref(qkv, dout, dref, B, T, C, NH);
    memset(dq, 0xff, nq * sizeof *dq); /* overwritten, not accumulated */
    pp_attention_backward(qkv, out, dout, lse, dq, B, T, C, NH, rows, scratch, 0);
    double ed = max_abs_diff(dq, dref, nq);
    ck_assert_msg(ed < 5e-5, "T=%d C=%d NH=%d rows=%d: dqkv %g", T, C, NH, rows, ed);

    /* bf16: qkv and dout rounded by the caller, P and dS by the kernel. */
    pp_round_bf16(qkv, qr, nq);
    pp_round_bf16(dout, dr, no);
    pp_attention_forward(qr, out, lse, B, T, C, NH, rows, scratch, 1);
    double bo = max_abs_diff(out, ref, no);
    pp_attention_backward(qr, out, dr, lse, dq, B, T, C, NH, rows, scratch, 1);
    double bd = max_abs_diff(dq, dref, nq), scale = 0.0;
    for (size_t i = 0; i < nq; i++)
        scale = fmax(scale, fabs(dref[i]));
    ck_assert_msg(bo < 0.05 && bd < 0.05 * (1.0 + scale),
                  "bf16 T=%d C=%d NH=%d rows=%d: out %g, dqkv %g (max %g)", T, C, NH, rows, bo, bd,
                  scale);
    if (verbose())
        fprintf(stderr,
                "attention B=%d T=%d C=%d NH=%d rows=%d: fp32 out %.2g lse %.2g dqkv %.2g;"
                " bf16 out %.2g dqkv %.2g\n",
                B, T, C, NH, rows, eo, el, ed, bo, bd);
    free(qkv), free(dout), free(out), free(ref), free(lse), free(lref);
    free(dq), free(dref), free(scratch), free(qr), free(dr);
}

START_TEST(test_attention_matches_reference)
{
    attention_case(1, 1, 4, 2, 64);  /* T = 1: one key */
    attention_case(2, 7, 6, 3, 3);   /* blocks of 3 rows: 3, 3, 1 */
    attention_case(2, 7, 6, 3, 7);   /* one block */
    attention_case(1, 70, 8, 2, 64); /* crossing GPT_ATT_ROWS */
    attention_case(2, 70, 8, 4, 16);
    attention_case(2, 9, 3, 3, 2); /* hs = 1 */
    attention_case(1, 6, 5, 1, 1); /* one head, blocks of one row */
}
END_TEST

/* The block size changes only the summation order. */
START_TEST(test_attention_rows_agree)
{
    const int B = 2, T = 33, C = 8, NH = 2;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = malloc(nq * 4), *dout = malloc(no * 4), *o1 = malloc(no * 4), *o2 = malloc(no * 4);
    float *l1 = malloc(nl * 4), *l2 = malloc(nl * 4), *d1 = malloc(nq * 4), *d2 = malloc(nq * 4);
    float *scratch = malloc(gpt_att_scratch_floats(T, T) * 4);
    fill_rand(qkv, nq, 1.5f, 3);
    fill_rand(dout, no, 1.0f, 4);
    pp_attention_forward(qkv, o1, l1, B, T, C, NH, T, scratch, 0);
    pp_attention_forward(qkv, o2, l2, B, T, C, NH, 5, scratch, 0);
    pp_attention_backward(qkv, o1, dout, l1, d1, B, T, C, NH, T, scratch, 0);
    pp_attention_backward(qkv, o2, dout, l2, d2, B, T, C, NH, 5, scratch, 0);
    ck_assert(max_abs_diff(o1, o2, no) < 1e-5);
    ck_assert(max_abs_diff(l1, l2, nl) < 1e-5);
    ck_assert(max_abs_diff(d1, d2, nq) < 1e-5);
    free(qkv), free(dout), free(o1), free(o2), free(l1), free(l2), free(d1), free(d2);
    free(scratch);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Sizes and initialisation                                                  */

/* Sizing a stage costs the same whatever S is: gpt_shape_of once summed
 * every stage's layers (for the init scale only), so sizing all S stages
 * was O(S^2), a trillion steps at ppc's S = 2^20 (ppc took twice as long
 * as for the mlp at S = 16000). Here 2^20 stages are sized in well under
 * the test's limit; before, it would run for hours. */
START_TEST(test_gpt_sizes_linear_in_stages)
{
    int S = 1 << 20;
    uint32_t *layers = malloc((size_t)S * sizeof *layers);
    ck_assert_ptr_nonnull(layers);
    for (int s = 0; s < S; s++)
        layers[s] = (uint32_t)(s % 3);
    pp_model m = {.kind = PP_MODEL_GPT,
                  .vocab = 64,
                  .context = 4,
                  .embed = 8,
                  .heads = 2,
                  .ffn = 8,
                  .blocks = 1,
                  .batch = 1,
                  .layers = layers};
    size_t total = 0;
    for (int s = 0; s < S; s++)
        total += pp_stage_param_count(&m, S, s) + pp_stage_stash_bytes(&m, S, s) +
                 pp_stage_workspace_bytes(&m, S, s);
    ck_assert_uint_gt(total, 0);
    free(layers);
}
END_TEST

START_TEST(test_gpt_sizes)
{
    const size_t B = 2, T = 5, C = 8, F = 12, V = 11, NH = 2, BT = B * T;
    const size_t layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C;
    ck_assert_uint_eq(pp_stage_param_count(&small, 3, 0), V * C + T * C + 2 * layer);
    ck_assert_uint_eq(pp_stage_param_count(&small, 3, 1), 2 * layer);
    ck_assert_uint_eq(pp_stage_param_count(&small, 3, 2), 2 * layer + 2 * C + V * C);
    ck_assert_uint_eq(pp_stage_param_count(&small, 1, 0),
                      V * C + T * C + 2 * layer + 2 * C + V * C);
    ck_assert_uint_eq(pp_act_bytes(&small), BT * C * 4);
    ck_assert_uint_eq(pp_tokens_bytes(&small), B * (T + 1) * 4);
    for (int s = 0; s < 3; s++) {
        ck_assert_uint_eq(pp_stage_stash_bytes(&small, 3, s) % 16, 0);
        ck_assert_uint_gt(pp_stage_stash_bytes_split(&small, 3, s),
                          pp_stage_stash_bytes(&small, 3, s));
    }
    /* The layer's stash: x, ln1, qkv, atty, res, ln2 ([BT][C] or [BT][3C]),
     * two pairs of row statistics, lse, fch and fcg. */
    size_t x = (BT * C * 4 + 15) / 16 * 16, row = (BT * 4 + 15) / 16 * 16;
    size_t h = (BT * F * 4 + 15) / 16 * 16, lse = (B * NH * T * 4 + 15) / 16 * 16;
    ck_assert_uint_eq(pp_stage_stash_bytes(&small, 3, 1), 2 * (8 * x + 4 * row + lse + 2 * h));
    /* A middle stage without layers: nothing but the never-empty 16 bytes. */
    pp_model nol = small;
    nol.blocks = 0;
    ck_assert_uint_eq(pp_stage_stash_bytes(&nol, 3, 1), 16);
    ck_assert_uint_eq(pp_stage_workspace_bytes(&nol, 3, 1), x);
    /* FLOPs: the four weight GEMMs and attention's two T x T GEMMs per
     * layer, the head on the last stage, backward twice forward. */
    double lf = 2.0 * BT * (4.0 * C * C + 2.0 * C * F) + 4.0 * B * T * T * C;
    ck_assert_double_eq(pp_stage_flops(&small, 3, 1, 0), 2 * lf);
    ck_assert_double_eq(pp_stage_flops(&small, 3, 2, 0), 2 * lf + 2.0 * BT * C * V);
    ck_assert_double_eq(pp_stage_flops(&small, 3, 2, 1), 2 * pp_stage_flops(&small, 3, 2, 0));
    /* bf16: the stash keeps ln1, qkv, atty, ln2, fch, fcg and lnf as bf16,
     * the residual stream (x, res, xf), the statistics, lse and probs fp32;
     * a larger workspace, half the weight bytes. */
    pp_model bf = small;
    bf.precision = PP_PREC_BF16;
    size_t x2 = (BT * C * 2 + 15) / 16 * 16, q2 = (BT * 3 * C * 2 + 15) / 16 * 16;
    size_t h2 = (BT * F * 2 + 15) / 16 * 16, p4 = (BT * V * 4 + 15) / 16 * 16;
    size_t lay16 = 2 * x + 3 * x2 + q2 + 4 * row + lse + 2 * h2;
    ck_assert_uint_eq(pp_stage_stash_bytes(&bf, 3, 1), 2 * lay16);
    ck_assert_uint_eq(pp_stage_stash_bytes(&bf, 3, 2),
                      2 * lay16 + x + x2 + 2 * row + p4 + (BT * 4 + 15) / 16 * 16);
    ck_assert_uint_eq(pp_stage_stash_bytes(&small, 3, 2) - pp_stage_stash_bytes(&bf, 3, 2),
                      2 * (8 * x - 2 * x - 3 * x2 - q2 + 2 * h - 2 * h2) + x - x2);
    ck_assert_uint_gt(pp_stage_workspace_bytes(&bf, 3, 2), pp_stage_workspace_bytes(&small, 3, 2));
    ck_assert_uint_eq(pp_stage_compute_bytes(&bf, 3, 2), 2 * pp_stage_param_count(&bf, 3, 2));
}
END_TEST

static double stddev(const float *x, size_t n)
{
    double s = 0.0, q = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i], q += (double)x[i] * x[i];
    return sqrt(q / n - (s / n) * (s / n));
}

START_TEST(test_gpt_init)
{
    pp_model m = {.kind = PP_MODEL_GPT,
                  .vocab = 256,
                  .context = 16,
                  .embed = 32,
                  .heads = 4,
                  .ffn = 128,
                  .blocks = 2,
                  .batch = 4};
    const int S = 2;
    gpt_shape sh = gpt_shape_of(&m, S, 1);
    gpt_param_layout P = gpt_param_layout_of(&sh);
    size_t n = pp_stage_param_count(&m, S, 1);
    float *p = malloc(n * 4), *q = malloc(n * 4);
    memset(q, 0xab, n * 4);
    pp_stage_init(&m, S, 1, 42, p);
    pp_stage_init(&m, S, 1, 42, q);
    ck_assert_int_eq(memcmp(p, q, n * 4), 0);
    const float *l1 = p + P.layers + P.layer_stride;
    for (int i = 0; i < 32; i++) {
        ck_assert_float_eq(l1[P.ln1w + i], 1.0f);
        ck_assert_float_eq(l1[P.ln1b + i], 0.0f);
        ck_assert_float_eq(l1[P.ln2w + i], 1.0f);
        ck_assert_float_eq(l1[P.attprojb + i], 0.0f);
        ck_assert_float_eq(l1[P.fcprojb + i], 0.0f);
        ck_assert_float_eq(p[P.lnfw + i], 1.0f);
        ck_assert_float_eq(p[P.lnfb + i], 0.0f);
    }
    for (int i = 0; i < 96; i++)
        ck_assert_float_eq(l1[P.qkvb + i], 0.0f);
    /* std 0.02; the residual projections 0.02 / sqrt(2 * 4 layers). */
    ck_assert_double_eq_tol(stddev(l1 + P.qkvw, 3 * 32 * 32), 0.02, 0.002);
    ck_assert_double_eq_tol(stddev(l1 + P.fcw, 128 * 32), 0.02, 0.002);
    ck_assert_double_eq_tol(stddev(p + P.wlm, 256 * 32), 0.02, 0.002);
    ck_assert_double_eq_tol(stddev(l1 + P.attprojw, 32 * 32), 0.02 / sqrt(8.0), 0.001);
    ck_assert_double_eq_tol(stddev(l1 + P.fcprojw, 32 * 128), 0.02 / sqrt(8.0), 0.001);
    /* The two layers do not share values. */
    ck_assert(memcmp(p + P.layers, l1, P.layer_stride * 4) != 0);
    free(p);
    free(q);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* A pipeline on one thread                                                  */

/* pipe_init, then noise on every parameter, so no tensor is checked only
 * at its special initial value (layer norm weights 1, biases 0). */
static void pipe_init_noisy(pipeline *pl, const pp_model *m, int S, uint64_t seed, float noise)
{
    pipe_init(pl, m, S, seed);
    uint32_t st = (uint32_t)seed * 7919u + 1u;
    for (int s = 0; s < S; s++)
        for (size_t i = 0; i < pl->n[s]; i++)
            pl->p[s][i] += noise * urand(&st);
    pipe_refresh(pl);
}

/* ------------------------------------------------------------------------ */
/* Finite differences                                                        */

/* The tensor parameter i of stage s lies in, for messages and tallies. */
enum {
    G_WTE,
    G_WPE,
    G_LN1W,
    G_LN1B,
    G_QKVW,
    G_QKVB,
    G_APW,
    G_APB,
    G_LN2W,
    G_LN2B,
    G_FCW,
    G_FCB,
    G_FPW,
    G_FPB,
    G_LNFW,
    G_LNFB,
    G_WLM,
    G_COUNT
};
static const char *const gname[G_COUNT] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                           "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                           "fcprojw",  "fcprojb",  "lnfw", "lnfb", "wlm"};

static int tensor_of(const pp_model *m, int S, int s, size_t i)
{
    gpt_shape sh = gpt_shape_of(m, S, s);
    gpt_param_layout P = gpt_param_layout_of(&sh);
    if (sh.first && i < P.wpe)
        return G_WTE;
    if (sh.first && i < P.layers)
        return G_WPE;
    if (i < P.layers + (size_t)sh.L * P.layer_stride) {
        size_t r = (i - P.layers) % P.layer_stride;
        size_t starts[12] = {P.ln1w, P.ln1b, P.qkvw, P.qkvb, P.attprojw, P.attprojb,
                             P.ln2w, P.ln2b, P.fcw,  P.fcb,  P.fcprojw,  P.fcprojb};
        int t = 11;
        while (r < starts[t])
            t--;
        return G_LN1W + t;
    }
    return i < P.lnfb ? G_LNFW : i < P.wlm ? G_LNFB : G_WLM;
}

/* Central difference of f around x[i], float steps measured as taken. The
 * difference is "double checked": when the step eps = 1e-2 disagrees with
 * the analytic gradient by more than 0.2%, eps/2, a Richardson
 * extrapolation from eps and eps/2 (which cancels the truncation error's
 * eps^2 term: the T = 70 model's large gradients need it) and eps/4 (less
 * truncation, more float rounding noise) get a say too, and the best is
 * kept. It must be within 1% (relative, floor 5e-3); 0.26% is the worst
 * seen. */
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

static int fd_retries; /* checks that needed more than one step (PP_TEST_VERBOSE) */

static double fd_check(float *x, double g, objective f, void *ctx, double floor, double *fd_out)
{
    double h = fd_at(x, f, ctx, 1e-2f), best = fd_err(g, h, floor);
    *fd_out = h;
    if (best <= 2e-3)
        return best;
    fd_retries++;
    double h2 = fd_at(x, f, ctx, 5e-3f), cand[3] = {h2, (4.0 * h2 - h) / 3.0, 0.0};
    cand[2] = fd_at(x, f, ctx, 2.5e-3f);
    for (int k = 0; k < 3; k++) {
        double e = fd_err(g, cand[k], floor);
        if (e < best)
            best = e, *fd_out = cand[k];
    }
    return best;
}

/* Which parameters to check: all when the stage is small, else a sample
 * that still covers every tensor. */
static int pick(size_t i, size_t n, size_t budget)
{
    return n <= budget || i % (n / budget + 1) == 0;
}

/* --- one stage on its own: J = loss (last stage) or sum(out * R) -------- */

typedef struct {
    pp_model m;
    int S, s;
    float *p;
    const int32_t *tokens;
    float *x, *out, *R; /* input activations (s > 0), output, its random weights */
    void *stash, *work;
} stage_ctx;

static double stage_objective(void *vc)
{
    stage_ctx *c = vc;
    const void *in = c->s == 0 ? (const void *)c->tokens : (const void *)c->x;
    double loss =
        pp_stage_forward(&c->m, c->S, c->s, c->p, in, c->tokens, c->stash, c->work, c->out);
    if (c->s == c->S - 1)
        return loss;
    size_t n = pp_act_bytes(&c->m) / sizeof(float);
    double j = 0.0;
    for (size_t i = 0; i < n; i++)
        j += (double)c->out[i] * c->R[i];
    return j;
}

static void stage_gradient_check(const pp_model *m, int S, int s, uint64_t seed, size_t budget)
{
    size_t n = pp_stage_param_count(m, S, s), na = pp_act_bytes(m) / sizeof(float);
    stage_ctx c = {*m, S, s, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int32_t *tokens = malloc(pp_tokens_bytes(m));
    float *grads = calloc(n + 1, sizeof(float)), *din = malloc(na * 4);
    c.p = malloc(n * 4 + 4);
    c.x = malloc(na * 4);
    c.out = malloc(na * 4);
    c.R = malloc(na * 4);
    c.stash = malloc(pp_stage_stash_bytes(m, S, s));
    c.work = malloc(pp_stage_workspace_bytes(m, S, s));
    c.tokens = tokens;
    rand_tokens(m, tokens, (uint32_t)seed);
    pp_stage_init(m, S, s, seed, c.p);
    uint32_t st = (uint32_t)seed + 99u;
    for (size_t i = 0; i < n; i++)
        c.p[i] += 0.2f * urand(&st);
    fill_rand(c.x, na, 1.0f, (uint32_t)seed + 5u);
    fill_rand(c.R, na, 1.0f, (uint32_t)seed + 6u);

    stage_objective(&c);
    pp_stage_backward(m, S, s, c.p, grads, c.stash, c.work, s < S - 1 ? c.R : NULL,
                      s > 0 ? din : NULL, 1.0f);

    int checked[G_COUNT] = {0};
    double worst = 0.0, fd = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!pick(i, n, budget))
            continue;
        int t = tensor_of(m, S, s, i);
        double e = fd_check(&c.p[i], grads[i], stage_objective, &c, 5e-3, &fd);
        ck_assert_msg(e <= 1e-2, "S=%d stage %d %s[%zu]: analytic %.6g, fd %.6g", S, s, gname[t], i,
                      grads[i], fd);
        worst = fmax(worst, e);
        checked[t]++;
    }
    if (s > 0)
        for (size_t i = 0; i < na; i += 3) {
            double e = fd_check(&c.x[i], din[i], stage_objective, &c, 5e-3, &fd);
            ck_assert_msg(e <= 1e-2, "S=%d stage %d input[%zu]: analytic %.6g, fd %.6g", S, s, i,
                          din[i], fd);
            worst = fmax(worst, e);
        }
    gpt_shape sh = gpt_shape_of(m, S, s);
    for (int t = 0; t < G_COUNT; t++) {
        int present = t <= G_WPE ? sh.first : t >= G_LNFW ? sh.last : sh.L > 0;
        ck_assert_msg((checked[t] > 0) == present, "S=%d stage %d: %s checked %d times", S, s,
                      gname[t], checked[t]);
    }
    if (verbose())
        fprintf(stderr,
                "gpt stage check S=%d s=%d T=%u: %zu params, worst rel error %.3g, "
                "%d retried\n",
                S, s, m->context, n, worst, fd_retries);
    fd_retries = 0;
    free(tokens), free(grads), free(din), free(c.p), free(c.x), free(c.out), free(c.R);
    free(c.stash), free(c.work);
}

START_TEST(test_gpt_stage_gradients)
{
    stage_gradient_check(&small, 3, 0, 1, 600); /* first */
    stage_gradient_check(&small, 3, 1, 2, 600); /* middle */
    stage_gradient_check(&small, 3, 2, 3, 600); /* last */
    stage_gradient_check(&small, 1, 0, 4, 600); /* everything in one stage */
}
END_TEST

/* T = 70 > GPT_ATT_ROWS: the model's attention crosses row blocks. */
START_TEST(test_gpt_stage_gradients_long_context)
{
    pp_model m = {.kind = PP_MODEL_GPT,
                  .vocab = 7,
                  .context = 70,
                  .embed = 4,
                  .heads = 2,
                  .ffn = 4,
                  .blocks = 1,
                  .batch = 1};
    stage_gradient_check(&m, 1, 0, 5, 1000);
    stage_gradient_check(&m, 2, 1, 6, 1000);
}
END_TEST

/* --- chained pipelines: J = the summed loss ---------------------------- */

typedef struct {
    pipeline *pl;
    const int32_t *tokens;
} pipe_ctx;

static double pipe_objective(void *vc)
{
    pipe_ctx *c = vc;
    return pipe_forward(c->pl, c->tokens);
}

static void pipeline_gradient_check(const pp_model *m, int S, uint64_t seed, size_t budget)
{
    int32_t *tokens = malloc(pp_tokens_bytes(m));
    pipeline pl;
    pipe_init_noisy(&pl, m, S, seed, 0.2f);
    rand_tokens(m, tokens, (uint32_t)seed * 3u);
    pipe_ctx c = {&pl, tokens};
    pipe_forward(&pl, tokens);
    pipe_backward(&pl, 1.0f);
    double worst = 0.0, fd = 0.0;
    for (int s = 0; s < S; s++) {
        int checked[G_COUNT] = {0};
        for (size_t i = 0; i < pl.n[s]; i++) {
            if (!pick(i, pl.n[s], budget))
                continue;
            int t = tensor_of(m, S, s, i);
            double e = fd_check(&pl.p[s][i], pl.g[s][i], pipe_objective, &c, 5e-3, &fd);
            ck_assert_msg(e <= 1e-2, "S=%d stage %d %s[%zu]: analytic %.6g, fd %.6g", S, s,
                          gname[t], i, pl.g[s][i], fd);
            worst = fmax(worst, e);
            checked[t]++;
        }
        gpt_shape sh = gpt_shape_of(m, S, s);
        for (int t = 0; t < G_COUNT; t++) {
            int present = t <= G_WPE ? sh.first : t >= G_LNFW ? sh.last : sh.L > 0;
            ck_assert_msg((checked[t] > 0) == present, "S=%d stage %d: %s checked %d times", S, s,
                          gname[t], checked[t]);
        }
    }
    if (verbose())
        fprintf(stderr, "gpt pipeline check S=%d: worst rel error %.3g, %d retried\n", S, worst,
                fd_retries);
    fd_retries = 0;
    free(tokens);
    pipe_free(&pl);
}

START_TEST(test_gpt_pipeline_gradients)
{
    pp_model m = small;
    m.blocks = 1;
    pipeline_gradient_check(&m, 3, 7, 400);
}
END_TEST

/* Per-stage layer counts, a stage without layers among them. */
START_TEST(test_gpt_per_stage_layers)
{
    uint32_t layers[4] = {1, 0, 2, 1};
    pp_model m = small;
    m.layers = layers;
    ck_assert_uint_eq(pp_stage_param_count(&m, 4, 1), 0);
    pipeline_gradient_check(&m, 4, 8, 250);
    uint32_t ends[3] = {0, 2, 0}; /* the first and last stages hold only embeddings / head */
    m.layers = ends;
    pipeline_gradient_check(&m, 3, 9, 250);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Split backward, workspace, bf16                                           */

/* B (all stages) then W (in another order) gives the fused backward's bits,
 * and poisoning the workspace with NaNs before every call changes none. */
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
                      "%s S=%d stage %d: split gradients differ", pp_precision_name(m->precision),
                      S, s);
        if (s > 0)
            ck_assert_int_eq(memcmp(fused.dact[s], split.dact[s], pp_act_bytes(m)), 0);
        for (size_t i = 0; i < fused.n[s]; i++)
            ck_assert(isfinite(fused.g[s][i]));
    }
    free(tokens);
    pipe_free(&fused);
    pipe_free(&split);
}

START_TEST(test_gpt_split_matches_fused)
{
    uint32_t layers[3] = {2, 0, 1};
    pp_model m = small, bf;
    split_and_scratch(&m, 3);
    split_and_scratch(&m, 1);
    m.layers = layers;
    split_and_scratch(&m, 3);
    pp_model lng = {.kind = PP_MODEL_GPT,
                    .vocab = 9,
                    .context = 70,
                    .embed = 4,
                    .heads = 2,
                    .ffn = 8,
                    .blocks = 1,
                    .batch = 2};
    split_and_scratch(&lng, 2);
    bf = small;
    bf.precision = PP_PREC_BF16;
    split_and_scratch(&bf, 3);
    split_and_scratch(&bf, 1);
    lng.precision = PP_PREC_BF16;
    split_and_scratch(&lng, 2);
}
END_TEST

/* bf16 runs and stays near fp32 from the same master weights. */
START_TEST(test_gpt_bf16_near_fp32)
{
    pp_model f = {.kind = PP_MODEL_GPT,
                  .vocab = 64,
                  .context = 16,
                  .embed = 32,
                  .heads = 4,
                  .ffn = 64,
                  .blocks = 1,
                  .batch = 2};
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
    if (verbose())
        fprintf(stderr, "gpt bf16 loss %.6f, fp32 %.6f\n", l16, l32);
    ck_assert_msg(fabs(l16 - l32) <= 0.01 * fabs(l32), "loss bf16 %g, fp32 %g", l16, l32);
    ck_assert_msg(l16 != l32, "bf16 loss equals fp32's bit for bit");
    for (int s = 0; s < 3; s++) {
        double r = pipe_rel_diff(p16.g[s], p32.g[s], p16.n[s]);
        if (verbose())
            fprintf(stderr, "gpt bf16 stage %d grads: rel %.3g\n", s, r);
        ck_assert_msg(r < 0.05, "stage %d gradients differ by %g (relative)", s, r);
    }
    free(tokens);
    pipe_free(&p16);
    pipe_free(&p32);
}
END_TEST

/* At initialisation the loss per position is near ln V, and a few AdamW
 * steps on one batch bring it down. */
START_TEST(test_gpt_loss_at_init_and_training)
{
    pp_model m = {.kind = PP_MODEL_GPT,
                  .vocab = 256,
                  .context = 16,
                  .embed = 32,
                  .heads = 4,
                  .ffn = 128,
                  .blocks = 1,
                  .batch = 4};
    const int S = 2;
    static const char text[] = "the cat sat on the mat. the cat ate the rat. the rat sat on it.";
    int32_t *tokens = malloc(pp_tokens_bytes(&m));
    for (uint32_t b = 0; b < m.batch; b++)
        for (uint32_t t = 0; t <= m.context; t++)
            tokens[b * (m.context + 1) + t] = (unsigned char)text[b * 11 + t];
    pipeline pl;
    pipe_init_noisy(&pl, &m, S, 1, 0.0f);
    double n = (double)m.batch * m.context;
    double l0 = pipe_forward(&pl, tokens) / n;
    if (verbose())
        fprintf(stderr, "gpt loss at init %.4f (ln 256 = %.4f)\n", l0, log(256.0));
    ck_assert_msg(fabs(l0 - log(256.0)) < 0.05, "loss at init %g, ln V %g", l0, log(256.0));
    float *state[2];
    pp_optim o = pp_optim_defaults(PP_OPT_ADAMW);
    for (int s = 0; s < S; s++)
        state[s] = calloc(2 * pl.n[s], sizeof(float));
    for (int step = 1; step <= 10; step++) {
        pipe_forward(&pl, tokens);
        pipe_backward(&pl, (float)(1.0 / n));
        for (int s = 0; s < S; s++)
            pp_optimizer_step(PP_OPT_ADAMW, &o, pl.p[s], pl.g[s], state[s], pl.n[s], step);
    }
    double l1 = pipe_forward(&pl, tokens) / n;
    if (verbose())
        fprintf(stderr, "gpt loss after 10 AdamW steps %.4f\n", l1);
    ck_assert_msg(l1 < l0 - 1.0, "loss %g -> %g after 10 steps", l0, l1);
    for (int s = 0; s < S; s++)
        free(state[s]);
    free(tokens);
    pipe_free(&pl);
}
END_TEST

Suite *gpt_suite(void)
{
    Suite *s = suite_create("gpt");
    TCase *tc = tcase_create("gpt");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_attention_matches_reference);
    tcase_add_test(tc, test_attention_rows_agree);
    tcase_add_test(tc, test_gpt_sizes);
    tcase_add_test(tc, test_gpt_sizes_linear_in_stages);
    tcase_add_test(tc, test_gpt_init);
    tcase_add_test(tc, test_gpt_stage_gradients);
    tcase_add_test(tc, test_gpt_stage_gradients_long_context);
    tcase_add_test(tc, test_gpt_pipeline_gradients);
    tcase_add_test(tc, test_gpt_per_stage_layers);
    tcase_add_test(tc, test_gpt_split_matches_fused);
    tcase_add_test(tc, test_gpt_bf16_near_fp32);
    tcase_add_test(tc, test_gpt_loss_at_init_and_training);
    suite_add_tcase(s, tc);
    return s;
}
