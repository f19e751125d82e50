/* test_timeline.c - the pictures of a simulated schedule: the SVG is
 * well-formed XML (xmllint) with exactly one cell per job and no NaN; the
 * Chrome trace parses as JSON (the project's strict reader) with the events
 * it promises; the ASCII diagram is asserted row by row for small cases (as
 * Lua's tests assert whole listings) and stays within its width for large
 * ones. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/timeline.h"
#include "suites.h"
#include "testutil.h"

typedef enum { SVG, TRACE, ASCII } kind;

/* Renders into a string (caller frees); `unit` is the trace's time unit. */
static char *render_unit(const compiled *c, kind k, int width, const pp_transfer *x, int nx,
                         const char *unit)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    if (k == SVG)
        ck_assert_int_eq(pp_timeline_svg_unit(f, &c->t, &c->sim, unit), 0);
    else if (k == TRACE)
        ck_assert_int_eq(pp_timeline_trace(f, &c->t, &c->sim, x, nx, unit), 0);
    else
        pp_timeline_ascii(f, &c->t, &c->sim, width);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

static char *render(const compiled *c, kind k, int width, const pp_transfer *x, int nx)
{
    return render_unit(c, k, width, x, nx, NULL);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void compile_lib(compiled *c, const char *file, int S, int B)
{
    pp_define defs[] = {{"S", S}, {"B", B}};
    compile_library(c, file, defs, 2);
    ck_assert_int_eq(c->errors, 0);
    ck_assert_int_eq(c->deadlock, 0);
}

/* Line i (0-based) of text, without its newline (caller frees). */
static char *line_at(const char *text, int i)
{
    for (; i > 0 && text; i--) {
        text = strchr(text, '\n');
        if (text)
            text++;
    }
    ck_assert_ptr_nonnull(text);
    size_t n = strcspn(text, "\n");
    return strndup(text, n);
}

static void assert_line(const char *text, int i, const char *want)
{
    char *got = line_at(text, i);
    ck_assert_msg(!strcmp(got, want), "line %d:\n  got  '%s'\n  want '%s'\nin:\n%s", i, got, want,
                  text);
    free(got);
}

static void assert_width(const char *text, int width)
{
    int line = 0;
    for (const char *p = text; *p; line++) {
        size_t n = strcspn(p, "\n");
        ck_assert_msg((int)n <= width, "line %d is %zu columns wide (limit %d)", line, n, width);
        p += n + (p[n] == '\n');
    }
}

/* ---- SVG ------------------------------------------------------------------ */

static void assert_svg(const compiled *c, const char *svg)
{
    char *dir = temp_dir(), path[256], cmd[512], *out;
    snprintf(path, sizeof path, "%s/t.svg", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(svg, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "xmllint --noout %s", path);
    int rc = run_cmd(cmd, &out);
    ck_assert_msg(rc == 0, "xmllint says (%d):\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    free(run_expect(cmd, 0));
    free(dir);

    /* every job cell carries class "j ..." and nothing else does */
    ck_assert_int_eq(count(svg, "<rect class=\"j "), job_count(&c->t.js));
    ck_assert_int_eq(count(svg, "<title>"), job_count(&c->t.js));
    ck_assert_ptr_null(strcasestr(svg, "nan"));
    ck_assert_ptr_null(strcasestr(svg, "inf"));
    ck_assert_ptr_null(strstr(svg, "=\"-"));
}

/* The time axis names its unit: --costs' ("s", "us"), else the
 * schedule's time units. */
START_TEST(svg_axis_names_its_unit)
{
    compiled c;
    compile_lib(&c, "gpipe.pp", 4, 4);
    char *svg = render(&c, SVG, 0, NULL, 0);
    ck_assert_msg(strstr(svg, ">time (schedule time units: a job costs 1 unless its cost "
                              "says)</text>\n</svg>"),
                  "no unit under the axis:\n%s", last_lines(svg, 3));
    free(svg);
    const char *units[] = {"s", "us"};
    for (int i = 0; i < 2; i++) {
        svg = render_unit(&c, SVG, 0, NULL, 0, units[i]);
        char want[64];
        snprintf(want, sizeof want, ">time (%s)</text>\n</svg>", units[i]);
        ck_assert_msg(strstr(svg, want), "expected '%s':\n%s", want, last_lines(svg, 3));
        free(svg);
    }
    compiled_free(&c);
}
END_TEST

START_TEST(svg_gpipe_small)
{
    compiled c;
    compile_lib(&c, "gpipe.pp", 4, 4);
    char *svg = render(&c, SVG, 0, NULL, 0);
    assert_svg(&c, svg);
    /* unit cells are wide enough for their labels: direction, stage and
     * microbatch, F3.2 on w3 */
    ck_assert_int_eq(count(svg, "<text class=\"c\""), 32);
    ck_assert_ptr_nonnull(strstr(svg, ">F3.2</text>"));
    ck_assert_ptr_nonnull(strstr(svg, ">B0.3</text>"));
    ck_assert_ptr_nonnull(strstr(svg, "label F3.17: forward of stage 3, microbatch 17"));
    ck_assert_ptr_nonnull(strstr(svg, "<title>B(s=2,b=1) on w2: 9 to 10</title>"));
    ck_assert_ptr_nonnull(strstr(svg, ">w3</text>"));
    free(svg);
    compiled_free(&c);
}
END_TEST

START_TEST(svg_gpipe_large_stays_bounded)
{
    compiled c;
    compile_lib(&c, "gpipe.pp", 64, 256);
    char *svg = render(&c, SVG, 0, NULL, 0);
    assert_svg(&c, svg);
    /* at most 16000 px of plot and a thousand or so tall, whatever the
     * makespan; cells too narrow for a label keep their tooltips */
    double w = 0, h = 0;
    const char *p = strstr(svg, "<svg ");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(strstr(p, "width=\""), "width=\"%lf", &w), 1);
    ck_assert_int_eq(sscanf(strstr(p, "height=\""), "height=\"%lf", &h), 1);
    ck_assert_msg(w > 1000 && w <= 16100 && h <= 1200, "%g x %g", w, h);
    ck_assert_int_eq(count(svg, "<text class=\"c"), 0);
    ck_assert_ptr_nonnull(strstr(svg, "no cell is wide enough for one at this scale: hover"));
    free(svg);
    compiled_free(&c);
}
END_TEST

/* 1F1B at S=16 B=64, as the issue tried it: every cell carries its tooltip
 * and, right after it, a label naming the same job (direction, stage,
 * microbatch) that fits its width, centred in it; so the microbatch no
 * longer rests on 16 cycling colours. */
START_TEST(svg_1f1b_s16_b64_every_cell_labelled)
{
    compiled c;
    compile_lib(&c, "1f1b.pp", 16, 64);
    char *svg = render(&c, SVG, 0, NULL, 0);
    assert_svg(&c, svg);
    int N = job_count(&c.t.js), cells = 0;
    char *seen = calloc((size_t)N, 1);
    ck_assert_ptr_nonnull(seen);
    for (const char *p = svg; (p = strstr(p, "<rect class=\"j ")); cells++) {
        double x, w, tx;
        char d, want[32], got[32];
        int s, b;
        ck_assert_int_eq(sscanf(strstr(p, " x=\""), " x=\"%lf", &x), 1);
        ck_assert_int_eq(sscanf(strstr(p, "width=\""), "width=\"%lf", &w), 1);
        ck_assert_int_eq(sscanf(strstr(p, "<title>"), "<title>%c(s=%d,b=%d)", &d, &s, &b), 3);
        int j = job_id(&c.t.js, s, b, d == 'F' ? 0 : 1);
        ck_assert_int_eq(seen[j]++, 0);
        p = strstr(p, "</rect>\n") + 8;
        ck_assert_int_eq(strncmp(p, "<text class=\"c\" x=\"", 19), 0);
        ck_assert_int_eq(sscanf(p + 19, "%lf\" y=\"%*d\">%31[^<]", &tx, got), 2);
        snprintf(want, sizeof want, "%c%d.%d", d, s, b);
        ck_assert_str_eq(got, want);
        /* centred, and at least 5 px a glyph of the 9 px font */
        ck_assert_double_eq_tol(tx, x + w / 2, 0.01);
        ck_assert_msg(w >= 5.0 * (double)strlen(got), "%s in %g px", got, w);
    }
    ck_assert_int_eq(cells, N);
    ck_assert_int_eq(count(svg, "<text class=\"c\""), N);
    ck_assert_ptr_nonnull(strstr(svg, ">F15.63</text>"));
    ck_assert_ptr_nonnull(strstr(svg, "cells too narrow for theirs: hover"));
    free(seen);
    free(svg);
    compiled_free(&c);
}
END_TEST

START_TEST(svg_split_backward)
{
    compiled c;
    compile_lib(&c, "zb-h1.pp", 4, 8);
    char *svg = render(&c, SVG, 0, NULL, 0);
    assert_svg(&c, svg);
    ck_assert_int_eq(count(svg, "<rect class=\"j W"), 4 * 8);
    ck_assert_int_eq(count(svg, "<text class=\"c cw\""), 4 * 8); /* white on the dark W cells */
    ck_assert_ptr_nonnull(strstr(svg, "W darkest"));
    free(svg);
    compiled_free(&c);
}
END_TEST

/* ---- trace ---------------------------------------------------------------- */

static const json_t *member(const json_t *o, const char *key)
{
    ck_assert(json_is_object(o));
    return json_object_get(o, key);
}

START_TEST(trace_is_json_with_a_slice_per_job_and_transfer)
{
    compiled c;
    compile_lib(&c, "gpipe.pp", 4, 4);
    /* times that do not print exactly in binary */
    pp_transfer x[3] = {
        {XFER_ACT, 0, 1, job_id(&c.t.js, 1, 0, 0), 1, 1.1, 4096},
        {XFER_GRAD, 2, 1, job_id(&c.t.js, 1, 2, 1), 12, 12.3, 4096},
        {XFER_WEIGHT, 3, 0, job_id(&c.t.js, 0, 3, 0), 0.1, 0.2, 1ull << 40},
    };
    char *js = render(&c, TRACE, 0, x, 3);
    ck_assert_ptr_null(strcasestr(js, "nan"));

    json_error_t err;
    json_t *root = json_loads(js, JSON_REJECT_DUPLICATES, &err);
    ck_assert_msg(root, "trace.json:%d:%d: %s\n%s", err.line, err.column, err.text, js);
    const json_t *ev = member(root, "traceEvents"), *unit = member(root, "displayTimeUnit");
    ck_assert_ptr_nonnull(ev);
    ck_assert_ptr_nonnull(unit);
    ck_assert_str_eq(json_string_value(unit), "ms");
    ck_assert(json_is_array(ev));

    int meta = 0, jobs = 0, xfers = 0, named = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const json_t *e = json_array_get(ev, i), *ph = member(e, "ph"), *name = member(e, "name");
        const json_t *tid = member(e, "tid"), *args = member(e, "args");
        ck_assert_ptr_nonnull(ph);
        ck_assert_ptr_nonnull(name);
        if (!strcmp(json_string_value(ph), "M")) {
            meta++;
            const json_t *n = member(args, "name");
            const char *ns = n ? json_string_value(n) : NULL;
            if (ns && (!strcmp(ns, "worker 2") || !strcmp(ns, "worker 2 recv"))) {
                named++;
                ck_assert_double_eq(json_number_value(tid), strstr(ns, "recv") ? 5 : 4);
            }
            continue;
        }
        ck_assert_str_eq(json_string_value(ph), "X");
        const json_t *ts = member(e, "ts"), *dur = member(e, "dur");
        if (member(args, "s")) {
            jobs++;
            /* 9 to 10 time units, 1 unit = 1 ms */
            if (!strcmp(json_string_value(name), "B(s=2,b=1)")) {
                ck_assert_double_eq(json_number_value(ts), 9000);
                ck_assert_double_eq(json_number_value(dur), 1000);
                ck_assert_double_eq(json_number_value(tid), 4);
                ck_assert_str_eq(json_string_value(member(args, "d")), "B");
            }
        } else {
            xfers++;
            ck_assert_ptr_nonnull(member(args, "from"));
            if (!strcmp(json_string_value(name), "weights F(s=0,b=3)")) {
                ck_assert_double_eq(json_number_value(ts), 0.1 * 1000);
                ck_assert_double_eq(json_number_value(member(args, "bytes")), 1099511627776.0);
                ck_assert_double_eq(json_number_value(tid), 1);
            }
        }
    }
    ck_assert_int_eq(jobs, job_count(&c.t.js));
    ck_assert_int_eq(xfers, 3);
    ck_assert_int_eq(named, 2);
    ck_assert_int_eq(meta, 1 + 4 * c.t.W); /* process name; per worker 2 names, 2 sort indices */
    ck_assert_ptr_nonnull(strstr(js, "\"name\":\"act F(s=1,b=0)\""));
    ck_assert_ptr_nonnull(strstr(js, "\"name\":\"grad B(s=1,b=2)\""));
    /* the schedule's costs have no unit: the file says 1 is shown as 1 ms */
    const json_t *other = member(root, "otherData");
    ck_assert_str_eq(json_string_value(member(other, "ts_unit")), "us");
    ck_assert_str_eq(json_string_value(member(other, "source_unit")), "schedule time unit");
    ck_assert_double_eq(json_number_value(member(other, "us_per_source_unit")), 1000);
    json_decref(root);
    free(js);
    compiled_free(&c);
}
END_TEST

/* The trace's slice for a job named like "F(s=0,b=0)" on worker `tid`/2. */
static const json_t *trace_slice(const json_t *root, const char *name)
{
    const json_t *ev = member(root, "traceEvents");
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const json_t *e = json_array_get(ev, i);
        if (!strcmp(json_string_value(member(e, "ph")), "X") &&
            !strcmp(json_string_value(member(e, "name")), name))
            return e;
    }
    ck_abort_msg("no slice %s", name);
    return NULL;
}

/* ppc with a --costs file in seconds (no "unit": what ppvm --profile
 * writes) at S=16 B=64: a 0.5 s forward is a 500000 us slice, every slice
 * ends by the makespan in us, and the file says what unit it converted
 * from; "unit": "ms" makes the same numbers 1000 times smaller. */
START_TEST(trace_in_the_costs_unit_at_s16_b64)
{
    char *dir = temp_dir(), cmd[4096], path[512];
    static const char *files[] = {"{\"F\": 0.5, \"B\": 1.0}",
                                  "{\"F\": 0.5, \"B\": 1.0, \"unit\": \"ms\"}"};
    static const double us[] = {1e6, 1e3};
    static const char *unit[] = {"s", "ms"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "cd %s && printf '%%s' '%s' > %s/c%d.json && ./bin/ppc schedules/1f1b.pp -D S=16 "
                 "-D B=64 --costs %s/c%d.json -o %s/p%d -q",
                 PP_ROOT, files[i], dir, i, dir, i, dir, i);
        free(run_expect(cmd, 0));
        json_error_t err;
        snprintf(path, sizeof path, "%s/p%d/trace.json", dir, i);
        json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
        ck_assert_msg(root, "%s:%d:%d: %s", path, err.line, err.column, err.text);
        snprintf(path, sizeof path, "%s/p%d/report.json", dir, i);
        json_t *rep = json_load_file(path, 0, &err);
        ck_assert_msg(rep, "%s:%d:%d: %s", path, err.line, err.column, err.text);
        double makespan = json_number_value(member(rep, "makespan"));
        ck_assert_double_eq(makespan, (64 + 16 - 1) * (0.5 + 1.0)); /* 1F1B: (B+S-1)(F+B) */

        const json_t *f = trace_slice(root, "F(s=0,b=0)");
        ck_assert_double_eq(json_number_value(member(f, "ts")), 0);
        ck_assert_double_eq(json_number_value(member(f, "dur")), 0.5 * us[i]);
        /* the last stage's first backward: after 16 forwards of 0.5 */
        const json_t *b = trace_slice(root, "B(s=15,b=0)");
        ck_assert_double_eq(json_number_value(member(b, "ts")), 8 * us[i]);
        ck_assert_double_eq(json_number_value(member(b, "dur")), 1 * us[i]);
        ck_assert_double_eq(json_number_value(member(b, "tid")), 30);

        double last = 0;
        const json_t *ev = member(root, "traceEvents");
        for (size_t k = 0; k < json_array_size(ev); k++) {
            const json_t *e = json_array_get(ev, k);
            if (!strcmp(json_string_value(member(e, "ph")), "X"))
                last = fmax(last, json_number_value(member(e, "ts")) +
                                      json_number_value(member(e, "dur")));
        }
        ck_assert_double_eq_tol(last, makespan * us[i], 1e-6 * makespan * us[i]);

        const json_t *other = member(root, "otherData");
        ck_assert_str_eq(json_string_value(member(other, "ts_unit")), "us");
        ck_assert_str_eq(json_string_value(member(other, "source_unit")), unit[i]);
        ck_assert_double_eq(json_number_value(member(other, "us_per_source_unit")), us[i]);

        /* report.txt's diagram: a column per shortest job (0.5), 237 of
         * them in 3 bands of report.txt's 100 columns */
        snprintf(cmd, sizeof cmd,
                 "grep -c '^1 column = 0.5 time units; time runs on through 3 "
                 "bands' %s/p%d/report.txt",
                 dir, i);
        free(run_expect(cmd, 0));
        /* report.txt names the unit with the costs file */
        snprintf(cmd, sizeof cmd, "grep '^costs ' %s/p%d/report.txt", dir, i);
        char *line = run_expect(cmd, 0), want[64];
        snprintf(want, sizeof want, "c%d.json (times in %s)", i, unit[i]);
        ck_assert_msg(strstr(line, want), "%s", line);
        free(line);
        json_decref(rep);
        json_decref(root);
    }
    /* a unit ppc does not know is refused: exit 3, the file, line and column */
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '{\"unit\": \"sec\"}' > %s/bad.json && ./bin/ppc schedules/1f1b.pp "
             "--costs %s/bad.json -o %s/q",
             PP_ROOT, dir, dir, dir);
    char *out = run_expect(cmd, 3), want[600];
    snprintf(want, sizeof want,
             "schedules/1f1b.pp: error: --costs: %s/bad.json:1:10: expected \"s\", \"ms\", \"us\" "
             "or \"ns\" for \"unit\", found \"sec\"",
             dir);
    ck_assert_msg(strstr(out, want), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    free(run_expect(cmd, 0));
    free(dir);
}
END_TEST

/* Costs so small that the pictures' scales overflowed (1e-310 s a
 * forward: timeline.svg 0 px wide with every cell at x=0, report.txt's
 * diagram "1 column = 0 time units" and all idle) are refused with the
 * cheapest job and the least allowed; 1e-300 still draws. */
START_TEST(extreme_costs_refused_not_drawn_wrong)
{
    char *dir = temp_dir(), cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '{\"F\": 1e-310, \"B\": 3e-310}' > %s/tiny.json && ./bin/ppc "
             "schedules/1f1b.pp --costs %s/tiny.json -o %s/p",
             PP_ROOT, dir, dir, dir);
    char *out = run_expect(cmd, 1), want[600];
    snprintf(want, sizeof want,
             "schedules/1f1b.pp: error: the costs (--costs %s/tiny.json) make the cheapest job "
             "1e-310, too small for the simulator's clock and the pictures' scales; expected at "
             "least 1e-300",
             dir);
    ck_assert_msg(strstr(out, want), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '{\"F\": 1e-300, \"B\": 3e-300}' > %s/least.json && ./bin/ppc "
             "schedules/1f1b.pp --costs %s/least.json -o %s/q -q && grep -c '^w0 |F0 F1 F2 F3' "
             "%s/q/report.txt && grep -c 'svg[^>]* width=\"1213.6\"' %s/q/timeline.svg",
             PP_ROOT, dir, dir, dir, dir, dir);
    free(run_expect(cmd, 0));
    /* At the other end, 1e302 s forwards: trace.json's microseconds
     * overflowed to infinity and were written as 0, 47 slices piled at the
     * start; the total is refused above 1e302 (1e300 still compiles). */
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '{\"F\": 1e302, \"B\": 1e302}' > %s/huge.json && ./bin/ppc "
             "schedules/1f1b.pp --costs %s/huge.json -o %s/r",
             PP_ROOT, dir, dir, dir);
    out = run_expect(cmd, 1);
    snprintf(want, sizeof want,
             "schedules/1f1b.pp: error: the costs (--costs %s/huge.json) add up to 6.4e+303, too "
             "large for trace.json's microseconds (1e6 a second); expected at most 1e+302",
             dir);
    ck_assert_msg(strstr(out, want), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    free(run_expect(cmd, 0));
    free(dir);
}
END_TEST

/* ---- ASCII ---------------------------------------------------------------- */

START_TEST(ascii_gpipe_s4_b4_exact)
{
    compiled c;
    compile_lib(&c, "gpipe.pp", 4, 4);
    char *a = render(&c, ASCII, 80, NULL, 0);
    assert_line(a, 0, "    0     2     4     6     8     10    12    14");
    assert_line(a, 1, "w0 |F0 F1 F2 F3 .. .. .. .. .. .. B0 B1 B2 B3 |");
    assert_line(a, 2, "w1 |.. F0 F1 F2 F3 .. .. .. .. B0 B1 B2 B3 .. |");
    assert_line(a, 3, "w2 |.. .. F0 F1 F2 F3 .. .. B0 B1 B2 B3 .. .. |");
    assert_line(a, 4, "w3 |.. .. .. F0 F1 F2 F3 B0 B1 B2 B3 .. .. .. |");
    assert_line(a, 5,
                "cells: F/B/W and microbatch (B3 = backward of microbatch 3), '-' continues a");
    assert_line(a, 6, "cell, '.' idle; columns per time unit: 3");
    ck_assert_int_eq(count(a, "\n"), 7);
    assert_width(a, 80);
    free(a);
    compiled_free(&c);
}
END_TEST

/* A worker running several stages (interleaved 1F1B, two chunks each):
 * its cells say the stage too, or "F0 F1 F0 F1" would not tell the chunks
 * apart; one stage a worker keeps the short labels (above). */
START_TEST(ascii_interleaved_names_stages)
{
    compiled c;
    pp_define d[] = {{"W", 2}, {"B", 4}};
    compile_library(&c, "interleaved-1f1b.pp", d, 2);
    char *a = render(&c, ASCII, 200, NULL, 0);
    assert_line(a, 1,
                "w0 |F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 .... B2.2 .... "
                "B2.3 B0.2 B0.3 |");
    assert_line(a, 2,
                "w1 |.... F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 "
                "B1.2 B1.3 .... |");
    ck_assert_msg(strstr(a, "cells: F/B/W, stage and microbatch (B1.3 = backward of stage 1, "
                            "microbatch 3)"),
                  "%s", a);
    free(a);
    compiled_free(&c);
}
END_TEST

START_TEST(ascii_1f1b_two_digit_microbatches)
{
    /* B = 12: labels take 3 columns, so a cell is 4 */
    compiled c;
    compile_lib(&c, "1f1b.pp", 2, 12);
    char *a = render(&c, ASCII, 200, NULL, 0);
    assert_line(a, 0,
                "    0   1   2   3   4   5   6   7   8   9   10  11  12  13  14  15  16  17  "
                "18  19  20  21  22  23  24  25  26");
    assert_line(a, 1,
                "w0 |F0  F1  ... B0  F2  B1  F3  B2  F4  B3  F5  B4  F6  B5  F7  B6  F8  B7  "
                "F9  B8  F10 B9  F11 B10 ... B11 |");
    assert_line(a, 2,
                "w1 |... F0  B0  F1  B1  F2  B2  F3  B3  F4  B4  F5  B5  F6  B6  F7  B7  F8  "
                "B8  F9  B9  F10 B10 F11 B11 ... |");
    assert_width(a, 200);
    free(a);
    compiled_free(&c);
}
END_TEST

static const char *costly = "param S = 4\nparam B = 4\nparam W = S\n"
                            "compute(s,b,d) = s\npriority(s,b,d) = d * B + b\n"
                            "cost F = 3\ncost B = 5\n";

START_TEST(ascii_non_unit_costs_exact)
{
    /* the shortest job (3) gets one 3-column cell: one column per time unit,
     * so B cells run 5 columns and every boundary is exact */
    compiled c;
    compile_src(&c, costly, NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_double_eq(c.sim.makespan, 56);
    char *a = render(&c, ASCII, 80, NULL, 0);
    assert_line(a, 0, "    0    5    10   15   20   25   30   35   40   45   50   55");
    assert_line(a, 1, "w0 |F0 F1 F2 F3 .. .. .. .. .. .. .. .. B0-- B1-- B2-- B3-- |");
    /* idle runs that are not whole cells give the extra columns to their last chunk */
    assert_line(a, 2, "w1 |.. F0 F1 F2 F3 .. .. .. .. ... B0-- B1-- B2-- B3-- .... |");
    assert_line(a, 3, "w2 |.. .. F0 F1 F2 F3 .. .... B0-- B1-- B2-- B3-- .. .. ... |");
    assert_line(a, 4, "w3 |.. .. .. F0 F1 F2 F3 B0-- B1-- B2-- B3-- .. .. .. .. .. |");
    assert_line(a, 5,
                "cells: F/B/W and microbatch (B3 = backward of microbatch 3), '-' continues a");
    assert_line(a, 6, "cell, '.' idle; columns per time unit: 1");
    assert_width(a, 80);
    free(a);
    compiled_free(&c);
}
END_TEST

START_TEST(ascii_measured_seconds_match_units)
{
    /* the same schedule in "seconds" (times * 0.001, not exact in binary)
     * draws the same rows; only the ruler and legend numbers change */
    compiled c;
    compile_src(&c, costly, NULL, 0);
    char *units = render(&c, ASCII, 80, NULL, 0);
    int N = job_count(&c.t.js);
    for (int j = 0; j < N; j++) {
        c.sim.start[j] *= 0.001;
        c.sim.end[j] *= 0.001;
    }
    c.sim.makespan *= 0.001;
    char *secs = render(&c, ASCII, 80, NULL, 0);
    for (int i = 1; i <= 4; i++) {
        char *u = line_at(units, i), *s = line_at(secs, i);
        ck_assert_str_eq(s, u);
        free(u);
        free(s);
    }
    /* ticks widen so that "0.055"-long labels would still fit */
    assert_line(secs, 0, "    0         0.01      0.02      0.03      0.04      0.05");
    free(secs);
    free(units);
    compiled_free(&c);
}
END_TEST

START_TEST(ascii_bands_at_narrow_width)
{
    /* 56 columns of exact cells in 33-column bands (a whole number of
     * 3-column cells): the rows run on in a second band, with its own ruler,
     * and a job cut at a band's end continues there with '-'. Nothing is
     * scaled, so nothing is squashed. */
    compiled c;
    compile_src(&c, costly, NULL, 0);
    char *a = render(&c, ASCII, 40, NULL, 0);
    assert_line(a, 0, "3 columns = the shortest job (3 time");
    assert_line(a, 1, "units); time runs on through 2 bands,");
    assert_line(a, 2, "one under another");
    assert_line(a, 3, "    0    5    10   15   20   25   30");
    assert_line(a, 4, "w0 |F0 F1 F2 F3 .. .. .. .. .. .. .. |");
    assert_line(a, 5, "w1 |.. F0 F1 F2 F3 .. .. .. .. ... B0|");
    assert_line(a, 6, "w2 |.. .. F0 F1 F2 F3 .. .... B0-- B1|");
    assert_line(a, 7, "w3 |.. .. .. F0 F1 F2 F3 B0-- B1-- B2|");
    assert_line(a, 8, "");
    assert_line(a, 9, "      35   40   45   50   55");
    assert_line(a, 10, "w0 |.. B0-- B1-- B2-- B3-- |");
    assert_line(a, 11, "w1 |-- B1-- B2-- B3-- .... |");
    assert_line(a, 12, "w2 |-- B2-- B3-- .. .. ... |");
    assert_line(a, 13, "w3 |-- B3-- .. .. .. .. .. |");
    assert_width(a, 40);
    free(a);
    compiled_free(&c);
}
END_TEST

/* ---- faithful at S=16 B=64 ---------------------------------------------------
 * The rows of a diagram read back: each worker's cells joined across bands,
 * and the time units per column its header states. */
typedef struct {
    int W;
    char **row; /* [W], NUL-terminated */
    double k;   /* time units per column */
} diagram;

static void diagram_read(diagram *g, const char *text, int W)
{
    g->W = W;
    g->row = calloc((size_t)W, sizeof *g->row);
    ck_assert_ptr_nonnull(g->row);
    for (int w = 0; w < W; w++)
        g->row[w] = strdup("");
    const char *k = strstr(text, "1 column = ");
    ck_assert_msg(k && sscanf(k, "1 column = %lf time unit", &g->k) == 1, "no scale in:\n%s", text);
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        int w, at;
        if (sscanf(p, "w%d |%n", &w, &at) == 1 && w >= 0 && w < W) {
            ck_assert_int_eq(p[n - 1], '|');
            size_t old = strlen(g->row[w]), add = n - (size_t)at - 1;
            g->row[w] = realloc(g->row[w], old + add + 1);
            memcpy(g->row[w] + old, p + at, add);
            g->row[w][old + add] = '\0';
        } else if (p[0] == 'w' && p[1] >= '0' && p[1] <= '9') {
            /* "w12  |": the name is padded to the widest */
            ck_assert_int_eq(sscanf(p, "w%d %n", &w, &at), 1);
            while (p[at] == ' ')
                at++;
            ck_assert_int_eq(p[at], '|');
            at++;
            size_t old = strlen(g->row[w]), add = n - (size_t)at - 1;
            g->row[w] = realloc(g->row[w], old + add + 1);
            memcpy(g->row[w] + old, p + at, add);
            g->row[w][old + add] = '\0';
        }
        p += n + (p[n] == '\n');
    }
}

static void diagram_free(diagram *g)
{
    for (int w = 0; w < g->W; w++)
        free(g->row[w]);
    free(g->row);
}

/* An exact diagram (every job on whole columns) against the simulation:
 * each worker's row is, column for column, '.' where it is idle, and for
 * each job its direction at its start and '-' to its end. */
static void assert_exact(const compiled *c, const diagram *g)
{
    const pp_jobspace *js = &c->t.js;
    int ncols = (int)nearbyint(c->sim.makespan / g->k);
    for (int w = 0; w < g->W; w++) {
        char *want = malloc((size_t)ncols + 1);
        memset(want, '.', (size_t)ncols);
        want[ncols] = '\0';
        for (int j = 0; j < job_count(js); j++) {
            if (c->t.worker[j] != w)
                continue;
            int a = (int)nearbyint(c->sim.start[j] / g->k),
                b = (int)nearbyint(c->sim.end[j] / g->k);
            ck_assert_double_eq_tol(a * g->k, c->sim.start[j], 1e-9);
            ck_assert_double_eq_tol(b * g->k, c->sim.end[j], 1e-9);
            memset(want + a, '-', (size_t)(b - a));
            want[a] = "FBW"[job_d(js, j)];
        }
        ck_assert_msg(!strcmp(g->row[w], want), "w%d:\n  got  %s\n  want %s", w, g->row[w], want);
        free(want);
    }
}

/* A scaled diagram against the simulation, column by column: '.' only where
 * no job runs, however little of the column a job takes; a direction or '-'
 * only where one job fills the column; 'f', 'b', 'w' only where jobs of that
 * one direction fill it; '*' where jobs fill it; ':' where jobs and idle
 * time share it. */
static void assert_scaled(const compiled *c, const diagram *g)
{
    const pp_jobspace *js = &c->t.js;
    for (int w = 0; w < g->W; w++) {
        int ncols = (int)strlen(g->row[w]);
        ck_assert_int_eq(ncols, (int)ceil(c->sim.makespan / g->k - 1e-9));
        double *busy = calloc((size_t)ncols, sizeof *busy),
               *most = calloc((size_t)ncols, sizeof *most);
        int *dirs = calloc((size_t)ncols, sizeof *dirs);
        for (int j = 0; j < job_count(js); j++) {
            if (c->t.worker[j] != w)
                continue;
            for (int col = (int)(c->sim.start[j] / g->k); col < ncols; col++) {
                double lo = col * g->k, hi = lo + g->k;
                double ov = fmin(hi, c->sim.end[j]) - fmax(lo, c->sim.start[j]);
                if (ov <= 0)
                    break;
                busy[col] += ov / g->k;
                most[col] = fmax(most[col], ov / g->k);
                dirs[col] |= 1 << job_d(js, j);
            }
        }
        for (int col = 0; col < ncols; col++) {
            char ch = g->row[w][col];
            const char *where = "";
            if (ch == '.')
                where = busy[col] < 1e-12 ? NULL : "a job runs in an idle column";
            else if (ch == 'F' || ch == 'B' || ch == 'W' || ch == '-')
                where = most[col] > 1 - 1e-6 ? NULL : "no one job fills a job column";
            else if (ch == 'f' || ch == 'b' || ch == 'w')
                where = busy[col] > 1 - 1e-6 && dirs[col] == 1 << (ch == 'f'   ? 0
                                                                   : ch == 'b' ? 1
                                                                               : 2)
                            ? NULL
                            : "not filled by jobs of that direction";
            else if (ch == '*')
                where = busy[col] > 1 - 1e-6 ? NULL : "idle time in a '*' column";
            else if (ch == ':')
                where = busy[col] > 0 && busy[col] < 1 - 1e-6 ? NULL : "':' not partly idle";
            else
                where = "unknown symbol";
            ck_assert_msg(!where, "w%d column %d '%c': %s (busy %g)", w, col, ch, where, busy[col]);
        }
        free(busy);
        free(most);
        free(dirs);
    }
}

START_TEST(ascii_1f1b_s16_b64_warmup_steady_cooldown)
{
    /* The case: report.txt's 100 columns drew it as "FFFBBB" at 1.68
     * units a column. Now a column is a time unit, in 2 bands: worker 0
     * runs its 16 forwards, waits 15 units for the first backward, then
     * alternates, and ends on backwards with idle units between them; worker
     * 15 waits 15 units for its first forward. */
    compiled c;
    compile_lib(&c, "1f1b.pp", 16, 64);
    char *a = render(&c, ASCII, 100, NULL, 0);
    assert_width(a, 100);
    assert_line(a, 0, "1 column = 1 time unit; time runs on through 2 bands, one under another");
    diagram g;
    diagram_read(&g, a, 16);
    ck_assert_double_eq(g.k, 1);
    assert_exact(&c, &g);
    ck_assert_int_eq((int)strlen(g.row[0]), 158);
    ck_assert_int_eq(strspn(g.row[0], "F"), 16);
    ck_assert_int_eq(strspn(g.row[0] + 16, "."), 15);
    ck_assert_int_eq(strncmp(g.row[0] + 31, "BFBFBF", 6), 0);
    ck_assert_str_eq(g.row[0] + 158 - 32, "FB.B.B.B.B.B.B.B.B.B.B.B.B.B.B.B"); /* cool-down */
    ck_assert_int_eq(strspn(g.row[15], "."), 15);
    ck_assert_int_eq(strncmp(g.row[15] + 15, "FBFB", 4), 0);
    ck_assert_int_eq(strspn(g.row[15] + 158 - 15, "."), 15);
    diagram_free(&g);
    free(a);
    compiled_free(&c);
}
END_TEST

START_TEST(ascii_1f1b_s16_b64_widths_proportional)
{
    /* With B twice F (cost lines added to the library's 1F1B) every job is
     * drawn at its length, "F" and "B-", in 3 bands: each row equals the one
     * built from the simulation's times. */
    char path[512];
    snprintf(path, sizeof path, "%s/schedules/1f1b.pp", PP_ROOT);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char src[16384];
    size_t n = fread(src, 1, sizeof src - 64, f);
    fclose(f);
    strcpy(src + n, "\ncost F = 1\ncost B = 2\n");
    pp_define defs[] = {{"S", 16}, {"B", 64}};
    compiled c;
    compile_src(&c, src, defs, 2);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_double_eq(c.sim.makespan, 3 * (64 + 16 - 1));
    char *a = render(&c, ASCII, 100, NULL, 0);
    assert_width(a, 100);
    ck_assert_ptr_nonnull(strstr(a, "through 3 bands"));
    diagram g;
    diagram_read(&g, a, 16);
    ck_assert_double_eq(g.k, 1);
    assert_exact(&c, &g);
    ck_assert_int_eq(strncmp(g.row[0] + 46, "B-FB-F", 6), 0); /* steady state */
    diagram_free(&g);
    free(a);
    compiled_free(&c);
}
END_TEST

START_TEST(ascii_scaled_never_misrepresents)
{
    /* Too long for 4 bands of whole units: GPipe S=16 B=256 (542 units) and
     * 64 x 256 (638) scale time by 2, and every column's symbol is true of
     * what runs in it (assert_scaled); so does 1F1B S=16 B=64 in 40
     * columns (2 units a column), whose steady state is '*', an F and a B
     * sharing each column, and whose warm-up is 'f', two forwards a column. */
    static const struct {
        const char *file;
        int S, B, width;
        double k;
    } cases[] = {
        {"gpipe.pp", 16, 256, 100, 2}, {"gpipe.pp", 64, 256, 100, 2}, {"1f1b.pp", 16, 64, 40, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        compiled c;
        compile_lib(&c, cases[i].file, cases[i].S, cases[i].B);
        char *a = render(&c, ASCII, cases[i].width, NULL, 0);
        assert_width(a, cases[i].width);
        diagram g;
        diagram_read(&g, a, c.t.W);
        ck_assert_double_eq(g.k, cases[i].k);
        assert_scaled(&c, &g);
        ck_assert_msg(g.row[0][0] == 'f' || g.row[0][0] == 'F', "%s", g.row[0]);
        ck_assert_int_eq(g.row[c.t.W - 1][0], '.'); /* the last stage waits for the first F */
        if (c.t.js.B == 64) {
            ck_assert_int_eq(strncmp(g.row[0], "ffffffff", 8), 0);
            ck_assert_ptr_nonnull(strstr(g.row[0], "**********"));
        }
        diagram_free(&g);
        free(a);
        compiled_free(&c);
    }
}
END_TEST

START_TEST(ascii_scaled_keeps_jobs_far_shorter_than_a_column)
{
    /* Stage 1's forwards cost 1e9, every other job 1: a column is 2e7
     * time units, so worker 0's four 1-unit forwards take 2e-7 of its first
     * column. They ran, so that column is ':' (jobs and idle time), not '.'
     * (idle); it drew every job of workers 0, 2 and 3 as idle time. At 4e11
     * and B = 1 (2e9 a column) worker 0's one forward is 5e-10 of its
     * column, under the scaled layout's snap, and still shows. */
    static const struct {
        const char *big;
        int B;
        double k;
    } cases[] = {{"1000000000", 4, 2e7}, {"400000000000", 1, 2e9}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char src[512];
        snprintf(src, sizeof src,
                 "param S = 4\nparam B = %d\nparam W = S\n"
                 "compute(s,b,d) = s\npriority(s,b,d) = d * B + b\n"
                 "cost F = s == 1 ? %s : 1\ncost B = 1\n",
                 cases[i].B, cases[i].big);
        compiled c;
        compile_src(&c, src, NULL, 0);
        ck_assert_int_eq(c.errors, 0);
        char *a = render(&c, ASCII, 100, NULL, 0);
        assert_width(a, 100);
        diagram g;
        diagram_read(&g, a, 4);
        ck_assert_double_eq(g.k, cases[i].k);
        assert_scaled(&c, &g);
        for (int w = 0; w < 4; w++)
            ck_assert_msg(strchr(g.row[w], ':') || strchr(g.row[w], 'F'), "w%d shows no job: %s", w,
                          g.row[w]);
        ck_assert_int_eq(g.row[0][0], ':');
        diagram_free(&g);
        free(a);
        compiled_free(&c);
    }
}
END_TEST

START_TEST(ascii_scaled_measured_seconds_match_units)
{
    /* 1F1B S=16 B=64 in 40 columns (2 units a column) and the same times in
     * "seconds" (* 0.001, inexact in binary): the scaled layout's snap takes
     * the rounding for what it is, so the rows are the same, with no ':' for
     * a sliver of noise at a job's edge. */
    compiled c;
    compile_lib(&c, "1f1b.pp", 16, 64);
    char *units = render(&c, ASCII, 40, NULL, 0);
    for (int j = 0; j < job_count(&c.t.js); j++) {
        c.sim.start[j] *= 0.001;
        c.sim.end[j] *= 0.001;
    }
    c.sim.makespan *= 0.001;
    char *secs = render(&c, ASCII, 40, NULL, 0);
    diagram gu, gs;
    diagram_read(&gu, units, 16);
    diagram_read(&gs, secs, 16);
    ck_assert_double_eq(gu.k, 2);
    ck_assert_double_eq(gs.k, 0.002);
    for (int w = 0; w < 16; w++)
        ck_assert_str_eq(gs.row[w], gu.row[w]);
    diagram_free(&gu);
    diagram_free(&gs);
    free(secs);
    free(units);
    compiled_free(&c);
}
END_TEST

START_TEST(ascii_measured_costs_to_within_a_column)
{
    /* Costs that are no whole multiple of one another (F 123, B 271, as
     * measured ones are): every column width of up to the shortest job
     * splits some job, so time is scaled to half the shortest job, rounded
     * down to 50, and a column shows what
     * covers most of it. Every job still shows (its letter, once), at its
     * start to within a column. */
    static const char *src = "param S = 4\nparam B = 8\nparam W = S\n"
                             "let warm = S - 1 - s\n"
                             "compute(s,b,d) = s\nweights(s,b,d) = s\n"
                             "priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm)"
                             " : warm + 1 + 2 * b\norder strict\n"
                             "cost F = 123\ncost B = 271\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    char *a = render(&c, ASCII, 100, NULL, 0);
    assert_width(a, 100);
    assert_line(a, 0, "1 column = 50 time units");
    ck_assert_ptr_nonnull(strstr(a, "a column shows what covers most of"));
    diagram g;
    diagram_read(&g, a, 4);
    const pp_jobspace *js = &c.t.js;
    for (int w = 0; w < 4; w++) {
        int letters = 0;
        for (const char *p = g.row[w]; *p; p++)
            letters += *p == 'F' || *p == 'B';
        ck_assert_int_eq(letters, 2 * 8);
        for (int j = 0; j < job_count(js); j++) {
            if (c.t.worker[j] != w)
                continue;
            double at = c.sim.start[j] / g.k;
            int found = 0;
            for (int col = (int)floor(at) - 1; col <= (int)ceil(at) + 1; col++)
                found |= col >= 0 && g.row[w][col] == "FB"[job_d(js, j)];
            ck_assert_msg(found, "w%d: job %d at %g not near its start column in %s", w, j, at,
                          g.row[w]);
        }
    }
    diagram_free(&g);
    free(a);
    compiled_free(&c);
}
END_TEST

START_TEST(ascii_large_stays_within_width)
{
    compiled c;
    compile_lib(&c, "gpipe.pp", 64, 256);
    for (int width = 40; width <= 160; width += 60) {
        char *a = render(&c, ASCII, width, NULL, 0);
        assert_width(a, width);
        free(a);
    }
    compiled_free(&c);
}
END_TEST

Suite *timeline_suite(void)
{
    Suite *s = suite_create("timeline");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, svg_gpipe_small);
    tcase_add_test(tc, svg_axis_names_its_unit);
    tcase_add_test(tc, ascii_interleaved_names_stages);
    tcase_add_test(tc, svg_gpipe_large_stays_bounded);
    tcase_add_test(tc, svg_split_backward);
    tcase_add_test(tc, svg_1f1b_s16_b64_every_cell_labelled);
    tcase_add_test(tc, trace_is_json_with_a_slice_per_job_and_transfer);
    tcase_add_test(tc, trace_in_the_costs_unit_at_s16_b64);
    tcase_add_test(tc, extreme_costs_refused_not_drawn_wrong);
    tcase_add_test(tc, ascii_gpipe_s4_b4_exact);
    tcase_add_test(tc, ascii_1f1b_two_digit_microbatches);
    tcase_add_test(tc, ascii_non_unit_costs_exact);
    tcase_add_test(tc, ascii_measured_seconds_match_units);
    tcase_add_test(tc, ascii_bands_at_narrow_width);
    tcase_add_test(tc, ascii_1f1b_s16_b64_warmup_steady_cooldown);
    tcase_add_test(tc, ascii_1f1b_s16_b64_widths_proportional);
    tcase_add_test(tc, ascii_scaled_never_misrepresents);
    tcase_add_test(tc, ascii_scaled_keeps_jobs_far_shorter_than_a_column);
    tcase_add_test(tc, ascii_scaled_measured_seconds_match_units);
    tcase_add_test(tc, ascii_measured_costs_to_within_a_column);
    tcase_add_test(tc, ascii_large_stays_within_width);
    suite_add_tcase(s, tc);
    return s;
}
