/* eval.c - evaluating checked schedule expressions for one job (s, b, d, w).
 *
 * Integer semantics (documented in schedules/README.md): 64-bit integers;
 * `/` is floor division and `%` is the matching non-negative remainder for a
 * positive divisor (-1 / 2 = -1, -1 % 2 = 1), so `(b - 1) % W` wraps as a schedule
 * author expects; comparisons and && || ! yield 0 or 1; && and || and ?:
 * evaluate only what they need. Division by zero and overflow are errors
 * reported with the job where they happened, never undefined behaviour.
 * Within one pp_eval call each let is evaluated at most once (sch->memo), so
 * the time is linear in the size of the file however lets use lets.
 *
 * With sch->exact_div (a `# search:` line's values, search.c) a `/` that
 * leaves a remainder, or divides by zero, is EVAL_INEXACT instead: the
 * search skips that value, so `G=1..W R=W/G` tries only the G that divide W. */
#include <limits.h>
#include <string.h>

#include "schedule.h"

static pp_eval_status floor_div(long long a, long long b, long long *q, long long *r)
{
    if (b == 0)
        return EVAL_DIV0;
    if (a == LLONG_MIN && b == -1)
        return EVAL_OVERFLOW;
    long long qq = a / b, rr = a % b;
    if (rr != 0 && ((rr < 0) != (b < 0))) {
        qq -= 1;
        rr += b;
    }
    *q = qq;
    *r = rr;
    return EVAL_OK;
}

static pp_eval_status binary(int op, long long x, long long y, int exact, long long *out)
{
    long long q = 0, r = 0;
    pp_eval_status st;
    switch (op) {
    case '+':
        return __builtin_add_overflow(x, y, out) ? EVAL_OVERFLOW : EVAL_OK;
    case '-':
        return __builtin_sub_overflow(x, y, out) ? EVAL_OVERFLOW : EVAL_OK;
    case '*':
        return __builtin_mul_overflow(x, y, out) ? EVAL_OVERFLOW : EVAL_OK;
    case '/':
        /* y == -1 always divides (and x / -1 may overflow: floor_div says) */
        if (exact && (y == 0 || (y != -1 && x % y != 0)))
            return EVAL_INEXACT;
        st = floor_div(x, y, &q, &r);
        *out = q;
        return st;
    case '%':
        if (y == -1) { /* LLONG_MIN % -1 is 0, though LLONG_MIN / -1 overflows */
            *out = 0;
            return EVAL_OK;
        }
        st = floor_div(x, y, &q, &r);
        *out = r;
        return st;
    case '<':
        *out = x < y;
        return EVAL_OK;
    case '>':
        *out = x > y;
        return EVAL_OK;
    case OP_LE:
        *out = x <= y;
        return EVAL_OK;
    case OP_GE:
        *out = x >= y;
        return EVAL_OK;
    case OP_EQ:
        *out = x == y;
        return EVAL_OK;
    case OP_NE:
        *out = x != y;
        return EVAL_OK;
    }
    return EVAL_OVERFLOW; /* unreachable: the parser builds no other operator */
}

static pp_eval_status eval(const pp_schedule *sch, const pp_expr *e, const pp_env *env,
                           long long *out, const pp_expr **where);

/* A let's value for this call's job: from the memo when an earlier use in
 * the same call computed it (status and failing node included). */
static pp_eval_status eval_let(const pp_schedule *sch, const pp_expr *e, const pp_env *env,
                               long long *out, const pp_expr **where)
{
    pp_eval_memo *memo = sch->memo;
    if (!memo)
        return eval(sch, sch->lets[e->index].expr, env, out, where);
    pp_let_memo *m = &memo->let[e->index];
    if (m->gen != memo->gen) {
        long long v = 0;
        const pp_expr *w = NULL;
        m->status = eval(sch, sch->lets[e->index].expr, env, &v, &w);
        m->value = v;
        m->where = w;
        m->gen = memo->gen;
    }
    if (m->status)
        *where = m->where;
    else
        *out = m->value;
    return (pp_eval_status)m->status;
}

pp_eval_status pp_eval(const pp_schedule *sch, const pp_expr *e, const pp_env *env, long long *out,
                       const pp_expr **where)
{
    if (sch->memo)
        sch->memo->gen++; /* a new job (or a new env): forget every let's value */
    return eval(sch, e, env, out, where);
}

pp_eval_status pp_eval_same_env(const pp_schedule *sch, const pp_expr *e, const pp_env *env,
                                long long *out, const pp_expr **where)
{
    return eval(sch, e, env, out, where); /* the lets' values (and errors) stand */
}

static pp_eval_status eval(const pp_schedule *sch, const pp_expr *e, const pp_env *env,
                           long long *out, const pp_expr **where)
{
    long long x, y;
    pp_eval_status st;
    switch (e->kind) {
    case EX_INT:
    case EX_DIR:
        *out = e->value;
        return EVAL_OK;
    case EX_VAR:
        *out = e->var == 's' ? env->s : e->var == 'b' ? env->b : e->var == 'd' ? env->d : env->w;
        return EVAL_OK;
    case EX_PARAM:
        *out = sch->params[e->index].value;
        return EVAL_OK;
    case EX_LET:
        return eval_let(sch, e, env, out, where);
    case EX_UNARY:
        if ((st = eval(sch, e->a, env, &x, where)))
            return st;
        if (e->op == '!') {
            *out = !x;
            return EVAL_OK;
        }
        if (x == LLONG_MIN)
            goto overflow;
        *out = -x;
        return EVAL_OK;
    case EX_BINARY:
        if ((st = eval(sch, e->a, env, &x, where)))
            return st;
        if (e->op == OP_AND || e->op == OP_OR) {
            if ((e->op == OP_AND && !x) || (e->op == OP_OR && x)) {
                *out = e->op == OP_OR;
                return EVAL_OK;
            }
            if ((st = eval(sch, e->b, env, &y, where)))
                return st;
            *out = y != 0;
            return EVAL_OK;
        }
        if ((st = eval(sch, e->b, env, &y, where)))
            return st;
        if ((st = binary(e->op, x, y, sch->exact_div, out))) {
            *where = e;
            return st;
        }
        return EVAL_OK;
    case EX_COND:
        if ((st = eval(sch, e->a, env, &x, where)))
            return st;
        return eval(sch, x ? e->b : e->c, env, out, where);
    case EX_CALL:
        if ((st = eval(sch, e->a, env, &x, where)))
            return st;
        if (!strcmp(e->name, "abs")) {
            if (x == LLONG_MIN)
                goto overflow;
            *out = x < 0 ? -x : x;
            return EVAL_OK;
        }
        if ((st = eval(sch, e->b, env, &y, where)))
            return st;
        *out = !strcmp(e->name, "min") ? (x < y ? x : y) : (x > y ? x : y);
        return EVAL_OK;
    case EX_NAME:
        break; /* unresolved names never reach evaluation: check.c rejects them */
    }
overflow:
    *where = e;
    return EVAL_OVERFLOW;
}
