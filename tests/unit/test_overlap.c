/* test_overlap.c - overlapped jobs (`overlap F with B when EXPR`, issue 17
 * part 4): the statement's errors (file:line:col, and ppc's exit status),
 * `cost overlap` and --costs "overlap"; the simulator's pairing and pair
 * timing on a hand-worked schedule; the lowered sequence (Overlap, then the
 * pair's two jobs) and its second workspace; the plan reader's checks of
 * Overlap; bufcheck on a pair that shares a buffer one of them writes. The
 * overlap_e2e suite trains schedules/1f1b-overlap.pp and v-overlap.pp under
 * mpirun on the cpu backend to the reference's weights (the cuda backend's run is the
 * gpu_e2e suite's `overlap` TCase, on a GPU or the stand-ins). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/bufcheck.h"
#include "suites.h"
#include "testutil.h"

/* 1F1B on S=2 workers, B=3, tF=1, tB=2: worker 1's order is F0 B0 F1 B1 F2
 * B2, worker 0's F0 F1 B0 F2 B1 B2; with `when b > warm` the pairs are
 * (B(1,0), F(1,1)), (B(1,1), F(1,2)) and (B(0,0), F(0,2)). */
#define SMALL                                                                                      \
    "param S = 2\nparam B = 3\nparam W = 2\nparam P = 50\n"                                        \
    "let warm = S - 1 - s\n"                                                                       \
    "compute(s,b,d) = s\n"                                                                         \
    "priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b\n"               \
    "order strict\n"                                                                               \
    "overlap F with B when b > warm\n"                                                             \
    "cost B = 2\n"                                                                                 \
    "cost overlap = P\n"

static void compile_text(pp_compiled *c, const char *src, const char *costs, pp_stage stop,
                         const pp_define *defs, int ndefs)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = src;
    o.len = strlen(src);
    o.defs = defs;
    o.ndefs = ndefs;
    o.costs = costs;
    o.stop_after = stop;
    o.capture = 1;
    pp_compile(&o, c);
}

/* The compile must fail with `want` among its messages. */
static void fails_with(const char *src, const char *want)
{
    pp_compiled c;
    compile_text(&c, src, NULL, PP_STAGE_SIMULATE, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_ERRORS, "expected errors for:\n%s\ngot status %d:\n%s",
                  src, c.status, c.msgs ? c.msgs : "");
    ck_assert_msg(c.msgs && strstr(c.msgs, want), "expected '%s' in:\n%s", want,
                  c.msgs ? c.msgs : "");
    pp_compiled_free(&c);
}

START_TEST(statement_errors)
{
    /* a wrong word, at its column */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "overlap B with F when 1\n",
               "t.pp:6:9: error: expected 'overlap F with B when EXPR' or 'overlap F then B when "
               "EXPR', found 'B' where 'F' goes\n"
               "    6 | overlap B with F when 1\n"
               "      |         ^");
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "overlap F and B when 1\n",
               "t.pp:6:11: error: expected 'overlap F with B when EXPR' or 'overlap F then B when "
               "EXPR', found 'and' where 'with' or 'then' goes");
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "overlap F with B if 1\n",
               "t.pp:6:18: error: expected 'overlap F with B when EXPR' or 'overlap F then B when "
               "EXPR', found 'if' where 'when' goes");
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "overlap F then F when 1\n",
               "t.pp:6:16: error: expected 'overlap F with B when EXPR' or 'overlap F then B when "
               "EXPR', found 'F' where 'B' goes");
    /* a missing condition is a syntax error at the end */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "overlap F with B when\n",
               "t.pp:6:22: error: syntax error, unexpected end of file");
    /* greedy order */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n"
               "overlap F with B when 1\n",
               "t.pp:5:1: error: 'overlap' needs 'order strict': pairs are neighbours in a "
               "worker's priority order, which the greedy order does not follow");
    /* twice */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "overlap F with B when 1\noverlap F with B when 0\n",
               "t.pp:7:1: error: overlap is given more than once");
    /* an unknown name in the condition, and w, which it may not use */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "overlap F with B when bb > 0\n",
               "t.pp:6:23: error: unknown name 'bb'");
    /* the condition fails at a job */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "overlap F with B when 1 / b\n",
               "t.pp:6:25: error: division by zero in 'overlap ... when' at (s=0, b=0, d=F)");
    /* cost overlap: a percent, params only */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "cost overlap = 150\n",
               "t.pp:6:16: error: cost overlap = 150: expected a percent in [0, 100] (100: a pair "
               "takes tF + tB, 0: max(tF, tB))");
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "cost overlap = -1\n",
               "cost overlap = -1: expected a percent in [0, 100]");
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
               "cost overlap = s\n",
               "t.pp:6:16: error: 's' is a job variable and cannot be used in 'cost overlap' (it "
               "may use params)");
    /* ... also through a let */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\nlet k = b\ncompute(s,b,d) = s\n"
               "order strict\ncost overlap = k\n",
               "t.pp:7:16: error: 'cost overlap' may use params, not s, b or d");
    /* an unknown cost names overlap among the choices */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\ncost X = 1\n",
               "unknown cost 'X': expected F, B, W, R, latency, bandwidth, overlap, "
               "tensor_latency, tensor_bandwidth or host_bandwidth");
}
END_TEST

/* schedules/<name> into src (NUL-terminated). */
static void read_library(const char *name, char *src, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    size_t n = fread(src, 1, len - 1, f);
    fclose(f);
    src[n] = '\0';
}

/* Pairs that wait on each other deadlock the strict order, named as pairs:
 * with `b >= warm` worker s pairs F(s,b+warm) with B(s,b), whose B(s+1,b)
 * is in worker s+1's pair with F(s+1,b+warm-1), ...; the last worker pairs
 * B(3,0) with F(3,1), which needs F(2,1), in worker 2's pair with B(2,0). */
START_TEST(pairs_that_deadlock)
{
    char src[8192];
    read_library("1f1b-overlap.pp", src, sizeof src);
    char *at = strstr(src, "overlap F with B when b > warm");
    ck_assert_ptr_nonnull(at);
    memcpy(at, "overlap F with B when b >=warm", 30);
    pp_compiled c;
    compile_text(&c, src, NULL, PP_STAGE_SIMULATE, NULL, 0);
    ck_assert_int_eq(c.status, PP_COMPILE_ERRORS);
    ck_assert(c.deadlock);
    ck_assert_msg(strstr(c.msgs,
                         "t.pp: error: the strict order deadlocks; each worker's blocked job:\n"
                         "  worker 0 waits at B(0,0) (overlapped with F(0,3)), which needs "
                         "B(1,0) from worker 1\n"),
                  "%s", c.msgs);
    ck_assert_msg(strstr(c.msgs, "  worker 3 waits at F(3,1) (overlapped with B(3,0)), which needs "
                                 "F(2,1) from worker 2\n"),
                  "%s", c.msgs);
    pp_compiled_free(&c);
}
END_TEST

/* ppc's exit status and message for a schedule error and a bad --costs. */
START_TEST(ppc_exit_status)
{
    char *dir = temp_dir(), path[1024], cmd[4096];
    snprintf(path, sizeof path, "%s/t.pp", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\noverlap F with B when 1\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s -o %s/out -q", PP_ROOT, path, dir);
    char *out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "t.pp:5:1: error: 'overlap' needs 'order strict'"), "%s", out);
    free(out);

    snprintf(path, sizeof path, "%s/c.json", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"F\": 1,\n \"overlap\": 2}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/1f1b-overlap.pp -o %s/out -q --costs %s",
             PP_ROOT, PP_ROOT, dir, path);
    out = run_expect(cmd, 3);
    ck_assert_msg(
        strstr(out, "c.json:2:13: expected a fraction in [0, 1] for \"overlap\", found 2"), "%s",
        out);
    free(out);
    remove_dir(dir);
}
END_TEST

START_TEST(costs_file_overlap)
{
    pp_costs c;
    char err[256];
    ck_assert_int_eq(pp_costs_parse(&c, "c.json", "{\"overlap\": 0.25}", 17, err, sizeof err), 0);
    ck_assert(c.has_overlap && c.overlap == 0.25);
    pp_costs_free(&c);
    ck_assert_int_eq(pp_costs_parse(&c, "c.json", "{\"overlap\": -0.5}", 17, err, sizeof err), -1);
    ck_assert_str_eq(err, "c.json:1:13: expected a number >= 0 for \"overlap\", found -0.5");
    ck_assert_int_eq(pp_costs_parse(&c, "c.json", "{\"overlap\": \"x\"}", 16, err, sizeof err), -1);
    ck_assert_str_eq(err, "c.json:1:13: expected a number for \"overlap\", found a string");
}
END_TEST

static int job(const pp_compiled *c, int s, int b, int d) { return job_id(&c->t.js, s, b, d); }

/* The hand-worked timeline (sim.h's rule, tF = 1, tB = 2, no transfer
 * time). P = 50: a pair takes 2 + 0.5 = 2.5.
 *   w0: F(0,0) 0-1, F(0,1) 1-2
 *   w1: F(1,0) 1-2; pair B(1,0)+F(1,1) 2-4.5 (F(1,0) ends 2, F(0,1) ends 2)
 *   w0: pair B(0,0)+F(0,2) 4.5-7 (B(1,0) ends 4.5)
 *   w1: pair B(1,1)+F(1,2) 7-9.5 (F(0,2) ends 7)
 *   w0: B(0,1) 9.5-11.5, B(0,2) 11.5-13.5; w1: B(1,2) 9.5-11.5
 * Makespan 13.5; with P = 100 (pairs take 3) 15, with P = 0 (2) 12. */
START_TEST(pair_timing_hand_worked)
{
    pp_compiled c;
    compile_text(&c, SMALL, NULL, PP_STAGE_SIMULATE, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.sim.npairs, 3);
    ck_assert_int_eq(c.sim.partner[job(&c, 1, 0, 1)], job(&c, 1, 1, 0));
    ck_assert_int_eq(c.sim.partner[job(&c, 1, 1, 1)], job(&c, 1, 2, 0));
    ck_assert_int_eq(c.sim.partner[job(&c, 0, 0, 1)], job(&c, 0, 2, 0));
    ck_assert_int_eq(c.sim.partner[job(&c, 0, 1, 0)], -1); /* F(0,1): b = warm, not pairable */
    ck_assert_int_eq(c.sim.partner[job(&c, 1, 0, 0)], -1); /* F(1,0) B(1,0): one microbatch */
    ck_assert_double_eq(c.sim.start[job(&c, 1, 0, 1)], 2);
    ck_assert_double_eq(c.sim.end[job(&c, 1, 1, 0)], 4.5);
    ck_assert_double_eq(c.sim.start[job(&c, 0, 0, 1)], 4.5);
    ck_assert_double_eq(c.sim.start[job(&c, 0, 2, 0)], 4.5);
    ck_assert_double_eq(c.sim.end[job(&c, 0, 2, 0)], 7);
    ck_assert_double_eq(c.sim.start[job(&c, 1, 2, 0)], 7);
    ck_assert_double_eq(c.sim.end[job(&c, 1, 1, 1)], 9.5);
    ck_assert_double_eq(c.sim.end[job(&c, 0, 2, 1)], 13.5);
    ck_assert_double_eq(c.sim.makespan, 13.5);
    pp_compiled_free(&c);

    const double want[] = {15, 12};
    const pp_define p[2][1] = {{{"P", 100}}, {{"P", 0}}};
    for (int i = 0; i < 2; i++) {
        compile_text(&c, SMALL, NULL, PP_STAGE_SIMULATE, p[i], 1);
        ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
        ck_assert_msg(c.sim.makespan == want[i], "P=%lld: makespan %g, expected %g", p[i][0].value,
                      c.sim.makespan, want[i]);
        pp_compiled_free(&c);
    }
}
END_TEST

/* P = 100: the pairs run in turn (sim.h), as the cpu backend runs them,
 * from the report on; the plans keep the order of each pair as one unit
 * (by_pair: the makespan 15 above). tF = 1, tB = 2:
 *   w0: F(0,0) 0-1, F(0,1) 1-2;  w1: F(1,0) 1-2
 *   w1: B(1,0) 2-4, then F(1,1) 4-5 (its input was here at 2); both out at 5
 *   w0: B(0,0) 5-7 (B(1,0)'s gradient leaves at 5), F(0,2) 7-8; out at 8
 *   w1: B(1,1) 5-7, F(1,2) 8-9 (F(0,2)'s output leaves w0 at 8)
 *   w0: B(0,1) 9-11, B(0,2) 11-13 (B(1,2) 9-11 on w1)
 * Makespan 13 against 15 as units: w1's B no longer waits for F(0,1). */
START_TEST(pairs_in_turn_hand_worked)
{
    pp_compiled c;
    const pp_define p100[] = {{"P", 100}};
    compile_text(&c, SMALL, NULL, PP_STAGE_PLANS, p100, 1);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_msg(c.sim.in_turn && c.by_pair.start && !c.by_pair.in_turn,
                  "in_turn %d, by_pair %s (in_turn %d)", c.sim.in_turn,
                  c.by_pair.start ? "kept" : "absent", c.by_pair.in_turn);
    ck_assert_ptr_eq(pp_compiled_order(&c), &c.by_pair);
    ck_assert_double_eq(c.by_pair.makespan, 15);
    const struct {
        int s, b, d;
        double start, end, out;
    } want[] = {{1, 0, 1, 2, 4, 5},   {1, 1, 0, 4, 5, 5},   {0, 0, 1, 5, 7, 8},
                {0, 2, 0, 7, 8, 8},   {1, 1, 1, 5, 7, 9},   {1, 2, 0, 8, 9, 9},
                {0, 1, 1, 9, 11, 11}, {0, 2, 1, 11, 13, 13}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        int j = job(&c, want[i].s, want[i].b, want[i].d);
        ck_assert_msg(c.sim.start[j] == want[i].start && c.sim.end[j] == want[i].end &&
                          pp_sim_out_time(&c.sim, j) == want[i].out,
                      "%c(%d,%d): %g-%g, out at %g; expected %g-%g, out at %g", "FB"[want[i].d],
                      want[i].s, want[i].b, c.sim.start[j], c.sim.end[j],
                      pp_sim_out_time(&c.sim, j), want[i].start, want[i].end, want[i].out);
    }
    ck_assert_double_eq(c.sim.makespan, 13);
    ck_assert_double_eq(c.rep.makespan, 13);
    ck_assert_double_eq(c.rep.w[0].busy, 9); /* each job its own time: 1 + 1 + 2 + 1 + 2 + 2 */

    char *txt = NULL;
    size_t nt = 0;
    FILE *ft = open_memstream(&txt, &nt);
    pp_report_info info = {"t.pp", "S=2 B=3 W=2 P=100", "strict", NULL, NULL, NULL};
    ck_assert_int_eq(pp_report_write_txt(ft, &c.rep, &info, &c.t, &c.sim), 0);
    fclose(ft);
    ck_assert_msg(strstr(txt, "overlap   3 pairs of a forward and a backward run in turn "
                              "(overlap 1): each job once its inputs are here, the outputs of "
                              "both at the pair's end\n"
                              "  worker 0: F(0,2) with B(0,0) at 5-8\n"),
                  "%s", txt);
    free(txt);

    /* the plans are the ones the pairs as units order: Overlap, then the
     * pair's two jobs, the receive of F(1,1)'s input before the marker */
    const pp_plan *w1 = &c.plans[1];
    int recv = -1, marker = -1;
    for (uint32_t i = 0; i < w1->ninstr; i++) {
        const pp_instr *in = &w1->code[i];
        if (in->op == PP_OP_RecvActivation && in->mb == 1 && recv < 0)
            recv = (int)i;
        if (in->op == PP_OP_Overlap && marker < 0)
            marker = (int)i;
    }
    ck_assert_msg(recv >= 0 && marker > recv && w1->code[marker + 1].op == PP_OP_Backward &&
                      w1->code[marker + 2].op == PP_OP_Forward && w1->code[marker + 2].mb == 1,
                  "rank 1: RecvActivation mb 1 at %d, Overlap at %d", recv, marker);
    pp_compiled_free(&c);
}
END_TEST

/* `then`: one worker's order F0 F1 B0 F2 B1 B2 with only F2 pairable.
 * `overlap F with B` pairs F2 with B0 before it (front to back, either
 * first); `overlap F then B` only with the backward after it, B1 (as
 * PyTorch's OVERLAP_F_B, forward first: dualpipev.pp). */
#define ONE_WORKER(form)                                                                           \
    "param S = 1\nparam B = 3\nparam W = 1\n"                                                      \
    "compute(s,b,d) = 0\n"                                                                         \
    "priority(s,b,d) = d == F ? (b <= 1 ? b : 2 * b - 1) : 2 + 2 * b\n"                            \
    "order strict\n"                                                                               \
    "overlap F " form " B when b == 2\n"
START_TEST(then_pairs_forward_first)
{
    pp_compiled c;
    compile_text(&c, ONE_WORKER("with"), NULL, PP_STAGE_SIMULATE, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.sim.npairs, 1);
    ck_assert_int_eq(c.sim.partner[job(&c, 0, 2, 0)], job(&c, 0, 0, 1));
    pp_compiled_free(&c);
    compile_text(&c, ONE_WORKER("then"), NULL, PP_STAGE_SIMULATE, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.sim.npairs, 1);
    ck_assert_int_eq(c.sim.partner[job(&c, 0, 2, 0)], job(&c, 0, 1, 1));
    ck_assert_int_eq(c.sim.partner[job(&c, 0, 0, 1)], -1);
    pp_compiled_free(&c);
}
END_TEST

/* --costs "overlap" replaces the schedule's line: 0 gives P = 0's 12. The
 * report lists the pairs and counts a pair's time once in busy. */
START_TEST(costs_override_and_report)
{
    char *dir = temp_dir(), path[1024];
    snprintf(path, sizeof path, "%s/c.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"overlap\": 0}\n", f);
    fclose(f);
    pp_compiled c;
    compile_text(&c, SMALL, path, PP_STAGE_REPORT, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_double_eq(c.t.overlap, 0);
    ck_assert_double_eq(c.sim.makespan, 12);
    /* worker 0: F0 F1 (1 each), the pair (2), B1 B2 (2 each) */
    ck_assert_double_eq(c.rep.w[0].busy, 8);

    char *txt = NULL, *json = NULL;
    size_t nt = 0, nj = 0;
    FILE *ft = open_memstream(&txt, &nt), *fj = open_memstream(&json, &nj);
    pp_report_info info = {"t.pp", "S=2 B=3 W=2", "strict", path, NULL, NULL};
    ck_assert_int_eq(pp_report_write_txt(ft, &c.rep, &info, &c.t, &c.sim), 0);
    ck_assert_int_eq(pp_report_write_json(fj, &c.rep, &info, &c.t, &c.sim), 0);
    fclose(ft);
    fclose(fj);
    ck_assert_msg(strstr(txt, "overlap   3 pairs of a forward and a backward run at once; a pair "
                              "takes max(tF, tB) + 0 * min(tF, tB)\n"
                              "  worker 0: F(0,2) with B(0,0) at 4-6\n"),
                  "%s", txt);
    ck_assert_msg(strstr(json,
                         "\"overlap\": 0,\n  \"pairs\": [\n    {\"worker\": 0, \"F\": [0, 2], "
                         "\"B\": [0, 0], \"start\": 4, \"end\": 6},"),
                  "%s", json);
    ck_assert_msg(!strstr(txt, "more (report.json"), "%s", txt);
    free(txt);
    free(json);
    pp_compiled_free(&c);
    remove_dir(dir);

    /* a long list stops at 32 pairs in report.txt, not in report.json */
    const pp_define many[] = {{"B", 40}};
    compile_text(&c, SMALL, NULL, PP_STAGE_REPORT, many, 1);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.sim.npairs, 38 + 39); /* worker 0: F2..F39, worker 1: F1..F39 */
    txt = json = NULL;
    ft = open_memstream(&txt, &nt);
    fj = open_memstream(&json, &nj);
    ck_assert_int_eq(pp_report_write_txt(ft, &c.rep, &info, &c.t, &c.sim), 0);
    ck_assert_int_eq(pp_report_write_json(fj, &c.rep, &info, &c.t, &c.sim), 0);
    fclose(ft);
    fclose(fj);
    ck_assert_msg(strstr(txt, "  worker 0: F(0,33) with B(0,31) at ") &&
                      !strstr(txt, "F(0,34) with") &&
                      strstr(txt, "  ... and 45 more (report.json lists every pair)\n"),
                  "%s", txt);
    int listed = 0;
    for (const char *q = json; (q = strstr(q, "{\"worker\": ")); q++)
        listed++;
    ck_assert_int_eq(listed, 77);
    free(txt);
    free(json);
    pp_compiled_free(&c);
}
END_TEST

/* A schedule that pairs nothing still says so; without an overlap line,
 * report.json says null. */
START_TEST(report_without_pairs)
{
    pp_compiled c;
    compile_text(&c,
                 "param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\norder strict\n"
                 "overlap F with B when 0\n",
                 NULL, PP_STAGE_REPORT, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.sim.npairs, 0);
    ck_assert_double_eq(c.t.overlap, 1);
    pp_compiled_free(&c);
    compile_text(&c, "param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n", NULL,
                 PP_STAGE_REPORT, NULL, 0);
    char *json = NULL;
    size_t nj = 0;
    FILE *fj = open_memstream(&json, &nj);
    pp_report_info info = {"t.pp", "", "greedy", "", NULL, NULL};
    ck_assert_int_eq(pp_report_write_json(fj, &c.rep, &info, &c.t, &c.sim), 0);
    fclose(fj);
    ck_assert_msg(strstr(json, "\"overlap\": null,\n  \"pairs\": null,\n"), "%s", json);
    free(json);
    pp_compiled_free(&c);
}
END_TEST

/* The ops of rank r's plan from `from`, as names joined by spaces, with
 * "(s,b)" after jobs. */
static void ops_of(const pp_plan *p, uint32_t from, uint32_t n, char *buf, size_t len)
{
    buf[0] = '\0';
    for (uint32_t i = from; i < from + n && i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        size_t k = strlen(buf);
        if (in->op == PP_OP_Forward || in->op == PP_OP_Backward)
            snprintf(buf + k, len - k, "%s%s(%d,%d)", k ? " " : "", pp_op_name(in->op),
                     (int)in->stage, (int)in->mb);
        else
            snprintf(buf + k, len - k, "%s%s", k ? " " : "", pp_op_name(in->op));
    }
}

/* Each simulated pair is an Overlap then its two jobs (in the global
 * order's tie-break: microbatch first), every receive and microbatch load
 * they need before the marker; a plan with a pair has two workspaces. */
START_TEST(lowered_sequence)
{
    pp_compiled c;
    compile_text(&c, SMALL, NULL, PP_STAGE_PLANS, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    const char *want[2] = {
        "LoadMicroBatch Forward(0,0) SendActivation LoadMicroBatch Forward(0,1) SendActivation "
        "RecvGrad LoadMicroBatch Overlap Backward(0,0) Forward(0,2) SendActivation RecvGrad "
        "Backward(0,1) RecvGrad Backward(0,2) OptimizerStep",
        "RecvActivation LoadMicroBatch Forward(1,0) RecvActivation LoadMicroBatch Overlap "
        "Backward(1,0) Forward(1,1) SendGrad RecvActivation LoadMicroBatch Overlap Backward(1,1) "
        "Forward(1,2) SendGrad Backward(1,2) SendGrad OptimizerStep"};
    for (int r = 0; r < 2; r++) {
        char got[2048];
        ops_of(&c.plans[r], 0, c.plans[r].ninstr, got, sizeof got);
        ck_assert_msg(!strcmp(got, want[r]), "rank %d:\n got %s\nwant %s", r, got, want[r]);
        ck_assert_uint_eq(pp_plan_workspaces(&c.plans[r]), 2);
    }
    /* the report's plan memory counts both workspaces: the slots, two
     * workspaces and the stage's weights and gradients (SGD: no state) */
    uint64_t slots = 0;
    for (uint32_t k = 0; k < c.plans[0].nslots; k++)
        slots += c.plans[0].slot_bytes[k];
    ck_assert_uint_eq(c.rep.w[0].mem_bytes, slots + 2 * c.plans[0].workspace_bytes +
                                                2 * pp_stage_weight_bytes(&c.sch.model, 2, 0));
    pp_compiled_free(&c);

    /* weights owned by the other worker: each backward's first use of a
     * stage's gradient accumulator (ZeroGrads) goes before the marker too
     * (it once landed between the two jobs: an internal error) */
    char fetched[2048];
    snprintf(fetched, sizeof fetched, "%sweights(s,b,d) = 1 - s\n", SMALL);
    compile_text(&c, fetched, NULL, PP_STAGE_PLANS, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    for (int r = 0; r < 2; r++) {
        int markers = 0;
        for (uint32_t i = 0; i < c.plans[r].ninstr; i++)
            markers += c.plans[r].code[i].op == PP_OP_Overlap;
        ck_assert_int_eq(markers, r == 0 ? 1 : 2);
    }
    pp_compiled_free(&c);

    /* a split backward: the input-gradient half pairs (BackwardInput),
     * ZB-H1 with 1F1B's steady-state condition */
    char zb[8192];
    read_library("zb-h1.pp", zb, sizeof zb - 64);
    strcat(zb, "\noverlap F with B when b > S - 1 - s\n");
    compile_text(&c, zb, NULL, PP_STAGE_PLANS, NULL, 0);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.sim.npairs, 18);
    int bwi = 0;
    for (uint32_t i = 0; i + 2 < c.plans[1].ninstr; i++)
        if (c.plans[1].code[i].op == PP_OP_Overlap)
            bwi += c.plans[1].code[i + 1].op == PP_OP_BackwardInput ||
                   c.plans[1].code[i + 2].op == PP_OP_BackwardInput;
    ck_assert_int_eq(bwi, 5);
    pp_compiled_free(&c);

    /* no pair: one workspace, no marker */
    const pp_define none[] = {{"P", 100}};
    compile_text(&c,
                 "param S = 2\nparam B = 3\nparam W = 2\nparam P = 1\ncompute(s,b,d) = s\n"
                 "order strict\noverlap F with B when P == 0\n",
                 NULL, PP_STAGE_PLANS, none, 1);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    for (int r = 0; r < 2; r++) {
        ck_assert_uint_eq(pp_plan_workspaces(&c.plans[r]), 1);
        for (uint32_t i = 0; i < c.plans[r].ninstr; i++)
            ck_assert_int_ne(c.plans[r].code[i].op, PP_OP_Overlap);
    }
    pp_compiled_free(&c);
}
END_TEST

/* ---- hand-made plans: the plan reader and bufcheck ----------------------- */

/* Rank 0 of 2 (testutil.h's plan_b): 2 stages, 8 slots. */
static void plan_init(plan_b *b)
{
    memset(b, 0, sizeof *b);
    b->p.version = PP_PLAN_VERSION;
    b->p.rank = 0;
    b->p.world = 2;
    b->p.S = 2;
    b->p.B = 4;
    b->p.nslots = 8;
    b->p.stage_role = malloc(2);
    b->p.slot_bytes = calloc(8, sizeof *b->p.slot_bytes);
    ck_assert(b->p.stage_role && b->p.slot_bytes);
    memset(b->p.stage_role, 0, 2);
    b->p.stage_role[0] = PP_ROLE_COMPUTE | PP_ROLE_OWNER;
    b->p.model =
        (pp_model){.vocab = 256, .context = 8, .embed = 16, .ffn = 256, .blocks = 1, .batch = 16};
    for (int k = 0; k < 8; k++)
        b->p.slot_bytes[k] = 64;
}

#define END PP_ROLE_NONE
#define OVERLAP(b) plan_put(b, PP_OP_Overlap, -1, -1, -1, END)

/* Rank 0 of a 2-stage pipeline: F(0,0), F(0,1) with their outputs sent,
 * then B(0,0) paired with F(0,2). */
static void pipeline_start(plan_b *b)
{
    plan_init(b);
    for (int mb = 0; mb < 2; mb++) {
        plan_put(b, PP_OP_LoadMicroBatch, -1, mb, -1, PP_ROLE_TOKENS, 0, END);
        plan_put(b, PP_OP_Forward, 0, mb, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 1 + mb, PP_ROLE_OUT, 3,
                 END);
        plan_put(b, PP_OP_SendActivation, 0, mb, 1, PP_ROLE_SRC, 3, END);
    }
    plan_put(b, PP_OP_LoadMicroBatch, -1, 2, -1, PP_ROLE_TOKENS, 0, END);
    plan_put(b, PP_OP_RecvGrad, 1, 0, 1, PP_ROLE_DST, 4, END);
}

static void plan_rejects(plan_b *b, const char *want)
{
    char err[512];
    ck_assert_int_eq(pp_plan_validate(&b->p, err, sizeof err), PP_PLAN_EOPERAND);
    ck_assert_msg(strstr(err, want), "expected '%s' in: %s", want, err);
    pp_plan_free(&b->p);
}

START_TEST(plan_reader_checks_overlap)
{
    plan_b b;
    pipeline_start(&b); /* a transfer between the two */
    OVERLAP(&b);
    plan_put(&b, PP_OP_Backward, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 4, END);
    plan_put(&b, PP_OP_SendActivation, 0, 1, 1, PP_ROLE_SRC, 3, END);
    plan_put(&b, PP_OP_Forward, 0, 2, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 5, PP_ROLE_OUT, 6, END);
    plan_rejects(&b, "instruction 8 (Overlap): expected a Forward and a Backward or BackwardInput "
                     "right after it, found other instructions");
    pipeline_start(&b); /* two forwards */
    OVERLAP(&b);
    plan_put(&b, PP_OP_Forward, 0, 3, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 5, PP_ROLE_OUT, 6, END);
    plan_put(&b, PP_OP_Forward, 0, 2, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 7, PP_ROLE_OUT, 3, END);
    plan_rejects(&b, "instruction 8 (Overlap): expected a Forward and a Backward");
    pipeline_start(&b); /* at the end */
    OVERLAP(&b);
    plan_put(&b, PP_OP_Backward, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 4, END);
    plan_rejects(&b, "instruction 8 (Overlap): expected a Forward and a Backward or BackwardInput "
                     "right after it, found the end of the plan");
    pipeline_start(&b); /* one microbatch */
    OVERLAP(&b);
    plan_put(&b, PP_OP_Forward, 0, 0, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 5, PP_ROLE_OUT, 6, END);
    plan_put(&b, PP_OP_Backward, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 4, END);
    plan_rejects(&b, "instruction 8 (Overlap): its pair is of one microbatch (0), whose backward "
                     "needs the forward (expected two microbatches)");
}
END_TEST

static void bufcheck_says(plan_b *b, const char *want)
{
    char err[512], msg[1024];
    ck_assert_msg(pp_plan_validate(&b->p, err, sizeof err) == PP_PLAN_OK, "invalid: %s", err);
    int rc = pp_buffer_check_plan(&b->p, msg, sizeof msg);
    if (!want)
        ck_assert_msg(rc == 0 && !strcmp(msg, "ok"), "expected ok, got: %s", msg);
    else
        ck_assert_msg(rc == -1 && strstr(msg, want), "expected '%s' in: %s", want, msg);
    pp_plan_free(&b->p);
}

START_TEST(bufcheck_pair_conflicts)
{
    plan_b b;
    /* F(0,2) puts its stash in slot 1, which B(0,0) reads as its stash: in
     * plan order B reads first, but the two run at once */
    pipeline_start(&b);
    OVERLAP(&b);
    plan_put(&b, PP_OP_Backward, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 4, END);
    plan_put(&b, PP_OP_Forward, 0, 2, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 1, PP_ROLE_OUT, 6, END);
    bufcheck_says(&b, "hazard: rank 0: @9 Backward(s=0,b=0) and @10 Forward(s=0,b=2), the "
                      "overlapped pair after @8, both touch slot s1 and Forward writes it, but a "
                      "pair's jobs run concurrently (expected the two in different buffers)");
    /* F(0,2)'s output into the slot B(0,0) reads its output gradient from */
    pipeline_start(&b);
    OVERLAP(&b);
    plan_put(&b, PP_OP_Forward, 0, 2, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 5, PP_ROLE_OUT, 4, END);
    plan_put(&b, PP_OP_Backward, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 4, END);
    bufcheck_says(&b, "both touch slot s4 and Forward writes it");
    /* the same pair in different buffers is safe: both read the stage's
     * own weights, only B adds to its gradients */
    pipeline_start(&b);
    OVERLAP(&b);
    plan_put(&b, PP_OP_Backward, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 4, END);
    plan_put(&b, PP_OP_Forward, 0, 2, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 5, PP_ROLE_OUT, 6, END);
    bufcheck_says(&b, NULL);
}
END_TEST

Suite *overlap_suite(void)
{
    Suite *s = suite_create("overlap");
    TCase *tc = tcase_create("overlap");
    tcase_add_test(tc, statement_errors);
    tcase_add_test(tc, ppc_exit_status);
    tcase_add_test(tc, costs_file_overlap);
    tcase_add_test(tc, pair_timing_hand_worked);
    tcase_add_test(tc, pairs_in_turn_hand_worked);
    tcase_add_test(tc, then_pairs_forward_first);
    tcase_add_test(tc, pairs_that_deadlock);
    tcase_add_test(tc, costs_override_and_report);
    tcase_add_test(tc, report_without_pairs);
    tcase_add_test(tc, lowered_sequence);
    tcase_add_test(tc, plan_reader_checks_overlap);
    tcase_add_test(tc, bufcheck_pair_conflicts);
    suite_add_tcase(s, tc);
    return s;
}

/* ---- under mpirun ------------------------------------------------------------ */

/* An overlapping library schedule on 4 ranks, cpu backend: the same weights as
 * the reference, bit for bit (a pair runs in turn, in plan order, and each
 * job's arithmetic is the reference's), and the memory ppvm allocates is
 * the report's mem_bytes, both workspaces included. */
static void trains_like_reference_cpu(const char *schedule, const char *defs)
{
    char *dir = compile_plan(schedule, defs), cmd[4096], *out, *json;
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --save %s/w", dir, dir);
    out = mpi_ok(4, cmd);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/plan --steps 3 --save %s/ref --quiet",
             PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref --atol 0 --rtol 0", PP_ROOT, dir,
             dir); /* bit for bit: zero tolerance */
    char *cmp = run_expect(cmd, 0);
    ck_assert_msg(strstr(cmp, "max |diff| 0 (within tolerance)") && !strstr(cmp, "beyond"), "%s",
                  cmp);
    free(cmp);

    snprintf(cmd, sizeof cmd, "cat %s/plan/report.json", dir);
    json = run_expect(cmd, 0);
    const char *vm = strstr(out, "bytes per rank:"), *rep = strstr(json, "\"mem_bytes\": [");
    ck_assert_msg(vm && rep, "%s\n%s", out, json);
    vm += strlen("bytes per rank:");
    rep += strlen("\"mem_bytes\": [");
    for (int r = 0; r < 4; r++) {
        char *e1, *e2;
        unsigned long long a = strtoull(vm, &e1, 10), b = strtoull(rep, &e2, 10);
        ck_assert_msg(a == b, "rank %d: ppvm allocates %llu, the report says %llu", r, a, b);
        vm = e1;
        rep = e2 + 1;
    }
    ck_assert_msg(strstr(json, "\"pairs\": [\n    {\"worker\"") != NULL, "%s: no pairs:\n%s",
                  schedule, json);
    free(json);
    free(out);
    remove_dir(dir);
}

START_TEST(one_way_pairs_train) { trains_like_reference_cpu("1f1b-overlap.pp", "-D S=4 -D B=4"); }
END_TEST

/* v-overlap.pp with every stage's weights on the next worker, so jobs
 * fetch weights and return gradients around their pairs, with
 * --keep-weights and in bf16 */
START_TEST(v_pairs_fetching_weights_train)
{
    char path[1024], *dir = temp_dir(), cmd[4096];
    snprintf(path, sizeof path, "%s/v.pp", dir);
    snprintf(
        cmd, sizeof cmd,
        "sed 's/^weights(s,b,d)  = v$/weights(s,b,d)  = (v + 1) %% W/' %s/schedules/v-overlap.pp "
        "> %s && grep -q '(v + 1) %% W' %s",
        PP_ROOT, path, path);
    free(run_expect(cmd, 0));
    trains_like_reference_cpu(path, "-D W=4 -D B=8 --keep-weights");
    trains_like_reference_cpu(path, "-D W=4 -D B=8 --precision bf16 --prefetch 3");
    remove_dir(dir);
}
END_TEST

/* S = 8 stages in a V on 4 ranks, 8 microbatches: 4 pairs per worker */
START_TEST(v_pairs_train) { trains_like_reference_cpu("v-overlap.pp", "-D W=4 -D B=8"); }
END_TEST

Suite *overlap_e2e_suite(void)
{
    Suite *s = suite_create("overlap_e2e");
    TCase *tc = tcase_create("mpirun");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, one_way_pairs_train);
    tcase_add_test(tc, v_pairs_train);
    tcase_add_test(tc, v_pairs_fetching_weights_train);
    suite_add_tcase(s, tc);
    return s;
}
