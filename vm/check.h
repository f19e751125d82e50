/* check.h - error macros for the VM: print file:line and what failed, then
 * exit (as llm.c's cudaCheck does). Inside a step there is nothing sensible
 * to recover to, and a clean message beats a hang. */
#ifndef PP_VM_CHECK_H
#define PP_VM_CHECK_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static inline void mpi_check(int rc, const char *what, const char *file, int line)
{
    if (rc == MPI_SUCCESS)
        return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "ppvm: [%s:%d] %s failed: %s\n", file, line, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
#define mpiCheck(call) mpi_check((call), #call, __FILE__, __LINE__)

#endif
