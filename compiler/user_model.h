/* user_model.h - the user's model for `ppc --search FILE` and `ppc
 * SCHEDULE --model FILE`: the model block (and its optimizer, precision,
 * tensor and tie) of a .pp file, taken in place of a schedule's own.
 *
 * FILE is a .pp file with a `model` block; it may be a whole schedule or
 * nothing but the block (with the params it uses, and `optimizer`,
 * `precision`, `tensor` lines). Its `blocks` (mlp) or `layers` (gpt,
 * llama), or the L of `layers = auto(L)`, count the whole model's: each
 * schedule it is compiled with gets L/S on each of its S stages (what
 * --layers L does; --layers, given too, counts instead). A count that
 * depends on s is refused: it would describe one schedule's stages. */
#ifndef PP_USER_MODEL_H
#define PP_USER_MODEL_H

#include <stdio.h>

#include "../isa/model_desc.h"

typedef struct pp_user_model_s {
    pp_model model;  /* layers NULL; blocks = total (as read, before any split) */
    long long total; /* blocks (mlp) or layers in the whole model, >= 1 */
    long long B;     /* the file's `param B` (microbatches), 0 when it has none */
    int tensor;      /* its `tensor` line's T, 0 when it has none */
    int optimizer;   /* its `optimizer` line's pp_optimizer, -1 when none */
    int precision;   /* its `precision` line's pp_precision, -1 when none */
} pp_user_model;

/* Reads and checks FILE's model. 0, or -1 with what is wrong printed to
 * err (FILE:LINE:COL and a caret for an error in the file; "FILE: error:"
 * for a file without a model block); 1 when out of memory or unreadable
 * (said too). */
int pp_user_model_load(const char *path, pp_user_model *um, FILE *err);

/* The model a schedule compiled with um trains: um's, on sch's stages
 * (blocks = what the caller splits; layers NULL), keeping the schedule's
 * tensor degree (--tensor then decides). Inline: compile.c uses it, and
 * this file's loader uses compile.c (no cycle between the two files). */
static inline pp_model pp_user_model_apply(const pp_user_model *um, const pp_model *schedule_model)
{
    pp_model m = um->model;
    m.layers = NULL;
    m.tensor = schedule_model->tensor;
    return m;
}

#endif
