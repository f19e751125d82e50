/* ckpt_tied.c - the tied embedding once in a checkpoint (ckpt_tied.h):
 * stage S-1's files cut before its head, and the head put back from stage
 * 0's embedding on resuming. */
#include "ckpt_tied.h"

#include <stdlib.h>
#include <string.h>

#include "../isa/model_shape.h"

uint64_t pp_ckpt_tied_cut(const pp_model *m, int S, int s)
{
    return m->tie && S >= 2 && s == S - 1 ? (uint64_t)pp_tied_floats(m) : 0;
}

void pp_ckpt_tied_pack(float *opt, size_t k, size_t n, size_t cut)
{
    for (size_t i = 1; i < k; i++) /* moment 0 is in place already */
        memmove(opt + i * (n - cut), opt + i * n, (n - cut) * sizeof *opt);
}

int pp_ckpt_tied_unpack(void **data, const void *first, size_t k, size_t n, size_t n0, size_t cut,
                        size_t elem)
{
    char *out = malloc(k * (n + cut) * elem + 1);
    const char *in = *data, *f = first;
    if (!out)
        return -1;
    for (size_t i = 0; i < k; i++) { /* each vector: its own part, then the embedding */
        memcpy(out + i * (n + cut) * elem, in + i * n * elem, n * elem);
        memcpy(out + (i * (n + cut) + n) * elem, f + i * n0 * elem, cut * elem);
    }
    free(*data);
    *data = out;
    return 0;
}
