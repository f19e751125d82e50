/* data.c - loading the text and drawing deterministic microbatches. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int pp_data_load(pp_dataset *ds, const char *path, const pp_model *m, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open data file '%s': %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "cannot read data file '%s'", path);
        return -1;
    }
    if (n < (size_t)m->context + 1) {
        free(buf);
        snprintf(err, errlen,
                 "data file '%s' has %zu bytes; the model's context of %u needs at least %u", path,
                 n, m->context, m->context + 1);
        return -1;
    }
    ds->bytes = buf;
    ds->len = n;
    return 0;
}

void pp_data_free(pp_dataset *ds)
{
    free(ds->bytes);
    memset(ds, 0, sizeof *ds);
}

void pp_data_microbatch(const pp_dataset *ds, const pp_model *m, uint64_t seed, int step, int b,
                        int32_t *tokens)
{
    size_t windows = ds->len - m->context; /* start positions with a target after them */
    uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ (uint64_t)step) ^ (uint64_t)b);
    for (uint32_t i = 0; i < m->batch; i++) {
        size_t pos = (size_t)(splitmix64(h ^ i) % windows);
        int32_t *row = tokens + (size_t)i * (m->context + 1);
        for (uint32_t c = 0; c <= m->context; c++)
            row[c] = ds->bytes[pos + c];
    }
}
