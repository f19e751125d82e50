/* transport_cuda.c - the cuda backend's transfers, on two transports.
 *
 * nccl: ncclSend / ncclRecv straight from and into device buffers, on the
 * up or down stream with that stream's communicator (see interp_cuda.c for
 * why this order cannot hang); ReduceGrads is ncclAllReduce, in place, on
 * the plan group's communicator (split from the world one), on the compute
 * stream. The host never blocks on a peer here; the GPU does.
 *
 * mpi: for several ranks on one GPU, or no NCCL. Every transfer stages
 * through pinned host memory: one buffer per slot that a transfer uses
 * (sized like the slot) and one per owned stage (for SendWeights, which
 * sends the compute copy, and ReduceGrads: fp32 gradients, the larger). A
 * send copies device to host on its stream, waits for that copy on the
 * host, then MPI_Isend's from the pinned buffer; a receive
 * MPI_Recv's into the pinned buffer, then copies host to device on its
 * stream. Messages are tagged as vm/interp.c tags them. The host blocks in
 * both, so this transport is for correctness on one GPU, not for speed.
 *
 * A pinned buffer is overwritten only after (a) the send in flight from it
 * is complete and (b) the last asynchronous copy out of it to the device is
 * done (its `copied` event): staging_claim. Waiting for an earlier send of
 * the plan is safe: the compiler's checker proves the plans finish even if
 * every send blocked until its receive was posted. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../kernels/cuda_kernels.h"
#include "../kernels/model.h"
#include "check.h"
#include "nccl_check.h"
#include "profile.h"
#include "tensor_stage.h"
#include "transport_cuda.h"
#include "vmbench.h"

/* Message tags: pp_transfer_tag (isa/plan.h), the cpu backend's scheme. */

/* A stage's fp32 gradients (and master weights). */
static size_t stage_bytes(const cuda_vm *v, int s)
{
    return pp_stage_param_count(&v->p->model, (int)v->p->S, s) * sizeof(float);
}

/* What FetchWeights moves: the stage's compute copy (bf16: half the above). */
static size_t compute_bytes(const cuda_vm *v, int s)
{
    return pp_stage_compute_bytes(&v->p->model, (int)v->p->S, s);
}

/* A transfer of `bytes` as moved: --no-compute (vm/vmbench.h) moves one
 * float (PP_NO_COMPUTE_MSG_BYTES) or less, on every rank alike. */
static size_t msg_bytes(const cuda_vm *v, size_t bytes)
{
    return v->opts->no_compute && bytes > PP_NO_COMPUTE_MSG_BYTES ? PP_NO_COMPUTE_MSG_BYTES : bytes;
}

/* ---- set-up and teardown ----------------------------------------------- */

static int staging_alloc(cvm_staging *h, size_t bytes, char *err, size_t errlen)
{
    if (bytes > INT_MAX) { /* MPI counts are int */
        snprintf(err, errlen,
                 "a transfer of %zu bytes is too large for --transport mpi (at most %d)", bytes,
                 INT_MAX);
        return -1;
    }
    cudaError_t rc = cudaHostAlloc(&h->host, bytes ? bytes : 1, cudaHostAllocDefault);
    if (rc == cudaSuccess)
        rc = cudaEventCreateWithFlags(&h->copied, cudaEventDisableTiming);
    if (rc != cudaSuccess) {
        snprintf(err, errlen, "cannot allocate %zu bytes of pinned host memory: %s", bytes,
                 cudaGetErrorString(rc));
        return -1;
    }
    h->bytes = bytes;
    return 0;
}

static void staging_free(cvm_staging *h)
{
    if (h->host)
        cudaCheck(cudaFreeHost(h->host));
    if (h->copied)
        cudaCheck(cudaEventDestroy(h->copied));
    h->host = NULL;
    h->copied = NULL;
}

int cvm_transport_setup(cuda_vm *v, char *err, size_t errlen)
{
    const pp_plan *p = v->p;
    v->world = v->comm[ST_UP] = v->comm[ST_DOWN] = v->comm[ST_COMPUTE] = NULL;
    v->lane1_nccl = NULL;
    v->lane1_mpi = MPI_COMM_NULL;
    v->group_nccl = calloc(p->ngroups + 1, sizeof *v->group_nccl);
    v->group_mpi = malloc((p->ngroups + 1) * sizeof *v->group_mpi);
    for (uint32_t g = 0; v->group_mpi && g < p->ngroups; g++)
        v->group_mpi[g] = MPI_COMM_NULL; /* before any return: teardown reads them */
    if (!v->group_nccl || !v->group_mpi) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (v->transport != PP_TRANSPORT_MPI) {
        v->grouped = malloc((p->ninstr + 1) * sizeof *v->grouped);
        if (!v->grouped) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        return 0;
    }
    v->slot_stg = calloc(p->nslots + 1, sizeof *v->slot_stg);
    v->stage_stg = calloc(p->S, sizeof *v->stage_stg);
    v->stage_has_params = calloc(p->S, sizeof *v->stage_has_params);
    if (!v->slot_stg || !v->stage_stg || !v->stage_has_params) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t k = 0; k < p->nslots; k++)
        v->slot_stg[k].req = MPI_REQUEST_NULL;
    for (uint32_t s = 0; s < p->S; s++)
        v->stage_stg[s].req = MPI_REQUEST_NULL;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        int k = pp_transfer_slot(in);
        if (k >= 0 && !v->slot_stg[k].host &&
            staging_alloc(&v->slot_stg[k], p->slot_bytes[k], err, errlen))
            return -1;
        if ((in->op == PP_OP_SendWeights || in->op == PP_OP_ReduceGrads) &&
            !v->stage_stg[in->stage].host &&
            staging_alloc(&v->stage_stg[in->stage], stage_bytes(v, in->stage), err, errlen))
            return -1;
        v->wsend_cap += in->op == PP_OP_SendWeights;
    }
    v->wsend = malloc(((size_t)v->wsend_cap + 1) * sizeof *v->wsend);
    if (!v->wsend) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static int member_of(const pp_group *g, int me)
{
    for (uint32_t i = 0; i < g->n; i++)
        if (g->member[i] == (uint32_t)me)
            return 1;
    return 0;
}

/* Whether the tensor group needs its lane 1 communicator
 * (isa/tensor_lane.h): tensor > 1 and an Overlap pair in the plan. The
 * group's members run one worker's plan, so all of them have one or none. */
static int has_lane1(const pp_plan *p)
{
    return pp_model_tensor(&p->model) > 1 && pp_plan_workspaces(p) > 1;
}

void cvm_transport_connect(cuda_vm *v)
{
    const pp_plan *p = v->p;
    int size;
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (v->transport == PP_TRANSPORT_MPI) {
        /* Every rank has the same group table, so these collective splits match. */
        for (uint32_t g = 0; g < p->ngroups; g++)
            mpiCheck(MPI_Comm_split(MPI_COMM_WORLD,
                                    member_of(&p->groups[g], v->me) ? 0 : MPI_UNDEFINED, v->me,
                                    &v->group_mpi[g]));
        if (has_lane1(p))
            mpiCheck(MPI_Comm_dup(v->group_mpi[pp_tensor_group_of(p)], &v->lane1_mpi));
        return;
    }
    ncclUniqueId id;
    if (v->me == 0)
        ncclCheck(ncclGetUniqueId(&id));
    mpiCheck(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    ncclCheck(ncclCommInitRank(&v->world, size, id, v->me));
    /* Two more communicators over all ranks, one per direction of flow, so a
     * stream's transfers never share a communicator with the other's. */
    ncclCheck(ncclCommSplit(v->world, 0, v->me, &v->comm[ST_UP], NULL));
    ncclCheck(ncclCommSplit(v->world, 0, v->me, &v->comm[ST_DOWN], NULL));
    for (uint32_t g = 0; g < p->ngroups; g++)
        ncclCheck(ncclCommSplit(v->world, member_of(&p->groups[g], v->me) ? 0 : NCCL_SPLIT_NOCOLOR,
                                v->me, &v->group_nccl[g], NULL));
    if (has_lane1(p)) /* over the tensor group's members only */
        ncclCheck(
            ncclCommSplit(v->group_nccl[pp_tensor_group_of(p)], 0, v->me, &v->lane1_nccl, NULL));
}

/* Sets *c to NULL first, so the fatal hook never aborts a destroyed one. */
static void destroy_comm(ncclComm_t *c)
{
    ncclComm_t x = *c;
    *c = NULL;
    if (x)
        ncclCheck(ncclCommDestroy(x));
}

void cvm_transport_teardown(cuda_vm *v)
{
    const pp_plan *p = v->p;
    destroy_comm(&v->lane1_nccl);
    if (v->group_mpi && v->lane1_mpi != MPI_COMM_NULL) /* group_mpi: setup set lane1_mpi */
        mpiCheck(MPI_Comm_free(&v->lane1_mpi));
    for (uint32_t g = 0; v->group_nccl && g < p->ngroups; g++)
        destroy_comm(&v->group_nccl[g]);
    for (int i = ST_COUNT - 1; i >= 0; i--)
        destroy_comm(&v->comm[i]);
    destroy_comm(&v->world);
    for (uint32_t g = 0; v->group_mpi && g < p->ngroups; g++)
        if (v->group_mpi[g] != MPI_COMM_NULL)
            mpiCheck(MPI_Comm_free(&v->group_mpi[g]));
    for (uint32_t k = 0; v->slot_stg && k < p->nslots; k++)
        staging_free(&v->slot_stg[k]);
    for (uint32_t s = 0; v->stage_stg && s < p->S; s++)
        staging_free(&v->stage_stg[s]);
    free(v->group_nccl);
    free(v->group_mpi);
    free(v->grouped);
    free(v->slot_stg);
    free(v->stage_stg);
    free(v->stage_has_params);
    free(v->wsend);
    v->group_nccl = NULL;
    v->group_mpi = NULL;
    v->slot_stg = v->stage_stg = NULL;
    v->stage_has_params = NULL;
    v->wsend = NULL;
}

void cvm_transport_abort(cuda_vm *v)
{
    /* Unchecked: this runs on the way out after another error. */
    if (v->lane1_nccl) {
        ncclCommAbort(v->lane1_nccl);
        v->lane1_nccl = NULL;
    }
    for (uint32_t g = 0; v->group_nccl && g < v->p->ngroups; g++)
        if (v->group_nccl[g]) {
            ncclCommAbort(v->group_nccl[g]);
            v->group_nccl[g] = NULL;
        }
    for (int i = 0; i < ST_COUNT; i++)
        if (v->comm[i]) {
            ncclCommAbort(v->comm[i]);
            v->comm[i] = NULL;
        }
    if (v->world) {
        ncclCommAbort(v->world);
        v->world = NULL;
    }
}

/* ---- the mpi transport's pinned buffers ---------------------------------- */

static void wait_weight_sends(cuda_vm *v)
{
    if (v->nwsend)
        PP_WAITED(v->opts->no_compute, &v->run->waited_ns,
                  mpiCheck(MPI_Waitall(v->nwsend, v->wsend, MPI_STATUSES_IGNORE)));
    v->nwsend = 0;
}

/* Before the host or a copy overwrites h->host: its send and its last copy
 * to the device are done. A stage's buffer may have several weight sends in
 * flight; they are all waited for. */
static void staging_claim(cuda_vm *v, cvm_staging *h, int stage_buffer)
{
    if (h->req != MPI_REQUEST_NULL)
        PP_WAITED(v->opts->no_compute, &v->run->waited_ns,
                  mpiCheck(MPI_Wait(&h->req, MPI_STATUS_IGNORE)));
    if (stage_buffer)
        wait_weight_sends(v);
    /* polled, not cudaEventSynchronize: a stalled GPU must meet --timeout */
    cvm_host_wait(v, h->copied, "a copy out of a pinned staging buffer");
}

/* Device to pinned host on stream st, after the buffer's last operation;
 * returns when the copy is done. The host blocks here (this transport is
 * for correctness on one GPU, not speed). */
static void copy_out(cuda_vm *v, cvm_staging *h, const void *dev, size_t bytes, cvm_dep *d, int st)
{
    cvm_wait(v, d, st);
    cudaCheck(cudaMemcpyAsync(h->host, dev, bytes, cudaMemcpyDeviceToHost, v->st[st]));
    cvm_record(v, d, st);
    /* polled, not cudaEventSynchronize: a stalled GPU must meet --timeout */
    cvm_host_wait(v, d->ev, "a copy into a pinned staging buffer");
}

/* Pinned host to device on stream st; asynchronous, h->copied marks its end. */
static void copy_in(cuda_vm *v, cvm_staging *h, void *dev, size_t bytes, cvm_dep *d, int st)
{
    cvm_wait(v, d, st);
    cudaCheck(cudaMemcpyAsync(dev, h->host, bytes, cudaMemcpyHostToDevice, v->st[st]));
    cvm_record(v, d, st);
    cudaCheck(cudaEventRecord(h->copied, v->st[st]));
}

/* ---- transfers -------------------------------------------------------------- */

/* After an NCCL transfer on stream st touched d's buffer. Inside a group the
 * transfer is only queued: NCCL launches it at ncclGroupEnd, so an event
 * recorded now would fire before it ran; cvm_group records it then. */
static void record_transfer(cuda_vm *v, cvm_dep *d, int st)
{
    if (!v->in_group) {
        cvm_record(v, d, st);
        return;
    }
    v->grouped[v->ngrouped++] = d;
    v->grouped_st = st;
}

void cvm_group(cuda_vm *v, int start)
{
    if (v->transport != PP_TRANSPORT_NCCL)
        return;
    if (start) {
        ncclCheck(ncclGroupStart());
        v->in_group = 1;
        v->ngrouped = 0;
        return;
    }
    ncclCheck(ncclGroupEnd());
    v->in_group = 0;
    for (int i = 0; i < v->ngrouped; i++)
        cvm_record(v, v->grouped[i], v->grouped_st);
}

int cvm_stream_of(const cuda_vm *v, const pp_instr *in)
{
    /* the opcode table: a transfer runs on the stream its data flows on */
    int up = pp_op_flow_up(in, (uint32_t)v->me);
    return up < 0 ? ST_COMPUTE : up ? ST_UP : ST_DOWN;
}

/* A send on stream st (cvm_stream_of). */
static void send(cuda_vm *v, int st, int peer, int tag, const void *dev, size_t bytes, cvm_dep *d,
                 cvm_staging *h)
{
    if (v->transport == PP_TRANSPORT_NCCL) {
        cvm_wait(v, d, st);
        ncclCheck(ncclSend(dev, bytes, ncclInt8, peer, v->comm[st], v->st[st]));
        record_transfer(v, d, st);
        return;
    }
    staging_claim(v, h, 0);
    copy_out(v, h, dev, bytes, d, st);
    mpiCheck(MPI_Isend(h->host, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &h->req));
}

/* A receive on stream st (cvm_stream_of). */
static void recv(cuda_vm *v, int st, int peer, int tag, void *dev, size_t bytes, cvm_dep *d,
                 cvm_staging *h)
{
    if (v->transport == PP_TRANSPORT_NCCL) {
        cvm_wait(v, d, st);
        ncclCheck(ncclRecv(dev, bytes, ncclInt8, peer, v->comm[st], v->st[st]));
        record_transfer(v, d, st);
        return;
    }
    staging_claim(v, h, 0);
    PP_WAITED(v->opts->no_compute, &v->run->waited_ns,
              mpiCheck(MPI_Recv(h->host, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
                                MPI_STATUS_IGNORE)));
    copy_in(v, h, dev, bytes, d, st);
}

/* The owner's side of FetchWeights, from the compute copy, which does not
 * change before this stage's OptimizerStep: on nccl the step (compute
 * stream) waits for these sends through param_dep; on mpi they send a host
 * copy, made before the step, and the next claim of that buffer waits for
 * them. On mpi, one host copy serves every fetcher until the step. */
static void send_weights(cuda_vm *v, int st, int s, int peer)
{
    int tag = pp_transfer_tag(v->p, PP_OP_SendWeights, s, -1);
    size_t bytes = msg_bytes(v, compute_bytes(v, s));
    if (v->transport == PP_TRANSPORT_NCCL) {
        cvm_wait(v, &v->param_dep[s], st);
        ncclCheck(ncclSend(v->c.compute[s], bytes, ncclInt8, peer, v->comm[st], v->st[st]));
        record_transfer(v, &v->param_dep[s], st);
        return;
    }
    cvm_staging *h = &v->stage_stg[s];
    if (!v->stage_has_params[s]) {
        staging_claim(v, h, 1);
        copy_out(v, h, v->c.compute[s], bytes, &v->param_dep[s], st);
        v->stage_has_params[s] = 1;
    }
    if (v->nwsend >= v->wsend_cap) { /* cannot happen: the cap counts the plan's SendWeights */
        pp_vm_error(v->me, "more weight sends in flight than the plan has");
        pp_cuda_fatal();
    }
    mpiCheck(MPI_Isend(h->host, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
                       &v->wsend[v->nwsend++]));
}

int cvm_tied_other(const cuda_vm *v, int s)
{
    int last = (int)v->p->S - 1;
    return !v->c.tied_shared ? -1 : s == 0 ? last : s == last ? 0 : -1;
}

static void reduce_grads(cuda_vm *v, int st, int s, int g)
{
    size_t n = msg_bytes(v, stage_bytes(v, s)) / sizeof(float);
    if (v->transport == PP_TRANSPORT_NCCL) {
        if (!v->group_nccl[g]) { /* cannot happen: the plan check makes this rank an owner */
            pp_vm_error(v->me, "ReduceGrads on group %d, which it is not in", g);
            pp_cuda_fatal();
        }
        cvm_wait(v, &v->grad_dep[s], st);
        ncclCheck(ncclAllReduce(v->c.grads[s], v->c.grads[s], n, ncclFloat, ncclSum,
                                v->group_nccl[g], v->st[st]));
        cvm_record(v, &v->grad_dep[s], st);
        return;
    }
    cvm_staging *h = &v->stage_stg[s];
    staging_claim(v, h, 1);
    v->stage_has_params[s] = 0; /* the buffer is about to hold gradients */
    copy_out(v, h, v->c.grads[s], n * sizeof(float), &v->grad_dep[s], st);
    PP_WAITED(v->opts->no_compute, &v->run->waited_ns,
              mpiCheck(MPI_Allreduce(MPI_IN_PLACE, h->host, (int)n, MPI_FLOAT, MPI_SUM,
                                     v->group_mpi[g])));
    copy_in(v, h, v->c.grads[s], n * sizeof(float), &v->grad_dep[s], st);
}

void cvm_transfer(cuda_vm *v, const pp_instr *in)
{
    const pp_plan *p = v->p;
    int s = in->stage, b = in->mb, k = pp_transfer_slot(in), st = cvm_stream_of(v, in);
    size_t act = msg_bytes(v, pp_act_bytes(&p->model));
    void *dev = k >= 0 ? v->slot[k] : NULL;
    cvm_dep *d = k >= 0 ? &v->slot_dep[k] : NULL;
    cvm_staging *h = k >= 0 && v->slot_stg ? &v->slot_stg[k] : NULL;
    switch ((pp_opcode)in->op) {
    case PP_OP_SendActivation:
        send(v, st, in->peer, pp_transfer_tag(p, in->op, s, b), dev, act, d, h);
        break;
    case PP_OP_SendGrad:
        send(v, st, in->peer, pp_transfer_tag(p, in->op, s, b), dev, act, d, h);
        break;
    case PP_OP_RecvActivation:
        recv(v, st, in->peer, pp_transfer_tag(p, in->op, s, b), dev, act, d, h);
        break;
    case PP_OP_RecvGrad:
        recv(v, st, in->peer, pp_transfer_tag(p, in->op, s, b), dev, act, d, h);
        break;
    case PP_OP_FetchWeights:
        recv(v, st, in->peer, pp_transfer_tag(p, in->op, s, -1), dev,
             msg_bytes(v, compute_bytes(v, s)), d, h);
        break;
    case PP_OP_SendWeightGrad:
        send(v, st, in->peer, pp_transfer_tag(p, in->op, s, -1), dev,
             msg_bytes(v, stage_bytes(v, s)), d, h);
        break;
    case PP_OP_RecvWeightGrad:
        recv(v, st, in->peer, pp_transfer_tag(p, in->op, s, -1), dev,
             msg_bytes(v, stage_bytes(v, s)), d, h);
        break;
    case PP_OP_SendTiedGrad:
        send(v, st, in->peer, pp_transfer_tag(p, in->op, s, -1), dev,
             msg_bytes(v, pp_tied_floats(&p->model) * sizeof(float)), d, h);
        break;
    case PP_OP_RecvTiedGrad:
        recv(v, st, in->peer, pp_transfer_tag(p, in->op, s, -1), dev,
             msg_bytes(v, pp_tied_floats(&p->model) * sizeof(float)), d, h);
        break;
    case PP_OP_SendWeights:
        send_weights(v, st, s, in->peer);
        break;
    case PP_OP_ReduceGrads:
        reduce_grads(v, st, s, in->group);
        break;
    default:
        pp_vm_error(v->me, "%s is not a transfer", pp_op_name(in->op));
        pp_cuda_fatal();
    }
}

void cvm_params_changed(cuda_vm *v, int s)
{
    if (v->stage_has_params)
        v->stage_has_params[s] = 0;
}

void cvm_transport_drain(cuda_vm *v)
{
    if (v->transport != PP_TRANSPORT_MPI)
        return;
    for (uint32_t k = 0; k < v->p->nslots; k++)
        if (v->slot_stg[k].req != MPI_REQUEST_NULL)
            mpiCheck(MPI_Wait(&v->slot_stg[k].req, MPI_STATUS_IGNORE));
    wait_weight_sends(v);
}

static int comm_error(ncclComm_t c, const char *which, char *msg, size_t len)
{
    ncclResult_t async = ncclSuccess, rc;
    if (!c)
        return 0;
    rc = ncclCommGetAsyncError(c, &async);
    if (rc != ncclSuccess)
        async = rc;
    if (async == ncclSuccess || async == ncclInProgress)
        return 0;
    snprintf(msg, len, "NCCL reports an asynchronous error on the %s communicator: %s", which,
             ncclGetErrorString(async));
    return 1;
}

int cvm_transport_async_error(cuda_vm *v, char *msg, size_t len)
{
    if (v->transport != PP_TRANSPORT_NCCL)
        return 0;
    if (comm_error(v->world, "world", msg, len) || comm_error(v->comm[ST_UP], "up", msg, len) ||
        comm_error(v->comm[ST_DOWN], "down", msg, len))
        return 1;
    for (uint32_t g = 0; g < v->p->ngroups; g++) {
        char which[48];
        snprintf(which, sizeof which, "group %u (ReduceGrads)", g);
        if (comm_error(v->group_nccl[g], which, msg, len))
            return 1;
    }
    return comm_error(v->lane1_nccl, "the tensor group's lane 1", msg, len);
}

/* ---- the host's waits for the GPU, under the watchdog ------------------ */

/* The watchdog, each time the host finds the GPU still busy inside a step:
 * an asynchronous NCCL error, or a step not finished --timeout seconds after
 * it began, ends the run with a message (`awaited` says what the host was
 * waiting for) instead of a hang. */
static void watchdog(cuda_vm *v, const char *awaited)
{
    double timeout = v->opts->timeout > 0 ? v->opts->timeout : 300;
    char msg[256];
    if (cvm_transport_async_error(v, msg, sizeof msg)) {
        pp_vm_error(v->me, "step %d: %s", v->run->step + 1, msg);
        pp_cuda_fatal();
    }
    if (MPI_Wtime() - v->run->t0 > timeout) {
        pp_vm_error(v->me,
                    "step %d: not finished after %g s, see --timeout (%s; a peer may have failed "
                    "or stalled)",
                    v->run->step + 1, timeout, awaited);
        pp_cuda_fatal();
    }
}

static const struct timespec nap = {0, 50 * 1000};

/* The host's waits for the GPU inside a step (the mpi transport's staging
 * copies, a microbatch's pinned tokens) poll under the watchdog: a blocking
 * cudaEventSynchronize on a stalled GPU would hang this rank, and with it
 * every rank, for ever, whatever --timeout says. */
void cvm_host_wait(cuda_vm *v, cudaEvent_t ev, const char *what)
{
    uint64_t t0 = 0; /* --no-compute: when the first query found the GPU busy */
    for (;;) {
        cudaError_t rc = cudaEventQuery(ev);
        if (rc == cudaSuccess && t0)
            v->run->waited_ns += pp_vmbench_now() - t0;
        if (rc == cudaSuccess)
            return;
        if (!t0 && v->opts->no_compute)
            t0 = pp_vmbench_now();
        if (rc != cudaErrorNotReady)
            cuda_check(rc, what, __FILE__, __LINE__); /* a kernel's fault surfaces here */
        char awaited[160];
        snprintf(awaited, sizeof awaited, "waiting for %s", what);
        watchdog(v, awaited);
        nanosleep(&nap, NULL);
    }
}

/* The end of a step: wait until every stream is done, polling rather than
 * blocking, so an asynchronous NCCL error or a step that takes longer than
 * --timeout ends the run with a message instead of a hang. */
void cvm_finish_step(cuda_vm *v)
{
    static const char *name[ST_COUNT] = {"compute", "up", "down", "compute2", "copy"};
    int busy[ST_COUNT], left;
    for (int i = 0; i < ST_COUNT; i++) {
        cudaCheck(cudaEventRecord(v->done[i], v->st[i]));
        busy[i] = 1;
    }
    for (;;) {
        left = 0;
        for (int i = 0; i < ST_COUNT; i++) {
            if (!busy[i])
                continue;
            /* a kernel's fault surfaces here as the query's error */
            cudaError_t rc = cudaEventQuery(v->done[i]);
            if (rc == cudaSuccess)
                busy[i] = 0;
            else if (rc == cudaErrorNotReady)
                left++;
            else
                cuda_check(rc, "cudaEventQuery (end of step)", __FILE__, __LINE__);
        }
        if (!left)
            break;
        char which[64] = "streams still busy: ";
        for (int i = 0, first = 1; i < ST_COUNT; i++)
            if (busy[i]) {
                snprintf(which + strlen(which), sizeof which - strlen(which), "%s%s",
                         first ? "" : ", ", name[i]);
                first = 0;
            }
        watchdog(v, which);
        nanosleep(&nap, NULL);
    }
}

typedef struct {
    cuda_vm *v;
    void *dev, *host;
} cuda_probe;

/* --profile: one round trip of `bytes` between ranks 0 and 1 (rank 0 sends
 * first), device memory to device memory as this transport moves a slot:
 * NCCL send/recv on the world communicator, or a copy to pinned host
 * memory, MPI, and a copy back. Its wall time, in seconds. */
static double round_trip(void *ctx, size_t bytes)
{
    const cuda_probe *c = ctx;
    cuda_vm *v = c->v;
    int peer = 1 - v->me;
    cudaStream_t st = v->st[ST_UP];
    cudaEvent_t done = v->done[ST_UP];
    double t0 = MPI_Wtime();
    for (int leg = 0; leg < 2; leg++) {
        int sending = (leg == 0) == (v->me == 0);
        if (v->transport == PP_TRANSPORT_NCCL) {
            if (sending)
                ncclCheck(ncclSend(c->dev, bytes, ncclChar, peer, v->world, st));
            else
                ncclCheck(ncclRecv(c->dev, bytes, ncclChar, peer, v->world, st));
            cudaCheck(cudaEventRecord(done, st));
            cvm_host_wait(v, done, "the --profile link probe");
        } else if (sending) {
            cudaCheck(cudaMemcpyAsync(c->host, c->dev, bytes, cudaMemcpyDeviceToHost, st));
            cudaCheck(cudaEventRecord(done, st));
            cvm_host_wait(v, done, "the --profile link probe");
            mpiCheck(MPI_Send(c->host, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD));
        } else {
            mpiCheck(MPI_Recv(c->host, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD,
                              MPI_STATUS_IGNORE));
            cudaCheck(cudaMemcpyAsync(c->dev, c->host, bytes, cudaMemcpyHostToDevice, st));
            cudaCheck(cudaEventRecord(done, st));
            cvm_host_wait(v, done, "the --profile link probe");
        }
    }
    return MPI_Wtime() - t0;
}

int cvm_transport_link(cuda_vm *v, size_t bytes, size_t msg, double *latency, double *bandwidth,
                       double *burst)
{
    int size;
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size < 2)
        return 0;
    if (v->me <= 1) {
        cuda_probe c = {v, NULL, NULL};
        v->run->t0 = MPI_Wtime(); /* the watchdog's clock, as for a step */
        cudaCheck(cudaMalloc(&c.dev, bytes > 8 ? bytes : 8));
        if (v->transport != PP_TRANSPORT_NCCL)
            cudaCheck(cudaHostAlloc(&c.host, bytes > 8 ? bytes : 8, cudaHostAllocDefault));
        pp_profile_link(round_trip, &c, bytes, msg, latency, bandwidth, burst);
        cudaCheck(cudaFree(c.dev));
        if (c.host)
            cudaCheck(cudaFreeHost(c.host));
    }
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
    return 1;
}

void cvm_tensor_allreduce(void *ctx, float *dev, size_t n, cudaStream_t st)
{
    cuda_vm *v = ctx;
    int g = v->tensor_group;
    if (v->transport == PP_TRANSPORT_NCCL) {
        ncclCheck(ncclAllReduce(dev, dev, n, ncclFloat, ncclSum,
                                v->tensor_lane ? v->lane1_nccl : v->group_nccl[g], st));
        return;
    }
    if (!v->tp_host && !(v->tp_host = malloc(pp_act_f32_bytes(&v->p->model) + 1))) {
        pp_vm_error(v->me, "out of memory for the tensor all-reduce's host buffer");
        pp_cuda_fatal();
    }
    cudaCheck(cudaMemcpyAsync(v->tp_host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
    PP_WAITED(v->opts->no_compute, &v->run->waited_ns,
              mpiCheck(MPI_Allreduce(MPI_IN_PLACE, v->tp_host, (int)n, MPI_FLOAT, MPI_SUM,
                                     v->tensor_lane ? v->lane1_mpi : v->group_mpi[g])));
    cudaCheck(cudaMemcpyAsync(dev, v->tp_host, n * sizeof(float), cudaMemcpyHostToDevice, st));
    cudaCheck(cudaStreamSynchronize(st)); /* tp_host is reused by the next one */
}

/* --profile's tensor link (issue 27): cvm_tensor_allreduce on the compute
 * stream, as the layers make it, timed to its end. */
typedef struct {
    cuda_vm *v;
    float *dev;
} tensor_probe;

static double allreduce_cuda(void *ctx, size_t bytes)
{
    const tensor_probe *t = ctx;
    cudaStream_t st = t->v->st[ST_COMPUTE];
    double t0 = MPI_Wtime();
    cvm_tensor_allreduce(t->v, t->dev, bytes / sizeof(float), st);
    cudaCheck(cudaStreamSynchronize(st));
    return MPI_Wtime() - t0;
}

int cvm_tensor_link(cuda_vm *v, size_t bytes, double *latency, double *bandwidth)
{
    if (pp_model_tensor(&v->p->model) < 2)
        return 0;
    tensor_probe t = {v, NULL};
    v->run->t0 = MPI_Wtime(); /* the watchdog's clock, as for a step */
    v->tensor_group = pp_tensor_group_of(v->p);
    v->tensor_lane = 0;
    void *dev = NULL;
    cudaCheck(cudaMalloc(&dev, bytes > 8 ? bytes : 8));
    cudaCheck(cudaMemset(dev, 0, bytes > 8 ? bytes : 8));
    t.dev = dev;
    pp_profile_allreduce_fit(allreduce_cuda, &t, bytes, 0, latency, bandwidth);
    cudaCheck(cudaFree(t.dev));
    return 1;
}
