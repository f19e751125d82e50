/* numfmt.h - numbers to text without printf, for the large outputs.
 *
 * report.json, trace.json and timeline.svg of a million-job schedule hold
 * millions of numbers; printf's format parsing and its general
 * floating-point conversion were most of ppc's time writing them (issue
 * 18). These produce exactly the text of the printf conversion each names,
 * so the files stay byte for byte what they were: the integer ones always,
 * pp_fmt_g by formatting directly the doubles whose decimal expansion is
 * short and exact (whole numbers, halves, quarters, ... the simulator's
 * times under unit costs) and by calling snprintf for the others. */
#ifndef PP_NUMFMT_H
#define PP_NUMFMT_H

#include <stddef.h>
#include <stdint.h>

/* Room a buffer needs for any of these (with the terminating NUL). */
#define PP_NUMFMT_MAX 48

/* "%" PRIu64 and "%lld"; NUL-terminated; return the length. */
size_t pp_fmt_u64(char *buf, uint64_t v);
size_t pp_fmt_i64(char *buf, long long v);

/* snprintf(buf, PP_NUMFMT_MAX, "%.*g", prec, x) for prec in [1, 17];
 * returns the length. */
size_t pp_fmt_g(char *buf, double x, int prec);

/* The fast path of pp_fmt_g alone: the text when x (finite, not -0) is a
 * multiple of 2^-16 below 2^53 whose exact decimal expansion has at most
 * prec significant digits and %g would write without an exponent; else
 * returns 0 and leaves buf alone. */
size_t pp_fmt_exact(char *buf, double x, int prec);

/* snprintf(buf, PP_NUMFMT_MAX, "%.2f", x), cut to PP_NUMFMT_MAX - 1
 * characters as that snprintf cuts (|x| above about 1e44; timeline.c's px
 * always wrote a coordinate through a buffer of this size); x * 100 is exact in a long double
 * of 64 or more mantissa bits (x86's, aarch64's), and rounded as printf
 * rounds the exact value (half to even); snprintf where long double is
 * narrower or |x| >= 1e15. */
size_t pp_fmt_fixed2(char *buf, double x);

#endif
