/* compile.c - the compile driver (see compile.h). */
#include "compile.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../isa/model_words.h"
#include "link_retime.h"
#include "replay.h"
#include "parse.h"
#include "readfile.h"
#include "tensor.h"
#include "user_model.h"

pp_compile_opts pp_compile_defaults(void)
{
    return (pp_compile_opts){
        .optimizer = -1, .precision = -1, .prefetch = 1, .stop_after = PP_STAGE_PLANS};
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A deadlocked simulation: each worker's blocked job, and for a strict
 * order the job it waits for. */
static void report_deadlock(pp_diag *d, const pp_jobtable *t, const pp_sim_result *sim, int strict)
{
    diag_error_noloc(d, "the %s order deadlocks; each worker's blocked job:",
                     strict ? "strict" : "greedy (with its inflight limit)");
    for (int w = 0; w < t->W; w++) {
        int j = sim->blocked[w];
        if (j < 0)
            continue;
        int p = job_pred(&t->js, j), p2 = job_pred2(&t->js, j);
        /* a recomputed B may wait for its R instead (an uncommitted job ends at 0) */
        if (p2 >= 0 && (p < 0 || sim->end[p] > 0) && sim->end[p2] == 0)
            p = p2;
        fprintf(d->out, "  worker %d waits at %c(%d,%d)", w, dir_char(job_d(&t->js, j)),
                job_s(&t->js, j), job_b(&t->js, j));
        int q = sim->partner ? sim->partner[j] : -1; /* an overlapped pair waits as one */
        if (q >= 0)
            fprintf(d->out, " (overlapped with %c(%d,%d))", dir_char(job_d(&t->js, q)),
                    job_s(&t->js, q), job_b(&t->js, q));
        if (strict && p >= 0)
            fprintf(d->out, ", which needs %c(%d,%d) from worker %d\n", dir_char(job_d(&t->js, p)),
                    job_s(&t->js, p), job_b(&t->js, p), t->worker[p]);
        else
            fprintf(d->out, ": at its inflight limit with no backward left to run\n");
    }
}

/* The source into c->src: the text given, or the file. */
static pp_compile_status read_source(const pp_compile_opts *o, pp_compiled *c)
{
    if (o->text) {
        c->src = malloc(o->len + 1);
        if (!c->src) {
            diag_nomem(&c->diag, "for the source (%zu bytes)", o->len);
            return PP_COMPILE_NOMEM;
        }
        memcpy(c->src, o->text, o->len);
        c->src[o->len] = '\0';
        c->len = o->len;
        return PP_COMPILE_OK;
    }
    const char *step = "open";
    c->src = pp_read_file(o->path, &c->len, &step);
    if (c->src)
        return PP_COMPILE_OK;
    if (errno == ENOMEM) {
        diag_nomem(&c->diag, "reading '%s'", o->path);
        return PP_COMPILE_NOMEM;
    }
    if (errno == 0) /* not a regular file: step says what it is */
        diag_error_noloc(&c->diag, "cannot read '%s': it is %s, not a schedule file", o->path,
                         step);
    else
        diag_error_noloc(&c->diag, "cannot read '%s': %s", o->path, strerror(errno));
    return PP_COMPILE_IO;
}

/* --recompute EXPR: the line `recompute when EXPR` after the source (on
 * a line of its own, so that messages about it quote it with a caret). */
static int append_recompute(const char *expr, pp_compiled *c)
{
    size_t n = strlen(expr) + 32;
    char *s = realloc(c->src, c->len + n);
    if (!s) {
        diag_nomem(&c->diag, "for --recompute");
        return -1;
    }
    c->src = s;
    c->len += (size_t)snprintf(s + c->len, n, "\nrecompute when %s\n", expr);
    return 0;
}

/* --offload EXPR: the line `offload when EXPR` after the source, as
 * append_recompute. */
static int append_offload(const char *expr, pp_compiled *c)
{
    size_t n = strlen(expr) + 32;
    char *s = realloc(c->src, c->len + n);
    if (!s) {
        diag_nomem(&c->diag, "for --offload");
        return -1;
    }
    c->src = s;
    c->len += (size_t)snprintf(s + c->len, n, "\noffload when %s\n", expr);
    return 0;
}

/* The report's line on what --keep-weights chose. */
static void keep_note(pp_compiled *c)
{
    const pp_keep_choice *k = &c->keep;
    if (k->widest == 0)
        snprintf(c->keep_note, sizeof c->keep_note,
                 "nothing to keep, no worker reads a stage's fetched weights twice");
    else if (k->window == 0)
        snprintf(c->keep_note, sizeof c->keep_note,
                 "nothing kept, any window would cross --mem-limit");
    else
        snprintf(c->keep_note, sizeof c->keep_note, "window %d of %d jobs%s", k->window, k->widest,
                 k->window < k->widest ? ", the largest under --mem-limit" : ", every reuse");
}

/* The simulator keeps time in doubles: a job's end is its start plus its
 * cost. Once the clock is more than about 2^52 times a job's cost, adding
 * that cost no longer moves it, the job ends where it starts, and
 * lowering, which orders instructions by those times, builds plans its own
 * checks reject (an internal error). So every cost (jobs, transfers,
 * weight fetches and optimizer steps, from cost lines or --costs) must add
 * up to a finite total at most PP_COST_SPAN times the cheapest job, which
 * leaves each job's cost resolved to a thousandth. A transfer too small to
 * move the clock is harmless: it is as good as one that takes no time. */
#define PP_COST_SPAN 1e12
/* The cheapest job at least this: below about 2e-308 a double loses
 * precision (5e-324 is its own only digit), and the pictures divide by the
 * cheapest job and the makespan, which overflowed to infinity from about
 * 1e-305 (timeline.svg 0 px wide, report.txt's diagram all idle). Only
 * --costs can go there: cost lines are whole numbers. */
#define PP_COST_LEAST 1e-300
/* And the total at most this: trace.json's timestamps are microseconds,
 * 1e6 a --costs second, and a time past about 1.8e302 s overflowed to
 * infinity there, written as 0 (slices piled at the start). */
#define PP_COST_MOST 1e302
static int check_cost_span(pp_diag *d, const pp_jobtable *t, const char *costs)
{
    long long N = job_count(&t->js); /* R ids too: recompute's jobs cost time */
    double total = 0, least = INFINITY;
    for (long long j = 0; j < N; j++) {
        if (!job_exists(&t->js, (int)j)) /* W of a backward that is not split: no job */
            continue;
        total += t->cost[j] + (t->xfer ? t->xfer[j] : 0) + (t->fetch ? t->fetch[j] : 0);
        if (t->cost[j] < least)
            least = t->cost[j];
    }
    for (int s = 0; t->opt && s < t->js.S; s++)
        total += t->opt[s];
    const char *from = costs ? "--costs " : "the schedule's cost lines";
    if (N == 0 || (isfinite(total) && total <= PP_COST_SPAN * least)) {
        if (N == 0 || (least >= PP_COST_LEAST && total <= PP_COST_MOST))
            return 0;
        if (least >= PP_COST_LEAST)
            diag_error_noloc(d,
                             "the costs (%s%s) add up to %g, too large for trace.json's "
                             "microseconds (1e6 a second); expected at most %g",
                             from, costs ? costs : "", total, PP_COST_MOST);
        else
            diag_error_noloc(d,
                             "the costs (%s%s) make the cheapest job %g, too small for the "
                             "simulator's clock and the pictures' scales; expected at least %g",
                             from, costs ? costs : "", least, PP_COST_LEAST);
        return -1;
    }
    if (!isfinite(total))
        diag_error_noloc(d,
                         "the costs (%s%s) add up to more than a double holds (%g); expected "
                         "jobs, transfers and optimizer steps that add up to at most %g times "
                         "the cheapest job",
                         from, costs ? costs : "", DBL_MAX, PP_COST_SPAN);
    else
        diag_error_noloc(d,
                         "the costs (%s%s) span too wide a range for the simulator's clock: jobs, "
                         "transfers and optimizer steps add up to %g, %s%.3g times the cheapest "
                         "job's %g; expected at most %g times",
                         from, costs ? costs : "", total,
                         isfinite(total / least) ? "" : "more than ",
                         isfinite(total / least) ? total / least : DBL_MAX, least, PP_COST_SPAN);
    return -1;
}

/* --layers L (compile.h): L/S blocks (layers) on every stage, in place of
 * the model block's, and costs per block (jobtable.c). The override is
 * applied after the check so that S is known with every -D applied. */
static int apply_layers(pp_diag *d, pp_schedule *sch, long long L, const char *model_file)
{
    const char *what = sch->model.kind != PP_MODEL_MLP ? "layers" : "blocks";
    char from[600]; /* what gave L: --layers, or the user's model file */
    if (model_file)
        snprintf(from, sizeof from, "the model of %s (%lld %s in all)", model_file, L, what);
    else
        snprintf(from, sizeof from, "--layers %lld", L);
    if (L % sch->S != 0) {
        diag_error_noloc(d,
                         "%s: S = %lld does not divide it (S does not divide "
                         "%s); expected a multiple of the %lld stages",
                         from, sch->S, model_file ? "its count" : "--layers", sch->S);
        return 1;
    }
    if (L / sch->S > PP_MAX_LAYERS) {
        diag_error_noloc(d,
                         "%s: %lld %s on each of S = %lld stages is more than a "
                         "stage may have (%u); expected at most %lld",
                         from, L / sch->S, what, sch->S, PP_MAX_LAYERS,
                         (long long)PP_MAX_LAYERS * sch->S);
        return 1;
    }
    free(sch->model.layers); /* a per-stage `blocks = f(s)` gives way too */
    sch->model.layers = NULL;
    sch->model.blocks = (uint32_t)(L / sch->S);
    sch->per_block = 1;
    return 0;
}

/* --layers auto(L): the model's layers become `layers = auto(L)`, from the
 * even split (the remainder on the middle stages, as schedule.c starts
 * it), costs per layer as with --layers; choose_layers then moves them. */
static int flag_auto_layers(pp_diag *d, pp_schedule *sch, long long L)
{
    if (L > (long long)PP_MAX_LAYERS * sch->S) {
        diag_error_noloc(d,
                         "--layers auto(%lld): more layers than %lld stages of at most %u can "
                         "hold",
                         L, sch->S, PP_MAX_LAYERS);
        return 1;
    }
    uint32_t *n = malloc((size_t)sch->S * sizeof *n);
    if (!n) {
        diag_nomem(d, "while splitting the model's layers over %lld stages", sch->S);
        return 1;
    }
    for (long long s = 0; s < sch->S; s++)
        n[s] = (uint32_t)(L / sch->S);
    for (long long r = 0; r < L % sch->S; r++)
        n[(sch->S - L % sch->S) / 2 + r]++;
    free(sch->model.layers);
    sch->model.layers = n;
    sch->auto_layers = L;
    sch->auto_flag = 1;
    sch->per_block = 1;
    return 0;
}

/* `layers = auto(L)`: the split the simulator likes best (auto_layers.c).
 * Cost lines and --costs are one layer's, as with --layers; FLOPs costs
 * count each stage's layers and its head already. */
static int choose_layers(const pp_compile_opts *o, pp_compiled *c)
{
    pp_schedule *sch = &c->sch;
    if (o->layers && !o->layers_auto) {
        diag_error(&c->diag, sch->auto_loc,
                   "layers = auto(%lld) and --layers %lld both split the layers: give one",
                   sch->auto_layers, o->layers);
        return 1;
    }
    for (int k = 0; k < 3; k++)
        if (sch->cost[k])
            sch->per_block = 1;
    if (o->costs)
        sch->per_block = 1;
    pp_lower_opts lo = {o->prefetch, o->mem_limit ? o->mem_limit : o->auto_mem_limit};
    if (pp_auto_layers(sch, o->costs ? &c->costs : NULL, &lo, &c->diag, &c->autoc))
        return 1;
    if (!c->autoc.fits && o->mem_limit) {
        char head[64];
        snprintf(head, sizeof head, "%sauto(%lld)", sch->auto_flag ? "--layers " : "layers = ",
                 sch->auto_layers);
        const char *fmt = "%s: no split of the %lld stages found under --mem-limit %llu (the "
                          "least found needs %llu bytes on its busiest worker, after %d splits)";
        if (sch->auto_flag)
            diag_error_noloc(&c->diag, fmt, head, sch->S, (unsigned long long)o->mem_limit,
                             (unsigned long long)c->autoc.mem, c->autoc.evaluated);
        else
            diag_error(&c->diag, sch->auto_loc, fmt, head, sch->S,
                       (unsigned long long)o->mem_limit, (unsigned long long)c->autoc.mem,
                       c->autoc.evaluated);
        return 1;
    }
    return 0;
}

/* The steps, in order; returns at the first that fails or at stop_after. */
/* The model in words without its stage clause (", 4 stages of 1 block"):
 * with --layers the costs are per block, whatever the stages. */
static void without_stages(const char *w, char *out, size_t n)
{
    const char *at = strstr(w, " stages of ");
    const char *start = at ? at : w;
    while (at && start > w && start[-1] != ',')
        start--;
    const char *end = at ? strstr(at, ", ") : NULL;
    if (!at || start == w || !end)
        snprintf(out, n, "%s", w);
    else
        snprintf(out, n, "%.*s%s", (int)(start - 1 - w), w, end);
}

/* --costs measured on another model (its "model", ppvm --profile's) is
 * refused: its job costs are another model's. With --layers, per block. */
static int check_costs_model(pp_diag *d, const pp_costs *k, const pp_schedule *sch,
                             const char *path, long long layers)
{
    if (!k->model)
        return 0; /* a hand-written file, or one from before ppvm recorded it */
    char mine[1024], a[1024], b[1024];
    pp_model_words(&sch->model, sch->S, mine, sizeof mine);
    if (layers) {
        without_stages(mine, a, sizeof a);
        without_stages(k->model, b, sizeof b);
    } else {
        snprintf(a, sizeof a, "%s", mine);
        snprintf(b, sizeof b, "%s", k->model);
    }
    if (!strcmp(a, b))
        return 0;
    diag_error_noloc(d,
                     "--costs %s was measured on another model (%s); this compile trains %s: "
                     "expected a profile of this model (ppvm --profile on its plan)",
                     path, k->model, mine);
    return -1;
}

static pp_compile_status run(const pp_compile_opts *o, pp_compiled *c)
{
    pp_stage last = o->stop_after ? o->stop_after : PP_STAGE_PLANS;
    pp_diag *d = &c->diag;
    double t0 = now();
#define DONE(stage)                                                                                \
    do {                                                                                           \
        double t1_ = now();                                                                        \
        c->seconds[stage] = t1_ - t0;                                                              \
        t0 = t1_;                                                                                  \
        c->reached = (stage);                                                                      \
        if (last <= (stage))                                                                       \
            return d->errors ? pp_compile_failed(d) : PP_COMPILE_OK;                               \
    } while (0)

    pp_compile_status st = read_source(o, c);
    if (st == PP_COMPILE_OK && o->recompute && append_recompute(o->recompute, c))
        st = PP_COMPILE_NOMEM;
    if (st == PP_COMPILE_OK && o->offload && append_offload(o->offload, c))
        st = PP_COMPILE_NOMEM;
    if (st != PP_COMPILE_OK)
        return st;
    d->src = c->src;
    d->len = c->len;

    /* parse and check: every error of the file is printed, so the check
     * runs after syntax errors too */
    c->stmts = pp_parse(d);
    if (d->nomem)
        return PP_COMPILE_NOMEM;
    DONE(PP_STAGE_PARSE);
    if (o->costs) {
        char err[512];
        if (pp_costs_load(&c->costs, o->costs, err, sizeof err)) {
            diag_error_noloc(d, "--costs: %s", err);
            return PP_COMPILE_IO;
        }
    }
    if (pp_schedule_check(&c->sch, d, c->stmts, o->defs, o->ndefs) || d->errors)
        return pp_compile_failed(d);
    /* --model FILE: the user's model, its count split as --layers splits */
    long long layers = o->layers ? o->layers : o->model ? o->model->total : 0;
    if (o->model) {
        free(c->sch.model.layers);
        c->sch.model = pp_user_model_apply(o->model, &c->sch.model);
        c->sch.layers_expr = NULL;
        c->sch.auto_layers = 0;
        if (c->sch.model.tie && c->sch.S < 2) { /* the check's rule, for this model */
            diag_error_noloc(d, "the model of %s has tie = 1 (stage 0's embedding is the last "
                                "stage's head): it needs S >= 2 stages, and this schedule has 1",
                             o->model_path ? o->model_path : "--model");
            return PP_COMPILE_ERRORS;
        }
    }
    if (o->optimizer >= 0)
        c->sch.model.optimizer = (uint32_t)o->optimizer;
    if (o->precision >= 0)
        c->sch.model.precision = (uint32_t)o->precision;
    if (o->tensor > 0 && pp_tensor_override(d, &c->sch, o->tensor))
        return PP_COMPILE_ERRORS;
    if (layers && (o->layers && o->layers_auto
                       ? flag_auto_layers(d, &c->sch, o->layers)
                       : apply_layers(d, &c->sch, layers, o->layers ? NULL : o->model_path)))
        return PP_COMPILE_ERRORS;
    if (o->costs && check_costs_model(d, &c->costs, &c->sch, o->costs, layers))
        return PP_COMPILE_ERRORS;
    if (c->sch.auto_layers && choose_layers(o, c))
        return pp_compile_failed(d);
    long long jobs = c->sch.S * c->sch.B * (c->sch.split ? 3 : 2);
    if (o->max_jobs && jobs > o->max_jobs) {
        diag_error_noloc(d, "the schedule has %lld jobs, more than this compile allows (%lld)",
                         jobs, o->max_jobs);
        return PP_COMPILE_ERRORS;
    }
    if (o->max_workers && c->sch.W > o->max_workers) {
        diag_error_noloc(d, "the schedule has %lld workers, more than this compile allows (%lld)",
                         c->sch.W, o->max_workers);
        return PP_COMPILE_ERRORS;
    }
    DONE(PP_STAGE_CHECK);

    if (pp_jobtable_build(&c->t, &c->sch, o->costs ? &c->costs : NULL))
        return pp_compile_failed(d);
    if (check_cost_span(d, &c->t, o->costs))
        return PP_COMPILE_ERRORS;
    DONE(PP_STAGE_JOBS);

    pp_sim_input in = pp_jobtable_sim_input(&c->t, c->sch.strict);
    in.reload_ahead = o->prefetch; /* where lowering puts the Reloads */
    int srun = pp_simulate(&in, &c->sim);
    /* a link with a burst or half duplex (issue 29): the transfers again
     * through each sender's bucket, in the order just simulated, then the
     * schedule again (xfer and fetch are the table's, which in points at) */
    int shaped = c->t.burst > 0 || c->t.half_duplex;
    for (int again = 0; srun == 0 && shaped && again < 2; again++) {
        if (pp_link_retime(&c->t, &c->sch.model, &c->sim)) {
            srun = -1;
            break;
        }
        pp_sim_free(&c->sim);
        srun = pp_simulate(&in, &c->sim);
    }
    if (srun < 0) {
        diag_nomem(d, "in the simulator");
        return PP_COMPILE_NOMEM;
    }
    if (srun > 0) {
        c->deadlock = 1;
        report_deadlock(d, &c->t, &c->sim, c->sch.strict);
        return PP_COMPILE_ERRORS;
    }
    DONE(PP_STAGE_SIMULATE);

    pp_lower_opts lo = {o->prefetch, o->mem_limit};
    if (o->keep_weights) {
        if (pp_keep_weights(&c->t, &c->sim, &c->sch.model, &lo, d, &c->keep))
            return pp_compile_failed(d);
        keep_note(c);
    }
    /* overlap 1: a pair's jobs run one after the other, so the run is
     * priced with each job at its own start (sim.h, "Pairs in turn"); the
     * plans keep the order of each pair as one unit (by_pair) */
    if (pp_pairs_in_turn(&c->t, &c->sim)) {
        pp_sim_result run = {0};
        if (pp_sim_replay(&c->t, &c->sim, 1, &run)) {
            pp_sim_free(&run);
            diag_nomem(d, "in the simulator");
            return PP_COMPILE_NOMEM;
        }
        c->by_pair = c->sim;
        c->sim = run;
    }
    if (pp_report_build(&c->rep, &c->t, &c->sim, &c->sch.model)) {
        diag_nomem(d, "for the report");
        return PP_COMPILE_NOMEM;
    }
    DONE(PP_STAGE_REPORT);

    /* lowering and plan verification: pp_compile_plans */
    st = pp_compile_plans(&c->t, pp_compiled_order(c), &c->sch.model, &lo, d, &c->plans);
    if (st != PP_COMPILE_OK)
        return st;
    for (int w = 0; w < c->t.W; w++) { /* a worker's: its rank t = 0's (all alike) */
        const pp_plan *p = &c->plans[w * (int)pp_model_tensor(&c->sch.model)];
        c->rep.w[w].mem_bytes = pp_plan_memory(p);
        c->rep.total.mem_bytes += c->rep.w[w].mem_bytes;
        /* offload: the host pool ppvm allocates, not the simulated peak */
        c->rep.w[w].host_bytes = pp_plan_host_memory(p);
        if (c->rep.w[w].host_bytes == UINT64_MAX) {
            diag_nomem(d, "for the report's host memory");
            return PP_COMPILE_NOMEM;
        }
        c->rep.total.host_bytes += c->rep.w[w].host_bytes;
    }
    DONE(PP_STAGE_PLANS);
    return PP_COMPILE_OK;
#undef DONE
}

const pp_sim_result *pp_compiled_order(const pp_compiled *c)
{
    return c->by_pair.start ? &c->by_pair : &c->sim;
}

pp_compile_status pp_compile(const pp_compile_opts *o, pp_compiled *c)
{
    memset(c, 0, sizeof *c);
    FILE *out = o->diag_out;
    if (o->capture) {
        c->msgf = open_memstream(&c->msgs, &c->msglen);
        if (c->msgf)
            out = c->msgf;
    }
    c->name = strdup(o->path ? o->path : "<text>");
    diag_init(&c->diag, c->name ? c->name : "<text>", NULL, 0, out);
    if (!c->name || (o->capture && !c->msgf)) {
        diag_nomem(&c->diag, "for the diagnostics");
        c->status = PP_COMPILE_NOMEM;
    } else
        c->status = run(o, c);
    c->errors = c->diag.errors;
    if (c->msgf)
        fflush(c->msgf);
    return c->status;
}

void pp_compiled_free(pp_compiled *c)
{
    pp_plans_free(c->plans, c->t.W);
    pp_auto_choice_free(&c->autoc);
    pp_report_free(&c->rep);
    pp_sim_free(&c->sim);
    pp_sim_free(&c->by_pair);
    pp_jobtable_free(&c->t);
    pp_costs_free(&c->costs);
    pp_schedule_free(&c->sch);
    ast_free_stmts(c->stmts);
    if (c->msgf)
        fclose(c->msgf);
    free(c->msgs);
    free(c->src);
    free(c->name);
    memset(c, 0, sizeof *c);
}
