/* vm.h - what the VM's parts share: training options, the driver that runs
 * a rank's plan on a backend (vm/driver.c; the backends: vm/backend.h) and
 * the reference trainer. */
#ifndef PP_VM_H
#define PP_VM_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/plan.h"
#include "../kernels/model.h"
#include "data.h"

/* How the cuda backend moves data between ranks: NCCL (one GPU per rank), or
 * MPI through pinned host memory (several ranks may share one GPU). The cpu
 * backend has only MPI. */
typedef enum { PP_TRANSPORT_MPI, PP_TRANSPORT_NCCL } pp_transport;

/* ppvm --graph (cuda backend, vm/graph_cuda.c): capture a step as a CUDA
 * graph and replay it where the run allows (auto, the default), insist on
 * it (on: a run that cannot is refused at start-up), or launch instruction
 * by instruction (off). */
typedef enum { PP_GRAPH_AUTO, PP_GRAPH_ON, PP_GRAPH_OFF } pp_graph_mode;

typedef struct {
    int steps;
    uint64_t seed;
    pp_optim optim;    /* the plan's optimizer's defaults (pp_optim_defaults) and --lr etc. */
    const char *data;  /* path of the text file */
    const char *save;  /* directory for the final weights, or NULL */
    int quiet;         /* no per-step lines */
    int loss_digits;   /* decimals of the per-step loss (ppvm --loss-digits, default 4) */
    int transport;     /* cuda backend: a pp_transport */
    double timeout;    /* seconds a step (or start-up) may take before the watchdog ends the run */
    int no_epilogues;  /* cuda backend: ppvm --epilogues off (unfused GEMMs and kernels) */
    int deterministic; /* ppvm --deterministic: weight gradients summed in microbatch order
                        * (vm/determ.h); both backends and the reference */
    const char *profile; /* ppvm --profile: write measured costs here (profile.h), or NULL */
    /* checkpoints (vm/checkpoint.h) */
    const char *checkpoint_dir; /* --checkpoint-dir (or --resume's DIR), or NULL */
    int checkpoint_every;       /* --checkpoint-every N: after every N-th step; 0: never */
    int checkpoint_keep;        /* --checkpoint-keep K (2) */
    const char *resume;         /* --resume DIR, or NULL */
    int reshard;                /* --reshard: a checkpoint of another plan of the same model */
    /* issue 16: a lost rank, signals, bad numbers (vm/guard.h, vm/driver.c) */
    double grace;       /* seconds a signalled rank waits for its step to end (--grace) */
    int skip_nonfinite; /* skip a step with a non-finite loss or gradient, not stop */
    /* issue 18: ppvm --no-compute, the interpreter's benchmark mode (vm/vmbench.h):
     * no kernel body runs, every message is PP_NO_COMPUTE_MSG_BYTES, and the
     * driver times each instruction */
    int no_compute;
    int graph; /* a pp_graph_mode (cuda backend) */
} pp_train_opts;

/* The backends (vm/backend.h): cpu always, cuda when built with CUDA. */
typedef struct pp_backend pp_backend;
extern const pp_backend pp_backend_cpu;
#ifdef PP_HAVE_CUDA
extern const pp_backend pp_backend_cuda;
#endif

/* Runs opts->steps training steps of this rank's plan on backend `be`
 * under MPI (already initialised, world size and plan ids already agreed):
 * rank 0 prints the memory line and a line per step; --profile and --save
 * as ppvm documents them. Returns 0, or 1 (on every rank when the run
 * could not start, a loss or gradient was not finite or the --save could
 * not be written), or 128 + the signal's number on every
 * rank when a SIGTERM or SIGINT stopped the run after a step. */
int pp_run_plan(const pp_plan *p, const pp_dataset *ds, const pp_train_opts *opts,
                const pp_backend *be);

/* ppvm's one message style on stderr: "ppvm: rank R: ..." for what one
 * rank found (rank >= 0), "ppvm: ..." for what concerns the whole run
 * (rank < 0). */
void pp_vm_error(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Collective: every rank learns whether every rank is ok; the lowest rank
 * that is not prints msg (pp_vm_error). Returns 1 when all are. */
int pp_vm_all_ok(int ok, int me, const char *msg);

/* Trains the same model in this one process, sequentially over the same
 * microbatches: the oracle every schedule must match. Its --save files
 * carry plan_id, the plan it read. Returns 0 or 1. */
int pp_run_reference(const pp_model *m, int S, int B, uint64_t plan_id, const pp_dataset *ds,
                     const pp_train_opts *opts);

#endif
