/* graph.cpp - HOST STAND-IN (tests/standin) of CUDA stream capture and
 * graphs: between cudaStreamBeginCapture and cudaStreamEndCapture every
 * operation enqueued on the capturing stream, or on a stream that waited
 * for an event recorded in the capture (CUDA's fork and join), is recorded
 * instead of run; cudaGraphLaunch enqueues the recorded operations on its
 * stream in the order the host issued them (a valid order of the graph,
 * whose edges the host's issue order respects), each checked again by the
 * stream-ordering check. A host synchronisation while a capture is active
 * (cudaStreamSynchronize, cudaMemcpy, cudaEventSynchronize, ...) fails
 * with cudaErrorStreamCaptureUnsupported and invalidates the capture, whose
 * cudaStreamEndCapture then fails with cudaErrorStreamCaptureInvalidated,
 * as CUDA's global capture mode does. Not CUDA: the graph is a list, not a
 * DAG, and unjoined forked streams are not refused. */
#include <map>
#include <vector>

#include "standin.h"

struct CapOp {
    const char *what;
    std::vector<pp_si_access> acc;
    std::function<void()> start;
    std::function<int()> done;
};

struct pp_si_graph {
    std::vector<CapOp> ops;
};

struct pp_si_graph_exec {
    std::vector<CapOp> ops;
};

struct Capture {
    cudaStream_t origin;
    pp_si_graph *g;
    int invalid;
};

static std::map<cudaStream_t, Capture *> g_cap;  /* streams in a capture */
static std::map<cudaEvent_t, Capture *> g_evcap; /* events recorded in one */

int pp_si_capture_take(cudaStream_t st, const char *what, const pp_si_access *acc, int nacc,
                       std::function<void()> &start, std::function<int()> &done)
{
    if (!st || g_cap.empty())
        return 0;
    auto it = g_cap.find(st);
    if (it == g_cap.end())
        return 0;
    CapOp op;
    op.what = what;
    op.acc.assign(acc, acc + nacc);
    op.start = std::move(start);
    op.done = std::move(done);
    it->second->g->ops.push_back(std::move(op));
    return 1;
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
    if (it == g_cap.end())
        g_evcap.erase(ev);
    else
        g_evcap[ev] = it->second;
}

void pp_si_capture_event_wait(cudaStream_t st, cudaEvent_t ev)
{
    auto e = g_evcap.find(ev);
    if (e != g_evcap.end() && st)
        g_cap[st] = e->second; /* st joins the capture */
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
    *exec = new pp_si_graph_exec{graph->ops};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
    if (!exec)
        return cudaErrorInvalidValue;
    for (const CapOp &op : exec->ops)
        pp_si_enqueue(st, op.what, op.acc.data(), (int)op.acc.size(), op.start, op.done);
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
