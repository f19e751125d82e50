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
 *   - the opcode dispatch (vm/exec.c): each instruction decoded into what
 *     it touches (pp_vm_job: its slots by role, the weights and gradients
 *     it reads, its lane in an Overlap pair, its transfer slot) and handed
 *     to the backend's operation for that opcode (pp_vm_ops), --profile's
 *     timing around the jobs and optimizer steps, and commit's loop;
 * and implements the backend hooks that need nothing else (allocated,
 * exec, weights, stage_get, stage_set, nonfinite, commit).
 *
 * Each backend's own: its memory, its operations (the cpu's wait for a send
 * in flight from a slot before using it; the cuda backend's wait for and
 * record of each buffer's event, its streams), its transfers (message
 * sizes and tags: tag_of, one per transport) and its clock (the wall clock
 * on the cpu, events on a GPU). */
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

/* An instruction as the core decoded it for a backend's operation. A
 * pointer is NULL where the instruction has no such operand. */
typedef struct {
    const pp_instr *in;
    int s, b;  /* its stage and microbatch */
    int pair;  /* which job of an Overlap pair: 0 none, 1 the first, 2 the second */
    int lane;  /* 1 for a pair's second job (its own workspace and stream), else 0 */
    int k;     /* a transfer's slot (pp_transfer_slot), or -1 */
    size_t np; /* stage s's parameter count */
    void *tokens, *x, *stash, *out, *tgt, *dout, *din, *tmp; /* slots by role (isa/opcodes.h) */
    const void *w; /* the weights a job reads: its wts slot or this rank's compute copy */
    float *g;      /* the gradients it adds to, zeroes or updates: its wgrad slot, this
                         rank's own, or --deterministic's buffer for the job */
    int g_zero;    /* a Backward's or BackwardWeight's g holds zeros (vm/grads_zero.c) */
} pp_vm_job;

/* A backend's operations, which the core's dispatch (vm/exec.c) calls with
 * the operands decoded; `be` is the backend's state (it begins with the
 * core). Operands first: slot, weights and grads resolve a slot and this
 * rank's own weights (compute copy) and gradients of stage s, doing what
 * the backend must before an operation uses the buffer (the cpu waits for
 * a send in flight from a slot; the cuda backend notes the buffer's event
 * for begin and end). det_grads: the buffer a --deterministic job adds its
 * weight gradients to (zeroed). begin and end (or NULL) bracket every
 * operation on the compute lane (load, jobs, zero, accumulate, the
 * optimizer step), after its operands are resolved. Under --no-compute the
 * core calls no kernel operation (forward, backward*, loss, poison, check,
 * det_*, zero, accumulate) but still load and update, which run no kernel
 * then. */
typedef struct {
    void *(*slot)(void *be, int k);
    const void *(*weights)(void *be, int s);
    float *(*grads)(void *be, int s);
    float *(*det_grads)(void *be, const pp_vm_job *j);
    void (*begin)(void *be, const pp_vm_job *j); /* or NULL */
    void (*end)(void *be, const pp_vm_job *j);   /* or NULL */
    void (*load)(void *be, const pp_vm_job *j);  /* LoadMicroBatch into j->tokens */
    void (*forward)(void *be, const pp_vm_job *j);
    /* after every Forward: the loss the job made (the last stage's), set to
     * NaN first when poison (PP_INJECT_NAN), noted when not finite */
    void (*loss)(void *be, const pp_vm_job *j, int poison);
    void (*backward)(void *be, const pp_vm_job *j);
    void (*backward_input)(void *be, const pp_vm_job *j);
    void (*backward_weight)(void *be, const pp_vm_job *j);
    void (*poison)(void *be, const pp_vm_job *j, float *x); /* PP_INJECT_NAN: x[0] = NaN */
    /* the non-finite check of n floats at x, after what wrote them */
    void (*check)(void *be, const pp_vm_job *j, const float *x, size_t n, pp_nf_kind kind);
    /* the same over n bf16 numbers: a bf16 run's input gradient (the
     * activation type, isa/model_shape.h's pp_act_bytes) */
    void (*check_bf16)(void *be, const pp_vm_job *j, const uint16_t *x, size_t n, pp_nf_kind kind);
    /* --deterministic: a job's gradient (j->g) into the core's host buffer
     * (NULL: det_grads gave that buffer); the stage's ordered host sum into
     * j->g before its OptimizerStep (NULL: the sum is j->g itself) */
    void (*det_done)(void *be, const pp_vm_job *j);
    void (*det_put)(void *be, const pp_vm_job *j, const float *sum);
    void (*zero)(void *be, const pp_vm_job *j);       /* j->np floats of j->g */
    void (*accumulate)(void *be, const pp_vm_job *j); /* j->g += j->tmp */
    /* stage j->s's update from its own gradients, which it zeroes (under
     * --no-compute only the waits it makes) */
    void (*update)(void *be, const pp_vm_job *j);
    /* the transfers, with their message sizes and tags: Send*, SendWeights;
     * Recv*, FetchWeights (RecvWeightGrad's into its tmp slot: the core then
     * accumulates); ReduceGrads */
    void (*send)(void *be, const pp_vm_job *j);
    void (*recv)(void *be, const pp_vm_job *j);
    void (*reduce)(void *be, const pp_vm_job *j);
    void (*group)(void *be, int start); /* GroupStart/End, or NULL */
    /* TensorReduce (issue 27): the next job's all-reduces go over tensor
     * group j->in->group. NULL: the backend cannot run a plan with
     * tensor > 1, which pp_vm_core_open then refuses. */
    void (*tensor)(void *be, const pp_vm_job *j);
    /* --profile: a mark just before (end 0) and after (end 1) a job's or an
     * optimizer step's work; elapsed: the seconds between instruction i's
     * two marks, once the step's work is done */
    void (*mark)(void *be, const pp_vm_job *j, int end);
    double (*elapsed)(void *be, uint32_t i);
    void (*committed)(void *be); /* after commit's loop: wait for it, or NULL */
    /* Offload (to_host 1) and Reload (0): bytes from src to dst, one of
     * them a host slot, in order with the jobs around it; NULL where the
     * backend cannot (the core then stops: the plan was refused at create) */
    void (*host_copy)(void *be, const pp_vm_job *j, void *dst, const void *src, size_t bytes,
                      int to_host);
} pp_vm_ops;

typedef struct {
    pp_run *run;          /* the driver's: the step in progress, --profile */
    const pp_vm_ops *ops; /* the backend's operations (vm/exec.c calls them) */
    const pp_plan *p;
    const pp_dataset *ds;
    const pp_train_opts *opts;
    const pp_vm_mem *mem;
    int me;
    int nc;                       /* --no-compute (vm/vmbench.h) */
    float **params, **grads;      /* [S] the backend's memory; NULL for stages not owned */
    float **state;                /* [S] the optimizer's (AdamW: m then v); NULL for SGD */
    void **compute;               /* [S] the compute copy: params[s] (fp32) or its own (bf16) */
    unsigned long long allocated; /* the memory line: the core's and the backend's bytes */
    unsigned long long host_allocated; /* offload's host slots (pp_plan_host_slots) */
    int pair_left;                /* jobs of the open Overlap pair not yet run (2, 1 or 0) */
    pp_nonfinite first;           /* the step's first non-finite number (pp_nonfinite_order) */
    int inject_step, inject_stage, inject_mb, inject_where; /* PP_INJECT_NAN; step 0: none */
    const pp_instr **deferred; /* --skip-nonfinite: the step's OptimizerSteps, until commit */
    int ndeferred;
    pp_determ *det;               /* --deterministic, else NULL */
    unsigned long long det_bytes; /* its host buffers: part of allocated */
    float **det_sum;              /* [S] the ordered sum of an owned stage's gradients: grads[s]
                                in host memory, else a host buffer of its own */
    MPI_Comm *det_comm;           /* [ngroups] the replica groups, for pp_determ_reduce */
    int tied_shared;              /* isa/tied.h: stage S-1's memory runs into stage 0's */
    unsigned char *det_early;     /* [S] pp_vm_core_det_tied put the sum into grads[s] */
    unsigned char *g_zero;        /* [S] own gradients known to hold zeros (vm/grads_zero.c) */
} pp_vm_core;

/* Set-up, local: the tables and an owned stage's buffers (their contents
 * are the backend's to initialise), PP_INJECT_NAN, --skip-nonfinite's plan
 * check and --deterministic's buffers. 0, or -1 with err; pp_vm_core_free
 * frees what was made either way. */
int pp_vm_core_init(pp_vm_core *c, pp_run *run, const pp_vm_mem *mem, const pp_vm_ops *ops,
                    char *err, size_t errlen);
void pp_vm_core_free(pp_vm_core *c);
/* Collective, after every rank's init: --deterministic's communicators,
 * and its note of the bytes each rank holds for it (rank 0). */
void pp_vm_core_connect(pp_vm_core *c);

/* The floats of stage s's weights this rank stores for it alone (its
 * gradients as many, its optimizer state and compute copy in proportion):
 * what its OptimizerStep updates and its ReduceGrads all-reduces
 * (isa/tied.h's pp_stage_own_count). */
size_t pp_vm_core_own_count(const pp_vm_core *c, int s);

/* Which job of an Overlap pair `in` is: 0 none, 1 the first, 2 the second.
 * Call once per instruction, in plan order (Overlap opens a pair). */
int pp_vm_core_pair_pos(pp_vm_core *c, const pp_instr *in);

/* Whether PP_INJECT_NAN names this instruction's job at this step, there. */
int pp_vm_core_inject_here(const pp_vm_core *c, const pp_instr *in, int where);
/* Keep a non-finite number if it comes before what the step found so far. */
void pp_vm_core_note(pp_vm_core *c, pp_nf_kind kind, int s, int b, double value);

/* Own gradients known to hold zeros (vm/grads_zero.c): set after j zeroed
 * j->g; take at a backward (1 when j->g is stage j->s's own and holds
 * zeros; the mark goes); forget stage s's (s < 0: every stage's) when
 * something else wrote them. */
void pp_vm_core_g_zero_set(pp_vm_core *c, const pp_vm_job *j);
int pp_vm_core_g_zero_take(pp_vm_core *c, const pp_vm_job *j);
void pp_vm_core_g_zero_forget(pp_vm_core *c, int s);
/* Every stage's gradients hold zeros (the backend zeroed them at start-up). */
void pp_vm_core_g_zero_all(pp_vm_core *c);

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
/* StashTiedGrad and AddTiedGrad of a tracked stage (model tie = 1): its
 * ordered sum is complete by then (else every rank ends), and is returned
 * for the caller to put into grads[s] once, where they differ (the cuda
 * backend's), so that the tied sum adds the ordered sums; NULL when there
 * is nothing to put. pp_vm_core_det_sum then returns grads[s] itself. */
const float *pp_vm_core_det_tied(pp_vm_core *c, int s);

/* The end of a step, every backend's: --deterministic's sends complete. */
void pp_vm_core_end_step(pp_vm_core *c);

/* The backend hooks every backend shares (backend.h); `be` begins with a
 * pp_vm_core. */
unsigned long long pp_vm_core_allocated(void *be);
unsigned long long pp_vm_core_host_allocated(void *be);
void pp_vm_core_weights(void *be, int s, float *out);
void pp_vm_core_stage_get(void *be, int s, float *params, float *state, void *compute);
void pp_vm_core_stage_set(void *be, int s, const float *params, const float *state,
                          const void *compute);
void pp_vm_core_nonfinite(void *be, pp_nonfinite *first);
/* vm/exec.c: one instruction, decoded and run through the backend's
 * operations (--profile's marks around its work); --skip-nonfinite's
 * commit of the deferred OptimizerSteps. */
void pp_vm_core_exec(void *be, const pp_instr *in);
void pp_vm_core_commit(void *be, int apply);
/* --profile, once the step's work is done: each timed instruction's
 * seconds to the profile; deferred 1 for the OptimizerSteps commit ran
 * (--skip-nonfinite), 0 for the others, at the end of the step. */
void pp_vm_core_prof_collect(pp_vm_core *c, int deferred);

#endif
