/* vmath.h - the CPU kernels' 8-lane vectors (GCC vector extensions) and the
 * vectorised exp, tanh and GELU that replace per-element libm calls in
 * their hot loops (cpu_kernels.c; written once for any width in
 * vmath_lanes.h; the error bounds are in kernels/README.md and checked by
 * the kernels suite's vmath_* tests).
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
/* A loop on 16 lanes, compiled for AVX-512 alone: the kernel calls it
 * where pp_wide() says the CPU has it, and finishes the tail on 8 lanes.
 * Elsewhere pp_wide() is 0 and the compiler drops the call. */
#define PP_WIDE __attribute__((target("arch=x86-64-v4")))
static inline int pp_wide(void) { return __builtin_cpu_supports("x86-64-v4"); }
#else
#define PP_HOT
#define PP_WIDE
static inline int pp_wide(void) { return 0; }
#endif

/* GELU's constants (the tanh approximation's k = sqrt(2/pi) and c) */
#define PP_GELU_K 0.7978845608028654f
#define PP_GELU_C 0.044715f

/* load, store, the tails' partial load and store, set, select, min, max,
 * abs, exp, tanh, GELU and its derivative, on 8 lanes: v8_load ... */
#define PP_VF pp_v8f
#define PP_VI pp_v8i
#define PP_V(name) v8_##name
#include "vmath_lanes.h"

/* ... and on 16 (v16_load ...), for loops compiled for AVX-512 alone
 * (PP_WIDE): elsewhere a 16-lane vector is four or two registers and GCC
 * spills it, three times slower than 8 lanes. */
typedef float pp_v16f __attribute__((vector_size(64)));
typedef int32_t pp_v16i __attribute__((vector_size(64)));
#define PP_VF pp_v16f
#define PP_VI pp_v16i
#define PP_V(name) v16_##name
#include "vmath_lanes.h"

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

#endif
