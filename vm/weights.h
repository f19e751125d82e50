/* weights.h - saving a stage's weights after training and comparing two
 * saved sets, which is how every schedule is checked against the reference.
 *
 * DIR/stage<s>.w: "PPWT", u32 version 1, u32 stage, u64 count, f32 data[count],
 * u32 crc32 of everything before it (little-endian). */
#ifndef PP_VM_WEIGHTS_H
#define PP_VM_WEIGHTS_H

#include <stddef.h>

int pp_weights_save(const char *dir, int stage, const float *w, size_t n, char *err,
                    size_t errlen);
/* Loads into a malloc'd array; 0 or -1 with err. */
int pp_weights_load(const char *dir, int stage, float **w, size_t *n, char *err, size_t errlen);

/* Compares stages [0, S) of two directories (S <= 0: every stage they hold); prints one line per stage with
 * the largest difference; returns 0 when every weight satisfies
 * |a - b| <= atol + rtol * |b|, 1 when some does not, -1 on a read error. */
int pp_weights_compare(const char *a, const char *b, int S, double atol, double rtol);

#endif
