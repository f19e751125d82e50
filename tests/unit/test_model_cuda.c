/* test_model_cuda.c - the models' stages on a GPU (kernels/model_cuda.cu:
 * mlp_cuda.cu and gpt_cuda.cu) against the CPU's (kernels/mlp.c, gpt.c),
 * stage by stage: from the same
 * parameters, inputs and output gradients, the GPU's forward output, loss,
 * fused backward (input and weight gradients) and split backward must match
 * the CPU's to ~1e-4 relative, and the split must match the fused on the GPU.
 * Both compute with the compute copy each makes from the same fp32 master
 * (pp_cuda_stage_compute_copy against pp_stage_compute_copy, the same
 * bits); in bf16 (the *_bf16 models) the CPU model rounds the same GEMM
 * operands, so the same comparisons hold, with TOL_CPU_BF16 (below).
 * Every device buffer is poisoned with NaN bytes and followed by a guard, so
 * a read of something the stage never wrote shows up as NaN and a write past
 * the stash sizes the CPU model computes shows up in the guard.
 *
 * Every model runs twice, with the fused cuBLASLt epilogues on and off
 * (pp_cuda_model_set_epilogues), against the same CPU results.
 *
 * Without a GPU (or without CUDA) every test prints why and passes.
 * PP_TEST_VERBOSE=1 prints the worst and RMS relative error of each
 * comparison. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu_kernels.h"
#include "../../kernels/model.h"
#include "suites.h"
#include "testutil.h"

#ifdef PP_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "../../kernels/model_cuda.h"

/* Odd sizes everywhere (D = 35), three stages: a first, a middle and a last
 * stage, each with its own parameter and stash layout. */
static const pp_model odd = {.context = 7, .embed = 5, .ffn = 45, .blocks = 2, .batch = 5};
static const pp_model odd_no_blocks = {
    .context = 7, .embed = 5, .ffn = 45, .blocks = 0, .batch = 5};
/* Wide enough for cuBLAS to pick other kernels than for the tiny GEMMs. */
static const pp_model wide = {.context = 16, .embed = 8, .ffn = 300, .blocks = 1, .batch = 33};
/* Inner width a multiple of 8: cuBLASLt's GELU epilogues need their aux
 * matrix's leading dimension (ffn) so, so only here can the block's GELU
 * GEMMs be fused (the bias epilogues take any width). */
static const pp_model wide8 = {.context = 16, .embed = 8, .ffn = 296, .blocks = 1, .batch = 33};
static const pp_model wide8_bf16 = {
    .context = 16, .embed = 8, .ffn = 296, .blocks = 1, .batch = 33, .precision = PP_PREC_BF16};
/* The same three in bf16 mixed precision. */
static const pp_model odd_bf16 = {
    .context = 7, .embed = 5, .ffn = 45, .blocks = 2, .batch = 5, .precision = PP_PREC_BF16};
static const pp_model odd_no_blocks_bf16 = {
    .context = 7, .embed = 5, .ffn = 45, .blocks = 0, .batch = 5, .precision = PP_PREC_BF16};
static const pp_model wide_bf16 = {
    .context = 16, .embed = 8, .ffn = 300, .blocks = 1, .batch = 33, .precision = PP_PREC_BF16};

/* GPT-2 (gpt_cuda.cu against gpt.c): odd sizes (C 12 in 3 heads of 4, F
 * 20, V 37, T 7, batch 2) with per-stage layer counts: 4 stages of 2, 1, 0
 * and 1 layers (a first, two middles, one of them the identity, a last),
 * and one stage of 2 layers (embedding, layers and head together); a
 * context of 67 > GPT_ATT_ROWS, so the attention runs several row blocks
 * (and the GPU its head groups), with 2 heads of 4, a vocabulary of 19 and
 * F 16, a multiple of 8, so cuBLASLt's GELU epilogues can fuse;
 * and 5 heads of 1 over T 9 in 2 stages of 1 and 0 layers (a last stage of
 * only the head). The same in bf16. */
static uint32_t gpt_layers4[] = {2, 1, 0, 1}, gpt_layers1[] = {2}, gpt_layers_long[] = {1, 1},
                gpt_layers_heads[] = {1, 0};
#define GPT_ODD(prec)                                                                              \
    {                                                                                              \
        .kind = PP_MODEL_GPT, .vocab = 37, .context = 7, .embed = 12, .heads = 3, .ffn = 20,       \
        .blocks = 1, .batch = 2, .precision = prec, .layers = gpt_layers4                          \
    }
#define GPT_ONE(prec)                                                                              \
    {                                                                                              \
        .kind = PP_MODEL_GPT, .vocab = 37, .context = 7, .embed = 12, .heads = 3, .ffn = 20,       \
        .blocks = 2, .batch = 2, .precision = prec, .layers = gpt_layers1                          \
    }
#define GPT_LONG(prec)                                                                             \
    {                                                                                              \
        .kind = PP_MODEL_GPT, .vocab = 19, .context = 67, .embed = 8, .heads = 2, .ffn = 16,       \
        .blocks = 1, .batch = 1, .precision = prec, .layers = gpt_layers_long                      \
    }
#define GPT_HEADS(prec)                                                                            \
    {                                                                                              \
        .kind = PP_MODEL_GPT, .vocab = 23, .context = 9, .embed = 5, .heads = 5, .ffn = 7,         \
        .blocks = 1, .batch = 3, .precision = prec, .layers = gpt_layers_heads                     \
    }
static const pp_model gpt_odd = GPT_ODD(PP_PREC_FP32), gpt_odd_bf16 = GPT_ODD(PP_PREC_BF16);
static const pp_model gpt_one = GPT_ONE(PP_PREC_FP32), gpt_one_bf16 = GPT_ONE(PP_PREC_BF16);
static const pp_model gpt_long = GPT_LONG(PP_PREC_FP32), gpt_long_bf16 = GPT_LONG(PP_PREC_BF16);
static const pp_model gpt_heads = GPT_HEADS(PP_PREC_FP32), gpt_heads_bf16 = GPT_HEADS(PP_PREC_BF16);

/* The Llama (llama_cuda.cu against llama.c): 3 query heads of 4 sharing one
 * key/value head over 4 stages of 2, 1, 0 and 1 layers; T 67 (several
 * attention row blocks) with 2 heads and 2 kv heads in 2 stages. */
static uint32_t llama_layers4[] = {2, 1, 0, 1}, llama_layers_long[] = {1, 1};
#define LLAMA_ODD(prec)                                                                            \
    {                                                                                              \
        .kind = PP_MODEL_LLAMA, .vocab = 37, .context = 7, .embed = 12, .heads = 3, .ffn = 20,     \
        .blocks = 1, .batch = 2, .precision = prec, .kv_heads = 1, .rope_theta = 10000,            \
        .norm_eps = 1e-5f, .layers = llama_layers4                                                 \
    }
#define LLAMA_LONG(prec)                                                                           \
    {                                                                                              \
        .kind = PP_MODEL_LLAMA, .vocab = 19, .context = 67, .embed = 8, .heads = 2, .ffn = 16,     \
        .blocks = 1, .batch = 1, .precision = prec, .kv_heads = 2, .rope_theta = 500000,           \
        .norm_eps = 1e-6f, .layers = llama_layers_long                                             \
    }
static const pp_model llama_odd = LLAMA_ODD(PP_PREC_FP32), llama_odd_bf16 = LLAMA_ODD(PP_PREC_BF16);
static const pp_model llama_long = LLAMA_LONG(PP_PREC_FP32),
                      llama_long_bf16 = LLAMA_LONG(PP_PREC_BF16);

enum { GUARD = 256 }; /* bytes after every device buffer */
#define POISON 0xFF   /* every byte 0xFF: a NaN as float */
#define LOSS_SCALE 0.37f

/* Tolerances (expect_close): every element's relative error at most max,
 * their root mean square over the tensor at most rms. */
typedef struct {
    double max, rms;
} tol;
static const tol TOL_CPU = {1e-4, 1e-4}; /* GPU against CPU */
static const tol TOL_GPU = {1e-5, 1e-5}; /* GPU against GPU (split against fused, repeated B) */
#define RTOL_LOSS 1e-5                   /* the loss, GPU against CPU */
/* bf16, GPU against CPU. Both round the same fp32 operands to bf16, so the
 * arithmetic differs only in summation order, as in fp32, and most elements
 * agree as closely. But a sum in another order can land on the other side
 * of a bf16 rounding boundary when it is rounded as the next GEMM's
 * operand: that operand element then differs by one bf16 step (2^-8 = 3.9e-3
 * of it), and an output dominated by its term by as much. Rare (an fp32
 * difference of ~1e-7 against a bf16 step), so: every element within 1e-2
 * (2.5 bf16 steps), the tensor's RMS within 5e-4. Measured with the CPU
 * model against the GPU code on stand-in libraries whose bf16 GEMM sums in
 * another order (in double, or in float backwards): worst element 4.1e-3,
 * worst RMS 1.3e-4, loss 2.1e-6. On an H100 (cuBLAS's own bf16 kernels,
 * 2026-11-24) the gradients of a stage's first block, which went through
 * the whole stage's backward, reached 1.08e-2 in one element of W1 and RMS
 * 8.4e-4 in the layer norm's gain and bias (sums over every row): so the
 * bounds are 2e-2 (5 bf16 steps) and RMS 2e-3 (half a step). A GPU that
 * did not round the activation operands as the CPU does (fp32
 * activations, bf16 weights) measured RMS up to 6.5e-3, elements up to
 * 3e-2, losses up to 8e-5: still caught. */
static const tol TOL_CPU_BF16 = {2e-2, 2e-3};
#define RTOL_LOSS_BF16 2e-5

#define CU(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CU(cudaMalloc(&p, bytes + GUARD));
    CU(cudaMemset(p, POISON, bytes + GUARD));
    CU(cudaDeviceSynchronize());
    return p;
}

static void upload(cudaStream_t st, void *dst, const void *src, size_t bytes)
{
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st));
    CU(cudaStreamSynchronize(st));
}

static void download(cudaStream_t st, void *dst, const void *src, size_t bytes)
{
    CU(cudaStreamSynchronize(st)); /* surfaces the stage's errors here */
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st));
    CU(cudaStreamSynchronize(st));
}

/* The GUARD bytes after a buffer of `bytes` are untouched. */
static void check_guard(cudaStream_t st, const char *what, const void *p, size_t bytes)
{
    unsigned char g[GUARD];
    download(st, g, (const char *)p + bytes, GUARD);
    for (int i = 0; i < GUARD; i++)
        ck_assert_msg(g[i] == POISON, "%s: byte %zu past its %zu bytes was written", what,
                      bytes + (size_t)i, bytes);
}

static uint32_t rng_state;
static float uniform(void)
{ /* [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}
static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * uniform();
}
static int32_t rand_byte(void)
{
    uniform();
    return (int32_t)(rng_state >> 16 & 0xFF);
}

/* |got - want| <= t.max * (|want| + 0.1 * max|want|) for every element: a
 * relative tolerance, with a floor of t.max / 10 of the largest magnitude for
 * entries that cancel to near zero. The floor matters: the rows of dlogits
 * sum to zero, so the gradients that flow back from the head cancel, and a
 * CPU emulation of a differently ordered GEMM showed errors of ~3e-7 of the
 * tensor's largest entry on entries ~1% of it. Real bugs (a wrong transpose
 * or offset) are O(1) errors. And the root mean square of those relative
 * errors is at most t.rms (for fp32 t.rms = t.max: no further bound). */
static void expect_close(const char *what, int s, const float *got, const float *want, size_t n,
                         tol t)
{
    double maxabs = 0.0, worst = 0.0, sum2 = 0.0;
    for (size_t i = 0; i < n; i++)
        maxabs = fmax(maxabs, fabs((double)want[i]));
    double floor_ = 0.1 * maxabs + 1e-30;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)want[i]) / (fabs((double)want[i]) + floor_);
        ck_assert_msg(err <= t.max, "stage %d %s[%zu]: got %.9g, want %.9g (rel err %.3g)", s, what,
                      i, got[i], want[i], err);
        if (err > worst)
            worst = err;
        sum2 += err * err;
    }
    double rms = n ? sqrt(sum2 / (double)n) : 0.0;
    ck_assert_msg(rms <= t.rms, "stage %d %s: rms rel err %.3g > %.3g", s, what, rms, t.rms);
    if (getenv("PP_TEST_VERBOSE"))
        fprintf(stderr, "  stage %d %-36s n=%-7zu worst rel err %.3g, rms %.3g\n", s, what, n,
                worst, rms);
}

/* Activations between stages are the precision's type (isa/model_shape.h's
 * pp_act_bytes): fp32, or bf16 with precision bf16. fill_act fills n of
 * them with fill's values (rounded to bf16 there); expect_close_act widens
 * both sides and compares them. A bf16 output is the stage's fp32 result
 * rounded once; GPU and CPU results differ by summation order (within the
 * fp32 tolerance, 1e-4 relative) and may then round to adjacent bf16 values,
 * one bf16 ulp apart (2^-8 = 3.9e-3 relative): inside TOL_CPU_BF16's 2e-2. */
static void fill_act(const pp_model *m, void *dst, size_t n, float scale)
{
    if (m->precision != PP_PREC_BF16) {
        fill(dst, n, scale);
        return;
    }
    float *tmp = malloc(n * sizeof *tmp + 4);
    fill(tmp, n, scale);
    pp_f32_to_bf16(tmp, dst, n);
    free(tmp);
}

static void expect_close_act(const char *what, const pp_model *m, int s, const void *got,
                             const void *want, size_t n, tol t)
{
    if (m->precision != PP_PREC_BF16) {
        expect_close(what, s, got, want, n, t);
        return;
    }
    float *g = malloc(n * sizeof *g + 4), *w = malloc(n * sizeof *w + 4);
    pp_bf16_to_f32(got, g, n);
    pp_bf16_to_f32(want, w, n);
    expect_close(what, s, g, w, n, t);
    free(g);
    free(w);
}

/* expect_close on one tensor, named "what block k W1" (k >= 0) or "what Wh". */
static size_t compare_tensor(const char *what, const char *label, int k, int s, const float *got,
                             const float *want, size_t n, tol t)
{
    char name[96];
    if (k < 0)
        snprintf(name, sizeof name, "%s %s", what, label);
    else
        snprintf(name, sizeof name, "%s block %d %s", what, k, label);
    expect_close(name, s, got, want, n, t);
    return n;
}

/* The same for what a backward added to the grads it started from (base),
 * tensor by tensor (model.h's layout), each with its own scale: the
 * accumulation is what is compared, not the starting values. */
static void expect_close_added(const char *what, const pp_model *m, int S, int s, const float *got,
                               const float *want, const float *base, tol t)
{
    const size_t D = pp_model_width(m), F = m->ffn, V = PP_VOCAB;
    size_t n = pp_stage_param_count(m, S, s), at = 0;
    float *g = malloc(n * sizeof(float) + 4), *w = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) {
        g[i] = got[i] - base[i];
        w[i] = want[i] - base[i];
    }
#define TENSOR(label, k, count) at += compare_tensor(what, label, k, s, g + at, w + at, count, t)
    if (m->kind == PP_MODEL_GPT) { /* gpt_layout.h's order */
        const size_t C = m->embed, GV = m->vocab, T = m->context;
        if (s == 0) {
            TENSOR("wte", -1, GV * C);
            TENSOR("wpe", -1, T * C);
        }
        for (int k = 0; k < (int)pp_model_layers(m, s); k++) {
            TENSOR("ln1w", k, C);
            TENSOR("ln1b", k, C);
            TENSOR("qkvw", k, 3 * C * C);
            TENSOR("qkvb", k, 3 * C);
            TENSOR("attprojw", k, C * C);
            TENSOR("attprojb", k, C);
            TENSOR("ln2w", k, C);
            TENSOR("ln2b", k, C);
            TENSOR("fcw", k, F * C);
            TENSOR("fcb", k, F);
            TENSOR("fcprojw", k, C * F);
            TENSOR("fcprojb", k, C);
        }
        if (s == S - 1) {
            TENSOR("lnfw", -1, C);
            TENSOR("lnfb", -1, C);
            TENSOR("wlm", -1, GV * C);
        }
        goto done;
    }
    if (m->kind == PP_MODEL_LLAMA) { /* llama_layout.h's order */
        const size_t C = m->embed, GV = m->vocab, Q = C + 2 * (size_t)m->kv_heads * (C / m->heads);
        if (s == 0)
            TENSOR("wte", -1, GV * C);
        for (int k = 0; k < (int)pp_model_layers(m, s); k++) {
            TENSOR("n1w", k, C);
            TENSOR("wqkv", k, Q * C);
            TENSOR("wo", k, C * C);
            TENSOR("n2w", k, C);
            TENSOR("wgu", k, 2 * F * C);
            TENSOR("wd", k, C * F);
        }
        if (s == S - 1) {
            TENSOR("nfw", -1, C);
            TENSOR("wlm", -1, GV * C);
        }
        goto done;
    }
    if (s == 0)
        TENSOR("E", -1, V * m->embed);
    for (int k = 0; k < (int)pp_model_layers(m, s); k++) {
        TENSOR("g", k, D);
        TENSOR("beta", k, D);
        TENSOR("W1", k, F * D);
        TENSOR("b1", k, F);
        TENSOR("W2", k, D * F);
        TENSOR("b2", k, D);
    }
    if (s == S - 1) {
        TENSOR("gf", -1, D);
        TENSOR("betaf", -1, D);
        TENSOR("Wh", -1, V * D);
        TENSOR("bh", -1, V);
    }
done:
#undef TENSOR
    ck_assert_uint_eq(at, n);
    free(g);
    free(w);
}

static void expect_loss(const char *what, int s, double got, double want, double rtol)
{
    ck_assert_msg(fabs(got - want) <= rtol * fabs(want), "stage %d %s: got %.9g, want %.9g", s,
                  what, got, want);
}

/* One stage of an S-stage model: F, fused B, a repeated fused B and the
 * split B + W on the GPU, each against the CPU (and the GPU's fused). The
 * GPU's workspace is filled with NaNs before every call: it is scratch,
 * and nothing may read what a call before left there. */
static void check_stage(const pp_model *m, int S, int s, uint64_t seed, cudaStream_t st,
                        pp_cuda_model *cm)
{
    const int first = s == 0, last = s == S - 1;
    const size_t np = pp_stage_param_count(m, S, s), pbytes = np * sizeof(float);
    const size_t abytes = pp_act_bytes(m), tbytes = pp_tokens_bytes(m);
    const size_t na = pp_act_f32_bytes(m) / sizeof(float); /* activations per microbatch */
    const size_t sbytes = pp_stage_stash_bytes(m, S, s);
    const size_t sbytes_split = pp_stage_stash_bytes_split(m, S, s);
    const size_t kbytes = pp_stage_workspace_bytes(m, S, s);
    const size_t W = m->context + 1;
    const int bf16 = m->precision == PP_PREC_BF16;
    const tol tol_cpu = bf16 ? TOL_CPU_BF16 : TOL_CPU;
    const double rtol_loss = bf16 ? RTOL_LOSS_BF16 : RTOL_LOSS;
    if (getenv("PP_TEST_VERBOSE"))
        fprintf(stderr, "S=%d stage %d: %zu params, stash %zu / split %zu bytes\n", S, s, np,
                sbytes, sbytes_split);

    /* Host: parameters (the initial ones, then with noise so the biases are
     * not zero), grads to accumulate onto, inputs and the output gradient. */
    float *p = malloc(pbytes + 4), *p_dev_init = malloc(pbytes + 4);
    const size_t wbytes = pp_stage_compute_bytes(m, S, s); /* the compute copy F and B read */
    void *w = malloc(wbytes + 4), *w_gpu = malloc(wbytes + 4);
    float *g0 = malloc(pbytes + 4), *g_cpu = malloc(pbytes + 4), *g_gpu = malloc(pbytes + 4);
    float *x_in = malloc(abytes), *dout = malloc(abytes);
    float *out_cpu = malloc(abytes), *out_gpu = malloc(abytes);
    float *din_cpu = malloc(abytes), *din_gpu = malloc(abytes);
    int32_t *tokens = malloc(tbytes);
    void *stash_cpu = malloc(sbytes_split), *work_cpu = malloc(kbytes);
    rng_state = (uint32_t)(seed * 2654435761u + (uint64_t)s);
    pp_stage_init(m, S, s, seed, p);
    for (size_t i = 0; i < np; i++)
        p[i] += 0.1f * uniform();
    fill(g0, np, 0.01f);
    fill_act(m, x_in, na, 1.0f);
    fill_act(m, dout, na, 0.1f);
    for (size_t i = 0; i < m->batch * W; i++)
        tokens[i] = rand_byte() % (int32_t)pp_model_vocab(m);

    /* Device buffers. */
    float *d_p = dev_alloc(pbytes), *d_g = dev_alloc(pbytes);
    void *d_w = dev_alloc(wbytes);
    float *d_x = dev_alloc(abytes), *d_dout = dev_alloc(abytes);
    float *d_out = dev_alloc(abytes), *d_din = dev_alloc(abytes);
    int32_t *d_tok = dev_alloc(tbytes);
    void *d_stash = dev_alloc(sbytes), *d_stash_split = dev_alloc(sbytes_split);
    void *d_work = dev_alloc(kbytes);
#define POISON_WORK() CU(cudaMemsetAsync(d_work, POISON, kbytes, st))
    upload(st, d_x, x_in, abytes);
    upload(st, d_dout, dout, abytes);
    upload(st, d_tok, tokens, tbytes);

    /* Initialisation: the same bits as the CPU's. */
    float *p_init = malloc(pbytes + 4);
    pp_stage_init(m, S, s, seed, p_init);
    pp_cuda_stage_init(cm, m, S, s, seed, d_p);
    download(st, p_dev_init, d_p, pbytes);
    ck_assert_msg(memcmp(p_dev_init, p_init, pbytes) == 0, "stage %d: init differs", s);
    free(p_init);
    upload(st, d_p, p, pbytes);

    /* The compute copy, made on each side from the same master: the same
     * bits (bf16: both round to nearest even; fp32: a copy). */
    pp_stage_compute_copy(m, S, s, p, w);
    pp_cuda_stage_compute_copy(cm, m, S, s, d_p, d_w);
    download(st, w_gpu, d_w, wbytes);
    ck_assert_msg(memcmp(w_gpu, w, wbytes) == 0, "stage %d: compute copy differs", s);

    const void *in_cpu = first ? (const void *)tokens : (const void *)x_in;
    const void *in_gpu = first ? (const void *)d_tok : (const void *)d_x;
    const float *dout_cpu = last ? NULL : dout, *dout_gpu = last ? NULL : d_dout;

    /* CPU: F, then the fused B. */
    double loss_cpu = pp_stage_forward(m, S, s, w, in_cpu, tokens, stash_cpu, work_cpu, out_cpu);
    memcpy(g_cpu, g0, pbytes);
    pp_stage_backward(m, S, s, w, g_cpu, stash_cpu, work_cpu, dout_cpu, din_cpu, LOSS_SCALE);

    /* GPU F. */
    POISON_WORK();
    pp_cuda_stage_forward(cm, m, S, s, d_w, in_gpu, d_tok, d_stash, d_work, last ? NULL : d_out,
                          LOSS_SCALE);
    double loss_gpu = pp_cuda_loss_take(cm);
    if (last) {
        expect_loss("loss", s, loss_gpu, loss_cpu, rtol_loss);
        ck_assert(loss_cpu > 0.0);
    } else {
        ck_assert_msg(loss_gpu == 0.0, "stage %d: loss %g from a stage without the head", s,
                      loss_gpu);
        download(st, out_gpu, d_out, abytes);
        expect_close_act("forward out", m, s, out_gpu, out_cpu, na, tol_cpu);
    }
    ck_assert_msg(pp_cuda_loss_take(cm) == 0.0, "loss_take did not zero the accumulator");

    /* GPU fused B, onto the same initial grads. */
    upload(st, d_g, g0, pbytes);
    POISON_WORK();
    pp_cuda_stage_backward(cm, m, S, s, d_w, d_g, d_stash, d_work, dout_gpu, first ? NULL : d_din);
    download(st, g_gpu, d_g, pbytes);
    expect_close_added("fused grads", m, S, s, g_gpu, g_cpu, g0, tol_cpu);
    if (!first) {
        download(st, din_gpu, d_din, abytes);
        expect_close_act("fused din", m, s, din_gpu, din_cpu, na, tol_cpu);
    }

    /* B again on the same stash: B left the saved activations alone. */
    float *g_again = malloc(pbytes + 4), *din_again = malloc(abytes);
    upload(st, d_g, g0, pbytes);
    POISON_WORK();
    pp_cuda_stage_backward(cm, m, S, s, d_w, d_g, d_stash, d_work, dout_gpu, first ? NULL : d_din);
    download(st, g_again, d_g, pbytes);
    expect_close_added("fused grads, repeated", m, S, s, g_again, g_gpu, g0, TOL_GPU);
    if (!first) {
        download(st, din_again, d_din, abytes);
        expect_close_act("fused din, repeated", m, s, din_again, din_gpu, na, TOL_GPU);
    }

    /* The split backward: F into a split-sized stash, B-input, then W. */
    CU(cudaMemsetAsync(d_din, POISON, abytes, st));
    upload(st, d_g, g0, pbytes);
    POISON_WORK();
    pp_cuda_stage_forward(cm, m, S, s, d_w, in_gpu, d_tok, d_stash_split, d_work,
                          last ? NULL : d_out, LOSS_SCALE);
    double loss_split = pp_cuda_loss_take(cm);
    if (last)
        expect_loss("loss (split stash)", s, loss_split, loss_gpu, 1e-9); /* same work */
    POISON_WORK();
    pp_cuda_stage_backward_input(cm, m, S, s, d_w, d_stash_split, d_work, dout_gpu,
                                 first ? NULL : d_din);
    if (!first) {
        download(st, din_again, d_din, abytes);
        expect_close_act("split din vs fused", m, s, din_again, din_gpu, na, TOL_GPU);
        expect_close_act("split din vs CPU", m, s, din_again, din_cpu, na, tol_cpu);
    }
    /* B-input computes no weight gradient. */
    download(st, g_again, d_g, pbytes);
    ck_assert_msg(memcmp(g_again, g0, pbytes) == 0, "stage %d: B-input changed the grads", s);
    POISON_WORK();
    pp_cuda_stage_backward_weight(cm, m, S, s, d_g, d_stash_split, d_work);
#undef POISON_WORK
    download(st, g_again, d_g, pbytes);
    expect_close_added("split grads vs fused", m, S, s, g_again, g_gpu, g0, TOL_GPU);
    expect_close_added("split grads vs CPU", m, S, s, g_again, g_cpu, g0, tol_cpu);

    /* Nothing was written past any buffer, the stashes included. */
    check_guard(st, "stash", d_stash, sbytes);
    check_guard(st, "split stash", d_stash_split, sbytes_split);
    check_guard(st, "workspace", d_work, kbytes);
    check_guard(st, "out", d_out, abytes);
    check_guard(st, "din", d_din, abytes);
    check_guard(st, "grads", d_g, pbytes);
    check_guard(st, "params", d_p, pbytes);
    check_guard(st, "compute copy", d_w, wbytes);

    void *dev[] = {d_p, d_w, d_g, d_x, d_dout, d_out, d_din, d_tok, d_stash, d_stash_split, d_work};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        CU(cudaFree(dev[i]));
    void *host[] = {p,       p_dev_init, w,         w_gpu,    g0,      g_cpu,
                    g_gpu,   x_in,       dout,      out_cpu,  out_gpu, din_cpu,
                    din_gpu, tokens,     stash_cpu, work_cpu, g_again, din_again};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* Every stage of the model, with the fused epilogues on (the default: the
 * GEMMs cuBLASLt offers them for) and off (every GEMM and kernel apart),
 * each against the CPU with the same tolerances. */
static void check_model(const pp_model *m, int S, uint64_t seed)
{
    for (int epilogues = 1; epilogues >= 0; epilogues--) {
        cudaStream_t st;
        pp_cuda_model *cm = NULL;
        char err[256];
        CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        ck_assert_msg(pp_cuda_model_create(&cm, st, err, sizeof err) == 0, "create: %s", err);
        ck_assert(pp_cuda_model_stream(cm) == st);
        if (!epilogues)
            pp_cuda_model_set_epilogues(cm, 0);
        for (int s = 0; s < S; s++)
            check_stage(m, S, s, seed, st, cm);
        pp_cuda_model_destroy(cm);
        CU(cudaStreamDestroy(st));
    }
}

/* The loss accumulates over forwards until taken, and taking it zeroes it. */
static void loss_accumulates(void)
{
    const pp_model *m = &odd;
    const int S = 2, s = 1;
    size_t np = pp_stage_param_count(m, S, s), abytes = pp_act_bytes(m);
    size_t tbytes = pp_tokens_bytes(m), sbytes = pp_stage_stash_bytes(m, S, s);
    size_t kbytes = pp_stage_workspace_bytes(m, S, s);
    float *p = malloc(np * sizeof(float)), *x = malloc(abytes);
    int32_t *tokens = malloc(tbytes);
    void *stash = malloc(sbytes), *work = malloc(kbytes);
    rng_state = 99;
    pp_stage_init(m, S, s, 3, p);
    fill(x, abytes / sizeof(float), 1.0f);
    for (size_t i = 0; i < tbytes / sizeof(int32_t); i++)
        tokens[i] = rand_byte();
    double want = pp_stage_forward(m, S, s, p, x, tokens, stash, work, NULL);

    cudaStream_t st;
    pp_cuda_model *cm = NULL;
    char err[256];
    CU(cudaStreamCreate(&st));
    ck_assert_msg(pp_cuda_model_create(&cm, st, err, sizeof err) == 0, "create: %s", err);
    ck_assert(pp_cuda_loss_take(cm) == 0.0); /* starts at zero */
    float *d_p = dev_alloc(np * sizeof(float)), *d_x = dev_alloc(abytes);
    int32_t *d_tok = dev_alloc(tbytes);
    void *d_stash = dev_alloc(sbytes), *d_work = dev_alloc(kbytes);
    pp_cuda_stage_init(cm, m, S, s, 3, d_p);
    upload(st, d_x, x, abytes);
    upload(st, d_tok, tokens, tbytes);
    for (int i = 0; i < 3; i++)
        pp_cuda_stage_forward(cm, m, S, s, d_p, d_x, d_tok, d_stash, d_work, NULL, 1.0f);
    expect_loss("3 forwards", s, pp_cuda_loss_take(cm), 3.0 * want, 1e-5);
    ck_assert(pp_cuda_loss_take(cm) == 0.0);
    pp_cuda_stage_forward(cm, m, S, s, d_p, d_x, d_tok, d_stash, d_work, NULL, 1.0f);
    expect_loss("1 forward", s, pp_cuda_loss_take(cm), want, 1e-5);

    CU(cudaFree(d_p));
    CU(cudaFree(d_x));
    CU(cudaFree(d_tok));
    CU(cudaFree(d_stash));
    CU(cudaFree(d_work));
    pp_cuda_model_destroy(cm);
    CU(cudaStreamDestroy(st));
    free(p);
    free(x);
    free(tokens);
    free(stash);
    free(work);
}

/* The fused backward, or W of a split one, of m's last stage. */
static void gz_backward(int split, pp_cuda_model *cm, const pp_model *m, int S, const void *w,
                        float *g, void *stash, void *work, float *din)
{
    if (split)
        pp_cuda_stage_backward_weight(cm, m, S, S - 1, g, stash, work);
    else
        pp_cuda_stage_backward(cm, m, S, S - 1, w, g, stash, work, NULL, din);
}

/* pp_cuda_model_grads_zero (issue 30): told that the gradients hold zeros,
 * a backward's weight-gradient GEMMs write them (beta 0) and everything
 * else still adds. On zeroed gradients that is the accumulating backward's
 * numbers exactly (0 + x = x); on gradients of ones, exactly `gemm_floats`
 * of them (the GEMMs' regions) are the fresh gradient and the rest 1 + it;
 * and the flag is gone after the call (the next backward adds everywhere).
 * The fused backward and W of a split one, last stage of m (S stages). */
static void grads_zero_writes(const pp_model *m, int S, size_t gemm_floats)
{
    const int s = S - 1;
    size_t np = pp_stage_param_count(m, S, s), pb = np * sizeof(float);
    size_t abytes = pp_act_bytes(m), tbytes = pp_tokens_bytes(m),
           wb = pp_stage_compute_bytes(m, S, s);
    size_t sbytes = pp_stage_stash_bytes_split(m, S, s), kbytes = pp_stage_workspace_bytes(m, S, s);
    float *p = malloc(pb), *ones = malloc(pb), *a = malloc(pb), *got = malloc(pb);
    void *x = malloc(abytes);
    int32_t *tokens = malloc(tbytes);
    rng_state = 7;
    pp_stage_init(m, S, s, 5, p);
    for (size_t i = 0; i < np; i++)
        ones[i] = 1.0f;
    fill_act(m, x, pp_act_f32_bytes(m) / sizeof(float), 1.0f);
    for (size_t i = 0; i < tbytes / sizeof(int32_t); i++)
        tokens[i] = rand_byte() % (int32_t)pp_model_vocab(m);
    cudaStream_t st;
    pp_cuda_model *cm = NULL;
    char err[256];
    CU(cudaStreamCreate(&st));
    ck_assert_msg(pp_cuda_model_create(&cm, st, err, sizeof err) == 0, "create: %s", err);
    float *d_p = dev_alloc(pb), *d_g = dev_alloc(pb);
    void *d_w = dev_alloc(wb), *d_x = dev_alloc(abytes), *d_stash = dev_alloc(sbytes);
    void *d_work = dev_alloc(kbytes), *d_din = dev_alloc(abytes); /* s > 0: an input gradient */
    int32_t *d_tok = dev_alloc(tbytes);
    upload(st, d_p, p, pb);
    upload(st, d_x, x, abytes);
    upload(st, d_tok, tokens, tbytes);
    pp_cuda_stage_compute_copy(cm, m, S, s, d_p, d_w);
    const void *in = s == 0 ? (const void *)d_tok : d_x;
    for (int split = 0; split < 2; split++) {
        const char *how = split ? "split W" : "fused";
        pp_cuda_stage_forward(cm, m, S, s, d_w, in, d_tok, d_stash, d_work, NULL, 0.25f);
        (void)pp_cuda_loss_take(cm);
        if (split)
            pp_cuda_stage_backward_input(cm, m, S, s, d_w, d_stash, d_work, NULL, d_din);
#define BACKWARD() gz_backward(split, cm, m, S, d_w, d_g, d_stash, d_work, d_din)
        CU(cudaMemsetAsync(d_g, 0, pb, st));
        BACKWARD();
        download(st, a, d_g, pb); /* the accumulating backward onto zeros */
        CU(cudaMemsetAsync(d_g, 0, pb, st));
        pp_cuda_model_grads_zero(cm, 1);
        BACKWARD();
        download(st, got, d_g, pb);
        for (size_t i = 0; i < np; i++)
            ck_assert_msg(got[i] == a[i], "%s: grads[%zu] = %.9g at beta 0, %.9g adding onto zeros",
                          how, i, got[i], a[i]);
        upload(st, d_g, ones, pb);
        pp_cuda_model_grads_zero(cm, 1);
        BACKWARD();
        download(st, got, d_g, pb);
        size_t written = 0;
        for (size_t i = 0; i < np; i++) {
            ck_assert_msg(got[i] == a[i] || got[i] == 1.0f + a[i],
                          "%s: grads[%zu] = %.9g onto 1, neither %.9g nor 1 + it", how, i, got[i],
                          a[i]);
            written += got[i] == a[i] && got[i] != 1.0f + a[i];
        }
        ck_assert_msg(written == gemm_floats,
                      "%s: %zu gradients written at beta 0, expected the GEMMs' %zu", how, written,
                      gemm_floats);
        upload(st, d_g, ones, pb);
        BACKWARD(); /* the flag was for one call */
        download(st, got, d_g, pb);
        for (size_t i = 0; i < np; i++)
            ck_assert_msg(got[i] == 1.0f + a[i], "%s: grads[%zu] = %.9g, then %.9g: not added", how,
                          i, got[i], 1.0f + a[i]);
#undef BACKWARD
    }
    void *dev[] = {d_p, d_g, d_w, d_x, d_stash, d_work, d_din, d_tok};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        CU(cudaFree(dev[i]));
    pp_cuda_model_destroy(cm);
    CU(cudaStreamDestroy(st));
    void *host[] = {p, ones, a, got, x, tokens};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* The GEMMs' regions of the last stage: mlp odd (2 blocks of W1 and W2,
 * D = 35, F = 45; Wh 256 x D) and gpt_odd's (one layer: qkvw 3C x C, attprojw
 * C x C, fcw F x C, fcprojw C x F, C = 12, F = 20; wlm V x C, V = 37), fp32
 * (i = 0, 2) and bf16 (1, 3). */
static void grads_zero_case(int i)
{
    static const pp_model *ms[4] = {&odd, &odd_bf16, &gpt_odd, &gpt_odd_bf16};
    size_t D = 35, F = 45, C = 12, G = 20;
    size_t want = i < 2 ? 2 * (2 * F * D) + 256 * D : 3 * C * C + C * C + 2 * G * C + 37 * C;
    grads_zero_writes(ms[i], i < 2 ? 2 : 4, want);
}
#endif /* PP_HAVE_CUDA */

/* Each test: skipped (and passing) without CUDA or without a GPU. */
#ifdef PP_HAVE_CUDA
#define GPU_ONLY(call)                                                                             \
    do {                                                                                           \
        if (!have_gpu()) {                                                                         \
            test_skipped("no GPU\n");                                                              \
            return;                                                                                \
        }                                                                                          \
        call;                                                                                      \
    } while (0)
#else
#define GPU_ONLY(call) test_skipped("built without CUDA\n")
#endif

/* The models each precision is checked on: first, middle and last stage of
 * an odd-sized model; one stage holding the embedding, the blocks and the
 * head; no blocks (the middle stage is the identity, the others embed or
 * project); larger GEMMs (cuBLAS picks other kernels), batch 33; ffn a
 * multiple of 8, so every fusion cuBLASLt offers runs, first and last
 * stage. _i < 5: fp32, else the same in bf16. */
#ifdef PP_HAVE_CUDA /* the models are defined only there */
static const struct {
    const pp_model *m[2]; /* fp32, bf16 */
    int S;
    uint64_t seed;
} model_cases[5] = {{{&odd, &odd_bf16}, 3, 5},
                    {{&odd, &odd_bf16}, 1, 6},
                    {{&odd_no_blocks, &odd_no_blocks_bf16}, 3, 7},
                    {{&wide, &wide_bf16}, 2, 8},
                    {{&wide8, &wide8_bf16}, 2, 9}};
#endif

START_TEST(test_cuda_model_matches_cpu)
{
    GPU_ONLY(check_model(model_cases[_i % 5].m[_i / 5], model_cases[_i % 5].S,
                         model_cases[_i % 5].seed));
}
END_TEST

/* GPT-2: the models above (first, middle, identity middle and last stages;
 * a single stage; several attention row blocks; more heads than a group,
 * a head-only last stage). _i < 4: fp32, else the same in bf16. */
#ifdef PP_HAVE_CUDA
static const struct {
    const pp_model *m[2];
    int S;
    uint64_t seed;
} gpt_cases[4] = {{{&gpt_odd, &gpt_odd_bf16}, 4, 11},
                  {{&gpt_one, &gpt_one_bf16}, 1, 12},
                  {{&gpt_long, &gpt_long_bf16}, 2, 13},
                  {{&gpt_heads, &gpt_heads_bf16}, 2, 14}};
#endif

START_TEST(test_cuda_gpt_matches_cpu)
{
    GPU_ONLY(check_model(gpt_cases[_i % 4].m[_i / 4], gpt_cases[_i % 4].S, gpt_cases[_i % 4].seed));
}
END_TEST

/* The Llama: _i < 2 fp32, else bf16. */
#ifdef PP_HAVE_CUDA
static const struct {
    const pp_model *m[2];
    int S;
    uint64_t seed;
} llama_cases[2] = {{{&llama_odd, &llama_odd_bf16}, 4, 15},
                    {{&llama_long, &llama_long_bf16}, 2, 16}};
#endif

START_TEST(test_cuda_llama_matches_cpu)
{
    GPU_ONLY(check_model(llama_cases[_i % 2].m[_i / 2], llama_cases[_i % 2].S,
                         llama_cases[_i % 2].seed));
}
END_TEST

START_TEST(test_cuda_loss_accumulates) { GPU_ONLY(loss_accumulates()); }
END_TEST

START_TEST(test_cuda_grads_zero_writes) { GPU_ONLY(grads_zero_case(_i)); }
END_TEST

Suite *model_cuda_suite(void)
{
    Suite *s = suite_create("model_cuda");
    TCase *tc = tcase_create("model_cuda");
    tcase_set_timeout(tc, 120); /* the first CUDA call of a process is slow */
    tcase_add_loop_test(tc, test_cuda_model_matches_cpu, 0, 10);
    tcase_add_loop_test(tc, test_cuda_gpt_matches_cpu, 0, 8);
    tcase_add_loop_test(tc, test_cuda_llama_matches_cpu, 0, 4);
    tcase_add_test(tc, test_cuda_loss_accumulates);
    tcase_add_loop_test(tc, test_cuda_grads_zero_writes, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}
