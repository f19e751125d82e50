/* radix_sort.c - the stable radix sort of radix_sort.h: 16-bit digits,
 * least significant first (four over the key, two over the group), each a
 * counting pass into a scratch array; a digit that every record shares is
 * skipped, so few distinct times or one group cost fewer passes. */
#include "radix_sort.h"

#include <stdlib.h>
#include <string.h>

#define DIGITS 65536

static unsigned digit(const pp_sort_rec *r, int d)
{
    return d < 4 ? (unsigned)(r->key >> (16 * d)) & 0xffff
                 : (unsigned)(r->group >> (16 * (d - 4))) & 0xffff;
}

int pp_radix_sort(pp_sort_rec *r, size_t n)
{
    if (n < 2)
        return 0;
    pp_sort_rec *tmp = malloc(n * sizeof *tmp);
    size_t *count = malloc(DIGITS * sizeof *count);
    if (!tmp || !count) {
        free(tmp);
        free(count);
        return -1;
    }
    pp_sort_rec *from = r, *to = tmp;
    for (int d = 0; d < 6; d++) {
        memset(count, 0, DIGITS * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[digit(&from[i], d)]++;
        if (count[digit(&from[0], d)] == n)
            continue; /* every record has this digit: the order stands */
        size_t sum = 0;
        for (size_t k = 0; k < DIGITS; k++) {
            size_t c = count[k];
            count[k] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            to[count[digit(&from[i], d)]++] = from[i];
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
