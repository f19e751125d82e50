/* diag.c - printing diagnostics with source excerpts and carets. */
#include "diag.h"

#include <stdarg.h>
#include <string.h>

void diag_init(pp_diag *d, const char *file, const char *src, size_t len, FILE *out)
{
    d->file = file;
    d->src = src;
    d->len = len;
    d->errors = 0;
    d->warnings = 0;
    d->nomem = 0;
    d->out = out ? out : stderr;
    d->context = NULL;
}

/* Print line `line` (1-based) of the source and a caret line under columns
 * [c0, c1]. Columns are 1-based; a span that runs past the line is cut. */
static void excerpt(pp_diag *d, int line, int c0, int c1)
{
    const char *p = d->src, *end = d->src + d->len;
    for (int l = 1; l < line && p < end; l++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return;
        p = nl + 1;
    }
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    int n = (int)((eol ? eol : end) - p);
    fprintf(d->out, "%5d | %.*s\n      | ", line, n, p);
    if (c0 < 1)
        c0 = 1;
    if (c1 < c0)
        c1 = c0;
    for (int i = 1; i < c0; i++)
        fputc(i - 1 < n && p[i - 1] == '\t' ? '\t' : ' ', d->out);
    fputc('^', d->out);
    for (int i = c0 + 1; i <= c1 && i <= n; i++)
        fputc('~', d->out);
    fputc('\n', d->out);
}

static void report(pp_diag *d, pp_loc loc, const char *kind, const char *fmt, va_list ap)
{
    fprintf(d->out, "%s:%d:%d: %s: %s", d->file, loc.first_line, loc.first_column, kind,
            d->context ? d->context : "");
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    int c1 = loc.last_line == loc.first_line ? loc.last_column : loc.first_column;
    if (d->src && loc.first_line > 0)
        excerpt(d, loc.first_line, loc.first_column, c1);
}

void diag_error(pp_diag *d, pp_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(d, loc, "error", fmt, ap);
    va_end(ap);
    d->errors++;
}

void diag_warning(pp_diag *d, pp_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(d, loc, "warning", fmt, ap);
    va_end(ap);
    d->warnings++;
}

/* The byte offset of (line, col), both 1-based; len if it is past the end. */
static size_t offset_of(const pp_diag *d, int line, int col)
{
    size_t i = 0;
    for (int l = 1; l < line && i < d->len; i++)
        if (d->src[i] == '\n')
            l++;
    i += (size_t)(col > 0 ? col - 1 : 0);
    return i < d->len ? i : d->len;
}

void diag_span_text(const pp_diag *d, pp_loc loc, char *buf, size_t n)
{
    size_t k = 0;
    if (n == 0)
        return;
    if (d->src) {
        size_t a = offset_of(d, loc.first_line, loc.first_column);
        size_t b = offset_of(d, loc.last_line, loc.last_column + 1); /* last_column is inclusive */
        int space = 0;
        for (size_t i = a; i < b && k + 1 < n; i++) {
            char c = d->src[i];
            if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
                space = 1;
                continue;
            }
            if (space && k > 0 && k + 2 < n)
                buf[k++] = ' ';
            space = 0;
            buf[k++] = c;
        }
    }
    buf[k] = '\0';
}

void diag_note(pp_diag *d, pp_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(d, loc, "note", fmt, ap);
    va_end(ap);
}

/* "file: error: <prefix><message>", counted as an error. */
static void error_noloc(pp_diag *d, const char *prefix, const char *fmt, va_list ap)
{
    fprintf(d->out, "%s: error: %s", d->file, prefix);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    d->errors++;
}

void diag_error_noloc(pp_diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_noloc(d, "", fmt, ap);
    va_end(ap);
}

void diag_nomem(pp_diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_noloc(d, "out of memory ", fmt, ap);
    va_end(ap);
    d->nomem = 1;
}
