/* pprun.c - the launcher: `pprun PLAN [--hosts H:N,... | --hostfile F]
 * [--dry-run] [ppvm flags]` runs ppvm under mpirun with what mpirun needs
 * on this machine, so that no command line is typed by hand.
 *
 * It reads the rank count from the plan (PLAN/rank0.bin's header: every
 * rank's plan holds the world size), and builds
 *   mpirun -np W [--allow-run-as-root] [--oversubscribe] --bind-to none
 *          [--host H:N,... | --hostfile F] -x OPENBLAS_NUM_THREADS=1
 *          [-x OPENBLAS_CORETYPE[=X]] [-x NAME for each forwarded variable]
 *          /abs/bin/ppvm PLAN [flags]
 * --allow-run-as-root when run as root; --oversubscribe when, on this
 * machine alone, the ranks outnumber its cores (mpirun counts cores, not
 * hardware threads, as its slots); one BLAS thread per rank; the user's
 * OPENBLAS_CORETYPE, or on this machine alone the kernels this CPU
 * deserves where OpenBLAS would fall back to older ones (blas_core.h); the variables
 * forwarded to every rank (remote ones too: mpirun forwards only what -x
 * names) are those whose names start with PP_, PPVM_ or NCCL_, and
 * LD_LIBRARY_PATH. It prints that line (shell-quoted), then runs it;
 * --dry-run prints it only.
 *
 * Signals. Open MPI 4.1's mpirun answers SIGTERM and SIGINT by sending the
 * ranks SIGTERM and SIGKILL a second later, too soon for a step to end and
 * --save to be written, and reports SIGINT as SIGTERM; it passes SIGUSR1
 * and SIGUSR2 on to every rank, remote ones included, and nothing else.
 * So mpirun runs in a process group of its own (a Ctrl-C at the terminal
 * reaches pprun alone), and pprun relays the first SIGTERM as SIGUSR1 and
 * the first SIGINT as SIGUSR2, which ppvm takes as that stop signal
 * (vm/guard.c): every rank ends after its step, as a SIGTERM to each rank
 * would end it. mpirun passes a signal only to the ranks it has started,
 * so one that comes while they start is held until every rank catches it
 * (a run on this machine: the plan's ranks, mpirun's children; with
 * --hosts or --hostfile the ranks elsewhere cannot be seen, and mpirun's
 * own handler is all pprun waits for). A second signal is relayed again
 * (ppvm: exit at once); a third sends mpirun SIGTERM, Open MPI's own
 * abort. If pprun dies, mpirun gets SIGTERM (PR_SET_PDEATHSIG).
 *
 * Exit status: mpirun's (128 + N when a signal N ended it); 2 for a bad
 * command line or plan, before anything runs. ppvm's statuses (vm/ppvm.c)
 * come through mpirun: a run stopped by SIGTERM exits 143, as rank 0 says.
 * PPRUN_MPIRUN replaces the mpirun program (the tests' stand-in). */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../isa/plan.h"
#include "blas_core.h"

extern char **environ;

#define MAX_ARGS 4096
#define READY_WAIT_S 60.0 /* the longest a first signal waits for the ranks to catch it */

static void usage(FILE *f)
{
    fprintf(f, "usage: pprun PLAN_DIR [--hosts H:N,...|--hostfile F] [--dry-run] [ppvm options]\n"
               "  runs ppvm under mpirun, one rank per plan file: the rank count is the plan's\n"
               "  --hosts H:N,...  run N ranks on host H, ... (mpirun --host)\n"
               "  --hostfile F     the hosts in mpirun's hostfile F\n"
               "  --dry-run        print the mpirun command line only\n"
               "  --blas-coretype  print the OPENBLAS_CORETYPE given to ranks on this machine\n"
               "                   when OpenBLAS would run older kernels than its CPU allows\n"
               "                   (nothing when it would not), and exit\n"
               "  everything else goes to ppvm (ppvm --help); the mpirun line is printed first.\n"
               "  SIGTERM or SIGINT to pprun stops every rank after its step (a second one at\n"
               "  once; a third ends mpirun)\n");
}

/* ---- the command line ------------------------------------------------------ */

typedef struct {
    const char *plan, *hosts, *hostfile;
    int dry_run;
    char **ppvm_args; /* after PLAN, in order */
    int nppvm;
} options;

/* pprun's own flags are taken wherever they appear (ppvm has none of these
 * names); the first other argument is the plan, the rest go to ppvm.
 * 0, 1 for --help, -1 for a bad command line (said). */
static int parse(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->ppvm_args = calloc((size_t)argc + 1, sizeof *o->ppvm_args);
    if (!o->ppvm_args)
        return -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **val = !strcmp(a, "--hosts")      ? &o->hosts
                           : !strcmp(a, "--hostfile") ? &o->hostfile
                                                      : NULL;
        if (val) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "pprun: %s needs a value (%s)\n", a,
                        val == &o->hosts ? "HOST:RANKS,..., e.g. --hosts a:2,b:2" : "a file");
                return -1;
            }
            if (*val) {
                fprintf(stderr, "pprun: %s given twice; give it once\n", a);
                return -1;
            }
            *val = argv[++i];
        } else if (!strcmp(a, "--dry-run"))
            o->dry_run = 1;
        else if (!strcmp(a, "--blas-coretype")) {
            const char *core = pp_blas_better_core();
            if (core)
                printf("%s\n", core);
            return 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!o->plan && a[0] == '-') {
            fprintf(stderr,
                    "pprun: '%s' before the plan: give the plan directory first, then ppvm's "
                    "options (pprun PLAN_DIR %s ...)\n",
                    a, a);
            return -1;
        } else if (!o->plan)
            o->plan = a;
        else
            o->ppvm_args[o->nppvm++] = argv[i];
    }
    if (!o->plan) {
        fprintf(stderr, "pprun: no plan given (pprun PLAN_DIR [ppvm options]; ppc SCHEDULE.pp "
                        "-o PLAN_DIR writes one)\n");
        return -1;
    }
    if (o->hosts && o->hostfile) {
        fprintf(stderr, "pprun: --hosts and --hostfile both given; give one\n");
        return -1;
    }
    return 0;
}

/* The total of N over "H:N,H:N,..." (a host without :N counts 1), or -1
 * when malformed (said). */
static long hosts_slots(const char *hosts)
{
    long total = 0;
    const char *p = hosts;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        long n = 1;
        if (len == 0 || colon == p) {
            fprintf(stderr, "pprun: --hosts %s: expected HOST:RANKS,... (e.g. a:2,b:2)\n", hosts);
            return -1;
        }
        if (colon) {
            char *e;
            errno = 0;
            n = strtol(colon + 1, &e, 10);
            if (errno || e != p + len || n < 1 || n > 1000000) {
                fprintf(stderr,
                        "pprun: --hosts %s: '%.*s': expected HOST:RANKS with RANKS a positive "
                        "integer\n",
                        hosts, (int)len, p);
                return -1;
            }
        }
        total += n;
        p += len + (end != NULL);
        if (end && !*p) {
            fprintf(stderr, "pprun: --hosts %s: a trailing comma\n", hosts);
            return -1;
        }
    }
    return total;
}

/* ---- the plan ---------------------------------------------------------------- */

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

/* The plan's world size, or -1 with the reason said (and what to do). */
static long plan_world(const char *plan)
{
    struct stat st;
    char file[PATH_MAX + 16], err[512];
    if (stat(plan, &st)) {
        if (ends_with(plan, ".pp"))
            fprintf(stderr,
                    "pprun: '%s': %s; pprun takes a plan that ppc compiled (ppc SCHEDULE.pp -o "
                    "DIR, then pprun DIR)\n",
                    plan, strerror(errno));
        else
            fprintf(stderr,
                    "pprun: '%s': %s: no such plan directory; compile one with ppc SCHEDULE.pp "
                    "-o %s\n",
                    plan, strerror(errno), plan);
        return -1;
    }
    if (S_ISREG(st.st_mode) && ends_with(plan, ".pp")) {
        fprintf(stderr,
                "pprun: '%s' is a schedule, not a plan: compile it first (ppc %s -o out/plan), "
                "then pprun out/plan\n",
                plan, plan);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(file, sizeof file, "%s/rank0.bin", plan);
        if (access(file, F_OK)) {
            fprintf(stderr,
                    "pprun: '%s' holds no rank0.bin: not a plan directory (ppc SCHEDULE.pp -o "
                    "%s writes one)\n",
                    plan, plan);
            return -1;
        }
    } else
        snprintf(file, sizeof file, "%s", plan);
    pp_plan p;
    if (pp_plan_read(file, &p, err, sizeof err)) {
        fprintf(stderr, "pprun: %s\n", err);
        return -1;
    }
    long world = p.world;
    pp_plan_free(&p);
    if (!S_ISDIR(st.st_mode) && world != 1) {
        fprintf(stderr, "pprun: '%s' is one rank's file of a %ld-rank plan: give its directory\n",
                plan, world);
        return -1;
    }
    return world;
}

/* ---- this machine ------------------------------------------------------------- */

/* The cores of the CPUs this process may run on, as mpirun counts slots
 * (a core's hardware threads are one slot); the CPUs when the topology
 * cannot be read. */
static long cores(void)
{
    cpu_set_t set;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof set, &set))
        return n > 0 ? n : 1;
    long seen[CPU_SETSIZE], nseen = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        char path[128];
        long pkg = 0, core = c;
        FILE *f;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%ld", &core) != 1)
                core = c;
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 c);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%ld", &pkg) != 1)
                pkg = 0;
            fclose(f);
        }
        long key = pkg * 1000000 + core, k = 0;
        while (k < nseen && seen[k] != key)
            k++;
        if (k == nseen)
            seen[nseen++] = key;
    }
    return nseen > 0 ? nseen : 1;
}

/* ppvm beside this pprun, as an absolute path: remote hosts run the same
 * path, so it must hold ppvm there too. */
static int ppvm_path(char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = 0;
    snprintf(buf, len, "%s/ppvm", self);
    return access(buf, X_OK) ? -1 : 0;
}

/* ---- the mpirun line ----------------------------------------------------------- */

typedef struct {
    char *v[MAX_ARGS];
    int n;
} argv_b;

static int add(argv_b *a, const char *s)
{
    if (a->n + 1 >= MAX_ARGS) {
        fprintf(stderr, "pprun: more than %d arguments\n", MAX_ARGS - 2);
        return -1;
    }
    a->v[a->n++] = strdup(s);
    a->v[a->n] = NULL;
    return a->v[a->n - 1] ? 0 : -1;
}

/* The variables every rank gets (-x NAME): pp's own, NCCL's, the library path. */
static int forwarded(const char *name, size_t len)
{
    return (len > 3 && !strncmp(name, "PP_", 3)) || (len > 5 && !strncmp(name, "PPVM_", 5)) ||
           (len > 5 && !strncmp(name, "NCCL_", 5)) ||
           (len == 15 && !strncmp(name, "LD_LIBRARY_PATH", 15));
}

static int build(const options *o, long world, argv_b *a)
{
    char ppvm[PATH_MAX + 8], num[32];
    const char *mpirun = getenv("PPRUN_MPIRUN");
    if (ppvm_path(ppvm, sizeof ppvm)) {
        fprintf(stderr, "pprun: no executable ppvm beside this pprun (build it: make)\n");
        return -1;
    }
    snprintf(num, sizeof num, "%ld", world);
    int rc = add(a, mpirun && mpirun[0] ? mpirun : "mpirun") | add(a, "-np") | add(a, num);
    if (geteuid() == 0)
        rc |= add(a, "--allow-run-as-root");
    if (!o->hosts && !o->hostfile && world > cores())
        rc |= add(a, "--oversubscribe");
    rc |= add(a, "--bind-to") | add(a, "none");
    if (o->hosts)
        rc |= add(a, "--host") | add(a, o->hosts);
    if (o->hostfile)
        rc |= add(a, "--hostfile") | add(a, o->hostfile);
    rc |= add(a, "-x");
    rc |=
        add(a, getenv("OPENBLAS_NUM_THREADS") ? "OPENBLAS_NUM_THREADS" : "OPENBLAS_NUM_THREADS=1");
    /* the user's OpenBLAS kernels; else, on this machine alone, better ones
     * than OpenBLAS picks where it does not know the CPU (blas_core.h) */
    const char *core = pp_blas_better_core();
    char coretype[64];
    snprintf(coretype, sizeof coretype, "OPENBLAS_CORETYPE=%s", core ? core : "");
    if (getenv("OPENBLAS_CORETYPE"))
        rc |= add(a, "-x") | add(a, "OPENBLAS_CORETYPE");
    else if (core && !o->hosts && !o->hostfile)
        rc |= add(a, "-x") | add(a, coretype);
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (eq && forwarded(*e, (size_t)(eq - *e))) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
            rc |= add(a, "-x") | add(a, name);
        }
    }
    rc |= add(a, ppvm) | add(a, o->plan);
    for (int i = 0; i < o->nppvm; i++)
        rc |= add(a, o->ppvm_args[i]);
    return rc ? -1 : 0;
}

/* One argument as the shell reads it back: bare when it is plain. */
static void put_quoted(FILE *f, const char *s)
{
    if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                        "_-+=/.,:@%") == strlen(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    fputc('\'', f);
}

/* ---- running it -------------------------------------------------------------- */

static volatile sig_atomic_t pending[3], received; /* the signals not yet acted on */

static void on_signal(int sig)
{
    if (received < 3)
        pending[received] = sig;
    received++;
}

/* Whether process pid has a handler for sig (its /proc status's SigCgt). */
static int catches(pid_t pid, int sig)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    int yes = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "SigCgt:", 7)) {
            unsigned long long mask = strtoull(line + 7, NULL, 16);
            yes = (mask >> (sig - 1)) & 1;
        }
    if (f)
        fclose(f);
    return yes;
}

static const char *signame(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

/* How many of pid's children catch sig. */
static long children_catching(pid_t pid, int sig)
{
    DIR *d = opendir("/proc");
    long n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end, path[64], line[512];
        long child = strtol(e->d_name, &end, 10);
        if (*end || child <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", child);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        /* "pid (comm) state ppid ...": comm may hold spaces and ')' */
        char *got = fgets(line, sizeof line, f), *paren = got ? strrchr(line, ')') : NULL;
        fclose(f);
        long parent = -1;
        if (paren && sscanf(paren + 1, " %*c %ld", &parent) == 1 && parent == (long)pid &&
            catches((pid_t)child, sig))
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static int relayed_as(int sig) { return sig == SIGTERM ? SIGUSR1 : SIGUSR2; }

/* Whether a stop signal relayed now reaches every rank: mpirun has its
 * handler for it in (until then the signal would end mpirun), and in a run
 * on this machine its `local` children (the ranks) have theirs (ppvm
 * installs them first thing; mpirun passes a signal only to the ranks it
 * has started: one relayed while they started was lost, and the run went
 * on to its last step). */
static int ranks_catch(pid_t mpirun, int sig, long local)
{
    int relayed = relayed_as(sig);
    return catches(mpirun, relayed) && (local == 0 || children_catching(mpirun, relayed) >= local);
}

/* The k-th signal (from 0) pprun received, `sig`, acted on. */
static void relay(pid_t mpirun, int k, int sig)
{
    int relayed = relayed_as(sig);
    if (k == 0)
        fprintf(stderr,
                "pprun: %s: every rank stops after its step (relayed through mpirun as %s; a "
                "second signal stops them at once)\n",
                signame(sig), relayed == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
    else if (k == 1)
        fprintf(stderr,
                "pprun: a second signal (%s): every rank exits at once, without finishing its "
                "step or saving (a third ends mpirun)\n",
                signame(sig));
    else {
        fprintf(stderr,
                "pprun: a third signal (%s): ending mpirun (SIGTERM, then its SIGKILL "
                "to the ranks)\n",
                signame(sig));
        kill(mpirun, SIGTERM);
        return;
    }
    kill(mpirun, relayed);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Runs mpirun (a->v) and relays signals to it; `local`: the ranks it
 * starts on this machine, 0 when unknown (--hosts, --hostfile). */
static int run(argv_b *a, long local)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL); /* no SA_RESTART: waitpid returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        fprintf(stderr, "pprun: cannot start mpirun: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        /* a group of its own: the terminal's Ctrl-C reaches pprun only;
         * no stdin, which a background group may not read */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        FILE *null = freopen("/dev/null", "r", stdin);
        (void)null;
        execvp(a->v[0], a->v);
        fprintf(stderr, "pprun: cannot run %s: %s\n", a->v[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    int status, acted = 0;
    double held_since = 0; /* when the first signal came, while the ranks could not take it */
    const struct timespec nap = {0, 10 * 1000 * 1000};
    for (;;) { /* polled, so that a signal just before a wait is not held until mpirun ends */
        while (acted < received && acted < 3) {
            /* the first waits (60 s at most) until the ranks catch it */
            if (acted == 0 && !ranks_catch(pid, pending[0], local)) {
                if (!held_since)
                    held_since = now_s();
                if (now_s() - held_since < READY_WAIT_S)
                    break;
            }
            relay(pid, acted, pending[acted]);
            acted++;
        }
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            fprintf(stderr, "pprun: waiting for mpirun: %s\n", strerror(errno));
            return 1;
        }
        nanosleep(&nap, NULL); /* a signal cuts it short */
    }
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (WIFSIGNALED(status))
        fprintf(stderr, "pprun: mpirun was ended by signal %d; exit status %d\n", WTERMSIG(status),
                rc);
    else if (rc)
        fprintf(stderr, "pprun: mpirun exited with status %d\n", rc);
    return rc;
}

int main(int argc, char **argv)
{
    static options o; /* static: what it points to stays reachable (LeakSanitizer) */
    int parsed = parse(argc, argv, &o);
    if (parsed)
        return parsed > 0 ? 0 : 2;
    long world = plan_world(o.plan);
    if (world < 0)
        return 2;
    if (o.hosts) {
        long slots = hosts_slots(o.hosts);
        if (slots < 0)
            return 2;
        if (slots < world) {
            fprintf(stderr,
                    "pprun: --hosts %s gives %ld rank%s; the plan has %ld (one rank per plan "
                    "file)\n",
                    o.hosts, slots, slots == 1 ? "" : "s", world);
            return 2;
        }
    }
    static argv_b a;
    if (build(&o, world, &a))
        return 2;
    for (int i = 0; i < a.n; i++) {
        put_quoted(stdout, a.v[i]);
        fputc(i + 1 < a.n ? ' ' : '\n', stdout);
    }
    if (o.dry_run)
        return 0;
    return run(&a, o.hosts || o.hostfile ? 0 : world);
}
