/* model_desc.h - the model description carried in every plan file.
 *
 * Two kinds of model (`kind`), each a language model over `vocab` tokens:
 *
 * mlp (the demo model, `model { ... }`): a window of `context` bytes is
 * embedded (each byte to `embed` floats, concatenated, so the hidden width
 * is D = context * embed), passed through pre-LN residual MLP blocks
 * (y = x + W2 gelu(W1 LN(x) + b1) + b2, inner width `ffn`), and the last
 * stage applies a final layer norm, projects to 256 logits and computes
 * softmax cross-entropy against the byte that follows the window. vocab is
 * always 256. One prediction per sample.
 *
 * gpt (`model gpt { ... }`): GPT-2 as llm.c writes it. Token and learned
 * position embeddings on stage 0; pre-LN transformer layers (causal
 * multi-head self-attention with `heads` heads, then an MLP of width `ffn`);
 * on the last stage a final layer norm and an untied vocabulary head.
 * `context` predictions per sample (every position's next token).
 *
 * Either way a stage's number of blocks (mlp) or layers (gpt) is
 * pp_model_layers(m, s): the schedule may make it depend on s.
 * Every rank and the compiler derive all shapes and byte counts from this. */
#ifndef PP_MODEL_DESC_H
#define PP_MODEL_DESC_H

#include <stdint.h>
#include <string.h>

#define PP_VOCAB 256            /* the mlp model's vocabulary: bytes */
#define PP_MAX_VOCAB (1u << 20) /* gpt: GPT-2's 50257 and more; tokens fit an int32 */
#define PP_MAX_LAYERS 1024u     /* blocks or layers of one stage */
/* ... and of all stages together: ppc's most stages (2^20) times
 * PP_MAX_LAYERS, which an int holds (gpt_init's Ltotal). */
#define PP_MAX_TOTAL_LAYERS ((uint64_t)PP_MAX_LAYERS << 20)
/* The other fields' ranges, which ppc enforces and the plan reader checks
 * again (a plan file is input like any other): within them every size the
 * model layouts compute fits a size_t with room to spare. */
#define PP_MAX_CONTEXT 4096u
#define PP_MAX_EMBED 65536u
#define PP_MAX_HEADS 4096u
#define PP_MAX_FFN (1u << 20)
#define PP_MAX_BATCH (1u << 20)
/* The kernels count the elements of one activation tensor in an int (and
 * pass its rows to the GEMMs as an int), so the widest one must stay below
 * 2^31: see pp_model_widest_elems. */
#define PP_MAX_TENSOR_ELEMS 2147483647ull

typedef enum {
    PP_MODEL_MLP = 0,
    PP_MODEL_GPT = 1,
    PP_MODEL_LLAMA = 2,
    PP_MODEL_COUNT
} pp_model_kind;

/* The llama kind's defaults (model_desc.h's fields below): Llama's rotary
 * base and RMSNorm epsilon. */
#define PP_LLAMA_ROPE_THETA 10000u
#define PP_LLAMA_NORM_EPS 1e-5f

typedef struct {
    uint32_t kind;      /* pp_model_kind */
    uint32_t vocab;     /* tokens; 256 (bytes) for mlp */
    uint32_t context;   /* tokens of context per sample */
    uint32_t embed;     /* mlp: width per byte (D = context*embed); gpt: the model width */
    uint32_t heads;     /* gpt: attention heads (embed % heads == 0); mlp: 0 */
    uint32_t ffn;       /* inner width of each MLP */
    uint32_t blocks;    /* blocks (mlp) or layers (gpt) of every stage, when layers is NULL */
    uint32_t batch;     /* samples per microbatch */
    uint32_t optimizer; /* pp_optimizer: what OptimizerStep runs, and the state owners keep */
    uint32_t precision; /* pp_precision: the arithmetic of the GEMMs and the weights jobs read */
    /* Tensor-parallel ranks per worker (`tensor = T`, issue 27): each
     * stage's split layers are cut T ways (pp_model_tensor; 0 reads as 1). */
    uint32_t tensor;
    /* llama only (0 for the other kinds; plan format 8 carries them): */
    uint32_t kv_heads;   /* key/value heads, dividing heads (grouped-query attention) */
    uint32_t rope_theta; /* the rotary embeddings' base */
    float norm_eps;      /* RMSNorm's epsilon */
    uint32_t tie;        /* gpt, llama: 1 = the head is the token embedding (tied) */
    /* [S] blocks or layers of each stage, or NULL: every stage has `blocks`.
     * Owned by whoever filled it (a pp_plan, a pp_schedule); copies of a
     * pp_model share it. */
    uint32_t *layers;
    /* gpt and llama, one rank's shard under tensor = T (isa/tensor.h's pp_model_shard):
     * the attention's inner width, embed / T, its heads being heads / T; 0
     * (every whole model, and every plan's) means embed. Not in the plan
     * file: derived from embed and tensor. */
    uint32_t attn;
} pp_model;

/* Blocks (mlp) or transformer layers (gpt) of stage s. */
static inline uint32_t pp_model_layers(const pp_model *m, int s)
{
    return m->layers ? m->layers[s] : m->blocks;
}

/* The tensor-parallel degree T: 1 unless the schedule says `tensor = T`. */
static inline uint32_t pp_model_tensor(const pp_model *m) { return m->tensor > 1 ? m->tensor : 1; }

/* The most tensor-parallel ranks per worker ppc accepts. */
#define PP_MAX_TENSOR 64u

/* Floats per sample of the activations between stages: context*embed for
 * both kinds (mlp: the concatenated window; gpt: [context][embed]). */
static inline uint32_t pp_model_width(const pp_model *m) { return m->context * m->embed; }

/* The vocabulary: 256 for mlp (its vocab field is not read), else vocab. */
static inline uint32_t pp_model_vocab(const pp_model *m)
{
    return m->kind == PP_MODEL_MLP ? PP_VOCAB : m->vocab;
}

/* Next-token predictions per sample, over which the loss is averaged. */
static inline uint32_t pp_model_predictions(const pp_model *m)
{
    return m->kind == PP_MODEL_MLP ? 1 : m->context;
}

/* Elements of the model's widest activation tensor of one microbatch:
 * gpt: batch*context rows of max(3*embed, ffn, vocab) (qkv, the MLP's
 * hidden layer, the logits); mlp: batch rows of max(context*embed, ffn,
 * 256). At most PP_MAX_TENSOR_ELEMS for a model to be run. Fields within
 * the PP_MAX_* ranges cannot overflow the uint64 arithmetic. */
static inline uint64_t pp_model_widest_elems(const pp_model *m)
{
    uint64_t rows, w;
    if (m->kind != PP_MODEL_MLP) { /* gpt, llama: the rows of qkv, the MLP, the logits */
        rows = (uint64_t)m->batch * m->context;
        w = 3 * (uint64_t)m->embed;
        if (m->kind == PP_MODEL_LLAMA && w < 2 * (uint64_t)m->ffn)
            w = 2 * (uint64_t)m->ffn;
        if (w < m->ffn)
            w = m->ffn;
        if (w < m->vocab)
            w = m->vocab;
    } else {
        rows = m->batch;
        w = (uint64_t)m->context * m->embed;
        if (w < m->ffn)
            w = m->ffn;
        if (w < PP_VOCAB)
            w = PP_VOCAB;
    }
    return rows * w;
}

static inline const char *pp_model_kind_name(uint32_t kind)
{
    return kind == PP_MODEL_MLP     ? "mlp"
           : kind == PP_MODEL_GPT   ? "gpt"
           : kind == PP_MODEL_LLAMA ? "llama"
                                    : "unknown";
}

/* The pp_model_kind a name (as in `model gpt { ... }`) stands for, or -1. */
static inline int pp_model_kind_parse(const char *name)
{
    for (int k = 0; k < PP_MODEL_COUNT; k++)
        if (!strcmp(name, pp_model_kind_name((uint32_t)k)))
            return k;
    return -1;
}

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
