/* lower.c - per-rank instruction streams and static slot allocation (see lower.h).
 *
 * Each rank's stream is built from items sorted by simulated time: its jobs
 * (at their start) and its side of every transfer. Both sides of a transfer
 * carry the same key, (time, kind, stage, microbatch, direction, sender,
 * receiver), and every rank sorts by it, so all ranks meet their transfers in
 * one global order: the smallest unfinished transfer always has both sides
 * ready, which is why no plan can hang even when a send blocks until its
 * receive is posted (NCCL's rule). A transfer's time is when its receiver
 * wants it, hoisted --prefetch jobs earlier but never before its producer
 * ends, so the sender always has the data. */
#include "lower.h"
#include "transfer_groups.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/model.h"

/* A logical buffer before slot assignment. */
typedef struct {
    uint64_t bytes;
    int def;      /* instruction that writes it */
    int last_use; /* last instruction that needs it */
    int end;      /* last_use, or the end of the transfer group holding it (assign_slots) */
} lbuf;

/* One thing a rank does, before sorting into its stream. */
enum { IT_RECV_ACT, IT_SEND_ACT, IT_RECV_GRAD, IT_SEND_GRAD, IT_FETCH, IT_SEND_WEIGHTS,
       IT_SEND_WGRAD, IT_RECV_WGRAD, IT_JOB };
typedef struct {
    double t;
    int pair;        /* transfer kind shared by both sides (0 act, 1 grad, 2 weights,
                      * 4 weight gradients); 3 jobs */
    int s, b, d;     /* the producing job (transfers of data), or the fetching job */
    int src, dst;    /* ranks */
    int what;        /* IT_* on this rank */
    int job;         /* the job (IT_JOB), or the job that consumes the transfer */
} item;

typedef struct {
    pp_instr *code;
    int n, cap;
    lbuf *buf;
    int nbuf, bufcap;
} stream;

typedef struct {
    const pp_jobtable *t;
    const pp_sim_result *sim;
    const pp_model *m;
    pp_diag *d;
    int rank;
    stream st;
    /* per (s,b) logical buffers on this rank, -1 if none */
    int *tokens;   /* [B] */
    int *out;      /* [S*B] F(s,b)'s output */
    int *stash;    /* [S*B] */
    int *din;      /* [S*B] B(s,b)'s input gradient */
    int *wts;      /* [N] fetched weights of the job */
    int *held;     /* [S] the fetched weights the rank's last job of the stage read */
    int *wgrad;    /* [S] this rank's gradient accumulator for a stage it does not own */
    int prefetch;  /* hoist receives and fetches this many jobs ahead */
    const struct ownership *own;
} lowering;

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int new_buf(lowering *L, uint64_t bytes)
{
    stream *st = &L->st;
    if (grow((void **)&st->buf, &st->bufcap, st->nbuf + 1, sizeof *st->buf))
        return -1;
    st->buf[st->nbuf] = (lbuf){bytes, -1, -1, -1};
    return st->nbuf++;
}

/* Append an instruction with no slot operands yet (slot() sets them by
 * role); slot fields hold logical buffer ids until assign_slots. */
static int emit(lowering *L, int op, int s, int b, int peer, int group)
{
    stream *st = &L->st;
    if (grow((void **)&st->code, &st->cap, st->n + 1, sizeof *st->code))
        return -1;
    pp_instr *in = &st->code[st->n];
    in->op = (uint8_t)op;
    in->stage = s;
    in->mb = b;
    in->peer = peer;
    in->group = group;
    for (int i = 0; i < PP_MAX_SLOTS; i++)
        in->slot[i] = -1;
    return st->n++;
}

/* Sets instruction `at`'s operand of role r to buffer buf; returns buf. */
static int slot(lowering *L, int at, pp_role r, int buf)
{
    if (at >= 0)
        pp_set_slot(&L->st.code[at], r, buf);
    return buf;
}

static void use(lowering *L, int buf, int at)
{
    if (buf >= 0 && L->st.buf[buf].last_use < at)
        L->st.buf[buf].last_use = at;
}

static int sb(const lowering *L, int s, int b) { return s * L->t->js.B + b; }

static int worker_of(const lowering *L, int s, int b, int d)
{
    return L->t->worker[job_id(&L->t->js, s, b, d)];
}

static int tokens_for(lowering *L, int b)
{
    if (L->tokens[b] < 0) {
        int buf = new_buf(L, pp_tokens_bytes(L->m));
        int at = emit(L, PP_OP_LoadMicroBatch, -1, b, -1, -1);
        slot(L, at, PP_ROLE_TOKENS, buf);
        if (buf < 0 || at < 0)
            return -1;
        L->st.buf[buf].def = at;
        L->tokens[b] = buf;
    }
    return L->tokens[b];
}

/* A receive (or fetch) into a new buffer of `bytes`. Returns the buffer. */
static int recv_into(lowering *L, int op, int s, int b, int peer, uint64_t bytes)
{
    int buf = new_buf(L, bytes);
    int at = emit(L, op, s, b, peer, -1);
    slot(L, at, pp_op(op)->slot[0].role, buf); /* its one slot: dst, wts or tmp */
    if (buf < 0 || at < 0)
        return -1;
    L->st.buf[buf].def = at;
    return buf;
}

static int send_from(lowering *L, int op, int s, int b, int peer, int buf)
{
    int at = emit(L, op, s, b, peer, -1);
    slot(L, at, pp_op(op)->slot[0].role, buf); /* its one slot: src or wgrad */
    if (at < 0)
        return -1;
    use(L, buf, at);
    return 0;
}

static int owns_stage(const lowering *L, int s, int w);

/* The accumulator for a stage this rank computes weight gradients of but
 * does not own: cleared before the first use, sent to the owner at the end.
 * -1: the rank owns the stage (it accumulates into its own gradients) or
 * the stage has no weights (there is nothing to accumulate);
 * -2: out of memory. */
static int wgrad_for(lowering *L, int s)
{
    if (owns_stage(L, s, L->rank) || L->t->wbytes[s] == 0)
        return -1;
    if (L->wgrad[s] < 0) { /* weight gradients are fp32 in every precision */
        int buf = new_buf(L, L->t->wbytes[s]);
        int at = emit(L, PP_OP_ZeroGrads, s, -1, -1, -1);
        slot(L, at, PP_ROLE_WGRAD, buf);
        if (buf < 0 || at < 0)
            return -2;
        L->st.buf[buf].def = at;
        L->wgrad[s] = buf;
    }
    return L->wgrad[s];
}

/* The weights job j reads: -1 for its own stage's (params); its fetch; or,
 * for a kept job (keep.h), the buffer the rank's previous job of the stage
 * read, which stays live until this job. */
static int weights_buffer(lowering *L, int j)
{
    const pp_jobtable *t = L->t;
    int s = job_s(&t->js, j);
    if (!pp_job_reads_remote_weights(t, j))
        return -1;
    if (pp_job_fetches(t, j))
        L->held[s] = L->wts[j];
    return L->held[s];
}

static int lower_forward(lowering *L, int j)
{
    const pp_jobtable *t = L->t;
    int S = t->js.S, s = job_s(&t->js, j), b = job_b(&t->js, j), in, tgt = -1, out = -1;
    in = s == 0 ? tokens_for(L, b) : L->out[sb(L, s - 1, b)];
    if (s == S - 1)
        tgt = tokens_for(L, b);
    int split = t->js.ND == 3;
    int stash = new_buf(L, split ? pp_stage_stash_bytes_split(L->m, S, s)
                                 : pp_stage_stash_bytes(L->m, S, s));
    if (s < S - 1)
        out = new_buf(L, pp_act_bytes(L->m));
    int wts = weights_buffer(L, j);
    int at = emit(L, PP_OP_Forward, s, b, -1, -1);
    slot(L, at, PP_ROLE_IN, in);
    slot(L, at, PP_ROLE_STASH, stash);
    slot(L, at, PP_ROLE_OUT, out);
    slot(L, at, PP_ROLE_TGT, tgt);
    slot(L, at, PP_ROLE_WTS, wts);
    if (in < 0 || stash < 0 || at < 0)
        return -1;
    use(L, in, at);
    use(L, tgt, at);
    use(L, wts, at);
    L->st.buf[stash].def = at;
    L->stash[sb(L, s, b)] = stash;
    if (out >= 0) {
        L->st.buf[out].def = at;
        L->out[sb(L, s, b)] = out;
    }
    return 0;
}

static int lower_backward(lowering *L, int j)
{
    const pp_jobtable *t = L->t;
    int S = t->js.S, s = job_s(&t->js, j), b = job_b(&t->js, j), me = L->rank, dout = -1, din = -1;
    if (worker_of(L, s, b, 0) != me) {
        diag_error_noloc(L->d,
                         "B(%d,%d) runs on worker %d but F(%d,%d) ran on worker %d: a job's "
                         "forward and backward must run on the same worker (its stash is local)",
                         s, b, me, s, b, worker_of(L, s, b, 0));
        return 1;
    }
    if (s < S - 1)
        dout = L->din[sb(L, s + 1, b)];
    if (s > 0)
        din = new_buf(L, pp_act_bytes(L->m));
    int split = t->js.ND == 3;
    int stash = L->stash[sb(L, s, b)], wts = weights_buffer(L, j);
    int wgrad = split ? -1 : wgrad_for(L, s);
    if (wgrad == -2)
        return -1;
    int at = emit(L, split ? PP_OP_BackwardInput : PP_OP_Backward, s, b, -1, -1);
    slot(L, at, PP_ROLE_STASH, stash);
    slot(L, at, PP_ROLE_DOUT, dout);
    slot(L, at, PP_ROLE_DIN, din);
    slot(L, at, PP_ROLE_WTS, wts);
    slot(L, at, PP_ROLE_WGRAD, wgrad); /* BackwardInput has none: W accumulates */
    if (at < 0)
        return -1;
    use(L, stash, at);
    use(L, dout, at);
    use(L, wts, at);
    use(L, wgrad, at);
    if (din >= 0) {
        L->st.buf[din].def = at;
        L->din[sb(L, s, b)] = din;
    }
    return 0;
}

/* W(s,b) of a split backward: the weight gradients from what B left in the
 * stash, which dies here. It reads no weights. */
static int lower_weight(lowering *L, int j)
{
    int s = job_s(&L->t->js, j), b = job_b(&L->t->js, j);
    if (worker_of(L, s, b, 1) != L->rank) {
        diag_error_noloc(L->d,
                         "W(%d,%d) runs on worker %d but B(%d,%d) ran on worker %d: a split "
                         "backward's two halves must run on the same worker (they share a stash)",
                         s, b, L->rank, s, b, worker_of(L, s, b, 1));
        return 1;
    }
    int stash = L->stash[sb(L, s, b)], wgrad = wgrad_for(L, s);
    if (wgrad == -2)
        return -1;
    int at = emit(L, PP_OP_BackwardWeight, s, b, -1, -1);
    slot(L, at, PP_ROLE_STASH, stash);
    slot(L, at, PP_ROLE_WGRAD, wgrad);
    if (at < 0)
        return -1;
    use(L, stash, at);
    use(L, wgrad, at);
    return 0;
}

static const stream *sort_stream; /* qsort has no context argument */
static int cmp_end(const void *a, const void *b)
{
    int x = sort_stream->buf[*(const int *)a].end, y = sort_stream->buf[*(const int *)b].end;
    return x != y ? (x < y ? -1 : 1) : *(const int *)a - *(const int *)b;
}

static void sort_by_end(const stream *st, int *idx)
{
    for (int k = 0; k < st->nbuf; k++)
        idx[k] = k;
    sort_stream = st;
    qsort(idx, (size_t)st->nbuf, sizeof *idx, cmp_end);
}

/* Linear-scan slot assignment by one policy: fills slot_of[buffer] and
 * sizes[slot], returns the number of slots. Slots freed before instruction
 * i are those whose buffer's end is before the start of i's transfer group
 * (i itself when it is in none), so an instruction's inputs and outputs
 * never share, and neither do the members of one group, which run
 * concurrently (transfer_groups.h).
 * run_first[i] is the first instruction of i's group, or i.
 *   exact: a buffer takes a free slot of exactly its size, or a new one;
 *   grow:  a buffer takes the free slot that grows least to hold it
 *          (ties: the one it wastes least of), or a new one if none is free.
 * Exact sizes suit streams of a few sizes used in turn (a pipeline's
 * activations and stashes); growing lets different sizes share (a bf16
 * weight fetch, then the fp32 gradients of the same stage, twice its
 * size). `by_end` orders the buffers by last use; freelist is scratch. */
static int scan_slots(const stream *st, const int *by_end, const int *run_first, int grow,
                      int *slot_of, uint64_t *sizes, int *freelist)
{
    int nfree = 0, nslots = 0, e = 0;
    for (int k = 0; k < st->nbuf; k++)
        slot_of[k] = -1;
    for (int i = 0; i < st->n; i++) {
        while (e < st->nbuf && st->buf[by_end[e]].end < run_first[i]) {
            if (slot_of[by_end[e]] >= 0)
                freelist[nfree++] = slot_of[by_end[e]];
            e++;
        }
        for (int k = 0; k < PP_MAX_SLOTS; k++) {
            int b = st->code[i].slot[k];
            if (b < 0 || st->buf[b].def != i || slot_of[b] >= 0)
                continue;
            uint64_t want = st->buf[b].bytes;
            int best = -1;
            uint64_t best_grow = 0, best_waste = 0;
            for (int f = 0; f < nfree; f++) {
                uint64_t have = sizes[freelist[f]];
                if (!grow && have != want)
                    continue;
                uint64_t g = want > have ? want - have : 0, w = have > want ? have - want : 0;
                if (best < 0 || g < best_grow || (g == best_grow && w < best_waste)) {
                    best = f;
                    best_grow = g;
                    best_waste = w;
                }
            }
            if (best >= 0) {
                slot_of[b] = freelist[best];
                if (sizes[slot_of[b]] < want)
                    sizes[slot_of[b]] = want;
                freelist[best] = freelist[--nfree];
            } else {
                sizes[nslots] = want;
                slot_of[b] = nslots++;
            }
        }
    }
    return nslots;
}

static uint64_t total_bytes(const uint64_t *sizes, int n)
{
    uint64_t t = 0;
    for (int k = 0; k < n; k++)
        t += sizes[k];
    return t;
}

/* Slots for the stream's buffers: both policies of scan_slots, keeping the
 * one that allocates fewer bytes (exact on a tie, so a stream of one size
 * per role keeps slots of exactly its roles' sizes). Rewrites the stream's
 * buffer operands into slot numbers. */
static int assign_slots(stream *st, uint32_t rank, pp_plan *p)
{
    size_t n = (size_t)st->nbuf + 1;
    int *slot_of[2] = {malloc(n * sizeof(int)), malloc(n * sizeof(int))};
    uint64_t *sizes[2] = {malloc(n * sizeof(uint64_t)), malloc(n * sizeof(uint64_t))};
    int *freelist = malloc(n * sizeof *freelist);
    /* buffers ordered by last use, to free them as the scan passes */
    int *by_end = malloc(n * sizeof *by_end);
    /* the transfer groups pp_group_transfers will make, by instruction */
    int *run_first = malloc(((size_t)st->n + 1) * sizeof *run_first);
    int *run_last = malloc(((size_t)st->n + 1) * sizeof *run_last);
    int nslots[2], rc = -1;
    if (!slot_of[0] || !slot_of[1] || !sizes[0] || !sizes[1] || !freelist || !by_end ||
        !run_first || !run_last)
        goto out;
    pp_transfer_runs(st->code, (uint32_t)st->n, rank, run_first, run_last);
    for (int k = 0; k < st->nbuf; k++) {
        if (st->buf[k].last_use < st->buf[k].def)
            st->buf[k].last_use = st->buf[k].def;
        st->buf[k].end = run_last[st->buf[k].last_use];
    }
    sort_by_end(st, by_end);
    for (int grow = 0; grow < 2; grow++)
        nslots[grow] =
            scan_slots(st, by_end, run_first, grow, slot_of[grow], sizes[grow], freelist);
    int pick = total_bytes(sizes[1], nslots[1]) < total_bytes(sizes[0], nslots[0]);
    for (int i = 0; i < st->n; i++)
        for (int k = 0; k < PP_MAX_SLOTS; k++)
            if (st->code[i].slot[k] >= 0)
                st->code[i].slot[k] = slot_of[pick][st->code[i].slot[k]];
    p->nslots = (uint32_t)nslots[pick];
    p->slot_bytes = malloc(((size_t)nslots[pick] + 1) * sizeof *p->slot_bytes);
    if (!p->slot_bytes)
        goto out;
    memcpy(p->slot_bytes, sizes[pick], (size_t)nslots[pick] * sizeof *p->slot_bytes);
    rc = 0;
out:
    free(run_last);
    free(run_first);
    free(by_end);
    free(freelist);
    for (int k = 0; k < 2; k++) {
        free(sizes[k]);
        free(slot_of[k]);
    }
    return rc;
}

/* Owners of each stage as a sorted member list; stages with several owners
 * get a group (replica sets that are equal share one group). */
typedef struct ownership {
    int *nowners;   /* [S] */
    int **owners;   /* [S][nowners] ascending */
    int *group_of;  /* [S] group index or -1 */
    pp_group *groups;
    int ngroups;
} ownership;

static int build_ownership(const pp_jobtable *t, ownership *o)
{
    int S = t->js.S, W = t->W, N = job_count(&t->js);
    memset(o, 0, sizeof *o);
    o->nowners = calloc((size_t)S, sizeof *o->nowners);
    o->owners = calloc((size_t)S, sizeof *o->owners);
    o->group_of = malloc((size_t)S * sizeof *o->group_of);
    o->groups = calloc((size_t)S, sizeof *o->groups);
    char *mark = calloc((size_t)S * (size_t)W, 1);
    if (!o->nowners || !o->owners || !o->group_of || !o->groups || !mark) {
        free(mark);
        return -1;
    }
    for (int j = 0; j < N; j++)
        mark[(size_t)job_s(&t->js, j) * (size_t)W + (size_t)t->owner[j]] = 1;
    for (int s = 0; s < S; s++) {
        o->owners[s] = malloc((size_t)W * sizeof(int));
        if (!o->owners[s]) {
            free(mark);
            return -1;
        }
        for (int w = 0; w < W; w++)
            if (mark[(size_t)s * (size_t)W + (size_t)w])
                o->owners[s][o->nowners[s]++] = w;
        o->group_of[s] = -1;
        if (o->nowners[s] < 2)
            continue;
        for (int g = 0; g < o->ngroups && o->group_of[s] < 0; g++)
            if ((int)o->groups[g].n == o->nowners[s] &&
                !memcmp(o->groups[g].member, o->owners[s], (size_t)o->nowners[s] * sizeof(int)))
                o->group_of[s] = g;
        if (o->group_of[s] < 0) {
            pp_group *g = &o->groups[o->ngroups];
            g->n = (uint32_t)o->nowners[s];
            g->member = malloc(g->n * sizeof *g->member);
            if (!g->member) {
                free(mark);
                return -1;
            }
            for (uint32_t i = 0; i < g->n; i++)
                g->member[i] = (uint32_t)o->owners[s][i];
            o->group_of[s] = o->ngroups++;
        }
    }
    free(mark);
    return 0;
}

static void free_ownership(ownership *o, int S)
{
    for (int s = 0; o->owners && s < S; s++)
        free(o->owners[s]);
    for (int g = 0; o->groups && g < o->ngroups; g++)
        free(o->groups[g].member);
    free(o->owners);
    free(o->nowners);
    free(o->group_of);
    free(o->groups);
}

static int owns(const ownership *o, int s, int w)
{
    for (int i = 0; i < o->nowners[s]; i++)
        if (o->owners[s][i] == w)
            return 1;
    return 0;
}

static int copy_groups(const ownership *o, pp_plan *p)
{
    p->ngroups = (uint32_t)o->ngroups;
    p->groups = calloc((size_t)o->ngroups + 1, sizeof *p->groups);
    if (!p->groups)
        return -1;
    for (int g = 0; g < o->ngroups; g++) {
        p->groups[g].n = o->groups[g].n;
        p->groups[g].member = malloc(o->groups[g].n * sizeof(uint32_t));
        if (!p->groups[g].member)
            return -1;
        memcpy(p->groups[g].member, o->groups[g].member, o->groups[g].n * sizeof(uint32_t));
    }
    return 0;
}

static int owns_stage(const lowering *L, int s, int w) { return owns(L->own, s, w); }

static int cmp_item(const item *x, const item *y)
{
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
#define CMP_FIELD(f)                                                                               \
    if (x->f != y->f)                                                                              \
        return x->f < y->f ? -1 : 1;
    CMP_FIELD(pair)
    CMP_FIELD(s)
    CMP_FIELD(b)
    CMP_FIELD(d)
    CMP_FIELD(src)
    CMP_FIELD(dst)
    CMP_FIELD(what)
#undef CMP_FIELD
    return 0;
}

/* Items grouped by rank: the rank they belong to is the first key. */
typedef struct {
    int rank;
    item it;
} ranked_item;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked_item *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return cmp_item(&x->it, &y->it);
}

/* Where each rank returns the weight gradients of a stage it computes them
 * for without owning it: to[s*W + r], the owner its first such job names
 * (-1: none), once last[s*W + r], the last such job in its order, ends. */
typedef struct {
    int *to, *last;
} gradient_returns;

static int build_returns(const pp_jobtable *t, const pp_sim_result *sim, const ownership *o,
                         gradient_returns *g)
{
    const pp_jobspace *js = &t->js;
    size_t SW = (size_t)js->S * (size_t)t->W;
    g->to = malloc(SW * sizeof *g->to + 1);
    g->last = malloc(SW * sizeof *g->last + 1);
    if (!g->to || !g->last)
        return -1;
    for (size_t i = 0; i < SW; i++)
        g->to[i] = g->last[i] = -1;
    for (int w = 0; w < t->W; w++)
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++) {
            int j = sim->order[k], s = job_s(js, j), d = job_d(js, j);
            size_t i = (size_t)s * t->W + (size_t)w;
            if (!(d == DIR_W || (d == DIR_B && js->ND == 2)) || owns(o, s, w) ||
                t->wbytes[s] == 0)
                continue; /* makes no weight gradient, or keeps it */
            if (g->to[i] < 0)
                g->to[i] = t->owner[j];
            g->last[i] = j;
        }
    return 0;
}

/* Every rank's items: jobs at their start; both sides of every activation
 * and gradient transfer and of every weight fetch at the transfer's key;
 * both sides of every weight-gradient return when the sender's last job
 * that adds to it ends, so the accumulator lives no longer than it must. */
static ranked_item *build_items(const pp_jobtable *t, const pp_sim_result *sim, int prefetch,
                                const gradient_returns *g, int *count)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js), n = 0;
    size_t SW = (size_t)js->S * (size_t)t->W;
    int *pos = malloc((size_t)N * sizeof *pos);
    ranked_item *it = malloc(((size_t)N * 5 + 2 * SW) * sizeof *it + 1);
    if (!pos || !it) {
        free(pos);
        free(it);
        return NULL;
    }
    for (int w = 0; w < t->W; w++)
        for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
            pos[sim->order[k]] = k;
    for (int j = 0; j < N; j++) {
        int w = t->worker[j], s = job_s(js, j), b = job_b(js, j), d = job_d(js, j);
        int early = pos[j] - prefetch < sim->off[w] ? sim->off[w] : pos[j] - prefetch;
        double want = sim->start[sim->order[early]]; /* when the receiver posts it */
        it[n++] = (ranked_item){w, {sim->start[j], 3, s, b, d, w, w, IT_JOB, j}};
        int p = job_pred(js, j);
        if (p >= 0 && t->worker[p] != w && d != DIR_W) {
            int grad = d == DIR_B, src = t->worker[p];
            double key = want > sim->end[p] ? want : sim->end[p];
            item x = {key, grad, job_s(js, p), b, job_d(js, p), src, w, 0, j};
            x.what = grad ? IT_SEND_GRAD : IT_SEND_ACT;
            it[n++] = (ranked_item){src, x};
            x.what = grad ? IT_RECV_GRAD : IT_RECV_ACT;
            it[n++] = (ranked_item){w, x};
        }
        if (pp_job_fetches(t, j)) {
            item x = {want, 2, s, b, d, t->owner[j], w, IT_SEND_WEIGHTS, j};
            it[n++] = (ranked_item){t->owner[j], x};
            x.what = IT_FETCH;
            it[n++] = (ranked_item){w, x};
        }
    }
    for (size_t i = 0; i < SW; i++) {
        if (g->to[i] < 0)
            continue;
        int s = (int)(i / (size_t)t->W), r = (int)(i % (size_t)t->W), last = g->last[i];
        item x = {sim->end[last], 4, s, -1, -1, r, g->to[i], IT_SEND_WGRAD, last};
        it[n++] = (ranked_item){r, x};
        x.what = IT_RECV_WGRAD;
        it[n++] = (ranked_item){g->to[i], x};
    }
    free(pos);
    qsort(it, (size_t)n, sizeof *it, cmp_ranked);
    *count = n;
    return it;
}

static int lower_item(lowering *L, const item *x)
{
    const pp_jobtable *t = L->t;
    uint64_t act = pp_act_bytes(L->m);
    int buf;
    switch (x->what) {
    case IT_JOB: {
        int d = job_d(&t->js, x->job);
        return d == DIR_F ? lower_forward(L, x->job)
             : d == DIR_B ? lower_backward(L, x->job)
                          : lower_weight(L, x->job);
    }
    case IT_RECV_ACT:
        buf = recv_into(L, PP_OP_RecvActivation, x->s, x->b, x->src, act);
        L->out[sb(L, x->s, x->b)] = buf;
        return buf < 0 ? -1 : 0;
    case IT_RECV_GRAD:
        buf = recv_into(L, PP_OP_RecvGrad, x->s, x->b, x->src, act);
        L->din[sb(L, x->s, x->b)] = buf;
        return buf < 0 ? -1 : 0;
    case IT_SEND_ACT:
        return send_from(L, PP_OP_SendActivation, x->s, x->b, x->dst, L->out[sb(L, x->s, x->b)]);
    case IT_SEND_GRAD:
        return send_from(L, PP_OP_SendGrad, x->s, x->b, x->dst, L->din[sb(L, x->s, x->b)]);
    case IT_FETCH: /* the owner's compute copy: half the fp32 bytes with bf16 */
        buf = recv_into(L, PP_OP_FetchWeights, x->s, -1, x->src, t->cbytes[x->s]);
        L->wts[x->job] = buf;
        return buf < 0 ? -1 : 0;
    case IT_SEND_WEIGHTS:
        return emit(L, PP_OP_SendWeights, x->s, -1, x->dst, -1) < 0 ? -1 : 0;
    case IT_SEND_WGRAD:
        return send_from(L, PP_OP_SendWeightGrad, x->s, -1, x->dst, L->wgrad[x->s]);
    case IT_RECV_WGRAD: /* RecvWeightGrad adds the (fp32) temporary into the owner's gradients */
        buf = recv_into(L, PP_OP_RecvWeightGrad, x->s, -1, x->src, t->wbytes[x->s]);
        if (buf < 0)
            return -1;
        use(L, buf, L->st.n - 1);
        return 0;
    }
    return 0;
}

/* The end of the step, in one order on every rank (every weight gradient
 * has reached its owner by now): per stage, the replicas' all-reduce; then
 * every owner's optimizer step. */
static int lower_epilogue(lowering *L)
{
    const pp_jobtable *t = L->t;
    const ownership *o = L->own;
    int S = t->js.S, me = L->rank;
    for (int s = 0; s < S; s++) {
        if (o->group_of[s] >= 0 && owns(o, s, me) &&
            emit(L, PP_OP_ReduceGrads, s, -1, -1, o->group_of[s]) < 0)
            return -1;
    }
    for (int s = 0; s < S; s++)
        if (owns(o, s, me) && emit(L, PP_OP_OptimizerStep, s, -1, -1, -1) < 0)
            return -1;
    return 0;
}

static int lower_rank(lowering *L, const ranked_item *items, int nitems, pp_plan *p)
{
    const pp_jobtable *t = L->t;
    const pp_sim_result *sim = L->sim;
    int S = t->js.S, B = t->js.B, w = L->rank, rc;
    memset(&L->st, 0, sizeof L->st);
    for (int i = 0; i < B; i++)
        L->tokens[i] = -1;
    for (int i = 0; i < S * B; i++)
        L->out[i] = L->stash[i] = L->din[i] = -1;
    for (int i = 0; i < S; i++)
        L->wgrad[i] = L->held[i] = -1;
    for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
        L->wts[sim->order[k]] = -1;
    for (int i = 0; i < nitems; i++)
        if ((rc = lower_item(L, &items[i].it)) != 0)
            return rc;
    if (lower_epilogue(L))
        return -1;
    if (assign_slots(&L->st, (uint32_t)w, p))
        return -1;
    p->ninstr = (uint32_t)L->st.n;
    p->code = L->st.code;
    L->st.code = NULL;
    if (pp_group_transfers(p))
        return -1;
    p->stage_role = calloc((size_t)S, 1);
    if (!p->stage_role)
        return -1;
    for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
        p->stage_role[job_s(&t->js, sim->order[k])] |= PP_ROLE_COMPUTE;
    for (int s = 0; s < S; s++) {
        if (owns(L->own, s, w))
            p->stage_role[s] |= PP_ROLE_OWNER;
        /* one workspace, large enough for every stage the rank runs */
        uint64_t work = pp_stage_workspace_bytes(L->m, S, s);
        if ((p->stage_role[s] & PP_ROLE_COMPUTE) && work > p->workspace_bytes)
            p->workspace_bytes = work;
    }
    return copy_groups(L->own, p);
}

/* The plan id: a hash of everything every rank's file says except its rank
 * (every header field, the group table, every operand of every
 * instruction), so all ranks of one compile share it and any other compile
 * differs. */
uint64_t pp_plans_id(const pp_plan *plans, int W)
{
    uint64_t h = PP_FNV_OFFSET;
    for (int r = 0; r < W; r++) {
        const pp_plan *p = &plans[r];
        h = pp_fnv1a64(h, &p->world, sizeof p->world);
        h = pp_fnv1a64(h, &p->S, sizeof p->S);
        h = pp_fnv1a64(h, &p->B, sizeof p->B);
        h = pp_fnv1a64(h, &p->model, sizeof p->model);
        h = pp_fnv1a64(h, p->stage_role, p->S);
        h = pp_fnv1a64(h, &p->nslots, sizeof p->nslots);
        h = pp_fnv1a64(h, p->slot_bytes, p->nslots * sizeof *p->slot_bytes);
        h = pp_fnv1a64(h, &p->workspace_bytes, sizeof p->workspace_bytes);
        h = pp_fnv1a64(h, &p->ngroups, sizeof p->ngroups);
        for (uint32_t g = 0; g < p->ngroups; g++) {
            h = pp_fnv1a64(h, &p->groups[g].n, sizeof p->groups[g].n);
            h = pp_fnv1a64(h, p->groups[g].member, p->groups[g].n * sizeof *p->groups[g].member);
        }
        h = pp_fnv1a64(h, &p->ninstr, sizeof p->ninstr);
        for (uint32_t i = 0; i < p->ninstr; i++) {
            const pp_instr *in = &p->code[i];
            int32_t f[5 + PP_MAX_SLOTS] = {in->op, in->stage, in->mb, in->peer, in->group};
            memcpy(f + 5, in->slot, sizeof in->slot);
            h = pp_fnv1a64(h, f, sizeof f);
        }
    }
    return h;
}

/* What an owner of stage s holds for it outside the slots: its fp32
 * weights, their gradients and the optimizer's state, and with precision
 * bf16 the bf16 compute copy its jobs read and its SendWeights send. */
static uint64_t owned_stage_bytes(const pp_model *m, int S, int s)
{
    uint64_t bytes =
        (2 + pp_optimizer_state_floats(m->optimizer)) * pp_stage_weight_bytes(m, S, s);
    if (m->precision == PP_PREC_BF16)
        bytes += pp_stage_compute_bytes(m, S, s);
    return bytes;
}

uint64_t pp_plan_memory(const pp_plan *p)
{
    uint64_t bytes = p->workspace_bytes;
    for (uint32_t k = 0; k < p->nslots; k++)
        bytes += p->slot_bytes[k];
    for (uint32_t s = 0; s < p->S; s++)
        if (p->stage_role[s] & PP_ROLE_OWNER)
            bytes += owned_stage_bytes(&p->model, (int)p->S, (int)s);
    return bytes;
}

/* --mem-limit: the first instruction at which the rank's memory (its own
 * stages' weights, gradients, optimizer state and bf16 copies, its
 * workspace, plus the slots allocated so far) exceeds the limit. Slots are
 * counted at their first definition, in order, each at its final size (the
 * largest buffer it holds, which may come later: slots can grow). */
static int check_mem_limit(const lowering *L, const pp_plan *p, uint64_t limit)
{
    const char *owned = L->m->precision == PP_PREC_BF16
                            ? "weights, gradients, optimizer state and bf16 copies"
                            : "weights, gradients and optimizer state";
    uint64_t own = 0, total;
    for (uint32_t s = 0; s < p->S; s++)
        if (p->stage_role[s] & PP_ROLE_OWNER)
            own += owned_stage_bytes(L->m, (int)p->S, (int)s);
    total = own + p->workspace_bytes;
    uint32_t seen = 0; /* slots are numbered in order of first definition */
    for (uint32_t i = 0; i < p->ninstr && total <= limit; i++)
        for (int k = 0; k < PP_MAX_SLOTS; k++) {
            int32_t sl = p->code[i].slot[k];
            if (sl >= 0 && (uint32_t)sl == seen) {
                total += p->slot_bytes[seen++];
                if (total > limit) {
                    const pp_instr *in = &p->code[i];
                    diag_error_noloc(L->d,
                                     "worker %d needs %llu bytes at instruction %u (%s, stage %d, "
                                     "microbatch %d), over --mem-limit %llu: %llu for its own "
                                     "stages' %s, %llu for its workspace, %llu in %u slot%s",
                                     L->rank, (unsigned long long)total, i, pp_op_name(in->op),
                                     in->stage, in->mb, (unsigned long long)limit,
                                     (unsigned long long)own, owned,
                                     (unsigned long long)p->workspace_bytes,
                                     (unsigned long long)(total - own - p->workspace_bytes),
                                     seen, seen == 1 ? "" : "s");
                    return 1;
                }
            }
        }
    if (own + p->workspace_bytes > limit) {
        diag_error_noloc(L->d,
                         "worker %d needs %llu bytes before its first instruction, over "
                         "--mem-limit %llu: %llu for its own stages' %s, %llu for its workspace",
                         L->rank, (unsigned long long)(own + p->workspace_bytes),
                         (unsigned long long)limit, (unsigned long long)own, owned,
                         (unsigned long long)p->workspace_bytes);
        return 1;
    }
    return 0;
}

int pp_lower(const pp_jobtable *t, const pp_sim_result *sim, const pp_model *m,
             const pp_lower_opts *opts, pp_diag *d, pp_plan *plans)
{
    int prefetch = opts->prefetch;
    int S = t->js.S, B = t->js.B, W = t->W, N = job_count(&t->js), errors = 0, nitems = 0;
    ownership o;
    lowering L = {.t = t, .sim = sim, .m = m, .d = d, .prefetch = prefetch, .own = &o};
    L.tokens = malloc((size_t)B * sizeof(int));
    L.out = malloc((size_t)S * B * sizeof(int));
    L.stash = malloc((size_t)S * B * sizeof(int));
    L.din = malloc((size_t)S * B * sizeof(int));
    L.wts = malloc((size_t)N * sizeof(int));
    L.wgrad = malloc((size_t)S * sizeof(int));
    L.held = malloc((size_t)S * sizeof(int));
    int own_rc = build_ownership(t, &o);
    gradient_returns g = {NULL, NULL};
    int ret_rc = own_rc ? -1 : build_returns(t, sim, &o, &g);
    ranked_item *items = ret_rc ? NULL : build_items(t, sim, prefetch, &g, &nitems);
    if (own_rc || ret_rc || !items || !L.tokens || !L.out || !L.stash || !L.din || !L.wts ||
        !L.wgrad || !L.held) {
        diag_error_noloc(d, "out of memory while lowering");
        errors = 1;
        goto out;
    }
    for (int w = 0, first = 0; w < W && !errors; w++) {
        int end = first;
        while (end < nitems && items[end].rank == w)
            end++;
        pp_plan *p = &plans[w];
        p->version = PP_PLAN_VERSION;
        p->rank = (uint32_t)w;
        p->world = (uint32_t)W;
        p->S = (uint32_t)S;
        p->B = (uint32_t)B;
        p->model = *m;
        L.rank = w;
        int rc = lower_rank(&L, items + first, end - first, p);
        free(L.st.code);
        free(L.st.buf);
        if (rc < 0)
            diag_error_noloc(d, "out of memory while lowering rank %d", w);
        if (!rc && opts->mem_limit && check_mem_limit(&L, p, opts->mem_limit))
            rc = 1;
        if (rc)
            errors = 1;
        first = end;
    }
    if (!errors) {
        uint64_t id = pp_plans_id(plans, W);
        for (int w = 0; w < W; w++)
            plans[w].plan_id = id;
    }
out:
    free_ownership(&o, S);
    free(g.to);
    free(g.last);
    free(items);
    free(L.wgrad);
    free(L.held);
    free(L.wts);
    free(L.din);
    free(L.stash);
    free(L.out);
    free(L.tokens);
    return errors;
}
