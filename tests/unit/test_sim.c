/* test_sim.c - the simulator: makespans, per-worker job orders (asserted as
 * exact sequences, as Lua's tests assert instruction sequences), bubbles,
 * peak activations and deadlock detection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/lower.h"
#include "suites.h"
#include "testutil.h"

static void assert_order(const compiled *c, int w, char what, const char *want)
{
    char *got = worker_order(c, w, what);
    ck_assert_msg(!strcmp(got, want), "worker %d:\n  got  %s\n  want %s", w, got, want);
    free(got);
}

/* Largest number of microbatches whose F ran on worker w and whose B has
 * not yet run, along w's order: the activations it must hold (a split
 * backward's W keeps only what the weight gradient needs; not counted). */
static int peak_inflight(const compiled *c, int w)
{
    int held = 0, peak = 0;
    for (int k = c->sim.off[w]; k < c->sim.off[w + 1]; k++) {
        int d = job_d(&c->t.js, c->sim.order[k]);
        held += d == 0 ? 1 : d == 1 ? -1 : 0;
        if (held > peak)
            peak = held;
    }
    return peak;
}

static int min_int(int a, int b) { return a < b ? a : b; }

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
    const char *strict =
        "param S = 2\nparam B = 3\nparam W = 1\ncompute(s,b,d) = 0\norder strict\n";
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

static void assert_same_orders(const compiled *a, const compiled *b)
{
    ck_assert_int_eq(a->t.W, b->t.W);
    for (int w = 0; w < a->t.W; w++) {
        char *x = worker_order(a, w, 'x'), *y = worker_order(b, w, 'x');
        ck_assert_msg(!strcmp(x, y), "worker %d:\n  %s\n  %s", w, x, y);
        free(x);
        free(y);
    }
    ck_assert_double_eq(a->sim.makespan, b->sim.makespan);
}

START_TEST(strict_and_greedy_1f1b_agree)
{
    pp_define defs[] = {{"S", 4}, {"B", 8}};
    compiled strict, greedy;
    compile_library(&strict, "1f1b.pp", defs, 2);
    compile_library(&greedy, "1f1b-greedy.pp", defs, 2);
    ck_assert_int_eq(strict.errors + greedy.errors, 0);
    assert_same_orders(&strict, &greedy);
    compiled_free(&strict);
    compiled_free(&greedy);
}
END_TEST

/* The seed's interpolation claim, on the emitted orders: LPP with one group
 * is GPipe, LPP with groups of one is DDP. */
START_TEST(lpp_interpolates_gpipe_and_ddp)
{
    pp_define g1[] = {{"S", 4}, {"B", 8}, {"G", 1}, {"R", 4}}, gp[] = {{"S", 4}, {"B", 8}};
    compiled lpp, gpipe;
    compile_library(&lpp, "lpp.pp", g1, 4);
    compile_library(&gpipe, "gpipe.pp", gp, 2);
    ck_assert_int_eq(lpp.errors + gpipe.errors, 0);
    assert_same_orders(&lpp, &gpipe);
    compiled_free(&lpp);
    compiled_free(&gpipe);

    pp_define r1[] = {{"S", 4}, {"B", 4}, {"G", 4}, {"R", 1}}, dp[] = {{"S", 4}, {"B", 4}};
    compiled ddp;
    compile_library(&lpp, "lpp.pp", r1, 4);
    compile_library(&ddp, "ddp.pp", dp, 2);
    ck_assert_int_eq(lpp.errors + ddp.errors, 0);
    assert_same_orders(&lpp, &ddp);
    compiled_free(&lpp);
    compiled_free(&ddp);
}
END_TEST

/* LPP's makespan falls from GPipe's to DDP's as R goes from W to 1 (W = 8,
 * S = 8, B = 8, unit costs). */
START_TEST(lpp_makespan_falls_with_r)
{
    double prev = 1e9;
    for (int R = 8; R >= 1; R /= 2) {
        pp_define defs[] = {{"S", 8}, {"B", 8}, {"G", 8 / R}, {"R", R}};
        compiled c;
        compile_library(&c, "lpp.pp", defs, 4);
        ck_assert_int_eq(c.errors, 0);
        ck_assert_msg(c.sim.makespan < prev, "R=%d: makespan %g not below %g", R, c.sim.makespan,
                      prev);
        if (R == 8)
            ck_assert_double_eq(c.sim.makespan, 2 * (8 + 8 - 1)); /* GPipe */
        if (R == 1)
            ck_assert_double_eq(c.sim.makespan, 2 * 8); /* DDP */
        prev = c.sim.makespan;
        compiled_free(&c);
    }
}
END_TEST

/* Megatron-Core's forward_backward_pipelining_with_interleaving for p = 4,
 * v = 2, m = 8 (warm-up 2(p-r-1) + (v-1)p, microbatches in groups of p,
 * chunk by chunk); stage s = chunk * p + rank. */
START_TEST(interleaved_matches_megatron)
{
    static const char *want[4] = {
        "F(0,0) F(0,1) F(0,2) F(0,3) F(4,0) F(4,1) F(4,2) F(4,3) F(0,4) F(0,5) F(0,6) B(4,0) "
        "F(0,7) B(4,1) F(4,4) B(4,2) F(4,5) B(4,3) F(4,6) B(0,0) F(4,7) B(0,1) B(0,2) B(0,3) "
        "B(4,4) B(4,5) B(4,6) B(4,7) B(0,4) B(0,5) B(0,6) B(0,7)",
        "F(1,0) F(1,1) F(1,2) F(1,3) F(5,0) F(5,1) F(5,2) F(5,3) F(1,4) B(5,0) F(1,5) B(5,1) "
        "F(1,6) B(5,2) F(1,7) B(5,3) F(5,4) B(1,0) F(5,5) B(1,1) F(5,6) B(1,2) F(5,7) B(1,3) "
        "B(5,4) B(5,5) B(5,6) B(5,7) B(1,4) B(1,5) B(1,6) B(1,7)",
        "F(2,0) F(2,1) F(2,2) F(2,3) F(6,0) F(6,1) F(6,2) B(6,0) F(6,3) B(6,1) F(2,4) B(6,2) "
        "F(2,5) B(6,3) F(2,6) B(2,0) F(2,7) B(2,1) F(6,4) B(2,2) F(6,5) B(2,3) F(6,6) B(6,4) "
        "F(6,7) B(6,5) B(6,6) B(6,7) B(2,4) B(2,5) B(2,6) B(2,7)",
        "F(3,0) F(3,1) F(3,2) F(3,3) F(7,0) B(7,0) F(7,1) B(7,1) F(7,2) B(7,2) F(7,3) B(7,3) "
        "F(3,4) B(3,0) F(3,5) B(3,1) F(3,6) B(3,2) F(3,7) B(3,3) F(7,4) B(7,4) F(7,5) B(7,5) "
        "F(7,6) B(7,6) F(7,7) B(7,7) B(3,4) B(3,5) B(3,6) B(3,7)",
    };
    pp_define defs[] = {{"W", 4}, {"V", 2}, {"B", 8}};
    compiled c;
    compile_library(&c, "interleaved-1f1b.pp", defs, 3);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_int_eq(c.deadlock, 0);
    for (int r = 0; r < 4; r++)
        assert_order(&c, r, 'x', want[r]);
    /* bubble (p-1)/(v*m + p-1) with unit costs */
    ck_assert_double_eq_tol(1 - busy_fraction(&c), 3.0 / 19.0, 1e-12);
    compiled_free(&c);
}
END_TEST

/* ZB-H1, p=4 m=8: the handcrafted order of Qi et al., "Zero Bubble (Almost)
 * Pipeline Parallelism" (ICLR 2024), section 3.1 / Figure 3, as InternEvo's
 * ZeroBubblePipelineScheduler (internlm/core/scheduler/pipeline_scheduler_zb.py:
 * warm-up p-r-1, W popped from step r on) and PyTorch's
 * ScheduleInterleavedZeroBubble with one stage per rank emit it. With
 * T_F = T_B = T_W = 1 the bubble is the paper's (p-1)(T_F + T_B - T_W) = 3, a
 * third of 1F1B's (p-1)(T_F + T_B + T_W), and rank r holds 1F1B's S-r
 * activations between F and B. */
START_TEST(zb_h1_matches_published_order)
{
    static const char *want[4] = {
        "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7",
        "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7",
        "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7",
        "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7",
    };
    pp_define defs[] = {{"S", 4}, {"B", 8}};
    compiled c;
    compile_library(&c, "zb-h1.pp", defs, 2);
    ck_assert_int_eq(c.errors + c.deadlock, 0);
    ck_assert_int_eq(c.t.js.ND, 3);
    for (int r = 0; r < 4; r++)
        assert_order(&c, r, 'b', want[r]);
    double work = 3 * 8; /* per worker */
    ck_assert_double_eq(c.sim.makespan, work + 3 * (1 + 1 - 1));
    for (int r = 0; r < 4; r++)
        ck_assert_int_eq(peak_inflight(&c, r), 4 - r);
    compiled_free(&c);
}
END_TEST

/* The closed forms the headers of issue 17's schedules state, at unit
 * costs (the orders suite checks their orders against the references). */
START_TEST(state_of_the_art_closed_forms)
{
    compiled c;
    /* ZB-V: makespan 6B + W - 1 for B >= 2W-1, at most 2W chunk-activations
     * per worker (1F1B's worker 0) */
    for (int W = 2; W <= 4; W++)
        for (int B = 2 * W - 1; B <= 12; B += 3) {
            pp_define defs[] = {{"W", W}, {"B", B}};
            compile_library(&c, "zb-v.pp", defs, 2);
            ck_assert_msg(c.errors + c.deadlock == 0, "zb-v W=%d B=%d:\n%s", W, B, c.msgs);
            ck_assert_msg(c.sim.makespan == 6 * B + W - 1, "zb-v W=%d B=%d: makespan %g", W, B,
                          c.sim.makespan);
            for (int r = 0; r < W; r++)
                ck_assert_int_le(peak_inflight(&c, r), 2 * W);
            ck_assert_int_eq(peak_inflight(&c, 0), 2 * W);
            compiled_free(&c);
        }
    /* interleaved ZB: makespan 3VB + W - 1, peak warm + 1 = (V-1)G + W - r */
    static const int zb[][3] = {{2, 2, 4}, {4, 2, 8}, {4, 3, 8}, {4, 2, 12}, {3, 2, 6}};
    for (int i = 0; i < 5; i++) {
        int W = zb[i][0], V = zb[i][1], B = zb[i][2], G = B / (B / W);
        pp_define defs[] = {{"W", W}, {"V", V}, {"B", B}};
        compile_library(&c, "interleaved-zb.pp", defs, 3);
        ck_assert_int_eq(c.errors + c.deadlock, 0);
        ck_assert_double_eq(c.sim.makespan, 3 * V * B + W - 1);
        for (int r = 0; r < W; r++)
            ck_assert_int_eq(peak_inflight(&c, r), (V - 1) * G + W - r);
        compiled_free(&c);
    }
    /* interleaved 1F1B for B not a multiple of W: a deadlock-free order
     * whose worker 0 holds warm + 1 = 2(W-1) + (V-1)G + 1 (G = B here) */
    for (int B = 5; B <= 7; B++) {
        pp_define defs[] = {{"W", 4}, {"V", 2}, {"B", B}};
        compile_library(&c, "interleaved-1f1b.pp", defs, 3);
        ck_assert_int_eq(c.errors + c.deadlock, 0);
        ck_assert_int_eq(peak_inflight(&c, 0), min_int(2 * 3 + B + 1, 2 * B));
        compiled_free(&c);
    }
    /* looped BFS: makespan 2VB + 2(W-1) for B >= W; every chunk-activation held */
    {
        pp_define defs[] = {{"W", 4}, {"V", 3}, {"B", 8}};
        compile_library(&c, "looped-bfs.pp", defs, 3);
        ck_assert_int_eq(c.errors + c.deadlock, 0);
        ck_assert_double_eq(c.sim.makespan, 2 * 3 * 8 + 2 * 3);
        for (int r = 0; r < 4; r++)
            ck_assert_int_eq(peak_inflight(&c, r), 3 * 8);
        compiled_free(&c);
    }
    /* PP x DP: replica g's worker g*S + s runs 1F1B's order of worker s over
     * its microbatches g, g + D, ... (b / D-th), and each stage has D owners */
    {
        pp_define defs[] = {{"S", 4}, {"D", 2}, {"B", 8}}, one[] = {{"S", 4}, {"B", 4}};
        compiled f;
        compile_library(&c, "pp-dp.pp", defs, 3);
        compile_library(&f, "1f1b.pp", one, 2);
        ck_assert_int_eq(c.errors + c.deadlock + f.errors + f.deadlock, 0);
        ck_assert_int_eq(c.t.W, 8);
        ck_assert_double_eq(c.sim.makespan, f.sim.makespan);
        for (int w = 0; w < 8; w++) {
            int s = w % 4, g = w / 4;
            ck_assert_int_eq(c.sim.off[w + 1] - c.sim.off[w], f.sim.off[s + 1] - f.sim.off[s]);
            for (int k = 0; k < c.sim.off[w + 1] - c.sim.off[w]; k++) {
                int j = c.sim.order[c.sim.off[w] + k], i = f.sim.order[f.sim.off[s] + k];
                ck_assert_int_eq(job_s(&c.t.js, j), job_s(&f.t.js, i));
                ck_assert_int_eq(job_d(&c.t.js, j), job_d(&f.t.js, i));
                ck_assert_int_eq(job_b(&c.t.js, j) % 2, g);
                ck_assert_int_eq(job_b(&c.t.js, j) / 2, job_b(&f.t.js, i));
                ck_assert_int_eq(c.t.owner[j], w);
            }
        }
        compiled_free(&f);
        compiled_free(&c);
    }
    /* pipeline of FSDP groups: bubble (P-1)/(B/D + P-1); each worker owns
     * its model stage and computes only its group's stages */
    {
        pp_define defs[] = {{"P", 2}, {"D", 2}, {"B", 8}};
        compile_library(&c, "pp-fsdp.pp", defs, 3);
        ck_assert_int_eq(c.errors + c.deadlock, 0);
        ck_assert_double_eq_tol(1 - busy_fraction(&c), 1.0 / (4 + 1), 1e-12);
        for (int j = 0; j < job_count(&c.t.js); j++) {
            int s = job_s(&c.t.js, j);
            ck_assert_int_eq(c.t.owner[j], s);
            ck_assert_int_eq(c.t.worker[j] / 2, s / 2);
        }
        compiled_free(&c);
    }
}
END_TEST

/* ZB-H2 (zb-h2.pp): for B >= 2S-1 and T_B <= T_F + T_W its only idle time is the start skew,
 * makespan B(T_F+T_B+T_W) + (S-1)T_F, below ZB-H1's B(T_F+T_B+T_W) +
 * (S-1)(T_F+T_B-T_W) when T_B > T_W and equal when T_B = T_W; worker r holds
 * 2(S-r)-1 microbatches (ZB-H1: S-r). */
START_TEST(zb_h2_closed_forms)
{
    static const struct {
        int S, B;
        double f, b, w;
    } cases[] = {{4, 8, 1, 1, 1}, {4, 8, 1, 2, 1},  {4, 8, 2, 2, 1},
                 {3, 5, 1, 2, 1}, {4, 12, 2, 3, 2}, {2, 4, 1, 1, 1}};
    for (int i = 0; i < 6; i++) {
        int S = cases[i].S, B = cases[i].B;
        double f = cases[i].f, b = cases[i].b, w = cases[i].w;
        char src[4096], *h2 = NULL, *h1 = NULL;
        size_t n;
        for (int k = 0; k < 2; k++) {
            char path[512];
            snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, k ? "zb-h1.pp" : "zb-h2.pp");
            FILE *fp = fopen(path, "r");
            ck_assert_ptr_nonnull(fp);
            n = fread(src, 1, sizeof src - 200, fp);
            fclose(fp);
            snprintf(src + n, 200, "\ncost F = %g\ncost B = %g\ncost W = %g\n", f, b, w);
            *(k ? &h1 : &h2) = strdup(src);
        }
        pp_define defs[] = {{"S", S}, {"B", B}};
        compiled c2, c1;
        compile_src(&c2, h2, defs, 2);
        compile_src(&c1, h1, defs, 2);
        ck_assert_msg(c2.errors + c2.deadlock + c1.errors + c1.deadlock == 0, "%s%s", c2.msgs,
                      c1.msgs);
        double work = B * (f + b + w);
        ck_assert_msg(c2.sim.makespan == work + (S - 1) * f, "ZB-H2 S=%d B=%d F=%g B=%g W=%g: %g",
                      S, B, f, b, w, c2.sim.makespan);
        ck_assert_double_eq(c1.sim.makespan, work + (S - 1) * (f + b - w));
        for (int r = 0; r < S; r++)
            ck_assert_int_eq(peak_inflight(&c2, r), 2 * (S - r) - 1);
        compiled_free(&c2);
        compiled_free(&c1);
        free(h2);
        free(h1);
    }
}
END_TEST

/* Issue 17's library files compile at their defaults without a warning,
 * and outside their documented range each refuses the -D with its require
 * line's message and a caret (exit 1 from ppc, PP_COMPILE_ERRORS here)
 * instead of compiling an order no reference runs. */
START_TEST(library_refuses_outside_its_range)
{
    static const struct {
        const char *file;
        pp_define def[2];
        int ndefs;
        const char *message;
    } cases[] = {
        {"interleaved-1f1b.pp", {{"G", 0}}, 1, "G must be in [1, B]) with G=0, B=8"},
        {"interleaved-1f1b.pp", {{"S", 7}}, 1, "S must be W * V) with S=7, W=4, V=2"},
        {"looped-bfs.pp", {{"S", 7}}, 1, "S must be W * V, V >= 1) with V=2, S=7, W=4"},
        {"breadth-first.pp", {{"S", 6}}, 1, "S must be a multiple of W) with W=4, S=6"},
        {"interleaved-zb.pp",
         {{"W", 4}, {"B", 9}},
         2,
         "B must be a multiple of max(1, B / W)) with B=9, R=2"},
        {"interleaved-zb.pp", {{"S", 6}}, 1, "S must be W * V) with S=6, W=4, V=2"},
        {"zb-v.pp", {{"S", 5}}, 1, "S must be 2W) with S=5, W=4"},
        {"zb-h2.pp", {{"W", 3}}, 1, "W must be S) with W=3, S=4"},
        {"pp-dp.pp", {{"B", 7}}, 1, "B must be a multiple of D) with D=2, B=7"},
        {"pp-dp.pp", {{"W", 3}}, 1, "W must be S * D) with W=3, S=4, D=2"},
        {"pp-fsdp.pp", {{"B", 3}}, 1, "B must be a multiple of D) with D=2, B=3"},
        {"pp-fsdp.pp", {{"W", 5}}, 1, "S and W must be P * D) with S=4, P=2, D=2, W=5"},
        {"dualpipev.pp", {{"B", 7}}, 1, "(B >= S = 2W)) with B=7, W=4"},
        {"dualpipev.pp", {{"S", 9}}, 1, "S must be 2W) with S=9, W=4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        compiled c;
        compile_library(&c, cases[i].file, NULL, 0);
        ck_assert_msg(c.status == PP_COMPILE_OK && c.diag.warnings == 0, "%s at its defaults:\n%s",
                      cases[i].file, c.msgs ? c.msgs : "");
        compiled_free(&c);
        compile_library(&c, cases[i].file, cases[i].def, cases[i].ndefs);
        ck_assert_msg(c.status == PP_COMPILE_ERRORS && c.msgs &&
                          strstr(c.msgs, "requirement failed") &&
                          strstr(c.msgs, cases[i].message) && strstr(c.msgs, "|         ^~"),
                      "%s -D %s=%lld: want the requirement '%s' with a caret, got status %d:\n%s",
                      cases[i].file, cases[i].def[cases[i].ndefs - 1].name,
                      (long long)cases[i].def[cases[i].ndefs - 1].value, cases[i].message, c.status,
                      c.msgs ? c.msgs : "");
        compiled_free(&c);
    }
    /* and ppc exits 1 with the message */
    char *out = NULL, cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/zb-v.pp -D S=5 -q -o /dev/null 2>&1",
             PP_ROOT, PP_ROOT);
    int rc = run_cmd(cmd, &out);
    ck_assert_msg(rc == 1 && strstr(out, "requirement failed: S == 2 * W"), "%s: exit %d\n%s", cmd,
                  rc, out);
    free(out);
}
END_TEST

/* Lowers a compiled schedule and verifies the plans (pp_compile_plans: the
 * communication checker and the buffer-safety verifier among them): every plan the compiler emits must
 * pass. */
static void lowers_and_passes_checks(const compiled *c, const char *what)
{
    pp_plan *plans;
    pp_lower_opts lo = {1, 0};
    char *msgs = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&msgs, &len);
    pp_diag d = c->diag;
    d.out = out;
    pp_compile_status st = pp_compile_plans(&c->t, &c->sim, &c->sch.model, &lo, &d, &plans);
    fclose(out);
    ck_assert_msg(st == PP_COMPILE_OK, "%s:\n%s", what, msgs);
    pp_plans_free(plans, c->t.W);
    free(msgs);
}

/* The plan id covers every operand and the group table: compiles that
 * differ only in one peer, one group operand or one group member differ. */
START_TEST(plan_id_covers_peers_and_groups)
{
    pp_define defs[] = {{"S", 4}, {"B", 4}, {"G", 2}, {"R", 2}};
    compiled c;
    compile_library(&c, "lpp.pp", defs, 4);
    ck_assert_int_eq(c.errors, 0);
    int W = c.t.W;
    pp_plan *plans = calloc((size_t)W, sizeof *plans);
    pp_lower_opts lo = {1, 0};
    ck_assert_int_eq(pp_lower(&c.t, &c.sim, &c.sch.model, &lo, &c.diag, plans), 0);
    uint64_t id = plans[0].plan_id;
    ck_assert_uint_eq(pp_plans_id(plans, W), id);
    int peer = -1, group = -1;
    for (uint32_t i = 0; i < plans[1].ninstr; i++) {
        pp_instr *in = &plans[1].code[i];
        if (peer < 0 && (pp_op_uses(in->op) & PP_U_PEER))
            peer = (int)i;
        if (group < 0 && (pp_op_uses(in->op) & PP_U_GROUP))
            group = (int)i;
    }
    ck_assert_msg(peer >= 0 && group >= 0 && plans[1].ngroups > 0,
                  "LPP R=2 has transfers and groups");
    plans[1].code[peer].peer ^= 2; /* another peer */
    ck_assert_uint_ne(pp_plans_id(plans, W), id);
    plans[1].code[peer].peer ^= 2;
    plans[1].code[group].group += 1; /* another group */
    ck_assert_uint_ne(pp_plans_id(plans, W), id);
    plans[1].code[group].group -= 1;
    plans[1].groups[0].member[0] += 1; /* another member */
    ck_assert_uint_ne(pp_plans_id(plans, W), id);
    plans[1].groups[0].member[0] -= 1;
    ck_assert_uint_eq(pp_plans_id(plans, W), id);
    for (int w = 0; w < W; w++)
        pp_plan_free(&plans[w]);
    free(plans);
    compiled_free(&c);
}
END_TEST

/* Every library schedule compiles, simulates without deadlock, lowers, and
 * passes both plan checkers (commcheck, bufcheck) over the range its
 * header documents. */
START_TEST(library_compiles_over_documented_ranges)
{
    enum {
        PLAIN,
        LOOPED /* S = 8 a multiple of W */,
        MULTIPLE /* B a multiple of W */,
        ROUNDS /* B a multiple of max(1, B / W), PyTorch's rounds */,
        DUAL /* B >= 2W */
    };
    static const struct {
        const char *file, *p1, *p2; /* p2 NULL: one parameter */
        int rule;
    } lib[] = {
        {"gpipe.pp", "S", "B", PLAIN},        {"ddp.pp", "S", "B", PLAIN},
        {"1f1b.pp", "S", "B", PLAIN},         {"1f1b-greedy.pp", "S", "B", PLAIN},
        {"fsdp.pp", "S", NULL, PLAIN},        {"breadth-first.pp", "W", "B", LOOPED},
        {"depth-first.pp", "W", "B", LOOPED}, {"interleaved-1f1b.pp", "W", "B", PLAIN},
        {"zb-h1.pp", "S", "B", PLAIN},        {"1f1b-overlap.pp", "S", "B", PLAIN},
        {"v-overlap.pp", "W", "B", PLAIN},    {"zb-v.pp", "W", "B", PLAIN},
        {"looped-bfs.pp", "W", "B", PLAIN},   {"interleaved-zb.pp", "W", "B", ROUNDS},
        {"zb-h2.pp", "S", "B", PLAIN},        {"dualpipev.pp", "W", "B", DUAL},
    };
    int values[] = {1, 2, 3, 4, 8, 16};
    for (size_t i = 0; i < sizeof lib / sizeof lib[0]; i++)
        for (int x = 0; x < 6; x++)
            for (int y = 0; y < 6; y++) {
                int a = values[x], b = values[y] * (lib[i].rule == MULTIPLE ? a : 1);
                if (lib[i].rule == LOOPED && 8 % a)
                    continue;
                if (lib[i].rule == ROUNDS && b % (b / a > 1 ? b / a : 1))
                    continue;
                if (lib[i].rule == DUAL && b < 2 * a)
                    continue;
                pp_define defs[2] = {{lib[i].p1, a}, {lib[i].p2 ? lib[i].p2 : "S", b}};
                compiled c;
                compile_library(&c, lib[i].file, defs, lib[i].p2 ? 2 : 1);
                char what[128];
                snprintf(what, sizeof what, "%s %s=%d %s=%d", lib[i].file, lib[i].p1, a,
                         lib[i].p2 ? lib[i].p2 : "-", b);
                ck_assert_msg(c.errors == 0 && !c.deadlock, "%s:\n%s", what, c.msgs);
                lowers_and_passes_checks(&c, what);
                compiled_free(&c);
            }
    /* LPP and FSLPP: W = G*R */
    for (int G = 1; G <= 4; G *= 2)
        for (int R = 1; R <= 4; R *= 2)
            for (int B = 1; B <= 16; B *= 4) {
                pp_define defs[] = {{"S", 4}, {"B", B}, {"G", G}, {"R", R}};
                compiled c, f;
                compile_library(&c, "lpp.pp", defs, 4);
                compile_library(&f, "fslpp.pp", defs, 4);
                ck_assert_int_eq(c.errors + f.errors + c.deadlock + f.deadlock, 0);
                lowers_and_passes_checks(&c, "lpp.pp");
                lowers_and_passes_checks(&f, "fslpp.pp");
                compiled_free(&c);
                compiled_free(&f);
            }
    /* PP x DP (W = S*D) and a pipeline of FSDP groups (W = P*D): B a multiple of D */
    for (int P = 1; P <= 4; P *= 2)
        for (int D = 1; D <= 4; D *= 2)
            for (int k = 1; k <= 4; k *= 2) {
                pp_define dp[] = {{"S", P}, {"D", D}, {"B", k * D}};
                pp_define fs[] = {{"P", P}, {"D", D}, {"B", k * D}};
                compiled c, f;
                compile_library(&c, "pp-dp.pp", dp, 3);
                compile_library(&f, "pp-fsdp.pp", fs, 3);
                ck_assert_msg(c.errors + f.errors + c.deadlock + f.deadlock == 0,
                              "P=%d D=%d B=%d:\n%s%s", P, D, k * D, c.msgs, f.msgs);
                lowers_and_passes_checks(&c, "pp-dp.pp");
                lowers_and_passes_checks(&f, "pp-fsdp.pp");
                compiled_free(&c);
                compiled_free(&f);
            }
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
    tcase_add_test(tc, strict_and_greedy_1f1b_agree);
    tcase_add_test(tc, lpp_interpolates_gpipe_and_ddp);
    tcase_add_test(tc, lpp_makespan_falls_with_r);
    tcase_add_test(tc, interleaved_matches_megatron);
    tcase_add_test(tc, zb_h1_matches_published_order);
    tcase_add_test(tc, state_of_the_art_closed_forms);
    tcase_add_test(tc, zb_h2_closed_forms);
    tcase_add_test(tc, library_refuses_outside_its_range);
    tcase_add_test(tc, library_compiles_over_documented_ranges);
    tcase_add_test(tc, plan_id_covers_peers_and_groups);
    suite_add_tcase(s, tc);
    return s;
}
