/* test_model.c - unit tests of the demo model's stages (kernels/mlp.c's
 * blocks in kernels/stage.c's skeleton):
 * sizes, deterministic initialisation, a finite-difference check of the
 * gradients of every tensor in every stage of a tiny pipeline, a short
 * training run that must reduce the loss, and the bf16 path (a block
 * against a hand-written bf16 block; bf16 against fp32). PP_TEST_VERBOSE=1 in the
 * environment prints the gradient checks' worst errors and the losses. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu_kernels.h"
#include "../../kernels/model.h"
#include "pipeline.h"
#include "suites.h"

/* The tiny model: D = 6, and three stages so that the first, a middle and
 * the last stage (each with its own parameter layout) are all exercised. */
static const pp_model tiny = {.context = 3, .embed = 2, .ffn = 5, .blocks = 2, .batch = 3};
enum { TINY_S = 3, MAX_S = 4 };

/* ------------------------------------------------------------------------ */
/* A pipeline run on one thread: F(0..S-1), then B(S-1..0).                  */

/* Windows of context+1 bytes of text starting at start, start+step, ... */
static void load_windows(const pp_model *m, const char *text, size_t len, size_t start, size_t step,
                         int32_t *tokens)
{
    size_t w = m->context + 1;
    for (size_t b = 0; b < m->batch; b++) {
        size_t at = (start + b * step) % (len - w + 1);
        for (size_t c = 0; c < w; c++)
            tokens[b * w + c] = (unsigned char)text[at + c];
    }
}

/* ------------------------------------------------------------------------ */
/* Sizes                                                                     */

static size_t r16(size_t n) { return (n + 15) / 16 * 16; }

START_TEST(test_sizes)
{
    const size_t D = 6, F = 5, B = 3, V = 256;
    const size_t block = 2 * D + F * D + F + D * F + D; /* 83 */
    const size_t head = 2 * D + V * D + V;
    ck_assert_uint_eq(pp_stage_param_count(&tiny, 3, 0), V * 2 + 2 * block);
    ck_assert_uint_eq(pp_stage_param_count(&tiny, 3, 1), 2 * block);
    ck_assert_uint_eq(pp_stage_param_count(&tiny, 3, 2), 2 * block + head);
    ck_assert_uint_eq(pp_stage_param_count(&tiny, 1, 0), V * 2 + 2 * block + head);
    ck_assert_uint_eq(pp_act_bytes(&tiny), B * D * 4);
    ck_assert_uint_eq(pp_tokens_bytes(&tiny), B * 4 * 4);

    /* The documented stash layout (model.c), every region 16-byte rounded:
     * per block x, u, mean, rstd, h, a; the head xh, z, meanf, rstdf, probs,
     * targets. */
    size_t x = r16(B * D * 4), h = r16(B * F * 4), row = r16(B * 4), probs = r16(B * V * 4);
    size_t blocks = 2 * (2 * x + 2 * row + 2 * h);
    size_t tokens = r16(B * 4 * 4), headst = 2 * x + 2 * row + probs + r16(B * 4);
    ck_assert_uint_eq(pp_stage_stash_bytes(&tiny, 3, 0), tokens + blocks);
    ck_assert_uint_eq(pp_stage_stash_bytes(&tiny, 3, 1), blocks);
    ck_assert_uint_eq(pp_stage_stash_bytes(&tiny, 3, 2), blocks + headst);
    ck_assert_uint_eq(pp_stage_stash_bytes(&tiny, 1, 0), tokens + blocks + headst);
    for (int s = 0; s < 3; s++)
        ck_assert_uint_eq(pp_stage_stash_bytes(&tiny, 3, s) % 16, 0);

    /* The workspace: the head's logits, the blocks' dh, du, and dx. */
    size_t scratch = h + x + x;
    ck_assert_uint_eq(pp_stage_workspace_bytes(&tiny, 3, 0), scratch);
    ck_assert_uint_eq(pp_stage_workspace_bytes(&tiny, 3, 1), scratch);
    ck_assert_uint_eq(pp_stage_workspace_bytes(&tiny, 3, 2), probs + scratch);
    ck_assert_uint_eq(pp_stage_workspace_bytes(&tiny, 1, 0), probs + scratch);

    /* The split region after it: per block dy, dh, du; the head's dlogits
     * and duf; the embedding's dx0. */
    size_t wblocks = 2 * (x + h + x), whead = probs + x;
    ck_assert_uint_eq(pp_stage_stash_bytes_split(&tiny, 3, 0),
                      pp_stage_stash_bytes(&tiny, 3, 0) + wblocks + x);
    ck_assert_uint_eq(pp_stage_stash_bytes_split(&tiny, 3, 1),
                      pp_stage_stash_bytes(&tiny, 3, 1) + wblocks);
    ck_assert_uint_eq(pp_stage_stash_bytes_split(&tiny, 3, 2),
                      pp_stage_stash_bytes(&tiny, 3, 2) + wblocks + whead);

    /* Without blocks: a middle stage keeps nothing (but its stash is never
     * empty) and needs only dx; the last stage still needs du for its
     * final layer norm. */
    pp_model nob = tiny;
    nob.blocks = 0;
    ck_assert_uint_eq(pp_stage_stash_bytes(&nob, 3, 1), 16);
    ck_assert_uint_eq(pp_stage_stash_bytes_split(&nob, 3, 1), 16);
    ck_assert_uint_eq(pp_stage_workspace_bytes(&nob, 3, 1), x);
    ck_assert_uint_eq(pp_stage_stash_bytes(&nob, 3, 2), headst);
    ck_assert_uint_eq(pp_stage_workspace_bytes(&nob, 3, 2), probs + x + x);

    /* bf16: the compute copy is half the weights; the stash keeps u, a and
     * z (the GEMM operands) as bf16, 2 bytes each, the rest fp32, and the
     * split region is fp32's; the workspace gains two regions for rounded
     * GEMM operands, [B][max(D, F, V)] floats, and one for the weights
     * widened to fp32 (so that no CPU job allocates them). */
    pp_model bf = tiny;
    bf.precision = PP_PREC_BF16;
    size_t x2 = r16(B * D * 2), h2 = r16(B * F * 2);
    size_t blocks2 = 2 * (x + x2 + 2 * row + h + h2),
           headst2 = x + x2 + 2 * row + probs + r16(B * 4);
    ck_assert_uint_eq(pp_stage_stash_bytes(&bf, 3, 0), tokens + blocks2);
    ck_assert_uint_eq(pp_stage_stash_bytes(&bf, 3, 1), blocks2);
    ck_assert_uint_eq(pp_stage_stash_bytes(&bf, 3, 2), blocks2 + headst2);
    ck_assert_uint_lt(pp_stage_stash_bytes(&bf, 3, 1), pp_stage_stash_bytes(&tiny, 3, 1));
    for (int s = 0; s < 3; s++) {
        ck_assert_uint_eq(pp_stage_compute_bytes(&tiny, 3, s),
                          4 * pp_stage_param_count(&tiny, 3, s));
        ck_assert_uint_eq(pp_stage_compute_bytes(&bf, 3, s), 2 * pp_stage_param_count(&tiny, 3, s));
        ck_assert_uint_eq(pp_stage_stash_bytes_split(&bf, 3, s) - pp_stage_stash_bytes(&bf, 3, s),
                          pp_stage_stash_bytes_split(&tiny, 3, s) -
                              pp_stage_stash_bytes(&tiny, 3, s));
        ck_assert_uint_eq(pp_stage_workspace_bytes(&bf, 3, s),
                          pp_stage_workspace_bytes(&tiny, 3, s) + 2 * probs +
                              r16(4 * pp_stage_param_count(&bf, 3, s)));
    }

    /* FLOPs: 2 GEMMs per block, the head's GEMM, backward twice forward. */
    double blk = 2.0 * (2.0 * B * F * D);
    ck_assert_double_eq(pp_stage_flops(&tiny, 3, 1, 0), 2 * blk);
    ck_assert_double_eq(pp_stage_flops(&tiny, 3, 2, 0), 2 * blk + 2.0 * B * V * D);
    ck_assert_double_eq(pp_stage_flops(&tiny, 3, 2, 1), 2 * pp_stage_flops(&tiny, 3, 2, 0));
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */

START_TEST(test_init_deterministic)
{
    float *p[TINY_S], *q[TINY_S];
    for (int s = 0; s < TINY_S; s++) {
        size_t n = pp_stage_param_count(&tiny, TINY_S, s);
        p[s] = malloc(n * sizeof(float));
        q[s] = malloc(n * sizeof(float));
        memset(q[s], 0xAB, n * sizeof(float)); /* init must overwrite everything */
    }
    /* Forward order into p, reverse order (and stage 2 twice) into q. */
    for (int s = 0; s < TINY_S; s++)
        pp_stage_init(&tiny, TINY_S, s, 42, p[s]);
    for (int s = TINY_S - 1; s >= 0; s--)
        pp_stage_init(&tiny, TINY_S, s, 42, q[s]);
    pp_stage_init(&tiny, TINY_S, 2, 42, q[2]);
    for (int s = 0; s < TINY_S; s++)
        ck_assert_mem_eq(p[s], q[s], pp_stage_param_count(&tiny, TINY_S, s) * sizeof(float));

    /* Another seed changes the weights (biases stay zero). */
    size_t n2 = pp_stage_param_count(&tiny, TINY_S, 2), differ = 0;
    pp_stage_init(&tiny, TINY_S, 2, 43, q[2]);
    for (size_t i = 0; i < n2; i++)
        differ += p[2][i] != q[2][i];
    ck_assert_uint_gt(differ, n2 / 2);

    /* Stages 1 and 2 have the same block shapes but must not share values. */
    ck_assert(memcmp(p[1], p[2], 2 * 83 * sizeof(float)) != 0);

    /* Layer norms start as gamma 1, beta 0 (each block's at its start, the
     * final one after stage 2's two blocks); biases start at zero; weights
     * are bounded and not all equal. */
    for (int k = 0; k < 2; k++) {
        const float *blk = p[1] + 83 * k;
        const float *g = blk, *beta = blk + 6, *b1 = blk + 42, *b2 = blk + 77;
        for (int i = 0; i < 6; i++)
            ck_assert_float_eq(g[i], 1.0f);
        for (int i = 0; i < 6; i++)
            ck_assert_float_eq(beta[i], 0.0f);
        for (int i = 0; i < 5; i++)
            ck_assert_float_eq(b1[i], 0.0f);
        for (int i = 0; i < 6; i++)
            ck_assert_float_eq(b2[i], 0.0f);
    }
    const float *gf = p[2] + 2 * 83, *betaf = gf + 6, *bh = gf + 12 + 256 * 6;
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(gf[i], 1.0f);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(betaf[i], 0.0f);
    for (int i = 0; i < 256; i++)
        ck_assert_float_eq(bh[i], 0.0f);
    ck_assert_uint_eq(pp_stage_param_count(&tiny, TINY_S, 2), 2 * 83 + 12 + 256 * 6 + 256);
    for (size_t i = 0; i < 512; i++)
        ck_assert(fabsf(p[0][i]) <= 1.0f);
    ck_assert(p[0][0] != p[0][1]);
    for (int s = 0; s < TINY_S; s++) {
        free(p[s]);
        free(q[s]);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Gradient check                                                            */

/* Names the tensor that parameter i of stage s belongs to, per the layout in
 * model.h, so a failure says where it is and each kind gets its own tally. */
enum { T_E, T_G, T_BETA, T_W1, T_B1, T_W2, T_B2, T_GF, T_BETAF, T_WH, T_BH, T_COUNT };
static const char *const tensor_names[T_COUNT] = {"E",  "g",  "beta",  "W1", "b1", "W2",
                                                  "b2", "gf", "betaf", "Wh", "bh"};

static int tensor_of(const pp_model *m, int S, int s, size_t i)
{
    const size_t D = pp_model_width(m), F = m->ffn, V = PP_VOCAB;
    const size_t block = 2 * D + 2 * F * D + F + D;
    if (s == 0) {
        if (i < V * m->embed)
            return T_E;
        i -= V * m->embed;
    }
    if (i < m->blocks * block) {
        i %= block;
        if (i < D)
            return T_G;
        if (i < 2 * D)
            return T_BETA;
        i -= 2 * D;
        if (i < F * D)
            return T_W1;
        if (i < F * D + F)
            return T_B1;
        if (i < F * D + F + D * F)
            return T_W2;
        return T_B2;
    }
    ck_assert_int_eq(s, S - 1);
    i -= m->blocks * block;
    if (i < D)
        return T_GF;
    if (i < 2 * D)
        return T_BETAF;
    i -= 2 * D;
    return i < V * D ? T_WH : T_BH;
}

/* Compares the chained backward of an S-stage pipeline with central
 * differences of the summed loss, for EVERY parameter (the models are
 * tiny), and checks that every tensor of every stage had real gradients. */
static void gradient_check(const pp_model *m, int S, uint64_t seed)
{
    static const char text[] = "pipelines overlap the microbatches";
    int32_t *tokens = malloc(pp_tokens_bytes(m));
    pipeline pl;
    pipe_init(&pl, m, S, seed);
    load_windows(m, text, sizeof text - 1, 2, 9, tokens);
    /* Nonzero biases and a bit of noise everywhere, so no tensor is checked
     * only at its special initial value. */
    uint32_t st = 12345u;
    for (int s = 0; s < S; s++)
        for (size_t i = 0; i < pl.n[s]; i++) {
            st = st * 1664525u + 1013904223u;
            pl.p[s][i] += 0.2f * ((float)(st >> 8) / 16777216.0f - 0.5f);
        }

    pipe_forward(&pl, tokens);
    pipe_backward(&pl, 1.0f); /* gradient of the summed loss */

    /* eps 1e-2: smaller steps drown in the float forward's rounding noise,
     * larger ones in truncation error. The difference is divided by the step
     * actually taken in float. */
    const float eps = 1e-2f;
    int checked[MAX_S][T_COUNT] = {{0}}, nonzero[MAX_S][T_COUNT] = {{0}};
    double worst = 0.0;
    for (int s = 0; s < S; s++) {
        for (size_t i = 0; i < pl.n[s]; i++) {
            float keep = pl.p[s][i];
            pl.p[s][i] = keep + eps;
            float up = pl.p[s][i];
            double lp = pipe_forward(&pl, tokens);
            pl.p[s][i] = keep - eps;
            float down = pl.p[s][i];
            double lm = pipe_forward(&pl, tokens);
            pl.p[s][i] = keep;
            double fd = (lp - lm) / ((double)up - (double)down);
            double g = pl.g[s][i];
            /* 1% relative, with a floor of 5e-5 absolute: the float forward
             * leaves ~1e-5 of noise in fd, which swamps tiny gradients. */
            double err = fabs(g - fd) / (fmax(fabs(g), fabs(fd)) + 5e-3);
            int t = tensor_of(m, S, s, i);
            ck_assert_msg(err <= 1e-2, "S=%d stage %d %s[%zu]: analytic %.6g, fd %.6g", S, s,
                          tensor_names[t], i, g, fd);
            if (err > worst)
                worst = err;
            checked[s][t]++;
            nonzero[s][t] += fabs(g) > 1e-3;
        }
    }
    for (int s = 0; s < S; s++)
        for (int t = 0; t < T_COUNT; t++) {
            int present = t == T_E ? s == 0 : t >= T_GF ? s == S - 1 : m->blocks > 0;
            ck_assert_int_eq(checked[s][t] > 0, present);
            ck_assert_msg(!present || nonzero[s][t] > 0, "S=%d stage %d %s: none nonzero", S, s,
                          tensor_names[t]);
        }
    if (getenv("PP_TEST_VERBOSE"))
        fprintf(stderr, "gradient check S=%d blocks=%u: worst error %.3g\n", S, m->blocks, worst);
    free(tokens);
    pipe_free(&pl);
}

START_TEST(test_gradient_check) { gradient_check(&tiny, TINY_S, 7); }
END_TEST

/* One stage holding embedding, blocks and head together. */
START_TEST(test_gradient_check_single_stage) { gradient_check(&tiny, 1, 8); }
END_TEST

/* No blocks: the middle stage is the identity and must pass the gradient. */
START_TEST(test_gradient_check_no_blocks)
{
    pp_model m = tiny;
    m.blocks = 0;
    gradient_check(&m, 3, 9);
}
END_TEST

/* Backward leaves the saved activations alone: running it twice on the same
 * stash accumulates exactly twice the gradients. */
START_TEST(test_backward_repeatable)
{
    int32_t tokens[3 * 4];
    pipeline pl;
    pipe_init(&pl, &tiny, TINY_S, 3);
    load_windows(&tiny, "abcdefghij", 10, 0, 2, tokens);
    pipe_forward(&pl, tokens);
    pipe_backward(&pl, 0.25f);
    size_t n0 = pl.n[0];
    float *once = malloc(n0 * sizeof(float));
    memcpy(once, pl.g[0], n0 * sizeof(float));
    pipe_backward(&pl, 0.25f);
    for (size_t i = 0; i < n0; i++)
        ck_assert_float_eq_tol(pl.g[0][i], 2 * once[i], 1e-5f * (1 + fabsf(once[i])));
    free(once);
    pipe_free(&pl);
}
END_TEST

/* The workspace carries nothing from one call to the next, which is what
 * lets one per rank serve every stash it holds: filling it with NaNs
 * between F and B (and between the stages) changes no bit of the
 * gradients. Both precisions (bf16 rounds its operands there too). */
static void workspace_is_scratch(const pp_model *m)
{
    int32_t tokens[3 * 4];
    pipeline clean, dirty;
    pipe_init(&clean, m, TINY_S, 5);
    pipe_init(&dirty, m, TINY_S, 5);
    size_t work = 0;
    for (int s = 0; s < TINY_S; s++)
        if (pp_stage_workspace_bytes(m, TINY_S, s) > work)
            work = pp_stage_workspace_bytes(m, TINY_S, s);
    load_windows(m, "pack my box with five dozen", 27, 2, 5, tokens);
    pipe_forward(&clean, tokens);
    pipe_backward(&clean, 0.25f);
    for (int s = 0; s < TINY_S; s++) {
        const void *in = s == 0 ? (const void *)tokens : (const void *)dirty.act[s - 1];
        memset(dirty.work, 0xff, work); /* all NaN */
        pp_stage_forward(m, TINY_S, s, dirty.w[s], in, tokens, dirty.stash[s], dirty.work,
                         s < TINY_S - 1 ? dirty.act[s] : NULL);
    }
    for (int s = TINY_S - 1; s >= 0; s--) {
        memset(dirty.work, 0xff, work);
        pp_stage_backward(m, TINY_S, s, dirty.w[s], dirty.g[s], dirty.stash[s], dirty.work,
                          s < TINY_S - 1 ? dirty.dact[s + 1] : NULL, s > 0 ? dirty.dact[s] : NULL,
                          0.25f);
    }
    for (int s = 0; s < TINY_S; s++)
        ck_assert_int_eq(memcmp(clean.g[s], dirty.g[s], clean.n[s] * sizeof(float)), 0);
    pipe_free(&clean);
    pipe_free(&dirty);
}

START_TEST(test_workspace_is_scratch)
{
    pp_model bf = tiny;
    bf.precision = PP_PREC_BF16;
    workspace_is_scratch(&tiny);
    workspace_is_scratch(&bf);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Training                                                                  */

/* A split backward (B, then W later) gives the same bits as the fused one:
 * the same input gradients and the same weight gradients. */
static void split_matches_fused(const pp_model *m, int S)
{
    int32_t tokens[3 * 4];
    pipeline fused, split;
    pipe_init(&fused, m, S, 11);
    pipe_init(&split, m, S, 11);
    load_windows(m, "the quick brown fox", 19, 1, 3, tokens);
    pipe_forward(&fused, tokens);
    pipe_forward(&split, tokens);
    pipe_backward(&fused, 0.5f);
    for (int s = S - 1; s >= 0; s--) /* all B first, then the Ws in another order */
        pp_stage_backward_input(&split.m, S, s, split.w[s], split.stash[s], split.work,
                                s < S - 1 ? split.dact[s + 1] : NULL, s > 0 ? split.dact[s] : NULL,
                                0.5f);
    for (int s = 0; s < S; s++)
        pp_stage_backward_weight(&split.m, S, s, split.g[s], split.stash[s], split.work);
    for (int s = 0; s < S; s++) {
        ck_assert_int_eq(memcmp(fused.g[s], split.g[s], fused.n[s] * sizeof(float)), 0);
        if (s > 0)
            ck_assert_int_eq(memcmp(fused.dact[s], split.dact[s], pp_act_bytes(m)), 0);
    }
    ck_assert_uint_ge(pp_stage_stash_bytes_split(m, S, 0), pp_stage_stash_bytes(m, S, 0));
    pipe_free(&fused);
    pipe_free(&split);
}

START_TEST(test_split_backward_matches_fused)
{
    split_matches_fused(&tiny, TINY_S);
    split_matches_fused(&tiny, 1);
    pp_model noblocks = tiny;
    noblocks.blocks = 0;
    split_matches_fused(&noblocks, 3);
    pp_model bf16 = tiny;
    bf16.precision = PP_PREC_BF16;
    split_matches_fused(&bf16, TINY_S);
    split_matches_fused(&bf16, 1);
}
END_TEST

static const char train_text[] = "the cat sat on the mat. the cat ate the rat. "
                                 "the rat sat on the cat. the mat ate the hat. ";

/* Mean loss over every window of the text, in batch-sized groups. */
static double eval_loss(pipeline *pl)
{
    size_t len = sizeof train_text - 1, nwin = len - pl->m.context, b = pl->m.batch;
    int32_t *tokens = malloc(pp_tokens_bytes(&pl->m));
    double total = 0.0;
    size_t rows = 0;
    for (size_t start = 0; start + b <= nwin; start += b) {
        load_windows(&pl->m, train_text, len, start, 1, tokens);
        total += pipe_forward(pl, tokens);
        rows += b;
    }
    free(tokens);
    return total / (double)rows;
}

static void training_reduces_loss(const pp_model *m)
{
    const size_t len = sizeof train_text - 1;
    int32_t tokens[3 * 4];
    pipeline pl;
    pipe_init(&pl, m, TINY_S, 11);
    double before = eval_loss(&pl);
    for (int step = 0; step < 200; step++) {
        /* Two microbatches a step, gradients averaged over both. */
        for (int mb = 0; mb < 2; mb++) {
            load_windows(m, train_text, len, (size_t)(step * 37 + mb * 17), 29, tokens);
            pipe_forward(&pl, tokens);
            pipe_backward(&pl, 1.0f / (2.0f * m->batch));
        }
        for (int s = 0; s < TINY_S; s++)
            pp_sgd_step(pl.p[s], pl.g[s], pl.n[s], 0.3f);
        pipe_refresh(&pl);
    }
    double after = eval_loss(&pl);
    if (getenv("PP_TEST_VERBOSE"))
        fprintf(stderr, "training (%s): loss %.4f -> %.4f\n", pp_precision_name(m->precision),
                before, after);
    ck_assert_msg(before > 5.0 && before < 6.5, "initial loss %g, expected near ln 256", before);
    ck_assert_msg(after < 0.6 * before, "loss %g -> %g after 200 steps", before, after);
    /* pp_sgd_step cleared the gradients. */
    for (int s = 0; s < TINY_S; s++)
        for (size_t i = 0; i < pl.n[s]; i++)
            ck_assert_float_eq(pl.g[s][i], 0.0f);
    pipe_free(&pl);
}

START_TEST(test_training_reduces_loss) { training_reduces_loss(&tiny); }
END_TEST

START_TEST(test_training_reduces_loss_bf16)
{
    pp_model bf = tiny;
    bf.precision = PP_PREC_BF16;
    training_reduces_loss(&bf);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* bf16                                                                      */

START_TEST(test_bf16_compute_copy)
{
    pp_model bf = tiny;
    bf.precision = PP_PREC_BF16;
    size_t n = pp_stage_param_count(&bf, TINY_S, 2);
    float *master = malloc(n * sizeof *master);
    uint16_t *copy = malloc(n * sizeof *copy), *want = malloc(n * sizeof *want);
    float *same = malloc(n * sizeof *same);
    pp_stage_init(&bf, TINY_S, 2, 5, master);
    pp_stage_compute_copy(&bf, TINY_S, 2, master, copy);
    pp_f32_to_bf16(master, want, n);
    ck_assert_int_eq(memcmp(copy, want, n * sizeof *copy), 0);
    pp_stage_compute_copy(&tiny, TINY_S, 2, master, same); /* fp32: the weights themselves */
    ck_assert_int_eq(memcmp(same, master, n * sizeof *same), 0);
    free(master);
    free(copy);
    free(want);
    free(same);
}
END_TEST

/* One pre-LN block in bf16 as model.h specifies it, written out with the
 * plain kernels: w are the widened bf16 weights (g, beta, W1, b1, W2, b2);
 * the layer norm, biases and GELU run in fp32; the GEMMs' activation
 * operands are rounded to bf16; the GEMMs accumulate in fp32. */
static void bf16_block_by_hand(int B, int D, int F, const float *w, const float *x, float *y)
{
    const float *g = w, *beta = g + D, *W1 = beta + D, *b1 = W1 + F * D, *W2 = b1 + F,
                *b2 = W2 + D * F;
    float *u = malloc((size_t)B * D * sizeof *u), *h = malloc((size_t)B * F * sizeof *h);
    float *a = malloc((size_t)B * F * sizeof *a), mean[8], rstd[8];
    pp_layernorm_forward(x, g, beta, B, D, u, mean, rstd);
    pp_round_bf16(u, u, (size_t)B * D);
    pp_gemm_ref(0, 1, B, F, D, 1.0f, u, W1, 0.0f, h);
    pp_bias_add(h, b1, B, F);
    pp_gelu_forward(h, a, (size_t)B * F);
    pp_round_bf16(a, a, (size_t)B * F);
    memcpy(y, x, (size_t)B * D * sizeof *y);
    pp_gemm_ref(0, 1, B, D, F, 1.0f, a, W2, 1.0f, y);
    pp_bias_add(y, b2, B, D);
    free(u);
    free(h);
    free(a);
}

/* A middle stage of one block: the CPU's bf16 forward is the hand-written
 * one up to summation order, and measurably not the fp32 forward with the
 * same (bf16-valued) weights, which does not round the activations. In
 * bf16 the stage takes and gives bf16 activations (model_shape.h's
 * pp_act_bytes): its input is x's bf16 values, its output the block's fp32
 * result rounded once; the hand-written block's fp32 result differs from
 * the stage's by summation order (1e-5), so the two may round to adjacent
 * bf16 values: within one bf16 ulp (2^-8 relative) plus that. */
START_TEST(test_bf16_block_matches_hand_written)
{
    pp_model bf = tiny, fp = tiny;
    bf.blocks = fp.blocks = 1;
    bf.precision = PP_PREC_BF16;
    const int S = 3, B = 3, D = 6, F = 5;
    size_t n = pp_stage_param_count(&bf, S, 1);
    float *master = malloc(n * sizeof *master), *wide = malloc(n * sizeof *wide);
    uint16_t *copy = malloc(n * sizeof *copy);
    float x[3 * 6], want[3 * 6], got[3 * 6], got32[3 * 6];
    uint16_t xb[3 * 6], gotb[3 * 6];
    /* one stash for both forwards: fp32's, the larger (bf16 stashes u and a
     * in bf16) */
    ck_assert_uint_lt(pp_stage_stash_bytes(&bf, S, 1), pp_stage_stash_bytes(&fp, S, 1));
    void *stash = malloc(pp_stage_stash_bytes(&fp, S, 1));
    void *work = malloc(pp_stage_workspace_bytes(&bf, S, 1));
    pp_stage_init(&bf, S, 1, 21, master);
    for (size_t i = 0; i < n; i++)
        master[i] *= 1.0f + 0.01f * (float)(i % 7); /* ragged bits */
    pp_stage_compute_copy(&bf, S, 1, master, copy);
    pp_bf16_to_f32(copy, wide, n);
    for (int i = 0; i < B * D; i++)
        x[i] = sinf(0.7f * (float)i + 0.3f) * (1.0f + 0.1f * (float)i);

    pp_f32_to_bf16(x, xb, (size_t)B * D);
    pp_bf16_to_f32(xb, x, (size_t)B * D); /* the values the bf16 stage receives */

    bf16_block_by_hand(B, D, F, wide, x, want);
    pp_stage_forward(&bf, S, 1, copy, xb, NULL, stash, work, (float *)gotb);
    pp_bf16_to_f32(gotb, got, (size_t)B * D);
    pp_stage_forward(&fp, S, 1, wide, x, NULL, stash, work, got32);
    float worst32 = 0.0f;
    for (int i = 0; i < B * D; i++) {
        ck_assert_msg(fabsf(got[i] - want[i]) <=
                          ldexpf(fabsf(want[i]), -8) + 1e-5f * (1.0f + fabsf(want[i])),
                      "y[%d] = %.9g (bf16), by hand %.9g (fp32)", i, got[i], want[i]);
        worst32 = fmaxf(worst32, fabsf(got32[i] - want[i]));
    }
    ck_assert_msg(worst32 > 1e-4f, "fp32 forward within %g of bf16: operands not rounded?",
                  worst32);
    free(master);
    free(wide);
    free(copy);
    free(stash);
    free(work);
}
END_TEST

/* A bf16 job on the CPU reads its weights widened to fp32 from the last
 * region of the workspace the plan sizes, not from memory it allocates:
 * after F, B and W on a workspace of exactly pp_stage_workspace_bytes
 * (filled with NaNs first), that region holds exactly the widened compute
 * copy, and the results are those of a generous workspace. */
START_TEST(test_bf16_widens_into_workspace)
{
    pp_model bf = tiny;
    bf.precision = PP_PREC_BF16;
    const int S = 3;
    for (int s = 0; s < S; s++) {
        size_t n = pp_stage_param_count(&bf, S, s), wb = pp_stage_workspace_bytes(&bf, S, s);
        size_t wide_at = wb - r16(n * sizeof(float));
        size_t sb = pp_stage_stash_bytes_split(&bf, S, s), ab = pp_act_bytes(&bf);
        float *master = malloc(n * sizeof *master), *wide = malloc(n * sizeof *wide);
        uint16_t *copy = malloc(n * sizeof *copy);
        char *work = malloc(wb), *big = malloc(2 * wb);
        void *stash = calloc(1, sb), *stash2 = calloc(1, sb);
        float *out = calloc(1, ab), *out2 = calloc(1, ab), *din = calloc(1, ab),
              *din2 = calloc(1, ab), *dout = malloc(ab);
        float *g = calloc(n, sizeof *g), *g2 = calloc(n, sizeof *g2);
        int32_t tokens[3 * 4];
        load_windows(&bf, "pack my box with five dozen", 27, 1, 4, tokens);
        for (size_t i = 0; i < ab / sizeof(uint16_t); i++) { /* bf16 activations */
            float v = 0.01f * (float)(i % 11) - 0.05f;
            pp_f32_to_bf16(&v, (uint16_t *)dout + i, 1);
        }
        pp_stage_init(&bf, S, s, 9, master);
        pp_stage_compute_copy(&bf, S, s, master, copy);
        pp_bf16_to_f32(copy, wide, n);
        const void *in = s == 0 ? (const void *)tokens : (const void *)dout;
        const float *dy = s < S - 1 ? dout : NULL;
        float *dx = s > 0 ? din : NULL, *dx2 = s > 0 ? din2 : NULL;

        memset(work, 0xff, wb);
        double l = pp_stage_forward(&bf, S, s, copy, in, tokens, stash, work, out);
        ck_assert_int_eq(memcmp(work + wide_at, wide, n * sizeof *wide), 0);
        pp_stage_backward_input(&bf, S, s, copy, stash, work, dy, dx, 0.5f);
        pp_stage_backward_weight(&bf, S, s, g, stash, work);
        ck_assert_int_eq(memcmp(work + wide_at, wide, n * sizeof *wide), 0);

        memset(big, 0xff, 2 * wb);
        double l2 = pp_stage_forward(&bf, S, s, copy, in, tokens, stash2, big, out2);
        pp_stage_backward(&bf, S, s, copy, g2, stash2, big, dy, dx2, 0.5f);
        ck_assert(l == l2);
        ck_assert_int_eq(memcmp(out, out2, ab), 0);
        ck_assert_int_eq(memcmp(din, din2, ab), 0);
        ck_assert_int_eq(memcmp(g, g2, n * sizeof *g), 0);
        void *owned[] = {master, wide, copy, work, big,  stash, stash2,
                         out,    out2, din,  din2, dout, g,     g2};
        for (size_t i = 0; i < sizeof owned / sizeof *owned; i++)
            free(owned[i]);
    }
}
END_TEST

/* ppvm --warmup: step t < warmup takes lr * t / warmup, then lr; the
 * optimizers take that rate (SGD's step is exactly lr_t * g). */
START_TEST(test_lr_warmup)
{
    pp_optim o = pp_optim_defaults(PP_OPT_SGD);
    o.lr = 0.5f;
    ck_assert_float_eq(pp_optim_lr(&o, 1), 0.5f); /* no warmup */
    o.warmup = 4;
    ck_assert_float_eq(pp_optim_lr(&o, 1), 0.125f);
    ck_assert_float_eq(pp_optim_lr(&o, 3), 0.375f);
    ck_assert_float_eq(pp_optim_lr(&o, 4), 0.5f);
    ck_assert_float_eq(pp_optim_lr(&o, 100), 0.5f);
    float p[2] = {1.0f, 2.0f}, g[2] = {1.0f, -2.0f};
    pp_optimizer_step(PP_OPT_SGD, &o, p, g, NULL, 2, 2);
    ck_assert_float_eq(p[0], 1.0f - 0.25f);
    ck_assert_float_eq(p[1], 2.0f + 0.5f);
    ck_assert_float_eq(g[0], 0.0f);
}
END_TEST

/* The whole pipeline in bf16 stays close to fp32 from the same weights: the
 * loss within 1%, every stage's gradients within 2% (relative 2-norm; 0.3
 * to 0.5% seen). bf16 keeps 8 significant bits, so per-value errors of
 * ~0.4% are expected. */
START_TEST(test_bf16_near_fp32)
{
    pp_model bf = tiny;
    bf.precision = PP_PREC_BF16;
    int32_t tokens[3 * 4];
    pipeline b16, f32;
    pipe_init(&b16, &bf, TINY_S, 13);
    pipe_init(&f32, &tiny, TINY_S, 13);
    load_windows(&tiny, train_text, sizeof train_text - 1, 5, 7, tokens);
    double l16 = pipe_forward(&b16, tokens), l32 = pipe_forward(&f32, tokens);
    pipe_backward(&b16, 0.5f);
    pipe_backward(&f32, 0.5f);
    ck_assert_msg(fabs(l16 - l32) <= 0.01 * fabs(l32), "loss bf16 %g, fp32 %g", l16, l32);
    ck_assert_msg(l16 != l32, "bf16 loss equals fp32's bit for bit");
    for (int s = 0; s < TINY_S; s++) {
        double r = pipe_rel_diff(b16.g[s], f32.g[s], b16.n[s]);
        if (getenv("PP_TEST_VERBOSE"))
            fprintf(stderr, "bf16 stage %d grads: rel %.3g\n", s, r);
        ck_assert_msg(r < 0.02, "stage %d gradients differ by %g (relative)", s, r);
    }
    pipe_free(&b16);
    pipe_free(&f32);
}
END_TEST

Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_init_deterministic);
    tcase_add_test(tc, test_gradient_check);
    tcase_add_test(tc, test_gradient_check_single_stage);
    tcase_add_test(tc, test_gradient_check_no_blocks);
    tcase_add_test(tc, test_backward_repeatable);
    tcase_add_test(tc, test_workspace_is_scratch);
    tcase_add_test(tc, test_bf16_widens_into_workspace);
    tcase_add_test(tc, test_split_backward_matches_fused);
    tcase_add_test(tc, test_training_reduces_loss);
    tcase_add_test(tc, test_training_reduces_loss_bf16);
    tcase_add_test(tc, test_bf16_compute_copy);
    tcase_add_test(tc, test_bf16_block_matches_hand_written);
    tcase_add_test(tc, test_bf16_near_fp32);
    tcase_add_test(tc, test_lr_warmup);
    suite_add_tcase(s, tc);
    return s;
}
