/* listing_oracle.c - the listing's instruction lines as printf wrote them
 * before issue 18, kept as the oracle of the numfmt suite's listing test:
 * isa/disasm.c now formats each line by hand, and must write exactly
 * these bytes for any instruction, valid or not.
 *
 * This is isa/disasm.c's instruction part of that time, unchanged but for
 * the names (ref_) and the entry point, ref_print_instr. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../../isa/plan.h"
#include "listing_oracle.h"

#define SLOTS_COL 32

typedef struct {
    char s[256];
    size_t n;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(text *t, const char *fmt, ...)
{
    size_t room = sizeof t->s - t->n;
    if (room <= 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->s + t->n, room, fmt, ap);
    va_end(ap);
    if (k > 0)
        t->n = (size_t)k < room ? t->n + (size_t)k : sizeof t->s - 1;
}

/* "{0,1,2,3}" for group g, or "{?}" if the plan has no such group. */
static void add_members(text *t, const pp_plan *p, int64_t g)
{
    if (g < 0 || g >= p->ngroups || !p->groups || !p->groups[g].member) {
        add(t, "{?}");
        return;
    }
    add(t, "{");
    for (uint32_t k = 0; k < p->groups[g].n; k++)
        add(t, "%s%" PRIu32, k ? "," : "", p->groups[g].member[k]);
    add(t, "}");
}

/* The slot operand of role r as "s4", or `absent` when there is none. */
static const char *slot_str(const pp_instr *in, pp_role r, const char *absent, char buf[16])
{
    int32_t v = pp_slot(in, r);
    if (v == -1)
        return absent;
    snprintf(buf, 16, "s%" PRId32, v);
    return buf;
}

static void comment_forward(text *t, const pp_instr *in)
{
    char a[16], b[16], c[16], d[16];
    const char *src = slot_str(in, PP_ROLE_IN, "?", a),
               *stash = slot_str(in, PP_ROLE_STASH, "?", b);
    const char *dst = slot_str(in, PP_ROLE_OUT, NULL, c), *tgt = slot_str(in, PP_ROLE_TGT, NULL, d);
    add(t, "F(%" PRId32 ",%" PRId32 "): ", in->stage, in->mb);
    if (dst && tgt)
        add(t, "%s -> %s, loss vs targets %s", src, dst, tgt);
    else if (dst)
        add(t, "%s -> %s", src, dst);
    else if (tgt)
        add(t, "loss of %s vs targets %s", src, tgt);
    else
        add(t, "%s, output discarded", src);
    add(t, " (stash %s)", stash);
    if (pp_slot(in, PP_ROLE_WTS) >= 0)
        add(t, " with weights s%" PRId32, pp_slot(in, PP_ROLE_WTS));
}

/* no_din: what the gradient feeds on the first stage, which has no input grad. */
static void comment_backward(text *t, const pp_instr *in, const char *no_din)
{
    char a[16], b[16], c[16];
    const char *stash = slot_str(in, PP_ROLE_STASH, "?", a);
    const char *dout = slot_str(in, PP_ROLE_DOUT, "of loss", b);
    const char *din = slot_str(in, PP_ROLE_DIN, no_din, c);
    add(t, "B(%" PRId32 ",%" PRId32 "): grad %s -> %s (stash %s)", in->stage, in->mb, dout, din,
        stash);
    if (pp_slot(in, PP_ROLE_WTS) >= 0)
        add(t, " with weights s%" PRId32, pp_slot(in, PP_ROLE_WTS));
    if (pp_slot(in, PP_ROLE_WGRAD) >= 0)
        add(t, ", weight grads into s%" PRId32, pp_slot(in, PP_ROLE_WGRAD));
}

/* The comment column: what the instruction does, in words. */
static void comment(text *t, const pp_plan *p, const pp_instr *in)
{
    char a[16];
    /* the one slot of the instructions that have one */
    const char *s0 = pp_op(in->op) ? slot_str(in, pp_op(in->op)->slot[0].role, "?", a) : "?";
    switch (in->op) {
    case PP_OP_LoadMicroBatch:
        add(t, "microbatch %" PRId32 " tokens into %s", in->mb, s0);
        break;
    case PP_OP_Forward:
        comment_forward(t, in);
        break;
    case PP_OP_SendActivation:
        add(t, "F(%" PRId32 ",%" PRId32 ") output %s to rank %" PRId32, in->stage, in->mb, s0,
            in->peer);
        break;
    case PP_OP_RecvActivation:
        add(t, "F(%" PRId32 ",%" PRId32 ") output from rank %" PRId32 " into %s", in->stage, in->mb,
            in->peer, s0);
        break;
    case PP_OP_Backward:
        comment_backward(t, in, "weights only");
        break;
    case PP_OP_BackwardInput:
        comment_backward(t, in, "stash only");
        add(t, "; weight grads left for W");
        break;
    case PP_OP_BackwardWeight:
        add(t, "W(%" PRId32 ",%" PRId32 "): weight grads from stash %s", in->stage, in->mb, s0);
        if (pp_slot(in, PP_ROLE_WGRAD) >= 0)
            add(t, " into s%" PRId32, pp_slot(in, PP_ROLE_WGRAD));
        break;
    case PP_OP_SendGrad:
        add(t, "B(%" PRId32 ",%" PRId32 ") input grad %s to rank %" PRId32, in->stage, in->mb, s0,
            in->peer);
        break;
    case PP_OP_RecvGrad:
        add(t, "B(%" PRId32 ",%" PRId32 ") input grad from rank %" PRId32 " into %s", in->stage,
            in->mb, in->peer, s0);
        break;
    case PP_OP_ReduceGrads:
        add(t, "all-reduce stage %" PRId32 " grads over g%" PRId32 " ", in->stage, in->group);
        add_members(t, p, in->group);
        break;
    case PP_OP_FetchWeights:
        add(t, "stage %" PRId32 " weights from rank %" PRId32 " into %s", in->stage, in->peer, s0);
        break;
    case PP_OP_SendWeights:
        add(t, "stage %" PRId32 " weights to rank %" PRId32, in->stage, in->peer);
        break;
    case PP_OP_ZeroGrads:
        add(t, "%s accumulates stage %" PRId32 " weight grads here", s0, in->stage);
        break;
    case PP_OP_SendWeightGrad:
        add(t, "stage %" PRId32 " weight grads %s to owner rank %" PRId32, in->stage, s0, in->peer);
        break;
    case PP_OP_RecvWeightGrad:
        add(t, "stage %" PRId32 " weight grads from rank %" PRId32 " via %s, added to ours",
            in->stage, in->peer, s0);
        break;
    case PP_OP_GroupStart: {
        uint32_t n = 0, first = (uint32_t)(in - p->code) + 1;
        while (first + n < p->ninstr && p->code[first + n].op != PP_OP_GroupEnd)
            n++;
        int up = n > 0 && pp_group_direction(&p->code[first], p->rank) == 1;
        add(t, "the next %" PRIu32 " transfers (%s) are posted together", n,
            up ? "upward" : "downward");
        break;
    }
    case PP_OP_GroupEnd:
        add(t, "end of the group");
        break;
    case PP_OP_Overlap:
        add(t, "the next two jobs run as one pair (cuda: two streams; cpu: in turn)");
        break;
    case PP_OP_OptimizerStep:
        add(t, "update stage %" PRId32 " weights (%s)", in->stage,
            pp_optimizer_name(p->model.optimizer));
        break;
    default:
        add(t, "unknown opcode %u", in->op);
        break;
    }
}

/* A scalar operand's column: the number if the opcode uses it, else ".". */
static const char *scalar(const pp_instr *in, unsigned use, int32_t v, char buf[16])
{
    if (!(pp_op_uses(in->op) & use))
        return ".";
    snprintf(buf, 16, "%" PRId32, v);
    return buf;
}

/* The slots column: "role=sN" for every used slot, absent optional ones left
 * out. An unknown opcode has no roles, so its raw operands are shown. */
static void slots_column(text *t, const pp_instr *in)
{
    int n = pp_op_nslots(in->op);
    for (int k = 0; k < PP_MAX_SLOTS; k++) {
        int optional;
        const char *role = pp_op_slot_role(in->op, k, &optional);
        if (k >= n && in->slot[k] == -1)
            continue;
        if (k < n && in->slot[k] == -1 && optional)
            continue;
        add(t, "%s%s=s%" PRId32, t->n ? " " : "", role ? role : "?", in->slot[k]);
    }
}

void ref_print_instr(const pp_plan *p, uint32_t i, FILE *out)
{
    const pp_instr *in = &p->code[i];
    char st[16], mb[16], peer[16], grp[16];
    text slots = {.n = 0}, note = {.n = 0};
    slots.s[0] = note.s[0] = '\0';
    slots_column(&slots, in);
    comment(&note, p, in);
    fprintf(out, "%4" PRIu32 "  %-14s  %5s  %4s  %4s  %3s  ", i, pp_op_name(in->op),
            scalar(in, PP_U_STAGE, in->stage, st), scalar(in, PP_U_MB, in->mb, mb),
            scalar(in, PP_U_PEER, in->peer, peer), scalar(in, PP_U_GROUP, in->group, grp));
    /* A long slots list runs into the comment column with one space left. */
    if (slots.n <= SLOTS_COL)
        fprintf(out, "%-*s  %s\n", SLOTS_COL, slots.s, note.s);
    else
        fprintf(out, "%s %s\n", slots.s, note.s);
}
