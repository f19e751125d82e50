/* names.c - the name index of names.h: FNV-1a hashing, linear probing, the
 * table doubled whenever it would become more than half full. */
#include "names.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

/* The index of key's cell, or of the empty cell where it would go. */
static size_t probe(const pp_names *ix, const char *key)
{
    size_t mask = ix->cap - 1, i = hash(key) & mask;
    while (ix->key[i] && strcmp(ix->key[i], key))
        i = (i + 1) & mask;
    return i;
}

int pp_names_get(const pp_names *ix, const char *key)
{
    if (!ix->cap)
        return -1;
    size_t i = probe(ix, key);
    return ix->key[i] ? ix->val[i] : -1;
}

static int grow(pp_names *ix)
{
    size_t cap = ix->cap ? ix->cap * 2 : 16;
    pp_names big = {calloc(cap, sizeof *big.key), malloc(cap * sizeof *big.val), cap, ix->n};
    if (!big.key || !big.val) {
        free(big.key);
        free(big.val);
        return -1;
    }
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->key[i]) {
            size_t k = probe(&big, ix->key[i]);
            big.key[k] = ix->key[i];
            big.val[k] = ix->val[i];
        }
    pp_names_free(ix);
    *ix = big;
    return 0;
}

int *pp_names_at(pp_names *ix, const char *key, int init)
{
    if (ix->cap) {
        size_t i = probe(ix, key);
        if (ix->key[i])
            return &ix->val[i];
    }
    if (2 * (ix->n + 1) > ix->cap && grow(ix))
        return NULL;
    size_t i = probe(ix, key);
    ix->key[i] = key;
    ix->val[i] = init;
    ix->n++;
    return &ix->val[i];
}

void pp_names_free(pp_names *ix)
{
    free(ix->key);
    free(ix->val);
    ix->key = NULL;
    ix->val = NULL;
    ix->cap = ix->n = 0;
}
