/* replay.c - a simulated order run again (replay.h). */
#include "replay.h"

#include <stdlib.h>

int pp_sim_replay(const pp_jobtable *t, const pp_sim_result *sim, int in_turn, pp_sim_result *out)
{
    int N = job_count(&t->js), rc = -1;
    /* A strict order whose keys are the positions is exactly sim's order. */
    long long *pos = malloc(((size_t)N + 1) * sizeof *pos);
    double *fetch = malloc(((size_t)N + 1) * sizeof *fetch);
    if (!pos || !fetch)
        goto out;
    for (int w = 0; w < t->W; w++)
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
            pos[sim->order[k]] = k - sim->off[w];
    for (int j = 0; j < N; j++)
        fetch[j] = pp_job_fetches(t, j) ? t->fetch[j] : 0;
    pp_sim_input in = {t->js,         t->W,       t->worker,
                       pos,           t->cost,    1,
                       NULL,          t->xfer,    fetch,
                       t->pairable,   t->overlap, t->cores,
                       t->offload,    t->hcopy,   sim->reload_ahead,
                       t->recv_waits, in_turn,    t->job_overhead,
                       t->wake};
    rc = pp_simulate(&in, out) == 0 ? 0 : -1;
out:
    free(fetch);
    free(pos);
    return rc;
}
