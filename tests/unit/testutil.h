/* testutil.h - helpers shared by the test suites: compile a schedule from a
 * string down to its simulation, run a shell command and capture its output. */
#ifndef PP_TESTUTIL_H
#define PP_TESTUTIL_H

#include "../../compiler/compile.h"

#ifndef PP_ROOT
#define PP_ROOT "."
#endif

/* A compile as far as its simulation (compile.h): c.sch, c.t, c.sim, and
 * c.errors, c.deadlock and c.msgs (every diagnostic) for the tests. */
typedef pp_compiled compiled;

/* Parse, check, evaluate and simulate src ("t.pp" in messages) with the
 * given -D defines, through pp_compile. */
void compile_src(compiled *c, const char *src, const pp_define *defs, int ndefs);
/* Same for a file of schedules/ (name like "gpipe.pp"). */
void compile_library(compiled *c, const char *name, const pp_define *defs, int ndefs);
void compiled_free(compiled *c);

/* "F0 F1 B0 ..." : worker w's jobs in order, stage or microbatch shown per `what`
 * ('b': microbatch, 's': stage, 'x': both as F(s,b)). Caller frees. */
char *worker_order(const compiled *c, int w, char what);

/* Runs cmd with sh -c, output (stdout+stderr) into *out (caller frees);
 * returns the exit status, 124 if `timeout` killed it. */
int run_cmd(const char *cmd, char **out);
/* The numbers of `key` in a ppvm --profile file: "key": [a, b, ...] or
 * "key": a. Returns how many (at most max), all asserted > 0. */
int profile_values(const char *json, const char *key, double *v, int max);
/* A fresh temporary directory (caller frees the path). */
char *temp_dir(void);
/* Runs bin/ppc on schedules/<schedule> with extra arguments `args` into
 * <a fresh temp dir>/plan, asserting success; returns the temp dir. */
char *compile_plan(const char *schedule, const char *args);
/* rm -rf dir, then free(dir). */
void remove_dir(char *dir);

/* Whether a CUDA GPU is visible to this process (0 when built without CUDA).
 * Call it inside a test, never before the runner forks: CUDA does not
 * survive fork. GPU tests print "skipped: no GPU" and pass when it is 0. */
int have_gpu(void);

#endif
