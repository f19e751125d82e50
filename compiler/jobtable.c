/* jobtable.c - evaluating compute/weights/priority/cost at every job. */
#include "jobtable.h"
#include "end_costs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../isa/model_shape.h"
#include "../isa/tensor.h"

/* Errors of one function are reported once (the first job that fails) with a
 * count of the other jobs that failed the same way, so a wrong formula does
 * not print a million lines. */
typedef struct {
    int count;
} err_tally;

static void job_str(char *buf, size_t n, const pp_env *env, int with_d)
{
    if (with_d == 2) /* split backward when: one value for B and W */
        snprintf(buf, n, "(s=%lld, b=%lld)", env->s, env->b);
    else if (with_d)
        snprintf(buf, n, "(s=%lld, b=%lld, d=%c)", env->s, env->b, "FBWR"[env->d]);
    else
        snprintf(buf, n, "(w=%lld)", env->w);
}

/* SAME_ENV in with_d: env is the previous call's (pp_eval_same_env) */
#define SAME_ENV 4
static int eval_at(const pp_schedule *sch, const pp_expr *e, const pp_env *env, long long *out,
                   const char *what, err_tally *tally, int with_d)
{
    const pp_expr *where = e;
    pp_eval_status st = with_d & SAME_ENV ? pp_eval_same_env(sch, e, env, out, &where)
                                          : pp_eval(sch, e, env, out, &where);
    with_d &= ~SAME_ENV;
    if (st == EVAL_OK)
        return 1;
    if (tally->count++ == 0) {
        char job[96];
        job_str(job, sizeof job, env, with_d);
        diag_error(sch->diag, where->loc, "%s in %s at %s",
                   st == EVAL_DIV0 ? "division by zero" : "integer overflow", what, job);
    }
    return 0;
}

static void tally_note(const pp_schedule *sch, const err_tally *t, const char *what)
{
    if (t->count > 1)
        fprintf(sch->diag->out, "  (%s failed at %d more job%s)\n", what, t->count - 1,
                t->count - 1 == 1 ? "" : "s");
}

static void check_range(const pp_schedule *sch, int fn, long long v, const pp_env *env,
                        err_tally *t)
{
    if (v >= 0 && v < sch->W)
        return;
    if (t->count++ == 0) {
        char job[96];
        job_str(job, sizeof job, env, 1);
        diag_error(sch->diag, sch->fn[fn] ? sch->fn[fn]->loc : sch->fn_loc[FN_COMPUTE],
                   "%s = %lld at %s is outside the workers [0, W=%lld)",
                   fn == FN_COMPUTE ? "compute" : "weights", v, job, sch->W);
    }
}

uint64_t pp_stage_weight_bytes(const pp_model *m, int S, int s)
{
    return (uint64_t)pp_stage_param_count(m, S, s) * sizeof(float);
}

uint64_t pp_job_input_bytes(const pp_jobtable *t, const pp_model *m, int j)
{
    const pp_jobspace *js = &t->js;
    int s = job_s(js, j), d = job_d(js, j);
    if (d == DIR_F || d == DIR_R) /* R re-reads F's kept input */
        return s > 0 ? pp_act_bytes(m) : 0;
    if (d == DIR_W)
        return pp_stage_stash_bytes_split(m, js->S, s);
    if (s == js->S - 1)
        return job_split(js, s, job_b(js, j)) ? pp_stage_stash_bytes_split(m, js->S, s)
                                              : pp_stage_stash_bytes(m, js->S, s);
    return pp_act_bytes(m);
}

/* A constant cost line (latency, bandwidth): evaluated once, must be >= 0. */
static double transfer_cost(const pp_schedule *sch, int c)
{
    if (!sch->cost[c])
        return 0;
    const char *name = c == COST_LATENCY            ? "latency"
                       : c == COST_TENSOR_LATENCY   ? "tensor_latency"
                       : c == COST_TENSOR_BANDWIDTH ? "tensor_bandwidth"
                       : c == COST_HOST_BANDWIDTH   ? "host_bandwidth"
                                                    : "bandwidth";
    pp_env env = {0, 0, 0, 0};
    long long v = 0;
    err_tally tally = {0};
    if (eval_at(sch, sch->cost[c], &env, &v, name, &tally, 0) && v < 0) {
        diag_error(sch->diag, sch->cost[c]->loc, "cost %s = %lld: it must not be negative", name,
                   v);
        v = 0;
    }
    return (double)v;
}

/* `cost overlap = P`: a percent in [0, 100], evaluated once; 100 without
 * the line. */
static double overlap_cost(const pp_schedule *sch)
{
    const pp_expr *e = sch->cost[COST_OVERLAP];
    if (!e)
        return 1;
    pp_env env = {0, 0, 0, 0};
    long long v = 100;
    err_tally tally = {0};
    if (eval_at(sch, e, &env, &v, "overlap", &tally, 0) && (v < 0 || v > 100)) {
        diag_error(sch->diag, e->loc,
                   "cost overlap = %lld: expected a percent in [0, 100] (100: a pair takes "
                   "tF + tB, 0: max(tF, tB))",
                   v);
        v = 100;
    }
    return (double)v / 100;
}

/* pairable[j] for every forward: the overlap condition at (s, b, F); 2
 * instead of 1 with `overlap F then B` (the forward pairs only with the
 * backward after it, sim.h). */
static int eval_pairable(pp_jobtable *t, const pp_schedule *sch)
{
    int N = job_count(&t->js);
    if (!(t->pairable = calloc((size_t)N, 1)))
        return -1;
    err_tally tally = {0};
    int npairable = 0;
    for (int j = 0; j < N; j++) {
        if (job_d(&t->js, j) != DIR_F)
            continue;
        pp_env env = {job_s(&t->js, j), job_b(&t->js, j), DIR_F, 0};
        long long v = 0;
        if (eval_at(sch, sch->overlap, &env, &v, "'overlap ... when'", &tally, 1))
            t->pairable[j] = v == 0 ? 0 : sch->overlap_then ? 2 : 1;
        npairable += t->pairable[j] != 0;
    }
    tally_note(sch, &tally, "'overlap ... when'");
    /* like 'split backward when' holding nowhere: a line that changes nothing */
    if (!tally.count && npairable == 0)
        for (const pp_stmt *st = sch->stmts; st; st = st->next)
            if (st->kind == ST_OVERLAP)
                diag_warning(sch->diag, st->loc,
                             "'overlap ... when' holds for no forward: no jobs run as pairs");
    return 0;
}

/* --costs: per-direction arrays must have one entry or one per stage. */
static int check_measured(const pp_schedule *sch, const pp_costs *mc, int ND)
{
    int bad = 0;
    for (int d = 0; d < PP_COSTS_DIRS; d++) {
        if (!mc->dir[d])
            continue;
        if (d == 2 && d >= ND) {
            diag_error_noloc(sch->diag,
                             "--costs gives \"W\" but the schedule has no 'split backward'");
            bad++;
        } else if (mc->n[d] != 1 && mc->n[d] != sch->S) {
            diag_error_noloc(
                sch->diag, "--costs: \"%c\" has %d entries; expected 1 or one per stage (S = %lld)",
                "FBWOG"[d], mc -> n[d], sch -> S);
            bad++;
        }
    }
    return bad;
}

/* Does the model ask for FLOPs-proportional default costs? A uniform mlp
 * keeps the seed's unit costs (every job 1: the library's headers and
 * ppc --table reason in them); a gpt, or any model whose stages' layer
 * counts differ, has stages of visibly different weight, which unit costs
 * would hide. */
int pp_jobtable_flops_costs(const pp_model *m, long long S)
{
    if (m->kind != PP_MODEL_MLP)
        return 1;
    for (long long s = 1; s < S; s++)
        if (pp_model_layers(m, (int)s) != pp_model_layers(m, 0))
            return 1;
    return 0;
}

/* cost[d][s]: the FLOPs-proportional default cost of direction d at stage s,
 * in units of the mean forward over the stages (so an average F costs 1, as
 * with unit costs). A split backward's B and W each take half the fused
 * backward's FLOPs (pp_stage_flops counts them together). NULL where the
 * schedule or --costs gives the direction's cost, or unit costs apply. */
static int default_costs(const pp_schedule *sch, const pp_costs *measured, int ND, double *cost[3])
{
    /* the whole model's FLOPs: tensor = T divides every job's cost by T
     * afterwards (tensor_costs), so costs compare across T */
    pp_model whole = sch->model;
    whole.tensor = 1;
    const pp_model *m = &whole;
    int S = (int)sch->S;
    if (!pp_jobtable_flops_costs(m, S))
        return 0;
    double unit = 0;
    for (int s = 0; s < S; s++)
        unit += pp_stage_flops(m, S, s, 0) / S;
    if (sch->per_block) {
        /* --layers: in units of one block's forward, the same for every S
         * (a stage's forward costs its blocks, plus the head on the last),
         * so that candidates with different S compare. The difference of a
         * one-block and a no-block stage 0 leaves the head out. */
        pp_model one = *m, none = *m;
        one.layers = none.layers = NULL;
        one.blocks = 1;
        none.blocks = 0;
        unit = pp_stage_flops(&one, S, 0, 0) - pp_stage_flops(&none, S, 0, 0);
    }
    for (int d = 0; d < ND; d++) {
        if (sch->cost[d] || (measured && measured->dir[d]))
            continue;
        if (!(cost[d] = malloc((size_t)S * sizeof *cost[d])))
            return -1;
        for (int s = 0; s < S; s++) {
            double f = pp_stage_flops(m, S, s, d != 0) * (d != 0 && ND == 3 ? 0.5 : 1.0);
            /* a stage without FLOPs (no layers, no embedding GEMM) still
             * takes time: a small floor keeps every job positive */
            cost[d][s] = unit > 0 && f > 0 ? f / unit : 1e-3;
        }
    }
    return 0;
}

/* `split backward when`: t->split[s*B + b] for every (s,b), and the job
 * space's ND: 3 when some backward is split, 2 (with a warning) when none
 * is. t->split stays NULL when every one is, as with `split backward`.
 * Returns -1 out of memory, else the number of errors. */
static int build_split(pp_jobtable *t, const pp_schedule *sch)
{
    t->js.ND = sch->split ? 3 : 2;
    if (!sch->split_when)
        return 0;
    size_t n = (size_t)sch->S * (size_t)sch->B;
    if (!(t->split = malloc(n)))
        return -1;
    err_tally tally = {0};
    size_t nsplit = 0;
    for (size_t i = 0; i < n; i++) {
        pp_env env = {(long long)(i / (size_t)sch->B), (long long)(i % (size_t)sch->B), DIR_B, 0};
        long long v = 0;
        eval_at(sch, sch->split_when, &env, &v, "split backward when", &tally, 2);
        t->split[i] = v != 0;
        nsplit += t->split[i];
    }
    tally_note(sch, &tally, "split backward when");
    if (tally.count)
        return tally.count;
    if (nsplit == 0) {
        for (const pp_stmt *st = sch->stmts; st; st = st->next)
            if (st->kind == ST_SPLIT)
                diag_warning(sch->diag, st->loc,
                             "'split backward when' holds for no job: no backward is split and "
                             "there are no W jobs");
        t->js.ND = 2;
    }
    if (nsplit == 0 || nsplit == n) {
        free(t->split);
        t->split = NULL;
    }
    t->js.split = t->split;
    return 0;
}

/* `recompute [when]`: t->recompute[s*B + b] for every (s,b) (all 1 without
 * a condition); stays NULL, with no R jobs, where none holds (a warning).
 * Returns -1 out of memory, else the number of errors. */
static int build_recompute(pp_jobtable *t, const pp_schedule *sch)
{
    if (!sch->recompute)
        return 0;
    size_t n = (size_t)sch->S * (size_t)sch->B, nr = 0;
    if (!(t->recompute = malloc(n)))
        return -1;
    err_tally tally = {0};
    for (size_t i = 0; i < n; i++) {
        pp_env env = {(long long)(i / (size_t)sch->B), (long long)(i % (size_t)sch->B), DIR_F, 0};
        long long v = 1;
        if (sch->recompute_when)
            eval_at(sch, sch->recompute_when, &env, &v, "recompute when", &tally, 2);
        t->recompute[i] = v != 0;
        nr += t->recompute[i];
    }
    tally_note(sch, &tally, "recompute when");
    if (tally.count)
        return tally.count;
    if (nr == 0) {
        for (const pp_stmt *st = sch->stmts; st; st = st->next)
            if (st->kind == ST_RECOMPUTE)
                diag_warning(sch->diag, st->loc,
                             "'recompute when' holds for no job: nothing is recomputed");
        free(t->recompute);
        t->recompute = NULL;
    }
    t->js.recompute = t->recompute;
    return 0;
}

/* `offload [when]`: t->offload[s*B + b] for every (s,b) (all 1 without a
 * condition); NULL where none holds (a warning). A recomputed (s,b) keeps
 * no stash to move: both at one (s,b) is an error. Returns -1 out of
 * memory, else the number of errors. */
static int build_offload(pp_jobtable *t, const pp_schedule *sch)
{
    if (!sch->offload)
        return 0;
    size_t n = (size_t)sch->S * (size_t)sch->B, no = 0;
    if (!(t->offload = malloc(n)))
        return -1;
    err_tally tally = {0};
    int both = 0;
    for (size_t i = 0; i < n; i++) {
        pp_env env = {(long long)(i / (size_t)sch->B), (long long)(i % (size_t)sch->B), DIR_F, 0};
        long long v = 1;
        if (sch->offload_when)
            eval_at(sch, sch->offload_when, &env, &v, "offload when", &tally, 2);
        t->offload[i] = v != 0;
        no += t->offload[i];
        if (t->offload[i] && t->recompute && t->recompute[i] && both++ == 0)
            diag_error(sch->diag,
                       sch->offload_when ? sch->offload_when->loc : sch->fn_loc[FN_COMPUTE],
                       "offload at (s=%lld, b=%lld) is also recomputed: a recomputed forward "
                       "keeps no stash to offload (make 'offload when' and 'recompute when' "
                       "exclusive)",
                       env.s, env.b);
    }
    tally_note(sch, &tally, "offload when");
    if (tally.count || both)
        return tally.count + both;
    if (no == 0) {
        for (const pp_stmt *st = sch->stmts; st; st = st->next)
            if (st->kind == ST_OFFLOAD)
                diag_warning(sch->diag, st->loc,
                             "'offload when' holds for no job: nothing is offloaded");
        free(t->offload);
        t->offload = NULL;
    }
    return 0;
}

/* Offload's placement rule: F(s,b) and B(s,b) share a worker (its host
 * memory holds the stash between them). 1 after an error. */
static int check_offload_workers(pp_jobtable *t, const pp_schedule *sch)
{
    const pp_jobspace *js = &t->js;
    for (int i = 0; t->offload && i < js->S * js->B; i++) {
        int s = i / js->B, b = i % js->B;
        int f = job_id(js, s, b, DIR_F), bk = job_id(js, s, b, DIR_B);
        if (t->offload[i] && t->worker[f] != t->worker[bk]) {
            diag_error(sch->diag,
                       sch->offload_when ? sch->offload_when->loc : sch->fn_loc[FN_COMPUTE],
                       "offload at (s=%d, b=%d): F runs on worker %d but B on worker %d; an "
                       "offloaded stash's F and B must share a worker (its host memory holds "
                       "the stash between them)",
                       s, b, t->worker[f], t->worker[bk]);
            return 1;
        }
    }
    return 0;
}

/* R(s,b)'s placement, priority and cost, once F(s,b) and B(s,b) have
 * theirs: B's worker; F's weights; the priority at d = R where the
 * priority names R, else B's (the re-run then goes right before its
 * backward); `cost R` (per block with --layers), else F's cost. F and B
 * must share a worker (R re-reads F's kept input there). Away from the
 * stage's owner R reads fetched weights like any job (a fetch, or a kept
 * one with --keep-weights). Returns 1 after an error. */
static int fill_r(pp_jobtable *t, const pp_schedule *sch, int j, err_tally *tplace, err_tally *te,
                  err_tally *tcost)
{
    const pp_jobspace *js = &t->js;
    int s = job_s(js, j), b = job_b(js, j), f = job_id(js, s, b, DIR_F),
        bk = job_id(js, s, b, DIR_B);
    pp_env env = {s, b, DIR_R, 0};
    t->worker[j] = t->worker[bk];
    t->owner[j] = t->owner[f];
    if (t->worker[f] != t->worker[bk] && tplace->count++ == 0) {
        diag_error(sch->diag,
                   sch->recompute_when ? sch->recompute_when->loc : sch->fn_loc[FN_COMPUTE],
                   "recompute at (s=%d, b=%d): F runs on worker %d but B on worker %d; a "
                   "recomputed forward's F and B must share a worker (R re-reads F's input there)",
                   s, b, t->worker[f], t->worker[bk]);
        return 1;
    }
    long long v = t->priority[bk];
    if (sch->priority_r && sch->fn[FN_PRIORITY])
        eval_at(sch, sch->fn[FN_PRIORITY], &env, &v, "priority(s,b,d)", te, 1);
    t->priority[j] = v;
    t->cost[j] = t->cost[f];
    if (sch->cost[COST_R]) {
        v = 1;
        if (eval_at(sch, sch->cost[COST_R], &env, &v, "a cost", tcost, 1) && v <= 0 &&
            tcost->count++ == 0)
            diag_error(sch->diag, sch->cost[COST_R]->loc,
                       "cost R = %lld at (s=%d, b=%d): costs must be positive", v, s, b);
        t->cost[j] =
            (double)(v > 0 ? v : 1) * (sch->per_block ? pp_model_layers(&sch->model, s) : 1);
    }
    return 0;
}

/* What a job costs, from (last wins) the cost line or 1, the FLOPs
 * default, --costs; with --layers (per_block) times the stage's blocks,
 * except FLOPs costs, which count them already; a --costs time then also
 * counts the stage's embedding or head, as ends (end_costs.h) of the
 * layers it measured. */
static double dir_cost(const pp_schedule *sch, const pp_costs *measured, double *flops_cost[3],
                       double *const ends[2], const pp_env *env, err_tally *tcost, err_tally *tneg)
{
    const pp_expr *c = sch->cost[env->d];
    long long v = 1;
    if (c && eval_at(sch, c, env, &v, "a cost", tcost, 1) && v <= 0 && tneg->count++ == 0) {
        char job[96];
        job_str(job, sizeof job, env, 1);
        diag_error(sch->diag, c->loc, "cost %c = %lld at %s: costs must be positive", "FBW"[env->d],
                   v, job);
    }
    double cost = (double)(v > 0 ? v : 1);
    int scaled = 0; /* FLOPs costs already count the stage's blocks */
    if (flops_cost[env->d]) {
        cost = flops_cost[env->d][env->s];
        scaled = 1;
    }
    double end = 0;
    if (measured && measured->dir[env->d]) {
        cost = measured->dir[env->d][measured->n[env->d] == 1 ? 0 : env->s];
        scaled = 0;
        end = ends[0] ? ends[env->d != DIR_F][env->s] : 0;
    }
    /* --layers: a cost line, the unit cost and --costs are one block's */
    if (sch->per_block && !scaled)
        cost *= pp_model_layers(&sch->model, (int)env->s) + end;
    return cost;
}

/* tensor = T (issue 27, isa/tensor.h): a job computes its shard, its cost
 * divided by T, and F, B and BackwardInput add their all-reduces, each
 * tensor_latency + bytes / tensor_bandwidth (`cost tensor_*` lines, or
 * --costs "tensor_latency" / "tensor_bandwidth"; default 0: free, as
 * transfers are). A direction --costs gives is taken as measured on a
 * rank of the run, all-reduces included. The report counts the
 * all-reduces (report_tensor.c). */
static void tensor_costs(pp_jobtable *t, const pp_schedule *sch, const pp_costs *measured)
{
    uint32_t T = pp_model_tensor(&sch->model);
    t->tensor_latency = measured && measured->has_tensor_latency
                            ? measured->tensor_latency
                            : transfer_cost(sch, COST_TENSOR_LATENCY);
    t->tensor_bandwidth = measured && measured->has_tensor_bandwidth
                              ? measured->tensor_bandwidth
                              : transfer_cost(sch, COST_TENSOR_BANDWIDTH);
    if (T < 2)
        return;
    size_t bytes = pp_tensor_allreduce_bytes(&sch->model);
    double one =
        t->tensor_latency + (t->tensor_bandwidth > 0 ? (double)bytes / t->tensor_bandwidth : 0);
    for (int j = 0; j < job_count(&t->js); j++) {
        /* a --costs time was measured on a rank of such a run: its shard's
         * compute and its all-reduces already */
        if (!job_exists(&t->js, j) || (measured && measured->dir[job_d(&t->js, j)]))
            continue;
        t->cost[j] /= T;
        if (job_d(&t->js, j) != DIR_W)
            t->cost[j] += one * pp_tensor_allreduces(&sch->model, job_s(&t->js, j));
    }
}

int pp_jobtable_build(pp_jobtable *t, const pp_schedule *sch, const pp_costs *measured)
{
    memset(t, 0, sizeof *t);
    t->js = (pp_jobspace){(int)sch->S, (int)sch->B, 2, NULL, NULL};
    t->W = (int)sch->W;
    int before = sch->diag->errors, split_rc = build_split(t, sch);
    if (split_rc < 0) {
        diag_nomem(sch->diag, "for 'split backward when' at %lld jobs", sch->S * sch->B);
        return 1;
    }
    if (split_rc)
        return sch->diag->errors - before;
    int rc_rc = build_recompute(t, sch);
    if (rc_rc < 0) {
        diag_nomem(sch->diag, "for 'recompute' at %lld jobs", sch->S * sch->B);
        return 1;
    }
    if (rc_rc)
        return sch->diag->errors - before;
    int off_rc = build_offload(t, sch);
    if (off_rc < 0) {
        diag_nomem(sch->diag, "for 'offload' at %lld jobs", sch->S * sch->B);
        return 1;
    }
    if (off_rc)
        return sch->diag->errors - before;
    int N = job_count(&t->js);
    t->worker = calloc((size_t)N, sizeof *t->worker);
    t->owner = calloc((size_t)N, sizeof *t->owner);
    t->priority = calloc((size_t)N, sizeof *t->priority);
    t->cost = calloc((size_t)N, sizeof *t->cost);
    t->xfer = calloc((size_t)N, sizeof *t->xfer);
    t->fetch = calloc((size_t)N, sizeof *t->fetch);
    t->wbytes = calloc((size_t)t->js.S, sizeof *t->wbytes);
    t->cbytes = calloc((size_t)t->js.S, sizeof *t->cbytes);
    t->opt = calloc((size_t)t->js.S, sizeof *t->opt);
    t->gadd = calloc((size_t)t->js.S, sizeof *t->gadd);
    if (!t->worker || !t->owner || !t->priority || !t->cost || !t->xfer || !t->fetch ||
        !t->wbytes || !t->cbytes || !t->opt || !t->gadd) {
        diag_nomem(sch->diag, "for %d jobs", N);
        return 1;
    }
    for (int s = 0; s < t->js.S; s++) {
        t->wbytes[s] = pp_stage_weight_bytes(&sch->model, t->js.S, s);
        t->cbytes[s] = pp_stage_compute_bytes(&sch->model, t->js.S, s);
    }
    if (measured && check_measured(sch, measured, t->js.ND))
        return sch->diag->errors - before;
    const double *o = measured ? measured->dir[PP_COSTS_O] : NULL,
                 *g = measured ? measured->dir[PP_COSTS_G] : NULL;
    for (int s = 0; s < t->js.S; s++) {
        double blocks = sch->per_block ? (double)pp_model_layers(&sch->model, s) : 1;
        if (o)
            t->opt[s] = o[measured->n[PP_COSTS_O] == 1 ? 0 : s] * blocks;
        if (g)
            t->gadd[s] = g[measured->n[PP_COSTS_G] == 1 ? 0 : s] * blocks;
    }
    double *flops_cost[3] = {NULL, NULL, NULL};
    if (default_costs(sch, measured, t->js.ND, flops_cost)) {
        for (int d = 0; d < 3; d++)
            free(flops_cost[d]);
        diag_nomem(sch->diag, "for the stages' default costs");
        return 1;
    }
    double *ends[2] = {NULL, NULL}; /* per block, a --costs time is one layer's */
    if (sch->per_block && measured && pp_end_costs(sch, ends)) {
        for (int d = 0; d < 3; d++)
            free(flops_cost[d]);
        diag_nomem(sch->diag, "for the stages' end costs");
        return 1;
    }
    err_tally te[FN_COUNT] = {{0}}, trange[2] = {{0}}, tcost = {0}, tneg = {0}, trc = {0};
    const char *what[FN_COUNT] = {"compute(s,b,d)", "weights(s,b,d)", "priority(s,b,d)"};
    for (int j = 0; j < N; j++) {
        pp_env env = {job_s(&t->js, j), job_b(&t->js, j), job_d(&t->js, j), 0};
        long long v = 0;
        if (env.d == DIR_R) { /* after every F/B/W id: its F and B are filled */
            if (job_exists(&t->js, j))
                fill_r(t, sch, j, &trc, &te[2], &tcost);
            continue;
        }
        if (!job_exists(&t->js, j)) { /* W(s,b) of a backward that is not split */
            t->worker[j] = t->worker[j - 1];
            t->owner[j] = t->owner[j - 1];
            continue;
        }
        if (eval_at(sch, sch->fn[FN_COMPUTE], &env, &v, what[0], &te[0], 1))
            check_range(sch, FN_COMPUTE, v, &env, &trange[0]);
        t->worker[j] = (int)(v >= 0 && v < sch->W ? v : 0);
        if (sch->fn[FN_WEIGHTS]) {
            if (eval_at(sch, sch->fn[FN_WEIGHTS], &env, &v, what[1], &te[1], 1 | SAME_ENV))
                check_range(sch, FN_WEIGHTS, v, &env, &trange[1]);
            t->owner[j] = (int)(v >= 0 && v < sch->W ? v : 0);
        } else
            t->owner[j] = t->worker[j];
        v = 0;
        if (sch->fn[FN_PRIORITY])
            eval_at(sch, sch->fn[FN_PRIORITY], &env, &v, what[2], &te[2], 1 | SAME_ENV);
        t->priority[j] = v;
        t->cost[j] = dir_cost(sch, measured, flops_cost, ends, &env, &tcost, &tneg);
        if (job_makes_wgrad(&t->js, j) && env.d == DIR_B && t->js.ND == 3) {
            /* a full backward among split ones does both halves' work */
            pp_env w = env;
            w.d = DIR_W;
            t->cost[j] += dir_cost(sch, measured, flops_cost, ends, &w, &tcost, &tneg);
        }
    }
    for (int d = 0; d < 3; d++)
        free(flops_cost[d]);
    free(ends[0]);
    free(ends[1]);
    tensor_costs(t, sch, measured);
    for (int f = 0; f < FN_COUNT; f++)
        tally_note(sch, &te[f], what[f]);
    tally_note(sch, &trc, "recompute's placement");
    tally_note(sch, &trange[0], "the range check of compute");
    tally_note(sch, &trange[1], "the range check of weights");
    if (sch->inflight) {
        t->inflight = calloc((size_t)t->W, sizeof *t->inflight);
        err_tally ti = {0};
        for (int w = 0; t->inflight && w < t->W; w++) {
            pp_env env = {0, 0, 0, w};
            long long v = 1;
            if (eval_at(sch, sch->inflight, &env, &v, "limit inflight", &ti, 0) && v < 1 &&
                ti.count++ == 0)
                diag_error(sch->diag, sch->inflight->loc,
                           "limit inflight = %lld at worker %d: it must be at least 1", v, w);
            t->inflight[w] = v;
        }
    }
    t->overlap = measured && measured->has_overlap ? measured->overlap : overlap_cost(sch);
    t->cores = measured && measured->has_cores ? measured->cores : 0;
    if (sch->overlap && eval_pairable(t, sch)) {
        diag_nomem(sch->diag, "for the overlap condition of %d jobs", N);
        return 1;
    }
    t->latency =
        measured && measured->has_latency ? measured->latency : transfer_cost(sch, COST_LATENCY);
    t->bandwidth = measured && measured->has_bandwidth ? measured->bandwidth
                                                       : transfer_cost(sch, COST_BANDWIDTH);
    t->burst = measured && measured->has_burst ? measured->burst : 0;
    t->allreduce_tree = measured && measured->allreduce_tree;
    t->half_duplex = measured && measured->half_duplex;
    t->recv_waits = measured && measured->recv_waits;
    t->job_overhead = measured && measured->has_job_overhead ? measured->job_overhead : 0;
    t->wake = measured && measured->has_wake ? measured->wake : 0;
    if (measured && measured->allreduce_ranks) {
        t->ar_latency = measured->allreduce_latency;
        t->ar_bandwidth = measured->allreduce_bandwidth;
        t->ar_ranks = measured->allreduce_ranks;
    }
    t->host_bandwidth = measured && measured->has_host_bandwidth
                            ? measured->host_bandwidth
                            : transfer_cost(sch, COST_HOST_BANDWIDTH);
    if (t->offload && check_offload_workers(t, sch))
        return sch->diag->errors - before;
    if (t->offload) {
        size_t SB = (size_t)t->js.S * (size_t)t->js.B;
        if (!(t->hcopy = calloc(SB, sizeof *t->hcopy))) {
            diag_nomem(sch->diag, "for 'offload' at %zu jobs", SB);
            return 1;
        }
        for (int i = 0; i < (int)SB; i++) {
            int s = i / t->js.B, b = i % t->js.B;
            uint64_t n = job_split(&t->js, s, b)
                             ? pp_stage_stash_bytes_split(&sch->model, t->js.S, s)
                             : pp_stage_stash_bytes(&sch->model, t->js.S, s);
            t->hcopy[i] = t->host_bandwidth > 0 ? (double)n / t->host_bandwidth : 0;
        }
    }
    for (int j = 0; j < N; j++) {
        int p = job_pred(&t->js, j);
        if (!job_exists(&t->js, j))
            continue;
        if (p >= 0 && t->worker[p] != t->worker[j])
            t->xfer[j] = pp_transfer_time(t, pp_job_input_bytes(t, &sch->model, j));
        if (pp_job_reads_remote_weights(t, j)) /* a fetch moves the compute copy */
            t->fetch[j] = pp_transfer_time(t, t->cbytes[job_s(&t->js, j)]);
    }
    return sch->diag->errors - before;
}

void pp_jobtable_free(pp_jobtable *t)
{
    free(t->worker);
    free(t->owner);
    free(t->priority);
    free(t->cost);
    free(t->inflight);
    free(t->xfer);
    free(t->fetch);
    free(t->kept);
    free(t->wbytes);
    free(t->cbytes);
    free(t->opt);
    free(t->gadd);
    free(t->split);
    free(t->recompute);
    free(t->offload);
    free(t->hcopy);
    free(t->pairable);
    memset(t, 0, sizeof *t);
}

/* a ring moves 2 (R - 1) / R of the bytes through each worker; a binomial
 * tree sends the whole 2 ceil(log2 R) times in turn */
static double allreduce_shape(const pp_jobtable *t, int R)
{
    return t->allreduce_tree ? 2 * ceil(log2((double)R)) : 2.0 * (R - 1) / R;
}

double pp_allreduce_time(const pp_jobtable *t, uint64_t bytes, int R)
{
    if (t->ar_ranks)
        return (t->ar_latency + (t->ar_bandwidth > 0 ? (double)bytes / t->ar_bandwidth : 0)) *
               allreduce_shape(t, R) / allreduce_shape(t, t->ar_ranks);
    double chunk = t->bandwidth > 0 ? (double)bytes / R / t->bandwidth : 0;
    return 2.0 * (R - 1) * (t->latency + chunk);
}
