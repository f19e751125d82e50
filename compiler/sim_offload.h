/* sim_offload.h - the simulator's host-copy lane (`offload when`): each
 * worker has one lane beside its compute, on which copies run one at a
 * time in the order the worker's plan issues them (the cuda backend's copy
 * stream; the cpu backend copies in plan order too), so that the host
 * memory the simulation holds is what the plan's host pool gives it.
 *
 * Offload: when F(s,b) ends, its stash is copied to host memory, starting
 * when the lane is free, for hcopy[s*B+b] (stash bytes / host_bandwidth).
 * Reload: where the plan puts its Reload (pp_reload_anchors, which
 * compiler/lower.c places them by): before the job `reload_ahead` jobs
 * (ppc --prefetch) before B(s,b) in its worker's order, but after F(s,b).
 * It is issued when the worker is free to start that job (the end of the
 * job before it, 0 for a worker's first), starts once the lane is free
 * (and so after its own offload, issued earlier), and B(s,b) waits for it
 * to end. A Reload whose job is F(s,b)'s partner in an overlapped pair
 * goes after the pair's offloads, as in the plan. The stash is on the
 * device from F's start to the offload's end and from the reload's start
 * to the end of its last reader (report.c), and in host memory from the
 * offload's start to the reload's end: two stashes that the plan's host
 * pool keeps in one slot (the one's Reload before the other's Offload in
 * the plan) are never held at once, so the simulated host peak is at most
 * the pool (compiler/README.md, offload).
 *
 * The greedy order knows a worker's order only once it has run, so it
 * runs with the reload issued when B(s,b)'s other input starts to be made
 * (the start of B(s+1,b), or of F(S-1,b)), and sim.c then replays the
 * order it found under the rule above (pp_simulate). */
#ifndef PP_SIM_OFFLOAD_H
#define PP_SIM_OFFLOAD_H

#include "sim.h"

/* The job before which each offloaded (s,b)'s Reload goes (the rule
 * above), in anchor[S*B] (-1 where not offloaded), given each worker's
 * order (order[off[w] .. off[w+1])). One function for the plan (lower.c)
 * and the simulation. 0, or -1 out of memory. */
int pp_reload_anchors(const pp_jobspace *js, const int *worker, const unsigned char *offload,
                      const int *order, const int *off, int W, int ahead, int *anchor);

/* Allocates r's copy times (nothing without offload). 0, or -1 out of memory. */
int pp_sim_offload_open(const pp_sim_input *in, pp_sim_result *r);
/* Once r's order is fixed: the plan's reload rule from here on, every copy
 * time cleared. 0, or -1 out of memory. */
int pp_sim_offload_plan_order(const pp_sim_input *in, pp_sim_result *r);
/* Before job j (the first of a pair, then its partner) starts on its
 * worker, free at `at`: the Reloads the plan puts before it are issued.
 * Only under the plan's rule; once per job (later calls do nothing). */
void pp_sim_offload_before(const pp_sim_input *in, pp_sim_result *r, int j, double at);
/* After job j is committed: an offloaded F issues its offload (then any
 * Reload the plan put after it). */
void pp_sim_offload_after(const pp_sim_input *in, pp_sim_result *r, int j);
/* The earliest job j can start given t from its inputs: an offloaded B
 * also waits for its reload. */
double pp_sim_offload_ready(const pp_sim_input *in, pp_sim_result *r, int j, double t);

#endif
