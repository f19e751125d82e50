/* commcheck.c - the communication checker (see commcheck.h): replays every
 * rank's plan under NCCL's matching rules and either proves that all streams
 * run to their end or says where and why they hang.
 *
 * Four passes:
 *   1. validate  plans[r] is rank r of W, opcodes are known, peers are in
 *                range and not the rank itself, groups are in range, a rank
 *                reduces only over groups it belongs to, and every member
 *                holds the same group g (the VM builds one communicator per
 *                group index, so a member with another list would hang it).
 *   2. number    every point-to-point op gets its issue number within its
 *                (rank, peer, direction): the k of "the k-th send from a to
 *                b". Two ops are partners iff they are opposite ends of the
 *                same pair with the same number - NCCL's matching rule.
 *   3. replay    a worklist of runnable ranks. A rank passes its
 *                non-blocking instructions; at a p2p op it looks at what its
 *                peer has posted: if the partner is there, both advance and
 *                the peer becomes runnable, else the rank stops (the peer
 *                finds it when it gets there: whoever arrives second does the
 *                match). At a collective it counts itself in; the last member
 *                to arrive advances them all. Each instruction is passed
 *                once, so the replay is linear in the streams' length.
 *   4. report    ranks left unfinished are blocked forever. The outcome does
 *                not depend on the worklist order: partners are fixed by
 *                issue order and collectives by group order, so the streams
 *                behave like a Kahn network. Each blocked rank gets a line
 *                saying what it waits for, then a depth-first search of the
 *                wait-for graph names a cycle if there is one.
 *
 * GroupStart/GroupEnd pass like compute: the replay proves the execution
 * in which a group's transfers run one after another, and a group never
 * ends later than that (transfer_groups.c says why).
 *
 * Tensor lanes (isa/tensor_lane.h): a group's TensorReduces go over one of
 * PP_TENSOR_LANES communicators, so a collective is keyed by (group, lane):
 * the members must issue the same TensorReduces in the same order on each
 * lane, and a rank blocked on one lane waits there even when the other
 * lane could proceed, as the host issues the lanes' operations in plan
 * order. */
#include "commcheck.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_lane.h"

enum { ST_RUN, ST_P2P, ST_COLL, ST_DONE }; /* where a rank stands */
enum { DIR_SEND = 0, DIR_RECV = 1 };       /* which end of a transfer */

#define LINE_CAP 1024 /* one report line; long lists inside are cut first */
#define MAX_LINES 16  /* blocked ranks described one by one */
#define MAX_MISSING 4 /* members named per blocked collective */
#define MAX_CYCLE 8   /* ranks of a cycle shown before it is abbreviated */
#define MAX_MEMBERS 8 /* members shown when a group is printed */

/* ------------------------------------------------------------- messages */

/* A bounded string: appends never overflow, and `cut` records that
 * something did not fit. */
typedef struct {
    char *buf;
    size_t cap, len;
    int cut;
} sbuf;

static int sb_init(sbuf *b, char *buf, size_t cap)
{
    b->buf = buf;
    b->cap = buf ? cap : 0;
    b->len = 0;
    b->cut = 0;
    if (b->cap)
        b->buf[0] = '\0';
    return 0;
}

static int sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Returns 0, or -1 when the text was cut (what fits is kept). */
static int sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->cap == 0 || b->len + 1 >= b->cap) {
        b->cut = 1;
        return -1;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len) {
        b->len = b->cap - 1;
        b->cut = 1;
        return -1;
    }
    b->len += (size_t)n;
    return 0;
}

/* ------------------------------------------------------ the opcode table */

/* Which transfer an op is and which end of it, from the opcode table:
 * *kind is the sending side's opcode, so both ends of one transfer agree;
 * returns 1 for a point-to-point op, 0 for anything else. */
static int p2p_class(int op, int *kind, int *dir)
{
    const pp_op_info *o = pp_op(op);
    int p2p = pp_op_is_transfer(op);
    if (kind)
        *kind = !p2p ? -1 : o->kind == PP_KIND_SEND ? op : o->pairs;
    if (dir)
        *dir = !p2p ? -1 : o->kind == PP_KIND_SEND ? DIR_SEND : DIR_RECV;
    return p2p;
}

static int is_collective(int op) { return pp_op(op) && pp_op(op)->kind == PP_KIND_COLLECTIVE; }

/* ---------------------------------------------------------------- state */

typedef struct {
    const pp_plan *plans;
    int W;
    uint32_t *pc;   /* [W] next instruction of each rank */
    uint8_t *state; /* [W] ST_* */
    size_t *base;   /* [W+1] rank r's instructions are seq[base[r] ..] */
    uint32_t *seq;  /* issue number of each p2p op in its (rank, peer, dir) */
    int *work;      /* [W] runnable ranks (a stack) */
    int nwork;
    uint8_t *queued;   /* [W] r is on the worklist */
    uint32_t G;        /* the largest group table */
    uint32_t *arrived; /* [G * PP_TENSOR_LANES] members at (group, lane)'s pending collective */
    int *first;        /* [same] the first of them, the one the others must agree with */
    size_t *gbase;     /* [W+1] */
    uint8_t *gok;      /* group g of rank r already checked: gok[gbase[r] + g] */
    sbuf *out;
} checker;

static const pp_instr *instr_at(const checker *c, int r, uint32_t i)
{
    return &c->plans[r].code[i];
}

/* Whether rank r's instruction i is a TensorReduce of an Overlap pair,
 * whose lane the messages name. */
static int in_pair(const checker *c, int r, uint32_t i)
{
    const pp_plan *p = &c->plans[r];
    return pp_tensor_lane(p, i) || (i >= 1 && p->code[i - 1].op == PP_OP_Overlap);
}

/* The communicator rank r's collective at i runs on: its group's lane
 * (isa/tensor_lane.h), as the index group * PP_TENSOR_LANES + lane. */
static uint32_t coll_key(const checker *c, int r, uint32_t i)
{
    return (uint32_t)instr_at(c, r, i)->group * PP_TENSOR_LANES +
           (uint32_t)pp_tensor_lane(&c->plans[r], i);
}

/* "RecvGrad(s=1,b=0) from 1": the operands the op uses, then its peer. */
static int fmt_instr(sbuf *b, const pp_instr *in)
{
    unsigned uses = pp_op_uses(in->op);
    const char *sep = "";
    int dir = -1;
    sb_printf(b, "%s(", pp_op_name(in->op));
    if (uses & PP_U_STAGE) {
        sb_printf(b, "s=%d", (int)in->stage);
        sep = ",";
    }
    if (uses & PP_U_MB) {
        sb_printf(b, "%sb=%d", sep, (int)in->mb);
        sep = ",";
    }
    if (uses & PP_U_GROUP)
        sb_printf(b, "%sg=%d", sep, (int)in->group);
    sb_printf(b, ")");
    if (p2p_class(in->op, NULL, &dir))
        sb_printf(b, " %s %d", dir == DIR_SEND ? "to" : "from", (int)in->peer);
    return 0;
}

/* "rank 0 @12 RecvGrad(s=1,b=0) from 1", or "rank 0 (ended)". */
static int fmt_at(sbuf *b, const checker *c, int r, uint32_t i)
{
    if (i >= c->plans[r].ninstr)
        return sb_printf(b, "rank %d (ended)", r);
    sb_printf(b, "rank %d @%u ", r, i);
    return fmt_instr(b, instr_at(c, r, i));
}

/* "{0,1,2}", the first MAX_MEMBERS members then "...". */
static int fmt_group(sbuf *b, const pp_group *g)
{
    sb_printf(b, "{");
    for (uint32_t k = 0; k < g->n && k < MAX_MEMBERS; k++)
        sb_printf(b, "%s%u", k ? "," : "", g->member[k]);
    if (g->n > MAX_MEMBERS)
        sb_printf(b, ",... %u in all", g->n);
    return sb_printf(b, "}");
}

/* ------------------------------------------------------------- validate */

static int same_group(const pp_group *a, const pp_group *b)
{
    return a->n == b->n && (a->n == 0 || !memcmp(a->member, b->member, a->n * sizeof *a->member));
}

/* Group g of rank r (which reduces over it at instruction i): members
 * ascending and in range, r among them, and every member holding the same
 * list under the same index. Checked once per (rank, group); a member found
 * equal is marked too, so a consistent group costs O(n^2) once. */
static int check_group(checker *c, int r, uint32_t i, uint32_t g)
{
    const pp_group *v = &c->plans[r].groups[g];
    int self = 0;
    if (c->gok[c->gbase[r] + g])
        return 0;
    if (v->n == 0 || !v->member) {
        sb_printf(c->out, "invalid: ");
        fmt_at(c->out, c, r, i);
        sb_printf(c->out, ": group %u is empty", g);
        return -1;
    }
    for (uint32_t k = 0; k < v->n; k++) {
        if (v->member[k] >= (uint32_t)c->W || (k > 0 && v->member[k] <= v->member[k - 1])) {
            sb_printf(c->out, "invalid: rank %d's group %u ", r, g);
            fmt_group(c->out, v);
            sb_printf(c->out, " is not a list of distinct ranks below %d in ascending order", c->W);
            return -1;
        }
        self |= v->member[k] == (uint32_t)r;
    }
    if (!self) {
        sb_printf(c->out, "invalid: ");
        fmt_at(c->out, c, r, i);
        sb_printf(c->out, ": rank %d is not a member of group %u ", r, g);
        fmt_group(c->out, v);
        return -1;
    }
    for (uint32_t k = 0; k < v->n; k++) {
        int m = (int)v->member[k];
        const pp_plan *q = &c->plans[m];
        if (g >= q->ngroups || !q->groups || !same_group(v, &q->groups[g])) {
            sb_printf(c->out, "invalid: group %u is ", g);
            fmt_group(c->out, v);
            sb_printf(c->out, " at rank %d but ", r);
            if (g >= q->ngroups || !q->groups)
                sb_printf(c->out, "rank %d has only %u groups", m, q->ngroups);
            else
                fmt_group(c->out, &q->groups[g]);
            sb_printf(c->out, " at rank %d, one of its members", m);
            return -1;
        }
        c->gok[c->gbase[m] + g] = 1;
    }
    return 0;
}

/* One instruction's operands, as far as communication is concerned. */
static int check_instr(checker *c, int r, uint32_t i)
{
    const pp_plan *p = &c->plans[r];
    const pp_instr *in = instr_at(c, r, i);
    int dir = -1;
    if (in->op >= PP_OP_COUNT) {
        sb_printf(c->out, "invalid: rank %d @%u: unknown opcode %u", r, i, in->op);
        return -1;
    }
    if (p2p_class(in->op, NULL, &dir) && (in->peer < 0 || in->peer >= c->W || in->peer == r)) {
        sb_printf(c->out, "invalid: ");
        fmt_at(c->out, c, r, i);
        if (in->peer == r)
            sb_printf(c->out, ": a rank cannot %s itself",
                      dir == DIR_SEND ? "send to" : "receive from");
        else
            sb_printf(c->out, ": peer %d out of range (world %d)", (int)in->peer, c->W);
        return -1;
    }
    if (is_collective(in->op)) {
        if (in->group < 0 || (uint32_t)in->group >= p->ngroups || !p->groups) {
            sb_printf(c->out, "invalid: ");
            fmt_at(c->out, c, r, i);
            sb_printf(c->out, ": group %d out of range (rank %d has %u groups)", (int)in->group, r,
                      p->ngroups);
            return -1;
        }
        return check_group(c, r, i, (uint32_t)in->group);
    }
    return 0;
}

static int validate(checker *c)
{
    for (int r = 0; r < c->W; r++) {
        const pp_plan *p = &c->plans[r];
        if (p->rank != (uint32_t)r || p->world != (uint32_t)c->W) {
            sb_printf(c->out,
                      "invalid: plans[%d] is rank %u of world %u; expected rank %d of world %d", r,
                      p->rank, p->world, r, c->W);
            return -1;
        }
        if (p->ninstr > 0 && !p->code) {
            sb_printf(c->out, "invalid: rank %d has %u instructions but no code", r, p->ninstr);
            return -1;
        }
    }
    for (int r = 0; r < c->W; r++)
        for (uint32_t i = 0; i < c->plans[r].ninstr; i++)
            if (check_instr(c, r, i) < 0)
                return -1;
    return 0;
}

/* --------------------------------------------------------------- number */

/* seq[] for every p2p op: counters per (peer, dir) for one rank at a time,
 * cleared again by a second walk over the same rank, so the pass costs
 * O(total + W) and never W^2. */
static int number(checker *c)
{
    int rc = -1;
    uint32_t *count = calloc((size_t)c->W * 2, sizeof *count);
    if (!count) {
        sb_printf(c->out, "error: out of memory");
        goto out;
    }
    for (int r = 0; r < c->W; r++) {
        const pp_plan *p = &c->plans[r];
        int dir;
        for (uint32_t i = 0; i < p->ninstr; i++)
            if (p2p_class(p->code[i].op, NULL, &dir))
                c->seq[c->base[r] + i] = count[(size_t)p->code[i].peer * 2 + (size_t)dir]++;
        for (uint32_t i = 0; i < p->ninstr; i++)
            if (p2p_class(p->code[i].op, NULL, &dir))
                count[(size_t)p->code[i].peer * 2 + (size_t)dir] = 0;
    }
    rc = 0;
out:
    free(count);
    return rc;
}

/* --------------------------------------------------------------- replay */

static int push(checker *c, int r)
{
    if (!c->queued[r]) {
        c->queued[r] = 1;
        c->work[c->nwork++] = r;
    }
    return 0;
}

/* THE PLACE TO EXTEND FOR GROUPED OPERATIONS (ncclGroupStart/End).
 * Sets [*first, *end) to the instructions rank r has posted at once, any of
 * which a partner may match. The ISA has no group markers yet, so a rank
 * posts only its head instruction. With markers this returns the whole
 * group, and three things follow: a per-instruction "done" bit inside the
 * window, the rank passing the window only when all of it is done (instead
 * of the pc++ in try_p2p and arrive), and try_p2p trying every op of the
 * rank's own window, not just the head. Returns 1 if anything is posted. */
static int posted(const checker *c, int r, uint32_t *first, uint32_t *end)
{
    *first = c->pc[r];
    *end = c->pc[r] < c->plans[r].ninstr ? c->pc[r] + 1 : c->pc[r];
    return *end > *first;
}

/* A matched pair must be the same transfer: kind, stage and microbatch. */
static int check_pair(checker *c, int r, uint32_t i, int p, uint32_t j)
{
    const pp_instr *a = instr_at(c, r, i), *b = instr_at(c, p, j);
    int ka, kb, da;
    const char *why = NULL;
    p2p_class(a->op, &ka, &da);
    p2p_class(b->op, &kb, NULL);
    if (ka != kb)
        why = "they are different kinds of transfer";
    else if (a->stage != b->stage)
        why = "their stages differ";
    else if ((pp_op_uses(a->op) & PP_U_MB) && a->mb != b->mb)
        why = "their microbatches differ";
    if (!why)
        return 0;
    int s = da == DIR_SEND ? r : p, d = da == DIR_SEND ? p : r;
    uint32_t k = c->seq[c->base[r] + i] + 1;
    sb_printf(c->out, "mismatch: ");
    fmt_at(c->out, c, r, i);
    sb_printf(c->out, " meets ");
    fmt_at(c->out, c, p, j);
    sb_printf(c->out, " (transfer #%u from rank %d to rank %d), but %s", k, s, d, why);
    return -1;
}

/* Rank r is at a p2p op: if its peer has posted the partner (the op at the
 * other end of the same pair with the same issue number) both advance.
 * Returns 0 with *matched set, or -1 on a mismatched pair. */
static int try_p2p(checker *c, int r, int *matched)
{
    uint32_t i = c->pc[r], first, end;
    const pp_instr *in = instr_at(c, r, i);
    int p = in->peer, dir, pdir;
    *matched = 0;
    p2p_class(in->op, NULL, &dir);
    if (!posted(c, p, &first, &end))
        return 0;
    for (uint32_t j = first; j < end; j++) {
        const pp_instr *q = instr_at(c, p, j);
        if (!p2p_class(q->op, NULL, &pdir) || pdir == dir || q->peer != r ||
            c->seq[c->base[p] + j] != c->seq[c->base[r] + i])
            continue;
        if (check_pair(c, r, i, p, j) < 0)
            return -1;
        c->pc[r]++;
        c->pc[p]++;
        c->state[p] = ST_RUN;
        push(c, p);
        *matched = 1;
        return 0;
    }
    return 0;
}

/* Rank r reaches a collective on group g: it must be the same operation
 * on the same stage as what the first member to arrive reached. The last
 * member to arrive completes it for everyone. Returns 0 with *completed
 * set, or -1 on a mismatch. */
static int arrive(checker *c, int r, int *completed)
{
    const pp_instr *in = instr_at(c, r, c->pc[r]);
    uint32_t g = (uint32_t)in->group, key = coll_key(c, r, c->pc[r]);
    const pp_group *grp = &c->plans[r].groups[g];
    *completed = 0;
    if (c->arrived[key] > 0) {
        int f = c->first[key];
        const pp_instr *x = instr_at(c, f, c->pc[f]);
        /* a TensorReduce is its next job's all-reduces: the members must
         * run one job (issue 27), so the microbatch and that job agree too */
        int tensor_bad = in->op == PP_OP_TensorReduce && x->op == in->op &&
                         x->stage == in->stage &&
                         (x->mb != in->mb || c->pc[f] + 1 >= c->plans[f].ninstr ||
                          c->pc[r] + 1 >= c->plans[r].ninstr ||
                          instr_at(c, f, c->pc[f] + 1)->op != instr_at(c, r, c->pc[r] + 1)->op);
        if (tensor_bad) {
            sb_printf(c->out, "mismatch: ");
            fmt_at(c->out, c, f, c->pc[f]);
            sb_printf(c->out, " and ");
            fmt_at(c->out, c, r, c->pc[r]);
            sb_printf(c->out, " meet in the same tensor all-reduce on group %u ", g);
            fmt_group(c->out, grp);
            if (in_pair(c, r, c->pc[r]) || in_pair(c, f, c->pc[f]))
                sb_printf(c->out, " lane %u", key % PP_TENSOR_LANES);
            sb_printf(c->out, ", but %s",
                      x->mb != in->mb ? "their microbatches differ"
                                      : "the jobs after them differ (F, B, BackwardInput or Recompute)");
            return -1;
        }
        if (x->op != in->op || x->stage != in->stage) {
            sb_printf(c->out, "mismatch: ");
            fmt_at(c->out, c, f, c->pc[f]);
            sb_printf(c->out, " and ");
            fmt_at(c->out, c, r, c->pc[r]);
            sb_printf(c->out, " meet in the same collective on group %u ", g);
            fmt_group(c->out, grp);
            sb_printf(c->out, ", but %s",
                      x->op != in->op ? "they are different operations" : "their stages differ");
            return -1;
        }
    } else {
        c->first[key] = r;
    }
    c->state[r] = ST_COLL;
    if (++c->arrived[key] < grp->n)
        return 0;
    c->arrived[key] = 0;
    for (uint32_t k = 0; k < grp->n; k++) {
        int m = (int)grp->member[k];
        c->pc[m]++;
        c->state[m] = ST_RUN;
        if (m != r)
            push(c, m);
    }
    *completed = 1;
    return 0;
}

/* Runs rank r until it ends or blocks. */
static int step(checker *c, int r)
{
    const pp_plan *p = &c->plans[r];
    c->state[r] = ST_RUN;
    for (;;) {
        int go = 0;
        while (c->pc[r] < p->ninstr && !p2p_class(p->code[c->pc[r]].op, NULL, NULL) &&
               !is_collective(p->code[c->pc[r]].op))
            c->pc[r]++;
        if (c->pc[r] >= p->ninstr) {
            c->state[r] = ST_DONE;
            return 0;
        }
        if (p2p_class(p->code[c->pc[r]].op, NULL, NULL)) {
            if (try_p2p(c, r, &go) < 0)
                return -1;
            if (!go)
                c->state[r] = ST_P2P;
        } else if (arrive(c, r, &go) < 0) {
            return -1;
        }
        if (!go)
            return 0;
    }
}

static int replay(checker *c)
{
    for (int r = c->W - 1; r >= 0; r--) /* so rank 0 runs first */
        push(c, r);
    while (c->nwork > 0) {
        int r = c->work[--c->nwork];
        c->queued[r] = 0;
        if (step(c, r) < 0)
            return -1;
    }
    return 0;
}

/* --------------------------------------------------------------- report */

/* Rank r at the collective keyed key has not been joined by member m. */
static int missing(const checker *c, int m, uint32_t key)
{
    return c->state[m] != ST_COLL || coll_key(c, m, c->pc[m]) != key;
}

/* The op of rank p that issue order pairs with rank r's op i: returns 1
 * and sets *j if p's stream has it; *count is how many ops p issues on the
 * other end of the pair in all. */
static int find_partner(const checker *c, int r, uint32_t i, uint32_t *j, uint32_t *count)
{
    const pp_instr *in = instr_at(c, r, i);
    int p = in->peer, dir, pdir, found = 0;
    p2p_class(in->op, NULL, &dir);
    *count = 0;
    for (uint32_t k = 0; k < c->plans[p].ninstr; k++) {
        const pp_instr *q = instr_at(c, p, k);
        if (!p2p_class(q->op, NULL, &pdir) || pdir == dir || q->peer != r)
            continue;
        if (c->seq[c->base[p] + k] == c->seq[c->base[r] + i] && !found) {
            *j = k;
            found = 1;
        }
        (*count)++;
    }
    return found;
}

/* "waits for rank 1 to reach @3 SendGrad(s=1,b=0) to 0; rank 1 is at ..." */
static int explain_p2p(sbuf *b, const checker *c, int r)
{
    uint32_t i = c->pc[r], j = 0, count = 0;
    const pp_instr *in = instr_at(c, r, i);
    int p = in->peer, dir;
    p2p_class(in->op, NULL, &dir);
    const char *verb = dir == DIR_SEND ? "receiving" : "sending";
    int found = find_partner(c, r, i, &j, &count);
    if (c->state[p] == ST_DONE) /* then it cannot have the partner: it would have matched */
        return sb_printf(b, "rank %d ended its stream without %s it", p, verb);
    if (!found && count == 0)
        return sb_printf(b, "rank %d never %s it (it %s rank %d at all)", p,
                         dir == DIR_SEND ? "receives" : "sends",
                         dir == DIR_SEND ? "receives nothing from" : "sends nothing to", r);
    if (!found)
        return sb_printf(b, "rank %d never %s it (it %s rank %d only %u time%s)", p,
                         dir == DIR_SEND ? "receives" : "sends",
                         dir == DIR_SEND ? "receives from" : "sends to", r, count,
                         count == 1 ? "" : "s");
    sb_printf(b, "waits for rank %d to reach @%u ", p, j);
    fmt_instr(b, instr_at(c, p, j));
    sb_printf(b, "; rank %d is blocked at @%u ", p, c->pc[p]);
    return fmt_instr(b, instr_at(c, p, c->pc[p]));
}

/* "waits for rank 1 (blocked at @0 ...), rank 2 (ended its stream)" */
static int explain_coll(sbuf *b, const checker *c, int r)
{
    uint32_t g = (uint32_t)instr_at(c, r, c->pc[r])->group, key = coll_key(c, r, c->pc[r]);
    const pp_group *grp = &c->plans[r].groups[g];
    uint32_t named = 0, more = 0;
    sb_printf(b, "waits in group %u ", g);
    fmt_group(b, grp);
    if (key % PP_TENSOR_LANES)
        sb_printf(b, " lane %u", key % PP_TENSOR_LANES);
    sb_printf(b, " for ");
    for (uint32_t k = 0; k < grp->n; k++) {
        int m = (int)grp->member[k];
        if (m == r || !missing(c, m, key))
            continue;
        if (named == MAX_MISSING) {
            more++;
            continue;
        }
        sb_printf(b, "%srank %d ", named ? ", " : "", m);
        if (c->state[m] == ST_DONE) {
            sb_printf(b, "(ended its stream without reaching it)");
        } else {
            sb_printf(b, "(blocked at @%u ", c->pc[m]);
            fmt_instr(b, instr_at(c, m, c->pc[m]));
            sb_printf(b, ")");
        }
        named++;
    }
    return more ? sb_printf(b, " and %u more", more) : 0;
}

/* The cursor-th rank blocked rank r waits for, not counting ranks that
 * ended (they never move again, so they close no cycle). Returns 1 and
 * sets *to, advancing *cursor past it, or 0 when there is none left. */
static int wait_edge(const checker *c, int r, uint32_t *cursor, int *to)
{
    const pp_instr *in = instr_at(c, r, c->pc[r]);
    if (c->state[r] == ST_P2P) {
        if (*cursor > 0 || c->state[in->peer] == ST_DONE)
            return 0;
        *cursor = 1;
        *to = in->peer;
        return 1;
    }
    const pp_group *grp = &c->plans[r].groups[in->group];
    while (*cursor < grp->n) {
        int m = (int)grp->member[(*cursor)++];
        if (m != r && c->state[m] != ST_DONE && missing(c, m, coll_key(c, r, c->pc[r]))) {
            *to = m;
            return 1;
        }
    }
    return 0;
}

/* Depth-first search of the wait-for graph from each blocked rank; on the
 * first edge back into the current path, writes the cycle to b. Sets
 * *found; returns -1 only when out of memory. */
static int find_cycle(const checker *c, sbuf *b, int *found)
{
    int rc = -1, W = c->W;
    uint8_t *color = calloc((size_t)W, 1); /* 0 new, 1 on the path, 2 done */
    int *path = malloc((size_t)W * sizeof *path), *at = malloc((size_t)W * sizeof *at);
    uint32_t *cursor = malloc((size_t)W * sizeof *cursor);
    *found = 0;
    if (!color || !path || !at || !cursor)
        goto out;
    for (int s = 0; s < W && !*found; s++) {
        int depth = 0;
        if (c->state[s] == ST_DONE || color[s])
            continue;
        path[depth] = s;
        cursor[depth] = 0;
        at[s] = depth++;
        color[s] = 1;
        while (depth > 0 && !*found) {
            int u = path[depth - 1], v;
            if (!wait_edge(c, u, &cursor[depth - 1], &v)) {
                color[u] = 2;
                depth--;
            } else if (color[v] == 0) {
                path[depth] = v;
                cursor[depth] = 0;
                at[v] = depth++;
                color[v] = 1;
            } else if (color[v] == 1) {
                int len = depth - at[v];
                sb_printf(b, "  cycle: ");
                for (int k = 0; k < len; k++) {
                    if (len > MAX_CYCLE && k == MAX_CYCLE - 2) {
                        sb_printf(b, "... (%d more) -> ", len - MAX_CYCLE);
                        k = len - 2;
                    }
                    int x = path[at[v] + k];
                    fmt_at(b, c, x, c->pc[x]);
                    sb_printf(b, " -> ");
                }
                sb_printf(b, "rank %d", v);
                *found = 1;
            }
        }
    }
    rc = 0;
out:
    free(color);
    free(path);
    free(at);
    free(cursor);
    return rc;
}

/* One line per blocked rank (as many as fit, keeping room for the cycle),
 * then the cycle. */
static int report(checker *c)
{
    int rc = -1, blocked = 0, shown = 0, found = 0;
    char cyc[LINE_CAP], line[LINE_CAP];
    sbuf cb, lb;
    sb_init(&cb, cyc, sizeof cyc);
    for (int r = 0; r < c->W; r++)
        blocked += c->state[r] != ST_DONE;
    if (find_cycle(c, &cb, &found) < 0) {
        sb_printf(c->out, "error: out of memory");
        goto out;
    }
    if (!found)
        sb_printf(&cb, "  no cycle: every chain of waits ends at a rank that finished or never "
                       "issues the matching operation");
    sb_printf(c->out, "deadlock: %d of %d ranks cannot finish\n", blocked, c->W);
    for (int r = 0; r < c->W; r++) {
        if (c->state[r] == ST_DONE)
            continue;
        sb_init(&lb, line, sizeof line);
        sb_printf(&lb, "  ");
        fmt_at(&lb, c, r, c->pc[r]);
        sb_printf(&lb, ": ");
        if (c->state[r] == ST_P2P)
            explain_p2p(&lb, c, r);
        else
            explain_coll(&lb, c, r);
        /* room for this line, "  ... and N more blocked ranks" and the cycle */
        if (shown < MAX_LINES && c->out->len + lb.len + 1 + 48 + cb.len < c->out->cap) {
            sb_printf(c->out, "%s\n", line);
            shown++;
        }
    }
    if (shown < blocked)
        sb_printf(c->out, "  ... %d blocked rank%s not listed\n", blocked - shown,
                  blocked - shown == 1 ? "" : "s");
    sb_printf(c->out, "%s", cyc);
    rc = 0;
out:
    return rc;
}

/* ------------------------------------------------------------------ API */

int pp_comm_check(const pp_plan *plans, int W, char *msg, size_t msglen)
{
    int rc = -1;
    size_t total = 0, gtotal = 0;
    sbuf out;
    checker c;
    memset(&c, 0, sizeof c);
    sb_init(&out, msg, msglen);
    c.out = &out;
    c.plans = plans;
    c.W = W;
    if (W < 0 || (W > 0 && !plans)) {
        sb_printf(&out, "invalid: no plans (world %d)", W);
        goto out;
    }
    for (int r = 0; r < W; r++) {
        total += plans[r].ninstr;
        gtotal += plans[r].ngroups;
        if (plans[r].ngroups > c.G)
            c.G = plans[r].ngroups;
    }
    size_t w1 = (size_t)W + 1;
    c.pc = calloc(w1, sizeof *c.pc);
    c.state = calloc(w1, sizeof *c.state);
    c.base = calloc(w1, sizeof *c.base);
    c.seq = calloc(total + 1, sizeof *c.seq);
    c.work = calloc(w1, sizeof *c.work);
    c.queued = calloc(w1, sizeof *c.queued);
    c.arrived = calloc((size_t)c.G * PP_TENSOR_LANES + 1, sizeof *c.arrived);
    c.first = calloc((size_t)c.G * PP_TENSOR_LANES + 1, sizeof *c.first);
    c.gbase = calloc(w1, sizeof *c.gbase);
    c.gok = calloc(gtotal + 1, sizeof *c.gok);
    if (!c.pc || !c.state || !c.base || !c.seq || !c.work || !c.queued || !c.arrived || !c.first ||
        !c.gbase || !c.gok) {
        sb_printf(&out, "error: out of memory");
        goto out;
    }
    for (int r = 0; r < W; r++) {
        c.base[r + 1] = c.base[r] + plans[r].ninstr;
        c.gbase[r + 1] = c.gbase[r] + plans[r].ngroups;
    }
    if (validate(&c) < 0 || number(&c) < 0 || replay(&c) < 0)
        goto out;
    for (int r = 0; r < W; r++)
        if (c.state[r] != ST_DONE) {
            report(&c);
            goto out;
        }
    sb_printf(&out, "ok");
    rc = 0;
out:
    free(c.pc);
    free(c.state);
    free(c.base);
    free(c.seq);
    free(c.work);
    free(c.queued);
    free(c.arrived);
    free(c.first);
    free(c.gbase);
    free(c.gok);
    return rc;
}
