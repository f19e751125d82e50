/* table.h - `ppc --table`: the seed's Table 1 (DDP, FSDP, GPipe, LPP, FSLPP)
 * measured by compiling the library's schedules, beside the seed's entries. */
#ifndef PP_TABLE_H
#define PP_TABLE_H

#include <stdio.h>

/* libdir: the directory holding ddp.pp, fsdp.pp, gpipe.pp, lpp.pp, fslpp.pp.
 * Returns 0, or -1 when a schedule could not be compiled (said on stderr). */
int pp_print_table(FILE *f, const char *libdir, long long S, long long B, long long G, long long R);

#endif
