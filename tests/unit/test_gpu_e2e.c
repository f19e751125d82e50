/* test_gpu_e2e.c - the cuda backend end to end: ppvm --backend cuda trains a
 * library schedule for 3 steps and must end with the CPU reference's weights
 * (|a - b| <= 1e-4 + 1e-3 |b|: the GPU sums in other orders) and allocate
 * what the cpu backend allocates (the plan's memory, to the byte).
 *
 * Everywhere: the --backend / --transport flag errors, and, without a GPU,
 * --backend cuda failing fast with a message on every rank. With a GPU: one
 * rank on both transports, four ranks on one GPU with --transport mpi, and
 * four ranks with nccl where there are four GPUs (else a message telling to
 * use --transport mpi); the same in bf16 mixed precision; the gpt model; a
 * schedule that splits only some backwards; bad numbers (the non-finite
 * check and PP_INJECT_NAN), --skip-nonfinite and --deterministic, as the
 * cpu backend has them (the TCase "numbers"). Tests that need a GPU print
 * "skipped: no GPU" and pass without one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "suites.h"
#include "testutil.h"

/* each mpirun's limit, before CK_TIMEOUT_MULTIPLIER (the first CUDA and
 * NCCL calls of a process are slow) */
#define GPU_MPIRUN_TIMEOUT 300

static int gpu_count(void)
{
#ifdef PP_HAVE_CUDA
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
    return 0;
#endif
}

/* cmd (not mpirun) exits with `want` and prints message. */
static void fails_with(const char *cmd, int want, const char *message)
{
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(r.status == want && !r.timed_out, "expected %s to exit with status %d; it %s",
                  cmd, want, proc_story(&r, 20));
    ck_assert_msg(strstr(r.out, message) != NULL, "expected '%s' in the output of %s:\n%s", message,
                  cmd, r.out);
    proc_free(&r);
}

/* mpirun -np np ppvm args: every rank that reported exited with `want`
 * (any non-zero when want < 0), at least one did, and message is printed.
 * A rank may not report: once one rank exits non-zero, mpirun ends the
 * others, and a rank still starting up is killed before it can. */
static void ranks_fail_with(int np, const char *args, int want, const char *message)
{
    char *out, *why;
    ck_assert_msg(mpi_run_within(np, args, GPU_MPIRUN_TIMEOUT, &out, &why) != 0,
                  "expected ppvm %s to fail on %d ranks with '%s'; every rank exited 0:\n%s", args,
                  np, message, last_lines(out, 20));
    int st[np], reported = 0;
    rank_statuses(out, np, st);
    for (int r = 0; r < np; r++) {
        reported += st[r] >= 0;
        ck_assert_msg(st[r] < 0 || (want < 0 ? st[r] > 0 : st[r] == want),
                      "expected every rank to exit with %s%d and '%s': %s", want < 0 ? "not " : "",
                      want < 0 ? 0 : want, message, why);
    }
    ck_assert_msg(reported > 0, "expected the ranks to fail with '%s', but none reported: %s",
                  message, why);
    ck_assert_msg(strstr(out, message) != NULL, "expected '%s' in the output: %s", message, why);
    free(out);
    free(why);
}

/* mpirun -np np ppvm args, which must succeed; returns its output. (Not
 * inlined: GCC 12 then takes strstr()s of the result for pointers into the
 * local `out` and warns of dangling pointers.) */
__attribute__((noinline)) static char *gpu_mpi_ok(int np, const char *args)
{
    char *out, *why;
    if (mpi_run_within(np, args, GPU_MPIRUN_TIMEOUT, &out, &why))
        ck_abort_msg("%s", why);
    return out;
}

/* Up to max numbers following `key` in out (one per rank), or 0. */
static int per_rank(const char *out, const char *key, unsigned long long *v, int max)
{
    const char *at = strstr(out, key);
    int n = 0;
    if (!at)
        return 0;
    at += strlen(key);
    for (char *end; n < max; at = end) {
        unsigned long long x = strtoull(at, &end, 10);
        if (end == at || (*at != ' ' && !(*at >= '0' && *at <= '9')))
            break;
        v[n++] = x;
    }
    return n;
}

#define DET_KEY "per-microbatch weight gradients, bytes per rank (in the memory below):"
#define MEM_KEY "memory allocated at start-up, bytes per rank:"

/* The start-up memory a run's plan needs: its memory line less
 * --deterministic's buffers, which differ by backend by design (cuda keeps a
 * host sum per tracked stage beside the device gradients, vm/core.c
 * det_init); the rest, plan slots and model state, must not. "" if none. */
static const char *plan_memory(const char *out, char *buf, size_t len)
{
    unsigned long long mem[64], det[64] = {0};
    int n = per_rank(out, MEM_KEY, mem, 64), nd = per_rank(out, DET_KEY, det, 64);
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%llu", i ? " " : "",
                               mem[i] - (i < nd ? det[i] : 0));
    return buf;
}

/* The per-step losses printed by ppvm, up to max of them. */
static int losses(const char *out, double *loss, int max)
{
    int n = 0;
    for (const char *p = out; n < max && (p = strstr(p, "  loss ")); p += 7)
        loss[n++] = atof(p + 7);
    return n;
}

/* The weights a bf16 run ends with, GPU against the CPU reference. bf16
 * activations cross every stage boundary rounded to bf16 (kernels/README.md,
 * "Mixed precision"); GPU and CPU make each stage's fp32 output in other
 * summation orders (1e-6 relative apart), and where that straddles a bf16
 * rounding boundary the two send activations one bf16 ulp (2^-8 relative)
 * apart. The weights such an activation reaches then differ by a share of
 * that: on the stand-ins 1.43e-4 (gpipe S=4 B=4, mlp) and 1.47e-4 (the
 * Llama's ZB-H1) after 3 steps, beyond fp32's atol 1e-4 (fp32 runs send
 * fp32 and stay within it). atol 5e-4 leaves 3.4 times the worst seen and
 * still sees a lost microbatch: one update of that gpipe run moves some
 * weight of each stage by 1.8e-2 to 8e-2 (step 3 against step 2), so a
 * quarter of one, by 4e-3 to 2e-2. */
#define BF16_WEIGHT_TOL "--atol 5e-4 --rtol 1e-3"

/* Train on the GPU and on the CPU for 3 steps; the GPU's weights must match
 * the reference's, its memory line the cpu backend's, its losses the CPU's.
 * vmflags: extra ppvm flags for all three runs. */
static void gpu_trains_like_cpu_with(const char *schedule, const char *defs, int np,
                                     const char *transport, const char *vmflags)
{
    char *dir = compile_plan(schedule, defs), *cpu, *gpu, cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/plan --backend cpu --steps 3 %s", dir, vmflags);
    cpu = gpu_mpi_ok(np, cmd);
    snprintf(cmd, sizeof cmd,
             "%s/plan --backend cuda --transport %s --steps 3 --timeout 120 --save %s/gpu %s", dir,
             transport, dir, vmflags);
    gpu = gpu_mpi_ok(np, cmd);
    ck_assert_msg(strstr(gpu, "backend cuda, transport") != NULL, "not the cuda backend:\n%s", gpu);

    char a[512], b[512];
    ck_assert_msg(plan_memory(cpu, a, sizeof a)[0] != '\0', "no memory line:\n%s", cpu);
    ck_assert_msg(!strcmp(plan_memory(gpu, b, sizeof b), a),
                  "%s %s (%s): the cuda backend allocates '%s' bytes per rank, the cpu backend "
                  "'%s' (less --deterministic's buffers); the cuda run said:\n%s",
                  schedule, defs, transport, b, a, gpu);

    double lc[3], lg[3];
    ck_assert_int_eq(losses(cpu, lc, 3), 3);
    ck_assert_int_eq(losses(gpu, lg, 3), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(lg[i] > lc[i] - 2e-3 && lg[i] < lc[i] + 2e-3,
                      "%s %s (%s) step %d: loss %.4f on the GPU, %.4f on the CPU", schedule, defs,
                      transport, i + 1, lg[i], lc[i]);

    snprintf(cmd, sizeof cmd,
             "%s/bin/" PPVM " --reference %s/plan --steps 3 --save %s/ref --quiet %s", PP_ROOT, dir,
             dir, vmflags);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --compare %s/gpu %s/ref %s", PP_ROOT, dir, dir,
             strstr(defs, "bf16") ? BF16_WEIGHT_TOL : "--atol 1e-4 --rtol 1e-3");
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    if (r.status == 1 && (strstr(r.out, " beyond atol ") || strstr(r.out, " weights in ")))
        ck_abort_msg("%s %s (%s): weights differ from the reference (%s):\n%s", schedule, defs,
                     transport, cmd, r.out);
    if (r.status != 0 || !strstr(r.out, "within tolerance"))
        ck_abort_msg("%s %s (%s): could not compare the weights: %s\n  it %s", schedule, defs,
                     transport, cmd, proc_story(&r, 20));
    proc_free(&r);
    free(cpu);
    free(gpu);
    remove_dir(dir);
}

static void gpu_trains_like_cpu(const char *schedule, const char *defs, int np,
                                const char *transport)
{
    gpu_trains_like_cpu_with(schedule, defs, np, transport, "");
}

/* ---- everywhere ------------------------------------------------------------------ */

START_TEST(backend_flag_errors)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --backend foo x", PP_ROOT);
    fails_with(cmd, 2, "--backend foo: expected cuda or cpu");
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --transport foo x", PP_ROOT);
    fails_with(cmd, 2, "--transport foo: expected nccl or mpi");
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --backend cpu --transport nccl x", PP_ROOT);
    fails_with(cmd, 2, "--backend cpu --transport nccl");
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --transport nccl --backend cpu x", PP_ROOT);
    fails_with(cmd, 2, "--backend cpu --transport nccl");
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --backend", PP_ROOT);
    fails_with(cmd, 2, "--backend needs a value");
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --epilogues maybe x", PP_ROOT);
    fails_with(cmd, 2, "--epilogues maybe: expected on or off");
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --epilogues", PP_ROOT);
    fails_with(cmd, 2, "--epilogues needs a value");
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --timeout 0 x", PP_ROOT);
    fails_with(cmd, 2, "--timeout 0: expected a number");
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --help", PP_ROOT);
    char *out;
    out = run_expect(cmd, 0);
    ck_assert_ptr_nonnull(strstr(out, "--backend B"));
    ck_assert_ptr_nonnull(strstr(out, "--transport T"));
    ck_assert_ptr_nonnull(strstr(out, "--epilogues E"));
    free(out);
}
END_TEST

/* Without a GPU, asking for cuda ends every rank with exit 1 and a message
 * within seconds (the CUDA-less build says so too). */
START_TEST(cuda_without_gpu_fails_fast)
{
    if (have_gpu()) {
        printf("skipped: a GPU is visible\n");
        return;
    }
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"),
         *one = compile_plan("gpipe.pp", "-D S=1 -D B=2");
    char cmd[2048];
    time_t t0 = time(NULL);
    snprintf(cmd, sizeof cmd, "timeout 60 %s/bin/" PPVM " --backend cuda %s/plan/rank0.bin",
             PP_ROOT, one);
    fails_with(cmd, 1, "ppvm: rank 0: --backend cuda: no GPU visible (");
    snprintf(cmd, sizeof cmd, "--backend cuda %s/plan", dir);
    ranks_fail_with(2, cmd, 1, "--backend cuda: no GPU visible (");
    snprintf(cmd, sizeof cmd, "--transport nccl %s/plan", dir);
    ranks_fail_with(2, cmd, 1, "--transport nccl: no GPU visible (");
    /* seconds, not a hang: 60 s leaves room for a machine loaded by others */
    ck_assert_msg(
        time(NULL) - t0 <
            60 * (getenv("CK_TIMEOUT_MULTIPLIER") ? atof(getenv("CK_TIMEOUT_MULTIPLIER")) : 1),
        "failing took %lds", (long)(time(NULL) - t0));
    /* and the default is the cpu backend */
    snprintf(cmd, sizeof cmd, "%s/plan --steps 1", dir);
    char *out = gpu_mpi_ok(2, cmd);
    ck_assert_ptr_nonnull(strstr(out, "backend cpu, transport mpi"));
    free(out);
    remove_dir(dir);
    remove_dir(one);
}
END_TEST

/* ---- with a GPU ----------------------------------------------------------------- */

/* The four schedules: a pipeline, 1F1B, a split backward, weight fetching;
 * each in fp32 and in bf16 mixed precision (ppc --precision bf16: owners
 * keep fp32 masters and a device bf16 copy refreshed by each update, jobs
 * compute with it or with a fetched one, GEMMs on bf16 operands, bf16
 * activations between stages). The CPU reference rounds the same operands
 * and activations; the weights are held to BF16_WEIGHT_TOL (above: the
 * boundaries' roundings may differ by one bf16 ulp). Before the bf16
 * boundaries, stand-in libraries whose bf16 GEMM sums in other orders than
 * the CPU's BLAS (in double, or in float backwards) ended these plans
 * within fp32's tolerances (worst weight difference 1.7e-4, losses within
 * 5e-4 of the CPU's). SGD here; adamw_four_ranks_mpi covers AdamW. */
static const char *const schedule[4] = {"gpipe.pp", "1f1b.pp", "zb-h1.pp", "fsdp.pp"};
static const char *const one_rank_defs[4] = {"-D S=1 -D B=4", "-D S=1 -D B=4", "-D S=1 -D B=4",
                                             "-D S=1 -D B=1"};
static const char *const four_rank_defs[4] = {"-D S=4 -D B=4", "-D S=4 -D B=8", "-D S=4 -D B=8",
                                              "-D S=4 -D B=4"};

/* defs[i % 4], in bf16 when i >= 8 (loop tests run _i over both halves). */
static const char *defs_of(const char *const defs[4], int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s", defs[i % 4], i >= 8 ? " --precision bf16" : "");
    return buf;
}

/* _i: schedule _i % 4 on transport nccl (_i % 8 < 4) or mpi, fp32 or bf16. */
START_TEST(one_rank)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    char defs[128];
    gpu_trains_like_cpu(schedule[_i % 4], defs_of(one_rank_defs, _i, defs, sizeof defs), 1,
                        _i % 8 < 4 ? "nccl" : "mpi");
}
END_TEST

/* _i: schedule _i % 4, fp32 (_i < 4) or bf16 (_i + 4 >= 8). */
START_TEST(four_ranks_one_gpu_mpi)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    char defs[128];
    gpu_trains_like_cpu(schedule[_i % 4],
                        defs_of(four_rank_defs, _i < 4 ? _i : _i + 4, defs, sizeof defs), 4, "mpi");
}
END_TEST

START_TEST(four_ranks_nccl)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    if (gpu_count() < 4) {
        test_skipped("%d GPU(s), nccl needs one per rank\n", gpu_count());
        return;
    }
    char defs[128];
    gpu_trains_like_cpu(schedule[_i % 4],
                        defs_of(four_rank_defs, _i < 4 ? _i : _i + 4, defs, sizeof defs), 4,
                        "nccl");
}
END_TEST

/* AdamW on the GPU (pp_cu_adamw_step with device moments): a pipeline
 * and replicas, 4 ranks on one GPU, in fp32 and bf16. With the default
 * eps of 1e-8 AdamW's first steps move a weight by about lr * sign(g), so a
 * gradient at the level of summation-order noise whose sign differs between
 * GPU and CPU moves the weight by 2 lr (8e-3; stand-in libraries summing in
 * another order showed 2.2e-4 in fp32 and 8.5e-3 in bf16). An eps of 1e-3,
 * above that noise, makes the update continuous in g there, and keeps
 * everything else of the step (moments, bias correction, weight decay) as
 * it is, so the weights are held to fp32's tolerances (bf16 runs: to
 * BF16_WEIGHT_TOL). In bf16 every weight still moves by about lr times its
 * gradient's relative noise (a bf16 step, 4e-3) each step: 1.1e-4 after
 * 3 steps at lr 4e-3 on those stand-ins, 2.6e-5 at lr 1e-3, which the
 * bf16 case uses. The default
 * eps is held where tolerances allow, bit for bit: cuda_deterministic
 * trains AdamW at eps 1e-8 under --deterministic, and every schedule's
 * cuda run must end with gpipe's cuda weights exactly. */
START_TEST(adamw_four_ranks_mpi)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    gpu_trains_like_cpu_with("1f1b.pp", "-D S=4 -D B=8 --optimizer adamw", 4, "mpi",
                             "--adam-eps 1e-3");
    gpu_trains_like_cpu_with("ddp.pp", "-D S=4 --optimizer adamw", 4, "mpi", "--adam-eps 1e-3");
    gpu_trains_like_cpu_with("fsdp.pp", "-D S=4 --optimizer adamw --precision bf16", 4, "mpi",
                             "--adam-eps 1e-3 --lr 1e-3");
}
END_TEST

/* FSDP with a middle stage of `blocks = 0`: its jobs on non-owners have no
 * wts or wgrad slot and no weights to order against (the cuda backend once
 * recorded an event that did not exist there). Over nccl where there are
 * four GPUs, else over mpi on one. */
START_TEST(weightless_stage_four_ranks)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    char *src = temp_dir(), path[1024], cmd[2048];
    snprintf(path, sizeof path, "%s/fsdp.pp", src);
    snprintf(cmd, sizeof cmd, "sed 's/blocks *= *[0-9]*/blocks = 0/' %s/schedules/fsdp.pp > %s",
             PP_ROOT, path);
    free(run_expect(cmd, 0));
    gpu_trains_like_cpu(path, "-D S=4 -D B=4", 4, gpu_count() >= 4 ? "nccl" : "mpi");
    remove_dir(src);
}
END_TEST

/* The gpt model (model gpt { ... } in place of the schedule's model block,
 * as e2e's gpt_trains_like_reference), 4 ranks: 1F1B in fp32 over mpi on
 * one GPU; ZB-H1's split backward with per-stage layers, a stage without
 * any, and FSDP (weight fetches) in bf16 with AdamW, over nccl where there
 * are four GPUs (else mpi); 1F1B in bf16 over mpi. vocab 256: the data is
 * raw bytes. Held to the tolerances of the mlp cases; AdamW with
 * adamw_four_ranks_mpi's eps and bf16 learning rate (see there). */
START_TEST(gpt_four_ranks)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    static const char *cases[][5] = {
        {"1f1b.pp", "2", "-D S=4 -D B=4", "mpi", ""},
        {"zb-h1.pp", "s == 1 ? 0 : 2", "-D S=4 -D B=4", "nccl", ""},
        {"1f1b.pp", "1", "-D S=4 -D B=4 --precision bf16", "mpi", ""},
        {"fsdp.pp", "1", "-D S=4 --precision bf16 --optimizer adamw", "nccl",
         "--adam-eps 1e-3 --lr 1e-3"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char *src = temp_dir(), path[1024], cmd[4096];
        snprintf(path, sizeof path, "%s/gpt-%s", src, cases[i][0]);
        snprintf(cmd, sizeof cmd,
                 "sed '/^model {/,/^}/d' %s/schedules/%s > %s && printf 'model gpt {\n"
                 "vocab = 256\ncontext = 16\nembed = 16\nheads = 2\nffn = 32\n"
                 "layers = %s\nbatch = 2\n}\n' >> %s",
                 PP_ROOT, cases[i][0], path, cases[i][1], path);
        free(run_expect(cmd, 0));
        int nccl = !strcmp(cases[i][3], "nccl") && gpu_count() >= 4;
        gpu_trains_like_cpu_with(path, cases[i][2], 4, nccl ? "nccl" : "mpi", cases[i][4]);
        remove_dir(src);
    }
}
END_TEST

/* tie = 1 on the GPU: the tied embedding's swap (SendTiedGrad and
 * RecvTiedGrad between two ranks) and its local sum (ZB-V's worker 0 owns
 * both tied stages and stores the tied weights once, isa/tied.h) train as
 * the CPU does, allocating what it does; so does ZB-V under
 * --deterministic (the ordered sums put on the device before the tied
 * sum). */
START_TEST(tied_gpt_ranks)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    static const char *cases[][5] = {
        {"1f1b.pp", "-D S=4 -D B=4", "4", "nccl", ""},
        {"zb-v.pp", "-D W=2 -D B=4", "2", "nccl", ""},
        {"pp-dp.pp", "-D S=2 -D D=2 -D B=4", "4", "mpi", ""},
        {"zb-v.pp", "-D W=2 -D B=4", "2", "mpi", "--deterministic"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char *src = temp_dir(), path[1024], cmd[4096];
        snprintf(path, sizeof path, "%s/tied-%s", src, cases[i][0]);
        snprintf(cmd, sizeof cmd,
                 "sed '/^model {/,/^}/d' %s/schedules/%s > %s && printf 'model gpt {\n"
                 "vocab = 256\ncontext = 16\nembed = 16\nheads = 2\nffn = 32\n"
                 "layers = 1\nbatch = 2\ntie = 1\n}\n' >> %s",
                 PP_ROOT, cases[i][0], path, path);
        free(run_expect(cmd, 0));
        int np = atoi(cases[i][2]), nccl = !strcmp(cases[i][3], "nccl") && gpu_count() >= np;
        gpu_trains_like_cpu_with(path, cases[i][1], np, nccl ? "nccl" : "mpi", cases[i][4]);
        remove_dir(src);
    }
}
END_TEST

/* The Llama on the GPU (llama_cuda.cu), grouped-query attention, tied, a
 * split backward in bf16, against the CPU and the reference. */
START_TEST(llama_four_ranks)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    static const char *cases[][3] = {
        {"1f1b.pp", "-D S=4 -D B=4", "nccl"},
        {"zb-h1.pp", "-D S=4 -D B=4 --precision bf16", "mpi"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char *src = temp_dir(), path[1024], cmd[4096];
        snprintf(path, sizeof path, "%s/llama-%s", src, cases[i][0]);
        snprintf(cmd, sizeof cmd,
                 "sed '/^model {/,/^}/d' %s/schedules/%s > %s && printf 'model llama {\n"
                 "vocab = 256\ncontext = 16\nembed = 16\nheads = 4\nkv_heads = 2\nffn = 32\n"
                 "layers = 1\nbatch = 2\ntie = 1\n}\n' >> %s",
                 PP_ROOT, cases[i][0], path, path);
        free(run_expect(cmd, 0));
        int nccl = !strcmp(cases[i][2], "nccl") && gpu_count() >= 4;
        gpu_trains_like_cpu_with(path, cases[i][1], 4, nccl ? "nccl" : "mpi", "");
        remove_dir(src);
    }
}
END_TEST

/* nccl cannot put two ranks on one GPU: every rank exits 1, telling the
 * user to use --transport mpi, and nothing hangs. */
START_TEST(nccl_refuses_shared_gpu)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    int n = gpu_count() + 1;
    char defs[64], cmd[2048];
    snprintf(defs, sizeof defs, "-D S=%d -D B=2", n);
    char *dir = compile_plan("gpipe.pp", defs);
    time_t t0 = time(NULL);
    snprintf(cmd, sizeof cmd, "%s/plan --backend cuda --transport nccl --steps 1", dir);
    ranks_fail_with(n, cmd, -1, "use --transport mpi");
    ck_assert_msg(time(NULL) - t0 < 120, "failing took %lds", (long)(time(NULL) - t0));
    remove_dir(dir);
}
END_TEST

/* The transport a test of two or four ranks runs on: nccl where every rank
 * has a GPU of its own, mpi elsewhere. */
static const char *transport_for(int np) { return gpu_count() >= np ? "nccl" : "mpi"; }

/* Runs np ranks with PP_INJECT_NAN=inject on the cuda backend and expects
 * every rank to exit 1 with `found` (the finding rank's line) and `stop`
 * (rank 0's), the lines test_robust.c expects of the cpu backend. */
static void cuda_nan_stops(const char *dir, const char *plan, const char *transport,
                           const char *inject, const char *found, const char *stop)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/%s --backend cuda --transport %s --steps 4 --quiet", dir, plan,
             transport);
    setenv("PP_INJECT_NAN", inject, 1);
    ranks_fail_with(2, cmd, 1, found);
    ranks_fail_with(2, cmd, 1, stop);
    unsetenv("PP_INJECT_NAN");
}

/* Bad numbers on the cuda backend (issue 16), checked as the cpu backend
 * checks them (vm/core.c): a NaN injected into a loss, an input gradient
 * or a weight gradient stops every rank with exit 1, naming the step,
 * stage and microbatch; so does a run whose numbers overflow. */
START_TEST(cuda_bad_numbers)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    const char *tr = transport_for(2);
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/plan --backend cuda --steps 30 --lr 1000 --quiet", dir);
    ranks_fail_with(2, cmd, 1, " is not finite (");
    ranks_fail_with(2, cmd, 1, " not finite at step ");
    remove_dir(dir);
    dir = compile_plan("1f1b.pp", "-D S=2 -D B=2");
    cuda_nan_stops(dir, "plan", tr, "3:1:1",
                   "ppvm: rank 1: step 3, stage 1, microbatch 1: the "
                   "loss is not finite (nan); every rank stops",
                   "ppvm: loss is not finite at "
                   "step 3");
    cuda_nan_stops(dir, "plan", "mpi", "2:0:0",
                   "ppvm: rank 1: step 2, stage 1, microbatch 0: the "
                   "loss is not finite",
                   "ppvm: loss is not finite at step 2");
    cuda_nan_stops(dir, "plan", tr, "2:1:0:din",
                   "ppvm: rank 1: step 2, stage 1, microbatch 0: "
                   "the input gradient is not finite (nan); every rank stops",
                   "ppvm: a gradient "
                   "is not finite at step 2");
    cuda_nan_stops(dir, "plan", "mpi", "2:0:1:wgrad",
                   "ppvm: rank 0: step 2, stage 0: the weight "
                   "gradients (summed over microbatches 0 to 1) are not finite (nan) before its "
                   "OptimizerStep; every rank stops",
                   "ppvm: a gradient is not finite at step 2");
    /* split backward (B then W): the hook reaches BackwardInput and BackwardWeight */
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/zb-h1.pp -D S=2 -D B=4 -o %s/zb -q", PP_ROOT,
             PP_ROOT, dir);
    free(run_expect(cmd, 0));
    cuda_nan_stops(dir, "zb", tr, "1:1:3:din",
                   "ppvm: rank 1: step 1, stage 1, microbatch 3: the "
                   "input gradient is not finite",
                   "ppvm: a gradient is not finite at step 1");
    cuda_nan_stops(dir, "zb", "mpi", "1:1:2:wgrad",
                   "ppvm: rank 1: step 1, stage 1: the weight "
                   "gradients",
                   "ppvm: a gradient is not finite at step 1");
    remove_dir(dir);
}
END_TEST

/* --skip-nonfinite on the cuda backend with the NaN in the last of 3
 * steps: the run succeeds, says so once, and its weights are those of the
 * same run of 2 steps, bit for bit (the same GPU, the same order of
 * operations). */
static void cuda_skipped_last_step(const char *schedule, const char *defs, const char *transport,
                                   const char *inject)
{
    char *dir = compile_plan(schedule, defs), args[2048], cmd[2048];
    snprintf(args, sizeof args,
             "%s/plan --backend cuda --transport %s --steps 3 --skip-nonfinite --save %s/w", dir,
             transport, dir);
    setenv("PP_INJECT_NAN", inject, 1);
    char *out = gpu_mpi_ok(2, args);
    unsetenv("PP_INJECT_NAN");
    const char *line = strstr(out, "step 3 skipped on every rank (weights and optimizer state as "
                                   "before it)");
    ck_assert_msg(line && !strstr(line + 10, "skipped on every rank"),
                  "%s %s (%s, %s): expected one line saying step 3 was skipped:\n%s", schedule,
                  defs, transport, inject, out);
    free(out);
    snprintf(args, sizeof args,
             "%s/plan --backend cuda --transport %s --steps 2 --save %s/n --quiet", dir, transport,
             dir);
    free(gpu_mpi_ok(2, args));
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --compare %s/w %s/n --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    free(run_expect(cmd, 0));
    remove_dir(dir);
}

START_TEST(cuda_nonfinite_steps_skipped)
{
    if (!have_gpu()) {
        printf("skipped: no GPU\n");
        return;
    }
    cuda_skipped_last_step("1f1b.pp", "-D S=2 -D B=2", transport_for(2), "3:1:0");
    cuda_skipped_last_step("1f1b.pp", "-D S=2 -D B=2 --optimizer adamw", "mpi", "3:0:1:wgrad");
    cuda_skipped_last_step("zb-h1.pp", "-D S=2 -D B=4 --optimizer adamw --precision bf16",
                           transport_for(2), "3:1:2:din");
    /* a skip mid-run: training goes on, with finite losses after it */
    char *dir = compile_plan("zb-h1.pp", "-D S=2 -D B=4 --optimizer adamw"), args[2048];
    snprintf(args, sizeof args, "%s/plan --backend cuda --steps 4 --skip-nonfinite", dir);
    setenv("PP_INJECT_NAN", "2:1:2:din", 1);
    char *out = gpu_mpi_ok(2, args);
    unsetenv("PP_INJECT_NAN");
    ck_assert_msg(strstr(out, "ppvm: rank 1: step 2, stage 1, microbatch 2: the input gradient is "
                              "not finite (nan); step 2 skipped on every rank"),
                  "%s", out);
    const char *s3 = strstr(out, "step    3/4  loss "), *s4 = strstr(out, "step    4/4  loss ");
    ck_assert_msg(s3 && s4 && atof(s3 + 18) > 0 && atof(s4 + 18) > 0, "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* 3 steps of `schedule` on np ranks of the cuda backend with --deterministic
 * (and `flags`), saved to save (a directory the caller removes). */
static void cuda_determ_run(const char *schedule, const char *defs, int np, const char *flags,
                            const char *save)
{
    char *dir = compile_plan(schedule, defs), args[4096];
    snprintf(args, sizeof args, "%s/plan --backend cuda --steps 3 --quiet %s --save %s", dir, flags,
             save);
    free(gpu_mpi_ok(np, args));
    remove_dir(dir);
}

/* Whether two --save directories hold the same bits (--compare at atol 0,
 * rtol 0): 1, 0 when they differ, and any other failure fails the test. */
static int same_bits(const char *a, const char *b)
{
    char cmd[2048];
    proc_result r;
    snprintf(cmd, sizeof cmd, "%s/bin/" PPVM " --compare %s %s --atol 0 --rtol 0", PP_ROOT, a, b);
    run_proc(cmd, CMD_TIMEOUT, &r);
    int same = r.status == 0 && strstr(r.out, "within tolerance");
    ck_assert_msg(same || (r.status == 1 && strstr(r.out, " beyond atol ")),
                  "could not compare the weights: %s\n  it %s", cmd, proc_story(&r, 20));
    proc_free(&r);
    return same;
}

/* --deterministic on the cuda backend (vm/determ.h): the same model trained
 * by pipelines, replicas (ReduceGrads), gradient-receiving owners (FSDP),
 * interleaved stages on two ranks and overlapped pairs on two compute
 * streams ends every run with the same weights, bit for bit, as the cpu
 * backend's runs end with the reference's; without the flag a schedule
 * that sums across ranks does not; and nccl is refused (the gradients move
 * with MPI). */
static void cuda_determ_alike(const char *adamw_defs)
{
    static const struct {
        const char *schedule, *defs;
        int np;
    } runs[] = {
        {"gpipe.pp", "-D S=4 -D B=4", 4},
        {"ddp.pp", "-D S=4 -D B=4", 4},
        {"fsdp.pp", "-D S=4 -D B=4", 4},
        {"lpp.pp", "-D S=4 -D B=4 -D G=2 -D R=2", 4},
        {"interleaved-1f1b.pp", "-D W=2 -D V=2 -D B=4", 2},
        {"1f1b-overlap.pp", "-D S=4 -D B=4", 4},
    };
    char *tmp = temp_dir(), first[1024], save[1024], all[256];
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(all, sizeof all, "%s %s", runs[i].defs, adamw_defs);
        snprintf(save, sizeof save, "%s/w%zu", tmp, i);
        cuda_determ_run(runs[i].schedule, all, runs[i].np, "--deterministic", save);
        if (i == 0)
            snprintf(first, sizeof first, "%s", save);
        else
            ck_assert_msg(same_bits(save, first),
                          "%s %s: --deterministic on cuda ends with other "
                          "weights than gpipe.pp's",
                          runs[i].schedule, all);
    }
    snprintf(save, sizeof save, "%s/plain", tmp);
    snprintf(all, sizeof all, "-D S=4 -D B=4 %s", adamw_defs);
    cuda_determ_run("ddp.pp", all, 4, "", save);
    ck_assert_msg(!same_bits(save, first), "ddp.pp without --deterministic matched gpipe.pp's bits "
                                           "(the test would not see a wrong sum)");
    remove_dir(tmp);
}

START_TEST(cuda_deterministic)
{
    if (!have_gpu()) {
        printf("skipped: no GPU\n");
        return;
    }
    cuda_determ_alike("");
    cuda_determ_alike("--optimizer adamw --precision bf16");
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/plan --backend cuda --transport nccl --deterministic", dir);
    ranks_fail_with(2, cmd, 2,
                    "ppvm: --deterministic moves its per-microbatch gradients with "
                    "MPI; it takes --transport mpi, not nccl");
    remove_dir(dir);
}
END_TEST

/* ppvm --profile on the cuda backend: the jobs timed by CUDA events, the
 * link through the run's transport, a file ppc --costs takes as it is. */
START_TEST(profile_on_the_gpu)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    static const char *transport[] = {"mpi", "nccl"};
    for (int t = 0; t < 2; t++) {
        int np = t == 0 ? 4 : 1; /* nccl: one rank per GPU */
        if (t == 1 && gpu_count() >= 4)
            np = 4;
        char defs[64], cmd[4096], *json, *out;
        snprintf(defs, sizeof defs, "-D S=%d -D B=8", np);
        char *dir = compile_plan("zb-h1.pp", defs);
        snprintf(cmd, sizeof cmd,
                 "%s/plan --backend cuda --transport %s --steps 2 --quiet --timeout 120 "
                 "--profile %s/c.json",
                 dir, transport[t], dir);
        free(gpu_mpi_ok(np, cmd));
        snprintf(cmd, sizeof cmd, "cat %s/c.json", dir);
        json = run_expect(cmd, 0);
        double v[8];
        ck_assert_int_eq(profile_values(json, "F", v, 8), np);
        ck_assert_int_eq(profile_values(json, "B", v, 8), np);
        ck_assert_int_eq(profile_values(json, "W", v, 8), np);
        ck_assert_int_eq(profile_values(json, "O", v, 8), np);
        ck_assert_int_eq(profile_values(json, "latency", v, 8), np > 1);
        /* offload's copy, device to pinned host memory and back on the
         * copy stream (issue 26), at a stash's size: no offload here */
        ck_assert_msg(profile_values(json, "host_bandwidth", v, 8) == 1,
                      "no \"host_bandwidth\" (%s):\n%s", transport[t], json);
        snprintf(cmd, sizeof cmd,
                 "%s/bin/ppc %s/schedules/zb-h1.pp %s -o %s/q -q --costs %s/c.json", PP_ROOT,
                 PP_ROOT, defs, dir, dir);
        out = run_expect(cmd, 0);
        free(out);
        free(json);
        remove_dir(dir);
    }
    /* a plan with offload: the probe moves its host slots' size, and ppc
     * --costs prices its copies with the figure */
    char cmd[4096], *json, *out;
    char *dir = compile_plan("1f1b-offload.pp", "-D S=4 -D B=4");
    snprintf(cmd, sizeof cmd,
             "%s/plan --backend cuda --transport mpi --steps 2 --quiet --timeout 120 "
             "--profile %s/c.json",
             dir, dir);
    free(gpu_mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "cat %s/c.json", dir);
    json = run_expect(cmd, 0);
    double hb[2];
    ck_assert_msg(profile_values(json, "host_bandwidth", hb, 2) == 1,
                  "no \"host_bandwidth\" with offload:\n%s", json);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s/schedules/1f1b-offload.pp -D S=4 -D B=4 -o %s/q -q --costs %s/c.json"
             " && cat %s/q/report.txt",
             PP_ROOT, PP_ROOT, dir, dir, dir);
    out = run_expect(cmd, 0);
    char want[128];
    snprintf(want, sizeof want, "host-copy lane, bytes / %g bytes per time unit", hb[0]);
    ck_assert_msg(strstr(out, want), "no '%s' in the report:\n%.1500s", want, out);
    free(out);
    free(json);
    remove_dir(dir);
    /* FSDP's returned gradients: each owner's add, timed on its stream ("G") */
    dir = compile_plan("fsdp.pp", "-D S=2 -D B=2");
    snprintf(cmd, sizeof cmd,
             "%s/plan --backend cuda --transport mpi --steps 2 --quiet --timeout 120 "
             "--profile %s/c.json",
             dir, dir);
    free(gpu_mpi_ok(2, cmd));
    snprintf(cmd, sizeof cmd, "cat %s/c.json", dir);
    json = run_expect(cmd, 0);
    double g[2];
    ck_assert_msg(profile_values(json, "G", g, 2) == 2 && g[0] >= 0 && g[1] >= 0,
                  "no \"G\" of 2 stages:\n%s", json);
    free(json);
    remove_dir(dir);
}
END_TEST

/* Checkpoints on the cuda backend (its stage_get and stage_set): 1F1B with
 * AdamW in bf16 on four ranks, a rank killed before step 4 after the
 * checkpoint of step 2, --resume: the weights of the run never
 * interrupted, bit for bit (the same GPU, the same order of operations). */
START_TEST(checkpoint_resume_cuda)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    const char *transport = gpu_count() >= 4 ? "nccl" : "mpi";
    char *dir = compile_plan("1f1b.pp", "-D S=4 -D B=4 --optimizer adamw --precision bf16");
    char args[4096], a[2048], b[2048], *out, *why;
    snprintf(
        args, sizeof args,
        "--backend cuda --transport %s %s/plan --steps 4 --adam-eps 1e-3 --save %s/full --quiet",
        transport, dir, dir);
    ck_assert_msg(!mpi_run_within(4, args, GPU_MPIRUN_TIMEOUT, &out, &why), "%s", why);
    free(out);
    snprintf(args, sizeof args,
             "--backend cuda --transport %s %s/plan --steps 4 --adam-eps 1e-3 --checkpoint-dir "
             "%s/ck --checkpoint-every 2 --quiet",
             transport, dir, dir);
    setenv("PPVM_TEST_KILL", "2:4:step", 1);
    int rc = mpi_run_within(4, args, GPU_MPIRUN_TIMEOUT, &out, &why);
    unsetenv("PPVM_TEST_KILL");
    ck_assert_msg(rc != 0, "the run whose rank 2 was killed succeeded:\n%s", out);
    free(out);
    free(why);
    snprintf(args, sizeof args,
             "--backend cuda --transport %s %s/plan --steps 4 --adam-eps 1e-3 --resume %s/ck "
             "--save %s/res --quiet",
             transport, dir, dir, dir);
    ck_assert_msg(!mpi_run_within(4, args, GPU_MPIRUN_TIMEOUT, &out, &why), "%s", why);
    snprintf(a, sizeof a, "resuming from '%s/ck/step-000002'", dir);
    ck_assert_msg(strstr(out, a) != NULL, "expected \"%s\" in\n%s", a, out);
    free(out);
    snprintf(a, sizeof a, "%s/bin/" PPVM " --compare %s/res %s/full --atol 0 --rtol 0", PP_ROOT,
             dir, dir);
    out = run_expect(a, 0);
    snprintf(b, sizeof b, "stage 3: ");
    ck_assert_msg(strstr(out, b) && !strstr(out, "beyond"), "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* Mixed backward (`split backward when`, issue 17): a ZB-H1 order whose even
 * microbatches' backwards are split (BackwardInput, BackwardWeight) and odd
 * ones' full (Backward), so every rank's stage holds both stash sizes; then
 * the same with overlapped pairs and fetched weights; on four ranks with
 * mpi, and with nccl where there are four GPUs. */
START_TEST(mixed_backward_four_ranks)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    char *dir = temp_dir(), path[1024];
    snprintf(path, sizeof path, "%s/mixed.pp", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("param S = 4\nparam B = 8\nparam W = S\nsplit backward when b % 2 == 0\n"
          "let k = min(S - 1 - s, B)\ncompute(s,b,d) = s\n"
          "priority(s,b,d) = d == F ? 3 * (b - k) : d == B ? 3 * b + 1 : 3 * (b + s) + 2\n"
          "order strict\nmodel { context = 8  embed = 16  ffn = 256  blocks = 1  batch = 16 }\n",
          f);
    fclose(f);
    gpu_trains_like_cpu(path, "", 4, "mpi");
    if (gpu_count() >= 4)
        gpu_trains_like_cpu(path, "", 4, "nccl");
    /* the same order with its forwards overlapped with a full backward or a
     * split one's B (the pair's second job on the second compute stream),
     * and each stage's weights on the next worker: fetched weights, and a
     * full backward in a pair accumulating what it returns to the owner */
    snprintf(path, sizeof path, "%s/mixed-overlap.pp", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("param S = 4\nparam B = 8\nparam W = S\nsplit backward when b % 2 == 0\n"
          "let k = min(S - 1 - s, B)\ncompute(s,b,d) = s\nweights(s,b,d) = (s + 1) % W\n"
          "priority(s,b,d) = d == F ? 3 * (b - k) : d == B ? 3 * b + 1 : 3 * (b + s) + 2\n"
          "order strict\noverlap F with B when s < S - 1\n"
          "model { context = 8  embed = 16  ffn = 256  blocks = 1  batch = 16 }\n",
          f);
    fclose(f);
    gpu_trains_like_cpu(path, "", 4, "mpi");
    if (gpu_count() >= 4)
        gpu_trains_like_cpu(path, "", 4, "nccl");
    remove_dir(dir);
}
END_TEST

/* Overlapped pairs (schedules/1f1b-overlap.pp, v-overlap.pp, and
 * dualpipev.pp's PyTorch OVERLAP_F_B pairs among split and whole
 * backwards, on 2 ranks): each pair's second job on
 * the second compute stream, with its own cuBLAS context and workspace.
 * The weights must be the reference's, the memory line the cpu backend's
 * (two workspaces on both), the losses the CPU's; on the stand-ins any
 * missing wait between the two compute streams and the transfer streams
 * is a stream-ordering hazard that ends the run. 4 ranks on one GPU with
 * mpi, and with nccl where there are four GPUs; fp32 and bf16. */
START_TEST(overlap_pairs_two_streams)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    gpu_trains_like_cpu("1f1b-overlap.pp", "-D S=4 -D B=4", 4, "mpi");
    gpu_trains_like_cpu("1f1b-overlap.pp", "-D S=4 -D B=4 --precision bf16", 4, "mpi");
    gpu_trains_like_cpu("v-overlap.pp", "-D W=4 -D B=8", 4, "mpi");
    gpu_trains_like_cpu("dualpipev.pp", "-D W=2 -D B=5", 2, "mpi");
    if (gpu_count() < 4) {
        printf("skipped nccl: %d GPU(s), nccl needs one per rank\n", gpu_count());
        return;
    }
    gpu_trains_like_cpu("1f1b-overlap.pp", "-D S=4 -D B=4", 4, "nccl");
    gpu_trains_like_cpu("v-overlap.pp", "-D W=4 -D B=8", 4, "nccl");
}
END_TEST

/* What the stand-in runtime counted in each rank (PP_STANDIN_REPORT=1,
 * tests/standin/runtime.cpp): its device and pinned allocations and the
 * streams its GEMMs ran on, for a run of `steps` steps of dir/plan. */
static void standin_counts(const char *dir, int np, int steps, int *allocs, int *streams)
{
    char args[2048];
    /* launched (--graph off): a replayed step calls no cuBLAS after its capture */
    snprintf(args, sizeof args,
             "%s/plan --backend cuda --transport mpi --graph off --steps %d --quiet", dir, steps);
    setenv("PP_STANDIN_REPORT", "1", 1);
    char *out = gpu_mpi_ok(np, args);
    unsetenv("PP_STANDIN_REPORT");
    for (int r = 0; r < np; r++) {
        char want[64];
        snprintf(want, sizeof want, "standin: rank %d: ", r);
        const char *p = strstr(out, want);
        ck_assert_msg(p && sscanf(p + strlen(want),
                                  "%d device and pinned allocations, GEMMs on %d stream",
                                  &allocs[r], &streams[r]) == 2,
                      "no stand-in report from rank %d:\n%s", r, out);
    }
    free(out);
}

/* The cuda backend's claims that results alone do not show, on the
 * stand-ins' own account (issue 25): an overlapped pair's second job runs
 * on the second compute stream (every rank whose plan holds an Overlap ran
 * GEMMs on two streams, the others on one), and nothing is allocated
 * inside a step (a run of 3 steps makes as many device and pinned
 * allocations on each rank as a run of 1). A GPU has no such account. */
START_TEST(standin_streams_and_allocations)
{
    if (strcmp(PPVM, "ppvm-standin")) {
        test_skipped("the stand-in runtime's own count; a GPU keeps none\n");
        return;
    }
    char *dir = compile_plan("1f1b-overlap.pp", "-D S=4 -D B=4");
    int a1[4], s1[4], a3[4], s3[4];
    standin_counts(dir, 4, 1, a1, s1);
    standin_counts(dir, 4, 3, a3, s3);
    for (int r = 0; r < 4; r++) {
        char cmd[1200], *n;
        snprintf(cmd, sizeof cmd, "grep -c ' Overlap ' %s/plan/rank%d.txt || true", dir, r);
        n = run_expect(cmd, 0);
        int pairs = atoi(n);
        free(n);
        ck_assert_msg(s1[r] == 1 + (pairs > 0) && s3[r] == s1[r],
                      "rank %d (%d overlapped pairs in its plan): GEMMs ran on %d and %d streams; "
                      "expected %d",
                      r, pairs, s1[r], s3[r], 1 + (pairs > 0));
        ck_assert_msg(a1[r] > 0 && a3[r] == a1[r],
                      "rank %d: %d device and pinned allocations in 1 step, %d in 3: a step "
                      "allocates",
                      r, a1[r], a3[r]);
    }
    remove_dir(dir);
}
END_TEST

/* The first backward of a step into gradients that hold zeros (zeroed at
 * start-up, then by each step's updates) writes its weight gradients
 * (cuBLAS beta 0) instead of adding them (issue 30; vm/grads_zero.c), on
 * the stand-ins' own count of GEMMs by beta. Every other GEMM of a step
 * runs at beta 0, so of a step's B backwards into a stage only the B - 1
 * after the first add: (B - 1) * W GEMMs at beta 1 per step, step 1
 * included (W: the stage's weight-gradient GEMMs, 2 per mlp block and 1 for
 * the head; a step 1 that added would show B * W). The weights are held to
 * the CPU's by the other cases of this suite (B = 4 microbatches:
 * overwriting where the gradients were not zero would lose three quarters
 * of them). */
static long standin_beta1(const char *dir, int np, int r, int steps)
{
    char args[2048], want[64];
    long b0 = -1, b1 = -1;
    /* launched (--graph off): a replayed step calls no cuBLAS after its capture */
    snprintf(args, sizeof args,
             "%s/plan --backend cuda --transport mpi --graph off --steps %d --quiet", dir, steps);
    setenv("PP_STANDIN_REPORT", "1", 1);
    char *out = gpu_mpi_ok(np, args);
    unsetenv("PP_STANDIN_REPORT");
    snprintf(want, sizeof want, "standin: rank %d: cuBLAS GEMMs at beta 0: ", r);
    const char *p = strstr(out, want);
    ck_assert_msg(p && sscanf(p + strlen(want), "%ld, other beta: %ld", &b0, &b1) == 2,
                  "no beta count from rank %d:\n%s", r, out);
    free(out);
    return b1;
}

START_TEST(standin_first_backward_writes_grads)
{
    if (strcmp(PPVM, "ppvm-standin")) {
        test_skipped("the stand-in runtime's own count; a GPU keeps none\n");
        return;
    }
    const char *prec[2] = {"", " --precision bf16"};
    for (int bf = 0; bf < 2; bf++) {
        char defs[128];
        snprintf(defs, sizeof defs, "-D S=2 -D B=4%s", prec[bf]);
        char *dir = compile_plan("gpipe.pp", defs); /* one mlp block per stage */
        for (int r = 0; r < 2; r++) {
            long one = standin_beta1(dir, 2, r, 1), two = standin_beta1(dir, 2, r, 2);
            int w = r == 0 ? 2 : 3; /* W1, W2; the last stage also Wh */
            ck_assert_msg(one == 3 * w && two == 2 * one,
                          "%s rank %d: %ld GEMMs at beta 1 in 1 step, %ld in 2: expected %d a "
                          "step (B - 1 = 3 backwards adding %d weight gradients each; the first "
                          "writes them, step 1's too)",
                          bf ? "bf16" : "fp32", r, one, two, 3 * w, w);
        }
        remove_dir(dir);
    }
}
END_TEST

/* Recompute (issue 26): the re-run forwards on the compute stream, in
 * plan order, reading the input slot F kept and writing the stash slot B
 * reads; on the stand-ins a missing wait is a hazard that ends the run.
 * The weights must be the reference's, the losses the CPU's (a re-run
 * forward on the last stage counts no loss), on mlp and GPT, fp32 and
 * bf16, a split backward and fetched weights. */
START_TEST(recompute_cuda)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    gpu_trains_like_cpu("1f1b-recompute.pp", "-D S=4 -D B=4 -D K=4", 4, "mpi");
    gpu_trains_like_cpu("1f1b-bubble-recompute.pp", "-D S=4 -D B=6 --precision bf16", 4, "mpi");
    gpu_trains_like_cpu("1f1b-recompute.pp", "-D S=2 -D B=4 -D K=2", 2, "mpi");
}
END_TEST

/* Offload on the cuda backend (issue 26): Offload and Reload on the copy
 * stream into pinned host slots, ordered by the slots' events (the
 * stand-ins' hazard detector checks the order). The weights must be the
 * reference's and the losses the CPU's, fp32 and bf16, a split backward,
 * and beside recompute (mlp: a GPT in bf16 on the stand-ins differs from
 * the CPU's beyond the tolerance with or without offload; with and
 * without offload it trains bit-identically there). */
START_TEST(offload_cuda)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    gpu_trains_like_cpu("1f1b.pp", "-D S=4 -D B=4 --offload 1", 4, "mpi");
    gpu_trains_like_cpu("1f1b.pp", "-D S=4 -D B=4 --precision bf16 --offload 's > 0'", 4, "mpi");
    gpu_trains_like_cpu("zb-h1.pp", "-D S=4 -D B=8 --offload 1", 4, "mpi");
    gpu_trains_like_cpu("1f1b-recompute.pp", "-D S=4 -D B=4 -D K=1 --offload 's > 0'", 4, "mpi");
}
END_TEST

/* ppvm --no-compute on the cuda backend (issue 18, vm/README.md "Benchmark
 * mode"): its host side with no kernel launched, over mpi on 2 ranks (1f1b)
 * and on 4 (pp-fsdp: weights in transfer groups), over nccl where there
 * are four GPUs: every rank's counters reach rank 0's table, whose `all`
 * row is every instruction of every plan, and no step line has a loss. */
static void no_compute_cuda_case(const char *file, const char *defs, int np, const char *transport)
{
    char *dir = compile_plan(file, defs), args[2048], want[160];
    snprintf(args, sizeof args, "%s/plan --backend cuda --transport %s --no-compute --steps 3", dir,
             transport);
    char *out = mpi_ok(np, args);
    long total = 0, all = -1;
    const char *plan = strstr(out, "\nplan: "), *row = strstr(out, "\nall ");
    ck_assert_msg(plan && sscanf(plan, "\nplan: %ld", &total) == 1, "no plan line:\n%s", out);
    ck_assert_msg(row && sscanf(row, "\nall * %ld", &all) == 1, "no 'all' row:\n%s", out);
    ck_assert_msg(all == total && total > 0, "the 'all' row counts %ld a step, the plans %ld", all,
                  total);
    long want_total = 0;
    for (int r = 0; r < np; r++) { /* the plans' own count: one listing line per instruction */
        char cmd[1200], *n;
        snprintf(cmd, sizeof cmd, "grep -cE '^ *[0-9]+  [A-Z]' %s/plan/rank%d.txt", dir, r);
        n = run_expect(cmd, 0);
        want_total += atol(n);
        free(n);
    }
    ck_assert_msg(total == want_total,
                  "%s: the table counts %ld instructions a step, the listings "
                  "%ld",
                  file, total, want_total);
    snprintf(want, sizeof want, "no-compute: %d ranks, 2 steps counted", np);
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want, out);
    ck_assert_msg(!strstr(out, "loss") && strstr(out, "backend cuda"), "%s", out);
    free(out);
    remove_dir(dir);
}

START_TEST(no_compute_cuda)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    no_compute_cuda_case("1f1b.pp", "-D S=2 -D B=4", 2, "mpi");
    no_compute_cuda_case("pp-fsdp.pp", "-D P=2 -D D=2 -D B=4", 4,
                         gpu_count() >= 4 ? "nccl" : "mpi");
}
END_TEST

Suite *gpu_e2e_suite(void)
{
    Suite *s = suite_create("gpu_e2e");
    TCase *tc = tcase_create("mpirun");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, backend_flag_errors);
    tcase_add_test(tc, cuda_without_gpu_fails_fast);
    tcase_add_loop_test(tc, one_rank, 0, 16);
    tcase_add_loop_test(tc, four_ranks_one_gpu_mpi, 0, 8);
    tcase_add_loop_test(tc, four_ranks_nccl, 0, 8);
    tcase_add_test(tc, adamw_four_ranks_mpi);
    tcase_add_test(tc, weightless_stage_four_ranks);
    tcase_add_test(tc, gpt_four_ranks);
    tcase_add_test(tc, tied_gpt_ranks);
    tcase_add_test(tc, llama_four_ranks);
    tcase_add_test(tc, profile_on_the_gpu);
    tcase_add_test(tc, nccl_refuses_shared_gpu);
    tcase_add_test(tc, checkpoint_resume_cuda);
    tcase_add_test(tc, mixed_backward_four_ranks);
    tcase_add_test(tc, no_compute_cuda);
    suite_add_tcase(s, tc);
    /* bad numbers, --skip-nonfinite and --deterministic (CK_RUN_CASE=numbers) */
    TCase *nb = tcase_create("numbers");
    tcase_set_timeout(nb, 900);
    tcase_add_test(nb, cuda_bad_numbers);
    tcase_add_test(nb, cuda_nonfinite_steps_skipped);
    tcase_add_test(nb, cuda_deterministic);
    suite_add_tcase(s, nb);
    /* a TCase of its own, so CK_RUN_CASE=overlap runs it alone */
    TCase *ov = tcase_create("overlap");
    tcase_set_timeout(ov, 900);
    tcase_add_test(ov, overlap_pairs_two_streams);
    tcase_add_test(ov, standin_streams_and_allocations);
    tcase_add_test(ov, standin_first_backward_writes_grads);
    suite_add_tcase(s, ov);
    /* issue 26: CK_RUN_CASE=recompute */
    TCase *rc = tcase_create("recompute");
    tcase_set_timeout(rc, 900);
    tcase_add_test(rc, recompute_cuda);
    suite_add_tcase(s, rc);
    /* issue 26: CK_RUN_CASE=offload */
    TCase *oc = tcase_create("offload");
    tcase_set_timeout(oc, 900);
    tcase_add_test(oc, offload_cuda);
    suite_add_tcase(s, oc);
    return s;
}
