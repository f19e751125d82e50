/* memcheck.h - a plan that the machine's memory cannot hold is refused
 * before anything is allocated (vm/memcheck.c; issue 25).
 *
 * The cpu backend allocates everything up front (the memory line's
 * figure: its stages' weights, gradients, optimizer state and bf16 copies,
 * its slots and workspace). On Linux malloc rarely fails: a plan larger
 * than the machine is instead killed by the kernel's OOM killer while it
 * starts, with no message. So the ranks of each node add up what their
 * plans will allocate and compare it with what the node has available
 * (MemAvailable in /proc/meminfo, and the cgroup's limit when one is set). */
#ifndef PP_VM_MEMCHECK_H
#define PP_VM_MEMCHECK_H

#include "backend.h"

/* What the cpu backend will allocate at start-up for this rank's plan
 * (vm/interp.c's `allocated`, less --deterministic's partial sums). */
unsigned long long pp_memory_needed(const pp_plan *p);

/* Bytes this machine can still give a process without swapping or the OOM
 * killer (MemAvailable, the cgroup's memory.max less memory.current when
 * lower); 0 when unknown. */
unsigned long long pp_memory_available(void);

/* Collective, before the backend allocates (cpu backend only: the cuda
 * backend's memory is the GPU's): 1 when the ranks of every node fit in
 * its available memory; else 0 on every rank, the lowest rank of a node
 * that does not fit saying how much its ranks need and the node has. */
int pp_memory_fits(const pp_run *run, const char *backend);

#endif
