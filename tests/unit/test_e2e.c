/* test_e2e.c - end to end under mpirun: compile a library schedule, train it
 * for 3 steps with one process per rank, train the reference in one process,
 * and require the same final weights (|a - b| <= 1e-5 + 1e-4 |b|). Bad
 * input (wrong -np, mixed plans, a truncated rank file) must end every rank
 * with a message and a non-zero exit within seconds, never a hang. Every run
 * here pins --backend cpu: this is the CPU twin's suite (test_gpu_e2e.c
 * runs the same schedules on a GPU). */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/plan.h"
#include "../../vm/data.h"
#include "suites.h"
#include "testutil.h"

/* Three steps under mpirun, three in the reference, then --compare: each
 * step's failure is reported as what it is. Only --compare saying that
 * weights are beyond the tolerance (or differ in number) is "weights differ
 * from the reference". tolerance: extra --compare flags ("" for its
 * defaults). */
static void trains_like_reference_within(const char *schedule, const char *defs, int np,
                                         const char *tolerance)
{
    char *dir = compile_plan(schedule, defs), *out, *why, cmd[4096];
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --save %s/w --quiet", dir, dir);
    if (mpi_run(np, cmd, &out, &why))
        ck_abort_msg("%s %s: training under mpirun failed: %s", schedule, defs, why);
    free(out);
    proc_result r;
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/plan --steps 3 --save %s/ref --quiet",
             PP_ROOT, dir, dir);
    if (run_proc(cmd, CMD_TIMEOUT, &r))
        ck_abort_msg("%s %s: the reference run failed: %s\n  it %s", schedule, defs, cmd,
                     proc_story(&r, 20));
    proc_free(&r);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref %s", PP_ROOT, dir, dir, tolerance);
    run_proc(cmd, CMD_TIMEOUT, &r);
    if (r.status == 1 && (strstr(r.out, " beyond atol ") || strstr(r.out, " weights in ")))
        ck_abort_msg("%s %s: weights differ from the reference (%s):\n%s", schedule, defs, cmd,
                     r.out);
    if (r.status != 0 || !strstr(r.out, "within tolerance"))
        ck_abort_msg("%s %s: could not compare the weights: %s\n  it %s", schedule, defs, cmd,
                     proc_story(&r, 20));
    proc_free(&r);
    remove_dir(dir);
}

/* The default tolerance, |a - b| <= 1e-5 + 1e-4 |b|, and why it is right
 * for DDP, LPP, FSDP and FSLPP, which do not match the reference bit for bit
 * as pipelines do. They add the same per-microbatch gradients in another
 * order: a rank accumulates its own microbatches through the GEMMs (beta =
 * 1), then replicas all-reduce partial sums and owners add what non-owners
 * send. Each float add rounds by at most half an ulp (2^-24 relative), so a
 * step's summed gradient element moves by at most about (B-1) 2^-24
 * sum_b |g_b|, the weight by lr times that, and 3 steps hardly compound it:
 * measured (mlp, S=4, B=4 and 8, 3 steps) every such schedule ends at most
 * 1.19e-7 from the reference, one ulp of a weight near 1.0. The tolerance
 * (1.1e-4 at |b| = 1) is about 1000 times that, and far below what a
 * wrong gradient does: one step moves weights by up to 2e-2 to 8e-2 here,
 * so losing one of B = 4 microbatches' gradients misses by about a quarter
 * of that. Over a whole run the drift grows (3.2e-4 after the demo's 200
 * steps): ppvm --deterministic removes it, and test_determ.c holds every
 * schedule to the deterministic reference's bits. */
static void trains_like_reference(const char *schedule, const char *defs, int np)
{
    trains_like_reference_within(schedule, defs, np, "");
}

/* A pipeline (one owner per stage, its gradients summed in microbatch
 * order as the reference sums them) matches the reference bit for bit, as
 * the READMEs claim: compared at zero tolerance, so that even a drift of
 * one rounding fails (measured: max |diff| 0 for every one below). */
static void trains_like_reference_exactly(const char *schedule, const char *defs, int np)
{
    trains_like_reference_within(schedule, defs, np, "--atol 0 --rtol 0");
}

/* Per-stage blocks (`blocks` using s): lighter first and last stages, a
 * middle stage of none, with a fused and with a split backward. */
START_TEST(blocks_per_stage_train_alike)
{
    static const char *model = "model { context = 8; embed = 16; ffn = 64; batch = 8\n"
                               "        blocks = s == 0 || s == S - 1 ? 1 : s == 2 ? 0 : 3 }";
    char *gpipe = with_model("gpipe.pp", model), *zb = with_model("zb-h1.pp", model);
    trains_like_reference(gpipe, "-D S=4 -D B=4", 4);
    trains_like_reference(zb, "-D S=4 -D B=8", 4);
    remove_schedule(gpipe);
    remove_schedule(zb);
}
END_TEST

/* Activations past the cpu backend's 1 MiB send buffers (vm/interp.c
 * stage_send: 160 x 2048 floats, 1.25 MiB) leave from their slot, as every
 * message did before the buffers: 1F1B with them trains to the reference's
 * bits, as with the small model's 8 KB ones. */
START_TEST(large_activations_train_alike)
{
    char *big = with_model("1f1b.pp", "model { context = 32; embed = 64; ffn = 32; batch = 160 }");
    trains_like_reference_exactly(big, "-D S=2 -D B=4", 2);
    remove_schedule(big);
}
END_TEST

/* Every library schedule trains a small GPT (with lighter end stages) to
 * the reference's weights, in three groups that run as separate jobs. */
static void gpt_schedule_trains_alike(const char *schedule, const char *defs)
{
    char *path = with_model(schedule, test_gpt_model);
    trains_like_reference(path, defs, 4);
    remove_schedule(path);
}

/* The gpt model's variants: a split backward (ZB-H1) with a stage of no
 * layers, and bf16 with AdamW, fused and split (ZB-H1), bit for bit: the
 * cpu backend and the reference run the same stages, so the bf16 stash
 * (atty and fch too, isa/gpt_layout.h) is rounded and widened at the same
 * places in both. */
START_TEST(gpt_variants_4_ranks)
{
    char *zb = with_model("zb-h1.pp", "model gpt { context = 16; embed = 16; heads = 2; ffn = 32\n"
                                      "            layers = s == 1 ? 0 : 2; batch = 2 }");
    trains_like_reference(zb, "-D S=4 -D B=4", 4);
    remove_schedule(zb);
    char *mixed = with_model("1f1b.pp", test_gpt_model);
    trains_like_reference_exactly(mixed, "-D S=4 -D B=4 --precision bf16 --optimizer adamw", 4);
    remove_schedule(mixed);
    char *split = with_model("zb-h1.pp", test_gpt_model);
    trains_like_reference_exactly(split, "-D S=4 -D B=4 --precision bf16", 4);
    remove_schedule(split);
}
END_TEST

START_TEST(gpt_pipelines_4_ranks)
{
    gpt_schedule_trains_alike("gpipe.pp", "-D S=4 -D B=4");
    gpt_schedule_trains_alike("1f1b.pp", "-D S=4 -D B=8");
    gpt_schedule_trains_alike("1f1b-greedy.pp", "-D S=4 -D B=8");
    gpt_schedule_trains_alike("zb-h1.pp", "-D S=4 -D B=8");
    trains_like_reference("1f1b-gpt.pp", "-D S=4 -D B=4", 4); /* the GPT demo's own */
}
END_TEST

START_TEST(gpt_looped_4_ranks)
{
    gpt_schedule_trains_alike("interleaved-1f1b.pp", "-D W=4 -D V=2 -D B=8");
    gpt_schedule_trains_alike("breadth-first.pp", "-D W=4 -D S=8 -D B=4");
    gpt_schedule_trains_alike("depth-first.pp", "-D W=4 -D S=8 -D B=4");
}
END_TEST

START_TEST(gpt_data_parallel_4_ranks)
{
    gpt_schedule_trains_alike("ddp.pp", "-D S=4 -D B=4");
    gpt_schedule_trains_alike("fsdp.pp", "-D S=4 -D B=4");
    gpt_schedule_trains_alike("lpp.pp", "-D S=4 -D B=4 -D G=2 -D R=2");
    gpt_schedule_trains_alike("fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2");
}
END_TEST

/* Issue 17's schedules train the small GPT too (S <= 4, on 2 or 4 ranks). */
START_TEST(gpt_state_of_the_art)
{
    static const struct {
        const char *schedule, *defs;
        int np;
    } runs[] = {
        {"zb-v.pp", "-D W=2 -D B=4", 2},
        {"zb-h2.pp", "-D S=3 -D B=5", 3},
        {"dualpipev.pp", "-D W=2 -D B=5", 2},
        {"interleaved-zb.pp", "-D W=2 -D V=2 -D B=4", 2},
        {"looped-bfs.pp", "-D W=2 -D V=2 -D B=3", 2},
        {"interleaved-1f1b.pp", "-D W=2 -D V=2 -D B=3", 2},
        {"pp-dp.pp", "-D S=2 -D D=2 -D B=4", 4},
        {"pp-fsdp.pp", "-D P=2 -D D=2 -D B=4", 4},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *path = with_model(runs[i].schedule, test_gpt_model);
        trains_like_reference(path, runs[i].defs, runs[i].np);
        remove_schedule(path);
    }
}
END_TEST

/* --compare's tolerances: weights one step apart differ, so they pass only
 * with a loose --atol and fail with none (each flag sets its own bound). */
START_TEST(compare_tolerances)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppvm --reference %s/plan --steps 1 --save %s/a --quiet && "
             "%s/bin/ppvm --reference %s/plan --steps 2 --save %s/b --quiet",
             PP_ROOT, dir, dir, PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/a %s/b --atol 1 --rtol 0", PP_ROOT, dir,
             dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/a %s/b --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    char *out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, " beyond atol "),
                  "%s: exit 1 but no weight beyond the tolerance:\n%s", cmd, out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* The reference says when it cannot allocate (it exited 1 with no word
 * when a stage's buffers or its workspace did not fit): a GPT whose
 * embedding table alone is 4 GiB, under a 2 GiB address space limit. */
START_TEST(reference_out_of_memory)
{
    char *dir = temp_dir(), path[4096], cmd[8192];
    snprintf(path, sizeof path, "%s/big.pp", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("param S = 1\nparam B = 1\nparam W = 1\ncompute(s,b,d) = s\nweights(s,b,d) = s\n"
          "priority(s,b,d) = b\nmodel gpt { vocab = 1048576; context = 16; embed = 1024;\n"
          "  heads = 1; ffn = 16; layers = 0; batch = 1 }\n",
          f);
    fclose(f);
    char *plan = compile_plan(path, "");
    char lim[128];
    snprintf(cmd, sizeof cmd, "%s %s/bin/ppvm --reference %s/plan --steps 1",
             mem_limit(2000000, lim, sizeof lim), PP_ROOT, plan);
    char *out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "ppvm: out of memory allocating stage 0 of the reference"),
                  "%s: exit 1 but no word of the memory:\n%s", cmd, out);
    free(out);
    remove_dir(plan);
    remove_dir(dir);
}
END_TEST

START_TEST(gpipe_4_ranks) { trains_like_reference_exactly("gpipe.pp", "-D S=4 -D B=4", 4); }
END_TEST

START_TEST(ddp_4_ranks) { trains_like_reference("ddp.pp", "-D S=4 -D B=4", 4); }
END_TEST

START_TEST(one_f_one_b_4_ranks) { trains_like_reference_exactly("1f1b.pp", "-D S=4 -D B=8", 4); }
END_TEST

START_TEST(one_f_one_b_greedy_4_ranks)
{
    trains_like_reference_exactly("1f1b-greedy.pp", "-D S=4 -D B=8", 4);
}
END_TEST

/* Replicas across groups: stages 0 and 2 live on workers {0,2}, 1 and 3 on
 * {1,3}; their gradients are all-reduced over those sub-communicators. */
START_TEST(lpp_4_ranks) { trains_like_reference("lpp.pp", "-D S=4 -D B=4 -D G=2 -D R=2", 4); }
END_TEST

START_TEST(interleaved_4_ranks)
{
    trains_like_reference_exactly("interleaved-1f1b.pp", "-D W=4 -D V=2 -D B=8", 4);
}
END_TEST

START_TEST(breadth_first_4_ranks)
{
    trains_like_reference_exactly("breadth-first.pp", "-D W=4 -D S=8 -D B=4", 4);
}
END_TEST

START_TEST(depth_first_4_ranks)
{
    trains_like_reference_exactly("depth-first.pp", "-D W=4 -D S=8 -D B=4", 4);
}
END_TEST

/* split backward: BackwardInput now, BackwardWeight later, same weights */
START_TEST(zb_h1_4_ranks) { trains_like_reference_exactly("zb-h1.pp", "-D S=4 -D B=8", 4); }
END_TEST

/* The state-of-the-art library (issue 17), each at a small shape (S <= 4):
 * the V-shaped and interleaved zero bubble orders (split backward on two
 * chunks per worker), PyTorch's looped BFS, Megatron's interleaved 1F1B with
 * B not a multiple of W, and the 2-D schedules: PP x DP (replicas of each
 * stage all-reduced across pipelines) and a pipeline of FSDP groups (shards
 * fetched inside each group, gradients returned to their owners). */
START_TEST(zb_v_2_ranks) { trains_like_reference_exactly("zb-v.pp", "-D W=2 -D B=4", 2); }
END_TEST

/* DualPipeV's order (without its overlap), B not a multiple of W */
START_TEST(dualpipev_2_ranks) { trains_like_reference("dualpipev.pp", "-D W=2 -D B=5", 2); }
END_TEST

START_TEST(zb_h2_3_ranks) { trains_like_reference("zb-h2.pp", "-D S=3 -D B=5", 3); }
END_TEST

START_TEST(interleaved_zb_2_ranks)
{
    trains_like_reference("interleaved-zb.pp", "-D W=2 -D V=2 -D B=4", 2);
}
END_TEST

START_TEST(looped_bfs_2_ranks)
{
    trains_like_reference("looped-bfs.pp", "-D W=2 -D V=2 -D B=3", 2);
}
END_TEST

START_TEST(interleaved_any_b_2_ranks)
{
    trains_like_reference("interleaved-1f1b.pp", "-D W=2 -D V=2 -D B=3", 2);
}
END_TEST

START_TEST(pp_dp_4_ranks) { trains_like_reference("pp-dp.pp", "-D S=2 -D D=2 -D B=4", 4); }
END_TEST

START_TEST(pp_fsdp_4_ranks) { trains_like_reference("pp-fsdp.pp", "-D P=2 -D D=2 -D B=4", 4); }
END_TEST

/* Weight ownership: FSDP and FSLPP fetch weights from their owners and send
 * weight gradients back (LPP with G=2 R=2, above, has replicas). */
START_TEST(fsdp_4_ranks) { trains_like_reference("fsdp.pp", "-D S=4 -D B=4", 4); }
END_TEST

START_TEST(fslpp_4_ranks) { trains_like_reference("fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2", 4); }
END_TEST

/* The prefetch window moves receives and fetches, never the result. */
START_TEST(prefetch_windows_train_alike)
{
    trains_like_reference("1f1b.pp", "-D S=4 -D B=8 --prefetch 0", 4);
    trains_like_reference("fsdp.pp", "-D S=4 --prefetch 3", 4);
}
END_TEST

/* Kept weights (ppc --keep-weights) are the same weights: FSDP and FSLPP
 * train alike with every reuse kept, and with the window a --mem-limit
 * leaves (its VM memory checked below). */
START_TEST(kept_weights_train_alike)
{
    trains_like_reference("fsdp.pp", "-D S=4 --keep-weights", 4);
    trains_like_reference("fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2 --keep-weights", 4);
    trains_like_reference("fsdp.pp", "-D S=8 -D B=4 --keep-weights --mem-limit 4200000", 4);
}
END_TEST

/* AdamW (ppc --optimizer adamw): pipelines, replicas (their moments stay
 * equal because their gradients are) and owners that others fetch from. */
START_TEST(adamw_trains_like_reference)
{
    trains_like_reference("1f1b.pp", "-D S=4 -D B=8 --optimizer adamw", 4);
    trains_like_reference("lpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2 --optimizer adamw", 4);
    trains_like_reference("fsdp.pp", "-D S=4 --optimizer adamw", 4);
}
END_TEST

/* bf16 mixed precision (ppc --precision bf16): jobs compute with the bf16
 * copies of the owners' fp32 master weights, fetched ones included. Where
 * the gradients are summed in the reference's order (pipelines, FSDP's
 * returns, the split backward) the weights match it as tightly as fp32's.
 * Replicas all-reduce partial sums, another order: a last-bit difference in
 * a master weight can move its bf16 copy by a whole bf16 step (2^-8
 * relative), which the next steps carry on, so LPP's replicas are held to
 * 2e-4 + 1e-2 |b| (5.5e-5 at worst seen, weights of order 0.1). */
START_TEST(bf16_trains_like_reference)
{
    trains_like_reference("1f1b.pp", "-D S=4 -D B=8 --precision bf16", 4);
    trains_like_reference("fsdp.pp", "-D S=4 --precision bf16", 4);
    trains_like_reference("zb-h1.pp", "-D S=4 -D B=8 --precision bf16", 4);
    trains_like_reference("fsdp.pp", "-D S=4 --precision bf16 --optimizer adamw", 4);
    trains_like_reference_within("lpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2 --precision bf16", 4,
                                 "--atol 2e-4 --rtol 1e-2");
}
END_TEST

/* bf16 changes the arithmetic, not the training: over steps 31-60 of
 * GPipe, bf16's mean loss is within 2% of fp32's, and not exactly it. One
 * step's loss is one batch's (it swings by 30% from step to step here),
 * and the two runs sit on different batches' noise: their last losses
 * differed by 7% on one machine's BLAS while the means of the last ten
 * differed by 0.04%. bf16 at lr 0.3 also spikes now and then: after the
 * kernels were vectorised (issue 18; fp32's losses the same to 1e-4), seed
 * 1's bf16 run with OpenBLAS's Haswell/Zen kernels jumped at step 24
 * (3.12 where the earlier build had 2.58, fp32 2.75) and was back on
 * fp32's curve by step 31: its mean over steps 21-30 was 10% above fp32's,
 * over 31-60 1.1% below (the earlier build: 0.5% above; seeds 2-5 within
 * 0.6% over 21-30 in both builds). Thirty steps after the first thirty
 * keep one spike from deciding the test. */
START_TEST(bf16_loss_tracks_fp32)
{
    enum { STEPS = 60, FROM = 30 };
    double mean[2] = {0, 0};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        char *dir =
            compile_plan("gpipe.pp", bf16 ? "-D S=2 -D B=4 --precision bf16" : "-D S=2 -D B=4");
        char args[2048];
        snprintf(args, sizeof args, "--backend cpu %s/plan --steps %d", dir, STEPS);
        char *out = mpi_ok(2, args);
        double loss[STEPS];
        int n = 0;
        for (char *p = out; n < STEPS && (p = strstr(p, "loss ")); p += 5)
            loss[n++] = atof(p + 5);
        ck_assert_msg(n == STEPS, "%d losses printed in %d steps:\n%s", n, STEPS, out);
        for (int i = FROM; i < STEPS; i++)
            mean[bf16] += loss[i] / (STEPS - FROM);
        free(out);
        remove_dir(dir);
    }
    ck_assert_msg(mean[0] > 0 && fabs(mean[1] - mean[0]) <= 0.02 * mean[0] && mean[1] != mean[0],
                  "mean loss over steps %d-%d: fp32 %g, bf16 %g", FROM + 1, STEPS, mean[0],
                  mean[1]);
}
END_TEST

/* A middle stage of `blocks = 0` has no weights: FSDP and FSLPP fetch none
 * of it, accumulate and return no gradients for it, and still train alike. */
START_TEST(weightless_stages_train_alike)
{
    static const char *cases[][2] = {{"fsdp.pp", "-D S=4 -D B=4"},
                                     {"fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2"}};
    for (int i = 0; i < 2; i++) {
        char *src = temp_dir(), path[1024], cmd[4096], *out;
        snprintf(path, sizeof path, "%s/%s", src, cases[i][0]);
        snprintf(cmd, sizeof cmd, "sed 's/blocks *= *[0-9]*/blocks = 0/' %s/schedules/%s > %s",
                 PP_ROOT, cases[i][0], path);
        free(run_expect(cmd, 0));
        char *dir = compile_plan(path, cases[i][1]);
        snprintf(
            cmd, sizeof cmd,
            "cat %s/plan/rank*.txt | grep -cE '(FetchWeights|ZeroGrads|SendWeightGrad) +[12] '",
            dir);
        run_cmd(cmd, &out); /* grep -c: exit 1 when it counts 0 */
        ck_assert_msg(atoi(out) == 0, "%s: %s instructions move weightless stages' weights",
                      cases[i][0], out);
        free(out);
        remove_dir(dir);
        trains_like_reference(path, cases[i][1], 4);
        remove_dir(src);
    }
}
END_TEST

/* Static memory: what each ppvm rank allocates at start-up is what the
 * report says the plan needs (report.json's mem_bytes); with gpt in bf16
 * too, whose stash slots hold the GEMM operands as bf16 (isa/gpt_layout.h),
 * so the plan's slots, the report and ppvm's allocation drop together. */
START_TEST(vm_allocates_what_the_report_says)
{
    static const char *cases[][2] = {
        {"fsdp.pp", "-D S=4"},
        {"1f1b.pp", "-D S=4 -D B=8"},
        {"fslpp.pp", "-D S=4 -D B=8 -D G=2 -D R=2"},
        {"fsdp.pp", "-D S=8 -D B=4 --keep-weights --mem-limit 4200000"},
        {"ddp.pp", "-D S=4 --optimizer adamw"},
        {"fsdp.pp", "-D S=4 --precision bf16"},
        {"ddp.pp", "-D S=4 --optimizer adamw --precision bf16"},
        {"1f1b-gpt.pp", "-D B=6 --precision bf16"},
        {"1f1b-gpt.pp", "-D B=6"}};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char *dir = compile_plan(cases[i][0], cases[i][1]), *out, *json, cmd[2048];
        snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 1", dir);
        out = mpi_ok(4, cmd);
        snprintf(cmd, sizeof cmd, "cat %s/plan/report.json", dir);
        json = run_expect(cmd, 0);
        const char *vm = strstr(out, "bytes per rank:"), *rep = strstr(json, "\"mem_bytes\": [");
        ck_assert_msg(vm != NULL, "%s %s: ppvm printed no 'bytes per rank:' line:\n%s", cases[i][0],
                      cases[i][1], out);
        ck_assert_msg(rep != NULL, "%s %s: report.json has no mem_bytes:\n%s", cases[i][0],
                      cases[i][1], json);
        vm += strlen("bytes per rank:");
        rep += strlen("\"mem_bytes\": [");
        for (int r = 0; r < 4; r++) {
            char *end;
            unsigned long long a = strtoull(vm, &end, 10), b;
            vm = end;
            b = strtoull(rep, &end, 10);
            rep = end + 1; /* past the comma */
            ck_assert_msg(a == b && a > 0, "%s rank %d: ppvm allocates %llu, the report says %llu",
                          cases[i][0], r, a, b);
        }
        free(out);
        free(json);
        remove_dir(dir);
    }
}
END_TEST

START_TEST(loss_falls)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=4"), *out, args[2048];
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 30", dir);
    out = mpi_ok(2, args);
    double first = 0, last = 0;
    for (char *p = out; (p = strstr(p, "loss ")); p += 5) {
        double v = atof(p + 5);
        if (first == 0)
            first = v;
        last = v;
    }
    ck_assert_msg(first > 5.0 && last < first - 1.0, "loss did not fall: %g -> %g\n%s", first, last,
                  out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* cmd (not mpirun: see mpi_fails_with) must exit non-zero by itself (not
 * killed, not timed out) and print message. */
static void fails_with(const char *cmd, const char *message)
{
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(r.status != 0 && !r.signal && !r.timed_out,
                  "expected %s to exit non-zero with '%s'; it %s", cmd, message,
                  proc_story(&r, 20));
    ck_assert_msg(strstr(r.out, message) != NULL, "expected '%s' in the output of %s:\n%s", message,
                  cmd, r.out);
    proc_free(&r);
}

/* --steps 0 --save writes the initial weights (what tests/bench/torch_oracle.py
 * starts PyTorch from): under mpirun and in the reference, the same bits. */
START_TEST(initial_weights_saved)
{
    char *dir = compile_plan("1f1b.pp", "-D S=2 -D B=2"), args[2048], cmd[2048];
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 0 --save %s/w", dir, dir);
    free(mpi_ok(2, args));
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppvm --reference %s/plan --steps 0 --save %s/r && "
             "%s/bin/ppvm --compare %s/w %s/r --atol 0 --rtol 0",
             PP_ROOT, dir, dir, PP_ROOT, dir, dir);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "stage 1:") && strstr(out, "max |diff| 0 "), "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* An llm.c token shard holding the same tokens as a text file trains to the
 * same losses and weights as the text itself (the tokens, not the format,
 * are what is sampled), on 2 ranks and in the reference; a bad shard ends
 * every rank with exit 1 and a message naming the file. */
START_TEST(token_shards)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), args[4096], cmd[4096], path[2048];
    FILE *in = fopen(PP_DEFAULT_DATA, "rb");
    ck_assert_ptr_nonnull(in);
    static uint8_t text[1 << 16];
    size_t n = fread(text, 1, sizeof text, in);
    fclose(in);
    ck_assert_uint_gt(n, 1000);
    snprintf(path, sizeof path, "%s/text.txt", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(text, 1, n, f), n);
    fclose(f);
    int32_t head[256] = {20240520, 1, (int32_t)n};
    for (int version = 1; version <= 2; version++) {
        head[1] = version;
        snprintf(path, sizeof path, "%s/v%d.bin", dir, version);
        f = fopen(path, "wb");
        ck_assert_uint_eq(fwrite(head, 4, 256, f), 256);
        for (size_t i = 0; i < n; i++) {
            uint16_t t = text[i];
            ck_assert_uint_eq(fwrite(&t, 2, 1, f), 1);
        }
        fclose(f);
    }
    const char *flags = "--backend cpu --steps 3 --loss-digits 9";
    snprintf(args, sizeof args, "%s %s/plan --data %s/text.txt --save %s/wt", flags, dir, dir, dir);
    char *text_out = mpi_ok(2, args);
    snprintf(args, sizeof args, "%s %s/plan --data %s/v1.bin --save %s/ws", flags, dir, dir, dir);
    char *shard_out = mpi_ok(2, args);
    const char *a = strstr(text_out, "step "), *b = strstr(shard_out, "step ");
    ck_assert_msg(a && b && !strncmp(a, b, 30),
                  "the shard's first loss differs from the text's:\n%s\n%s", text_out, shard_out);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/wt %s/ws --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppvm --reference %s/plan --steps 3 --data %s/v1.bin --quiet "
             "--save %s/wr",
             PP_ROOT, dir, dir, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/ws %s/wr", PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    snprintf(args, sizeof args, "--backend cpu %s/plan --data %s/v2.bin", dir, dir);
    snprintf(path, sizeof path,
             "data file '%s/v2.bin' is an llm.c token shard of version 2; "
             "expected version 1",
             dir);
    mpi_fails_with(2, args, path);
    free(text_out);
    free(shard_out);
    remove_dir(dir);
}
END_TEST

/* A loss or gradient that is not finite stops every rank at that step with
 * exit 1 (no MPI_Abort) and writes no weights (here, with --lr 1000, a
 * gradient overflows a step before the loss does); a data file that cannot
 * be read is 1 too, a bad flag 2. */
START_TEST(exit_statuses)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), args[2048], cmd[2048];
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 20 --lr 1000 --quiet --save %s/w",
             dir, dir);
    char *out, *why;
    int rc = mpi_run(2, args, &out, &why);
    /* every rank that reported exited 1 (mpirun may end a rank before it
     * reports, once another has exited 1), and at least one did */
    int st[2];
    rank_statuses(out, 2, st);
    ck_assert_msg(rc != 0 && (st[0] == 1 || st[1] == 1) && st[0] != 0 && st[1] != 0 && st[0] <= 1 &&
                      st[1] <= 1 && strstr(out, " not finite at step ") &&
                      !strstr(out, "MPI_ABORT"),
                  "expected every rank to exit 1 saying a loss or gradient is not finite: %s\n%s",
                  rc ? why : "every rank exited 0", out);
    /* --save made (and checked) w before step 1, but wrote no stage file */
    snprintf(cmd, sizeof cmd, "test -d %s/w && ! test -e %s/w/stage0.w && ! test -e %s/w/stage1.w",
             dir, dir, dir);
    ck_assert_msg(run_cmd(cmd, NULL) == 0, "weights were saved from a run whose loss diverged");
    free(out);
    free(why);
    snprintf(args, sizeof args, "--backend cpu %s/plan --data /nonexistent", dir);
    mpi_fails_with(2, args, "ppvm: rank 1: cannot open data file '/nonexistent'");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --steps -1 %s/plan", PP_ROOT, dir);
    out = run_expect(cmd, 2);
    ck_assert_msg(strstr(out, "ppvm: --steps -1: expected an integer"), "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

START_TEST(world_size_mismatch)
{
    char *dir = compile_plan("gpipe.pp", "-D S=4 -D B=4"), args[2048];
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 1", dir);
    mpi_fails_with(2, args, "compiled for 4 ranks but mpirun started 2");
    mpi_fails_with(5, args, "rank4.bin");
    remove_dir(dir);
}
END_TEST

START_TEST(mixed_plan_ids)
{
    char *a = compile_plan("gpipe.pp", "-D S=4 -D B=4"),
         *b = compile_plan("gpipe.pp", "-D S=4 -D B=8");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/plan/rank2.bin %s/plan/rank2.bin", b, a);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 1", a);
    mpi_fails_with(4, cmd, "mixes plans of different compiles");
    remove_dir(a);
    remove_dir(b);
}
END_TEST

START_TEST(truncated_rank_file)
{
    char *dir = compile_plan("gpipe.pp", "-D S=4 -D B=4"), cmd[2048];
    snprintf(cmd, sizeof cmd, "truncate -s 150 %s/plan/rank1.bin", dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 1", dir);
    mpi_fails_with(4, cmd, "truncated");
    remove_dir(dir);
}
END_TEST

/* ppvm --profile writes each stage's measured F, B (and, with a split
 * backward, W) and the link's latency and bandwidth, and ppc --costs
 * takes the file as it is: the report then says which costs it used. */
START_TEST(profile_feeds_the_simulator)
{
    char *dir = compile_plan("zb-h1.pp", "-D S=4 -D B=8"), cmd[4096], *out, *json;
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 2 --quiet --profile %s/c.json", dir,
             dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "cat %s/c.json", dir);
    json = run_expect(cmd, 0);
    double v[8];
    ck_assert_int_eq(profile_values(json, "F", v, 8), 4);
    ck_assert_int_eq(profile_values(json, "B", v, 8), 4);
    ck_assert_int_eq(profile_values(json, "W", v, 8), 4);
    ck_assert_int_eq(profile_values(json, "O", v, 8), 4);
    ck_assert_ptr_null(strstr(json, "\"G\"")); /* no stage returns its gradients */
    ck_assert_int_eq(profile_values(json, "latency", v, 8), 1);
    ck_assert_msg(v[0] < 0.1, "latency %g s", v[0]);
    ck_assert_int_eq(profile_values(json, "bandwidth", v, 8), 1);
    ck_assert_msg(v[0] > 0, "bandwidth %g", v[0]);
    /* issue 29: the link's token-bucket burst (about 0 here) and the
     * all-reduce's shape */
    const char *burst = strstr(json, "\"burst\": ");
    ck_assert_msg(burst && strtod(burst + 9, NULL) >= 0, "no \"burst\" >= 0 in:\n%s", json);
    ck_assert_msg(strstr(json, "\"allreduce\": \"tree\"") ||
                      strstr(json, "\"allreduce\": \"ring\""),
                  "no \"allreduce\": \"tree\" or \"ring\" in:\n%s", json);
    /* whether transfers move while a rank computes: with the
     * communication thread (ranks outnumber cores) "always", else "wait" */
    ck_assert_msg(strstr(json, "\"progress\": \"always\"") ||
                      strstr(json, "\"progress\": \"wait\""),
                  "no \"progress\": \"always\" or \"wait\" in:\n%s", json);
    /* and the data-parallel all-reduce timed whole, over the 4 ranks */
    ck_assert_int_eq(profile_values(json, "allreduce_latency", v, 8), 1);
    ck_assert_msg(v[0] >= 0 && v[0] < 0.1, "allreduce_latency %g s", v[0]);
    ck_assert_int_eq(profile_values(json, "allreduce_bandwidth", v, 8), 1);
    ck_assert_msg(v[0] > 0, "allreduce_bandwidth %g", v[0]);
    ck_assert_int_eq(profile_values(json, "allreduce_ranks", v, 8), 1);
    ck_assert_double_eq(v[0], 4);
    /* the cpu backend runs an overlapped pair's jobs in turn: overlap 1 */
    ck_assert_int_eq(profile_values(json, "overlap", v, 8), 1);
    ck_assert_double_eq(v[0], 1);
    /* what the steps after the warm-up took: each rank's busy and idle
     * time within the step, and the idle share */
    double took[1], busy[8], idle[8], bubble[1];
    ck_assert_int_eq(profile_values(json, "steps", took, 1), 1);
    ck_assert_double_eq(took[0], 1);
    ck_assert_int_eq(profile_values(json, "step", took, 1), 1);
    ck_assert_int_eq(profile_values(json, "busy", busy, 8), 4);
    ck_assert_int_eq(profile_values(json, "idle", idle, 8), 4);
    ck_assert_int_eq(profile_values(json, "bubble", bubble, 1), 1);
    double sum = 0;
    for (int r = 0; r < 4; r++) {
        ck_assert_double_eq_tol(busy[r] + idle[r], took[0], 1e-6);
        sum += idle[r];
    }
    ck_assert_double_eq_tol(bubble[0], sum / (4 * took[0]), 1e-5);
    /* the cpu backend times its waits: each rank's blocked time and the
     * rest of its own step beside busy ("host", the interpreter's own
     * work), and that per job as a cost */
    double wait[8], host[8];
    ck_assert_int_eq(profile_values(json, "wait", wait, 8), 4);
    ck_assert_int_eq(profile_values(json, "host", host, 8), 4);
    for (int r = 0; r < 4; r++) {
        ck_assert_msg(wait[r] >= 0 && wait[r] <= idle[r] + 1e-6, "rank %d waited %g s, idle %g s",
                      r, wait[r], idle[r]);
        ck_assert_msg(busy[r] + wait[r] + host[r] <= took[0] + 1e-6,
                      "rank %d: busy %g + wait %g + host %g s past the step's %g s", r, busy[r],
                      wait[r], host[r], took[0]);
    }
    ck_assert_int_eq(profile_values(json, "job_overhead", v, 8), 1);
    ck_assert_msg(v[0] >= 0 && v[0] < took[0], "job_overhead %g s, step %g s", v[0], took[0]);
    /* how late a waiting receiver resumes (0 or more: spinning ranks
     * resume at once), and where the 4 ranks outnumber the cores, those
     * cores as "cores" */
    const char *wake = strstr(json, "\"wake\": ");
    ck_assert_msg(wake && strtod(wake + 8, NULL) >= 0 && strtod(wake + 8, NULL) < took[0],
                  "no \"wake\" in [0, step) in:\n%s", json);
    long ncores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *cores = strstr(json, "\"cores\": ");
    if (ncores < 4)
        ck_assert_msg(cores && atol(cores + 9) == ncores, "no \"cores\": %ld (4 ranks) in:\n%s",
                      ncores, json);
    else
        ck_assert_msg(!cores, "\"cores\" with a core per rank in:\n%s", json);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/zb-h1.pp -D S=4 -D B=8 -o %s/q -q --costs %s/c.json"
             " && cat %s/q/report.txt",
             PP_ROOT, PP_ROOT, dir, dir, dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "--costs ") && strstr(out, "c.json"), "%s", out);
    ck_assert_msg(strstr(out, "\nallreduce ") && strstr(out, "as measured over 4 ranks"),
                  "no measured all-reduce line in:\n%s", out);
    /* its step: the makespan, then the optimizer steps at least */
    double makespan = atof(strstr(out, "makespan  ") + 10), step = atof(strstr(out, "\nstep ") + 6);
    ck_assert_msg(step > makespan, "step %g, makespan %g\n%s", step, makespan, out);
    free(out);
    free(json);
    /* one rank: nothing moves, so no link figures; no W without a split backward */
    remove_dir(dir);
    dir = compile_plan("gpipe.pp", "-D S=1 -D B=2");
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 1 --quiet --profile %s/c.json", dir,
             dir);
    free(mpi_ok(1, cmd));
    snprintf(cmd, sizeof cmd,
             "cat %s/c.json && %s/bin/ppc %s/schedules/gpipe.pp -D S=1 -D B=2 -o %s/q -q"
             " --costs %s/c.json",
             dir, PP_ROOT, PP_ROOT, dir, dir);
    json = run_expect(cmd, 0);
    ck_assert_int_eq(profile_values(json, "F", v, 8), 1);
    ck_assert_int_eq(profile_values(json, "B", v, 8), 1);
    ck_assert_int_eq(profile_values(json, "O", v, 8), 1);
    ck_assert_ptr_null(strstr(json, "\"W\""));
    ck_assert_ptr_null(strstr(json, "latency"));
    ck_assert_int_eq(profile_values(json, "busy", busy, 8), 1); /* one step: it is measured */
    ck_assert_int_eq(profile_values(json, "job_overhead", v, 8), 1);
    free(json);
    remove_dir(dir);
}
END_TEST

/* FSDP returns each stage's gradients to its owner, who adds them:
 * --profile's "G" times that add per stage (after its wait), ppc --costs
 * prices each return's with it; under --deterministic the owner sums in
 * its optimizer step instead, and there is no "G". */
START_TEST(profile_times_gradient_adds)
{
    char *dir = compile_plan("fsdp.pp", "-D S=2 -D B=2"), cmd[4096], *json;
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --quiet --profile %s/c.json", dir,
             dir);
    free(mpi_ok(2, cmd));
    snprintf(cmd, sizeof cmd,
             "cat %s/c.json && %s/bin/ppc %s/schedules/fsdp.pp -D S=2 -D B=2 -o %s/q -q"
             " --costs %s/c.json",
             dir, PP_ROOT, PP_ROOT, dir, dir);
    json = run_expect(cmd, 0);
    double g[4];
    ck_assert_int_eq(profile_values(json, "G", g, 4), 2);
    ck_assert_msg(g[0] > 0 && g[1] > 0 && g[0] < 0.1 && g[1] < 0.1, "G %g, %g s:\n%s", g[0], g[1],
                  json);
    free(json);
    snprintf(cmd, sizeof cmd,
             "--backend cpu %s/plan --steps 2 --quiet --deterministic --profile %s/d.json", dir,
             dir);
    free(mpi_ok(2, cmd));
    snprintf(cmd, sizeof cmd, "cat %s/d.json", dir);
    json = run_expect(cmd, 0);
    ck_assert_msg(!strstr(json, "\"G\"") && strstr(json, "\"O\""), "%s", json);
    free(json);
    remove_dir(dir);
}
END_TEST

/* ppvm --profile measures offload's host link (issue 26): "host_bandwidth"
 * in bytes per second, at the plan's own offload size (a plan without
 * offload: a stash), which ppc --costs then prices each copy with. */
START_TEST(profile_measures_the_host_link)
{
    char *dir = compile_plan("1f1b-offload.pp", "-D S=4 -D B=8"), cmd[4096], *out, *json;
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 2 --quiet --profile %s/c.json", dir,
             dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "cat %s/c.json", dir);
    json = run_expect(cmd, 0);
    double hb[2];
    ck_assert_msg(profile_values(json, "host_bandwidth", hb, 2) == 1,
                  "no \"host_bandwidth\" in the profile:\n%s", json);
    /* a memcpy of 48.7 KiB: slower than 10 MB/s or faster than 10 TB/s is
     * no measurement of it */
    ck_assert_msg(hb[0] > 1e7 && hb[0] < 1e13, "host_bandwidth %g bytes/s", hb[0]);
    free(json);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/1f1b-offload.pp -D S=4 -D B=8 -o %s/q -q --costs %s/c.json"
             " && cat %s/q/report.txt %s/q/report.json %s/q/trace.json",
             PP_ROOT, PP_ROOT, dir, dir, dir, dir, dir);
    out = run_expect(cmd, 0);
    char want[128];
    snprintf(want, sizeof want, "host-copy lane, bytes / %g bytes per time unit", hb[0]);
    ck_assert_msg(strstr(out, want), "no '%s' in the report:\n%.2000s", want, out);
    const char *rj = strstr(out, "\"host_bandwidth\": ");
    ck_assert_msg(rj, "no \"host_bandwidth\" in report.json");
    ck_assert_double_eq_tol(atof(rj + 18), hb[0], hb[0] * 1e-6);
    /* the copies take time in the simulation: stash bytes / host_bandwidth */
    const char *ev = strstr(out, "\"name\":\"offload (s=0,b=0)\""), *dur;
    ck_assert_msg(ev && (dur = strstr(ev, "\"dur\":")), "no offload copy in trace.json");
    double us = atof(dur + 6);
    ck_assert_msg(us > 0 && us < 1e6, "offload (s=0,b=0) takes %g us", us);
    ck_assert_msg(strstr(out, "\"name\":\"reload (s=0,b=0)\""), "no reload copy in trace.json");
    free(out);
    remove_dir(dir);
    /* without offload the probe moves a stash: the figure is still written */
    dir = compile_plan("1f1b.pp", "-D S=2 -D B=2");
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 1 --quiet --profile %s/c.json", dir,
             dir);
    free(mpi_ok(2, cmd));
    snprintf(cmd, sizeof cmd, "cat %s/c.json", dir);
    json = run_expect(cmd, 0);
    ck_assert_msg(profile_values(json, "host_bandwidth", hb, 2) == 1,
                  "no \"host_bandwidth\" without offload:\n%s", json);
    free(json);
    remove_dir(dir);
}
END_TEST

START_TEST(profile_errors)
{
    char *dir = compile_plan("gpipe.pp", "-D S=4 -D B=4"), cmd[2048];
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 1 --profile /nonexistent/c.json", dir);
    mpi_fails_with(4, cmd,
                   "ppvm: --profile /nonexistent/c.json: cannot write: No such file or directory");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/plan --profile %s/c.json", PP_ROOT, dir,
             dir);
    fails_with(cmd, "--profile times the ranks of a plan's run; it does not go with --reference");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --backend cpu %s/plan --profile", PP_ROOT, dir);
    fails_with(cmd, "--profile needs a value");
    remove_dir(dir);
}
END_TEST

/* A plan that passes the format's checks but would make the VM read or
 * write out of bounds: every rank exits with what is wrong. Rank 1's
 * plan is edited and rewritten (with a fresh checksum). */
static void vm_refuses(void (*edit)(pp_plan *), const char *message)
{
    char *dir = compile_plan("gpipe.pp", "-D S=4 -D B=4"), path[1024], err[512], cmd[2048];
    snprintf(path, sizeof path, "%s/plan/rank1.bin", dir);
    pp_plan p;
    ck_assert_msg(pp_plan_read(path, &p, err, sizeof err) == PP_PLAN_OK, "%s", err);
    edit(&p);
    ck_assert_msg(pp_plan_write(&p, path, err, sizeof err) == PP_PLAN_OK, "%s", err);
    pp_plan_free(&p);
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 1", dir);
    mpi_fails_with(4, cmd, message);
    remove_dir(dir);
}

static void shrink_workspace(pp_plan *p) { p->workspace_bytes = 16; }

static int first_forward(const pp_plan *p)
{
    for (uint32_t i = 0; i < p->ninstr; i++)
        if (p->code[i].op == PP_OP_Forward)
            return (int)i;
    ck_abort_msg("no Forward in the plan");
    return -1;
}

static void shrink_stash(pp_plan *p) { p->slot_bytes[p->code[first_forward(p)].slot[1]] = 16; }

static void foreign_stage(pp_plan *p) { p->code[first_forward(p)].stage = 3; }

static void huge_workspace(pp_plan *p) { p->workspace_bytes = 0xffffffffffffffe0ull; }

static void huge_slot(pp_plan *p) { p->slot_bytes[0] = 0xfffffffffffffff0ull; }

START_TEST(plans_the_vm_refuses)
{
    vm_refuses(shrink_workspace, "rank1.bin: instruction 1 (Forward): the workspace holds 16 "
                                 "bytes but stage 1 needs 32768 for this model");
    vm_refuses(shrink_stash, "holds 16 bytes but its role 'stash' needs");
    vm_refuses(foreign_stage, "instruction 1 (Forward): stage 3 is not held by this rank");
    /* sizes whose rounding up to 64 bytes would wrap to a tiny buffer */
    vm_refuses(huge_workspace, "the workspace is 18446744073709551584 bytes, more than one "
                               "buffer can be");
    vm_refuses(huge_slot, "slot s0 is 18446744073709551600 bytes, more than one buffer can be");
}
END_TEST

START_TEST(bad_flags)
{
    char cmd[2048], *x = temp_dir(); /* -o: never written, but never shared either */
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --steps many x", PP_ROOT);
    fails_with(cmd, "--steps many: expected an integer");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --lr -1 x", PP_ROOT);
    fails_with(cmd, "--lr -1: expected a number");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --weight-decay -0.5 x", PP_ROOT);
    fails_with(cmd, "--weight-decay -0.5: expected a number in [0, 1000]");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --adam-eps 0 x", PP_ROOT);
    fails_with(cmd, "--adam-eps 0: expected a number in [1e-30, 1]");
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --warmup 2.5 x", PP_ROOT);
    fails_with(cmd, "--warmup 2.5: expected");
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/gpipe.pp -o %s/x -D S", PP_ROOT, PP_ROOT, x);
    fails_with(cmd, "expected NAME=VALUE");
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/gpipe.pp -o %s/x -D Q=1", PP_ROOT, PP_ROOT,
             x);
    fails_with(cmd, "the schedule has no param 'Q'");
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/gpipe.pp -o %s/x --prefetch -2", PP_ROOT,
             PP_ROOT, x);
    fails_with(cmd, "--prefetch expects a number of jobs from 0 to 1000000, found '-2'");
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/gpipe.pp -o %s/x --mem-limit lots", PP_ROOT,
             PP_ROOT, x);
    fails_with(cmd, "--mem-limit expects a number of bytes (a non-negative integer, or with KiB, "
                    "MiB, GiB (1024-based) or KB, MB, GB (1000-based)), found 'lots'");
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2");
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --data /nonexistent", dir);
    mpi_fails_with(2, cmd, "cannot open data file '/nonexistent'");
    remove_dir(dir);
    remove_dir(x);
}
END_TEST

/* The harness never lies about what failed (testutil.c's mpi_run): with a
 * stand-in mpirun (PP_TEST_MPIRUN) that runs the real one and then exits 1
 * as Open MPI sometimes does at exit, a run is repeated once and passes;
 * failing at exit twice is said to be that, not a test failure; a rank's
 * own failure names the rank and its status; a hung launcher is killed at
 * its limit and said to be. */
static void fake_mpirun(const char *dir, int fails, const char *before)
{
    char path[1024], env[1100];
    snprintf(path, sizeof path, "%s/mpirun.sh", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "#!/bin/sh\n%s\nmpirun --oversubscribe --allow-run-as-root --bind-to none \"$@\"\n"
            "rc=$?\nn=$(cat %s/count 2>/dev/null || echo 0)\necho $((n + 1)) > %s/count\n"
            "if [ $n -lt %d ]; then echo 'fake: ORTE failed at exit'; exit 1; fi\nexit $rc\n",
            before, dir, dir, fails);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(path, 0755), 0);
    snprintf(env, sizeof env, "%s/count", dir);
    unlink(env);
    setenv("PP_TEST_MPIRUN", path, 1);
}

static int runs_of(const char *dir)
{
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd, "cat %s/count", dir);
    out = run_expect(cmd, 0);
    int n = atoi(out);
    free(out);
    return n;
}

START_TEST(launcher_failures_told_apart)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), args[2048], *out, *why;
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 1", dir);
    /* fails at exit once: run again, passes, and says so on stdout (here
     * into a file, to be read back) */
    fake_mpirun(dir, 1, "");
    char note[1024];
    snprintf(note, sizeof note, "%s/note", dir);
    fflush(stdout);
    int saved = dup(1), fd = open(note, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 1);
    close(fd);
    int rc = mpi_run(2, args, &out, &why);
    ck_assert_msg(rc == 0, "a launcher failure after success was not run again: %s", rc ? why : "");
    ck_assert_int_eq(runs_of(dir), 2);
    free(out);
    /* twice: a failure of mpirun that repeats, never told as the test's */
    fake_mpirun(dir, 2, "");
    rc = mpi_run(2, args, &out, &why);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(runs_of(dir), 2);
    ck_assert_msg(strstr(why, "mpirun exited with status 1 although every rank had exited 0") &&
                      strstr(why, "a failure of mpirun that repeats") &&
                      strstr(why, "fake: ORTE failed at exit"),
                  "%s", why);
    free(out);
    free(why);
    snprintf(args, sizeof args, "cat %s", note);
    out = run_expect(args, 0);
    ck_assert_msg(strstr(out, "note: mpirun exited with status 1 although every rank exited 0 "
                              "(Open MPI failing at exit, not the test); running it once more") &&
                      strstr(out, "fake: ORTE failed at exit"),
                  "%s", out);
    free(out);
    /* a rank that fails is not run again, and is named */
    fake_mpirun(dir, 0, "");
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 1 --data /nonexistent", dir);
    ck_assert_int_ne(mpi_run(2, args, &out, &why), 0);
    ck_assert_int_eq(runs_of(dir), 1);
    ck_assert_msg(strstr(why, "rank 0 exited with status 1") &&
                      strstr(why, "rank 1 exited with status 1") &&
                      strstr(why, "mpirun exited with status 1") &&
                      strstr(why, "cannot open data file '/nonexistent'"),
                  "%s", why);
    free(out);
    free(why);
    /* a launcher that hangs is killed at the limit, and said to be */
    fake_mpirun(dir, 0, "sleep 60");
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 1", dir);
    ck_assert_int_eq(mpi_run_within(2, args, 2, &out, &why), 124);
    ck_assert_msg(strstr(why, "did not finish within") && strstr(why, "ranks 0, 1 never reported"),
                  "%s", why);
    free(out);
    free(why);
    unsetenv("PP_TEST_MPIRUN");
    remove_dir(dir);
}
END_TEST

/* Every test, with the most ranks it runs at once. Each is a TCase of its
 * own, named after it, so that check_pp can run several at a time
 * (check_main.c); the list is roughly longest first, which is the order
 * they start in. */
#define E2E_TESTS(X)                                                                               \
    X(gpt_pipelines_4_ranks, 4)                                                                    \
    X(gpt_looped_4_ranks, 4)                                                                       \
    X(gpt_state_of_the_art, 4)                                                                     \
    X(gpt_data_parallel_4_ranks, 4)                                                                \
    X(blocks_per_stage_train_alike, 4)                                                             \
    X(large_activations_train_alike, 2)                                                            \
    X(gpt_variants_4_ranks, 4)                                                                     \
    X(bf16_trains_like_reference, 4)                                                               \
    X(adamw_trains_like_reference, 4)                                                              \
    X(vm_allocates_what_the_report_says, 4)                                                        \
    X(plans_the_vm_refuses, 4)                                                                     \
    X(kept_weights_train_alike, 4)                                                                 \
    X(bad_flags, 2)                                                                                \
    X(exit_statuses, 2)                                                                            \
    X(weightless_stages_train_alike, 4)                                                            \
    X(world_size_mismatch, 5)                                                                      \
    X(prefetch_windows_train_alike, 4)                                                             \
    X(bf16_loss_tracks_fp32, 2)                                                                    \
    X(interleaved_4_ranks, 4)                                                                      \
    X(zb_h1_4_ranks, 4)                                                                            \
    X(pp_dp_4_ranks, 4)                                                                            \
    X(pp_fsdp_4_ranks, 4)                                                                          \
    X(zb_v_2_ranks, 2)                                                                             \
    X(zb_h2_3_ranks, 3)                                                                            \
    X(dualpipev_2_ranks, 2)                                                                        \
    X(interleaved_zb_2_ranks, 2)                                                                   \
    X(looped_bfs_2_ranks, 2)                                                                       \
    X(interleaved_any_b_2_ranks, 2)                                                                \
    X(fsdp_4_ranks, 4)                                                                             \
    X(breadth_first_4_ranks, 4)                                                                    \
    X(depth_first_4_ranks, 4)                                                                      \
    X(fslpp_4_ranks, 4)                                                                            \
    X(lpp_4_ranks, 4)                                                                              \
    X(one_f_one_b_greedy_4_ranks, 4)                                                               \
    X(gpipe_4_ranks, 4)                                                                            \
    X(profile_feeds_the_simulator, 4)                                                              \
    X(profile_times_gradient_adds, 2)                                                              \
    X(one_f_one_b_4_ranks, 4)                                                                      \
    X(ddp_4_ranks, 4)                                                                              \
    X(profile_errors, 4)                                                                           \
    X(profile_measures_the_host_link, 4)                                                           \
    X(truncated_rank_file, 4)                                                                      \
    X(mixed_plan_ids, 4)                                                                           \
    X(loss_falls, 2)                                                                               \
    X(token_shards, 2)                                                                             \
    X(initial_weights_saved, 2)                                                                    \
    X(launcher_failures_told_apart, 2)                                                             \
    X(compare_tolerances, 1)                                                                       \
    X(reference_out_of_memory, 1)

PP_JOB_SUITE(e2e, E2E_TESTS)
