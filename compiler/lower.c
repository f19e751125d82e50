/* lower.c - emission: each rank's items (lower_order.c, in the global order
 * that makes every plan deadlock-free) become instructions over logical
 * buffers, which lower_slots.c then assigns to slots; pp_lower drives the
 * parts for every rank and stamps the plan id (see lower.h). */
#include "lower_internal.h"
#include "sim_offload.h"
#include "transfer_groups.h"

#include <stdlib.h>
#include <string.h>

#include "../isa/model_shape.h"
#include "../isa/tied.h"

typedef struct {
    const pp_jobtable *t;
    const pp_sim_result *sim;
    const pp_model *m;
    pp_diag *d;
    int rank;
    stream st;
    /* per (s,b) logical buffers on this rank, -1 if none */
    int *tokens;    /* [B] */
    int *out;       /* [S*B] F(s,b)'s output */
    int *stash;     /* [S*B] */
    int *din;       /* [S*B] B(s,b)'s input gradient */
    int *wts;       /* [N] fetched weights of the job */
    int *held;      /* [S] the fetched weights the rank's last job of the stage read */
    int *wgrad;     /* [S] this rank's gradient accumulator for a stage it does not own */
    uint64_t *work; /* [S] each stage's workspace bytes */
    int prefetch;   /* hoist receives and fetches this many jobs ahead */
    const ownership *own;
    int pair_next; /* the second job of the overlapped pair just opened, or -1 */
    /* offload (lower_offload below): per (s,b) the host buffer of an
     * offloaded stash (-1 before its Offload); per job the first (s,b)
     * whose Reload goes right before it, chained through reload_next;
     * and what waits for the end of an overlapped pair (no instruction
     * may stand between Overlap and its two jobs) */
    int *hstash;      /* [S*B] */
    int *reload_head; /* [N] */
    int *reload_next; /* [S*B] */
    int *pend;        /* [S*B] pending: (s,b) << 1 | 1 for a Reload, 0 an Offload */
    int npend;
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
    st->buf[st->nbuf] = (lbuf){bytes, -1, -1, -1, 0};
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

static int owns_stage(const lowering *L, int s, int w) { return lower_owns(L->own, s, w); }

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

/* The instruction F(s,b) and R(s,b) share (op Forward or Recompute): from
 * F's input (the tokens on stage 0, else stage s-1's output) and, on the
 * last stage, the targets, into a new stash and, before the last stage, a
 * new output; fetched weights away from the owner. Sets *stash, *out and
 * the instruction's index *at; -1 when out of memory. */
static int emit_forward(lowering *L, int j, int op, int *stash, int *out, int *at)
{
    const pp_jobtable *t = L->t;
    int S = t->js.S, s = job_s(&t->js, j), b = job_b(&t->js, j), tgt = -1;
    int in = s == 0 ? tokens_for(L, b) : L->out[sb(L, s - 1, b)];
    if (s == S - 1)
        tgt = tokens_for(L, b);
    /* a split backward's B leaves more in the stash for W: sized per job,
     * since with `split backward when` a stage may have both kinds */
    int split = job_split(&t->js, s, b);
    *stash = new_buf(L, split ? pp_stage_stash_bytes_split(L->m, S, s)
                              : pp_stage_stash_bytes(L->m, S, s));
    *out = s < S - 1 ? new_buf(L, pp_act_bytes(L->m)) : -1;
    int wts = weights_buffer(L, j);
    *at = emit(L, op, s, b, -1, -1);
    slot(L, *at, PP_ROLE_IN, in);
    slot(L, *at, PP_ROLE_STASH, *stash);
    slot(L, *at, PP_ROLE_OUT, *out);
    slot(L, *at, PP_ROLE_TGT, tgt);
    slot(L, *at, PP_ROLE_WTS, wts);
    if (in < 0 || *stash < 0 || *at < 0)
        return -1;
    use(L, in, *at);
    use(L, tgt, *at);
    use(L, wts, *at);
    L->st.buf[*stash].def = *at;
    L->stash[sb(L, s, b)] = *stash;
    return 0;
}

static int lower_forward(lowering *L, int j)
{
    const pp_jobtable *t = L->t;
    int s = job_s(&t->js, j), b = job_b(&t->js, j), stash, out, at;
    if (emit_forward(L, j, PP_OP_Forward, &stash, &out, &at))
        return -1;
    if (job_recomputed(&t->js, s, b)) {
        /* recompute: the stash dies with F (its slot is free for the next
         * job); F's input (and targets) stay live until R re-reads them */
        use(L, stash, at);
        L->stash[sb(L, s, b)] = -1;
    }
    if (out >= 0) {
        L->st.buf[out].def = at;
        L->out[sb(L, s, b)] = out;
    }
    if (t->offload && t->offload[sb(L, s, b)])
        L->pend[L->npend++] = sb(L, s, b) << 1; /* right after F (or its pair) */
    return 0;
}

/* Offload of (s,b) at k = s*B + b: F's stash into a new host buffer; the
 * device buffer dies here, so its slot is free for the next job. */
static int lower_offload(lowering *L, int k)
{
    int s = k / L->t->js.B, b = k % L->t->js.B, stash = L->stash[k];
    int h = new_buf(L, stash >= 0 ? L->st.buf[stash].bytes : 0);
    int at = emit(L, PP_OP_Offload, s, b, -1, -1);
    slot(L, at, PP_ROLE_SRC, stash);
    slot(L, at, PP_ROLE_DST, h);
    if (stash < 0 || h < 0 || at < 0)
        return -1;
    use(L, stash, at);
    L->st.buf[h].def = at;
    L->st.buf[h].host = 1;
    L->hstash[k] = h;
    L->stash[k] = -1;
    return 0;
}

/* Reload of (s,b): the host buffer back into a new device stash, which B
 * (and W) then read; the host buffer dies here. */
static int lower_reload(lowering *L, int k)
{
    int s = k / L->t->js.B, b = k % L->t->js.B, h = L->hstash[k];
    int stash = new_buf(L, h >= 0 ? L->st.buf[h].bytes : 0);
    int at = emit(L, PP_OP_Reload, s, b, -1, -1);
    slot(L, at, PP_ROLE_SRC, h);
    slot(L, at, PP_ROLE_DST, stash);
    if (stash < 0 || h < 0 || at < 0)
        return -1;
    use(L, h, at);
    L->st.buf[stash].def = at;
    L->stash[k] = stash;
    L->hstash[k] = -1;
    return 0;
}

/* The Reloads placed before job j: each now if its Offload is out, else
 * after the pair that holds its F (flush_pending). */
static int reloads_before(lowering *L, int j)
{
    for (int k = j >= 0 ? L->reload_head[j] : -1; k >= 0; k = L->reload_next[k]) {
        if (L->hstash[k] < 0)
            L->pend[L->npend++] = k << 1 | 1;
        else if (lower_reload(L, k))
            return -1;
    }
    return 0;
}

/* Outside an overlapped pair: the Offloads, then the Reloads, waiting. */
static int flush_pending(lowering *L)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < L->npend; i++)
            if ((L->pend[i] & 1) == pass &&
                (pass ? lower_reload(L, L->pend[i] >> 1) : lower_offload(L, L->pend[i] >> 1)))
                return -1;
    L->npend = 0;
    return 0;
}

/* R(s,b) (recompute): F(s,b) again, from the input F kept, into a new
 * stash that B (and W) then read; the output goes to a buffer that dies
 * here, and the VM counts no loss. Away from the stage's owner it reads
 * fetched weights, as F and B do. */
static int lower_recompute(lowering *L, int j)
{
    int stash, out, at;
    if (emit_forward(L, j, PP_OP_Recompute, &stash, &out, &at))
        return -1;
    if (out >= 0) {
        L->st.buf[out].def = at;
        use(L, out, at);
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
    int split = job_split(&t->js, s, b); /* else a full backward, accumulating dW itself */
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

/* Job x (direction d, overlapped with q or -1): the Overlap marker before
 * a pair's first job, then the job. */
static int lower_job(lowering *L, const item *x, int d, int q)
{
    const pp_jobtable *t = L->t;
    /* An overlapped pair (sim.h) starts at one time, after every
         * transfer it needs (transfers sort first at equal times), so its
         * two jobs are neighbours here: Overlap goes before the first. */
    if (q >= 0 && L->pair_next != x->job) {
        /* what the jobs would emit first goes before the marker, not
             * between the two: a forward's microbatch load (first and last
             * stage), a full backward's ZeroGrads (a stage it does not
             * own; with `split backward when` a backward that is not split
             * is full too, and a split one's B accumulates nothing) */
        int f = d == DIR_F ? x->job : q, fs = job_s(&t->js, f), bk = f == q ? x->job : q;
        if ((fs == 0 || fs == t->js.S - 1) && tokens_for(L, job_b(&t->js, f)) < 0)
            return -1;
        if (job_makes_wgrad(&t->js, bk) && wgrad_for(L, job_s(&t->js, bk)) == -2)
            return -1;
        if (emit(L, PP_OP_Overlap, -1, -1, -1, -1) < 0)
            return -1;
        L->pair_next = q;
    } else if (q >= 0)
        L->pair_next = -1;
    return d == DIR_F   ? lower_forward(L, x->job)
           : d == DIR_B ? lower_backward(L, x->job)
           : d == DIR_R ? lower_recompute(L, x->job)
                        : lower_weight(L, x->job);
}

static int lower_item(lowering *L, const item *x)
{
    const pp_jobtable *t = L->t;
    uint64_t act = pp_act_bytes(L->m);
    int buf;
    switch (x->what) {
    case IT_JOB: {
        int d = job_d(&t->js, x->job), q = L->sim->partner ? L->sim->partner[x->job] : -1;
        if (t->offload) { /* reloads go before the job, or before its pair */
            if (L->pair_next != x->job && (reloads_before(L, x->job) || reloads_before(L, q)))
                return -1;
            int rc = lower_job(L, x, d, q);
            if (rc || L->pair_next >= 0)
                return rc;
            return flush_pending(L);
        }
        return lower_job(L, x, d, q);
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

/* Tied embeddings (model tie = 1): after the replicas' all-reduces and
 * before either optimizer step, each owner of stage 0 or S-1 adds the other
 * tied stage's gradients to its own copy. An owner of both stores the
 * weights once (isa/tied.h): it adds the head's gradients into the
 * embedding's through one slot, for stage 0's optimizer step alone (under
 * tensor > 1 it keeps two copies and adds each into the other); no
 * transfer either way. The others pair up in rank order, the i-th owner
 * of only stage 0 with the i-th owner of only stage S-1, and swap copies
 * through two slots, the stage-0 side sending first (with blocking sends
 * neither waits on the other). Returns 0, 1 (an error said) or -1. */
static int lower_tie(lowering *L)
{
    const ownership *o = L->own;
    int S = L->t->js.S, me = L->rank, last = S - 1;
    uint64_t bytes = (uint64_t)pp_tied_floats(L->m) * sizeof(float);
    int own0 = owns_stage(L, 0, me), own1 = owns_stage(L, last, me);
    if (!L->m->tie || (!own0 && !own1))
        return 0;
    if (pp_tied_shared(L->m, S, own0, own1)) {
        int a = new_buf(L, bytes), at[2] = {emit(L, PP_OP_StashTiedGrad, last, -1, -1, -1),
                                            emit(L, PP_OP_AddTiedGrad, 0, -1, -1, -1)};
        if (a < 0 || at[0] < 0 || at[1] < 0)
            return -1;
        slot(L, at[0], PP_ROLE_TMP, a);
        slot(L, at[1], PP_ROLE_TMP, a);
        L->st.buf[a].def = at[0];
        use(L, a, at[1]);
        return 0;
    }
    if (own0 && own1) {
        int a = new_buf(L, bytes), b = new_buf(L, bytes);
        int at[4] = {emit(L, PP_OP_StashTiedGrad, 0, -1, -1, -1),
                     emit(L, PP_OP_StashTiedGrad, last, -1, -1, -1),
                     emit(L, PP_OP_AddTiedGrad, 0, -1, -1, -1),
                     emit(L, PP_OP_AddTiedGrad, last, -1, -1, -1)};
        if (a < 0 || b < 0 || at[0] < 0 || at[1] < 0 || at[2] < 0 || at[3] < 0)
            return -1;
        slot(L, at[0], PP_ROLE_TMP, a);
        slot(L, at[1], PP_ROLE_TMP, b);
        slot(L, at[2], PP_ROLE_TMP, b);
        slot(L, at[3], PP_ROLE_TMP, a);
        L->st.buf[a].def = at[0];
        L->st.buf[b].def = at[1];
        use(L, a, at[3]);
        use(L, b, at[2]);
        return 0;
    }
    /* my place among the owners of only my tied stage, and my partner's */
    int mine = own0 ? 0 : last, other = own0 ? last : 0, k = 0, n[2] = {0, 0}, peer = -1;
    for (int i = 0; i < o->nowners[mine]; i++)
        if (!owns_stage(L, other, o->owners[mine][i]))
            k += o->owners[mine][i] < me;
    for (int side = 0; side < 2; side++) {
        int st = side ? other : mine, os = side ? mine : other;
        for (int i = 0; i < o->nowners[st]; i++)
            if (!owns_stage(L, os, o->owners[st][i])) {
                if (side && n[1] == k)
                    peer = o->owners[st][i];
                n[side]++;
            }
    }
    if (n[0] != n[1]) {
        if (mine == 0 && me == o->owners[mine][0]) /* said once */
            diag_error_noloc(L->d,
                             "tie = 1: %d rank(s) own only stage %d and %d only stage %d, so the "
                             "tied embedding's copies cannot be paired (expected as many owners "
                             "of each, or owners of both)",
                             n[0], mine, n[1], other);
        return 1;
    }
    int a = new_buf(L, bytes), at = emit(L, PP_OP_StashTiedGrad, mine, -1, -1, -1);
    slot(L, at, PP_ROLE_TMP, a);
    if (a < 0 || at < 0)
        return -1;
    L->st.buf[a].def = at;
    int r = -1;
    if (!own0 && (r = recv_into(L, PP_OP_RecvTiedGrad, other, -1, peer, bytes)) < 0)
        return -1;
    if (send_from(L, PP_OP_SendTiedGrad, mine, -1, peer, a) < 0)
        return -1;
    if (own0 && (r = recv_into(L, PP_OP_RecvTiedGrad, other, -1, peer, bytes)) < 0)
        return -1;
    at = emit(L, PP_OP_AddTiedGrad, mine, -1, -1, -1);
    slot(L, at, PP_ROLE_TMP, r);
    if (at < 0)
        return -1;
    use(L, r, at);
    return 0;
}

/* The end of the step, in one order on every rank (every weight gradient
 * has reached its owner by now): per stage, the replicas' all-reduce; then
 * the tied embedding's sum (lower_tie); then every owner's optimizer step. */
static int lower_epilogue(lowering *L)
{
    const ownership *o = L->own;
    int me = L->rank, from = o->owned_off[me], to = o->owned_off[me + 1];
    for (int k = from; k < to; k++) { /* the rank's own stages, ascending */
        int s = o->owned[k];
        if (o->group_of[s] >= 0 && emit(L, PP_OP_ReduceGrads, s, -1, -1, o->group_of[s]) < 0)
            return -1;
    }
    int rc = lower_tie(L);
    if (rc)
        return rc;
    for (int k = from; k < to; k++)
        if (emit(L, PP_OP_OptimizerStep, o->owned[k], -1, -1, -1) < 0)
            return -1;
    return 0;
}

/* Sets back to -1 every per-(s,b), per-b and per-stage entry a rank's
 * items can have set (its jobs' and its receives'), so the next rank starts
 * from a clean table in time proportional to the items, not to S x B. */
static void forget_rank(lowering *L, const ranked_item *items, int nitems)
{
    const pp_jobspace *js = &L->t->js;
    for (int i = 0; i < nitems; i++) {
        const item *x = &items[i].it;
        if (x->what == IT_JOB) {
            int s = job_s(js, x->job), b = job_b(js, x->job), k = sb(L, s, b);
            L->tokens[b] = L->out[k] = L->stash[k] = L->din[k] = -1;
            L->wgrad[s] = L->held[s] = -1;
            L->wts[x->job] = -1;
        } else if (x->what == IT_RECV_ACT || x->what == IT_RECV_GRAD)
            L->out[sb(L, x->s, x->b)] = L->din[sb(L, x->s, x->b)] = -1;
    }
}

static int lower_rank(lowering *L, const ranked_item *items, int nitems, pp_plan *p)
{
    const pp_jobtable *t = L->t;
    const pp_sim_result *sim = L->sim;
    int S = t->js.S, w = L->rank, rc;
    memset(&L->st, 0, sizeof L->st);
    L->pair_next = -1;
    for (int i = 0; i < nitems; i++)
        if ((rc = lower_item(L, &items[i].it)) != 0)
            return rc;
    forget_rank(L, items, nitems);
    if ((rc = lower_epilogue(L)) != 0)
        return rc;
    if (lower_assign_slots(&L->st, (uint32_t)w, p))
        return -1;
    p->ninstr = (uint32_t)L->st.n;
    p->code = L->st.code;
    L->st.code = NULL;
    if (pp_group_transfers(p))
        return -1;
    p->stage_role = calloc((size_t)S, 1);
    if (!p->stage_role)
        return -1;
    for (int k = sim->off[w]; k < sim->off[w + 1]; k++) {
        int s = job_s(&t->js, sim->order[k]);
        /* one workspace, large enough for every stage the rank runs (two
         * of this size with an Overlap pair: pp_plan_workspaces) */
        if (!(p->stage_role[s] & PP_ROLE_COMPUTE) && L->work[s] > p->workspace_bytes)
            p->workspace_bytes = L->work[s];
        p->stage_role[s] |= PP_ROLE_COMPUTE;
    }
    for (int k = L->own->owned_off[w]; k < L->own->owned_off[w + 1]; k++)
        p->stage_role[L->own->owned[k]] |= PP_ROLE_OWNER;
    return lower_copy_groups(L->own, p);
}

/* Where each Reload goes: --prefetch jobs before its B in the worker's
 * order, as receives are posted, but after its F (whose Offload must come
 * first): pp_reload_anchors, the rule the simulation issues reloads by
 * (sim_offload.h). 0, or -1 out of memory. */
static int offload_setup(lowering *L, int prefetch)
{
    const pp_jobtable *t = L->t;
    const pp_sim_result *sim = L->sim;
    int S = t->js.S, B = t->js.B, N = job_count(&t->js);
    int *anchor = malloc(((size_t)S * B + 1) * sizeof *anchor);
    L->hstash = malloc((size_t)S * B * sizeof(int));
    L->reload_next = malloc((size_t)S * B * sizeof(int));
    L->pend = malloc((size_t)S * B * sizeof(int));
    L->reload_head = malloc((size_t)N * sizeof(int));
    if (!anchor || !L->hstash || !L->reload_next || !L->pend || !L->reload_head ||
        pp_reload_anchors(&t->js, t->worker, t->offload, sim->order, sim->off, t->W, prefetch,
                          anchor)) {
        free(anchor);
        return -1;
    }
    for (int j = 0; j < N; j++)
        L->reload_head[j] = -1;
    /* chained in descending (s,b) so each job's list rises */
    for (int k = S * B - 1; k >= 0; k--) {
        L->hstash[k] = L->reload_next[k] = -1;
        if (anchor[k] < 0)
            continue;
        L->reload_next[k] = L->reload_head[anchor[k]];
        L->reload_head[anchor[k]] = k;
    }
    L->npend = 0;
    free(anchor);
    return 0;
}

int pp_lower(const pp_jobtable *t, const pp_sim_result *sim, const pp_model *m,
             const pp_lower_opts *opts, pp_diag *d, pp_plan *plans)
{
    int prefetch = opts->prefetch;
    int S = t->js.S, B = t->js.B, W = t->W, N = job_count(&t->js), errors = 0, nitems = 0;
    ownership o;
    lowering L = {.t = t,
                  .sim = sim,
                  .m = m,
                  .d = d,
                  .prefetch = prefetch,
                  .own = &o,
                  .hstash = NULL,
                  .reload_head = NULL,
                  .reload_next = NULL,
                  .pend = NULL};
    L.tokens = malloc((size_t)B * sizeof(int));
    L.out = malloc((size_t)S * B * sizeof(int));
    L.stash = malloc((size_t)S * B * sizeof(int));
    L.din = malloc((size_t)S * B * sizeof(int));
    L.wts = malloc((size_t)N * sizeof(int));
    L.wgrad = malloc((size_t)S * sizeof(int));
    L.held = malloc((size_t)S * sizeof(int));
    L.work = malloc((size_t)S * sizeof *L.work);
    int own_rc = lower_build_ownership(t, &o);
    gradient_returns g = {NULL, 0};
    int ret_rc = own_rc ? -1 : lower_build_returns(t, sim, &o, &g);
    ranked_item *items = ret_rc ? NULL : lower_build_items(t, sim, prefetch, &g, &nitems);
    if (own_rc || ret_rc || !items || (t->offload && offload_setup(&L, prefetch)) || !L.tokens ||
        !L.out || !L.stash || !L.din || !L.wts || !L.wgrad || !L.held || !L.work) {
        diag_nomem(d, "while lowering");
        errors = 1;
        goto out;
    }
    /* every entry -1 once; each rank then sets back what it set (forget_rank) */
    for (int i = 0; i < B; i++)
        L.tokens[i] = -1;
    for (int i = 0; i < S * B; i++)
        L.out[i] = L.stash[i] = L.din[i] = -1;
    for (int i = 0; i < S; i++) {
        L.wgrad[i] = L.held[i] = -1;
        L.work[i] = pp_stage_workspace_bytes(m, S, i);
    }
    for (int j = 0; j < N; j++)
        L.wts[j] = -1;
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
        L.rank = w;
        int rc = pp_plan_set_model(p, m) ? -1 : lower_rank(&L, items + first, end - first, p);
        free(L.st.code);
        free(L.st.buf);
        if (rc < 0)
            diag_nomem(d, "while lowering rank %d", w);
        if (!rc && opts->mem_limit && lower_check_mem_limit(p, w, opts->mem_limit, d))
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
    lower_free_ownership(&o, S);
    free(g.ret);
    free(items);
    free(L.hstash);
    free(L.reload_head);
    free(L.reload_next);
    free(L.pend);
    free(L.wgrad);
    free(L.held);
    free(L.work);
    free(L.wts);
    free(L.din);
    free(L.stash);
    free(L.out);
    free(L.tokens);
    return errors;
}
