/* data.h - the training data: a file read whole, and the microbatches
 * drawn from it. Microbatch b of step t is a function of (seed, t, b) only,
 * so every schedule and the reference see exactly the same samples.
 *
 * Two formats, told apart by the first int32 of the file (vm/README.md):
 *   an llm.c token shard: a header of 256 little-endian int32 (magic
 *     20240520, version 1, token count, the rest unused), then `count`
 *     uint16 tokens; the file is exactly 1024 + 2*count bytes;
 *   anything else: raw bytes, one token each (vocab 256: the mlp model, or a
 *     gpt whose vocab is at least 256; a byte >= a smaller vocab is an error).
 * Either way every token must be < the model's vocabulary and there must be
 * at least context+1 tokens (one window). */
#ifndef PP_VM_DATA_H
#define PP_VM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/model_desc.h"

#define PP_DEFAULT_DATA "/usr/share/common-licenses/GPL-3"

#define PP_SHARD_MAGIC 20240520
#define PP_SHARD_VERSION 1
#define PP_SHARD_HEADER_BYTES 1024 /* 256 int32 */

typedef enum { PP_DATA_BYTES = 0, PP_DATA_SHARD = 1 } pp_data_format;

typedef struct {
    uint16_t *tokens; /* len tokens, each < the model's vocabulary */
    size_t len;
    int format; /* pp_data_format */
} pp_dataset;

/* Returns 0, or -1 with a message in err that names the file and what was
 * expected (missing file, a bad shard header or size, a token outside the
 * vocabulary, too short for one window). */
int pp_data_load(pp_dataset *ds, const char *path, const pp_model *m, char *err, size_t errlen);
void pp_data_free(pp_dataset *ds);
/* Fill tokens [batch][context+1] for microbatch b of step t: row i is the
 * window starting at splitmix64(h ^ i) % (len - context), where
 * h = splitmix64(splitmix64(splitmix64(seed) ^ t) ^ b). */
void pp_data_microbatch(const pp_dataset *ds, const pp_model *m, uint64_t seed, int step, int b,
                        int32_t *tokens);

#endif
