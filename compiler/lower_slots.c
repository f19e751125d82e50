/* lower_slots.c - static slot allocation: each logical buffer of a rank's
 * stream gets a slot of the plan's slot table by liveness (lower_internal.h),
 * so the table is all the VM ever allocates besides its own stages. The
 * members of a transfer group run concurrently, so a buffer they touch is
 * live over the whole group (transfer_groups.h); so do the two jobs after
 * an Overlap marker, which are treated as a group of their own. */
#include <stdlib.h>
#include <string.h>

#include "lower_internal.h"
#include "slot_pool.h"
#include "transfer_groups.h"

/* The buffers ordered by end, ties by index: a counting sort, as every end
 * is an instruction index in [0, n). count is scratch of n + 1. */
static void sort_by_end(const stream *st, int *idx, int *count)
{
    memset(count, 0, ((size_t)st->n + 1) * sizeof *count);
    for (int k = 0; k < st->nbuf; k++)
        count[st->buf[k].end + 1]++;
    for (int i = 0; i < st->n; i++)
        count[i + 1] += count[i];
    for (int k = 0; k < st->nbuf; k++)
        idx[count[st->buf[k].end]++] = k;
}

/* Linear-scan slot assignment by one policy: fills slot_of[buffer] and
 * sizes[slot], returns the number of slots (-1 out of memory). Slots freed
 * before instruction i are those whose buffer's end is before the start of
 * i's transfer group (i itself when it is in none), so an instruction's
 * inputs and outputs never share, and neither do the members of one group,
 * which run concurrently (transfer_groups.h).
 * run_first[i] is the first instruction of i's group, or i.
 *   exact: a buffer takes a free slot of exactly its size, or a new one;
 *   grow:  a buffer takes the free slot that grows least to hold it
 *          (ties: the one it wastes least of), or a new one if none is free.
 * Exact sizes suit streams of a few sizes used in turn (a pipeline's
 * activations and stashes); growing lets different sizes share (a bf16
 * weight fetch, then the fp32 gradients of the same stage, twice its
 * size). `by_end` orders the buffers by last use. Among equally good free
 * slots the one earliest in the free list wins (slot_pool.h): the
 * pool answers in O(log n) what a scan of every free slot answered.
 * `host` picks the buffers of one side: device (0) or offloaded stashes on
 * the host (1); the two never share a slot. */
static int scan_slots(const stream *st, const int *by_end, const int *run_first, int grow,
                      int host, const uint64_t *classes, int nclass, int *slot_of,
                      uint64_t *sizes)
{
    pp_slot_pool pool;
    int nslots = 0, e = 0;
    if (pp_slot_pool_init(&pool, classes, nclass, st->nbuf))
        return -1;
    for (int k = 0; k < st->nbuf; k++)
        slot_of[k] = -1;
    for (int i = 0; i < st->n; i++) {
        while (e < st->nbuf && st->buf[by_end[e]].end < run_first[i]) {
            int f = slot_of[by_end[e]];
            if (f >= 0 && pp_slot_pool_put(&pool, f, sizes[f]))
                goto nomem;
            e++;
        }
        for (int k = 0; k < PP_MAX_SLOTS; k++) {
            int b = st->code[i].slot[k];
            if (b < 0 || st->buf[b].def != i || slot_of[b] >= 0 || st->buf[b].host != host)
                continue;
            uint64_t want = st->buf[b].bytes;
            int f = pp_slot_pool_take(&pool, want, grow);
            if (f == -2)
                goto nomem;
            if (f >= 0) {
                slot_of[b] = f;
                if (sizes[f] < want)
                    sizes[f] = want;
            } else {
                sizes[nslots] = want;
                slot_of[b] = nslots++;
            }
        }
    }
    pp_slot_pool_free(&pool);
    return nslots;
nomem:
    pp_slot_pool_free(&pool);
    return -1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The distinct buffer sizes of the stream, ascending, into classes; their
 * count, or -1 out of memory. A slot's size is always one of them: the
 * largest buffer it held. A stream has a few sizes and many buffers, so
 * they are deduplicated through a hash set first and only the few sorted. */
static int size_classes(const stream *st, uint64_t *classes)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)st->nbuf)
        cap *= 2;
    uint64_t *set = malloc(cap * sizeof *set);
    unsigned char *used = calloc(cap, 1);
    int n = 0;
    if (!set || !used) {
        free(set);
        free(used);
        return -1;
    }
    for (int k = 0; k < st->nbuf; k++) {
        uint64_t v = st->buf[k].bytes;
        size_t i = (size_t)((v * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
        while (used[i] && set[i] != v)
            i = (i + 1) & (cap - 1);
        if (!used[i]) {
            used[i] = 1;
            set[i] = v;
            classes[n++] = v;
        }
    }
    free(set);
    free(used);
    qsort(classes, (size_t)n, sizeof *classes, cmp_u64);
    return n;
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
    uint64_t *classes = malloc(n * sizeof *classes);
    /* buffers ordered by last use, to free them as the scan passes */
    int *by_end = malloc(n * sizeof *by_end);
    /* the transfer groups pp_group_transfers will make, by instruction */
    int *run_first = malloc(((size_t)st->n + 1) * sizeof *run_first);
    int *run_last = malloc(((size_t)st->n + 1) * sizeof *run_last);
    int *ends = malloc(((size_t)st->n + 1) * sizeof *ends); /* sort_by_end's counts */
    int nslots[2], rc = -1, *final = NULL;
    if (!slot_of[0] || !slot_of[1] || !sizes[0] || !sizes[1] || !classes || !by_end || !run_first ||
        !run_last || !ends)
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
    sort_by_end(st, by_end, ends);
    int nclass = size_classes(st, classes);
    if (nclass < 0)
        goto out;
    /* the device slots first, then the host slots (offload), each side by
     * its better policy; a plan without offload has no host side. final[]
     * takes each buffer's slot. */
    p->nslots = 0;
    p->slot_bytes = malloc(n * sizeof *p->slot_bytes);
    final = malloc(n * sizeof *final);
    if (!p->slot_bytes || !final)
        goto out;
    for (int host = 0; host < 2; host++) {
        for (int grow = 0; grow < 2; grow++)
            if ((nslots[grow] = scan_slots(st, by_end, run_first, grow, host, classes, nclass,
                                           slot_of[grow], sizes[grow])) < 0)
                goto out;
        int pick = total_bytes(sizes[1], nslots[1]) < total_bytes(sizes[0], nslots[0]);
        for (int k = 0; k < st->nbuf; k++)
            if (st->buf[k].host == host)
                final[k] = slot_of[pick][k] + (int)p->nslots;
        memcpy(p->slot_bytes + p->nslots, sizes[pick], (size_t)nslots[pick] * sizeof *sizes[pick]);
        p->nslots += (uint32_t)nslots[pick];
    }
    for (int i = 0; i < st->n; i++)
        for (int k = 0; k < PP_MAX_SLOTS; k++)
            if (st->code[i].slot[k] >= 0)
                st->code[i].slot[k] = final[st->code[i].slot[k]];
    rc = 0;
out:
    free(final);
    free(ends);
    free(run_last);
    free(run_first);
    free(by_end);
    free(classes);
    for (int k = 0; k < 2; k++) {
        free(sizes[k]);
        free(slot_of[k]);
    }
    return rc;
}
