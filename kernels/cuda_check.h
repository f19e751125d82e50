/* cuda_check.h - error macros for CUDA, cuBLAS and NCCL calls: print
 * file:line, the call and what failed, then call pp_cuda_fatal, which ends
 * the process (and, under mpirun, every rank: ppvm installs
 * pp_cuda_fatal_hook to abort the NCCL communicators and MPI_Abort).
 * Inside a training step there is nothing sensible to recover to, and a
 * message beats a hang. Ending the process is the program's policy, not
 * the kernels': pp_cuda_fatal and the hook are defined by the program that
 * links them (vm/fatal_cuda.c for ppvm and the test binaries). */
#ifndef PP_CUDA_CHECK_H
#define PP_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called once before exiting on an error (NULL: just exit(1)). */
extern void (*pp_cuda_fatal_hook)(void);

/* Runs the hook, then ends the process with status 1; never returns. */
void pp_cuda_fatal(void);

static inline void cuda_check(cudaError_t rc, const char *what, const char *file, int line)
{
    if (rc == cudaSuccess)
        return;
    fprintf(stderr, "ppvm: [%s:%d] %s failed: %s (%s)\n", file, line, what, cudaGetErrorString(rc),
            cudaGetErrorName(rc));
    pp_cuda_fatal();
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)

static inline void cublas_check(cublasStatus_t rc, const char *what, const char *file, int line)
{
    if (rc == CUBLAS_STATUS_SUCCESS)
        return;
    fprintf(stderr, "ppvm: [%s:%d] %s failed: %s\n", file, line, what, cublasGetStatusString(rc));
    pp_cuda_fatal();
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif

#endif
