/* test_numfmt.c - the numfmt suite: ppc's hand-made number formatting
 * (compiler/numfmt.c) and the listing's hand-made instruction lines
 * (isa/disasm.c) write exactly what the printf conversions they replaced
 * wrote (issue 18: the outputs of a million-job compile are formatted
 * without printf, byte for byte as before).
 *
 * Each test compares with the C library on many values: edge cases first,
 * then a fixed-seed stream of random ones of the kinds ppc writes (whole
 * numbers, binary fractions, decimals, any bit pattern). */
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/numfmt.h"
#include "../../isa/plan.h"
#include "listing_oracle.h"
#include "suites.h"

static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A double of the kinds ppc's outputs hold, chosen by the stream. */
static double some_double(void)
{
    uint64_t r = rng();
    double x;
    switch (r % 8) {
    case 0: { /* any bit pattern */
        uint64_t bits = rng();
        memcpy(&x, &bits, sizeof x);
        return x;
    }
    case 1: /* a whole number, up to and past 2^53 */
        return (double)(rng() >> (r >> 8) % 64);
    case 2: /* a binary fraction: n / 2^k */
        return ldexp((double)(rng() >> (11 + (r >> 8) % 50)), -(int)((r >> 16) % 24));
    case 3: /* a short decimal, as a simulator sums 0.1 + 0.2 */
        return (double)(rng() % 100000) / 1000.0;
    case 4: /* a tie of %.2f, or next to one */
        return (double)(rng() % 100000) / 1000.0 + 0.005 * (double)((r >> 8) % 3);
    case 5: /* tiny and huge magnitudes */
        return ldexp((double)(rng() % 1000), (int)((r >> 8) % 200) - 100);
    case 6: /* a product of a time and a scale, as the pictures compute */
        return (double)(rng() % 20000) * (16000.0 / 16510.0);
    default: /* near the decimal boundaries %g switches styles at */
        return pow(10, (double)((r >> 8) % 40) - 20) * (1 + (double)((r >> 16) % 3 - 1) * 1e-16);
    }
}

static const double EDGES[] = {0.0,
                               -0.0,
                               1.0,
                               -1.0,
                               0.5,
                               0.25,
                               0.125,
                               -0.125,
                               0.375,
                               2.675,
                               1.005,
                               0.005,
                               -0.005,
                               0.0049999,
                               0.015,
                               0.025,
                               1e-4,
                               1e-5,
                               0.0001220703125,
                               1.52587890625e-05,
                               9007199254740991.0,
                               9007199254740992.0,
                               9007199254740993.0,
                               1e15,
                               1e15 - 1,
                               99999999999999.99,
                               1e16,
                               1e17,
                               123456789012345678.0,
                               0.1,
                               0.2,
                               0.30000000000000004,
                               16510,
                               4600000.0000000019,
                               DBL_MAX,
                               DBL_MIN,
                               5e-324,
                               INFINITY,
                               -INFINITY,
                               NAN};

static void expect_g(double x, int prec)
{
    char want[PP_NUMFMT_MAX], got[PP_NUMFMT_MAX];
    snprintf(want, sizeof want, "%.*g", prec, x);
    size_t n = pp_fmt_g(got, x, prec);
    ck_assert_msg(n == strlen(want) && !strcmp(got, want),
                  "pp_fmt_g(%a, %d) wrote '%s', printf '%s'", x, prec, got, want);
}

static void expect_fixed2(double x)
{
    char want[PP_NUMFMT_MAX], got[PP_NUMFMT_MAX];
    snprintf(want, sizeof want, "%.2f", x);
    size_t n = pp_fmt_fixed2(got, x);
    ck_assert_msg(n == strlen(want) && !strcmp(got, want),
                  "pp_fmt_fixed2(%a) wrote '%s', printf '%s'", x, got, want);
}

START_TEST(g_matches_printf)
{
    static const int precs[] = {6, 15, 17};
    for (size_t i = 0; i < sizeof EDGES / sizeof EDGES[0]; i++)
        for (int k = 0; k < 3; k++) {
            expect_g(EDGES[i], precs[k]);
            expect_g(-EDGES[i], precs[k]);
        }
    rng_state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 200000; i++) {
        double x = some_double();
        expect_g(x, precs[i % 3]);
    }
}
END_TEST

START_TEST(fixed2_matches_printf)
{
    for (size_t i = 0; i < sizeof EDGES / sizeof EDGES[0]; i++) {
        expect_fixed2(EDGES[i]);
        expect_fixed2(-EDGES[i]);
    }
    /* every exact tie k/8 in [0, 1000): half to even, as printf */
    for (int k = 0; k < 8000; k++)
        expect_fixed2(k / 8.0);
    rng_state = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < 200000; i++)
        expect_fixed2(some_double());
}
END_TEST

/* The fast path alone: what it takes, and what it leaves to snprintf. */
START_TEST(exact_takes_only_short_exact_decimals)
{
    char b[PP_NUMFMT_MAX];
    ck_assert_uint_eq(pp_fmt_exact(b, 16510, 17), 5);
    ck_assert_str_eq(b, "16510");
    ck_assert_uint_eq(pp_fmt_exact(b, -1234.0625, 17), 10);
    ck_assert_str_eq(b, "-1234.0625");
    ck_assert_uint_eq(pp_fmt_exact(b, 0.0001220703125, 17), 15);
    ck_assert_str_eq(b, "0.0001220703125");
    ck_assert_uint_eq(pp_fmt_exact(b, 0, 17), 1);
    ck_assert_str_eq(b, "0");
    strcpy(b, "untouched");
    static const double refused[] = {0.1,
                                     -0.0,
                                     INFINITY,
                                     NAN,
                                     9007199254740992.0,
                                     1.52587890625e-05 /* %g writes 1.52...e-05 */,
                                     1e15 /* %.15g writes 1e+15 */,
                                     0.5 / 65536 / 2};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        ck_assert_msg(pp_fmt_exact(b, refused[i], 15) == 0, "took %a", refused[i]);
    ck_assert_str_eq(b, "untouched");
    /* seventeen digits fit 17, not 15 */
    ck_assert_uint_eq(pp_fmt_exact(b, 1234567890123.0625, 15), 0);
    ck_assert_uint_gt(pp_fmt_exact(b, 1234567890123.0625, 17), 0);
    ck_assert_str_eq(b, "1234567890123.0625");
}
END_TEST

START_TEST(integers_match_printf)
{
    static const long long v[] = {0,
                                  1,
                                  -1,
                                  9,
                                  10,
                                  -10,
                                  99,
                                  100,
                                  2147483647,
                                  -2147483648LL,
                                  LLONG_MAX,
                                  LLONG_MIN,
                                  1000000000000LL};
    char want[PP_NUMFMT_MAX], got[PP_NUMFMT_MAX];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        snprintf(want, sizeof want, "%lld", v[i]);
        ck_assert_uint_eq(pp_fmt_i64(got, v[i]), strlen(want));
        ck_assert_str_eq(got, want);
        snprintf(want, sizeof want, "%llu", (unsigned long long)v[i]);
        ck_assert_uint_eq(pp_fmt_u64(got, (uint64_t)v[i]), strlen(want));
        ck_assert_str_eq(got, want);
    }
}
END_TEST

/* An operand value: the ones lowering writes, and the extremes a broken
 * plan may hold. */
static int32_t some_operand(void)
{
    static const int32_t pick[] = {-1,   0,     1,       2,         7,         63, 99,  100,
                                   1000, 65535, 1000000, INT32_MAX, INT32_MIN, -2, -100};
    uint64_t r = rng();
    return r % 4 == 0 ? (int32_t)(r >> 32) : pick[(r >> 8) % (sizeof pick / sizeof pick[0])];
}

/* pp_plan_disasm's instruction lines (between the header's dashes and
 * the end line) equal the printf oracle's, for every opcode the oracle
 * knows and unknown ones, with any operands: the comment templates of the
 * opcode table fill in exactly what the oracle's switch wrote. */
START_TEST(listing_matches_printf)
{
    enum { N = 20000 };
    ck_assert_int_lt(PP_OP_COUNT, 253); /* 253..255 stay unknown */
    pp_plan p;
    memset(&p, 0, sizeof p);
    p.rank = 1;
    p.world = 4;
    uint32_t members[4] = {0, 1, 2, 3};
    pp_group groups[2] = {{4, members}, {2, members + 2}};
    p.groups = groups;
    p.ngroups = 2;
    p.code = calloc(N, sizeof *p.code);
    ck_assert_ptr_nonnull(p.code);
    p.ninstr = N;
    rng_state = 0x853c49e6748fea9bull;
    for (uint32_t i = 0; i < N; i++) {
        pp_instr *in = &p.code[i];
        /* the oracle's opcodes, and three that are no opcode (253..255) */
        uint32_t op = (uint32_t)(rng() % (REF_OPS + 3));
        in->op = (uint8_t)(op < REF_OPS ? op : 253 + (op - REF_OPS));
        in->stage = some_operand();
        in->mb = some_operand();
        in->peer = some_operand();
        in->group = rng() % 3 ? (int32_t)(rng() % 3) : some_operand();
        for (int k = 0; k < PP_MAX_SLOTS; k++)
            in->slot[k] = some_operand();
    }
    char *got = NULL, *want = NULL;
    size_t glen = 0, wlen = 0;
    FILE *g = open_memstream(&got, &glen), *w = open_memstream(&want, &wlen);
    ck_assert(g && w);
    pp_plan_disasm(&p, g);
    for (uint32_t i = 0; i < N; i++)
        ref_print_instr(&p, i, w);
    fclose(g);
    fclose(w);
    const char *body = strstr(got, "\n----  ");
    ck_assert_ptr_nonnull(body);
    body = strchr(body + 1, '\n') + 1;
    ck_assert_msg(strlen(body) > wlen && !memcmp(body, want, wlen),
                  "the listing's lines differ from printf's");
    ck_assert_str_eq(body + wlen, "; end of plan (20000 instructions)\n");
    free(got);
    free(want);
    free(p.code);
}
END_TEST

Suite *numfmt_suite(void)
{
    Suite *s = suite_create("numfmt");
    TCase *tc = tcase_create("numbers");
    tcase_add_test(tc, g_matches_printf);
    tcase_add_test(tc, fixed2_matches_printf);
    tcase_add_test(tc, exact_takes_only_short_exact_decimals);
    tcase_add_test(tc, integers_match_printf);
    suite_add_tcase(s, tc);
    tc = tcase_create("listing");
    tcase_add_test(tc, listing_matches_printf);
    suite_add_tcase(s, tc);
    return s;
}
