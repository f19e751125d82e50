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
 * Precision: jobs read a stage's compute copy (kernels/model.h). With fp32
 * that is params itself; with bf16 an owner also keeps a bf16 copy, made at
 * start-up and after each update, and fetches move that copy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/model.h"
#include "check.h"
#include "profile.h"
#include "vm.h"
#include "weights.h"

typedef struct {
    const pp_plan *p;
    const pp_dataset *ds;
    const pp_train_opts *opts;
    float **params, **grads; /* [S], NULL for stages this rank does not hold */
    float **state;           /* [S] the optimizer's (AdamW: m then v); NULL for SGD */
    void **compute;          /* [S] the compute copy: params[s] (fp32) or its bf16 copy */
    void **slot;             /* [nslots] */
    void *work;              /* the workspace every F and B uses in turn */
    MPI_Request *req;        /* [nslots] a send in flight from the slot */
    MPI_Comm *comm;          /* [ngroups] MPI_COMM_NULL where not a member */
    MPI_Request *wsend;      /* weight sends in flight (SendWeights) */
    unsigned long long allocated; /* bytes of weights, gradients, slots, workspace: up front */
    int nwsend, wsend_cap;
    double loss;             /* summed over this step's microbatches on this rank */
    int step;
} vm;

enum { TAG_ACT = 0, TAG_GRAD = 1, TAG_WEIGHTS = 2, TAG_WGRAD = 3, TAG_KINDS = 4 };

/* MPI keeps messages of one (source, tag) in order, which is the order both
 * sides' plans list them in; the tag only has to tell kinds and jobs apart. */
static int tag_of(const pp_plan *p, int s, int b, int kind)
{
    return (int)(((int64_t)s * p->B + (b < 0 ? 0 : b)) * TAG_KINDS + kind);
}


static void wait_weight_sends(vm *v)
{
    if (v->nwsend)
        mpiCheck(MPI_Waitall(v->nwsend, v->wsend, MPI_STATUSES_IGNORE));
    v->nwsend = 0;
}

static void *slot_ptr(vm *v, int k)
{
    if (k < 0)
        return NULL;
    if (v->req[k] != MPI_REQUEST_NULL)
        mpiCheck(MPI_Wait(&v->req[k], MPI_STATUS_IGNORE));
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

static void exec(vm *v, const pp_instr *in)
{
    const pp_plan *p = v->p;
    const pp_model *m = &p->model;
    int S = (int)p->S, s = in->stage, b = in->mb;
    size_t act = pp_act_bytes(m);
    switch ((pp_opcode)in->op) {
    case PP_OP_LoadMicroBatch:
        pp_data_microbatch(v->ds, m, v->opts->seed, v->step, b, slot_ptr(v, in->slot[0]));
        break;
    case PP_OP_Forward: {
        const void *x = slot_ptr(v, in->slot[0]);
        void *stash = slot_ptr(v, in->slot[1]);
        float *out = slot_ptr(v, in->slot[2]);
        const int32_t *tgt = slot_ptr(v, in->slot[3]);
        v->loss += pp_stage_forward(m, S, s, weights_of(v, s, in->slot[4]), x, tgt, stash, v->work,
                                    out);
        break;
    }
    case PP_OP_Backward: {
        const void *stash = slot_ptr(v, in->slot[0]);
        const float *dout = slot_ptr(v, in->slot[1]);
        float *din = slot_ptr(v, in->slot[2]);
        pp_stage_backward(m, S, s, weights_of(v, s, in->slot[3]), grads_of(v, s, in->slot[4]),
                          stash, v->work, dout, din, pp_loss_scale(m, (int)p->B));
        break;
    }
    case PP_OP_BackwardInput: {
        void *stash = slot_ptr(v, in->slot[0]);
        const float *dout = slot_ptr(v, in->slot[1]);
        float *din = slot_ptr(v, in->slot[2]);
        pp_stage_backward_input(m, S, s, weights_of(v, s, in->slot[3]), stash, v->work, dout,
                                din, pp_loss_scale(m, (int)p->B));
        break;
    }
    case PP_OP_BackwardWeight:
        pp_stage_backward_weight(m, S, s, grads_of(v, s, in->slot[1]), slot_ptr(v, in->slot[0]),
                                 v->work);
        break;
    case PP_OP_SendActivation:
    case PP_OP_SendGrad: {
        int k = in->slot[0];
        int kind = in->op == PP_OP_SendActivation ? TAG_ACT : TAG_GRAD;
        slot_ptr(v, k); /* at most one send in flight per slot */
        mpiCheck(MPI_Isend(v->slot[k], (int)act, MPI_BYTE, in->peer, tag_of(p, s, b, kind),
                           MPI_COMM_WORLD, &v->req[k]));
        break;
    }
    case PP_OP_RecvActivation:
    case PP_OP_RecvGrad: {
        int kind = in->op == PP_OP_RecvActivation ? TAG_ACT : TAG_GRAD;
        mpiCheck(MPI_Recv(slot_ptr(v, in->slot[0]), (int)act, MPI_BYTE, in->peer,
                          tag_of(p, s, b, kind), MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        break;
    }
    case PP_OP_FetchWeights:
        mpiCheck(MPI_Recv(slot_ptr(v, in->slot[0]), (int)pp_stage_compute_bytes(m, S, s),
                          MPI_BYTE, in->peer, tag_of(p, s, -1, TAG_WEIGHTS), MPI_COMM_WORLD,
                          MPI_STATUS_IGNORE));
        break;
    case PP_OP_SendWeights:
        if (v->nwsend == v->wsend_cap) {
            int cap = v->wsend_cap ? 2 * v->wsend_cap : 16;
            MPI_Request *r = realloc(v->wsend, (size_t)cap * sizeof *r);
            if (!r) {
                fprintf(stderr, "ppvm: out of memory for weight sends\n");
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            v->wsend = r;
            v->wsend_cap = cap;
        }
        mpiCheck(MPI_Isend(v->compute[s], (int)pp_stage_compute_bytes(m, S, s), MPI_BYTE,
                           in->peer, tag_of(p, s, -1, TAG_WEIGHTS), MPI_COMM_WORLD,
                           &v->wsend[v->nwsend++]));
        break;
    case PP_OP_ZeroGrads:
        memset(slot_ptr(v, in->slot[0]), 0, pp_stage_param_count(m, S, s) * sizeof(float));
        break;
    case PP_OP_SendWeightGrad: {
        int k = in->slot[0];
        slot_ptr(v, k);
        mpiCheck(MPI_Isend(v->slot[k], (int)pp_stage_param_count(m, S, s), MPI_FLOAT, in->peer,
                           tag_of(p, s, -1, TAG_WGRAD), MPI_COMM_WORLD, &v->req[k]));
        break;
    }
    case PP_OP_RecvWeightGrad: {
        size_t n = pp_stage_param_count(m, S, s);
        float *tmp = slot_ptr(v, in->slot[0]), *g = v->grads[s];
        mpiCheck(MPI_Recv(tmp, (int)n, MPI_FLOAT, in->peer, tag_of(p, s, -1, TAG_WGRAD),
                          MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (size_t i = 0; i < n; i++)
            g[i] += tmp[i];
        break;
    }
    case PP_OP_ReduceGrads:
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, v->grads[s], (int)pp_stage_param_count(m, S, s),
                               MPI_FLOAT, MPI_SUM, v->comm[in->group]));
        break;
    case PP_OP_GroupStart:
    case PP_OP_GroupEnd:
        /* Sends are already non-blocking and posted in the plan's order, and
         * a group's receives taken one by one in that order are one of the
         * executions the group allows, so MPI needs no bracket. */
        break;
    case PP_OP_OptimizerStep:
        wait_weight_sends(v); /* the weights must not change under a send */
        pp_optimizer_step(m->optimizer, &v->opts->optim, v->params[s], v->grads[s], v->state[s],
                          pp_stage_param_count(m, S, s), v->step + 1);
        pp_stage_compute_copy(m, S, s, v->params[s], v->compute[s]);
        break;
    case PP_OP_COUNT:
        break;
    }
}

static int setup(vm *v)
{
    const pp_plan *p = v->p;
    int S = (int)p->S, me;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    v->params = calloc((size_t)S, sizeof *v->params);
    v->grads = calloc((size_t)S, sizeof *v->grads);
    v->state = calloc((size_t)S, sizeof *v->state);
    v->compute = calloc((size_t)S, sizeof *v->compute);
    v->slot = calloc(p->nslots + 1, sizeof *v->slot);
    v->req = malloc((p->nslots + 1) * sizeof *v->req);
    v->comm = malloc((p->ngroups + 1) * sizeof *v->comm);
    if (!v->params || !v->grads || !v->state || !v->compute || !v->slot || !v->req || !v->comm)
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
    v->work = aligned_alloc(64, (p->workspace_bytes + 64) / 64 * 64); /* never 0 bytes */
    v->allocated += p->workspace_bytes;
    if (!v->work)
        return -1;
    /* Every rank has the same group table, so these collective splits match. */
    for (uint32_t g = 0; g < p->ngroups; g++) {
        int member = 0;
        for (uint32_t i = 0; i < p->groups[g].n; i++)
            member |= p->groups[g].member[i] == (uint32_t)me;
        mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, me, &v->comm[g]));
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
    for (uint32_t g = 0; v->comm && g < p->ngroups; g++)
        if (v->comm[g] != MPI_COMM_NULL)
            MPI_Comm_free(&v->comm[g]);
    free(v->params);
    free(v->grads);
    free(v->state);
    free(v->compute);
    free(v->slot);
    free(v->req);
    free(v->comm);
    free(v->wsend);
}

/* The lowest-ranked owner of each stage writes it, so a replicated stage is
 * saved once. */
static int save_weights(vm *v)
{
    const pp_plan *p = v->p;
    int S = (int)p->S, me, rc = 0;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    int *first = malloc((size_t)S * sizeof *first);
    if (!first)
        return -1;
    for (int s = 0; s < S; s++)
        first[s] = (p->stage_role[s] & PP_ROLE_OWNER) ? me : (int)p->world;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, first, S, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    char err[4200];
    for (int s = 0; s < S; s++)
        if (first[s] == me &&
            pp_weights_save(v->opts->save, s, v->params[s],
                            pp_stage_param_count(&p->model, S, s), err, sizeof err)) {
            fprintf(stderr, "ppvm: rank %d: %s\n", me, err);
            rc = -1;
        }
    free(first);
    return rc;
}

int pp_run_plan(const pp_plan *p, const pp_dataset *ds, const pp_train_opts *opts)
{
    vm v = {.p = p, .ds = ds, .opts = opts};
    int me, rc = 1;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    if (setup(&v)) {
        fprintf(stderr, "ppvm: rank %d: out of memory allocating weights and slots\n", me);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* What each rank allocated; ppc's report states the same (plan memory). */
    unsigned long long *mem = me == 0 ? malloc(p->world * sizeof *mem) : NULL;
    mpiCheck(MPI_Gather(&v.allocated, 1, MPI_UNSIGNED_LONG_LONG, mem, 1, MPI_UNSIGNED_LONG_LONG, 0,
                        MPI_COMM_WORLD));
    if (me == 0 && mem && !opts->quiet) {
        printf("memory allocated at start-up, bytes per rank:");
        for (uint32_t r = 0; r < p->world; r++)
            printf(" %llu", mem[r]);
        printf("\n");
    }
    free(mem);
    pp_profile *prof = NULL;
    if (opts->profile && !(prof = pp_profile_open(opts->profile, p, opts->steps, me))) {
        teardown(&v);
        return 1;
    }
    double samples = (double)p->B * p->model.batch;
    for (v.step = 0; v.step < opts->steps; v.step++) {
        mpiCheck(MPI_Barrier(MPI_COMM_WORLD)); /* time steps from a common start */
        double t0 = MPI_Wtime();
        v.loss = 0;
        for (uint32_t i = 0; i < p->ninstr; i++) {
            int dir = prof ? pp_profile_dir(&p->code[i]) : -1;
            if (dir >= 0)
                settle_slots(&v, &p->code[i]);
            double j0 = dir >= 0 ? MPI_Wtime() : 0;
            exec(&v, &p->code[i]);
            if (dir >= 0)
                pp_profile_add(prof, v.step, dir, p->code[i].stage, MPI_Wtime() - j0);
        }
        for (uint32_t k = 0; k < p->nslots; k++)
            if (v.req[k] != MPI_REQUEST_NULL)
                mpiCheck(MPI_Wait(&v.req[k], MPI_STATUS_IGNORE));
        wait_weight_sends(&v);
        double loss = 0, dt, mine = MPI_Wtime() - t0;
        mpiCheck(MPI_Reduce(&v.loss, &loss, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
        mpiCheck(MPI_Reduce(&mine, &dt, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
        if (me == 0 && !opts->quiet) {
            printf("step %4d/%d  loss %.4f  time %8.2f ms  samples/s %10.0f\n", v.step + 1,
                   opts->steps, loss / samples, dt * 1e3, samples / dt);
            fflush(stdout);
        }
        if (me == 0 && !isfinite(loss)) {
            fprintf(stderr, "ppvm: loss is not finite at step %d (lower --lr?)\n", v.step + 1);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    rc = 0;
    if (prof) {
        double latency = 0, bandwidth = 0;
        int link = pp_profile_link_mpi(pp_profile_probe_bytes(p), &latency, &bandwidth);
        if (pp_profile_finish(prof, link, latency, bandwidth))
            rc = 1;
    }
    if (opts->save && save_weights(&v))
        rc = 1;
    teardown(&v);
    return rc;
}
