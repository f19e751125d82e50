/* alloc_count.c - an LD_PRELOAD library for the tests: counts the heap
 * allocations (malloc, calloc, realloc, aligned_alloc, posix_memalign,
 * memalign) that the program's own code makes, those whose caller is in
 * the executable's text (ppvm's or ppvm-standin's, the stand-in CUDA
 * runtime's cudaMalloc included), not in Open MPI, OpenBLAS or libc; at
 * exit it writes "alloc-count: rank R: N" (R from OMPI_COMM_WORLD_RANK) to
 * stderr. Two runs of one plan that differ only in their step count must
 * print the same N on every rank: nothing allocates inside a step (issue
 * 25). The allocations go to glibc's own __libc_* functions, so there is
 * no dlsym and no recursion. Not for sanitized programs (ASan replaces
 * malloc itself). */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static uintptr_t text_lo, text_hi; /* the executable's executable segment(s) */
static _Atomic long count;

static int find_text(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    /* the first object is the program itself */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
            if (!text_lo || lo < text_lo)
                text_lo = lo;
            if (hi > text_hi)
                text_hi = hi;
        }
    }
    return 1; /* stop after the program */
}

__attribute__((constructor)) static void start(void) { dl_iterate_phdr(find_text, NULL); }

__attribute__((destructor)) static void report(void)
{
    char line[128];
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    int n = snprintf(line, sizeof line, "alloc-count: rank %s: %ld\n", rank ? rank : "-",
                     atomic_load(&count));
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}

static inline void note(void *caller)
{
    uintptr_t a = (uintptr_t)caller;
    if (a >= text_lo && a < text_hi)
        atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
    note(__builtin_return_address(0));
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    note(__builtin_return_address(0));
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    note(__builtin_return_address(0));
    return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n)
{
    note(__builtin_return_address(0));
    return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    note(__builtin_return_address(0));
    return __libc_memalign(align, n);
}

int posix_memalign(void **p, size_t align, size_t n)
{
    note(__builtin_return_address(0));
    void *q = __libc_memalign(align, n);
    if (!q)
        return ENOMEM;
    *p = q;
    return 0;
}
