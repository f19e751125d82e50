/* replay.h - a simulated order run again with the table's current costs:
 * what --keep-weights prices once fetches are kept (keep.c), and the run
 * of a plan whose overlapped pairs go in turn (compile.c, sim.h "Pairs in
 * turn"). The order is exactly sim's (each job's position in its worker's
 * order is its strict key), so the replay cannot reorder or deadlock. */
#ifndef PP_REPLAY_H
#define PP_REPLAY_H

#include "jobtable.h"
#include "sim.h"

/* Replays sim's order into *out with t's current fetch times (jobs that
 * keep their weights fetch nothing), its pairs one unit each or, with
 * in_turn, each job of a pair when it is ready. Returns 0, or -1 out of
 * memory (or, impossibly, a deadlock of an order that ran). */
int pp_sim_replay(const pp_jobtable *t, const pp_sim_result *sim, int in_turn, pp_sim_result *out);

/* Whether sim's pairs run in turn (sim.h): some pair, and overlap 1 (no
 * gain from running them at once; the cpu backend's profile says 1). */
static inline int pp_pairs_in_turn(const pp_jobtable *t, const pp_sim_result *sim)
{
    return sim->npairs > 0 && t->overlap >= 1;
}

#endif
