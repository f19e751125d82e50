/* ops.h - what an instruction is, derived from the one table (opcodes.h).
 *
 * Every question the compiler, the checkers, the VM and the listing ask of an
 * instruction (its name, operands, kind, partner, stream, the buffers it
 * reads and writes) is answered here from PP_OPCODES, never by a private
 * switch elsewhere. */
#ifndef PP_OPS_H
#define PP_OPS_H

#include <stdint.h>
#include <stdio.h>

#include "opcodes.h"

#define PP_MAX_SLOTS 5

typedef struct {
    uint8_t op; /* pp_opcode */
    int32_t stage, mb, peer, group;
    int32_t slot[PP_MAX_SLOTS];
} pp_instr;

typedef struct {
    pp_role role; /* PP_ROLE_NONE: no slot at this position */
    pp_access access;
    pp_content content; /* what the slot holds when read, or after the write */
    int dstage;         /* the content's stage is the instruction's stage + dstage */
    int optional;       /* may be -1 (absent) */
    pp_content becomes; /* what an UPD slot holds after the instruction; NONE: content */
    pp_when when;       /* an optional slot: on which stages it must be present */
} pp_slot_spec;

typedef struct {
    const char *name;
    pp_op_kind kind;
    int pairs; /* the peer's opcode for a transfer, else -1 */
    pp_op_lane lane;
    unsigned uses;           /* PP_U_* */
    pp_access params, grads; /* the rank's own copy of stage s (opcodes.h) */
    pp_op_job job;
    pp_op_family family;
    pp_op_tag tag;
    pp_slot_spec slot[PP_MAX_SLOTS];
    const char *synopsis;
    const char *comment; /* the listing's comment template (opcodes.h) */
} pp_op_info;

/* The table entry of op, or NULL for a number that is no opcode. */
const pp_op_info *pp_op(int op);
const char *pp_op_name(int op); /* "?" for an unknown opcode */
const char *pp_op_synopsis(int op);
unsigned pp_op_uses(int op);
int pp_op_nslots(int op);
const char *pp_role_name(pp_role r);
const char *pp_content_words(pp_content c);
/* Role name of slot i of op (NULL past its slots); *optional set if given. */
const char *pp_op_slot_role(int op, int i, int *optional);

/* The job op runs (PP_JOB_NONE for an unknown opcode), and whether it is a
 * job of a microbatch: F, B, BI or W. */
pp_op_job pp_op_job_of(int op);
int pp_op_is_job(int op);
/* The benchmark family (BOOKKEEPING for an unknown opcode) and its name. */
pp_op_family pp_op_family_of(int op);
const char *pp_family_name(pp_op_family f);

/* Whether a slot of spec sp must be present on stage s of S: 1 (a REQ or
 * UPD slot, or a LAST, NOTLAST, NOTFIRST one on such a stage), 0 (one of
 * those on another stage), -1 (an OPT slot: either). */
int pp_slot_wanted(const pp_slot_spec *sp, int s, int S);

/* A point-to-point transfer (SEND or RECV). */
int pp_op_is_transfer(int op);
/* Position of role r among op's slot operands, or -1 when op has none. */
int pp_slot_index(int op, pp_role r);
/* The slot operand of role r (-1 when absent or when the opcode has none). */
int32_t pp_slot(const pp_instr *in, pp_role r);
/* Sets the operand of role r; returns -1 (nothing set) if the op has none. */
int pp_set_slot(pp_instr *in, pp_role r, int32_t v);

/* The slot a transfer moves its data through (its one slot operand: src,
 * dst, wts, wgrad or tmp), or -1: no transfer, or one without a slot
 * (SendWeights sends the rank's own weights). */
int32_t pp_transfer_slot(const pp_instr *in);

/* Which way a transfer's data flows on `rank`: 1 from a lower rank to a
 * higher one (the UP stream), 0 downward (DOWN), -1 for no transfer. */
int pp_op_flow_up(const pp_instr *in, uint32_t rank);
/* The same for an instruction that may stand inside GroupStart..GroupEnd
 * (lane GROUPABLE); -1 for every other instruction. */
int pp_group_direction(const pp_instr *in, uint32_t rank);

/* The buffers an instruction touches: its present slot operands and, by the
 * table's params/grads columns, the rank's own weights or gradients of its
 * stage. At most PP_MAX_TOUCH. */
typedef enum { PP_BUF_SLOT, PP_BUF_PARAMS, PP_BUF_GRADS } pp_buf_kind;
typedef struct {
    pp_buf_kind kind;
    int32_t index; /* slot number, or the stage */
    pp_access access;
    const pp_slot_spec *spec; /* the slot's table entry; NULL for params/grads */
} pp_touch;
#define PP_MAX_TOUCH (PP_MAX_SLOTS + 2)
int pp_instr_touches(const pp_instr *in, pp_touch out[PP_MAX_TOUCH]);

/* The table as a Markdown table, as isa/README.md shows it (ppc --opcodes
 * prints it; a test checks the README holds exactly this). */
void pp_ops_markdown(FILE *out);

#endif
