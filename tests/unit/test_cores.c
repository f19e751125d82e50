/* test_cores.c - `"cores": C` in ppc --costs (compiler/sim.h, "Shared
 * cores"): at most C jobs compute at once over all workers. Exact makespans
 * on tiny cases worked out by hand, and two rules over the whole library:
 * with one core a step is all its work end to end (no transfer costs, so a
 * job is ready when the one core frees), and with C >= W nothing changes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/lower.h"
#include "suites.h"
#include "testutil.h"

/* Compiles schedules/<name> to its simulation with --costs `json` (NULL:
 * none), asserting no error. */
static void compile_with(compiled *c, const char *name, const pp_define *defs, int ndefs,
                         const char *json)
{
    char path[1024], costs[1024], *dir = temp_dir();
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, name);
    snprintf(costs, sizeof costs, "%s/c.json", dir);
    if (json) {
        FILE *f = fopen(costs, "w");
        ck_assert_ptr_nonnull(f);
        fputs(json, f);
        ck_assert_int_eq(fclose(f), 0);
    }
    pp_compile_opts o = pp_compile_defaults();
    o.path = path; /* no text: pp_compile reads it */
    o.defs = defs;
    o.ndefs = ndefs;
    o.costs = json ? costs : NULL;
    o.stop_after = PP_STAGE_SIMULATE;
    o.capture = 1;
    pp_compile(&o, c);
    ck_assert_msg(c->errors == 0 && !c->deadlock && c->status == PP_COMPILE_OK, "%s: %s", name,
                  c->msgs);
    remove_dir(dir);
}

static double makespan_with(const char *name, const pp_define *defs, int ndefs, const char *json)
{
    compiled c;
    compile_with(&c, name, defs, ndefs, json);
    double m = c.sim.makespan;
    compiled_free(&c);
    return m;
}

/* DDP on 4 workers, one stage, unit costs: each worker runs F then B, 2 in
 * all without a limit. 2 cores: the F of workers 0 and 1 at 0, of 2 and 3
 * at 1 (every F is ready before any B), then the Bs of 0 and 1 at 2, of 2
 * and 3 at 3: 4, the 8 units of work over 2 cores. 3 cores: F on 0, 1, 2
 * at 0; F on 3 and B on 0 and 1 at 1; B on 2 and 3 at 2: 3. */
START_TEST(ddp_on_fewer_cores)
{
    pp_define defs[] = {{"S", 1}, {"B", 4}};
    ck_assert_double_eq(makespan_with("ddp.pp", defs, 2, NULL), 2);
    ck_assert_double_eq(makespan_with("ddp.pp", defs, 2, "{\"cores\": 2}"), 4);
    ck_assert_double_eq(makespan_with("ddp.pp", defs, 2, "{\"cores\": 3}"), 3);
    ck_assert_double_eq(makespan_with("ddp.pp", defs, 2, "{\"cores\": 4}"), 2);
    ck_assert_double_eq(makespan_with("ddp.pp", defs, 2, "{\"cores\": 1}"), 8);
    /* the job starts: worker 2's F waits for a core until 1 */
    compiled c;
    compile_with(&c, "ddp.pp", defs, 2, "{\"cores\": 2}");
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 0, 0, 0)], 0);
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 0, 1, 0)], 0);
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 0, 2, 0)], 1);
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 0, 3, 0)], 1);
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 0, 0, 1)], 2);
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 0, 3, 1)], 3);
    compiled_free(&c);
}
END_TEST

/* GPipe S = 3, B = 2 (unit costs, 8 without a limit): its bubble leaves
 * room for 2 cores, so the makespan stays 8 (worked out job by job: at most
 * two of the three workers have a job ready at any time but 2..3, where
 * w1's F1 and w2's F0 take the two cores); 1 core: all 12 units. */
START_TEST(gpipe_bubble_fits_two_cores)
{
    pp_define defs[] = {{"S", 3}, {"B", 2}};
    ck_assert_double_eq(makespan_with("gpipe.pp", defs, 2, NULL), 8);
    ck_assert_double_eq(makespan_with("gpipe.pp", defs, 2, "{\"cores\": 2}"), 8);
    ck_assert_double_eq(makespan_with("gpipe.pp", defs, 2, "{\"cores\": 1}"), 12);
}
END_TEST

/* Each job's (or pair's) time on its worker, summed: what one core runs. */
static double total_work(const compiled *c)
{
    double sum = 0;
    for (int j = 0; j < job_count(&c->t.js); j++) {
        if (!job_exists(&c->t.js, j))
            continue;
        int q = c->sim.partner ? c->sim.partner[j] : -1;
        if (q < 0)
            sum += c->t.cost[j];
        else if (j < q) { /* a pair: max + overlap * min, once */
            double a = c->t.cost[j], b = c->t.cost[q];
            sum += (a > b ? a : b) + c->t.overlap * (a > b ? b : a);
        }
    }
    return sum;
}

/* Every library schedule on 2 or 4 workers (strict and greedy orders,
 * pairs, split backwards, fetches): one core runs everything end to end;
 * as many cores as workers is no limit at all (the same job times). */
START_TEST(library_one_core_and_enough_cores)
{
    static const struct {
        const char *file;
        pp_define defs[4];
        int n;
    } cases[] = {
        {"gpipe.pp", {{"S", 4}, {"B", 4}}, 2},
        {"1f1b.pp", {{"S", 4}, {"B", 8}}, 2},
        {"1f1b-greedy.pp", {{"S", 2}, {"B", 4}}, 2},
        {"1f1b-limit.pp", {{"S", 2}, {"B", 4}}, 2},
        {"zb-h1.pp", {{"S", 2}, {"B", 4}}, 2},
        {"zb-v.pp", {{"W", 2}, {"B", 4}}, 2},
        {"v-overlap.pp", {{"W", 2}, {"B", 4}}, 2},
        {"dualpipev.pp", {{"W", 2}, {"B", 4}}, 2},
        {"fsdp.pp", {{"S", 2}, {"B", 2}}, 2},
        {"interleaved-1f1b.pp", {{"W", 2}, {"B", 4}}, 2},
        {"lpp.pp", {{"S", 2}, {"B", 4}, {"G", 1}, {"R", 2}}, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        compiled none, one, enough;
        char json[64];
        compile_with(&none, cases[i].file, cases[i].defs, cases[i].n, NULL);
        compile_with(&one, cases[i].file, cases[i].defs, cases[i].n, "{\"cores\": 1}");
        snprintf(json, sizeof json, "{\"cores\": %d}", none.t.W);
        compile_with(&enough, cases[i].file, cases[i].defs, cases[i].n, json);
        ck_assert_msg(one.sim.makespan == total_work(&one), "%s: one core %g, work %g",
                      cases[i].file, one.sim.makespan, total_work(&one));
        ck_assert_msg(one.sim.makespan > none.sim.makespan, "%s", cases[i].file);
        ck_assert_msg(enough.sim.makespan == none.sim.makespan, "%s: %g cores=W, %g none",
                      cases[i].file, enough.sim.makespan, none.sim.makespan);
        for (int j = 0; j < job_count(&none.t.js); j++)
            if (job_exists(&none.t.js, j))
                ck_assert_double_eq(enough.sim.start[j], none.sim.start[j]);
        compiled_free(&none);
        compiled_free(&one);
        compiled_free(&enough);
    }
}
END_TEST

/* Bad values are errors at the value, through ppc itself (exit 3). */
START_TEST(cores_errors)
{
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"cores\": 0}", "c.json:1:11: expected a whole number of cores in [1, 2147483647] for "
                           "\"cores\", found 0"},
        {"{\"cores\": 1.5}", "c.json:1:11: expected a whole number of cores in [1, 2147483647] "
                             "for \"cores\", found 1.5"},
        {"{\"cores\": -2}", "found -2"},
        {"{\"cores\": 3e9}", "found 3e+09"},
        {"{\"cores\": \"2\"}", "c.json:1:11: expected a whole number of cores for \"cores\", "
                               "found a string"},
    };
    char *dir = temp_dir(), cmd[2048];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd,
                 "cd %s && printf '%%s' '%s' > c.json && %s/bin/ppc %s/schedules/gpipe.pp "
                 "-o out -q --costs c.json",
                 dir, bad[i].json, PP_ROOT, PP_ROOT);
        char *out = run_expect(cmd, 3);
        ck_assert_msg(strstr(out, bad[i].msg), "%s: %s", bad[i].json, out);
        free(out);
    }
    remove_dir(dir);
}
END_TEST

Suite *cores_suite(void)
{
    Suite *s = suite_create("cores");
    TCase *t = tcase_create("cores");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, ddp_on_fewer_cores);
    tcase_add_test(t, gpipe_bubble_fits_two_cores);
    tcase_add_test(t, library_one_core_and_enough_cores);
    tcase_add_test(t, cores_errors);
    suite_add_tcase(s, t);
    return s;
}
