/* link_retime.c - transfers priced again through each sender's token bucket
 * (link_retime.h). */
#include "link_retime.h"

#include <stdlib.h>

#include "link_bucket.h"

typedef struct {
    double at;    /* when it is sent */
    int j, fetch; /* into job j; a weight fetch (else its input) */
} send_ev;

static int by_time(const void *a, const void *b)
{
    const send_ev *x = a, *y = b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    if (x->j != y->j)
        return x->j < y->j ? -1 : 1;
    return x->fetch - y->fetch;
}

int pp_link_retime(pp_jobtable *t, const pp_model *m, const pp_sim_result *sim)
{
    int N = job_count(&t->js), n = 0;
    send_ev *ev = malloc((2 * (size_t)N + 1) * sizeof *ev);
    pp_links l;
    if (!ev || pp_links_init(&l, t)) {
        free(ev);
        return -1;
    }
    for (int j = 0; j < N; j++) {
        int p = job_pred(&t->js, j);
        if (!job_exists(&t->js, j))
            continue;
        if (p >= 0 && t->worker[p] != t->worker[j])
            ev[n++] = (send_ev){sim->end[p], j, 0};
        if (pp_job_fetches(t, j))
            ev[n++] = (send_ev){p >= 0 ? sim->start[p] : 0, j, 1};
    }
    qsort(ev, (size_t)n, sizeof *ev, by_time);
    for (int i = 0; i < n; i++) {
        int j = ev[i].j, p = job_pred(&t->js, j);
        if (ev[i].fetch) {
            double bytes = (double)t->cbytes[job_s(&t->js, j)];
            t->fetch[j] =
                pp_links_send(&l, t, t->owner[j], t->worker[j], ev[i].at, bytes) - ev[i].at;
        } else {
            double bytes = (double)pp_job_input_bytes(t, m, j);
            t->xfer[j] =
                pp_links_send(&l, t, t->worker[p], t->worker[j], ev[i].at, bytes) - ev[i].at;
        }
    }
    free(ev);
    pp_links_free(&l);
    return 0;
}
