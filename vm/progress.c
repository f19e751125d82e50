/* progress.c - the cpu backend's communication thread (progress.h): one
 * thread per rank that drives Open MPI's progress with MPI_Testsome over
 * the requests handed to it while the main thread computes, and waits
 * that sleep.
 *
 * Why a sleeping poll and not a blocking MPI call: Open MPI 4.1's blocking
 * waits are themselves a polling loop (opal_progress) that holds a core,
 * and its shared-memory transport has no descriptor to sleep on. So the
 * thread polls, but slowly: after a try that completed nothing it sleeps
 * an interval that doubles from POLL_MIN_NS to POLL_MAX_NS; a new request
 * or a completion starts again at the minimum; with nothing in flight it
 * sleeps until a request arrives. While the main thread waits, the waiter
 * polls for itself (one hand-off between threads less on the critical
 * path): back to back for at most SPIN_NS, then with sleeps of POLL_MIN_NS
 * doubling to POLL_WAIT_NS (a long wait: up to a 16th of the time waited
 * so far, at most POLL_LONG_NS); the thread sleeps meanwhile. One thread tests
 * at a time (`polling`): MPI forbids two testing one request.
 *
 * Only where ranks share cores (more ranks on the node than cores): there a
 * rank spinning in MPI_Wait takes the core a working rank needs. Where each
 * rank has a core of its own, waking from a sleep costs more than the
 * spin: a sleep ends 50-100 us late, the thread's polls preempt the rank's
 * own compute, and a pipeline of short jobs waits at every transfer.
 * Measured on the 2-core machine, 2 ranks, median step: GPipe S=2 B=8 1.4-
 * 1.75 ms in MPI_Wait against 2.2-2.9 ms with the thread; 1F1B 1.4-2.0
 * against 2.0-3.3; FSDP S=2 B=2 0.5-0.8 against 1.0-1.3 (transfers then
 * progress inside MPI calls only; the shared-memory transport copies a
 * message once both sides are in MPI). */
#include "progress.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "check.h"

#define POLL_MIN_NS 5000LL     /* the first sleep after a try that completed nothing */
#define POLL_WAIT_NS 50000LL   /* the longest while the main thread waits... */
#define POLL_LONG_NS 2000000LL /* ...unless it has waited 16 times this long */
#define POLL_MAX_NS 200000LL   /* the longest while it computes */
#define SPIN_NS 20000LL        /* a waiter tries without sleeping this long first */

enum { FREE, ACTIVE, DONE };

struct pp_progress {
    int threaded, cap;
    MPI_Request *req; /* [cap] the poller's alone once ACTIVE */
    int *state;       /* [cap] FREE, ACTIVE, DONE; under mu */
    int *free_list, nfree;
    int nactive, waiting, polling, kick, stop;
    /* the poller's copies for MPI_Testsome */
    MPI_Request *try_req;
    int *try_idx, *try_done;
    pthread_mutex_t mu;
    pthread_cond_t work; /* to the thread: a request arrived, a wait ended, or stop */
    pthread_cond_t done; /* to a waiter: some request completed, or the poller is free */
    pthread_t th;
    int started;
};

static int threaded_run = -1;
static pp_progress *process_thread; /* the one with a thread, for pp_progress_allreduce */

/* Whether this node has more ranks than the cores this process may run
 * on: the launcher's count of the node's ranks (Open MPI's, else MPICH's);
 * shared when the count is unknown, the choice that holds no core. */
static int cores_shared(void)
{
    const char *here = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!here)
        here = getenv("MPI_LOCALNRANKS");
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return !here || atoi(here) < 1 || atoi(here) > cores;
}

int pp_progress_threaded(void)
{
    if (threaded_run < 0) {
        int provided = MPI_THREAD_SINGLE;
        MPI_Query_thread(&provided);
        const char *env = getenv("PP_COMM_THREAD");
        int want = env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0) ? env[0] == '1'
                                                                           : cores_shared();
        threaded_run = provided >= MPI_THREAD_MULTIPLE && want;
    }
    return threaded_run;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void deadline_in(struct timespec *ts, long long ns)
{
    long long t = now_ns() + ns;
    ts->tv_sec = t / 1000000000LL;
    ts->tv_nsec = t % 1000000000LL;
}

/* One MPI_Testsome over every request in flight, by whichever thread holds
 * the poller's turn (`polling`, taken under mu; only one thread may test a
 * request). Called and returns with mu held; the number completed. */
static int try_once(pp_progress *pg)
{
    int n = 0;
    for (int i = 0; i < pg->cap; i++)
        if (pg->state[i] == ACTIVE) {
            pg->try_req[n] = pg->req[i];
            pg->try_idx[n++] = i;
        }
    if (!n)
        return 0;
    pg->polling = 1;
    pg->kick = 0;
    pthread_mutex_unlock(&pg->mu);
    int out = 0;
    mpiCheck(MPI_Testsome(n, pg->try_req, &out, pg->try_done, MPI_STATUSES_IGNORE));
    pthread_mutex_lock(&pg->mu);
    pg->polling = 0;
    if (out == MPI_UNDEFINED)
        out = 0;
    for (int d = 0; d < out; d++) {
        int i = pg->try_idx[pg->try_done[d]];
        pg->req[i] = MPI_REQUEST_NULL;
        pg->state[i] = DONE;
        pg->nactive--;
    }
    pthread_cond_broadcast(&pg->done); /* what completed, and the turn is free */
    return out;
}

/* The thread: polls while the main thread computes; while it waits, the
 * waiter polls itself (no hand-off between threads on the critical path)
 * and the thread sleeps. */
static void *progress_main(void *arg)
{
    pp_progress *pg = arg;
    long long interval = POLL_MIN_NS;
    /* the kernel's default slack (50 us) would swamp the short intervals */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    pthread_mutex_lock(&pg->mu);
    while (!pg->stop) {
        if (!pg->nactive || pg->waiting) {
            pthread_cond_wait(&pg->work, &pg->mu);
            interval = POLL_MIN_NS;
            continue;
        }
        if (pg->polling || try_once(pg) > 0 || pg->kick) {
            interval = POLL_MIN_NS;
            continue;
        }
        struct timespec ts;
        deadline_in(&ts, interval);
        pthread_cond_timedwait(&pg->work, &pg->mu, &ts);
        interval =
            pg->kick ? POLL_MIN_NS : (interval * 2 > POLL_MAX_NS ? POLL_MAX_NS : interval * 2);
    }
    pthread_mutex_unlock(&pg->mu);
    return NULL;
}

pp_progress *pp_progress_new(int capacity, int threaded)
{
    pp_progress *pg = calloc(1, sizeof *pg);
    if (!pg)
        return NULL;
    pg->threaded = threaded;
    pg->cap = capacity > 0 ? capacity : 1;
    pg->req = malloc(pg->cap * sizeof *pg->req);
    pg->state = calloc(pg->cap, sizeof *pg->state);
    pg->free_list = malloc(pg->cap * sizeof *pg->free_list);
    pg->try_req = malloc(pg->cap * sizeof *pg->try_req);
    pg->try_idx = malloc(pg->cap * sizeof *pg->try_idx);
    pg->try_done = malloc(pg->cap * sizeof *pg->try_done);
    if (!pg->req || !pg->state || !pg->free_list || !pg->try_req || !pg->try_idx || !pg->try_done) {
        pp_progress_free(pg);
        return NULL;
    }
    for (int i = 0; i < pg->cap; i++) {
        pg->req[i] = MPI_REQUEST_NULL;
        pg->free_list[pg->nfree++] = pg->cap - 1 - i;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&pg->mu, NULL);
    pthread_cond_init(&pg->work, &ca);
    pthread_cond_init(&pg->done, &ca);
    pthread_condattr_destroy(&ca);
    if (threaded) {
        /* The caller is the waiter (pp_progress_wait): its sleeps of 5 us
         * doubling to 50 us took the kernel's default slack of 50 us
         * more, so a message landing just after the 20 us spin was seen
         * 55-120 us late. --profile's 8-byte trips measured 9.7 us when
         * they landed within the spin and 123 us when not (test-hosts),
         * and a step's waits paid that delay once per wait: its timer
         * slack is the thread's (1 us). */
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        if (pthread_create(&pg->th, NULL, progress_main, pg)) {
            pp_progress_free(pg);
            return NULL;
        }
        pg->started = 1;
        process_thread = pg;
    }
    return pg;
}

void pp_progress_free(pp_progress *pg)
{
    if (!pg)
        return;
    if (process_thread == pg)
        process_thread = NULL;
    if (pg->started) {
        pthread_mutex_lock(&pg->mu);
        pg->stop = 1;
        pthread_cond_signal(&pg->work);
        pthread_mutex_unlock(&pg->mu);
        pthread_join(pg->th, NULL);
    }
    if (pg->state) {
        pthread_mutex_destroy(&pg->mu);
        pthread_cond_destroy(&pg->work);
        pthread_cond_destroy(&pg->done);
    }
    free(pg->req);
    free(pg->state);
    free(pg->free_list);
    free(pg->try_req);
    free(pg->try_idx);
    free(pg->try_done);
    free(pg);
}

int pp_progress_add(pp_progress *pg, MPI_Request req)
{
    pthread_mutex_lock(&pg->mu);
    int t = pg->nfree ? pg->free_list[--pg->nfree] : -1;
    if (t >= 0) {
        pg->req[t] = req;
        pg->state[t] = ACTIVE;
        if (pg->threaded) {
            pg->nactive++;
            pg->kick = 1;
            pthread_cond_signal(&pg->work);
        }
    }
    pthread_mutex_unlock(&pg->mu);
    return t;
}

int pp_progress_done(pp_progress *pg, int t)
{
    if (!pg->threaded) {
        int flag = 0;
        if (pg->state[t] == ACTIVE) {
            mpiCheck(MPI_Test(&pg->req[t], &flag, MPI_STATUS_IGNORE));
            if (flag)
                pg->state[t] = DONE;
        }
        return pg->state[t] == DONE;
    }
    pthread_mutex_lock(&pg->mu);
    int done = pg->state[t] == DONE;
    pthread_mutex_unlock(&pg->mu);
    return done;
}

/* The waiter polls for itself: tries back to back for at most SPIN_NS (a
 * message about to land costs no sleep), then sleeps between tries on the
 * done condition, 5 us doubling to POLL_WAIT_NS (or more in a long wait),
 * woken early when the thread's try in progress completes something. */
void pp_progress_wait(pp_progress *pg, int t)
{
    if (!pg->threaded) { /* no thread: the caller's own MPI_Wait */
        if (pg->state[t] == ACTIVE)
            mpiCheck(MPI_Wait(&pg->req[t], MPI_STATUS_IGNORE));
        pthread_mutex_lock(&pg->mu);
    } else {
        pthread_mutex_lock(&pg->mu);
        pg->waiting++;
        long long started = now_ns(), spin_end = started + SPIN_NS, interval = POLL_MIN_NS;
        while (pg->state[t] != DONE) {
            if (!pg->polling && try_once(pg) > 0) {
                interval = POLL_MIN_NS;
                continue;
            }
            if (pg->state[t] == DONE)
                break;
            if (!pg->polling && now_ns() < spin_end)
                continue;
            struct timespec ts;
            deadline_in(&ts, interval);
            pthread_cond_timedwait(&pg->done, &pg->mu, &ts);
            /* late by at most a 16th of the wait: 50 us polls held a
             * stopped peer's waiter at 20% of a core, 2 ms ones at 1% */
            long long cap = (now_ns() - started) / 16;
            cap = cap < POLL_WAIT_NS ? POLL_WAIT_NS : cap > POLL_LONG_NS ? POLL_LONG_NS : cap;
            interval = interval * 2 > cap ? cap : interval * 2;
        }
        if (--pg->waiting == 0 && pg->nactive)
            pthread_cond_signal(&pg->work); /* the thread polls again */
    }
    pg->state[t] = FREE;
    pg->free_list[pg->nfree++] = t;
    pthread_mutex_unlock(&pg->mu);
}

void pp_progress_complete(MPI_Request *r)
{
    int t = process_thread ? pp_progress_add(process_thread, *r) : -1;
    if (t < 0) /* no thread (or, which a step never leaves, no room): here */
        mpiCheck(MPI_Wait(r, MPI_STATUS_IGNORE));
    else
        pp_progress_wait(process_thread, t);
    *r = MPI_REQUEST_NULL;
}

void pp_progress_allreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op,
                           MPI_Comm comm)
{
    if (!process_thread) {
        mpiCheck(MPI_Allreduce(send, recv, count, type, op, comm));
        return;
    }
    MPI_Request r;
    mpiCheck(MPI_Iallreduce(send, recv, count, type, op, comm, &r));
    pp_progress_complete(&r);
}
