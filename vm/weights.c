/* weights.c - stage weight files (see weights.h). */
#include "weights.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../isa/openfile.h"
#include "../isa/plan.h"

static void path_of(char *buf, size_t n, const char *dir, int stage)
{
    snprintf(buf, n, "%s/stage%d.w", dir, stage);
}

int pp_weights_save(const char *dir, int stage, const float *w, size_t n, char *err,
                    size_t errlen)
{
    char path[4096];
    if (mkdir(dir, 0777) && errno != EEXIST) {
        snprintf(err, errlen, "cannot create '%s': %s", dir, strerror(errno));
        return -1;
    }
    path_of(path, sizeof path, dir, stage);
    size_t len = 4 + 4 + 4 + 8 + n * 4;
    uint8_t *buf = malloc(len + 4);
    if (!buf) {
        snprintf(err, errlen, "out of memory saving stage %d", stage);
        return -1;
    }
    uint32_t version = 1, st = (uint32_t)stage;
    uint64_t count = n;
    memcpy(buf, "PPWT", 4);
    memcpy(buf + 4, &version, 4); /* the machines we run on are little-endian */
    memcpy(buf + 8, &st, 4);
    memcpy(buf + 12, &count, 8);
    memcpy(buf + 20, w, n * 4);
    uint32_t crc = pp_crc32(buf, len);
    memcpy(buf + len, &crc, 4);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, len + 4, f) == len + 4;
    if (f && fclose(f))
        ok = 0;
    free(buf);
    if (!ok) {
        snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int pp_weights_load(const char *dir, int stage, float **w, size_t *n, char *err, size_t errlen)
{
    char path[4096];
    path_of(path, sizeof path, dir, stage);
    const char *kind;
    long long size = 0;
    FILE *f = pp_open_regular(path, &kind, &size); /* never blocks on a FIFO */
    if (!f) {
        if (kind)
            snprintf(err, errlen, "'%s' is %s, not a weights file", path, kind);
        else
            snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    uint8_t head[20];
    uint32_t version, st, crc, want;
    uint64_t count;
    int rc = -1;
    uint8_t *buf = NULL;
    if (size < 24 || fread(head, 1, 20, f) != 20 || memcmp(head, "PPWT", 4)) {
        snprintf(err, errlen,
                 "'%s' is not a weights file (%lld bytes; expected the magic PPWT and at least "
                 "24 bytes)",
                 path, size);
        goto out;
    }
    memcpy(&version, head + 4, 4);
    memcpy(&st, head + 8, 4);
    memcpy(&count, head + 12, 8);
    if (version != 1 || st != (uint32_t)stage || count > (1ull << 34)) {
        snprintf(err, errlen, "'%s': version %u stage %u count %llu (expected version 1, stage %d)",
                 path, version, st, (unsigned long long)count, stage);
        goto out;
    }
    if ((unsigned long long)size != 24 + count * 4) { /* truncated, or bytes after the checksum */
        snprintf(err, errlen,
                 "'%s' has %lld bytes, but its header says %llu weights: expected 20 + 4*%llu + 4 "
                 "= %llu (the file is %s)",
                 path, size, (unsigned long long)count, (unsigned long long)count,
                 24 + (unsigned long long)count * 4,
                 (unsigned long long)size < 24 + count * 4 ? "truncated" : "padded or corrupt");
        goto out;
    }
    buf = malloc(20 + count * 4 + 4);
    if (!buf) {
        snprintf(err, errlen, "out of memory reading '%s'", path);
        goto out;
    }
    memcpy(buf, head, 20);
    if (fread(buf + 20, 1, count * 4 + 4, f) != count * 4 + 4) {
        snprintf(err, errlen, "'%s' is truncated", path);
        goto out;
    }
    memcpy(&crc, buf + 20 + count * 4, 4);
    want = pp_crc32(buf, 20 + count * 4);
    if (crc != want) {
        snprintf(err, errlen, "'%s': checksum mismatch (file is corrupt)", path);
        goto out;
    }
    *w = malloc(count * 4 + 1);
    if (!*w) {
        snprintf(err, errlen, "out of memory reading '%s'", path);
        goto out;
    }
    memcpy(*w, buf + 20, count * 4);
    *n = count;
    rc = 0;
out:
    free(buf);
    fclose(f);
    return rc;
}

/* Whether dir can be compared: a directory that holds stage0.w. 0, or -1
 * having said what is wrong. */
static int check_weights_dir(const char *dir)
{
    struct stat st;
    char path[4096];
    if (stat(dir, &st)) {
        fprintf(stderr, "ppvm: --compare: cannot use '%s': %s (expected a directory that --save "
                        "wrote)\n", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ppvm: --compare: '%s' is %s, not a directory (expected a directory "
                        "that --save wrote)\n", dir, pp_file_kind(st.st_mode));
        return -1;
    }
    path_of(path, sizeof path, dir, 0);
    if (stat(path, &st)) {
        fprintf(stderr, "ppvm: --compare: '%s' holds no stage0.w (expected a directory that "
                        "--save wrote)\n", dir);
        return -1;
    }
    return 0;
}

static int count_stages(const char *dir)
{
    char path[4096];
    struct stat st;
    int s = 0;
    for (;; s++) {
        path_of(path, sizeof path, dir, s);
        if (stat(path, &st))
            return s;
    }
}

int pp_weights_compare(const char *a, const char *b, int S, double atol, double rtol)
{
    int result = 0;
    char err[4200];
    if (check_weights_dir(a) || check_weights_dir(b))
        return -1;
    if (S <= 0) { /* compare every stage the directories hold */
        int na = count_stages(a), nb = count_stages(b);
        if (na != nb || na == 0) {
            fprintf(stderr, "ppvm: %s holds %d stage files but %s holds %d\n", a, na, b, nb);
            return -1;
        }
        S = na;
    }
    for (int s = 0; s < S; s++) {
        float *wa = NULL, *wb = NULL;
        size_t na = 0, nb = 0;
        if (pp_weights_load(a, s, &wa, &na, err, sizeof err) ||
            pp_weights_load(b, s, &wb, &nb, err, sizeof err)) {
            fprintf(stderr, "ppvm: %s\n", err);
            free(wa);
            return -1;
        }
        if (na != nb) {
            printf("stage %d: %zu weights in %s but %zu in %s\n", s, na, a, nb, b);
            result = 1;
        } else {
            double worst = 0, excess = 0;
            size_t at = 0, bad = 0;
            for (size_t i = 0; i < na; i++) {
                double d = fabs((double)wa[i] - (double)wb[i]);
                double lim = atol + rtol * fabs((double)wb[i]);
                if (!(d <= lim)) { /* NaN counts as a mismatch */
                    bad++;
                    if (!(d - lim <= excess))
                        excess = d - lim, at = i;
                }
                if (d > worst)
                    worst = d;
            }
            printf("stage %d: %zu weights, max |diff| %.3g%s", s, na, worst,
                   bad ? "" : " (within tolerance)\n");
            if (bad) {
                printf(", %zu beyond atol %.1g + rtol %.1g (worst at %zu: %.9g vs %.9g)\n", bad,
                       atol, rtol, at, wa[at], wb[at]);
                result = 1;
            }
        }
        free(wa);
        free(wb);
    }
    return result;
}
