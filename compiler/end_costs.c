/* end_costs.c - the ends' work in layers (end_costs.h): a stage's FLOPs
 * less its layers', over one layer's, from isa/model_shape.c's counts. */
#include "end_costs.h"

#include <stdlib.h>

#include "../isa/model_shape.h"

int pp_end_costs(const pp_schedule *sch, double *ends[2])
{
    pp_model whole = sch->model; /* the whole model's (tensor = T divides both alike) */
    whole.tensor = 1;
    int S = (int)sch->S;
    /* one layer: a one-layer and a no-layer stage 0 differ by it alone */
    pp_model one = whole, none = whole;
    one.layers = none.layers = NULL;
    one.blocks = 1;
    none.blocks = 0;
    ends[0] = ends[1] = NULL;
    for (int k = 0; k < 2; k++) {
        if (!(ends[k] = malloc((size_t)S * sizeof *ends[k]))) {
            free(ends[0]);
            ends[0] = NULL;
            return -1;
        }
        double layer = pp_stage_flops(&one, S, 0, k) - pp_stage_flops(&none, S, 0, k);
        for (int s = 0; s < S; s++) {
            double beyond =
                pp_stage_flops(&whole, S, s, k) - (double)pp_model_layers(&whole, s) * layer;
            /* (rounding of equal sums may leave a hair below 0) */
            ends[k][s] = layer > 0 && beyond > 1e-9 * layer ? beyond / layer : 0.0;
        }
    }
    return 0;
}
