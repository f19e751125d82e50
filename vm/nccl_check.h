/* nccl_check.h - the error macro for NCCL calls, the twin of cudaCheck
 * (kernels/cuda_check.h) and mpiCheck (check.h): print file:line, the call
 * and what NCCL says, then pp_cuda_fatal(), whose hook (installed by
 * vm/interp_cuda.c) aborts this rank's communicators and then every rank. */
#ifndef PP_VM_NCCL_CHECK_H
#define PP_VM_NCCL_CHECK_H

#include <nccl.h>
#include <stdio.h>

#include "../kernels/cuda_check.h"

static inline void nccl_check(ncclResult_t rc, const char *what, const char *file, int line)
{
    if (rc == ncclSuccess)
        return;
    const char *detail = ncclGetLastError(NULL); /* this thread's last error, often more precise */
    fprintf(stderr, "ppvm: [%s:%d] %s failed: %s%s%s\n", file, line, what, ncclGetErrorString(rc),
            detail && *detail ? ": " : "", detail ? detail : "");
    pp_cuda_fatal();
}
#define ncclCheck(call) nccl_check((call), #call, __FILE__, __LINE__)

#endif
