/* test_offload.c - offload as a schedule decision (`offload [when EXPR]`,
 * `cost host_bandwidth`, --costs "host_bandwidth"; issue 26): the
 * statement's errors (file:line:col), the host-copy lane of the simulator
 * (an offload after F, a reload issued when B's other input starts, B
 * waiting for it, one copy at a time per worker), the report's device peak
 * and host bytes, and --emit torch-csv refusing an offload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/model_shape.h"
#include "timeline.h"
#include "torch_csv.h"
#include "suites.h"
#include "testutil.h"

#define HEAD "param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n"

/* 1F1B on 4 workers, 4 microbatches, unit costs. */
#define ONE_F_ONE_B                                                                                \
    "param S = 4\nparam B = 4\nparam W = 4\n"                                                      \
    "let warm = S - 1 - s\n"                                                                       \
    "compute(s,b,d) = s\n"                                                                         \
    "priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b\n"               \
    "order strict\n"

static void compile_text(pp_compiled *c, const char *src, pp_stage stop, const char *costs)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = src;
    o.len = strlen(src);
    o.stop_after = stop;
    o.capture = 1;
    o.costs = costs;
    pp_compile(&o, c);
}

static void fails_with(const char *src, const char *want)
{
    pp_compiled c;
    compile_text(&c, src, PP_STAGE_SIMULATE, NULL);
    ck_assert_msg(c.status == PP_COMPILE_ERRORS, "expected errors for:\n%s\ngot status %d:\n%s",
                  src, c.status, c.msgs ? c.msgs : "");
    ck_assert_msg(c.msgs && strstr(c.msgs, want), "expected '%s' in:\n%s", want,
                  c.msgs ? c.msgs : "");
    pp_compiled_free(&c);
}

static void warns_with(const char *src, const char *want)
{
    pp_compiled c;
    compile_text(&c, src, PP_STAGE_SIMULATE, NULL);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs ? c.msgs : "");
    ck_assert_msg(c.msgs && strstr(c.msgs, want), "expected '%s' in:\n%s", want,
                  c.msgs ? c.msgs : "");
    pp_compiled_free(&c);
}

START_TEST(statement_errors)
{
    fails_with(HEAD "offload when d == F\n",
               "t.pp:5:14: error: 'd' cannot be used in 'offload when': it may use s, b, params "
               "and lets (a stash is offloaded or not as a whole)\n"
               "    5 | offload when d == F\n"
               "      |              ^");
    fails_with("param S = 2\nparam B = 2\nparam W = 2\nlet k = d\ncompute(s,b,d) = s\n"
               "offload when k\n",
               "t.pp:6:14: error: 'k' uses d: 'offload when' may use s, b, params and lets "
               "without d");
    fails_with(HEAD "offload if s == 0\n",
               "t.pp:5:9: error: expected 'offload' or 'offload when EXPR', found 'if'");
    fails_with(HEAD "offload\noffload when s == 0\n",
               "t.pp:6:1: error: offload is given more than once");
    fails_with(HEAD "offload when ss > 0\n", "t.pp:5:14: error: unknown name 'ss'");
    fails_with(HEAD "offload when 1 / b\n",
               "t.pp:5:16: error: division by zero in offload when at (s=0, b=0)");
    fails_with(HEAD "recompute when s == 0\noffload when b == 1\n",
               "t.pp:6:16: error: offload at (s=0, b=1) is also recomputed: a recomputed forward "
               "keeps no stash to offload");
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = d == B ? 1 - s : s\n"
               "offload when s == 1\n",
               "t.pp:5:16: error: offload at (s=1, b=0): F runs on worker 1 but B on worker 0; "
               "an offloaded stash's F and B must share a worker");
    fails_with(HEAD "offload\ncost host_bandwidth = 0 - 5\n",
               "t.pp:6:25: error: cost host_bandwidth = -5: it must not be negative");
    fails_with(HEAD "offload\ncost host_bandwidth = s\n",
               "t.pp:6:23: error: 's' is a job variable and cannot be used in 'cost "
               "host_bandwidth' (it may use params)");
    warns_with(HEAD "cost host_bandwidth = 5\n",
               "t.pp:5:1: warning: 'cost host_bandwidth' has no effect: the schedule has no "
               "'offload'");
    warns_with(HEAD "offload when s > 5\n", "warning: 'offload when' holds for no job");
}
END_TEST

/* The lane's rules over every offloaded (s,b) of a compiled schedule
 * (each copy takes t.hcopy). */
static void lane_rules(const pp_compiled *c)
{
    const pp_jobspace *js = &c->t.js;
    const pp_sim_result *r = &c->sim;
    for (int i = 0; i < js->S * js->B; i++) {
        int s = i / js->B, b = i % js->B;
        int f = job_id(js, s, b, DIR_F), bk = job_id(js, s, b, DIR_B), p = job_pred(js, bk);
        if (!c->t.offload[i])
            continue;
        double copy = c->t.hcopy[i];
        ck_assert_msg(r->off_start[i] >= r->end[f], "offload (%d,%d) starts before F ends", s, b);
        ck_assert_double_eq_tol(r->off_end[i] - r->off_start[i], copy, 1e-9);
        ck_assert_double_eq_tol(r->rel_end[i] - r->rel_start[i], copy, 1e-9);
        ck_assert_msg(r->rel_start[i] >= r->off_end[i] && r->rel_start[i] >= r->start[p],
                      "reload (%d,%d) at %g: before its offload ends (%g) or B's input job "
                      "starts (%g)",
                      s, b, r->rel_start[i], r->off_end[i], r->start[p]);
        ck_assert_msg(r->start[bk] >= r->rel_end[i],
                      "B(%d,%d) at %g starts before its reload "
                      "ends at %g",
                      s, b, r->start[bk], r->rel_end[i]);
        /* one copy at a time on the worker's lane */
        for (int k = 0; k < js->S * js->B; k++) {
            if (k == i || !c->t.offload[k] ||
                c->t.worker[job_id(js, k / js->B, 0, 0)] != c->t.worker[f])
                continue;
            double a[2][2] = {{r->off_start[i], r->off_end[i]}, {r->rel_start[i], r->rel_end[i]}};
            double o[2][2] = {{r->off_start[k], r->off_end[k]}, {r->rel_start[k], r->rel_end[k]}};
            for (int x = 0; x < 2; x++)
                for (int y = 0; y < 2; y++)
                    ck_assert_msg(a[x][1] <= o[y][0] + 1e-9 || o[y][1] <= a[x][0] + 1e-9 ||
                                      copy == 0 || c->t.hcopy[k] == 0,
                                  "copies of (%d,%d) and (%d,%d) overlap on one lane", s, b,
                                  k / js->B, k % js->B);
        }
    }
}

/* Copies priced at one time unit each (host bandwidth = the stage's stash
 * bytes): the lane's rules hold, and B(0,0) of 1F1B on 4 workers waits
 * for its reload; with an unlimited host bandwidth nothing waits. */
START_TEST(host_copy_lane)
{
    pp_compiled c;
    compile_text(&c, ONE_F_ONE_B, PP_STAGE_REPORT, NULL);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    double plain = c.sim.makespan;
    uint64_t stash = pp_stage_stash_bytes(&c.sch.model, 4, 0);
    pp_compiled_free(&c);

    compile_text(&c, ONE_F_ONE_B "offload when s < 2\n", PP_STAGE_REPORT, NULL);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_double_eq(c.sim.makespan, plain); /* free copies cost no time */
    ck_assert_double_eq(c.t.hcopy[0], 0);
    lane_rules(&c);
    pp_compiled_free(&c);

    char src[1024];
    snprintf(src, sizeof src, ONE_F_ONE_B "offload when s == 0\ncost host_bandwidth = %llu\n",
             (unsigned long long)stash);
    compile_text(&c, src, PP_STAGE_REPORT, NULL);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_double_eq(c.t.hcopy[0], 1);
    lane_rules(&c);
    /* worker 0: F(0,0) 0-1, offload 1-2; ... the reload of (0,0) is issued
     * when B(1,0) starts; B(0,0) waits for it */
    int bk = job_id(&c.t.js, 0, 0, DIR_B);
    ck_assert_double_eq(c.sim.off_start[0], 1);
    ck_assert_double_eq(c.sim.start[bk], c.sim.rel_end[0] > c.sim.end[job_id(&c.t.js, 1, 0, DIR_B)]
                                             ? c.sim.rel_end[0]
                                             : c.sim.end[job_id(&c.t.js, 1, 0, DIR_B)]);
    ck_assert_msg(c.sim.makespan >= plain, "makespan %g < %g without offload", c.sim.makespan,
                  plain);
    pp_compiled_free(&c);
}
END_TEST

/* The report: device peak stash bytes drop by what is away, host bytes
 * say what the host holds; report.txt and report.json carry both. */
START_TEST(report_memory)
{
    pp_compiled c0, c1;
    compile_text(&c0, ONE_F_ONE_B, PP_STAGE_REPORT, NULL);
    compile_text(&c1, ONE_F_ONE_B "offload when s < S - 1\n", PP_STAGE_REPORT, NULL);
    ck_assert_msg(c0.status == PP_COMPILE_OK && c1.status == PP_COMPILE_OK, "%s%s", c0.msgs,
                  c1.msgs);
    ck_assert_int_eq(c1.rep.noffload, 12);
    for (int w = 0; w < 3; w++) {
        uint64_t stash = pp_stage_stash_bytes(&c0.sch.model, 4, w);
        /* 1F1B holds 4 - w stashes at once on worker w; offloaded with free
         * copies, fewer stay on the device */
        ck_assert_uint_eq(c0.rep.w[w].peak_act_bytes, (uint64_t)(4 - w) * stash);
        ck_assert_msg(c1.rep.w[w].peak_act_bytes < c0.rep.w[w].peak_act_bytes,
                      "worker %d: device peak %llu not below %llu", w,
                      (unsigned long long)c1.rep.w[w].peak_act_bytes,
                      (unsigned long long)c0.rep.w[w].peak_act_bytes);
        /* in host memory: at least one, at most every stash it holds */
        ck_assert_msg(c1.rep.w[w].host_bytes >= stash &&
                          c1.rep.w[w].host_bytes <= (uint64_t)(4 - w) * stash,
                      "worker %d: host bytes %llu", w, (unsigned long long)c1.rep.w[w].host_bytes);
        ck_assert_int_eq(c1.rep.w[w].peak_act, c0.rep.w[w].peak_act); /* still in flight */
    }
    ck_assert_uint_eq(c1.rep.w[3].host_bytes, 0);
    ck_assert_uint_eq(c1.rep.w[3].peak_act_bytes, c0.rep.w[3].peak_act_bytes);
    char *txt = NULL, *json = NULL;
    size_t n;
    FILE *f = open_memstream(&txt, &n);
    pp_report_info info = {"t.pp", "S=4 B=4 W=4", "strict", "cost lines", NULL};
    ck_assert_int_eq(pp_report_write_txt(f, &c1.rep, &info, &c1.t, &c1.sim), 0);
    fclose(f);
    f = open_memstream(&json, &n);
    ck_assert_int_eq(pp_report_write_json(f, &c1.rep, &info, &c1.t, &c1.sim), 0);
    fclose(f);
    ck_assert_msg(strstr(txt, "strict order, offload 12 of 16 (s,b))"), "%s", txt);
    ck_assert_msg(strstr(txt, "host      bytes held at most: w0 "), "%s", txt);
    ck_assert_msg(strstr(json, "\"offloads\": 12"), "%s", json);
    char want[96];
    snprintf(want, sizeof want, "\"host_bytes\": [%llu, ",
             (unsigned long long)(4 * pp_stage_stash_bytes(&c0.sch.model, 4, 0)));
    ck_assert_msg(strstr(json, want), "no '%s' in %s", want, json);
    free(txt);
    free(json);
    pp_compiled_free(&c0);
    pp_compiled_free(&c1);
}
END_TEST

/* trace.json draws each copy on its worker's host-copy lane (a track of
 * its own after the workers' and their receives'), at the simulated times. */
START_TEST(trace_draws_copies)
{
    pp_compiled c;
    compile_text(&c, ONE_F_ONE_B "offload when s == 1 && b == 2\ncost host_bandwidth = 1000\n",
                 PP_STAGE_REPORT, NULL);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    char *txt = NULL;
    size_t n;
    FILE *f = open_memstream(&txt, &n);
    ck_assert_int_eq(pp_timeline_trace(f, &c.t, &c.sim, c.rep.xfer, c.rep.nxfer, NULL), 0);
    fclose(f);
    ck_assert_msg(strstr(txt, "\"name\":\"worker 1 host copies\""), "%s", txt);
    char want[160];
    snprintf(want, sizeof want,
             "\"tid\":9,\"name\":\"offload (s=1,b=2)\",\"cat\":\"host\",\"ts\":%g",
             c.sim.off_start[6] * 1000);
    ck_assert_msg(strstr(txt, want), "no '%s' in:\n%s", want, txt);
    ck_assert_msg(strstr(txt, "\"name\":\"reload (s=1,b=2)\""), "%s", txt);
    ck_assert_msg(!strstr(txt, "(s=1,b=1)\",\"cat\":\"host\""), "only (1,2) is offloaded:\n%s",
                  txt);
    free(txt);
    pp_compiled_free(&c);
}
END_TEST

/* --costs "host_bandwidth" overrides the cost line; a bad value is refused. */
START_TEST(costs_key)
{
    char path[] = "/tmp/pp_offload_costsXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"host_bandwidth\": 1000}\n", f);
    fclose(f);
    pp_compiled c;
    compile_text(&c, ONE_F_ONE_B "offload\ncost host_bandwidth = 5\n", PP_STAGE_SIMULATE, path);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_double_eq(c.t.host_bandwidth, 1000);
    uint64_t stash = pp_stage_stash_bytes(&c.sch.model, 4, 0);
    ck_assert_double_eq_tol(c.t.hcopy[0], (double)stash / 1000, 1e-9);
    pp_compiled_free(&c);
    pp_costs k;
    char err[256];
    const char *bad = "{\"host_bandwidth\": -1}";
    ck_assert_int_eq(pp_costs_parse(&k, "c.json", bad, strlen(bad), err, sizeof err), -1);
    ck_assert_msg(strstr(err, "expected a number >= 0 for \"host_bandwidth\", found -1"), "%s",
                  err);
    remove(path);
}
END_TEST

/* ppc --offload EXPR compiles the file as if it ended with 'offload when
 * EXPR'; an error in EXPR is quoted with its caret. */
START_TEST(offload_option)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = ONE_F_ONE_B;
    o.len = strlen(ONE_F_ONE_B);
    o.stop_after = PP_STAGE_REPORT;
    o.capture = 1;
    o.offload = "s == 1";
    pp_compiled c;
    pp_compile(&o, &c);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.rep.noffload, 4);
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(c.t.offload[i], i / 4 == 1);
    pp_compiled_free(&c);
    o.offload = "d == F";
    pp_compile(&o, &c);
    ck_assert_msg(c.status == PP_COMPILE_ERRORS &&
                      strstr(c.msgs, "t.pp:9:14: error: 'd' cannot be used in 'offload when'"),
                  "%s", c.msgs);
    pp_compiled_free(&c);
}
END_TEST

/* --emit torch-csv refuses an offloaded stash, saying why. */
START_TEST(torch_csv_refuses)
{
    char why[512];
    pp_compiled c;
    compile_text(&c, ONE_F_ONE_B "offload when b == 1 && s == 2\n", PP_STAGE_SIMULATE, NULL);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(pp_torch_csv_check(&c.t, why, sizeof why), 1);
    ck_assert_msg(strstr(why, "(s=2, b=1)'s stash is offloaded to host memory ('offload'), but "
                              "PyTorch's pipeline actions") != NULL,
                  "%s", why);
    pp_compiled_free(&c);
}
END_TEST

Suite *offload_suite(void)
{
    Suite *s = suite_create("offload");
    TCase *tc = tcase_create("compile");
    tcase_add_test(tc, statement_errors);
    tcase_add_test(tc, host_copy_lane);
    tcase_add_test(tc, report_memory);
    tcase_add_test(tc, costs_key);
    tcase_add_test(tc, offload_option);
    tcase_add_test(tc, trace_draws_copies);
    tcase_add_test(tc, torch_csv_refuses);
    suite_add_tcase(s, tc);
    return s;
}
