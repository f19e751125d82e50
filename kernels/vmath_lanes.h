/* vmath_lanes.h - vmath.h's lane-wise helpers, exp, tanh and GELU, written
 * once for any vector width. vmath.h includes it twice: for 8 lanes (v8_*,
 * what every kernel uses) and for 16 (v16_*, GELU's loops in the AVX-512
 * clone, where one register holds 16 floats). Each lane does the same IEEE
 * operations whatever the width, so both give the same bits.
 *
 * A template, so no include guard: the includer defines PP_VF (the float
 * vector type), PP_VI (the int32 one, as wide) and PP_V(name) (the
 * functions' names); this file undefines them at its end. */

static inline __attribute__((always_inline)) PP_VF PP_V(load)(const float *p)
{
    PP_VF v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) void PP_V(store)(float *p, PP_VF v)
{
    memcpy(p, &v, sizeof v);
}

/* The first n (< 8) elements, the rest `fill`: a loop's tail computes with
 * the same arithmetic as its body, so an element's value never depends on
 * where it sits in the array. */
static inline __attribute__((always_inline)) PP_VF PP_V(load_part)(const float *p, size_t n,
                                                                   float fill)
{
    PP_VF v = (PP_VF){0} + fill;
    for (size_t i = 0; i < n; i++)
        v[i] = p[i]; /* a loop: no memcpy call */
    return v;
}

static inline __attribute__((always_inline)) void PP_V(store_part)(float *p, PP_VF v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v[i];
}

static inline __attribute__((always_inline)) PP_VF PP_V(set)(float x) { return (PP_VF){0} + x; }

/* m ? a : b lane by lane, m a comparison's result (all ones or zero). */
static inline __attribute__((always_inline)) PP_VF PP_V(sel)(PP_VI m, PP_VF a, PP_VF b)
{
    return (PP_VF)((m & (PP_VI)a) | (~m & (PP_VI)b));
}

/* Written so a NaN lane stays NaN: the comparison is false for NaN. */
static inline __attribute__((always_inline)) PP_VF PP_V(min)(PP_VF a, float hi)
{
    return PP_V(sel)(a > hi, PP_V(set)(hi), a);
}
static inline __attribute__((always_inline)) PP_VF PP_V(max)(PP_VF a, float lo)
{
    return PP_V(sel)(a < lo, PP_V(set)(lo), a);
}

static inline __attribute__((always_inline)) PP_VF PP_V(abs)(PP_VF a)
{
    return (PP_VF)((PP_VI)a & 0x7fffffff);
}

/* exp(x), Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts,
 * so r is exact), exp(r) a degree-7 polynomial, times 2^n built in the
 * exponent bits. Domain: x <= 88 (clamped there: exp(88) = 1.65e38; the
 * callers pass x <= 20); for x < -87.33, where exp(x) < 1.2e-38 is at most
 * subnormal, 0. NaN stays NaN. Measured error: kernels/README.md. */
static inline __attribute__((always_inline)) PP_VF PP_V(exp)(PP_VF x)
{
    PP_VI under = x < -87.33654f;
    x = PP_V(max)(PP_V(min)(x, 88.0f), -87.33654f);
    /* n = round(x log2 e): adding and removing 1.5 * 2^23 rounds to the
     * nearest integer in the default rounding mode (|x log2 e| < 2^22). */
    PP_VF n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    PP_VF r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    PP_VF z = r * r;
    PP_VF y = 1.9875691500e-4f * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    PP_VI e = (__builtin_convertvector(n, PP_VI) + 127) << 23; /* 2^n, n in [-126, 127] */
    y = y * (PP_VF)e;
    return (PP_VF)(~under & (PP_VI)y);
}

/* tanh(x), Cephes' tanhf: for |x| < 0.625 the odd polynomial
 * x + x^3 P(x^2); above, 1 - 2 / (exp(2|x|) + 1) with the sign of x, |x|
 * clamped to 10 (where tanh is 1 in float). Defined for every float (inf
 * gives +-1); NaN stays NaN. */
static inline __attribute__((always_inline)) PP_VF PP_V(tanh)(PP_VF x)
{
    PP_VF ax = PP_V(abs)(x);
    PP_VF z = x * x;
    PP_VF p = -5.70498872745e-3f * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    PP_VF small = p * z * x + x;
    PP_VF e = PP_V(exp)(PP_V(min)(ax, 10.0f) * 2.0f);
    PP_VF large = 1.0f - 2.0f / (e + 1.0f);
    large = (PP_VF)((PP_VI)large | ((PP_VI)x & INT32_MIN)); /* sign of x */
    return PP_V(sel)(ax < 0.625f, small, large);
}

/* GELU, tanh approximation (vmath.h's PP_GELU_K, PP_GELU_C):
 *   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi)      */
static inline __attribute__((always_inline)) PP_VF PP_V(gelu)(PP_VF v)
{
    PP_VF t = PP_V(tanh)(PP_GELU_K * (v + PP_GELU_C * v * v * v));
    return 0.5f * v * (1.0f + t);
}

/* d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2). Written with 1 - t^2
 * rather than llm.c's 1/cosh^2 so large |x| cannot overflow cosh; the
 * second term's x is clamped to [-10, 10] (where 1 - t^2 is already 0) so
 * x^2 cannot overflow into 0 * inf. */
static inline __attribute__((always_inline)) PP_VF PP_V(gelu_grad)(PP_VF v)
{
    PP_VF t = PP_V(tanh)(PP_GELU_K * (v + PP_GELU_C * v * v * v));
    PP_VF vc = PP_V(max)(PP_V(min)(v, 10.0f), -10.0f);
    PP_VF sech2 = 1.0f - t * t;
    PP_VF dinner = PP_GELU_K * (1.0f + 3.0f * PP_GELU_C * vc * vc); /* d(tanh arg)/dx */
    return 0.5f * (1.0f + t) + 0.5f * vc * sech2 * dinner;
}

#undef PP_VF
#undef PP_VI
#undef PP_V
