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
 * a plan, data or --profile file that cannot be used, a set-up failure, a
 * loss that is not finite; a rank whose --save fails; --compare: weights
 * that differ or cannot be read); 2 a bad command line. Only main returns
 * it; a failed CUDA, NCCL or MPI call ends every rank with 1 (MPI_Abort).
 *
 * Before training, all ranks exchange what they loaded, and every rank
 * refuses to start (exit 1, with a message) unless all plans loaded, share
 * one plan id, and were compiled for this world size and this rank. */
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
    const char *plan;      /* directory or file */
    const char *cmp[2];    /* --compare */
    int reference, compare;
    int backend, transport; /* BACKEND_*, TRANSPORT_UNSET or a pp_transport */
    optim_flags optim;      /* --lr, --weight-decay, --adam-eps; the plan's optimizer sets the rest */
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
            "  --loss-digits N  decimals of the per-step loss (default 4)\n"
            "  --backend B   cuda or cpu (default: cuda when this ppvm has CUDA and every rank\n"
            "                sees a GPU, else cpu; --reference always trains on the cpu)\n"
            "  --transport T the cuda backend's transfers: nccl (default when every rank has a\n"
            "                GPU of its own) or mpi (staged through host memory; the default\n"
            "                when ranks share a GPU). The cpu backend has only mpi.\n"
            "  --timeout S   cuda: end the run when a step has not finished after S seconds\n"
            "                (default 300)\n"
            "  --epilogues E cuda: on (default) fuses bias, GELU and residual adds into the\n"
            "                GEMMs where cuBLASLt offers it; off runs them as separate kernels\n"
            "  --profile FILE  write what this run measured (each stage's F, B, W and\n"
            "                optimizer step O, the link's latency and bandwidth, in seconds)\n"
            "                as a ppc --costs file\n",
            PP_DEFAULT_DATA);
}

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
    o->train = (pp_train_opts){
        .steps = 10, .seed = 1, .data = PP_DEFAULT_DATA, .timeout = 300, .loss_digits = 4};
    o->optim = (optim_flags){-1, -1, -1, -1, -1};
    o->backend = BACKEND_UNSET;
    o->transport = TRANSPORT_UNSET;
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
        } else if (!strcmp(a, "--reference"))
            o->reference = 1;
        else if (!strcmp(a, "--compare"))
            o->compare = 1;
        else if (!strcmp(a, "--quiet"))
            o->train.quiet = 1;
        else if (!strcmp(a, "--steps") || !strcmp(a, "--seed") || !strcmp(a, "--lr") ||
                 !strcmp(a, "--weight-decay") || !strcmp(a, "--adam-eps") ||
                 !strcmp(a, "--warmup") || !strcmp(a, "--adam-beta2") ||
                 !strcmp(a, "--data") || !strcmp(a, "--save") || !strcmp(a, "--atol") ||
                 !strcmp(a, "--rtol") || !strcmp(a, "--backend") || !strcmp(a, "--transport") ||
                 !strcmp(a, "--timeout") || !strcmp(a, "--epilogues") ||
                 !strcmp(a, "--profile") || !strcmp(a, "--loss-digits")) {
            if (!has_value) {
                if (first_process())
                    pp_vm_error(-1, "%s needs a value", a);
                return -1;
            }
            if (given_twice(&seen, a, argv[i + 1]))
                return -1;
            const char *val = argv[++i];
            if (!val[0] &&
                (!strcmp(a, "--data") || !strcmp(a, "--save") || !strcmp(a, "--profile"))) {
                if (first_process())
                    pp_vm_error(-1, "%s: expected a %s, found an empty string", a,
                                !strcmp(a, "--save") ? "directory" : "file");
                return -1;
            }
            if (!strcmp(a, "--data"))
                o->train.data = val;
            else if (!strcmp(a, "--save"))
                o->train.save = val;
            else if (!strcmp(a, "--profile"))
                o->train.profile = val;
            else if (!strcmp(a, "--backend")) {
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
            if (first_process())
                pp_vm_error(-1, "unknown option '%s'", a);
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
static int read_plan(const char *plan, int rank, pp_plan *p, char *path, size_t pathlen,
                     char *err, size_t errlen)
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
    return pp_plan_read(path, p, err, errlen) ? -1 : 0;
}

/* Load this rank's plan and check it; 0 or -1 with err. */
static int load(const char *plan, int rank, pp_plan *p, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (read_plan(plan, rank, p, path, sizeof path, err, errlen))
        return -1;
    char why[768];
    if (pp_vm_check_plan(p, why, sizeof why)) {
        snprintf(err, errlen, "%.200s: %s", path, why);
        pp_plan_free(p);
        return -1;
    }
    return 0;
}

/* What each rank tells the others before any training starts. */
typedef struct {
    int32_t ok;
    uint32_t rank, world;
    uint64_t plan_id;
} handshake;

static int agree(const pp_plan *p, int ok, int me, int size)
{
    handshake mine = {ok, ok ? p->rank : 0, ok ? p->world : 0, ok ? p->plan_id : 0};
    handshake *all = malloc((size_t)size * sizeof *all);
    if (!pp_vm_all_ok(all != NULL, me, "out of memory")) { /* before the gather needs it */
        free(all);
        return 0;
    }
    mpiCheck(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE,
                           MPI_COMM_WORLD));
    int good = 1;
    for (int r = 0; r < size; r++) {
        const handshake *h = &all[r];
        char why[256] = "";
        if (!h->ok)
            snprintf(why, sizeof why, "rank %d could not load its plan or its data (see its message)", r);
        else if ((int)h->world != size)
            snprintf(why, sizeof why,
                     "rank %d's plan was compiled for %u ranks but mpirun started %d (use mpirun -np %u)",
                     r, h->world, size, h->world);
        else if ((int)h->rank != r)
            snprintf(why, sizeof why, "rank %d was given the plan of rank %u", r, h->rank);
        else if (h->plan_id != all[0].plan_id)
            snprintf(why, sizeof why,
                     "rank %d's plan id %016llx differs from rank 0's %016llx: the directory mixes plans of different compiles",
                     r, (unsigned long long)h->plan_id, (unsigned long long)all[0].plan_id);
        if (why[0]) {
            if (me == 0)
                pp_vm_error(-1, "%s", why);
            good = 0;
        }
    }
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
        o->transport = o->backend == BACKEND_CUDA && all_gpu && gpu_per_rank(me)
                           ? PP_TRANSPORT_NCCL
                           : PP_TRANSPORT_MPI;
    if (o->backend == BACKEND_CPU || all_gpu)
        return 0;
    char msg[320];
    snprintf(msg, sizeof msg, "%s: no GPU visible (%s)", flag, why);
    pp_vm_all_ok(gpu, me, msg);
    return -1;
}

static int run_reference(const options *o)
{
    char err[1024], path[PATH_MAX];
    pp_plan p;
    if (read_plan(o->plan, 0, &p, path, sizeof path, err, sizeof err)) {
        pp_vm_error(-1, "%s", err);
        return 1;
    }
    pp_dataset ds;
    int rc = 1;
    pp_train_opts train = o->train;
    train.optim = train_optim(p.model.optimizer, &o->optim);
    if (pp_data_load(&ds, o->train.data, &p.model, err, sizeof err))
        pp_vm_error(-1, "%s", err);
    else {
        rc = pp_run_reference(&p.model, (int)p.S, (int)p.B, &ds, &train);
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
        return 0; /* --help */
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

    mpiCheck(MPI_Init(&argc, &argv));
    int me, size, tag_ub_ok = 1;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (choose_backend(&o, me)) {
        MPI_Finalize();
        return 1;
    }
    pp_plan p;
    pp_dataset ds = {0};
    char err[1024];
    int ok = load(o.plan, me, &p, err, sizeof err) == 0;
    if (!ok)
        pp_vm_error(me, "%s", err);
    if (ok && pp_data_load(&ds, o.train.data, &p.model, err, sizeof err)) {
        pp_vm_error(me, "%s", err);
        pp_plan_free(&p);
        ok = 0;
    }
    if (ok) { /* transfers are tagged by (stage, microbatch, kind) */
        int *ub, flag;
        mpiCheck(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
        if (flag && (long long)p.S * p.B * 4 > *ub) {
            pp_vm_error(me, "S*B*4 = %lld exceeds this MPI's largest tag %d",
                        (long long)p.S * p.B * 4, *ub);
            tag_ub_ok = 0;
        }
    }
    int rc = 1;
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
                   "data %s, backend %s, transport %s\n",
                   size, (unsigned long long)p.plan_id, p.S, p.B, p.model.batch, o.train.steps,
                   pp_optimizer_name(p.model.optimizer), (double)o.train.optim.lr, o.train.data,
                   be->name, o.transport == PP_TRANSPORT_NCCL ? "nccl" : "mpi");
        rc = pp_run_plan(&p, &ds, &o.train, be);
    }
    if (ok) {
        pp_plan_free(&p);
        pp_data_free(&ds);
    }
    MPI_Finalize();
    return rc;
}
