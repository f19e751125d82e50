/* parse.h - parsing a schedule file into statements, or a `# search:` line
 * into assignments (lexer.l + parser.y: one scanner, one grammar). */
#ifndef PP_PARSE_H
#define PP_PARSE_H

#include <setjmp.h>
#include <stddef.h>

#include "ast.h"
#include "diag.h"

typedef struct {
    pp_diag *diag;
    pp_stmt *head, *tail;              /* statements in source order */
    pp_stmt *model_head, *model_tail;  /* fields of the model block being parsed */
    pp_assign *assigns, *assigns_tail; /* a search line's assignments, in order */
    /* The token the scanner returns first, which picks the grammar's start
     * (a file or a search line: parse.c), and where the text starts. */
    int start;
    pp_loc origin;
    int search;            /* scanning a search line: its end is a token of its own */
    int ended;             /* that token was returned */
    jmp_buf *fatal;        /* where the scanner's fatal errors return to (parse.c) */
    const char *fatal_msg; /* and what flex said */
    char last_name[64];    /* the last name scanned: a syntax error's "did you mean" */
} pp_parse_ctx;

/* Parse d->src. Returns the statement list (possibly partial after errors);
 * syntax errors are reported through d and counted in d->errors. Out of
 * memory is reported too, and sets d->nomem. */
pp_stmt *pp_parse(pp_diag *d);

/* Parse the assignments of a `# search:` line (compiler/search.c):
 *
 *     NAME=VALUES [NAME=VALUES]...        VALUES := ITEM ("," ITEM)*
 *     ITEM := expr | expr ".." expr       (an inclusive range)
 *
 * with the file's expressions, tokens and comments. The text is
 * d->src[off, off + len), which starts at (line, col) of d->src, so that
 * errors point into the file. Returns the assignments, or NULL after an
 * error (reported through d: the first syntax error ends the line). */
pp_assign *pp_parse_search(pp_diag *d, size_t off, size_t len, int line, int col);

#endif
