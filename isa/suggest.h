/* suggest.h - "did you mean": the known word closest to a misspelt one
 * (a flag of ppc, ppvm or pprun, a keyword of the .pp language). Plain C,
 * no allocation beyond a small stack table. */
#ifndef PP_SUGGEST_H
#define PP_SUGGEST_H

#include <stddef.h>
#include <stdio.h>

/* The candidate nearest to `word` by edit distance (an insertion, deletion,
 * substitution or swap of two neighbours each count 1), if near enough to
 * be a likely slip: at most 1 for words up to 4 characters, 2 up to 8, 3
 * beyond; ties go to the first. NULL when none is, or when `word` is one of
 * them. */
const char *pp_suggest(const char *word, const char *const *cands, size_t n);

/* The same over the options a usage text names: every "--name" (and
 * "-x") token in `text`, the nearest written into buf (len bytes); the
 * slip allowed is that of the name without its dashes.
 * Returns buf, or NULL when none is near. */
const char *pp_suggest_flag(const char *word, const char *text, char *buf, size_t len);

/* A tool's hint for a mistyped flag: "; did you mean '--steps'?", the
 * nearest option its usage(f) prints, written into buf; "" when none is
 * near (or the usage text cannot be made). Returns buf. */
const char *pp_did_you_mean(const char *flag, void (*usage)(FILE *f), char *buf, size_t len);

#endif
