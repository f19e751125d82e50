/* report_tensor.c - tensor parallelism in the report (issue 27, report.h):
 * how many tensor all-reduces each worker's ranks make in a step and how
 * many bytes they sum, in report.txt and report.json. Nothing is written
 * when T = 1, so those reports stay as they were. */
#include <inttypes.h>

#include "../isa/tensor.h"
#include "report.h"

void pp_report_tensor_build(pp_report *r, const pp_jobtable *t, const pp_model *m)
{
    r->tensor = pp_model_tensor(m);
    if (r->tensor < 2)
        return;
    const pp_jobspace *js = &t->js;
    uint64_t bytes = pp_tensor_allreduce_bytes(m);
    for (int j = 0; j < job_count(js); j++) {
        if (!job_exists(js, j) || job_d(js, j) == DIR_W)
            continue;
        long long n = pp_tensor_allreduces(m, job_s(js, j));
        r->w[t->worker[j]].tensor_allreduces += n;
        r->w[t->worker[j]].tensor_bytes += (uint64_t)n * bytes;
    }
}

/* "64.0 KiB": as report_write.c's pp_human_bytes, kept here so that the two
 * files do not call each other */
static const char *human(uint64_t bytes, char *buf)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, 16, "%" PRIu64 " B", bytes);
    else
        snprintf(buf, 16, "%.1f %s", v, unit[u]);
    return buf;
}

void pp_report_tensor_txt(FILE *f, const pp_report *r, const pp_jobtable *t)
{
    if (r->tensor < 2)
        return;
    char hb[2][16];
    fprintf(f,
            "tensor    T=%u ranks per worker (rank = w*%u + t), compute / %u; per rank and step "
            "%lld all-reduces, %s (worker 0); ",
            r->tensor, r->tensor, r->tensor, r->w[0].tensor_allreduces,
            human(r->w[0].tensor_bytes, hb[0]));
    if (t->tensor_bandwidth > 0)
        fprintf(f, "each takes %g + bytes / %g\n", t->tensor_latency, t->tensor_bandwidth);
    else
        fprintf(f, "each takes %g, bandwidth unlimited\n", t->tensor_latency);
    fprintf(f, "          all workers' ranks: %lld all-reduces, %s\n",
            r->total.tensor_allreduces * r->tensor,
            human(r->total.tensor_bytes * r->tensor, hb[1]));
}

void pp_report_tensor_json(FILE *f, const pp_report *r, const pp_jobtable *t)
{
    if (r->tensor < 2)
        return;
    fprintf(f,
            "  \"tensor\": {\"T\": %u, \"latency\": %.17g, \"bandwidth\": %.17g, "
            "\"allreduces\": [",
            r->tensor, t->tensor_latency, t->tensor_bandwidth);
    for (int w = 0; w < r->W; w++)
        fprintf(f, "%s%lld", w ? ", " : "", r->w[w].tensor_allreduces);
    fprintf(f, "], \"bytes\": [");
    for (int w = 0; w < r->W; w++)
        fprintf(f, "%s%" PRIu64, w ? ", " : "", r->w[w].tensor_bytes);
    fprintf(f, "]},\n");
}
