/* keep.h - keeping fetched weights for later jobs of the same stage
 * (ppc --keep-weights).
 *
 * By default a job computing away from its stage's owner fetches the
 * weights and drops them after use (the seed's count; ZeRO-3 reshards after
 * use). Keeping them trades memory for traffic: a job keeps, instead of
 * fetching, when the previous job on its worker that read the same stage's
 * fetched weights is at most `window` jobs earlier in the worker's order;
 * the buffer then stays live from that job to this one. A larger window
 * keeps more and holds more memory, so under --mem-limit ppc keeps with the
 * largest window whose plans fit; without a limit it keeps every reuse.
 *
 * Keeping does not change any worker's order: the schedule is simulated as
 * written, then replayed in the same order with the kept jobs' fetch times
 * removed, so the report's timings, counts and memory are the plan's. */
#ifndef PP_KEEP_H
#define PP_KEEP_H

#include "diag.h"
#include "jobtable.h"
#include "lower.h"
#include "sim.h"

/* Sets t->kept for `window` (0: keep nothing) over sim's per-worker order.
 * Returns the number of kept jobs, or -1 out of memory. */
int pp_keep_mark(pp_jobtable *t, const pp_sim_result *sim, int window);

/* The largest window that keeps anything: the widest gap, in jobs, between
 * two jobs of one worker reading the same stage's fetched weights (0 when no
 * worker reads a stage's fetched weights twice), or -1 out of memory. */
int pp_keep_max_window(const pp_jobtable *t, const pp_sim_result *sim);

typedef struct {
    int window; /* the window used; 0: nothing kept (sim untouched) */
    int widest; /* pp_keep_max_window: the window that keeps every reuse */
} pp_keep_choice;

/* The whole policy: chooses the window (the largest whose plans fit
 * opts->mem_limit, or the widest when there is no limit), marks t->kept and
 * replaces *sim by its replay. Returns 0, or the number of errors reported
 * through d. */
int pp_keep_weights(pp_jobtable *t, pp_sim_result *sim, const pp_model *m,
                    const pp_lower_opts *opts, pp_diag *d, pp_keep_choice *choice);

#endif
