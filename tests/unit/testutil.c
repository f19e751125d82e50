/* testutil.c - see testutil.h. */
#include "testutil.h"
#include "../../compiler/readfile.h"
#include "suites.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

/* The tests' compile: as far as the simulation, diagnostics collected. */
static void compile_to_sim(compiled *c, const char *path, const char *text, const pp_define *defs,
                           int ndefs)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = path;
    o.text = text;
    o.len = text ? strlen(text) : 0;
    o.defs = defs;
    o.ndefs = ndefs;
    o.stop_after = PP_STAGE_SIMULATE;
    o.capture = 1;
    pp_compile(&o, c);
}

void compile_src(compiled *c, const char *src, const pp_define *defs, int ndefs)
{
    compile_to_sim(c, "t.pp", src, defs, ndefs);
}

pp_compile_status compile_text_to(pp_compiled *c, const char *src, pp_stage stop)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = src;
    o.len = strlen(src);
    o.stop_after = stop;
    o.capture = 1;
    return pp_compile(&o, c);
}

void plan_put(plan_b *b, int op, int s, int mb, int peer, ...)
{
    if (b->p.ninstr == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->p.code = realloc(b->p.code, b->cap * sizeof *b->p.code);
        ck_assert(b->p.code);
    }
    pp_instr in = {(uint8_t)op, s, mb, peer, -1, {-1, -1, -1, -1, -1}};
    va_list ap;
    va_start(ap, peer);
    for (int r; (r = va_arg(ap, int)) != PP_ROLE_NONE;)
        ck_assert_int_eq(pp_set_slot(&in, (pp_role)r, va_arg(ap, int)), 0);
    va_end(ap);
    b->p.code[b->p.ninstr++] = in;
}

void compile_library(compiled *c, const char *name, const pp_define *defs, int ndefs)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, name);
    compile_to_sim(c, path, NULL, defs, ndefs);
    ck_assert_msg(c->status != PP_COMPILE_IO, "%s", c->msgs);
}

void compiled_free(compiled *c) { pp_compiled_free(c); }

char *worker_order(const compiled *c, int w, char what)
{
    size_t cap = 64 + 24 * (size_t)(c->sim.off[w + 1] - c->sim.off[w]), n = 0;
    char *out = malloc(cap);
    out[0] = '\0';
    for (int k = c->sim.off[w]; k < c->sim.off[w + 1]; k++) {
        int j = c->sim.order[k];
        const pp_jobspace *js = &c->t.js;
        char d = dir_char(job_d(js, j));
        if (what == 'b')
            n += (size_t)snprintf(out + n, cap - n, "%s%c%d", n ? " " : "", d, job_b(js, j));
        else if (what == 's')
            n += (size_t)snprintf(out + n, cap - n, "%s%c%d", n ? " " : "", d, job_s(js, j));
        else
            n += (size_t)snprintf(out + n, cap - n, "%s%c(%d,%d)", n ? " " : "", d, job_s(js, j),
                                  job_b(js, j));
    }
    return out;
}

/* ---- subprocesses ---------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Check's CK_TIMEOUT_MULTIPLIER scales our limits as it scales its own. */
static double time_scale(void)
{
    const char *m = getenv("CK_TIMEOUT_MULTIPLIER");
    double v = m ? atof(m) : 1.0;
    return v > 0 ? v : 1.0;
}

int kill_tagged(const char *var, const char *prefix, int sig)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    size_t vlen = strlen(var), plen = strlen(prefix);
    int n = 0;
    struct dirent *e;
    static char env[1 << 16];
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid())
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/environ", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, env, sizeof env - 1);
        close(fd);
        if (len <= 0)
            continue;
        env[len] = '\0';
        for (char *p = env; p < env + len; p += strlen(p) + 1)
            if (!strncmp(p, var, vlen) && p[vlen] == '=' && !strncmp(p + vlen + 1, prefix, plen)) {
                if (kill((pid_t)pid, sig) == 0)
                    n++;
                break;
            }
    }
    closedir(d);
    return n;
}

int run_proc(const char *cmd, int timeout_s, proc_result *r)
{
    static int serial;
    memset(r, 0, sizeof *r);
    r->timeout = (int)(timeout_s * time_scale() + 0.5);
    char tag[64];
    /* "pid.serial.": the trailing dot keeps 1.1. from being a prefix of 1.12. */
    snprintf(tag, sizeof tag, "%ld.%d.", (long)getpid(), ++serial);
    size_t cap = 4096, n = 0;
    r->out = malloc(cap);
    r->out[0] = '\0';
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) {
        perror("pipe2");
        abort();
    }
    fflush(stdout);
    fflush(stderr);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        abort();
    }
    if (pid == 0) {
        setpgid(0, 0);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        setenv("PP_TEST_PROC", tag, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid); /* also here, so that the group exists before any kill */
    close(fds[1]);
    double deadline = t0 + r->timeout;
    int phase = 0, eof = 0, exited = 0, st = 0; /* phase 1: SIGTERM sent, 2: SIGKILL sent */
    while (!(eof && exited)) {
        double left = deadline - now_s();
        if (left <= 0) {
            if (phase == 2)
                break; /* something still holds the pipe: stop reading */
            if (phase == 0 && !exited)
                r->timed_out = 1;
            else if (phase == 0)
                r->lingered = 1;
            int sig = phase == 0 ? SIGTERM : SIGKILL;
            kill(-pid, sig);
            kill_tagged("PP_TEST_PROC", tag, sig);
            phase++;
            deadline = now_s() + 5;
            continue;
        }
        if (!exited) {
            pid_t w = waitpid(pid, &st, WNOHANG);
            if (w == pid) {
                exited = 1;
                r->seconds = now_s() - t0;
                /* what it started may finish writing, not run on */
                if (phase == 0 && deadline > now_s() + 10)
                    deadline = now_s() + 10;
            }
        }
        if (eof) {
            usleep(10000);
            continue;
        }
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int ms = exited ? (int)(left * 1000) + 1 : 20;
        if (poll(&p, 1, ms) <= 0)
            continue;
        if (n + 4096 > cap)
            r->out = realloc(r->out, cap *= 2);
        ssize_t got = read(fds[0], r->out + n, cap - n - 1);
        if (got > 0)
            n += (size_t)got;
        else if (got == 0 || errno != EINTR)
            eof = 1;
        r->out[n] = '\0';
    }
    close(fds[0]);
    if (!exited) {
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
        r->seconds = now_s() - t0;
    }
    /* nothing it started outlives it: a few passes, since a process in the
     * middle of an exec can show an empty environ to one scan of /proc (a
     * straggler once outlived harness:nothing_outlives_its_command) */
    kill_tagged("PP_TEST_PROC", tag, SIGKILL);
    usleep(5000);
    for (int pass = 0; pass < 50 && kill_tagged("PP_TEST_PROC", tag, SIGKILL) > 0; pass++)
        usleep(10000);
    if (r->timed_out)
        r->status = 124;
    else if (WIFSIGNALED(st)) {
        r->signal = WTERMSIG(st);
        r->status = 128 + r->signal;
    } else
        r->status = WEXITSTATUS(st);
    return r->status;
}

void proc_free(proc_result *r)
{
    free(r->out);
    r->out = NULL;
}

const char *last_lines(const char *text, int lines)
{
    const char *p = text + strlen(text);
    if (p > text && p[-1] == '\n')
        p--;
    while (p > text) {
        if (p[-1] == '\n' && --lines == 0)
            break;
        p--;
    }
    return p;
}

/* "exited with status 1", "was killed by signal 11 (Segmentation fault)", ... */
static void how_it_ended(const proc_result *r, char *buf, size_t len)
{
    if (r->timed_out)
        snprintf(buf, len, "did not finish within %d s and was killed", r->timeout);
    else if (r->signal)
        snprintf(buf, len, "was killed by signal %d (%s)", r->signal, strsignal(r->signal));
    else
        snprintf(buf, len, "exited with status %d", r->status);
    if (r->lingered)
        snprintf(buf + strlen(buf), len - strlen(buf),
                 " (processes it started still ran 10 s after it exited and were killed)");
}

char *proc_story(const proc_result *r, int lines)
{
    char how[256], *s;
    how_it_ended(r, how, sizeof how);
    const char *tail = last_lines(r->out, lines);
    if (!*tail) {
        if (asprintf(&s, "%s, printing nothing", how) < 0)
            abort();
    } else if (asprintf(&s, "%s; %s:\n%s", how,
                        tail == r->out ? "its output" : "the last lines of its output", tail) < 0)
        abort();
    return s;
}

int run_cmd(const char *cmd, char **out)
{
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    if (r.timed_out || r.signal || r.lingered) {
        char how[256];
        how_it_ended(&r, how, sizeof how);
        char *s;
        if (asprintf(&s, "%s%s[%s]\n", r.out,
                     *r.out && r.out[strlen(r.out) - 1] != '\n' ? "\n" : "", how) < 0)
            abort();
        free(r.out);
        r.out = s;
    }
    if (out)
        *out = r.out;
    else
        free(r.out);
    return r.status;
}

char *run_expect_at(const char *file, int line, const char *cmd, int want)
{
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    if (r.status != want || r.timed_out)
        _ck_assert_failed(file, line, "Command failed", "%s\n  expected exit status %d; it %s", cmd,
                          want, proc_story(&r, 20));
    return r.out;
}

/* ---- mpirun ------------------------------------------------------------------ */

#define MPIRUN "mpirun --oversubscribe --allow-run-as-root --bind-to none"
#define RANK_MARK "pp-test: rank "

void rank_statuses(const char *out, int np, int *st)
{
    for (int r = 0; r < np; r++)
        st[r] = -1;
    for (const char *p = out; (p = strstr(p, RANK_MARK)); p += strlen(RANK_MARK)) {
        int rank, status;
        if (sscanf(p + strlen(RANK_MARK), "%d exited %d", &rank, &status) == 2 && rank >= 0 &&
            rank < np)
            st[rank] = status;
    }
}

/* "ranks 0, 1 and 3 exited 0; rank 2 exited with status 1" */
static void describe_ranks(const int *st, int np, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    /* groups: exited 0, then each failure on its own, then the silent */
    char ok[256] = "", silent[256] = "";
    int nok = 0, nsilent = 0;
    for (int r = 0; r < np; r++) {
        if (st[r] == 0)
            snprintf(ok + strlen(ok), sizeof ok - strlen(ok), "%s%d", nok++ ? ", " : "", r);
        else if (st[r] < 0)
            snprintf(silent + strlen(silent), sizeof silent - strlen(silent), "%s%d",
                     nsilent++ ? ", " : "", r);
        else if (st[r] > 128)
            n += (size_t)snprintf(buf + n, len - n, "%srank %d was killed by signal %d (%s)",
                                  n ? "; " : "", r, st[r] - 128, strsignal(st[r] - 128));
        else
            n += (size_t)snprintf(buf + n, len - n, "%srank %d exited with status %d",
                                  n ? "; " : "", r, st[r]);
        if (n >= len)
            n = len - 1;
    }
    if (nok)
        n += (size_t)snprintf(buf + n, len - n, "%s%s %s exited 0", n ? "; " : "",
                              nok > 1 ? "ranks" : "rank", ok);
    if (n >= len)
        n = len - 1;
    if (nsilent)
        snprintf(buf + n, len - n, "%s%s %s never reported how %s ended", n ? "; " : "",
                 nsilent > 1 ? "ranks" : "rank", silent, nsilent > 1 ? "they" : "it");
}

int mpi_run_within(int np, const char *args, int timeout_s, char **out, char **why)
{
    char *cmd;
    const char *mpirun = getenv("PP_TEST_MPIRUN"); /* the harness's own test fakes failures */
    if (asprintf(&cmd,
                 "%s -np %d sh -c '\"$0\" \"$@\"; rc=$?; echo \"" RANK_MARK
                 "$OMPI_COMM_WORLD_RANK exited $rc\"; exit $rc' %s/bin/" PPVM " %s",
                 mpirun && *mpirun ? mpirun : MPIRUN, np, PP_ROOT, args) < 0)
        abort();
    int st[np], rc = 0;
    char ranks[1024], how[256];
    *why = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        proc_result r;
        run_proc(cmd, timeout_s, &r);
        rank_statuses(r.out, np, st);
        int all_ok = 1;
        for (int i = 0; i < np; i++)
            all_ok &= st[i] == 0;
        describe_ranks(st, np, ranks, sizeof ranks);
        how_it_ended(&r, how, sizeof how);
        if (r.status == 0 && !r.lingered) {
            *out = r.out;
            rc = 0;
            break;
        }
        rc = r.status ? r.status : 1;
        if (!r.timed_out && all_ok && attempt == 0) {
            /* Open MPI failing at exit: every rank did its work */
            printf("note: mpirun %s although every rank exited 0 (Open MPI failing at exit, not "
                   "the test); running it once more: %s\n  the last lines of its output:\n%s\n",
                   how, cmd, last_lines(r.out, 6));
            fflush(stdout);
            proc_free(&r);
            continue;
        }
        const char *tail = last_lines(r.out, 20);
        int len;
        if (all_ok && !r.timed_out)
            len = asprintf(why,
                           "%s\n  mpirun %s although every rank had exited 0, on this attempt and "
                           "the one before: a failure of mpirun that repeats (Open MPI failing at "
                           "exit, about 1 run in 100, twice in a row is rare; a launcher or "
                           "environment problem repeats every time); the last lines of its "
                           "output:\n%s",
                           cmd, how, tail);
        else
            len = asprintf(why, "%s\n  %s; mpirun %s; the last lines of its output:\n%s", cmd,
                           ranks, how, tail);
        if (len < 0)
            abort();
        *out = r.out;
        break;
    }
    free(cmd);
    return rc;
}

int mpi_run_mpmd(int n, const char *const *pre, const char *const *args, int timeout_s, char **out)
{
    char *cmd = NULL;
    const char *mpirun = getenv("PP_TEST_MPIRUN");
    if (asprintf(&cmd, "%s", mpirun && *mpirun ? mpirun : MPIRUN) < 0)
        abort();
    for (int i = 0; i < n; i++) {
        char *more;
        if (asprintf(&more,
                     "%s%s -np 1 sh -c '%s \"$0\" \"$@\"; rc=$?; echo \"" RANK_MARK
                     "$OMPI_COMM_WORLD_RANK exited $rc\"; exit $rc' %s/bin/" PPVM " %s",
                     cmd, i ? " :" : "", pre && pre[i] ? pre[i] : "", PP_ROOT, args[i]) < 0)
            abort();
        free(cmd);
        cmd = more;
    }
    proc_result r;
    int rc = run_proc(cmd, timeout_s, &r);
    if (asprintf(out, "%s\n%s%s", cmd, r.out, r.timed_out ? "\n[timed out]" : "") < 0)
        abort();
    proc_free(&r);
    free(cmd);
    return rc;
}

int mpi_run(int np, const char *args, char **out, char **why)
{
    return mpi_run_within(np, args, MPIRUN_TIMEOUT, out, why);
}

char *mpi_ok_at(const char *file, int line, int np, const char *args)
{
    char *out, *why;
    if (mpi_run(np, args, &out, &why))
        _ck_assert_failed(file, line, "mpirun failed", "%s", why);
    return out;
}

void mpi_fails_with_at(const char *file, int line, int np, const char *args, const char *message)
{
    char *out, *why;
    int rc = mpi_run(np, args, &out, &why);
    if (rc == 0)
        _ck_assert_failed(file, line, "mpirun succeeded",
                          "expected a failure with '%s' from "
                          "mpirun -np %d ppvm %s, but every rank exited 0:\n%s",
                          message, np, args, last_lines(out, 20));
    int st[np], rank_failed = 0;
    rank_statuses(out, np, st);
    for (int i = 0; i < np; i++)
        rank_failed |= st[i] > 0;
    if (rc == 124 || !rank_failed)
        _ck_assert_failed(file, line, "mpirun failed otherwise",
                          "expected a rank to fail with '%s', but no rank did: %s", message, why);
    if (!strstr(out, message))
        _ck_assert_failed(file, line, "Wrong message",
                          "expected '%s' in the output of a failing rank: %s", message, why);
    free(out);
    free(why);
}

char *temp_dir(void)
{
    char *t = strdup("/tmp/pp-test-XXXXXX");
    if (!mkdtemp(t)) {
        perror("mkdtemp");
        abort();
    }
    return t;
}

char *compile_plan(const char *schedule, const char *args)
{
    char *dir = temp_dir(), cmd[2048];
    if (strchr(schedule, '/')) /* a path, not a library schedule */
        snprintf(cmd, sizeof cmd, "%s/bin/ppc %s %s -o %s/plan -q", PP_ROOT, schedule, args, dir);
    else
        snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/%s %s -o %s/plan -q", PP_ROOT, PP_ROOT,
                 schedule, args, dir);
    free(run_expect(cmd, 0));
    return dir;
}

void remove_dir(char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    run_cmd(cmd, NULL);
    free(dir);
}

const char *const test_gpt_model =
    "model gpt { vocab = 256; context = 16; embed = 32; heads = 4; ffn = 64; batch = 4\n"
    "            layers = s == 0 || s == S - 1 ? 1 : 2 }";

char *with_model(const char *schedule, const char *model)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, schedule);
    char *src = pp_read_file(path, NULL, NULL);
    ck_assert_msg(src != NULL, "cannot read %s", path);
    char *start = strstr(src, "\nmodel {"), *end = start ? strstr(start, "\n}") : NULL;
    ck_assert_msg(start && end, "%s has no model block to replace", path);
    char *dir = temp_dir(), *out = malloc(strlen(dir) + 32);
    sprintf(out, "%s/schedule.pp", dir);
    free(dir);
    FILE *f = fopen(out, "w");
    ck_assert_msg(f != NULL, "cannot write %s", out);
    fprintf(f, "%.*s\n%s%s", (int)(start - src), src, model, end + 2);
    fclose(f);
    free(src);
    return out;
}

void remove_schedule(char *path)
{
    *strrchr(path, '/') = 0;
    remove_dir(path);
}

#ifdef PP_HAVE_CUDA
#include <cuda_runtime_api.h>
int have_gpu(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#else
int have_gpu(void) { return 0; }
#endif

/* The numbers of `key` in a --profile file: "key": [a, b, ...] or
 * "key": a. Returns how many (at most max), all of which must be > 0. */
int profile_values(const char *json, const char *key, double *v, int max)
{
    char want[32];
    snprintf(want, sizeof want, "\"%s\": ", key);
    const char *p = strstr(json, want);
    if (!p)
        return 0;
    p += strlen(want);
    int list = *p == '[', n = 0;
    p += list;
    while (n < max) {
        char *end;
        v[n] = strtod(p, &end);
        ck_assert_msg(end != p && v[n] > 0, "%s: not a positive number at '%.20s'", key, p);
        n++;
        p = end;
        if (!list || *p != ',')
            break;
        p += 2;
    }
    return n;
}

void pp_add_job_tcase(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

void test_skipped(const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const char *must = getenv("PP_TEST_MUST_RUN");
    if (must && strstr(must, "gpu"))
        ck_abort_msg("this GPU check would be skipped (%.*s), but PP_TEST_MUST_RUN=%s says every "
                     "GPU check must run here (make standin-test: PP_STANDIN_GPUS too low?)",
                     (int)strcspn(why, "\n"), why, must);
    printf("skipped: %s", why);
    fflush(stdout);
}
