/* cpu_kernels.h - the CPU kernels the model is built from. GEMMs go to the
 * BLAS (cblas_sgemm); pp_gemm_ref is the straightforward C version the tests
 * compare it against. Row-major throughout. */
#ifndef PP_CPU_KERNELS_H
#define PP_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* C[M][N] = alpha * op(A) op(B) + beta * C, op = transpose when ta/tb set.
 * A is [M][K] (or [K][M] if ta), B is [K][N] (or [N][K] if tb). */
void pp_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, const float *B,
             float beta, float *C);
void pp_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 const float *B, float beta, float *C);

void pp_embedding_forward(const int32_t *tokens, int batch, int context, const float *E,
                          int embed, float *out);
void pp_embedding_backward(const int32_t *tokens, int batch, int context, const float *dout,
                           int embed, float *dE);
void pp_bias_add(float *y, const float *bias, int rows, int cols);
void pp_bias_grad(const float *dy, int rows, int cols, float *db); /* db += column sums */
void pp_gelu_forward(const float *x, float *y, size_t n);
void pp_gelu_backward(const float *x, const float *dy, float *dx, size_t n); /* dx = dy*gelu'(x) */
/* Softmax cross-entropy over rows of logits [rows][V]: writes probs, returns
 * the summed loss. */
double pp_softmax_xent_forward(const float *logits, const int32_t *targets, int target_stride,
                               int rows, int V, float *probs);
/* dlogits = (probs - onehot(target)) * scale */
void pp_softmax_xent_backward(const float *probs, const int32_t *targets, int target_stride,
                              int rows, int V, float scale, float *dlogits);

#endif
