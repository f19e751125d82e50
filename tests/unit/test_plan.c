/* test_plan.c - unit tests of the plan file (isa/plan.c, isa/disasm.c):
 * opcode metadata, checksums, encode/decode round trip, one test per kind of
 * damage (each must give its own status and say what is wrong), validation of
 * in-memory plans, the listing, and a deterministic mutation fuzz loop that
 * must never crash the decoder (run it under ASan/UBSan). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mkstemp, open_memstream */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../isa/opcodes.h"
#include "../../isa/comment.h"
#include "../../isa/plan.h"
#include "suites.h"

#define INSTR_BYTES (1 + 4 * 4 + 4 * PP_MAX_SLOTS)

/* ------------------------------------------------------------- fixtures */

static pp_instr mk(int op, int stage, int mb, int peer, int group, int s0, int s1, int s2, int s3)
{
    pp_instr in = {(uint8_t)op, stage, mb, peer, group, {s0, s1, s2, s3, -1}};
    return in;
}

/* Rank 1 of 4 running stage 1 of 4: one microbatch's traffic in both
 * directions, a data load, a reduction and a step; two groups, five slots. */
static void build_plan(pp_plan *p)
{
    static const uint8_t roles[] = {0, 3, 0, 2};
    static const uint64_t slots[] = {4096, 8192, 4096, 4096, 512};
    static const uint32_t g0[] = {0, 1, 2, 3}, g1[] = {1, 3};
    memset(p, 0, sizeof *p);
    p->version = PP_PLAN_VERSION;
    p->plan_id = 0x0123456789abcdefull;
    p->rank = 1;
    p->world = 4;
    p->S = 4;
    p->B = 2;
    p->model = (pp_model){.vocab = 256,
                          .context = 8,
                          .embed = 16,
                          .ffn = 256,
                          .blocks = 1,
                          .batch = 16,
                          .optimizer = PP_OPT_ADAMW,
                          .precision = PP_PREC_BF16};
    p->stage_role = malloc(sizeof roles);
    memcpy(p->stage_role, roles, sizeof roles);
    p->nslots = 5;
    p->slot_bytes = malloc(sizeof slots);
    memcpy(p->slot_bytes, slots, sizeof slots);
    p->workspace_bytes = 98304;
    p->ngroups = 2;
    p->groups = calloc(2, sizeof *p->groups);
    p->groups[0].n = 4;
    p->groups[0].member = malloc(sizeof g0);
    memcpy(p->groups[0].member, g0, sizeof g0);
    p->groups[1].n = 2;
    p->groups[1].member = malloc(sizeof g1);
    memcpy(p->groups[1].member, g1, sizeof g1);
    const pp_instr code[] = {
        mk(PP_OP_RecvActivation, 0, 0, 0, -1, 0, -1, -1, -1),
        mk(PP_OP_Forward, 1, 0, -1, -1, 0, 1, 2, -1),
        mk(PP_OP_SendActivation, 1, 0, 2, -1, 2, -1, -1, -1),
        mk(PP_OP_RecvGrad, 2, 0, 2, -1, 3, -1, -1, -1),
        mk(PP_OP_Backward, 1, 0, -1, -1, 1, 3, 0, -1),
        mk(PP_OP_SendGrad, 1, 0, 0, -1, 0, -1, -1, -1),
        mk(PP_OP_LoadMicroBatch, -1, 1, -1, -1, 4, -1, -1, -1),
        mk(PP_OP_ReduceGrads, 1, -1, -1, 0, -1, -1, -1, -1),
        mk(PP_OP_OptimizerStep, 1, -1, -1, -1, -1, -1, -1, -1),
    };
    p->ninstr = sizeof code / sizeof code[0];
    p->code = malloc(sizeof code);
    memcpy(p->code, code, sizeof code);
}

static void encode_sample(uint8_t **buf, size_t *len)
{
    pp_plan p;
    build_plan(&p);
    ck_assert_int_eq(pp_plan_encode(&p, buf, len), PP_PLAN_OK);
    pp_plan_free(&p);
}

static void put_le32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute the trailing checksum after a patch, so the check that fires is
 * the one under test and not the CRC. */
static void fix_crc(uint8_t *buf, size_t len) { put_le32(buf + len - 4, pp_crc32(buf, len - 4)); }

/* Offset of instruction i; the instruction table is the last thing before
 * the checksum, so this needs no knowledge of the group table's size. */
static size_t instr_off(size_t len, uint32_t ninstr, uint32_t i)
{
    return len - 4 - (size_t)INSTR_BYTES * (ninstr - i);
}

static int plan_is_empty(const pp_plan *p)
{
    pp_plan zero;
    memset(&zero, 0, sizeof zero);
    return memcmp(p, &zero, sizeof zero) == 0;
}

/* Decode and require `status` and a message containing `want`. */
static void expect(const uint8_t *buf, size_t len, pp_plan_status status, const char *want)
{
    pp_plan p;
    char err[512];
    pp_plan_status st = pp_plan_decode(buf, len, &p, err, sizeof err);
    ck_assert_msg(st == status, "status %d, expected %d (%s)", st, status, err);
    ck_assert_msg(strstr(err, want) != NULL, "message \"%s\" lacks \"%s\"", err, want);
    ck_assert(plan_is_empty(&p));
}

static void expect_valid(const pp_plan *p, pp_plan_status status, const char *want)
{
    char err[512];
    pp_plan_status st = pp_plan_validate(p, err, sizeof err);
    ck_assert_msg(st == status, "status %d, expected %d (%s)", st, status, err);
    ck_assert_msg(strstr(err, want) != NULL, "message \"%s\" lacks \"%s\"", err, want);
}

/* ------------------------------------------------------------- metadata */

/* The opcode numbers of the plan file, pinned: a plan written by an older
 * ppc must mean the same to a newer ppvm. Each format's list is never
 * edited: a new opcode is appended to isa/opcodes.h with the next number,
 * and the test then requires PP_PLAN_VERSION past the last pinned format
 * (and a new list for it, appended here). */
static const struct {
    unsigned version;
    int first, n; /* its opcodes: first .. first + n - 1 */
    const char *const *names;
} PINNED[] = {
    {7, 0, 19,
     (const char *const[]){"LoadMicroBatch", "Forward", "SendActivation", "RecvActivation",
                           "Backward", "BackwardInput", "BackwardWeight", "SendGrad", "RecvGrad",
                           "FetchWeights", "SendWeights", "ZeroGrads", "SendWeightGrad",
                           "RecvWeightGrad", "ReduceGrads", "OptimizerStep", "GroupStart",
                           "GroupEnd", "Overlap"}},
    {8, 19, 8,
     (const char *const[]){"Recompute", "TensorReduce", "StashTiedGrad", "SendTiedGrad",
                           "RecvTiedGrad", "AddTiedGrad", "Offload", "Reload"}},
};

START_TEST(test_opcode_numbers_are_pinned)
{
    int formats = (int)(sizeof PINNED / sizeof PINNED[0]), n = 0;
    unsigned last = PINNED[formats - 1].version;
    for (int f = 0; f < formats; f++) {
        ck_assert_int_eq(PINNED[f].first, n); /* the lists follow each other */
        for (int i = 0; i < PINNED[f].n; i++, n++)
            ck_assert_msg(n < (int)PP_OP_COUNT && !strcmp(pp_op_name(n), PINNED[f].names[i]),
                          "opcode %d is %s but plans of format %u call it %s: numbers never move",
                          n, n < (int)PP_OP_COUNT ? pp_op_name(n) : "(none)", PINNED[f].version,
                          PINNED[f].names[i]);
    }
    ck_assert_msg(PP_OP_COUNT >= n && PP_PLAN_VERSION >= last,
                  "opcodes were removed (%d opcodes, format %u; pinned: %d, format %u)",
                  (int)PP_OP_COUNT, PP_PLAN_VERSION, n, last);
    ck_assert_msg(PP_OP_COUNT == n || PP_PLAN_VERSION > last,
                  "the opcode set grew (%d opcodes; format %u had %d): bump PP_PLAN_VERSION",
                  (int)PP_OP_COUNT, PP_PLAN_VERSION, n);
}
END_TEST

/* Every property the compiler, the checkers and the VM derive from the
 * table is there and consistent, for every opcode. */
START_TEST(test_opcode_table_is_complete)
{
    for (int op = 0; op < PP_OP_COUNT; op++) {
        const pp_op_info *o = pp_op(op);
        const char *name = pp_op_name(op);
        ck_assert_msg(o && name[0] && strcmp(name, "?") && o->synopsis[0], "opcode %d", op);
        for (int q = 0; q < op; q++)
            ck_assert_msg(strcmp(name, pp_op_name(q)), "%s named twice", name);
        int transfer = o->kind == PP_KIND_SEND || o->kind == PP_KIND_RECV;
        ck_assert_int_eq(pp_op_is_transfer(op), transfer);
        if (transfer) {
            const pp_op_info *q = pp_op(o->pairs);
            ck_assert_msg(q && q->pairs == op && q->kind != o->kind &&
                              (q->kind == PP_KIND_SEND || q->kind == PP_KIND_RECV),
                          "%s: its pair must be a transfer of the other end pairing back", name);
            ck_assert_msg(o->uses == q->uses && (o->uses & PP_U_PEER) && (o->uses & PP_U_STAGE),
                          "%s: a transfer names a stage and a peer, as its pair does", name);
            ck_assert_msg(o->lane == PP_LANE_FLOW || o->lane == PP_LANE_GROUPABLE,
                          "%s: a transfer runs on the stream its data flows on", name);
            pp_instr up = {.op = (uint8_t)op, .peer = o->kind == PP_KIND_SEND ? 2 : 0};
            ck_assert_int_eq(pp_op_flow_up(&up, 1), 1);
            ck_assert_int_eq(pp_group_direction(&up, 1), o->lane == PP_LANE_GROUPABLE ? 1 : -1);
        } else {
            ck_assert_msg(o->pairs == -1 && !(o->uses & PP_U_PEER) && o->lane != PP_LANE_FLOW &&
                              o->lane != PP_LANE_GROUPABLE,
                          "%s: only transfers pair, name peers and run on flow streams", name);
        }
        ck_assert_msg((o->kind == PP_KIND_MARKER) == (o->lane == PP_LANE_NONE), "%s: lane", name);
        if (o->kind == PP_KIND_MARKER)
            ck_assert_msg(!o->uses && !pp_op_nslots(op) && !o->params && !o->grads,
                          "%s: a marker does no work", name);
        else
            /* TensorReduce's data are its next job's (isa/tensor.h) */
            ck_assert_msg(pp_op_nslots(op) || o->params || o->grads || op == PP_OP_TensorReduce,
                          "%s: touches no buffer", name);
        ck_assert_msg(o->kind != PP_KIND_COLLECTIVE || (o->uses & PP_U_GROUP), "%s: group", name);
        ck_assert_msg(o->kind != PP_KIND_COMPUTE ||
                          (o->uses & (PP_U_STAGE | PP_U_MB)) == (PP_U_STAGE | PP_U_MB),
                      "%s: a job names its stage and microbatch", name);
        for (int k = 0; k < pp_op_nslots(op); k++) {
            const pp_slot_spec *sp = &o->slot[k];
            ck_assert_msg(sp->role > PP_ROLE_NONE && sp->role < PP_ROLE_COUNT && sp->access &&
                              sp->content > PP_CONTENT_NONE && sp->content < PP_CONTENT_COUNT,
                          "%s: slot %d lacks a role, access or content", name, k);
            ck_assert_int_eq(pp_slot_index(op, sp->role), k); /* roles are unique */
            ck_assert_msg(sp->when == PP_WHEN_ANY || (sp->optional && (o->uses & PP_U_STAGE)),
                          "%s: slot %d is tied to the stage's place but is not optional", name, k);
            ck_assert_int_eq(pp_slot_wanted(sp, 0, 3), sp->when == PP_WHEN_NOT_FIRST  ? 0
                                                       : sp->when == PP_WHEN_LAST     ? 0
                                                       : sp->when == PP_WHEN_NOT_LAST ? 1
                                                       : sp->optional                 ? -1
                                                                                      : 1);
            ck_assert_str_ne(pp_role_name(sp->role), "?");
        }
        /* the job, family and tag columns agree with the kind */
        int job = pp_op_is_job(op);
        ck_assert_msg(job == (o->kind == PP_KIND_COMPUTE),
                      "%s: a COMPUTE opcode runs F, B, BI or W", name);
        ck_assert_msg(o->job != PP_JOB_O || (o->kind == PP_KIND_LOCAL && o->uses == PP_U_STAGE &&
                                             o->params == PP_ACC_UP),
                      "%s: the optimizer step updates its stage's weights", name);
        ck_assert_msg(o->family >= 0 && o->family < PP_FAMILY_COUNT, "%s: family", name);
        ck_assert_str_eq(pp_family_name(pp_op_family_of(op)), pp_family_name(o->family));
        ck_assert_msg((o->family == PP_FAMILY_COMPUTE) == job &&
                          (o->family == PP_FAMILY_OPTIMIZER) == (o->job == PP_JOB_O) &&
                          (o->family == PP_FAMILY_COLLECTIVE) == (o->kind == PP_KIND_COLLECTIVE) &&
                          (o->kind != PP_KIND_MARKER || o->family == PP_FAMILY_BOOKKEEPING),
                      "%s: family against kind and job", name);
        ck_assert_msg(transfer ? o->family == PP_FAMILY_TRANSFER || o->family == PP_FAMILY_WEIGHTS
                               : o->family != PP_FAMILY_TRANSFER && o->family != PP_FAMILY_WEIGHTS,
                      "%s: the transfer families hold the transfers", name);
        ck_assert_msg(transfer ? o->tag > PP_TAG_NONE && o->tag < PP_TAG_CLASSES &&
                                     o->tag == pp_op(o->pairs)->tag
                               : o->tag == PP_TAG_NONE,
                      "%s: a transfer has a tag class, its pair's", name);
        for (int q = 0; transfer && q < PP_OP_COUNT; q++) /* a class tells one pair apart */
            ck_assert_msg(q == op || q == o->pairs || pp_op(q)->tag != o->tag,
                          "%s and %s share a tag class but do not pair", name, pp_op_name(q));
        pp_plan tp = {.S = 3, .B = 5};
        ck_assert_int_eq(
            pp_transfer_tag(&tp, op, 2, 4),
            transfer ? (2 * 5 + ((o->uses & PP_U_MB) ? 4 : 0)) * PP_TAG_CLASSES + (int)o->tag : -1);
        ck_assert_int_lt(pp_transfer_tag(&tp, op, 2, 4), pp_transfer_tags(&tp));
        /* the listing's comment template parses and names only its operands */
        char why[160];
        ck_assert_msg(pp_comment_check(op, NULL, why, sizeof why) == 0, "%s's comment: %s", name,
                      why);
        /* a wts (wgrad) slot stands in for the rank's own weights (gradients) */
        int wts = pp_slot_index(op, PP_ROLE_WTS), wg = pp_slot_index(op, PP_ROLE_WGRAD);
        if (wts >= 0 && o->slot[wts].optional)
            ck_assert_msg(o->params, "%s: optional wts but no own-weights access", name);
        if (wg >= 0 && o->slot[wg].optional)
            ck_assert_msg(o->grads, "%s: optional wgrad but no own-gradients access", name);
    }
    ck_assert_ptr_null(pp_op(PP_OP_COUNT));
    ck_assert_ptr_null(pp_op(-1));
}
END_TEST

/* A template that names what its opcode lacks, or is malformed, is refused
 * with the fault; the table's own pass (test_opcode_table_is_complete). */
START_TEST(test_comment_template_faults)
{
    static const struct {
        int op;
        const char *tmpl, *want;
    } bad[] = {
        {PP_OP_Forward, "F({s},{b}) to {p}", "{p}: Forward has no such operand"},
        {PP_OP_Forward, "{src}", "{src}: Forward has no such slot"},
        {PP_OP_Forward, "{nope}", "{nope}: no such operand"},
        {PP_OP_Forward, "[?out:x", "unclosed [?out"},
        {PP_OP_Forward, "[?dst:x]", "bad condition [?dst"},
        {PP_OP_Forward, "[=out:x]", "bad condition [=out"},
        {PP_OP_Forward, "x]", "a ']' closes no '['"},
        {PP_OP_GroupEnd, "{s", "unclosed {s"},
        {PP_OP_COUNT, "x", "has no comment template"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char why[160] = "";
        ck_assert_int_eq(pp_comment_check(bad[k].op, bad[k].tmpl, why, sizeof why), -1);
        ck_assert_msg(strstr(why, bad[k].want), "%s: got '%s', want '%s'", bad[k].tmpl, why,
                      bad[k].want);
    }
    char why[160];
    ck_assert_int_eq(pp_comment_check(PP_OP_ReduceGrads, "{s} {g} {members}", why, sizeof why), 0);
}
END_TEST

/* ppc --opcodes' Markdown: a header, then one row per opcode in number
 * order with its name, kind, partner, stream, job, family, tag and synopsis
 * (isa/README.md points there rather than holding a copy, so a new opcode
 * edits no document). */
START_TEST(test_opcode_markdown)
{
    char *gen = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&gen, &len);
    pp_ops_markdown(m);
    fclose(m);
    const char *line = gen;
    ck_assert(
        !strncmp(line, "| # | opcode | kind | pairs with | stream | job | family | tag |", 61));
    line = strchr(line, '\n') + 1;
    line = strchr(line, '\n') + 1; /* the rule under the header */
    for (int op = 0; op < PP_OP_COUNT; op++) {
        char want[128];
        snprintf(want, sizeof want, "| %d | %s | ", op, pp_op_name(op));
        ck_assert_msg(!strncmp(line, want, strlen(want)), "row %d: %.60s", op, line);
        const char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        char syn[160];
        snprintf(syn, sizeof syn, "| %s |", pp_op_synopsis(op));
        ck_assert_msg(end - line > (long)strlen(syn) &&
                          !strncmp(end - strlen(syn), syn, strlen(syn)),
                      "row %d lacks its synopsis", op);
        line = end + 1;
    }
    ck_assert_str_eq(line, "");
    ck_assert_ptr_nonnull(strstr(gen, "| 1 | Forward | compute | - | compute | F | compute | - |"));
    ck_assert_ptr_nonnull(
        strstr(gen, "| 9 | FetchWeights | receive | SendWeights | up/down, groupable | - | "
                    "weights | weights |"));
    ck_assert_ptr_nonnull(strstr(gen, "`din?` (not first stage) writes input gradient of B"));
    free(gen);
}
END_TEST

/* Slot operands by role: set and read back, and absent roles. */
START_TEST(test_slots_by_role)
{
    pp_instr in = {PP_OP_Backward, 1, 2, -1, -1, {-1, -1, -1, -1, -1}};
    ck_assert_int_eq(pp_set_slot(&in, PP_ROLE_DIN, 7), 0);
    ck_assert_int_eq(pp_slot(&in, PP_ROLE_DIN), 7);
    ck_assert_int_eq(pp_slot(&in, PP_ROLE_DOUT), -1);
    ck_assert_int_eq(pp_set_slot(&in, PP_ROLE_TGT, 3), -1); /* Backward has no targets */
    ck_assert_int_eq(pp_slot(&in, PP_ROLE_TGT), -1);
    pp_touch t[PP_MAX_TOUCH];
    /* no wts, no wgrad: B reads the own weights and accumulates the own grads */
    ck_assert_int_eq(pp_instr_touches(&in, t), 3);
    ck_assert_int_eq(t[1].kind, PP_BUF_PARAMS);
    ck_assert_int_eq(t[2].kind, PP_BUF_GRADS);
    ck_assert_int_eq(t[2].access, PP_ACC_UP);
    pp_set_slot(&in, PP_ROLE_WTS, 4);
    pp_set_slot(&in, PP_ROLE_WGRAD, 5);
    ck_assert_int_eq(pp_instr_touches(&in, t), 3); /* din, wts, wgrad */
    ck_assert_int_eq(t[2].spec->role, PP_ROLE_WGRAD);
}
END_TEST

START_TEST(test_op_metadata)
{
    int opt = -1;
    ck_assert_str_eq(pp_op_name(PP_OP_Forward), "Forward");
    ck_assert_str_eq(pp_op_name(PP_OP_OptimizerStep), "OptimizerStep");
    ck_assert_str_eq(pp_op_name(PP_OP_COUNT), "?");
    ck_assert_str_eq(pp_op_name(-1), "?");
    ck_assert_uint_eq(pp_op_uses(PP_OP_SendGrad), PP_U_STAGE | PP_U_MB | PP_U_PEER);
    ck_assert_uint_eq(pp_op_uses(PP_OP_LoadMicroBatch), PP_U_MB);
    ck_assert_uint_eq(pp_op_uses(PP_OP_COUNT), 0);
    ck_assert_int_eq(pp_op_nslots(PP_OP_Forward), 5);
    ck_assert_int_eq(pp_op_nslots(PP_OP_Backward), 5);
    ck_assert_int_eq(pp_op_nslots(PP_OP_SendActivation), 1);
    ck_assert_int_eq(pp_op_nslots(PP_OP_ReduceGrads), 0);
    ck_assert_int_eq(pp_op_nslots(99), 0);
    ck_assert_str_eq(pp_op_slot_role(PP_OP_Forward, 0, &opt), "in");
    ck_assert_int_eq(opt, 0);
    ck_assert_str_eq(pp_op_slot_role(PP_OP_Forward, 2, &opt), "out");
    ck_assert_int_eq(opt, 1);
    ck_assert_str_eq(pp_op_slot_role(PP_OP_Forward, 3, &opt), "tgt");
    ck_assert_int_eq(opt, 1);
    ck_assert_str_eq(pp_op_slot_role(PP_OP_Backward, 1, NULL), "dout");
    ck_assert_str_eq(pp_op_slot_role(PP_OP_Forward, 4, &opt), "wts");
    ck_assert_int_eq(opt, 1);
    ck_assert_ptr_null(pp_op_slot_role(PP_OP_SendGrad, 1, &opt));
    ck_assert_ptr_null(pp_op_slot_role(PP_OP_ReduceGrads, 0, &opt));
    ck_assert_str_ne(pp_op_synopsis(PP_OP_Forward), "?");
}
END_TEST

START_TEST(test_checksums)
{
    ck_assert_uint_eq(pp_crc32((const uint8_t *)"123456789", 9), 0xCBF43926u);
    ck_assert_uint_eq(pp_crc32((const uint8_t *)"", 0), 0);
    ck_assert_uint_eq(pp_fnv1a64(PP_FNV_OFFSET, "", 0), PP_FNV_OFFSET);
    /* the published FNV-1a test vector, from the standard offset basis */
    ck_assert_uint_eq(pp_fnv1a64(0xcbf29ce484222325ull, "a", 1), 0xaf63dc4c8601ec8cull);
    /* chaining two calls equals one call over the concatenation */
    ck_assert_uint_eq(pp_fnv1a64(pp_fnv1a64(PP_FNV_OFFSET, "foo", 3), "bar", 3),
                      pp_fnv1a64(PP_FNV_OFFSET, "foobar", 6));
}
END_TEST

/* ------------------------------------------------------------ round trip */

static void assert_same_plan(const pp_plan *a, const pp_plan *b)
{
    ck_assert_uint_eq(a->version, b->version);
    ck_assert_uint_eq(a->plan_id, b->plan_id);
    ck_assert_uint_eq(a->rank, b->rank);
    ck_assert_uint_eq(a->world, b->world);
    ck_assert_uint_eq(a->S, b->S);
    ck_assert_uint_eq(a->B, b->B);
    ck_assert_uint_eq(a->model.context, b->model.context);
    ck_assert_uint_eq(a->model.embed, b->model.embed);
    ck_assert_uint_eq(a->model.ffn, b->model.ffn);
    ck_assert_uint_eq(a->model.blocks, b->model.blocks);
    ck_assert_uint_eq(a->model.batch, b->model.batch);
    ck_assert_mem_eq(a->stage_role, b->stage_role, a->S);
    ck_assert_uint_eq(a->nslots, b->nslots);
    for (uint32_t i = 0; i < a->nslots; i++)
        ck_assert_uint_eq(a->slot_bytes[i], b->slot_bytes[i]);
    ck_assert_uint_eq(a->workspace_bytes, b->workspace_bytes);
    ck_assert_uint_eq(a->ngroups, b->ngroups);
    for (uint32_t g = 0; g < a->ngroups; g++) {
        ck_assert_uint_eq(a->groups[g].n, b->groups[g].n);
        for (uint32_t k = 0; k < a->groups[g].n; k++)
            ck_assert_uint_eq(a->groups[g].member[k], b->groups[g].member[k]);
    }
    ck_assert_uint_eq(a->ninstr, b->ninstr);
    for (uint32_t i = 0; i < a->ninstr; i++) {
        const pp_instr *x = &a->code[i], *y = &b->code[i];
        ck_assert_uint_eq(x->op, y->op);
        ck_assert_int_eq(x->stage, y->stage);
        ck_assert_int_eq(x->mb, y->mb);
        ck_assert_int_eq(x->peer, y->peer);
        ck_assert_int_eq(x->group, y->group);
        for (int k = 0; k < PP_MAX_SLOTS; k++)
            ck_assert_int_eq(x->slot[k], y->slot[k]);
    }
}

/* The plan id's value is pinned: it is the hash of the contents as they
 * would be written little-endian with 64-bit counts, whatever the host's
 * endianness or pointer width, so plans (and the weights and checkpoints
 * that name their id) move between hosts; and a change to what it covers
 * shows here. The same plan with per-stage layers hashes otherwise. */
START_TEST(test_plan_id_is_pinned)
{
    pp_plan p;
    build_plan(&p);
    ck_assert_uint_eq(pp_plans_id(&p, 1), 0x5bd60df9ccac9d01ull);
    uint32_t layers[] = {1, 2, 0, 1};
    p.model.layers = layers;
    ck_assert_uint_eq(pp_plans_id(&p, 1), 0x6946977e963915afull);
    p.model.layers = NULL;
    pp_plan_free(&p);
}
END_TEST

START_TEST(test_round_trip)
{
    pp_plan a, b;
    uint8_t *buf, *buf2;
    size_t len, len2;
    char err[256];
    build_plan(&a);
    ck_assert_int_eq(pp_plan_validate(&a, err, sizeof err), PP_PLAN_OK);
    ck_assert_int_eq(pp_plan_encode(&a, &buf, &len), PP_PLAN_OK);
    /* magic, the version (little-endian u32), the plan id */
    uint8_t head[16] = "PPLN\0\0\0\0\xef\xcd\xab\x89\x67\x45\x23\x01";
    for (int k = 0; k < 4; k++)
        head[4 + k] = (uint8_t)(PP_PLAN_VERSION >> (8 * k));
    ck_assert_mem_eq(buf, head, 16);
    ck_assert_int_eq(pp_plan_decode(buf, len, &b, err, sizeof err), PP_PLAN_OK);
    assert_same_plan(&a, &b);
    ck_assert_int_eq(pp_plan_encode(&b, &buf2, &len2), PP_PLAN_OK);
    ck_assert_uint_eq(len, len2);
    ck_assert_mem_eq(buf, buf2, len);
    free(buf);
    free(buf2);
    pp_plan_free(&a);
    pp_plan_free(&b);
}
END_TEST

/* A gpt plan with per-stage layer counts round-trips, and each model field
 * out of range is named. */
START_TEST(test_model_gpt_header)
{
    pp_plan a, b;
    uint8_t *buf;
    size_t len;
    char err[256];
    build_plan(&a);
    a.model.kind = PP_MODEL_GPT;
    a.model.vocab = 1000;
    a.model.heads = 4;
    a.model.layers = malloc(4 * sizeof *a.model.layers);
    uint32_t layers[4] = {1, 2, 0, 1};
    memcpy(a.model.layers, layers, sizeof layers);
    ck_assert_int_eq(pp_plan_validate(&a, err, sizeof err), PP_PLAN_OK);
    ck_assert_int_eq(pp_plan_encode(&a, &buf, &len), PP_PLAN_OK);
    ck_assert_int_eq(pp_plan_decode(buf, len, &b, err, sizeof err), PP_PLAN_OK);
    ck_assert_uint_eq(b.model.kind, PP_MODEL_GPT);
    ck_assert_uint_eq(b.model.vocab, 1000);
    ck_assert_uint_eq(b.model.heads, 4);
    for (int s = 0; s < 4; s++)
        ck_assert_uint_eq(pp_model_layers(&b.model, s), layers[s]);
    free(buf);
    pp_plan_free(&b);

    a.model.kind = PP_MODEL_COUNT;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: kind 3 is unknown (expected 0 for mlp, 1 for gpt or 2 for llama)");
    a.model.kind = PP_MODEL_GPT;
    a.model.tie = 2;
    expect_valid(&a, PP_PLAN_EHEADER, "model: tie is 2 (expected 0, or 1 for gpt and llama)");
    a.model.tie = 0;
    a.model.kv_heads = 1;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: gpt has llama's kv_heads, rope_theta or norm_eps set (expected 0)");
    a.model.kind = PP_MODEL_LLAMA; /* embed 16, heads 4 */
    a.model.kv_heads = 3;
    a.model.rope_theta = 10000;
    a.model.norm_eps = 1e-5f;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: llama kv_heads is 3 (expected 1 to heads 4, dividing it)");
    a.model.kv_heads = 2;
    a.model.norm_eps = 0.0f;
    expect_valid(&a, PP_PLAN_EHEADER, "model: llama norm_eps is 0 (expected in (0, 1))");
    a.model.norm_eps = 1e-5f;
    ck_assert_int_eq(pp_plan_validate(&a, err, sizeof err), PP_PLAN_OK);
    ck_assert_int_eq(pp_plan_encode(&a, &buf, &len), PP_PLAN_OK);
    ck_assert_int_eq(pp_plan_decode(buf, len, &b, err, sizeof err), PP_PLAN_OK);
    ck_assert_uint_eq(b.model.kv_heads, 2);
    ck_assert_uint_eq(b.model.rope_theta, 10000);
    ck_assert(b.model.norm_eps == 1e-5f);
    free(buf);
    pp_plan_free(&b);
    a.model.kind = PP_MODEL_GPT;
    a.model.kv_heads = 0;
    a.model.rope_theta = 0;
    a.model.norm_eps = 0.0f;
    a.model.heads = 3;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: gpt heads is 3 (expected 1 to 4096, dividing embed 16)");
    a.model.heads = 4;
    a.model.vocab = 1;
    expect_valid(&a, PP_PLAN_EHEADER, "model: gpt vocab is 1 (expected 2 to 1048576)");
    a.model.vocab = 1000;
    a.model.layers[2] = PP_MAX_LAYERS + 1;
    expect_valid(&a, PP_PLAN_EHEADER, "model: stage 2 has 1025 layers (expected at most 1024)");
    a.model.layers[2] = 0;
    a.model.kind = PP_MODEL_MLP;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: mlp vocab is 1000 (expected 256: the mlp model reads bytes)");
    pp_plan_free(&a);
}
END_TEST

/* A hostile plan's model sizes are refused before anything is sized with
 * them: each field has ppc's range (beyond it the layouts' size_t
 * arithmetic and the shapes' int casts wrap: context 2^32-1 made
 * context + 1 zero and gpt's T negative, and the reference then failed
 * silently), and the widest activation tensor must fit the kernels' int. */
START_TEST(test_model_size_bounds)
{
    pp_plan a;
    build_plan(&a);
    a.model.context = UINT32_MAX;
    expect_valid(&a, PP_PLAN_EHEADER, "model: context is 4294967295 (expected 1 to 4096 tokens)");
    a.model.context = 8;
    a.model.embed = 65537;
    expect_valid(&a, PP_PLAN_EHEADER, "model: embed is 65537 (expected 1 to 65536)");
    a.model.embed = 16;
    a.model.ffn = (1u << 20) + 1;
    expect_valid(&a, PP_PLAN_EHEADER, "model: ffn is 1048577 (expected 1 to 1048576)");
    a.model.ffn = 256;
    a.model.batch = UINT32_MAX;
    expect_valid(&a, PP_PLAN_EHEADER, "model: batch is 4294967295 (expected 1 to 1048576 samples)");
    /* mlp: 2^20 samples of 4096 * 16 floats */
    a.model.batch = 1u << 20;
    a.model.context = 4096;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: its widest activation tensor has 68719476736 elements (expected at most "
                 "2147483647: the kernels index with int)");
    a.model.batch = 16;
    a.model.context = 8;
    a.model.kind = PP_MODEL_GPT;
    a.model.vocab = 1000;
    a.model.heads = 8192;
    a.model.embed = 8192;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: gpt heads is 8192 (expected 1 to 4096, dividing embed 8192)");
    /* gpt: 2^20 * 4096 rows */
    a.model.heads = 4;
    a.model.embed = 16;
    a.model.batch = 1u << 20;
    a.model.context = 4096;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: its widest activation tensor has 4294967296000 elements (expected at "
                 "most 2147483647: the kernels index with int)");
    a.model.batch = 16;
    a.model.context = 8;
    char err[256];
    ck_assert_int_eq(pp_plan_validate(&a, err, sizeof err), PP_PLAN_OK);
    pp_plan_free(&a);

    /* 2^21 + 1 stages of 1024 layers: more than gpt_shape_of's int sum
     * holds (the file would be about 10 MB: a hostile plan can be). */
    build_plan(&a);
    uint32_t S = (1u << 21) + 1;
    uint8_t *role = calloc(S, 1);
    a.model.layers = malloc(S * sizeof *a.model.layers);
    for (uint32_t s = 0; s < S; s++)
        a.model.layers[s] = PP_MAX_LAYERS;
    uint8_t *role0 = a.stage_role;
    a.stage_role = role;
    uint32_t S0 = a.S;
    a.S = S;
    expect_valid(&a, PP_PLAN_EHEADER,
                 "model: the stages have 2147484672 layers in all (expected at most 1073741824)");
    a.S = S0;
    a.stage_role = role0;
    free(role);
    pp_plan_free(&a);
}
END_TEST

/* A plan with no slots, groups or instructions is legal and round-trips. */
START_TEST(test_round_trip_empty_tables)
{
    static uint8_t role[1] = {PP_ROLE_COMPUTE | PP_ROLE_OWNER};
    pp_plan a, b;
    memset(&a, 0, sizeof a);
    a.version = PP_PLAN_VERSION;
    a.world = a.S = a.B = 1;
    a.model = (pp_model){.vocab = 256, .context = 1, .embed = 1, .ffn = 1, .blocks = 0, .batch = 1};
    a.stage_role = role;
    uint8_t *buf;
    size_t len;
    char err[256];
    ck_assert_int_eq(pp_plan_encode(&a, &buf, &len), PP_PLAN_OK);
    ck_assert_int_eq(pp_plan_decode(buf, len, &b, err, sizeof err), PP_PLAN_OK);
    assert_same_plan(&a, &b);
    ck_assert_ptr_null(b.code);
    pp_plan_free(&b);
    free(buf);
}
END_TEST

START_TEST(test_file_round_trip)
{
    pp_plan a, b;
    char err[512], path[] = "/tmp/pp_test_plan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    build_plan(&a);
    ck_assert_int_eq(pp_plan_write(&a, path, err, sizeof err), PP_PLAN_OK);
    ck_assert_int_eq(pp_plan_read(path, &b, err, sizeof err), PP_PLAN_OK);
    assert_same_plan(&a, &b);
    pp_plan_free(&b);
    remove(path);
    ck_assert_int_eq(pp_plan_read(path, &b, err, sizeof err), PP_PLAN_EIO);
    ck_assert_ptr_nonnull(strstr(err, path));
    ck_assert_ptr_nonnull(strstr(err, "cannot open"));
    ck_assert_int_eq(pp_plan_write(&a, "/nonexistent-dir/x.plan", err, sizeof err), PP_PLAN_EIO);
    pp_plan_free(&a);
}
END_TEST

/* -------------------------------------------------------------- damage */

START_TEST(test_bad_magic)
{
    static const uint8_t elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
    expect(elf, sizeof elf, PP_PLAN_EMAGIC, "bad magic: expected \"PPLN\", found 7f 45 4c 46");
    expect((const uint8_t *)"PX", 2, PP_PLAN_EMAGIC, "found 50 58");
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    buf[3] = 'M';
    expect(buf, len, PP_PLAN_EMAGIC, "bad magic");
    free(buf);
}
END_TEST

/* The version is checked before the checksum (see plan.c): a newer file
 * must read as "unsupported version", with or without a matching CRC. */
START_TEST(test_unknown_version)
{
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    char want[96], newer[32];
    snprintf(want, sizeof want, "unsupported plan format version %u (this reader knows version %u)",
             PP_PLAN_VERSION + 1, PP_PLAN_VERSION);
    snprintf(newer, sizeof newer, "version %u", PP_PLAN_VERSION + 1);
    put_le32(buf + 4, PP_PLAN_VERSION + 1);
    fix_crc(buf, len);
    expect(buf, len, PP_PLAN_EVERSION, want);
    put_le32(buf + len - 4, 0xdeadbeef);
    expect(buf, len, PP_PLAN_EVERSION, newer);
    free(buf);
}
END_TEST

START_TEST(test_truncation_every_prefix)
{
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    for (size_t n = 0; n < len; n++) {
        /* a fresh allocation of exactly n bytes, so ASan sees any overread */
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        pp_plan p;
        char err[512];
        pp_plan_status st = pp_plan_decode(cut, n, &p, err, sizeof err);
        ck_assert_msg(st == PP_PLAN_ETRUNC, "prefix %zu: status %d (%s)", n, st, err);
        ck_assert_msg(strstr(err, "truncated") != NULL, "prefix %zu: %s", n, err);
        ck_assert(plan_is_empty(&p));
        free(cut);
    }
    expect(buf, 37, PP_PLAN_ETRUNC, "truncated: file ends at byte 37 while reading the model");
    expect(buf, len - 1, PP_PLAN_ETRUNC, "while reading the checksum (need 1 more bytes)");
    expect(buf, 0, PP_PLAN_ETRUNC, "empty");
    free(buf);
}
END_TEST

START_TEST(test_crc_mismatch)
{
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    /* a slot operand of instruction 4: the structure still parses */
    buf[instr_off(len, 9, 4) + 17] ^= 0x40;
    expect(buf, len, PP_PLAN_ECRC, "checksum mismatch: stored crc32 0x");
    expect(buf, len, PP_PLAN_ECRC, "(file is corrupt)");
    buf[instr_off(len, 9, 4) + 17] ^= 0x40;
    buf[len - 1] ^= 0x01;
    expect(buf, len, PP_PLAN_ECRC, "checksum mismatch");
    free(buf);
}
END_TEST

START_TEST(test_trailing_bytes)
{
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    uint8_t *more = malloc(len + 3);
    memcpy(more, buf, len);
    memset(more + len, 0, 3);
    expect(more, len + 3, PP_PLAN_ETRAILING, "trailing bytes");
    expect(more, len + 3, PP_PLAN_ETRAILING, "3 extra");
    free(more);
    free(buf);
}
END_TEST

/* A count far beyond the file must fail as truncation without trying to
 * allocate for it (ASan would abort on a multi-gigabyte calloc). */
START_TEST(test_absurd_counts)
{
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    put_le32(buf + instr_off(len, 9, 0) - 4, 0xffffffffu);
    fix_crc(buf, len);
    expect(buf, len, PP_PLAN_ETRUNC, "while reading the instruction table");
    free(buf);
    encode_sample(&buf, &len);
    /* nslots, after header, model (15 u32: format 8 added tensor, kv_heads, rope_theta,
     * norm_eps, tie), 4 roles, 4 layer counts */
    enum { SLOTS = 32 + 60 + 4 + 16 };
    put_le32(buf + SLOTS, 0x7fffffffu);
    expect(buf, len, PP_PLAN_ETRUNC, "while reading the slot table");
    put_le32(buf + SLOTS, 5);
    /* ngroups, after the 5 slots and the workspace size */
    put_le32(buf + SLOTS + 4 + 5 * 8 + 8, 0x40000000u);
    expect(buf, len, PP_PLAN_ETRUNC, "while reading the group table");
    /* a file that ends inside the workspace size */
    expect(buf, SLOTS + 4 + 5 * 8 + 3, PP_PLAN_ETRUNC, "while reading the workspace size");
    put_le32(buf + 24, 0xfffffff0u); /* S: magic, version, plan id, rank, world */
    expect(buf, len, PP_PLAN_ETRUNC, "while reading the stage roles");
    free(buf);
}
END_TEST

/* Patch one i32 field of instruction i, fix the CRC, expect EOPERAND. */
static void expect_operand(uint32_t i, int field_off, int32_t v, const char *want)
{
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    put_le32(buf + instr_off(len, 9, i) + field_off, (uint32_t)v);
    fix_crc(buf, len);
    expect(buf, len, PP_PLAN_EOPERAND, want);
    free(buf);
}

enum { F_STAGE = 1, F_MB = 5, F_PEER = 9, F_GROUP = 13, F_SLOT = 17 };

START_TEST(test_operand_out_of_range)
{
    expect_operand(1, F_STAGE, 4, "instruction 1 (Forward): stage 4 out of range [0, 4)");
    expect_operand(1, F_STAGE, -1, "instruction 1 (Forward): stage -1 out of range [0, 4)");
    expect_operand(2, F_MB, 2, "instruction 2 (SendActivation): mb 2 out of range [0, 2)");
    expect_operand(2, F_PEER, 4, "instruction 2 (SendActivation): peer 4 out of range [0, 4)");
    expect_operand(7, F_GROUP, 2, "instruction 7 (ReduceGrads): group 2 out of range [0, 2)");
    expect_operand(4, F_SLOT + 4, 5,
                   "instruction 4 (Backward): slot 'dout' is 5, out of range [0, 5)");
}
END_TEST

START_TEST(test_peer_is_self)
{
    expect_operand(2, F_PEER, 1, "instruction 2 (SendActivation): peer 1 is this rank");
}
END_TEST

START_TEST(test_unknown_opcode)
{
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    buf[instr_off(len, 9, 3)] = 200;
    fix_crc(buf, len);
    expect(buf, len, PP_PLAN_EOPERAND, "instruction 3: unknown opcode 200");
    buf[instr_off(len, 9, 3)] = PP_OP_COUNT;
    fix_crc(buf, len);
    expect(buf, len, PP_PLAN_EOPERAND, "unknown opcode");
    free(buf);
}
END_TEST

START_TEST(test_missing_required_slot)
{
    expect_operand(1, F_SLOT, -1, "instruction 1 (Forward): required slot 'in' is missing");
    expect_operand(5, F_SLOT, -1, "instruction 5 (SendGrad): required slot 'src' is missing");
}
END_TEST

START_TEST(test_unused_operands_must_be_absent)
{
    expect_operand(1, F_PEER, 2,
                   "instruction 1 (Forward): peer is 2 but Forward takes no peer (expected -1)");
    expect_operand(8, F_MB, 0, "instruction 8 (OptimizerStep): mb is 0");
    expect_operand(
        2, F_SLOT + 4, 1,
        "instruction 2 (SendActivation): slot operand 1 is 1 but SendActivation takes 1 slot");
}
END_TEST

/* ------------------------------------------------------- in-memory checks */

START_TEST(test_validate_header)
{
    pp_plan p;
    build_plan(&p);
    p.world = 0;
    expect_valid(&p, PP_PLAN_EHEADER, "world is 0");
    p.world = 1;
    expect_valid(&p, PP_PLAN_EHEADER, "rank 1 out of range [0, 1)");
    p.world = 4;
    p.B = 0;
    expect_valid(&p, PP_PLAN_EHEADER, "B is 0");
    p.B = 2;
    p.model.ffn = 0;
    expect_valid(&p, PP_PLAN_EHEADER, "ffn is 0");
    p.model.ffn = 256;
    p.model.blocks = 0; /* allowed: a stage may have only its embedding/head */
    expect_valid(&p, PP_PLAN_OK, "ok");
    p.model.optimizer = PP_OPT_COUNT;
    expect_valid(&p, PP_PLAN_EHEADER,
                 "model: optimizer 2 is unknown (expected 0 for sgd or 1 for adamw)");
    p.model.optimizer = PP_OPT_SGD;
    p.model.precision = PP_PREC_COUNT;
    expect_valid(&p, PP_PLAN_EHEADER,
                 "model: precision 2 is unknown (expected 0 for fp32 or 1 for bf16)");
    p.model.precision = PP_PREC_FP32;
    p.stage_role[2] = 4;
    expect_valid(&p, PP_PLAN_EHEADER, "stage 2 has role 0x04");
    p.stage_role[2] = 0;
    p.slot_bytes[3] = 0;
    expect_valid(&p, PP_PLAN_EHEADER, "slot s3 has size 0");
    p.slot_bytes[3] = 64;
    p.version = PP_PLAN_VERSION + 1;
    char knows[32];
    snprintf(knows, sizeof knows, "version %u", PP_PLAN_VERSION);
    expect_valid(&p, PP_PLAN_EVERSION, knows);
    p.version = PP_PLAN_VERSION;
    p.S = 0;
    expect_valid(&p, PP_PLAN_EHEADER, "S is 0");
    p.S = 4;
    pp_plan_free(&p);
}
END_TEST

/* GroupStart/GroupEnd: closed, not nested, not empty, holding only
 * transfers of one direction (rank 1: a send to 2 or a receive from 0 goes
 * up, a send to 0 or a receive from 2 down), RecvWeightGrad never. */
static void expect_groups(const pp_instr *code, uint32_t n, pp_plan_status status, const char *want)
{
    pp_plan p;
    build_plan(&p);
    free(p.code);
    p.code = malloc(n * sizeof *code);
    memcpy(p.code, code, n * sizeof *code);
    p.ninstr = n;
    expect_valid(&p, status, want);
    pp_plan_free(&p);
}

START_TEST(test_validate_transfer_groups)
{
    const pp_instr gs = mk(PP_OP_GroupStart, -1, -1, -1, -1, -1, -1, -1, -1);
    const pp_instr ge = mk(PP_OP_GroupEnd, -1, -1, -1, -1, -1, -1, -1, -1);
    const pp_instr up_send = mk(PP_OP_SendActivation, 1, 0, 2, -1, 2, -1, -1, -1);
    const pp_instr up_recv = mk(PP_OP_RecvActivation, 0, 0, 0, -1, 0, -1, -1, -1);
    const pp_instr down_send = mk(PP_OP_SendGrad, 1, 0, 0, -1, 0, -1, -1, -1);
    const pp_instr wgrad = mk(PP_OP_RecvWeightGrad, 1, -1, 2, -1, 0, -1, -1, -1);
    const pp_instr step = mk(PP_OP_OptimizerStep, 1, -1, -1, -1, -1, -1, -1, -1);
    const pp_instr ok[] = {gs, up_send, up_recv, ge, gs, down_send, ge};
    expect_groups(ok, 7, PP_PLAN_OK, "ok");
    const pp_instr mixed[] = {gs, up_send, down_send, ge};
    expect_groups(mixed, 4, PP_PLAN_EOPERAND,
                  "instruction 2 (SendGrad) inside the group opened at 0: its data moves the "
                  "other way (a group holds transfers of one direction)");
    const pp_instr compute[] = {gs, up_send, step, ge};
    expect_groups(compute, 4, PP_PLAN_EOPERAND,
                  "instruction 2 (OptimizerStep) inside the group opened at 0: a group holds only "
                  "point-to-point transfers other than RecvWeightGrad");
    const pp_instr add[] = {gs, wgrad, ge};
    expect_groups(add, 3, PP_PLAN_EOPERAND, "instruction 1 (RecvWeightGrad) inside the group");
    const pp_instr nested[] = {gs, up_send, gs, up_recv, ge, ge};
    expect_groups(nested, 6, PP_PLAN_EOPERAND,
                  "instruction 2 (GroupStart): the group opened at 0 is not closed (expected "
                  "GroupEnd first; groups do not nest)");
    const pp_instr open[] = {up_send, gs, up_recv};
    expect_groups(open, 3, PP_PLAN_EOPERAND,
                  "the group opened at instruction 1 is not closed (expected GroupEnd)");
    const pp_instr stray[] = {up_send, ge};
    expect_groups(stray, 2, PP_PLAN_EOPERAND,
                  "instruction 1 (GroupEnd): no group is open (expected a GroupStart before it)");
    const pp_instr empty[] = {gs, ge};
    expect_groups(empty, 2, PP_PLAN_EOPERAND,
                  "instruction 1 (GroupEnd): the group is empty (expected at least one transfer)");
    const pp_instr operand[] = {mk(PP_OP_GroupStart, 1, -1, -1, -1, -1, -1, -1, -1), up_send, ge};
    expect_groups(operand, 3, PP_PLAN_EOPERAND, "GroupStart takes no stage");
}
END_TEST

START_TEST(test_validate_groups)
{
    pp_plan p;
    build_plan(&p);
    p.groups[1].member[1] = 1;
    expect_valid(&p, PP_PLAN_EHEADER, "group g1: rank 1 follows rank 1");
    p.groups[1].member[1] = 4;
    expect_valid(&p, PP_PLAN_EHEADER, "group g1: member 1 is rank 4, out of range [0, 4)");
    p.groups[1].member[1] = 3;
    p.groups[0].n = 0;
    expect_valid(&p, PP_PLAN_EHEADER, "group g0 is empty");
    p.groups[0].n = 4;
    expect_valid(&p, PP_PLAN_OK, "ok");
    pp_plan_free(&p);
}
END_TEST

START_TEST(test_validate_optional_slots)
{
    pp_plan p;
    build_plan(&p);
    p.code[1].slot[2] = -1; /* Forward without out, with targets: the last stage */
    p.code[1].slot[3] = 4;
    expect_valid(&p, PP_PLAN_OK, "ok");
    p.code[4].slot[1] = -1; /* Backward from the loss, no input gradient */
    p.code[4].slot[2] = -1;
    expect_valid(&p, PP_PLAN_OK, "ok");
    p.code[4].slot[0] = -1;
    expect_valid(&p, PP_PLAN_EOPERAND,
                 "instruction 4 (Backward): required slot 'stash' is missing");
    p.code[4].slot[0] = 1;
    p.code[5].slot[1] = 0;
    expect_valid(&p, PP_PLAN_EOPERAND, "slot operand 1 is 0 but SendGrad takes 1 slot");
    pp_plan_free(&p);
}
END_TEST

/* ---------------------------------------------------------------- listing */

static char *listing(const pp_plan *p)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    ck_assert_ptr_nonnull(f);
    pp_plan_disasm(p, f);
    fclose(f);
    return text;
}

static void assert_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *s = text; (s = strstr(s, line)) != NULL; s++)
        if ((s == text || s[-1] == '\n') && s[n] == '\n')
            return;
    ck_abort_msg("listing lacks line\n%s\nin\n%s", line, text);
}

START_TEST(test_disasm)
{
    pp_plan p;
    build_plan(&p);
    char *t = listing(&p);
    assert_line(t, "; pp plan, plan id 0123456789abcdef");
    assert_line(t, "; rank 1 of 4, S=4 stages, B=2 microbatches");
    assert_line(t, "; model: mlp, context 8, embed 16 (width 128), ffn 256, batch 16; "
                   "optimizer adamw; precision bf16");
    assert_line(t, "; blocks per stage: s0-s3 1");
    assert_line(t, "; stages: 1 (compute+owner), 3 (owner)");
    assert_line(t, "; groups: g0 = {0,1,2,3}, g1 = {1,3}");
    assert_line(t, "; slots:  s0 4096 B, s1 8192 B, s2 4096 B, s3 4096 B, s4 512 B");
    assert_line(t, "; workspace: 98304 B (scratch of every F and B here, one at a time)");
    assert_line(
        t,
        "addr  opcode          stage    mb  peer  grp  slots                             comment");
    assert_line(t,
                "----  --------------  -----  ----  ----  ---  --------------------------------  "
                "-------------------------------");
    assert_line(t,
                "   0  RecvActivation      0     0     0    .  dst=s0                            "
                "F(0,0) output from rank 0 into s0");
    assert_line(t,
                "   1  Forward             1     0     .    .  in=s0 stash=s1 out=s2             "
                "F(1,0): s0 -> s2 (stash s1)");
    assert_line(t, "   2  SendActivation      1     0     2    .  src=s2                           "
                   " F(1,0) output "
                   "s2 to rank 2");
    assert_line(t,
                "   3  RecvGrad            2     0     2    .  dst=s3                            "
                "B(2,0) input grad from rank 2 into s3");
    assert_line(t,
                "   4  Backward            1     0     .    .  stash=s1 dout=s3 din=s0           "
                "B(1,0): grad s3 -> s0 (stash s1)");
    assert_line(t, "   5  SendGrad            1     0     0    .  src=s0                           "
                   " B(1,0) input "
                   "grad s0 to rank 0");
    assert_line(t, "   6  LoadMicroBatch      .     1     .    .  tokens=s4                        "
                   " microbatch 1 "
                   "tokens into s4");
    assert_line(t,
                "   7  ReduceGrads         1     .     .    0                                    "
                "all-reduce stage 1 grads over g0 {0,1,2,3}");
    assert_line(t, "   8  OptimizerStep       1     .     .    .                                   "
                   " update stage 1 weights (adamw)");
    assert_line(t, "; end of plan (9 instructions)");
    free(t);

    /* the last stage's forward computes the loss; absent optional slots vanish */
    p.code[1] = mk(PP_OP_Forward, 3, 1, -1, -1, 0, 1, -1, 4);
    p.code[4] = mk(PP_OP_Backward, 3, 1, -1, -1, 1, -1, 2, -1);
    p.ngroups = 0;
    p.nslots = 0;
    t = listing(&p);
    assert_line(t,
                "   1  Forward             3     1     .    .  in=s0 stash=s1 tgt=s4             "
                "F(3,1): loss of s0 vs targets s4 (stash s1)");
    assert_line(t,
                "   4  Backward            3     1     .    .  stash=s1 din=s2                   "
                "B(3,1): grad of loss -> s2 (stash s1)");
    assert_line(t, "; groups: none");
    assert_line(t, "; slots:  none");
    free(t);
    p.ngroups = 2;
    p.nslots = 5;
    pp_plan_free(&p);
}
END_TEST

/* The listing of the same plan is the same bytes every time. */
START_TEST(test_disasm_stable)
{
    pp_plan p;
    build_plan(&p);
    char *a = listing(&p), *b = listing(&p);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    pp_plan_free(&p);
}
END_TEST

/* A format version bump alone changes neither the listing nor the plan id:
 * the goldens and the checkpoints of a schedule survive it. */
START_TEST(test_disasm_and_id_ignore_version)
{
    pp_plan p;
    build_plan(&p);
    char *a = listing(&p);
    uint64_t id = pp_plans_id(&p, 1);
    p.version = PP_PLAN_VERSION + 1;
    char *b = listing(&p);
    ck_assert_str_eq(a, b);
    ck_assert_uint_eq(pp_plans_id(&p, 1), id);
    free(a);
    free(b);
    p.version = PP_PLAN_VERSION;
    pp_plan_free(&p);
}
END_TEST

/* ------------------------------------------------------------------- fuzz */

static uint64_t lcg_state;

static uint32_t lcg(void)
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg_state >> 33);
}

/* One random damage: a byte change, a cut, an appended byte, or a little
 * endian count/operand overwritten with a random or boundary value. */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    static const uint32_t edge[] = {0,           1,           2,           3,          4,
                                    0x7fffffffu, 0x80000000u, 0xffffffffu, 0xfffffffeu};
    switch (lcg() % 4) {
    case 0:
        b[lcg() % len] ^= (uint8_t)(1 + lcg() % 255);
        return len;
    case 1:
        return len > 1 ? lcg() % len : len;
    case 2:
        if (len < cap)
            b[len++] = (uint8_t)lcg();
        return len;
    default:
        if (len >= 4) {
            uint32_t v = lcg() % 2 ? edge[lcg() % (sizeof edge / sizeof edge[0])] : lcg();
            put_le32(b + lcg() % (len - 3), v);
        }
        return len;
    }
}

START_TEST(test_fuzz_mutations)
{
    uint8_t *buf;
    size_t len;
    encode_sample(&buf, &len);
    size_t cap = len + 16;
    int seen[PP_PLAN_ENOMEM + 1] = {0};
    lcg_state = 20240611;
    for (int iter = 0; iter < 2000; iter++) {
        uint8_t *m = malloc(cap);
        memcpy(m, buf, len);
        size_t n = len;
        int rounds = 1 + (int)(lcg() % 3);
        for (int r = 0; r < rounds && n > 0; r++)
            n = mutate(m, n, cap);
        /* half the time, repair the CRC so the later checks get exercised */
        if (lcg() % 2 && n >= 8)
            fix_crc(m, n);
        /* copy into an exact-size block so ASan catches any overread */
        uint8_t *exact = malloc(n ? n : 1);
        memcpy(exact, m, n);
        pp_plan p;
        char err[512];
        pp_plan_status st = pp_plan_decode(exact, n, &p, err, sizeof err);
        ck_assert_int_ge(st, PP_PLAN_OK);
        ck_assert_int_le(st, PP_PLAN_ENOMEM);
        ck_assert(strlen(err) > 0);
        seen[st]++;
        if (st == PP_PLAN_OK) {
            FILE *null = fopen("/dev/null", "w");
            pp_plan_disasm(&p, null);
            fclose(null);
        } else {
            ck_assert(plan_is_empty(&p));
        }
        pp_plan_free(&p);
        free(exact);
        free(m);
    }
    /* the loop must reach the deep checks, not only the CRC */
    ck_assert_int_gt(seen[PP_PLAN_ECRC], 0);
    ck_assert_int_gt(seen[PP_PLAN_ETRUNC], 0);
    ck_assert_int_gt(seen[PP_PLAN_EOPERAND], 0);
    free(buf);
}
END_TEST

/* The listing must not crash on a plan that fails validation. */
START_TEST(test_disasm_invalid_plan)
{
    pp_plan p;
    build_plan(&p);
    p.code[7].group = 9;
    p.code[3].op = 200;
    char *t = listing(&p);
    ck_assert_ptr_nonnull(strstr(t, "over g9 {?}"));
    ck_assert_ptr_nonnull(strstr(t, "unknown opcode 200"));
    free(t);
    pp_plan_free(&p);
}
END_TEST

Suite *plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *meta = tcase_create("metadata");
    tcase_add_test(meta, test_op_metadata);
    tcase_add_test(meta, test_opcode_numbers_are_pinned);
    tcase_add_test(meta, test_opcode_table_is_complete);
    tcase_add_test(meta, test_slots_by_role);
    tcase_add_test(meta, test_opcode_markdown);
    tcase_add_test(meta, test_comment_template_faults);
    tcase_add_test(meta, test_checksums);
    suite_add_tcase(s, meta);

    TCase *io = tcase_create("encode");
    tcase_add_test(io, test_round_trip);
    tcase_add_test(io, test_plan_id_is_pinned);
    tcase_add_test(io, test_model_gpt_header);
    tcase_add_test(io, test_round_trip_empty_tables);
    tcase_add_test(io, test_file_round_trip);
    suite_add_tcase(s, io);

    TCase *bad = tcase_create("damage");
    tcase_add_test(bad, test_bad_magic);
    tcase_add_test(bad, test_unknown_version);
    tcase_add_test(bad, test_truncation_every_prefix);
    tcase_add_test(bad, test_crc_mismatch);
    tcase_add_test(bad, test_trailing_bytes);
    tcase_add_test(bad, test_absurd_counts);
    tcase_add_test(bad, test_operand_out_of_range);
    tcase_add_test(bad, test_peer_is_self);
    tcase_add_test(bad, test_unknown_opcode);
    tcase_add_test(bad, test_missing_required_slot);
    tcase_add_test(bad, test_unused_operands_must_be_absent);
    tcase_add_test(bad, test_fuzz_mutations);
    suite_add_tcase(s, bad);

    TCase *val = tcase_create("validate");
    tcase_add_test(val, test_validate_header);
    tcase_add_test(val, test_validate_groups);
    tcase_add_test(val, test_validate_transfer_groups);
    tcase_add_test(val, test_model_size_bounds);
    tcase_add_test(val, test_validate_optional_slots);
    suite_add_tcase(s, val);

    TCase *dis = tcase_create("disasm");
    tcase_add_test(dis, test_disasm);
    tcase_add_test(dis, test_disasm_stable);
    tcase_add_test(dis, test_disasm_and_id_ignore_version);
    tcase_add_test(dis, test_disasm_invalid_plan);
    suite_add_tcase(s, dis);
    return s;
}
