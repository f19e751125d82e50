/* test_verify.c - the verify suite: ppvm's verifier of what a plan means
 * (vm/verify.c). Every library schedule's plans pass it; the issue's
 * formerly-bad edits (each with its CRC fixed, and again with the plan id
 * forged over all ranks so the content hash cannot be what refuses them)
 * are refused with a message naming what was expected. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../vm/verify.h"
#include "suites.h"
#include "testutil.h"

/* A compile of schedules/<name> with -D defs, every rank's plan passed
 * through the file format (encode, decode) as ppvm reads it. */
typedef struct {
    pp_plan *p;
    int W;
} planset;

static planset compile_set(const char *name, const char *defs, int optimizer, int precision)
{
    char path[1024], text[256];
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, name);
    pp_define d[4];
    int nd = 0;
    snprintf(text, sizeof text, "%s", defs);
    for (char *tok = strtok(text, " "); tok && nd < 4; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        *eq = '\0';
        d[nd].name = tok;
        d[nd++].value = atoll(eq + 1);
    }
    pp_compile_opts o = pp_compile_defaults();
    o.path = path;
    o.defs = d;
    o.ndefs = nd;
    o.optimizer = optimizer;
    o.precision = precision;
    o.capture = 1;
    pp_compiled c;
    pp_compile(&o, &c);
    ck_assert_msg(c.status == PP_COMPILE_OK, "%s: %s", name, c.msgs ? c.msgs : "");
    planset s = {calloc((size_t)c.t.W, sizeof(pp_plan)), c.t.W};
    for (int r = 0; r < s.W; r++) {
        uint8_t *buf;
        size_t len;
        char err[512];
        ck_assert_int_eq(pp_plan_encode(&c.plans[r], &buf, &len), PP_PLAN_OK);
        ck_assert_msg(pp_plan_decode(buf, len, &s.p[r], err, sizeof err) == PP_PLAN_OK, "%s", err);
        free(buf);
    }
    pp_compiled_free(&c);
    return s;
}

static void free_set(planset *s)
{
    for (int r = 0; r < s->W; r++)
        pp_plan_free(&s->p[r]);
    free(s->p);
}

/* 0 when every rank and the world verify; else -1 with the first message. */
static int verify_set(const planset *s, char *err, size_t len)
{
    for (int r = 0; r < s->W; r++)
        if (pp_verify_rank(&s->p[r], err, len))
            return -1;
    return pp_verify_world(s->p, s->W, err, len);
}

/* What a forger does after an edit: recompute the plan id over all ranks. */
static void forge_id(planset *s)
{
    uint64_t id = pp_plans_id(s->p, s->W);
    for (int r = 0; r < s->W; r++)
        s->p[r].plan_id = id;
}

static const struct {
    const char *name, *defs;
    int optimizer, precision;
} library[] = {
    {"gpipe.pp", "S=4 B=4", -1, -1},         {"1f1b.pp", "S=4 B=8", -1, -1},
    {"1f1b-greedy.pp", "S=4 B=8", -1, -1},   {"zb-h1.pp", "S=4 B=8", -1, -1},
    {"ddp.pp", "S=4 B=4", PP_OPT_ADAMW, -1}, {"fsdp.pp", "S=4 B=4", PP_OPT_ADAMW, PP_PREC_BF16},
    {"lpp.pp", "", -1, -1},                  {"fslpp.pp", "", -1, -1},
    {"interleaved-1f1b.pp", "", -1, -1},     {"breadth-first.pp", "", -1, -1},
    {"depth-first.pp", "", -1, -1},          {"1f1b-gpt.pp", "", -1, -1},
};

START_TEST(library_plans_verify)
{
    for (size_t i = 0; i < sizeof library / sizeof *library; i++) {
        planset s = compile_set(library[i].name, library[i].defs, library[i].optimizer,
                                library[i].precision);
        char err[1024];
        ck_assert_msg(verify_set(&s, err, sizeof err) == 0, "%s: %s", library[i].name, err);
        free_set(&s);
    }
}
END_TEST

/* The first instruction of rank r with opcode op (and stage s, or any if < 0). */
static pp_instr *find(planset *s, int r, int op, int stage)
{
    for (uint32_t i = 0; i < s->p[r].ninstr; i++)
        if (s->p[r].code[i].op == op && (stage < 0 || s->p[r].code[i].stage == stage))
            return &s->p[r].code[i];
    ck_abort_msg("rank %d has no %s", r, pp_op_name(op));
    return NULL;
}

/* Refused, with want in the message, both as edited and with the id forged. */
static void refused(planset *s, const char *want)
{
    char err[1024];
    ck_assert_int_eq(verify_set(s, err, sizeof err), -1);
    forge_id(s);
    ck_assert_msg(verify_set(s, err, sizeof err) == -1, "a forged plan id let it through");
    ck_assert_msg(strstr(err, want), "expected '%s' in: %s", want, err);
}

/* The examples, each once a crash, a hang or a silent wrong run. */
START_TEST(forward_targets_from_wrong_slot)
{
    planset s = compile_set("1f1b.pp", "S=4 B=8", -1, -1);
    pp_instr *f = find(&s, 3, PP_OP_Forward, 3);
    pp_set_slot(f, PP_ROLE_TGT, pp_slot(f, PP_ROLE_IN)); /* targets read from the activation */
    refused(&s, "tgt");
    free_set(&s);
}
END_TEST

START_TEST(changed_b_on_one_rank)
{
    planset s = compile_set("1f1b.pp", "S=4 B=8", -1, -1);
    s.p[2].B = 7;
    refused(&s, "rank 2's plan has B 7 but rank 0's has 8");
    free_set(&s);
}
END_TEST

START_TEST(stage_switched_to_adamw)
{
    planset s = compile_set("gpipe.pp", "S=4 B=4", -1, -1);
    s.p[1].model.optimizer = PP_OPT_ADAMW;
    refused(&s, "rank 1's plan has optimizer 1 but rank 0's has 0");
    free_set(&s);
}
END_TEST

START_TEST(dropped_block)
{
    planset s = compile_set("gpipe.pp", "S=4 B=4", -1, -1);
    s.p[3].model.layers[3] = 0;
    char err[1024];
    /* its own check may already refuse it (a weightless stage's slot sizes differ) */
    if (pp_verify_rank(&s.p[3], err, sizeof err) == 0)
        refused(&s, "rank 3's plan gives stage 3 0 layers but rank 0's gives 1");
    free_set(&s);
}
END_TEST

START_TEST(duplicated_job)
{
    planset s = compile_set("gpipe.pp", "S=4 B=4", -1, -1);
    /* rank 0 runs microbatch 0 where it ran 1: its dataflow holds, but
     * F(0,0) and B(0,0) run twice and microbatch 1 never */
    for (uint32_t i = 0; i < s.p[0].ninstr; i++)
        if (s.p[0].code[i].mb == 1)
            s.p[0].code[i].mb = 0;
    refused(&s, "job F(0,0) already ran at instruction");
    free_set(&s);
}
END_TEST

START_TEST(send_to_wrong_peer)
{
    planset s = compile_set("gpipe.pp", "S=4 B=4", -1, -1);
    find(&s, 0, PP_OP_SendActivation, 0)->peer = 2;
    refused(&s, "");
    free_set(&s);
}
END_TEST

START_TEST(owner_role_dropped)
{
    planset s = compile_set("ddp.pp", "S=4 B=4", -1, -1);
    s.p[1].stage_role[0] &= (uint8_t)~PP_ROLE_OWNER;
    refused(&s, "stage 0");
    free_set(&s);
}
END_TEST

START_TEST(optimizer_before_gradients)
{
    planset s = compile_set("gpipe.pp", "S=4 B=4", -1, -1);
    pp_plan *p = &s.p[1];
    /* move the OptimizerStep to the front: every job then uses updated weights */
    pp_instr opt = *find(&s, 1, PP_OP_OptimizerStep, -1);
    uint32_t at = (uint32_t)(find(&s, 1, PP_OP_OptimizerStep, -1) - p->code);
    memmove(p->code + 1, p->code, at * sizeof *p->code);
    p->code[0] = opt;
    refused(&s, "after its OptimizerStep");
    free_set(&s);
}
END_TEST

START_TEST(plan_id_is_a_content_hash)
{
    planset s = compile_set("1f1b.pp", "S=4 B=8", -1, -1);
    /* a plausible edit every other check accepts: a bigger slot */
    s.p[1].slot_bytes[0] += 64;
    char err[1024];
    ck_assert_int_eq(verify_set(&s, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "hash to"), "%s", err);
    forge_id(&s);
    ck_assert_msg(verify_set(&s, err, sizeof err) == 0, "%s", err);
    free_set(&s);
}
END_TEST

Suite *verify_suite(void)
{
    Suite *s = suite_create("verify");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, library_plans_verify);
    tcase_add_test(tc, forward_targets_from_wrong_slot);
    tcase_add_test(tc, changed_b_on_one_rank);
    tcase_add_test(tc, stage_switched_to_adamw);
    tcase_add_test(tc, dropped_block);
    tcase_add_test(tc, duplicated_job);
    tcase_add_test(tc, send_to_wrong_peer);
    tcase_add_test(tc, owner_role_dropped);
    tcase_add_test(tc, optimizer_before_gradients);
    tcase_add_test(tc, plan_id_is_a_content_hash);
    suite_add_tcase(s, tc);
    return s;
}
