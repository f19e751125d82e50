/* gpt_acts.h: one GPT layer's activations in a stash, as typed pointers.
 *
 * The view gpt.c (CPU) and gpt_cuda.cu (CUDA) both read, so the two sides
 * cannot disagree on where a region lies or which regions are `act`
 * regions (void *: float, or with bf16 the bf16 values the GEMMs consumed;
 * isa/gpt_layout.h says which and why). Plain C that also compiles as C++
 * (nvcc), like the layout header it reads. */
#ifndef PP_GPT_ACTS_H
#define PP_GPT_ACTS_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/gpt_layout.h"

/* Layer l's activations in the stash: written by F, read by B and W. */
typedef struct {
    float *x;
    void *ln1;
    float *ln1_mean, *ln1_rstd;
    void *qkv, *atty;
    float *lse, *res;
    void *ln2;
    float *ln2_mean, *ln2_rstd;
    void *fch, *fcg;
} gpt_layer_acts;

static inline gpt_layer_acts gpt_layer_acts_of(const gpt_stash_layout *L, const void *stash, int l)
{
    char *p = (char *)(uintptr_t)stash + L->layers + (size_t)l * L->layer_stride;
    gpt_layer_acts a = {(float *)(void *)p,
                        p + L->ln1,
                        (float *)(void *)(p + L->ln1_mean),
                        (float *)(void *)(p + L->ln1_rstd),
                        p + L->qkv,
                        p + L->atty,
                        (float *)(void *)(p + L->lse),
                        (float *)(void *)(p + L->res),
                        p + L->ln2,
                        (float *)(void *)(p + L->ln2_mean),
                        (float *)(void *)(p + L->ln2_rstd),
                        p + L->fch,
                        p + L->fcg};
    return a;
}

#endif
