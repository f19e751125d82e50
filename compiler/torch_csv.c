/* torch_csv.c - ppc --emit torch-csv: the per-rank action lists of PyTorch's
 * pipeline runtime (format in torch_csv.h; why compute_only in
 * compiler/README.md, "PyTorch interop"). */
#include "torch_csv.h"

#include <stdlib.h>

static const char *const dir_names[] = {"F", "B", "W"};

int pp_torch_csv_action(const pp_jobtable *t, int j, char *buf, size_t n)
{
    int d = job_d(&t->js, j), s = job_s(&t->js, j), b = job_b(&t->js, j);
    /* With a split backward pp's B computes only the input gradient, which
     * PyTorch calls I (BACKWARD_INPUT); its B is the full backward, which
     * pp's B is where `split backward when` leaves (s,b) unsplit. */
    const char *name = d == 1 && job_split(&t->js, s, b) ? "I" : dir_names[d];
    return snprintf(buf, n, "%d%s%d", s, name, b);
}

/* "F(1,0)" for messages, in pp's own notation. */
static void job_name(const pp_jobtable *t, int j, char *buf, size_t n)
{
    snprintf(buf, n, "%c(%d,%d)", dir_char(job_d(&t->js, j)), job_s(&t->js, j), job_b(&t->js, j));
}

int pp_torch_csv_check(const pp_jobtable *t, char *why, size_t n)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js);
    /* Recomputation (issue 26): PyTorch's actions have no re-run forward */
    for (int j = job_rbase(js); js->recompute && j < N; j++)
        if (job_exists(js, j)) {
            snprintf(why, n,
                     "R(%d,%d) re-runs a forward to rebuild its stash ('recompute'), but PyTorch's "
                     "pipeline actions (F, B, I, W and the transfers) have no re-run forward: "
                     "activation checkpointing there is a module wrapper, not a schedule action",
                     job_s(js, j), job_b(js, j));
            return 1;
        }
    /* Offload (issue 26): PyTorch's actions move no stash to host memory */
    for (int i = 0; t->offload && i < js->S * js->B; i++)
        if (t->offload[i]) {
            snprintf(why, n,
                     "(s=%d, b=%d)'s stash is offloaded to host memory ('offload'), but PyTorch's "
                     "pipeline actions (F, B, I, W and the transfers) have no offload or reload: "
                     "activation offloading there is a hook outside the schedule",
                     i / js->B, i % js->B);
            return 1;
        }
    /* Replicas first: a replicated stage also computes away from some of
     * its copies, but "replicas" is the reason PyTorch cannot run it. */
    for (int j = 0; j < N; j++) {
        int first = job_id(js, job_s(js, j), 0, 0);
        if (job_exists(js, j) && t->owner[j] != t->owner[first]) {
            char a[48], b[48];
            job_name(t, first, a, sizeof a);
            job_name(t, j, b, sizeof b);
            snprintf(why, n,
                     "stage %d's weights live on workers %d (%s) and %d (%s): replicas all-reduced "
                     "as DDP does, but a PyTorch pipeline CSV places each stage on one rank "
                     "(data parallelism is a separate mesh dimension there)",
                     job_s(js, j), t->owner[first], a, t->owner[j], b);
            return 1;
        }
    }
    for (int j = 0; j < N; j++) /* a W id that is not a job (split backward when) is skipped */
        if (job_exists(js, j) && t->worker[j] != t->owner[j]) {
            char a[48];
            job_name(t, j, a, sizeof a);
            snprintf(why, n,
                     "%s computes on worker %d, away from stage %d's weights on worker %d "
                     "(a weight fetch, as FSDP does), but PyTorch's pipeline runtime runs a "
                     "stage only on the rank that holds it",
                     a, t->worker[j], job_s(js, j), t->owner[j]);
            return 1;
        }
    char *busy = calloc((size_t)t->W, 1);
    if (!busy)
        return -1;
    for (int j = 0; j < N; j++)
        if (job_exists(js, j))
            busy[t->worker[j]] = 1;
    int idle = -1;
    for (int w = 0; w < t->W && idle < 0; w++)
        if (!busy[w])
            idle = w;
    free(busy);
    if (idle >= 0) {
        snprintf(why, n,
                 "worker %d computes no job, but every rank of a PyTorch pipeline holds a stage "
                 "(W = %d workers for S = %d stages)",
                 idle, t->W, js->S);
        return 1;
    }
    return 0;
}

int pp_torch_csv_write(FILE *f, const pp_jobtable *t, const pp_sim_result *sim)
{
    char cell[64], second[64];
    for (int w = 0; w < t->W; w++) {
        for (int i = sim->off[w]; i < sim->off[w + 1]; i++) {
            int j = sim->order[i], mate = sim->partner ? sim->partner[j] : -1;
            pp_torch_csv_action(t, j, cell, sizeof cell);
            const char *sep = i > sim->off[w] ? "," : "";
            int rc;
            /* An overlapped pair is adjacent in its worker's order: one
             * OVERLAP_F_B action whose sub-actions keep pp's order. */
            if (mate >= 0 && i + 1 < sim->off[w + 1] && sim->order[i + 1] == mate) {
                pp_torch_csv_action(t, mate, second, sizeof second);
                rc = fprintf(f, "%s(%s;%s)OVERLAP_F_B", sep, cell, second);
                i++;
            } else
                rc = fprintf(f, "%s%s", sep, cell);
            if (rc < 0)
                return -1;
        }
        if (fputc('\n', f) == EOF)
            return -1;
    }
    return ferror(f) ? -1 : 0;
}
