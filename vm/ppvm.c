/* ppvm.c - the VM's command line: one process per rank under mpirun.
 *
 *   mpirun -np W ppvm [options] DIR         rank r runs DIR/rank<r>.bin
 *   ppvm [options] DIR/rank0.bin            run one given plan file
 *   ppvm --reference [options] PLAN         train the same model in one process
 *   ppvm --compare DIR_A DIR_B              compare two saved weight sets
 *
 * --backend picks cuda (vm/interp_cuda.c, when built with CUDA) or cpu
 * (vm/interp.c), the two implementations of vm/backend.h that the one
 * driver (vm/driver.c, pp_run_plan) runs; --transport picks nccl or mpi for
 * the cuda backend (the cpu backend has only mpi). All ranks settle the
 * backend together, so a rank without a GPU ends every rank with a
 * message, not a hang.
 *
 * Exit status: 0 success; 1 the run failed (every rank, with a message:
 * a plan, data or --profile file that cannot be used, a --save or
 * --checkpoint-dir directory that cannot be written, a checkpoint that
 * cannot be written, --resume without a usable checkpoint, a set-up
 * failure, a loss or gradient that is not finite, a --save that fails
 * (every rank; the previous save is kept: vm/save.h); --compare: weights that differ or cannot be read); 2 a bad
 * command line; 128 + N (143 for SIGTERM, 130 for SIGINT) when signal N
 * stopped the run after a step, every rank. Only main returns these; a
 * failed CUDA, NCCL or MPI call ends every rank with 1 (MPI_Abort), and
 * the watchdog (--timeout) ends its rank with 1, a second signal or
 * --grace with 128 + N (_exit, vm/guard.c).
 *
 * --no-compute is the interpreter's benchmark mode (vm/vmbench.h): no
 * kernel, 4-byte messages, each instruction timed; it refuses the flags
 * that need a trained model, a loss or measured costs (check_no_compute).
 *
 * --checkpoint-dir/--checkpoint-every/--checkpoint-keep, --resume and
 * --reshard are vm/checkpoint.c's (checked together here).
 *
 * Before training, all ranks exchange what they loaded, and every rank
 * refuses to start (exit 1, with a message) unless all plans loaded, share
 * one plan id, and were compiled for this world size and this rank; then
 * rank 0 gathers every plan and verifies them together (isa/verify.c: the
 * headers agree, every transfer meets its partner, every job runs once,
 * the plan id is the hash of the contents). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef PP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "backend.h"
#include "check.h"
#include "checkpoint.h"
#include "guard.h"
#include "../isa/suggest.h"
#include "../isa/verify.h"
#include "vm.h"
#include "weights.h"

enum { BACKEND_UNSET = -1, BACKEND_CPU, BACKEND_CUDA };
enum { TRANSPORT_UNSET = -1 }; /* else a pp_transport */

/* ppvm --lr, --weight-decay, --adam-eps, --adam-beta2 and --warmup,
 * negative where not given. */
typedef struct {
    double lr, weight_decay, eps, warmup, beta2;
} optim_flags;

typedef struct {
    pp_train_opts train;
    const char *plan;   /* directory or file */
    const char *cmp[2]; /* --compare */
    int reference, compare;
    int backend, transport; /* BACKEND_*, TRANSPORT_UNSET or a pp_transport */
    optim_flags optim; /* --lr, --weight-decay, --adam-eps; the plan's optimizer sets the rest */
    double atol, rtol;
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np W ppvm [options] PLAN_DIR   (rank r runs PLAN_DIR/rank<r>.bin)\n"
            "       ppvm [options] PLAN_DIR/rank<r>.bin\n"
            "       ppvm --reference [options] PLAN         (train in one process: the oracle)\n"
            "       ppvm --compare DIR_A DIR_B [--atol X] [--rtol X]\n"
            "options:\n"
            "  --steps N     training steps (default 10)\n"
            "  --data FILE   training data (default %s):\n"
            "                an llm.c token shard (int32 header 20240520, 1, count, 253 more;\n"
            "                then count uint16 tokens), else raw bytes, one token each\n"
            "  --seed N      seed of the initial weights and the microbatches (default 1)\n"
            "  --lr X        learning rate (default 0.3 for the plan's optimizer sgd,\n"
            "                4e-3 for adamw)\n"
            "  --weight-decay X  AdamW's decoupled weight decay (default 0.01)\n"
            "  --adam-eps X  AdamW's epsilon (default 1e-8)\n"
            "  --adam-beta2 X  AdamW's second-moment decay (default 0.999; GPTs often 0.95)\n"
            "  --warmup N    raise the learning rate linearly over the first N steps\n"
            "                (step t < N uses lr * t / N; default 0: no warmup)\n"
            "  --save DIR    write the final weights to DIR/stage<s>.w (--steps 0: the\n"
            "                initial weights)\n"
            "  --quiet       no per-step lines\n"
            "  --version     print ppvm's version and its plan format's, then exit\n"
            "  --loss-digits N  decimals of the per-step loss (default 4)\n"
            "  --backend B   cuda or cpu (default: cuda when this ppvm has CUDA and every rank\n"
            "                sees a GPU, else cpu; --reference always trains on the cpu)\n"
            "  --transport T the cuda backend's transfers: nccl (default when every rank has a\n"
            "                GPU of its own) or mpi (staged through host memory; the default\n"
            "                when ranks share a GPU). The cpu backend has only mpi.\n"
            "  --timeout S   end the run when a step (or the start-up, or what follows the\n"
            "                last step) has not finished after S seconds, naming the\n"
            "                instruction and the peer this rank waits on (default 300)\n"
            "  --grace S     after a SIGTERM or SIGINT, finish the step, stop every rank\n"
            "                together (exit 128 + the signal's number), write a checkpoint\n"
            "                (with --checkpoint-every) and --save; a second\n"
            "                signal, or S seconds without the step ending, exits at once\n"
            "                (default 30)\n"
            "  --skip-nonfinite  skip a step whose loss or gradients are not finite (every\n"
            "                rank keeps its weights and optimizer state) instead of stopping\n"
            "                with exit 1\n"
            "  --epilogues E cuda: on (default) fuses bias, GELU and residual adds into the\n"
            "                GEMMs where cuBLASLt offers it; off runs them as separate kernels\n"
            "  --graph G     cuda: auto (default) captures a rank's step once as a CUDA\n"
            "                graph and replays it each step where the run allows (mpi: one\n"
            "                graph between two transfers; else it launches instruction by\n"
            "                instruction and says why); on refuses a run that cannot; off\n"
            "                always launches instruction by instruction\n"
            "  --profile FILE  write what this run measured (each stage's F, B, W and\n"
            "                optimizer step O, the link's latency and bandwidth, in seconds)\n"
            "                as a ppc --costs file\n"
            "  --checkpoint-dir DIR  with --checkpoint-every: where checkpoints go\n"
            "                (DIR/step-NNNNNN/: each stage's weights, optimizer state and\n"
            "                bf16 copy, then a manifest; default: --resume's DIR)\n"
            "  --checkpoint-every N  write a checkpoint after every N-th step\n"
            "  --checkpoint-keep K   keep the K newest checkpoints (default 2)\n"
            "  --resume DIR  continue from the newest complete checkpoint in DIR that this\n"
            "                plan can use (older ones are tried when one is not); --steps\n"
            "                is the total, counted from step 0 (a checkpoint past it is refused)\n"
            "  --reshard     with --resume: accept a checkpoint of another plan (another\n"
            "                schedule) of the same model\n"
            "  --deterministic  sum each stage's weight gradients in one fixed order, the\n"
            "                reference's (microbatch 0, 1, ..., B-1, each computed on its own),\n"
            "                whatever the schedule, so that a run and --reference\n"
            "                --deterministic end with the same bits (--atol 0 --rtol 0;\n"
            "                on cuda, every cuda run of the model alike); costs memory and\n"
            "                time (vm/README.md); picks the cpu backend unless --backend\n"
            "                cuda, which it takes with --transport mpi\n"
            "  --no-compute  benchmark mode: run every instruction's dispatch, slot lookups,\n"
            "                waits and transfers but no kernel (every message 4 bytes), time\n"
            "                each instruction, and print ns per instruction by opcode and\n"
            "                family instead of a loss (vm/README.md, \"Benchmark mode\")\n",
            PP_DEFAULT_DATA);
}

#ifndef PP_VERSION
#define PP_VERSION "unknown" /* the Makefile passes git describe's */
#endif

/* Only one process of an mpirun prints command-line errors. */
static int first_process(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    return !r || !strcmp(r, "0");
}

static int parse_num(const char *flag, const char *s, double lo, double hi, int integer,
                     double *out)
{
    char *end;
    errno = 0;
    double v = integer ? (double)strtoll(s, &end, 10) : strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        if (first_process())
            pp_vm_error(-1, "%s %s: expected %s in [%g, %g]", flag, s,
                        integer ? "an integer" : "a number", lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* The checkpoint flags go together: --checkpoint-every needs a directory
 * (--checkpoint-dir, else --resume's), --checkpoint-dir needs
 * --checkpoint-every, --reshard needs --resume, and none goes with
 * --reference or --compare. 0, or -1 (said). */
static int check_checkpoint_flags(options *o)
{
    pp_train_opts *t = &o->train;
    const char *why = NULL;
    if ((t->checkpoint_dir || t->checkpoint_every || t->resume || t->reshard) &&
        (o->reference || o->compare))
        why = o->reference ? "checkpoints and --resume are for a plan's run under mpirun; they do "
                             "not go with --reference"
                           : "checkpoints and --resume do not go with --compare";
    else if (t->checkpoint_dir && !t->checkpoint_every)
        why = "--checkpoint-dir needs --checkpoint-every N (how often to write)";
    else if (t->checkpoint_every && !t->checkpoint_dir && !t->resume)
        why = "--checkpoint-every needs --checkpoint-dir DIR (or --resume DIR, which it then "
              "writes to)";
    else if (t->reshard && !t->resume)
        why = "--reshard needs --resume DIR";
    if (why) {
        if (first_process())
            pp_vm_error(-1, "%s", why);
        return -1;
    }
    if (t->checkpoint_every && !t->checkpoint_dir)
        t->checkpoint_dir = t->resume;
    return 0;
}

/* --deterministic runs on both backends and the reference (vm/determ.h).
 * Where no backend is asked for it picks the cpu, the one that sums in
 * order at full speed; on cuda its per-microbatch gradients move through
 * host memory with MPI beside the plan's transfers, which the mpi transport
 * keeps in one order with them (the host issues every transfer in plan
 * order and blocks in it), so it takes --transport mpi and refuses nccl. It
 * means nothing to --compare. 0, or -1 (said). */
static int settle_deterministic(options *o)
{
    const char *why = NULL;
    if (!o->train.deterministic)
        return 0;
    if (o->compare)
        why = "--deterministic changes how a run sums its gradients; it does not go with --compare";
    else if (o->transport == PP_TRANSPORT_NCCL)
        why = "--deterministic moves its per-microbatch gradients with MPI; it takes --transport "
              "mpi, not nccl";
    if (why) {
        if (first_process())
            pp_vm_error(-1, "%s", why);
        return -1;
    }
    if (o->backend == BACKEND_UNSET)
        o->backend = BACKEND_CPU;
    o->transport = PP_TRANSPORT_MPI;
    return 0;
}

/* --no-compute (vm/vmbench.h) trains nothing: it does not go with what
 * needs trained weights, a loss or measured costs, nor with --reference
 * or --compare. 0, or -1 (said). */
static int check_no_compute(const options *o)
{
    const pp_train_opts *t = &o->train;
    const char *with = NULL;
    if (!t->no_compute)
        return 0;
    if (o->reference)
        with = "--reference";
    else if (o->compare)
        with = "--compare";
    else if (t->save)
        with = "--save";
    else if (t->profile)
        with = "--profile";
    else if (t->checkpoint_every || t->checkpoint_dir)
        with = "--checkpoint-every";
    else if (t->resume)
        with = "--resume";
    else if (t->deterministic)
        with = "--deterministic";
    else if (t->skip_nonfinite)
        with = "--skip-nonfinite";
    if (!with)
        return 0;
    if (first_process())
        pp_vm_error(-1,
                    "--no-compute runs no kernel and trains nothing (a benchmark of the "
                    "interpreter); it does not go with %s",
                    with);
    return -1;
}

/* The value flags seen so far, with their values: a flag given twice is
 * refused (the later one would silently win). */
typedef struct {
    const char *flag[64], *val[64];
    int n;
} seen_flags;

static int given_twice(seen_flags *seen, const char *flag, const char *val)
{
    for (int k = 0; k < seen->n; k++)
        if (!strcmp(seen->flag[k], flag)) {
            if (first_process())
                pp_vm_error(-1, "%s given twice ('%s' and '%s'); give it once", flag, seen->val[k],
                            val);
            return 1;
        }
    if (seen->n < 64) {
        seen->flag[seen->n] = flag;
        seen->val[seen->n++] = val;
    }
    return 0;
}

/* 0, 1 after --help (usage printed), or -1 on a bad command line (said). */
static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->train = (pp_train_opts){.steps = 10,
                               .seed = 1,
                               .data = PP_DEFAULT_DATA,
                               .timeout = 300,
                               .loss_digits = 4,
                               .grace = 30};
    o->optim = (optim_flags){-1, -1, -1, -1, -1};
    o->backend = BACKEND_UNSET;
    o->transport = TRANSPORT_UNSET;
    o->train.checkpoint_keep = 2;
    o->atol = 1e-5;
    o->rtol = 1e-4;
    int npos = 0;
    const char *pos[3];
    seen_flags seen = {.n = 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        int has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--version")) {
            printf("ppvm (pp) %s, plan format %u\n", PP_VERSION, PP_PLAN_VERSION);
            return 1;
        } else if (!strcmp(a, "--reference"))
            o->reference = 1;
        else if (!strcmp(a, "--compare"))
            o->compare = 1;
        else if (!strcmp(a, "--quiet"))
            o->train.quiet = 1;
        else if (!strcmp(a, "--reshard"))
            o->train.reshard = 1;
        else if (!strcmp(a, "--skip-nonfinite"))
            o->train.skip_nonfinite = 1;
        else if (!strcmp(a, "--deterministic"))
            o->train.deterministic = 1;
        else if (!strcmp(a, "--no-compute"))
            o->train.no_compute = 1;
        else if (!strcmp(a, "--steps") || !strcmp(a, "--seed") || !strcmp(a, "--lr") ||
                 !strcmp(a, "--weight-decay") || !strcmp(a, "--adam-eps") ||
                 !strcmp(a, "--warmup") || !strcmp(a, "--adam-beta2") || !strcmp(a, "--data") ||
                 !strcmp(a, "--save") || !strcmp(a, "--atol") || !strcmp(a, "--rtol") ||
                 !strcmp(a, "--backend") || !strcmp(a, "--transport") || !strcmp(a, "--timeout") ||
                 !strcmp(a, "--epilogues") || !strcmp(a, "--graph") || !strcmp(a, "--profile") ||
                 !strcmp(a, "--loss-digits") || !strcmp(a, "--checkpoint-dir") ||
                 !strcmp(a, "--checkpoint-every") || !strcmp(a, "--checkpoint-keep") ||
                 !strcmp(a, "--resume") || !strcmp(a, "--grace")) {
            if (!has_value) {
                if (first_process())
                    pp_vm_error(-1, "%s needs a value", a);
                return -1;
            }
            if (given_twice(&seen, a, argv[i + 1]))
                return -1;
            const char *val = argv[++i];
            int is_dir_flag =
                !strcmp(a, "--save") || !strcmp(a, "--checkpoint-dir") || !strcmp(a, "--resume");
            if (!val[0] && (is_dir_flag || !strcmp(a, "--data") || !strcmp(a, "--profile"))) {
                if (first_process())
                    pp_vm_error(-1, "%s: expected a %s, found an empty string", a,
                                is_dir_flag ? "directory" : "file");
                return -1;
            }
            if (!strcmp(a, "--data"))
                o->train.data = val;
            else if (!strcmp(a, "--save"))
                o->train.save = val;
            else if (!strcmp(a, "--profile"))
                o->train.profile = val;
            else if (!strcmp(a, "--checkpoint-dir"))
                o->train.checkpoint_dir = val;
            else if (!strcmp(a, "--resume"))
                o->train.resume = val;
            else if (!strcmp(a, "--checkpoint-every") || !strcmp(a, "--checkpoint-keep")) {
                if (parse_num(a, val, 1, 1e9, 1, &v))
                    return -1;
                if (!strcmp(a, "--checkpoint-every"))
                    o->train.checkpoint_every = (int)v;
                else
                    o->train.checkpoint_keep = (int)v;
            } else if (!strcmp(a, "--backend")) {
                if (!strcmp(val, "cuda") || !strcmp(val, "cpu"))
                    o->backend = !strcmp(val, "cuda") ? BACKEND_CUDA : BACKEND_CPU;
                else {
                    if (first_process())
                        pp_vm_error(-1, "--backend %s: expected cuda or cpu", val);
                    return -1;
                }
            } else if (!strcmp(a, "--transport")) {
                if (!strcmp(val, "nccl") || !strcmp(val, "mpi"))
                    o->transport = !strcmp(val, "nccl") ? PP_TRANSPORT_NCCL : PP_TRANSPORT_MPI;
                else {
                    if (first_process())
                        pp_vm_error(-1, "--transport %s: expected nccl or mpi", val);
                    return -1;
                }
            } else if (!strcmp(a, "--epilogues")) {
                if (!strcmp(val, "on") || !strcmp(val, "off"))
                    o->train.no_epilogues = !strcmp(val, "off");
                else {
                    if (first_process())
                        pp_vm_error(-1, "--epilogues %s: expected on or off", val);
                    return -1;
                }
            } else if (!strcmp(a, "--graph")) {
                if (!strcmp(val, "auto") || !strcmp(val, "on") || !strcmp(val, "off"))
                    o->train.graph = !strcmp(val, "auto") ? PP_GRAPH_AUTO
                                     : !strcmp(val, "on") ? PP_GRAPH_ON
                                                          : PP_GRAPH_OFF;
                else {
                    if (first_process())
                        pp_vm_error(-1, "--graph %s: expected auto, on or off", val);
                    return -1;
                }
            } else if (!strcmp(a, "--grace")) {
                if (parse_num(a, val, 1e-3, 1e9, 0, &v))
                    return -1;
                o->train.grace = v;
            } else if (!strcmp(a, "--timeout")) {
                if (parse_num(a, val, 1e-3, 1e9, 0, &v))
                    return -1;
                o->train.timeout = v;
            } else if (!strcmp(a, "--steps")) {
                if (parse_num(a, val, 0, 1e9, 1, &v))
                    return -1;
                o->train.steps = (int)v;
            } else if (!strcmp(a, "--loss-digits")) {
                if (parse_num(a, val, 0, 12, 1, &v))
                    return -1;
                o->train.loss_digits = (int)v;
            } else if (!strcmp(a, "--seed")) {
                if (parse_num(a, val, 0, 9e15, 1, &v))
                    return -1;
                o->train.seed = (uint64_t)v;
            } else if (!strcmp(a, "--lr")) {
                if (parse_num(a, val, 1e-12, 1e3, 0, &v))
                    return -1;
                o->optim.lr = v;
            } else if (!strcmp(a, "--weight-decay")) {
                if (parse_num(a, val, 0, 1e3, 0, &v))
                    return -1;
                o->optim.weight_decay = v;
            } else if (!strcmp(a, "--warmup")) {
                if (parse_num(a, val, 0, 1e9, 1, &v))
                    return -1;
                o->optim.warmup = v;
            } else if (!strcmp(a, "--adam-beta2")) {
                if (parse_num(a, val, 0, 0.999999, 0, &v))
                    return -1;
                o->optim.beta2 = v;
            } else if (!strcmp(a, "--adam-eps")) {
                if (parse_num(a, val, 1e-30, 1, 0, &v))
                    return -1;
                o->optim.eps = v;
            } else if (parse_num(a, val, 0, 1, 0, a[2] == 'a' ? &o->atol : &o->rtol))
                return -1; /* a[2]: the 'a' of --atol or the 'r' of --rtol (a[3] is 't' in both,
                            * which sent --atol to rtol and left atol at its default) */
        } else if (a[0] == '-' && a[1]) {
            char hint[120];
            if (first_process())
                pp_vm_error(-1, "unknown option '%s'%s", a,
                            pp_did_you_mean(a, usage, hint, sizeof hint));
            return -1;
        } else if (npos < 3)
            pos[npos++] = a;
        else {
            if (first_process())
                pp_vm_error(-1, "unexpected argument '%s'", a);
            return -1;
        }
    }
    if (o->backend == BACKEND_CPU && o->transport == PP_TRANSPORT_NCCL) {
        if (first_process())
            pp_vm_error(-1, "--backend cpu --transport nccl: the cpu backend has only the mpi "
                            "transport (use --backend cuda, or --transport mpi)");
        return -1;
    }
    if (o->train.profile && (o->reference || o->compare)) {
        if (first_process())
            pp_vm_error(-1, "--profile times the ranks of a plan's run; it does not go with --%s",
                        o->reference ? "reference" : "compare");
        return -1;
    }
    if (check_checkpoint_flags(o) || settle_deterministic(o) || check_no_compute(o))
        return -1;
    int want = o->compare ? 2 : 1;
    if (npos != want) {
        if (first_process())
            pp_vm_error(-1, "expected %s",
                        o->compare ? "two weight directories after --compare"
                                   : "one plan (a directory or a rank file)");
        return -1;
    }
    if (o->compare) {
        o->cmp[0] = pos[0];
        o->cmp[1] = pos[1];
    } else
        o->plan = pos[0];
    return 0;
}

/* The settings a run of a plan with `optimizer` uses: its defaults, with
 * what the flags give. */
static pp_optim train_optim(uint32_t optimizer, const optim_flags *f)
{
    pp_optim o = pp_optim_defaults(optimizer);
    if (f->lr >= 0)
        o.lr = (float)f->lr;
    if (f->weight_decay >= 0)
        o.weight_decay = (float)f->weight_decay;
    if (f->eps >= 0)
        o.eps = (float)f->eps;
    if (f->warmup >= 0)
        o.warmup = (int)f->warmup;
    if (f->beta2 >= 0)
        o.beta2 = (float)f->beta2;
    return o;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Reads rank's plan: PLAN/rank<rank>.bin when PLAN is a directory, else
 * the file PLAN itself. 0, or -1 with err (a directory without the rank's
 * file said as such, not as a missing file). */
static int read_plan(const char *plan, int rank, pp_plan *p, char *path, size_t pathlen, char *err,
                     size_t errlen)
{
    struct stat st;
    if (is_dir(plan)) {
        snprintf(path, pathlen, "%s/rank%d.bin", plan, rank);
        if (stat(path, &st) && errno == ENOENT) {
            memset(p, 0, sizeof *p);
            snprintf(err, errlen,
                     "%.200s: the directory holds no rank%d.bin (expected a directory that "
                     "ppc -o wrote, with a plan for each rank)",
                     plan, rank);
            return -1;
        }
    } else
        snprintf(path, pathlen, "%s", plan);
    if (!pp_plan_read(path, p, err, errlen))
        return 0;
    /* what a new user most likely meant (issue 29): a schedule, or a plan
     * not compiled yet */
    size_t n = strlen(plan), at = strlen(err);
    if (n > 3 && !strcmp(plan + n - 3, ".pp"))
        snprintf(err + at, errlen - at,
                 "; '%.200s' looks like a schedule: compile it first (ppc %.200s -o out/plan), "
                 "then run the plan (bin/pprun out/plan)",
                 plan, plan);
    else if (stat(plan, &st) && errno == ENOENT)
        snprintf(err + at, errlen - at,
                 "; no such plan directory: ppc SCHEDULE.pp -o %.200s compiles one there", plan);
    return -1;
}

/* Load this rank's plan and check it; 0 or -1 with err. */
static int load(const char *plan, int rank, pp_plan *p, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (read_plan(plan, rank, p, path, sizeof path, err, errlen))
        return -1;
    char why[768];
    if (pp_verify_rank(p, why, sizeof why)) {
        snprintf(err, errlen, "%.200s: %s", path, why);
        pp_plan_free(p);
        return -1;
    }
    return 0;
}

/* What each rank tells the others before any training starts: whether it
 * loaded a plan, whose, and how many bytes its encoding has (for the
 * gather of every plan to rank 0, verify_world). */
typedef struct {
    int32_t ok;
    uint32_t rank, world;
    uint64_t plan_id, bytes;
} handshake;

/* The most bytes one rank's plan may have for the start-up gather (MPI
 * counts are int). */
#define MAX_GATHER_BYTES ((uint64_t)INT_MAX)

/* Rank 0 decodes every rank's plan and runs pp_verify_world on them; the
 * verdict is a message, "" when the plans are good. */
static void judge(const uint8_t *all, const int *counts, const int *displs, int size, char *why,
                  size_t len)
{
    pp_plan *plans = calloc((size_t)size, sizeof *plans);
    int decoded = 0;
    if (!plans)
        snprintf(why, len, "rank 0 ran out of memory verifying the plans");
    for (; plans && decoded < size; decoded++) {
        char err[512];
        if (pp_plan_decode(all + displs[decoded], (size_t)counts[decoded], &plans[decoded], err,
                           sizeof err)) {
            snprintf(why, len, "rank %d's plan as rank 0 received it: %s", decoded, err);
            break;
        }
    }
    if (plans && decoded == size && pp_verify_world(plans, size, why, len) == 0)
        why[0] = '\0';
    for (int r = 0; plans && r < decoded; r++)
        pp_plan_free(&plans[r]);
    free(plans);
}

/* Layer 2 of the verifier (isa/verify.c), collective: every rank's encoded
 * plan goes to rank 0 (sizes are already known to all from the handshake,
 * so every rank takes part in the same calls whatever its plan says), rank 0
 * judges them, and every rank learns the verdict. Returns 1 when good. */
static int verify_world(const pp_plan *p, const handshake *hs, int me, int size)
{
    uint8_t *mine = NULL;
    size_t mylen = 0;
    int enc_ok = pp_plan_encode(p, &mine, &mylen) == PP_PLAN_OK && mylen == hs[me].bytes;
    int *counts = malloc((size_t)size * sizeof *counts),
        *displs = malloc((size_t)size * sizeof *displs);
    uint64_t total = 0;
    for (int r = 0; r < size; r++)
        total += hs[r].bytes;
    uint8_t *all = me == 0 && total <= (uint64_t)INT_MAX ? malloc(total ? total : 1) : NULL;
    /* rank 0's verdict in full: a deadlock report has a line per rank and
     * ends with the cycle, which a short buffer cut off; only rank 0 prints
     * it, the others learn good or bad */
    size_t whylen = (size_t)1 << 16;
    char *why = me == 0 ? calloc(whylen, 1) : NULL;
    int ready = enc_ok && counts && displs && (me != 0 || (all && why)), bad = 0;
    if (!pp_vm_all_ok(ready, me,
                      total > (uint64_t)INT_MAX
                          ? "the plans together are too large to verify at start-up"
                          : "out of memory verifying the plans"))
        goto out;
    for (int r = 0, at = 0; r < size; r++) {
        counts[r] = (int)hs[r].bytes;
        displs[r] = at;
        at += counts[r];
    }
    mpiCheck(
        MPI_Gatherv(mine, (int)mylen, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (me == 0) {
        judge(all, counts, displs, size, why, whylen);
        bad = why[0] != '\0';
    }
    mpiCheck(MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (bad && me == 0) /* not pp_vm_error, which cuts at 4.5 KB */
        fprintf(stderr, "ppvm: %s\n", why);
    ready = !bad;
out:
    free(why);
    free(all);
    free(displs);
    free(counts);
    free(mine);
    return ready;
}

static int agree(const pp_plan *p, int ok, int me, int size)
{
    uint8_t *enc = NULL;
    size_t enclen = 0;
    if (ok && pp_plan_encode(p, &enc, &enclen) != PP_PLAN_OK) {
        pp_vm_error(me, "out of memory encoding the plan for the start-up check");
        ok = 0;
    }
    free(enc);
    handshake mine = {ok, ok ? p->rank : 0, ok ? p->world : 0, ok ? p->plan_id : 0, enclen};
    handshake *all = malloc((size_t)size * sizeof *all);
    if (!pp_vm_all_ok(all != NULL, me, "out of memory")) { /* before the gather needs it */
        free(all);
        return 0;
    }
    mpiCheck(
        MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, MPI_COMM_WORLD));
    int good = 1;
    for (int r = 0; r < size; r++) {
        const handshake *h = &all[r];
        char why[256] = "";
        if (!h->ok)
            snprintf(why, sizeof why,
                     "rank %d could not load its plan or its data (see its message)", r);
        else if ((int)h->world != size)
            snprintf(why, sizeof why,
                     "rank %d's plan was compiled for %u ranks but mpirun started %d (use mpirun "
                     "-np %u)",
                     r, h->world, size, h->world);
        else if ((int)h->rank != r)
            snprintf(why, sizeof why, "rank %d was given the plan of rank %u", r, h->rank);
        else if (all[0].ok && h->plan_id != all[0].plan_id) /* rank 0's failure is said */
            snprintf(why, sizeof why,
                     "rank %d's plan id %016llx differs from rank 0's %016llx: the directory mixes "
                     "plans of different compiles",
                     r, (unsigned long long)h->plan_id, (unsigned long long)all[0].plan_id);
        else if (h->bytes > MAX_GATHER_BYTES)
            snprintf(why, sizeof why,
                     "rank %d's plan has %llu bytes, more than the start-up "
                     "check can gather (%llu)",
                     r, (unsigned long long)h->bytes, (unsigned long long)MAX_GATHER_BYTES);
        if (why[0]) {
            if (me == 0)
                pp_vm_error(-1, "%s", why);
            good = 0;
        }
    }
    /* every rank computed `good` from the same gathered handshakes, so all
     * of them go on to the gather, or none does */
    if (good)
        good = verify_world(p, all, me, size);
    free(all);
    return good;
}

/* Whether this process sees a GPU; if not, why. */
static int gpu_visible(char *why, size_t len)
{
#ifdef PP_HAVE_CUDA
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc == cudaSuccess && n > 0)
        return 1;
    snprintf(why, len, "cudaGetDeviceCount: %s",
             rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
#else
    snprintf(why, len, "this ppvm was built without CUDA: there was no nvcc at build time");
#endif
    return 0;
}

/* Whether every node has a GPU for each of its ranks, as nccl needs
 * (collective). */
static int gpu_per_rank(int me)
{
    int local = 1, devices = 0, mine, all;
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_size(node, &local));
    mpiCheck(MPI_Comm_free(&node));
#ifdef PP_HAVE_CUDA
    if (cudaGetDeviceCount(&devices) != cudaSuccess)
        devices = 0;
#endif
    mine = devices >= local;
    mpiCheck(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    return all;
}

/* Settles the backend and transport alike on every rank (collective): by
 * default cuda when every rank sees a GPU (or --transport nccl asks for
 * it), else cpu; on cuda, nccl when every rank has a GPU of its own, else
 * mpi (several ranks sharing a GPU); mpi on cpu. Returns 0, or -1 on every
 * rank when cuda is wanted and some rank sees no GPU (the lowest such says
 * so). */
static int choose_backend(options *o, int me)
{
    char why[256] = "";
    int gpu = gpu_visible(why, sizeof why), all_gpu;
    const char *flag = o->backend == BACKEND_CUDA ? "--backend cuda" : "--transport nccl";
    mpiCheck(MPI_Allreduce(&gpu, &all_gpu, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (o->backend == BACKEND_UNSET)
        o->backend = all_gpu || o->transport == PP_TRANSPORT_NCCL ? BACKEND_CUDA : BACKEND_CPU;
    if (o->transport == TRANSPORT_UNSET)
        o->transport = o->backend == BACKEND_CUDA && all_gpu && gpu_per_rank(me) ? PP_TRANSPORT_NCCL
                                                                                 : PP_TRANSPORT_MPI;
    if (o->backend == BACKEND_CPU || all_gpu)
        return 0;
    char msg[320];
    snprintf(msg, sizeof msg, "%s: no GPU visible (%s)", flag, why);
    pp_vm_all_ok(gpu, me, msg);
    return -1;
}

/* --reference trains the model rank 0's plan names, so that header must be
 * the one compiled: the plan id is a hash of every rank's plan
 * (pp_plans_id), read here from the directory of `path` (rank<r>.bin for
 * each r < world). 0, or -1 with err. */
static int reference_plan_untouched(const char *path, const pp_plan *p, char *err, size_t errlen)
{
    char dir[PATH_MAX], file[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    pp_plan *all = calloc(p->world, sizeof *all);
    if (!all) {
        snprintf(err, errlen, "out of memory reading the plans beside '%.200s'", path);
        return -1;
    }
    uint32_t n = 0;
    int rc = -1;
    for (; n < p->world; n++) {
        snprintf(file, sizeof file, "%s/rank%u.bin", dir, n);
        if (pp_plan_read(file, &all[n], err, errlen))
            goto out;
    }
    if (pp_plans_id(all, (int)p->world) != p->plan_id)
        snprintf(err, errlen,
                 "the %u plans in '%.200s' do not hash to their plan id %016llx: a plan was edited "
                 "or the directory mixes compiles, so rank 0's model is not known to be the one "
                 "compiled",
                 p->world, dir, (unsigned long long)p->plan_id);
    else
        rc = 0;
out:
    for (uint32_t r = 0; r < n; r++)
        pp_plan_free(&all[r]);
    free(all);
    return rc;
}

static int run_reference(const options *o)
{
    char err[1024], path[PATH_MAX];
    pp_plan p;
    if (read_plan(o->plan, 0, &p, path, sizeof path, err, sizeof err)) {
        pp_vm_error(-1, "%s", err);
        return 1;
    }
    if (reference_plan_untouched(path, &p, err, sizeof err)) {
        pp_vm_error(-1, "--reference: %s", err);
        pp_plan_free(&p);
        return 1;
    }
    pp_dataset ds;
    int rc = 1;
    pp_train_opts train = o->train;
    train.optim = train_optim(p.model.optimizer, &o->optim);
    if (pp_data_load(&ds, o->train.data, &p.model, err, sizeof err))
        pp_vm_error(-1, "%s", err);
    else {
        rc = pp_run_reference(&p.model, (int)p.S, (int)p.B, p.plan_id, &ds, &train);
        pp_data_free(&ds);
    }
    pp_plan_free(&p);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    int parsed = parse_args(argc, argv, &o);
    if (parsed > 0)
        return 0;     /* --help */
    if (parsed < 0) { /* what is wrong is said; the usage would bury it */
        if (first_process())
            fprintf(stderr, "ppvm: see ppvm --help for the options\n");
        return 2;
    }
    if (o.compare) {
        int rc = pp_weights_compare(o.cmp[0], o.cmp[1], 0, o.atol, o.rtol);
        return rc < 0 ? 1 : rc;
    }
    if (o.reference)
        return run_reference(&o);

    pp_guard_signals(); /* before MPI_Init: a stop signal there stops the run, not the process */
    /* MPI_THREAD_MULTIPLE: the cpu backend's communication thread calls MPI
     * beside the main thread (vm/progress.h); with less it has none */
    int provided = MPI_THREAD_SINGLE;
    mpiCheck(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    int me, size, tag_ub_ok = 1;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    /* from here nothing waits on a lost peer for ever (vm/guard.h) */
    if (pp_guard_start(me, size, o.train.timeout, o.train.grace)) {
        MPI_Finalize();
        return 1;
    }
    if (choose_backend(&o, me)) {
        MPI_Finalize();
        return 1;
    }
    pp_plan p;
    pp_dataset ds = {0};
    char err[1024];
    pp_guard_phase(PP_AT_LOAD, 0); /* local: a stall here is this rank's own */
    pp_checkpoint_test_kill(&(pp_run){.me = me}, "load", 0);
    int ok = load(o.plan, me, &p, err, sizeof err) == 0;
    if (!ok)
        pp_vm_error(me, "%s", err);
    if (ok && pp_data_load(&ds, o.train.data, &p.model, err, sizeof err)) {
        pp_vm_error(me, "%s", err);
        pp_plan_free(&p);
        ok = 0;
    }
    if (ok) { /* transfers are tagged by (stage, microbatch, class): pp_transfer_tag */
        int *ub, flag;
        mpiCheck(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
        if (flag && pp_transfer_tags(&p) > *ub) {
            pp_vm_error(me, "S*B*%d = %lld exceeds this MPI's largest tag %d", PP_TAG_CLASSES,
                        pp_transfer_tags(&p), *ub);
            tag_ub_ok = 0;
        }
    }
    int rc = 1;
    pp_guard_phase(PP_AT_STARTUP, 0);
    if (agree(&p, ok && tag_ub_ok, me, size)) {
        const pp_backend *be = &pp_backend_cpu;
#ifdef PP_HAVE_CUDA
        if (o.backend == BACKEND_CUDA)
            be = &pp_backend_cuda;
#endif
        o.train.optim = train_optim(p.model.optimizer, &o.optim);
        o.train.transport = o.transport;
        if (me == 0 && !o.train.quiet)
            printf("ppvm: %d ranks, plan %016llx, S=%u B=%u, batch %u, %d steps, %s lr %g, "
                   "data %s, backend %s, transport %s%s%s\n",
                   size, (unsigned long long)p.plan_id, p.S, p.B, p.model.batch, o.train.steps,
                   pp_optimizer_name(p.model.optimizer), (double)o.train.optim.lr, o.train.data,
                   be->name, o.transport == PP_TRANSPORT_NCCL ? "nccl" : "mpi",
                   o.train.deterministic ? ", deterministic" : "",
                   o.train.no_compute ? ", no compute (benchmark mode: no kernel runs, every "
                                        "message is 4 bytes)"
                                      : "");
        rc = pp_run_plan(&p, &ds, &o.train, be);
    }
    if (ok) {
        pp_plan_free(&p);
        pp_data_free(&ds);
    }
    pp_guard_phase(PP_AT_FINALIZE, 0); /* a hang here is told apart from one in --save */
    MPI_Finalize();
    return rc;
}
