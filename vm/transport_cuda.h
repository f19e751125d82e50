/* transport_cuda.h - what the cuda backend's two files share: the state of
 * one rank's VM (vm/interp_cuda.c runs it) and the transfer instructions of
 * its two transports (vm/transport_cuda.c). See interp_cuda.c's header for
 * the design. Only built when nvcc exists (PP_HAVE_CUDA). */
#ifndef PP_VM_TRANSPORT_CUDA_H
#define PP_VM_TRANSPORT_CUDA_H

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stddef.h>

#include "../kernels/cuda_check.h"
#include "../kernels/model_cuda.h"
#include "backend.h"
#include "core.h"
#include "vm.h"

/* The three streams. UP carries every transfer whose data flows from a lower
 * rank to a higher one (sends to a higher peer, receives from a lower one),
 * DOWN the others; COMPUTE runs the model, copies of microbatches, gradient
 * clearing, accumulation, the all-reduce and the optimizer. */
/* COMPUTE2 runs the second job of an overlapped pair (Overlap) beside the
 * first, which runs on COMPUTE; nothing else. */
/* ST_COPY: offload's Offload and Reload, between device slots and pinned
 * host slots (interp_cuda.c's op_host_copy) */
enum { ST_COMPUTE, ST_UP, ST_DOWN, ST_COMPUTE2, ST_COPY, ST_COUNT };

/* The last operation that touched a device buffer: the event recorded after
 * it and the stream it ran on (-1: none yet). Ops on a buffer are thereby in
 * plan order: one on another stream first waits for this event. */
typedef struct {
    cudaEvent_t ev;
    int stream;
} cvm_dep;

/* A pinned host buffer the mpi transport stages a device buffer through. */
typedef struct {
    void *host; /* NULL where the buffer is never transferred */
    size_t bytes;
    cudaEvent_t copied; /* recorded after the last copy out of host to the device */
    MPI_Request req;    /* a send in flight from host, or MPI_REQUEST_NULL */
} cvm_staging;

typedef struct {
    pp_vm_core c; /* first (the core's hooks take the backend's state): per-stage state
                      (params, grads, state, compute: device memory, NULL where not
                      owned), the non-finite findings, --skip-nonfinite, --deterministic */
    pp_run *run;  /* the driver's: the step in progress, its start (the watchdog's
                      origin), --profile */
    const pp_plan *p;
    const pp_dataset *ds;
    const pp_train_opts *opts;
    int transport; /* pp_transport */
    int me;
    cudaStream_t st[ST_COUNT];
    cudaEvent_t done[ST_COUNT]; /* recorded at the end of each stream's step; the watchdog polls */
    pp_cuda_model *cm;          /* cuBLAS and the loss accumulator, on st[ST_COMPUTE] */
    cvm_dep *param_dep, *grad_dep; /* [S]; param_dep covers params[s] and compute[s] */
    void **slot;                   /* [nslots] device, the plan's sizes exactly */
    cvm_dep *slot_dep;             /* [nslots] */
    uint8_t *host_slot;            /* [nslots] 1: offload's pinned host slot */
    void *work;                    /* device, the plan's workspace: only the compute stream's jobs
                                   touch it, one after another, so it needs no dep */
    /* Overlapped pairs (a plan with Overlap): the second compute stream's
     * context and workspace (its jobs alone touch them, one after another),
     * the first job's buffers, whose events are recorded only after the
     * second job's waits, and the event that joins COMPUTE2 back into
     * COMPUTE at the pair's end. NULL / 0 without pairs. */
    pp_cuda_model *cm2;
    void *work2;
    cvm_dep *pair_dep[2 * (PP_MAX_SLOTS + 3)];
    /* the buffers the instruction in progress touches on the compute lane
     * (op_slot, op_weights, op_grads): waited for by op_begin, recorded by
     * op_end */
    cvm_dep *jd[PP_MAX_SLOTS + 3]; /* slots, weights (tied: two stages'), grads */
    int njd;
    int npair_dep;
    cudaEvent_t pair_ev;
    int32_t **tok_host;  /* [B] pinned tokens of microbatch b; NULL if never loaded here */
    cudaEvent_t *tok_ev; /* [B] after the copy out of tok_host[b] */
    /* The non-finite check (vm/core.c): each instruction that checks a
     * number writes its record on its compute lane's device array (a
     * microbatch's loss; or the index of the first non-finite number, -1
     * for none, and that number), read in one copy at the end of the step.
     * One array per lane: the two jobs of a pair write at once. */
    double *nf_dev[2];      /* [2 * ninstr] device, COMPUTE's and COMPUTE2's */
    double *nf_host;        /* [2][2 * ninstr] their copies */
    signed char *nf_kind;   /* [ninstr] this step: a pp_nf_kind checked there, or 0 */
    unsigned char *nf_lane; /* [ninstr] and the lane (0, 1) whose array holds it */
    /* --deterministic: a W job's gradient, per lane, before its copy to the
     * core's host buffer; det_ev marks the copy's end */
    float *det_job[2];
    cudaEvent_t det_ev;
    cudaEvent_t commit_ev; /* --skip-nonfinite: the end of commit's updates */

    /* nccl transport */
    ncclComm_t world;
    ncclComm_t comm[ST_COUNT]; /* comm[ST_UP], comm[ST_DOWN]; comm[ST_COMPUTE] stays NULL */
    ncclComm_t *group_nccl;    /* [ngroups] NULL where this rank is no member */
    int in_group;              /* between GroupStart and GroupEnd */
    cvm_dep **grouped;         /* [ninstr] what the open group's transfers touch */
    int ngrouped, grouped_st;  /* how many, and their stream */

    /* mpi transport */
    MPI_Comm *group_mpi;    /* [ngroups] MPI_COMM_NULL where no member */
    cvm_staging *slot_stg;  /* [nslots] for the slots that transfers use */
    cvm_staging *stage_stg; /* [S] owned stages: compute copy for SendWeights, grads for
                                  ReduceGrads */
    int *stage_has_params;  /* [S] stage_stg[s] holds compute[s] as it is now */
    MPI_Request *wsend;     /* SendWeights in flight from stage_stg */
    int nwsend, wsend_cap;  /* cap: the plan's SendWeights per step */

    /* --profile */
    cudaEvent_t *prof_ev; /* [2 * ninstr] timing events before and after each job */

    /* tensor = T (issue 27): the group of the last TensorReduce, its lane
     * (isa/tensor_lane.h), the tensor group's lane 1 communicator (a plan
     * with an Overlap pair; else NULL / MPI_COMM_NULL), and the mpi
     * transport's host copy of an all-reduce's buffer */
    int tensor_group, tensor_lane;
    ncclComm_t lane1_nccl;
    MPI_Comm lane1_mpi;
    float *tp_host;

    /* whole steps as CUDA graphs (vm/graph_cuda.c); NULL before set-up */
    struct cvm_graph *graph;
} cuda_vm;

/* The stream an instruction's transfer runs on: a send to a higher rank or
 * a receive from a lower one (data flowing up) on UP, the other transfers
 * on DOWN, everything else (ReduceGrads included) on COMPUTE. The one place
 * the backend chooses a stream for an instruction; the model's own work is
 * on COMPUTE, where its cuBLAS handle is bound. */
int cvm_stream_of(const cuda_vm *v, const pp_instr *in);

/* Make stream `st` wait for the buffer's last operation if it ran on
 * another stream; record the buffer's event after an operation on `st`. */
static inline void cvm_wait(cuda_vm *v, const cvm_dep *d, int st)
{
    if (d->stream >= 0 && d->stream != st)
        cudaCheck(cudaStreamWaitEvent(v->st[st], d->ev, 0));
}

static inline void cvm_record(cuda_vm *v, cvm_dep *d, int st)
{
    cudaCheck(cudaEventRecord(d->ev, v->st[st]));
    d->stream = st;
}

/* The host waits until `ev` has completed, polling it as the end of a step
 * polls the streams, so this wait too ends the run with a message (naming
 * `what`) on an asynchronous NCCL error or once the step has run longer than
 * --timeout, instead of blocking for ever in cudaEventSynchronize on a GPU
 * that stalled. For every host wait on the GPU inside a step (interp_cuda.c,
 * and the mpi transport's staging copies here). */
void cvm_host_wait(cuda_vm *v, cudaEvent_t ev, const char *what);
/* The end of a step: every stream idle, polled under the same watchdog. */
void cvm_finish_step(cuda_vm *v);

/* Local set-up of the transport (mpi: pinned staging buffers); not
 * collective. 0, or -1 with err. */
int cvm_transport_setup(cuda_vm *v, char *err, size_t errlen);
/* Collective over MPI_COMM_WORLD, every rank after the same successful
 * set-up: NCCL communicators (world, up, down, one per plan group) or MPI
 * sub-communicators. Failures are fatal (ncclCheck / mpiCheck). */
void cvm_transport_connect(cuda_vm *v);
/* Frees what setup and connect made; the streams must be idle. */
void cvm_transport_teardown(cuda_vm *v);
/* For the fatal hook: ncclCommAbort on every communicator this rank has. */
void cvm_transport_abort(cuda_vm *v);

/* The instructions that move data: Send/RecvActivation, Send/RecvGrad,
 * FetchWeights, SendWeights, SendWeightGrad, RecvWeightGrad's receive into
 * its tmp slot (the caller adds it), ReduceGrads. */
void cvm_transfer(cuda_vm *v, const pp_instr *in);
/* GroupStart (start 1) and GroupEnd: on nccl, ncclGroupStart/End around the
 * transfers between them, whose buffers' events are recorded after
 * ncclGroupEnd, which is when NCCL launches them; nothing on mpi. */
void cvm_group(cuda_vm *v, int start);
/* Where a rank stores the tied embedding once (isa/tied.h), stage 0's and
 * stage S-1's weights overlap: for s one of them, the other, whose weight
 * dependency its operations also wait for and record; else -1. */
int cvm_tied_other(const cuda_vm *v, int s);

/* OptimizerStep changed params[s] and compute[s] (the mpi transport's host
 * copy is stale). */
void cvm_params_changed(cuda_vm *v, int s);
/* A tensor all-reduce of n floats at dev over v->tensor_group, on stream
 * st (kernels/model_cuda.h's hook; ctx is v): ncclAllReduce on the group's
 * communicator of lane v->tensor_lane there, ordered with the GEMMs before and after it by the
 * stream; with the mpi transport the stream is waited for and the sum
 * made on the host over the group's MPI communicator. */
void cvm_tensor_allreduce(void *ctx, float *dev, size_t n, cudaStream_t st);
/* End of a step, after the streams are idle: every send complete (mpi). */
void cvm_transport_drain(cuda_vm *v);
/* 1 with a message naming the communicator if NCCL reports an asynchronous
 * error on any of them, else 0 (always 0 on the mpi transport). */
int cvm_transport_async_error(cuda_vm *v, char *msg, size_t len);
/* --profile, after training: the link between ranks 0 and 1 through this
 * transport, device memory to device memory (profile.h). Collective; 0 with
 * one rank, else 1 with *latency, *bandwidth and *burst set on rank 0. */
int cvm_transport_link(cuda_vm *v, size_t bytes, size_t msg, double *latency, double *bandwidth,
                       double *burst);
/* --profile with tensor = T > 1 (backend.h's tensor_link): the tensor
 * group's all-reduce timed (profile.h); 0 with T = 1. Collective. */
int cvm_tensor_link(cuda_vm *v, size_t bytes, double *latency, double *bandwidth);

#endif
