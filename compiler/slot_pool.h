/* slot_pool.h - the free slots of lower_slots.c's linear scan, in
 * O(log n) a call instead of a scan of every free slot (which made slot
 * assignment quadratic: GPipe at B = 65,536 took 78 s).
 *
 * It answers exactly what the plain scan answered, so plans do not change:
 * the free slots form a list; a freed slot is appended to its end; taking
 * the slot at position i moves the list's last slot into position i. A
 * request for `want` bytes takes
 *   exact: a free slot of exactly `want` bytes;
 *   grow:  the smallest free slot of at least `want` bytes, or, when every
 *          free slot is smaller, the largest one (it grows least);
 * and among free slots of the chosen size the one nearest the list's start.
 * Sizes are drawn from a fixed set of classes given up front (the stream's
 * buffer sizes); each class keeps a min-heap of the positions that hold its
 * slots (stale entries are dropped when they reach the top), and a tree of
 * per-class counts finds the nearest non-empty class. */
#ifndef PP_SLOT_POOL_H
#define PP_SLOT_POOL_H

#include <stdint.h>

typedef struct {
    int *pos;
    int n, cap;
} pp_pos_heap;

typedef struct {
    const uint64_t *size; /* [nclass] ascending, distinct (borrowed) */
    int nclass;
    int *list, nfree; /* the free list: slot numbers by position */
    int *class_of;    /* [maxslots] the class a free slot was put in */
    int maxslots;
    pp_pos_heap *heap; /* [nclass] */
    int *count;        /* [2 * leaves] free slots per class, summed up a tree */
    int leaves;
} pp_slot_pool;

/* A pool for slot numbers 0..maxslots-1 of the sizes in size[0..nclass)
 * (ascending, distinct; the caller keeps the array). 0, or -1 out of memory. */
int pp_slot_pool_init(pp_slot_pool *p, const uint64_t *size, int nclass, int maxslots);
void pp_slot_pool_free(pp_slot_pool *p);

/* Frees `slot`, which now holds `bytes` (one of the classes' sizes): it goes
 * to the end of the list. 0, or -1 out of memory or for a size that is no
 * class. */
int pp_slot_pool_put(pp_slot_pool *p, int slot, uint64_t bytes);

/* Takes the free slot the policy above picks for `want` bytes (grow = 0:
 * exact, 1: grow) and returns it; -1 when no free slot qualifies, -2 out of
 * memory (the pool is then unusable). */
int pp_slot_pool_take(pp_slot_pool *p, uint64_t want, int grow);

#endif
