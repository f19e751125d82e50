/* parse.h - parsing a schedule file into statements (lexer.l + parser.y). */
#ifndef PP_PARSE_H
#define PP_PARSE_H

#include "ast.h"
#include "diag.h"

typedef struct {
    pp_diag *diag;
    pp_stmt *head, *tail; /* statements in source order */
    pp_stmt *model_head, *model_tail; /* fields of the model block being parsed */
} pp_parse_ctx;

/* Parse d->src. Returns the statement list (possibly partial after errors);
 * syntax errors are reported through d and counted in d->errors. */
pp_stmt *pp_parse(pp_diag *d);

#endif
