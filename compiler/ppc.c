/* ppc.c - the schedule compiler's command line.
 *
 *   ppc FILE.pp -o DIR [-D NAME=VALUE]... [-q]
 *
 * Parses and checks the schedule, evaluates its functions at every job,
 * simulates it, lowers it to one instruction stream per worker and writes
 * DIR/rank<r>.bin (the plan the VM runs) and DIR/rank<r>.txt (its listing).
 * Exit codes: 0 success; 1 the schedule has errors (all are printed);
 * 2 bad command line; 3 a file could not be read or written. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobtable.h"
#include "lower.h"
#include "parse.h"
#include "schedule.h"
#include "sim.h"

enum { EXIT_SCHEDULE = 1, EXIT_USAGE = 2, EXIT_IO = 3 };

typedef struct {
    const char *file, *outdir;
    pp_define *defs;
    int ndefs, quiet;
} options;

static void usage(FILE *f)
{
    fprintf(f, "usage: ppc FILE.pp -o DIR [-D NAME=VALUE]... [-q]\n"
               "  -o DIR          write DIR/rank<r>.bin and DIR/rank<r>.txt for every worker r\n"
               "  -D NAME=VALUE   override the default of 'param NAME' (an integer)\n"
               "  -q              print nothing on success\n");
}

static int parse_define(const char *arg, pp_define *def)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        fprintf(stderr, "ppc: -D %s: expected NAME=VALUE, e.g. -D S=8\n", arg);
        return -1;
    }
    char *end;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (eq[1] == '\0' || *end != '\0' || errno == ERANGE) {
        fprintf(stderr, "ppc: -D %s: the value '%s' is not an integer\n", arg, eq + 1);
        return -1;
    }
    def->name = strndup(arg, (size_t)(eq - arg));
    def->value = v;
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->defs = calloc((size_t)argc, sizeof *o->defs);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-q"))
            o->quiet = 1;
        else if (!strcmp(a, "-o") || !strcmp(a, "-D")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ppc: %s needs an argument\n", a);
                return -1;
            }
            if (a[1] == 'o')
                o->outdir = argv[++i];
            else if (parse_define(argv[++i], &o->defs[o->ndefs++]))
                return -1;
        } else if (!strncmp(a, "-D", 2) && a[2]) {
            if (parse_define(a + 2, &o->defs[o->ndefs++]))
                return -1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ppc: unknown option '%s'\n", a);
            return -1;
        } else if (o->file) {
            fprintf(stderr, "ppc: more than one schedule file ('%s' and '%s')\n", o->file, a);
            return -1;
        } else
            o->file = a;
    }
    if (!o->file || !o->outdir) {
        fprintf(stderr, "ppc: %s\n", !o->file ? "no schedule file given" : "no output directory (-o DIR)");
        return -1;
    }
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int mkdir_p(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(path, 0777) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(path, 0777) && errno != EEXIST ? -1 : 0;
}

static int write_plans(const options *o, pp_plan *plans, int W)
{
    if (mkdir_p(o->outdir)) {
        fprintf(stderr, "ppc: cannot create directory '%s': %s\n", o->outdir, strerror(errno));
        return EXIT_IO;
    }
    char path[PATH_MAX], err[512];
    for (int r = 0; r < W; r++) {
        if (pp_plan_validate(&plans[r], err, sizeof err)) {
            fprintf(stderr, "ppc: internal error: rank %d's plan is invalid: %s\n", r, err);
            return EXIT_IO;
        }
        snprintf(path, sizeof path, "%s/rank%d.bin", o->outdir, r);
        if (pp_plan_write(&plans[r], path, err, sizeof err)) {
            fprintf(stderr, "ppc: %s\n", err);
            return EXIT_IO;
        }
        snprintf(path, sizeof path, "%s/rank%d.txt", o->outdir, r);
        FILE *f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "ppc: cannot write '%s': %s\n", path, strerror(errno));
            return EXIT_IO;
        }
        pp_plan_disasm(&plans[r], f);
        if (fclose(f)) {
            fprintf(stderr, "ppc: cannot write '%s': %s\n", path, strerror(errno));
            return EXIT_IO;
        }
    }
    /* Rank files of an earlier, wider compile would mix plans: remove them. */
    for (int r = W;; r++) {
        snprintf(path, sizeof path, "%s/rank%d.bin", o->outdir, r);
        if (unlink(path))
            break;
        snprintf(path, sizeof path, "%s/rank%d.txt", o->outdir, r);
        unlink(path);
    }
    return 0;
}

static void report_deadlock(pp_diag *d, const pp_jobtable *t, const pp_sim_result *sim,
                            int strict)
{
    diag_error_noloc(d, "the %s order deadlocks; each worker's blocked job:",
                     strict ? "strict" : "greedy (with its inflight limit)");
    for (int w = 0; w < t->W; w++) {
        int j = sim->blocked[w];
        if (j < 0)
            continue;
        int p = job_pred(&t->js, j);
        fprintf(d->out, "  worker %d waits at %c(%d,%d)", w, dir_char(job_d(&t->js, j)),
                job_s(&t->js, j), job_b(&t->js, j));
        if (strict && p >= 0)
            fprintf(d->out, ", which needs %c(%d,%d) from worker %d\n", dir_char(job_d(&t->js, p)),
                    job_s(&t->js, p), job_b(&t->js, p), t->worker[p]);
        else
            fprintf(d->out, ": at its inflight limit with no backward left to run\n");
    }
}

static void summary(const options *o, const pp_schedule *sch, const pp_jobtable *t,
                    const pp_sim_result *sim, const pp_plan *plans)
{
    double busy = 0;
    for (int j = 0; j < job_count(&t->js); j++)
        busy += t->cost[j];
    printf("%s: S=%lld B=%lld W=%lld, %s order: makespan %g, bubble %.1f%%\n", o->file, sch->S,
           sch->B, sch->W, sch->strict ? "strict" : "greedy", sim->makespan,
           100.0 * (1.0 - busy / ((double)t->W * sim->makespan)));
    printf("wrote %s/rank0..%lld.{bin,txt}, plan id %016llx\n", o->outdir, sch->W - 1,
           (unsigned long long)plans[0].plan_id);
}

int main(int argc, char **argv)
{
    options o;
    if (parse_args(argc, argv, &o)) {
        usage(stderr);
        return EXIT_USAGE;
    }
    size_t len = 0;
    char *src = read_file(o.file, &len);
    if (!src) {
        fprintf(stderr, "ppc: cannot read '%s': %s\n", o.file, strerror(errno));
        return EXIT_IO;
    }
    pp_diag d;
    diag_init(&d, o.file, src, len, stderr);
    pp_schedule sch = {0};
    pp_jobtable t = {0};
    pp_sim_result sim = {0};
    pp_plan *plans = NULL;
    int rc = EXIT_SCHEDULE;
    pp_stmt *stmts = pp_parse(&d);
    if (pp_schedule_check(&sch, &d, stmts, o.defs, o.ndefs) || d.errors)
        goto out;
    if (pp_jobtable_build(&t, &sch))
        goto out;
    pp_sim_input in = {t.js, t.W, t.worker, t.priority, t.cost, sch.strict, t.inflight};
    int srun = pp_simulate(&in, &sim);
    if (srun < 0) {
        diag_error_noloc(&d, "out of memory in the simulator");
        goto out;
    }
    if (srun > 0) {
        report_deadlock(&d, &t, &sim, sch.strict);
        goto out;
    }
    plans = calloc((size_t)t.W, sizeof *plans);
    if (!plans || pp_lower(&t, &sim, &sch.model, &d, plans))
        goto out;
    rc = write_plans(&o, plans, t.W);
    if (rc == 0 && !o.quiet)
        summary(&o, &sch, &t, &sim, plans);
out:
    if (d.errors)
        fprintf(stderr, "%s: %d error%s\n", o.file, d.errors, d.errors == 1 ? "" : "s");
    for (int w = 0; plans && w < t.W; w++)
        pp_plan_free(&plans[w]);
    free(plans);
    pp_sim_free(&sim);
    pp_jobtable_free(&t);
    pp_schedule_free(&sch);
    ast_free_stmts(stmts);
    for (int i = 0; i < o.ndefs; i++)
        free((char *)o.defs[i].name);
    free(o.defs);
    free(src);
    return rc;
}
