/* ppc.c - the schedule compiler's command line.
 *
 *   ppc FILE.pp -o DIR [-D NAME=VALUE]... [--costs FILE] [--layers L] [--[no-]pictures] [-q]
 *   ppc FILE.pp --emit torch-csv DIR [-o DIR] ...
 *   ppc --table [-D S=..] [-D B=..] [-D G=..] [-D R=..] [--library DIR]
 *   ppc --search [MODEL.pp] -D W=.. -D B=.. [--costs FILE] [--mem-limit BYTES] [--library DIR] [--top N] [--layers L]
 *   ppc --opcodes
 *
 * Compiles the schedule (compile.h: parse, check, evaluate, simulate, keep
 * weights, report, lower, verify), writes what it costs (DIR/report.txt,
 * report.json, timeline.svg, trace.json) and DIR/rank<r>.bin (the plan the
 * VM runs) and DIR/rank<r>.txt (its listing). Every set of plans has passed
 * the compiler's verification (the communication checker, isa/commcheck.h)
 * before it is written. The report is written even when lowering fails, so
 * a schedule the lowering rejects still shows its cost. --emit torch-csv
 * writes DIR/<name>.csv, the per-rank action lists PyTorch's pipeline
 * runtime loads (torch_csv.h), for a schedule that compiled.
 * Exit codes: 0 success; 1 the schedule has errors (all are printed);
 * 2 bad command line; 3 a file could not be read or written; 4 out of
 * memory; 5 internal error (plans that fail the compiler's own checks).
 * Only main exits; everything below returns. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile.h"
#include "search.h"
#include "table.h"
#include "timeline.h"
#include "torch_csv.h"
#include "user_model.h"
#include "costs_backend.h"
#include "../isa/suggest.h"

enum { EXIT_SCHEDULE = 1, EXIT_USAGE = 2, EXIT_IO = 3, EXIT_NOMEM = 4, EXIT_INTERNAL = 5 };

/* A file ppc could not create or write: says so and returns the exit
 * code, 3, or 4 when the reason was memory (errno ENOMEM). */
static int io_failed(const char *what, const char *path)
{
    int e = errno;
    fprintf(stderr, "ppc: cannot %s '%s': %s\n", what, path, strerror(e));
    return e == ENOMEM ? EXIT_NOMEM : EXIT_IO;
}

/* The exit code of a compile's status. */
static int exit_code(pp_compile_status st)
{
    switch (st) {
    case PP_COMPILE_OK:
        return 0;
    case PP_COMPILE_IO:
        return EXIT_IO;
    case PP_COMPILE_NOMEM:
        return EXIT_NOMEM;
    case PP_COMPILE_INTERNAL:
        return EXIT_INTERNAL;
    case PP_COMPILE_ERRORS:
        break;
    }
    return EXIT_SCHEDULE;
}

typedef struct {
    const char *file, *outdir, *costs, *library;
    pp_define *defs;
    int ndefs, quiet, table;
    int pictures;         /* 1 --pictures, 0 --no-pictures, -1 neither: PICTURES_MAX_JOBS decides */
    int prefetch;         /* --prefetch N */
    int keep;             /* --keep-weights */
    long long mem_limit;  /* --mem-limit BYTES, 0 = none */
    int optimizer;        /* --optimizer NAME: a pp_optimizer, or -1 for the schedule's */
    int tensor;           /* --tensor T (> 0), -1 for auto (--search only), 0: the file's */
    int precision;        /* --precision NAME: a pp_precision, or -1 for the schedule's */
    const char *emit_dir; /* --emit torch-csv DIR, or NULL */
    int search;           /* --search */
    int top;              /* --top N: rows of --search's front, 0 = all */
    int all;              /* --all: --search lists every candidate too */
    int json;             /* --json: --search prints JSON */
    long long layers;     /* --layers L: L blocks (layers) in total, L/S a stage; 0 = the file's */
    int layers_auto;      /* --layers auto(L): split as `layers = auto(L)` (--search: always) */
    const char *recompute; /* --recompute EXPR (issue 26), or NULL */
    const char *offload;   /* --offload EXPR (issue 26), or NULL */
    const char *backend;   /* --backend cpu|cuda (costs_backend.h), or NULL */
    const char *model;     /* --model FILE (user_model.h), or NULL; with --search, file */
    int seen_flags;        /* --prefetch, --keep-weights, -q, --pictures or --no-pictures given
                             (not for --search) */
} options;

static void usage(FILE *f)
{
    fprintf(f, "usage: ppc FILE.pp -o DIR [-D NAME=VALUE]... [--costs FILE] [--prefetch N]\n"
               "           [--mem-limit BYTES] [--keep-weights] [--optimizer sgd|adamw]\n"
               "           [--precision fp32|bf16] [--layers L] [--recompute EXPR] [--tensor T]\n"
               "           [--offload EXPR] [--model MODEL.pp] [--backend cpu|cuda]\n"
               "           [--[no-]pictures] [-q]\n"
               "       ppc FILE.pp --emit torch-csv DIR [-o DIR] [the options above]\n"
               "       ppc --table [-D S=8] [-D B=16] [-D G=2] [-D R=2] [--library DIR]\n"
               "       ppc --search [MODEL.pp] -D W=WORKERS -D B=MICROBATCHES [--costs FILE]\n"
               "           [--mem-limit BYTES] [--library DIR] [--top N] [--all] [--json]\n"
               "           [--optimizer O] [--precision P] [--layers L] [--tensor T|auto]\n"
               "       ppc --opcodes\n"
               "  -o DIR          write DIR/rank<r>.bin and .txt for every worker r, and\n"
               "                  DIR/report.txt, report.json, timeline.svg, trace.json\n"
               "  -D NAME=VALUE   override the default of 'param NAME' (an integer)\n"
               "  --costs FILE    job and transfer costs measured (JSON), overriding the\n"
               "                  schedule's cost lines; in seconds unless its \"unit\" is\n"
               "                  \"ms\", \"us\" or \"ns\" (trace.json converts to microseconds);\n"
               "                  \"cores\": C lets at most C jobs compute at once (ranks\n"
               "                  sharing a machine's cores)\n"
               "  --no-pictures   skip timeline.svg and trace.json; without --pictures they\n"
               "                  are skipped above 100000 jobs (hundreds of MB that no\n"
               "                  viewer opens at a million jobs)\n"
               "  --pictures      draw timeline.svg and trace.json whatever the size\n"
               "  --prefetch N    post receives and weight fetches N jobs before their\n"
               "                  consumer, never before their producer ends (default 1)\n"
               "  --mem-limit B   fail if a worker would allocate more than B bytes (or\n"
               "                  512MiB, 2GiB: KiB/MiB/GiB 1024-based, KB/MB/GB 1000-based)\n"
               "  --version       print ppc's version and its plan format's, then exit\n"
               "  --keep-weights  keep fetched weights for later jobs of the same stage\n"
               "                  instead of fetching again (as many as --mem-limit allows)\n"
               "  --recompute E   as if the file ended with 'recompute when E': F(s,b) keeps\n"
               "                  its input, R(s,b) re-runs it before B(s,b) where E holds\n"
               "  --tensor T      T tensor-parallel ranks per worker, overriding the\n"
               "                  schedule's 'tensor' line; with --search, W counts ranks and\n"
               "                  every divisor T of W is tried unless --tensor T names one\n"
               "                  ('auto': every divisor, the default)\n"
               "  --offload E     as if the file ended with 'offload when E': F(s,b)'s stash\n"
               "                  goes to host memory until B(s,b) where E holds\n"
               "  --optimizer O   sgd or adamw, overriding the schedule's 'optimizer' line\n"
               "                  (AdamW's two moments are state the owners hold)\n"
               "  --precision P   fp32 or bf16, overriding the schedule's 'precision' line\n"
               "                  (bf16: jobs compute with and fetches move a bf16 copy of\n"
               "                  the weights, which owners keep beside their fp32 ones)\n"
               "  --layers L      the model has L blocks (mlp) or layers (gpt) in total: L/S\n"
               "                  on every stage, whatever the model block says (S must\n"
               "                  divide L); job costs (cost lines, 1, --costs) are then one\n"
               "                  block's, times the stage's blocks; with --search, every\n"
               "                  family trains the same model, whatever its S, and each\n"
               "                  candidate the split auto(L) chooses for it\n"
               "  --layers auto(L) L layers split as 'layers = auto(L)' would split them\n"
               "  --backend B     cpu or cuda, what the plans will run on (ppvm --backend):\n"
               "                  a --costs profile measured on the other gets a warning\n"
               "  --model M.pp    train M.pp's model block (its optimizer, precision, tensor\n"
               "                  lines too) in place of the schedule's: its blocks (layers)\n"
               "                  count the whole model's, split L/S a stage as --layers\n"
               "  --emit torch-csv DIR\n"
               "                  also (or, without -o, only) write DIR/<name>.csv for FILE\n"
               "                  <name>.pp: one row per rank of the actions PyTorch's\n"
               "                  pipeline runtime loads (_PipelineScheduleRuntime._load_csv,\n"
               "                  compute_only; torchtitan's pipeline_parallel_schedule_csv);\n"
               "                  a schedule PyTorch cannot express is an error\n"
               "  -q              print nothing on success but the schedule's warnings\n"
               "  --table         print the seed's Table 1, measured on the library's DDP,\n"
               "                  FSDP, GPipe, LPP and FSLPP, beside the seed's entries\n"
               "  --opcodes       print the instruction set, generated from isa/opcodes.h,\n"
               "                  as the Markdown table isa/README.md shows\n"
               "  --library DIR   where --table and --search find the schedules (default:\n"
               "                  ../schedules beside the ppc binary)\n"
               "  --search        compile every library schedule over its '# search:' line\n"
               "                  (with --prefetch 0, 1, 2 and --keep-weights) for W workers\n"
               "                  and B microbatches, and print the Pareto front of predicted\n"
               "                  step time against peak plan memory per worker, fastest first,\n"
               "                  each row a command that reproduces it; --mem-limit drops the\n"
               "                  candidates over it; with MODEL.pp, for its model block\n"
               "                  (as --model; B defaults to its 'param B')\n"
               "  --top N         print only the first N rows of --search's front\n"
               "  --all           with --search, then list every candidate: compiled, refused\n"
               "                  (and why), over --mem-limit, or another model\n"
               "  --json          with --search, print the front (and --all's list) as JSON\n");
}

#ifndef PP_VERSION
#define PP_VERSION "unknown" /* the Makefile passes git describe's */
#endif

/* --mem-limit's value: bytes, or with a unit: KiB, MiB, GiB, TiB (powers
 * of 1024) or KB, MB, GB, TB (powers of 1000), as "512MiB" or "1.5 GiB"
 * hold whole bytes. -1 when malformed or out of range. */
static long long parse_bytes(const char *s)
{
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"KiB", 1024.0},
                 {"MiB", 1024.0 * 1024},
                 {"GiB", 1024.0 * 1024 * 1024},
                 {"TiB", 1024.0 * 1024 * 1024 * 1024},
                 {"KB", 1e3},
                 {"MB", 1e6},
                 {"GB", 1e9},
                 {"TB", 1e12}};
    char *end;
    if (!s[0] || isspace((unsigned char)s[0]) || s[0] == '-' || s[0] == '+')
        return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return -1;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(end, units[i].unit)) {
            double b = v * units[i].scale;
            if (b > 9.2e18 || (units[i].scale == 1 && v != floor(v)) || b != floor(b))
                return -1;
            return (long long)b;
        }
    return -1;
}

/* -D NAME=VALUE into defs[*n]; a name given twice is refused (the second
 * would silently win). 0, -1 a bad definition (said why), -2 out of memory. */
static int parse_define(const char *arg, pp_define *defs, int *n)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        fprintf(stderr, "ppc: -D %s: expected NAME=VALUE, e.g. -D S=8\n", arg);
        return -1;
    }
    char *end;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (eq[1] == '\0' || *end != '\0' || errno == ERANGE) {
        fprintf(stderr,
                "ppc: -D %s: the value '%s' is not an integer "
                "(expected NAME=INTEGER, e.g. -D S=8)\n",
                arg, eq + 1);
        return -1;
    }
    size_t len = (size_t)(eq - arg);
    for (int i = 0; i < *n; i++)
        if (strlen(defs[i].name) == len && !strncmp(defs[i].name, arg, len)) {
            fprintf(stderr, "ppc: -D %s: %s is already given (-D %s=%lld); give each name once\n",
                    arg, defs[i].name, defs[i].name, defs[i].value);
            return -1;
        }
    defs[*n].name = strndup(arg, len);
    defs[*n].value = v;
    if (!defs[*n].name)
        return -2;
    (*n)++;
    return 0;
}

/* A flag whose value is a string (-o, --costs, --library): refused when
 * empty or given twice. 0 or -1 (said why). */
static int set_string(const char *flag, const char *val, const char **dst)
{
    if (*dst) {
        fprintf(stderr, "ppc: %s given twice ('%s' and '%s'); give it once\n", flag, *dst, val);
        return -1;
    }
    if (!val[0]) {
        fprintf(stderr, "ppc: %s: expected %s, found an empty string\n", flag,
                !strcmp(flag, "-o") || !strcmp(flag, "--library") ? "a directory" : "a file");
        return -1;
    }
    *dst = val;
    return 0;
}

/* --emit FORMAT DIR at argv[*i]; moves *i past DIR. torch-csv is the one
 * format. 0 or -1 (said why). */
static int parse_emit(int argc, char **argv, int *i, options *o)
{
    if (*i + 1 >= argc) {
        fprintf(stderr,
                "ppc: --emit needs a format and a directory, e.g. --emit torch-csv out/csv\n");
        return -1;
    }
    const char *fmt = argv[*i + 1];
    if (strcmp(fmt, "torch-csv")) {
        fprintf(stderr, "ppc: --emit '%s': unknown format; expected torch-csv\n", fmt);
        return -1;
    }
    if (*i + 2 >= argc) {
        fprintf(stderr, "ppc: --emit torch-csv needs a directory, e.g. --emit torch-csv out/csv\n");
        return -1;
    }
    if (o->emit_dir) {
        fprintf(stderr, "ppc: --emit given twice; give it once\n");
        return -1;
    }
    if (!argv[*i + 2][0]) {
        fprintf(stderr, "ppc: --emit torch-csv: expected a directory, found an empty string\n");
        return -1;
    }
    o->emit_dir = argv[*i + 2];
    *i += 2;
    return 0;
}

/* ==== --search's flags ====================================================
 * --search, --top N, --all and --json; 1 when argv[*i] was one of them, 0
 * when not, -1 a bad value (said why). */
static int parse_search_flag(int argc, char **argv, int *i, options *o)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--search")) {
        if (o->search) {
            fprintf(stderr, "ppc: --search given twice; give it once\n");
            return -1;
        }
        o->search = 1;
        return 1;
    }
    if (!strcmp(a, "--all") || !strcmp(a, "--json")) {
        *(a[2] == 'a' ? &o->all : &o->json) = 1;
        return 1;
    }
    if (strcmp(a, "--top"))
        return 0;
    char *end;
    errno = 0;
    long v = *i + 1 < argc ? strtol(argv[*i + 1], &end, 10) : -1;
    if (*i + 1 >= argc || !argv[*i + 1][0] || *end || errno || v < 1 || v > 1000000) {
        fprintf(stderr, "ppc: --top expects a number of rows from 1 to 1000000, found %s%s%s\n",
                *i + 1 < argc ? "'" : "", *i + 1 < argc ? argv[*i + 1] : "nothing",
                *i + 1 < argc ? "'" : "");
        return -1;
    }
    if (o->top) {
        fprintf(stderr, "ppc: --top given twice; give it once\n");
        return -1;
    }
    o->top = (int)v;
    (*i)++;
    return 1;
}

static const char *const search_conflicts[] = {"-q", "--no-pictures", "--pictures",
                                               "--keep-weights", "--prefetch"};
#define NCONFLICTS ((int)(sizeof search_conflicts / sizeof search_conflicts[0]))
#define NWRITING 3 /* the first NWRITING are about what is written */

/* Notes a flag --search refuses (argv[i] is always a flag here: the values
 * of flags are skipped by the loop). */
static void note_search_conflict(const char *a, options *o)
{
    for (int k = 0; k < NCONFLICTS; k++)
        if (!strcmp(a, search_conflicts[k]))
            o->seen_flags |= 1 << k;
}

/* What --search takes: -D W and -D B (nothing else), no schedule file, no
 * -o, and none of the flags it tries itself. 0 or -1 (said why). */
static int check_search_args(const options *o)
{
    const char *const *flags = search_conflicts;
    if (!o->search) {
        fprintf(stderr, "ppc: %s is only for --search\n",
                o->top   ? "--top"
                : o->all ? "--all"
                         : "--json");
        return -1;
    }
    if (o->outdir || o->table || o->model) {
        fprintf(stderr,
                "ppc: --search compiles the library's schedules and writes no plan: "
                "expected no %s\n",
                o->outdir ? "-o"
                : o->model ? "--model (give the model's file alone: ppc --search MODEL.pp)"
                           : "--table");
        return -1;
    }
    for (int k = 0; k < NCONFLICTS; k++)
        if (o->seen_flags & (1 << k)) {
            if (k < NWRITING)
                fprintf(stderr,
                        "ppc: --search prints a table and writes no report or plan; "
                        "expected no %s\n",
                        flags[k]);
            else
                fprintf(stderr,
                        "ppc: --search tries --prefetch 0, 1, 2 and --keep-weights "
                        "itself; expected no %s\n",
                        flags[k]);
            return -1;
        }
    int have[2] = {0, 0};
    for (int i = 0; i < o->ndefs; i++) {
        const char *n = o->defs[i].name;
        if (strcmp(n, "W") && strcmp(n, "B")) {
            fprintf(stderr,
                    "ppc: --search: -D %s: expected only -D W=WORKERS and "
                    "-D B=MICROBATCHES (each library file's '# search:' line sets "
                    "the rest)\n",
                    n);
            return -1;
        }
        /* W up to 1024 keeps every library line within its 4096 values */
        long long v = o->defs[i].value, most = n[0] == 'W' ? 1024 : 65536;
        if (v < 1 || v > most) {
            fprintf(stderr, "ppc: --search: -D %s=%lld: expected 1 to %lld\n", n, v, most);
            return -1;
        }
        have[n[0] == 'B'] = 1;
    }
    if (!have[0] || (!have[1] && !o->file)) { /* a model file may give B (run_search) */
        fprintf(stderr, "ppc: --search needs -D W=WORKERS and -D B=MICROBATCHES, e.g. "
                        "ppc --search -D W=8 -D B=32\n");
        return -1;
    }
    return 0;
}

/* ==== --layers L ===========================================================
 * The model's blocks (layers) in total, for a plain compile and --search
 * (compile.h). 1 when argv[*i] was it, 0 when not, -1 a bad value (said
 * why). The bound is the plan format's total (PP_MAX_TOTAL_LAYERS); the
 * compile then refuses more than PP_MAX_LAYERS on one stage. */
static int parse_layers(int argc, char **argv, int *i, options *o)
{
    if (strcmp(argv[*i], "--layers"))
        return 0;
    char *end = NULL;
    errno = 0;
    /* auto(L): the compiler splits them (--search prints it so) */
    const char *arg = *i + 1 < argc ? argv[*i + 1] : "";
    int is_auto = !strncmp(arg, "auto(", 5);
    long long v = *i + 1 < argc ? strtoll(arg + (is_auto ? 5 : 0), &end, 10) : -1;
    if (is_auto && end && *end == ')' && end > arg + 5)
        end++;
    else if (is_auto)
        v = -1;
    if (*i + 1 >= argc || !argv[*i + 1][0] || *end || errno || v < 1 ||
        (uint64_t)v > PP_MAX_TOTAL_LAYERS) {
        fprintf(stderr,
                "ppc: --layers expects the model's blocks (layers) in total, from 1 to "
                "%llu, or auto(L) for the compiler to split them, found %s%s%s\n",
                (unsigned long long)PP_MAX_TOTAL_LAYERS, *i + 1 < argc ? "'" : "",
                *i + 1 < argc ? argv[*i + 1] : "nothing", *i + 1 < argc ? "'" : "");
        return -1;
    }
    if (o->layers) {
        fprintf(stderr, "ppc: --layers given twice; give it once\n");
        return -1;
    }
    o->layers = v;
    o->layers_auto = is_auto;
    (*i)++;
    return 1;
}

/* 0, 1 for --help, 2 for --opcodes, -1 a bad command line (said why), -2
 * out of memory. */
static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->pictures = -1;
    o->prefetch = 1;
    o->optimizer = -1;
    o->precision = -1;
    o->defs = calloc((size_t)argc, sizeof *o->defs);
    if (!o->defs)
        return -2;
    int seen[2] = {0, 0}; /* --mem-limit, --prefetch */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        note_search_conflict(a, o);
        if ((rc = parse_search_flag(argc, argv, &i, o)) < 0)
            return rc;
        if (rc > 0)
            continue;
        if ((rc = parse_layers(argc, argv, &i, o)) < 0)
            return rc;
        if (rc > 0)
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        else if (!strcmp(a, "--version"))
            return 3;
        else if (!strcmp(a, "--opcodes"))
            return 2;
        else if (!strcmp(a, "-q"))
            o->quiet = 1;
        else if (!strcmp(a, "--table"))
            o->table = 1;
        else if (!strcmp(a, "--no-pictures") || !strcmp(a, "--pictures")) {
            int want = a[2] == 'p';
            if (o->pictures == !want) {
                fprintf(stderr, "ppc: --pictures and --no-pictures contradict each other; "
                                "give one\n");
                return -1;
            }
            o->pictures = want;
        } else if (!strcmp(a, "--keep-weights"))
            o->keep = 1;
        else if (!strcmp(a, "--recompute")) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0' || o->recompute) {
                fprintf(stderr,
                        "ppc: --recompute expects one expression over s, b and params "
                        "(as 'recompute when EXPR'), %s\n",
                        o->recompute ? "given twice" : "found nothing");
                return -1;
            }
            o->recompute = argv[++i];
        } else if (!strcmp(a, "--offload")) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0' || o->offload) {
                fprintf(stderr,
                        "ppc: --offload expects one expression over s, b and params "
                        "(as 'offload when EXPR'), %s\n",
                        o->offload ? "given twice" : "found nothing");
                return -1;
            }
            o->offload = argv[++i];
        } else if (!strcmp(a, "--emit")) {
            if ((rc = parse_emit(argc, argv, &i, o)) != 0)
                return rc;
        } else if (!strcmp(a, "--prefetch") || !strcmp(a, "--mem-limit")) {
            char *end = NULL;
            errno = 0;
            long long v = i + 1 >= argc ? -1
                          : a[2] == 'p' ? strtoll(argv[i + 1], &end, 10)
                                        : parse_bytes(argv[i + 1]);
            if (i + 1 >= argc || argv[i + 1][0] == '\0' || (end && *end) || errno || v < 0 ||
                (a[2] == 'p' && v > 1000000)) {
                fprintf(stderr, "ppc: %s expects %s, found %s%s%s\n", a,
                        a[2] == 'p' ? "a number of jobs from 0 to 1000000"
                                    : "a number of bytes (a non-negative integer, or with KiB, "
                                      "MiB, GiB (1024-based) or KB, MB, GB (1000-based))",
                        i + 1 < argc ? "'" : "", i + 1 < argc ? argv[i + 1] : "nothing",
                        i + 1 < argc ? "'" : "");
                return -1;
            }
            if (seen[a[2] == 'p']++) {
                fprintf(stderr, "ppc: %s given twice; give it once\n", a);
                return -1;
            }
            i++;
            if (a[2] == 'p')
                o->prefetch = (int)v;
            else
                o->mem_limit = v;
        } else if (!strcmp(a, "--backend")) {
            if (i + 1 >= argc || !pp_backend_known(argv[i + 1])) {
                fprintf(stderr, "ppc: --backend expects cpu or cuda, found %s%s%s\n",
                        i + 1 < argc ? "'" : "", i + 1 < argc ? argv[i + 1] : "nothing",
                        i + 1 < argc ? "'" : "");
                return -1;
            }
            if (set_string(a, argv[++i], &o->backend))
                return -1;
        } else if (!strcmp(a, "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ppc: --model needs a .pp file with a model block\n");
                return -1;
            }
            if (set_string(a, argv[++i], &o->model))
                return -1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "-D") || !strcmp(a, "--costs") ||
                   !strcmp(a, "--library") || !strcmp(a, "--optimizer") ||
                   !strcmp(a, "--precision") || !strcmp(a, "--tensor")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ppc: %s needs an argument\n", a);
                return -1;
            }
            if (!strcmp(a, "--tensor")) { /* issue 27: 1..64, or auto for --search */
                const char *v = argv[++i];
                char *end;
                long t = strtol(v, &end, 10);
                if (o->tensor) {
                    fprintf(stderr, "ppc: --tensor given twice; give it once\n");
                    return -1;
                }
                if (!strcmp(v, "auto"))
                    o->tensor = -1;
                else if (end == v || *end || t < 1 || t > PP_MAX_TENSOR) {
                    fprintf(stderr,
                            "ppc: --tensor %s: expected a number of ranks per worker, 1 to %u "
                            "(or auto with --search: every divisor of W)\n",
                            v, PP_MAX_TENSOR);
                    return -1;
                } else
                    o->tensor = (int)t;
            } else if (!strcmp(a, "--optimizer") || !strcmp(a, "--precision")) {
                int opt = a[2] == 'o';
                int v = opt ? pp_optimizer_parse(argv[++i]) : pp_precision_parse(argv[++i]);
                if (v < 0) {
                    fprintf(stderr, "ppc: %s %s: expected %s\n", a, argv[i],
                            opt ? "sgd or adamw" : "fp32 or bf16");
                    return -1;
                }
                if ((opt ? o->optimizer : o->precision) >= 0) {
                    fprintf(stderr, "ppc: %s given twice; give it once\n", a);
                    return -1;
                }
                *(opt ? &o->optimizer : &o->precision) = v;
            } else if (!strcmp(a, "-o")) {
                if (set_string(a, argv[++i], &o->outdir))
                    return -1;
            } else if (!strcmp(a, "--costs")) {
                if (set_string(a, argv[++i], &o->costs))
                    return -1;
            } else if (!strcmp(a, "--library")) {
                if (set_string(a, argv[++i], &o->library))
                    return -1;
            } else if ((rc = parse_define(argv[++i], o->defs, &o->ndefs)) != 0)
                return rc;
        } else if (!strncmp(a, "-D", 2) && a[2]) {
            if ((rc = parse_define(a + 2, o->defs, &o->ndefs)) != 0)
                return rc;
        } else if (a[0] == '-' && a[1]) {
            char hint[120];
            fprintf(stderr, "ppc: unknown option '%s'%s\n", a,
                    pp_did_you_mean(a, usage, hint, sizeof hint));
            return -1;
        } else if (o->file) {
            fprintf(stderr, "ppc: more than one schedule file ('%s' and '%s')\n", o->file, a);
            return -1;
        } else if (!a[0]) {
            fprintf(stderr, "ppc: expected a schedule file, found an empty string\n");
            return -1;
        } else
            o->file = a;
    }
    if (o->search || o->top || o->all || o->json)
        return check_search_args(o);
    if (o->table) {
        if (o->file || o->outdir || o->costs || o->emit_dir || o->layers || o->model ||
            o->backend) {
            fprintf(stderr, "ppc: --table takes only -D S/B/G/R and --library, not %s\n",
                    o->file       ? "a schedule file"
                    : o->outdir   ? "-o"
                    : o->costs    ? "--costs"
                    : o->emit_dir ? "--emit"
                    : o->layers   ? "--layers"
                    : o->model    ? "--model"
                                  : "--backend");
            return -1;
        }
        return 0;
    }
    if (o->library) {
        fprintf(stderr, "ppc: --library is only for --table and --search\n");
        return -1;
    }
    if (!o->file || (!o->outdir && !o->emit_dir)) {
        fprintf(stderr, "ppc: %s\n",
                !o->file ? "no schedule file given" : "no output directory (-o DIR)");
        return -1;
    }
    return 0;
}

static int mkdir_p(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(path, 0777) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(path, 0777) && errno != EEXIST ? -1 : 0;
}

/* Removes DIR/rank<r>.bin and .txt for r = first, first+1, ... up to the
 * first rank without a .bin: those of an earlier compile, which ppvm would
 * otherwise run beside this compile's report. */
static void remove_rank_files(const char *dir, int first)
{
    char path[PATH_MAX];
    for (int r = first;; r++) {
        snprintf(path, sizeof path, "%s/rank%d.bin", dir, r);
        if (unlink(path))
            break;
        snprintf(path, sizeof path, "%s/rank%d.txt", dir, r);
        unlink(path);
    }
}

/* Writes rank r's plan and listing. 0, or the exit code with what went
 * wrong in msg (io_failed's words, without printing: the writers run in
 * threads, and the lowest failing rank's message is the one printed). */
static int write_rank(const char *outdir, const pp_plan *p, int r, char *msg, size_t n)
{
    char path[PATH_MAX], err[512];
    snprintf(path, sizeof path, "%s/rank%d.bin", outdir, r);
    pp_plan_status st = pp_plan_write(p, path, err, sizeof err);
    if (st != PP_PLAN_OK) {
        snprintf(msg, n, "ppc: %s", err);
        return st == PP_PLAN_ENOMEM ? EXIT_NOMEM : EXIT_IO;
    }
    snprintf(path, sizeof path, "%s/rank%d.txt", outdir, r);
    FILE *f = fopen(path, "w");
    int bad = !f;
    if (f) {
        pp_plan_disasm(p, f);
        bad = fclose(f) != 0;
    }
    if (bad) {
        int e = errno;
        char eb[256];
        snprintf(msg, n, "ppc: cannot write '%s': %s", path, strerror_r(e, eb, sizeof eb));
        return e == ENOMEM ? EXIT_NOMEM : EXIT_IO;
    }
    return 0;
}

/* The rank files are written by up to WRITERS threads, each taking the
 * next rank: a million-job schedule's listings are hundreds of MB, and
 * their formatting and writing were most of what ppc spent after the
 * compile itself (issue 18). Every file's bytes are the same whichever
 * thread writes it. */
#define WRITERS 4
typedef struct {
    const char *outdir;
    const pp_plan *plans;
    int W;
    pthread_mutex_t mu;
    int next;      /* the next rank to write */
    int fail_rank; /* the lowest rank that failed, W if none */
    int fail_rc;
    char fail_msg[PATH_MAX + 600];
} plan_writer;

static void *writer_loop(void *arg)
{
    plan_writer *pw = arg;
    char msg[sizeof pw->fail_msg];
    for (;;) {
        pthread_mutex_lock(&pw->mu);
        int r = pw->fail_rank < pw->W ? pw->W : pw->next++; /* stop at a failure */
        pthread_mutex_unlock(&pw->mu);
        if (r >= pw->W)
            return NULL;
        int rc = write_rank(pw->outdir, &pw->plans[r], r, msg, sizeof msg);
        if (rc) {
            pthread_mutex_lock(&pw->mu);
            if (r < pw->fail_rank) {
                pw->fail_rank = r;
                pw->fail_rc = rc;
                snprintf(pw->fail_msg, sizeof pw->fail_msg, "%s", msg);
            }
            pthread_mutex_unlock(&pw->mu);
        }
    }
}

static int write_plans(const options *o, pp_plan *plans, int W)
{
    if (mkdir_p(o->outdir)) {
        return io_failed("create directory", o->outdir);
    }
    /* pp_compile has validated and verified them */
    plan_writer pw = {.outdir = o->outdir, .plans = plans, .W = W, .next = 0, .fail_rank = W};
    pthread_mutex_init(&pw.mu, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = (int)(cpus < 1 ? 1 : cpus > WRITERS ? WRITERS : cpus);
    if (nthreads > W)
        nthreads = W;
    pthread_t tid[WRITERS];
    int started = 0;
    while (started + 1 < nthreads && !pthread_create(&tid[started], NULL, writer_loop, &pw))
        started++;    /* a thread that cannot start leaves its share to the others */
    writer_loop(&pw); /* this thread writes too */
    for (int k = 0; k < started; k++)
        pthread_join(tid[k], NULL);
    pthread_mutex_destroy(&pw.mu);
    if (pw.fail_rank < W) {
        fprintf(stderr, "%s\n", pw.fail_msg);
        /* ranks after the failed one may have been written by the other
         * threads: none is left for ppvm to run beside the new report */
        char path[PATH_MAX];
        for (int r = 0; r < W; r++)
            for (int k = 0; k < 2; k++) {
                snprintf(path, sizeof path, "%s/rank%d.%s", o->outdir, r, k ? "txt" : "bin");
                unlink(path);
            }
        return pw.fail_rc;
    }
    /* Rank files of an earlier, wider compile would mix plans: remove them. */
    remove_rank_files(o->outdir, W);
    return 0;
}

/* Writes DIR/name through fn; 0, or io_failed's exit code with a message. */
typedef int (*writer)(FILE *f, const void *ctx);
static int write_file(const char *dir, const char *name, writer fn, const void *ctx)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        return io_failed("write", path);
    }
    /* report.json and the pictures of a big schedule are tens of MB written
     * a line at a time: a large buffer makes that a few big writes (if it
     * cannot be had, stdio's own buffer does) */
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    int bad = fn(f, ctx) != 0;
    if (fclose(f) || bad) {
        return io_failed("write", path);
    }
    return 0;
}

typedef struct {
    const pp_report *rep;
    const pp_report_info *info;
    const pp_jobtable *t;
    const pp_sim_result *sim;
    const char *unit; /* --costs' time unit, NULL for the schedule's unitless costs */
} report_ctx;

static int w_txt(FILE *f, const void *c)
{
    const report_ctx *x = c;
    return pp_report_write_txt(f, x->rep, x->info, x->t, x->sim);
}
static int w_json(FILE *f, const void *c)
{
    const report_ctx *x = c;
    return pp_report_write_json(f, x->rep, x->info, x->t, x->sim);
}
static int w_svg(FILE *f, const void *c)
{
    const report_ctx *x = c;
    return pp_timeline_svg_unit(f, x->t, x->sim, x->unit);
}
static int w_trace(FILE *f, const void *c)
{
    const report_ctx *x = c;
    return pp_timeline_trace(f, x->t, x->sim, x->rep->xfer, x->rep->nxfer, x->unit);
}

/* Whether the pictures are drawn: --pictures, --no-pictures, or without
 * either, up to PICTURES_MAX_JOBS jobs. A million-job schedule's
 * timeline.svg and trace.json are some 130 and 250 MB (1F1B, S=64,
 * B=8192), which no browser or trace viewer opens, and writing them took
 * longer than the rest of the compile (issue 18). */
#define PICTURES_MAX_JOBS 100000
static int pictures_drawn(const options *o, const pp_report *rep)
{
    return o->pictures >= 0 ? o->pictures : rep->total.jobs <= PICTURES_MAX_JOBS;
}

static int write_report(const options *o, const report_ctx *x)
{
    if (mkdir_p(o->outdir)) {
        return io_failed("create directory", o->outdir);
    }
    int rc = write_file(o->outdir, "report.txt", w_txt, x);
    if (!rc)
        rc = write_file(o->outdir, "report.json", w_json, x);
    int draw = pictures_drawn(o, x->rep);
    if (!rc && draw)
        rc = write_file(o->outdir, "timeline.svg", w_svg, x);
    if (!rc && draw)
        rc = write_file(o->outdir, "trace.json", w_trace, x);
    if (!rc && !draw) { /* an earlier compile's would not match this report */
        static const char *const pictures[] = {"timeline.svg", "trace.json"};
        char path[PATH_MAX];
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s/%s", o->outdir, pictures[k]);
            if (unlink(path) && errno != ENOENT)
                return io_failed("remove", path);
        }
    }
    return rc;
}

/* The stdout summary: the headline numbers and the busiest worker's. */
static void summary(const options *o, const pp_schedule *sch, const pp_report *rep,
                    const pp_plan *plans)
{
    long long peak = 0, recv = 0, fetch = 0;
    uint64_t peak_b = 0;
    for (int w = 0; w < rep->W; w++) {
        const pp_worker_report *x = &rep->w[w];
        if (x->peak_act > peak)
            peak = x->peak_act;
        if (x->peak_act_bytes > peak_b)
            peak_b = x->peak_act_bytes;
        if (x->act_recv > recv)
            recv = x->act_recv;
        if (x->weight_recv > fetch)
            fetch = x->weight_recv;
    }
    char hb[2][16];
    printf("%s: S=%lld B=%lld W=%lld, %s order: makespan %g, bubble %.1f%%\n", o->file, sch->S,
           sch->B, sch->W, sch->strict ? "strict" : "greedy", rep->makespan, 100.0 * rep->bubble);
    printf("  per worker at most: %lld activations held (%s), %lld receives, %lld weight "
           "fetches; %s moved in all\n",
           peak, pp_human_bytes(peak_b, hb[0]), recv, fetch,
           pp_human_bytes(rep->total.act_recv_bytes + rep->total.weight_recv_bytes, hb[1]));
    int draw = pictures_drawn(o, rep);
    printf("wrote %s/report.txt, report.json%s, rank0..%lld.{bin,txt}, plan id %016llx\n",
           o->outdir, draw ? ", timeline.svg, trace.json" : "",
           sch->W * pp_model_tensor(&sch->model) - 1, (unsigned long long)plans[0].plan_id);
    if (!draw && o->pictures < 0)
        printf("  no timeline.svg or trace.json: %d jobs, more than %d (--pictures draws them)\n",
               rep->total.jobs, PICTURES_MAX_JOBS);
}

/* The library beside the binary: <dir of ppc>/../schedules. */
static const char *default_library(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len <= 0)
        return "schedules";
    buf[len] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash || (size_t)(slash - buf) + 16 > n)
        return "schedules";
    strcpy(slash, "/../schedules");
    return buf;
}

static int run_table(const options *o)
{
    long long v[4] = {8, 16, 2, 2};
    static const char *names[4] = {"S", "B", "G", "R"};
    for (int i = 0; i < o->ndefs; i++) {
        int k = 0;
        while (k < 4 && strcmp(o->defs[i].name, names[k]))
            k++;
        if (k == 4) {
            fprintf(stderr, "ppc --table: -D %s: expected one of S, B, G, R\n", o->defs[i].name);
            return EXIT_USAGE;
        }
        if (o->defs[i].value < 1 || o->defs[i].value > 4096) {
            fprintf(stderr, "ppc --table: -D %s=%lld: expected 1 to 4096\n", names[k],
                    o->defs[i].value);
            return EXIT_USAGE;
        }
        v[k] = o->defs[i].value;
    }
    char buf[PATH_MAX];
    const char *lib = o->library ? o->library : default_library(buf, sizeof buf);
    if (o->tensor < 0) {
        fprintf(stderr, "ppc --table: --tensor auto goes with --search (expected a number)\n");
        return EXIT_USAGE;
    }
    return exit_code(pp_print_table(stdout, lib, v[0], v[1], v[2], v[3], o->tensor));
}

/* --search: the front on stdout; exit 0, 1 when nothing compiles or fits,
 * 1 for a malformed search line, 3 an unreadable library or --costs, 4, 5. */
static int run_search(const options *o, const char *prog)
{
    char buf[PATH_MAX], rel[PATH_MAX], cwd[PATH_MAX];
    const char *lib = o->library;
    if (!lib) { /* the default, relative to here when it is below here: shorter commands */
        lib = default_library(buf, sizeof buf);
        size_t n;
        if (realpath(lib, rel) && getcwd(cwd, sizeof cwd) && (n = strlen(cwd)) &&
            !strncmp(rel, cwd, n) && rel[n] == '/')
            lib = rel + n + 1;
        else if (realpath(lib, rel))
            lib = rel;
    }
    long long W = 0, B = 0;
    for (int i = 0; i < o->ndefs; i++)
        *(o->defs[i].name[0] == 'W' ? &W : &B) = o->defs[i].value;
    /* W counts ranks: without --tensor every divisor T of W is tried
     * (issue 27); --tensor T keeps T alone */
    pp_search_opts so = {.library = lib,
                         .W = W,
                         .B = B,
                         .costs = o->costs,
                         .mem_limit = (uint64_t)o->mem_limit,
                         .optimizer = o->optimizer,
                         .precision = o->precision,
                         .layers = o->layers,
                         .tensor = o->tensor ? o->tensor : -1,
                         .prog = prog,
                         .backend = o->backend};
    pp_user_model um;
    if (o->file) { /* ppc --search MODEL.pp: the user's model for every candidate */
        int lrc = pp_user_model_load(o->file, &um, stderr);
        if (lrc)
            return lrc < 0 ? EXIT_SCHEDULE : EXIT_IO;
        if (!B && !(B = um.B)) {
            fprintf(stderr,
                    "ppc --search: %s has no 'param B' and no -D B was given: expected -D "
                    "B=MICROBATCHES\n",
                    o->file);
            return EXIT_USAGE;
        }
        so.B = B;
        so.model = &um;
        so.model_file = o->file;
        if (!o->tensor && um.tensor > 1) /* its `tensor` line: W counts ranks */
            so.tensor = um.tensor;
    }
    pp_search_result r;
    pp_search_status st = pp_search_run(&so, &r, stderr);
    if (st == PP_SEARCH_OK)
        (o->json ? pp_search_print_json : pp_search_print)(stdout, &so, &r, o->top, o->all);
    pp_search_free(&r);
    switch (st) {
    case PP_SEARCH_OK:
        return 0;
    case PP_SEARCH_IO:
        return EXIT_IO;
    case PP_SEARCH_NOMEM:
        return EXIT_NOMEM;
    case PP_SEARCH_INTERNAL:
        return EXIT_INTERNAL;
    case PP_SEARCH_NONE:
    case PP_SEARCH_BAD_LINE:
        break;
    }
    return EXIT_SCHEDULE;
}

/* What report.txt and report.json say about where they came from, and
 * write them (and the pictures). */
static int write_reports(const options *o, const pp_compiled *c)
{
    char params[256], costs_from[PATH_MAX + 64];
    snprintf(params, sizeof params, "S=%lld B=%lld W=%lld", c->sch.S, c->sch.B, c->sch.W);
    if (o->costs) /* with the unit the trace converts from */
        snprintf(costs_from, sizeof costs_from, "--costs %s (times in %s)", o->costs,
                 c->costs.unit);
    else
        snprintf(costs_from, sizeof costs_from, "%s",
                 !pp_jobtable_flops_costs(&c->sch.model, c->sch.S)
                     ? "cost lines of the schedule (1 where none)"
                 : o->layers ? "cost lines of the schedule (FLOPs-proportional where none, 1 = "
                               "one block's forward)"
                             : "cost lines of the schedule (FLOPs-proportional where none, 1 = "
                               "the mean forward)");
    if (o->layers && o->layers_auto) { /* the split: the report's `layers` line */
        size_t n = strlen(costs_from);
        snprintf(costs_from + n, sizeof costs_from - n,
                 "; --layers auto(%lld): per block, times the stage's %s", o->layers,
                 c->sch.model.kind != PP_MODEL_MLP ? "layers" : "blocks");
    } else if (o->layers) { /* jobtable.c: cost lines, 1 and --costs are one block's */
        size_t n = strlen(costs_from);
        snprintf(costs_from + n, sizeof costs_from - n,
                 "; --layers %lld (%u %s a stage): per block, times the stage's %s", o->layers,
                 c->sch.model.blocks, c->sch.model.kind != PP_MODEL_MLP ? "layers" : "blocks",
                 c->sch.model.kind != PP_MODEL_MLP ? "layers" : "blocks");
    }
    char *split = c->sch.auto_layers ? pp_auto_describe(&c->sch, &c->autoc) : NULL;
    pp_report_info info = {o->file,
                           params,
                           c->sch.strict ? "strict" : "greedy",
                           costs_from,
                           o->keep ? c->keep_note : NULL,
                           split};
    report_ctx x = {&c->rep, &info, &c->t, &c->sim, o->costs ? c->costs.unit : NULL};
    int rc = write_report(o, &x);
    free(split);
    return rc;
}

/* --emit torch-csv, before anything is written: whether PyTorch's runtime
 * can run this schedule. 0, or the exit code with the reason printed (one
 * line, as the schedule's other errors: exit 1). */
static int torch_csv_refused(const options *o, const pp_compiled *c)
{
    char why[512];
    int st = pp_torch_csv_check(&c->t, why, sizeof why);
    if (st < 0) {
        fprintf(stderr, "ppc: out of memory checking the schedule for --emit torch-csv\n");
        return EXIT_NOMEM;
    }
    if (st > 0) {
        fprintf(stderr, "%s: error: cannot emit torch-csv: %s\n", o->file, why);
        return EXIT_SCHEDULE;
    }
    return 0;
}

/* The CSV's name: the schedule file's, without its directory and ".pp". */
static void torch_csv_name(const char *file, char *buf, size_t n)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t len = strlen(base);
    if (len > 3 && !strcmp(base + len - 3, ".pp"))
        len -= 3;
    snprintf(buf, n, "%.*s.csv", (int)len, base);
}

static int w_torch_csv(FILE *f, const void *ctx)
{
    const pp_compiled *c = ctx;
    return pp_torch_csv_write(f, &c->t, &c->sim);
}

/* Writes DIR/<name>.csv and says so unless -q. */
static int write_torch_csv(const options *o, const pp_compiled *c)
{
    char name[PATH_MAX];
    torch_csv_name(o->file, name, sizeof name);
    if (mkdir_p(o->emit_dir))
        return io_failed("create directory", o->emit_dir);
    int rc = write_file(o->emit_dir, name, w_torch_csv, c);
    if (!rc && !o->quiet)
        printf("wrote %s/%s: torch.distributed.pipelining actions (compute_only), %lld rows for "
               "%lld ranks, %d actions\n",
               o->emit_dir, name, c->sch.W, c->sch.W, job_count(&c->t.js));
    return rc;
}

static void free_defs(options *o)
{
    for (int i = 0; i < o->ndefs; i++)
        free((char *)o->defs[i].name);
    free(o->defs);
}

int main(int argc, char **argv)
{
    options o;
    int args = parse_args(argc, argv, &o), rc = 0;
    if (args == -2) {
        fprintf(stderr, "ppc: out of memory reading the command line\n");
        rc = EXIT_NOMEM;
    } else if (args < 0) { /* what is wrong is said; the usage would bury it */
        fprintf(stderr, "ppc: see ppc --help for the options\n");
        rc = EXIT_USAGE;
    } else if (args == 3) /* --version */
        printf("ppc (pp) %s, plan format %u\n", PP_VERSION, PP_PLAN_VERSION);
    else if (args == 2) /* --opcodes: the table isa/README.md shows */
        pp_ops_markdown(stdout);
    else if (args > 0) /* --help */
        usage(stdout);
    else if (o.table)
        rc = run_table(&o);
    else if (o.search) {
        if (o.backend && o.costs) /* a warning: the search goes on */
            pp_costs_backend_warn(o.costs, o.backend, stderr);
        rc = run_search(&o, argv[0]); /* the rows' commands say ppc as it was typed */
    } else {
        if (o.backend && o.costs)
            pp_costs_backend_warn(o.costs, o.backend, stderr);
        pp_compile_opts co = pp_compile_defaults();
        co.path = o.file;
        co.defs = o.defs;
        co.ndefs = o.ndefs;
        co.costs = o.costs;
        co.optimizer = o.optimizer;
        if (o.tensor < 0) {
            fprintf(stderr, "ppc: --tensor auto goes with --search (expected a number of ranks "
                            "per worker)\n");
            return 2;
        }
        co.tensor = o.tensor;
        co.precision = o.precision;
        co.prefetch = o.prefetch;
        co.mem_limit = (uint64_t)o.mem_limit;
        co.keep_weights = o.keep;
        co.layers = o.layers;
        co.layers_auto = o.layers_auto;
        co.recompute = o.recompute;
        co.offload = o.offload;
        pp_user_model um;
        int lrc = o.model ? pp_user_model_load(o.model, &um, stderr) : 0;
        if (lrc) {
            free_defs(&o);
            return lrc < 0 ? EXIT_SCHEDULE : EXIT_IO;
        }
        co.model = o.model ? &um : NULL;
        co.model_path = o.model;
        pp_compiled c;
        rc = exit_code(pp_compile(&co, &c));
        /* --emit torch-csv of a schedule PyTorch cannot run writes nothing. */
        int refused = rc == 0 && o.emit_dir ? torch_csv_refused(&o, &c) : 0;
        if (refused)
            rc = refused;
        /* The report is written even when lowering failed: the cost is still news. */
        if (o.outdir && !refused && c.reached >= PP_STAGE_REPORT) {
            int wrc = write_reports(&o, &c);
            if (wrc)
                rc = wrc;
        }
        if (o.outdir && rc == 0)
            rc = write_plans(&o, c.plans, (int)c.plans[0].world);
        /* A failure after the report was written (lowering, --mem-limit, a
         * plan that could not be written) leaves no rank file of an older
         * compile beside the new report for ppvm to run. */
        if (o.outdir && !refused && rc != 0 && c.reached >= PP_STAGE_REPORT)
            remove_rank_files(o.outdir, 0);
        if (o.outdir && rc == 0 && !o.quiet)
            summary(&o, &c.sch, &c.rep, c.plans);
        if (o.outdir && rc == 0 && !o.quiet && c.sch.auto_layers) {
            char *split = pp_auto_describe(&c.sch, &c.autoc);
            printf("  layers = %s\n", split ? split : "auto (out of memory describing it)");
            free(split);
        }
        if (o.emit_dir && rc == 0)
            rc = write_torch_csv(&o, &c);
        if (c.status == PP_COMPILE_ERRORS)
            fprintf(stderr, "%s: %d error%s\n", o.file, c.errors, c.errors == 1 ? "" : "s");
        pp_compiled_free(&c);
    }
    free_defs(&o);
    return rc;
}
