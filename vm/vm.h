/* vm.h - what the VM's parts share: training options, the plan runners (cpu
 * backend with the mpi transport; built with CUDA, the cuda backend with the
 * nccl or mpi transport) and the reference trainer. */
#ifndef PP_VM_H
#define PP_VM_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/plan.h"
#include "../kernels/model.h"
#include "data.h"

typedef struct {
    int steps;
    uint64_t seed;
    pp_optim optim;   /* the plan's optimizer's defaults (pp_optim_defaults) and --lr etc. */
    const char *data; /* path of the text file */
    const char *save; /* directory for the final weights, or NULL */
    int quiet;        /* no per-step lines */
    double timeout;   /* cuda backend: seconds a step may take before the watchdog ends the run */
    int no_epilogues; /* cuda backend: ppvm --epilogues off (unfused GEMMs and kernels) */
    const char *profile; /* ppvm --profile: write measured costs here (profile.h), or NULL */
} pp_train_opts;

/* Checks a decoded plan against what the VM will do with it: each slot is
 * large enough for the role an instruction gives it, and each stage an
 * instruction touches is one this rank holds. 0 or -1 with err. */
int pp_vm_check_plan(const pp_plan *p, char *err, size_t errlen);

/* Runs opts->steps training steps of this rank's plan under MPI (already
 * initialised, world size and plan ids already agreed). Returns 0 or 1. */
int pp_run_plan(const pp_plan *p, const pp_dataset *ds, const pp_train_opts *opts);

#ifdef PP_HAVE_CUDA
/* How the cuda backend moves data between ranks: NCCL (one GPU per rank), or
 * MPI through pinned host memory (several ranks may share one GPU). */
typedef enum { PP_TRANSPORT_MPI, PP_TRANSPORT_NCCL } pp_transport;

/* pp_run_plan on the GPU (vm/interp_cuda.c): the same instructions, output
 * lines, memory line, --save files and exit status. transport is a
 * pp_transport. Returns 0 or 1 (1 on every rank when this rank cannot run,
 * e.g. NCCL with more ranks than GPUs on a node). */
int pp_run_plan_cuda(const pp_plan *p, const pp_dataset *ds, const pp_train_opts *opts,
                     int transport);
#endif

/* Trains the same model in this one process, sequentially over the same
 * microbatches: the oracle every schedule must match. Returns 0 or 1. */
int pp_run_reference(const pp_model *m, int S, int B, const pp_dataset *ds,
                     const pp_train_opts *opts);

#endif
