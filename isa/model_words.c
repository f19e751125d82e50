/* model_words.c - a model in words (model_words.h). */
#include "model_words.h"

#include <stdio.h>

/* Appends to buf[*at..n), keeping *at the length it would have. */
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int k_ = snprintf(buf + (*at < n ? *at : n - 1), *at < n ? n - *at : 1, __VA_ARGS__);      \
        *at += k_ > 0 ? (size_t)k_ : 0;                                                            \
    } while (0)

static void words(const pp_model *m, long long S, char *buf, size_t n, size_t *at)
{
    int gpt = m->kind != PP_MODEL_MLP; /* a transformer: its blocks are layers */
    if (m->kind == PP_MODEL_LLAMA)
        PUT("llama vocab %u context %u embed %u heads %u kv_heads %u ffn %u batch %u", m->vocab,
            m->context, m->embed, m->heads, m->kv_heads, m->ffn, m->batch);
    else if (gpt)
        PUT("gpt vocab %u context %u embed %u heads %u ffn %u batch %u", m->vocab, m->context,
            m->embed, m->heads, m->ffn, m->batch);
    else
        PUT("mlp context %u embed %u ffn %u batch %u", m->context, m->embed, m->ffn, m->batch);
    /* the stages are part of the model: a stage's blocks, and a cost per
     * stage, are per stage */
    PUT(", %lld stages of ", S);
    int uniform = 1; /* a plan lists every stage's blocks; a schedule only those that differ */
    for (long long s = 1; m->layers && s < S; s++)
        uniform &= m->layers[s] == m->layers[0];
    uint32_t each = m->layers && S > 0 ? m->layers[0] : m->blocks;
    if (m->layers && !uniform) {
        for (long long s = 0; s < S; s++)
            PUT("%s%u", s ? "," : "", m->layers[s]);
        PUT(gpt ? " layers" : " blocks");
    } else
        PUT("%u %s", each,
            gpt ? (each == 1 ? "layer" : "layers") : (each == 1 ? "block" : "blocks"));
    PUT(", %s, %s", m->optimizer == PP_OPT_ADAMW ? "adamw" : "sgd",
        m->precision == PP_PREC_BF16 ? "bf16" : "fp32");
}

int pp_model_words(const pp_model *m, long long S, char *buf, size_t n)
{
    if (!n)
        return -1;
    size_t at = 0;
    buf[0] = '\0';
    words(m, S, buf, n, &at);
    return (int)at;
}
