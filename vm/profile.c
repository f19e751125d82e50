/* profile.c - ppvm --profile FILE (profile.h): collects job durations per
 * stage and direction on every rank, gathers them to rank 0 and writes the
 * medians, with the link's latency and bandwidth, as a ppc --costs file. */
#include "profile.h"

#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/model.h"
#include "../isa/model_words.h"
#include "check.h"
#include "link_fit.h"
#include "progress.h"
#include "vm.h"

/* One (direction, stage)'s jobs on this rank: per step, their mean
 * duration (a growing array; the last entry is the step in progress, over
 * `in_last` jobs so far). */
typedef struct {
    double *v;
    size_t n, cap;
    int last_step, in_last;
    size_t jobs; /* jobs in the counted steps */
} samples;

struct pp_profile {
    FILE *out; /* rank 0 only */
    const char *path;
    int S, steps, me;
    int jobs;         /* this rank's jobs a step: F, B, W and R instructions */
    int oom;          /* a sample could not be kept: pp_profile_finish fails on every rank */
    samples *t;       /* [PP_PROF_DIRS * S] */
    double *busy;     /* [steps] this rank's time in jobs and optimizer steps, per step */
    double *span;     /* [steps] the step's time (the slowest rank's), per step; < 0: not run */
    double *own;      /* [steps] this rank's own time from the step's start to its end */
    double *wait;     /* [steps] of it, blocked in waits (pp_profile_waited); < 0: not timed */
    char model[1024]; /* the plan's model in words (isa/model_words.h) */
    char backend[16]; /* pp_profile_backend's */
    /* pp_profile_tensor's (issue 27): the tensor link, when measured */
    int has_tensor;
    double tensor_latency, tensor_bandwidth;
    int shape; /* pp_profile_link_shape's (issue 29): -1 unknown, else PP_LINK_* flags */
    /* pp_profile_reduce's (issue 29): the data-parallel all-reduce; 0 ranks: not measured */
    int reduce_ranks;
    double reduce_latency, reduce_bandwidth;
    int has_wake;
    double wake; /* pp_profile_wake's (profile_wake.c) */
    /* pp_profile_host's (issue 26): offload's host link, when measured */
    int has_host;
    double host_bandwidth;
};

void pp_profile_link_shape(pp_profile *pr, int shape) { pr->shape = shape; }

void pp_profile_wake(pp_profile *pr, double seconds)
{
    pr->has_wake = 1;
    pr->wake = seconds;
}

void pp_profile_host(pp_profile *pr, double bandwidth)
{
    pr->has_host = 1;
    pr->host_bandwidth = bandwidth;
}

void pp_profile_reduce(pp_profile *pr, double latency, double bandwidth, int ranks)
{
    pr->reduce_ranks = ranks;
    pr->reduce_latency = latency;
    pr->reduce_bandwidth = bandwidth;
}

void pp_profile_tensor(pp_profile *pr, double latency, double bandwidth)
{
    pr->has_tensor = 1;
    pr->tensor_latency = latency;
    pr->tensor_bandwidth = bandwidth;
}

void pp_profile_backend(pp_profile *pr, const char *name)
{
    snprintf(pr->backend, sizeof pr->backend, "%s", name);
}

/* Ranks per online core on rank 0's node (collective): > 1 when ranks
 * shared cores while they were measured. *shared_cores: that node's
 * online cores where every rank ran on it and they outnumbered its
 * cores (the costs file's "cores"), else 0. */
static double ranks_per_core(long *shared_cores)
{
    MPI_Comm node;
    int n = 1, world = 1;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_size(node, &n));
    mpiCheck(MPI_Comm_free(&node));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &world));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cores = cores > 0 ? cores : 1;
    *shared_cores = n == world && n > cores ? cores : 0;
    return (double)n / (double)cores;
}

pp_profile *pp_profile_open(const char *path, const pp_plan *p, int steps, int me)
{
    pp_profile *pr = calloc(1, sizeof *pr);
    int ok = pr != NULL;
    if (!pr)
        pp_vm_error(me, "out of memory for --profile");
    else {
        pr->path = path;
        pr->shape = -1;
        pr->S = (int)p->S;
        pp_model_words(&p->model, p->S, pr->model, sizeof pr->model);
        pr->steps = steps;
        pr->me = me;
        for (uint32_t i = 0; i < p->ninstr; i++) {
            pp_op_job k = pp_op_job_of(p->code[i].op);
            pr->jobs += k != PP_JOB_NONE && k != PP_JOB_O;
        }
        pr->t = calloc((size_t)PP_PROF_DIRS * p->S, sizeof *pr->t);
        pr->busy = calloc((size_t)steps + 1, sizeof *pr->busy);
        pr->span = malloc(((size_t)steps + 1) * sizeof *pr->span);
        pr->own = calloc((size_t)steps + 1, sizeof *pr->own);
        pr->wait = malloc(((size_t)steps + 1) * sizeof *pr->wait);
        ok = pr->t && pr->busy && pr->span && pr->own && pr->wait;
        for (int i = 0; ok && i < steps; i++)
            pr->span[i] = pr->wait[i] = -1; /* --resume starts later: steps before it not run */
        if (!ok)
            pp_vm_error(me, "out of memory for --profile");
    }
    if (ok && me == 0 && !(pr->out = fopen(path, "w"))) {
        pp_vm_error(-1, "--profile %s: cannot write: %s", path, strerror(errno));
        ok = 0;
    }
    int all;
    mpiCheck(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (all)
        return pr;
    if (pr && pr->out)
        fclose(pr->out);
    if (pr) {
        free(pr->t);
        free(pr->busy);
        free(pr->span);
        free(pr->own);
        free(pr->wait);
    }
    free(pr);
    return NULL;
}

int pp_profile_dir(const pp_instr *in)
{
    /* the opcode table's job column (isa/opcodes.h) */
    static const int dir[] = {
        [PP_JOB_NONE] = -1,      [PP_JOB_F] = PP_PROF_F, [PP_JOB_B] = PP_PROF_BFULL,
        [PP_JOB_BI] = PP_PROF_B, [PP_JOB_W] = PP_PROF_W, [PP_JOB_O] = PP_PROF_O,
        [PP_JOB_R] = -1}; /* a re-run forward is not a sample of F's own time */
    return in->op == PP_OP_RecvWeightGrad ? PP_PROF_G : dir[pp_op_job_of(in->op)];
}

void pp_profile_add(pp_profile *pr, int step, int dir, int s, double seconds)
{
    if (step >= 0 && step < pr->steps)
        pr->busy[step] += seconds;
    if ((step == 0 && pr->steps > 1) || pr->oom)
        return; /* the warm-up: first touches of every buffer, cold caches */
    samples *x = &pr->t[dir * pr->S + s];
    x->jobs++;
    if (x->n > 0 && x->last_step == step) { /* another of the step's jobs: the mean */
        x->in_last++;
        x->v[x->n - 1] += (seconds - x->v[x->n - 1]) / x->in_last;
        return;
    }
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 16;
        double *v = realloc(x->v, cap * sizeof *v);
        if (!v) { /* said and failed at pp_profile_finish, where all ranks meet */
            pr->oom = 1;
            return;
        }
        x->v = v;
        x->cap = cap;
    }
    x->v[x->n++] = seconds;
    x->last_step = step;
    x->in_last = 1;
}

void pp_profile_step(pp_profile *pr, int step, double seconds, double own)
{
    if (step >= 0 && step < pr->steps) {
        pr->span[step] = seconds;
        pr->own[step] = own;
    }
}

void pp_profile_waited(pp_profile *pr, int step, double seconds)
{
    if (step >= 0 && step < pr->steps)
        pr->wait[step] = seconds;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void pp_sort(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }

double pp_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    pp_sort(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

size_t pp_profile_probe_bytes(const pp_plan *p)
{
    size_t bytes = pp_act_bytes(&p->model);
    for (uint32_t s = 0; s < p->S; s++) {
        /* fp32 gradients (returns, all-reduces): at least the weights' copy */
        size_t g = pp_stage_param_count(&p->model, (int)p->S, (int)s) * sizeof(float);
        if (g > bytes)
            bytes = g;
    }
    /* twice the largest message, and well past a shaping token bucket's
     * burst (pp_profile_link); an MPI count is an int */
    bytes = 2 * bytes > PP_PROBE_MIN_BYTES ? 2 * bytes : PP_PROBE_MIN_BYTES;
    return bytes < ((size_t)1 << 28) ? bytes : (size_t)1 << 28;
}

size_t pp_profile_reduce_bytes(const pp_plan *p)
{
    size_t bytes = 0;
    for (uint32_t s = 0; s < p->S; s++) {
        size_t g = pp_stage_param_count(&p->model, (int)p->S, (int)s) * sizeof(float);
        bytes = g > bytes ? g : bytes;
    }
    bytes = bytes > 4096 ? bytes : 4096; /* past the 8 bytes the latency is taken at */
    return bytes < ((size_t)1 << 28) ? bytes : (size_t)1 << 28;
}

/* One key: a number per stage, or nothing when no stage has a sample. A job
 * faster than the clock resolves is written as 1 ns: ppc wants job costs
 * positive (zero_ok: an optimizer step or a gradient's add may be 0). */
static void write_key(FILE *f, const char *key, const double *med, const size_t *n, int S,
                      int zero_ok, int *first)
{
    int any = 0;
    for (int s = 0; s < S; s++)
        any |= n[s] > 0;
    if (!any)
        return;
    fprintf(f, "%s\n  \"%s\": [", *first ? "" : ",", key);
    for (int s = 0; s < S; s++)
        fprintf(f, "%s%.9g", s ? ", " : "", !zero_ok && med[s] < 1e-9 ? 1e-9 : med[s]);
    fprintf(f, "]");
    *first = 0;
}

/* B and W from the full backwards (PP_PROF_BFULL), times per stage in
 * med[dir * S + s] with their job counts: a plan that splits no backward
 * writes the full one as B (and no W); a stage with only full backwards
 * among split ones elsewhere gets half of the full one as each, so B + W
 * (what ppc charges a full backward among split ones) is what it took; a
 * stage with both keeps its split jobs' proportion of B to W, scaled so
 * that its backwards' total time is what it measured: DualPipeV splits one
 * backward of a stage's eight, and charged B + W of that one, the other
 * seven came to 0.88 of what they took. */
static void split_full_backwards(double *med, size_t *count, int S)
{
    size_t nw = 0;
    for (int s = 0; s < S; s++)
        nw += count[PP_PROF_W * S + s];
    for (int s = 0; s < S; s++) {
        int b = PP_PROF_B * S + s, w = PP_PROF_W * S + s, f = PP_PROF_BFULL * S + s;
        if (count[f] == 0)
            continue;
        if (count[b] > 0 && med[b] + med[w] > 0) { /* both: the total kept */
            double nf = (double)count[f], nb = (double)count[b], nwj = (double)count[w];
            double total = nf * med[f] + nb * med[b] + nwj * med[w];
            double k = total / (nf * (med[b] + med[w]) + nb * med[b] + nwj * med[w]);
            med[b] *= k;
            med[w] *= k;
            continue;
        }
        if (count[b] > 0)
            continue;
        if (nw == 0) {
            med[b] = med[f];
        } else {
            med[b] = med[w] = med[f] / 2;
            count[w] = count[f];
        }
        count[b] = count[f];
    }
}

/* Every rank's per-step records, [rank][step], on rank 0. */
typedef struct {
    double *busy, *own, *wait;
} gathered;

/* Rank r's median over the counted steps of one column: busy, idle (the
 * step less busy), wait, or host (its own step less busy and wait). */
enum { COL_BUSY, COL_IDLE, COL_WAIT, COL_HOST, COLS };

static double column(const gathered *g, const double *span, int r, int steps, int first, int col,
                     double *tmp)
{
    int n = 0;
    for (int i = first; i < steps; i++) {
        size_t at = (size_t)r * steps + i;
        if (span[i] < 0)
            continue;
        tmp[n++] = col == COL_BUSY   ? g->busy[at]
                   : col == COL_IDLE ? span[i] - g->busy[at]
                   : col == COL_WAIT ? g->wait[at]
                                     : g->own[at] - g->busy[at] - g->wait[at];
    }
    return pp_median(tmp, (size_t)n);
}

/* Whether every rank timed its waits in every counted step (the cpu
 * backend does: pp_profile_waited). */
static int waits_timed(const gathered *g, const double *span, int size, int steps)
{
    for (int r = 0; r < size; r++)
        for (int i = steps > 1; i < steps; i++)
            if (span[i] >= 0 && g->wait[(size_t)r * steps + i] < 0)
                return 0;
    return 1;
}

/* "job_overhead": the interpreter's own time per job (the median over
 * the ranks with jobs of their median "host" over their jobs a step), or
 * -1 where the backend did not time its waits. */
static double job_overhead(const gathered *g, const double *span, const int *jobs, int size,
                           int steps, double *tmp)
{
    int first = steps > 1;
    if (!waits_timed(g, span, size, steps))
        return -1;
    double *per = tmp + steps; /* column() uses tmp[0 .. steps) */
    int n = 0;
    for (int r = 0; r < size; r++)
        if (jobs[r] > 0) {
            double h = column(g, span, r, steps, first, COL_HOST, tmp) / jobs[r];
            per[n++] = h > 0 ? h : 0;
        }
    return n ? pp_median(per, (size_t)n) : -1;
}

/* "measured": what the steps took, beside the costs (ppc --costs reads the
 * object and ignores it): over the steps after the warm-up (all of them
 * with one step), the median step (the slowest rank's time, what ppvm
 * prints), each rank's median time in jobs and optimizer steps ("busy") and
 * the rest of its step ("idle": waiting in receives, sends, collectives and
 * fetches, and the interpreter's own work), where the backend timed its
 * waits, those ("wait") and the rest of the rank's own step ("host": the
 * interpreter's own work: dispatch, posting transfers, copies), and the
 * median over steps of the ranks' idle share of the step ("bubble").
 * tmp has room for max(size, steps) values. */
static void write_measured(FILE *f, const gathered *g, const double *span, int size, int steps,
                           double *tmp)
{
    static const char *name[COLS] = {"busy", "idle", "wait", "host"};
    int first = steps > 1, n = 0, waits = waits_timed(g, span, size, steps);
    for (int i = first; i < steps; i++)
        if (span[i] >= 0)
            tmp[n++] = span[i];
    if (n == 0)
        return;
    fprintf(f, ",\n  \"measured\": {\"steps\": %d, \"step\": %.9g,", n, pp_median(tmp, (size_t)n));
    for (int col = 0; col < (waits ? COLS : COL_WAIT); col++) {
        fprintf(f, " \"%s\": [", name[col]);
        for (int r = 0; r < size; r++)
            fprintf(f, "%s%.9g", r ? ", " : "", column(g, span, r, steps, first, col, tmp));
        fprintf(f, "],");
    }
    n = 0;
    for (int i = first; i < steps; i++) {
        if (!(span[i] > 0))
            continue;
        double idle = 0;
        for (int r = 0; r < size; r++)
            idle += span[i] - g->busy[(size_t)r * steps + i];
        tmp[n++] = idle / (size * span[i]);
    }
    fprintf(f, " \"bubble\": %.6g}", n ? pp_median(tmp, (size_t)n) : 0.0);
}

int pp_profile_finish(pp_profile *pr, int link, double latency, double bandwidth, double burst,
                      double overlap)
{
    int size, S = pr->S, K = PP_PROF_DIRS * S, me = pr->me, rc = -1;
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    /* Everything the gathers need first, agreed on by every rank: one that
     * left the collectives below would leave the others waiting. */
    double *mine = malloc((size_t)K * sizeof *mine), *med = calloc((size_t)K, sizeof *med);
    long long *n = malloc((size_t)K * sizeof *n), *total = calloc((size_t)K, sizeof *total);
    size_t *count = calloc((size_t)K, sizeof *count);
    int steps = pr->steps;
    gathered g = {NULL, NULL, NULL};
    int *jobs = me == 0 ? malloc((size_t)size * sizeof *jobs) : NULL;
    if (me == 0) {
        g.busy = malloc((size_t)size * (steps + 1) * sizeof *g.busy);
        g.own = malloc((size_t)size * (steps + 1) * sizeof *g.own);
        g.wait = malloc((size_t)size * (steps + 1) * sizeof *g.wait);
    }
    double *tmp = me == 0 ? malloc(((size_t)size + steps + 1) * sizeof *tmp) : NULL;
    int ok = !pr->oom && mine && med && n && total && count &&
             (me != 0 || (g.busy && g.own && g.wait && jobs && tmp));
    if (!pp_vm_all_ok(ok, me, "out of memory for --profile"))
        goto out;
    mpiCheck(MPI_Gather(pr->busy, steps, MPI_DOUBLE, g.busy, steps, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Gather(pr->own, steps, MPI_DOUBLE, g.own, steps, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Gather(pr->wait, steps, MPI_DOUBLE, g.wait, steps, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Gather(&pr->jobs, 1, MPI_INT, jobs, 1, MPI_INT, 0, MPI_COMM_WORLD));
    /* each key: this rank's median over its steps' means (-1 without one),
     * then the largest over the ranks. A step is as long as its slowest
     * rank's part: DDP S=2 B=2 on 2 cpu ranks ran the same jobs 20-40%
     * slower on one rank than the other for whole runs, and from the mean
     * of the two ranks' medians ppc predicted 0.85-0.91 of its own step
     * (from the largest, 0.93-0.99; FSDP, whose ranks differed only in one
     * stage, 1.09-1.12 where the mean gave 1.01-1.02) */
    for (int k = 0; k < K; k++) {
        n[k] = (long long)pr->t[k].jobs;
        mine[k] = pr->t[k].n ? pp_median(pr->t[k].v, pr->t[k].n) : -1;
    }
    mpiCheck(MPI_Reduce(mine, med, K, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Reduce(n, total, K, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    for (int k = 0; me == 0 && k < K; k++)
        count[k] = (size_t)total[k];
    rc = 0;
    long shared_cores;
    double rpc = ranks_per_core(&shared_cores);
    if (me == 0) {
        split_full_backwards(med, count, S);
        static const char *key[PP_PROF_G + 1] = {"F", "B", "W", "O", "G"};
        int first = 1;
        fprintf(pr->out, "{");
        for (int d = 0; d <= PP_PROF_G; d++)
            write_key(pr->out, key[d], med + d * S, count + d * S, S,
                      d == PP_PROF_O || d == PP_PROF_G, &first);
        if (link)
            fprintf(pr->out, ",\n  \"latency\": %.9g,\n  \"bandwidth\": %.9g,\n  \"burst\": %.9g",
                    latency, bandwidth, burst);
        if (link && pr->shape >= 0)
            fprintf(pr->out,
                    ",\n  \"allreduce\": \"%s\",\n  \"duplex\": \"%s\",\n  \"progress\": \"%s\"",
                    pr->shape & PP_LINK_TREE ? "tree" : "ring",
                    pr->shape & PP_LINK_HALF ? "half" : "full",
                    pr->shape & PP_LINK_WAITS ? "wait" : "always");
        if (link && pr->reduce_ranks)
            fprintf(pr->out,
                    ",\n  \"allreduce_latency\": %.9g,\n  \"allreduce_bandwidth\": %.9g,\n  "
                    "\"allreduce_ranks\": %d",
                    pr->reduce_latency, pr->reduce_bandwidth, pr->reduce_ranks);
        if (pr->has_tensor)
            fprintf(pr->out, ",\n  \"tensor_latency\": %.9g,\n  \"tensor_bandwidth\": %.9g",
                    pr->tensor_latency, pr->tensor_bandwidth);
        if (pr->has_host)
            fprintf(pr->out, ",\n  \"host_bandwidth\": %.9g", pr->host_bandwidth);
        if (pr->has_wake)
            fprintf(pr->out, ",\n  \"wake\": %.9g", pr->wake);
        double per_job = job_overhead(&g, pr->span, jobs, size, steps, tmp);
        if (per_job >= 0)
            fprintf(pr->out, ",\n  \"job_overhead\": %.9g", per_job);
        if (overlap >= 0) /* what this backend does with an overlapped pair */
            fprintf(pr->out, ",\n  \"overlap\": %.9g", overlap);
        /* what it was measured on: ppc --costs refuses another model */
        fprintf(pr->out, ",\n  \"model\": \"%s\"", pr->model);
        if (pr->backend[0])
            fprintf(pr->out, ",\n  \"backend\": \"%s\"", pr->backend);
        fprintf(pr->out, ",\n  \"ranks_per_core\": %.6g", rpc);
        if (shared_cores && !strcmp(pr->backend, "cpu")) /* ranks sharing cores (sim.h) */
            fprintf(pr->out, ",\n  \"cores\": %ld", shared_cores);
        write_measured(pr->out, &g, pr->span, size, steps, tmp);
        fprintf(pr->out, "\n}\n");
        int failed = ferror(pr->out) | fclose(pr->out);
        pr->out = NULL;
        if (failed) {
            pp_vm_error(-1, "--profile %s: write failed: %s", pr->path, strerror(errno));
            rc = -1;
        }
    }
out:
    pp_profile_discard(pr); /* closes the file if it is still open */
    free(mine);
    free(med);
    free(n);
    free(total);
    free(count);
    free(g.busy);
    free(g.own);
    free(g.wait);
    free(jobs);
    free(tmp);
    return rc;
}

void pp_profile_discard(pp_profile *pr)
{
    if (!pr)
        return;
    if (pr->out)
        fclose(pr->out);
    for (int k = 0; k < PP_PROF_DIRS * pr->S; k++)
        free(pr->t[k].v);
    free(pr->t);
    free(pr->busy);
    free(pr->span);
    free(pr->own);
    free(pr->wait);
    free(pr);
}

/* A pause in which a token bucket refills `bytes` at `bandwidth` (at most
 * 50 ms: a rate read as very low is noise, not a link to wait for). */
static void refill(double bytes, double bandwidth)
{
    double s = bandwidth > 0 ? bytes / bandwidth : 0;
    s = s < 0.05 ? s : 0.05;
    struct timespec nap = {0, (long)(s * 1e9)};
    nanosleep(&nap, NULL);
}

/* The fastest half round trip of `bytes`, of `reps` after `warm`. */
static double one_way(pp_round_trip rt, void *ctx, size_t bytes, int warm, int reps)
{
    double fastest = 0;
    for (int i = 0; i < warm + reps; i++) {
        double r = rt(ctx, bytes);
        if (i == warm || (i > warm && r / 2 < fastest))
            fastest = r / 2;
    }
    return fastest;
}

/* Times come from the fastest trips: time taken from a rank by others
 * sharing its core only ever adds to a trip. On a loaded machine the
 * medians of two sizes differed by less than that noise (even by a
 * negative amount, which gave a bandwidth of 0), and the median 8-byte trip
 * was a scheduler's time slice (0.2 us quiet, up to 6 ms under a load of 10
 * on 2 cores), which the simulation then charged to every transfer and
 * all-reduce (a 2-rank pp-dp predicted 19 ms for a step measured at 2 ms);
 * the fastest trips are the link's own cost. The same number of trips on
 * both ranks whatever they measure: no rank may decide alone to measure
 * again.
 *
 * The rate comes from two large sizes, bytes / 2 and bytes, and not from
 * one size against the 8-byte trip: a link shaped by a token bucket (tc's
 * tbf; a cloud's burst credit) passes its burst at once and only then its
 * rate, so one message inside the burst read 246-272 MB/s on a 1 Gbit/s
 * (125 MB/s) link with a 256 KB burst. For m past twice the burst (the
 * bucket refills while the other rank sends back) a one-way trip takes
 * latency + (m - burst) / rate: the slope between the two sizes is the
 * rate, and what the larger trips lack of latency + m / rate is the burst. */
void pp_profile_link(pp_round_trip rt, void *ctx, size_t bytes, size_t msg, double *latency,
                     double *bandwidth, double *burst)
{
    enum { WARM = 3, REPS = 21, BIG_WARM = 1, BIG_REPS = 7, BURST_REPS = 5 };
    size_t m1 = bytes / 2 > 8 ? bytes / 2 : 8, m2 = bytes > m1 ? bytes : m1 + 8;
    double t0 = one_way(rt, ctx, 8, WARM, REPS), t1 = 0, t2 = 0;
    /* the two sizes in turn, so that a spell of load slows both alike (one
     * after the other, a spell over all of n/2's trips read a burst of 0
     * and over n's 400 KB, where tbf's was 64 KB and 256 KB) */
    for (int i = 0; i < BIG_WARM + BIG_REPS; i++) {
        double a = one_way(rt, ctx, m1, 0, 1), b = one_way(rt, ctx, m2, 0, 1);
        if (i == BIG_WARM || (i > BIG_WARM && a < t1))
            t1 = a;
        if (i == BIG_WARM || (i > BIG_WARM && b < t2))
            t2 = b;
    }
    *latency = t0;
    /* (where load hides the bytes' cost even in the fastest trips, seen
     * about once in 30 runs on 4 ranks over 2 cores: link_fit.h) */
    pp_link_fit(t0, m1, t1, m2, t2, bandwidth, burst);
    /* and a burst only where a message inside one passes faster than the
     * rate (link_fit.h: pp_link_burst_seen); every rank makes the same
     * trips, whatever it read */
    size_t mb = PP_BURST_PROBE_BYTES < m1 ? PP_BURST_PROBE_BYTES : m1;
    double tb = 0;
    for (int i = 0; i < BURST_REPS; i++) {
        refill(2.0 * (double)mb, *bandwidth);
        double r = rt(ctx, mb) / 2;
        tb = i == 0 || r < tb ? r : tb;
    }
    if (!pp_link_burst_seen(t0, mb, tb, *bandwidth))
        *burst = 0;
    /* A message of the plan's size pays more than 8 bytes' latency where
     * the transport changes protocol past a size (Open MPI's shared memory:
     * a rendezvous and a copy by system call past 4 KB): 8 KB activations
     * took 2.5 us beyond their bytes against 0.2 us for 8 bytes (a few
     * points of the 10-14% by which 2-rank pipelines' steps exceeded their
     * prediction). The fastest trips of that size, less their bytes' cost
     * as the simulation prices it (what the burst does not cover, at the
     * rate). */
    if (msg > 8 && msg < m1) {
        double tm = one_way(rt, ctx, msg, WARM, REPS);
        double paid = (double)msg > *burst ? (double)msg - *burst : 0;
        double beyond = tm - (*bandwidth > 0 ? paid / *bandwidth : 0);
        if (beyond > *latency)
            *latency = beyond;
    }
}

typedef struct {
    char *buf;
    int me;
} mpi_probe;

/* One message of the probe, posted and waited for as a step's transfers
 * are (vm/progress.h: through the communication thread where it runs), so
 * that the latency measured is the one the steps pay. */
static void probe_msg(char *buf, size_t bytes, int peer, int send)
{
    MPI_Request r;
    if (send)
        mpiCheck(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &r));
    else
        mpiCheck(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &r));
    pp_progress_complete(&r);
}

/* The cpu backend's round trip: MPI, host memory to host memory. */
static double round_trip_mpi(void *ctx, size_t bytes)
{
    const mpi_probe *m = ctx;
    double t0 = MPI_Wtime();
    probe_msg(m->buf, bytes, 1 - m->me, m->me == 0);
    probe_msg(m->buf, bytes, 1 - m->me, m->me != 0);
    return MPI_Wtime() - t0;
}

int pp_profile_link_mpi(size_t bytes, size_t msg, double *latency, double *bandwidth, double *burst)
{
    int me, size;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size < 2)
        return 0;
    mpi_probe m = {me <= 1 ? calloc(bytes > 8 ? bytes : 8, 1) : NULL, me};
    if (!pp_vm_all_ok(me > 1 || m.buf, me, "out of memory for --profile's link probe")) {
        free(m.buf);
        return -1;
    }
    if (me <= 1)
        pp_profile_link(round_trip_mpi, &m, bytes, msg, latency, bandwidth, burst);
    free(m.buf);
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
    return 1;
}
