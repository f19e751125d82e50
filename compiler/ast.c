/* ast.c - constructors and destructors for the schedule syntax tree. */
#include "ast.h"

#include <stdio.h>
#include <stdlib.h>

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "ppc: out of memory\n");
        exit(3);
    }
    return p;
}

static pp_expr *node(pp_expr_kind kind, pp_loc loc)
{
    pp_expr *e = xcalloc(1, sizeof *e);
    e->kind = kind;
    e->loc = loc;
    e->depth = 1;
    return e;
}

static void set_depth(pp_expr *e)
{
    const pp_expr *kids[3] = {e->a, e->b, e->c};
    for (int i = 0; i < 3; i++)
        if (kids[i] && kids[i]->depth >= e->depth)
            e->depth = kids[i]->depth + 1;
}

pp_expr *ast_int(long long v, pp_loc loc)
{
    pp_expr *e = node(EX_INT, loc);
    e->value = v;
    return e;
}

pp_expr *ast_name(char *name, pp_loc loc)
{
    pp_expr *e = node(EX_NAME, loc);
    e->name = name;
    return e;
}

pp_expr *ast_unary(int op, pp_expr *a, pp_loc loc)
{
    pp_expr *e = node(EX_UNARY, loc);
    e->op = op;
    e->a = a;
    set_depth(e);
    return e;
}

pp_expr *ast_binary(int op, pp_expr *a, pp_expr *b, pp_loc loc)
{
    pp_expr *e = node(EX_BINARY, loc);
    e->op = op;
    e->a = a;
    e->b = b;
    set_depth(e);
    return e;
}

pp_expr *ast_cond(pp_expr *a, pp_expr *b, pp_expr *c, pp_loc loc)
{
    pp_expr *e = node(EX_COND, loc);
    e->a = a;
    e->b = b;
    e->c = c;
    set_depth(e);
    return e;
}

pp_expr *ast_call(char *name, pp_expr *a, pp_expr *b, int nargs, pp_loc loc)
{
    pp_expr *e = node(EX_CALL, loc);
    e->name = name;
    e->a = a;
    e->b = b;
    e->nargs = nargs;
    set_depth(e);
    return e;
}

pp_stmt *ast_stmt(pp_stmt_kind kind, pp_loc loc)
{
    pp_stmt *s = xcalloc(1, sizeof *s);
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
