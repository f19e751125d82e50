/* hostslots.c - which of a plan's slots are host slots (offload's pool).
 *
 * Format 8 has one slot table; a slot is a host slot when some instruction
 * touches it as a stash on the host (content HSTASH: an Offload's
 * destination, a Reload's source, isa/opcodes.h). Lowering gives host and
 * device buffers separate pools (compiler/lower_slots.c), so every slot is
 * one or the other; isa/bufcheck.c refuses a plan that mixes them. A plan
 * without offload has no host slot, so its bytes are what they were. */
#include "plan.h"

#include <string.h>

int pp_plan_host_slots(const pp_plan *p, uint8_t *host)
{
    int n = 0;
    memset(host, 0, p->nslots);
    for (uint32_t i = 0; i < p->ninstr; i++) {
        pp_touch t[PP_MAX_TOUCH];
        int m = pp_instr_touches(&p->code[i], t);
        for (int k = 0; k < m; k++)
            if (t[k].kind == PP_BUF_SLOT && t[k].spec->content == PP_CONTENT_HSTASH &&
                t[k].index >= 0 && (uint32_t)t[k].index < p->nslots && !host[t[k].index]) {
                host[t[k].index] = 1;
                n++;
            }
    }
    return n;
}

uint64_t pp_plan_host_bytes(const pp_plan *p, const uint8_t *host)
{
    uint64_t b = 0;
    for (uint32_t k = 0; k < p->nslots; k++)
        if (host[k])
            b += p->slot_bytes[k];
    return b;
}
