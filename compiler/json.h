/* json.h - a small, strict JSON reader (RFC 8259) that builds a tree.
 *
 * Every node records the line and column (1-based, in bytes) of its first
 * character, and a member of an object also where its key is, so callers can
 * report "name:line:col: ..." for anything they reject. The reader accepts
 * exactly RFC 8259's grammar (no comments, no trailing commas, no NaN, no
 * leading zeros or bare '.'), checks that strings are valid UTF-8 and decodes
 * their escapes (\uXXXX and surrogate pairs included), nests at most
 * PP_JSON_MAX_DEPTH arrays and objects, and rejects anything after the
 * top-level value except whitespace. A leading UTF-8 byte order mark is
 * skipped, as RFC 8259 section 8.1 allows. */
#ifndef PP_JSON_H
#define PP_JSON_H

#include <stddef.h>
#include <stdio.h>

#define PP_JSON_MAX_DEPTH 64 /* nested arrays and objects */

typedef enum {
    PP_JSON_NULL,
    PP_JSON_BOOL,
    PP_JSON_NUMBER,
    PP_JSON_STRING,
    PP_JSON_ARRAY,
    PP_JSON_OBJECT,
} pp_json_kind;

typedef enum {
    PP_JSON_OK = 0,
    PP_JSON_ERR_SYNTAX, /* not JSON: the message says where and what */
    PP_JSON_ERR_LIMIT,  /* nested too deep, or INT_MAX bytes of input or more */
    PP_JSON_ERR_NOMEM,
} pp_json_status;

typedef struct pp_json {
    pp_json_kind kind;
    int line, col;         /* of the value's first character */
    int boolean;           /* BOOL: 0 or 1 */
    double number;         /* NUMBER: strtod's value; out of range gives +-inf or 0 */
    char *str;             /* STRING: the decoded UTF-8, NUL-terminated ... */
    size_t len;            /* ... and its length in bytes (it may hold \u0000) */
    struct pp_json *child; /* ARRAY, OBJECT: the elements or members, in order */
    size_t n;
    char *key; /* a member of an OBJECT: its decoded key (NUL-terminated), ... */
    size_t key_len;
    int key_line, key_col; /* ... and where the key starts */
} pp_json;

/* Parse text[0..len) (which needs no terminating NUL) into a tree in *out.
 * On failure *out is NULL and err holds "name:LINE:COL: expected ..., found
 * ..." (or "name: out of memory"). err may be NULL when errlen is 0. */
pp_json_status pp_json_parse(pp_json **out, const char *name, const char *text, size_t len,
                             char *err, size_t errlen);
/* Free a tree from pp_json_parse (NULL is fine). */
void pp_json_free(pp_json *root);
/* Writes s as a JSON string literal (quotes, escapes) - the writing side,
 * shared by report.json and trace.json. */
void pp_json_write_string(FILE *f, const char *s);
/* "null", "a boolean", "a number", "a string", "an array", "an object". */
const char *pp_json_kind_name(pp_json_kind kind);

#endif
