/* parse.h - parsing a schedule file into statements (lexer.l + parser.y). */
#ifndef PP_PARSE_H
#define PP_PARSE_H

#include <setjmp.h>

#include "ast.h"
#include "diag.h"

typedef struct {
    pp_diag *diag;
    pp_stmt *head, *tail; /* statements in source order */
    pp_stmt *model_head, *model_tail; /* fields of the model block being parsed */
    jmp_buf *fatal;          /* where the scanner's fatal errors return to (parse.c) */
    const char *fatal_msg;   /* and what flex said */
} pp_parse_ctx;

/* Parse d->src. Returns the statement list (possibly partial after errors);
 * syntax errors are reported through d and counted in d->errors. Out of
 * memory is reported too, and sets d->nomem. */
pp_stmt *pp_parse(pp_diag *d);

#endif
