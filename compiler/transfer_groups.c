/* transfer_groups.c - GroupStart/GroupEnd around runs of transfers (see
 * transfer_groups.h).
 *
 * Why a run may be grouped without a new deadlock proof: the checker
 * (isa/commcheck.c) proves the plan runs to its end when every transfer on a
 * stream waits for the one before it. A group of transfers on one stream
 * posts them together instead: each can match as soon as its peer posts,
 * and the group ends when the last one does - never later than that last
 * transfer would have ended ungrouped, which waited for all the others
 * anyway. Nothing on any rank can happen later than in the proven
 * execution, so none can block forever. This holds only within one
 * direction (one stream and communicator on the cuda backend): a group that
 * mixed the up and down streams would tie each to the other, which the
 * proven execution never does. Hence runs, not arbitrary sets. */
#include "transfer_groups.h"

#include <stdlib.h>
#include <string.h>

static pp_instr marker(int op)
{
    pp_instr in = {.op = (uint8_t)op, .stage = -1, .mb = -1, .peer = -1, .group = -1};
    for (int k = 0; k < PP_MAX_SLOTS; k++)
        in.slot[k] = -1;
    return in;
}

/* The length of the run of same-direction transfers that starts at i. */
static uint32_t run_at(const pp_instr *code, uint32_t ninstr, uint32_t rank, uint32_t i)
{
    int dir = pp_group_direction(&code[i], rank);
    uint32_t n = 0;
    while (dir >= 0 && i + n < ninstr && pp_group_direction(&code[i + n], rank) == dir)
        n++;
    return n;
}

void pp_transfer_runs(const pp_instr *code, uint32_t ninstr, uint32_t rank, int *first, int *last)
{
    for (uint32_t i = 0, n; i < ninstr; i += n) {
        n = run_at(code, ninstr, rank, i);
        if (n < 2)
            n = 1; /* a lone transfer is posted alone */
        for (uint32_t k = i; k < i + n; k++) {
            first[k] = (int)i;
            last[k] = (int)(i + n - 1);
        }
    }
}

int pp_group_transfers(pp_plan *p)
{
    uint32_t extra = 0;
    for (uint32_t i = 0, n; i < p->ninstr; i += n ? n : 1)
        if ((n = run_at(p->code, p->ninstr, p->rank, i)) >= 2)
            extra += 2;
    if (!extra)
        return 0;
    pp_instr *code = malloc(((size_t)p->ninstr + extra) * sizeof *code);
    if (!code)
        return -1;
    uint32_t out = 0;
    for (uint32_t i = 0; i < p->ninstr;) {
        uint32_t n = run_at(p->code, p->ninstr, p->rank, i);
        if (n < 2) {
            code[out++] = p->code[i++];
            continue;
        }
        code[out++] = marker(PP_OP_GroupStart);
        memcpy(code + out, p->code + i, n * sizeof *code);
        out += n;
        i += n;
        code[out++] = marker(PP_OP_GroupEnd);
    }
    free(p->code);
    p->code = code;
    p->ninstr = out;
    return 0;
}
