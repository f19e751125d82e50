/* schedule.h - a checked schedule: the parsed file with every name resolved,
 * params bound (defaults or -D), and the three functions ready to evaluate.
 *
 * Names: S, B and W (stages, microbatches, workers) must be params. Inside
 * functions and lets the job variables s, b, d are visible; w (the worker)
 * only in `limit inflight`. F, B, W are also the direction literals 0, 1, 2:
 * (R = 3, a re-run forward, see `recompute`)
 * a bare F/B/W means the direction unless a param or let of that name exists,
 * and on either side of == or != opposite d it always means the direction, so
 * `d == B` reads as "the job is a backward" while `b < B` uses the count. */
#ifndef PP_SCHEDULE_H
#define PP_SCHEDULE_H

#include "../isa/model_desc.h"
#include "ast.h"
#include "diag.h"
#include "names.h"

enum { DIR_F = 0, DIR_B = 1, DIR_W = 2, DIR_R = 3 };

typedef struct {
    char *name;
    long long value;
    pp_loc loc;
} pp_param;

typedef struct {
    char *name;
    pp_expr *expr;
    pp_loc loc;
    int uses_job; /* expr (or a let it uses) mentions s, b or d */
    int depth;    /* how deep evaluating it recurses, counting the lets it uses */
    int broken;   /* its expr, or a let it uses, had errors (reported): never evaluated */
} pp_let;

/* pp_eval's memo of let values: within one top-level pp_eval call the job is
 * fixed, so each let is evaluated at most once; a chain of lets that each use
 * the previous one twice then costs linear, not exponential, time. */
typedef struct {
    unsigned long long gen; /* the call the entry belongs to */
    int status;             /* pp_eval_status */
    long long value;
    const pp_expr *where;
} pp_let_memo;

typedef struct {
    unsigned long long gen; /* bumped by every pp_eval call */
    pp_let_memo *let;       /* [nlets] */
} pp_eval_memo;

typedef struct {
    const char *name;
    long long value;
} pp_define;

typedef struct {
    pp_diag *diag;
    pp_stmt *stmts;
    pp_param *params;
    int nparams;
    pp_let *lets;
    int nlets;
    pp_expr *fn[FN_COUNT]; /* compute, weights, priority; weights/priority may be NULL */
    pp_loc fn_loc[FN_COUNT];
    int strict; /* order strict */
    int split;  /* split backward: jobs have d in {F, B, W} */
    /* split backward when expr (over s, b, params and lets; not d): the
     * (s,b) whose backward is split; NULL with split = every backward */
    pp_expr *split_when;
    pp_expr *inflight; /* limit inflight = expr (may use w), or NULL */
    /* cost F/B/W (may use s; NULL = 1); cost latency and bandwidth (params
     * only; NULL = 0: transfers take no time, the seed's assumption) */
    pp_expr *cost[COST_COUNT];
    /* overlap F with B when expr (or NULL): in a worker's strict order, a
     * forward and the backward next to it (either first) run as one pair
     * when expr, evaluated at the forward's (s, b, d = F), is non-zero, and
     * their microbatches differ. Strict order only. `cost overlap = P`
     * (cost[COST_OVERLAP], params only, 0..100, default 100) is the percent
     * of the shorter job the pair still pays: it takes
     * max(tF, tB) + P/100 * min(tF, tB). */
    pp_expr *overlap;
    pp_loc overlap_loc;
    /* `overlap F then B when expr`: a pairable forward pairs only with the
     * backward right after it, never with the one before (PyTorch's
     * OVERLAP_F_B pairs, written forward first) */
    int overlap_then;
    /* `recompute [when expr]` (expr over s, b, params and lets; not d):
     * recompute = 1 and recompute_when the condition (NULL: every (s,b)).
     * F(s,b) then keeps only its input and R(s,b), on B(s,b)'s worker,
     * rebuilds the stash before B(s,b) (jobs.h). priority_r: the priority
     * mentions the direction R, so it is evaluated at d = R; otherwise
     * R(s,b) takes B(s,b)'s priority and runs right before it. */
    int recompute;
    pp_expr *recompute_when;
    /* `offload [when expr]` (the same scope): offload = 1 and offload_when
     * the condition (NULL: every (s,b)). F(s,b)'s stash moves to host memory
     * after F and comes back before B(s,b), on the worker's host-copy lane
     * (sim.h); never together with recompute at one (s,b). */
    int offload;
    pp_expr *offload_when;
    int priority_r;
    long long S, B, W;
    /* `tensor = expr` (params only) or NULL; its value lands in model.tensor */
    pp_expr *tensor_expr;
    pp_model model;       /* model.layers: [S] when layers_expr is set, else NULL; owned */
    pp_expr *layers_expr; /* a model's `layers` (or `blocks`) that uses s, or NULL */
    /* Set by the compile driver for --layers (compile.h): costs are those of
     * one block, scaled by each stage's blocks (jobtable.c). 0 = as today. */
    int per_block;
    /* `layers = auto(L)`: L layers in all, which the compile driver splits
     * over the stages (compiler/auto_layers.c); 0 = none. auto_loc: the
     * call, for messages. */
    long long auto_layers;
    pp_loc auto_loc;
    int auto_flag; /* auto_layers came from --layers auto(L), not the model block */
    pp_eval_memo *memo; /* owned; NULL evaluates lets without a memo */
    /* name -> index into params / lets, and name -> 1 (param) | 2 (let) for
     * every definition in the file, earlier or later (owned; names.h) */
    pp_names param_ix, let_ix, stmt_ix;
    /* the checker's visit marks over lets and params, and their current
     * generation (owned; schedule.c) */
    unsigned *let_mark, *param_mark, *mark_gen;
    /* the memo generation of the last constant evaluation (schedule.c) */
    unsigned long long const_gen;
    /* `/` must divide exactly (else EVAL_INEXACT): a search line's values */
    int exact_div;
    int consts_cap; /* pp_consts_init's room for params */
} pp_schedule;

/* Resolve names, bind params (applying -D defines, each of which must name a
 * param), evaluate constants and the model block. Reports every error through
 * d; returns the number of errors (0 = usable). */
int pp_schedule_check(pp_schedule *sch, pp_diag *d, pp_stmt *stmts, const pp_define *defs,
                      int ndefs);
void pp_schedule_free(pp_schedule *sch);

/* ==== Constant expressions outside a file ====================================
 * A `# search:` line's values (search.c) are expressions of the same
 * language over names bound one at a time: W and B, then the line's own
 * names. They are resolved by the rules (and with the messages) of a
 * param's default, over a schedule that holds only those names as params,
 * and evaluated by pp_eval. Free it with pp_schedule_free. */

/* An empty schedule for up to cap params, reporting through d. Returns 0,
 * or -1 out of memory (reported). */
int pp_consts_init(pp_schedule *sch, pp_diag *d, int cap);
/* Announces a name that a later pp_consts_define defines, so that using it
 * before is "used before it is defined", not "unknown". 0, or -1 out of
 * memory (reported). name is borrowed: it must outlive sch. */
int pp_consts_declare(pp_schedule *sch, const char *name);
/* Defines the next param, name (borrowed) at loc, value 0: set
 * sch->params[i].value before evaluating. Returns its index i, or -1 after
 * an error reported through d (a redefinition, a job variable's name, more
 * than cap, out of memory). */
int pp_consts_define(pp_schedule *sch, const char *name, pp_loc loc);
/* Resolves e's names against the params defined so far, as a param's
 * default is; what names the place in messages ("a search line").
 * Returns the number of errors reported (0: e can be evaluated). */
int pp_consts_resolve(pp_schedule *sch, pp_expr *e, const char *what);

/* Evaluation of a checked expression for one job. */
typedef struct {
    long long s, b, d, w;
} pp_env;

typedef enum {
    EVAL_OK = 0,
    EVAL_DIV0,
    EVAL_OVERFLOW,
    EVAL_INEXACT, /* only with sch->exact_div: a '/' that is not exact (or by zero) */
} pp_eval_status;

/* On error, *where is the node that failed (for the caret). */
pp_eval_status pp_eval(const pp_schedule *sch, const pp_expr *e, const pp_env *env, long long *out,
                       const pp_expr **where);
/* Another expression at the env of the previous pp_eval call (the same
 * job): the lets that call evaluated are not evaluated again, so a job's
 * compute, weights, priority and cost share them. */
pp_eval_status pp_eval_same_env(const pp_schedule *sch, const pp_expr *e, const pp_env *env,
                                long long *out, const pp_expr **where);

#endif
