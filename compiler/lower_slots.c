/* lower_slots.c - static slot allocation: each logical buffer of a rank's
 * stream gets a slot of the plan's slot table by liveness (lower_internal.h),
 * so the table is all the VM ever allocates besides its own stages. The
 * members of a transfer group run concurrently, so a buffer they touch is
 * live over the whole group (transfer_groups.h); so do the two jobs after
 * an Overlap marker, which are treated as a group of their own. */
#include <stdlib.h>
#include <string.h>

#include "lower_internal.h"
#include "transfer_groups.h"

static const stream *sort_stream; /* qsort has no context argument */
static int cmp_end(const void *a, const void *b)
{
    int x = sort_stream->buf[*(const int *)a].end, y = sort_stream->buf[*(const int *)b].end;
    return x != y ? (x < y ? -1 : 1) : *(const int *)a - *(const int *)b;
}

static void sort_by_end(const stream *st, int *idx)
{
    for (int k = 0; k < st->nbuf; k++)
        idx[k] = k;
    sort_stream = st;
    qsort(idx, (size_t)st->nbuf, sizeof *idx, cmp_end);
}

/* Linear-scan slot assignment by one policy: fills slot_of[buffer] and
 * sizes[slot], returns the number of slots. Slots freed before instruction
 * i are those whose buffer's end is before the start of i's transfer group
 * (i itself when it is in none), so an instruction's inputs and outputs
 * never share, and neither do the members of one group, which run
 * concurrently (transfer_groups.h).
 * run_first[i] is the first instruction of i's group, or i.
 *   exact: a buffer takes a free slot of exactly its size, or a new one;
 *   grow:  a buffer takes the free slot that grows least to hold it
 *          (ties: the one it wastes least of), or a new one if none is free.
 * Exact sizes suit streams of a few sizes used in turn (a pipeline's
 * activations and stashes); growing lets different sizes share (a bf16
 * weight fetch, then the fp32 gradients of the same stage, twice its
 * size). `by_end` orders the buffers by last use; freelist is scratch. */
static int scan_slots(const stream *st, const int *by_end, const int *run_first, int grow,
                      int *slot_of, uint64_t *sizes, int *freelist)
{
    int nfree = 0, nslots = 0, e = 0;
    for (int k = 0; k < st->nbuf; k++)
        slot_of[k] = -1;
    for (int i = 0; i < st->n; i++) {
        while (e < st->nbuf && st->buf[by_end[e]].end < run_first[i]) {
            if (slot_of[by_end[e]] >= 0)
                freelist[nfree++] = slot_of[by_end[e]];
            e++;
        }
        for (int k = 0; k < PP_MAX_SLOTS; k++) {
            int b = st->code[i].slot[k];
            if (b < 0 || st->buf[b].def != i || slot_of[b] >= 0)
                continue;
            uint64_t want = st->buf[b].bytes;
            int best = -1;
            uint64_t best_grow = 0, best_waste = 0;
            for (int f = 0; f < nfree; f++) {
                uint64_t have = sizes[freelist[f]];
                if (!grow && have != want)
                    continue;
                uint64_t g = want > have ? want - have : 0, w = have > want ? have - want : 0;
                if (best < 0 || g < best_grow || (g == best_grow && w < best_waste)) {
                    best = f;
                    best_grow = g;
                    best_waste = w;
                }
            }
            if (best >= 0) {
                slot_of[b] = freelist[best];
                if (sizes[slot_of[b]] < want)
                    sizes[slot_of[b]] = want;
                freelist[best] = freelist[--nfree];
            } else {
                sizes[nslots] = want;
                slot_of[b] = nslots++;
            }
        }
    }
    return nslots;
}

static uint64_t total_bytes(const uint64_t *sizes, int n)
{
    uint64_t t = 0;
    for (int k = 0; k < n; k++)
        t += sizes[k];
    return t;
}

/* Slots for the stream's buffers: both policies of scan_slots, keeping the
 * one that allocates fewer bytes (exact on a tie, so a stream of one size
 * per role keeps slots of exactly its roles' sizes). Rewrites the stream's
 * buffer operands into slot numbers. */
int lower_assign_slots(stream *st, uint32_t rank, pp_plan *p)
{
    size_t n = (size_t)st->nbuf + 1;
    int *slot_of[2] = {malloc(n * sizeof(int)), malloc(n * sizeof(int))};
    uint64_t *sizes[2] = {malloc(n * sizeof(uint64_t)), malloc(n * sizeof(uint64_t))};
    int *freelist = malloc(n * sizeof *freelist);
    /* buffers ordered by last use, to free them as the scan passes */
    int *by_end = malloc(n * sizeof *by_end);
    /* the transfer groups pp_group_transfers will make, by instruction */
    int *run_first = malloc(((size_t)st->n + 1) * sizeof *run_first);
    int *run_last = malloc(((size_t)st->n + 1) * sizeof *run_last);
    int nslots[2], rc = -1;
    if (!slot_of[0] || !slot_of[1] || !sizes[0] || !sizes[1] || !freelist || !by_end ||
        !run_first || !run_last)
        goto out;
    pp_transfer_runs(st->code, (uint32_t)st->n, rank, run_first, run_last);
    for (int i = 0; i + 2 < st->n; i++) /* an overlapped pair: its two jobs, concurrent */
        if (st->code[i].op == PP_OP_Overlap) {
            run_first[i + 1] = run_first[i + 2] = i + 1;
            run_last[i + 1] = run_last[i + 2] = i + 2;
        }
    for (int k = 0; k < st->nbuf; k++) {
        if (st->buf[k].last_use < st->buf[k].def)
            st->buf[k].last_use = st->buf[k].def;
        st->buf[k].end = run_last[st->buf[k].last_use];
    }
    sort_by_end(st, by_end);
    for (int grow = 0; grow < 2; grow++)
        nslots[grow] =
            scan_slots(st, by_end, run_first, grow, slot_of[grow], sizes[grow], freelist);
    int pick = total_bytes(sizes[1], nslots[1]) < total_bytes(sizes[0], nslots[0]);
    for (int i = 0; i < st->n; i++)
        for (int k = 0; k < PP_MAX_SLOTS; k++)
            if (st->code[i].slot[k] >= 0)
                st->code[i].slot[k] = slot_of[pick][st->code[i].slot[k]];
    p->nslots = (uint32_t)nslots[pick];
    p->slot_bytes = malloc(((size_t)nslots[pick] + 1) * sizeof *p->slot_bytes);
    if (!p->slot_bytes)
        goto out;
    memcpy(p->slot_bytes, sizes[pick], (size_t)nslots[pick] * sizeof *p->slot_bytes);
    rc = 0;
out:
    free(run_last);
    free(run_first);
    free(by_end);
    free(freelist);
    for (int k = 0; k < 2; k++) {
        free(sizes[k]);
        free(slot_of[k]);
    }
    return rc;
}
