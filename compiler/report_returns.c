/* report_returns.c - the step's gradient returns, as the plans run them
 * (report.h, pp_report_returns).
 *
 * A worker that computes a stage it does not own returns that stage's
 * accumulated weight gradients to the owner once (SendWeightGrad, then the
 * owner's RecvWeightGrad adds them to its own). Lowering places both sides
 * at one key, the end of the sender's last job adding to them plus their
 * transfer (lower_order.c), and every
 * rank meets its returns in key order (lower_order.c), after its jobs that
 * start by then. A send is posted when its rank gets there; a receive
 * waits for the message and then adds it ("G", t->gadd), holding back
 * every job after it (a receive placed before a job can wait for a send
 * its sender posts only after one), and a rank that receives before it
 * sends holds its own return back: FSDP on 2 ranks
 * returns in a chain, rank 1 adding rank 0's gradients before it sends its
 * own, which rank 0 then adds (two transfers and two adds after the last
 * job, where one of each in parallel was priced: FSDP S=2 B=2 predicted
 * 0.89-0.92 of its measured step). With "progress": "wait" a message
 * moves only once its receiver waits for it (sim.h). */
#include <stdlib.h>

#include "report.h"

typedef struct {
    double key;  /* the end of the sender's last job adding to them */
    int s, w, o; /* stage, sender, owner */
} grad_return;

static int by_key(const void *a, const void *b)
{
    const grad_return *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->s != y->s)
        return x->s < y->s ? -1 : 1;
    if (x->w != y->w)
        return x->w < y->w ? -1 : 1;
    return (x->o > y->o) - (x->o < y->o);
}

/* When worker w reaches an item at `key` in its stream: the end of its
 * last job starting by then (jobs sort before returns at one time), 0 if
 * none. reach[k] is the latest end among the worker's first k + 1 jobs. */
static double reached(const pp_sim_result *sim, const double *reach, int w, double key)
{
    int lo = sim->off[w], hi = sim->off[w + 1]; /* first job starting after key */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (sim->start[sim->order[mid]] <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > sim->off[w] ? reach[lo - 1] : 0;
}

/* The returns of every (worker, stage) the worker does not own, with their
 * keys; *n of them. NULL out of memory. */
static grad_return *collect(const pp_jobtable *t, const pp_sim_result *sim, int *n)
{
    const pp_jobspace *js = &t->js;
    int W = t->W, S = js->S, per_stage = js->B * js->ND, cap = 16, k = 0;
    grad_return *r = malloc((size_t)cap * sizeof *r);
    int *slot = malloc(((size_t)W + 1) * sizeof *slot); /* worker -> its return of stage s */
    int *stamp = malloc(((size_t)W + 1) * sizeof *stamp);
    if (!r || !slot || !stamp)
        goto fail;
    for (int w = 0; w < W; w++)
        stamp[w] = -1;
    for (int s = 0; s < S; s++)
        for (int j = s * per_stage; j < (s + 1) * per_stage; j++) {
            int w = t->worker[j];
            if (!job_exists(js, j) || !job_makes_wgrad(js, j) || w == t->owner[j] ||
                t->wbytes[s] == 0)
                continue;
            if (stamp[w] != s) {
                if (k == cap) {
                    grad_return *more = realloc(r, 2 * (size_t)cap * sizeof *r);
                    if (!more)
                        goto fail;
                    r = more;
                    cap *= 2;
                }
                stamp[w] = s;
                slot[w] = k;
                r[k++] = (grad_return){sim->end[j], s, w, t->owner[j]};
            } else if (sim->end[j] > r[slot[w]].key)
                r[slot[w]].key = sim->end[j];
        }
    for (int i = 0; i < k; i++) /* the lowering's key: when they can have arrived */
        r[i].key += pp_transfer_time(t, t->wbytes[r[i].s]);
    free(slot);
    free(stamp);
    qsort(r, (size_t)k, sizeof *r, by_key);
    *n = k;
    return r;
fail:
    free(r);
    free(slot);
    free(stamp);
    return NULL;
}

int pp_report_returns(const pp_jobtable *t, const pp_sim_result *sim, double *at,
                      pp_return_link send, void *link)
{
    int W = t->W, N = job_count(&t->js), n = 0, rc = -1;
    grad_return *r = collect(t, sim, &n);
    double *reach = malloc(((size_t)N + 1) * sizeof *reach);
    double *late = calloc((size_t)W + 1, sizeof *late); /* each rank, held back so far */
    double *sent = calloc((size_t)W + 1, sizeof *sent); /* when its sends have arrived */
    if (!r || !reach || !late || !sent)
        goto out;
    for (int w = 0; w < W; w++)
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++) {
            double e = sim->end[sim->order[k]];
            reach[k] = k > sim->off[w] && reach[k - 1] > e ? reach[k - 1] : e;
        }
    for (int i = 0; i < n; i++) {
        int w = r[i].w, o = r[i].o;
        /* a send is posted and its rank goes on; a receive holds its rank,
         * and every job after it, until the gradients are in and added */
        double post = reached(sim, reach, w, r[i].key) + late[w],
               wait = reached(sim, reach, o, r[i].key) + late[o];
        double leaves = t->recv_waits && wait > post ? wait : post,
               bytes = (double)t->wbytes[r[i].s];
        double arrive = send ? send(link, t, w, o, leaves, bytes)
                             : leaves + pp_transfer_time(t, t->wbytes[r[i].s]);
        late[o] += (arrive > wait ? arrive : wait) + t->gadd[r[i].s] - wait;
        sent[w] = arrive > sent[w] ? arrive : sent[w];
    }
    for (int w = 0; w < W; w++) { /* its last job, held back; its sends arrived */
        at[w] += late[w];
        at[w] = sent[w] > at[w] ? sent[w] : at[w];
    }
    rc = 0;
out:
    free(r);
    free(reach);
    free(late);
    free(sent);
    return rc;
}
