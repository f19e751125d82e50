/* graph_cuda.c - whole steps as CUDA graphs on the cuda backend
 * (graph_cuda.h). A rank's plan is a fixed instruction stream: at the
 * first step the core's dispatch runs every instruction once under stream
 * capture (cudaStreamBeginCapture on the compute stream, every other
 * stream forked from it by an event and joined back at the end), and each
 * step, that one included, is then a cudaGraphLaunch on the compute
 * stream: kernels, copies, cuBLAS calls, NCCL sends, receives, groups and
 * all-reduces (NCCL allows their capture), with the buffers' events
 * inside the capture becoming the graph's edges. What a step varies, the
 * host puts where the captured operations read it, before the launch:
 *
 *   - each microbatch's tokens into its pinned buffer (tok_host[b]), which
 *     the captured LoadMicroBatch copies to the device: the previous step
 *     is over (end_step waited for every stream), so the buffers are free;
 *   - the step's learning rate and AdamW's bias corrections into a device
 *     struct (one copy on the compute stream before the launch), which the
 *     optimizer's graph kernels read (kernels/optim_graph_cuda.h) instead
 *     of a step number frozen into a kernel argument.
 *
 * The losses and the non-finite check's records stay where the step
 * writes them on the device, read after the graph by end_step as before;
 * which instruction checked what (nf_kind) is the captured step's, put
 * back before each end_step. Every buffer's event starts the capture with
 * no stream (the step before has ended on the host), so the graph waits
 * on nothing recorded outside it, and ends with none again.
 *
 * A run whose step waits on the host, or differs from step to step beyond
 * those two inputs, launches instruction by instruction instead
 * (cvm_graph_blocker says why, and rank 0 prints it once): the mpi
 * transport (its staging copies and MPI calls), --deterministic (the host
 * sums each microbatch's gradients), --skip-nonfinite (the updates wait
 * for the ranks' agreement), --profile (events the host reads per job),
 * --no-compute (it times each instruction on the host) and PP_INJECT_NAN
 * (a NaN in one step). --graph on refuses such a run; --graph off always
 * launches. A capture that fails on the device (a library that cannot be
 * captured) fails its CUDA call, which ends the run with the call named,
 * as every failed CUDA call does: run again with --graph off. */
#include "graph_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/model.h"
#include "check.h"
#include "guard.h"

typedef struct cvm_graph cvm_graph;
struct cvm_graph {
    const char *why;              /* NULL: steps are graphs; else why not */
    int captured;                 /* the step's graph exists */
    cudaGraph_t graph;            /* captured at the first step */
    cudaGraphExec_t exec;         /* and instantiated, replayed each step */
    cudaEvent_t fork;             /* the capture's start, which every stream waits for */
    cudaEvent_t join[ST_COUNT];   /* each stream's end, which the compute stream waits for */
    pp_cu_step_hyper *hyper_dev;  /* the step's lr and bias corrections (device) */
    pp_cu_step_hyper *hyper_host; /* pinned: copied into hyper_dev before each launch */
    signed char *nf_kind;         /* [ninstr] the captured step's checks (cuda_vm.nf_kind) */
};

const char *cvm_graph_blocker(const cuda_vm *v)
{
    const pp_train_opts *o = v->opts;
    if (o->graph == PP_GRAPH_OFF)
        return "--graph off";
    if (o->deterministic) /* (before mpi: it takes --transport mpi) */
        return "--deterministic: the host sums each microbatch's weight gradients inside the step";
    if (v->transport == PP_TRANSPORT_MPI)
        return "--transport mpi: its transfers wait on the host inside a step (staging copies "
               "and MPI calls); --transport nccl is captured";
    if (o->skip_nonfinite)
        return "--skip-nonfinite: the step's optimizer updates wait for the ranks' agreement on "
               "the host";
    if (o->profile)
        return "--profile: each job is timed by events that the host reads, which a replayed "
               "graph does not record";
    if (o->no_compute)
        return "--no-compute: it times each instruction's host cost";
    if (v->c.inject_step)
        return "PP_INJECT_NAN: the test hook changes one step, which a replayed graph cannot";
    return NULL;
}

int cvm_graph_setup(cuda_vm *v, char *err, size_t errlen)
{
    cvm_graph *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    v->graph = g;
    g->why = cvm_graph_blocker(v);
    if (g->why && v->opts->graph == PP_GRAPH_ON) {
        snprintf(err, errlen,
                 "--graph on: this run cannot replay its steps as CUDA graphs: %s (use --graph "
                 "auto to launch instruction by instruction)",
                 g->why);
        return -1;
    }
    if (g->why)
        return 0;
    if (!(g->nf_kind = calloc(v->p->ninstr + 1, 1))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    cudaError_t rc = cudaMalloc((void **)&g->hyper_dev, sizeof *g->hyper_dev);
    if (rc == cudaSuccess)
        rc = cudaHostAlloc((void **)&g->hyper_host, sizeof *g->hyper_host, cudaHostAllocDefault);
    if (rc == cudaSuccess)
        rc = cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming);
    for (int i = 0; i < ST_COUNT && rc == cudaSuccess; i++)
        rc = cudaEventCreateWithFlags(&g->join[i], cudaEventDisableTiming);
    if (rc != cudaSuccess) {
        snprintf(err, errlen, "CUDA graph set-up: %s", cudaGetErrorString(rc));
        return -1;
    }
    return 0;
}

void cvm_graph_teardown(cuda_vm *v)
{
    cvm_graph *g = v->graph;
    if (!g)
        return;
    if (g->exec)
        cudaCheck(cudaGraphExecDestroy(g->exec));
    if (g->graph)
        cudaCheck(cudaGraphDestroy(g->graph));
    if (g->fork)
        cudaCheck(cudaEventDestroy(g->fork));
    for (int i = 0; i < ST_COUNT; i++)
        if (g->join[i])
            cudaCheck(cudaEventDestroy(g->join[i]));
    cudaCheck(cudaFree(g->hyper_dev));
    if (g->hyper_host)
        cudaCheck(cudaFreeHost(g->hyper_host));
    free(g->nf_kind);
    free(g);
    v->graph = NULL;
}

void cvm_graph_report(const cuda_vm *v)
{
    const cvm_graph *g = v->graph;
    if (v->me != 0 || v->opts->quiet || !g)
        return;
    if (g->why)
        printf("graph: off, launching instruction by instruction (%s)\n", g->why);
    else
        printf("graph: on, each rank's step captured once as a CUDA graph and replayed\n");
    fflush(stdout);
}

const pp_cu_step_hyper *cvm_graph_hyper(const cuda_vm *v)
{
    return v->graph && !v->graph->why ? v->graph->hyper_dev : NULL;
}

/* Every buffer with no last operation: the step before is over on the
 * host, so nothing in the graph needs to wait for an event of it. */
static void forget_streams(cuda_vm *v)
{
    const pp_plan *p = v->p;
    for (uint32_t s = 0; s < p->S; s++)
        v->param_dep[s].stream = v->grad_dep[s].stream = -1;
    for (uint32_t k = 0; k < p->nslots; k++)
        v->slot_dep[k].stream = -1;
}

/* The step's instructions through the core's dispatch, captured. */
static void capture(cuda_vm *v)
{
    cvm_graph *g = v->graph;
    const pp_plan *p = v->p;
    cudaStream_t cs = v->st[ST_COMPUTE];
    forget_streams(v);
    cudaCheck(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    cudaCheck(cudaEventRecord(g->fork, cs));
    for (int i = 0; i < ST_COUNT; i++)
        if (i != ST_COMPUTE)
            cudaCheck(cudaStreamWaitEvent(v->st[i], g->fork, 0));
    for (uint32_t i = 0; i < p->ninstr; i++) {
        pp_guard_instr(i, &p->code[i]);
        pp_vm_core_exec(v, &p->code[i]);
    }
    for (int i = 0; i < ST_COUNT; i++)
        if (i != ST_COMPUTE) {
            cudaCheck(cudaEventRecord(g->join[i], v->st[i]));
            cudaCheck(cudaStreamWaitEvent(cs, g->join[i], 0));
        }
    cudaCheck(cudaStreamEndCapture(cs, &g->graph));
    cudaCheck(cudaGraphInstantiate(&g->exec, g->graph, 0));
    memcpy(g->nf_kind, v->nf_kind, p->ninstr);
    forget_streams(v);
    g->captured = 1;
}

/* The step's inputs where the graph reads them: every microbatch this rank
 * loads into its pinned buffer, and the optimizer's numbers. */
static void fill_inputs(cuda_vm *v)
{
    cvm_graph *g = v->graph;
    const pp_plan *p = v->p;
    const pp_optim *o = &v->opts->optim;
    int t = v->run->step + 1;
    for (uint32_t b = 0; b < p->B; b++)
        if (v->tok_host[b])
            pp_data_microbatch(v->ds, &p->model, v->opts->seed, v->run->step, (int)b,
                               v->tok_host[b]);
    pp_cu_step_hyper_of(g->hyper_host, t, pp_optim_lr(o, t), o->beta1, o->beta2);
    cudaCheck(cudaMemcpyAsync(g->hyper_dev, g->hyper_host, sizeof *g->hyper_host,
                              cudaMemcpyHostToDevice, v->st[ST_COMPUTE]));
}

int cvm_graph_step(void *be)
{
    cuda_vm *v = be;
    cvm_graph *g = v->graph;
    if (!g || g->why)
        return 0;
    fill_inputs(v);
    if (!g->captured)
        capture(v);
    cudaCheck(cudaGraphLaunch(g->exec, v->st[ST_COMPUTE]));
    memcpy(v->nf_kind, g->nf_kind, v->p->ninstr); /* end_step's read_checks clears them */
    return 1;
}
