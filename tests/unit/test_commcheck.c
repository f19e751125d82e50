/* test_commcheck.c - the communication checker (isa/commcheck.c) on
 * hand-made plans: exchanges that complete, every kind of deadlock under
 * NCCL's unbuffered rendezvous (receive-first and send-first pairs, a
 * three-rank cycle, collectives in different orders, a peer that ends
 * early), pairs and collectives that disagree, operands the checker must
 * refuse, bounded messages, a 1F1B pipeline that is correct without
 * buffering next to the textbook order that is not, and a large ring. */
#include <stdlib.h>
#include <string.h>

#include "../../isa/commcheck.h"
#include "suites.h"

/* ------------------------------------------------------------- fixtures */

/* W plans under construction, one growing instruction list per rank. */
typedef struct {
    int W;
    pp_plan *p;
    uint32_t *cap;
} world;

static pp_instr ins(int op, int s, int b, int peer, int g)
{
    pp_instr in = {(uint8_t)op, s, b, peer, g, {-1, -1, -1, -1, -1}};
    return in;
}

#define LMB(b) ins(PP_OP_LoadMicroBatch, -1, b, -1, -1)
#define FWD(s, b) ins(PP_OP_Forward, s, b, -1, -1)
#define BWD(s, b) ins(PP_OP_Backward, s, b, -1, -1)
#define SA(s, b, p) ins(PP_OP_SendActivation, s, b, p, -1)
#define RA(s, b, p) ins(PP_OP_RecvActivation, s, b, p, -1)
#define SG(s, b, p) ins(PP_OP_SendGrad, s, b, p, -1)
#define RG(s, b, p) ins(PP_OP_RecvGrad, s, b, p, -1)
#define SW(s, p) ins(PP_OP_SendWeights, s, -1, p, -1)
#define FW(s, p) ins(PP_OP_FetchWeights, s, -1, p, -1)
#define SWG(s, p) ins(PP_OP_SendWeightGrad, s, -1, p, -1)
#define RWG(s, p) ins(PP_OP_RecvWeightGrad, s, -1, p, -1)
#define ZERO(s) ins(PP_OP_ZeroGrads, s, -1, -1, -1)
#define RED(s, g) ins(PP_OP_ReduceGrads, s, -1, -1, g)
#define STEP(s) ins(PP_OP_OptimizerStep, s, -1, -1, -1)

static void world_init(world *w, int W)
{
    w->W = W;
    w->p = calloc((size_t)W, sizeof *w->p);
    w->cap = calloc((size_t)W, sizeof *w->cap);
    ck_assert(w->p && w->cap);
    for (int r = 0; r < W; r++) {
        pp_plan *p = &w->p[r];
        p->version = PP_PLAN_VERSION;
        p->plan_id = 42;
        p->rank = (uint32_t)r;
        p->world = (uint32_t)W;
        p->model = (pp_model){
            .vocab = 256, .context = 8, .embed = 16, .ffn = 256, .blocks = 1, .batch = 16};
    }
}

static void put(world *w, int r, pp_instr in)
{
    pp_plan *p = &w->p[r];
    if (p->ninstr == w->cap[r]) {
        w->cap[r] = w->cap[r] ? 2 * w->cap[r] : 16;
        p->code = realloc(p->code, w->cap[r] * sizeof *p->code);
        ck_assert(p->code);
    }
    p->code[p->ninstr++] = in;
}

static void code(world *w, int r, const pp_instr *list, int n)
{
    for (int i = 0; i < n; i++)
        put(w, r, list[i]);
}
#define CODE(w, r, ...)                                                                            \
    do {                                                                                           \
        const pp_instr list_[] = {__VA_ARGS__};                                                    \
        code(w, r, list_, (int)(sizeof list_ / sizeof list_[0]));                                  \
    } while (0)

/* The same group in every rank's table, as the compiler emits it. */
static void add_group(world *w, const uint32_t *member, uint32_t n)
{
    for (int r = 0; r < w->W; r++) {
        pp_plan *p = &w->p[r];
        p->groups = realloc(p->groups, (p->ngroups + 1) * sizeof *p->groups);
        ck_assert(p->groups);
        p->groups[p->ngroups].n = n;
        p->groups[p->ngroups].member = malloc(n * sizeof *member);
        ck_assert(p->groups[p->ngroups].member);
        memcpy(p->groups[p->ngroups].member, member, n * sizeof *member);
        p->ngroups++;
    }
}

/* Make each plan whole as plan.h describes it (S and B cover the operands,
 * every rank computes every stage; slots stay -1), then check. */
static int check(world *w, char *msg, size_t len)
{
    for (int r = 0; r < w->W; r++) {
        pp_plan *p = &w->p[r];
        int S = 1, B = 1;
        for (uint32_t i = 0; i < p->ninstr; i++) {
            if (p->code[i].stage >= S)
                S = p->code[i].stage + 1;
            if (p->code[i].mb >= B)
                B = p->code[i].mb + 1;
        }
        p->S = (uint32_t)S;
        p->B = (uint32_t)B;
        free(p->stage_role);
        p->stage_role = malloc((size_t)S);
        ck_assert(p->stage_role);
        memset(p->stage_role, PP_ROLE_COMPUTE | PP_ROLE_OWNER, (size_t)S);
    }
    return pp_comm_check(w->p, w->W, msg, len);
}

static void world_free(world *w)
{
    for (int r = 0; r < w->W; r++)
        pp_plan_free(&w->p[r]);
    free(w->p);
    free(w->cap);
}

static void expect_ok(world *w)
{
    char msg[4096];
    int rc = check(w, msg, sizeof msg);
    ck_assert_msg(rc == 0, "expected ok, got:\n%s", msg);
    ck_assert_str_eq(msg, "ok");
}

/* Fails, and the message holds every string of want (NULL-terminated). */
static void expect_fail(world *w, const char *const *want)
{
    char msg[4096];
    int rc = check(w, msg, sizeof msg);
    ck_assert_msg(rc == -1, "expected a failure, got ok");
    for (int k = 0; want[k]; k++)
        ck_assert_msg(strstr(msg, want[k]) != NULL, "message lacks \"%s\":\n%s", want[k], msg);
}
#define EXPECT_FAIL(w, ...)                                                                        \
    do {                                                                                           \
        const char *const want_[] = {__VA_ARGS__, NULL};                                           \
        expect_fail(w, want_);                                                                     \
    } while (0)

/* --------------------------------------------------------- completing */

START_TEST(exchange_ok)
{
    world w;
    world_init(&w, 2);
    CODE(&w, 0, LMB(0), FWD(0, 0), SA(0, 0, 1), RG(1, 0, 1), BWD(0, 0), STEP(0));
    CODE(&w, 1, RA(0, 0, 0), FWD(1, 0), BWD(1, 0), SG(1, 0, 0), STEP(1));
    expect_ok(&w);
    world_free(&w);
}
END_TEST

START_TEST(empty_and_compute_only_ok)
{
    char msg[64];
    ck_assert_int_eq(pp_comm_check(NULL, 0, msg, sizeof msg), 0);
    world w;
    world_init(&w, 3);
    CODE(&w, 1, LMB(0), FWD(0, 0), BWD(0, 0), ZERO(0), STEP(0));
    expect_ok(&w);
    world_free(&w);
}
END_TEST

/* Owner rank 0 lends stage 0's weights to rank 1 and takes the gradients
 * back; then both replicas of stage 1 all-reduce. */
START_TEST(weights_and_collectives_ok)
{
    static const uint32_t both[] = {0, 1};
    world w;
    world_init(&w, 2);
    add_group(&w, both, 2);
    CODE(&w, 0, SW(0, 1), FWD(1, 0), BWD(1, 0), RWG(0, 1), STEP(0), RED(1, 0), STEP(1));
    CODE(&w, 1, FW(0, 0), ZERO(0), FWD(0, 1), BWD(0, 1), SWG(0, 0), FWD(1, 1), BWD(1, 1), RED(1, 0),
         STEP(1));
    expect_ok(&w);
    world_free(&w);
}
END_TEST

/* A ring where rank 0 sends first and the others receive first. */
START_TEST(three_rank_ring_ok)
{
    world w;
    world_init(&w, 3);
    CODE(&w, 0, SA(0, 0, 1), RA(2, 0, 2));
    CODE(&w, 1, RA(0, 0, 0), SA(1, 0, 2));
    CODE(&w, 2, RA(1, 0, 1), SA(2, 0, 0));
    expect_ok(&w);
    world_free(&w);
}
END_TEST

/* ---------------------------------------------------------- deadlocks */

START_TEST(recv_before_send_both_sides)
{
    world w;
    world_init(&w, 2);
    CODE(&w, 0, LMB(0), FWD(0, 0), RG(1, 0, 1), SA(0, 0, 1));
    CODE(&w, 1, RA(0, 0, 0), FWD(1, 0), BWD(1, 0), SG(1, 0, 0));
    EXPECT_FAIL(&w, "deadlock: 2 of 2 ranks cannot finish",
                "  rank 0 @2 RecvGrad(s=1,b=0) from 1: waits for rank 1 to reach @3 "
                "SendGrad(s=1,b=0) to 0; rank 1 is blocked at @0 RecvActivation(s=0,b=0) from 0\n",
                "  rank 1 @0 RecvActivation(s=0,b=0) from 0: waits for rank 0 to reach @3 "
                "SendActivation(s=0,b=0) to 1; rank 0 is blocked at @2 RecvGrad(s=1,b=0) from 1\n",
                "  cycle: rank 0 @2 RecvGrad(s=1,b=0) from 1 -> "
                "rank 1 @0 RecvActivation(s=0,b=0) from 0 -> rank 0");
    world_free(&w);
}
END_TEST

/* NCCL does not buffer: two sends facing each other never return. */
START_TEST(send_before_recv_both_sides)
{
    world w;
    world_init(&w, 2);
    CODE(&w, 0, FWD(0, 0), SA(0, 0, 1), RG(1, 0, 1));
    CODE(&w, 1, SG(1, 0, 0), RA(0, 0, 0));
    EXPECT_FAIL(&w, "deadlock: 2 of 2 ranks cannot finish",
                "rank 0 @1 SendActivation(s=0,b=0) to 1: waits for rank 1 to reach @1",
                "rank 1 @0 SendGrad(s=1,b=0) to 0: waits for rank 0 to reach @2",
                "cycle: rank 0 @1 SendActivation(s=0,b=0) to 1 -> "
                "rank 1 @0 SendGrad(s=1,b=0) to 0 -> rank 0");
    world_free(&w);
}
END_TEST

START_TEST(three_rank_cycle)
{
    world w;
    world_init(&w, 4); /* rank 3 takes no part and finishes */
    CODE(&w, 0, RA(2, 0, 2), SA(0, 0, 1));
    CODE(&w, 1, RA(0, 0, 0), SA(1, 0, 2));
    CODE(&w, 2, FWD(2, 0), RA(1, 0, 1), SA(2, 0, 0));
    CODE(&w, 3, FWD(3, 0));
    EXPECT_FAIL(&w, "deadlock: 3 of 4 ranks cannot finish",
                "cycle: rank 0 @0 RecvActivation(s=2,b=0) from 2 -> "
                "rank 2 @1 RecvActivation(s=1,b=0) from 1 -> "
                "rank 1 @0 RecvActivation(s=0,b=0) from 0 -> rank 0");
    char msg[4096];
    check(&w, msg, sizeof msg);
    ck_assert_ptr_null(strstr(msg, "rank 3 @"));
    world_free(&w);
}
END_TEST

START_TEST(collectives_in_different_orders)
{
    static const uint32_t both[] = {0, 1};
    world w;
    world_init(&w, 2);
    add_group(&w, both, 2);
    add_group(&w, both, 2);
    CODE(&w, 0, RED(0, 0), RED(1, 1));
    CODE(&w, 1, FWD(1, 0), RED(1, 1), RED(0, 0));
    EXPECT_FAIL(
        &w, "deadlock: 2 of 2 ranks cannot finish",
        "rank 0 @0 ReduceGrads(s=0,g=0): waits in group 0 {0,1} for rank 1 "
        "(blocked at @1 ReduceGrads(s=1,g=1))",
        "cycle: rank 0 @0 ReduceGrads(s=0,g=0) -> rank 1 @1 ReduceGrads(s=1,g=1) -> rank 0");
    world_free(&w);
}
END_TEST

/* A collective that some members joined while another waits on them. */
START_TEST(collective_and_p2p_cycle)
{
    static const uint32_t all[] = {0, 1, 2};
    world w;
    world_init(&w, 3);
    add_group(&w, all, 3);
    CODE(&w, 0, RED(0, 0), SA(0, 0, 2));
    CODE(&w, 1, RED(0, 0));
    CODE(&w, 2, RA(0, 0, 0), RED(0, 0));
    EXPECT_FAIL(
        &w, "deadlock: 3 of 3 ranks cannot finish",
        "rank 1 @0 ReduceGrads(s=0,g=0): waits in group 0 {0,1,2} for rank 2 (blocked at @0 "
        "RecvActivation(s=0,b=0) from 0)",
        "cycle: rank 0 @0 ReduceGrads(s=0,g=0) -> rank 2 @0 RecvActivation(s=0,b=0) from 0 "
        "-> rank 0");
    world_free(&w);
}
END_TEST

START_TEST(peer_ends_without_sending)
{
    world w;
    world_init(&w, 4);
    CODE(&w, 2, LMB(0), FWD(2, 0), LMB(1), FWD(2, 1), ZERO(2), RG(3, 0, 3), BWD(2, 0));
    CODE(&w, 3, FWD(3, 0), BWD(3, 0));
    EXPECT_FAIL(
        &w, "deadlock: 1 of 4 ranks cannot finish",
        "  rank 2 @5 RecvGrad(s=3,b=0) from 3: rank 3 ended its stream without sending it\n",
        "no cycle");
    world_free(&w);
}
END_TEST

/* Rank 1 sends rank 0 one activation where rank 0 expects two, then waits
 * on rank 2, which ends; the second receive names what is missing. */
START_TEST(peer_never_sends)
{
    world w;
    world_init(&w, 3);
    CODE(&w, 0, RA(1, 0, 1), RA(1, 1, 1));
    CODE(&w, 1, SA(1, 0, 0), RG(2, 0, 2));
    CODE(&w, 2, FWD(2, 0));
    EXPECT_FAIL(
        &w, "deadlock: 2 of 3 ranks cannot finish",
        "rank 0 @1 RecvActivation(s=1,b=1) from 1: rank 1 never sends it (it sends to rank 0 "
        "only 1 time)",
        "rank 1 @1 RecvGrad(s=2,b=0) from 2: rank 2 ended its stream without sending it",
        "no cycle");
    world_free(&w);
}
END_TEST

START_TEST(collective_member_ends)
{
    static const uint32_t both[] = {0, 1};
    world w;
    world_init(&w, 2);
    add_group(&w, both, 2);
    CODE(&w, 0, FWD(0, 0), RED(0, 0), STEP(0));
    CODE(&w, 1, FWD(0, 1));
    EXPECT_FAIL(&w, "rank 0 @1 ReduceGrads(s=0,g=0): waits in group 0 {0,1} for rank 1 (ended its "
                    "stream without reaching it)");
    world_free(&w);
}
END_TEST

/* ---------------------------------------------------------- mismatches */

START_TEST(collective_stage_mismatch)
{
    static const uint32_t both[] = {0, 1};
    world w;
    world_init(&w, 2);
    add_group(&w, both, 2);
    CODE(&w, 0, RED(0, 0));
    CODE(&w, 1, FWD(1, 0), RED(1, 0));
    EXPECT_FAIL(&w, "mismatch: rank 0 @0 ReduceGrads(s=0,g=0) and rank 1 @1 ReduceGrads(s=1,g=0) "
                    "meet in the same collective on group 0 {0,1}, but their stages differ");
    world_free(&w);
}
END_TEST

START_TEST(p2p_kind_mismatch)
{
    world w;
    world_init(&w, 2);
    CODE(&w, 0, FWD(0, 0), SA(0, 0, 1));
    CODE(&w, 1, RG(0, 0, 0));
    EXPECT_FAIL(&w, "mismatch: ", "rank 0 @1 SendActivation(s=0,b=0) to 1",
                "rank 1 @0 RecvGrad(s=0,b=0) from 0", "(transfer #1 from rank 0 to rank 1)",
                "different kinds of transfer");
    world_free(&w);
}
END_TEST

/* The second transfer of a pair carries the wrong microbatch; then one
 * with the wrong stage. Issue order decides the match, not the operands. */
START_TEST(p2p_operand_mismatch)
{
    world w;
    world_init(&w, 2);
    CODE(&w, 0, SA(0, 0, 1), SA(0, 1, 1));
    CODE(&w, 1, RA(0, 0, 0), RA(0, 2, 0));
    EXPECT_FAIL(&w, "mismatch: ", "rank 0 @1 SendActivation(s=0,b=1) to 1",
                "rank 1 @1 RecvActivation(s=0,b=2) from 0", "transfer #2",
                "their microbatches differ");
    world_free(&w);
    world_init(&w, 2);
    CODE(&w, 0, RWG(0, 1));
    CODE(&w, 1, SWG(1, 0));
    EXPECT_FAIL(&w, "mismatch: ", "RecvWeightGrad(s=0) from 1", "SendWeightGrad(s=1) to 0",
                "their stages differ");
    world_free(&w);
}
END_TEST

/* ---------------------------------------------------- refused operands */

START_TEST(invalid_operands)
{
    static const uint32_t zero[] = {0}, one[] = {1}, both[] = {0, 1};
    world w;
    world_init(&w, 2);
    CODE(&w, 0, SA(0, 0, 2));
    EXPECT_FAIL(&w,
                "invalid: rank 0 @0 SendActivation(s=0,b=0) to 2: peer 2 out of range (world 2)");
    world_free(&w);

    world_init(&w, 2);
    CODE(&w, 1, FWD(0, 0), RG(0, 0, 1));
    EXPECT_FAIL(&w,
                "invalid: rank 1 @1 RecvGrad(s=0,b=0) from 1: a rank cannot receive from itself");
    world_free(&w);

    world_init(&w, 2);
    CODE(&w, 0, SA(0, 0, -1));
    EXPECT_FAIL(&w, "peer -1 out of range");
    world_free(&w);

    world_init(&w, 2);
    add_group(&w, both, 2);
    CODE(&w, 0, RED(0, 1));
    EXPECT_FAIL(&w, "invalid: rank 0 @0 ReduceGrads(s=0,g=1): group 1 out of range (rank 0 has 1 "
                    "groups)");
    world_free(&w);

    world_init(&w, 2);
    add_group(&w, one, 1);
    CODE(&w, 0, RED(0, 0));
    EXPECT_FAIL(&w,
                "invalid: rank 0 @0 ReduceGrads(s=0,g=0): rank 0 is not a member of group 0 {1}");
    world_free(&w);

    /* group 0 means {0,1} to rank 0 and {0} to rank 1 */
    world_init(&w, 2);
    add_group(&w, both, 2);
    w.p[1].groups[0].n = 1;
    memcpy(w.p[1].groups[0].member, zero, sizeof zero);
    CODE(&w, 0, RED(0, 0));
    EXPECT_FAIL(&w, "invalid: group 0 is {0,1} at rank 0 but {0} at rank 1");
    world_free(&w);

    world_init(&w, 2);
    w.p[1].rank = 0;
    EXPECT_FAIL(&w, "invalid: plans[1] is rank 0 of world 2; expected rank 1 of world 2");
    world_free(&w);

    world_init(&w, 1);
    CODE(&w, 0, ins(PP_OP_COUNT, 0, 0, -1, -1));
    EXPECT_FAIL(&w, "invalid: rank 0 @0: unknown opcode");
    world_free(&w);
}
END_TEST

/* ------------------------------------------------------------ messages */

/* A 64-rank ring where everyone receives first: the message fits any
 * buffer, keeps the cycle (abbreviated) and counts the lines left out. */
START_TEST(bounded_messages)
{
    enum { W = 64 };
    world w;
    world_init(&w, W);
    for (int r = 0; r < W; r++) {
        put(&w, r, RA((r + 1) % W, 0, (r + 1) % W));
        put(&w, r, SA(r, 0, (r + W - 1) % W));
    }
    char msg[512];
    ck_assert_int_eq(check(&w, msg, sizeof msg), -1);
    ck_assert_uint_lt(strlen(msg), sizeof msg);
    ck_assert_msg(!strncmp(msg, "deadlock: 64 of 64 ranks cannot finish\n", 39), "%s", msg);
    ck_assert_msg(
        strstr(msg, "  ... 64 blocked ranks not listed\n  cycle: rank 0 @0 RecvActivation(s=1,b=0) "
                    "from 1 -> rank 1 @0"),
        "%s", msg);
    ck_assert_msg(strstr(msg, "-> ... (56 more) -> rank 62 @0 RecvActivation(s=63,b=0) from 63 -> "
                              "rank 63 @0 RecvActivation(s=0,b=0) from 0 -> rank 0"),
                  "%s", msg);

    char tiny[16];
    memset(tiny, 'x', sizeof tiny);
    ck_assert_int_eq(pp_comm_check(w.p, W, tiny, sizeof tiny), -1);
    ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
    ck_assert_int_eq(pp_comm_check(w.p, W, NULL, 0), -1);
    ck_assert_int_eq(pp_comm_check(w.p, W, tiny, 1), -1);
    ck_assert_str_eq(tiny, "");
    world_free(&w);
}
END_TEST

/* --------------------------------------------------------------- 1F1B */

/* One microbatch's forward on pipeline rank r of S (stage r); the send to
 * the next rank only if `send`. */
static void fwd_job(world *w, int r, int S, int b, int send)
{
    if (r == 0)
        put(w, r, LMB(b));
    else
        put(w, r, RA(r - 1, b, r - 1));
    put(w, r, FWD(r, b));
    if (send && r < S - 1)
        put(w, r, SA(r, b, r + 1));
}

static void bwd_job(world *w, int r, int b, int recv)
{
    if (recv && r < w->W - 1)
        put(w, r, RG(r + 1, b, r + 1));
    put(w, r, BWD(r, b));
    if (r > 0)
        put(w, r, SG(r, b, r - 1));
}

/* 1F1B on S ranks with B microbatches (Megatron's per-rank order: S-r-1
 * warm-up forwards, then one forward one backward, then the cool-down).
 * `safe`: in the steady state a rank receives the next gradient BEFORE it
 * sends its newest activation. Without buffering this order completes; the
 * textbook order (send, then receive) has rank r sending an activation while
 * rank r+1 sends it a gradient, which only a grouped send/recv (Megatron's
 * send_forward_recv_backward) or a buffered send gets through. */
static void one_f_one_b(world *w, int B, int safe)
{
    int S = w->W;
    for (int r = 0; r < S; r++) {
        int warm = S - r - 1 < B ? S - r - 1 : B;
        for (int b = 0; b < warm; b++)
            fwd_job(w, r, S, b, 1);
        for (int i = 0; i < B - warm; i++) {
            fwd_job(w, r, S, warm + i, !safe);
            if (safe && r < S - 1) {
                put(w, r, RG(r + 1, i, r + 1));
                put(w, r, SA(r, warm + i, r + 1));
            }
            bwd_job(w, r, i, !safe);
        }
        for (int b = B - warm; b < B; b++)
            bwd_job(w, r, b, 1);
        put(w, r, STEP(r));
    }
}

START_TEST(one_f_one_b_passes)
{
    int shapes[][2] = {{4, 8}, {4, 4}, {4, 2}, {2, 1}, {8, 16}};
    for (int k = 0; k < 5; k++) {
        world w;
        world_init(&w, shapes[k][0]);
        one_f_one_b(&w, shapes[k][1], 1);
        expect_ok(&w);
        world_free(&w);
    }
}
END_TEST

START_TEST(one_f_one_b_textbook_order_hangs_unbuffered)
{
    world w;
    world_init(&w, 4);
    one_f_one_b(&w, 8, 0);
    /* rank 2 sends F(2,1)'s output while rank 3, done with B(3,0), sends its gradient */
    EXPECT_FAIL(&w, "deadlock:", "SendActivation(s=2,b=1) to 3", "SendGrad(s=3,b=0) to 2",
                "cycle: ");
    world_free(&w);
}
END_TEST

/* ----------------------------------------------------------------- scale */

/* 64 ranks x 10,000 instructions: each step a forward, an exchange around
 * the ring (even ranks send first, odd ranks receive first) and a
 * backward; an all-reduce over all ranks every 500 steps. */
START_TEST(large_ring_passes)
{
    enum { W = 64, STEPS = 2500 };
    uint32_t all[W];
    world w;
    world_init(&w, W);
    for (int r = 0; r < W; r++)
        all[r] = (uint32_t)r;
    add_group(&w, all, W);
    for (int r = 0; r < W; r++) {
        int next = (r + 1) % W, prev = (r + W - 1) % W;
        for (int k = 0; k < STEPS; k++) {
            put(&w, r, FWD(r, k));
            if (r % 2 == 0) {
                put(&w, r, SA(r, k, next));
                put(&w, r, RA(prev, k, prev));
            } else {
                put(&w, r, RA(prev, k, prev));
                put(&w, r, SA(r, k, next));
            }
            put(&w, r, k % 500 == 499 ? RED(0, 0) : BWD(r, k));
        }
        ck_assert_uint_eq(w.p[r].ninstr, 10000);
    }
    expect_ok(&w);
    world_free(&w);
}
END_TEST

Suite *commcheck_suite(void)
{
    Suite *s = suite_create("commcheck");
    TCase *tc = tcase_create("ok");
    tcase_add_test(tc, exchange_ok);
    tcase_add_test(tc, empty_and_compute_only_ok);
    tcase_add_test(tc, weights_and_collectives_ok);
    tcase_add_test(tc, three_rank_ring_ok);
    suite_add_tcase(s, tc);
    tc = tcase_create("deadlock");
    tcase_add_test(tc, recv_before_send_both_sides);
    tcase_add_test(tc, send_before_recv_both_sides);
    tcase_add_test(tc, three_rank_cycle);
    tcase_add_test(tc, collectives_in_different_orders);
    tcase_add_test(tc, collective_and_p2p_cycle);
    tcase_add_test(tc, peer_ends_without_sending);
    tcase_add_test(tc, peer_never_sends);
    tcase_add_test(tc, collective_member_ends);
    suite_add_tcase(s, tc);
    tc = tcase_create("mismatch");
    tcase_add_test(tc, collective_stage_mismatch);
    tcase_add_test(tc, p2p_kind_mismatch);
    tcase_add_test(tc, p2p_operand_mismatch);
    tcase_add_test(tc, invalid_operands);
    tcase_add_test(tc, bounded_messages);
    suite_add_tcase(s, tc);
    tc = tcase_create("pipelines");
    tcase_add_test(tc, one_f_one_b_passes);
    tcase_add_test(tc, one_f_one_b_textbook_order_hangs_unbuffered);
    tcase_add_test(tc, large_ring_passes);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
