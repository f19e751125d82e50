/* reference.c - the oracle: the same model trained in one process, with the
 * same microbatches, stage by stage, microbatch by microbatch, with no
 * schedule at all. Every plan must end its steps with these weights. With
 * precision bf16 it keeps the same fp32 master weights and bf16 compute
 * copies as the VM's owners (kernels/model.h).
 *
 * The oracle of a run that skipped a step (--skip-nonfinite with the test
 * hook PP_INJECT_NAN=STEP:..., vm/README.md): with both, the reference
 * leaves step STEP out, no forward, backward or update (the later steps
 * keep their numbers, as in the run), without injecting anything.
 *
 * --deterministic: each B(s,b) computes microbatch b's weight gradient into
 * a zeroed buffer, added to the stage's gradient in microbatch order with
 * pp_determ_add (vm/determ.h), the sum every schedule's deterministic run
 * computes. Without it B accumulates into the gradient (GEMM beta = 1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../kernels/model.h"
#include "determ.h"
#include "save.h"
#include "vm.h"
#include "weights.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The step (from 1) --skip-nonfinite and PP_INJECT_NAN make the run skip,
 * or 0. */
static int left_out(const pp_train_opts *opts)
{
    const char *env = getenv("PP_INJECT_NAN");
    int step;
    return opts->skip_nonfinite && env && sscanf(env, "%d:", &step) == 1 ? step : 0;
}

int pp_run_reference(const pp_model *plan_model, int S, int B, uint64_t plan_id,
                     const pp_dataset *ds, const pp_train_opts *opts)
{
    /* the whole model, whatever tensor the plan says (issue 27): its shards
     * put together are what the reference trains */
    pp_model whole = *plan_model;
    whole.tensor = 1;
    const pp_model *m = &whole;
    int rc = 1;
    char err[4200];
    if (opts->save && pp_save_check(opts->save, err, sizeof err)) { /* before training */
        fprintf(stderr, "ppvm: --save: %s\n", err);
        return 1;
    }
    float **params = calloc((size_t)S, sizeof *params), **grads = calloc((size_t)S, sizeof *grads);
    float **state = calloc((size_t)S, sizeof *state);    /* the optimizer's, NULL for SGD */
    void **compute = calloc((size_t)S, sizeof *compute); /* what F and B read */
    void **stash = calloc((size_t)S, sizeof *stash);
    size_t work_bytes = 0, nmax = 0; /* one workspace, for the largest stage */
    for (int s = 0; s < S; s++) {
        if (pp_stage_workspace_bytes(m, S, s) > work_bytes)
            work_bytes = pp_stage_workspace_bytes(m, S, s);
        if (pp_stage_param_count(m, S, s) > nmax)
            nmax = pp_stage_param_count(m, S, s);
    }
    /* --deterministic: one microbatch's weight gradient, of any stage */
    float *gb = opts->deterministic ? malloc(nmax * sizeof(float) + 1) : NULL;
    void *work = aligned_alloc(64, (work_bytes + 64) / 64 * 64);
    float *act[2] = {malloc(pp_act_bytes(m)), malloc(pp_act_bytes(m))};
    float *grad[2] = {malloc(pp_act_bytes(m)), malloc(pp_act_bytes(m))};
    int32_t *tokens = malloc(pp_tokens_bytes(m));
    if (!params || !grads || !state || !compute || !stash || !work || !act[0] || !act[1] ||
        !grad[0] || !grad[1] || !tokens || (opts->deterministic && !gb)) {
        fprintf(stderr,
                "ppvm: out of memory allocating the reference's buffers (workspace %zu bytes, "
                "activations %zu bytes each)\n",
                work_bytes, pp_act_bytes(m));
        goto out;
    }
    for (int s = 0; s < S; s++) {
        size_t n = pp_stage_param_count(m, S, s);
        params[s] = malloc(n * sizeof(float));
        grads[s] = calloc(n, sizeof(float));
        stash[s] = aligned_alloc(64, (pp_stage_stash_bytes(m, S, s) + 63) / 64 * 64);
        size_t nstate = pp_optimizer_state_floats(m->optimizer) * n;
        state[s] = nstate ? calloc(nstate, sizeof(float)) : NULL;
        if (!params[s] || !grads[s] || !stash[s] || (nstate && !state[s])) {
            fprintf(stderr,
                    "ppvm: out of memory allocating stage %d of the reference (%zu weights, "
                    "stash %zu bytes)\n",
                    s, n, pp_stage_stash_bytes(m, S, s));
            goto out;
        }
        pp_stage_init(m, S, s, opts->seed, params[s]);
        compute[s] = params[s];
        if (m->precision != PP_PREC_FP32) {
            compute[s] = malloc(pp_stage_compute_bytes(m, S, s) + 1);
            if (!compute[s]) {
                fprintf(stderr, "ppvm: out of memory allocating stage %d's compute copy\n", s);
                goto out;
            }
            pp_stage_compute_copy(m, S, s, params[s], compute[s]);
        }
    }
    double samples = (double)B * m->batch, predictions = pp_loss_count(m, B);
    float scale = pp_loss_scale(m, B);
    for (int t = 0; t < opts->steps; t++) {
        double t0 = now(), loss = 0;
        if (t + 1 == left_out(opts)) {
            if (!opts->quiet)
                printf("reference step %4d/%d  left out (PP_INJECT_NAN, --skip-nonfinite)\n", t + 1,
                       opts->steps);
            continue;
        }
        for (int b = 0; b < B; b++) {
            pp_data_microbatch(ds, m, opts->seed, t, b, tokens);
            const void *x = tokens;
            for (int s = 0; s < S; s++) {
                float *out = s < S - 1 ? act[s % 2] : NULL;
                loss += pp_stage_forward(m, S, s, compute[s], x, tokens, stash[s], work, out);
                x = out;
            }
            const float *dout = NULL;
            for (int s = S - 1; s >= 0; s--) {
                float *din = s > 0 ? grad[s % 2] : NULL;
                size_t n = pp_stage_param_count(m, S, s);
                if (gb)
                    memset(gb, 0, n * sizeof *gb);
                pp_stage_backward(m, S, s, compute[s], gb ? gb : grads[s], stash[s], work, dout,
                                  din, scale);
                if (gb)
                    pp_determ_add(grads[s], gb, n, b == 0);
                dout = din;
            }
        }
        if (m->tie && S > 1) { /* one tensor: both copies step on the summed gradient */
            float *g0 = grads[0] + pp_stage_tied_offset(m, S, 0);
            float *g1 = grads[S - 1] + pp_stage_tied_offset(m, S, S - 1);
            for (size_t i = 0; i < pp_tied_floats(m); i++)
                g0[i] = g1[i] = g0[i] + g1[i];
        }
        for (int s = 0; s < S; s++) {
            pp_optimizer_step(m->optimizer, &opts->optim, params[s], grads[s], state[s],
                              pp_stage_param_count(m, S, s), t + 1);
            pp_stage_compute_copy(m, S, s, params[s], compute[s]);
        }
        double dt = now() - t0;
        if (!opts->quiet) {
            printf("reference step %4d/%d  loss %.*f  time %8.2f ms  samples/s %10.0f\n", t + 1,
                   opts->steps, opts->loss_digits, loss / predictions, dt * 1e3, samples / dt);
            fflush(stdout);
        }
        if (!isfinite(loss)) {
            fprintf(stderr, "ppvm: loss is not finite at step %d (lower --lr?)\n", t + 1);
            goto out;
        }
    }
    rc = 0;
    if (opts->save) { /* as a whole (save.h): the previous save stays if this one fails */
        char staging[4300];
        pp_save_staging(opts->save, staging, sizeof staging);
        rc = pp_save_begin(opts->save, err, sizeof err) != 0;
        for (int s = 0; !rc && s < S; s++)
            rc = pp_weights_save(staging, s, plan_id, opts->steps, params[s],
                                 pp_stage_param_count(m, S, s), err, sizeof err) != 0;
        if (!rc)
            rc = pp_save_commit(opts->save, err, sizeof err) != 0;
        if (rc) {
            fprintf(stderr, "ppvm: %s\n", err);
            pp_save_abandon(opts->save);
        }
    }
out:
    for (int s = 0; s < S; s++) {
        if (compute && params && compute[s] != params[s])
            free(compute[s]);
        if (params)
            free(params[s]);
        if (grads)
            free(grads[s]);
        if (state)
            free(state[s]);
        if (stash)
            free(stash[s]);
    }
    free(params);
    free(grads);
    free(state);
    free(compute);
    free(stash);
    free(work);
    free(act[0]);
    free(act[1]);
    free(grad[0]);
    free(grad[1]);
    free(tokens);
    free(gb);
    return rc;
}
