/* model_cuda.cu - the CUDA models' context and dispatch (see model_cuda.h):
 * the stream, cuBLAS and cuBLASLt handles and the loss accumulator every
 * model kind shares, initialisation and the compute copy (the same for
 * every kind), and the pp_cuda_stage_* functions, which dispatch on m->kind
 * to a table of stage functions as stage.c does on the CPU: mlp_cuda.cu
 * (the demo model) and gpt_cuda.cu (GPT-2), whose tables are the stage
 * skeleton of stage_cuda.h around their blocks. cuda_stage.h holds what
 * the kinds share (the GEMM helpers). A kind that is not a pp_model_kind
 * (refused by the plan reader and the compiler before a job runs) has no
 * stages: the entry points then do nothing.
 *
 * Every call only enqueues work on the context's stream; the one host
 * synchronisation is pp_cuda_loss_take. */
#include "model_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_stage.h"

extern "C" {
#include "model.h"
#include "tensor_shard.h"
#include "../isa/tensor.h"
}

/* ------------------------------------------------------------------------ */
/* Context                                                                   */

static int create_fail(pp_cuda_model *cm, char *err, size_t errlen, const char *what,
                       const char *why)
{
    if (err && errlen)
        snprintf(err, errlen, "%s failed: %s", what, why);
    if (cm) {
        if (cm->blas)
            (void)cublasDestroy(cm->blas); /* best effort: already failing */
        if (cm->lt)
            pp_lt_destroy(cm->lt);
        if (cm->d_loss)
            (void)cudaFree(cm->d_loss);
        free(cm);
    }
    return -1;
}

int pp_cuda_model_create(pp_cuda_model **out, cudaStream_t st, char *err, size_t errlen)
{
    *out = NULL;
    pp_cuda_model *cm = (pp_cuda_model *)calloc(1, sizeof *cm);
    if (!cm)
        return create_fail(NULL, err, errlen, "malloc", "out of memory");
    cm->st = st;
    cm->epilogues = 1;

    cudaError_t ce = cudaMalloc((void **)&cm->d_loss, sizeof(double));
    if (ce != cudaSuccess) {
        cm->d_loss = NULL;
        return create_fail(cm, err, errlen, "cudaMalloc (loss accumulator)",
                           cudaGetErrorString(ce));
    }
    ce = cudaMemsetAsync(cm->d_loss, 0, sizeof(double), st);
    if (ce != cudaSuccess)
        return create_fail(cm, err, errlen, "cudaMemsetAsync (loss accumulator)",
                           cudaGetErrorString(ce));

    cublasStatus_t bs = cublasCreate(&cm->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cm->blas = NULL;
        return create_fail(cm, err, errlen, "cublasCreate", cublasGetStatusString(bs));
    }
    bs = cublasSetStream(cm->blas, st);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return create_fail(cm, err, errlen, "cublasSetStream", cublasGetStatusString(bs));
    /* FP32 GEMMs in full FP32: the default math mode, never TF32, so the GPU
     * matches the CPU up to summation order. Set explicitly so the intent
     * survives a change of cuBLAS defaults. */
    bs = cublasSetMathMode(cm->blas, CUBLAS_DEFAULT_MATH);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return create_fail(cm, err, errlen, "cublasSetMathMode", cublasGetStatusString(bs));
    /* cuBLASLt for the fused epilogues, with its workspace
     * (PP_LT_WORKSPACE_BYTES, 32 MiB): allocated here, never in a step. */
    char lerr[256];
    if (pp_lt_create(&cm->lt, lerr, sizeof lerr))
        return create_fail(cm, err, errlen, "cuBLASLt set-up", lerr);
    *out = cm;
    return 0;
}

void pp_cuda_model_destroy(pp_cuda_model *cm)
{
    if (!cm)
        return;
    /* cublasDestroy synchronises the device (cuBLAS documents it), so no
     * forward still adds to d_loss when it is freed. */
    cublasCheck(cublasDestroy(cm->blas));
    pp_lt_destroy(cm->lt);
    cudaCheck(cudaFree(cm->d_loss));
    free(cm);
}

cudaStream_t pp_cuda_model_stream(const pp_cuda_model *cm) { return cm->st; }

void pp_cuda_model_set_epilogues(pp_cuda_model *cm, int on) { cm->epilogues = on != 0; }
void pp_cuda_model_grads_zero(pp_cuda_model *cm, int zero) { cm->grads_zero = zero != 0; }

void pp_cuda_model_set_tensor(pp_cuda_model *cm,
                              void (*fn)(void *ctx, float *buf, size_t n, cudaStream_t st),
                              void *ctx)
{
    cm->tp_fn = fn;
    cm->tp_ctx = fn ? ctx : NULL;
}

double pp_cuda_loss_take(pp_cuda_model *cm)
{
    double loss = 0.0;
    cudaCheck(cudaMemcpyAsync(&loss, cm->d_loss, sizeof loss, cudaMemcpyDeviceToHost, cm->st));
    cudaCheck(cudaStreamSynchronize(cm->st));
    cudaCheck(cudaMemsetAsync(cm->d_loss, 0, sizeof(double), cm->st));
    return loss;
}

void pp_cuda_loss_move(pp_cuda_model *cm, double *dst)
{
    cudaCheck(cudaMemcpyAsync(dst, cm->d_loss, sizeof(double), cudaMemcpyDeviceToDevice, cm->st));
    cudaCheck(cudaMemsetAsync(cm->d_loss, 0, sizeof(double), cm->st));
}

/* ------------------------------------------------------------------------ */
/* Initialisation and the compute copy                                       */

void pp_cuda_stage_init(pp_cuda_model *cm, const pp_model *m, int S, int s, uint64_t seed,
                        float *params)
{
    size_t n = pp_stage_param_count(m, S, s);
    if (n == 0)
        return; /* a middle stage without blocks */
    float *host = (float *)malloc(n * sizeof(float));
    if (!host) {
        fprintf(stderr, "ppvm: out of memory initialising stage %d (%zu floats)\n", s, n);
        pp_cuda_fatal();
    }
    pp_stage_init(m, S, s, seed, host);
    /* On the context's stream (a plain cudaMemcpy may return before the copy
     * lands, unordered with a non-blocking stream), then wait: start-up only. */
    cudaCheck(cudaMemcpyAsync(params, host, n * sizeof(float), cudaMemcpyHostToDevice, cm->st));
    cudaCheck(cudaStreamSynchronize(cm->st));
    free(host);
}

void pp_cuda_stage_init_shard(pp_cuda_model *cm, const pp_model *m, int S, int s, uint64_t seed,
                              int t, float *params)
{
    size_t n = pp_stage_param_count(m, S, s);
    if (n == 0)
        return;
    float *host = (float *)malloc(n * sizeof(float));
    if (!host || pp_stage_shard_init(m, S, s, seed, t, host)) {
        fprintf(stderr, "ppvm: out of memory initialising stage %d's shard (%zu floats)\n", s, n);
        pp_cuda_fatal();
    }
    cudaCheck(cudaMemcpyAsync(params, host, n * sizeof(float), cudaMemcpyHostToDevice, cm->st));
    cudaCheck(cudaStreamSynchronize(cm->st));
    free(host);
}

void pp_cuda_stage_compute_copy(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                const float *master, void *copy)
{
    size_t n = pp_stage_param_count(m, S, s);
    if (m->precision == PP_PREC_BF16)
        cudaCheck(pp_cu_f32_to_bf16(master, (uint16_t *)copy, n, cm->st));
    else if (copy != master && n > 0)
        cudaCheck(
            cudaMemcpyAsync(copy, master, n * sizeof(float), cudaMemcpyDeviceToDevice, cm->st));
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

static const pp_cuda_model_impl *impl_of(const pp_model *m)
{
    switch (m->kind) {
    case PP_MODEL_MLP:
        return &pp_cuda_model_mlp;
    case PP_MODEL_GPT:
        return &pp_cuda_model_gpt;
    case PP_MODEL_LLAMA:
        return &pp_cuda_model_llama;
    default:
        return NULL; /* refused by the plan reader and the compiler */
    }
}

void pp_cuda_stage_forward(pp_cuda_model *cm, const pp_model *m, int S, int s, const void *weights,
                           const void *in, const int32_t *tgt, void *stash, void *work, float *out,
                           float loss_scale)
{
    pp_model shard = pp_model_shard(m); /* under tensor = T, this rank's part */
    m = &shard;
    const pp_cuda_model_impl *k = impl_of(m);
    if (k)
        k->forward(cm, m, S, s, weights, in, tgt, stash, work, out, loss_scale);
}

void pp_cuda_stage_backward(pp_cuda_model *cm, const pp_model *m, int S, int s, const void *weights,
                            float *grads, const void *stash, void *work, const float *dout,
                            float *din)
{
    pp_model shard = pp_model_shard(m); /* under tensor = T, this rank's part */
    m = &shard;
    const pp_cuda_model_impl *k = impl_of(m);
    if (k)
        k->backward(cm, m, S, s, weights, grads, stash, work, dout, din);
    cm->grads_zero = 0; /* said for this call only */
}

void pp_cuda_stage_backward_input(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                  const void *weights, void *stash, void *work, const float *dout,
                                  float *din)
{
    pp_model shard = pp_model_shard(m); /* under tensor = T, this rank's part */
    m = &shard;
    const pp_cuda_model_impl *k = impl_of(m);
    if (k)
        k->backward_input(cm, m, S, s, weights, stash, work, dout, din);
}

void pp_cuda_stage_backward_weight(pp_cuda_model *cm, const pp_model *m, int S, int s, float *grads,
                                   const void *stash, void *work)
{
    pp_model shard = pp_model_shard(m); /* under tensor = T, this rank's part */
    m = &shard;
    const pp_cuda_model_impl *k = impl_of(m);
    if (k)
        k->backward_weight(cm, m, S, s, grads, stash, work);
    cm->grads_zero = 0; /* said for this call only */
}
