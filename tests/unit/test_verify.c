/* test_verify.c - the verify suite: ppvm's verifier of what a plan means
 * (isa/verify.c). Every library schedule's plans pass it; the issue's
 * formerly-bad edits (each with its CRC fixed, and again with the plan id
 * forged over all ranks so the content hash cannot be what refuses them)
 * are refused with a message naming what was expected; ppc leaves no stale
 * rank files beside a failed compile's report. The verify_e2e suite runs
 * such edited plans through mpirun -np 4 ppvm: every rank exits 1 with the
 * message, none hangs. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/verify.h"
#include "suites.h"
#include "testutil.h"

/* A compile of schedules/<name> with -D defs, every rank's plan passed
 * through the file format (encode, decode) as ppvm reads it. */
typedef struct {
    pp_plan *p;
    int W;
} planset;

/* name: a library schedule, or an absolute path; keep, prefetch: ppc's
 * --keep-weights and --prefetch (prefetch < 0: the default). */
static planset compile_set_with(const char *name, const char *defs, int optimizer, int precision,
                                int keep, int prefetch)
{
    char path[1024], text[256];
    if (name[0] == '/')
        snprintf(path, sizeof path, "%s", name);
    else
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
    o.keep_weights = keep;
    if (prefetch >= 0)
        o.prefetch = prefetch;
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

static planset compile_set(const char *name, const char *defs, int optimizer, int precision)
{
    return compile_set_with(name, defs, optimizer, precision, 0, -1);
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
    {"gpipe.pp", "S=4 B=4", -1, -1},
    {"1f1b.pp", "S=4 B=8", -1, -1},
    {"1f1b-greedy.pp", "S=4 B=8", -1, -1},
    {"zb-h1.pp", "S=4 B=8", -1, -1},
    {"ddp.pp", "S=4 B=4", PP_OPT_ADAMW, -1},
    {"fsdp.pp", "S=4 B=4", PP_OPT_ADAMW, PP_PREC_BF16},
    {"lpp.pp", "", -1, -1},
    {"fslpp.pp", "", -1, -1},
    {"interleaved-1f1b.pp", "", -1, -1},
    {"breadth-first.pp", "", -1, -1},
    {"depth-first.pp", "", -1, -1},
    {"1f1b-gpt.pp", "", -1, -1},
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

/* ppc's other paths pass too, the plan id ppc wrote included (the
 * content hash recomputed over the decoded plans): kept weights, prefetch
 * windows, per-stage blocks with a stage of none, a GPT in bf16. */
START_TEST(compile_variants_verify)
{
    char *blocks =
        with_model("zb-h1.pp", "model { context = 8; embed = 16; ffn = 64; batch = 8\n"
                               "        blocks = s == 0 || s == S - 1 ? 1 : s == 2 ? 0 : 3 }");
    const struct {
        const char *name, *defs;
        int optimizer, precision, keep, prefetch;
    } v[] = {
        {"fsdp.pp", "S=8 B=4", -1, -1, 1, 3},
        {"fslpp.pp", "S=4 B=8 G=2 R=2", PP_OPT_ADAMW, PP_PREC_BF16, 1, -1},
        {"1f1b.pp", "S=4 B=8", -1, -1, 0, 0},
        {"1f1b-gpt.pp", "", PP_OPT_ADAMW, PP_PREC_BF16, 0, 2},
        {blocks, "S=4 B=8", -1, -1, 0, -1},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        planset s = compile_set_with(v[i].name, v[i].defs, v[i].optimizer, v[i].precision,
                                     v[i].keep, v[i].prefetch);
        char err[1024];
        ck_assert_msg(verify_set(&s, err, sizeof err) == 0, "%s %s: %s", v[i].name, v[i].defs, err);
        free_set(&s);
    }
    remove_schedule(blocks);
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

/* The issue's examples, each once a crash, a hang or a silent wrong run. */
START_TEST(forward_targets_from_wrong_slot)
{
    planset s = compile_set("1f1b.pp", "S=4 B=8", -1, -1);
    pp_instr *f = find(&s, 3, PP_OP_Forward, 3);
    pp_set_slot(f, PP_ROLE_TGT, pp_slot(f, PP_ROLE_IN)); /* targets read from the activation */
    refused(&s, "tgt");
    free_set(&s);
}
END_TEST

/* The table's presence rules (isa/opcodes.h: LAST, NOTLAST, NOTFIRST),
 * one per kind: targets off the last stage, no output before it, no input
 * gradient written on the first. */
START_TEST(slots_against_the_stage_place)
{
    planset s = compile_set("1f1b.pp", "S=4 B=8", -1, -1);
    pp_instr *f = find(&s, 3, PP_OP_Forward, 3);
    pp_set_slot(f, PP_ROLE_OUT, pp_slot(f, PP_ROLE_TGT));
    refused(&s,
            "(Forward): stage 3 of 4 has an out slot (expected one on every stage but the last)");
    free_set(&s);
    s = compile_set("1f1b.pp", "S=4 B=8", -1, -1);
    pp_set_slot(find(&s, 1, PP_OP_Forward, 1), PP_ROLE_OUT, -1);
    refused(&s,
            "(Forward): stage 1 of 4 lacks an out slot (expected one on every stage but the last)");
    free_set(&s);
    s = compile_set("zb-h1.pp", "S=4 B=8", -1, -1);
    pp_instr *bi = find(&s, 0, PP_OP_BackwardInput, 0);
    pp_set_slot(bi, PP_ROLE_DIN, pp_slot(bi, PP_ROLE_DOUT));
    refused(
        &s,
        "(BackwardInput): stage 0 of 4 has a din slot (expected one on every stage but the first)");
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
    find(&s, 0, PP_OP_SendActivation, 0)->peer = 2; /* once a hang on every rank */
    refused(&s, "deadlock: 4 of 4 ranks cannot finish");
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

/* LPP's replicas {0,2} and {1,3}: rank 0 all-reducing over the other pair */
START_TEST(reduce_over_wrong_group)
{
    planset s = compile_set("lpp.pp", "", -1, -1);
    pp_instr *in = find(&s, 0, PP_OP_ReduceGrads, -1);
    in->group = 1 - in->group;
    refused(&s, "instruction");
    char err[1024];
    ck_assert_int_eq(pp_verify_world(s.p, s.W, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "(ReduceGrads): all-reduces stage") &&
                      strstr(err, "expected one all-reduce over a group of exactly its owners"),
                  "%s", err);
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

/* A split backward's BackwardInput turned into a fused Backward: over all
 * ranks B(s,b) then runs as a Backward beside a BackwardWeight, and the
 * all-rank check says each count (it once said "runs 0 times"). */
START_TEST(split_backward_counted)
{
    planset s = compile_set("zb-h1.pp", "S=4 B=8", -1, -1);
    pp_instr *bi = find(&s, 2, PP_OP_BackwardInput, 2);
    char err[1024], want[256];
    snprintf(want, sizeof want,
             "job B(2,%d) runs as 1 Backward, 0 BackwardInput and 1 BackwardWeight over all "
             "ranks (expected one Backward, or one BackwardInput and one BackwardWeight)",
             bi->mb);
    bi->op = PP_OP_Backward;
    ck_assert_int_eq(pp_verify_world(s.p, s.W, err, sizeof err), -1);
    ck_assert_msg(strstr(err, want), "expected '%s' in: %s", want, err);
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
    ck_assert_msg(strstr(err, "not to their plan id"), "%s", err);
    forge_id(&s);
    ck_assert_msg(verify_set(&s, err, sizeof err) == 0, "%s", err);
    free_set(&s);
}
END_TEST

/* ---- through ppc and ppvm ------------------------------------------------- */

/* After a compile that fails in lowering (here --mem-limit), the new report
 * stands alone: no rank file of the earlier compile is left for ppvm. */
START_TEST(ppc_failure_leaves_no_stale_plans)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/gpipe.pp -D S=4 -D B=8 -o %s/p -q && ls %s/p", PP_ROOT,
             PP_ROOT, dir, dir);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "rank3.bin"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/gpipe.pp -D S=4 -D B=8 -o %s/p --mem-limit 700000; ls %s/p",
             PP_ROOT, PP_ROOT, dir, dir);
    run_cmd(cmd, &out);
    ck_assert_msg(strstr(out, "over --mem-limit 700000") && strstr(out, "report.txt") &&
                      !strstr(out, "rank0.bin") && !strstr(out, "rank3.txt"),
                  "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* Rewrites DIR/rank<r>.bin after edit(plan), the CRC recomputed (and with
 * forge, every rank's plan id recomputed over all of them). */
static void edit_plan(const char *dir, int W, int r, void (*edit)(pp_plan *), int forge)
{
    planset s = {calloc((size_t)W, sizeof(pp_plan)), W};
    char path[1024], err[512];
    for (int k = 0; k < W; k++) {
        snprintf(path, sizeof path, "%s/rank%d.bin", dir, k);
        ck_assert_msg(pp_plan_read(path, &s.p[k], err, sizeof err) == PP_PLAN_OK, "%s", err);
    }
    edit(&s.p[r]);
    if (forge)
        forge_id(&s);
    for (int k = 0; k < W; k++) {
        snprintf(path, sizeof path, "%s/rank%d.bin", dir, k);
        ck_assert_msg(pp_plan_write(&s.p[k], path, err, sizeof err) == PP_PLAN_OK, "%s", err);
    }
    free_set(&s);
}

/* mpirun -np NP ppvm on DIR: every rank that reports exits 1, none hangs
 * or exits otherwise, and the output says `message`. */
static void np_ranks_refuse(int np, const char *dir, const char *message)
{
    char args[1024], *out, *why;
    snprintf(args, sizeof args, "%s --backend cpu --steps 2", dir);
    int rc = mpi_run_within(np, args, 60, &out, &why);
    ck_assert_msg(rc != 0 && rc != 124, "expected a refusal: %s", why ? why : out);
    int st[np];
    rank_statuses(out, np, st);
    /* mpirun ends the others once one rank exits 1, so some never report */
    int ones = 0;
    for (int r = 0; r < np; r++) {
        ck_assert_msg(st[r] == 1 || st[r] < 0, "rank %d: status %d, expected 1: %s", r, st[r], why);
        ones += st[r] == 1;
    }
    ck_assert_msg(ones > 0, "no rank exited 1: %s", why);
    ck_assert_msg(strstr(out, message), "expected '%s' in:\n%s", message, out);
    free(out);
    free(why);
}

static void all_ranks_refuse(const char *dir, const char *message)
{
    np_ranks_refuse(4, dir, message);
}

static void set_b5(pp_plan *p) { p->B = 5; }
static void targets_from_in(pp_plan *p)
{
    for (uint32_t i = 0; i < p->ninstr; i++)
        if (p->code[i].op == PP_OP_Forward)
            pp_set_slot(&p->code[i], PP_ROLE_TGT, pp_slot(&p->code[i], PP_ROLE_IN));
}
static void bigger_slot(pp_plan *p) { p->slot_bytes[0] += 64; }

/* Once 109 of 355 such runs hung: now every rank says no before training. */
START_TEST(ppvm_changed_b_on_one_rank)
{
    char *dir = compile_plan("1f1b.pp", "-D S=4 -D B=4");
    char plan[1024];
    snprintf(plan, sizeof plan, "%s/plan", dir);
    edit_plan(plan, 4, 2, set_b5, 0);
    all_ranks_refuse(plan, "ppvm: rank 2's plan has B 5 but rank 0's has 4");
    remove_dir(dir);
}
END_TEST

/* Once a segfault with no message. */
START_TEST(ppvm_forward_targets_from_wrong_slot)
{
    char *dir = compile_plan("1f1b.pp", "-D S=4 -D B=4");
    char plan[1024];
    snprintf(plan, sizeof plan, "%s/plan", dir);
    edit_plan(plan, 4, 3, targets_from_in, 1);
    all_ranks_refuse(plan, "reads slot");
    all_ranks_refuse(plan, "as its tgt, which should hold microbatch 0 but holds F(2,0)'s output");
    remove_dir(dir);
}
END_TEST

/* An edit every meaning check accepts still changes the content hash. */
START_TEST(ppvm_edited_file_changes_the_hash)
{
    char *dir = compile_plan("1f1b.pp", "-D S=4 -D B=4");
    char plan[1024];
    snprintf(plan, sizeof plan, "%s/plan", dir);
    edit_plan(plan, 4, 1, bigger_slot, 0);
    all_ranks_refuse(plan, "ppvm: the plans' contents hash to");
    remove_dir(dir);
}
END_TEST

static void rank0_to_adamw(pp_plan *p) { p->model.optimizer = PP_OPT_ADAMW; }

/* ppvm --reference trains the model rank 0's header names: an edited
 * header (the CRC fixed) is refused, as the file and as its directory,
 * rather than silently training another model as the oracle. */
START_TEST(reference_refuses_an_edited_plan)
{
    char *dir = compile_plan("gpipe.pp", "-D S=4 -D B=4"), plan[1024], cmd[2048];
    snprintf(plan, sizeof plan, "%s/plan", dir);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s --steps 1 --quiet", PP_ROOT, plan);
    free(run_expect(cmd, 0));
    edit_plan(plan, 4, 0, rank0_to_adamw, 0);
    for (int file = 0; file < 2; file++) {
        snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s%s --steps 1 --quiet", PP_ROOT, plan,
                 file ? "/rank0.bin" : "");
        char *out = run_expect(cmd, 1);
        ck_assert_msg(strstr(out, "ppvm: --reference: the 4 plans in ") &&
                          strstr(out, "do not hash to their plan id"),
                      "%s: %s", cmd, out);
        free(out);
    }
    remove_dir(dir);
}
END_TEST

static void first_send_to_rank2(pp_plan *p)
{
    for (uint32_t i = 0; i < p->ninstr; i++)
        if (p->code[i].op == PP_OP_SendActivation) {
            p->code[i].peer = 2;
            return;
        }
    ck_abort_msg("rank %u sends no activation", p->rank);
}

/* A deadlock's report, a line per rank and then the cycle, comes out whole:
 * ppvm once cut the verdict at 1 KB, where the checker keeps the cycle and
 * drops the last ranks' lines, from 6 ranks on (6 ranks that never train:
 * only their start-up runs). */
START_TEST(ppvm_deadlock_report_whole)
{
    char *dir = compile_plan("gpipe.pp", "-D S=6 -D B=2");
    char plan[1024], path[1100], err[1 << 14];
    snprintf(plan, sizeof plan, "%s/plan", dir);
    edit_plan(plan, 6, 0, first_send_to_rank2, 0);
    planset s = {calloc(6, sizeof(pp_plan)), 6};
    for (int k = 0; k < 6; k++) {
        snprintf(path, sizeof path, "%s/rank%d.bin", plan, k);
        ck_assert_msg(pp_plan_read(path, &s.p[k], err, sizeof err) == PP_PLAN_OK, "%s", err);
    }
    ck_assert_int_eq(pp_verify_world(s.p, s.W, err, sizeof err), -1);
    free_set(&s);
    char *cycle = strstr(err, "\n  cycle: "), *last = strstr(err, "\n  rank 5 @");
    ck_assert_msg(strlen(err) > 1024 && cycle && last && last < cycle,
                  "expected a report over 1 KB with rank 5's line, then the cycle: %s", err);
    np_ranks_refuse(6, plan, cycle + 1);
    *cycle = '\0'; /* rank 5's line alone */
    np_ranks_refuse(6, plan, last + 1);
    remove_dir(dir);
}
END_TEST

Suite *verify_e2e_suite(void)
{
    Suite *s = suite_create("verify_e2e");
    TCase *tc = tcase_create("ppvm");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, ppvm_changed_b_on_one_rank);
    tcase_add_test(tc, ppvm_forward_targets_from_wrong_slot);
    tcase_add_test(tc, ppvm_edited_file_changes_the_hash);
    tcase_add_test(tc, ppvm_deadlock_report_whole);
    tcase_add_test(tc, reference_refuses_an_edited_plan);
    suite_add_tcase(s, tc);
    return s;
}

Suite *verify_suite(void)
{
    Suite *s = suite_create("verify");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, library_plans_verify);
    tcase_add_test(tc, forward_targets_from_wrong_slot);
    tcase_add_test(tc, slots_against_the_stage_place);
    tcase_add_test(tc, changed_b_on_one_rank);
    tcase_add_test(tc, stage_switched_to_adamw);
    tcase_add_test(tc, dropped_block);
    tcase_add_test(tc, duplicated_job);
    tcase_add_test(tc, send_to_wrong_peer);
    tcase_add_test(tc, owner_role_dropped);
    tcase_add_test(tc, optimizer_before_gradients);
    tcase_add_test(tc, reduce_over_wrong_group);
    tcase_add_test(tc, compile_variants_verify);
    tcase_add_test(tc, split_backward_counted);
    tcase_add_test(tc, plan_id_is_a_content_hash);
    tcase_add_test(tc, ppc_failure_leaves_no_stale_plans);
    suite_add_tcase(s, tc);
    return s;
}
