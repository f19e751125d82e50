/* model_bench.c - how fast the CPU model computes, beside the machine's
 * OpenBLAS SGEMM at the same shapes (part of `make bench`).
 *
 * For the demo models (schedules/gpipe.pp's mlp and schedules/1f1b-gpt.pp's
 * GPT), at each batch asked for (--batch, default 16 and 256 samples per
 * microbatch; the schedules' other sizes as written), on one core
 * (OPENBLAS_NUM_THREADS=1, as ppvm runs one rank per core), it prints:
 *  - per stage the time of F and of the fused B, the GFLOP/s they achieve
 *    (pp_stage_flops: the GEMMs, attention's included) and the GFLOP/s of
 *    cblas_sgemm alone on that stage's weight GEMMs (the forward's shapes),
 *    with the ratio of the two;
 *  - where one F + B of every stage spends its time, kernel by kernel
 *    (kernels/kprof.h's timers; "other" is what no kernel claims: the
 *    models' copies and glue), and the optimizer's step (SGD and AdamW)
 *    over every stage's parameters;
 *  - every GEMM shape that F + B called (transposes, M N K, the leading
 *    dimensions, how many calls), the GFLOP/s it achieved inside the step
 *    beside cblas_sgemm's alone on the same arguments (warm buffers);
 *  - a summary line per model and batch, which `make bench` keeps.
 * All measured in this one run. Not a test. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../compiler/compile.h"
#include "../../kernels/kprof.h"
#include "../../kernels/model.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The weight GEMMs of one forward of stage s: C[M][N] = A[M][K] W[N][K]^T. */
typedef struct {
    int M, N, K, count;
} gemm_shape;

static int weight_gemms(const pp_model *m, int S, int s, gemm_shape *g)
{
    int n = 0, L = (int)pp_model_layers(m, s), last = s == S - 1;
    if (m->kind == PP_MODEL_GPT) {
        int M = (int)(m->batch * m->context), C = (int)m->embed, F = (int)m->ffn;
        if (L) {
            g[n++] = (gemm_shape){M, 3 * C, C, L};
            g[n++] = (gemm_shape){M, C, C, L};
            g[n++] = (gemm_shape){M, F, C, L};
            g[n++] = (gemm_shape){M, C, F, L};
        }
        if (last)
            g[n++] = (gemm_shape){M, (int)m->vocab, C, 1};
    } else {
        int M = (int)m->batch, D = (int)pp_model_width(m), F = (int)m->ffn;
        if (L) {
            g[n++] = (gemm_shape){M, F, D, L};
            g[n++] = (gemm_shape){M, D, F, L};
        }
        if (last)
            g[n++] = (gemm_shape){M, PP_VOCAB, D, 1};
    }
    return n;
}

/* Seconds per call of body: the best of 3 trials, each over enough calls
 * to fill ~0.1 s (the best, because other processes only ever add time). */
#define TIME_IT(secs, body)                                                                        \
    do {                                                                                           \
        secs = 1e30;                                                                               \
        for (int trial_ = 0; trial_ < 3; trial_++) {                                               \
            int reps_ = 1;                                                                         \
            for (;;) {                                                                             \
                double t0_ = now();                                                                \
                for (int r_ = 0; r_ < reps_; r_++) {                                               \
                    body;                                                                          \
                }                                                                                  \
                double dt_ = now() - t0_;                                                          \
                if (dt_ > 0.1 || reps_ > 1 << 20) {                                                \
                    if (dt_ / reps_ < secs)                                                        \
                        secs = dt_ / reps_;                                                        \
                    break;                                                                         \
                }                                                                                  \
                reps_ *= 2;                                                                        \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static double sgemm_seconds(const gemm_shape *g)
{
    float *A = calloc((size_t)g->M * g->K, 4), *W = calloc((size_t)g->N * g->K, 4),
          *C = calloc((size_t)g->M * g->N, 4);
    for (size_t i = 0; i < (size_t)g->M * g->K; i++)
        A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)g->N * g->K; i++)
        W[i] = (float)(i % 5) * 0.1f;
    double t;
    TIME_IT(t, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->M, g->N, g->K, 1.0f, A, g->K,
                           W, g->K, 0.0f, C, g->N));
    free(A);
    free(W);
    free(C);
    return t;
}

/* cblas_sgemm alone on a recorded shape's exact arguments (operands
 * allocated to their leading dimensions), seconds per call. */
static double sgemm_seconds_ld(const pp_kprof_gemm *g)
{
    size_t ra = g->ta ? (size_t)g->K : (size_t)g->M, rb = g->tb ? (size_t)g->N : (size_t)g->K;
    size_t na = ra * (size_t)g->lda, nb = rb * (size_t)g->ldb, nc = (size_t)g->M * g->ldc;
    float *A = malloc(na * 4), *Bm = malloc(nb * 4), *C = malloc(nc * 4);
    for (size_t i = 0; i < na; i++)
        A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < nb; i++)
        Bm[i] = (float)(i % 5) * 0.1f;
    for (size_t i = 0; i < nc; i++)
        C[i] = 0.0f;
    double t;
    TIME_IT(t, cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                           g->tb ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, 1.0f, A, g->lda, Bm,
                           g->ldb, g->beta0 ? 0.0f : 1.0f, C, g->ldc));
    free(A);
    free(Bm);
    free(C);
    return t;
}

static int by_time(const void *a, const void *b)
{
    double x = ((const pp_kprof_gemm *)a)->sec, y = ((const pp_kprof_gemm *)b)->sec;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* One stage's buffers, inputs and initial parameters. */
typedef struct {
    size_t np;
    float *params, *grads, *state, *in, *out, *dout, *din;
    void *stash, *work;
    int32_t *tokens;
} stage_bufs;

static void stage_alloc(const pp_model *m, int S, int s, stage_bufs *b)
{
    b->np = pp_stage_param_count(m, S, s);
    size_t np = b->np ? b->np : 1, act = pp_act_bytes(m);
    b->params = calloc(np, 4), b->grads = calloc(np, 4), b->state = calloc(2 * np, 4);
    b->stash = calloc(1, pp_stage_stash_bytes(m, S, s));
    b->work = calloc(1, pp_stage_workspace_bytes(m, S, s));
    b->in = calloc(1, act), b->out = calloc(1, act), b->dout = calloc(1, act);
    b->din = calloc(1, act);
    b->tokens = calloc(1, pp_tokens_bytes(m));
    for (size_t i = 0; i < pp_tokens_bytes(m) / 4; i++)
        b->tokens[i] = (int32_t)(i * 31 % pp_model_vocab(m));
    for (size_t i = 0; i < act / 4; i++)
        b->in[i] = b->dout[i] = (float)(i % 13) * 0.01f;
    pp_stage_init(m, S, s, 1, b->params);
}

static void stage_free(stage_bufs *b)
{
    free(b->params), free(b->grads), free(b->state), free(b->stash), free(b->work);
    free(b->in), free(b->out), free(b->dout), free(b->din), free(b->tokens);
}

static void stage_fb(const pp_model *m, int S, int s, stage_bufs *b)
{
    const void *x = s == 0 ? (const void *)b->tokens : (const void *)b->in;
    pp_stage_forward(m, S, s, b->params, x, b->tokens, b->stash, b->work, b->out);
    pp_stage_backward(m, S, s, b->params, b->grads, b->stash, b->work, s == S - 1 ? NULL : b->dout,
                      b->din, 1e-3f);
}

/* Where one F + B of every stage spends its time, and the GEMMs' rates. */
static void kernel_tables(const pp_model *m, int S, stage_bufs *bufs, double *gemm_share,
                          double *gemm_rate, double *gemm_blas)
{
    /* PASSES profiled passes, each slot's and shape's least time kept (other
     * processes only add time), with at least 3 passes and about 1 s. */
    enum { PASSES_MAX = 20 };
    pp_kprof_slot fb[PP_K_COUNT];
    pp_kprof_gemm gemms[PP_KPROF_SHAPES];
    int ng = 0;
    double other_gemm = 0.0, total = 1e30, spent = 0.0;
    for (int s = 0; s < S; s++)
        stage_fb(m, S, s, &bufs[s]); /* warm */
    for (int pass = 0; pass < PASSES_MAX && (pass < 3 || spent < 1.0); pass++) {
        pp_kprof_reset();
        pp_kprof_on = 1;
        double t0 = now();
        for (int s = 0; s < S; s++)
            stage_fb(m, S, s, &bufs[s]);
        double t = now() - t0;
        pp_kprof_on = 0;
        spent += t;
        if (t < total)
            total = t;
        if (pass == 0) {
            memcpy(fb, pp_kprof, sizeof fb);
            memcpy(gemms, pp_kprof_gemms, sizeof gemms);
            ng = pp_kprof_ngemms;
            other_gemm = pp_kprof_gemm_other;
            continue;
        }
        for (int k = 0; k < PP_K_COUNT; k++)
            if (pp_kprof[k].sec < fb[k].sec)
                fb[k].sec = pp_kprof[k].sec;
        for (int i = 0; i < ng && i < pp_kprof_ngemms; i++) /* the same calls, in order */
            if (pp_kprof_gemms[i].sec < gemms[i].sec)
                gemms[i].sec = pp_kprof_gemms[i].sec;
        if (pp_kprof_gemm_other < other_gemm)
            other_gemm = pp_kprof_gemm_other;
    }

    /* the optimizers over every stage's parameters (zero gradients) */
    double t_sgd = 0.0, t_adamw = 0.0;
    size_t nparams = 0;
    pp_optim sgd = pp_optim_defaults(PP_OPT_SGD), adamw = pp_optim_defaults(PP_OPT_ADAMW);
    for (int s = 0; s < S; s++) {
        stage_bufs *b = &bufs[s];
        double t;
        nparams += b->np;
        TIME_IT(t, pp_optimizer_step(PP_OPT_SGD, &sgd, b->params, b->grads, b->state, b->np, 1));
        t_sgd += t;
        TIME_IT(t,
                pp_optimizer_step(PP_OPT_ADAMW, &adamw, b->params, b->grads, b->state, b->np, 1));
        t_adamw += t;
    }

    printf("\nwhere one F + B of every stage spends its time (%.3f ms, kprof timers on; each "
           "the least of several passes):\n",
           total * 1e3);
    printf("  %-20s %10s %7s %8s\n", "kernel", "ms", "%", "calls");
    double claimed = 0.0;
    for (int k = 0; k < PP_K_COUNT; k++) {
        claimed += fb[k].sec;
        if (!fb[k].calls)
            continue;
        printf("  %-20s %10.3f %6.1f%% %8ld\n", pp_kprof_names[k], fb[k].sec * 1e3,
               100.0 * fb[k].sec / total, fb[k].calls);
    }
    double other = total > claimed ? total - claimed : 0.0;
    printf("  %-20s %10.3f %6.1f%%\n", "other (copies, glue)", other * 1e3, 100.0 * other / total);
    printf("  optimizer step over all %zu parameters: SGD %.3f ms, AdamW %.3f ms\n", nparams,
           t_sgd * 1e3, t_adamw * 1e3);

    qsort(gemms, (size_t)ng, sizeof gemms[0], by_time);
    printf("\nGEMMs inside F + B (row-major; lda ldb ldc as passed; by time):\n");
    printf("  %-2s %-2s %6s %6s %6s %6s %6s %6s %5s %9s %11s %11s %6s\n", "tA", "tB", "M", "N", "K",
           "lda", "ldb", "ldc", "calls", "ms", "step GF/s", "SGEMM GF/s", "ratio");
    double gf_all = 0.0, gt_all = 0.0, bt_all = 0.0;
    for (int i = 0; i < ng; i++) {
        const pp_kprof_gemm *g = &gemms[i];
        double fl = 2.0 * g->M * g->N * g->K * (double)g->calls;
        double alone = sgemm_seconds_ld(g) * (double)g->calls;
        gf_all += fl, gt_all += g->sec, bt_all += alone;
        if (i < 16)
            printf("  %-2s %-2s %6d %6d %6d %6d %6d %6d %5ld %9.3f %11.2f %11.2f %6.2f\n",
                   g->ta ? "T" : "N", g->tb ? "T" : "N", g->M, g->N, g->K, g->lda, g->ldb, g->ldc,
                   g->calls, g->sec * 1e3, fl / g->sec / 1e9, fl / alone / 1e9, alone / g->sec);
    }
    if (ng > 16)
        printf("  ... %d more shapes (in the total below)\n", ng - 16);
    if (other_gemm > 0)
        printf("  shapes past the table's %d: %.3f ms (not in the total)\n", PP_KPROF_SHAPES,
               other_gemm * 1e3);
    printf("  all: %.3f ms in the step at %.2f GFLOP/s; SGEMM alone at the same calls %.3f ms "
           "at %.2f GFLOP/s (ratio %.2f)\n",
           gt_all * 1e3, gf_all / gt_all / 1e9, bt_all * 1e3, gf_all / bt_all / 1e9,
           bt_all / gt_all);
    *gemm_share = fb[PP_K_GEMM].sec / total;
    *gemm_rate = gf_all / gt_all / 1e9;
    *gemm_blas = gf_all / bt_all / 1e9;
}

typedef struct {
    char what[160];
} summary_line;

static summary_line summary[16];
static int nsummary;

static int bench(const char *root, const char *file, unsigned batch)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", root, file);
    pp_compile_opts o = pp_compile_defaults();
    o.path = path;
    o.stop_after = PP_STAGE_JOBS;
    pp_compiled c;
    if (pp_compile(&o, &c) != PP_COMPILE_OK) {
        pp_compiled_free(&c);
        return -1;
    }
    if (batch)
        c.sch.model.batch = batch;
    const pp_model *m = &c.sch.model;
    int S = (int)c.sch.S;
    printf("%s: %s model, batch %u, context %u, embed %u", file, pp_model_kind_name(m->kind),
           m->batch, m->context, m->embed);
    if (m->kind == PP_MODEL_GPT)
        printf(", heads %u, ffn %u, vocab %u", m->heads, m->ffn, m->vocab);
    else
        printf(", ffn %u", m->ffn);
    printf("\n%-6s %7s %10s %10s %12s %14s %8s\n", "stage", "layers", "F ms", "B ms", "F+B GFLOP/s",
           "SGEMM GFLOP/s", "ratio");
    double tot_flops = 0, tot_time = 0;
    stage_bufs *bufs = calloc((size_t)S, sizeof *bufs);
    for (int s = 0; s < S; s++) {
        stage_bufs *b = &bufs[s];
        stage_alloc(m, S, s, b);
        const void *x = s == 0 ? (const void *)b->tokens : (const void *)b->in;
        double tf, tb;
        TIME_IT(tf, pp_stage_forward(m, S, s, b->params, x, b->tokens, b->stash, b->work, b->out));
        TIME_IT(tb, pp_stage_backward(m, S, s, b->params, b->grads, b->stash, b->work,
                                      s == S - 1 ? NULL : b->dout, b->din, 1e-3f));
        double flops = pp_stage_flops(m, S, s, 0) + pp_stage_flops(m, S, s, 1);
        gemm_shape g[8];
        int ng = weight_gemms(m, S, s, g);
        double gf = 0, gt = 0;
        for (int i = 0; i < ng; i++) {
            gf += 2.0 * g[i].M * g[i].N * g[i].K * g[i].count;
            gt += sgemm_seconds(&g[i]) * g[i].count;
        }
        double rate = flops / (tf + tb) / 1e9, blas = gt > 0 ? gf / gt / 1e9 : 0;
        printf("%-6d %7u %10.3f %10.3f %12.2f %14.2f %8.2f\n", s, pp_model_layers(m, s), tf * 1e3,
               tb * 1e3, rate, blas, blas > 0 ? rate / blas : 0);
        tot_flops += flops;
        tot_time += tf + tb;
    }
    printf("all stages: %.2f GFLOP/s over F + B; one microbatch of %u samples through every "
           "stage on one core: %.3f ms (%.0f samples/s)\n",
           tot_flops / tot_time / 1e9, m->batch, tot_time * 1e3, m->batch / tot_time);
    double share, grate, gblas;
    kernel_tables(m, S, bufs, &share, &grate, &gblas);
    printf("\n");
    if (nsummary < (int)(sizeof summary / sizeof summary[0]))
        snprintf(summary[nsummary++].what, sizeof summary[0].what,
                 "%-4s %6u %11.3f %10.0f %9.2f %7.0f%% %10.2f %11.2f", pp_model_kind_name(m->kind),
                 m->batch, tot_time * 1e3, m->batch / tot_time, tot_flops / tot_time / 1e9,
                 100.0 * share, grate, gblas);
    for (int s = 0; s < S; s++)
        stage_free(&bufs[s]);
    free(bufs);
    pp_compiled_free(&c);
    return 0;
}

/* --flops SCHEDULE: one microbatch's F + B FLOPs over every stage, for
 * demo_bench.sh's GFLOP/s of a real run. */
static int print_flops(const char *path)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = path;
    o.stop_after = PP_STAGE_JOBS;
    pp_compiled c;
    int ok = pp_compile(&o, &c) == PP_COMPILE_OK;
    double f = 0;
    for (int s = 0; ok && s < (int)c.sch.S; s++)
        f += pp_stage_flops(&c.sch.model, (int)c.sch.S, s, 0) +
             pp_stage_flops(&c.sch.model, (int)c.sch.S, s, 1);
    if (ok)
        printf("%.0f\n", f);
    pp_compiled_free(&c);
    return ok ? 0 : 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: model_bench [ROOT] [--batch N[,N...]] | model_bench --flops SCHEDULE\n"
                    "  --batch: samples per microbatch, each 1..65536 (default 16,256)\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--flops"))
        return print_flops(argv[2]);
    const char *root = ".";
    unsigned batches[8] = {16, 256};
    int nb = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            nb = 0;
            for (char *p = argv[++i], *end; *p; p = end + (*end == ',')) {
                long v = strtol(p, &end, 10);
                if (end == p || v < 1 || v > 65536 || (*end && *end != ',') || nb == 8) {
                    fprintf(stderr,
                            "model_bench: --batch '%s': expected up to 8 numbers "
                            "1..65536 separated by commas\n",
                            argv[i]);
                    return 2;
                }
                batches[nb++] = (unsigned)v;
            }
            if (nb == 0 || argv[i][strlen(argv[i]) - 1] == ',') {
                fprintf(stderr,
                        "model_bench: --batch '%s': expected up to 8 numbers "
                        "1..65536 separated by commas\n",
                        argv[i]);
                return 2;
            }
        } else if (argv[i][0] == '-') {
            return usage();
        } else {
            root = argv[i];
        }
    }
    printf("The CPU model on one core beside OpenBLAS SGEMM at its GEMMs' shapes\n"
           "(ratio = the model's F + B GFLOP/s / SGEMM's)\n\n");
    int rc = 0;
    for (int i = 0; i < nb; i++)
        rc |= bench(root, "gpipe.pp", batches[i]);
    for (int i = 0; i < nb; i++)
        rc |= bench(root, "1f1b-gpt.pp", batches[i]);
    printf("summary: one microbatch's F + B through every stage on one core\n"
           "%-4s %6s %11s %10s %9s %8s %10s %11s\n",
           "model", "batch", "F+B ms", "samples/s", "GFLOP/s", "GEMM %", "GEMM GF/s", "SGEMM GF/s");
    for (int i = 0; i < nsummary; i++)
        printf("%s\n", summary[i].what);
    return rc ? 1 : 0;
}
