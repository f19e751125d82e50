/* tensor.h - tensor parallelism's shape arithmetic (issue 27), shared by the
 * compiler, the listing and the plan checks: what one rank of a worker's T
 * tensor-parallel ranks holds and how much its jobs all-reduce.
 *
 * Under `tensor = T` (model_desc.h's pp_model_tensor) worker w is the T
 * ranks w*T + t, t in [0, T). Each stage's split layers are cut T ways,
 * Megatron-style: in the mlp model's blocks the first linear layer (W1, b1)
 * is column-parallel (each rank holds ffn/T of its output columns) and the
 * second (W2) row-parallel (ffn/T of its input rows); the layer norms, b2,
 * the embedding and the head are replicated. A rank's shard of a stage is
 * then exactly that stage of the model with ffn/T (pp_model_shard), which
 * is how every size below the compiler (slots, stash, workspace, weights,
 * gradients, optimizer state, FLOPs) divides by T with no formula of its
 * own. Each block makes one all-reduce of its output (the row-parallel
 * layer's partial sums, before b2 and the residual) in the forward and one
 * of the gradient at its layer norm's output in the backward (Megatron's g
 * and f operators): batch x width floats each. A weight-gradient job (W of
 * a split backward) makes none: each rank's weight gradients are its
 * shard's. Replicated parameters see the same inputs on every rank of a
 * group, so their gradients agree without an all-reduce.
 *
 * gpt's split: each layer's QKV projection is column-parallel by heads
 * (rank t holds heads [t*NH/T, (t+1)*NH/T): those rows of q, k and v in
 * qkvw and qkvb), the attention's output projection row-parallel (attprojw's
 * input columns of those heads), the MLP as above (fcw, fcb by rows,
 * fcprojw by columns); layer norms, attprojb, fcprojb, the embeddings and
 * the head replicated. A shard is the gpt with heads/T, ffn/T and an
 * attention width (model_desc.h's attn) of embed/T, the model width staying
 * embed. Two all-reduces a layer in the forward (attproj's and fcproj's
 * partial sums) and two in the backward (the gradients at ln1's and ln2's
 * outputs).
 *
 * llama's split is gpt's on its own layers: the fused q, k, v projection
 * wqkv column-parallel by key/value heads (T divides kv_heads, hence heads:
 * rank t holds query heads [t*NH/T, (t+1)*NH/T) and the kv heads
 * [t*KV/T, (t+1)*KV/T) they read, those rows of each of q, k and v), wo
 * row-parallel (its input columns of those query heads), SwiGLU's gate and
 * up column-parallel (F/T rows of each half of wgu) and the down
 * projection wd row-parallel (F/T of its input columns); the RMSNorms, the
 * embedding and the head replicated. A shard is the llama with heads/T,
 * kv_heads/T, ffn/T and attention width embed/T; two all-reduces a layer
 * each way, as gpt. */
#ifndef PP_TENSOR_H
#define PP_TENSOR_H

#include <stddef.h>

#include "model_desc.h"

/* The model one rank of a tensor group computes: m itself when T = 1, else
 * m with the MLP's inner width cut T ways (and tensor 1: a shard is not
 * split again). */
static inline pp_model pp_model_shard(const pp_model *m)
{
    pp_model sh = *m;
    uint32_t T = pp_model_tensor(m);
    if (T > 1) {
        sh.ffn = m->ffn / T;
        sh.tensor = 1;
        if (m->kind == PP_MODEL_GPT || m->kind == PP_MODEL_LLAMA) { /* the attention by heads */
            sh.heads = m->heads / T;
            sh.attn = m->embed / T;
        }
        if (m->kind == PP_MODEL_LLAMA)
            sh.kv_heads = m->kv_heads / T;
    }
    return sh;
}

/* All-reduces one F or B (or BackwardInput) of stage s makes on its tensor
 * group: one per parallel block, two per gpt or llama layer (attention and
 * MLP). 0 when T = 1. */
static inline uint32_t pp_tensor_allreduces(const pp_model *m, int s)
{
    if (pp_model_tensor(m) < 2)
        return 0;
    return pp_model_layers(m, s) * (m->kind == PP_MODEL_MLP ? 1u : 2u);
}

/* Bytes of each of them: a microbatch's activations, batch x width fp32. */
static inline size_t pp_tensor_allreduce_bytes(const pp_model *m)
{
    return (size_t)m->batch * pp_model_width(m) * sizeof(float);
}

#endif
