/* table.h - `ppc --table`: the seed's Table 1 (DDP, FSDP, GPipe, LPP, FSLPP)
 * measured by compiling the library's schedules, beside the seed's entries. */
#ifndef PP_TABLE_H
#define PP_TABLE_H

#include <stdio.h>

#include "compile.h"

/* libdir: the directory holding ddp.pp, fsdp.pp, gpipe.pp, lpp.pp, fslpp.pp.
 * tensor: 0, the table as the seed has it; T > 1 (ppc --table --tensor T),
 * every row compiled with tensor = T, its latency in the same units (so
 * divided by T) and a column of the tensor all-reduces each rank makes in
 * a step (min..max over workers). Returns PP_COMPILE_OK, or the status of
 * the first schedule that could not be compiled (said on stderr; its row
 * is left out). */
pp_compile_status pp_print_table(FILE *f, const char *libdir, long long S, long long B, long long G,
                                 long long R, int tensor);

#endif
