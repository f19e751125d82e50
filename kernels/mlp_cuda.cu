/* mlp_cuda.cu - the mlp model's blocks on a GPU (see model_cuda.h;
 * model_cuda.cu dispatches here for PP_MODEL_MLP): the twin of mlp.c, step
 * for step, with the GEMMs on cuBLAS (cuda_stage.h) and everything else in
 * the kernels of cuda_kernels.h; the stage around the blocks is the
 * skeleton of stage_cuda.h. The notation is mlp.c's: B = batch, C = context, D = C * embed, F = ffn, V = 256,
 * nb = blocks per stage.
 *
 * Parameters: exactly mlp.c's layout (a params or grads array may be
 * copied between the CPU and the GPU as it is). F and B read the stage's
 * compute copy (model.h): the fp32 weights, or with bf16 a bf16 copy at the
 * same element offsets. The stage code is a template over the weights'
 * type W (float or uint16_t), instantiated once per precision.
 *
 * Precision bf16 (mlp.c's arithmetic): every GEMM takes bf16 operands
 * and accumulates and writes fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F). A
 * weight operand is the compute copy itself. u, a and z are stashed in
 * bf16 (mlp_layout.h), written so by the layer norm and GELU kernels (the
 * _bf16wy variants) and read as they are; any other activation operand
 * (dy, dh, dlogits, the first operand of a weight-gradient GEMM) is first
 * rounded to bf16 (pp_cu_f32_to_bf16, round to nearest even, as the CPU's
 * pp_f32_to_bf16) into the workspace's ca (first operand) or cb (second)
 * region, of which it uses half. The kernels that read parameters
 * read the bf16 copy (the _bf16w variants, as overloads); everything else,
 * the rest of the stash, gradients and loss included, is fp32. The CPU
 * rounds the same operands, so the two differ by summation order, as with
 * fp32. Precision fp32 runs exactly the fp32 code as before: cublasSgemm
 * in the default math mode (no TF32).
 *
 * Stash: the same regions at the same offsets as mlp.c's stash (one
 * layout, mlp_layout.h), so it fits pp_stage_stash_bytes (and
 * pp_stage_stash_bytes_split) by construction.
 * Two regions of the last stage hold something else on the GPU, because
 * its forward computes the loss gradient in the same pass as the loss:
 *   CPU probs   [B][V]  -> dlogits [B][V] = (softmax - onehot) * loss_scale,
 *                          written by F, read by B and W (never modified)
 *   CPU targets [B]     -> loss    [B] float, the rows' cross-entropy (F's
 *                          scratch: the targets are read straight from the
 *                          tokens, so B needs no copy of them)
 * and the split region's dlogits [B][V] is unused (W reads dlogits where F
 * left them). Everything else has mlp.c's meaning: tokens; per block x_k,
 * u_k, mean_k, rstd_k, h_k, a_k; the head's xh, z, meanf, rstdf; and the
 * split region's dy_k, dh_k, du_k, duf and dx0.
 * Workspace: mlp.c's (logits, dh, du, dx; with bf16 ca and cb, bf16
 * here), so pp_stage_workspace_bytes bounds it; logits is F's only (B
 * starts from the dlogits F stashed).
 * As on the CPU, B writes only the workspace and the split tail of the
 * stash it receives as const, so B may be repeated on the same stash.
 *
 * Every call only enqueues work on the context's stream; the one host
 * synchronisation is pp_cuda_loss_take. */
#include <stdint.h>
#include <string.h>

#include "stage_cuda.h"

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* Block k's activations in the stash (mlp.c's layout): written by F,
 * only read by B and W (hence the cast from const). u and a are `act`s:
 * the weights' type (bf16 values with a bf16 compute copy), written so by
 * the layer norm and GELU kernels and read as they are by the GEMMs (mlp.c
 * rounds its fp32 results into them: the same values). */
typedef struct {
    float *x;
    void *u;
    float *mean, *rstd, *h;
    void *a;
} block_acts;

static block_acts block_acts_of(const stash_layout *L, const void *stash, int k)
{
    char *blk = const_cast<char *>(static_cast<const char *>(stash)) + L->blocks +
                (size_t)k * L->block_stride;
    block_acts b = {(float *)blk,
                    (float *)(blk + L->u),
                    (float *)(blk + L->mean),
                    (float *)(blk + L->rstd),
                    (float *)(blk + L->h),
                    (float *)(blk + L->a)};
    return b;
}

/* h = u W1^T + b1, a = gelu(h): fp32, one GEMM with a GELU_AUX_BIAS
 * epilogue (D = a, aux = h), or the GEMM and pp_cu_bias_gelu_forward; with
 * bf16, the GEMM and the kernel writing a in bf16. */
static void fc_forward(const run *r, const shape *sh, const param_layout *P, const float *p,
                       const float *u, float *h, float *a)
{
    int B = sh->B, D = sh->D, F = sh->F;
    if (!gemm_fused(r, 0, 1, B, F, D, u, p + P->W1, 0, epi_gelu_aux_bias(p + P->b1, h), a)) {
        gemm(r, 0, 1, B, F, D, 1.0f, u, p + P->W1, 0, 0.0f, h);
        cudaCheck(pp_cu_bias_gelu_forward(h, p + P->b1, a, B, F, r->st));
    }
}
static void fc_forward(const run *r, const shape *sh, const param_layout *P, const uint16_t *p,
                       const uint16_t *u, float *h, uint16_t *a)
{
    int B = sh->B, D = sh->D, F = sh->F;
    gemm(r, 0, 1, B, F, D, 1.0f, u, p + P->W1, 1, 0.0f, h);
    cudaCheck(pp_cu_bias_gelu_forward(h, p + P->b1, a, B, F, r->st));
}

/* y = x + gelu(LN(x) W1^T + b1) W2^T + b2, saving u = LN(x), its mean and
 * rstd, h and a for the backward. y must not alias x. */
template <typename W>
static void block_forward(const run *r, const shape *sh, const param_layout *P, const W *p,
                          const block_acts *s, float *y)
{
    int B = sh->B, D = sh->D, F = sh->F;
    W *u = static_cast<W *>(s->u), *a = static_cast<W *>(s->a);
    cudaCheck(
        pp_cu_layernorm_forward(s->x, p + P->ln_g, p + P->ln_b, B, D, u, s->mean, s->rstd, r->st));
    int bf16 = is_bf16(p);
    fc_forward(r, sh, P, p, u, s->h, a);
    /* y = (a W2^T + x) + b2: one GEMM with C = x (beta 1) and a BIAS
     * epilogue, or the GEMM and pp_cu_residual_bias_add (the same order) */
    if (r->cm->tp_fn) {
        /* tensor parallel (mlp.c's twin): a W2^T is this rank's partial
         * sum, summed over the group before the residual and b2 */
        gemm(r, 0, 1, B, D, F, 1.0f, a, p + P->W2, bf16, 0.0f, y);
        r->cm->tp_fn(r->cm->tp_ctx, y, (size_t)B * D, r->st);
        cudaCheck(pp_cu_residual_bias_add(y, s->x, p + P->b2, B, D, r->st));
    } else if (!gemm_fused(r, 0, 1, B, D, F, a, p + P->W2, bf16, epi_bias(p + P->b2, s->x), y)) {
        gemm(r, 0, 1, B, D, F, 1.0f, a, p + P->W2, bf16, 0.0f, y);
        cudaCheck(pp_cu_residual_bias_add(y, s->x, p + P->b2, B, D, r->st));
    }
}

/* z = LN_f(xh), logits = z Wh^T + bh; then, in one pass, the rows'
 * cross-entropy and dlogits = (softmax - onehot) * loss_scale; the summed
 * loss goes to the accumulator. Targets: the last column of the tokens,
 * stride C + 1. */
template <typename W>
static void head_forward(const run *r, const shape *sh, const param_layout *P,
                         const stash_layout *L, const W *params, const int32_t *tgt, char *st,
                         float *logits, float loss_scale)
{
    int B = sh->B, D = sh->D;
    W *z = static_cast<W *>(static_cast<void *>(st + L->z)); /* an act, as u */
    float *dlogits = (float *)(st + L->probs);
    float *loss = (float *)(st + L->targets);
    cudaCheck(pp_cu_layernorm_forward((const float *)(st + L->xh), params + P->lnf_g,
                                      params + P->lnf_b, B, D, z, (float *)(st + L->meanf),
                                      (float *)(st + L->rstdf), r->st));
    /* logits = z Wh^T + bh: a BIAS epilogue, or the GEMM and pp_cu_bias_add */
    int bf16 = is_bf16(params);
    const void *zo = z;
    if (!gemm_fused(r, 0, 1, B, PP_VOCAB, D, zo, params + P->Wh, bf16,
                    epi_bias(params + P->bh, NULL), logits)) {
        gemm(r, 0, 1, B, PP_VOCAB, D, 1.0f, zo, params + P->Wh, bf16, 0.0f, logits);
        cudaCheck(pp_cu_bias_add(logits, params + P->bh, B, PP_VOCAB, r->st));
    }
    cudaCheck(pp_cu_softmax_xent_fused(logits, tgt + sh->C, sh->C + 1, B, PP_VOCAB, loss_scale,
                                       dlogits, loss, r->st));
    cudaCheck(pp_cu_sum_into(loss, B, r->cm->d_loss, r->st));
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

/* Stash regions saved by the forward, read-only here. */
static const float *saved(const void *stash, size_t off)
{
    return (const float *)((const char *)stash + off);
}

/* The reverse of block_forward, in mlp.c's parts: dh = (dy W2) *
 * gelu'(h); du = dh W1; the weight gradients from dy, dh and du; dx = dy +
 * LN_backward(du). dx may be dy's buffer (dy is consumed by then); du must
 * be a buffer of its own (the layer norm's backward reads du after
 * accumulating into dx). */
template <typename W>
static void block_dh(const run *r, const shape *sh, const param_layout *P, const W *p,
                     const float *h, const float *dy, float *dh)
{
    int B = sh->B, D = sh->D, F = sh->F;
    /* dh = (dy W2) * gelu'(h): a DGELU epilogue (aux = h), or the GEMM
     * (da = dy W2) and pp_cu_gelu_backward */
    int bf16 = is_bf16(p);
    const void *dyo = operand(r, dy, (size_t)B * D, p);
    if (!gemm_fused(r, 0, 0, B, F, D, dyo, p + P->W2, bf16, epi_dgelu(h), dh)) {
        gemm(r, 0, 0, B, F, D, 1.0f, dyo, p + P->W2, bf16, 0.0f, dh);
        cudaCheck(pp_cu_gelu_backward(h, dh, dh, (size_t)B * F, r->st));
    }
}

template <typename W>
static void block_du(const run *r, const shape *sh, const param_layout *P, const W *p,
                     const float *dh, float *du)
{
    int B = sh->B, D = sh->D, F = sh->F;
    gemm_w(r, 0, 0, B, D, F, dh, p + P->W1, 0.0f, du); /* du = dh W1 */
    if (r->cm->tp_fn) /* tensor parallel: du is a partial sum (mlp.c's twin) */
        r->cm->tp_fn(r->cm->tp_ctx, du, (size_t)B * D, r->st);
}

/* The layer norm's parameter pass needs no gamma (so W needs no params). */
static void block_weight_grads(const run *r, const shape *sh, const param_layout *P, float *g,
                               const block_acts *s, const float *dy, const float *dh,
                               const float *du)
{
    int B = sh->B, D = sh->D, F = sh->F;
    gemm_grad_act(r, 1, 0, D, F, B, dy, s->a, g + P->W2); /* dW2 += dy^T a */
    cudaCheck(pp_cu_bias_grad(dy, B, D, g + P->b2, r->st));
    gemm_grad_act(r, 1, 0, F, D, B, dh, s->u, g + P->W1); /* dW1 += dh^T u */
    cudaCheck(pp_cu_bias_grad(dh, B, F, g + P->b1, r->st));
    cudaCheck(pp_cu_layernorm_backward(s->x, (const float *)NULL, s->mean, s->rstd, du, B, D, NULL,
                                       g + P->ln_g, g + P->ln_b, r->st));
}

/* dx = dy + LN_backward(du): the residual copy, then the layer norm's input
 * gradient accumulated onto it. */
template <typename W>
static void block_dx(const run *r, const shape *sh, const param_layout *P, const W *p,
                     const block_acts *s, const float *dy, const float *du, float *dx)
{
    int B = sh->B, D = sh->D;
    copy_d2d(r, dx, dy, (size_t)B * D * sizeof(float)); /* residual path */
    cudaCheck(pp_cu_layernorm_backward(s->x, p + P->ln_g, s->mean, s->rstd, du, B, D, dx, NULL,
                                       NULL, r->st));
}

static void head_weight_grads(const run *r, const shape *sh, const param_layout *P,
                              const stash_layout *L, float *grads, const void *stash,
                              const float *duf)
{
    int B = sh->B, D = sh->D;
    const float *dlogits = saved(stash, L->probs);
    gemm_grad_act(r, 1, 0, PP_VOCAB, D, B, dlogits, saved(stash, L->z), grads + P->Wh);
    cudaCheck(pp_cu_bias_grad(dlogits, B, PP_VOCAB, grads + P->bh, r->st));
    cudaCheck(pp_cu_layernorm_backward(saved(stash, L->xh), (const float *)NULL,
                                       saved(stash, L->meanf), saved(stash, L->rstdf), duf, B, D,
                                       NULL, grads + P->lnf_g, grads + P->lnf_b, r->st));
}

/* dxh = LN_f_backward(duf): the layer norm accumulates, so dx starts at 0. */
template <typename W>
static void head_dx(const run *r, const shape *sh, const param_layout *P, const stash_layout *L,
                    const W *params, const void *stash, const float *duf, float *dx)
{
    int B = sh->B, D = sh->D;
    cudaCheck(cudaMemsetAsync(dx, 0, (size_t)B * D * sizeof(float), r->st));
    cudaCheck(pp_cu_layernorm_backward(saved(stash, L->xh), params + P->lnf_g,
                                       saved(stash, L->meanf), saved(stash, L->rstdf), duf, B, D,
                                       dx, NULL, NULL, r->st));
}

/* ------------------------------------------------------------------------ */
/* The blocks, as the stage skeleton (stage_cuda.h) calls them               */

struct mlp_kind {
    typedef mlp_layouts layouts;

    static layouts layouts_of(const pp_model *m, int S, int s) { return mlp_layouts_of(m, S, s); }
    static pp_stage_frame frame_of(const layouts *y) { return mlp_frame_of(y); }

    template <typename W>
    static void embed_forward(const run *r, const layouts *y, const W *params,
                              const int32_t *tokens, float *x0)
    {
        cudaCheck(
            pp_cu_embedding_forward(tokens, y->sh.B, y->sh.C, params + y->P.E, y->sh.E, x0, r->st));
    }

    static void embed_backward(const run *r, const layouts *y, const int32_t *tokens,
                               const float *dx0, float *grads)
    {
        cudaCheck(pp_cu_embedding_backward(tokens, y->sh.B, y->sh.C, dx0, y->sh.E, grads + y->P.E,
                                           r->st));
    }

    template <typename W>
    static void block_forward(const run *r, const layouts *y, int k, const W *p, void *stash,
                              void *, float *out)
    {
        block_acts acts = block_acts_of(&y->L, stash, k);
        ::block_forward(r, &y->sh, &y->P, p, &acts, out);
    }

    /* Fused (g non-NULL): dh and du in the workspace, the weight gradients
     * as they exist. B of a split backward: dh_k and du_k in the split
     * region (the skeleton saved dy_k there). */
    template <typename W>
    static void block_backward(const run *r, const layouts *y, int k, const W *p, float *g,
                               const void *stash, void *work, const float *dy, float *dx)
    {
        block_acts acts = block_acts_of(&y->L, stash, k);
        char *st = const_cast<char *>(static_cast<const char *>(stash)), *wk = (char *)work;
        char *wblk = st + y->L.wblocks + (size_t)k * y->L.wblock_stride;
        float *dh = (float *)(g ? wk + y->W.dh : wblk + y->L.wdh);
        float *du = (float *)(g ? wk + y->W.du : wblk + y->L.wdu);
        block_dh(r, &y->sh, &y->P, p, acts.h, dy, dh);
        block_du(r, &y->sh, &y->P, p, dh, du);
        if (g)
            block_weight_grads(r, &y->sh, &y->P, g, &acts, dy, dh, du);
        block_dx(r, &y->sh, &y->P, p, &acts, dy, du, dx);
    }

    static void block_weight(const run *r, const layouts *y, int k, float *g, const void *stash)
    {
        block_acts acts = block_acts_of(&y->L, stash, k);
        size_t wblk = y->L.wblocks + (size_t)k * y->L.wblock_stride;
        block_weight_grads(r, &y->sh, &y->P, g, &acts, saved(stash, wblk),
                           saved(stash, wblk + y->L.wdh), saved(stash, wblk + y->L.wdu));
    }

    template <typename W>
    static void head_forward(const run *r, const layouts *y, const W *params, const int32_t *tgt,
                             void *stash, void *work, float loss_scale)
    {
        ::head_forward(r, &y->sh, &y->P, &y->L, params, tgt, (char *)stash,
                       (float *)((char *)work + y->W.logits), loss_scale);
    }

    /* From the dlogits F stashed: duf = dlogits Wh (in the workspace, or
     * the split region for W), the head's weight gradients (fused), dx. */
    template <typename W>
    static void head_backward(const run *r, const layouts *y, const W *params, float *grads,
                              const void *stash, void *work, float *dx)
    {
        char *st = const_cast<char *>(static_cast<const char *>(stash)), *wk = (char *)work;
        float *duf = (float *)(grads ? wk + y->W.du : st + y->L.wduf);
        gemm_w(r, 0, 0, y->sh.B, y->sh.D, PP_VOCAB, saved(stash, y->L.probs), params + y->P.Wh,
               0.0f, duf); /* duf = dlogits Wh */
        if (grads)
            head_weight_grads(r, &y->sh, &y->P, &y->L, grads, stash, duf);
        head_dx(r, &y->sh, &y->P, &y->L, params, stash, duf, dx);
    }

    static void head_weight(const run *r, const layouts *y, float *grads, const void *stash)
    {
        head_weight_grads(r, &y->sh, &y->P, &y->L, grads, stash, saved(stash, y->L.wduf));
    }
};

extern const pp_cuda_model_impl pp_cuda_model_mlp = {
    cuda_stage<mlp_kind>::forward_any, cuda_stage<mlp_kind>::backward_any,
    cuda_stage<mlp_kind>::backward_input_any, cuda_stage<mlp_kind>::backward_weight};
