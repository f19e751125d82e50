/* test_eval.c - evaluation of schedule expressions (compiler/eval.c), through
 * the parser and the checker: precedence and associativity, floor division
 * and its remainder, comparisons, short-circuit && || ?:, min/max/abs, lets,
 * params and -D, the job variables, and the two errors, EVAL_OVERFLOW and
 * EVAL_DIV0, with `where` on the node that failed.
 *
 * Integer semantics checked here (eval.c): 64-bit; `/` rounds toward minus
 * infinity and `%` is the matching remainder, which takes the sign of the
 * divisor: -1 / 2 = -1, -1 % 2 = 1, 7 / -2 = -4, 7 % -2 = -1; so
 * a == (a / b) * b + a % b always holds. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#endif
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/parse.h"
#include "../../compiler/schedule.h"
#include "suites.h"

/* The expression under test is `let x` on line 8, from column 9. */
#define EVAL_HEAD                                                                                  \
    "param S = 4\n"                                                                                \
    "param B = 3\n"                                                                                \
    "param W = 2\n"                                                                                \
    "param P = 10\n"                                                                               \
    "let sb = s * 10 + b\n"                                                                        \
    "let dz = 5 / (d - 1)\n"                                                                       \
    "compute(s,b,d) = 0\n"                                                                         \
    "let x = "

typedef struct {
    pp_eval_status st;
    long long v;
    /* the node `where` pointed at (copied: the tree is freed) */
    int has_where;
    pp_expr_kind where_kind;
    int where_op;
    pp_loc where_loc;
} ev;

static ev eval_env(const char *expr, pp_env env, const pp_define *defs, int ndefs)
{
    size_t n = strlen(EVAL_HEAD) + strlen(expr) + 2;
    char *src = malloc(n);
    snprintf(src, n, "%s%s\n", EVAL_HEAD, expr);
    char *msgs = NULL;
    size_t msglen = 0;
    FILE *out = open_memstream(&msgs, &msglen);
    pp_diag d;
    diag_init(&d, "t.pp", src, strlen(src), out);
    pp_stmt *stmts = pp_parse(&d);
    pp_schedule sch;
    int errors = pp_schedule_check(&sch, &d, stmts, defs, ndefs);
    fflush(out);
    ck_assert_msg(errors == 0, "'%s' does not check:\n%s", expr, msgs);
    const pp_expr *x = NULL;
    for (int i = 0; i < sch.nlets; i++)
        if (!strcmp(sch.lets[i].name, "x"))
            x = sch.lets[i].expr;
    ck_assert_ptr_nonnull(x);

    ev r = {0};
    r.v = -424242;
    const pp_expr *where = NULL;
    r.st = pp_eval(&sch, x, &env, &r.v, &where);
    if (where) {
        r.has_where = 1;
        r.where_kind = where->kind;
        r.where_op = where->op;
        r.where_loc = where->loc;
    }
    pp_schedule_free(&sch);
    ast_free_stmts(stmts);
    fclose(out);
    free(msgs);
    free(src);
    return r;
}

static const pp_env ENV0 = {1, 2, 0, 0}; /* s = 1, b = 2, d = F */

static long long value_env(const char *expr, pp_env env)
{
    ev r = eval_env(expr, env, NULL, 0);
    ck_assert_msg(r.st == EVAL_OK, "'%s' failed with status %d", expr, (int)r.st);
    return r.v;
}

static long long value(const char *expr) { return value_env(expr, ENV0); }

/* Evaluates to v with no error. */
#define ck_val(expr, v)                                                                            \
    ck_assert_msg(value(expr) == (long long)(v), "%s = %lld, expected %lld", expr, value(expr),    \
                  (long long)(v))

/* Fails with status st at the node of kind k (and operator op, if binary or
 * unary) on line 8 at column col. */
static void ck_fails(const char *expr, pp_env env, pp_eval_status st, pp_expr_kind k, int op,
                     int col)
{
    ev r = eval_env(expr, env, NULL, 0);
    ck_assert_msg(r.st == st, "'%s': status %d, expected %d (value %lld)", expr, (int)r.st, (int)st,
                  r.v);
    ck_assert_msg(r.has_where, "'%s': no where", expr);
    ck_assert_msg(r.where_kind == k, "'%s': where is a node of kind %d, expected %d", expr,
                  (int)r.where_kind, (int)k);
    if (k == EX_BINARY || k == EX_UNARY)
        ck_assert_msg(r.where_op == op, "'%s': where is operator %d, expected %d", expr, r.where_op,
                      op);
    ck_assert_msg(r.where_loc.first_line == 8 && r.where_loc.first_column == col,
                  "'%s': where at %d:%d, expected 8:%d", expr, r.where_loc.first_line,
                  r.where_loc.first_column, col);
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_literals_and_precedence)
{
    ck_val("42", 42);
    ck_val("1000000000000", 1000000000000LL);
    ck_val("1 + 2 * 3", 7);
    ck_val("(1 + 2) * 3", 9);
    ck_val("2 * 3 + 1", 7);
    ck_val("10 - 4 / 2", 8);
    ck_val("1 + 7 % 4", 4);
    ck_val("2 * 3 % 4", 2); /* (2 * 3) % 4: same level, left to right */
    ck_val("1 - 2 - 3", -4);
    ck_val("100 / 10 / 5", 2);
    ck_val("1 + 1 == 2", 1);  /* arithmetic binds tighter than == */
    ck_val("1 == 2 < 3", 1);  /* < binds tighter than ==: 1 == (2 < 3) */
    ck_val("3 > 2 > 1", 0);   /* (3 > 2) > 1 */
    ck_val("1 || 0 && 0", 1); /* && binds tighter than || */
    ck_val("0 && 0 || 1", 1);
    ck_val("1 == 1 && 2 != 3", 1);
    ck_val("0 || 1 ? 5 : 6", 5); /* ?: is the loosest */
    ck_val("1 + 1 ? 5 : 6", 5);
}
END_TEST

START_TEST(test_unary)
{
    ck_val("-2 * 3", -6);
    ck_val("-3 % 2", 1);   /* (-3) % 2, not -(3 % 2) */
    ck_val("- 1 / 2", -1); /* (-1) / 2 = -1, not -(1 / 2) = 0 */
    ck_val("2 - -3", 5);
    ck_val("--4", 4);
    ck_val("!0 + 1", 2);
    ck_val("!5", 0);
    ck_val("!!5", 1);
    ck_val("!0 * 7", 7);
    ck_val("-(2 + 3)", -5);
    ck_val("!(1 - 1)", 1);
}
END_TEST

START_TEST(test_conditional)
{
    /* right-associative: a ? b : (c ? d : e) */
    ck_val("1 ? 2 : 0 ? 3 : 4", 2); /* left-associative would give 3 */
    ck_val("0 ? 2 : 0 ? 3 : 4", 4);
    ck_val("0 ? 2 : 1 ? 3 : 4", 3);
    ck_val("1 ? 0 ? 5 : 6 : 7", 6); /* nested in the middle */
    ck_val("s == 1 ? b : 99", 2);
    ck_val("-1 ? 8 : 9", 8); /* any non-zero is true */
}
END_TEST

START_TEST(test_floor_division)
{
    ck_val("7 / 2", 3);
    ck_val("7 % 2", 1);
    ck_val("-7 / 2", -4);
    ck_val("-7 % 2", 1);
    ck_val("(0 - 1) / 2", -1);
    ck_val("-1 / 2", -1);
    ck_val("-1 % 2", 1);
    ck_val("-4 / 2", -2);
    ck_val("-4 % 2", 0);
    /* a negative divisor: the quotient still rounds down, the remainder
     * takes the divisor's sign (7 = -4 * -2 + -1) */
    ck_val("7 / -2", -4);
    ck_val("7 % -2", -1);
    ck_val("-7 / -2", 3);
    ck_val("-7 % -2", -1);
    ck_val("6 % -3", 0);
    ck_val("0 / 5", 0);
    ck_val("0 % -5", 0);
    /* the identity a == (a / b) * b + a % b over a grid */
    for (int a = -9; a <= 9; a++)
        for (int b = -4; b <= 4; b++) {
            if (!b)
                continue;
            char e[96];
            snprintf(e, sizeof e, "(%d) / (%d) * (%d) + (%d) %% (%d)", a, b, b, a, b);
            ck_assert_int_eq(value(e), a);
            snprintf(e, sizeof e, "(%d) %% (%d)", a, b);
            long long r = value(e);
            ck_assert(b > 0 ? (r >= 0 && r < b) : (r <= 0 && r > b));
        }
    /* the wrap-around a schedule author writes: (b - 1) % W at b = 0 */
    pp_env b0 = {0, 0, 0, 0};
    ck_assert_int_eq(value_env("(b - 1) % W", b0), 1);
    ck_assert_int_eq(value_env("(b - 1) / W", b0), -1);
}
END_TEST

START_TEST(test_comparisons)
{
    ck_val("1 < 2", 1);
    ck_val("2 < 2", 0);
    ck_val("2 > 1", 1);
    ck_val("2 > 2", 0);
    ck_val("2 <= 2", 1);
    ck_val("3 <= 2", 0);
    ck_val("2 >= 2", 1);
    ck_val("1 >= 2", 0);
    ck_val("3 == 3", 1);
    ck_val("3 == 4", 0);
    ck_val("3 != 4", 1);
    ck_val("3 != 3", 0);
    ck_val("-5 < 1", 1);
    ck_val("(2 < 3) + (3 < 4) + (5 == 5)", 3); /* always 0 or 1 */
}
END_TEST

START_TEST(test_logic_short_circuit)
{
    ck_val("5 && 7", 1); /* normalised to 0 / 1 */
    ck_val("0 || 9", 1);
    ck_val("0 || 0", 0);
    ck_val("3 && 0", 0);
    /* the right side is not evaluated when the left decides */
    ck_val("0 && 1 / 0", 0);
    ck_val("1 || 1 / 0", 1);
    ck_val("0 && 1000000000000 * 1000000000000", 0);
    ck_val("1 ? 2 : 1 / 0", 2);
    ck_val("0 ? 1 / 0 : 3", 3);
    pp_env s0 = {0, 0, 0, 0};
    ck_assert_int_eq(value_env("s > 0 && 10 / s", s0), 0);
    ck_assert_int_eq(value_env("s == 0 || 10 / s", s0), 1);
    ck_assert_int_eq(value_env("s ? 10 / s : -1", s0), -1);
    /* and is evaluated when it does not */
    ck_fails("1 && 1 / 0", ENV0, EVAL_DIV0, EX_BINARY, '/', 16);
    ck_fails("0 || 1 / 0", ENV0, EVAL_DIV0, EX_BINARY, '/', 16);
    ck_fails("1 ? 1 / 0 : 3", ENV0, EVAL_DIV0, EX_BINARY, '/', 15);
}
END_TEST

START_TEST(test_calls)
{
    ck_val("min(3, -4)", -4);
    ck_val("max(3, -4)", 3);
    ck_val("min(5, 5)", 5);
    ck_val("abs(-5)", 5);
    ck_val("abs(5)", 5);
    ck_val("abs(0)", 0);
    ck_val("max(min(1, 2), abs(-7))", 7);
    ck_val("min(s, b)", 1);
    ck_val("max(s, b) * 10", 20);
    ck_val("abs(s - b) + min(P, 100)", 11);
}
END_TEST

START_TEST(test_variables_lets_params)
{
    pp_env e = {2, 3, 1, 0}; /* s = 2, b = 3, d = B */
    ck_assert_int_eq(value_env("s", e), 2);
    ck_assert_int_eq(value_env("b", e), 3);
    ck_assert_int_eq(value_env("d", e), 1);
    ck_assert_int_eq(value_env("sb", e), 23); /* let sb = s * 10 + b */
    ck_assert_int_eq(value_env("sb + d", e), 24);
    ck_assert_int_eq(value_env("dz", (pp_env){0, 0, 0, 0}), -5); /* let dz = 5 / (d - 1) */
    ck_assert_int_eq(value_env("P * 2 + S + W", e), 26);
    ck_assert_int_eq(value_env("d == B", e), 1); /* opposite d, B is the direction */
    ck_assert_int_eq(value_env("B", e), 3);      /* elsewhere, the param */
    ck_assert_int_eq(value_env("F + W", e), 2);  /* no param F: the direction 0 */

    /* -D changes a param and everything computed from it */
    const pp_define p3 = {"P", 3};
    ev r = eval_env("P * 2 + sb", e, &p3, 1);
    ck_assert_int_eq(r.st, EVAL_OK);
    ck_assert_int_eq(r.v, 29);
}
END_TEST

START_TEST(test_overflow)
{
    /* literals stop at 10^12, so LLONG_MAX + 1 is built by multiplication */
    ck_val("1000000000000 * 1000000 * 9", 9000000000000000000LL);
    ck_fails("1000000000000 * 1000000000000", ENV0, EVAL_OVERFLOW, EX_BINARY, '*', 23);
    ck_fails("1000000 * 1000000 * 1000000 * 10", ENV0, EVAL_OVERFLOW, EX_BINARY, '*', 37);
    ck_fails("1000000000000 * 1000000 * 9 + 1000000000000 * 1000000", ENV0, EVAL_OVERFLOW,
             EX_BINARY, '+', 37);
    ck_fails("-1000000000000 * 1000000 * 9 - 1000000000000 * 1000000", ENV0, EVAL_OVERFLOW,
             EX_BINARY, '-', 38);
    /* (2^31)^2 * 2 is LLONG_MAX + 1 */
    ck_fails("2147483648 * 2147483648 * 2", ENV0, EVAL_OVERFLOW, EX_BINARY, '*', 33);
    ck_fails("2147483648 * 2147483648 + (2147483648 * 2147483648 - 1) + 1", ENV0, EVAL_OVERFLOW,
             EX_BINARY, '+', 65);
    /* LLONG_MIN itself is fine; negating it, |x| and x / -1 are not */
    ck_val("-2147483648 * 2147483648 * 2", LLONG_MIN);
    ck_val("-2147483648 * 2147483648 * 2 / 1", LLONG_MIN);
    ck_val("-2147483648 * 2147483648 * 2 % -1", 0);
    ck_fails("-(-2147483648 * 2147483648 * 2)", ENV0, EVAL_OVERFLOW, EX_UNARY, '-', 9);
    ck_fails("abs(-2147483648 * 2147483648 * 2)", ENV0, EVAL_OVERFLOW, EX_CALL, 0, 9);
    ck_fails("-2147483648 * 2147483648 * 2 / -1", ENV0, EVAL_OVERFLOW, EX_BINARY, '/', 38);
    ck_fails("-2147483648 * 2147483648 * 2 - 1", ENV0, EVAL_OVERFLOW, EX_BINARY, '-', 38);
    /* an overflow depending on the job and a param */
    pp_env big = {0, 1000000, 0, 0};
    ck_assert_int_eq(eval_env("b * b * b * P", big, NULL, 0).st, EVAL_OVERFLOW);
    ck_assert_int_eq(value_env("b * b * b", big), 1000000000000000000LL);
}
END_TEST

START_TEST(test_division_by_zero)
{
    ck_fails("1 + 6 / (s - s)", ENV0, EVAL_DIV0, EX_BINARY, '/', 15);
    ck_fails("7 % (b - b)", ENV0, EVAL_DIV0, EX_BINARY, '%', 11);
    ck_fails("b / 0", ENV0, EVAL_DIV0, EX_BINARY, '/', 11);
    ck_fails("min(1, 2 / (s - 1))", ENV0, EVAL_DIV0, EX_BINARY, '/', 18);
    /* a division by zero inside a let points into the let (line 6), not at
     * the use */
    ev r = eval_env("dz + 1", (pp_env){0, 0, 1, 0}, NULL, 0);
    ck_assert_int_eq(r.st, EVAL_DIV0);
    ck_assert_int_eq(r.where_kind, EX_BINARY);
    ck_assert_int_eq(r.where_op, '/');
    ck_assert_int_eq(r.where_loc.first_line, 6);
    ck_assert_int_eq(r.where_loc.first_column, 12);
    /* the same let at another job is fine */
    ck_assert_int_eq(value_env("dz + 1", (pp_env){0, 0, 0, 0}), -4);
}
END_TEST

/* ---------------------------------------------------------------- suite */

Suite *eval_suite(void)
{
    Suite *s = suite_create("eval");
    TCase *syn = tcase_create("syntax");
    tcase_add_test(syn, test_literals_and_precedence);
    tcase_add_test(syn, test_unary);
    tcase_add_test(syn, test_conditional);
    suite_add_tcase(s, syn);

    TCase *ar = tcase_create("arithmetic");
    tcase_add_test(ar, test_floor_division);
    tcase_add_test(ar, test_comparisons);
    tcase_add_test(ar, test_logic_short_circuit);
    tcase_add_test(ar, test_calls);
    tcase_add_test(ar, test_variables_lets_params);
    suite_add_tcase(s, ar);

    TCase *err = tcase_create("errors");
    tcase_add_test(err, test_overflow);
    tcase_add_test(err, test_division_by_zero);
    suite_add_tcase(s, err);
    return s;
}
