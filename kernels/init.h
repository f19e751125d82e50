/* init.h - the deterministic initialisation every model kind uses: a
 * counter-based generator, so element i of stage s is a pure function of
 * (seed, s, i) and ranks may initialise stages in any order and still agree
 * bit for bit. Header-only (static inline), for mlp.c and gpt.c. */
#ifndef PP_INIT_H
#define PP_INIT_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t splitmix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The key of stage s's stream of numbers. */
static inline uint64_t pp_init_stage_key(uint64_t seed, int s)
{
    return splitmix64(seed ^ ((uint64_t)s * 0x9E3779B97F4A7C15ull));
}

/* Uniform in [-1, 1) from 24 random bits (exact in float). */
static inline float uniform_pm1(uint64_t stage_key, uint64_t i)
{
    uint64_t z = splitmix64(stage_key ^ splitmix64(i));
    return (float)((double)(z >> 40) * 0x1p-23 - 1.0);
}

/* p[off .. off+n) = scale * U(-1, 1), element i from (key, i). */
static inline void init_uniform(float *p, size_t off, size_t n, float scale, uint64_t key)
{
    for (size_t i = off; i < off + n; i++)
        p[i] = scale * uniform_pm1(key, i);
}

static inline void fill(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}

#endif
