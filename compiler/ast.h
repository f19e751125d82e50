/* ast.h - the syntax tree of a .pp schedule file.
 *
 * A file is a list of statements; expressions are trees of pp_expr. Every
 * node keeps its source location so that errors found after parsing (unknown
 * names, division by zero at (s,b,d), placements out of range) point at the
 * exact column. */
#ifndef PP_AST_H
#define PP_AST_H

typedef struct {
    int first_line, first_column, last_line, last_column;
} pp_loc;

/* What a `cost` line sets (pp_stmt.dir): F, B, W (0-2), then the transfer costs. */
/* COST_OVERLAP: `cost overlap = P`, the percent of the shorter job of an overlapped
 * pair that the pair still pays for (schedule.h). */
/* COST_R: `cost R = expr` (may use s), a re-run forward's cost (recompute).
 * COST_TENSOR_*: `cost tensor_latency|tensor_bandwidth = expr`, params only
 * (issue 27): a tensor all-reduce of n bytes takes latency + n / bandwidth.
 * COST_HOST_BANDWIDTH: `cost host_bandwidth = expr` (params), bytes per time
 * unit of the host-copy lane that offload and reload use (0: free). */
enum {
    COST_LATENCY = 3,
    COST_BANDWIDTH = 4,
    COST_OVERLAP = 5,
    COST_R = 6,
    COST_TENSOR_LATENCY = 7,
    COST_TENSOR_BANDWIDTH = 8,
    COST_HOST_BANDWIDTH = 9,
    COST_COUNT = 10
};

typedef enum {
    EX_INT,    /* value */
    EX_NAME,   /* name (resolved by check.c into one of the EX_REF_* kinds) */
    EX_VAR,    /* job variable: var = 's', 'b', 'd' or 'w' */
    EX_DIR,    /* direction literal F/B/W: value 0/1/2 */
    EX_PARAM,  /* index into the schedule's params */
    EX_LET,    /* index into the schedule's lets */
    EX_UNARY,  /* op: '-' or '!' */
    EX_BINARY, /* op: + - * / % < > LE GE EQ NE AND OR */
    EX_COND,   /* a ? b : c */
    EX_CALL    /* min / max / abs: name, args */
} pp_expr_kind;

enum { OP_LE = 256, OP_GE, OP_EQ, OP_NE, OP_AND, OP_OR };

typedef struct pp_expr pp_expr;
struct pp_expr {
    pp_expr_kind kind;
    pp_loc loc;
    long long value; /* EX_INT, EX_DIR */
    int op;          /* EX_UNARY, EX_BINARY */
    int var;         /* EX_VAR */
    int index;       /* EX_PARAM, EX_LET */
    char *name;      /* EX_NAME, EX_CALL */
    pp_expr *a, *b, *c;
    int nargs; /* EX_CALL: args in a, b */
    int depth; /* 1 + the deepest child's depth */
};

/* The deepest expression tree the parser builds. Every pass over a tree
 * (resolving, evaluating, freeing) recurses, and bison's stack limit bounds
 * only right nesting, not a left-associative chain like 0+0+...+0. */
#define PP_MAX_EXPR_DEPTH 10000
/* The most symbols the parser keeps pending (bison's YYMAXDEPTH): what
 * bounds right nesting such as 10000 '(' or unary '-' in a row. */
#define PP_PARSER_MAX_DEPTH 10000

typedef enum {
    ST_PARAM,     /* param name = expr */
    ST_LET,       /* let name = expr */
    ST_FUNC,      /* compute/weights/priority(s,b,d) = expr; func = the keyword */
    ST_ORDER,     /* order greedy|strict: flag = 1 for strict */
    ST_SPLIT,     /* split backward [when expr]: expr NULL = every backward */
    ST_LIMIT,     /* limit inflight = expr */
    ST_COST,      /* cost F|B|W|latency|bandwidth = expr: dir (0-2 or COST_*) */
    ST_MODEL,     /* model [kind] { name = expr ... }: fields in body, flag = the pp_model_kind */
    ST_OPTIMIZER, /* optimizer sgd|adamw: flag = the pp_optimizer */
    ST_PRECISION, /* precision fp32|bf16: flag = the pp_precision */
    ST_REQUIRE,   /* require expr [, "msg"]: name = msg or NULL, name_loc = expr's span */
    ST_OVERLAP,   /* overlap F with B when expr: the condition, on the forward (schedule.h) */
    ST_RECOMPUTE, /* recompute [when expr]: expr NULL = every (s,b) (schedule.h) */
    ST_TENSOR,    /* tensor = expr: tensor-parallel ranks per worker (params only) */
    ST_OFFLOAD    /* offload [when expr]: expr NULL = every (s,b) (schedule.h) */
} pp_stmt_kind;

enum { FN_COMPUTE, FN_WEIGHTS, FN_PRIORITY, FN_COUNT };

typedef struct pp_stmt pp_stmt;
struct pp_stmt {
    pp_stmt_kind kind;
    pp_loc loc;      /* the whole statement's head */
    pp_loc name_loc; /* the name being defined */
    char *name;
    int func, flag, dir;
    pp_expr *expr;
    pp_stmt *body; /* ST_MODEL: a list of ST_LET-like field statements */
    pp_stmt *next;
    double real; /* a model field given a decimal number (norm_eps = 1e-5): expr is NULL */
};

/* Constructors own what they are given: out of memory, they free it and
 * return NULL (ast_stmt just returns NULL). */
pp_expr *ast_int(long long v, pp_loc loc);
pp_expr *ast_name(char *name, pp_loc loc);
pp_expr *ast_unary(int op, pp_expr *a, pp_loc loc);
pp_expr *ast_binary(int op, pp_expr *a, pp_expr *b, pp_loc loc);
pp_expr *ast_cond(pp_expr *a, pp_expr *b, pp_expr *c, pp_loc loc);
pp_expr *ast_call(char *name, pp_expr *a, pp_expr *b, int nargs, pp_loc loc);
pp_stmt *ast_stmt(pp_stmt_kind kind, pp_loc loc);
void ast_free_expr(pp_expr *e);
void ast_free_stmts(pp_stmt *s);

/* A `# search:` line (compiler/search.c): NAME=VALUES assignments, each a
 * list of items, an item one value or an inclusive range lo..hi. Its
 * expressions are ordinary expressions of the language (parser.y's
 * search_line). */
typedef struct pp_range pp_range;
struct pp_range {
    pp_expr *lo, *hi; /* lo..hi; hi NULL: the one value lo */
    pp_loc loc;       /* the whole item */
    pp_range *next;
};

typedef struct pp_assign pp_assign;
struct pp_assign {
    char *name;
    pp_loc name_loc;
    pp_range *values;
    pp_assign *next;
};

/* Constructors own what they are given, as above. */
pp_range *ast_range(pp_expr *lo, pp_expr *hi, pp_loc loc);
pp_assign *ast_assign(char *name, pp_loc name_loc, pp_range *values);
void ast_free_ranges(pp_range *r);
void ast_free_assigns(pp_assign *a);

#endif
