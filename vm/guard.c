/* guard.c - the watchdog thread behind --timeout and the SIGTERM/SIGINT
 * handling behind --grace (guard.h).
 *
 * The main thread writes the progress record (atomics, relaxed: the thread
 * only needs each field's latest value, and a line naming the instruction
 * before or after the one in progress is still true within microseconds);
 * the thread wakes every 50 ms. It never calls MPI: the main thread is
 * blocked inside MPI when it matters, and Open MPI (initialised with
 * MPI_Init, one thread) allows no second caller. It writes its line with
 * write(2), not stdio, whose lock the main thread may hold, and leaves with
 * _exit, so that no atexit handler or MPI destructor runs beside a main
 * thread still inside MPI. */
#include "guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Heartbeats: each rank's watchdog sends a datagram to every other rank's
 * every HEARTBEAT_NS and notes when it last heard from each. A rank that
 * is stopped (SIGSTOP), dead or cut off falls silent, whatever its main
 * thread was doing; so a watchdog that times out names the silent ranks,
 * not the peer its own instruction waits on, which in a pipeline of more
 * than two ranks is often a healthy rank waiting on the silent one
 * (issue 25). UDP, outside MPI: the watchdog never calls MPI. */
#define HEARTBEAT_NS (500 * 1000 * 1000LL)
#define SILENT_NS (3 * HEARTBEAT_NS) /* three beats missed: stopped, dead or cut off */
#define HEARTBEAT_MAX_WORLD 512      /* beyond: world^2 datagrams a second is too many */

typedef struct {
    uint32_t addr; /* IPv4, network order */
    uint16_t port; /* network order */
} hb_addr;

typedef struct {
    uint64_t token; /* the job's, so that another job's datagrams are ignored */
    int32_t rank;
    int32_t waiting;   /* the sender waits on other ranks (a transfer, a collective) */
    uint64_t progress; /* its phase, step and instruction: a change is progress */
} hb_msg;

static struct {
    int me, world;
    /* heartbeats, set up by pp_guard_heartbeats before `ready`; then the
     * watchdog thread's alone */
    _Atomic int ready;
    int fd;
    uint64_t token;
    hb_addr *peers;
    long long *heard; /* CLOCK_MONOTONIC ns each rank was last heard from */
    /* each rank's longest silence that ended in the current phase, and when
     * it ended: mpirun continues a stopped rank (SIGCONT) as it ends the
     * job, so by the time a slower watchdog times out the stopped rank may
     * be beating again */
    long long *longest, *longest_end;
    /* each rank's last progress key, when it last changed, and whether it
     * said it waits: a rank that beats but has not moved for a while and
     * waits on nobody is the stalled one (issue 29) */
    uint64_t *progress;
    long long *moved;
    int *waiting;
    long long sent;
    double timeout, grace;
    _Atomic int phase, step;
    _Atomic long long since; /* CLOCK_MONOTONIC ns when the phase's clock started */
    _Atomic uint32_t index;  /* the instruction in progress, PP_AT_STEP */
    _Atomic int op, stage, mb, peer;
    _Atomic int in_wait;    /* inside a backend's blocking wait (PP_WAITED) */
    _Atomic int hook_stall; /* stalled on purpose by PPVM_TEST_KILL's -stall */
    char second[160];       /* the second signal's line, made before any signal */
} g;

/* The first SIGTERM/SIGINT, or 0. A lock-free atomic, not a volatile
 * sig_atomic_t: the handler may run on any thread that has the signals
 * unblocked (Open MPI's own threads too), and the main thread and the
 * watchdog read it, which only an atomic makes well-defined across threads
 * (C11 7.14.1.1 allows lock-free atomics in a handler). */
static _Atomic int stop_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal handler needs a lock-free atomic int");

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

const char *pp_guard_signal_name(int sig)
{
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

int pp_guard_signal(void) { return atomic_load(&stop_signal); }

/* Async-signal-safe: the first signal is only noted; a second one ends the
 * process at once with the line made at start-up. SIGUSR1 and SIGUSR2 are
 * SIGTERM and SIGINT relayed by bin/pprun (mpirun passes only those two on
 * to every rank without ending the job: vm/pprun.c), noted as what they
 * relay. In MPI_Finalize, with the run's work done, a signal (mpirun
 * ending the ranks that are still there once one exited non-zero) ends
 * the process without a line. */
static void on_signal(int sig)
{
    sig = sig == SIGUSR1 ? SIGTERM : sig == SIGUSR2 ? SIGINT : sig;
    int first = atomic_load(&stop_signal);
    if (first) {
        if (atomic_load_explicit(&g.phase, memory_order_relaxed) != PP_AT_FINALIZE) {
            ssize_t w = write(2, g.second, strlen(g.second));
            (void)w;
        }
        _exit(128 + first);
    }
    atomic_store(&stop_signal, sig);
}

int pp_guard_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        if (sigaction(sigs[i], &sa, NULL))
            return -1;
    return 0;
}

void pp_guard_waiting(int on) { atomic_store_explicit(&g.in_wait, on, memory_order_relaxed); }

void pp_guard_stalled(void) { atomic_store(&g.hook_stall, 1); }

/* Whether this rank waits on others now: a phase that is a collective of
 * every rank, a transfer or collective instruction, a backend's wait. */
static int me_waiting(void)
{
    if (atomic_load(&g.hook_stall))
        return 0;
    if (atomic_load_explicit(&g.in_wait, memory_order_relaxed))
        return 1;
    switch ((pp_phase)atomic_load_explicit(&g.phase, memory_order_relaxed)) {
    case PP_AT_STARTUP:
    case PP_AT_BARRIER:
    case PP_AT_STEP_END:
    case PP_AT_FINALIZE:
        return 1;
    case PP_AT_STEP: {
        if (atomic_load_explicit(&g.index, memory_order_relaxed) == UINT32_MAX)
            return 0;
        const pp_op_info *info = pp_op(atomic_load_explicit(&g.op, memory_order_relaxed));
        return info && (info->kind == PP_KIND_SEND || info->kind == PP_KIND_RECV ||
                        info->kind == PP_KIND_COLLECTIVE);
    }
    default:
        return 0;
    }
}

/* Where this rank is: a key that changes whenever it moves on. */
static uint64_t me_progress(void)
{
    return ((uint64_t)atomic_load_explicit(&g.phase, memory_order_relaxed) << 56) ^
           ((uint64_t)(uint32_t)atomic_load_explicit(&g.step, memory_order_relaxed) << 24) ^
           atomic_load_explicit(&g.index, memory_order_relaxed);
}

void pp_guard_phase(pp_phase ph, int step)
{
    if (ph != PP_AT_STEP_END)
        atomic_store_explicit(&g.since, now_ns(), memory_order_relaxed);
    atomic_store_explicit(&g.step, step, memory_order_relaxed);
    atomic_store_explicit(&g.index, UINT32_MAX, memory_order_relaxed);
    atomic_store_explicit(&g.phase, (int)ph, memory_order_relaxed);
}

void pp_guard_instr(uint32_t index, const pp_instr *in)
{
    atomic_store_explicit(&g.op, in->op, memory_order_relaxed);
    atomic_store_explicit(&g.stage, in->stage, memory_order_relaxed);
    atomic_store_explicit(&g.mb, in->mb, memory_order_relaxed);
    atomic_store_explicit(&g.peer, in->peer, memory_order_relaxed);
    atomic_store_explicit(&g.index, index, memory_order_relaxed);
}

/* The ranks not heard from for longer than a few heartbeats (stopped,
 * dead or cut off), in words into buf ("" when none, or no heartbeats). */
static void silent_ranks(char *buf, size_t len)
{
    buf[0] = 0;
    if (!atomic_load(&g.ready))
        return;
    long long now = now_ns(), worst = 0;
    double limit = SILENT_NS / 1e9;
    int n = 0, at = 0;
    char list[200] = "";
    long long since = atomic_load_explicit(&g.since, memory_order_relaxed);
    for (int r = 0; r < g.world; r++) {
        long long quiet = now - g.heard[r];
        if (g.longest_end[r] >= since && g.longest[r] > quiet)
            quiet = g.longest[r];
        if (r != g.me && quiet / 1e9 > limit) {
            if (quiet > worst)
                worst = quiet;
            if (n++ < 8 && at < (int)sizeof list - 16)
                at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", n > 1 ? ", " : "", r);
        }
    }
    if (n)
        snprintf(buf, len, "no heartbeat for %.1f s: rank%s %s%s %s lost or stalled", worst / 1e9,
                 n > 1 ? "s" : "", list, n > 8 ? " and more" : "", n > 1 ? "are" : "is");
}

/* The ranks that beat but have made no progress for longer than a few
 * heartbeats while waiting on nobody: stalled (a hung job, a stuck disk).
 * Only a rank that waits itself can tell: a busy rank's peers may be
 * waiting on it. "" when none. */
static void stalled_ranks(char *buf, size_t len)
{
    buf[0] = 0;
    if (!atomic_load(&g.ready) || !me_waiting())
        return;
    long long now = now_ns(), worst = 0;
    int n = 0, at = 0;
    char list[200] = "";
    for (int r = 0; r < g.world; r++)
        if (r != g.me && !g.waiting[r] && now - g.moved[r] > SILENT_NS) {
            if (now - g.moved[r] > worst)
                worst = now - g.moved[r];
            if (n++ < 8 && at < (int)sizeof list - 16)
                at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", n > 1 ? ", " : "", r);
        }
    if (n)
        snprintf(buf, len,
                 "rank%s %s%s %s stalled (heartbeats, but no progress for %.1f s outside a wait)",
                 n > 1 ? "s" : "", list, n > 8 ? " and more" : "", n > 1 ? "are" : "is",
                 worst / 1e9);
}

/* What the heartbeats tell: the silent ranks, else the stalled ones, else
 * (this rank itself on hold: a test's stall) that; "" when nothing. */
static void known_cause(char *buf, size_t len)
{
    silent_ranks(buf, len);
    if (!buf[0])
        stalled_ranks(buf, len);
    if (!buf[0] && atomic_load(&g.hook_stall))
        snprintf(buf, len, "this rank is stalled (PPVM_TEST_KILL)");
}

/* Who a collective of every rank waits on: what the heartbeats tell; else
 * whom it waits on, which is all it knows: the other rank when there are
 * two, else any of them. */
static void lost_rank(char *buf, size_t len)
{
    known_cause(buf, len);
    if (buf[0])
        return;
    if (g.world == 2)
        snprintf(buf, len, "waiting on rank %d", 1 - g.me);
    else
        snprintf(buf, len, "waiting on a rank that has not reached it");
}

/* The instruction in progress, in words, into buf. */
static void what_instr(char *buf, size_t len)
{
    uint32_t i = atomic_load_explicit(&g.index, memory_order_relaxed);
    int op = atomic_load_explicit(&g.op, memory_order_relaxed);
    int s = atomic_load_explicit(&g.stage, memory_order_relaxed);
    int b = atomic_load_explicit(&g.mb, memory_order_relaxed);
    int peer = atomic_load_explicit(&g.peer, memory_order_relaxed);
    char where[64] = "", lost[200];
    lost_rank(lost, sizeof lost);
    if (i == UINT32_MAX) { /* between the barrier's end and the first instruction */
        snprintf(buf, len, "before its first instruction; %s", lost);
        return;
    }
    if (b >= 0)
        snprintf(where, sizeof where, ", stage %d mb %d", s, b);
    else if (s >= 0)
        snprintf(where, sizeof where, ", stage %d", s);
    const pp_op_info *info = pp_op(op);
    int kind = info ? (int)info->kind : -1;
    char known[200];
    known_cause(known, sizeof known);
    if ((kind == PP_KIND_SEND || kind == PP_KIND_RECV) && peer >= 0 && known[0])
        snprintf(buf, len, "instruction %u, %s %s rank %d%s; %s", i, pp_op_name(op),
                 kind == PP_KIND_RECV ? "from" : "to", peer, where, known);
    else if (kind == PP_KIND_SEND || kind == PP_KIND_RECV)
        snprintf(buf, len, "instruction %u, %s %s rank %d%s; waiting on rank %d", i, pp_op_name(op),
                 kind == PP_KIND_RECV ? "from" : "to", peer, where, peer);
    else if (kind == PP_KIND_COLLECTIVE && known[0])
        snprintf(buf, len, "instruction %u, %s%s; %s", i, pp_op_name(op), where, known);
    else if (kind == PP_KIND_COLLECTIVE)
        snprintf(buf, len, "instruction %u, %s%s; waiting on a rank of its group", i,
                 pp_op_name(op), where);
    else if (!atomic_load_explicit(&g.in_wait, memory_order_relaxed) && !known[0])
        snprintf(buf, len,
                 "instruction %u, %s%s: computing, no wait on any rank: this rank is stalled", i,
                 pp_op_name(op), where);
    else
        snprintf(buf, len, "instruction %u, %s%s: waiting for a transfer on its slots; %s",
                 i, pp_op_name(op), where,
                 known[0]       ? known
                 : g.world == 2 ? lost
                                : "waiting on a peer");
}

/* The line for a phase past --timeout. */
static void timeout_line(char *line, size_t len, double waited)
{
    int ph = atomic_load_explicit(&g.phase, memory_order_relaxed);
    int step = atomic_load_explicit(&g.step, memory_order_relaxed) + 1;
    char what[480], lost[200], when[32];
    lost_rank(lost, sizeof lost);
    snprintf(when, sizeof when, "step %d", step);
    switch ((pp_phase)ph) {
    case PP_AT_STARTUP:
        snprintf(when, sizeof when, "start-up");
        snprintf(what, sizeof what,
                 "exchanging plans, communicators and the first weights with the other ranks; %s",
                 lost);
        break;
    case PP_AT_LOAD:
        snprintf(when, sizeof when, "start-up");
        snprintf(what, sizeof what, "reading this rank's plan and data");
        break;
    case PP_AT_BARRIER:
        snprintf(what, sizeof what, "the barrier that starts the step; %s", lost);
        break;
    case PP_AT_STEP:
        what_instr(what, sizeof what);
        break;
    case PP_AT_STEP_END:
        snprintf(what, sizeof what,
                 "the end of the step: completing its sends, agreeing on its loss; %s", lost);
        break;
    case PP_AT_CHECKPOINT:
        snprintf(what, sizeof what,
                 "writing the checkpoint of this step or agreeing on it with the other ranks; "
                 "a slow disk, or %s",
                 lost);
        break;
    case PP_AT_RESUME:
        snprintf(when, sizeof when, "start-up");
        snprintf(what, sizeof what,
                 "reading --resume's checkpoint or agreeing on it with the other ranks; a slow "
                 "disk, or %s",
                 lost);
        break;
    case PP_AT_FINALIZE:
        snprintf(when, sizeof when, "after the last step");
        snprintf(what, sizeof what,
                 "in MPI_Finalize: this rank's steps and --save are done, Open MPI's shut-down "
                 "did not return; %s",
                 lost);
        break;
    case PP_AT_FINISH:
    default:
        snprintf(when, sizeof when, "after the last step");
        snprintf(what, sizeof what, "--profile's probe, --save or freeing the backend; %s", lost);
        break;
    }
    snprintf(line, len, "ppvm: rank %d: %s: not finished after %g s, see --timeout (%s)\n", g.me,
             when, waited, what);
}

static void die(const char *line, int status)
{
    ssize_t w = write(2, line, strlen(line));
    (void)w;
    _exit(status);
}

/* The watchdog's heartbeat work, each time it wakes: send every
 * HEARTBEAT_NS, note every datagram received. */
static void heartbeat(long long now)
{
    if (!atomic_load(&g.ready))
        return;
    if (now - g.sent >= HEARTBEAT_NS) {
        hb_msg m = {g.token, g.me, me_waiting(), me_progress()};
        for (int r = 0; r < g.world; r++) {
            if (r == g.me)
                continue;
            struct sockaddr_in to = {.sin_family = AF_INET,
                                     .sin_port = g.peers[r].port,
                                     .sin_addr.s_addr = g.peers[r].addr};
            ssize_t w = sendto(g.fd, &m, sizeof m, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof to);
            (void)w; /* a lost datagram is a missed beat, no more */
        }
        g.sent = now;
    }
    hb_msg m;
    long long since = atomic_load_explicit(&g.since, memory_order_relaxed);
    while (recv(g.fd, &m, sizeof m, MSG_DONTWAIT) == (ssize_t)sizeof m)
        if (m.token == g.token && m.rank >= 0 && m.rank < g.world) {
            int r = m.rank;
            long long quiet = now - g.heard[r];
            if (g.longest_end[r] < since || quiet > g.longest[r])
                g.longest[r] = quiet, g.longest_end[r] = now;
            g.heard[r] = now;
            if (m.progress != g.progress[r])
                g.progress[r] = m.progress, g.moved[r] = now;
            g.waiting[r] = m.waiting;
        }
}

/* Whether a rank has missed a beat or two but not yet three: then a
 * watchdog about to time out waits the moment it takes to know whether
 * that rank fell silent (stopped just now) before it blames anyone. */
static int silence_unclear(long long now)
{
    for (int r = 0; atomic_load(&g.ready) && r < g.world; r++)
        if (r != g.me && now - g.heard[r] > HEARTBEAT_NS + HEARTBEAT_NS / 5 &&
            now - g.heard[r] <= SILENT_NS)
            return 1;
    return 0;
}

static void *watch(void *arg)
{
    (void)arg;
    const struct timespec nap = {0, 50 * 1000 * 1000};
    long long signalled_at = 0, last = now_ns();
    char line[800];
    for (;;) {
        nanosleep(&nap, NULL);
        long long now = now_ns(), gap = now - last - 50 * 1000 * 1000LL;
        last = now;
        /* A nap that took over a second: this process itself was stopped
         * (SIGSTOP, a suspended machine). That time is not a peer's fault:
         * it does not count, or a rank stopped and then continued (as
         * mpirun does before it ends a job) would blame a healthy peer. */
        if (gap > 1000 * 1000 * 1000LL) {
            atomic_fetch_add_explicit(&g.since, gap, memory_order_relaxed);
            if (signalled_at)
                signalled_at += gap;
            /* (heard[] needs no such care: the datagrams that live ranks
             * sent meanwhile wait in the socket, read at once below) */
        }
        heartbeat(now);
        int sig = atomic_load(&stop_signal);
        if (sig && !signalled_at)
            signalled_at = now;
        if (sig && (now - signalled_at) / 1e9 > g.grace) {
            snprintf(line, sizeof line,
                     "ppvm: rank %d: %s: the step did not end within --grace %g s; exiting at "
                     "once with status %d\n",
                     g.me, pp_guard_signal_name(sig), g.grace, 128 + sig);
            die(line, 128 + sig);
        }
        double waited = (now - atomic_load_explicit(&g.since, memory_order_relaxed)) / 1e9;
        if (waited > g.timeout && !(silence_unclear(now) && waited < g.timeout + SILENT_NS / 1e9)) {
            timeout_line(line, sizeof line, g.timeout);
            die(line, 1);
        }
    }
    return NULL;
}

int pp_guard_start(int me, int world, double timeout, double grace)
{
    g.me = me;
    g.world = world;
    g.timeout = timeout;
    g.grace = grace;
    snprintf(g.second, sizeof g.second,
             "ppvm: rank %d: a second stop signal: exiting at once, without --save or a "
             "checkpoint\n",
             me);
    pp_guard_phase(PP_AT_STARTUP, 0);
    pp_guard_signals(); /* (again: MPI_Init may have set its own) */
    pthread_t t;
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (!rc)
        rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (!rc) {
        /* the thread must not take the signals the main thread handles:
         * block them while it is created, so it inherits the mask */
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGINT);
        sigaddset(&block, SIGUSR1);
        sigaddset(&block, SIGUSR2);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        rc = pthread_create(&t, &attr, watch, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc) {
        fprintf(stderr, "ppvm: rank %d: cannot start the watchdog thread: %s\n", me, strerror(rc));
        return -1;
    }
    return 0;
}

/* This host's IPv4 address as others reach it (its name's first address;
 * 127.0.0.1 when it has none). */
static uint32_t own_address(void)
{
    char host[256];
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    uint32_t addr = htonl(INADDR_LOOPBACK);
    if (!gethostname(host, sizeof host) && !getaddrinfo(host, NULL, &hints, &res) && res)
        addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    if (res)
        freeaddrinfo(res);
    return addr;
}

int pp_guard_heartbeats(void)
{
    hb_addr mine = {0, 0};
    int ok = g.world <= HEARTBEAT_MAX_WORLD, all_ok;
    int fd = ok ? socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0) : -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t salen = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) ||
        getsockname(fd, (struct sockaddr *)&sa, &salen))
        ok = 0;
    else
        mine = (hb_addr){own_address(), sa.sin_port};
    hb_addr *peers = malloc((size_t)g.world * sizeof *peers);
    long long *heard = malloc((size_t)g.world * sizeof *heard);
    long long *longest = calloc((size_t)g.world, sizeof *longest);
    long long *longest_end = calloc((size_t)g.world, sizeof *longest_end);
    uint64_t *progress = calloc((size_t)g.world, sizeof *progress);
    long long *moved = calloc((size_t)g.world, sizeof *moved);
    int *waiting = calloc((size_t)g.world, sizeof *waiting);
    ok = ok && peers && heard && longest && longest_end && progress && moved && waiting;
    /* every rank takes part in the same calls; heartbeats only when all can */
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (fd >= 0)
            close(fd);
        free(peers);
        free(heard);
        free(longest);
        free(longest_end);
        free(progress);
        free(moved);
        free(waiting);
        return -1;
    }
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, peers, sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    uint64_t token = ((uint64_t)getpid() << 32) ^ (uint64_t)now_ns();
    MPI_Bcast(&token, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    long long now = now_ns();
    for (int r = 0; r < g.world; r++)
        heard[r] = moved[r] = now, waiting[r] = 1; /* nobody is called stalled before it beats */
    g.fd = fd;
    g.token = token;
    g.peers = peers;
    g.heard = heard;
    g.longest = longest;
    g.longest_end = longest_end;
    g.progress = progress;
    g.moved = moved;
    g.waiting = waiting;
    g.sent = 0;
    atomic_store(&g.ready, 1); /* (seq_cst: the thread sees the fields above) */
    return 0;
}
