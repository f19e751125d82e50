/* test_recompute.c - recomputation as a schedule decision (`recompute
 * [when EXPR]`, issue 26): the statement's errors (file:line:col), R's
 * placement, priority and cost in the job table, a hand-worked strict
 * timeline, the report's stash memory and plan memory, the lowered
 * Recompute between F and B, and the verifier and buffer-safety proof
 * refusing a plan whose re-run forward is misplaced or missing. The
 * recompute_e2e suite trains library schedules with `recompute` appended
 * under mpirun to exactly the weights they train without it
 * (--atol 0 --rtol 0), with ppvm allocating what the report says. */
#include <stdlib.h>
#include <string.h>

#include "../../isa/bufcheck.h"
#include "../../isa/verify.h"
#include "search.h"
#include "torch_csv.h"
#include "suites.h"
#include "testutil.h"

#define HEAD "param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n"

/* 1F1B on 2 workers, 2 microbatches, unit costs (see sim_hand_worked). */
#define SMALL                                                                                      \
    "param S = 2\nparam B = 2\nparam W = 2\n"                                                      \
    "let warm = S - 1 - s\n"                                                                       \
    "compute(s,b,d) = s\n"                                                                         \
    "priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b\n"               \
    "order strict\n"

static void compile_text(pp_compiled *c, const char *src, pp_stage stop)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = src;
    o.len = strlen(src);
    o.stop_after = stop;
    o.capture = 1;
    pp_compile(&o, c);
}

static void fails_with(const char *src, const char *want)
{
    pp_compiled c;
    compile_text(&c, src, PP_STAGE_SIMULATE);
    ck_assert_msg(c.status == PP_COMPILE_ERRORS, "expected errors for:\n%s\ngot status %d:\n%s",
                  src, c.status, c.msgs ? c.msgs : "");
    ck_assert_msg(c.msgs && strstr(c.msgs, want), "expected '%s' in:\n%s", want,
                  c.msgs ? c.msgs : "");
    pp_compiled_free(&c);
}

START_TEST(statement_errors)
{
    fails_with(HEAD "recompute when d == F\n",
               "t.pp:5:16: error: 'd' cannot be used in 'recompute when': it may use s, b, params "
               "and lets (a forward is recomputed or not as a whole)\n"
               "    5 | recompute when d == F\n"
               "      |                ^");
    fails_with("param S = 2\nparam B = 2\nparam W = 2\nlet k = d\ncompute(s,b,d) = s\n"
               "recompute when k\n",
               "t.pp:6:16: error: 'k' uses d: 'recompute when' may use s, b, params and lets "
               "without d");
    fails_with(HEAD "recompute if s == 0\n",
               "t.pp:5:11: error: expected 'recompute' or 'recompute when EXPR', found 'if'");
    fails_with(HEAD "recompute\nrecompute when s == 0\n",
               "t.pp:6:1: error: recompute is given more than once");
    fails_with(HEAD "recompute when ss > 0\n", "t.pp:5:16: error: unknown name 'ss'");
    fails_with(HEAD "recompute when 1 / b\n",
               "t.pp:5:18: error: division by zero in recompute when at (s=0, b=0)");
    fails_with(HEAD "recompute\ncost R = s - 1\n",
               "t.pp:6:12: error: cost R = -1 at (s=0, b=0): costs must be positive");
    fails_with(HEAD "cost Q = 1\n",
               "unknown cost 'Q': expected F, B, W, R, latency, bandwidth, overlap, "
               "tensor_latency, tensor_bandwidth or host_bandwidth");
    /* F and B on different workers: R re-reads F's input where B runs */
    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = d == B ? 1 - s : s\n"
               "recompute when s == 1\n",
               "t.pp:5:18: error: recompute at (s=1, b=0): F runs on worker 1 but B on worker 0; "
               "a recomputed forward's F and B must share a worker");
    /* cost R without recompute changes nothing: a warning */
    pp_compiled c;
    compile_text(&c, HEAD "cost R = 2\n", PP_STAGE_SIMULATE);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_msg(c.msgs && strstr(c.msgs, "t.pp:5:1: warning: 'cost R' has no effect"), "%s",
                  c.msgs ? c.msgs : "");
    pp_compiled_free(&c);
    compile_text(&c, HEAD "recompute when s > 5\n", PP_STAGE_SIMULATE);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_msg(strstr(c.msgs, "warning: 'recompute when' holds for no job"), "%s", c.msgs);
    ck_assert_int_eq(job_count(&c.t.js), 8); /* no R ids */
    pp_compiled_free(&c);
}
END_TEST

static int job(const pp_compiled *c, int s, int b, int d) { return job_id(&c->t.js, s, b, d); }

/* R(s,b): B's worker, B's priority unless the priority names R, F's cost
 * unless `cost R`; only where `recompute when` holds. */
START_TEST(job_table)
{
    pp_compiled c;
    compile_text(&c, SMALL "recompute when s == 0\ncost F = 3\n", PP_STAGE_SIMULATE);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(job_total(&c.t.js), 8 + 2);
    for (int b = 0; b < 2; b++) {
        ck_assert(job_exists(&c.t.js, job(&c, 0, b, DIR_R)));
        ck_assert(!job_exists(&c.t.js, job(&c, 1, b, DIR_R)));
        int r = job(&c, 0, b, DIR_R), bk = job(&c, 0, b, DIR_B);
        ck_assert_int_eq(c.t.worker[r], 0);
        ck_assert_int_eq(c.t.priority[r], c.t.priority[bk]);
        ck_assert_double_eq(c.t.cost[r], 3);
        ck_assert_int_eq(job_pred(&c.t.js, r), job(&c, 0, b, DIR_F));
        ck_assert_int_eq(job_pred2(&c.t.js, bk), r);
    }
    ck_assert_int_eq(job_pred2(&c.t.js, job(&c, 1, 0, DIR_B)), -1);
    pp_compiled_free(&c);

    compile_text(&c,
                 "param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n"
                 "priority(s,b,d) = d == R ? 7 : b\nrecompute\ncost R = 2 + s\n",
                 PP_STAGE_SIMULATE);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.t.priority[job(&c, 1, 1, DIR_R)], 7);
    ck_assert_double_eq(c.t.cost[job(&c, 1, 1, DIR_R)], 3);
    pp_compiled_free(&c);
}
END_TEST

/* Worker 0's order F0 F1 R0 B0 R1 B1, worker 1's F0 R0 B0 F1 R1 B1 (each
 * R right before its B: B's priority, ahead on the tie):
 *   w0 F(0,0) 0-1, F(0,1) 1-2, R(0,0) 2-3
 *   w1 F(1,0) 1-2, R(1,0) 2-3, B(1,0) 3-4, F(1,1) 4-5, R(1,1) 5-6, B(1,1) 6-7
 *   w0 B(0,0) 4-5, R(0,1) 5-6, B(0,1) 7-8
 * makespan 8 (6 without recompute). An R placed before its F deadlocks,
 * named. */
START_TEST(sim_hand_worked)
{
    pp_compiled c;
    compile_text(&c, SMALL "recompute\n", PP_STAGE_SIMULATE);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    const int want[][4] = {{0, 0, DIR_F, 0}, {0, 1, DIR_F, 1}, {0, 0, DIR_R, 2}, {1, 0, DIR_F, 1},
                           {1, 0, DIR_R, 2}, {1, 0, DIR_B, 3}, {1, 1, DIR_F, 4}, {1, 1, DIR_R, 5},
                           {1, 1, DIR_B, 6}, {0, 0, DIR_B, 4}, {0, 1, DIR_R, 5}, {0, 1, DIR_B, 7}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int j = job(&c, want[i][0], want[i][1], want[i][2]);
        ck_assert_msg(c.sim.start[j] == want[i][3], "%c(%d,%d) starts at %g, expected %d",
                      dir_char(want[i][2]), want[i][0], want[i][1], c.sim.start[j], want[i][3]);
    }
    ck_assert_double_eq(c.sim.makespan, 8);
    pp_compiled_free(&c);

    fails_with("param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n"
               "priority(s,b,d) = d == R ? -1 : d * B + b\norder strict\nrecompute\n",
               "worker 0 waits at R(0,0), which needs F(0,0) from worker 0");
}
END_TEST

static char *library(const char *name, const char *extra);

/* Greedy order (1f1b-greedy.pp, S = 4, B = 8): R(s,b) starts no earlier
 * than the end of B(s,b)'s other input (B(s+1,b), or F(3,b)), so each
 * worker holds one rebuilt stash at a time; released with F it ran right
 * after F (every worker idle then) and held S - s. */
START_TEST(greedy_releases_r_with_the_gradient)
{
    char *src = library("1f1b-greedy.pp", "\nrecompute\n");
    pp_compiled c;
    compile_text(&c, src, PP_STAGE_PLANS);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < 8; b++) {
            int r = job(&c, s, b, DIR_R), in = job_pred(&c.t.js, job(&c, s, b, DIR_B));
            ck_assert_msg(c.sim.start[r] >= c.sim.end[in], "R(%d,%d) at %g, its B's input ends %g",
                          s, b, c.sim.start[r], c.sim.end[in]);
        }
    for (int w = 0; w < 4; w++)
        ck_assert_int_eq(c.rep.w[w].peak_act, 1);
    pp_compiled_free(&c);
    free(src);
}
END_TEST

/* Compiled into *keep when given (the caller frees it), else freed here:
 * a pp_compiled is never copied by value, its memstream points into it. */
static uint64_t mem_of(const char *src, int rank, pp_compiled *keep)
{
    pp_compiled local, *c = keep ? keep : &local;
    compile_text(c, src, PP_STAGE_PLANS);
    ck_assert_msg(c->status == PP_COMPILE_OK, "%s", c->msgs);
    uint64_t m = c->rep.w[rank].mem_bytes;
    if (!keep)
        pp_compiled_free(c);
    return m;
}

static char *library(const char *name, const char *extra)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    char *src = calloc(1, 65536);
    ck_assert(src != NULL);
    size_t n = fread(src, 1, 65536 - 256, f);
    fclose(f);
    src[n] = '\0';
    strcat(src, extra);
    return src;
}

/* 1F1B, S = 4, B = 8: each stage holds one stash at a time (from R to B),
 * and rank 0's plan memory drops by what its other three stashes took;
 * the plan's Recompute of each microbatch sits between its Forward and
 * its Backward and reads the slot F read. */
START_TEST(memory_and_lowering)
{
    char *plain = library("1f1b.pp", ""), *rc = library("1f1b.pp", "\nrecompute\n");
    pp_compiled c;
    uint64_t before = mem_of(plain, 0, NULL), after = mem_of(rc, 0, &c);
    ck_assert_msg(after < before, "plan memory %llu with recompute, %llu without",
                  (unsigned long long)after, (unsigned long long)before);
    ck_assert_int_eq(c.rep.nrecompute, 32);
    for (int w = 0; w < 4; w++)
        ck_assert_int_eq(c.rep.w[w].peak_act, 1);
    const pp_plan *p = &c.plans[1];
    int nrc = 0;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        if (p->code[i].op != PP_OP_Recompute)
            continue;
        nrc++;
        int f = -1, bk = -1, mb = p->code[i].mb;
        for (uint32_t k = 0; k < p->ninstr; k++) {
            if (p->code[k].mb != mb || p->code[k].stage != 1)
                continue;
            if (p->code[k].op == PP_OP_Forward)
                f = (int)k;
            if (p->code[k].op == PP_OP_Backward)
                bk = (int)k;
        }
        ck_assert_msg(f >= 0 && f < (int)i && (int)i < bk, "R(1,%d) at %u, F at %d, B at %d", mb, i,
                      f, bk);
        ck_assert_int_eq(pp_slot(&p->code[i], PP_ROLE_IN), pp_slot(&p->code[f], PP_ROLE_IN));
        ck_assert_int_eq(pp_slot(&p->code[i], PP_ROLE_STASH), pp_slot(&p->code[bk], PP_ROLE_STASH));
    }
    ck_assert_int_eq(nrc, 8);
    pp_compiled_free(&c);
    free(plain);
    free(rc);
}
END_TEST

/* Moves instruction `from` of p to just after instruction `to` (> from). */
static void move_after(pp_plan *p, uint32_t from, uint32_t to)
{
    pp_instr x = p->code[from];
    memmove(&p->code[from], &p->code[from + 1], (to - from) * sizeof x);
    p->code[to] = x;
}

/* A Recompute moved after its Backward is refused by the verifier; one
 * dropped (its Backward then reads a stash slot another F overwrote) by
 * the buffer-safety proof. */
START_TEST(broken_plans_refused)
{
    char err[1024];
    pp_compiled c;
    compile_text(&c, SMALL "recompute\n", PP_STAGE_PLANS);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    pp_plan *p = &c.plans[0];
    ck_assert_int_eq(pp_verify_world(c.plans, 2, err, sizeof err), 0);
    ck_assert_int_eq(pp_buffer_check(c.plans, 2, err, sizeof err), 0);
    uint32_t r = 0, bk = 0;
    while (r < p->ninstr && p->code[r].op != PP_OP_Recompute)
        r++;
    for (bk = r; bk < p->ninstr; bk++)
        if (p->code[bk].op == PP_OP_Backward && p->code[bk].mb == p->code[r].mb)
            break;
    ck_assert_msg(r < bk && bk < p->ninstr, "no Recompute then Backward on rank 0");
    move_after(p, r, bk);
    ck_assert_int_eq(pp_verify_world(c.plans, 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "job R(0,0) runs on rank 0") &&
                      strstr(err, "(expected all three on one rank, R after F and before B)"),
                  "%s", err);
    pp_compiled_free(&c);

    /* the Recompute of (0,0) gone: B(0,0)'s stash slot last held F(0,1)'s */
    compile_text(&c, SMALL "recompute\n", PP_STAGE_PLANS);
    p = &c.plans[0];
    for (r = 0; p->code[r].op != PP_OP_Recompute; r++)
        ;
    memmove(&p->code[r], &p->code[r + 1], (p->ninstr - r - 1) * sizeof p->code[0]);
    p->ninstr--;
    ck_assert_int_eq(pp_buffer_check(c.plans, 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "Backward(s=0,b=0)") != NULL, "%s", err);
    pp_compiled_free(&c);
}
END_TEST

/* --emit torch-csv refuses a plan with R jobs, saying why; the same
 * schedule without recompute is written. */
START_TEST(torch_csv_refuses)
{
    char why[512];
    pp_compiled c;
    compile_text(&c, SMALL "recompute when b == 1\n", PP_STAGE_SIMULATE);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(pp_torch_csv_check(&c.t, why, sizeof why), 1);
    ck_assert_msg(strstr(why, "R(0,1) re-runs a forward to rebuild its stash ('recompute'), but "
                              "PyTorch's pipeline actions") != NULL,
                  "%s", why);
    pp_compiled_free(&c);
    compile_text(&c, SMALL, PP_STAGE_SIMULATE);
    ck_assert_int_eq(pp_torch_csv_check(&c.t, why, sizeof why), 0);
    pp_compiled_free(&c);
}
END_TEST

/* --search tries each combination with --recompute 1 and 's < S - 1':
 * 1F1B at batch 128 (stashes dominate) over a cap that plain 1F1B
 * exceeds is answered by recomputing every stage but the last, whose
 * makespan (28) beats full recompute's (30) at the same peak. */
START_TEST(search_finds_recompute)
{
    char *dir = temp_dir(), cmd[4096];
    snprintf(cmd, sizeof cmd,
             "sed 's/batch   = 16/batch   = 128/' %s/schedules/1f1b.pp > %s/1f1b.pp", PP_ROOT, dir);
    free(run_expect(cmd, 0));
    pp_search_opts o = {.library = dir, .W = 4, .B = 8, .mem_limit = 2400000, .optimizer = -1, .precision = -1};
    pp_search_result r;
    pp_search_status st = pp_search_run(&o, &r, stderr);
    ck_assert_int_eq(st, PP_SEARCH_OK);
    ck_assert_int_eq(r.n, 5); /* three prefetches, two recomputes */
    ck_assert_int_eq(r.over, 3);
    ck_assert_msg(r.nfront >= 1, "empty front");
    const pp_search_cand *best = &r.c[r.front[0]];
    ck_assert_msg(strstr(best->args, "--recompute 's < S - 1'") != NULL, "best: %s", best->args);
    ck_assert_double_eq(best->time, 28);
    ck_assert_uint_eq(best->mem, 1977856);
    pp_search_free(&r);
    remove_dir(dir);
}
END_TEST

/* The library's recompute files compile, lower and pass both proofs over
 * their ranges (S = 2..5, B = 1, S, 2S+1, every K and P); their plan
 * memory never grows as K recomputes more stages; a K outside 0..S is
 * refused by its require line. */
START_TEST(library_files_over_their_range)
{
    char *rc = library("1f1b-recompute.pp", ""), *bubble = library("1f1b-bubble-recompute.pp", "");
    for (int S = 2; S <= 5; S++) {
        int Bs[3] = {1, S, 2 * S + 1};
        for (int bi = 0; bi < 3; bi++) {
            uint64_t prev = UINT64_MAX;
            for (int k = 0; k <= S; k++) {
                pp_define defs[3] = {{"S", S}, {"B", Bs[bi]}, {"K", k}};
                pp_compiled c;
                pp_compile_opts o = pp_compile_defaults();
                o.path = "1f1b-recompute.pp";
                o.text = rc;
                o.len = strlen(rc);
                o.defs = defs;
                o.ndefs = 3;
                o.capture = 1;
                pp_compile(&o, &c);
                ck_assert_msg(c.status == PP_COMPILE_OK, "S=%d B=%d K=%d:\n%s", S, Bs[bi], k,
                              c.msgs);
                uint64_t peak = 0;
                for (int w = 0; w < S; w++)
                    peak = c.rep.w[w].mem_bytes > peak ? c.rep.w[w].mem_bytes : peak;
                ck_assert_msg(peak <= prev, "S=%d B=%d: K=%d needs %llu bytes, K=%d %llu", S,
                              Bs[bi], k, (unsigned long long)peak, k - 1, (unsigned long long)prev);
                prev = peak;
                pp_compiled_free(&c);
                defs[2].name = "P"; /* the bubble file's P over the same range */
                o.path = "1f1b-bubble-recompute.pp";
                o.text = bubble;
                o.len = strlen(bubble);
                pp_compile(&o, &c);
                ck_assert_msg(c.status == PP_COMPILE_OK, "bubble S=%d B=%d P=%d:\n%s", S, Bs[bi], k,
                              c.msgs);
                pp_compiled_free(&c);
            }
        }
    }
    pp_compiled c;
    pp_compile_opts o = pp_compile_defaults();
    pp_define bad[1] = {{"K", 5}};
    o.path = "1f1b-recompute.pp";
    o.text = rc;
    o.len = strlen(rc);
    o.defs = bad;
    o.ndefs = 1;
    o.capture = 1;
    pp_compile(&o, &c);
    ck_assert_msg(c.status == PP_COMPILE_ERRORS && strstr(c.msgs, "requirement failed: K >= 0 && K "
                                                                  "<= S (K counts stages"),
                  "%s", c.msgs);
    pp_compiled_free(&c);
    free(rc);
    free(bubble);
}
END_TEST

Suite *recompute_suite(void)
{
    Suite *s = suite_create("recompute");
    TCase *tc = tcase_create("compile");
    tcase_add_test(tc, statement_errors);
    tcase_add_test(tc, job_table);
    tcase_add_test(tc, sim_hand_worked);
    tcase_add_test(tc, greedy_releases_r_with_the_gradient);
    tcase_add_test(tc, memory_and_lowering);
    tcase_add_test(tc, broken_plans_refused);
    tcase_add_test(tc, torch_csv_refuses);
    tcase_add_test(tc, search_finds_recompute);
    tcase_add_test(tc, library_files_over_their_range);
    suite_add_tcase(s, tc);
    return s;
}

/* ---- under mpirun ------------------------------------------------------------ */

/* The first `n` numbers after `key` in text. */
static void numbers_after(const char *text, const char *key, unsigned long long *v, int n)
{
    const char *p = strstr(text, key);
    ck_assert_msg(p != NULL, "no '%s' in:\n%s", key, text);
    p += strlen(key);
    for (int i = 0; i < n; i++) {
        char *e;
        v[i] = strtoull(p, &e, 10);
        ck_assert_msg(e != p, "'%s': fewer than %d numbers in:\n%s", key, n, text);
        p = e + 1;
    }
}

/* A library schedule (name under schedules/) with `stmt` appended, and the
 * file as it is, both with `args`, each trained 3 steps on `np` cpu ranks:
 * the same weights bit for bit, ppvm allocating exactly the report's plan
 * memory, and less of it on some rank. */
static void same_weights(const char *name, const char *stmt, const char *args, int np)
{
    char *dir = temp_dir(), cmd[8192], *out[2], *json;
    snprintf(cmd, sizeof cmd, "{ cat %s/schedules/%s; printf '\\n%%s\\n' '%s'; } > %s/rc.pp",
             PP_ROOT, name, stmt, dir);
    free(run_expect(cmd, 0));
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s/bin/ppc %s%s%s %s -o %s/p%d -q", PP_ROOT, k ? PP_ROOT : dir,
                 k ? "/schedules/" : "/", k ? name : "rc.pp", args, dir, k);
        free(run_expect(cmd, 0));
        snprintf(cmd, sizeof cmd, "--backend cpu %s/p%d --steps 3 --save %s/w%d", dir, k, dir, k);
        out[k] = mpi_ok(np, cmd);
    }
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w0 %s/w1 --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    char *cmp = run_expect(cmd, 0);
    ck_assert_msg(strstr(cmp, "max |diff| 0 (within tolerance)") && !strstr(cmp, "beyond"),
                  "%s %s: weights differ with '%s':\n%s", name, args, stmt, cmp);
    free(cmp);
    unsigned long long vm[2][64], rep[64];
    ck_assert(np <= 64);
    snprintf(cmd, sizeof cmd, "cat %s/p0/report.json", dir);
    json = run_expect(cmd, 0);
    ck_assert_msg(strstr(json, "\"recomputes\": 0,") == NULL, "%s: nothing recomputed", name);
    numbers_after(json, "\"mem_bytes\": [", rep, np);
    numbers_after(out[0], "bytes per rank:", vm[0], np);
    numbers_after(out[1], "bytes per rank:", vm[1], np);
    int less = 0;
    for (int r = 0; r < np; r++) {
        ck_assert_msg(vm[0][r] == rep[r], "%s rank %d: ppvm allocates %llu, the report says %llu",
                      name, r, vm[0][r], rep[r]);
        less |= vm[0][r] < vm[1][r];
    }
    ck_assert_msg(less, "%s: recompute saved no memory on any rank", name);
    free(json);
    free(out[0]);
    free(out[1]);
    remove_dir(dir);
}

START_TEST(onef1b_mlp) { same_weights("1f1b.pp", "recompute", "", 4); }
END_TEST
/* GPT, selected stages, bf16 */
START_TEST(onef1b_gpt_bf16)
{
    same_weights("1f1b-gpt.pp", "recompute when s < 2", "--precision bf16 -D B=6", 4);
}
END_TEST
/* split backward: R before BackwardInput, W reads the rebuilt stash */
START_TEST(zb_h1) { same_weights("zb-h1.pp", "recompute", "-D S=4 -D B=8", 4); }
END_TEST
START_TEST(interleaved) { same_weights("interleaved-1f1b.pp", "recompute", "-D W=4 -D B=8", 4); }
END_TEST
START_TEST(zb_v_bf16)
{
    same_weights("zb-v.pp", "recompute when b % 2 == 0", "-D W=4 -D B=8 --precision bf16", 4);
}
END_TEST
START_TEST(dualpipev) { same_weights("dualpipev.pp", "recompute", "-D W=4 -D B=8", 4); }
END_TEST
START_TEST(gpipe) { same_weights("gpipe.pp", "recompute", "-D S=4 -D B=8", 4); }
END_TEST
/* fetched weights: R fetches (or keeps) them as F and B do */
START_TEST(fsdp_keep) { same_weights("fsdp.pp", "recompute", "-D W=4 -D B=4 --keep-weights", 4); }
END_TEST

/* The library's recompute files train to the reference's weights, bit for
 * bit (their arithmetic is a pipeline's: each microbatch's F, R and B on
 * one rank, gradients summed in microbatch order). */
static void library_trains(const char *name, const char *defs)
{
    char *dir = compile_plan(name, defs), cmd[4096];
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --save %s/w", dir, dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/plan --steps 3 --save %s/ref --quiet",
             PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    char *cmp = run_expect(cmd, 0);
    ck_assert_msg(strstr(cmp, "max |diff| 0 (within tolerance)") && !strstr(cmp, "beyond"),
                  "%s %s:\n%s", name, defs, cmp);
    free(cmp);
    remove_dir(dir);
}

START_TEST(library_files_train)
{
    library_trains("1f1b-recompute.pp", "-D K=4");
    library_trains("1f1b-bubble-recompute.pp", "-D B=6 --precision bf16");
}
END_TEST

#define RECOMPUTE_E2E_TESTS(X)                                                                     \
    X(onef1b_mlp, 4)                                                                               \
    X(onef1b_gpt_bf16, 4)                                                                          \
    X(zb_h1, 4)                                                                                    \
    X(interleaved, 4)                                                                              \
    X(zb_v_bf16, 4) X(dualpipev, 4) X(gpipe, 4) X(fsdp_keep, 4) X(library_files_train, 4)
PP_JOB_SUITE(recompute_e2e, RECOMPUTE_E2E_TESTS)
