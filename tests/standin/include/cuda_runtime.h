/* cuda_runtime.h - HOST STAND-IN (tests/standin): the runtime API plus, in
 * C++, dim3 and the kernel-launch shim (kernel_shim.h). Not CUDA. */
#ifndef PP_STANDIN_CUDA_RUNTIME_H
#define PP_STANDIN_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "kernel_shim.h"
#endif
#endif
