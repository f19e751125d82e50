/* graph_cuda.h - whole steps as CUDA graphs on the cuda backend
 * (vm/graph_cuda.c, vm/README.md "Whole steps as CUDA graphs"): a rank's
 * plan is one fixed instruction stream, so its step is captured once and
 * replayed each step, and the host's cost per instruction is paid once.
 * Only built with CUDA (PP_HAVE_CUDA). */
#ifndef PP_VM_GRAPH_CUDA_H
#define PP_VM_GRAPH_CUDA_H

#include <stddef.h>

#include "../kernels/optim_graph_cuda.h"
#include "transport_cuda.h"

/* At set-up (interp_cuda.c's setup, after the streams and the pinned token
 * buffers): decides whether this run's steps are graphs (--graph, and what
 * the run asks for that a graph cannot do: cvm_graph_blocker) and, if so,
 * allocates what replays need. 0, or -1 with err: out of memory, or
 * --graph on where a graph cannot run. */
int cvm_graph_setup(cuda_vm *v, char *err, size_t errlen);
/* Frees what setup made (the streams idle). */
void cvm_graph_teardown(cuda_vm *v);
/* Why this run cannot replay its steps as graphs, or NULL when it can
 * (--graph off is a reason too). */
const char *cvm_graph_blocker(const cuda_vm *v);
/* Rank 0, once, at start-up: "graph: ..." saying which and why. */
void cvm_graph_report(const cuda_vm *v);
/* backend.h's step: the whole step as a graph (captured at the first call)
 * and 1, or 0 when this step is launched instruction by instruction (the
 * run's every step, or PP_INJECT_NAN's). */
int cvm_graph_step(void *be);
/* Inside the capture: the step's learning rate and AdamW's bias
 * corrections in device memory, which the host fills before each replay
 * (op_update's kernels read them); NULL when steps are not graphs, and
 * the instructions' own forms run. */
const pp_cu_step_hyper *cvm_graph_hyper(const cuda_vm *v);
/* --skip-nonfinite under replay over nccl: the device flag the step's
 * updates read (pp_cu_step_bad: not 0 when some rank found a non-finite
 * number), NULL otherwise (the host decides). */
const float *cvm_graph_skip(const cuda_vm *v);
/* Whether a step is being captured now (no host wait may run). */
int cvm_graph_capturing(const cuda_vm *v);

#endif
