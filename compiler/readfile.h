/* readfile.h - a whole file into memory, for the compiler's inputs (the
 * schedule, --costs, the --table library) and the tests. */
#ifndef PP_READFILE_H
#define PP_READFILE_H

#include <stddef.h>

/* Returns the file's bytes, NUL-terminated (len excludes the NUL), or NULL
 * with errno set and *failed (if not NULL) naming the step that failed:
 * "open", "read" or "allocate memory for". A path that is not a regular
 * file (a directory, a FIFO, a device: opened without blocking and not
 * read) returns NULL with errno 0 and *failed saying what it is, e.g. "a
 * FIFO (named pipe)" (pp_file_kind). The caller frees. */
char *pp_read_file(const char *path, size_t *len, const char **failed);

#endif
