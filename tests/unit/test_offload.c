/* test_offload.c - offload as a schedule decision (`offload [when EXPR]`,
 * `cost host_bandwidth`, --costs "host_bandwidth"; issue 26): the
 * statement's errors (file:line:col), the host-copy lane of the simulator
 * (an offload after F, a reload issued when B's other input starts, B
 * waiting for it, one copy at a time per worker), the report's device peak
 * and host bytes, and --emit torch-csv refusing an offload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/bufcheck.h"
#include "../../isa/model_shape.h"
#include "../../isa/verify.h"
#include "lower.h"
#include "sim_offload.h"
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
    int SB = js->S * js->B, *anchor = malloc((size_t)SB * sizeof *anchor);
    ck_assert_int_eq(pp_reload_anchors(js, c->t.worker, c->t.offload, r->order, r->off, c->t.W,
                                       r->reload_ahead, anchor),
                     0);
    for (int i = 0; i < js->S * js->B; i++) {
        int s = i / js->B, b = i % js->B;
        int f = job_id(js, s, b, DIR_F), bk = job_id(js, s, b, DIR_B);
        /* the plan's Reload goes before job anchor[i]: issued once the
         * worker is free to start it (the end of the job before it) */
        double issued = 0;
        for (int k = r->off[c->t.worker[bk]] + 1;
             c->t.offload[i] && k < r->off[c->t.worker[bk] + 1]; k++)
            if (r->order[k] == anchor[i])
                issued = r->end[r->order[k - 1]];
        if (!c->t.offload[i])
            continue;
        double copy = c->t.hcopy[i];
        ck_assert_msg(r->off_start[i] >= r->end[f], "offload (%d,%d) starts before F ends", s, b);
        ck_assert_double_eq_tol(r->off_end[i] - r->off_start[i], copy, 1e-9);
        ck_assert_double_eq_tol(r->rel_end[i] - r->rel_start[i], copy, 1e-9);
        ck_assert_msg(r->rel_start[i] >= r->off_end[i] && r->rel_start[i] >= issued,
                      "reload (%d,%d) at %g: before its offload ends (%g) or the plan issues "
                      "it (%g)",
                      s, b, r->rel_start[i], r->off_end[i], issued);
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
    free(anchor);
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
    /* worker 0: F(0,0) 0-1, offload 1-2; ... the reload of (0,0) goes
     * before F(0,3), the job before B(0,0) (--prefetch 1), and runs after
     * the offloads of F(0,1) and F(0,2) on the lane; B(0,0) waits for it */
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

/* The report: device peak stash bytes drop by what is away, the
 * simulated host bytes say what the host holds at once; report.txt and
 * report.json carry both. Not lowered, the allocated host figure is 0. */
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
         * copies, fewer stay on the device, except on worker 2, whose
         * reload (--prefetch 1) is back before the forward that precedes
         * its backward and makes a stash of its own: two, as without */
        ck_assert_uint_eq(c0.rep.w[w].peak_act_bytes, (uint64_t)(4 - w) * stash);
        ck_assert_msg(c1.rep.w[w].peak_act_bytes < c0.rep.w[w].peak_act_bytes ||
                          (w == 2 && c1.rep.w[w].peak_act_bytes == c0.rep.w[w].peak_act_bytes),
                      "worker %d: device peak %llu not below %llu", w,
                      (unsigned long long)c1.rep.w[w].peak_act_bytes,
                      (unsigned long long)c0.rep.w[w].peak_act_bytes);
        /* in host memory: at least one, at most every stash it holds */
        ck_assert_msg(c1.rep.w[w].host_peak_bytes >= stash &&
                          c1.rep.w[w].host_peak_bytes <= (uint64_t)(4 - w) * stash,
                      "worker %d: simulated host bytes %llu", w,
                      (unsigned long long)c1.rep.w[w].host_peak_bytes);
        ck_assert_int_eq(c1.rep.w[w].peak_act, c0.rep.w[w].peak_act); /* still in flight */
        ck_assert_uint_eq(c1.rep.w[w].host_bytes, 0);                 /* not lowered */
    }
    ck_assert_uint_eq(c1.rep.w[3].host_peak_bytes, 0);
    ck_assert_uint_eq(c1.rep.w[3].peak_act_bytes, c0.rep.w[3].peak_act_bytes);
    char *txt = NULL, *json = NULL;
    size_t n;
    FILE *f = open_memstream(&txt, &n);
    pp_report_info info = {"t.pp", "S=4 B=4 W=4", "strict", "cost lines", NULL, NULL};
    ck_assert_int_eq(pp_report_write_txt(f, &c1.rep, &info, &c1.t, &c1.sim), 0);
    fclose(f);
    f = open_memstream(&json, &n);
    ck_assert_int_eq(pp_report_write_json(f, &c1.rep, &info, &c1.t, &c1.sim), 0);
    fclose(f);
    ck_assert_msg(strstr(txt, "strict order, offload 12 of 16 (s,b))"), "%s", txt);
    ck_assert_msg(strstr(txt, "host      allocated (plan's host pool): w0 0 B, ") &&
                      strstr(txt, "(0: the schedule was not lowered)") &&
                      strstr(txt, "          held at once in the simulation: w0 "),
                  "%s", txt);
    ck_assert_msg(strstr(json, "\"offloads\": 12"), "%s", json);
    /* worker 0 (F0 F1 F2 F3 B0 ..): the plan reloads (0,0) before F3, when
     * F2 ends and its offload starts; free copies take no time, so two
     * stashes are on the host at once (the plan's pool, lowered, has three
     * slots: a free copy still needs its slot) */
    char want[96];
    snprintf(want, sizeof want, "\"host_peak_bytes\": [%llu, ",
             (unsigned long long)(2 * pp_stage_stash_bytes(&c0.sch.model, 4, 0)));
    ck_assert_msg(strstr(json, want), "no '%s' in %s", want, json);
    ck_assert_msg(strstr(json, "\"host_bytes\": [0, 0, 0, 0"), "%s", json);
    free(txt);
    free(json);
    pp_compiled_free(&c0);
    pp_compiled_free(&c1);
}
END_TEST

/* Lowered, the report's host figure is what ppvm allocates: each worker's
 * plan's host pool (pp_plan_host_memory), as mem_bytes is its device
 * figure, on 1F1B with offload everywhere, on selected stages, and mixed
 * with recompute. The simulated peak can be less: 1F1B's last stage
 * reloads right after it offloads, so the simulation holds nothing there,
 * but its plan still has a host slot for the copy. */
START_TEST(report_host_is_allocated)
{
    static const char *const stmt[] = {"offload when 1\n", "offload when s < S - 1\n",
                                       "offload when s == 1 && b < 2\n",
                                       "recompute when s == 0\noffload when s > 0\n"};
    for (size_t k = 0; k < sizeof stmt / sizeof *stmt; k++) {
        char src[1024];
        snprintf(src, sizeof src, "%s%s", ONE_F_ONE_B, stmt[k]);
        pp_compiled c;
        compile_text(&c, src, PP_STAGE_PLANS, NULL);
        ck_assert_msg(c.status == PP_COMPILE_OK, "'%s': %s", stmt[k], c.msgs);
        uint64_t total = 0;
        for (int w = 0; w < 4; w++) {
            uint64_t pool = pp_plan_host_memory(&c.plans[w]);
            ck_assert_msg(c.rep.w[w].host_bytes == pool,
                          "'%s' worker %d: the report says %llu host bytes, the plan "
                          "allocates %llu",
                          stmt[k], w, (unsigned long long)c.rep.w[w].host_bytes,
                          (unsigned long long)pool);
            total += pool;
        }
        ck_assert_uint_eq(c.rep.total.host_bytes, total);
        ck_assert_msg(total > 0, "'%s': no host pool", stmt[k]);
        if (k == 0) {
            ck_assert_uint_eq(c.rep.w[3].host_peak_bytes, 0);
            ck_assert_uint_eq(c.rep.w[3].host_bytes, pp_stage_stash_bytes(&c.sch.model, 4, 3));
        }
        if (k == 1) /* stage 3 keeps its stashes: no host slot there */
            ck_assert_uint_eq(c.rep.w[3].host_bytes, 0);
        pp_compiled_free(&c);
    }
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

/* ---- plans: Offload and Reload (lowering, memory, the proof) ------------- */

/* The first instruction at or after `from` of opcode op and microbatch b
 * (any when b < 0); ninstr when none. */
static uint32_t find_op(const pp_plan *p, uint32_t from, int op, int b)
{
    while (from < p->ninstr && !(p->code[from].op == op && (b < 0 || p->code[from].mb == b)))
        from++;
    return from;
}

static void compile_plans(pp_compiled *c, const char *src, int prefetch)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = src;
    o.len = strlen(src);
    o.stop_after = PP_STAGE_PLANS;
    o.capture = 1;
    o.prefetch = prefetch;
    pp_compile(&o, c);
    ck_assert_msg(c->status == PP_COMPILE_OK, "%s", c->msgs ? c->msgs : "");
}

/* 1F1B with every stash offloaded: on each rank an Offload right after
 * each F, a Reload --prefetch jobs before its B (0: right before it),
 * between a device slot and a host slot; the plans pass the proofs, the
 * device figure drops on the first stages, the host pool appears, no
 * warning says offload is not lowered, and --mem-limit reads the device
 * figure. */
START_TEST(plans_offload)
{
    pp_compiled c0, c1, c2;
    char err[1024];
    compile_plans(&c0, ONE_F_ONE_B, 1);
    compile_plans(&c1, ONE_F_ONE_B "offload when 1\n", 1);
    compile_plans(&c2, ONE_F_ONE_B "offload when 1\n", 0);
    ck_assert_msg(!c1.msgs || !strstr(c1.msgs, "not yet lowered"), "%s", c1.msgs);
    ck_assert_int_eq(pp_verify_world(c1.plans, 4, err, sizeof err), 0);
    ck_assert_msg(pp_buffer_check(c1.plans, 4, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(pp_buffer_check(c2.plans, 4, err, sizeof err) == 0, "%s", err);
    for (int w = 0; w < 4; w++) {
        const pp_plan *p = &c1.plans[w], *q = &c2.plans[w];
        uint8_t host[64];
        ck_assert(p->nslots < 64);
        ck_assert_int_gt(pp_plan_host_slots(p, host), 0);
        for (int b = 0; b < 4; b++) {
            uint32_t f = find_op(p, 0, PP_OP_Forward, b), o = find_op(p, 0, PP_OP_Offload, b);
            uint32_t r = find_op(p, 0, PP_OP_Reload, b), bk = find_op(p, 0, PP_OP_Backward, b);
            ck_assert_msg(o == f + 1 && o < r && r < bk,
                          "rank %d b %d: F @%u Offload @%u Reload @%u B @%u", w, b, f, o, r, bk);
            ck_assert_int_eq(p->code[o].stage, w);
            ck_assert_int_eq(pp_slot(&p->code[o], PP_ROLE_SRC),
                             pp_slot(&p->code[f], PP_ROLE_STASH));
            ck_assert(host[pp_slot(&p->code[o], PP_ROLE_DST)]);
            ck_assert_int_eq(pp_slot(&p->code[r], PP_ROLE_SRC), pp_slot(&p->code[o], PP_ROLE_DST));
            ck_assert(!host[pp_slot(&p->code[r], PP_ROLE_DST)]);
            ck_assert_int_eq(pp_slot(&p->code[bk], PP_ROLE_STASH),
                             pp_slot(&p->code[r], PP_ROLE_DST));
            /* --prefetch 0: the Reload right before its B */
            uint32_t r0 = find_op(q, 0, PP_OP_Reload, b), b0 = find_op(q, 0, PP_OP_Backward, b);
            ck_assert_msg(r0 + 1 == b0, "rank %d b %d, --prefetch 0: Reload @%u, B @%u", w, b, r0,
                          b0);
        }
        ck_assert_uint_gt(pp_plan_host_memory(p), 0);
        ck_assert_uint_eq(pp_plan_host_memory(&c0.plans[w]), 0);
        ck_assert_uint_eq(c1.rep.w[w].mem_bytes, pp_plan_memory(p));
    }
    /* 1F1B holds 4 - w stashes on worker w; offloaded, fewer */
    for (int w = 0; w < 3; w++)
        ck_assert_msg(pp_plan_memory(&c1.plans[w]) < pp_plan_memory(&c0.plans[w]),
                      "worker %d: device %llu, not below %llu without offload", w,
                      (unsigned long long)pp_plan_memory(&c1.plans[w]),
                      (unsigned long long)pp_plan_memory(&c0.plans[w]));
    /* --mem-limit reads the device figure: the largest worker's, which
     * has a host pool too, is exactly enough, a byte less is not */
    int big = 0;
    for (int w = 1; w < 4; w++)
        if (pp_plan_memory(&c1.plans[w]) > pp_plan_memory(&c1.plans[big]))
            big = w;
    ck_assert_uint_gt(pp_plan_host_memory(&c1.plans[big]), 0);
    for (int k = 0; k < 2; k++) {
        pp_compiled c;
        pp_compile_opts o = pp_compile_defaults();
        const char *src = ONE_F_ONE_B "offload when 1\n";
        o.path = "t.pp";
        o.text = src;
        o.len = strlen(src);
        o.stop_after = PP_STAGE_PLANS;
        o.capture = 1;
        o.mem_limit = pp_plan_memory(&c1.plans[big]) - (uint64_t)k;
        pp_compile(&o, &c);
        ck_assert_msg((c.status == PP_COMPILE_OK) == !k, "--mem-limit %llu: status %d %s",
                      (unsigned long long)o.mem_limit, c.status, c.msgs ? c.msgs : "");
        pp_compiled_free(&c);
    }
    pp_compiled_free(&c0);
    pp_compiled_free(&c1);
    pp_compiled_free(&c2);
}
END_TEST

/* The buffer proof refuses broken offload plans, each with what is wrong. */
START_TEST(broken_plans_refused)
{
    pp_compiled c;
    char err[1024];
    pp_plan *p;
    uint32_t o, r, bk;

    /* a Reload gone: B reads its stash's device slot after an Offload
     * emptied it (--prefetch 0: every Reload right before its B, all into
     * the slot the Forwards and Offloads use in turn) */
    compile_plans(&c, ONE_F_ONE_B "offload when 1\n", 0);
    p = &c.plans[0];
    r = find_op(p, 0, PP_OP_Reload, 0);
    bk = find_op(p, 0, PP_OP_Backward, 0);
    ck_assert_msg(r + 1 == bk, "rank 0: Reload(0,0) @%u, B(0,0) @%u", r, bk);
    ck_assert_int_eq(pp_slot(&p->code[r], PP_ROLE_DST), pp_slot(&p->code[bk], PP_ROLE_STASH));
    memmove(&p->code[r], &p->code[r + 1], (p->ninstr - r - 1) * sizeof p->code[0]);
    p->ninstr--;
    ck_assert_int_eq(pp_buffer_check_plan(p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "Backward(s=0,b=0) reads slot") &&
                      strstr(err, "'s stash went to the host), offloaded by") &&
                      strstr(err, "Offload(s=0,b="),
                  "%s", err);
    pp_compiled_free(&c);

    /* a Reload without its Offload: the host slot was never written */
    compile_plans(&c, ONE_F_ONE_B "offload when 1\n", 1);
    p = &c.plans[0];
    o = find_op(p, 0, PP_OP_Offload, 0);
    memmove(&p->code[o], &p->code[o + 1], (p->ninstr - o - 1) * sizeof p->code[0]);
    p->ninstr--;
    ck_assert_int_eq(pp_buffer_check_plan(p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "Reload(s=0,b=0) reads slot") &&
                      strstr(err, "which should hold F(0,0)'s stash on the host but holds nothing "
                                  "(never written)"),
                  "%s", err);
    pp_compiled_free(&c);

    /* a Reload into a device slot still in use: with --prefetch 1,
     * Reload(0,1) comes right before B(0,0); sent into B(0,0)'s stash
     * slot, it overwrites the stash B(0,0) is about to read */
    compile_plans(&c, ONE_F_ONE_B "offload when 1\n", 1);
    p = &c.plans[0];
    r = find_op(p, 0, PP_OP_Reload, 1);
    bk = find_op(p, 0, PP_OP_Backward, 0);
    ck_assert_msg(r + 1 == bk, "rank 0: Reload(0,1) @%u, B(0,0) @%u", r, bk);
    pp_set_slot(&p->code[r], PP_ROLE_DST, pp_slot(&p->code[bk], PP_ROLE_STASH));
    ck_assert_int_eq(pp_buffer_check_plan(p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "dataflow: rank 0: ") && strstr(err, "Backward(s=0,b=0) reads") &&
                      strstr(err, "holds F(0,1)'s stash, written by") &&
                      strstr(err, "Reload(s=0,b=1)"),
                  "%s", err);
    pp_compiled_free(&c);

    /* a job's slot used as a host slot */
    compile_plans(&c, ONE_F_ONE_B "offload when 1\n", 1);
    p = &c.plans[0];
    o = find_op(p, 0, PP_OP_Offload, 0);
    uint32_t f = find_op(p, o, PP_OP_Forward, -1);
    pp_set_slot(&p->code[f], PP_ROLE_OUT, pp_slot(&p->code[o], PP_ROLE_DST));
    ck_assert_int_eq(pp_buffer_check_plan(p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "host: rank 0: ") && strstr(err, "as its out, but") &&
                      strstr(err, "is a host slot (expected a device slot"),
                  "%s", err);
    pp_compiled_free(&c);
}
END_TEST

/* The library's offload file (schedules/1f1b-offload.pp) compiles, lowers
 * and passes both proofs over its range (S = 2..5, B = 1, S, 2S+1, every
 * K); its report's host figure is its plans' host pool, 0 exactly when no
 * stage offloads; from S = 3 on, at B = 2S+1, worker 0 needs less device
 * memory once it offloads than at K = 0. (At S = 2 a reload, --prefetch 1
 * job before its B, follows its offload at once: nothing is saved, and
 * with priced copies a gradient received earlier can even take a buffer
 * more, 703424 -> 711616 bytes at K = 1.) A K
 * outside 0..S and a negative H are refused by its require lines. */
START_TEST(library_file_over_its_range)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/1f1b-offload.pp", PP_ROOT);
    for (int S = 2; S <= 5; S++) {
        int Bs[3] = {1, S, 2 * S + 1};
        for (int bi = 0; bi < 3; bi++) {
            uint64_t plain = 0;
            for (int k = 0; k <= S; k++) {
                pp_define defs[3] = {{"S", S}, {"B", Bs[bi]}, {"K", k}};
                pp_compiled c;
                pp_compile_opts o = pp_compile_defaults();
                o.path = path;
                o.defs = defs;
                o.ndefs = 3;
                o.capture = 1;
                pp_compile(&o, &c);
                ck_assert_msg(c.status == PP_COMPILE_OK, "S=%d B=%d K=%d:\n%s", S, Bs[bi], k,
                              c.msgs);
                char err[1024];
                ck_assert_msg(pp_buffer_check(c.plans, S, err, sizeof err) == 0,
                              "S=%d B=%d K=%d: %s", S, Bs[bi], k, err);
                ck_assert_msg(pp_verify_world(c.plans, S, err, sizeof err) == 0,
                              "S=%d B=%d K=%d: %s", S, Bs[bi], k, err);
                ck_assert_int_eq(c.rep.noffload, k * Bs[bi]);
                for (int w = 0; w < S; w++) {
                    uint64_t pool = pp_plan_host_memory(&c.plans[w]);
                    ck_assert_msg(c.rep.w[w].host_bytes == pool && (pool > 0) == (w < k),
                                  "S=%d B=%d K=%d worker %d: report %llu host bytes, plan %llu", S,
                                  Bs[bi], k, w, (unsigned long long)c.rep.w[w].host_bytes,
                                  (unsigned long long)pool);
                }
                uint64_t dev = c.rep.w[0].mem_bytes;
                if (k == 0)
                    plain = dev;
                ck_assert_msg(k == 0 || bi < 2 || S < 3 || dev < plain,
                              "S=%d B=%d K=%d: worker 0 needs %llu device bytes, %llu at K=0", S,
                              Bs[bi], k, (unsigned long long)dev, (unsigned long long)plain);
                pp_compiled_free(&c);
            }
        }
    }
    pp_define k5[1] = {{"K", 5}}, hneg[1] = {{"H", -1}};
    const pp_define *defs[2] = {k5, hneg};
    const char *want[2] = {"requirement failed: K >= 0 && K <= S (K counts stages",
                           "requirement failed: H >= 0 (H is a bandwidth"};
    for (int i = 0; i < 2; i++) {
        pp_compiled c;
        pp_compile_opts o = pp_compile_defaults();
        o.path = path;
        o.defs = defs[i];
        o.ndefs = 1;
        o.capture = 1;
        pp_compile(&o, &c);
        ck_assert_msg(c.status == PP_COMPILE_ERRORS && strstr(c.msgs, want[i]), "%s", c.msgs);
        pp_compiled_free(&c);
    }
}
END_TEST

/* The host bytes a plan holds at once in program order: each Offload
 * takes its destination slot, each Reload gives its source back. */
static uint64_t plan_host_live(const pp_plan *p)
{
    uint64_t live = 0, most = 0;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        if (p->code[i].op == PP_OP_Offload)
            live += p->slot_bytes[pp_slot(&p->code[i], PP_ROLE_DST)];
        else if (p->code[i].op == PP_OP_Reload)
            live -= p->slot_bytes[pp_slot(&p->code[i], PP_ROLE_SRC)];
        most = live > most ? live : most;
    }
    return most;
}

/* One compile's host figures: the simulation holds at most what the plan's
 * host pool allocates, and (copies priced, so that no two copies start and
 * end at one instant) all of it where the plan has every host slot live at
 * once: the simulation issues reloads where the plan puts them and runs
 * copies in the plan's order (sim_offload.h). */
static void host_within_pool(const char *file, const pp_define *defs, int nd, const char *offload,
                             int prefetch, int priced, const char *what)
{
    pp_compiled c;
    pp_compile_opts o = pp_compile_defaults();
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, file);
    o.path = path;
    o.defs = defs;
    o.ndefs = nd;
    o.capture = 1;
    o.prefetch = prefetch;
    o.offload = offload;
    pp_compile(&o, &c);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s %s:\n%s", file, what, c.msgs);
    ck_assert_int_gt(c.rep.noffload, 0);
    for (int w = 0; w < c.t.W; w++) {
        uint64_t pool = pp_plan_host_memory(&c.plans[w]), live = plan_host_live(&c.plans[w]);
        uint64_t sim = c.rep.w[w].host_peak_bytes;
        ck_assert_msg(sim <= pool && live <= pool,
                      "%s %s --prefetch %d worker %d: simulated host peak %llu, plan's pool "
                      "%llu (live at once %llu)",
                      file, what, prefetch, w, (unsigned long long)sim, (unsigned long long)pool,
                      (unsigned long long)live);
        ck_assert_msg(!priced || live < pool || sim == pool,
                      "%s %s --prefetch %d worker %d: the plan holds its whole pool (%llu) at "
                      "once, the simulation %llu",
                      file, what, prefetch, w, (unsigned long long)pool, (unsigned long long)sim);
    }
    pp_compiled_free(&c);
}

/* Over the library's offload files (their S, B, K and host bandwidth) and
 * --prefetch 0 to 2, and with --offload on greedy and strict library files
 * (a greedy run is replayed under the plan's reload rule). */
START_TEST(host_peak_within_pool)
{
    static const char *lib[] = {"1f1b-offload.pp"};
    for (size_t f = 0; f < sizeof lib / sizeof *lib; f++)
        for (int S = 2; S <= 5; S++)
            for (int B = S; B <= 2 * S + 1; B += S + 1)
                for (int K = 0; K <= S; K++)
                    for (int h = 0; h < 3 && K > 0; h++) {
                        /* the default, free copies, copies longer than a job */
                        static const int H[3] = {200000, 0, 10000};
                        pp_define defs[4] = {{"S", S}, {"B", B}, {"K", K}, {"H", H[h]}};
                        for (int pf = 0; pf <= 2; pf++) {
                            char what[64];
                            snprintf(what, sizeof what, "S=%d B=%d K=%d H=%d", S, B, K, H[h]);
                            host_within_pool(lib[f], defs, 4, NULL, pf, H[h] > 0, what);
                        }
                    }
    static const char *other[] = {"gpipe.pp", "1f1b-greedy.pp", "zb-h1.pp", "1f1b.pp"};
    for (size_t f = 0; f < sizeof other / sizeof *other; f++)
        for (int pf = 0; pf <= 2; pf++) {
            pp_define defs[2] = {{"S", 4}, {"B", 8}};
            host_within_pool(other[f], defs, 2, "s < S - 1", pf, 0,
                             "S=4 B=8 --offload 's < S - 1'");
            host_within_pool(other[f], defs, 2, "1", pf, 0, "S=4 B=8 --offload 1");
        }
}
END_TEST

Suite *offload_suite(void)
{
    Suite *s = suite_create("offload");
    TCase *tc = tcase_create("compile");
    tcase_add_test(tc, statement_errors);
    tcase_add_test(tc, host_copy_lane);
    tcase_add_test(tc, report_memory);
    tcase_add_test(tc, report_host_is_allocated);
    tcase_add_test(tc, costs_key);
    tcase_add_test(tc, offload_option);
    tcase_add_test(tc, trace_draws_copies);
    tcase_add_test(tc, torch_csv_refuses);
    tcase_add_test(tc, plans_offload);
    tcase_add_test(tc, broken_plans_refused);
    tcase_add_test(tc, library_file_over_its_range);
    tcase_add_test(tc, host_peak_within_pool);
    suite_add_tcase(s, tc);
    return s;
}
