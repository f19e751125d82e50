/* sim_offload.h - the simulator's host-copy lane (`offload when`): each
 * worker has one lane beside its compute, on which copies run one at a
 * time in the order they are issued.
 *
 * Offload: when F(s,b) ends, its stash is copied to host memory, starting
 * when the lane is free, for hcopy[s*B+b] (stash bytes / host_bandwidth).
 * Reload: issued when B(s,b)'s other input starts to be made (the start of
 * B(s+1,b), or of F(S-1,b)), as the seed's prefetch thread sees a job
 * coming; it starts once that offload has ended and the lane is free, and
 * B(s,b) waits for it to end. The stash is on the device from F's start to
 * the offload's end and from the reload's start to the end of its last
 * reader (report.c), and in host memory from the offload's start to the
 * reload's end. */
#ifndef PP_SIM_OFFLOAD_H
#define PP_SIM_OFFLOAD_H

#include "sim.h"

/* Allocates r's copy times (nothing without offload). 0, or -1 out of memory. */
int pp_sim_offload_open(const pp_sim_input *in, pp_sim_result *r);
/* After job j is committed: an offloaded F issues its offload. */
void pp_sim_offload_after(const pp_sim_input *in, pp_sim_result *r, int j);
/* The earliest job j can start given t from its inputs: an offloaded B
 * also waits for its reload (issued here, once its predecessor is done). */
double pp_sim_offload_ready(const pp_sim_input *in, pp_sim_result *r, int j, double t);

#endif
