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

#include "../../compiler/compile.h"

typedef struct {
    const char *file;
    pp_define defs[4];
    int ndefs;
} bench_case;

/* Compiles one case as far as its report (pp_compile times each stage). */
static int run(const char *root, const bench_case *bc)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", root, bc->file);
    pp_compile_opts o = pp_compile_defaults();
    o.path = path;
    o.defs = bc->defs;
    o.ndefs = bc->ndefs;
    o.stop_after = PP_STAGE_REPORT;
    pp_compiled c;
    int rc = pp_compile(&o, &c) == PP_COMPILE_OK ? 0 : -1;
    if (rc == 0) {
        double table = c.seconds[PP_STAGE_JOBS], sim = c.seconds[PP_STAGE_SIMULATE],
               report = c.seconds[PP_STAGE_REPORT];
        char params[96] = "";
        for (int i = 0; i < bc->ndefs; i++)
            snprintf(params + strlen(params), sizeof params - strlen(params), "%s%s=%lld",
                     i ? " " : "", bc->defs[i].name, bc->defs[i].value);
        printf("%-20s %-24s %6s %9d %6lld %9.3f %9.3f %9.3f %9.2f %8.2fx\n", bc->file, params,
               c.sch.strict ? "strict" : "greedy", job_count(&c.t.js), c.sch.W, table, sim,
               report, job_count(&c.t.js) / sim / 1e6, 1.0 / sim);
    }
    pp_compiled_free(&c);
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
