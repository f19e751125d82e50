/* plan_memory.c - what the VM allocates to run a plan (pp_plan_memory, the
 * one computation the report's mem_bytes and ppvm's memory line both use;
 * pp_plan_host_memory, offload's host slots) and the --mem-limit check on
 * the device figure. */
#include <stdlib.h>

#include "lower_internal.h"

#include "../isa/model_shape.h"
#include "../isa/tied.h"

/* The workspace, twice with an Overlap pair (isa/plan.h). */
static uint64_t workspace_total(const pp_plan *p)
{
    return pp_plan_workspaces(p) * p->workspace_bytes;
}

/* The slots' bytes on the device (host 0) or the host (host 1); -1 out of
 * memory as UINT64_MAX. */
static uint64_t slot_total(const pp_plan *p, int host)
{
    uint8_t *h = calloc((size_t)p->nslots + 1, 1);
    uint64_t all = 0;
    if (!h)
        return UINT64_MAX;
    for (uint32_t k = 0; k < p->nslots; k++)
        all += p->slot_bytes[k];
    uint64_t hb = pp_plan_host_slots(p, h) ? pp_plan_host_bytes(p, h) : 0;
    free(h);
    return host ? hb : all - hb;
}

uint64_t pp_plan_host_memory(const pp_plan *p) { return slot_total(p, 1); }

uint64_t pp_plan_memory(const pp_plan *p)
{
    /* what an owner holds outside the slots: its fp32 weights, their
     * gradients and the optimizer's state, and with precision bf16 the
     * compute copy its jobs read and its SendWeights send (the tied
     * embedding once where it owns both tied stages: isa/tied.h) */
    return workspace_total(p) + slot_total(p, 0) + pp_plan_owned_bytes(p);
}

/* --mem-limit: the first instruction at which the rank's memory (its own
 * stages' weights, gradients, optimizer state and bf16 copies, its
 * workspace, plus the slots allocated so far) exceeds the limit. Slots are
 * counted at their first definition, in order, each at its final size (the
 * largest buffer it holds, which may come later: slots can grow). */
int lower_check_mem_limit(const pp_plan *p, int rank, uint64_t limit, pp_diag *d)
{
    const char *owned = p->model.precision == PP_PREC_BF16
                            ? "weights, gradients, optimizer state and bf16 copies"
                            : "weights, gradients and optimizer state";
    uint64_t own = pp_plan_owned_bytes(p), total;
    uint64_t work = workspace_total(p);
    const char *works = pp_plan_workspaces(p) > 1 ? "its two workspaces" : "its workspace";
    total = own + work;
    /* device slots are numbered in order of first definition, the host
     * slots (offload) after them, which the device figure leaves out */
    uint8_t *host = calloc((size_t)p->nslots + 1, 1);
    if (!host) {
        diag_nomem(d, "for --mem-limit");
        return 1;
    }
    pp_plan_host_slots(p, host);
    uint32_t seen = 0;
    for (uint32_t i = 0; i < p->ninstr && total <= limit; i++)
        for (int k = 0; k < PP_MAX_SLOTS; k++) {
            int32_t sl = p->code[i].slot[k];
            if (sl >= 0 && (uint32_t)sl == seen && !host[sl]) {
                total += p->slot_bytes[seen++];
                if (total > limit) {
                    const pp_instr *in = &p->code[i];
                    diag_error_noloc(d,
                                     "worker %d needs %llu bytes at instruction %u (%s, stage %d, "
                                     "microbatch %d), over --mem-limit %llu: %llu for its own "
                                     "stages' %s, %llu for %s, %llu in %u slot%s",
                                     rank, (unsigned long long)total, i, pp_op_name(in->op),
                                     in->stage, in->mb, (unsigned long long)limit,
                                     (unsigned long long)own, owned, (unsigned long long)work,
                                     works, (unsigned long long)(total - own - work), seen,
                                     seen == 1 ? "" : "s");
                    free(host);
                    return 1;
                }
            }
        }
    free(host);
    if (own + work > limit) {
        diag_error_noloc(d,
                         "worker %d needs %llu bytes before its first instruction, over "
                         "--mem-limit %llu: %llu for its own stages' %s, %llu for %s",
                         rank, (unsigned long long)(own + work), (unsigned long long)limit,
                         (unsigned long long)own, owned, (unsigned long long)work, works);
        return 1;
    }
    return 0;
}
