/* memcheck.c - the memory a plan needs, compared with what the node has,
 * before anything is allocated (memcheck.h). */
#include "memcheck.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../isa/tied.h"
#include "../kernels/model.h"
#include "check.h"
#include "vm.h"

unsigned long long pp_memory_needed(const pp_plan *p)
{
    /* the same sum as interp.c's cpu_create (and compiler/plan_memory.c's
     * pp_plan_memory, which ppvm does not link) */
    unsigned long long bytes = (unsigned long long)pp_plan_workspaces(p) * p->workspace_bytes;
    for (uint32_t k = 0; k < p->nslots; k++)
        bytes += p->slot_bytes[k];
    return bytes + pp_plan_owned_bytes(p); /* the tied embedding once (isa/tied.h) */
}

/* The first number in file `path` (after `key`, when given); 0 when none. */
static unsigned long long read_number(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char line[256];
    unsigned long long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (!key || !strncmp(line, key, strlen(key))) {
            if (sscanf(line + (key ? strlen(key) : 0), "%llu", &v) != 1)
                v = 0;
            break;
        }
    if (f)
        fclose(f);
    return v;
}

unsigned long long pp_memory_available(void)
{
    unsigned long long avail = read_number("/proc/meminfo", "MemAvailable:") * 1024;
    if (!avail) {
        long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        avail = pages > 0 && size > 0 ? (unsigned long long)pages * (unsigned long long)size : 0;
    }
    /* a container's limit ("max" reads as no number: no limit) */
    unsigned long long max = read_number("/sys/fs/cgroup/memory.max", NULL);
    unsigned long long used = read_number("/sys/fs/cgroup/memory.current", NULL);
    if (max && max > used && (!avail || max - used < avail))
        avail = max - used;
    return avail;
}

int pp_memory_fits(const pp_run *run, const char *backend)
{
    MPI_Comm node;
    int me = run->me, local;
    unsigned long long mine = pp_memory_needed(run->p), need = 0, avail = 0;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &local));
    mpiCheck(MPI_Allreduce(&mine, &need, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, node));
    if (local == 0)
        avail = pp_memory_available();
    mpiCheck(MPI_Bcast(&avail, 1, MPI_UNSIGNED_LONG_LONG, 0, node));
    int nranks;
    mpiCheck(MPI_Comm_size(node, &nranks));
    mpiCheck(MPI_Comm_free(&node));
    /* the cuda backend's weights and slots are on the GPU; unknown: no check */
    int fits = strcmp(backend, "cpu") || !avail || need <= avail;
    char msg[512];
    snprintf(msg, sizeof msg,
             "the plan needs more memory than this node has: its %d rank%s would allocate %llu "
             "bytes at start-up (this rank %llu: the memory line's figure, ppc's plan memory), "
             "but %llu bytes are available (MemAvailable, or the cgroup's limit); the kernel "
             "would kill the run while it starts. Run fewer ranks per node, or a plan that "
             "needs less (more stages, fewer microbatches in flight, a smaller model)",
             nranks, nranks == 1 ? "" : "s", need, mine, avail);
    return pp_vm_all_ok(fits, me, msg);
}
