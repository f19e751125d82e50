/* weights.c - stage files (weights.h): the one format of --save's weights
 * and a checkpoint's weights, optimizer state and compute copies, written
 * atomically (temp file, fsync, rename, fsync of the directory), read back
 * with every header field, the size and the crc32 checked; and --compare. */
#include "weights.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../isa/openfile.h"
#include "../isa/plan.h"

static void path_of(char *buf, size_t n, const char *dir, int stage)
{
    snprintf(buf, n, "%s/stage%d.w", dir, stage);
}

int pp_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int pp_dir_writable(const char *dir, int tag, char *err, size_t errlen)
{
    char probe[4200];
    struct stat st;
    if (mkdir(dir, 0777) && errno != EEXIST) {
        snprintf(err, errlen, "cannot create directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "'%s' is not a directory", dir);
        return -1;
    }
    snprintf(probe, sizeof probe, "%s/.ppvm-probe-%d", dir, tag);
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write in directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(probe);
    return 0;
}

/* The directory part of path ("." when none). */
static void dir_of(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else
        snprintf(dir, n, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int pp_wfile_write(const char *path, const pp_wfile_head *h, const void *data, uint64_t *size,
                   uint32_t *crc, char *err, size_t errlen)
{
    char tmp[4200], dir[4200];
    size_t body = (size_t)h->count * h->elem, len = PP_WFILE_HEAD + body;
    uint8_t *buf = malloc(len + 4);
    if (!buf) {
        snprintf(err, errlen, "out of memory writing '%s'", path);
        return -1;
    }
    uint32_t version = PP_WFILE_VERSION; /* the machines we run on are little-endian */
    memcpy(buf, h->magic, 4);
    memcpy(buf + 4, &version, 4);
    memcpy(buf + 8, &h->plan_id, 8);
    memcpy(buf + 16, &h->stage, 4);
    memcpy(buf + 20, &h->step, 4);
    memcpy(buf + 24, &h->count, 8);
    memcpy(buf + 32, &h->elem, 4);
    if (body)
        memcpy(buf + PP_WFILE_HEAD, data, body);
    uint32_t c = pp_crc32(buf, len);
    memcpy(buf + len, &c, 4);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    dir_of(path, dir, sizeof dir);
    /* what failed, and on which name: the temp file until the rename */
    const char *what = "cannot create", *name = tmp;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666), rc = -1;
    if (fd >= 0 && !(what = "cannot write", write_all(fd, buf, len + 4)) &&
        !(what = "cannot fsync", fsync(fd))) {
        int closed = close(fd);
        fd = -1;
        if (!(what = "cannot close", closed) && !(what = "cannot rename", rename(tmp, path))) {
            what = "cannot fsync the directory of", name = path;
            rc = pp_fsync_dir(dir) ? -1 : 0;
        }
    }
    if (rc) {
        snprintf(err, errlen, "%s '%s': %s", what, name, strerror(errno));
        if (fd >= 0)
            close(fd);
        if (name == tmp)
            unlink(tmp);
    }
    free(buf);
    if (!rc && size)
        *size = len + 4;
    if (!rc && crc)
        *crc = c;
    return rc;
}

int pp_wfile_read(const char *path, const char magic[4], pp_wfile_head *h, void **data,
                  uint64_t *size, uint32_t *crc, char *err, size_t errlen)
{
    uint8_t head[PP_WFILE_HEAD], *buf = NULL;
    uint32_t version, stored, want;
    struct stat st;
    int rc = -1;
    *data = NULL;
    const char *kind;
    long long fsize = 0;
    FILE *f = pp_open_regular(path, &kind, &fsize); /* never blocks on a FIFO */
    if (!f) {
        if (kind)
            snprintf(err, errlen, "'%s' is %s, not a weights file", path, kind);
        else
            snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fileno(f), &st) || fread(head, 1, sizeof head, f) != sizeof head ||
        memcmp(head, magic, 4)) {
        snprintf(err, errlen, "'%s' is not a %.4s file (bad magic, or shorter than its header)",
                 path, magic);
        goto out;
    }
    memcpy(&version, head + 4, 4);
    memcpy(h->magic, head, 4);
    memcpy(&h->plan_id, head + 8, 8);
    memcpy(&h->stage, head + 16, 4);
    memcpy(&h->step, head + 20, 4);
    memcpy(&h->count, head + 24, 8);
    memcpy(&h->elem, head + 32, 4);
    if (version != PP_WFILE_VERSION) {
        snprintf(err, errlen, "'%s' is a %.4s file of version %u; expected version %d", path, magic,
                 version, PP_WFILE_VERSION);
        goto out;
    }
    if ((h->elem != 2 && h->elem != 4) || h->count > (1ull << 34)) {
        snprintf(err, errlen, "'%s': bad header (%llu elements of %u bytes)", path,
                 (unsigned long long)h->count, h->elem);
        goto out;
    }
    uint64_t want_size = PP_WFILE_HEAD + h->count * h->elem + 4;
    if ((uint64_t)st.st_size != want_size) {
        snprintf(err, errlen,
                 "'%s' is %s: its header says %llu elements (%llu bytes with header and crc) "
                 "but it has %llu bytes",
                 path, (uint64_t)st.st_size < want_size ? "truncated" : "padded",
                 (unsigned long long)h->count, (unsigned long long)want_size,
                 (unsigned long long)st.st_size);
        goto out;
    }
    buf = malloc(want_size);
    if (!buf) {
        snprintf(err, errlen, "out of memory reading '%s'", path);
        goto out;
    }
    memcpy(buf, head, sizeof head);
    if (fread(buf + sizeof head, 1, want_size - sizeof head, f) != want_size - sizeof head) {
        snprintf(err, errlen, "'%s' is truncated (it shrank while being read)", path);
        goto out;
    }
    memcpy(&stored, buf + want_size - 4, 4);
    want = pp_crc32(buf, want_size - 4);
    if (stored != want) {
        snprintf(err, errlen,
                 "'%s': checksum mismatch (stored crc32 %08x, computed %08x): the file is corrupt",
                 path, stored, want);
        goto out;
    }
    memmove(buf, buf + PP_WFILE_HEAD, want_size - PP_WFILE_HEAD - 4);
    *data = buf;
    buf = NULL;
    if (size)
        *size = want_size;
    if (crc)
        *crc = stored;
    rc = 0;
out:
    free(buf);
    fclose(f);
    return rc;
}

int pp_weights_save(const char *dir, int stage, uint64_t plan_id, int step, const float *w,
                    size_t n, char *err, size_t errlen)
{
    char path[4096];
    pp_wfile_head h = {{'P', 'P', 'W', 'T'}, plan_id, (uint32_t)stage, (uint32_t)step, n, 4};
    if (mkdir(dir, 0777) && errno != EEXIST) {
        snprintf(err, errlen, "cannot create '%s': %s", dir, strerror(errno));
        return -1;
    }
    path_of(path, sizeof path, dir, stage);
    return pp_wfile_write(path, &h, w, NULL, NULL, err, errlen);
}

int pp_weights_load(const char *dir, int stage, float **w, size_t *n, pp_wfile_head *h, char *err,
                    size_t errlen)
{
    char path[4096];
    pp_wfile_head mine;
    void *data;
    if (!h)
        h = &mine;
    path_of(path, sizeof path, dir, stage);
    if (pp_wfile_read(path, "PPWT", h, &data, NULL, NULL, err, errlen))
        return -1;
    if (h->stage != (uint32_t)stage || h->elem != 4) {
        snprintf(err, errlen, "'%s' holds stage %u in %u-byte elements; expected stage %d in fp32",
                 path, h->stage, h->elem, stage);
        free(data);
        return -1;
    }
    *w = data;
    *n = h->count;
    return 0;
}

/* Whether dir can be compared: a directory that holds stage0.w. 0, or -1
 * having said what is wrong. */
static int check_weights_dir(const char *dir)
{
    struct stat st;
    char path[4096];
    if (stat(dir, &st)) {
        fprintf(stderr,
                "ppvm: --compare: cannot use '%s': %s (expected a directory that --save "
                "wrote)\n",
                dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr,
                "ppvm: --compare: '%s' is %s, not a directory (expected a directory "
                "that --save wrote)\n",
                dir, pp_file_kind(st.st_mode));
        return -1;
    }
    path_of(path, sizeof path, dir, 0);
    if (stat(path, &st)) {
        fprintf(stderr,
                "ppvm: --compare: '%s' holds no stage0.w (expected a directory that "
                "--save wrote)\n",
                dir);
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

/* Files within one directory come from one run: the same plan id and step
 * as its stage 0. 0, or -1 (said). */
static int same_run(const char *dir, int s, const pp_wfile_head *first, const pp_wfile_head *h)
{
    if (h->plan_id == first->plan_id && h->step == first->step)
        return 0;
    char p0[4096], ps[4096];
    path_of(p0, sizeof p0, dir, 0);
    path_of(ps, sizeof ps, dir, s);
    fprintf(stderr,
            "ppvm: '%s' is from plan %016" PRIx64 " after step %u but '%s' is from plan %016" PRIx64
            " after step %u: the directory mixes files of different runs\n",
            ps, h->plan_id, h->step, p0, first->plan_id, first->step);
    return -1;
}

int pp_weights_compare(const char *a, const char *b, int S, double atol, double rtol)
{
    int result = 0;
    char err[4200];
    pp_wfile_head first_a = {0}, first_b = {0};
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
        pp_wfile_head ha, hb;
        if (pp_weights_load(a, s, &wa, &na, &ha, err, sizeof err) ||
            pp_weights_load(b, s, &wb, &nb, &hb, err, sizeof err)) {
            fprintf(stderr, "ppvm: %s\n", err);
            free(wa);
            return -1;
        }
        if (s == 0)
            first_a = ha, first_b = hb;
        if (same_run(a, s, &first_a, &ha) || same_run(b, s, &first_b, &hb)) {
            free(wa);
            free(wb);
            return -1;
        }
        if (na != nb) {
            printf("stage %d: %zu weights in %s but %zu in %s\n", s, na, a, nb, b);
            result = 1;
        } else {
            double worst = 0, excess = 0;
            size_t at = 0, bad = 0, same_nf = 0;
            for (size_t i = 0; i < na; i++) {
                double x = wa[i], y = wb[i], d, lim;
                if (!isfinite(x) || !isfinite(y)) {
                    /* exactly: the same non-finite value in both is equal
                     * (NaN and NaN, Inf and Inf of one sign); any other pair
                     * with a non-finite value differs by more than any
                     * tolerance (atol + rtol * |Inf| would pass anything) */
                    if ((isnan(x) && isnan(y)) || x == y) {
                        same_nf++;
                        continue;
                    }
                    if (excess != INFINITY) /* the first such place is the worst */
                        at = i;
                    bad++;
                    worst = excess = INFINITY;
                    continue;
                }
                d = fabs(x - y);
                lim = atol + rtol * fabs(y);
                if (!(d <= lim)) {
                    bad++;
                    if (!(d - lim <= excess))
                        excess = d - lim, at = i;
                }
                if (d > worst)
                    worst = d;
            }
            printf("stage %d: %zu weights, max |diff| %.3g", s, na, worst);
            if (same_nf)
                printf(" (%zu non-finite, the same in both)", same_nf);
            printf("%s", bad ? "" : " (within tolerance)\n");
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
