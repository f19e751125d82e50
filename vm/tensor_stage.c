/* tensor_stage.c - whole stages of a tensor-parallel run gathered from and
 * cut into the shards its ranks hold (tensor_stage.h). */
#include "tensor_stage.h"

#include <mpi.h>
#include <stdlib.h>

#include "../kernels/tensor_shard.h"
#include "check.h"

#define SHARD_TAG 32767 /* MPI's smallest allowed largest tag; no plan message is in flight */

/* State floats per weight (AdamW's two moments, one array after the other). */
static size_t moments(const pp_plan *p) { return pp_optimizer_state_floats(p->model.optimizer); }

int pp_tensor_stage_gather(const pp_plan *p, const pp_backend *be, void *st, int s, int first,
                           int me, float **w, float **opt, char *err, size_t errlen)
{
    int S = (int)p->S, T = (int)pp_model_tensor(&p->model);
    *w = *opt = NULL;
    if (me / T != first / T)
        return 0;
    size_t n = pp_stage_param_count(&p->model, S, s), k = moments(p), per = n * (1 + k);
    float *mine = malloc(per * sizeof *mine + 1);
    if (mine)
        be->stage_get(st, s, mine, k ? mine + n : NULL, NULL);
    if (me != first) { /* sent even when out of memory (then nothing): first never waits */
        int have = mine != NULL;
        mpiCheck(MPI_Send(mine, have ? (int)per : 0, MPI_FLOAT, first, SHARD_TAG, MPI_COMM_WORLD));
        free(mine);
        if (!have)
            snprintf(err, errlen, "out of memory gathering stage %d", s);
        return have ? 0 : -1;
    }
    size_t wn = pp_stage_whole_count(&p->model, S, s);
    float *whole = malloc(wn * (1 + k) * sizeof *whole + 1);
    int rc = mine && whole ? 0 : -1;
    for (int t = 0; t < T; t++) {
        if (t > 0) {
            MPI_Status stat;
            int got = 0;
            float dummy;
            mpiCheck(MPI_Probe(first + t, SHARD_TAG, MPI_COMM_WORLD, &stat));
            mpiCheck(MPI_Get_count(&stat, MPI_FLOAT, &got));
            int fits = !rc && (size_t)got == per;
            mpiCheck(MPI_Recv(fits ? (void *)mine : &dummy, fits ? got : 0, MPI_FLOAT, first + t,
                              SHARD_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            if (!fits)
                rc = -1;
        }
        if (rc)
            continue;
        pp_stage_shard_put(&p->model, S, s, t, mine, whole);
        for (size_t j = 0; j < k; j++) /* each moment array is laid out as the weights */
            pp_stage_shard_put(&p->model, S, s, t, mine + n * (1 + j), whole + wn * (1 + j));
    }
    free(mine);
    if (rc) {
        snprintf(err, errlen, "out of memory (or a shard missing) gathering stage %d", s);
        free(whole);
        return -1;
    }
    *w = whole;
    *opt = k ? whole + wn : NULL;
    return 0;
}

void pp_tensor_stage_cut(const pp_plan *p, int s, int t, const float *w, const float *opt,
                         float *sw, float *sopt)
{
    int S = (int)p->S;
    size_t n = pp_stage_param_count(&p->model, S, s), wn = pp_stage_whole_count(&p->model, S, s);
    pp_stage_shard_cut(&p->model, S, s, t, w, sw);
    for (size_t j = 0; opt && j < moments(p); j++)
        pp_stage_shard_cut(&p->model, S, s, t, opt + wn * j, sopt + n * j);
}
