/* model_desc.h - the model description carried in every plan file.
 *
 * The demo model is a character-level language model: a window of `context`
 * bytes is embedded (each byte to `embed` floats, concatenated, so the hidden
 * width is D = context * embed), passed through `blocks` pre-LN residual MLP
 * blocks per stage (y = x + W2 gelu(W1 LN(x) + b1) + b2, inner width `ffn`,
 * LN a layer norm over D with its own gamma and beta), and the last stage
 * applies a final layer norm, projects to 256 logits and computes softmax
 * cross-entropy against the byte that follows the window. Stage 0 also holds
 * the embedding table.
 * Every rank and the compiler derive all shapes and byte counts from this. */
#ifndef PP_MODEL_DESC_H
#define PP_MODEL_DESC_H

#include <stdint.h>
#include <string.h>

#define PP_VOCAB 256

typedef struct {
    uint32_t context; /* bytes of context per sample */
    uint32_t embed;   /* embedding width per byte; hidden width D = context*embed */
    uint32_t ffn;     /* inner width of each residual MLP block */
    uint32_t blocks;  /* pre-LN residual MLP blocks per stage */
    uint32_t batch;   /* samples per microbatch */
    uint32_t optimizer; /* pp_optimizer: what OptimizerStep runs, and the state owners keep */
    uint32_t precision; /* pp_precision: the arithmetic of the GEMMs and the weights jobs read */
} pp_model;

static inline uint32_t pp_model_width(const pp_model *m) { return m->context * m->embed; }

/* The optimizer is part of the plan because its state is memory the owners
 * of a stage hold, which the compiler accounts for. */
typedef enum { PP_OPT_SGD = 0, PP_OPT_ADAMW = 1, PP_OPT_COUNT } pp_optimizer;

static inline const char *pp_optimizer_name(uint32_t opt)
{
    return opt == PP_OPT_SGD ? "sgd" : opt == PP_OPT_ADAMW ? "adamw" : "unknown";
}

/* The pp_optimizer a name (as in `optimizer adamw`) stands for, or -1. */
static inline int pp_optimizer_parse(const char *name)
{
    for (int o = 0; o < PP_OPT_COUNT; o++)
        if (!strcmp(name, pp_optimizer_name((uint32_t)o)))
            return o;
    return -1;
}

/* Floats of optimizer state per weight: none for SGD, AdamW's two moments. */
static inline uint32_t pp_optimizer_state_floats(uint32_t opt)
{
    return opt == PP_OPT_ADAMW ? 2 : 0;
}

/* The precision of a run. fp32: everything in fp32. bf16 (mixed precision
 * with fp32 master weights): owners keep the fp32 weights, gradients and
 * optimizer state, plus a bf16 copy of the weights, refreshed by every
 * optimizer step, that every job computes with and that fetches move (half
 * the bytes). GEMMs round their operands to bf16 and accumulate in fp32;
 * activations, gradients and everything else stay fp32. */
typedef enum { PP_PREC_FP32 = 0, PP_PREC_BF16 = 1, PP_PREC_COUNT } pp_precision;

static inline const char *pp_precision_name(uint32_t prec)
{
    return prec == PP_PREC_FP32 ? "fp32" : prec == PP_PREC_BF16 ? "bf16" : "unknown";
}

/* The pp_precision a name (as in `precision bf16`) stands for, or -1. */
static inline int pp_precision_parse(const char *name)
{
    for (int q = 0; q < PP_PREC_COUNT; q++)
        if (!strcmp(name, pp_precision_name((uint32_t)q)))
            return q;
    return -1;
}

/* Bytes per weight of the copy jobs compute with: 4, or 2 for bf16. */
static inline uint32_t pp_precision_weight_bytes(uint32_t prec)
{
    return prec == PP_PREC_BF16 ? 2 : 4;
}

#endif
