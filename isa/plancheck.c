/* plancheck.c - pp_verify_sizes (verify.h), what a plan must satisfy beyond
 * the format's own rules before any backend runs it: every slot is big
 * enough for the role an instruction gives it, the workspace for every
 * stage the rank runs, and every stage an instruction touches is held by
 * this rank. A plan that passes cannot make an interpreter read or write
 * out of bounds. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model_shape.h"
#include "verify.h"

/* Bytes a slot holding content c of instruction in's stage needs
 * (isa/opcodes.h). Jobs read the compute copy (bf16 with precision bf16)
 * and accumulate fp32 gradients; the stash a split backward's B leaves
 * for W is larger than F's. */
static uint64_t content_bytes(const pp_plan *p, const pp_instr *in, pp_content c, int dstage)
{
    const pp_model *m = &p->model;
    int S = (int)p->S, s = in->stage;
    switch (c) {
    case PP_CONTENT_TOKENS:
        return pp_tokens_bytes(m);
    case PP_CONTENT_ACT: /* the output of F(-1,b) is the microbatch */
        return s + dstage < 0 ? pp_tokens_bytes(m) : pp_act_bytes(m);
    case PP_CONTENT_GRAD:
        return pp_act_bytes(m);
    case PP_CONTENT_STASH:
    case PP_CONTENT_HSTASH: /* offload's copy of it on the host */
        return pp_stage_stash_bytes(m, S, s);
    case PP_CONTENT_STASHW:
        return pp_stage_stash_bytes_split(m, S, s);
    case PP_CONTENT_WTS:
        return pp_stage_compute_bytes(m, S, s);
    case PP_CONTENT_WGRAD:
    case PP_CONTENT_TMP:
        return (uint64_t)pp_stage_param_count(m, S, s) * sizeof(float);
    case PP_CONTENT_TIED: /* the token embedding: vocab x embed */
        return (uint64_t)m->vocab * m->embed * sizeof(float);
    case PP_CONTENT_NONE:
    case PP_CONTENT_COUNT:
        break;
    }
    return 0;
}

/* Bytes slot operand i of an instruction needs: what it holds before and,
 * for an UPD slot, after. */
static uint64_t need(const pp_plan *p, const pp_instr *in, int i)
{
    const pp_slot_spec *sp = &pp_op(in->op)->slot[i];
    uint64_t before = content_bytes(p, in, sp->content, sp->dstage);
    uint64_t after = sp->becomes ? content_bytes(p, in, sp->becomes, sp->dstage) : 0;
    return before > after ? before : after;
}

/* The most one buffer may hold: the VM rounds each size up to 64 bytes,
 * which must not wrap. (A size this machine cannot allocate still fails at
 * start-up, as out of memory.) */
#define MAX_BUFFER_BYTES ((uint64_t)SIZE_MAX - 64)

int pp_verify_sizes(const pp_plan *p, char *err, size_t errlen)
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
        const pp_op_info *o = pp_op(in->op);
        int computes = (uses & PP_U_STAGE) && !pp_op_is_transfer(in->op);
        if (computes && !p->stage_role[in->stage]) {
            snprintf(err, errlen, "instruction %u (%s): stage %d is not held by this rank", k, name,
                     in->stage);
            return -1;
        }
        int s = in->stage;
        int owner = (uses & PP_U_STAGE) && (p->stage_role[s] & PP_ROLE_OWNER);
        /* it touches the own weights or gradients with no slot to stand in */
        int needs_own = (o->params && pp_slot_index(in->op, PP_ROLE_WTS) < 0) ||
                        (o->grads && pp_slot_index(in->op, PP_ROLE_WGRAD) < 0);
        if (needs_own && !owner) {
            snprintf(err, errlen,
                     "instruction %u (%s): stage %d's weights are not owned by this rank", k, name,
                     s);
            return -1;
        }
        /* a stage without weights (a middle stage of blocks = 0) reads none */
        int weightless = (uses & PP_U_STAGE) && pp_stage_param_count(&p->model, S, s) == 0;
        for (int g = 0; g < 2 && !owner && !weightless; g++) {
            pp_role r = g ? PP_ROLE_WGRAD : PP_ROLE_WTS;
            if ((g ? o->grads : o->params) && pp_slot_index(in->op, r) >= 0 && pp_slot(in, r) < 0) {
                snprintf(
                    err, errlen,
                    "instruction %u (%s): stage %d is not owned here, so its %s slot is needed", k,
                    name, s, g ? "wgrad" : "wts");
                return -1;
            }
        }
        /* optional slots the table ties to the stage's place (LAST, NOTLAST, NOTFIRST) */
        for (int i = 0; i < pp_op_nslots(in->op); i++) {
            const pp_slot_spec *sp = &o->slot[i];
            int present = in->slot[i] >= 0;
            int want = pp_slot_wanted(sp, s, S);
            if (sp->when != PP_WHEN_ANY && want != present) {
                static const char *const where[] = {"", "on the last stage only",
                                                    "on every stage but the last",
                                                    "on every stage but the first"};
                const char *role = pp_role_name(sp->role);
                snprintf(err, errlen,
                         "instruction %u (%s): stage %d of %d %s %s %s slot (expected one %s)", k,
                         name, s, S, present ? "has" : "lacks",
                         strchr("aeiou", role[0]) ? "an" : "a", role, where[sp->when]);
                return -1;
            }
        }
        int job = o->kind == PP_KIND_COMPUTE;
        uint64_t work = job ? pp_stage_workspace_bytes(&p->model, S, s) : 0;
        if (work > p->workspace_bytes) {
            snprintf(err, errlen,
                     "instruction %u (%s): the workspace holds %llu bytes but stage %d needs %llu "
                     "for this model",
                     k, name, (unsigned long long)p->workspace_bytes, s, (unsigned long long)work);
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
