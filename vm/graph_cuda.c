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
 * Piecewise, under --transport mpi (several ranks sharing one GPU): the
 * transfers wait on the host (staging copies, MPI calls), so the step is
 * cut at each of them. Each run of instructions between two transfers (a
 * segment) is captured once and replayed as its own graph; the transfers
 * run as launched, between the launches. At each seam the streams meet:
 * after a segment every other stream waits for the compute stream (the
 * graph's end, where its forked streams joined), and before one the
 * compute stream waits for every other stream (the transfers' copies), so
 * neither side needs the other's buffer events, which every seam forgets.
 * The host state that captured instructions keep is put back as a replay
 * needs it: which stage's weights the mpi transport's pinned buffer holds
 * is forgotten at each seam (a segment may have updated them), and the
 * core's zeroed-gradient marks are what the segment's capture left (a
 * transfer between segments, ReduceGrads or a received weight gradient,
 * forgets them each step as launched; a segment reached from other marks
 * than it was captured from is captured again).
 *
 * --skip-nonfinite: the core defers the OptimizerSteps as when launched.
 * Over nccl the capture ends with the step's decision on the device (its
 * records reduced to a flag, summed over the ranks by an all-reduce), then
 * the deferred updates, whose kernels only zero the gradients where the
 * flag is set (decide_and_update); the host's own agreement after the
 * step reads the same records, so it says the same and has nothing to
 * commit. Piecewise (mpi) the graphs hold no update: each replay defers
 * its segment's OptimizerSteps again on the host, and the host's commit
 * after the ranks agreed runs them (or zeroes the gradients), launched.
 *
 * PP_INJECT_NAN's step (a test hook's NaN in one job) is launched
 * instruction by instruction between replays. A run whose step waits on
 * the host inside its compute, or that times its instructions, launches
 * every step instead (cvm_graph_blocker says why, and rank 0 prints it
 * once): tensor parallelism over the mpi transport (its all-reduces stage
 * through the host inside a job), --deterministic (the host sums each
 * microbatch's gradients), --profile (events the host reads per job) and
 * --no-compute (it times each instruction on the host). --graph on
 * refuses such a run; --graph off always launches. A capture that fails
 * on the device (a library that cannot be captured) fails its CUDA call,
 * which ends the run with the call named, as every failed CUDA call does:
 * run again with --graph off. */
#include "graph_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/model.h"
#include "check.h"
#include "guard.h"
#include "nccl_check.h"

typedef struct cvm_graph cvm_graph;

/* A run of instructions [first, end) captured as one graph, with the
 * core's zeroed-gradient marks (vm/grads_zero.c) it was captured from and
 * those its instructions left: a replay is right only from the same marks
 * (its first backwards write at beta 0 or add as captured), and it leaves
 * the marks its capture left, which the host puts back after each launch
 * since a replay runs no instruction through the core. */
typedef struct {
    uint32_t first, end;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    unsigned char *zero_in, *zero_out; /* [S] */
} cvm_segment;

struct cvm_graph {
    const char *why;              /* NULL: steps are graphs; else why not */
    int captured;                 /* some step was captured: nf_kind holds its checks */
    int piecewise;                /* the step is cut at its transfers (mpi) */
    uint32_t nseg;                /* segments: 1 for a whole step */
    cvm_segment *seg;             /* [nseg], in plan order */
    uint32_t *seg_at;             /* [ninstr] index + 1 of the segment starting there, or 0 */
    cudaEvent_t fork;             /* the capture's start, which every stream waits for */
    cudaEvent_t join[ST_COUNT];   /* each stream's end, which the compute stream waits for */
    cudaEvent_t seam[ST_COUNT];   /* piecewise: the streams meeting between segment and transfer */
    pp_cu_step_hyper *hyper_dev;  /* the step's lr and bias corrections (device) */
    pp_cu_step_hyper *hyper_host; /* pinned: copied into hyper_dev before each launch */
    signed char *nf_kind;         /* [ninstr] the captured step's checks (cuda_vm.nf_kind) */
    unsigned char *zero;          /* [2 * nseg * S]: the segments' zero_in and zero_out */
    int capturing;                /* inside a capture: no host wait (op_committed) */
    int launching;                /* this step runs instruction by instruction (PP_INJECT_NAN's) */
    float *bad_dev;               /* --skip-nonfinite: the ranks' finding, summed (device) */
    signed char *code_dev;        /* [ninstr] each record's kind and lane (pp_cu_step_bad) */
};

/* Under --transport mpi: whether instruction in waits on the host (a
 * transfer or ReduceGrads: staging copies and MPI calls), so it runs as
 * launched, between segments. */
static int host_instr(const cuda_vm *v, const pp_instr *in)
{
    return v->transport == PP_TRANSPORT_MPI &&
           (pp_op_is_transfer(in->op) || in->op == PP_OP_ReduceGrads);
}

const char *cvm_graph_blocker(const cuda_vm *v)
{
    const pp_train_opts *o = v->opts;
    if (o->graph == PP_GRAPH_OFF)
        return "--graph off";
    if (o->deterministic) /* (before mpi: it takes --transport mpi) */
        return "--deterministic: the host sums each microbatch's weight gradients inside the step";
    if (v->transport == PP_TRANSPORT_MPI && pp_model_tensor(&v->p->model) > 1)
        return "--transport mpi with tensor parallelism: its all-reduces wait on the host inside "
               "each job; --transport nccl is captured";
    if (o->profile)
        return "--profile: each job is timed by events that the host reads, which a replayed "
               "graph does not record";
    if (o->no_compute)
        return "--no-compute: it times each instruction's host cost";
    return NULL;
}

/* The segments: the maximal runs of instructions between host ones that
 * hold a job (a run of markers alone runs as launched: nothing to replay).
 * 0, or -1 out of memory. */
static int cut(cuda_vm *v, cvm_graph *g)
{
    const pp_plan *p = v->p;
    if (!(g->seg = calloc(p->ninstr + 1, sizeof *g->seg)) ||
        !(g->seg_at = calloc(p->ninstr + 1, sizeof *g->seg_at)))
        return -1;
    for (uint32_t i = 0; i < p->ninstr;) {
        if (host_instr(v, &p->code[i])) {
            i++;
            continue;
        }
        uint32_t e = i, work = 0;
        for (; e < p->ninstr && !host_instr(v, &p->code[e]); e++)
            work += pp_op(p->code[e].op) && pp_op(p->code[e].op)->kind != PP_KIND_MARKER;
        if (work) {
            g->seg[g->nseg] = (cvm_segment){.first = i, .end = e};
            g->seg_at[i] = ++g->nseg;
        }
        i = e;
    }
    size_t S = v->p->S ? v->p->S : 1;
    if (!(g->zero = calloc(2 * (g->nseg ? g->nseg : 1) * S, 1)))
        return -1;
    for (uint32_t k = 0; k < g->nseg; k++) {
        g->seg[k].zero_in = g->zero + 2 * k * S;
        g->seg[k].zero_out = g->seg[k].zero_in + S;
    }
    g->piecewise = v->transport == PP_TRANSPORT_MPI;
    return 0;
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
    if (!(g->nf_kind = calloc(v->p->ninstr + 1, 1)) || cut(v, g)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    cudaError_t rc = cudaMalloc((void **)&g->hyper_dev, sizeof *g->hyper_dev);
    if (rc == cudaSuccess)
        rc = cudaHostAlloc((void **)&g->hyper_host, sizeof *g->hyper_host, cudaHostAllocDefault);
    if (rc == cudaSuccess)
        rc = cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming);
    for (int i = 0; i < ST_COUNT && rc == cudaSuccess; i++) {
        rc = cudaEventCreateWithFlags(&g->join[i], cudaEventDisableTiming);
        if (rc == cudaSuccess)
            rc = cudaEventCreateWithFlags(&g->seam[i], cudaEventDisableTiming);
    }
    /* --skip-nonfinite: over nccl the graph decides (decide_and_update);
     * piecewise, the host agrees after the step and commits, as launched */
    int on_device = v->opts->skip_nonfinite && !g->piecewise;
    if (rc == cudaSuccess && on_device)
        rc = cudaMalloc((void **)&g->bad_dev, sizeof *g->bad_dev);
    if (rc == cudaSuccess && on_device)
        rc = cudaMalloc((void **)&g->code_dev, v->p->ninstr + 1);
    if (rc != cudaSuccess) {
        snprintf(err, errlen, "CUDA graph set-up: %s", cudaGetErrorString(rc));
        return -1;
    }
    return 0;
}

/* A segment's graph gone (a launch of it still in flight finishes first:
 * cudaGraphExecDestroy frees it on completion). */
static void drop_graph(cvm_segment *sg)
{
    if (sg->exec)
        cudaCheck(cudaGraphExecDestroy(sg->exec));
    if (sg->graph)
        cudaCheck(cudaGraphDestroy(sg->graph));
    sg->exec = NULL;
    sg->graph = NULL;
}

void cvm_graph_teardown(cuda_vm *v)
{
    cvm_graph *g = v->graph;
    if (!g)
        return;
    for (uint32_t k = 0; g->seg && k < g->nseg; k++)
        drop_graph(&g->seg[k]);
    if (g->fork)
        cudaCheck(cudaEventDestroy(g->fork));
    for (int i = 0; i < ST_COUNT; i++) {
        if (g->join[i])
            cudaCheck(cudaEventDestroy(g->join[i]));
        if (g->seam[i])
            cudaCheck(cudaEventDestroy(g->seam[i]));
    }
    cudaCheck(cudaFree(g->hyper_dev));
    cudaCheck(cudaFree(g->bad_dev));
    cudaCheck(cudaFree(g->code_dev));
    if (g->hyper_host)
        cudaCheck(cudaFreeHost(g->hyper_host));
    free(g->nf_kind);
    free(g->zero);
    free(g->seg);
    free(g->seg_at);
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
    else if (g->piecewise)
        printf("graph: on, piecewise: rank 0's step captured once as %u CUDA graph%s, replayed "
               "between its --transport mpi transfers, which the host makes\n",
               g->nseg, g->nseg == 1 ? "" : "s");
    else
        printf("graph: on, each rank's step captured once as a CUDA graph and replayed\n");
    fflush(stdout);
}

const pp_cu_step_hyper *cvm_graph_hyper(const cuda_vm *v)
{
    return v->graph && !v->graph->why ? v->graph->hyper_dev : NULL;
}

const float *cvm_graph_skip(const cuda_vm *v)
{
    const cvm_graph *g = v->graph;
    return g && !g->why && !g->launching ? g->bad_dev : NULL;
}

int cvm_graph_capturing(const cuda_vm *v) { return v->graph && v->graph->capturing; }

/* Every buffer with no last operation: the step before is over on the
 * host (or, piecewise, the streams met at a seam), so nothing in the graph
 * needs to wait for an event of it. */
static void forget_streams(cuda_vm *v)
{
    const pp_plan *p = v->p;
    for (uint32_t s = 0; s < p->S; s++)
        v->param_dep[s].stream = v->grad_dep[s].stream = -1;
    for (uint32_t k = 0; k < p->nslots; k++)
        v->slot_dep[k].stream = -1;
}

/* Every other stream's work so far joined into the compute stream. */
static void join(cuda_vm *v)
{
    cvm_graph *g = v->graph;
    for (int i = 0; i < ST_COUNT; i++)
        if (i != ST_COMPUTE) {
            cudaCheck(cudaEventRecord(g->join[i], v->st[i]));
            cudaCheck(cudaStreamWaitEvent(v->st[ST_COMPUTE], g->join[i], 0));
        }
}

/* --skip-nonfinite, at the end of the captured step (every check done on
 * both lanes, joined): the rank's records reduced to a flag on the device
 * as the host's read_checks would find them, summed over every rank (an
 * all-reduce on the world communicator, which no step instruction uses),
 * then the OptimizerSteps the core deferred, whose kernels read the flag:
 * updates, or only zeroed gradients where some rank found a non-finite
 * number. The host's end-of-step agreement, from the same records, then
 * says the same and has nothing left to commit. */
static void decide_and_update(cuda_vm *v)
{
    cvm_graph *g = v->graph;
    const pp_plan *p = v->p;
    cudaStream_t cs = v->st[ST_COMPUTE];
    cudaCheck(pp_cu_step_bad(v->nf_dev[0], v->nf_dev[1] ? v->nf_dev[1] : v->nf_dev[0], g->code_dev,
                             p->ninstr, PP_NF_LOSS, g->bad_dev, cs));
    if (v->world)
        ncclCheck(ncclAllReduce(g->bad_dev, g->bad_dev, 1, ncclFloat, ncclSum, v->world, cs));
    pp_vm_core_commit(&v->c, 1);
    join(v);
}

/* The records' kinds and lanes where pp_cu_step_bad reads them, once the
 * capture has set them (outside it: a copy the host waits for). */
static void put_codes(cuda_vm *v)
{
    cvm_graph *g = v->graph;
    const pp_plan *p = v->p;
    signed char *code = (signed char *)g->nf_kind; /* (scratch until the end of the step) */
    for (uint32_t i = 0; i < p->ninstr; i++)
        code[i] = (signed char)(v->nf_kind[i] + 16 * v->nf_lane[i]);
    cudaCheck(cudaMemcpy(g->code_dev, code, p->ninstr, cudaMemcpyHostToDevice));
}

/* Segment sg's instructions through the core's dispatch, captured, from
 * the core's zeroed-gradient marks now (sg->zero_in): which backward
 * writes its weight gradients at beta 0 (vm/grads_zero.c) is decided here
 * from them, so the graph holds those GEMMs as they are, right for every
 * step that reaches the segment with the same marks. The gradients are
 * zeroed at start-up and every step's updates zero them again, so step 1
 * and each later step reach it alike; a segment reached with other marks
 * (gradients some step does not zero, a step PP_INJECT_NAN launched) is
 * captured again from those. The marks and the OptimizerSteps the core
 * deferred (--skip-nonfinite over mpi: the host's commit runs them) are
 * what a replay puts back. */
static void capture(cuda_vm *v, cvm_segment *sg)
{
    cvm_graph *g = v->graph;
    const pp_plan *p = v->p;
    cudaStream_t cs = v->st[ST_COMPUTE];
    drop_graph(sg);
    memcpy(sg->zero_in, v->c.g_zero, p->S);
    forget_streams(v);
    cudaCheck(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    cudaCheck(cudaEventRecord(g->fork, cs));
    for (int i = 0; i < ST_COUNT; i++)
        if (i != ST_COMPUTE)
            cudaCheck(cudaStreamWaitEvent(v->st[i], g->fork, 0));
    g->capturing = 1;
    for (uint32_t i = sg->first; i < sg->end; i++) {
        pp_guard_instr(i, &p->code[i]);
        pp_vm_core_exec(v, &p->code[i]);
    }
    join(v);
    if (g->bad_dev && sg->end == p->ninstr) /* --skip-nonfinite (nccl): agree, then update */
        decide_and_update(v);
    g->capturing = 0;
    cudaCheck(cudaStreamEndCapture(cs, &sg->graph));
    cudaCheck(cudaGraphInstantiate(&sg->exec, sg->graph, 0));
    forget_streams(v);
    memcpy(sg->zero_out, v->c.g_zero, p->S);
}

/* After a replay of sg, what running its instructions would have left on
 * the host: the marks, and, with --skip-nonfinite where the graph holds no
 * update (piecewise: no device flag), its OptimizerSteps deferred in plan
 * order for the host's commit, as pp_vm_core_defer defers them. */
static void replayed(cuda_vm *v, const cvm_segment *sg)
{
    const pp_plan *p = v->p;
    memcpy(v->c.g_zero, sg->zero_out, p->S);
    int defers = v->opts->skip_nonfinite && !v->graph->bad_dev;
    for (uint32_t i = sg->first; defers && i < sg->end; i++)
        if (p->code[i].op == PP_OP_OptimizerStep)
            pp_vm_core_defer(&v->c, &p->code[i]);
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

/* Piecewise: the streams meet. into_graph: the compute stream waits for
 * every other (the transfers before the segment); else every other waits
 * for the compute stream (the segment's graph, before the transfers). */
static void seam(cuda_vm *v, int into_graph)
{
    cvm_graph *g = v->graph;
    cudaStream_t cs = v->st[ST_COMPUTE];
    if (!into_graph)
        cudaCheck(cudaEventRecord(g->seam[ST_COMPUTE], cs));
    for (int i = 0; i < ST_COUNT; i++)
        if (i != ST_COMPUTE && into_graph) {
            cudaCheck(cudaEventRecord(g->seam[i], v->st[i]));
            cudaCheck(cudaStreamWaitEvent(cs, g->seam[i], 0));
        } else if (i != ST_COMPUTE)
            cudaCheck(cudaStreamWaitEvent(v->st[i], g->seam[ST_COMPUTE], 0));
}

int cvm_graph_step(void *be)
{
    cuda_vm *v = be;
    cvm_graph *g = v->graph;
    const pp_plan *p = v->p;
    if (!g || g->why)
        return 0;
    fill_inputs(v);
    /* PP_INJECT_NAN's step changes what one job computes: launched, the
     * replays before and after it untouched (the lr and tokens as filled) */
    g->launching = v->c.inject_step && v->run->step + 1 == v->c.inject_step;
    if (g->launching)
        return 0;
    if (g->captured) /* the replayed segments' checks; a capture sets its own */
        memcpy(v->nf_kind, g->nf_kind, p->ninstr);
    for (uint32_t i = 0; i < p->ninstr;) {
        if (!g->seg_at[i]) { /* a transfer (or markers), as launched */
            pp_guard_instr(i, &p->code[i]);
            pp_vm_core_exec(v, &p->code[i]);
            i++;
            continue;
        }
        cvm_segment *sg = &g->seg[g->seg_at[i] - 1];
        if (g->piecewise)
            seam(v, 1);
        int capturing = !sg->exec || memcmp(sg->zero_in, v->c.g_zero, p->S);
        if (capturing)
            capture(v, sg);
        if (capturing && g->bad_dev && sg->end == p->ninstr)
            put_codes(v);
        cudaCheck(cudaGraphLaunch(sg->exec, v->st[ST_COMPUTE]));
        if (!capturing)
            replayed(v, sg);
        if (g->piecewise) {
            seam(v, 0);
            forget_streams(v);
            for (uint32_t s = 0; s < p->S; s++) /* the segment may have updated them */
                cvm_params_changed(v, (int)s);
        }
        i = sg->end;
    }
    memcpy(g->nf_kind, v->nf_kind, p->ninstr); /* end_step's read_checks clears them */
    g->captured = 1;
    return 1;
}
