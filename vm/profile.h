/* profile.h - ppvm --profile FILE: what this run measured, written as a
 * ppc --costs file (times in seconds), so that ppc's simulation and report
 * describe this machine instead of unit costs.
 *
 *   F, B, W    per stage, the time of its jobs: each rank that ran them
 *              takes the mean of each step's (every step but the first, a
 *              warm-up, when there are two steps or more), then the median
 *              over its steps; the largest over the ranks is written
 *              (profile.c says why); B is the input-gradient half
 *              and W the weight-gradient half when the plan splits the
 *              backward (W is written only then). A plan that splits only
 *              some backwards takes B and W from its split ones, scaled
 *              where a stage has full ones too so that its backwards'
 *              total (a full one charged B + W by ppc) is what it
 *              measured; a stage whose backwards are all full gets half
 *              its full backward's time as each
 *   O          per stage, its OptimizerStep's time, the same way (on every
 *              owner)
 *   latency    half the fastest round trip of an 8-byte message between
 *              ranks 0 and 1 through the run's transport (of 21)
 *   bandwidth  the sustained bytes per second between the same two ranks:
 *              (n - n/2) / (t(n) - t(n/2)), from the fastest of 7 one-way
 *              trips of each size, n twice an activation or the largest
 *              stage's fp32 gradients, whichever is larger, and at least
 *              2 MiB (pp_profile_probe_bytes), so that both sizes are well
 *              past a shaping token bucket's burst
 *   burst      the bytes the link passes at once before its rate applies
 *              (tc tbf's burst): n/2 - bandwidth * (t(n/2) - latency), in
 *              [0, n/2]; about 0 on an unshaped link
 *   allreduce  "tree" or "ring" (cpu backend, 2 ranks or more): how an
 *              in-place all-reduce over every rank moves, as the steps'
 *              data-parallel ones do (profile_shape.c): the median of 5
 *              of n/2 bytes set against what latency, bandwidth and burst
 *              predict for a ring (2 pieces of 1/R from each rank) and
 *              a binomial tree (2 ceil(log2 R) whole ones in turn), the
 *              nearer in ratio
 *   progress   "wait" or "always" (cpu backend): "wait" where every rank is
 *              on one node and they run without the communication thread
 *              (each has a core: progress.h), so a transfer past Open MPI's
 *              shared-memory eager limit moves only while its receiver
 *              waits in an MPI call, which ppc's simulation then takes into
 *              account (compiler/sim.h); "always" with the thread, or
 *              across nodes (profile_shape.c says why)
 *   duplex     "half" or "full" (cpu backend): whether an exchange of n
 *              bytes, ranks 0 and 1 sending at once (median of 5), is
 *              nearer the two directions in turn or at once (TCP over tc
 *              tbf at 200 Mbit/s: in turn, its acknowledgements queued
 *              behind the other direction's data)
 *   allreduce_latency, allreduce_bandwidth, allreduce_ranks
 *              (cpu backend, 2 ranks or more) the data-parallel all-reduce
 *              timed whole, as ReduceGrads makes it (in place over every
 *              rank, through the communication thread): the median of 21
 *              of 8 bytes, and bytes / (the median of n bytes - that) for n
 *              the largest stage's fp32 gradients (pp_profile_reduce_bytes);
 *              allreduce_ranks the ranks it ran over. ppc --costs prices
 *              each data-parallel all-reduce with them (Open MPI's
 *              shared-memory all-reduce moved a third of what latency and
 *              bandwidth give a ring)
 * latency, bandwidth, burst, allreduce, duplex and allreduce_* are left out with a single rank
 * (nothing moves).
 *   tensor_latency, tensor_bandwidth
 *              tensor = T > 1 only (issue 27): rank 0's tensor group's
 *              all-reduce as the plans make it (the backend's TensorReduce
 *              path: MPI_Allreduce on the cpu, ncclAllReduce or the host's
 *              with the mpi transport on cuda): the fastest of 21 of 8
 *              bytes, and bytes / (t(n) - that) for n = one all-reduce's
 *              size (isa/tensor.h's pp_tensor_allreduce_bytes); ppc
 *              --costs prices each tensor all-reduce with them.
 *   wake       (cpu backend, every rank on one node) how much later than
 *              latency + bytes / bandwidth a rank that was already waiting
 *              for an activation or gradient resumes after the job that
 *              made it ends, over a few steps' receives (profile_wake.c:
 *              the mean of all but the slowest 2%; 0 when that is less);
 *              ppc starts such a job that much later (compiler/sim.h)
 *   cores      (cpu backend) the node's online cores where every rank ran
 *              on it and they outnumbered them: ppc lets that many jobs
 *              compute at once
 *   job_overhead
 *              (cpu backend, which times its waits) the interpreter's own
 *              time per job: per rank, the median over steps of its own
 *              step less its jobs, optimizer steps and waits ("host"
 *              below), over its jobs a step (F, B, W, R); the median over
 *              the ranks with jobs. ppc frees a worker that long after each
 *              job (compiler/sim.h)
 *   host_bandwidth
 *              offload's device<->host copies (issue 26), bytes per second
 *              at the size the plan's offloads move (its largest host slot
 *              over every rank; a plan without offload: its largest
 *              stash), on rank 0 alone: bytes over the mean of the fastest
 *              of 21 copies each way (ppc charges each copy bytes /
 *              host_bandwidth, no latency). The cpu backend's copy is a
 *              memcpy between two host buffers, as its Offload and Reload
 *              are; the cuda backend's, cudaMemcpyAsync between device
 *              memory and pinned host memory on the copy stream, timed by
 *              CUDA events (backend.h's host_link).
 *   measured   what the steps took, for comparing with ppc's report (ppc
 *              --costs skips it): over the steps after the warm-up,
 *              {"steps": n, "step": the median step time (the slowest
 *              rank's, as ppvm prints it), "busy": [per rank, the median
 *              time in jobs and optimizer steps], "idle": [per rank, the
 *              median rest of the step: waits in receives, sends,
 *              collectives and fetches, and the interpreter's own work],
 *              on the cpu backend "wait": [per rank, the median time
 *              blocked in those waits] and "host": [per rank, the median
 *              rest of its own step: dispatch, posting transfers, copies],
 *              "bubble": the median over steps of the ranks' summed idle
 *              over ranks x step}
 * Times are the backend's: wall clock around each job or optimizer step on
 * the cpu, CUDA events around its kernels on the compute stream on the cuda
 * backend. */
#ifndef PP_VM_PROFILE_H
#define PP_VM_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../isa/plan.h"

/* PP_PROF_G: RecvWeightGrad's add of a returned gradient into the owner's,
 * after its wait ("G": ppc prices the returns with it, report_returns.c).
 * PP_PROF_BFULL: a full Backward, kept apart from BackwardInput's B so that
 * a plan that splits only some backwards (`split backward when`) still
 * writes B and W as the halves (see pp_profile_finish). */
enum { PP_PROF_F, PP_PROF_B, PP_PROF_W, PP_PROF_O, PP_PROF_G, PP_PROF_BFULL, PP_PROF_DIRS };

typedef struct pp_profile pp_profile;

/* Collective: every rank calls it with the same path. Rank 0 opens `path`
 * for writing now, so a path it cannot write ends the run before training
 * (every rank returns NULL, rank 0 saying why). */
pp_profile *pp_profile_open(const char *path, const pp_plan *p, int steps, int me);

/* What pp_profile_add takes for a job, an OptimizerStep or a
 * RecvWeightGrad (PP_PROF_*), or -1 for any other instruction. */
int pp_profile_dir(const pp_instr *in);

/* One job of stage s took `seconds` (ignored during the warm-up step). */
void pp_profile_add(pp_profile *pr, int step, int dir, int s, double seconds);

/* The step (from 0) took `seconds` on the slowest rank (every rank passes
 * the same agreed value), for "measured". */
void pp_profile_step(pp_profile *pr, int step, double seconds, double own);
/* The step's time
 * this rank spent blocked in waits for transfers and collectives, where
 * the backend times them (the cpu's); without the call, "measured" has no
 * "wait" and "host". */
void pp_profile_waited(pp_profile *pr, int step, double seconds);

/* "wake" (profile_wake.c, cpu backend): the log of one rank's sends and
 * receive waits over a few steps after the warm-up. Times are
 * pp_vmbench_now's (CLOCK_MONOTONIC, one clock on a node). */
typedef struct pp_wake_log pp_wake_log;
/* NULL when out of memory (then no "wake" is written). */
pp_wake_log *pp_wake_open(const pp_plan *p, int steps, int me);
void pp_wake_free(pp_wake_log *w); /* NULL is fine */
/* Instruction instr's (a send's) data was ready at now_ns in step `step`. */
void pp_wake_send(pp_wake_log *w, int step, uint32_t instr, uint64_t now_ns);
/* Instruction instr's receive (`bytes`) was waited for from start_ns to end_ns. */
void pp_wake_recv(pp_wake_log *w, int step, uint32_t instr, size_t bytes, uint64_t start_ns,
                  uint64_t end_ns);
/* Collective: on rank 0 the mean extra delay (seconds) of a waiting
 * receiver beyond latency + bytes / bandwidth, or -1 where nothing was
 * matched, the ranks span several nodes, or a rank's log is NULL. */
double pp_wake_finish(pp_wake_log *w, double latency, double bandwidth);
/* What pp_profile_finish writes as "wake" (rank 0's value counts); not
 * called: nothing is written. */
void pp_profile_wake(pp_profile *pr, double seconds);

/* The link probe's largest size: twice an activation or the largest
 * stage's fp32 gradients (as large as any weight fetch, gradient return or
 * all-reduce), whichever is larger, at least PP_PROBE_MIN_BYTES and at most
 * 256 MiB. */
size_t pp_profile_probe_bytes(const pp_plan *p);
#define PP_PROBE_MIN_BYTES ((size_t)2 << 20) /* past tbf bursts seen (256 KB at 1 Gbit/s) */

/* What the run measures on, for the file's "backend" (the model's words
 * and the ranks per core it finds itself): the backend's name. */
void pp_profile_backend(pp_profile *pr, const char *name);

/* A timed collective of the probes (profile_allreduce.c): one all-reduce
 * of `bytes` over a tensor group or every rank, or one exchange between
 * ranks 0 and 1, returning the seconds it took. */
typedef double (*pp_allreduce_probe)(void *ctx, size_t bytes);
/* ar(ctx, bytes) `warm` times unmeasured, then `reps` times (at most
 * PP_PROBE_REPS): the median of those with `median`, else the fastest. */
#define PP_PROBE_REPS 32
double pp_profile_repeat(pp_allreduce_probe ar, void *ctx, size_t bytes, int warm, int reps,
                         int median);
/* Times ar as the header says (profile_allreduce.c): *latency the time of
 * 8 bytes, *bandwidth bytes over the rest of the time of `bytes`, each the
 * fastest of 21 ("tensor_latency", "tensor_bandwidth") or with `median`
 * the median ("allreduce_latency", "allreduce_bandwidth"). Collective over
 * the group ar reduces over: each member calls it with the same bytes. */
void pp_profile_allreduce_fit(pp_allreduce_probe ar, void *ctx, size_t bytes, int median,
                              double *latency, double *bandwidth);
/* What pp_profile_finish writes as "tensor_latency" and "tensor_bandwidth"
 * (rank 0's values count); not called: neither is written. */
void pp_profile_tensor(pp_profile *pr, double latency, double bandwidth);

/* The data-parallel all-reduce's size: the largest stage's fp32
 * gradients (what a ReduceGrads moves), at least 4 KiB, at most 256 MiB. */
size_t pp_profile_reduce_bytes(const pp_plan *p);
/* The cpu backend's data-parallel all-reduce (profile_shape.c): an
 * in-place all-reduce over MPI_COMM_WORLD through the communication thread
 * (op_reduce's path), fitted with the medians; collective. 0 with one
 * rank; 1 with *latency and *bandwidth set; -1 on every rank when one has
 * no memory for it (said). */
int pp_profile_reduce_link_mpi(size_t bytes, double *latency, double *bandwidth);
/* What pp_profile_finish writes as "allreduce_latency",
 * "allreduce_bandwidth" and "allreduce_ranks" (rank 0's values count); not
 * called: none is written. */
void pp_profile_reduce(pp_profile *pr, double latency, double bandwidth, int ranks);

/* The link's shape (profile_shape.c): flags of */
#define PP_LINK_TREE 1  /* the all-reduce moves as a tree ("allreduce": "tree", else "ring") */
#define PP_LINK_HALF 2  /* the directions share the link ("duplex": "half", else "full") */
#define PP_LINK_WAITS 4 /* transfers move only while the receiver waits ("progress": "wait") */
/* What pp_profile_finish writes as "allreduce" and "duplex" (rank 0's
 * value counts); not called: neither is written. */
void pp_profile_link_shape(pp_profile *pr, int shape);
/* Collective over every rank: 1 (on rank 0) when an all-reduce of `bytes`
 * by ar over R ranks takes nearer a tree's time than a ring's, from the
 * link's latency, bandwidth and burst (rank 0's count); else 0. */
int pp_profile_allreduce_kind(pp_allreduce_probe ar, void *ctx, size_t bytes, int R, double latency,
                              double bandwidth, double burst);
/* The cpu backend's link shape over MPI, collective: PP_LINK_WAITS on one
 * node without the communication thread (progress.h: a message past Open
 * MPI's eager limit then moves only inside the receiver's MPI calls),
 * | PP_LINK_HALF when an
 * exchange of `bytes` between ranks 0 and 1 (both sending at once, through
 * the communication thread) is nearer one direction after the other than
 * both at once (link_fit.h), | PP_LINK_TREE when an in-place all-reduce of
 * bytes / 2 over MPI_COMM_WORLD through the communication thread (the
 * backend's op_reduce) is a tree's; 0 with one rank, -1 on every rank when
 * one has no memory for it (said). */
int pp_profile_link_shape_mpi(size_t bytes, double latency, double bandwidth, double burst);
/* The host link (profile_host.c, issue 26): one copy of `bytes` from a
 * device buffer to a host buffer (to_host 1) or back, returning the
 * seconds it took. */
typedef double (*pp_host_copy_probe)(void *ctx, size_t bytes, int to_host);
/* Collective: the probe's size, as the header's host_bandwidth says (at
 * least 8 bytes, at most 256 MiB); the same on every rank. */
size_t pp_profile_host_bytes(const pp_plan *p);
/* Times copy as the header says ("host_bandwidth"); local. */
void pp_profile_host_link(pp_host_copy_probe copy, void *ctx, size_t bytes, double *bandwidth);
/* The cpu backend's host link (a memcpy between host buffers), measured by
 * rank 0 while the others wait; collective. 1 with *bandwidth set on rank
 * 0, or -1 on every rank when rank 0 has no memory for it (said). */
int pp_profile_host_link_cpu(int me, size_t bytes, double *bandwidth);
/* What pp_profile_finish writes as "host_bandwidth" (rank 0's value
 * counts); not called: it is not written. */
void pp_profile_host(pp_profile *pr, double bandwidth);

/* Collective: gathers every rank's job times and writes the file (rank 0),
 * with the link's latency, bandwidth and burst when `link` (rank 0's values count),
 * and "overlap" when overlap >= 0 (the backend's pp_backend.profile_overlap).
 * Frees pr. 0, or -1 on rank 0 when the file cannot be written, or on every
 * rank when some rank ran out of memory for its samples (the lowest such
 * says so). */
int pp_profile_finish(pp_profile *pr, int link, double latency, double bandwidth, double burst,
                      double overlap);

/* Frees pr without writing the file (local: a run that stopped early);
 * NULL is a no-op. */
void pp_profile_discard(pp_profile *pr);

/* One round trip of `bytes` between ranks 0 and 1 through some transport
 * (rank 0 sends first), in seconds; ctx is the transport's. */
typedef double (*pp_round_trip)(void *ctx, size_t bytes);

/* On ranks 0 and 1: latency (half the fastest round trip of 8 bytes, or
 * what a message of `msg` bytes takes beyond its bytes' cost, if more: the
 * per-message cost at the plan's size), bandwidth and burst (from the
 * fastest one-way times of bytes / 2 and bytes, as the header says; noise
 * from other processes only adds to a trip, and where it hides the bytes'
 * cost the bandwidth is bytes over the whole one-way time and the burst
 * 0). rt must take up to `bytes`; msg 0: no such message. */
void pp_profile_link(pp_round_trip rt, void *ctx, size_t bytes, size_t msg, double *latency,
                     double *bandwidth, double *burst);

/* The link through MPI between ranks 0 and 1, host memory to host memory
 * (the cpu backend's transport); collective, a no-op returning 0 with one
 * rank. Sets *latency, *bandwidth and *burst on rank 0 and returns 1; -1 on
 * every rank when rank 0 or 1 has no memory for the probe (it says so). */
int pp_profile_link_mpi(size_t bytes, size_t msg, double *latency, double *bandwidth,
                        double *burst);

/* The median of n values (sorts v). */
double pp_median(double *v, size_t n);
void pp_sort(double *v, size_t n); /* ascending, in place (pp_median sorts with it) */

#endif
