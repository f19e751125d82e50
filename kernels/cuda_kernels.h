/* cuda_kernels.h - the CUDA kernels the model is built from, each the twin
 * of a CPU kernel in cpu_kernels.h (named in its comment) that
 * tests/unit/test_cuda_kernels.c compares it against. All pointers are
 * device pointers, row-major as on the CPU; every launcher enqueues on `st`
 * and returns the launch's cudaError_t (cudaSuccess or the error; it never
 * synchronises). A call with nothing to do (a zero size) launches nothing
 * and returns cudaSuccess. GEMMs are not here: they go to cuBLAS
 * (cuda_stage.h, attention_cuda.h). */
#ifndef PP_CUDA_KERNELS_H
#define PP_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* pp_embedding_forward: out[b][c*embed + e] = E[tokens[b][c]][e]; tokens
 * rows have context + 1 entries (the last is the target, unused here). */
cudaError_t pp_cu_embedding_forward(const int32_t *tokens, int batch, int context, const float *E,
                                    int embed, float *out, cudaStream_t st);
/* pp_embedding_backward: dE[tokens[b][c]][e] += dout[b][c*embed + e], the
 * positions summed in order, bit for bit the CPU's (no atomics). */
cudaError_t pp_cu_embedding_backward(const int32_t *tokens, int batch, int context,
                                     const float *dout, int embed, float *dE, cudaStream_t st);

/* pp_bias_add: y[r][c] += bias[c]. */
cudaError_t pp_cu_bias_add(float *y, const float *bias, int rows, int cols, cudaStream_t st);
/* pp_bias_gelu_forward: h[r][c] += bias[c]; a[r][c] = gelu(h[r][c]) (h keeps
 * the pre-activation for the backward). */
cudaError_t pp_cu_bias_gelu_forward(float *h, const float *bias, float *a, int rows, int cols,
                                    cudaStream_t st);
/* pp_gelu_backward: dx = dy * gelu'(x) (dx may alias dy). */
cudaError_t pp_cu_gelu_backward(const float *x, const float *dy, float *dx, size_t n,
                                cudaStream_t st);
/* pp_bias_grad: db[c] += sum over rows of dy[r][c]. */
cudaError_t pp_cu_bias_grad(const float *dy, int rows, int cols, float *db, cudaStream_t st);
/* pp_residual_bias_add: y[r][c] += x[r][c] + bias[c] (the block's
 * y = x + a W2^T + b2 after the GEMM wrote a W2^T into y). */
cudaError_t pp_cu_residual_bias_add(float *y, const float *x, const float *bias, int rows, int cols,
                                    cudaStream_t st);
/* pp_add: y[i] += x[i] (gradient accumulation, residual gradients). */
cudaError_t pp_cu_add(float *y, const float *x, size_t n, cudaStream_t st);

/* pp_layernorm_forward: per row, mean and rstd = 1/sqrt(var + 1e-5) (biased
 * variance), y = (x - mean) * rstd * gamma + beta; mean and rstd [rows] are
 * kept for the backward. */
cudaError_t pp_cu_layernorm_forward(const float *x, const float *gamma, const float *beta, int rows,
                                    int cols, float *y, float *mean, float *rstd, cudaStream_t st);
/* pp_layernorm_backward: dx += the input gradient; dgamma, dbeta += their
 * gradients (accumulated, as weight gradients are). A NULL output is
 * skipped: dx == NULL launches only the parameter-gradient kernel, dgamma
 * == dbeta == NULL only the input-gradient kernel (a split backward's B and
 * W; together the same bits as one call). gamma is read only for dx (it
 * may be NULL when dx is). dx must not alias dy (dgamma is computed from dy
 * after dx is written). */
cudaError_t pp_cu_layernorm_backward(const float *x, const float *gamma, const float *mean,
                                     const float *rstd, const float *dy, int rows, int cols,
                                     float *dx, float *dgamma, float *dbeta, cudaStream_t st);

/* pp_softmax_xent_fused: softmax cross-entropy with its backward in one
 * pass over each row of logits [rows][V]: loss[r] = -log p[r][target_r],
 * dlogits[r] = (p[r] - onehot(target_r)) * scale. targets[r * target_stride]
 * is row r's target. dlogits may alias logits. */
cudaError_t pp_cu_softmax_xent_fused(const float *logits, const int32_t *targets, int target_stride,
                                     int rows, int V, float scale, float *dlogits, float *loss,
                                     cudaStream_t st);
/* Adds sum(loss[0..n)) to *acc (a device double): the step's loss, read by
 * the host once per step. */
cudaError_t pp_cu_sum_into(const float *loss, int n, double *acc, cudaStream_t st);

/* pp_sgd_step: p -= lr * g; g = 0. With copy != NULL it also writes the
 * updated p rounded to bf16 there (pp_stage_compute_copy's bits), in the
 * same pass. */
cudaError_t pp_cu_sgd_step(float *p, float *g, size_t n, float lr, uint16_t *copy, cudaStream_t st);
/* pp_adamw_step: the t-th step (t >= 1) of AdamW with bias correction,
 * m and v its moments; g = 0 afterwards; copy as for pp_cu_sgd_step. */
cudaError_t pp_cu_adamw_step(float *p, float *g, float *m, float *v, size_t n, int t, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             uint16_t *copy, cudaStream_t st);

/* bf16 copies for the bf16 path: dst = round-to-nearest-even(src), and back. */
cudaError_t pp_cu_f32_to_bf16(const float *src, uint16_t *dst, size_t n, cudaStream_t st);
cudaError_t pp_cu_bf16_to_f32(const uint16_t *src, float *dst, size_t n, cudaStream_t st);

/* The kernels above that read parameters, reading them from a bf16 compute
 * copy (model.h; uint16_t, the upper half of a float) instead: the same
 * kernel body (a template over the parameter type), each parameter widened
 * exactly to fp32 where it is read. Their CPU twin is the fp32 CPU kernel
 * applied to the widened parameters (pp_bf16_to_f32 of E, bias, gamma,
 * beta), which is what the CPU stages' bf16 path computes (stage_gemm.h). Everything else (x,
 * y, h, a, mean, rstd, dy, dx, dgamma, dbeta) is fp32 as above. */
cudaError_t pp_cu_embedding_forward_bf16w(const int32_t *tokens, int batch, int context,
                                          const uint16_t *E, int embed, float *out,
                                          cudaStream_t st);
cudaError_t pp_cu_bias_add_bf16w(float *y, const uint16_t *bias, int rows, int cols,
                                 cudaStream_t st);
cudaError_t pp_cu_bias_gelu_forward_bf16w(float *h, const uint16_t *bias, float *a, int rows,
                                          int cols, cudaStream_t st);
cudaError_t pp_cu_residual_bias_add_bf16w(float *y, const float *x, const uint16_t *bias, int rows,
                                          int cols, cudaStream_t st);
cudaError_t pp_cu_layernorm_forward_bf16w(const float *x, const uint16_t *gamma,
                                          const uint16_t *beta, int rows, int cols, float *y,
                                          float *mean, float *rstd, cudaStream_t st);
cudaError_t pp_cu_layernorm_backward_bf16w(const float *x, const uint16_t *gamma, const float *mean,
                                           const float *rstd, const float *dy, int rows, int cols,
                                           float *dx, float *dgamma, float *dbeta, cudaStream_t st);

/* The bf16 stash's producers (isa/gpt_layout.h's `act` regions): with bf16
 * weights, the output written as bf16 (rounded to nearest even) by the
 * kernel that makes it, where the fp32 kernel and pp_cu_f32_to_bf16 made
 * it in two passes; the same values. a = gelu(h + bias) with h updated in
 * fp32 as above; y = LN(x) with mean and rstd fp32; y = x + bias (x fp32,
 * left as it is). Their CPU twin is the fp32 kernel and pp_f32_to_bf16. */
cudaError_t pp_cu_bias_gelu_forward_bf16wy(float *h, const uint16_t *bias, uint16_t *a, int rows,
                                           int cols, cudaStream_t st);
cudaError_t pp_cu_layernorm_forward_bf16wy(const float *x, const uint16_t *gamma,
                                           const uint16_t *beta, int rows, int cols, uint16_t *y,
                                           float *mean, float *rstd, cudaStream_t st);
cudaError_t pp_cu_bias_add_to_bf16wy(const float *x, const uint16_t *bias, uint16_t *y, int rows,
                                     int cols, cudaStream_t st);
/* h = x + bias and a = gelu(h) (from the fp32 sum), both written as bf16
 * (fc's output and GELU's, the bf16 stash's fch and fcg; x, the GEMM's
 * fp32 output, is left as it is). The CPU twin: pp_bias_gelu_forward, then
 * pp_f32_to_bf16 of h and of a. */
cudaError_t pp_cu_bias_gelu_forward_to_bf16why(const float *x, const uint16_t *bias, uint16_t *h,
                                               uint16_t *a, int rows, int cols, cudaStream_t st);
/* pp_cu_gelu_backward with x given as bf16 (the bf16 stash's fch, widened
 * exactly): the CPU twin widens x (pp_bf16_to_f32), then pp_gelu_backward. */
cudaError_t pp_cu_gelu_backward_bf16x(const uint16_t *x, const float *dy, float *dx, size_t n,
                                      cudaStream_t st);

/* ---- the gpt model's kernels (gpt_cuda.cu, attention_cuda.cu) ---- */

/* dst = src rounded to bf16, kept as fp32 (pp_round_bf16); dst may be src. */
cudaError_t pp_cu_round_bf16(const float *src, float *dst, size_t n, cudaStream_t st);
/* pp_embedding_pos_forward: out[b][t] = wte[tokens[b][t]] + wpe[t]. */
cudaError_t pp_cu_embedding_pos_forward(const int32_t *tokens, int B, int T, const float *wte,
                                        const float *wpe, int C, float *out, cudaStream_t st);
cudaError_t pp_cu_embedding_pos_forward_bf16w(const int32_t *tokens, int B, int T,
                                              const uint16_t *wte, const uint16_t *wpe, int C,
                                              float *out, cudaStream_t st);
/* pp_embedding_pos_backward: dwte[tokens[b][t]] += dout[b][t] (positions in
 * order; tokens < V); dwpe[t] += sum over b of dout[b][t] (b in order): bit
 * for bit the CPU's. */
cudaError_t pp_cu_embedding_pos_backward(const int32_t *tokens, int B, int T, const float *dout,
                                         int C, int V, float *dwte, float *dwpe, cudaStream_t st);
/* targets[b*T + t] = tokens[b][t + 1] (tokens rows of T + 1): each
 * position's next token, for pp_cu_softmax_xent_fused with stride 1. */
cudaError_t pp_cu_gpt_targets(const int32_t *tokens, int B, int T, int32_t *targets,
                              cudaStream_t st);

/* The attention's row-block kernels (attention_cuda.h composes them with
 * cuBLAS strided-batched GEMMs into pp_attention_forward/_backward's
 * twins). A block of scores: per head hh < heads, `rows` rows of length
 * ld at S + hh * stride; row i is query r0 + i, whose keys are 0..r0+i of
 * the block's r0 + rows columns (the rest are masked).
 * pp_cu_attn_softmax: the scaled scores to P = softmax over each row's keys
 * in place (0 beyond them; rounded to bf16 when bf16), and lse[hh *
 * lse_stride + i] = max + log(sum of exp), the sum in double, as
 * pp_attention_forward's rows. */
cudaError_t pp_cu_attn_softmax(float *S, int ld, long long stride, int rows, int heads, int r0,
                               float *lse, int lse_stride, int bf16, cudaStream_t st);
/* The backward's P = exp(S - lse) in place (causal; rounded to bf16 when
 * bf16), and D[hh * rows + i] = rowsum(dout_i o out_i) over head hh's hs
 * columns (out and dout: rows i of length ld_o from the block's first
 * query, head hh at column hh * hs), summed in double. */
cudaError_t pp_cu_attn_probs(float *S, int ld, long long stride, int rows, int heads, int r0,
                             const float *lse, int lse_stride, const float *out, const float *dout,
                             int ld_o, int hs, float *D, int bf16, cudaStream_t st);
/* pp_cu_attn_probs with bf16 (P rounded) and out and dout given as bf16
 * values (uint16_t, widened exactly). */
cudaError_t pp_cu_attn_probs_bf16d(float *S, int ld, long long stride, int rows, int heads, int r0,
                                   const float *lse, int lse_stride, const uint16_t *out,
                                   const uint16_t *dout, int ld_o, int hs, float *D,
                                   cudaStream_t st);
/* Each of the block's rows (first nk floats) converted in place to bf16 at
 * the start of the row: afterwards the block is, per head, a bf16 matrix of
 * leading dimension 2 * ld at the same address (for a bf16 GEMM). The
 * values are rounded to nearest even (exact for values already rounded). */
cudaError_t pp_cu_attn_pack_bf16(float *X, int ld, long long stride, int rows, int heads, int nk,
                                 cudaStream_t st);
/* dS = P o (dP - D_i) into dP (rounded to bf16 when bf16). */
cudaError_t pp_cu_attn_dscores(const float *P, float *dP, int ld, long long stride, int rows,
                               int heads, int r0, const float *D, int bf16, cudaStream_t st);

#ifdef __cplusplus
}

/* For C++ callers (mlp_cuda.cu, gpt_cuda.cu: stage code that is a template
 * over the weights' type): the _bf16w launchers as overloads of the plain names, so
 * one call site serves both precisions. A literal NULL gamma is ambiguous
 * between the two; pass a typed null pointer. */
static inline cudaError_t pp_cu_embedding_forward(const int32_t *tokens, int batch, int context,
                                                  const uint16_t *E, int embed, float *out,
                                                  cudaStream_t st)
{
    return pp_cu_embedding_forward_bf16w(tokens, batch, context, E, embed, out, st);
}
static inline cudaError_t pp_cu_bias_add(float *y, const uint16_t *bias, int rows, int cols,
                                         cudaStream_t st)
{
    return pp_cu_bias_add_bf16w(y, bias, rows, cols, st);
}
static inline cudaError_t pp_cu_bias_gelu_forward(float *h, const uint16_t *bias, float *a,
                                                  int rows, int cols, cudaStream_t st)
{
    return pp_cu_bias_gelu_forward_bf16w(h, bias, a, rows, cols, st);
}
static inline cudaError_t pp_cu_bias_gelu_forward(float *h, const uint16_t *bias, uint16_t *a,
                                                  int rows, int cols, cudaStream_t st)
{
    return pp_cu_bias_gelu_forward_bf16wy(h, bias, a, rows, cols, st);
}
static inline cudaError_t pp_cu_layernorm_forward(const float *x, const uint16_t *gamma,
                                                  const uint16_t *beta, int rows, int cols,
                                                  uint16_t *y, float *mean, float *rstd,
                                                  cudaStream_t st)
{
    return pp_cu_layernorm_forward_bf16wy(x, gamma, beta, rows, cols, y, mean, rstd, st);
}
static inline cudaError_t pp_cu_residual_bias_add(float *y, const float *x, const uint16_t *bias,
                                                  int rows, int cols, cudaStream_t st)
{
    return pp_cu_residual_bias_add_bf16w(y, x, bias, rows, cols, st);
}
static inline cudaError_t pp_cu_layernorm_forward(const float *x, const uint16_t *gamma,
                                                  const uint16_t *beta, int rows, int cols,
                                                  float *y, float *mean, float *rstd,
                                                  cudaStream_t st)
{
    return pp_cu_layernorm_forward_bf16w(x, gamma, beta, rows, cols, y, mean, rstd, st);
}
static inline cudaError_t pp_cu_layernorm_backward(const float *x, const uint16_t *gamma,
                                                   const float *mean, const float *rstd,
                                                   const float *dy, int rows, int cols, float *dx,
                                                   float *dgamma, float *dbeta, cudaStream_t st)
{
    return pp_cu_layernorm_backward_bf16w(x, gamma, mean, rstd, dy, rows, cols, dx, dgamma, dbeta,
                                          st);
}
static inline cudaError_t pp_cu_gelu_backward(const uint16_t *x, const float *dy, float *dx,
                                              size_t n, cudaStream_t st)
{
    return pp_cu_gelu_backward_bf16x(x, dy, dx, n, st);
}
static inline cudaError_t pp_cu_embedding_pos_forward(const int32_t *tokens, int B, int T,
                                                      const uint16_t *wte, const uint16_t *wpe,
                                                      int C, float *out, cudaStream_t st)
{
    return pp_cu_embedding_pos_forward_bf16w(tokens, B, T, wte, wpe, C, out, st);
}
#endif

#endif
