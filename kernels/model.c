/* model.c - the demo model's pipeline stages on the CPU (see model.h):
 * parameter and stash sizes, FLOP counts, deterministic initialisation,
 * F(s,b), B(s,b) and plain SGD.
 *
 * Notation: B = batch, C = context, D = C * embed, F = ffn, V = 256,
 * nb = blocks per stage. Block k of a stage maps x_k -> x_{k+1}:
 *   h_k = x_k W1^T + b1        [B][F]
 *   a_k = gelu(h_k)            [B][F]
 *   x_{k+1} = x_k + a_k W2^T + b2
 *
 * Stash layout (byte offsets; every region starts at a multiple of 16 so the
 * float and int32 views stay aligned in a 16-byte aligned malloc'd stash):
 *   s == 0:        tokens   int32 [B][C+1]  copy of the loaded microbatch
 *   each block k:  x_k      float [B][D]    the block's input
 *                  h_k      float [B][F]    pre-GELU
 *                  a_k      float [B][F]    post-GELU
 *   s == S-1:      xh       float [B][D]    the head's input (= x_nb)
 *                  probs    float [B][V]    softmax output
 *                  targets  int32 [B]       the target bytes, compacted
 *   scratch (last in the stash, contents meaningless between calls):
 *   s == S-1:      logits   float [B][V]    logits in F, dlogits in B
 *   nb > 0:        dh       float [B][F]    da, then dh, of the current block
 *   always:        dx       float [B][D]    the running input gradient
 * The scratch lets F and B run without allocating in the step loop. B
 * therefore writes to the scratch part of the stash it receives as const:
 * the saved activations are never modified (B can be repeated on the same
 * stash and gives the same result), and a stash is B's alone while it runs.
 * The last block's output of a non-final stage goes straight to `out`: B
 * does not need it.
 *
 * A split backward (B then W, pp_stage_backward_input/_weight) needs a larger
 * stash, pp_stage_stash_bytes_split: after the above, what B leaves for W:
 *   each block k:  dy_k     float [B][D]    gradient at the block's output
 *                  dh_k     float [B][F]    gradient before GELU
 *   s == S-1:      dlogits  float [B][V]
 *   s == 0:        dx0      float [B][D]    gradient at the embedding's output
 * W then performs exactly the weight-gradient GEMMs the fused B performs,
 * with the same operands, so split and fused give the same bits. */
#include "model.h"

#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "model_layout.h"

size_t pp_stage_param_count(const pp_model *m, int S, int s) {
    shape sh = shape_of(m, S, s);
    return param_layout_of(&sh).total;
}

size_t pp_stage_stash_bytes(const pp_model *m, int S, int s) {
    shape sh = shape_of(m, S, s);
    return stash_layout_of(&sh).total;
}

size_t pp_stage_stash_bytes_split(const pp_model *m, int S, int s) {
    shape sh = shape_of(m, S, s);
    return stash_layout_of(&sh).total_split;
}

size_t pp_act_bytes(const pp_model *m) {
    return (size_t)m->batch * pp_model_width(m) * sizeof(float);
}

size_t pp_tokens_bytes(const pp_model *m) {
    return (size_t)m->batch * (m->context + 1) * sizeof(int32_t);
}

/* Only the GEMMs count; elementwise work is noise next to them. Backward
 * runs two GEMMs (input gradient and weight gradient) per forward GEMM. */
double pp_stage_flops(const pp_model *m, int S, int s, int backward) {
    shape sh = shape_of(m, S, s);
    double B = sh.B, D = sh.D, F = sh.F;
    double f = sh.nb * (2.0 * B * F * D + 2.0 * B * D * F);
    if (sh.last) f += 2.0 * B * PP_VOCAB * D;
    return backward ? 2.0 * f : f;
}

/* ------------------------------------------------------------------------ */
/* Initialisation: a counter-based generator, so element i of stage s is a
 * pure function of (seed, s, i) and ranks may initialise stages in any order
 * and still agree bit for bit. */

static uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1) from 24 random bits (exact in float). */
static float uniform_pm1(uint64_t stage_key, uint64_t i) {
    uint64_t z = splitmix64(stage_key ^ splitmix64(i));
    return (float)((double)(z >> 40) * 0x1p-23 - 1.0);
}

static void init_uniform(float *p, size_t off, size_t n, float scale, uint64_t key) {
    for (size_t i = off; i < off + n; i++) p[i] = scale * uniform_pm1(key, i);
}

/* Scales: linear weights U(-1,1)/sqrt(fan_in) keep activations O(1) at any
 * width. The embedding is U(-1,1), the same rule for a one-hot input
 * (fan_in 1); a 0.1 scale starved the head of signal and trained visibly
 * slower. W2 gets half its rule so the residual stream grows slowly with
 * depth. The head's 1/sqrt(D) keeps the initial logits small (std ~0.3), so
 * the loss starts near ln 256. Biases start at zero. */
void pp_stage_init(const pp_model *m, int S, int s, uint64_t seed, float *params) {
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    uint64_t key = splitmix64(seed ^ ((uint64_t)s * 0x9E3779B97F4A7C15ull));
    size_t D = (size_t)sh.D, F = (size_t)sh.F;

    memset(params, 0, P.total * sizeof *params);
    if (sh.first) init_uniform(params, P.E, (size_t)PP_VOCAB * (size_t)sh.E, 1.0f, key);
    for (int k = 0; k < sh.nb; k++) {
        size_t base = P.blocks + (size_t)k * P.block_stride;
        init_uniform(params, base + P.W1, F * D, 1.0f / sqrtf((float)D), key);
        init_uniform(params, base + P.W2, D * F, 0.5f / sqrtf((float)F), key);
    }
    if (sh.last) init_uniform(params, P.Wh, (size_t)PP_VOCAB * D, 1.0f / sqrtf((float)D), key);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

/* y = x + gelu(x W1^T + b1) W2^T + b2, saving h and a for the backward. */
static void block_forward(const shape *sh, const param_layout *P, const float *p,
                          const float *x, float *h, float *a, float *y) {
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm(0, 1, B, F, D, 1.0f, x, p + P->W1, 0.0f, h);
    pp_bias_add(h, p + P->b1, B, F);
    pp_gelu_forward(h, a, (size_t)B * F);
    memcpy(y, x, (size_t)B * D * sizeof *y); /* residual: accumulate onto x */
    pp_gemm(0, 1, B, D, F, 1.0f, a, p + P->W2, 1.0f, y);
    pp_bias_add(y, p + P->b2, B, D);
}

/* Where x_k lives: the stash for block inputs and the head's input; the
 * caller's `out` for the output of a non-final stage. */
static float *x_slot(const shape *sh, const stash_layout *L, char *st, float *out, int k) {
    if (k < sh->nb) return (float *)(st + L->blocks + (size_t)k * L->block_stride);
    return sh->last ? (float *)(st + L->xh) : out;
}

/* logits = x Wh^T + bh; returns the summed cross-entropy. */
static double head_forward(const shape *sh, const param_layout *P, const stash_layout *L,
                           const float *params, const int32_t *tgt, char *st) {
    int B = sh->B, D = sh->D;
    float *logits = (float *)(st + L->logits);
    int32_t *targets = (int32_t *)(st + L->targets);
    for (int r = 0; r < B; r++) targets[r] = tgt[(size_t)r * (sh->C + 1) + sh->C];
    pp_gemm(0, 1, B, PP_VOCAB, D, 1.0f, (const float *)(st + L->xh), params + P->Wh, 0.0f,
            logits);
    pp_bias_add(logits, params + P->bh, B, PP_VOCAB);
    return pp_softmax_xent_forward(logits, targets, 1, B, PP_VOCAB, (float *)(st + L->probs));
}

double pp_stage_forward(const pp_model *m, int S, int s, const float *params, const void *in,
                        const int32_t *tgt, void *stash, float *out) {
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    stash_layout L = stash_layout_of(&sh);
    char *st = stash;

    float *x0 = x_slot(&sh, &L, st, out, 0);
    if (sh.first) {
        int32_t *tokens = (int32_t *)(st + L.tokens);
        memcpy(tokens, in, pp_tokens_bytes(m));
        pp_embedding_forward(tokens, sh.B, sh.C, params + P.E, sh.E, x0);
    } else {
        memmove(x0, in, pp_act_bytes(m)); /* memmove: in may be out when nb == 0 */
    }
    for (int k = 0; k < sh.nb; k++) {
        char *blk = st + L.blocks + (size_t)k * L.block_stride;
        block_forward(&sh, &P, params + P.blocks + (size_t)k * P.block_stride,
                      x_slot(&sh, &L, st, out, k), (float *)(blk + L.h), (float *)(blk + L.a),
                      x_slot(&sh, &L, st, out, k + 1));
    }
    return sh.last ? head_forward(&sh, &P, &L, params, tgt, st) : 0.0;
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

/* Stash regions saved by the forward, read-only here. */
static const float *saved(const void *stash, size_t off) {
    return (const float *)((const char *)stash + off);
}

/* The reverse of block_forward, in three parts so that a split backward can
 * run the weight part later: dh = (dy W2) * gelu'(h); the weight gradients
 * from dy and dh; dx = dy + dh W1. dx may be dy's buffer: the fused order
 * consumes dy before writing dx. */
static void block_dh(const shape *sh, const param_layout *P, const float *p, const float *h,
                     const float *dy, float *dh) {
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm(0, 0, B, F, D, 1.0f, dy, p + P->W2, 0.0f, dh); /* da = dy W2 */
    pp_gelu_backward(h, dh, dh, (size_t)B * F);           /* dh = da * gelu'(h) */
}

static void block_weight_grads(const shape *sh, const param_layout *P, float *g, const float *x,
                               const float *a, const float *dy, const float *dh) {
    int B = sh->B, D = sh->D, F = sh->F;
    pp_gemm(1, 0, D, F, B, 1.0f, dy, a, 1.0f, g + P->W2); /* dW2 += dy^T a */
    pp_bias_grad(dy, B, D, g + P->b2);
    pp_gemm(1, 0, F, D, B, 1.0f, dh, x, 1.0f, g + P->W1); /* dW1 += dh^T x */
    pp_bias_grad(dh, B, F, g + P->b1);
}

static void block_dx(const shape *sh, const param_layout *P, const float *p, const float *dy,
                     const float *dh, float *dx) {
    int B = sh->B, D = sh->D, F = sh->F;
    if (dx != dy) memcpy(dx, dy, (size_t)B * D * sizeof *dx); /* residual path */
    pp_gemm(0, 0, B, D, F, 1.0f, dh, p + P->W1, 1.0f, dx);  /* dx = dy + dh W1 */
}

/* dlogits = (probs - onehot) * loss_scale. */
static void head_dlogits(const shape *sh, const stash_layout *L, const void *stash,
                         float loss_scale, float *dlogits) {
    const int32_t *targets = (const int32_t *)((const char *)stash + L->targets);
    pp_softmax_xent_backward(saved(stash, L->probs), targets, 1, sh->B, PP_VOCAB, loss_scale,
                             dlogits);
}

static void head_weight_grads(const shape *sh, const param_layout *P, const stash_layout *L,
                              float *grads, const void *stash, const float *dlogits) {
    int B = sh->B, D = sh->D;
    pp_gemm(1, 0, PP_VOCAB, D, B, 1.0f, dlogits, saved(stash, L->xh), 1.0f, grads + P->Wh);
    pp_bias_grad(dlogits, B, PP_VOCAB, grads + P->bh);
}

static void head_dx(const shape *sh, const param_layout *P, const float *params,
                    const float *dlogits, float *dx) {
    pp_gemm(0, 0, sh->B, sh->D, PP_VOCAB, 1.0f, dlogits, params + P->Wh, 0.0f, dx);
}

/* The backward walk, fused (weights is non-NULL: weight gradients as it goes)
 * or as the input half of a split backward (weights NULL: dy, dh, dlogits and
 * the embedding's gradient are saved in the stash's split region for W). */
static void backward_walk(const pp_model *m, int S, int s, const float *params, float *grads,
                          const void *stash, const float *dout, float *din, float loss_scale) {
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    stash_layout L = stash_layout_of(&sh);
    /* The scratch and split tails of the stash are writable by contract. */
    char *st = (char *)(uintptr_t)stash;
    float *dx = (float *)(st + L.dx);
    size_t xbytes = (size_t)sh.B * sh.D * sizeof(float);

    /* The running gradient w.r.t. the current point of the stage. The very
     * last input gradient of a non-first stage is written straight to din. */
    const float *dy = dout;
    if (sh.last) {
        float *dlogits = (float *)(st + (grads ? L.logits : L.wdlogits));
        float *dst = (sh.nb == 0 && !sh.first) ? din : dx;
        head_dlogits(&sh, &L, stash, loss_scale, dlogits);
        if (grads) head_weight_grads(&sh, &P, &L, grads, stash, dlogits);
        head_dx(&sh, &P, params, dlogits, dst);
        dy = dst;
    }
    for (int k = sh.nb - 1; k >= 0; k--) {
        size_t blk = L.blocks + (size_t)k * L.block_stride;
        size_t wblk = L.wblocks + (size_t)k * L.wblock_stride;
        size_t pk = P.blocks + (size_t)k * P.block_stride;
        float *dst = (k == 0 && !sh.first) ? din : dx;
        float *dh = (float *)(st + (grads ? L.dh : wblk + L.wdh));
        block_dh(&sh, &P, params + pk, saved(stash, blk + L.h), dy, dh);
        if (grads)
            block_weight_grads(&sh, &P, grads + pk, saved(stash, blk), saved(stash, blk + L.a),
                               dy, dh);
        else
            memcpy(st + wblk, dy, xbytes); /* dy_k, before dx may overwrite it */
        block_dx(&sh, &P, params + pk, dy, dh, dst);
        dy = dst;
    }
    if (sh.first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L.tokens);
        if (grads)
            pp_embedding_backward(tokens, sh.B, sh.C, dy, sh.E, grads + P.E);
        else
            memcpy(st + L.wdx0, dy, xbytes);
    } else if (dy != din) {
        /* A middle stage without blocks is the identity. */
        memmove(din, dy, pp_act_bytes(m));
    }
}

void pp_stage_backward(const pp_model *m, int S, int s, const float *params, float *grads,
                       const void *stash, const float *dout, float *din, float loss_scale) {
    backward_walk(m, S, s, params, grads, stash, dout, din, loss_scale);
}

void pp_stage_backward_input(const pp_model *m, int S, int s, const float *params,
                             const void *stash, const float *dout, float *din,
                             float loss_scale) {
    backward_walk(m, S, s, params, NULL, stash, dout, din, loss_scale);
}

void pp_stage_backward_weight(const pp_model *m, int S, int s, float *grads, const void *stash) {
    shape sh = shape_of(m, S, s);
    param_layout P = param_layout_of(&sh);
    stash_layout L = stash_layout_of(&sh);
    if (sh.last) head_weight_grads(&sh, &P, &L, grads, stash, saved(stash, L.wdlogits));
    for (int k = sh.nb - 1; k >= 0; k--) {
        size_t blk = L.blocks + (size_t)k * L.block_stride;
        size_t wblk = L.wblocks + (size_t)k * L.wblock_stride;
        size_t pk = P.blocks + (size_t)k * P.block_stride;
        block_weight_grads(&sh, &P, grads + pk, saved(stash, blk), saved(stash, blk + L.a),
                           saved(stash, wblk), saved(stash, wblk + L.wdh));
    }
    if (sh.first) {
        const int32_t *tokens = (const int32_t *)((const char *)stash + L.tokens);
        pp_embedding_backward(tokens, sh.B, sh.C, saved(stash, L.wdx0), sh.E, grads + P.E);
    }
}

/* ------------------------------------------------------------------------ */

pp_optim pp_optim_defaults(uint32_t optimizer) {
    if (optimizer == PP_OPT_ADAMW)
        return (pp_optim){.lr = 4e-3f, .weight_decay = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                          .eps = 1e-8f};
    return (pp_optim){.lr = 0.3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
}

void pp_optimizer_step(uint32_t optimizer, const pp_optim *o, float *p, float *g, float *state,
                       size_t n, int t) {
    if (optimizer == PP_OPT_ADAMW)
        pp_adamw_step(p, g, state, state + n, n, t, o->lr, o->beta1, o->beta2, o->eps,
                      o->weight_decay);
    else
        pp_sgd_step(p, g, n, o->lr);
}

void pp_sgd_step(float *p, float *g, size_t n, float lr) {
    for (size_t i = 0; i < n; i++) {
        p[i] -= lr * g[i];
        g[i] = 0.0f;
    }
}
