/* kernel_bits.c - one line per hot CPU kernel: its name and a digest of
 * every output it wrote, on fixed inputs.
 *
 * The CPU kernels marked PP_HOT (kernels/vmath.h) are compiled once per
 * instruction set (GCC's target_clones) and the loader picks one by the
 * CPU's features, so the same plan could run different machine code on two
 * hosts. kernels/README.md promises they give the same bits. The Makefile
 * links this program four ways: with the clones (whichever this CPU gets),
 * and with the kernels built for one instruction set alone (-DPP_NO_CLONES:
 * baseline x86-64, x86-64-v3 (AVX2), x86-64-v4 (AVX-512)); the kernels
 * suite's clones_give_the_same_bits runs every build this CPU can and
 * compares their lines.
 *
 * The inputs are awkward on purpose: lengths that leave a vector tail,
 * values from tiny to huge, and NaN and infinities in the elementwise
 * kernels (each NaN is digested as one canonical NaN: which NaN an
 * operation returns is not part of the promise). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "model.h"

#define N 1013 /* elementwise length: 126 vectors of 8 and a tail of 5 */
#define ROWS 7
#define COLS 77 /* rows of 9 vectors and a tail of 5 */

static uint64_t lcg = 88172645463325252ull;

static float rnd(float lo, float hi)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((lcg >> 40) & 0xffffff) / 16777216.0f;
}

static float *vec(size_t n, float lo, float hi)
{
    float *v = malloc(n * sizeof *v);
    if (!v) {
        fprintf(stderr, "kernel_bits: out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++)
        v[i] = rnd(lo, hi);
    return v;
}

/* x with its first elements replaced by the values no kernel should treat
 * differently on another instruction set */
static float *awkward(size_t n, float lo, float hi)
{
    static const float special[] = {0.0f,      -0.0f,  1e-40f, -1e-40f, 1e-20f,  -30.0f,   30.0f,
                                    88.5f,     -88.5f, 1e30f,  -1e30f,  3.4e38f, -3.4e38f, INFINITY,
                                    -INFINITY, NAN,    0.625f, -0.625f, 10.0f,   -10.0f};
    float *v = vec(n, lo, hi);
    memcpy(v, special, sizeof special);
    return v;
}

/* FNV-1a over the floats' bits, NaN counted as one value */
static void digest(const char *name, const float *a, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        float f = isnan(a[i]) ? NAN : a[i];
        memcpy(&u, &f, sizeof u);
        for (int k = 0; k < 4; k++) {
            h ^= (u >> (8 * k)) & 0xff;
            h *= 1099511628211ull;
        }
    }
    printf("%-26s %016llx\n", name, (unsigned long long)h);
}

static void elementwise(void)
{
    float *x = awkward(N, -12.0f, 12.0f), *dy = vec(N, -2.0f, 2.0f);
    float *y = vec(N, 0, 0);
    pp_gelu_forward(x, y, N);
    digest("gelu_forward", y, N);
    pp_gelu_backward(x, dy, y, N);
    digest("gelu_backward", y, N);
    pp_round_bf16(x, y, N);
    digest("round_bf16", y, N);
    memcpy(y, dy, N * sizeof *y);
    pp_add(y, x, N);
    digest("add", y, N);
    free(x), free(dy), free(y);
}

static void rowwise(void)
{
    size_t n = (size_t)ROWS * COLS;
    float *x = awkward(n, -12.0f, 12.0f), *h = vec(n, -6.0f, 6.0f), *a = vec(n, 0, 0);
    float *bias = vec(COLS, -1.0f, 1.0f), *db = vec(COLS, 0, 0);
    pp_bias_gelu_forward(h, bias, a, ROWS, COLS);
    digest("bias_gelu_forward h", h, n);
    digest("bias_gelu_forward a", a, n);
    pp_bias_add(x, bias, ROWS, COLS);
    digest("bias_add", x, n);
    pp_residual_bias_add(a, h, bias, ROWS, COLS);
    digest("residual_bias_add", a, n);
    pp_bias_grad(h, ROWS, COLS, db);
    digest("bias_grad", db, COLS);
    free(x), free(h), free(a), free(bias), free(db);
}

static void layernorm(void)
{
    size_t n = (size_t)ROWS * COLS;
    float *x = vec(n, -3.0f, 5.0f), *dy = vec(n, -1.0f, 1.0f), *y = vec(n, 0, 0);
    float *gamma = vec(COLS, 0.5f, 1.5f), *beta = vec(COLS, -0.5f, 0.5f);
    float *mean = vec(ROWS, 0, 0), *rstd = vec(ROWS, 0, 0), *dx = vec(n, 0, 0);
    float *dg = vec(COLS, 0, 0), *dbeta = vec(COLS, 0, 0);
    pp_layernorm_forward(x, gamma, beta, ROWS, COLS, y, mean, rstd);
    digest("layernorm_forward y", y, n);
    digest("layernorm_forward mean", mean, ROWS);
    digest("layernorm_forward rstd", rstd, ROWS);
    pp_layernorm_backward(x, gamma, mean, rstd, dy, ROWS, COLS, dx, dg, dbeta);
    digest("layernorm_backward dx", dx, n);
    digest("layernorm_backward dg", dg, COLS);
    digest("layernorm_backward db", dbeta, COLS);
    free(x), free(dy), free(y), free(gamma), free(beta), free(mean), free(rstd), free(dx);
    free(dg), free(dbeta);
}

static void softmax_xent(void)
{
    size_t n = (size_t)ROWS * COLS;
    float *logits = vec(n, -20.0f, 20.0f), *probs = vec(n, 0, 0), *d = vec(n, 0, 0);
    float *loss = vec(ROWS, 0, 0);
    int32_t targets[ROWS * 2];
    for (int r = 0; r < ROWS * 2; r++)
        targets[r] = (r * 31) % COLS;
    double sum = pp_softmax_xent_forward(logits, targets, 2, ROWS, COLS, probs);
    float fsum = (float)sum;
    digest("softmax_xent_forward", probs, n);
    digest("softmax_xent_forward sum", &fsum, 1);
    pp_softmax_xent_backward(probs, targets, 2, ROWS, COLS, 0.25f, d);
    digest("softmax_xent_backward", d, n);
    pp_softmax_xent_fused(logits, targets, 2, ROWS, COLS, 0.25f, d, loss);
    digest("softmax_xent_fused d", d, n);
    digest("softmax_xent_fused loss", loss, ROWS);
    free(logits), free(probs), free(d), free(loss);
}

static void optimizers(void)
{
    float *p = vec(N, -1.0f, 1.0f), *g = vec(N, -0.1f, 0.1f);
    float *m = vec(N, -0.01f, 0.01f), *v = vec(N, 0.0f, 1e-4f);
    pp_adamw_step(p, g, m, v, N, 3, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.01f);
    digest("adamw_step p", p, N);
    digest("adamw_step m", m, N);
    digest("adamw_step v", v, N);
    float *g2 = vec(N, -0.1f, 0.1f);
    pp_sgd_step(p, g2, N, 0.3f);
    digest("sgd_step", p, N);
    free(p), free(g), free(m), free(v), free(g2);
}

/* T = 21 with rows 4 leaves a partial block and rows of every length
 * against the 8-lane softmax; hs = 16. */
static void attention(int bf16)
{
    enum { B = 2, T = 21, C = 32, NH = 2, R = 4 };
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float *qkv = vec(nqkv, -2.0f, 2.0f), *dout = vec(nout, -1.0f, 1.0f);
    float *out = vec(nout, 0, 0), *lse = vec((size_t)B * NH * T, 0, 0);
    float *dqkv = vec(nqkv, 0, 0), *scratch = vec(2 * R * T + R, 0, 0);
    if (bf16) {
        pp_round_bf16(qkv, qkv, nqkv);
        pp_round_bf16(dout, dout, nout);
    }
    pp_attention_forward(qkv, out, lse, B, T, C, NH, R, scratch, bf16);
    digest(bf16 ? "attention_forward bf16" : "attention_forward", out, nout);
    digest(bf16 ? "attention_forward lse bf16" : "attention_forward lse", lse, (size_t)B * NH * T);
    pp_attention_backward(qkv, out, dout, lse, dqkv, B, T, C, NH, R, scratch, bf16);
    digest(bf16 ? "attention_backward bf16" : "attention_backward", dqkv, nqkv);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(scratch);
}

int main(int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        fprintf(stderr, "usage: kernel_bits (no arguments): prints each hot kernel's digest\n");
        return 2;
    }
    elementwise();
    rowwise();
    layernorm();
    softmax_xent();
    optimizers();
    attention(0);
    attention(1);
    return 0;
}
