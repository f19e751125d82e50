/* parser.y - the grammar of .pp schedule files (a pure bison parser).
 *
 *   file   := stmt*
 *   stmt   := "param" NAME "=" expr | "let" NAME "=" expr
 *           | ("compute"|"weights"|"priority") "(" s "," b "," d ")" "=" expr
 *           | "order" ("greedy"|"strict") | "split" "backward"
 *           | "limit" "inflight" "=" expr | "cost" (F|B|W|latency|bandwidth) "=" expr
 *           | "model" ["mlp"|"gpt"] "{" (NAME "=" expr)* "}" | "optimizer" ("sgd"|"adamw")
 *           | "precision" ("fp32"|"bf16")
 *           | "require" expr ["," STRING] | "split" "backward" "when" expr
 *           | "overlap" "F" ("with"|"then") "B" "when" expr | "cost" "overlap" "=" expr
 *           | "tensor" "=" expr
 *   Statements may be separated by ';'. Expressions are C-like with
 *   ?:, ||, &&, comparisons, + -, * / %, unary - and !, and min/max/abs.
 *
 * The same grammar parses a `# search:` line's assignments (parse.h,
 * pp_parse_search), with the same expressions:
 *   search := (NAME "=" item ("," item)*)+ END-OF-LINE
 *   item   := expr | expr ".." expr
 * The scanner's first token (START_FILE or START_SEARCH, never in the
 * text) picks which. */
%define api.pure full
%define parse.error detailed
%locations
%define api.location.type {pp_loc}
%param { void *scanner }
%parse-param { pp_parse_ctx *ctx }

%code requires {
#include "parse.h"
}

%code {
#include <stdlib.h>
#include <string.h>

#include "../isa/model_desc.h"
#include "../isa/suggest.h"

int yylex(YYSTYPE *lval, YYLTYPE *lloc, void *scanner);
static void yyerror(YYLTYPE *loc, void *scanner, pp_parse_ctx *ctx, const char *msg);
static const char *keyword_near(const char *name);
static void append(pp_parse_ctx *ctx, pp_stmt *s);
static pp_stmt *func_stmt(pp_parse_ctx *ctx, int func, YYLTYPE loc, char *a, YYLTYPE la,
                          char *b, YYLTYPE lb, char *d, YYLTYPE ld, pp_expr *e);
static pp_stmt *word_stmt(pp_parse_ctx *ctx, pp_stmt_kind kind, YYLTYPE loc, char *word,
                          YYLTYPE wloc);
static pp_stmt *named_stmt(pp_parse_ctx *ctx, pp_stmt_kind kind, YYLTYPE loc, char *name,
                           YYLTYPE nloc, pp_expr *e);
static int too_deep(pp_parse_ctx *ctx, pp_expr *e);
static void append_assign(pp_parse_ctx *ctx, pp_assign *a);
static pp_stmt *require_stmt(pp_parse_ctx *ctx, YYLTYPE loc, pp_expr *e, YYLTYPE eloc, char *msg);
static pp_stmt *split_when_stmt(pp_parse_ctx *ctx, YYLTYPE loc, char *word, YYLTYPE wloc,
                                char *when, YYLTYPE whenloc, pp_expr *e);
static pp_stmt *recompute_when_stmt(pp_parse_ctx *ctx, YYLTYPE loc, char *when, YYLTYPE whenloc,
                                    pp_expr *e);
static pp_stmt *overlap_stmt(pp_parse_ctx *ctx, YYLTYPE loc, char *w[4], YYLTYPE wl[4],
                             pp_expr *e);
static pp_stmt *offload_when_stmt(pp_parse_ctx *ctx, YYLTYPE loc, char *when, YYLTYPE whenloc,
                                  pp_expr *e);

/* Bison's stack of pending symbols: a file nesting deeper (a long run of
 * '(' or unary '-', each waiting for its operand) overflows it, and bison
 * then reports its own "memory exhausted"; yyerror says it in our words. */
#define YYMAXDEPTH (PP_PARSER_MAX_DEPTH + 1) /* and the start token (START_FILE...) */

/* A tree deeper than PP_MAX_EXPR_DEPTH is reported, freed, and the parser
 * recovers at the next statement, so no later pass recurses deeper. */
#define CHECK_DEPTH(e)         \
    do {                       \
        if (too_deep(ctx, e))  \
            YYERROR;           \
    } while (0)

/* Out of memory stops the parse: the node's constructor has freed what it
 * was given, and bison does not destroy the symbols of the rule whose
 * action aborts, so nothing is freed twice. */
#define NEED(x)                                          \
    do {                                                 \
        if (!(x)) {                                      \
            diag_nomem(ctx->diag, "while parsing");      \
            YYABORT;                                     \
        }                                                \
    } while (0)
/* The same after a helper that reports it itself. */
#define STOP_IF_NOMEM()             \
    do {                            \
        if (ctx->diag->nomem)       \
            YYABORT;                \
    } while (0)
}

%union {
    long long num;
    double real;
    char *str;
    pp_expr *expr;
    pp_stmt *stmt;
    pp_range *range;
    struct { pp_range *head, *tail; } ranges; /* a search value list, in order */
}

%token <num> INT "integer"
%token <real> REAL "decimal number"
%token <str> IDENT "name"
%token PARAM "param" LET "let" COMPUTE "compute" WEIGHTS "weights" PRIORITY "priority"
%token ORDER "order" SPLIT "split" LIMIT "limit" COST "cost" MODEL "model"
%token OPTIMIZER "optimizer" PRECISION "precision" REQUIRE "require"
%token OVERLAP "overlap"
%token RECOMPUTE "recompute"
%token TENSOR "tensor"
%token OFFLOAD "offload"
%token <str> STRING "string"
%token EQ "==" NE "!=" LE "<=" GE ">=" AND "&&" OR "||"
%token DOTDOT ".."
%token END_OF_LINE "end of the line" /* a search line's end (lexer.l) */
%token START_FILE START_SEARCH       /* the first token: which grammar (parse.c) */

%type <expr> expr
%type <stmt> stmt overlap_stmt recompute_stmt offload_stmt
%type <range> item
%type <ranges> values
%destructor { free($$); } <str>
%destructor { ast_free_expr($$); } <expr>
%destructor { ast_free_stmts($$); } <stmt>
%destructor { ast_free_ranges($$); } <range>
%destructor { ast_free_ranges($$.head); } <ranges>

%right '?' ':'
%left OR
%left AND
%left EQ NE
%left '<' '>' LE GE
%left '+' '-'
%left '*' '/' '%'
%precedence UNARY

%initial-action { @$ = ctx->origin; }

%%

top: START_FILE file
   | START_SEARCH search
   ;

file: %empty
    | file stmt       { if ($2) append(ctx, $2); }
    | file ';'
    | file error      { }
    ;

stmt: PARAM IDENT '=' expr  { $$ = named_stmt(ctx, ST_PARAM, @1, $2, @2, $4); STOP_IF_NOMEM(); }
    | LET IDENT '=' expr    { $$ = named_stmt(ctx, ST_LET, @1, $2, @2, $4); STOP_IF_NOMEM(); }
    | COMPUTE '(' IDENT ',' IDENT ',' IDENT ')' '=' expr
                            { $$ = func_stmt(ctx, FN_COMPUTE, @1, $3, @3, $5, @5, $7, @7, $10);
                              STOP_IF_NOMEM(); }
    | WEIGHTS '(' IDENT ',' IDENT ',' IDENT ')' '=' expr
                            { $$ = func_stmt(ctx, FN_WEIGHTS, @1, $3, @3, $5, @5, $7, @7, $10);
                              STOP_IF_NOMEM(); }
    | PRIORITY '(' IDENT ',' IDENT ',' IDENT ')' '=' expr
                            { $$ = func_stmt(ctx, FN_PRIORITY, @1, $3, @3, $5, @5, $7, @7, $10);
                              STOP_IF_NOMEM(); }
    | ORDER IDENT           { $$ = word_stmt(ctx, ST_ORDER, @1, $2, @2); STOP_IF_NOMEM(); }
    | SPLIT IDENT           { $$ = word_stmt(ctx, ST_SPLIT, @1, $2, @2); STOP_IF_NOMEM(); }
    | OPTIMIZER IDENT       { $$ = word_stmt(ctx, ST_OPTIMIZER, @1, $2, @2); STOP_IF_NOMEM(); }
    | PRECISION IDENT       { $$ = word_stmt(ctx, ST_PRECISION, @1, $2, @2); STOP_IF_NOMEM(); }
    | SPLIT IDENT IDENT expr
                            { $$ = split_when_stmt(ctx, @1, $2, @2, $3, @3, $4); STOP_IF_NOMEM(); }
    | REQUIRE expr          { $$ = require_stmt(ctx, @1, $2, @2, NULL); STOP_IF_NOMEM(); }
    | REQUIRE expr ',' STRING
                            { $$ = require_stmt(ctx, @1, $2, @2, $4); STOP_IF_NOMEM(); }
    | LIMIT IDENT '=' expr  { $$ = word_stmt(ctx, ST_LIMIT, @1, $2, @2);
                              if ($$) $$->expr = $4; else ast_free_expr($4); STOP_IF_NOMEM(); }
    | COST IDENT '=' expr   { $$ = word_stmt(ctx, ST_COST, @1, $2, @2);
                              if ($$) $$->expr = $4; else ast_free_expr($4); STOP_IF_NOMEM(); }
    | MODEL '{' fields '}'  { $$ = ast_stmt(ST_MODEL, @1); NEED($$); $$->body = ctx->model_head;
                              $$->flag = PP_MODEL_MLP; ctx->model_head = ctx->model_tail = NULL; }
    | MODEL IDENT '{' fields '}'
                            { $$ = word_stmt(ctx, ST_MODEL, @1, $2, @2);
                              if ($$) $$->body = ctx->model_head; else ast_free_stmts(ctx->model_head);
                              ctx->model_head = ctx->model_tail = NULL; STOP_IF_NOMEM(); }
    | overlap_stmt          { $$ = $1; }
    | recompute_stmt        { $$ = $1; }
    /* `tensor = expr` (issue 27): tensor-parallel ranks per worker */
    | TENSOR '=' expr       { $$ = ast_stmt(ST_TENSOR, @1); NEED($$); $$->expr = $3; }
    | offload_stmt          { $$ = $1; }
    ;

/* Offload (schedule.h): `offload` or `offload when EXPR`, as recompute. */
offload_stmt: OFFLOAD       { $$ = ast_stmt(ST_OFFLOAD, @1); NEED($$); }
    | OFFLOAD IDENT expr    { $$ = offload_when_stmt(ctx, @1, $2, @2, $3); STOP_IF_NOMEM(); }
    ;

/* Recomputation (schedule.h): `recompute` or `recompute when EXPR`. "when"
 * is a name, not a keyword, as in 'split backward when'. */
recompute_stmt: RECOMPUTE   { $$ = ast_stmt(ST_RECOMPUTE, @1); NEED($$); }
    | RECOMPUTE IDENT expr  { $$ = recompute_when_stmt(ctx, @1, $2, @2, $3); STOP_IF_NOMEM(); }
    ;

/* Overlapped jobs (schedule.h), kept in rules of their own. "with" and
 * "when" are names, not keywords, so they stay free for params and lets. */
overlap_stmt: OVERLAP IDENT IDENT IDENT IDENT expr
                            { char *w[4] = {$2, $3, $4, $5};
                              YYLTYPE wl[4] = {@2, @3, @4, @5};
                              $$ = overlap_stmt(ctx, @1, w, wl, $6); STOP_IF_NOMEM(); }
    | COST OVERLAP '=' expr { $$ = ast_stmt(ST_COST, @1); NEED($$); $$->name_loc = @2;
                              $$->dir = COST_OVERLAP; $$->expr = $4; }
    ;

fields: %empty
      | fields IDENT '=' expr {
            pp_stmt *f = named_stmt(ctx, ST_LET, @2, $2, @2, $4);
            STOP_IF_NOMEM();
            if (ctx->model_tail) ctx->model_tail->next = f; else ctx->model_head = f;
            ctx->model_tail = f;
        }
      | fields IDENT '=' REAL { /* only a real-valued field (llama's norm_eps) takes one */
            pp_stmt *f = named_stmt(ctx, ST_LET, @2, $2, @2, NULL);
            STOP_IF_NOMEM();
            f->real = $4;
            f->name_loc = @4; /* where a wrong use of the number points */
            if (ctx->model_tail) ctx->model_tail->next = f; else ctx->model_head = f;
            ctx->model_tail = f;
        }
      | fields ';'
      ;

/* A search line (compiler/search.c): assignments until the line ends. A
 * syntax error ends it: there is no recovery rule, so the first error is
 * the only one. */
search: assigns END_OF_LINE
      ;

assigns: assign
       | assigns assign
       ;

assign: IDENT '=' values      { pp_assign *a = ast_assign($1, @1, $3.head); NEED(a);
                                append_assign(ctx, a); }
      ;

values: item                  { $$.head = $$.tail = $1; }
      | values ',' item       { $$ = $1; $$.tail->next = $3; $$.tail = $3; }
      ;

item: expr                    { $$ = ast_range($1, NULL, @$); NEED($$); }
    | expr DOTDOT expr        { $$ = ast_range($1, $3, @$); NEED($$); }
    ;

expr: INT                     { $$ = ast_int($1, @1); NEED($$); }
    | IDENT                   { $$ = ast_name($1, @1); NEED($$); }
    | IDENT '(' expr ')'      { $$ = ast_call($1, $3, NULL, 1, @$); NEED($$); CHECK_DEPTH($$); }
    | IDENT '(' expr ',' expr ')' { $$ = ast_call($1, $3, $5, 2, @$); NEED($$); CHECK_DEPTH($$); }
    | '(' expr ')'            { $$ = $2; }
    | '-' expr %prec UNARY    { $$ = ast_unary('-', $2, @$); NEED($$); CHECK_DEPTH($$); }
    | '!' expr %prec UNARY    { $$ = ast_unary('!', $2, @$); NEED($$); CHECK_DEPTH($$); }
    | expr '+' expr           { $$ = ast_binary('+', $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr '-' expr           { $$ = ast_binary('-', $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr '*' expr           { $$ = ast_binary('*', $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr '/' expr           { $$ = ast_binary('/', $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr '%' expr           { $$ = ast_binary('%', $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr '<' expr           { $$ = ast_binary('<', $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr '>' expr           { $$ = ast_binary('>', $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr LE expr            { $$ = ast_binary(OP_LE, $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr GE expr            { $$ = ast_binary(OP_GE, $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr EQ expr            { $$ = ast_binary(OP_EQ, $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr NE expr            { $$ = ast_binary(OP_NE, $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr AND expr           { $$ = ast_binary(OP_AND, $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr OR expr            { $$ = ast_binary(OP_OR, $1, $3, @2); NEED($$); CHECK_DEPTH($$); }
    | expr '?' expr ':' expr  { $$ = ast_cond($1, $3, $5, @2); NEED($$); CHECK_DEPTH($$); }
    ;

%%

static void yyerror(YYLTYPE *loc, void *scanner, pp_parse_ctx *ctx, const char *msg)
{
    (void)scanner;
    if (ctx->diag->nomem) /* out of memory ends the input: no "unexpected end of file" */
        return;
    if (!strcmp(msg, YY_("memory exhausted"))) /* the stack reached YYMAXDEPTH */
        diag_error(ctx->diag, *loc,
                   "nested too deeply: the parser holds at most %d pending symbols (parentheses, "
                   "operators and operands still open); %s",
                   PP_PARSER_MAX_DEPTH,
                   ctx->search ? "nest less" : "split the expression with 'let'");
    else if (!ctx->search && strstr(msg, "unexpected name") && keyword_near(ctx->last_name))
        /* a statement's first word misspelt: "parm S = 4", "weight(s,b,d) = s" */
        diag_error(ctx->diag, *loc, "%s '%s' (did you mean '%s'?)", msg, ctx->last_name,
                   keyword_near(ctx->last_name));
    else
        diag_error(ctx->diag, *loc, "%s", msg);
}

/* The keyword `name` is a slip of, or NULL (lexer.l's keywords). */
static const char *keyword_near(const char *name)
{
    static const char *const words[] = {"param", "let",       "compute",   "weights", "priority",
                                        "order", "split",     "limit",     "cost",    "model",
                                        "optimizer", "precision", "require", "overlap",
                                        "recompute", "tensor", "offload"};
    return pp_suggest(name, words, sizeof words / sizeof *words);
}

static int too_deep(pp_parse_ctx *ctx, pp_expr *e)
{
    if (e->depth <= PP_MAX_EXPR_DEPTH)
        return 0;
    diag_error(ctx->diag, e->loc, "expression nested more than %d levels deep",
               PP_MAX_EXPR_DEPTH);
    ast_free_expr(e);
    return 1;
}

static void append(pp_parse_ctx *ctx, pp_stmt *s)
{
    if (ctx->tail)
        ctx->tail->next = s;
    else
        ctx->head = s;
    ctx->tail = s;
}

static void append_assign(pp_parse_ctx *ctx, pp_assign *a)
{
    if (ctx->assigns_tail)
        ctx->assigns_tail->next = a;
    else
        ctx->assigns = a;
    ctx->assigns_tail = a;
}

static pp_loc L(YYLTYPE y) { return y; }

/* The head of compute/weights/priority must name the job variables in the
 * seed's order: (s, b, d). */
static pp_stmt *func_stmt(pp_parse_ctx *ctx, int func, YYLTYPE loc, char *a, YYLTYPE la,
                          char *b, YYLTYPE lb, char *d, YYLTYPE ld, pp_expr *e)
{
    const char *want[3] = {"s", "b", "d"};
    char *got[3] = {a, b, d};
    YYLTYPE where[3] = {la, lb, ld};
    for (int i = 0; i < 3; i++)
        if (strcmp(got[i], want[i]) != 0)
            diag_error(ctx->diag, L(where[i]),
                       "parameter %d of this function must be '%s' (functions are written f(s,b,d)), found '%s'",
                       i + 1, want[i], got[i]);
    free(a);
    free(b);
    free(d);
    pp_stmt *s = ast_stmt(ST_FUNC, L(loc));
    if (!s) {
        ast_free_expr(e);
        diag_nomem(ctx->diag, "while parsing");
        return NULL;
    }
    s->func = func;
    s->expr = e;
    return s;
}

/* Statements whose second word is one of a few fixed words. */
static pp_stmt *word_stmt(pp_parse_ctx *ctx, pp_stmt_kind kind, YYLTYPE loc, char *word,
                          YYLTYPE wloc)
{
    pp_stmt *s = ast_stmt(kind, L(loc));
    if (!s) {
        free(word);
        diag_nomem(ctx->diag, "while parsing");
        return NULL;
    }
    s->name_loc = L(wloc);
    int ok = 1;
    switch (kind) {
    case ST_ORDER:
        if (!strcmp(word, "greedy"))
            s->flag = 0;
        else if (!strcmp(word, "strict"))
            s->flag = 1;
        else {
            diag_error(ctx->diag, L(wloc), "unknown order '%s': expected 'greedy' or 'strict'", word);
            ok = 0;
        }
        break;
    case ST_OPTIMIZER:
        s->flag = pp_optimizer_parse(word);
        if (s->flag < 0) {
            diag_error(ctx->diag, L(wloc), "unknown optimizer '%s': expected 'sgd' or 'adamw'",
                       word);
            ok = 0;
        }
        break;
    case ST_PRECISION:
        s->flag = pp_precision_parse(word);
        if (s->flag < 0) {
            diag_error(ctx->diag, L(wloc), "unknown precision '%s': expected 'fp32' or 'bf16'",
                       word);
            ok = 0;
        }
        break;
    case ST_MODEL:
        s->flag = pp_model_kind_parse(word);
        if (s->flag < 0) {
            diag_error(ctx->diag, L(wloc), "unknown model '%s': expected 'mlp', 'gpt' or 'llama'", word);
            ok = 0;
        }
        break;
    case ST_SPLIT:
        if (strcmp(word, "backward") != 0) {
            diag_error(ctx->diag, L(wloc), "expected 'split backward', found 'split %s'", word);
            ok = 0;
        }
        break;
    case ST_LIMIT:
        if (strcmp(word, "inflight") != 0) {
            diag_error(ctx->diag, L(wloc), "unknown limit '%s': expected 'inflight'", word);
            ok = 0;
        }
        break;
    case ST_COST:
        if (!strcmp(word, "F"))
            s->dir = 0;
        else if (!strcmp(word, "B"))
            s->dir = 1;
        else if (!strcmp(word, "W"))
            s->dir = 2;
        else if (!strcmp(word, "R"))
            s->dir = COST_R;
        else if (!strcmp(word, "latency"))
            s->dir = COST_LATENCY;
        else if (!strcmp(word, "bandwidth"))
            s->dir = COST_BANDWIDTH;
        else if (!strcmp(word, "tensor_latency")) /* issue 27 */
            s->dir = COST_TENSOR_LATENCY;
        else if (!strcmp(word, "tensor_bandwidth"))
            s->dir = COST_TENSOR_BANDWIDTH;
        else if (!strcmp(word, "host_bandwidth"))
            s->dir = COST_HOST_BANDWIDTH;
        else {
            diag_error(ctx->diag, L(wloc),
                       "unknown cost '%s': expected F, B, W, R, latency, bandwidth, overlap, "
                       "tensor_latency, tensor_bandwidth or host_bandwidth",
                       word);
            ok = 0;
        }
        break;
    default:
        break;
    }
    free(word);
    if (!ok) {
        free(s);
        return NULL;
    }
    return s;
}

/* `overlap F with B when expr` or `overlap F then B when expr` (the
 * forward pairs only with the backward right after it: flag = 1): the
 * four words must be exactly these; a wrong one is reported at its column,
 * saying the whole form. */
static pp_stmt *overlap_stmt(pp_parse_ctx *ctx, YYLTYPE loc, char *w[4], YYLTYPE wl[4],
                             pp_expr *e)
{
    static const char *want[4] = {"F", "with", "B", "when"};
    int ok = 1, then = strcmp(w[1], "then") == 0;
    for (int i = 0; i < 4; i++)
        if (ok && strcmp(w[i], want[i]) != 0 && !(i == 1 && then)) {
            diag_error(ctx->diag, L(wl[i]),
                       "expected 'overlap F with B when EXPR' or 'overlap F then B when EXPR', "
                       "found '%s' where %s goes",
                       w[i], i == 1 ? "'with' or 'then'" : i == 0 ? "'F'" : i == 2 ? "'B'" : "'when'");
            ok = 0;
        }
    for (int i = 0; i < 4; i++)
        free(w[i]);
    if (!ok) {
        ast_free_expr(e);
        return NULL;
    }
    pp_stmt *s = ast_stmt(ST_OVERLAP, L(loc));
    if (!s) {
        ast_free_expr(e);
        diag_nomem(ctx->diag, "while parsing");
        return NULL;
    }
    s->expr = e;
    s->flag = then;
    return s;
}

/* `kind NAME = expr` (param, let, a model field); NULL out of memory, with
 * name and e freed. */
static pp_stmt *named_stmt(pp_parse_ctx *ctx, pp_stmt_kind kind, YYLTYPE loc, char *name,
                           YYLTYPE nloc, pp_expr *e)
{
    pp_stmt *s = ast_stmt(kind, L(loc));
    if (!s) {
        free(name);
        ast_free_expr(e);
        diag_nomem(ctx->diag, "while parsing");
        return NULL;
    }
    s->name = name;
    s->name_loc = L(nloc);
    s->expr = e;
    return s;
}

/* `require expr [, "message"]`: the expression's whole span (name_loc) is
 * where the caret goes and what the error quotes; name holds the message. */
static pp_stmt *require_stmt(pp_parse_ctx *ctx, YYLTYPE loc, pp_expr *e, YYLTYPE eloc, char *msg)
{
    pp_stmt *s = ast_stmt(ST_REQUIRE, L(loc));
    if (!s) {
        free(msg);
        ast_free_expr(e);
        diag_nomem(ctx->diag, "while parsing");
        return NULL;
    }
    s->name = msg;
    s->name_loc = L(eloc);
    s->expr = e;
    return s;
}

/* `split backward when expr`: which jobs' backward is split (expr over s,
 * b and params; checked in schedule.c). */
static pp_stmt *split_when_stmt(pp_parse_ctx *ctx, YYLTYPE loc, char *word, YYLTYPE wloc,
                                char *when, YYLTYPE whenloc, pp_expr *e)
{
    int ok = !strcmp(when, "when");
    if (!ok)
        diag_error(ctx->diag, L(whenloc), "expected 'when' after 'split backward', found '%s'",
                   when);
    free(when);
    pp_stmt *s = word_stmt(ctx, ST_SPLIT, loc, word, wloc);
    if (!s || !ok) {
        ast_free_expr(e);
        ast_free_stmts(s);
        return NULL;
    }
    s->expr = e;
    return s;
}

/* `recompute when expr`: which (s,b) re-run their forward before the
 * backward (expr over s, b and params; checked in schedule.c). */
static pp_stmt *recompute_when_stmt(pp_parse_ctx *ctx, YYLTYPE loc, char *when, YYLTYPE whenloc,
                                    pp_expr *e)
{
    int ok = !strcmp(when, "when");
    if (!ok)
        diag_error(ctx->diag, L(whenloc), "expected 'recompute' or 'recompute when EXPR', found '%s'",
                   when);
    free(when);
    pp_stmt *s = ok ? ast_stmt(ST_RECOMPUTE, L(loc)) : NULL;
    if (!s) {
        ast_free_expr(e);
        if (ok)
            diag_nomem(ctx->diag, "while parsing");
        return NULL;
    }
    s->expr = e;
    return s;
}

/* `offload when expr`: which (s,b) move their stash to host memory between
 * F and B (expr over s, b and params; checked in schedule.c). */
static pp_stmt *offload_when_stmt(pp_parse_ctx *ctx, YYLTYPE loc, char *when, YYLTYPE whenloc,
                                  pp_expr *e)
{
    int ok = !strcmp(when, "when");
    if (!ok)
        diag_error(ctx->diag, L(whenloc), "expected 'offload' or 'offload when EXPR', found '%s'",
                   when);
    free(when);
    pp_stmt *s = ok ? ast_stmt(ST_OFFLOAD, L(loc)) : NULL;
    if (!s) {
        ast_free_expr(e);
        if (ok)
            diag_nomem(ctx->diag, "while parsing");
        return NULL;
    }
    s->expr = e;
    return s;
}
