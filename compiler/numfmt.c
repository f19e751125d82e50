/* numfmt.c - numbers to text without printf (see numfmt.h). */
#include "numfmt.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

size_t pp_fmt_u64(char *buf, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t k = 0; k < n; k++)
        buf[k] = tmp[n - 1 - k];
    buf[n] = '\0';
    return n;
}

size_t pp_fmt_i64(char *buf, long long v)
{
    if (v >= 0)
        return pp_fmt_u64(buf, (uint64_t)v);
    buf[0] = '-';
    return 1 + pp_fmt_u64(buf + 1, 0u - (uint64_t)v);
}

/* Fractions are exact in k <= FRAC_BITS binary places: their k decimal
 * places are F * 5^k for F < 2^k, which fits 64 bits (2^16 * 5^16 < 2^64). */
#define FRAC_BITS 16

size_t pp_fmt_exact(char *buf, double x, int prec)
{
    if (!isfinite(x) || (x == 0 && signbit(x)))
        return 0;
    double a = fabs(x);
    if (a >= 9007199254740992.0) /* 2^53: not every integer above is a double */
        return 0;
    double ip = floor(a), fr = a - ip; /* both exact below 2^53 */
    int k = 0;
    while (k < FRAC_BITS && fr != floor(fr)) {
        fr *= 2; /* exact */
        k++;
    }
    if (fr != floor(fr))
        return 0;
    uint64_t I = (uint64_t)ip, D = (uint64_t)fr;
    for (int i = 0; i < k; i++)
        D *= 5;
    /* the k decimal places of the fraction, trailing zeros dropped (%g) */
    char frac[FRAC_BITS];
    int nf = k;
    for (int i = k - 1; i >= 0; i--) {
        frac[i] = (char)('0' + D % 10);
        D /= 10;
    }
    while (nf > 0 && frac[nf - 1] == '0')
        nf--;
    char ibuf[24];
    size_t ni = pp_fmt_u64(ibuf, I);
    /* significant digits, and the decimal exponent %g decides the style by */
    int sig, exp10;
    if (I > 0) {
        sig = (int)ni + nf;
        exp10 = (int)ni - 1;
    } else if (nf == 0) { /* zero: "0" */
        sig = 1;
        exp10 = 0;
    } else {
        int lead = 0;
        while (lead < nf && frac[lead] == '0')
            lead++;
        sig = nf - lead;
        exp10 = -(lead + 1);
    }
    if (sig > prec || exp10 < -4 || exp10 >= prec)
        return 0;
    char *p = buf;
    if (x < 0)
        *p++ = '-';
    memcpy(p, ibuf, ni);
    p += ni;
    if (nf > 0) {
        *p++ = '.';
        memcpy(p, frac, (size_t)nf);
        p += nf;
    }
    *p = '\0';
    return (size_t)(p - buf);
}

size_t pp_fmt_g(char *buf, double x, int prec)
{
    size_t n = pp_fmt_exact(buf, x, prec);
    if (n)
        return n;
    int k = snprintf(buf, PP_NUMFMT_MAX, "%.*g", prec, x);
    return k <= 0 ? 0 : k < PP_NUMFMT_MAX ? (size_t)k : PP_NUMFMT_MAX - 1;
}

size_t pp_fmt_fixed2(char *buf, double x)
{
#if LDBL_MANT_DIG >= 64
    if (isfinite(x) && fabs(x) < 1e15) {
        /* 53 bits times 100 (7 bits) fits 64: r is exactly 100x */
        long double r = fabsl((long double)x * 100.0L), i = floorl(r), f = r - i;
        uint64_t n = (uint64_t)i;
        if (f > 0.5L || (f == 0.5L && (n & 1)))
            n++;
        char *p = buf;
        if (signbit(x))
            *p++ = '-';
        p += pp_fmt_u64(p, n / 100);
        *p++ = '.';
        *p++ = (char)('0' + n / 10 % 10);
        *p++ = (char)('0' + n % 10);
        *p = '\0';
        return (size_t)(p - buf);
    }
#endif
    int k = snprintf(buf, PP_NUMFMT_MAX, "%.2f", x);
    return k <= 0 ? 0 : k < PP_NUMFMT_MAX ? (size_t)k : PP_NUMFMT_MAX - 1; /* cut, as snprintf */
}
