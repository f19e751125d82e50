/* cpu_kernels.c - the CPU kernels of the demo model (see cpu_kernels.h):
 * GEMM through the BLAS plus a reference triple loop, embedding lookup and
 * its scatter-add backward, bias add/grad, GELU (tanh approximation, as in
 * GPT-2 and llm.c) and softmax cross-entropy; then the CPU twins of the
 * CUDA kernels (cuda_kernels.h) that the model does not use on the CPU:
 * fused bias + GELU, residual add, layer norm, fused softmax cross-entropy,
 * AdamW and bf16 conversion; last the gpt model's kernels: a GEMM with
 * leading dimensions, token plus position embeddings, and causal attention
 * (row-blocked, flash-attention style) with its naive reference.
 *
 * Token layout: the embedding kernels read a microbatch exactly as it is
 * loaded, int32 [batch][context + 1] (the window followed by the target), so
 * row b's window starts at tokens[b * (context + 1)] and the target column is
 * skipped. Token values must be bytes (0..255), the embedding table's rows. */
#include "cpu_kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* GEMM                                                                      */

/* K == 0 (an empty inner dimension) leaves C = beta * C; handled here so the
 * BLAS never sees a leading dimension of 0, which it rejects. BLAS semantics
 * for beta == 0: C is overwritten, not read (it may hold garbage or NaN). */
void pp_gemm_ld(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int i = 0; i < M; i++) {
            float *c = C + (size_t)i * ldc;
            for (int j = 0; j < N; j++) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void pp_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, const float *B,
             float beta, float *C) {
    /* Row-major: the leading dimension is the length of a stored row. */
    pp_gemm_ld(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

void pp_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 const float *B, float beta, float *C) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            /* Accumulate in double: this is the yardstick, not the fast path. */
            double acc = 0.0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                float b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                acc += (double)a * (double)b;
            }
            float *c = &C[(size_t)i * N + j];
            double old = beta == 0.0f ? 0.0 : (double)beta * (double)*c;
            *c = (float)((double)alpha * acc + old);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Embedding: out[b][c*embed + e] = E[tokens[b][c]][e], i.e. the `context`
 * embeddings of a window concatenated into one row of width context*embed. */

void pp_embedding_forward(const int32_t *tokens, int batch, int context, const float *E,
                          int embed, float *out) {
    size_t e = (size_t)embed;
    for (int b = 0; b < batch; b++) {
        const int32_t *win = tokens + (size_t)b * (context + 1);
        float *row = out + (size_t)b * context * e;
        for (int c = 0; c < context; c++)
            memcpy(row + c * e, E + (size_t)win[c] * e, e * sizeof *E);
    }
}

/* Scatter-add: a byte that occurs several times (in one window or across
 * the batch) receives the sum of all its positions' gradients. */
void pp_embedding_backward(const int32_t *tokens, int batch, int context, const float *dout,
                           int embed, float *dE) {
    size_t e = (size_t)embed;
    for (int b = 0; b < batch; b++) {
        const int32_t *win = tokens + (size_t)b * (context + 1);
        const float *row = dout + (size_t)b * context * e;
        for (int c = 0; c < context; c++) {
            float *dst = dE + (size_t)win[c] * e;
            const float *src = row + c * e;
            for (size_t i = 0; i < e; i++) dst[i] += src[i];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Bias                                                                      */

void pp_bias_add(float *y, const float *bias, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * cols;
        for (int c = 0; c < cols; c++) row[c] += bias[c];
    }
}

void pp_bias_grad(const float *dy, int rows, int cols, float *db) {
    /* Rows outer so dy is read sequentially. */
    for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * cols;
        for (int c = 0; c < cols; c++) db[c] += row[c];
    }
}

/* ------------------------------------------------------------------------ */
/* GELU, tanh approximation:
 *   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi)      */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

void pp_gelu_forward(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}

/* d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2). Written with 1 - t^2
 * rather than llm.c's 1/cosh^2 so large |x| cannot overflow cosh. dy and dx
 * may alias (elementwise). */
void pp_gelu_backward(const float *x, const float *dy, float *dx, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float sech2 = 1.0f - t * t;
        float dinner = GELU_K * (1.0f + 3.0f * GELU_C * v * v); /* d(tanh arg)/dx */
        float local = 0.5f * (1.0f + t) + 0.5f * v * sech2 * dinner;
        dx[i] = dy[i] * local;
    }
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                     */

/* Per row: subtract the max so exp never overflows; the row's loss is
 * log(sum exp(l - max)) - (l_target - max), computed in double so the sum of
 * many rows (the returned total) loses nothing to float rounding. The target
 * logit is read before probs is written, so probs may alias logits. */
double pp_softmax_xent_forward(const float *logits, const int32_t *targets, int target_stride,
                               int rows, int V, float *probs) {
    double total = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * V;
        float *p = probs + (size_t)r * V;
        float max = l[0];
        for (int j = 1; j < V; j++)
            if (l[j] > max) max = l[j];
        double target_shifted = (double)l[targets[(size_t)r * target_stride]] - (double)max;
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            double e = exp((double)l[j] - (double)max);
            p[j] = (float)e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++) p[j] *= inv;
        total += log(sum) - target_shifted;
    }
    return total;
}

void pp_softmax_xent_backward(const float *probs, const int32_t *targets, int target_stride,
                              int rows, int V, float scale, float *dlogits) {
    for (int r = 0; r < rows; r++) {
        const float *p = probs + (size_t)r * V;
        float *d = dlogits + (size_t)r * V;
        int t = targets[(size_t)r * target_stride];
        for (int j = 0; j < V; j++) d[j] = (p[j] - (j == t ? 1.0f : 0.0f)) * scale;
    }
}

/* ------------------------------------------------------------------------ */
/* Fused elementwise twins                                                   */

/* Composed from the kernels above, so the bits are theirs by construction. */
void pp_bias_gelu_forward(float *h, const float *bias, float *a, int rows, int cols) {
    pp_bias_add(h, bias, rows, cols);
    pp_gelu_forward(h, a, (size_t)rows * (size_t)cols);
}

void pp_residual_bias_add(float *y, const float *x, const float *bias, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * cols;
        const float *xr = x + (size_t)r * cols;
        for (int c = 0; c < cols; c++) yr[c] = (yr[c] + xr[c]) + bias[c];
    }
}

void pp_add(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* ------------------------------------------------------------------------ */
/* Layer norm                                                                */

#define LN_EPS 1e-5

/* Mean and variance in double (two passes, so no cancellation); the row's
 * output uses the float mean and rstd it stores, as the backward does. */
void pp_layernorm_forward(const float *x, const float *gamma, const float *beta, int rows,
                          int cols, float *y, float *mean, float *rstd) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols;
        float *yr = y + (size_t)r * cols;
        double sum = 0.0;
        for (int c = 0; c < cols; c++) sum += xr[c];
        double mu = sum / cols;
        double sq = 0.0;
        for (int c = 0; c < cols; c++) {
            double d = (double)xr[c] - mu;
            sq += d * d;
        }
        float m = (float)mu;
        float s = (float)(1.0 / sqrt(sq / cols + LN_EPS));
        mean[r] = m;
        rstd[r] = s;
        for (int c = 0; c < cols; c++) yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
    }
}

/* With xhat = (x - mean) * rstd and g = dy * gamma (the gradient at xhat):
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 * the row means taken over the row's columns, in double. The parameter
 * gradients and the input gradient are separate passes, each skipped when
 * its outputs are NULL, so a split backward can compute them at different
 * times and get the same bits as one call computing both. */
void pp_layernorm_backward(const float *x, const float *gamma, const float *mean,
                           const float *rstd, const float *dy, int rows, int cols, float *dx,
                           float *dgamma, float *dbeta) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols;
        const float *dyr = dy + (size_t)r * cols;
        float m = mean[r], s = rstd[r];
        if (dgamma)
            for (int c = 0; c < cols; c++) {
                float xhat = (xr[c] - m) * s;
                dgamma[c] += dyr[c] * xhat;
            }
        if (dbeta)
            for (int c = 0; c < cols; c++) dbeta[c] += dyr[c];
        if (!dx) continue;
        float *dxr = dx + (size_t)r * cols;
        double sum_g = 0.0, sum_gx = 0.0;
        for (int c = 0; c < cols; c++) {
            float xhat = (xr[c] - m) * s;
            float g = dyr[c] * gamma[c];
            sum_g += g;
            sum_gx += (double)g * xhat;
        }
        float mean_g = (float)(sum_g / cols), mean_gx = (float)(sum_gx / cols);
        for (int c = 0; c < cols; c++) {
            float xhat = (xr[c] - m) * s;
            float g = dyr[c] * gamma[c];
            dxr[c] += s * (g - mean_g - xhat * mean_gx);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Fused softmax cross-entropy                                               */

/* pp_softmax_xent_forward and _backward in one pass, the same operations in
 * the same order (so the same bits). The max and the target logit are read
 * before anything is written, and each d[j] is written only after l[j] was
 * read for the last time, so dlogits may alias logits. */
void pp_softmax_xent_fused(const float *logits, const int32_t *targets, int target_stride,
                           int rows, int V, float scale, float *dlogits, float *loss) {
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * V;
        float *d = dlogits + (size_t)r * V;
        int t = targets[(size_t)r * target_stride];
        float max = l[0];
        for (int j = 1; j < V; j++)
            if (l[j] > max) max = l[j];
        double target_shifted = (double)l[t] - (double)max;
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            double e = exp((double)l[j] - (double)max);
            d[j] = (float)e; /* l[j] is not read again */
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++) {
            float p = d[j] * inv;
            d[j] = (p - (j == t ? 1.0f : 0.0f)) * scale;
        }
        loss[r] = (float)(log(sum) - target_shifted);
    }
}

/* ------------------------------------------------------------------------ */
/* AdamW                                                                     */

void pp_adamw_step(float *p, float *g, float *m, float *v, size_t n, int t, float lr,
                   float beta1, float beta2, float eps, float weight_decay) {
    /* The CUDA launcher computes these two on the host the same way. */
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p[i]);
        g[i] = 0.0f;
    }
}

/* ------------------------------------------------------------------------ */
/* bf16                                                                      */

/* Round to nearest even on the bit pattern: add 0x7fff plus the lowest kept
 * bit, then truncate; a carry out of the mantissa bumps the exponent, which
 * is right (up to infinity for the largest floats). A NaN would round to
 * infinity or lose its payload, so it keeps its sign and top payload bits
 * with the quiet bit set. */
static uint16_t bf16_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((b >> 16) | 0x0040u);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

void pp_f32_to_bf16(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_bits(src[i]);
}

void pp_round_bf16(const float *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)bf16_bits(src[i]) << 16;
        memcpy(&dst[i], &b, sizeof b);
    }
}

void pp_bf16_to_f32(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &b, sizeof b);
    }
}

/* ------------------------------------------------------------------------ */
/* The gpt model's kernels                                                   */

void pp_embedding_pos_forward(const int32_t *tokens, int B, int T, const float *wte,
                              const float *wpe, int C, float *out) {
    size_t c = (size_t)C;
    for (int b = 0; b < B; b++) {
        const int32_t *win = tokens + (size_t)b * (T + 1);
        for (int t = 0; t < T; t++) {
            const float *e = wte + (size_t)win[t] * c, *p = wpe + (size_t)t * c;
            float *o = out + ((size_t)b * T + t) * c;
            for (size_t i = 0; i < c; i++) o[i] = e[i] + p[i];
        }
    }
}

void pp_embedding_pos_backward(const int32_t *tokens, int B, int T, const float *dout, int C,
                               float *dwte, float *dwpe) {
    size_t c = (size_t)C;
    for (int b = 0; b < B; b++) {
        const int32_t *win = tokens + (size_t)b * (T + 1);
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * c;
            float *e = dwte + (size_t)win[t] * c, *p = dwpe + (size_t)t * c;
            for (size_t i = 0; i < c; i++) e[i] += d[i];
            for (size_t i = 0; i < c; i++) p[i] += d[i];
        }
    }
}

/* Attention. For sample b, head h: q, k, v are the [T][hs] slices of qkv
 * with row stride 3C at columns h*hs, C + h*hs and 2C + h*hs; out's slice
 * has row stride C. A block is query rows r0..r1-1; its keys are 0..r1-1
 * (causal: row i sees keys 0..i, the rest of the block's columns masked). */

void pp_attention_forward(const float *qkv, float *out, float *lse, int B, int T, int C, int NH,
                          int rows, float *scratch, int bf16) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C, *v = q + 2 * C;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;
            float *l = lse + ((size_t)b * NH + h) * T;
            for (int r0 = 0; r0 < T; r0 += rows) {
                int r1 = r0 + rows < T ? r0 + rows : T, R = r1 - r0, nk = r1;
                float *S = scratch; /* [R][nk] */
                pp_gemm_ld(0, 1, R, nk, hs, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f, S, nk);
                for (int i = 0; i < R; i++) {
                    float *s = S + (size_t)i * nk;
                    int n = r0 + i + 1; /* keys 0..r0+i */
                    float max = s[0];
                    for (int j = 1; j < n; j++)
                        if (s[j] > max) max = s[j];
                    double sum = 0.0;
                    for (int j = 0; j < n; j++) {
                        float e = expf(s[j] - max);
                        s[j] = e;
                        sum += e;
                    }
                    float inv = (float)(1.0 / sum);
                    for (int j = 0; j < n; j++) s[j] *= inv;
                    for (int j = n; j < nk; j++) s[j] = 0.0f;
                    l[r0 + i] = max + (float)log(sum);
                }
                if (bf16) pp_round_bf16(S, S, (size_t)R * nk);
                pp_gemm_ld(0, 0, R, hs, nk, 1.0f, S, nk, v, C3, 0.0f, o + (size_t)r0 * C, C);
            }
        }
}

void pp_attention_backward(const float *qkv, const float *out, const float *dout,
                           const float *lse, float *dqkv, int B, int T, int C, int NH, int rows,
                           float *scratch, int bf16) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    memset(dqkv, 0, (size_t)B * T * C3 * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            size_t ooff = (size_t)b * T * C + (size_t)h * hs;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *o = out + ooff, *dO = dout + ooff;
            const float *l = lse + ((size_t)b * NH + h) * T;
            for (int r0 = 0; r0 < T; r0 += rows) {
                int r1 = r0 + rows < T ? r0 + rows : T, R = r1 - r0, nk = r1;
                float *P = scratch, *dP = scratch + (size_t)R * nk;
                float *D = dP + (size_t)R * nk;
                /* P, recomputed from the forward's lse */
                pp_gemm_ld(0, 1, R, nk, hs, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f, P, nk);
                for (int i = 0; i < R; i++) {
                    float *p = P + (size_t)i * nk;
                    int n = r0 + i + 1;
                    float li = l[r0 + i];
                    for (int j = 0; j < n; j++) p[j] = expf(p[j] - li);
                    for (int j = n; j < nk; j++) p[j] = 0.0f;
                    const float *oi = o + (size_t)(r0 + i) * C, *di = dO + (size_t)(r0 + i) * C;
                    double d = 0.0;
                    for (int c = 0; c < hs; c++) d += (double)oi[c] * di[c];
                    D[i] = (float)d;
                }
                /* dP = dout v^T */
                pp_gemm_ld(0, 1, R, nk, hs, 1.0f, dO + (size_t)r0 * C, C, v, C3, 0.0f, dP, nk);
                if (bf16) pp_round_bf16(P, P, (size_t)R * nk);
                /* dv += P^T dout (before P becomes dS) */
                pp_gemm_ld(1, 0, nk, hs, R, 1.0f, P, nk, dO + (size_t)r0 * C, C, 1.0f, dv, C3);
                /* dS = P o (dP - D_i), into dP */
                for (int i = 0; i < R; i++) {
                    const float *p = P + (size_t)i * nk;
                    float *ds = dP + (size_t)i * nk;
                    for (int j = 0; j < nk; j++) ds[j] = p[j] * (ds[j] - D[i]);
                }
                if (bf16) pp_round_bf16(dP, dP, (size_t)R * nk);
                /* dq = dS k * scale (the block's rows, written once) */
                pp_gemm_ld(0, 0, R, hs, nk, scale, dP, nk, k, C3, 0.0f, dq + (size_t)r0 * C3,
                           C3);
                /* dk += dS^T q * scale */
                pp_gemm_ld(1, 0, nk, hs, R, scale, dP, nk, q + (size_t)r0 * C3, C3, 1.0f, dk,
                           C3);
            }
        }
}

void pp_attention_forward_ref(const float *qkv, float *out, float *lse, int B, int T, int C,
                              int NH) {
    int hs = C / NH, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hs);
    double *s = malloc((size_t)T * sizeof *s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *qi = qkv + ((size_t)b * T + i) * C3 + h * hs;
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = qkv + ((size_t)b * T + j) * C3 + C + h * hs;
                    double d = 0.0;
                    for (int c = 0; c < hs; c++) d += (double)qi[c] * kj[c];
                    s[j] = d * scale;
                    if (s[j] > max) max = s[j];
                }
                for (int j = 0; j <= i; j++) sum += exp(s[j] - max);
                if (lse) lse[((size_t)b * NH + h) * T + i] = (float)(max + log(sum));
                float *oi = out + ((size_t)b * T + i) * C + h * hs;
                for (int c = 0; c < hs; c++) {
                    double acc = 0.0;
                    for (int j = 0; j <= i; j++)
                        acc += exp(s[j] - max) / sum *
                               qkv[((size_t)b * T + j) * C3 + 2 * C + h * hs + c];
                    oi[c] = (float)acc;
                }
            }
    free(s);
}

/* Straight from the definition: P = softmax(S), dv_j = sum_i P_ij do_i,
 * dP_ij = do_i . v_j, dS_ij = P_ij (dP_ij - sum_l P_il dP_il),
 * dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i. */
void pp_attention_backward_ref(const float *qkv, const float *dout, float *dqkv, int B, int T,
                               int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hs);
    double *P = malloc((size_t)T * T * sizeof *P), *dS = malloc((size_t)T * T * sizeof *dS);
    memset(dqkv, 0, (size_t)B * T * C3 * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *base = qkv + (size_t)b * T * C3 + h * hs;
            float *dbase = dqkv + (size_t)b * T * C3 + h * hs;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            for (int i = 0; i < T; i++) {
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    double d = 0.0;
                    for (int c = 0; c < hs; c++)
                        d += (double)base[(size_t)i * C3 + c] * base[(size_t)j * C3 + C + c];
                    P[(size_t)i * T + j] = d * scale;
                    if (d * scale > max) max = d * scale;
                }
                for (int j = 0; j <= i; j++) sum += exp(P[(size_t)i * T + j] - max);
                double dot = 0.0;
                for (int j = 0; j <= i; j++) {
                    double p = exp(P[(size_t)i * T + j] - max) / sum, dp = 0.0;
                    P[(size_t)i * T + j] = p;
                    for (int c = 0; c < hs; c++)
                        dp += (double)dO[(size_t)i * C + c] * base[(size_t)j * C3 + 2 * C + c];
                    dS[(size_t)i * T + j] = dp;
                    dot += p * dp;
                }
                for (int j = 0; j <= i; j++)
                    dS[(size_t)i * T + j] = P[(size_t)i * T + j] * (dS[(size_t)i * T + j] - dot);
            }
            for (int i = 0; i < T; i++)
                for (int c = 0; c < hs; c++) {
                    double dq = 0.0, dk = 0.0, dv = 0.0;
                    for (int j = 0; j <= i; j++) dq += dS[(size_t)i * T + j] * base[(size_t)j * C3 + C + c];
                    for (int j = i; j < T; j++) { /* i as a key */
                        dk += dS[(size_t)j * T + i] * base[(size_t)j * C3 + c];
                        dv += P[(size_t)j * T + i] * dO[(size_t)j * C + c];
                    }
                    dbase[(size_t)i * C3 + c] = (float)(dq * scale);
                    dbase[(size_t)i * C3 + C + c] = (float)(dk * scale);
                    dbase[(size_t)i * C3 + 2 * C + c] = (float)dv;
                }
        }
    free(P);
    free(dS);
}
