/* kprof.c - the per-kernel timers (see kprof.h). */
#include "kprof.h"

#include <string.h>
#include <time.h>

int pp_kprof_on;
pp_kprof_slot pp_kprof[PP_K_COUNT];
pp_kprof_gemm pp_kprof_gemms[PP_KPROF_SHAPES];
int pp_kprof_ngemms;
double pp_kprof_gemm_other;

const char *const pp_kprof_names[PP_K_COUNT] = {
    "GEMM",           "GELU",         "GELU bwd",          "layer norm",
    "layer norm bwd", "softmax xent", "attention softmax", "bias/residual",
    "embedding",      "bf16 round",   "optimizer"};

/* The children's time of the levels open now: a level's self time is its
 * elapsed time less what the kernels it called took. */
static double child[16];
static int depth;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pp_kprof_reset(void)
{
    memset(pp_kprof, 0, sizeof pp_kprof);
    memset(pp_kprof_gemms, 0, sizeof pp_kprof_gemms);
    pp_kprof_ngemms = 0;
    pp_kprof_gemm_other = 0.0;
    depth = 0;
}

double pp_kprof_begin(void)
{
    if (depth < (int)(sizeof child / sizeof child[0]))
        child[depth] = 0.0;
    depth++;
    return now();
}

double pp_kprof_end(int k, double t0)
{
    double el = now() - t0;
    depth--;
    double self = el;
    if (depth < (int)(sizeof child / sizeof child[0]))
        self -= child[depth];
    if (depth > 0 && depth - 1 < (int)(sizeof child / sizeof child[0]))
        child[depth - 1] += el;
    pp_kprof[k].sec += self;
    pp_kprof[k].calls++;
    return self;
}

void pp_kprof_gemm_add(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, int beta0,
                       double sec)
{
    for (int i = 0; i < pp_kprof_ngemms; i++) {
        pp_kprof_gemm *g = &pp_kprof_gemms[i];
        if (g->ta == ta && g->tb == tb && g->M == M && g->N == N && g->K == K && g->lda == lda &&
            g->ldb == ldb && g->ldc == ldc && g->beta0 == beta0) {
            g->calls++;
            g->sec += sec;
            return;
        }
    }
    if (pp_kprof_ngemms == PP_KPROF_SHAPES) {
        pp_kprof_gemm_other += sec;
        return;
    }
    pp_kprof_gemms[pp_kprof_ngemms++] =
        (pp_kprof_gemm){ta, tb, M, N, K, lda, ldb, ldc, beta0, 1, sec};
}
