/* bufcheck.c - the buffer-safety verifier (see bufcheck.h). */
#include "bufcheck.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tensor_lane.h"

static void say(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *msg, size_t len, const char *fmt, ...)
{
    if (!msg || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

/* "@12 RecvGrad(s=1,b=0)" into buf. */
static const char *fmt_instr(const pp_plan *p, uint32_t i, char buf[96])
{
    const pp_instr *in = &p->code[i];
    unsigned uses = pp_op_uses(in->op);
    int n = snprintf(buf, 96, "@%u %s(", i, pp_op_name(in->op));
    if (uses & PP_U_STAGE)
        n += snprintf(buf + n, 96 - (size_t)n, "s=%d%s", (int)in->stage, uses & PP_U_MB ? "," : "");
    if (uses & PP_U_MB)
        n += snprintf(buf + n, 96 - (size_t)n, "b=%d", (int)in->mb);
    snprintf(buf + n, 96 - (size_t)n, ")");
    return buf;
}

static const char *fmt_buf(const pp_touch *t, char buf[48])
{
    if (t->kind == PP_BUF_SLOT)
        snprintf(buf, 48, "slot s%d", (int)t->index);
    else
        snprintf(buf, 48, "its own stage %d %s", (int)t->index,
                 t->kind == PP_BUF_PARAMS ? "weights" : "gradients");
    return buf;
}

/* ---- 1. a group's members are concurrent --------------------------------- */

typedef struct {
    uint32_t group; /* the GroupStart address + 1 that stamped it; 0: none */
    uint32_t first; /* the first member to touch it */
    int writes;     /* some member writes it */
} stamp;

/* stamps: nslots for the slots, then S for params and S for grads. */
static stamp *stamp_of(stamp *stamps, const pp_plan *p, const pp_touch *t)
{
    size_t base = t->kind == PP_BUF_SLOT     ? 0
                  : t->kind == PP_BUF_PARAMS ? p->nslots
                                             : p->nslots + p->S;
    return &stamps[base + (size_t)t->index];
}

static int check_groups(const pp_plan *p, stamp *stamps, char *msg, size_t len)
{
    uint32_t open = 0; /* GroupStart address + 1 */
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        if (in->op == PP_OP_GroupStart || in->op == PP_OP_GroupEnd) {
            open = in->op == PP_OP_GroupStart ? i + 1 : 0;
            continue;
        }
        if (!open)
            continue;
        pp_touch t[PP_MAX_TOUCH];
        int n = pp_instr_touches(in, t);
        for (int k = 0; k < n; k++) {
            stamp *st = stamp_of(stamps, p, &t[k]);
            int writes = (t[k].access & PP_ACC_WR) != 0;
            if (st->group != open) {
                *st = (stamp){open, i, writes};
                continue;
            }
            if (st->first != i && (st->writes || writes)) {
                char a[96], b[96], c[48];
                say(msg, len,
                    "hazard: rank %u: %s and %s, in the group opened at @%u, both touch %s and "
                    "%s writes it, but a group's members run concurrently (expected the two in "
                    "different buffers, or in different groups)",
                    p->rank, fmt_instr(p, st->first, a), fmt_instr(p, i, b), open - 1,
                    fmt_buf(&t[k], c),
                    writes ? pp_op_name(in->op) : pp_op_name(p->code[st->first].op));
                return -1;
            }
            st->writes |= writes;
        }
    }
    return 0;
}

/* ---- 1b. an overlapped pair's two jobs are concurrent --------------------- */

/* Overlap's two jobs run at once on the cuda backend (two streams, whose
 * waits are all issued before either job records): like a group's
 * members, they may share a buffer only if neither writes it. Under
 * tensor > 1 each job's all-reduces are in place in its own workspace
 * (the pair's second job has the plan's second one) on its own lane's
 * communicator (isa/tensor_lane.h), so the jobs' slots are all they can
 * share. */
static int check_pairs(const pp_plan *p, char *msg, size_t len)
{
    for (uint32_t i = 0; i + 2 < p->ninstr; i++) {
        uint32_t ja, jb;
        if (p->code[i].op != PP_OP_Overlap || !pp_pair_jobs(p, i, &ja, &jb))
            continue;
        pp_touch a[PP_MAX_TOUCH], b[PP_MAX_TOUCH];
        int na = pp_instr_touches(&p->code[ja], a), nb = pp_instr_touches(&p->code[jb], b);
        for (int x = 0; x < na; x++)
            for (int y = 0; y < nb; y++) {
                if (a[x].kind != b[y].kind || a[x].index != b[y].index ||
                    !((a[x].access | b[y].access) & PP_ACC_WR))
                    continue;
                char f[96], g[96], c[48];
                say(msg, len,
                    "hazard: rank %u: %s and %s, the overlapped pair after @%u, both touch %s "
                    "and %s writes it, but a pair's jobs run concurrently (expected the two in "
                    "different buffers)",
                    p->rank, fmt_instr(p, ja, f), fmt_instr(p, jb, g), i, fmt_buf(&a[x], c),
                    (a[x].access & PP_ACC_WR) ? pp_op_name(p->code[ja].op)
                                              : pp_op_name(p->code[jb].op));
                return -1;
            }
    }
    return 0;
}

/* ---- 2. every read finds what it needs ------------------------------------ */

typedef struct {
    pp_content c; /* PP_CONTENT_NONE: never written, or moved (below) */
    int32_t s, b;
    uint32_t writer;
    int moved; /* 1: an Offload (writer) took F(s,b)'s stash to the host from here */
} content;

/* What slot touch t of instruction in holds when read, or after the write. */
static content expected(const pp_instr *in, const pp_touch *t)
{
    const pp_slot_spec *sp = t->spec;
    content c = {sp->content, in->stage + sp->dstage, in->mb, 0, 0};
    if (c.c == PP_CONTENT_ACT && c.s < 0) /* F(-1,b)'s output is the microbatch */
        c.c = PP_CONTENT_TOKENS;
    if (c.c == PP_CONTENT_TOKENS)
        c.s = -1;
    if (c.c == PP_CONTENT_WTS || c.c == PP_CONTENT_WGRAD || c.c == PP_CONTENT_TMP)
        c.b = -1;
    if (c.c == PP_CONTENT_TIED) /* either tied stage's copy: the two are summed */
        c.s = c.b = -1;
    return c;
}

/* "F(0,2)'s output", "stage 1's fetched weights", "microbatch 3". */
static const char *fmt_content(const content *c, char buf[64])
{
    switch (c->c) {
    case PP_CONTENT_NONE:
        if (c->moved)
            snprintf(buf, 64, "nothing (F(%d,%d)'s stash went to the host)", (int)c->s, (int)c->b);
        else
            snprintf(buf, 64, "nothing (never written)");
        break;
    case PP_CONTENT_HSTASH:
        snprintf(buf, 64, "F(%d,%d)'s stash on the host", (int)c->s, (int)c->b);
        break;
    case PP_CONTENT_TOKENS:
        snprintf(buf, 64, "microbatch %d", (int)c->b);
        break;
    case PP_CONTENT_ACT:
        snprintf(buf, 64, "F(%d,%d)'s output", (int)c->s, (int)c->b);
        break;
    case PP_CONTENT_GRAD:
        snprintf(buf, 64, "B(%d,%d)'s input gradient", (int)c->s, (int)c->b);
        break;
    case PP_CONTENT_STASH:
        snprintf(buf, 64, "F(%d,%d)'s stash", (int)c->s, (int)c->b);
        break;
    case PP_CONTENT_STASHW:
        snprintf(buf, 64, "the stash B(%d,%d) left for W", (int)c->s, (int)c->b);
        break;
    default:
        snprintf(buf, 64, "stage %d's %s", (int)c->s, pp_content_words(c->c));
        break;
    }
    return buf;
}

static int same(const content *a, const content *b)
{
    return a->c == b->c && a->s == b->s && a->b == b->b;
}

/* Two operands of one instruction in one slot, one of them written: the
 * kernel would read what it is overwriting. */
static int check_aliases(const pp_plan *p, uint32_t i, const pp_touch *t, int n, char *msg,
                         size_t len)
{
    for (int k = 0; k < n; k++)
        for (int j = k + 1; j < n; j++)
            if (t[k].kind == PP_BUF_SLOT && t[j].kind == PP_BUF_SLOT && t[k].index == t[j].index &&
                ((t[k].access | t[j].access) & PP_ACC_WR)) {
                char a[96];
                say(msg, len,
                    "alias: rank %u: %s has its %s and its %s both in slot s%d, and writes one "
                    "(expected different slots)",
                    p->rank, fmt_instr(p, i, a), pp_role_name(t[k].spec->role),
                    pp_role_name(t[j].spec->role), (int)t[k].index);
                return -1;
            }
    return 0;
}

static int check_dataflow(const pp_plan *p, content *slots, char *msg, size_t len)
{
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        pp_touch t[PP_MAX_TOUCH];
        int n = pp_instr_touches(in, t);
        if (check_aliases(p, i, t, n, msg, len))
            return -1;
        for (int k = 0; k < n; k++) {
            if (t[k].kind != PP_BUF_SLOT)
                continue; /* the rank's own stages always hold their weights */
            content want = expected(in, &t[k]), *have = &slots[t[k].index];
            if ((t[k].access & PP_ACC_RD) && !same(have, &want)) {
                char a[96], b[64], c[64], d[128] = "";
                if (have->c != PP_CONTENT_NONE || have->moved)
                    snprintf(d, sizeof d, ", %s by %s", have->moved ? "offloaded" : "written",
                             fmt_instr(p, have->writer, a));
                say(msg, len,
                    "dataflow: rank %u: %s reads slot s%d as its %s, which should hold %s but "
                    "holds %s%s",
                    p->rank, fmt_instr(p, i, a), (int)t[k].index, pp_role_name(t[k].spec->role),
                    fmt_content(&want, b), fmt_content(have, c), d);
                return -1;
            }
        }
        for (int k = 0; k < n; k++)
            if (t[k].kind == PP_BUF_SLOT && (t[k].access & PP_ACC_WR)) {
                content c = expected(in, &t[k]);
                if (t[k].spec->becomes) /* an UPD slot: BackwardInput's stash */
                    c.c = t[k].spec->becomes;
                c.writer = i;
                slots[t[k].index] = c;
            }
        /* an Offload ends its device stash: whatever reads the slot before
         * a Reload (or another write) fills it again reads nothing */
        if (in->op == PP_OP_Offload) {
            int src = pp_slot(in, PP_ROLE_SRC);
            if (src >= 0 && (uint32_t)src < p->nslots)
                slots[src] = (content){PP_CONTENT_NONE, in->stage, in->mb, i, 1};
        }
    }
    return 0;
}

/* ---- 3. host slots hold only offloaded stashes ------------------------------- */

/* Offload's pool (pp_plan_host_slots) is host memory on the cuda backend:
 * a job or transfer must never touch it, and an Offload or Reload must
 * move between a device slot and a host slot. */
static int check_host(const pp_plan *p, uint8_t *host, char *msg, size_t len)
{
    pp_plan_host_slots(p, host);
    for (uint32_t i = 0; i < p->ninstr; i++) {
        pp_touch t[PP_MAX_TOUCH];
        int n = pp_instr_touches(&p->code[i], t);
        for (int k = 0; k < n; k++) {
            if (t[k].kind != PP_BUF_SLOT || t[k].index < 0 || (uint32_t)t[k].index >= p->nslots)
                continue;
            int want = t[k].spec->content == PP_CONTENT_HSTASH;
            if (host[t[k].index] != want) {
                char a[96];
                say(msg, len,
                    "host: rank %u: %s uses slot s%d as its %s, but s%d is %s (expected %s: "
                    "offload's host slots hold only stashes an Offload wrote)",
                    p->rank, fmt_instr(p, i, a), (int)t[k].index, pp_role_name(t[k].spec->role),
                    (int)t[k].index, want ? "a device slot" : "a host slot",
                    want ? "a host slot" : "a device slot");
                return -1;
            }
        }
    }
    return 0;
}

int pp_buffer_check_plan(const pp_plan *p, char *msg, size_t msglen)
{
    size_t nstamps = (size_t)p->nslots + 2 * (size_t)p->S;
    stamp *stamps = calloc(nstamps + 1, sizeof *stamps);
    content *slots = calloc((size_t)p->nslots + 1, sizeof *slots);
    uint8_t *host = calloc((size_t)p->nslots + 1, 1);
    int rc = -1;
    if (!stamps || !slots || !host)
        say(msg, msglen, "error: out of memory checking rank %u's buffers", p->rank);
    else if (!check_groups(p, stamps, msg, msglen) && !check_pairs(p, msg, msglen) &&
             !check_host(p, host, msg, msglen) && !check_dataflow(p, slots, msg, msglen)) {
        say(msg, msglen, "ok");
        rc = 0;
    }
    free(host);
    free(slots);
    free(stamps);
    return rc;
}

int pp_buffer_check(const pp_plan *plans, int W, char *msg, size_t msglen)
{
    for (int r = 0; r < W; r++)
        if (pp_buffer_check_plan(&plans[r], msg, msglen))
            return -1;
    say(msg, msglen, "ok");
    return 0;
}
