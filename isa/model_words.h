/* model_words.h - a model in words, one line: what a costs file was
 * measured on (ppvm --profile writes it, ppc --costs checks it) and what
 * ppc --search compares candidates by. */
#ifndef PP_MODEL_WORDS_H
#define PP_MODEL_WORDS_H

#include <stddef.h>

#include "model_desc.h"

/* "mlp context 8 embed 16 ffn 256 batch 16, 4 stages of 1 block, sgd,
 * fp32" (gpt: "gpt vocab V context C embed E heads H ffn F batch N, ..."),
 * the stages' blocks (layers) listed one by one when they differ. Writes
 * at most n bytes with the NUL; returns the length it needed (snprintf's
 * rule), or -1 when n is 0. */
int pp_model_words(const pp_model *m, long long S, char *buf, size_t n);

#endif
