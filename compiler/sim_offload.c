/* sim_offload.c - the host-copy lane of the simulator (sim_offload.h). */
#include "sim_offload.h"

#include <stdlib.h>

enum { OFF_ISSUED = 1, REL_WAITING = 2 }; /* r->copied's bits per (s,b) */

static int offloaded(const pp_sim_input *in, int j, int d)
{
    const pp_jobspace *js = &in->js;
    return in->offload && j >= 0 && job_d(js, j) == d &&
           in->offload[job_s(js, j) * js->B + job_b(js, j)];
}

int pp_reload_anchors(const pp_jobspace *js, const int *worker, const unsigned char *offload,
                      const int *order, const int *off, int W, int ahead, int *anchor)
{
    int N = job_count(js), SB = js->S * js->B;
    int *pos = malloc(((size_t)N + 1) * sizeof *pos);
    if (!pos)
        return -1;
    for (int w = 0; w < W; w++)
        for (int k = off[w]; k < off[w + 1]; k++)
            pos[order[k]] = k;
    for (int k = 0; k < SB; k++) {
        anchor[k] = -1;
        if (!offload[k])
            continue;
        int jf = job_id(js, k / js->B, k % js->B, 0),
            jb = job_id(js, k / js->B, k % js->B, 1); /* F, B */
        int w = worker[jb], at = pos[jb] - ahead;
        if (at <= pos[jf]) /* after F, whose Offload must come first */
            at = pos[jf] + 1;
        if (at < off[w])
            at = off[w];
        anchor[k] = order[at];
    }
    free(pos);
    return 0;
}

int pp_sim_offload_open(const pp_sim_input *in, pp_sim_result *r)
{
    if (!in->offload)
        return 0;
    size_t n = (size_t)in->js.S * (size_t)in->js.B;
    r->off_start = calloc(n, sizeof *r->off_start);
    r->off_end = calloc(n, sizeof *r->off_end);
    r->rel_start = malloc(n * sizeof *r->rel_start);
    r->rel_end = calloc(n, sizeof *r->rel_end);
    r->lane = calloc((size_t)in->W, sizeof *r->lane);
    if (!r->off_start || !r->off_end || !r->rel_start || !r->rel_end || !r->lane)
        return -1;
    for (size_t i = 0; i < n; i++)
        r->rel_start[i] = -1; /* not issued yet */
    return 0;
}

int pp_sim_offload_plan_order(const pp_sim_input *in, pp_sim_result *r)
{
    if (!in->offload)
        return 0;
    const pp_jobspace *js = &in->js;
    int SB = js->S * js->B, N = job_count(js);
    r->reload_ahead = in->reload_ahead;
    int *anchor = malloc(((size_t)SB + 1) * sizeof *anchor);
    if (!r->reload_head)
        r->reload_head = malloc(((size_t)N + 1) * sizeof *r->reload_head);
    if (!r->reload_next)
        r->reload_next = malloc(((size_t)SB + 1) * sizeof *r->reload_next);
    if (!r->copied)
        r->copied = malloc((size_t)SB + 1);
    if (!anchor || !r->reload_head || !r->reload_next || !r->copied ||
        pp_reload_anchors(js, in->worker, in->offload, r->order, r->off, in->W, in->reload_ahead,
                          anchor)) {
        free(anchor);
        return -1;
    }
    for (int j = 0; j < N; j++)
        r->reload_head[j] = -1;
    for (int k = SB - 1; k >= 0; k--) { /* each job's list rising, as lower.c's */
        r->reload_next[k] = -1;
        r->copied[k] = 0;
        r->off_start[k] = r->off_end[k] = r->rel_end[k] = 0;
        r->rel_start[k] = -1;
        if (anchor[k] >= 0) {
            r->reload_next[k] = r->reload_head[anchor[k]];
            r->reload_head[anchor[k]] = k;
        }
    }
    for (int w = 0; w < in->W; w++)
        r->lane[w] = 0;
    free(anchor);
    return 0;
}

/* Reload k on worker w's lane, issued at `at`. */
static void reload(const pp_sim_input *in, pp_sim_result *r, int k, int w, double at)
{
    if (r->off_end[k] > at) /* (the lane keeps it after its offload anyway) */
        at = r->off_end[k];
    if (r->lane[w] > at)
        at = r->lane[w];
    r->rel_start[k] = at;
    r->rel_end[k] = at + in->hcopy[k];
    r->lane[w] = r->rel_end[k];
}

void pp_sim_offload_before(const pp_sim_input *in, pp_sim_result *r, int j, double at)
{
    if (!r->reload_head || j < 0)
        return;
    for (int k = r->reload_head[j]; k >= 0; k = r->reload_next[k]) {
        if (r->rel_start[k] >= 0 || (r->copied[k] & REL_WAITING))
            continue; /* issued, or waiting for its offload */
        if (!(r->copied[k] & OFF_ISSUED))
            r->copied[k] |= REL_WAITING; /* its F is j's partner: after the pair */
        else
            reload(in, r, k, in->worker[j], at);
    }
}

void pp_sim_offload_after(const pp_sim_input *in, pp_sim_result *r, int j)
{
    if (!offloaded(in, j, 0))
        return;
    const pp_jobspace *js = &in->js;
    int i = job_s(js, j) * js->B + job_b(js, j), w = in->worker[j];
    double t = r->end[j] > r->lane[w] ? r->end[j] : r->lane[w];
    r->off_start[i] = t;
    r->off_end[i] = t + in->hcopy[i];
    r->lane[w] = r->off_end[i];
    if (r->copied) {
        r->copied[i] |= OFF_ISSUED;
        if (r->copied[i] & REL_WAITING)
            reload(in, r, i, w, r->end[j]);
    }
}

double pp_sim_offload_ready(const pp_sim_input *in, pp_sim_result *r, int j, double t)
{
    if (!offloaded(in, j, 1))
        return t;
    const pp_jobspace *js = &in->js;
    int i = job_s(js, j) * js->B + job_b(js, j), w = in->worker[j];
    if (r->rel_start[i] < 0) {
        /* the greedy order's rule (the plan's issued it before): B's other
         * input is being made */
        int p = job_pred(js, j);
        reload(in, r, i, w, p >= 0 ? r->start[p] : 0);
    }
    return r->rel_end[i] > t ? r->rel_end[i] : t;
}
