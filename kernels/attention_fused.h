/* attention_fused.h - causal multi-head attention as one fused kernel per
 * pass (flash-attention style): the forward keeps a running max and sum per
 * query row (online softmax) over tiles of keys and saves the row's
 * log-sum-exp; the backward recomputes P from it, one kernel for dq (query
 * rows outer) and one for dk and dv (keys outer), so every sum has one
 * fixed order and no atomics (a GPU run repeats itself bit for bit). The
 * T x T scores never exist and no scratch is used.
 *
 * Arguments, layouts and the precision rule are pp_attention_forward's and
 * _backward's (cpu_kernels.h): qkv [B][T][3C] with head h at columns h*hs
 * of each third, out [B][T][C], lse [B][NH][T], dqkv [B][T][3C]. With bf16,
 * qkv, out and dout are bf16 (uint16_t) on the GPU (the forward rounds out
 * as it writes it; the reference writes it in fp32, the values before that
 * rounding, and takes it back already rounded); P is rounded to bf16 before
 * P v and P^T dout, dS before dS k and dS^T q; the rest is fp32. The P that
 * is rounded is the normalised exp(s - lse), as the cpu backend rounds it,
 * so a bf16 forward makes two passes over the keys (the first for the
 * row's max and sum, online; the second for P v); fp32 makes one, with o
 * rescaled as the running max grows.
 *
 * pp_cu_attention_fused_* (attention_fused_cuda.h): the CUDA kernels. They
 * take head sizes hs = C / NH of 1 to
 * PP_ATT_FUSED_HS_MAX (the shared-memory tiles are sized for it):
 * pp_attention_fused_ok says whether a shape is taken, the caller falls
 * back to attention_cuda.h's blocked GEMMs otherwise.
 *
 * pp_attention_fused_*_ref: the same tiled algorithm in plain C
 * (attention_fused_ref.c), qkv and dout fp32 (with bf16 holding values
 * already rounded to bf16): every tile, every sum in the CUDA kernels'
 * order, so on the host stand-ins (no fused multiply-add) the two agree bit
 * for bit; on a GPU within rounding. */
#ifndef PP_ATTENTION_FUSED_H
#define PP_ATTENTION_FUSED_H

#ifdef __cplusplus
extern "C" {
#endif

/* The tiles: forward query rows per block (4 warps of PP_ATT_FUSED_RW
 * rows), keys per tile (one per lane), dq's query rows per block, dk/dv's
 * keys per block (PP_ATT_FUSED_KW per warp) and query rows per tile. */
enum {
    PP_ATT_FUSED_HS_MAX = 128,
    PP_ATT_FUSED_WARPS = 4,
    PP_ATT_FUSED_RW = 4,
    PP_ATT_FUSED_BR = PP_ATT_FUSED_WARPS * PP_ATT_FUSED_RW,
    PP_ATT_FUSED_BC = 32,
    PP_ATT_FUSED_QW = 2,
    PP_ATT_FUSED_BRQ = PP_ATT_FUSED_WARPS * PP_ATT_FUSED_QW,
    PP_ATT_FUSED_KW = 2,
    PP_ATT_FUSED_BKC = PP_ATT_FUSED_WARPS * PP_ATT_FUSED_KW,
    PP_ATT_FUSED_BQ = 32
};

/* 1 when the fused kernels take this shape (C divisible by NH, 1 <= hs <=
 * PP_ATT_FUSED_HS_MAX), else 0. */
static inline int pp_attention_fused_ok(int C, int NH)
{
    return NH > 0 && C > 0 && C % NH == 0 && C / NH <= PP_ATT_FUSED_HS_MAX;
}

void pp_attention_fused_forward_ref(const float *qkv, float *out, float *lse, int B, int T, int C,
                                    int NH, int bf16);
void pp_attention_fused_backward_ref(const float *qkv, const float *out, const float *dout,
                                     const float *lse, float *dqkv, int B, int T, int C, int NH,
                                     int bf16);

#ifdef __cplusplus
}
#endif

#endif
