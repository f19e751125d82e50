/* llama_kernels.c - the llama model's own layers on the CPU
 * (llama_kernels.h): RMSNorm, rotary embeddings, the grouped-query
 * attention's repeat and sum, SwiGLU and the token embedding. Plain loops
 * in a fixed order: the GEMMs and the attention, where the time goes, are
 * the GPT's (cpu_kernels.c). */
#include "llama_kernels.h"

#include <math.h>
#include <string.h>

void pp_rmsnorm_forward(const float *x, const float *w, int rows, int cols, float eps, float *y,
                        float *rstd)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols;
        float *yr = y + (size_t)r * cols;
        double ss = 0.0;
        for (int i = 0; i < cols; i++)
            ss += (double)xr[i] * xr[i];
        float rs = (float)(1.0 / sqrt(ss / cols + (double)eps));
        rstd[r] = rs;
        for (int i = 0; i < cols; i++)
            yr[i] = xr[i] * rs * w[i];
    }
}

void pp_rmsnorm_backward(const float *x, const float *w, const float *rstd, const float *dy,
                         int rows, int cols, float *dx, float *dw)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols, *dyr = dy + (size_t)r * cols;
        float rs = rstd[r];
        if (dw)
            for (int i = 0; i < cols; i++)
                dw[i] += dyr[i] * xr[i] * rs;
        if (dx) {
            float *dxr = dx + (size_t)r * cols;
            double dot = 0.0; /* sum of (w o dy) o x */
            for (int i = 0; i < cols; i++)
                dot += (double)(w[i] * dyr[i]) * xr[i];
            float k = (float)(dot / cols) * rs * rs * rs;
            for (int i = 0; i < cols; i++)
                dxr[i] += rs * (w[i] * dyr[i]) - xr[i] * k;
        }
    }
}

void pp_rope_table(int T, int hs, double theta, float *cs)
{
    int half = hs / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double a = (double)t * pow(theta, -2.0 * i / hs);
            cs[(size_t)t * hs + i] = (float)cos(a);
            cs[(size_t)t * hs + half + i] = (float)sin(a);
        }
}

void pp_rope_apply(float *x, int rows, int T, size_t stride, int heads, int hs, const float *cs,
                   int inverse)
{
    int half = hs / 2;
    for (int r = 0; r < rows; r++) {
        const float *c = cs + (size_t)(r % T) * hs, *sn = c + half;
        for (int h = 0; h < heads; h++) {
            float *p = x + (size_t)r * stride + (size_t)h * hs;
            for (int i = 0; i < half; i++) {
                float a = p[i], b = p[half + i];
                if (inverse) {
                    p[i] = a * c[i] + b * sn[i];
                    p[half + i] = b * c[i] - a * sn[i];
                } else {
                    p[i] = a * c[i] - b * sn[i];
                    p[half + i] = b * c[i] + a * sn[i];
                }
            }
        }
    }
}

void pp_gqa_expand(const float *qkvc, float *qkv, int rows, int C, int NH, int KV)
{
    int hs = C / NH, G = NH / KV, Kd = KV * hs;
    size_t Q = (size_t)C + 2 * (size_t)Kd;
    for (int r = 0; r < rows; r++) {
        const float *in = qkvc + (size_t)r * Q;
        float *out = qkv + (size_t)r * 3 * C;
        memcpy(out, in, (size_t)C * sizeof *out);
        for (int h = 0; h < NH; h++) {
            int j = h / G;
            memcpy(out + C + (size_t)h * hs, in + C + (size_t)j * hs, (size_t)hs * sizeof *out);
            memcpy(out + 2 * (size_t)C + (size_t)h * hs, in + C + Kd + (size_t)j * hs,
                   (size_t)hs * sizeof *out);
        }
    }
}

void pp_gqa_reduce(const float *dqkv, float *dqkvc, int rows, int C, int NH, int KV)
{
    int hs = C / NH, G = NH / KV, Kd = KV * hs;
    size_t Q = (size_t)C + 2 * (size_t)Kd;
    for (int r = 0; r < rows; r++) {
        const float *in = dqkv + (size_t)r * 3 * C;
        float *out = dqkvc + (size_t)r * Q;
        memcpy(out, in, (size_t)C * sizeof *out);
        for (int part = 0; part < 2; part++) /* k, then v */
            for (int j = 0; j < KV; j++) {
                float *o = out + C + (size_t)part * Kd + (size_t)j * hs;
                const float *src = in + (size_t)(1 + part) * C + (size_t)j * G * hs;
                memcpy(o, src, (size_t)hs * sizeof *o);
                for (int g = 1; g < G; g++)
                    for (int i = 0; i < hs; i++)
                        o[i] += src[(size_t)g * hs + i];
            }
    }
}

static float sigmoidf(float g) { return 1.0f / (1.0f + expf(-g)); }

void pp_swiglu_forward(const float *gu, float *h, int rows, int F)
{
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * F, *u = g + F;
        float *o = h + (size_t)r * F;
        for (int i = 0; i < F; i++)
            o[i] = g[i] * sigmoidf(g[i]) * u[i];
    }
}

void pp_swiglu_backward(const float *gu, const float *dh, float *dgu, int rows, int F)
{
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * F, *u = g + F, *d = dh + (size_t)r * F;
        float *dg = dgu + (size_t)r * 2 * F, *du = dg + F;
        for (int i = 0; i < F; i++) {
            float sg = sigmoidf(g[i]), silu = g[i] * sg;
            dg[i] = d[i] * u[i] * (sg * (1.0f + g[i] * (1.0f - sg)));
            du[i] = d[i] * silu;
        }
    }
}

void pp_tok_embed_forward(const int32_t *tokens, int B, int T, const float *E, int C, float *out)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            memcpy(out + ((size_t)b * T + t) * C, E + (size_t)tokens[(size_t)b * (T + 1) + t] * C,
                   (size_t)C * sizeof *out);
}

void pp_tok_embed_backward(const int32_t *tokens, int B, int T, const float *dout, int C, float *dE)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *e = dE + (size_t)tokens[(size_t)b * (T + 1) + t] * C;
            const float *d = dout + ((size_t)b * T + t) * C;
            for (int i = 0; i < C; i++)
                e[i] += d[i];
        }
}
