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

#endif
