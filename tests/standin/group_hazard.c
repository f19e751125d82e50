/* group_hazard.c - bin/standin-group-hazard, for the `standin` suite: two
 * ranks exchange 256 floats over the stand-in NCCL in one group, once in
 * place (send x and receive into x: a buffer hazard NCCL leaves undefined)
 * and once apart (send x, receive into y), and each rank prints whether
 * it got its peer's values. With the argument recv-first, each group posts
 * its receive before its send. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#define N 256

static int right(const float *h, int peer)
{
    for (int i = 0; i < N; i++)
        if (h[i] != (float)(peer * 1000 + i))
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    int me, size;
    int recv_first = argc > 1 && !strcmp(argv[1], "recv-first");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = 1 - me;
    cudaSetDevice(me);
    ncclUniqueId id;
    if (me == 0)
        ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c;
    if (size != 2 || ncclCommInitRank(&c, 2, id, me) != ncclSuccess) {
        fprintf(stderr, "init failed: %s\n", ncclGetLastError(NULL));
        return 1;
    }
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    float h[N], *x, *y;
    cudaMalloc((void **)&x, sizeof h);
    cudaMalloc((void **)&y, sizeof h);
    int ok[2];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < N; i++)
            h[i] = (float)(me * 1000 + i);
        cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
        float *into = k == 0 ? x : y;
        ncclGroupStart();
        if (recv_first) /* the order of posting that `reversed` lets through */
            ncclRecv(into, N, ncclFloat, peer, c, st);
        ncclSend(x, N, ncclFloat, peer, c, st);
        if (!recv_first)
            ncclRecv(into, N, ncclFloat, peer, c, st);
        ncclGroupEnd();
        cudaStreamSynchronize(st);
        cudaMemcpy(h, into, sizeof h, cudaMemcpyDeviceToHost);
        ok[k] = right(h, peer);
    }
    printf("rank %d: in place %s, apart %s\n", me, ok[0] ? "right" : "WRONG",
           ok[1] ? "right" : "WRONG");
    fflush(stdout);
    ncclCommDestroy(c);
    cudaFree(y);
    cudaFree(x);
    cudaStreamDestroy(st);
    MPI_Finalize();
    return 0;
}
