/* json.c - a small, strict JSON reader (RFC 8259); see json.h.
 *
 * A recursive-descent parser over a byte buffer that keeps the line and
 * column of the next byte. Containers are parsed into their parent's child
 * array in place (a slot is appended, zeroed, then filled), so a partly built
 * tree is always well formed and one pp_json_free cleans up after an error.
 * Recursion is bounded by PP_JSON_MAX_DEPTH, so hostile input cannot
 * overflow the stack. Every function returns a pp_json_status; those that
 * own memory release it on one path at their end. */
#include "json.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name; /* shown in messages */
    const char *s;
    size_t len, pos;
    int line, col; /* of s[pos] */
    char *err;
    size_t errlen;
} parser;

/* Run a step; on failure keep its status and leave through `out`. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        rc = (call);                                                                               \
        if (rc != PP_JSON_OK)                                                                      \
            goto out;                                                                              \
    } while (0)

/* ------------------------------------------------------------ messages */

static pp_json_status fail(parser *p, pp_json_status rc, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* "name:LINE:COL: <fmt>" into the caller's buffer; returns rc. */
static pp_json_status fail(parser *p, pp_json_status rc, int line, int col, const char *fmt, ...)
{
    if (p->errlen == 0)
        return rc;
    int n = snprintf(p->err, p->errlen, "%s:%d:%d: ", p->name, line, col);
    if (n >= 0 && (size_t)n < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static pp_json_status nomem(parser *p)
{
    if (p->errlen)
        snprintf(p->err, p->errlen, "%s: out of memory", p->name);
    return PP_JSON_ERR_NOMEM;
}

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static void advance(parser *p)
{
    if (p->s[p->pos] == '\n') {
        p->line++;
        p->col = 1;
    } else {
        p->col++;
    }
    p->pos++;
}

/* What the next byte is, for "found ...": 'x', end of input or byte 0xNN. */
static const char *found(const parser *p, char buf[16])
{
    int c = peek(p);
    if (c < 0)
        return "end of input";
    if (c == '\'')
        snprintf(buf, 16, "\"'\"");
    else if (c > ' ' && c < 0x7f)
        snprintf(buf, 16, "'%c'", c);
    else
        snprintf(buf, 16, "byte 0x%02x", (unsigned)c);
    return buf;
}

static int is_alnum(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static void skip_ws(parser *p)
{
    for (int c = peek(p); c == ' ' || c == '\t' || c == '\n' || c == '\r'; c = peek(p))
        advance(p);
}

/* --------------------------------------------------------------- nodes */

static void free_node(pp_json *v)
{
    for (size_t i = 0; i < v->n; i++)
        free_node(&v->child[i]);
    free(v->child);
    free(v->str);
    free(v->key);
}

void pp_json_free(pp_json *root)
{
    if (!root)
        return;
    free_node(root);
    free(root);
}

const char *pp_json_kind_name(pp_json_kind kind)
{
    switch (kind) {
    case PP_JSON_NULL:
        return "null";
    case PP_JSON_BOOL:
        return "a boolean";
    case PP_JSON_NUMBER:
        return "a number";
    case PP_JSON_STRING:
        return "a string";
    case PP_JSON_ARRAY:
        return "an array";
    case PP_JSON_OBJECT:
        return "an object";
    }
    return "an unknown value";
}

/* Append a zeroed child to v and point *slot at it. */
static pp_json_status push_child(parser *p, pp_json *v, size_t *cap, pp_json **slot)
{
    if (v->n == *cap) {
        size_t ncap = *cap ? 2 * *cap : 4;
        if (ncap > SIZE_MAX / 2 / sizeof *v->child)
            return nomem(p);
        pp_json *c = realloc(v->child, ncap * sizeof *c);
        if (!c)
            return nomem(p);
        v->child = c;
        *cap = ncap;
    }
    *slot = &v->child[v->n++];
    memset(*slot, 0, sizeof **slot);
    return PP_JSON_OK;
}

/* ------------------------------------------------------------- strings */

typedef struct {
    char *b;
    size_t n, cap;
} strbuf;

static pp_json_status put_bytes(parser *p, strbuf *sb, const char *bytes, size_t n)
{
    if (sb->cap - sb->n <= n) { /* keep room for the NUL */
        size_t ncap = sb->cap ? sb->cap : 16;
        while (ncap - sb->n <= n) {
            if (ncap > SIZE_MAX / 2)
                return nomem(p);
            ncap *= 2;
        }
        char *b = realloc(sb->b, ncap);
        if (!b)
            return nomem(p);
        sb->b = b;
        sb->cap = ncap;
    }
    memcpy(sb->b + sb->n, bytes, n);
    sb->n += n;
    sb->b[sb->n] = '\0';
    return PP_JSON_OK;
}

static pp_json_status put_utf8(parser *p, strbuf *sb, unsigned long cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return put_bytes(p, sb, u, n);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits after "\u" (p is at the 'u'). */
static pp_json_status read_hex4(parser *p, unsigned long *cp)
{
    char fb[16];
    advance(p); /* 'u' */
    *cp = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(peek(p));
        if (h < 0)
            return fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                        "expected 4 hex digits after '\\u' in a string, found %s", found(p, fb));
        *cp = *cp * 16 + (unsigned long)h;
        advance(p);
    }
    return PP_JSON_OK;
}

/* An escape; p is at the backslash. */
static pp_json_status read_escape(parser *p, strbuf *sb)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    char fb[16];
    int line = p->line, col = p->col;
    advance(p); /* '\\' */
    int c = peek(p);
    const char *hit = c > 0 ? strchr(from, c) : NULL;
    if (hit) {
        advance(p);
        return put_bytes(p, sb, &to[hit - from], 1);
    }
    if (c != 'u')
        return fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                    "bad escape in a string: expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t "
                    "\\uXXXX after '\\', found %s",
                    found(p, fb));
    unsigned long cp, lo;
    pp_json_status rc = read_hex4(p, &cp);
    if (rc != PP_JSON_OK)
        return rc;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return fail(p, PP_JSON_ERR_SYNTAX, line, col,
                    "bad escape in a string: expected a high surrogate (\\uD800-\\uDBFF) before "
                    "the low surrogate \\u%04lX, found none",
                    cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (peek(p) != '\\' || p->pos + 1 >= p->len || p->s[p->pos + 1] != 'u')
            return fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                        "bad escape in a string: expected a low surrogate (\\uDC00-\\uDFFF) "
                        "after the high surrogate \\u%04lX, found %s",
                        cp, found(p, fb));
        int lline = p->line, lcol = p->col;
        advance(p); /* '\\' */
        if ((rc = read_hex4(p, &lo)) != PP_JSON_OK)
            return rc;
        if (lo < 0xdc00 || lo > 0xdfff)
            return fail(p, PP_JSON_ERR_SYNTAX, lline, lcol,
                        "bad escape in a string: expected a low surrogate (\\uDC00-\\uDFFF) "
                        "after the high surrogate \\u%04lX, found \\u%04lX",
                        cp, lo);
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    return put_utf8(p, sb, cp);
}

/* One UTF-8 encoded character of 2-4 bytes, checked (no overlong forms, no
 * surrogates, nothing above U+10FFFF); p is at its lead byte. */
static pp_json_status read_utf8(parser *p, strbuf *sb)
{
    const unsigned char *u = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos, n = 0;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (u[0] >= 0xc2 && u[0] <= 0xdf)
        n = 2;
    else if (u[0] >= 0xe0 && u[0] <= 0xef) {
        n = 3;
        lo = u[0] == 0xe0 ? 0xa0 : 0x80;
        hi = u[0] == 0xed ? 0x9f : 0xbf;
    } else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
        n = 4;
        lo = u[0] == 0xf0 ? 0x90 : 0x80;
        hi = u[0] == 0xf4 ? 0x8f : 0xbf;
    }
    int ok = n > 0 && left >= n && u[1] >= lo && u[1] <= hi;
    for (size_t i = 2; ok && i < n; i++)
        ok = u[i] >= 0x80 && u[i] <= 0xbf;
    if (!ok)
        return fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                    "expected UTF-8 text in a string, found an invalid sequence at byte 0x%02x",
                    u[0]);
    pp_json_status rc = put_bytes(p, sb, (const char *)u, n);
    for (size_t i = 0; i < n; i++)
        advance(p);
    return rc;
}

/* A string; p is at the opening quote. On success *out owns the bytes. */
static pp_json_status read_string(parser *p, char **out, size_t *outlen)
{
    pp_json_status rc = PP_JSON_OK;
    strbuf sb = {NULL, 0, 0};
    char fb[16];
    int line = p->line, col = p->col;
    advance(p);                    /* '"' */
    TRY(put_bytes(p, &sb, "", 0)); /* an empty string is "", not NULL */
    for (;;) {
        int c = peek(p);
        if (c < 0) {
            rc = fail(p, PP_JSON_ERR_SYNTAX, line, col,
                      "unterminated string: expected a closing '\"', found end of input");
            goto out;
        }
        if (c == '"') {
            advance(p);
            break;
        }
        if (c < 0x20) {
            rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                      "expected a character or an escape in a string, found %s (control "
                      "characters must be escaped)",
                      found(p, fb));
            goto out;
        }
        if (c == '\\') {
            TRY(read_escape(p, &sb));
        } else if (c >= 0x80) {
            TRY(read_utf8(p, &sb));
        } else {
            char ch = (char)c;
            TRY(put_bytes(p, &sb, &ch, 1));
            advance(p);
        }
    }
    *out = sb.b;
    *outlen = sb.n;
    sb.b = NULL;
out:
    free(sb.b);
    return rc;
}

/* ------------------------------------------------------------- numbers */

static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? then strtod on a copy. */
static pp_json_status read_number(parser *p, pp_json *v)
{
    pp_json_status rc = PP_JSON_OK;
    char fb[16], small[64], *copy = NULL;
    size_t start = p->pos;
    if (peek(p) == '-')
        advance(p);
    if (peek(p) == '0') {
        advance(p);
        if (is_digit(peek(p))) {
            rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                      "bad number: expected '.', 'e' or the number's end after a leading 0, "
                      "found %s",
                      found(p, fb));
            goto out;
        }
    } else if (is_digit(peek(p))) {
        while (is_digit(peek(p)))
            advance(p);
    } else {
        rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                  "bad number: expected a digit after '-', found %s", found(p, fb));
        goto out;
    }
    if (peek(p) == '.') {
        advance(p);
        if (!is_digit(peek(p))) {
            rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                      "bad number: expected a digit after '.', found %s", found(p, fb));
            goto out;
        }
        while (is_digit(peek(p)))
            advance(p);
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        advance(p);
        if (peek(p) == '+' || peek(p) == '-')
            advance(p);
        if (!is_digit(peek(p))) {
            rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                      "bad number: expected a digit in the exponent, found %s", found(p, fb));
            goto out;
        }
        while (is_digit(peek(p)))
            advance(p);
    }
    /* The grammar above is a subset of strtod's (in the C locale, which
     * ppc never changes), so strtod reads all of it. */
    size_t n = p->pos - start;
    char *buf = small;
    if (n >= sizeof small) {
        if (!(copy = malloc(n + 1))) {
            rc = nomem(p);
            goto out;
        }
        buf = copy;
    }
    memcpy(buf, p->s + start, n);
    buf[n] = '\0';
    v->kind = PP_JSON_NUMBER;
    v->number = strtod(buf, NULL);
out:
    free(copy);
    return rc;
}

/* ---------------------------------------------------------------- values */

static pp_json_status parse_value(parser *p, pp_json *v, int depth);

/* An error for a value that is not one: names the bare word when it is one
 * (NaN, Infinity, tru), else the byte. */
static pp_json_status not_a_value(parser *p)
{
    char fb[16];
    size_t n = 0;
    while (p->pos + n < p->len && n < 24 && is_alnum((unsigned char)p->s[p->pos + n]))
        n++;
    if (n > 0 && is_alnum(peek(p)) && !is_digit(peek(p)))
        return fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                    "expected a value (object, array, string, number, true, false or null), "
                    "found '%.*s%s'",
                    (int)n, p->s + p->pos, n == 24 ? "..." : "");
    return fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                "expected a value (object, array, string, number, true, false or null), found %s",
                found(p, fb));
}

static pp_json_status read_word(parser *p, pp_json *v)
{
    static const struct {
        const char *word;
        pp_json_kind kind;
        int boolean;
    } words[] = {{"true", PP_JSON_BOOL, 1}, {"false", PP_JSON_BOOL, 0}, {"null", PP_JSON_NULL, 0}};
    size_t n = 0;
    while (p->pos + n < p->len && is_alnum((unsigned char)p->s[p->pos + n]))
        n++;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (strlen(words[i].word) == n && memcmp(words[i].word, p->s + p->pos, n) == 0) {
            v->kind = words[i].kind;
            v->boolean = words[i].boolean;
            while (n--)
                advance(p);
            return PP_JSON_OK;
        }
    }
    return not_a_value(p);
}

static pp_json_status too_deep(parser *p)
{
    char fb[16];
    return fail(p, PP_JSON_ERR_LIMIT, p->line, p->col,
                "too deeply nested: expected at most %d levels of arrays and objects, found %s",
                PP_JSON_MAX_DEPTH, found(p, fb));
}

/* p is at '['; depth counts the containers around this one. */
static pp_json_status parse_array(parser *p, pp_json *v, int depth)
{
    pp_json_status rc = PP_JSON_OK;
    char fb[16];
    size_t cap = 0;
    if (depth >= PP_JSON_MAX_DEPTH)
        return too_deep(p);
    v->kind = PP_JSON_ARRAY;
    advance(p);
    skip_ws(p);
    if (peek(p) == ']') {
        advance(p);
        return PP_JSON_OK;
    }
    for (;;) {
        pp_json *elem;
        TRY(push_child(p, v, &cap, &elem));
        TRY(parse_value(p, elem, depth + 1));
        skip_ws(p);
        if (peek(p) == ']') {
            advance(p);
            break;
        }
        if (peek(p) != ',') {
            rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                      "expected ',' or ']' after an array element, found %s", found(p, fb));
            goto out;
        }
        advance(p);
    }
out:
    return rc; /* a partial v is freed with the whole tree */
}

/* p is at '{'. */
static pp_json_status parse_object(parser *p, pp_json *v, int depth)
{
    pp_json_status rc = PP_JSON_OK;
    char fb[16];
    size_t cap = 0;
    if (depth >= PP_JSON_MAX_DEPTH)
        return too_deep(p);
    v->kind = PP_JSON_OBJECT;
    advance(p);
    skip_ws(p);
    if (peek(p) == '}') {
        advance(p);
        return PP_JSON_OK;
    }
    for (;;) {
        pp_json *m;
        if (peek(p) != '"') {
            rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col, "expected a string key%s, found %s",
                      v->n == 0 ? " or '}'" : " after ','", found(p, fb));
            goto out;
        }
        TRY(push_child(p, v, &cap, &m));
        m->key_line = p->line;
        m->key_col = p->col;
        TRY(read_string(p, &m->key, &m->key_len));
        skip_ws(p);
        if (peek(p) != ':') {
            rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                      "expected ':' after an object key, found %s", found(p, fb));
            goto out;
        }
        advance(p);
        TRY(parse_value(p, m, depth + 1));
        skip_ws(p);
        if (peek(p) == '}') {
            advance(p);
            break;
        }
        if (peek(p) != ',') {
            rc = fail(p, PP_JSON_ERR_SYNTAX, p->line, p->col,
                      "expected ',' or '}' after an object member, found %s", found(p, fb));
            goto out;
        }
        advance(p);
        skip_ws(p);
    }
out:
    return rc;
}

/* Any value, after optional whitespace; fills v's kind, position and data. */
static pp_json_status parse_value(parser *p, pp_json *v, int depth)
{
    skip_ws(p);
    v->line = p->line;
    v->col = p->col;
    int c = peek(p);
    switch (c) {
    case '{':
        return parse_object(p, v, depth);
    case '[':
        return parse_array(p, v, depth);
    case '"':
        v->kind = PP_JSON_STRING;
        return read_string(p, &v->str, &v->len);
    case '-':
        return read_number(p, v);
    default:
        if (is_digit(c))
            return read_number(p, v);
        if (c >= 'a' && c <= 'z')
            return read_word(p, v);
        return not_a_value(p);
    }
}

pp_json_status pp_json_parse(pp_json **out, const char *name, const char *text, size_t len,
                             char *err, size_t errlen)
{
    pp_json_status rc = PP_JSON_OK;
    parser p = {name ? name : "<json>", text, len, 0, 1, 1, err, errlen};
    pp_json *root = NULL;
    char fb[16];
    *out = NULL;
    if (errlen)
        err[0] = '\0';
    if (len >= INT_MAX) { /* so that a column always fits in an int */
        rc = fail(&p, PP_JSON_ERR_LIMIT, 1, 1, "expected at most %d bytes of JSON, found %zu",
                  INT_MAX - 1, len);
        goto out;
    }
    if (!(root = calloc(1, sizeof *root))) {
        rc = nomem(&p);
        goto out;
    }
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        p.pos = 3; /* a byte order mark: skipped, and not counted as a column */
    TRY(parse_value(&p, root, 0));
    skip_ws(&p);
    if (p.pos < p.len) {
        rc = fail(&p, PP_JSON_ERR_SYNTAX, p.line, p.col,
                  "expected the end of input after the top-level value, found %s", found(&p, fb));
        goto out;
    }
    *out = root;
    root = NULL;
out:
    pp_json_free(root);
    return rc;
}

void pp_json_write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}
