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
void pp_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A, const float *B,
                 float beta, float *C);

void pp_embedding_forward(const int32_t *tokens, int batch, int context, const float *E, int embed,
                          float *out);
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

/* The kernels below are the CPU twins of the CUDA kernels (cuda_kernels.h)
 * that have no composition of the ones above: the tests compare each CUDA
 * kernel against its twin. */

/* h[r][c] += bias[c]; a[r][c] = gelu(h[r][c]) (h keeps the pre-activation).
 * The same arithmetic as pp_bias_add followed by pp_gelu_forward. */
void pp_bias_gelu_forward(float *h, const float *bias, float *a, int rows, int cols);
/* y[r][c] = (y[r][c] + x[r][c]) + bias[c], in that order: the residual block's
 * y = x + a W2^T + b2 once a GEMM has written a W2^T into y. The same bits as
 * pp_add followed by pp_bias_add. */
void pp_residual_bias_add(float *y, const float *x, const float *bias, int rows, int cols);
/* y[i] += x[i] */
void pp_add(float *y, const float *x, size_t n);

/* Layer norm over each row of x [rows][cols]: mean, biased variance,
 * rstd = 1/sqrt(var + 1e-5), y = (x - mean) * rstd * gamma + beta. Writes
 * mean[rows] and rstd[rows] for the backward. */
void pp_layernorm_forward(const float *x, const float *gamma, const float *beta, int rows, int cols,
                          float *y, float *mean, float *rstd);
/* Its backward from the forward's mean and rstd: dx += the input gradient,
 * dgamma += sum over rows of dy * xhat, dbeta += sum over rows of dy. Any
 * output may be NULL, which skips it: dx == NULL computes only the parameter
 * gradients, dgamma == dbeta == NULL only the input gradient, and the two
 * calls together give the same bits as one computing all three (a split
 * backward's B and W). gamma is read only for dx (it may be NULL when dx
 * is). dx must not alias dy (nor on the GPU, whose twin reads dy again
 * after writing dx). */
void pp_layernorm_backward(const float *x, const float *gamma, const float *mean, const float *rstd,
                           const float *dy, int rows, int cols, float *dx, float *dgamma,
                           float *dbeta);

/* Softmax cross-entropy and its backward in one pass per row: loss[r] =
 * -log p[r][target_r], dlogits[r] = (p[r] - onehot(target_r)) * scale, the
 * same values as pp_softmax_xent_forward then pp_softmax_xent_backward.
 * dlogits may alias logits. */
void pp_softmax_xent_fused(const float *logits, const int32_t *targets, int target_stride, int rows,
                           int V, float scale, float *dlogits, float *loss);

/* The t-th step (t >= 1) of AdamW with bias correction and decoupled weight
 * decay: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2, mhat = m / (1 - b1^t),
 * vhat = v / (1 - b2^t), p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p);
 * then g = 0. */
void pp_adamw_step(float *p, float *g, float *m, float *v, size_t n, int t, float lr, float beta1,
                   float beta2, float eps, float weight_decay);

/* bf16 as the upper 16 bits of a float: dst = round-to-nearest-even(src)
 * (NaN stays NaN, quietened), and back (exact). */
void pp_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
void pp_bf16_to_f32(const uint16_t *src, float *dst, size_t n);
/* dst = src rounded to bf16 and widened back: the value a bf16 GEMM operand
 * holds (the bf16 path's CPU GEMMs round their operands so). dst may be src. */
void pp_round_bf16(const float *src, float *dst, size_t n);

/* ------------------------------------------------------------------------ */
/* The gpt model's kernels (gpt.c; the layouts are gpt_layout.h's)           */

/* pp_gemm with explicit leading dimensions (row-major: the length of a
 * stored row of A, B and C), for operands that are column slices of wider
 * rows, such as one head's q, k or v inside a [T][3C] qkv row. */
void pp_gemm_ld(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);

/* x0[b][t][:] = wte[tokens[b][t]][:] + wpe[t][:], tokens int32 [B][T+1] as
 * loaded (the last column, a target, is not read); out float [B][T][C].
 * Token values must lie in 0..V-1. */
void pp_embedding_pos_forward(const int32_t *tokens, int B, int T, const float *wte,
                              const float *wpe, int C, float *out);
/* dwte[tokens[b][t]] += dout[b][t]; dwpe[t] += dout[b][t] (b in order). */
void pp_embedding_pos_backward(const int32_t *tokens, int B, int T, const float *dout, int C,
                               float *dwte, float *dwpe);

/* Causal multi-head self-attention, flash-attention style on the CPU: per
 * (sample b, head h) and per block of R query rows (R = `rows`, any value
 * >= 1), only that block's scores against keys 0..(its last row) exist, in
 * `scratch`; never the whole T x T matrix.
 * qkv: float [B][T][3C], each row [q | k | v], head h's hs = C/NH columns at
 * h*hs of each third. out: float [B][T][C], head h at columns h*hs.
 * lse: float [B][NH][T], per query row the log of the sum of exp of its
 * scaled scores (scale 1/sqrt(hs)); the backward recomputes P from it.
 * Forward: out = softmax(q k^T * scale + causal mask) v.
 * scratch: at least R * T floats (forward), 2 * R * T + R (backward);
 * gpt_att_scratch_floats(T, R) serves both.
 * bf16 != 0: the precision rule of a bf16 run. The caller passes qkv (and
 * in the backward dout) already rounded to bf16 (pp_round_bf16: the values
 * a bf16 GEMM operand holds); the kernel rounds the block's P before P v
 * (and P^T dout), and dS before dS k and dS^T q. Scores, softmax, lse and
 * D_i stay fp32, and every GEMM accumulates in fp32. */
void pp_attention_forward(const float *qkv, float *out, float *lse, int B, int T, int C, int NH,
                          int rows, float *scratch, int bf16);
/* The backward: dqkv (float [B][T][3C], overwritten) from dout (float
 * [B][T][C], the gradient at out) and the forward's qkv, out and lse. Per
 * block: P = exp(q k^T * scale - lse) (causal), dP = dout v^T,
 * D_i = rowsum(dout_i o out_i) (out and dout as given), dS = P o (dP - D_i),
 * dq = dS k * scale, dk += dS^T q * scale, dv += P^T dout. */
void pp_attention_backward(const float *qkv, const float *out, const float *dout, const float *lse,
                           float *dqkv, int B, int T, int C, int NH, int rows, float *scratch,
                           int bf16);
/* The obviously correct version: the full T x T score matrix per (b, h),
 * accumulated in double, fp32 only (the tests' yardstick). lse may be NULL. */
void pp_attention_forward_ref(const float *qkv, float *out, float *lse, int B, int T, int C,
                              int NH);
void pp_attention_backward_ref(const float *qkv, const float *dout, float *dqkv, int B, int T,
                               int C, int NH);

#endif
