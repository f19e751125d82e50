/* host_link_cuda.h - ppvm --profile's host link on the cuda backend
 * (backend.h's host_link, profile.h's host_bandwidth; issue 26). Only built
 * when nvcc exists (PP_HAVE_CUDA). */
#ifndef PP_VM_HOST_LINK_CUDA_H
#define PP_VM_HOST_LINK_CUDA_H

#include <stddef.h>

#include "transport_cuda.h"

/* Collective: rank 0 copies `bytes` between device memory and pinned host
 * memory on the copy stream (ST_COPY, where Offload and Reload run), each
 * copy timed by CUDA events around it, while the others wait. 1 with
 * *bandwidth set on rank 0, or -1 on every rank when rank 0 could not
 * allocate the two buffers (said). */
int cvm_host_link(cuda_vm *v, size_t bytes, double *bandwidth);

#endif
