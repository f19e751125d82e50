/* stage_gemm.h - the precision rule every model's stages share (mlp.c,
 * gpt.c): a stage's GEMMs and the weights it reads.
 *
 * With fp32 a GEMM is pp_gemm. With bf16 (model_desc.h) its operands are
 * bf16 values and it accumulates in fp32, which is cuBLAS's bf16 GEMM with
 * fp32 compute on the GPU: the weights already are bf16 values (the widened
 * compute copy, pp_stage_params_of), and the operands that are activations
 * are rounded into two workspace regions, ca (first operand) and cb
 * (second), which each model's workspace layout reserves (with a third,
 * wide, for the widened weights). A product of two
 * bf16 values is exact in fp32, so the GPU differs only in summation order,
 * as with fp32. */
#ifndef PP_STAGE_GEMM_H
#define PP_STAGE_GEMM_H

#include <stddef.h>

typedef struct {
    int bf16;
    float *ca, *cb; /* bf16 only: the workspace regions operands are rounded into */
} pp_stage_gemms;

/* ca and cb are byte offsets into work (read only with bf16). */
pp_stage_gemms pp_stage_gemms_of(int bf16, void *work, size_t ca, size_t cb);

/* C = op(A) op(W) + beta C, A an activation, W a weight matrix. */
void pp_gemm_aw(const pp_stage_gemms *g, int ta, int tb, int M, int N, int K, const float *A,
                const float *W, float beta, float *C);

/* C += op(A) op(B), both activations: a weight gradient. */
void pp_gemm_aa(const pp_stage_gemms *g, int ta, int tb, int M, int N, int K, const float *A,
                const float *B, float *C);

/* Stashed activations (the stash layouts' `act` regions, e.g.
 * isa/gpt_layout.h): GEMM operands the stash keeps as the GEMM consumes
 * them, fp32, or with bf16 their bf16 copy (uint16_t, half the bytes). The
 * producer writes fp32 into a scratch region and pp_act_put stores it
 * (rounded, with bf16: the value every bf16 GEMM would have rounded it to);
 * with fp32 the producer writes into the stash itself and src == dst. */
void pp_act_put(const pp_stage_gemms *g, const float *src, void *dst, size_t n);

/* A stashed activation as fp32: the stash itself, or with bf16 its n
 * values widened (exactly) into tmp. */
const float *pp_act_get(const pp_stage_gemms *g, const void *src, size_t n, float *tmp);

/* pp_gemm_aw with A a stashed activation (widened into ca with bf16; no
 * further rounding: it is a bf16 value already). */
void pp_gemm_sw(const pp_stage_gemms *g, int ta, int tb, int M, int N, int K, const void *A,
                const float *W, float beta, float *C);

/* pp_gemm_aa with B a stashed activation (widened into cb with bf16). */
void pp_gemm_as(const pp_stage_gemms *g, int ta, int tb, int M, int N, int K, const float *A,
                const void *B, float *C);

/* The weights as fp32: the compute copy itself, or with bf16 its `total`
 * values widened (exactly) into `wide`, the workspace region the stage's
 * layout reserves for them (isa/mlp_layout.h, isa/gpt_layout.h), so
 * everything that reads a parameter reads the bf16 value and no job
 * allocates. The CPU backend is the reference, not the fast path; the GPU
 * reads bf16 as is. */
const float *pp_stage_params_of(int bf16, size_t total, const void *weights, void *wide);

#endif
