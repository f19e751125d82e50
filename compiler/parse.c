/* parse.c - runs the reentrant scanner and the pure parser over a source text. */
#include "parse.h"

#include "parser.h"
#include "lexer.h"

pp_stmt *pp_parse(pp_diag *d)
{
    pp_parse_ctx ctx = {.diag = d};
    yyscan_t scanner;
    if (yylex_init_extra(&ctx, &scanner) != 0) {
        diag_error_noloc(d, "cannot initialise the scanner");
        return NULL;
    }
    YY_BUFFER_STATE buf = yy_scan_bytes(d->src, (int)d->len, scanner);
    yyparse(scanner, &ctx);
    yy_delete_buffer(buf, scanner);
    yylex_destroy(scanner);
    ast_free_stmts(ctx.model_head); /* fields of an unfinished model block */
    return ctx.head;
}
