/* jobs.h - the jobs of a schedule, (s, b, d), numbered densely, and their
 * dependency tree from the seed:
 *   F(s,b) after F(s-1,b);  B(S-1,b) after F(S-1,b);  B(s,b) after B(s+1,b);
 *   W(s,b) after B(s,b)  (only when the backward is split). */
#ifndef PP_JOBS_H
#define PP_JOBS_H

typedef struct {
    int S, B, ND; /* ND = 2 (F, B) or 3 (F, B, W) */
} pp_jobspace;

static inline int job_id(const pp_jobspace *js, int s, int b, int d)
{
    return (s * js->B + b) * js->ND + d;
}
static inline int job_s(const pp_jobspace *js, int j) { return j / js->ND / js->B; }
static inline int job_b(const pp_jobspace *js, int j) { return j / js->ND % js->B; }
static inline int job_d(const pp_jobspace *js, int j) { return j % js->ND; }
static inline int job_count(const pp_jobspace *js) { return js->S * js->B * js->ND; }

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
        if (js->ND == 3)
            out[n++] = job_id(js, s, b, 2);
    }
    return n;
}

static inline char dir_char(int d) { return "FBW"[d]; }

#endif
