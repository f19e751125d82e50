/* host_link_cuda.c - ppvm --profile's host link on the cuda backend
 * (host_link_cuda.h): offload's copies as interp_cuda.c's op_host_copy
 * makes them, cudaMemcpyAsync between device memory and pinned host memory
 * on the copy stream, each timed by CUDA events recorded around it on that
 * stream. The plain C reference is profile_host.c's copy_cpu (a memcpy). */
#include "host_link_cuda.h"

#include "check.h"

typedef struct {
    cuda_vm *v;
    void *dev, *host;
    cudaEvent_t ev[2];
} cuda_probe;

static double copy_cuda(void *ctx, size_t bytes, int to_host)
{
    cuda_probe *c = ctx;
    cudaStream_t st = c->v->st[ST_COPY];
    cudaCheck(cudaEventRecord(c->ev[0], st));
    cudaCheck(cudaMemcpyAsync(to_host ? c->host : c->dev, to_host ? c->dev : c->host, bytes,
                              to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, st));
    cudaCheck(cudaEventRecord(c->ev[1], st));
    cvm_host_wait(c->v, c->ev[1], "--profile's host-link probe");
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]));
    return 1e-3 * (double)ms;
}

int cvm_host_link(cuda_vm *v, size_t bytes, double *bandwidth)
{
    cuda_probe c = {v, NULL, NULL, {NULL, NULL}};
    int ok = 1;
    if (v->me == 0) {
        v->run->t0 = MPI_Wtime(); /* the watchdog's clock, as for a step */
        ok = cudaMalloc(&c.dev, bytes) == cudaSuccess &&
             cudaHostAlloc(&c.host, bytes, cudaHostAllocDefault) == cudaSuccess;
        if (!ok)
            (void)cudaGetLastError(); /* not sticky: the run may still write its file */
    }
    /* every rank returns what rank 0 could do: the driver's next steps are collective */
    ok = pp_vm_all_ok(ok, v->me, "out of device or pinned memory for --profile's host-link probe");
    if (ok && v->me == 0) {
        cudaCheck(cudaEventCreateWithFlags(&c.ev[0], cudaEventDefault));
        cudaCheck(cudaEventCreateWithFlags(&c.ev[1], cudaEventDefault));
        cudaCheck(cudaMemsetAsync(c.dev, 0, bytes, v->st[ST_COPY]));
        pp_profile_host_link(copy_cuda, &c, bytes, bandwidth);
        cudaCheck(cudaEventDestroy(c.ev[0]));
        cudaCheck(cudaEventDestroy(c.ev[1]));
    }
    if (c.dev)
        cudaCheck(cudaFree(c.dev));
    if (c.host)
        cudaCheck(cudaFreeHost(c.host));
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD)); /* the others wait: rank 0 measures alone */
    return ok ? 1 : -1;
}
