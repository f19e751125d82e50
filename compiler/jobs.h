/* jobs.h - the jobs of a schedule, (s, b, d), numbered densely, and their
 * dependency tree from the seed:
 *   F(s,b) after F(s-1,b);  B(S-1,b) after F(S-1,b);  B(s,b) after B(s+1,b);
 *   W(s,b) after B(s,b)  (only when the backward is split);
 *   R(s,b) after F(s,b), and B(s,b) after R(s,b) (only when recomputed).
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
    /* `recompute when EXPR` (jobs_recompute.h): [S*B], 1 where F(s,b)
     * keeps only its input and a job R(s,b) rebuilds the stash before
     * B(s,b); NULL when nothing is recomputed. R ids follow every F/B/W
     * id: R(s,b) = S*B*ND + s*B + b, so the F/B/W ids are as without. */
    const unsigned char *recompute;
} pp_jobspace;

/* The direction of a re-run forward (schedule.h's DIR_R). */
enum { JOB_DIR_R = 3 };

/* The first R id: the size of the F/B/W id space. */
static inline int job_rbase(const pp_jobspace *js) { return js->S * js->B * js->ND; }
static inline int job_id(const pp_jobspace *js, int s, int b, int d)
{
    return d == JOB_DIR_R ? job_rbase(js) + s * js->B + b : (s * js->B + b) * js->ND + d;
}
static inline int job_s(const pp_jobspace *js, int j)
{
    int r = j - job_rbase(js);
    return r >= 0 ? r / js->B : j / js->ND / js->B;
}
static inline int job_b(const pp_jobspace *js, int j)
{
    int r = j - job_rbase(js);
    return r >= 0 ? r % js->B : j / js->ND % js->B;
}
static inline int job_d(const pp_jobspace *js, int j)
{
    return j >= job_rbase(js) ? JOB_DIR_R : j % js->ND;
}
/* The size of the id space (including W and R ids that are not jobs). */
static inline int job_count(const pp_jobspace *js)
{
    return js->S * js->B * js->ND + (js->recompute ? js->S * js->B : 0);
}
/* Whether (s,b)'s forward is recomputed: R(s,b) is a job. */
static inline int job_recomputed(const pp_jobspace *js, int s, int b)
{
    return js->recompute && js->recompute[s * js->B + b];
}

/* Whether (s,b)'s backward is split into B (input gradient) and W. */
static inline int job_split(const pp_jobspace *js, int s, int b)
{
    return js->ND == 3 && (!js->split || js->split[s * js->B + b]);
}
/* Whether id j is a job: every F and B; a W where its (s,b) is split. */
static inline int job_exists(const pp_jobspace *js, int j)
{
    if (j >= job_rbase(js))
        return js->recompute[j - job_rbase(js)];
    return j % js->ND != 2 || !js->split || js->split[j / js->ND];
}
/* The number of jobs (ids that exist). */
static inline int job_total(const pp_jobspace *js)
{
    int n = js->S * js->B * 2;
    for (int i = 0; js->ND == 3 && i < js->S * js->B; i++)
        n += !js->split || js->split[i];
    for (int i = 0; js->recompute && i < js->S * js->B; i++)
        n += js->recompute[i];
    return n;
}
/* Whether job j computes its stage's weight gradient: a W, or a backward
 * that is not split. */
static inline int job_makes_wgrad(const pp_jobspace *js, int j)
{
    int d = job_d(js, j);
    return d == 2 || (d == 1 && !job_split(js, job_s(js, j), job_b(js, j)));
}

/* The predecessor of job j along its microbatch's chain, or -1 (R(s,b)'s
 * is F(s,b)). A recomputed B(s,b) also waits for R(s,b): job_pred2. */
static inline int job_pred(const pp_jobspace *js, int j)
{
    int s = job_s(js, j), b = job_b(js, j), d = job_d(js, j);
    if (d == 0)
        return s > 0 ? job_id(js, s - 1, b, 0) : -1;
    if (d == 1)
        return s == js->S - 1 ? job_id(js, s, b, 0) : job_id(js, s + 1, b, 1);
    if (d == JOB_DIR_R)
        return job_id(js, s, b, 0);
    return job_id(js, s, b, 1);
}

/* Job j's second predecessor: R(s,b) for a recomputed B(s,b), else -1. */
static inline int job_pred2(const pp_jobspace *js, int j)
{
    if (!js->recompute || job_d(js, j) != 1)
        return -1;
    int s = job_s(js, j), b = job_b(js, j);
    return job_recomputed(js, s, b) ? job_id(js, s, b, JOB_DIR_R) : -1;
}

/* Successors of job j (at most 2); returns their number. */
static inline int job_succ(const pp_jobspace *js, int j, int out[2])
{
    int s = job_s(js, j), b = job_b(js, j), d = job_d(js, j), n = 0;
    if (d == 0) {
        out[n++] = s < js->S - 1 ? job_id(js, s + 1, b, 0) : job_id(js, s, b, 1);
        if (job_recomputed(js, s, b))
            out[n++] = job_id(js, s, b, JOB_DIR_R);
    } else if (d == JOB_DIR_R)
        out[n++] = job_id(js, s, b, 1);
    else if (d == 1) {
        if (s > 0)
            out[n++] = job_id(js, s - 1, b, 1);
        if (job_split(js, s, b))
            out[n++] = job_id(js, s, b, 2);
    }
    return n;
}

static inline char dir_char(int d) { return "FBWR"[d]; }

#endif
