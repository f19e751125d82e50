/* timeline.h - pictures of a simulated schedule: the seed's pipeline
 * diagram as SVG and as ASCII, and a Chrome/Perfetto trace.
 *
 * All three draw the same thing: a row (track) per worker, time to the
 * right, one cell per job, and idle time left empty. The SVG labels a cell
 * with its direction, stage and microbatch ("F3.17") where that fits, gives
 * every cell a tooltip, and colours it by microbatch; the ASCII cell shows
 * direction and microbatch. Times
 * are the simulator's (any positive reals); the trace converts them to
 * microseconds from their unit. */
#ifndef PP_TIMELINE_H
#define PP_TIMELINE_H

#include <stdio.h>

#include "jobtable.h"
#include "report.h"
#include "sim.h"

/* DIR/timeline.svg: cells labelled "F3.17" (direction, stage, microbatch)
 * where the label fits, each with a <title> tooltip, coloured by
 * microbatch. Returns 0, or -1 if writing failed. */
int pp_timeline_svg(FILE *f, const pp_jobtable *t, const pp_sim_result *sim);
/* The same, its time axis labelled in `unit` ("s", "ms", "us", "ns": what
 * --costs' times are in), or in schedule time units when NULL. */
int pp_timeline_svg_unit(FILE *f, const pp_jobtable *t, const pp_sim_result *sim, const char *unit);
/* DIR/trace.json (Chrome trace event format): a track per worker with a
 * slice per job, and a slice per transfer on the receiving worker's
 * transfer track. Timestamps are microseconds: `unit` is what the times are
 * in ("s", "ms", "us", "ns": pp_costs.unit of --costs), or NULL for the
 * schedule's unitless costs, shown as 1 ms a unit. The file's "otherData"
 * says which. The transfers are written ordered by start (then job).
 * Returns 0, or -1 if writing failed or memory ran out (errno ENOMEM). */
int pp_timeline_trace(FILE *f, const pp_jobtable *t, const pp_sim_result *sim,
                      const pp_transfer *xfer, int nxfer, const char *unit);
/* The diagram in text, at most `width` columns wide (widths under about
 * 10 cannot hold a row's "wN |" and are exceeded); for report.txt,
 * terminals and code review. It never squashes time: the first of these
 * that fits in a few bands (the rows again for the next stretch of time,
 * under the one before) is drawn: labelled cells, the shortest job getting
 * "F3 "; a column per grain, the widest column that splits no job; time
 * scaled by a round factor, where a column shared by jobs says so ('f',
 * '*', ':') rather than showing one of them. A first line states the scale
 * unless it is one band of labelled cells. compiler/README.md has the
 * details. Deterministic. */
void pp_timeline_ascii(FILE *f, const pp_jobtable *t, const pp_sim_result *sim, int width);

#endif
