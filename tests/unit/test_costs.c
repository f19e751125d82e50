/* test_costs.c - unit tests of the costs file (compiler/costs.c, which
 * reads JSON with jansson): valid files, scalar and per-stage costs, absent
 * keys, one test per kind of error (each must name the right line:col and
 * say what is wrong; syntax errors in jansson's words), loading from disk,
 * and a deterministic mutation fuzz loop that must never crash (run it
 * under ASan/UBSan). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mkstemp, mkdtemp */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../compiler/compile.h"
#include "../../compiler/costs.h"
#include "../../compiler/link_bucket.h"
#include "../../vm/link_fit.h"
#include "suites.h"
#include "testutil.h"

/* ------------------------------------------------------------- fixtures */

/* The example of costs.h. */
static const char full_file[] = "{\n"
                                "  \"F\": 1.5,\n"
                                "  \"B\": [3.0, 3.0, 3.1, 3.4],\n"
                                "  \"W\": 1.2,\n"
                                "  \"latency\": 2e-5,\n"
                                "  \"bandwidth\": 2.5e10\n"
                                "}\n";

static int costs_is_empty(const pp_costs *c)
{
    pp_costs zero;
    memset(&zero, 0, sizeof zero);
    return memcmp(c, &zero, sizeof zero) == 0;
}

/* Parse text[0..len) into c, which must succeed. */
static void ok_len(pp_costs *c, const char *text, size_t len)
{
    char err[512];
    int rc = pp_costs_parse(c, "c.json", text, len, err, sizeof err);
    ck_assert_msg(rc == 0, "rejected %s: %s", text, err);
    ck_assert_str_eq(err, "");
}

static void ok(pp_costs *c, const char *text) { ok_len(c, text, strlen(text)); }

/* Parse text[0..len), which must fail with a message that starts with
 * "c.json:" `where` ": " and contains `words`, leaving c empty. */
static void err_len(const char *text, size_t len, const char *where, const char *words)
{
    pp_costs c;
    char err[512], prefix[64];
    int rc = pp_costs_parse(&c, "c.json", text, len, err, sizeof err);
    ck_assert_msg(rc == -1, "accepted %s", text);
    snprintf(prefix, sizeof prefix, "c.json:%s: ", where);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "message \"%s\" does not start \"%s\"",
                  err, prefix);
    ck_assert_msg(strstr(err, words) != NULL, "message \"%s\" lacks \"%s\"", err, words);
    ck_assert(costs_is_empty(&c));
    pp_costs_free(&c);
}

static void err_at(const char *text, const char *where, const char *words)
{
    err_len(text, strlen(text), where, words);
}

/* --------------------------------------------------------------- valid */

START_TEST(test_full_file)
{
    pp_costs c;
    ok(&c, full_file);
    ck_assert_int_eq(c.n[0], 1);
    ck_assert_double_eq(c.dir[0][0], 1.5);
    ck_assert_int_eq(c.n[1], 4);
    ck_assert_double_eq(c.dir[1][0], 3.0);
    ck_assert_double_eq(c.dir[1][1], 3.0);
    ck_assert_double_eq(c.dir[1][2], 3.1);
    ck_assert_double_eq(c.dir[1][3], 3.4);
    ck_assert_int_eq(c.n[2], 1);
    ck_assert_double_eq(c.dir[2][0], 1.2);
    ck_assert_int_eq(c.has_latency, 1);
    ck_assert_double_eq(c.latency, 2e-5);
    ck_assert_int_eq(c.has_bandwidth, 1);
    ck_assert_double_eq(c.bandwidth, 2.5e10);
    pp_costs_free(&c);
    ck_assert(costs_is_empty(&c));
    pp_costs_free(&c); /* twice is harmless */
}
END_TEST

START_TEST(test_scalar_and_per_stage)
{
    pp_costs c;
    ok(&c, "{\"F\": 2}");
    ck_assert_int_eq(c.n[0], 1);
    ck_assert_double_eq(c.dir[0][0], 2.0);
    ck_assert_ptr_null(c.dir[1]);
    pp_costs_free(&c);

    ok(&c, "{\"F\": [2]}"); /* a one-element array is one cost for every stage too */
    ck_assert_int_eq(c.n[0], 1);
    ck_assert_double_eq(c.dir[0][0], 2.0);
    pp_costs_free(&c);

    /* any length is stored; 1-or-S is the caller's check */
    ok(&c, "{\"B\": [1, 2, 3, 4, 5, 6, 7], \"W\": [0.5, 0.25]}");
    ck_assert_int_eq(c.n[1], 7);
    for (int i = 0; i < 7; i++)
        ck_assert_double_eq(c.dir[1][i], i + 1);
    ck_assert_int_eq(c.n[2], 2);
    ck_assert_double_eq(c.dir[2][1], 0.25);
    ck_assert_ptr_null(c.dir[0]);
    ck_assert_int_eq(c.n[0], 0);
    pp_costs_free(&c);
}
END_TEST

START_TEST(test_missing_keys)
{
    pp_costs c;
    ok(&c, "{}");
    ck_assert_str_eq(c.unit, "s"); /* the default unit is all an empty file gives */
    c.unit = NULL;
    ck_assert(costs_is_empty(&c));
    pp_costs_free(&c);

    ok(&c, " {\"latency\": 0} ");
    ck_assert_int_eq(c.has_latency, 1);
    ck_assert_double_eq(c.latency, 0);
    ck_assert_int_eq(c.has_bandwidth, 0);
    for (int d = 0; d < 3; d++) {
        ck_assert_ptr_null(c.dir[d]);
        ck_assert_int_eq(c.n[d], 0);
    }
    pp_costs_free(&c);

    ok(&c, "{\"bandwidth\": 0, \"W\": 1e-3}"); /* 0 = infinitely fast */
    ck_assert_int_eq(c.has_latency, 0);
    ck_assert_int_eq(c.has_bandwidth, 1);
    ck_assert_double_eq(c.bandwidth, 0);
    ck_assert_ptr_null(c.dir[0]);
    ck_assert_ptr_null(c.dir[1]);
    ck_assert_double_eq(c.dir[2][0], 1e-3);
    pp_costs_free(&c);
}
END_TEST

/* Number forms, escapes in keys, CRLF, tabs and a byte order mark. */
START_TEST(test_lexical_forms)
{
    pp_costs c;
    ok(&c, "\xef\xbb\xbf{\r\n\t\"\\u0046\" : [1E+2, 0.5e-1, 25e0, 4.9e-324],\r\n"
           "\t\"lat\\u0065ncy\": -0, \"bandwidth\": 1.0E1\r\n}\r\n");
    ck_assert_int_eq(c.n[0], 4);
    ck_assert_double_eq(c.dir[0][0], 100);
    ck_assert_double_eq(c.dir[0][1], 0.05);
    ck_assert_double_eq(c.dir[0][2], 25);
    ck_assert(c.dir[0][3] > 0); /* the smallest subnormal is still positive */
    ck_assert_int_eq(c.has_latency, 1);
    ck_assert_double_eq(c.latency, 0);
    ck_assert_double_eq(c.bandwidth, 10);
    pp_costs_free(&c);

    /* an integer too large for 64 bits is still a number (a double) */
    ok(&c, "{\"F\": 99999999999999999999}");
    ck_assert_double_eq(c.dir[0][0], 1e20);
    pp_costs_free(&c);

    /* the text needs no terminating NUL: only len bytes are read */
    const char text[] = "{\"F\": 12}99";
    ok_len(&c, text, 9);
    ck_assert_double_eq(c.dir[0][0], 12);
    pp_costs_free(&c);
}
END_TEST

/* ---------------------------------------------------------------- keys */

START_TEST(test_unknown_key)
{
    err_at("{\n  \"F\": 1,\n  \"lat\": 2\n}", "3:3", "unknown key \"lat\"");
    err_at("{\"f\": 1}", "1:2",
           "unknown key \"f\": expected \"F\", \"B\", \"W\", \"O\", \"G\", \"latency\", "
           "\"bandwidth\", \"unit\", \"overlap\", \"measured\", \"cores\", \"tensor_latency\", "
           "\"tensor_bandwidth\", \"host_bandwidth\", \"model\", \"backend\", "
           "\"ranks_per_core\", \"burst\", \"allreduce\", \"duplex\", \"allreduce_latency\", "
           "\"allreduce_bandwidth\", \"allreduce_ranks\", \"progress\", \"job_overhead\" or "
           "\"wake\"");
    /* keys are compared after unescaping, and shown escaped */
    err_at("{\"F\\u0000\": 1}", "1:10", "NUL byte in object key not supported"); /* jansson */
    err_at("{\"a\\nb\\\"\": 1}", "1:2", "unknown key \"a\\x0ab\\\"\"");
    err_at("{\"\": 1}", "1:2", "unknown key \"\"");
    /* a long key is cut */
    err_at("{\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\": 1}", "1:2",
           "unknown key \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\"");
}
END_TEST

/* "measured" (ppvm --profile's record of the steps) is skipped whatever the
 * object holds, and anything but an object is an error at its value. */
START_TEST(test_measured)
{
    pp_costs c;
    ok(&c, "{\"F\": 2, \"measured\": {\"steps\": 3, \"step\": 0.5, \"busy\": [0.1, 0.2], "
           "\"idle\": [0.4, 0.3], \"bubble\": 0.7}}");
    ck_assert_int_eq(c.n[0], 1);
    ck_assert_double_eq(c.dir[0][0], 2);
    ck_assert_int_eq(c.has_latency + c.has_bandwidth + c.has_overlap, 0);
    ck_assert_ptr_null(c.dir[1]);
    pp_costs_free(&c);
    ok(&c, "{\"measured\": {}}");
    ck_assert_ptr_null(c.dir[0]);
    pp_costs_free(&c);
    err_at("{\"F\": 1,\n \"measured\": 0.5}", "2:14",
           "expected an object (ppvm --profile's record of the run) for \"measured\", found a "
           "number");
    err_at("{\"measured\": [1]}", "1:14", "for \"measured\", found an array");
}
END_TEST

/* What ppvm --profile measured on (issue 29): "model" and "backend" are
 * kept, "ranks_per_core" a number > 0; other shapes are errors at the
 * value. */
START_TEST(test_measured_on)
{
    pp_costs c;
    ok(&c, "{\"F\": 2, \"model\": \"mlp context 8\", \"backend\": \"cpu\", "
           "\"ranks_per_core\": 2}");
    ck_assert_str_eq(c.model, "mlp context 8");
    ck_assert_str_eq(c.backend, "cpu");
    ck_assert_int_eq(c.has_ranks_per_core, 1);
    ck_assert_double_eq(c.ranks_per_core, 2);
    pp_costs_free(&c);
    ck_assert_ptr_null(c.model);
    err_at("{\"model\": 3}", "1:11",
           "expected a non-empty string (what ppvm --profile measured on) for \"model\", found a "
           "number");
    err_at("{\"backend\": \"\"}", "1:13", "for \"backend\", found an empty string");
    err_at("{\"ranks_per_core\": 0}", "1:20", "expected a number > 0 for \"ranks_per_core\"");
    err_at("{\"ranks_per_core\": -1}", "1:20", "expected a number >= 0 for \"ranks_per_core\"");
}
END_TEST

/* ppc --costs refuses a profile of another model, and takes one of this
 * model; a file without "model" (hand-written) is taken as before. */
START_TEST(test_costs_of_another_model)
{
    char *dir = temp_dir(), cmd[2048];
    static const char *const files[] = {
        "{\"F\": 2, \"model\": \"mlp context 8 embed 16 ffn 256 batch 16, 2 stages of 1 block, "
        "sgd, fp32\"}",
        "{\"F\": 2, \"model\": \"mlp context 8 embed 16 ffn 256 batch 16, 2 stages of 1 block, "
        "adamw, fp32\"}",
        "{\"F\": 2}",
    };
    static const int want[] = {0, 1, 0};
    for (int i = 0; i < 3; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/c.json", dir);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(files[i], f);
        fclose(f);
        snprintf(cmd, sizeof cmd,
                 "%s/bin/ppc %s/schedules/1f1b.pp -D S=2 -D B=8 -o %s/p -q --no-pictures "
                 "--costs %s 2>&1",
                 PP_ROOT, PP_ROOT, dir, path);
        char *out = run_expect(cmd, want[i]);
        if (want[i])
            ck_assert_msg(strstr(out, "was measured on another model (mlp context 8 embed 16 ffn "
                                      "256 batch 16, 2 stages of 1 block, adamw, fp32); this "
                                      "compile trains mlp context 8 embed 16 ffn 256 batch 16, 2 "
                                      "stages of 1 block, sgd, fp32"),
                          "%s", out);
        free(out);
    }
    remove_dir(dir);
}
END_TEST

/* "unit" names what the times are in; without it they are seconds (what
 * ppvm --profile writes). trace.json converts by pp_costs_unit_us. */
START_TEST(test_unit)
{
    pp_costs c;
    ok(&c, "{\"F\": 0.5}");
    ck_assert_str_eq(c.unit, "s");
    pp_costs_free(&c);
    ck_assert_ptr_null(c.unit);
    static const char *names[] = {"s", "ms", "us", "ns"};
    static const double us[] = {1e6, 1e3, 1, 1e-3};
    for (int i = 0; i < 4; i++) {
        char text[64];
        snprintf(text, sizeof text, "{\"unit\": \"%s\", \"F\": 2}", names[i]);
        ok(&c, text);
        ck_assert_str_eq(c.unit, names[i]);
        ck_assert_double_eq(c.dir[0][0], 2);
        ck_assert_double_eq(pp_costs_unit_us(c.unit), us[i]);
        pp_costs_free(&c);
    }
    ck_assert_double_eq(pp_costs_unit_us(NULL), 0);
    ck_assert_double_eq(pp_costs_unit_us("min"), 0);
    /* anything else is refused at the value, saying what would do */
    err_at("{\"F\": 1,\n \"unit\": \"sec\"}", "2:10",
           "expected \"s\", \"ms\", \"us\" or \"ns\" for \"unit\", found \"sec\"");
    err_at("{\"unit\": 1e-6}", "1:10",
           "expected \"s\", \"ms\", \"us\" or \"ns\" for \"unit\", found a number");
    err_at("{\"unit\": \"S\"}", "1:10", "found \"S\""); /* case matters: S is not s */
    err_at("{\"unit\": \"s\", \"unit\": \"ms\"}", "1:20", "duplicate object key");
}
END_TEST

START_TEST(test_duplicate_key)
{
    /* jansson's message (JSON_REJECT_DUPLICATES), at the second key's end */
    err_at("{\"F\": 1,\n \"F\": 2}", "2:4", "duplicate object key near '\"F\"'");
    err_at("{\"latency\": 1, \"l\\u0061tency\": 2}", "1:29", "duplicate object key");
    err_at("{\"B\": [1], \"W\": 1, \"B\": [1]}", "1:22", "duplicate object key near '\"B\"'");
}
END_TEST

/* -------------------------------------------------------------- values */

START_TEST(test_non_positive_cost)
{
    err_at("{\"F\": 0}", "1:7", "expected a positive cost for \"F\", found 0");
    err_at("{\"W\": -0}", "1:7", "expected a positive cost for \"W\", found -0");
    err_at("{\"B\": [1, 2, -3]}", "1:14", "expected a positive cost for \"B\"[2], found -3");
    err_at("{\"F\": 1e-400}", "1:7", "positive"); /* underflows to 0 */
}
END_TEST

/* O, the optimizer step per stage: like F, but 0 is allowed (a stage
 * without weights has next to nothing to update). */
START_TEST(test_optimizer_cost)
{
    pp_costs c;
    ok(&c, "{\"O\": [0, 0.25, 3]}");
    ck_assert_int_eq(c.n[PP_COSTS_O], 3);
    ck_assert_double_eq(c.dir[PP_COSTS_O][0], 0);
    ck_assert_double_eq(c.dir[PP_COSTS_O][2], 3);
    pp_costs_free(&c);
    ok(&c, "{\"O\": 0.5}");
    ck_assert_int_eq(c.n[PP_COSTS_O], 1);
    pp_costs_free(&c);
    err_at("{\"O\": -1}", "1:7", "expected a non-negative cost for \"O\", found -1");
    err_at("{\"O\": [1, \"x\"]}", "1:11", "expected a number for \"O\"[1], found a string");
    err_at("{\"O\": 1, \"O\": 2}", "1:12", "duplicate object key");
    /* "G", a returned gradient's add on its owner: the same shape */
    ok(&c, "{\"G\": [0, 0.5]}");
    ck_assert_int_eq(c.n[PP_COSTS_G], 2);
    ck_assert_double_eq(c.dir[PP_COSTS_G][1], 0.5);
    ck_assert_ptr_null(c.dir[PP_COSTS_O]);
    pp_costs_free(&c);
    err_at("{\"G\": -0.5}", "1:7", "expected a non-negative cost for \"G\", found -0.5");
}
END_TEST

START_TEST(test_negative_latency_bandwidth)
{
    err_at("{\"job_overhead\": -2}", "1:18",
           "expected a number >= 0 for \"job_overhead\", found -2");
    err_at("{\"latency\": -1e-3}", "1:13", "expected a number >= 0 for \"latency\", found -0.001");
    err_at("{\n\"bandwidth\":\n  -5}", "3:3", "expected a number >= 0 for \"bandwidth\", found -5");
}
END_TEST

START_TEST(test_wrong_type)
{
    err_at("{\"F\": \"1\"}", "1:7",
           "expected a number or an array of numbers for \"F\", found a string");
    err_at("{\"B\": true}", "1:7", "for \"B\", found a boolean");
    err_at("{\"W\": null}", "1:7", "for \"W\", found null");
    err_at("{\"F\": {}}", "1:7", "for \"F\", found an object");
    err_at("{\"F\": []}", "1:7", "non-empty array of numbers for \"F\", found an empty array");
    err_at("{\"F\": [1, [2]]}", "1:11", "expected a number for \"F\"[1], found an array");
    err_at("{\"B\": [1,\n \"2\"]}", "2:2", "expected a number for \"B\"[1], found a string");
    err_at("{\"latency\": [1]}", "1:13", "expected a number for \"latency\", found an array");
    err_at("{\"bandwidth\": false}", "1:15",
           "expected a number for \"bandwidth\", found a boolean");
    err_at("[1]", "1:1", "expected an object at the top level, found an array");
    err_at("\n  42 ", "2:3", "expected an object at the top level, found a number");
    err_at("\"F\"", "1:1", "at the top level, found a string");
    err_at("null", "1:1", "at the top level, found null");
}
END_TEST

/* 1e999 is valid JSON but overflows a double to inf: jansson refuses it,
 * at the number's last character. */
START_TEST(test_not_finite)
{
    err_at("{\"F\": 1e999}", "1:11", "real number overflow near '1e999'");
    err_at("{\"B\": [1, -1e999]}", "1:16", "real number overflow near '-1e999'");
    err_at("{\"bandwidth\": 1e400}", "1:19", "real number overflow");
    err_at("{\"latency\": -1e400}", "1:18", "real number overflow");
}
END_TEST

/* -------------------------------------------------------------- syntax */

/* Syntax errors are jansson's messages, at its line and column: those of
 * the last character it read (0 when it read none on that line). */
START_TEST(test_unterminated_string)
{
    err_at("{\"F\": 1,\n \"B", "2:3", "premature end of input near '\"B'");
    err_at("{\"F\\\": 1}", "1:9", "premature end of input");
    err_at("{\"F\": 1, \"B\": \"abc", "1:18", "premature end of input");
    err_at("{\"a\nb\": 1}", "1:3", "unexpected newline near '\"a'");
    err_at("{\"a\tb\": 1}", "1:3", "control character 0x9");
}
END_TEST

START_TEST(test_bad_escape)
{
    err_at("{\"F\\x\": 1}", "1:5", "invalid escape near '\"F\\x'");
    err_at("{\"F\\", "1:4", "invalid escape");
    err_at("{\"\\u00g0\": 1}", "1:7", "invalid escape near '\"\\u00g'");
    err_at("{\"\\u00", "1:6", "invalid escape");
    err_at("{\"\\uD800\": 1}", "1:9", "invalid Unicode '\\uD800'");
    err_at("{\"\\uD800\\u0041\": 1}", "1:15", "invalid Unicode '\\uD800\\u0041'");
    err_at("{\"\\uDC00\": 1}", "1:9", "invalid Unicode '\\uDC00'");
    err_at("{\"\xff\": 1}", "1:2", "unable to decode byte 0xff");
    err_at("{\"\xc0\xaf\": 1}", "1:2", "unable to decode byte 0xc0");     /* overlong '/' */
    err_at("{\"\xed\xa0\x80\": 1}", "1:2", "unable to decode byte 0xed"); /* an encoded surrogate */
    err_at("{\"\xe2\x82\": 1}", "1:2", "unable to decode byte 0xe2");     /* cut short */
}
END_TEST

START_TEST(test_bad_number)
{
    err_at("{\"F\": 01}", "1:7", "invalid token near '0'"); /* no leading zeros */
    err_at("{\"F\": -00}", "1:8", "invalid token near '-0'");
    err_at("{\"F\": 1.}", "1:8", "invalid token near '1.'");
    err_at("{\"F\": 1.e5}", "1:8", "invalid token near '1.'");
    err_at("{\"F\": -}", "1:7", "invalid token near '-'");
    err_at("-", "1:1", "invalid token near '-'");
    err_at("{\"F\": 1e}", "1:8", "invalid token near '1e'");
    err_at("{\"F\": 1e+}", "1:9", "invalid token near '1e+'");
    err_at("{\"F\": .5}", "1:7", "invalid token near '.'");
    err_at("{\"F\": +1}", "1:7", "invalid token near '+'");
    err_at("{\"F\": 1.5.2}", "1:10", "'}' expected near '.'");
    err_at("{\"F\": 0x10}", "1:8", "'}' expected near 'x'");
    err_at("{\"F\": NaN}", "1:9", "invalid token near 'NaN'");
    err_at("{\"F\": -Infinity}", "1:7", "invalid token near '-'");
    err_at("{\"F\": Infinity}", "1:14", "invalid token near 'Infinity'");
}
END_TEST

START_TEST(test_bad_structure)
{
    err_at("{\"F\": 1} x", "1:10", "end of file expected near 'x'");
    err_at("{\"F\": 1}}", "1:9", "end of file expected near '}'");
    err_at("{}{}", "1:3", "end of file expected");
    err_at("{\"F\": 1}\n\n  ,", "3:3", "end of file expected near ','");
    err_len("{\"F\": 1}\0", 9, "1:9", "end of file expected"); /* a NUL byte after the value */
    err_at("{\"F\" 1}", "1:6", "':' expected near '1'");
    err_at("{\"F\": 1 \"B\": 2}", "1:11", "'}' expected near '\"B\"'");
    err_at("{\"F\": 1,}", "1:9", "string or '}' expected near '}'");
    err_at("{,}", "1:2", "string or '}' expected near ','");
    err_at("{'F': 1}", "1:2", "string or '}' expected near '''");
    err_at("{F: 1}", "1:2", "string or '}' expected near 'F'");
    err_at("{\"B\": [1,]}", "1:10", "unexpected token near ']'");
    err_at("{\"B\": [1 2]}", "1:10", "']' expected near '2'");
    err_at("{\"B\": [1", "1:8", "']' expected near end of file");
    err_at("{\"F\": 1", "1:7", "'}' expected near end of file");
    err_at("{\"F\": 1 // x\n}", "1:9", "'}' expected near '/'");
    err_at("{\"F\": tru}", "1:9", "invalid token near 'tru'");
    err_at("{\"F\": truex}", "1:11", "invalid token near 'truex'");
    err_at("{\"F\": \x01}", "1:7", "invalid token near '\x01'");
}
END_TEST

START_TEST(test_empty_input)
{
    err_at("", "1:0", "unexpected token near end of file");
    err_at("  \n\t ", "2:2", "unexpected token near end of file");
    err_at("\xef\xbb\xbf", "1:0", "unexpected token near end of file"); /* only a byte order mark */
}
END_TEST

/* A "B" of `levels` nested arrays around 1: {"B": [[...[1]...]]}. */
static char *nested(int levels)
{
    size_t n = 16 + 2 * (size_t)levels;
    char *s = malloc(n), *p = s;
    ck_assert_ptr_nonnull(s);
    p += sprintf(p, "{\"B\": ");
    for (int i = 0; i < levels; i++)
        *p++ = '[';
    *p++ = '1';
    for (int i = 0; i < levels; i++)
        *p++ = ']';
    strcpy(p, "}");
    return s;
}

START_TEST(test_too_deep)
{
    /* object + 63 arrays: parses; then the shape is wrong */
    char *s = nested(63);
    err_at(s, "1:8", "expected a number for \"B\"[0], found an array");
    free(s);
    /* jansson stops at 2048 levels (its JSON_PARSER_MAX_DEPTH): the 2047th
     * '[' at column 7 + 2046 is read, then the next character */
    s = nested(2048);
    err_at(s, "1:2054", "maximum parsing depth reached");
    free(s);
    /* far deeper must fail just as fast, not overflow the stack */
    s = nested(1000000);
    err_at(s, "1:2054", "maximum parsing depth reached");
    free(s);
    err_at("{\"F\": {\"a\": {\"a\": 1}}}", "1:7", "found an object");
}
END_TEST

/* What the caller gets with no buffer, a tiny one, or no text. */
START_TEST(test_message_buffers)
{
    pp_costs c;
    char err[256];
    ck_assert_int_eq(pp_costs_parse(&c, "c.json", "{\"F\": 0}", 8, NULL, 0), -1);
    ck_assert_int_eq(pp_costs_parse(&c, "c.json", "{\"F\": 0}", 8, err, 3), -1);
    ck_assert_str_eq(err, "c.");
    ck_assert_int_eq(pp_costs_parse(&c, "c.json", "{\"F\": 1,}", 9, err, 3), -1);
    ck_assert_str_eq(err, "c.");
    ck_assert_int_eq(pp_costs_parse(&c, "c.json", NULL, 0, err, sizeof err), -1);
    ck_assert_str_eq(err, "c.json:1:0: unexpected token near end of file");
    ck_assert(costs_is_empty(&c));
}
END_TEST

/* ---------------------------------------------------------------- files */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_load_missing_file)
{
    pp_costs c;
    char err[512];
    ck_assert_int_eq(pp_costs_load(&c, "/nonexistent/dir/costs.json", err, sizeof err), -1);
    ck_assert_str_eq(err, "/nonexistent/dir/costs.json: cannot open: No such file or directory");
    ck_assert(costs_is_empty(&c));
}
END_TEST

START_TEST(test_load_files)
{
    char dir[] = "/tmp/test_costs.XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/costs.json", dir);
    pp_costs c;
    char err[512];

    write_file(path, full_file);
    ck_assert_int_eq(pp_costs_load(&c, path, err, sizeof err), 0);
    ck_assert_int_eq(c.n[1], 4);
    ck_assert_double_eq(c.dir[1][3], 3.4);
    ck_assert_double_eq(c.bandwidth, 2.5e10);
    pp_costs_free(&c);

    /* bigger than one read: many stages */
    size_t cap = 300000;
    char *big = malloc(cap), *p = big;
    p += sprintf(p, "{\"F\": [");
    for (int i = 0; i < 20000; i++)
        p += sprintf(p, "%s%d.5", i ? ", " : "", i);
    strcpy(p, "]}\n");
    write_file(path, big);
    free(big);
    ck_assert_int_eq(pp_costs_load(&c, path, err, sizeof err), 0);
    ck_assert_int_eq(c.n[0], 20000);
    ck_assert_double_eq(c.dir[0][19999], 19999.5);
    pp_costs_free(&c);

    /* messages name the path */
    write_file(path, "{\n  \"F\": 1,\n  \"X\": 2\n}\n");
    ck_assert_int_eq(pp_costs_load(&c, path, err, sizeof err), -1);
    char want[128];
    snprintf(want, sizeof want, "%s:3:3: unknown key \"X\"", path);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "message \"%s\"", err);
    ck_assert(costs_is_empty(&c));

    /* a directory (or a FIFO) is refused without being read */
    ck_assert_int_eq(pp_costs_load(&c, dir, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: cannot read: it is a directory, not a costs file", dir);
    ck_assert_str_eq(err, want);

    unlink(path);
    rmdir(dir);
}
END_TEST

/* ----------------------------------------------------------------- fuzz */

static unsigned long long fuzz_state;

static unsigned fuzz_next(void)
{
    fuzz_state = fuzz_state * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(fuzz_state >> 33);
}

/* One mutation of m[0..n) (room for cap bytes); returns the new length. */
static size_t fuzz_mutate(char *m, size_t n, size_t cap)
{
    static const char bytes[] = "{}[],:\"\\-+.eE0123456789 \nutfnalx\xff\xc3\x80";
    size_t at = n ? fuzz_next() % n : 0;
    switch (fuzz_next() % 5) {
    case 0: /* flip a bit */
        if (n)
            m[at] = (char)(m[at] ^ (1u << (fuzz_next() % 8)));
        return n;
    case 1: /* overwrite with a byte JSON cares about */
        if (n)
            m[at] = bytes[fuzz_next() % (sizeof bytes)]; /* NUL included */
        return n;
    case 2: /* delete */
        if (n) {
            memmove(m + at, m + at + 1, n - at - 1);
            n--;
        }
        return n;
    case 3: /* insert */
        if (n < cap) {
            memmove(m + at + 1, m + at, n - at);
            m[at] = bytes[fuzz_next() % (sizeof bytes - 1)];
            n++;
        }
        return n;
    default: /* truncate */
        return at;
    }
}

START_TEST(test_fuzz_mutations)
{
    static const char base[] = "{\n  \"F\": 1.5,\n  \"B\": [3.0, 3e0, 0.31e1, 34E-1],\n"
                               "  \"W\": [1.2],\n  \"latency\": 2e-5,\n  \"bandwidth\": 2.5e10\n"
                               "}\n";
    size_t len = sizeof base - 1, cap = len + 32;
    int accepted = 0, rejected = 0;
    fuzz_state = 20240611;
    for (int iter = 0; iter < 5000; iter++) {
        char *m = malloc(cap);
        memcpy(m, base, len);
        size_t n = len;
        int rounds = 1 + (int)(fuzz_next() % 3);
        for (int r = 0; r < rounds; r++)
            n = fuzz_mutate(m, n, cap);
        /* an exact-size copy with no NUL after it, so ASan catches any overread */
        char *exact = malloc(n ? n : 1);
        memcpy(exact, m, n);
        pp_costs c;
        char err[512];
        if (pp_costs_parse(&c, "f.json", exact, n, err, sizeof err) == 0) {
            ck_assert_str_eq(err, "");
            for (int d = 0; d < 3; d++)
                for (int i = 0; i < c.n[d]; i++)
                    ck_assert(isfinite(c.dir[d][i]) && c.dir[d][i] > 0);
            ck_assert(!c.has_latency || (isfinite(c.latency) && c.latency >= 0));
            ck_assert(!c.has_bandwidth || (isfinite(c.bandwidth) && c.bandwidth >= 0));
            accepted++;
        } else {
            ck_assert_msg(strncmp(err, "f.json:", 7) == 0, "message \"%s\"", err);
            ck_assert(strlen(err) > 12);
            ck_assert(costs_is_empty(&c));
            rejected++;
        }
        pp_costs_free(&c);
        free(exact);
        free(m);
    }
    /* the loop must exercise both outcomes */
    ck_assert_int_gt(accepted, 100);
    ck_assert_int_gt(rejected, 1000);
}
END_TEST

/* ------------------------------------------- the link (issue 29: tc tbf) */

/* "burst" (bytes >= 0) and "allreduce" ("ring" or "tree"): read, and
 * refused with what was expected. */
START_TEST(test_burst_allreduce_keys)
{
    pp_costs c;
    ok(&c, "{\"burst\": 65536, \"allreduce\": \"tree\"}");
    ck_assert_int_eq(c.has_burst, 1);
    ck_assert_double_eq(c.burst, 65536);
    ck_assert_int_eq(c.allreduce_tree, 1);
    pp_costs_free(&c);
    ok(&c, "{\"allreduce\": \"ring\"}");
    ck_assert_int_eq(c.has_burst, 0);
    ck_assert_int_eq(c.allreduce_tree, 0);
    pp_costs_free(&c);
    err_at("{\"burst\": -1}", "1:11", "expected a number >= 0 for \"burst\", found -1");
    err_at("{\"burst\": \"64k\"}", "1:11", "expected a number for \"burst\", found a string");
    err_at("{\"allreduce\": \"star\"}", "1:15",
           "expected \"ring\" or \"tree\" for \"allreduce\", found \"star\"");
    ok(&c, "{\"duplex\": \"half\"}");
    ck_assert_int_eq(c.half_duplex, 1);
    pp_costs_free(&c);
    err_at("{\"duplex\": \"simplex\"}", "1:12",
           "expected \"full\" or \"half\" for \"duplex\", found \"simplex\"");
    err_at("{\"allreduce\": 2}", "1:15",
           "expected \"ring\" or \"tree\" for \"allreduce\", found a");
}
END_TEST

/* "allreduce_latency", "allreduce_bandwidth" (numbers >= 0) and
 * "allreduce_ranks" (a whole number >= 2): one measured all-reduce, so the
 * three together or none. */
START_TEST(test_measured_allreduce_keys)
{
    pp_costs c;
    ok(&c, "{\"allreduce_latency\": 2e-6, \"allreduce_bandwidth\": 3e9, \"allreduce_ranks\": 4}");
    ck_assert_double_eq(c.allreduce_latency, 2e-6);
    ck_assert_double_eq(c.allreduce_bandwidth, 3e9);
    ck_assert_int_eq(c.allreduce_ranks, 4);
    pp_costs_free(&c);
    ok(&c, "{\"F\": 1}");
    ck_assert_int_eq(c.allreduce_ranks, 0);
    pp_costs_free(&c);
    err_at("{\"allreduce_latency\": 1, \"allreduce_ranks\": 2}", "1:2",
           "\"allreduce_latency\", \"allreduce_bandwidth\" and \"allreduce_ranks\" go together "
           "(one measured all-reduce), but \"allreduce_bandwidth\" is missing");
    err_at("{\"F\": 1, \"allreduce_ranks\": 2}", "1:10",
           "\"allreduce_latency\", \"allreduce_bandwidth\" and \"allreduce_ranks\" go together "
           "(one measured all-reduce), but \"allreduce_latency\" is missing");
    err_at("{\"allreduce_ranks\": 1}", "1:21",
           "expected a whole number of ranks in [2, 2147483647] for \"allreduce_ranks\", found 1");
    err_at(
        "{\"allreduce_ranks\": 2.5}", "1:21",
        "expected a whole number of ranks in [2, 2147483647] for \"allreduce_ranks\", found 2.5");
    err_at("{\"allreduce_ranks\": \"2\"}", "1:21",
           "expected a whole number of ranks for \"allreduce_ranks\", found a string");
    err_at("{\"allreduce_latency\": -1}", "1:23",
           "expected a number >= 0 for \"allreduce_latency\", found -1");
    err_at("{\"allreduce_bandwidth\": null}", "1:25",
           "expected a number for \"allreduce_bandwidth\", found null");
}
END_TEST

/* The links' token buckets (link_bucket.h): burst 100 bytes, 10 bytes a
 * second, latency 1 s, 3 workers. */
START_TEST(test_bucket)
{
    pp_jobtable t;
    memset(&t, 0, sizeof t);
    t.W = 3;
    t.burst = 100;
    t.bandwidth = 10;
    t.latency = 1;
    pp_links l;
    ck_assert_int_eq(pp_links_init(&l, &t), 0);
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 0, 1, 0, 50), 1, 1e-12);  /* inside: latency */
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 0, 1, 0, 100), 6, 1e-12); /* 50 left: 50 paid */
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 0, 2, 5, 10), 7, 1e-12);  /* queued, empty */
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 1, 0, 0, 100), 1, 1e-12); /* 1's own bucket */
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 0, 1, 100, 100), 101, 1e-12); /* refilled */
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 0, 1, 100, 1), 101.1, 1e-12);
    pp_links_free(&l);
    /* half duplex: 1 -> 0 waits until 0 -> 1 has left, with its own bucket */
    t.half_duplex = 1;
    ck_assert_int_eq(pp_links_init(&l, &t), 0);
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 0, 1, 0, 300), 21, 1e-12); /* 200 paid */
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 1, 0, 0, 100), 21, 1e-12); /* from 20, free */
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 2, 1, 0, 100), 1, 1e-12);  /* another pair */
    pp_links_free(&l);
    t.half_duplex = 0;
    t.burst = 0; /* no burst: latency + bytes / bandwidth, one message after another */
    ck_assert_int_eq(pp_links_init(&l, &t), 0);
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 0, 1, 0, 20), 3, 1e-12);
    ck_assert_double_eq_tol(pp_links_send(&l, &t, 0, 1, 0, 20), 5, 1e-12);
    pp_links_free(&l);
}
END_TEST

/* schedules/FILE -D S=2 -D B=B compiled to its report with the costs
 * `json` into *c, in a temporary directory *dir (the caller frees c, then
 * removes *dir). */
static void compile_with(const char *file, int B, const char *json, pp_compiled *c, char **dir)
{
    char path[600], sched[600];
    *dir = temp_dir();
    snprintf(path, sizeof path, "%s/c.json", *dir);
    snprintf(sched, sizeof sched, "%s/schedules/%s", PP_ROOT, file);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(json, f);
    fclose(f);
    pp_define defs[] = {{"S", 2}, {"B", B}};
    pp_compile_opts o = pp_compile_defaults();
    o.path = sched;
    o.defs = defs;
    o.ndefs = 2;
    o.costs = path;
    o.stop_after = PP_STAGE_REPORT;
    o.capture = 1;
    ck_assert_msg(pp_compile(&o, c) == PP_COMPILE_OK, "%s with %s: %s", file, json, c->msgs);
}

/* ppc's step for schedules/FILE -D S=2 -D B=B with the costs `json`; with
 * a measured link shape also the schedule's own step and the links' bound
 * (report.h's step_schedule, link_step; else *schedule = the step, *link =
 * 0). schedule and link may be NULL. */
static double steps_with(const char *file, int B, const char *json, double *schedule, double *link)
{
    char *dir;
    pp_compiled c;
    compile_with(file, B, json, &c, &dir);
    double step = c.rep.step;
    if (schedule)
        *schedule = c.rep.link_step > 0 ? c.rep.step_schedule : step;
    if (link)
        *link = c.rep.link_step;
    if (c.rep.link_step > 0) /* the step is the larger of the two */
        ck_assert_double_eq_tol(step, fmax(c.rep.step_schedule, c.rep.link_step), 1e-12);
    pp_compiled_free(&c);
    remove_dir(dir);
    return step;
}

static double step_with(const char *file, int B, const char *json)
{
    return steps_with(file, B, json, NULL, NULL);
}

/* The schedule's own step (the links' bound left out). */
static double schedule_with(const char *file, int B, const char *json)
{
    double schedule;
    steps_with(file, B, json, &schedule, NULL);
    return schedule;
}

/* What the burst and the tree change in ppc's step, against hand sums. */
START_TEST(test_link_prices)
{
    /* GPipe S=2 B=1, jobs of 1 s: F0, activation, F1, B1, gradient, B0 */
    double plain = step_with("gpipe.pp", 1, "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000}");
    double a = (plain - 4) / 2 * 1000; /* the activation's bytes (its gradient's as many) */
    ck_assert_msg(a > 0, "no transfer priced: step %g", plain);
    char json[256];
    snprintf(json, sizeof json, "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000, \"burst\": %.17g}", a);
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 1, json), 4, 1e-9); /* inside the burst */
    /* but step after step each worker sends a bytes (the activation, the
     * gradient) at 1000 bytes/s: the step is at least a / 1000 */
    double link;
    double step = steps_with("gpipe.pp", 1, json, NULL, &link);
    ck_assert_double_eq_tol(link, a / 1000, 1e-9);
    ck_assert_double_eq_tol(step, fmax(4, a / 1000), 1e-9);
    snprintf(json, sizeof json, "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000, \"burst\": %.17g}",
             a / 2);
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 1, json), 4 + a / 1000, 1e-9); /* half paid */
    ck_assert_double_eq_tol(
        step_with("gpipe.pp", 1, "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000, \"burst\": 0}"), plain,
        1e-12); /* 0 is no burst */

    /* B=2 with a burst of a + 512: the first activation (sent at 1) drains
     * it to 512; by the second (at 2) it has refilled 1000, so that one
     * pays a - 1512 bytes and arrives at 2 + (a - 1512) / 1000; F1, B1 of
     * it and B0 follow (the gradients find full buckets): link_retime.c */
    snprintf(json, sizeof json, "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000, \"burst\": %.17g}",
             a + 512);
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 2, json), 2 + (a - 1512) / 1000 + 3, 1e-9);
    steps_with("gpipe.pp", 2, json, NULL, &link);
    ck_assert_double_eq_tol(link, 2 * a / 1000, 1e-9); /* two activations, two gradients */

    /* DDP S=2 B=2: the all-reduces start when the workers' last jobs end,
     * at 4. A ring on 2 ranks moves half of each stage from each rank
     * twice: (g0 + g1) / bandwidth in all; a tree moves the whole twice in
     * turn, the two stages' all-reduces in flight together: twice that. */
    const char *ring = "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000}";
    const char *tree = "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000, \"allreduce\": \"tree\"}";
    double r = step_with("ddp.pp", 2, ring), tr = step_with("ddp.pp", 2, tree);
    ck_assert_msg(r > 5, "the ring's all-reduces priced at nothing: %g", r);
    ck_assert_double_eq_tol(tr - 4, 2 * (r - 4), 1e-9);
    /* a half-duplex link: the ring's two ranks send each round in turn */
    double half =
        step_with("ddp.pp", 2, "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000, \"duplex\": \"half\"}");
    ck_assert_double_eq_tol(half - 4, 2 * (r - 4), 1e-9);
    /* with a burst as large as both stages' gradients, the tree's two
     * rounds come from full buckets: only the latency */
    snprintf(json, sizeof json,
             "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000, \"allreduce\": \"tree\", \"burst\": %.17g, "
             "\"latency\": 0.25}",
             (r - 4) * 1000);
    ck_assert_double_eq_tol(schedule_with("ddp.pp", 2, json), 4 + 2 * 0.25, 1e-9);
    /* each rank sends both stages' gradients once a step (the reduce's or
     * the broadcast's message), what the ring's all-reduces took in all */
    steps_with("ddp.pp", 2, json, NULL, &link);
    ck_assert_double_eq_tol(link, r - 4, 1e-9);
}
END_TEST

/* A measured all-reduce (--costs "allreduce_latency", ...) prices DDP's
 * two all-reduces itself, one after the other, less a full bucket's saving
 * on a shaped link; measured over more ranks than a stage has owners, it
 * scales as a ring's (a tree's) time does. */
START_TEST(test_measured_allreduce_prices)
{
    /* DDP S=2 B=2, jobs of 1 s: the all-reduces start at 4; a ring of 2 at
     * 1000 bytes/s moves g / 1000 for a stage of g bytes, so r - 4 is
     * (g0 + g1) / 1000 */
    double r = step_with("ddp.pp", 2, "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000}");
    ck_assert_msg(r > 5, "the ring's all-reduces priced at nothing: %g", r);
    const char *two = "{\"F\": 1, \"B\": 1, \"bandwidth\": 1e9, \"allreduce_latency\": 0.5, "
                      "\"allreduce_bandwidth\": 1000, \"allreduce_ranks\": 2}";
    /* each all-reduce 0.5 + g / 1000, one after the other; the link's own
     * bandwidth (1e9) plays no part */
    ck_assert_double_eq_tol(step_with("ddp.pp", 2, two), 4 + 2 * 0.5 + (r - 4), 1e-9);
    /* on a link with a burst, what the buckets hold comes off (the probe
     * ran through drained ones): a ring on 2 ranks, a burst of 500 bytes
     * at 1000 bytes/s, full at the end of the step, saves 0.5 s in stage
     * 0's first round; stage 1's finds them empty (with no latency to
     * refill them in) */
    const char *shaped =
        "{\"F\": 1, \"B\": 1, \"bandwidth\": 1000, \"burst\": 500, \"allreduce_latency\": 0, "
        "\"allreduce_bandwidth\": 1000, \"allreduce_ranks\": 2}";
    ck_assert_double_eq_tol(schedule_with("ddp.pp", 2, shaped), 4 + (r - 4) - 0.5, 1e-9);
    /* measured over 4 ranks: a ring's 2 (R - 1) / R is 3/2 there, 1 here */
    const char *four = "{\"F\": 1, \"B\": 1, \"allreduce_latency\": 0.5, "
                       "\"allreduce_bandwidth\": 1000, \"allreduce_ranks\": 4}";
    ck_assert_double_eq_tol(step_with("ddp.pp", 2, four), 4 + (2 * 0.5 + (r - 4)) / 1.5, 1e-9);
    /* a tree's 2 ceil(log2 R) messages: 4 there, 2 here */
    const char *tree = "{\"F\": 1, \"B\": 1, \"allreduce\": \"tree\", \"allreduce_latency\": 0.5, "
                       "\"allreduce_bandwidth\": 1000, \"allreduce_ranks\": 4}";
    ck_assert_double_eq_tol(step_with("ddp.pp", 2, tree), 4 + (2 * 0.5 + (r - 4)) / 2, 1e-9);
    /* a bandwidth of 0 is unlimited: the latency alone */
    const char *free_bytes = "{\"F\": 1, \"B\": 1, \"allreduce_latency\": 0.5, "
                             "\"allreduce_bandwidth\": 0, \"allreduce_ranks\": 2}";
    ck_assert_double_eq_tol(step_with("ddp.pp", 2, free_bytes), 4 + 2 * 0.5, 1e-9);
}
END_TEST

/* The start times of worker w's jobs in execution order (S=2 B=2), into
 * at[0..max); how many. */
static int job_starts(const char *file, const char *json, int w, double *at, int max)
{
    char *dir;
    pp_compiled c;
    compile_with(file, 2, json, &c, &dir);
    int n = 0;
    for (int k = c.sim.off[w]; k < c.sim.off[w + 1] && n < max; k++)
        at[n++] = c.sim.start[c.sim.order[k]];
    pp_compiled_free(&c);
    remove_dir(dir);
    return n;
}

/* job_starts on worker w equal want[0 .. n) (each within 1e-12; NAN: any). */
static void starts_are(const char *file, const char *json, int w, const double *want, int n)
{
    double at[8];
    ck_assert_int_eq(job_starts(file, json, w, at, n), n);
    for (int k = 0; k < n; k++)
        ck_assert_msg(isnan(want[k]) || fabs(at[k] - want[k]) < 1e-12,
                      "%s with %s: worker %d's job %d starts at %g, not %g", file, json, w, k,
                      at[k], want[k]);
}

/* "job_overhead" (sim.h): a worker is free that long after each job ends;
 * the job's output leaves at its end. GPipe S=2 B=2, jobs of 1, no
 * latency, overhead 0.5: worker 0's F(0,1) starts at 1.5; worker 1's F(1,0)
 * at 1 (its input left at 1), F(1,1) at 2.5 (its input at 2.5), B(1,0) at
 * 4, B(1,1) at 5.5; worker 0's B(0,0) at 5, B(0,1) at 6.5: a makespan of
 * 7.5 (6 without). The report's busy time stays the jobs' own. */
START_TEST(test_job_overhead)
{
    pp_costs c;
    ok(&c, "{\"job_overhead\": 2.5e-6}");
    ck_assert_int_eq(c.has_job_overhead, 1);
    ck_assert_double_eq(c.job_overhead, 2.5e-6);
    pp_costs_free(&c);
    const char *none = "{\"F\": 1, \"B\": 1}",
               *some = "{\"F\": 1, \"B\": 1, \"job_overhead\": 0.5}";
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 2, none), 6, 1e-12);
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 2, some), 7.5, 1e-12);
    starts_are("gpipe.pp", some, 1, (double[]){1, 2.5, 4, 5.5}, 4); /* F1.0 F1.1 B1.0 B1.1 */
    starts_are("gpipe.pp", some, 0, (double[]){0, 1.5, 5, 6.5}, 4); /* F0.0 F0.1 B0.0 B0.1 */
}
END_TEST

/* "wake" (sim.h): a job whose worker waited for its input starts that
 * long after the input is in. GPipe S=2 B=2, jobs of 1, latency 0.25, wake
 * 0.5: worker 1's F(1,0) (its input in at 1.25) starts at 1.75, F(1,1)
 * (in at 2.25, the worker free at 2.75) at 2.75; B(1,0) at 3.75, B(1,1)
 * 4.75; worker 0's B(0,0) (in at 5, free since 2) at 5.5, B(0,1) (in at
 * 6) at 6.5: a makespan of 7.5 (6.5 without). The greedy order alike:
 * FSDP's second forward on worker 0 waits for its fetched weights. */
START_TEST(test_wake)
{
    pp_costs c;
    ok(&c, "{\"wake\": 8e-5}");
    ck_assert_int_eq(c.has_wake, 1);
    ck_assert_double_eq(c.wake, 8e-5);
    pp_costs_free(&c);
    err_at("{\"wake\": -1}", "1:10", "expected a number >= 0 for \"wake\", found -1");
    const char *none = "{\"F\": 1, \"B\": 1, \"latency\": 0.25}",
               *some = "{\"F\": 1, \"B\": 1, \"latency\": 0.25, \"wake\": 0.5}";
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 2, none), 6.5, 1e-12);
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 2, some), 7.5, 1e-12);
    starts_are("gpipe.pp", some, 1, (double[]){1.75, 2.75, 3.75, 4.75}, 4); /* F1.0 .. B1.1 */
    starts_are("gpipe.pp", some, 0, (double[]){0, 1, 5.5, 6.5}, 4);         /* F0.0 .. B0.1 */
    /* greedy (FSDP): worker 0's F(1,0) waits for stage 1's weights, fetched
     * from F(0,0)'s start (in at 0.25), so it does not wait; with a latency
     * of 1.5 they are in at 1.5, after F(0,0): it starts at 2 */
    const char *slow = "{\"F\": 1, \"B\": 1, \"latency\": 1.5, \"wake\": 0.5}";
    starts_are("fsdp.pp", some, 0, (double[]){0, 1, NAN, NAN}, 4);
    starts_are("fsdp.pp", slow, 0, (double[]){0, 2, NAN, NAN}, 4);
}
END_TEST

/* "progress": "wait" (sim.h's recv_waits): a transfer moves only once its
 * receiver is free to wait for it. GPipe S=2 B=2, jobs of 1, latency 0.25:
 * worker 1's second forward and worker 0's second backward find their
 * input there while busy (at 2 and 5.5) and pay the latency after (2.5,
 * 6: a makespan of 7, not 6.5); FSDP (greedy) fetches a stage's weights
 * after the job before it, not during it. */
START_TEST(test_progress_wait)
{
    pp_costs c;
    ok(&c, "{\"progress\": \"wait\"}");
    ck_assert_int_eq(c.recv_waits, 1);
    pp_costs_free(&c);
    ok(&c, "{\"progress\": \"always\"}");
    ck_assert_int_eq(c.recv_waits, 0);
    pp_costs_free(&c);
    err_at("{\"progress\": \"often\"}", "1:14",
           "expected \"always\" or \"wait\" for \"progress\", found \"often\"");
    const char *always = "{\"F\": 1, \"B\": 1, \"latency\": 0.25}",
               *wait = "{\"F\": 1, \"B\": 1, \"latency\": 0.25, \"progress\": \"wait\"}";
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 2, always), 6.5, 1e-12);
    ck_assert_double_eq_tol(schedule_with("gpipe.pp", 2, wait), 7, 1e-12);
    double at[4];
    ck_assert_int_eq(job_starts("gpipe.pp", wait, 1, at, 4), 4); /* F1.0 F1.1 B1.0 B1.1 */
    ck_assert_double_eq_tol(at[1], 2.5, 1e-12);
    ck_assert_int_eq(job_starts("gpipe.pp", wait, 0, at, 4), 4); /* F0.0 F0.1 B0.0 B0.1 */
    ck_assert_double_eq_tol(at[2], 4.75, 1e-12);
    ck_assert_double_eq_tol(at[3], 6, 1e-12);
    /* FSDP: worker 0's F(1,0) fetches stage 1 after F(0,0), at 1.25 (not
     * 1), and its B(1,0) again after that F, at 2.5 */
    ck_assert_int_eq(job_starts("fsdp.pp", always, 0, at, 4), 4);
    ck_assert_double_eq_tol(at[1], 1, 1e-12);
    ck_assert_double_eq_tol(at[2], 2, 1e-12);
    ck_assert_int_eq(job_starts("fsdp.pp", wait, 0, at, 4), 4);
    ck_assert_double_eq_tol(at[1], 1.25, 1e-12);
    ck_assert_double_eq_tol(at[2], 2.5, 1e-12);
    /* the step: the makespan (4.25, 4.5), then the gradient returns where
     * the plans have them (report_returns.c), keyed when they can have
     * arrived (lower_order.c). "wait": worker 1 receives after its B(0,1)
     * (at 4.5, the gradients in at 4.75), then sends its own, in at worker
     * 0 at 5. "always": worker 0's (key 3.25, posted after its B(0,0), at
     * 4) are in at 4.25, as worker 1's B(0,1) ends; worker 1's reach worker
     * 0 at 4.5. Keyed at B(1,0)'s end (3), worker 1's receive stood before
     * its B(0,1) and held it: 5.5. "G": each add, 0.1, after the wait. */
    ck_assert_double_eq_tol(schedule_with("fsdp.pp", 2, always), 4.5, 1e-12);
    ck_assert_double_eq_tol(schedule_with("fsdp.pp", 2, wait), 5, 1e-12);
    const char *add = "{\"F\": 1, \"B\": 1, \"latency\": 0.25, \"progress\": \"wait\", "
                      "\"G\": 0.1}";
    ck_assert_double_eq_tol(schedule_with("fsdp.pp", 2, add), 5.2, 1e-12);
}
END_TEST

/* The link probe's fit (vm/link_fit.h) on a modelled tbf link: latency L,
 * rate r, burst b; a large message takes L + (m - b) / r. */
START_TEST(test_link_fit)
{
    double L = 30e-6, r = 25e6, b = 65536, bw, burst;
    size_t m1 = 1 << 20, m2 = 2 << 20;
    pp_link_fit(L, m1, L + (m1 - b) / r, m2, L + (m2 - b) / r, &bw, &burst);
    ck_assert_double_eq_tol(bw, r, r * 1e-9);
    ck_assert_double_eq_tol(burst, b, 1e-3);
    /* an unshaped link: no burst */
    pp_link_fit(L, m1, L + m1 / 3e9, m2, L + m2 / 3e9, &bw, &burst);
    ck_assert_double_eq_tol(bw, 3e9, 3e9 * 1e-9);
    ck_assert_double_eq_tol(burst, 0, 1e-3);
    /* noise that makes the larger faster: the whole trip is transfer */
    pp_link_fit(L, m1, 2e-3, m2, 1e-3, &bw, &burst);
    ck_assert_double_eq_tol(bw, m2 / (1e-3 - L), 1e-3);
    ck_assert_double_eq(burst, 0);
    /* a tree's all-reduce (two whole messages in turn on 2 ranks) against
     * a ring's (each rank sends two halves) */
    double n = 1 << 20;
    ck_assert_int_eq(pp_allreduce_is_tree(2 * (L + (n - b) / r), n, 2, L, r, b), 1);
    ck_assert_int_eq(pp_allreduce_is_tree(2 * L + (n - b) / r, n, 2, L, r, b), 0);
    ck_assert_int_eq(pp_allreduce_is_tree(0, n, 2, L, r, b), 0);
    /* a burst is there only where 32 KB passes faster than half the rate
     * would carry it: tbf at 200 Mbit/s (at the line's speed, 30 us), not
     * Open MPI's shared memory at 10 GB/s (what the bytes cost, 3.3 us) */
    size_t m = 32768;
    ck_assert_int_eq(pp_link_burst_seen(20e-6, m, 20e-6 + 30e-6, 23.9e6), 1);
    ck_assert_int_eq(pp_link_burst_seen(20e-6, m, 20e-6 + m / 23.9e6, 23.9e6), 0);
    ck_assert_int_eq(pp_link_burst_seen(0.2e-6, m, 0.2e-6 + m / 10e9, 10e9), 0);
    ck_assert_int_eq(pp_link_burst_seen(0.2e-6, m, 0.2e-6, 0), 0); /* unlimited: nothing to see */
    /* an exchange whose directions take turns, and one where they do not */
    ck_assert_int_eq(pp_link_half_duplex(L + (2 * n - b) / r, n, L, r, b), 1);
    ck_assert_int_eq(pp_link_half_duplex(L + (n - b) / r, n, L, r, b), 0);
}
END_TEST

/* ---------------------------------------------------------------- suite */

Suite *costs_suite(void)
{
    Suite *s = suite_create("costs");
    TCase *val = tcase_create("valid");
    tcase_add_test(val, test_full_file);
    tcase_add_test(val, test_scalar_and_per_stage);
    tcase_add_test(val, test_missing_keys);
    tcase_add_test(val, test_lexical_forms);
    suite_add_tcase(s, val);

    TCase *keys = tcase_create("keys");
    tcase_add_test(keys, test_unknown_key);
    tcase_add_test(keys, test_duplicate_key);
    tcase_add_test(keys, test_unit);
    tcase_add_test(keys, test_measured);
    tcase_add_test(keys, test_measured_on);
    tcase_add_test(keys, test_costs_of_another_model);
    tcase_add_test(keys, test_burst_allreduce_keys);
    tcase_add_test(keys, test_measured_allreduce_keys);
    suite_add_tcase(s, keys);

    TCase *link = tcase_create("link");
    tcase_add_test(link, test_bucket);
    tcase_add_test(link, test_link_prices);
    tcase_add_test(link, test_measured_allreduce_prices);
    tcase_add_test(link, test_progress_wait);
    tcase_add_test(link, test_job_overhead);
    tcase_add_test(link, test_wake);
    tcase_add_test(link, test_link_fit);
    suite_add_tcase(s, link);

    TCase *vals = tcase_create("values");
    tcase_add_test(vals, test_non_positive_cost);
    tcase_add_test(vals, test_negative_latency_bandwidth);
    tcase_add_test(vals, test_optimizer_cost);
    tcase_add_test(vals, test_wrong_type);
    tcase_add_test(vals, test_not_finite);
    suite_add_tcase(s, vals);

    TCase *syn = tcase_create("syntax");
    tcase_add_test(syn, test_unterminated_string);
    tcase_add_test(syn, test_bad_escape);
    tcase_add_test(syn, test_bad_number);
    tcase_add_test(syn, test_bad_structure);
    tcase_add_test(syn, test_empty_input);
    tcase_add_test(syn, test_too_deep);
    suite_add_tcase(s, syn);

    TCase *buf = tcase_create("buffers");
    tcase_add_test(buf, test_message_buffers);
    suite_add_tcase(s, buf);

    TCase *files = tcase_create("files");
    tcase_add_test(files, test_load_missing_file);
    tcase_add_test(files, test_load_files);
    suite_add_tcase(s, files);

    TCase *fuzz = tcase_create("fuzz");
    tcase_add_test(fuzz, test_fuzz_mutations);
    suite_add_tcase(s, fuzz);
    return s;
}
