/* driver.c - ppvm's one driver: a rank's run of its plan on a backend
 * (vm/backend.h), the same on cpu and cuda. It sets the backend up and has
 * the ranks agree that every rank could; prints the memory line; runs the
 * step loop (a barrier, the plan's instructions in order, the backend's end
 * of step, the step's line on rank 0: summed loss, slowest rank's time);
 * stops every rank together at a loss that is not finite; and does
 * --profile's and --save's collective work around the backend's hooks, and
 * calls vm/checkpoint.c for --resume (before the first step) and
 * --checkpoint-every (after every N-th). Its functions return status;
 * failed MPI calls end every rank (mpiCheck). */
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "check.h"
#include "checkpoint.h"
#include "profile.h"
#include "vm.h"
#include "weights.h"

void pp_vm_error(int rank, const char *fmt, ...)
{
    char msg[4608];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rank >= 0)
        fprintf(stderr, "ppvm: rank %d: %s\n", rank, msg);
    else
        fprintf(stderr, "ppvm: %s\n", msg);
}

int pp_vm_all_ok(int ok, int me, const char *msg)
{
    int size, first, mine;
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    mine = ok ? size : me;
    mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == me)
        pp_vm_error(me, "%s", msg);
    return first == size;
}

/* What each rank allocated at start-up; ppc's report states the same
 * (plan memory). Collective. */
static void print_memory(const pp_run *run, unsigned long long allocated)
{
    const pp_plan *p = run->p;
    unsigned long long *mem = run->me == 0 ? malloc(p->world * sizeof *mem) : NULL;
    mpiCheck(MPI_Gather(&allocated, 1, MPI_UNSIGNED_LONG_LONG, mem, 1, MPI_UNSIGNED_LONG_LONG, 0,
                        MPI_COMM_WORLD));
    if (run->me == 0 && mem && !run->opts->quiet) {
        printf("memory allocated at start-up, bytes per rank:");
        for (uint32_t r = 0; r < p->world; r++)
            printf(" %llu", mem[r]);
        printf("\n");
    }
    free(mem);
}

/* The step loop, from the step --resume restored (run->done). 0, or -1 on
 * every rank when a step's loss is not finite (rank 0 says so) or a
 * checkpoint could not be written (said). */
static int train(pp_run *run, const pp_backend *be, void *st)
{
    const pp_plan *p = run->p;
    const pp_train_opts *opts = run->opts;
    double samples = (double)p->B * p->model.batch, predictions = pp_loss_count(&p->model, (int)p->B);
    for (run->step = run->done; run->step < opts->steps; run->step++) {
        pp_checkpoint_test_kill(run, "step", run->step + 1);
        mpiCheck(MPI_Barrier(MPI_COMM_WORLD)); /* time steps from a common start */
        run->t0 = MPI_Wtime();
        for (uint32_t i = 0; i < p->ninstr; i++)
            be->exec(st, &p->code[i]);
        double mine_loss = be->end_step(st);
        double loss = 0, dt, mine = MPI_Wtime() - run->t0;
        mpiCheck(MPI_Reduce(&mine_loss, &loss, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
        mpiCheck(MPI_Reduce(&mine, &dt, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
        if (run->me == 0 && !opts->quiet) {
            printf("step %4d/%d  loss %.*f  time %8.2f ms  samples/s %10.0f\n", run->step + 1,
                   opts->steps, opts->loss_digits, loss / predictions, dt * 1e3, samples / dt);
            fflush(stdout);
        }
        /* rank 0's sum, so that every rank stops at the same step */
        mpiCheck(MPI_Bcast(&loss, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        if (!isfinite(loss)) {
            if (run->me == 0)
                pp_vm_error(-1, "loss is not finite at step %d (lower --lr?)", run->step + 1);
            return -1;
        }
        run->done = run->step + 1;
        if (opts->checkpoint_every && run->done % opts->checkpoint_every == 0 &&
            pp_checkpoint_write(run, be, st))
            return -1;
    }
    return 0;
}

/* --save: the lowest-ranked owner of each stage writes it, so a replicated
 * stage is saved once. Collective; 0, or -1 on a rank that could not write
 * (it says why). */
static int save_weights(const pp_run *run, const pp_backend *be, void *st)
{
    const pp_plan *p = run->p;
    int S = (int)p->S, me = run->me, rc = 0;
    char err[4200];
    for (int s = 0; s < S; s++) {
        int mine = (p->stage_role[s] & PP_ROLE_OWNER) ? me : (int)p->world, first;
        mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        if (first != me)
            continue;
        size_t n = pp_stage_param_count(&p->model, S, s);
        float *host = malloc(n * sizeof *host + 1);
        if (!host) {
            pp_vm_error(me, "out of memory saving stage %d", s);
            rc = -1;
            continue;
        }
        be->weights(st, s, host);
        if (pp_weights_save(run->opts->save, s, p->plan_id, run->done, host, n, err, sizeof err)) {
            pp_vm_error(me, "%s", err);
            rc = -1;
        }
        free(host);
    }
    return rc;
}

/* --save, before the first step: the directory exists (or is made) and is
 * writable on every rank that will write a stage (its lowest-ranked
 * owner), so that a bad path fails now rather than after the last step.
 * Collective; 0, or -1 on every rank (the lowest failing rank says why). */
static int check_save_dir(const pp_run *run)
{
    const pp_plan *p = run->p;
    int writes = 0, ok = 1;
    char err[4400] = "";
    for (uint32_t s = 0; s < p->S; s++) {
        int mine = (p->stage_role[s] & PP_ROLE_OWNER) ? run->me : (int)p->world, first;
        mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        writes |= first == run->me;
    }
    if (writes && pp_dir_writable(run->opts->save, run->me, err, sizeof err))
        ok = 0;
    char msg[4500];
    snprintf(msg, sizeof msg, "--save: %s", err);
    return pp_vm_all_ok(ok, run->me, msg) ? 0 : -1;
}

int pp_run_plan(const pp_plan *p, const pp_dataset *ds, const pp_train_opts *opts,
                const pp_backend *be)
{
    pp_run run = {.p = p, .ds = ds, .opts = opts};
    char err[1024] = "";
    int rc = 1;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &run.me));
    void *st = be->create(&run, err, sizeof err);
    if (!pp_vm_all_ok(st != NULL, run.me, err)) {
        if (st)
            be->destroy(st);
        return 1;
    }
    be->connect(st);
    if ((opts->save && check_save_dir(&run)) ||
        (opts->checkpoint_every && pp_checkpoint_prepare(&run)) ||
        (opts->resume && pp_checkpoint_resume(&run, be, st)))
        goto out;
    print_memory(&run, be->allocated(st));
    if (opts->profile && !(run.prof = pp_profile_open(opts->profile, p, opts->steps, run.me)))
        goto out;
    if (train(&run, be, st)) {
        pp_profile_discard(run.prof);
        goto out;
    }
    rc = 0;
    if (run.prof) {
        double latency = 0, bandwidth = 0;
        int link = be->link(st, pp_profile_probe_bytes(p), &latency, &bandwidth);
        if (link < 0) /* every rank; said */
            pp_profile_discard(run.prof);
        if (link < 0 || pp_profile_finish(run.prof, link, latency, bandwidth)) /* frees it */
            rc = 1;
        run.prof = NULL;
    }
    if (opts->save && save_weights(&run, be, st))
        rc = 1;
out:
    run.prof = NULL;
    be->destroy(st);
    return rc;
}
