/* costs_backend.h - `ppc --backend cpu|cuda`: the backend the plans are
 * meant to run on (ppvm --backend). A --costs profile records the backend
 * it was measured on ("backend", ppvm --profile); one of another backend
 * gets a warning naming both, and the compile goes on (a profile of one
 * backend is still the best guess there is for the other's order of jobs,
 * though not for their times). */
#ifndef PP_COSTS_BACKEND_H
#define PP_COSTS_BACKEND_H

#include <stdio.h>

/* 1 for a backend ppc knows (cpu, cuda), else 0. */
int pp_backend_known(const char *name);

/* Loads costs_path and, when its "backend" is not backend, prints one
 * warning line to err. Returns 1 when it warned, 0 when not (no "backend"
 * in the file, the same one, or the file unreadable: the compile then says
 * why). */
int pp_costs_backend_warn(const char *costs_path, const char *backend, FILE *err);

#endif
