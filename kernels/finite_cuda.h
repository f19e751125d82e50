/* finite_cuda.h - the cuda backend's non-finite check (vm/core.c): the
 * first number of a device array that is not finite, found on the GPU so
 * that the host reads every check of a step in one copy at its end. The
 * twin of pp_first_nonfinite (finite.h), which the cpu backend runs. */
#ifndef PP_FINITE_CUDA_H
#define PP_FINITE_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rec[0] = the index of the first of x[0..n) that is not finite, or -1 when
 * all are (or n is 0); rec[1] = that number, widened to a double (0 when
 * none). One block, enqueued on st; never synchronises. */
cudaError_t pp_cu_first_nonfinite(const float *x, size_t n, double *rec, cudaStream_t st);
/* The same over n bf16 numbers (pp_first_nonfinite_bf16). */
cudaError_t pp_cu_first_nonfinite_bf16(const uint16_t *x, size_t n, double *rec, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
