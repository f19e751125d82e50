/* core.h - the VM core: what both backends (vm/backend.h) do alike, written
 * once. A backend's state begins with a pp_vm_core; the backend supplies
 * its memory (host or device: pp_vm_mem) and runs each instruction's device
 * work (vm/interp.c on the cpu, vm/interp_cuda.c on a GPU), and the core
 * keeps
 *
 *   - the per-stage state of the stages this rank owns: fp32 master
 *     weights, gradients, optimizer state and compute copy, allocated
 *     through the backend's memory at the plan's sizes, and counted in the
 *     memory line (allocated);
 *   - overlapped pairs: which job of an Overlap pair an instruction is;
 *   - the non-finite check's findings (pp_nonfinite_order keeps the first)
 *     and the PP_INJECT_NAN test hook;
 *   - --skip-nonfinite: the check that a plan's OptimizerSteps can wait for
 *     the end of the step, and the list of those deferred until commit;
 *   - --deterministic (vm/determ.h): the per-microbatch gradients, their
 *     messages and the ordered sums, on the host. A backend whose memory is
 *     not the host's copies each job's gradient to host memory and the sum
 *     back before the OptimizerStep (pp_vm_core_det_sum);
 *   - the checkpoint and --save copies of a stage (stage_get, stage_set,
 *     weights, through pp_vm_mem's copies);
 * and implements the backend hooks that need nothing else (allocated,
 * weights, stage_get, stage_set, nonfinite).
 *
 * Still each backend's own: the opcode switch that decodes an
 * instruction's operands into its memory (the cuda backend's carries each
 * buffer's event), the --profile timing around a job (the wall clock on
 * the cpu, events on a GPU) and commit's loop over the deferred updates. */
#ifndef PP_VM_CORE_H
#define PP_VM_CORE_H

#include <mpi.h>
#include <stddef.h>

#include "backend.h"
#include "determ.h"
#include "vm.h"

/* A backend's memory. alloc: `bytes` of it (NULL for 0 bytes is fine), 0 or
 * -1 with err; to_host and from_host copy between it and host memory
 * between steps (blocking); settle, when not NULL, runs after from_host
 * (the cuda backend synchronises the device: its streams do not wait for
 * the copies). host: 1 when it is host memory. */
typedef struct {
    int host;
    int (*alloc)(void **ptr, size_t bytes, char *err, size_t errlen);
    void (*release)(void *ptr);
    void (*to_host)(void *dst, const void *src, size_t bytes);
    void (*from_host)(void *dst, const void *src, size_t bytes);
    void (*settle)(void);
} pp_vm_mem;

/* Where PP_INJECT_NAN puts its NaN (the core's header in core.c). */
enum { PP_INJECT_OUT, PP_INJECT_DIN, PP_INJECT_WGRAD };

typedef struct {
    pp_run *run; /* the driver's: the step in progress, --profile */
    const pp_plan *p;
    const pp_dataset *ds;
    const pp_train_opts *opts;
    const pp_vm_mem *mem;
    int me;
    int nc;                  /* --no-compute (vm/vmbench.h) */
    float **params, **grads; /* [S] the backend's memory; NULL for stages not owned */
    float **state;           /* [S] the optimizer's (AdamW: m then v); NULL for SGD */
    void **compute;          /* [S] the compute copy: params[s] (fp32) or its own (bf16) */
    unsigned long long allocated; /* the memory line: the core's and the backend's bytes */
    int pair_left;           /* jobs of the open Overlap pair not yet run (2, 1 or 0) */
    pp_nonfinite first;      /* the step's first non-finite number (pp_nonfinite_order) */
    int inject_step, inject_stage, inject_mb, inject_where; /* PP_INJECT_NAN; step 0: none */
    const pp_instr **deferred; /* --skip-nonfinite: the step's OptimizerSteps, until commit */
    int ndeferred;
    pp_determ *det;          /* --deterministic, else NULL */
    unsigned long long det_bytes; /* its host buffers: part of allocated */
    float **det_sum;         /* [S] the ordered sum of an owned stage's gradients: grads[s]
                                in host memory, else a host buffer of its own */
    MPI_Comm *det_comm;      /* [ngroups] the replica groups, for pp_determ_reduce */
} pp_vm_core;

/* Set-up, local: the tables and an owned stage's buffers (their contents
 * are the backend's to initialise), PP_INJECT_NAN, --skip-nonfinite's plan
 * check and --deterministic's buffers. 0, or -1 with err; pp_vm_core_free
 * frees what was made either way. */
int pp_vm_core_init(pp_vm_core *c, pp_run *run, const pp_vm_mem *mem, char *err, size_t errlen);
void pp_vm_core_free(pp_vm_core *c);
/* Collective, after every rank's init: --deterministic's communicators,
 * and its note of the bytes each rank holds for it (rank 0). */
void pp_vm_core_connect(pp_vm_core *c);

/* Which job of an Overlap pair `in` is: 0 none, 1 the first, 2 the second.
 * Call once per instruction, in plan order (Overlap opens a pair). */
int pp_vm_core_pair_pos(pp_vm_core *c, const pp_instr *in);

/* Whether PP_INJECT_NAN names this instruction's job at this step, there. */
int pp_vm_core_inject_here(const pp_vm_core *c, const pp_instr *in, int where);
/* Keep a non-finite number if it comes before what the step found so far. */
void pp_vm_core_note(pp_vm_core *c, pp_nf_kind kind, int s, int b, double value);

/* Whether stage s's OptimizerStep waits for commit (--skip-nonfinite), and
 * if so notes it. */
int pp_vm_core_defer(pp_vm_core *c, const pp_instr *in);

/* --deterministic: whether stage s's gradients go through the ordered sums. */
int pp_vm_core_det(const pp_vm_core *c, int s);
/* The zeroed host buffer job W(s,b) computes (or copies) its gradient into. */
float *pp_vm_core_det_job(pp_vm_core *c, int s, int b);
/* W(s,b)'s gradient is in its buffer: the owner adds what is next in order. */
void pp_vm_core_det_done(pp_vm_core *c, int s, int b);
/* SendWeightGrad, RecvWeightGrad and ReduceGrads of a tracked stage. */
void pp_vm_core_det_transfer(pp_vm_core *c, const pp_instr *in);
/* OptimizerStep: the sum of all B microbatches, in host memory (det_sum[s];
 * the caller copies it into grads[s] when they differ). */
const float *pp_vm_core_det_sum(pp_vm_core *c, int s);

/* The end of a step, every backend's: --deterministic's sends complete. */
void pp_vm_core_end_step(pp_vm_core *c);

/* The backend hooks every backend shares (backend.h); `be` begins with a
 * pp_vm_core. */
unsigned long long pp_vm_core_allocated(void *be);
void pp_vm_core_weights(void *be, int s, float *out);
void pp_vm_core_stage_get(void *be, int s, float *params, float *state, void *compute);
void pp_vm_core_stage_set(void *be, int s, const float *params, const float *state,
                          const void *compute);
void pp_vm_core_nonfinite(void *be, pp_nonfinite *first);

#endif
