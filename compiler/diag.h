/* diag.h - compiler diagnostics: "file:line:col: error: message", the source
 * line, and a caret under the offending columns (as jq and gcc print them).
 * Errors are counted, not fatal, so one run reports all of a file's errors. */
#ifndef PP_DIAG_H
#define PP_DIAG_H

#include <stddef.h>
#include <stdio.h>

#include "ast.h"

typedef struct {
    const char *file; /* name shown in messages */
    const char *src;  /* the whole source text (NUL-terminated) */
    size_t len;
    int errors;
    int warnings; /* printed as "warning:", not counted in errors: the compile goes on */
    int nomem;    /* one of the errors was running out of memory (not the schedule's fault) */
    FILE *out;    /* where messages go (stderr, or a memstream in tests) */
    /* Said after "error: " (or "note: "...) in every message with a source
     * position, e.g. "search line: " for a file's `# search:` line; NULL =
     * nothing. */
    const char *context;
} pp_diag;

void diag_init(pp_diag *d, const char *file, const char *src, size_t len, FILE *out);
void diag_error(pp_diag *d, pp_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(pp_diag *d, pp_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "file:line:col: warning: ...": something in the schedule that has no
 * effect. The compile still succeeds; d->warnings counts them. */
void diag_warning(pp_diag *d, pp_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The source text of loc's span (first to last column, across lines), with
 * every run of white space made one space, into buf (cut to n - 1 bytes). */
void diag_span_text(const pp_diag *d, pp_loc loc, char *buf, size_t n);
/* An error with no source position (a -D flag, a whole-schedule property). */
void diag_error_noloc(pp_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "file: error: out of memory <what>": an error that is the machine's, not
 * the schedule's; sets d->nomem so that the caller can say so (ppc exits 4). */
void diag_nomem(pp_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
