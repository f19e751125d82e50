/* names.h - a hash index from names to small non-negative integers, so that
 * looking a name up costs O(1) on average however many params and lets a
 * schedule defines (a linear search made 100,000 lets cost O(n^2) strcmp
 * calls: ~24 s). Keys are borrowed: the caller keeps them alive as long as
 * the index. Open addressing, kept at most half full. */
#ifndef PP_NAMES_H
#define PP_NAMES_H

#include <stddef.h>

typedef struct {
    const char **key; /* [cap], NULL = empty */
    int *val;         /* [cap] */
    size_t cap, n;
} pp_names;

/* The value stored under key, or -1 when there is none. */
int pp_names_get(const pp_names *ix, const char *key);

/* A pointer to key's value, inserting key with value `init` when it is not
 * there yet (the first value stays: the index never replaces a key). NULL
 * out of memory. The pointer holds until the next insertion. */
int *pp_names_at(pp_names *ix, const char *key, int init);

void pp_names_free(pp_names *ix);

#endif
