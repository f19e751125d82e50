/* core.c - the VM core (core.h): per-stage state, overlapped pairs, the
 * non-finite check's findings, PP_INJECT_NAN, --skip-nonfinite's deferred
 * updates, --deterministic's ordered sums and the checkpoint copies, once
 * for both backends.
 *
 * Bad numbers (issue 16): each microbatch's loss (the last stage's
 * Forward), each input gradient a Backward or BackwardInput writes, and a
 * stage's summed weight gradients before its OptimizerStep are checked, by
 * the backend where its numbers are (the cpu on the host, the cuda backend
 * with a kernel whose findings it reads at the end of the step); the first
 * that is not finite is kept here for the driver (nonfinite), which has the
 * ranks agree at the end of the step. With --skip-nonfinite the
 * OptimizerSteps wait for that agreement (commit): every plan ppc makes
 * puts a stage's OptimizerStep after every use of its weights and gradients
 * in the step (init refuses a plan that does not), so running them at the
 * end of the step computes the same bits, and a skipped step costs no copy
 * of the weights or optimizer state.
 *
 * PP_INJECT_NAN=STEP:STAGE:MB[:WHERE] (a test hook) puts a NaN into job
 * (STAGE, MB) at step STEP (from 1): WHERE out (the default) into its
 * Forward's loss on the last stage, else its output's first element; din
 * into the input gradient its Backward or BackwardInput writes; wgrad into
 * the weight gradients its Backward or BackwardWeight adds to. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../isa/tied.h"
#include "../kernels/model.h"
#include "check.h"

/* PP_INJECT_NAN=STEP:STAGE:MB, when set; 0, or -1 with err. */
static int parse_inject(pp_vm_core *c, char *err, size_t errlen)
{
    static const char *where[] = {"out", "din", "wgrad"};
    const char *env = getenv("PP_INJECT_NAN");
    int step, stage, mb, end = 0, w = -1;
    if (!env)
        return 0;
    int n = sscanf(env, "%d:%d:%d%n", &step, &stage, &mb, &end);
    if (n == 3 && !env[end])
        w = PP_INJECT_OUT;
    for (int i = 0; n == 3 && env[end] == ':' && i < 3; i++)
        if (!strcmp(env + end + 1, where[i]))
            w = i;
    if (w < 0 || step < 1 || stage < 0 || stage >= (int)c->p->S || mb < 0 || mb >= (int)c->p->B) {
        snprintf(err, errlen,
                 "PP_INJECT_NAN=%.40s: expected STEP:STAGE:MB[:out|din|wgrad], a "
                 "step from 1, a stage in [0, %u) and a microbatch in [0, %u)",
                 env, c->p->S, c->p->B);
        return -1;
    }
    c->inject_where = w;
    c->inject_step = step;
    c->inject_stage = stage;
    c->inject_mb = mb;
    return 0;
}

/* --skip-nonfinite runs a stage's OptimizerStep at the end of the step,
 * which computes the same bits only if nothing later in the step uses the
 * stage's weights or gradients. 0, or -1 with err naming the instruction. */
static int check_deferrable(const pp_plan *p, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < p->ninstr; i++) {
        if (p->code[i].op != PP_OP_OptimizerStep)
            continue;
        for (uint32_t j = i + 1; j < p->ninstr; j++) {
            const pp_op_info *info = pp_op(p->code[j].op);
            if (p->code[j].stage == p->code[i].stage && info &&
                (info->params != PP_ACC_NO || info->grads != PP_ACC_NO)) {
                snprintf(err, errlen,
                         "--skip-nonfinite: instruction %u (%s) uses stage %d's "
                         "weights or gradients after its OptimizerStep (instruction %u), so the "
                         "update cannot wait for the end of the step",
                         j, info->name, p->code[j].stage, i);
                return -1;
            }
        }
    }
    return 0;
}

/* An owned stage's buffers, in the backend's memory. 0 or -1 with err. */
static int stage_alloc(pp_vm_core *c, int s, char *err, size_t errlen)
{
    const pp_model *m = &c->p->model;
    int S = (int)c->p->S;
    size_t n = pp_stage_param_count(m, S, s);
    size_t nstate = pp_optimizer_state_floats(m->optimizer) * n;
    if (c->mem->alloc((void **)&c->params[s], n * sizeof(float), err, errlen) ||
        c->mem->alloc((void **)&c->grads[s], n * sizeof(float), err, errlen) ||
        (nstate && c->mem->alloc((void **)&c->state[s], nstate * sizeof(float), err, errlen)))
        return -1;
    c->allocated += (2 * n + nstate) * sizeof(float);
    c->compute[s] = c->params[s];
    if (m->precision != PP_PREC_FP32) { /* a copy of its own */
        size_t bytes = pp_stage_compute_bytes(m, S, s);
        c->compute[s] = NULL;
        if (c->mem->alloc(&c->compute[s], bytes, err, errlen))
            return -1;
        c->allocated += bytes;
    }
    return 0;
}

/* The two tied stages of an owner of both (isa/tied.h): one buffer for the
 * weights, and one for the compute copy, holds stage S-1's own part and
 * then stage 0's, so stage S-1's head (its last tensor) is stage 0's token
 * embedding (its first); the gradients apart, whole; the optimizer state
 * apart, stage S-1's only for its own part. params[0] and compute[0] point
 * into stage S-1's buffers (pp_vm_core_free releases those). 0 or -1. */
static int tied_alloc(pp_vm_core *c, char *err, size_t errlen)
{
    const pp_model *m = &c->p->model;
    int S = (int)c->p->S, last = S - 1;
    size_t n0 = pp_stage_param_count(m, S, 0), n1 = pp_stage_param_count(m, S, last);
    size_t own = pp_vm_core_own_count(c, last);
    size_t k = pp_optimizer_state_floats(m->optimizer), wb = pp_precision_weight_bytes(m->precision);
    if (c->mem->alloc((void **)&c->params[last], (own + n0) * sizeof(float), err, errlen))
        return -1;
    c->params[0] = c->params[last] + own;
    if (c->mem->alloc((void **)&c->grads[0], n0 * sizeof(float), err, errlen) ||
        c->mem->alloc((void **)&c->grads[last], n1 * sizeof(float), err, errlen))
        return -1;
    if (k && (c->mem->alloc((void **)&c->state[0], k * n0 * sizeof(float), err, errlen) ||
              c->mem->alloc((void **)&c->state[last], k * own * sizeof(float), err, errlen)))
        return -1;
    c->allocated += ((1 + k) * (own + n0) + n0 + n1) * sizeof(float);
    c->compute[0] = c->params[0];
    c->compute[last] = c->params[last];
    if (m->precision != PP_PREC_FP32) {
        c->compute[last] = NULL;
        if (c->mem->alloc(&c->compute[last], (own + n0) * wb, err, errlen))
            return -1;
        c->compute[0] = (char *)c->compute[last] + own * wb;
        c->allocated += (own + n0) * wb;
    }
    return 0;
}

size_t pp_vm_core_own_count(const pp_vm_core *c, int s)
{
    return pp_stage_own_count(&c->p->model, (int)c->p->S, s, c->tied_shared);
}

/* --deterministic's buffers: determ.h's per-microbatch gradients and, for
 * a backend whose memory is not the host's, a host sum per owned stage. */
static int det_init(pp_vm_core *c, char *err, size_t errlen)
{
    const pp_plan *p = c->p;
    int S = (int)p->S;
    c->det = pp_determ_create(p, &c->det_bytes);
    c->det_sum = calloc((size_t)S, sizeof *c->det_sum);
    c->det_early = calloc((size_t)S, 1);
    c->det_comm = malloc((p->ngroups + 1) * sizeof *c->det_comm);
    for (uint32_t g = 0; c->det_comm && g < p->ngroups; g++)
        c->det_comm[g] = MPI_COMM_NULL; /* until connect; free reads them */
    if (!c->det || !c->det_sum || !c->det_comm || !c->det_early)
        goto oom;
    for (int s = 0; s < S; s++) {
        if (!c->grads[s] || !pp_determ_tracks(c->det, s))
            continue;
        if (c->mem->host) {
            c->det_sum[s] = c->grads[s];
            continue;
        }
        size_t n = pp_stage_param_count(&p->model, S, s);
        if (!(c->det_sum[s] = calloc(n, sizeof(float))))
            goto oom;
        c->det_bytes += n * sizeof(float);
    }
    c->allocated += c->det_bytes;
    return 0;
oom:
    snprintf(err, errlen, "out of memory allocating --deterministic's per-microbatch gradients");
    return -1;
}

/* Every operation the dispatch (vm/exec.c) calls without asking, so that
 * a backend lacking one (a new opcode's) stops at start-up, not inside a
 * step. 0, or -1 with err. */
static int check_ops(const pp_plan *p, const pp_vm_ops *o, const pp_vm_mem *mem, char *err,
                     size_t errlen)
{
/* clang-format off */
#define PP_OPS_REQUIRED(X)                                                                         \
    X(slot) X(weights) X(grads) X(det_grads) X(load) X(forward) X(loss) X(backward)                \
    X(backward_input) X(backward_weight) X(poison) X(check) X(check_bf16) X(zero) X(accumulate)    \
    X(update) X(send) X(recv) X(reduce) X(mark) X(elapsed)
/* clang-format on */
#define PP_OPS_CHECK(name)                                                                         \
    if (!o->name) {                                                                                \
        snprintf(err, errlen, "this backend lacks the VM core's operation '%s'", #name);           \
        return -1;                                                                                 \
    }
    PP_OPS_REQUIRED(PP_OPS_CHECK)
#undef PP_OPS_CHECK
#undef PP_OPS_REQUIRED
    for (uint32_t i = 0; !o->host_copy && i < p->ninstr; i++)
        if (p->code[i].op == PP_OP_Offload || p->code[i].op == PP_OP_Reload) {
            snprintf(err, errlen,
                     "this backend cannot run offload: instruction %u is %s (expected a plan "
                     "compiled without 'offload when', or the cpu backend)",
                     i, pp_op_name(p->code[i].op));
            return -1;
        }
    if (!mem->host && (!o->det_done || !o->det_put)) { /* its gradients are not in host memory */
        snprintf(err, errlen, "this backend lacks the VM core's operations det_done and det_put");
        return -1;
    }
    return 0;
}

int pp_vm_core_init(pp_vm_core *c, pp_run *run, const pp_vm_mem *mem, const pp_vm_ops *ops,
                    char *err, size_t errlen)
{
    const pp_plan *p = run->p;
    int S = (int)p->S;
    *c = (pp_vm_core){.run = run,
                      .ops = ops,
                      .p = p,
                      .ds = run->ds,
                      .opts = run->opts,
                      .mem = mem,
                      .me = run->me,
                      .nc = run->opts->no_compute,
                      .first = {.kind = PP_NF_NONE, .stage = -1, .mb = -1}};
    if (check_ops(p, ops, mem, err, errlen))
        return -1;
    if (pp_model_tensor(&p->model) > 1 && !ops->tensor) {
        snprintf(err, errlen,
                 "the plan is tensor-parallel (tensor = %u), which this backend does not run "
                 "(it has no tensor operation; compile with tensor = 1 for it)",
                 pp_model_tensor(&p->model));
        return -1;
    }
    c->params = calloc((size_t)S, sizeof *c->params);
    c->grads = calloc((size_t)S, sizeof *c->grads);
    c->state = calloc((size_t)S, sizeof *c->state);
    c->compute = calloc((size_t)S, sizeof *c->compute);
    c->deferred = malloc((p->ninstr + 1) * sizeof *c->deferred);
    c->g_zero = calloc((size_t)S, 1); /* unknown until the backend zeroes them */
    if (!c->params || !c->grads || !c->state || !c->compute || !c->deferred || !c->g_zero) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->tied_shared = pp_plan_tied_shared(p);
    if (c->tied_shared && tied_alloc(c, err, errlen))
        return -1;
    for (int s = 0; s < S; s++)
        if ((p->stage_role[s] & PP_ROLE_OWNER) && !c->params[s] && stage_alloc(c, s, err, errlen))
            return -1;
    if (parse_inject(c, err, errlen) ||
        (c->opts->skip_nonfinite && check_deferrable(p, err, errlen)))
        return -1;
    return c->opts->deterministic ? det_init(c, err, errlen) : 0;
}

void pp_vm_core_free(pp_vm_core *c)
{
    const pp_plan *p = c->p;
    for (uint32_t s = 0; s < p->S; s++) {
        if (c->det_sum && c->grads && c->det_sum[s] != c->grads[s])
            free(c->det_sum[s]);
        if (c->state)
            c->mem->release(c->state[s]);
        if (c->grads)
            c->mem->release(c->grads[s]);
        if (s == 0 && c->tied_shared) /* inside stage S-1's buffers (tied_alloc) */
            continue;
        if (c->compute && c->params && c->compute[s] != c->params[s])
            c->mem->release(c->compute[s]);
        if (c->params)
            c->mem->release(c->params[s]);
    }
    pp_determ_free(c->det);
    for (uint32_t g = 0; c->det_comm && g < p->ngroups; g++)
        if (c->det_comm[g] != MPI_COMM_NULL)
            mpiCheck(MPI_Comm_free(&c->det_comm[g]));
    free(c->det_comm);
    free(c->det_sum);
    free(c->det_early);
    free(c->params);
    free(c->grads);
    free(c->state);
    free(c->compute);
    free(c->deferred);
    free(c->g_zero);
}

/* --deterministic: its communicators (the replica groups': every rank has
 * the same group table, so these collective splits match), and a note
 * (before the memory line, which includes them) of what its per-microbatch
 * gradients take on each rank. */
void pp_vm_core_connect(pp_vm_core *c)
{
    const pp_plan *p = c->p;
    if (!c->det)
        return;
    for (uint32_t g = 0; g < p->ngroups; g++) {
        int member = 0;
        for (uint32_t i = 0; i < p->groups[g].n; i++)
            member |= p->groups[g].member[i] == (uint32_t)c->me;
        mpiCheck(
            MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, c->me, &c->det_comm[g]));
    }
    unsigned long long *all = c->me == 0 ? malloc(p->world * sizeof *all) : NULL;
    pp_determ_connect(c->det);
    mpiCheck(MPI_Gather(&c->det_bytes, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, 0,
                        MPI_COMM_WORLD));
    if (all && !c->opts->quiet) {
        printf("deterministic: per-microbatch weight gradients, bytes per rank (in the memory "
               "below):");
        for (uint32_t r = 0; r < p->world; r++)
            printf(" %llu", all[r]);
        printf("\n");
    }
    free(all);
}

int pp_vm_core_pair_pos(pp_vm_core *c, const pp_instr *in)
{
    if (in->op == PP_OP_Overlap) {
        c->pair_left = 2;
        return 0;
    }
    if (pp_op(in->op)->kind != PP_KIND_COMPUTE || c->pair_left <= 0)
        return 0;
    return 3 - c->pair_left--;
}

int pp_vm_core_inject_here(const pp_vm_core *c, const pp_instr *in, int where)
{
    return c->run->step + 1 == c->inject_step && in->stage == c->inject_stage &&
           in->mb == c->inject_mb && c->inject_where == where;
}

void pp_vm_core_note(pp_vm_core *c, pp_nf_kind kind, int s, int b, double value)
{
    pp_nonfinite f = {.kind = kind, .stage = s, .mb = b, .value = value};
    int S = (int)c->p->S, B = (int)c->p->B;
    if (c->first.kind == PP_NF_NONE ||
        pp_nonfinite_order(&f, S, B) < pp_nonfinite_order(&c->first, S, B))
        c->first = f;
}

int pp_vm_core_defer(pp_vm_core *c, const pp_instr *in)
{
    if (!c->opts->skip_nonfinite)
        return 0;
    c->deferred[c->ndeferred++] = in; /* until the ranks agree: commit */
    return 1;
}

int pp_vm_core_det(const pp_vm_core *c, int s)
{
    return c->det && s >= 0 && s < (int)c->p->S && pp_determ_tracks(c->det, s);
}

float *pp_vm_core_det_job(pp_vm_core *c, int s, int b) { return pp_determ_job(c->det, s, b); }

void pp_vm_core_det_done(pp_vm_core *c, int s, int b)
{
    pp_determ_done(c->det, s, b, c->det_sum[s]);
}

void pp_vm_core_det_transfer(pp_vm_core *c, const pp_instr *in)
{
    int s = in->stage;
    switch ((pp_opcode)in->op) {
    case PP_OP_SendWeightGrad:
        pp_determ_send(c->det, s, in->peer);
        break;
    case PP_OP_RecvWeightGrad:
        pp_determ_recv(c->det, s, in->peer, c->det_sum[s]);
        break;
    case PP_OP_ReduceGrads:
        pp_determ_reduce(c->det, s, c->det_comm[in->group], c->det_sum[s]);
        break;
    default:
        break;
    }
}

const float *pp_vm_core_det_sum(pp_vm_core *c, int s)
{
    pp_determ_finish(c->det, s); /* the gradients summed in microbatch order */
    if (c->det_early[s]) {       /* put already, and the tied sum added there */
        c->det_early[s] = 0;
        return c->grads[s];
    }
    return c->det_sum[s];
}

const float *pp_vm_core_det_tied(pp_vm_core *c, int s)
{
    pp_determ_check(c->det, s,
                    "the tied embedding's sum came before this microbatch's weight gradient");
    if (c->det_sum[s] == c->grads[s] || c->det_early[s])
        return NULL;
    c->det_early[s] = 1;
    return c->det_sum[s];
}

void pp_vm_core_end_step(pp_vm_core *c)
{
    if (c->det)
        pp_determ_end_step(c->det);
}

/* ---- the shared backend hooks (backend.h) --------------------------------- */

unsigned long long pp_vm_core_allocated(void *be) { return ((pp_vm_core *)be)->allocated; }
unsigned long long pp_vm_core_host_allocated(void *be)
{
    return ((pp_vm_core *)be)->host_allocated;
}

void pp_vm_core_weights(void *be, int s, float *out)
{
    pp_vm_core *c = be;
    c->mem->to_host(out, c->params[s],
                    pp_stage_param_count(&c->p->model, (int)c->p->S, s) * sizeof *out);
}

/* A checkpoint's copy of stage s (backend.h), after end_step (and commit):
 * no operation is in flight, so the buffers are at rest. */
void pp_vm_core_stage_get(void *be, int s, float *params, float *state, void *compute)
{
    pp_vm_core *c = be;
    const pp_model *m = &c->p->model;
    int S = (int)c->p->S;
    size_t n = pp_stage_param_count(m, S, s), own = pp_vm_core_own_count(c, s);
    size_t k = pp_optimizer_state_floats(m->optimizer);
    c->mem->to_host(params, c->params[s], n * sizeof *params);
    /* each moment of the whole stage: stage S-1's own part, then (stored
     * once, isa/tied.h) its head's, which is stage 0's embedding's */
    for (size_t i = 0; state && i < k; i++) {
        c->mem->to_host(state + i * n, c->state[s] + i * own, own * sizeof *state);
        if (own < n)
            c->mem->to_host(state + i * n + own,
                            c->state[0] + i * pp_stage_param_count(m, S, 0) +
                                pp_stage_tied_offset(m, S, 0),
                            (n - own) * sizeof *state);
    }
    if (compute)
        c->mem->to_host(compute, c->compute[s], pp_stage_compute_bytes(m, S, s));
}

void pp_vm_core_stage_set(void *be, int s, const float *params, const float *state,
                          const void *compute)
{
    pp_vm_core *c = be;
    const pp_model *m = &c->p->model;
    int S = (int)c->p->S;
    size_t n = pp_stage_param_count(m, S, s), own = pp_vm_core_own_count(c, s);
    size_t k = pp_optimizer_state_floats(m->optimizer);
    /* (stored once: stage S-1's head is stage 0's embedding, the same
     * numbers in a checkpoint, so writing it twice is harmless) */
    c->mem->from_host(c->params[s], params, n * sizeof *params);
    for (size_t i = 0; state && i < k; i++)
        c->mem->from_host(c->state[s] + i * own, state + i * n, own * sizeof *state);
    if (compute)
        c->mem->from_host(c->compute[s], compute, pp_stage_compute_bytes(m, S, s));
    if (c->mem->settle)
        c->mem->settle(); /* start-up only */
}

void pp_vm_core_nonfinite(void *be, pp_nonfinite *first)
{
    pp_vm_core *c = be;
    *first = c->first;
    c->first = (pp_nonfinite){.kind = PP_NF_NONE, .stage = -1, .mb = -1};
}
