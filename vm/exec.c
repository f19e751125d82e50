/* exec.c - the VM core's opcode dispatch (core.h), once for both backends:
 * each instruction decoded into what it touches (pp_vm_job: its slots by
 * role, the weights and gradients it uses, own stage or its wts / wgrad
 * slot, --deterministic's buffer, its lane in an Overlap pair, a transfer's
 * slot) and handed to the backend's operation for its opcode (pp_vm_ops);
 * around them the non-finite check, PP_INJECT_NAN, --deterministic's
 * ordered sums, --skip-nonfinite's deferral and commit, and --profile's
 * timing.
 *
 * --profile times a job's kernel and an optimizer step's update between
 * two marks the backend makes (the wall clock on the cpu, events on the
 * lane's stream on a GPU), after the waits its operands needed, and adds
 * the times at the end of the step (or, for an update commit ran, after
 * commit). */
#include <string.h>

#include "../isa/tensor_lane.h"
#include "../kernels/model.h"
#include "core.h"
#include "profile.h"

static void *slot_of(pp_vm_core *c, const pp_instr *in, int role)
{
    int k = pp_slot(in, role);
    return k < 0 ? NULL : c->ops->slot(c, k);
}

/* The weights a job reads: its wts slot, or this rank's own compute copy. */
static const void *weights_of(pp_vm_core *c, const pp_instr *in)
{
    int k = pp_slot(in, PP_ROLE_WTS);
    return k >= 0 ? c->ops->slot(c, k) : c->ops->weights(c, in->stage);
}

/* Where a job accumulates its weight gradients: its wgrad slot or this
 * rank's own; under --deterministic, a zeroed buffer of the job's own. */
static float *grads_of(pp_vm_core *c, const pp_vm_job *j)
{
    int k = pp_slot(j->in, PP_ROLE_WGRAD);
    if (pp_vm_core_det(c, j->s))
        return c->ops->det_grads(c, j);
    return k >= 0 ? c->ops->slot(c, k) : c->ops->grads(c, j->s);
}

static int timed(const pp_vm_core *c, const pp_instr *in)
{
    return c->run->prof && pp_profile_dir(in) >= 0;
}

static void mark(pp_vm_core *c, const pp_vm_job *j, int end)
{
    if (timed(c, j->in))
        c->ops->mark(c, j, end);
}

static void begin(pp_vm_core *c, const pp_vm_job *j)
{
    if (c->ops->begin)
        c->ops->begin(c, j);
}

static void end(pp_vm_core *c, const pp_vm_job *j)
{
    if (c->ops->end)
        c->ops->end(c, j);
}

/* A job's kernel between --profile's marks; none under --no-compute. */
static void run_job(pp_vm_core *c, const pp_vm_job *j, void (*op)(void *, const pp_vm_job *))
{
    mark(c, j, 0);
    if (!c->nc)
        op(c, j);
    mark(c, j, 1);
}

/* After a backward job: PP_INJECT_NAN's din and wgrad, the input
 * gradient's check, --deterministic's ordered sum of the job's gradient. */
static void backward_done(pp_vm_core *c, const pp_vm_job *j, int writes_din, int writes_g)
{
    const pp_model *m = &c->p->model;
    if (c->nc)
        return;
    if (writes_din && j->din && pp_vm_core_inject_here(c, j->in, PP_INJECT_DIN))
        c->ops->poison(c, j, j->din);
    if (writes_g && j->g && j->np && pp_vm_core_inject_here(c, j->in, PP_INJECT_WGRAD))
        c->ops->poison(c, j, j->g);
    if (writes_din && j->din && m->precision == PP_PREC_BF16)
        c->ops->check_bf16(c, j, (const uint16_t *)j->din, pp_act_bytes(m) / 2, PP_NF_INPUT_GRAD);
    else if (writes_din && j->din)
        c->ops->check(c, j, j->din, pp_act_bytes(m) / sizeof(float), PP_NF_INPUT_GRAD);
    if (writes_g && pp_vm_core_det(c, j->s)) {
        if (c->ops->det_done)
            c->ops->det_done(c, j);
        pp_vm_core_det_done(c, j->s, j->b);
    }
}

/* Stage S-1's head gradients where the tied weights are stored once
 * (isa/tied.h): added into stage 0's by AddTiedGrad, and zeroed when the
 * update zeroes the rest (which covers the own part, j->np). */
static void zero_head(pp_vm_core *c, const pp_vm_job *j)
{
    size_t n = pp_stage_param_count(&c->p->model, (int)c->p->S, j->s);
    if (c->nc || j->np == n)
        return;
    pp_vm_job z = *j;
    z.g = j->g + j->np;
    z.np = n - j->np;
    c->ops->zero(c, &z);
}

/* An OptimizerStep's update, ending --profile's time for it; `marked`:
 * the time started already, before the gradients' check (exec's), which is
 * part of the step's cost (83k floats: 6.5 us beside an SGD update's 20;
 * left out while it took 46, DDP's optimizer steps looked half what they
 * took); a deferred step's (--skip-nonfinite) starts here. */
static void update(pp_vm_core *c, const pp_vm_job *j, int marked)
{
    if (!marked)
        mark(c, j, 0);
    c->ops->update(c, j);
    mark(c, j, 1);
    zero_head(c, j);
}

void pp_vm_core_exec(void *be, const pp_instr *in)
{
    pp_vm_core *c = be;
    const pp_plan *p = c->p;
    const pp_vm_ops *o = c->ops;
    pp_vm_job j = {.in = in, .s = in->stage, .b = in->mb, .k = -1};
    j.pair = pp_vm_core_pair_pos(c, in);
    j.lane = j.pair == 2;
    if (in->op == PP_OP_TensorReduce) /* the lane of the job it precedes */
        j.lane = pp_tensor_lane(p, (uint32_t)(in - p->code));
    if (j.s >= 0 && j.s < (int)p->S)
        j.np = pp_stage_param_count(&p->model, (int)p->S, j.s);
    /* (the opcode first: only these carry a stage --deterministic tracks;
     * a marker's or a microbatch load's stage is -1) */
    if ((in->op == PP_OP_SendWeightGrad || in->op == PP_OP_RecvWeightGrad ||
         in->op == PP_OP_ReduceGrads) &&
        pp_vm_core_det(c, j.s)) {
        pp_vm_core_det_transfer(c, in); /* host memory, MPI (--no-compute refuses it) */
        pp_vm_core_g_zero_forget(c, -1);
        return;
    }
    switch ((pp_opcode)in->op) {
    case PP_OP_LoadMicroBatch:
        j.tokens = slot_of(c, in, PP_ROLE_TOKENS);
        begin(c, &j);
        o->load(c, &j);
        end(c, &j);
        break;
    case PP_OP_Forward:
        j.x = slot_of(c, in, PP_ROLE_IN);
        j.stash = slot_of(c, in, PP_ROLE_STASH);
        j.out = slot_of(c, in, PP_ROLE_OUT);
        j.tgt = slot_of(c, in, PP_ROLE_TGT);
        j.w = weights_of(c, in);
        begin(c, &j);
        run_job(c, &j, o->forward);
        if (!c->nc) {
            int here = pp_vm_core_inject_here(c, in, PP_INJECT_OUT);
            int last = j.s == (int)p->S - 1; /* the loss, else the output */
            o->loss(c, &j, here && last);
            if (here && !last)
                o->poison(c, &j, j.out);
        }
        end(c, &j);
        break;
    case PP_OP_Recompute: /* F again, into the stash; its loss was counted by F */
        j.x = slot_of(c, in, PP_ROLE_IN);
        j.stash = slot_of(c, in, PP_ROLE_STASH);
        j.out = slot_of(c, in, PP_ROLE_OUT);
        j.tgt = slot_of(c, in, PP_ROLE_TGT);
        j.w = weights_of(c, in);
        begin(c, &j);
        run_job(c, &j, o->forward);
        end(c, &j);
        break;
    case PP_OP_Backward:
        j.stash = slot_of(c, in, PP_ROLE_STASH);
        j.dout = slot_of(c, in, PP_ROLE_DOUT);
        j.din = slot_of(c, in, PP_ROLE_DIN);
        j.w = weights_of(c, in);
        j.g = grads_of(c, &j);
        j.g_zero = pp_vm_core_g_zero_take(c, &j);
        begin(c, &j);
        run_job(c, &j, o->backward);
        backward_done(c, &j, 1, 1);
        end(c, &j);
        break;
    case PP_OP_BackwardInput:
        j.stash = slot_of(c, in, PP_ROLE_STASH);
        j.dout = slot_of(c, in, PP_ROLE_DOUT);
        j.din = slot_of(c, in, PP_ROLE_DIN);
        j.w = weights_of(c, in);
        begin(c, &j);
        run_job(c, &j, o->backward_input);
        backward_done(c, &j, 1, 0);
        end(c, &j);
        break;
    case PP_OP_BackwardWeight:
        j.stash = slot_of(c, in, PP_ROLE_STASH);
        j.g = grads_of(c, &j);
        j.g_zero = pp_vm_core_g_zero_take(c, &j);
        begin(c, &j);
        run_job(c, &j, o->backward_weight);
        backward_done(c, &j, 0, 1);
        end(c, &j);
        break;
    case PP_OP_ZeroGrads:
        j.g = slot_of(c, in, PP_ROLE_WGRAD);
        begin(c, &j);
        if (!c->nc) {
            o->zero(c, &j);
            pp_vm_core_g_zero_set(c, &j);
        }
        end(c, &j);
        break;
    case PP_OP_SendActivation:
    case PP_OP_SendGrad:
    case PP_OP_SendWeights:
    case PP_OP_SendWeightGrad:
        j.k = pp_transfer_slot(in);
        o->send(c, &j);
        break;
    case PP_OP_RecvActivation:
    case PP_OP_RecvGrad:
    case PP_OP_FetchWeights:
        j.k = pp_transfer_slot(in);
        o->recv(c, &j);
        break;
    case PP_OP_RecvWeightGrad: /* into the tmp slot, then added to the own gradients */
        j.k = pp_transfer_slot(in);
        o->recv(c, &j);
        j.tmp = slot_of(c, in, PP_ROLE_TMP);
        j.g = o->grads(c, j.s);
        pp_vm_core_g_zero_forget(c, j.s);
        begin(c, &j);
        mark(c, &j, 0); /* --profile's "G": the add, after the wait */
        if (!c->nc)
            o->accumulate(c, &j);
        mark(c, &j, 1);
        end(c, &j);
        break;
    case PP_OP_ReduceGrads:
        pp_vm_core_g_zero_forget(c, -1);
        o->reduce(c, &j);
        break;
    /* tied embeddings: a copy of the own tied gradients into a slot (zeroed,
     * then added: 0 + x is x), sent and received as a slot, added back */
    case PP_OP_StashTiedGrad:
    case PP_OP_AddTiedGrad: {
        float *own = o->grads(c, j.s) + pp_stage_tied_offset(&p->model, (int)p->S, j.s);
        float *tmp = slot_of(c, in, PP_ROLE_TMP);
        int stash = in->op == PP_OP_StashTiedGrad;
        j.np = pp_tied_floats(&p->model);
        j.g = stash ? tmp : own;
        j.tmp = stash ? own : tmp;
        pp_vm_core_g_zero_forget(c, j.s);
        begin(c, &j);
        if (!c->nc && pp_vm_core_det(c, j.s)) { /* the ordered sum, where the add reads it */
            const float *sum = pp_vm_core_det_tied(c, j.s);
            pp_vm_job put = j;
            put.g = own - pp_stage_tied_offset(&p->model, (int)p->S, j.s); /* grads[s] */
            put.np = pp_stage_param_count(&p->model, (int)p->S, j.s);
            if (sum)
                o->det_put(c, &put, sum);
        }
        if (!c->nc) {
            if (stash)
                o->zero(c, &j);
            o->accumulate(c, &j);
        }
        end(c, &j);
        break;
    }
    case PP_OP_SendTiedGrad:
        j.np = pp_tied_floats(&p->model);
        j.k = pp_transfer_slot(in);
        o->send(c, &j);
        break;
    case PP_OP_RecvTiedGrad:
        j.np = pp_tied_floats(&p->model);
        j.k = pp_transfer_slot(in);
        o->recv(c, &j);
        break;
    case PP_OP_OptimizerStep:
        /* (a head stored once is stage 0's to step: isa/tied.h) */
        j.np = pp_vm_core_own_count(c, j.s);
        /* the own weights too: the update waits for what reads them */
        j.w = o->weights(c, j.s);
        j.g = o->grads(c, j.s);
        begin(c, &j);
        mark(c, &j, 0);
        if (!c->nc) {
            if (pp_vm_core_det(c, j.s)) { /* the ordered sum of all B microbatches */
                const float *sum = pp_vm_core_det_sum(c, j.s);
                pp_vm_job put = j; /* (the whole stage: a head stored once too) */
                put.np = pp_stage_param_count(&p->model, (int)p->S, j.s);
                if (sum != j.g)
                    o->det_put(c, &put, sum);
            }
            o->check(c, &j, j.g, j.np, PP_NF_WEIGHT_GRAD);
        }
        pp_vm_core_g_zero_forget(c, j.s);        /* det_put wrote them; a deferred step waits */
        if (c->nc || !pp_vm_core_defer(c, in)) { /* --skip-nonfinite: until commit */
            update(c, &j, 1);
            if (!c->nc)
                pp_vm_core_g_zero_set(c, &j); /* the update zeroes them */
        }
        end(c, &j);
        break;
    case PP_OP_GroupStart:
    case PP_OP_GroupEnd:
        if (o->group)
            o->group(c, in->op == PP_OP_GroupStart);
        break;
    case PP_OP_TensorReduce: /* the next job makes the all-reduces (isa/tensor.h) */
        if (o->tensor)
            o->tensor(c, &j);
        break;
    case PP_OP_Offload: /* a stash to its host slot, or back (no arithmetic) */
    case PP_OP_Reload: {
        int src = pp_slot(in, PP_ROLE_SRC), dst = pp_slot(in, PP_ROLE_DST);
        uint64_t n =
            p->slot_bytes[src] < p->slot_bytes[dst] ? p->slot_bytes[src] : p->slot_bytes[dst];
        if (!c->nc)
            o->host_copy(c, &j, o->slot(c, dst), o->slot(c, src), (size_t)n,
                         in->op == PP_OP_Offload);
        break;
    }
    case PP_OP_Overlap: /* the next two jobs: pp_vm_core_pair_pos counts them */
    case PP_OP_COUNT:
        break;
    }
}

/* --skip-nonfinite, once the ranks agreed: the step's deferred
 * OptimizerSteps run (timed for --profile as exec would), or are dropped
 * with their gradients, which the update would have zeroed. */
void pp_vm_core_commit(void *be, int apply)
{
    pp_vm_core *c = be;
    int n = c->ndeferred;
    for (int i = 0; i < n; i++) {
        const pp_instr *in = c->deferred[i];
        pp_vm_job j = {.in = in, .s = in->stage, .b = in->mb, .k = -1};
        j.np = pp_vm_core_own_count(c, j.s);
        j.w = c->ops->weights(c, j.s);
        j.g = c->ops->grads(c, j.s);
        begin(c, &j);
        if (apply)
            update(c, &j, 0);
        else {
            c->ops->zero(c, &j);
            zero_head(c, &j);
        }
        pp_vm_core_g_zero_set(c, &j); /* either way they hold zeros now */
        end(c, &j);
    }
    if (c->ops->committed)
        c->ops->committed(c);
    c->ndeferred = 0;
    if (apply && n)
        pp_vm_core_prof_collect(c, 1);
}

void pp_vm_core_prof_collect(pp_vm_core *c, int deferred)
{
    const pp_plan *p = c->p;
    for (uint32_t i = 0; c->run->prof && i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        int dir = pp_profile_dir(in);
        if (dir < 0 || deferred != (in->op == PP_OP_OptimizerStep && c->opts->skip_nonfinite))
            continue;
        if (dir == PP_PROF_G && pp_vm_core_det(c, in->stage))
            continue; /* --deterministic moves it as its own (unmarked) */
        pp_profile_add(c->run->prof, c->run->step, dir, in->stage, c->ops->elapsed(c, i));
    }
}
