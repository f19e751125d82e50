/* test_torch_csv.c - the torch_csv suite: ppc --emit torch-csv, the per-rank
 * action lists PyTorch's pipeline runtime loads (compiler/torch_csv.h).
 *
 * - golden: 1F1B and ZB-H1 at S = W = 4, B = 8 equal, row by row, the
 *   CSVs PyTorch made (tests/golden/torch-csv, written by
 *   tests/bench/torch_csv_run.py --write-golden: Schedule1F1B's actions as
 *   it ran them, ScheduleInterleavedZeroBubble's own _dump_csv); so does
 *   dualpipev.pp at W = 4, B = 10, overlapped pairs as (F;B)OVERLAP_F_B
 *   cells included (ScheduleDualPipeV's _dump_csv, written by `make
 *   torch-orders`, tests/bench/torch_orders.py). PyTorch's
 *   dump keeps idle steps as empty cells, which its loader skips; pp writes
 *   none, so the golden is compared without them.
 * - grammar: every cell of every library schedule the writer accepts, in
 *   the grammar of PyTorch's _Action.from_str, and the rows obey what
 *   PyTorch's _validate_schedule demands; the schedules it must refuse are
 *   refused for the reason they have.
 * - ppc: refusals and bad command lines exit as ppc's other errors do,
 *   with one line saying why, and write nothing. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/torch_csv.h"
#include "suites.h"
#include "testutil.h"

/* ---- reading CSV ------------------------------------------------------------ */

typedef struct {
    int nrows;
    int ncells[64];
    char *cells[64][512];
    int empty; /* empty cells seen (skipped) */
} csv_rows;

/* Splits text into rows of non-empty cells; \r\n and \n both end a row
 * (Python's csv writer ends rows with \r\n). Fails the test on overflow. */
static void csv_parse(const char *text, csv_rows *r)
{
    memset(r, 0, sizeof *r);
    const char *p = text;
    while (*p) {
        ck_assert_msg(r->nrows < 64, "more than 64 rows");
        int row = r->nrows++;
        for (;;) {
            size_t n = strcspn(p, ",\r\n");
            if (n == 0)
                r->empty++;
            else {
                ck_assert_msg(r->ncells[row] < 512, "row %d: more than 512 cells", row);
                r->cells[row][r->ncells[row]++] = strndup(p, n);
            }
            p += n;
            if (*p != ',')
                break;
            p++;
        }
        if (*p == '\r')
            p++;
        if (*p == '\n')
            p++;
    }
    /* A row of no cells at all ("\n") still counts, as a line: PyTorch's
     * csv.reader gives it as an empty row. */
}

static void csv_free(csv_rows *r)
{
    for (int i = 0; i < r->nrows; i++)
        for (int k = 0; k < r->ncells[i]; k++)
            free(r->cells[i][k]);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n + 4096 + 1 > cap)
            buf = realloc(buf, cap = 2 * cap + 8192);
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* ---- the grammar ------------------------------------------------------------ */

/* A decimal without leading zeros (what %d prints): its value, or -1. */
static long number(const char **p)
{
    const char *s = *p;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
        return -1;
    long v = 0;
    while (*s >= '0' && *s <= '9' && v < 100000000)
        v = v * 10 + (*s++ - '0');
    *p = s;
    return v;
}

/* cell := STAGE KIND MICROBATCH, KIND one of F B I W (the compute kinds of
 * PyTorch's _ComputationType), all of it: 0 and *s, *kind, *b, or -1. */
static int parse_cell(const char *cell, long *s, char *kind, long *b)
{
    const char *p = cell;
    if ((*s = number(&p)) < 0 || !strchr("FBIW", *p) || !*p)
        return -1;
    *kind = *p++;
    if ((*b = number(&p)) < 0 || *p)
        return -1;
    return 0;
}

/* Checks rows against the grammar and what PyTorch's loader requires
 * (_validate_schedule): W rows; each stage on one rank; per (stage,
 * microbatch) one F, then one B, or one I and then one W (an I with a split
 * backward, a B without); stages < S, microbatches < B. NULL, or what is
 * wrong (static). */
/* One cell of rank w: NULL, or what is wrong (in why). rank[s]: the rank
 * stage s was seen on; seen[s*B+b]: the kinds done (F 1, B or I 2, W 4). */
static const char *check_cell(const char *cell, int w, int S, int B, int split, int *rank,
                              int *seen, char *why, size_t n)
{
    long s, b;
    char kind;
    if (parse_cell(cell, &s, &kind, &b) || s >= S || b >= B) {
        snprintf(why, n, "rank %d: '%s' is not STAGE(F|B|I|W)MICROBATCH in range", w, cell);
        return why;
    }
    if ((kind == 'B' && split == 1) || ((kind == 'I' || kind == 'W') && !split)) {
        snprintf(why, n, "rank %d: '%s': %c %s split backward", w, cell, kind,
                 split ? "with a" : "without a");
        return why;
    }
    if (rank[s] >= 0 && rank[s] != w) {
        snprintf(why, n, "stage %ld on ranks %d and %d", s, rank[s], w);
        return why;
    }
    rank[s] = w;
    /* What each kind needs before it: B and I the F, W the F and the I (a
     * whole B sets bit 8 too, so no W may follow it: split == 2, a mixed
     * backward, has both kinds, each (s,b) one or the other). */
    int bit = kind == 'F' ? 1 : kind == 'W' ? 4 : 2, need = bit == 1 ? 0 : bit == 2 ? 1 : 3;
    int *m = &seen[s * B + b];
    if ((*m & bit) || (*m & need) != need || (kind == 'W' && (*m & 8))) {
        snprintf(why, n, "rank %d: '%s' twice, or before what it needs", w, cell);
        return why;
    }
    *m |= bit | (kind == 'B' && split == 2 ? 8 : 0);
    return NULL;
}

/* A cell, or an overlapped pair "(A;B)OVERLAP_F_B" (PyTorch's sub-action
 * form): a forward and a backward (B or I) of different microbatches on
 * this rank, each checked as a cell of its own, in the order written. */
static const char *check_overlap_or_cell(const char *cell, int w, int S, int B, int split,
                                         int *rank, int *seen, char *why, size_t n)
{
    static const char tail[] = ")OVERLAP_F_B";
    size_t len = strlen(cell), tl = sizeof tail - 1;
    if (cell[0] != '(')
        return check_cell(cell, w, S, B, split, rank, seen, why, n);
    char a[64], b[64];
    const char *semi = strchr(cell, ';');
    if (len <= tl + 4 || strcmp(cell + len - tl, tail) || !semi || semi - cell - 1 >= 64 ||
        (size_t)(cell + len - tl - semi - 1) >= sizeof b) {
        snprintf(why, n, "rank %d: '%s' is not (ACTION;ACTION)OVERLAP_F_B", w, cell);
        return why;
    }
    snprintf(a, sizeof a, "%.*s", (int)(semi - cell - 1), cell + 1);
    snprintf(b, sizeof b, "%.*s", (int)(cell + len - tl - semi - 1), semi + 1);
    long sa, ba, sb, bb;
    char ka, kb;
    if (parse_cell(a, &sa, &ka, &ba) || parse_cell(b, &sb, &kb, &bb) ||
        !((ka == 'F') ^ (kb == 'F')) || strchr("W", ka == 'F' ? kb : ka) || ba == bb) {
        snprintf(why, n,
                 "rank %d: '%s': expected a forward and a backward (B or I) of "
                 "different microbatches",
                 w, cell);
        return why;
    }
    const char *bad = check_cell(a, w, S, B, split, rank, seen, why, n);
    return bad ? bad : check_cell(b, w, S, B, split, rank, seen, why, n);
}

/* split: 0 no backward is split (B cells only), 1 every one is (I and W),
 * 2 some are (`split backward when`: each stage and microbatch a B, or an I
 * and a W). */
static const char *check_rows(const csv_rows *r, int W, int S, int B, int split)
{
    static char why[512];
    if (r->nrows != W || r->empty) {
        snprintf(why, sizeof why, "%d rows and %d empty cells, expected %d rows and none", r->nrows,
                 r->empty, W);
        return why;
    }
    int *rank = malloc(sizeof(int) * (size_t)S), *seen = calloc((size_t)S * (size_t)B, sizeof(int));
    for (int s = 0; s < S; s++)
        rank[s] = -1;
    const char *bad = NULL;
    for (int w = 0; w < W && !bad; w++)
        for (int k = 0; k < r->ncells[w] && !bad; k++)
            bad =
                check_overlap_or_cell(r->cells[w][k], w, S, B, split, rank, seen, why, sizeof why);
    int full = split == 1 ? 7 : 3;
    for (int i = 0; i < S * B && !bad; i++)
        if (seen[i] != full && !(split == 2 && (seen[i] == 7 || seen[i] == (3 | 8)))) {
            snprintf(why, sizeof why, "stage %d microbatch %d: not every action once", i / B,
                     i % B);
            bad = why;
        }
    free(rank);
    free(seen);
    return bad;
}

/* ---- golden ------------------------------------------------------------------- */

static const struct {
    const char *schedule, *golden, *defs;
    int W, S, B, split; /* split as check_rows takes it */
} goldens[] = {
    /* Schedule1F1B, as it ran */
    {"1f1b", "torch-1f1b-S4-B8.csv", "-D S=4 -D B=8", 4, 4, 8, 0},
    /* ScheduleInterleavedZeroBubble._dump_csv */
    {"zb-h1", "torch-zb-h1-S4-B8.csv", "-D S=4 -D B=8", 4, 4, 8, 1},
    /* ScheduleDualPipeV._dump_csv: OVERLAP_F_B pairs, some backwards split */
    {"dualpipev", "torch-dualpipev-W4-B10.csv", "-D W=4 -D B=10", 4, 8, 10, 2},
};

START_TEST(matches_pytorch)
{
    char *dir = temp_dir(), cmd[2048], path[1024];
    int W = goldens[_i].W;
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/%s.pp %s --emit torch-csv %s -q", PP_ROOT,
             PP_ROOT, goldens[_i].schedule, goldens[_i].defs, dir);
    free(run_expect(cmd, 0));
    snprintf(path, sizeof path, "%s/%s.csv", dir, goldens[_i].schedule);
    char *mine_text = slurp(path);
    snprintf(path, sizeof path, "%s/tests/golden/torch-csv/%s", PP_ROOT, goldens[_i].golden);
    char *gold_text = slurp(path);
    csv_rows *mine = malloc(sizeof *mine), *gold = malloc(sizeof *gold);
    csv_parse(mine_text, mine);
    csv_parse(gold_text, gold);
    ck_assert_msg(mine->empty == 0, "pp wrote %d empty cells", mine->empty);
    ck_assert_int_eq(mine->nrows, W);
    ck_assert_int_eq(gold->nrows, W);
    for (int r = 0; r < W; r++) {
        ck_assert_msg(mine->ncells[r] == gold->ncells[r],
                      "%s rank %d: %d actions, PyTorch's %d\n%s", goldens[_i].schedule, r,
                      mine->ncells[r], gold->ncells[r], mine_text);
        for (int k = 0; k < mine->ncells[r]; k++)
            ck_assert_msg(!strcmp(mine->cells[r][k], gold->cells[r][k]),
                          "%s rank %d action %d: pp %s, PyTorch %s\npp:\n%s\nPyTorch:\n%s",
                          goldens[_i].schedule, r, k, mine->cells[r][k], gold->cells[r][k],
                          mine_text, gold_text);
    }
    /* The golden is a schedule PyTorch accepts, by the same rules. */
    const char *bad = check_rows(mine, W, goldens[_i].S, goldens[_i].B, goldens[_i].split);
    ck_assert_msg(bad == NULL, "%s: %s", goldens[_i].schedule, bad);
    csv_free(mine);
    csv_free(gold);
    free(mine);
    free(gold);
    free(mine_text);
    free(gold_text);
    remove_dir(dir);
}
END_TEST

/* ---- every library schedule --------------------------------------------------- */

/* Library schedules PyTorch cannot run, and the start of why: every one
 * (a file refused but not listed here fails, so a new file's refusal is
 * expected, not skipped). */
static const struct {
    const char *file, *why;
} refused[] = {
    {"ddp.pp", "stage 0's weights live on workers 0 (F(0,0)) and 1 (F(0,1)): replicas"},
    {"lpp.pp", "stage 0's weights live on workers 0 (F(0,0)) and 2 (F(0,1)): replicas"},
    {"fsdp.pp",
     "F(0,1) computes on worker 1, away from stage 0's weights on worker 0 (a weight fetch"},
    {"fslpp.pp",
     "F(0,1) computes on worker 2, away from stage 0's weights on worker 0 (a weight fetch"},
    {"pp-dp.pp", "stage 0's weights live on workers 0 (F(0,0)) and 4 (F(0,1)): replicas"},
    {"pp-fsdp.pp",
     "F(0,1) computes on worker 1, away from stage 0's weights on worker 0 (a weight fetch"},
    /* recompute and offload (issue 26): PyTorch's actions have neither */
    {"1f1b-recompute.pp", "R(0,0) re-runs a forward to rebuild its stash ('recompute')"},
    {"1f1b-bubble-recompute.pp", "R(0,0) re-runs a forward to rebuild its stash ('recompute')"},
    {"1f1b-offload.pp", "(s=0, b=0)'s stash is offloaded to host memory ('offload')"},
};
/* Library schedules it must accept (others added later are checked too). */
static const char *const accepted[] = {
    "gpipe.pp",       "1f1b.pp",  "1f1b-greedy.pp", "interleaved-1f1b.pp", "breadth-first.pp",
    "depth-first.pp", "zb-h1.pp", "1f1b-gpt.pp",    "v-overlap.pp",        "1f1b-overlap.pp"};

/* One library schedule at its defaults, or with -D B=4 (a second shape):
 * accepted ones write rows of good cells; refused ones are listed in
 * refused[] and say why. 1 if it was accepted. */
static int check_library_file(const char *file, const pp_define *defs, int ndefs)
{
    compiled c;
    compile_library(&c, file, defs, ndefs);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s: %s", file, c.msgs);
    char why[512];
    int st = pp_torch_csv_check(&c.t, why, sizeof why), listed = 0;
    ck_assert_int_ge(st, 0);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (!strcmp(file, refused[i].file)) {
            listed = 1;
            ck_assert_msg(st == 1 && !strncmp(why, refused[i].why, strlen(refused[i].why)),
                          "%s: expected refused with '%s...', got %d '%s'", file, refused[i].why,
                          st, st ? why : "");
        }
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++)
        if (!strcmp(file, accepted[i]))
            ck_assert_msg(st == 0, "%s refused: %s", file, why);
    ck_assert_msg(st == 0 || listed,
                  "%s refused, but not among the expected refusals (add it to refused[] with "
                  "its reason if PyTorch cannot run it): %s",
                  file, why);
    if (st == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        ck_assert_int_eq(pp_torch_csv_write(f, &c.t, &c.sim), 0);
        fclose(f);
        csv_rows *rows = malloc(sizeof *rows);
        csv_parse(text, rows);
        const char *bad = check_rows(rows, c.t.W, c.t.js.S, c.t.js.B,
                                     c.t.js.ND < 3  ? 0
                                     : c.t.js.split ? 2
                                                    : 1);
        ck_assert_msg(bad == NULL, "%s: %s\n%s", file, bad, text);
        /* Each row is its worker's jobs in the simulator's order, an
         * overlapped pair (adjacent there) one cell. */
        for (int w = 0; w < c.t.W; w++) {
            int k = 0;
            for (int i = c.sim.off[w]; i < c.sim.off[w + 1]; i++, k++) {
                char cell[160], mate[64], pair[160];
                int j = c.sim.order[i];
                pp_torch_csv_action(&c.t, j, cell, 64);
                if (c.sim.partner && c.sim.partner[j] >= 0) {
                    ck_assert_msg(i + 1 < c.sim.off[w + 1] &&
                                      c.sim.order[i + 1] == c.sim.partner[j],
                                  "%s: a pair not adjacent in worker %d's order", file, w);
                    pp_torch_csv_action(&c.t, c.sim.order[++i], mate, sizeof mate);
                    snprintf(pair, sizeof pair, "(%.63s;%.63s)OVERLAP_F_B", cell, mate);
                    memcpy(cell, pair, sizeof cell);
                }
                ck_assert_msg(k < rows->ncells[w], "%s: worker %d's row is short", file, w);
                ck_assert_str_eq(rows->cells[w][k], cell);
            }
            ck_assert_int_eq(rows->ncells[w], k);
        }
        csv_free(rows);
        free(rows);
        free(text);
    }
    compiled_free(&c);
    return st == 0;
}

START_TEST(library_cells_in_grammar)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules", PP_ROOT);
    DIR *d = opendir(path);
    ck_assert_msg(d != NULL, "cannot open %s", path);
    int files = 0, ok = 0;
    struct dirent *e;
    pp_define b4 = {"B", 4};
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, ".pp"))
            continue;
        files++;
        ok += check_library_file(e->d_name, NULL, 0);
        /* The accepted ones at B = 4 too (a file added later may have
         * constraints that B = 4 breaks). */
        for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++)
            if (!strcmp(e->d_name, accepted[i]))
                check_library_file(e->d_name, &b4, 1);
    }
    closedir(d);
    ck_assert_int_ge(files, 12);
    /* every file written or refused as expected (check_library_file), and
     * every expected refusal a file of the library */
    ck_assert_msg(ok + (int)(sizeof refused / sizeof refused[0]) == files,
                  "%d library files: %d written, %d expected refused", files, ok,
                  (int)(sizeof refused / sizeof refused[0]));
    ck_assert_int_ge(ok, (int)(sizeof accepted / sizeof accepted[0]));
}
END_TEST

/* The cell of each kind: F, B without a split backward, I and W with one. */
START_TEST(action_names)
{
    compiled c;
    compile_library(&c, "zb-h1.pp", NULL, 0);
    char cell[64];
    pp_torch_csv_action(&c.t, job_id(&c.t.js, 3, 7, 0), cell, sizeof cell);
    ck_assert_str_eq(cell, "3F7");
    pp_torch_csv_action(&c.t, job_id(&c.t.js, 2, 5, 1), cell, sizeof cell);
    ck_assert_str_eq(cell, "2I5");
    pp_torch_csv_action(&c.t, job_id(&c.t.js, 0, 0, 2), cell, sizeof cell);
    ck_assert_str_eq(cell, "0W0");
    compiled_free(&c);
    compile_library(&c, "1f1b.pp", NULL, 0);
    pp_torch_csv_action(&c.t, job_id(&c.t.js, 1, 6, 1), cell, sizeof cell);
    ck_assert_str_eq(cell, "1B6");
    compiled_free(&c);
}
END_TEST

/* ---- ppc ------------------------------------------------------------------------ */

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Runs `args` after "cd DIR && $PPC" and asserts its status and a line of
 * its output; for status 2, nothing but that line and the hint. */
static void ppc_expect(const char *dir, const char *args, int status, const char *says)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc %s", dir, PP_ROOT, args);
    char *out = run_expect(cmd, status);
    ck_assert_msg(strstr(out, says), "%s\nexpected to say: %s\nsaid:\n%s", args, says, out);
    if (status == 2)
        ck_assert_msg(!strstr(out, "usage:") && strstr(out, "ppc: see ppc --help") &&
                          count_lines(out) == 2,
                      "%s: more than one line and the hint:\n%s", args, out);
    free(out);
}

/* What ls prints for dir (sorted names, one a line), "" if none. */
static char *listing(const char *dir)
{
    char cmd[2200], *out;
    snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null", dir);
    run_cmd(cmd, &out);
    return out;
}

START_TEST(refusals_exit_1_and_write_nothing)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && cp %s/schedules/ddp.pp %s/schedules/fsdp.pp . && "
             "printf 'param S = 4\\nparam B = 4\\nparam W = 5\\ncompute(s,b,d) = s\\n' > idle.pp",
             dir, PP_ROOT, PP_ROOT);
    free(run_expect(cmd, 0));
    ppc_expect(
        dir, "ddp.pp --emit torch-csv csv", 1,
        "ddp.pp: error: cannot emit torch-csv: stage 0's weights live on workers 0 (F(0,0)) "
        "and 1 (F(0,1)): replicas all-reduced as DDP does, but a PyTorch pipeline CSV places "
        "each stage on one rank");
    ppc_expect(
        dir, "fsdp.pp --emit torch-csv csv -o plan", 1,
        "fsdp.pp: error: cannot emit torch-csv: F(0,1) computes on worker 1, away from stage "
        "0's weights on worker 0 (a weight fetch, as FSDP does), but PyTorch's pipeline "
        "runtime runs a stage only on the rank that holds it");
    ppc_expect(dir, "idle.pp --emit torch-csv csv", 1,
               "idle.pp: error: cannot emit torch-csv: worker 4 computes no job, but every rank of "
               "a PyTorch pipeline holds a stage (W = 5 workers for S = 4 stages)");
    /* One line: the error alone. */
    char *out;
    snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ppc idle.pp --emit torch-csv csv", dir, PP_ROOT);
    ck_assert_int_eq(run_cmd(cmd, &out), 1);
    ck_assert_msg(count_lines(out) == 1, "not one line:\n%s", out);
    free(out);
    /* Nothing written, not even -o's report. */
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/csv %s/plan", dir, dir);
    out = listing(sub);
    ck_assert_msg(out[0] == '\0', "a refused compile wrote: %s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

START_TEST(bad_command_lines_exit_2)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/schedules/1f1b.pp %s/", PP_ROOT, dir);
    free(run_expect(cmd, 0));
    ppc_expect(dir, "1f1b.pp --emit", 2,
               "ppc: --emit needs a format and a directory, e.g. --emit torch-csv out/csv");
    ppc_expect(dir, "1f1b.pp --emit csv out", 2,
               "ppc: --emit 'csv': unknown format; expected torch-csv");
    ppc_expect(dir, "1f1b.pp --emit torch-csv", 2,
               "ppc: --emit torch-csv needs a directory, e.g. --emit torch-csv out/csv");
    ppc_expect(dir, "1f1b.pp --emit torch-csv ''", 2,
               "ppc: --emit torch-csv: expected a directory, found an empty string");
    ppc_expect(dir, "1f1b.pp --emit torch-csv a --emit torch-csv b", 2,
               "ppc: --emit given twice; give it once");
    ppc_expect(dir, "--table --emit torch-csv a", 2,
               "ppc: --table takes only -D S/B/G/R and --library, not --emit");
    remove_dir(dir);
}
END_TEST

/* Outputs that cannot be written exit 3, as ppc's others do. */
START_TEST(unwritable_outputs_exit_3)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/schedules/1f1b.pp %s/ && mkdir -p %s/taken/1f1b.csv", PP_ROOT,
             dir, dir);
    free(run_expect(cmd, 0));
    ppc_expect(dir, "1f1b.pp --emit torch-csv 1f1b.pp/sub", 3,
               "ppc: cannot create directory '1f1b.pp/sub': Not a directory");
    ppc_expect(dir, "1f1b.pp --emit torch-csv taken", 3,
               "ppc: cannot write 'taken/1f1b.csv': Is a directory");
    remove_dir(dir);
}
END_TEST

/* With -o, the plans and the CSV; the CSV is the same as without -o. The
 * file is named after the schedule, without ".pp". */
START_TEST(with_and_without_o)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/schedules/zb-h1.pp %s/my.zb.pp", PP_ROOT, dir);
    free(run_expect(cmd, 0));
    ppc_expect(dir, "my.zb.pp --emit torch-csv alone", 0,
               "wrote alone/my.zb.csv: torch.distributed.pipelining actions (compute_only), 4 rows "
               "for 4 ranks, 96 actions");
    ppc_expect(dir, "my.zb.pp -o plan --emit torch-csv both", 0, "wrote both/my.zb.csv");
    char path[1024], *a, *b, *out;
    snprintf(path, sizeof path, "%s/alone/my.zb.csv", dir);
    a = slurp(path);
    snprintf(path, sizeof path, "%s/both/my.zb.csv", dir);
    b = slurp(path);
    ck_assert_str_eq(a, b);
    snprintf(path, sizeof path, "%s/plan", dir);
    out = listing(path);
    ck_assert_msg(strstr(out, "rank3.bin") && strstr(out, "report.txt"), "-o wrote: %s", out);
    free(out);
    /* Without -o, only the CSV. */
    snprintf(path, sizeof path, "%s/alone", dir);
    out = listing(path);
    ck_assert_str_eq(out, "my.zb.csv\n");
    free(out);
    free(a);
    free(b);
    remove_dir(dir);
}
END_TEST

Suite *torch_csv_suite(void)
{
    Suite *s = suite_create("torch_csv");
    TCase *tc = tcase_create("writer");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, matches_pytorch, 0, (int)(sizeof goldens / sizeof goldens[0]));
    tcase_add_test(tc, library_cells_in_grammar);
    tcase_add_test(tc, action_names);
    tcase_add_test(tc, refusals_exit_1_and_write_nothing);
    tcase_add_test(tc, bad_command_lines_exit_2);
    tcase_add_test(tc, unwritable_outputs_exit_3);
    tcase_add_test(tc, with_and_without_o);
    suite_add_tcase(s, tc);
    return s;
}
