/* plan_mutate.c - the mutation campaign's tool (tests/bench/mutate.sh): edit
 * one byte of a plan file the way an attacker would, fixing what a reader
 * checks mechanically.
 *
 *   plan_mutate layout FILE              print "bytes N code_at M": the file's
 *                                        size and where its instruction table
 *                                        starts (the bytes before it are the
 *                                        header and tables)
 *   plan_mutate set FILE OFFSET VALUE    set byte OFFSET to VALUE (0..255) and
 *                                        recompute the CRC; prints the old byte
 *   plan_mutate forge DIR W              after an edit: recompute the plan id
 *                                        over DIR/rank0..W-1.bin (pp_plans_id)
 *                                        and write it, with a fixed CRC, into
 *                                        every file: what an attacker who
 *                                        knows the hash does, so only the
 *                                        meaning checks stand in the way.
 *                                        Exit 3 when a file no longer decodes
 *                                        (the loader refuses it anyway).
 * Exit status: 0 done, 1 an I/O error, 2 a bad command line, 3 (forge) a
 * file that does not decode. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/plan.h"

static int slurp(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(n > 0 ? (size_t)n : 1);
    *len = n > 0 ? (size_t)n : 0;
    int rc = *buf && fread(*buf, 1, *len, f) == *len ? 0 : -1;
    fclose(f);
    if (rc)
        fprintf(stderr, "%s: cannot read\n", path);
    return rc;
}

static int spill(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    int rc = f && fwrite(buf, 1, len, f) == len ? 0 : -1;
    if (f && fclose(f))
        rc = -1;
    if (rc)
        perror(path);
    return rc;
}

static void fix_crc(uint8_t *buf, size_t len)
{
    if (len < 4)
        return;
    uint32_t c = pp_crc32(buf, len - 4);
    for (int i = 0; i < 4; i++)
        buf[len - 4 + i] = (uint8_t)(c >> (8 * i));
}

static int layout(const char *path)
{
    uint8_t *buf;
    size_t len;
    if (slurp(path, &buf, &len))
        return 1;
    pp_plan p;
    char err[512];
    if (pp_plan_decode(buf, len, &p, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        free(buf);
        return 1;
    }
    /* the instruction table is the last thing before the CRC */
    size_t code_at = len - 4 - (size_t)p.ninstr * (1 + 4 * 4 + 4 * PP_MAX_SLOTS);
    printf("bytes %zu code_at %zu\n", len, code_at);
    pp_plan_free(&p);
    free(buf);
    return 0;
}

static int set(const char *path, const char *off, const char *val)
{
    uint8_t *buf;
    size_t len;
    if (slurp(path, &buf, &len))
        return 1;
    size_t at = strtoull(off, NULL, 10);
    long v = strtol(val, NULL, 10);
    if (at + 4 >= len + 0 || v < 0 || v > 255) {
        fprintf(stderr, "plan_mutate: offset %s or value %s out of range (file of %zu bytes)\n",
                off, val, len);
        free(buf);
        return 2;
    }
    printf("%u\n", buf[at]);
    buf[at] = (uint8_t)v;
    fix_crc(buf, len);
    int rc = spill(path, buf, len) ? 1 : 0;
    free(buf);
    return rc;
}

static int forge(const char *dir, int W)
{
    pp_plan *plans = calloc((size_t)W, sizeof *plans);
    uint8_t **bufs = calloc((size_t)W, sizeof *bufs);
    size_t *lens = calloc((size_t)W, sizeof *lens);
    int rc = 0, r = 0;
    char path[4096], err[512];
    for (; r < W && !rc; r++) {
        snprintf(path, sizeof path, "%s/rank%d.bin", dir, r);
        if (slurp(path, &bufs[r], &lens[r]))
            rc = 1;
        else if (pp_plan_decode(bufs[r], lens[r], &plans[r], err, sizeof err))
            rc = 3;
    }
    if (!rc) {
        uint64_t id = pp_plans_id(plans, W);
        for (int k = 0; k < W && !rc; k++) {
            for (int i = 0; i < 8; i++) /* the plan id: bytes 8..15 */
                bufs[k][8 + i] = (uint8_t)(id >> (8 * i));
            fix_crc(bufs[k], lens[k]);
            snprintf(path, sizeof path, "%s/rank%d.bin", dir, k);
            rc = spill(path, bufs[k], lens[k]) ? 1 : 0;
        }
    }
    for (int k = 0; k < W; k++) {
        pp_plan_free(&plans[k]);
        free(bufs[k]);
    }
    free(plans);
    free(bufs);
    free(lens);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "layout"))
        return layout(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "set"))
        return set(argv[2], argv[3], argv[4]);
    if (argc == 4 && !strcmp(argv[1], "forge") && atoi(argv[3]) > 0)
        return forge(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: plan_mutate layout FILE | set FILE OFFSET VALUE | forge DIR W\n");
    return 2;
}
