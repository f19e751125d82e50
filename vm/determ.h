/* determ.h - ppvm --deterministic: weight gradients summed in one fixed
 * order, the reference's, whatever the schedule (vm/README.md,
 * "Deterministic mode").
 *
 * The order. Every job W(s,b) (a Backward, or a split backward's
 * BackwardWeight) computes microbatch b's weight gradient g_b of stage s on
 * its own, into a zeroed buffer; the stage's gradient is then
 *     g = (((g_0 + g_1) + g_2) + ... ) + g_{B-1}
 * (g = g_0 exactly, then one float add per microbatch, in microbatch order),
 * computed by pp_determ_add on the owner. `ppvm --reference --deterministic`
 * sums the same g_b in the same order with the same function, and g_b is the
 * same bits wherever it is computed (same weights, same activations, same
 * kernels on a zeroed buffer), so every schedule ends each step with the
 * reference's gradients, hence its weights, bit for bit.
 *
 * Without it a rank accumulates its microbatches' gradients through the
 * GEMMs (beta = 1), a non-owner sends that partial sum to the owner, who
 * adds it, and replicas all-reduce partial sums: other orders, other
 * rounding.
 *
 * On the cuda backend g_b is the same bits wherever a GPU computes it
 * (the same kernels on a zeroed buffer), so every schedule ends with the
 * same weights as every other cuda run of the model, bit for bit; each W
 * job's gradient is copied to host memory and everything below runs there,
 * the ordered sum then copied to the device before the OptimizerStep.
 *
 * The VM core (vm/core.c) keeps, for either backend, per stage, the per-microbatch
 * gradients a rank must hold (pp_determ_create sizes them from the plan):
 *   - an owner that is not a replica and runs all B jobs of the stage itself
 *     in microbatch order (a pipeline): one buffer, added to the gradient
 *     as each job ends;
 *   - an owner that receives weight gradients (RecvWeightGrad): B buffers,
 *     added in order as soon as the next one in order is there;
 *   - any other rank running W jobs of the stage (a replica, a non-owner):
 *     one buffer per such job.
 * SendWeightGrad sends the per-microbatch gradients computed here (after a
 * list of their microbatches) instead of their sum; RecvWeightGrad receives
 * them into the owner's buffers. ReduceGrads becomes B broadcasts in
 * microbatch order inside the replica group, each from the member holding
 * that microbatch's gradient, which every member adds as it arrives: every
 * replica computes the same sum in the same order. These messages travel on
 * a duplicate of MPI_COMM_WORLD, so their tags meet no other message's. */
#ifndef PP_VM_DETERM_H
#define PP_VM_DETERM_H

#include <mpi.h>
#include <stddef.h>

#include "../isa/plan.h"

/* The one ordered sum: g = gb when first (the first microbatch), else
 * g += gb, element by element. */
void pp_determ_add(float *g, const float *gb, size_t n, int first);

typedef struct pp_determ pp_determ;

/* The per-microbatch gradient buffers this rank's plan needs; local. NULL
 * when out of memory. *bytes: what it allocated. */
pp_determ *pp_determ_create(const pp_plan *p, unsigned long long *bytes);
/* Collective: the communicator of its messages. */
void pp_determ_connect(pp_determ *d);
/* Whether stage s's gradients go through here (it has weights). */
int pp_determ_tracks(const pp_determ *d, int s);
/* The zeroed buffer job W(s,b) accumulates its gradient into. */
float *pp_determ_job(pp_determ *d, int s, int b);
/* W(s,b) is done: an owner adds what is next in order into g, its gradient
 * of stage s (NULL on a non-owner). */
void pp_determ_done(pp_determ *d, int s, int b, float *g);
/* SendWeightGrad: the gradients of stage s computed here since the last
 * send, to the owner `peer` (non-blocking; complete at pp_determ_end_step). */
void pp_determ_send(pp_determ *d, int s, int peer);
/* RecvWeightGrad: a non-owner's gradients of stage s; added into g in order. */
void pp_determ_recv(pp_determ *d, int s, int peer, float *g);
/* ReduceGrads: every replica of stage s in `comm` ends with the same g, the
 * ordered sum. */
void pp_determ_reduce(pp_determ *d, int s, MPI_Comm comm, float *g);
/* OptimizerStep: g must hold all B microbatches' sum by now; readies the
 * stage for the next step. Ends every rank (a plan the VM cannot run) if
 * not. */
void pp_determ_finish(pp_determ *d, int s);
/* Whether g holds all B microbatches' sum (the tied embedding's sum reads
 * it before the OptimizerStep); ends every rank, saying `what` came too
 * early, if not. */
void pp_determ_check(pp_determ *d, int s, const char *what);
/* The end of a step: every send complete. */
void pp_determ_end_step(pp_determ *d);
void pp_determ_free(pp_determ *d);

#endif
