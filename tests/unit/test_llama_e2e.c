/* test_llama_e2e.c - the llama model trained by every library schedule
 * under mpirun to the reference's weights (ppvm --reference, --compare),
 * as test_e2e.c does for the GPT: pipelines bit for bit, the data-parallel
 * and sharded schedules within --compare's default tolerance; grouped-query
 * attention (kv_heads < heads), lighter end stages, a stage of no layers
 * under a split backward, bf16 with AdamW; tied embeddings (tie = 1, gpt
 * and llama) under pipelines, ZB-V (both tied stages on one worker), DDP,
 * FSDP and PP x DP, ending with the two copies equal bit for bit; and the
 * schedule checker's errors for a bad llama block. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

static const char *const llama_model =
    "model llama { vocab = 256; context = 16; embed = 32; heads = 4; kv_heads = 2; ffn = 64\n"
    "              batch = 4; layers = s == 0 || s == S - 1 ? 1 : 2; rope_theta = 10000\n"
    "              norm_eps = 1e-5 }";

/* The fp32 weights of DIR/stage<s>.w (vm/README.md, "Weight files"): n
 * floats, malloc'd. */
static float *read_stage(const char *dir, int s, size_t *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/stage%d.w", dir, s);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    unsigned char head[36];
    ck_assert_msg(fread(head, 1, sizeof head, f) == sizeof head, "%s: short header", path);
    uint64_t count = 0;
    for (int i = 7; i >= 0; i--)
        count = count << 8 | head[24 + i];
    float *w = malloc(count * sizeof *w + 1);
    ck_assert_msg(w && fread(w, sizeof *w, count, f) == count, "%s: short data", path);
    fclose(f);
    *n = count;
    return w;
}

/* After training, stage 0's token embedding and stage S-1's head, the tied
 * tensor's two copies, are equal: both stepped on the same summed
 * gradient (their own gradients differ, so without the sum they part). */
static void tied_copies_equal(const char *wdir, int S, int V, int C, const char *what)
{
    size_t n0, n1;
    float *w0 = read_stage(wdir, 0, &n0), *w1 = read_stage(wdir, S - 1, &n1);
    size_t VC = (size_t)V * C;
    ck_assert_msg(n0 >= VC && n1 >= VC, "%s: stages too small", what);
    ck_assert_msg(memcmp(w0, w1 + n1 - VC, VC * sizeof(float)) == 0,
                  "%s: stage 0's embedding and stage %d's head differ after training", what, S - 1);
    free(w0);
    free(w1);
}

/* test_e2e.c's trains_like_reference_within: three steps each way, then
 * --compare with the given tolerance flags. tied_S > 0: a tied model of
 * tied_S stages, vocab 256, embed 32, whose copies must end equal. */
static void trains_alike_tied(const char *schedule, const char *model, const char *defs, int np,
                              const char *tolerance, int tied_S);

static void llama_trains_alike(const char *schedule, const char *model, const char *defs, int np,
                               const char *tolerance)
{
    trains_alike_tied(schedule, model, defs, np, tolerance, 0);
}

static void trains_alike_tied(const char *schedule, const char *model, const char *defs, int np,
                              const char *tolerance, int tied_S)
{
    char *path = with_model(schedule, model);
    char *dir = compile_plan(path, defs), *out, *why, cmd[4096];
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --save %s/w --quiet", dir, dir);
    if (mpi_run(np, cmd, &out, &why))
        ck_abort_msg("llama %s %s: training under mpirun failed: %s", schedule, defs, why);
    free(out);
    proc_result r;
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/plan --steps 3 --save %s/ref --quiet",
             PP_ROOT, dir, dir);
    if (run_proc(cmd, CMD_TIMEOUT, &r))
        ck_abort_msg("llama %s %s: the reference run failed: %s\n  it %s", schedule, defs, cmd,
                     proc_story(&r, 20));
    proc_free(&r);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref %s", PP_ROOT, dir, dir, tolerance);
    run_proc(cmd, CMD_TIMEOUT, &r);
    if (r.status != 0 || !strstr(r.out, "within tolerance") || strstr(r.out, "beyond"))
        ck_abort_msg("%s %s: weights differ from the reference (%s):\n%s", schedule, defs, cmd,
                     r.out);
    proc_free(&r);
    if (tied_S) {
        char w[4096];
        snprintf(w, sizeof w, "%s/w", dir);
        tied_copies_equal(w, tied_S, 256, 32, schedule);
        snprintf(w, sizeof w, "%s/ref", dir);
        tied_copies_equal(w, tied_S, 256, 32, "the reference");
    }
    remove_dir(dir);
    remove_schedule(path);
}

#define EXACT "--atol 0 --rtol 0"

START_TEST(llama_pipelines_4_ranks)
{
    llama_trains_alike("gpipe.pp", llama_model, "-D S=4 -D B=4", 4, EXACT);
    llama_trains_alike("1f1b.pp", llama_model, "-D S=4 -D B=8", 4, EXACT);
    llama_trains_alike("1f1b-greedy.pp", llama_model, "-D S=4 -D B=8", 4, EXACT);
    llama_trains_alike("zb-h1.pp", llama_model, "-D S=4 -D B=8", 4, EXACT);
    llama_trains_alike("interleaved-1f1b.pp", llama_model, "-D W=4 -D V=2 -D B=8", 4, EXACT);
    llama_trains_alike("breadth-first.pp", llama_model, "-D W=4 -D S=8 -D B=4", 4, EXACT);
    llama_trains_alike("depth-first.pp", llama_model, "-D W=4 -D S=8 -D B=4", 4, EXACT);
}
END_TEST

START_TEST(llama_data_parallel_4_ranks)
{
    llama_trains_alike("ddp.pp", llama_model, "-D S=4 -D B=4", 4, "");
    llama_trains_alike("fsdp.pp", llama_model, "-D S=4 -D B=4", 4, "");
    llama_trains_alike("lpp.pp", llama_model, "-D S=4 -D B=4 -D G=2 -D R=2", 4, "");
    llama_trains_alike("fslpp.pp", llama_model, "-D S=4 -D B=8 -D G=2 -D R=2", 4, "");
    llama_trains_alike("pp-dp.pp", llama_model, "-D S=2 -D D=2 -D B=4", 4, "");
    llama_trains_alike("pp-fsdp.pp", llama_model, "-D P=2 -D D=2 -D B=4", 4, "");
}
END_TEST

START_TEST(llama_state_of_the_art)
{
    llama_trains_alike("zb-v.pp", llama_model, "-D W=2 -D B=4", 2, "");
    llama_trains_alike("zb-h2.pp", llama_model, "-D S=3 -D B=5", 3, "");
    llama_trains_alike("dualpipev.pp", llama_model, "-D W=2 -D B=5", 2, "");
    llama_trains_alike("interleaved-zb.pp", llama_model, "-D W=2 -D V=2 -D B=4", 2, "");
    llama_trains_alike("looped-bfs.pp", llama_model, "-D W=2 -D V=2 -D B=3", 2, "");
}
END_TEST

/* A split backward with a stage of no layers and multi-query attention;
 * bf16 with AdamW, fused and split, bit for bit (the cpu backend and the
 * reference round and widen the bf16 stash, atty and gu too, at the same
 * places). */
START_TEST(llama_variants_4_ranks)
{
    llama_trains_alike("zb-h1.pp",
                       "model llama { context = 16; embed = 16; heads = 2; kv_heads = 1; ffn = 32\n"
                       "              layers = s == 1 ? 0 : 2; batch = 2 }",
                       "-D S=4 -D B=4", 4, EXACT);
    llama_trains_alike("1f1b.pp", llama_model, "-D S=4 -D B=4 --precision bf16 --optimizer adamw",
                       4, EXACT);
    llama_trains_alike("zb-h1.pp", llama_model, "-D S=4 -D B=4 --precision bf16", 4, EXACT);
}
END_TEST

static const char *const tied_gpt =
    "model gpt { vocab = 256; context = 16; embed = 32; heads = 4; ffn = 64; batch = 4\n"
    "            layers = s == 0 || s == S - 1 ? 1 : 2; tie = 1 }";
static const char *const tied_llama =
    "model llama { vocab = 256; context = 16; embed = 32; heads = 4; kv_heads = 2; ffn = 64\n"
    "              batch = 4; layers = 1; tie = 1 }";

/* tie = 1: pipelines match the tied reference bit for bit; the replicated
 * and sharded schedules within --compare's tolerance; ZB-V and DDP sum the
 * two copies on one worker. */
START_TEST(tied_4_ranks)
{
    trains_alike_tied("1f1b.pp", tied_gpt, "-D S=4 -D B=8", 4, EXACT, 4);
    trains_alike_tied("zb-v.pp", tied_gpt, "-D W=2 -D B=4", 2, EXACT, 4);
    trains_alike_tied("interleaved-1f1b.pp", tied_gpt, "-D W=4 -D V=2 -D B=8", 4, EXACT, 8);
    trains_alike_tied("ddp.pp", tied_gpt, "-D S=4 -D B=4", 4, "", 4);
    trains_alike_tied("fsdp.pp", tied_gpt, "-D S=4 -D B=4", 4, "", 4);
    trains_alike_tied("pp-dp.pp", tied_gpt, "-D S=2 -D D=2 -D B=4", 4, "", 2);
    trains_alike_tied("zb-h1.pp", tied_llama, "-D S=4 -D B=8", 4, EXACT, 4);
    trains_alike_tied("dualpipev.pp", tied_llama, "-D W=2 -D B=5", 2, "", 4);
    trains_alike_tied("1f1b.pp", tied_llama, "-D S=4 -D B=4 --optimizer adamw", 4, "", 4);
}
END_TEST

/* The first n numbers after key in text. */
static void numbers_after(const char *text, const char *key, unsigned long long *v, int n)
{
    const char *p = strstr(text, key);
    ck_assert_msg(p != NULL, "no '%s' in:\n%s", key, text);
    p += strlen(key);
    for (int i = 0; i < n; i++) {
        char *e;
        v[i] = strtoull(p, &e, 10);
        ck_assert_msg(e != p, "'%s': fewer than %d numbers in:\n%s", key, n, text);
        p = e + 1;
    }
}

/* Stage s's weights in DIR: how many (the file's count). */
static size_t stage_count(const char *dir, int s)
{
    size_t n;
    free(read_stage(dir, s, &n));
    return n;
}

/* Trains plan dir/<plan> on np cpu ranks with `args`; the output. */
static char *train(int np, const char *dir, const char *plan, const char *args)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "--backend cpu %s/%s %s", dir, plan, args);
    return mpi_ok(np, cmd);
}

static void same_weights(const char *a, const char *b, const char *what)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s %s " EXACT, PP_ROOT, a, b);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "within tolerance") && !strstr(out, "beyond"),
                  "%s: the weights differ (%s):\n%s", what, cmd, out);
    free(out);
}

/* ZB-V puts stage 0 and stage 3 on worker 0, which stores the tied
 * embedding once (isa/tied.h), with AdamW and bf16 so that every stored
 * part counts: the report's weights, moments and bf16 copy count it once,
 * ppvm allocates what the report says, the plan sums the two gradients
 * with one local add (no transfer), training matches the reference bit
 * for bit, and a checkpoint holds the tied weights once (stage 3's files
 * stop before its head) and resumes, on the same plan and resharded
 * between ZB-V and 1F1B (two copies) either way, to the same bits. */
START_TEST(tied_stored_once)
{
    const char *opt = "--optimizer adamw --precision bf16";
    char *zbv = with_model("zb-v.pp", tied_gpt), *f1b = with_model("1f1b.pp", tied_gpt);
    char *dir = temp_dir(), cmd[8192], p[4096];
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -D W=2 -D B=4 %s -o %s/zbv -q && %s/bin/ppc %s -D S=4 "
             "-D B=4 %s -o %s/f1b -q",
             PP_ROOT, zbv, opt, dir, PP_ROOT, f1b, opt, dir);
    free(run_expect(cmd, 0));

    /* the plan: one local add on worker 0, no tied transfer anywhere */
    snprintf(cmd, sizeof cmd, "cat %s/zbv/rank0.txt", dir);
    char *lst = run_expect(cmd, 0);
    const char *a = strstr(lst, " StashTiedGrad "), *b = strstr(lst, " AddTiedGrad ");
    ck_assert_msg(a && b && !strstr(a + 1, " StashTiedGrad ") && !strstr(b + 1, " AddTiedGrad ") &&
                      !strstr(lst, "SendTiedGrad") && !strstr(lst, "RecvTiedGrad"),
                  "worker 0 of ZB-V: expected one StashTiedGrad and one AddTiedGrad, no "
                  "transfer:\n%s",
                  lst);
    free(lst);

    /* training: the reference's bits, and the report's memory is ppvm's */
    snprintf(p, sizeof p, "--steps 4 --save %s/full", dir);
    char *out = train(2, dir, "zbv", p);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/zbv --steps 4 --save %s/ref --quiet",
             PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    snprintf(p, sizeof p, "%s/full", dir);
    snprintf(cmd, sizeof cmd, "%s/ref", dir);
    same_weights(p, cmd, "ZB-V tied against the reference");
    tied_copies_equal(p, 4, 256, 32, "ZB-V tied");
    unsigned long long vm[2], mem[2], wst[2], ost[2], cst[2];
    snprintf(cmd, sizeof cmd, "cat %s/zbv/report.json", dir);
    char *json = run_expect(cmd, 0);
    numbers_after(out, "memory allocated at start-up, bytes per rank:", vm, 2);
    numbers_after(json, "\"mem_bytes\": [", mem, 2);
    numbers_after(json, "\"weight_store_bytes\": [", wst, 2);
    numbers_after(json, "\"opt_store_bytes\": [", ost, 2);
    numbers_after(json, "\"copy_store_bytes\": [", cst, 2);
    free(json);
    free(out);
    unsigned long long n0 = stage_count(p, 0), n3 = stage_count(p, 3), VC = 256 * 32;
    for (int r = 0; r < 2; r++)
        ck_assert_msg(vm[r] == mem[r], "rank %d: ppvm allocates %llu bytes, the report says %llu",
                      r, vm[r], mem[r]);
    ck_assert_msg(wst[0] == 4 * (n0 + n3 - VC) && ost[0] == 2 * wst[0] && cst[0] == wst[0] / 2,
                  "worker 0 (stages 0 and 3, %llu and %llu weights, tied %llu): the report holds "
                  "%llu bytes of weights, %llu of moments, %llu of bf16 copy (expected the tied "
                  "embedding once: %llu, %llu, %llu)",
                  n0, n3, VC, wst[0], ost[0], cst[0], 4 * (n0 + n3 - VC), 8 * (n0 + n3 - VC),
                  2 * (n0 + n3 - VC));

    /* a checkpoint after 2 steps holds stage 3 without its head */
    snprintf(p, sizeof p, "--steps 2 --checkpoint-dir %s/ck --checkpoint-every 2 --quiet", dir);
    free(train(2, dir, "zbv", p));
    snprintf(p, sizeof p, "%s/ck/step-000002", dir);
    ck_assert_msg(
        stage_count(p, 3) == n3 - VC && stage_count(p, 0) == n0,
        "the checkpoint's stage 3 holds %zu weights, stage 0 %zu (expected %llu and %llu: "
        "the tied embedding once)",
        stage_count(p, 3), stage_count(p, 0), n3 - VC, n0);
    snprintf(p, sizeof p, "%s/full", dir);
    static const struct {
        const char *plan, *resume, *extra, *what;
        int np;
    } runs[] = {
        {"zbv", "ck", "", "ZB-V resumed", 2},
        {"f1b", "ck", "--reshard", "ZB-V's checkpoint resumed by 1F1B", 4},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char args[4096], w[4096];
        snprintf(args, sizeof args, "--steps 4 --resume %s/%s %s --save %s/r%zu --quiet", dir,
                 runs[i].resume, runs[i].extra, dir, i);
        free(train(runs[i].np, dir, runs[i].plan, args));
        snprintf(w, sizeof w, "%s/r%zu", dir, i);
        same_weights(w, p, runs[i].what);
    }
    /* and back: 1F1B's checkpoint (two copies) resumed by ZB-V (one) */
    snprintf(cmd, sizeof cmd, "--steps 2 --checkpoint-dir %s/ck2 --checkpoint-every 2 --quiet",
             dir);
    free(train(4, dir, "f1b", cmd));
    snprintf(cmd, sizeof cmd, "--steps 4 --resume %s/ck2 --reshard --save %s/r9 --quiet", dir, dir);
    free(train(2, dir, "zbv", cmd));
    snprintf(cmd, sizeof cmd, "%s/r9", dir);
    same_weights(cmd, p, "1F1B's checkpoint resumed by ZB-V");
    remove_dir(dir);
    remove_schedule(zbv);
    remove_schedule(f1b);
}
END_TEST

/* What the schedule checker says about a bad llama block. */
START_TEST(llama_model_errors)
{
    static const struct {
        const char *model, *says;
    } bad[] = {
        {"model llama { heads = 4; kv_heads = 3 }", "kv_heads = 3 does not divide heads = 4"},
        {"model llama { embed = 12; heads = 4 }", "which is odd"},
        {"model llama { norm_eps = 5 }", "norm_eps takes a decimal number"},
        {"model llama { norm_eps = 2.5 }", "norm_eps = 2.5 is out of range"},
        {"model llama { embed = 1.5 }", "'embed' takes an integer expression"},
        {"model llama { kv = 1 }", "unknown llama model field 'kv'"},
        {"model gpt { norm_eps = 1e-5 }", "unknown gpt model field 'norm_eps'"},
        {"model gpt { tie = 2 }", "tie = 2 is out of range [0, 1]"},
        {"model gpt { tie = 1 }", "needs S >= 2 stages (S is 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *path = with_model("gpipe.pp", bad[i].model), *dir = temp_dir(), cmd[4096];
        snprintf(cmd, sizeof cmd, "%s/bin/ppc %s -D S=%d -D B=2 -o %s/plan", PP_ROOT, path,
                 strstr(bad[i].says, "S >= 2") ? 1 : 2, dir);
        proc_result r;
        run_proc(cmd, CMD_TIMEOUT, &r);
        ck_assert_msg(r.status == 1 && strstr(r.out, bad[i].says) && strstr(r.out, ":"),
                      "%s: expected exit 1 saying '%s'; it %s", bad[i].model, bad[i].says,
                      proc_story(&r, 10));
        proc_free(&r);
        remove_schedule(path);
        remove_dir(dir);
    }
}
END_TEST

#define LLAMA_E2E_TESTS(X)                                                                         \
    X(llama_pipelines_4_ranks, 4)                                                                  \
    X(llama_data_parallel_4_ranks, 4)                                                              \
    X(llama_state_of_the_art, 4)                                                                   \
    X(llama_variants_4_ranks, 4)                                                                   \
    X(tied_4_ranks, 4)                                                                             \
    X(tied_stored_once, 4)                                                                         \
    X(llama_model_errors, 1)

PP_JOB_SUITE(llama_e2e, LLAMA_E2E_TESTS)
