/* vmerror.c - ppvm's one message style on stderr (pp_vm_error) and the
 * collective that has the ranks agree on a local failure (pp_vm_all_ok),
 * declared in vm.h. A file of their own, below the driver, the checkpoints,
 * the profile and the backends that all call them, so that none of those
 * depends on another through them. */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>

#include "check.h"
#include "vm.h"

void pp_vm_error(int rank, const char *fmt, ...)
{
    char msg[4608];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rank >= 0)
        fprintf(stderr, "ppvm: rank %d: %s\n", rank, msg);
    else
        fprintf(stderr, "ppvm: %s\n", msg);
}

int pp_vm_all_ok(int ok, int me, const char *msg)
{
    int size, first, mine;
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    mine = ok ? size : me;
    mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == me)
        pp_vm_error(me, "%s", msg);
    return first == size;
}
