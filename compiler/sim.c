/* sim.c - greedy and strict list scheduling of a schedule's jobs (see sim.h).
 *
 * Greedy keeps, per worker, the jobs whose predecessor is committed in two
 * heaps: "pending" (ordered by ready time, then key) and "available" (ready
 * no later than the worker is free, ordered by key); forwards and the other
 * directions are kept apart so an inflight limit can set forwards aside.
 * Each step commits the worker candidate with the earliest start, taken from
 * a global heap of per-worker candidates. Commit times never decrease, so
 * this is exactly the seed's argmin rule. */
#include "sim.h"
#include "sim_offload.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const pp_sim_input *in;
    const double *ready; /* [N] when the job's predecessor finished */
} keyctx;

/* Where a job sits along its microbatch's chain: forwards count up the
 * stages, backward jobs count down, so earlier-in-the-chain comes first. */
static int chain_pos(const pp_jobspace *js, int j)
{
    int s = job_s(js, j);
    return job_d(js, j) == 0 ? s : js->S - 1 - s;
}

/* Directions in tie-break order: F, B, W, where a re-run forward R(s,b)
 * ranks as its backward, and goes right before it where everything else
 * ties (the last key): so an R whose priority is its B's (the default)
 * runs right before that B, not before every backward. */
enum { DIR_RANK_B = 1 };
static int dir_rank(const pp_jobspace *js, int j)
{
    int d = job_d(js, j);
    return d == JOB_DIR_R ? DIR_RANK_B : d;
}

/* The tie-break key: (priority, d, b, position along the chain). */
static int cmp_key(const keyctx *k, int x, int y)
{
    const pp_jobspace *js = &k->in->js;
    long long px = k->in->priority[x], py = k->in->priority[y];
    if (px != py)
        return px < py ? -1 : 1;
    int a, b;
    if ((a = dir_rank(js, x)) != (b = dir_rank(js, y)))
        return a < b ? -1 : 1;
    if ((a = job_b(js, x)) != (b = job_b(js, y)))
        return a < b ? -1 : 1;
    if ((a = chain_pos(js, x)) != (b = chain_pos(js, y)))
        return a < b ? -1 : 1;
    if ((a = job_d(js, x) != JOB_DIR_R) != (b = job_d(js, y) != JOB_DIR_R))
        return a < b ? -1 : 1;
    return 0;
}

static int cmp_ready(const keyctx *k, int x, int y)
{
    if (k->ready[x] != k->ready[y])
        return k->ready[x] < k->ready[y] ? -1 : 1;
    return cmp_key(k, x, y);
}

typedef struct {
    int *a;
    int n, cap;
    int by_ready;
} heap;

static int heap_less(const keyctx *k, const heap *h, int x, int y)
{
    return (h->by_ready ? cmp_ready(k, x, y) : cmp_key(k, x, y)) < 0;
}

static int heap_push(const keyctx *k, heap *h, int j)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 8;
        int *a = realloc(h->a, (size_t)cap * sizeof *a);
        if (!a)
            return -1;
        h->a = a;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0 && heap_less(k, h, j, h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = j;
    return 0;
}

static int heap_pop(const keyctx *k, heap *h)
{
    int top = h->a[0], last = h->a[--h->n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && heap_less(k, h, h->a[c + 1], h->a[c]))
            c++;
        if (!heap_less(k, h, h->a[c], last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
    return top;
}

enum { PEND_F, PEND_O, AVAIL_F, AVAIL_O, NHEAPS };

typedef struct {
    heap h[NHEAPS];
} worker_heaps;

static int alloc_result(const pp_sim_input *in, pp_sim_result *r)
{
    int N = job_count(&in->js);
    memset(r, 0, sizeof *r);
    r->start = calloc((size_t)N, sizeof *r->start);
    r->end = calloc((size_t)N, sizeof *r->end);
    r->order = calloc((size_t)N, sizeof *r->order);
    r->off = calloc((size_t)in->W + 1, sizeof *r->off);
    r->blocked = calloc((size_t)in->W, sizeof *r->blocked);
    if (!r->start || !r->end || !r->order || !r->off || !r->blocked)
        return -1;
    /* off[] from the number of jobs per worker; order is filled as committed */
    for (int j = 0; j < N; j++)
        if (job_exists(&in->js, j))
            r->off[in->worker[j] + 1]++;
    for (int w = 0; w < in->W; w++)
        r->off[w + 1] += r->off[w];
    for (int w = 0; w < in->W; w++)
        r->blocked[w] = -1;
    r->in_turn = in->strict && in->pairs_in_turn;
    return 0;
}

/* B(s,b) releases the activations its F took (with a split backward, W
 * keeps only what the weight gradient needs, which the limit does not count,
 * as the zero-bubble schedules count it). */
static int releases_activations(const pp_jobspace *js, int j) { return job_d(js, j) == 1; }

/* When job j can start at the earliest, given its predecessor p committed. */
static double ready_time(const pp_sim_input *in, const pp_sim_result *r, int j, int p)
{
    double fetch = in->fetch ? in->fetch[j] : 0, xfer = in->xfer ? in->xfer[j] : 0;
    if (p < 0)
        return fetch;
    double t = pp_sim_out_time(r, p) + xfer, f = r->start[p] + fetch;
    return t > f ? t : f;
}

/* recv_waits (sim.h): the earliest job j can start on a worker free at
 * `free`, its input and weights moving only once it waits for them; 0
 * without the rule. */
static double receiver_moves(const pp_sim_input *in, int j, double free)
{
    if (!in->recv_waits || j < 0)
        return 0;
    return free + (in->xfer ? in->xfer[j] : 0) + (in->fetch ? in->fetch[j] : 0);
}

/* The same over both of j's predecessors: a recomputed B also waits for
 * its R (on its own worker: no transfer). */
static double ready_all(const pp_sim_input *in, pp_sim_result *r, int j)
{
    double t = ready_time(in, r, j, job_pred(&in->js, j));
    int p2 = job_pred2(&in->js, j);
    double out2 = p2 >= 0 ? pp_sim_out_time(r, p2) : t;
    t = out2 > t ? out2 : t;
    return pp_sim_offload_ready(in, r, j, t); /* and an offloaded stash's reload */
}

/* Whether every predecessor of j is done. */
static int preds_done(const pp_jobspace *js, const char *done, int j)
{
    int p = job_pred(js, j), p2 = job_pred2(js, j);
    return (p < 0 || done[p]) && (p2 < 0 || done[p2]);
}

/* One entry of the global heap: worker w's best job and when it can start.
 * Entries go stale when the worker's candidate is recomputed (version). */
typedef struct {
    double t;
    int job, w;
    unsigned version;
} cand;

typedef struct {
    cand *a;
    int n, cap;
} cand_heap;

static int cand_less(const keyctx *k, const cand *x, const cand *y)
{
    if (x->t != y->t)
        return x->t < y->t;
    return cmp_key(k, x->job, y->job) < 0;
}

static int cand_push(const keyctx *k, cand_heap *h, cand c)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        cand *a = realloc(h->a, (size_t)cap * sizeof *a);
        if (!a)
            return -1;
        h->a = a;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0 && cand_less(k, &c, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = c;
    return 0;
}

static void cand_pop(const keyctx *k, cand_heap *h)
{
    cand last = h->a[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && cand_less(k, &h->a[c + 1], &h->a[c]))
            c++;
        if (!cand_less(k, &h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
}

/* Shared cores (sim.h): each core's free time in a min-heap, so the
 * earliest is at [0]. n == 0: no limit. */
typedef struct {
    double *free_at;
    int n;
} core_pool;

/* A pool of in->cores cores when that limits anything (fewer than W). */
static int cores_open(const pp_sim_input *in, core_pool *c)
{
    c->n = in->cores > 0 && in->cores < in->W ? in->cores : 0;
    c->free_at = c->n ? calloc((size_t)c->n, sizeof *c->free_at) : NULL;
    return c->n && !c->free_at ? -1 : 0;
}

/* The earliest a job ready at t finds a core. */
static double cores_start(const core_pool *c, double t)
{
    return c->n && c->free_at[0] > t ? c->free_at[0] : t;
}

/* The earliest-free core runs until `end`. */
static void cores_take(core_pool *c, double end)
{
    if (!c->n)
        return;
    int i = 0;
    for (;;) { /* sift the new time down from the root */
        int k = 2 * i + 1;
        if (k >= c->n)
            break;
        if (k + 1 < c->n && c->free_at[k + 1] < c->free_at[k])
            k++;
        if (!(c->free_at[k] < end))
            break;
        c->free_at[i] = c->free_at[k];
        i = k;
    }
    c->free_at[i] = end;
}

typedef struct {
    const pp_sim_input *in;
    keyctx k;
    worker_heaps *wh;
    double *ready, *free_at;
    char *done; /* [N] committed */
    long long *held;
    unsigned *version;
    cand_heap global;
    core_pool cores;
} greedy;

/* Worker w's best job now: among the jobs ready by the time it is free, the
 * smallest key; else the one ready first. Forwards sit out while w is at its
 * inflight limit. Pushes it to the global heap (older entries for w go
 * stale). Returns -1 out of memory. */
static int refresh_worker(greedy *g, int w)
{
    worker_heaps *h = &g->wh[w];
    const keyctx *k = &g->k;
    g->version[w]++;
    for (int p = PEND_F; p <= PEND_O; p++)
        while (h->h[p].n && g->ready[h->h[p].a[0]] <= g->free_at[w])
            if (heap_push(k, &h->h[p + 2], heap_pop(k, &h->h[p])))
                return -1;
    int fwd_ok = !g->in->inflight || g->held[w] < g->in->inflight[w];
    int c = -1;
    double t = 0;
    for (int p = AVAIL_F; p <= AVAIL_O; p++)
        if (h->h[p].n && (p == AVAIL_O || fwd_ok) && (c < 0 || cmp_key(k, h->h[p].a[0], c) < 0))
            c = h->h[p].a[0];
    if (c >= 0)
        t = g->free_at[w];
    else {
        for (int p = PEND_F; p <= PEND_O; p++)
            if (h->h[p].n && (p == PEND_O || fwd_ok) &&
                (c < 0 || cmp_ready(k, h->h[p].a[0], c) < 0))
                c = h->h[p].a[0];
        if (c >= 0)
            t = g->ready[c];
    }
    if (c < 0)
        return 0;
    return cand_push(k, &g->global, (cand){t, c, w, g->version[w]});
}

static int simulate_greedy(const pp_sim_input *in, pp_sim_result *r)
{
    const pp_jobspace *js = &in->js;
    int N = job_count(js), W = in->W, rc = -1, committed = 0, total = job_total(js);
    greedy g = {in, {in, NULL}, NULL, NULL, NULL, NULL, NULL, NULL, {NULL, 0, 0}, {NULL, 0}};
    int *fill = calloc((size_t)W, sizeof *fill);
    g.ready = calloc((size_t)N, sizeof *g.ready);
    g.free_at = calloc((size_t)W, sizeof *g.free_at);
    g.done = calloc((size_t)N, 1);
    g.held = calloc((size_t)W, sizeof *g.held);
    g.version = calloc((size_t)W, sizeof *g.version);
    g.wh = calloc((size_t)W, sizeof *g.wh);
    g.k.ready = g.ready;
    if (!fill || !g.ready || !g.free_at || !g.done || !g.held || !g.version || !g.wh ||
        cores_open(in, &g.cores))
        goto out;
    for (int w = 0; w < W; w++)
        g.wh[w].h[PEND_F].by_ready = g.wh[w].h[PEND_O].by_ready = 1;
    for (int b = 0; b < js->B; b++) {
        int j = job_id(js, 0, b, 0);
        g.ready[j] = ready_time(in, r, j, -1);
        if (heap_push(&g.k, &g.wh[in->worker[j]].h[PEND_F], j))
            goto out;
    }
    for (int w = 0; w < W; w++)
        if (refresh_worker(&g, w))
            goto out;
    while (committed < total) {
        while (g.global.n && g.global.a[0].version != g.version[g.global.a[0].w])
            cand_pop(&g.k, &g.global);
        if (!g.global.n) { /* only forwards left and every worker at its inflight limit */
            for (int w = 0; w < W; w++) {
                heap *f = g.wh[w].h[AVAIL_F].n ? &g.wh[w].h[AVAIL_F] : &g.wh[w].h[PEND_F];
                r->blocked[w] = f->n ? f->a[0] : -1;
            }
            r->deadlock = 1;
            rc = 1;
            goto out;
        }
        cand best = g.global.a[0];
        cand_pop(&g.k, &g.global);
        int j = best.job, w = best.w;
        /* j is at the top of one of w's heaps */
        worker_heaps *h = &g.wh[w];
        for (int p = 0; p < NHEAPS; p++)
            if (h->h[p].n && h->h[p].a[0] == j) {
                heap_pop(&g.k, &h->h[p]);
                break;
            }
        double moved = receiver_moves(in, j, g.free_at[w]), t = moved > best.t ? moved : best.t;
        r->start[j] = cores_start(&g.cores, t > g.free_at[w] ? t + in->wake : t);
        r->end[j] = r->start[j] + in->cost[j];
        g.free_at[w] = r->end[j] + in->job_overhead;
        cores_take(&g.cores, g.free_at[w]);
        g.done[j] = 1;
        pp_sim_offload_after(in, r, j);
        r->order[r->off[w] + fill[w]++] = j;
        if (r->end[j] > r->makespan)
            r->makespan = r->end[j];
        int fw = in->worker[job_id(js, job_s(js, j), job_b(js, j), 0)];
        if (job_d(js, j) == 0)
            g.held[fw]++;
        if (releases_activations(js, j))
            g.held[fw]--;
        /* The workers whose candidate this commit can change: w (busy longer),
         * fw (its held count) and the successors' workers (new jobs). */
        int touched[4] = {w, fw, -1, -1}, nt = 2;
        int succ[2], ns = job_succ(js, j, succ);
        for (int i = 0; i < ns; i++) {
            int sj = succ[i], sw = in->worker[sj];
            if (job_d(js, sj) == JOB_DIR_R) /* released with its B's other input, below */
                continue;
            if (job_d(js, sj) == 1 && job_pred2(js, sj) >= 0 && job_pred(js, sj) == j) {
                /* Greedy: R(s,b) is released when B(s,b)'s other input is
                 * done (sim.h), not when F(s,b) is, or every idle worker
                 * would re-run its forwards at once and hold the stashes
                 * R exists to drop. */
                int rj = job_pred2(js, sj), rw = in->worker[rj];
                double t = ready_time(in, r, rj, job_pred(js, rj));
                g.ready[rj] = r->end[j] > t ? r->end[j] : t;
                if (heap_push(&g.k, &g.wh[rw].h[PEND_O], rj))
                    goto out;
                touched[nt++] = rw;
                continue; /* B itself follows its R */
            }
            if (!preds_done(js, g.done, sj)) /* a recomputed B waits for F's chain and R */
                continue;
            g.ready[sj] = ready_all(in, r, sj);
            if (heap_push(&g.k, &g.wh[sw].h[job_d(js, sj) == 0 ? PEND_F : PEND_O], sj))
                goto out;
            touched[nt++] = sw;
        }
        for (int i = 0; i < nt; i++) {
            int dup = 0;
            for (int q = 0; q < i; q++)
                dup |= touched[q] == touched[i];
            if (!dup && refresh_worker(&g, touched[i]))
                goto out;
        }
        committed++;
    }
    rc = 0;
out:
    if (g.wh)
        for (int w = 0; w < W; w++)
            for (int p = 0; p < NHEAPS; p++)
                free(g.wh[w].h[p].a);
    free(g.wh);
    free(g.global.a);
    free(g.cores.free_at);
    free(g.version);
    free(g.held);
    free(g.free_at);
    free(g.done);
    free(g.ready);
    free(fill);
    return rc;
}

static const keyctx *sort_ctx; /* qsort has no context argument */
static int qsort_key(const void *a, const void *b)
{
    return cmp_key(sort_ctx, *(const int *)a, *(const int *)b);
}

/* Pairs (sim.h): scanning each worker's order, a pairable forward and a
 * backward of another microbatch next to it, either first; forward first
 * only where pairable is 2 (`overlap F then B`). */
static int find_pairs(const pp_sim_input *in, pp_sim_result *r)
{
    const pp_jobspace *js = &in->js;
    int N = job_count(js);
    if (!in->pairable)
        return 0;
    if (!(r->partner = malloc(((size_t)N + 1) * sizeof *r->partner)))
        return -1;
    for (int j = 0; j < N; j++)
        r->partner[j] = -1;
    for (int w = 0; w < in->W; w++)
        for (int k = r->off[w]; k + 1 < r->off[w + 1]; k++) {
            int x = r->order[k], y = r->order[k + 1];
            int f = job_d(js, x) == 0 ? x : y, o = f == x ? y : x;
            if (job_d(js, f) != 0 || job_d(js, o) != 1 || !in->pairable[f] ||
                job_b(js, f) == job_b(js, o) || (f == y && in->pairable[f] == 2))
                continue;
            r->partner[x] = y;
            r->partner[y] = x;
            r->npairs++;
            k++;
        }
    return 0;
}

/* The earliest job j (and its partner q, or -1) can start on worker w. */
static double strict_ready(const pp_sim_input *in, pp_sim_result *r, int w, int j, int q,
                           const double *free_at)
{
    double t = free_at[w];
    int jobs[2] = {j, q}, n = q >= 0 ? 2 : 1;
    pp_sim_offload_before(in, r, j, t); /* the Reloads the plan puts before them */
    pp_sim_offload_before(in, r, q, t);
    double free = t;
    if (in->pairs_in_turn) /* the first job alone: the second waits for it */
        n = 1;
    for (int i = 0; i < n; i++) {
        double ready = ready_all(in, r, jobs[i]), moved = receiver_moves(in, jobs[i], free);
        t = ready > t ? ready : t;
        t = moved > t ? moved : t;
    }
    return t > free ? t + in->wake : t; /* it waited: it resumes late (sim.h) */
}

/* Commits job j (and its partner q, or -1) on worker w at the earliest
 * time both are ready and a core is free; queues the workers whose next
 * job this unblocks. */
static void commit_strict(const pp_sim_input *in, pp_sim_result *r, int w, int j, int q,
                          double *free_at, char *done, int *next, int *queue, int *qt,
                          core_pool *cores)
{
    const pp_jobspace *js = &in->js;
    double t = cores_start(cores, strict_ready(in, r, w, j, q, free_at)), dur = in->cost[j];
    double second = t; /* when the pair's second job starts */
    int jobs[2] = {j, q}, n = q >= 0 ? 2 : 1;
    if (q >= 0 && in->pairs_in_turn) { /* j, then q once its inputs are here too */
        double first_end = t + in->cost[j], ready = ready_all(in, r, q),
               moved = receiver_moves(in, q, first_end);
        second = first_end > ready ? first_end : ready;
        second = moved > second ? moved : second;
        second += second > first_end ? in->wake : 0;
        dur = second + in->cost[q] - t;
    } else if (q >= 0) { /* max(tF, tB) + overlap * min(tF, tB) */
        double a = in->cost[j], b = in->cost[q];
        dur = (a > b ? a : b) + in->overlap * (a > b ? b : a);
    }
    free_at[w] = t + dur + in->job_overhead;
    cores_take(cores, free_at[w]);
    if (t + dur > r->makespan)
        r->makespan = t + dur;
    for (int i = 0; i < n; i++) {
        r->start[jobs[i]] = i ? second : t;
        /* in turn, the first job computes for its cost; its output still
         * leaves at the pair's end (pp_sim_out_time) */
        r->end[jobs[i]] = q >= 0 && in->pairs_in_turn && !i ? t + in->cost[j] : t + dur;
        done[jobs[i]] = 1;
        next[w]++;
        pp_sim_offload_after(in, r, jobs[i]);
    }
    for (int i = 0; i < n; i++) {
        int succ[2], ns = job_succ(js, jobs[i], succ);
        for (int k = 0; k < ns; k++) {
            int sw = in->worker[succ[k]];
            if (sw != w && r->off[sw] + next[sw] < r->off[sw + 1] &&
                r->order[r->off[sw] + next[sw]] == succ[k])
                queue[(*qt)++] = sw;
            /* the worker's next job may be the partner of the one unblocked */
            else if (sw != w && r->partner && r->off[sw] + next[sw] + 1 < r->off[sw + 1] &&
                     r->order[r->off[sw] + next[sw] + 1] == succ[k] &&
                     r->partner[succ[k]] == r->order[r->off[sw] + next[sw]])
                queue[(*qt)++] = sw;
        }
    }
}

/* keep: replay the order r has (a greedy run's) instead of sorting by key. */
static int simulate_strict(const pp_sim_input *in, pp_sim_result *r, int keep)
{
    const pp_jobspace *js = &in->js;
    int N = job_count(js), W = in->W, rc = -1, total = job_total(js);
    int *fill = calloc((size_t)W, sizeof *fill), *next = calloc((size_t)W, sizeof *next);
    /* each commit queues <= 2 workers per job */
    int *queue = malloc(((size_t)W + 2 * (size_t)N + 1) * sizeof *queue);
    char *done = calloc((size_t)N, 1);
    double *free_at = calloc((size_t)W, sizeof *free_at);
    keyctx k = {in, NULL};
    core_pool cores = {NULL, 0};
    if (!fill || !next || !queue || !done || !free_at)
        goto out;
    for (int j = 0; j < N && !keep; j++)
        if (job_exists(js, j))
            r->order[r->off[in->worker[j]] + fill[in->worker[j]]++] = j;
    sort_ctx = &k;
    for (int w = 0; w < W && !keep; w++)
        qsort(r->order + r->off[w], (size_t)(r->off[w + 1] - r->off[w]), sizeof(int), qsort_key);
    if ((!keep && find_pairs(in, r)) || pp_sim_offload_plan_order(in, r))
        goto out;
    r->makespan = 0;
    int qh = 0, qt = 0, committed = 0;
    if (cores_open(in, &cores))
        goto out;
    if (cores.n) {
        /* Shared cores: commit, over all workers, the next job (or pair)
         * that can start first, so cores go in time order. */
        for (;;) {
            int best = -1;
            double bt = 0;
            for (int w = 0; w < W; w++) {
                if (r->off[w] + next[w] >= r->off[w + 1])
                    continue;
                int j = r->order[r->off[w] + next[w]];
                int q = r->partner ? r->partner[j] : -1;
                if (!preds_done(js, done, j) || (q >= 0 && !preds_done(js, done, q)))
                    continue;
                double t = strict_ready(in, r, w, j, q, free_at);
                if (best < 0 || t < bt) {
                    best = w;
                    bt = t;
                }
            }
            if (best < 0)
                break;
            int j = r->order[r->off[best] + next[best]], q = r->partner ? r->partner[j] : -1;
            qt = 0; /* the queue is unused here */
            commit_strict(in, r, best, j, q, free_at, done, next, queue, &qt, &cores);
            committed += q >= 0 ? 2 : 1;
        }
    }
    /* Run each worker until its next job's (or pair's) predecessors are not
     * done; a commit re-queues the worker of each successor. */
    for (int w = 0; w < W && !cores.n; w++)
        queue[qt++] = w;
    while (qh < qt && !cores.n) {
        int w = queue[qh++];
        while (r->off[w] + next[w] < r->off[w + 1]) {
            int j = r->order[r->off[w] + next[w]];
            int q = r->partner ? r->partner[j] : -1;
            if (!preds_done(js, done, j) || (q >= 0 && !preds_done(js, done, q)))
                break;
            commit_strict(in, r, w, j, q, free_at, done, next, queue, &qt, &cores);
            committed += q >= 0 ? 2 : 1;
        }
    }
    if (committed < total) {
        for (int w = 0; w < W; w++) {
            int j = r->off[w] + next[w] < r->off[w + 1] ? r->order[r->off[w] + next[w]] : -1;
            int q = j >= 0 && r->partner ? r->partner[j] : -1;
            /* of a pair, name the job whose predecessor is missing */
            r->blocked[w] = q >= 0 && preds_done(js, done, j) ? q : j;
        }
        r->deadlock = 1;
        rc = 1;
        goto out;
    }
    rc = 0;
out:
    free(cores.free_at);
    free(free_at);
    free(done);
    free(queue);
    free(next);
    free(fill);
    return rc;
}

int pp_simulate(const pp_sim_input *in, pp_sim_result *out)
{
    if (alloc_result(in, out) || pp_sim_offload_open(in, out)) {
        pp_sim_free(out);
        return -1;
    }
    if (in->strict)
        return simulate_strict(in, out, 0);
    int rc = simulate_greedy(in, out);
    /* offload: the greedy run's reloads were issued by its own rule; the
     * plan's are placed by the order it found, so that order is replayed
     * with them (sim_offload.h) */
    return rc == 0 && in->offload ? simulate_strict(in, out, 1) : rc;
}

void pp_sim_free(pp_sim_result *r)
{
    free(r->start);
    free(r->end);
    free(r->order);
    free(r->off);
    free(r->blocked);
    free(r->partner);
    free(r->off_start);
    free(r->off_end);
    free(r->rel_start);
    free(r->rel_end);
    free(r->lane);
    free(r->reload_head);
    free(r->reload_next);
    free(r->copied);
    memset(r, 0, sizeof *r);
}
