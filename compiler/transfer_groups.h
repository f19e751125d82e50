/* transfer_groups.h - bracket runs of transfers that a rank posts one after
 * another in one direction with GroupStart/GroupEnd (isa/opcodes.h). */
#ifndef PP_TRANSFER_GROUPS_H
#define PP_TRANSFER_GROUPS_H

#include "../isa/plan.h"

/* Rewrites p->code: every maximal run of two or more consecutive
 * instructions with the same pp_group_direction gets a GroupStart before it
 * and a GroupEnd after it. Slots and everything else stay as they are.
 * Returns 0, or -1 out of memory (p unchanged). */
int pp_group_transfers(pp_plan *p);

/* The runs pp_group_transfers brackets, before it does: for each
 * instruction i of code[0..ninstr) on `rank`, first[i] and last[i] are the
 * first and last instruction of its run (both i when it is not in a run of
 * two or more). Slot allocation uses them: a group's members run
 * concurrently, so the buffers they touch are live over the whole group. */
void pp_transfer_runs(const pp_instr *code, uint32_t ninstr, uint32_t rank, int *first, int *last);

#endif
