/* ast.c - constructors and destructors for the schedule syntax tree (and a
 * `# search:` line's assignments). */
#include "ast.h"

#include <stdlib.h>

/* A new node owning name, a, b and c; out of memory, frees them and
 * returns NULL (the parser then stops: see parser.y). */
static pp_expr *node(pp_expr_kind kind, pp_loc loc, char *name, pp_expr *a, pp_expr *b, pp_expr *c)
{
    pp_expr *e = calloc(1, sizeof *e);
    if (!e) {
        free(name);
        ast_free_expr(a);
        ast_free_expr(b);
        ast_free_expr(c);
        return NULL;
    }
    e->name = name;
    e->a = a;
    e->b = b;
    e->c = c;
    e->kind = kind;
    e->loc = loc;
    e->depth = 1;
    return e;
}

static void set_depth(pp_expr *e)
{
    if (!e)
        return;
    const pp_expr *kids[3] = {e->a, e->b, e->c};
    for (int i = 0; i < 3; i++)
        if (kids[i] && kids[i]->depth >= e->depth)
            e->depth = kids[i]->depth + 1;
}

pp_expr *ast_int(long long v, pp_loc loc)
{
    pp_expr *e = node(EX_INT, loc, NULL, NULL, NULL, NULL);
    if (e)
        e->value = v;
    return e;
}

pp_expr *ast_name(char *name, pp_loc loc) { return node(EX_NAME, loc, name, NULL, NULL, NULL); }

pp_expr *ast_unary(int op, pp_expr *a, pp_loc loc)
{
    pp_expr *e = node(EX_UNARY, loc, NULL, a, NULL, NULL);
    if (e)
        e->op = op;
    set_depth(e);
    return e;
}

pp_expr *ast_binary(int op, pp_expr *a, pp_expr *b, pp_loc loc)
{
    pp_expr *e = node(EX_BINARY, loc, NULL, a, b, NULL);
    if (e)
        e->op = op;
    set_depth(e);
    return e;
}

pp_expr *ast_cond(pp_expr *a, pp_expr *b, pp_expr *c, pp_loc loc)
{
    pp_expr *e = node(EX_COND, loc, NULL, a, b, c);
    set_depth(e);
    return e;
}

pp_expr *ast_call(char *name, pp_expr *a, pp_expr *b, int nargs, pp_loc loc)
{
    pp_expr *e = node(EX_CALL, loc, name, a, b, NULL);
    if (e)
        e->nargs = nargs;
    set_depth(e);
    return e;
}

pp_stmt *ast_stmt(pp_stmt_kind kind, pp_loc loc)
{
    pp_stmt *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->kind = kind;
    s->loc = loc;
    s->name_loc = loc;
    return s;
}

void ast_free_expr(pp_expr *e)
{
    if (!e)
        return;
    ast_free_expr(e->a);
    ast_free_expr(e->b);
    ast_free_expr(e->c);
    free(e->name);
    free(e);
}

void ast_free_stmts(pp_stmt *s)
{
    while (s) {
        pp_stmt *next = s->next;
        ast_free_expr(s->expr);
        ast_free_stmts(s->body);
        free(s->name);
        free(s);
        s = next;
    }
}

pp_range *ast_range(pp_expr *lo, pp_expr *hi, pp_loc loc)
{
    pp_range *r = calloc(1, sizeof *r);
    if (!r) {
        ast_free_expr(lo);
        ast_free_expr(hi);
        return NULL;
    }
    r->lo = lo;
    r->hi = hi;
    r->loc = loc;
    return r;
}

pp_assign *ast_assign(char *name, pp_loc name_loc, pp_range *values)
{
    pp_assign *a = calloc(1, sizeof *a);
    if (!a) {
        free(name);
        ast_free_ranges(values);
        return NULL;
    }
    a->name = name;
    a->name_loc = name_loc;
    a->values = values;
    return a;
}

void ast_free_ranges(pp_range *r)
{
    while (r) {
        pp_range *next = r->next;
        ast_free_expr(r->lo);
        ast_free_expr(r->hi);
        free(r);
        r = next;
    }
}

void ast_free_assigns(pp_assign *a)
{
    while (a) {
        pp_assign *next = a->next;
        ast_free_ranges(a->values);
        free(a->name);
        free(a);
        a = next;
    }
}
