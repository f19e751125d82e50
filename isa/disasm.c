/* disasm.c - pp_plan_disasm, the fixed-column listing of one rank's plan
 * (rank<r>.txt), in the spirit of SQLite's EXPLAIN.
 *
 * The listing is compared byte for byte by the golden tests, so it must
 * depend on nothing but the plan: no pointers, times or locale (only
 * integers and plain strings go through printf). It also has to survive an
 * unvalidated plan, since people list broken plans to see what is wrong:
 * every table lookup is bounds-checked and falls back to a plain number.
 * The comment column is the opcode table's template, filled by
 * isa/comment.c. */
#include "comment.h"
#include "plan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS_COL 32 /* width of the slots column (at most 64) */

/* A small fixed-capacity string builder; appends past the end are cut, never
 * overflow. */
typedef struct {
    char s[256];
    size_t n;
} text;

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

/* Each stage's blocks (mlp) or layers (gpt), runs of equal counts merged:
 * "; layers per stage: s0 1, s1-s2 2, s3 1". */
static void print_layers(const pp_plan *p, FILE *out)
{
    fprintf(out, "; %s per stage:", p->model.kind != PP_MODEL_MLP ? "layers" : "blocks");
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
    /* offload's host slots say so (plans without offload print as before) */
    uint8_t *host = p->slot_bytes ? calloc((size_t)p->nslots + 1, 1) : NULL;
    if (host)
        pp_plan_host_slots(p, host);
    fprintf(out, "; slots: ");
    for (uint32_t i = 0; p->slot_bytes && i < p->nslots; i++)
        fprintf(out, "%s s%" PRIu32 " %" PRIu64 " B%s", i ? "," : "", i, p->slot_bytes[i],
                host && host[i] ? " (host)" : "");
    free(host);
    fprintf(out, "%s\n", p->nslots && p->slot_bytes ? "" : " none");
    if (pp_plan_workspaces(p) > 1)
        fprintf(out,
                "; workspaces: 2 x %" PRIu64 " B (scratch of every F and B here; an "
                "overlapped pair's second job uses the second)\n",
                p->workspace_bytes);
    else
        fprintf(out, "; workspace: %" PRIu64 " B (scratch of every F and B here, one at a time)\n",
                p->workspace_bytes);
}

static void print_header(const pp_plan *p, FILE *out)
{
    const pp_model *m = &p->model;
    /* No format version here: the listing shows what the plan means, which a
     * version bump alone does not change, so a bump rewrites no golden. */
    fprintf(out, "; pp plan, plan id %016" PRIx64 "\n", p->plan_id);
    fprintf(out,
            "; rank %" PRIu32 " of %" PRIu32 ", S=%" PRIu32 " stages, B=%" PRIu32 " microbatches\n",
            p->rank, p->world, p->S, p->B);
    if (m->kind == PP_MODEL_LLAMA)
        fprintf(out,
                "; model: llama, vocab %" PRIu32 ", context %" PRIu32 ", embed %" PRIu32
                ", heads %" PRIu32 ", kv_heads %" PRIu32 ", ffn %" PRIu32 ", batch %" PRIu32
                ", rope_theta %" PRIu32 ", norm_eps %g%s; optimizer %s; precision %s\n",
                m->vocab, m->context, m->embed, m->heads, m->kv_heads, m->ffn, m->batch,
                m->rope_theta, (double)m->norm_eps, m->tie ? ", tied" : "",
                pp_optimizer_name(m->optimizer), pp_precision_name(m->precision));
    else if (m->kind == PP_MODEL_GPT)
        fprintf(out,
                "; model: gpt, vocab %" PRIu32 ", context %" PRIu32 ", embed %" PRIu32
                ", heads %" PRIu32 ", ffn %" PRIu32 ", batch %" PRIu32
                "%s; optimizer %s; precision %s\n",
                m->vocab, m->context, m->embed, m->heads, m->ffn, m->batch, m->tie ? ", tied" : "",
                pp_optimizer_name(m->optimizer), pp_precision_name(m->precision));
    else
        fprintf(out,
                "; model: %s, context %" PRIu32 ", embed %" PRIu32 " (width %" PRIu64
                "), ffn %" PRIu32 ", batch %" PRIu32 "; optimizer %s; precision %s\n",
                pp_model_kind_name(m->kind), m->context, m->embed, (uint64_t)m->context * m->embed,
                m->ffn, m->batch, pp_optimizer_name(m->optimizer), pp_precision_name(m->precision));
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

/* The instructions are formatted by hand, not through printf: a listing of
 * a million-job schedule has millions of lines, and printf's parsing of
 * the format string cost more than everything else ppc does (issue 18).
 * The helpers below produce exactly what the printf conversions they
 * replace produced ("%" PRId32, "%s", "%4s", "%-14s"), so the listings
 * stay byte for byte the same (the golden tests compare them). */

/* Decimal digits of v into buf (at least 11 chars), no terminator;
 * returns how many. */
static size_t fmt_u32(char *buf, uint32_t v)
{
    char tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t k = 0; k < n; k++)
        buf[k] = tmp[n - 1 - k];
    return n;
}

/* As "%" PRId32: a minus sign, then the digits. */
static size_t fmt_i32(char *buf, int32_t v)
{
    if (v >= 0)
        return fmt_u32(buf, (uint32_t)v);
    buf[0] = '-';
    return 1 + fmt_u32(buf + 1, 0u - (uint32_t)v);
}

/* Appends len bytes, cut as add cuts them (vsnprintf's truncation). */
static void add_bytes(text *t, const char *s, size_t len)
{
    size_t room = sizeof t->s - t->n;
    if (room <= 1)
        return;
    if (len > room - 1)
        len = room - 1;
    memcpy(t->s + t->n, s, len);
    t->n += len;
    t->s[t->n] = '\0';
}

static void add_str(text *t, const char *s) { add_bytes(t, s, strlen(s)); }

static void add_i32(text *t, int32_t v)
{
    char b[12];
    add_bytes(t, b, fmt_i32(b, v));
}

/* The slots column: "role=sN" for every used slot, absent optional ones left
 * out. An unknown opcode has no roles, so its raw operands are shown. */
static void slots_column(text *t, const pp_instr *in)
{
    const pp_op_info *o = pp_op(in->op);
    int n = pp_op_nslots(in->op);
    for (int k = 0; k < PP_MAX_SLOTS; k++) {
        /* pp_op_slot_role's answer, without its search per slot */
        int optional = k < n ? o->slot[k].optional : 0;
        const char *role = k < n ? pp_role_name(o->slot[k].role) : NULL;
        if (k >= n && in->slot[k] == -1)
            continue;
        if (k < n && in->slot[k] == -1 && optional)
            continue;
        if (t->n)
            add_bytes(t, " ", 1);
        add_str(t, role ? role : "?");
        add_bytes(t, "=s", 2);
        add_i32(t, in->slot[k]);
    }
}

/* The output buffer of a listing: lines gather here and go out in large
 * writes. A line is at most LINE_MAX_LEN bytes (two `text`s and the
 * fixed columns). */
enum { OUT_CAP = 1 << 16, LINE_MAX_LEN = 2 * 256 + 192 };
typedef struct {
    FILE *f;
    const pp_comments *cm; /* the comment templates, compiled */
    char *buf;             /* [OUT_CAP], or NULL: every line is written at once */
    size_t n;
    char line[LINE_MAX_LEN];
} outbuf;

static void out_flush(outbuf *o)
{
    if (o->n)
        fwrite(o->buf, 1, o->n, o->f);
    o->n = 0;
}

/* Room for one more line: where to write it (flushed first when full). */
static char *out_line(outbuf *o)
{
    if (!o->buf)
        return o->line;
    if (OUT_CAP - o->n < LINE_MAX_LEN)
        out_flush(o);
    return o->buf + o->n;
}

static void out_done(outbuf *o, char *p, size_t len)
{
    if (o->buf)
        o->n += len;
    else
        fwrite(p, 1, len, o->f);
}

/* s padded with spaces to width (on the left when right, else on the right)
 * at p, as "%*s" and "%-*s"; returns the end. */
static char *put_padded(char *p, const char *s, size_t len, int width, int right)
{
    size_t pad = len < (size_t)width ? (size_t)width - len : 0;
    if (right) {
        memset(p, ' ', pad);
        p += pad;
    }
    memcpy(p, s, len);
    p += len;
    if (!right) {
        memset(p, ' ', pad);
        p += pad;
    }
    return p;
}

/* A scalar operand's column, right-aligned in width, then two spaces:
 * the number if the opcode uses it, else ".". */
static char *put_scalar(char *p, unsigned uses, unsigned use, int32_t v, int width)
{
    char b[12];
    if (uses & use)
        p = put_padded(p, b, fmt_i32(b, v), width, 1);
    else
        p = put_padded(p, ".", 1, width, 1);
    memcpy(p, "  ", 2);
    return p + 2;
}

static void print_instr(const pp_plan *p, uint32_t i, outbuf *o)
{
    const pp_instr *in = &p->code[i];
    text slots = {.n = 0}, note = {.n = 0};
    slots.s[0] = note.s[0] = '\0';
    slots_column(&slots, in);
    note.n = pp_instr_comment(o->cm, p, in, note.s, sizeof note.s);
    char *line = out_line(o), *q = line, num[12];
    /* "%4u  %-14s  %5s  %4s  %4s  %3s  " */
    q = put_padded(q, num, fmt_u32(num, i), 4, 1);
    memcpy(q, "  ", 2);
    q += 2;
    const char *name = pp_op_name(in->op);
    size_t nlen = strlen(name);
    if (nlen > 64) /* no opcode's name is near this; a line's room is bounded */
        nlen = 64;
    q = put_padded(q, name, nlen, 14, 0);
    memcpy(q, "  ", 2);
    q += 2;
    unsigned uses = pp_op_uses(in->op);
    q = put_scalar(q, uses, PP_U_STAGE, in->stage, 5);
    q = put_scalar(q, uses, PP_U_MB, in->mb, 4);
    q = put_scalar(q, uses, PP_U_PEER, in->peer, 4);
    q = put_scalar(q, uses, PP_U_GROUP, in->group, 3);
    /* A long slots list runs into the comment column with one space left. */
    if (slots.n <= SLOTS_COL) {
        q = put_padded(q, slots.s, slots.n, SLOTS_COL, 0);
        memcpy(q, "  ", 2);
        q += 2;
    } else {
        memcpy(q, slots.s, slots.n);
        q += slots.n;
        *q++ = ' ';
    }
    memcpy(q, note.s, note.n);
    q += note.n;
    *q++ = '\n';
    out_done(o, line, (size_t)(q - line));
}

void pp_plan_disasm(const pp_plan *p, FILE *out)
{
    print_header(p, out);
    pp_comments cm;
    pp_comments_compile(&cm);
    outbuf o = {.f = out, .cm = &cm, .buf = malloc(OUT_CAP), .n = 0};
    for (uint32_t i = 0; p->code && i < p->ninstr; i++)
        print_instr(p, i, &o);
    out_flush(&o);
    free(o.buf);
    fprintf(out, "; end of plan (%" PRIu32 " instruction%s)\n", p->ninstr,
            p->ninstr == 1 ? "" : "s");
}
