/* table.h - `ppc --table`: the seed's Table 1 (DDP, FSDP, GPipe, LPP, FSLPP)
 * measured by compiling the library's schedules, beside the seed's entries. */
#ifndef PP_TABLE_H
#define PP_TABLE_H

#include <stdio.h>

#include "compile.h"

/* libdir: the directory holding ddp.pp, fsdp.pp, gpipe.pp, lpp.pp, fslpp.pp.
 * Returns PP_COMPILE_OK, or the status of the first schedule that could not
 * be compiled (said on stderr; its row is left out). */
pp_compile_status pp_print_table(FILE *f, const char *libdir, long long S, long long B, long long G,
                                 long long R);

#endif
