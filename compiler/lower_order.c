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

int lower_build_ownership(const pp_jobtable *t, ownership *o)
{
    int S = t->js.S, W = t->W, N = job_count(&t->js);
    memset(o, 0, sizeof *o);
    o->nowners = calloc((size_t)S, sizeof *o->nowners);
    o->owners = calloc((size_t)S, sizeof *o->owners);
    o->group_of = malloc((size_t)S * sizeof *o->group_of);
    o->groups = calloc((size_t)S, sizeof *o->groups);
    char *mark = calloc((size_t)S * (size_t)W, 1);
    if (!o->nowners || !o->owners || !o->group_of || !o->groups || !mark) {
        free(mark);
        return -1;
    }
    for (int j = 0; j < N; j++)
        if (job_exists(&t->js, j))
            mark[(size_t)job_s(&t->js, j) * (size_t)W + (size_t)t->owner[j]] = 1;
    for (int s = 0; s < S; s++) {
        o->owners[s] = malloc((size_t)W * sizeof(int));
        if (!o->owners[s]) {
            free(mark);
            return -1;
        }
        for (int w = 0; w < W; w++)
            if (mark[(size_t)s * (size_t)W + (size_t)w])
                o->owners[s][o->nowners[s]++] = w;
        o->group_of[s] = -1;
        if (o->nowners[s] < 2)
            continue;
        for (int g = 0; g < o->ngroups && o->group_of[s] < 0; g++)
            if ((int)o->groups[g].n == o->nowners[s] &&
                !memcmp(o->groups[g].member, o->owners[s], (size_t)o->nowners[s] * sizeof(int)))
                o->group_of[s] = g;
        if (o->group_of[s] < 0) {
            pp_group *g = &o->groups[o->ngroups];
            g->n = (uint32_t)o->nowners[s];
            g->member = malloc(g->n * sizeof *g->member);
            if (!g->member) {
                free(mark);
                return -1;
            }
            for (uint32_t i = 0; i < g->n; i++)
                g->member[i] = (uint32_t)o->owners[s][i];
            o->group_of[s] = o->ngroups++;
        }
    }
    free(mark);
    return 0;
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
}

int lower_owns(const ownership *o, int s, int w)
{
    for (int i = 0; i < o->nowners[s]; i++)
        if (o->owners[s][i] == w)
            return 1;
    return 0;
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

static int cmp_ranked(const void *a, const void *b)
{
    const ranked_item *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return cmp_item(&x->it, &y->it);
}

int lower_build_returns(const pp_jobtable *t, const pp_sim_result *sim, const ownership *o,
                         gradient_returns *g)
{
    const pp_jobspace *js = &t->js;
    size_t SW = (size_t)js->S * (size_t)t->W;
    g->to = malloc(SW * sizeof *g->to + 1);
    g->last = malloc(SW * sizeof *g->last + 1);
    if (!g->to || !g->last)
        return -1;
    for (size_t i = 0; i < SW; i++)
        g->to[i] = g->last[i] = -1;
    for (int w = 0; w < t->W; w++)
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++) {
            int j = sim->order[k], s = job_s(js, j);
            size_t i = (size_t)s * t->W + (size_t)w;
            if (!job_makes_wgrad(js, j) || lower_owns(o, s, w) ||
                t->wbytes[s] == 0)
                continue; /* makes no weight gradient, or keeps it */
            if (g->to[i] < 0)
                g->to[i] = t->owner[j];
            g->last[i] = j;
        }
    return 0;
}

/* Every rank's items: jobs at their start; both sides of every activation
 * and gradient transfer and of every weight fetch at the transfer's key;
 * both sides of every weight-gradient return when the sender's last job
 * that adds to it ends, so the accumulator lives no longer than it must. */
ranked_item *lower_build_items(const pp_jobtable *t, const pp_sim_result *sim, int prefetch,
                                const gradient_returns *g, int *count)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js), n = 0;
    size_t SW = (size_t)js->S * (size_t)t->W;
    int *pos = malloc((size_t)N * sizeof *pos);
    ranked_item *it = malloc(((size_t)N * 5 + 2 * SW) * sizeof *it + 1);
    if (!pos || !it) {
        free(pos);
        free(it);
        return NULL;
    }
    for (int w = 0; w < t->W; w++)
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
            pos[sim->order[k]] = k;
    for (int j = 0; j < N; j++) {
        if (!job_exists(js, j))
            continue;
        int w = t->worker[j], s = job_s(js, j), b = job_b(js, j), d = job_d(js, j);
        int early = pos[j] - prefetch < sim->off[w] ? sim->off[w] : pos[j] - prefetch;
        double want = sim->start[sim->order[early]]; /* when the receiver posts it */
        it[n++] = (ranked_item){w, {sim->start[j], 3, s, b, d, w, w, IT_JOB, j}};
        int p = job_pred(js, j);
        if (p >= 0 && t->worker[p] != w && d != DIR_W) {
            int grad = d == DIR_B, src = t->worker[p];
            double key = want > sim->end[p] ? want : sim->end[p];
            item x = {key, grad, job_s(js, p), b, job_d(js, p), src, w, 0, j};
            x.what = grad ? IT_SEND_GRAD : IT_SEND_ACT;
            it[n++] = (ranked_item){src, x};
            x.what = grad ? IT_RECV_GRAD : IT_RECV_ACT;
            it[n++] = (ranked_item){w, x};
        }
        if (pp_job_fetches(t, j)) {
            item x = {want, 2, s, b, d, t->owner[j], w, IT_SEND_WEIGHTS, j};
            it[n++] = (ranked_item){t->owner[j], x};
            x.what = IT_FETCH;
            it[n++] = (ranked_item){w, x};
        }
    }
    for (size_t i = 0; i < SW; i++) {
        if (g->to[i] < 0)
            continue;
        int s = (int)(i / (size_t)t->W), r = (int)(i % (size_t)t->W), last = g->last[i];
        item x = {sim->end[last], 4, s, -1, -1, r, g->to[i], IT_SEND_WGRAD, last};
        it[n++] = (ranked_item){r, x};
        x.what = IT_RECV_WGRAD;
        it[n++] = (ranked_item){g->to[i], x};
    }
    free(pos);
    qsort(it, (size_t)n, sizeof *it, cmp_ranked);
    *count = n;
    return it;
}
