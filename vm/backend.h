/* backend.h - the one interface between ppvm's driver (vm/driver.c: the step
 * loop, the memory line, --save, --profile, messages) and a backend that
 * runs one rank's instructions: cpu (vm/interp.c: host memory, a BLAS, MPI)
 * or cuda (vm/interp_cuda.c and vm/transport_cuda.c: CUDA streams, cuBLAS,
 * NCCL or MPI). Both are the VM core (vm/core.h: the opcode dispatch and
 * operand decoding, per-stage state, the non-finite check,
 * --skip-nonfinite, --deterministic, --profile's timing, checkpoints) over
 * their own device operations (pp_vm_ops); the core implements the hooks
 * below that need nothing of a device (allocated, exec, weights,
 * stage_get, stage_set, nonfinite, commit).
 *
 * The driver calls, on every rank, in this order:
 *
 *   create     local set-up (every rank calls it; it may start with a
 *              collective that cannot fail, as the cuda backend's node
 *              split); allocates everything a step needs, at the plan's
 *              sizes. NULL with err when it cannot (having freed what it
 *              made); the ranks then agree, and every rank ends with exit
 *              1, the lowest failing rank saying why
 *   connect    collective, after every rank's create succeeded:
 *              communicators, the initial weights
 *   allocated  bytes of weights, gradients, optimizer state, compute
 *              copies, slots and workspace: the memory line
 *   exec       one instruction, per step in plan order; with --profile
 *              (run->prof) it times the jobs and optimizer steps, whose
 *              times end_step adds (pp_profile_add)
 *   end_step   the end of a step: every operation done and every send
 *              complete; returns this rank's summed loss of the step
 *   link       --profile, after the last step: the link between ranks 0
 *              and 1 through this backend's transport (profile.h)
 *   reduce_link --profile, after link: the data-parallel all-reduce timed
 *              whole (profile.h's allreduce_* entries)
 *   tensor_link --profile with tensor = T > 1, after link: the all-reduce
 *              within each tensor group (profile.h's tensor entries)
 *   host_link  --profile, after tensor_link: offload's device<->host copy
 *              (profile.h's host_bandwidth), where the backend has one
 *   weights    --save: stage s's fp32 master weights into host memory
 *   stage_get  a checkpoint (vm/checkpoint.c), between steps: an owned
 *              stage's fp32 weights, optimizer state and compute copy into
 *              host memory
 *   stage_set  --resume, after connect and before the first step: the same
 *              three restored from host memory
 *   destroy    frees everything create and connect made
 *
 * and, where the backend has them (NULL otherwise):
 *
 *   nonfinite  after end_step: the first number of the step that was not
 *              finite on this rank (a microbatch's loss, an input gradient,
 *              a stage's summed weight gradients before its OptimizerStep),
 *              in the order the driver ranks findings (pp_nonfinite).
 *              Without it the driver checks only this rank's summed loss.
 *   step       instead of exec for each instruction: runs the whole step
 *              itself and returns 1 (the cuda backend's CUDA graph replay,
 *              vm/graph_cuda.c), or returns 0 and the driver execs each
 *              instruction; end_step follows either way
 *   commit     after the ranks agreed on the step (--skip-nonfinite): apply
 *              the step's optimizer updates (apply 1), or drop them and
 *              zero the gradients (apply 0), so that a skipped step leaves
 *              weights and optimizer state as they were. A backend with
 *              commit defers its OptimizerSteps to it when
 *              opts->skip_nonfinite is set; without it --skip-nonfinite is
 *              refused.
 *
 * Errors. A backend's calls return what they return; none exits, except
 * that a failed CUDA, cuBLAS, NCCL or MPI call (cudaCheck, cublasCheck,
 * ncclCheck, mpiCheck) or a GPU stall past --timeout ends every rank (that
 * rank's NCCL communicators aborted, then MPI_Abort): inside a step a rank
 * that returned would leave its peers waiting for ever. Beside them, on
 * every backend, the watchdog thread (vm/guard.h) ends a rank whose phase
 * (start-up, a step, ...) runs past --timeout, with _exit(1). */
#ifndef PP_VM_BACKEND_H
#define PP_VM_BACKEND_H

#include <stddef.h>

#include "profile.h"
#include "vm.h"

/* What the driver shares with the backend for the whole run. The driver
 * sets step and t0 before each step; prof is set after connect. */
typedef struct {
    const pp_plan *p;
    const pp_dataset *ds;
    const pp_train_opts *opts;
    int me;           /* this rank */
    int step;         /* the step in progress, from 0 */
    int done;         /* steps trained so far: --resume's step, then each step's end */
    double t0;        /* MPI_Wtime() at its start: the cuda watchdog's origin */
    pp_profile *prof; /* --profile, or NULL */
    /* --no-compute (vm/vmbench.h), and --profile on the cpu backend: ns
     * the backend spent blocked in calls that wait for a peer or the device
     * since the driver last took it (each instruction; each step) */
    unsigned long long waited_ns;
} pp_run;

/* A number that was not finite, as a backend found it inside a step. */
typedef enum { PP_NF_NONE, PP_NF_LOSS, PP_NF_INPUT_GRAD, PP_NF_WEIGHT_GRAD } pp_nf_kind;
typedef struct {
    pp_nf_kind kind; /* PP_NF_NONE: every number checked was finite */
    int stage, mb;   /* mb -1 for weight gradients (every microbatch summed) */
    double value;    /* the loss, or the first gradient that was not finite */
} pp_nonfinite;

/* The order findings are reported in, when a rank or the ranks together
 * found several (smaller first): a microbatch's loss before any gradient (a
 * NaN made anywhere in a forward reaches its microbatch's loss first), the
 * input gradients from the last stage down (the order backward runs in),
 * then the weight gradients, the lower microbatch first. */
static inline double pp_nonfinite_order(const pp_nonfinite *f, int S, int B)
{
    double stage = f->kind == PP_NF_LOSS || f->stage < 0 ? 0 : S - 1 - f->stage;
    return (((double)f->kind - 1) * S + stage) * (B + 1.0) + (f->mb + 1);
}

struct pp_backend {
    const char *name; /* "cpu", "cuda": ppvm's start-up line */
    /* What --profile writes as "overlap" (ppc's overlapped pair: max(tF, tB)
     * + overlap * min(tF, tB)): 1 for a backend that runs a pair's jobs in
     * turn (cpu), or < 0 where the pair's overlap is not measured (cuda:
     * the schedule's `cost overlap` stands). */
    double profile_overlap;
    void *(*create)(pp_run *run, char *err, size_t errlen);
    void (*connect)(void *be);
    unsigned long long (*allocated)(void *be);
    /* offload's host slots, bytes (a second memory line when any rank has
     * some); NULL: none */
    unsigned long long (*host_allocated)(void *be);
    void (*exec)(void *be, const pp_instr *in);
    double (*end_step)(void *be);
    /* 0 with one rank; else 1 with *latency, *bandwidth and *burst set on
     * rank 0 (pp_profile_link; msg: the plan's activation message), or -1
     * on every rank when it could not measure (said) */
    int (*link)(void *be, size_t bytes, size_t msg, double *latency, double *bandwidth,
                double *burst);
    /* after link, when it returned 1 (NULL: not measured): on rank 0
     * PP_LINK_TREE when the data-parallel all-reduce moves as a tree (else
     * a ring) | PP_LINK_HALF when the two directions of the link share it
     * | PP_LINK_WAITS when transfers move only while their receiver waits
     * (profile.h's "allreduce", "duplex" and "progress"), -1 on every rank
     * when it could not (said) */
    int (*link_shape)(void *be, size_t bytes, double latency, double bandwidth, double burst);
    /* after link_shape (NULL: not measured): 1 with *latency and *bandwidth
     * set on rank 0 for the data-parallel all-reduce of bytes over every
     * rank as ReduceGrads makes it (profile.h's "allreduce_latency" and
     * "allreduce_bandwidth"), or -1 on every rank (said). The cuda backend
     * has none yet: ppc prices its all-reduces from the link. */
    int (*reduce_link)(void *be, size_t bytes, double *latency, double *bandwidth);
    /* 0 with tensor = 1; else 1 with *latency and *bandwidth set on rank 0
     * (its tensor group's all-reduce of bytes), or -1 on every rank (said) */
    int (*tensor_link)(void *be, size_t bytes, double *latency, double *bandwidth);
    /* collective: 1 with *bandwidth set on rank 0 (its copies of bytes
     * between device memory and the host pool, profile.h), or -1 on every
     * rank (said); NULL: not measured */
    int (*host_link)(void *be, size_t bytes, double *bandwidth);
    /* out: pp_stage_param_count floats of an owned stage s */
    void (*weights)(void *be, int s, float *out);
    /* An owned stage s's whole state, between steps: params, the
     * pp_stage_param_count fp32 weights; state, the optimizer's
     * pp_optimizer_state_floats * count floats (NULL when that is 0);
     * compute, the pp_stage_compute_bytes of the compute copy with a
     * precision other than fp32 (else NULL: the copy is params). Gradients
     * are zero between steps and are not part of it. stage_get copies them
     * out; stage_set copies them in, so that the next step runs as it would
     * have in the run that stage_get was called in. */
    void (*stage_get)(void *be, int s, float *params, float *state, void *compute);
    void (*stage_set)(void *be, int s, const float *params, const float *state,
                      const void *compute);
    void (*destroy)(void *be);
    void (*nonfinite)(void *be, pp_nonfinite *first); /* or NULL */
    void (*commit)(void *be, int apply);              /* or NULL */
    int (*step)(void *be);                            /* or NULL */
};

#endif
