/* profile_wake.c - ppvm --profile's "wake" on the cpu backend (profile.h):
 * how much later than the link accounts for a rank that was already
 * waiting for an activation or gradient resumes once the job that made it
 * has ended.
 *
 * A rank that waits sleeps where ranks share cores (vm/progress.c: the
 * communication thread polls 5 us doubling to 200 us, the waiter sleeps
 * between tries), and the scheduler gives it a core only then: on 4 ranks
 * of the 2-core machine a waiting receiver resumed 110-290 us (the mean)
 * after its input's job ended, where the link's probe reads 6-30 us, and
 * ppc predicted 1F1B S=4 B=8 at 0.48 of its step without that (1.07 with
 * it). Both ends are read on one node's CLOCK_MONOTONIC, so across nodes
 * nothing is measured.
 *
 * Each rank logs, for a few steps after the warm-up, when each send's data
 * was ready (an activation's or gradient's: the end of the job before it,
 * which is when ppc's simulation has it leave; anything else: its post)
 * and when it began and ended each wait for a receive; at the end rank 0
 * matches them by (sender, receiver, tag, step) and averages, over the
 * receives whose wait began before their data was ready, (end - ready)
 * less latency + bytes / bandwidth. */
#include "profile.h"

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../isa/ops.h"
#include "check.h"
#include "vm.h"

#define WAKE_STEPS 6 /* steps logged: 1 .. WAKE_STEPS (0 warms up) */

struct pp_wake_log {
    const pp_plan *p;
    int me, first, last; /* steps first .. last are logged */
    int *at;             /* [ninstr] the instruction's transfer index, or -1 */
    int n;               /* transfers in the plan (sends and receives) */
    double *t;           /* [WAKE_STEPS][n][2]: post (a send), or wait start and end (a receive) */
    size_t *bytes;       /* [n] a receive's bytes */
};

/* A record of the gather: a send or a receive of one step. */
enum { R_SRC, R_DST, R_TAG, R_STEP, R_KIND, R_T0, R_T1, R_BYTES, R_FIELDS };

static int is_transfer(int op)
{
    int k = pp_op(op)->kind;
    return k == PP_KIND_SEND || k == PP_KIND_RECV;
}

pp_wake_log *pp_wake_open(const pp_plan *p, int steps, int me)
{
    pp_wake_log *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->p = p;
    w->me = me;
    w->first = steps > 1 ? 1 : 0;
    w->last = steps - 1 < WAKE_STEPS ? steps - 1 : WAKE_STEPS;
    w->at = malloc((p->ninstr + 1) * sizeof *w->at);
    for (uint32_t i = 0; w->at && i < p->ninstr; i++)
        w->at[i] = is_transfer(p->code[i].op) ? w->n++ : -1;
    size_t cells = (size_t)WAKE_STEPS * (size_t)w->n * 2 + 1;
    w->t = calloc(cells, sizeof *w->t);
    w->bytes = calloc((size_t)w->n + 1, sizeof *w->bytes);
    if (!w->at || !w->t || !w->bytes) {
        pp_wake_free(w);
        return NULL;
    }
    return w;
}

void pp_wake_free(pp_wake_log *w)
{
    if (!w)
        return;
    free(w->at);
    free(w->t);
    free(w->bytes);
    free(w);
}

static double *cell(pp_wake_log *w, int step, uint32_t instr)
{
    if (!w || step < w->first || step > w->last || w->last < w->first || w->at[instr] < 0)
        return NULL;
    return &w->t[((size_t)(step - w->first) * (size_t)w->n + (size_t)w->at[instr]) * 2];
}

void pp_wake_send(pp_wake_log *w, int step, uint32_t instr, uint64_t now_ns)
{
    double *c = cell(w, step, instr);
    if (c)
        c[0] = (double)now_ns * 1e-9;
}

void pp_wake_recv(pp_wake_log *w, int step, uint32_t instr, size_t bytes, uint64_t start_ns,
                  uint64_t end_ns)
{
    double *c = cell(w, step, instr);
    if (!c)
        return;
    c[0] = (double)start_ns * 1e-9;
    c[1] = (double)end_ns * 1e-9;
    w->bytes[w->at[instr]] = bytes;
}

/* This rank's records, R_FIELDS doubles each, into out (NULL: count). */
static int records(const pp_wake_log *w, double *out)
{
    const pp_plan *p = w->p;
    int n = 0;
    for (int step = w->first; step <= w->last; step++)
        for (uint32_t i = 0; i < p->ninstr; i++) {
            if (w->at[i] < 0)
                continue;
            const pp_instr *in = &p->code[i];
            const double *c = &w->t[((size_t)(step - w->first) * (size_t)w->n + w->at[i]) * 2];
            if (c[0] == 0)
                continue; /* not run (a send's own copy stands in: stage_send) */
            if (out) {
                int send = pp_op(in->op)->kind == PP_KIND_SEND;
                double *r = out + (size_t)n * R_FIELDS;
                r[R_SRC] = send ? w->me : (double)in->peer;
                r[R_DST] = send ? (double)in->peer : w->me;
                r[R_TAG] = pp_transfer_tag(p, in->op, in->stage, in->mb);
                r[R_STEP] = step;
                r[R_KIND] = send ? 0 : 1;
                r[R_T0] = c[0];
                r[R_T1] = c[1];
                r[R_BYTES] = (double)w->bytes[w->at[i]];
            }
            n++;
        }
    return n;
}

static int cmp_record(const void *a, const void *b)
{
    const double *x = a, *y = b;
    for (int f = R_SRC; f <= R_KIND; f++)
        if (x[f] != y[f])
            return x[f] < y[f] ? -1 : 1;
    return 0;
}

static int same_key(const double *x, const double *y)
{
    return x[R_SRC] == y[R_SRC] && x[R_DST] == y[R_DST] && x[R_TAG] == y[R_TAG] &&
           x[R_STEP] == y[R_STEP];
}

/* Rank 0: the mean extra delay over the matched pairs, or -1 without
 * one. Sorted, a send is followed by its receive; a key that two sends
 * or two receives of a step share is left out (which went with which is
 * not known). */
static double match(double *all, int n, double latency, double bandwidth)
{
    qsort(all, (size_t)n, R_FIELDS * sizeof *all, cmp_record);
    double *d = malloc(((size_t)n + 1) * sizeof *d);
    int nd = 0;
    for (int i = 0; d && i + 1 < n; i++) {
        double *s = all + (size_t)i * R_FIELDS, *r = s + R_FIELDS;
        if (s[R_KIND] != 0 || r[R_KIND] != 1 || !same_key(s, r))
            continue;
        if ((i > 0 && same_key(s - R_FIELDS, s)) || (i + 2 < n && same_key(r, r + R_FIELDS)))
            continue;
        if (!(r[R_T0] < s[R_T0]))
            continue; /* its receiver came to wait after the post */
        double link = latency + (bandwidth > 0 ? r[R_BYTES] / bandwidth : 0);
        d[nd++] = r[R_T1] - s[R_T0] - link;
    }
    /* the mean: a path through the plan adds its delays up, and on shared
     * cores their tail is long (4 ranks of 2 cores: median 125-131 us,
     * mean 158-225, a tenth past 300-500); all but the slowest 2%, which
     * are a rank's one-off stalls rather than its waits */
    double wake = -1;
    if (nd > 0) {
        pp_sort(d, (size_t)nd);
        int keep = nd - nd / 50;
        double sum = 0;
        for (int i = 0; i < keep; i++)
            sum += d[i];
        wake = sum / keep;
        wake = wake > 0 ? wake : 0;
    }
    free(d);
    return wake;
}

double pp_wake_finish(pp_wake_log *w, double latency, double bandwidth)
{
    int me, size, node = 1, mine = w ? records(w, NULL) : 0, ok;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_size(local, &node));
    mpiCheck(MPI_Comm_free(&local));
    int *counts = me == 0 ? malloc((size_t)size * sizeof *counts) : NULL;
    int *displs = me == 0 ? malloc((size_t)size * sizeof *displs) : NULL;
    double *buf = malloc(((size_t)mine * R_FIELDS + 1) * sizeof *buf), *all = NULL;
    ok = buf && (me != 0 || (counts && displs)) && w;
    if (ok)
        records(w, buf);
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    double wake = -1;
    if (!ok || node != size) /* no memory (then no figure), or clocks of several nodes */
        goto out;
    int n = mine * R_FIELDS, total = 0;
    mpiCheck(MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD));
    for (int r = 0; me == 0 && r < size; r++) {
        displs[r] = total;
        total += counts[r];
    }
    all = me == 0 ? malloc(((size_t)total + 1) * sizeof *all) : NULL;
    int got = me != 0 || all;
    mpiCheck(MPI_Bcast(&got, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (!got)
        goto out;
    mpiCheck(MPI_Gatherv(buf, n, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (me == 0)
        wake = match(all, total / R_FIELDS, latency, bandwidth);
out:
    free(counts);
    free(displs);
    free(buf);
    free(all);
    return wake;
}
