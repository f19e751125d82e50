/* interp.c - the interpreter: one rank's instruction stream on the cpu
 * backend with the mpi transport.
 *
 * Sends are non-blocking (MPI_Isend from the slot); a slot with a send in
 * flight is waited on before any later instruction uses it, and every send is
 * complete at the end of the step. The compiler keeps a send's slot live past
 * the point where the simulation has the receiver take it, so that wait never
 * waits on a receiver that is itself waiting on us. Receives are posted
 * where the plan puts them or earlier (recv_ahead) and waited for at their
 * slot's next use, so the first job of an Overlap pair runs while the
 * second's input is still on its way (the simulator's pairs in turn).
 *
 * Weights: a rank holds (params, grads) only for stages it owns. A job on a
 * stage it does not own reads the weights a FetchWeights put in its `wts`
 * slot and accumulates weight gradients in its `wgrad` slot; SendWeights
 * posts this rank's own compute copy, which stays unchanged until the
 * OptimizerStep, which first waits for those sends.
 *
 * --deterministic (vm/determ.h): a job's weight gradients go to a zeroed
 * buffer of its own, which SendWeightGrad, RecvWeightGrad and ReduceGrads
 * move and the owner sums in microbatch order, the reference's; the wgrad
 * slots are then unused.
 *
 * Precision: jobs read a stage's compute copy (kernels/model.h). With fp32
 * that is params itself; with bf16 an owner also keeps a bf16 copy, made at
 * start-up and after each update, and fetches move that copy.
 *
 * Overlapped pairs (Overlap, isa/opcodes.h): the cpu backend runs the two
 * jobs one after the other, in plan order, as the simulator's overlap 1
 * assumes; the second uses the plan's second workspace, as on the cuda
 * backend, so both backends allocate the same (pp_plan_workspaces).
 *
 * This file is the cpu backend (vm/backend.h): vm/driver.c runs the step
 * loop, the memory line, --profile and --save around it. What both
 * backends do alike (decoding each instruction's operands and dispatching
 * it, per-stage state, the non-finite check's findings, PP_INJECT_NAN,
 * --skip-nonfinite's deferred updates and commit, --deterministic's
 * ordered sums, --profile's timing, checkpoints) is the VM core's
 * (vm/core.h, vm/exec.c); this file is the cpu's operations under it
 * (pp_vm_ops): host memory, the CPU kernels, MPI. Its numbers are in host
 * memory, so it checks them where they are made. --profile's marks are the
 * wall clock, taken after the waits for sends in flight from the job's
 * slots (op_slot), as the cuda backend marks its kernels after their waits.
 *
 * --no-compute (issue 18, vm/vmbench.h): the benchmark mode of the
 * interpreter's own cost. Every instruction still looks up its slots
 * (waiting for sends in flight from them), posts its transfers and
 * collectives and waits for weight sends before an OptimizerStep, but no
 * kernel body runs (no microbatch, forward, backward, zeroing, gradient
 * sum, finiteness check or update) and every message is one float. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/finite.h"
#include "../kernels/model.h"
#include "../kernels/tensor_shard.h"
#include "backend.h"
#include "check.h"
#include "core.h"
#include "profile.h"
#include "progress.h"
#include "tensor_stage.h"
#include "vm.h"
#include "vmbench.h"

/* How many activation and input-gradient sends may be in flight from
 * buffers of their own, and the largest message so staged (4 MiB a rank
 * at most: the transport's memory, as MPI's own buffers, not the plan's). */
#define PP_SEND_STAGES 4
#define PP_STAGE_MAX ((size_t)1 << 20)

typedef struct {
    pp_vm_core c; /* first: the core's hooks take the backend's state */
    pp_run *run;  /* the driver's: the step in progress, --profile */
    const pp_plan *p;
    const pp_train_opts *opts;
    void **slot; /* [nslots] */
    void *work;  /* the workspace every F and B uses in turn; with an Overlap
                                pair, two of them, work_stride bytes apart */
    size_t work_stride;
    pp_progress *pg;   /* the communication thread (vm/progress.h) */
    int *tk;           /* [nslots] the ticket of a send or receive in flight on the slot, or -1 */
    int *recv_in;      /* [nslots] --profile: the receive in flight into the slot, or -1 */
    pp_wake_log *wake; /* --profile: sends and receive waits for "wake" (profile_wake.c) */
    uint64_t job_end;  /* --profile: pp_vmbench_now at the last job's end */
    int *red;          /* [S] the ticket of the stage's all-reduce in flight, or -1 */
    MPI_Comm *comm;    /* [ngroups] MPI_COMM_NULL where not a member */
    int tensor_group;  /* tensor = T > 1: the group of the last TensorReduce */
    int tensor_lane;   /* and its lane (isa/tensor_lane.h) */
    MPI_Comm lane1;    /* lane 1 of the tensor group (Overlap pairs), or MPI_COMM_NULL */
    int *wsend;        /* tickets of the weight sends in flight (SendWeights) */
    int nwsend, wsend_cap; /* cap: the plan's SendWeights per step */
    /* receives posted ahead (see recv_ahead): the plan's receives in order,
     * the instruction after which each one's slot is free, the next one to
     * post, and which instructions' receives are posted */
    uint32_t *recvs, nrecvs, next_recv;
    uint32_t *free_after;  /* [ninstr] */
    unsigned char *posted; /* [ninstr] */
    double loss;           /* summed over this step's microbatches on this rank */
    double fwd_loss;       /* the last Forward's, until op_loss takes it */
    double *prof_t;        /* --profile: [2 * ninstr] the wall clock at each job's marks */
    int nc;                /* --no-compute (vm/vmbench.h): no kernel body, 4-byte messages */
    /* activations and input gradients leave from one of PP_SEND_STAGES
     * buffers of a message each (see stage_send), or from their slot when
     * stage is NULL */
    char *stage;
    size_t stage_bytes;
    int stage_tk[PP_SEND_STAGES]; /* the ticket of each buffer's send in flight, or -1 */
    int stage_next;
} vm;

/* A posted request, handed to the communication thread: its ticket. */
static int hand_over(vm *v, MPI_Request r)
{
    int t = pp_progress_add(v->pg, r);
    if (t < 0) { /* the capacity counts every request a step can have in flight */
        fprintf(stderr, "ppvm: rank %d: more transfers in flight than the plan allows\n",
                v->run->me);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return t;
}

/* Waits for a ticket (-1: none) and clears it. */
static void wait_ticket(vm *v, int *t)
{
    if (*t >= 0)
        PP_WAITED(v->nc || v->run->prof, &v->run->waited_ns, pp_progress_wait(v->pg, *t));
    *t = -1;
}

static void wait_weight_sends(vm *v)
{
    for (int i = 0; i < v->nwsend; i++)
        wait_ticket(v, &v->wsend[i]);
    v->nwsend = 0;
}

/* A message of `bytes` as sent: --no-compute moves one float
 * (PP_NO_COMPUTE_MSG_BYTES) or less, both sides alike. */
static int msg_bytes(const vm *v, size_t bytes)
{
    return (int)(v->nc && bytes > PP_NO_COMPUTE_MSG_BYTES ? PP_NO_COMPUTE_MSG_BYTES : bytes);
}

/* The same in floats, for the weight-gradient messages. */
static int msg_floats(const vm *v, size_t n)
{
    return msg_bytes(v, n * sizeof(float)) / (int)sizeof(float);
}

/* ---- the operations the core's dispatch calls (core.h: pp_vm_ops) ----------- */

/* A slot, once any send from it or receive into it in flight is complete
 * (--profile logs a receive's wait for "wake"). */
static void *op_slot(void *be, int k)
{
    vm *v = be;
    int r = v->wake ? v->recv_in[k] : -1;
    if (r < 0) {
        wait_ticket(v, &v->tk[k]);
        return v->slot[k];
    }
    uint64_t t0 = pp_vmbench_now();
    wait_ticket(v, &v->tk[k]);
    pp_wake_recv(v->wake, v->run->step, (uint32_t)r, v->p->slot_bytes[k], t0, pp_vmbench_now());
    v->recv_in[k] = -1;
    return v->slot[k];
}

/* --profile: the send of instruction `in` is posted ("wake"): an
 * activation or gradient as of the end of the job that made it (the last
 * job: a pair's sends follow it), when ppc's simulation has it leave, so
 * that what the rank does between the two counts too; anything else now. */
static void sent(vm *v, const pp_instr *in)
{
    int data = in->op == PP_OP_SendActivation || in->op == PP_OP_SendGrad;
    if (v->wake)
        pp_wake_send(v->wake, v->run->step, (uint32_t)(in - v->p->code),
                     data && v->job_end ? v->job_end : pp_vmbench_now());
}

static const void *op_weights(void *be, int s) { return ((vm *)be)->c.compute[s]; }

/* The own gradients, once the stage's all-reduce in flight is complete. */
static float *op_grads(void *be, int s)
{
    vm *v = be;
    wait_ticket(v, &v->red[s]);
    return v->c.grads[s];
}

/* --deterministic: the core's zeroed host buffer for the job. */
static float *op_det_grads(void *be, const pp_vm_job *j)
{
    return pp_vm_core_det_job(&((vm *)be)->c, j->s, j->b);
}

/* The workspace of the job's lane: an Overlap pair's second job has its own. */
static void *work_of(vm *v, const pp_vm_job *j)
{
    return (char *)v->work + (j->lane ? v->work_stride : 0);
}

static void op_load(void *be, const pp_vm_job *j)
{
    vm *v = be;
    if (!v->nc)
        pp_data_microbatch(v->c.ds, &v->p->model, v->opts->seed, v->run->step, j->b, j->tokens);
}

static void op_forward(void *be, const pp_vm_job *j)
{
    vm *v = be;
    v->fwd_loss = pp_stage_forward(&v->p->model, (int)v->p->S, j->s, j->w, j->x, j->tgt, j->stash,
                                   work_of(v, j), j->out);
}

static void op_loss(void *be, const pp_vm_job *j, int poison)
{
    vm *v = be;
    double loss = poison ? NAN : v->fwd_loss;
    if (!isfinite(loss))
        pp_vm_core_note(&v->c, PP_NF_LOSS, j->s, j->b, loss);
    v->loss += loss;
}

static void op_backward(void *be, const pp_vm_job *j)
{
    vm *v = be;
    const pp_model *m = &v->p->model;
    pp_stage_backward(m, (int)v->p->S, j->s, j->w, j->g, j->stash, work_of(v, j), j->dout, j->din,
                      pp_loss_scale(m, (int)v->p->B));
}

static void op_backward_input(void *be, const pp_vm_job *j)
{
    vm *v = be;
    const pp_model *m = &v->p->model;
    pp_stage_backward_input(m, (int)v->p->S, j->s, j->w, j->stash, work_of(v, j), j->dout, j->din,
                            pp_loss_scale(m, (int)v->p->B));
}

static void op_backward_weight(void *be, const pp_vm_job *j)
{
    vm *v = be;
    pp_stage_backward_weight(&v->p->model, (int)v->p->S, j->s, j->g, j->stash, work_of(v, j));
}

static void op_poison(void *be, const pp_vm_job *j, float *x)
{
    (void)be;
    (void)j;
    x[0] = NAN;
}

/* The first of n floats that is not finite, noted as `kind`. Its numbers
 * are in host memory: checked where they are made. */
static void op_check(void *be, const pp_vm_job *j, const float *x, size_t n, pp_nf_kind kind)
{
    vm *v = be;
    long long i = pp_first_nonfinite(x, n);
    if (i >= 0)
        pp_vm_core_note(&v->c, kind, j->s, kind == PP_NF_WEIGHT_GRAD ? -1 : j->b, x[i]);
}

/* The same over n bf16 numbers (a bf16 run's input gradient). */
static void op_check_bf16(void *be, const pp_vm_job *j, const uint16_t *x, size_t n,
                          pp_nf_kind kind)
{
    vm *v = be;
    long long i = pp_first_nonfinite_bf16(x, n);
    if (i >= 0)
        pp_vm_core_note(&v->c, kind, j->s, kind == PP_NF_WEIGHT_GRAD ? -1 : j->b,
                        pp_bf16_value(x[i]));
}

static void op_zero(void *be, const pp_vm_job *j)
{
    (void)be;
    memset(j->g, 0, j->np * sizeof(float));
}

static void op_accumulate(void *be, const pp_vm_job *j)
{
    (void)be;
    const float *tmp = j->tmp;
    for (size_t i = 0; i < j->np; i++)
        j->g[i] += tmp[i];
}

/* Stage s's update from its summed gradients (which it zeroes); under
 * --no-compute only the wait for weight sends. */
static void op_update(void *be, const pp_vm_job *j)
{
    vm *v = be;
    const pp_model *m = &v->p->model;
    int s = j->s;
    wait_weight_sends(v); /* the weights must not change under a send */
    if (v->nc)
        return;
    pp_optimizer_step(m->optimizer, &v->opts->optim, v->c.params[s], v->c.grads[s], v->c.state[s],
                      j->np, v->run->step + 1);
    pp_stage_compute_copy(m, (int)v->p->S, s, v->c.params[s], v->c.compute[s]);
}

/* An activation or input gradient from slot k, copied into the next
 * staging buffer (once that one's last send is complete) and sent from
 * there, so that the slot is free at once. The plans reuse a slot just
 * sent from as the next job's stash or output, and Open MPI moves a
 * message past its eager limit only once the receiver is in an MPI call:
 * without the copy the sender waited out the receiver's job, 80 us at
 * each of ZB-H2 S=2 B=8's forwards on 2 cpu ranks (its step 1.64-2.02 ms,
 * staged 1.23-1.96; 1F1B and GPipe 0-16% faster). */
static void stage_send(vm *v, int k, int peer, int tag)
{
    MPI_Request r;
    int b = v->stage_next, bytes = msg_bytes(v, pp_act_bytes(&v->p->model));
    v->stage_next = (b + 1) % PP_SEND_STAGES;
    wait_ticket(v, &v->stage_tk[b]);
    char *buf = v->stage + (size_t)b * v->stage_bytes;
    memcpy(buf, v->slot[k], (size_t)bytes);
    mpiCheck(MPI_Isend(buf, bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r));
    v->stage_tk[b] = hand_over(v, r);
}

/* Sends are non-blocking: from a slot (at most one in flight per slot,
 * waited for before the slot's next use) or, SendWeights, from the compute
 * copy (at most the plan's count in flight: wsend_cap). Every message's tag
 * is pp_transfer_tag's; its size the activation, the compute copy
 * (weights) or the fp32 gradients (weight gradients, as floats). */
static void op_send(void *be, const pp_vm_job *j)
{
    vm *v = be;
    const pp_plan *p = v->p;
    const pp_model *m = &p->model;
    int s = j->s, k = j->k, peer = j->in->peer, tag = pp_transfer_tag(p, j->in->op, s, j->b);
    MPI_Request r;
    if (j->in->op == PP_OP_SendWeights) {
        mpiCheck(MPI_Isend(v->c.compute[s], msg_bytes(v, pp_stage_compute_bytes(m, (int)p->S, s)),
                           MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r));
        v->wsend[v->nwsend++] = hand_over(v, r);
        sent(v, j->in);
        return;
    }
    op_slot(v, k); /* at most one transfer in flight per slot */
    int grads = j->in->op == PP_OP_SendWeightGrad || j->in->op == PP_OP_SendTiedGrad;
    if (!grads && v->stage) { /* an activation or input gradient, from a buffer of its own */
        stage_send(v, k, peer, tag);
        sent(v, j->in);
        return;
    }
    if (grads)
        mpiCheck(
            MPI_Isend(v->slot[k], msg_floats(v, j->np), MPI_FLOAT, peer, tag, MPI_COMM_WORLD, &r));
    else
        mpiCheck(MPI_Isend(v->slot[k], msg_bytes(v, pp_act_bytes(m)), MPI_BYTE, peer, tag,
                           MPI_COMM_WORLD, &r));
    v->tk[k] = hand_over(v, r);
    sent(v, j->in);
}

/* Posts instruction i's receive into its slot (whose earlier transfer, if
 * any, is complete); the slot's next use waits for it (op_slot). */
static void post_recv(vm *v, uint32_t i)
{
    const pp_plan *p = v->p;
    const pp_model *m = &p->model;
    const pp_instr *in = &p->code[i];
    int s = in->stage, op = in->op, k = pp_transfer_slot(in);
    void *dst = op_slot(v, k);
    int count = msg_bytes(v, pp_act_bytes(m)); /* RecvActivation, RecvGrad */
    MPI_Datatype type = MPI_BYTE;
    if (op == PP_OP_FetchWeights)
        count = msg_bytes(v, pp_stage_compute_bytes(m, (int)p->S, s));
    else if (op == PP_OP_RecvWeightGrad) {
        count = msg_floats(v, pp_stage_param_count(m, (int)p->S, s));
        type = MPI_FLOAT;
    } else if (op == PP_OP_RecvTiedGrad) {
        count = msg_floats(v, pp_tied_floats(m));
        type = MPI_FLOAT;
    }
    MPI_Request r;
    mpiCheck(MPI_Irecv(dst, count, type, in->peer, pp_transfer_tag(p, op, s, in->mb),
                       MPI_COMM_WORLD, &r));
    v->tk[k] = hand_over(v, r);
    v->recv_in[k] = (int)i;
    v->posted[i] = 1;
}

/* Receives posted ahead, so that the communication thread moves the data
 * while this rank computes: before instruction i runs, every receive of
 * the plan whose slot no instruction before it still uses (free_after <=
 * i) is posted, in the plan's order (MPI matches messages of one peer and
 * tag in posting order), stopping at the first whose slot still has a
 * transfer in flight. */
static void recv_ahead(vm *v, uint32_t i)
{
    while (v->next_recv < v->nrecvs) {
        uint32_t r = v->recvs[v->next_recv];
        int *t = &v->tk[pp_transfer_slot(&v->p->code[r])];
        if (v->free_after[r] > i || (*t >= 0 && !pp_progress_done(v->pg, *t)))
            return;
        post_recv(v, r);
        v->next_recv++;
    }
}

/* A receive: posted now unless recv_ahead posted it. */
static void op_recv(void *be, const pp_vm_job *j)
{
    vm *v = be;
    uint32_t i = (uint32_t)(j->in - v->p->code);
    if (v->posted[i])
        return;
    post_recv(v, i); /* every earlier receive is posted: this is next_recv */
    v->next_recv++;
}

/* With the communication thread, non-blocking: the stage's gradients are
 * waited for where they are next used (op_grads) or at the end of the
 * step, the thread progressing them meanwhile. Without it (each rank has a
 * core), the blocking MPI_Allreduce: nothing would progress a posted one
 * before its wait, and the plan's epilogue posts every stage's at once
 * (lower_epilogue), which Open MPI 4.1 runs slowly: two in-place
 * MPI_Iallreduce of 331 KB at once on 2 ranks in shared memory took
 * 440-500 us, one after the other 200-215, and MPI_Allreduce, which picks
 * another algorithm, 68-85 us each. */
static void op_reduce(void *be, const pp_vm_job *j)
{
    vm *v = be;
    MPI_Request r;
    wait_ticket(v, &v->red[j->s]);
    if (!pp_progress_threaded()) {
        PP_WAITED(v->nc || v->run->prof, &v->run->waited_ns,
                  mpiCheck(MPI_Allreduce(MPI_IN_PLACE, v->c.grads[j->s], msg_floats(v, j->np),
                                         MPI_FLOAT, MPI_SUM, v->comm[j->in->group])));
        return;
    }
    mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, v->c.grads[j->s], msg_floats(v, j->np), MPI_FLOAT,
                            MPI_SUM, v->comm[j->in->group], &r));
    v->red[j->s] = hand_over(v, r);
}

/* --profile: the wall clock at instruction i's two marks. */
static void op_mark(void *be, const pp_vm_job *j, int end)
{
    vm *v = be;
    v->prof_t[2 * (j->in - v->p->code) + end] = MPI_Wtime();
    if (end)
        v->job_end = pp_vmbench_now();
}

static double op_elapsed(void *be, uint32_t i)
{
    vm *v = be;
    return v->prof_t[2 * i + 1] - v->prof_t[2 * i];
}

/* Offload and Reload: a memory copy between a device slot and a host slot
 * (both host memory here; the host pool is counted apart, as on cuda). */
static void op_host_copy(void *be, const pp_vm_job *j, void *dst, const void *src, size_t bytes,
                         int to_host)
{
    (void)be;
    (void)j;
    (void)to_host;
    memcpy(dst, src, bytes);
}

/* GroupStart and GroupEnd: nothing (group NULL). Sends are already
 * non-blocking and posted in the plan's order, and a group's receives taken
 * one by one in that order are one of the executions the group allows, so
 * MPI needs no bracket. An Overlap pair's two jobs run in turn (see the
 * header). */
/* TensorReduce: the mlp blocks' all-reduces (kernels/tensor_shard.h) go
 * over this rank's tensor group from here on, on the lane the
 * TensorReduce names (an Overlap pair's second job: lane 1, its own
 * communicator; the pair's jobs run in turn here, but the lanes keep
 * each communicator's order the plan's, as on the cuda backend); a rank
 * has one tensor group, so the hook simply stays set for the rest of the
 * run. */
static void tensor_allreduce(void *ctx, float *buf, size_t n)
{
    vm *v = ctx;
    MPI_Comm comm = v->tensor_lane ? v->lane1 : v->comm[v->tensor_group];
    PP_WAITED(v->nc || v->run->prof, &v->run->waited_ns,
              mpiCheck(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm)));
}

static void op_tensor(void *be, const pp_vm_job *j)
{
    vm *v = be;
    v->tensor_group = j->in->group;
    v->tensor_lane = j->lane;
    pp_tensor_hook_set(tensor_allreduce, v);
}

static const pp_vm_ops cpu_ops = {
    .slot = op_slot,
    .weights = op_weights,
    .grads = op_grads,
    .det_grads = op_det_grads,
    .load = op_load,
    .forward = op_forward,
    .loss = op_loss,
    .backward = op_backward,
    .backward_input = op_backward_input,
    .backward_weight = op_backward_weight,
    .poison = op_poison,
    .check = op_check,
    .check_bf16 = op_check_bf16,
    .zero = op_zero,
    .accumulate = op_accumulate,
    .update = op_update,
    .send = op_send,
    .recv = op_recv,
    .reduce = op_reduce,
    .tensor = op_tensor,
    .mark = op_mark,
    .elapsed = op_elapsed,
    .host_copy = op_host_copy,
};

/* Host memory, for the core's per-stage state. */
static int host_alloc(void **ptr, size_t bytes, char *err, size_t errlen)
{
    *ptr = malloc(bytes ? bytes : 1);
    if (!*ptr)
        snprintf(err, errlen, "out of memory allocating weights and slots");
    return *ptr ? 0 : -1;
}

static void host_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static const pp_vm_mem host_mem = {
    .host = 1,
    .alloc = host_alloc,
    .release = free,
    .to_host = host_copy,
    .from_host = host_copy,
};

/* Each owned stage's initial weights, their compute copy, zero gradients
 * and optimizer state. 0, or -1 out of memory (a shard's whole stage). */
static int init_weights(vm *v)
{
    const pp_plan *p = v->p;
    int S = (int)p->S;
    for (int s = 0; s < S; s++) {
        if (!(p->stage_role[s] & PP_ROLE_OWNER))
            continue;
        size_t n = pp_stage_param_count(&p->model, S, s);
        if (pp_model_tensor(&p->model) > 1) { /* this rank's shard of the whole stage */
            if (pp_stage_shard_init(&p->model, S, s, v->opts->seed,
                                    (int)(p->rank % pp_model_tensor(&p->model)), v->c.params[s]))
                return -1;
        } else
            pp_stage_init(&p->model, S, s, v->opts->seed, v->c.params[s]);
        memset(v->c.grads[s], 0, n * sizeof(float));
        if (v->c.state[s]) /* (stage S-1's own part where the head is stored once) */
            memset(v->c.state[s], 0,
                   pp_optimizer_state_floats(p->model.optimizer) * pp_vm_core_own_count(&v->c, s) *
                       sizeof(float));
        if (v->c.compute[s] != v->c.params[s])
            pp_stage_compute_copy(&p->model, S, s, v->c.params[s], v->c.compute[s]);
    }
    return 0;
}

/* The plan's receives in order and, for each, the instruction after which
 * its slot is free: the last one before it in the step that touches the
 * slot (pp_instr_touches), plus one. --deterministic's weight-gradient
 * receives are its own (vm/determ.h) and not posted ahead. */
static void plan_receives(vm *v)
{
    const pp_plan *p = v->p;
    for (uint32_t r = 0; r < p->ninstr; r++) {
        const pp_instr *in = &p->code[r];
        int op = in->op;
        if (op != PP_OP_RecvActivation && op != PP_OP_RecvGrad && op != PP_OP_FetchWeights &&
            op != PP_OP_RecvWeightGrad)
            continue;
        if (op == PP_OP_RecvWeightGrad && pp_vm_core_det(&v->c, in->stage))
            continue;
        int k = pp_transfer_slot(in);
        uint32_t after = 0;
        for (uint32_t i = r; i-- > 0 && !after;) {
            pp_touch t[PP_MAX_TOUCH];
            int n = pp_instr_touches(&p->code[i], t);
            for (int e = 0; e < n; e++)
                if (t[e].kind == PP_BUF_SLOT && t[e].index == k)
                    after = i + 1;
        }
        v->free_after[r] = after;
        v->recvs[v->nrecvs++] = r;
    }
}

/* Everything a step needs beside the core's, at the plan's sizes; local.
 * 0, or -1 when out of memory (teardown frees what was made). */
static int setup(vm *v)
{
    const pp_plan *p = v->p;
    v->slot = calloc(p->nslots + 1, sizeof *v->slot);
    v->tk = malloc((p->nslots + 1) * sizeof *v->tk);
    v->recv_in = malloc((p->nslots + 1) * sizeof *v->recv_in);
    v->red = malloc((p->S + 1) * sizeof *v->red);
    v->recvs = malloc((p->ninstr + 1) * sizeof *v->recvs);
    v->free_after = calloc(p->ninstr + 1, sizeof *v->free_after);
    v->posted = calloc(p->ninstr + 1, 1);
    v->comm = malloc((p->ngroups + 1) * sizeof *v->comm);
    for (uint32_t g = 0; v->comm && g < p->ngroups; g++)
        v->comm[g] = MPI_COMM_NULL; /* until connect; teardown reads them */
    int acts = 0;                   /* activation and input-gradient sends */
    for (uint32_t i = 0; i < p->ninstr; i++) {
        v->wsend_cap += p->code[i].op == PP_OP_SendWeights;
        acts += p->code[i].op == PP_OP_SendActivation || p->code[i].op == PP_OP_SendGrad;
    }
    v->stage_bytes = (pp_act_bytes(&p->model) + 63) / 64 * 64;
    int staged = acts && v->stage_bytes <= PP_STAGE_MAX; /* stage_send's buffers */
    if (staged)
        v->stage = aligned_alloc(64, PP_SEND_STAGES * v->stage_bytes);
    for (int b = 0; b < PP_SEND_STAGES; b++)
        v->stage_tk[b] = -1;
    v->wsend = malloc(((size_t)v->wsend_cap + 1) * sizeof *v->wsend);
    if (v->opts->profile) {
        v->prof_t = calloc(2 * (size_t)p->ninstr + 1, sizeof *v->prof_t);
        v->wake = pp_wake_open(p, v->opts->steps, v->run->me);
    }
    if (!v->slot || !v->tk || !v->recv_in || !v->red || !v->recvs || !v->free_after || !v->posted ||
        !v->comm || !v->wsend || (v->opts->profile && (!v->prof_t || !v->wake)) ||
        (staged && !v->stage))
        return -1;
    for (uint32_t s = 0; s < p->S; s++)
        v->red[s] = -1;
    plan_receives(v);
    /* every request a step can have in flight: one per slot, the weight
     * sends, one all-reduce per stage, the staged sends */
    v->pg = pp_progress_new((int)(p->nslots + v->wsend_cap + p->S) + PP_SEND_STAGES + 1,
                            pp_progress_threaded());
    if (!v->pg)
        return -1;
    /* All activation memory the step needs, allocated once: the plan's slots
     * and its workspace; offload's host slots are the host pool, counted on
     * a line of their own (pp_plan_host_slots). */
    uint8_t *host = calloc(p->nslots + 1, 1);
    if (!host)
        return -1;
    pp_plan_host_slots(p, host);
    for (uint32_t k = 0; k < p->nslots; k++) {
        v->slot[k] = aligned_alloc(64, (p->slot_bytes[k] + 63) / 64 * 64);
        *(host[k] ? &v->c.host_allocated : &v->c.allocated) += p->slot_bytes[k];
        v->tk[k] = v->recv_in[k] = -1;
        if (!v->slot[k]) {
            free(host);
            return -1;
        }
    }
    free(host);
    v->work_stride = (p->workspace_bytes + 63) / 64 * 64;
    v->work = aligned_alloc(64, pp_plan_workspaces(p) * v->work_stride + 64); /* never 0 bytes */
    v->c.allocated += pp_plan_workspaces(p) * p->workspace_bytes;
    return v->work ? 0 : -1;
}

static void teardown(vm *v)
{
    const pp_plan *p = v->p;
    pp_vm_core_free(&v->c);
    for (uint32_t k = 0; v->slot && k < p->nslots; k++)
        free(v->slot[k]);
    free(v->work);
    for (uint32_t g = 0; v->comm && g < p->ngroups; g++)
        if (v->comm[g] != MPI_COMM_NULL)
            mpiCheck(MPI_Comm_free(&v->comm[g]));
    if (v->lane1 != MPI_COMM_NULL)
        mpiCheck(MPI_Comm_free(&v->lane1));
    pp_progress_free(v->pg);
    free(v->slot);
    free(v->tk);
    free(v->recv_in);
    pp_wake_free(v->wake);
    free(v->red);
    free(v->recvs);
    free(v->free_after);
    free(v->posted);
    free(v->comm);
    free(v->wsend);
    free(v->prof_t);
    free(v->stage);
}

/* ---- the backend's interface (backend.h) ------------------------------------ */

static void *cpu_create(pp_run *run, char *err, size_t errlen)
{
    vm *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory allocating weights and slots");
        return NULL;
    }
    *v = (vm){.run = run,
              .p = run->p,
              .opts = run->opts,
              .nc = run->opts->no_compute,
              .lane1 = MPI_COMM_NULL}; /* teardown reads it, whatever fails first */
    if (pp_vm_core_init(&v->c, run, &host_mem, &cpu_ops, err, errlen))
        goto fail;
    if (setup(v)) {
        snprintf(err, errlen, "out of memory allocating weights and slots");
        goto fail;
    }
    if (init_weights(v)) {
        snprintf(err, errlen, "out of memory initialising the tensor-parallel shards");
        goto fail;
    }
    return v;
fail:
    teardown(v);
    free(v);
    return NULL;
}

/* The replica groups' communicators: every rank has the same group table,
 * so these collective splits match. */
static void cpu_connect(void *be)
{
    vm *v = be;
    const pp_plan *p = v->p;
    int me = v->run->me;
    for (uint32_t g = 0; g < p->ngroups; g++) {
        int member = 0;
        for (uint32_t i = 0; i < p->groups[g].n; i++)
            member |= p->groups[g].member[i] == (uint32_t)me;
        mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, me, &v->comm[g]));
    }
    /* the tensor group's lane 1 (isa/tensor_lane.h): its members' plans
     * are one worker's, so all of them have a pair or none */
    if (pp_model_tensor(&p->model) > 1 && pp_plan_workspaces(p) > 1)
        mpiCheck(MPI_Comm_dup(v->comm[pp_tensor_group_of(p)], &v->lane1));
    pp_vm_core_connect(&v->c);
}

/* Every send of the step complete; the step's loss. */
static double cpu_end_step(void *be)
{
    vm *v = be;
    for (uint32_t k = 0; k < v->p->nslots; k++)
        wait_ticket(v, &v->tk[k]);
    for (uint32_t s = 0; s < v->p->S; s++)
        wait_ticket(v, &v->red[s]);
    for (int b = 0; b < PP_SEND_STAGES; b++)
        wait_ticket(v, &v->stage_tk[b]);
    wait_weight_sends(v);
    pp_vm_core_end_step(&v->c);
    pp_vm_core_prof_collect(&v->c, 0);
    if (v->run->prof)
        pp_profile_waited(v->run->prof, v->run->step, (double)v->run->waited_ns * 1e-9);
    double loss = v->loss;
    v->loss = 0;
    return loss;
}

/* One instruction: the receives whose slots are free posted first
 * (recv_ahead), then the core's dispatch. */
static void cpu_exec(void *be, const pp_instr *in)
{
    vm *v = be;
    uint32_t i = (uint32_t)(in - v->p->code);
    if (i == 0) { /* a new step: every transfer of the last one is complete */
        v->next_recv = 0;
        memset(v->posted, 0, v->p->ninstr);
    }
    recv_ahead(v, i);
    pp_vm_core_exec(be, in);
}

/* The link, then (collective, with it) "wake" from the steps' log. */
static int cpu_link(void *be, size_t bytes, size_t msg, double *latency, double *bandwidth,
                    double *burst)
{
    vm *v = be;
    int link = pp_profile_link_mpi(bytes, msg, latency, bandwidth, burst);
    if (link > 0) {
        double wake = pp_wake_finish(v->wake, *latency, *bandwidth);
        if (wake >= 0)
            pp_profile_wake(v->run->prof, wake);
    }
    return link;
}

static int cpu_link_shape(void *be, size_t bytes, double latency, double bandwidth, double burst)
{
    (void)be;
    return pp_profile_link_shape_mpi(bytes, latency, bandwidth, burst);
}

static int cpu_reduce_link(void *be, size_t bytes, double *latency, double *bandwidth)
{
    (void)be;
    return pp_profile_reduce_link_mpi(bytes, latency, bandwidth);
}

/* --profile's tensor link (issue 27): MPI_Allreduce over the rank's
 * tensor group's communicator, as tensor_allreduce makes it. */
typedef struct {
    float *buf;
    MPI_Comm comm;
} allreduce_probe;

static double allreduce_mpi(void *ctx, size_t bytes)
{
    const allreduce_probe *a = ctx;
    double t0 = MPI_Wtime();
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, a->buf, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM,
                           a->comm));
    return MPI_Wtime() - t0;
}

static int cpu_tensor_link(void *be, size_t bytes, double *latency, double *bandwidth)
{
    vm *v = be;
    if (pp_model_tensor(&v->p->model) < 2)
        return 0;
    allreduce_probe a = {calloc(bytes / sizeof(float) + 2, sizeof(float)),
                         v->comm[pp_tensor_group_of(v->p)]};
    if (!pp_vm_all_ok(a.buf != NULL, v->run->me, "out of memory for --profile's tensor probe"))
        return -1;
    pp_profile_allreduce_fit(allreduce_mpi, &a, bytes, 0, latency, bandwidth);
    free(a.buf);
    return 1;
}

/* --profile's host link (issue 26): Offload and Reload are memcpys here. */
static int cpu_host_link(void *be, size_t bytes, double *bandwidth)
{
    return pp_profile_host_link_cpu(((vm *)be)->run->me, bytes, bandwidth);
}

static void cpu_destroy(void *be)
{
    teardown(be);
    free(be);
}

const pp_backend pp_backend_cpu = {
    .name = "cpu",
    .profile_overlap = 1.0, /* a pair's jobs run one after the other */
    .create = cpu_create,
    .connect = cpu_connect,
    .allocated = pp_vm_core_allocated,
    .host_allocated = pp_vm_core_host_allocated,
    .exec = cpu_exec,
    .end_step = cpu_end_step,
    .link = cpu_link,
    .link_shape = cpu_link_shape,
    .reduce_link = cpu_reduce_link,
    .tensor_link = cpu_tensor_link,
    .host_link = cpu_host_link,
    .weights = pp_vm_core_weights,
    .stage_get = pp_vm_core_stage_get,
    .stage_set = pp_vm_core_stage_set,
    .destroy = cpu_destroy,
    .nonfinite = pp_vm_core_nonfinite,
    .commit = pp_vm_core_commit,
};
