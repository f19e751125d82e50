/* link_bucket.h - the workers' links as token buckets (issue 29): what a
 * link shaped by tc's tbf (or a cloud's burst credit) does, for the
 * transfers priced again after a simulation (link_retime.c) and the end of
 * the step's gradient returns and all-reduces (report_link.c).
 *
 * Each sender's bucket holds up to t->burst bytes of tokens and refills at
 * t->bandwidth; a message of n bytes leaves once the sender's previous one
 * has, takes the tokens there are, and pays the rest at the rate: it
 * arrives latency after its last byte left. With burst 0 this is latency +
 * n / bandwidth, the messages of one sender in turn. A link whose two
 * directions take turns (--costs "duplex": "half": TCP over tbf, whose
 * acknowledgements queue behind the other direction's data) also waits
 * until the pair's last message, either way, has left; each direction keeps
 * its own bucket (tbf shapes each host's egress). */
#ifndef PP_LINK_BUCKET_H
#define PP_LINK_BUCKET_H

#include <stdlib.h>
#include <string.h>

#include "jobtable.h"

typedef struct {
    double level; /* tokens (bytes) at time `at` */
    double at;    /* when the sender's last message had left */
} pp_bucket;

typedef struct {
    int W;
    pp_bucket *bk; /* [W] one per sender, full and idle at first */
    double *busy;  /* [W * W] half duplex: when pair (lo, hi)'s last message left; else NULL */
} pp_links;

/* 0, or -1 out of memory (l then needs no free). */
static inline int pp_links_init(pp_links *l, const pp_jobtable *t)
{
    size_t W = (size_t)t->W;
    l->W = t->W;
    l->bk = malloc((W + 1) * sizeof *l->bk);
    l->busy = t->half_duplex ? calloc(W * W + 1, sizeof *l->busy) : NULL;
    if (!l->bk || (t->half_duplex && !l->busy)) {
        free(l->bk);
        free(l->busy);
        return -1;
    }
    for (size_t w = 0; w < W; w++)
        l->bk[w] = (pp_bucket){t->burst, 0};
    return 0;
}

static inline void pp_links_free(pp_links *l)
{
    free(l->bk);
    free(l->busy);
}

/* dst = src, both initialised for the same table. */
static inline void pp_links_copy(pp_links *dst, const pp_links *src)
{
    size_t W = (size_t)src->W;
    memcpy(dst->bk, src->bk, W * sizeof *dst->bk);
    if (src->busy)
        memcpy(dst->busy, src->busy, W * W * sizeof *dst->busy);
}

/* A message of `bytes` from worker `from` to `to`, ready to leave at
 * `ready`: when it has arrived. */
static inline double pp_links_send(pp_links *l, const pp_jobtable *t, int from, int to,
                                   double ready, double bytes)
{
    pp_bucket *b = &l->bk[from];
    double *pair = NULL;
    if (l->busy)
        pair = &l->busy[(size_t)(from < to ? from : to) * (size_t)l->W +
                        (size_t)(from < to ? to : from)];
    double start = ready > b->at ? ready : b->at, level = b->level;
    if (pair && *pair > start)
        start = *pair;
    if (t->bandwidth > 0)
        level += (start - b->at) * t->bandwidth;
    if (level > t->burst)
        level = t->burst;
    double paid = bytes > level ? bytes - level : 0;
    double leave = start + (t->bandwidth > 0 ? paid / t->bandwidth : 0);
    b->level = paid > 0 ? 0 : level - bytes;
    b->at = leave;
    if (pair)
        *pair = leave;
    return leave + t->latency;
}

#endif
