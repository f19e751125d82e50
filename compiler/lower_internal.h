/* lower_internal.h - the parts of lowering (lower.h) and what they share:
 *   lower_order.c   who owns what, where weight gradients return, and every
 *                   rank's items (jobs and transfer sides) in the one global
 *                   order all ranks share;
 *   lower.c         emission: items to instructions over logical buffers;
 *   lower_slots.c   logical buffers to the plan's slots, by liveness;
 *   plan_memory.c   what a plan allocates, and --mem-limit.
 * Not for use outside compiler/lower*.c and plan_memory.c. */
#ifndef PP_LOWER_INTERNAL_H
#define PP_LOWER_INTERNAL_H

#include "lower.h"

/* A logical buffer before slot assignment. */
typedef struct {
    uint64_t bytes;
    int def;      /* instruction that writes it */
    int last_use; /* last instruction that needs it */
    int end;      /* last_use, or the end of the transfer group holding it (assign_slots) */
    int host;     /* 1: an offloaded stash on the host (its own pool of slots) */
} lbuf;

/* One rank's instructions over logical buffers (slot operands hold buffer
 * ids until lower_assign_slots). */
typedef struct {
    pp_instr *code;
    int n, cap;
    lbuf *buf;
    int nbuf, bufcap;
} stream;

/* One thing a rank does, before sorting into its stream. */
enum {
    IT_RECV_ACT,
    IT_SEND_ACT,
    IT_RECV_GRAD,
    IT_SEND_GRAD,
    IT_FETCH,
    IT_SEND_WEIGHTS,
    IT_SEND_WGRAD,
    IT_RECV_WGRAD,
    IT_JOB
};
typedef struct {
    double t;
    int pair;     /* transfer kind shared by both sides (0 act, 1 grad, 2 weights,
                      * 4 weight gradients); 3 jobs */
    int s, b, d;  /* the producing job (transfers of data), or the fetching job */
    int src, dst; /* ranks */
    int what;     /* IT_* on this rank */
    int job;      /* the job (IT_JOB), or the job that consumes the transfer */
} item;

/* Items grouped by rank: the rank they belong to is the first key. */
typedef struct {
    int rank;
    item it;
} ranked_item;

/* Owners of each stage as a sorted member list; stages with several owners
 * get a group (replica sets that are equal share one group). The inverse,
 * each worker's owned stages ascending, is stages[off[w] .. off[w+1]).
 * Sizes are the number of (stage, owner) pairs, never S x W. */
typedef struct ownership {
    int *nowners;  /* [S] */
    int **owners;  /* [S][nowners] ascending */
    int *group_of; /* [S] group index or -1 */
    pp_group *groups;
    int ngroups;
    int *owned_off; /* [W + 1] */
    int *owned;     /* [pairs] stages, by worker, ascending */
} ownership;

/* Where ranks return the weight gradients of stages they compute them for
 * without owning them: for each (stage s, rank r) that does, r sends to
 * the owner its first such job names, once `last`, the last such job in
 * its order, ends. A list of the pairs that occur (never S x W). */
typedef struct {
    int s, r, to, last;
} gradient_return;

typedef struct {
    gradient_return *ret;
    int n;
} gradient_returns;

int lower_build_ownership(const pp_jobtable *t, ownership *o);
void lower_free_ownership(ownership *o, int S);
int lower_owns(const ownership *o, int s, int w);
/* The plan's group table: the ownership's replica groups. */
int lower_copy_groups(const ownership *o, pp_plan *p);
int lower_build_returns(const pp_jobtable *t, const pp_sim_result *sim, const ownership *o,
                        gradient_returns *g);
/* Every rank's items sorted by (rank, the global key); *count of them. */
ranked_item *lower_build_items(const pp_jobtable *t, const pp_sim_result *sim, int prefetch,
                               const gradient_returns *g, int *count);

/* Slots for the stream's buffers (see lower_slots.c); rewrites its buffer
 * operands into slot numbers and fills p's slot table. 0, or -1 out of memory. */
int lower_assign_slots(stream *st, uint32_t rank, pp_plan *p);

/* --mem-limit: reports through d and returns 1 when plan p (of `rank`)
 * needs more than limit bytes at some instruction; else 0. */
int lower_check_mem_limit(const pp_plan *p, int rank, uint64_t limit, pp_diag *d);

#endif
