/* sim_bench.c - how fast ppc simulates and compiles, from 10^3 to 10^7 jobs.
 *
 * Two tables, each measured in this one run. Not a test: `make bench` (or
 * `make bench-compile`, this alone) runs it.
 *
 * 1. About 1,000,000 jobs of each library schedule, simulated in this
 *    process: the time to evaluate the job table, to simulate, and to build
 *    the report, and the simulation's ratio to its one-second target.
 *
 * 2. Scaling (issue 18): for 10^3, 10^4, ..., 10^7 jobs and several shapes
 *    (deep S, wide B, wide W), the simulation alone (a child process that
 *    compiles as far as the simulation: its seconds and peak memory) and
 *    the whole compile (bin/ppc as a child into a temporary directory,
 *    writing plans, listings and reports: its wall seconds, its peak memory
 *    from wait4's ru_maxrss, and the bytes it wrote), jobs per second for
 *    each, and at 10^6 jobs the whole compile's ratio to the 2 s target
 *    (2 s / its time: above 1 meets it).
 *
 * Arguments: ROOT (the repository, default "."). The environment may
 * narrow table 2: SIM_BENCH_MAX_JOBS (default 10000000: the largest size
 * run), SIM_BENCH_TIMEOUT (seconds a child may take, default 120; one that
 * takes longer is killed and its row says so), SIM_BENCH_TMP (where the
 * compiles write, default $TMPDIR or /tmp; about 370 bytes a job). */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../compiler/compile.h"

typedef struct {
    const char *file;
    pp_define defs[4];
    int ndefs;
} bench_case;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "S=64 B=8192" */
static void params_of(const bench_case *bc, char *buf, size_t n)
{
    buf[0] = '\0';
    for (int i = 0; i < bc->ndefs; i++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s=%lld", i ? " " : "", bc->defs[i].name,
                 bc->defs[i].value);
}

/* ---- table 1: a million jobs, simulated here ---------------------------- */

/* pp_compile's options for case bc of schedules/ under root, as far as
 * stop; path (cap bytes) holds the file's path. */
static pp_compile_opts case_opts(const char *root, const bench_case *bc, char *path, size_t cap,
                                 pp_stage stop)
{
    snprintf(path, cap, "%s/schedules/%s", root, bc->file);
    pp_compile_opts o = pp_compile_defaults();
    o.path = path;
    o.defs = bc->defs;
    o.ndefs = bc->ndefs;
    o.stop_after = stop;
    return o;
}

/* Compiles one case as far as its report (pp_compile times each stage). */
static int run_million(const char *root, const bench_case *bc)
{
    char path[1024];
    pp_compile_opts o = case_opts(root, bc, path, sizeof path, PP_STAGE_REPORT);
    pp_compiled c;
    int rc = pp_compile(&o, &c) == PP_COMPILE_OK ? 0 : -1;
    if (rc == 0) {
        double table = c.seconds[PP_STAGE_JOBS], sim = c.seconds[PP_STAGE_SIMULATE],
               report = c.seconds[PP_STAGE_REPORT];
        char params[96];
        params_of(bc, params, sizeof params);
        printf("%-20s %-24s %6s %9d %6lld %9.3f %9.3f %9.3f %9.2f %8.2fx\n", bc->file, params,
               c.sch.strict ? "strict" : "greedy", job_count(&c.t.js), c.sch.W, table, sim, report,
               job_count(&c.t.js) / sim / 1e6, 1.0 / sim);
    }
    pp_compiled_free(&c);
    return rc;
}

static int million_table(const char *root)
{
    static const bench_case cases[] = {
        {"gpipe.pp", {{"S", 64}, {"B", 8192}}, 2},
        {"1f1b.pp", {{"S", 64}, {"B", 8192}}, 2},
        {"1f1b-greedy.pp", {{"S", 64}, {"B", 8192}}, 2},
        {"interleaved-1f1b.pp", {{"W", 16}, {"V", 4}, {"B", 8192}}, 3},
        {"lpp.pp", {{"S", 64}, {"B", 8192}, {"G", 8}, {"R", 8}}, 4},
        {"ddp.pp", {{"S", 8}, {"B", 65536}}, 2},
        {"zb-h1.pp", {{"S", 32}, {"B", 10923}}, 2},
    };
    printf("1,000,000-job simulations; target: simulate in under 1 s (ratio = 1 s / sim time)\n\n");
    printf("%-20s %-24s %6s %9s %6s %9s %9s %9s %9s %9s\n", "schedule", "params", "order", "jobs",
           "W", "table s", "sim s", "report s", "Mjobs/s", "vs 1 s");
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        failed += run_million(root, &cases[i]) != 0;
    return failed;
}

/* ---- table 2: scaling, each size in child processes ---------------------- */

/* A shape: its schedule and the -D values for about n jobs. */
typedef struct {
    const char *name, *file;
    void (*size)(long long n, bench_case *bc);
} shape;

static void set2(bench_case *bc, const char *a, long long va, const char *b, long long vb)
{
    bc->defs[0] = (pp_define){a, va};
    bc->defs[1] = (pp_define){b, vb};
    bc->ndefs = 2;
}

/* 1F1B and GPipe, 64 stages on 64 workers, n/128 microbatches (the
 * issue's S=64, B=8192 at 10^6) */
static void wide_b(long long n, bench_case *bc)
{
    long long S = n >= 1000000 ? 64 : n >= 10000 ? 16 : 4;
    set2(bc, "S", S, "B", llround((double)n / (2.0 * (double)S)));
}
/* ZB-H1's three directions: n/3 jobs a direction on 32 stages */
static void wide_b_split(long long n, bench_case *bc)
{
    long long S = n >= 1000000 ? 32 : n >= 10000 ? 16 : 4;
    set2(bc, "S", S, "B", llround((double)n / (3.0 * (double)S)));
}
/* 1F1B with four times as many stages (and workers) as microbatches */
static void deep_s(long long n, bench_case *bc)
{
    long long B = llround(sqrt((double)n / 8.0));
    set2(bc, "S", 4 * B, "B", B);
}
/* interleaved 1F1B, two chunks a worker, as many microbatches as workers:
 * W = sqrt(n / 4) */
static void wide_w(long long n, bench_case *bc)
{
    long long W = llround(sqrt((double)n / 4.0));
    bc->defs[0] = (pp_define){"W", W};
    bc->defs[1] = (pp_define){"V", 2};
    bc->defs[2] = (pp_define){"B", W};
    bc->ndefs = 3;
}

static const shape SHAPES[] = {
    {"wide B", "1f1b.pp", wide_b},
    {"deep S", "1f1b.pp", deep_s},
    {"wide W", "interleaved-1f1b.pp", wide_w},
    {"wide B", "gpipe.pp", wide_b},
    {"wide B", "zb-h1.pp", wide_b_split},
};

typedef struct {
    int ok;         /* 1 finished, 0 failed, -1 timed out */
    double seconds; /* sim: the simulation's; ppc: wall */
    long peak_kb;   /* ru_maxrss */
    long long jobs; /* sim: jobs simulated */
    long long W;
    double bytes; /* ppc: what it wrote */
    double cpu;   /* ppc: user + system seconds (wall minus cpu: waiting, on a shared machine) */
} measure;

static int timeout_s = 120;

/* The simulation alone, in a child: compile as far as the simulation and
 * report its seconds, jobs, W and the child's peak memory through a pipe. */
static measure run_sim(const char *root, const bench_case *bc)
{
    measure m = {0};
    int fd[2];
    if (pipe(fd))
        return m;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        alarm((unsigned)timeout_s);
        char path[1024];
        pp_compile_opts o = case_opts(root, bc, path, sizeof path, PP_STAGE_SIMULATE);
        o.capture = 1;
        pp_compiled c;
        measure r = {0};
        if (pp_compile(&o, &c) == PP_COMPILE_OK) {
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            r = (measure){1, c.seconds[PP_STAGE_SIMULATE], ru.ru_maxrss, 0, c.sch.W, 0, 0};
            for (int w = 0; w < c.t.W; w++)
                r.jobs += c.sim.off[w + 1] - c.sim.off[w];
        } else if (c.msgs)
            fprintf(stderr, "sim_bench: %s: %.300s\n", bc->file, c.msgs);
        ssize_t k = write(fd[1], &r, sizeof r);
        _exit(k == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    if (pid < 0) {
        close(fd[0]);
        return m;
    }
    ssize_t k = read(fd[0], &m, sizeof m);
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    if (k != (ssize_t)sizeof m)
        m = (measure){WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? -1 : 0, 0, 0, 0, 0, 0, 0};
    return m;
}

static double tree_bytes;
static int add_size(const char *p, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)p;
    (void)ftw;
    if (type == FTW_F)
        tree_bytes += (double)sb->st_size;
    return 0;
}
static int remove_entry(const char *p, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(p);
}

/* The whole compile: bin/ppc into a fresh directory under tmp, timed from
 * fork to exit; its peak memory from wait4; the bytes it wrote. */
static measure run_ppc(const char *root, const char *tmp, const bench_case *bc)
{
    measure m = {0};
    char dir[1024], file[1024], ppc[1024];
    snprintf(dir, sizeof dir, "%s/sim_bench.XXXXXX", tmp);
    if (!mkdtemp(dir))
        return m;
    snprintf(file, sizeof file, "%s/schedules/%s", root, bc->file);
    snprintf(ppc, sizeof ppc, "%s/bin/ppc", root);
    char dv[4][64], out[1100];
    snprintf(out, sizeof out, "%s/plan", dir);
    char *argv[16];
    int a = 0;
    argv[a++] = ppc;
    argv[a++] = file;
    for (int i = 0; i < bc->ndefs; i++) {
        snprintf(dv[i], sizeof dv[i], "%s=%lld", bc->defs[i].name, bc->defs[i].value);
        argv[a++] = "-D";
        argv[a++] = dv[i];
    }
    argv[a++] = "-o";
    argv[a++] = out;
    argv[a++] = "-q";
    argv[a] = NULL;
    double t0 = now();
    pid_t pid = fork();
    if (pid == 0) {
        alarm((unsigned)timeout_s); /* kept across exec */
        execv(ppc, argv);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    if (pid > 0 && wait4(pid, &st, 0, &ru) == pid) {
        m.seconds = now() - t0;
        m.peak_kb = ru.ru_maxrss;
        m.cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            m.ok = 1;
        else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
            m.ok = -1;
        else
            fprintf(stderr, "sim_bench: ppc %s exited %d\n", bc->file,
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    tree_bytes = 0;
    nftw(dir, add_size, 16, FTW_PHYS);
    m.bytes = tree_bytes;
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return m;
}

/* A measure's three cells: seconds, Mjobs/s, peak MiB (or why not). */
static void cells(const measure *m, long long jobs)
{
    if (m->ok == 1)
        printf(" %8.3f %8.2f %8.0f", m->seconds, (double)jobs / m->seconds / 1e6,
               (double)m->peak_kb / 1024.0);
    else
        printf(" %26s", m->ok < 0 ? "(killed: over the limit)" : "(failed)");
}

static int scaling_table(const char *root)
{
    long long max_jobs = 10000000;
    const char *e = getenv("SIM_BENCH_MAX_JOBS");
    if (e && atoll(e) > 0)
        max_jobs = atoll(e);
    e = getenv("SIM_BENCH_TIMEOUT");
    if (e && atoi(e) > 0)
        timeout_s = atoi(e);
    const char *tmp = getenv("SIM_BENCH_TMP");
    if (!tmp)
        tmp = getenv("TMPDIR");
    if (!tmp)
        tmp = "/tmp";
    printf("\nScaling: the simulation alone (a child compiling as far as the simulation) and\n"
           "the whole compile (bin/ppc -q into %s: plans, listings, reports; pictures\n"
           "as ppc decides, drawn up to 100000 jobs); peak = ru_maxrss of the child;\n"
           "target: 10^6 jobs compiled in under 2 s (vs 2 s = 2 s / ppc s; above 1 meets it);\n"
           "cpu s: the compile's user + system seconds (below ppc s when it waited: for the\n"
           "disk, or for a core on a shared machine); a child is killed after %d s\n"
           "(SIM_BENCH_TIMEOUT)\n\n",
           tmp, timeout_s);
    printf("%-20s %-7s %-22s %9s %6s | %8s %8s %8s | %8s %8s %8s %8s %8s | %7s\n", "schedule",
           "shape", "params", "jobs", "W", "sim s", "Mjobs/s", "peak MiB", "ppc s", "Mjobs/s",
           "peak MiB", "cpu s", "out MB", "vs 2 s");
    int failed = 0;
    for (size_t k = 0; k < sizeof SHAPES / sizeof SHAPES[0]; k++) {
        int killed = 0; /* a size past the limit: the larger ones are not tried */
        for (long long n = 1000; n <= max_jobs; n *= 10) {
            bench_case bc = {SHAPES[k].file, {{0}}, 0};
            SHAPES[k].size(n, &bc);
            char params[96];
            params_of(&bc, params, sizeof params);
            if (killed) {
                printf("%-20s %-7s %-22s %9s %6s | (not run: a smaller size was killed)\n", bc.file,
                       SHAPES[k].name, params, "-", "-");
                continue;
            }
            measure s = run_sim(root, &bc);
            measure p = s.ok == 1 ? run_ppc(root, tmp, &bc) : (measure){0};
            long long jobs = s.jobs;
            printf("%-20s %-7s %-22s %9lld %6lld |", bc.file, SHAPES[k].name, params, jobs, s.W);
            cells(&s, jobs);
            printf(" |");
            cells(&p, jobs);
            if (p.ok == 1)
                printf(" %8.3f", p.cpu);
            printf(" %8.1f |", p.bytes / 1e6);
            if (p.ok == 1 && n == 1000000)
                printf(" %6.2fx", 2.0 / p.seconds);
            printf("\n");
            fflush(stdout);
            failed += s.ok == 0 || p.ok == 0;
            killed = s.ok < 0 || p.ok < 0;
        }
    }
    return failed;
}

/* Table 1 in a child too: this process stays small, since a child's
 * ru_maxrss starts at its parent's size when it forked (Linux carries the
 * high-water mark over fork and exec). */
static int million_table_child(const char *root)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(million_table(root) ? 1 : 0);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return 1;
    return !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}

int main(int argc, char **argv)
{
    const char *root = argc > 1 ? argv[1] : ".";
    setvbuf(stdout, NULL, _IOLBF, 0);
    int failed = million_table_child(root);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("\n(this harness: %.0f MiB, the least a child's peak can show)\n",
           ru.ru_maxrss / 1024.0);
    failed += scaling_table(root);
    return failed ? 1 : 0;
}
