/* test_report.c - the simulator's report: exact counts on small cases (the
 * seed's Table 1 entries where they are exact), the closed-form bubbles of
 * ../shared/design.md, the seed's LPP interpolation, transfer costs, --costs,
 * ppc's report files (a golden report.txt, well-formed SVG, valid JSON) and
 * --table. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/keep.h"
#include "../../compiler/replay.h"
#include "../../compiler/readfile.h"
#include "../../compiler/report.h"
#include "../../kernels/model.h"
#include "suites.h"
#include "testutil.h"

static void build_report(const compiled *c, pp_report *r)
{
    ck_assert_int_eq(c->errors + c->deadlock, 0);
    ck_assert_int_eq(pp_report_build(r, &c->t, &c->sim, &c->sch.model), 0);
}

/* GPipe (W = S), F-first priority, unit costs: makespan 2(S+B-1); interior
 * workers receive 2B (B activations, B gradients), the two ends B; nothing
 * is fetched; each worker holds all B microbatches at its peak and one
 * stage's weights. */
START_TEST(gpipe_counts)
{
    pp_define defs[] = {{"S", 4}, {"B", 6}};
    compiled c;
    compile_library(&c, "gpipe.pp", defs, 2);
    pp_report r;
    build_report(&c, &r);
    ck_assert_double_eq(r.makespan, 2 * (4 + 6 - 1));
    uint64_t act = (uint64_t)c.sch.model.batch * c.sch.model.context * c.sch.model.embed * 4;
    for (int w = 0; w < 4; w++) {
        long long want = w == 0 || w == 3 ? 6 : 12;
        ck_assert_int_eq(r.w[w].act_recv, want);
        ck_assert_uint_eq(r.w[w].act_recv_bytes, (uint64_t)want * act);
        ck_assert_int_eq(r.w[w].weight_recv, 0);
        ck_assert_int_eq(r.w[w].peak_act, 6);
        ck_assert_int_eq(r.w[w].weight_store, 1);
        ck_assert_uint_eq(r.w[w].weight_store_bytes, pp_stage_weight_bytes(&c.sch.model, 4, w));
        ck_assert_uint_eq(r.w[w].grad_store_bytes, r.w[w].weight_store_bytes);
        ck_assert_int_eq(r.w[w].jobs, 12);
    }
    /* (p-1)/(m+p-1) */
    ck_assert_double_eq_tol(r.bubble, 3.0 / 9.0, 1e-12);
    ck_assert_int_eq(r.nxfer, 2 * 3 * 6);
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

/* AdamW's two moments are state only owners hold: DDP replicas each hold
 * them for every stage, FSDP workers for their own stage only, and the
 * lowered plan's memory includes them. */
START_TEST(adamw_state_on_owners)
{
    static const char *lib[] = {"ddp.pp", "fsdp.pp"};
    for (int i = 0; i < 2; i++) {
        pp_define defs[] = {{"S", 4}};
        compiled c;
        compile_library(&c, lib[i], defs, 1);
        pp_report sgd, adamw;
        build_report(&c, &sgd);
        c.sch.model.optimizer = PP_OPT_ADAMW;
        build_report(&c, &adamw);
        ck_assert_int_eq(adamw.optimizer, PP_OPT_ADAMW);
        for (int w = 0; w < c.t.W; w++) {
            ck_assert_uint_eq(sgd.w[w].opt_store_bytes, 0);
            ck_assert_uint_eq(adamw.w[w].opt_store_bytes, 2 * adamw.w[w].weight_store_bytes);
            ck_assert_uint_eq(adamw.w[w].weight_store_bytes, sgd.w[w].weight_store_bytes);
        }
        uint64_t fsdp_own = pp_stage_weight_bytes(&c.sch.model, 4, 1);
        if (i == 1)
            ck_assert_uint_eq(adamw.w[1].opt_store_bytes, 2 * fsdp_own);
        pp_lower_opts lo = {1, 0};
        pp_plan *plans, *plain;
        ck_assert_int_eq(pp_compile_plans(&c.t, &c.sim, &c.sch.model, &lo, &c.diag, &plans), 0);
        c.sch.model.optimizer = PP_OPT_SGD;
        ck_assert_int_eq(pp_compile_plans(&c.t, &c.sim, &c.sch.model, &lo, &c.diag, &plain), 0);
        for (int w = 0; w < c.t.W; w++) {
            ck_assert_uint_eq(plans[w].model.optimizer, PP_OPT_ADAMW);
            ck_assert_uint_eq(pp_plan_memory(&plans[w]) - pp_plan_memory(&plain[w]),
                              adamw.w[w].opt_store_bytes);
        }
        pp_plans_free(plans, c.t.W);
        pp_plans_free(plain, c.t.W);
        pp_report_free(&sgd);
        pp_report_free(&adamw);
        compiled_free(&c);
    }
}
END_TEST

/* A library schedule with lines appended (e.g. "precision bf16"). */
static void compile_library_with(compiled *c, const char *name, const char *extra,
                                 const pp_define *defs, int ndefs)
{
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, name);
    char *src = pp_read_file(path, &len, NULL);
    ck_assert_ptr_nonnull(src);
    char *all = malloc(len + strlen(extra) + 2);
    sprintf(all, "%s\n%s", src, extra);
    compile_src(c, all, defs, ndefs);
    free(all);
    free(src);
    ck_assert_msg(c->errors + c->deadlock == 0, "%.*s", (int)c->msglen, c->msgs);
}

/* Lowered and verified (pp_compile_plans), as ppc would write them. */
static pp_plan *lower_all(compiled *c)
{
    pp_lower_opts lo = {1, 0};
    pp_plan *plans;
    ck_assert_msg(pp_compile_plans(&c->t, &c->sim, &c->sch.model, &lo, &c->diag, &plans) == 0, "%s",
                  c->msgs);
    return plans;
}

/* What a plan's weight-related slots must hold, role by role (the rule the
 * VM checks; a slot may be larger, shared with a larger buffer at another
 * time): fetched weights (wts) the stage's compute copy, the weight
 * gradients a non-owner accumulates (wgrad) and returns, and the owner's
 * temporary for them (tmp), fp32. Returns the bytes of weight-gradient
 * returns the plan sends, and adds the bytes its fetches move to *fetched. */
static uint64_t check_weight_slots(const pp_plan *p, uint64_t *fetched)
{
    const pp_model *m = &p->model;
    int S = (int)p->S;
    uint64_t grads_sent = 0;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        int s = in->stage, wts = -1, wgrad = -1;
        /* its slot operands that hold weights, or weight gradients (the table's contents) */
        for (int k = 0; k < pp_op_nslots(in->op); k++) {
            pp_content c = pp_op(in->op)->slot[k].content;
            if (c == PP_CONTENT_WTS)
                wts = k;
            else if (c == PP_CONTENT_WGRAD || c == PP_CONTENT_TMP)
                wgrad = k;
        }
        if (wts < 0 && wgrad < 0) /* no weights: its stage may be none (-1) */
            continue;
        uint64_t wbytes = pp_stage_compute_bytes(m, S, s);
        uint64_t gbytes = pp_stage_param_count(m, S, s) * sizeof(float);
        if (wts >= 0 && in->slot[wts] >= 0) {
            ck_assert_uint_ge(p->slot_bytes[in->slot[wts]], wbytes);
            if (in->op == PP_OP_FetchWeights)
                *fetched += wbytes;
        }
        if (wgrad >= 0 && in->slot[wgrad] >= 0) {
            ck_assert_uint_ge(p->slot_bytes[in->slot[wgrad]], gbytes);
            if (in->op == PP_OP_SendWeightGrad)
                grads_sent += gbytes;
        }
    }
    return grads_sent;
}

/* What ppvm allocates, written out independently of pp_plan_memory: every
 * slot, one workspace for the largest stage the rank computes, and per
 * owned stage of n weights its fp32 weights and gradients and the
 * optimizer's state, (2 + state floats) * 4n, plus with bf16 the compute
 * copy, 2n. */
static uint64_t expected_memory(const pp_plan *p)
{
    uint64_t bytes = 0, work = 0;
    for (uint32_t k = 0; k < p->nslots; k++)
        bytes += p->slot_bytes[k];
    for (uint32_t s = 0; s < p->S; s++)
        if ((p->stage_role[s] & PP_ROLE_COMPUTE) &&
            pp_stage_workspace_bytes(&p->model, (int)p->S, (int)s) > work)
            work = pp_stage_workspace_bytes(&p->model, (int)p->S, (int)s);
    ck_assert_uint_gt(work, 0);
    ck_assert_uint_eq(p->workspace_bytes, work);
    bytes += work;
    for (uint32_t s = 0; s < p->S; s++)
        if (p->stage_role[s] & PP_ROLE_OWNER) {
            uint64_t n = pp_stage_param_count(&p->model, (int)p->S, (int)s);
            bytes += (2 + pp_optimizer_state_floats(p->model.optimizer)) * 4 * n;
            bytes += p->model.precision == PP_PREC_BF16 ? 2 * n : 0;
        }
    return bytes;
}

/* bf16 under FSDP: fetches move the bf16 compute copy, so the same fetches
 * move half the bytes (and take half the time for the bandwidth); weight
 * gradients go back to their owners in fp32 as before; each owner holds
 * the bf16 copy of its stage beside its fp32 weights, gradients and (AdamW)
 * moments, and the plan's memory is exactly the slots, the workspace and
 * that. */
START_TEST(bf16_fsdp_halves_weight_traffic)
{
    pp_define defs[] = {{"S", 4}};
    compiled c32, c16;
    compile_library_with(&c32, "fsdp.pp", "cost bandwidth = 1000\n", defs, 1);
    compile_library_with(&c16, "fsdp.pp", "cost bandwidth = 1000\nprecision bf16\n", defs, 1);
    ck_assert_uint_eq(c16.sch.model.precision, PP_PREC_BF16);
    pp_report r32, r16;
    build_report(&c32, &r32);
    build_report(&c16, &r16);
    ck_assert_uint_eq(r32.precision, PP_PREC_FP32);
    ck_assert_uint_eq(r16.precision, PP_PREC_BF16);
    for (int s = 0; s < 4; s++) {
        ck_assert_uint_eq(c16.t.wbytes[s], c32.t.wbytes[s]);
        ck_assert_uint_eq(2 * c16.t.cbytes[s], c32.t.cbytes[s]);
        ck_assert_uint_eq(c32.t.cbytes[s], c32.t.wbytes[s]);
    }
    for (int j = 0; j < job_count(&c16.t.js); j++) {
        ck_assert_int_eq(c16.t.fetch[j] > 0, c32.t.fetch[j] > 0);
        ck_assert_double_eq_tol(2 * c16.t.fetch[j], c32.t.fetch[j], 1e-9);
    }
    for (int w = 0; w < 4; w++) {
        const pp_worker_report *a = &r32.w[w], *b = &r16.w[w];
        ck_assert_int_eq(b->weight_recv, a->weight_recv);
        ck_assert_int_eq(b->weight_recv, 2 * 3);
        ck_assert_uint_eq(2 * b->weight_recv_bytes, a->weight_recv_bytes);
        ck_assert_int_eq(b->act_recv, a->act_recv);
        ck_assert_uint_eq(b->weight_store_bytes, a->weight_store_bytes);
        ck_assert_uint_eq(b->grad_store_bytes, a->grad_store_bytes);
        ck_assert_uint_eq(a->copy_store_bytes, 0);
        ck_assert_uint_eq(b->copy_store_bytes, pp_stage_compute_bytes(&c16.sch.model, 4, w));
        ck_assert_uint_eq(2 * b->copy_store_bytes, b->weight_store_bytes);
    }
    for (int i = 0; i < r16.nxfer; i++)
        if (r16.xfer[i].kind == XFER_WEIGHT)
            ck_assert_uint_eq(r16.xfer[i].bytes, c16.t.cbytes[job_s(&c16.t.js, r16.xfer[i].job)]);
    for (int opt = 0; opt < PP_OPT_COUNT; opt++) {
        c32.sch.model.optimizer = c16.sch.model.optimizer = (uint32_t)opt;
        pp_plan *p32 = lower_all(&c32), *p16 = lower_all(&c16);
        for (int w = 0; w < 4; w++) {
            ck_assert_uint_eq(p16[w].model.precision, PP_PREC_BF16);
            uint64_t f32 = 0, f16 = 0;
            uint64_t g32 = check_weight_slots(&p32[w], &f32),
                     g16 = check_weight_slots(&p16[w], &f16);
            ck_assert_uint_gt(f32, 0);
            ck_assert_uint_eq(2 * f16, f32); /* the same fetches, half the bytes */
            ck_assert_uint_eq(f16, r16.w[w].weight_recv_bytes);
            ck_assert_uint_gt(g32, 0);
            ck_assert_uint_eq(g16, g32); /* gradient returns unchanged */
            ck_assert_uint_eq(pp_plan_memory(&p16[w]), expected_memory(&p16[w]));
            ck_assert_uint_eq(pp_plan_memory(&p32[w]), expected_memory(&p32[w]));
        }
        pp_plans_free(p32, 4);
        pp_plans_free(p16, 4);
    }
    pp_report_free(&r32);
    pp_report_free(&r16);
    compiled_free(&c32);
    compiled_free(&c16);
}
END_TEST

/* The report's step: the makespan, then the step's end. DDP with S=B=W=4
 * and unit jobs ends its jobs at 8 on every worker; then each stage's ring
 * all-reduce among the 4 replicas, in stage order, 2(R-1) = 6 transfers of
 * a quarter of the stage's gradients (latency 1, 1000 bytes per unit);
 * then each worker's 4 optimizer steps (O = 2). */
START_TEST(step_adds_the_end_of_the_step)
{
    pp_define defs[] = {{"S", 4}, {"B", 4}};
    compiled c;
    compile_library_with(&c, "ddp.pp", "cost latency = 1\ncost bandwidth = 1000\n", defs, 2);
    for (int s = 0; s < 4; s++)
        c.t.opt[s] = 2;
    pp_report r;
    build_report(&c, &r);
    ck_assert_double_eq(r.makespan, 8);
    double want = 8 + 4 * 2;
    for (int s = 0; s < 4; s++)
        want += 6 * (1 + (double)c.t.wbytes[s] / 4 / 1000);
    ck_assert_double_eq_tol(r.step, want, 1e-9 * want);
    pp_report_free(&r);
    compiled_free(&c);

    /* FSDP: every worker returns the gradients of the stages it does not
     * own to their owners after its last job, which end the step later than
     * the makespan by at least one return of the smallest stage */
    defs[1].value = 4;
    compile_library_with(&c, "fsdp.pp", "cost latency = 1\ncost bandwidth = 1000\n", defs, 2);
    build_report(&c, &r);
    uint64_t least = c.t.wbytes[0];
    for (int s = 1; s < 4; s++)
        least = c.t.wbytes[s] < least ? c.t.wbytes[s] : least;
    ck_assert_double_ge(r.step, r.makespan + 1 + (double)least / 1000);
    pp_report_free(&r);
    compiled_free(&c);

    /* with no transfer costs and no optimizer cost the step is the makespan */
    static const char *const lib[] = {"gpipe.pp", "1f1b.pp", "zb-h1.pp", "fsdp.pp",
                                      "ddp.pp",   "lpp.pp",  "fslpp.pp"};
    for (size_t k = 0; k < sizeof lib / sizeof *lib; k++) {
        compile_library(&c, lib[k], defs, 2);
        build_report(&c, &r);
        ck_assert_msg(r.step == r.makespan, "%s: step %g, makespan %g", lib[k], r.step, r.makespan);
        pp_report_free(&r);
        compiled_free(&c);
    }
}
END_TEST

/* bf16 under DDP: nothing moves but the all-reduce, so only memory changes:
 * every replica keeps the bf16 copy of every stage, half its fp32 weights,
 * and the plan's memory adds exactly that to the slots and fp32 state. */
START_TEST(bf16_ddp_memory)
{
    pp_define defs[] = {{"S", 4}};
    compiled c;
    compile_library_with(&c, "ddp.pp", "precision bf16\noptimizer adamw\n", defs, 1);
    pp_report r;
    build_report(&c, &r);
    uint64_t copies = 0, fp32 = 0;
    for (int s = 0; s < 4; s++) {
        copies += pp_stage_compute_bytes(&c.sch.model, 4, s);
        fp32 += pp_stage_weight_bytes(&c.sch.model, 4, s);
    }
    ck_assert_uint_eq(2 * copies, fp32);
    pp_plan *plans = lower_all(&c);
    for (int w = 0; w < 4; w++) {
        ck_assert_int_eq(r.w[w].weight_recv, 0);
        ck_assert_uint_eq(r.w[w].weight_store_bytes, fp32);
        ck_assert_uint_eq(r.w[w].opt_store_bytes, 2 * fp32);
        ck_assert_uint_eq(r.w[w].copy_store_bytes, copies);
        uint64_t slots = 0;
        for (uint32_t k = 0; k < plans[w].nslots; k++)
            slots += plans[w].slot_bytes[k];
        ck_assert_uint_eq(pp_plan_memory(&plans[w]),
                          slots + plans[w].workspace_bytes + 4 * fp32 + copies);
        ck_assert_uint_eq(pp_plan_memory(&plans[w]), expected_memory(&plans[w]));
        uint64_t fetched = 0;
        ck_assert_uint_eq(check_weight_slots(&plans[w], &fetched), 0);
        ck_assert_uint_eq(fetched, 0);
    }
    pp_plans_free(plans, 4);
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

/* DDP: no transfers at all; every worker holds every stage. */
START_TEST(ddp_counts)
{
    pp_define defs[] = {{"S", 5}, {"B", 4}};
    compiled c;
    compile_library(&c, "ddp.pp", defs, 2);
    pp_report r;
    build_report(&c, &r);
    ck_assert_int_eq(r.nxfer, 0);
    ck_assert_double_eq(r.makespan, 10);
    ck_assert_double_eq(r.bubble, 0);
    for (int w = 0; w < 4; w++) {
        ck_assert_int_eq(r.w[w].act_recv + r.w[w].weight_recv, 0);
        ck_assert_int_eq(r.w[w].weight_store, 5);
        ck_assert_int_eq(r.w[w].peak_act, 5);
    }
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

/* FSDP with W = B = S: every worker fetches the S-1 stages it does not own,
 * once per pass (the seed's formula), and owns one. */
START_TEST(fsdp_fetches_s_minus_1_per_pass)
{
    pp_define defs[] = {{"S", 4}};
    compiled c;
    compile_library(&c, "fsdp.pp", defs, 1);
    pp_report r;
    build_report(&c, &r);
    for (int w = 0; w < 4; w++) {
        ck_assert_int_eq(r.w[w].weight_recv, 2 * 3);
        uint64_t others = 0;
        for (int s = 0; s < 4; s++)
            if (s != w)
                others += pp_stage_weight_bytes(&c.sch.model, 4, s);
        ck_assert_uint_eq(r.w[w].weight_recv_bytes, 2 * others);
        ck_assert_int_eq(r.w[w].weight_store, 1);
        ck_assert_int_eq(r.w[w].act_recv, 0);
    }
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

/* FSLPP: each worker fetches what the seed's formula says, counted here
 * straight from its h(s,b): per job, 1[weights(s,b) != compute(s,b)]. */
START_TEST(fslpp_fetches_match_the_seed)
{
    const long long S = 4, B = 8, G = 2, R = 2, W = G * R;
    pp_define defs[] = {{"S", S}, {"B", B}, {"G", G}, {"R", R}};
    compiled c;
    compile_library(&c, "fslpp.pp", defs, 4);
    pp_report r;
    build_report(&c, &r);
    for (long long w = 0; w < W; w++) {
        long long want = 0;
        for (long long s = 0; s < S; s++)
            for (long long b = 0; b < B; b++) {
                long long compute = (R * b) % W + s % R, weights = (R * s) % W + s % R;
                want += compute == w && weights != w;
            }
        ck_assert_int_eq(r.w[w].weight_recv, 2 * want); /* F and B each fetch */
    }
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

/* The most any worker's plan allocates, lowering c as it stands (kept jobs
 * marked or not); every plan must pass the compiler's verification. */
static uint64_t plan_peak(compiled *c)
{
    pp_plan *plans = lower_all(c);
    uint64_t most = 0;
    for (int w = 0; w < c->t.W; w++) {
        uint64_t b = pp_plan_memory(&plans[w]);
        most = b > most ? b : most;
    }
    pp_plans_free(plans, c->t.W);
    return most;
}

/* --keep-weights without a limit: FSDP (S = 8 over W = B = 4, two stages
 * owned per worker) fetches each of the 6 stages a worker does not own
 * once, and its backward reads what its forward fetched; the replay keeps
 * every worker's order and finishes no later. */
START_TEST(keep_weights_fetches_each_stage_once)
{
    pp_define defs[] = {{"S", 8}, {"B", 4}};
    compiled c;
    compile_library(&c, "fsdp.pp", defs, 2);
    ck_assert_int_eq(c.errors + c.deadlock, 0);
    double before = c.sim.makespan;
    int *order = malloc((size_t)job_count(&c.t.js) * sizeof *order);
    memcpy(order, c.sim.order, (size_t)job_count(&c.t.js) * sizeof *order);
    pp_lower_opts lo = {1, 0};
    pp_keep_choice kc;
    ck_assert_int_eq(pp_keep_weights(&c.t, &c.sim, &c.sch.model, &lo, &c.diag, &kc), 0);
    ck_assert_int_eq(kc.window, kc.widest);
    ck_assert_int_gt(kc.window, 0);
    ck_assert_mem_eq(order, c.sim.order, (size_t)job_count(&c.t.js) * sizeof *order);
    ck_assert(c.sim.makespan <= before);
    pp_report r;
    build_report(&c, &r);
    for (int w = 0; w < 4; w++) {
        ck_assert_int_eq(r.w[w].weight_recv, 6);
        ck_assert_int_eq(r.w[w].weight_kept, 6);
    }
    plan_peak(&c);
    pp_report_free(&r);
    free(order);
    compiled_free(&c);
}
END_TEST

/* Under a memory limit the window is the largest whose plans fit: it fits,
 * one more does not, and it fetches less than keeping nothing. */
START_TEST(keep_weights_largest_window_under_the_limit)
{
    pp_define defs[] = {{"S", 8}, {"B", 4}};
    compiled c;
    compile_library(&c, "fsdp.pp", defs, 2);
    ck_assert_int_eq(c.errors + c.deadlock, 0);
    uint64_t none = plan_peak(&c), limit = 3400000;
    ck_assert_uint_lt(none, limit); /* keeping nothing fits ... */
    pp_lower_opts lo = {1, limit};
    pp_keep_choice kc;
    ck_assert_int_eq(pp_keep_weights(&c.t, &c.sim, &c.sch.model, &lo, &c.diag, &kc), 0);
    ck_assert_int_gt(kc.window, 0);
    ck_assert_int_lt(kc.window, kc.widest); /* ... keeping everything does not */
    ck_assert_uint_le(plan_peak(&c), limit);
    pp_report r;
    build_report(&c, &r);
    ck_assert_int_gt(r.total.weight_kept, 0);
    ck_assert_int_eq(r.total.weight_recv + r.total.weight_kept, 4 * 12);
    pp_report_free(&r);
    compiled_free(&c);
    /* one job wider crosses the limit (the window is the largest) */
    compile_library(&c, "fsdp.pp", defs, 2);
    pp_sim_result replay = {0};
    ck_assert_int_ge(pp_keep_mark(&c.t, &c.sim, kc.window + 1), 0);
    ck_assert_int_eq(pp_sim_replay(&c.t, &c.sim, 0, &replay), 0);
    pp_sim_free(&c.sim);
    c.sim = replay;
    ck_assert_uint_gt(plan_peak(&c), limit);
    compiled_free(&c);
}
END_TEST

/* 1F1B: rank r holds min(S-r, B) activations at its peak; bubble
 * (p-1)/(m+p-1). */
START_TEST(one_f_one_b_peaks_and_bubble)
{
    static const long long Bs[] = {2, 4, 8};
    for (int i = 0; i < 3; i++) {
        pp_define defs[] = {{"S", 4}, {"B", Bs[i]}};
        compiled c;
        compile_library(&c, "1f1b.pp", defs, 2);
        pp_report r;
        build_report(&c, &r);
        for (int w = 0; w < 4; w++)
            ck_assert_int_eq(r.w[w].peak_act, 4 - w < Bs[i] ? 4 - w : Bs[i]);
        ck_assert_double_eq_tol(r.bubble, 3.0 / (double)(Bs[i] + 3), 1e-12);
        pp_report_free(&r);
        compiled_free(&c);
    }
}
END_TEST

/* Costs default to 1 for a uniform mlp (the seed's unit model) and to the
 * stages' FLOPs, in units of the mean forward, when the stages differ:
 * with blocks 1, 2, 2, 1 and an mlp whose block and head GEMMs weigh the
 * same (ffn = D = 128, V = 256: 4*batch*128*128 = 2*batch*256*128 FLOPs),
 * the stages weigh 1, 2, 2, 2 (the last adds its head) and B is twice F. A
 * cost line still wins for its direction. */
START_TEST(flops_proportional_default_costs)
{
    static const char *src =
        "param S = 4\nparam B = 2\nparam W = 4\ncompute(s,b,d) = s\n"
        "model { context = 8; embed = 16; ffn = 128; blocks = s == 0 || s == S - 1 ? 1 : 2 }\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    ck_assert_msg(c.errors == 0, "%s", c.msgs);
    const double mean = (1 + 2 + 2 + 2) / 4.0, w[4] = {1, 2, 2, 2};
    for (int s = 0; s < 4; s++) {
        ck_assert_double_eq_tol(c.t.cost[job_id(&c.t.js, s, 1, 0)], w[s] / mean, 1e-12);
        ck_assert_double_eq_tol(c.t.cost[job_id(&c.t.js, s, 0, 1)], 2 * w[s] / mean, 1e-12);
    }
    compiled_free(&c);

    char *withcost = malloc(strlen(src) + 32);
    sprintf(withcost, "%scost B = 3\n", src);
    compile_src(&c, withcost, NULL, 0);
    ck_assert_double_eq_tol(c.t.cost[job_id(&c.t.js, 0, 0, 0)], 1 / mean, 1e-12);
    ck_assert_double_eq(c.t.cost[job_id(&c.t.js, 0, 0, 1)], 3);
    compiled_free(&c);
    free(withcost);

    compile_src(&c,
                "param S = 4\nparam B = 2\nparam W = 4\ncompute(s,b,d) = s\n"
                "model { blocks = 2 }\n",
                NULL, 0);
    for (int j = 0; j < job_count(&c.t.js); j++)
        ck_assert_double_eq(c.t.cost[j], 1);
    compiled_free(&c);
}
END_TEST

/* The seed's interpolation: LPP's makespan falls from GPipe's (R = W) to
 * DDP's (R = 1) as R shrinks, with S = W = B = 8. */
START_TEST(lpp_interpolates_gpipe_to_ddp)
{
    double prev = 0, first = 0, last = 0;
    for (long long R = 8; R >= 1; R /= 2) {
        pp_define defs[] = {{"S", 8}, {"B", 8}, {"G", 8 / R}, {"R", R}};
        compiled c;
        compile_library(&c, "lpp.pp", defs, 4);
        ck_assert_int_eq(c.errors + c.deadlock, 0);
        if (R == 8)
            first = c.sim.makespan;
        else
            ck_assert_msg(c.sim.makespan < prev, "R=%lld: makespan %g, not below %g", R,
                          c.sim.makespan, prev);
        prev = last = c.sim.makespan;
        compiled_free(&c);
    }
    ck_assert_double_eq(first, 2 * (8 + 8 - 1)); /* GPipe's */
    ck_assert_double_eq(last, 2 * 8);            /* DDP's */
}
END_TEST

/* With `cost latency = L` every activation and gradient takes L to cross:
 * GPipe's chain of S-1 hops each way adds 2(S-1)L. */
START_TEST(latency_delays_transfers)
{
    const char *src = "param S = 4\nparam B = 8\nparam W = S\ncost latency = 3\n"
                      "compute(s,b,d) = s\npriority(s,b,d) = d * B + b\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    pp_report r;
    build_report(&c, &r);
    ck_assert_double_eq(r.makespan, 2 * (4 + 8 - 1) + 2 * 3 * 3);
    for (int i = 0; i < r.nxfer; i++)
        ck_assert_double_eq(r.xfer[i].end - r.xfer[i].start, 3);
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

/* Bandwidth: a transfer of n bytes takes latency + n / bandwidth. */
START_TEST(bandwidth_scales_with_bytes)
{
    const char *src = "param S = 2\nparam B = 1\nparam W = S\ncost latency = 1\n"
                      "cost bandwidth = 1024\ncompute(s,b,d) = s\n"
                      "model { context = 4\n embed = 8\n ffn = 16\n blocks = 1\n batch = 32 }\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    pp_report r;
    build_report(&c, &r);
    uint64_t act = 32 * 4 * 8 * 4; /* 4 KiB: 4 time units on the wire */
    ck_assert_int_eq(r.nxfer, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(r.xfer[i].bytes, act);
        ck_assert_double_eq(r.xfer[i].end - r.xfer[i].start, 1 + 4);
    }
    ck_assert_double_eq(r.makespan, 4 + 2 * 5);
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

/* Weight fetches are prefetched from the predecessor's start: with a fetch
 * no longer than a job, only the very first one shows. FSDP S=W=4, L=1. */
START_TEST(fetches_are_prefetched)
{
    const char *src = "param S = 4\nparam B = S\nparam W = B\ncost latency = 1\n"
                      "compute(s,b,d) = b\nweights(s,b,d) = s\n";
    compiled c;
    compile_src(&c, src, NULL, 0);
    pp_report r;
    build_report(&c, &r);
    ck_assert_double_eq(r.makespan, 2 * 4 + 1);
    int weights = 0;
    for (int i = 0; i < r.nxfer; i++)
        weights += r.xfer[i].kind == XFER_WEIGHT;
    ck_assert_int_eq(weights, 4 * 2 * 3);
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    int ch;
    while ((ch = fgetc(f)) != EOF)
        fputc(ch, m);
    fclose(m);
    fclose(f);
    return buf;
}

/* ppc writes report.txt equal to the golden one (regenerate with `make
 * golden` after an intended change), and report.json, timeline.svg and
 * trace.json that parse. */
START_TEST(ppc_writes_the_report)
{
    char *dir = temp_dir(), cmd[4096], *out = NULL, path[1024];
    snprintf(cmd, sizeof cmd, "cd %s && ./bin/ppc schedules/1f1b.pp -D S=4 -D B=8 -o %s/p", PP_ROOT,
             dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd,
             "cd %s && sed 1d %s/p/report.txt | diff -u - <(sed 1d "
             "tests/golden/report-1f1b-S4-B8/report.txt)",
             PP_ROOT, dir);
    char bash[4200];
    snprintf(bash, sizeof bash, "bash -c '%s'", cmd);
    int rc = run_cmd(bash, &out);
    ck_assert_msg(rc != 1, "report.txt differs from the golden file:\n%s", out);
    ck_assert_msg(rc == 0, "could not compare report.txt with the golden file (exit %d): %s\n%s",
                  rc, bash, out);
    free(out);
    snprintf(cmd, sizeof cmd, "xmllint --noout %s/p/timeline.svg", dir);
    rc = run_cmd(cmd, &out);
    ck_assert_msg(rc == 0, "timeline.svg is not well-formed XML:\n%s", out);
    free(out);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/p/%s", dir, i ? "trace.json" : "report.json");
        char *text = read_text(path);
        ck_assert_ptr_nonnull(text);
        json_error_t err;
        json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
        ck_assert_msg(root, "%s:%d:%d: %s", path, err.line, err.column, err.text);
        ck_assert(json_is_object(root));
        json_decref(root);
        ck_assert_ptr_nonnull(strstr(text, i ? "\"traceEvents\"" : "\"makespan\": 22,"));
        free(text);
    }
    snprintf(path, sizeof path, "%s/p/report.json", dir);
    char *json = read_text(path);
    ck_assert_ptr_nonnull(strstr(json, "\"peak_act\": [4, 3, 2, 1]"));
    ck_assert_ptr_nonnull(strstr(json, "\"act_recv\": [8, 16, 16, 8]"));
    ck_assert_ptr_nonnull(
        strstr(json, "{\"s\": 0, \"b\": 0, \"d\": \"F\", \"start\": 0, \"end\": 1}"));
    free(json);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    run_cmd(cmd, NULL);
    free(dir);
}
END_TEST

/* report.json's strings are escaped (by jansson), and one that is not
 * UTF-8, as a path may be, still leaves the file valid JSON. */
START_TEST(report_json_escapes_strings)
{
    pp_define defs[] = {{"S", 2}, {"B", 2}};
    compiled c;
    compile_library(&c, "gpipe.pp", defs, 2);
    pp_report r;
    build_report(&c, &r);
    pp_report_info info = {"dir/\"q\"\\\n\xc3\xa9.pp", "S=2 B=2 W=2", "greedy",
                           "--costs caf\xe9.json",     NULL,          NULL};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(pp_report_write_json(f, &r, &info, &c.t, &c.sim), 0);
    fclose(f);
    json_error_t err;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    ck_assert_msg(root, "report.json:%d:%d: %s\n%s", err.line, err.column, err.text, text);
    ck_assert_str_eq(json_string_value(json_object_get(root, "schedule")),
                     "dir/\"q\"\\\n\xc3\xa9.pp");
    ck_assert_str_eq(json_string_value(json_object_get(root, "costs")), "--costs caf?.json");
    ck_assert(json_is_null(json_object_get(root, "keep_weights")));
    ck_assert_double_eq(json_number_value(json_object_get(root, "makespan")), r.makespan);
    json_decref(root);
    free(text);
    pp_report_free(&r);
    compiled_free(&c);
}
END_TEST

/* --costs overrides the cost lines: GPipe with F = 1, B = 2 takes
 * 3(S-1) + 3B; bad files are refused with a message and exit code 3. */
START_TEST(ppc_costs_file)
{
    char *dir = temp_dir(), cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '{\"F\": 1, \"B\": [2, 2, 2, 2]}' > %s/c.json && "
             "./bin/ppc schedules/gpipe.pp -D S=4 -D B=8 --costs %s/c.json -o %s/p --no-pictures",
             PP_ROOT, dir, dir, dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "makespan 33,"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '{\"F\": [1, 2]}' > %s/bad.json && "
             "./bin/ppc schedules/gpipe.pp --costs %s/bad.json -o %s/q",
             PP_ROOT, dir, dir, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "\"F\" has 2 entries; expected 1 or one per stage (S = 4)"), "%s",
                  out);
    free(out);
    snprintf(cmd, sizeof cmd, "cd %s && ./bin/ppc schedules/gpipe.pp --costs %s/none.json -o %s/q",
             PP_ROOT, dir, dir);
    out = run_expect(cmd, 3);
    ck_assert_msg(strstr(out, "none.json"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '{\"F\": 1,}' > %s/syn.json && "
             "./bin/ppc schedules/gpipe.pp --costs %s/syn.json -o %s/q",
             PP_ROOT, dir, dir, dir);
    out = run_expect(cmd, 3);
    ck_assert_msg(strstr(out, "syn.json:1:"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    run_cmd(cmd, NULL);
    free(dir);
}
END_TEST

/* --mem-limit names the worker and the instruction where it is crossed;
 * a limit the plan fits passes. */
START_TEST(ppc_mem_limit)
{
    char *dir = temp_dir(), cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/gpipe.pp -D S=4 -D B=8 -o %s/p --mem-limit 700000", PP_ROOT,
             PP_ROOT, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "error: worker 0 needs ") && strstr(out, "over --mem-limit 700000") &&
                      strstr(out, "at instruction "),
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/gpipe.pp -D S=4 -D B=8 -o %s/p --mem-limit 100000000",
             PP_ROOT, PP_ROOT, dir);
    out = run_expect(cmd, 0);
    free(out);
    /* --keep-weights says what it kept, in report.txt and report.json */
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/fsdp.pp -D S=8 -D B=4 -o %s/p --keep-weights --mem-limit "
             "3400000 -q"
             " && cat %s/p/report.txt %s/p/report.json",
             PP_ROOT, PP_ROOT, dir, dir, dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(
        strstr(out, "(--keep-weights: window 10 of 15 jobs, the largest under --mem-limit)") &&
            strstr(out, "\"keep_weights\": \"window 10 of 15 jobs") &&
            strstr(out, "\"weight_kept\": [4, 4, 4, 3]"),
        "%s", out);
    free(out);
    /* nothing fits: the limit's error, and the report says why nothing was kept */
    snprintf(
        cmd, sizeof cmd,
        "%s/bin/ppc %s/schedules/fsdp.pp -D S=8 -D B=4 -o %s/p --keep-weights --mem-limit 3100000;"
        " cat %s/p/report.txt",
        PP_ROOT, PP_ROOT, dir, dir);
    run_cmd(cmd, &out);
    ck_assert_msg(strstr(out, "over --mem-limit 3100000") &&
                      strstr(out, "nothing kept, any window would cross --mem-limit"),
                  "%s", out);
    free(out);
    /* --optimizer overrides the schedule's; the report names it and counts its state */
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/gpipe.pp -D S=2 -D B=2 -o %s/p --optimizer adamw -q"
             " && cat %s/p/report.txt %s/p/report.json %s/p/rank0.txt",
             PP_ROOT, PP_ROOT, dir, dir, dir, dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "optimizer adamw (two moments per weight, held by the owners)") &&
                      strstr(out, "\"optimizer\": \"adamw\"") &&
                      strstr(out, "batch 16; optimizer adamw") &&
                      strstr(out, "update stage 0 weights (adamw)"),
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/gpipe.pp -o %s/p --optimizer adam", PP_ROOT,
             PP_ROOT, dir);
    out = run_expect(cmd, 2);
    ck_assert_msg(strstr(out, "ppc: --optimizer adam: expected sgd or adamw"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    run_cmd(cmd, NULL);
    free(dir);
}
END_TEST

/* --precision overrides the schedule's `precision` line (either way); a
 * bad or missing value is a command-line error (exit 2) naming the flag. */
START_TEST(ppc_precision)
{
    char *dir = temp_dir(), cmd[2048], *out;
    snprintf(cmd, sizeof cmd,
             "printf 'precision bf16\\n' | cat %s/schedules/fsdp.pp - > %s/bf16.pp && "
             "%s/bin/ppc %s/bf16.pp -o %s/a -q && %s/bin/ppc %s/bf16.pp -o %s/b -q --precision fp32"
             " && %s/bin/ppc %s/schedules/fsdp.pp -o %s/c -q --precision bf16"
             " && head -3 %s/a/rank0.txt %s/b/rank0.txt %s/c/rank0.txt",
             PP_ROOT, dir, PP_ROOT, dir, dir, PP_ROOT, dir, dir, PP_ROOT, PP_ROOT, dir, dir, dir,
             dir);
    out = run_expect(cmd, 0);
    char *a = strstr(out, "a/rank0.txt"), *b = strstr(out, "b/rank0.txt"),
         *c = strstr(out, "c/rank0.txt");
    ck_assert_msg(a && b && c && a < b && b < c, "%s", out);
    ck_assert_msg(strstr(a, "; precision bf16") < b && strstr(b, "; precision fp32") < c &&
                      strstr(c, "; precision bf16"),
                  "%s", out);
    free(out);
    /* the report names the precision and counts the owners' bf16 copies */
    snprintf(cmd, sizeof cmd, "cat %s/a/report.txt %s/a/report.json %s/b/report.json", dir, dir,
             dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "precision bf16 (owners keep a bf16 copy of their fp32 weights") &&
                      strstr(out, "bf16 copy plan memory") &&
                      strstr(out, "\"precision\": \"bf16\"") &&
                      strstr(out, "\"copy_store_bytes\": [140544, 132352, 132352, 198912]") &&
                      strstr(out, "\"precision\": \"fp32\"") &&
                      strstr(out, "\"copy_store_bytes\": [0, 0, 0, 0]"),
                  "%s", out);
    free(out);
    /* --mem-limit names the copies among what an owner holds */
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/bf16.pp -o %s/a -q --mem-limit 1000", PP_ROOT, dir,
             dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "before its first instruction, over --mem-limit 1000: ") &&
                      strstr(out, " for its own stages' weights, gradients, optimizer state and "
                                  "bf16 copies, ") &&
                      strstr(out, " for its workspace"),
                  "%s", out);
    free(out);
    static const char *bad[][2] = {
        {"--precision fp16", "ppc: --precision fp16: expected fp32 or bf16"},
        {"--precision BF16", "ppc: --precision BF16: expected fp32 or bf16"},
        {"--precision", "ppc: --precision needs an argument"}};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/gpipe.pp -o %s/p %s", PP_ROOT, PP_ROOT,
                 dir, bad[i][0]);
        out = run_expect(cmd, 2);
        ck_assert_msg(strstr(out, bad[i][1]) && strstr(out, "ppc: see ppc --help") &&
                          !strstr(out, "usage: ppc"),
                      "%s", out);
        free(out);
    }
    remove_dir(dir);
}
END_TEST

/* --table prints every row with measured / seed cells; GPipe's and DDP's
 * latency match the seed exactly. Bad -D names are refused. */
START_TEST(ppc_table)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s/bin/ppc --table -D S=4 -D B=8 -D G=2 -D R=2", PP_ROOT);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "DDP    W=B          yes      8     8 | 4 / 4"), "%s", out);
    ck_assert_msg(strstr(out, "GPipe  W=S          yes      8     4 | 11 / 11        8..16 / 16"),
                  "%s", out);
    ck_assert_msg(strstr(out, "FSDP   W=B"), "%s", out);
    ck_assert_msg(strstr(out, "LPP    S>=W=GR>=B"), "%s", out);
    ck_assert_msg(strstr(out, "FSLPP  B>=S>=W=G^2"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc --table -D X=3", PP_ROOT);
    out = run_expect(cmd, 2);
    ck_assert_msg(strstr(out, "-D X: expected one of S, B, G, R"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc --table --library /nonexistent", PP_ROOT);
    out = run_expect(cmd, 3); /* a file could not be read */
    ck_assert_msg(strstr(out, "cannot read '/nonexistent/ddp.pp'"), "%s", out);
    free(out);
}
END_TEST

Suite *report_suite(void)
{
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("counts");
    tcase_add_test(tc, gpipe_counts);
    tcase_add_test(tc, flops_proportional_default_costs);
    tcase_add_test(tc, ddp_counts);
    tcase_add_test(tc, adamw_state_on_owners);
    tcase_add_test(tc, bf16_fsdp_halves_weight_traffic);
    tcase_add_test(tc, bf16_ddp_memory);
    tcase_add_test(tc, step_adds_the_end_of_the_step);
    tcase_add_test(tc, fsdp_fetches_s_minus_1_per_pass);
    tcase_add_test(tc, fslpp_fetches_match_the_seed);
    tcase_add_test(tc, keep_weights_fetches_each_stage_once);
    tcase_add_test(tc, keep_weights_largest_window_under_the_limit);
    tcase_add_test(tc, one_f_one_b_peaks_and_bubble);
    tcase_add_test(tc, lpp_interpolates_gpipe_to_ddp);
    suite_add_tcase(s, tc);
    tc = tcase_create("transfer costs");
    tcase_add_test(tc, latency_delays_transfers);
    tcase_add_test(tc, bandwidth_scales_with_bytes);
    tcase_add_test(tc, fetches_are_prefetched);
    suite_add_tcase(s, tc);
    tc = tcase_create("ppc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, ppc_writes_the_report);
    tcase_add_test(tc, report_json_escapes_strings);
    tcase_add_test(tc, ppc_costs_file);
    tcase_add_test(tc, ppc_table);
    tcase_add_test(tc, ppc_mem_limit);
    tcase_add_test(tc, ppc_precision);
    suite_add_tcase(s, tc);
    return s;
}
