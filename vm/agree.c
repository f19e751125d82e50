/* agree.c - the ranks' training flags and data compared at start-up
 * (agree.h): each rank puts each flag's value in words, every rank gathers
 * a hash of each (the verdict, the same on every rank), and rank 0 gathers
 * the words themselves to name what differs. */
#include "agree.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../isa/plan.h"
#include "check.h"
#include "vm.h"

#define VALLEN 200  /* a flag's value in words, as compared (longer paths: cut, hashed whole) */
#define BLOCK 65536 /* tokens hashed at each end of the data */

/* The flags that must agree. --quiet, --loss-digits, --timeout and --grace
 * only change what a rank prints or how long it waits, and a data path
 * may differ between nodes (the data itself may not). --no-compute has a
 * check of its own, just after (driver.c, same_mode). */
enum {
    F_BACKEND,
    F_TRANSPORT,
    F_STEPS,
    F_SEED,
    F_LR,
    F_WEIGHT_DECAY,
    F_BETA1,
    F_BETA2,
    F_EPS,
    F_WARMUP,
    F_DATA,
    F_SAVE,
    F_DETERMINISTIC,
    F_EPILOGUES,
    F_PROFILE,
    F_CHECKPOINT_DIR,
    F_CHECKPOINT_EVERY,
    F_CHECKPOINT_KEEP,
    F_RESUME,
    F_RESHARD,
    F_SKIP_NONFINITE,
    F_COUNT
};
static const char *const names[F_COUNT] = {"--backend",
                                           "--transport",
                                           "--steps",
                                           "--seed",
                                           "--lr",
                                           "--weight-decay",
                                           "AdamW's beta1",
                                           "--adam-beta2",
                                           "--adam-eps",
                                           "--warmup",
                                           "--data",
                                           "--save",
                                           "--deterministic",
                                           "--epilogues",
                                           "--profile",
                                           "--checkpoint-dir",
                                           "--checkpoint-every",
                                           "--checkpoint-keep",
                                           "--resume",
                                           "--reshard",
                                           "--skip-nonfinite"};

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* The data's identity: its length and a crc32 of its first and last
 * BLOCK tokens (the whole of it when shorter): cheap for any size, and
 * it tells apart other files, other versions and a truncated copy. */
static void data_identity(const pp_dataset *ds, char *buf, size_t n)
{
    size_t head = ds->len < BLOCK ? ds->len : BLOCK,
           tail = ds->len - head < BLOCK ? ds->len - head : BLOCK;
    uint32_t a = pp_crc32((const uint8_t *)ds->tokens, head * sizeof *ds->tokens);
    uint32_t b =
        pp_crc32((const uint8_t *)(ds->tokens + ds->len - tail), tail * sizeof *ds->tokens);
    if (tail)
        snprintf(buf, n, "%zu tokens, crc32 %08x of the first %d and %08x of the last %zu", ds->len,
                 a, BLOCK, b, tail);
    else
        snprintf(buf, n, "%zu tokens, crc32 %08x", ds->len, a);
}

static void values(const pp_run *run, const char *backend, char v[F_COUNT][VALLEN], uint64_t *hash)
{
    const pp_train_opts *o = run->opts;
    const pp_optim *q = &o->optim;
    char data[100];
    const char *none = "(not given)";
    data_identity(run->ds, data, sizeof data);
    snprintf(v[F_BACKEND], VALLEN, "%s", backend);
    snprintf(v[F_TRANSPORT], VALLEN, "%s", o->transport == PP_TRANSPORT_NCCL ? "nccl" : "mpi");
    snprintf(v[F_STEPS], VALLEN, "%d", o->steps);
    snprintf(v[F_SEED], VALLEN, "%llu", (unsigned long long)o->seed);
    snprintf(v[F_LR], VALLEN, "%g", (double)q->lr);
    snprintf(v[F_WEIGHT_DECAY], VALLEN, "%g", (double)q->weight_decay);
    snprintf(v[F_BETA1], VALLEN, "%g", (double)q->beta1);
    snprintf(v[F_BETA2], VALLEN, "%g", (double)q->beta2);
    snprintf(v[F_EPS], VALLEN, "%g", (double)q->eps);
    snprintf(v[F_WARMUP], VALLEN, "%d", q->warmup);
    snprintf(v[F_DATA], VALLEN, "'%.60s' (%.99s)", o->data, data);
    snprintf(v[F_SAVE], VALLEN, "%s", o->save ? o->save : none);
    snprintf(v[F_DETERMINISTIC], VALLEN, "%s", o->deterministic ? "given" : none);
    snprintf(v[F_EPILOGUES], VALLEN, "%s", o->no_epilogues ? "off" : "on");
    snprintf(v[F_PROFILE], VALLEN, "%s", o->profile ? "given" : none);
    snprintf(v[F_CHECKPOINT_DIR], VALLEN, "%s", o->checkpoint_dir ? o->checkpoint_dir : none);
    snprintf(v[F_CHECKPOINT_EVERY], VALLEN, "%d", o->checkpoint_every);
    snprintf(v[F_CHECKPOINT_KEEP], VALLEN, "%d", o->checkpoint_keep);
    snprintf(v[F_RESUME], VALLEN, "%s", o->resume ? o->resume : none);
    snprintf(v[F_RESHARD], VALLEN, "%s", o->reshard ? "given" : none);
    snprintf(v[F_SKIP_NONFINITE], VALLEN, "%s", o->skip_nonfinite ? "given" : none);
    for (int f = 0; f < F_COUNT; f++)
        hash[f] = fnv(v[f]);
    /* what is compared is the data, not its path (nodes may hold copies),
     * and whole paths, not their first VALLEN bytes */
    hash[F_DATA] = fnv(data);
    const float exact[] = {q->lr, q->weight_decay, q->beta1, q->beta2, q->eps};
    for (int k = 0; k < 5; k++) { /* every bit of the value, not the %g shown */
        char a[48];
        snprintf(a, sizeof a, "%a", (double)exact[k]);
        hash[F_LR + k] = fnv(a);
    }
    hash[F_SAVE] = fnv(o->save ? o->save : "");
    hash[F_CHECKPOINT_DIR] = fnv(o->checkpoint_dir ? o->checkpoint_dir : "");
    hash[F_RESUME] = fnv(o->resume ? o->resume : "");
}

/* Rank 0: says which ranks hold which value of flag f: "rank 0: 0.1;
 * rank 1: 0.2", ranks of one value together ("ranks 0, 2, 3: ..."). */
static void say(int f, int size, const uint64_t *hash, const char *words)
{
    char msg[4096];
    int len = snprintf(msg, sizeof msg, "the ranks were started with different %s:", names[f]);
    int *done = calloc((size_t)size, sizeof *done), groups = 0;
    for (int r = 0; done && r < size && len < (int)sizeof msg - 200; r++) {
        if (done[r])
            continue;
        if (groups++ == 6) {
            len += snprintf(msg + len, sizeof msg - (size_t)len, " ... (and more)");
            break;
        }
        int shown = 0, count = 0;
        for (int q = r; q < size; q++)
            count += hash[(size_t)q * F_COUNT + f] == hash[(size_t)r * F_COUNT + f];
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s %s", groups > 1 ? ";" : "",
                        count > 1 ? "ranks" : "rank");
        for (int q = r; q < size; q++)
            if (hash[(size_t)q * F_COUNT + f] == hash[(size_t)r * F_COUNT + f]) {
                done[q] = 1;
                if (shown++ < 8)
                    len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%d",
                                    shown > 1 ? ", " : " ", q);
            }
        if (shown > 8)
            len += snprintf(msg + len, sizeof msg - (size_t)len, " and %d more", shown - 8);
        len += snprintf(msg + len, sizeof msg - (size_t)len, " %s",
                        words + ((size_t)r * F_COUNT + f) * VALLEN);
    }
    free(done);
    pp_vm_error(-1,
                "%s (every rank needs the same training flags and data: one command line "
                "for all)",
                msg);
}

int pp_flags_agree(const pp_run *run, const char *backend)
{
    int size, me = run->me;
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char(*mine)[VALLEN] = calloc(F_COUNT, VALLEN);
    uint64_t *hash = malloc(((size_t)size + 1) * F_COUNT * sizeof *hash);
    char *words = me == 0 ? malloc((size_t)size * F_COUNT * VALLEN) : NULL;
    if (!pp_vm_all_ok(mine && hash && (me != 0 || words), me,
                      "out of memory comparing the ranks' flags")) {
        free(mine);
        free(hash);
        free(words);
        return 0;
    }
    uint64_t *own = hash + (size_t)size * F_COUNT;
    values(run, backend, mine, own);
    mpiCheck(
        MPI_Allgather(own, F_COUNT, MPI_UINT64_T, hash, F_COUNT, MPI_UINT64_T, MPI_COMM_WORLD));
    mpiCheck(MPI_Gather(mine, F_COUNT * VALLEN, MPI_CHAR, words, F_COUNT * VALLEN, MPI_CHAR, 0,
                        MPI_COMM_WORLD));
    int same = 1;
    for (int f = 0; f < F_COUNT; f++) {
        int differ = 0;
        for (int r = 1; r < size; r++)
            differ |= hash[(size_t)r * F_COUNT + f] != hash[f];
        if (differ && me == 0)
            say(f, size, hash, words);
        same &= !differ;
    }
    free(mine);
    free(hash);
    free(words);
    return same;
}
