/* user_model.c - the model block of a user's .pp file, for `ppc --search
 * FILE` and `ppc SCHEDULE --model FILE` (see user_model.h). */
#include "user_model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "readfile.h"

/* What the file's statements say: a model block, a compute function, and
 * which of the counts S, B, W it defines as params. */
typedef struct {
    int model;        /* a model block */
    pp_loc model_loc; /* the first's (the same in the framed text: it comes after) */
    int compute, S, B, W;
} stmts_seen;

static stmts_seen scan(const pp_stmt *st)
{
    stmts_seen s = {0};
    for (; st; st = st->next) {
        if (st->kind == ST_MODEL && !s.model) {
            s.model = 1;
            s.model_loc = st->loc;
        }
        if (st->kind == ST_FUNC && st->func == FN_COMPUTE)
            s.compute = 1;
        if (st->kind == ST_PARAM && st->name) {
            s.S |= !strcmp(st->name, "S");
            s.B |= !strcmp(st->name, "B");
            s.W |= !strcmp(st->name, "W");
        }
    }
    return s;
}

/* The file's text with what a check needs and a model file need not have
 * appended after it (S = 2 stages, so that `tie = 1` is checked; one
 * microbatch; a worker a stage): the file's own lines keep their numbers
 * in messages. NULL when out of memory. */
static char *with_frame(const char *src, size_t len, stmts_seen s, size_t *out_len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    if (!m)
        return NULL;
    fwrite(src, 1, len, m);
    fputc('\n', m);
    if (!s.S)
        fputs("param S = 2\n", m);
    if (!s.B)
        fputs("param B = 1\n", m);
    if (!s.W)
        fputs("param W = S\n", m);
    if (!s.compute)
        fputs("compute(s,b,d) = s % W\n", m);
    if (fclose(m)) {
        free(buf);
        return NULL;
    }
    *out_len = n;
    return buf;
}

/* The parse of the file: 0 with *s filled, -1 errors (printed), 1 out of
 * memory or unreadable (printed). */
static int parse_file(const char *path, char **src, size_t *len, stmts_seen *s, FILE *err)
{
    const char *step = "open";
    *src = pp_read_file(path, len, &step);
    if (!*src) {
        if (errno == ENOMEM)
            fprintf(err, "ppc: out of memory reading '%s'\n", path);
        else if (errno == 0)
            fprintf(err, "ppc: cannot read the model file '%s': it is %s, not a .pp file\n", path,
                    step);
        else
            fprintf(err, "ppc: cannot read the model file '%s': %s\n", path, strerror(errno));
        return 1;
    }
    pp_compile_opts co = pp_compile_defaults();
    co.path = path;
    co.text = *src;
    co.len = *len;
    co.stop_after = PP_STAGE_PARSE;
    co.diag_out = err;
    pp_compiled c;
    pp_compile_status st = pp_compile(&co, &c);
    int rc = st == PP_COMPILE_NOMEM ? 1 : st != PP_COMPILE_OK ? -1 : 0;
    if (!rc)
        *s = scan(c.stmts);
    if (rc < 0)
        fprintf(err, "%s: %d error%s\n", path, c.errors, c.errors == 1 ? "" : "s");
    pp_compiled_free(&c);
    return rc;
}

int pp_user_model_load(const char *path, pp_user_model *um, FILE *err)
{
    memset(um, 0, sizeof *um);
    char *src;
    size_t len;
    stmts_seen s;
    int rc = parse_file(path, &src, &len, &s, err);
    if (rc) {
        free(src);
        return rc;
    }
    if (!s.model) {
        fprintf(err,
                "%s: error: no model block: --search FILE and --model FILE take the model "
                "from FILE's 'model { ... }' block; expected one, e.g. 'model gpt { layers = "
                "8 }'\n",
                path);
        free(src);
        return -1;
    }
    size_t tlen = 0;
    char *text = with_frame(src, len, s, &tlen);
    free(src);
    if (!text) {
        fprintf(err, "ppc: out of memory reading '%s'\n", path);
        return 1;
    }
    pp_compile_opts co = pp_compile_defaults();
    co.path = path;
    co.text = text;
    co.len = tlen;
    co.stop_after = PP_STAGE_CHECK;
    co.diag_out = err;
    pp_compiled c;
    pp_compile_status st = pp_compile(&co, &c);
    rc = st == PP_COMPILE_NOMEM ? 1 : st != PP_COMPILE_OK ? -1 : 0;
    const pp_schedule *sch = &c.sch;
    const char *what = sch->model.kind != PP_MODEL_MLP ? "layers" : "blocks";
    if (!rc && sch->layers_expr) {
        diag_error(&c.diag, sch->layers_expr->loc,
                   "the model's %s are the whole model's for --search FILE and --model FILE "
                   "(each schedule splits them over its stages): expected a number or auto(L), "
                   "not an expression of s",
                   what);
        rc = -1;
    }
    um->total = sch->auto_layers ? sch->auto_layers : (long long)sch->model.blocks;
    if (!rc && um->total < 1) {
        diag_error(&c.diag, s.model_loc,
                   "the model has 0 %s: expected at least one, the whole model's count", what);
        rc = -1;
    }
    if (rc < 0)
        fprintf(err, "%s: %d error%s\n", path, c.diag.errors, c.diag.errors == 1 ? "" : "s");
    if (!rc) {
        um->model = sch->model;
        um->model.layers = NULL; /* the schedule's array, freed below */
        um->model.blocks = (uint32_t)(um->total > PP_MAX_LAYERS ? PP_MAX_LAYERS : um->total);
        um->tensor = sch->tensor_expr ? (int)pp_model_tensor(&sch->model) : 0;
        um->optimizer = um->precision = -1;
        for (const pp_stmt *x = c.stmts; x; x = x->next) {
            if (x->kind == ST_OPTIMIZER)
                um->optimizer = x->flag;
            if (x->kind == ST_PRECISION)
                um->precision = x->flag;
        }
        for (int i = 0; s.B && i < sch->nparams; i++)
            if (!strcmp(sch->params[i].name, "B"))
                um->B = sch->params[i].value;
    }
    pp_compiled_free(&c);
    free(text);
    return rc;
}
