/* graph.cpp - HOST STAND-IN (tests/standin) of CUDA stream capture and
 * graphs: between cudaStreamBeginCapture and cudaStreamEndCapture every
 * operation enqueued on the capturing stream, or on a stream that waited
 * for an event recorded in the capture (CUDA's fork and join), is recorded
 * instead of run, with the stream it was issued on, and so are the event
 * records and waits between those streams (the graph's edges), each
 * captured event standing for a private one of the graph's. cudaGraphLaunch
 * forks every recorded stream from its stream, replays the operations,
 * records and waits on their own streams in the order the host issued
 * them, then joins them back: the graph's nodes keep its edges and no
 * more, so streams overlap in a replay as in the launched step, and every
 * operation is checked again by the stream-ordering check. A host synchronisation while a capture is active
 * (cudaStreamSynchronize, cudaMemcpy, cudaEventSynchronize, ...) fails
 * with cudaErrorStreamCaptureUnsupported and invalidates the capture, whose
 * cudaStreamEndCapture then fails with cudaErrorStreamCaptureInvalidated,
 * as CUDA's global capture mode does. Not CUDA: the graph replays on the
 * streams it was captured on (CUDA's on streams of its own), a wait for an
 * event recorded outside the capture is dropped, and unjoined forked
 * streams are not refused. */
#include <map>
#include <memory>
#include <set>
#include <string.h>
#include <vector>

#include "standin.h"

enum { CAP_OP, CAP_RECORD, CAP_WAIT };

/* A recorded operation (CAP_OP), or an edge: the graph's own event for a
 * captured one recorded on st (CAP_RECORD) or waited for by st (CAP_WAIT). */
struct CapOp {
    int kind;
    cudaStream_t st;
    cudaEvent_t ev;
    const char *what;
    std::vector<pp_si_access> acc;
    std::function<void()> start;
    std::function<int()> done;
};

/* The graph's private events, destroyed with the last graph or exec using them. */
struct Events {
    std::map<cudaEvent_t, cudaEvent_t> of; /* a captured event -> the graph's */
    ~Events()
    {
        for (auto &e : of)
            cudaEventDestroy(e.second);
    }
};

struct pp_si_graph {
    std::vector<CapOp> ops;
    std::shared_ptr<Events> ev = std::make_shared<Events>();
};

struct pp_si_graph_exec {
    std::vector<CapOp> ops;
    std::shared_ptr<Events> ev;
    std::vector<cudaEvent_t> join; /* [0] the fork, then one per stream */
    std::vector<cudaStream_t> streams;
    ~pp_si_graph_exec()
    {
        for (cudaEvent_t e : join)
            cudaEventDestroy(e);
    }
};

/* The graph's own event standing for captured event ev. */
static cudaEvent_t own_event(pp_si_graph *g, cudaEvent_t ev)
{
    auto it = g->ev->of.find(ev);
    if (it != g->ev->of.end())
        return it->second;
    cudaEvent_t mine = NULL;
    cudaEventCreateWithFlags(&mine, cudaEventDisableTiming);
    g->ev->of[ev] = mine;
    return mine;
}

struct Capture {
    cudaStream_t origin;
    pp_si_graph *g;
    int invalid;
};

static std::map<cudaStream_t, Capture *> g_cap;  /* streams in a capture */
static std::map<cudaEvent_t, Capture *> g_evcap; /* events recorded in one */

/* what the captures that ended well hold: pp_si_capture_counts */
static long g_graphs, g_graph_ops, g_graph_memsets;

int pp_si_capture_take(cudaStream_t st, const char *what, const pp_si_access *acc, int nacc,
                       std::function<void()> &start, std::function<int()> &done)
{
    if (!st || g_cap.empty())
        return 0;
    auto it = g_cap.find(st);
    if (it == g_cap.end())
        return 0;
    CapOp op;
    op.kind = CAP_OP;
    op.st = st;
    op.ev = NULL;
    op.what = what;
    op.acc.assign(acc, acc + nacc);
    op.start = std::move(start);
    op.done = std::move(done);
    it->second->g->ops.push_back(std::move(op));
    return 1;
}

void pp_si_capture_counts(long *graphs, long *ops, long *memsets)
{
    *graphs = g_graphs;
    *ops = g_graph_ops;
    *memsets = g_graph_memsets;
}

int pp_si_capture_sync(void)
{
    if (g_cap.empty())
        return 0;
    for (auto &c : g_cap)
        c.second->invalid = 1;
    return 1;
}

void pp_si_capture_event_record(cudaEvent_t ev, cudaStream_t st)
{
    auto it = st ? g_cap.find(st) : g_cap.end();
    if (it == g_cap.end()) {
        g_evcap.erase(ev);
        return;
    }
    g_evcap[ev] = it->second;
    pp_si_graph *g = it->second->g;
    g->ops.push_back(CapOp{CAP_RECORD, st, own_event(g, ev), "cudaEventRecord", {}, {}, {}});
}

void pp_si_capture_event_wait(cudaStream_t st, cudaEvent_t ev)
{
    auto e = g_evcap.find(ev);
    if (e == g_evcap.end() || !st)
        return;
    g_cap[st] = e->second; /* st joins the capture */
    pp_si_graph *g = e->second->g;
    g->ops.push_back(CapOp{CAP_WAIT, st, own_event(g, ev), "cudaStreamWaitEvent", {}, {}, {}});
}

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode)
{
    (void)mode;
    if (!st || g_cap.count(st))
        return cudaErrorIllegalState; /* the legacy stream, or already capturing */
    g_cap[st] = new Capture{st, new pp_si_graph(), 0};
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph)
{
    auto it = g_cap.find(st);
    if (!graph || it == g_cap.end() || it->second->origin != st)
        return cudaErrorIllegalState;
    Capture *c = it->second;
    for (auto i = g_cap.begin(); i != g_cap.end();)
        i = i->second == c ? g_cap.erase(i) : std::next(i);
    for (auto i = g_evcap.begin(); i != g_evcap.end();)
        i = i->second == c ? g_evcap.erase(i) : std::next(i);
    int invalid = c->invalid;
    if (!invalid) {
        g_graphs++;
        for (const CapOp &op : c->g->ops)
            if (op.kind == CAP_OP) {
                g_graph_ops++;
                g_graph_memsets += !strcmp(op.what, "cudaMemsetAsync");
            }
    }
    *graph = invalid ? NULL : c->g;
    if (invalid)
        delete c->g;
    delete c;
    return invalid ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t st, enum cudaStreamCaptureStatus *status)
{
    if (!status)
        return cudaErrorInvalidValue;
    auto it = st ? g_cap.find(st) : g_cap.end();
    *status = it == g_cap.end()     ? cudaStreamCaptureStatusNone
              : it->second->invalid ? cudaStreamCaptureStatusInvalidated
                                    : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    if (!exec || !graph || flags)
        return cudaErrorInvalidValue;
    auto *x = new pp_si_graph_exec();
    x->ops = graph->ops;
    x->ev = graph->ev;
    std::set<cudaStream_t> seen;
    for (const CapOp &op : x->ops)
        if (seen.insert(op.st).second)
            x->streams.push_back(op.st);
    x->join.resize(x->streams.size() + 1);
    for (cudaEvent_t &e : x->join)
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    *exec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
    if (!exec)
        return cudaErrorInvalidValue;
    /* every captured stream starts after what st holds, ... */
    cudaEventRecord(exec->join[0], st);
    for (cudaStream_t s : exec->streams)
        if (s != st)
            cudaStreamWaitEvent(s, exec->join[0], 0);
    for (const CapOp &op : exec->ops)
        if (op.kind == CAP_RECORD)
            cudaEventRecord(op.ev, op.st);
        else if (op.kind == CAP_WAIT)
            cudaStreamWaitEvent(op.st, op.ev, 0);
        else
            pp_si_enqueue(op.st, op.what, op.acc.data(), (int)op.acc.size(), op.start, op.done);
    /* ... and what follows on st waits for all of them */
    for (size_t i = 0; i < exec->streams.size(); i++)
        if (exec->streams[i] != st) {
            cudaEventRecord(exec->join[i + 1], exec->streams[i]);
            cudaStreamWaitEvent(st, exec->join[i + 1], 0);
        }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    if (!exec)
        return cudaErrorInvalidValue;
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    if (!graph)
        return cudaErrorInvalidValue;
    delete graph;
    return cudaSuccess;
}
}
