/* progress.h - the cpu backend's communication thread: MPI requests
 * progressed while the rank computes, and waits that sleep.
 *
 * Open MPI moves a large message (rendezvous, shared-memory fragments)
 * only while a thread of the process is inside an MPI call. A rank that
 * posts a send and then computes would hold it back until its next call,
 * and a rank that waits in MPI_Wait spins on a core. With MPI at
 * MPI_THREAD_MULTIPLE, pp_progress runs one thread per rank that owns every
 * request handed to it: it tests them all (MPI_Testsome, which drives Open
 * MPI's progress engine) and, when none completed, sleeps a short,
 * growing interval on a condition variable (5 us to 200 us: what a late
 * completion costs, against a few percent of a core while transfers are in
 * flight; it sleeps untimed when none are). The main thread posts
 * (MPI_Isend, MPI_Irecv, MPI_Iallreduce), hands the request over and later
 * waits for its ticket on a condition variable the thread signals: a rank
 * that waits holds no core.
 *
 * The thread runs where ranks share cores (pp_progress_threaded). Without
 * it (each rank has a core, no MPI_THREAD_MULTIPLE, or PP_COMM_THREAD=0)
 * pp_progress_wait is MPI_Wait in the caller. Library code: no exit. */
#ifndef PP_VM_PROGRESS_H
#define PP_VM_PROGRESS_H

#include <mpi.h>

typedef struct pp_progress pp_progress;

/* Room for `capacity` requests in flight at once; a thread when `threaded`.
 * NULL when out of memory or the thread cannot start. */
pp_progress *pp_progress_new(int capacity, int threaded);

/* Stops the thread; every ticket must have been waited for. NULL is fine. */
void pp_progress_free(pp_progress *pg);

/* Hands a posted request over; its ticket (>= 0) for pp_progress_wait, or
 * -1 when `capacity` requests are already in flight (a caller's bug). */
int pp_progress_add(pp_progress *pg, MPI_Request req);

/* Returns once the ticket's request completed; the ticket is then free. */
void pp_progress_wait(pp_progress *pg, int ticket);

/* Whether the ticket's request has completed (the ticket stays held until
 * pp_progress_wait, which then returns at once). Without the thread, one
 * MPI_Test. */
int pp_progress_done(pp_progress *pg, int ticket);

/* Waits for a posted request as a step's transfers are waited for: through
 * the process's communication thread when one runs, else MPI_Wait. */
void pp_progress_complete(MPI_Request *r);

/* MPI_Allreduce whose wait sleeps: through the process's communication
 * thread when one runs (the cpu backend's, between pp_progress_new and
 * pp_progress_free), else MPI_Allreduce itself. The driver's per-step
 * barrier and agreement use it, so that a rank done with its step early
 * does not spin while the others finish theirs. */
void pp_progress_allreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op,
                           MPI_Comm comm);

/* Whether this run has the thread: MPI_THREAD_MULTIPLE, and the node's
 * ranks outnumber the cores this process may run on (each rank with a core
 * of its own waits faster in MPI_Wait: progress.c says why), or
 * PP_COMM_THREAD=1 (0: never). Decided once, after MPI_Init_thread. */
int pp_progress_threaded(void);

#endif
