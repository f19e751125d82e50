/* auto_layers.h - `layers = auto(L)`: the compiler splits a model's L
 * layers over its S stages to minimise the simulated step under
 * --mem-limit (auto_layers.c). */
#ifndef PP_AUTO_LAYERS_H
#define PP_AUTO_LAYERS_H

#include <stdint.h>

#include "costs.h"
#include "diag.h"
#include "lower.h"
#include "schedule.h"

typedef struct {
    uint32_t *even;   /* [S] the even split (the remainder on the middle stages) */
    double step;      /* the chosen split's simulated step (makespan) */
    double even_step; /* the even split's */
    uint64_t mem;     /* with --mem-limit: the chosen split's worst worker's bytes */
    int evaluated;    /* splits simulated */
    int fits;         /* with --mem-limit: 1 when the chosen split fits it */
} pp_auto_choice;

/* Chooses sch->model.layers (which holds the even split on entry) for
 * sch->auto_layers layers: from the even split, moves one layer at a time
 * between two stages while the simulated step (or, while over --mem-limit,
 * the worst worker's memory) falls. Costs as the compile's: the schedule's
 * cost lines or --costs (measured) per layer, times a stage's layers, else
 * each stage's FLOPs (the head's and, on stage 0, nothing for the
 * embedding's lookup). Candidates are simulated with their diagnostics
 * discarded: the compile that follows reports on the chosen one. Returns 0,
 * or -1 out of memory (said on d). */
int pp_auto_layers(pp_schedule *sch, const pp_costs *measured, const pp_lower_opts *lo, pp_diag *d,
                   pp_auto_choice *choice);
void pp_auto_choice_free(pp_auto_choice *choice);

/* "auto(16): 3,5,5,3, predicted step 21.4; the even split 4,4,4,4: 25.3
 * (chosen 15.4% shorter)", the counts elided after 32 stages; NULL out of
 * memory. The caller frees it. */
char *pp_auto_describe(const pp_schedule *sch, const pp_auto_choice *choice);

#endif
