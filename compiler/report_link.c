/* report_link.c - the end of the step's gradient returns and data-parallel
 * all-reduces over shaped links (--costs "burst", "duplex": "half") or
 * with a tree all-reduce ("allreduce": "tree") that was not measured
 * whole ("allreduce_latency": then each takes what it measured), issue 29; report.c's
 * step_time prices them itself when none is given (the messages of one
 * sender in parallel, a ring all-reduce).
 *
 * Each worker sends through its own bucket (link_bucket.h; with half
 * duplex the two directions of a pair in turn), full at the start of the end
 * of the step: inside the step, activations are small against a burst and
 * it refills between them. A worker returns each stage's accumulated
 * gradients once (it holds one accumulator per stage, report.h), where
 * the plans have it (report_returns.c), its messages in turn. The
 * all-reduces then go in stage order, each when its last owner has its
 * gradients (or together with the one before: below): a ring is 2 (R - 1)
 * rounds in which every owner sends 1/R of the gradients to the next; a
 * tree (Open MPI's in-place MPI_Iallreduce, a binomial reduce then
 * broadcast) is 2 ceil(log2 R) rounds in which the senders of the round
 * each send all of them. A round ends when its last message has arrived. */
#include <stdlib.h>
#include <string.h>

#include "link_bucket.h"
#include "report.h"

/* Whether owner k sends in a round: every owner in a ring's (step 0); in
 * a tree's reduce round `step` or broadcast round `step`, as below. */
static int sends_in_round(int k, int R, int step, int reduce)
{
    return step == 0 ? 1 : reduce ? k % (2 * step) == step : k % (2 * step) == 0 && k + step < R;
}

/* One round: every owner k in [0, R) that sends in it sends `bytes` when the
 * round starts at `start`; the round's end. */
static double round_of(const pp_jobtable *t, pp_links *l, const int *owner, int R, double start,
                       double bytes, int step, int reduce)
{
    double end = start;
    for (int k = 0; k < R; k++) {
        if (!sends_in_round(k, R, step, reduce))
            continue;
        int to = step == 0 ? (k + 1) % R : reduce ? k - step : k + step;
        double e = pp_links_send(l, t, owner[k], owner[to], start, bytes);
        end = e > end ? e : end;
    }
    return end;
}

/* The rounds of one all-reduce of `bytes` over own[0..R) through the
 * links from `start`: their end. */
static double rounds(const pp_jobtable *t, pp_links *l, const int *own, int R, double start,
                     double bytes)
{
    double now = start;
    if (t->allreduce_tree) {
        int top = 1;
        while (top * 2 < R)
            top *= 2;
        for (int step = 1; step < R; step *= 2) /* reduce to owner 0 */
            now = round_of(t, l, own, R, now, bytes, step, 1);
        for (int step = top; step >= 1; step /= 2) /* broadcast from it */
            now = round_of(t, l, own, R, now, bytes, step, 0);
    } else {
        for (int i = 0; i < 2 * (R - 1); i++)
            now = round_of(t, l, own, R, now, bytes / R, 0, 0);
    }
    return now;
}

/* One all-reduce of `bytes` over own[0..R) starting at `start`: its end.
 * A measured one (pp_allreduce_time) was timed back to back, through
 * drained buckets: it takes that less what the buckets hold now save, the
 * difference between its rounds priced from them and from empty ones
 * (`empty`: scratch links). At 200 Mbit/s with a 60 KB burst DDP's
 * all-reduces came 5 ms (12%) under the measured time. */
static double all_reduce(const pp_jobtable *t, pp_links *l, pp_links *empty, const int *own, int R,
                         double start, double bytes)
{
    if (!t->ar_ranks)
        return rounds(t, l, own, R, start, bytes);
    pp_links_copy(empty, l);
    for (int w = 0; w < empty->W; w++) {
        empty->bk[w].level = 0;
        empty->bk[w].at = empty->bk[w].at > start ? empty->bk[w].at : start;
    }
    double drained = rounds(t, empty, own, R, start, bytes),
           now = rounds(t, l, own, R, start, bytes);
    return start + pp_allreduce_time(t, (uint64_t)bytes, R) - (drained - now);
}

/* pp_return_link over the links l */
static double send_on(void *l, const pp_jobtable *t, int from, int to, double ready, double bytes)
{
    return pp_links_send(l, t, from, to, ready, bytes);
}

int pp_report_link_end(const pp_jobtable *t, const pp_sim_result *sim, double *at, const int *owner,
                       const int *off)
{
    int S = t->js.S;
    pp_links l, saved, empty; /* the links, a copy, scratch */
    if (pp_links_init(&l, t))
        return -1;
    if (pp_links_init(&saved, t)) {
        pp_links_free(&l);
        return -1;
    }
    if (pp_links_init(&empty, t)) {
        pp_links_free(&saved);
        pp_links_free(&l);
        return -1;
    }
    if (pp_report_returns(t, sim, at, send_on, &l)) { /* gradient returns: report_returns.c */
        pp_links_free(&empty);
        pp_links_free(&saved);
        pp_links_free(&l);
        return -1;
    }
    /* all-reduces, in stage order; one whose owners are the previous one's
     * and whose gradients are ready before that one has ended is in flight
     * with it: they share the link and end together, as one of their summed
     * bytes from the first one's start (DDP's stages: measured 8.8 ms at 1
     * Gbit/s, against 5.8 priced one after the other and 7.4 together).
     * Measured all-reduces go one after the other, as ppvm runs them where
     * each rank has a core (vm/interp.c op_reduce) */
    int g = -1; /* the group's first stage, or -1 */
    double g_start = 0, g_bytes = 0, g_end = 0;
    for (int s = 0; s <= S; s++) {
        int R = s < S ? off[s + 1] - off[s] : 0;
        const int *own = s < S ? owner + off[s] : NULL;
        double ready = 0;
        for (int k = 0; k < R; k++)
            ready = at[own[k]] > ready ? at[own[k]] : ready;
        int joins = g >= 0 && !t->ar_ranks && R >= 2 && R == off[g + 1] - off[g] &&
                    ready <= g_end && !memcmp(own, owner + off[g], (size_t)R * sizeof *own);
        if (joins) { /* again from the group's start, with its buckets then */
            pp_links_copy(&l, &saved);
            g_bytes += (double)t->wbytes[s];
            g_end = all_reduce(t, &l, &empty, owner + off[g], R, g_start, g_bytes);
            continue;
        }
        if (g >= 0) /* the group ends */
            for (int k = off[g]; k < off[g + 1]; k++)
                at[owner[k]] = g_end;
        g = -1;
        if (R < 2)
            continue;
        for (int k = 0; k < R; k++) /* (a later stage's owners wait for it) */
            ready = at[own[k]] > ready ? at[own[k]] : ready;
        pp_links_copy(&saved, &l);
        g = s;
        g_start = ready;
        g_bytes = (double)t->wbytes[s];
        g_end = all_reduce(t, &l, &empty, own, R, g_start, g_bytes);
    }
    pp_links_free(&l);
    pp_links_free(&saved);
    pp_links_free(&empty);
    return 0;
}

/* The bytes each owner sends in one all-reduce of `bytes` over own[0..R),
 * added to sent[]: the rounds of all_reduce above. */
static void all_reduce_bytes(const pp_jobtable *t, const int *own, int R, double bytes,
                             double *sent)
{
    if (!t->allreduce_tree) {
        for (int k = 0; k < R; k++)
            sent[own[k]] += 2.0 * (R - 1) * bytes / R;
        return;
    }
    int top = 1;
    while (top * 2 < R)
        top *= 2;
    for (int step = 1; step < R; step *= 2)
        for (int k = 0; k < R; k++)
            sent[own[k]] += sends_in_round(k, R, step, 1) ? bytes : 0;
    for (int step = top; step >= 1; step /= 2)
        for (int k = 0; k < R; k++)
            sent[own[k]] += sends_in_round(k, R, step, 0) ? bytes : 0;
}

/* Why a bound and not the buckets carried from one step to the next: the
 * step is periodic, so over it a sender's bucket refills what it spends;
 * the burst moves when inside the step a sender may go fast, not how much
 * it moves. Measured over 200 Mbit/s with a 60 KB burst: GPipe S=2 B=8
 * sends 64 KB each way a step; priced from full buckets 1.5 ms, it took
 * 2.73 ms, and 64 KB at the measured 23.9 MB/s is 2.74 ms. */
double pp_report_link_sustained(const pp_jobtable *t, const pp_model *m, const int *owner,
                                const int *off)
{
    const pp_jobspace *js = &t->js;
    int W = t->W, S = js->S, N = job_count(js);
    if (t->bandwidth <= 0)
        return 0;
    double *sent = calloc((size_t)W + 1, sizeof *sent);
    unsigned char *returned = calloc((size_t)W * (size_t)S + 1, 1);
    if (!sent || !returned) {
        free(sent);
        free(returned);
        return -1;
    }
    for (int j = 0; j < N; j++) {
        if (!job_exists(js, j))
            continue;
        int p = job_pred(js, j), s = job_s(js, j), w = t->worker[j], o = t->owner[j];
        if (p >= 0 && t->worker[p] != w)
            sent[t->worker[p]] += (double)pp_job_input_bytes(t, m, j);
        if (pp_job_fetches(t, j))
            sent[o] += (double)t->cbytes[s];
        if (job_makes_wgrad(js, j) && w != o && t->wbytes[s] && !returned[(size_t)w * S + s]) {
            returned[(size_t)w * S + s] = 1;
            sent[w] += (double)t->wbytes[s];
        }
    }
    for (int s = 0; s < S; s++)
        if (off[s + 1] - off[s] >= 2)
            all_reduce_bytes(t, owner + off[s], off[s + 1] - off[s], (double)t->wbytes[s], sent);
    double most = 0;
    for (int w = 0; w < W; w++)
        most = sent[w] > most ? sent[w] : most;
    free(sent);
    free(returned);
    return most / t->bandwidth;
}
