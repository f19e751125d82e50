/* lower.c - per-rank instruction streams and static slot allocation (see lower.h). */
#include "lower.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/model.h"

/* A logical buffer before slot assignment. */
typedef struct {
    uint64_t bytes;
    int def;      /* instruction that writes it */
    int last_use; /* last instruction that needs it */
    double release; /* sends: the receiver's job start; -1 otherwise */
} lbuf;

typedef struct {
    pp_instr *code;
    double *time; /* simulated time of each instruction */
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

/* Append an instruction; slot fields hold logical buffer ids here. */
static int emit(lowering *L, int op, int s, int b, int peer, int group, const int slots[4],
                double time)
{
    stream *st = &L->st;
    int cap = st->cap;
    if (grow((void **)&st->code, &cap, st->n + 1, sizeof *st->code))
        return -1;
    if (cap != st->cap) {
        double *t = realloc(st->time, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        st->time = t;
        st->cap = cap;
    }
    pp_instr *in = &st->code[st->n];
    in->op = (uint8_t)op;
    in->stage = s;
    in->mb = b;
    in->peer = peer;
    in->group = group;
    for (int i = 0; i < PP_MAX_SLOTS; i++)
        in->slot[i] = slots ? slots[i] : -1;
    st->time[st->n] = time;
    return st->n++;
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

static int tokens_for(lowering *L, int b, double time)
{
    if (L->tokens[b] < 0) {
        int buf = new_buf(L, pp_tokens_bytes(L->m));
        int sl[4] = {buf, -1, -1, -1};
        int at = emit(L, PP_OP_LoadMicroBatch, -1, b, -1, -1, sl, time);
        if (buf < 0 || at < 0)
            return -1;
        L->st.buf[buf].def = at;
        L->tokens[b] = buf;
    }
    return L->tokens[b];
}

static int lower_forward(lowering *L, int s, int b, double start, double end)
{
    const pp_jobtable *t = L->t;
    int S = t->js.S, me = L->rank, in, tgt = -1, out = -1;
    if (s == 0)
        in = tokens_for(L, b, start);
    else if (worker_of(L, s - 1, b, 0) == me)
        in = L->out[sb(L, s - 1, b)];
    else {
        in = new_buf(L, pp_act_bytes(L->m));
        int sl[4] = {in, -1, -1, -1};
        int at = emit(L, PP_OP_RecvActivation, s - 1, b, worker_of(L, s - 1, b, 0), -1, sl, start);
        if (in < 0 || at < 0)
            return -1;
        L->st.buf[in].def = at;
    }
    if (s == S - 1)
        tgt = tokens_for(L, b, start);
    int split = t->js.ND == 3;
    int stash = new_buf(L, split ? pp_stage_stash_bytes_split(L->m, S, s)
                                 : pp_stage_stash_bytes(L->m, S, s));
    if (s < S - 1)
        out = new_buf(L, pp_act_bytes(L->m));
    int sl[4] = {in, stash, out, tgt};
    int at = emit(L, PP_OP_Forward, s, b, -1, -1, sl, start);
    if (in < 0 || stash < 0 || at < 0)
        return -1;
    use(L, in, at);
    use(L, tgt, at);
    L->st.buf[stash].def = at;
    L->stash[sb(L, s, b)] = stash;
    if (out >= 0) {
        L->st.buf[out].def = at;
        L->out[sb(L, s, b)] = out;
        int next = worker_of(L, s + 1, b, 0);
        if (next != me) {
            int ss[4] = {out, -1, -1, -1};
            int snd = emit(L, PP_OP_SendActivation, s, b, next, -1, ss, end);
            if (snd < 0)
                return -1;
            use(L, out, snd);
            L->st.buf[out].release = L->sim->start[job_id(&t->js, s + 1, b, 0)];
        }
    }
    return 0;
}

static int lower_backward(lowering *L, int s, int b, double start, double end)
{
    const pp_jobtable *t = L->t;
    int S = t->js.S, me = L->rank, dout = -1, din = -1;
    if (worker_of(L, s, b, 0) != me) {
        diag_error_noloc(L->d,
                         "B(%d,%d) runs on worker %d but F(%d,%d) ran on worker %d: a job's "
                         "forward and backward must run on the same worker (its stash is local)",
                         s, b, me, s, b, worker_of(L, s, b, 0));
        return 1;
    }
    if (s < S - 1) {
        if (worker_of(L, s + 1, b, 1) == me)
            dout = L->din[sb(L, s + 1, b)];
        else {
            dout = new_buf(L, pp_act_bytes(L->m));
            int sl[4] = {dout, -1, -1, -1};
            int at = emit(L, PP_OP_RecvGrad, s + 1, b, worker_of(L, s + 1, b, 1), -1, sl, start);
            if (dout < 0 || at < 0)
                return -1;
            L->st.buf[dout].def = at;
        }
    }
    if (s > 0)
        din = new_buf(L, pp_act_bytes(L->m));
    int stash = L->stash[sb(L, s, b)];
    int sl[4] = {stash, dout, din, -1};
    int op = t->js.ND == 3 ? PP_OP_BackwardInput : PP_OP_Backward;
    int at = emit(L, op, s, b, -1, -1, sl, start);
    if (at < 0)
        return -1;
    use(L, stash, at);
    use(L, dout, at);
    if (din >= 0) {
        L->st.buf[din].def = at;
        L->din[sb(L, s, b)] = din;
        int prev = worker_of(L, s - 1, b, 1);
        if (prev != me) {
            int ss[4] = {din, -1, -1, -1};
            int snd = emit(L, PP_OP_SendGrad, s, b, prev, -1, ss, end);
            if (snd < 0)
                return -1;
            use(L, din, snd);
            L->st.buf[din].release = L->sim->start[job_id(&t->js, s - 1, b, 1)];
        }
    }
    return 0;
}

/* W(s,b) of a split backward: the weight gradients from what B left in the
 * stash, which dies here. */
static int lower_weight(lowering *L, int s, int b, double start)
{
    if (worker_of(L, s, b, 1) != L->rank) {
        diag_error_noloc(L->d,
                         "W(%d,%d) runs on worker %d but B(%d,%d) ran on worker %d: a split "
                         "backward's two halves must run on the same worker (they share a stash)",
                         s, b, L->rank, s, b, worker_of(L, s, b, 1));
        return 1;
    }
    int stash = L->stash[sb(L, s, b)];
    int sl[4] = {stash, -1, -1, -1};
    int at = emit(L, PP_OP_BackwardWeight, s, b, -1, -1, sl, start);
    if (at < 0)
        return -1;
    use(L, stash, at);
    return 0;
}

/* A send's buffer lives until the first later instruction of this rank that
 * the simulation places strictly after the receiver's job start. */
static void extend_sends(stream *st)
{
    for (int k = 0; k < st->nbuf; k++) {
        lbuf *bf = &st->buf[k];
        if (bf->release < 0)
            continue;
        int i = bf->last_use;
        while (i < st->n && st->time[i] <= bf->release)
            i++;
        bf->last_use = i; /* == n: live to the end of the step */
    }
}

static const stream *sort_stream; /* qsort has no context argument */
static int cmp_last_use(const void *a, const void *b)
{
    int x = sort_stream->buf[*(const int *)a].last_use, y = sort_stream->buf[*(const int *)b].last_use;
    return x != y ? (x < y ? -1 : 1) : *(const int *)a - *(const int *)b;
}

static void sort_by_last_use(const stream *st, int *idx)
{
    for (int k = 0; k < st->nbuf; k++)
        idx[k] = k;
    sort_stream = st;
    qsort(idx, (size_t)st->nbuf, sizeof *idx, cmp_last_use);
}

/* Linear-scan slot assignment: a buffer takes a free slot of its exact size
 * or a new one. Slots freed before instruction i are those whose buffer's
 * last use is before i, so an instruction's inputs and outputs never share. */
static int assign_slots(stream *st, pp_plan *p)
{
    int *slot_of = malloc((size_t)(st->nbuf + 1) * sizeof *slot_of);
    int *freelist = malloc((size_t)(st->nbuf + 1) * sizeof *freelist);
    uint64_t *sizes = malloc((size_t)(st->nbuf + 1) * sizeof *sizes);
    /* buffers ordered by last use, to free them as the scan passes */
    int *by_end = malloc((size_t)(st->nbuf + 1) * sizeof *by_end);
    int nfree = 0, nslots = 0, rc = -1;
    if (!slot_of || !freelist || !sizes || !by_end)
        goto out;
    for (int k = 0; k < st->nbuf; k++) {
        slot_of[k] = -1;
        if (st->buf[k].last_use < st->buf[k].def)
            st->buf[k].last_use = st->buf[k].def;
    }
    int nend = st->nbuf;
    sort_by_last_use(st, by_end);
    int e = 0;
    for (int i = 0; i < st->n; i++) {
        while (e < nend && st->buf[by_end[e]].last_use < i) {
            if (slot_of[by_end[e]] >= 0)
                freelist[nfree++] = slot_of[by_end[e]];
            e++;
        }
        for (int k = 0; k < PP_MAX_SLOTS; k++) {
            int b = st->code[i].slot[k];
            if (b < 0 || st->buf[b].def != i || slot_of[b] >= 0)
                continue;
            int f = 0;
            while (f < nfree && sizes[freelist[f]] != st->buf[b].bytes)
                f++;
            if (f < nfree) {
                slot_of[b] = freelist[f];
                freelist[f] = freelist[--nfree];
            } else {
                sizes[nslots] = st->buf[b].bytes;
                slot_of[b] = nslots++;
            }
        }
        for (int k = 0; k < PP_MAX_SLOTS; k++)
            if (st->code[i].slot[k] >= 0)
                st->code[i].slot[k] = slot_of[st->code[i].slot[k]];
    }
    p->nslots = (uint32_t)nslots;
    p->slot_bytes = malloc(((size_t)nslots + 1) * sizeof *p->slot_bytes);
    if (!p->slot_bytes)
        goto out;
    memcpy(p->slot_bytes, sizes, (size_t)nslots * sizeof *sizes);
    rc = 0;
out:
    free(by_end);
    free(sizes);
    free(freelist);
    free(slot_of);
    return rc;
}

/* Owners of each stage as a sorted member list; stages with several owners
 * get a group (replica sets that are equal share one group). */
typedef struct {
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

/* Weight fetching (a job computing away from its stage's owner) is lowered
 * by a later part of the compiler; until then say so precisely. */
static int check_no_fetch(const pp_jobtable *t, pp_diag *d)
{
    int N = job_count(&t->js);
    for (int j = 0; j < N; j++)
        if (t->worker[j] != t->owner[j]) {
            diag_error_noloc(d,
                             "job (s=%d, b=%d, d=%c) computes on worker %d but weights(s,b,d) = "
                             "%d: fetching weights from another worker is not supported by "
                             "this version of ppc (it lowers schedules with compute == weights)",
                             job_s(&t->js, j), job_b(&t->js, j), dir_char(job_d(&t->js, j)),
                             t->worker[j], t->owner[j]);
            return 1;
        }
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

static int lower_rank(lowering *L, const ownership *o, pp_plan *p)
{
    const pp_jobtable *t = L->t;
    const pp_sim_result *sim = L->sim;
    int S = t->js.S, B = t->js.B, w = L->rank, rc;
    memset(&L->st, 0, sizeof L->st);
    for (int i = 0; i < B; i++)
        L->tokens[i] = -1;
    for (int i = 0; i < S * B; i++)
        L->out[i] = L->stash[i] = L->din[i] = -1;
    for (int k = sim->off[w]; k < sim->off[w + 1]; k++) {
        int j = sim->order[k];
        int s = job_s(&t->js, j), b = job_b(&t->js, j), d = job_d(&t->js, j);
        rc = d == 0   ? lower_forward(L, s, b, sim->start[j], sim->end[j])
             : d == 1 ? lower_backward(L, s, b, sim->start[j], sim->end[j])
                      : lower_weight(L, s, b, sim->start[j]);
        if (rc)
            return rc;
    }
    double tend = sim->makespan;
    for (int s = 0; s < S; s++)
        if (o->group_of[s] >= 0 && owns(o, s, w) &&
            emit(L, PP_OP_ReduceGrads, s, -1, -1, o->group_of[s], NULL, tend) < 0)
            return -1;
    for (int s = 0; s < S; s++)
        if (owns(o, s, w) && emit(L, PP_OP_OptimizerStep, s, -1, -1, -1, NULL, tend) < 0)
            return -1;
    extend_sends(&L->st);
    if (assign_slots(&L->st, p))
        return -1;
    p->ninstr = (uint32_t)L->st.n;
    p->code = L->st.code;
    L->st.code = NULL;
    p->stage_role = calloc((size_t)S, 1);
    if (!p->stage_role)
        return -1;
    for (int k = sim->off[w]; k < sim->off[w + 1]; k++)
        p->stage_role[job_s(&t->js, sim->order[k])] |= PP_ROLE_COMPUTE;
    for (int s = 0; s < S; s++)
        if (owns(o, s, w))
            p->stage_role[s] |= PP_ROLE_OWNER;
    return copy_groups(o, p);
}

/* The plan id: a hash of everything every rank's file says except its rank,
 * so all ranks of one compile share it and any other compile differs. */
static uint64_t plan_id(const pp_plan *plans, int W)
{
    uint64_t h = PP_FNV_OFFSET;
    for (int r = 0; r < W; r++) {
        const pp_plan *p = &plans[r];
        h = pp_fnv1a64(h, &p->world, sizeof p->world);
        h = pp_fnv1a64(h, &p->S, sizeof p->S);
        h = pp_fnv1a64(h, &p->B, sizeof p->B);
        h = pp_fnv1a64(h, &p->model, sizeof p->model);
        h = pp_fnv1a64(h, p->stage_role, p->S);
        h = pp_fnv1a64(h, p->slot_bytes, p->nslots * sizeof *p->slot_bytes);
        for (uint32_t i = 0; i < p->ninstr; i++) {
            const pp_instr *in = &p->code[i];
            int32_t f[4 + PP_MAX_SLOTS] = {in->op, in->stage, in->mb, in->peer};
            f[3] = in->group;
            memcpy(f + 4, in->slot, sizeof in->slot);
            h = pp_fnv1a64(h, f, sizeof f);
        }
    }
    return h;
}

int pp_lower(const pp_jobtable *t, const pp_sim_result *sim, const pp_model *m, pp_diag *d,
             pp_plan *plans)
{
    int S = t->js.S, B = t->js.B, W = t->W, errors = 0;
    if (check_no_fetch(t, d))
        return 1;
    ownership o;
    lowering L = {.t = t, .sim = sim, .m = m, .d = d};
    L.tokens = malloc((size_t)B * sizeof(int));
    L.out = malloc((size_t)S * B * sizeof(int));
    L.stash = malloc((size_t)S * B * sizeof(int));
    L.din = malloc((size_t)S * B * sizeof(int));
    if (build_ownership(t, &o) || !L.tokens || !L.out || !L.stash || !L.din) {
        diag_error_noloc(d, "out of memory while lowering");
        errors = 1;
        goto out;
    }
    for (int w = 0; w < W && !errors; w++) {
        pp_plan *p = &plans[w];
        p->version = PP_PLAN_VERSION;
        p->rank = (uint32_t)w;
        p->world = (uint32_t)W;
        p->S = (uint32_t)S;
        p->B = (uint32_t)B;
        p->model = *m;
        L.rank = w;
        int rc = lower_rank(&L, &o, p);
        free(L.st.code);
        free(L.st.time);
        free(L.st.buf);
        if (rc < 0)
            diag_error_noloc(d, "out of memory while lowering rank %d", w);
        if (rc)
            errors = 1;
    }
    if (!errors) {
        uint64_t id = plan_id(plans, W);
        for (int w = 0; w < W; w++)
            plans[w].plan_id = id;
    }
out:
    free_ownership(&o, S);
    free(L.din);
    free(L.stash);
    free(L.out);
    free(L.tokens);
    return errors;
}
