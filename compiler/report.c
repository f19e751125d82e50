/* report.c - the per-worker cost of a simulated schedule (see report.h for
 * what each number counts): busy time, transfers, peak activation storage
 * and weight, gradient, optimizer and bf16 copy storage, computed from the
 * job table, the simulated timeline and the model's shapes. */
#include "report.h"

#include <stdlib.h>
#include <string.h>

#include "../isa/model_shape.h"
#include "../isa/tied.h"
#include "radix_sort.h"

/* A (time, change) event on one worker's activation storage. */
typedef struct {
    double t;
    int w;
    int release; /* releases sort before acquisitions at the same time */
    long long count;
    long long bytes;
} mem_event;

/* The events by (worker, time), releases first at one time: a radix sort,
 * then a stable partition of each tie. The order inside a tie with one
 * flag does not change any peak (all add, or all take away), so this
 * gives what cmp_event's sort gave. 0, or -1 out of memory. */
static int sort_events(mem_event **events, size_t n)
{
    mem_event *ev = *events, *out = malloc((n + 1) * sizeof *out);
    pp_sort_rec *r = malloc((n + 1) * sizeof *r);
    int rc = -1;
    if (!out || !r || n > UINT32_MAX)
        goto done;
    for (size_t i = 0; i < n; i++)
        r[i] = (pp_sort_rec){pp_double_key(ev[i].t), (uint32_t)ev[i].w, (uint32_t)i};
    if (pp_radix_sort(r, n))
        goto done;
    size_t o = 0;
    for (size_t i = 0, e; i < n; i = e) {
        for (e = i + 1; e < n && r[e].group == r[i].group && r[e].key == r[i].key; e++)
            ;
        for (int rel = 1; rel >= 0; rel--)
            for (size_t k = i; k < e; k++)
                if (ev[r[k].val].release == rel)
                    out[o++] = ev[r[k].val];
    }
    free(ev);
    *events = out;
    out = NULL;
    rc = 0;
done:
    free(out);
    free(r);
    return rc;
}

/* Peak stash count (F start .. B end) and bytes (F start .. end of its last
 * reader) per worker, by sweeping sorted events. */
static int peak_activations(pp_report *r, const pp_jobtable *t, const pp_sim_result *sim,
                            const pp_model *m)
{
    const pp_jobspace *js = &t->js;
    size_t n = (size_t)js->S * (size_t)js->B * 8;
    mem_event *ev = malloc(n * sizeof *ev);
    if (!ev)
        return -1;
    size_t k = 0;
    for (int s = 0; s < js->S; s++) {
        for (int b = 0; b < js->B; b++) {
            int split = job_split(js, s, b); /* per job: `split backward when` */
            long long stash = (long long)(split ? pp_stage_stash_bytes_split(m, js->S, s)
                                                : pp_stage_stash_bytes(m, js->S, s));
            int f = job_id(js, s, b, DIR_F), bw = job_id(js, s, b, DIR_B);
            int last = split ? job_id(js, s, b, DIR_W) : bw;
            int w = t->worker[f];
            if (job_recomputed(js, s, b)) {
                /* F's stash only while F runs; its input until R has re-read it */
                int rj = job_id(js, s, b, JOB_DIR_R);
                long long in = (long long)(s > 0 ? pp_act_bytes(m) : pp_tokens_bytes(m));
                ev[k++] = (mem_event){sim->start[f], w, 0, 0, stash + in};
                ev[k++] = (mem_event){sim->end[f], w, 1, 0, -stash};
                ev[k++] = (mem_event){sim->start[rj], w, 0, 1, stash};
                ev[k++] = (mem_event){sim->end[rj], w, 1, 0, -in};
            } else
                ev[k++] = (mem_event){sim->start[f], w, 0, 1, stash};
            if (t->offload && t->offload[s * js->B + b]) {
                /* offload: away from the device between the copies; in host
                 * memory (group W + w) from the offload's start to the
                 * reload's end (sim_offload.h) */
                int i = s * js->B + b, hw = t->W + w;
                ev[k++] = (mem_event){sim->off_end[i], w, 1, 0, -stash};
                ev[k++] = (mem_event){sim->rel_start[i], w, 0, 0, stash};
                ev[k++] = (mem_event){sim->off_start[i], hw, 0, 0, stash};
                ev[k++] = (mem_event){sim->rel_end[i], hw, 1, 0, -stash};
            }
            ev[k++] = (mem_event){sim->end[bw], w, 1, -1, last == bw ? -stash : 0};
            if (last != bw)
                ev[k++] = (mem_event){sim->end[last], w, 1, 0, -stash};
        }
    }
    if (sort_events(&ev, k)) {
        free(ev);
        return -1;
    }
    long long count = 0, bytes = 0;
    for (size_t i = 0; i < k; i++) {
        if (i == 0 || ev[i].w != ev[i - 1].w)
            count = bytes = 0;
        count += ev[i].count;
        bytes += ev[i].bytes;
        if (ev[i].w >= t->W) { /* host memory (offload) */
            pp_worker_report *hr = &r->w[ev[i].w - t->W];
            if (bytes > (long long)hr->host_peak_bytes)
                hr->host_peak_bytes = (uint64_t)bytes;
            continue;
        }
        pp_worker_report *wr = &r->w[ev[i].w];
        if (count > wr->peak_act)
            wr->peak_act = count;
        if (bytes > (long long)wr->peak_act_bytes)
            wr->peak_act_bytes = (uint64_t)bytes;
    }
    free(ev);
    return 0;
}

static int tied_once(pp_report *r, const pp_jobtable *t, const pp_model *m);

/* Distinct (stage, worker) pairs among the jobs `owners` selects, each
 * counted once on its worker: weights held by owners, gradient
 * accumulators on the workers that compute a stage's weight gradient.
 * A stage's jobs are consecutive ids, so a per-worker stamp finds each
 * stage's distinct workers in O(N + W) (the sums are integers: their order
 * does not matter). */
static int stage_worker_pairs(pp_report *r, const pp_jobtable *t, const pp_model *m, int owners)
{
    const pp_jobspace *js = &t->js;
    int per_stage = js->B * js->ND;
    int *stamp = malloc(((size_t)t->W + 1) * sizeof *stamp);
    if (!stamp)
        return -1;
    for (int w = 0; w < t->W; w++)
        stamp[w] = -1;
    for (int s = 0; s < js->S; s++)
        for (int j = s * per_stage; j < (s + 1) * per_stage; j++) {
            if (!job_exists(js, j) || (!owners && !job_makes_wgrad(js, j)))
                continue; /* without owners: where dW is computed */
            int w = owners ? t->owner[j] : t->worker[j];
            if (stamp[w] == s)
                continue;
            stamp[w] = s;
            uint64_t bytes = t->wbytes[s]; /* fp32: master weights, gradients */
            if (owners) {
                r->w[w].weight_store++;
                r->w[w].weight_store_bytes += bytes;
                r->w[w].opt_store_bytes += pp_optimizer_state_floats(m->optimizer) * bytes;
                if (m->precision == PP_PREC_BF16) /* as pp_plan_memory counts it */
                    r->w[w].copy_store_bytes += pp_stage_compute_bytes(m, js->S, s);
            } else
                r->w[w].grad_store_bytes += bytes;
        }
    free(stamp);
    return owners ? 0 : tied_once(r, t, m);
}

/* A worker that owns both tied stages stores the tied weights once
 * (isa/tied.h): its weights, optimizer state and bf16 copy count the
 * tensor once (its gradients stay two). 0, or -1 out of memory. */
static int tied_once(pp_report *r, const pp_jobtable *t, const pp_model *m)
{
    const pp_jobspace *js = &t->js;
    int per_stage = js->B * js->ND, last = js->S - 1;
    if (!pp_tied_shared(m, js->S, 1, 1))
        return 0;
    unsigned char *bits = calloc((size_t)t->W + 1, 1); /* 1 owns stage 0, 2 stage S-1 */
    if (!bits)
        return -1;
    for (int k = 0; k < 2; k++)
        for (int j = (k ? last : 0) * per_stage; j < ((k ? last : 0) + 1) * per_stage; j++)
            if (job_exists(js, j))
                bits[t->owner[j]] |= (unsigned char)(1 << k);
    uint64_t tied = (uint64_t)pp_tied_floats(m) * sizeof(float);
    for (int w = 0; w < t->W; w++) {
        pp_worker_report *x = &r->w[w];
        if (bits[w] != 3)
            continue;
        x->weight_store_bytes -= tied;
        x->opt_store_bytes -= pp_optimizer_state_floats(m->optimizer) * tied;
        if (m->precision == PP_PREC_BF16)
            x->copy_store_bytes -= tied / 2;
    }
    free(bits);
    return 0;
}

static int transfers(pp_report *r, const pp_jobtable *t, const pp_sim_result *sim,
                     const pp_model *m)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js), n = 0;
    for (int j = 0; j < N; j++) {
        int p = job_pred(js, j);
        if (job_exists(js, j))
            n += (p >= 0 && t->worker[p] != t->worker[j]) + pp_job_fetches(t, j);
    }
    r->xfer = calloc((size_t)n + 1, sizeof *r->xfer);
    if (!r->xfer)
        return -1;
    for (int j = 0; j < N; j++) {
        int p = job_pred(js, j), w = t->worker[j];
        if (!job_exists(js, j))
            continue;
        if (p >= 0 && t->worker[p] != w) {
            uint64_t bytes = pp_job_input_bytes(t, m, j);
            int kind = job_d(js, j) == DIR_F ? XFER_ACT : XFER_GRAD;
            double sent = pp_sim_out_time(sim, p);
            r->xfer[r->nxfer++] =
                (pp_transfer){kind, t->worker[p], w, j, sent, sent + t->xfer[j], bytes};
            r->w[w].act_recv++;
            r->w[w].act_recv_bytes += bytes;
        }
        if (pp_job_fetches(t, j)) {
            uint64_t bytes = t->cbytes[job_s(js, j)]; /* the compute copy */
            double from = p >= 0 ? sim->start[p] : 0; /* the prefetch thread's start (sim.h) */
            r->xfer[r->nxfer++] =
                (pp_transfer){XFER_WEIGHT, t->owner[j], w, j, from, from + t->fetch[j], bytes};
            r->w[w].weight_recv++;
            r->w[w].weight_recv_bytes += bytes;
        } else if (pp_job_reads_remote_weights(t, j))
            r->w[w].weight_kept++;
    }
    /* in job order: trace.json, their one reader, sorts them by start (a
     * million-job schedule's sort was a tenth of its compile, issue 18) */
    return 0;
}

/* The step's end after each worker's last job, in the order the plan's
 * epilogue runs it: a worker that computed weight gradients of a stage it
 * does not own sends them to the owner after its last job; then each stage
 * with R > 1 owners, in stage order, all-reduces its fp32 gradients once
 * every replica is there (pp_allreduce_time: a ring of 2(R-1) transfers of
 * 1/R of them, or the all-reduce --costs measured); then
 * each owner runs its stages' optimizer steps (--costs "O", else 0). With
 * no transfer costs and no "O" this is the makespan. A tied model (tie = 1)
 * swaps the embedding's gradients between the i-th owner of only stage 0
 * and the i-th owner of only stage S-1 before either steps (compiler/lower.c,
 * lower_tie); an owner of both adds them with no transfer. */
static int owns_of(const int *owner, const int *off, int s, int w)
{
    for (int k = off[s]; k < off[s + 1]; k++)
        if (owner[k] == w)
            return 1;
    return 0;
}

static void tied_exchange(const pp_jobtable *t, const pp_model *m, const int *owner, const int *off,
                          double *at)
{
    int last = t->js.S - 1, i = off[0], k = off[last];
    double move = pp_transfer_time(t, (uint64_t)pp_tied_floats(m) * sizeof(float));
    for (;;) { /* the next owner of only stage 0 with the next of only stage S-1 */
        while (i < off[1] && owns_of(owner, off, last, owner[i]))
            i++;
        while (k < off[last + 1] && owns_of(owner, off, 0, owner[k]))
            k++;
        if (i >= off[1] || k >= off[last + 1])
            return;
        int a = owner[i++], b = owner[k++];
        double x = (at[a] > at[b] ? at[a] : at[b]) + move;
        at[a] = at[b] = x;
    }
}

static int step_time(pp_report *r, const pp_jobtable *t, const pp_sim_result *sim,
                     const pp_model *m)
{
    const pp_jobspace *js = &t->js;
    int W = t->W, S = js->S, N = job_count(js), per_stage = js->B * js->ND, rc = -1;
    double *last = calloc((size_t)W, sizeof *last), *at = calloc((size_t)W, sizeof *at);
    /* each stage's distinct owners, stage by stage: owner[off[s] .. off[s+1]);
     * at most one per job, never S x W (a stage's jobs are consecutive ids) */
    int *off = malloc(((size_t)S + 1) * sizeof *off),
        *owner = malloc(((size_t)N + 1) * sizeof *owner);
    int *stamp = malloc(((size_t)W + 1) * sizeof *stamp);
    if (!last || !at || !off || !owner || !stamp)
        goto out;
    for (int w = 0; w < W; w++)
        stamp[w] = -1;
    off[0] = 0;
    for (int s = 0; s < S; s++) {
        off[s + 1] = off[s];
        for (int j = s * per_stage; j < (s + 1) * per_stage; j++) {
            if (!job_exists(js, j))
                continue;
            int w = t->worker[j], o = t->owner[j];
            if (sim->end[j] > last[w])
                last[w] = sim->end[j];
            if (stamp[o] != s) {
                stamp[o] = s;
                owner[off[s + 1]++] = o;
            }
        }
    }
    memcpy(at, last, (size_t)W * sizeof *at);
    /* a link with a burst or half duplex, or a tree all-reduce priced as
     * its messages: report_link.c */
    int linked = pp_link_shaped(t) || (t->allreduce_tree && !t->ar_ranks);
    if (linked ? pp_report_link_end(t, sim, at, owner, off)
               : pp_report_returns(t, sim, at, NULL, NULL)) /* gradient returns */
        goto out;
    for (int s = 0; !linked && s < S; s++) { /* all-reduces, in stage order */
        int R = off[s + 1] - off[s];
        double start = 0;
        for (int k = off[s]; k < off[s + 1]; k++)
            start = at[owner[k]] > start ? at[owner[k]] : start;
        if (R < 2)
            continue;
        double end = start + pp_allreduce_time(t, t->wbytes[s], R);
        for (int k = off[s]; k < off[s + 1]; k++)
            at[owner[k]] = end;
    }
    if (m->tie && S > 1)
        tied_exchange(t, m, owner, off, at);
    /* optimizer steps: each worker adds its stages' in stage order */
    for (int s = 0; s < S; s++)
        for (int k = off[s]; k < off[s + 1]; k++)
            at[owner[k]] += t->opt[s];
    r->step = 0;
    for (int w = 0; w < W; w++)
        if (at[w] > r->step)
            r->step = at[w];
    /* a measured link shape (burst, duplex, tree): no faster than the
     * links sustain from step to step (report_link.c) */
    if (linked) {
        r->link_step = pp_report_link_sustained(t, m, owner, off);
        if (r->link_step < 0)
            goto out;
        r->step_schedule = r->step;
        if (r->link_step > r->step)
            r->step = r->link_step;
    }
    rc = 0;
out:
    free(stamp);
    free(owner);
    free(off);
    free(last);
    free(at);
    return rc;
}

int pp_report_build(pp_report *r, const pp_jobtable *t, const pp_sim_result *sim, const pp_model *m)
{
    memset(r, 0, sizeof *r);
    const pp_jobspace *js = &t->js;
    r->S = js->S;
    r->B = js->B;
    r->W = t->W;
    r->split = js->ND == 3;
    for (int i = 0; js->recompute && i < js->S * js->B; i++)
        r->nrecompute += js->recompute[i];
    for (int i = 0; t->offload && i < js->S * js->B; i++)
        r->noffload += t->offload[i];
    r->nsplit = js->ND == 3 ? job_total(js) - 2 * js->S * js->B - r->nrecompute : 0;
    r->makespan = sim->makespan;
    r->w = calloc((size_t)t->W, sizeof *r->w);
    if (!r->w)
        goto fail;
    for (int j = 0; j < job_count(js); j++) {
        if (!job_exists(js, j))
            continue;
        r->w[t->worker[j]].jobs++;
        /* a pair occupies its worker once, for the pair's time (sim.h);
         * in turn, each job its own time */
        int paired = sim->partner && sim->partner[j] >= 0 && !sim->in_turn;
        r->w[t->worker[j]].busy += paired ? (sim->end[j] - sim->start[j]) / 2 : t->cost[j];
    }
    if (step_time(r, t, sim, m) || transfers(r, t, sim, m) || peak_activations(r, t, sim, m) ||
        stage_worker_pairs(r, t, m, 1) || stage_worker_pairs(r, t, m, 0))
        goto fail;
    r->optimizer = m->optimizer;
    r->precision = m->precision;
    pp_report_tensor_build(r, t, m);
    pp_worker_report *tot = &r->total;
    for (int w = 0; w < r->W; w++) {
        const pp_worker_report *x = &r->w[w];
        tot->jobs += x->jobs;
        tot->busy += x->busy;
        tot->act_recv += x->act_recv;
        tot->act_recv_bytes += x->act_recv_bytes;
        tot->weight_recv += x->weight_recv;
        tot->weight_recv_bytes += x->weight_recv_bytes;
        tot->weight_kept += x->weight_kept;
        tot->peak_act += x->peak_act;
        tot->peak_act_bytes += x->peak_act_bytes;
        tot->weight_store += x->weight_store;
        tot->weight_store_bytes += x->weight_store_bytes;
        tot->grad_store_bytes += x->grad_store_bytes;
        tot->opt_store_bytes += x->opt_store_bytes;
        tot->copy_store_bytes += x->copy_store_bytes;
        tot->mem_bytes += x->mem_bytes;
        tot->tensor_allreduces += x->tensor_allreduces;
        tot->tensor_bytes += x->tensor_bytes;
        tot->host_bytes += x->host_bytes;
        tot->host_peak_bytes += x->host_peak_bytes;
    }
    r->bubble = r->makespan > 0 ? 1.0 - tot->busy / ((double)r->W * r->makespan) : 0;
    if (r->bubble < 0) /* a full schedule: the sum of the busy times rounds past W x makespan */
        r->bubble = 0;
    return 0;
fail:
    pp_report_free(r);
    return -1;
}

void pp_report_free(pp_report *r)
{
    free(r->w);
    free(r->xfer);
    memset(r, 0, sizeof *r);
}
