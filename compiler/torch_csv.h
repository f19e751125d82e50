/* torch_csv.h - ppc --emit torch-csv: a schedule's per-worker job order as
 * the CSV that PyTorch's pipeline runtime loads
 * (torch.distributed.pipelining.schedules._PipelineScheduleRuntime._load_csv,
 * format "compute_only"; torchtitan's pipeline_parallel_schedule_csv).
 *
 * One row per worker r (= pipeline rank r), its jobs in the order pp's
 * simulator runs them (the order its plan runs them), one action per cell,
 * no empty cells, no header:
 *     cell := STAGE ("F" | "B" | "I" | "W") MICROBATCH       e.g. 2F0, 0I7
 * F is a forward; B a full backward (no `split backward`); with `split
 * backward` pp's B is PyTorch's I (backward input) and pp's W its W
 * (backward weight). Stages and microbatches are pp's numbers, which are
 * PyTorch's global stage and microbatch indices. An overlapped pair
 * (`overlap F with B when ...`) is one cell in PyTorch's OVERLAP_F_B form,
 * its two actions in pp's order:
 *     cell := "(" ACTION ";" ACTION ")OVERLAP_F_B"            e.g. (7F1;7B0)OVERLAP_F_B
 * PyTorch's runtime runs the two one after the other, as pp's cpu backend does.
 *
 * PyTorch's runtime places each stage on exactly one rank, which holds its
 * weights; schedules that do otherwise are refused (pp_torch_csv_check). */
#ifndef PP_TORCH_CSV_H
#define PP_TORCH_CSV_H

#include <stddef.h>
#include <stdio.h>

#include "jobtable.h"
#include "sim.h"

/* Whether the schedule can be written: 0 if so; otherwise 1, with one
 * line in why[0..n) naming the first reason (a recomputed forward, R jobs,
 * replicated weights, a job computing away from its stage's weights, a
 * worker without jobs); -1 out of memory. */
int pp_torch_csv_check(const pp_jobtable *t, char *why, size_t n);

/* Job j's cell, e.g. "3I5", into buf[0..n); returns its length as snprintf does. */
int pp_torch_csv_action(const pp_jobtable *t, int j, char *buf, size_t n);

/* Writes the rows (t must pass pp_torch_csv_check). Returns 0, or -1 when
 * a write failed (errno says why). */
int pp_torch_csv_write(FILE *f, const pp_jobtable *t, const pp_sim_result *sim);

#endif
