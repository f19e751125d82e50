/* parse.c - runs the reentrant scanner and the pure parser over a source
 * text: a whole file, or one `# search:` line of it. */
#include "parse.h"

#include <stdlib.h>
#include <string.h>

#include "parser.h"
#include "lexer.h"

/* The scan and parse, to which flex's fatal errors (out of memory for its
 * buffer state) return: -1 then, 0 otherwise. Nothing this frame changes
 * after setjmp is read after the longjmp. The text is scanned in place from
 * buf (the source and flex's two end-of-buffer NULs), which run owns;
 * only a failure between flex's two allocations in yy_scan_buffer can leak
 * its buffer state (a few dozen bytes, once, on the way out of memory). */
static int scan_and_parse(pp_parse_ctx *ctx, yyscan_t scanner, char *buf, size_t size)
{
    jmp_buf fatal;
    ctx->fatal = &fatal;
    if (setjmp(fatal))
        return -1;
    YY_BUFFER_STATE b = yy_scan_buffer(buf, size, scanner);
    yyparse(scanner, ctx);
    yy_delete_buffer(b, scanner);
    return 0;
}

/* Scans and parses text[0..len) into ctx; errors through ctx->diag. */
static void run(pp_parse_ctx *ctx, const char *text, size_t len)
{
    pp_diag *d = ctx->diag;
    yyscan_t scanner;
    if (yylex_init_extra(ctx, &scanner) != 0) {
        diag_nomem(d, "initialising the scanner");
        return;
    }
    char *buf = malloc(len + 2);
    if (!buf)
        diag_nomem(d, "for the scanner's copy of the source");
    else {
        memcpy(buf, text, len);
        buf[len] = buf[len + 1] = '\0';
        if (scan_and_parse(ctx, scanner, buf, len + 2))
            diag_nomem(d, "in the scanner (%s)", ctx->fatal_msg);
    }
    yylex_destroy(scanner);
    free(buf);
}

pp_stmt *pp_parse(pp_diag *d)
{
    pp_parse_ctx ctx = {.diag = d, .start = START_FILE, .origin = {1, 1, 1, 0}};
    run(&ctx, d->src, d->len);
    ast_free_stmts(ctx.model_head); /* fields of an unfinished model block */
    return ctx.head;
}

pp_assign *pp_parse_search(pp_diag *d, size_t off, size_t len, int line, int col)
{
    pp_parse_ctx ctx = {
        .diag = d, .start = START_SEARCH, .origin = {line, col, line, col - 1}, .search = 1};
    int before = d->errors;
    run(&ctx, d->src + off, len);
    if (d->errors == before)
        return ctx.assigns;
    ast_free_assigns(ctx.assigns);
    return NULL;
}
