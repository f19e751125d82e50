/* ckpt_tied.h - a checkpoint of a tied model (model tie = 1) holds the
 * tied embedding once: in stage 0's files (its token embedding, the first
 * tensor of each of its vectors). Stage S-1's files stop before its head
 * (its last tensor): its weights, each optimizer moment and its bf16 copy.
 * The files are the same whichever ranks own the stages (isa/tied.h: one
 * copy or two), so --reshard moves a checkpoint between plans that keep
 * the tied weights once and plans that keep two copies. Resuming stage S-1
 * puts stage 0's embedding back as its head (both copies are equal while
 * training: they step on the same summed gradient). */
#ifndef PP_VM_CKPT_TIED_H
#define PP_VM_CKPT_TIED_H

#include <stddef.h>
#include <stdint.h>

#include "../isa/model_desc.h"

/* The elements each vector of stage s's files leaves out: the head's
 * (vocab x embed) for stage S-1 of a tied model of S >= 2 stages, else 0. */
uint64_t pp_ckpt_tied_cut(const pp_model *m, int S, int s);

/* Before writing stage s: the optimizer state `opt` of k moments of n
 * elements each, moved together to k moments of n - cut (the weights and
 * the bf16 copy are cut by writing their first n - cut elements). */
void pp_ckpt_tied_pack(float *opt, size_t k, size_t n, size_t cut);

/* After reading stage S-1: each of its vectors (k of them in `opt`, of
 * elem bytes each) grows by `cut` elements, the first `cut` of the same
 * vector of stage 0's file (n0 elements per vector). *data is replaced by
 * a malloc'd array of k * (n + cut) elements (n: its own per vector).
 * 0, or -1 out of memory. */
int pp_ckpt_tied_unpack(void **data, const void *first, size_t k, size_t n, size_t n0, size_t cut,
                        size_t elem);

#endif
