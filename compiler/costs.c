/* costs.c - measured costs from a JSON file (see costs.h), read with json.c
 * and checked against exactly the shape costs.h documents. */
#include "costs.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "readfile.h"

enum { KEY_F, KEY_B, KEY_W, KEY_O, KEY_LATENCY, KEY_BANDWIDTH, NKEYS };
static const char *const key_names[NKEYS] = {"F", "B", "W", "O", "latency", "bandwidth"};

typedef struct {
    const char *name; /* the file, for messages */
    char *err;
    size_t errlen;
} ctx;

static int bad(const ctx *x, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "name:LINE:COL: <fmt>"; returns -1. */
static int bad(const ctx *x, int line, int col, const char *fmt, ...)
{
    if (x->errlen == 0)
        return -1;
    int n = snprintf(x->err, x->errlen, "%s:%d:%d: ", x->name, line, col);
    if (n >= 0 && (size_t)n < x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A key as a quoted C-like string for messages: printable ASCII as is,
 * anything else as \xNN, cut at 32 bytes. */
static const char *quote(const char *s, size_t len, char out[160])
{
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < len && i < 32; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c >= 0x20 && c < 0x7f) {
            out[o++] = (char)c;
        } else {
            o += (size_t)snprintf(out + o, 5, "\\x%02x", c);
        }
    }
    if (len > 32) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

static int key_index(const pp_json *m)
{
    for (int k = 0; k < NKEYS; k++)
        if (m->key_len == strlen(key_names[k]) && memcmp(m->key, key_names[k], m->key_len) == 0)
            return k;
    return -1;
}

/* One cost: a finite number, positive for a job (F, B, W), >= 0 for an
 * optimizer step (O: a stage without weights has next to nothing to do).
 * `what` names it in messages. */
static int read_cost(const ctx *x, const pp_json *v, const char *what, int zero_ok, double *out)
{
    if (v->kind != PP_JSON_NUMBER)
        return bad(x, v->line, v->col, "expected a number for %s, found %s", what,
                   pp_json_kind_name(v->kind));
    if (!isfinite(v->number))
        return bad(x, v->line, v->col,
                   "expected a finite number for %s, found one too large for a double", what);
    if (zero_ok ? !(v->number >= 0) : !(v->number > 0))
        return bad(x, v->line, v->col, "expected a %s cost for %s, found %g",
                   zero_ok ? "non-negative" : "positive", what, v->number);
    *out = v->number;
    return 0;
}

/* "F", "B", "W" or "O": a number for every stage, or a non-empty array of them. */
static int read_dir(const ctx *x, pp_costs *c, int d, const pp_json *v)
{
    char what[32];
    if (v->kind == PP_JSON_NUMBER) {
        if (!(c->dir[d] = malloc(sizeof *c->dir[d])))
            goto nomem;
        c->n[d] = 1;
        snprintf(what, sizeof what, "\"%s\"", key_names[d]);
        return read_cost(x, v, what, d == KEY_O, &c->dir[d][0]);
    }
    if (v->kind != PP_JSON_ARRAY)
        return bad(x, v->line, v->col,
                   "expected a number or an array of numbers for \"%s\", found %s", key_names[d],
                   pp_json_kind_name(v->kind));
    if (v->n == 0)
        return bad(x, v->line, v->col,
                   "expected a number or a non-empty array of numbers for \"%s\", found an empty "
                   "array",
                   key_names[d]);
    if (v->n > INT_MAX)
        return bad(x, v->line, v->col, "expected at most %d costs for \"%s\", found %zu", INT_MAX,
                   key_names[d], v->n);
    if (!(c->dir[d] = malloc(v->n * sizeof *c->dir[d])))
        goto nomem;
    c->n[d] = (int)v->n;
    for (size_t i = 0; i < v->n; i++) {
        snprintf(what, sizeof what, "\"%s\"[%zu]", key_names[d], i);
        if (read_cost(x, &v->child[i], what, d == KEY_O, &c->dir[d][i]) != 0)
            return -1;
    }
    return 0;
nomem:
    if (x->errlen)
        snprintf(x->err, x->errlen, "%s: out of memory", x->name);
    return -1;
}

/* "latency" or "bandwidth": a finite number >= 0. */
static int read_nonneg(const ctx *x, const char *key, const pp_json *v, double *out)
{
    if (v->kind != PP_JSON_NUMBER)
        return bad(x, v->line, v->col, "expected a number for \"%s\", found %s", key,
                   pp_json_kind_name(v->kind));
    if (!isfinite(v->number))
        return bad(x, v->line, v->col,
                   "expected a finite number for \"%s\", found one too large for a double", key);
    if (!(v->number >= 0))
        return bad(x, v->line, v->col, "expected a number >= 0 for \"%s\", found %g", key,
                   v->number);
    *out = v->number;
    return 0;
}

int pp_costs_parse(pp_costs *c, const char *name, const char *text, size_t len, char *err,
                   size_t errlen)
{
    ctx x = {name ? name : "<costs>", err, errlen};
    pp_json *root = NULL;
    const pp_json *seen[NKEYS] = {NULL};
    char q[160];
    int rc = -1;
    memset(c, 0, sizeof *c);
    if (errlen)
        err[0] = '\0';
    if (pp_json_parse(&root, x.name, text, len, err, errlen) != PP_JSON_OK)
        goto out;
    if (root->kind != PP_JSON_OBJECT) {
        bad(&x, root->line, root->col, "expected an object at the top level, found %s",
            pp_json_kind_name(root->kind));
        goto out;
    }
    for (size_t i = 0; i < root->n; i++) {
        const pp_json *m = &root->child[i];
        int k = key_index(m);
        if (k < 0) {
            bad(&x, m->key_line, m->key_col,
                "unknown key %s: expected \"F\", \"B\", \"W\", \"O\", \"latency\" or "
                "\"bandwidth\"",
                quote(m->key, m->key_len, q));
            goto out;
        }
        if (seen[k]) {
            bad(&x, m->key_line, m->key_col, "duplicate key \"%s\" (first given at %d:%d)",
                key_names[k], seen[k]->key_line, seen[k]->key_col);
            goto out;
        }
        seen[k] = m;
        if (k == KEY_LATENCY) {
            if (read_nonneg(&x, key_names[k], m, &c->latency) != 0)
                goto out;
            c->has_latency = 1;
        } else if (k == KEY_BANDWIDTH) {
            if (read_nonneg(&x, key_names[k], m, &c->bandwidth) != 0)
                goto out;
            c->has_bandwidth = 1;
        } else if (read_dir(&x, c, k, m) != 0) {
            goto out;
        }
    }
    rc = 0;
out:
    pp_json_free(root);
    if (rc != 0)
        pp_costs_free(c);
    return rc;
}

int pp_costs_load(pp_costs *c, const char *path, char *err, size_t errlen)
{
    const char *failed = "read";
    size_t len = 0;
    memset(c, 0, sizeof *c);
    if (errlen)
        err[0] = '\0';
    char *buf = pp_read_file(path, &len, &failed);
    if (!buf) {
        if (errlen)
            snprintf(err, errlen, "%s: cannot %s: %s", path, failed, strerror(errno));
        return -1;
    }
    int rc = pp_costs_parse(c, path, buf, len, err, errlen);
    free(buf);
    return rc;
}

void pp_costs_free(pp_costs *c)
{
    for (int d = 0; d < 4; d++)
        free(c->dir[d]);
    memset(c, 0, sizeof *c);
}
