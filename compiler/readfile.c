/* readfile.c - see readfile.h. */
#include "readfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../isa/openfile.h"

char *pp_read_file(const char *path, size_t *len, const char **failed)
{
    const char *step = "open";
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    const char *kind;
    long long size;
    FILE *f = pp_open_regular(path, &kind, &size); /* never blocks on a FIFO */
    if (!f) {
        if (kind) { /* a directory, a FIFO, a device: said by what it is */
            step = kind;
            errno = 0;
        }
        goto fail;
    }
    do {
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap = cap ? 2 * cap : 4096);
            if (!b) {
                step = "allocate memory for";
                errno = ENOMEM;
                goto fail;
            }
            buf = b;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    if (ferror(f)) {
        step = "read";
        goto fail;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
fail:
    if (f) {
        int e = errno;
        fclose(f);
        errno = e;
    }
    free(buf);
    if (failed)
        *failed = step;
    return NULL;
}
