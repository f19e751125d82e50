/* search.h - `ppc --search`: which library schedule, with which parameters,
 * is fastest on W workers and B microbatches under a memory limit.
 *
 * Every .pp file of the library directory is a family. A family's search
 * space is its `# search:` comment line (grammar in compiler/README.md,
 * "Schedule search"), e.g.
 *
 *     # search: S=W                 1f1b.pp: one stage per worker
 *     # search: V=1..4              interleaved-1f1b.pp: S = W*V in the file
 *     # search: G=1..W R=W/G S=W    lpp.pp: G groups of R workers
 *
 * a file without one is tried as written and with S=W. Every assignment of
 * the line (the Cartesian product of its values) is one combination; each
 * combination is compiled in process (compile.h) with -D W and -D B, with
 * --prefetch 1, 0 and 2 and, where its plan fetches weights, again with
 * --keep-weights, and (files without their own `recompute` or `offload`)
 * with --recompute 1 and 's < S - 1', and where the host link has a price
 * (a host bandwidth, search.c says why) --offload 1 and 's < S - 1'. A
 * candidate is the file, its -D values and those flags.
 *
 * A candidate the compile refuses (any error: a `require`, a placement
 * outside the workers, a deadlock, a per-stage --costs array of another
 * length), or whose W or B is not the search's, or which leaves a worker
 * without a job, is "refused"; one whose plan memory on some worker is over
 * --mem-limit is "over"; one whose model (the file's model block) is not the
 * search's model is "other model". The search's model is the one most
 * compiled candidates share (the library's demo model), so a candidate is
 * only ever compared with candidates that train the same model.
 *
 * For every other candidate: the predicted step time (the report's `step`:
 * the makespan under the costs, then gradient returns, all-reduces and
 * optimizer steps), the bubble, and the peak plan memory over workers (what
 * ppvm allocates, exact: from the lowered, verified plans). The Pareto front
 * is the candidates no other candidate beats in both (not slower and not
 * larger, and better in one); times within PP_SEARCH_TIME_TOL of each
 * other count as equal (float noise: a row as fast as another up to the
 * last digits but larger is not on the front); among equal ones the first
 * generated (the default flags first) stands for them.
 *
 * Each row's command is the one that reproduces it, as the user would type
 * it: the program as they ran it (argv[0]) and an output directory of its
 * own, out/<file's stem>, then out/<stem>-<front rank> for the next rows of
 * one file (out/<stem>-c<n> for candidate n off the front, in --json). */
#define PP_SEARCH_TIME_TOL 1e-6 /* relative */
#ifndef PP_SEARCH_H
#define PP_SEARCH_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *library; /* the directory of .pp files */
    long long W, B;      /* workers and microbatches, both >= 1 */
    const char *costs;   /* --costs FILE for every candidate, or NULL */
    uint64_t mem_limit;  /* bytes per worker, 0 = none */
    int optimizer;       /* a pp_optimizer, or -1 for each file's line */
    int precision;       /* a pp_precision, or -1 */
    /* --layers L: every candidate trains one model of L blocks (layers),
     * split over its stages as `layers = auto(L)` chooses, with costs per
     * block (compile.h). 0 = each file's model block (or the model file's,
     * split L/S a stage, a candidate whose S does not divide L refused and
     * counted in indivisible), and candidates of another are set aside. */
    long long layers;
    /* --tensor (issue 27): 0, each file's own; T > 0, every candidate with
     * tensor = T on W / T workers (T must divide W); -1 (auto), every
     * divisor T of W so, T = 1 being the file's own: W counts ranks. */
    int tensor;
    /* How the user ran ppc (argv[0] as typed, "bin/ppc"), for the rows'
     * commands; NULL: "ppc". */
    const char *prog;
    /* ppc --search FILE (user_model.h): every candidate trains FILE's
     * model, its count split L/S a stage (as --layers; layers above, when
     * given, counts instead), and the rows' commands say --model FILE.
     * NULL = each file's model block. */
    const struct pp_user_model_s *model;
    const char *model_file;
    /* --backend B as the user gave it (the rows' commands repeat it), or
     * NULL */
    const char *backend;
} pp_search_opts;

typedef enum {
    PP_CAND_OK,          /* compiled; time and memory known */
    PP_CAND_REFUSED,     /* the compile failed, or W/B/idle workers (why says) */
    PP_CAND_OVER,        /* plan memory over --mem-limit */
    PP_CAND_OTHER_MODEL, /* trains another model than the search's */
} pp_cand_state;

typedef struct {
    char *file; /* the schedule's path as commands print it */
    char *args; /* its flags after the file, e.g. "-D S=8 -D B=32 -D W=8 --prefetch 0" */
    pp_cand_state state;
    double time;   /* the report's step */
    double bubble; /* idle fraction of W x makespan */
    uint64_t mem;  /* the most plan memory of any worker */
    long long S;
    char *model;     /* the model, in words (what "other model" compares) */
    char *why;       /* refused or over: the compile's first error, or the search's reason */
    int front;       /* rank on the Pareto front (1 = fastest), 0 = not on it */
    char *out;       /* its command's -o: out/<file's stem>, made unique (pp_search_run) */
    int indivisible; /* refused: its S does not divide the model file's count */
    char *split;     /* --layers: its layers per stage ("4,4,4,0"), else NULL */
} pp_search_cand;

typedef struct {
    pp_search_cand *c; /* every candidate, in the order generated */
    int n, cap;
    int files; /* .pp files in the library */
    int ok, refused, over, other_model;
    int indivisible; /* of the refused: S does not divide the model file's count */
    int *front;      /* indices into c, fastest first */
    int nfront;
    char *model;    /* the search's model */
    double seconds; /* wall time of the whole search */
    /* what --costs was measured on (its "backend", "ranks_per_core", and
     * whether it gives "cores"): rows' times are known to miss when ranks
     * shared cores and the file does not say how many (pp_search_print) */
    char costs_backend[16];
    double costs_ranks_per_core; /* 0: not recorded */
    int costs_cores;
} pp_search_result;

typedef enum {
    PP_SEARCH_OK = 0,
    PP_SEARCH_NONE,     /* nothing compiled, or nothing fits under --mem-limit (said why) */
    PP_SEARCH_BAD_LINE, /* a file's `# search:` line is malformed (file:line:col said) */
    PP_SEARCH_IO,       /* the library or --costs cannot be read */
    PP_SEARCH_NOMEM,
    PP_SEARCH_INTERNAL, /* a candidate's plans failed the compiler's checks: a bug */
} pp_search_status;

/* Runs the search; errors are printed to err (one line each, prefixed
 * "ppc --search: " or "FILE:LINE:COL: "). *r is filled as far as it got;
 * free it with pp_search_free whatever the status. */
pp_search_status pp_search_run(const pp_search_opts *o, pp_search_result *r, FILE *err);
/* The front as a fixed-column table (at most top rows; 0 = all), then the
 * counts and the time taken; with all, then every candidate, its state
 * and, for one refused or over, why. */
void pp_search_print(FILE *f, const pp_search_opts *o, const pp_search_result *r, int top, int all);
/* The same as JSON (keys in compiler/README.md): the front (top rows),
 * and with all every candidate. */
void pp_search_print_json(FILE *f, const pp_search_opts *o, const pp_search_result *r, int top,
                          int all);
void pp_search_free(pp_search_result *r);
/* The front of r's compiled candidates (r->front, r->nfront, each one's
 * front rank) by the rule above, as pp_search_run builds it; for the
 * tests. 0, or -1 when out of memory. */
int pp_search_front(pp_search_result *r);

#endif
