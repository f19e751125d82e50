/* test_determ.c - ppvm --deterministic (vm/determ.h) under mpirun: every
 * library schedule, mlp and gpt, SGD and AdamW, fp32 and bf16, trains 3
 * steps to exactly the weights of `ppvm --reference --deterministic`
 * (--compare --atol 0 --rtol 0: every bit); without the flag the schedules
 * that sum across ranks do not; the memory it costs is what the start-up
 * lines say; and its refusals (the nccl transport, --compare, a plan whose
 * gradients cannot all be summed in order) end with a message. Every run
 * pins --backend cpu or lets --deterministic pick it (the cuda backend's
 * runs are in test_gpu_e2e.c, on a GPU or the stand-ins). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/plan.h"
#include "../../kernels/model.h"
#include "suites.h"
#include "testutil.h"

/* 3 steps of `schedule` on np ranks with `flags` and of the reference with
 * `ref_flags`; NULL when --compare at atol 0 rtol 0 passes, its output
 * (caller frees) when it says the weights differ; any other failure fails
 * the test. */
static char *run_and_compare(const char *schedule, const char *defs, int np, const char *flags,
                             const char *ref_flags)
{
    char *dir = compile_plan(schedule, defs), *out, *why, cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s/plan --steps 3 --save %s/w --quiet", flags, dir, dir);
    if (mpi_run(np, cmd, &out, &why))
        ck_abort_msg("%s %s: training under mpirun failed: %s", schedule, defs, why);
    free(out);
    proc_result r;
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s %s/plan --steps 3 --save %s/ref --quiet",
             PP_ROOT, ref_flags, dir, dir);
    if (run_proc(cmd, CMD_TIMEOUT, &r))
        ck_abort_msg("%s %s: the reference run failed: %s\n  it %s", schedule, defs, cmd,
                     proc_story(&r, 20));
    proc_free(&r);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    run_proc(cmd, CMD_TIMEOUT, &r);
    int differ = r.status == 1 && strstr(r.out, " beyond atol ");
    if (!differ && (r.status != 0 || !strstr(r.out, "within tolerance")))
        ck_abort_msg("%s %s: could not compare the weights: %s\n  it %s", schedule, defs, cmd,
                     proc_story(&r, 20));
    char *said = differ ? strdup(r.out) : NULL;
    proc_free(&r);
    remove_dir(dir);
    return said;
}

/* The run, deterministic, must end with the reference's bits. */
static void bit_identical(const char *schedule, const char *defs, int np)
{
    char *said = run_and_compare(schedule, defs, np, "--deterministic", "--deterministic");
    ck_assert_msg(said == NULL,
                  "%s %s: --deterministic weights differ from --reference --deterministic:\n%s",
                  schedule, defs, said);
}

static void gpt_bit_identical(const char *schedule, const char *defs)
{
    char *path = with_model(schedule, test_gpt_model);
    bit_identical(path, defs, 4);
    remove_schedule(path);
}

/* Pipelines matched the reference's bits before (each stage's microbatches
 * in order on one rank); under --deterministic they still must, through
 * their one reused per-microbatch buffer, the split backward's W included. */
START_TEST(determ_pipelines)
{
    bit_identical("gpipe.pp", "-D S=4 -D B=4", 4);
    bit_identical("1f1b.pp", "-D S=4 -D B=8", 4);
    bit_identical("1f1b-greedy.pp", "-D S=4 -D B=8", 4);
    bit_identical("zb-h1.pp", "-D S=4 -D B=8", 4);
    bit_identical("interleaved-1f1b.pp", "-D W=4 -D V=2 -D B=8", 4);
    bit_identical("breadth-first.pp", "-D W=4 -D S=8 -D B=4", 4);
    bit_identical("depth-first.pp", "-D W=4 -D S=8 -D B=4", 4);
}
END_TEST

/* Replicas (ReduceGrads: DDP, LPP), owners that receive gradients
 * (FSDP: SendWeightGrad/RecvWeightGrad) and both (FSLPP), with one and two
 * microbatches per rank, kept weights and a prefetch window. */
START_TEST(determ_data_parallel)
{
    bit_identical("ddp.pp", "-D S=4 -D B=4", 4);
    bit_identical("ddp.pp", "-D S=8 -D B=4", 4);
    bit_identical("fsdp.pp", "-D S=4 -D B=4", 4);
    bit_identical("fsdp.pp", "-D S=8 -D B=4 --keep-weights --prefetch 3", 4);
    bit_identical("lpp.pp", "-D S=4 -D B=4 -D G=2 -D R=2", 4);
    bit_identical("fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2", 4);
    bit_identical("fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2 --keep-weights", 4);
}
END_TEST

/* Issue 17's schedules at small shapes: split backwards on two chunks per
 * worker (ZB-V, interleaved ZB), falling-microbatch backwards (looped BFS),
 * a short microbatch count (interleaved 1F1B, B=3 on W=2), replicas across
 * pipelines (PP x DP) and shards fetched inside pipeline groups (pp-fsdp). */
START_TEST(determ_state_of_the_art)
{
    bit_identical("zb-v.pp", "-D W=2 -D B=4", 2);
    bit_identical("zb-h2.pp", "-D S=3 -D B=5", 3);
    bit_identical("dualpipev.pp", "-D W=2 -D B=5", 2);
    bit_identical("interleaved-zb.pp", "-D W=2 -D V=2 -D B=4", 2);
    bit_identical("looped-bfs.pp", "-D W=2 -D V=2 -D B=3", 2);
    bit_identical("interleaved-1f1b.pp", "-D W=2 -D V=2 -D B=3", 2);
    bit_identical("pp-dp.pp", "-D S=2 -D D=2 -D B=4", 4);
    bit_identical("pp-fsdp.pp", "-D P=2 -D D=2 -D B=4", 4);
}
END_TEST

START_TEST(determ_gpt)
{
    gpt_bit_identical("ddp.pp", "-D S=4 -D B=4");
    gpt_bit_identical("fsdp.pp", "-D S=4 -D B=4");
    gpt_bit_identical("lpp.pp", "-D S=4 -D B=4 -D G=2 -D R=2");
    gpt_bit_identical("fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2");
    gpt_bit_identical("interleaved-1f1b.pp", "-D W=4 -D V=2 -D B=8");
    bit_identical("1f1b-gpt.pp", "-D S=4 -D B=4", 4); /* the GPT demo's own */
    char *zb = with_model("zb-h1.pp", "model gpt { context = 16; embed = 16; heads = 2; ffn = 32\n"
                                      "            layers = s == 1 ? 0 : 2; batch = 2 }");
    bit_identical(zb, "-D S=4 -D B=4", 4); /* a split backward, a stage of no weights' layers */
    remove_schedule(zb);
}
END_TEST

/* AdamW reads the summed gradient once per step and bf16 computes with a
 * copy of the fp32 master: both see the same bits when the sum is the same. */
START_TEST(determ_adamw_bf16)
{
    bit_identical("lpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2 --optimizer adamw", 4);
    bit_identical("ddp.pp", "-D S=4 -D B=4 --precision bf16 --optimizer adamw", 4);
    bit_identical("fsdp.pp", "-D S=4 --precision bf16", 4);
    bit_identical("fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2 --precision bf16 --optimizer adamw", 4);
    bit_identical("lpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2 --precision bf16", 4);
    bit_identical("zb-h1.pp", "-D S=4 -D B=8 --precision bf16", 4);
    char *gpt = with_model("1f1b.pp", test_gpt_model);
    bit_identical(gpt, "-D S=4 -D B=4 --precision bf16 --optimizer adamw", 4);
    remove_schedule(gpt);
}
END_TEST

/* Tied embeddings (tie = 1): the tied sum adds the two stages' ordered
 * sums, stage 0's first, so every schedule ends with the deterministic
 * reference's bits: ZB-V and DualPipeV (one worker stores the tensor
 * once), 1F1B and FSDP (owners swap copies), DDP (replicas storing it
 * once), PP x DP (replicas swapping), AdamW and bf16; and without the flag
 * DDP's partial sums differ, so the agreement is the mode's. */
START_TEST(determ_tied)
{
    static const char *const tied =
        "model gpt { vocab = 256; context = 16; embed = 32; heads = 4; ffn = 64; batch = 4\n"
        "            layers = s == 0 || s == S - 1 ? 1 : 2; tie = 1 }";
    static const struct {
        const char *schedule, *defs;
        int np;
    } runs[] = {
        {"zb-v.pp", "-D W=2 -D B=4", 2},
        {"dualpipev.pp", "-D W=2 -D B=5 --optimizer adamw --precision bf16", 2},
        {"1f1b.pp", "-D S=4 -D B=4", 4},
        {"fsdp.pp", "-D S=4 -D B=4", 4},
        {"ddp.pp", "-D S=4 -D B=4 --optimizer adamw", 4},
        {"pp-dp.pp", "-D S=2 -D D=2 -D B=4", 4},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *path = with_model(runs[i].schedule, tied);
        bit_identical(path, runs[i].defs, runs[i].np);
        remove_schedule(path);
    }
    char *ddp = with_model("ddp.pp", tied);
    char *said = run_and_compare(ddp, "-D S=4 -D B=4", 4, "--backend cpu", "--deterministic");
    ck_assert_msg(said != NULL, "tied DDP without --deterministic matched the deterministic "
                                "reference bit for bit: the test shows nothing");
    free(said);
    remove_schedule(ddp);
}
END_TEST

/* The flag is what makes the bits agree: without it DDP and FSDP sum
 * partial sums and end off the deterministic reference by rounding (and
 * within --compare's default tolerance, as test_e2e.c holds them). A test
 * that cannot fail is no test: this one fails if the mode changed nothing
 * or if the default run became deterministic. */
START_TEST(determ_is_what_differs)
{
    static const char *cases[] = {"ddp.pp", "fsdp.pp"};
    for (int i = 0; i < 2; i++) {
        char *said =
            run_and_compare(cases[i], "-D S=4 -D B=4", 4, "--backend cpu", "--deterministic");
        ck_assert_msg(said != NULL,
                      "%s without --deterministic matched --reference --deterministic bit for bit",
                      cases[i]);
        free(said);
    }
}
END_TEST

/* The numbers after `key` on a line of `out`, n of them. */
static void numbers_after(const char *out, const char *key, unsigned long long *v, int n)
{
    const char *at = strstr(out, key);
    ck_assert_msg(at != NULL, "no '%s' in:\n%s", key, out);
    at += strlen(key);
    for (int i = 0; i < n; i++) {
        char *end;
        v[i] = strtoull(at, &end, 10);
        ck_assert_msg(end != at, "'%s' is followed by fewer than %d numbers:\n%s", key, n, out);
        at = end;
    }
}

/* Per rank: the memory line is the report's plan memory plus the
 * per-microbatch gradients the note before it states, and those are what
 * vm/determ.h says: one stage's gradient for a pipeline's stage (rank r
 * holds stage r), and for DDP with one microbatch per rank, that
 * microbatch's gradient of every stage plus one broadcast buffer of the
 * largest stage. */
static void memory_is(const char *schedule, const char *defs, int ddp)
{
    char *dir = compile_plan(schedule, defs), cmd[2048], err[512];
    snprintf(cmd, sizeof cmd, "--deterministic %s/plan --steps 1", dir);
    char *out = mpi_ok(4, cmd);
    snprintf(cmd, sizeof cmd, "cat %s/plan/report.json", dir);
    char *json = run_expect(cmd, 0);
    unsigned long long note[4], mem[4], rep[4];
    numbers_after(
        out, "per-microbatch weight gradients, bytes per rank (in the memory below):", note, 4);
    numbers_after(out, "memory allocated at start-up, bytes per rank:", mem, 4);
    numbers_after(json, "\"mem_bytes\": [", rep, 1);
    for (int r = 1; r < 4; r++) { /* "a, b, ...": past each comma */
        const char *at = strstr(json, "\"mem_bytes\": [");
        for (int k = 0; k < r; k++)
            at = strchr(at, ',') + 1;
        rep[r] = strtoull(at, NULL, 10);
    }
    snprintf(cmd, sizeof cmd, "%s/plan/rank0.bin", dir);
    pp_plan p;
    ck_assert_msg(pp_plan_read(cmd, &p, err, sizeof err) == PP_PLAN_OK, "%s", err);
    size_t all = 0, most = 0;
    for (int s = 0; s < (int)p.S; s++) {
        size_t n = pp_stage_param_count(&p.model, (int)p.S, s);
        all += n;
        most = n > most ? n : most;
    }
    for (int r = 0; r < 4; r++) {
        unsigned long long want =
            4ull * (ddp ? all + most : pp_stage_param_count(&p.model, (int)p.S, r));
        ck_assert_msg(note[r] == want, "%s %s rank %d: the note says %llu bytes, expected %llu",
                      schedule, defs, r, note[r], want);
        ck_assert_msg(mem[r] == rep[r] + note[r],
                      "%s %s rank %d: ppvm allocates %llu, the report %llu plus the note %llu",
                      schedule, defs, r, mem[r], rep[r], note[r]);
    }
    pp_plan_free(&p);
    free(out);
    free(json);
    remove_dir(dir);
}

START_TEST(determ_memory)
{
    memory_is("1f1b.pp", "-D S=4 -D B=8", 0);
    memory_is("ddp.pp", "-D S=4 -D B=4", 1);
}
END_TEST

/* cmd must exit with `status` by itself and print message. */
static void fails_with(const char *cmd, int status, const char *message)
{
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(r.status == status && !r.signal && !r.timed_out,
                  "expected %s to exit %d with '%s'; it %s", cmd, status, message,
                  proc_story(&r, 20));
    ck_assert_msg(strstr(r.out, message) != NULL, "expected '%s' in the output of %s:\n%s", message,
                  cmd, r.out);
    proc_free(&r);
}

/* A plan whose gradients cannot be the ordered sum: `schedule` with rank
 * 1's plan edited and rewritten (a fresh checksum). The start-up verifier
 * (isa/verify.c) refuses each of these edits before any step, with
 * `message`, so --deterministic's own checks of the same faults
 * (determ.c: a job twice, an update or an all-reduce too early, a gradient
 * from a second rank) are a second line that no verified plan reaches. */
static void determ_refuses(const char *schedule, const char *defs, void (*edit)(pp_plan *),
                           const char *message)
{
    char *dir = compile_plan(schedule, defs), path[1024], err[512], cmd[2048];
    snprintf(path, sizeof path, "%s/plan/rank1.bin", dir);
    pp_plan p;
    ck_assert_msg(pp_plan_read(path, &p, err, sizeof err) == PP_PLAN_OK, "%s", err);
    edit(&p);
    ck_assert_msg(pp_plan_write(&p, path, err, sizeof err) == PP_PLAN_OK, "%s", err);
    pp_plan_free(&p);
    snprintf(cmd, sizeof cmd, "--deterministic %s/plan --steps 1", dir);
    mpi_fails_with(4, cmd, message);
    remove_dir(dir);
}

static int find(const pp_plan *p, int op, int stage, int mb)
{
    for (uint32_t i = 0; i < p->ninstr; i++)
        if (p->code[i].op == op && (stage < 0 || (int)p->code[i].stage == stage) &&
            (mb < 0 || (int)p->code[i].mb == mb))
            return (int)i;
    ck_abort_msg("no instruction %d of stage %d, microbatch %d in the plan", op, stage, mb);
    return -1;
}

/* Instruction `from` moved to position `to` (< from), the ones between
 * moved down one. */
static void move_up(pp_plan *p, int from, int to)
{
    pp_instr x = p->code[from];
    memmove(&p->code[to + 1], &p->code[to], (size_t)(from - to) * sizeof x);
    p->code[to] = x;
}

/* GPipe's rank 1 (stage 1) runs B(1,2) twice and never B(1,3). */
static void twice_b2(pp_plan *p) { p->code[find(p, PP_OP_Backward, 1, 3)].mb = 2; }

/* GPipe's rank 1 updates stage 1 before B(1,3). */
static void early_update(pp_plan *p)
{
    move_up(p, find(p, PP_OP_OptimizerStep, 1, -1), find(p, PP_OP_Backward, 1, 3));
}

/* DDP's rank 1 all-reduces stage 0 before it has computed microbatch 1's
 * gradient (the replicas' collectives stay in one order). */
static void early_reduce(pp_plan *p) { move_up(p, find(p, PP_OP_ReduceGrads, 0, -1), 0); }

/* FSDP's rank 1 computes stage 0's gradient of microbatch 0, which stage
 * 0's owner, rank 0, computes too, and sends it to rank 0. */
static void second_b0(pp_plan *p) { p->code[find(p, PP_OP_Backward, 0, 1)].mb = 0; }

START_TEST(determ_refusals)
{
    char cmd[2048], *dir = compile_plan("gpipe.pp", "-D S=4 -D B=4");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --transport nccl --deterministic %s/plan", PP_ROOT, dir);
    fails_with(cmd, 2,
               "ppvm: --deterministic moves its per-microbatch gradients with MPI; it "
               "takes --transport mpi, not nccl");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --deterministic --backend cuda --transport nccl %s/plan",
             PP_ROOT, dir);
    fails_with(cmd, 2, "it takes --transport mpi, not nccl");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/a %s/b --deterministic", PP_ROOT, dir, dir);
    fails_with(cmd, 2,
               "ppvm: --deterministic changes how a run sums its gradients; it does not "
               "go with --compare");
    remove_dir(dir);
    determ_refuses("gpipe.pp", "-D S=4 -D B=4", twice_b2,
                   "rank1.bin: dataflow: rank 1: @34 Backward(s=1,b=2) reads slot s5 as its "
                   "stash, which should hold F(1,2)'s stash but holds F(1,3)'s stash");
    determ_refuses("gpipe.pp", "-D S=4 -D B=4", early_update,
                   "rank1.bin: instruction 35 (Backward): touches stage 1's own weights after "
                   "its OptimizerStep at 34 (expected every use of a stage before its optimizer "
                   "step)");
    determ_refuses("ddp.pp", "-D S=4 -D B=4", early_reduce,
                   "rank1.bin: instruction 9 (Backward): adds to stage 0's gradients after its "
                   "ReduceGrads at 0 (expected every gradient in before the all-reduce)");
    determ_refuses("fsdp.pp", "-D S=4 -D B=4", second_b0,
                   "rank1.bin: dataflow: rank 1: @31 Backward(s=0,b=0) reads slot s2 as its "
                   "stash, which should hold F(0,0)'s stash but holds F(0,1)'s stash");
}
END_TEST

#define DETERM_TESTS(X)                                                                            \
    X(determ_gpt, 4)                                                                               \
    X(determ_data_parallel, 4)                                                                     \
    X(determ_adamw_bf16, 4)                                                                        \
    X(determ_pipelines, 4)                                                                         \
    X(determ_state_of_the_art, 4)                                                                  \
    X(determ_is_what_differs, 4)                                                                   \
    X(determ_memory, 4)                                                                            \
    X(determ_refusals, 4)                                                                          \
    X(determ_tied, 4)

PP_JOB_SUITE(determ, DETERM_TESTS)
