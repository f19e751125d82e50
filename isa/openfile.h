/* openfile.h - opening an input file (a plan, a data file, a weights file)
 * only when it is a regular file, without ever blocking.
 *
 * fopen of a FIFO blocks until a writer opens it, and reading a directory,
 * a FIFO or a device gives an error or never ends, so every reader of an
 * input file opens it through pp_open_regular: O_NONBLOCK (a FIFO's open
 * returns at once), fstat on the descriptor (no race with a rename), and
 * anything but a regular file refused with what it is. Header-only so that
 * ppc, ppvm and the tests need no new object file. */
#ifndef PP_OPENFILE_H
#define PP_OPENFILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a file that is not regular is, for messages: "a directory", "a
 * FIFO (named pipe)", ... */
static inline const char *pp_file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return S_ISREG(mode) ? "a regular file" : "not a regular file";
}

/* Opens path for binary reading. Returns the stream, or NULL with either
 * *not_regular set to what the file is (pp_file_kind) or, when the open or
 * fstat failed, *not_regular NULL and errno saying why. *size: the file's
 * size in bytes. */
static inline FILE *pp_open_regular(const char *path, const char **not_regular, long long *size)
{
    *not_regular = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    int flags;
    if (fstat(fd, &st) || (flags = fcntl(fd, F_GETFL)) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        *not_regular = pp_file_kind(st.st_mode);
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    FILE *f = NULL;
    if (fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0)
        f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    *size = (long long)st.st_size;
    return f;
}

#endif
