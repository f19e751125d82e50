/* determ.c - ppvm --deterministic on the cpu backend: per-microbatch weight
 * gradients, moved and summed in microbatch order (the order and the
 * buffers are described in determ.h; the reference uses pp_determ_add). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/model.h"
#include "check.h"
#include "determ.h"
#include "vm.h"

void pp_determ_add(float *g, const float *gb, size_t n, int first)
{
    if (first) {
        memcpy(g, gb, n * sizeof *g);
        return;
    }
    for (size_t i = 0; i < n; i++)
        g[i] += gb[i];
}

struct pp_determ {
    int S, B, me;
    size_t *n;                /* [S] the stage's parameter count (0: untracked) */
    unsigned char *owner;     /* [S] this rank holds the stage's weights */
    unsigned char *group;     /* [S] and all-reduces them with replicas (ReduceGrads) */
    int *idx;                 /* [S*B] the buffer of W(s,b) here, or -1 */
    float **buf;              /* [S] its buffers, n[s] floats each */
    unsigned char *held;      /* [S*B] buffer idx(s,b) holds g_b, not yet added */
    int *next;                /* [S] an owner outside a group: the next microbatch to add */
    unsigned char *summed;    /* [S] a replica: ReduceGrads has summed the stage */
    int *pend, *npend, *sent; /* [S*B], [S], [S] a non-owner: microbatches computed, sent */
    int *ids, *mine, *roots;  /* [B] scratch of RecvWeightGrad and ReduceGrads */
    float *tmp;               /* a replica's broadcast of another member's g_b */
    MPI_Request *req;         /* sends in flight */
    int nreq, req_cap;
    MPI_Comm comm;
};

/* The message tags of stage s on this module's own communicator: g_b's is
 * s*(B+1) + b, the list of microbatches s*(B+1) + B. ppvm checks
 * pp_transfer_tags (S*B*PP_TAG_CLASSES) against MPI's largest tag, which
 * bounds these too. */
static int tag_of(const pp_determ *d, int s, int b) { return s * (d->B + 1) + b; }

static float *entry(pp_determ *d, int s, int b)
{
    return d->buf[s] + (size_t)d->idx[s * d->B + b] * d->n[s];
}

/* A plan the VM cannot sum in order (no valid plan does this): every rank
 * ends, as a failed MPI call would end it mid-step. */
static void give_up(const pp_determ *d, const char *what, int s, int b)
{
    pp_vm_error(d->me, "--deterministic: stage %d, microbatch %d: %s", s, b, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* Whether instruction i is a job W(s,b) that computes weight gradients. */
static int is_wjob(const pp_instr *in)
{
    pp_op_job j = pp_op_job_of(in->op);
    return j == PP_JOB_B || j == PP_JOB_W;
}

/* Stage s's buffers: see determ.h. 0, or -1 when out of memory. */
static int plan_stage(pp_determ *d, const pp_plan *p, int s, unsigned long long *bytes)
{
    int B = d->B, nbuf = 0, inorder = 1, jobs = 0, recv = 0;
    int *idx = d->idx + (size_t)s * B;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        if ((int)in->stage != s)
            continue;
        recv |= in->op == PP_OP_RecvWeightGrad;
        d->group[s] |= in->op == PP_OP_ReduceGrads;
        d->req_cap += in->op == PP_OP_SendWeightGrad;
        if (is_wjob(in) && in->mb < B && idx[in->mb] < 0) {
            inorder &= in->mb == jobs;
            idx[in->mb] = nbuf++;
            jobs++;
        }
    }
    if (!d->owner[s])
        d->req_cap += jobs;
    if (d->owner[s] && recv) { /* any microbatch may arrive: one buffer each */
        for (int b = 0; b < B; b++)
            idx[b] = b;
        nbuf = B;
    } else if (d->owner[s] && !d->group[s] && inorder && jobs == B) {
        for (int b = 0; b < B; b++) /* each added before the next job reuses it */
            idx[b] = 0;
        nbuf = 1;
    }
    d->buf[s] = malloc((size_t)nbuf * d->n[s] * sizeof(float) + 1);
    *bytes += (unsigned long long)nbuf * d->n[s] * sizeof(float);
    return d->buf[s] ? 0 : -1;
}

pp_determ *pp_determ_create(const pp_plan *p, unsigned long long *bytes)
{
    int S = (int)p->S, B = (int)p->B;
    size_t SB = (size_t)S * B, tmp = 0;
    pp_determ *d = calloc(1, sizeof *d);
    *bytes = 0;
    if (!d)
        return NULL;
    d->S = S;
    d->B = B;
    d->me = (int)p->rank;
    d->comm = MPI_COMM_NULL;
    d->n = calloc((size_t)S, sizeof *d->n);
    d->owner = calloc((size_t)S, 1);
    d->group = calloc((size_t)S, 1);
    d->idx = malloc(SB * sizeof *d->idx);
    d->buf = calloc((size_t)S, sizeof *d->buf);
    d->held = calloc(SB, 1);
    d->next = calloc((size_t)S, sizeof *d->next);
    d->summed = calloc((size_t)S, 1);
    d->pend = calloc(SB, sizeof *d->pend);
    d->npend = calloc((size_t)S, sizeof *d->npend);
    d->sent = calloc((size_t)S, sizeof *d->sent);
    d->ids = calloc((size_t)B, sizeof *d->ids);
    d->mine = calloc((size_t)B, sizeof *d->mine);
    d->roots = calloc((size_t)B, sizeof *d->roots);
    if (!d->n || !d->owner || !d->group || !d->idx || !d->buf || !d->held || !d->next ||
        !d->summed || !d->pend || !d->npend || !d->sent || !d->ids || !d->mine || !d->roots)
        goto fail;
    for (size_t i = 0; i < SB; i++)
        d->idx[i] = -1;
    for (int s = 0; s < S; s++) {
        d->n[s] = pp_stage_param_count(&p->model, S, s);
        d->owner[s] = (p->stage_role[s] & PP_ROLE_OWNER) != 0;
        if (d->n[s] && plan_stage(d, p, s, bytes))
            goto fail;
        if (d->group[s] && d->n[s] > tmp)
            tmp = d->n[s];
    }
    d->tmp = malloc(tmp * sizeof(float) + 1);
    d->req = malloc(((size_t)d->req_cap + 1) * sizeof *d->req);
    *bytes += tmp * sizeof(float);
    if (d->tmp && d->req)
        return d;
fail:
    pp_determ_free(d);
    *bytes = 0;
    return NULL;
}

void pp_determ_connect(pp_determ *d) { mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &d->comm)); }

int pp_determ_tracks(const pp_determ *d, int s) { return d->n[s] > 0; }

/* (pp_determ_create found every job of the plan, so W(s,b) has a buffer.) */
float *pp_determ_job(pp_determ *d, int s, int b)
{
    /* held, or already added in order: a second W(s,b) would overwrite or
     * double a gradient, or overflow the sends counted for the plan */
    if (d->held[s * d->B + b] || (d->owner[s] && !d->group[s] && b < d->next[s]))
        give_up(d, "its weight gradient is computed twice in one step", s, b);
    float *g = entry(d, s, b);
    memset(g, 0, d->n[s] * sizeof *g);
    return g;
}

/* An owner outside a group: add every gradient that is next in order. */
static void advance(pp_determ *d, int s, float *g)
{
    while (d->next[s] < d->B && d->held[s * d->B + d->next[s]]) {
        int b = d->next[s]++;
        d->held[s * d->B + b] = 0;
        pp_determ_add(g, entry(d, s, b), d->n[s], b == 0);
    }
}

void pp_determ_done(pp_determ *d, int s, int b, float *g)
{
    d->held[s * d->B + b] = 1;
    if (!d->owner[s])
        d->pend[s * d->B + d->npend[s]++] = b;
    else if (!d->group[s])
        advance(d, s, g);
}

void pp_determ_send(pp_determ *d, int s, int peer)
{
    int *list = d->pend + (size_t)s * d->B + d->sent[s], k = d->npend[s] - d->sent[s];
    /* req_cap: one list per SendWeightGrad of the plan and one message per
     * job, each job at most once (pp_determ_job) */
    /* the list first: MPI keeps one sender's messages of a tag in order, and
     * the receiver reads the list before it knows the gradients' tags */
    mpiCheck(MPI_Isend(list, k, MPI_INT, peer, tag_of(d, s, d->B), d->comm, &d->req[d->nreq++]));
    for (int i = 0; i < k; i++)
        mpiCheck(MPI_Isend(entry(d, s, list[i]), (int)d->n[s], MPI_FLOAT, peer,
                           tag_of(d, s, list[i]), d->comm, &d->req[d->nreq++]));
    d->sent[s] = d->npend[s];
}

void pp_determ_recv(pp_determ *d, int s, int peer, float *g)
{
    MPI_Status st;
    int k = 0;
    mpiCheck(MPI_Recv(d->ids, d->B, MPI_INT, peer, tag_of(d, s, d->B), d->comm, &st));
    mpiCheck(MPI_Get_count(&st, MPI_INT, &k));
    for (int i = 0; i < k; i++) {
        int b = d->ids[i];
        if (b < 0 || b >= d->B || d->held[s * d->B + b] || (!d->group[s] && b < d->next[s]))
            give_up(d, "its weight gradient arrives from a second rank", s, b);
        mpiCheck(MPI_Recv(entry(d, s, b), (int)d->n[s], MPI_FLOAT, peer, tag_of(d, s, b), d->comm,
                          MPI_STATUS_IGNORE));
        d->held[s * d->B + b] = 1;
    }
    if (!d->group[s])
        advance(d, s, g);
}

void pp_determ_reduce(pp_determ *d, int s, MPI_Comm comm, float *g)
{
    int me, B = d->B;
    mpiCheck(MPI_Comm_rank(comm, &me));
    for (int b = 0; b < B; b++)
        d->mine[b] = d->held[s * B + b] ? me : INT_MAX;
    mpiCheck(MPI_Allreduce(d->mine, d->roots, B, MPI_INT, MPI_MIN, comm));
    for (int b = 0; b < B; b++) {
        if (d->roots[b] == INT_MAX)
            give_up(d, "no replica holds this microbatch's weight gradient", s, b);
        float *x = d->roots[b] == me ? entry(d, s, b) : d->tmp;
        mpiCheck(MPI_Bcast(x, (int)d->n[s], MPI_FLOAT, d->roots[b], comm));
        pp_determ_add(g, x, d->n[s], b == 0);
        d->held[s * B + b] = 0;
    }
    d->summed[s] = 1;
}

void pp_determ_check(pp_determ *d, int s, const char *what)
{
    if (d->group[s] ? !d->summed[s] : d->next[s] < d->B)
        give_up(d, what, s, d->group[s] ? 0 : d->next[s]);
}

void pp_determ_finish(pp_determ *d, int s)
{
    pp_determ_check(d, s, "the optimizer step came before this microbatch's weight gradient");
    d->next[s] = 0;
    d->summed[s] = 0;
}

void pp_determ_end_step(pp_determ *d)
{
    if (d->nreq)
        mpiCheck(MPI_Waitall(d->nreq, d->req, MPI_STATUSES_IGNORE));
    d->nreq = 0;
    for (int s = 0; s < d->S; s++) {
        d->npend[s] = d->sent[s] = 0;
        if (!d->owner[s]) /* a non-owner's gradients have gone to the owner */
            memset(d->held + (size_t)s * d->B, 0, (size_t)d->B);
    }
}

void pp_determ_free(pp_determ *d)
{
    if (!d)
        return;
    for (int s = 0; d->buf && s < d->S; s++)
        free(d->buf[s]);
    if (d->comm != MPI_COMM_NULL)
        mpiCheck(MPI_Comm_free(&d->comm));
    free(d->n);
    free(d->owner);
    free(d->group);
    free(d->idx);
    free(d->buf);
    free(d->held);
    free(d->next);
    free(d->summed);
    free(d->pend);
    free(d->npend);
    free(d->sent);
    free(d->ids);
    free(d->mine);
    free(d->roots);
    free(d->tmp);
    free(d->req);
    free(d);
}
