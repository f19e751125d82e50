/* model_bench.c - how fast the CPU model computes, beside the machine's
 * OpenBLAS SGEMM at the same shapes (part of `make bench`).
 *
 * For the demo models (schedules/gpipe.pp's mlp and schedules/1f1b-gpt.pp's
 * GPT) this times every stage's forward and fused backward on one core
 * (OPENBLAS_NUM_THREADS=1, as ppvm runs one rank per core), and prints per
 * stage the time of F and B, the GFLOP/s they achieve (pp_stage_flops: the
 * GEMMs, attention's included) and the GFLOP/s of cblas_sgemm alone on
 * that stage's weight GEMMs (the forward's shapes, each timed on its own),
 * with the ratio of the two: how close the model's F + B come to the BLAS
 * it calls, all measured in this one run. Not a test. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../compiler/compile.h"
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

/* Seconds per call of fn, over enough calls to fill ~0.2 s. */
#define TIME_IT(secs, body)                                                                     \
    do {                                                                                        \
        int reps_ = 1;                                                                          \
        for (;;) {                                                                              \
            double t0_ = now();                                                                 \
            for (int r_ = 0; r_ < reps_; r_++) {                                                \
                body;                                                                           \
            }                                                                                   \
            double dt_ = now() - t0_;                                                           \
            if (dt_ > 0.2 || reps_ > 1 << 20) {                                                 \
                secs = dt_ / reps_;                                                             \
                break;                                                                          \
            }                                                                                   \
            reps_ *= 2;                                                                         \
        }                                                                                       \
    } while (0)

static double sgemm_seconds(const gemm_shape *g)
{
    float *A = calloc((size_t)g->M * g->K, 4), *W = calloc((size_t)g->N * g->K, 4),
          *C = calloc((size_t)g->M * g->N, 4);
    for (size_t i = 0; i < (size_t)g->M * g->K; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)g->N * g->K; i++) W[i] = (float)(i % 5) * 0.1f;
    double t;
    TIME_IT(t, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->M, g->N, g->K, 1.0f, A,
                           g->K, W, g->K, 0.0f, C, g->N));
    free(A);
    free(W);
    free(C);
    return t;
}

static int bench(const char *root, const char *file)
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
    const pp_model *m = &c.sch.model;
    int S = (int)c.sch.S;
    printf("%s: %s model, batch %u, context %u, embed %u", file, pp_model_kind_name(m->kind),
           m->batch, m->context, m->embed);
    if (m->kind == PP_MODEL_GPT)
        printf(", heads %u, ffn %u, vocab %u", m->heads, m->ffn, m->vocab);
    else
        printf(", ffn %u", m->ffn);
    printf("\n%-6s %7s %10s %10s %12s %14s %8s\n", "stage", "layers", "F ms", "B ms",
           "F+B GFLOP/s", "SGEMM GFLOP/s", "ratio");
    double tot_flops = 0, tot_time = 0;
    for (int s = 0; s < S; s++) {
        size_t np = pp_stage_param_count(m, S, s);
        float *params = calloc(np ? np : 1, 4), *grads = calloc(np ? np : 1, 4);
        void *stash = calloc(1, pp_stage_stash_bytes(m, S, s));
        void *work = calloc(1, pp_stage_workspace_bytes(m, S, s));
        size_t act = pp_act_bytes(m);
        float *in = calloc(1, act), *out = calloc(1, act), *dout = calloc(1, act),
              *din = calloc(1, act);
        int32_t *tokens = calloc(1, pp_tokens_bytes(m));
        for (size_t i = 0; i < pp_tokens_bytes(m) / 4; i++)
            tokens[i] = (int32_t)(i * 31 % pp_model_vocab(m));
        for (size_t i = 0; i < act / 4; i++)
            in[i] = dout[i] = (float)(i % 13) * 0.01f;
        pp_stage_init(m, S, s, 1, params);
        const void *x = s == 0 ? (const void *)tokens : (const void *)in;
        double tf, tb;
        TIME_IT(tf, pp_stage_forward(m, S, s, params, x, tokens, stash, work, out));
        TIME_IT(tb, pp_stage_backward(m, S, s, params, grads, stash, work,
                                      s == S - 1 ? NULL : dout, din, 1e-3f));
        double flops = pp_stage_flops(m, S, s, 0) + pp_stage_flops(m, S, s, 1);
        gemm_shape g[8];
        int ng = weight_gemms(m, S, s, g);
        double gf = 0, gt = 0;
        for (int i = 0; i < ng; i++) {
            gf += 2.0 * g[i].M * g[i].N * g[i].K * g[i].count;
            gt += sgemm_seconds(&g[i]) * g[i].count;
        }
        double rate = flops / (tf + tb) / 1e9, blas = gt > 0 ? gf / gt / 1e9 : 0;
        printf("%-6d %7u %10.3f %10.3f %12.2f %14.2f %8.2f\n", s, pp_model_layers(m, s),
               tf * 1e3, tb * 1e3, rate, blas, blas > 0 ? rate / blas : 0);
        tot_flops += flops;
        tot_time += tf + tb;
        free(params), free(grads), free(stash), free(work), free(in), free(out), free(dout),
            free(din), free(tokens);
    }
    printf("all stages: %.2f GFLOP/s over F + B; one microbatch of %u samples through every "
           "stage on one core: %.3f ms (%.0f samples/s)\n\n",
           tot_flops / tot_time / 1e9, m->batch, tot_time * 1e3, m->batch / tot_time);
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

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--flops"))
        return print_flops(argv[2]);
    const char *root = argc > 1 ? argv[1] : ".";
    printf("The CPU model on one core beside OpenBLAS SGEMM at its weight GEMMs' shapes\n"
           "(ratio = the model's F + B GFLOP/s / SGEMM's)\n\n");
    int rc = bench(root, "gpipe.pp") | bench(root, "1f1b-gpt.pp");
    return rc ? 1 : 0;
}
