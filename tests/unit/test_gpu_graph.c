/* test_gpu_graph.c - the gpu_graph suite: ppvm's whole steps as CUDA graphs
 * (--graph, vm/graph_cuda.c), on a GPU or on the stand-ins (make
 * standin-test; the stand-ins capture and replay streams as
 * tests/standin/graph.cpp says, and check every replayed operation for
 * stream-ordering hazards, as they check launched ones).
 *
 * A run whose steps are captured once and replayed (--graph auto, saying
 * "graph: on") trains to exactly the weights (--compare --atol 0 --rtol 0)
 * of the same run launched instruction by instruction (--graph off), on one
 * rank and as a 2-rank 1F1B pipeline over nccl, in fp32 and bf16, for the
 * mlp and the GPT, with SGD and AdamW under a learning-rate warmup (so a
 * replay that kept the captured step's tokens, learning rate or AdamW step
 * would differ), and 1F1B with re-run forwards and offload's host copies;
 * over --transport mpi (ranks sharing a GPU) the step replays piecewise,
 * one graph between two transfers, with the same bits (1F1B, mlp and GPT,
 * fp32 and bf16; FSDP's weight sends), and DDP's and FSDP's steps, whose
 * host-made ReduceGrads and weight-gradient receives forget the zeroed-
 * gradient marks each step, are captured once, not again every other
 * step. --skip-nonfinite replays over nccl (the device decides) and over
 * mpi (the host commits); PP_INJECT_NAN's step is launched between
 * replays, with the bits of a launched run. The runs that must launch say
 * why (tensor parallelism over mpi, --deterministic, --profile,
 * --no-compute, --graph off); --graph on refuses them, and the cpu
 * backend; bad --graph values are usage errors. On the stand-ins' own
 * count, replayed steps allocate nothing (1 step and 3 allocate alike). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "suites.h"
#include "testutil.h"

#define GRAPH_MPIRUN_TIMEOUT 300

static int gpus(void)
{
#ifdef PP_HAVE_CUDA
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
    return 0;
#endif
}

/* mpirun -np np ppvm args, which must succeed; its output. */
__attribute__((noinline)) static char *ok_run(int np, const char *args)
{
    char *out, *why;
    if (mpi_run_within(np, args, GRAPH_MPIRUN_TIMEOUT, &out, &why))
        ck_abort_msg("%s", why);
    return out;
}

/* The cases: ranks, model (NULL: the schedule's mlp), precision and
 * optimizer flags for ppc, training flags for ppvm, the schedule (NULL:
 * 1f1b.pp) and the transport (NULL: nccl, one GPU a rank; mpi: the ranks
 * share one GPU and the step is replayed piecewise, as graphs between the
 * transfers). */
static const struct {
    int np;
    const char *gpt, *ppc, *vm, *sched, *transport;
} cases[] = {
    {1, NULL, "-D S=1 -D B=4", "--warmup 2", NULL, NULL},
    {1, NULL, "-D S=1 -D B=4 --precision bf16 --optimizer adamw", "--warmup 2 --lr 1e-3", NULL,
     NULL},
    {1, "1", "-D S=1 -D B=2 --optimizer adamw", "--warmup 2 --lr 1e-3", NULL, NULL},
    {1, "1", "-D S=1 -D B=2 --precision bf16", "--warmup 2", NULL, NULL},
    {2, NULL, "-D S=2 -D B=4 --optimizer adamw", "--warmup 2 --lr 1e-3", NULL, NULL},
    {2, NULL, "-D S=2 -D B=4 --precision bf16", "--warmup 2", NULL, NULL},
    {2, "1", "-D S=2 -D B=4", "--warmup 2", NULL, NULL},
    {2, "1", "-D S=2 -D B=4 --precision bf16 --optimizer adamw", "--warmup 2 --lr 1e-3", NULL,
     NULL},
    /* re-run forwards and offload's copies to pinned host slots, captured too */
    {2, NULL, "-D S=2 -D B=4 -D K=1 --offload 's > 0'", "", "1f1b-recompute.pp", NULL},
    /* piecewise: 1F1B over --transport mpi, fp32 and bf16, mlp and GPT */
    {2, NULL, "-D S=2 -D B=4", "--warmup 2", NULL, "mpi"},
    {2, NULL, "-D S=2 -D B=4 --precision bf16 --optimizer adamw", "--warmup 2 --lr 1e-3", NULL,
     "mpi"},
    {2, "1", "-D S=2 -D B=4 --optimizer adamw", "--warmup 2 --lr 1e-3", NULL, "mpi"},
    {2, "1", "-D S=2 -D B=4 --precision bf16", "--warmup 2", NULL, "mpi"},
    /* FSDP's weight sends from a pinned copy, which a replayed update makes stale */
    {4, NULL, "-D S=2 -D B=4 --optimizer adamw", "--warmup 2 --lr 1e-3", "fsdp.pp", "mpi"},
};

/* The plan in DIR on np ranks over transport with flags, replayed (--graph
 * auto, saving into DIR/auto) and launched (off, DIR/off): each must
 * succeed; out[k] their outputs. */
static void run_both(int np, const char *transport, const char *flags, const char *dir,
                     char *out[2])
{
    static const char *const mode[2] = {"auto", "off"};
    for (int k = 0; k < 2; k++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd,
                 "--backend cuda --transport %s --graph %s %s --timeout 120 --save %s/%s %s/plan",
                 transport, mode[k], flags, dir, mode[k], dir);
        out[k] = ok_run(np, cmd);
    }
}

/* DIR/auto (the replayed run's --save) holds DIR/off's bits (the launched
 * run's), or the check fails naming the run (what) and the command; then
 * the runs' outputs and DIR go. */
static void same_bits(char *dir, const char *what, char *out[2])
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --compare %s/auto %s/off --atol 0 --rtol 0", PP_ROOT,
             dir, dir);
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(r.status == 0 && strstr(r.out, "within tolerance"),
                  "%s: the replayed run's weights are not the launched run's bits: %s\n  it %s",
                  what, cmd, proc_story(&r, 20));
    proc_free(&r);
    free(out[0]);
    free(out[1]);
    remove_dir(dir);
}

/* 1F1B: replayed steps end with the launched steps' weights, bit for bit. */
START_TEST(replay_matches_launch)
{
    int np = cases[_i].np, mpi = cases[_i].transport != NULL;
    if (!have_gpu() || gpus() < (mpi ? 1 : np)) {
        test_skipped("needs %d GPU%s (nccl: one per rank)\n", np, np > 1 ? "s" : "");
        return;
    }
    char *src = temp_dir(), path[1024], cmd[4096];
    const char *sched = cases[_i].sched ? cases[_i].sched : "1f1b.pp";
    snprintf(path, sizeof path, "%s/%s", src, sched);
    if (cases[_i].gpt)
        snprintf(cmd, sizeof cmd,
                 "sed '/^model {/,/^}/d' %s/schedules/%s > %s && printf 'model gpt {\n"
                 "vocab = 256\ncontext = 16\nembed = 16\nheads = 2\nffn = 32\n"
                 "layers = %s\nbatch = 2\n}\n' >> %s",
                 PP_ROOT, sched, path, cases[_i].gpt, path);
    else
        snprintf(cmd, sizeof cmd, "cp %s/schedules/%s %s", PP_ROOT, sched, path);
    free(run_expect(cmd, 0));
    char *dir = compile_plan(path, cases[_i].ppc), *out[2], flags[512];
    snprintf(flags, sizeof flags, "--steps 3 %s", cases[_i].vm);
    run_both(np, mpi ? "mpi" : "nccl", flags, dir, out);
    const char *on = mpi ? "graph: on, piecewise: rank 0's step captured once as "
                         : "graph: on, each rank's step captured once";
    ck_assert_msg(strstr(out[0], on) != NULL, "case %d: --graph auto did not replay its steps:\n%s",
                  _i, out[0]);
    ck_assert_msg(strstr(out[1], "graph: off, launching instruction by instruction (--graph off)"),
                  "case %d: --graph off did not say it launches:\n%s", _i, out[1]);
    char what[256];
    snprintf(what, sizeof what, "case %d (%d rank%s, %s %s)", _i, np, np > 1 ? "s" : "",
             cases[_i].gpt ? "gpt" : "mlp", cases[_i].ppc);
    same_bits(dir, what, out);
    remove_dir(src);
}
END_TEST

/* Each run that waits on the host inside a step, or times its
 * instructions, launches instruction by instruction, saying why; --graph
 * on refuses it. */
START_TEST(fallback_reasons)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    char *dir = compile_plan("1f1b.pp", "-D S=1 -D B=2"), cmd[4096];
    static const char *const why[][2] = {
        {"--transport mpi --deterministic", "--deterministic: the host sums each microbatch"},
        {"--transport nccl --profile PROFILE", "--profile: each job is timed by events"},
        {"--transport nccl --no-compute", "--no-compute: it times each instruction's host"},
    };
    for (size_t i = 0; i < sizeof why / sizeof why[0]; i++) {
        char flags[512];
        snprintf(flags, sizeof flags, "%s", why[i][0]);
        char *at = strstr(flags, "PROFILE");
        if (at)
            snprintf(at, sizeof flags - (size_t)(at - flags), "%s/profile.json", dir);
        snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --backend cuda %s --steps 1 %s/plan/rank0.bin",
                 PP_ROOT, flags, dir);
        char *out = run_expect(cmd, 0), want[256];
        snprintf(want, sizeof want, "graph: off, launching instruction by instruction (%s",
                 why[i][1]);
        ck_assert_msg(strstr(out, want) != NULL, "expected '%s' from %s:\n%s", want, cmd, out);
        free(out);
        snprintf(cmd, sizeof cmd,
                 "%s/bin/" PPVM " --backend cuda --graph on %s --steps 1 %s/plan/rank0.bin",
                 PP_ROOT, flags, dir);
        out = run_expect(cmd, 1);
        snprintf(want, sizeof want,
                 "--graph on: this run cannot replay its steps as CUDA graphs: %s", why[i][1]);
        ck_assert_msg(strstr(out, want) != NULL, "expected '%s' from %s:\n%s", want, cmd, out);
        free(out);
    }
    /* on: the nccl run that can, does; and on the stand-ins' own count,
     * replaying allocates nothing (1 step and 3 make as many allocations) */
    int allocs[2] = {-1, -1};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "env PP_STANDIN_REPORT=1 %s/bin/" PPVM
                 " --backend cuda --transport nccl --graph on --steps %d %s/plan/rank0.bin",
                 PP_ROOT, 1 + 2 * k, dir);
        char *out = run_expect(cmd, 0);
        ck_assert_msg(strstr(out, "graph: on, each rank's step captured once") != NULL,
                      "--graph on did not replay:\n%s", out);
        const char *at = strstr(out, " device and pinned allocations");
        while (at && at > out && at[-1] != ' ')
            at--;
        if (at && at > out)
            allocs[k] = atoi(at);
        free(out);
    }
    if (!strcmp(PPVM, "ppvm-standin"))
        ck_assert_msg(allocs[0] > 0 && allocs[1] == allocs[0],
                      "replayed steps: %d device and pinned allocations in 1 step, %d in 3: a "
                      "replay allocates",
                      allocs[0], allocs[1]);
    remove_dir(dir);
}
END_TEST

/* The captured step's first backward into each stage writes its weight
 * gradients (cuBLAS beta 0, vm/grads_zero.c), as a launched step's does:
 * the gradients are zeroed at start-up and by every step's updates, so the
 * step captured at step 1 starts from what every replay starts from. On the
 * stand-ins' own counts, a 2-rank GPipe (one mlp block a stage, B = 4)
 * replayed for 3 steps captured one graph a rank, whose GEMMs (the only
 * ones a replayed run calls) hold (B - 1) * W at beta 1 (W: the stage's
 * weight-gradient GEMMs: 2, and the head's 1), and whose memsets are none
 * on rank 0 and on rank 1 only its 2 a microbatch (the loss accumulator,
 * the input gradient): no pass zeroes gradients. */
START_TEST(replay_writes_first_grads)
{
    if (strcmp(PPVM, "ppvm-standin") || gpus() < 2) {
        test_skipped("the stand-in runtime's own counts, 2 stand-in GPUs\n");
        return;
    }
    const char *prec[2] = {"", " --precision bf16"};
    for (int bf = 0; bf < 2; bf++) {
        char defs[128], cmd[2048];
        snprintf(defs, sizeof defs, "-D S=2 -D B=4%s", prec[bf]);
        char *dir = compile_plan("gpipe.pp", defs);
        snprintf(cmd, sizeof cmd, "--backend cuda --transport nccl --graph on --steps 3 %s/plan",
                 dir);
        setenv("PP_STANDIN_REPORT", "1", 1);
        char *out = ok_run(2, cmd);
        unsetenv("PP_STANDIN_REPORT");
        for (int r = 0; r < 2; r++) {
            char want[96];
            long b0 = -1, b1 = -1, graphs = -1, ops = -1, memsets = -1;
            snprintf(want, sizeof want, "standin: rank %d: cuBLAS GEMMs at beta 0: ", r);
            const char *p = strstr(out, want);
            ck_assert_msg(p && sscanf(p + strlen(want), "%ld, other beta: %ld", &b0, &b1) == 2,
                          "no beta count from rank %d:\n%s", r, out);
            snprintf(want, sizeof want, "standin: rank %d: CUDA graphs captured: ", r);
            p = strstr(out, want);
            ck_assert_msg(p && sscanf(p + strlen(want), "%ld, holding %ld operations, %ld memsets",
                                      &graphs, &ops, &memsets) == 3,
                          "no graph count from rank %d:\n%s", r, out);
            int w = r == 0 ? 2 : 3;
            ck_assert_msg(graphs == 1 && b1 == 3 * w,
                          "%s rank %d: %ld graphs captured, their GEMMs %ld at beta 1: expected 1 "
                          "graph and %d (the first backward writing, the 3 after it adding %d "
                          "each)",
                          bf ? "bf16" : "fp32", r, graphs, b1, 3 * w, w);
            ck_assert_msg(memsets == (r == 0 ? 0 : 2 * 4),
                          "%s rank %d: the captured step holds %ld memsets, expected %d (none "
                          "zeroing gradients)",
                          bf ? "bf16" : "fp32", r, memsets, r == 0 ? 0 : 2 * 4);
        }
        free(out);
        remove_dir(dir);
    }
}
END_TEST

/* Piecewise (--transport mpi): a 2-rank 1F1B, DDP and FSDP sharing one GPU
 * say how many graphs rank 0's step is, the stand-ins count as many
 * captured on rank 0 after 1 step and after 3 (DDP's ReduceGrads and
 * FSDP's received weight gradients, made by the host between segments,
 * forget the zeroed-gradient marks every step: a replay that did not put
 * back its capture's marks was captured again every other step), and
 * replayed steps allocate nothing (1 step and 3 make as many allocations on
 * each rank). Tensor parallelism over mpi, whose all-reduces wait on the
 * host inside a job, launches instead and says why. */
static void piecewise_case(const char *file, const char *defs)
{
    char *dir = compile_plan(file, defs), cmd[4096];
    int allocs[2][2] = {{-1, -1}, {-1, -1}};
    long said = -1;
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "--backend cuda --transport mpi --graph on --steps %d %s/plan",
                 1 + 2 * k, dir);
        setenv("PP_STANDIN_REPORT", "1", 1);
        char *out = ok_run(2, cmd);
        unsetenv("PP_STANDIN_REPORT");
        const char *want = "graph: on, piecewise: rank 0's step captured once as ";
        const char *at = strstr(out, want);
        ck_assert_msg(at && sscanf(at + strlen(want), "%ld CUDA graphs", &said) == 1 && said > 1,
                      "--graph on over mpi did not say it replays piecewise:\n%s", out);
        for (int r = 0; r < 2 && !strcmp(PPVM, "ppvm-standin"); r++) {
            char w[96];
            long graphs = -1, ops, memsets;
            snprintf(w, sizeof w, "standin: rank %d: CUDA graphs captured: ", r);
            at = strstr(out, w);
            ck_assert_msg(at && sscanf(at + strlen(w), "%ld, holding %ld operations, %ld memsets",
                                       &graphs, &ops, &memsets) == 3,
                          "no graph count from rank %d:\n%s", r, out);
            ck_assert_msg(r != 0 || graphs == said,
                          "%s %s, %d steps: rank 0 said its step is %ld graphs captured once, "
                          "the stand-ins captured %ld",
                          file, defs, 1 + 2 * k, said, graphs);
            snprintf(w, sizeof w, "standin: rank %d: ", r);
            at = strstr(out, w);
            ck_assert_msg(at != NULL, "no allocation count from rank %d:\n%s", r, out);
            allocs[k][r] = atoi(at + strlen(w));
        }
        free(out);
    }
    if (!strcmp(PPVM, "ppvm-standin"))
        for (int r = 0; r < 2; r++)
            ck_assert_msg(allocs[0][r] > 0 && allocs[1][r] == allocs[0][r],
                          "%s %s rank %d, piecewise: %d device and pinned allocations in 1 step, "
                          "%d in 3: a replay allocates",
                          file, defs, r, allocs[0][r], allocs[1][r]);
    remove_dir(dir);
}

START_TEST(piecewise_mpi)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    piecewise_case("1f1b.pp", "-D S=2 -D B=4");
    piecewise_case("ddp.pp", "-D S=2 -D B=2");
    piecewise_case("fsdp.pp", "-D S=2 -D B=2");
    char *src = temp_dir(), path[1024], cmd[4096];
    snprintf(path, sizeof path, "%s/t.pp", src);
    snprintf(cmd, sizeof cmd, "cp %s/schedules/1f1b.pp %s && printf '\\ntensor = 2\\n' >> %s",
             PP_ROOT, path, path);
    free(run_expect(cmd, 0));
    char *dir = compile_plan(path, "-D S=1 -D B=2");
    snprintf(cmd, sizeof cmd, "--backend cuda --transport mpi --steps 1 %s/plan", dir);
    char *out = ok_run(2, cmd);
    ck_assert_msg(strstr(out,
                         "graph: off, launching instruction by instruction (--transport "
                         "mpi with tensor parallelism: its all-reduces wait on the host") != NULL,
                  "tensor = 2 over mpi did not say why it launches:\n%s", out);
    free(out);
    remove_dir(dir);
    remove_dir(src);
}
END_TEST

/* --skip-nonfinite replayed. Over nccl the captured step's checks reduce
 * to a device flag, summed over the ranks in the graph, and the deferred
 * updates read it; over mpi (piecewise) each replay defers its updates
 * again and the host's commit runs them once the ranks agreed. SGD at --lr
 * 1000 overflows after a few steps, so the run applies its first steps
 * and skips the last ones; replayed and launched, the same steps are said
 * skipped and the weights are the same bits (a replay that updated anyway
 * would hold NaNs, one that always skipped the initial weights). 2-rank
 * 1F1B fp32 over nccl and over mpi, and 1 rank bf16. */
START_TEST(skip_nonfinite_replayed)
{
    static const struct {
        int np, steps;
        const char *ppc, *transport;
    } runs[] = {{2, 6, "-D S=2 -D B=4", "nccl"},
                {1, 8, "-D S=1 -D B=2 --precision bf16", "nccl"},
                {2, 6, "-D S=2 -D B=4", "mpi"}};
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    for (size_t c = 0; c < sizeof runs / sizeof runs[0]; c++) {
        int np = runs[c].np, mpi = !strcmp(runs[c].transport, "mpi");
        if (!mpi && gpus() < np) {
            test_skipped("needs %d GPUs (nccl)\n", np);
            continue; /* (one GPU: the mpi run still runs) */
        }
        char *dir = compile_plan("1f1b.pp", runs[c].ppc), flags[128], *out[2];
        int skipped[2] = {0, 0};
        snprintf(flags, sizeof flags, "--steps %d --skip-nonfinite --lr 1000", runs[c].steps);
        run_both(np, runs[c].transport, flags, dir, out);
        for (int k = 0; k < 2; k++)
            for (const char *at = out[k]; (at = strstr(at, " skipped on every rank")); at++)
                skipped[k]++;
        const char *on = mpi ? "graph: on, piecewise" : "graph: on, each rank's step captured once";
        ck_assert_msg(strstr(out[0], on) != NULL,
                      "%s over %s: --skip-nonfinite did not replay its steps:\n%s", runs[c].ppc,
                      runs[c].transport, out[0]);
        ck_assert_msg(skipped[1] > 0 && skipped[1] < runs[c].steps - 1 && skipped[0] == skipped[1],
                      "%s over %s: %d steps said skipped replayed, %d launched (expected the "
                      "same, some but not all):\n%s\n%s",
                      runs[c].ppc, runs[c].transport, skipped[0], skipped[1], out[0], out[1]);
        char what[256];
        snprintf(what, sizeof what, "%s over %s, after its skipped steps", runs[c].ppc,
                 runs[c].transport);
        same_bits(dir, what, out);
    }
}
END_TEST

/* PP_INJECT_NAN's step (a NaN into stage 0's first microbatch at step 3)
 * runs launched between replays, and --skip-nonfinite skips it: replayed
 * and launched, the run says step 3 skipped and only it, and ends with the
 * same bits (the launched step reading the replays' learning rate and
 * tokens, its updates not reading the device flag of the step before; the
 * next step's segments captured again where it left other marks). One
 * rank over nccl, and a 2-rank 1F1B piecewise over mpi. */
START_TEST(inject_between_replays)
{
    static const struct {
        int np;
        const char *ppc, *transport, *on;
    } runs[] = {{1, "-D S=1 -D B=2", "nccl", "graph: on, each rank's step captured once"},
                {2, "-D S=2 -D B=4", "mpi", "graph: on, piecewise"}};
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    for (size_t c = 0; c < sizeof runs / sizeof runs[0]; c++) {
        char *dir = compile_plan("1f1b.pp", runs[c].ppc), *out[2];
        setenv("PP_INJECT_NAN", "3:0:0", 1);
        run_both(runs[c].np, runs[c].transport, "--steps 5 --skip-nonfinite", dir, out);
        unsetenv("PP_INJECT_NAN");
        for (int k = 0; k < 2; k++) {
            const char *at = strstr(out[k], " skipped on every rank");
            ck_assert_msg(at && !strstr(at + 1, " skipped on every rank") &&
                              strstr(out[k], "step 3 skipped"),
                          "%s over %s, --graph %s: expected step 3 skipped and no other:\n%s",
                          runs[c].ppc, runs[c].transport, k ? "off" : "auto", out[k]);
        }
        ck_assert_msg(strstr(out[0], runs[c].on) != NULL,
                      "%s over %s: PP_INJECT_NAN's run did not replay its other steps:\n%s",
                      runs[c].ppc, runs[c].transport, out[0]);
        char what[256];
        snprintf(what, sizeof what, "%s over %s, around PP_INJECT_NAN's launched step", runs[c].ppc,
                 runs[c].transport);
        same_bits(dir, what, out);
    }
}
END_TEST

/* Everywhere: the flag's errors, and the cpu backend has no graphs. */
START_TEST(graph_flag_errors)
{
    char *dir = compile_plan("1f1b.pp", "-D S=1 -D B=2"), cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --graph maybe x", PP_ROOT);
    char *out = run_expect(cmd, 2);
    ck_assert_msg(strstr(out, "--graph maybe: expected auto, on or off") != NULL, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --graph", PP_ROOT);
    out = run_expect(cmd, 2);
    ck_assert_msg(strstr(out, "--graph needs a value") != NULL, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s/bin/" PPVM " --backend cpu --graph on --steps 1 %s/plan/rank0.bin", PP_ROOT, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "--graph on: the cpu backend runs no CUDA graphs") != NULL, "%s",
                  out);
    free(out);
    /* auto on the cpu backend: nothing to say, and the run trains */
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --backend cpu --steps 1 %s/plan/rank0.bin", PP_ROOT,
             dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "graph:") == NULL && strstr(out, "step    1/1"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --help", PP_ROOT);
    out = run_expect(cmd, 0);
    ck_assert_ptr_nonnull(strstr(out, "--graph G"));
    free(out);
    remove_dir(dir);
}
END_TEST

Suite *gpu_graph_suite(void)
{
    Suite *s = suite_create("gpu_graph");
    TCase *tc = tcase_create("gpu_graph");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, graph_flag_errors);
    tcase_add_test(tc, fallback_reasons);
    tcase_add_test(tc, replay_writes_first_grads);
    tcase_add_test(tc, piecewise_mpi);
    tcase_add_test(tc, skip_nonfinite_replayed);
    tcase_add_test(tc, inject_between_replays);
    tcase_add_loop_test(tc, replay_matches_launch, 0, (int)(sizeof cases / sizeof cases[0]));
    suite_add_tcase(s, tc);
    return s;
}
