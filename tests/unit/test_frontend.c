/* test_frontend.c - diagnostics of the schedule front end: the scanner
 * (compiler/lexer.l), the parser (parser.y), the checker (schedule.c) and the
 * evaluation-time errors of the job table (jobtable.c).
 *
 * Every test runs pp_parse + pp_schedule_check on a source string with the
 * messages going to a memstream, then asserts the error count and the exact
 * text: "t.pp:LINE:COL: error: ...", the source line and the caret line. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/jobtable.h"
#include "../../compiler/parse.h"
#include "../../compiler/schedule.h"
#include "suites.h"

/* ------------------------------------------------------------- fixtures */

/* Three params on lines 1-3, so the statements of a test start on line 4. */
#define HEAD "param S = 4\nparam B = 2\nparam W = 2\n"

typedef struct {
    pp_diag d;
    FILE *out;
    char *text; /* everything printed so far (after fe_text) */
    size_t len;
    pp_stmt *stmts;
    pp_schedule sch;
    int errors; /* of parse + check */
} fe_run;

/* Parse and check src (which must outlive r) with the given -D defines. */
static int fe_check(fe_run *r, const char *src, const pp_define *defs, int ndefs)
{
    memset(r, 0, sizeof *r);
    r->out = open_memstream(&r->text, &r->len);
    ck_assert_ptr_nonnull(r->out);
    diag_init(&r->d, "t.pp", src, strlen(src), r->out);
    r->stmts = pp_parse(&r->d);
    r->errors = pp_schedule_check(&r->sch, &r->d, r->stmts, defs, ndefs);
    ck_assert_int_eq(r->errors, r->d.errors);
    return r->errors;
}

static const char *fe_text(fe_run *r)
{
    fflush(r->out);
    return r->text ? r->text : "";
}

static void fe_free(fe_run *r)
{
    pp_schedule_free(&r->sch);
    ast_free_stmts(r->stmts);
    fclose(r->out);
    free(r->text);
}

/* The helper of the brief: the error count of parse + check, and (if text)
 * the printed messages, which the caller frees. */
static int check_src(const char *src, const pp_define *defs, int ndefs, char **text)
{
    fe_run r;
    int n = fe_check(&r, src, defs, ndefs);
    if (text)
        *text = strdup(fe_text(&r));
    fe_free(&r);
    return n;
}

/* The first line of a diagnostic, the source line and the caret line, in a
 * row: "t.pp:5:1: error: ...\n    5 | source\n      | ^~~\n". */
#define ck_diag(text, head, line, caret)                                                           \
    do {                                                                                           \
        char want_[1024];                                                                          \
        snprintf(want_, sizeof want_, "%s\n%s\n%s\n", head, line, caret);                          \
        ck_assert_msg(strstr(text, want_) != NULL, "expected\n%s\nin the messages\n%s", want_,     \
                      text);                                                                       \
    } while (0)

#define ck_has(text, s)                                                                            \
    ck_assert_msg(strstr(text, s) != NULL, "expected '%s' in the messages\n%s", s, text)
#define ck_lacks(text, s)                                                                          \
    ck_assert_msg(strstr(text, s) == NULL, "did not expect '%s' in the messages\n%s", s, text)

static int count_of(const char *text, const char *s)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    return n;
}

static const pp_expr *let_expr(const pp_schedule *sch, const char *name)
{
    for (int i = 0; i < sch->nlets; i++)
        if (!strcmp(sch->lets[i].name, name))
            return sch->lets[i].expr;
    ck_abort_msg("no let '%s'", name);
    return NULL;
}

static long long eval_let(const pp_schedule *sch, const char *name, pp_env env)
{
    long long v = -12345;
    const pp_expr *where = NULL;
    ck_assert_int_eq(pp_eval(sch, let_expr(sch, name), &env, &v, &where), EVAL_OK);
    return v;
}

/* -------------------------------------------------------------- scanner */

START_TEST(test_clean_file)
{
    char *text;
    const char *src = HEAD "compute(s,b,d) = s % W; weights(s,b,d) = s % W\n"
                           "priority(s,b,d) = d * B + b  # comment\norder strict // comment\n";
    ck_assert_int_eq(check_src(src, NULL, 0, &text), 0);
    ck_assert_str_eq(text, "");
    free(text);
}
END_TEST

START_TEST(test_unexpected_character)
{
    char *text;
    int n = check_src(HEAD "compute(s,b,d) = s @ 1\n", NULL, 0, &text);
    ck_diag(text, "t.pp:4:20: error: unexpected character '@'", "    4 | compute(s,b,d) = s @ 1",
            "      |                    ^");
    /* the character is dropped, so `s 1` is then a syntax error of its own */
    ck_diag(text, "t.pp:4:22: error: syntax error, unexpected integer",
            "    4 | compute(s,b,d) = s @ 1", "      |                      ^");
    ck_assert_int_eq(n, 2);
    free(text);
}
END_TEST

START_TEST(test_unexpected_byte)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = s\x7f\n", NULL, 0, &text), 1);
    ck_has(text, "t.pp:4:19: error: unexpected byte 0x7f\n");
    ck_has(text, "\n      |                   ^\n");
    free(text);
}
END_TEST

START_TEST(test_caret_keeps_tabs)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = 0\n\tlet x = $\n", NULL, 0, &text), 2);
    /* a tab counts as one column, and the caret line repeats it so the caret
     * lines up under the source whatever the tab width */
    ck_diag(text, "t.pp:5:10: error: unexpected character '$'", "    5 | \tlet x = $",
            "      | \t        ^");
    free(text);
}
END_TEST

START_TEST(test_literal_too_large)
{
    char *text;
    int n = check_src(HEAD "compute(s,b,d) = 0\n"
                           "let ok = 1000000000000\n"
                           "let big = 1000000000001\n"
                           "let max = 9223372036854775807\n"
                           "let huge = 99999999999999999999999\n",
                      NULL, 0, &text);
    ck_assert_int_eq(n, 3);
    ck_diag(text, "t.pp:6:11: error: integer literal 1000000000001 is too large (at most 10^12)",
            "    6 | let big = 1000000000001", "      |           ^~~~~~~~~~~~~");
    ck_diag(text,
            "t.pp:7:11: error: integer literal 9223372036854775807 is too large (at most 10^12)",
            "    7 | let max = 9223372036854775807", "      |           ^~~~~~~~~~~~~~~~~~~");
    ck_has(text, "t.pp:8:12: error: integer literal 99999999999999999999999 is too large");
    ck_lacks(text, ":5:");
    free(text);
}
END_TEST

/* --------------------------------------------------------------- parser */

START_TEST(test_syntax_error)
{
    char *text;
    int n = check_src(HEAD "compute(s,b,d) = s +\nweights(s,b,d) = 0\n", NULL, 0, &text);
    ck_diag(text, "t.pp:5:1: error: syntax error, unexpected weights", "    5 | weights(s,b,d) = 0",
            "      | ^~~~~~~");
    /* the broken compute was dropped by error recovery: that is no reason to
     * also claim the file has no compute */
    ck_lacks(text, "has no 'compute");
    ck_assert_int_eq(n, 1);
    free(text);
}
END_TEST

START_TEST(test_syntax_error_expecting)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "param = 3\ncompute(s,b,d) = 0\n", NULL, 0, &text), 1);
    ck_diag(text, "t.pp:4:7: error: syntax error, unexpected '=', expecting name",
            "    4 | param = 3", "      |       ^");
    free(text);
}
END_TEST

START_TEST(test_syntax_error_at_eof)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = (s", NULL, 0, &text), 1);
    ck_has(text, "t.pp:4:19: error: syntax error, unexpected end of file\n");
    ck_has(text, "\n    4 | compute(s,b,d) = (s\n");
    free(text);

    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = 0\nmodel { embed = 3\n", NULL, 0, &text), 1);
    ck_has(text, "unexpected end of file, expecting name or ';' or '}'");
    free(text);
}
END_TEST

START_TEST(test_syntax_error_swallows_param)
{
    /* A syntax error in `param B` loses the statement: no false "defines no
     * 'B'" on top of the real error. */
    char *text;
    const pp_define def = {"B", 3};
    ck_assert_int_eq(
        check_src("param S = 4\nparam B = (\nparam W = 2\ncompute(s,b,d) = 0\n", &def, 1, &text),
        1);
    ck_has(text, "t.pp:3:1: error: syntax error, unexpected param\n");
    ck_lacks(text, "defines no");
    ck_lacks(text, "-D");
    free(text);
}
END_TEST

START_TEST(test_wrong_function_head)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "compute(x,b,d) = 0\n", NULL, 0, &text), 1);
    ck_diag(text,
            "t.pp:4:9: error: parameter 1 of this function must be 's' (functions are written "
            "f(s,b,d)), found 'x'",
            "    4 | compute(x,b,d) = 0", "      |         ^");
    free(text);

    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = 0\nweights(s,d,b) = 0\n", NULL, 0, &text), 2);
    ck_has(text, "t.pp:5:11: error: parameter 2 of this function must be 'b'");
    ck_has(text, "t.pp:5:13: error: parameter 3 of this function must be 'd'");
    free(text);
}
END_TEST

START_TEST(test_unknown_words)
{
    char *text;
    int n = check_src(HEAD "compute(s,b,d) = 0\norder fast\nsplit forward\nlimit outflight = 1\n"
                           "cost X = 1\noptimizer adam\nprecision fp16\n",
                      NULL, 0, &text);
    ck_assert_int_eq(n, 6);
    ck_diag(text, "t.pp:5:7: error: unknown order 'fast': expected 'greedy' or 'strict'",
            "    5 | order fast", "      |       ^~~~");
    ck_diag(text, "t.pp:6:7: error: expected 'split backward', found 'split forward'",
            "    6 | split forward", "      |       ^~~~~~~");
    ck_diag(text, "t.pp:7:7: error: unknown limit 'outflight': expected 'inflight'",
            "    7 | limit outflight = 1", "      |       ^~~~~~~~~");
    ck_diag(text,
            "t.pp:8:6: error: unknown cost 'X': expected F, B, W, R, latency, bandwidth, overlap, "
            "tensor_latency, tensor_bandwidth or host_bandwidth",
            "    8 | cost X = 1", "      |      ^");
    ck_diag(text, "t.pp:9:11: error: unknown optimizer 'adam': expected 'sgd' or 'adamw'",
            "    9 | optimizer adam", "      |           ^~~~");
    ck_diag(text, "t.pp:10:11: error: unknown precision 'fp16': expected 'fp32' or 'bf16'",
            "   10 | precision fp16", "      |           ^~~~");
    free(text);
}
END_TEST

/* `optimizer` picks what OptimizerStep runs (SGD when absent), once. */
START_TEST(test_optimizer)
{
    fe_run r;
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\n", NULL, 0), 0);
    ck_assert_int_eq(r.sch.model.optimizer, PP_OPT_SGD);
    fe_free(&r);
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\noptimizer adamw\n", NULL, 0), 0);
    ck_assert_int_eq(r.sch.model.optimizer, PP_OPT_ADAMW);
    fe_free(&r);
    char *text;
    int n = check_src(HEAD "compute(s,b,d) = 0\noptimizer sgd\noptimizer adamw\n", NULL, 0, &text);
    ck_assert_int_eq(n, 1);
    ck_has(text, "t.pp:6:1: error: optimizer is given more than once");
    free(text);
}
END_TEST

/* `precision` picks the weights jobs compute with (fp32 when absent), once;
 * it is a word of its own, so it cannot name a param. */
START_TEST(test_precision)
{
    fe_run r;
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\n", NULL, 0), 0);
    ck_assert_int_eq(r.sch.model.precision, PP_PREC_FP32);
    fe_free(&r);
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\nprecision bf16\n", NULL, 0), 0);
    ck_assert_int_eq(r.sch.model.precision, PP_PREC_BF16);
    fe_free(&r);
    ck_assert_int_eq(fe_check(&r, HEAD "precision fp32; compute(s,b,d) = 0\n", NULL, 0), 0);
    ck_assert_int_eq(r.sch.model.precision, PP_PREC_FP32);
    fe_free(&r);
    char *text;
    int n = check_src(HEAD "compute(s,b,d) = 0\nprecision bf16\nprecision bf16\n", NULL, 0, &text);
    ck_assert_int_eq(n, 1);
    ck_has(text, "t.pp:6:1: error: precision is given more than once");
    free(text);
    n = check_src(HEAD "compute(s,b,d) = 0\nprecision\n", NULL, 0, &text);
    ck_assert_int_ge(n, 1);
    ck_has(text, "t.pp:5:10: error: syntax error, unexpected end of file, expecting name");
    free(text);
    n = check_src(HEAD "param precision = 1\ncompute(s,b,d) = 0\n", NULL, 0, &text);
    ck_assert_int_ge(n, 1);
    ck_has(text, "t.pp:4:7: error: syntax error, unexpected precision, expecting name");
    free(text);
}
END_TEST

/* -------------------------------------------------------------- checker */

START_TEST(test_unknown_name)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = s + foo\n", NULL, 0, &text), 1);
    ck_diag(text, "t.pp:4:22: error: unknown name 'foo'", "    4 | compute(s,b,d) = s + foo",
            "      |                      ^~~");
    free(text);
}
END_TEST

START_TEST(test_used_before_definition)
{
    char *text;
    /* a param whose default names a later param */
    ck_assert_int_eq(check_src("param S = 4\nparam W = X\nparam X = 2\nparam B = 1\n"
                               "compute(s,b,d) = 0\n",
                               NULL, 0, &text),
                     1);
    ck_diag(text, "t.pp:2:11: error: 'X' is used before it is defined", "    2 | param W = X",
            "      |           ^");
    ck_lacks(text, "out of range"); /* W's failed default is not also "W = 0" */
    free(text);

    /* a function and a let using a let defined further down */
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = a\nlet a = c\nlet c = 1\n", NULL, 0, &text),
                     2);
    ck_diag(text, "t.pp:4:18: error: 'a' is used before it is defined",
            "    4 | compute(s,b,d) = a", "      |                  ^");
    ck_diag(text, "t.pp:5:9: error: 'c' is used before it is defined", "    5 | let a = c",
            "      |         ^");
    free(text);

    /* lets are never visible in params or the model block: there, a let is
     * simply an unknown name wherever it is defined */
    ck_assert_int_eq(check_src(HEAD "param X = a\ncompute(s,b,d) = 0\nmodel { embed = a }\n"
                                    "let a = 1\n",
                               NULL, 0, &text),
                     2);
    ck_has(text, "t.pp:4:11: error: unknown name 'a'\n");
    ck_has(text, "t.pp:6:17: error: unknown name 'a'\n");
    free(text);
}
END_TEST

START_TEST(test_redefinition)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "param S = 3\ncompute(s,b,d) = 0\n", NULL, 0, &text), 1);
    ck_diag(text, "t.pp:4:7: error: redefinition of 'S'", "    4 | param S = 3", "      |       ^");
    ck_diag(text, "t.pp:1:7: note: 'S' was first defined here", "    1 | param S = 4",
            "      |       ^");
    free(text);

    /* the first definition stays in force */
    fe_run r;
    ck_assert_int_eq(fe_check(&r, HEAD "param S = 3\ncompute(s,b,d) = 0\n", NULL, 0), 1);
    ck_assert_int_eq(r.sch.S, 4);
    fe_free(&r);

    ck_assert_int_eq(check_src(HEAD "let a = 1\nlet a = 2\nlet W = 3\nparam s = 1\n"
                                    "compute(s,b,d) = 0\n",
                               NULL, 0, &text),
                     3);
    ck_has(text, "t.pp:5:5: error: redefinition of 'a'\n");
    ck_has(text, "t.pp:6:5: error: redefinition of 'W'\n");
    ck_has(text, "t.pp:7:7: error: 's' is a job variable and cannot be redefined\n");
    free(text);
}
END_TEST

START_TEST(test_model_fields)
{
    char *text;
    int n = check_src(HEAD "compute(s,b,d) = 0\nmodel {\n  widht = 3\n  embed = 0\n"
                           "  ffn = S * 1000000\n  blocks = 0\n  blocks = 2\n}\n",
                      NULL, 0, &text);
    ck_diag(text,
            "t.pp:6:3: error: unknown mlp model field 'widht' (fields are context, embed, ffn, "
            "blocks, batch)",
            "    6 |   widht = 3", "      |   ^~~~~");
    ck_diag(text, "t.pp:7:11: error: model embed = 0 is out of range [1, 65536]",
            "    7 |   embed = 0", "      |           ^");
    ck_diag(text, "t.pp:8:11: error: model ffn = 4000000 is out of range [1, 1048576]",
            "    8 |   ffn = S * 1000000", "      |           ^");
    ck_has(text, "t.pp:10:3: error: model field 'blocks' is given more than once\n");
    ck_assert_int_eq(n, 4); /* blocks = 0 is in range */
    free(text);

    fe_run r;
    ck_assert_int_eq(
        fe_check(&r, HEAD "compute(s,b,d) = 0\nmodel { ffn = W * 100; blocks = 0 }\n", NULL, 0), 0);
    ck_assert_int_eq(r.sch.model.ffn, 200);
    ck_assert_int_eq(r.sch.model.blocks, 0);
    ck_assert_int_eq(r.sch.model.embed, 16); /* defaults for the rest */
    fe_free(&r);
}
END_TEST

/* model gpt { ... }: its own fields and defaults, and the errors a user
 * meets first (an unknown kind, heads that do not divide embed, a field of
 * the other kind). */
START_TEST(test_model_gpt)
{
    fe_run r;
    ck_assert_int_eq(fe_check(&r,
                              HEAD "compute(s,b,d) = 0\n"
                                   "model gpt { vocab = 50257; context = 64; embed = 96;\n"
                                   "  heads = 3; layers = 2; batch = 4 }\n",
                              NULL, 0),
                     0);
    ck_assert_int_eq(r.sch.model.kind, PP_MODEL_GPT);
    ck_assert_int_eq(r.sch.model.vocab, 50257);
    ck_assert_int_eq(r.sch.model.heads, 3);
    ck_assert_int_eq(r.sch.model.ffn, 4 * 96); /* GPT-2's ratio when not given */
    ck_assert_int_eq(r.sch.model.blocks, 2);
    ck_assert_ptr_null(r.sch.model.layers);
    fe_free(&r);

    /* optimizer and precision lines before the model block still count */
    ck_assert_int_eq(fe_check(&r,
                              HEAD "compute(s,b,d) = 0\noptimizer adamw\nprecision bf16\n"
                                   "model gpt { layers = 2 }\n",
                              NULL, 0),
                     0);
    ck_assert_int_eq(r.sch.model.optimizer, PP_OPT_ADAMW);
    ck_assert_int_eq(r.sch.model.precision, PP_PREC_BF16);
    fe_free(&r);
    ck_assert_int_eq(
        fe_check(&r, HEAD "compute(s,b,d) = 0\noptimizer adamw\nmodel { blocks = 2 }\n", NULL, 0),
        0);
    ck_assert_int_eq(r.sch.model.optimizer, PP_OPT_ADAMW);
    fe_free(&r);

    char *text;
    int n = check_src(HEAD "compute(s,b,d) = 0\nmodel gtp { layers = 1 }\n", NULL, 0, &text);
    ck_assert_int_ge(n, 1);
    ck_diag(text, "t.pp:5:7: error: unknown model 'gtp': expected 'mlp', 'gpt' or 'llama'",
            "    5 | model gtp { layers = 1 }", "      |       ^~~");
    free(text);

    n = check_src(HEAD "compute(s,b,d) = 0\nmodel gpt {\n  embed = 10\n  heads = 4\n"
                       "  blocks = 2\n}\n",
                  NULL, 0, &text);
    ck_assert_int_eq(n, 2);
    ck_diag(text,
            "t.pp:8:3: error: unknown gpt model field 'blocks' (fields are vocab, context, "
            "embed, heads, ffn, layers, batch, tie)",
            "    8 |   blocks = 2", "      |   ^~~~~~");
    ck_diag(text,
            "t.pp:7:11: error: model heads = 4 does not divide embed = 10 (each head is "
            "embed/heads wide)",
            "    7 |   heads = 4", "      |           ^");
    free(text);

    n = check_src(HEAD "compute(s,b,d) = 0\nmodel { layers = 2 }\n", NULL, 0, &text);
    ck_assert_int_eq(n, 1);
    ck_has(text, "t.pp:5:9: error: unknown mlp model field 'layers' (fields are context, "
                 "embed, ffn, blocks, batch)\n");
    free(text);

    /* Every field in range, but the widest tensor past the kernels' int
     * (the plan reader refuses such a plan too). */
    n = check_src(HEAD "compute(s,b,d) = 0\nmodel gpt { vocab = 1048576; context = 4096; "
                       "batch = 1048576 }\n",
                  NULL, 0, &text);
    ck_assert_int_eq(n, 1);
    ck_has(text, "t.pp:5:1: error: model gpt: its widest activation tensor (batch * context rows "
                 "of max(3 * embed, ffn, vocab)) would have 4503599627370496 elements, more than "
                 "the kernels can index (2147483647): make batch, context or the widths smaller\n");
    free(text);
}
END_TEST

/* `layers` (gpt) and `blocks` (mlp) may use s, and only s: each stage gets
 * its own count, checked stage by stage. */
START_TEST(test_model_layers_per_stage)
{
    fe_run r;
    ck_assert_int_eq(fe_check(&r,
                              HEAD "compute(s,b,d) = s\n"
                                   "model gpt { layers = s == 0 || s == S - 1 ? 1 : 2 }\n",
                              NULL, 0),
                     0);
    ck_assert_ptr_nonnull(r.sch.model.layers);
    ck_assert_int_eq(pp_model_layers(&r.sch.model, 0), 1);
    ck_assert_int_eq(pp_model_layers(&r.sch.model, 1), 2);
    ck_assert_int_eq(pp_model_layers(&r.sch.model, 2), 2);
    ck_assert_int_eq(pp_model_layers(&r.sch.model, 3), 1);
    fe_free(&r);

    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = s\nmodel { blocks = s % 2 }\n", NULL, 0),
                     0);
    ck_assert_int_eq(pp_model_layers(&r.sch.model, 0), 0);
    ck_assert_int_eq(pp_model_layers(&r.sch.model, 3), 1);
    fe_free(&r);

    char *text;
    ck_assert_int_eq(
        check_src(HEAD "compute(s,b,d) = s\nmodel { blocks = b + 1 }\n", NULL, 0, &text), 1);
    ck_diag(text,
            "t.pp:5:18: error: 'b' cannot be used in the model's blocks: only s (the "
            "stage) can",
            "    5 | model { blocks = b + 1 }", "      |                  ^");
    free(text);

    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = s\nmodel { ffn = s + 1 }\n", NULL, 0, &text),
                     1);
    ck_has(text, "t.pp:5:15: error: 's' is a job variable and cannot be used in the model block\n");
    free(text);

    ck_assert_int_eq(
        check_src(HEAD "compute(s,b,d) = s\nmodel gpt { layers = 3 - s * 2 }\n", NULL, 0, &text),
        1);
    ck_has(text, "t.pp:5:24: error: model layers = -1 at s = 2 is out of range [0, 1024]\n");
    free(text);

    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = s\nmodel gpt { layers = 6 + 6 / (s - 1) }\n",
                               NULL, 0, &text),
                     1);
    ck_has(text, "error: division by zero (at s = 1)\n");
    free(text);
}
END_TEST

START_TEST(test_worker_variable)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = w\n", NULL, 0, &text), 1);
    ck_diag(text, "t.pp:4:18: error: 'w' (the worker) is only defined in 'limit inflight'",
            "    4 | compute(s,b,d) = w", "      |                  ^");
    free(text);

    /* w is what limit inflight is for */
    fe_run r;
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\nlimit inflight = w + 1\n", NULL, 0), 0);
    pp_jobtable t;
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 0);
    ck_assert_ptr_nonnull(t.inflight);
    ck_assert_int_eq(t.inflight[0], 1);
    ck_assert_int_eq(t.inflight[1], 2);
    pp_jobtable_free(&t);
    fe_free(&r);

    /* s, b, d are not: once directly, and once through a let */
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = 0\nlimit inflight = w + s\n", NULL, 0, &text),
                     1);
    ck_diag(text,
            "t.pp:5:22: error: 's' is a job variable and cannot be used in 'limit inflight' (it "
            "may use w and params)",
            "    5 | limit inflight = w + s", "      |                      ^");
    free(text);
    ck_assert_int_eq(
        check_src(HEAD "let a = b\ncompute(s,b,d) = 0\nlimit inflight = a\n", NULL, 0, &text), 1);
    ck_has(text, "t.pp:6:18: error: 'limit inflight' may use w and params, not s, b or d\n");
    free(text);
}
END_TEST

START_TEST(test_job_variable_in_param)
{
    char *text;
    int n = check_src(HEAD "param X = s\nparam Y = b + d\ncompute(s,b,d) = 0\n", NULL, 0, &text);
    ck_assert_int_eq(n, 3);
    ck_diag(text, "t.pp:4:11: error: 's' is a job variable and cannot be used in a param",
            "    4 | param X = s", "      |           ^");
    ck_has(text, "t.pp:5:11: error: 'b' is a job variable and cannot be used in a param\n");
    ck_has(text, "t.pp:5:15: error: 'd' is a job variable and cannot be used in a param\n");
    free(text);

    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = 0\nmodel { embed = s }\n", NULL, 0, &text),
                     1);
    ck_has(text, "t.pp:5:17: error: 's' is a job variable and cannot be used in the model block\n");
    free(text);
}
END_TEST

START_TEST(test_missing_compute)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "weights(s,b,d) = 0\n", NULL, 0, &text), 1);
    ck_assert_str_eq(text, "t.pp: error: the schedule has no 'compute(s,b,d) = ...': every "
                           "schedule says where each job runs\n");
    free(text);
}
END_TEST

START_TEST(test_missing_counts)
{
    char *text;
    ck_assert_int_eq(check_src("param X = 1\ncompute(s,b,d) = 0\n", NULL, 0, &text), 3);
    ck_has(text, "t.pp: error: the schedule defines no 'S' (the number of stages): add 'param S "
                 "= ...'\n");
    ck_has(text, "t.pp: error: the schedule defines no 'B' (the number of microbatches): add "
                 "'param B = ...'\n");
    ck_has(text, "t.pp: error: the schedule defines no 'W' (the number of workers): add 'param W "
                 "= ...'\n");
    ck_lacks(text, " | "); /* no source excerpt for an error with no position */
    free(text);

    /* a let named S is not the count */
    ck_assert_int_eq(
        check_src("param B = 1\nparam W = 1\nlet S = 4\ncompute(s,b,d) = 0\n", NULL, 0, &text), 1);
    ck_has(text, "defines no 'S'");
    free(text);

    /* counts out of range point at the param */
    ck_assert_int_eq(check_src("param S = 0\nparam B = 2\nparam W = 100000\ncompute(s,b,d) = 0\n",
                               NULL, 0, &text),
                     2);
    ck_diag(text, "t.pp:1:7: error: S = 0 is out of range [1, 1048576]", "    1 | param S = 0",
            "      |       ^");
    ck_has(text, "t.pp:3:7: error: W = 100000 is out of range [1, 65536]\n");
    free(text);
}
END_TEST

START_TEST(test_define_unknown)
{
    char *text;
    const pp_define defs[] = {{"Q", 3}, {"S", 2}};
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = 0\n", defs, 2, &text), 1);
    ck_assert_str_eq(text, "t.pp: error: -D Q=3: the schedule has no param 'Q'\n");
    free(text);

    /* -D names params only, not lets */
    const pp_define let_def = {"a", 1};
    ck_assert_int_eq(check_src(HEAD "let a = 2\ncompute(s,b,d) = 0\n", &let_def, 1, &text), 1);
    ck_has(text, "-D a=1: the schedule has no param 'a'");
    free(text);
}
END_TEST

START_TEST(test_define_overrides_before_use)
{
    const char *src = "param S = 4\nparam B = 2 * S\nparam W = S\nparam P = W * 10 + B\n"
                      "compute(s,b,d) = s\n";
    fe_run r;
    ck_assert_int_eq(fe_check(&r, src, NULL, 0), 0);
    ck_assert_int_eq(r.sch.S, 4);
    ck_assert_int_eq(r.sch.B, 8);
    ck_assert_int_eq(r.sch.W, 4);
    ck_assert_int_eq(r.sch.params[3].value, 48);
    fe_free(&r);

    /* -D S=8: the later defaults that use S see 8 */
    const pp_define s8 = {"S", 8};
    ck_assert_int_eq(fe_check(&r, src, &s8, 1), 0);
    ck_assert_int_eq(r.sch.S, 8);
    ck_assert_int_eq(r.sch.B, 16);
    ck_assert_int_eq(r.sch.W, 8);
    ck_assert_int_eq(r.sch.params[3].value, 96);
    ck_assert_str_eq(fe_text(&r), "");
    fe_free(&r);

    /* overriding the dependent param itself wins over its default */
    const pp_define both[] = {{"S", 8}, {"W", 2}};
    ck_assert_int_eq(fe_check(&r, src, both, 2), 0);
    ck_assert_int_eq(r.sch.W, 2);
    ck_assert_int_eq(r.sch.params[3].value, 36);
    fe_free(&r);

    /* an override is range-checked like a default */
    const pp_define s0 = {"S", 0};
    char *text;
    ck_assert_int_ge(check_src(src, &s0, 1, &text), 1);
    ck_has(text, "t.pp:1:7: error: S = 0 is out of range [1, 1048576]\n");
    free(text);
}
END_TEST

START_TEST(test_several_errors)
{
    char *text;
    const pp_define def = {"Nope", 1};
    int n = check_src(HEAD "param X = s\n"                 /* 4: job variable in a param */
                           "let a = zz\n"                  /* 5: unknown name */
                           "compute(s,b,d) = a + max(1)\n" /* 6: arg count */
                           "cost B = 1 / q\n"              /* 7: unknown name */
                           "priority(s,b,d) = w\n"         /* 8: w outside limit */
                           "model { nope = 1 }\n",         /* 9: unknown field */
                      &def, 1, &text);
    ck_assert_int_eq(n, 7); /* and the -D */
    ck_assert_int_eq(count_of(text, ": error: "), 7);
    ck_has(text, "t.pp:4:11: error:");
    ck_has(text, "t.pp:5:9: error:");
    ck_has(text, "t.pp:6:22: error:");
    ck_has(text, "t.pp:7:14: error:");
    ck_has(text, "t.pp:8:19: error:");
    ck_has(text, "t.pp:9:9: error:");
    ck_has(text, "t.pp: error: -D Nope=1");
    free(text);

    /* statements given twice */
    n = check_src(HEAD "compute(s,b,d) = 0\ncompute(s,b,d) = 1\norder greedy\norder strict\n"
                       "split backward\nsplit backward\n",
                  NULL, 0, &text);
    ck_assert_int_eq(n, 3);
    ck_has(text, "t.pp:5:1: error: compute(s,b,d) is given more than once\n");
    ck_has(text, "t.pp:7:1: error: order is given more than once\n");
    ck_has(text, "t.pp:9:1: error: split backward is given more than once\n");
    free(text);
}
END_TEST

START_TEST(test_function_calls)
{
    char *text;
    int n = check_src(HEAD "compute(s,b,d) = min(s) + abs(s, b) + foo(1) + max(1, 2)\n", NULL, 0,
                      &text);
    ck_assert_int_eq(n, 3);
    ck_diag(text, "t.pp:4:18: error: 'min' takes 2 arguments, found 1",
            "    4 | compute(s,b,d) = min(s) + abs(s, b) + foo(1) + max(1, 2)",
            "      |                  ^~~~~~");
    ck_diag(text, "t.pp:4:27: error: 'abs' takes 1 argument, found 2",
            "    4 | compute(s,b,d) = min(s) + abs(s, b) + foo(1) + max(1, 2)",
            "      |                           ^~~~~~~~~");
    ck_diag(text, "t.pp:4:39: error: unknown function 'foo' (functions are min, max, abs)",
            "    4 | compute(s,b,d) = min(s) + abs(s, b) + foo(1) + max(1, 2)",
            "      |                                       ^~~~~~");
    free(text);

    /* the arguments of a bad call are still checked */
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = bar(zz)\n", NULL, 0, &text), 2);
    ck_has(text, "unknown name 'zz'");
    free(text);
}
END_TEST

START_TEST(test_direction_literals)
{
    /* B is a param (5) and W a param (2); F is not a param. */
    const char *src = "param S = 4\nparam B = 5\nparam W = 2\ncompute(s,b,d) = 0\n"
                      "let back = d == B\n"
                      "let back2 = B == d\n"
                      "let notw = d != W\n"
                      "let count = B\n"
                      "let before = b < B\n"
                      "let fwd = F\n"
                      "let F = 7\n"
                      "let fl = F\n"
                      "let isf = d == F\n";
    fe_run r;
    ck_assert_int_eq(fe_check(&r, src, NULL, 0), 0);
    pp_env fwd = {1, 4, DIR_F, 0}, bwd = {1, 4, DIR_B, 0}, wgt = {1, 9, DIR_W, 0};
    ck_assert_int_eq(eval_let(&r.sch, "back", bwd), 1);
    ck_assert_int_eq(eval_let(&r.sch, "back", fwd), 0);
    ck_assert_int_eq(eval_let(&r.sch, "back2", bwd), 1);
    ck_assert_int_eq(eval_let(&r.sch, "back2", wgt), 0);
    ck_assert_int_eq(eval_let(&r.sch, "notw", wgt), 0);
    ck_assert_int_eq(eval_let(&r.sch, "notw", bwd), 1);
    ck_assert_int_eq(eval_let(&r.sch, "count", fwd), 5); /* elsewhere B is the count */
    ck_assert_int_eq(eval_let(&r.sch, "before", fwd), 1);
    ck_assert_int_eq(eval_let(&r.sch, "before", wgt), 0);
    ck_assert_int_eq(eval_let(&r.sch, "fwd", bwd), DIR_F); /* no param F: the direction */
    ck_assert_int_eq(eval_let(&r.sch, "fl", bwd), 7);      /* after `let F`: the let */
    ck_assert_int_eq(eval_let(&r.sch, "isf", fwd), 1);     /* opposite d: still the direction */
    ck_assert_int_eq(eval_let(&r.sch, "isf", bwd), 0);
    fe_free(&r);
}
END_TEST

/* ------------------------------------------------ evaluation at each job */

/* cost latency / bandwidth take params only and must not be negative. */
START_TEST(test_transfer_costs)
{
    char *text;
    ck_assert_int_eq(check_src(HEAD "compute(s,b,d) = 0\ncost latency = s\n", NULL, 0, &text), 1);
    ck_diag(text,
            "t.pp:5:16: error: 's' is a job variable and cannot be used in 'cost latency' (it may "
            "use params)",
            "    5 | cost latency = s", "      |                ^");
    free(text);
    fe_run r;
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\ncost bandwidth = 1 - S\n", NULL, 0), 0);
    pp_jobtable t;
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 1);
    ck_diag(fe_text(&r), "t.pp:5:20: error: cost bandwidth = -3: it must not be negative",
            "    5 | cost bandwidth = 1 - S", "      |                    ^");
    pp_jobtable_free(&t);
    fe_free(&r);
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = s % W\ncost latency = 2\n", NULL, 0), 0);
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 0);
    ck_assert_double_eq(t.latency, 2);
    ck_assert_double_eq(t.xfer[job_id(&t.js, 1, 0, 0)], 2); /* F(1,0) on worker 1, its input on 0 */
    ck_assert_double_eq(t.xfer[job_id(&t.js, 2, 0, 0)], 2);
    ck_assert_double_eq(t.xfer[job_id(&t.js, 0, 0, 0)], 0); /* loads its microbatch */
    pp_jobtable_free(&t);
    fe_free(&r);
}
END_TEST

START_TEST(test_placement_out_of_range)
{
    fe_run r;
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = s\n", NULL, 0), 0);
    pp_jobtable t;
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 1);
    const char *text = fe_text(&r);
    ck_diag(text,
            "t.pp:4:18: error: compute = 2 at (s=2, b=0, d=F) is outside the workers [0, W=2)",
            "    4 | compute(s,b,d) = s", "      |                  ^");
    /* s = 2, 3 for b = 0, 1 and d = F, B: 8 jobs, the first reported */
    ck_has(text, "  (the range check of compute failed at 7 more jobs)\n");
    ck_assert_int_eq(r.d.errors, 1);
    pp_jobtable_free(&t);
    fe_free(&r);

    /* weights, below zero; the caret is on the expression's top node */
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\nweights(s,b,d) = b - 1\n", NULL, 0), 0);
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 1);
    text = fe_text(&r);
    ck_diag(text,
            "t.pp:5:20: error: weights = -1 at (s=0, b=0, d=F) is outside the workers [0, W=2)",
            "    5 | weights(s,b,d) = b - 1", "      |                    ^");
    ck_has(text, "  (the range check of weights failed at 7 more jobs)\n");
    pp_jobtable_free(&t);
    fe_free(&r);

    /* a single failing job has no count note */
    ck_assert_int_eq(fe_check(&r,
                              HEAD "split backward\n"
                                   "compute(s,b,d) = s == 3 && b == 1 && d == W ? 2 : 0\n",
                              NULL, 0),
                     0);
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 1);
    text = fe_text(&r);
    ck_has(text, "compute = 2 at (s=3, b=1, d=W) is outside the workers [0, W=2)\n");
    ck_lacks(text, "more job");
    pp_jobtable_free(&t);
    fe_free(&r);
}
END_TEST

START_TEST(test_division_by_zero_at_job)
{
    fe_run r;
    ck_assert_int_eq(fe_check(&r,
                              HEAD "compute(s,b,d) = 0\nlet k = b - 1\n"
                                   "priority(s,b,d) = 10 / k + s\n",
                              NULL, 0),
                     0);
    pp_jobtable t;
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 1);
    const char *text = fe_text(&r);
    ck_diag(text, "t.pp:6:22: error: division by zero in priority(s,b,d) at (s=0, b=1, d=F)",
            "    6 | priority(s,b,d) = 10 / k + s", "      |                      ^");
    /* b = 1 at every s and d: 4 * 2 jobs */
    ck_has(text, "  (priority(s,b,d) failed at 7 more jobs)\n");
    pp_jobtable_free(&t);
    fe_free(&r);

    /* a constant division by zero in a param is found by the checker */
    char *msg;
    ck_assert_int_eq(check_src(HEAD "param X = 1 % (S - 4)\ncompute(s,b,d) = 0\n", NULL, 0, &msg),
                     1);
    ck_diag(msg, "t.pp:4:13: error: division by zero", "    4 | param X = 1 % (S - 4)",
            "      |             ^");
    free(msg);
}
END_TEST

START_TEST(test_overflow_at_job)
{
    /* 10^18 * (s + 1) fits up to s = 8; -D S=10 reaches s = 9 */
    const pp_define s10 = {"S", 10};
    fe_run r;
    ck_assert_int_eq(fe_check(&r,
                              HEAD "compute(s,b,d) = 0\n"
                                   "priority(s,b,d) = 1000000000000 * 1000000 * (s + 1)\n",
                              &s10, 1),
                     0);
    pp_jobtable t;
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 1);
    const char *text = fe_text(&r);
    ck_diag(text, "t.pp:5:43: error: integer overflow in priority(s,b,d) at (s=9, b=0, d=F)",
            "    5 | priority(s,b,d) = 1000000000000 * 1000000 * (s + 1)",
            "      |                                           ^");
    ck_has(text, "  (priority(s,b,d) failed at 3 more jobs)\n");
    ck_assert_int_eq(t.priority[job_id(&t.js, 8, 1, DIR_B)], 9000000000000000000LL);
    pp_jobtable_free(&t);
    fe_free(&r);
}
END_TEST

START_TEST(test_non_positive_cost)
{
    fe_run r;
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\ncost F = 1 - s\ncost B = 2\n", NULL, 0),
                     0);
    pp_jobtable t;
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 1);
    const char *text = fe_text(&r);
    ck_diag(text, "t.pp:5:12: error: cost F = 0 at (s=1, b=0, d=F): costs must be positive",
            "    5 | cost F = 1 - s", "      |            ^");
    pp_jobtable_free(&t);
    fe_free(&r);

    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\ncost F = 3\ncost B = s + 1\n", NULL, 0),
                     0);
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 0);
    ck_assert_str_eq(fe_text(&r), "");
    for (int j = 0; j < job_count(&t.js); j++)
        ck_assert(t.cost[j] == (job_d(&t.js, j) == DIR_F ? 3.0 : job_s(&t.js, j) + 1.0));
    pp_jobtable_free(&t);
    fe_free(&r);
}
END_TEST

START_TEST(test_inflight_below_one)
{
    fe_run r;
    ck_assert_int_eq(fe_check(&r, HEAD "compute(s,b,d) = 0\nlimit inflight = w - 1\n", NULL, 0), 0);
    pp_jobtable t;
    ck_assert_int_eq(pp_jobtable_build(&t, &r.sch, NULL), 1);
    ck_diag(fe_text(&r), "t.pp:5:20: error: limit inflight = -1 at worker 0: it must be at least 1",
            "    5 | limit inflight = w - 1", "      |                    ^");
    pp_jobtable_free(&t);
    fe_free(&r);
}
END_TEST

/* ---------------------------------------------------------------- suite */

/* ------------------------------------------ found by the fuzz target */

/* A param default with a bad call is reported, not evaluated (it crashed). */
START_TEST(test_bad_call_in_param)
{
    char *text;
    ck_assert_int_ge(check_src("param S = min(1)\nparam B = foo(1)\nparam W = 1\n"
                               "compute(s,b,d) = 0\n",
                               NULL, 0, &text),
                     2);
    ck_has(text, "'min' takes 2 arguments, found 1");
    ck_has(text, "unknown function 'foo'");
    free(text);
}
END_TEST

/* Each let is evaluated once per job: a chain of 60 lets that each use the
 * previous one twice would take 2^60 steps otherwise (it hung). */
START_TEST(test_let_chain_is_linear)
{
    char src[8192];
    int n = snprintf(src, sizeof src, HEAD "let a0 = s + 1\n");
    for (int i = 1; i <= 60; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "let a%d = a%d + a%d - a%d\n", i, i - 1,
                      i - 1, i - 1);
    snprintf(src + n, sizeof src - (size_t)n, "compute(s,b,d) = a60 %% W\n");
    fe_run r;
    ck_assert_int_eq(fe_check(&r, src, NULL, 0), 0);
    pp_env env = {2, 0, 0, 0};
    long long v = 0;
    const pp_expr *where = NULL;
    ck_assert_int_eq(pp_eval(&r.sch, r.sch.fn[FN_COMPUTE], &env, &v, &where), EVAL_OK);
    ck_assert_int_eq(v, (2 + 1) % 2); /* a60 = a0 = s + 1, W = 2 */
    fe_free(&r);
}
END_TEST

/* Expressions deeper than the limit are an error, not a stack overflow. */
START_TEST(test_depth_limit)
{
    size_t n = 2 * 10001 + 64;
    char *src = malloc(strlen(HEAD) + n + 64);
    char *p = src + sprintf(src, HEAD "compute(s,b,d) = 0");
    for (int i = 0; i < 10001; i++)
        p += sprintf(p, "+0");
    strcpy(p, "\n");
    char *text;
    ck_assert_int_ge(check_src(src, NULL, 0, &text), 1);
    ck_has(text, "expression nested more than 10000 levels deep");
    free(text);
    free(src);
}
END_TEST

Suite *frontend_suite(void)
{
    Suite *s = suite_create("frontend");
    TCase *scan = tcase_create("scanner");
    tcase_add_test(scan, test_clean_file);
    tcase_add_test(scan, test_unexpected_character);
    tcase_add_test(scan, test_unexpected_byte);
    tcase_add_test(scan, test_caret_keeps_tabs);
    tcase_add_test(scan, test_literal_too_large);
    suite_add_tcase(s, scan);

    TCase *parse = tcase_create("parser");
    tcase_add_test(parse, test_syntax_error);
    tcase_add_test(parse, test_syntax_error_expecting);
    tcase_add_test(parse, test_syntax_error_at_eof);
    tcase_add_test(parse, test_syntax_error_swallows_param);
    tcase_add_test(parse, test_wrong_function_head);
    tcase_add_test(parse, test_unknown_words);
    tcase_add_test(parse, test_optimizer);
    tcase_add_test(parse, test_precision);
    suite_add_tcase(s, parse);

    TCase *check = tcase_create("checker");
    tcase_add_test(check, test_unknown_name);
    tcase_add_test(check, test_used_before_definition);
    tcase_add_test(check, test_redefinition);
    tcase_add_test(check, test_model_fields);
    tcase_add_test(check, test_model_gpt);
    tcase_add_test(check, test_model_layers_per_stage);
    tcase_add_test(check, test_worker_variable);
    tcase_add_test(check, test_job_variable_in_param);
    tcase_add_test(check, test_missing_compute);
    tcase_add_test(check, test_missing_counts);
    tcase_add_test(check, test_define_unknown);
    tcase_add_test(check, test_define_overrides_before_use);
    tcase_add_test(check, test_several_errors);
    tcase_add_test(check, test_function_calls);
    tcase_add_test(check, test_direction_literals);
    suite_add_tcase(s, check);

    TCase *jobs = tcase_create("jobtable");
    tcase_add_test(jobs, test_placement_out_of_range);
    tcase_add_test(jobs, test_transfer_costs);
    tcase_add_test(jobs, test_division_by_zero_at_job);
    tcase_add_test(jobs, test_overflow_at_job);
    tcase_add_test(jobs, test_non_positive_cost);
    tcase_add_test(jobs, test_inflight_below_one);
    suite_add_tcase(s, jobs);

    TCase *fuzz = tcase_create("fuzz findings");
    tcase_add_test(fuzz, test_bad_call_in_param);
    tcase_add_test(fuzz, test_let_chain_is_linear);
    tcase_add_test(fuzz, test_depth_limit);
    suite_add_tcase(s, fuzz);
    return s;
}
