/* backend.h - the one interface between ppvm's driver (vm/driver.c: the step
 * loop, the memory line, --save, --profile, messages) and a backend that
 * runs one rank's instructions: cpu (vm/interp.c: host memory, a BLAS, MPI)
 * or cuda (vm/interp_cuda.c and vm/transport_cuda.c: CUDA streams, cuBLAS,
 * NCCL or MPI).
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
 *              (run->prof) it times the jobs and optimizer steps and adds
 *              their times (pp_profile_add), now or at end_step
 *   end_step   the end of a step: every operation done and every send
 *              complete; returns this rank's summed loss of the step
 *   link       --profile, after the last step: the link between ranks 0
 *              and 1 through this backend's transport (profile.h)
 *   weights    --save: stage s's fp32 master weights into host memory
 *   stage_get  a checkpoint (vm/checkpoint.c), between steps: an owned
 *              stage's fp32 weights, optimizer state and compute copy into
 *              host memory
 *   stage_set  --resume, after connect and before the first step: the same
 *              three restored from host memory
 *   destroy    frees everything create and connect made
 *
 * Errors. A backend's calls return what they return; none exits, except
 * that a failed CUDA, cuBLAS, NCCL or MPI call (cudaCheck, cublasCheck,
 * ncclCheck, mpiCheck) or a GPU stall past --timeout ends every rank (that
 * rank's NCCL communicators aborted, then MPI_Abort): inside a step a rank
 * that returned would leave its peers waiting for ever. */
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
    int me;            /* this rank */
    int step;          /* the step in progress, from 0 */
    int done;          /* steps trained so far: --resume's step, then each step's end */
    double t0;         /* MPI_Wtime() at its start: the cuda watchdog's origin */
    pp_profile *prof;  /* --profile, or NULL */
} pp_run;

struct pp_backend {
    const char *name; /* "cpu", "cuda": ppvm's start-up line */
    void *(*create)(pp_run *run, char *err, size_t errlen);
    void (*connect)(void *be);
    unsigned long long (*allocated)(void *be);
    void (*exec)(void *be, const pp_instr *in);
    double (*end_step)(void *be);
    /* 0 with one rank; else 1 with *latency and *bandwidth set on rank 0,
     * or -1 on every rank when it could not measure (said) */
    int (*link)(void *be, size_t bytes, double *latency, double *bandwidth);
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
};

#endif
