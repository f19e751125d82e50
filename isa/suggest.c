/* suggest.c - "did you mean" (suggest.h): the optimal-string-alignment
 * edit distance, bounded, over a list of words or the flags of a usage
 * text (so that a tool's suggestions follow its --help without a second
 * list to keep up to date). */
#include "suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUGGEST_MAX 64 /* longer words are not compared */

static size_t min3(size_t a, size_t b, size_t c)
{
    return a < b ? (a < c ? a : c) : (b < c ? b : c);
}

/* Edit distance with adjacent swaps (optimal string alignment); SIZE_MAX
 * beyond SUGGEST_MAX characters. */
static size_t distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > SUGGEST_MAX || m > SUGGEST_MAX)
        return (size_t)-1;
    size_t d[SUGGEST_MAX + 1][SUGGEST_MAX + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1;
        }
    return d[n][m];
}

/* How far a slip may go: 1 edit in a short word, 2 in a middling, 3 in a long one. */
static size_t allowed(const char *word)
{
    size_t n = strlen(word);
    return n <= 4 ? 1 : n <= 8 ? 2 : 3;
}

const char *pp_suggest(const char *word, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t best_d = allowed(word) + 1;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(word, cands[i]))
            return NULL;
        size_t d = distance(word, cands[i]);
        if (d < best_d)
            best = cands[i], best_d = d;
    }
    return best;
}

const char *pp_suggest_flag(const char *word, const char *text, char *buf, size_t len)
{
    size_t best_d = allowed(word + strspn(word, "-")) + 1; /* the name's length, not the dashes' */
    int found = 0;
    for (const char *p = text; (p = strchr(p, '-'));) {
        /* a flag starts a word: "--name" or "-x" after a space, '[', '(' or a line start */
        int starts = p == text || isspace((unsigned char)p[-1]) || p[-1] == '[' || p[-1] == '(' ||
                     p[-1] == '|';
        size_t k = 1 + (p[1] == '-');
        while (isalnum((unsigned char)p[k]) || (p[k] == '-' && isalnum((unsigned char)p[k + 1])))
            k++;
        if (starts && k > (size_t)(1 + (p[1] == '-')) && k <= SUGGEST_MAX) {
            char flag[SUGGEST_MAX + 1];
            memcpy(flag, p, k);
            flag[k] = 0;
            if (!strcmp(flag, word))
                return NULL;
            size_t d = distance(word, flag);
            if (d < best_d && strlen(flag) < len) {
                best_d = d;
                memcpy(buf, flag, k + 1);
                found = 1;
            }
        }
        p += k;
    }
    return found ? buf : NULL;
}

const char *pp_did_you_mean(const char *flag, void (*usage)(FILE *f), char *buf, size_t len)
{
    char *text = NULL, near[80];
    size_t n = 0;
    FILE *m = open_memstream(&text, &n);
    if (len)
        buf[0] = 0;
    if (m) {
        usage(m);
        if (!fclose(m) && pp_suggest_flag(flag, text, near, sizeof near))
            snprintf(buf, len, "; did you mean '%s'?", near);
    }
    free(text);
    return buf;
}
