/* search.c - `ppc --search` (see search.h): every library family over its
 * `# search:` line, compiled in process, and the Pareto front of predicted
 * step time against peak plan memory per worker. */
#include "search.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "../isa/model_words.h"
#include "compile.h"
#include "parse.h"
#include "readfile.h"
#include "report.h"
#include "user_model.h"

#define MAX_ASSIGN 16            /* assignments on one search line */
#define MAX_COMBOS 4096          /* combinations of one file */
#define MAX_VALUES MAX_COMBOS    /* values of one name: more would be more combinations */
#define VALUE_BOUND 1000000000LL /* every value of a name is within +-this */
/* The most jobs one candidate may have: a search compiles many, each three
 * times lowered, and is meant to answer in seconds; a larger one is refused
 * (its reason says so) rather than holding the search for minutes. */
#define MAX_JOBS (1LL << 22)

/* The --prefetch values tried, the default first: among candidates that
 * tie, the first generated stands for them, so the shortest command wins. */
static const int prefetches[] = {1, 0, 2};
#define NPREFETCH ((int)(sizeof prefetches / sizeof prefetches[0]))

/* Memory-saving variants tried on every combination (issue 26), at the
 * default --prefetch, as --recompute EXPR or --offload EXPR: recompute every
 * stage (Megatron's full recompute) or every stage but the last (which
 * holds the fewest stashes in a pipeline); offload every stash to host
 * memory (PipeOffload) or every stage's but the last's. Only in files with
 * neither their own `recompute` nor their own `offload`: recompute and
 * offload never meet at one (s,b), and a file's own choice is its own.
 * Offload only where the host link has a price (`cost host_bandwidth`, or
 * "host_bandwidth" in --costs): with free copies (the default) every
 * offload would cost nothing and lead every front on an assumption nobody
 * made.
 * Bubble placement of re-run forwards and per-stage choices are the
 * library's recompute files, searched over their own lines. */
typedef struct {
    const char *recompute, *offload; /* the flag's EXPR, or NULL */
} variant;
static const variant variants[] = {
    {"1", NULL}, {"s < S - 1", NULL}, {NULL, "1"}, {NULL, "s < S - 1"}};
#define NVARIANT ((int)(sizeof variants / sizeof variants[0]))

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The blocks (layers) every candidate's model has in total: --layers, else
 * the user's model's (--search FILE), else 0 (each file's model block). */
static long long total_layers(const pp_search_opts *o)
{
    return o->layers ? o->layers : o->model ? o->model->total : 0;
}

/* ==== The search line ======================================================
 *   # search: NAME=VALUES [NAME=VALUES]... [# comment]
 *   VALUES := ITEM ("," ITEM)*      ITEM := expr | expr ".." expr
 * The line is parsed by the file's own grammar (parse.h, pp_parse_search)
 * and its expressions are the file's: names resolved as a param's default
 * is (W, B and the names assigned earlier on the line are params) and
 * evaluated by pp_eval, so a line has the language's operators, min, max
 * and abs, and its errors (file:line:col and a caret, "search line: "
 * before each). What is the search's own: a '/' that does not divide
 * exactly (or divides by zero) drops that value rather than flooring it
 * (pp_schedule.exact_div), every value is within +-10^9, a name has at most
 * MAX_VALUES values, and W and B are not the line's to assign. */

typedef struct {
    pp_diag d;          /* the file, for messages: file:line:col and a caret */
    pp_assign *assigns; /* owned */
    const pp_assign *a[MAX_ASSIGN];
    int n;
    int lineno;
    int found; /* the file has a search line */
    /* W (param 0), B (1), then a[i] (2 + i): their values are set as the
     * combinations are enumerated; every item's expressions resolved */
    pp_schedule names;
    int names_ready;
} search_line;

/* Finds the first "# search:" line (a comment: '#' or "//", then "search:")
 * of d->src and parses it into l. Returns 0 (l->found says whether there
 * was one), -1 malformed (said why through l->d). */
static int parse_search_line(search_line *l)
{
    const char *src = l->d.src, *line = src;
    for (int lineno = 1; *line; lineno++) {
        const char *end = strchr(line, '\n');
        int len = end ? (int)(end - line) : (int)strlen(line);
        const char *p = line;
        while (p < line + len && (*p == ' ' || *p == '\t'))
            p++;
        int comment =
            p < line + len && (*p == '#' || (p[0] == '/' && p + 1 < line + len && p[1] == '/'));
        if (comment) {
            p += *p == '#' ? 1 : 2;
            while (p < line + len && (*p == ' ' || *p == '\t'))
                p++;
        }
        if (comment && line + len - p >= 7 && !strncmp(p, "search:", 7)) {
            l->found = 1;
            l->lineno = lineno;
            p += 7;
            l->assigns = pp_parse_search(&l->d, (size_t)(p - src), (size_t)(line + len - p), lineno,
                                         (int)(p - line) + 1);
            return l->assigns ? 0 : -1;
        }
        if (!end)
            break;
        line = end + 1;
    }
    return 0;
}

/* The line's names and expressions: every item resolved over W, B and the
 * names before it. Returns 0, or -1 with the errors reported (every one). */
static int check_search_line(search_line *l)
{
    if (pp_consts_init(&l->names, &l->d, MAX_ASSIGN + 2))
        return -1;
    l->names_ready = 1;
    l->names.exact_div = 1;
    pp_loc nowhere = {0, 0, 0, 0}; /* -D W and -D B have no place in the file */
    if (pp_consts_define(&l->names, "W", nowhere) < 0 ||
        pp_consts_define(&l->names, "B", nowhere) < 0)
        return -1;
    int before = l->d.errors;
    for (const pp_assign *a = l->assigns; a; a = a->next)
        if (pp_consts_declare(&l->names, a->name))
            return -1;
    for (const pp_assign *a = l->assigns; a; a = a->next) {
        if (!strcmp(a->name, "W") || !strcmp(a->name, "B")) {
            diag_error(&l->d, a->name_loc,
                       "W and B are the search's own (-D W, -D B), not the line's to assign");
            continue;
        }
        if (l->n == MAX_ASSIGN) {
            diag_error(&l->d, a->name_loc, "more than %d assignments on the line", MAX_ASSIGN);
            break;
        }
        for (pp_range *r = a->values; r; r = r->next) {
            pp_consts_resolve(&l->names, r->lo, "a search line");
            if (r->hi)
                pp_consts_resolve(&l->names, r->hi, "a search line");
        }
        if (pp_consts_define(&l->names, a->name, a->name_loc) >= 0)
            l->a[l->n++] = a;
    }
    return l->d.errors == before ? 0 : -1;
}

static void search_line_free(search_line *l)
{
    if (l->names_ready)
        pp_schedule_free(&l->names);
    ast_free_assigns(l->assigns);
    l->assigns = NULL;
    l->n = 0;
}

/* One expression of an item under the names' current values: 0 (*skip set
 * when a division is not exact: the item gives no value), or -1 with the
 * error reported. */
static int eval_item(search_line *l, const pp_expr *e, const pp_range *r, long long *v, int *skip)
{
    pp_env env = {0, 0, 0, 0};
    const pp_expr *where = e;
    pp_eval_status st = pp_eval(&l->names, e, &env, v, &where);
    if (st == EVAL_INEXACT) {
        *skip = 1;
        return 0;
    }
    if (st) {
        diag_error(&l->d, where->loc, st == EVAL_DIV0 ? "division by zero" : "integer overflow");
        return -1;
    }
    if (*v > VALUE_BOUND || *v < -VALUE_BOUND) {
        diag_error(&l->d, r->loc, "value %lld is out of range [%lld, %lld]", *v, -VALUE_BOUND,
                   VALUE_BOUND);
        return -1;
    }
    return 0;
}

/* The values of assignment a under the names' current values, into
 * out[0..*n). Returns 0, or -1 with the error reported. */
static int eval_values(search_line *l, const pp_assign *a, long long *out, int *n)
{
    *n = 0;
    for (const pp_range *r = a->values; r; r = r->next) {
        long long lo, hi;
        int skip = 0;
        if (eval_item(l, r->lo, r, &lo, &skip))
            return -1;
        hi = lo;
        if (r->hi && eval_item(l, r->hi, r, &hi, &skip))
            return -1;
        if (skip)
            continue;
        if (hi - lo >= MAX_VALUES - *n) { /* both within 1e9: no overflow */
            if (r->hi)
                diag_error(&l->d, r->loc, "%lld..%lld gives more than %d values for one name", lo,
                           hi, MAX_VALUES);
            else
                diag_error(&l->d, r->loc, "more than %d values for one name", MAX_VALUES);
            return -1;
        }
        for (long long v = lo; v <= hi; v++)
            out[(*n)++] = v;
    }
    return 0;
}

/* ==== Candidates ========================================================== */

typedef struct {
    const pp_search_opts *o;
    pp_search_result *r;
    FILE *err;
    const char *path; /* the file, as commands print it */
    char **params;    /* the file's param names */
    int nparams;
    char **seen; /* resolved params of the combinations compiled */
    int nseen, capseen;
    int combos;
    pp_search_status fatal;
} family;

static pp_search_cand *new_cand(family *f)
{
    pp_search_result *r = f->r;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        pp_search_cand *c = realloc(r->c, (size_t)cap * sizeof *c);
        if (!c)
            return NULL;
        r->c = c;
        r->cap = cap;
    }
    pp_search_cand *c = &r->c[r->n++];
    memset(c, 0, sizeof *c);
    return c;
}

/* A word for the shell: as is when it is plain, else single-quoted. */
static int shell_word(FILE *f, const char *s)
{
    int plain = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_./-=+,:@%", *p))
            plain = 0;
    if (plain)
        return fputs(s, f);
    fputc('\'', f);
    for (const char *p = s; *p; p++)
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    return fputc('\'', f);
}

/* The flags after the file that reproduce a candidate (without -o). */
static char *cand_args(const family *f, const pp_define *defs, int nd, int prefetch, int keep,
                       const variant *v)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return NULL;
    for (int i = 0; i < nd; i++)
        fprintf(m, "%s-D %s=%lld", i ? " " : "", defs[i].name, defs[i].value);
    if (f->o->costs) {
        fputs(" --costs ", m);
        shell_word(m, f->o->costs);
    }
    if (f->o->backend) /* what the plans are for: ppc warns again against --costs */
        fprintf(m, " --backend %s", f->o->backend);
    if (f->o->optimizer >= 0)
        fprintf(m, " --optimizer %s", f->o->optimizer == PP_OPT_ADAMW ? "adamw" : "sgd");
    if (f->o->precision >= 0)
        fprintf(m, " --precision %s", f->o->precision == PP_PREC_BF16 ? "bf16" : "fp32");
    if (f->o->tensor > 0)
        fprintf(m, " --tensor %d", f->o->tensor);
    if (prefetch != 1)
        fprintf(m, " --prefetch %d", prefetch);
    if (keep)
        fputs(" --keep-weights", m);
    if (v && v->recompute) {
        fputs(" --recompute ", m);
        shell_word(m, v->recompute);
    }
    if (v && v->offload) {
        fputs(" --offload ", m);
        shell_word(m, v->offload);
    }
    if (f->o->model_file) {
        fputs(" --model ", m);
        shell_word(m, f->o->model_file);
    }
    if (f->o->mem_limit)
        fprintf(m, " --mem-limit %llu", (unsigned long long)f->o->mem_limit);
    if (f->o->layers) { /* each candidate's own split, as ppc chooses it again */
        char a[40];
        snprintf(a, sizeof a, "auto(%lld)", f->o->layers);
        fputs(" --layers ", m);
        shell_word(m, a);
    }
    if (fclose(m)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* With --layers: the candidate's layers per stage ("4,4,4,0"), which its
 * command's --layers auto(L) chooses again; NULL without (or out of
 * memory). */
static char *split_words(const pp_schedule *sch)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = sch->auto_flag ? open_memstream(&buf, &len) : NULL;
    if (!f)
        return NULL;
    for (long long s = 0; s < sch->S; s++)
        fprintf(f, "%s%u", s ? "," : "", sch->model.layers[s]);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The model in words: what two candidates must share to be compared.
 * With --layers (layers > 0) the blocks in total, not the stages: a
 * candidate of 8 stages of 1 block and one of 4 of 2 train one model. */
static char *model_words(const pp_model *m, long long S, long long layers)
{
    if (!layers) { /* the words ppvm --profile records (isa/model_words.h) */
        int len = pp_model_words(m, S, (char[1]){0}, 1);
        char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (buf)
            pp_model_words(m, S, buf, (size_t)len + 1);
        return buf;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    if (m->kind == PP_MODEL_LLAMA)
        fprintf(f, "llama vocab %u context %u embed %u heads %u kv_heads %u ffn %u batch %u",
                m->vocab, m->context, m->embed, m->heads, m->kv_heads, m->ffn, m->batch);
    else if (m->kind == PP_MODEL_GPT)
        fprintf(f, "gpt vocab %u context %u embed %u heads %u ffn %u batch %u", m->vocab,
                m->context, m->embed, m->heads, m->ffn, m->batch);
    else
        fprintf(f, "mlp context %u embed %u ffn %u batch %u", m->context, m->embed, m->ffn,
                m->batch);
    /* With --layers the blocks in total: candidates of other stage counts
     * train one model */
    fprintf(f, ", %lld %s in total", layers,
            m->kind != PP_MODEL_MLP ? (layers == 1 ? "layer" : "layers")
                                    : (layers == 1 ? "block" : "blocks"));
    fprintf(f, ", %s, %s", m->optimizer == PP_OPT_ADAMW ? "adamw" : "sgd",
            m->precision == PP_PREC_BF16 ? "bf16" : "fp32");
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Every param of the checked schedule, "S=8 B=32 W=8 V=1": two
 * combinations that resolve alike are one candidate. */
static char *resolved(const pp_schedule *sch)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    for (int i = 0; i < sch->nparams; i++)
        fprintf(f, "%s=%lld ", sch->params[i].name, sch->params[i].value);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

static pp_compile_status compile_cand(const family *f, const pp_define *defs, int nd, int prefetch,
                                      int keep, const variant *v, pp_compiled *c)
{
    pp_compile_opts co = pp_compile_defaults();
    co.path = f->path;
    co.defs = defs;
    co.ndefs = nd;
    co.costs = f->o->costs;
    co.optimizer = f->o->optimizer;
    co.precision = f->o->precision;
    co.tensor = f->o->tensor;
    co.prefetch = prefetch;
    co.keep_weights = keep;
    /* Without --keep-weights the limit is checked here, so that a plan over
     * it still has its memory known; with it, the limit picks the window. */
    co.mem_limit = keep ? f->o->mem_limit : 0;
    co.capture = 1;
    co.max_jobs = MAX_JOBS;
    co.layers = f->o->layers;
    co.model = f->o->model;
    co.model_path = f->o->model_file;
    co.layers_auto = f->o->layers != 0; /* the split auto(L) chooses, under the limit */
    co.auto_mem_limit = f->o->mem_limit;
    co.recompute = v ? v->recompute : NULL;
    co.offload = v ? v->offload : NULL;
    return pp_compile(&co, c);
}

/* A status the search cannot go on after: says so. */
static pp_search_status fatal(family *f, pp_compile_status st, const pp_compiled *c,
                              const char *args)
{
    if (st == PP_COMPILE_NOMEM) {
        fprintf(f->err, "ppc --search: out of memory compiling %s %s\n", f->path, args);
        return PP_SEARCH_NOMEM;
    }
    fprintf(f->err, "ppc --search: compiling %s %s failed:\n%s", f->path, args,
            c->msgs ? c->msgs : "");
    return st == PP_COMPILE_IO ? PP_SEARCH_IO : PP_SEARCH_INTERNAL;
}

static uint64_t peak_memory(const pp_plan *plans, int W)
{
    uint64_t m = 0;
    for (int w = 0; w < W; w++) {
        uint64_t x = pp_plan_memory(&plans[w]);
        if (x > m)
            m = x;
    }
    return m;
}

/* Why a compile failed, for --all: its first error line. (Only words for
 * people: out of memory here leaves it NULL, "(not known)".) */
static void why_compile(pp_search_cand *k, pp_compiled *c)
{
    if (c->msgf)
        fflush(c->msgf);
    const char *e = c->msgs ? strstr(c->msgs, "error: ") : NULL;
    if (!e) {
        k->why = strdup("the compile failed");
        return;
    }
    const char *start = e;
    while (start > c->msgs && start[-1] != '\n')
        start--;
    k->why = strndup(start, strcspn(start, "\n"));
}

/* Fills a compiled candidate's figures, or refuses it when it is not a
 * plan for the search's W and B that uses every worker. */
static void judge(const family *f, const pp_compiled *c, uint64_t mem, pp_search_cand *k)
{
    k->S = c->sch.S;
    k->time = c->rep.step;
    k->bubble = c->rep.bubble;
    k->mem = mem;
    int idle = -1;
    for (int w = c->rep.W - 1; w >= 0; w--)
        if (c->rep.w[w].jobs == 0)
            idle = w;
    k->state = PP_CAND_REFUSED;
    if (c->sch.W != f->o->W || c->sch.B != f->o->B) {
        if (asprintf(&k->why, "it has W=%lld B=%lld, not the search's W=%lld B=%lld", c->sch.W,
                     c->sch.B, f->o->W, f->o->B) < 0)
            k->why = NULL;
    } else if (idle >= 0) {
        if (asprintf(&k->why, "worker %d runs no job", idle) < 0)
            k->why = NULL;
    } else if (f->o->mem_limit && mem > f->o->mem_limit)
        k->state = PP_CAND_OVER;
    else
        k->state = PP_CAND_OK;
}

/* Records one candidate. Returns it, or NULL out of memory. */
static pp_search_cand *record(family *f, const pp_define *defs, int nd, int prefetch, int keep,
                              const variant *v)
{
    pp_search_cand *k = new_cand(f);
    if (!k)
        return NULL;
    k->file = strdup(f->path);
    k->args = cand_args(f, defs, nd, prefetch, keep, v);
    if (!k->file || !k->args)
        return NULL;
    return k;
}

/* Marks a combination's resolved params seen; 1 if they were already. */
static int seen_before(family *f, char *key)
{
    for (int i = 0; i < f->nseen; i++)
        if (!strcmp(f->seen[i], key)) {
            free(key);
            return 1;
        }
    if (f->nseen == f->capseen) {
        int cap = f->capseen ? 2 * f->capseen : 16;
        char **s = realloc(f->seen, (size_t)cap * sizeof *s);
        if (!s) {
            free(key);
            return -1;
        }
        f->seen = s;
        f->capseen = cap;
    }
    f->seen[f->nseen++] = key;
    return 0;
}

/* One combination: the base compile (--prefetch 1), the other prefetches
 * lowered from the same simulation, and with --keep-weights where the plan
 * fetches weights. Returns 0, or -1 with f->fatal set. */
static int try_combination(family *f, const pp_define *defs, int nd)
{
    /* The same -D values twice (a name of the line that is no param
     * varied) is one candidate; so are two that resolve to the same params
     * (below). The flags' text starts with '-', a resolved list with a
     * name, so both kinds of key share the seen list. */
    char *flags = cand_args(f, defs, nd, prefetches[0], 0, NULL);
    int dup = flags ? seen_before(f, flags) : -1;
    if (dup) {
        if (dup < 0)
            f->fatal = PP_SEARCH_NOMEM;
        return dup < 0 ? -1 : 0;
    }
    pp_compiled c;
    pp_compile_status st = compile_cand(f, defs, nd, prefetches[0], 0, NULL, &c);
    int rc = 0;
    if (c.reached >= PP_STAGE_CHECK) {
        char *key = resolved(&c.sch);
        int seen = key ? seen_before(f, key) : -1;
        if (seen) {
            pp_compiled_free(&c);
            if (seen < 0)
                f->fatal = PP_SEARCH_NOMEM;
            return seen < 0 ? -1 : 0;
        }
    }
    /* Candidates are kept in an array that recording may move: the base
     * is held by its index. */
    pp_search_cand *base = record(f, defs, nd, prefetches[0], 0, NULL);
    if (!base) {
        f->fatal = PP_SEARCH_NOMEM;
        pp_compiled_free(&c);
        return -1;
    }
    int bi = (int)(base - f->r->c);
    if (st == PP_COMPILE_ERRORS) {
        base->state = PP_CAND_REFUSED;
        /* the check found S; a model file's even split then refused it
           (--layers L gives each candidate auto(L)'s split: never refused) */
        base->indivisible = !f->o->layers && total_layers(f->o) && c.sch.S > 0 &&
                            total_layers(f->o) % c.sch.S != 0;
        why_compile(base, &c);
        pp_compiled_free(&c);
        return 0;
    }
    if (st != PP_COMPILE_OK) {
        f->fatal = fatal(f, st, &c, base->args);
        pp_compiled_free(&c);
        return -1;
    }
    base->model = model_words(&c.sch.model, c.sch.S, total_layers(f->o));
    base->split = split_words(&c.sch);
    if (!base->model || (f->o->layers && !base->split)) {
        f->fatal = PP_SEARCH_NOMEM;
        pp_compiled_free(&c);
        return -1;
    }
    judge(f, &c, peak_memory(c.plans, (int)c.plans[0].world), base);
    int usable = base->state != PP_CAND_REFUSED;
    int fetches = c.rep.total.weight_recv > 0, own_recompute = c.sch.recompute;
    int own_offload = c.sch.offload, priced_host = c.t.host_bandwidth > 0;
    /* The other prefetches change only the lowering: same simulation;
     * except under offload, whose reloads they place (sim_offload.h), so
     * each is compiled and simulated anew. */
    for (int i = 1; usable && i < NPREFETCH && !rc; i++) {
        pp_lower_opts lo = {prefetches[i], 0};
        pp_plan *plans = NULL;
        pp_compiled oc, *cc = &c;
        pp_compile_status ls;
        if (own_offload) { /* the compile's own plans, at this prefetch */
            cc = &oc;
            ls = compile_cand(f, defs, nd, prefetches[i], 0, NULL, &oc);
        } else
            ls = pp_compile_plans(&c.t, pp_compiled_order(&c), &c.sch.model, &lo, &c.diag, &plans);
        pp_search_cand *k = record(f, defs, nd, prefetches[i], 0, NULL);
        if (!k || !(k->model = strdup(f->r->c[bi].model)) ||
            (f->r->c[bi].split && !(k->split = strdup(f->r->c[bi].split)))) {
            f->fatal = PP_SEARCH_NOMEM;
            rc = -1;
        } else if (ls == PP_COMPILE_ERRORS) {
            k->state = PP_CAND_REFUSED;
            why_compile(k, cc);
        } else if (ls != PP_COMPILE_OK) {
            fflush(cc->msgf);
            f->fatal = fatal(f, ls, cc, k->args);
            rc = -1;
        } else if (cc == &oc)
            judge(f, cc, peak_memory(oc.plans, (int)oc.plans[0].world), k);
        else
            judge(f, cc, peak_memory(plans, (int)plans[0].world), k);
        pp_plans_free(plans, c.t.W);
        if (cc == &oc)
            pp_compiled_free(&oc);
    }
    pp_compiled_free(&c);
    /* Keeping fetched weights: only where something is fetched. */
    for (int i = 0; usable && fetches && i < NPREFETCH && !rc; i++) {
        st = compile_cand(f, defs, nd, prefetches[i], 1, NULL, &c);
        pp_search_cand *k = record(f, defs, nd, prefetches[i], 1, NULL);
        if (!k) {
            f->fatal = PP_SEARCH_NOMEM;
            rc = -1;
        } else if (st == PP_COMPILE_OK) {
            k->model = model_words(&c.sch.model, c.sch.S, total_layers(f->o));
            k->split = split_words(&c.sch);
            if (!k->model || (f->o->layers && !k->split)) {
                f->fatal = PP_SEARCH_NOMEM;
                rc = -1;
            } else
                judge(f, &c, peak_memory(c.plans, (int)c.plans[0].world), k);
        } else if (st == PP_COMPILE_ERRORS) {
            /* The same plan without kept weights compiled: what fails now
             * is the window under --mem-limit, which keeping only adds to. */
            k->state = f->o->mem_limit ? PP_CAND_OVER : PP_CAND_REFUSED;
            k->model = strdup(f->r->c[bi].model);
            k->mem = 0; /* not known: the window was never lowered */
            why_compile(k, &c);
            if (!k->model) {
                f->fatal = PP_SEARCH_NOMEM;
                rc = -1;
            }
        } else {
            f->fatal = fatal(f, st, &c, k->args);
            rc = -1;
        }
        pp_compiled_free(&c);
    }
    /* Recompute and offload (variants above): a refused variant (F and B
     * on different workers) is listed as refused, like any candidate. */
    for (int i = 0; usable && i < NVARIANT && !rc; i++) {
        const variant *v = &variants[i];
        if (own_recompute || own_offload)
            break;
        if (v->offload && !priced_host)
            continue;
        st = compile_cand(f, defs, nd, prefetches[0], 0, v, &c);
        pp_search_cand *k = record(f, defs, nd, prefetches[0], 0, v);
        if (!k) {
            f->fatal = PP_SEARCH_NOMEM;
            rc = -1;
        } else if (st == PP_COMPILE_OK) {
            k->model = model_words(&c.sch.model, c.sch.S, total_layers(f->o));
            k->split = split_words(&c.sch);
            if (!k->model || (f->o->layers && !k->split)) {
                f->fatal = PP_SEARCH_NOMEM;
                rc = -1;
            } else
                judge(f, &c, peak_memory(c.plans, (int)c.plans[0].world), k);
        } else if (st == PP_COMPILE_ERRORS) {
            k->state = PP_CAND_REFUSED;
            why_compile(k, &c);
        } else {
            f->fatal = fatal(f, st, &c, k->args);
            rc = -1;
        }
        pp_compiled_free(&c);
    }
    return rc;
}

/* Assigns l->a[i..n) in turn over their values, then compiles. */
static int enumerate(family *f, search_line *l, int i, int n, pp_define *defs, int nd)
{
    if (i == n) {
        if (++f->combos > MAX_COMBOS) {
            fprintf(f->err,
                    "%s:%d: error: search line: more than %d combinations; narrow its "
                    "ranges\n",
                    f->path, l->lineno, MAX_COMBOS);
            f->fatal = PP_SEARCH_BAD_LINE;
            return -1;
        }
        pp_define all[MAX_ASSIGN + 2];
        memcpy(all, defs, (size_t)nd * sizeof *defs);
        all[nd] = (pp_define){"B", f->o->B};
        all[nd + 1] = (pp_define){"W", f->o->W};
        return try_combination(f, all, nd + 2);
    }
    long long *vals = malloc(MAX_VALUES * sizeof *vals);
    int nv;
    if (!vals) {
        f->fatal = PP_SEARCH_NOMEM;
        return -1;
    }
    const pp_assign *a = l->a[i];
    if (eval_values(l, a, vals, &nv)) {
        f->fatal = l->d.nomem ? PP_SEARCH_NOMEM : PP_SEARCH_BAD_LINE;
        free(vals);
        return -1;
    }
    int param = 0;
    for (int p = 0; p < f->nparams; p++)
        param |= !strcmp(f->params[p], a->name);
    for (int k = 0; k < nv; k++) {
        l->names.params[2 + i].value = vals[k];
        if (param)
            defs[nd] = (pp_define){a->name, vals[k]};
        if (enumerate(f, l, i + 1, n, defs, nd + param)) {
            free(vals);
            return -1;
        }
    }
    free(vals);
    return 0;
}

/* The param names of the file (from its parse), into f->params. Returns
 * 0, 1 when the file does not parse (one refused candidate, *why its first
 * error), -1 fatal. */
static int file_params(family *f, char **why)
{
    pp_compile_opts co = pp_compile_defaults();
    co.path = f->path;
    co.stop_after = PP_STAGE_PARSE;
    co.capture = 1;
    pp_compiled c;
    pp_compile_status st = pp_compile(&co, &c);
    int rc = 0;
    if (st == PP_COMPILE_NOMEM || st == PP_COMPILE_IO) {
        f->fatal = fatal(f, st, &c, "");
        rc = -1;
    } else if (st != PP_COMPILE_OK) {
        pp_search_cand tmp = {0};
        why_compile(&tmp, &c);
        *why = tmp.why;
        rc = 1;
    }
    for (pp_stmt *s = c.stmts; !rc && s; s = s->next)
        if (s->kind == ST_PARAM && s->name) {
            char **p = realloc(f->params, (size_t)(f->nparams + 1) * sizeof *p);
            if (!p || !(p[f->nparams] = strdup(s->name))) {
                if (p)
                    f->params = p;
                f->fatal = PP_SEARCH_NOMEM;
                rc = -1;
            } else {
                f->params = p;
                f->nparams++;
            }
        }
    pp_compiled_free(&c);
    return rc;
}

/* One library file: its search line (or the defaults: as written, and
 * S=W), every combination. */
static pp_search_status search_file(const pp_search_opts *o, pp_search_result *r, FILE *err,
                                    const char *path)
{
    family f = {.o = o, .r = r, .err = err, .path = path};
    search_line l = {0};
    size_t len;
    char *src = pp_read_file(path, &len, NULL);
    if (!src) {
        fprintf(err, "ppc --search: cannot read '%s': %s\n", path,
                errno ? strerror(errno) : "not a regular file");
        return errno == ENOMEM ? PP_SEARCH_NOMEM : PP_SEARCH_IO;
    }
    /* A file without a line is searched over "S=W" (after once as written). */
    static const char dflt[] = "S=W";
    diag_init(&l.d, path, src, len, err);
    l.d.context = "search line: ";
    if (parse_search_line(&l) == 0 && !l.found) {
        diag_init(&l.d, path, dflt, sizeof dflt - 1, err);
        l.d.context = "search line: ";
        l.assigns = pp_parse_search(&l.d, 0, sizeof dflt - 1, 1, 1);
    }
    if (l.d.errors || check_search_line(&l)) {
        pp_search_status st = l.d.nomem ? PP_SEARCH_NOMEM : PP_SEARCH_BAD_LINE;
        search_line_free(&l);
        free(src);
        return st;
    }
    char *why = NULL;
    int fp = file_params(&f, &why);
    if (fp > 0) { /* a file that does not parse: one candidate, refused */
        pp_define wb[] = {{"B", o->B}, {"W", o->W}};
        pp_search_cand *k = record(&f, wb, 2, 1, 0, NULL);
        if (k) {
            k->state = PP_CAND_REFUSED;
            k->why = why;
        } else {
            free(why);
            f.fatal = PP_SEARCH_NOMEM;
        }
    } else if (fp == 0) {
        pp_define defs[MAX_ASSIGN + 2];
        l.names.params[0].value = o->W;
        l.names.params[1].value = o->B;
        if (l.found)
            enumerate(&f, &l, 0, l.n, defs, 0);
        else if (!enumerate(&f, &l, 0, 0, defs, 0) && f.nparams) /* as written, then S=W */
            enumerate(&f, &l, 0, l.n, defs, 0);
    }
    for (int i = 0; i < f.nseen; i++)
        free(f.seen[i]);
    free(f.seen);
    for (int i = 0; i < f.nparams; i++)
        free(f.params[i]);
    free(f.params);
    search_line_free(&l);
    free(src);
    return f.fatal;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The library's .pp files (regular files), sorted, as paths DIR/NAME. */
static pp_search_status list_library(const char *dir, char ***out, int *n, FILE *err)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(err,
                "ppc --search: cannot read the library '%s': %s (expected a directory of "
                ".pp schedules, see --library)\n",
                dir, strerror(errno));
        return errno == ENOMEM ? PP_SEARCH_NOMEM : PP_SEARCH_IO;
    }
    pp_search_status st = PP_SEARCH_OK;
    struct dirent *de;
    while (st == PP_SEARCH_OK && (de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".pp"))
            continue;
        char *path = NULL;
        struct stat sb;
        if (asprintf(&path, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", de->d_name) <
            0) {
            st = PP_SEARCH_NOMEM;
            break;
        }
        if (stat(path, &sb) || !S_ISREG(sb.st_mode)) {
            free(path);
            continue;
        }
        char **p = realloc(*out, (size_t)(*n + 1) * sizeof *p);
        if (!p) {
            free(path);
            st = PP_SEARCH_NOMEM;
            break;
        }
        *out = p;
        (*out)[(*n)++] = path;
    }
    closedir(d);
    if (st == PP_SEARCH_OK && *n == 0) {
        fprintf(err,
                "ppc --search: the library '%s' holds no .pp file (expected a directory "
                "of .pp schedules, see --library)\n",
                dir);
        st = PP_SEARCH_IO;
    }
    if (st == PP_SEARCH_OK)
        qsort(*out, (size_t)*n, sizeof **out, by_name);
    return st;
}

/* ==== The front ============================================================ */

static void out_dir(const char *file, char *buf, size_t n);

static const pp_search_cand *sort_base;
static int by_time_mem(const void *a, const void *b)
{
    const pp_search_cand *x = &sort_base[*(const int *)a], *y = &sort_base[*(const int *)b];
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    if (x->mem != y->mem)
        return x->mem < y->mem ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* The search's model: the one most usable candidates train (the first of
 * equals); the others' candidates become "other model". */
static int pick_model(pp_search_result *r)
{
    int best = -1, bestn = 0;
    for (int i = 0; i < r->n; i++) {
        pp_search_cand *k = &r->c[i];
        if (k->state != PP_CAND_OK && k->state != PP_CAND_OVER)
            continue;
        int n = 0;
        for (int j = 0; j < r->n; j++)
            n += (r->c[j].state == PP_CAND_OK || r->c[j].state == PP_CAND_OVER) &&
                 !strcmp(r->c[j].model, k->model);
        if (n > bestn) {
            best = i;
            bestn = n;
        }
    }
    if (best < 0)
        return 0;
    r->model = strdup(r->c[best].model);
    if (!r->model)
        return -1;
    for (int i = 0; i < r->n; i++)
        if ((r->c[i].state == PP_CAND_OK || r->c[i].state == PP_CAND_OVER) &&
            strcmp(r->c[i].model, r->model))
            r->c[i].state = PP_CAND_OTHER_MODEL;
    return 0;
}

/* Whether candidate j beats candidate i: not slower (within
 * PP_SEARCH_TIME_TOL) and not larger, and better in one (faster beyond the
 * tolerance, or smaller); between equals, the first generated. */
static int beats(const pp_search_cand *c, int j, int i)
{
    double tj = c[j].time, ti = c[i].time, tol = PP_SEARCH_TIME_TOL * fmax(fabs(ti), fabs(tj));
    if (tj > ti + tol || c[j].mem > c[i].mem)
        return 0;
    return c[j].mem < c[i].mem || tj < ti - tol || j < i;
}

/* The front: every compiled candidate no other beats, fastest first. */
int pp_search_front(pp_search_result *r)
{
    int *idx = malloc(((size_t)(unsigned)r->n + 1) * sizeof *idx);
    if (!idx)
        return -1;
    int n = 0;
    for (int i = 0; i < r->n; i++)
        if (r->c[i].state == PP_CAND_OK)
            idx[n++] = i;
    r->nfront = 0;
    for (int a = 0; a < n; a++) {
        int beaten = 0;
        for (int b = 0; b < n && !beaten; b++)
            beaten = b != a && beats(r->c, idx[b], idx[a]);
        if (!beaten)
            idx[r->nfront++] = idx[a];
    }
    sort_base = r->c;
    qsort(idx, (size_t)r->nfront, sizeof *idx, by_time_mem);
    for (int i = 0; i < r->nfront; i++)
        r->c[idx[i]].front = i + 1;
    r->front = idx;
    return 0;
}

/* Each candidate's -o: out/<stem> for the first front row of its file,
 * out/<stem>-<rank> for the next ones, out/<stem>-c<n> off the front. */
static int name_outputs(pp_search_result *r)
{
    char dir[256], buf[300];
    for (int i = 0; i < r->n; i++) {
        pp_search_cand *k = &r->c[i];
        out_dir(k->file, dir, sizeof dir);
        int first = k->front > 0;
        for (int f = 0; first && f < k->front - 1; f++) {
            char other[256];
            out_dir(r->c[r->front[f]].file, other, sizeof other);
            first = strcmp(other, dir) != 0;
        }
        if (first)
            snprintf(buf, sizeof buf, "%s", dir);
        else if (k->front)
            snprintf(buf, sizeof buf, "%s-%d", dir, k->front);
        else
            snprintf(buf, sizeof buf, "%s-c%d", dir, i + 1);
        if (!(k->out = strdup(buf)))
            return -1;
    }
    return 0;
}

pp_search_status pp_search_run(const pp_search_opts *o, pp_search_result *r, FILE *err)
{
    memset(r, 0, sizeof *r);
    double t0 = now();
    if (o->costs) { /* once, so that a bad file is one message, not one per candidate */
        pp_costs c;
        char msg[512];
        if (pp_costs_load(&c, o->costs, msg, sizeof msg)) {
            fprintf(err, "ppc --search: --costs: %s\n", msg);
            return PP_SEARCH_IO;
        }
        snprintf(r->costs_backend, sizeof r->costs_backend, "%s", c.backend ? c.backend : "");
        r->costs_ranks_per_core = c.has_ranks_per_core ? c.ranks_per_core : 0;
        r->costs_cores = c.has_cores;
        pp_costs_free(&c);
    }
    if (o->tensor > 0 && o->W % o->tensor) {
        fprintf(err, "ppc --search: --tensor %d does not divide W=%lld (W counts ranks: W/T "
                     "workers of T ranks each)\n", o->tensor, o->W);
        return PP_SEARCH_NONE;
    }
    char **files;
    pp_search_status st = list_library(o->library, &files, &r->files, err);
    /* --tensor: each file once per tensor degree, on W / T workers */
    for (int i = 0; st == PP_SEARCH_OK && i < r->files; i++)
        for (long long T = 1; st == PP_SEARCH_OK && T <= o->W; T++) {
            if (o->tensor == 0 ? T > 1 : o->tensor > 0 ? T != o->tensor : o->W % T || T > PP_MAX_TENSOR)
                continue;
            pp_search_opts sub = *o;
            sub.W = o->W / T;
            sub.tensor = T > 1 || o->tensor > 0 ? (int)T : 0;
            st = search_file(&sub, r, err, files[i]);
        }
    for (int i = 0; i < r->files; i++)
        free(files[i]);
    free(files);
    if (st != PP_SEARCH_OK)
        return st;
    if (pick_model(r) || pp_search_front(r) || name_outputs(r))
        return PP_SEARCH_NOMEM;
    for (int i = 0; i < r->n; i++) {
        r->ok += r->c[i].state == PP_CAND_OK;
        r->refused += r->c[i].state == PP_CAND_REFUSED;
        r->indivisible += r->c[i].state == PP_CAND_REFUSED && r->c[i].indivisible;
        r->over += r->c[i].state == PP_CAND_OVER;
        r->other_model += r->c[i].state == PP_CAND_OTHER_MODEL;
    }
    r->seconds = now() - t0;
    if (r->ok)
        return PP_SEARCH_OK;
    if (r->over) {
        const pp_search_cand *least = NULL;
        for (int i = 0; i < r->n; i++)
            if (r->c[i].state == PP_CAND_OVER && r->c[i].mem &&
                (!least || r->c[i].mem < least->mem))
                least = &r->c[i];
        fprintf(err,
                "ppc --search: no candidate fits under --mem-limit %llu: the smallest of "
                "the %d over it needs %llu bytes on a worker (ppc %s %s); expected a "
                "limit of at least that\n",
                (unsigned long long)o->mem_limit, r->over, (unsigned long long)least->mem,
                least->file, least->args);
    } else {
        const pp_search_cand *first = NULL;
        for (int i = 0; i < r->n && !first; i++)
            if (r->c[i].state == PP_CAND_REFUSED)
                first = &r->c[i];
        fprintf(err,
                "ppc --search: none of the %d candidates from %d files compiles with "
                "W=%lld B=%lld (%d refused, %d train another model)",
                r->n, r->files, o->W, o->B, r->refused, r->other_model);
        if (first)
            fprintf(err, "; the first refused, ppc %s %s: %s", first->file, first->args,
                    first->why ? first->why : "(not known)");
        fputc('\n', err);
    }
    return PP_SEARCH_NONE;
}

/* ==== Output =============================================================== */

/* The output directory of a row's command: out/<file's stem>. */
static void out_dir(const char *file, char *buf, size_t n)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t len = strlen(base);
    if (len > 3 && !strcmp(base + len - 3, ".pp"))
        len -= 3;
    snprintf(buf, n, "out/%.*s", (int)len, base);
}

static const char *state_word(pp_cand_state st)
{
    switch (st) {
    case PP_CAND_OK:
        return "compiled";
    case PP_CAND_REFUSED:
        return "refused";
    case PP_CAND_OVER:
        return "over";
    case PP_CAND_OTHER_MODEL:
        return "model";
    }
    return "?";
}

/* The program as the user ran it. */
static const char *prog_of(const pp_search_opts *o) { return o->prog ? o->prog : "ppc"; }

/* --all: every candidate in the order generated. */
static void print_all(FILE *f, const pp_search_opts *o, const pp_search_result *r)
{
    fprintf(f, "every candidate (front: its rank; model: another model than the search's):\n");
    fprintf(f, "%-8s  %5s  %12s  %12s  %s\n", "state", "front", "step time", "memory (B)",
            "command");
    for (int i = 0; i < r->n; i++) {
        const pp_search_cand *k = &r->c[i];
        int known = k->state != PP_CAND_REFUSED && k->mem;
        char t[32] = "-", m[32] = "-", fr[16] = "-";
        if (known) {
            snprintf(t, sizeof t, "%.6g", k->time);
            snprintf(m, sizeof m, "%llu", (unsigned long long)k->mem);
        }
        if (k->front)
            snprintf(fr, sizeof fr, "%d", k->front);
        fprintf(f, "%-8s  %5s  %12s  %12s  ", state_word(k->state), fr, t, m);
        shell_word(f, prog_of(o));
        fputc(' ', f);
        shell_word(f, k->file);
        fprintf(f, " %s", k->args);
        if (k->state == PP_CAND_REFUSED || (k->state == PP_CAND_OVER && k->why))
            fprintf(f, "   # %s", k->why ? k->why : "(not known)");
        else if (k->state == PP_CAND_OTHER_MODEL)
            fprintf(f, "   # %s", k->model);
        else if (k->split)
            fprintf(f, "   # layers %s", k->split);
        fputc('\n', f);
    }
}

void pp_search_print(FILE *f, const pp_search_opts *o, const pp_search_result *r, int top, int all)
{
    fprintf(f, "ppc --search: W=%lld B=%lld; model %s%s%s%s; costs: %s%s%s; --mem-limit ", o->W,
            o->B, o->model_file ? "of " : "", o->model_file ? o->model_file : "",
            o->model_file ? ": " : "", r->model ? r->model : "(none)", o->costs ? "--costs " : "each file's cost lines",
            o->costs ? o->costs : "", total_layers(o) ? ", per block, times each stage's blocks" : "");
    if (o->mem_limit)
        fprintf(f, "%llu bytes\n", (unsigned long long)o->mem_limit);
    else
        fputs("none\n", f);
    if (r->costs_ranks_per_core > 1 && !r->costs_cores)
        fprintf(f,
                "note: --costs was measured with %.3g ranks per core (backend %s) and gives no "
                "\"cores\": the simulation does not model ranks waiting for a core, so these "
                "times are known to miss where ranks share cores (tests/bench/predict_bench.sh's "
                "4-rank table); give \"cores\" or measure with a core per rank\n",
                r->costs_ranks_per_core, r->costs_backend[0] ? r->costs_backend : "unknown");
    else if (r->costs_ranks_per_core > 1)
        fprintf(f,
                "note: --costs was measured with %.3g ranks per core: the simulation shares "
                "\"cores\" among the jobs and resumes waiting ranks \"wake\" late, and has still "
                "missed such steps by up to 30%% (tests/bench/predict_bench.sh's 4-rank table)\n",
                r->costs_ranks_per_core);
    fprintf(f, "Pareto front of predicted step time against peak plan memory per worker, "
               "fastest first:\n");
    fprintf(f, "%4s  %12s  %7s  %12s  %10s  %s\n", "rank", "step time", "bubble", "memory (B)",
            "memory", "command");
    int rows = top > 0 && top < r->nfront ? top : r->nfront;
    for (int i = 0; i < rows; i++) {
        const pp_search_cand *k = &r->c[r->front[i]];
        char hb[16];
        fprintf(f, "%4d  %12.6g  %6.1f%%  %12llu  %10s  ", i + 1, k->time, 100.0 * k->bubble,
                (unsigned long long)k->mem, pp_human_bytes(k->mem, hb));
        shell_word(f, prog_of(o));
        fputc(' ', f);
        shell_word(f, k->file);
        fprintf(f, " %s -o %s", k->args, k->out);
        if (k->split)
            fprintf(f, "   # layers %s", k->split);
        fputc('\n', f);
    }
    if (rows < r->nfront)
        fprintf(f, "(%d more on the front; --top shows more)\n", r->nfront - rows);
    fprintf(f, "%d candidates from %d files in %.2f s: %d compiled (%d on the front), %d refused",
            r->n, r->files, r->seconds, r->ok, r->nfront, r->refused);
    if (total_layers(o) && !o->layers)
        fprintf(f, " (%d: S does not divide the model's count)", r->indivisible);
    fprintf(f, ", %d over --mem-limit, %d another model", r->over, r->other_model);
    /* Without --layers each file trains its own model block: the deeper
     * models of V > 1 stages per worker compare only with one model size. */
    if (r->other_model && !total_layers(o))
        fputs(": give --layers L to compare them", f);
    fputc('\n', f);
    if (all)
        print_all(f, o, r);
}

void pp_search_free(pp_search_result *r)
{
    for (int i = 0; i < r->n; i++) {
        free(r->c[i].file);
        free(r->c[i].args);
        free(r->c[i].model);
        free(r->c[i].why);
        free(r->c[i].out);
        free(r->c[i].split);
    }
    free(r->c);
    free(r->front);
    free(r->model);
    memset(r, 0, sizeof *r);
}

/* A candidate's whole command, as the table prints it (caller frees). */
static char *command_line(const pp_search_opts *o, const pp_search_cand *k)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return NULL;
    shell_word(m, prog_of(o));
    fputc(' ', m);
    shell_word(m, k->file);
    fprintf(m, " %s -o %s", k->args, k->out);
    if (fclose(m)) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void json_cand(FILE *f, const pp_search_opts *o, const pp_search_cand *k)
{
    int known = k->state != PP_CAND_REFUSED && k->mem;
    fputs("{\"state\": ", f);
    pp_json_str(f, state_word(k->state));
    fprintf(f, ", \"front\": %d, ", k->front);
    if (known)
        fprintf(f, "\"time\": %.17g, \"bubble\": %.17g, \"mem_bytes\": %llu, \"S\": %lld", k->time,
                k->bubble, (unsigned long long)k->mem, k->S);
    else
        fputs("\"time\": null, \"bubble\": null, \"mem_bytes\": null, \"S\": null", f);
    fputs(", \"file\": ", f);
    pp_json_str(f, k->file);
    fputs(", \"args\": ", f);
    pp_json_str(f, k->args);
    char *cmd = command_line(o, k);
    fputs(", \"command\": ", f);
    pp_json_str(f, cmd);
    free(cmd);
    fputs(", \"model\": ", f);
    pp_json_str(f, k->model);
    fputs(", \"why\": ", f);
    pp_json_str(f, k->why);
    fputs(", \"split\": ", f);
    pp_json_str(f, k->split);
    fputs("}", f);
}

void pp_search_print_json(FILE *f, const pp_search_opts *o, const pp_search_result *r, int top,
                          int all)
{
    fprintf(f, "{\n  \"W\": %lld,\n  \"B\": %lld,\n  \"model\": ", o->W, o->B);
    pp_json_str(f, r->model);
    fputs(",\n  \"costs\": ", f);
    pp_json_str(f, o->costs);
    fprintf(f, ",\n  \"mem_limit\": %llu,\n", (unsigned long long)o->mem_limit);
    if (total_layers(o))
        fprintf(f, "  \"layers\": %lld,\n", total_layers(o));
    else
        fputs("  \"layers\": null,\n", f);
    fprintf(f,
            "  \"files\": %d,\n  \"candidates_count\": %d,\n  \"compiled\": %d,\n"
            "  \"refused\": %d,\n  \"indivisible\": %d,\n  \"over\": %d,\n"
            "  \"other_model\": %d,\n  \"seconds\": %.6f,\n  \"front\": [",
            r->files, r->n, r->ok, r->refused, r->indivisible, r->over, r->other_model, r->seconds);
    int rows = top > 0 && top < r->nfront ? top : r->nfront;
    for (int i = 0; i < rows; i++) {
        fputs(i ? ",\n    " : "\n    ", f);
        json_cand(f, o, &r->c[r->front[i]]);
    }
    fputs(rows ? "\n  ]" : "]", f);
    if (all) {
        fputs(",\n  \"candidates\": [", f);
        for (int i = 0; i < r->n; i++) {
            fputs(i ? ",\n    " : "\n    ", f);
            json_cand(f, o, &r->c[i]);
        }
        fputs(r->n ? "\n  ]" : "]", f);
    }
    fputs("\n}\n", f);
}
