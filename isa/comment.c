/* comment.c - the listing's comment column (comment.h): each opcode's
 * comment template, a column of the opcode table (isa/opcodes.h explains
 * the notation), compiled once per listing into steps and filled from an
 * instruction's operands; and pp_comment_check, which
 * tests/unit/test_plan.c runs on every template.
 *
 * The listing must survive an unvalidated plan (isa/disasm.c), so a slot
 * is shown as whatever number it holds, an unknown opcode gets a plain
 * line, and nothing here trusts the group table or the instruction's
 * place. Numbers are formatted by hand, not through printf: a listing of a
 * million-job schedule has millions of comments (issue 18). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comment.h"

#include "tensor.h"
#include "tensor_lane.h"

/* The comment being written: appends past cap - 1 bytes are cut, as
 * vsnprintf cuts them. */
typedef struct {
    char *s;
    size_t n, cap;
} out;

static void put(out *o, const char *s, size_t len)
{
    size_t room = o->cap - o->n;
    if (room <= 1)
        return;
    if (len > room - 1)
        len = room - 1;
    memcpy(o->s + o->n, s, len);
    o->n += len;
    o->s[o->n] = '\0';
}

static void put_str(out *o, const char *s) { put(o, s, strlen(s)); }

/* As "%" PRIu32 and "%" PRId32. */
static void put_u32(out *o, uint32_t v)
{
    char tmp[10], buf[10];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t k = 0; k < n; k++)
        buf[k] = tmp[n - 1 - k];
    put(o, buf, n);
}

static void put_i32(out *o, int32_t v)
{
    if (v < 0) {
        put(o, "-", 1);
        put_u32(o, 0u - (uint32_t)v);
    } else {
        put_u32(o, (uint32_t)v);
    }
}

/* The role named by name[0..len), or PP_ROLE_NONE. */
static pp_role role_named(const char *name, size_t len)
{
    for (int r = PP_ROLE_NONE + 1; r < PP_ROLE_COUNT; r++) {
        const char *rn = pp_role_name((pp_role)r);
        if (strlen(rn) == len && !memcmp(rn, name, len))
            return (pp_role)r;
    }
    return PP_ROLE_NONE;
}

static int named(const char *name, size_t len, const char *word)
{
    return strlen(word) == len && !memcmp(name, word, len);
}

/* "{0,1,2,3}" for group g, or "{?}" if the plan has no such group. */
static void put_members(out *o, const pp_plan *p, int32_t g)
{
    if (g < 0 || (uint32_t)g >= p->ngroups || !p->groups || !p->groups[g].member) {
        put(o, "{?}", 3);
        return;
    }
    put(o, "{", 1);
    for (uint32_t k = 0; k < p->groups[g].n; k++) {
        if (k)
            put(o, ",", 1);
        put_u32(o, p->groups[g].member[k]);
    }
    put(o, "}", 1);
}

/* The transfers between a GroupStart and its GroupEnd, and whether the
 * first moves data upward. */
static uint32_t group_after(const pp_plan *p, const pp_instr *in, int *up)
{
    uint32_t n = 0, first = (uint32_t)(in - p->code) + 1;
    while (first + n < p->ninstr && p->code[first + n].op != PP_OP_GroupEnd)
        n++;
    *up = n > 0 && pp_group_direction(&p->code[first], p->rank) == 1;
    return n;
}

/* Step kinds: literal text, a slot, a scalar, a condition. */
enum {
    ST_LIT,
    ST_SLOT,
    ST_STAGE,
    ST_MB,
    ST_PEER,
    ST_GROUP,
    ST_MEMBERS,
    ST_OPTIMIZER,
    ST_NEXT,
    ST_DIR,
    ST_COND,
    ST_TP,
    ST_LANE
};

/* The step kinds of the scalar names and the operand each needs (PP_U_*). */
static const struct {
    const char *name;
    uint8_t kind;
    unsigned use;
} SCALARS[] = {{"s", ST_STAGE, PP_U_STAGE},
               {"b", ST_MB, PP_U_MB},
               {"p", ST_PEER, PP_U_PEER},
               {"g", ST_GROUP, PP_U_GROUP},
               {"members", ST_MEMBERS, PP_U_GROUP},
               {"optimizer", ST_OPTIMIZER, 0},
               {"next", ST_NEXT, 0},
               {"dir", ST_DIR, 0},
               {"tp", ST_TP, PP_U_STAGE},
               {"lane", ST_LANE, 0}};

/* A compile of one template: its steps, and the first fault. */
typedef struct {
    int op;
    pp_comment_step *step;
    int n;
    char *err;
    size_t errlen;
    int bad;
} compiler;

static void fault(compiler *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fault(compiler *c, const char *fmt, ...)
{
    if (c->bad++ || !c->err || !c->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
}

static pp_comment_step *emit(compiler *c, uint8_t kind, const char *text, size_t len)
{
    if (c->n == PP_COMMENT_STEPS) {
        fault(c, "more than %d steps", PP_COMMENT_STEPS);
        return NULL;
    }
    pp_comment_step *st = &c->step[c->n++];
    *st = (pp_comment_step){kind, 0, PP_ROLE_NONE, (uint16_t)len, 0, text};
    return st;
}

/* {name} or {name|absent}: t just past '{'; returns just past '}'. */
static const char *field(const char *t, compiler *c)
{
    const char *name = t;
    while (*t && *t != '}' && *t != '|')
        t++;
    size_t len = (size_t)(t - name);
    const char *absent = "?";
    size_t alen = 1;
    if (*t == '|') {
        absent = ++t;
        while (*t && *t != '}')
            t++;
        alen = (size_t)(t - absent);
    }
    if (*t != '}') {
        fault(c, "unclosed {%.*s", (int)len, name);
        return t;
    }
    pp_role r = role_named(name, len);
    if (r != PP_ROLE_NONE) {
        pp_comment_step *st = pp_slot_index(c->op, r) >= 0 ? emit(c, ST_SLOT, absent, alen) : NULL;
        if (st)
            st->role = (uint8_t)r;
        else
            fault(c, "{%.*s}: %s has no such slot", (int)len, name, pp_op_name(c->op));
        return t + 1;
    }
    for (size_t k = 0; k < sizeof SCALARS / sizeof *SCALARS; k++)
        if (named(name, len, SCALARS[k].name)) {
            if (SCALARS[k].use && !(pp_op_uses(c->op) & SCALARS[k].use))
                fault(c, "{%.*s}: %s has no such operand", (int)len, name, pp_op_name(c->op));
            emit(c, SCALARS[k].kind, NULL, 0);
            return t + 1;
        }
    fault(c, "{%.*s}: no such operand", (int)len, name);
    return t + 1;
}

/* Compiles from t up to its end or an unmatched ']' (returned). */
static const char *compile(const char *t, compiler *c)
{
    while (*t && *t != ']' && !c->bad) {
        if (*t == '{') {
            t = field(t + 1, c);
        } else if (*t == '[') {
            char how = t[1];
            const char *name = t + 2, *e = name;
            while (*e && *e != ':' && *e != ']')
                e++;
            pp_role r = role_named(name, (size_t)(e - name));
            if ((how != '?' && how != '!' && how != '+') || *e != ':' || r == PP_ROLE_NONE ||
                pp_slot_index(c->op, r) < 0) {
                fault(c, "bad condition [%.*s", (int)(e - t - 1), t + 1);
                return t + strlen(t);
            }
            int at = c->n;
            pp_comment_step *st = emit(c, ST_COND, NULL, 0);
            if (!st)
                return t + strlen(t);
            st->how = (uint8_t)how;
            st->role = (uint8_t)r;
            t = compile(e + 1, c);
            if (*t != ']') {
                fault(c, "unclosed [%c%.*s", how, (int)(e - name), name);
                return t;
            }
            c->step[at].skip = (uint16_t)c->n;
            t++;
        } else {
            const char *lit = t;
            while (*t && *t != '{' && *t != '[' && *t != ']')
                t++;
            emit(c, ST_LIT, lit, (size_t)(t - lit));
        }
    }
    return t;
}

/* Compiles template tmpl of opcode op into step; returns the step count,
 * or -1 with the fault in err. */
static int compile_op(int op, const char *tmpl, pp_comment_step *step, char *err, size_t errlen)
{
    compiler c = {op, step, 0, err, errlen, 0};
    if (!pp_op(op) || !tmpl || !tmpl[0]) {
        fault(&c, "opcode %d has no comment template", op);
        return -1;
    }
    const char *end = compile(tmpl, &c);
    if (!c.bad && *end == ']')
        fault(&c, "a ']' closes no '['");
    return c.bad ? -1 : c.n;
}

void pp_comments_compile(pp_comments *c)
{
    for (int op = 0; op < PP_OP_COUNT; op++) {
        int n = compile_op(op, pp_op(op)->comment, c->step[op], NULL, 0);
        c->n[op] = (uint8_t)(n < 0 ? 0 : n);
    }
}

int pp_comment_check(int op, const char *tmpl, char *err, size_t errlen)
{
    pp_comment_step step[PP_COMMENT_STEPS];
    return compile_op(op, tmpl ? tmpl : (pp_op(op) ? pp_op(op)->comment : NULL), step, err,
                      errlen) < 0
               ? -1
               : 0;
}

size_t pp_instr_comment(const pp_comments *c, const pp_plan *p, const pp_instr *in, char *buf,
                        size_t cap)
{
    out o = {buf, 0, cap};
    if (!cap)
        return 0;
    buf[0] = '\0';
    if (!pp_op(in->op)) {
        char line[32];
        snprintf(line, sizeof line, "unknown opcode %u", in->op);
        put_str(&o, line);
        return o.n;
    }
    const pp_comment_step *step = c->step[in->op];
    for (int i = 0, n = c->n[in->op]; i < n;) {
        const pp_comment_step *st = &step[i++];
        int up;
        switch (st->kind) {
        case ST_LIT:
            put(&o, st->text, st->len);
            break;
        case ST_SLOT: {
            int32_t v = pp_slot(in, (pp_role)st->role);
            if (v == -1) {
                put(&o, st->text, st->len);
            } else {
                put(&o, "s", 1);
                put_i32(&o, v);
            }
            break;
        }
        case ST_STAGE:
            put_i32(&o, in->stage);
            break;
        case ST_MB:
            put_i32(&o, in->mb);
            break;
        case ST_PEER:
            put_i32(&o, in->peer);
            break;
        case ST_GROUP:
            put_i32(&o, in->group);
            break;
        case ST_MEMBERS:
            put_members(&o, p, in->group);
            break;
        case ST_OPTIMIZER:
            put_str(&o, pp_optimizer_name(p->model.optimizer));
            break;
        case ST_NEXT:
            put_u32(&o, group_after(p, in, &up));
            break;
        case ST_DIR:
            group_after(p, in, &up);
            put_str(&o, up ? "upward" : "downward");
            break;
        case ST_TP: /* a TensorAllReduce's count and size (isa/tensor.h) */
            if (in->stage >= 0 && (uint32_t)in->stage < p->S) {
                put_u32(&o, pp_tensor_allreduces(&p->model, in->stage));
                char bytes[32];
                snprintf(bytes, sizeof bytes, " all-reduces of %zu B",
                         pp_tensor_allreduce_bytes(&p->model));
                put_str(&o, bytes);
            } else {
                put_str(&o, "? all-reduces");
            }
            break;
        case ST_LANE: /* a TensorReduce's lane (isa/tensor_lane.h): said when not 0 */
            if (pp_tensor_lane(p, (uint32_t)(in - p->code)))
                put_str(&o, " on lane 1 (the pair's second job: its own communicator)");
            break;
        case ST_COND: {
            int32_t v = pp_slot(in, (pp_role)st->role);
            int on = st->how == '?' ? v != -1 : st->how == '!' ? v == -1 : v >= 0;
            if (!on)
                i = st->skip;
            break;
        }
        }
    }
    return o.n;
}
