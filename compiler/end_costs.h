/* end_costs.h - the embedding's and the head's share of a stage's work, in
 * layers: what `layers = auto(L)` and --layers add to a --costs time, which
 * is one layer's, so that measured costs count the ends as the
 * FLOPs-proportional costs do (compiler/README.md, "Layers"). */
#ifndef PP_END_COSTS_H
#define PP_END_COSTS_H

#include "schedule.h"

/* ends[k][s], k = 0 forward, 1 backward: the FLOPs of stage s beyond its
 * layers (stage 0's embedding, the last stage's final norm and head), over
 * one layer's FLOPs in that direction; 0 for a model without ends (mlp).
 * ends[k] is malloc'd (S entries). 0, or -1 out of memory. */
int pp_end_costs(const pp_schedule *sch, double *ends[2]);

#endif
