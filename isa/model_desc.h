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

#define PP_VOCAB 256

typedef struct {
    uint32_t context; /* bytes of context per sample */
    uint32_t embed;   /* embedding width per byte; hidden width D = context*embed */
    uint32_t ffn;     /* inner width of each residual MLP block */
    uint32_t blocks;  /* pre-LN residual MLP blocks per stage */
    uint32_t batch;   /* samples per microbatch */
} pp_model;

static inline uint32_t pp_model_width(const pp_model *m) { return m->context * m->embed; }

#endif
