/* link_bucket.h - a sending worker's link as a token bucket (issue 29):
 * what a link shaped by tc's tbf (or a cloud's burst credit) does, for the
 * end of the step's gradient returns and all-reduces (report.c), which go
 * back to back and so drain it.
 *
 * The bucket holds up to t->burst bytes of tokens and refills at
 * t->bandwidth; a message of n bytes leaves once the link has finished the
 * sender's previous one, takes the tokens there are, and pays the rest at
 * the rate: it arrives latency after its last byte left. With burst 0 this
 * is latency + n / bandwidth, the messages of one sender in turn. */
#ifndef PP_LINK_BUCKET_H
#define PP_LINK_BUCKET_H

#include "jobtable.h"

typedef struct {
    double level; /* tokens (bytes) at time `at` */
    double at;    /* when the sender's last message had left */
} pp_bucket;

/* Full, idle. */
static inline pp_bucket pp_bucket_full(const pp_jobtable *t) { return (pp_bucket){t->burst, 0}; }

/* A message of `bytes` ready to leave at `ready`: when it has arrived. */
static inline double pp_bucket_send(pp_bucket *b, const pp_jobtable *t, double ready, double bytes)
{
    double start = ready > b->at ? ready : b->at, level = b->level;
    if (t->bandwidth > 0)
        level += (start - b->at) * t->bandwidth;
    if (level > t->burst)
        level = t->burst;
    double paid = bytes > level ? bytes - level : 0;
    double leave = start + (t->bandwidth > 0 ? paid / t->bandwidth : 0);
    b->level = paid > 0 ? 0 : level - bytes;
    b->at = leave;
    return leave + t->latency;
}

#endif
