/* listing_oracle.h - the listing's instruction lines as printf wrote them
 * (listing_oracle.c), the oracle of the numfmt suite. */
#ifndef PP_LISTING_ORACLE_H
#define PP_LISTING_ORACLE_H

#include <stdint.h>
#include <stdio.h>

#include "../../isa/plan.h"

/* The opcodes the oracle knows: format 7's, 0 .. REF_OPS-1 (a later opcode's
 * comment is its table row's template, which the table test checks). */
#define REF_OPS 19

/* Instruction i of p's line, as pp_plan_disasm wrote it with printf. */
void ref_print_instr(const pp_plan *p, uint32_t i, FILE *out);

#endif
