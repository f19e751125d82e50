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
 * Bad numbers (issue 16): each microbatch's loss (the last stage's
 * Forward), each input gradient a Backward or BackwardInput writes, and a
 * stage's summed weight gradients before its OptimizerStep are checked;
 * the first that is not finite is kept for the driver (nonfinite), which
 * has the ranks agree at the end of the step. With --skip-nonfinite the
 * OptimizerSteps wait for that agreement (commit): every plan ppc makes
 * puts a stage's OptimizerStep after every use of its weights and
 * gradients in the step (cpu_create refuses a plan that does not), so
 * running them at the end of the step computes the same bits, and a
 * skipped step costs no copy of the weights or optimizer state.
 * PP_INJECT_NAN=STEP:STAGE:MB[:WHERE] (a test hook) puts a NaN into job
 * (STAGE, MB) at step STEP (from 1): WHERE out (the default) into its
 * Forward's loss on the last stage, else its output's first element; din
 * into the input gradient its Backward or BackwardInput writes; wgrad into
 * the weight gradients its Backward or BackwardWeight adds to.
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

#include "../kernels/model.h"
#include "backend.h"
#include "check.h"
#include "determ.h"
#include "profile.h"
#include "vm.h"
#include "vmbench.h"

typedef struct {
    pp_run *run;             /* the driver's: the step in progress, --profile */
    const pp_plan *p;
    const pp_dataset *ds;
    const pp_train_opts *opts;
    float **params, **grads; /* [S], NULL for stages this rank does not hold */
    float **state;           /* [S] the optimizer's (AdamW: m then v); NULL for SGD */
    void **compute;          /* [S] the compute copy: params[s] (fp32) or its bf16 copy */
    void **slot;             /* [nslots] */
    void *work;              /* the workspace every F and B uses in turn; with an Overlap
                                pair, two of them, work_stride bytes apart */
    size_t work_stride;
    int pair_left;           /* jobs of the open Overlap pair not yet run (2, 1 or 0) */
    MPI_Request *req;        /* [nslots] a send in flight from the slot */
    MPI_Comm *comm;          /* [ngroups] MPI_COMM_NULL where not a member */
    MPI_Request *wsend;      /* weight sends in flight (SendWeights) */
    unsigned long long allocated; /* bytes of weights, gradients, slots, workspace: up front */
    int nwsend, wsend_cap;   /* cap: the plan's SendWeights per step */
    double loss;             /* summed over this step's microbatches on this rank */
    pp_nonfinite first;      /* the step's first non-finite number (pp_nonfinite_order) */
    int inject_step, inject_stage, inject_mb; /* PP_INJECT_NAN; inject_step 0: none */
    int inject_where;        /* INJECT_* */
    const pp_instr **deferred; /* --skip-nonfinite: the step's OptimizerSteps, until commit */
    int ndeferred;
    pp_determ *det;          /* --deterministic (vm/determ.h), else NULL */
    int nc;                  /* --no-compute (vm/vmbench.h): no kernel body, 4-byte messages */
    unsigned long long det_bytes; /* its per-microbatch gradients: part of allocated */
} vm;

enum { INJECT_OUT, INJECT_DIN, INJECT_WGRAD };

/* Whether PP_INJECT_NAN names this instruction's job at this step, there. */
static int inject_here(const vm *v, const pp_instr *in, int where)
{
    return v->run->step + 1 == v->inject_step && in->stage == v->inject_stage &&
           in->mb == v->inject_mb && v->inject_where == where;
}

/* Keep f if it comes before what the step found so far. */
static void note(vm *v, pp_nf_kind kind, int s, int b, double value)
{
    pp_nonfinite f = {.kind = kind, .stage = s, .mb = b, .value = value};
    int S = (int)v->p->S, B = (int)v->p->B;
    if (v->first.kind == PP_NF_NONE ||
        pp_nonfinite_order(&f, S, B) < pp_nonfinite_order(&v->first, S, B))
        v->first = f;
}

/* The first of n floats that is not finite, noted as `kind`; x may be NULL
 * (a first stage's input gradient). */
static void check_finite(vm *v, const float *x, size_t n, pp_nf_kind kind, int s, int b)
{
    for (size_t i = 0; x && i < n; i++)
        if (!isfinite(x[i])) {
            note(v, kind, s, b, x[i]);
            return;
        }
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
    return slot >= 0 ? slot_ptr(v, slot) : v->compute[s];
}

static float *grads_of(vm *v, int s, int slot)
{
    return slot >= 0 ? slot_ptr(v, slot) : v->grads[s];
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
    pp_optimizer_step(m->optimizer, &v->opts->optim, v->params[s], v->grads[s], v->state[s],
                      pp_stage_param_count(m, S, s), v->run->step + 1);
    pp_stage_compute_copy(m, S, s, v->params[s], v->compute[s]);
}

/* PP_INJECT_NAN's din and wgrad: a backward job's input gradient or the
 * weight gradients it added to (either may be NULL: not written here). */
static void inject_grads(vm *v, const pp_instr *in, float *din, float *g)
{
    if (din && inject_here(v, in, INJECT_DIN))
        din[0] = NAN;
    if (g && pp_stage_param_count(&v->p->model, (int)v->p->S, in->stage) &&
        inject_here(v, in, INJECT_WGRAD))
        g[0] = NAN;
}

/* Where job W(s,b) accumulates its weight gradients: its wgrad slot or the
 * owner's gradients; under --deterministic, a zeroed buffer of its own. */
static float *wjob_grads(vm *v, int s, int b, int slot)
{
    if (v->det && pp_determ_tracks(v->det, s))
        return pp_determ_job(v->det, s, b);
    return grads_of(v, s, slot);
}

/* W(s,b) is done: --deterministic adds what is next in order. */
static void wjob_done(vm *v, int s, int b)
{
    if (v->det && pp_determ_tracks(v->det, s))
        pp_determ_done(v->det, s, b, v->grads[s]);
}

static void exec(vm *v, const pp_instr *in)
{
    const pp_plan *p = v->p;
    const pp_model *m = &p->model;
    int S = (int)p->S, s = in->stage, b = in->mb;
    size_t act = pp_act_bytes(m);
    void *work = v->work;
    if (pp_op(in->op)->kind == PP_KIND_COMPUTE && v->pair_left > 0 && --v->pair_left == 0)
        work = (char *)v->work + v->work_stride; /* the pair's second job */
    switch ((pp_opcode)in->op) {
    case PP_OP_LoadMicroBatch: {
        void *tokens = slot_ptr(v, pp_slot(in, PP_ROLE_TOKENS));
        if (!v->nc)
            pp_data_microbatch(v->ds, m, v->opts->seed, v->run->step, b, tokens);
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
        if (inject_here(v, in, INJECT_OUT)) {
            if (s == S - 1)
                loss = NAN;
            else
                out[0] = NAN;
        }
        if (!isfinite(loss))
            note(v, PP_NF_LOSS, s, b, loss);
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
        mpiCheck(MPI_Isend(v->compute[s], msg_bytes(v, pp_stage_compute_bytes(m, S, s)), MPI_BYTE,
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
        if (v->det && pp_determ_tracks(v->det, s)) {
            pp_determ_send(v->det, s, in->peer);
            break;
        }
        slot_ptr(v, k);
        mpiCheck(MPI_Isend(v->slot[k], msg_floats(v, pp_stage_param_count(m, S, s)), MPI_FLOAT, in->peer,
                           pp_transfer_tag(p, in->op, s, -1), MPI_COMM_WORLD, &v->req[k]));
        break;
    }
    case PP_OP_RecvWeightGrad: {
        size_t n = pp_stage_param_count(m, S, s);
        float *tmp = slot_ptr(v, pp_slot(in, PP_ROLE_TMP)), *g = v->grads[s];
        if (v->det && pp_determ_tracks(v->det, s)) {
            pp_determ_recv(v->det, s, in->peer, g);
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
        if (v->det && pp_determ_tracks(v->det, s)) {
            pp_determ_reduce(v->det, s, v->comm[in->group], v->grads[s]);
            break;
        }
        PP_WAITED(v->nc, &v->run->waited_ns,
                  mpiCheck(MPI_Allreduce(MPI_IN_PLACE, v->grads[s],
                                         msg_floats(v, pp_stage_param_count(m, S, s)), MPI_FLOAT,
                                         MPI_SUM, v->comm[in->group])));
        break;
    case PP_OP_Overlap: /* run the pair's two jobs in turn (see the header) */
        v->pair_left = 2;
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
        if (v->det && pp_determ_tracks(v->det, s))
            pp_determ_finish(v->det, s); /* the gradients summed in microbatch order */
        check_finite(v, v->grads[s], pp_stage_param_count(m, S, s), PP_NF_WEIGHT_GRAD, s, -1);
        if (v->opts->skip_nonfinite)
            v->deferred[v->ndeferred++] = in; /* until the ranks agree: commit */
        else
            optimizer_step(v, s);
        break;
    case PP_OP_COUNT:
        break;
    }
}

/* Everything a step needs, at the plan's sizes, and the initial weights;
 * local. 0, or -1 when out of memory (teardown frees what was made). */
static int setup(vm *v)
{
    const pp_plan *p = v->p;
    int S = (int)p->S;
    v->params = calloc((size_t)S, sizeof *v->params);
    v->grads = calloc((size_t)S, sizeof *v->grads);
    v->state = calloc((size_t)S, sizeof *v->state);
    v->compute = calloc((size_t)S, sizeof *v->compute);
    v->slot = calloc(p->nslots + 1, sizeof *v->slot);
    v->req = malloc((p->nslots + 1) * sizeof *v->req);
    v->comm = malloc((p->ngroups + 1) * sizeof *v->comm);
    for (uint32_t g = 0; v->comm && g < p->ngroups; g++)
        v->comm[g] = MPI_COMM_NULL; /* until connect; teardown reads them */
    for (uint32_t i = 0; i < p->ninstr; i++)
        v->wsend_cap += p->code[i].op == PP_OP_SendWeights;
    v->wsend = malloc(((size_t)v->wsend_cap + 1) * sizeof *v->wsend);
    v->deferred = malloc((p->ninstr + 1) * sizeof *v->deferred);
    if (!v->params || !v->grads || !v->state || !v->compute || !v->slot || !v->req || !v->comm ||
        !v->wsend || !v->deferred)
        return -1;
    for (int s = 0; s < S; s++) {
        if (!(p->stage_role[s] & PP_ROLE_OWNER))
            continue;
        size_t n = pp_stage_param_count(&p->model, S, s);
        size_t nstate = pp_optimizer_state_floats(p->model.optimizer) * n;
        v->params[s] = malloc(n * sizeof(float));
        v->grads[s] = calloc(n, sizeof(float));
        v->state[s] = nstate ? calloc(nstate, sizeof(float)) : NULL;
        v->allocated += (2 * n + nstate) * sizeof(float);
        if (!v->params[s] || !v->grads[s] || (nstate && !v->state[s]))
            return -1;
        pp_stage_init(&p->model, S, s, v->opts->seed, v->params[s]);
        v->compute[s] = v->params[s];
        if (p->model.precision != PP_PREC_FP32) {
            size_t bytes = pp_stage_compute_bytes(&p->model, S, s);
            v->compute[s] = malloc(bytes ? bytes : 1);
            v->allocated += bytes;
            if (!v->compute[s])
                return -1;
            pp_stage_compute_copy(&p->model, S, s, v->params[s], v->compute[s]);
        }
    }
    /* All activation memory the step needs, allocated once: the plan's slots
     * and its workspace. */
    for (uint32_t k = 0; k < p->nslots; k++) {
        v->slot[k] = aligned_alloc(64, (p->slot_bytes[k] + 63) / 64 * 64);
        v->allocated += p->slot_bytes[k];
        v->req[k] = MPI_REQUEST_NULL;
        if (!v->slot[k])
            return -1;
    }
    v->work_stride = (p->workspace_bytes + 63) / 64 * 64;
    v->work = aligned_alloc(64, pp_plan_workspaces(p) * v->work_stride + 64); /* never 0 bytes */
    v->allocated += pp_plan_workspaces(p) * p->workspace_bytes;
    if (!v->work)
        return -1;
    if (v->opts->deterministic) {
        v->det = pp_determ_create(p, &v->det_bytes);
        v->allocated += v->det_bytes;
        if (!v->det)
            return -1;
    }
    return 0;
}

static void teardown(vm *v)
{
    const pp_plan *p = v->p;
    for (uint32_t s = 0; s < p->S; s++) {
        if (v->compute && v->params && v->compute[s] != v->params[s])
            free(v->compute[s]);
        if (v->params)
            free(v->params[s]);
        if (v->grads)
            free(v->grads[s]);
        if (v->state)
            free(v->state[s]);
    }
    for (uint32_t k = 0; v->slot && k < p->nslots; k++)
        free(v->slot[k]);
    free(v->work);
    pp_determ_free(v->det);
    for (uint32_t g = 0; v->comm && g < p->ngroups; g++)
        if (v->comm[g] != MPI_COMM_NULL)
            mpiCheck(MPI_Comm_free(&v->comm[g]));
    free(v->params);
    free(v->grads);
    free(v->state);
    free(v->compute);
    free(v->slot);
    free(v->req);
    free(v->comm);
    free(v->wsend);
    free(v->deferred);
}

/* PP_INJECT_NAN=STEP:STAGE:MB, when set; 0, or -1 with err. */
static int parse_inject(vm *v, char *err, size_t errlen)
{
    static const char *where[] = {"out", "din", "wgrad"};
    const char *env = getenv("PP_INJECT_NAN");
    int step, stage, mb, end = 0, w = -1;
    if (!env)
        return 0;
    int n = sscanf(env, "%d:%d:%d%n", &step, &stage, &mb, &end);
    if (n == 3 && !env[end])
        w = INJECT_OUT;
    for (int i = 0; n == 3 && env[end] == ':' && i < 3; i++)
        if (!strcmp(env + end + 1, where[i]))
            w = i;
    if (w < 0 || step < 1 || stage < 0 || stage >= (int)v->p->S || mb < 0 || mb >= (int)v->p->B) {
        snprintf(err, errlen, "PP_INJECT_NAN=%.40s: expected STEP:STAGE:MB[:out|din|wgrad], a "
                 "step from 1, a stage in [0, %u) and a microbatch in [0, %u)", env, v->p->S,
                 v->p->B);
        return -1;
    }
    v->inject_where = w;
    v->inject_step = step;
    v->inject_stage = stage;
    v->inject_mb = mb;
    return 0;
}

/* --skip-nonfinite runs a stage's OptimizerStep at the end of the step,
 * which computes the same bits only if nothing later in the step uses the
 * stage's weights or gradients. 0, or -1 with err naming the instruction. */
static int check_deferrable(const pp_plan *p, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < p->ninstr; i++) {
        if (p->code[i].op != PP_OP_OptimizerStep)
            continue;
        for (uint32_t j = i + 1; j < p->ninstr; j++) {
            const pp_op_info *info = pp_op(p->code[j].op);
            if (p->code[j].stage == p->code[i].stage && info &&
                (info->params != PP_ACC_NO || info->grads != PP_ACC_NO)) {
                snprintf(err, errlen, "--skip-nonfinite: instruction %u (%s) uses stage %d's "
                         "weights or gradients after its OptimizerStep (instruction %u), so the "
                         "update cannot wait for the end of the step", j, info->name,
                         p->code[j].stage, i);
                return -1;
            }
        }
    }
    return 0;
}

/* ---- the backend's interface (backend.h) ------------------------------------ */

static void *cpu_create(pp_run *run, char *err, size_t errlen)
{
    vm *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory allocating weights and slots");
        return NULL;
    }
    *v = (vm){.run = run, .p = run->p, .ds = run->ds, .opts = run->opts,
              .nc = run->opts->no_compute};
    if (setup(v)) {
        snprintf(err, errlen, "out of memory allocating weights and slots");
        goto fail;
    }
    if (parse_inject(v, err, errlen) ||
        (run->opts->skip_nonfinite && check_deferrable(run->p, err, errlen)))
        goto fail;
    return v;
fail:
    teardown(v);
    free(v);
    return NULL;
}

/* --deterministic: its communicator, and a note (before the memory line,
 * which includes them) of what its per-microbatch gradients take on each
 * rank. Collective. */
static void determ_connect(vm *v)
{
    const pp_plan *p = v->p;
    unsigned long long *all = v->run->me == 0 ? malloc(p->world * sizeof *all) : NULL;
    pp_determ_connect(v->det);
    mpiCheck(MPI_Gather(&v->det_bytes, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, 0,
                        MPI_COMM_WORLD));
    if (all && !v->opts->quiet) {
        printf("deterministic: per-microbatch weight gradients, bytes per rank (in the memory "
               "below):");
        for (uint32_t r = 0; r < p->world; r++)
            printf(" %llu", all[r]);
        printf("\n");
    }
    free(all);
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
    if (v->det)
        determ_connect(v);
}

static unsigned long long cpu_allocated(void *be)
{
    return ((vm *)be)->allocated;
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
    if (v->det)
        pp_determ_end_step(v->det);
    double loss = v->loss;
    v->loss = 0;
    return loss;
}

static void cpu_nonfinite(void *be, pp_nonfinite *first)
{
    vm *v = be;
    *first = v->first;
    v->first = (pp_nonfinite){.kind = PP_NF_NONE, .stage = -1, .mb = -1};
}

/* --skip-nonfinite, once the ranks agreed: the step's deferred
 * OptimizerSteps run (timed for --profile as cpu_exec would), or are
 * dropped with their gradients, which the update would have zeroed. */
static void cpu_commit(void *be, int apply)
{
    vm *v = be;
    const pp_plan *p = v->p;
    for (int i = 0; i < v->ndeferred; i++) {
        int s = v->deferred[i]->stage;
        if (!apply) {
            memset(v->grads[s], 0, pp_stage_param_count(&p->model, (int)p->S, s) * sizeof(float));
            continue;
        }
        double t0 = MPI_Wtime();
        optimizer_step(v, s);
        if (v->run->prof)
            pp_profile_add(v->run->prof, v->run->step, pp_profile_dir(v->deferred[i]), s,
                           MPI_Wtime() - t0);
    }
    v->ndeferred = 0;
}

static int cpu_link(void *be, size_t bytes, double *latency, double *bandwidth)
{
    (void)be;
    return pp_profile_link_mpi(bytes, latency, bandwidth);
}

static void cpu_weights(void *be, int s, float *out)
{
    vm *v = be;
    memcpy(out, v->params[s], pp_stage_param_count(&v->p->model, (int)v->p->S, s) * sizeof *out);
}

/* A checkpoint's copy of stage s (backend.h); between steps no send is in
 * flight, so the buffers are at rest. */
static void cpu_stage_get(void *be, int s, float *params, float *state, void *compute)
{
    vm *v = be;
    const pp_model *m = &v->p->model;
    int S = (int)v->p->S;
    size_t n = pp_stage_param_count(m, S, s);
    memcpy(params, v->params[s], n * sizeof *params);
    if (state)
        memcpy(state, v->state[s], pp_optimizer_state_floats(m->optimizer) * n * sizeof *state);
    if (compute)
        memcpy(compute, v->compute[s], pp_stage_compute_bytes(m, S, s));
}

static void cpu_stage_set(void *be, int s, const float *params, const float *state,
                          const void *compute)
{
    vm *v = be;
    const pp_model *m = &v->p->model;
    int S = (int)v->p->S;
    size_t n = pp_stage_param_count(m, S, s);
    memcpy(v->params[s], params, n * sizeof *params);
    if (state)
        memcpy(v->state[s], state, pp_optimizer_state_floats(m->optimizer) * n * sizeof *state);
    if (compute)
        memcpy(v->compute[s], compute, pp_stage_compute_bytes(m, S, s));
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
    .allocated = cpu_allocated,
    .exec = cpu_exec,
    .end_step = cpu_end_step,
    .link = cpu_link,
    .weights = cpu_weights,
    .stage_get = cpu_stage_get,
    .stage_set = cpu_stage_set,
    .destroy = cpu_destroy,
    .nonfinite = cpu_nonfinite,
    .commit = cpu_commit,
};
