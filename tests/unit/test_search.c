/* test_search.c - the search suite: `ppc --search` (compiler/search.c).
 *
 * Known optima: under a memory cap GPipe is over it and 1F1B on the front;
 * with unit costs and a split backward (1F1B's whole backward costing B + W)
 * ZB-H1 beats 1F1B, by the closed forms of both. On the real library the
 * front's first row is the fastest of all candidates, measured by running
 * every candidate's command line through bin/ppc and reading its
 * report.json, and every row the command prints reproduces its time and
 * memory the same way. The search line's semantics (ranges, lists, the
 * language's expressions, exact division, refusals counted, duplicates
 * merged) and every error of the command line and of a library (the
 * line's syntax and names as the language reports them, and the search's
 * own limits) have a test. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/parse.h"
#include "../../compiler/schedule.h"
#include "../../compiler/search.h"
#include "suites.h"
#include "testutil.h"

#define LIB PP_ROOT "/schedules"

/* ---- helpers --------------------------------------------------------------- */

/* Copies schedules/<name> into dir, with `extra` appended (NULL: none). */
static void copy_schedule(const char *dir, const char *name, const char *extra)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp %s/%s %s/%s", LIB, name, dir, name);
    free(run_expect(cmd, 0));
    if (extra) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "a");
        ck_assert_ptr_nonnull(f);
        fputs(extra, f);
        fclose(f);
    }
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static pp_search_opts opts(const char *lib, long long W, long long B)
{
    return (pp_search_opts){.library = lib, .W = W, .B = B, .optimizer = -1, .precision = -1};
}

/* Runs the search in process, asserting its status. */
static void search(const pp_search_opts *o, pp_search_result *r, pp_search_status want)
{
    char *msgs = NULL;
    size_t len = 0;
    FILE *err = open_memstream(&msgs, &len);
    ck_assert_ptr_nonnull(err);
    pp_search_status st = pp_search_run(o, r, err);
    fclose(err);
    ck_assert_msg(st == want, "search of %s W=%lld B=%lld: status %d, expected %d; it said:\n%s",
                  o->library, o->W, o->B, st, want, msgs);
    free(msgs);
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* The number after "key": in report.json. */
static double json_number(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    ck_assert_msg(p != NULL, "no %s in report.json", key);
    return strtod(p + strlen(pat), NULL);
}

/* The largest number of the array "key": [...] in report.json. */
static double json_max(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(json, pat);
    ck_assert_msg(p != NULL, "no %s array in report.json", key);
    p += strlen(pat);
    double m = 0;
    for (char *end; *p && *p != ']'; p = end + (*end == ',')) {
        double v = strtod(p, &end);
        ck_assert_msg(end != p, "bad %s array in report.json", key);
        m = v > m ? v : m;
        while (*end == ' ')
            end++;
    }
    return m;
}

/* Runs `bin/ppc FILE ARGS -o <tmp> -q` (the candidate's own command) and
 * reads back the step time and the largest plan memory its report gives. */
static void run_candidate(const char *file, const char *args, double *time, double *mem)
{
    char *dir = temp_dir(), cmd[4096], path[600];
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s %s -o %s/plan -q --no-pictures", PP_ROOT, file, args,
             dir);
    free(run_expect(cmd, 0));
    snprintf(path, sizeof path, "%s/plan/report.json", dir);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s wrote no report.json", cmd);
    char *json = NULL;
    size_t n = 0;
    ck_assert(getdelim(&json, &n, '\0', f) > 0);
    fclose(f);
    *time = json_number(json, "step");
    *mem = json_max(json, "mem_bytes");
    free(json);
    remove_dir(dir);
}

static int same_time(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1, fabs(b)); }

/* ---- known optima ------------------------------------------------------------ */

/* GPipe holds all B microbatches' stashes, 1F1B at most S - w: with the
 * limit at 1F1B's smallest plan, every GPipe candidate is over it and 1F1B
 * leads the front. */
START_TEST(test_memory_cap_1f1b_beats_gpipe)
{
    char *dir = temp_dir();
    copy_schedule(dir, "gpipe.pp", NULL);
    copy_schedule(dir, "1f1b.pp", NULL);
    pp_search_opts o = opts(dir, 4, 8);
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    uint64_t gpipe = UINT64_MAX, onef = UINT64_MAX;
    for (int i = 0; i < r.n; i++) {
        ck_assert_int_eq(r.c[i].state, PP_CAND_OK);
        uint64_t *m = ends_with(r.c[i].file, "/gpipe.pp") ? &gpipe : &onef;
        *m = r.c[i].mem < *m ? r.c[i].mem : *m;
    }
    ck_assert_msg(onef < gpipe, "1F1B's smallest plan (%llu B) should be under GPipe's (%llu B)",
                  (unsigned long long)onef, (unsigned long long)gpipe);
    pp_search_free(&r);

    o.mem_limit = onef;
    search(&o, &r, PP_SEARCH_OK);
    int over = 0;
    for (int i = 0; i < r.n; i++)
        if (ends_with(r.c[i].file, "/gpipe.pp")) {
            ck_assert_msg(r.c[i].state == PP_CAND_OVER, "gpipe.pp %s: state %d, expected over",
                          r.c[i].args, r.c[i].state);
            over++;
        }
    ck_assert_int_gt(over, 0);
    ck_assert_int_ge(r.over, over); /* 1F1B's larger prefetches too */
    ck_assert_int_ge(r.nfront, 1);
    const pp_search_cand *best = &r.c[r.front[0]];
    ck_assert_msg(ends_with(best->file, "/1f1b.pp"), "front starts with %s", best->file);
    ck_assert_uint_le(best->mem, onef);
    ck_assert(same_time(best->time, 22)); /* (B + S - 1) * (F + B) */
    ck_assert_msg(strstr(best->args, "--mem-limit ") != NULL, "%s", best->args);
    pp_search_free(&r);
    remove_dir(dir);
}
END_TEST

/* 1F1B's backward is ZB-H1's B and W together (cost B = 2 against 1 + 1):
 * 1F1B takes (B + S - 1)(F + B) = 11 * 3 = 33, ZB-H1 3B + (S - 1)(F + B - W)
 * = 24 + 3 = 27, and ZB-H1 leads the front. */
START_TEST(test_split_backward_zb_h1_beats_1f1b)
{
    char *dir = temp_dir();
    copy_schedule(dir, "1f1b.pp", "cost B = 2   # the whole backward: ZB-H1's B + W\n");
    copy_schedule(dir, "zb-h1.pp", NULL);
    pp_search_opts o = opts(dir, 4, 8);
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    double zb = INFINITY, onef = INFINITY;
    for (int i = 0; i < r.n; i++) {
        ck_assert_int_eq(r.c[i].state, PP_CAND_OK);
        double *t = ends_with(r.c[i].file, "/zb-h1.pp") ? &zb : &onef;
        *t = fmin(*t, r.c[i].time);
    }
    ck_assert_msg(same_time(onef, 33) && same_time(zb, 27),
                  "1F1B %g (expected 33), ZB-H1 %g "
                  "(expected 27)",
                  onef, zb);
    ck_assert(ends_with(r.c[r.front[0]].file, "/zb-h1.pp"));
    ck_assert(same_time(r.c[r.front[0]].time, 27));
    pp_search_free(&r);
    remove_dir(dir);
}
END_TEST

/* The front: none of its rows is beaten in both time and memory by any
 * candidate, every other candidate is beaten or equalled by a row, and the
 * rows go fastest first. */
static void check_pareto(const pp_search_result *r)
{
    for (int f = 0; f < r->nfront; f++) {
        const pp_search_cand *x = &r->c[r->front[f]];
        ck_assert_int_eq(x->front, f + 1);
        if (f)
            ck_assert(r->c[r->front[f - 1]].time < x->time && r->c[r->front[f - 1]].mem > x->mem);
        for (int i = 0; i < r->n; i++) {
            const pp_search_cand *y = &r->c[i];
            if (y->state != PP_CAND_OK)
                continue;
            ck_assert_msg(
                !(y->time <= x->time && y->mem <= x->mem && (y->time < x->time || y->mem < x->mem)),
                "%s %s beats front row %d", y->file, y->args, f + 1);
        }
    }
    for (int i = 0; i < r->n; i++) {
        const pp_search_cand *y = &r->c[i];
        if (y->state != PP_CAND_OK || y->front)
            continue;
        int beaten = 0;
        for (int f = 0; f < r->nfront; f++)
            beaten |= r->c[r->front[f]].time <= y->time && r->c[r->front[f]].mem <= y->mem;
        ck_assert_msg(beaten, "%s %s is on no row's wrong side", y->file, y->args);
    }
}

/* The real library, no cap: every compiled candidate, compiled again by
 * its own command line through bin/ppc, gives the search's time and
 * memory, and the front's first row is the fastest of them. */
START_TEST(test_front_first_is_fastest)
{
    pp_search_opts o = opts(LIB, 4, 8);
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_gt(r.nfront, 0);
    check_pareto(&r);
    double fastest = INFINITY;
    int checked = 0;
    for (int i = 0; i < r.n; i++) {
        const pp_search_cand *k = &r.c[i];
        if (k->state != PP_CAND_OK)
            continue;
        double t, m;
        run_candidate(k->file, k->args, &t, &m);
        ck_assert_msg(same_time(t, k->time) && m == (double)k->mem,
                      "%s %s: the search says %g and %llu bytes, ppc %g and %.0f", k->file, k->args,
                      k->time, (unsigned long long)k->mem, t, m);
        fastest = fmin(fastest, t);
        checked++;
    }
    ck_assert_int_eq(checked, r.ok);
    ck_assert(same_time(r.c[r.front[0]].time, fastest));
    pp_search_free(&r);
}
END_TEST

/* ---- the command line ------------------------------------------------------- */

/* Every row ppc --search prints: its command, run as printed (ppc and -o
 * swapped for bin/ppc and a temp dir), gives the row's time and memory. */
static int check_printed_rows(const char *flags)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && bin/ppc --search -D W=4 -D B=8 %s", PP_ROOT, flags);
    char *out = run_expect(cmd, 0), *dirs[64];
    ck_assert_msg(strstr(out, "rank     step time   bubble    memory (B)      memory  command"),
                  "%s", out);
    int rows = 0, ndirs = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        int rank;
        double time, bubble;
        unsigned long long mem;
        int at = 0;
        if (sscanf(line, "%d %lf %lf%% %llu %*s %*s bin/ppc %n", &rank, &time, &bubble, &mem,
                   &at) != 4 ||
            !at)
            continue;
        ck_assert_int_eq(rank, ++rows);
        char *o = strstr(line + at, " -o out/");
        ck_assert_msg(o != NULL, "row without -o: %s", line);
        /* every row writes a directory of its own */
        ck_assert_msg(ndirs < 64, "more rows than the test keeps");
        dirs[ndirs] = strdup(o + 4);
        for (int d = 0; d < ndirs; d++)
            ck_assert_msg(strcmp(dirs[d], dirs[ndirs]), "rows %d and %d both write %s", d + 1, rows,
                          dirs[d]);
        ndirs++;
        *o = '\0';
        char *file = line + at, *sp = strchr(file, ' ');
        ck_assert_ptr_nonnull(sp);
        *sp = '\0';
        double t, m;
        run_candidate(file, sp + 1, &t, &m);
        ck_assert_msg(fabs(t - time) <= 1e-5 * fmax(1, time) && m == (double)mem,
                      "row %d (%s %s): printed %g and %llu bytes, ppc gives %g and %.0f", rank,
                      file, sp + 1, time, mem, t, m);
    }
    free(out);
    for (int d = 0; d < ndirs; d++)
        free(dirs[d]);
    return rows;
}

START_TEST(test_printed_commands_reproduce)
{
    ck_assert_int_gt(check_printed_rows(""), 1);
    /* measured-style costs, a limit that leaves the smaller plans, top 3 */
    char *dir = temp_dir(), flags[1024];
    write_file(dir, "c.json", "{\"F\": 1.5, \"B\": 2.5, \"latency\": 0.25, \"bandwidth\": 1e6}\n");
    snprintf(flags, sizeof flags, "--costs %s/c.json --mem-limit 2000000 --top 3", dir);
    int rows = check_printed_rows(flags);
    ck_assert_int_ge(rows, 1);
    ck_assert_int_le(rows, 3);
    /* --optimizer and --precision reach every candidate and its command */
    ck_assert_int_eq(check_printed_rows("--optimizer adamw --precision bf16 --top 2"), 2);
    remove_dir(dir);
}
END_TEST

/* Offload under a cap (issue 26): 1F1B at batch 128 (stashes dominate)
 * is over 2400000 bytes as written; with a priced host link (1e6 bytes per
 * time unit) offloading every stage's stash but the last's fits and beats
 * recomputing them (the copies overlap compute, here all of them, as the
 * plan issues each reload a job ahead; a re-run forward does not), and
 * offloading every stash is slower than both. Each offload
 * row's numbers are what its command gives, and its printed command
 * reproduces it. Free copies (no host bandwidth) bring no offload row, nor
 * does a file with its own `offload`. */
START_TEST(test_offload_rows_under_cap)
{
    char *dir = temp_dir(), cmd[2048], costs[600];
    snprintf(cmd, sizeof cmd, "sed 's/batch   = 16/batch   = 128/' %s/1f1b.pp > %s/1f1b.pp", LIB,
             dir);
    free(run_expect(cmd, 0));
    write_file(dir, "c.json", "{\"host_bandwidth\": 1e6}\n");
    snprintf(costs, sizeof costs, "%s/c.json", dir);
    pp_search_opts o = opts(dir, 4, 8);
    o.costs = costs;
    o.mem_limit = 2400000;
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    /* three prefetches over the cap, two recomputes, two offloads */
    ck_assert_int_eq(r.n, 7);
    ck_assert_int_eq(r.over, 3);
    ck_assert_int_gt(r.nfront, 0);
    const pp_search_cand *best = &r.c[r.front[0]], *rec = NULL, *all = NULL;
    ck_assert_msg(strstr(best->args, "--offload 's < S - 1' --mem-limit 2400000"), "best: %s",
                  best->args);
    for (int i = 0; i < r.n; i++) {
        if (strstr(r.c[i].args, "--recompute 's < S - 1'"))
            rec = &r.c[i];
        if (strstr(r.c[i].args, "--offload 1 "))
            all = &r.c[i];
    }
    ck_assert_ptr_nonnull(rec);
    ck_assert_ptr_nonnull(all);
    ck_assert_msg(best->time >= 22 && best->time < rec->time && all->time > rec->time,
                  "offload s < S - 1: %g, recompute s < S - 1: %g, offload 1: %g (plain 22)",
                  best->time, rec->time, all->time);
    ck_assert_uint_le(best->mem, o.mem_limit);
    for (const pp_search_cand *k = best; k; k = k == best ? all : NULL) {
        double t, m;
        run_candidate(k->file, k->args, &t, &m);
        ck_assert_msg(same_time(t, k->time) && m == (double)k->mem,
                      "%s %s: the search says %g and %llu bytes, ppc %g and %.0f", k->file, k->args,
                      k->time, (unsigned long long)k->mem, t, m);
    }
    pp_search_free(&r);
    /* the printed rows: the offload row leads, its command reproduces */
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc --search -D W=4 -D B=8 --library %s --costs %s "
             "--mem-limit 2400000",
             PP_ROOT, dir, costs);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "   1            22 ") && strstr(out, "--offload 's < S - 1' --mem-limit "
                                                               "2400000 -o out/1f1b\n"),
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "--library %s --costs %s --mem-limit 2400000", dir, costs);
    ck_assert_int_ge(check_printed_rows(cmd), 1);

    /* free copies: no offload row */
    o.costs = NULL;
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_eq(r.n, 5);
    for (int i = 0; i < r.n; i++)
        ck_assert_msg(!strstr(r.c[i].args, "--offload"), "%s", r.c[i].args);
    pp_search_free(&r);
    /* a file with its own offload: tried as it is */
    o.costs = costs;
    snprintf(cmd, sizeof cmd, "printf 'offload when s == 0\\n' >> %s/1f1b.pp", dir);
    free(run_expect(cmd, 0));
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_eq(r.n, 3);
    for (int i = 0; i < r.n; i++)
        ck_assert_msg(!strstr(r.c[i].args, "--offload") && !strstr(r.c[i].args, "--recompute"),
                      "%s", r.c[i].args);
    pp_search_free(&r);
    remove_dir(dir);
}
END_TEST

/* Rows within float noise of each other are one time: the larger leaves
 * the front (issue 29: a row as fast as another up to the last digits but
 * larger was listed); a real difference keeps both; equals: the first. */
START_TEST(test_front_tolerance)
{
    pp_search_cand c[5] = {
        {.state = PP_CAND_OK, .time = 10.0, .mem = 200},               /* beaten by 1 */
        {.state = PP_CAND_OK, .time = 10.0 * (1 + 1e-12), .mem = 100}, /* front */
        {.state = PP_CAND_OK, .time = 20.0, .mem = 50},                /* front */
        {.state = PP_CAND_OK, .time = 9.0, .mem = 300},                /* front: faster */
        {.state = PP_CAND_OK, .time = 20.0, .mem = 50},                /* equal to 2: off */
    };
    pp_search_result r = {.c = c, .n = 5};
    ck_assert_int_eq(pp_search_front(&r), 0);
    ck_assert_int_eq(r.nfront, 3);
    ck_assert_int_eq(r.front[0], 3);
    ck_assert_int_eq(r.front[1], 1);
    ck_assert_int_eq(r.front[2], 2);
    ck_assert_msg(c[0].front == 0 && c[4].front == 0,
                  "the larger row within float noise (front %d) or the later equal (front %d) "
                  "stayed on the front",
                  c[0].front, c[4].front);
    /* beyond the tolerance the faster row stands beside the smaller */
    c[1].time = 10.0 * (1 + 1e-4);
    free(r.front);
    ck_assert_int_eq(pp_search_front(&r), 0);
    ck_assert_int_eq(r.nfront, 4);
    free(r.front);
}
END_TEST

/* Costs measured with ranks sharing cores and no "cores": the table says
 * its times are known to miss; with "cores" that they still may (by up to
 * 30%); with a core per rank nothing. */
START_TEST(test_known_miss_note)
{
    char *dir = temp_dir(), cmd[1024];
    static const char *const files[] = {
        "{\"F\": 1.5, \"B\": 2.5, \"ranks_per_core\": 2, \"backend\": \"cpu\"}",
        "{\"F\": 1.5, \"B\": 2.5, \"ranks_per_core\": 2, \"cores\": 2}",
        "{\"F\": 1.5, \"B\": 2.5, \"ranks_per_core\": 1}",
    };
    for (int i = 0; i < 3; i++) {
        write_file(dir, "c.json", files[i]);
        snprintf(cmd, sizeof cmd, "%s/bin/ppc --search -D W=4 -D B=8 --costs %s/c.json --top 1",
                 PP_ROOT, dir);
        char *out = run_expect(cmd, 0);
        static const char *const want[] = {
            "note: --costs was measured with 2 ranks per core (backend cpu) and gives no "
            "\"cores\"",
            "note: --costs was measured with 2 ranks per core: the simulation shares \"cores\" "
            "among the jobs and resumes waiting ranks \"wake\" late, and has still missed such "
            "steps by up to 30%",
            NULL};
        const char *note = want[i] ? strstr(out, want[i]) : strstr(out, "note:");
        ck_assert_msg(want[i] ? note != NULL : note == NULL, "costs %s: the note %s:\n%s",
                      files[i], want[i] ? want[i] : "(none)", out);
        free(out);
    }
    remove_dir(dir);
}
END_TEST

/* DDP's placement (compute = b), which needs W = B: with 4 workers for 8
 * microbatches, job (0, 4) lands outside them. */
#define DP_FILE "param S = 4\nparam B = 8\nparam W = B\ncompute(s,b,d) = b\n# search: S=W\n"

/* The table's layout and the counts line, on a library of one file. */
START_TEST(test_output_layout)
{
    char *dir = temp_dir(), cmd[1024];
    copy_schedule(dir, "1f1b.pp", NULL);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc --search -D W=4 -D B=8 --library %s", PP_ROOT, dir);
    char *out = run_expect(cmd, 0);
    char want[1024];
    snprintf(want, sizeof want,
             "   1            22    27.3%%        943424   921.3 KiB  %s/bin/ppc %s/1f1b.pp -D S=4 "
             "-D B=8 -D W=4 -o out/1f1b\n",
             PP_ROOT, dir);
    ck_assert_msg(strstr(out, want), "expected the row\n%sin\n%s", want, out);
    /* three prefetches and two recomputes (--recompute 1, 's < S - 1'), each
     * on 4 workers, on 2 of 2 tensor ranks and on 1 of 4 (W counts ranks;
     * S = W makes those two stages and one: another model) */
    ck_assert_msg(strstr(out, "15 candidates from 1 files in "), "%s", out);
    ck_assert_msg(strstr(out, "5 compiled (1 on the front), 0 refused, 0 over --mem-limit, "
                              "10 another model: give --layers L to compare them\n"),
                  "%s", out);
    ck_assert_msg(strstr(out, "model mlp context 8 embed 16 ffn 256 batch 16, 4 stages of 1 "
                              "block, sgd, fp32"),
                  "%s", out);
    free(out);

    /* --all: every candidate, a refused one with its compile's first error */
    write_file(dir, "ddp.pp", DP_FILE);
    /* (argv[0] as typed: ../ppc through a link in the library's parent) */
    snprintf(cmd, sizeof cmd,
             "ln -s %s/bin/ppc %s/ppc && cd %s && mkdir lib && cd lib && "
             "mv ../1f1b.pp ../ddp.pp . && ../ppc --search -D W=4 -D B=8 --library . --all",
             PP_ROOT, dir, dir);
    out = run_expect(cmd, 0);
    static const char *const lines[] = {
        "state     front     step time    memory (B)  command\n",
        "compiled      1            22        943424  ../ppc ./1f1b.pp -D S=4 -D B=8 -D W=4\n",
        "compiled      -            22        943424  ../ppc ./1f1b.pp -D S=4 -D B=8 -D W=4 "
        "--prefetch 2\n",
        "refused       -             -             -  ../ppc ./ddp.pp -D S=4 -D B=8 -D W=4   # "
        "./ddp.pp:4:18: error: compute = 4 at (s=0, b=4, d=F) is outside the workers [0, W=4)\n",
        "compiled      -            28        943424  ../ppc ./1f1b.pp -D S=4 -D B=8 -D W=4 "
        "--recompute 's < S - 1'\n",
        "model         -             9        655680  ../ppc ./1f1b.pp -D S=2 -D B=8 -D W=2 "
        "--tensor 2   # mlp context 8 embed 16 ffn 256 batch 16, 2 stages of 1 block, sgd, fp32\n",
        "18 candidates from 2 files in ",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(out, lines[i]), "expected\n%sin\n%s", lines[i], out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* --json (with --all): jansson reads it, and it holds what the search in
 * process finds, row for row, candidate for candidate. */
START_TEST(test_json_output)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/bin/ppc --search -D W=4 -D B=8 --library %s --json --all",
             PP_ROOT, LIB);
    char *out = run_expect(cmd, 0);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    ck_assert_msg(j != NULL, "not JSON (%s at %d:%d):\n%s", e.text, e.line, e.column, out);
    pp_search_opts o = opts(LIB, 4, 8);
    o.tensor = -1; /* the command line's default: every divisor of W */
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    json_t *front = json_object_get(j, "front"), *all = json_object_get(j, "candidates");
    ck_assert_int_eq((int)json_array_size(front), r.nfront);
    ck_assert_int_eq((int)json_array_size(all), r.n);
    ck_assert_int_eq((int)json_integer_value(json_object_get(j, "compiled")), r.ok);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), r.model);
    for (int i = 0; i < r.nfront; i++) {
        const pp_search_cand *k = &r.c[r.front[i]];
        json_t *x = json_array_get(front, (size_t)i);
        ck_assert_int_eq((int)json_integer_value(json_object_get(x, "front")), i + 1);
        ck_assert(same_time(json_number_value(json_object_get(x, "time")), k->time));
        ck_assert(json_number_value(json_object_get(x, "mem_bytes")) == (double)k->mem);
        ck_assert_str_eq(json_string_value(json_object_get(x, "args")), k->args);
        ck_assert(strstr(json_string_value(json_object_get(x, "command")), k->args));
    }
    for (int i = 0; i < r.n; i++) {
        json_t *x = json_array_get(all, (size_t)i);
        ck_assert_str_eq(json_string_value(json_object_get(x, "file")), r.c[i].file);
        ck_assert_int_eq(json_is_null(json_object_get(x, "why")), r.c[i].state != PP_CAND_REFUSED);
    }
    pp_search_free(&r);
    json_decref(j);
    free(out);
}
END_TEST

/* ---- the search line ---------------------------------------------------------- */

#define TINY_HEAD                                                                                  \
    "param S = 4\nparam B = 8\nparam W = S\n"                                                      \
    "compute(s,b,d) = s\nweights(s,b,d) = s\npriority(s,b,d) = d * B + b\n"

/* A value the file refuses (S=5 on 4 workers puts a job outside them) is
 * counted, not shown; W/3 with W = 4 is skipped, not a candidate; S=W and
 * S=4 resolve alike and are one candidate. */
START_TEST(test_search_line_values)
{
    char *dir = temp_dir();
    write_file(dir, "a.pp", TINY_HEAD "# search: S=W,4,W/3,5,W*2-4  # and a comment\n");
    pp_search_opts o = opts(dir, 4, 8);
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    /* S=4 with prefetch 1, 0, 2 and two recomputes; S=5 refused once; the
     * rest duplicates */
    ck_assert_int_eq(r.n, 6);
    ck_assert_int_eq(r.ok, 5);
    ck_assert_int_eq(r.refused, 1);
    ck_assert_str_eq(r.c[0].args, "-D S=4 -D B=8 -D W=4");
    ck_assert_str_eq(r.c[1].args, "-D S=4 -D B=8 -D W=4 --prefetch 0");
    ck_assert_str_eq(r.c[3].args, "-D S=4 -D B=8 -D W=4 --recompute 1");
    ck_assert_str_eq(r.c[4].args, "-D S=4 -D B=8 -D W=4 --recompute 's < S - 1'");
    ck_assert_str_eq(r.c[5].args, "-D S=5 -D B=8 -D W=4");
    pp_search_free(&r);

    /* names of the line that are no param of the file only feed others;
     * ranges use earlier names */
    write_file(dir, "a.pp", TINY_HEAD "# search: K=1..2 S=W*K/K G=K..2\n");
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_eq(r.n, 5); /* every combination resolves to S=4 */
    pp_search_free(&r);

    /* the same -D values from several combinations are one candidate, also
     * when it is refused before its params resolve */
    write_file(dir, "a.pp", TINY_HEAD "# search: K=1..3 S=5\n");
    search(&o, &r, PP_SEARCH_NONE);
    ck_assert_int_eq(r.n, 1);
    ck_assert_int_eq(r.refused, 1);
    pp_search_free(&r);

    /* a file that idles workers is refused (S=2 on 4 workers) */
    write_file(dir, "a.pp", TINY_HEAD "# search: S=2\n");
    search(&o, &r, PP_SEARCH_NONE);
    ck_assert_int_eq(r.refused, 1);
    pp_search_free(&r);

    /* The values are the language's expressions (parser.y, eval.c), with
     * the search's one rule: a division that is not exact, or by zero,
     * drops the value instead of flooring it. K=-2 gives S=2 (refused),
     * K=-1 S=4, K=0 (a division by zero) and K=-3 (-4/-3) nothing; '//'
     * ends the line as in a file. */
    write_file(dir, "a.pp", TINY_HEAD "# search: K=-2..0,-3 S=-W/K  // S: 2, 4, -, -\n");
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_eq(r.n, 6); /* S=4: three prefetches, two recomputes */
    ck_assert_int_eq(r.ok, 5);
    ck_assert_str_eq(r.c[0].args, "-D S=2 -D B=8 -D W=4");
    ck_assert_str_eq(r.c[1].args, "-D S=4 -D B=8 -D W=4");
    pp_search_free(&r);

    /* min, max, ?:, comparisons and %: every value is S=4 (the flooring
     * (W+1)/2*2-1 = 3 would be a second candidate; inexact, it is none) */
    write_file(dir, "a.pp",
               TINY_HEAD
               "# search: S=max(W, 2*W - 4), W % 3 == 1 ? W : 0, (W+1)/2*2-1, min(abs(-W), 8)\n");
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_eq(r.n, 5);
    ck_assert_int_eq(r.ok, 5);
    ck_assert_str_eq(r.c[0].args, "-D S=4 -D B=8 -D W=4");
    pp_search_free(&r);
    remove_dir(dir);
}
END_TEST

/* The entry points the search uses: pp_parse_search parses a line of a
 * file in place (locations are the file's), and the names resolve and
 * evaluate as a param's default does, with exact division. */
START_TEST(test_search_line_api)
{
    static const char src[] = "param S = 1\n# search: K=1-W..W, 7 S=W/K  # S too\n";
    char *msgs = NULL;
    size_t mlen = 0;
    FILE *m = open_memstream(&msgs, &mlen);
    ck_assert_ptr_nonnull(m);
    pp_diag d;
    diag_init(&d, "t.pp", src, sizeof src - 1, m);
    size_t off = (size_t)(strstr(src, "search:") - src) + 7,
           end = (size_t)(strrchr(src, '\n') - src);
    pp_assign *a = pp_parse_search(&d, off, end - off, 2, (int)(off - 12) + 1);
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(a->name, "K");
    ck_assert_int_eq(a->name_loc.first_line, 2);
    ck_assert_int_eq(a->name_loc.first_column, 11);
    ck_assert_ptr_nonnull(a->values->hi); /* 1-W..W */
    ck_assert_int_eq(a->values->loc.first_column, 13);
    ck_assert_int_eq(a->values->loc.last_column, 18);
    ck_assert_ptr_null(a->values->next->hi); /* 7 */
    ck_assert_ptr_null(a->values->next->next);
    ck_assert_str_eq(a->next->name, "S");
    ck_assert_ptr_null(a->next->next);

    pp_schedule n;
    ck_assert_int_eq(pp_consts_init(&n, &d, 4), 0);
    n.exact_div = 1;
    pp_loc none = {0, 0, 0, 0};
    ck_assert_int_eq(pp_consts_define(&n, "W", none), 0);
    ck_assert_int_eq(pp_consts_define(&n, "B", none), 1);
    ck_assert_int_eq(pp_consts_resolve(&n, a->values->lo, "a search line"), 0);
    ck_assert_int_eq(pp_consts_define(&n, "K", a->name_loc), 2);
    ck_assert_int_eq(pp_consts_resolve(&n, a->next->values->lo, "a search line"), 0);
    pp_env env = {0, 0, 0, 0};
    const pp_expr *where = NULL;
    long long v = 0;
    n.params[0].value = 4;
    ck_assert_int_eq(pp_eval(&n, a->values->lo, &env, &v, &where), EVAL_OK);
    ck_assert_int_eq(v, -3);
    long long want[] = {0, 4, 2, 0, 1, 0}; /* W/K for K = 0..5, 0: not exact */
    for (int k = 0; k <= 5; k++) {
        n.params[2].value = k;
        pp_eval_status st = pp_eval(&n, a->next->values->lo, &env, &v, &where);
        ck_assert_int_eq(st, want[k] ? EVAL_OK : EVAL_INEXACT);
        if (want[k])
            ck_assert_int_eq(v, want[k]);
    }
    /* a second K is the language's redefinition; s its job variable */
    ck_assert_int_eq(pp_consts_define(&n, "K", a->name_loc), -1);
    ck_assert_int_eq(pp_consts_define(&n, "s", a->name_loc), -1);
    pp_schedule_free(&n);
    ast_free_assigns(a);
    fclose(m);
    ck_assert_msg(strstr(msgs, "t.pp:2:11: error: redefinition of 'K'\n") &&
                      strstr(msgs, "t.pp:2:11: error: 's' is a job variable and cannot be "
                                   "redefined\n"),
                  "%s", msgs);
    ck_assert_int_eq(d.errors, 2);
    free(msgs);
}
END_TEST

/* A file without a search line is tried as written and with S=W. */
START_TEST(test_no_search_line)
{
    char *dir = temp_dir();
    write_file(dir, "a.pp", TINY_HEAD);
    pp_search_opts o = opts(dir, 2, 4);
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    /* as written: S=4 on W=2 puts jobs outside the workers (refused);
     * S=W=2 compiles with three prefetches and two recomputes */
    ck_assert_int_eq(r.refused, 1);
    ck_assert_int_eq(r.ok, 5);
    ck_assert_str_eq(r.c[1].args, "-D S=2 -D B=4 -D W=2");
    pp_search_free(&r);

    /* a file that does not parse is one refused candidate, with its error */
    write_file(dir, "b.pp", "param S = \n");
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_eq(r.refused, 2);
    ck_assert_str_eq(r.c[r.n - 1].args, "-D B=4 -D W=2");
    ck_assert_msg(strstr(r.c[r.n - 1].why, "b.pp:1:11: error: syntax error"), "%s",
                  r.c[r.n - 1].why);
    pp_search_free(&r);
    remove_dir(dir);
}
END_TEST

/* Weight fetches get --keep-weights variants; a candidate of another model
 * than most is counted, not compared. */
START_TEST(test_keep_weights_and_models)
{
    char *dir = temp_dir();
    copy_schedule(dir, "fsdp.pp", NULL);
    copy_schedule(dir, "1f1b.pp", NULL);
    copy_schedule(dir, "1f1b-gpt.pp", NULL);
    pp_search_opts o = opts(dir, 4, 4);
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    int keep = 0, gpt = 0;
    for (int i = 0; i < r.n; i++) {
        keep += strstr(r.c[i].args, "--keep-weights") != NULL;
        if (ends_with(r.c[i].file, "/1f1b-gpt.pp")) {
            ck_assert_int_eq(r.c[i].state, PP_CAND_OTHER_MODEL);
            gpt++;
        }
    }
    ck_assert_int_eq(keep, 3); /* fsdp only: 1f1b fetches nothing */
    ck_assert_int_eq(gpt, 5);  /* three prefetches, two recomputes */
    ck_assert_int_eq(r.other_model, 5);
    ck_assert(strstr(r.model, "mlp ") == r.model);
    check_pareto(&r);
    pp_search_free(&r);
    remove_dir(dir);
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

typedef struct {
    const char *args; /* after bin/ppc, in a directory holding lib/ (see below) */
    int status;
    const char *says;
} err_row;

START_TEST(test_errors)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir %s/lib %s/empty %s/bad %s/ddp && cp %s/1f1b.pp %s/lib/", dir,
             dir, dir, dir, LIB, dir);
    free(run_expect(cmd, 0));
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad", dir);
    write_file(bad, "a.pp", TINY_HEAD "# search: S=1..W V\n");
    write_file(dir, "c.json", "{\"F\": -1}\n");
    char ddp[600];
    snprintf(ddp, sizeof ddp, "%s/ddp", dir);
    write_file(ddp, "ddp.pp", DP_FILE);
    const err_row rows[] = {
        {"--search", 2,
         "ppc: --search needs -D W=WORKERS and -D B=MICROBATCHES, e.g. ppc --search -D W=8 -D "
         "B=32\n"},
        {"--search -D W=4", 2, "ppc: --search needs -D W=WORKERS and -D B=MICROBATCHES"},
        {"--search -D W=4 -D B=8 -D S=4", 2,
         "ppc: --search: -D S: expected only -D W=WORKERS and -D B=MICROBATCHES"},
        {"--search -D W=0 -D B=8", 2, "ppc: --search: -D W=0: expected 1 to 1024\n"},
        {"--search -D W=1025 -D B=8", 2, "ppc: --search: -D W=1025: expected 1 to 1024\n"},
        {"--search -D W=4 -D B=65537", 2, "ppc: --search: -D B=65537: expected 1 to 65536\n"},
        {"--search -D W=4 -D B=8 --model lib/1f1b.pp", 2,
         "ppc: --search compiles the library's schedules and writes no plan: expected no --model "
         "(give the model's file alone: ppc --search MODEL.pp)\n"},
        {"--search -D W=4 -D B=8 -o out", 2, "expected no -o\n"},
        {"--search -D W=4 -D B=8 --keep-weights", 2,
         "ppc: --search tries --prefetch 0, 1, 2 and --keep-weights itself; expected no "
         "--keep-weights\n"},
        {"--search -D W=4 -D B=8 --prefetch 2", 2, "expected no --prefetch\n"},
        {"--search -D W=4 -D B=8 --no-pictures", 2,
         "ppc: --search prints a table and writes no report or plan; expected no --no-pictures\n"},
        {"--search -q -D W=4 -D B=8", 2, "expected no -q\n"},
        {"--search --search -D W=4 -D B=8", 2, "ppc: --search given twice; give it once\n"},
        {"--search -D W=4 -D B=8 --top 0", 2,
         "ppc: --top expects a number of rows from 1 to 1000000, found '0'\n"},
        {"--search -D W=4 -D B=8 --top", 2,
         "ppc: --top expects a number of rows from 1 to 1000000, found nothing\n"},
        {"lib/1f1b.pp -o out --top 3", 2, "ppc: --top is only for --search\n"},
        {"lib/1f1b.pp -o out --all", 2, "ppc: --all is only for --search\n"},
        {"lib/1f1b.pp -o out --json", 2, "ppc: --json is only for --search\n"},
        {"--search -D W=4 -D B=8 --library nowhere", 3,
         "ppc --search: cannot read the library 'nowhere': No such file or directory (expected a "
         "directory of .pp schedules, see --library)\n"},
        {"--search -D W=4 -D B=8 --library empty", 3,
         "ppc --search: the library 'empty' holds no .pp file"},
        {"--search -D W=4 -D B=8 --library lib --costs c.json", 3,
         "ppc --search: --costs: c.json:1:7: expected a positive cost"},
        {"--search -D W=4 -D B=8 --library lib --mem-limit 1000", 1,
         "ppc --search: no candidate fits under --mem-limit 1000: the smallest of the 5 over it "
         "needs 943424 bytes on a worker (ppc lib/1f1b.pp -D S=4 -D B=8 -D W=4 --mem-limit 1000); "
         "expected a limit of at least that\n"},
        {"--search -D W=4 -D B=5 --library bad", 1,
         "bad/a.pp:7:19: error: search line: syntax error, unexpected end of the line, expecting "
         "'='\n    7 | # search: S=1..W V\n      |                   ^\n"},
        /* DDP's placement needs W = B (DP_FILE) */
        {"--search -D W=4 -D B=8 --library ddp", 1,
         "ppc --search: none of the 3 candidates from 1 files compiles with W=4 B=8 (3 refused, 0 "
         "train another model); the first refused, ppc ddp/ddp.pp -D S=4 -D B=8 -D W=4: "
         "ddp/ddp.pp:4:18: error: compute = 4 at (s=0, b=4, d=F) is outside the workers [0, "
         "W=4)\n"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc %s", dir, PP_ROOT, rows[i].args);
        char *out = run_expect(cmd, rows[i].status);
        ck_assert_msg(strstr(out, rows[i].says), "ppc %s\nsaid:\n%s\nexpected:\n%s", rows[i].args,
                      out, rows[i].says);
        free(out);
    }
    /* the search line's errors, each at its column: the language's own
     * (syntax, names, functions, arithmetic), then the search's */
    static const struct {
        const char *line, *says;
    } lines[] = {
        {"# search: S=1..W,\n",
         "a.pp:7:18: error: search line: syntax error, unexpected end of the line\n    7 | # "
         "search: S=1..W,\n      |                  ^\n"},
        {"# search: S=Q\n", "a.pp:7:13: error: search line: unknown name 'Q'\n    7 | # search: "
                            "S=Q\n      |             ^\n"},
        {"# search: S=K K=1..2\n",
         "a.pp:7:13: error: search line: 'K' is used before it is defined\n"},
        {"# search: S=s\n", "a.pp:7:13: error: search line: 's' is a job variable and cannot be "
                            "used in a search line\n"},
        {"# search: s=1\n",
         "a.pp:7:11: error: search line: 's' is a job variable and cannot be redefined\n"},
        {"# search: S=min(W)\n", "a.pp:7:13: error: search line: 'min' takes 2 arguments, found "
                                 "1\n    7 | # search: S=min(W)\n      |             ^~~~~~\n"},
        {"# search: S=foo(W)\n",
         "a.pp:7:13: error: search line: unknown function 'foo' (functions are min, max, abs)\n"},
        {"# search: S=(W\n",
         "a.pp:7:15: error: search line: syntax error, unexpected end of the line\n"},
        {"# search: S=W;\n", "a.pp:7:14: error: search line: syntax error, unexpected ';', "
                             "expecting name or end of the line\n"},
        {"# search: S=W..\n",
         "a.pp:7:16: error: search line: syntax error, unexpected end of the line\n"},
        {"# search: S=1...4\n", "a.pp:7:16: error: search line: unexpected character '.'\n"},
        {"# search: S=W%0\n", "a.pp:7:14: error: search line: division by zero\n    7 | # search: "
                              "S=W%0\n      |              ^\n"},
        {"# search: S=W*1000000000*1000000000*10\n",
         "a.pp:7:36: error: search line: integer overflow\n"},
        {"# search: S=1..5000\n",
         "a.pp:7:13: error: search line: 1..5000 gives more than 4096 values for one name\n    7 | "
         "# search: S=1..5000\n      |             ^~~~~~~\n"},
        {"# search: W=4\n", "a.pp:7:11: error: search line: W and B are the search's own (-D W, -D "
                            "B), not the line's to assign\n"},
        {"# search: S=1 B=2\n", "a.pp:7:15: error: search line: W and B are the search's own (-D "
                                "W, -D B), not the line's to assign\n"},
        {"# search: S=1 S=2\n",
         "a.pp:7:15: error: search line: redefinition of 'S'\n    7 | # search: S=1 S=2\n      |   "
         "            ^\nbad/a.pp:7:11: note: search line: 'S' was first defined here\n"},
        {"# search: S=\n",
         "a.pp:7:13: error: search line: syntax error, unexpected end of the line\n"},
        {"# search: S\n", "a.pp:7:12: error: search line: syntax error, unexpected end of the "
                          "line, expecting '='\n"},
        {"# search:\n", "a.pp:7:10: error: search line: syntax error, unexpected end of the line, "
                        "expecting name\n"},
        {"# search:   # only a comment\n", "a.pp:7:29: error: search line: syntax error, "
                                           "unexpected end of the line, expecting name\n"},
        {"# search: 2S=1\n",
         "a.pp:7:11: error: search line: syntax error, unexpected integer, expecting name\n"},
        {"# search: S=W order=1\n", "a.pp:7:15: error: search line: syntax error, unexpected "
                                    "order, expecting name or end of the line\n"},
        {"# search: A=1..64 C=1..64 S=1..2\n",
         "a.pp:7: error: search line: more than 4096 combinations; narrow its ranges\n"},
        {"# search: A=1 C=1 D=1 E=1 F=1 G=1 H=1 I=1 J=1 K=1 L=1 M=1 N=1 O=1 P=1 Q=1 S=1\n",
         "a.pp:7:75: error: search line: more than 16 assignments on the line\n"},
        {"# search: S=99999999999\n",
         "a.pp:7:13: error: search line: value 99999999999 is out of range [-1000000000, "
         "1000000000]\n    7 | # search: S=99999999999\n      |             ^~~~~~~~~~~\n"},
        {"# search: S=-1000000001..W\n", "a.pp:7:13: error: search line: value -1000000001 is out "
                                         "of range [-1000000000, 1000000000]\n"},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, TINY_HEAD "%s", lines[i].line);
        write_file(bad, "a.pp", text);
        snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc --search -D W=4 -D B=8 --library bad", dir,
                 PP_ROOT);
        char *out = run_expect(cmd, 1);
        ck_assert_msg(strstr(out, lines[i].says), "%ssaid:\n%s\nexpected:\n%s", lines[i].line, out,
                      lines[i].says);
        free(out);
    }
    /* a line nested deeper than the parser holds: an error where its stack
     * is full, not a stack overflow */
    size_t deep = 200000;
    char *text = malloc(sizeof TINY_HEAD + 16 + deep);
    ck_assert_ptr_nonnull(text);
    strcpy(text, TINY_HEAD "# search: S=");
    memset(text + strlen(text), '(', deep);
    strcpy(text + strlen(TINY_HEAD "# search: S=") + deep, "W\n");
    write_file(bad, "a.pp", text);
    free(text);
    snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc --search -D W=4 -D B=8 --library bad", dir,
             PP_ROOT);
    char *out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "a.pp:7:10009: error: search line: nested too deeply: the parser "
                              "holds at most 10000 pending symbols"),
                  "said:\n%.300s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* ---- the user's model: ppc --search MODEL.pp ----------------------------------------- */

/* A model file of nothing but a model block (and its B): a GPT of 8 layers
 * in all, unlike every library file's. */
#define MY_MODEL                                                                                   \
    "# a model file: the model and its microbatches, no schedule\n"                                \
    "param B = 8\n"                                                                                \
    "model gpt {\n"                                                                                \
    "    vocab = 256\n    context = 16\n    embed = 32\n    heads = 4\n"                           \
    "    layers = 8\n    batch = 4\n}\n"

/* Every row trains the file's model (its layers split L/S a stage), says
 * --model FILE and reproduces its time and memory through its command;
 * a candidate whose S does not divide the 8 layers is refused and counted;
 * B comes from the file's param B. */
START_TEST(test_model_file_search)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir %s/lib && cp %s/1f1b.pp %s/gpipe.pp %s/interleaved-1f1b.pp %s/lib/",
             dir, LIB, LIB, LIB, dir);
    free(run_expect(cmd, 0));
    write_file(dir, "my.pp", MY_MODEL);
    snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc --search my.pp -D W=4 --library lib --json --all",
             dir, PP_ROOT);
    char *out = run_expect(cmd, 0);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    ck_assert_msg(j != NULL, "--json is not JSON (%s):\n%s", e.text, out);
    const char *model = json_string_value(json_object_get(j, "model"));
    ck_assert_msg(model && strstr(model, "gpt vocab 256 context 16 embed 32 heads 4") &&
                      strstr(model, "8 layers in total"),
                  "the search's model is not my.pp's: %s", model ? model : "(none)");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "B")), 8);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "layers")), 8);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "other_model")), 0);
    /* interleaved-1f1b V=3 has S = 12 stages: 8 layers do not split */
    ck_assert_msg(json_integer_value(json_object_get(j, "indivisible")) > 0,
                  "no candidate refused for S not dividing the model's 8 layers:\n%s", out);
    json_t *front = json_object_get(j, "front");
    ck_assert_msg(json_array_size(front) > 0, "an empty front:\n%s", out);
    for (size_t i = 0; i < json_array_size(front); i++) {
        json_t *row = json_array_get(front, i);
        const char *args = json_string_value(json_object_get(row, "args"));
        const char *file = json_string_value(json_object_get(row, "file"));
        ck_assert_msg(strstr(args, "--model my.pp"), "row %zu does not say --model my.pp: %s", i,
                      args);
        char full[1024], margs[1024];
        snprintf(full, sizeof full, "%s/%s", dir, file);
        /* the row's command from its directory: my.pp is relative to it */
        snprintf(margs, sizeof margs, "%s", args);
        char *at = strstr(margs, "--model my.pp");
        snprintf(at, sizeof margs - (size_t)(at - margs), "--model %s/my.pp%s", dir,
                 strstr(args, "--model my.pp") + strlen("--model my.pp"));
        double t, m;
        run_candidate(full, margs, &t, &m);
        double want_t = json_real_value(json_object_get(row, "time"));
        double want_m = (double)json_integer_value(json_object_get(row, "mem_bytes"));
        ck_assert_msg(same_time(t, want_t) && m == want_m,
                      "row %zu (%s %s): the search says step %g, %g bytes; its command gives %g, "
                      "%g",
                      i, file, args, want_t, want_m, t, m);
    }
    json_decref(j);
    free(out);
    /* the table's header names the file; the first row's plan is the gpt's */
    snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc --search my.pp -D W=4 -D B=4 --library lib --top 1",
             dir, PP_ROOT);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "ppc --search: W=4 B=4; model of my.pp: gpt vocab 256"),
                  "the header does not name my.pp's model (or -D B does not win):\n%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* A model file's errors: each with its place (file:line:col and a caret)
 * or what is missing, a non-zero exit and nothing else run. */
START_TEST(test_model_file_errors)
{
    char *dir = temp_dir(), cmd[2048];
    write_file(dir, "nomodel.pp", "param S = 4\ncompute(s,b,d) = s\n");
    write_file(dir, "syntax.pp", "model gpt {\n  layers = 2 *\n}\n");
    write_file(dir, "heads.pp", "param E = 32\nmodel gpt {\n  embed = E\n  heads = 3\n}\n");
    write_file(dir, "perstage.pp", "model {\n  blocks = s + 1\n}\n");
    write_file(dir, "zero.pp", "model {\n  blocks = 0\n}\n");
    write_file(dir, "nob.pp", "model {\n  blocks = 4\n}\n");
    write_file(dir, "tie.pp", "model gpt {\n  layers = 2\n  tie = 1\n}\n");
    const err_row rows[] = {
        {"--search nomodel.pp -D W=4 -D B=8", 1,
         "nomodel.pp: error: no model block: --search FILE and --model FILE take the model from "
         "FILE's 'model { ... }' block; expected one"},
        {"--search syntax.pp -D W=4 -D B=8", 1,
         "syntax.pp:3:1: error: syntax error, unexpected '}'\n    3 | }\n      | ^\n"},
        {"--search heads.pp -D W=4 -D B=8", 1,
         "heads.pp:4:11: error: model heads = 3 does not divide embed = 32"},
        {"--search perstage.pp -D W=4 -D B=8", 1,
         "perstage.pp:2:14: error: the model's blocks are the whole model's for --search FILE and "
         "--model FILE"},
        {"--search zero.pp -D W=4 -D B=8", 1,
         "zero.pp:1:1: error: the model has 0 blocks: expected at least one"},
        {"--search nob.pp -D W=4", 2,
         "ppc --search: nob.pp has no 'param B' and no -D B was given: expected -D "
         "B=MICROBATCHES\n"},
        {"--search missing.pp -D W=4 -D B=8", 3,
         "ppc: cannot read the model file 'missing.pp': No such file or directory\n"},
        {"--search nob.pp", 2, "ppc: --search needs -D W=WORKERS and -D B=MICROBATCHES"},
        {"--search nob.pp -D W=4 -D B=8 -D S=2", 2, "ppc: --search: -D S: expected only"},
        /* --model on a plain compile: the same checks, and the split's */
        {"" LIB "/1f1b.pp -o out --model heads.pp", 1, "heads.pp:4:11: error: model heads = 3"},
        {"" LIB "/1f1b.pp -o out --model", 2, "ppc: --model needs a .pp file with a model block\n"},
        {"" LIB "/1f1b.pp -D S=3 -o out --model nob.pp", 1,
         "error: the model of nob.pp (4 blocks in all): S = 3 does not divide it"},
        {"" LIB "/gpipe.pp -D S=1 -D W=1 -o out --model tie.pp", 1,
         "error: the model of tie.pp has tie = 1 (stage 0's embedding is the last stage's head): "
         "it needs S >= 2 stages, and this schedule has 1\n"},
        {"--table --model nob.pp", 2,
         "ppc: --table takes only -D S/B/G/R and --library, not --model\n"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc %s", dir, PP_ROOT, rows[i].args);
        char *out = run_expect(cmd, rows[i].status);
        ck_assert_msg(strstr(out, rows[i].says), "ppc %s\nsaid:\n%s\nexpected:\n%s", rows[i].args,
                      out, rows[i].says);
        ck_assert_msg(!strstr(out, "Pareto front"), "ppc %s searched anyway:\n%s", rows[i].args,
                      out);
        free(out);
    }
    remove_dir(dir);
}
END_TEST

/* --model on a plain compile trains the file's model: 1f1b.pp on 4 stages
 * with nob.pp's 4 blocks in all has one block a stage, the plan of
 * 1f1b.pp as written (its model block is the same mlp of one block). */
START_TEST(test_model_flag_plain_compile)
{
    char *dir = temp_dir(), cmd[2048];
    write_file(dir, "four.pp", "model {\n  context = 8\n  embed = 16\n  ffn = 256\n  blocks = 4\n"
                               "  batch = 16\n}\n");
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/bin/ppc %s/1f1b.pp -o a -q && %s/bin/ppc %s/1f1b.pp -o b -q --model "
             "four.pp && cmp a/rank1.bin b/rank1.bin && %s/bin/ppc %s/1f1b.pp -o c -q -D S=2 -D "
             "W=2 --model four.pp && grep -q '^; blocks per stage: s0-s1 2$' c/rank0.txt",
             dir, PP_ROOT, LIB, PP_ROOT, LIB, PP_ROOT, LIB);
    free(run_expect(cmd, 0));
    remove_dir(dir);
}
END_TEST

/* ---- --backend: a --costs profile of another backend -------------------------------- */

/* A profile measured on cuda, for plans named as the cpu's: a warning that
 * names both and the compile's exit 0; the same backend, or a profile that
 * does not record one, no warning; a backend ppc does not know: exit 2. */
START_TEST(test_backend_warning)
{
    char *dir = temp_dir(), cmd[2048];
    write_file(dir, "cuda.json", "{\"F\": 1.5, \"B\": 2.5, \"backend\": \"cuda\"}\n");
    write_file(dir, "plain.json", "{\"F\": 1.5, \"B\": 2.5}\n");
    static const struct {
        const char *args;
        int status;
        int warns;
    } rows[] = {
        {"LIB/1f1b.pp -o out --costs cuda.json --backend cpu", 0, 1},
        {"--search -D W=4 -D B=8 --top 1 --costs cuda.json --backend cpu", 0, 1},
        {"LIB/1f1b.pp -o out --costs cuda.json --backend cuda", 0, 0},
        {"LIB/1f1b.pp -o out --costs plain.json --backend cpu", 0, 0},
        {"LIB/1f1b.pp -o out --costs cuda.json", 0, 0},
    };
    const char *warning = "ppc: warning: --costs cuda.json was measured on the cuda backend, and "
                          "these plans are for cpu (--backend cpu): its job and transfer times are "
                          "cuda's; expected a profile from ppvm --backend cpu --profile\n";
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char args[512];
        const char *at = strstr(rows[i].args, "LIB/");
        if (at)
            snprintf(args, sizeof args, "%s/%s", LIB, at + 4);
        else
            snprintf(args, sizeof args, "%s", rows[i].args);
        snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc %s", dir, PP_ROOT, args);
        char *out = run_expect(cmd, rows[i].status);
        ck_assert_msg(rows[i].warns ? strstr(out, warning) != NULL : !strstr(out, "warning"),
                      "ppc %s: the backend warning %s:\n%s", args,
                      rows[i].warns ? "is missing" : "is printed", out);
        free(out);
    }
    /* the rows' commands repeat --backend, as they repeat --costs */
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/bin/ppc --search -D W=4 -D B=8 --top 1 --costs plain.json --backend cuda",
             dir, PP_ROOT);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, " --costs plain.json --backend cuda "),
                  "a row's command does not repeat --backend cuda after --costs:\n%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc --search -D W=4 -D B=8 --top 1", dir, PP_ROOT);
    out = run_expect(cmd, 0);
    ck_assert_msg(!strstr(out, "--backend"), "--backend printed where the user gave none:\n%s",
                  out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/1f1b.pp -o %s/out --backend tpu", PP_ROOT, LIB, dir);
    out = run_expect(cmd, 2);
    ck_assert_msg(strstr(out, "ppc: --backend expects cpu or cuda, found 'tpu'\n"), "said:\n%s",
                  out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* ---- 1f1b-limit.pp: the inflight family ------------------------------------------ */

/* schedules/1f1b-limit.pp -D S=4 -D B=8 -D K=k, as far as its report. */
static void compile_limit(pp_compiled *c, long long k)
{
    pp_define defs[] = {{"S", 4}, {"B", 8}, {"K", k}};
    pp_compile_opts o = pp_compile_defaults();
    o.path = LIB "/1f1b-limit.pp";
    o.defs = defs;
    o.ndefs = 3;
    o.stop_after = PP_STAGE_REPORT;
    o.capture = 1;
    ck_assert_msg(pp_compile(&o, c) == PP_COMPILE_OK, "K=%lld: %s", k, c->msgs);
}

/* K = 0 is 1f1b-greedy.pp's order on every worker; K = 1 - S holds one
 * microbatch everywhere, so the step is B whole passes, 2SB; and for
 * every K no worker holds more than its limit max(1, min(S - w + K, B)). */
START_TEST(test_limit_family)
{
    pp_compiled lim, greedy;
    compile_limit(&lim, 0);
    pp_define defs[] = {{"S", 4}, {"B", 8}};
    compile_library(&greedy, "1f1b-greedy.pp", defs, 2);
    for (int w = 0; w < 4; w++) {
        char *x = worker_order(&lim, w, 'x'), *y = worker_order(&greedy, w, 'x');
        ck_assert_msg(!strcmp(x, y), "worker %d: K=0 runs %s, 1f1b-greedy.pp %s", w, x, y);
        free(x);
        free(y);
    }
    compiled_free(&greedy);
    pp_compiled_free(&lim);

    compile_limit(&lim, -3);
    ck_assert(same_time(lim.rep.makespan, 2 * 4 * 8));
    for (int w = 0; w < 4; w++)
        ck_assert_int_eq(lim.rep.w[w].peak_act, 1);
    pp_compiled_free(&lim);

    for (long long k = -5; k <= 8; k++) {
        compile_limit(&lim, k);
        for (long long w = 0; w < 4; w++) {
            long long cap = 4 - w + k < 8 ? 4 - w + k : 8;
            cap = cap < 1 ? 1 : cap;
            ck_assert_msg(lim.rep.w[w].peak_act <= cap, "K=%lld: worker %lld holds %lld, over %lld",
                          k, w, lim.rep.w[w].peak_act, cap);
        }
        ck_assert_msg(lim.rep.makespan >= 22 - 1e-9, "K=%lld beats 1F1B's 22", k);
        pp_compiled_free(&lim);
    }
}
END_TEST

/* ---- --layers: one model for every S ----------------------------------------- */

/* W=4 B=8 --layers 8 with unit costs (per block): each candidate takes the
 * split auto(8) chooses for it. 1F1B keeps S = 4 stages of 2 blocks, each
 * job costing 2, so (B + S - 1)(F + B) = 11 * 4 = 44; interleaved V=2 has
 * S = 8 stages of 1 block on 4 workers, each worker computes 2BV = 32 and
 * waits (W - 1)(F + B) = 6: 38. Both are compiled (one model now), V=2
 * leads the front, its row's command (with --layers auto(8)) reproduces its
 * time and memory, and V=3, V=4 (S = 12, 16, more stages than blocks) are
 * compiled too, some stages empty, every split summing to 8. Without
 * --layers the V > 1 candidates are another model, and the summary says how
 * to compare them. */
START_TEST(test_layers_v2_beats_1f1b)
{
    char *dir = temp_dir();
    copy_schedule(dir, "1f1b.pp", NULL);
    copy_schedule(dir, "interleaved-1f1b.pp", NULL);
    pp_search_opts o = opts(dir, 4, 8);
    o.layers = 8;
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    double onef = INFINITY, v2 = INFINITY;
    for (int i = 0; i < r.n; i++) {
        const pp_search_cand *k = &r.c[i];
        ck_assert_msg(strstr(k->args, " --layers 'auto(8)'"), "%s", k->args);
        ck_assert_msg(k->state == PP_CAND_OK, "%s %s: %s", k->file, k->args,
                      k->why ? k->why : "not compiled");
        ck_assert_msg(k->split != NULL, "%s %s: no split", k->file, k->args);
        int sum = 0, n = 0;
        for (const char *p = k->split; *p; p += strcspn(p, ","), p += *p == ',')
            sum += atoi(p), n++;
        ck_assert_msg(sum == 8 && n == k->S, "%s %s: split %s (S = %lld)", k->file, k->args,
                      k->split, k->S);
        if (ends_with(k->file, "/1f1b.pp")) {
            ck_assert_int_eq(k->S, 4);
            onef = fmin(onef, k->time);
        } else if (strstr(k->args, "-D V=2 ")) {
            ck_assert_int_eq(k->S, 8);
            v2 = fmin(v2, k->time);
        }
    }
    ck_assert_msg(same_time(onef, 44) && same_time(v2, 38),
                  "1F1B %g (expected 44), V=2 %g "
                  "(expected 38)",
                  onef, v2);
    ck_assert_int_eq(r.refused, 0);
    ck_assert_int_eq(r.indivisible, 0);
    ck_assert_int_eq(r.other_model, 0);
    ck_assert_msg(strstr(r.model, ", 8 blocks in total, "), "%s", r.model);
    check_pareto(&r);
    const pp_search_cand *best = &r.c[r.front[0]];
    ck_assert_msg(ends_with(best->file, "/interleaved-1f1b.pp") && strstr(best->args, "-D V=2 "),
                  "front starts with %s %s", best->file, best->args);
    double t, m;
    run_candidate(best->file, best->args, &t, &m);
    ck_assert_msg(same_time(t, best->time) && m == (double)best->mem,
                  "%s %s: the search says %g and %llu bytes, ppc %g and %.0f", best->file,
                  best->args, best->time, (unsigned long long)best->mem, t, m);
    pp_search_free(&r);

    /* the printed summary and the JSON count the refusals */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc --search -D W=4 -D B=8 --library %s --layers 8 --tensor 1", PP_ROOT, dir);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "costs: each file's cost lines, per block, times each stage's "
                              "blocks;") &&
                      strstr(out, " 0 refused, 0 over --mem-limit, 0 another model\n") &&
                      strstr(out, "--layers 'auto(8)' -o out/interleaved-1f1b   # layers "
                                  "1,1,1,1,1,1,1,1\n"),
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc --search -D W=4 -D B=8 --library %s --layers 8 --json --tensor 1", PP_ROOT,
             dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "\"layers\": 8,") && strstr(out, "\"indivisible\": 0,") &&
                      strstr(out, "\"split\": \"2,2,2,2\"}"),
                  "%s", out);
    free(out);

    /* without --layers: each file's own model, V > 1 set aside */
    o.layers = 0;
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_gt(r.other_model, 0);
    ck_assert_int_eq(r.indivisible, 0);
    pp_search_free(&r);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc --search -D W=4 -D B=8 --library %s", PP_ROOT, dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, " another model: give --layers L to compare them\n") &&
                      !strstr(out, "does not divide"),
                  "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* The candidate of `file` without --prefetch, --keep-weights or
 * --recompute (the base one), or NULL. */
static const pp_search_cand *base_of(const pp_search_result *r, const char *file)
{
    for (int i = 0; i < r->n; i++)
        if (ends_with(r->c[i].file, file) && !strstr(r->c[i].args, "--prefetch") &&
            !strstr(r->c[i].args, "--keep-weights") && !strstr(r->c[i].args, "--recompute"))
            return &r->c[i];
    return NULL;
}

/* GPT-2's 50257-token head on 1F1B, --layers 12: the search gives the
 * candidate auto(12)'s split (its row says it; the head's stage lighter),
 * and the row's command compiles that split again (the report's `layers`
 * line) with the same time and memory. Under a --mem-limit below that
 * split's memory the candidate's split fits it, or the row is over. */
START_TEST(test_layers_search_splits)
{
    char *dir = temp_dir();
    write_file(dir, "gpt-1f1b.pp",
               "param S = 4\nparam B = 8\nparam W = S\n"
               "compute(s,b,d) = s\nweights(s,b,d) = s\n"
               "priority(s,b,d) = d == F ? 2 * b + 2 * s : 2 * b + 2 * S - 1\n"
               "order strict\n"
               "model gpt { vocab = 50257; context = 32; embed = 768; heads = 12\n"
               "            ffn = 3072; batch = 2; layers = 3 }\n");
    pp_search_opts o = opts(dir, 4, 8);
    o.layers = 12;
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    const pp_search_cand *k = base_of(&r, "/gpt-1f1b.pp");
    ck_assert_msg(k && k->state == PP_CAND_OK && k->split, "no compiled base candidate");
    unsigned n[4];
    ck_assert_int_eq(sscanf(k->split, "%u,%u,%u,%u", &n[0], &n[1], &n[2], &n[3]), 4);
    ck_assert_msg(n[0] + n[1] + n[2] + n[3] == 12 && n[3] < n[1],
                  "split %s: expected 12 layers, the head's stage lighter", k->split);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/bin/ppc %s %s -o p -q --no-pictures && grep '^layers' p/report.txt", dir,
             PP_ROOT, k->file, k->args);
    char *out = run_expect(cmd, 0), want[64];
    snprintf(want, sizeof want, "auto(12): %s, predicted step", k->split);
    ck_assert_msg(strstr(out, want), "ppc %s: expected '%s' in %s", k->args, want, out);
    free(out);
    double t, m;
    run_candidate(k->file, k->args, &t, &m);
    ck_assert_msg(same_time(t, k->time) && m == (double)k->mem,
                  "%s: search %g and %llu, ppc %g and %.0f", k->args, k->time,
                  (unsigned long long)k->mem, t, m);
    uint64_t unlimited = k->mem;
    char *first = strdup(k->split);
    pp_search_free(&r);

    o.mem_limit = unlimited - 1;
    search(&o, &r, PP_SEARCH_OK);
    k = base_of(&r, "/gpt-1f1b.pp");
    ck_assert_ptr_nonnull(k);
    if (k->state == PP_CAND_OK) {
        ck_assert_msg(k->mem < unlimited && k->split && strcmp(k->split, first),
                      "under --mem-limit %llu: split %s, %llu bytes (unlimited %s)",
                      (unsigned long long)o.mem_limit, k->split ? k->split : "-",
                      (unsigned long long)k->mem, first);
        run_candidate(k->file, k->args, &t, &m);
        ck_assert_msg(same_time(t, k->time) && m == (double)k->mem, "%s: search %g, ppc %g",
                      k->args, k->time, t);
    } else
        ck_assert_msg(k->state == PP_CAND_OVER, "under --mem-limit: state %d (%s)", k->state,
                      k->why ? k->why : "");
    free(first);
    pp_search_free(&r);
    remove_dir(dir);
}
END_TEST

/* Runs `bin/ppc ARGS_A -o a` and `bin/ppc ARGS_B -o b` in dir and asserts
 * their plans (every rank's .bin and listing, plan id included) are the
 * same bytes. */
static void same_plans(const char *dir, const char *a, const char *b, int W)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/bin/ppc %s -o a -q --no-pictures && "
             "%s/bin/ppc %s -o b -q --no-pictures",
             dir, PP_ROOT, a, PP_ROOT, b);
    free(run_expect(cmd, 0));
    for (int r = 0; r < W; r++) {
        snprintf(cmd, sizeof cmd,
                 "cd %s && cmp a/rank%d.bin b/rank%d.bin && "
                 "cmp a/rank%d.txt b/rank%d.txt && grep -c 'plan id' a/rank%d.txt",
                 dir, r, r, r, r, r);
        char *out = run_expect(cmd, 0);
        ck_assert_msg(!strcmp(out, "1\n"), "ppc %s / ppc %s rank %d: %s", a, b, r, out);
        free(out);
    }
}

/* ppc FILE --layers L compiles the plan of FILE with blocks (layers) = L/S
 * written in its model block: for mlp, and for gpt over a per-stage
 * `layers = f(s)` that --layers replaces. */
START_TEST(test_layers_same_plan_as_file)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && sed 's/^\\( *blocks *=\\).*/\\1 2/' %s/1f1b.pp > mlp2.pp && "
             "sed 's/^\\( *layers *=\\).*/\\1 3/' %s/1f1b-gpt.pp > gpt3.pp && "
             "grep -c '^ *blocks *= 2$' mlp2.pp && grep -c '^ *layers *= 3$' gpt3.pp",
             dir, LIB, LIB);
    char *out = run_expect(cmd, 0);
    ck_assert_str_eq(out, "1\n1\n");
    free(out);
    same_plans(dir, LIB "/1f1b.pp -D S=4 -D B=8 --layers 8", "mlp2.pp -D S=4 -D B=8", 4);
    same_plans(dir, LIB "/1f1b-gpt.pp -D S=2 -D B=4 --layers 6", "gpt3.pp -D S=2 -D B=4", 2);
    /* the report says what its costs are (b/ without --layers, as before) */
    snprintf(cmd, sizeof cmd, "cd %s && grep '^costs' a/report.txt b/report.txt", dir);
    out = run_expect(cmd, 0);
    ck_assert_str_eq(out, "a/report.txt:costs     cost lines of the schedule (FLOPs-proportional "
                          "where none, 1 = one block's forward); --layers 6 (3 layers a stage): "
                          "per block, times the stage's layers\n"
                          "b/report.txt:costs     cost lines of the schedule (FLOPs-proportional "
                          "where none, 1 = the mean forward)\n");
    free(out);
    remove_dir(dir);
}
END_TEST

/* The costs per block: unit costs (mlp) times the stage's blocks, FLOPs
 * costs (gpt) in units of one layer's forward, --costs' F/B read as one
 * block's (and O, the optimizer step, scaled too); latency unchanged. */
START_TEST(test_layers_costs_per_block)
{
    static const struct {
        const char *file;
        long long S, layers;
        const char *costs; /* NULL: the defaults */
        double f1, b1;     /* F and B of stage 1 (not the last: no head) */
    } rows[] = {
        {"1f1b.pp", 4, 8, NULL, 2, 2},     /* unit costs, 2 blocks */
        {"1f1b.pp", 2, 8, NULL, 4, 4},     /* 4 blocks */
        {"1f1b-gpt.pp", 4, 8, NULL, 2, 4}, /* FLOPs: 2 layers, backward twice */
        {"1f1b-gpt.pp", 4, 12, NULL, 3, 6},
        {"1f1b.pp", 4, 8, "{\"F\": 0.5, \"B\": 1.5, \"O\": 0.25, \"latency\": 0.125}", 1, 3},
    };
    char *dir = temp_dir(), path[600];
    snprintf(path, sizeof path, "%s/c.json", dir);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (rows[i].costs)
            write_file(dir, "c.json", rows[i].costs);
        char lib[600];
        snprintf(lib, sizeof lib, "%s/%s", LIB, rows[i].file);
        pp_define defs[] = {{"S", rows[i].S}, {"B", 4}};
        pp_compile_opts o = pp_compile_defaults();
        o.path = lib;
        o.defs = defs;
        o.ndefs = 2;
        o.layers = rows[i].layers;
        o.costs = rows[i].costs ? path : NULL;
        o.stop_after = PP_STAGE_JOBS;
        o.capture = 1;
        pp_compiled c;
        ck_assert_msg(pp_compile(&o, &c) == PP_COMPILE_OK, "%s: %s", rows[i].file, c.msgs);
        const pp_jobtable *t = &c.t;
        double f = t->cost[job_id(&t->js, 1, 0, 0)], b = t->cost[job_id(&t->js, 1, 0, 1)];
        ck_assert_msg(f == rows[i].f1 && b == rows[i].b1,
                      "%s S=%lld --layers %lld: F %g B %g, "
                      "expected %g %g",
                      rows[i].file, rows[i].S, rows[i].layers, f, b, rows[i].f1, rows[i].b1);
        if (rows[i].costs) {
            ck_assert(t->opt[1] == 0.25 * 2);
            ck_assert(c.t.latency == 0.125);
        }
        pp_compiled_free(&c);
    }
    remove_dir(dir);
}
END_TEST

/* --layers' errors: a bad value (auto(L)'s too) is one line and exit 2; S
 * not dividing L, or more blocks on a stage than a plan holds, is the
 * schedule's error (exit 1); --table refuses it. */
START_TEST(test_layers_errors)
{
    char *dir = temp_dir(), cmd[2048];
    static const err_row rows[] = {
        {"--search -D W=4 -D B=8 --layers 0", 2,
         "ppc: --layers expects the model's blocks (layers) in total, from 1 to 1073741824, or "
         "auto(L) for the compiler to split them, found "
         "'0'\n"},
        {"--search -D W=4 -D B=8 --layers eight", 2,
         "ppc: --layers expects the model's blocks (layers) in total, from 1 to 1073741824, or "
         "auto(L) for the compiler to split them, found "
         "'eight'\n"},
        {"--search -D W=4 -D B=8 --layers 1073741825", 2, "found '1073741825'\n"},
        {"--search -D W=4 -D B=8 --layers 99999999999999999999", 2,
         "found '99999999999999999999'\n"},
        {"--search -D W=4 -D B=8 --layers", 2,
         "ppc: --layers expects the model's blocks (layers) in total, from 1 to 1073741824, or "
         "auto(L) for the compiler to split them, found "
         "nothing\n"},
        {"--search -D W=4 -D B=8 --layers 8 --layers 8", 2,
         "ppc: --layers given twice; give it once\n"},
        {"SCHED -D S=4 -o out --layers 6", 1,
         "1f1b.pp: error: --layers 6: S = 4 does not divide it (S does not divide --layers); "
         "expected a multiple of the 4 stages\n"},
        {"SCHED -D S=4 -o out --layers 8192", 1,
         "1f1b.pp: error: --layers 8192: 2048 blocks on each of S = 4 stages is more than a stage "
         "may have (1024); expected at most 4096\n"},
        {"--search -D W=4 -D B=8 --layers 'auto(x)'", 2, "them, found 'auto(x)'\n"},
        {"--search -D W=4 -D B=8 --layers 'auto(8'", 2, "them, found 'auto(8'\n"},
        {"SCHED -D S=4 -o out --layers 'auto(8192)'", 1,
         "1f1b.pp: error: --layers auto(8192): more layers than 4 stages of at most 1024 can "
         "hold\n"},
        {"--table --layers 8", 2,
         "ppc: --table takes only -D S/B/G/R and --library, not --layers\n"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *a = rows[i].args;
        int sched = !strncmp(a, "SCHED", 5);
        snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc %s%s%s", dir, PP_ROOT, sched ? LIB : "",
                 sched ? "/1f1b.pp" : "", sched ? a + 5 : a);
        char *out = run_expect(cmd, rows[i].status);
        ck_assert_msg(strstr(out, rows[i].says), "ppc %s\nsaid:\n%s\nexpected:\n%s", a, out,
                      rows[i].says);
        free(out);
    }
    /* nothing was written for the refused compiles */
    snprintf(cmd, sizeof cmd, "ls %s/out/rank0.bin 2>/dev/null | wc -l", dir);
    char *out = run_expect(cmd, 0);
    ck_assert_str_eq(out, "0\n");
    free(out);
    remove_dir(dir);
}
END_TEST

/* ---- speed ---------------------------------------------------------------------- */

/* The size, W=8 and B=32 over the whole library: a few seconds on
 * the development machine (0.3 s there); 30 s allows for a loaded machine
 * and the sanitizers. */
START_TEST(test_speed_w8_b32)
{
    pp_search_opts o = opts(LIB, 8, 32);
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    ck_assert_int_gt(r.ok, 10);
    ck_assert_msg(r.seconds < 30, "W=8 B=32 took %.2f s", r.seconds);
    check_pareto(&r);
    pp_search_free(&r);
}
END_TEST

/* ---- search_e2e: what the search picks trains ------------------------------------- */

/* Compiles `ppc FILE ARGS`, trains 3 steps on W ranks under mpirun and in
 * the reference, and compares the weights (the default tolerance: the
 * data-parallel picks add gradients in another order, test_e2e.c says
 * why). Returns the largest memory a rank says it allocated. */
static unsigned long long trains_like_reference(const char *file, const char *args, int W)
{
    char *dir = temp_dir(), cmd[4096], *out, *why;
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s %s -o %s/plan -q --no-pictures", PP_ROOT, file, args,
             dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --save %s/w", dir, dir);
    if (mpi_run(W, cmd, &out, &why))
        ck_abort_msg("%s %s: training under mpirun failed: %s", file, args, why);
    const char *mem = strstr(out, "memory allocated at start-up, bytes per rank:");
    ck_assert_msg(mem != NULL, "%s %s: ppvm did not say what it allocated:\n%s", file, args, out);
    mem += strlen("memory allocated at start-up, bytes per rank:");
    unsigned long long most = 0;
    for (int r = 0; r < W; r++) {
        char *end;
        unsigned long long v = strtoull(mem, &end, 10);
        ck_assert_msg(end != mem, "%s %s: %d ranks' memory expected:\n%s", file, args, W, out);
        most = v > most ? v : most;
        mem = end;
    }
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppvm --reference %s/plan --steps 3 --save %s/ref --quiet && "
             "%s/bin/ppvm --compare %s/w %s/ref",
             PP_ROOT, dir, dir, PP_ROOT, dir, dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "within tolerance") && !strstr(out, "beyond"), "%s %s:\n%s", file,
                  args, out);
    free(out);
    remove_dir(dir);
    return most;
}

/* --layers 8 on 1f1b.pp at S = 4: stages of 2 blocks (the file says 1),
 * which the reference builds from the plan's model, trains alike. */
START_TEST(layers_plan_trains)
{
    trains_like_reference(LIB "/1f1b.pp", "-D S=4 -D B=8 --layers 8", 4);
}
END_TEST

/* The inflight family at both ends: one microbatch held everywhere, and
 * two more than 1F1B. */
START_TEST(limit_family_trains)
{
    trains_like_reference(LIB "/1f1b-limit.pp", "-D S=4 -D B=8 -D K=-3", 4);
    trains_like_reference(LIB "/1f1b-limit.pp", "-D S=4 -D B=8 -D K=2", 4);
}
END_TEST

/* The fastest and the smallest row of W=4 B=8's front train like the
 * reference, and each rank allocates at most the row's memory, the largest
 * exactly it. */
START_TEST(front_rows_train)
{
    pp_search_opts o = opts(LIB, 4, 8);
    pp_search_result r;
    search(&o, &r, PP_SEARCH_OK);
    int rows[2] = {r.front[0], r.front[r.nfront - 1]};
    for (int i = 0; i < (r.nfront > 1 ? 2 : 1); i++) {
        const pp_search_cand *k = &r.c[rows[i]];
        unsigned long long most = trains_like_reference(k->file, k->args, 4);
        ck_assert_msg(most == k->mem, "%s %s: ppvm allocated at most %llu bytes, the row says %llu",
                      k->file, k->args, most, (unsigned long long)k->mem);
    }
    pp_search_free(&r);
}
END_TEST

#define SEARCH_E2E_TESTS(X)                                                                        \
    X(limit_family_trains, 4)                                                                      \
    X(front_rows_train, 4)                                                                         \
    X(layers_plan_trains, 4)

PP_JOB_SUITE(search_e2e, SEARCH_E2E_TESTS)

Suite *search_suite(void)
{
    Suite *s = suite_create("search");
    TCase *optima = tcase_create("optima");
    tcase_set_timeout(optima, 120);
    tcase_add_test(optima, test_memory_cap_1f1b_beats_gpipe);
    tcase_add_test(optima, test_split_backward_zb_h1_beats_1f1b);
    tcase_add_test(optima, test_front_first_is_fastest);
    suite_add_tcase(s, optima);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 120);
    tcase_add_test(cli, test_printed_commands_reproduce);
    tcase_add_test(cli, test_offload_rows_under_cap);
    tcase_add_test(cli, test_output_layout);
    tcase_add_test(cli, test_errors);
    tcase_add_test(cli, test_json_output);
    tcase_add_test(cli, test_front_tolerance);
    tcase_add_test(cli, test_known_miss_note);
    suite_add_tcase(s, cli);
    TCase *line = tcase_create("line");
    tcase_set_timeout(line, 60);
    tcase_add_test(line, test_search_line_values);
    tcase_add_test(line, test_search_line_api);
    tcase_add_test(line, test_no_search_line);
    tcase_add_test(line, test_keep_weights_and_models);
    tcase_add_test(line, test_speed_w8_b32);
    tcase_add_test(line, test_limit_family);
    suite_add_tcase(s, line);
    TCase *layers = tcase_create("layers");
    tcase_set_timeout(layers, 120);
    tcase_add_test(layers, test_layers_v2_beats_1f1b);
    tcase_add_test(layers, test_layers_search_splits);
    tcase_add_test(layers, test_layers_same_plan_as_file);
    tcase_add_test(layers, test_layers_costs_per_block);
    tcase_add_test(layers, test_layers_errors);
    tcase_add_test(layers, test_model_file_search);
    tcase_add_test(layers, test_model_file_errors);
    tcase_add_test(layers, test_model_flag_plain_compile);
    tcase_add_test(layers, test_backend_warning);
    suite_add_tcase(s, layers);
    return s;
}
