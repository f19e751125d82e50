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

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    int me, world;
    double timeout, grace;
    _Atomic int phase, step;
    _Atomic long long since;   /* CLOCK_MONOTONIC ns when the phase's clock started */
    _Atomic uint32_t index;    /* the instruction in progress, PP_AT_STEP */
    _Atomic int op, stage, mb, peer;
    char second[96];           /* the second signal's line, made before any signal */
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

int pp_guard_signal(void)
{
    return atomic_load(&stop_signal);
}

/* Async-signal-safe: the first signal is only noted; a second one ends the
 * process at once with the line made at start-up. */
static void on_signal(int sig)
{
    if (atomic_load(&stop_signal)) {
        ssize_t w = write(2, g.second, strlen(g.second));
        (void)w;
        _exit(128 + sig);
    }
    atomic_store(&stop_signal, sig);
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

/* Who a collective of every rank waits on: the other rank when there are
 * two, else any of them. */
static void lost_rank(char *buf, size_t len)
{
    if (g.world == 2)
        snprintf(buf, len, "rank %d is lost or stalled", 1 - g.me);
    else
        snprintf(buf, len, "a rank that has not reached it is lost or stalled");
}

/* The instruction in progress, in words, into buf. */
static void what_instr(char *buf, size_t len)
{
    uint32_t i = atomic_load_explicit(&g.index, memory_order_relaxed);
    int op = atomic_load_explicit(&g.op, memory_order_relaxed);
    int s = atomic_load_explicit(&g.stage, memory_order_relaxed);
    int b = atomic_load_explicit(&g.mb, memory_order_relaxed);
    int peer = atomic_load_explicit(&g.peer, memory_order_relaxed);
    char where[64] = "", lost[96];
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
    if ((kind == PP_KIND_SEND || kind == PP_KIND_RECV) && peer >= 0)
        snprintf(buf, len, "instruction %u, %s %s rank %d%s; rank %d is lost or stalled", i,
                 pp_op_name(op), kind == PP_KIND_RECV ? "from" : "to", peer, where, peer);
    else if (kind == PP_KIND_COLLECTIVE)
        snprintf(buf, len, "instruction %u, %s%s; a rank of its group is lost or stalled", i,
                 pp_op_name(op), where);
    else
        snprintf(buf, len,
                 "instruction %u, %s%s: computing, or waiting for an earlier send from its slots; "
                 "%s",
                 i, pp_op_name(op), where, g.world == 2 ? lost : "a peer may be lost or stalled");
}

/* The line for a phase past --timeout. */
static void timeout_line(char *line, size_t len, double waited)
{
    int ph = atomic_load_explicit(&g.phase, memory_order_relaxed);
    int step = atomic_load_explicit(&g.step, memory_order_relaxed) + 1;
    char what[320], lost[96], when[32];
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
                 "a slow disk, or %s", lost);
        break;
    case PP_AT_RESUME:
        snprintf(when, sizeof when, "start-up");
        snprintf(what, sizeof what,
                 "reading --resume's checkpoint or agreeing on it with the other ranks; a slow "
                 "disk, or %s", lost);
        break;
    case PP_AT_FINALIZE:
        snprintf(when, sizeof when, "after the last step");
        snprintf(what, sizeof what,
                 "in MPI_Finalize: this rank's steps and --save are done, Open MPI's shut-down "
                 "did not return; %s", lost);
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

static void *watch(void *arg)
{
    (void)arg;
    const struct timespec nap = {0, 50 * 1000 * 1000};
    long long signalled_at = 0, last = now_ns();
    char line[640];
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
        }
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
        if (waited > g.timeout) {
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
    snprintf(g.second, sizeof g.second, "ppvm: rank %d: a second stop signal: exiting at once\n",
             me);
    pp_guard_phase(PP_AT_STARTUP, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
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
