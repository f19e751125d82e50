/* data.c - loading the data (raw bytes or an llm.c token shard, data.h) and
 * drawing deterministic microbatches. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../isa/openfile.h"

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Little-endian, whatever the host: the formats are. */
static int32_t le_i32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* The whole file into a malloc'd buffer; NULL with err. */
static uint8_t *read_all(const char *path, size_t *len, char *err, size_t errlen)
{
    const char *kind;
    long long size = 0;
    FILE *f = pp_open_regular(path, &kind, &size); /* never blocks on a FIFO */
    if (!f) {
        if (kind)
            snprintf(err, errlen,
                     "data file '%s' is %s (expected a regular file: raw bytes or an llm.c token "
                     "shard)",
                     path, kind);
        else
            snprintf(err, errlen, "cannot open data file '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (size == 0) {
        fclose(f);
        snprintf(err, errlen,
                 "data file '%s' is empty (expected raw bytes or an llm.c token shard)", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap * 2);
            if (!b)
                free(buf);
            buf = b;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        snprintf(err, errlen, "cannot read data file '%s'%s", path, buf ? "" : ": out of memory");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* An llm.c shard (buf starts with the magic) into ds->tokens; 0 or -1. */
static int load_shard(pp_dataset *ds, const char *path, const uint8_t *buf, size_t n,
                      uint32_t vocab, uint32_t need, char *err, size_t errlen)
{
    if (n < PP_SHARD_HEADER_BYTES) {
        snprintf(err, errlen,
                 "data file '%s' starts with the llm.c token shard magic %d but has %zu bytes, "
                 "fewer than the shard header's %d",
                 path, PP_SHARD_MAGIC, n, PP_SHARD_HEADER_BYTES);
        return -1;
    }
    int32_t version = le_i32(buf + 4), count = le_i32(buf + 8);
    if (version != PP_SHARD_VERSION) {
        snprintf(err, errlen,
                 "data file '%s' is an llm.c token shard of version %d; expected version %d "
                 "(uint16 tokens)",
                 path, version, PP_SHARD_VERSION);
        return -1;
    }
    if (count < 0 || (uint32_t)count < need) {
        snprintf(err, errlen,
                 "data file '%s' is an llm.c token shard of %d tokens; the model's context of %u "
                 "needs at least %u",
                 path, count, need - 1, need);
        return -1;
    }
    size_t want = PP_SHARD_HEADER_BYTES + 2 * (size_t)count;
    if (n != want) {
        snprintf(err, errlen,
                 "data file '%s' is an llm.c token shard of %d tokens, so it should have "
                 "1024 + 2*%d = %zu bytes, but it has %zu",
                 path, count, count, want, n);
        return -1;
    }
    uint16_t *t = malloc((size_t)count * sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory loading data file '%s' (%d tokens)", path, count);
        return -1;
    }
    const uint8_t *p = buf + PP_SHARD_HEADER_BYTES;
    for (size_t i = 0; i < (size_t)count; i++) {
        t[i] = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        if (t[i] >= vocab) {
            snprintf(err, errlen,
                     "data file '%s' (llm.c token shard): token %zu is %u, outside the model's "
                     "vocabulary of %u (expected tokens 0 to %u)",
                     path, i, t[i], vocab, vocab - 1);
            free(t);
            return -1;
        }
    }
    ds->tokens = t;
    ds->len = (size_t)count;
    ds->format = PP_DATA_SHARD;
    return 0;
}

/* Raw bytes, one token each; 0 or -1. */
static int load_bytes(pp_dataset *ds, const char *path, const uint8_t *buf, size_t n,
                      uint32_t vocab, uint32_t need, char *err, size_t errlen)
{
    if (n < need) {
        snprintf(err, errlen,
                 "data file '%s' has %zu bytes; the model's context of %u needs at least %u", path,
                 n, need - 1, need);
        return -1;
    }
    for (size_t i = 0; vocab < 256 && i < n; i++)
        if (buf[i] >= vocab) {
            snprintf(err, errlen,
                     "data file '%s' is read as raw bytes (one token each; it is not an llm.c "
                     "token shard), but byte %zu is %u, outside the model's vocabulary of %u: "
                     "give a model with vocab 256 or more, or an llm.c token shard",
                     path, i, buf[i], vocab);
            return -1;
        }
    uint16_t *t = malloc(n * sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory loading data file '%s' (%zu bytes)", path, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        t[i] = buf[i];
    ds->tokens = t;
    ds->len = n;
    ds->format = PP_DATA_BYTES;
    return 0;
}

int pp_data_load(pp_dataset *ds, const char *path, const pp_model *m, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    size_t n;
    uint8_t *buf = read_all(path, &n, err, errlen);
    if (!buf)
        return -1;
    uint32_t vocab = pp_model_vocab(m), need = m->context + 1;
    int rc = n >= 4 && le_i32(buf) == PP_SHARD_MAGIC
                 ? load_shard(ds, path, buf, n, vocab, need, err, errlen)
                 : load_bytes(ds, path, buf, n, vocab, need, err, errlen);
    free(buf);
    return rc;
}

void pp_data_free(pp_dataset *ds)
{
    free(ds->tokens);
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
            row[c] = ds->tokens[pos + c];
    }
}
