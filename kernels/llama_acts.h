/* llama_acts.h: one Llama layer's activations in a stash, as typed pointers.
 *
 * The view llama.c (CPU) and llama_cuda.cu (CUDA) both read, so the two
 * sides cannot disagree on where a region lies or which regions are `act`
 * regions (void *: float, or with bf16 the bf16 values the GEMMs and the
 * attention consume; isa/llama_layout.h says which and why). Plain C that
 * also compiles as C++ (nvcc), like gpt_acts.h. */
#ifndef PP_LLAMA_ACTS_H
#define PP_LLAMA_ACTS_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/llama_layout.h"

/* Layer l's activations in the stash: written by F, read by B and W. */
typedef struct {
    float *x;
    void *n1;
    float *n1_rstd;
    void *qkv, *atty;
    float *lse, *res;
    void *n2;
    float *n2_rstd;
    void *gu, *h;
} llama_layer_acts;

static inline llama_layer_acts llama_layer_acts_of(const llama_stash_layout *L, const void *stash,
                                                   int l)
{
    char *p = (char *)(uintptr_t)stash + L->layers + (size_t)l * L->layer_stride;
    llama_layer_acts a = {(float *)(void *)p,
                          p + L->n1,
                          (float *)(void *)(p + L->n1_rstd),
                          p + L->qkv,
                          p + L->atty,
                          (float *)(void *)(p + L->lse),
                          (float *)(void *)(p + L->res),
                          p + L->n2,
                          (float *)(void *)(p + L->n2_rstd),
                          p + L->gu,
                          p + L->h};
    return a;
}

#endif
