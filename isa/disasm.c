/* disasm.c - pp_plan_disasm, the fixed-column listing of one rank's plan
 * (rank<r>.txt), in the spirit of SQLite's EXPLAIN.
 *
 * The listing is compared byte for byte by the golden tests, so it must
 * depend on nothing but the plan: no pointers, times or locale (only
 * integers and plain strings go through printf). It also has to survive an
 * unvalidated plan, since people list broken plans to see what is wrong:
 * every table lookup is bounds-checked and falls back to a plain number. */
#include "plan.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define SLOTS_COL 32 /* width of the slots column (at most 64) */

/* A small fixed-capacity string builder; appends past the end are cut, never
 * overflow. */
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

/* ---------------------------------------------------------------- header */

static const char *role_words(uint8_t r)
{
    switch (r) {
    case PP_ROLE_COMPUTE:
        return "compute";
    case PP_ROLE_OWNER:
        return "owner";
    case PP_ROLE_COMPUTE | PP_ROLE_OWNER:
        return "compute+owner";
    default:
        return NULL;
    }
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

/* Each stage's blocks (mlp) or layers (gpt), runs of equal counts merged:
 * "; layers per stage: s0 1, s1-s2 2, s3 1". */
static void print_layers(const pp_plan *p, FILE *out)
{
    fprintf(out, "; %s per stage:", p->model.kind == PP_MODEL_GPT ? "layers" : "blocks");
    for (uint32_t s = 0; s < p->S;) {
        uint32_t n = pp_model_layers(&p->model, (int)s), e = s;
        while (e + 1 < p->S && pp_model_layers(&p->model, (int)(e + 1)) == n)
            e++;
        fprintf(out, "%s s%" PRIu32, s ? "," : "", s);
        if (e > s)
            fprintf(out, "-s%" PRIu32, e);
        fprintf(out, " %" PRIu32, n);
        s = e + 1;
    }
    fprintf(out, "\n");
}

static void print_stages(const pp_plan *p, FILE *out)
{
    int listed = 0;
    fprintf(out, "; stages:");
    for (uint32_t s = 0; p->stage_role && s < p->S; s++) {
        uint8_t r = p->stage_role[s];
        if (!r)
            continue;
        const char *w = role_words(r);
        fprintf(out, "%s %" PRIu32, listed++ ? "," : "", s);
        if (w)
            fprintf(out, " (%s)", w);
        else
            fprintf(out, " (role 0x%02x)", r);
    }
    fprintf(out, "%s\n", listed ? "" : " none");
}

/* Groups and slots are printed one entry at a time (not through `text`) so a
 * large table is never cut. */
static void print_groups(const pp_plan *p, FILE *out)
{
    fprintf(out, "; groups:");
    for (uint32_t g = 0; p->groups && g < p->ngroups; g++) {
        fprintf(out, "%s g%" PRIu32 " = {", g ? "," : "", g);
        for (uint32_t k = 0; p->groups[g].member && k < p->groups[g].n; k++)
            fprintf(out, "%s%" PRIu32, k ? "," : "", p->groups[g].member[k]);
        fprintf(out, "}");
    }
    fprintf(out, "%s\n", p->ngroups && p->groups ? "" : " none");
}

static void print_slots(const pp_plan *p, FILE *out)
{
    fprintf(out, "; slots: ");
    for (uint32_t i = 0; p->slot_bytes && i < p->nslots; i++)
        fprintf(out, "%s s%" PRIu32 " %" PRIu64 " B", i ? "," : "", i, p->slot_bytes[i]);
    fprintf(out, "%s\n", p->nslots && p->slot_bytes ? "" : " none");
    if (pp_plan_workspaces(p) > 1)
        fprintf(out, "; workspaces: 2 x %" PRIu64 " B (scratch of every F and B here; an "
                     "overlapped pair's second job uses the second)\n",
                p->workspace_bytes);
    else
        fprintf(out, "; workspace: %" PRIu64 " B (scratch of every F and B here, one at a time)\n",
                p->workspace_bytes);
}

static void print_header(const pp_plan *p, FILE *out)
{
    const pp_model *m = &p->model;
    fprintf(out, "; pp plan, format %" PRIu32 ", plan id %016" PRIx64 "\n", p->version, p->plan_id);
    fprintf(out,
            "; rank %" PRIu32 " of %" PRIu32 ", S=%" PRIu32 " stages, B=%" PRIu32 " microbatches\n",
            p->rank, p->world, p->S, p->B);
    if (m->kind == PP_MODEL_GPT)
        fprintf(out,
                "; model: gpt, vocab %" PRIu32 ", context %" PRIu32 ", embed %" PRIu32
                ", heads %" PRIu32 ", ffn %" PRIu32 ", batch %" PRIu32 "; optimizer %s; precision %s\n",
                m->vocab, m->context, m->embed, m->heads, m->ffn, m->batch,
                pp_optimizer_name(m->optimizer), pp_precision_name(m->precision));
    else
        fprintf(out,
                "; model: %s, context %" PRIu32 ", embed %" PRIu32 " (width %" PRIu64 "), ffn %" PRIu32
                ", batch %" PRIu32 "; optimizer %s; precision %s\n",
                pp_model_kind_name(m->kind), m->context, m->embed,
                (uint64_t)m->context * m->embed, m->ffn, m->batch,
                pp_optimizer_name(m->optimizer), pp_precision_name(m->precision));
    print_layers(p, out);
    print_stages(p, out);
    print_groups(p, out);
    print_slots(p, out);
    fprintf(out, "addr  opcode          stage    mb  peer  grp  %-*s  comment\n", SLOTS_COL,
            "slots");
    static const char dashes[] = "----------------------------------------------------------------";
    fprintf(out,
            "----  --------------  -----  ----  ----  ---  %.*s  -------------------------------\n",
            SLOTS_COL, dashes);
}

/* ------------------------------------------------------------ instructions */

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
    const char *src = slot_str(in, PP_ROLE_IN, "?", a), *stash = slot_str(in, PP_ROLE_STASH, "?", b);
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

static void print_instr(const pp_plan *p, uint32_t i, FILE *out)
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

void pp_plan_disasm(const pp_plan *p, FILE *out)
{
    print_header(p, out);
    for (uint32_t i = 0; p->code && i < p->ninstr; i++)
        print_instr(p, i, out);
    fprintf(out, "; end of plan (%" PRIu32 " instruction%s)\n", p->ninstr,
            p->ninstr == 1 ? "" : "s");
}
