/* test_sim.c - the simulator: makespans, per-worker job orders (asserted as
 * exact sequences, as Lua's tests assert instruction sequences), bubbles,
 * peak activations and deadlock detection. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

static void assert_order(const compiled *c, int w, char what, const char *want)
{
    char *got = worker_order(c, w, what);
    ck_assert_msg(!strcmp(got, want), "worker %d:\n  got  %s\n  want %s", w, got, want);
    free(got);
}

/* Largest number of microbatches whose F ran on worker w and whose B has
 * not yet run, along w's order: the activations it must hold. */
static int peak_inflight(const compiled *c, int w)
{
    int held = 0, peak = 0;
    for (int k = c->sim.off[w]; k < c->sim.off[w + 1]; k++) {
        int d = job_d(&c->t.js, c->sim.order[k]);
        held += d == 0 ? 1 : d == c->t.js.ND - 1 ? -1 : 0;
        if (held > peak)
            peak = held;
    }
    return peak;
}

static double busy_fraction(const compiled *c)
{
    double busy = 0;
    for (int j = 0; j < job_count(&c->t.js); j++)
        busy += c->t.cost[j];
    return busy / (c->t.W * c->sim.makespan);
}

START_TEST(gpipe_s4_b8_unit)
{
    pp_define defs[] = {{"S", 4}, {"B", 8}};
    compiled c;
    compile_library(&c, "gpipe.pp", defs, 2);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_double_eq(c.sim.makespan, 2 * (4 + 8 - 1));
    for (int w = 0; w < 4; w++)
        assert_order(&c, w, 'b', "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
    /* stage s starts its first forward at s and its first backward after the
     * last forward reaches the end: 2(S-1) - s + B */
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 0, 0, 0)], 0);
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 3, 0, 0)], 3);
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 3, 0, 1)], 11);
    ck_assert_double_eq(c.sim.start[job_id(&c.t.js, 0, 0, 1)], 14);
    for (int w = 0; w < 4; w++)
        ck_assert_int_eq(peak_inflight(&c, w), 8); /* GPipe holds all B */
    compiled_free(&c);
}
END_TEST

START_TEST(gpipe_bubble_closed_form)
{
    int cases[][2] = {{2, 2}, {4, 8}, {8, 4}, {3, 17}};
    for (int i = 0; i < 4; i++) {
        int p = cases[i][0], m = cases[i][1];
        pp_define defs[] = {{"S", p}, {"B", m}};
        compiled c;
        compile_library(&c, "gpipe.pp", defs, 2);
        double bubble = 1 - busy_fraction(&c);
        ck_assert_double_eq_tol(bubble, (double)(p - 1) / (m + p - 1), 1e-12);
        compiled_free(&c);
    }
}
END_TEST

START_TEST(gpipe_costs)
{
    /* F = 1, B = 2: the forward wave takes B+S-1 units, the backward wave 2(B+S-1). */
    const char *src = "param S = 4\nparam B = 8\nparam W = S\n"
                      "compute(s,b,d) = s\npriority(s,b,d) = d * B + b\n"
                      "cost B = 2\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_double_eq(c.sim.makespan, 3 * (8 + 4 - 1));
    compiled_free(&c);
}
END_TEST

START_TEST(ddp_no_waiting)
{
    pp_define defs[] = {{"S", 4}, {"B", 4}};
    compiled c;
    compile_library(&c, "ddp.pp", defs, 2);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_double_eq(c.sim.makespan, 8);
    for (int w = 0; w < 4; w++)
        assert_order(&c, w, 's', "F0 F1 F2 F3 B3 B2 B1 B0");
    ck_assert_double_eq_tol(busy_fraction(&c), 1.0, 1e-12);
    compiled_free(&c);
}
END_TEST

/* Expected orders: Megatron-LM's forward_backward_pipelining_without_interleaving
 * (num_warmup_microbatches = pipeline size - rank - 1, then one forward one
 * backward, then the cool-down backwards); DeepSpeed's TrainSchedule gives the
 * same per-stage order. */
START_TEST(one_f_one_b_s4_b8)
{
    pp_define defs[] = {{"S", 4}, {"B", 8}};
    compiled c;
    compile_library(&c, "1f1b.pp", defs, 2);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_int_eq(c.deadlock, 0);
    assert_order(&c, 0, 'b', "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    assert_order(&c, 1, 'b', "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
    assert_order(&c, 2, 'b', "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
    assert_order(&c, 3, 'b', "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
    ck_assert_double_eq(c.sim.makespan, 2 * (8 + 4 - 1));
    for (int r = 0; r < 4; r++) /* rank r holds min(S - r, B) */
        ck_assert_int_eq(peak_inflight(&c, r), 4 - r);
    compiled_free(&c);
}
END_TEST

START_TEST(one_f_one_b_fewer_microbatches_than_stages)
{
    pp_define defs[] = {{"S", 4}, {"B", 2}};
    compiled c;
    compile_library(&c, "1f1b.pp", defs, 2);
    ck_assert_int_eq(c.deadlock, 0);
    for (int r = 0; r < 4; r++)
        ck_assert_int_eq(peak_inflight(&c, r), r < 3 ? 2 : 1);
    ck_assert_double_eq(c.sim.makespan, 2 * (2 + 4 - 1));
    compiled_free(&c);
}
END_TEST

/* Jobs the priority leaves tied run forwards first, then by microbatch, then
 * along the chain (F by rising stage, B by falling stage): the same rule in
 * greedy and strict order. */
START_TEST(tie_rule)
{
    const char *greedy = "param S = 2\nparam B = 3\nparam W = 1\ncompute(s,b,d) = 0\n";
    const char *strict = "param S = 2\nparam B = 3\nparam W = 1\ncompute(s,b,d) = 0\norder strict\n";
    compiled g, s;
    compile_src(&g, greedy, NULL, 0);
    compile_src(&s, strict, NULL, 0);
    ck_assert_int_eq(g.errors + s.errors, 0);
    const char *want = "F(0,0) F(1,0) F(0,1) F(1,1) F(0,2) F(1,2) B(1,0) B(0,0) B(1,1) B(0,1) "
                       "B(1,2) B(0,2)";
    assert_order(&g, 0, 'x', want);
    assert_order(&s, 0, 'x', want);
    compiled_free(&g);
    compiled_free(&s);
}
END_TEST

START_TEST(strict_deadlock_names_blocked_jobs)
{
    /* the last worker insists on running its backwards before its forwards */
    const char *src = "param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n"
                      "priority(s,b,d) = d == B ? b : 10 + b\norder strict\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    ck_assert_int_eq(c.deadlock, 1);
    ck_assert_int_eq(c.sim.blocked[1], job_id(&c.t.js, 1, 0, 1)); /* B(1,0) needs F(1,0) */
    ck_assert_int_eq(c.sim.blocked[0], job_id(&c.t.js, 0, 0, 1)); /* B(0,0) needs B(1,0) */
    compiled_free(&c);
}
END_TEST

START_TEST(greedy_inflight_limit_gives_1f1b)
{
    /* backward-first priority plus an inflight limit of S - w: the 1F1B order
     * without writing it out */
    const char *src = "param S = 4\nparam B = 8\nparam W = S\ncompute(s,b,d) = s\n"
                      "priority(s,b,d) = d == B ? b : B + b\nlimit inflight = S - w\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    ck_assert_int_eq(c.errors, 0);
    assert_order(&c, 0, 'b', "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    assert_order(&c, 3, 'b', "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
    compiled_free(&c);
}
END_TEST

Suite *sim_suite(void)
{
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, gpipe_s4_b8_unit);
    tcase_add_test(tc, gpipe_bubble_closed_form);
    tcase_add_test(tc, gpipe_costs);
    tcase_add_test(tc, ddp_no_waiting);
    tcase_add_test(tc, one_f_one_b_s4_b8);
    tcase_add_test(tc, one_f_one_b_fewer_microbatches_than_stages);
    tcase_add_test(tc, tie_rule);
    tcase_add_test(tc, strict_deadlock_names_blocked_jobs);
    tcase_add_test(tc, greedy_inflight_limit_gives_1f1b);
    suite_add_tcase(s, tc);
    return s;
}
