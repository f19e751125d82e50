/* report_write.c - report.txt (for people: a summary, a table per worker,
 * the ASCII pipeline diagram) and report.json (for tools) from a pp_report.
 * report.json is written with fprintf, which lays it out for reading (a
 * line per field, a line per job); jansson only escapes its strings. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numfmt.h"
#include "report.h"
#include "timeline.h"

const char *pp_human_bytes(uint64_t bytes, char *buf)
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

/* "count (bytes)" in a fixed-width column */
static void count_bytes(FILE *f, long long count, uint64_t bytes, int width)
{
    char cell[48], hb[16];
    snprintf(cell, sizeof cell, "%lld (%s)", count, pp_human_bytes(bytes, hb));
    fprintf(f, " %*s", width, cell);
}

static void worker_row(FILE *f, const char *name, const pp_worker_report *x, double makespan)
{
    char hb[4][16];
    fprintf(f, "%-6s %6d %10g %6.1f%%", name, x->jobs, x->busy,
            makespan > 0 ? 100.0 * (1 - x->busy / makespan) : 0.0);
    count_bytes(f, x->act_recv, x->act_recv_bytes, 20);
    count_bytes(f, x->weight_recv, x->weight_recv_bytes, 20);
    count_bytes(f, x->peak_act, x->peak_act_bytes, 18);
    count_bytes(f, x->weight_store, x->weight_store_bytes, 18);
    fprintf(f, " %11s %11s %11s %11s\n", pp_human_bytes(x->grad_store_bytes, hb[0]),
            pp_human_bytes(x->opt_store_bytes, hb[1]), pp_human_bytes(x->copy_store_bytes, hb[2]),
            pp_human_bytes(x->mem_bytes, hb[3]));
}

/* Stage s's cost of direction d, from its first microbatch with such a job
 * (kind 1: a split backward's B; kind 0: any, a full one for B in a mixed
 * table); -1 when the stage has none. */
static double stage_cost(const pp_jobtable *t, int s, int d, int kind)
{
    const pp_jobspace *js = &t->js;
    for (int b = 0; b < js->B; b++) {
        int j = job_id(js, s, b, d);
        if (job_exists(js, j) && (d != DIR_B || js->ND == 2 || job_split(js, s, b) == kind))
            return t->cost[j];
    }
    return -1;
}

/* Each direction's cost per stage (its first microbatch's), runs of equal
 * costs merged, when they are not all 1: "F s0 0.41, s1-s2 1.2, s3 1.19".
 * With `split backward when`, "B" is a split backward's B and "B full"
 * (cost B + cost W) the others. */
static void print_stage_costs(FILE *f, const pp_jobtable *t)
{
    const pp_jobspace *js = &t->js;
    int uniform = 1;
    for (int j = 0; j < job_count(js) && uniform; j++)
        uniform = !job_exists(js, j) || t->cost[j] == 1.0;
    if (uniform)
        return;
    int mixed = js->split != NULL, rrow = js->recompute != NULL;
    for (int row = 0; row < js->ND + mixed + rrow; row++) {
        int d = row < js->ND ? row : row < js->ND + mixed ? DIR_B : DIR_R, kind = row < js->ND;
        fprintf(f, "          %c%s", dir_char(d), row < js->ND || d == DIR_R ? "" : " full");
        for (int s = 0; s < js->S;) {
            double c = stage_cost(t, s, d, kind);
            int e = s;
            while (e + 1 < js->S && stage_cost(t, e + 1, d, kind) == c)
                e++;
            fprintf(f, "%s s%d", s ? "," : "", s);
            if (e > s)
                fprintf(f, "-s%d", e);
            if (c < 0)
                fprintf(f, " -");
            else
                fprintf(f, " %.3g", c);
            s = e + 1;
        }
        fprintf(f, "\n");
    }
}

int pp_report_write_txt(FILE *f, const pp_report *r, const pp_report_info *info,
                        const pp_jobtable *t, const pp_sim_result *sim)
{
    char split[160] = "";
    if (r->split && r->nsplit < r->S * r->B) /* split backward when */
        snprintf(split, sizeof split, ", split backward for %d of %d (s,b)", r->nsplit,
                 r->S * r->B);
    else if (r->split)
        snprintf(split, sizeof split, ", split backward");
    if (r->nrecompute) /* recompute [when]: R jobs */
        snprintf(split + strlen(split), sizeof split - strlen(split), ", recompute %d of %d (s,b)",
                 r->nrecompute, r->S * r->B);
    if (r->noffload) /* offload [when]: stashes in host memory between F and B */
        snprintf(split + strlen(split), sizeof split - strlen(split), ", offload %d of %d (s,b)",
                 r->noffload, r->S * r->B);
    fprintf(f, "schedule  %s (%s, %s order%s)\n", info->schedule, info->params, info->order, split);
    fprintf(f, "costs     %s\n", info->costs);
    print_stage_costs(f, t);
    fprintf(f, "optimizer %s (%s)\n", pp_optimizer_name(r->optimizer),
            r->optimizer == PP_OPT_ADAMW ? "two moments per weight, held by the owners"
                                         : "no state");
    fprintf(f, "precision %s (%s)\n", pp_precision_name(r->precision),
            r->precision == PP_PREC_BF16
                ? "owners keep a bf16 copy of their fp32 weights, which jobs compute with and "
                  "fetches move; gradients stay fp32"
                : "jobs compute with and fetches move the fp32 weights");
    if (t->bandwidth > 0)
        fprintf(f, "transfers latency %g + bytes / %g bytes per time unit%s\n", t->latency,
                t->bandwidth, t->recv_waits ? ", moving only while the receiver waits" : "");
    else
        fprintf(f, "transfers latency %g, bandwidth unlimited%s\n", t->latency,
                t->recv_waits     ? ", moving only while the receiver waits"
                : t->latency == 0 ? " (hidden by prefetching, as the seed assumes)"
                                  : "");
    if (t->ar_ranks)
        fprintf(f,
                "allreduce %g + bytes / %g bytes per time unit, as measured over %d ranks "
                "(scaled to each stage's owners as a %s)\n",
                t->ar_latency, t->ar_bandwidth, t->ar_ranks, t->allreduce_tree ? "tree" : "ring");
    if (t->job_overhead > 0)
        fprintf(f,
                "interpreter %g per job beside its kernel, as measured (a worker is free that "
                "long after each job)\n",
                t->job_overhead);
    if (t->wake > 0)
        fprintf(f, "wake      %g after its input, a job whose worker waited for it, as measured\n",
                t->wake);
    pp_report_tensor_txt(f, r, t);
    if (r->noffload) {
        char hb[16];
        fprintf(f, "offload   stashes copied to host memory after F and back before B on a "
                   "host-copy lane, ");
        if (t->host_bandwidth > 0)
            fprintf(f, "bytes / %g bytes per time unit\n", t->host_bandwidth);
        else
            fprintf(f, "host bandwidth unlimited (no 'cost host_bandwidth')\n");
        /* what ppvm allocates (the plan's host pool, as "plan memory" is
         * the device's), then what the simulation holds at once */
        fprintf(f, "host      allocated (plan's host pool):");
        for (int w = 0; w < r->W; w++)
            fprintf(f, "%s w%d %s", w ? "," : "", w, pp_human_bytes(r->w[w].host_bytes, hb));
        if (!r->total.mem_bytes)
            fprintf(f, " (0: the schedule was not lowered)");
        fprintf(f, "\n          held at once in the simulation:");
        for (int w = 0; w < r->W; w++)
            fprintf(f, "%s w%d %s", w ? "," : "", w, pp_human_bytes(r->w[w].host_peak_bytes, hb));
        fputc('\n', f);
    }
    fprintf(f, "makespan  %g\nbubble    %.2f%% of %d workers x makespan\n", r->makespan,
            100 * r->bubble, r->W);
    fprintf(f,
            "step      %g (the makespan, then gradient returns, all-reduces and optimizer "
            "steps)\n",
            r->step);
    if (r->link_step > r->step_schedule)
        fprintf(f,
                "          (the links' rate: the busiest sender's bytes a step at the "
                "bandwidth; the schedule alone %g)\n",
                r->step_schedule);
    if (t->pairable && sim->in_turn)
        fprintf(f,
                "overlap   %d pairs of a forward and a backward run in turn (overlap 1): each "
                "job once its inputs are here, the outputs of both at the pair's end\n",
                sim->npairs);
    else if (t->pairable)
        fprintf(f,
                "overlap   %d pairs of a forward and a backward run at once; a pair takes "
                "max(tF, tB) + %g * min(tF, tB)\n",
                sim->npairs, t->overlap);
    if (t->pairable) {
        /* the first PAIR_LINES pairs; report.json lists every one */
        enum { PAIR_LINES = 32 };
        int listed = 0;
        for (int w = 0; w < r->W; w++)
            for (int k = sim->off[w]; k < sim->off[w + 1] && listed < PAIR_LINES; k++) {
                int j = sim->order[k], q = sim->partner ? sim->partner[j] : -1;
                if (q < 0 || job_d(&t->js, j) != DIR_F)
                    continue;
                fprintf(f, "  worker %d: F(%d,%d) with B(%d,%d) at %g-%g\n", w, job_s(&t->js, j),
                        job_b(&t->js, j), job_s(&t->js, q), job_b(&t->js, q),
                        sim->start[q] < sim->start[j] ? sim->start[q] : sim->start[j],
                        pp_sim_out_time(sim, j));
                listed++;
            }
        if (sim->npairs > listed)
            fprintf(f, "  ... and %d more (report.json lists every pair)\n", sim->npairs - listed);
    }
    if (info->layers)
        fprintf(f, "layers    %s\n", info->layers);
    if (info->keep)
        fprintf(f,
                "kept      %lld jobs read weights fetched for an earlier job of their stage "
                "(--keep-weights: %s)\n",
                r->total.weight_kept, info->keep);
    fputc('\n', f);
    fprintf(f, "%-6s %6s %10s %7s %20s %20s %18s %18s %11s %11s %11s %11s\n", "worker", "jobs",
            "busy", "idle", "act+grad recv", "weight fetches", "peak activations", "weights held",
            "grads", "optimizer", "bf16 copy", "plan memory");
    char name[16];
    for (int w = 0; w < r->W; w++) {
        snprintf(name, sizeof name, "%d", w);
        worker_row(f, name, &r->w[w], r->makespan);
    }
    worker_row(f, "total", &r->total, r->makespan * r->W);
    fprintf(f,
            "\n(peak activations: microbatches held between F and B, and the bytes of their\n"
            " stashes; idle of the total is the bubble; plan memory: what ppvm allocates for\n"
            " the worker's plan - its slots and its own stages' weights, gradients,\n"
            " optimizer state and bf16 copies%s)\n\n",
            r->total.mem_bytes ? "" : "; 0: the schedule was not lowered");
    pp_timeline_ascii(f, t, sim, 100);
    return ferror(f) ? -1 : 0;
}

enum {
    F_JOBS,
    F_BUSY,
    F_ACT,
    F_ACTB,
    F_WREC,
    F_WRECB,
    F_WKEPT,
    F_PEAK,
    F_PEAKB,
    F_WST,
    F_WSTB,
    F_GRADB,
    F_OPTB,
    F_COPYB,
    F_MEM,
    F_HOST,
    F_HOSTPEAK,
    F_COUNT
};
static const char *field_name[F_COUNT] = {"jobs_count",         "busy",
                                          "act_recv",           "act_recv_bytes",
                                          "weight_recv",        "weight_recv_bytes",
                                          "weight_kept",        "peak_act",
                                          "peak_act_bytes",     "weight_store",
                                          "weight_store_bytes", "grad_store_bytes",
                                          "opt_store_bytes",    "copy_store_bytes",
                                          "mem_bytes",          "host_bytes",
                                          "host_peak_bytes"};

/* pp_json_str (report.h): jansson escapes; bytes above 0x7f of a string
 * that is not UTF-8 become '?'; NULL is null. */
void pp_json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    json_t *v = json_string(s);
    char *ascii = NULL;
    if (!v && (ascii = strdup(s))) {
        for (char *p = ascii; *p; p++)
            if ((unsigned char)*p > 0x7f)
                *p = '?';
        v = json_string(ascii);
    }
    if (!v || json_dumpf(v, f, JSON_ENCODE_ANY) != 0)
        fputs("null", f); /* out of memory */
    json_decref(v);
    free(ascii);
}

static void json_field(FILE *f, const pp_worker_report *x, int k)
{
    switch (k) {
    case F_JOBS:
        fprintf(f, "%d", x->jobs);
        break;
    case F_BUSY:
        fprintf(f, "%.17g", x->busy);
        break;
    case F_ACT:
        fprintf(f, "%lld", x->act_recv);
        break;
    case F_ACTB:
        fprintf(f, "%" PRIu64, x->act_recv_bytes);
        break;
    case F_WREC:
        fprintf(f, "%lld", x->weight_recv);
        break;
    case F_WRECB:
        fprintf(f, "%" PRIu64, x->weight_recv_bytes);
        break;
    case F_WKEPT:
        fprintf(f, "%lld", x->weight_kept);
        break;
    case F_PEAK:
        fprintf(f, "%lld", x->peak_act);
        break;
    case F_PEAKB:
        fprintf(f, "%" PRIu64, x->peak_act_bytes);
        break;
    case F_WST:
        fprintf(f, "%lld", x->weight_store);
        break;
    case F_WSTB:
        fprintf(f, "%" PRIu64, x->weight_store_bytes);
        break;
    case F_GRADB:
        fprintf(f, "%" PRIu64, x->grad_store_bytes);
        break;
    case F_OPTB:
        fprintf(f, "%" PRIu64, x->opt_store_bytes);
        break;
    case F_COPYB:
        fprintf(f, "%" PRIu64, x->copy_store_bytes);
        break;
    case F_MEM:
        fprintf(f, "%" PRIu64, x->mem_bytes);
        break;
    case F_HOST:
        fprintf(f, "%" PRIu64, x->host_bytes);
        break;
    case F_HOSTPEAK:
        fprintf(f, "%" PRIu64, x->host_peak_bytes);
        break;
    }
}

/* One job of "jobs": {"s": %d, "b": %d, "d": "%c", "start": %.17g,
 * "end": %.17g}, after ",\n     " unless it is the worker's first. Built
 * by hand (numfmt.h): a million-job report has a million of these. */
static void json_job(FILE *f, const pp_jobspace *js, const pp_sim_result *sim, int j, int sep)
{
    char line[64 + 4 * PP_NUMFMT_MAX], *p = line;
#define LIT(s) (memcpy(p, s, sizeof s - 1), p += sizeof s - 1)
    if (sep)
        LIT(",\n     ");
    LIT("{\"s\": ");
    p += pp_fmt_i64(p, job_s(js, j));
    LIT(", \"b\": ");
    p += pp_fmt_i64(p, job_b(js, j));
    LIT(", \"d\": \"");
    *p++ = dir_char(job_d(js, j));
    LIT("\", \"start\": ");
    p += pp_fmt_g(p, sim->start[j], 17);
    LIT(", \"end\": ");
    p += pp_fmt_g(p, sim->end[j], 17);
    *p++ = '}';
#undef LIT
    fwrite(line, 1, (size_t)(p - line), f);
}

/* One overlapped pair of "pairs": "%s\n    {\"worker\": %d, \"F\": [%d, %d],
 * \"B\": [%d, %d], \"start\": %.17g, \"end\": %.17g}", by hand as json_job. */
static void json_pair(FILE *f, const pp_jobspace *js, const pp_sim_result *sim, int w, int j, int q,
                      int sep)
{
    char line[128 + 6 * PP_NUMFMT_MAX], *p = line;
#define LIT(s) (memcpy(p, s, sizeof s - 1), p += sizeof s - 1)
    if (sep)
        *p++ = ',';
    LIT("\n    {\"worker\": ");
    p += pp_fmt_i64(p, w);
    LIT(", \"F\": [");
    p += pp_fmt_i64(p, job_s(js, j));
    LIT(", ");
    p += pp_fmt_i64(p, job_b(js, j));
    LIT("], \"B\": [");
    p += pp_fmt_i64(p, job_s(js, q));
    LIT(", ");
    p += pp_fmt_i64(p, job_b(js, q));
    LIT("], \"start\": ");
    p += pp_fmt_g(p, sim->start[q] < sim->start[j] ? sim->start[q] : sim->start[j], 17);
    LIT(", \"end\": ");
    p += pp_fmt_g(p, pp_sim_out_time(sim, j), 17);
    *p++ = '}';
#undef LIT
    fwrite(line, 1, (size_t)(p - line), f);
}

int pp_report_write_json(FILE *f, const pp_report *r, const pp_report_info *info,
                         const pp_jobtable *t, const pp_sim_result *sim)
{
    fprintf(f, "{\n  \"schedule\": ");
    pp_json_str(f, info->schedule);
    fprintf(f, ",\n  \"params\": ");
    pp_json_str(f, info->params);
    fprintf(f, ",\n  \"order\": ");
    pp_json_str(f, info->order);
    fprintf(f, ",\n  \"costs\": ");
    pp_json_str(f, info->costs);
    fprintf(f, ",\n  \"optimizer\": ");
    pp_json_str(f, pp_optimizer_name(r->optimizer));
    fprintf(f, ",\n  \"precision\": ");
    pp_json_str(f, pp_precision_name(r->precision));
    if (info->layers) { /* only then: every other report keeps its keys */
        fprintf(f, ",\n  \"auto_layers\": ");
        pp_json_str(f, info->layers);
    }
    fprintf(f, ",\n  \"keep_weights\": ");
    if (info->keep)
        pp_json_str(f, info->keep);
    else
        fputs("null", f);
    fprintf(f,
            ",\n  \"S\": %d, \"B\": %d, \"W\": %d, \"split\": %s, \"split_backwards\": %d, "
            "\"recomputes\": %d, \"offloads\": %d,\n",
            r->S, r->B, r->W, r->split ? "true" : "false", r->nsplit, r->nrecompute, r->noffload);
    fprintf(f, "  \"host_bandwidth\": %.17g,\n", t->host_bandwidth);
    fprintf(f, "  \"latency\": %.17g, \"bandwidth\": %.17g,\n", t->latency, t->bandwidth);
    if (t->recv_waits) /* --costs "progress": "wait" only */
        fprintf(f, "  \"progress\": \"wait\",\n");
    if (t->job_overhead > 0) /* --costs "job_overhead" only */
        fprintf(f, "  \"job_overhead\": %.17g,\n", t->job_overhead);
    if (t->wake > 0) /* --costs "wake" only */
        fprintf(f, "  \"wake\": %.17g,\n", t->wake);
    if (t->ar_ranks) /* a measured all-reduce only: other reports as they were */
        fprintf(f,
                "  \"allreduce\": {\"latency\": %.17g, \"bandwidth\": %.17g, \"ranks\": %d, "
                "\"shape\": \"%s\"},\n",
                t->ar_latency, t->ar_bandwidth, t->ar_ranks, t->allreduce_tree ? "tree" : "ring");
    pp_report_tensor_json(f, r, t);
    fprintf(f, "  \"makespan\": %.17g,\n  \"bubble\": %.17g,\n  \"step\": %.17g,\n", r->makespan,
            r->bubble, r->step);
    if (r->link_step > 0) /* a measured link shape only: other reports as they were */
        fprintf(f, "  \"link_step\": %.17g, \"step_schedule\": %.17g,\n", r->link_step,
                r->step_schedule);
    /* overlapped pairs (sim.h): null without an overlap line */
    if (t->pairable) {
        fprintf(f, "  \"overlap\": %.17g,\n  \"pairs\": [", t->overlap);
        int first = 1;
        for (int w = 0; w < r->W; w++)
            for (int k = sim->off[w]; k < sim->off[w + 1]; k++) {
                int j = sim->order[k], q = sim->partner ? sim->partner[j] : -1;
                if (q < 0 || job_d(&t->js, j) != DIR_F)
                    continue;
                json_pair(f, &t->js, sim, w, j, q, !first);
                first = 0;
            }
        fputs(first ? "],\n" : "\n  ],\n", f);
    } else
        fputs("  \"overlap\": null,\n  \"pairs\": null,\n", f);
    for (int k = 0; k < F_COUNT; k++) {
        fprintf(f, "  \"%s\": [", field_name[k]);
        for (int w = 0; w < r->W; w++) {
            if (w)
                fputs(", ", f);
            json_field(f, &r->w[w], k);
        }
        fputs("],\n", f);
    }
    fputs("  \"total\": {", f);
    for (int k = 0; k < F_COUNT; k++) {
        fprintf(f, "%s\"%s\": ", k ? ", " : "", field_name[k]);
        json_field(f, &r->total, k);
    }
    fputs("},\n  \"jobs\": [\n", f);
    const pp_jobspace *js = &t->js;
    for (int w = 0; w < r->W; w++) {
        fputs("    [", f);
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
            json_job(f, js, sim, sim->order[k], k > sim->off[w]);
        fputs(w + 1 < r->W ? "],\n" : "]\n", f);
    }
    fputs("  ]\n}\n", f);
    return ferror(f) ? -1 : 0;
}
