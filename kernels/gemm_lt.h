/* gemm_lt.h - GEMMs with a fused epilogue on cuBLASLt, for mlp_cuda.cu:
 * the row-major contract of cuda_stage.h's gemm() (C[M][N] = op(A) op(B),
 * fp32 or bf16 operands, fp32 output, fp32 accumulation), followed by one of
 *   PP_LT_BIAS           D = op(A) op(B) + c + bias  (c optional, beta 1)
 *   PP_LT_GELU_AUX_BIAS  aux = op(A) op(B) + bias; D = gelu(aux)
 *   PP_LT_DGELU          D = (op(A) op(B)) * gelu'(aux)
 * with bias [N] fp32 (along the rows of the row-major C, the feature
 * dimension) and aux [M][N] fp32. GELU is the tanh approximation, as
 * cuda_kernels.h's.
 *
 * pp_lt_gemm runs the GEMM only when cuBLASLt's heuristic
 * (cublasLtMatmulAlgoGetHeuristic) offers an algorithm for that exact
 * problem: shape, types, epilogue and the alignment of every pointer.
 * Otherwise it enqueues nothing and returns 0, and the caller runs its
 * unfused path. Each problem's answer (and its algorithm) is cached in the
 * context, so the heuristic runs once per problem; the workspace is
 * allocated once, by pp_lt_create. Problems cuBLASLt rules out on paper
 * are answered 0 without asking: an aux leading dimension (N) that is not a
 * multiple of 8, K == 0. */
#ifndef PP_GEMM_LT_H
#define PP_GEMM_LT_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_lt pp_lt;

typedef enum { PP_LT_NONE, PP_LT_BIAS, PP_LT_GELU_AUX_BIAS, PP_LT_DGELU } pp_lt_kind;

typedef struct {
    pp_lt_kind kind;   /* PP_LT_NONE: never fused, pp_lt_gemm returns 0 */
    const float *bias; /* [N]: PP_LT_BIAS, PP_LT_GELU_AUX_BIAS */
    float *aux;        /* [M][N]: written by GELU_AUX_BIAS, read by DGELU */
    const float *c;    /* [M][N] added (beta 1) by PP_LT_BIAS; NULL: nothing */
} pp_lt_epilogue;

/* The workspace pp_lt_create allocates (device memory, once). */
#define PP_LT_WORKSPACE_BYTES ((size_t)32 << 20)

/* A cuBLASLt handle, the workspace and an empty cache. 0, or -1 with err. */
int pp_lt_create(pp_lt **out, char *err, size_t errlen);
void pp_lt_destroy(pp_lt *lt);

/* D[M][N] = the epilogue applied to op(A) op(B), enqueued on st: A is [M][K]
 * (or [K][M] if ta), B is [K][N] (or [N][K] if tb), both fp32 or, with
 * bf16, both bf16. Returns 1 when enqueued, 0 when cuBLASLt offers no
 * algorithm, or refuses at the call the one it offered (said once on
 * stderr; the problem then falls back for good): nothing enqueued. */
int pp_lt_gemm(pp_lt *lt, cudaStream_t st, int ta, int tb, int M, int N, int K, const void *A,
               const void *B, int bf16, const pp_lt_epilogue *e, float *D);

#ifdef __cplusplus
}
#endif

#endif
