/* gpt_cuda.cu - GPT-2's layers on a GPU (see model_cuda.h; model_cuda.cu
 * dispatches here for PP_MODEL_GPT): the twin of gpt.c, layer for layer,
 * inside the stage skeleton of stage_cuda.h, with the GEMMs on cuBLAS
 * (cuda_stage.h's gemm_w and gemm_grad), the attention in the fused
 * kernels of attention_fused_cuda.h (or, for a head size they do not take
 * or with PP_ATTENTION=blocked, attention_cuda.h's cuBLAS strided-batched
 * GEMMs over heads and row-block kernels) and everything else in the
 * kernels of cuda_kernels.h. The notation is gpt_layout.h's: B = batch,
 * T = context, C = embed, NH = heads, hs = A / NH, A = the attention's
 * width (C, or C / T on a rank of tensor = T), F = ffn, V = vocab,
 * L = this stage's layers, BT = B * T rows. Tensor-parallel (the
 * all-reduce set, gpt.c's twin): attproj and fcproj are row-parallel, so
 * their GEMMs make partial sums, all-reduced on the stream before the
 * residual and bias; dln2 and dln1 are all-reduced before they are read.
 *
 * Layouts: gpt_layout.h's, the CPU's own, for the parameters (a params or
 * grads array may be copied between the CPU and the GPU as it is), the
 * stash and the workspace, so pp_stage_stash_bytes (_split) and
 * pp_stage_workspace_bytes bound what a stage uses by construction. The
 * blocked attention's row blocks use the workspace's att region, no more
 * (attention_cuda.h); the fused kernels use none of it.
 * Two regions of the last stage's stash hold something else on the GPU, as
 * on mlp_cuda.cu, because its forward computes the loss gradient in the
 * same pass as the loss (pp_cu_softmax_xent_fused):
 *   CPU probs [BT][V] -> dlogits [BT][V] = (softmax - onehot) * loss_scale,
 *                        written by F, read by B and W (never modified)
 *   targets   [BT]    -> the targets too (each position's next token,
 *                        gathered from the tokens), F's only
 * and the split region's wdlogits is unused (W reads dlogits where F left
 * them). The rows' cross-entropy [BT] is F's scratch in the workspace's dx
 * region. Everything else has gpt_layout.h's meaning.
 *
 * Layer l (llm.c's order), forward:
 *   ln1 = LN1(x); qkv = ln1 qkvw^T + qkvb; atty = attention(qkv) (lse kept);
 *   res = (atty attprojw^T + x) + attprojb; ln2 = LN2(res);
 *   fch = ln2 fcw^T + fcb, fcg = gelu(fch); y = (fcg fcprojw^T + res) + fcprojb.
 * Backward from dy: dh = (dy fcprojw) * gelu'(fch); dln2 = dh fcw;
 *   dres = dy + LN2'(dln2); datt = dres attprojw; dqkv = attention'(datt);
 *   dln1 = dqkv qkvw; dx = dres + LN1'(dln1); the weight gradients from
 *   dy, dh, dln2, dres, dqkv and dln1 (fused: as soon as each exists; a
 *   split backward's B saves those six in the stash's split region and W
 *   computes the same gradients in the same order).
 * The head: lnf = LNf(xf); logits = lnf wlm^T (no bias); the loss. Its
 *   backward: dlnf = dlogits wlm; dwlm += dlogits^T lnf; dxf = LNf'(dlnf).
 * The first stage: x0 = wte[token] + wpe[t]; its backward scatters dx0.
 *
 * Precision bf16 (gpt.c's rule): every GEMM with a weight takes bf16
 * operands (the compute copy, and the activation rounded into the
 * workspace's ca region) and accumulates in fp32; a weight-gradient GEMM
 * takes the gradient rounded (into ca) and the stash's bf16 activation; in
 * the fused backward dh, dres and dqkv are rounded once for both GEMMs that
 * read them (grad_once); the attention gets qkv from the stash and, in the
 * backward, its dout (datt) rounded into cb, and rounds P and dS itself;
 * its GEMMs take bf16 operands too (attention_cuda.h). Layer norms, GELU,
 * the softmax, the loss and every gradient compute in fp32.
 * The stash's `act` regions (gpt_layout.h: ln1, qkv, atty, ln2, fch, fcg,
 * lnf) are bf16, written so by the kernel that makes them (the layer
 * norms, qkv's bias add from the GEMM's fp32 output in the workspace's
 * dqkv, bias + GELU writing fch and fcg from fc's fp32 output in dh, the
 * attention kernels writing atty) and read as they are by every GEMM, the
 * attention and GELU's backward, with no rounding pass: gpt.c makes them
 * in fp32 and rounds them (pp_act_put), the same values.
 *
 * Fused epilogues (gemm_lt.h; ppvm --epilogues, on by default), as in
 * mlp_cuda.cu: where cuBLASLt's heuristic offers an algorithm, qkv's GEMM
 * takes its bias (BIAS), the two residual projections their residual and
 * bias (C = x or res with beta 1, then BIAS: the order of
 * pp_cu_residual_bias_add), fc its bias and GELU (GELU_AUX_BIAS, aux =
 * fch), and the backward's dy fcprojw GELU's derivative (DGELU, aux =
 * fch); otherwise, and with the epilogues off, the GEMM and its kernel. In
 * bf16 none (the bias epilogues take fp32 biases, DGELU an fp32 aux, and
 * fch is bf16 then); the GELU ones need F a multiple of 8. The head has
 * no bias: a plain GEMM.
 *
 * Every call only enqueues work on the context's stream. */
#include <stdint.h>
#include <string.h>

#include "attention_cuda.h"
#include "attention_fused_cuda.h"
#include "gpt_acts.h"
#include "stage_cuda.h"

typedef gpt_layouts layouts;

static float *at(const void *base, size_t off)
{
    return (float *)(const_cast<char *>(static_cast<const char *>(base)) + off);
}

/* The attention's operand: x itself (fp32), or with bf16 x rounded to bf16
 * into dst (ca or cb), the values gpt.c rounds it to (pp_round_bf16), as
 * the bf16 the attention's GEMMs take (attention_cuda.h). */
static const void *att_operand(const run *r, const float *x, size_t n, uint16_t *dst)
{
    if (!r->ca)
        return x;
    return rounded(r, x, n, dst);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* qkv = ln1 qkvw^T + qkvb: fp32, a BIAS epilogue, or the GEMM and
 * pp_cu_bias_add; with bf16, the GEMM into the workspace's dqkv and the
 * bias added as qkv is written to the stash in bf16. */
static void qkv_forward(const run *r, const layouts *y, const float *p, const float *ln1,
                        float *qkv, void *)
{
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C, A = y->sh.A;
    if (!gemm_fused(r, 0, 1, BT, 3 * A, C, ln1, p + P->qkvw, 0, epi_bias(p + P->qkvb, NULL), qkv)) {
        gemm(r, 0, 1, BT, 3 * A, C, 1.0f, ln1, p + P->qkvw, 0, 0.0f, qkv);
        cudaCheck(pp_cu_bias_add(qkv, p + P->qkvb, BT, 3 * A, r->st));
    }
}
static void qkv_forward(const run *r, const layouts *y, const uint16_t *p, const uint16_t *ln1,
                        uint16_t *qkv, void *work)
{
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C, A = y->sh.A;
    float *q32 = at(work, y->W.dqkv); /* backward scratch, free in F */
    gemm(r, 0, 1, BT, 3 * A, C, 1.0f, ln1, p + P->qkvw, 1, 0.0f, q32);
    cudaCheck(pp_cu_bias_add_to_bf16wy(q32, p + P->qkvb, qkv, BT, 3 * A, r->st));
}

/* fch = ln2 fcw^T + fcb, fcg = gelu(fch): fp32, a GELU_AUX_BIAS epilogue
 * (D = fcg, aux = fch), or the GEMM and pp_cu_bias_gelu_forward; with
 * bf16, the GEMM into the workspace's dh and one kernel writing fch and
 * fcg in bf16. */
static void fc_forward(const run *r, const layouts *y, const float *p, const float *ln2, float *fch,
                       float *fcg, void *)
{
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C, F = y->sh.F;
    if (!gemm_fused(r, 0, 1, BT, F, C, ln2, p + P->fcw, 0, epi_gelu_aux_bias(p + P->fcb, fch),
                    fcg)) {
        gemm(r, 0, 1, BT, F, C, 1.0f, ln2, p + P->fcw, 0, 0.0f, fch);
        cudaCheck(pp_cu_bias_gelu_forward(fch, p + P->fcb, fcg, BT, F, r->st));
    }
}
static void fc_forward(const run *r, const layouts *y, const uint16_t *p, const uint16_t *ln2,
                       uint16_t *fch, uint16_t *fcg, void *work)
{
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C, F = y->sh.F;
    float *h32 = at(work, y->W.dh); /* backward scratch, free in F */
    gemm(r, 0, 1, BT, F, C, 1.0f, ln2, p + P->fcw, 1, 0.0f, h32);
    cudaCheck(pp_cu_bias_gelu_forward_to_bf16why(h32, p + P->fcb, fch, fcg, BT, F, r->st));
}

/* atty = attention(qkv), the fused kernels or the blocked ones, written
 * into the stash in its type: with bf16 the kernels round it as they write
 * it, the attention projection's operand as it is. */
static void atty_forward(const run *r, const layouts *y, const void *qkv, void *atty, float *lse,
                         void *work)
{
    const gpt_shape *sh = &y->sh;
    if (pp_cu_attention_fused_use(sh->A, sh->NH))
        pp_cu_attention_fused_forward(r->st, qkv, atty, lse, sh->B, sh->T, sh->A, sh->NH, sh->bf16);
    else
        pp_cu_attention_forward(r->cm->blas, r->st, qkv, atty, lse, sh->B, sh->T, sh->A, sh->NH,
                                gpt_att_rows(sh), at(work, y->W.att), sh->bf16);
}

template <typename W>
static void layer_forward(const run *r, const layouts *y, const W *p, const gpt_layer_acts *a,
                          void *work, float *out)
{
    const gpt_shape *sh = &y->sh;
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = sh->C, A = sh->A, F = sh->F, bf16 = is_bf16(p);
    void (*tp)(void *, float *, size_t, cudaStream_t) = r->cm->tp_fn;
    W *ln1 = static_cast<W *>(a->ln1), *qkv = static_cast<W *>(a->qkv);
    W *atty = static_cast<W *>(a->atty), *ln2 = static_cast<W *>(a->ln2);
    W *fch = static_cast<W *>(a->fch), *fcg = static_cast<W *>(a->fcg);
    cudaCheck(pp_cu_layernorm_forward(a->x, p + P->ln1w, p + P->ln1b, BT, C, ln1, a->ln1_mean,
                                      a->ln1_rstd, r->st));
    qkv_forward(r, y, p, ln1, qkv, work);
    atty_forward(r, y, qkv, atty, a->lse, work);
    /* res = (atty attprojw^T + x) + attprojb: C = x (beta 1) and a BIAS
     * epilogue, or the GEMM and pp_cu_residual_bias_add (the same order);
     * tensor-parallel, the partial sum all-reduced first */
    if (tp) {
        gemm(r, 0, 1, BT, C, A, 1.0f, atty, p + P->attprojw, bf16, 0.0f, a->res);
        tp(r->cm->tp_ctx, a->res, y->BT * (size_t)C, r->st);
        cudaCheck(pp_cu_residual_bias_add(a->res, a->x, p + P->attprojb, BT, C, r->st));
    } else if (!gemm_fused(r, 0, 1, BT, C, A, atty, p + P->attprojw, bf16,
                           epi_bias(p + P->attprojb, a->x), a->res)) {
        gemm(r, 0, 1, BT, C, A, 1.0f, atty, p + P->attprojw, bf16, 0.0f, a->res);
        cudaCheck(pp_cu_residual_bias_add(a->res, a->x, p + P->attprojb, BT, C, r->st));
    }
    cudaCheck(pp_cu_layernorm_forward(a->res, p + P->ln2w, p + P->ln2b, BT, C, ln2, a->ln2_mean,
                                      a->ln2_rstd, r->st));
    fc_forward(r, y, p, ln2, fch, fcg, work);
    /* y = (fcg fcprojw^T + res) + fcprojb, as res */
    if (tp) {
        gemm(r, 0, 1, BT, C, F, 1.0f, fcg, p + P->fcprojw, bf16, 0.0f, out);
        tp(r->cm->tp_ctx, out, y->BT * (size_t)C, r->st);
        cudaCheck(pp_cu_residual_bias_add(out, a->res, p + P->fcprojb, BT, C, r->st));
    } else if (!gemm_fused(r, 0, 1, BT, C, F, fcg, p + P->fcprojw, bf16,
                           epi_bias(p + P->fcprojb, a->res), out)) {
        gemm(r, 0, 1, BT, C, F, 1.0f, fcg, p + P->fcprojw, bf16, 0.0f, out);
        cudaCheck(pp_cu_residual_bias_add(out, a->res, p + P->fcprojb, BT, C, r->st));
    }
}

template <typename W>
static void head_forward(const run *r, const layouts *y, const W *params, const int32_t *tgt,
                         void *stash, void *work, float loss_scale)
{
    const gpt_shape *sh = &y->sh;
    const gpt_param_layout *P = &y->P;
    const gpt_stash_layout *L = &y->L;
    int BT = (int)y->BT, C = sh->C, V = sh->V;
    W *lnf = static_cast<W *>(static_cast<void *>(at(stash, L->lnf)));
    float *logits = at(work, y->W.logits);
    int32_t *targets = (int32_t *)at(stash, L->targets);
    float *loss = at(work, y->W.dx); /* [BT] scratch */
    cudaCheck(pp_cu_layernorm_forward(at(stash, L->xf), params + P->lnfw, params + P->lnfb, BT, C,
                                      lnf, at(stash, L->lnf_mean), at(stash, L->lnf_rstd), r->st));
    gemm(r, 0, 1, BT, V, C, 1.0f, lnf, params + P->wlm, is_bf16(params), 0.0f, logits);
    cudaCheck(pp_cu_gpt_targets(tgt, sh->B, sh->T, targets, r->st));
    cudaCheck(pp_cu_softmax_xent_fused(logits, targets, 1, BT, V, loss_scale, at(stash, L->probs),
                                       loss, r->st));
    cudaCheck(pp_cu_sum_into(loss, BT, r->cm->d_loss, r->st));
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

/* The gradients a layer's weight gradients are computed from: in the
 * workspace (fused backward) or in the stash's split region (B of a split
 * backward, for W). dln2 and dln1 share the workspace's dln. */
typedef struct {
    float *dy, *dh, *dln2, *dres, *dqkv, *dln1;
} layer_grads;

static layer_grads layer_grads_split(const gpt_stash_layout *L, const void *stash, int l)
{
    size_t o = L->wlayers + (size_t)l * L->wlayer_stride;
    layer_grads g = {at(stash, o),
                     at(stash, o + L->wdh),
                     at(stash, o + L->wdln2),
                     at(stash, o + L->wdres),
                     at(stash, o + L->wdqkv),
                     at(stash, o + L->wdln1)};
    return g;
}

static layer_grads layer_grads_work(const gpt_work_layout *Wk, void *work, const float *dy)
{
    layer_grads g = {const_cast<float *>(dy), at(work, Wk->dh),   at(work, Wk->dln),
                     at(work, Wk->dres),      at(work, Wk->dqkv), at(work, Wk->dln)};
    return g;
}

/* Layer weight gradients (grads g at the layer's start): the MLP's from dy
 * and dh, ln2's from dln2, the attention projection's from dres, qkv's
 * from dqkv, ln1's from dln1. The layer-norm halves need dln2 and dln1
 * distinct only in a split W; the fused walk calls the parts as each
 * gradient exists (dln is reused), with dh16, dres16 and dqkv16 the bf16
 * copies its input-gradient GEMMs read (grad_once); a split W passes NULL
 * and they are rounded here. */
static void grads_mlp(const run *r, const layouts *y, float *g, const gpt_layer_acts *a,
                      const float *dy, const float *dh, const void *dh16, const float *dln2)
{
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C, F = y->sh.F;
    gemm_grad_act(r, 1, 0, C, F, BT, dy, a->fcg, g + P->fcprojw); /* dfcprojw += dy^T fcg */
    cudaCheck(pp_cu_bias_grad(dy, BT, C, g + P->fcprojb, r->st));
    gemm_grad_pre(r, 1, 0, F, C, BT, dh, dh16, a->ln2, g + P->fcw); /* dfcw += dh^T ln2 */
    cudaCheck(pp_cu_bias_grad(dh, BT, F, g + P->fcb, r->st));
    cudaCheck(pp_cu_layernorm_backward(a->res, (const float *)NULL, a->ln2_mean, a->ln2_rstd, dln2,
                                       BT, C, NULL, g + P->ln2w, g + P->ln2b, r->st));
}

static void grads_attproj(const run *r, const layouts *y, float *g, const gpt_layer_acts *a,
                          const float *dres, const void *dres16)
{
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C, A = y->sh.A;
    gemm_grad_pre(r, 1, 0, C, A, BT, dres, dres16, a->atty, g + P->attprojw); /* += dres^T atty */
    cudaCheck(pp_cu_bias_grad(dres, BT, C, g + P->attprojb, r->st));
}

static void grads_qkv(const run *r, const layouts *y, float *g, const gpt_layer_acts *a,
                      const float *dqkv, const void *dqkv16, const float *dln1)
{
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = y->sh.C, A = y->sh.A;
    gemm_grad_pre(r, 1, 0, 3 * A, C, BT, dqkv, dqkv16, a->ln1, g + P->qkvw); /* += dqkv^T ln1 */
    cudaCheck(pp_cu_bias_grad(dqkv, BT, 3 * A, g + P->qkvb, r->st));
    cudaCheck(pp_cu_layernorm_backward(a->x, (const float *)NULL, a->ln1_mean, a->ln1_rstd, dln1,
                                       BT, C, NULL, g + P->ln1w, g + P->ln1b, r->st));
}

/* A gradient that an input-gradient GEMM and (fused) a weight-gradient GEMM
 * both read, as they take it: NULL with fp32 (each reads it as it is) or in
 * a split backward's B (W rounds it later); with bf16 rounded once into
 * the second half of cb, which the attention's bf16 dout (at cb's start,
 * BT x A <= BT x widest values) leaves free, and which holds one such
 * gradient at a time (dh, then dres, then dqkv). */
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
    return rounded(r, x, n, r->cb + y->BT * gpt_work_widest(&y->sh));
}

/* The reverse of layer_forward from dy = d(layer output), into dst (which
 * may be dy's buffer: dy is consumed before dst is written). g: the
 * layer's weight gradients (fused), or NULL (split: d holds the stash's
 * regions, where the skeleton has saved dy already). */
template <typename W>
static void layer_backward(const run *r, const layouts *y, const W *p, float *g,
                           const gpt_layer_acts *a, const layer_grads *d, const float *dy,
                           void *work, float *dst)
{
    const gpt_shape *sh = &y->sh;
    const gpt_param_layout *P = &y->P;
    int BT = (int)y->BT, C = sh->C, A = sh->A, F = sh->F;
    size_t xbytes = y->BT * (size_t)C * sizeof(float);
    float *datt = at(work, y->W.datt);
    /* dh = (dy fcprojw) * gelu'(fch): a DGELU epilogue (aux = fch; fp32
     * only), or the GEMM and pp_cu_gelu_backward (reading bf16 fch as is) */
    const W *fch = static_cast<const W *>(a->fch);
    const void *dyo = operand(r, dy, y->BT * (size_t)C, p);
    if (!gemm_fused(r, 0, 0, BT, F, C, dyo, p + P->fcprojw, is_bf16(p), epi_dgelu(fch), d->dh)) {
        gemm(r, 0, 0, BT, F, C, 1.0f, dyo, p + P->fcprojw, is_bf16(p), 0.0f, d->dh);
        cudaCheck(pp_cu_gelu_backward(fch, d->dh, d->dh, y->BT * (size_t)F, r->st));
    }
    /* dln2 = dh fcw */
    const void *dh16 = grad_once(r, y, d->dh, y->BT * (size_t)F, p, g);
    gemm_w_pre(r, 0, 0, BT, C, F, d->dh, dh16, p + P->fcw, 0.0f, d->dln2);
    if (r->cm->tp_fn) /* tensor parallel: a partial sum (gpt.c's twin) */
        r->cm->tp_fn(r->cm->tp_ctx, d->dln2, y->BT * (size_t)C, r->st);
    if (g)
        grads_mlp(r, y, g, a, dy, d->dh, dh16, d->dln2);
    /* dres = dy + LN2'(dln2) */
    copy_d2d(r, d->dres, dy, xbytes);
    cudaCheck(pp_cu_layernorm_backward(a->res, p + P->ln2w, a->ln2_mean, a->ln2_rstd, d->dln2, BT,
                                       C, d->dres, NULL, NULL, r->st));
    /* datt = dres attprojw; dqkv = the attention's backward */
    const void *dres16 = grad_once(r, y, d->dres, xbytes / sizeof(float), p, g);
    gemm_w_pre(r, 0, 0, BT, A, C, d->dres, dres16, p + P->attprojw, 0.0f, datt);
    if (g) /* now, while dres16 is in cb (dqkv16 takes its place) */
        grads_attproj(r, y, g, a, d->dres, dres16);
    const void *qkv = a->qkv; /* the stash's, bf16 with bf16 */
    const void *dout = att_operand(r, datt, y->BT * (size_t)A, r->cb);
    const void *out = a->atty; /* the stash's, bf16 with bf16 */
    if (pp_cu_attention_fused_use(A, sh->NH))
        pp_cu_attention_fused_backward(r->st, qkv, out, dout, a->lse, d->dqkv, sh->B, sh->T, A,
                                       sh->NH, sh->bf16);
    else
        pp_cu_attention_backward(r->cm->blas, r->st, qkv, out, dout, a->lse, d->dqkv, sh->B, sh->T,
                                 A, sh->NH, gpt_att_rows(sh), at(work, y->W.att), sh->bf16);
    /* dln1 = dqkv qkvw */
    const void *dqkv16 = grad_once(r, y, d->dqkv, y->BT * 3 * (size_t)A, p, g);
    gemm_w_pre(r, 0, 0, BT, C, 3 * A, d->dqkv, dqkv16, p + P->qkvw, 0.0f, d->dln1);
    if (r->cm->tp_fn)
        r->cm->tp_fn(r->cm->tp_ctx, d->dln1, y->BT * (size_t)C, r->st);
    if (g)
        grads_qkv(r, y, g, a, d->dqkv, dqkv16, d->dln1);
    /* dx = dres + LN1'(dln1) */
    copy_d2d(r, dst, d->dres, xbytes);
    cudaCheck(pp_cu_layernorm_backward(a->x, p + P->ln1w, a->ln1_mean, a->ln1_rstd, d->dln1, BT, C,
                                       dst, NULL, NULL, r->st));
}

static void head_weight_grads(const run *r, const layouts *y, float *grads, const void *stash,
                              const float *dlnf)
{
    const gpt_param_layout *P = &y->P;
    const gpt_stash_layout *L = &y->L;
    int BT = (int)y->BT, C = y->sh.C, V = y->sh.V;
    gemm_grad_act(r, 1, 0, V, C, BT, at(stash, L->probs), at(stash, L->lnf), grads + P->wlm);
    cudaCheck(pp_cu_layernorm_backward(at(stash, L->xf), (const float *)NULL,
                                       at(stash, L->lnf_mean), at(stash, L->lnf_rstd), dlnf, BT, C,
                                       NULL, grads + P->lnfw, grads + P->lnfb, r->st));
}

/* ------------------------------------------------------------------------ */
/* The layers, as the stage skeleton (stage_cuda.h) calls them               */

struct gpt_kind {
    typedef gpt_layouts layouts;

    static layouts layouts_of(const pp_model *m, int S, int s) { return gpt_layouts_of(m, S, s); }
    static pp_stage_frame frame_of(const layouts *y) { return gpt_frame_of(y); }

    template <typename W>
    static void embed_forward(const run *r, const layouts *y, const W *params,
                              const int32_t *tokens, float *x0)
    {
        cudaCheck(pp_cu_embedding_pos_forward(tokens, y->sh.B, y->sh.T, params + y->P.wte,
                                              params + y->P.wpe, y->sh.C, x0, r->st));
    }

    static void embed_backward(const run *r, const layouts *y, const int32_t *tokens,
                               const float *dx0, float *grads)
    {
        cudaCheck(pp_cu_embedding_pos_backward(tokens, y->sh.B, y->sh.T, dx0, y->sh.C, y->sh.V,
                                               grads + y->P.wte, grads + y->P.wpe, r->st));
    }

    template <typename W>
    static void block_forward(const run *r, const layouts *y, int l, const W *p, void *stash,
                              void *work, float *out)
    {
        gpt_layer_acts a = gpt_layer_acts_of(&y->L, stash, l);
        layer_forward(r, y, p, &a, work, out);
    }

    template <typename W>
    static void block_backward(const run *r, const layouts *y, int l, const W *p, float *g,
                               const void *stash, void *work, const float *dy, float *dx)
    {
        gpt_layer_acts a = gpt_layer_acts_of(&y->L, stash, l);
        layer_grads d = g ? layer_grads_work(&y->W, work, dy) : layer_grads_split(&y->L, stash, l);
        layer_backward(r, y, p, g, &a, &d, dy, work, dx);
    }

    static void block_weight(const run *r, const layouts *y, int l, float *g, const void *stash)
    {
        gpt_layer_acts a = gpt_layer_acts_of(&y->L, stash, l);
        layer_grads d = layer_grads_split(&y->L, stash, l);
        grads_mlp(r, y, g, &a, d.dy, d.dh, NULL, d.dln2);
        grads_attproj(r, y, g, &a, d.dres, NULL);
        grads_qkv(r, y, g, &a, d.dqkv, NULL, d.dln1);
    }

    template <typename W>
    static void head_forward(const run *r, const layouts *y, const W *params, const int32_t *tgt,
                             void *stash, void *work, float loss_scale)
    {
        ::head_forward(r, y, params, tgt, stash, work, loss_scale);
    }

    /* From the dlogits F stashed: dlnf = dlogits wlm (in the workspace, or
     * the split region for W), the head's weight gradients (fused), then
     * dx = LNf'(dlnf), which accumulates, so dx starts at 0. */
    template <typename W>
    static void head_backward(const run *r, const layouts *y, const W *params, float *grads,
                              const void *stash, void *work, float *dx)
    {
        const gpt_param_layout *P = &y->P;
        const gpt_stash_layout *L = &y->L;
        int BT = (int)y->BT, C = y->sh.C, V = y->sh.V;
        float *dlnf = grads ? at(work, y->W.dln) : at(stash, L->wdlnf);
        gemm_w(r, 0, 0, BT, C, V, at(stash, L->probs), params + P->wlm, 0.0f, dlnf);
        if (grads)
            head_weight_grads(r, y, grads, stash, dlnf);
        cudaCheck(cudaMemsetAsync(dx, 0, y->BT * (size_t)C * sizeof(float), r->st));
        cudaCheck(pp_cu_layernorm_backward(at(stash, L->xf), params + P->lnfw,
                                           at(stash, L->lnf_mean), at(stash, L->lnf_rstd), dlnf, BT,
                                           C, dx, NULL, NULL, r->st));
    }

    static void head_weight(const run *r, const layouts *y, float *grads, const void *stash)
    {
        head_weight_grads(r, y, grads, stash, at(stash, y->L.wdlnf));
    }
};

extern const pp_cuda_model_impl pp_cuda_model_gpt = {
    cuda_stage<gpt_kind>::forward_any, cuda_stage<gpt_kind>::backward_any,
    cuda_stage<gpt_kind>::backward_input_any, cuda_stage<gpt_kind>::backward_weight};
