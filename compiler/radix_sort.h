/* radix_sort.h - a stable LSD radix sort of (group, key) records, O(n) for
 * 64-bit keys: lowering orders millions of items by (rank, time) with it
 * instead of a comparison sort that moved 48-byte items O(n log n) times. */
#ifndef PP_RADIX_SORT_H
#define PP_RADIX_SORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t key;   /* second sort key */
    uint32_t group; /* first sort key */
    uint32_t val;   /* carried along (an index) */
} pp_sort_rec;

/* Sorts r[0..n) by (group, key) ascending, records that tie keeping their
 * order (stable). 0, or -1 out of memory (r unchanged). */
int pp_radix_sort(pp_sort_rec *r, size_t n);

/* A key whose unsigned order is the numeric order of x (any finite double;
 * -0.0 and 0.0 get one key, as they compare equal). */
uint64_t pp_double_key(double x);

#endif
