/* finite.h - the non-finite check's plain C (vm/core.c runs it on the cpu
 * backend): the first number of an array that is not finite.
 * pp_cu_first_nonfinite (finite_cuda.h) is its CUDA twin, tested against
 * it in tests/unit/test_cuda_kernels.c. */
#ifndef PP_FINITE_H
#define PP_FINITE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* The index of the first of x[0..n) that is not finite, or -1 (also for a
 * NULL x: nothing to check). */
static inline long long pp_first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; x && i < n; i++)
        if (!isfinite(x[i]))
            return (long long)i;
    return -1;
}

/* The same over n bf16 numbers (the upper 16 bits of a float): what a bf16
 * run moves between stages. */
static inline long long pp_first_nonfinite_bf16(const uint16_t *x, size_t n)
{
    for (size_t i = 0; x && i < n; i++)
        if ((x[i] & 0x7f80u) == 0x7f80u) /* exponent all ones: inf or NaN */
            return (long long)i;
    return -1;
}

/* x[i] widened to a float (exact). */
static inline float pp_bf16_value(uint16_t x)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.u = (uint32_t)x << 16;
    return v.f;
}

#endif
