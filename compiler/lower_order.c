/* lower_order.c - the order lowering emits in (see lower.h and
 * lower_internal.h): stage ownership and replica groups, where weight
 * gradients return, and every rank's items. Each rank's stream is built
 * from items sorted by simulated time: its jobs (at their start) and its
 * side of every transfer. Both sides of a transfer carry the same key,
 * (time, kind, stage, microbatch, direction, sender, receiver), and every
 * rank sorts by it, so all ranks meet their transfers in one global order:
 * the smallest unfinished transfer always has both sides ready, which is
 * why no plan can hang even when a send blocks until its receive is posted
 * (NCCL's rule). A transfer's time is when its receiver wants it, hoisted
 * --prefetch jobs earlier but never before its producer ends, so the sender
 * always has the data. */
#include <stdlib.h>
#include <string.h>

#include "lower_internal.h"
#include "radix_sort.h"

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static uint64_t hash_members(const int *m, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint32_t)m[i]) * 1099511628211ull;
    return h ^ (h >> 31);
}

/* Stage s's replica group: the existing group with the same members (looked
 * up in `table`, a hash of group indices, -1 empty, of `cap` cells) or a new
 * one. 0, or -1 out of memory. */
static int find_group(ownership *o, int s, int *table, size_t cap)
{
    const int *m = o->owners[s];
    int n = o->nowners[s];
    size_t i = (size_t)hash_members(m, n) & (cap - 1);
    for (; table[i] >= 0; i = (i + 1) & (cap - 1)) {
        const pp_group *g = &o->groups[table[i]];
        int same = (int)g->n == n;
        for (int k = 0; same && k < n; k++)
            same = (int)g->member[k] == m[k];
        if (same) {
            o->group_of[s] = table[i];
            return 0;
        }
    }
    pp_group *g = &o->groups[o->ngroups];
    g->n = (uint32_t)n;
    g->member = malloc(g->n * sizeof *g->member);
    if (!g->member)
        return -1;
    for (int k = 0; k < n; k++)
        g->member[k] = (uint32_t)m[k];
    table[i] = o->ngroups;
    o->group_of[s] = o->ngroups++;
    return 0;
}

/* Each stage's owners from its jobs (a stage's jobs are consecutive ids),
 * deduplicated with a per-worker stamp; then the groups, and each worker's
 * owned stages. Time O(N + W + S log), memory O(W + pairs). */
int lower_build_ownership(const pp_jobtable *t, ownership *o)
{
    int S = t->js.S, W = t->W, per_stage = t->js.B * t->js.ND, rc = -1;
    size_t cap = 16;
    while (cap < 2 * (size_t)S)
        cap *= 2;
    memset(o, 0, sizeof *o);
    o->nowners = calloc((size_t)S, sizeof *o->nowners);
    o->owners = calloc((size_t)S, sizeof *o->owners);
    o->group_of = malloc((size_t)S * sizeof *o->group_of);
    o->groups = calloc((size_t)S, sizeof *o->groups);
    o->owned_off = calloc((size_t)W + 1, sizeof *o->owned_off);
    int *stamp = malloc((size_t)W * sizeof *stamp), *list = malloc((size_t)W * sizeof *list);
    int *table = malloc(cap * sizeof *table), *fill = NULL;
    if (!o->nowners || !o->owners || !o->group_of || !o->groups || !o->owned_off || !stamp ||
        !list || !table)
        goto out;
    for (int w = 0; w < W; w++)
        stamp[w] = -1;
    for (size_t i = 0; i < cap; i++)
        table[i] = -1;
    size_t pairs = 0;
    for (int s = 0; s < S; s++) {
        int n = 0;
        for (int j = s * per_stage; j < (s + 1) * per_stage; j++) {
            if (!job_exists(&t->js, j))
                continue;
            int w = t->owner[j];
            if (stamp[w] != s) {
                stamp[w] = s;
                list[n++] = w;
            }
        }
        qsort(list, (size_t)n, sizeof *list, cmp_int);
        o->owners[s] = malloc(((size_t)n + 1) * sizeof(int));
        if (!o->owners[s])
            goto out;
        memcpy(o->owners[s], list, (size_t)n * sizeof(int));
        o->nowners[s] = n;
        pairs += (size_t)n;
        for (int k = 0; k < n; k++)
            o->owned_off[list[k] + 1]++;
        o->group_of[s] = -1;
        if (n >= 2 && find_group(o, s, table, cap))
            goto out;
    }
    for (int w = 0; w < W; w++)
        o->owned_off[w + 1] += o->owned_off[w];
    o->owned = malloc((pairs + 1) * sizeof *o->owned);
    fill = malloc(((size_t)W + 1) * sizeof *fill);
    if (!o->owned || !fill)
        goto out;
    memcpy(fill, o->owned_off, ((size_t)W + 1) * sizeof *fill);
    for (int s = 0; s < S; s++) /* ascending s: each worker's list comes out sorted */
        for (int k = 0; k < o->nowners[s]; k++)
            o->owned[fill[o->owners[s][k]]++] = s;
    rc = 0;
out:
    free(fill);
    free(table);
    free(list);
    free(stamp);
    return rc;
}

void lower_free_ownership(ownership *o, int S)
{
    for (int s = 0; o->owners && s < S; s++)
        free(o->owners[s]);
    for (int g = 0; o->groups && g < o->ngroups; g++)
        free(o->groups[g].member);
    free(o->owners);
    free(o->nowners);
    free(o->group_of);
    free(o->groups);
    free(o->owned_off);
    free(o->owned);
}

int lower_owns(const ownership *o, int s, int w)
{
    const int *m = o->owners[s];
    int lo = 0, hi = o->nowners[s];
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (m[mid] < w)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < o->nowners[s] && m[lo] == w;
}

int lower_copy_groups(const ownership *o, pp_plan *p)
{
    p->ngroups = (uint32_t)o->ngroups;
    p->groups = calloc((size_t)o->ngroups + 1, sizeof *p->groups);
    if (!p->groups)
        return -1;
    for (int g = 0; g < o->ngroups; g++) {
        p->groups[g].n = o->groups[g].n;
        p->groups[g].member = malloc(o->groups[g].n * sizeof(uint32_t));
        if (!p->groups[g].member)
            return -1;
        memcpy(p->groups[g].member, o->groups[g].member, o->groups[g].n * sizeof(uint32_t));
    }
    return 0;
}

static int cmp_item(const item *x, const item *y)
{
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
#define CMP_FIELD(f)                                                                               \
    if (x->f != y->f)                                                                              \
        return x->f < y->f ? -1 : 1;
    CMP_FIELD(pair)
    CMP_FIELD(s)
    CMP_FIELD(b)
    CMP_FIELD(d)
    CMP_FIELD(src)
    CMP_FIELD(dst)
    CMP_FIELD(what)
#undef CMP_FIELD
    return 0;
}

/* Records whose (rank, time) tie, by the rest of the key: qsort_r's
 * comparator over the items they index. */
static int cmp_tied(const void *a, const void *b, void *items)
{
    const ranked_item *it = items;
    return cmp_item(&it[((const pp_sort_rec *)a)->val].it, &it[((const pp_sort_rec *)b)->val].it);
}

/* Sorts the items by (rank, the global key): a radix sort by (rank, time),
 * then each run of equal (rank, time) - a few transfers and a job - by the
 * rest of the key. Every two items differ in the key, so the order is the
 * one any sort by it gives. The items are then moved into place along the
 * permutation's cycles, without a second item array (they are most of
 * lowering's memory). 0, or -1 out of memory. */
static int sort_items(ranked_item *it, int n)
{
    pp_sort_rec *r = malloc(((size_t)n + 1) * sizeof *r);
    if (!r)
        return -1;
    for (int i = 0; i < n; i++)
        r[i] = (pp_sort_rec){pp_double_key(it[i].it.t), (uint32_t)it[i].rank, (uint32_t)i};
    if (pp_radix_sort(r, (size_t)n)) {
        free(r);
        return -1;
    }
    for (int i = 0, e; i < n; i = e) {
        for (e = i + 1; e < n && r[e].group == r[i].group && r[e].key == r[i].key; e++)
            ;
        if (e - i > 16)
            qsort_r(r + i, (size_t)(e - i), sizeof *r, cmp_tied, it);
        else /* the usual run: a job and a few transfers */
            for (int k = i + 1; k < e; k++) {
                pp_sort_rec x = r[k];
                int m = k;
                for (; m > i && cmp_tied(&r[m - 1], &x, it) > 0; m--)
                    r[m] = r[m - 1];
                r[m] = x;
            }
    }
    /* position j takes item r[j].val: follow each cycle once, marking the
     * positions done with UINT32_MAX */
    for (int i = 0; i < n; i++) {
        if (r[i].val == UINT32_MAX)
            continue;
        ranked_item first = it[i];
        int j = i;
        for (;;) {
            int k = (int)r[j].val;
            r[j].val = UINT32_MAX;
            if (k == i) {
                it[j] = first;
                break;
            }
            it[j] = it[k];
            j = k;
        }
    }
    free(r);
    return 0;
}

int lower_build_returns(const pp_jobtable *t, const pp_sim_result *sim, const ownership *o,
                        gradient_returns *g)
{
    const pp_jobspace *js = &t->js;
    int S = js->S, cap = 0;
    g->ret = NULL;
    g->n = 0;
    int *at = malloc(((size_t)S + 1) * sizeof *at); /* stage -> this rank's entry, or -1 */
    if (!at)
        return -1;
    for (int s = 0; s < S; s++)
        at[s] = -1;
    for (int w = 0; w < t->W; w++) {
        int first = g->n;
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++) {
            int j = sim->order[k], s = job_s(js, j);
            if (!job_makes_wgrad(js, j) || t->wbytes[s] == 0 || lower_owns(o, s, w))
                continue; /* makes no weight gradient, or keeps it */
            if (at[s] >= 0) {
                g->ret[at[s]].last = j;
                continue;
            }
            if (g->n == cap) {
                int c = cap ? 2 * cap : 64;
                gradient_return *q = realloc(g->ret, (size_t)c * sizeof *q);
                if (!q) {
                    free(at);
                    return -1;
                }
                g->ret = q;
                cap = c;
            }
            g->ret[g->n] = (gradient_return){s, w, t->owner[j], j};
            at[s] = g->n++;
        }
        for (int e = first; e < g->n; e++)
            at[g->ret[e].s] = -1;
    }
    free(at);
    return 0;
}

/* Every rank's items: jobs at their start; both sides of every activation
 * and gradient transfer and of every weight fetch at the transfer's key;
 * both sides of every weight-gradient return when it can have arrived
 * after the sender's last job that adds to it ends, so the accumulator
 * lives no longer than it must and the owner's receive does not stand
 * before a job it need not hold.
 * Written into it[] when it is not NULL; returns how many there are (the
 * first pass counts, so the array is exactly as large as needed). */
static int make_items(const pp_jobtable *t, const pp_sim_result *sim, int prefetch,
                      const gradient_returns *g, const int *pos, ranked_item *it)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js), n = 0;
#define PUT(r, x)                                                                                  \
    do {                                                                                           \
        if (it)                                                                                    \
            it[n] = (ranked_item){r, x};                                                           \
        n++;                                                                                       \
    } while (0)
    for (int j = 0; j < N; j++) {
        if (!job_exists(js, j))
            continue;
        int w = t->worker[j], s = job_s(js, j), b = job_b(js, j), d = job_d(js, j);
        int early = pos[j] - prefetch < sim->off[w] ? sim->off[w] : pos[j] - prefetch;
        double want = sim->start[sim->order[early]]; /* when the receiver posts it */
        /* jobs at one time (an overlapped pair's two) in their worker's
         * order, which the simulation runs a pair in turn by */
        PUT(w, ((item){sim->start[j], 3, pos[j], b, d, w, w, IT_JOB, j}));
        int p = job_pred(js, j);
        if (p >= 0 && t->worker[p] != w && d != DIR_W) {
            int grad = d == DIR_B, src = t->worker[p];
            double key = want > sim->end[p] ? want : sim->end[p];
            item x = {key, grad, job_s(js, p), b, job_d(js, p), src, w, 0, j};
            x.what = grad ? IT_SEND_GRAD : IT_SEND_ACT;
            PUT(src, x);
            x.what = grad ? IT_RECV_GRAD : IT_RECV_ACT;
            PUT(w, x);
        }
        if (pp_job_fetches(t, j)) {
            item x = {want, 2, s, b, d, t->owner[j], w, IT_SEND_WEIGHTS, j};
            PUT(t->owner[j], x);
            x.what = IT_FETCH;
            PUT(w, x);
        }
    }
    for (int e = 0; e < g->n; e++) {
        const gradient_return *r = &g->ret[e];
        /* keyed when they can have arrived, so that the owner's receive,
         * which holds it until they are in, stands after the jobs it
         * starts by then (at the last job's end, FSDP's rank 1 waited
         * for them before its own last backward) */
        double key = sim->end[r->last] + pp_transfer_time(t, t->wbytes[r->s]);
        item x = {key, 4, r->s, -1, -1, r->r, r->to, IT_SEND_WGRAD, r->last};
        PUT(r->r, x);
        x.what = IT_RECV_WGRAD;
        PUT(r->to, x);
    }
#undef PUT
    return n;
}

ranked_item *lower_build_items(const pp_jobtable *t, const pp_sim_result *sim, int prefetch,
                               const gradient_returns *g, int *count)
{
    int N = job_count(&t->js);
    int *pos = malloc(((size_t)N + 1) * sizeof *pos);
    if (!pos)
        return NULL;
    for (int w = 0; w < t->W; w++)
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
            pos[sim->order[k]] = k;
    int n = make_items(t, sim, prefetch, g, pos, NULL);
    ranked_item *it = malloc(((size_t)n + 1) * sizeof *it);
    if (!it) {
        free(pos);
        return NULL;
    }
    make_items(t, sim, prefetch, g, pos, it);
    free(pos);
    if (sort_items(it, n)) {
        free(it);
        return NULL;
    }
    *count = n;
    return it;
}
