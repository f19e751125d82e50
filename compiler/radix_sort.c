/* radix_sort.c - the stable radix sort of radix_sort.h: 16-bit digits
 * (8-bit below 65,536 records), least significant first, the key's then the
 * group's, each a counting pass into a scratch array; a digit that every
 * record shares is skipped, so few distinct times or one group cost fewer
 * passes. */
#include "radix_sort.h"

#include <stdlib.h>
#include <string.h>

/* Digit `d` of `bits` bits, the key's digits first (least significant
 * first), then the group's. */
static unsigned digit(const pp_sort_rec *r, int d, int bits)
{
    int per_key = 64 / bits;
    unsigned mask = (1u << bits) - 1;
    return d < per_key ? (unsigned)(r->key >> (bits * d)) & mask
                       : (unsigned)(r->group >> (bits * (d - per_key))) & mask;
}

int pp_radix_sort(pp_sort_rec *r, size_t n)
{
    if (n < 2)
        return 0;
    /* 16-bit digits for many records; 8-bit ones for few, whose count
     * array is then not larger than the records (lowering sorts small
     * plans by the thousand in --search) */
    int bits = n >= 65536 ? 16 : 8, digits = 96 / bits;
    size_t buckets = (size_t)1 << bits;
    pp_sort_rec *tmp = malloc(n * sizeof *tmp);
    size_t *count = malloc(buckets * sizeof *count);
    if (!tmp || !count) {
        free(tmp);
        free(count);
        return -1;
    }
    pp_sort_rec *from = r, *to = tmp;
    for (int d = 0; d < digits; d++) {
        memset(count, 0, buckets * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[digit(&from[i], d, bits)]++;
        if (count[digit(&from[0], d, bits)] == n)
            continue; /* every record has this digit: the order stands */
        size_t sum = 0;
        for (size_t k = 0; k < buckets; k++) {
            size_t c = count[k];
            count[k] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            to[count[digit(&from[i], d, bits)]++] = from[i];
        pp_sort_rec *t = from;
        from = to;
        to = t;
    }
    if (from != r)
        memcpy(r, from, n * sizeof *r);
    free(count);
    free(tmp);
    return 0;
}

uint64_t pp_double_key(double x)
{
    uint64_t u;
    if (x == 0)
        x = 0; /* -0.0 */
    memcpy(&u, &x, sizeof u);
    return u >> 63 ? ~u : u | (1ull << 63);
}
