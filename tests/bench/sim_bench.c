/* sim_bench.c - how fast ppc simulates and reports a million jobs.
 *
 * The simulator is O(N log N) (sim.h); the issue's target is 1,000,000 jobs
 * in under a second on the development machine. For each library schedule
 * at about 1M jobs this prints the time to evaluate the job table, to
 * simulate, and to build the report, and the simulation's ratio to the
 * one-second target, all measured in this one run. Not a test: run it with
 * `make bench`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../compiler/jobtable.h"
#include "../../compiler/parse.h"
#include "../../compiler/readfile.h"
#include "../../compiler/report.h"
#include "../../compiler/schedule.h"
#include "../../compiler/sim.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *file;
    pp_define defs[4];
    int ndefs;
} bench_case;

static int run(const char *root, const bench_case *bc)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", root, bc->file);
    char *src = pp_read_file(path, NULL, NULL);
    if (!src) {
        fprintf(stderr, "sim_bench: cannot read %s\n", path);
        return -1;
    }
    pp_diag d;
    diag_init(&d, path, src, strlen(src), stderr);
    pp_schedule sch = {0};
    pp_jobtable t = {0};
    pp_sim_result sim = {0};
    pp_report rep = {0};
    int rc = -1;
    pp_stmt *stmts = pp_parse(&d);
    if (pp_schedule_check(&sch, &d, stmts, bc->defs, bc->ndefs) || d.errors)
        goto out;
    double t0 = now();
    if (pp_jobtable_build(&t, &sch, NULL))
        goto out;
    double t1 = now();
    pp_sim_input in = pp_jobtable_sim_input(&t, sch.strict);
    if (pp_simulate(&in, &sim))
        goto out;
    double t2 = now();
    if (pp_report_build(&rep, &t, &sim, &sch.model))
        goto out;
    double t3 = now();
    char params[96] = "";
    for (int i = 0; i < bc->ndefs; i++)
        snprintf(params + strlen(params), sizeof params - strlen(params), "%s%s=%lld",
                 i ? " " : "", bc->defs[i].name, bc->defs[i].value);
    printf("%-20s %-24s %6s %9d %6lld %9.3f %9.3f %9.3f %9.2f %8.2fx\n", bc->file, params,
           sch.strict ? "strict" : "greedy", job_count(&t.js), sch.W, t1 - t0, t2 - t1, t3 - t2,
           job_count(&t.js) / (t2 - t1) / 1e6, 1.0 / (t2 - t1));
    rc = 0;
out:
    pp_report_free(&rep);
    pp_sim_free(&sim);
    pp_jobtable_free(&t);
    pp_schedule_free(&sch);
    ast_free_stmts(stmts);
    free(src);
    return rc;
}

int main(int argc, char **argv)
{
    const char *root = argc > 1 ? argv[1] : ".";
    static const bench_case cases[] = {
        {"gpipe.pp", {{"S", 64}, {"B", 8192}}, 2},
        {"1f1b.pp", {{"S", 64}, {"B", 8192}}, 2},
        {"1f1b-greedy.pp", {{"S", 64}, {"B", 8192}}, 2},
        {"interleaved-1f1b.pp", {{"W", 16}, {"V", 4}, {"B", 8192}}, 3},
        {"lpp.pp", {{"S", 64}, {"B", 8192}, {"G", 8}, {"R", 8}}, 4},
        {"ddp.pp", {{"S", 8}, {"B", 65536}}, 2},
        {"zb-h1.pp", {{"S", 32}, {"B", 10923}}, 2},
    };
    printf("1,000,000-job simulations; target: simulate in under 1 s (ratio = 1 s / sim time)\n\n");
    printf("%-20s %-24s %6s %9s %6s %9s %9s %9s %9s %9s\n", "schedule", "params", "order", "jobs",
           "W", "table s", "sim s", "report s", "Mjobs/s", "vs 1 s");
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        failed += run(root, &cases[i]) != 0;
    return failed ? 1 : 0;
}
