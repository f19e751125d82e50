/* test_library_orders.c - the library against the reference implementations:
 * each library schedule, compiled at every shape tests/golden/torch-orders/
 * holds for it, must give every rank the compute order the reference gives
 * it (PyTorch's torch.distributed.pipelining schedules, Megatron-Core's
 * interleaved order; tests/bench/torch_orders.py wrote the files once, so
 * these tests need no PyTorch).
 *
 * A rank's order is the simulator's job order for that worker (the strict
 * order runs each worker's jobs in priority order), written as the golden
 * files write it: F(s,b); I(s,b) for a split backward's B (PyTorch's
 * BACKWARD_INPUT), W(s,b) for its W, B(s,b) for a whole backward; an
 * overlapped pair (the simulator's partner, `overlap F with/then B`) as
 * [X Y] in its order, as the files write PyTorch's OVERLAP_F_B actions, so
 * the pairs are compared with the reference's as well as the order. On a
 * mismatch the failure names the file, the rank and the first differing
 * position with both actions. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

#define GOLDEN_DIR PP_ROOT "/tests/golden/torch-orders"

/* Whether worker w's order holds W(s,b): then its B(s,b) is split (a W
 * runs on its B's worker), whether the whole schedule splits its backwards
 * or only some (`split backward when`). */
static int has_weight_job(const compiled *c, int w, int s, int b)
{
    const pp_jobspace *js = &c->t.js;
    for (int k = c->sim.off[w]; k < c->sim.off[w + 1]; k++) {
        int j = c->sim.order[k];
        if (job_d(js, j) == 2 && job_s(js, j) == s && job_b(js, j) == b)
            return 1;
    }
    return 0;
}

/* ppc's order of worker w in the golden files' notation; a job whose
 * partner is the next one opens a pair, closed after that one. */
static char *ppc_order(const compiled *c, int w)
{
    const pp_jobspace *js = &c->t.js;
    size_t cap = 64 + 26 * (size_t)(c->sim.off[w + 1] - c->sim.off[w]), n = 0;
    char *out = malloc(cap);
    out[0] = '\0';
    for (int k = c->sim.off[w]; k < c->sim.off[w + 1]; k++) {
        int j = c->sim.order[k], d = job_d(js, j), p = c->sim.partner ? c->sim.partner[j] : -1;
        int opens = p >= 0 && k + 1 < c->sim.off[w + 1] && c->sim.order[k + 1] == p;
        int closes = p >= 0 && k > c->sim.off[w] && c->sim.order[k - 1] == p;
        char a = d == 0                                             ? 'F'
                 : d == 2                                           ? 'W'
                 : has_weight_job(c, w, job_s(js, j), job_b(js, j)) ? 'I'
                                                                    : 'B';
        n += (size_t)snprintf(out + n, cap - n, "%s%s%c(%d,%d)%s", n ? " " : "", opens ? "[" : "",
                              a, job_s(js, j), job_b(js, j), closes ? "]" : "");
    }
    return out;
}

/* The length of the action at p: up to a space, or a whole [X Y] pair. */
static size_t action_len(const char *p)
{
    if (*p == '[') {
        size_t l = strcspn(p, "]");
        return p[l] ? l + 1 : l;
    }
    return strcspn(p, " ");
}

/* The first position (in actions, a pair one action) where two
 * space-separated orders differ, and each one's action there ("end" past
 * its end), into msg. */
static void first_difference(const char *got, const char *want, char *msg, size_t len)
{
    int pos = 0;
    const char *g = got, *w = want;
    for (;;) {
        size_t gl = action_len(g), wl = action_len(w);
        if (gl != wl || strncmp(g, w, gl)) {
            snprintf(msg, len, "first difference at action %d: got %.*s, want %.*s", pos,
                     gl ? (int)gl : 3, gl ? g : "end", wl ? (int)wl : 3, wl ? w : "end");
            return;
        }
        if (!gl)
            break;
        g += gl + (g[gl] == ' ');
        w += wl + (w[wl] == ' ');
        pos++;
    }
    snprintf(msg, len, "no difference");
}

/* Reads a golden file: *W ranks' orders (each malloc'd) into want[]. */
static int read_golden(const char *path, char **want, int max)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int ranks = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[0] == '#')
            continue;
        if (n && line[n - 1] == '\n')
            line[--n] = '\0';
        int r, at = 0;
        ck_assert_msg(sscanf(line, "rank %d: %n", &r, &at) == 1 && at > 0 && r == ranks && r < max,
                      "%s: malformed line '%.60s'", path, line);
        want[ranks++] = strdup(line + at);
    }
    free(line);
    fclose(f);
    return ranks;
}

/* Parses <prefix>-W<w>-V<v>-B<b>[-G<g>].txt; *G = 0 without a G. */
static int shape_of(const char *name, const char *prefix, int *W, int *V, int *B, int *G)
{
    size_t pl = strlen(prefix);
    int at = 0;
    if (strncmp(name, prefix, pl) || name[pl] != '-')
        return 0;
    *G = 0;
    if (sscanf(name + pl, "-W%d-V%d-B%d.txt%n", W, V, B, &at) == 3 && at > 0 &&
        name[pl + (size_t)at] == '\0')
        return 1;
    at = 0;
    return sscanf(name + pl, "-W%d-V%d-B%d-G%d.txt%n", W, V, B, G, &at) == 4 && at > 0 &&
           name[pl + (size_t)at] == '\0';
}

/* How a library schedule takes a golden shape: W and B always, V where it
 * has that parameter, G (Megatron's microbatch group size) where the file
 * name has one; interleaved-1f1b.pp's default G is PyTorch's round size. */
typedef struct {
    const char *golden; /* file prefix under tests/golden/torch-orders */
    const char *schedule;
    int pass_v; /* -D V=v */
} order_case;

static const order_case cases[] = {
    {"megatron-interleaved", "interleaved-1f1b.pp", 1},
    {"interleaved-1f1b", "interleaved-1f1b.pp", 1},
    {"looped-bfs", "looped-bfs.pp", 1},
    {"interleaved-zb", "interleaved-zb.pp", 1},
    {"zb-v", "zb-v.pp", 0},
    {"dualpipev", "dualpipev.pp", 0},
};

/* Compiles oc's schedule at one golden file's shape and compares every
 * rank; returns the number of ranks that differ, each difference written to
 * report. */
static int compare_file(const order_case *oc, const char *file, int W, int V, int B, int G,
                        FILE *report)
{
    char path[1024], *want[64];
    snprintf(path, sizeof path, "%s/%s", GOLDEN_DIR, file);
    int ranks = read_golden(path, want, 64);
    ck_assert_msg(ranks == W, "%s: %d ranks, the name says W=%d", file, ranks, W);
    pp_define defs[4] = {{"W", W}, {"B", B}};
    int nd = 2;
    if (oc->pass_v)
        defs[nd++] = (pp_define){"V", V};
    if (G)
        defs[nd++] = (pp_define){"G", G};
    compiled c;
    compile_library(&c, oc->schedule, defs, nd);
    ck_assert_msg(c.errors == 0 && !c.deadlock, "%s at %s:\n%s", oc->schedule, file, c.msgs);
    ck_assert_int_eq(c.t.W, W);
    int bad = 0;
    for (int r = 0; r < W; r++) {
        char *got = ppc_order(&c, r), msg[256];
        if (strcmp(got, want[r])) {
            first_difference(got, want[r], msg, sizeof msg);
            fprintf(report, "%s vs %s rank %d: %s\n  got  %s\n  want %s\n", oc->schedule, file, r,
                    msg, got, want[r]);
            bad++;
        }
        free(got);
        free(want[r]);
    }
    compiled_free(&c);
    return bad;
}

/* Every golden file of case _i: at least one must exist, and every rank of
 * every one must match. */
START_TEST(library_matches_reference_orders)
{
    const order_case *oc = &cases[_i];
    DIR *dir = opendir(GOLDEN_DIR);
    ck_assert_msg(dir != NULL, "cannot open %s", GOLDEN_DIR);
    struct dirent *e;
    int files = 0, bad = 0;
    char *all = NULL;
    size_t alllen = 0;
    FILE *report = open_memstream(&all, &alllen);
    while ((e = readdir(dir))) {
        int W, V, B, G;
        if (!shape_of(e->d_name, oc->golden, &W, &V, &B, &G))
            continue;
        bad += compare_file(oc, e->d_name, W, V, B, G, report);
        files++;
    }
    closedir(dir);
    fclose(report);
    ck_assert_msg(files > 0, "no golden file %s/%s-W*-V*-B*.txt", GOLDEN_DIR, oc->golden);
    ck_assert_msg(bad == 0, "%s: %d rank(s) differ from %s over %d shapes:\n%s", oc->schedule, bad,
                  oc->golden, files, all);
    free(all);
}
END_TEST

/* The comparison itself: a wrong order is caught at its first differing
 * action (so a test that passes is not one that cannot fail). */
START_TEST(first_difference_names_the_action)
{
    char msg[256];
    first_difference("F(0,0) F(0,1) B(0,0)", "F(0,0) F(0,1) B(0,1)", msg, sizeof msg);
    ck_assert_str_eq(msg, "first difference at action 2: got B(0,0), want B(0,1)");
    first_difference("F(0,0)", "F(0,0) B(0,0)", msg, sizeof msg);
    ck_assert_str_eq(msg, "first difference at action 1: got end, want B(0,0)");
    first_difference("F(0,0) B(0,0)", "F(0,0) B(0,0)", msg, sizeof msg);
    ck_assert_str_eq(msg, "no difference");
    /* a pair is one action: pairing other jobs, or not pairing, differs */
    first_difference("F(0,0) [F(0,1) B(1,0)] B(0,1)", "F(0,0) F(0,1) B(1,0) B(0,1)", msg,
                     sizeof msg);
    ck_assert_str_eq(msg, "first difference at action 1: got [F(0,1) B(1,0)], want F(0,1)");
    first_difference("[F(0,1) B(1,0)] B(0,1)", "F(0,1) [B(1,0) B(0,1)]", msg, sizeof msg);
    ck_assert_str_eq(msg, "first difference at action 0: got [F(0,1) B(1,0)], want F(0,1)");
    int W, V, B, G;
    ck_assert(shape_of("zb-v-W4-V2-B12.txt", "zb-v", &W, &V, &B, &G) && W == 4 && V == 2 &&
              B == 12 && G == 0);
    ck_assert(
        shape_of("megatron-interleaved-W4-V2-B10-G5.txt", "megatron-interleaved", &W, &V, &B, &G) &&
        B == 10 && G == 5);
    ck_assert(!shape_of("zb-v-W4-V2-B12.txt.orig", "zb-v", &W, &V, &B, &G));
    ck_assert(!shape_of("interleaved-zb-W4-V2-B8.txt", "interleaved-1f1b", &W, &V, &B, &G));
}
END_TEST

Suite *orders_suite(void)
{
    Suite *s = suite_create("orders");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, first_difference_names_the_action);
    tcase_add_loop_test(tc, library_matches_reference_orders, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    suite_add_tcase(s, tc);
    return s;
}
