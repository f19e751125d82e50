/* interp_cuda.c - the interpreter on the cuda backend: one rank's
 * instruction stream on a GPU, with the nccl or the mpi transport (their
 * transfers are in vm/transport_cuda.c). The twin of vm/interp.c: the same
 * instructions, under the same driver (vm/driver.c: the step loop, the
 * memory line, --save, --profile; this file is the cuda implementation of
 * vm/backend.h).
 *
 * Memory. At start-up the rank allocates on the device its owned stages'
 * params, grads, optimizer state and (bf16) compute copies, and the plan's
 * slots, at exactly the plan's sizes, and prints their sum as interp.c
 * does; nothing is allocated in the step loop. On the host it pins one
 * token buffer per microbatch it loads and, on the mpi transport, the
 * staging buffers (not device memory, not counted). All CUDA events are
 * created at start-up too, --profile's timing events around each job
 * included.
 *
 * Precision (kernels/model.h). Jobs compute with a stage's compute copy:
 * an owner's own (params itself with fp32; with bf16 a bf16 copy of the
 * fp32 master, made at start-up and by every OptimizerStep right after the
 * update, on the compute stream) or the one a FetchWeights put in a slot.
 * SendWeights and FetchWeights move the compute copy; gradients, their
 * transfers and the optimizer stay fp32; --save writes the fp32 master.
 *
 * Streams. COMPUTE runs the model (pp_cuda_stage_*), the microbatch copies,
 * ZeroGrads, RecvWeightGrad's accumulation, ReduceGrads and OptimizerStep.
 * UP carries every transfer whose data flows from a lower rank to a higher
 * one (sends to a higher peer, receives from a lower one), with its own NCCL
 * communicator; DOWN carries the others, with another. The host issues every
 * operation in plan order, so each stream runs its operations in plan order.
 *
 * Ordering between streams is by events only. Every slot and every owned
 * stage's weights (params and compute copy, one event for both) and grads
 * has one event, recorded after the last operation that touched the
 * buffer, and the stream that operation ran on. Before an
 * operation on stream X, X waits (cudaStreamWaitEvent) for the event of each
 * buffer the operation touches whose last operation ran on another stream;
 * after it, those events are recorded on X. So the operations on any one
 * buffer run in plan order, as on the CPU, while operations on different
 * buffers overlap: the send of F(s,b)'s output runs beside F(s,b+1). Reads
 * are ordered like writes (a send of params and a forward reading them do
 * not overlap): simpler, and never wrong. So an OptimizerStep, which
 * rewrites params and the compute copy, waits for the weight sends of the
 * compute copy before it, as every job reading the weights waits for it.
 *
 * Overlapped pairs (Overlap, isa/opcodes.h). The pair's first job runs on
 * COMPUTE, the second on COMPUTE2 with a cuBLAS context and a workspace of
 * its own. Both wait for the events of the buffers they touch as they
 * were before the pair (the first job's events are recorded only after
 * the second's waits are issued), so neither waits for the other: the
 * compiler's bufcheck proves they share no buffer that either writes.
 * After the second job, COMPUTE waits for COMPUTE2 (pair_ev) and the
 * buffers of both jobs are recorded on COMPUTE: everything after the pair
 * follows both jobs, as the simulator's pair ends both at once. The loss
 * a last-stage forward adds goes to the context that ran it; a step's
 * loss is the sum of both.
 *
 * Why it cannot hang. A NCCL send or receive blocks its stream until the
 * peer's matching operation runs, and NCCL requires that ranks issue their
 * operations on several communicators in the same relative order. Every
 * rank's plan is sorted by one global key that all ranks share
 * (compiler/lower.c: the time the receiver wants the data, then kind,
 * stage, microbatch, direction, sender, receiver; the end of the step in
 * one order on every rank). So all ranks submit their NCCL operations,
 * across all communicators (up, down, the groups'), as subsequences of one
 * global sequence, which is what NCCL requires. The compiler's checker
 * (isa/commcheck.c) proves every plan finishes even when each
 * operation blocks its rank's one stream until it is matched. Here an
 * operation waits only for operations before it in plan order (on its own
 * stream, or through a buffer's event): a subset of those waits, so the
 * first unfinished operation of the global sequence can always run. Between
 * two ranks each communicator carries data one way only, in plan order on
 * both sides, so p2p operations match in the order NCCL matches them.
 *
 * Failure. Every CUDA, NCCL and MPI call is checked (cudaCheck, ncclCheck,
 * mpiCheck); an error runs pp_cuda_fatal(), whose hook (installed here)
 * aborts this rank's NCCL communicators and then MPI_Abort's every rank. At
 * the end of each step the host does not block in cudaStreamSynchronize: it
 * polls an event at the end of each stream every ~50 us and meanwhile asks
 * NCCL for asynchronous errors; an error, or a step not finished after
 * --timeout seconds, is reported with the rank, step and cause, and ends the
 * run instead of hanging. The host's other waits for the GPU inside a step
 * (a microbatch's pinned tokens; the mpi transport's staging copies) poll
 * under the same watchdog (cvm_host_wait): a cudaEventSynchronize there
 * would hang a rank whose GPU stalled, and every rank with it, whatever
 * --timeout says. Then the loss is read (pp_cuda_loss_take): the step's one
 * host synchronisation. Set-up failures that are local (no GPU,
 * NCCL with more ranks than GPUs on a node, out of memory) are the
 * backend's create failing: the driver has all ranks agree on them before
 * anything collective, every rank returns 1, and the lowest failing rank
 * says why.
 *
 * --no-compute (issue 18, vm/vmbench.h): every instruction still takes its
 * operands, waits for and records their events, issues its transfers (one
 * float each, NCCL or MPI with its staging copies) and groups, but launches
 * no kernel and makes no microbatch: the host's own cost per instruction. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../kernels/cuda_kernels.h"
#include "../kernels/model.h"
#include "check.h"
#include "profile.h"
#include "transport_cuda.h"
#include "vmbench.h"

/* The run in progress, for the fatal hook. */
static cuda_vm *running;

static void abort_everything(void)
{
    static int entered;
    if (!entered++ && running)
        cvm_transport_abort(running);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- set-up and teardown ------------------------------------------------------ */

/* Device local rank % device count; the nccl transport needs a GPU per rank. */
static int pick_device(cuda_vm *v, char *err, size_t errlen)
{
    MPI_Comm node; /* collective, so every rank does it before anything can fail */
    int lrank, lsize, ndev = 0;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, v->me, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &lrank));
    mpiCheck(MPI_Comm_size(node, &lsize));
    mpiCheck(MPI_Comm_free(&node));
    const char *env = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int local = env && atoi(env) >= 0 ? atoi(env) : lrank;
    cudaError_t rc = cudaGetDeviceCount(&ndev);
    if (rc != cudaSuccess || ndev <= 0) {
        snprintf(err, errlen, "--backend cuda: no GPU visible (cudaGetDeviceCount: %s)",
                 rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
        return -1;
    }
    if (v->transport == PP_TRANSPORT_NCCL && lsize > ndev) {
        snprintf(err, errlen,
                 "--transport nccl needs one GPU per rank, but %d ranks on this node share %d "
                 "GPU%s; use --transport mpi",
                 lsize, ndev, ndev == 1 ? "" : "s");
        return -1;
    }
    if ((rc = cudaSetDevice(local % ndev)) != cudaSuccess) {
        snprintf(err, errlen, "cudaSetDevice(%d): %s", local % ndev, cudaGetErrorString(rc));
        return -1;
    }
    return 0;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        cudaError_t rc_ = (call);                                                                  \
        if (rc_ != cudaSuccess) {                                                                  \
            snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(rc_));                       \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

/* Device memory; none for 0 bytes (a stage without blocks has no weights). */
static int dev_alloc(void **ptr, size_t bytes, char *err, size_t errlen)
{
    *ptr = NULL;
    if (bytes)
        TRY(cudaMalloc(ptr, bytes));
    return 0;
}

static int new_dep(cvm_dep *d, char *err, size_t errlen)
{
    TRY(cudaEventCreateWithFlags(&d->ev, cudaEventDisableTiming));
    d->stream = -1;
    return 0;
}

/* Everything local: streams, events, device buffers, pinned buffers. Not
 * collective. 0, or -1 with err (teardown frees what was made). */
static int setup(cuda_vm *v, char *err, size_t errlen)
{
    const pp_plan *p = v->p;
    const pp_model *m = &p->model;
    int S = (int)p->S, B = (int)p->B;
    for (int i = 0; i < ST_COUNT; i++) {
        TRY(cudaStreamCreateWithFlags(&v->st[i], cudaStreamNonBlocking));
        TRY(cudaEventCreateWithFlags(&v->done[i], cudaEventDisableTiming));
    }
    if (pp_cuda_model_create(&v->cm, v->st[ST_COMPUTE], err, errlen))
        return -1;
    pp_cuda_model_set_epilogues(v->cm, !v->opts->no_epilogues);
    v->params = calloc((size_t)S, sizeof *v->params);
    v->grads = calloc((size_t)S, sizeof *v->grads);
    v->state = calloc((size_t)S, sizeof *v->state);
    v->compute = calloc((size_t)S, sizeof *v->compute);
    v->param_dep = calloc((size_t)S, sizeof *v->param_dep);
    v->grad_dep = calloc((size_t)S, sizeof *v->grad_dep);
    v->slot = calloc(p->nslots + 1, sizeof *v->slot);
    v->slot_dep = calloc(p->nslots + 1, sizeof *v->slot_dep);
    v->tok_host = calloc((size_t)B, sizeof *v->tok_host);
    v->tok_ev = calloc((size_t)B, sizeof *v->tok_ev);
    if (!v->params || !v->grads || !v->state || !v->compute || !v->param_dep || !v->grad_dep ||
        !v->slot || !v->slot_dep || !v->tok_host || !v->tok_ev) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int s = 0; s < S; s++) {
        v->param_dep[s].stream = v->grad_dep[s].stream = -1;
        if (!(p->stage_role[s] & PP_ROLE_OWNER))
            continue;
        size_t bytes = pp_stage_param_count(m, S, s) * sizeof(float);
        size_t state = pp_optimizer_state_floats(m->optimizer) * bytes;
        if (dev_alloc((void **)&v->params[s], bytes, err, errlen) ||
            dev_alloc((void **)&v->grads[s], bytes, err, errlen) ||
            dev_alloc((void **)&v->state[s], state, err, errlen) ||
            new_dep(&v->param_dep[s], err, errlen) || new_dep(&v->grad_dep[s], err, errlen))
            return -1;
        v->allocated += 2 * bytes + state;
        v->compute[s] = v->params[s];
        if (m->precision != PP_PREC_FP32) { /* a copy of its own, as interp.c keeps */
            size_t cbytes = pp_stage_compute_bytes(m, S, s);
            if (dev_alloc(&v->compute[s], cbytes, err, errlen))
                return -1;
            v->allocated += cbytes;
        }
    }
    /* All activation memory the step needs, allocated once: the plan's slots
     * and its workspace. */
    for (uint32_t k = 0; k < p->nslots; k++) {
        v->slot_dep[k].stream = -1;
        if (dev_alloc(&v->slot[k], p->slot_bytes[k], err, errlen) ||
            new_dep(&v->slot_dep[k], err, errlen))
            return -1;
        v->allocated += p->slot_bytes[k];
    }
    if (dev_alloc(&v->work, p->workspace_bytes, err, errlen))
        return -1;
    v->allocated += p->workspace_bytes;
    if (pp_plan_workspaces(p) > 1) { /* overlapped pairs: the second stream's own */
        if (pp_cuda_model_create(&v->cm2, v->st[ST_COMPUTE2], err, errlen) ||
            dev_alloc(&v->work2, p->workspace_bytes, err, errlen))
            return -1;
        pp_cuda_model_set_epilogues(v->cm2, !v->opts->no_epilogues);
        TRY(cudaEventCreateWithFlags(&v->pair_ev, cudaEventDisableTiming));
        v->allocated += p->workspace_bytes;
    }
    for (uint32_t i = 0; i < p->ninstr; i++) {
        int b = p->code[i].mb;
        if (p->code[i].op != PP_OP_LoadMicroBatch || v->tok_host[b])
            continue;
        TRY(cudaHostAlloc((void **)&v->tok_host[b], pp_tokens_bytes(m), cudaHostAllocDefault));
        TRY(cudaEventCreateWithFlags(&v->tok_ev[b], cudaEventDisableTiming));
    }
    if (v->opts->profile) { /* timing events, around the jobs only */
        if (!(v->prof_ev = calloc(2 * (size_t)p->ninstr + 1, sizeof *v->prof_ev))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (uint32_t i = 0; i < p->ninstr; i++)
            for (int k = 0; k < 2 && pp_profile_dir(&p->code[i]) >= 0; k++)
                TRY(cudaEventCreateWithFlags(&v->prof_ev[2 * i + k], cudaEventDefault));
    }
    return cvm_transport_setup(v, err, errlen);
}

/* Frees whatever setup and connect made; after a successful run the streams are idle. */
static void teardown(cuda_vm *v)
{
    const pp_plan *p = v->p;
    for (int i = 0; i < ST_COUNT; i++)
        if (v->st[i])
            cudaCheck(cudaStreamSynchronize(v->st[i]));
    cvm_transport_teardown(v);
    if (v->cm)
        pp_cuda_model_destroy(v->cm);
    if (v->cm2)
        pp_cuda_model_destroy(v->cm2);
    cudaCheck(cudaFree(v->work2));
    if (v->pair_ev)
        cudaCheck(cudaEventDestroy(v->pair_ev));
    for (uint32_t s = 0; s < p->S; s++) { /* any of the tables may be missing */
        if (v->compute && v->params && v->compute[s] != v->params[s])
            cudaCheck(cudaFree(v->compute[s]));
        if (v->params)
            cudaCheck(cudaFree(v->params[s]));
        if (v->grads)
            cudaCheck(cudaFree(v->grads[s]));
        if (v->state)
            cudaCheck(cudaFree(v->state[s]));
        if (v->param_dep && v->param_dep[s].ev)
            cudaCheck(cudaEventDestroy(v->param_dep[s].ev));
        if (v->grad_dep && v->grad_dep[s].ev)
            cudaCheck(cudaEventDestroy(v->grad_dep[s].ev));
    }
    for (uint32_t k = 0; v->slot && k < p->nslots; k++) {
        cudaCheck(cudaFree(v->slot[k]));
        if (v->slot_dep && v->slot_dep[k].ev) /* either table may be missing */
            cudaCheck(cudaEventDestroy(v->slot_dep[k].ev));
    }
    cudaCheck(cudaFree(v->work));
    for (uint32_t b = 0; v->tok_host && b < p->B; b++) {
        if (v->tok_host[b])
            cudaCheck(cudaFreeHost(v->tok_host[b]));
        if (v->tok_ev && v->tok_ev[b])
            cudaCheck(cudaEventDestroy(v->tok_ev[b]));
    }
    for (uint32_t i = 0; v->prof_ev && i < 2 * p->ninstr; i++)
        if (v->prof_ev[i])
            cudaCheck(cudaEventDestroy(v->prof_ev[i]));
    free(v->prof_ev);
    for (int i = 0; i < ST_COUNT; i++) {
        if (v->done[i])
            cudaCheck(cudaEventDestroy(v->done[i]));
        if (v->st[i])
            cudaCheck(cudaStreamDestroy(v->st[i]));
    }
    free(v->params);
    free(v->grads);
    free(v->state);
    free(v->compute);
    free(v->param_dep);
    free(v->grad_dep);
    free(v->slot);
    free(v->slot_dep);
    free(v->tok_host);
    free(v->tok_ev);
}

/* Each stage's initial weights (as the cpu backend's), their compute copy
 * and zero gradients. */
static void init_weights(cuda_vm *v)
{
    const pp_plan *p = v->p;
    int S = (int)p->S;
    for (int s = 0; s < S; s++) {
        if (!(p->stage_role[s] & PP_ROLE_OWNER))
            continue;
        size_t n = pp_stage_param_count(&p->model, S, s);
        pp_cuda_stage_init(v->cm, &p->model, S, s, v->opts->seed, v->params[s]);
        pp_cuda_stage_compute_copy(v->cm, &p->model, S, s, v->params[s], v->compute[s]);
        cudaCheck(cudaMemsetAsync(v->grads[s], 0, n * sizeof(float), v->st[ST_COMPUTE]));
        if (v->state[s]) /* AdamW's moments start at zero */
            cudaCheck(cudaMemsetAsync(v->state[s], 0,
                                      pp_optimizer_state_floats(p->model.optimizer) * n *
                                          sizeof(float),
                                      v->st[ST_COMPUTE]));
    }
    cudaCheck(cudaDeviceSynchronize()); /* start-up only */
}

/* ---- one instruction ---------------------------------------------------------- */

/* The operands of a compute operation: each returns the device pointer and
 * adds the buffer's dependency to d[*n]. */
static void *use_slot(cuda_vm *v, int k, cvm_dep **d, int *n)
{
    if (k < 0)
        return NULL;
    d[(*n)++] = &v->slot_dep[k];
    return v->slot[k];
}

/* The weights a job reads: its wts slot, or this rank's own compute copy. */
static const void *use_weights(cuda_vm *v, int s, int k, cvm_dep **d, int *n)
{
    if (k >= 0)
        return use_slot(v, k, d, n);
    if (!(v->p->stage_role[s] & PP_ROLE_OWNER))
        return NULL; /* a stage without weights (plancheck.c): nothing to order */
    d[(*n)++] = &v->param_dep[s];
    return v->compute[s];
}

/* Where a job accumulates weight gradients: its wgrad slot, or this rank's own. */
static float *use_grads(cuda_vm *v, int s, int k, cvm_dep **d, int *n)
{
    if (k >= 0)
        return use_slot(v, k, d, n);
    if (!(v->p->stage_role[s] & PP_ROLE_OWNER))
        return NULL; /* a stage without weights: no gradients either */
    d[(*n)++] = &v->grad_dep[s];
    return v->grads[s];
}

static void compute_begin(cuda_vm *v, cvm_dep **d, int n, int lane)
{
    for (int i = 0; i < n; i++)
        cvm_wait(v, d[i], lane);
}

/* After an operation on the compute lane: record its buffers' events. The
 * first job of a pair defers them until its partner has waited (see the
 * header); after the partner, COMPUTE joins COMPUTE2 and records both. */
static void compute_end(cuda_vm *v, cvm_dep **d, int n, int pair_pos)
{
    if (pair_pos == 1) {
        for (int i = 0; i < n; i++)
            v->pair_dep[v->npair_dep++] = d[i];
        return;
    }
    if (pair_pos == 2) {
        cudaCheck(cudaEventRecord(v->pair_ev, v->st[ST_COMPUTE2]));
        cudaCheck(cudaStreamWaitEvent(v->st[ST_COMPUTE], v->pair_ev, 0));
        for (int i = 0; i < v->npair_dep; i++)
            cvm_record(v, v->pair_dep[i], ST_COMPUTE);
        v->npair_dep = 0;
    }
    for (int i = 0; i < n; i++)
        cvm_record(v, d[i], ST_COMPUTE);
}

/* --profile: a timing event on the compute stream just before (end 0) or
 * after (end 1) a job's or an optimizer step's kernels, after its waits for
 * other streams. */
static void prof_mark(cuda_vm *v, const pp_instr *in, int end, int lane)
{
    if (v->prof_ev)
        cudaCheck(cudaEventRecord(v->prof_ev[2 * (in - v->p->code) + end], v->st[lane]));
}

/* --profile, once the step's streams are idle: each job's time between its
 * two events. */
static void prof_collect(cuda_vm *v)
{
    for (uint32_t i = 0; v->run->prof && i < v->p->ninstr; i++) {
        int dir = pp_profile_dir(&v->p->code[i]);
        float ms = 0;
        if (dir < 0)
            continue;
        cudaCheck(cudaEventElapsedTime(&ms, v->prof_ev[2 * i], v->prof_ev[2 * i + 1]));
        pp_profile_add(v->run->prof, v->run->step, dir, v->p->code[i].stage, ms * 1e-3);
    }
}

static void exec(cuda_vm *v, const pp_instr *in)
{
    const pp_plan *p = v->p;
    const pp_model *m = &p->model;
    int S = (int)p->S, s = in->stage, n = 0;
    int nc = v->opts->no_compute; /* vm/vmbench.h: every operand and event, no kernel */
    /* the lane: COMPUTE, or COMPUTE2 for the second job of a pair */
    int lane = ST_COMPUTE, pair_pos = 0;
    if (pp_op(in->op)->kind == PP_KIND_COMPUTE && v->pair_left > 0) {
        pair_pos = 3 - v->pair_left--;
        if (pair_pos == 2)
            lane = ST_COMPUTE2;
    }
    cudaStream_t cs = v->st[lane];
    pp_cuda_model *cm = lane == ST_COMPUTE2 ? v->cm2 : v->cm;
    void *work = lane == ST_COMPUTE2 ? v->work2 : v->work;
    cvm_dep *d[PP_MAX_SLOTS + 2];
    switch ((pp_opcode)in->op) {
    case PP_OP_LoadMicroBatch: {
        int b = in->mb;
        void *tokens = use_slot(v, pp_slot(in, PP_ROLE_TOKENS), d, &n);
        /* the last copy out of this pinned buffer (a step ago) is done;
         * polled, so even this wait meets the watchdog */
        cvm_host_wait(v, v->tok_ev[b], "the last copy of a microbatch's tokens");
        if (!nc)
            pp_data_microbatch(v->ds, m, v->opts->seed, v->run->step, b, v->tok_host[b]);
        compute_begin(v, d, n, lane);
        if (!nc)
            cudaCheck(cudaMemcpyAsync(tokens, v->tok_host[b], pp_tokens_bytes(m),
                                      cudaMemcpyHostToDevice, cs));
        cudaCheck(cudaEventRecord(v->tok_ev[b], cs));
        break;
    }
    case PP_OP_Forward: {
        const void *x = use_slot(v, pp_slot(in, PP_ROLE_IN), d, &n);
        void *stash = use_slot(v, pp_slot(in, PP_ROLE_STASH), d, &n);
        float *out = use_slot(v, pp_slot(in, PP_ROLE_OUT), d, &n);
        const int32_t *tgt = use_slot(v, pp_slot(in, PP_ROLE_TGT), d, &n);
        const void *w = use_weights(v, s, pp_slot(in, PP_ROLE_WTS), d, &n);
        compute_begin(v, d, n, lane);
        prof_mark(v, in, 0, lane);
        if (!nc)
            pp_cuda_stage_forward(cm, m, S, s, w, x, tgt, stash, work, out,
                                  pp_loss_scale(m, (int)p->B));
        prof_mark(v, in, 1, lane);
        break;
    }
    case PP_OP_Backward: {
        const void *stash = use_slot(v, pp_slot(in, PP_ROLE_STASH), d, &n);
        const float *dout = use_slot(v, pp_slot(in, PP_ROLE_DOUT), d, &n);
        float *din = use_slot(v, pp_slot(in, PP_ROLE_DIN), d, &n);
        const void *w = use_weights(v, s, pp_slot(in, PP_ROLE_WTS), d, &n);
        float *g = use_grads(v, s, pp_slot(in, PP_ROLE_WGRAD), d, &n);
        compute_begin(v, d, n, lane);
        prof_mark(v, in, 0, lane);
        if (!nc)
            pp_cuda_stage_backward(cm, m, S, s, w, g, stash, work, dout, din);
        prof_mark(v, in, 1, lane);
        break;
    }
    case PP_OP_BackwardInput: {
        void *stash = use_slot(v, pp_slot(in, PP_ROLE_STASH), d, &n);
        const float *dout = use_slot(v, pp_slot(in, PP_ROLE_DOUT), d, &n);
        float *din = use_slot(v, pp_slot(in, PP_ROLE_DIN), d, &n);
        const void *w = use_weights(v, s, pp_slot(in, PP_ROLE_WTS), d, &n);
        compute_begin(v, d, n, lane);
        prof_mark(v, in, 0, lane);
        if (!nc)
            pp_cuda_stage_backward_input(cm, m, S, s, w, stash, work, dout, din);
        prof_mark(v, in, 1, lane);
        break;
    }
    case PP_OP_BackwardWeight: {
        const void *stash = use_slot(v, pp_slot(in, PP_ROLE_STASH), d, &n);
        float *g = use_grads(v, s, pp_slot(in, PP_ROLE_WGRAD), d, &n);
        compute_begin(v, d, n, lane);
        prof_mark(v, in, 0, lane);
        if (!nc)
            pp_cuda_stage_backward_weight(cm, m, S, s, g, stash, work);
        prof_mark(v, in, 1, lane);
        break;
    }
    case PP_OP_ZeroGrads: {
        void *g = use_slot(v, pp_slot(in, PP_ROLE_WGRAD), d, &n);
        compute_begin(v, d, n, lane);
        if (!nc)
            cudaCheck(cudaMemsetAsync(g, 0, pp_stage_param_count(m, S, s) * sizeof(float), cs));
        break;
    }
    case PP_OP_RecvWeightGrad: {
        cvm_transfer(v, in); /* into the tmp slot, on the up or down stream */
        const float *tmp = use_slot(v, pp_slot(in, PP_ROLE_TMP), d, &n);
        float *g = use_grads(v, s, -1, d, &n);
        compute_begin(v, d, n, lane);
        if (!nc)
            cudaCheck(pp_cu_add(g, tmp, pp_stage_param_count(m, S, s), cs));
        break;
    }
    case PP_OP_OptimizerStep: {
        /* params and the compute copy: param_dep, so the step waits for the
         * weight sends of the copy (and the jobs reading it) before it */
        (void)use_weights(v, s, -1, d, &n);
        float *w = v->params[s], *g = use_grads(v, s, -1, d, &n);
        const pp_optim *o = &v->opts->optim;
        size_t np = pp_stage_param_count(m, S, s);
        compute_begin(v, d, n, lane);
        prof_mark(v, in, 0, lane);
        /* bf16: the optimizer writes the compute copy in its own pass (for
         * fp32 the copy is the weights themselves) */
        uint16_t *copy = m->precision == PP_PREC_BF16 ? (uint16_t *)v->compute[s] : NULL;
        if (nc) /* --no-compute: no update */
            ;
        else if (m->optimizer == PP_OPT_ADAMW) /* the state is the compute stream's alone */
            cudaCheck(pp_cu_adamw_step(w, g, v->state[s], v->state[s] + np, np, v->run->step + 1,
                                       pp_optim_lr(o, v->run->step + 1), o->beta1, o->beta2,
                                       o->eps, o->weight_decay, copy, cs));
        else
            cudaCheck(pp_cu_sgd_step(w, g, np, pp_optim_lr(o, v->run->step + 1), copy, cs));
        prof_mark(v, in, 1, lane);
        cvm_params_changed(v, s);
        break;
    }
    case PP_OP_SendActivation:
    case PP_OP_RecvActivation:
    case PP_OP_SendGrad:
    case PP_OP_RecvGrad:
    case PP_OP_FetchWeights:
    case PP_OP_SendWeights:
    case PP_OP_SendWeightGrad:
    case PP_OP_ReduceGrads:
        cvm_transfer(v, in); /* records its own dependencies */
        break;
    case PP_OP_GroupStart:
    case PP_OP_GroupEnd:
        cvm_group(v, in->op == PP_OP_GroupStart);
        break;
    case PP_OP_Overlap: /* the next two jobs: see the header */
        v->pair_left = 2;
        break;
    case PP_OP_COUNT:
        break;
    }
    compute_end(v, d, n, pair_pos);
}

/* ---- the step loop -------------------------------------------------------------- */

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
static void finish_step(cuda_vm *v)
{
    static const char *name[ST_COUNT] = {"compute", "up", "down", "compute2"};
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

/* ---- the backend's interface (backend.h) ------------------------------------ */

static void cuda_destroy(void *be)
{
    teardown(be);
    free(be);
    running = NULL;
    pp_cuda_fatal_hook = NULL;
}

/* The device, then everything local (setup); not collective but for
 * pick_device's node split, which cannot fail. NULL with err. */
static void *cuda_create(pp_run *run, char *err, size_t errlen)
{
    cuda_vm *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *v = (cuda_vm){.run = run, .p = run->p, .ds = run->ds, .opts = run->opts,
                   .transport = run->opts->transport, .me = run->me};
    running = v;
    pp_cuda_fatal_hook = abort_everything;
    if (pick_device(v, err, errlen)) { /* no device to free anything on */
        free(v);
        running = NULL;
        pp_cuda_fatal_hook = NULL;
        return NULL;
    }
    if (setup(v, err, errlen)) {
        cuda_destroy(v);
        return NULL;
    }
    return v;
}

/* Communicators (collective), then the initial weights. */
static void cuda_connect(void *be)
{
    cvm_transport_connect(be);
    init_weights(be);
}

static unsigned long long cuda_allocated(void *be)
{
    return ((cuda_vm *)be)->allocated;
}

static void cuda_exec(void *be, const pp_instr *in)
{
    exec(be, in);
}

/* Every stream idle (polled under the watchdog), every send complete, the
 * step's job times collected; the loss, read without a wait. */
static double cuda_end_step(void *be)
{
    cuda_vm *v = be;
    finish_step(v);
    cvm_transport_drain(v);
    prof_collect(v);
    double loss = pp_cuda_loss_take(v->cm); /* the streams are idle: no wait */
    return v->cm2 ? loss + pp_cuda_loss_take(v->cm2) : loss;
}

static int cuda_link(void *be, size_t bytes, double *latency, double *bandwidth)
{
    return cvm_transport_link(be, bytes, latency, bandwidth);
}

/* The fp32 master, copied to the host. */
static void cuda_weights(void *be, int s, float *out)
{
    cuda_vm *v = be;
    size_t n = pp_stage_param_count(&v->p->model, (int)v->p->S, s);
    cudaCheck(cudaMemcpy(out, v->params[s], n * sizeof *out, cudaMemcpyDeviceToHost));
}

/* A checkpoint's copy of stage s (backend.h), after end_step: every stream
 * is idle, so blocking copies see the step's results. */
static void cuda_stage_get(void *be, int s, float *params, float *state, void *compute)
{
    cuda_vm *v = be;
    const pp_model *m = &v->p->model;
    int S = (int)v->p->S;
    size_t n = pp_stage_param_count(m, S, s);
    cudaCheck(cudaMemcpy(params, v->params[s], n * sizeof *params, cudaMemcpyDeviceToHost));
    if (state)
        cudaCheck(cudaMemcpy(state, v->state[s],
                             pp_optimizer_state_floats(m->optimizer) * n * sizeof *state,
                             cudaMemcpyDeviceToHost));
    if (compute)
        cudaCheck(cudaMemcpy(compute, v->compute[s], pp_stage_compute_bytes(m, S, s),
                             cudaMemcpyDeviceToHost));
}

/* --resume, before the first step: the copies then a device-wide
 * synchronisation, since the streams are non-blocking and do not wait for
 * the default stream's copies. */
static void cuda_stage_set(void *be, int s, const float *params, const float *state,
                           const void *compute)
{
    cuda_vm *v = be;
    const pp_model *m = &v->p->model;
    int S = (int)v->p->S;
    size_t n = pp_stage_param_count(m, S, s);
    cudaCheck(cudaMemcpy(v->params[s], params, n * sizeof *params, cudaMemcpyHostToDevice));
    if (state)
        cudaCheck(cudaMemcpy(v->state[s], state,
                             pp_optimizer_state_floats(m->optimizer) * n * sizeof *state,
                             cudaMemcpyHostToDevice));
    if (compute)
        cudaCheck(cudaMemcpy(v->compute[s], compute, pp_stage_compute_bytes(m, S, s),
                             cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize()); /* start-up only */
}

const pp_backend pp_backend_cuda = {
    .name = "cuda",
    .profile_overlap = -1.0, /* two streams: not measured */
    .create = cuda_create,
    .connect = cuda_connect,
    .allocated = cuda_allocated,
    .exec = cuda_exec,
    .end_step = cuda_end_step,
    .link = cuda_link,
    .weights = cuda_weights,
    .stage_get = cuda_stage_get,
    .stage_set = cuda_stage_set,
    .destroy = cuda_destroy,
};
