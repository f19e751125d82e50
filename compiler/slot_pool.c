/* slot_pool.c - the free-slot pool of slot_pool.h. */
#include "slot_pool.h"

#include <stdlib.h>
#include <string.h>

int pp_slot_pool_init(pp_slot_pool *p, const uint64_t *size, int nclass, int maxslots)
{
    memset(p, 0, sizeof *p);
    p->size = size;
    p->nclass = nclass;
    p->maxslots = maxslots;
    p->leaves = 1;
    while (p->leaves < nclass)
        p->leaves *= 2;
    p->list = malloc(((size_t)maxslots + 1) * sizeof *p->list);
    p->class_of = malloc(((size_t)maxslots + 1) * sizeof *p->class_of);
    p->heap = calloc((size_t)nclass + 1, sizeof *p->heap);
    p->count = calloc(2 * (size_t)p->leaves, sizeof *p->count);
    if (!p->list || !p->class_of || !p->heap || !p->count) {
        pp_slot_pool_free(p);
        return -1;
    }
    return 0;
}

void pp_slot_pool_free(pp_slot_pool *p)
{
    for (int c = 0; p->heap && c < p->nclass; c++)
        free(p->heap[c].pos);
    free(p->heap);
    free(p->count);
    free(p->class_of);
    free(p->list);
    memset(p, 0, sizeof *p);
}

/* The first class of at least `bytes` (nclass when none). */
static int lower_bound(const pp_slot_pool *p, uint64_t bytes)
{
    int lo = 0, hi = p->nclass;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (p->size[mid] < bytes)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void add_count(pp_slot_pool *p, int c, int delta)
{
    for (int i = c + p->leaves; i >= 1; i /= 2)
        p->count[i] += delta;
}

/* The first class >= c with a free slot, or -1. */
static int first_from(const pp_slot_pool *p, int c)
{
    if (c >= p->nclass)
        return -1;
    int i = c + p->leaves;
    if (p->count[i])
        return c;
    /* climb until a right sibling to the right of the path has slots */
    while (i > 1 && ((i & 1) || !p->count[i + 1]))
        i /= 2;
    if (i <= 1)
        return -1;
    for (i = i + 1; i < p->leaves;)
        i = p->count[2 * i] ? 2 * i : 2 * i + 1;
    return i - p->leaves;
}

/* The last class <= c with a free slot, or -1. */
static int last_upto(const pp_slot_pool *p, int c)
{
    if (c < 0)
        return -1;
    int i = c + p->leaves;
    if (p->count[i])
        return c;
    while (i > 1 && (!(i & 1) || !p->count[i - 1]))
        i /= 2;
    if (i <= 1)
        return -1;
    for (i = i - 1; i < p->leaves;)
        i = p->count[2 * i + 1] ? 2 * i + 1 : 2 * i;
    return i - p->leaves;
}

static int heap_push(pp_pos_heap *h, int pos)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 8;
        int *q = realloc(h->pos, (size_t)cap * sizeof *q);
        if (!q)
            return -1;
        h->pos = q;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0 && h->pos[(i - 1) / 2] > pos) {
        h->pos[i] = h->pos[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->pos[i] = pos;
    return 0;
}

static void heap_pop(pp_pos_heap *h)
{
    int last = h->pos[--h->n], i = 0;
    for (;;) {
        int k = 2 * i + 1;
        if (k >= h->n)
            break;
        if (k + 1 < h->n && h->pos[k + 1] < h->pos[k])
            k++;
        if (h->pos[k] >= last)
            break;
        h->pos[i] = h->pos[k];
        i = k;
    }
    if (h->n)
        h->pos[i] = last;
}

int pp_slot_pool_put(pp_slot_pool *p, int slot, uint64_t bytes)
{
    int c = lower_bound(p, bytes);
    if (c >= p->nclass || p->size[c] != bytes || slot < 0 || slot >= p->maxslots ||
        p->nfree >= p->maxslots)
        return -1;
    if (heap_push(&p->heap[c], p->nfree))
        return -1;
    p->list[p->nfree++] = slot;
    p->class_of[slot] = c;
    add_count(p, c, 1);
    return 0;
}

/* Takes class c's slot nearest the list's start (c has one). Heap entries
 * are positions that held a slot of class c when pushed; one that no longer
 * does (past the list's end, or refilled by another class's slot) is
 * dropped. Every position that holds a class-c slot has an entry, so the
 * first valid one is the nearest. */
static int take_from(pp_slot_pool *p, int c)
{
    pp_pos_heap *h = &p->heap[c];
    while (h->pos[0] >= p->nfree || p->class_of[p->list[h->pos[0]]] != c)
        heap_pop(h);
    int at = h->pos[0], slot = p->list[at];
    heap_pop(h);
    add_count(p, c, -1);
    int last = --p->nfree;
    if (at != last) { /* the last slot moves into the gap */
        p->list[at] = p->list[last];
        if (heap_push(&p->heap[p->class_of[p->list[at]]], at))
            return -2;
    }
    return slot;
}

int pp_slot_pool_take(pp_slot_pool *p, uint64_t want, int grow)
{
    int k = lower_bound(p, want), c;
    if (!grow)
        c = k < p->nclass && p->size[k] == want && p->count[k + p->leaves] ? k : -1;
    else if ((c = first_from(p, k)) < 0)
        c = last_upto(p, k - 1);
    return c < 0 ? -1 : take_from(p, c);
}
