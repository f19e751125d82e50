/* test_tensor_e2e.c - tensor parallelism trained under mpirun (issue 27):
 * library schedules with `tensor = T` appended (the mlp model, fp32) train
 * three steps and --save whole stages that --compare puts within the
 * default tolerance of the reference (|a - b| <= 1e-5 + 1e-4 |b|, the one
 * for summed gradients: the row-parallel layer's partial sums are added in
 * another order than one GEMM adds them; measured max |diff| 1.2e-7). The
 * 8-rank PP x TP x DP case is pp-dp.pp with tensor = 2. Checkpoints hold
 * whole stages: T = 2 resumes with T = 1 and back (--reshard). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../compiler/readfile.h"
#include "suites.h"
#include "testutil.h"

/* schedules/<name> with "tensor = T" appended, in a fresh directory. */
static char *with_tensor(const char *name, int T)
{
    char path[512];
    snprintf(path, sizeof path, PP_ROOT "/schedules/%s", name);
    const char *failed = NULL;
    size_t len;
    char *text = pp_read_file(path, &len, &failed);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    char *dir = temp_dir(), *file = malloc(strlen(dir) + 16);
    sprintf(file, "%s/t.pp", dir);
    FILE *f = fopen(file, "w");
    ck_assert_msg(f != NULL, "cannot write %s", file);
    fprintf(f, "%s\ntensor = %d\n", text, T);
    fclose(f);
    free(text);
    free(dir);
    return file;
}

static void remove_file_dir(char *file)
{
    *strrchr(file, '/') = 0;
    remove_dir(file);
}

/* Trains schedule with tensor = T on np ranks and compares with the
 * reference, as test_e2e.c's trains_like_reference does. */
static void tensor_trains(const char *schedule, const char *defs, int T, int np)
{
    char *src = with_tensor(schedule, T);
    char *dir = compile_plan(src, defs), *out, *why, cmd[4096];
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --save %s/w --quiet", dir, dir);
    if (mpi_run(np, cmd, &out, &why))
        ck_abort_msg("%s %s tensor = %d: training under mpirun failed: %s", schedule, defs, T, why);
    free(out);
    proc_result r;
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/plan --steps 3 --save %s/ref --quiet",
             PP_ROOT, dir, dir);
    if (run_proc(cmd, CMD_TIMEOUT, &r))
        ck_abort_msg("%s: the reference run failed: %s\n  it %s", schedule, cmd,
                     proc_story(&r, 20));
    proc_free(&r);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref", PP_ROOT, dir, dir);
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(r.status == 0 && strstr(r.out, "within tolerance"),
                  "%s %s tensor = %d: weights differ from the reference (%s):\n%s", schedule, defs,
                  T, cmd, r.out);
    proc_free(&r);
    remove_dir(dir);
    remove_file_dir(src);
}

static void standin_run(const char *dir, const char *plan, const char *env, const char *flags,
                        const char *save);
static void compare_ok(const char *dir, const char *a, const char *b, const char *tol);

START_TEST(tensor_1f1b) { tensor_trains("1f1b.pp", "-D S=2 -D B=4", 2, 4); }
END_TEST

START_TEST(tensor_gpipe) { tensor_trains("gpipe.pp", "-D S=2 -D B=4", 2, 4); }
END_TEST

/* split backward (BackwardInput makes the all-reduces, W none) */
START_TEST(tensor_zb_h1) { tensor_trains("zb-h1.pp", "-D S=2 -D B=4", 2, 4); }
END_TEST

START_TEST(tensor_interleaved) { tensor_trains("interleaved-1f1b.pp", "-D W=2 -D B=4", 2, 4); }
END_TEST

/* replicas all-reduce per t, fetches and gradient returns per t */
START_TEST(tensor_ddp_fsdp)
{
    tensor_trains("ddp.pp", "-D S=2 -D B=2", 2, 4);
    tensor_trains("fsdp.pp", "-D S=2", 2, 4);
}
END_TEST

START_TEST(tensor_4) { tensor_trains("1f1b.pp", "-D S=2 -D B=4", 4, 8); }
END_TEST

/* PP x TP x DP: pp-dp.pp (2 stages x 2 replicas) with tensor = 2 */
START_TEST(tensor_pp_dp) { tensor_trains("pp-dp.pp", "-D S=2 -D D=2 -D B=4", 2, 8); }
END_TEST

/* The rest of the library with tensor = 2 on 4 ranks (2 workers), about
 * 2.5 s a file: zero-bubble and V-shaped orders (split backward, a worker
 * holding two stages), looped and interleaved placements, greedy and
 * limited 1F1B, the bubble-recompute file, LPP, FSLPP, PP x FSDP and the
 * GPT file; the overlap files in tensor_overlap below. */
START_TEST(tensor_zero_bubble)
{
    tensor_trains("zb-v.pp", "-D W=2 -D B=4", 2, 4);
    tensor_trains("zb-h2.pp", "-D S=2 -D B=4", 2, 4);
    tensor_trains("interleaved-zb.pp", "-D W=2 -D B=4", 2, 4);
}
END_TEST

START_TEST(tensor_looped)
{
    tensor_trains("breadth-first.pp", "-D W=2 -D S=4 -D B=4", 2, 4);
    tensor_trains("depth-first.pp", "-D W=2 -D S=4 -D B=4", 2, 4);
    tensor_trains("looped-bfs.pp", "-D W=2 -D B=4", 2, 4);
}
END_TEST

START_TEST(tensor_1f1b_variants)
{
    tensor_trains("1f1b-bubble-recompute.pp", "-D S=2 -D B=4", 2, 4);
    tensor_trains("1f1b-greedy.pp", "-D S=2 -D B=4", 2, 4);
    tensor_trains("1f1b-limit.pp", "-D S=2 -D B=4 -D K=1", 2, 4);
}
END_TEST

/* the library's GPT file as written (context 64; measured 4.3e-6) */
START_TEST(tensor_gpt_file) { tensor_trains("1f1b-gpt.pp", "-D S=2 -D B=4", 2, 4); }
END_TEST

START_TEST(tensor_lpp_fsdp)
{
    tensor_trains("lpp.pp", "-D S=2 -D B=4 -D G=1 -D R=2", 2, 4);
    tensor_trains("fslpp.pp", "-D S=2 -D B=4 -D G=1 -D R=2", 2, 4);
    tensor_trains("pp-fsdp.pp", "-D P=1 -D D=2 -D B=4", 2, 4);
}
END_TEST

/* Recompute under tensor = 2: a re-run forward makes the forward's
 * all-reduces again (a TensorReduce before each R). 1f1b-recompute.pp
 * trains to the reference, and its weights are bit for bit those of the
 * same file with no stage recomputing (K = 0). */
START_TEST(tensor_recompute)
{
    tensor_trains("1f1b-recompute.pp", "-D S=2 -D B=4 -D K=2", 2, 4);
    char *src = with_tensor("1f1b-recompute.pp", 2), *dir = temp_dir(), cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -D S=2 -D B=4 -D K=2 -o %s/r -q && %s/bin/ppc %s -D S=2 -D B=4 -D K=0 "
             "-o %s/n -q && grep -q Recompute %s/r/rank0.txt && ! grep -q Recompute %s/n/rank0.txt",
             PP_ROOT, src, dir, PP_ROOT, src, dir, dir, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/r --steps 3 --save %s/wr --quiet", dir, dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/n --steps 3 --save %s/wn --quiet", dir, dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/wr %s/wn --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    free(run_expect(cmd, 0));
    remove_dir(dir);
    remove_file_dir(src);
}
END_TEST

/* The gpt split (isa/tensor.h): schedules/<name> with its model block
 * replaced by a small gpt (4 heads, so T = 2 and 4 divide them) and
 * tensor = T, trained three steps on np ranks and compared with the
 * reference of the same plan (the whole model) within tol: fp32 with AdamW
 * within the default (summed gradients; measured max |diff| 4.3e-6), bf16
 * (tol given) with SGD within the GPU suite's (measured 3e-8): AdamW moves
 * a weight whose gradient is near 0 by about lr whatever that gradient's
 * rounding, so the bf16 operands' one-ulp differences between the summed
 * shards and one GEMM would show as 1e-3 in such weights. */
/* The models the files below train: 4 heads, so T = 2 and 4 divide them;
 * llama's 2 kv heads (grouped-query attention, 2 query heads each) let T =
 * 2 split them and refuse T = 4. */
#define GPT_BLOCK                                                                                  \
    "model gpt {\n    vocab = 256\n    context = 16\n    embed = 32\n    heads = 4\n"              \
    "    ffn = 64\n    layers = 1\n    batch = 4\n}\n"
#define LLAMA_BLOCK                                                                                \
    "model llama {\n    vocab = 256\n    context = 16\n    embed = 32\n    heads = 4\n"            \
    "    kv_heads = 2\n    ffn = 64\n    layers = 1\n    batch = 4\n}\n"

/* tie = 1: the head is the embedding, kept by both end stages */
#define GPT_TIED_BLOCK                                                                             \
    "model gpt {\n    vocab = 256\n    context = 16\n    embed = 32\n    heads = 4\n"              \
    "    ffn = 64\n    layers = 1\n    batch = 4\n    tie = 1\n}\n"
#define LLAMA_TIED_BLOCK                                                                           \
    "model llama {\n    vocab = 256\n    context = 16\n    embed = 32\n    heads = 4\n"            \
    "    kv_heads = 2\n    ffn = 64\n    layers = 1\n    batch = 4\n    tie = 1\n}\n"

/* schedules/<schedule> with its model block replaced by block and
 * tensor = T, in dir/g.pp (adamw unless sgd). */
static void model_file(const char *schedule, const char *block, int T, int sgd, const char *dir,
                       char *file, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, PP_ROOT "/schedules/%s", schedule);
    const char *failed = NULL;
    size_t len;
    char *text = pp_read_file(path, &len, &failed);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    char *m = strstr(text, "\nmodel {"), *end = m ? strstr(m, "\n}") : NULL;
    ck_assert_msg(m && end, "%s: no model block", schedule);
    *m = 0;
    snprintf(file, n, "%s/g.pp", dir);
    FILE *f = fopen(file, "w");
    ck_assert_msg(f != NULL, "cannot write %s", file);
    fprintf(f, "%s\n%s\n%s\n%stensor = %d\n", text, end + 3, sgd ? "" : "optimizer adamw", block,
            T);
    fclose(f);
    free(text);
}

static void gpt_file(const char *schedule, int T, int sgd, const char *dir, char *file, size_t n)
{
    model_file(schedule, GPT_BLOCK, T, sgd, dir, file, n);
}

/* schedule with block's model and tensor = T trained on np ranks, compared
 * with the reference within tol ("": the default; given: SGD, else AdamW) */
static void block_tensor_trains(const char *block, const char *schedule, const char *defs, int T,
                                int np, const char *tol)
{
    char *dir = temp_dir(), file[4200], cmd[4096], *out, *why;
    model_file(schedule, block, T, *tol != 0, dir, file, sizeof file);
    char *plan = compile_plan(file, defs);
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --save %s/w --quiet", plan, plan);
    if (mpi_run(np, cmd, &out, &why))
        ck_abort_msg("%.11s %s %s tensor = %d: training under mpirun failed: %s", block, schedule,
                     defs, T, why);
    free(out);
    proc_result r;
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/plan --steps 3 --save %s/ref --quiet",
             PP_ROOT, plan, plan);
    if (run_proc(cmd, CMD_TIMEOUT, &r))
        ck_abort_msg("%.11s %s: the reference run failed: %s\n  it %s", block, schedule, cmd,
                     proc_story(&r, 20));
    proc_free(&r);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref %s", PP_ROOT, plan, plan, tol);
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(r.status == 0 && strstr(r.out, "within tolerance"),
                  "%.11s %s %s tensor = %d: weights differ from the reference (%s):\n%s", block,
                  schedule, defs, T, cmd, r.out);
    proc_free(&r);
    remove_dir(plan);
    remove_dir(dir);
}

static void gpt_tensor_trains(const char *schedule, const char *defs, int T, int np,
                              const char *tol)
{
    block_tensor_trains(GPT_BLOCK, schedule, defs, T, np, tol);
}

static void llama_tensor_trains(const char *schedule, const char *defs, int T, int np,
                                const char *tol)
{
    block_tensor_trains(LLAMA_BLOCK, schedule, defs, T, np, tol);
}

#define BF16_TOL "--atol 1e-4 --rtol 1e-3"

START_TEST(tensor_gpt_pipelines)
{
    gpt_tensor_trains("1f1b.pp", "-D S=2 -D B=4", 2, 4, "");
    gpt_tensor_trains("1f1b.pp", "-D S=2 -D B=4 --precision bf16", 2, 4, BF16_TOL);
    gpt_tensor_trains("gpipe.pp", "-D S=2 -D B=4", 2, 4, "");
    gpt_tensor_trains("zb-h1.pp", "-D S=2 -D B=4", 2, 4, "");
    gpt_tensor_trains("zb-h1.pp", "-D S=2 -D B=4 --precision bf16", 2, 4, BF16_TOL);
    gpt_tensor_trains("interleaved-1f1b.pp", "-D W=2 -D B=4", 2, 4, "");
}
END_TEST

START_TEST(tensor_gpt_replicas)
{
    gpt_tensor_trains("ddp.pp", "-D S=2 -D B=2", 2, 4, "");
    gpt_tensor_trains("fsdp.pp", "-D S=2", 2, 4, "");
    gpt_tensor_trains("fsdp.pp", "-D S=2 --precision bf16", 2, 4, BF16_TOL);
}
END_TEST

START_TEST(tensor_gpt_4) { gpt_tensor_trains("1f1b.pp", "-D S=2 -D B=4", 4, 8, ""); }
END_TEST

/* PP x TP x DP with the gpt: 8 ranks */
START_TEST(tensor_gpt_pp_dp)
{
    gpt_tensor_trains("pp-dp.pp", "-D S=2 -D D=2 -D B=4", 2, 8, "");
    gpt_tensor_trains("pp-dp.pp", "-D S=2 -D D=2 -D B=4 --precision bf16", 2, 8, BF16_TOL);
}
END_TEST

/* The llama split (isa/tensor.h: q by query heads, k and v by kv heads,
 * wo row-parallel, gate and up column-parallel, down row-parallel), on the
 * cpu backend: fp32 with AdamW and bf16 with SGD, fused and split backward
 * (zb-h1: BackwardInput makes the all-reduces, W none), and PP x TP x DP on
 * 8 ranks; measured max |diff| 4.4e-7 (fp32), 2.3e-5 (bf16). */
START_TEST(tensor_llama)
{
    llama_tensor_trains("1f1b.pp", "-D S=2 -D B=4", 2, 4, "");
    llama_tensor_trains("1f1b.pp", "-D S=2 -D B=4 --precision bf16", 2, 4, BF16_TOL);
    llama_tensor_trains("zb-h1.pp", "-D S=2 -D B=4", 2, 4, "");
    llama_tensor_trains("zb-h1.pp", "-D S=2 -D B=4 --precision bf16", 2, 4, BF16_TOL);
}
END_TEST

/* Tied embeddings under tensor = 2: the tied gradients' offset is the
 * shard's (the head after the rank's layers; whole, it pointed past them:
 * garbage weights for gpt, a heap overrun for llama). SGD, the default
 * tolerance (measured 3e-8 both): AdamW's first steps move a weight whose
 * gradient is near 0 by about lr whatever its rounding (see above). */
START_TEST(tensor_tied)
{
    block_tensor_trains(GPT_TIED_BLOCK, "1f1b.pp", "-D S=2 -D B=4", 2, 4,
                        "--atol 1e-5 --rtol 1e-4");
    block_tensor_trains(LLAMA_TIED_BLOCK, "1f1b.pp", "-D S=2 -D B=4", 2, 4,
                        "--atol 1e-5 --rtol 1e-4");
}
END_TEST

START_TEST(tensor_llama_pp_dp)
{
    llama_tensor_trains("pp-dp.pp", "-D S=2 -D D=2 -D B=4", 2, 8, "");
}
END_TEST

/* Checkpoints hold whole stages: a run with tensor = 2 resumes with
 * tensor = 1 (--reshard) and the other way round, each ending where the
 * reference does after 4 steps; resumed at the same T, the weights are
 * those of the uninterrupted run bit for bit. */
static void reshard(const char *from, int np_from, const char *to, int np_to, const char *dir)
{
    char cmd[4096], *out;
    snprintf(cmd, sizeof cmd,
             "--backend cpu %s/%s --steps 2 --checkpoint-every 1 --checkpoint-dir %s/ck --quiet",
             dir, from, dir);
    free(mpi_ok(np_from, cmd));
    snprintf(cmd, sizeof cmd,
             "--backend cpu %s/%s --steps 4 --resume %s/ck --reshard --save %s/w --quiet", dir, to,
             dir, dir);
    out = mpi_ok(np_to, cmd);
    ck_assert_msg(strstr(out, "resharded"), "%s -> %s: not resumed from the checkpoint:\n%s", from,
                  to, out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref; rm -rf %s/ck %s/w", PP_ROOT, dir,
             dir, dir, dir);
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(r.status == 0 && strstr(r.out, "within tolerance"),
                  "%s -> %s: weights differ from the reference (%s):\n%s", from, to, cmd, r.out);
    proc_free(&r);
}

START_TEST(tensor_checkpoint_reshard)
{
    char *src = with_tensor("1f1b.pp", 2), *dir = temp_dir(), cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -D S=2 -D B=4 -o %s/t2 -q && %s/bin/ppc %s/schedules/1f1b.pp -D S=2 "
             "-D B=4 -o %s/t1 -q && %s/bin/ppvm --reference %s/t1 --steps 4 --save %s/ref --quiet",
             PP_ROOT, src, dir, PP_ROOT, PP_ROOT, dir, PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    reshard("t2", 4, "t1", 2, dir);
    reshard("t1", 2, "t2", 4, dir);
    /* the same T: exactly the uninterrupted run */
    snprintf(cmd, sizeof cmd, "--backend cpu %s/t2 --steps 4 --save %s/u --quiet", dir, dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd,
             "--backend cpu %s/t2 --steps 2 --checkpoint-every 2 --checkpoint-dir %s/ck --quiet",
             dir, dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/t2 --steps 4 --resume %s/ck --save %s/w --quiet",
             dir, dir, dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/u --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    free(run_expect(cmd, 0));
    remove_dir(dir);
    remove_file_dir(src);
}
END_TEST

/* The gpt's checkpoints hold whole stages too, AdamW's moments included:
 * T = 2 resumes with T = 1 and back, ending at the reference's weights. */
START_TEST(tensor_gpt_checkpoint_reshard)
{
    char *dir = temp_dir(), *sub = malloc(strlen(dir) + 8), f2[1024], f1[1024], cmd[8192];
    sprintf(sub, "%s/one", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    gpt_file("1f1b.pp", 2, 0, dir, f2, sizeof f2);
    gpt_file("1f1b.pp", 1, 0, sub, f1, sizeof f1);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -D S=2 -D B=4 -o %s/t2 -q && %s/bin/ppc %s -D S=2 -D B=4 -o %s/t1 -q "
             "&& %s/bin/ppvm --reference %s/t1 --steps 4 --save %s/ref --quiet",
             PP_ROOT, f2, dir, PP_ROOT, f1, dir, PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    reshard("t2", 4, "t1", 2, dir);
    reshard("t1", 2, "t2", 4, dir);
    free(sub);
    remove_dir(dir);
}
END_TEST

/* The cuda backend on the GPU stand-ins (tests/standin/: host code, not a
 * GPU; bin/ppvm-standin, which make test builds): the tensor all-reduces
 * as ncclAllReduce on each tensor group's ncclCommSplit communicator, on
 * the compute stream, under both of the stand-in's adversarial stream
 * orders, and through the host with --transport mpi; and bf16 on both
 * backends, against the bf16 reference within the GPU suite's tolerance
 * (--atol 1e-4 --rtol 1e-3: bf16 rounds the all-reduced sums' next
 * operands; measured 3.7e-5). */
static void standin_run(const char *dir, const char *plan, const char *env, const char *flags,
                        const char *save)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s mpirun --oversubscribe --bind-to none -x PP_STANDIN_GPUS=4 -x PP_STANDIN_ORDER "
             "-np 4 %s/bin/ppvm-standin %s/%s --backend cuda %s --steps 3 --timeout 120 "
             "--save %s/%s --quiet",
             env, PP_ROOT, dir, plan, flags, dir, save);
    proc_result r;
    run_proc(cmd, MPIRUN_TIMEOUT, &r);
    ck_assert_msg(r.status == 0, "%s failed: %s", cmd, r.out);
    proc_free(&r);
}

static void compare_ok(const char *dir, const char *a, const char *b, const char *tol)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/%s %s/%s %s", PP_ROOT, dir, a, dir, b, tol);
    proc_result r;
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(r.status == 0 && strstr(r.out, "within tolerance"), "%s:\n%s", cmd, r.out);
    proc_free(&r);
}

START_TEST(tensor_cuda_standin)
{
    char *src = with_tensor("1f1b.pp", 2), *dir = temp_dir(), cmd[4096], *out;
    snprintf(cmd, sizeof cmd,
             "test -x %s/bin/ppvm-standin && %s/bin/ppc %s -D S=2 -D B=4 -o %s/t2 -q && "
             "%s/bin/ppc %s -D S=2 -D B=4 --precision bf16 -o %s/b2 -q && "
             "%s/bin/ppvm --reference %s/t2 --steps 3 --save %s/ref --quiet && "
             "%s/bin/ppvm --reference %s/b2 --steps 3 --save %s/bref --quiet",
             PP_ROOT, PP_ROOT, src, dir, PP_ROOT, src, dir, PP_ROOT, dir, dir, PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    standin_run(dir, "t2", "PP_STANDIN_ORDER=latest", "--transport nccl", "n1");
    compare_ok(dir, "n1", "ref", "");
    standin_run(dir, "t2", "PP_STANDIN_ORDER=fifo", "--transport nccl", "n2");
    compare_ok(dir, "n2", "ref", "");
    standin_run(dir, "t2", "PP_STANDIN_ORDER=latest", "--transport mpi", "m1");
    compare_ok(dir, "m1", "ref", "");
    standin_run(dir, "b2", "PP_STANDIN_ORDER=latest", "--transport nccl", "bn");
    compare_ok(dir, "bn", "bref", "--atol 1e-4 --rtol 1e-3");
    snprintf(cmd, sizeof cmd, "--backend cpu %s/b2 --steps 3 --save %s/bc --quiet", dir, dir);
    out = mpi_ok(4, cmd);
    free(out);
    compare_ok(dir, "bc", "bref", "--atol 1e-4 --rtol 1e-3");
    remove_dir(dir);
    remove_file_dir(src);
}
END_TEST

/* The gpt split on the cuda backend (gpt_cuda.cu) on the stand-ins: fp32
 * with AdamW under both stream orders (nccl) and through the host (mpi),
 * bf16 with SGD, each against the whole model's reference. */
START_TEST(tensor_gpt_cuda_standin)
{
    char *dir = temp_dir(), f32[1024], f16[1024], cmd[16384];
    char *sub = malloc(strlen(dir) + 8);
    sprintf(sub, "%s/b", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    gpt_file("1f1b.pp", 2, 0, dir, f32, sizeof f32);
    gpt_file("1f1b.pp", 2, 1, sub, f16, sizeof f16);
    snprintf(cmd, sizeof cmd,
             "test -x %s/bin/ppvm-standin && %s/bin/ppc %s -D S=2 -D B=4 -o %s/t2 -q && "
             "%s/bin/ppc %s -D S=2 -D B=4 --precision bf16 -o %s/b2 -q && "
             "%s/bin/ppvm --reference %s/t2 --steps 3 --save %s/ref --quiet && "
             "%s/bin/ppvm --reference %s/b2 --steps 3 --save %s/bref --quiet",
             PP_ROOT, PP_ROOT, f32, dir, PP_ROOT, f16, dir, PP_ROOT, dir, dir, PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    standin_run(dir, "t2", "PP_STANDIN_ORDER=latest", "--transport nccl", "n1");
    compare_ok(dir, "n1", "ref", "");
    standin_run(dir, "t2", "PP_STANDIN_ORDER=fifo", "--transport nccl", "n2");
    compare_ok(dir, "n2", "ref", "");
    standin_run(dir, "t2", "PP_STANDIN_ORDER=latest", "--transport mpi", "m1");
    compare_ok(dir, "m1", "ref", "");
    standin_run(dir, "b2", "PP_STANDIN_ORDER=latest", "--transport nccl", "bn");
    compare_ok(dir, "bn", "bref", BF16_TOL);
    free(sub);
    remove_dir(dir);
}
END_TEST

/* The llama split on the cuda backend (llama_cuda.cu) on the stand-ins:
 * fp32 with AdamW under both stream orders (nccl) and through the host
 * (mpi), bf16 with SGD, each against the whole model's reference. */
START_TEST(tensor_llama_cuda_standin)
{
    char *dir = temp_dir(), f32[1024], f16[1024], cmd[16384];
    char *sub = malloc(strlen(dir) + 8);
    sprintf(sub, "%s/b", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    model_file("1f1b.pp", LLAMA_BLOCK, 2, 0, dir, f32, sizeof f32);
    model_file("1f1b.pp", LLAMA_BLOCK, 2, 1, sub, f16, sizeof f16);
    snprintf(cmd, sizeof cmd,
             "test -x %s/bin/ppvm-standin && %s/bin/ppc %s -D S=2 -D B=4 -o %s/t2 -q && "
             "%s/bin/ppc %s -D S=2 -D B=4 --precision bf16 -o %s/b2 -q && "
             "%s/bin/ppvm --reference %s/t2 --steps 3 --save %s/ref --quiet && "
             "%s/bin/ppvm --reference %s/b2 --steps 3 --save %s/bref --quiet",
             PP_ROOT, PP_ROOT, f32, dir, PP_ROOT, f16, dir, PP_ROOT, dir, dir, PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    standin_run(dir, "t2", "PP_STANDIN_ORDER=latest", "--transport nccl", "n1");
    compare_ok(dir, "n1", "ref", "");
    standin_run(dir, "t2", "PP_STANDIN_ORDER=fifo", "--transport nccl", "n2");
    compare_ok(dir, "n2", "ref", "");
    standin_run(dir, "t2", "PP_STANDIN_ORDER=latest", "--transport mpi", "m1");
    compare_ok(dir, "m1", "ref", "");
    standin_run(dir, "b2", "PP_STANDIN_ORDER=latest", "--transport nccl", "bn");
    compare_ok(dir, "bn", "bref", BF16_TOL);
    free(sub);
    remove_dir(dir);
}
END_TEST

/* A llama T = 2 checkpoint (AdamW's moments included) resumed with T = 1
 * and back, ending at the reference's weights (llama_shard_copy both ways). */
START_TEST(tensor_llama_checkpoint_reshard)
{
    char *dir = temp_dir(), *sub = malloc(strlen(dir) + 8), f2[1024], f1[1024], cmd[8192];
    sprintf(sub, "%s/one", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    model_file("1f1b.pp", LLAMA_BLOCK, 2, 0, dir, f2, sizeof f2);
    model_file("1f1b.pp", LLAMA_BLOCK, 1, 0, sub, f1, sizeof f1);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -D S=2 -D B=4 -o %s/t2 -q && %s/bin/ppc %s -D S=2 -D B=4 -o %s/t1 -q "
             "&& %s/bin/ppvm --reference %s/t1 --steps 4 --save %s/ref --quiet",
             PP_ROOT, f2, dir, PP_ROOT, f1, dir, PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    reshard("t2", 4, "t1", 2, dir);
    reshard("t1", 2, "t2", 4, dir);
    free(sub);
    remove_dir(dir);
}
END_TEST

/* ppvm --profile measures the tensor link (vm/profile_allreduce.c): a T = 2
 * run's costs file has "tensor_latency" and "tensor_bandwidth" (positive),
 * a T = 1 run's neither; ppc --costs prices each tensor all-reduce with
 * them (the report's tensor line) on both the cpu backend and the cuda
 * one on the stand-ins. */
static void profile_prices(const char *dir, const char *src, const char *prof)
{
    char path[1024], cmd[4096], want[256];
    snprintf(path, sizeof path, "%s/%s", dir, prof);
    const char *failed = NULL;
    size_t len;
    char *json = pp_read_file(path, &len, &failed);
    ck_assert_msg(json != NULL, "no profile %s", path);
    double lat, bw;
    ck_assert_msg(profile_values(json, "tensor_latency", &lat, 1) == 1 &&
                      profile_values(json, "tensor_bandwidth", &bw, 1) == 1,
                  "%s: no tensor link:\n%s", path, json);
    free(json);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -D S=2 -D B=4 --costs %s -o %s/pc -q && cat %s/pc/report.txt", PP_ROOT,
             src, path, dir, dir);
    char *out = run_expect(cmd, 0);
    snprintf(want, sizeof want, "each takes %g + bytes / %g\n", lat, bw);
    ck_assert_msg(strstr(out, want), "%s: expected '%s' in the report:\n%s", prof, want, out);
    free(out);
}

START_TEST(tensor_profile)
{
    char *src = with_tensor("1f1b.pp", 2), *dir = temp_dir(), cmd[4096], path[1024];
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -D S=2 -D B=4 -o %s/t2 -q && %s/bin/ppc %s/schedules/1f1b.pp -D S=2 "
             "-D B=4 -o %s/t1 -q",
             PP_ROOT, src, dir, PP_ROOT, PP_ROOT, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/t2 --steps 3 --profile %s/p2.json --quiet", dir,
             dir);
    free(mpi_ok(4, cmd));
    profile_prices(dir, src, "p2.json");
    snprintf(cmd, sizeof cmd, "--backend cpu %s/t1 --steps 3 --profile %s/p1.json --quiet", dir,
             dir);
    free(mpi_ok(2, cmd));
    snprintf(path, sizeof path, "%s/p1.json", dir);
    const char *failed = NULL;
    size_t len;
    char *json = pp_read_file(path, &len, &failed);
    ck_assert_msg(json && strstr(json, "\"latency\"") && !strstr(json, "tensor_"),
                  "tensor = 1: expected the link and no tensor entries:\n%s", json ? json : "");
    free(json);
    /* the cuda backend: ncclAllReduce on the tensor group's communicator */
    snprintf(cmd, sizeof cmd, "test -x %s/bin/ppvm-standin", PP_ROOT);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "--transport nccl --profile %s/pc.json", dir);
    standin_run(dir, "t2", "PP_STANDIN_ORDER=latest", cmd, "c");
    profile_prices(dir, src, "pc.json");
    remove_dir(dir);
    remove_file_dir(src);
}
END_TEST

/* ------------------------------- overlapped pairs (isa/tensor_lane.h) */

/* The library's files with `overlap` (1f1b-overlap, v-overlap, dualpipev:
 * pairs of a forward and a backward, the second job's all-reduces on its
 * tensor group's lane 1) with tensor = 2 on 4 ranks. */
#define OVERLAP_FILES(X)                                                                           \
    X("1f1b-overlap.pp", "-D S=2 -D B=4")                                                          \
    X("v-overlap.pp", "-D W=2 -D B=4")                                                             \
    X("dualpipev.pp", "-D W=2 -D B=4")

/* the mlp, fp32, on the cpu backend (measured max |diff| 1.2e-7) */
START_TEST(tensor_overlap)
{
#define MLP_TRAINS(f, defs) tensor_trains(f, defs, 2, 4);
    OVERLAP_FILES(MLP_TRAINS)
#undef MLP_TRAINS
}
END_TEST

/* the gpt and the llama, fp32 with AdamW and bf16 with SGD */
START_TEST(tensor_gpt_overlap)
{
#define GPT_TRAINS(f, defs)                                                                        \
    gpt_tensor_trains(f, defs, 2, 4, "");                                                          \
    gpt_tensor_trains(f, defs " --precision bf16", 2, 4, BF16_TOL);
    OVERLAP_FILES(GPT_TRAINS)
#undef GPT_TRAINS
}
END_TEST

/* llama bf16 on the V-shaped overlap files (4 stages): the weights are bit
 * for bit those of depth-first.pp's with tensor = 2 (4 stages, no pairs),
 * whose own distance to the reference, 3.6e-4 at one embedding weight,
 * is above BF16_TOL with or without pairs (llama's T = 2 split in bf16 over
 * 4 stages; 1f1b-overlap's 2 stages are within it). */
static void llama_bf16_like_depth_first(const char *schedule)
{
    char *dir = temp_dir(), *sub = malloc(strlen(dir) + 8), f[1024], g[1024], cmd[8192];
    sprintf(sub, "%s/d", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    model_file(schedule, LLAMA_BLOCK, 2, 1, dir, f, sizeof f);
    model_file("depth-first.pp", LLAMA_BLOCK, 2, 1, sub, g, sizeof g);
    snprintf(cmd, sizeof cmd,
             "%s/bin/ppc %s -D W=2 -D B=4 --precision bf16 -o %s/v -q && grep -q 'on lane 1' "
             "%s/v/rank0.txt && %s/bin/ppc %s -D W=2 -D S=4 -D B=4 --precision bf16 -o %s/l -q",
             PP_ROOT, f, dir, dir, PP_ROOT, g, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/v --steps 3 --save %s/wv --quiet", dir, dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/l --steps 3 --save %s/wl --quiet", dir, dir);
    free(mpi_ok(4, cmd));
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/wv %s/wl --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    free(run_expect(cmd, 0));
    free(sub);
    remove_dir(dir);
}

START_TEST(tensor_llama_overlap)
{
    llama_tensor_trains("1f1b-overlap.pp", "-D S=2 -D B=4", 2, 4, "");
    llama_tensor_trains("1f1b-overlap.pp", "-D S=2 -D B=4 --precision bf16", 2, 4, BF16_TOL);
    llama_tensor_trains("v-overlap.pp", "-D W=2 -D B=4", 2, 4, "");
    llama_tensor_trains("dualpipev.pp", "-D W=2 -D B=4", 2, 4, "");
    llama_bf16_like_depth_first("v-overlap.pp");
    llama_bf16_like_depth_first("dualpipev.pp");
}
END_TEST

/* The overlap files on the cuda backend on the stand-ins: the pair's jobs
 * on two streams, their all-reduces on two communicators. Under
 * PP_STANDIN_ORDER=split the two ranks of a group run their streams in
 * opposite orders (latest, fifo), so with one communicator a pair's two
 * jobs' all-reduces would meet the other rank's other job's (checked: the
 * weights then differ by up to 0.85). fp32 under one NCCL member order
 * (and split; each TCase its own, so every model and every file meets all
 * three over the nine) and through the host (mpi) against the reference;
 * bf16 bit for bit the
 * weights of the file's twin without pairs (1f1b.pp, depth-first.pp: the
 * same stages' math) on the stand-ins, and within BF16_TOL of the
 * reference on 2 stages (on 4 the cuda bf16 path is 1.4e-4 from it at one
 * weight with tensor = 1 and no pairs too). block: the model ("": the
 * file's mlp). */
static const struct {
    const char *file, *defs, *twin, *twin_defs;
} OVERLAP_TWINS[] = {
    {"1f1b-overlap.pp", "-D S=2 -D B=4", "1f1b.pp", "-D S=2 -D B=4"},
    {"v-overlap.pp", "-D W=2 -D B=4", "depth-first.pp", "-D W=2 -D S=4 -D B=4"},
    {"dualpipev.pp", "-D W=2 -D B=4", "depth-first.pp", "-D W=2 -D S=4 -D B=4"},
};

/* schedule with block's model (or its own: block "") and tensor = 2, in
 * dir/<sub>/: the file's path in file (sgd: the model file's optimizer
 * left as is). */
static void overlap_file(const char *block, const char *schedule, int sgd, const char *dir,
                         const char *sub, char *file, size_t n)
{
    char d[512];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    ck_assert_int_eq(mkdir(d, 0755), 0);
    if (*block) {
        model_file(schedule, block, 2, sgd, d, file, n);
        return;
    }
    char *src = with_tensor(schedule, 2), cmd[4096];
    snprintf(file, n, "%s/t.pp", d);
    snprintf(cmd, sizeof cmd, "cp %s %s", src, file);
    free(run_expect(cmd, 0));
    remove_file_dir(src);
}

static void overlap_standin(const char *block, int k, int order)
{
    char *dir = temp_dir(), f32[1024], f16[1024], t16[1024], cmd[16384];
    overlap_file(block, OVERLAP_TWINS[k].file, 0, dir, "a", f32, sizeof f32);
    overlap_file(block, OVERLAP_TWINS[k].file, 1, dir, "b", f16, sizeof f16);
    overlap_file(block, OVERLAP_TWINS[k].twin, 1, dir, "c", t16, sizeof t16);
    const char *defs = OVERLAP_TWINS[k].defs;
    snprintf(
        cmd, sizeof cmd,
        "test -x %s/bin/ppvm-standin && %s/bin/ppc %s %s -o %s/t2 -q && "
        "%s/bin/ppc %s %s --precision bf16 -o %s/b2 -q && grep -q 'on lane 1' %s/t2/rank0.txt "
        "&& %s/bin/ppc %s %s --precision bf16 -o %s/c2 -q && ! grep -q Overlap %s/c2/rank0.txt "
        "&& %s/bin/ppvm --reference %s/t2 --steps 3 --save %s/ref --quiet && "
        "%s/bin/ppvm --reference %s/b2 --steps 3 --save %s/bref --quiet",
        PP_ROOT, PP_ROOT, f32, defs, dir, PP_ROOT, f16, defs, dir, dir, PP_ROOT, t16,
        OVERLAP_TWINS[k].twin_defs, dir, dir, PP_ROOT, dir, dir, PP_ROOT, dir, dir);
    free(run_expect(cmd, 0));
    static const char *const orders[] = {"reversed", "posted", "interleaved"};
    char env[128];
    snprintf(env, sizeof env, "PP_STANDIN_ORDER=split PP_STANDIN_NCCL_ORDER=%s", orders[order]);
    standin_run(dir, "t2", env, "--transport nccl", "n");
    compare_ok(dir, "n", "ref", "");
    standin_run(dir, "t2", "PP_STANDIN_ORDER=split", "--transport mpi", "m1");
    compare_ok(dir, "m1", "ref", "");
    standin_run(dir, "b2", "PP_STANDIN_ORDER=split", "--transport nccl", "bn");
    standin_run(dir, "c2", "PP_STANDIN_ORDER=split", "--transport nccl", "cn");
    compare_ok(dir, "bn", "cn", "--atol 0 --rtol 0");
    if (strstr(defs, "S=2"))
        compare_ok(dir, "bn", "bref", BF16_TOL);
    remove_dir(dir);
}

/* one TCase per model and file (10-50 s each alone here), the member
 * orders rotated: model m's file k under order (k + m) % 3 */
START_TEST(tensor_overlap_cuda_standin_0) { overlap_standin("", 0, 0); }
END_TEST
START_TEST(tensor_overlap_cuda_standin_1) { overlap_standin("", 1, 1); }
END_TEST
START_TEST(tensor_overlap_cuda_standin_2) { overlap_standin("", 2, 2); }
END_TEST
START_TEST(tensor_gpt_overlap_cuda_standin_0) { overlap_standin(GPT_BLOCK, 0, 1); }
END_TEST
START_TEST(tensor_gpt_overlap_cuda_standin_1) { overlap_standin(GPT_BLOCK, 1, 2); }
END_TEST
START_TEST(tensor_gpt_overlap_cuda_standin_2) { overlap_standin(GPT_BLOCK, 2, 0); }
END_TEST
START_TEST(tensor_llama_overlap_cuda_standin_0) { overlap_standin(LLAMA_BLOCK, 0, 2); }
END_TEST
START_TEST(tensor_llama_overlap_cuda_standin_1) { overlap_standin(LLAMA_BLOCK, 1, 0); }
END_TEST
START_TEST(tensor_llama_overlap_cuda_standin_2) { overlap_standin(LLAMA_BLOCK, 2, 1); }
END_TEST

#define TENSOR_E2E_TESTS(X)                                                                        \
    X(tensor_1f1b, 4)                                                                              \
    X(tensor_gpipe, 4)                                                                             \
    X(tensor_zb_h1, 4)                                                                             \
    X(tensor_interleaved, 4)                                                                       \
    X(tensor_ddp_fsdp, 4)                                                                          \
    X(tensor_4, 8)                                                                                 \
    X(tensor_pp_dp, 8)                                                                             \
    X(tensor_recompute, 4)                                                                         \
    X(tensor_zero_bubble, 4)                                                                       \
    X(tensor_looped, 4)                                                                            \
    X(tensor_1f1b_variants, 4)                                                                     \
    X(tensor_lpp_fsdp, 4)                                                                          \
    X(tensor_gpt_file, 4)                                                                          \
    X(tensor_gpt_pipelines, 4)                                                                     \
    X(tensor_gpt_replicas, 4)                                                                      \
    X(tensor_gpt_4, 8)                                                                             \
    X(tensor_gpt_pp_dp, 8)                                                                         \
    X(tensor_llama, 4)                                                                             \
    X(tensor_llama_pp_dp, 8)                                                                       \
    X(tensor_tied, 4)                                                                              \
    X(tensor_llama_cuda_standin, 4)                                                                \
    X(tensor_llama_checkpoint_reshard, 4)                                                          \
    X(tensor_profile, 4)                                                                           \
    X(tensor_gpt_cuda_standin, 4)                                                                  \
    X(tensor_gpt_checkpoint_reshard, 4)                                                            \
    X(tensor_checkpoint_reshard, 4)                                                                \
    X(tensor_cuda_standin, 4)                                                                      \
    X(tensor_overlap, 4)                                                                           \
    X(tensor_gpt_overlap, 4)                                                                       \
    X(tensor_llama_overlap, 4)                                                                     \
    X(tensor_overlap_cuda_standin_0, 4)                                                            \
    X(tensor_overlap_cuda_standin_1, 4)                                                            \
    X(tensor_overlap_cuda_standin_2, 4)                                                            \
    X(tensor_gpt_overlap_cuda_standin_0, 4)                                                        \
    X(tensor_gpt_overlap_cuda_standin_1, 4)                                                        \
    X(tensor_gpt_overlap_cuda_standin_2, 4)                                                        \
    X(tensor_llama_overlap_cuda_standin_0, 4)                                                      \
    X(tensor_llama_overlap_cuda_standin_1, 4)                                                      \
    X(tensor_llama_overlap_cuda_standin_2, 4)

PP_JOB_SUITE(tensor_e2e, TENSOR_E2E_TESTS)
