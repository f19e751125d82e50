/* tied.h - tied embeddings stored once (model tie = 1, gpt and llama).
 *
 * Stage 0's token embedding wte is the first tensor of its parameters and
 * stage S-1's head wlm the last of its (gpt_layout.h, llama_layout.h). A
 * rank that owns both stages keeps the tensor once: its weights for stage
 * S-1 stop where the head begins and run on into stage 0's, so the head IS
 * stage 0's wte (the fp32 weights and the bf16 compute copy alike), and
 * its optimizer state and step are stage 0's (stage S-1's optimizer state
 * and step cover only the part before its head, pp_stage_own_count).
 *
 * The gradients stay two: each stage accumulates its own over its
 * microbatches, and the plan adds the head's into the embedding's once
 * (StashTiedGrad of stage S-1 into a slot, AddTiedGrad of stage 0: g0 +
 * g1, no transfer), the order the reference sums them in. One accumulator
 * for both would sum the two stages' microbatches in the schedule's order,
 * which no reference can match bit for bit. Stage S-1's optimizer step
 * zeroes its head's gradients with the rest.
 *
 * Under tensor = T > 1 a worker keeps the two copies (and sums them into
 * both), as ranks that own one tied stage do. */
#ifndef PP_TIED_H
#define PP_TIED_H

#include <stddef.h>
#include <stdint.h>

#include "model_desc.h"
#include "plan.h"

/* Whether an owner of stage 0 (owns_first) and of stage S-1 (owns_last)
 * keeps the tied tensor once: tie = 1, S >= 2, tensor = 1 and both owned. */
int pp_tied_shared(const pp_model *m, int S, int owns_first, int owns_last);

/* The same for the rank a plan is for (its stage_role). */
int pp_plan_tied_shared(const pp_plan *p);

/* The floats of stage s's weights that a rank stores for it alone, given
 * whether it keeps the tied tensor once (shared): every parameter but, for
 * stage S-1, the head. Its optimizer state is pp_optimizer_state_floats
 * times as many, its bf16 compute copy as many elements; its gradients
 * are the whole stage's (pp_stage_param_count). */
size_t pp_stage_own_count(const pp_model *m, int S, int s, int shared);

/* What an owner stores for its stages outside the slots and workspace:
 * fp32 weights and gradients, the optimizer's state and (precision bf16)
 * the compute copy, the tied weights once (the one sum ppc's plan memory,
 * ppvm's allocation and its start-up memory check use). */
uint64_t pp_plan_owned_bytes(const pp_plan *p);

#endif
