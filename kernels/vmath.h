/* vmath.h - the CPU kernels' 8-lane vectors (GCC vector extensions) and the
 * vectorised exp and tanh that replace per-element libm calls in their hot
 * loops (cpu_kernels.c; the error bounds are in kernels/README.md and
 * checked by the kernels suite's vmath_* tests).
 *
 * Why 8 lanes of plain C vector arithmetic: the code is the same on every
 * machine (the compiler maps an 8-lane float vector to two SSE2 registers
 * on a baseline x86-64, to one AVX register in the AVX2 and AVX-512
 * clones, to NEON pairs elsewhere), and every lane computes with the same
 * IEEE operations in the same order (-std=c11 means -ffp-contract=off, so
 * no clone fuses a multiply-add), so a kernel gives the same bits whichever
 * clone runs it. Reductions keep 8 partial sums, combined in one fixed
 * order. Loads and stores go through memcpy: no alignment is assumed. */
#ifndef PP_VMATH_H
#define PP_VMATH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The helpers below are always inlined, so how a vector would be passed
 * to a real call (the ABI GCC warns about without AVX) never matters. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float pp_v8f __attribute__((vector_size(32)));
typedef int32_t pp_v8i __attribute__((vector_size(32)));
typedef uint32_t pp_v8u __attribute__((vector_size(32)));

/* The hot kernels get an x86-64-v4 (AVX-512) and an AVX2 clone beside the
 * baseline one on x86-64 with GCC, picked at load time by the CPU's
 * features; elsewhere, one version. The v4 clone still works on 8 lanes,
 * but with 32 vector registers and mask blends GELU and its backward spill
 * less and run about 1.25x faster than in the AVX2 clone. The kernels
 * suite's clones_give_the_same_bits compares each build's outputs. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(PP_NO_CLONES)
#define PP_HOT __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define PP_HOT
#endif

static inline __attribute__((always_inline)) pp_v8f v8_load(const float *p)
{
    pp_v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) void v8_store(float *p, pp_v8f v)
{
    memcpy(p, &v, sizeof v);
}

/* The first n (< 8) elements, the rest `fill`: a loop's tail computes with
 * the same arithmetic as its body, so an element's value never depends on
 * where it sits in the array. */
static inline __attribute__((always_inline)) pp_v8f v8_load_part(const float *p, size_t n,
                                                                 float fill)
{
    pp_v8f v = {fill, fill, fill, fill, fill, fill, fill, fill};
    for (size_t i = 0; i < n; i++)
        v[i] = p[i]; /* a loop: no memcpy call */
    return v;
}

static inline __attribute__((always_inline)) void v8_store_part(float *p, pp_v8f v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v[i];
}

static inline __attribute__((always_inline)) pp_v8f v8_set(float x)
{
    return (pp_v8f){x, x, x, x, x, x, x, x};
}

/* m ? a : b lane by lane, m a comparison's result (all ones or zero). */
static inline __attribute__((always_inline)) pp_v8f v8_sel(pp_v8i m, pp_v8f a, pp_v8f b)
{
    return (pp_v8f)((m & (pp_v8i)a) | (~m & (pp_v8i)b));
}

/* Written so a NaN lane stays NaN: the comparison is false for NaN. */
static inline __attribute__((always_inline)) pp_v8f v8_min(pp_v8f a, float hi)
{
    return v8_sel(a > hi, v8_set(hi), a);
}
static inline __attribute__((always_inline)) pp_v8f v8_max(pp_v8f a, float lo)
{
    return v8_sel(a < lo, v8_set(lo), a);
}

static inline __attribute__((always_inline)) pp_v8f v8_abs(pp_v8f a)
{
    return (pp_v8f)((pp_v8i)a & 0x7fffffff);
}

/* The largest lane (NaN-free input), the same whatever the order. */
static inline __attribute__((always_inline)) float v8_hmax(pp_v8f v)
{
    float m = v[0];
    for (int i = 1; i < 8; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* The lanes' sum in double, lane 0 first. */
static inline __attribute__((always_inline)) double v8_hsum_d(pp_v8f v)
{
    double s = 0.0;
    for (int i = 0; i < 8; i++)
        s += (double)v[i];
    return s;
}

/* 8 partial sums in double, as two 4-lane halves: a 64-byte vector would
 * be wider than any register short of AVX-512, and GCC spills such a
 * vector to the stack at every step. Lane i of the 8 is lo[i] or hi[i-4]. */
typedef double pp_v4d __attribute__((vector_size(32)));
typedef float pp_v4f __attribute__((vector_size(16)));
typedef struct {
    pp_v4d lo, hi;
} pp_d8;

static inline __attribute__((always_inline)) pp_v4d v8_lo_d(pp_v8f v)
{
    return __builtin_convertvector(((pp_v4f){v[0], v[1], v[2], v[3]}), pp_v4d);
}
static inline __attribute__((always_inline)) pp_v4d v8_hi_d(pp_v8f v)
{
    return __builtin_convertvector(((pp_v4f){v[4], v[5], v[6], v[7]}), pp_v4d);
}

/* a += (double)v, lane by lane */
static inline __attribute__((always_inline)) pp_d8 d8_add(pp_d8 a, pp_v8f v)
{
    a.lo += v8_lo_d(v);
    a.hi += v8_hi_d(v);
    return a;
}

/* a += (double)x * (double)y, lane by lane */
static inline __attribute__((always_inline)) pp_d8 d8_add_mul(pp_d8 a, pp_v8f x, pp_v8f y)
{
    a.lo += v8_lo_d(x) * v8_lo_d(y);
    a.hi += v8_hi_d(x) * v8_hi_d(y);
    return a;
}

/* a += ((double)x - mu)^2, lane by lane */
static inline __attribute__((always_inline)) pp_d8 d8_add_sqdev(pp_d8 a, pp_v8f x, double mu)
{
    pp_v4d l = v8_lo_d(x) - mu, h = v8_hi_d(x) - mu;
    a.lo += l * l;
    a.hi += h * h;
    return a;
}

/* the 8 partial sums added in lane order */
static inline __attribute__((always_inline)) double d8_sum(pp_d8 a)
{
    double s = 0.0;
    for (int i = 0; i < 4; i++)
        s += a.lo[i];
    for (int i = 0; i < 4; i++)
        s += a.hi[i];
    return s;
}

/* exp(x), Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts,
 * so r is exact), exp(r) a degree-7 polynomial, times 2^n built in the
 * exponent bits. Domain: x <= 88 (clamped there: exp(88) = 1.65e38; the
 * callers pass x <= 20); for x < -87.33, where exp(x) < 1.2e-38 is at most
 * subnormal, 0. NaN stays NaN. Measured error: kernels/README.md. */
static inline __attribute__((always_inline)) pp_v8f v8_exp(pp_v8f x)
{
    pp_v8i under = x < -87.33654f;
    x = v8_max(v8_min(x, 88.0f), -87.33654f);
    /* n = round(x log2 e): adding and removing 1.5 * 2^23 rounds to the
     * nearest integer in the default rounding mode (|x log2 e| < 2^22). */
    pp_v8f n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    pp_v8f r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    pp_v8f z = r * r;
    pp_v8f y = 1.9875691500e-4f * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    pp_v8i e = (__builtin_convertvector(n, pp_v8i) + 127) << 23; /* 2^n, n in [-126, 127] */
    y = y * (pp_v8f)e;
    return (pp_v8f)(~under & (pp_v8i)y);
}

/* tanh(x), Cephes' tanhf: for |x| < 0.625 the odd polynomial
 * x + x^3 P(x^2); above, 1 - 2 / (exp(2|x|) + 1) with the sign of x, |x|
 * clamped to 10 (where tanh is 1 in float). Defined for every float (inf
 * gives +-1); NaN stays NaN. */
static inline __attribute__((always_inline)) pp_v8f v8_tanh(pp_v8f x)
{
    pp_v8f ax = v8_abs(x);
    pp_v8f z = x * x;
    pp_v8f p = -5.70498872745e-3f * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    pp_v8f small = p * z * x + x;
    pp_v8f e = v8_exp(v8_min(ax, 10.0f) * 2.0f);
    pp_v8f large = 1.0f - 2.0f / (e + 1.0f);
    large = (pp_v8f)((pp_v8i)large | ((pp_v8i)x & INT32_MIN)); /* sign of x */
    return v8_sel(ax < 0.625f, small, large);
}

#endif
