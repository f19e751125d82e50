/* weights.h - the stage files ppvm writes: --save's weights after training,
 * and a checkpoint's weights, optimizer state and bf16 compute copies
 * (vm/checkpoint.c); comparing two saved sets of weights, which is how every
 * schedule is checked against the reference.
 *
 * Every stage file, little-endian (vm/README.md, "Weight files"):
 *   magic[4]  "PPWT" fp32 weights, "PPOS" optimizer state, "PPBF" compute copy
 *   u32 version 2, u64 plan id, u32 stage, u32 step (steps trained),
 *   u64 count (elements), u32 element bytes (4, or 2 for bf16),
 *   data[count * element bytes], u32 crc32 of every byte before it.
 * A file is written to "<path>.tmp", fsynced, renamed over <path>, and its
 * directory fsynced: a crash leaves the old file or the new one, whole. */
#ifndef PP_VM_WEIGHTS_H
#define PP_VM_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#define PP_WFILE_VERSION 2
#define PP_WFILE_HEAD 36 /* bytes before the data */

typedef struct {
    char magic[4];
    uint64_t plan_id;
    uint32_t stage, step;
    uint64_t count; /* elements */
    uint32_t elem;  /* bytes per element */
} pp_wfile_head;

/* Writes h and data atomically to path (see above). *size and *crc (either
 * may be NULL): the file's size and its trailing crc32. 0 or -1 with err
 * naming the file. */
int pp_wfile_write(const char *path, const pp_wfile_head *h, const void *data, uint64_t *size,
                   uint32_t *crc, char *err, size_t errlen);
/* Reads path, which must carry `magic`, version 2, exactly the bytes its
 * header promises (else truncated or padded) and a matching crc32. *data:
 * malloc'd. 0 or -1 with err naming the file. */
int pp_wfile_read(const char *path, const char magic[4], pp_wfile_head *h, void **data,
                  uint64_t *size, uint32_t *crc, char *err, size_t errlen);

/* fsyncs a directory (after a rename in it). 0 or -1 with errno. */
int pp_fsync_dir(const char *dir);
/* Creates dir unless it exists, and checks that a file can be created in it
 * (a probe, removed again; `tag` keeps ranks' probes apart). 0 or -1 with
 * err. */
int pp_dir_writable(const char *dir, int tag, char *err, size_t errlen);

/* DIR/stage<s>.w of plan plan_id after `step` steps, atomically. */
int pp_weights_save(const char *dir, int stage, uint64_t plan_id, int step, const float *w,
                    size_t n, char *err, size_t errlen);
/* Loads DIR/stage<s>.w into a malloc'd array (and its header into *h, if
 * not NULL); 0 or -1 with err. */
int pp_weights_load(const char *dir, int stage, float **w, size_t *n, pp_wfile_head *h, char *err,
                    size_t errlen);

/* Compares stages [0, S) of two directories (S <= 0: every stage they
 * hold); prints one line per stage with the largest difference; returns 0
 * when every weight satisfies |a - b| <= atol + rtol * |b|, 1 when some does
 * not, -1 when a file cannot be read or a directory mixes files of
 * different runs (plan id or step). */
int pp_weights_compare(const char *a, const char *b, int S, double atol, double rtol);

#endif
