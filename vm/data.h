/* data.h - the training data: a text file read whole, and the microbatches
 * drawn from it. Microbatch b of step t is a function of (seed, t, b) only,
 * so every schedule and the reference see exactly the same samples. */
#ifndef PP_VM_DATA_H
#define PP_VM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/model_desc.h"

#define PP_DEFAULT_DATA "/usr/share/common-licenses/GPL-3"

typedef struct {
    uint8_t *bytes;
    size_t len;
} pp_dataset;

/* Returns 0, or -1 with a message in err (missing file, too short for one window). */
int pp_data_load(pp_dataset *ds, const char *path, const pp_model *m, char *err, size_t errlen);
void pp_data_free(pp_dataset *ds);
/* Fill tokens [batch][context+1] for microbatch b of step t. */
void pp_data_microbatch(const pp_dataset *ds, const pp_model *m, uint64_t seed, int step, int b,
                        int32_t *tokens);

#endif
