/* blas_core.h - whether OpenBLAS runs kernels older than this CPU allows.
 *
 * OpenBLAS picks its kernels from the CPU's model number at load time;
 * Debian's 0.3.21 does not know some newer Intel models and falls back to
 * its Prescott (SSE3) kernels: on an AVX-512 Xeon here SGEMM then ran at
 * 18-26 GFLOP/s a core, PyTorch's at 47, and a tensor-parallel llama run
 * left the reference by 2e-5 (the one fp32 check that noticed). The
 * variable OPENBLAS_CORETYPE names the kernels to use instead: pprun sets
 * it for the ranks it starts (when the user has not), make test for its
 * runs. */
#ifndef PP_VM_BLAS_CORE_H
#define PP_VM_BLAS_CORE_H

/* The OPENBLAS_CORETYPE this CPU deserves ("SkylakeX" with AVX-512,
 * "Haswell" with AVX2 and FMA) when OpenBLAS, as loaded in this process,
 * runs older kernels; NULL when it runs those or newer ones, or the CPU
 * has neither. */
const char *pp_blas_better_core(void);

/* The kernels OpenBLAS runs in this process, in its own words
 * ("Prescott", "SkylakeX", ...). */
const char *pp_blas_core_name(void);

#endif
