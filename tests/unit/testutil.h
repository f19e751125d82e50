/* testutil.h - helpers shared by the test suites: compile a schedule from a
 * string down to its simulation, run a shell command and capture its output. */
#ifndef PP_TESTUTIL_H
#define PP_TESTUTIL_H

#include <stdio.h>

#include "../../compiler/compile.h"
#include "../../isa/plan.h"

#ifndef PP_ROOT
#define PP_ROOT "."
#endif

/* The ppvm under test: bin/ppvm, or bin/ppvm-standin in the stand-in build
 * of the GPU suites (tests/README.md). */
#ifndef PPVM
#define PPVM "ppvm"
#endif

/* One rank's plan built by hand, an instruction at a time (the checkers'
 * tests): p as the plan reader would fill it, cap the room in p.code. */
typedef struct {
    pp_plan p;
    uint32_t cap;
} plan_b;
/* Appends op(s, mb, peer) with the slot operands given as role, slot pairs,
 * ended by PP_ROLE_NONE. */
void plan_put(plan_b *b, int op, int s, int mb, int peer, ...);

/* A compile as far as its simulation (compile.h): c.sch, c.t, c.sim, and
 * c.errors, c.deadlock and c.msgs (every diagnostic) for the tests. */
typedef pp_compiled compiled;

/* Parse, check, evaluate and simulate src ("t.pp" in messages) with the
 * given -D defines, through pp_compile. */
void compile_src(compiled *c, const char *src, const pp_define *defs, int ndefs);
/* src ("t.pp" in messages) through pp_compile as far as `stop`, its
 * diagnostics captured in c->msgs; returns the status. */
pp_compile_status compile_text_to(pp_compiled *c, const char *src, pp_stage stop);
/* Same for a file of schedules/ (name like "gpipe.pp"). */
void compile_library(compiled *c, const char *name, const pp_define *defs, int ndefs);
void compiled_free(compiled *c);

/* "F0 F1 B0 ..." : worker w's jobs in order, stage or microbatch shown per `what`
 * ('b': microbatch, 's': stage, 'x': both as F(s,b)). Caller frees. */
char *worker_order(const compiled *c, int w, char what);

/* ---- subprocesses ----------------------------------------------------------
 * Every command a test runs goes through run_proc: its stdin is /dev/null,
 * its stdout and stderr are captured together, and it never outlives its
 * time limit (scaled by Check's CK_TIMEOUT_MULTIPLIER): on expiry it and
 * everything it started (found by a PP_TEST_PROC tag in the environment,
 * so ranks that left mpirun's process group too) get SIGTERM, then SIGKILL
 * 5 s later. Failure messages then say what happened: proc_story(). */

typedef struct {
    int status;    /* the exit status; 128 + N when signal N ended it; 124 when timed out */
    int signal;    /* the signal that ended it, 0 if it exited */
    int timed_out; /* killed after `timeout` seconds */
    int lingered;  /* it exited, but processes it started kept running and were killed */
    int timeout;   /* the limit it ran under, in seconds (scaled) */
    double seconds;
    char *out; /* stdout and stderr, interleaved */
} proc_result;

/* Limits in seconds, before scaling: an ordinary command, an mpirun. */
#define CMD_TIMEOUT 60
#define MPIRUN_TIMEOUT 180

/* Runs cmd with sh -c under a limit of timeout_s seconds (times
 * CK_TIMEOUT_MULTIPLIER); fills *r (free with proc_free). Returns r->status. */
int run_proc(const char *cmd, int timeout_s, proc_result *r);
void proc_free(proc_result *r);
/* In words, how it ended and what it printed last, e.g. "exited with status
 * 1; its last 3 lines:\n| ...": "was killed by signal 11 (Segmentation fault)",
 * "did not finish within 60 s and was killed". Caller frees. */
char *proc_story(const proc_result *r, int lines);
/* The last `lines` lines of text (a pointer into it). */
const char *last_lines(const char *text, int lines);
/* Sends sig to every other process whose environment has var=<value
 * starting with prefix>; returns how many. Tags end with '.', so that a
 * whole tag is never the prefix of another ("7.1." and "7.12."). */
int kill_tagged(const char *var, const char *prefix, int sig);

/* Runs cmd (CMD_TIMEOUT), output (stdout+stderr) into *out (caller frees)
 * unless out is NULL; returns the exit status, 124 if it timed out. When it
 * did not simply exit, *out ends with a line saying so ("[killed by signal
 * 11 (Segmentation fault)]", "[did not finish within 60 s: killed]"). */
int run_cmd(const char *cmd, char **out);

/* Runs cmd and fails the test unless it exits with `want`, saying the
 * command, how it ended and its last lines. Returns its output (caller
 * frees). */
#define run_expect(cmd, want) run_expect_at(__FILE__, __LINE__, (cmd), (want))
char *run_expect_at(const char *file, int line, const char *cmd, int want);

/* ---- mpirun -----------------------------------------------------------------
 * mpi_run runs `mpirun -np <np> <PP_ROOT>/bin/<PPVM> <args>` (MPIRUN_TIMEOUT),
 * each rank under a shell that prints, when ppvm has ended,
 *     pp-test: rank <r> exited <status>
 * so that what each rank did is known apart from what mpirun says. Open MPI
 * sometimes fails at exit (about 1 run in 100 of a hello world): when
 * mpirun exits non-zero after every rank exited 0, the run is repeated once
 * and a line on stdout says so; twice in a row is a failure. Returns 0 when
 * mpirun and every rank exited 0; otherwise *why (caller frees) says what
 * failed: each rank's status (or that it never reported), mpirun's status
 * or timeout, and the last lines of the output. *out: the output of the
 * last attempt (caller frees), markers included. */
int mpi_run(int np, const char *args, char **out, char **why);
/* (PP_TEST_MPIRUN, when set, replaces "mpirun --oversubscribe ..." there:
 * the e2e suite's harness test uses it to fake Open MPI's failures.) */
/* What each of np ranks reported: st[r] = its exit status (128 + N: signal
 * N), -1 if it never reported. */
void rank_statuses(const char *out, int np, int *st);
/* mpi_run with a limit of its own (seconds, before scaling). */
int mpi_run_within(int np, const char *args, int timeout_s, char **out, char **why);
/* mpirun's MPMD form: n programs of one rank each, rank i running
 * `<pre[i]> <PP_ROOT>/bin/<PPVM> <args[i]>` under the shell (pre may be
 * NULL, or hold a prefix such as "ulimit -f 8;"), each reporting its exit
 * status as mpi_run's ranks do. No rerun: the callers expect failures.
 * Returns mpirun's status (124 when it timed out); *out (caller frees):
 * the command, then its output. */
int mpi_run_mpmd(int n, const char *const *pre, const char *const *args, int timeout_s, char **out);
/* mpi_run, failing the test (with *why) unless it succeeds. Returns the output. */
#define mpi_ok(np, args) mpi_ok_at(__FILE__, __LINE__, (np), (args))
char *mpi_ok_at(const char *file, int line, int np, const char *args);
/* The run must fail because a rank failed (not mpirun alone, not a
 * timeout), with `message` in its output. */
#define mpi_fails_with(np, args, message)                                                          \
    mpi_fails_with_at(__FILE__, __LINE__, (np), (args), (message))
void mpi_fails_with_at(const char *file, int line, int np, const char *args, const char *message);
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
/* A library schedule with its model block replaced by `model` (say, a
 * `model gpt { ... }`), written to a temporary file whose path is returned
 * (free it with remove_schedule, which removes its directory). */
char *with_model(const char *schedule, const char *model);
/* The small GPT the e2e and determ suites train (lighter end stages). */
extern const char *const test_gpt_model;
void remove_schedule(char *path);

/* Whether a CUDA GPU is visible to this process (0 when built without CUDA).
 * Call it inside a test, never before the runner forks: CUDA does not
 * survive fork. GPU tests print "skipped: no GPU" and pass when it is 0. */
int have_gpu(void);

/* A GPU check that cannot run here (no GPU, too few, built without CUDA):
 * prints "skipped: WHY" (printf's fmt; end it with a newline), which
 * check_pp reports as skipped, never as passed; the caller then returns.
 * Under PP_TEST_MUST_RUN=gpu (make standin-test) the check fails instead:
 * there every GPU check must run. */
void test_skipped(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A shell prefix that limits a command's memory to about `kb` KiB, for the
 * tests of running out of it: "ulimit -v KB;". AddressSanitizer (make test
 * SANITIZE=1) reserves terabytes of address space for its shadow memory,
 * so under ulimit -v a sanitized program cannot start; there the prefix
 * is the closest it offers, ASan refusing (returning NULL for) any one
 * allocation above a quarter of kb. */
static inline const char *mem_limit(long kb, char *buf, size_t n)
{
#ifdef __SANITIZE_ADDRESS__
    snprintf(buf, n, "export ASAN_OPTIONS=\"$ASAN_OPTIONS:max_allocation_size_mb=%ld\";",
             kb / 4096);
#else
    snprintf(buf, n, "ulimit -v %ld;", kb);
#endif
    return buf;
}

#endif
