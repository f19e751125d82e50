/* attn_bench.c - the fused attention on a GPU (bin/attn_bench, make
 * attn-bench; tests/bench/gpu_check.sh runs it): at GPT-2 124M's shape by
 * default (B 8, T 1024, C 768, 12 heads), in fp32 and bf16, times the fused
 * kernels (kernels/attention_fused_cuda.h) and the blocked cuBLAS path they
 * replace (kernels/attention_cuda.h), forward and backward, and compares
 * their results (the blocked path passed its suites on an H100). FLOPs as pp
 * counts them (kernels/README.md, "FLOPs": 4 B T^2 C a forward over the full
 * T x T, a backward twice that; the causal kernels do about half).
 * --dump DIR also writes a smaller fp32 case (B 2, T 256, the same C and
 * heads: qkv, dout, and the fused kernels' out, lse and dqkv as raw floats,
 * shapes in DIR/meta.txt) for tests/bench/attn_sdpa_check.py to compare with
 * PyTorch's scaled_dot_product_attention. Without a GPU it prints
 * "skipped: no GPU" and exits 0.
 *
 *     bin/attn_bench [--dump DIR] [B T C NH] */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/gpt_layout.h"
#include "../../kernels/attention_cuda.h"
#include "../../kernels/attention_fused_cuda.h"
#include "../../kernels/cpu_kernels.h"
#include "../../kernels/cuda_check.h"

enum { REPS = 10, WARM = 2 };

typedef struct {
    int B, T, C, NH, bf16;
    size_t nq, no, nl;
    void *qkv, *dout, *out, *bout; /* fp32 or bf16; out fused, bout blocked */
    float *lse, *dqkv, *blse, *bdqkv, *scratch;
    cublasHandle_t blas;
    cudaStream_t st;
} bench;

static void *dev(size_t bytes)
{
    void *p;
    cudaCheck(cudaMalloc(&p, bytes));
    return p;
}

static float *host_rand(size_t n, uint32_t seed)
{
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "attn_bench: out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
    return x;
}

static void setup(bench *b, int B, int T, int C, int NH, int bf16)
{
    b->B = B, b->T = T, b->C = C, b->NH = NH, b->bf16 = bf16;
    b->nq = (size_t)B * T * 3 * C, b->no = (size_t)B * T * C, b->nl = (size_t)B * NH * T;
    float *q = host_rand(b->nq, 1), *d = host_rand(b->no, 2);
    size_t es = bf16 ? 2 : 4;
    b->qkv = dev(b->nq * es), b->dout = dev(b->no * es);
    if (bf16) {
        uint16_t *q16 = malloc(b->nq * 2), *d16 = malloc(b->no * 2);
        pp_f32_to_bf16(q, q16, b->nq);
        pp_f32_to_bf16(d, d16, b->no);
        cudaCheck(cudaMemcpy(b->qkv, q16, b->nq * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(b->dout, d16, b->no * 2, cudaMemcpyHostToDevice));
        free(q16), free(d16);
    } else {
        cudaCheck(cudaMemcpy(b->qkv, q, b->nq * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(b->dout, d, b->no * 4, cudaMemcpyHostToDevice));
    }
    free(q), free(d);
    b->out = dev(b->no * es), b->lse = dev(b->nl * 4), b->dqkv = dev(b->nq * 4);
    b->bout = dev(b->no * es), b->blse = dev(b->nl * 4), b->bdqkv = dev(b->nq * 4);
    b->scratch = dev(gpt_att_scratch_floats(T, T < 64 ? T : 64) * sizeof(float));
    cudaCheck(cudaStreamCreate(&b->st));
    cublasCheck(cublasCreate(&b->blas));
    cublasCheck(cublasSetStream(b->blas, b->st));
}

static void teardown(bench *b)
{
    void *p[] = {b->qkv, b->dout, b->out, b->lse, b->dqkv, b->bout, b->blse, b->bdqkv, b->scratch};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        cudaCheck(cudaFree(p[i]));
    cublasCheck(cublasDestroy(b->blas));
    cudaCheck(cudaStreamDestroy(b->st));
}

/* 0 fused forward, 1 fused backward, 2 blocked forward, 3 blocked backward */
static void run(bench *b, int what)
{
    int rows = b->T < 64 ? b->T : 64;
    switch (what) {
    case 0:
        pp_cu_attention_fused_forward(b->st, b->qkv, b->out, b->lse, b->B, b->T, b->C, b->NH,
                                      b->bf16);
        break;
    case 1:
        pp_cu_attention_fused_backward(b->st, b->qkv, b->out, b->dout, b->lse, b->dqkv, b->B, b->T,
                                       b->C, b->NH, b->bf16);
        break;
    case 2:
        pp_cu_attention_forward(b->blas, b->st, b->qkv, b->bout, b->blse, b->B, b->T, b->C, b->NH,
                                rows, b->scratch, b->bf16);
        break;
    default:
        pp_cu_attention_backward(b->blas, b->st, b->qkv, b->bout, b->dout, b->blse, b->bdqkv, b->B,
                                 b->T, b->C, b->NH, rows, b->scratch, b->bf16);
    }
}

static double time_ms(bench *b, int what)
{
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    for (int i = 0; i < WARM; i++)
        run(b, what);
    cudaCheck(cudaEventRecord(e0, b->st));
    for (int i = 0; i < REPS; i++)
        run(b, what);
    cudaCheck(cudaEventRecord(e1, b->st));
    cudaCheck(cudaEventSynchronize(e1));
    float ms;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    return ms / REPS;
}

/* n device floats, or with bf16 bf16 values widened, into host memory */
static float *host_floats(const void *d, size_t n, int bf16)
{
    float *h = malloc(n * 4);
    if (bf16) {
        uint16_t *h16 = malloc(n * 2);
        cudaCheck(cudaMemcpy(h16, d, n * 2, cudaMemcpyDeviceToHost));
        pp_bf16_to_f32(h16, h, n);
        free(h16);
    } else {
        cudaCheck(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    }
    return h;
}

/* max |a - b| / max |b| over n device floats (bf16 values with bf16) */
static double rel_diff(const void *da, const void *db, size_t n, int bf16)
{
    float *a = host_floats(da, n, bf16), *b = host_floats(db, n, bf16);
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
        if (isnan(a[i]) != isnan(b[i]))
            d = INFINITY;
    }
    free(a), free(b);
    return m > 0 ? d / m : d;
}

static int dump(const char *dir, const char *name, const void *d, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    float *h = malloc(n * 4);
    cudaCheck(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(h, 4, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    free(h);
    if (!ok)
        fprintf(stderr, "attn_bench: cannot write %s\n", path);
    return ok;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int a = 1;
    if (a + 1 < argc && strcmp(argv[a], "--dump") == 0)
        dir = argv[a + 1], a += 2;
    int sh[4] = {8, 1024, 768, 12};
    if (argc - a != 0 && argc - a != 4) {
        fprintf(stderr, "usage: attn_bench [--dump DIR] [B T C NH]\n");
        return 2;
    }
    for (int i = 0; a + i < argc; i++)
        if ((sh[i] = atoi(argv[a + i])) <= 0) {
            fprintf(stderr, "attn_bench: %s: expected a positive integer\n", argv[a + i]);
            return 2;
        }
    if (!pp_attention_fused_ok(sh[2], sh[3])) {
        fprintf(stderr, "attn_bench: C %d, %d heads: not a shape the fused kernels take\n", sh[2],
                sh[3]);
        return 2;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("skipped: no GPU\n");
        return 0;
    }
    double fl = 4.0 * sh[0] * (double)sh[1] * sh[1] * sh[2];
    printf("attention B %d T %d C %d heads %d (hs %d); FLOPs as pp counts them (full T x "
           "T): forward %.1f GFLOP, backward %.1f\n",
           sh[0], sh[1], sh[2], sh[3], sh[2] / sh[3], fl / 1e9, 2 * fl / 1e9);
    printf("%-5s %-22s %9s %9s\n", "prec", "kernels", "ms", "TFLOP/s");
    for (int bf16 = 0; bf16 < 2; bf16++) {
        bench b;
        setup(&b, sh[0], sh[1], sh[2], sh[3], bf16);
        const char *names[] = {"fused forward", "fused backward", "blocked forward",
                               "blocked backward"};
        for (int w = 0; w < 4; w++) {
            double ms = time_ms(&b, w);
            printf("%-5s %-22s %9.3f %9.2f\n", bf16 ? "bf16" : "fp32", names[w], ms,
                   (w % 2 ? 2 : 1) * fl / (ms / 1e3) / 1e12);
        }
        /* the backwards from their own forwards (the last runs above) */
        cudaCheck(cudaStreamSynchronize(b.st));
        printf(
            "%-5s fused vs blocked: out %.2e, lse %.2e, dqkv %.2e (max |diff| / max |blocked|)\n",
            bf16 ? "bf16" : "fp32", rel_diff(b.out, b.bout, b.no, bf16),
            rel_diff(b.lse, b.blse, b.nl, 0), rel_diff(b.dqkv, b.bdqkv, b.nq, 0));
        teardown(&b);
    }
    if (dir) {
        bench b;
        setup(&b, 2, 256, sh[2], sh[3], 0);
        run(&b, 0);
        run(&b, 1);
        cudaCheck(cudaStreamSynchronize(b.st));
        char path[4096];
        snprintf(path, sizeof path, "%s/meta.txt", dir);
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "%d %d %d %d\n", b.B, b.T, b.C, b.NH) < 0 || fclose(f) != 0) {
            fprintf(stderr, "attn_bench: cannot write %s\n", path);
            return 1;
        }
        if (!dump(dir, "qkv.f32", b.qkv, b.nq) || !dump(dir, "dout.f32", b.dout, b.no) ||
            !dump(dir, "out.f32", b.out, b.no) || !dump(dir, "lse.f32", b.lse, b.nl) ||
            !dump(dir, "dqkv.f32", b.dqkv, b.nq))
            return 1;
        teardown(&b);
        printf("wrote B 2 T 256 fp32 inputs and fused results to %s\n", dir);
    }
    return 0;
}
