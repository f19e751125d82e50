/* auto_layers.c - `layers = auto(L)` (auto_layers.h): a local search over
 * the ways to split L layers over S stages, each candidate priced by the
 * same job table and simulator as the compile itself, so the step it
 * minimises is the step the report predicts. Memory, when --mem-limit is
 * given, is what the lowered plans allocate (pp_plan_memory), as
 * --keep-weights measures it. */
#include "auto_layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobtable.h"
#include "plans.h"
#include "replay.h"
#include "sim.h"

/* At most this many candidates simulated: S (S - 1) neighbours a round. */
#define AUTO_MAX_EVALS 4000

typedef struct {
    double step;   /* INFINITY: deadlocked or refused */
    uint64_t mem;  /* the worst worker's bytes (with a limit), else 0 */
    double spread; /* the sum of squared layer counts: among equal steps the evener split,
                      whose stages off the critical path hold fewer activations */
} score;

/* Prices the split in sch->model.layers. Diagnostics go to a scratch diag
 * (the same schedule errors would repeat for every candidate). */
static int evaluate(pp_schedule *sch, const pp_costs *measured, const pp_lower_opts *lo, score *out)
{
    pp_diag *keep = sch->diag, scratch;
    char *buf = NULL;
    size_t len = 0;
    FILE *sink = open_memstream(&buf, &len);
    if (!sink)
        return -1;
    diag_init(&scratch, keep->file, keep->src, keep->len, sink);
    sch->diag = &scratch;
    pp_jobtable t;
    pp_sim_result sim = {0};
    pp_plan *plans = NULL;
    int rc = 0;
    out->step = INFINITY;
    out->mem = 0;
    out->spread = 0;
    for (long long s = 0; s < sch->S; s++)
        out->spread += (double)sch->model.layers[s] * sch->model.layers[s];
    if (pp_jobtable_build(&t, sch, measured) == 0 && !scratch.errors) {
        pp_sim_input in = pp_jobtable_sim_input(&t, sch->strict);
        in.reload_ahead = lo->prefetch; /* where lowering puts the Reloads */
        int srun = pp_simulate(&in, &sim);
        if (srun < 0)
            rc = -1;
        else if (srun == 0)
            out->step = sim.makespan;
        if (srun == 0 && pp_pairs_in_turn(&t, &sim)) { /* priced as compile.c prices it */
            pp_sim_result run = {0};
            if (pp_sim_replay(&t, &sim, 1, &run))
                rc = -1;
            else
                out->step = run.makespan;
            pp_sim_free(&run);
        }
        if (srun == 0 && lo->mem_limit) {
            pp_lower_opts nolimit = {lo->prefetch, 0};
            if (pp_compile_plans(&t, &sim, &sch->model, &nolimit, &scratch, &plans) ==
                PP_COMPILE_OK) {
                for (int w = 0; w < t.W; w++)
                    if (pp_plan_memory(&plans[w]) > out->mem)
                        out->mem = pp_plan_memory(&plans[w]);
            } else {
                out->step = INFINITY;
            }
            pp_plans_free(plans, t.W);
        }
    } else if (scratch.nomem) {
        rc = -1;
    }
    pp_sim_free(&sim);
    pp_jobtable_free(&t);
    sch->diag = keep;
    fclose(sink);
    free(buf);
    return rc;
}

/* Over the limit, less memory is better; under it (or without one), a
 * shorter step, by more than rounding, and at the same step the evener
 * split (the step is often one stage's: the others then tie). */
static int better(const score *a, const score *b, uint64_t limit)
{
    int afit = !limit || a->mem <= limit, bfit = !limit || b->mem <= limit;
    if (afit != bfit)
        return afit;
    if (!afit)
        return a->mem < b->mem;
    if (a->step < b->step * (1.0 - 1e-9))
        return 1;
    return a->step <= b->step * (1.0 + 1e-9) && a->spread < b->spread;
}

int pp_auto_layers(pp_schedule *sch, const pp_costs *measured, const pp_lower_opts *lo, pp_diag *d,
                   pp_auto_choice *choice)
{
    int S = (int)sch->S;
    uint32_t *cur = sch->model.layers;
    memset(choice, 0, sizeof *choice);
    if (!(choice->even = malloc((size_t)S * sizeof *choice->even)))
        goto oom;
    memcpy(choice->even, cur, (size_t)S * sizeof *cur);
    score best;
    if (evaluate(sch, measured, lo, &best))
        goto oom;
    choice->evaluated = 1;
    choice->even_step = best.step;
    for (;;) { /* best improvement among single moves, until none improves */
        int bi = -1, bj = -1;
        score top = best;
        for (int i = 0; i < S && choice->evaluated < AUTO_MAX_EVALS; i++) {
            if (cur[i] == 0)
                continue;
            for (int j = 0; j < S && choice->evaluated < AUTO_MAX_EVALS; j++) {
                if (j == i || cur[j] >= PP_MAX_LAYERS)
                    continue;
                cur[i]--, cur[j]++;
                score sc;
                int rc = evaluate(sch, measured, lo, &sc);
                cur[i]++, cur[j]--;
                if (rc)
                    goto oom;
                choice->evaluated++;
                if (better(&sc, &top, lo->mem_limit))
                    top = sc, bi = i, bj = j;
            }
        }
        if (bi < 0)
            break;
        cur[bi]--, cur[bj]++;
        best = top;
    }
    choice->step = best.step;
    choice->mem = best.mem;
    choice->fits = !lo->mem_limit || best.mem <= lo->mem_limit;
    return 0;
oom:
    diag_nomem(d, "while choosing the split of auto(%lld)", sch->auto_layers);
    return -1;
}

void pp_auto_choice_free(pp_auto_choice *choice)
{
    free(choice->even);
    memset(choice, 0, sizeof *choice);
}

static void counts(FILE *f, const uint32_t *n, int S)
{
    for (int s = 0; s < S && s < 32; s++)
        fprintf(f, "%s%u", s ? "," : "", n[s]);
    if (S > 32)
        fprintf(f, ",... (%d stages)", S);
}

char *pp_auto_describe(const pp_schedule *sch, const pp_auto_choice *choice)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    int S = (int)sch->S;
    fprintf(f, "auto(%lld): ", sch->auto_layers);
    counts(f, sch->model.layers, S);
    fprintf(f, ", predicted step %g; the even split ", choice->step);
    counts(f, choice->even, S);
    fprintf(f, ": %g", choice->even_step);
    if (isfinite(choice->even_step) && choice->even_step > 0)
        fprintf(f, " (chosen %.1f%% shorter)", 100.0 * (1.0 - choice->step / choice->even_step));
    fprintf(f, "; %d splits simulated", choice->evaluated);
    if (!choice->fits)
        fputs("; none fits --mem-limit", f);
    fclose(f);
    return buf;
}
