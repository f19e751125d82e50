/* llama_kernels.h - the layers the llama model (llama.c) adds to the GPT's
 * (cpu_kernels.h): RMSNorm, rotary position embeddings, the grouped-query
 * attention's key/value repeat and its gradient's sum, SwiGLU and the token
 * embedding without positions. Plain C, one thread, fixed summation order
 * (the same bits on every run). */
#ifndef PP_LLAMA_KERNELS_H
#define PP_LLAMA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* y = x * rstd * w per row of x [rows][cols], rstd = 1/sqrt(mean(x^2) +
 * eps) (the mean in double); rstd[rows] kept for the backward. */
void pp_rmsnorm_forward(const float *x, const float *w, int rows, int cols, float eps, float *y,
                        float *rstd);
/* Its backward: dx += rstd * (w o dy) - x * rstd^3 * mean(w o dy o x),
 * dw += sum over rows of dy o x * rstd. dx or dw NULL skips it (w is read
 * only for dx), and the two calls give the bits of one (split backward).
 * dx must not alias dy. */
void pp_rmsnorm_backward(const float *x, const float *w, const float *rstd, const float *dy,
                         int rows, int cols, float *dx, float *dw);

/* The rotary table for positions 0..T-1 and head width hs (even): cs[t][i]
 * = cos(t * theta^(-2i/hs)) for i < hs/2 and cs[t][hs/2 + i] its sine,
 * computed in double and rounded once. */
void pp_rope_table(int T, int hs, double theta, float *cs);
/* Rotates `heads` heads of hs columns in place in each of `rows` rows (row
 * r at x + r * stride, position r % T), Llama's rotate-half convention:
 * (a, b) = (x[i], x[i + hs/2]) -> (a cos - b sin, b cos + a sin). inverse:
 * the transpose (the backward: (a cos + b sin, b cos - a sin)). */
void pp_rope_apply(float *x, int rows, int T, size_t stride, int heads, int hs, const float *cs,
                   int inverse);

/* qkvc rows [q (C) | k (KV*hs) | v (KV*hs)] to qkv rows [q | k | v] of 3C:
 * kv head j serves query heads j*G .. j*G+G-1, G = NH/KV (PyTorch's
 * repeat_interleave). */
void pp_gqa_expand(const float *qkvc, float *qkv, int rows, int C, int NH, int KV);
/* The gradient's way back: dq copied, dk and dv of kv head j the sum (in g
 * order) over its G query heads. */
void pp_gqa_reduce(const float *dqkv, float *dqkvc, int rows, int C, int NH, int KV);

/* h = silu(gate) * up per row of gu [rows][2F] = [gate | up], h [rows][F]. */
void pp_swiglu_forward(const float *gu, float *h, int rows, int F);
/* dgu = [dh * up * silu'(gate) | dh * silu(gate)]. */
void pp_swiglu_backward(const float *gu, const float *dh, float *dgu, int rows, int F);

/* out[b][t] = E[tokens[b][t]] (tokens int32 [B][T+1], the last column not
 * read); the backward adds dout's rows into dE in (b, t) order. */
void pp_tok_embed_forward(const int32_t *tokens, int B, int T, const float *E, int C, float *out);
void pp_tok_embed_backward(const int32_t *tokens, int B, int T, const float *dout, int C,
                           float *dE);

#endif
