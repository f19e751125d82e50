/* interp.c - the interpreter: one rank's instruction stream on the cpu
 * backend with the mpi transport.
 *
 * Sends are non-blocking (MPI_Isend from the slot); a slot with a send in
 * flight is waited on before any later instruction uses it, and every send is
 * complete at the end of the step. The compiler keeps a send's slot live past
 * the point where the simulation has the receiver take it, so that wait never
 * waits on a receiver that is itself waiting on us. Receives block where the
 * plan puts them.
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
 * loop, the memory line, --profile and --save around it. --profile times
 * each job and optimizer step by the wall clock, after its waits for sends
 * in flight from its slots.
 *
 * What both backends do alike (per-stage state, the non-finite check's
 * findings, PP_INJECT_NAN, --skip-nonfinite's deferred updates,
 * --deterministic's ordered sums, checkpoints) is the VM core's
 * (vm/core.h); this file is the cpu's device work under it: host memory,
 * the CPU kernels, MPI. Its numbers are in host memory, so it checks them
 * where they are made.
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
#include "backend.h"
#include "check.h"
#include "core.h"
#include "profile.h"
#include "vm.h"
#include "vmbench.h"

typedef struct {
    pp_vm_core c;            /* first: the core's hooks take the backend's state */
    pp_run *run;             /* the driver's: the step in progress, --profile */
    const pp_plan *p;
    const pp_train_opts *opts;
    void **slot;             /* [nslots] */
    void *work;              /* the workspace every F and B uses in turn; with an Overlap
                                pair, two of them, work_stride bytes apart */
    size_t work_stride;
    MPI_Request *req;        /* [nslots] a send in flight from the slot */
    MPI_Comm *comm;          /* [ngroups] MPI_COMM_NULL where not a member */
    MPI_Request *wsend;      /* weight sends in flight (SendWeights) */
    int nwsend, wsend_cap;   /* cap: the plan's SendWeights per step */
    double loss;             /* summed over this step's microbatches on this rank */
    int nc;                  /* --no-compute (vm/vmbench.h): no kernel body, 4-byte messages */
} vm;

/* The first of n floats that is not finite, noted as `kind`; x may be NULL
 * (a first stage's input gradient). */
static void check_finite(vm *v, const float *x, size_t n, pp_nf_kind kind, int s, int b)
{
    long long i = pp_first_nonfinite(x, n);
    if (i >= 0)
        pp_vm_core_note(&v->c, kind, s, b, x[i]);
}


static void wait_weight_sends(vm *v)
{
    if (v->nwsend)
        PP_WAITED(v->nc, &v->run->waited_ns,
                  mpiCheck(MPI_Waitall(v->nwsend, v->wsend, MPI_STATUSES_IGNORE)));
    v->nwsend = 0;
}

static void *slot_ptr(vm *v, int k)
{
    if (k < 0)
        return NULL;
    if (v->req[k] != MPI_REQUEST_NULL)
        PP_WAITED(v->nc, &v->run->waited_ns, mpiCheck(MPI_Wait(&v->req[k], MPI_STATUS_IGNORE)));
    return v->slot[k];
}

/* Wait for any send still in flight from the instruction's slots, as
 * slot_ptr would inside it: --profile times a job from after these waits,
 * as the cuda backend times its kernels after their waits. */
static void settle_slots(vm *v, const pp_instr *in)
{
    for (int k = 0; k < PP_MAX_SLOTS; k++)
        (void)slot_ptr(v, in->slot[k]);
}

static const void *weights_of(vm *v, int s, int slot)
{
    return slot >= 0 ? slot_ptr(v, slot) : v->c.compute[s];
}

static float *grads_of(vm *v, int s, int slot)
{
    return slot >= 0 ? slot_ptr(v, slot) : v->c.grads[s];
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

/* Stage s's update from its summed gradients (which it zeroes). */
static void optimizer_step(vm *v, int s)
{
    const pp_model *m = &v->p->model;
    int S = (int)v->p->S;
    wait_weight_sends(v); /* the weights must not change under a send */
    pp_optimizer_step(m->optimizer, &v->opts->optim, v->c.params[s], v->c.grads[s],
                      v->c.state[s], pp_stage_param_count(m, S, s), v->run->step + 1);
    pp_stage_compute_copy(m, S, s, v->c.params[s], v->c.compute[s]);
}

/* PP_INJECT_NAN's din and wgrad: a backward job's input gradient or the
 * weight gradients it added to (either may be NULL: not written here). */
static void inject_grads(vm *v, const pp_instr *in, float *din, float *g)
{
    if (din && pp_vm_core_inject_here(&v->c, in, PP_INJECT_DIN))
        din[0] = NAN;
    if (g && pp_stage_param_count(&v->p->model, (int)v->p->S, in->stage) &&
        pp_vm_core_inject_here(&v->c, in, PP_INJECT_WGRAD))
        g[0] = NAN;
}

/* Where job W(s,b) accumulates its weight gradients: its wgrad slot or the
 * owner's gradients; under --deterministic, a zeroed buffer of its own. */
static float *wjob_grads(vm *v, int s, int b, int slot)
{
    if (pp_vm_core_det(&v->c, s))
        return pp_vm_core_det_job(&v->c, s, b);
    return grads_of(v, s, slot);
}

/* W(s,b) is done: --deterministic adds what is next in order. */
static void wjob_done(vm *v, int s, int b)
{
    if (pp_vm_core_det(&v->c, s))
        pp_vm_core_det_done(&v->c, s, b);
}

static void exec(vm *v, const pp_instr *in)
{
    const pp_plan *p = v->p;
    const pp_model *m = &p->model;
    int S = (int)p->S, s = in->stage, b = in->mb;
    size_t act = pp_act_bytes(m);
    void *work = v->work;
    if (pp_vm_core_pair_pos(&v->c, in) == 2)
        work = (char *)v->work + v->work_stride; /* the pair's second job */
    switch ((pp_opcode)in->op) {
    case PP_OP_LoadMicroBatch: {
        void *tokens = slot_ptr(v, pp_slot(in, PP_ROLE_TOKENS));
        if (!v->nc)
            pp_data_microbatch(v->c.ds, m, v->opts->seed, v->run->step, b, tokens);
        break;
    }
    case PP_OP_Forward: {
        const void *x = slot_ptr(v, pp_slot(in, PP_ROLE_IN));
        void *stash = slot_ptr(v, pp_slot(in, PP_ROLE_STASH));
        float *out = slot_ptr(v, pp_slot(in, PP_ROLE_OUT));
        const int32_t *tgt = slot_ptr(v, pp_slot(in, PP_ROLE_TGT));
        const void *w = weights_of(v, s, pp_slot(in, PP_ROLE_WTS));
        if (v->nc)
            break;
        double loss = pp_stage_forward(m, S, s, w, x, tgt, stash, work, out);
        if (pp_vm_core_inject_here(&v->c, in, PP_INJECT_OUT)) {
            if (s == S - 1)
                loss = NAN;
            else
                out[0] = NAN;
        }
        if (!isfinite(loss))
            pp_vm_core_note(&v->c, PP_NF_LOSS, s, b, loss);
        v->loss += loss;
        break;
    }
    case PP_OP_Backward: {
        const void *stash = slot_ptr(v, pp_slot(in, PP_ROLE_STASH));
        const float *dout = slot_ptr(v, pp_slot(in, PP_ROLE_DOUT));
        float *din = slot_ptr(v, pp_slot(in, PP_ROLE_DIN));
        float *g = wjob_grads(v, s, b, pp_slot(in, PP_ROLE_WGRAD));
        const void *w = weights_of(v, s, pp_slot(in, PP_ROLE_WTS));
        if (v->nc)
            break;
        pp_stage_backward(m, S, s, w, g, stash, work, dout, din, pp_loss_scale(m, (int)p->B));
        inject_grads(v, in, din, g);
        check_finite(v, din, act / sizeof(float), PP_NF_INPUT_GRAD, s, b);
        wjob_done(v, s, b);
        break;
    }
    case PP_OP_BackwardInput: {
        void *stash = slot_ptr(v, pp_slot(in, PP_ROLE_STASH));
        const float *dout = slot_ptr(v, pp_slot(in, PP_ROLE_DOUT));
        float *din = slot_ptr(v, pp_slot(in, PP_ROLE_DIN));
        const void *w = weights_of(v, s, pp_slot(in, PP_ROLE_WTS));
        if (v->nc)
            break;
        pp_stage_backward_input(m, S, s, w, stash, work, dout, din, pp_loss_scale(m, (int)p->B));
        inject_grads(v, in, din, NULL);
        check_finite(v, din, act / sizeof(float), PP_NF_INPUT_GRAD, s, b);
        break;
    }
    case PP_OP_BackwardWeight: {
        float *g = wjob_grads(v, s, b, pp_slot(in, PP_ROLE_WGRAD));
        void *stash = slot_ptr(v, pp_slot(in, PP_ROLE_STASH));
        if (v->nc)
            break;
        pp_stage_backward_weight(m, S, s, g, stash, work);
        inject_grads(v, in, NULL, g);
        wjob_done(v, s, b);
        break;
    }
    case PP_OP_SendActivation:
    case PP_OP_SendGrad: {
        int k = pp_slot(in, PP_ROLE_SRC);
        slot_ptr(v, k); /* at most one send in flight per slot */
        mpiCheck(MPI_Isend(v->slot[k], msg_bytes(v, act), MPI_BYTE, in->peer,
                           pp_transfer_tag(p, in->op, s, b),
                           MPI_COMM_WORLD, &v->req[k]));
        break;
    }
    case PP_OP_RecvActivation:
    case PP_OP_RecvGrad: {
        void *dst = slot_ptr(v, pp_slot(in, PP_ROLE_DST));
        PP_WAITED(v->nc, &v->run->waited_ns,
                  mpiCheck(MPI_Recv(dst, msg_bytes(v, act), MPI_BYTE, in->peer,
                                    pp_transfer_tag(p, in->op, s, b), MPI_COMM_WORLD, MPI_STATUS_IGNORE)));
        break;
    }
    case PP_OP_FetchWeights: {
        void *wts = slot_ptr(v, pp_slot(in, PP_ROLE_WTS));
        PP_WAITED(v->nc, &v->run->waited_ns,
                  mpiCheck(MPI_Recv(wts, msg_bytes(v, pp_stage_compute_bytes(m, S, s)), MPI_BYTE,
                                    in->peer, pp_transfer_tag(p, in->op, s, -1), MPI_COMM_WORLD,
                                    MPI_STATUS_IGNORE)));
        break;
    }
    case PP_OP_SendWeights: /* at most the plan's count in flight: wsend_cap */
        mpiCheck(MPI_Isend(v->c.compute[s], msg_bytes(v, pp_stage_compute_bytes(m, S, s)), MPI_BYTE,
                           in->peer, pp_transfer_tag(p, in->op, s, -1), MPI_COMM_WORLD,
                           &v->wsend[v->nwsend++]));
        break;
    case PP_OP_ZeroGrads: {
        void *g = slot_ptr(v, pp_slot(in, PP_ROLE_WGRAD));
        if (!v->nc)
            memset(g, 0, pp_stage_param_count(m, S, s) * sizeof(float));
        break;
    }
    case PP_OP_SendWeightGrad: {
        int k = pp_slot(in, PP_ROLE_WGRAD);
        if (pp_vm_core_det(&v->c, s)) {
            pp_vm_core_det_transfer(&v->c, in);
            break;
        }
        slot_ptr(v, k);
        mpiCheck(MPI_Isend(v->slot[k], msg_floats(v, pp_stage_param_count(m, S, s)), MPI_FLOAT, in->peer,
                           pp_transfer_tag(p, in->op, s, -1), MPI_COMM_WORLD, &v->req[k]));
        break;
    }
    case PP_OP_RecvWeightGrad: {
        size_t n = pp_stage_param_count(m, S, s);
        float *tmp = slot_ptr(v, pp_slot(in, PP_ROLE_TMP)), *g = v->c.grads[s];
        if (pp_vm_core_det(&v->c, s)) {
            pp_vm_core_det_transfer(&v->c, in);
            break;
        }
        PP_WAITED(v->nc, &v->run->waited_ns,
                  mpiCheck(MPI_Recv(tmp, msg_floats(v, n), MPI_FLOAT, in->peer,
                                    pp_transfer_tag(p, in->op, s, -1), MPI_COMM_WORLD, MPI_STATUS_IGNORE)));
        for (size_t i = 0; !v->nc && i < n; i++)
            g[i] += tmp[i];
        break;
    }
    case PP_OP_ReduceGrads:
        if (pp_vm_core_det(&v->c, s)) {
            pp_vm_core_det_transfer(&v->c, in);
            break;
        }
        PP_WAITED(v->nc, &v->run->waited_ns,
                  mpiCheck(MPI_Allreduce(MPI_IN_PLACE, v->c.grads[s],
                                         msg_floats(v, pp_stage_param_count(m, S, s)), MPI_FLOAT,
                                         MPI_SUM, v->comm[in->group])));
        break;
    case PP_OP_Overlap: /* the pair's two jobs run in turn (see the header): the core
                           counts them */
        break;
    case PP_OP_GroupStart:
    case PP_OP_GroupEnd:
        /* Sends are already non-blocking and posted in the plan's order, and
         * a group's receives taken one by one in that order are one of the
         * executions the group allows, so MPI needs no bracket. */
        break;
    case PP_OP_OptimizerStep:
        if (v->nc) { /* no update; the waits it makes for weight sends stay */
            wait_weight_sends(v);
            break;
        }
        if (pp_vm_core_det(&v->c, s))
            (void)pp_vm_core_det_sum(&v->c, s); /* summed into grads[s] in microbatch order */
        check_finite(v, v->c.grads[s], pp_stage_param_count(m, S, s), PP_NF_WEIGHT_GRAD, s, -1);
        if (!pp_vm_core_defer(&v->c, in)) /* --skip-nonfinite: until the ranks agree */
            optimizer_step(v, s);
        break;
    case PP_OP_COUNT:
        break;
    }
}

/* Host memory, for the core's per-stage state. */
static int host_alloc(void **ptr, size_t bytes, char *err, size_t errlen)
{
    *ptr = malloc(bytes ? bytes : 1);
    if (!*ptr)
        snprintf(err, errlen, "out of memory allocating weights and slots");
    return *ptr ? 0 : -1;
}

static void host_copy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}

static const pp_vm_mem host_mem = {
    .host = 1, .alloc = host_alloc, .release = free, .to_host = host_copy, .from_host = host_copy,
};

/* Each owned stage's initial weights, their compute copy, zero gradients
 * and optimizer state. */
static void init_weights(vm *v)
{
    const pp_plan *p = v->p;
    int S = (int)p->S;
    for (int s = 0; s < S; s++) {
        if (!(p->stage_role[s] & PP_ROLE_OWNER))
            continue;
        size_t n = pp_stage_param_count(&p->model, S, s);
        pp_stage_init(&p->model, S, s, v->opts->seed, v->c.params[s]);
        memset(v->c.grads[s], 0, n * sizeof(float));
        if (v->c.state[s])
            memset(v->c.state[s], 0, pp_optimizer_state_floats(p->model.optimizer) * n *
                                         sizeof(float));
        if (v->c.compute[s] != v->c.params[s])
            pp_stage_compute_copy(&p->model, S, s, v->c.params[s], v->c.compute[s]);
    }
}

/* Everything a step needs beside the core's, at the plan's sizes; local.
 * 0, or -1 when out of memory (teardown frees what was made). */
static int setup(vm *v)
{
    const pp_plan *p = v->p;
    v->slot = calloc(p->nslots + 1, sizeof *v->slot);
    v->req = malloc((p->nslots + 1) * sizeof *v->req);
    v->comm = malloc((p->ngroups + 1) * sizeof *v->comm);
    for (uint32_t g = 0; v->comm && g < p->ngroups; g++)
        v->comm[g] = MPI_COMM_NULL; /* until connect; teardown reads them */
    for (uint32_t i = 0; i < p->ninstr; i++)
        v->wsend_cap += p->code[i].op == PP_OP_SendWeights;
    v->wsend = malloc(((size_t)v->wsend_cap + 1) * sizeof *v->wsend);
    if (!v->slot || !v->req || !v->comm || !v->wsend)
        return -1;
    /* All activation memory the step needs, allocated once: the plan's slots
     * and its workspace. */
    for (uint32_t k = 0; k < p->nslots; k++) {
        v->slot[k] = aligned_alloc(64, (p->slot_bytes[k] + 63) / 64 * 64);
        v->c.allocated += p->slot_bytes[k];
        v->req[k] = MPI_REQUEST_NULL;
        if (!v->slot[k])
            return -1;
    }
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
    free(v->slot);
    free(v->req);
    free(v->comm);
    free(v->wsend);
}

/* ---- the backend's interface (backend.h) ------------------------------------ */

static void *cpu_create(pp_run *run, char *err, size_t errlen)
{
    vm *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory allocating weights and slots");
        return NULL;
    }
    *v = (vm){.run = run, .p = run->p, .opts = run->opts, .nc = run->opts->no_compute};
    if (pp_vm_core_init(&v->c, run, &host_mem, err, errlen))
        goto fail;
    if (setup(v)) {
        snprintf(err, errlen, "out of memory allocating weights and slots");
        goto fail;
    }
    init_weights(v);
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
    pp_vm_core_connect(&v->c);
}

/* One instruction; with --profile a job or an optimizer step is timed from
 * after its waits for sends still in flight from its slots (as slot_ptr
 * would wait inside it), as the cuda backend times its kernels after their
 * waits for other streams. */
static void cpu_exec(void *be, const pp_instr *in)
{
    vm *v = be;
    int dir = v->run->prof ? pp_profile_dir(in) : -1;
    if (dir < 0 || (in->op == PP_OP_OptimizerStep && v->opts->skip_nonfinite)) { /* commit times it */
        exec(v, in);
        return;
    }
    settle_slots(v, in);
    double t0 = MPI_Wtime();
    exec(v, in);
    pp_profile_add(v->run->prof, v->run->step, dir, in->stage, MPI_Wtime() - t0);
}

/* Every send of the step complete; the step's loss. */
static double cpu_end_step(void *be)
{
    vm *v = be;
    for (uint32_t k = 0; k < v->p->nslots; k++)
        if (v->req[k] != MPI_REQUEST_NULL)
            mpiCheck(MPI_Wait(&v->req[k], MPI_STATUS_IGNORE));
    wait_weight_sends(v);
    pp_vm_core_end_step(&v->c);
    double loss = v->loss;
    v->loss = 0;
    return loss;
}

/* --skip-nonfinite, once the ranks agreed: the step's deferred
 * OptimizerSteps run (timed for --profile as cpu_exec would), or are
 * dropped with their gradients, which the update would have zeroed. */
static void cpu_commit(void *be, int apply)
{
    vm *v = be;
    const pp_plan *p = v->p;
    for (int i = 0; i < v->c.ndeferred; i++) {
        int s = v->c.deferred[i]->stage;
        if (!apply) {
            memset(v->c.grads[s], 0, pp_stage_param_count(&p->model, (int)p->S, s) * sizeof(float));
            continue;
        }
        double t0 = MPI_Wtime();
        optimizer_step(v, s);
        if (v->run->prof)
            pp_profile_add(v->run->prof, v->run->step, pp_profile_dir(v->c.deferred[i]), s,
                           MPI_Wtime() - t0);
    }
    v->c.ndeferred = 0;
}

static int cpu_link(void *be, size_t bytes, double *latency, double *bandwidth)
{
    (void)be;
    return pp_profile_link_mpi(bytes, latency, bandwidth);
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
    .exec = cpu_exec,
    .end_step = cpu_end_step,
    .link = cpu_link,
    .weights = pp_vm_core_weights,
    .stage_get = pp_vm_core_stage_get,
    .stage_set = pp_vm_core_stage_set,
    .destroy = cpu_destroy,
    .nonfinite = pp_vm_core_nonfinite,
    .commit = cpu_commit,
};
