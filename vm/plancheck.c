/* plancheck.c - what the VM checks in a plan beyond the format's own rules:
 * every slot is big enough for the role an instruction gives it, the
 * workspace for every stage the rank runs, and every stage an instruction
 * touches is held by this rank. A plan that passes
 * cannot make the interpreter read or write out of bounds. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/model.h"
#include "vm.h"

/* Bytes an instruction needs in its slot i (its role), or 0 if none. */
static uint64_t need(const pp_plan *p, const pp_instr *in, int i)
{
    const pp_model *m = &p->model;
    int S = (int)p->S, s = in->stage;
    /* Jobs read the compute copy (bf16 with precision bf16) and accumulate
     * fp32 gradients. */
    uint64_t weights = pp_stage_compute_bytes(m, S, s);
    uint64_t grads = (uint64_t)pp_stage_param_count(m, S, s) * sizeof(float);
    switch ((pp_opcode)in->op) {
    case PP_OP_FetchWeights:
        return weights;
    case PP_OP_ZeroGrads:
    case PP_OP_SendWeightGrad:
    case PP_OP_RecvWeightGrad:
        return grads;
    case PP_OP_SendWeights:
    case PP_OP_ReduceGrads:
    case PP_OP_OptimizerStep:
    case PP_OP_GroupStart:
    case PP_OP_GroupEnd:
    case PP_OP_COUNT:
        return 0;
    case PP_OP_LoadMicroBatch:
        return pp_tokens_bytes(m);
    case PP_OP_Forward: /* in, stash, out, tgt, wts */
        if (i == 4)
            return weights;
        if (i == 0)
            return s == 0 ? pp_tokens_bytes(m) : pp_act_bytes(m);
        if (i == 1)
            return pp_stage_stash_bytes(m, S, s);
        return i == 2 ? pp_act_bytes(m) : pp_tokens_bytes(m);
    case PP_OP_Backward: /* stash, dout, din, wts, wgrad */
        return i == 0 ? pp_stage_stash_bytes(m, S, s) : i == 3 ? weights : i == 4 ? grads
                                                                          : pp_act_bytes(m);
    case PP_OP_BackwardInput: /* stash (with the split region), dout, din, wts */
        return i == 0 ? pp_stage_stash_bytes_split(m, S, s) : i == 3 ? weights : pp_act_bytes(m);
    case PP_OP_BackwardWeight: /* stash, wgrad */
        return i == 0 ? pp_stage_stash_bytes_split(m, S, s) : grads;
    case PP_OP_SendActivation:
    case PP_OP_RecvActivation:
    case PP_OP_SendGrad:
    case PP_OP_RecvGrad:
        return pp_act_bytes(m);
    }
    return 0;
}

/* The slot through which a job on a stage this rank does not own reads the
 * weights (wts) or accumulates their gradients (wgrad); -1 if none needed. */
static int weights_slot(const pp_instr *in, int grads)
{
    switch ((pp_opcode)in->op) {
    case PP_OP_Forward:
        return grads ? -1 : 4;
    case PP_OP_Backward:
        return grads ? 4 : 3;
    case PP_OP_BackwardInput:
        return grads ? -1 : 3;
    case PP_OP_BackwardWeight:
        return grads ? 1 : -1;
    default:
        return -1;
    }
}

/* The most one buffer may hold: the VM rounds each size up to 64 bytes,
 * which must not wrap. (A size this machine cannot allocate still fails at
 * start-up, as out of memory.) */
#define MAX_BUFFER_BYTES ((uint64_t)SIZE_MAX - 64)

int pp_vm_check_plan(const pp_plan *p, char *err, size_t errlen)
{
    int S = (int)p->S;
    for (uint32_t k = 0; k < p->nslots; k++)
        if (p->slot_bytes[k] > MAX_BUFFER_BYTES) {
            snprintf(err, errlen, "slot s%u is %llu bytes, more than one buffer can be (%llu)", k,
                     (unsigned long long)p->slot_bytes[k], (unsigned long long)MAX_BUFFER_BYTES);
            return -1;
        }
    if (p->workspace_bytes > MAX_BUFFER_BYTES) {
        snprintf(err, errlen, "the workspace is %llu bytes, more than one buffer can be (%llu)",
                 (unsigned long long)p->workspace_bytes, (unsigned long long)MAX_BUFFER_BYTES);
        return -1;
    }
    for (uint32_t k = 0; k < p->ninstr; k++) {
        const pp_instr *in = &p->code[k];
        const char *name = pp_op_name(in->op);
        /* transfers (they have a peer) name the stage that produced the data,
         * which is held elsewhere; every other stage operand must be held here */
        unsigned uses = pp_op_uses(in->op);
        int computes = (uses & PP_U_STAGE) && !(uses & PP_U_PEER);
        if (computes && !p->stage_role[in->stage]) {
            snprintf(err, errlen, "instruction %u (%s): stage %d is not held by this rank", k,
                     name, in->stage);
            return -1;
        }
        int s = in->stage;
        int owner = (uses & PP_U_STAGE) && (p->stage_role[s] & PP_ROLE_OWNER);
        int needs_own = in->op == PP_OP_SendWeights || in->op == PP_OP_RecvWeightGrad ||
                        in->op == PP_OP_ReduceGrads || in->op == PP_OP_OptimizerStep;
        if (needs_own && !owner) {
            snprintf(err, errlen, "instruction %u (%s): stage %d's weights are not owned by this rank",
                     k, name, s);
            return -1;
        }
        /* a stage without weights (a middle stage of blocks = 0) reads none */
        int weightless = (uses & PP_U_STAGE) && pp_stage_param_count(&p->model, S, s) == 0;
        for (int g = 0; g < 2 && !owner && !weightless; g++) {
            int i = weights_slot(in, g);
            if (i >= 0 && in->slot[i] < 0) {
                snprintf(err, errlen,
                         "instruction %u (%s): stage %d is not owned here, so its %s slot is needed",
                         k, name, s, g ? "wgrad" : "wts");
                return -1;
            }
        }
        if (in->op == PP_OP_Forward && (in->slot[2] < 0) != (s == S - 1)) {
            snprintf(err, errlen, "instruction %u (Forward): stage %d %s an output slot", k, s,
                     s == S - 1 ? "is the last and must not have" : "needs");
            return -1;
        }
        if (in->op == PP_OP_Forward && (in->slot[3] < 0) != (s != S - 1)) {
            snprintf(err, errlen, "instruction %u (Forward): only the last stage reads targets", k);
            return -1;
        }
        int job = in->op == PP_OP_Forward || in->op == PP_OP_Backward ||
                  in->op == PP_OP_BackwardInput || in->op == PP_OP_BackwardWeight;
        uint64_t work = job ? pp_stage_workspace_bytes(&p->model, S, s) : 0;
        if (work > p->workspace_bytes) {
            snprintf(err, errlen,
                     "instruction %u (%s): the workspace holds %llu bytes but stage %d needs %llu "
                     "for this model",
                     k, name, (unsigned long long)p->workspace_bytes, s,
                     (unsigned long long)work);
            return -1;
        }
        if ((in->op == PP_OP_Backward || in->op == PP_OP_BackwardInput) &&
            ((in->slot[1] < 0) != (s == S - 1) || (in->slot[2] < 0) != (s == 0))) {
            snprintf(err, errlen,
                     "instruction %u (%s): stage %d needs dout iff not last, din iff not first",
                     k, name, s);
            return -1;
        }
        for (int i = 0; i < pp_op_nslots(in->op); i++) {
            int sl = in->slot[i];
            uint64_t want = need(p, in, i);
            if (sl >= 0 && p->slot_bytes[sl] < want) {
                snprintf(err, errlen,
                         "instruction %u (%s): slot s%d holds %llu bytes but its role '%s' needs "
                         "%llu for this model",
                         k, name, sl, (unsigned long long)p->slot_bytes[sl],
                         pp_op_slot_role(in->op, i, NULL), (unsigned long long)want);
                return -1;
            }
        }
    }
    return 0;
}
