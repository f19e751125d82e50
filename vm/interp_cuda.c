/* interp_cuda.c - the interpreter on the cuda backend: one rank's
 * instruction stream on a GPU, with the nccl or the mpi transport (their
 * transfers are in vm/transport_cuda.c). The twin of vm/interp.c: the same
 * instructions, under the same driver (vm/driver.c: the step loop, the
 * memory line, --save, --profile; this file is the cuda implementation of
 * vm/backend.h).
 *
 * Memory. At start-up the rank allocates on the device its owned stages'
 * params, grads, optimizer state and (bf16) compute copies (the core's,
 * through device_mem), and the plan's slots, at exactly the plan's sizes,
 * and prints their sum as interp.c does; nothing is allocated in the step
 * loop. On the host it pins one token buffer per microbatch it loads and,
 * on the mpi transport, the staging buffers (not device memory, not
 * counted), and it keeps the non-finite check's records (device, not
 * counted either: the check's, not the plan's). All CUDA events are
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
 * The VM core (vm/core.h, vm/exec.c) holds what the cpu backend does
 * alike: the opcode dispatch, which decodes each instruction's operands and
 * calls this file's operations (cuda_ops: each resolves its operands'
 * events, op_begin waits for them on the lane, op_end records them),
 * --profile's timing (op_mark's events, read by op_elapsed at the end of
 * the step), the owned stages' state (allocated here through device_mem),
 * overlapped pairs' bookkeeping, checkpoints and --save's copies, and:
 *
 * Bad numbers (vm/core.c). The checks the cpu backend makes on the host
 * run here on the GPU, on the lane of the job that made the numbers: a
 * last-stage forward moves its microbatch's loss out of the context's sum
 * into the forward's record (pp_cuda_loss_move), a backward's input
 * gradient and a stage's summed gradients before its OptimizerStep go
 * through pp_cu_first_nonfinite into theirs. The records are one device
 * array per lane, read in one copy at the end of the step, when the streams
 * are idle (read_checks): the findings go to the core, and the step's loss
 * is the sum of its microbatches' records. PP_INJECT_NAN writes its NaN
 * with a copy on the lane. With --skip-nonfinite an OptimizerStep only
 * checks; commit runs the updates (or zeroes the gradients) on the compute
 * stream once the ranks agreed, and the host waits for them (a replayed
 * step decides and updates on the device: vm/graph_cuda.c).
 *
 * --deterministic (vm/determ.h). A W job's weight gradients go to a zeroed
 * device buffer of its lane, copied to the core's host buffer for that
 * microbatch when the job is done (the host waits, as the mpi transport's
 * sends do); SendWeightGrad, RecvWeightGrad and ReduceGrads of a tracked
 * stage are the core's, on the host with MPI, and the OptimizerStep copies
 * the ordered sum to the device first. Hence --transport mpi (ppvm.c): every
 * transfer then blocks the host in plan order, these too.
 *
 * Whole steps as CUDA graphs (vm/graph_cuda.c, ppvm --graph): where the run
 * allows, the driver's step is cvm_graph_step, which runs the instructions
 * below once under stream capture and replays the graph every step
 * (piecewise under --transport mpi: a graph between two transfers); then
 * op_load only copies the tokens the host put in the pinned buffer before
 * the launch, and op_update reads the step's lr from the device.
 *
 * --no-compute (issue 18, vm/vmbench.h): every instruction still takes its
 * operands, waits for and records their events, issues its transfers (one
 * float each, NCCL or MPI with its staging copies) and groups, but launches
 * no kernel and makes no microbatch: the host's own cost per instruction. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cuda_kernels.h"
#include "../kernels/finite_cuda.h"
#include "../kernels/model.h"
#include "check.h"
#include "graph_cuda.h"
#include "host_link_cuda.h"
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
    mpiCheck(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, v->me, MPI_INFO_NULL, &node));
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
    v->param_dep = calloc((size_t)S, sizeof *v->param_dep);
    v->grad_dep = calloc((size_t)S, sizeof *v->grad_dep);
    v->slot = calloc(p->nslots + 1, sizeof *v->slot);
    v->slot_dep = calloc(p->nslots + 1, sizeof *v->slot_dep);
    v->tok_host = calloc((size_t)B, sizeof *v->tok_host);
    v->tok_ev = calloc((size_t)B, sizeof *v->tok_ev);
    v->nf_host = calloc(4 * (size_t)p->ninstr + 1, sizeof *v->nf_host);
    v->nf_kind = calloc(p->ninstr + 1, sizeof *v->nf_kind);
    v->nf_lane = calloc(p->ninstr + 1, sizeof *v->nf_lane);
    if (!v->param_dep || !v->grad_dep || !v->slot || !v->slot_dep || !v->tok_host || !v->tok_ev ||
        !v->nf_host || !v->nf_kind || !v->nf_lane) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int s = 0; s < S; s++) {
        v->param_dep[s].stream = v->grad_dep[s].stream = -1;
        if (!(p->stage_role[s] & PP_ROLE_OWNER))
            continue;
        if (new_dep(&v->param_dep[s], err, errlen) || new_dep(&v->grad_dep[s], err, errlen))
            return -1;
    }
    /* All activation memory the step needs, allocated once: the plan's slots
     * and its workspace; offload's host slots pinned in host memory (the
     * copy stream's DMA needs it), counted on their own line. */
    v->host_slot = calloc(p->nslots + 1, 1);
    if (!v->host_slot)
        return -1;
    pp_plan_host_slots(p, v->host_slot);
    for (uint32_t k = 0; k < p->nslots; k++) {
        v->slot_dep[k].stream = -1;
        if (v->host_slot[k]) {
            TRY(cudaHostAlloc(&v->slot[k], p->slot_bytes[k], cudaHostAllocDefault));
            v->c.host_allocated += p->slot_bytes[k];
        } else if (dev_alloc(&v->slot[k], p->slot_bytes[k], err, errlen))
            return -1;
        else
            v->c.allocated += p->slot_bytes[k];
        if (new_dep(&v->slot_dep[k], err, errlen))
            return -1;
    }
    if (dev_alloc(&v->work, p->workspace_bytes, err, errlen))
        return -1;
    v->c.allocated += p->workspace_bytes;
    if (pp_plan_workspaces(p) > 1) { /* overlapped pairs: the second stream's own */
        if (pp_cuda_model_create(&v->cm2, v->st[ST_COMPUTE2], err, errlen) ||
            dev_alloc(&v->work2, p->workspace_bytes, err, errlen))
            return -1;
        pp_cuda_model_set_epilogues(v->cm2, !v->opts->no_epilogues);
        TRY(cudaEventCreateWithFlags(&v->pair_ev, cudaEventDisableTiming));
        v->c.allocated += p->workspace_bytes;
    }
    /* the non-finite check's records (not in the memory line: the check's,
     * not the plan's), and --deterministic's per-lane gradient */
    size_t nbig = 0;
    for (int s = 0; s < S; s++)
        if (pp_vm_core_det(&v->c, s) && pp_stage_param_count(m, S, s) > nbig)
            nbig = pp_stage_param_count(m, S, s);
    for (int lane = 0; lane < 1 + (v->cm2 != NULL); lane++)
        if (dev_alloc((void **)&v->nf_dev[lane], 2 * p->ninstr * sizeof(double), err, errlen) ||
            dev_alloc((void **)&v->det_job[lane], nbig * sizeof(float), err, errlen))
            return -1;
    TRY(cudaEventCreateWithFlags(&v->det_ev, cudaEventDisableTiming));
    TRY(cudaEventCreateWithFlags(&v->commit_ev, cudaEventDisableTiming));
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
    if (cvm_transport_setup(v, err, errlen))
        return -1;
    return cvm_graph_setup(v, err, errlen); /* after what it reads: tok_host, the transport */
}

/* Frees whatever setup and connect made; after a successful run the streams are idle. */
static void teardown(cuda_vm *v)
{
    const pp_plan *p = v->p;
    for (int i = 0; i < ST_COUNT; i++)
        if (v->st[i])
            cudaCheck(cudaStreamSynchronize(v->st[i]));
    cvm_graph_teardown(v);
    cvm_transport_teardown(v);
    if (v->cm)
        pp_cuda_model_destroy(v->cm);
    if (v->cm2)
        pp_cuda_model_destroy(v->cm2);
    cudaCheck(cudaFree(v->work2));
    if (v->pair_ev)
        cudaCheck(cudaEventDestroy(v->pair_ev));
    pp_vm_core_free(&v->c);
    for (uint32_t s = 0; s < p->S; s++) { /* either table may be missing */
        if (v->param_dep && v->param_dep[s].ev)
            cudaCheck(cudaEventDestroy(v->param_dep[s].ev));
        if (v->grad_dep && v->grad_dep[s].ev)
            cudaCheck(cudaEventDestroy(v->grad_dep[s].ev));
    }
    for (int lane = 0; lane < 2; lane++) {
        cudaCheck(cudaFree(v->nf_dev[lane]));
        cudaCheck(cudaFree(v->det_job[lane]));
    }
    if (v->det_ev)
        cudaCheck(cudaEventDestroy(v->det_ev));
    if (v->commit_ev)
        cudaCheck(cudaEventDestroy(v->commit_ev));
    free(v->nf_host);
    free(v->tp_host);
    free(v->nf_kind);
    free(v->nf_lane);
    for (uint32_t k = 0; v->slot && k < p->nslots; k++) {
        if (v->host_slot && v->host_slot[k]) {
            if (v->slot[k])
                cudaCheck(cudaFreeHost(v->slot[k]));
        } else
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
    free(v->param_dep);
    free(v->grad_dep);
    free(v->slot);
    free(v->host_slot);
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
        if (pp_model_tensor(&p->model) > 1) /* this rank's shard of the whole stage */
            pp_cuda_stage_init_shard(v->cm, &p->model, S, s, v->opts->seed,
                                     (int)(p->rank % pp_model_tensor(&p->model)), v->c.params[s]);
        else
            pp_cuda_stage_init(v->cm, &p->model, S, s, v->opts->seed, v->c.params[s]);
        pp_cuda_stage_compute_copy(v->cm, &p->model, S, s, v->c.params[s], v->c.compute[s]);
        cudaCheck(cudaMemsetAsync(v->c.grads[s], 0, n * sizeof(float), v->st[ST_COMPUTE]));
        if (v->c.state[s]) /* AdamW's moments start at zero (stage S-1's own part: tied.h) */
            cudaCheck(cudaMemsetAsync(v->c.state[s], 0,
                                      pp_optimizer_state_floats(p->model.optimizer) *
                                          pp_vm_core_own_count(&v->c, s) * sizeof(float),
                                      v->st[ST_COMPUTE]));
    }
    /* zeroed: step 1's first backward writes them too (vm/grads_zero.c), as
     * every later step's does, so a step captured at step 1 is every step */
    pp_vm_core_g_zero_all(&v->c);
    cudaCheck(cudaDeviceSynchronize()); /* start-up only */
}

/* ---- the operations the core's dispatch calls (core.h: pp_vm_ops) ----------- */

/* The operands of an operation on the compute lane: each returns the
 * device pointer and adds the buffer's dependency to the instruction's
 * (jd), which begin waits for and end records. */
static void *op_slot(void *be, int k)
{
    cuda_vm *v = be;
    v->jd[v->njd++] = &v->slot_dep[k];
    return v->slot[k];
}

/* This rank's own compute copy of stage s's weights. */
static const void *op_weights(void *be, int s)
{
    cuda_vm *v = be;
    if (!(v->p->stage_role[s] & PP_ROLE_OWNER))
        return NULL; /* a stage without weights (plancheck.c): nothing to order */
    v->jd[v->njd++] = &v->param_dep[s];
    if (cvm_tied_other(v, s) >= 0) /* stored once: the other tied stage's too */
        v->jd[v->njd++] = &v->param_dep[cvm_tied_other(v, s)];
    return v->c.compute[s];
}

/* This rank's own gradients of stage s. */
static float *op_grads(void *be, int s)
{
    cuda_vm *v = be;
    if (!(v->p->stage_role[s] & PP_ROLE_OWNER))
        return NULL; /* a stage without weights: no gradients either */
    v->jd[v->njd++] = &v->grad_dep[s];
    return v->c.grads[s];
}

/* The stream of the job's lane: COMPUTE, or COMPUTE2 for the second job of
 * an Overlap pair, with its own cuBLAS context and workspace. */
static int lane_of(const pp_vm_job *j) { return j->lane ? ST_COMPUTE2 : ST_COMPUTE; }

static pp_cuda_model *cm_of(cuda_vm *v, const pp_vm_job *j) { return j->lane ? v->cm2 : v->cm; }

static void *work_of(cuda_vm *v, const pp_vm_job *j) { return j->lane ? v->work2 : v->work; }

static cudaStream_t stream_of(cuda_vm *v, const pp_vm_job *j) { return v->st[lane_of(j)]; }

/* --deterministic: a W job's weight gradients go to a zeroed device
 * buffer of its lane's, copied to the core's host buffer when the job is
 * done (op_det_done). */
static float *op_det_grads(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    float *g = v->det_job[j->lane];
    if (!v->c.nc)
        cudaCheck(cudaMemsetAsync(g, 0, j->np * sizeof(float), stream_of(v, j)));
    return g;
}

/* Offload and Reload on the copy stream: it waits for the last operation
 * on either slot (the Forward that wrote the stash; a B that read the
 * device slot before a Reload refills it), copies, and records both
 * slots' events, so the next job on either waits for the copy. The plain
 * C reference is interp.c's op_host_copy (a memcpy). */
static void op_host_copy(void *be, const pp_vm_job *j, void *dst, const void *src, size_t bytes,
                         int to_host)
{
    cuda_vm *v = be;
    int s = pp_slot(j->in, PP_ROLE_SRC), d = pp_slot(j->in, PP_ROLE_DST);
    v->njd -= 2; /* the core's op_slot of dst and src: ordered here, not by a job's end */
    cvm_wait(v, &v->slot_dep[s], ST_COPY);
    cvm_wait(v, &v->slot_dep[d], ST_COPY);
    cudaCheck(cudaMemcpyAsync(dst, src, bytes,
                              to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                              v->st[ST_COPY]));
    cvm_record(v, &v->slot_dep[s], ST_COPY);
    cvm_record(v, &v->slot_dep[d], ST_COPY);
}

/* Before an operation on the compute lane: wait for its buffers' events. */
static void op_begin(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    for (int i = 0; i < v->njd; i++)
        cvm_wait(v, v->jd[i], lane_of(j));
}

/* After it: record its buffers' events. The first job of a pair defers
 * them until its partner has waited (see the header); after the partner,
 * COMPUTE joins COMPUTE2 and records both. */
static void op_end(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    if (j->pair == 1) {
        for (int i = 0; i < v->njd; i++)
            v->pair_dep[v->npair_dep++] = v->jd[i];
        v->njd = 0;
        return;
    }
    if (j->pair == 2) {
        cudaCheck(cudaEventRecord(v->pair_ev, v->st[ST_COMPUTE2]));
        cudaCheck(cudaStreamWaitEvent(v->st[ST_COMPUTE], v->pair_ev, 0));
        for (int i = 0; i < v->npair_dep; i++)
            cvm_record(v, v->pair_dep[i], ST_COMPUTE);
        v->npair_dep = 0;
    }
    for (int i = 0; i < v->njd; i++)
        cvm_record(v, v->jd[i], ST_COMPUTE);
    v->njd = 0;
}

/* A microbatch: made in its pinned buffer, copied to the tokens slot. */
static void op_load(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    const pp_model *m = &v->p->model;
    int b = j->b;
    cudaStream_t cs = stream_of(v, j);
    if (cvm_graph_hyper(v)) { /* captured: the host fills tok_host[b] before each replay */
        cudaCheck(cudaMemcpyAsync(j->tokens, v->tok_host[b], pp_tokens_bytes(m),
                                  cudaMemcpyHostToDevice, cs));
        return;
    }
    /* the last copy out of this pinned buffer (a step ago) is done;
     * polled, so even this wait meets the watchdog */
    cvm_host_wait(v, v->tok_ev[b], "the last copy of a microbatch's tokens");
    if (!v->c.nc) {
        pp_data_microbatch(v->ds, m, v->opts->seed, v->run->step, b, v->tok_host[b]);
        cudaCheck(cudaMemcpyAsync(j->tokens, v->tok_host[b], pp_tokens_bytes(m),
                                  cudaMemcpyHostToDevice, cs));
    }
    cudaCheck(cudaEventRecord(v->tok_ev[b], cs));
}

static double *nf_record(cuda_vm *v, const pp_vm_job *j);

static void op_forward(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    const pp_model *m = &v->p->model;
    pp_cuda_stage_forward(cm_of(v, j), m, (int)v->p->S, j->s, j->w, j->x, j->tgt, j->stash,
                          work_of(v, j), j->out, pp_loss_scale(m, (int)v->p->B));
    /* a re-run forward (Recompute) on the last stage added its loss to the
     * context's sum again: moved out into its own record, whose kind stays
     * 0, so read_checks counts it nowhere (F counted it; the cpu backend's
     * op_loss is simply not called) */
    if (j->in->op == PP_OP_Recompute && j->s == (int)v->p->S - 1)
        pp_cuda_loss_move(cm_of(v, j), nf_record(v, j));
}

static void op_backward(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    pp_cuda_model_grads_zero(cm_of(v, j), j->g_zero); /* beta 0 onto zeroed gradients */
    pp_cuda_stage_backward(cm_of(v, j), &v->p->model, (int)v->p->S, j->s, j->w, j->g, j->stash,
                           work_of(v, j), j->dout, j->din);
}

static void op_backward_input(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    pp_cuda_stage_backward_input(cm_of(v, j), &v->p->model, (int)v->p->S, j->s, j->w, j->stash,
                                 work_of(v, j), j->dout, j->din);
}

static void op_backward_weight(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    pp_cuda_model_grads_zero(cm_of(v, j), j->g_zero);
    pp_cuda_stage_backward_weight(cm_of(v, j), &v->p->model, (int)v->p->S, j->s, j->g, j->stash,
                                  work_of(v, j));
}

/* ---- the non-finite check and its test hook (vm/core.c) ------------------------ */

/* The instruction's record on its lane's array (cuda_vm.nf_dev). */
static double *nf_record(cuda_vm *v, const pp_vm_job *j)
{
    size_t i = (size_t)(j->in - v->p->code);
    v->nf_lane[i] = (unsigned char)j->lane;
    return v->nf_dev[v->nf_lane[i]] + 2 * i;
}

/* Checks n floats of x (device) on the lane, after what wrote them; read at
 * the end of the step (read_checks). */
static void op_check(void *be, const pp_vm_job *j, const float *x, size_t n, pp_nf_kind kind)
{
    cuda_vm *v = be;
    v->nf_kind[j->in - v->p->code] = (signed char)kind;
    cudaCheck(pp_cu_first_nonfinite(x, n, nf_record(v, j), stream_of(v, j)));
}

/* The same over n bf16 numbers (a bf16 run's input gradient). */
static void op_check_bf16(void *be, const pp_vm_job *j, const uint16_t *x, size_t n,
                          pp_nf_kind kind)
{
    cuda_vm *v = be;
    v->nf_kind[j->in - v->p->code] = (signed char)kind;
    cudaCheck(pp_cu_first_nonfinite_bf16(x, n, nf_record(v, j), stream_of(v, j)));
}

/* PP_INJECT_NAN: a NaN into a float or a double of device memory, copied
 * from the host (the bits the cpu backend's NAN has). */
static void poison(cuda_vm *v, const pp_vm_job *j, void *x, int is_double)
{
    static const float nanf_ = NAN;
    static const double nand_ = NAN;
    cudaCheck(cudaMemcpyAsync(x, is_double ? (const void *)&nand_ : (const void *)&nanf_,
                              is_double ? sizeof nand_ : sizeof nanf_, cudaMemcpyHostToDevice,
                              stream_of(v, j)));
}

static void op_poison(void *be, const pp_vm_job *j, float *x) { poison(be, j, x, 0); }

/* A forward's loss: the last stage moves its microbatch's loss out of the
 * context's sum into the instruction's record (the step's loss is their
 * sum: read_checks), poisoned there by PP_INJECT_NAN. */
static void op_loss(void *be, const pp_vm_job *j, int poison_it)
{
    cuda_vm *v = be;
    if (j->s != (int)v->p->S - 1)
        return; /* only the last stage makes a loss */
    double *rec = nf_record(v, j);
    v->nf_kind[j->in - v->p->code] = PP_NF_LOSS;
    pp_cuda_loss_move(cm_of(v, j), rec);
    if (poison_it)
        poison(v, j, rec, 1);
}

/* The end of a step, the streams idle: every record read, the findings
 * noted for the driver; returns the step's loss, its microbatches' in plan
 * order. */
static double read_checks(cuda_vm *v)
{
    const pp_plan *p = v->p;
    size_t n = 2 * (size_t)p->ninstr;
    double loss = 0;
    if (v->c.nc)
        return 0;
    for (int lane = 0; lane < 2 && n; lane++)
        if (v->nf_dev[lane])
            cudaCheck(cudaMemcpy(v->nf_host + lane * n, v->nf_dev[lane], n * sizeof(double),
                                 cudaMemcpyDeviceToHost));
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        const double *rec = v->nf_host + v->nf_lane[i] * n + 2 * i;
        int kind = v->nf_kind[i];
        v->nf_kind[i] = 0;
        if (kind == PP_NF_LOSS) {
            loss += rec[0];
            if (!isfinite(rec[0]))
                pp_vm_core_note(&v->c, PP_NF_LOSS, in->stage, in->mb, rec[0]);
        } else if (kind && rec[0] >= 0) {
            pp_vm_core_note(&v->c, kind, in->stage, kind == PP_NF_WEIGHT_GRAD ? -1 : in->mb,
                            rec[1]);
        }
    }
    return loss;
}

/* ---- --deterministic (vm/determ.h, through the core) ----------------------------- */

/* A W job is done on its lane: its gradient to the core's host buffer (the
 * host waits, as the mpi transport's sends do), where the core sums it in
 * order. */
static void op_det_done(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    float *host = pp_vm_core_det_job(&v->c, j->s, j->b);
    cudaCheck(cudaMemcpyAsync(host, j->g, j->np * sizeof(float), cudaMemcpyDeviceToHost,
                              stream_of(v, j)));
    cudaCheck(cudaEventRecord(v->det_ev, stream_of(v, j)));
    cvm_host_wait(v, v->det_ev, "a microbatch's weight gradients (--deterministic)");
}

/* The ordered sum, from the host, before the OptimizerStep. */
static void op_det_put(void *be, const pp_vm_job *j, const float *sum)
{
    cuda_vm *v = be;
    cudaCheck(
        cudaMemcpyAsync(j->g, sum, j->np * sizeof(float), cudaMemcpyHostToDevice, stream_of(v, j)));
}

/* ---- gradients, the optimizer, transfers, --profile ------------------------------ */

static void op_zero(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    cudaCheck(cudaMemsetAsync(j->g, 0, j->np * sizeof(float), stream_of(v, j)));
}

/* RecvWeightGrad's sum, once the tmp slot's receive is done. */
static void op_accumulate(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    cudaCheck(pp_cu_add(j->g, j->tmp, j->np, stream_of(v, j)));
}

/* Stage s's update on the lane (its buffers' waits issued by begin, on
 * param_dep too, so the step waits for the weight sends of the compute
 * copy and the jobs reading it): params, the compute copy and the
 * optimizer state from the gradients, which it zeroes. */
static void op_update(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    const pp_model *m = &v->p->model;
    int s = j->s;
    float *w = v->c.params[s], *g = v->c.grads[s];
    const pp_optim *o = &v->opts->optim;
    size_t np = j->np;
    cudaStream_t cs = stream_of(v, j);
    /* bf16: the optimizer writes the compute copy in its own pass (for
     * fp32 the copy is the weights themselves) */
    uint16_t *copy = m->precision == PP_PREC_BF16 ? (uint16_t *)v->c.compute[s] : NULL;
    /* a step captured as a graph reads its lr from the device (graph_cuda.c) */
    const pp_cu_step_hyper *hyper = cvm_graph_hyper(v);
    if (v->c.nc) /* --no-compute: no update */
        ;
    else if (hyper && m->optimizer == PP_OPT_ADAMW) /* (skip: --skip-nonfinite's device flag) */
        cudaCheck(pp_cu_adamw_step_dev(w, g, v->c.state[s], v->c.state[s] + np, np, hyper, o->beta1,
                                       o->beta2, o->eps, o->weight_decay, copy,
                                       cvm_graph_skip(v), cs));
    else if (hyper)
        cudaCheck(pp_cu_sgd_step_dev(w, g, np, hyper, copy, cvm_graph_skip(v), cs));
    else if (m->optimizer == PP_OPT_ADAMW) /* the state is the compute stream's alone */
        cudaCheck(pp_cu_adamw_step(w, g, v->c.state[s], v->c.state[s] + np, np, v->run->step + 1,
                                   pp_optim_lr(o, v->run->step + 1), o->beta1, o->beta2, o->eps,
                                   o->weight_decay, copy, cs));
    else
        cudaCheck(pp_cu_sgd_step(w, g, np, pp_optim_lr(o, v->run->step + 1), copy, cs));
    cvm_params_changed(v, s);
    if (cvm_tied_other(v, s) >= 0) /* its staged copy holds the tied tensor too */
        cvm_params_changed(v, cvm_tied_other(v, s));
}

/* Every transfer (vm/transport_cuda.c) records its own dependencies, on
 * the stream its data flows on. */
static void op_transfer(void *be, const pp_vm_job *j) { cvm_transfer(be, j->in); }

static void op_group(void *be, int start) { cvm_group(be, start); }

/* --profile: a timing event on the lane just before (end 0) or after (end
 * 1) a job's or an optimizer step's kernels, after its waits for other
 * streams. */
static void op_mark(void *be, const pp_vm_job *j, int end)
{
    cuda_vm *v = be;
    if (v->prof_ev)
        cudaCheck(cudaEventRecord(v->prof_ev[2 * (j->in - v->p->code) + end], stream_of(v, j)));
}

/* Once the streams are idle: the time between instruction i's events. */
static double op_elapsed(void *be, uint32_t i)
{
    cuda_vm *v = be;
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, v->prof_ev[2 * i], v->prof_ev[2 * i + 1]));
    return ms * 1e-3;
}

/* --skip-nonfinite: the host waits for commit's updates on the compute
 * stream, so that what follows (a checkpoint, --save) reads the result. */
static void op_committed(void *be)
{
    cuda_vm *v = be;
    if (cvm_graph_capturing(v)) /* the graph's own updates: end_step waits for them */
        return;
    cudaCheck(cudaEventRecord(v->commit_ev, v->st[ST_COMPUTE]));
    cvm_host_wait(v, v->commit_ev, "the step's deferred optimizer updates");
}

/* TensorReduce: the next job's all-reduces over this group, on the lane
 * the TensorReduce names (a pair's second job: lane 1, the group's second
 * communicator, from its own model context on COMPUTE2; isa/tensor_lane.h),
 * cvm_tensor_allreduce. The host issues a pair's first job whole before
 * the second, so v->tensor_lane is the lane of the job being issued; a
 * rank has one tensor group, so the hook stays set. */
static void op_tensor(void *be, const pp_vm_job *j)
{
    cuda_vm *v = be;
    v->tensor_group = j->in->group;
    v->tensor_lane = j->lane;
    pp_cuda_model_set_tensor(cm_of(v, j), cvm_tensor_allreduce, v);
}

static const pp_vm_ops cuda_ops = {
    .slot = op_slot,
    .weights = op_weights,
    .grads = op_grads,
    .det_grads = op_det_grads,
    .begin = op_begin,
    .end = op_end,
    .load = op_load,
    .forward = op_forward,
    .loss = op_loss,
    .backward = op_backward,
    .backward_input = op_backward_input,
    .backward_weight = op_backward_weight,
    .poison = op_poison,
    .check = op_check,
    .check_bf16 = op_check_bf16,
    .det_done = op_det_done,
    .det_put = op_det_put,
    .zero = op_zero,
    .accumulate = op_accumulate,
    .update = op_update,
    .send = op_transfer,
    .recv = op_transfer,
    .reduce = op_transfer,
    .tensor = op_tensor,
    .group = op_group,
    .mark = op_mark,
    .elapsed = op_elapsed,
    .committed = op_committed,
    .host_copy = op_host_copy,
};

/* ---- the backend's interface (backend.h) ------------------------------------ */

/* Device memory for the core's per-stage state (core.h): allocated at
 * start-up, copied to and from the host between steps, when every stream
 * is idle, so blocking copies see the step's results. */
static void dev_release(void *ptr) { cudaCheck(cudaFree(ptr)); }

static void dev_to_host(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void dev_from_host(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

/* --resume, before the first step: the streams are non-blocking and do not
 * wait for the default stream's copies. */
static void dev_settle(void) { cudaCheck(cudaDeviceSynchronize()); }

static const pp_vm_mem device_mem = {
    .host = 0,
    .alloc = dev_alloc,
    .release = dev_release,
    .to_host = dev_to_host,
    .from_host = dev_from_host,
    .settle = dev_settle,
};

static void cuda_destroy(void *be)
{
    teardown(be);
    free(be);
    running = NULL;
    pp_cuda_fatal_hook = NULL;
}

/* The device, then the core's state and everything local (setup); not
 * collective but for pick_device's node split, which cannot fail. NULL
 * with err. */
static void *cuda_create(pp_run *run, char *err, size_t errlen)
{
    cuda_vm *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *v = (cuda_vm){.run = run,
                   .p = run->p,
                   .ds = run->ds,
                   .opts = run->opts,
                   .transport = run->opts->transport,
                   .me = run->me};
    running = v;
    pp_cuda_fatal_hook = abort_everything;
    if (pick_device(v, err, errlen)) { /* no device to free anything on */
        free(v);
        running = NULL;
        pp_cuda_fatal_hook = NULL;
        return NULL;
    }
    if (pp_vm_core_init(&v->c, run, &device_mem, &cuda_ops, err, errlen) || setup(v, err, errlen)) {
        cuda_destroy(v);
        return NULL;
    }
    return v;
}

/* Communicators (collective), then the initial weights. */
static void cuda_connect(void *be)
{
    cuda_vm *v = be;
    cvm_transport_connect(v);
    pp_vm_core_connect(&v->c);
    init_weights(v);
    cvm_graph_report(v);
}

/* Every stream idle (polled under the watchdog), every send complete, the
 * step's job times collected, the non-finite check's records read; the
 * loss, summed from them. */
static double cuda_end_step(void *be)
{
    cuda_vm *v = be;
    cvm_finish_step(v);
    cvm_transport_drain(v);
    pp_vm_core_end_step(&v->c);
    pp_vm_core_prof_collect(&v->c, 0);
    return read_checks(v);
}

static int cuda_link(void *be, size_t bytes, size_t msg, double *latency, double *bandwidth,
                     double *burst)
{
    return cvm_transport_link(be, bytes, msg, latency, bandwidth, burst);
}

static int cuda_tensor_link(void *be, size_t bytes, double *latency, double *bandwidth)
{
    return cvm_tensor_link(be, bytes, latency, bandwidth);
}

/* --profile's host link (issue 26): host_link_cuda.c. */
static int cuda_host_link(void *be, size_t bytes, double *bandwidth)
{
    return cvm_host_link(be, bytes, bandwidth);
}

const pp_backend pp_backend_cuda = {
    .name = "cuda",
    .profile_overlap = -1.0, /* two streams: not measured */
    .create = cuda_create,
    .connect = cuda_connect,
    .allocated = pp_vm_core_allocated,
    .host_allocated = pp_vm_core_host_allocated,
    .exec = pp_vm_core_exec,
    .end_step = cuda_end_step,
    .link = cuda_link,
    .tensor_link = cuda_tensor_link,
    .host_link = cuda_host_link,
    .weights = pp_vm_core_weights,
    .stage_get = pp_vm_core_stage_get,
    .stage_set = pp_vm_core_stage_set,
    .destroy = cuda_destroy,
    .nonfinite = pp_vm_core_nonfinite,
    .commit = pp_vm_core_commit,
    .step = cvm_graph_step,
};
