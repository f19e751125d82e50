/* verify.c - what every plan must mean (verify.h): a plan whose checksum is
 * right may still have been edited, so before training the VM proves that
 * every rank runs what a compile could have produced (ppc proves its
 * output with the same checks' two halves, bufcheck.c and commcheck.c).
 *
 * Layer 1, per rank (pp_verify_rank, before the ranks talk):
 *   - pp_verify_sizes (plancheck.c): slot and workspace sizes per role,
 *     stages held here;
 *   - the buffer-safety verifier (bufcheck.c): a
 *     symbolic replay of what every slot holds, so each read finds the
 *     content the opcode table says its role needs (Forward's tgt holds the
 *     tokens of its own microbatch, Backward's stash F's stash of the same
 *     (s,b), a wgrad slot was zeroed for its stage, ...);
 *   - each job (s,b,F|B|BI|W) at most once on the rank;
 *   - a wgrad slot's accumulation: not cleared, overwritten or added to
 *     again once it holds gradients not yet sent, sent at most once, and
 *     sent before the plan ends;
 *   - the rank's own stages: every stage it owns optimized exactly once,
 *     nothing touching that stage's weights or gradients after its
 *     OptimizerStep, no gradient added after its ReduceGrads;
 *   - stage roles: compute iff the rank runs a job of the stage.
 * Layer 2, over all ranks (pp_verify_world, on rank 0 after a gather):
 *   - every rank's header agrees: S, B, world, the model (kind, sizes, each
 *     stage's layers, optimizer, precision) and the group table;
 *   - every stage has an owner; a stage with several owners all-reduces its
 *     gradients over exactly its owners, once each, and one with one owner
 *     does not;
 *   - every job runs exactly once over all ranks (F, and B or BI and W);
 *   - the communication checker (commcheck.c): each
 *     transfer meets, in order, the opposite instruction on its peer with
 *     the same stage and microbatch, collectives match, nothing hangs.
 * Layer 3: the plan id is pp_plans_id of all ranks' plans, so a single edit
 *   that all of the above accept is still refused.
 * Everything is O(instructions log instructions) at worst (a sort). */
#include "verify.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bufcheck.h"
#include "commcheck.h"

static void say(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t len, const char *fmt, ...)
{
    if (!err || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* ---- jobs ------------------------------------------------------------------ */

/* The jobs of a microbatch, from the opcode table's job column. */
enum { JOB_F, JOB_B, JOB_BI, JOB_W, JOB_R, JOB_NONE };

static int job_kind(int op)
{
    if (!pp_op_is_job(op))
        return JOB_NONE;
    if (pp_op_job_of(op) == PP_JOB_R)
        return JOB_R;
    return (int)pp_op_job_of(op) - PP_JOB_F; /* PP_JOB_F, B, BI, W in this order */
}

static const char *job_name(int k)
{
    static const char *n[] = {"F", "B", "B (BackwardInput)", "W", "R (Recompute)"};
    return k < JOB_NONE ? n[k] : "?";
}

typedef struct {
    uint32_t s, b, kind, rank, at; /* at: the instruction's address */
} job;

static int job_cmp(const void *x, const void *y)
{
    const job *a = x, *b = y;
    if (a->s != b->s)
        return a->s < b->s ? -1 : 1;
    if (a->b != b->b)
        return a->b < b->b ? -1 : 1;
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* Appends the rank's jobs to list (room for p->ninstr more). */
static size_t collect_jobs(const pp_plan *p, job *list)
{
    size_t n = 0;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        int k = job_kind(p->code[i].op);
        if (k != JOB_NONE)
            list[n++] =
                (job){(uint32_t)p->code[i].stage, (uint32_t)p->code[i].mb, (uint32_t)k, p->rank, i};
    }
    return n;
}

/* ---- layer 1: one rank ------------------------------------------------------ */

typedef struct {
    int32_t stage;    /* the stage its gradients belong to, -1 none */
    uint32_t pending; /* accumulations since ZeroGrads not yet sent */
    int sent;         /* SendWeightGrad has sent it since ZeroGrads */
    uint32_t zeroed;  /* the ZeroGrads that cleared it */
} accum;

enum { OWN_OPEN, OWN_REDUCED, OWN_STEPPED };

typedef struct {
    uint8_t phase;    /* OWN_* */
    uint8_t jobs;     /* the rank runs a job of the stage */
    uint32_t reduced; /* the ReduceGrads, for messages */
    uint32_t stepped; /* the OptimizerStep */
} stage_state;

/* A wgrad slot's accumulation through instruction i: ZeroGrads starts one,
 * Backward and BackwardWeight add to it, SendWeightGrad ends it; any other
 * write to a slot that holds gradients not yet sent would lose them. */
static int check_accum(const pp_plan *p, uint32_t i, accum *acc, char *err, size_t len)
{
    const pp_instr *in = &p->code[i];
    const char *name = pp_op_name(in->op);
    int wg = pp_slot(in, PP_ROLE_WGRAD);
    for (int k = 0; k < pp_op_nslots(in->op); k++) {
        const pp_slot_spec *sp = &pp_op(in->op)->slot[k];
        int sl = in->slot[k];
        if (sl < 0 || !(sp->access & PP_ACC_WR) || sl == wg)
            continue;
        if (acc[sl].pending) {
            say(err, len,
                "instruction %u (%s): writes its %s into slot s%d, which holds unsent weight "
                "gradients of stage %d (expected SendWeightGrad first)",
                i, name, pp_role_name(sp->role), sl, acc[sl].stage);
            return -1;
        }
        acc[sl] = (accum){-1, 0, 0, 0};
    }
    if (wg < 0)
        return 0;
    if (in->op == PP_OP_ZeroGrads) {
        if (acc[wg].pending) {
            say(err, len,
                "instruction %u (ZeroGrads): slot s%d holds %u unsent accumulation(s) of stage "
                "%d's weight gradients, which clearing it would lose (expected SendWeightGrad "
                "first)",
                i, wg, acc[wg].pending, acc[wg].stage);
            return -1;
        }
        acc[wg] = (accum){in->stage, 0, 0, i};
    } else if (in->op == PP_OP_SendWeightGrad) {
        if (acc[wg].sent) {
            say(err, len,
                "instruction %u (SendWeightGrad): slot s%d's stage %d gradients were already sent "
                "(expected one send per ZeroGrads)",
                i, wg, in->stage);
            return -1;
        }
        acc[wg].sent = 1;
        acc[wg].pending = 0;
    } else { /* Backward, BackwardWeight: add to it */
        if (acc[wg].sent) {
            say(err, len,
                "instruction %u (%s): adds stage %d's weight gradients to slot s%d after "
                "SendWeightGrad sent it (expected a ZeroGrads first)",
                i, name, in->stage, wg);
            return -1;
        }
        acc[wg].pending++;
    }
    return 0;
}

/* The rank's own copy of stage s through instruction i. */
static int check_own(const pp_plan *p, uint32_t i, stage_state *st, char *err, size_t len)
{
    const pp_instr *in = &p->code[i];
    const char *name = pp_op_name(in->op);
    pp_touch t[PP_MAX_TOUCH];
    int n = pp_instr_touches(in, t);
    for (int k = 0; k < n; k++) {
        if (t[k].kind == PP_BUF_SLOT)
            continue;
        stage_state *s = &st[t[k].index];
        if (s->phase == OWN_STEPPED) {
            say(err, len,
                "instruction %u (%s): touches stage %d's own %s after its OptimizerStep at %u "
                "(expected every use of a stage before its optimizer step)",
                i, name, (int)t[k].index, t[k].kind == PP_BUF_PARAMS ? "weights" : "gradients",
                s->stepped);
            return -1;
        }
        /* (AddTiedGrad adds the other tied stage's gradients, reduced alike
         * among its replicas, after the all-reduce: every replica adds the
         * same) */
        if (t[k].kind == PP_BUF_GRADS && (t[k].access & PP_ACC_WR) && s->phase == OWN_REDUCED &&
            in->op != PP_OP_OptimizerStep && in->op != PP_OP_AddTiedGrad) {
            say(err, len,
                "instruction %u (%s): adds to stage %d's gradients after its ReduceGrads at %u "
                "(expected every gradient in before the all-reduce)",
                i, name, (int)t[k].index, s->reduced);
            return -1;
        }
    }
    if (in->op == PP_OP_ReduceGrads) {
        stage_state *s = &st[in->stage];
        if (s->phase != OWN_OPEN) {
            say(err, len,
                "instruction %u (ReduceGrads): stage %d's gradients were already reduced at %u", i,
                in->stage, s->reduced);
            return -1;
        }
        s->phase = OWN_REDUCED;
        s->reduced = i;
    } else if (in->op == PP_OP_OptimizerStep) {
        st[in->stage].phase = OWN_STEPPED;
        st[in->stage].stepped = i;
    }
    return 0;
}

static int check_jobs_once(const pp_plan *p, job *list, char *err, size_t len)
{
    size_t n = collect_jobs(p, list);
    qsort(list, n, sizeof *list, job_cmp);
    for (size_t k = 1; k < n; k++)
        if (!job_cmp(&list[k - 1], &list[k]) ||
            (list[k].s == list[k - 1].s && list[k].b == list[k - 1].b &&
             list[k - 1].kind == JOB_B && list[k].kind == JOB_BI)) {
            say(err, len,
                "instruction %u (%s): job %s(%u,%u) already ran at instruction %u (expected each "
                "job once)",
                list[k].at, pp_op_name(p->code[list[k].at].op), job_name((int)list[k].kind),
                list[k].s, list[k].b, list[k - 1].at);
            return -1;
        }
    return 0;
}

static int check_roles(const pp_plan *p, const stage_state *st, char *err, size_t len)
{
    for (uint32_t s = 0; s < p->S; s++) {
        int compute = (p->stage_role[s] & PP_ROLE_COMPUTE) != 0;
        int owner = (p->stage_role[s] & PP_ROLE_OWNER) != 0;
        if (compute != st[s].jobs) {
            say(err, len, "stage %u has role '%s' but this rank runs %s of its jobs (expected %s)",
                s, compute ? "compute" : "not compute", st[s].jobs ? "some" : "none",
                st[s].jobs ? "the compute role" : "no compute role");
            return -1;
        }
        if (owner && st[s].phase != OWN_STEPPED) {
            say(err, len,
                "stage %u is owned by this rank but no OptimizerStep updates it (expected one "
                "per owned stage)",
                s);
            return -1;
        }
    }
    return 0;
}

int pp_verify_rank(const pp_plan *p, char *err, size_t len)
{
    if (pp_verify_sizes(p, err, len) || pp_buffer_check_plan(p, err, len))
        return -1;
    accum *acc = malloc(((size_t)p->nslots + 1) * sizeof *acc);
    stage_state *st = calloc((size_t)p->S, sizeof *st);
    job *list = malloc(((size_t)p->ninstr + 1) * sizeof *list);
    int rc = -1;
    if (!acc || !st || !list) {
        say(err, len, "out of memory verifying the plan");
        goto out;
    }
    for (uint32_t k = 0; k < p->nslots; k++)
        acc[k] = (accum){-1, 0, 0, 0};
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        if (job_kind(in->op) != JOB_NONE)
            st[in->stage].jobs = 1;
        if (in->op == PP_OP_OptimizerStep && st[in->stage].phase == OWN_STEPPED) {
            say(err, len,
                "instruction %u (OptimizerStep): stage %d was already optimized at %u "
                "(expected one optimizer step per owned stage)",
                i, in->stage, st[in->stage].stepped);
            goto out;
        }
        if (check_accum(p, i, acc, err, len) || check_own(p, i, st, err, len))
            goto out;
    }
    for (uint32_t k = 0; k < p->nslots; k++)
        if (acc[k].pending) {
            say(err, len,
                "slot s%u holds stage %d's weight gradients accumulated since instruction %u "
                "(ZeroGrads) that are never sent (expected SendWeightGrad before the end)",
                k, acc[k].stage, acc[k].zeroed);
            goto out;
        }
    if (check_roles(p, st, err, len) || check_jobs_once(p, list, err, len))
        goto out;
    say(err, len, "ok");
    rc = 0;
out:
    free(list);
    free(st);
    free(acc);
    return rc;
}

/* ---- layer 2: all ranks ----------------------------------------------------- */

/* Rank r's header against rank 0's. */
static int check_header(const pp_plan *a, const pp_plan *b, int r, char *err, size_t len)
{
    const pp_model *m = &a->model, *n = &b->model;
#define SAME(field, what)                                                                          \
    if (a->field != b->field) {                                                                    \
        say(err, len,                                                                              \
            "rank %d's plan has %s %llu but rank 0's has %llu (expected every rank's "             \
            "header alike)",                                                                       \
            r, what, (unsigned long long)b->field, (unsigned long long)a->field);                  \
        return -1;                                                                                 \
    }
    SAME(world, "world size")
    SAME(S, "S")
    SAME(B, "B")
    SAME(model.kind, "model kind")
    SAME(model.vocab, "vocab")
    SAME(model.context, "context")
    SAME(model.embed, "embed")
    SAME(model.heads, "heads")
    SAME(model.ffn, "ffn")
    SAME(model.blocks, "blocks")
    SAME(model.batch, "batch")
    SAME(model.optimizer, "optimizer")
    SAME(model.tensor, "tensor")
    SAME(model.precision, "precision")
    SAME(model.kv_heads, "kv_heads")
    SAME(model.rope_theta, "rope_theta")
    SAME(model.tie, "tie")
    if (memcmp(&a->model.norm_eps, &b->model.norm_eps, sizeof a->model.norm_eps)) {
        say(err, len,
            "rank %d's plan has norm_eps %g but rank 0's has %g (expected every rank's header "
            "alike)",
            r, (double)b->model.norm_eps, (double)a->model.norm_eps);
        return -1;
    }
    SAME(ngroups, "group count")
#undef SAME
    for (uint32_t s = 0; s < a->S; s++)
        if (pp_model_layers(m, (int)s) != pp_model_layers(n, (int)s)) {
            say(err, len,
                "rank %d's plan gives stage %u %u layers but rank 0's gives %u (expected every "
                "rank's header alike)",
                r, s, pp_model_layers(n, (int)s), pp_model_layers(m, (int)s));
            return -1;
        }
    for (uint32_t g = 0; g < a->ngroups; g++)
        if (a->groups[g].n != b->groups[g].n ||
            memcmp(a->groups[g].member, b->groups[g].member, a->groups[g].n * sizeof(uint32_t))) {
            say(err, len, "rank %d's group g%u differs from rank 0's (expected one group table)", r,
                g);
            return -1;
        }
    return 0;
}

/* The owners of each stage, and their gradient all-reduce: one pass over
 * the instructions, each group checked against a stage's owners once. */
static int check_owners(const pp_plan *plans, int W, char *err, size_t len)
{
    uint32_t S = plans[0].S;
    uint32_t *owners = calloc(S, sizeof *owners);
    int32_t *group_ok = malloc(S * sizeof *group_ok); /* the group proven to be s's owners */
    int32_t *seen = malloc(S * sizeof *seen);         /* the last rank that reduced s */
    int rc = -1;
    if (!owners || !group_ok || !seen) {
        say(err, len, "out of memory verifying the plans");
        goto out;
    }
    for (uint32_t s = 0; s < S; s++) {
        group_ok[s] = seen[s] = -1;
        for (int r = 0; r < W; r++)
            owners[s] += (plans[r].stage_role[s] & PP_ROLE_OWNER) != 0;
        if (!owners[s]) {
            say(err, len, "stage %u has no owner on any rank (expected at least one)", s);
            goto out;
        }
    }
    /* tensor = T: every worker's T ranks own alike (compiler/tensor.h), and
     * each t all-reduces among its own rank of each owner */
    uint32_t T = pp_model_tensor(&plans[0].model);
    for (uint32_t s = 0; s < S; s++)
        owners[s] /= T;
    for (int r = 0; r < W; r++) {
        const pp_plan *p = &plans[r];
        for (uint32_t i = 0; i < p->ninstr; i++) {
            const pp_instr *in = &p->code[i];
            if (in->op != PP_OP_ReduceGrads)
                continue;
            uint32_t s = (uint32_t)in->stage;
            const pp_group *g = &p->groups[in->group];
            int own = (p->stage_role[s] & PP_ROLE_OWNER) != 0;
            int match = own && owners[s] > 1 && seen[s] != r;
            if (match && (T > 1 || group_ok[s] != in->group)) {
                match = g->n == owners[s];
                for (uint32_t k = 0; match && k < g->n; k++)
                    match = (plans[g->member[k]].stage_role[s] & PP_ROLE_OWNER) != 0 &&
                            g->member[k] % T == (uint32_t)r % T;
                if (match)
                    group_ok[s] = in->group;
            }
            if (!match) {
                say(err, len,
                    "rank %d: instruction %u (ReduceGrads): all-reduces stage %u over group g%d, "
                    "but stage %u has %u owner(s)%s (expected one all-reduce over a group of "
                    "exactly its owners, on each owner, and none for a single owner)",
                    r, i, s, in->group, s, owners[s], own ? "" : ", not this rank");
                goto out;
            }
            seen[s] = r;
        }
        for (uint32_t s = 0; s < S; s++)
            if ((p->stage_role[s] & PP_ROLE_OWNER) && owners[s] > 1 && seen[s] != r) {
                say(err, len,
                    "rank %d owns stage %u with %u other owner(s) but never all-reduces its "
                    "gradients (expected one ReduceGrads)",
                    r, s, owners[s] - 1);
                goto out;
            }
    }
    rc = 0;
out:
    free(seen);
    free(group_ok);
    free(owners);
    return rc;
}

/* Every job exactly once over all ranks: F, and B or else BI and W. */
static int check_jobs(const pp_plan *plans, int W, char *err, size_t len)
{
    size_t total = 0;
    for (int r = 0; r < W; r++)
        total += plans[r].ninstr;
    job *list = malloc((total + 1) * sizeof *list);
    if (!list) {
        say(err, len, "out of memory verifying the plans");
        return -1;
    }
    size_t n = 0;
    for (int r = 0; r < W; r++)
        n += collect_jobs(&plans[r], list + n);
    qsort(list, n, sizeof *list, job_cmp);
    uint32_t S = plans[0].S, B = plans[0].B;
    /* tensor = T: each job once per tensor rank t, T times in all */
    int T = (int)pp_model_tensor(&plans[0].model);
    int rc = 0;
    size_t k = 0;
    for (uint32_t s = 0; s < S && !rc; s++)
        for (uint32_t b = 0; b < B && !rc; b++) {
            int count[JOB_NONE] = {0};
            uint32_t rank[JOB_NONE] = {0}, at[JOB_NONE] = {0};
            for (; k < n && list[k].s == s && list[k].b == b; k++) {
                count[list[k].kind]++;
                rank[list[k].kind] = list[k].rank;
                at[list[k].kind] = list[k].at;
            }
            int bk = count[JOB_BI] ? JOB_BI : JOB_B; /* the backward that reads F's stash */
            int split = count[JOB_BI] || count[JOB_W];
            if (count[JOB_F] != T) {
                say(err, len,
                    "job F(%u,%u) runs %d times over all ranks (expected exactly once%s)", s, b,
                    count[JOB_F], T > 1 ? " per tensor rank" : "");
                rc = -1;
            } else if (split ? count[JOB_B] || count[JOB_BI] != T || count[JOB_W] != T
                             : count[JOB_B] != T) {
                /* say every count: "B runs 1 times" would be no reason when
                 * the fault is a BackwardWeight beside it */
                say(err, len,
                    "job B(%u,%u) runs as %d Backward, %d BackwardInput and %d BackwardWeight "
                    "over all ranks (expected one Backward, or one BackwardInput and one "
                    "BackwardWeight)",
                    s, b, count[JOB_B], count[JOB_BI], count[JOB_W]);
                rc = -1;
            } else if (split && rank[JOB_BI] != rank[JOB_W]) {
                say(err, len,
                    "job W(%u,%u) runs on rank %u but its BackwardInput on rank %u (expected "
                    "both on one rank, which holds the stash)",
                    s, b, rank[JOB_W], rank[JOB_BI]);
                rc = -1;
            } else if (count[JOB_R] && count[JOB_R] != T) {
                say(err, len, "job R(%u,%u) runs %d times over all ranks (expected at most once%s)",
                    s, b, count[JOB_R], T > 1 ? ", on every tensor rank or none" : "");
                rc = -1;
            } else if (count[JOB_R] &&
                       (rank[JOB_R] != rank[bk] || rank[JOB_F] != rank[bk] ||
                        at[JOB_F] > at[JOB_R] || at[JOB_R] > at[bk])) {
                /* a re-run forward rebuilds the stash from F's kept input,
                 * between F and the backward, on the rank that holds both */
                say(err, len,
                    "job R(%u,%u) runs on rank %u at instruction %u, F on rank %u at %u, B on "
                    "rank %u at %u (expected all three on one rank, R after F and before B)",
                    s, b, rank[JOB_R], at[JOB_R], rank[JOB_F], at[JOB_F], rank[bk], at[bk]);
                rc = -1;
            }
        }
    free(list);
    return rc;
}

int pp_verify_world(const pp_plan *plans, int W, char *err, size_t len)
{
    for (int r = 0; r < W; r++) {
        if ((int)plans[r].rank != r || (int)plans[r].world != W) {
            say(err, len, "plan %d is rank %u of %u (expected rank %d of %d)", r, plans[r].rank,
                plans[r].world, r, W);
            return -1;
        }
        if (check_header(&plans[0], &plans[r], r, err, len))
            return -1;
    }
    if (check_owners(plans, W, err, len) || check_jobs(plans, W, err, len))
        return -1;
    if (pp_comm_check(plans, W, err, len))
        return -1;
    /* every rank's id is rank 0's (the handshake saw to it) */
    uint64_t id = pp_plans_id(plans, W);
    if (plans[0].plan_id != id) {
        say(err, len,
            "the plans' contents hash to %016llx, not to their plan id %016llx (expected the id "
            "ppc computed: a plan file was changed after ppc wrote it)",
            (unsigned long long)id, (unsigned long long)plans[0].plan_id);
        return -1;
    }
    say(err, len, "ok");
    return 0;
}
