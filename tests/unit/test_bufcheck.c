/* test_bufcheck.c - the buffer-safety verifier (isa/bufcheck.c) on
 * hand-made streams: FSDP's weight-gradient return and a weight fetch
 * sharing a slot inside one group (what ppc once emitted), a receive into
 * a slot a send in the same group reads, a reused stash, a read of a slot
 * nothing has written, a job reading another microbatch's activation, an
 * instruction whose operands share a slot it writes, a split backward's W
 * before its B; and
 * the streams that are safe: concurrent reads, a pipeline rank's steady
 * state, weights kept for a later job. Every library schedule over its
 * documented range passes it in the sim suite. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/bufcheck.h"
#include "suites.h"
#include "testutil.h"

/* One rank's plan under construction (testutil.h's plan_b): S stages, 8 slots. */
static void plan_init(plan_b *b, uint32_t rank, uint32_t S)
{
    memset(b, 0, sizeof *b);
    b->p.version = PP_PLAN_VERSION;
    b->p.rank = rank;
    b->p.world = 4;
    b->p.S = S;
    b->p.B = 4;
    b->p.nslots = 8;
    b->p.stage_role = malloc(S);
    b->p.slot_bytes = calloc(8, sizeof *b->p.slot_bytes);
    ck_assert(b->p.stage_role && b->p.slot_bytes);
    memset(b->p.stage_role, PP_ROLE_COMPUTE | PP_ROLE_OWNER, S);
    b->p.model =
        (pp_model){.vocab = 256, .context = 8, .embed = 16, .ffn = 256, .blocks = 1, .batch = 16};
    for (int k = 0; k < 8; k++)
        b->p.slot_bytes[k] = 64;
}

#define END PP_ROLE_NONE
#define GROUP_START(b) plan_put(b, PP_OP_GroupStart, -1, -1, -1, END)
#define GROUP_END(b) plan_put(b, PP_OP_GroupEnd, -1, -1, -1, END)

static void expect(plan_b *b, const char *want)
{
    char err[512], msg[1024];
    ck_assert_msg(pp_plan_validate(&b->p, err, sizeof err) == PP_PLAN_OK, "invalid: %s", err);
    int rc = pp_buffer_check_plan(&b->p, msg, sizeof msg);
    if (!want)
        ck_assert_msg(rc == 0 && !strcmp(msg, "ok"), "expected ok, got: %s", msg);
    else
        ck_assert_msg(rc == -1 && strstr(msg, want), "expected '%s' in: %s", want, msg);
    pp_plan_free(&b->p);
}

START_TEST(fsdp_return_and_fetch_share_a_slot_in_a_group)
{
    plan_b b; /* rank 2 of FSDP S=4 B=4 as ppc emitted it */
    plan_init(&b, 2, 4);
    plan_put(&b, PP_OP_ZeroGrads, 3, -1, -1, PP_ROLE_WGRAD, 1, END);
    GROUP_START(&b);
    plan_put(&b, PP_OP_SendWeightGrad, 3, -1, 3, PP_ROLE_WGRAD, 1, END);
    plan_put(&b, PP_OP_FetchWeights, 0, -1, 0, PP_ROLE_WTS, 1, END);
    GROUP_END(&b);
    expect(&b, "hazard: rank 2: @2 SendWeightGrad(s=3) and @3 FetchWeights(s=0), in the group "
               "opened at @1, both touch slot s1 and FetchWeights writes it");
}
END_TEST

START_TEST(receive_into_a_slot_a_grouped_send_reads)
{
    plan_b b; /* rank 1: both transfers flow upward, so they may share a group */
    plan_init(&b, 1, 2);
    plan_put(&b, PP_OP_LoadMicroBatch, -1, 0, -1, PP_ROLE_TOKENS, 2, END);
    plan_put(&b, PP_OP_Forward, 0, 0, -1, PP_ROLE_IN, 2, PP_ROLE_STASH, 3, PP_ROLE_OUT, 0, END);
    GROUP_START(&b);
    plan_put(&b, PP_OP_SendActivation, 0, 0, 2, PP_ROLE_SRC, 0, END);
    plan_put(&b, PP_OP_RecvActivation, 0, 1, 0, PP_ROLE_DST, 0, END);
    GROUP_END(&b);
    expect(&b, "@3 SendActivation(s=0,b=0) and @4 RecvActivation(s=0,b=1), in the group opened "
               "at @2, both touch slot s0 and RecvActivation writes it");
}
END_TEST

START_TEST(own_weights_written_in_a_group_conflict_too)
{
    plan_b b; /* two sends of one stage's weights are reads: fine */
    plan_init(&b, 0, 1);
    GROUP_START(&b);
    plan_put(&b, PP_OP_SendWeights, 0, -1, 1, END);
    plan_put(&b, PP_OP_SendWeights, 0, -1, 2, END);
    GROUP_END(&b);
    expect(&b, NULL);
}
END_TEST

START_TEST(reused_stash)
{
    plan_b b;
    plan_init(&b, 0, 2);
    plan_put(&b, PP_OP_LoadMicroBatch, -1, 0, -1, PP_ROLE_TOKENS, 0, END);
    plan_put(&b, PP_OP_Forward, 0, 0, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 1, PP_ROLE_OUT, 2, END);
    plan_put(&b, PP_OP_LoadMicroBatch, -1, 1, -1, PP_ROLE_TOKENS, 3, END);
    plan_put(&b, PP_OP_Forward, 0, 1, -1, PP_ROLE_IN, 3, PP_ROLE_STASH, 1, PP_ROLE_OUT, 4, END);
    plan_put(&b, PP_OP_RecvGrad, 1, 0, 1, PP_ROLE_DST, 5, END);
    plan_put(&b, PP_OP_Backward, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 5, END);
    expect(&b, "dataflow: rank 0: @5 Backward(s=0,b=0) reads slot s1 as its stash, which should "
               "hold F(0,0)'s stash but holds F(0,1)'s stash, written by @3 Forward(s=0,b=1)");
}
END_TEST

START_TEST(read_before_anything_arrived)
{
    plan_b b;
    plan_init(&b, 1, 2);
    plan_put(&b, PP_OP_LoadMicroBatch, -1, 0, -1, PP_ROLE_TOKENS, 1, END);
    plan_put(&b, PP_OP_Forward, 1, 0, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 2, PP_ROLE_TGT, 1, END);
    expect(&b, "@1 Forward(s=1,b=0) reads slot s0 as its in, which should hold F(0,0)'s output "
               "but holds nothing (never written)");
}
END_TEST

START_TEST(wrong_microbatch_and_wrong_kind)
{
    plan_b b;
    plan_init(&b, 1, 2);
    plan_put(&b, PP_OP_RecvActivation, 0, 1, 0, PP_ROLE_DST, 0, END);
    plan_put(&b, PP_OP_LoadMicroBatch, -1, 0, -1, PP_ROLE_TOKENS, 1, END);
    plan_put(&b, PP_OP_Forward, 1, 0, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 2, PP_ROLE_TGT, 1, END);
    expect(&b, "should hold F(0,0)'s output but holds F(0,1)'s output, written by @0 "
               "RecvActivation(s=0,b=1)");
    plan_init(&b, 1, 2);
    plan_put(&b, PP_OP_RecvGrad, 0, 0, 0, PP_ROLE_DST, 0, END);
    plan_put(&b, PP_OP_SendActivation, 0, 0, 2, PP_ROLE_SRC, 0, END);
    expect(&b, "reads slot s0 as its src, which should hold F(0,0)'s output but holds B(0,0)'s "
               "input gradient");
}
END_TEST

START_TEST(operands_sharing_a_written_slot)
{
    plan_b b;
    plan_init(&b, 0, 2);
    plan_put(&b, PP_OP_LoadMicroBatch, -1, 0, -1, PP_ROLE_TOKENS, 0, END);
    plan_put(&b, PP_OP_Forward, 0, 0, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 1, PP_ROLE_OUT, 0, END);
    expect(&b, "alias: rank 0: @1 Forward(s=0,b=0) has its in and its out both in slot s0, and "
               "writes one");
}
END_TEST

/* Rank 0 of 2 up to its split backward of microbatch 0: F(0,0) with its
 * stash in s1, then the gradient from rank 1 into s3. */
static void forward_then_grad(plan_b *b)
{
    plan_init(b, 0, 2);
    plan_put(b, PP_OP_LoadMicroBatch, -1, 0, -1, PP_ROLE_TOKENS, 0, END);
    plan_put(b, PP_OP_Forward, 0, 0, -1, PP_ROLE_IN, 0, PP_ROLE_STASH, 1, PP_ROLE_OUT, 2, END);
    plan_put(b, PP_OP_RecvGrad, 1, 0, 1, PP_ROLE_DST, 3, END);
}

/* A split backward's W reads what B left in the stash, never F's stash. */
START_TEST(weight_half_before_input_half)
{
    plan_b b;
    forward_then_grad(&b);
    plan_put(&b, PP_OP_BackwardWeight, 0, 0, -1, PP_ROLE_STASH, 1, END);
    plan_put(&b, PP_OP_BackwardInput, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 3, END);
    expect(&b, "@3 BackwardWeight(s=0,b=0) reads slot s1 as its stash, which should hold the "
               "stash B(0,0) left for W but holds F(0,0)'s stash, written by @1");
    forward_then_grad(&b); /* in order: fine */
    plan_put(&b, PP_OP_BackwardInput, 0, 0, -1, PP_ROLE_STASH, 1, PP_ROLE_DOUT, 3, END);
    plan_put(&b, PP_OP_BackwardWeight, 0, 0, -1, PP_ROLE_STASH, 1, END);
    expect(&b, NULL);
}
END_TEST

START_TEST(safe_streams_pass)
{
    plan_b b; /* a middle pipeline rank: receive, compute, send, with kept weights */
    plan_init(&b, 1, 3);
    plan_put(&b, PP_OP_FetchWeights, 1, -1, 0, PP_ROLE_WTS, 7, END);
    plan_put(&b, PP_OP_ZeroGrads, 1, -1, -1, PP_ROLE_WGRAD, 6, END);
    for (int mb = 0; mb < 2; mb++) {
        int in = mb, out = 2 + mb, stash = 4 + mb;
        plan_put(&b, PP_OP_RecvActivation, 0, mb, 0, PP_ROLE_DST, in, END);
        plan_put(&b, PP_OP_Forward, 1, mb, -1, PP_ROLE_IN, in, PP_ROLE_STASH, stash, PP_ROLE_OUT,
                 out, PP_ROLE_WTS, 7, END);
        plan_put(&b, PP_OP_SendActivation, 1, mb, 2, PP_ROLE_SRC, out, END);
    }
    for (int mb = 0; mb < 2; mb++) {
        plan_put(&b, PP_OP_RecvGrad, 2, mb, 2, PP_ROLE_DST, 2 + mb, END);
        plan_put(&b, PP_OP_Backward, 1, mb, -1, PP_ROLE_STASH, 4 + mb, PP_ROLE_DOUT, 2 + mb,
                 PP_ROLE_DIN, mb, PP_ROLE_WTS, 7, PP_ROLE_WGRAD, 6, END);
        plan_put(&b, PP_OP_SendGrad, 1, mb, 0, PP_ROLE_SRC, mb, END);
    }
    GROUP_START(&b);
    plan_put(&b, PP_OP_SendWeightGrad, 1, -1, 0, PP_ROLE_WGRAD, 6, END);
    plan_put(&b, PP_OP_SendGrad, 1, 1, 0, PP_ROLE_SRC, 1, END); /* a second read of s1: fine */
    GROUP_END(&b);
    expect(&b, NULL);
}
END_TEST

START_TEST(messages_fit_any_buffer)
{
    plan_b b;
    plan_init(&b, 0, 1);
    plan_put(&b, PP_OP_SendActivation, 0, 0, 1, PP_ROLE_SRC, 0, END);
    char tiny[8];
    ck_assert_int_eq(pp_buffer_check_plan(&b.p, tiny, sizeof tiny), -1);
    ck_assert_str_eq(tiny, "dataflo");
    ck_assert_int_eq(pp_buffer_check_plan(&b.p, NULL, 0), -1);
    ck_assert_int_eq(pp_buffer_check(&b.p, 1, NULL, 0), -1);
    pp_plan_free(&b.p);
}
END_TEST

Suite *bufcheck_suite(void)
{
    Suite *s = suite_create("bufcheck");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, fsdp_return_and_fetch_share_a_slot_in_a_group);
    tcase_add_test(tc, receive_into_a_slot_a_grouped_send_reads);
    tcase_add_test(tc, own_weights_written_in_a_group_conflict_too);
    tcase_add_test(tc, reused_stash);
    tcase_add_test(tc, read_before_anything_arrived);
    tcase_add_test(tc, wrong_microbatch_and_wrong_kind);
    tcase_add_test(tc, operands_sharing_a_written_slot);
    tcase_add_test(tc, weight_half_before_input_half);
    tcase_add_test(tc, safe_streams_pass);
    tcase_add_test(tc, messages_fit_any_buffer);
    suite_add_tcase(s, tc);
    return s;
}
