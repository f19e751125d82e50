/* comment.h - the listing's comment column (isa/comment.c): each opcode's
 * comment template (a column of isa/opcodes.h, whose header explains the
 * notation) compiled once per listing into steps, then filled from each
 * instruction's operands. */
#ifndef PP_COMMENT_H
#define PP_COMMENT_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

#define PP_COMMENT_STEPS 48 /* the most steps one template compiles to */

typedef struct {
    uint8_t kind;     /* what the step writes (comment.c) */
    uint8_t how;      /* a condition's '?', '!' or '+' */
    uint8_t role;     /* the slot role of a slot or a condition */
    uint16_t len;     /* text's length */
    uint16_t skip;    /* a condition: the step after its bracket */
    const char *text; /* literal text, or a slot's text when absent */
} pp_comment_step;

typedef struct {
    pp_comment_step step[PP_OP_COUNT][PP_COMMENT_STEPS];
    uint8_t n[PP_OP_COUNT];
} pp_comments;

/* Compiles every opcode's template into c. A malformed one (which the
 * table test rules out) compiles to no steps, an empty comment. */
void pp_comments_compile(pp_comments *c);

/* The comment of instruction in of plan p, written to buf (cap bytes, cut
 * to fit, NUL-terminated); returns its length. An unknown opcode's is
 * "unknown opcode N". */
size_t pp_instr_comment(const pp_comments *c, const pp_plan *p, const pp_instr *in, char *buf,
                        size_t cap);

/* Whether template tmpl (NULL: op's own, from the table) is well formed and
 * names only operands op has: 0, or -1 with the fault in err. */
int pp_comment_check(int op, const char *tmpl, char *err, size_t errlen);

#endif
