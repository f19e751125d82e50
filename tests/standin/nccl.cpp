/* nccl.cpp - HOST STAND-IN of NCCL over MPI (tests/README.md). Not NCCL.
 *
 * The ranks are separate processes, so data really moves: each
 * communicator is an MPI communicator (ncclCommInitRank splits
 * MPI_COMM_WORLD by the unique id, ncclCommSplit splits its parent), and a
 * send, receive or all-reduce is a non-blocking MPI operation started when
 * its stream reaches it and polled to completion, so a rank waiting for
 * one never stops the rest of its streams.
 *
 * A group (ncclGroupStart .. ncclGroupEnd, or a lone call) becomes one
 * operation per stream whose members take effect in an order chosen by
 * PP_STANDIN_NCCL_ORDER: "posted", "reversed" (the default) or
 * "interleaved" (first, last, second, second to last, ...). In that order a
 * send copies its source, and a receive (or an all-reduce's result) makes
 * its destination undefined at once (filled with 0xff bytes, a NaN in
 * every float) until its data lands when the group completes. So a group
 * that receives into a buffer one of its sends reads sends NaNs under some
 * order, as a GPU may send half-overwritten data; and since which order
 * shows it depends on which member was posted first, such a group is
 * refused outright (check_hazard) unless PP_STANDIN_NCCL_HAZARD=allow. */
#include <mpi.h>
#include <stdarg.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "include/nccl.h"
#include "standin.h"

struct pp_si_nccl {
    MPI_Comm comm;
    int rank, size;
    int aborted;
    ncclResult_t async;
};

static char g_last[512];

static ncclResult_t nfail(ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ncclResult_t nfail(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    va_end(ap);
    return r;
}

extern "C" const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error";
    case ncclSystemError:
        return "unhandled system error";
    case ncclInternalError:
        return "internal error";
    case ncclInvalidArgument:
        return "invalid argument";
    case ncclInvalidUsage:
        return "invalid usage";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    }
    return "unknown result code";
}

extern "C" const char *ncclGetLastError(ncclComm_t c)
{
    (void)c;
    return g_last;
}

static int mpi_ready(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return nfail(ncclInvalidArgument, "ncclGetUniqueId: NULL");
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned v[3] = {(unsigned)getpid(), (unsigned)ts.tv_nsec, (unsigned)rand()};
    memcpy(id->internal, "pp-standin", 10);
    memcpy(id->internal + 16, v, sizeof v);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank)
{
    if (!c || nranks < 1 || rank < 0 || rank >= nranks)
        return nfail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    if (memcmp(id.internal, "pp-standin", 10))
        return nfail(ncclInvalidArgument, "ncclCommInitRank: not a unique id from ncclGetUniqueId");
    if (!mpi_ready())
        return nfail(ncclSystemError,
                     "the NCCL stand-in runs over MPI, and MPI is not initialised");
    unsigned h = 2166136261u;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        h = (h ^ (unsigned char)id.internal[i]) * 16777619u;
    MPI_Comm comm;
    /* collective over MPI_COMM_WORLD: every process must initialise a
     * communicator at this point */
    MPI_Comm_split(MPI_COMM_WORLD, (int)(h & 0x3fffffff), rank, &comm);
    int size;
    MPI_Comm_size(comm, &size);
    if (size != nranks) {
        MPI_Comm_free(&comm);
        return nfail(ncclInvalidArgument, "ncclCommInitRank: %d ranks joined, %d expected", size,
                     nranks);
    }
    /* one device per rank, as NCCL demands ("Duplicate GPU detected") */
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    std::vector<char> all((size_t)size * 72);
    char mine[72] = {0};
    memcpy(mine, host, 64);
    int dev = pp_si_current_device();
    memcpy(mine + 64, &dev, sizeof dev);
    MPI_Allgather(mine, 72, MPI_BYTE, all.data(), 72, MPI_BYTE, comm);
    for (int i = 0; i < size; i++)
        if (i != rank && !memcmp(&all[(size_t)i * 72], mine, 72)) {
            MPI_Comm_free(&comm);
            return nfail(ncclInvalidUsage,
                         "Duplicate GPU detected: rank %d and rank %d both on device %d", rank, i,
                         dev);
        }
    *c = new pp_si_nccl{comm, rank, size, 0, ncclSuccess};
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out,
                                      ncclConfig_t *cfg)
{
    (void)cfg;
    if (!c || !out || c->aborted)
        return nfail(ncclInvalidArgument, "ncclCommSplit: bad communicator");
    MPI_Comm nc;
    MPI_Comm_split(c->comm, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &nc);
    if (nc == MPI_COMM_NULL) {
        *out = NULL;
        return ncclSuccess;
    }
    int r, s;
    MPI_Comm_rank(nc, &r);
    MPI_Comm_size(nc, &s);
    *out = new pp_si_nccl{nc, r, s, 0, ncclSuccess};
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c)
        return nfail(ncclInvalidArgument, "ncclCommDestroy: NULL");
    cudaDeviceSynchronize(); /* nothing of it may still be queued */
    if (mpi_ready())
        MPI_Comm_free(&c->comm);
    delete c;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    c->aborted = 1; /* its MPI communicator is left to the process's end */
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *async)
{
    if (!c || !async)
        return nfail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL");
    *async = c->aborted ? ncclInvalidUsage : c->async;
    return ncclSuccess;
}

/* ---- groups ------------------------------------------------------------------------ */

enum { M_SEND, M_RECV, M_ALLREDUCE };
struct Member {
    int kind;
    const void *src;
    void *dst;
    size_t count, bytes;
    MPI_Datatype type;
    int peer;
    ncclComm_t comm;
    cudaStream_t st;
};

static int g_depth;
static std::vector<Member> g_pending;

static std::vector<int> chosen_order(int n)
{
    const char *e = getenv("PP_STANDIN_NCCL_ORDER");
    std::vector<int> o;
    if (e && !strcmp(e, "posted"))
        for (int i = 0; i < n; i++)
            o.push_back(i);
    else if (e && !strcmp(e, "interleaved"))
        for (int lo = 0, hi = n - 1; lo <= hi; lo++, hi--) {
            o.push_back(lo);
            if (hi != lo)
                o.push_back(hi);
        }
    else if (!e || !*e || !strcmp(e, "reversed"))
        for (int i = n - 1; i >= 0; i--)
            o.push_back(i);
    else
        pp_si_fatal("PP_STANDIN_NCCL_ORDER=%s: expected posted, reversed or interleaved", e);
    return o;
}

/* One group's members on one stream, as one stream operation. */
struct GroupOp {
    std::vector<Member> m;
    std::vector<std::vector<char>> in, out; /* per member: what it sends, what it receives */
    std::vector<MPI_Request> req;
    std::vector<int> order;

    void start() /* again at each replay of a graph that captured it */
    {
        size_t n = m.size();
        req.clear();
        in.resize(n);
        out.resize(n);
        order = chosen_order((int)n);
        for (size_t i = 0; i < n; i++) /* receives first: they only post buffers */
            if (m[i].kind == M_RECV) {
                out[i].resize(m[i].bytes);
                req.push_back(MPI_REQUEST_NULL);
                MPI_Irecv(out[i].data(), (int)m[i].count, m[i].type, m[i].peer, 0, m[i].comm->comm,
                          &req.back());
            }
        /* in the chosen order: sends read their source, receives spoil
         * their destination */
        for (int i : order) {
            Member &x = m[(size_t)i];
            if (x.kind != M_RECV)
                in[(size_t)i].assign((const char *)x.src, (const char *)x.src + x.bytes);
            if (x.kind != M_SEND)
                memset(x.dst, 0xff, x.bytes);
        }
        /* posted in posting order, so messages match as NCCL matches them */
        for (size_t i = 0; i < n; i++) {
            Member &x = m[i];
            if (x.kind == M_RECV)
                continue;
            req.push_back(MPI_REQUEST_NULL);
            if (x.kind == M_SEND)
                MPI_Isend(in[i].data(), (int)x.count, x.type, x.peer, 0, x.comm->comm, &req.back());
            else {
                out[i].resize(x.bytes);
                MPI_Iallreduce(in[i].data(), out[i].data(), (int)x.count, x.type, MPI_SUM,
                               x.comm->comm, &req.back());
            }
        }
    }

    int done()
    {
        int flag = 0;
        MPI_Testall((int)req.size(), req.data(), &flag, MPI_STATUSES_IGNORE);
        if (!flag)
            return 0;
        for (int i : order)
            if (m[(size_t)i].kind != M_SEND)
                memcpy(m[(size_t)i].dst, out[(size_t)i].data(), m[(size_t)i].bytes);
        return 1;
    }
};

/* A group in which one member receives into (or all-reduces into) memory
 * another member sends from: undefined in NCCL, whatever order the members
 * take effect in. The chosen order only decides whether the NaNs show
 * (reversed catches a send posted before the receive, posted the other
 * way round), so the stand-in refuses any such group outright, unless
 * PP_STANDIN_NCCL_HAZARD=allow (the standin suite's demonstration of the
 * wrong numbers). */
static void check_hazard(const std::vector<Member> &m)
{
    const char *allow = getenv("PP_STANDIN_NCCL_HAZARD");
    if (allow && !strcmp(allow, "allow"))
        return;
    for (size_t i = 0; i < m.size(); i++)
        for (size_t j = 0; j < m.size(); j++) {
            if (i == j || m[i].kind == M_RECV || m[j].kind == M_SEND)
                continue;
            const char *s = (const char *)m[i].src, *d = (const char *)m[j].dst;
            if (s < d + m[j].bytes && d < s + m[i].bytes)
                pp_si_fatal("NCCL group hazard: member %zu (%s) writes [%p, +%zu) that member %zu "
                            "(%s) reads [%p, +%zu) in one group on one stream: undefined in "
                            "NCCL, whatever order the members run in",
                            j, m[j].kind == M_RECV ? "ncclRecv" : "ncclAllReduce", (void *)d,
                            m[j].bytes, i, m[i].kind == M_SEND ? "ncclSend" : "ncclAllReduce",
                            (const void *)s, m[i].bytes);
        }
}

static void launch(std::vector<Member> &members)
{
    /* one operation per stream, members in posting order */
    while (!members.empty()) {
        cudaStream_t st = members[0].st;
        auto *g = new GroupOp;
        std::vector<Member> rest;
        std::vector<pp_si_access> acc;
        for (Member &x : members) {
            if (x.st != st) {
                rest.push_back(x);
                continue;
            }
            g->m.push_back(x);
            if (x.kind != M_RECV)
                acc.push_back({x.src, x.bytes, 0});
            if (x.kind != M_SEND)
                acc.push_back({x.dst, x.bytes, 1});
        }
        members.swap(rest);
        check_hazard(g->m);
        const char *what = g->m.size() > 1          ? "an NCCL group"
                           : g->m[0].kind == M_SEND ? "ncclSend"
                           : g->m[0].kind == M_RECV ? "ncclRecv"
                                                    : "ncclAllReduce";
        std::shared_ptr<GroupOp> sp(g);
        pp_si_enqueue(
            st, what, acc.data(), (int)acc.size(), [sp] { sp->start(); },
            [sp] { return sp->done(); });
    }
}

extern "C" ncclResult_t ncclGroupStart(void)
{
    g_depth++;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void)
{
    if (g_depth <= 0)
        return nfail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_depth == 0) {
        std::vector<Member> m;
        m.swap(g_pending);
        launch(m);
    }
    return ncclSuccess;
}

static ncclResult_t post(int kind, const void *src, void *dst, size_t count, ncclDataType_t type,
                         int peer, ncclComm_t c, const char *fn)
{
    const char *why;
    if (!c || c->aborted)
        return nfail(ncclInvalidArgument, "%s: an invalid or aborted communicator", fn);
    size_t el = type == ncclFloat || type == ncclInt32 ? 4 : 1;
    if (type != ncclInt8 && type != ncclUint8 && type != ncclFloat && type != ncclInt32)
        return nfail(ncclInvalidArgument, "%s: data type %d not modelled", fn, (int)type);
    if (kind == M_ALLREDUCE && type != ncclFloat)
        return nfail(ncclInvalidArgument, "%s: only float sums are modelled", fn);
    if (kind != M_ALLREDUCE && (peer < 0 || peer >= c->size))
        return nfail(ncclInvalidArgument, "%s: peer %d of %d ranks", fn, peer, c->size);
    if (count > (size_t)INT32_MAX)
        return nfail(ncclInvalidArgument, "%s: count %zu too large for the stand-in", fn, count);
    size_t bytes = count * el;
    if (bytes && kind != M_RECV && !pp_si_device_range(src, bytes, &why))
        return nfail(ncclInvalidArgument, "%s: send buffer: %s", fn, why);
    if (bytes && kind != M_SEND && !pp_si_device_range(dst, bytes, &why))
        return nfail(ncclInvalidArgument, "%s: receive buffer: %s", fn, why);
    return ncclSuccess;
}

static ncclResult_t add(int kind, const void *src, void *dst, size_t count, ncclDataType_t type,
                        int peer, ncclComm_t c, cudaStream_t st, const char *fn)
{
    ncclResult_t r = post(kind, src, dst, count, type, peer, c, fn);
    if (r != ncclSuccess)
        return r;
    size_t el = type == ncclFloat || type == ncclInt32 ? 4 : 1;
    MPI_Datatype mt = type == ncclFloat ? MPI_FLOAT : type == ncclInt32 ? MPI_INT : MPI_BYTE;
    Member x = {kind, src, dst, count, count * el, mt, peer, c, st};
    if (!count)
        return ncclSuccess;
    g_pending.push_back(x);
    if (g_depth == 0) {
        std::vector<Member> m;
        m.swap(g_pending);
        launch(m);
    }
    return ncclSuccess;
}

extern "C" ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer,
                                 ncclComm_t c, cudaStream_t st)
{
    return add(M_SEND, buf, NULL, count, type, peer, c, st, "ncclSend");
}

extern "C" ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer,
                                 ncclComm_t c, cudaStream_t st)
{
    return add(M_RECV, NULL, buf, count, type, peer, c, st, "ncclRecv");
}

extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                                      ncclDataType_t type, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t st)
{
    if (op != ncclSum)
        return nfail(ncclInvalidArgument, "ncclAllReduce: only ncclSum is modelled");
    return add(M_ALLREDUCE, send, recv, count, type, 0, c, st, "ncclAllReduce");
}
