/* llama_cuda.cu - the llama model on the GPU (pp_cuda_model_llama;
 * model_cuda.cu dispatches here for PP_MODEL_LLAMA): the twin of llama.c,
 * layer for layer, for the stage skeleton (stage_cuda.h), with its own
 * layers' kernels (the twins of llama_kernels.c) at the top. The layouts
 * are llama.c's (isa/llama_layout.h), so the stash and the workspace never
 * outgrow what the compiler allocated; the GEMMs, the attention, the
 * softmax cross-entropy are the GPT's (cuda_stage.h, attention_cuda.h,
 * cuda_kernels.h).
 *
 * The kernels are plain grid-stride loops, one thread per row (RMSNorm,
 * whose sums run in llama_kernels.c's order, in double) or per element:
 * correct and deterministic, not tuned. Parameters are read through
 * param(), fp32 or the bf16 compute copy widened exactly. As on the GPT's
 * GPU path the last stage's forward writes dlogits where the CPU writes the
 * softmax (the stash's probs), and the head's backward reads them there.
 * Every call only enqueues work on the context's stream.
 *
 * Tensor-parallel (the all-reduce set, llama.c's twin; isa/tensor.h): the
 * shard's attention is A = C/T wide (heads/T query, kv_heads/T key/value
 * heads), wo and wd are row-parallel, so their GEMMs make partial sums,
 * all-reduced on the stream before the residual (row_parallel_act); dn2 and
 * dn1 are all-reduced before they are read. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention_cuda.h"
#include "llama_acts.h"
#include "llama_frame.h"
#include "stage_cuda.h"

#define LTHREADS 256
#define LMAX_BLOCKS 8192

static unsigned lgrid(size_t n)
{
    size_t blocks = (n + LTHREADS - 1) / LTHREADS;
    if (blocks == 0)
        blocks = 1;
    return (unsigned)(blocks < LMAX_BLOCKS ? blocks : LMAX_BLOCKS);
}

static __device__ __forceinline__ size_t lindex(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ __forceinline__ size_t lstride(void) { return (size_t)gridDim.x * blockDim.x; }
static __device__ __forceinline__ float lparam(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float lparam(const uint16_t *p, size_t i)
{
    return __uint_as_float((unsigned)p[i] << 16);
}
/* An activation a kernel writes: fp32, or (the stash's `act` regions,
 * llama_layout.h) rounded to bf16 by the kernel making it, to nearest even
 * as pp_f32_to_bf16 (llama.c rounds its fp32 result so: the same values) */
static __device__ __forceinline__ void lput(float *y, size_t i, float v) { y[i] = v; }
static __device__ __forceinline__ void lput(uint16_t *y, size_t i, float v)
{
    y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* ------------------------------------------------------------------------ */
/* The layers' kernels (llama_kernels.c's twins)                             */

template <typename P, typename Y>
static __global__ void rmsnorm_forward_kernel(const float *x, const P *w, int rows, int cols,
                                              float eps, Y *y, float *rstd)
{
    for (size_t r = lindex(); r < (size_t)rows; r += lstride()) {
        const float *xr = x + r * cols;
        Y *yr = y + r * cols;
        double ss = 0.0;
        for (int i = 0; i < cols; i++)
            ss += (double)xr[i] * xr[i];
        float rs = (float)(1.0 / sqrt(ss / cols + (double)eps));
        rstd[r] = rs;
        for (int i = 0; i < cols; i++)
            lput(yr, (size_t)i, xr[i] * rs * lparam(w, i));
    }
}

/* dx += rstd (w o dy) - x rstd^3 mean(w o dy o x), a thread per row */
template <typename P>
static __global__ void rmsnorm_dx_kernel(const float *x, const P *w, const float *rstd,
                                         const float *dy, int rows, int cols, float *dx)
{
    for (size_t r = lindex(); r < (size_t)rows; r += lstride()) {
        const float *xr = x + r * cols, *dyr = dy + r * cols;
        float *dxr = dx + r * cols, rs = rstd[r];
        double dot = 0.0;
        for (int i = 0; i < cols; i++)
            dot += (double)(lparam(w, i) * dyr[i]) * xr[i];
        float k = (float)(dot / cols) * rs * rs * rs;
        for (int i = 0; i < cols; i++)
            dxr[i] += rs * (lparam(w, i) * dyr[i]) - xr[i] * k;
    }
}

/* dw += sum over rows (in row order) of dy o x rstd, a thread per column */
static __global__ void rmsnorm_dw_kernel(const float *x, const float *rstd, const float *dy,
                                         int rows, int cols, float *dw)
{
    for (size_t c = lindex(); c < (size_t)cols; c += lstride()) {
        float acc = dw[c];
        for (int r = 0; r < rows; r++)
            acc += dy[(size_t)r * cols + c] * x[(size_t)r * cols + c] * rstd[r];
        dw[c] = acc;
    }
}

static __global__ void rope_table_kernel(int T, int hs, double theta, float *cs)
{
    int half = hs / 2;
    for (size_t k = lindex(); k < (size_t)T * half; k += lstride()) {
        int t = (int)(k / half), i = (int)(k % half);
        double a = (double)t * pow(theta, -2.0 * i / hs);
        cs[(size_t)t * hs + i] = (float)cos(a);
        cs[(size_t)t * hs + half + i] = (float)sin(a);
    }
}

static __global__ void rope_apply_kernel(float *x, int rows, int T, size_t stride, int heads,
                                         int hs, const float *cs, int inverse)
{
    int half = hs / 2;
    size_t n = (size_t)rows * heads * half;
    for (size_t k = lindex(); k < n; k += lstride()) {
        size_t r = k / ((size_t)heads * half);
        int h = (int)(k / half % heads), i = (int)(k % half);
        const float *c = cs + (size_t)(r % T) * hs, *sn = c + half;
        float *p = x + r * stride + (size_t)h * hs;
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

/* qkv [rows][3C] from qkvc [rows][Q], C the attention's width (A): q
 * copied, kv head j to query heads jG .. jG+G-1 */
template <typename Y>
static __global__ void gqa_expand_kernel(const float *qkvc, Y *qkv, int rows, int C, int NH, int KV)
{
    int hs = C / NH, G = NH / KV, Kd = KV * hs;
    size_t Q = (size_t)C + 2 * (size_t)Kd, n = (size_t)rows * 3 * C;
    for (size_t k = lindex(); k < n; k += lstride()) {
        size_t r = k / (3 * (size_t)C);
        int col = (int)(k % (3 * (size_t)C)), part = col / C, within = col % C;
        int h = within / hs, i = within % hs;
        const float *in = qkvc + r * Q;
        lput(qkv, k,
             part == 0 ? in[within] : in[C + (size_t)(part - 1) * Kd + (size_t)(h / G) * hs + i]);
    }
}

/* dqkvc [rows][Q]: dq copied, dk and dv of kv head j summed over its G
 * query heads in g order */
static __global__ void gqa_reduce_kernel(const float *dqkv, float *dqkvc, int rows, int C, int NH,
                                         int KV)
{
    int hs = C / NH, G = NH / KV, Kd = KV * hs;
    size_t Q = (size_t)C + 2 * (size_t)Kd, n = (size_t)rows * Q;
    for (size_t k = lindex(); k < n; k += lstride()) {
        size_t r = k / Q;
        int col = (int)(k % Q);
        const float *in = dqkv + r * 3 * C;
        if (col < C) {
            dqkvc[k] = in[col];
            continue;
        }
        int part = (col - C) / Kd, within = (col - C) % Kd, j = within / hs, i = within % hs;
        const float *src = in + (size_t)(1 + part) * C + (size_t)j * G * hs + i;
        float acc = src[0];
        for (int g = 1; g < G; g++)
            acc += src[(size_t)g * hs];
        dqkvc[k] = acc;
    }
}

static __device__ __forceinline__ float lsigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

/* h = silu(g) u from the GEMM's fp32 [g | u]; with bf16 (G = uint16_t)
 * [g | u] also written rounded into the stash's gu (gs), in the same pass.
 * With fp32 the GEMM wrote the stash's gu itself (gs == gu, not written). */
template <typename G, typename Y>
static __global__ void swiglu_forward_kernel(const float *gu, G *gs, Y *h, int rows, int F)
{
    for (size_t k = lindex(); k < (size_t)rows * F; k += lstride()) {
        size_t r = k / F, i = k % F, kg = r * 2 * F + i;
        float g = gu[kg], u = gu[kg + F];
        if (sizeof(G) == 2) {
            lput(gs, kg, g);
            lput(gs, kg + F, u);
        }
        lput(h, k, g * lsigmoid(g) * u);
    }
}

/* gu: the stash's [g | u], fp32 or bf16 (widened exactly) */
template <typename G>
static __global__ void swiglu_backward_kernel(const G *gu, const float *dh, float *dgu, int rows,
                                              int F)
{
    for (size_t k = lindex(); k < (size_t)rows * F; k += lstride()) {
        size_t r = k / F, i = k % F;
        float g = lparam(gu, r * 2 * F + i), u = lparam(gu, r * 2 * F + F + i), d = dh[k];
        float sg = lsigmoid(g), silu = g * sg;
        dgu[r * 2 * F + i] = d * u * (sg * (1.0f + g * (1.0f - sg)));
        dgu[r * 2 * F + F + i] = d * silu;
    }
}

template <typename P>
static __global__ void tok_embed_kernel(const int32_t *tokens, int T, const P *E, int C, float *out,
                                        size_t n)
{
    for (size_t k = lindex(); k < n; k += lstride()) {
        size_t row = k / C, c = k % C, b = row / T, t = row % T;
        out[k] = lparam(E, (size_t)tokens[b * (T + 1) + t] * C + c);
    }
}

/* dE[tokens[b][t]] += dout[b][t] in (b, t) order, as the CPU adds: one
 * thread per column, so no two threads touch one element (C threads: O(BT
 * C) work, not tuned) */
static __global__ void tok_embed_backward_kernel(const int32_t *tokens, int B, int T,
                                                 const float *dout, int C, float *dE)
{
    for (size_t c = lindex(); c < (size_t)C; c += lstride())
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                dE[(size_t)tokens[(size_t)b * (T + 1) + t] * C + c] +=
                    dout[((size_t)b * T + t) * C + c];
}

#define LAUNCH_OK() cudaCheck(cudaGetLastError())

/* ------------------------------------------------------------------------ */
/* One layer (llama.c's layer_forward and layer_backward)                    */
/* A launch's arguments are plain values or pointers into device memory,
 * never reads through a host struct: the stand-ins run a launch later, when
 * the structs of the frame that enqueued it may be gone. */

typedef llama_layouts layouts;

static float *at(const void *base, size_t off)
{
    return (float *)(const_cast<char *>(static_cast<const char *>(base)) + off);
}

static const void *att_operand(const run *r, const float *x, size_t n, uint16_t *dst)
{
    if (!r->ca)
        return x;
    return rounded(r, x, n, dst);
}

/* The stash's atty, made by the attention in the stash's type: with bf16
 * the P v GEMMs write it rounded, wo's operand as it is. */
static void atty_forward(const run *r, const layouts *y, const void *qkv, void *atty, float *lse,
                         void *work)
{
    const llama_shape *sh = &y->sh;
    pp_cu_attention_forward(r->cm->blas, r->st, qkv, atty, lse, sh->B, sh->T, sh->A, sh->NH,
                            llama_att_rows(sh), at(work, y->W.att), sh->bf16);
}

template <typename P, typename Y>
static void rmsnorm_forward(const run *r, const float *x, const P *w, int rows, int cols, float eps,
                            Y *y, float *rstd)
{
    rmsnorm_forward_kernel<<<lgrid((size_t)rows), LTHREADS, 0, r->st>>>(x, w, rows, cols, eps, y,
                                                                        rstd);
    LAUNCH_OK();
}

template <typename P>
static void rmsnorm_dx(const run *r, const float *x, const P *w, const float *rstd, const float *dy,
                       int rows, int cols, float *dx)
{
    rmsnorm_dx_kernel<<<lgrid((size_t)rows), LTHREADS, 0, r->st>>>(x, w, rstd, dy, rows, cols, dx);
    LAUNCH_OK();
}

static void rmsnorm_dw(const run *r, const float *x, const float *rstd, const float *dy, int rows,
                       int cols, float *dw)
{
    rmsnorm_dw_kernel<<<lgrid((size_t)cols), LTHREADS, 0, r->st>>>(x, rstd, dy, rows, cols, dw);
    LAUNCH_OK();
}

static const float *rope_of(const run *r, const layouts *y, void *work)
{
    float *cs = at(work, y->W.rope);
    int T = y->sh.T, hs = y->sh.hs;
    double theta = y->sh.theta;
    rope_table_kernel<<<lgrid((size_t)y->sh.T * (y->sh.hs / 2)), LTHREADS, 0, r->st>>>(T, hs, theta,
                                                                                       cs);
    LAUNCH_OK();
    return cs;
}

static void rope(const run *r, const layouts *y, float *x, int heads, const float *cs, int inverse)
{
    int rows = (int)y->BT;
    int T = y->sh.T, hs = y->sh.hs;
    size_t stride = (size_t)y->sh.Q;
    rope_apply_kernel<<<lgrid((size_t)rows * heads * (y->sh.hs / 2)), LTHREADS, 0, r->st>>>(
        x, rows, T, stride, heads, hs, cs, inverse);
    LAUNCH_OK();
}

/* A layer's `act` regions (llama_acts.h) hold the weights' type: with a
 * bf16 compute copy the RMSNorm, GQA expansion and SwiGLU kernels write
 * them in bf16 (SwiGLU's gu beside h; the attention's P v GEMMs write
 * atty) and the GEMMs, the attention and SwiGLU's backward read them as
 * they are (no rounding pass). */

/* out = x + in w^T, w [C][K], `in` a stashed act already in the GEMM's
 * type: the residual accumulated by the GEMM; or, tensor-parallel, the
 * partial sum all-reduced first and x added once (tensor_gemm.c's
 * pp_row_parallel) */
template <typename W>
static void row_parallel_act(const run *r, int BT, int C, int K, const W *in, const W *w,
                             const float *x, float *out)
{
    size_t n = (size_t)BT * C;
    if (r->cm->tp_fn) {
        gemm(r, 0, 1, BT, C, K, 1.0f, in, w, is_bf16(w), 0.0f, out);
        r->cm->tp_fn(r->cm->tp_ctx, out, n, r->st);
        cudaCheck(pp_cu_add(out, x, n, r->st));
    } else {
        copy_d2d(r, out, x, n * sizeof(float));
        gemm(r, 0, 1, BT, C, K, 1.0f, in, w, is_bf16(w), 1.0f, out);
    }
}

template <typename W>
static void layer_forward(const run *r, const layouts *y, const W *p, const llama_layer_acts *a,
                          void *work, float *out)
{
    const llama_shape *sh = &y->sh;
    const llama_param_layout *P = &y->P;
    int BT = (int)y->BT, C = sh->C, A = sh->A, F = sh->F, Q = sh->Q;
    float *qkvc = at(work, y->W.qkvc);
    const float *cs = rope_of(r, y, work);
    W *n1 = static_cast<W *>(a->n1), *n2 = static_cast<W *>(a->n2);
    W *qkv_out = static_cast<W *>(a->qkv), *h = static_cast<W *>(a->h);
    W *atty = static_cast<W *>(a->atty), *gus = static_cast<W *>(a->gu);
    /* the GEMM's fp32 [g | u]: the stash's gu, or with bf16 the workspace's
     * dgu (backward scratch, free in F) */
    float *gu = is_bf16(p) ? at(work, y->W.dgu) : reinterpret_cast<float *>(gus);
    rmsnorm_forward(r, a->x, p + P->n1w, BT, C, sh->eps, n1, a->n1_rstd);
    gemm(r, 0, 1, BT, Q, C, 1.0f, n1, p + P->wqkv, is_bf16(p), 0.0f, qkvc);
    rope(r, y, qkvc, sh->NH, cs, 0);
    rope(r, y, qkvc + A, sh->KV, cs, 0);
    int NH = sh->NH, KV = sh->KV;
    gqa_expand_kernel<<<lgrid(y->BT * 3 * (size_t)A), LTHREADS, 0, r->st>>>(qkvc, qkv_out, BT, A,
                                                                            NH, KV);
    LAUNCH_OK();
    atty_forward(r, y, qkv_out, atty, a->lse, work);
    row_parallel_act(r, BT, C, A, atty, p + P->wo, a->x, a->res);
    rmsnorm_forward(r, a->res, p + P->n2w, BT, C, sh->eps, n2, a->n2_rstd);
    gemm(r, 0, 1, BT, 2 * F, C, 1.0f, n2, p + P->wgu, is_bf16(p), 0.0f, gu);
    swiglu_forward_kernel<<<lgrid(y->BT * (size_t)F), LTHREADS, 0, r->st>>>(gu, gus, h, BT, F);
    LAUNCH_OK();
    row_parallel_act(r, BT, C, F, h, p + P->wd, a->res, out);
}

typedef struct {
    float *dy, *dgu, *dn2, *dres, *dqkvc, *dn1;
} layer_grads;

static layer_grads layer_grads_split(const llama_stash_layout *L, const void *stash, int l)
{
    size_t o = L->wlayers + (size_t)l * L->wlayer_stride;
    layer_grads g = {at(stash, o),
                     at(stash, o + L->wdgu),
                     at(stash, o + L->wdn2),
                     at(stash, o + L->wdres),
                     at(stash, o + L->wdqkv),
                     at(stash, o + L->wdn1)};
    return g;
}

static layer_grads layer_grads_work(const llama_work_layout *Wk, void *work, const float *dy)
{
    layer_grads g = {const_cast<float *>(dy), at(work, Wk->dgu),  at(work, Wk->dln),
                     at(work, Wk->dres),      at(work, Wk->qkvc), at(work, Wk->dln)};
    return g;
}

/* The layer's weight gradients; dgu16, dres16 and dqkvc16: the bf16
 * copies the fused backward's input-gradient GEMMs read (grad_once), or
 * NULL (fp32, a split W): rounded here. wo's from dres runs as soon as
 * dres's copy exists (grads_wo), the rest after dn1 (grads_att). */
static void grads_mlp(const run *r, const layouts *y, float *g, const llama_layer_acts *a,
                      const float *dy, const float *dgu, const void *dgu16, const float *dn2)
{
    const llama_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C, F = y->sh.F;
    gemm_grad_act(r, 1, 0, C, F, BT, dy, a->h, g + P->wd);
    gemm_grad_pre(r, 1, 0, 2 * F, C, BT, dgu, dgu16, a->n2, g + P->wgu);
    rmsnorm_dw(r, a->res, a->n2_rstd, dn2, BT, C, g + P->n2w);
}

static void grads_wo(const run *r, const layouts *y, float *g, const llama_layer_acts *a,
                     const float *dres, const void *dres16)
{
    gemm_grad_pre(r, 1, 0, y->sh.C, y->sh.A, (int)y->BT, dres, dres16, a->atty, g + y->P.wo);
}

static void grads_att(const run *r, const layouts *y, float *g, const llama_layer_acts *a,
                      const float *dqkvc, const void *dqkvc16, const float *dn1)
{
    const llama_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C;
    gemm_grad_pre(r, 1, 0, y->sh.Q, C, BT, dqkvc, dqkvc16, a->n1, g + P->wqkv);
    rmsnorm_dw(r, a->x, a->n1_rstd, dn1, BT, C, g + P->n1w);
}

/* gpt_cuda.cu's grad_once: a gradient both an input-gradient GEMM and the
 * fused backward's weight-gradient GEMM read, rounded once (bf16) into
 * cb's second half (the attention's bf16 dout is at cb's start); NULL
 * with fp32 or in a split backward's B. */
static const void *grad_once(const run *, const layouts *, const float *, size_t, const float *,
                             const float *)
{
    return NULL;
}
static const void *grad_once(const run *r, const layouts *y, const float *x, size_t n,
                             const uint16_t *, const float *g)
{
    if (!g)
        return NULL;
    return rounded(r, x, n, r->cb + y->BT * llama_work_widest(&y->sh));
}

template <typename W>
static void layer_backward(const run *r, const layouts *y, const W *p, float *g,
                           const llama_layer_acts *a, const layer_grads *d, const float *dy,
                           void *work, float *dst)
{
    const llama_shape *sh = &y->sh;
    const llama_param_layout *P = &y->P;
    int BT = (int)y->BT, C = sh->C, A = sh->A, F = sh->F, Q = sh->Q;
    size_t xbytes = y->BT * (size_t)C * sizeof(float);
    float *dh = at(work, y->W.dh), *datt = at(work, y->W.datt), *dqkv = at(work, y->W.dqkv);
    gemm_w(r, 0, 0, BT, F, C, dy, p + P->wd, 0.0f, dh);
    const W *gu = static_cast<const W *>(a->gu);
    float *dgu = d->dgu;
    swiglu_backward_kernel<<<lgrid(y->BT * (size_t)F), LTHREADS, 0, r->st>>>(gu, dh, dgu, BT, F);
    LAUNCH_OK();
    const void *dgu16 = grad_once(r, y, d->dgu, y->BT * 2 * (size_t)F, p, g);
    gemm_w_pre(r, 0, 0, BT, C, 2 * F, d->dgu, dgu16, p + P->wgu, 0.0f, d->dn2);
    if (r->cm->tp_fn) /* tensor parallel: a partial sum (llama.c's twin) */
        r->cm->tp_fn(r->cm->tp_ctx, d->dn2, y->BT * (size_t)C, r->st);
    if (g)
        grads_mlp(r, y, g, a, dy, d->dgu, dgu16, d->dn2);
    copy_d2d(r, d->dres, dy, xbytes);
    rmsnorm_dx(r, a->res, p + P->n2w, a->n2_rstd, d->dn2, BT, C, d->dres);
    const void *dres16 = grad_once(r, y, d->dres, xbytes / sizeof(float), p, g);
    gemm_w_pre(r, 0, 0, BT, A, C, d->dres, dres16, p + P->wo, 0.0f, datt);
    if (g) /* now, while dres16 is in cb (dqkvc16 takes its place) */
        grads_wo(r, y, g, a, d->dres, dres16);
    const void *qkv = a->qkv; /* the stash's, bf16 with bf16 */
    const void *dout = att_operand(r, datt, y->BT * (size_t)A, r->cb);
    const void *out = a->atty; /* the stash's, bf16 with bf16 */
    pp_cu_attention_backward(r->cm->blas, r->st, qkv, out, dout, a->lse, dqkv, sh->B, sh->T, A,
                             sh->NH, llama_att_rows(sh), at(work, y->W.att), sh->bf16);
    float *dqkvc = d->dqkvc;
    int NH = sh->NH, KV = sh->KV;
    gqa_reduce_kernel<<<lgrid(y->BT * (size_t)Q), LTHREADS, 0, r->st>>>(dqkv, dqkvc, BT, A, NH, KV);
    LAUNCH_OK();
    const float *cs = rope_of(r, y, work);
    rope(r, y, d->dqkvc, sh->NH, cs, 1);
    rope(r, y, d->dqkvc + A, sh->KV, cs, 1);
    const void *dqkvc16 = grad_once(r, y, d->dqkvc, y->BT * (size_t)Q, p, g);
    gemm_w_pre(r, 0, 0, BT, C, Q, d->dqkvc, dqkvc16, p + P->wqkv, 0.0f, d->dn1);
    if (r->cm->tp_fn)
        r->cm->tp_fn(r->cm->tp_ctx, d->dn1, y->BT * (size_t)C, r->st);
    if (g)
        grads_att(r, y, g, a, d->dqkvc, dqkvc16, d->dn1);
    copy_d2d(r, dst, d->dres, xbytes);
    rmsnorm_dx(r, a->x, p + P->n1w, a->n1_rstd, d->dn1, BT, C, dst);
}

/* ------------------------------------------------------------------------ */
/* The layers, as the stage skeleton (stage_cuda.h) calls them               */

struct llama_kind {
    typedef llama_layouts layouts;

    static layouts layouts_of(const pp_model *m, int S, int s) { return llama_layouts_of(m, S, s); }
    static pp_stage_frame frame_of(const layouts *y) { return llama_frame_of(y); }

    template <typename W>
    static void embed_forward(const run *r, const layouts *y, const W *params,
                              const int32_t *tokens, float *x0)
    {
        size_t n = y->BT * (size_t)y->sh.C;
        int T = y->sh.T, C = y->sh.C;
        const W *E = params + y->P.wte;
        tok_embed_kernel<<<lgrid(n), LTHREADS, 0, r->st>>>(tokens, T, E, C, x0, n);
        LAUNCH_OK();
    }

    static void embed_backward(const run *r, const layouts *y, const int32_t *tokens,
                               const float *dx0, float *grads)
    {
        int B = y->sh.B, T = y->sh.T, C = y->sh.C;
        float *dE = grads + y->P.wte;
        tok_embed_backward_kernel<<<lgrid((size_t)y->sh.C), LTHREADS, 0, r->st>>>(tokens, B, T, dx0,
                                                                                  C, dE);
        LAUNCH_OK();
    }

    template <typename W>
    static void block_forward(const run *r, const layouts *y, int l, const W *p, void *stash,
                              void *work, float *out)
    {
        llama_layer_acts a = llama_layer_acts_of(&y->L, stash, l);
        layer_forward(r, y, p, &a, work, out);
    }

    template <typename W>
    static void block_backward(const run *r, const layouts *y, int l, const W *p, float *g,
                               const void *stash, void *work, const float *dy, float *dx)
    {
        llama_layer_acts a = llama_layer_acts_of(&y->L, stash, l);
        layer_grads d = g ? layer_grads_work(&y->W, work, dy) : layer_grads_split(&y->L, stash, l);
        layer_backward(r, y, p, g, &a, &d, dy, work, dx);
    }

    static void block_weight(const run *r, const layouts *y, int l, float *g, const void *stash)
    {
        llama_layer_acts a = llama_layer_acts_of(&y->L, stash, l);
        layer_grads d = layer_grads_split(&y->L, stash, l);
        grads_mlp(r, y, g, &a, d.dy, d.dgu, NULL, d.dn2);
        grads_wo(r, y, g, &a, d.dres, NULL);
        grads_att(r, y, g, &a, d.dqkvc, NULL, d.dn1);
    }

    template <typename W>
    static void head_forward(const run *r, const layouts *y, const W *params, const int32_t *tgt,
                             void *stash, void *work, float loss_scale)
    {
        const llama_stash_layout *L = &y->L;
        int BT = (int)y->BT, C = y->sh.C, V = y->sh.V;
        W *nf = static_cast<W *>(static_cast<void *>(at(stash, L->nf))); /* an act */
        float *logits = at(work, y->W.logits);
        int32_t *targets = (int32_t *)at(stash, L->targets);
        float *loss = at(work, y->W.dx); /* [BT] scratch */
        rmsnorm_forward(r, at(stash, L->xf), params + y->P.nfw, BT, C, y->sh.eps, nf,
                        at(stash, L->nf_rstd));
        gemm(r, 0, 1, BT, V, C, 1.0f, nf, params + y->P.wlm, is_bf16(params), 0.0f, logits);
        cudaCheck(pp_cu_gpt_targets(tgt, y->sh.B, y->sh.T, targets, r->st));
        cudaCheck(pp_cu_softmax_xent_fused(logits, targets, 1, BT, V, loss_scale,
                                           at(stash, L->probs), loss, r->st));
        cudaCheck(pp_cu_sum_into(loss, BT, r->cm->d_loss, r->st));
    }

    static void head_weight_grads(const run *r, const layouts *y, float *grads, const void *stash,
                                  const float *dnf)
    {
        const llama_stash_layout *L = &y->L;
        int BT = (int)y->BT, C = y->sh.C;
        gemm_grad_act(r, 1, 0, y->sh.V, C, BT, at(stash, L->probs), at(stash, L->nf),
                      grads + y->P.wlm);
        rmsnorm_dw(r, at(stash, L->xf), at(stash, L->nf_rstd), dnf, BT, C, grads + y->P.nfw);
    }

    template <typename W>
    static void head_backward(const run *r, const layouts *y, const W *params, float *grads,
                              const void *stash, void *work, float *dx)
    {
        const llama_stash_layout *L = &y->L;
        int BT = (int)y->BT, C = y->sh.C, V = y->sh.V;
        float *dnf = grads ? at(work, y->W.dln) : at(stash, L->wdnf);
        gemm_w(r, 0, 0, BT, C, V, at(stash, L->probs), params + y->P.wlm, 0.0f, dnf);
        if (grads)
            head_weight_grads(r, y, grads, stash, dnf);
        cudaCheck(cudaMemsetAsync(dx, 0, y->BT * (size_t)C * sizeof(float), r->st));
        rmsnorm_dx(r, at(stash, L->xf), params + y->P.nfw, at(stash, L->nf_rstd), dnf, BT, C, dx);
    }

    static void head_weight(const run *r, const layouts *y, float *grads, const void *stash)
    {
        head_weight_grads(r, y, grads, stash, at(stash, y->L.wdnf));
    }
};

extern const pp_cuda_model_impl pp_cuda_model_llama = {
    cuda_stage<llama_kind>::forward_any, cuda_stage<llama_kind>::backward_any,
    cuda_stage<llama_kind>::backward_input_any, cuda_stage<llama_kind>::backward_weight};
