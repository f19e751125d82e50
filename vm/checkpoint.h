/* checkpoint.h - ppvm's checkpoints (--checkpoint-dir, --checkpoint-every,
 * --checkpoint-keep) and --resume (vm/checkpoint.c; vm/README.md,
 * "Checkpoints").
 *
 * DIR/step-<NNNNNN>/ holds the state after NNNNNN steps, per stage (not
 * per rank): stage<s>.w (fp32 weights), stage<s>.opt (the optimizer's
 * state, AdamW only) and stage<s>.bf16 (the compute copy, precision bf16
 * only), each a stage file of vm/weights.h written by the stage's
 * lowest-ranked owner; then `manifest`, written last by rank 0 once every
 * rank has said its files are written and synced. A step directory without
 * a manifest is incomplete and never resumed from. */
#ifndef PP_VM_CHECKPOINT_H
#define PP_VM_CHECKPOINT_H

#include "backend.h"

/* Collective, before the first step (after --resume): the checkpoint
 * directory exists and is writable on every rank, and holds no complete
 * checkpoint past run->done unless the run resumed from it (its first
 * checkpoint would prune that). 0, or -1 on every rank (the lowest failing
 * rank says why). */
int pp_checkpoint_prepare(const pp_run *run);

/* Collective, between steps (the driver calls it after every N-th step;
 * anything that stops all ranks at a step boundary may call it too, with
 * run->done the steps completed): writes the state after run->done steps to
 * opts->checkpoint_dir, then removes the checkpoints beyond
 * opts->checkpoint_keep. 0, or -1 on every rank (the lowest failing rank
 * says why; the previous checkpoints are then untouched). */
int pp_checkpoint_write(const pp_run *run, const pp_backend *be, void *st);

/* Collective, after the backend's connect: restores the newest complete
 * checkpoint in opts->resume that this plan can use, and sets run->done to
 * its step. A checkpoint that cannot be used (no manifest, a missing,
 * truncated or corrupt file, a file that does not match the manifest,
 * another plan id without --reshard, another model, seed or data) is named
 * with why, and the one before it is tried. 0, or -1 on every rank when
 * none can be used (said). */
int pp_checkpoint_resume(pp_run *run, const pp_backend *be, void *st);

/* Test hook: PPVM_TEST_KILL="RANK:STEP:WHERE" makes rank RANK kill itself
 * (SIGKILL) at WHERE = "step" (before step STEP, counted from 1, runs) or
 * "checkpoint" (while writing the checkpoint after STEP steps: its stage
 * files written, its manifest not). WHERE "step-stall" or "checkpoint-stall"
 * makes it hang there instead, and "load-stall" (STEP 0) while it reads its
 * plan and data at start-up: until the watchdog ends it, or a SIGTERM or
 * SIGINT lets it go on. Does nothing without the variable. */
void pp_checkpoint_test_kill(const pp_run *run, const char *where, int step);

#endif
