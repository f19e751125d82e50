/* costs.c - measured costs from a JSON file (see costs.h). jansson parses
 * it (syntax errors, duplicate keys and numbers too large for a double are
 * its messages, with its line and column); this file checks the tree
 * against exactly the shape costs.h documents. jansson keeps no positions
 * in the tree, so for a value this file rejects, locate() walks the text,
 * which jansson has already accepted, to the value's first character. */
#include "costs.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "readfile.h"

enum {
    KEY_F,
    KEY_B,
    KEY_W,
    KEY_O,
    KEY_G,
    KEY_LATENCY,
    KEY_BANDWIDTH,
    KEY_UNIT,
    KEY_OVERLAP,
    KEY_MEASURED,
    KEY_CORES,
    KEY_TENSOR_LATENCY,
    KEY_TENSOR_BANDWIDTH,
    KEY_HOST_BANDWIDTH,
    /* what ppvm --profile measured on (issue 29): not costs */
    KEY_MODEL,
    KEY_BACKEND,
    KEY_RANKS_PER_CORE,
    KEY_BURST, /* issue 29: the link's token bucket, the all-reduce's algorithm */
    KEY_ALLREDUCE,
    KEY_DUPLEX,
    KEY_ALLREDUCE_LATENCY, /* the data-parallel all-reduce as measured */
    KEY_ALLREDUCE_BANDWIDTH,
    KEY_ALLREDUCE_RANKS,
    KEY_PROGRESS,     /* whether transfers move while their receiver computes */
    KEY_JOB_OVERHEAD, /* the interpreter's own time per job */
    KEY_WAKE,         /* how late a waiting worker resumes */
    NKEYS
};
_Static_assert(KEY_O == PP_COSTS_O && KEY_G == PP_COSTS_G, "dir[] is indexed by these keys");
/* clang-format off */
static const char *const key_names[NKEYS] = {
    "F", "B", "W", "O", "G", "latency", "bandwidth", "unit", "overlap", "measured", "cores",
    "tensor_latency", "tensor_bandwidth", "host_bandwidth", "model", "backend", "ranks_per_core",
    "burst", "allreduce", "duplex", "allreduce_latency", "allreduce_bandwidth", "allreduce_ranks",
    "progress", "job_overhead", "wake"};
/* clang-format on */

/* "expected \"F\", \"B\", ... or \"job_overhead\"": every key, for the
 * message about one that is none of them. */
static void expected_keys(char *out, size_t len)
{
    size_t at = (size_t)snprintf(out, len, "expected");
    for (int k = 0; k < NKEYS && at < len; k++)
        at += (size_t)snprintf(out + at, len - at, "%s \"%s\"",
                               k == 0           ? ""
                               : k == NKEYS - 1 ? " or"
                                                : ",",
                               key_names[k]);
}

/* The units "unit" may name, and microseconds in each (trace.json's). */
static const struct {
    const char *name;
    double us;
} units[] = {{"s", 1e6}, {"ms", 1e3}, {"us", 1}, {"ns", 1e-3}};

double pp_costs_unit_us(const char *unit)
{
    for (size_t i = 0; unit && i < sizeof units / sizeof *units; i++)
        if (!strcmp(unit, units[i].name))
            return units[i].us;
    return 0;
}

/* Every number a double (a large integer too); one value at the top, which
 * must then be an object (said in this file's words, not jansson's). */
#define LOAD_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL)

typedef struct {
    const char *name; /* the file, for messages */
    const char *text; /* what jansson parsed (after any byte order mark) */
    size_t len;
    char *err;
    size_t errlen;
} ctx;

/* -------------------------------------------------------------- positions */

static size_t skip_ws(const ctx *x, size_t at)
{
    if (at > x->len)
        return x->len;
    while (at < x->len && (x->text[at] == ' ' || x->text[at] == '\t' || x->text[at] == '\r' ||
                           x->text[at] == '\n'))
        at++;
    return at;
}

/* Past the value starting at `at` (jansson measures it), then past the
 * whitespace after it. The text parsed already, so the value does too. */
static size_t skip_value(const ctx *x, size_t at, json_t **value)
{
    json_error_t e;
    json_t *v = json_loadb(x->text + at, x->len - at, LOAD_FLAGS | JSON_DISABLE_EOF_CHECK, &e);
    if (value)
        *value = v;
    else
        json_decref(v);
    return skip_ws(x, at + (v ? (size_t)e.position : 0));
}

/* Where the top-level value starts (key NULL), or the key (key_only) or
 * value of the member `key` of the top-level object, or element `index`
 * (>= 0) of that value: a byte offset into x->text. The member and the
 * element exist (the caller has them from jansson's tree); the bounds
 * checks only make sure a mistake cannot read past the text. */
static size_t locate(const ctx *x, const char *key, int key_only, long index)
{
    size_t at = skip_ws(x, 0);
    if (!key)
        return at;
    at = skip_ws(x, at + 1); /* '{' */
    for (;;) {
        if (at >= x->len)
            return x->len;
        json_t *k;
        size_t key_at = at;
        at = skip_value(x, at, &k);
        int found = json_is_string(k) && strcmp(json_string_value(k), key) == 0;
        json_decref(k);
        at = skip_ws(x, at + 1); /* ':' */
        if (found && key_only)
            return key_at;
        if (found)
            break;
        at = skip_ws(x, skip_value(x, at, NULL) + 1); /* ',' */
    }
    if (index < 0)
        return at;
    at = skip_ws(x, at + 1); /* '[' */
    for (long i = 0; i < index && at < x->len; i++)
        at = skip_ws(x, skip_value(x, at, NULL) + 1); /* ',' */
    return at;
}

/* "name:LINE:COL: <fmt>" for the value (or key) at `at`, columns counted in
 * characters as jansson counts them; returns -1. */
static int bad(const ctx *x, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(const ctx *x, size_t at, const char *fmt, ...)
{
    if (x->errlen == 0)
        return -1;
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < x->len; i++) {
        unsigned char c = (unsigned char)x->text[i];
        if (c == '\n') {
            line++;
            col = 1;
        } else if ((c & 0xC0) != 0x80) { /* not a UTF-8 continuation byte */
            col++;
        }
    }
    int n = snprintf(x->err, x->errlen, "%s:%d:%d: ", x->name, line, col);
    if (n >= 0 && (size_t)n < x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int nomem(const ctx *x)
{
    if (x->errlen)
        snprintf(x->err, x->errlen, "%s: out of memory", x->name);
    return -1;
}

/* --------------------------------------------------------------- the shape */

static const char *kind_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* A key as a quoted C-like string for messages: printable ASCII as is,
 * anything else as \xNN, cut at 32 bytes. */
static const char *quote(const char *s, char out[160])
{
    size_t o = 0, len = strlen(s);
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

/* One cost, element `index` of key d's array (-1: d's value itself): a
 * number (jansson has rejected any too large for a double), positive for a
 * job (F, B, W), >= 0 for an optimizer step (O: a stage without weights has
 * next to nothing to do). */
static int read_cost(const ctx *x, const json_t *v, int d, long index, double *out)
{
    char what[48];
    if (index < 0)
        snprintf(what, sizeof what, "\"%s\"", key_names[d]);
    else
        snprintf(what, sizeof what, "\"%s\"[%ld]", key_names[d], index);
    if (!json_is_number(v))
        return bad(x, locate(x, key_names[d], 0, index), "expected a number for %s, found %s", what,
                   kind_name(v));
    double c = json_number_value(v);
    int zero_ok = d == KEY_O || d == KEY_G;
    if (zero_ok ? !(c >= 0) : !(c > 0))
        return bad(x, locate(x, key_names[d], 0, index), "expected a %s cost for %s, found %g",
                   zero_ok ? "non-negative" : "positive", what, c);
    *out = c;
    return 0;
}

/* "F", "B", "W", "O" or "G": a number for every stage, or a non-empty array of them. */
static int read_dir(const ctx *x, pp_costs *c, int d, const json_t *v)
{
    if (json_is_number(v)) {
        if (!(c->dir[d] = malloc(sizeof *c->dir[d])))
            return nomem(x);
        c->n[d] = 1;
        return read_cost(x, v, d, -1, &c->dir[d][0]);
    }
    if (!json_is_array(v))
        return bad(x, locate(x, key_names[d], 0, -1),
                   "expected a number or an array of numbers for \"%s\", found %s", key_names[d],
                   kind_name(v));
    size_t n = json_array_size(v);
    if (n == 0)
        return bad(x, locate(x, key_names[d], 0, -1),
                   "expected a number or a non-empty array of numbers for \"%s\", found an empty "
                   "array",
                   key_names[d]);
    if (n > INT_MAX)
        return bad(x, locate(x, key_names[d], 0, -1),
                   "expected at most %d costs for \"%s\", found %zu", INT_MAX, key_names[d], n);
    if (!(c->dir[d] = malloc(n * sizeof *c->dir[d])))
        return nomem(x);
    c->n[d] = (int)n;
    for (size_t i = 0; i < n; i++)
        if (read_cost(x, json_array_get(v, i), d, (long)i, &c->dir[d][i]) != 0)
            return -1;
    return 0;
}

/* "unit": one of units[] (the name kept is the table's, a static string). */
static int read_unit(const ctx *x, const json_t *v, const char **out)
{
    char q[160];
    if (!json_is_string(v))
        return bad(x, locate(x, key_names[KEY_UNIT], 0, -1),
                   "expected \"s\", \"ms\", \"us\" or \"ns\" for \"unit\", found %s", kind_name(v));
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(json_string_value(v), units[i].name)) {
            *out = units[i].name;
            return 0;
        }
    return bad(x, locate(x, key_names[KEY_UNIT], 0, -1),
               "expected \"s\", \"ms\", \"us\" or \"ns\" for \"unit\", found %s",
               quote(json_string_value(v), q));
}

/* "latency" or "bandwidth": a number >= 0. */
static int read_nonneg(const ctx *x, int k, const json_t *v, double *out)
{
    if (!json_is_number(v))
        return bad(x, locate(x, key_names[k], 0, -1), "expected a number for \"%s\", found %s",
                   key_names[k], kind_name(v));
    if (!(json_number_value(v) >= 0))
        return bad(x, locate(x, key_names[k], 0, -1), "expected a number >= 0 for \"%s\", found %g",
                   key_names[k], json_number_value(v));
    *out = json_number_value(v);
    return 0;
}

/* "cores" and "allreduce_ranks": a whole number of what it counts in
 * [least, INT_MAX] (1.0 is one; 1.5 is not). */
static int read_whole(const ctx *x, int k, const json_t *v, int least, const char *what, int *out)
{
    double n = json_is_number(v) ? json_number_value(v) : 0;
    if (!json_is_number(v))
        return bad(x, locate(x, key_names[k], 0, -1),
                   "expected a whole number of %s for \"%s\", found %s", what, key_names[k],
                   kind_name(v));
    if (!(n >= least && n <= INT_MAX && n == (double)(long long)n))
        return bad(x, locate(x, key_names[k], 0, -1),
                   "expected a whole number of %s in [%d, %d] for \"%s\", found %g", what, least,
                   INT_MAX, key_names[k], n);
    *out = (int)n;
    return 0;
}

/* The keys that take one of two words: the word for 0 (the default) and
 * the word for 1, and the flag they set. */
static const struct {
    int key;
    const char *no, *yes;
    size_t flag; /* offsetof the int in pp_costs */
} two_words[] = {
    {KEY_ALLREDUCE, "ring", "tree", offsetof(pp_costs, allreduce_tree)},
    {KEY_DUPLEX, "full", "half", offsetof(pp_costs, half_duplex)},
    {KEY_PROGRESS, "always", "wait", offsetof(pp_costs, recv_waits)},
};

static int read_word(const ctx *x, int k, const json_t *v, pp_costs *c)
{
    size_t i = 0;
    while (two_words[i].key != k)
        i++;
    char q[160];
    const char *a = json_is_string(v) ? json_string_value(v) : NULL, *no = two_words[i].no,
               *yes = two_words[i].yes;
    if (!a || (strcmp(a, no) && strcmp(a, yes)))
        return bad(x, locate(x, key_names[k], 0, -1),
                   "expected \"%s\" or \"%s\" for \"%s\", found %s", no, yes, key_names[k],
                   a ? quote(a, q) : kind_name(v));
    *(int *)((char *)c + two_words[i].flag) = !strcmp(a, yes);
    return 0;
}

/* "model" and "backend": a non-empty string, kept (caller frees). */
static int read_words(const ctx *x, int k, const json_t *v, char **out)
{
    if (!json_is_string(v) || !json_string_length(v))
        return bad(x, locate(x, key_names[k], 0, -1),
                   "expected a non-empty string (what ppvm --profile measured on) for \"%s\", "
                   "found %s",
                   key_names[k], json_is_string(v) ? "an empty string" : kind_name(v));
    if (!(*out = strdup(json_string_value(v)))) {
        nomem(x);
        return -1;
    }
    return 0;
}

int pp_costs_parse(pp_costs *c, const char *name, const char *text, size_t len, char *err,
                   size_t errlen)
{
    ctx x = {name ? name : "<costs>", text ? text : "", text ? len : 0, err, errlen};
    char q[160];
    int rc = -1;
    memset(c, 0, sizeof *c);
    if (errlen)
        err[0] = '\0';
    /* RFC 8259 lets a parser skip a UTF-8 byte order mark; jansson does not */
    if (x.len >= 3 && memcmp(x.text, "\xef\xbb\xbf", 3) == 0) {
        x.text += 3;
        x.len -= 3;
    }
    json_error_t e;
    json_t *root = json_loadb(x.text, x.len, LOAD_FLAGS, &e);
    if (!root) {
        if (errlen && json_error_code(&e) == json_error_out_of_memory)
            nomem(&x);
        else if (errlen)
            snprintf(err, errlen, "%s:%d:%d: %s", x.name, e.line, e.column, e.text);
        return -1;
    }
    if (!json_is_object(root)) {
        bad(&x, locate(&x, NULL, 0, -1), "expected an object at the top level, found %s",
            kind_name(root));
        goto out;
    }
    const char *key;
    json_t *v;
    unsigned char seen[NKEYS] = {0};
    json_object_foreach(root, key, v)
    { /* in the file's order (jansson keeps it) */
        int k = 0;
        while (k < NKEYS && strcmp(key, key_names[k]) != 0)
            k++;
        if (k == NKEYS) {
            char keys[512];
            expected_keys(keys, sizeof keys);
            bad(&x, locate(&x, key, 1, -1), "unknown key %s: %s", quote(key, q), keys);
            goto out;
        }
        if (k == KEY_MODEL || k == KEY_BACKEND) {
            if (read_words(&x, k, v, k == KEY_MODEL ? &c->model : &c->backend) != 0)
                goto out;
        } else if (k == KEY_RANKS_PER_CORE) {
            if (read_nonneg(&x, k, v, &c->ranks_per_core) != 0)
                goto out;
            if (!(c->ranks_per_core > 0)) {
                bad(&x, locate(&x, key_names[k], 0, -1),
                    "expected a number > 0 for \"ranks_per_core\", found %g", c->ranks_per_core);
                goto out;
            }
            c->has_ranks_per_core = 1;
        } else if (k == KEY_CORES) {
            if (read_whole(&x, k, v, 1, "cores", &c->cores) != 0)
                goto out;
            c->has_cores = 1;
        } else if (k == KEY_MEASURED) { /* ppvm --profile's record of the run: not a cost */
            if (!json_is_object(v)) {
                bad(&x, locate(&x, key_names[k], 0, -1),
                    "expected an object (ppvm --profile's record of the run) for \"measured\", "
                    "found %s",
                    kind_name(v));
                goto out;
            }
        } else if (k == KEY_UNIT) {
            if (read_unit(&x, v, &c->unit) != 0)
                goto out;
        } else if (k == KEY_LATENCY) {
            if (read_nonneg(&x, k, v, &c->latency) != 0)
                goto out;
            c->has_latency = 1;
        } else if (k == KEY_TENSOR_LATENCY) {
            if (read_nonneg(&x, k, v, &c->tensor_latency) != 0)
                goto out;
            c->has_tensor_latency = 1;
        } else if (k == KEY_TENSOR_BANDWIDTH) {
            if (read_nonneg(&x, k, v, &c->tensor_bandwidth) != 0)
                goto out;
            c->has_tensor_bandwidth = 1;
        } else if (k == KEY_BANDWIDTH) {
            if (read_nonneg(&x, k, v, &c->bandwidth) != 0)
                goto out;
            c->has_bandwidth = 1;
        } else if (k == KEY_ALLREDUCE || k == KEY_DUPLEX || k == KEY_PROGRESS) {
            if (read_word(&x, k, v, c) != 0)
                goto out;
        } else if (k == KEY_ALLREDUCE_LATENCY || k == KEY_ALLREDUCE_BANDWIDTH) {
            if (read_nonneg(&x, k, v,
                            k == KEY_ALLREDUCE_LATENCY ? &c->allreduce_latency
                                                       : &c->allreduce_bandwidth) != 0)
                goto out;
            seen[k] = 1;
        } else if (k == KEY_ALLREDUCE_RANKS) {
            if (read_whole(&x, k, v, 2, "ranks", &c->allreduce_ranks) != 0)
                goto out;
            seen[k] = 1;
        } else if (k == KEY_BURST) {
            if (read_nonneg(&x, k, v, &c->burst) != 0)
                goto out;
            c->has_burst = 1;
        } else if (k == KEY_WAKE) {
            if (read_nonneg(&x, k, v, &c->wake) != 0)
                goto out;
            c->has_wake = 1;
        } else if (k == KEY_JOB_OVERHEAD) {
            if (read_nonneg(&x, k, v, &c->job_overhead) != 0)
                goto out;
            c->has_job_overhead = 1;
        } else if (k == KEY_HOST_BANDWIDTH) {
            if (read_nonneg(&x, k, v, &c->host_bandwidth) != 0)
                goto out;
            c->has_host_bandwidth = 1;
        } else if (k == KEY_OVERLAP) {
            if (read_nonneg(&x, k, v, &c->overlap) != 0)
                goto out;
            if (c->overlap > 1) {
                bad(&x, locate(&x, key_names[k], 0, -1),
                    "expected a fraction in [0, 1] for \"overlap\", found %g", c->overlap);
                goto out;
            }
            c->has_overlap = 1;
        } else if (read_dir(&x, c, k, v) != 0) {
            goto out;
        }
    }
    /* the measured all-reduce is one fit: a part of it alone prices nothing */
    int parts =
        seen[KEY_ALLREDUCE_LATENCY] + seen[KEY_ALLREDUCE_BANDWIDTH] + seen[KEY_ALLREDUCE_RANKS];
    if (parts && parts < 3) {
        int given = seen[KEY_ALLREDUCE_LATENCY]     ? KEY_ALLREDUCE_LATENCY
                    : seen[KEY_ALLREDUCE_BANDWIDTH] ? KEY_ALLREDUCE_BANDWIDTH
                                                    : KEY_ALLREDUCE_RANKS;
        bad(&x, locate(&x, key_names[given], 1, -1),
            "\"allreduce_latency\", \"allreduce_bandwidth\" and \"allreduce_ranks\" go "
            "together (one measured all-reduce), but \"%s\" is missing",
            key_names[!seen[KEY_ALLREDUCE_LATENCY]     ? KEY_ALLREDUCE_LATENCY
                      : !seen[KEY_ALLREDUCE_BANDWIDTH] ? KEY_ALLREDUCE_BANDWIDTH
                                                       : KEY_ALLREDUCE_RANKS]);
        goto out;
    }
    if (!c->unit)
        c->unit = "s"; /* what ppvm --profile writes */
    rc = 0;
out:
    json_decref(root);
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
        if (errlen && errno == 0) /* not a regular file: failed says what it is */
            snprintf(err, errlen, "%s: cannot read: it is %s, not a costs file", path, failed);
        else if (errlen)
            snprintf(err, errlen, "%s: cannot %s: %s", path, failed, strerror(errno));
        return -1;
    }
    int rc = pp_costs_parse(c, path, buf, len, err, errlen);
    free(buf);
    return rc;
}

void pp_costs_free(pp_costs *c)
{
    for (int d = 0; d < PP_COSTS_DIRS; d++)
        free(c->dir[d]);
    free(c->model);
    free(c->backend);
    memset(c, 0, sizeof *c);
}
