/* schedule.c - checking a parsed schedule: names, params, -D overrides, the
 * model block. Every problem is reported (with file:line:col and a caret)
 * before giving up, so one run shows all of a file's errors. */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

/* What an expression may refer to, by where it appears. */
typedef struct {
    int nparams;      /* params defined before it */
    int nlets;        /* lets defined before it */
    int job;          /* s, b, d visible */
    int worker;       /* w visible */
    const char *what; /* "a param", "the model block"... for messages */
    int stage;        /* s alone visible (a model's per-stage layer count) */
    int lets;         /* lets visible without s, b, d (a requirement) */
} scope;

/* Params and lets are entered in order under names no earlier one has
 * (a redefinition is an error and enters nothing), so index i was defined
 * before the first `limit` exactly when i < limit. */
static int find_param(const pp_schedule *sch, const char *name, int limit)
{
    int i = pp_names_get(&sch->param_ix, name);
    return i < limit ? i : -1;
}

static int find_let(const pp_schedule *sch, const char *name, int limit)
{
    int i = pp_names_get(&sch->let_ix, name);
    return i < limit ? i : -1;
}

/* Enters the name of params[i] or lets[i] into its index: 0, or -1 (and
 * reported) out of memory. */
static int index_name(pp_schedule *sch, pp_names *ix, const char *name, int i)
{
    if (pp_names_at(ix, name, i))
        return 0;
    diag_nomem(sch->diag, "while checking the schedule");
    return -1;
}

static int dir_literal(const char *name)
{
    if (!strcmp(name, "F"))
        return DIR_F;
    if (!strcmp(name, "B"))
        return DIR_B;
    if (!strcmp(name, "W"))
        return DIR_W;
    if (!strcmp(name, "R"))
        return DIR_R;
    return -1;
}

static int is_job_var(const char *name)
{
    return !strcmp(name, "s") || !strcmp(name, "b") || !strcmp(name, "d") || !strcmp(name, "w");
}

static void resolve(pp_schedule *sch, pp_expr *e, const scope *sc);
static int uses_broken_let(const pp_schedule *sch, const pp_expr *e);

/* Is `name` a param (or, where lets are visible, a let) defined anywhere in
 * the file? Params and lets are entered into sch->params/lets in order, so a
 * later definition is only found in the statement list. */
static int defined_later(const pp_schedule *sch, const char *name, const scope *sc)
{
    int lets_visible = sc->job || sc->worker || sc->lets;
    int kinds = pp_names_get(&sch->stmt_ix, name);
    return kinds > 0 && ((kinds & 1) || ((kinds & 2) && lets_visible));
}

static void resolve_name(pp_schedule *sch, pp_expr *e, const scope *sc)
{
    const char *n = e->name;
    int i;
    if (is_job_var(n)) {
        int ok = n[0] == 'w' ? sc->worker : sc->job || (sc->stage && n[0] == 's');
        if (!ok) {
            if (sc->stage)
                diag_error(sch->diag, e->loc, "'%s' cannot be used in %s: only s (the stage) can",
                           n, sc->what);
            else if (n[0] == 'w')
                diag_error(sch->diag, e->loc,
                           "'w' (the worker) is only defined in 'limit inflight'");
            else
                diag_error(sch->diag, e->loc, "'%s' is a job variable and cannot be used in %s", n,
                           sc->what);
            return;
        }
        e->kind = EX_VAR;
        e->var = n[0];
    } else if ((i = find_let(sch, n, sc->nlets)) >= 0) {
        e->kind = EX_LET;
        e->index = i;
    } else if ((i = find_param(sch, n, sc->nparams)) >= 0) {
        e->kind = EX_PARAM;
        e->index = i;
    } else if ((i = dir_literal(n)) >= 0) {
        e->kind = EX_DIR;
        e->value = i;
    } else {
        if (defined_later(sch, n, sc))
            diag_error(sch->diag, e->loc, "'%s' is used before it is defined", n);
        else
            diag_error(sch->diag, e->loc, "unknown name '%s'", n);
        return;
    }
    free(e->name);
    e->name = NULL;
}

/* Opposite d in == or !=, F/B/W are always the directions. */
static void dir_compare(pp_expr *e)
{
    pp_expr *sides[2] = {e->a, e->b};
    for (int i = 0; i < 2; i++) {
        pp_expr *x = sides[i], *y = sides[1 - i];
        if (x->kind == EX_NAME && !strcmp(x->name, "d") && y->kind == EX_NAME &&
            dir_literal(y->name) >= 0) {
            y->kind = EX_DIR;
            y->value = dir_literal(y->name);
            free(y->name);
            y->name = NULL;
        }
    }
}

static void resolve(pp_schedule *sch, pp_expr *e, const scope *sc)
{
    if (!e)
        return;
    switch (e->kind) {
    case EX_NAME:
        resolve_name(sch, e, sc);
        return;
    case EX_BINARY:
        if (e->op == OP_EQ || e->op == OP_NE)
            dir_compare(e);
        break;
    case EX_CALL: {
        int want = !strcmp(e->name, "abs")                                ? 1
                   : (!strcmp(e->name, "min") || !strcmp(e->name, "max")) ? 2
                                                                          : 0;
        if (!want)
            diag_error(sch->diag, e->loc, "unknown function '%s' (functions are min, max, abs)",
                       e->name);
        else if (want != e->nargs)
            diag_error(sch->diag, e->loc, "'%s' takes %d argument%s, found %d", e->name, want,
                       want == 1 ? "" : "s", e->nargs);
        break;
    }
    default:
        break;
    }
    resolve(sch, e->a, sc);
    resolve(sch, e->b, sc);
    resolve(sch, e->c, sc);
}

/* Evaluate an expression that has no job variables (params, model fields). */
/* Consecutive constant evaluations (params are final by the time lets
 * are evaluated, and every one runs at the same env) share the lets'
 * values: when nothing was evaluated since the previous one, the memo still
 * holds that env's, so requirements over one long let chain evaluate it
 * once, not once each. */
static int eval_const(pp_schedule *sch, pp_expr *e, long long *out)
{
    pp_env env = {0, 0, 0, 0};
    const pp_expr *where = e;
    int again = sch->memo && sch->const_gen && sch->memo->gen == sch->const_gen;
    pp_eval_status st =
        again ? pp_eval_same_env(sch, e, &env, out, &where) : pp_eval(sch, e, &env, out, &where);
    if (sch->memo)
        sch->const_gen = sch->memo->gen;
    if (st == EVAL_DIV0)
        diag_error(sch->diag, where->loc, "division by zero");
    else if (st)
        diag_error(sch->diag, where->loc, "integer overflow");
    return st == EVAL_OK;
}

/* Does e (or a let it uses) mention a job variable? */
static int uses_job(const pp_schedule *sch, const pp_expr *e)
{
    if (!e)
        return 0;
    if (e->kind == EX_VAR)
        return e->var != 'w';
    if (e->kind == EX_LET)
        return sch->lets[e->index].uses_job; /* not its expr: lets of lets would be exponential */
    return uses_job(sch, e->a) || uses_job(sch, e->b) || uses_job(sch, e->c);
}

/* How deep pp_eval recurses on e: its tree depth, where using a let counts
 * as the let's own depth. The parser bounds every tree's depth, but a chain
 * of lets could still add up to more than the C stack holds. */
static int eval_depth(const pp_schedule *sch, const pp_expr *e)
{
    if (!e)
        return 0;
    if (e->kind == EX_LET)
        return 1 + sch->lets[e->index].depth;
    int a = eval_depth(sch, e->a), b = eval_depth(sch, e->b), c = eval_depth(sch, e->c);
    int m = a > b ? a : b;
    return 1 + (m > c ? m : c);
}

/* Reports an expression whose evaluation would recurse more than
 * PP_MAX_EXPR_DEPTH levels; returns its depth, or 1 after an error (so the
 * lets that use a too-deep let do not report it again). */
static int check_depth(pp_schedule *sch, const pp_expr *e)
{
    int depth = eval_depth(sch, e);
    if (depth <= PP_MAX_EXPR_DEPTH)
        return depth;
    diag_error(sch->diag, e->loc,
               "this expression, with the lets it uses, is nested more than %d levels deep",
               PP_MAX_EXPR_DEPTH);
    return 1;
}

static void define_param(pp_schedule *sch, pp_stmt *st)
{
    int prev = find_param(sch, st->name, sch->nparams);
    if (prev >= 0 || find_let(sch, st->name, sch->nlets) >= 0) {
        diag_error(sch->diag, st->name_loc, "redefinition of '%s'", st->name);
        if (prev >= 0)
            diag_note(sch->diag, sch->params[prev].loc, "'%s' was first defined here", st->name);
        return;
    }
    if (is_job_var(st->name)) {
        diag_error(sch->diag, st->name_loc, "'%s' is a job variable and cannot be redefined",
                   st->name);
        return;
    }
    scope sc = {sch->nparams, 0, 0, 0, "a param", 0, 0};
    int before = sch->diag->errors;
    resolve(sch, st->expr, &sc);
    if (index_name(sch, &sch->param_ix, st->name, sch->nparams))
        return;
    pp_param *p = &sch->params[sch->nparams++];
    p->name = st->name;
    p->loc = st->name_loc;
    /* A default with errors (already reported) leaves the placeholder 1, so
     * that `param W = <typo>` does not also report "W = 0 is out of range".
     * Any error counts, not only an unknown name: min(1) or foo(1) has no
     * second argument to evaluate. */
    long long v;
    p->value = sch->diag->errors == before && eval_const(sch, st->expr, &v) ? v : 1;
}

static void define_let(pp_schedule *sch, pp_stmt *st)
{
    if (find_param(sch, st->name, sch->nparams) >= 0 || find_let(sch, st->name, sch->nlets) >= 0) {
        diag_error(sch->diag, st->name_loc, "redefinition of '%s'", st->name);
        return;
    }
    if (is_job_var(st->name)) {
        diag_error(sch->diag, st->name_loc, "'%s' is a job variable and cannot be redefined",
                   st->name);
        return;
    }
    scope sc = {sch->nparams, sch->nlets, 1, 0, "a let", 0, 0};
    int before = sch->diag->errors;
    resolve(sch, st->expr, &sc);
    if (index_name(sch, &sch->let_ix, st->name, sch->nlets))
        return;
    pp_let *l = &sch->lets[sch->nlets++];
    l->broken = sch->diag->errors != before || uses_broken_let(sch, st->expr);
    l->name = st->name;
    l->expr = st->expr; /* if it has errors, nothing is evaluated: check failed */
    l->loc = st->name_loc;
    l->uses_job = uses_job(sch, st->expr);
    l->depth = check_depth(sch, st->expr);
}

/* ==== require and split backward when ====================================
 * Both take expressions that may not use everything a let may: a
 * requirement only params and lets of params, `split backward when` no d.
 * Lets are followed with visit marks (one per let), so a chain of lets
 * that use each other twice is walked once. */

/* Visit marks for the walks below: a let (param) is marked when its
 * entry holds the current generation, so starting a walk (new_walk) clears
 * every mark at once and a walk costs what it visits, not the number of
 * lets (a file of many requires and many lets stays linear). */
static void new_walk(const pp_schedule *sch) { ++*sch->mark_gen; }

/* 1 if let (or param) i was visited already in this walk; else marks it. */
static int visited(const pp_schedule *sch, unsigned *marks, int i)
{
    if (marks[i] == *sch->mark_gen)
        return 1;
    marks[i] = *sch->mark_gen;
    return 0;
}

/* The first use in e (or in a let it uses) of the job variable `var`, or,
 * with var 0, of any of s, b, d; NULL if none. *via is the let (of e itself)
 * through which it is used, or NULL for a direct use. */
static const pp_expr *find_var(const pp_schedule *sch, const pp_expr *e, int var,
                               const pp_expr **via)
{
    if (!e)
        return NULL;
    if (e->kind == EX_VAR && e->var != 'w' && (!var || e->var == var)) {
        *via = NULL;
        return e;
    }
    if (e->kind == EX_LET) {
        if (!sch->lets[e->index].uses_job || visited(sch, sch->let_mark, e->index))
            return NULL;
        const pp_expr *inner = NULL;
        if (!find_var(sch, sch->lets[e->index].expr, var, &inner))
            return NULL;
        *via = e;
        return e;
    }
    const pp_expr *r;
    if ((r = find_var(sch, e->a, var, via)) || (r = find_var(sch, e->b, var, via)))
        return r;
    return find_var(sch, e->c, var, via);
}

/* Does e use, directly or through other lets, a let whose own expression
 * had errors? Such a let still holds an unresolved name or a call with the
 * wrong arguments, which evaluation must never reach. */
static int uses_broken_let(const pp_schedule *sch, const pp_expr *e)
{
    if (!e)
        return 0;
    if (e->kind == EX_LET) /* its flag covers the lets it uses: no walk down the chain */
        return sch->lets[e->index].broken;
    return uses_broken_let(sch, e->a) || uses_broken_let(sch, e->b) || uses_broken_let(sch, e->c);
}

/* " with B=6, W=4": the params e uses, directly or through lets, in the
 * order they first appear; "" if none. */
static void params_used(const pp_schedule *sch, const pp_expr *e, char *buf, size_t n)
{
    if (!e)
        return;
    if (e->kind == EX_PARAM && !visited(sch, sch->param_mark, e->index)) {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, "%s%s=%lld", k ? ", " : " with ", sch->params[e->index].name,
                 sch->params[e->index].value);
    }
    if (e->kind == EX_LET && !visited(sch, sch->let_mark, e->index))
        params_used(sch, sch->lets[e->index].expr, buf, n);
    params_used(sch, e->a, buf, n);
    params_used(sch, e->b, buf, n);
    params_used(sch, e->c, buf, n);
}

/* require expr [, "message"]: resolved and evaluated where it stands, after
 * every param has its -D value; false is an error quoting the expression
 * and the params it used. */
static void check_require(pp_schedule *sch, pp_stmt *st)
{
    scope sc = {sch->nparams,
                sch->nlets,
                0,
                0,
                "a requirement (it may use params and lets of params)",
                0,
                1};
    int before = sch->diag->errors;
    resolve(sch, st->expr, &sc);
    check_depth(sch, st->expr); /* bounds the walks below as it bounds evaluation */
    if (sch->diag->errors != before)
        return;
    /* s, b and d themselves failed to resolve above: only a let can bring them */
    new_walk(sch);
    const pp_expr *via = NULL, *at = find_var(sch, st->expr, 0, &via);
    if (at) {
        diag_error(sch->diag, at->loc,
                   "'%s' uses s, b or d: a requirement may use params and lets of params only",
                   via ? sch->lets[via->index].name : "it");
        return;
    }
    /* the broken let's errors are reported: evaluating it would read them */
    if (uses_broken_let(sch, st->expr))
        return;
    long long v;
    if (!eval_const(sch, st->expr, &v) || v)
        return;
    char text[512], with[512] = "";
    diag_span_text(sch->diag, st->name_loc, text, sizeof text);
    new_walk(sch);
    params_used(sch, st->expr, with, sizeof with);
    diag_error(sch->diag, st->name_loc, "requirement failed: %s%s%s%s%s", text,
               st->name ? " (" : "", st->name ? st->name : "", st->name ? ")" : "", with);
}

/* `split backward when`, `recompute when`, `offload when`: the condition
 * may use s, b, params and lets, but not d, since it chooses for a job's
 * F, B (and W or R) together; why says so in the message. Returns 0 when
 * the expression resolved (d or not), so that the caller keeps it. */
static int check_when_without_d(pp_schedule *sch, pp_stmt *st, const scope *sc, const char *what,
                                const char *why)
{
    int before = sch->diag->errors;
    resolve(sch, st->expr, sc);
    check_depth(sch, st->expr);
    if (sch->diag->errors != before)
        return -1;
    new_walk(sch);
    const pp_expr *via = NULL, *at = find_var(sch, st->expr, 'd', &via);
    if (at && via)
        diag_error(sch->diag, at->loc,
                   "'%s' uses d: '%s' may use s, b, params and lets without d (%s)",
                   sch->lets[via->index].name, what, why);
    else if (at)
        diag_error(sch->diag, at->loc,
                   "'d' cannot be used in '%s': it may use s, b, params and lets (%s)", what, why);
    return 0;
}

static void check_split_when(pp_schedule *sch, pp_stmt *st, const scope *sc)
{
    if (!check_when_without_d(sch, st, sc, "split backward when",
                              "a backward is split or not as a whole"))
        sch->split_when = st->expr;
}

static void check_recompute_when(pp_schedule *sch, pp_stmt *st, const scope *sc)
{
    if (!check_when_without_d(sch, st, sc, "recompute when",
                              "a forward is recomputed or not as a whole"))
        sch->recompute_when = st->expr;
}

static void check_offload_when(pp_schedule *sch, pp_stmt *st, const scope *sc)
{
    if (!check_when_without_d(sch, st, sc, "offload when",
                              "a stash is offloaded or not as a whole"))
        sch->offload_when = st->expr;
}

/* Does e (or a let it uses) name the direction R? Lets form no cycle, so
 * the walk ends; each let is looked at once per walk. */
static int mentions_r(pp_schedule *sch, const pp_expr *e)
{
    if (!e)
        return 0;
    if (e->kind == EX_DIR)
        return e->value == DIR_R;
    if (e->kind == EX_LET)
        return !visited(sch, sch->let_mark, e->index) && mentions_r(sch, sch->lets[e->index].expr);
    return mentions_r(sch, e->a) || mentions_r(sch, e->b) || mentions_r(sch, e->c);
}

/* Options the schedule states that cannot change anything: warnings at
 * their statements, the compile goes on. */
static void warn_no_effect(pp_schedule *sch)
{
    for (const pp_stmt *st = sch->stmts; st; st = st->next) {
        if (st->kind == ST_LIMIT && sch->strict)
            diag_warning(
                sch->diag, st->loc,
                "'limit inflight' has no effect with 'order strict': a strict order runs "
                "each worker's jobs in priority order; the limit applies to 'order greedy'");
        if (st->kind == ST_COST && st->dir == DIR_W && !sch->split)
            diag_warning(sch->diag, st->loc,
                         "'cost W' has no effect: the schedule has no 'split backward', so it has "
                         "no W jobs");
        if (st->kind == ST_COST && st->dir == COST_HOST_BANDWIDTH && !sch->offload)
            diag_warning(sch->diag, st->loc,
                         "'cost host_bandwidth' has no effect: the schedule has no 'offload', so "
                         "nothing moves to host memory");
        if (st->kind == ST_COST && st->dir == COST_R && !sch->recompute)
            diag_warning(sch->diag, st->loc,
                         "'cost R' has no effect: the schedule has no 'recompute', so it has "
                         "no R jobs");
        if (st->kind == ST_COST && st->dir == COST_OVERLAP && !sch->overlap)
            diag_warning(sch->diag, st->loc,
                         "'cost overlap' has no effect: the schedule has no 'overlap F with B "
                         "when', so no jobs run as pairs");
    }
}

static void set_once(pp_schedule *sch, pp_stmt *st, int *seen, const char *what)
{
    if (*seen)
        diag_error(sch->diag, st->loc, "%s is given more than once", what);
    *seen = 1;
}

/* The model block's fields, by kind. `blocks` (mlp) and `layers` (gpt) may
 * use s: they are evaluated per stage once S is known (model_layers). */
typedef struct {
    const char *name;
    size_t offset;
    long long min, max;
    int per_stage;
} model_field;

static const model_field mlp_fields[] = {
    {"context", offsetof(pp_model, context), 1, PP_MAX_CONTEXT, 0},
    {"embed", offsetof(pp_model, embed), 1, PP_MAX_EMBED, 0},
    {"ffn", offsetof(pp_model, ffn), 1, PP_MAX_FFN, 0},
    {"blocks", offsetof(pp_model, blocks), 0, PP_MAX_LAYERS, 1},
    {"batch", offsetof(pp_model, batch), 1, PP_MAX_BATCH, 0},
};

static const model_field gpt_fields[] = {
    {"vocab", offsetof(pp_model, vocab), 2, PP_MAX_VOCAB, 0},
    {"context", offsetof(pp_model, context), 1, PP_MAX_CONTEXT, 0},
    {"embed", offsetof(pp_model, embed), 1, PP_MAX_EMBED, 0},
    {"heads", offsetof(pp_model, heads), 1, PP_MAX_HEADS, 0},
    {"ffn", offsetof(pp_model, ffn), 1, PP_MAX_FFN, 0},
    {"layers", offsetof(pp_model, blocks), 0, PP_MAX_LAYERS, 1},
    {"batch", offsetof(pp_model, batch), 1, PP_MAX_BATCH, 0},
    {"tie", offsetof(pp_model, tie), 0, 1, 0},
};

/* llama's (norm_eps is the one real-valued field: its offset is a float's) */
static const model_field llama_fields[] = {
    {"vocab", offsetof(pp_model, vocab), 2, PP_MAX_VOCAB, 0},
    {"context", offsetof(pp_model, context), 1, PP_MAX_CONTEXT, 0},
    {"embed", offsetof(pp_model, embed), 1, PP_MAX_EMBED, 0},
    {"heads", offsetof(pp_model, heads), 1, PP_MAX_HEADS, 0},
    {"kv_heads", offsetof(pp_model, kv_heads), 1, PP_MAX_HEADS, 0},
    {"ffn", offsetof(pp_model, ffn), 1, PP_MAX_FFN, 0},
    {"layers", offsetof(pp_model, blocks), 0, PP_MAX_LAYERS, 1},
    {"batch", offsetof(pp_model, batch), 1, PP_MAX_BATCH, 0},
    {"rope_theta", offsetof(pp_model, rope_theta), 1, 1000000000, 0},
    {"norm_eps", offsetof(pp_model, norm_eps), 0, 0, 0},
    {"tie", offsetof(pp_model, tie), 0, 1, 0},
};

#define NFIELDS(a) ((int)(sizeof a / sizeof a[0]))

/* Each kind's sizes when the block leaves them out. gpt's ffn defaults to
 * 4 * embed, GPT-2's ratio: 0 here, and check_model sets it once embed
 * is known. */
static pp_model model_defaults(uint32_t kind)
{
    if (kind == PP_MODEL_LLAMA) /* kv_heads (= heads) and ffn: check_model, once known */
        return (pp_model){.kind = PP_MODEL_LLAMA,
                          .vocab = 256,
                          .context = 32,
                          .embed = 64,
                          .heads = 4,
                          .blocks = 1,
                          .batch = 8,
                          .rope_theta = PP_LLAMA_ROPE_THETA,
                          .norm_eps = PP_LLAMA_NORM_EPS};
    if (kind == PP_MODEL_GPT)
        return (pp_model){.kind = PP_MODEL_GPT,
                          .vocab = 256,
                          .context = 32,
                          .embed = 64,
                          .heads = 4,
                          .blocks = 1,
                          .batch = 8};
    return (pp_model){.kind = PP_MODEL_MLP,
                      .vocab = PP_VOCAB,
                      .context = 8,
                      .embed = 16,
                      .ffn = 128,
                      .blocks = 1,
                      .batch = 16};
}

/* norm_eps = a decimal number in (0, 1); any other field takes an
 * expression. */
static void check_real_field(pp_schedule *sch, pp_stmt *f)
{
    if (strcmp(f->name, "norm_eps") != 0) {
        diag_error(sch->diag, f->name_loc,
                   "model field '%s' takes an integer expression, not a decimal number", f->name);
        return;
    }
    if (f->expr) {
        diag_error(sch->diag, f->expr->loc,
                   "model norm_eps takes a decimal number such as 1e-5 or 0.000001");
        return;
    }
    if (!(f->real > 0.0 && f->real < 1.0) || (float)f->real == 0.0f) {
        diag_error(sch->diag, f->name_loc, "model norm_eps = %g is out of range (0, 1)", f->real);
        return;
    }
    sch->model.norm_eps = (float)f->real;
}

/* `layers = auto(L)`: L a constant expression, the layers of all stages
 * together (compiler/auto_layers.c chooses each stage's). */
static void check_auto_layers(pp_schedule *sch, pp_stmt *f)
{
    pp_expr *e = f->expr;
    if (e->nargs != 1) {
        diag_error(sch->diag, e->loc, "auto takes one argument, the layers in all: auto(L)");
        return;
    }
    scope sc = {sch->nparams, 0, 0, 0, "auto's layer count", 0, 0};
    int before = sch->diag->errors;
    resolve(sch, e->a, &sc);
    long long v;
    if (sch->diag->errors != before || !eval_const(sch, e->a, &v))
        return;
    if (v < 1 || (uint64_t)v > PP_MAX_TOTAL_LAYERS) {
        diag_error(sch->diag, e->a->loc, "auto(%lld): the layers in all are out of range [1, %llu]",
                   v, (unsigned long long)PP_MAX_TOTAL_LAYERS);
        return;
    }
    sch->auto_layers = v;
    sch->auto_loc = e->loc;
}

/* kv_heads divides heads; each head's width is even (rotary embeddings
 * turn pairs of its columns). */
static void check_llama(pp_schedule *sch, pp_stmt *st, pp_expr *heads_expr, pp_expr *kv_expr)
{
    pp_model *m = &sch->model;
    if (m->heads % m->kv_heads != 0)
        diag_error(sch->diag, kv_expr ? kv_expr->loc : st->loc,
                   "model kv_heads = %u does not divide heads = %u (each key/value head serves "
                   "heads/kv_heads query heads)",
                   m->kv_heads, m->heads);
    if (m->embed % m->heads == 0 && (m->embed / m->heads) % 2 != 0)
        diag_error(sch->diag, heads_expr ? heads_expr->loc : st->loc,
                   "model llama: each head is embed/heads = %u wide, which is odd (rotary "
                   "embeddings need an even head width)",
                   m->embed / m->heads);
}

static void check_model(pp_schedule *sch, pp_stmt *st)
{
    uint32_t kind = (uint32_t)st->flag;
    const model_field *fields = kind == PP_MODEL_GPT     ? gpt_fields
                                : kind == PP_MODEL_LLAMA ? llama_fields
                                                         : mlp_fields;
    int nf = kind == PP_MODEL_GPT     ? NFIELDS(gpt_fields)
             : kind == PP_MODEL_LLAMA ? NFIELDS(llama_fields)
                                      : NFIELDS(mlp_fields);
    char list[160] = ""; /* the field names, for "unknown model field" */
    for (int k = 0; k < nf; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "",
                 fields[k].name);
    int seen[16] = {0};
    pp_expr *heads_expr = NULL, *kv_expr = NULL;
    /* The sizes start from the kind's defaults; the optimizer and precision
     * lines are statements of their own, which may come before this one. */
    pp_model m = model_defaults(kind);
    m.optimizer = sch->model.optimizer;
    m.precision = sch->model.precision;
    sch->model = m;
    for (pp_stmt *f = st->body; f; f = f->next) {
        int k = 0;
        while (k < nf && strcmp(fields[k].name, f->name) != 0)
            k++;
        if (k == nf) {
            diag_error(sch->diag, f->name_loc, "unknown %s model field '%s' (fields are %s)",
                       pp_model_kind_name(kind), f->name, list);
            continue;
        }
        if (seen[k]++)
            diag_error(sch->diag, f->name_loc, "model field '%s' is given more than once", f->name);
        if (!strcmp(f->name, "norm_eps") || !f->expr) {
            check_real_field(sch, f);
            continue;
        }
        if (fields[k].per_stage && f->expr->kind == EX_CALL && !strcmp(f->expr->name, "auto")) {
            check_auto_layers(sch, f);
            continue;
        }
        scope sc = {sch->nparams, 0, 0, 0, "the model block", fields[k].per_stage, 0};
        if (fields[k].per_stage)
            sc.what = kind != PP_MODEL_MLP ? "the model's layers" : "the model's blocks";
        int before = sch->diag->errors;
        resolve(sch, f->expr, &sc);
        if (sch->diag->errors != before)
            continue;
        if (fields[k].per_stage && uses_job(sch, f->expr)) {
            sch->layers_expr = f->expr; /* evaluated per stage by model_layers */
            continue;
        }
        long long v;
        if (!eval_const(sch, f->expr, &v))
            continue;
        if (v < fields[k].min || v > fields[k].max) {
            diag_error(sch->diag, f->expr->loc, "model %s = %lld is out of range [%lld, %lld]",
                       f->name, v, fields[k].min, fields[k].max);
            continue;
        }
        if (!strcmp(f->name, "heads"))
            heads_expr = f->expr;
        if (!strcmp(f->name, "kv_heads"))
            kv_expr = f->expr;
        *(uint32_t *)((char *)&sch->model + fields[k].offset) = (uint32_t)v;
    }
    if (sch->model.ffn == 0 && kind == PP_MODEL_LLAMA) /* Llama's 2/3 * 4 * embed, to 8 */
        sch->model.ffn = (8 * sch->model.embed / 3 + 7) / 8 * 8;
    if (sch->model.ffn == 0) /* gpt's default (a given ffn is at least 1) */
        sch->model.ffn = 4 * sch->model.embed;
    if (kind == PP_MODEL_LLAMA && sch->model.kv_heads == 0)
        sch->model.kv_heads = sch->model.heads;
    if (pp_model_widest_elems(&sch->model) > PP_MAX_TENSOR_ELEMS)
        diag_error(sch->diag, st->loc,
                   "model %s: its widest activation tensor (%s) would have %llu elements, more "
                   "than the kernels can index (%llu): make batch, context or the widths smaller",
                   pp_model_kind_name(kind),
                   kind == PP_MODEL_GPT ? "batch * context rows of max(3 * embed, ffn, vocab)"
                   : kind == PP_MODEL_LLAMA
                       ? "batch * context rows of max(3 * embed, 2 * ffn, vocab)"
                       : "batch rows of max(context * embed, ffn, 256)",
                   (unsigned long long)pp_model_widest_elems(&sch->model), PP_MAX_TENSOR_ELEMS);
    if (kind == PP_MODEL_MLP)
        return;
    if (kind == PP_MODEL_LLAMA)
        check_llama(sch, st, heads_expr, kv_expr);
    if (sch->model.embed % sch->model.heads != 0) {
        if (heads_expr)
            diag_error(
                sch->diag, heads_expr->loc,
                "model heads = %u does not divide embed = %u (each head is embed/heads wide)",
                sch->model.heads, sch->model.embed);
        else
            diag_error(sch->diag, st->loc,
                       "model %s: embed = %u is not a multiple of the default 4 heads (give heads)",
                       pp_model_kind_name(kind), sch->model.embed);
    }
}

/* A per-stage `layers` (or `blocks`) expression, evaluated for every stage
 * s of S into the model's table. */
/* `tensor = T` (issue 27): T in [1, PP_MAX_TENSOR], and T must divide
 * what the Megatron split cuts: the MLP's inner width (both kinds) and,
 * for gpt, the heads (QKV is split by heads). Sets model.tensor. */
static void check_tensor(pp_schedule *sch)
{
    pp_expr *e = sch->tensor_expr;
    long long v;
    if (!eval_const(sch, e, &v))
        return;
    if (v < 1 || v > PP_MAX_TENSOR) {
        diag_error(sch->diag, e->loc, "tensor = %lld is out of range [1, %u]", v, PP_MAX_TENSOR);
        return;
    }
    const pp_model *m = &sch->model;
    if (m->kind == PP_MODEL_GPT && m->heads % v)
        diag_error(sch->diag, e->loc,
                   "tensor = %lld does not divide the model's heads (%u): the attention is "
                   "split by heads",
                   v, m->heads);
    else if (m->kind == PP_MODEL_LLAMA && m->kv_heads % v)
        diag_error(sch->diag, e->loc,
                   "tensor = %lld does not divide the model's kv_heads (%u): the attention is "
                   "split by key/value heads, each rank keeping its query heads' own",
                   v, m->kv_heads);
    else if (m->ffn % v)
        diag_error(sch->diag, e->loc,
                   "tensor = %lld does not divide the model's ffn (%u): the MLP's inner layer "
                   "is split in equal column shards",
                   v, m->ffn);
    sch->model.tensor = (uint32_t)v;
}

static void model_layers(pp_schedule *sch)
{
    if (sch->auto_layers && sch->S >= 1) { /* the even split, until the driver chooses */
        if (!(sch->model.layers = malloc((size_t)sch->S * sizeof *sch->model.layers))) {
            diag_nomem(sch->diag, "while splitting the model's layers over %lld stages", sch->S);
            return;
        }
        if (sch->auto_layers > (long long)PP_MAX_LAYERS * sch->S)
            diag_error(sch->diag, sch->auto_loc,
                       "auto(%lld): more layers than %lld stages of at most %u can hold",
                       sch->auto_layers, sch->S, PP_MAX_LAYERS);
        for (long long s = 0; s < sch->S; s++) /* the remainder on the middle stages */
            sch->model.layers[s] = (uint32_t)(sch->auto_layers / sch->S);
        for (long long r = 0; r < sch->auto_layers % sch->S; r++)
            sch->model.layers[(sch->S - sch->auto_layers % sch->S) / 2 + r]++;
        return;
    }
    if (!sch->layers_expr || sch->S < 1)
        return;
    sch->model.layers = malloc((size_t)sch->S * sizeof *sch->model.layers);
    if (!sch->model.layers) {
        diag_nomem(sch->diag, "while evaluating the model's layers for %lld stages", sch->S);
        return;
    }
    const char *name = sch->model.kind != PP_MODEL_MLP ? "layers" : "blocks";
    for (long long st = 0; st < sch->S; st++) {
        pp_env env = {st, 0, 0, 0};
        const pp_expr *where = sch->layers_expr;
        long long v;
        pp_eval_status rc = pp_eval(sch, sch->layers_expr, &env, &v, &where);
        if (rc != EVAL_OK || v < 0 || v > PP_MAX_LAYERS) {
            if (rc == EVAL_DIV0)
                diag_error(sch->diag, where->loc, "division by zero (at s = %lld)", st);
            else if (rc)
                diag_error(sch->diag, where->loc, "integer overflow (at s = %lld)", st);
            else
                diag_error(sch->diag, sch->layers_expr->loc,
                           "model %s = %lld at s = %lld is out of range [0, %u]", name, v, st,
                           PP_MAX_LAYERS);
            return;
        }
        sch->model.layers[st] = (uint32_t)v;
    }
}

/* A required count (S, B, W) must be a param with a value in [1, max]. */
static long long count_param(pp_schedule *sch, const char *name, const char *meaning, long long max,
                             int report_missing)
{
    int i = find_param(sch, name, sch->nparams);
    if (i < 0) {
        if (report_missing)
            diag_error_noloc(sch->diag, "the schedule defines no '%s' (%s): add 'param %s = ...'",
                             name, meaning, name);
        return 0;
    }
    long long v = sch->params[i].value;
    if (v < 1 || v > max) {
        diag_error(sch->diag, sch->params[i].loc, "%s = %lld is out of range [1, %lld]", name, v,
                   max);
        return 0;
    }
    return v;
}

static void apply_defines(pp_schedule *sch, const pp_define *defs, int ndefs)
{
    for (int i = 0; i < ndefs; i++) {
        int k = find_param(sch, defs[i].name, sch->nparams);
        if (k < 0)
            diag_error_noloc(sch->diag, "-D %s=%lld: the schedule has no param '%s'", defs[i].name,
                             defs[i].value, defs[i].name);
        else
            sch->params[k].value = defs[i].value;
    }
}

int pp_schedule_check(pp_schedule *sch, pp_diag *d, pp_stmt *stmts, const pp_define *defs,
                      int ndefs)
{
    /* After a syntax error a statement may be missing from stmts, so "the
     * schedule has no ..." errors would be false: they are reported only for
     * a file that parsed cleanly. */
    int parse_errors = d->errors;
    memset(sch, 0, sizeof *sch);
    sch->diag = d;
    sch->stmts = stmts;
    int n = 0;
    for (pp_stmt *st = stmts; st; st = st->next) {
        n++;
        /* every param's and let's name, with 1 (a param) | 2 (a let): what
         * defined_later looks up */
        int *kinds = st->name && (st->kind == ST_PARAM || st->kind == ST_LET)
                         ? pp_names_at(&sch->stmt_ix, st->name, 0)
                         : &n;
        if (!kinds) {
            diag_nomem(d, "while checking the schedule");
            return d->errors;
        }
        if (kinds != &n)
            *kinds |= st->kind == ST_PARAM ? 1 : 2;
    }
    sch->params = calloc((size_t)n + 1, sizeof *sch->params);
    sch->lets = calloc((size_t)n + 1, sizeof *sch->lets);
    sch->memo = calloc(1, sizeof *sch->memo);
    sch->let_mark = calloc((size_t)n + 1, sizeof *sch->let_mark);
    sch->param_mark = calloc((size_t)n + 1, sizeof *sch->param_mark);
    sch->mark_gen = calloc(1, sizeof *sch->mark_gen);
    if (sch->memo)
        sch->memo->let = calloc((size_t)n + 1, sizeof *sch->memo->let);
    sch->model = model_defaults(PP_MODEL_MLP);
    if (!sch->params || !sch->lets || !sch->memo || !sch->memo->let || !sch->let_mark ||
        !sch->param_mark || !sch->mark_gen) {
        diag_nomem(d, "while checking the schedule");
        return d->errors;
    }

    /* Params first, in order, so -D overrides apply before anything uses them:
     * a param's default may use earlier params, and an override of S changes
     * a later `param W = S`. */
    for (pp_stmt *st = stmts; st; st = st->next) {
        if (st->kind != ST_PARAM)
            continue;
        define_param(sch, st);
        for (int i = 0; i < ndefs; i++)
            if (sch->nparams && !strcmp(defs[i].name, sch->params[sch->nparams - 1].name))
                sch->params[sch->nparams - 1].value = defs[i].value;
    }
    if (!parse_errors)
        apply_defines(sch, defs, ndefs); /* reports -D names that match no param */

    int seen_fn[FN_COUNT] = {0}, seen_order = 0, seen_split = 0, seen_limit = 0,
        seen_cost[COST_COUNT] = {0}, seen_model = 0, seen_optimizer = 0, seen_precision = 0,
        seen_overlap = 0, seen_recompute = 0, seen_tensor = 0, seen_offload = 0;
    static const char *fn_names[FN_COUNT] = {"compute(s,b,d)", "weights(s,b,d)", "priority(s,b,d)"};
    for (pp_stmt *st = stmts; st; st = st->next) {
        scope fn_scope = {sch->nparams, sch->nlets, 1, 0, "a function", 0, 0};
        switch (st->kind) {
        case ST_PARAM:
            break;
        case ST_LET:
            define_let(sch, st);
            break;
        case ST_FUNC:
            set_once(sch, st, &seen_fn[st->func], fn_names[st->func]);
            resolve(sch, st->expr, &fn_scope);
            check_depth(sch, st->expr);
            sch->fn[st->func] = st->expr;
            sch->fn_loc[st->func] = st->loc;
            break;
        case ST_ORDER:
            set_once(sch, st, &seen_order, "order");
            sch->strict = st->flag;
            break;
        case ST_SPLIT:
            set_once(sch, st, &seen_split, "split backward");
            sch->split = 1;
            if (st->expr)
                check_split_when(sch, st, &fn_scope);
            break;
        case ST_REQUIRE:
            check_require(sch, st);
            break;
        case ST_LIMIT:
            set_once(sch, st, &seen_limit, "limit inflight");
            fn_scope.worker = 1;
            fn_scope.job = 0;
            fn_scope.what = "'limit inflight' (it may use w and params)";
            resolve(sch, st->expr, &fn_scope);
            check_depth(sch, st->expr);
            sch->inflight = st->expr;
            break;
        case ST_COST:
            set_once(sch, st, &seen_cost[st->dir], "this cost");
            if (st->dir >= COST_LATENCY && st->dir != COST_R) {
                fn_scope.job = 0;
                fn_scope.what =
                    st->dir == COST_LATENCY          ? "'cost latency' (it may use params)"
                    : st->dir == COST_OVERLAP        ? "'cost overlap' (it may use params)"
                    : st->dir == COST_TENSOR_LATENCY ? "'cost tensor_latency' (it may use params)"
                    : st->dir == COST_TENSOR_BANDWIDTH
                        ? "'cost tensor_bandwidth' (it may use params)"
                    : st->dir == COST_HOST_BANDWIDTH ? "'cost host_bandwidth' (it may use params)"
                                                     : "'cost bandwidth' (it may use params)";
            }
            resolve(sch, st->expr, &fn_scope);
            check_depth(sch, st->expr);
            sch->cost[st->dir] = st->expr;
            break;
        case ST_MODEL:
            set_once(sch, st, &seen_model, "the model block");
            check_model(sch, st);
            break;
        case ST_OPTIMIZER:
            set_once(sch, st, &seen_optimizer, "optimizer");
            sch->model.optimizer = (uint32_t)st->flag;
            break;
        case ST_PRECISION:
            set_once(sch, st, &seen_precision, "precision");
            sch->model.precision = (uint32_t)st->flag;
            break;
        case ST_OVERLAP:
            set_once(sch, st, &seen_overlap, "overlap");
            fn_scope.what = "'overlap ... when' (it may use s, b, d, params and lets)";
            resolve(sch, st->expr, &fn_scope);
            check_depth(sch, st->expr);
            sch->overlap = st->expr;
            sch->overlap_loc = st->loc;
            sch->overlap_then = st->flag;
            break;
        case ST_RECOMPUTE:
            set_once(sch, st, &seen_recompute, "recompute");
            sch->recompute = 1;
            if (st->expr)
                check_recompute_when(sch, st, &fn_scope);
            break;
        case ST_TENSOR:
            set_once(sch, st, &seen_tensor, "tensor");
            fn_scope.job = 0;
            fn_scope.what = "'tensor' (it may use params)";
            resolve(sch, st->expr, &fn_scope);
            check_depth(sch, st->expr);
            sch->tensor_expr = st->expr;
            break;
        case ST_OFFLOAD:
            set_once(sch, st, &seen_offload, "offload");
            sch->offload = 1;
            if (st->expr)
                check_offload_when(sch, st, &fn_scope);
            break;
        }
    }
    if (sch->tensor_expr && uses_job(sch, sch->tensor_expr))
        diag_error(d, sch->tensor_expr->loc, "'tensor' may use params, not s, b or d");
    if (!sch->fn[FN_COMPUTE] && !seen_fn[FN_COMPUTE] && !parse_errors)
        diag_error_noloc(d, "the schedule has no 'compute(s,b,d) = ...': every schedule says "
                            "where each job runs");
    if (sch->inflight && uses_job(sch, sch->inflight))
        diag_error(d, sch->inflight->loc, "'limit inflight' may use w and params, not s, b or d");
    if (sch->fn[FN_PRIORITY] && !d->errors) {
        new_walk(sch);
        sch->priority_r = mentions_r(sch, sch->fn[FN_PRIORITY]);
    }
    for (int c = COST_LATENCY; c < COST_COUNT; c++)
        if (c != COST_R && sch->cost[c] && uses_job(sch, sch->cost[c]))
            diag_error(d, sch->cost[c]->loc, "'cost %s' may use params, not s, b or d",
                       c == COST_LATENCY            ? "latency"
                       : c == COST_OVERLAP          ? "overlap"
                       : c == COST_TENSOR_LATENCY   ? "tensor_latency"
                       : c == COST_TENSOR_BANDWIDTH ? "tensor_bandwidth"
                       : c == COST_HOST_BANDWIDTH   ? "host_bandwidth"
                                                    : "bandwidth");
    warn_no_effect(sch);
    /* A pair is two neighbours in a worker's order, which only a strict
     * order fixes before simulating; greedy picks the next job as it goes. */
    if (seen_overlap && !sch->strict)
        diag_error(d, sch->overlap_loc,
                   "'overlap' needs 'order strict': pairs are neighbours in a worker's priority "
                   "order, which the greedy order does not follow");
    sch->S = count_param(sch, "S", "the number of stages", 1 << 20, !parse_errors);
    sch->B = count_param(sch, "B", "the number of microbatches", 1 << 20, !parse_errors);
    sch->W = count_param(sch, "W", "the number of workers", 1 << 16, !parse_errors);
    if (!d->errors)
        model_layers(sch);
    if (!d->errors && sch->tensor_expr)
        check_tensor(sch);
    if (!d->errors && sch->model.tie && sch->S < 2)
        diag_error_noloc(d, "model tie = 1 ties stage 0's embedding to the last stage's head: it "
                            "needs S >= 2 stages (S is 1: untie it, tie = 0)");
    /* ids per (s,b): F, B, a W with a split backward, an R with recompute */
    int per = (sch->split ? 3 : 2) + (sch->recompute ? 1 : 0);
    long long jobs = sch->S * sch->B * per;
    if (!d->errors && jobs > 50000000)
        diag_error_noloc(d, "S*B*%d = %lld jobs is more than this compiler handles (50,000,000)",
                         per, jobs);
    return d->errors;
}

void pp_schedule_free(pp_schedule *sch)
{
    free(sch->model.layers);
    free(sch->params);
    free(sch->lets);
    if (sch->memo)
        free(sch->memo->let);
    free(sch->memo);
    free(sch->let_mark);
    free(sch->param_mark);
    free(sch->mark_gen);
    pp_names_free(&sch->param_ix);
    pp_names_free(&sch->let_ix);
    pp_names_free(&sch->stmt_ix);
    memset(sch, 0, sizeof *sch);
}

/* ==== Constant expressions outside a file (schedule.h) ==================== */

int pp_consts_init(pp_schedule *sch, pp_diag *d, int cap)
{
    memset(sch, 0, sizeof *sch);
    sch->diag = d;
    sch->params = calloc((size_t)cap + 1, sizeof *sch->params);
    sch->lets = calloc(1, sizeof *sch->lets); /* none: resolve looks for lets first */
    if (!sch->params || !sch->lets) {
        diag_nomem(d, "for a search line's names");
        return -1;
    }
    sch->consts_cap = cap;
    return 0;
}

int pp_consts_declare(pp_schedule *sch, const char *name)
{
    int *kinds = pp_names_at(&sch->stmt_ix, name, 0);
    if (!kinds) {
        diag_nomem(sch->diag, "for a search line's names");
        return -1;
    }
    *kinds |= 1; /* a param, as defined_later reads it */
    return 0;
}

int pp_consts_define(pp_schedule *sch, const char *name, pp_loc loc)
{
    int prev = find_param(sch, name, sch->nparams);
    if (prev >= 0) {
        diag_error(sch->diag, loc, "redefinition of '%s'", name);
        if (sch->params[prev].loc.first_line > 0)
            diag_note(sch->diag, sch->params[prev].loc, "'%s' was first defined here", name);
        return -1;
    }
    if (is_job_var(name)) {
        diag_error(sch->diag, loc, "'%s' is a job variable and cannot be redefined", name);
        return -1;
    }
    if (sch->nparams >= sch->consts_cap) {
        diag_error(sch->diag, loc, "more than %d names", sch->consts_cap);
        return -1;
    }
    if (index_name(sch, &sch->param_ix, name, sch->nparams))
        return -1;
    pp_param *p = &sch->params[sch->nparams];
    p->name = (char *)name; /* borrowed, as a file's params borrow their statement's */
    p->loc = loc;
    p->value = 0;
    return sch->nparams++;
}

int pp_consts_resolve(pp_schedule *sch, pp_expr *e, const char *what)
{
    scope sc = {sch->nparams, 0, 0, 0, what, 0, 0};
    int before = sch->diag->errors;
    resolve(sch, e, &sc);
    return sch->diag->errors - before;
}
