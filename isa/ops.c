/* ops.c - the opcode table (opcodes.h) as data, and every property derived
 * from it (ops.h). */
#include "ops.h"

#include <stddef.h>
#include <stdio.h>

#define REQ(role, acc, content, ds)                                                                \
    {                                                                                              \
        PP_ROLE_##role, PP_ACC_##acc, PP_CONTENT_##content, ds, 0, 0, 0                            \
    }
#define OPT_WHEN(when, role, acc, content, ds)                                                     \
    {                                                                                              \
        PP_ROLE_##role, PP_ACC_##acc, PP_CONTENT_##content, ds, 1, 0, PP_WHEN_##when               \
    }
#define OPT(...) OPT_WHEN(ANY, __VA_ARGS__)
#define LAST(...) OPT_WHEN(LAST, __VA_ARGS__)
#define NOTLAST(...) OPT_WHEN(NOT_LAST, __VA_ARGS__)
#define NOTFIRST(...) OPT_WHEN(NOT_FIRST, __VA_ARGS__)
#define UPD(role, content, becomes, ds)                                                            \
    {                                                                                              \
        PP_ROLE_##role, PP_ACC_UP, PP_CONTENT_##content, ds, 0, PP_CONTENT_##becomes, 0            \
    }
#define SLOT_LIST(...)                                                                             \
    {                                                                                              \
        __VA_ARGS__                                                                                \
    }
enum { PP_OP_NONE = -1 };

static const pp_op_info OPS[PP_OP_COUNT] = {
#define PP_OP_INFO(name, num, kind, pairs, lane, uses, params, grads, job, family, tag, slots,     \
                   syn, comment)                                                                   \
    [num] = {#name,          PP_KIND_##kind,  PP_OP_##pairs,                                       \
             PP_LANE_##lane, (uses),          PP_ACC_##params,                                     \
             PP_ACC_##grads, PP_JOB_##job,    PP_FAMILY_##family,                                  \
             PP_TAG_##tag,   SLOT_LIST slots, syn,                                                 \
             comment},
    PP_OPCODES(PP_OP_INFO)
#undef PP_OP_INFO
};

static const char *const ROLE_NAMES[PP_ROLE_COUNT] = {[PP_ROLE_NONE] = "?",
#define PP_ROLE_NAME(R, name) [PP_ROLE_##R] = #name,
                                                      PP_ROLES(PP_ROLE_NAME)
#undef PP_ROLE_NAME
};

static const char *const CONTENT_WORDS[PP_CONTENT_COUNT] = {[PP_CONTENT_NONE] = "nothing",
#define PP_CONTENT_NAME(C, words) [PP_CONTENT_##C] = words,
                                                            PP_CONTENTS(PP_CONTENT_NAME)
#undef PP_CONTENT_NAME
};

const pp_op_info *pp_op(int op) { return op >= 0 && op < PP_OP_COUNT ? &OPS[op] : NULL; }

const char *pp_op_name(int op) { return pp_op(op) ? OPS[op].name : "?"; }

const char *pp_op_synopsis(int op) { return pp_op(op) ? OPS[op].synopsis : "?"; }

unsigned pp_op_uses(int op) { return pp_op(op) ? OPS[op].uses : 0u; }

int pp_op_nslots(int op)
{
    int n = 0;
    while (pp_op(op) && n < PP_MAX_SLOTS && OPS[op].slot[n].role != PP_ROLE_NONE)
        n++;
    return n;
}

const char *pp_role_name(pp_role r) { return r >= 0 && r < PP_ROLE_COUNT ? ROLE_NAMES[r] : "?"; }

const char *pp_content_words(pp_content c)
{
    return c >= 0 && c < PP_CONTENT_COUNT ? CONTENT_WORDS[c] : "?";
}

const char *pp_op_slot_role(int op, int i, int *optional)
{
    if (optional)
        *optional = 0;
    if (i < 0 || i >= pp_op_nslots(op))
        return NULL;
    if (optional)
        *optional = OPS[op].slot[i].optional;
    return pp_role_name(OPS[op].slot[i].role);
}

pp_op_job pp_op_job_of(int op) { return pp_op(op) ? OPS[op].job : PP_JOB_NONE; }

int pp_op_is_job(int op)
{
    pp_op_job j = pp_op_job_of(op);
    return j == PP_JOB_F || j == PP_JOB_B || j == PP_JOB_BI || j == PP_JOB_W || j == PP_JOB_R;
}

pp_op_family pp_op_family_of(int op) { return pp_op(op) ? OPS[op].family : PP_FAMILY_BOOKKEEPING; }

const char *pp_family_name(pp_op_family f)
{
    static const char *const names[PP_FAMILY_COUNT] = {
#define PP_FAMILY_NAME(F, name) [PP_FAMILY_##F] = name,
        PP_FAMILIES(PP_FAMILY_NAME)
#undef PP_FAMILY_NAME
    };
    return f >= 0 && f < PP_FAMILY_COUNT ? names[f] : "?";
}

int pp_slot_wanted(const pp_slot_spec *sp, int s, int S)
{
    switch (sp->when) {
    case PP_WHEN_LAST:
        return s == S - 1;
    case PP_WHEN_NOT_LAST:
        return s != S - 1;
    case PP_WHEN_NOT_FIRST:
        return s != 0;
    case PP_WHEN_ANY:
        break;
    }
    return sp->optional ? -1 : 1;
}

int pp_op_is_transfer(int op)
{
    return pp_op(op) && (OPS[op].kind == PP_KIND_SEND || OPS[op].kind == PP_KIND_RECV);
}

int pp_slot_index(int op, pp_role r)
{
    for (int k = 0; pp_op(op) && k < PP_MAX_SLOTS && r != PP_ROLE_NONE; k++)
        if (OPS[op].slot[k].role == r)
            return k;
    return -1;
}

int32_t pp_slot(const pp_instr *in, pp_role r)
{
    int k = pp_slot_index(in->op, r);
    return k < 0 ? -1 : in->slot[k];
}

int pp_set_slot(pp_instr *in, pp_role r, int32_t v)
{
    int k = pp_slot_index(in->op, r);
    if (k < 0)
        return -1;
    in->slot[k] = v;
    return 0;
}

int32_t pp_transfer_slot(const pp_instr *in)
{
    return pp_op_is_transfer(in->op) && pp_op_nslots(in->op) == 1 ? in->slot[0] : -1;
}

int pp_op_flow_up(const pp_instr *in, uint32_t rank)
{
    const pp_op_info *o = pp_op(in->op);
    if (!o || (o->kind != PP_KIND_SEND && o->kind != PP_KIND_RECV))
        return -1;
    return o->kind == PP_KIND_SEND ? in->peer > (int32_t)rank : in->peer < (int32_t)rank;
}

int pp_group_direction(const pp_instr *in, uint32_t rank)
{
    const pp_op_info *o = pp_op(in->op);
    return o && o->lane == PP_LANE_GROUPABLE ? pp_op_flow_up(in, rank) : -1;
}

int pp_instr_touches(const pp_instr *in, pp_touch out[PP_MAX_TOUCH])
{
    const pp_op_info *o = pp_op(in->op);
    int n = 0;
    if (!o)
        return 0;
    for (int k = 0; k < PP_MAX_SLOTS && o->slot[k].role != PP_ROLE_NONE; k++)
        if (in->slot[k] >= 0)
            out[n++] = (pp_touch){PP_BUF_SLOT, in->slot[k], o->slot[k].access, &o->slot[k]};
    /* the rank's own stage, unless a wts (wgrad) slot stands in for it */
    if (o->params && pp_slot(in, PP_ROLE_WTS) < 0)
        out[n++] = (pp_touch){PP_BUF_PARAMS, in->stage, o->params, NULL};
    if (o->grads && pp_slot(in, PP_ROLE_WGRAD) < 0)
        out[n++] = (pp_touch){PP_BUF_GRADS, in->stage, o->grads, NULL};
    return n;
}

/* ---- the table as documentation (isa/README.md) ---------------------------- */

static const char *access_word(pp_access a)
{
    static const char *const w[] = {"", "reads", "writes", "updates"};
    return w[a & 3];
}

void pp_ops_markdown(FILE *out)
{
    static const char *const kind[] = {"marker", "compute", "local",
                                       "send",   "receive", "collective"};
    static const char *const lane[] = {"-", "compute", "up/down", "up/down, groupable"};
    static const char *const job[] = {"-", "F", "B", "BI", "W", "O", "R"};
    static const char *const tag[] = {"act", "grad", "weights", "wgrad", "tied"};
    static const char *const when[] = {"", " (last stage)", " (not last stage)",
                                       " (not first stage)"};
    fprintf(out,
            "| # | opcode | kind | pairs with | stream | job | family | tag | operands | slots "
            "| own stage | what it does |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int op = 0; op < PP_OP_COUNT; op++) {
        const pp_op_info *o = &OPS[op];
        fprintf(out, "| %d | %s | %s | %s | %s | %s | %s | %s | ", op, o->name, kind[o->kind],
                o->pairs >= 0 ? OPS[o->pairs].name : "-", lane[o->lane], job[o->job],
                pp_family_name(o->family), o->tag >= 0 ? tag[o->tag] : "-");
        static const char *const use[] = {"stage", "mb", "peer", "group"};
        int any = 0;
        for (int u = 0; u < 4; u++)
            if (o->uses & (1u << u))
                fprintf(out, "%s%s", any++ ? " " : "", use[u]);
        fprintf(out, "%s | ", any ? "" : "-");
        int n = pp_op_nslots(op);
        for (int k = 0; k < n; k++) {
            const pp_slot_spec *sp = &o->slot[k];
            fprintf(out, "%s`%s%s`%s %s %s", k ? "; " : "", pp_role_name(sp->role),
                    sp->optional ? "?" : "", when[sp->when], access_word(sp->access),
                    pp_content_words(sp->content));
            if (sp->dstage)
                fprintf(out, " (stage s%+d)", sp->dstage);
            if (sp->becomes)
                fprintf(out, ", leaving %s", pp_content_words(sp->becomes));
        }
        fprintf(out, "%s | ", n ? "" : "-");
        if (o->params)
            fprintf(out, "%s weights", access_word(o->params));
        if (o->grads)
            fprintf(out, "%s%s gradients", o->params ? ", " : "", access_word(o->grads));
        fprintf(out, "%s | %s |\n", o->params || o->grads ? "" : "-", o->synopsis);
    }
}
