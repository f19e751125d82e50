/* table.c - `ppc --table`: the seed's Table 1 computed mechanically.
 *
 * Compiles the library's ddp, fsdp, gpipe, lpp and fslpp schedules with the
 * user's S, B, G, R (LPP and FSLPP in both of the seed's regimes: the given
 * B, and B = W = G*R for the regime S >= W >= B), simulates each with unit
 * costs and prints, per column, the measured value next to the seed's
 * entry evaluated at those parameters. */
#include "table.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"

typedef struct {
    const char *name, *file, *constraint;
    int regime2;                            /* B = W instead of the user's B */
    long long lat, act, wfetch, actst, wst; /* the seed's entries (filled per row) */
} row;

typedef struct {
    long long S, B, G, R;
} params;

/* The seed's Table 1, evaluated. */
static void seed_entries(row *r, const params *p, long long B)
{
    long long S = p->S, G = p->G, R = p->R;
    if (!strcmp(r->name, "DDP"))
        *r = (row){r->name, r->file, r->constraint, 0, S, 0, 0, S, S};
    else if (!strcmp(r->name, "FSDP"))
        *r = (row){r->name, r->file, r->constraint, 0, S, 0, S - 1, S, 1};
    else if (!strcmp(r->name, "GPipe"))
        *r = (row){r->name, r->file, r->constraint, 0, B + S - 1, 2 * B, 0, S, 1};
    else {
        int lpp = !strcmp(r->name, "LPP");
        long long lat = r->regime2 ? S : B + S / G - 1;
        *r = (row){
            r->name, r->file,        r->constraint, r->regime2, lat, 2 * B, lpp ? 0 : S / G - 1,
            S,       lpp ? S / R : 1};
    }
}

/* Compile one library schedule as far as its report (unit costs: the
 * library's cost lines are 1 or absent). */
static pp_compile_status measure(const char *path, const pp_define *defs, int ndefs, int tensor,
                                 pp_compiled *c)
{
    pp_compile_opts o = pp_compile_defaults();
    o.tensor = tensor;
    o.path = path;
    o.defs = defs;
    o.ndefs = ndefs;
    o.stop_after = PP_STAGE_REPORT;
    pp_compile_status st = pp_compile(&o, c);
    if (st == PP_COMPILE_IO)
        fprintf(stderr, "ppc --table: '%s' is in the schedule library; see --library\n", path);
    return st;
}

/* "min..max" of a per-worker count, or one number when they agree. */
static void range_cell(char *buf, size_t n, const pp_report *r, size_t field, double scale)
{
    double lo = 0, hi = 0;
    for (int w = 0; w < r->W; w++) {
        double v = (double)*(const long long *)((const char *)&r->w[w] + field) * scale;
        if (w == 0 || v < lo)
            lo = v;
        if (w == 0 || v > hi)
            hi = v;
    }
    if (lo == hi)
        snprintf(buf, n, "%g", hi);
    else
        snprintf(buf, n, "%g..%g", lo, hi);
}

pp_compile_status pp_print_table(FILE *f, const char *libdir, long long S, long long B, long long G,
                                 long long R, int tensor)
{
    params p = {S, B, G, R};
    row rows[] = {
        {"DDP", "ddp.pp", "W=B", 0, 0, 0, 0, 0, 0},
        {"FSDP", "fsdp.pp", "W=B", 0, 0, 0, 0, 0, 0},
        {"GPipe", "gpipe.pp", "W=S", 0, 0, 0, 0, 0, 0},
        {"LPP", "lpp.pp", "B>=S>=W=GR", 0, 0, 0, 0, 0, 0},
        {"LPP", "lpp.pp", "S>=W=GR>=B", 1, 0, 0, 0, 0, 0},
        {"FSLPP", "fslpp.pp", "B>=S>=W=G^2", 0, 0, 0, 0, 0, 0},
        {"FSLPP", "fslpp.pp", "S>=W=GR>=B", 1, 0, 0, 0, 0, 0},
    };
    fprintf(f,
            "The seed's Table 1 at S=%lld B=%lld G=%lld R=%lld, unit costs (T_F = T_B = 1).\n"
            "Each cell: measured / the seed's entry. Latency is the makespan in F+B units\n"
            "(makespan / 2); transfers and storage are per worker (min..max over workers);\n"
            "activation transfers count both passes, weight fetches one pass.\n\n",
            S, B, G, R);
    if (tensor > 1)
        fprintf(f,
                "With tensor = %d: W workers of %d ranks, each job's cost / %d; the last column\n"
                "is the tensor all-reduces per rank and step (each of batch x width floats).\n\n",
                tensor, tensor, tensor);
    fprintf(f, "%-6s %-12s %-4s %5s %5s | %-14s %-14s %-14s %-14s %-14s%s\n", "scheme",
            "constraint", "ok", "B", "W", "latency", "act transfers", "weight fetches",
            "act storage", "weight storage", tensor > 1 ? " tensor a-r" : "");
    pp_compile_status failed = PP_COMPILE_OK;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        row *r = &rows[i];
        long long b = r->regime2 ? G * R : B;
        int looped = !strcmp(r->file, "lpp.pp") || !strcmp(r->file, "fslpp.pp");
        seed_entries(r, &p, b);
        pp_define defs[4] = {{"S", S}, {"B", b}, {"G", G}, {"R", R}};
        int ndefs = looped ? 4 : 2;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", libdir, r->file);
        pp_compiled comp;
        pp_compile_status st = measure(path, defs, ndefs, tensor, &comp);
        if (st != PP_COMPILE_OK) {
            if (failed == PP_COMPILE_OK)
                failed = st;
            pp_compiled_free(&comp);
            continue;
        }
        const pp_report rep = comp.rep;
        long long gotW = comp.sch.W;
        int ok;
        if (!strcmp(r->constraint, "W=B"))
            ok = gotW == b;
        else if (!strcmp(r->constraint, "W=S"))
            ok = gotW == S;
        else if (r->regime2)
            ok = S >= gotW && gotW >= b;
        else
            ok = b >= S && S >= gotW && (r->name[0] == 'L' || G == R);
        char c[5][64], m[32];
        snprintf(c[0], 64, "%g / %lld", rep.makespan / 2, r->lat);
        range_cell(m, sizeof m, &rep, offsetof(pp_worker_report, act_recv), 1);
        snprintf(c[1], 64, "%s / %lld", m, r->act);
        range_cell(m, sizeof m, &rep, offsetof(pp_worker_report, weight_recv), 0.5);
        snprintf(c[2], 64, "%s / %lld", m, r->wfetch);
        range_cell(m, sizeof m, &rep, offsetof(pp_worker_report, peak_act), 1);
        snprintf(c[3], 64, "%s / %lld", m, r->actst);
        range_cell(m, sizeof m, &rep, offsetof(pp_worker_report, weight_store), 1);
        snprintf(c[4], 64, "%s / %lld", m, r->wst);
        fprintf(f, "%-6s %-12s %-4s %5lld %5lld | %-14s %-14s %-14s %-14s %-14s", r->name,
                r->constraint, ok ? "yes" : "no", b, gotW, c[0], c[1], c[2], c[3], c[4]);
        if (tensor > 1) {
            range_cell(m, sizeof m, &rep, offsetof(pp_worker_report, tensor_allreduces), 1);
            fprintf(f, " %s", m);
        }
        fputc('\n', f);
        pp_compiled_free(&comp);
    }
    fprintf(f, "\n'ok' says whether the row's constraint holds at these parameters; where it\n"
               "does not, the seed's entry need not apply. Storage is in stages (weights) and\n"
               "microbatch-stages (activations); report.txt gives the bytes.\n");
    return failed;
}
