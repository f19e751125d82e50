/* checkpoint.c - ppvm's checkpoints and --resume (checkpoint.h;
 * vm/README.md, "Checkpoints").
 *
 * Writing is collective and ordered so that a crash (of any rank, at any
 * point) leaves the previous checkpoint whole: rank 0 makes DIR/step-N
 * (removing a manifest left there by an earlier run first); each stage's
 * lowest-ranked owner writes its stage files, each to a temporary name,
 * fsynced, renamed and its directory fsynced (weights.c); the ranks agree
 * that every file is written; only then rank 0 writes the manifest, the
 * same way, with each file's size and crc32; and only after that removes
 * the checkpoints beyond --checkpoint-keep. A directory without a manifest
 * is never resumed from, and a manifest names exactly the bytes its files
 * must hold, so a torn or mixed checkpoint is refused, not half-loaded.
 *
 * Resuming is collective too: rank 0 lists DIR's step directories, newest
 * first; for each, every rank checks the manifest and loads the files of
 * the stages it owns, and the ranks agree; the first checkpoint every rank
 * could load is restored (the backend's stage_set), else the lowest rank
 * that could not says why and the next older one is tried. Since
 * microbatch b of step t depends on (seed, t, b) only, and the optimizer
 * step and learning rate on t, a run resumed at step t continues exactly
 * as the uninterrupted run did. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../isa/openfile.h"
#include "../kernels/model.h"
#include "check.h"
#include "ckpt_tied.h"
#include "guard.h"
#include "tensor_stage.h"
#include "vm.h"
#include "weights.h"

#define MANIFEST_MAGIC "pp-checkpoint 1"
#define PATHLEN 4200

/* A stage's files: what each holds and when it exists. */
enum { K_WEIGHTS, K_OPT, K_BF16, K_COUNT };
static const struct {
    const char *ext, *magic;
} kinds[K_COUNT] = {{"w", "PPWT"}, {"opt", "PPOS"}, {"bf16", "PPBF"}};

/* Elements (and their bytes) of stage s's file of kind k; 0 elements
 * when the plan has no such file (no optimizer state, an fp32 run). */
static uint64_t kind_count(const pp_model *plan_model, int S, int s, int k, uint32_t *elem)
{
    /* a checkpoint holds whole stages, whatever the run's tensor (issue 27) */
    pp_model whole = *plan_model;
    whole.tensor = 1;
    const pp_model *m = &whole;
    /* a tied model's stage S-1 stops before its head (ckpt_tied.h) */
    size_t n = pp_stage_param_count(m, S, s) - pp_ckpt_tied_cut(m, S, s);
    *elem = k == K_BF16 ? 2 : 4;
    if (k == K_WEIGHTS)
        return n;
    if (k == K_OPT)
        return (uint64_t)pp_optimizer_state_floats(m->optimizer) * n;
    return m->precision == PP_PREC_FP32 ? 0 : n;
}

static int kind_exists(const pp_model *m, int k)
{
    return k == K_WEIGHTS || (k == K_OPT && pp_optimizer_state_floats(m->optimizer)) ||
           (k == K_BF16 && m->precision != PP_PREC_FP32);
}

static void step_dir(char *buf, size_t n, const char *dir, int step)
{
    snprintf(buf, n, "%s/step-%06d", dir, step);
}

/* The model as a run of it must match to resume another plan's checkpoint
 * (--reshard): everything that decides the stages' parameters, their
 * optimizer and the samples of a step. */
static void fingerprint(const pp_plan *p, char *buf, size_t n)
{
    const pp_model *m = &p->model;
    int len = snprintf(buf, n,
                       "kind=%s vocab=%u context=%u embed=%u heads=%u ffn=%u batch=%u "
                       "optimizer=%s precision=%s S=%u B=%u layers=",
                       pp_model_kind_name(m->kind), pp_model_vocab(m), m->context, m->embed,
                       m->heads, m->ffn, m->batch, pp_optimizer_name(m->optimizer),
                       pp_precision_name(m->precision), p->S, p->B);
    for (uint32_t s = 0; s < p->S && len > 0 && (size_t)len < n; s++)
        len +=
            snprintf(buf + len, n - (size_t)len, "%s%u", s ? "," : "", pp_model_layers(m, (int)s));
}

static uint32_t data_crc(const pp_dataset *ds)
{
    return pp_crc32((const uint8_t *)ds->tokens, ds->len * sizeof *ds->tokens);
}

/* ---- the manifest ------------------------------------------------------------ */

typedef struct {
    char name[64];
    uint64_t size;
    uint32_t crc;
} mfile;

typedef struct {
    uint64_t plan_id, seed;
    int step, complete;
    uint64_t data_tokens;
    uint32_t data_crc;
    char model[1024];
    int nfiles;
    mfile *files;
} manifest;

/* Reads path; 0, or -1 with err (which names it). */
static int manifest_read(const char *path, manifest *mf, char *err, size_t errlen)
{
    char line[2048];
    int cap = 0, magic = 0;
    memset(mf, 0, sizeof *mf);
    mf->step = -1;
    const char *kind;
    long long size;
    FILE *f = pp_open_regular(path, &kind, &size); /* a FIFO would block the resume */
    if (!f && kind) {
        snprintf(err, errlen, "'%s' is %s, not a checkpoint manifest", path, kind);
        return -1;
    }
    if (!f) {
        snprintf(
            err, errlen,
            "cannot open '%s': %s (the checkpoint is incomplete: a run ended while writing it?)",
            path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char name[64];
        unsigned long long a, b;
        if (!strcmp(line, MANIFEST_MAGIC))
            magic = 1;
        else if (sscanf(line, "plan_id %" SCNx64, &mf->plan_id) == 1 ||
                 sscanf(line, "seed %" SCNu64, &mf->seed) == 1 ||
                 sscanf(line, "step %d", &mf->step) == 1 ||
                 sscanf(line, "data_tokens %" SCNu64, &mf->data_tokens) == 1 ||
                 sscanf(line, "data_crc %" SCNx32, &mf->data_crc) == 1)
            ;
        else if (!strncmp(line, "model ", 6))
            snprintf(mf->model, sizeof mf->model, "%.1023s", line + 6); /* as fingerprint cuts it */
        else if (sscanf(line, "file %63s %llu %llx", name, &a, &b) == 3) {
            if (mf->nfiles == cap) {
                mfile *more = realloc(mf->files, (size_t)(cap = 2 * cap + 8) * sizeof *more);
                if (!more) {
                    snprintf(err, errlen, "out of memory reading '%s'", path);
                    fclose(f);
                    return -1;
                }
                mf->files = more;
            }
            mfile *e = &mf->files[mf->nfiles++];
            snprintf(e->name, sizeof e->name, "%s", name);
            e->size = a;
            e->crc = (uint32_t)b;
        } else if (!strcmp(line, "end"))
            mf->complete = 1;
    }
    fclose(f);
    if (!magic || !mf->complete || mf->step < 0 || !mf->model[0]) {
        snprintf(err, errlen,
                 "'%s' is not a complete checkpoint manifest (expected '%s' first, then plan_id, "
                 "step, model, file lines and 'end')",
                 path, MANIFEST_MAGIC);
        return -1;
    }
    return 0;
}

static const mfile *manifest_file(const manifest *mf, const char *name)
{
    for (int i = 0; i < mf->nfiles; i++)
        if (!strcmp(mf->files[i].name, name))
            return &mf->files[i];
    return NULL;
}

/* info[(s * K_COUNT + k) * 2]: the size and crc of stage s's file of kind
 * k. Written by rank 0, atomically. 0 or -1 with err. */
static int manifest_write(const pp_run *run, const char *sub, const uint64_t *info, char *err,
                          size_t errlen)
{
    const pp_plan *p = run->p;
    const pp_train_opts *o = run->opts;
    char path[PATHLEN + 16], tmp[PATHLEN + 24], model[1024];
    snprintf(path, sizeof path, "%s/manifest", sub);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fingerprint(p, model, sizeof model);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "%s\nplan_id %016" PRIx64 "\nstep %d\nseed %" PRIu64 "\n", MANIFEST_MAGIC,
            p->plan_id, run->done, o->seed);
    /* the data position: microbatch b of step t is a function of (seed, t, b) */
    fprintf(f, "data_position %d\ndata_file %s\ndata_tokens %zu\ndata_crc %08" PRIx32 "\n",
            run->done, o->data, run->ds->len, data_crc(run->ds));
    fprintf(f, "model %s\n", model);
    fprintf(f, "optim lr=%.9g weight_decay=%.9g beta1=%.9g beta2=%.9g eps=%.9g warmup=%d\n",
            (double)o->optim.lr, (double)o->optim.weight_decay, (double)o->optim.beta1,
            (double)o->optim.beta2, (double)o->optim.eps, o->optim.warmup);
    for (uint32_t s = 0; s < p->S; s++)
        for (int k = 0; k < K_COUNT; k++)
            if (kind_exists(&p->model, k))
                fprintf(f, "file stage%u.%s %" PRIu64 " %08" PRIx64 "\n", s, kinds[k].ext,
                        info[(s * K_COUNT + k) * 2], info[(s * K_COUNT + k) * 2 + 1]);
    fprintf(f, "end\n");
    int bad = fflush(f) || fsync(fileno(f));
    if (fclose(f) || bad || rename(tmp, path) || pp_fsync_dir(sub) ||
        pp_fsync_dir(run->opts->checkpoint_dir)) {
        snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- the step directories ---------------------------------------------------- */

static int desc(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

/* The steps of DIR's step-N directories, newest first, in *steps (malloc'd);
 * their number, or -1 with err. */
static int list_steps(const char *dir, int **steps, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    int n = 0, cap = 0;
    *steps = NULL;
    if (!d) {
        snprintf(err, errlen, "cannot open checkpoint directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        int step;
        char rest;
        if (sscanf(e->d_name, "step-%d%c", &step, &rest) != 1 || step < 0)
            continue; /* not a step directory, or a step-N.tmp */
        if (n == cap) {
            int *more = realloc(*steps, (size_t)(cap = 2 * cap + 8) * sizeof *more);
            if (!more) {
                snprintf(err, errlen, "out of memory listing '%s'", dir);
                closedir(d);
                free(*steps);
                *steps = NULL;
                return -1;
            }
            *steps = more;
        }
        (*steps)[n++] = step;
    }
    closedir(d);
    if (n) /* qsort's base may not be NULL, even for no elements */
        qsort(*steps, (size_t)n, sizeof **steps, desc);
    return n;
}

/* Removes a step directory: its manifest first, so that a removal cut
 * short leaves an incomplete checkpoint, never a wrong one. */
static int remove_step(const char *sub)
{
    char path[PATHLEN + 300];
    snprintf(path, sizeof path, "%s/manifest", sub);
    if (unlink(path) && errno != ENOENT)
        return -1;
    DIR *d = opendir(sub);
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
            unlink(path);
        }
    closedir(d);
    return rmdir(sub);
}

/* The plan id of the checkpoint this run resumed (--reshard: another
 * plan's), so that prune() removes that run's older checkpoints as its own. */
static uint64_t resumed_plan;

/* Whether the manifest at path is a complete one of another run than this
 * one and the one it resumed: another plan (not resumed) or another seed. */
static int other_run(const pp_run *run, const char *path)
{
    manifest mf;
    char why[PATHLEN + 200];
    int other = !manifest_read(path, &mf, why, sizeof why) &&
                (mf.seed != run->opts->seed ||
                 (mf.plan_id != run->p->plan_id && mf.plan_id != resumed_plan));
    free(mf.files);
    return other;
}

/* Rank 0, after the manifest of run->done: keeps that checkpoint and the
 * keep-1 newest complete ones before it, removes every other step
 * directory (older ones, incomplete ones, and newer ones left by an
 * earlier run, which a resume would otherwise pick over this one). A
 * directory it cannot remove is said, not fatal: the checkpoint is written.
 * A complete checkpoint of another run (another plan that this run did
 * not resume, or another seed) is kept: it is not this run's to remove. */
static void prune(const pp_run *run)
{
    const char *dir = run->opts->checkpoint_dir;
    char err[PATHLEN], sub[PATHLEN], man[PATHLEN + 16];
    int *steps, n = list_steps(dir, &steps, err, sizeof err), kept = 0;
    if (n < 0) {
        pp_vm_error(0, "%s (old checkpoints not removed)", err);
        return;
    }
    for (int i = 0; i < n; i++) {
        struct stat st;
        step_dir(sub, sizeof sub, dir, steps[i]);
        snprintf(man, sizeof man, "%s/manifest", sub);
        int keep = steps[i] == run->done ||
                   (steps[i] < run->done && kept < run->opts->checkpoint_keep && !stat(man, &st));
        if (keep) {
            kept++;
            continue;
        }
        if (other_run(run, man))
            continue; /* another run's, which this one did not resume: never removed */
        if (remove_step(sub))
            pp_vm_error(0, "cannot remove old checkpoint '%s': %s", sub, strerror(errno));
    }
    pp_fsync_dir(dir);
    free(steps);
}

/* ---- writing ------------------------------------------------------------------- */

/* Rank 0: whether DIR holds a complete checkpoint past run->done that this
 * run did not resume from DIR: prune() would remove it (as newer) at this
 * run's first checkpoint, an earlier run's progress lost to a forgotten
 * --resume. Resuming from DIR itself passed over its newer ones: those
 * that were damaged may go, but one of another run (another plan, seed or
 * data, passed over as such) is that run's to continue. 0, or -1 with err. */
static int foreign_newer(const pp_run *run, char *err, size_t errlen)
{
    const char *dir = run->opts->checkpoint_dir, *res = run->opts->resume;
    struct stat a, b;
    int same =
        res && !stat(dir, &a) && !stat(res, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    int *steps, n = list_steps(dir, &steps, err, errlen), rc = 0;
    for (int i = 0; i < n && steps[i] > run->done && !rc; i++) {
        char sub[PATHLEN], man[PATHLEN + 16], why[PATHLEN + 200];
        struct stat st;
        manifest mf;
        step_dir(sub, sizeof sub, dir, steps[i]);
        snprintf(man, sizeof man, "%s/manifest", sub);
        if (!same && !stat(man, &st)) {
            snprintf(err, errlen,
                     "'%s' already holds the checkpoint '%s' of a run this one does "
                     "not resume (this run's first checkpoint would remove it): --resume %s to "
                     "continue that run, or another directory",
                     dir, sub, dir);
            rc = -1;
        } else if (same) {
            /* passed over, but as another run's (another plan, seed or
             * data), not as damaged: that run may still go on (issue 25) */
            if (!manifest_read(man, &mf, why, sizeof why) &&
                (mf.plan_id != run->p->plan_id || mf.seed != run->opts->seed ||
                 mf.data_tokens != run->ds->len || mf.data_crc != data_crc(run->ds))) {
                snprintf(err, errlen,
                         "'%s' holds '%s', a checkpoint of another run (plan %016" PRIx64
                         ", --seed %" PRIu64 ") that this one (plan %016" PRIx64 ", --seed %" PRIu64
                         ") passed over, newer than the one it resumed: this run's "
                         "checkpoints would remove or overwrite it; --reshard to resume it if "
                         "the model is the same, or --checkpoint-dir another directory",
                         dir, sub, mf.plan_id, mf.seed, run->p->plan_id, run->opts->seed);
                rc = -1;
            }
            free(mf.files);
        }
    }
    free(steps);
    return n < 0 ? -1 : rc;
}

int pp_checkpoint_prepare(const pp_run *run)
{
    char err[3 * PATHLEN + 400] = "";
    int ok = pp_dir_writable(run->opts->checkpoint_dir, run->me, err, sizeof err) == 0;
    if (ok && run->me == 0 && foreign_newer(run, err, sizeof err))
        ok = 0;
    char msg[sizeof err + 32];
    /* the directory is --resume's when no --checkpoint-dir was given */
    snprintf(msg, sizeof msg, "%s: %s",
             run->opts->checkpoint_dir == run->opts->resume ? "--resume" : "--checkpoint-dir", err);
    return pp_vm_all_ok(ok, run->me, msg) ? 0 : -1;
}

/* The lowest-ranked owner of each stage (collective): it writes the stage. */
static int *lowest_owners(const pp_plan *p, int me)
{
    int *mine = malloc(p->S * sizeof *mine), *first = malloc(p->S * sizeof *first);
    int ok = pp_vm_all_ok(mine && first, me, "out of memory");
    if (ok) {
        for (uint32_t s = 0; s < p->S; s++)
            mine[s] = (p->stage_role[s] & PP_ROLE_OWNER) ? me : (int)p->world;
        mpiCheck(MPI_Allreduce(mine, first, (int)p->S, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    }
    free(mine);
    if (!ok) {
        free(first);
        return NULL;
    }
    return first;
}

/* Stage s's files into sub; their sizes and crcs into info. 0 or -1 with err.
 * Under tensor = T every rank of the lowest owner's worker calls it: they
 * send their shards to its rank t = 0 (first), which writes the whole
 * stage (its compute copy made again from the whole weights). */
static int write_stage(const pp_run *run, const pp_backend *be, void *st, const char *sub, int s,
                       int first, uint64_t *info, char *err, size_t errlen)
{
    const pp_plan *p = run->p;
    const pp_model *m = &p->model;
    int S = (int)p->S, rc = -1;
    uint32_t elem;
    /* the whole stage's counts (the files may leave the tied head out) */
    uint64_t cut = pp_ckpt_tied_cut(m, S, s), k = pp_optimizer_state_floats(m->optimizer);
    uint64_t n = kind_count(m, S, s, K_WEIGHTS, &elem) + cut;
    uint64_t nopt = kind_exists(m, K_OPT) ? k * n : 0, nbf = kind_exists(m, K_BF16) ? n : 0;
    float *whole = NULL, *wopt = NULL;
    if (pp_model_tensor(m) > 1) {
        if (pp_tensor_stage_gather(p, be, st, s, first, run->me, &whole, &wopt, err, errlen))
            return -1;
        if (run->me != first) /* sent its shard: first writes */
            return 0;
    }
    void *data[K_COUNT] = {malloc(n * 4 + 1), malloc(nopt * 4 + 1), malloc(nbf * 2 + 1)};
    if (!data[0] || !data[1] || !data[2]) {
        snprintf(err, errlen, "out of memory writing stage %d's checkpoint", s);
        goto out;
    }
    if (whole) {
        pp_model wm = *m;
        wm.tensor = 1;
        memcpy(data[K_WEIGHTS], whole, n * 4);
        if (nopt)
            memcpy(data[K_OPT], wopt, nopt * 4);
        if (nbf)
            pp_stage_compute_copy(&wm, S, s, whole, data[K_BF16]);
    } else if (n)
        be->stage_get(st, s, data[K_WEIGHTS], nopt ? data[K_OPT] : NULL, nbf ? data[K_BF16] : NULL);
    if (cut && nopt) /* (the weights and the bf16 copy: their first n - cut) */
        pp_ckpt_tied_pack(data[K_OPT], k, n, cut);
    for (int k = 0; k < K_COUNT; k++) {
        if (!kind_exists(m, k))
            continue;
        char path[PATHLEN + 64];
        pp_wfile_head h = {{0}, p->plan_id, (uint32_t)s, (uint32_t)run->done, 0, 0};
        memcpy(h.magic, kinds[k].magic, 4);
        h.count = kind_count(m, S, s, k, &h.elem);
        snprintf(path, sizeof path, "%s/stage%d.%s", sub, s, kinds[k].ext);
        uint64_t size;
        uint32_t crc;
        if (pp_wfile_write(path, &h, data[k], &size, &crc, err, errlen))
            goto out;
        info[(s * K_COUNT + k) * 2] = size;
        info[(s * K_COUNT + k) * 2 + 1] = crc;
    }
    rc = 0;
out:
    for (int k = 0; k < K_COUNT; k++)
        free(data[k]);
    free(whole);
    return rc;
}

int pp_checkpoint_write(const pp_run *run, const pp_backend *be, void *st)
{
    const pp_plan *p = run->p;
    const char *dir = run->opts->checkpoint_dir;
    int S = (int)p->S, me = run->me, rc = -1;
    char sub[PATHLEN], err[PATHLEN + 400] = "", man[PATHLEN + 16];
    step_dir(sub, sizeof sub, dir, run->done);
    size_t ninfo = (size_t)S * K_COUNT * 2;
    uint64_t *info = calloc(ninfo, sizeof *info), *all = calloc(ninfo, sizeof *all);
    int *owner = lowest_owners(p, me);
    if (!owner || !pp_vm_all_ok(info && all, me, "out of memory writing a checkpoint"))
        goto out;
    /* rank 0: the step directory, without a manifest (an earlier run's,
     * which would vouch for files about to be replaced, is removed first) */
    int ok = 1;
    if (me == 0) {
        snprintf(man, sizeof man, "%s/manifest", sub);
        if (mkdir(dir, 0777) && errno != EEXIST)
            ok = 0, snprintf(err, sizeof err, "cannot create '%s': %s", dir, strerror(errno));
        else if (mkdir(sub, 0777) && errno != EEXIST)
            ok = 0, snprintf(err, sizeof err, "cannot create '%s': %s", sub, strerror(errno));
        else if ((unlink(man) && errno != ENOENT) || pp_fsync_dir(sub) || pp_fsync_dir(dir))
            ok = 0, snprintf(err, sizeof err, "cannot prepare '%s': %s", sub, strerror(errno));
    }
    if (!pp_vm_all_ok(ok, me, err))
        goto out;
    int T = (int)pp_model_tensor(&p->model);
    for (int s = 0; s < S; s++) /* under tensor = T the owner's worker's T ranks */
        if ((T > 1 ? owner[s] / T == me / T : owner[s] == me && ok) &&
            write_stage(run, be, st, sub, s, owner[s], info, err, sizeof err))
            ok = 0;
    if (!pp_vm_all_ok(ok, me, err))
        goto out;
    pp_checkpoint_test_kill(run, "checkpoint", run->done);
    mpiCheck(MPI_Reduce(info, all, (int)ninfo, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD));
    if (me == 0 && manifest_write(run, sub, all, err, sizeof err))
        ok = 0;
    if (!pp_vm_all_ok(ok, me, err))
        goto out;
    if (me == 0)
        prune(run);
    rc = 0;
out:
    free(info);
    free(all);
    free(owner);
    return rc;
}

/* ---- resuming ------------------------------------------------------------------ */

/* The state of the stages this rank owns, read from one checkpoint. */
typedef struct {
    void **data; /* [S * K_COUNT] */
} loaded;

static void loaded_free(loaded *l, int S)
{
    for (int i = 0; l->data && i < S * K_COUNT; i++)
        free(l->data[i]);
    free(l->data);
    l->data = NULL;
}

/* Whether the manifest in sub lets this run resume from it. 0 or -1 with err. */
static int manifest_usable(const pp_run *run, const char *sub, manifest *mf, char *err,
                           size_t errlen)
{
    const pp_plan *p = run->p;
    char path[PATHLEN + 16], model[1024];
    snprintf(path, sizeof path, "%s/manifest", sub);
    if (manifest_read(path, mf, err, errlen))
        return -1;
    fingerprint(p, model, sizeof model);
    if (mf->plan_id != p->plan_id && !run->opts->reshard)
        snprintf(err, errlen,
                 "'%s' is a checkpoint of plan %016" PRIx64 ", not of this plan %016" PRIx64
                 " (--reshard resumes it if the model is the same)",
                 path, mf->plan_id, p->plan_id);
    else if (strcmp(mf->model, model))
        snprintf(err, errlen, "'%s' is a checkpoint of the model '%s', but this plan trains '%s'",
                 path, mf->model, model);
    else if (mf->seed != run->opts->seed)
        snprintf(err, errlen,
                 "'%s' was written by a run with --seed %" PRIu64 ", this one has %" PRIu64, path,
                 mf->seed, run->opts->seed);
    else if (mf->data_tokens != run->ds->len || mf->data_crc != data_crc(run->ds))
        snprintf(err, errlen,
                 "'%s' was written by a run on other data (%" PRIu64 " tokens, crc32 %08" PRIx32
                 "); this run's '%s' has %zu tokens, crc32 %08" PRIx32,
                 path, mf->data_tokens, mf->data_crc, run->opts->data, run->ds->len,
                 data_crc(run->ds));
    else
        return 0;
    return -1;
}

/* Under tensor = T: the whole stage s that l holds replaced by this rank's
 * shard of it (weights and moments; the compute copy made again from the
 * shard's weights). 0, or -1 out of memory with err. */
static int cut_stage(const pp_run *run, int s, loaded *l, char *err, size_t errlen)
{
    const pp_plan *p = run->p;
    void **d = &l->data[s * K_COUNT];
    int S = (int)p->S;
    uint32_t T = pp_model_tensor(&p->model);
    size_t n = pp_stage_param_count(&p->model, S, s);
    size_t k = pp_optimizer_state_floats(p->model.optimizer);
    float *sw = malloc(n * sizeof *sw + 1), *sopt = k ? malloc(n * k * sizeof *sopt + 1) : NULL;
    void *copy = p->model.precision == PP_PREC_FP32 ? NULL : malloc(n * 2 + 1);
    if (!sw || (k && !sopt) || (p->model.precision != PP_PREC_FP32 && !copy)) {
        free(sw);
        free(sopt);
        free(copy);
        snprintf(err, errlen, "out of memory cutting stage %d's shard", s);
        return -1;
    }
    pp_tensor_stage_cut(p, s, (int)(p->rank % T), d[K_WEIGHTS], d[K_OPT], sw, sopt);
    if (copy)
        pp_stage_compute_copy(&p->model, S, s, sw, copy);
    free(d[K_WEIGHTS]);
    free(d[K_OPT]);
    free(d[K_BF16]);
    d[K_WEIGHTS] = sw;
    d[K_OPT] = sopt;
    d[K_BF16] = copy;
    return 0;
}

/* Reads sub's file of stage s, kind k, into *data, checked against the
 * manifest and the plan. 0 or -1 with err naming the file. */
static int read_kind(const pp_run *run, const char *sub, const manifest *mf, int s, int k,
                     void **data, char *err, size_t errlen)
{
    const pp_model *m = &run->p->model;
    int S = (int)run->p->S;
    char name[64], path[PATHLEN + 64];
    snprintf(name, sizeof name, "stage%d.%s", s, kinds[k].ext);
    snprintf(path, sizeof path, "%s/%s", sub, name);
    const mfile *e = manifest_file(mf, name);
    pp_wfile_head h;
    uint64_t size;
    uint32_t crc, elem;
    uint64_t want = kind_count(m, S, s, k, &elem); /* AdamW's 2n passes 2^32 early */
    if (!e) {
        snprintf(err, errlen, "'%s/manifest' lists no %s", sub, name);
        return -1;
    }
    if (pp_wfile_read(path, kinds[k].magic, &h, data, &size, &crc, err, errlen))
        return -1;
    if (size != e->size || crc != e->crc) {
        snprintf(err, errlen,
                 "'%s' does not match its manifest: %" PRIu64 " bytes, crc32 %08" PRIx32
                 ", but the manifest says %" PRIu64 " bytes, crc32 %08" PRIx32,
                 path, size, crc, e->size, e->crc);
        return -1;
    }
    if (h.plan_id != mf->plan_id || h.step != (uint32_t)mf->step || h.stage != (uint32_t)s ||
        h.count != want || h.elem != elem) {
        snprintf(err, errlen,
                 "'%s' holds stage %u after step %u of plan %016" PRIx64 " (%" PRIu64
                 " elements); its manifest expects stage %d after step %d of plan %016" PRIx64
                 " (%" PRIu64 " elements)",
                 path, h.stage, h.step, h.plan_id, h.count, s, mf->step, mf->plan_id, want);
        return -1;
    }
    return 0;
}

/* A tied model's stage S-1, read from files that stop before its head:
 * each of its vectors gets stage 0's embedding back (ckpt_tied.h), read
 * from stage 0's files. 0 or -1 with err. */
static int tied_head(const pp_run *run, const char *sub, const manifest *mf, void **d, char *err,
                     size_t errlen)
{
    const pp_model *m = &run->p->model;
    int S = (int)run->p->S;
    uint32_t elem;
    size_t cut = pp_ckpt_tied_cut(m, S, S - 1), n = kind_count(m, S, S - 1, K_WEIGHTS, &elem),
           n0 = kind_count(m, S, 0, K_WEIGHTS, &elem);
    for (int k = 0; k < K_COUNT; k++) {
        if (!kind_exists(m, k))
            continue;
        void *first = NULL;
        size_t vectors = k == K_OPT ? pp_optimizer_state_floats(m->optimizer) : 1;
        int rc = read_kind(run, sub, mf, 0, k, &first, err, errlen);
        if (!rc && pp_ckpt_tied_unpack(&d[k], first, vectors, n, n0, cut, k == K_BF16 ? 2 : 4)) {
            snprintf(err, errlen, "out of memory resuming stage %d", S - 1);
            rc = -1;
        }
        free(first);
        if (rc)
            return -1;
    }
    return 0;
}

/* Reads the files of the stages this rank owns and checks each against
 * the manifest and the plan. 0 or -1 with err naming the file. */
static int load_stages(const pp_run *run, const char *sub, const manifest *mf, loaded *l, char *err,
                       size_t errlen)
{
    const pp_plan *p = run->p;
    const pp_model *m = &p->model;
    int S = (int)p->S;
    if (!(l->data = calloc((size_t)S * K_COUNT, sizeof *l->data))) {
        snprintf(err, errlen, "out of memory resuming");
        return -1;
    }
    for (int s = 0; s < S; s++) {
        if (!(p->stage_role[s] & PP_ROLE_OWNER))
            continue;
        for (int k = 0; k < K_COUNT; k++)
            if (kind_exists(m, k) &&
                read_kind(run, sub, mf, s, k, &l->data[s * K_COUNT + k], err, errlen))
                return -1;
        if (pp_ckpt_tied_cut(m, S, s) &&
            tied_head(run, sub, mf, &l->data[s * K_COUNT], err, errlen))
            return -1;
        /* under tensor = T this rank restores its shard (before the ranks
         * agree, so running out of memory here is agreed too) */
        if (pp_model_tensor(m) > 1 && pp_stage_param_count(m, S, s) &&
            cut_stage(run, s, l, err, errlen))
            return -1;
    }
    return 0;
}

/* Tries the checkpoint of `step`; 0 when every rank loaded it (then
 * restored), -1 when some rank could not (the lowest says why, and what
 * comes next). */
static int try_step(pp_run *run, const pp_backend *be, void *st, int step, int older)
{
    const pp_plan *p = run->p;
    int S = (int)p->S;
    char sub[PATHLEN], err[2 * PATHLEN + 3000] = "", msg[sizeof err + PATHLEN + 64];
    manifest mf;
    loaded l = {0};
    step_dir(sub, sizeof sub, run->opts->resume, step);
    int ok = manifest_usable(run, sub, &mf, err, sizeof err) == 0 &&
             load_stages(run, sub, &mf, &l, err, sizeof err) == 0;
    if (older >= 0) {
        char prev[PATHLEN];
        step_dir(prev, sizeof prev, run->opts->resume, older);
        snprintf(msg, sizeof msg, "%s; trying the older checkpoint '%s'", err, prev);
    } else
        snprintf(msg, sizeof msg, "%s; there is no older checkpoint", err);
    int all = pp_vm_all_ok(ok, run->me, msg);
    if (all) {
        for (int s = 0; s < S; s++)
            if ((p->stage_role[s] & PP_ROLE_OWNER) && pp_stage_param_count(&p->model, S, s))
                be->stage_set(st, s, l.data[s * K_COUNT + K_WEIGHTS], l.data[s * K_COUNT + K_OPT],
                              l.data[s * K_COUNT + K_BF16]);
        run->done = mf.step;
        resumed_plan = mf.plan_id;
        if (run->me == 0) /* even with --quiet: where the run goes on from */
            printf("ppvm: resuming from '%s' (step %d; plan %016" PRIx64 "%s)\n", sub, mf.step,
                   mf.plan_id, mf.plan_id != p->plan_id ? ", resharded" : "");
    }
    free(mf.files);
    loaded_free(&l, S);
    return all ? 0 : -1;
}

int pp_checkpoint_resume(pp_run *run, const pp_backend *be, void *st)
{
    const char *dir = run->opts->resume;
    char err[PATHLEN] = "";
    int *steps = NULL, n = 0;
    if (run->me == 0)
        n = list_steps(dir, &steps, err, sizeof err);
    mpiCheck(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (n < 0) { /* said below by rank 0 */
        if (run->me == 0)
            pp_vm_error(-1, "--resume: %s", err);
        return -1;
    }
    if (run->me != 0 && !(steps = malloc((size_t)n * sizeof *steps + 1)))
        n = -1; /* cannot happen for any sane n; agreed below */
    if (!pp_vm_all_ok(n >= 0, run->me, "out of memory resuming")) {
        free(steps);
        return -1;
    }
    if (n)
        mpiCheck(MPI_Bcast(steps, n, MPI_INT, 0, MPI_COMM_WORLD));
    int rc = -1;
    for (int i = 0; i < n && rc; i++)
        rc = try_step(run, be, st, steps[i], i + 1 < n ? steps[i + 1] : -1);
    if (rc && run->me == 0)
        pp_vm_error(-1, "--resume '%s': no complete checkpoint this run can resume from%s", dir,
                    n ? "" : " (it holds no step-N directory)");
    /* Past --steps the run would train nothing and --save (and the exit
     * status) would claim the checkpoint's weights for --steps; falling
     * back to an older one instead would let its first checkpoint prune
     * the newer ones. Every rank read the same manifest: agreed. */
    if (!rc && run->done > run->opts->steps) {
        if (run->me == 0)
            pp_vm_error(-1,
                        "--resume '%s': its newest usable checkpoint holds %d steps, more than "
                        "--steps %d (the total, counted from step 0); give --steps %d or more",
                        dir, run->done, run->opts->steps, run->done);
        rc = -1;
    }
    free(steps);
    return rc;
}

void pp_checkpoint_test_kill(const pp_run *run, const char *where, int step)
{
    const char *spec = getenv("PPVM_TEST_KILL");
    int rank, at;
    char what[32];
    if (spec && sscanf(spec, "%d:%d:%31s", &rank, &at, what) == 3 && rank == run->me &&
        at == step && !strncmp(what, where, strlen(where))) {
        fflush(stdout);
        if (!strcmp(what + strlen(where), "-stall")) {
            pp_guard_stalled();        /* it waits on nobody: the others name it */
            while (!pp_guard_signal()) /* a rank that hangs here: the watchdog's to end, or */
                usleep(10000);         /* a stop signal's to release */
        }
        if (!what[strlen(where)])
            raise(SIGKILL);
    }
}
