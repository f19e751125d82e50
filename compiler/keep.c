/* keep.c - keeping fetched weights for later jobs of the same stage (see
 * keep.h). */
#include "keep.h"

#include <stdlib.h>
#include <string.h>

#include "plans.h"
#include "replay.h"

/* gap[j]: for a job reading fetched weights, how many positions back in its
 * worker's order the previous job reading the same stage's fetched weights
 * ran (0 if none: the job must fetch); 0 for every other job. Caller frees. */
static int *reuse_gaps(const pp_jobtable *t, const pp_sim_result *sim)
{
    int N = job_count(&t->js);
    int *gap = calloc((size_t)N + 1, sizeof *gap),
        *last = malloc(((size_t)t->js.S + 1) * sizeof *last);
    if (!gap || !last) {
        free(gap);
        free(last);
        return NULL;
    }
    for (int s = 0; s < t->js.S; s++)
        last[s] = -1;
    for (int w = 0; w < t->W; w++) {
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++) {
            int j = sim->order[k], s = job_s(&t->js, j);
            if (!pp_job_reads_remote_weights(t, j))
                continue;
            gap[j] = last[s] < 0 ? 0 : k - last[s];
            last[s] = k;
        }
        /* set back only what this worker set: O(jobs), not O(W x S) */
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
            last[job_s(&t->js, sim->order[k])] = -1;
    }
    free(last);
    return gap;
}

int pp_keep_mark(pp_jobtable *t, const pp_sim_result *sim, int window)
{
    int N = job_count(&t->js), kept = 0, *gap = reuse_gaps(t, sim);
    if (!t->kept)
        t->kept = malloc((size_t)N + 1);
    if (!gap || !t->kept) {
        free(gap);
        return -1;
    }
    for (int j = 0; j < N; j++) {
        t->kept[j] = gap[j] > 0 && gap[j] <= window;
        kept += t->kept[j];
    }
    free(gap);
    return kept;
}

int pp_keep_max_window(const pp_jobtable *t, const pp_sim_result *sim)
{
    int most = 0, *gap = reuse_gaps(t, sim);
    if (!gap)
        return -1;
    for (int j = 0; j < job_count(&t->js); j++)
        if (gap[j] > most)
            most = gap[j];
    free(gap);
    return most;
}

/* Whether keeping with `window` fits: every worker's plan memory within the
 * limit. -1 out of memory or a lowering error (reported through d). The
 * candidate plans are lowered and verified as every plan is
 * (pp_compile_plans), without the limit, which this measures instead. */
static int fits(pp_jobtable *t, const pp_sim_result *sim, const pp_model *m,
                const pp_lower_opts *opts, pp_diag *d, int window)
{
    pp_sim_result replay = {0};
    pp_lower_opts lo = {opts->prefetch, 0};
    pp_plan *plans = NULL;
    int rc = -1;
    if (pp_keep_mark(t, sim, window) < 0 || pp_sim_replay(t, sim, 0, &replay))
        goto out;
    if (pp_compile_plans(t, &replay, m, &lo, d, &plans) != PP_COMPILE_OK)
        goto out;
    rc = 1;
    for (int r = 0; r < (int)plans[0].world; r++) /* t->W, or W*T under tensor = T */
        if (pp_plan_memory(&plans[r]) > opts->mem_limit)
            rc = 0;
out:
    pp_plans_free(plans, t->W);
    pp_sim_free(&replay);
    return rc;
}

int pp_keep_weights(pp_jobtable *t, pp_sim_result *sim, const pp_model *m,
                    const pp_lower_opts *opts, pp_diag *d, pp_keep_choice *choice)
{
    int before = d->errors, lo = 0, hi = pp_keep_max_window(t, sim), f;
    choice->window = 0;
    choice->widest = hi;
    if (hi < 0)
        goto oom;
    if (hi == 0)
        return 0;
    /* Memory grows with the window (each kept buffer lives longer), so
     * bisect for the largest window that fits; window 0 is today's plan,
     * whose own fit --mem-limit reports on later. */
    if (opts->mem_limit && (f = fits(t, sim, m, opts, d, hi)) != 1) {
        while (f >= 0 && hi - lo > 1) {
            int mid = lo + (hi - lo) / 2;
            if ((f = fits(t, sim, m, opts, d, mid)) == 1)
                lo = mid;
            else
                hi = mid;
        }
        if (f < 0)
            goto oom;
        hi = lo;
    }
    if (hi == 0) {
        free(t->kept);
        t->kept = NULL;
        return d->errors - before;
    }
    pp_sim_result replay = {0};
    if (pp_keep_mark(t, sim, hi) < 0 || pp_sim_replay(t, sim, 0, &replay)) {
        pp_sim_free(&replay);
        goto oom;
    }
    pp_sim_free(sim);
    *sim = replay;
    choice->window = hi;
    return d->errors - before;
oom:
    if (d->errors == before)
        diag_nomem(d, "while choosing which fetched weights to keep");
    return d->errors - before;
}
