/* jobs.h - the jobs of a schedule, (s, b, d), numbered densely, and their
 * dependency tree from the seed:
 *   F(s,b) after F(s-1,b);  B(S-1,b) after F(S-1,b);  B(s,b) after B(s+1,b);
 *   W(s,b) after B(s,b)  (only when the backward is split).
 *
 * Mixed backward (`split backward when EXPR`): ids keep room for every
 * W(s,b) (ND = 3), but only the (s,b) where split[] is set have one; the
 * others' B is a full backward. Every pass over ids skips what
 * job_exists says is not a job. */
#ifndef PP_JOBS_H
#define PP_JOBS_H

typedef struct {
    int S, B, ND; /* ND = 2 (F, B) or 3 (F, B, W) */
    /* ND = 3 only: split[s*B + b] = 1 where (s,b)'s backward is split; NULL
     * when every backward is (`split backward`). */
    const unsigned char *split;
} pp_jobspace;

static inline int job_id(const pp_jobspace *js, int s, int b, int d)
{
    return (s * js->B + b) * js->ND + d;
}
static inline int job_s(const pp_jobspace *js, int j) { return j / js->ND / js->B; }
static inline int job_b(const pp_jobspace *js, int j) { return j / js->ND % js->B; }
static inline int job_d(const pp_jobspace *js, int j) { return j % js->ND; }
/* The size of the id space (including W ids that are not jobs). */
static inline int job_count(const pp_jobspace *js) { return js->S * js->B * js->ND; }

/* Whether (s,b)'s backward is split into B (input gradient) and W. */
static inline int job_split(const pp_jobspace *js, int s, int b)
{
    return js->ND == 3 && (!js->split || js->split[s * js->B + b]);
}
/* Whether id j is a job: every F and B; a W where its (s,b) is split. */
static inline int job_exists(const pp_jobspace *js, int j)
{
    return j % js->ND != 2 || !js->split || js->split[j / js->ND];
}
/* The number of jobs (ids that exist). */
static inline int job_total(const pp_jobspace *js)
{
    int n = js->S * js->B * 2;
    for (int i = 0; js->ND == 3 && i < js->S * js->B; i++)
        n += !js->split || js->split[i];
    return n;
}
/* Whether job j computes its stage's weight gradient: a W, or a backward
 * that is not split. */
static inline int job_makes_wgrad(const pp_jobspace *js, int j)
{
    int d = j % js->ND;
    return d == 2 || (d == 1 && !job_split(js, j / js->ND / js->B, j / js->ND % js->B));
}

/* The one predecessor of job j, or -1. */
static inline int job_pred(const pp_jobspace *js, int j)
{
    int s = job_s(js, j), b = job_b(js, j), d = job_d(js, j);
    if (d == 0)
        return s > 0 ? job_id(js, s - 1, b, 0) : -1;
    if (d == 1)
        return s == js->S - 1 ? job_id(js, s, b, 0) : job_id(js, s + 1, b, 1);
    return job_id(js, s, b, 1);
}

/* Successors of job j (at most 2); returns their number. */
static inline int job_succ(const pp_jobspace *js, int j, int out[2])
{
    int s = job_s(js, j), b = job_b(js, j), d = job_d(js, j), n = 0;
    if (d == 0)
        out[n++] = s < js->S - 1 ? job_id(js, s + 1, b, 0) : job_id(js, s, b, 1);
    else if (d == 1) {
        if (s > 0)
            out[n++] = job_id(js, s - 1, b, 1);
        if (job_split(js, s, b))
            out[n++] = job_id(js, s, b, 2);
    }
    return n;
}

static inline char dir_char(int d) { return "FBW"[d]; }

#endif
