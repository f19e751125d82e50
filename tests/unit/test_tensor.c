/* test_tensor.c - tensor parallelism in the compiler and the plans (issue
 * 27): `tensor = EXPR` and its errors; the W*T plans (rank w*T + t, peers
 * (w,t) -> (w',t), replica groups per t, one tensor group per worker, a
 * TensorReduce before every F, B, BackwardInput and Recompute, shard
 * sizes); every
 * library schedule with tensor = 2 (and some with 4) compiles and passes
 * both proofs; and plans broken after the fact are refused by the
 * validator or the deadlock proof. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/lower.h"
#include "../../compiler/readfile.h"
#include "../../compiler/report.h"
#include "../../compiler/search.h"
#include "../../compiler/table.h"
#include "../../isa/commcheck.h"
#include "../../isa/bufcheck.h"
#include "../../isa/model_shape.h"
#include "../../isa/tensor.h"
#include "../../isa/tensor_lane.h"
#include "../../isa/verify.h"
#include "suites.h"
#include "testutil.h"

#define HEAD "param S = 2\nparam B = 4\nparam W = 2\ncompute(s,b,d) = s\n"

#define ck_has(text, s)                                                                            \
    ck_assert_msg(strstr(text, s) != NULL, "expected\n%s\nin the messages\n%s", s, text)

static void expect_error(const char *src, const char *msg)
{
    pp_compiled c;
    ck_assert_int_eq(compile_text_to(&c, src, PP_STAGE_PLANS), PP_COMPILE_ERRORS);
    ck_has(c.msgs ? c.msgs : "", msg);
    pp_compiled_free(&c);
}

START_TEST(language_errors)
{
    expect_error(HEAD "tensor = s + 1\n",
                 "t.pp:5:10: error: 's' is a job variable and cannot be used in 'tensor'");
    expect_error(HEAD "tensor = 0\n", "t.pp:5:10: error: tensor = 0 is out of range [1, 64]");
    expect_error(HEAD "tensor = 3\nmodel { ffn = 128 }\n",
                 "t.pp:5:10: error: tensor = 3 does not divide the model's ffn (128)");
    expect_error(HEAD "tensor = 8\nmodel gpt { heads = 4 }\n",
                 "t.pp:5:10: error: tensor = 8 does not divide the model's heads (4)");
    expect_error(HEAD "tensor = 4\nmodel llama {\n heads = 4\n kv_heads = 2\n}\n",
                 "t.pp:5:10: error: tensor = 4 does not divide the model's kv_heads (2): the "
                 "attention is split by key/value heads");
    expect_error(HEAD "tensor = 2\ntensor = 2\n",
                 "t.pp:6:1: error: tensor is given more than once");
    expect_error(HEAD "param Z = 0\ntensor = 2 / Z\n", "t.pp:6:12: error: division by zero");
    /* tensor is a keyword now: a param of that name is a syntax error */
    expect_error("param tensor = 2\n" HEAD, "t.pp:1:7: error: syntax error");
    /* params, and -D through them, are fine */
    pp_compiled c;
    ck_assert_int_eq(compile_text_to(&c, HEAD "param T = 2\ntensor = T * 2\n", PP_STAGE_PLANS),
                     PP_COMPILE_OK);
    ck_assert_uint_eq(c.sch.model.tensor, 4);
    ck_assert_uint_eq(c.plans[0].world, 8);
    pp_compiled_free(&c);
}
END_TEST

static int count_op(const pp_plan *p, int op)
{
    int n = 0;
    for (uint32_t i = 0; i < p->ninstr; i++)
        n += p->code[i].op == op;
    return n;
}

/* Every F, B, BackwardInput and Recompute (a re-run forward makes the
 * forward's all-reduces) right after a TensorReduce of its (s,b) on
 * its worker's tensor group; peers and groups of rank w*T+t at t. */
static void check_layout(const pp_plan *plans, int W, int T)
{
    uint32_t G = plans[0].ngroups - (uint32_t)W;
    for (int r = 0; r < W * T; r++) {
        const pp_plan *p = &plans[r];
        int w = r / T, t = r % T;
        ck_assert_uint_eq(p->rank, r);
        ck_assert_uint_eq(p->world, W * T);
        ck_assert_uint_eq(p->ngroups, G + W);
        const pp_group *tg = &p->groups[G + (uint32_t)w];
        ck_assert_uint_eq(tg->n, T);
        for (int k = 0; k < T; k++)
            ck_assert_uint_eq(tg->member[k], w * T + k);
        for (uint32_t i = 0; i < p->ninstr; i++) {
            const pp_instr *in = &p->code[i];
            if (in->peer >= 0)
                ck_assert_msg(in->peer % T == t, "rank %d instruction %u: peer %d is not at t=%d",
                              r, i, in->peer, t);
            if (in->op == PP_OP_TensorReduce) {
                ck_assert_int_eq(in->group, (int)G + w);
                ck_assert_int_eq(in[1].stage, in->stage);
                ck_assert_int_eq(in[1].mb, in->mb);
            } else if (in->group >= 0) { /* a replica group: its members all at t */
                const pp_group *g = &p->groups[in->group];
                for (uint32_t k = 0; k < g->n; k++)
                    ck_assert_int_eq((int)g->member[k] % T, t);
            }
            if (in->op == PP_OP_Forward || in->op == PP_OP_Backward ||
                in->op == PP_OP_BackwardInput || in->op == PP_OP_Recompute)
                ck_assert_msg(i > 0 && in[-1].op == PP_OP_TensorReduce,
                              "rank %d instruction %u: a job without its TensorReduce", r, i);
        }
    }
}

/* The rank layout of a PP x TP x DP plan (pp-dp.pp, 4 workers, tensor 2):
 * 8 ranks, replica all-reduces per t, jobs with their tensor all-reduces,
 * and shard sizes: a stage's stash and weights smaller than with tensor 1. */
START_TEST(pp_dp_tensor_layout)
{
    char *path = PP_ROOT "/schedules/pp-dp.pp";
    const char *failed = NULL;
    size_t len;
    char *text = pp_read_file(path, &len, &failed);
    ck_assert_ptr_nonnull(text);
    char *src = malloc(len + 64);
    snprintf(src, len + 64, "%s\ntensor = 2\n", text);
    pp_compiled one, two;
    ck_assert_int_eq(compile_text_to(&one, text, PP_STAGE_PLANS), PP_COMPILE_OK);
    ck_assert_int_eq(compile_text_to(&two, src, PP_STAGE_PLANS), PP_COMPILE_OK);
    int W = (int)one.t.W;
    ck_assert_uint_eq(two.plans[0].world, 2 * W);
    check_layout(two.plans, W, 2);
    for (int r = 0; r < 2 * W; r++) {
        const pp_plan *a = &one.plans[r / 2], *b = &two.plans[r];
        ck_assert_int_eq(count_op(b, PP_OP_ReduceGrads), count_op(a, PP_OP_ReduceGrads));
        ck_assert_int_eq(count_op(b, PP_OP_TensorReduce), count_op(a, PP_OP_Forward) +
                                                              count_op(a, PP_OP_Backward) +
                                                              count_op(a, PP_OP_BackwardInput));
        ck_assert_uint_eq(b->ninstr, a->ninstr + (uint32_t)count_op(b, PP_OP_TensorReduce));
        ck_assert_uint_lt(pp_plan_memory(b), pp_plan_memory(a));
        ck_assert_uint_lt(pp_stage_param_count(&b->model, (int)b->S, 0),
                          pp_stage_param_count(&a->model, (int)a->S, 0));
    }
    ck_assert_uint_lt(two.rep.w[0].mem_bytes, one.rep.w[0].mem_bytes);
    ck_assert(two.plans[0].plan_id != one.plans[0].plan_id);
    pp_compiled_free(&one);
    pp_compiled_free(&two);
    free(src);
    free(text);
}
END_TEST

/* The listing says how many all-reduces of how many bytes, on which group. */
START_TEST(listing)
{
    pp_compiled c;
    ck_assert_int_eq(compile_text_to(&c, HEAD "tensor = 2\nmodel { blocks = 3 }\n", PP_STAGE_PLANS),
                     PP_COMPILE_OK);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    pp_plan_disasm(&c.plans[3], f);
    fclose(f);
    ck_has(buf, "; groups: g0 = {0,1}, g1 = {2,3}");
    ck_has(buf, "TensorReduce        1     0     .    1");
    ck_has(buf, "3 all-reduces of 8192 B in the next job (1,0) over tensor group g1 {2,3}");
    ck_has(buf, "RecvActivation      0     0     1");
    free(buf);
    pp_compiled_free(&c);
}
END_TEST

/* Every library schedule with tensor = 2 (and tensor = 4 on some): compiled,
 * verified by both proofs inside the compile, laid out as above (the
 * overlap files too: isa/tensor_lane.h). */
static void library_with(const char *name, int T)
{
    char path[512];
    snprintf(path, sizeof path, PP_ROOT "/schedules/%s", name);
    const char *failed = NULL;
    size_t len;
    char *text = pp_read_file(path, &len, &failed);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    char *src = malloc(len + 64);
    snprintf(src, len + 64, "%s\ntensor = %d\n", text, T);
    pp_compiled c;
    pp_compile_status st = compile_text_to(&c, src, PP_STAGE_PLANS);
    {
        ck_assert_msg(st == PP_COMPILE_OK, "%s with tensor = %d: %s", name, T, c.msgs);
        check_layout(c.plans, (int)c.t.W, T);
        char msg[4096];
        ck_assert_msg(!pp_comm_check(c.plans, (int)c.t.W * T, msg, sizeof msg), "%s: %s", name,
                      msg);
        ck_assert_msg(!pp_buffer_check(c.plans, (int)c.t.W * T, msg, sizeof msg), "%s: %s", name,
                      msg);
        ck_assert_msg(!pp_verify_world(c.plans, (int)c.t.W * T, msg, sizeof msg), "%s: %s", name,
                      msg);
    }
    pp_compiled_free(&c);
    free(src);
    free(text);
}

static const char *const LIBRARY[] = {
    "1f1b-bubble-recompute.pp",
    "1f1b-recompute.pp",
    "1f1b-offload.pp",
    "1f1b-gpt.pp",
    "1f1b-greedy.pp",
    "1f1b-limit.pp",
    "1f1b-overlap.pp",
    "1f1b.pp",
    "breadth-first.pp",
    "ddp.pp",
    "depth-first.pp",
    "dualpipev.pp",
    "fsdp.pp",
    "fslpp.pp",
    "gpipe.pp",
    "interleaved-1f1b.pp",
    "interleaved-zb.pp",
    "looped-bfs.pp",
    "lpp.pp",
    "pp-dp.pp",
    "pp-fsdp.pp",
    "v-overlap.pp",
    "zb-h1.pp",
    "zb-h2.pp",
    "zb-v.pp",
};

START_TEST(library_tensor_2)
{
    for (size_t i = 0; i < sizeof LIBRARY / sizeof *LIBRARY; i++)
        library_with(LIBRARY[i], 2);
}
END_TEST

START_TEST(library_tensor_4)
{
    library_with("1f1b-recompute.pp", 4);
    library_with("1f1b-gpt.pp", 4);
    library_with("1f1b.pp", 4);
    library_with("zb-h1.pp", 4);
    library_with("fsdp.pp", 4);
    library_with("interleaved-1f1b.pp", 4);
}
END_TEST

/* ---------------------------------------------------- broken plans refused */

static void compile_tp(pp_compiled *c)
{
    ck_assert_int_eq(compile_text_to(c, HEAD "tensor = 2\n", PP_STAGE_PLANS), PP_COMPILE_OK);
}

static uint32_t find_op(const pp_plan *p, int op, uint32_t from)
{
    for (uint32_t i = from; i < p->ninstr; i++)
        if (p->code[i].op == op)
            return i;
    ck_abort_msg("no %s from instruction %u", pp_op_name(op), from);
    return 0;
}

START_TEST(validator_refuses)
{
    pp_compiled c;
    char err[512];
    compile_tp(&c);
    pp_plan *p = &c.plans[1];
    uint32_t i = find_op(p, PP_OP_TensorReduce, 0);
    /* its job of another microbatch */
    p->code[i].mb ^= 1;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_EOPERAND);
    ck_has(err, "(TensorReduce): the job after it is of another stage or microbatch");
    p->code[i].mb ^= 1;
    /* a replica-less group: the other worker's tensor group */
    p->code[i].group = 1;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_EOPERAND);
    ck_has(err, "its group is not this rank's tensor group");
    p->code[i].group = 0;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_OK);
    /* under tensor 1 there is none */
    p->model.tensor = 1;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_EOPERAND);
    ck_has(err, "the plan is not tensor-parallel");
    p->model.tensor = 2;
    /* a world the tensor degree does not divide */
    p->model.tensor = 3;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_EHEADER);
    ck_has(err, "model: tensor is 3 (expected 1 to 64, dividing the world of 4 ranks)");
    p->model.tensor = 2;
    /* a job without its TensorReduce: the instruction removed */
    memmove(&p->code[i], &p->code[i + 1], (p->ninstr - i - 1) * sizeof *p->code);
    p->ninstr--;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_EOPERAND);
    ck_has(err, "a tensor-parallel job without a TensorReduce right before it");
    pp_compiled_free(&c);
}
END_TEST

/* Recompute under tensor = 2: each rank of the worker re-runs the forward
 * once (the world check counts R per tensor rank, as F and B), after its
 * own TensorReduce; without it the validator refuses the plan. */
START_TEST(validator_recompute)
{
    pp_compiled c;
    char err[512];
    ck_assert_int_eq(
        compile_text_to(&c, HEAD "recompute when s == 0\ntensor = 2\n", PP_STAGE_PLANS),
        PP_COMPILE_OK);
    ck_assert_int_eq(pp_verify_world(c.plans, 4, err, sizeof err), 0);
    pp_plan *p = &c.plans[1];
    uint32_t i = find_op(p, PP_OP_Recompute, 0);
    ck_assert_int_eq(p->code[i - 1].op, PP_OP_TensorReduce);
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_OK);
    memmove(&p->code[i - 1], &p->code[i], (p->ninstr - i) * sizeof *p->code);
    p->ninstr--;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_EOPERAND);
    ck_has(err, "(Recompute): a tensor-parallel job without a TensorReduce right before it");
    pp_compiled_free(&c);
}
END_TEST

/* The deadlock proof matches the tensor all-reduces across a group: the
 * same job on every member, in the same order. */
START_TEST(commcheck_refuses)
{
    pp_compiled c;
    char msg[4096];
    compile_tp(&c);
    ck_assert_int_eq(pp_comm_check(c.plans, 4, msg, sizeof msg), 0);
    /* rank 1 makes F(0,1)'s all-reduces where rank 0 makes F(0,0)'s: swap
     * its first two forwards (with their TensorReduces) */
    pp_plan *p = &c.plans[1];
    uint32_t a = find_op(p, PP_OP_TensorReduce, 0), b = find_op(p, PP_OP_TensorReduce, a + 1);
    p->code[a].mb = p->code[a + 1].mb = 1;
    p->code[b].mb = p->code[b + 1].mb = 0;
    ck_assert_int_ne(pp_comm_check(c.plans, 4, msg, sizeof msg), 0);
    ck_has(msg, "meet in the same tensor all-reduce on group 0 {0,1}, but their microbatches "
                "differ");
    p->code[a].mb = p->code[a + 1].mb = 0;
    p->code[b].mb = p->code[b + 1].mb = 1;
    ck_assert_int_eq(pp_comm_check(c.plans, 4, msg, sizeof msg), 0);
    /* rank 1 runs B(0,0) where rank 0 runs F(0,0) after the same collective */
    uint8_t op = p->code[a + 1].op;
    p->code[a + 1].op = PP_OP_Backward;
    ck_assert_int_ne(pp_comm_check(c.plans, 4, msg, sizeof msg), 0);
    ck_has(msg, "the jobs after them differ");
    p->code[a + 1].op = op;
    /* rank 1 drops out of its tensor group's first all-reduce: a hang */
    p->code[a].group = 1;
    ck_assert_int_ne(pp_comm_check(c.plans, 4, msg, sizeof msg), 0);
    p->code[a].group = 0;
    /* rank 3 sends to rank 0 (t = 0) what rank 2 (t=0)... a cross-t transfer:
     * the receive at rank 1 then waits on rank 3 forever */
    pp_plan *q = &c.plans[3];
    uint32_t s = find_op(q, PP_OP_SendGrad, 0);
    q->code[s].peer = 0;
    ck_assert_int_ne(pp_comm_check(c.plans, 4, msg, sizeof msg), 0);
    pp_compiled_free(&c);
}
END_TEST

/* ------------------------------------------------- simulator and report */

static char *report_text(pp_compiled *c, int json)
{
    pp_report_info info = {"t.pp", "S=2 B=4 W=2", "strict", "cost lines", NULL, NULL};
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (json)
        ck_assert_int_eq(pp_report_write_json(f, &c->rep, &info, &c->t, &c->sim), 0);
    else
        ck_assert_int_eq(pp_report_write_txt(f, &c->rep, &info, &c->t, &c->sim), 0);
    fclose(f);
    return buf;
}

/* compute / T: 1F1B on 2 stages, 4 microbatches, unit costs, takes 10 with
 * T = 1 and 5 with T = 2; each all-reduce adds `cost tensor_latency` (+
 * bytes / tensor_bandwidth) to F and B, never to W. */
START_TEST(simulator_prices_tensor)
{
    pp_compiled one, two, lat;
    ck_assert_int_eq(compile_text_to(&one, HEAD "split backward\n", PP_STAGE_PLANS), PP_COMPILE_OK);
    ck_assert_int_eq(compile_text_to(&two, HEAD "split backward\ntensor = 2\n", PP_STAGE_PLANS),
                     PP_COMPILE_OK);
    ck_assert_int_eq(compile_text_to(&lat,
                                     HEAD "split backward\ntensor = 2\nmodel { blocks = 2 }\n"
                                          "cost tensor_latency = 3\ncost tensor_bandwidth = 8192\n",
                                     PP_STAGE_PLANS),
                     PP_COMPILE_OK);
    ck_assert_double_eq_tol(two.sim.makespan, one.sim.makespan / 2, 1e-9);
    for (int j = 0; j < job_count(&two.t.js); j++) {
        ck_assert_double_eq_tol(two.t.cost[j], one.t.cost[j] / 2, 1e-12);
        /* 2 blocks: 2 all-reduces of 8192 B, each 3 + 8192 / 8192 */
        double ar = job_d(&lat.t.js, j) == DIR_W ? 0 : 2 * (3 + 1);
        ck_assert_double_eq_tol(lat.t.cost[j], one.t.cost[j] / 2 + ar, 1e-12);
    }
    /* the report: per rank 2 stages' jobs ... worker 0 runs F and B of 4
     * microbatches, one all-reduce each (W none) */
    ck_assert_int_eq(two.rep.tensor, 2);
    ck_assert_int_eq(two.rep.w[0].tensor_allreduces, 8);
    ck_assert_uint_eq(two.rep.w[0].tensor_bytes, 8 * 8192);
    char *txt = report_text(&two, 0), *json = report_text(&two, 1);
    ck_has(txt, "tensor    T=2 ranks per worker (rank = w*2 + t), compute / 2; per rank and step "
                "8 all-reduces, 64.0 KiB (worker 0)");
    ck_has(json, "\"tensor\": {\"T\": 2, \"latency\": 0, \"bandwidth\": 0, \"allreduces\": [8, 8], "
                 "\"bytes\": [65536, 65536]}");
    free(txt);
    free(json);
    txt = report_text(&one, 0);
    json = report_text(&one, 1);
    ck_assert_msg(!strstr(txt, "tensor") && !strstr(json, "tensor"),
                  "a T = 1 report mentions tensor:\n%s\n%s", txt, json);
    free(txt);
    free(json);
    /* params only; --costs keys of their own */
    expect_error(HEAD "cost tensor_latency = b\n",
                 "cannot be used in 'cost tensor_latency' (it may use params)");
    expect_error(HEAD "cost tensor_speed = 1\n", "expected F, B, W, R, latency, bandwidth, overlap, "
                                                 "tensor_latency, tensor_bandwidth or host_bandwidth");
    pp_costs mc;
    char err[512];
    const char *js = "{\"tensor_latency\": 2, \"tensor_bandwidth\": 100}";
    ck_assert_int_eq(pp_costs_parse(&mc, "c.json", js, strlen(js), err, sizeof err), 0);
    ck_assert(mc.has_tensor_latency && mc.tensor_latency == 2 && mc.tensor_bandwidth == 100);
    pp_costs_free(&mc);
    js = "{\"tensor_latency\": -1}";
    ck_assert_int_ne(pp_costs_parse(&mc, "c.json", js, strlen(js), err, sizeof err), 0);
    ck_has(err, "expected a number >= 0 for \"tensor_latency\"");
    pp_compiled_free(&one);
    pp_compiled_free(&two);
    pp_compiled_free(&lat);
}
END_TEST

/* The gpt split's shard (isa/tensor.h): per layer, the QKV projection by
 * heads (3A rows of qkvw and qkvb, A = embed / T), attprojw's A columns,
 * fcw's and fcb's F/T rows, fcprojw's F/T columns; the rest whole. Each
 * size exactly, and one gpt layer makes two all-reduces per job. */
START_TEST(gpt_shard_sizes)
{
    const char *src = HEAD "model gpt {\n vocab = 256\n context = 16\n embed = 32\n heads = 4\n"
                           " ffn = 64\n layers = 1\n batch = 4\n}\n";
    char *two = malloc(strlen(src) + 16);
    sprintf(two, "%stensor = 2\n", src);
    pp_compiled a, b;
    ck_assert_int_eq(compile_text_to(&a, src, PP_STAGE_PLANS), PP_COMPILE_OK);
    ck_assert_int_eq(compile_text_to(&b, two, PP_STAGE_PLANS), PP_COMPILE_OK);
    size_t C = 32, A = 16, F = 64, Fs = 32, V = 256, T = 16;
    size_t whole = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C;
    size_t shard = 2 * C + 3 * A * C + 3 * A + C * A + C + 2 * C + Fs * C + Fs + C * Fs + C;
    const pp_model *m = &b.plans[0].model;
    ck_assert_uint_eq(pp_stage_param_count(&a.plans[0].model, 2, 0), V * C + T * C + whole);
    ck_assert_uint_eq(pp_stage_param_count(m, 2, 0), V * C + T * C + shard);
    ck_assert_uint_eq(pp_stage_param_count(m, 2, 1), shard + 2 * C + V * C);
    pp_model sh = pp_model_shard(m);
    ck_assert_uint_eq(sh.heads, 2);
    ck_assert_uint_eq(sh.attn, 16);
    ck_assert_uint_eq(sh.ffn, 32);
    ck_assert_uint_eq(sh.embed, 32);
    ck_assert_uint_lt(pp_stage_stash_bytes(m, 2, 0), pp_stage_stash_bytes(&a.plans[0].model, 2, 0));
    ck_assert_uint_eq(pp_tensor_allreduces(m, 0), 2);
    ck_assert_int_eq(count_op(&b.plans[0], PP_OP_TensorReduce),
                     count_op(&a.plans[0], PP_OP_Forward) + count_op(&a.plans[0], PP_OP_Backward));
    pp_compiled_free(&a);
    pp_compiled_free(&b);
    free(two);
}
END_TEST

/* The llama split's shard (isa/tensor.h): per layer, wqkv's q rows by
 * query heads (A = embed / T) and its k and v rows by kv heads (Kd / T
 * each), wo's A columns, F/T rows of each of gate and up, wd's F/T columns;
 * the norms, the embedding and the head whole. Two all-reduces a layer. */
START_TEST(llama_shard_sizes)
{
    const char *src = HEAD "model llama {\n vocab = 256\n context = 16\n embed = 32\n heads = 4\n"
                           " kv_heads = 2\n ffn = 64\n layers = 1\n batch = 4\n}\n";
    char *two = malloc(strlen(src) + 16);
    sprintf(two, "%stensor = 2\n", src);
    pp_compiled a, b;
    ck_assert_int_eq(compile_text_to(&a, src, PP_STAGE_PLANS), PP_COMPILE_OK);
    ck_assert_int_eq(compile_text_to(&b, two, PP_STAGE_PLANS), PP_COMPILE_OK);
    size_t C = 32, A = 16, Kd = 16, Kds = 8, F = 64, Fs = 32, V = 256;
    size_t whole = C + (C + 2 * Kd) * C + C * C + C + 2 * F * C + C * F;
    size_t shard = C + (A + 2 * Kds) * C + C * A + C + 2 * Fs * C + C * Fs;
    const pp_model *m = &b.plans[0].model;
    ck_assert_uint_eq(pp_stage_param_count(&a.plans[0].model, 2, 0), V * C + whole);
    ck_assert_uint_eq(pp_stage_param_count(m, 2, 0), V * C + shard);
    ck_assert_uint_eq(pp_stage_param_count(m, 2, 1), shard + C + V * C);
    pp_model sh = pp_model_shard(m);
    ck_assert_uint_eq(sh.heads, 2);
    ck_assert_uint_eq(sh.kv_heads, 1);
    ck_assert_uint_eq(sh.attn, 16);
    ck_assert_uint_eq(sh.ffn, 32);
    ck_assert_uint_lt(pp_stage_stash_bytes(m, 2, 0), pp_stage_stash_bytes(&a.plans[0].model, 2, 0));
    ck_assert_double_lt(pp_stage_flops(m, 2, 0, 0), pp_stage_flops(&a.plans[0].model, 2, 0, 0));
    ck_assert_uint_eq(pp_tensor_allreduces(m, 0), 2);
    ck_assert_int_eq(count_op(&b.plans[0], PP_OP_TensorReduce),
                     count_op(&a.plans[0], PP_OP_Forward) + count_op(&a.plans[0], PP_OP_Backward));
    pp_compiled_free(&a);
    pp_compiled_free(&b);
    free(two);
}
END_TEST

/* The simulator and the report for the gpt split: a job costs its whole
 * stage's FLOPs / T plus two all-reduces a layer (F, B and R; each of
 * batch x context x embed floats, 8192 B here: 3 + 8192 / 8192), and a
 * re-run forward makes its forward's. */
START_TEST(gpt_prices)
{
#define GPT_M "model gpt {\n context = 16\n embed = 32\n heads = 4\n ffn = 64\n batch = 4\n}\n"
    pp_compiled one, lat;
    ck_assert_int_eq(compile_text_to(&one, HEAD "recompute when s == 0\n" GPT_M, PP_STAGE_PLANS),
                     PP_COMPILE_OK);
    ck_assert_int_eq(compile_text_to(&lat,
                                     HEAD "recompute when s == 0\n" GPT_M
                                          "tensor = 2\ncost tensor_latency = 3\n"
                                          "cost tensor_bandwidth = 8192\n",
                                     PP_STAGE_PLANS),
                     PP_COMPILE_OK);
#undef GPT_M
    ck_assert_uint_eq(pp_tensor_allreduce_bytes(&lat.plans[0].model), 8192);
    for (int j = 0; j < job_count(&lat.t.js); j++)
        if (job_exists(&lat.t.js, j))
            ck_assert_double_eq_tol(lat.t.cost[j], one.t.cost[j] / 2 + 2 * (3 + 1), 1e-9);
    /* worker 0: F, R and B of 4 microbatches, two all-reduces each */
    ck_assert_int_eq(lat.rep.w[0].tensor_allreduces, 24);
    ck_assert_uint_eq(lat.rep.w[0].tensor_bytes, 24 * 8192);
    ck_assert_int_eq(lat.rep.w[1].tensor_allreduces, 16);
    ck_assert_uint_lt(lat.rep.w[0].mem_bytes, one.rep.w[0].mem_bytes);
    pp_compiled_free(&one);
    pp_compiled_free(&lat);
}
END_TEST

/* ppc --tensor T: the same plans as the statement; its errors */
START_TEST(tensor_flag)
{
    pp_compiled a, b;
    ck_assert_int_eq(compile_text_to(&a, HEAD "tensor = 2\n", PP_STAGE_PLANS), PP_COMPILE_OK);
    pp_compile_opts co = pp_compile_defaults();
    co.path = "t.pp";
    co.text = HEAD;
    co.len = strlen(HEAD);
    co.tensor = 2;
    co.capture = 1;
    ck_assert_int_eq(pp_compile(&co, &b), PP_COMPILE_OK);
    ck_assert_uint_eq(b.plans[0].world, 4);
    ck_assert(a.plans[0].plan_id == b.plans[0].plan_id);
    pp_compiled_free(&b);
    co.tensor = 3;
    ck_assert_int_eq(pp_compile(&co, &b), PP_COMPILE_ERRORS);
    ck_has(b.msgs, "--tensor 3 does not divide the model's ffn (128)");
    pp_compiled_free(&b);
    const char *gpt = HEAD "model gpt { heads = 4 }\n";
    co.text = gpt;
    co.len = strlen(gpt);
    co.tensor = 8;
    ck_assert_int_eq(pp_compile(&co, &b), PP_COMPILE_ERRORS);
    ck_has(b.msgs, "--tensor 8 does not divide the model's heads (4)");
    pp_compiled_free(&b);
    const char *llama = HEAD "model llama {\n heads = 4\n kv_heads = 2\n}\n";
    co.text = llama;
    co.len = strlen(llama);
    co.tensor = 4;
    ck_assert_int_eq(pp_compile(&co, &b), PP_COMPILE_ERRORS);
    ck_has(b.msgs, "--tensor 4 does not divide the model's kv_heads (2)");
    pp_compiled_free(&b);
    co.tensor = 2;
    ck_assert_int_eq(pp_compile(&co, &b), PP_COMPILE_OK);
    ck_assert_uint_eq(b.plans[0].world, 4);
    pp_compiled_free(&b);
    pp_compiled_free(&a);
}
END_TEST

/* ppc --search --tensor auto: W counts ranks; every file is also tried on
 * W / T workers of T ranks for each divisor T; --tensor T that does not
 * divide W is refused. */
START_TEST(search_explores_tensor)
{
    pp_search_opts o = {.library = PP_ROOT "/schedules",
                        .W = 4,
                        .B = 8,
                        .optimizer = -1,
                        .precision = -1,
                        .tensor = -1};
    pp_search_result r;
    char *msg = NULL;
    size_t n = 0;
    FILE *err = open_memstream(&msg, &n);
    ck_assert_int_eq(pp_search_run(&o, &r, err), PP_SEARCH_OK);
    int seen[5] = {0};
    for (int i = 0; i < r.n; i++) {
        const pp_search_cand *k = &r.c[i];
        const char *t = strstr(k->args, "--tensor ");
        int T = t ? atoi(t + 9) : 1;
        ck_assert_msg(T == 1 || T == 2 || T == 4, "%s %s: tensor %d", k->file, k->args, T);
        char w[16];
        snprintf(w, sizeof w, "-D W=%d", 4 / T);
        ck_assert_msg(strstr(k->args, w) != NULL, "%s %s: expected %s", k->file, k->args, w);
        seen[T] += k->state == PP_CAND_OK;
    }
    ck_assert_msg(seen[1] && seen[2] && seen[4], "compiled: T=1 %d, T=2 %d, T=4 %d", seen[1],
                  seen[2], seen[4]);
    pp_search_free(&r);
    o.tensor = 3;
    ck_assert_int_eq(pp_search_run(&o, &r, err), PP_SEARCH_NONE);
    fflush(err);
    ck_has(msg, "ppc --search: --tensor 3 does not divide W=4");
    pp_search_free(&r);
    fclose(err);
    free(msg);
}
END_TEST

/* ppc --search without --tensor explores T as --tensor auto does (W
 * counts ranks), and --tensor 1 keeps T = 1; the rows' commands reproduce
 * their figures, T > 1 included (search's test_printed_commands_reproduce,
 * which found a recompute row's memory taken over worker 0's ranks only). */
START_TEST(search_default_explores_tensor)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/bin/ppc --search -D W=4 -D B=8 --all", PP_ROOT);
    char *out = run_expect(cmd, 0);
    ck_has(out, "/1f1b.pp -D S=2 -D B=8 -D W=2 --tensor 2");
    ck_has(out, "/1f1b.pp -D S=1 -D B=8 -D W=1 --tensor 4");
    ck_has(out, "/depth-first.pp -D S=4 -D B=8 -D W=1 --tensor 4");
    ck_has(out, "/1f1b.pp -D S=4 -D B=8 -D W=4\n");
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc --search -D W=4 -D B=8 --all --tensor 1", PP_ROOT);
    out = run_expect(cmd, 0);
    ck_assert_msg(!strstr(out, "--tensor 2") && !strstr(out, "--tensor 4") &&
                      strstr(out, "/1f1b.pp -D S=4 -D B=8 -D W=4 --tensor 1\n"),
                  "--tensor 1: expected T = 1 rows only:\n%s", out);
    free(out);
}
END_TEST

/* ppc --table --tensor 2: every row compiled with tensor = 2, the latency
 * halved, the all-reduces per rank in a last column */
START_TEST(table_with_tensor)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    ck_assert_int_eq(pp_print_table(f, PP_ROOT "/schedules", 8, 16, 2, 2, 2), PP_COMPILE_OK);
    fclose(f);
    ck_has(buf, "weight storage tensor a-r");
    ck_has(buf, "DDP    W=B          yes     16    16 | 4 / 8 ");
    ck_has(buf, "GPipe  W=S          yes     16     8 | 11.5 / 23 ");
    free(buf);
}
END_TEST

/* ------------------------------------ overlapped pairs (isa/tensor_lane.h) */

/* 1f1b-overlap.pp's order: worker s warms up with S-1-s forwards */
#define OVERLAP                                                                                    \
    "let warm = S - 1 - s\npriority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : "           \
    "warm + 1 + 2 * b\norder strict\noverlap F with B when b > warm\n"

/* Overlapped pairs under tensor = 2: worker 0 runs F0 F1 B0 F2 B1 F3 B2
 * B3, pairing (B0, F2) and (B1, F3). */
static void compile_overlap(pp_compiled *c, const char *more)
{
    char src[1024];
    snprintf(src, sizeof src, "%s%stensor = 2\n%s", HEAD, OVERLAP, more);
    pp_compile_status st = compile_text_to(c, src, PP_STAGE_PLANS);
    ck_assert_msg(st == PP_COMPILE_OK, "overlap with tensor = 2: %s", c->msgs ? c->msgs : "");
}

/* The refusal is gone: `overlap` with tensor = 2 (and --tensor 2, which
 * the driver applies with pp_tensor_override) compiles, each pair reads
 * Overlap, TensorReduce, job, TensorReduce, job, the second on lane 1, and
 * the listing says so. */
START_TEST(overlap_compiles)
{
    pp_compiled c;
    compile_overlap(&c, "");
    ck_assert_int_gt(c.sim.npairs, 0);
    const pp_plan *p = &c.plans[1];
    int pairs = 0;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        if (p->code[i].op != PP_OP_Overlap)
            continue;
        pairs++;
        ck_assert_uint_lt(i + 4, p->ninstr);
        ck_assert_int_eq(p->code[i + 1].op, PP_OP_TensorReduce);
        ck_assert_int_eq(p->code[i + 3].op, PP_OP_TensorReduce);
        ck_assert_int_eq(pp_tensor_lane(p, i + 1), 0);
        ck_assert_int_eq(pp_tensor_lane(p, i + 3), 1);
        uint32_t a, b;
        ck_assert(pp_pair_jobs(p, i, &a, &b));
        ck_assert_uint_eq(a, i + 2);
        ck_assert_uint_eq(b, i + 4);
    }
    ck_assert_int_gt(pairs, 0);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    pp_plan_disasm(p, f);
    fclose(f);
    ck_has(buf, "over tensor group g0 {0,1} on lane 1 (the pair's second job: its own "
                "communicator)");
    free(buf);
    pp_compiled_free(&c);
    pp_compile_opts co = pp_compile_defaults();
    const char *src = HEAD OVERLAP;
    co.path = "t.pp";
    co.text = src;
    co.len = strlen(src);
    co.tensor = 2;
    co.capture = 1;
    ck_assert_int_eq(pp_compile(&co, &c), PP_COMPILE_OK);
    ck_assert_uint_eq(c.plans[0].world, 4);
    ck_assert_int_gt(c.sim.npairs, 0);
    pp_compiled_free(&c);
    /* what stays an error with T > 1 says so at its place */
    expect_error(HEAD "tensor = 2\noverlap F with B when b > 0\n",
                 "t.pp:6:1: error: 'overlap' needs 'order strict'");
}
END_TEST

/* A malformed pair is still refused, saying what was expected: a pair's
 * second job without its TensorReduce, and another instruction between
 * the pair's jobs. */
START_TEST(overlap_malformed)
{
    pp_compiled c;
    char err[512];
    compile_overlap(&c, "");
    pp_plan *p = &c.plans[1];
    uint32_t i = find_op(p, PP_OP_Overlap, 0);
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_OK);
    /* the second job's TensorReduce removed */
    pp_instr tr = p->code[i + 3];
    memmove(&p->code[i + 3], &p->code[i + 4], (p->ninstr - i - 4) * sizeof *p->code);
    p->ninstr--;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_EOPERAND);
    ck_has(err, "a tensor-parallel job without a TensorReduce right before it");
    /* put back, and the instruction after the pair moved between its
     * jobs: the second job is no longer the pair's */
    memmove(&p->code[i + 4], &p->code[i + 3], (p->ninstr - i - 3) * sizeof *p->code);
    p->code[i + 3] = tr;
    p->ninstr++;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_OK);
    pp_instr after = p->code[i + 5];
    ck_assert_msg(pp_op_job_of(after.op) == PP_JOB_NONE && after.op != PP_OP_TensorReduce,
                  "expected a transfer after the pair, found %s", pp_op_name(after.op));
    memmove(&p->code[i + 4], &p->code[i + 3], 2 * sizeof *p->code);
    p->code[i + 3] = after;
    ck_assert_int_eq(pp_plan_validate(p, err, sizeof err), PP_PLAN_EOPERAND);
    ck_has(err, "(Overlap): expected a Forward and a Backward or BackwardInput right after it "
                "(each after its TensorReduce under tensor > 1), found other instructions");
    pp_compiled_free(&c);
}
END_TEST

/* The deadlock proof keys a group's collectives by lane: rank 1 swapping
 * a pair's two jobs (each with its TensorReduce) would put on lane 0 what
 * rank 0 puts on lane 1, refused; the same swap on both members of the
 * group is fine. */
START_TEST(overlap_lane_order)
{
    pp_compiled c;
    char msg[4096];
    compile_overlap(&c, "");
    ck_assert_int_eq(pp_comm_check(c.plans, 4, msg, sizeof msg), 0);
    for (int r = 1; r >= 0; r--) {
        pp_plan *p = &c.plans[r];
        uint32_t i = find_op(p, PP_OP_Overlap, 0);
        pp_instr x[2] = {p->code[i + 1], p->code[i + 2]};
        p->code[i + 1] = p->code[i + 3];
        p->code[i + 2] = p->code[i + 4];
        p->code[i + 3] = x[0];
        p->code[i + 4] = x[1];
        int rc = pp_comm_check(c.plans, 4, msg, sizeof msg);
        if (r == 1) {
            ck_assert_msg(rc != 0, "lanes in different orders accepted: %s", msg);
            ck_has(msg, "meet in the same tensor all-reduce on group 0 {0,1} lane 0, but their "
                        "microbatches differ");
        } else {
            ck_assert_msg(rc == 0, "the same lanes on both members refused: %s", msg);
        }
    }
    pp_compiled_free(&c);
}
END_TEST

/* Buffer safety finds a pair's jobs past their TensorReduces: the second
 * writing the first's stash is refused. */
START_TEST(overlap_buffers)
{
    pp_compiled c;
    char msg[4096];
    compile_overlap(&c, "");
    ck_assert_int_eq(pp_buffer_check(c.plans, 4, msg, sizeof msg), 0);
    pp_plan *p = &c.plans[1];
    uint32_t i = find_op(p, PP_OP_Overlap, 0), a, b;
    ck_assert(pp_pair_jobs(p, i, &a, &b));
    pp_instr *f = p->code[a].op == PP_OP_Forward ? &p->code[a] : &p->code[b],
             *bw = f == &p->code[a] ? &p->code[b] : &p->code[a];
    f->slot[pp_slot_index(PP_OP_Forward, PP_ROLE_STASH)] = pp_slot(bw, PP_ROLE_STASH);
    ck_assert_int_ne(pp_buffer_check(c.plans, 4, msg, sizeof msg), 0);
    ck_has(msg, "the overlapped pair after @");
    pp_compiled_free(&c);
}
END_TEST

/* The simulator prices an overlapped pair's all-reduces: each job costs
 * its compute / 2 plus its all-reduces (one per block: 2 blocks, each
 * 3 + 8192 / 8192), and a pair lasts max + 50% of min of those, as
 * without tensor; the report counts the pairs' all-reduces like any. */
START_TEST(overlap_priced)
{
    pp_compiled one, two;
    ck_assert_int_eq(compile_text_to(&one, HEAD OVERLAP "cost overlap = 50\nmodel { blocks = 2 }\n",
                                     PP_STAGE_PLANS),
                     PP_COMPILE_OK);
    compile_overlap(&two, "cost overlap = 50\nmodel { blocks = 2 }\ncost tensor_latency = 3\n"
                          "cost tensor_bandwidth = 8192\n");
    ck_assert_int_gt(two.sim.npairs, 0);
    ck_assert_int_eq(two.sim.npairs, one.sim.npairs);
    int N = job_count(&two.t.js), paired = 0;
    long long ars = 0;
    for (int j = 0; j < N; j++) {
        double ar = job_d(&two.t.js, j) == DIR_W ? 0 : 2 * (3 + 1);
        ck_assert_double_eq_tol(two.t.cost[j], one.t.cost[j] / 2 + ar, 1e-12);
        ars += job_d(&two.t.js, j) == DIR_W ? 0 : 2;
        int q = two.sim.partner ? two.sim.partner[j] : -1;
        if (q < 0)
            continue;
        paired++;
        double x = two.t.cost[j], y = two.t.cost[q];
        ck_assert_double_eq_tol(two.sim.end[j] - two.sim.start[j],
                                (x > y ? x : y) + 0.5 * (x > y ? y : x), 1e-9);
    }
    ck_assert_int_eq(paired, 2 * two.sim.npairs);
    ck_assert_int_eq(two.rep.w[0].tensor_allreduces + two.rep.w[1].tensor_allreduces, ars);
    pp_compiled_free(&one);
    pp_compiled_free(&two);
}
END_TEST

Suite *tensor_suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *lang = tcase_create("language");
    tcase_add_test(lang, language_errors);
    suite_add_tcase(s, lang);
    TCase *plans = tcase_create("plans");
    tcase_add_test(plans, pp_dp_tensor_layout);
    tcase_add_test(plans, listing);
    tcase_add_test(plans, library_tensor_2);
    tcase_add_test(plans, library_tensor_4);
    tcase_add_test(plans, gpt_shard_sizes);
    tcase_add_test(plans, llama_shard_sizes);
    tcase_add_test(plans, gpt_prices);
    tcase_add_test(plans, simulator_prices_tensor);
    tcase_add_test(plans, tensor_flag);
    tcase_add_test(plans, search_explores_tensor);
    tcase_add_test(plans, search_default_explores_tensor);
    tcase_add_test(plans, table_with_tensor);
    suite_add_tcase(s, plans);
    TCase *proofs = tcase_create("proofs");
    tcase_add_test(proofs, validator_refuses);
    tcase_add_test(proofs, validator_recompute);
    tcase_add_test(proofs, commcheck_refuses);
    suite_add_tcase(s, proofs);
    TCase *overlap = tcase_create("overlap");
    tcase_add_test(overlap, overlap_compiles);
    tcase_add_test(overlap, overlap_malformed);
    tcase_add_test(overlap, overlap_lane_order);
    tcase_add_test(overlap, overlap_buffers);
    tcase_add_test(overlap, overlap_priced);
    suite_add_tcase(s, overlap);
    return s;
}
