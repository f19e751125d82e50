/* fatal_cuda.c - what a failed CUDA, cuBLAS or NCCL call ends in
 * (kernels/cuda_check.h): pp_cuda_fatal runs the hook ppvm installs
 * (interp_cuda.c: abort the NCCL communicators, then MPI), then ends the
 * process with status 1. Ending the process is the program's decision, so
 * it lives here, linked into ppvm and the test binaries, and no kernels
 * object calls exit. */
#include <stdlib.h>

#include "../kernels/cuda_check.h"

void (*pp_cuda_fatal_hook)(void) = NULL;

void pp_cuda_fatal(void)
{
    if (pp_cuda_fatal_hook)
        pp_cuda_fatal_hook();
    exit(1);
}
