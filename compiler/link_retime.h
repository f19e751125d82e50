/* link_retime.h - the step's transfers through each sender's token bucket
 * (--costs "burst", issue 29): after a simulation, every activation,
 * gradient and weight fetch is priced again in the order the simulation
 * sent them, each sender's messages in turn through its bucket
 * (link_bucket.h), so that back-to-back fetches drain the burst instead of
 * each finding it full; the compile then simulates again (twice). */
#ifndef PP_LINK_RETIME_H
#define PP_LINK_RETIME_H

#include "jobtable.h"
#include "sim.h"

/* Rewrites t->xfer and t->fetch from sim's start and end times: a transfer
 * into job j leaves when its predecessor ends (from the predecessor's
 * worker), a fetch when its predecessor starts (from the owner; at 0 for a
 * first job), each sender's buckets full at 0. 0, or -1 out of memory. */
int pp_link_retime(pp_jobtable *t, const pp_model *m, const pp_sim_result *sim);

#endif
