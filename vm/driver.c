/* driver.c - ppvm's one driver: a rank's run of its plan on a backend
 * (vm/backend.h), the same on cpu and cuda. It sets the backend up and has
 * the ranks agree that every rank could; prints the memory line; runs the
 * step loop (a barrier, the plan's instructions in order, the backend's end
 * of step, the step's line on rank 0: summed loss, slowest rank's time);
 * stops every rank together at a loss or gradient that is not finite, or
 * skips that step on every rank (--skip-nonfinite), or stops every rank
 * after the step in which one was sent SIGTERM or SIGINT; keeps the
 * watchdog's progress record (vm/guard.h); does --profile's and --save's
 * collective work around the backend's hooks; and calls vm/checkpoint.c
 * for --resume (before the first step) and --checkpoint-every (after every
 * N-th step, and when a signal stops the run). Its functions return
 * status; failed MPI calls end every rank (mpiCheck). */
#include <float.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "../isa/tensor.h"
#include "../kernels/tensor_shard.h"
#include "agree.h"
#include "backend.h"
#include "blas_core.h"
#include "check.h"
#include "checkpoint.h"
#include "guard.h"
#include "memcheck.h"
#include "profile.h"
#include "progress.h"
#include "save.h"
#include "tensor_stage.h"
#include "vm.h"
#include "vmbench.h"
#include "weights.h"

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

/* Offload's host pool per rank (the plan's host figure), a line of its own
 * only when some rank has one, so plans without offload print as before.
 * Collective. */
static void print_host_memory(const pp_run *run, unsigned long long host)
{
    const pp_plan *p = run->p;
    unsigned long long *mem = run->me == 0 ? malloc(p->world * sizeof *mem) : NULL, any = 0;
    mpiCheck(MPI_Gather(&host, 1, MPI_UNSIGNED_LONG_LONG, mem, 1, MPI_UNSIGNED_LONG_LONG, 0,
                        MPI_COMM_WORLD));
    for (uint32_t r = 0; mem && r < p->world; r++)
        any |= mem[r];
    if (run->me == 0 && mem && any && !run->opts->quiet) {
        printf("host memory (offloaded stashes) allocated at start-up, bytes per rank:");
        for (uint32_t r = 0; r < p->world; r++)
            printf(" %llu", mem[r]);
        printf("\n");
    }
    free(mem);
}

/* ---- the end-of-step agreement ------------------------------------------------
 * One allreduce of four doubles per step (it replaced the loss's reduce and
 * broadcast and the time's reduce): the step's loss (summed), this rank's
 * time (the slowest), a stop signal received (the largest number), and the
 * first non-finite number found (the smallest key, finding_key). Every rank
 * learns all four, so every rank stops, skips or goes on alike; no rank
 * calls a collective inside a step, where a peer may be inside a transfer.
 * A contiguous type of four, so that MPI never hands the operation part of
 * one. */
enum { AG_LOSS, AG_TIME, AG_SIGNAL, AG_BAD, AG_N };
#define NO_FINDING DBL_MAX

static void agree_op(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const double *a = in;
    double *b = inout;
    for (int i = 0; i < *len; i++, a += AG_N, b += AG_N) {
        b[AG_LOSS] += a[AG_LOSS];
        b[AG_TIME] = fmax(a[AG_TIME], b[AG_TIME]);
        b[AG_SIGNAL] = fmax(a[AG_SIGNAL], b[AG_SIGNAL]);
        b[AG_BAD] = fmin(a[AG_BAD], b[AG_BAD]);
    }
}

/* Which finding is reported when several ranks found one: the first in
 * pp_nonfinite_order, then the lower rank. Exact in a double for any plan
 * ppc makes. */
static double finding_key(const pp_plan *p, const pp_nonfinite *f, int me)
{
    if (f->kind == PP_NF_NONE)
        return NO_FINDING;
    return pp_nonfinite_order(f, (int)p->S, (int)p->B) * p->world + me;
}

/* The finding in words, for the rank that made it: "step 3, stage 1,
 * microbatch 2: the loss is not finite (nan)". */
static void say_finding(const pp_run *run, const pp_nonfinite *f, const char *then)
{
    const pp_plan *p = run->p;
    int step = run->step + 1;
    if (f->kind == PP_NF_LOSS && f->stage < 0)
        pp_vm_error(run->me,
                    "step %d: this rank's loss is not finite (%g; this backend checks "
                    "only its summed loss); %s",
                    step, f->value, then);
    else if (f->kind == PP_NF_LOSS)
        pp_vm_error(run->me, "step %d, stage %d, microbatch %d: the loss is not finite (%g); %s",
                    step, f->stage, f->mb, f->value, then);
    else if (f->kind == PP_NF_INPUT_GRAD)
        pp_vm_error(run->me,
                    "step %d, stage %d, microbatch %d: the input gradient is not finite "
                    "(%g); %s",
                    step, f->stage, f->mb, f->value, then);
    else
        pp_vm_error(run->me,
                    "step %d, stage %d: the weight gradients (summed over microbatches "
                    "0 to %u) are not finite (%g) before its OptimizerStep; %s",
                    step, f->stage, p->B - 1, f->value, then);
}

/* What this rank found in the step: the backend's first finding, or
 * without that hook its summed loss. */
static void find_nonfinite(const pp_backend *be, void *st, double loss, pp_nonfinite *f)
{
    *f = (pp_nonfinite){.kind = PP_NF_NONE, .stage = -1, .mb = -1};
    if (be->nonfinite)
        be->nonfinite(st, f);
    else if (!isfinite(loss))
        *f = (pp_nonfinite){.kind = PP_NF_LOSS, .stage = -1, .mb = -1, .value = loss};
}

/* Every rank, once they agreed on stop signal `sig` after run->step steps:
 * rank 0 says so. Returns sig. */
static int stopped(const pp_run *run, int sig)
{
    if (run->me == 0)
        pp_vm_error(-1, "stopped by %s after step %d of %d (exit status %d)",
                    pp_guard_signal_name(sig), run->step, run->opts->steps, 128 + sig);
    return sig;
}

/* A stop signal `sig`, agreed by every rank after run->done steps: with
 * checkpoints on, first a checkpoint of those steps unless the last one
 * written (`*saved`) holds them, so that a scheduler's end of allocation
 * loses no step (--grace bounds the time that may take: vm/guard.c). The
 * signal's number, or -1 on every rank when the checkpoint failed (said). */
/* pp_checkpoint_write of run->done steps (>= 1) under the watchdog's own
 * phase for it. */
static int checkpoint(const pp_run *run, const pp_backend *be, void *st)
{
    pp_guard_phase(PP_AT_CHECKPOINT, run->done - 1);
    return pp_checkpoint_write(run, be, st);
}

static int stop(pp_run *run, const pp_backend *be, void *st, int sig, int *saved)
{
    if (run->opts->checkpoint_every && run->done > *saved) {
        if (checkpoint(run, be, st))
            return -1;
        *saved = run->done;
    }
    return stopped(run, sig);
}

/* The step loop, from the step --resume restored (run->done). 0; -1 on
 * every rank when a step's loss or a gradient was not finite (without
 * --skip-nonfinite; the rank that found it and rank 0 say so) or a
 * checkpoint could not be written (said); or the stop signal's number on
 * every rank when one was received (rank 0 says so) and the step it ended
 * in is done. */
/* --no-compute: the step's instructions, each timed to its opcode (one
 * clock read after each, vmbench.h); the first step of several warms up
 * and is not counted. */
static void run_timed(pp_run *run, const pp_backend *be, void *st, pp_vmbench *bench)
{
    const pp_plan *p = run->p;
    pp_vmbench_step_begin(bench, run->step, run->opts->steps); /* (no --resume: refused) */
    run->waited_ns = 0;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        pp_guard_instr(i, &p->code[i]);
        be->exec(st, &p->code[i]);
        pp_vmbench_tick(bench, p->code[i].op, &run->waited_ns);
    }
}

static int train(pp_run *run, const pp_backend *be, void *st, MPI_Datatype agreement, MPI_Op agree,
                 pp_vmbench *bench)
{
    const pp_plan *p = run->p;
    const pp_train_opts *opts = run->opts;
    double samples = (double)p->B * p->model.batch,
           predictions = pp_loss_count(&p->model, (int)p->B);
    int saved = run->done; /* the steps the newest checkpoint holds */
    for (run->step = run->done; run->step < opts->steps; run->step++) {
        pp_checkpoint_test_kill(run, "step", run->step + 1);
        pp_guard_phase(PP_AT_BARRIER, run->step);
        /* the barrier that times steps from a common start, as an allreduce
         * of the stop signal, so that a signal between steps (or before
         * the first) stops every rank before the next one */
        int sig = pp_guard_signal(), any;
        pp_progress_allreduce(&sig, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); /* sleeps */
        if (any)
            return stop(run, be, st, any, &saved);
        pp_guard_phase(PP_AT_STEP, run->step);
        run->waited_ns = 0;
        run->t0 = MPI_Wtime();
        if (bench) /* --no-compute: each instruction timed (vmbench.h) */
            run_timed(run, be, st, bench);
        else if (!be->step || !be->step(st)) /* a whole step at once (a CUDA graph), or */
            for (uint32_t i = 0; i < p->ninstr; i++) {
                pp_guard_instr(i, &p->code[i]);
                be->exec(st, &p->code[i]);
            }
        pp_guard_phase(PP_AT_STEP_END, run->step);
        double mine_loss = be->end_step(st);
        if (bench)
            pp_vmbench_step_end(bench);
        pp_nonfinite found;
        find_nonfinite(be, st, mine_loss, &found);
        if (bench) /* no number was computed: nothing to find */
            found = (pp_nonfinite){.kind = PP_NF_NONE, .stage = -1, .mb = -1};
        /* tensor = T: the T ranks of a worker compute the same loss; rank
         * t = 0's counts */
        double counted = p->rank % pp_model_tensor(&p->model) ? 0.0 : mine_loss;
        double mine[AG_N] = {counted, MPI_Wtime() - run->t0, pp_guard_signal(),
                             finding_key(p, &found, run->me)};
        double all[AG_N];
        pp_progress_allreduce(mine, all, 1, agreement, agree, MPI_COMM_WORLD); /* sleeps */
        double loss = all[AG_LOSS], dt = all[AG_TIME];
        if (run->prof)
            pp_profile_step(run->prof, run->step, dt, mine[AG_TIME]);
        if (run->me == 0 && !opts->quiet && bench) { /* no loss: none was computed */
            printf("step %4d/%d  no compute  time %8.3f ms  instructions %u on rank 0\n",
                   run->step + 1, opts->steps, dt * 1e3, p->ninstr);
            fflush(stdout);
        } else if (run->me == 0 && !opts->quiet) {
            printf("step %4d/%d  loss %.*f  time %8.2f ms  samples/s %10.0f\n", run->step + 1,
                   opts->steps, opts->loss_digits, loss / predictions, dt * 1e3, samples / dt);
            fflush(stdout);
        }
        int bad = all[AG_BAD] != NO_FINDING;
        if (bad && all[AG_BAD] == mine[AG_BAD]) {
            char then[96];
            snprintf(
                then, sizeof then,
                opts->skip_nonfinite
                    ? "step %d skipped on every rank (weights and optimizer state as before it)"
                    : "every rank stops",
                run->step + 1);
            say_finding(run, &found, then);
            fflush(stderr);
        }
        if (bad && !opts->skip_nonfinite) {
            if (run->me == 0)
                pp_vm_error(-1, "%s not finite at step %d (lower --lr?, or --skip-nonfinite)",
                            isfinite(loss) ? "a gradient is" : "loss is", run->step + 1);
            return -1;
        }
        if (opts->skip_nonfinite)
            be->commit(st, !bad);
        run->done = run->step + 1;
        if (opts->checkpoint_every && run->done % opts->checkpoint_every == 0) {
            if (checkpoint(run, be, st))
                return -1;
            saved = run->done;
        }
        if (all[AG_SIGNAL] > 0) {
            run->step++; /* the steps done */
            return stop(run, be, st, (int)all[AG_SIGNAL], &saved);
        }
    }
    return 0;
}

/* --save under tensor = T (kernels/tensor_shard.h): the T ranks of the
 * lowest owner's worker, first .. first+T-1, send their shards of stage s
 * to first, which writes the whole stage, so a save (and --compare
 * against the reference) means the same whatever T was. 0, or -1 with err
 * (on the rank that failed; every member still takes part). */
static int save_shards(const pp_run *run, const pp_backend *be, void *st, int s, int first,
                       const char *staging, char *err, size_t errlen)
{
    const pp_plan *p = run->p;
    float *whole, *opt;
    if (pp_tensor_stage_gather(p, be, st, s, first, run->me, &whole, &opt, err, errlen))
        return -1;
    int rc = 0;
    if (whole)
        rc = pp_weights_save(staging, s, p->plan_id, run->done, whole,
                             pp_stage_whole_count(&p->model, (int)p->S, s), err, errlen)
                 ? -1
                 : 0;
    free(whole);
    return rc;
}

/* --save: the lowest-ranked owner of each stage writes it, so a replicated
 * stage is saved once, into DIR.ppvm-new, which rank 0 then puts in DIR's
 * place once every rank has written (vm/save.h): a save that fails on any
 * rank leaves DIR's previous save whole. Collective; 0, or -1 on every rank
 * (the lowest failing rank says why). */
static int save_weights(const pp_run *run, const pp_backend *be, void *st)
{
    const pp_plan *p = run->p;
    int S = (int)p->S, me = run->me, ok = 1;
    char err[4400] = "", staging[4300];
    pp_save_staging(run->opts->save, staging, sizeof staging);
    if (me == 0 && pp_save_begin(run->opts->save, err, sizeof err))
        ok = 0;
    if (!pp_vm_all_ok(ok, me, err))
        return -1;
    for (int s = 0; s < S; s++) {
        int mine = (p->stage_role[s] & PP_ROLE_OWNER) ? me : (int)p->world, first;
        mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        if (pp_model_tensor(&p->model) > 1) { /* shards: the whole stage is saved */
            if (save_shards(run, be, st, s, first, staging, err, sizeof err))
                ok = 0;
            continue;
        }
        if (first != me || !ok)
            continue;
        size_t n = pp_stage_param_count(&p->model, S, s);
        float *host = malloc(n * sizeof *host + 1);
        if (!host) {
            snprintf(err, sizeof err, "out of memory saving stage %d", s);
            ok = 0;
            continue;
        }
        be->weights(st, s, host);
        if (pp_weights_save(staging, s, p->plan_id, run->done, host, n, err, sizeof err))
            ok = 0;
        free(host);
    }
    if (!pp_vm_all_ok(ok, me, err)) {
        if (me == 0)
            pp_save_abandon(run->opts->save);
        return -1;
    }
    pp_checkpoint_test_kill(run, "save", run->done);
    if (me == 0 && pp_save_commit(run->opts->save, err, sizeof err))
        ok = 0;
    return pp_vm_all_ok(ok, me, err) ? 0 : -1;
}

/* --save, before the first step: the directory exists (or is made), holds
 * nothing but an earlier save (rank 0, which replaces it: vm/save.h) and
 * is writable on every rank that will write a stage (its lowest-ranked
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
    if (run->me == 0 ? pp_save_check(run->opts->save, err, sizeof err)
                     : writes && pp_dir_writable(run->opts->save, run->me, err, sizeof err))
        ok = 0;
    char msg[4500];
    snprintf(msg, sizeof msg, "--save: %s", err);
    return pp_vm_all_ok(ok, run->me, msg) ? 0 : -1;
}

/* Whether this backend can do what the options ask of it; NULL, or why
 * not. */
static const char *unsupported(const pp_train_opts *opts, const pp_backend *be)
{
    static char why[160];
    if (opts->skip_nonfinite && !be->commit) {
        snprintf(why, sizeof why,
                 "--skip-nonfinite: the %s backend cannot undo a step's optimizer "
                 "updates (use --backend cpu)",
                 be->name);
        return why;
    }
    if (opts->graph == PP_GRAPH_ON && !be->step) {
        snprintf(why, sizeof why,
                 "--graph on: the %s backend runs no CUDA graphs (use --backend cuda, or "
                 "--graph auto)",
                 be->name);
        return why;
    }
    if (getenv("PP_INJECT_NAN") && opts->no_compute) {
        snprintf(why, sizeof why,
                 "PP_INJECT_NAN: --no-compute computes nothing to put a NaN "
                 "into (unset it, or drop --no-compute)");
        return why;
    }
    if (getenv("PP_INJECT_NAN") && !be->nonfinite) {
        snprintf(why, sizeof why,
                 "PP_INJECT_NAN: the %s backend has no such test hook (use "
                 "--backend cpu)",
                 be->name);
        return why;
    }
    return NULL;
}

/* Every rank runs in the same mode: a rank of --no-compute moves 4-byte
 * messages, which a rank that computes would refuse as truncated (MPI's
 * error, ending the run without saying why). Collective; 1 when they do,
 * else 0 on every rank, rank 0 saying so. */
static int same_mode(const pp_run *run)
{
    int mine[2] = {run->opts->no_compute, -run->opts->no_compute}, most[2];
    mpiCheck(MPI_Allreduce(mine, most, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return pp_vm_all_ok(most[0] == -most[1], run->me,
                        "--no-compute was given to some ranks and not to others (expected one "
                        "command line for every rank)");
}

int pp_run_plan(const pp_plan *p, const pp_dataset *ds, const pp_train_opts *opts,
                const pp_backend *be)
{
    pp_run run = {.p = p, .ds = ds, .opts = opts};
    char err[1024] = "";
    int rc = 1, trained;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &run.me));
    pp_guard_heartbeats(); /* a stalled rank named by every watchdog (or, failing, guessed) */
    if (!pp_flags_agree(&run, be->name)) /* before any call that a flag decides */
        return 1;
    const char *why = unsupported(opts, be);
    if (!pp_vm_all_ok(why == NULL, run.me, why ? why : ""))
        return 1;
    if (!same_mode(&run))
        return 1;
    pp_vmbench counters = {.steps = 0}, *bench = opts->no_compute ? &counters : NULL;
    if (!pp_memory_fits(&run, be->name)) /* before the OOM killer would end it mid-start */
        return 1;
    void *st = be->create(&run, err, sizeof err);
    if (!pp_vm_all_ok(st != NULL, run.me, err)) {
        if (st)
            be->destroy(st);
        return 1;
    }
    MPI_Datatype agreement;
    MPI_Op agree;
    mpiCheck(MPI_Type_contiguous(AG_N, MPI_DOUBLE, &agreement));
    mpiCheck(MPI_Type_commit(&agreement));
    mpiCheck(MPI_Op_create(agree_op, 1, &agree));
    be->connect(st);
    if (opts->save && check_save_dir(&run))
        goto out;
    if (opts->resume) { /* before the checkpoint directory is made: it may be this one */
        pp_guard_phase(PP_AT_RESUME, 0); /* its reads have a --timeout of their own */
        int resumed = pp_checkpoint_resume(&run, be, st);
        pp_guard_phase(PP_AT_STARTUP, 0);
        if (resumed)
            goto out;
    }
    if (opts->checkpoint_every && pp_checkpoint_prepare(&run))
        goto out;
    print_memory(&run, be->allocated(st));
    print_host_memory(&run, be->host_allocated ? be->host_allocated(st) : 0);
    const char *core =
        run.me == 0 && !opts->quiet && !getenv("OPENBLAS_CORETYPE") ? pp_blas_better_core() : NULL;
    if (core) /* (bin/pprun and make's tests set it: blas_core.h) */
        printf("note: OpenBLAS runs its %s kernels, older than this CPU allows; "
               "OPENBLAS_CORETYPE=%s (bin/pprun sets it) runs faster ones\n",
               pp_blas_core_name(), core);
    if (opts->profile && !(run.prof = pp_profile_open(opts->profile, p, opts->steps, run.me)))
        goto out;
    trained = train(&run, be, st, agreement, agree, bench);
    pp_guard_phase(PP_AT_FINISH, run.step);
    if (bench && trained == 0) /* every rank alike: the step loop's agreement */
        pp_vmbench_report(bench, p, run.me, (int)p->world);
    if (trained < 0) {
        pp_profile_discard(run.prof);
        goto out;
    }
    rc = 0;
    if (trained > 0) { /* stopped by signal `trained` after run.step steps */
        rc = 128 + trained;
        pp_profile_discard(run.prof); /* it covers fewer steps than it was opened for */
        run.prof = NULL;              /* (its checkpoint, if any, train's stop wrote) */
    }
    if (run.prof) {
        double latency = 0, bandwidth = 0, burst = 0;
        int link = be->link(st, pp_profile_probe_bytes(p), pp_act_bytes(&p->model), &latency,
                            &bandwidth, &burst);
        if (link > 0 && be->link_shape) { /* issue 29: ring or tree, duplex or not */
            size_t n = pp_profile_probe_bytes(p);
            int shape = be->link_shape(st, n, latency, bandwidth, burst);
            if (shape >= 0)
                pp_profile_link_shape(run.prof, shape);
            link = shape < 0 ? -1 : link;
        }
        if (link > 0 && be->reduce_link) { /* issue 29: the all-reduce as the steps make it */
            double rl = 0, rb = 0;
            int reduce = be->reduce_link(st, pp_profile_reduce_bytes(p), &rl, &rb);
            if (reduce > 0)
                pp_profile_reduce(run.prof, rl, rb, (int)p->world);
            link = reduce < 0 ? -1 : link;
        }
        if (link >= 0 && be->tensor_link) { /* tensor = T > 1: the all-reduce's link too */
            double tl = 0, tb = 0;
            int tensor = be->tensor_link(st, pp_tensor_allreduce_bytes(&p->model), &tl, &tb);
            if (tensor > 0)
                pp_profile_tensor(run.prof, tl, tb);
            link = tensor < 0 ? -1 : link;
        }
        if (link >= 0 && be->host_link) { /* offload's copies (issue 26) */
            double hb = 0;
            int host = be->host_link(st, pp_profile_host_bytes(p), &hb);
            if (host > 0)
                pp_profile_host(run.prof, hb);
            link = host < 0 ? -1 : link;
        }
        if (link < 0) /* every rank; said */
            pp_profile_discard(run.prof);
        else
            pp_profile_backend(run.prof, be->name);
        if (link < 0 || pp_profile_finish(run.prof, link, latency, bandwidth, burst,
                                          be->profile_overlap)) /* frees */
            rc = 1;
        run.prof = NULL;
    }
    /* --save writes the weights of the steps done, a signal's stop too */
    if (opts->save && save_weights(&run, be, st))
        rc = 1;
out:
    run.prof = NULL;
    MPI_Op_free(&agree);
    MPI_Type_free(&agreement);
    be->destroy(st);
    return rc;
}
