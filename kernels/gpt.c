/* gpt.c - GPT-2's pipeline stages on the CPU (pp_model_gpt, see model.h).
 * Not written yet: the table exists so the model interface links; the
 * compiler refuses `model gpt` until this file implements it. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>

static size_t gpt_unwritten(const pp_model *m, int S, int s) {
    (void)m, (void)S, (void)s;
    fprintf(stderr, "pp: the gpt model is not implemented yet\n");
    abort();
}

const pp_model_impl pp_model_gpt = {.name = "gpt", .param_count = gpt_unwritten};
