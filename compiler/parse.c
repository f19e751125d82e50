/* parse.c - runs the reentrant scanner and the pure parser over a source text. */
#include "parse.h"

#include "parser.h"
#include "lexer.h"

/* The scan and parse, to which flex's fatal errors (out of memory for its
 * buffers) return: -1 then, 0 otherwise. Nothing this frame changes after
 * setjmp is read after the longjmp. */
static int scan_and_parse(pp_parse_ctx *ctx, yyscan_t scanner)
{
    jmp_buf fatal;
    ctx->fatal = &fatal;
    if (setjmp(fatal))
        return -1;
    YY_BUFFER_STATE buf = yy_scan_bytes(ctx->diag->src, (int)ctx->diag->len, scanner);
    yyparse(scanner, ctx);
    yy_delete_buffer(buf, scanner);
    return 0;
}

pp_stmt *pp_parse(pp_diag *d)
{
    pp_parse_ctx ctx = {.diag = d};
    yyscan_t scanner;
    if (yylex_init_extra(&ctx, &scanner) != 0) {
        diag_nomem(d, "initialising the scanner");
        return NULL;
    }
    if (scan_and_parse(&ctx, scanner))
        diag_nomem(d, "in the scanner (%s)", ctx.fatal_msg);
    yylex_destroy(scanner);
    ast_free_stmts(ctx.model_head); /* fields of an unfinished model block */
    return ctx.head;
}
