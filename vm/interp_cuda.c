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
 * The VM core (vm/core.h) holds what the cpu backend does alike: the
 * owned stages' state (allocated here through device_mem), overlapped
 * pairs' bookkeeping, checkpoints and --save's copies, and:
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
 * stream once the ranks agreed, and the host waits for them.
 *
 * --deterministic (vm/determ.h). A W job's weight gradients go to a zeroed
 * device buffer of its lane, copied to the core's host buffer for that
 * microbatch when the job is done (the host waits, as the mpi transport's
 * sends do); SendWeightGrad, RecvWeightGrad and ReduceGrads of a tracked
 * stage are the core's, on the host with MPI, and the OptimizerStep copies
 * the ordered sum to the device first. Hence --transport mpi (ppvm.c): every
 * transfer then blocks the host in plan order, these too.
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
     * and its workspace. */
    for (uint32_t k = 0; k < p->nslots; k++) {
        v->slot_dep[k].stream = -1;
        if (dev_alloc(&v->slot[k], p->slot_bytes[k], err, errlen) ||
            new_dep(&v->slot_dep[k], err, errlen))
            return -1;
        v->c.allocated += p->slot_bytes[k];
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
    free(v->nf_kind);
    free(v->nf_lane);
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
        pp_cuda_stage_init(v->cm, &p->model, S, s, v->opts->seed, v->c.params[s]);
        pp_cuda_stage_compute_copy(v->cm, &p->model, S, s, v->c.params[s], v->c.compute[s]);
        cudaCheck(cudaMemsetAsync(v->c.grads[s], 0, n * sizeof(float), v->st[ST_COMPUTE]));
        if (v->c.state[s]) /* AdamW's moments start at zero */
            cudaCheck(cudaMemsetAsync(v->c.state[s], 0,
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
    return v->c.compute[s];
}

/* Where a job accumulates weight gradients: its wgrad slot, or this rank's own. */
static float *use_grads(cuda_vm *v, int s, int k, cvm_dep **d, int *n)
{
    if (k >= 0)
        return use_slot(v, k, d, n);
    if (!(v->p->stage_role[s] & PP_ROLE_OWNER))
        return NULL; /* a stage without weights: no gradients either */
    d[(*n)++] = &v->grad_dep[s];
    return v->c.grads[s];
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
 * two events; a deferred OptimizerStep's (--skip-nonfinite) once commit ran
 * it (apply 1: what commit passes; 0 here, at the end of the step). */
static void prof_collect(cuda_vm *v, int deferred)
{
    for (uint32_t i = 0; v->run->prof && i < v->p->ninstr; i++) {
        const pp_instr *in = &v->p->code[i];
        int dir = pp_profile_dir(in);
        float ms = 0;
        if (dir < 0 || deferred != (in->op == PP_OP_OptimizerStep && v->opts->skip_nonfinite))
            continue;
        cudaCheck(cudaEventElapsedTime(&ms, v->prof_ev[2 * i], v->prof_ev[2 * i + 1]));
        pp_profile_add(v->run->prof, v->run->step, dir, in->stage, ms * 1e-3);
    }
}

/* ---- the non-finite check and its test hook (vm/core.c) ------------------------ */

/* The instruction's record on its lane's array (cuda_vm.nf_dev). */
static double *nf_record(cuda_vm *v, const pp_instr *in, int lane)
{
    size_t i = (size_t)(in - v->p->code);
    v->nf_lane[i] = lane == ST_COMPUTE2;
    return v->nf_dev[v->nf_lane[i]] + 2 * i;
}

/* Checks n floats of x (device) on the lane, after what wrote them; read at
 * the end of the step (read_checks). x may be NULL: nothing to check. */
static void check_finite(cuda_vm *v, const pp_instr *in, const float *x, size_t n,
                         pp_nf_kind kind, int lane)
{
    if (!x || v->c.nc)
        return;
    v->nf_kind[in - v->p->code] = (signed char)kind;
    cudaCheck(pp_cu_first_nonfinite(x, n, nf_record(v, in, lane), v->st[lane]));
}

/* PP_INJECT_NAN: a NaN into a float or a double of device memory, copied
 * from the host (the bits the cpu backend's NAN has). */
static void poison(cuda_vm *v, void *x, int is_double, int lane)
{
    static const float nanf_ = NAN;
    static const double nand_ = NAN;
    cudaCheck(cudaMemcpyAsync(x, is_double ? (const void *)&nand_ : (const void *)&nanf_,
                              is_double ? sizeof nand_ : sizeof nanf_, cudaMemcpyHostToDevice,
                              v->st[lane]));
}

/* PP_INJECT_NAN's din and wgrad: a backward job's input gradient or the
 * weight gradients it added to (either may be NULL: not written here). */
static void inject_grads(cuda_vm *v, const pp_instr *in, float *din, float *g, int lane)
{
    if (din && pp_vm_core_inject_here(&v->c, in, PP_INJECT_DIN))
        poison(v, din, 0, lane);
    if (g && pp_stage_param_count(&v->p->model, (int)v->p->S, in->stage) &&
        pp_vm_core_inject_here(&v->c, in, PP_INJECT_WGRAD))
        poison(v, g, 0, lane);
}

/* A forward's loss: the last stage moves its microbatch's loss out of the
 * context's sum into the instruction's record (the step's loss is their
 * sum: read_checks); PP_INJECT_NAN there, or into another stage's output. */
static void forward_done(cuda_vm *v, const pp_instr *in, pp_cuda_model *cm, float *out, int lane)
{
    int last = in->stage == (int)v->p->S - 1;
    if (v->c.nc)
        return;
    if (last) {
        double *rec = nf_record(v, in, lane);
        v->nf_kind[in - v->p->code] = PP_NF_LOSS;
        pp_cuda_loss_move(cm, rec);
        if (pp_vm_core_inject_here(&v->c, in, PP_INJECT_OUT))
            poison(v, rec, 1, lane);
    } else if (pp_vm_core_inject_here(&v->c, in, PP_INJECT_OUT)) {
        poison(v, out, 0, lane);
    }
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

/* Where job W(s,b) accumulates its weight gradients: its wgrad slot or the
 * owner's gradients; under --deterministic a zeroed device buffer of its
 * lane's, copied to the core's host buffer when the job is done (det_done). */
static float *wjob_grads(cuda_vm *v, int s, int k, int lane, cvm_dep **d, int *n)
{
    if (!pp_vm_core_det(&v->c, s))
        return use_grads(v, s, k, d, n);
    float *g = v->det_job[lane == ST_COMPUTE2];
    if (!v->c.nc)
        cudaCheck(cudaMemsetAsync(g, 0, pp_stage_param_count(&v->p->model, (int)v->p->S, s) *
                                           sizeof(float), v->st[lane]));
    return g;
}

/* W(s,b) is done on the lane: its gradient to the host (the host waits, as
 * the mpi transport's sends do), where the core sums it in order. */
static void det_done(cuda_vm *v, const pp_instr *in, const float *g, int lane)
{
    int s = in->stage;
    if (!pp_vm_core_det(&v->c, s) || v->c.nc)
        return;
    float *host = pp_vm_core_det_job(&v->c, s, in->mb);
    cudaCheck(cudaMemcpyAsync(host, g, pp_stage_param_count(&v->p->model, (int)v->p->S, s) *
                                           sizeof(float), cudaMemcpyDeviceToHost, v->st[lane]));
    cudaCheck(cudaEventRecord(v->det_ev, v->st[lane]));
    cvm_host_wait(v, v->det_ev, "a microbatch's weight gradients (--deterministic)");
    pp_vm_core_det_done(&v->c, s, in->mb);
}

/* ---- one instruction ---------------------------------------------------------- */

/* Stage s's update on the lane (its buffers' waits issued by the caller):
 * params, the compute copy and the optimizer state from the gradients,
 * which it zeroes; timed for --profile. */
static void update(cuda_vm *v, const pp_instr *in, int lane)
{
    const pp_model *m = &v->p->model;
    int s = in->stage;
    float *w = v->c.params[s], *g = v->c.grads[s];
    const pp_optim *o = &v->opts->optim;
    size_t np = pp_stage_param_count(m, (int)v->p->S, s);
    cudaStream_t cs = v->st[lane];
    prof_mark(v, in, 0, lane);
    /* bf16: the optimizer writes the compute copy in its own pass (for
     * fp32 the copy is the weights themselves) */
    uint16_t *copy = m->precision == PP_PREC_BF16 ? (uint16_t *)v->c.compute[s] : NULL;
    if (v->c.nc) /* --no-compute: no update */
        ;
    else if (m->optimizer == PP_OPT_ADAMW) /* the state is the compute stream's alone */
        cudaCheck(pp_cu_adamw_step(w, g, v->c.state[s], v->c.state[s] + np, np,
                                   v->run->step + 1, pp_optim_lr(o, v->run->step + 1), o->beta1,
                                   o->beta2, o->eps, o->weight_decay, copy, cs));
    else
        cudaCheck(pp_cu_sgd_step(w, g, np, pp_optim_lr(o, v->run->step + 1), copy, cs));
    prof_mark(v, in, 1, lane);
    cvm_params_changed(v, s);
}

static void exec(cuda_vm *v, const pp_instr *in)
{
    const pp_plan *p = v->p;
    const pp_model *m = &p->model;
    int S = (int)p->S, s = in->stage, n = 0;
    int nc = v->c.nc; /* vm/vmbench.h: every operand and event, no kernel */
    /* the lane: COMPUTE, or COMPUTE2 for the second job of a pair */
    int pair_pos = pp_vm_core_pair_pos(&v->c, in);
    int lane = pair_pos == 2 ? ST_COMPUTE2 : ST_COMPUTE;
    cudaStream_t cs = v->st[lane];
    pp_cuda_model *cm = lane == ST_COMPUTE2 ? v->cm2 : v->cm;
    void *work = lane == ST_COMPUTE2 ? v->work2 : v->work;
    size_t act = pp_act_bytes(m) / sizeof(float);
    cvm_dep *d[PP_MAX_SLOTS + 2];
    if (pp_vm_core_det(&v->c, s) &&
        (in->op == PP_OP_SendWeightGrad || in->op == PP_OP_RecvWeightGrad ||
         in->op == PP_OP_ReduceGrads)) {
        if (!nc)
            pp_vm_core_det_transfer(&v->c, in); /* host memory, MPI */
        return;
    }
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
        forward_done(v, in, cm, out, lane);
        break;
    }
    case PP_OP_Backward: {
        const void *stash = use_slot(v, pp_slot(in, PP_ROLE_STASH), d, &n);
        const float *dout = use_slot(v, pp_slot(in, PP_ROLE_DOUT), d, &n);
        float *din = use_slot(v, pp_slot(in, PP_ROLE_DIN), d, &n);
        const void *w = use_weights(v, s, pp_slot(in, PP_ROLE_WTS), d, &n);
        float *g = wjob_grads(v, s, pp_slot(in, PP_ROLE_WGRAD), lane, d, &n);
        compute_begin(v, d, n, lane);
        prof_mark(v, in, 0, lane);
        if (!nc)
            pp_cuda_stage_backward(cm, m, S, s, w, g, stash, work, dout, din);
        prof_mark(v, in, 1, lane);
        if (!nc)
            inject_grads(v, in, din, g, lane);
        check_finite(v, in, din, act, PP_NF_INPUT_GRAD, lane);
        det_done(v, in, g, lane);
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
        if (!nc)
            inject_grads(v, in, din, NULL, lane);
        check_finite(v, in, din, act, PP_NF_INPUT_GRAD, lane);
        break;
    }
    case PP_OP_BackwardWeight: {
        const void *stash = use_slot(v, pp_slot(in, PP_ROLE_STASH), d, &n);
        float *g = wjob_grads(v, s, pp_slot(in, PP_ROLE_WGRAD), lane, d, &n);
        compute_begin(v, d, n, lane);
        prof_mark(v, in, 0, lane);
        if (!nc)
            pp_cuda_stage_backward_weight(cm, m, S, s, g, stash, work);
        prof_mark(v, in, 1, lane);
        if (!nc)
            inject_grads(v, in, NULL, g, lane);
        det_done(v, in, g, lane);
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
        float *g = use_grads(v, s, -1, d, &n);
        size_t np = pp_stage_param_count(m, S, s);
        compute_begin(v, d, n, lane);
        if (pp_vm_core_det(&v->c, s) && !nc) /* the ordered sum, from the host */
            cudaCheck(cudaMemcpyAsync(g, pp_vm_core_det_sum(&v->c, s), np * sizeof(float),
                                      cudaMemcpyHostToDevice, cs));
        check_finite(v, in, g, np, PP_NF_WEIGHT_GRAD, lane);
        if (nc || !pp_vm_core_defer(&v->c, in)) /* --skip-nonfinite: until commit */
            update(v, in, lane);
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
    case PP_OP_Overlap: /* the next two jobs (see the header): the core counts them */
        break;
    case PP_OP_COUNT:
        break;
    }
    compute_end(v, d, n, pair_pos);
}

/* ---- the backend's interface (backend.h) ------------------------------------ */

/* Device memory for the core's per-stage state (core.h): allocated at
 * start-up, copied to and from the host between steps, when every stream
 * is idle, so blocking copies see the step's results. */
static void dev_release(void *ptr)
{
    cudaCheck(cudaFree(ptr));
}

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
static void dev_settle(void)
{
    cudaCheck(cudaDeviceSynchronize());
}

static const pp_vm_mem device_mem = {
    .host = 0, .alloc = dev_alloc, .release = dev_release, .to_host = dev_to_host,
    .from_host = dev_from_host, .settle = dev_settle,
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
    if (pp_vm_core_init(&v->c, run, &device_mem, err, errlen) || setup(v, err, errlen)) {
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
}

static void cuda_exec(void *be, const pp_instr *in)
{
    exec(be, in);
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
    prof_collect(v, 0);
    return read_checks(v);
}

/* --skip-nonfinite, once the ranks agreed: the step's deferred
 * OptimizerSteps run on the compute stream (timed for --profile as exec
 * would), or are dropped with their gradients, which the update would have
 * zeroed; then the host waits for them, so that what follows (a checkpoint,
 * --save) reads the result. */
static void cuda_commit(void *be, int apply)
{
    cuda_vm *v = be;
    cudaStream_t cs = v->st[ST_COMPUTE];
    for (int i = 0; i < v->c.ndeferred; i++) {
        const pp_instr *in = v->c.deferred[i];
        int s = in->stage;
        cvm_wait(v, &v->param_dep[s], ST_COMPUTE);
        cvm_wait(v, &v->grad_dep[s], ST_COMPUTE);
        if (apply)
            update(v, in, ST_COMPUTE);
        else
            cudaCheck(cudaMemsetAsync(v->c.grads[s], 0,
                                      pp_stage_param_count(&v->p->model, (int)v->p->S, s) *
                                          sizeof(float), cs));
        cvm_record(v, &v->param_dep[s], ST_COMPUTE);
        cvm_record(v, &v->grad_dep[s], ST_COMPUTE);
    }
    cudaCheck(cudaEventRecord(v->commit_ev, cs));
    cvm_host_wait(v, v->commit_ev, "the step's deferred optimizer updates");
    if (apply && v->c.ndeferred)
        prof_collect(v, 1);
    v->c.ndeferred = 0;
}

static int cuda_link(void *be, size_t bytes, double *latency, double *bandwidth)
{
    return cvm_transport_link(be, bytes, latency, bandwidth);
}

const pp_backend pp_backend_cuda = {
    .name = "cuda",
    .profile_overlap = -1.0, /* two streams: not measured */
    .create = cuda_create,
    .connect = cuda_connect,
    .allocated = pp_vm_core_allocated,
    .exec = cuda_exec,
    .end_step = cuda_end_step,
    .link = cuda_link,
    .weights = pp_vm_core_weights,
    .stage_get = pp_vm_core_stage_get,
    .stage_set = pp_vm_core_stage_set,
    .destroy = cuda_destroy,
    .nonfinite = pp_vm_core_nonfinite,
    .commit = cuda_commit,
};
