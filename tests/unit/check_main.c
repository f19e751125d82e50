/* check_main.c - the one test binary: every suite, run as jobs by a small
 * pool of worker processes, one Check summary line at the end.
 *
 *   check_pp [-j N] [--fast] [--list] [SUITE | SUITE:TCASE]...
 *
 * A job is a whole suite, or, for a suite split into TCases that may run at
 * the same time (e2e: one TCase per test, each running its own mpirun), one
 * TCase. Jobs start in a fixed order (the split TCases first, longest
 * first, then the suites) while the processes they run at once (each job
 * says how many: its MPI ranks) fit in N (-j, else PP_TEST_JOBS, else four
 * times the online CPUs: ranks spend much of a run waiting on each other); one job always runs, however large. Jobs that use the
 * GPU run one at a time. Each worker runs its job with Check (CK_FORK: a
 * crash fails its test, not the run) and its output goes to a file of its
 * own, which is printed, suite by suite in the order below, once every job
 * before it has ended: the output is the same whatever order the jobs end
 * in, and each test's messages stay together.
 *
 * --fast: every suite but the mpirun ones (e2e, ckpt, robust, determ, lang_e2e,
 * overlap_e2e, verify_e2e, search_e2e, vmbench) and the GPU ones (make check). Check's CK_RUN_SUITE and CK_RUN_CASE select as they do in Check; CK_VERBOSITY,
 * CK_FORK and the CK_*_LOG_FILE_NAME variables work (each job writes its
 * log to the name plus ".SUITE" or ".SUITE.TCASE"). CK_DEFAULT_TIMEOUT is
 * 60 s unless set (Check's 4 s is too tight on a loaded machine), and
 * CK_TIMEOUT_MULTIPLIER scales every limit, our subprocess limits too.
 *
 * A check that prints "skipped: WHY" (a GPU check without a GPU) is
 * reported as skipped: its suite's line says how many, a suite of nothing
 * but skips says "skipped", not "passed", and the summary's Checks count
 * only the checks that ran. PP_TEST_MUST_RUN=gpu (make standin-test sets
 * it) turns each such skip into a failure (testutil.h, test_skipped). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "suites.h"
#include "testutil.h"

enum { FAST = 0, MPI = 1, GPU = 2 };

static const struct suite_entry {
    const char *name;
    Suite *(*make)(void);
    int kind;                   /* FAST, or MPI and/or GPU */
    int procs;                  /* processes it runs at once */
    const pp_tcase_info *split; /* TCases run as jobs of their own, or NULL */
} suites[] = {
    {"plan", plan_suite, FAST, 1, NULL},
    {"kernels", kernels_suite, FAST, 1, NULL},
    {"cuda_kernels", cuda_kernels_suite, GPU, 1, NULL},
    {"model", model_suite, FAST, 1, NULL},
    {"gpt", gpt_suite, FAST, 1, NULL},
    {"llama", llama_suite, FAST, 1, NULL},
    {"auto_layers", auto_layers_suite, FAST, 1, NULL},
    {"data", data_suite, FAST, 1, NULL},
    {"model_cuda", model_cuda_suite, GPU, 1, NULL},
    {"frontend", frontend_suite, FAST, 1, NULL},
    {"eval", eval_suite, FAST, 1, NULL},
    {"sim", sim_suite, FAST, 1, NULL},
    {"commcheck", commcheck_suite, FAST, 1, NULL},
    {"bufcheck", bufcheck_suite, FAST, 1, NULL},
    {"costs", costs_suite, FAST, 1, NULL},
    {"cores", cores_suite, FAST, 1, NULL},
    {"report", report_suite, FAST, 1, NULL},
    {"compile", compile_suite, FAST, 1, NULL},
    {"timeline", timeline_suite, FAST, 1, NULL},
    {"golden", golden_suite, FAST, 1, NULL},
    {"orders", orders_suite, FAST, 1, NULL},
    {"harness", harness_suite, FAST, 1, NULL},
    {"verify", verify_suite, FAST, 1, NULL},
    {"tensor", tensor_suite, FAST, 1, NULL},
    {"cli", cli_suite, FAST, 1, cli_tcases},
    {"lang", lang_suite, FAST, 1, NULL},
    {"torch_csv", torch_csv_suite, FAST, 1, NULL},
    {"search", search_suite, FAST, 1, NULL},
    {"scale", scale_suite, FAST, 1, NULL},
    {"peers_bench", peers_bench_suite, FAST, 1, NULL},
    {"e2e", e2e_suite, MPI, 4, e2e_tcases},
    {"llama_e2e", llama_e2e_suite, MPI, 4, llama_e2e_tcases},
    {"ckpt", ckpt_suite, MPI, 4, ckpt_tcases},
    {"robust", robust_suite, MPI, 2, robust_tcases},
    {"determ", determ_suite, MPI, 4, determ_tcases},
    {"gpu_e2e", gpu_e2e_suite, MPI | GPU, 4, NULL},
    {"gpu_graph", gpu_graph_suite, MPI | GPU, 2, NULL},
    {"verify_e2e", verify_e2e_suite, MPI, 4, NULL},
    {"lang_e2e", lang_e2e_suite, MPI, 4, lang_e2e_tcases},
    {"tensor_e2e", tensor_e2e_suite, MPI, 8, tensor_e2e_tcases},
    {"overlap", overlap_suite, FAST, 1, NULL},
    {"overlap_e2e", overlap_e2e_suite, MPI, 4, NULL},
    {"search_e2e", search_e2e_suite, MPI, 4, search_e2e_tcases},
    {"vmbench", vmbench_suite, MPI, 4, vmbench_tcases},
    {"numfmt", numfmt_suite, FAST, 1, NULL},
    {"pictures", pictures_suite, FAST, 1, NULL},
    /* issue 26: recomputation */
    {"recompute", recompute_suite, FAST, 1, NULL},
    {"recompute_e2e", recompute_e2e_suite, MPI, 4, recompute_e2e_tcases},
    {"attention_ref", attention_ref_suite, FAST, 1, NULL},
    {"attention_fused", attention_fused_suite, GPU, 1, NULL},
    {"offload_e2e", offload_e2e_suite, MPI, 4, offload_e2e_tcases},
    {"offload", offload_suite, FAST, 1, NULL},
};
#define NSUITES ((int)(sizeof suites / sizeof suites[0]))

typedef struct {
    const struct suite_entry *suite;
    const char *tcase; /* NULL: the whole suite (CK_RUN_CASE still applies) */
    int procs;
    pid_t pid;
    int state; /* 0 waiting, 1 running, 2 ended, 3 printed */
    double t0, t1;
    int checks, failures, errors;
    char out[512], res[512], tag[64];
} job;

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: check_pp [-j N] [--fast] [--list] [--failures FILE] [SUITE | SUITE:TCASE]...\n"
            "  -j N     run jobs while their processes (MPI ranks) fit in N\n"
            "           (default: PP_TEST_JOBS, else 4 times the online CPUs)\n"
            "  --fast   every suite but the mpirun ones and the GPU suites (make check)\n"
            "  --list   print the suites (and the TCases that run as jobs)\n"
            "  --failures FILE  also write the output of every failed job to FILE\n"
            "           (make test prints it again at the very end, after the stand-ins)\n"
            "suites:");
    for (int i = 0; i < NSUITES; i++)
        fprintf(f, " %s", suites[i].name);
    fprintf(f, "\n");
}

/* In the worker: run one job with Check, write "checks failures errors". */
static void run_job(const job *j)
{
    int fd = open(j->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
        _exit(100);
    close(fd);
    setvbuf(stdout, NULL, _IONBF, 0); /* nothing buffered to be copied into Check's forks */
    setvbuf(stderr, NULL, _IONBF, 0);
    setenv("PP_TEST_JOB", j->tag, 1);
    static const char *const logs[] = {"CK_LOG_FILE_NAME", "CK_XML_LOG_FILE_NAME",
                                       "CK_TAP_LOG_FILE_NAME"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(logs[i]);
        if (v && *v && strcmp(v, "-")) {
            char name[1024];
            snprintf(name, sizeof name, "%s.%s%s%s", v, j->suite->name, j->tcase ? "." : "",
                     j->tcase ? j->tcase : "");
            setenv(logs[i], name, 1);
        }
    }
    SRunner *sr = srunner_create(j->suite->make());
    srunner_run(sr, j->suite->name, j->tcase, CK_ENV);
    int checks = srunner_ntests_run(sr), failures = 0, errors = 0;
    TestResult **bad = srunner_failures(sr);
    for (int i = 0; i < srunner_ntests_failed(sr); i++)
        if (tr_rtype(bad[i]) == CK_ERROR)
            errors++;
        else
            failures++;
    free(bad);
    srunner_free(sr);
    FILE *f = fopen(j->res, "w");
    if (!f)
        _exit(101);
    fprintf(f, "%d %d %d\n", checks, failures, errors);
    fclose(f);
    kill_tagged("PP_TEST_JOB", j->tag, SIGKILL); /* what a timed-out test left behind */
    _exit(0);
}

static void start_job(job *j)
{
    fflush(stdout);
    j->t0 = now_s();
    j->pid = fork();
    if (j->pid < 0) {
        perror("check_pp: fork");
        exit(2);
    }
    if (j->pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        run_job(j);
    }
    j->state = 1;
}

static void end_job(job *j, int st)
{
    j->t1 = now_s();
    j->state = 2;
    kill_tagged("PP_TEST_JOB", j->tag, SIGKILL);
    FILE *f = fopen(j->res, "r");
    int ok = f && fscanf(f, "%d %d %d", &j->checks, &j->failures, &j->errors) == 3;
    if (f)
        fclose(f);
    if (!ok || !WIFEXITED(st) || WEXITSTATUS(st)) {
        /* the worker itself died: one error, said in the job's output */
        FILE *o = fopen(j->out, "a");
        if (o) {
            fprintf(o, "check_pp: the worker running %s%s%s ", j->suite->name, j->tcase ? ":" : "",
                    j->tcase ? j->tcase : "");
            if (WIFSIGNALED(st))
                fprintf(o, "was killed by signal %d (%s)\n", WTERMSIG(st), strsignal(WTERMSIG(st)));
            else
                fprintf(o, "exited with status %d without its results\n", WEXITSTATUS(st));
            fclose(o);
        }
        j->checks = j->checks > 0 ? j->checks : 1;
        j->errors++;
    }
}

/* A job's output, less Check's per-run lines (the totals are printed at
 * the end), a line repeated back to back printed once with its count
 * ("skipped: no GPU" from 35 tests). */
static void print_job(const job *j, FILE *to)
{
    FILE *f = fopen(j->out, "r");
    static char line[8192], prev[8192];
    int header = 0, repeats = 0;
    prev[0] = '\0';
    for (;;) {
        int more = f && fgets(line, sizeof line, f);
        int pct;
        char c;
        if (more &&
            (!strncmp(line, "Running suite(s):", 17) ||
             sscanf(line, "%d%%: Checks: %*d, Failures: %*d, Errors: %*d%c", &pct, &c) == 2))
            continue;
        if (more && !strcmp(line, prev)) {
            repeats++;
            continue;
        }
        if (prev[0]) {
            if (repeats)
                fprintf(to, "%.*s (%d times)\n", (int)strcspn(prev, "\n"), prev, repeats + 1);
            else
                fputs(prev, to);
        }
        if (!more)
            break;
        if (!header && j->tcase) {
            fprintf(to, "[%s:%s]\n", j->suite->name, j->tcase);
            header = 1;
        }
        snprintf(prev, sizeof prev, "%s", line);
        repeats = 0;
    }
    if (f)
        fclose(f);
}

/* The checks of a job that skipped (each prints one line "skipped: WHY"
 * and passes, as a GPU check does without a GPU): reported as skipped,
 * never as passed. */
static int count_lines(const job *j, const char *prefix)
{
    FILE *f = fopen(j->out, "r");
    static char line[8192];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += !strncmp(line, prefix, strlen(prefix));
    if (f)
        fclose(f);
    return n;
}

static int count_skips(const job *j) { return count_lines(j, "skipped:"); }

/* The mpiruns a job repeated because Open MPI failed at exit after every
 * rank exited 0 (testutil.c's mpi_run says each with this line): counted
 * and reported in the summary, so that a rate that grows is seen. */
static int count_reruns(const job *j) { return count_lines(j, "note: mpirun "); }

/* --failures: where failed jobs' output goes a second time, so that a log
 * whose tail is all that survives (CI) still shows what failed. */
static FILE *failed_to;

int main(int argc, char **argv)
{
    int fast = 0, list = 0;
    long budget = 0;
    const char *picks[64];
    int npicks = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fast"))
            fast = 1;
        else if (!strcmp(argv[i], "--list"))
            list = 1;
        else if (!strcmp(argv[i], "--failures")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "check_pp: --failures: expected a file name\n");
                return 2;
            }
            if (!(failed_to = fopen(argv[++i], "w"))) {
                fprintf(stderr, "check_pp: --failures %s: %s\n", argv[i], strerror(errno));
                return 2;
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strncmp(argv[i], "-j", 2)) {
            const char *v = argv[i][2] ? argv[i] + 2 : i + 1 < argc ? argv[++i] : "";
            char *end;
            budget = strtol(v, &end, 10);
            if (!*v || *end || budget < 1) {
                fprintf(stderr, "check_pp: -j %s: expected a number of processes, 1 or more\n", v);
                return 2;
            }
        } else if (argv[i][0] == '-' || npicks == 64) {
            fprintf(stderr, "check_pp: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else
            picks[npicks++] = argv[i];
    }
    if (list) {
        for (int i = 0; i < NSUITES; i++) {
            printf("%s%s\n", suites[i].name,
                   suites[i].kind & GPU   ? " (gpu)"
                   : suites[i].kind & MPI ? " (mpirun)"
                                          : "");
            for (const pp_tcase_info *t = suites[i].split; t && t->tcase; t++)
                printf("  %s:%s (%d ranks)\n", suites[i].name, t->tcase, t->procs);
        }
        return 0;
    }
    if (!budget) {
        const char *v = getenv("PP_TEST_JOBS");
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        budget = v && atol(v) > 0 ? atol(v) : 4 * (cpus > 0 ? cpus : 1);
    }
    const char *run_suite = getenv("CK_RUN_SUITE"), *run_case = getenv("CK_RUN_CASE");
    if (run_suite && !*run_suite)
        run_suite = NULL;
    if (run_case && !*run_case)
        run_case = NULL;

    /* which suites (whole) and which TCases (SUITE:TCASE), from the arguments */
    int whole[NSUITES];
    for (int i = 0; i < NSUITES; i++)
        whole[i] = !npicks && (!fast || suites[i].kind == FAST) &&
                   (!run_suite || !strcmp(run_suite, suites[i].name));
    int pick_suite[64];
    for (int p = 0; p < npicks; p++) {
        const char *colon = strchr(picks[p], ':');
        size_t len = colon ? (size_t)(colon - picks[p]) : strlen(picks[p]);
        pick_suite[p] = -1;
        for (int i = 0; i < NSUITES; i++)
            if (strlen(suites[i].name) == len && !strncmp(suites[i].name, picks[p], len))
                pick_suite[p] = i;
        if (pick_suite[p] < 0) {
            fprintf(stderr, "check_pp: no suite '%.*s'\n", (int)len, picks[p]);
            usage(stderr);
            return 2;
        }
        if (!colon)
            whole[pick_suite[p]] = 1;
        picks[p] = colon ? colon + 1 : NULL; /* now the TCase, if any */
    }

    /* jobs: a split suite's TCases each, other suites whole or per TCase */
    job *jobs = calloc(256, sizeof *jobs);
    int njobs = 0, suite_first[NSUITES], suite_end[NSUITES];
    char dir[] = "/tmp/check_pp-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("check_pp: mkdtemp");
        return 2;
    }
    for (int i = 0; i < NSUITES; i++) {
        suite_first[i] = njobs;
        if (suites[i].split) {
            for (const pp_tcase_info *t = suites[i].split; t->tcase && njobs < 256; t++) {
                int in = whole[i] && (!run_case || !strcmp(run_case, t->tcase));
                for (int p = 0; p < npicks; p++)
                    in |= pick_suite[p] == i && picks[p] && !strcmp(picks[p], t->tcase);
                if (in)
                    jobs[njobs++] =
                        (job){.suite = &suites[i], .tcase = t->tcase, .procs = t->procs};
            }
        } else {
            if (whole[i] && njobs < 256)
                jobs[njobs++] =
                    (job){.suite = &suites[i], .tcase = run_case, .procs = suites[i].procs};
            for (int p = 0; p < npicks; p++)
                if (pick_suite[p] == i && picks[p] && njobs < 256)
                    jobs[njobs++] =
                        (job){.suite = &suites[i], .tcase = picks[p], .procs = suites[i].procs};
        }
        suite_end[i] = njobs;
    }
    for (int k = 0; k < njobs; k++) {
        snprintf(jobs[k].out, sizeof jobs[k].out, "%s/job%d.out", dir, k);
        snprintf(jobs[k].res, sizeof jobs[k].res, "%s/job%d.res", dir, k);
        /* "pid.k.": kill_tagged matches prefixes, and job 1's must not match job 12's */
        snprintf(jobs[k].tag, sizeof jobs[k].tag, "%ld.%d.", (long)getpid(), k);
    }
    int order[256], norder = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < njobs; k++)
            if ((jobs[k].suite->split != NULL) == (pass == 0))
                order[norder++] = k;

    setenv("CK_DEFAULT_TIMEOUT", "60", 0);
    setenv("CK_MAX_MSG_SIZE", "16384", 0);
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: wait() returns */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("check_pp: %d job%s, up to %ld processes at once (%ld CPUs)\n", njobs,
           njobs == 1 ? "" : "s", budget, cpus);

    double t0 = now_s();
    int running = 0, used = 0, gpu_busy = 0, next = 0, printed_suite = 0;
    int checks = 0, failures = 0, errors = 0, skipped = 0, reruns = 0;
    while (printed_suite < NSUITES) {
        /* start what fits, in order */
        while (!interrupted && next < norder) {
            job *j = &jobs[order[next]];
            int gpu = j->suite->kind & GPU;
            if (running && (used + j->procs > budget || (gpu && gpu_busy)))
                break;
            start_job(j);
            running++;
            used += j->procs;
            gpu_busy += gpu != 0;
            next++;
        }
        /* print every suite whose jobs, and all before it, have ended */
        while (printed_suite < NSUITES) {
            int i = printed_suite, done = 1;
            for (int k = suite_first[i]; k < suite_end[i]; k++)
                done &= jobs[k].state >= 2;
            if (!done)
                break;
            if (suite_end[i] > suite_first[i]) {
                int c = 0, f = 0, e = 0, sk = 0;
                double first = 1e300, last = 0, sum = 0;
                for (int k = suite_first[i]; k < suite_end[i]; k++) {
                    print_job(&jobs[k], stdout);
                    if (failed_to && jobs[k].failures + jobs[k].errors)
                        print_job(&jobs[k], failed_to);
                    c += jobs[k].checks;
                    f += jobs[k].failures;
                    e += jobs[k].errors;
                    first = jobs[k].t0 < first ? jobs[k].t0 : first;
                    last = jobs[k].t1 > last ? jobs[k].t1 : last;
                    sum += jobs[k].t1 - jobs[k].t0;
                    sk += count_skips(&jobs[k]);
                    reruns += count_reruns(&jobs[k]);
                    jobs[k].state = 3;
                }
                printf("%-13s %4d checks, %s %6.1f s", suites[i].name, c,
                       f + e     ? "FAILED"
                       : sk == c ? "skipped"
                                 : "passed",
                       last - first);
                if (sk && sk < c)
                    printf(" (%d skipped)", sk);
                if (suite_end[i] - suite_first[i] > 1)
                    printf(" (%d jobs, %.1f s in all)", suite_end[i] - suite_first[i], sum);
                if (f + e)
                    printf(": %d failure%s, %d error%s", f, f == 1 ? "" : "s", e,
                           e == 1 ? "" : "s");
                printf("\n");
                checks += c - sk; /* a skipped check is not counted as run */
                skipped += sk;
                failures += f;
                errors += e;
            }
            printed_suite++;
        }
        if (printed_suite == NSUITES)
            break;
        if (interrupted) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "%ld.", (long)getpid());
            kill_tagged("PP_TEST_JOB", prefix, SIGKILL);
            for (int k = 0; k < njobs; k++)
                if (jobs[k].state == 1)
                    kill(jobs[k].pid, SIGKILL);
            while (wait(NULL) > 0 || errno == EINTR)
                ;
            kill_tagged("PP_TEST_JOB", prefix, SIGKILL);
            fprintf(stderr, "check_pp: interrupted (%s)\n", strsignal(interrupted));
            char cmd[64];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            if (system(cmd)) {
            }
            return 130;
        }
        int st;
        pid_t pid = wait(&st);
        if (pid < 0)
            continue; /* EINTR */
        for (int k = 0; k < njobs; k++)
            if (jobs[k].state == 1 && jobs[k].pid == pid) {
                end_job(&jobs[k], st);
                running--;
                used -= jobs[k].procs;
                gpu_busy -= (jobs[k].suite->kind & GPU) != 0;
            }
    }
    for (int k = 0; k < njobs; k++) {
        unlink(jobs[k].out);
        unlink(jobs[k].res);
    }
    rmdir(dir);
    free(jobs);
    if (failed_to)
        fclose(failed_to);
    printf("check_pp: %.1f s\n", now_s() - t0);
    if (skipped)
        printf("check_pp: %d checks skipped, not counted below (their suites' lines say which)\n",
               skipped);
    printf("check_pp: %d mpirun%s repeated after Open MPI failed at exit with every rank "
           "exited 0 (each said above in a \"note: mpirun\" line)\n",
           reruns, reruns == 1 ? "" : "s");
    /* Check's own summary line, for the totals */
    int pct = failures + errors == 0 ? 100
              : checks ? (int)((float)(checks - failures - errors) / (float)checks * 100.0f)
                       : 0;
    printf("%d%%: Checks: %d, Failures: %d, Errors: %d\n", pct, checks, failures, errors);
    return failures + errors ? EXIT_FAILURE : EXIT_SUCCESS;
}
