/* agree.h - every rank started with the same training flags and the same
 * data (vm/agree.c; issue 25).
 *
 * Under mpirun's MPMD form (or a launcher that builds each rank's command
 * line) ranks can be given different flags. A rank with another --lr,
 * --seed or --data trains to other weights without any error, and one with
 * --save, --checkpoint-every or --deterministic alone makes calls the
 * others do not, which hangs until --timeout. So before anything else
 * collective, the ranks compare every flag that must agree and the
 * identity of their data (its token count and a crc32 of its first and
 * last blocks: nodes may hold their own copy, under another path). */
#ifndef PP_VM_AGREE_H
#define PP_VM_AGREE_H

#include "backend.h"

/* Collective, first thing in a run: 1 when every rank has the same
 * training flags, backend (`backend`: its name) and data; else 0 on every
 * rank, rank 0 naming each flag that differs and which ranks hold which
 * value. */
int pp_flags_agree(const pp_run *run, const char *backend);

#endif
