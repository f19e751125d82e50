/* test_lang.c - the language of issue 17, parts 2 and 3:
 *   - `require EXPR [, "message"]`: evaluated after -D, false is an error
 *     quoting the expression, the message and the params' values, with a
 *     caret under the expression; s, b, d are errors where they appear;
 *   - warnings for options that have no effect (`limit inflight` under
 *     `order strict`, `cost W` without a split backward, `split backward
 *     when` that holds nowhere): printed, the compile still succeeds;
 *   - `split backward when EXPR` (mixed backward): which jobs exist and are
 *     split, their costs, the simulated order, and the instructions each
 *     kind lowers to, stash sizes included;
 *   - mixed backward with `overlap F with B when`: a pair is a forward and
 *     a full backward or a split backward's B, never a W; the lowered pairs
 *     (a full backward's ZeroGrads before its Overlap); --emit torch-csv
 *     names split backwards I and full ones B;
 *   - every library file's requirements fire on a bad -D (schedules/), and
 *     ppc's exit status and stderr for both.
 * Training a mixed schedule to the reference's weights is lang_e2e
 * (test_lang_e2e.c). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/lower.h"
#include "../../compiler/torch_csv.h"
#include "../../kernels/model.h"
#include "suites.h"
#include "testutil.h"

#define HEAD "param S = 4\nparam B = 6\nparam W = 4\n"
#define BODY "compute(s,b,d) = s\n"

#define ck_has(text, s)                                                                            \
    ck_assert_msg(strstr(text, s) != NULL, "expected\n%s\nin the messages\n%s", s, text)
#define ck_lacks(text, s)                                                                          \
    ck_assert_msg(strstr(text, s) == NULL, "did not expect '%s' in the messages\n%s", s, text)

static const char *msgs(const compiled *c) { return c->msgs ? c->msgs : ""; }

/* --------------------------------------------------------------- require */

/* Compiles src (-D defs) and expects exactly `errors` errors, one of them
 * saying `msg`. */
static void expect_errors(const char *src, const pp_define *defs, int ndefs, int errors,
                          const char *msg)
{
    compiled c;
    compile_src(&c, src, defs, ndefs);
    ck_assert_int_eq(c.errors, errors);
    ck_has(msgs(&c), msg);
    compiled_free(&c);
}

/* The same with at least `errors` (a syntax error may bring others). */
static void expect_errors_at_least(const char *src, const pp_define *defs, int ndefs, int errors,
                                   const char *msg)
{
    compiled c;
    compile_src(&c, src, defs, ndefs);
    ck_assert_int_ge(c.errors, errors);
    ck_has(msgs(&c), msg);
    compiled_free(&c);
}

START_TEST(require_true_is_silent)
{
    compiled c;
    compile_src(&c, HEAD "require B % 2 == 0, \"B even\"\nrequire W <= S\n" BODY, NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_int_eq(c.diag.warnings, 0);
    ck_assert_str_eq(msgs(&c), "");
    compiled_free(&c);
}
END_TEST

/* The whole expression as written, the message, the values of the params
 * it uses (in order of first use), a caret under the expression. */
START_TEST(require_false_quotes_expression_message_and_values)
{
    compiled c;
    compile_src(&c, HEAD "require B % W == 0, \"B must be a multiple of W\"\n" BODY, NULL, 0);
    ck_assert_int_eq(c.errors, 1);
    ck_assert_int_eq(c.status, PP_COMPILE_ERRORS);
    ck_has(msgs(&c), "t.pp:4:9: error: requirement failed: B % W == 0 (B must be a multiple of W) "
                     "with B=6, W=4\n"
                     "    4 | require B % W == 0, \"B must be a multiple of W\"\n"
                     "      |         ^~~~~~~~~~\n");
    compiled_free(&c);
    /* without a message; parentheses and spacing as written, blanks folded */
    expect_errors(HEAD "require (S  >  W)\n" BODY, NULL, 0, 1,
                  "t.pp:4:9: error: requirement failed: (S > W) with S=4, W=4\n"
                  "    4 | require (S  >  W)\n"
                  "      |         ^~~~~~~~~\n");
    /* a constant requirement names no params */
    compile_src(&c, HEAD "require 1 == 2, \"never\"\n" BODY, NULL, 0);
    ck_has(msgs(&c), "error: requirement failed: 1 == 2 (never)\n");
    compiled_free(&c);
}
END_TEST

/* Evaluated after -D: the default passes, an override fails, another
 * passes again; params reached through a param-only let are named. */
START_TEST(require_after_defines)
{
    const char *src =
        HEAD "let V = S / W\nrequire V * W == S, \"S a multiple of W\"\ncompute(s,b,d) = s % W\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    compiled_free(&c);
    pp_define bad[] = {{"S", 6}};
    expect_errors(src, bad, 1, 1,
                  "t.pp:5:9: error: requirement failed: V * W == S (S a multiple of W) "
                  "with S=6, W=4\n");
    pp_define good[] = {{"S", 8}};
    compile_src(&c, src, good, 1);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    compiled_free(&c);
}
END_TEST

/* Every failed requirement is reported, and nothing later (a placement out
 * of range) is, since the compile stops after the check. */
START_TEST(require_all_failures_reported)
{
    compiled c;
    pp_define d[] = {{"W", 2}};
    compile_src(&c, HEAD "require W == S\nrequire W >= 4, \"four workers\"\n" BODY, d, 1);
    ck_assert_int_eq(c.errors, 2);
    ck_has(msgs(&c), "t.pp:4:9: error: requirement failed: W == S with W=2, S=4\n");
    ck_has(msgs(&c), "t.pp:5:9: error: requirement failed: W >= 4 (four workers) with W=2\n");
    ck_lacks(msgs(&c), "outside the workers");
    compiled_free(&c);
}
END_TEST

START_TEST(require_job_variables_are_errors)
{
    expect_errors(HEAD "require s < S\n" BODY, NULL, 0, 1,
                  "t.pp:4:9: error: 's' is a job variable and cannot be used in a requirement "
                  "(it may use params and lets of params)\n"
                  "    4 | require s < S\n"
                  "      |         ^\n");
    expect_errors(HEAD "let warm = S - 1 - s\nrequire B >= warm\n" BODY, NULL, 0, 1,
                  "t.pp:5:14: error: 'warm' uses s, b or d: a requirement may use params and "
                  "lets of params only\n"
                  "    5 | require B >= warm\n"
                  "      |              ^~~~\n");
    expect_errors(HEAD "require d == F\n" BODY, NULL, 0, 1,
                  "t.pp:4:9: error: 'd' is a job variable and cannot be used in a requirement");
}
END_TEST

START_TEST(require_bad_forms)
{
    /* division by zero in a requirement, at its operator */
    pp_define zero[] = {{"S", 4}};
    expect_errors(HEAD "param Z = 0\nrequire S / Z == 1\n" BODY, zero, 1, 1,
                  "t.pp:5:11: error: division by zero\n");
    /* a message that does not end on its line */
    expect_errors(HEAD "require B > 0, \"no end\n" BODY, NULL, 0, 1,
                  "t.pp:4:16: error: unterminated string: a message ends with '\"' on its line\n");
    /* a message with no expression, and a string anywhere else */
    expect_errors_at_least(HEAD "require \"why\"\n" BODY, NULL, 0, 1,
                           "t.pp:4:9: error: syntax error, unexpected string");
    expect_errors_at_least(HEAD "param X = \"4\"\n" BODY, NULL, 0, 1,
                           "t.pp:4:11: error: syntax error, unexpected string");
    /* an unknown name */
    expect_errors(HEAD "require Q > 0\n" BODY, NULL, 0, 1, "t.pp:4:9: error: unknown name 'Q'\n");
    /* a let defined after the requirement is named as such, not unknown */
    expect_errors(HEAD "require L == 1\nlet L = 1\n" BODY, NULL, 0, 1,
                  "t.pp:4:9: error: 'L' is used before it is defined\n");
}
END_TEST

/* A requirement that uses a let whose own expression has errors reports
 * those errors only: evaluating the let read a call's missing argument
 * (a crash) or an unresolved name ("integer overflow", or a requirement
 * that fails for nothing). */
START_TEST(require_on_broken_let)
{
    static const struct {
        const char *let;
        const char *want;
    } bad[] = {
        {"let X = min(1)\n", "t.pp:4:9: error: 'min' takes 2 arguments, found 1\n"},
        {"let X = foo(1, 2)\n", "t.pp:4:9: error: unknown function 'foo'"},
        {"let X = ZZ\n", "t.pp:4:9: error: unknown name 'ZZ'\n"},
        {"let Y = min(1)\nlet X = Y + 1\n", "t.pp:4:9: error: 'min' takes 2 arguments"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char src[512];
        snprintf(src, sizeof src, HEAD "%srequire X == 1, \"x\"\n" BODY, bad[i].let);
        compiled c;
        compile_src(&c, src, NULL, 0);
        ck_assert_msg(c.errors == 1, "%s: expected 1 error, got\n%s", bad[i].let, msgs(&c));
        ck_has(msgs(&c), bad[i].want);
        ck_lacks(msgs(&c), "requirement failed");
        ck_lacks(msgs(&c), "overflow");
        compiled_free(&c);
    }
}
END_TEST

/* -------------------------------------------------------------- warnings */

START_TEST(warn_inflight_under_strict)
{
    compiled c;
    compile_src(&c, HEAD BODY "order strict\nlimit inflight = S - w\n", NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_int_eq(c.status, PP_COMPILE_OK);
    ck_assert_int_eq(c.diag.warnings, 1);
    ck_has(msgs(&c), "t.pp:6:1: warning: 'limit inflight' has no effect with 'order strict': a "
                     "strict order runs each worker's jobs in priority order; the limit applies to "
                     "'order greedy'\n"
                     "    6 | limit inflight = S - w\n"
                     "      | ^~~~~\n");
    compiled_free(&c);
    /* under greedy order the limit works: no warning */
    compile_src(&c, HEAD BODY "limit inflight = S - w\n", NULL, 0);
    ck_assert_int_eq(c.diag.warnings, 0);
    ck_assert_str_eq(msgs(&c), "");
    compiled_free(&c);
}
END_TEST

START_TEST(warn_cost_w_without_split)
{
    compiled c;
    compile_src(&c, HEAD BODY "cost W = 2\n", NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_int_eq(c.diag.warnings, 1);
    ck_has(msgs(&c), "t.pp:5:1: warning: 'cost W' has no effect: the schedule has no 'split "
                     "backward', so it has no W jobs\n");
    compiled_free(&c);
    compile_src(&c, HEAD BODY "cost W = 2\nsplit backward\n", NULL, 0);
    ck_assert_int_eq(c.diag.warnings, 0);
    compiled_free(&c);
}
END_TEST

/* `cost overlap` prices overlapped pairs: without an `overlap` line there
 * are none. */
START_TEST(warn_cost_overlap_without_overlap)
{
    compiled c;
    compile_src(&c, HEAD BODY "order strict\ncost overlap = 50\n", NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_int_eq(c.diag.warnings, 1);
    ck_has(msgs(&c), "t.pp:6:1: warning: 'cost overlap' has no effect: the schedule has no "
                     "'overlap F with B when', so no jobs run as pairs\n");
    compiled_free(&c);
    compile_src(&c, HEAD BODY "order strict\ncost overlap = 50\noverlap F with B when b > 0\n",
                NULL, 0);
    ck_assert_int_eq(c.diag.warnings, 0);
    compiled_free(&c);
}
END_TEST

/* `split backward when` false everywhere: a warning, and the jobs are
 * those of no split at all (ND = 2). */
START_TEST(warn_split_when_nowhere)
{
    compiled c;
    compile_src(&c, HEAD BODY "split backward when b >= B\n", NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_int_eq(c.diag.warnings, 1);
    ck_has(msgs(&c), "t.pp:5:1: warning: 'split backward when' holds for no job: no backward is "
                     "split and there are no W jobs\n");
    ck_assert_int_eq(c.t.js.ND, 2);
    ck_assert_int_eq(job_total(&c.t.js), 4 * 6 * 2);
    compiled_free(&c);
}
END_TEST

/* `overlap ... when` false at every forward pairs nothing: a warning, as
 * for 'split backward when', and no pair; one forward is enough to pair. */
START_TEST(warn_overlap_when_nowhere)
{
#define OV1F1B                                                                                     \
    HEAD BODY "let warm = S - 1 - s\n"                                                             \
              "priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b\n"     \
              "order strict\n"
    compiled c;
    compile_src(&c, OV1F1B "overlap F with B when b >= B\n", NULL, 0);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    ck_assert_int_eq(c.diag.warnings, 1);
    ck_has(msgs(&c), "t.pp:8:1: warning: 'overlap ... when' holds for no forward: no jobs run as "
                     "pairs\n");
    ck_assert_int_eq(c.sim.npairs, 0);
    compiled_free(&c);
    compile_src(&c, OV1F1B "overlap F with B when b > warm\n", NULL, 0);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    ck_lacks(msgs(&c), "holds for no forward");
    ck_assert_int_gt(c.sim.npairs, 0);
    compiled_free(&c);
#undef OV1F1B
}
END_TEST

/* ppc: a failed requirement exits 1 with the error on stderr; a warning
 * leaves the exit status 0 and is printed even with -q. */
START_TEST(ppc_require_and_warning_exit_status)
{
    char *dir = temp_dir(), path[1024], cmd[4096];
    snprintf(path, sizeof path, "%s/t.pp", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(HEAD "require B % W == 0, \"whole rounds\"\n" BODY "order strict\nlimit inflight = 2\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s -o %s/out -q 2>&1 >/dev/null", PP_ROOT, path, dir);
    char *out = run_expect(cmd, 1);
    ck_has(out, "t.pp:4:9: error: requirement failed: B % W == 0 (whole rounds) with B=6, W=4\n");
    ck_has(out, "t.pp: 1 error\n");
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s -D B=8 -o %s/out -q 2>&1 >/dev/null", PP_ROOT, path,
             dir);
    out = run_expect(cmd, 0);
    ck_has(out, "t.pp:7:1: warning: 'limit inflight' has no effect with 'order strict'");
    ck_lacks(out, "error");
    free(out);
    remove_dir(dir);
}
END_TEST

/* A NUL byte inside a requirement's message is an error, not a message
 * silently cut at it (the byte is an error everywhere else too). */
START_TEST(ppc_require_message_with_nul)
{
    char *dir = temp_dir(), path[1024], cmd[4096];
    snprintf(path, sizeof path, "%s/t.pp", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    static const char src[] = HEAD "require B > 0, \"a\0b\"\n" BODY;
    ck_assert_uint_eq(fwrite(src, 1, sizeof src - 1, f), sizeof src - 1);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s -o %s/out -q 2>&1 >/dev/null", PP_ROOT, path, dir);
    char *out = run_expect(cmd, 1);
    ck_has(out, "t.pp:4:16: error: unexpected byte 0x00 in a string: a message is text\n");
    ck_has(out, "t.pp: 1 error\n");
    free(out);
    remove_dir(dir);
}
END_TEST

/* ------------------------------------------------------- mixed backward */

/* ZB-H1 (zb-h1.pp's order) with only the even microbatches' backwards
 * split. */
#define MIXED                                                                                      \
    "param S = 4\nparam B = 4\nparam W = S\n"                                                      \
    "split backward when b % 2 == 0\n"                                                             \
    "let k = min(S - 1 - s, B)\n"                                                                  \
    "compute(s,b,d) = s\n"                                                                         \
    "priority(s,b,d) = d == F ? 3 * (b - k) : d == B ? 3 * b + 1 : 3 * (b + s) + 2\n"              \
    "order strict\n"

START_TEST(mixed_jobs_and_costs)
{
    compiled c;
    compile_src(&c, MIXED, NULL, 0);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    const pp_jobspace *js = &c.t.js;
    ck_assert_int_eq(js->ND, 3);
    ck_assert_ptr_nonnull(js->split);
    ck_assert_int_eq(job_total(js), 4 * 4 * 2 + 4 * 2); /* a W for b = 0 and 2 of each stage */
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < 4; b++) {
            int split = b % 2 == 0, bw = job_id(js, s, b, DIR_B), w = job_id(js, s, b, DIR_W);
            ck_assert_int_eq(job_split(js, s, b), split);
            ck_assert_int_eq(job_exists(js, w), split);
            ck_assert_int_eq(job_makes_wgrad(js, bw), !split);
            /* unit costs: a split B and its W cost 1 each; a full B does both */
            ck_assert(c.t.cost[bw] == (split ? 1.0 : 2.0));
            if (split)
                ck_assert(c.t.cost[w] == 1.0);
        }
    /* the priority's slots: F(b) at 3(b - k), B(b) at 3b + 1, W(b) at
     * 3(b + s) + 2, for the W that exist (b = 0, 2) */
    char *o = worker_order(&c, 3, 'b');
    ck_assert_str_eq(o, "F0 B0 F1 B1 F2 B2 F3 B3 W0 W2");
    free(o);
    o = worker_order(&c, 0, 'b');
    ck_assert_str_eq(o, "F0 F1 F2 F3 B0 W0 B1 B2 W2 B3");
    free(o);
    compiled_free(&c);
}
END_TEST

/* The priority of a W is evaluated only where the W exists: one that
 * divides by zero at the W of an even microbatch compiles when only the
 * odd ones are split. A full backward among split ones costs cost B +
 * cost W at its (s,b): it does both halves' work. */
START_TEST(mixed_priority_only_where_w_exists)
{
    const char *src = "param S = 2\nparam B = 4\nparam W = 2\ncompute(s,b,d) = s\n"
                      "split backward when b % 2 == 1\n"
                      "priority(s,b,d) = d == W ? 100 / (b % 2) : 0\n"
                      "cost B = 2\ncost W = 3 + s\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    const pp_jobspace *js = &c.t.js;
    for (int s = 0; s < 2; s++)
        for (int b = 0; b < 4; b++) {
            double bw = c.t.cost[job_id(js, s, b, DIR_B)];
            if (b % 2) {
                ck_assert(bw == 2.0);
                ck_assert(c.t.cost[job_id(js, s, b, DIR_W)] == 3.0 + s);
                ck_assert_int_eq(c.t.priority[job_id(js, s, b, DIR_W)], 100);
            } else
                ck_assert(bw == 2.0 + 3.0 + s);
        }
    compiled_free(&c);
    /* splitting the even ones instead makes the priority divide by zero */
    compile_src(&c,
                "param S = 2\nparam B = 4\nparam W = 2\ncompute(s,b,d) = s\n"
                "split backward when b % 2 == 0\n"
                "priority(s,b,d) = d == W ? 100 / (b % 2) : 0\n",
                NULL, 0);
    ck_assert_int_eq(c.errors, 1);
    ck_has(msgs(&c), "error: division by zero in priority(s,b,d) at (s=0, b=0, d=W)\n");
    compiled_free(&c);
}
END_TEST

START_TEST(mixed_split_when_errors)
{
    compiled c;
    expect_errors(HEAD BODY "split backward when d == B\n", NULL, 0, 1,
                  "t.pp:5:21: error: 'd' cannot be used in 'split backward when': it may use s, "
                  "b, params and lets (a backward is split or not as a whole)\n"
                  "    5 | split backward when d == B\n"
                  "      |                     ^\n");
    expect_errors(HEAD BODY "let back = d != F\nsplit backward when back && b > 0\n", NULL, 0, 1,
                  "t.pp:6:21: error: 'back' uses d: 'split backward when' may use s, b, params "
                  "and lets without d (a backward is split or not as a whole)\n");
    expect_errors(HEAD BODY "split backward if b > 0\n", NULL, 0, 1,
                  "t.pp:5:16: error: expected 'when' after 'split backward', found 'if'\n");
    compile_src(&c, HEAD BODY "split backward when 1 / (b - 1) > 0\n", NULL, 0);
    ck_assert_int_eq(c.errors, 1);
    ck_has(msgs(&c), "t.pp:5:23: error: division by zero in split backward when at (s=0, b=1)\n");
    ck_has(msgs(&c), "  (split backward when failed at 3 more jobs)\n");
    compiled_free(&c);
    expect_errors(HEAD BODY "split backward\nsplit backward when b > 0\n", NULL, 0, 1,
                  "t.pp:6:1: error: split backward is given more than once\n");
}
END_TEST

/* Lowers c's plans (asserting success); caller frees with pp_plans_free. */
static pp_plan *lower(const compiled *c)
{
    pp_plan *plans = NULL;
    pp_lower_opts lo = {1, 0};
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    pp_diag d = c->diag;
    d.out = out;
    pp_compile_status st = pp_compile_plans(&c->t, &c->sim, &c->sch.model, &lo, &d, &plans);
    fclose(out);
    ck_assert_msg(st == PP_COMPILE_OK, "%s", text);
    free(text);
    return plans;
}

/* Rank r's compute instructions: "F0 BI0 W0 F1 B1 ..." (Backward is "B",
 * BackwardInput "BI", BackwardWeight "W"), each with its microbatch. */
static char *compute_ops(const pp_plan *p)
{
    char *s = calloc(1, 16 * p->ninstr + 1);
    size_t n = 0;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        const char *name = in->op == PP_OP_Forward          ? "F"
                           : in->op == PP_OP_Backward       ? "B"
                           : in->op == PP_OP_BackwardInput  ? "BI"
                           : in->op == PP_OP_BackwardWeight ? "W"
                                                            : NULL;
        if (name)
            n += (size_t)sprintf(s + n, "%s%s%d", n ? " " : "", name, in->mb);
    }
    return s;
}

/* Split microbatches lower to BackwardInput then BackwardWeight, the others
 * to a full Backward; each Forward's stash is sized for the backward its
 * microbatch gets (a stage holding both kinds), and the plans pass both
 * checkers (pp_compile_plans). */
START_TEST(mixed_lowers_both_kinds)
{
    compiled c;
    compile_src(&c, MIXED, NULL, 0);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    pp_plan *plans = lower(&c);
    char *o = compute_ops(&plans[3]);
    ck_assert_str_eq(o, "F0 BI0 F1 B1 F2 BI2 F3 B3 W0 W2");
    free(o);
    o = compute_ops(&plans[0]);
    ck_assert_str_eq(o, "F0 F1 F2 F3 BI0 W0 B1 BI2 W2 B3");
    free(o);
    o = compute_ops(&plans[2]);
    ck_assert_str_eq(o, "F0 F1 BI0 F2 B1 F3 BI2 W0 B3 W2");
    free(o);
    const pp_model *m = &c.sch.model;
    for (int r = 0; r < 4; r++) {
        const pp_plan *p = &plans[r];
        int full = 0, input = 0, weight = 0;
        for (uint32_t i = 0; i < p->ninstr; i++) {
            const pp_instr *in = &p->code[i];
            full += in->op == PP_OP_Backward;
            input += in->op == PP_OP_BackwardInput;
            weight += in->op == PP_OP_BackwardWeight;
            if (in->op == PP_OP_Forward) {
                uint64_t want = in->mb % 2 == 0 ? pp_stage_stash_bytes_split(m, 4, r)
                                                : pp_stage_stash_bytes(m, 4, r);
                int k = pp_slot(in, PP_ROLE_STASH);
                ck_assert_msg(p->slot_bytes[k] >= want, "rank %d F%d: stash slot of %llu bytes", r,
                              in->mb, (unsigned long long)p->slot_bytes[k]);
            }
            if (in->op == PP_OP_Backward || in->op == PP_OP_BackwardInput ||
                in->op == PP_OP_BackwardWeight)
                ck_assert_int_eq(in->mb % 2 == 0, in->op != PP_OP_Backward);
        }
        ck_assert_int_eq(full, 2);
        ck_assert_int_eq(input, 2);
        ck_assert_int_eq(weight, 2);
    }
    pp_plans_free(plans, 4);
    compiled_free(&c);
}
END_TEST

/* `split backward when 1` is `split backward`, and `when 0` (with its
 * warning) no split: the same plans, bit for bit (plan ids). */
START_TEST(mixed_when_all_or_none_is_plain)
{
    const char *base = "param S = 4\nparam B = 4\nparam W = S\ncompute(s,b,d) = s\n"
                       "priority(s,b,d) = d * B + b\n";
    char src[4][512];
    snprintf(src[0], sizeof src[0], "%ssplit backward\n", base);
    snprintf(src[1], sizeof src[1], "%ssplit backward when 1\n", base);
    snprintf(src[2], sizeof src[2], "%s", base);
    snprintf(src[3], sizeof src[3], "%ssplit backward when s > S\n", base);
    uint64_t id[4];
    for (int i = 0; i < 4; i++) {
        compiled c;
        compile_src(&c, src[i], NULL, 0);
        ck_assert_msg(c.errors == 0, "%s", msgs(&c));
        ck_assert_ptr_null(c.t.js.split);
        pp_plan *plans = lower(&c);
        id[i] = plans[0].plan_id;
        pp_plans_free(plans, 4);
        compiled_free(&c);
    }
    ck_assert_uint_eq(id[0], id[1]);
    ck_assert_uint_eq(id[2], id[3]);
    ck_assert_uint_ne(id[0], id[2]);
}
END_TEST

/* The report counts the split backwards and shows both backward costs;
 * a greedy mixed schedule (per-stage split) simulates and lowers too. */
START_TEST(mixed_report_and_greedy)
{
    char *dir = temp_dir(), path[1024], cmd[4096];
    snprintf(path, sizeof path, "%s/t.pp", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(MIXED, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -o %s/out -q && cat %s/out/report.txt %s/out/report.json", PP_ROOT,
             path, dir, dir, dir);
    char *out = run_expect(cmd, 0);
    ck_has(out, "strict order, split backward for 8 of 16 (s,b))\n");
    ck_has(out, "          B s0-s3 1\n          W s0-s3 1\n          B full s0-s3 2\n");
    ck_has(out, "\"split\": true, \"split_backwards\": 8,");
    free(out);
    remove_dir(dir);

    compiled c;
    compile_src(&c,
                "param S = 4\nparam B = 4\nparam W = 4\ncompute(s,b,d) = s\n"
                "split backward when s < 2\npriority(s,b,d) = d == B ? b : B + b\n"
                "limit inflight = S - w\n",
                NULL, 0);
    ck_assert_msg(c.errors == 0 && !c.deadlock, "%s", msgs(&c));
    ck_assert_int_eq(job_total(&c.t.js), 4 * 4 * 2 + 2 * 4);
    pp_plan *plans = lower(&c);
    char *o = compute_ops(&plans[3]);
    ck_lacks(o, "BI");
    ck_lacks(o, "W");
    free(o);
    o = compute_ops(&plans[1]);
    ck_lacks(o, "B0");
    ck_has(o, "BI0");
    ck_has(o, "W3");
    free(o);
    pp_plans_free(plans, 4);
    compiled_free(&c);
}
END_TEST

/* ------------------------------------------- mixed backward with overlap */

/* MIXED at B = 8 with its forwards paired: in ZB-H1's order each F(s,b+k)
 * sits just before B(s,b), and the W between them exists only for even b.
 * The last stage is left out: there F(3,b+1) follows B(3,b), and the pair
 * would wait on F(2,b+1), itself paired with B(2,b), which waits on B(3,b). */
#define MIXED_OVERLAP MIXED "overlap F with B when s < S - 1\n"

/* Every pair is a forward and a backward (full where b is odd, a split
 * one's input half where even) of different microbatches, never a W: 18
 * pairs (5, 6 and 7 on workers 0 to 2), 10 with a split B, 8 with a full
 * one; ends equal, as the simulator ends a pair's two jobs at once. */
START_TEST(mixed_overlap_pairs)
{
    pp_define b8 = {"B", 8};
    compiled c;
    compile_src(&c, MIXED_OVERLAP, &b8, 1);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    ck_assert_ptr_nonnull(c.sim.partner);
    ck_assert_int_eq(c.sim.npairs, 18);
    const pp_jobspace *js = &c.t.js;
    int split = 0, full = 0, per_worker[4] = {0};
    for (int j = 0; j < job_count(js); j++) {
        int q = c.sim.partner[j];
        if (q < 0)
            continue;
        ck_assert_int_eq(c.sim.partner[q], j);
        ck_assert_msg(job_exists(js, j) && job_exists(js, q), "a pair holds a W id that is no job");
        ck_assert_msg(job_d(js, j) != DIR_W, "W(%d,%d) is paired", job_s(js, j), job_b(js, j));
        if (job_d(js, j) != DIR_F)
            continue;
        ck_assert_int_eq(job_d(js, q), DIR_B);
        ck_assert_int_ne(job_b(js, j), job_b(js, q));
        ck_assert_int_eq(c.t.worker[j], c.t.worker[q]);
        ck_assert(c.sim.start[j] == c.sim.start[q] && c.sim.end[j] == c.sim.end[q]);
        int bs = job_s(js, q), bb = job_b(js, q);
        ck_assert_int_eq(job_split(js, bs, bb), bb % 2 == 0);
        split += job_split(js, bs, bb);
        full += !job_split(js, bs, bb);
        per_worker[c.t.worker[j]]++;
    }
    ck_assert_int_eq(split, 10);
    ck_assert_int_eq(full, 8);
    ck_assert_int_eq(per_worker[0], 5);
    ck_assert_int_eq(per_worker[1], 6);
    ck_assert_int_eq(per_worker[2], 7);
    ck_assert_int_eq(per_worker[3], 0);
    compiled_free(&c);
}
END_TEST

/* The Overlap instructions, one per pair: each followed by the pair's two
 * jobs, a Forward and (its microbatch even) a BackwardInput or (odd) a
 * Backward; no BackwardWeight inside a pair. */
START_TEST(mixed_overlap_lowers)
{
    pp_define b8 = {"B", 8};
    compiled c;
    compile_src(&c, MIXED_OVERLAP, &b8, 1);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    pp_plan *plans = lower(&c);
    int pairs = 0, with_input = 0, with_full = 0;
    for (int r = 0; r < 4; r++) {
        const pp_plan *p = &plans[r];
        for (uint32_t i = 0; i < p->ninstr; i++) {
            if (p->code[i].op != PP_OP_Overlap)
                continue;
            ck_assert_uint_lt(i + 2, p->ninstr);
            const pp_instr *x = &p->code[i + 1], *y = &p->code[i + 2];
            const pp_instr *f = x->op == PP_OP_Forward ? x : y, *bk = f == x ? y : x;
            ck_assert_msg(f->op == PP_OP_Forward, "rank %d @%u: no Forward in the pair", r, i);
            ck_assert_msg(bk->op == (bk->mb % 2 == 0 ? PP_OP_BackwardInput : PP_OP_Backward),
                          "rank %d @%u: microbatch %d's backward in the pair is %s", r, i, bk->mb,
                          pp_op_name(bk->op));
            with_input += bk->op == PP_OP_BackwardInput;
            with_full += bk->op == PP_OP_Backward;
            pairs++;
        }
        ck_assert_int_eq(pp_plan_workspaces(p), r < 3 ? 2 : 1);
    }
    ck_assert_int_eq(pairs, 18);
    ck_assert_int_eq(with_input, 10);
    ck_assert_int_eq(with_full, 8);
    pp_plans_free(plans, 4);
    compiled_free(&c);
}
END_TEST

/* Weights away from the compute (stage s on worker s + 1): a rank's first
 * weight gradient of the stage it computes clears an accumulator
 * (ZeroGrads). On rank 1 that is B(1,1), a full backward in a pair, so the
 * ZeroGrads goes before the Overlap, not between it and the pair; the
 * lowering used to do so only when no backward was split, and the plan
 * reader then refused the pair (an internal error). */
START_TEST(mixed_overlap_zerograds_before_pair)
{
    pp_define b8 = {"B", 8};
    compiled c;
    compile_src(&c, MIXED_OVERLAP "weights(s,b,d) = (s + 1) % W\n", &b8, 1);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    pp_plan *plans = lower(&c); /* asserts the plans validate */
    int before = 0;
    for (int r = 0; r < 3; r++) {
        const pp_plan *p = &plans[r];
        for (uint32_t i = 1; i + 2 < p->ninstr; i++)
            if (p->code[i].op == PP_OP_Overlap && p->code[i - 1].op == PP_OP_ZeroGrads) {
                const pp_instr *bk =
                    p->code[i + 1].op == PP_OP_Forward ? &p->code[i + 2] : &p->code[i + 1];
                ck_assert_int_eq(bk->op, PP_OP_Backward);
                ck_assert_int_eq(bk->stage, p->code[i - 1].stage);
                before++;
            }
    }
    ck_assert_msg(before >= 1, "no pair's full backward is a stage's first weight gradient");
    pp_plans_free(plans, 4);
    compiled_free(&c);
}
END_TEST

/* --emit torch-csv: a split backward's B is PyTorch's I and its W a W; a
 * full one is B. Worker by worker, in ZB-H1's mixed order. */
START_TEST(mixed_torch_csv)
{
    compiled c;
    compile_src(&c, MIXED, NULL, 0);
    ck_assert_msg(c.errors == 0, "%s", msgs(&c));
    char why[512];
    ck_assert_int_eq(pp_torch_csv_check(&c.t, why, sizeof why), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_int_eq(pp_torch_csv_write(f, &c.t, &c.sim), 0);
    fclose(f);
    ck_assert_str_eq(text, "0F0,0F1,0F2,0F3,0I0,0W0,0B1,0I2,0W2,0B3\n"
                           "1F0,1F1,1F2,1I0,1F3,1B1,1W0,1I2,1B3,1W2\n"
                           "2F0,2F1,2I0,2F2,2B1,2F3,2I2,2W0,2B3,2W2\n"
                           "3F0,3I0,3F1,3B1,3F2,3I2,3F3,3B3,3W0,3W2\n");
    free(text);
    compiled_free(&c);
}
END_TEST

/* ---------------------------------------------------- library requirements */

/* Each library file that states requirements fails, at its require line,
 * on a -D that breaks one, and compiles with its defaults. */
START_TEST(library_requirements_fire)
{
    static const struct {
        const char *file;
        pp_define bad[2];
        int nbad;
        const char *want;
    } lib[] = {
        {"gpipe.pp",
         {{"W", 2}},
         1,
         "requirement failed: W == S (compute = s puts stage s on "
         "worker s: W must be S) with W=2, S=4"},
        {"1f1b.pp", {{"W", 8}}, 1, "requirement failed: W == S"},
        {"1f1b-greedy.pp", {{"W", 3}}, 1, "requirement failed: W == S"},
        {"1f1b-limit.pp", {{"W", 5}}, 1, "requirement failed: W == S"},
        {"1f1b-gpt.pp", {{"W", 2}}, 1, "requirement failed: W == S"},
        {"zb-h1.pp", {{"W", 5}}, 1, "requirement failed: W == S"},
        {"ddp.pp",
         {{"W", 2}},
         1,
         "requirement failed: W == B (compute = b puts microbatch b on "
         "worker b: W must be B) with W=2, B=4"},
        {"fsdp.pp", {{"W", 2}}, 1, "requirement failed: W == B"},
        {"lpp.pp",
         {{"W", 3}},
         1,
         "requirement failed: W == G * R (G groups of R workers: give "
         "W = G * R) with W=3, G=2, R=2"},
        {"lpp.pp",
         {{"S", 5}},
         1,
         "requirement failed: R >= 1 && S % R == 0 (each group loops "
         "over its R workers: S must be a multiple of R) with R=2, S=5"},
        {"fslpp.pp", {{"S", 3}}, 1, "requirement failed: R >= 1 && S % R == 0"},
        {"fslpp.pp", {{"G", 3}, {"W", 4}}, 2, "requirement failed: W == G * R"},
        {"1f1b-overlap.pp",
         {{"W", 2}},
         1,
         "requirement failed: W == S (compute = s puts "
         "stage s on worker s: W must be S) with W=2, S=4"},
        {"v-overlap.pp",
         {{"S", 6}},
         1,
         "requirement failed: S == 2 * W (worker v holds "
         "stages v and 2W-1-v: S must be 2W) with S=6, W=4"},
        {"depth-first.pp",
         {{"S", 6}},
         1,
         "requirement failed: W >= 1 && S % W == 0 (stage s "
         "runs on worker s % W: S must be a multiple of W) "
         "with W=4, S=6"},
        {"1f1b-offload.pp", {{"W", 5}}, 1, "requirement failed: W == S"},
        {"1f1b-offload.pp", {{"K", -1}}, 1, "requirement failed: K >= 0 && K <= S"},
        {"1f1b-offload.pp", {{"H", -1}}, 1, "requirement failed: H >= 0"},
    };
    for (size_t i = 0; i < sizeof lib / sizeof lib[0]; i++) {
        compiled c;
        compile_library(&c, lib[i].file, NULL, 0);
        ck_assert_msg(c.errors == 0 && c.diag.warnings == 0, "%s: %s", lib[i].file, msgs(&c));
        compiled_free(&c);
        compile_library(&c, lib[i].file, lib[i].bad, lib[i].nbad);
        ck_assert_msg(c.errors >= 1 && strstr(msgs(&c), lib[i].want) &&
                          strstr(msgs(&c), "\n      |         ^~"),
                      "%s with a bad -D: expected '%s' with a caret, got\n%s", lib[i].file,
                      lib[i].want, msgs(&c));
        compiled_free(&c);
    }
}
END_TEST

Suite *lang_suite(void)
{
    Suite *s = suite_create("lang");
    TCase *req = tcase_create("require");
    tcase_add_test(req, require_true_is_silent);
    tcase_add_test(req, require_false_quotes_expression_message_and_values);
    tcase_add_test(req, require_after_defines);
    tcase_add_test(req, require_all_failures_reported);
    tcase_add_test(req, require_job_variables_are_errors);
    tcase_add_test(req, require_bad_forms);
    tcase_add_test(req, require_on_broken_let);
    tcase_add_test(req, ppc_require_message_with_nul);
    tcase_add_test(req, library_requirements_fire);
    suite_add_tcase(s, req);
    TCase *warn = tcase_create("warnings");
    tcase_add_test(warn, warn_inflight_under_strict);
    tcase_add_test(warn, warn_cost_w_without_split);
    tcase_add_test(warn, warn_cost_overlap_without_overlap);
    tcase_add_test(warn, warn_split_when_nowhere);
    tcase_add_test(warn, warn_overlap_when_nowhere);
    tcase_add_test(warn, ppc_require_and_warning_exit_status);
    suite_add_tcase(s, warn);
    TCase *mixed = tcase_create("mixed");
    tcase_add_test(mixed, mixed_jobs_and_costs);
    tcase_add_test(mixed, mixed_priority_only_where_w_exists);
    tcase_add_test(mixed, mixed_split_when_errors);
    tcase_add_test(mixed, mixed_lowers_both_kinds);
    tcase_add_test(mixed, mixed_when_all_or_none_is_plain);
    tcase_add_test(mixed, mixed_report_and_greedy);
    suite_add_tcase(s, mixed);
    TCase *ov = tcase_create("mixed_overlap");
    tcase_add_test(ov, mixed_overlap_pairs);
    tcase_add_test(ov, mixed_overlap_lowers);
    tcase_add_test(ov, mixed_overlap_zerograds_before_pair);
    tcase_add_test(ov, mixed_torch_csv);
    suite_add_tcase(s, ov);
    return s;
}
