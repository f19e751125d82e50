/* model_cuda.h - the models' stages on a GPU: the twin of model.h, for
 * every model kind (model_cuda.cu dispatches on m->kind: mlp_cuda.cu for
 * the demo model, gpt_cuda.cu for GPT-2), each with its CPU model's
 * parameter layout, the same stash size (pp_stage_stash_bytes and _split
 * bound what a stage may use) and the same arithmetic up to floating-point
 * order. GEMMs go to cuBLAS (for mlp, fused with the kernel after them, to
 * cuBLASLt: gemm_lt.h; for gpt's attention, strided-batched:
 * attention_cuda.h), the rest to cuda_kernels.h.
 *
 * Every pointer is a device pointer; every call enqueues on the context's
 * stream and never synchronises the host. The only value the host needs
 * from a step is its loss: forward on the last stage adds its microbatch's
 * summed cross-entropy to a device accumulator that pp_cuda_loss_take reads
 * (the one host synchronisation of a step).
 *
 * The last stage's forward computes the loss gradient in the same pass as
 * the loss (softmax cross-entropy fused with its backward), so it takes the
 * step's loss_scale; its backward starts from what the forward stashed.
 *
 * The GPU stash keeps the CPU model's regions at its offsets (two of the
 * last stage's hold other things: mlp_cuda.cu's and gpt_cuda.cu's headers
 * say which), so pp_stage_stash_bytes and _split bound it; a GPU stash is
 * not interchangeable with a CPU one, a params or grads array is. The
 * workspace (`work`, pp_stage_workspace_bytes) is the CPU model's too:
 * scratch that one rank's jobs share, as they run one after another on the
 * context's stream.
 *
 * `weights` below is the stage's compute copy (model.h): the fp32 weights,
 * or with m->precision bf16 their bf16 copy, which pp_cuda_stage_compute_copy
 * makes on the device. With bf16 the GEMMs take bf16 operands (the copy, and
 * activations rounded into the workspace) and accumulate in fp32, as the
 * CPU model does; gradients and everything else stay fp32. */
#ifndef PP_MODEL_CUDA_H
#define PP_MODEL_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "../isa/model_desc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_cuda_model pp_cuda_model;

/* Tensor parallelism (issue 27, kernels/tensor_shard.h): with fn set, the
 * mlp blocks sum their row-parallel output and their layer-norm-input
 * gradient with fn(ctx, buf, n, st) over the rank's tensor group, on the
 * context's stream st (ordered with the GEMMs around it by the stream
 * itself); NULL clears it. The compute functions below take the plan's
 * model and run its rank's shard (isa/tensor.h's pp_model_shard). */
void pp_cuda_model_set_tensor(pp_cuda_model *cm,
                              void (*fn)(void *ctx, float *buf, size_t n, cudaStream_t st),
                              void *ctx);
/* Rank t's shard of stage s as pp_cuda_stage_init would make the whole
 * stage (the slice of it, made on the host). */
void pp_cuda_stage_init_shard(pp_cuda_model *cm, const pp_model *m, int S, int s, uint64_t seed,
                              int t, float *params);

/* A context for one stream: a cuBLAS handle bound to `st`, a cuBLASLt
 * handle and workspace, and the loss accumulator. Returns 0, or -1 with a message in err. */
int pp_cuda_model_create(pp_cuda_model **out, cudaStream_t st, char *err, size_t errlen);
void pp_cuda_model_destroy(pp_cuda_model *cm);
/* Fused epilogues (on by default): with on, a GEMM and the kernel after it
 * run as one cuBLASLt matmul wherever cuBLASLt's heuristic offers an
 * algorithm for that problem (mlp_cuda.cu and gpt_cuda.cu say which: bias
 * + GELU, bias + residual, a bias, GELU's backward); elsewhere, and with
 * off, the GEMM and the kernel. The cuBLASLt workspace (32 MiB) is
 * allocated by pp_cuda_model_create either way. */
void pp_cuda_model_set_epilogues(pp_cuda_model *cm, int on);
/* zero 1: the gradients the next pp_cuda_stage_backward or
 * _backward_weight adds to hold zeros (the caller knows: the optimizer or a
 * ZeroGrads zeroed them and nothing wrote them since), so its
 * weight-gradient GEMMs overwrite them (beta 0) instead of accumulating
 * (beta 1), which costs an H100 twice the time; the other gradients (biases,
 * norms, embeddings) still add onto the zeros. That call resets it to 0. */
void pp_cuda_model_grads_zero(pp_cuda_model *cm, int zero);
cudaStream_t pp_cuda_model_stream(const pp_cuda_model *cm);

/* Deterministic initialisation, the same values as pp_stage_init (computed
 * on the host, copied to the device; start-up only). */
void pp_cuda_stage_init(pp_cuda_model *cm, const pp_model *m, int S, int s, uint64_t seed,
                        float *params);

/* copy = the compute copy of the fp32 `master` weights, as
 * pp_stage_compute_copy (bf16: rounded to nearest even, the same bits; fp32:
 * a device copy, nothing when copy == master), enqueued on the context's
 * stream. copy holds pp_stage_compute_bytes. */
void pp_cuda_stage_compute_copy(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                const float *master, void *copy);

/* F(s,b), as pp_stage_forward; loss_scale as pp_stage_backward's (used on
 * the last stage only). */
void pp_cuda_stage_forward(pp_cuda_model *cm, const pp_model *m, int S, int s, const void *weights,
                           const void *in, const int32_t *tgt, void *stash, void *work, float *out,
                           float loss_scale);
/* B(s,b), as pp_stage_backward (accumulates into grads, fp32). */
void pp_cuda_stage_backward(pp_cuda_model *cm, const pp_model *m, int S, int s, const void *weights,
                            float *grads, const void *stash, void *work, const float *dout,
                            float *din);
/* The split backward, as pp_stage_backward_input / _weight (the stash of
 * pp_stage_stash_bytes_split bytes). */
void pp_cuda_stage_backward_input(pp_cuda_model *cm, const pp_model *m, int S, int s,
                                  const void *weights, void *stash, void *work, const float *dout,
                                  float *din);
void pp_cuda_stage_backward_weight(pp_cuda_model *cm, const pp_model *m, int S, int s, float *grads,
                                   const void *stash, void *work);

/* The summed loss of the forwards since the last call; synchronises the
 * stream. */
double pp_cuda_loss_take(pp_cuda_model *cm);
/* The same without a wait: enqueues on the context's stream a copy of the
 * summed loss into *dst (a device double) and zeroes the sum (the cuda
 * backend keeps each microbatch's loss for the non-finite check). */
void pp_cuda_loss_move(pp_cuda_model *cm, double *dst);

#ifdef __cplusplus
}
#endif

#endif
