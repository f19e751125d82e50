/* sim_offload.c - the host-copy lane of the simulator (sim_offload.h). */
#include "sim_offload.h"

#include <stdlib.h>

static int offloaded(const pp_sim_input *in, int j, int d)
{
    const pp_jobspace *js = &in->js;
    return in->offload && j >= 0 && job_d(js, j) == d &&
           in->offload[job_s(js, j) * js->B + job_b(js, j)];
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
}

double pp_sim_offload_ready(const pp_sim_input *in, pp_sim_result *r, int j, double t)
{
    if (!offloaded(in, j, 1))
        return t;
    const pp_jobspace *js = &in->js;
    int i = job_s(js, j) * js->B + job_b(js, j), w = in->worker[j];
    if (r->rel_start[i] < 0) { /* issue it: B's other input is being made */
        int p = job_pred(js, j);
        double at = p >= 0 ? r->start[p] : 0;
        if (r->off_end[i] > at)
            at = r->off_end[i];
        if (r->lane[w] > at)
            at = r->lane[w];
        r->rel_start[i] = at;
        r->rel_end[i] = at + in->hcopy[i];
        r->lane[w] = r->rel_end[i];
    }
    return r->rel_end[i] > t ? r->rel_end[i] : t;
}
