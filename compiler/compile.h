/* compile.h - the compile driver: the one place where ppc's steps are
 * sequenced.
 *
 *   read -> parse -> (--costs) -> check -> job table -> simulate
 *        -> keep weights -> report -> lower -> VERIFY -> plans
 *
 * ppc, ppc --table, --keep-weights' bisection, the tests and the benches all
 * compile through here, so every plan any of them produces has passed the
 * plan verification in pp_compile_plans (plans.h; today: pp_plan_validate on every
 * rank and the communication checker, isa/commcheck.h).
 *
 * Diagnostics go through the diag machinery (diag.h) of the result, to
 * opts->diag_out (stderr by default) or, with opts->capture, into
 * result->msgs. A status other than PP_COMPILE_OK always comes with at least
 * one error printed. No function here exits: the caller turns the status
 * into an exit code (ppc.c). */
#ifndef PP_COMPILE_H
#define PP_COMPILE_H

#include <stdint.h>
#include <stdio.h>

#include "../isa/plan.h"
#include "auto_layers.h"
#include "costs.h"
#include "diag.h"
#include "jobtable.h"
#include "keep.h"
#include "lower.h"
#include "plans.h"
#include "report.h"
#include "schedule.h"
#include "sim.h"

/* How far a compile goes (pp_compile_opts.stop_after); the result says how
 * far it got (pp_compiled.reached). Each stage includes those before it. */
typedef enum {
    PP_STAGE_NONE = 0,
    PP_STAGE_PARSE,    /* stmts */
    PP_STAGE_CHECK,    /* sch, with --optimizer / --precision applied */
    PP_STAGE_JOBS,     /* costs, t: every function evaluated at every job */
    PP_STAGE_SIMULATE, /* sim (deadlock-free) */
    PP_STAGE_REPORT,   /* --keep-weights chosen (t.kept, sim replayed), rep */
    PP_STAGE_PLANS,    /* plans lowered and verified; rep's mem_bytes filled */
    PP_STAGE_COUNT
} pp_stage;

typedef struct {
    /* The source: text[0..len) when text is not NULL, else the file at path.
     * path names the schedule in messages either way ("<text>" if NULL). */
    const char *path;
    const char *text;
    size_t len;
    const pp_define *defs; /* -D NAME=VALUE */
    int ndefs;
    const char *costs;  /* --costs FILE, or NULL for the schedule's cost lines */
    int optimizer;      /* a pp_optimizer, or -1 for the schedule's line */
    int precision;      /* a pp_precision, or -1 for the schedule's line */
    int tensor;         /* --tensor T (1..64), or 0 for the schedule's `tensor` line */
    int prefetch;       /* --prefetch N */
    uint64_t mem_limit; /* --mem-limit BYTES, 0 = none */
    int keep_weights;   /* --keep-weights */
    /* --layers L: the model has L blocks (mlp) or layers (gpt) in total,
     * L/S on every stage whatever the model block says (S must divide L),
     * and job costs are per block, scaled by the stage's blocks
     * (pp_schedule.per_block). 0 = the model block as written. */
    long long layers;
    /* --layers auto(L) (layers_auto 1): the L layers split as `layers =
     * auto(L)` would split them (costs per layer, as --layers), in place of
     * the model block's. auto_mem_limit: a --mem-limit the split honours
     * without the compile checking it (ppc --search's candidates, which it
     * judges "over" itself); 0 = mem_limit's. */
    int layers_auto;
    uint64_t auto_mem_limit;
    /* --recompute EXPR: the schedule as if it ended with a line
     * `recompute when EXPR` (issue 26; what --search's recompute rows
     * reproduce with); NULL = as written. A file with its own `recompute`
     * then has it twice: an error. */
    const char *recompute;
    /* --offload EXPR: likewise a line `offload when EXPR` (after any
     * --recompute line); NULL = as written. */
    const char *offload;
    /* --model FILE / --search FILE (user_model.h): the user's model in
     * place of the schedule's model block, its optimizer and precision
     * lines too (--optimizer and --precision still win); its whole-model
     * count split L/S a stage as --layers L (which, given, counts
     * instead). NULL = the schedule's own. */
    const struct pp_user_model_s *model;
    const char *model_path; /* its file, for messages */
    pp_stage stop_after; /* PP_STAGE_PLANS (everything) unless less is wanted */
    /* Bounds for callers that must stay small (the fuzzer): more jobs or
     * workers than this is an error after the check. 0 = no bound. */
    long long max_jobs;
    long long max_workers;
    FILE *diag_out; /* where diagnostics go; NULL = stderr */
    int capture;    /* instead, collect them in the result's msgs */
} pp_compile_opts;

/* ppc's defaults: everything, prefetch 1, the schedule's optimizer and
 * precision, no limit, diagnostics to stderr. */
pp_compile_opts pp_compile_defaults(void);

/* Everything one compile made, as far as it got. Free with pp_compiled_free
 * whatever the status. */
typedef struct {
    pp_compile_status status;
    pp_stage reached; /* the last stage completed */
    char *name;       /* opts.path (copied), what messages call the schedule */
    char *src;        /* the source text (owned) */
    size_t len;
    pp_diag diag; /* errors counted in diag.errors (and in errors below) */
    char *msgs;   /* with opts.capture: every diagnostic printed, NUL-terminated */
    size_t msglen;
    FILE *msgf;
    pp_stmt *stmts;
    pp_schedule sch;
    pp_costs costs; /* --costs, as loaded */
    pp_jobtable t;
    pp_sim_result sim; /* on a deadlock: sim.blocked says where */
    /* with overlapped pairs run in turn (sim.h, overlap 1): the simulation
     * with each pair as one unit, which lowering orders by (its receives
     * before the pair's one start), while sim prices the run; else zero */
    pp_sim_result by_pair;
    int errors;                     /* diag.errors when pp_compile returned */
    int deadlock;                   /* the simulation deadlocked */
    pp_keep_choice keep;            /* with keep_weights: the window chosen */
    char keep_note[160];            /* with keep_weights: what report.txt says about it, else "" */
    pp_report rep;                  /* from PP_STAGE_REPORT on, even when lowering then fails */
    pp_plan *plans;                 /* [t.W] from PP_STAGE_PLANS on, else NULL */
    double seconds[PP_STAGE_COUNT]; /* wall time spent in each stage (the benches print it) */
    pp_auto_choice autoc;           /* `layers = auto(L)`: the split chosen (sch.model.layers) */
} pp_compiled;

/* Compiles as far as opts->stop_after; returns (and sets c->status)
 * PP_COMPILE_OK or why it stopped, with the errors printed. c must stay
 * where it is until pp_compiled_free (c->sch refers to c->diag). */
pp_compile_status pp_compile(const pp_compile_opts *opts, pp_compiled *c);
void pp_compiled_free(pp_compiled *c);

/* The simulation lowering orders c's plans by: by_pair where there is one,
 * else sim. */
const pp_sim_result *pp_compiled_order(const pp_compiled *c);

#endif
