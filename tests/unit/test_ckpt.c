/* test_ckpt.c - checkpoints, --resume and the stage files' header, end to
 * end under mpirun (the ckpt suite; vm/README.md, "Checkpoints"). A run
 * killed (SIGKILL, through ppvm's PPVM_TEST_KILL hook) after a checkpoint
 * must make mpirun fail, and --resume must then end with the very weights
 * (atol 0, rtol 0) of the run that was never interrupted: for a pipeline
 * with AdamW in bf16, FSDP, and an LPP with replicas; and under another
 * schedule of the same model (--reshard). A corrupt, missing or mismatched
 * file, a checkpoint cut short, or one of another plan is refused with a
 * message naming the file, and the older checkpoint is used. --save checks
 * its directory before step 1, and --compare names truncated, padded and
 * mixed files. Every run pins --backend cpu and stays tiny (2 cores). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../isa/plan.h"
#include "suites.h"
#include "testutil.h"

/* mpirun of ppvm with PPVM_TEST_KILL=kill (NULL: none); returns its status,
 * *out its output (caller frees). */
static int run_killed(int np, const char *kill, const char *args, char **out)
{
    char *why = NULL;
    if (kill)
        setenv("PPVM_TEST_KILL", kill, 1);
    int rc = mpi_run(np, args, out, &why);
    unsetenv("PPVM_TEST_KILL");
    free(why);
    return rc;
}

static void compare_exact(const char *a, const char *b)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s %s --atol 0 --rtol 0", PP_ROOT, a, b);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "max |diff| 0 ") && !strstr(out, "beyond"), "%s", out);
    free(out);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The plan of `schedule defs` trains `steps` steps uninterrupted
 * (checkpointing every step, keeping 2); then again, checkpointing every
 * 2 steps, with rank `victim` killed before step `steps`; mpirun must
 * fail; --resume then finishes the run, from the checkpoint of step
 * steps-1 rounded down to even, with the same weights, bit for bit. */
static void resumes_bit_identical(const char *schedule, const char *defs, int np, int victim,
                                  int steps)
{
    char *dir = compile_plan(schedule, defs), args[4096], kill[64], path[2048], *out;
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps %d --checkpoint-dir %s/all --checkpoint-every 1 "
             "--save %s/full --quiet",
             dir, steps, dir, dir);
    free(mpi_ok(np, args));
    for (int s = 1; s <= steps; s++) { /* --checkpoint-keep 2: the newest two only */
        snprintf(path, sizeof path, "%s/all/step-%06d/manifest", dir, s);
        ck_assert_msg(exists(path) == (s >= steps - 1), "%s %s: %s %s", schedule, defs, path,
                      exists(path) ? "kept" : "missing");
    }
    snprintf(kill, sizeof kill, "%d:%d:step", victim, steps);
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps %d --checkpoint-dir %s/ck --checkpoint-every 2 --quiet",
             dir, steps, dir);
    int rc = run_killed(np, kill, args, &out);
    int st[np];
    rank_statuses(out, np, st);
    ck_assert_msg(rc != 0 && st[victim] == 128 + 9,
                  "%s %s: rank %d was to be killed before step %d: mpirun %d, rank status %d\n%s",
                  schedule, defs, victim, steps, rc, st[victim], last_lines(out, 20));
    free(out);
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps %d --resume %s/ck --save %s/res",
             dir, steps, dir, dir);
    out = mpi_ok(np, args);
    int from = (steps - 1) / 2 * 2;
    snprintf(path, sizeof path, "resuming from '%s/ck/step-%06d'", dir, from);
    ck_assert_msg(strstr(out, path) != NULL, "expected \"%s\" in\n%s", path, out);
    snprintf(path, sizeof path, "step %4d/%d", from + 1, steps);
    ck_assert_msg(strstr(out, path) && !strstr(out, "step    1/"), "resumed at the wrong step:\n%s",
                  out);
    free(out);
    snprintf(args, sizeof args, "%s/full", dir);
    snprintf(path, sizeof path, "%s/res", dir);
    compare_exact(path, args);
    remove_dir(dir);
}

START_TEST(pipeline_adamw_bf16_resumes_bit_identical)
{
    resumes_bit_identical("1f1b.pp", "-D S=4 -D B=4 --optimizer adamw --precision bf16", 4, 2, 5);
}
END_TEST

START_TEST(fsdp_resumes_bit_identical)
{
    resumes_bit_identical("fsdp.pp", "-D S=4 -D B=4 --optimizer adamw", 4, 3, 4);
}
END_TEST

START_TEST(lpp_replicas_resume_bit_identical)
{
    resumes_bit_identical("lpp.pp", "-D S=4 -D B=4 -D G=2 -D R=2", 4, 1, 4);
}
END_TEST

/* A GPipe checkpoint resumes under 1F1B of the same model only with
 * --reshard, and then ends with the weights of 1F1B uninterrupted. */
START_TEST(reshard_gpipe_to_1f1b)
{
    char *gp = compile_plan("gpipe.pp", "-D S=2 -D B=4 --optimizer adamw");
    char *ob = compile_plan("1f1b.pp", "-D S=2 -D B=4 --optimizer adamw"), args[4096], msg[2048];
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 2 --checkpoint-dir %s/ck --checkpoint-every 2 --quiet",
             gp, gp);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --resume %s/ck --quiet", ob, gp);
    snprintf(msg, sizeof msg, "'%s/ck/step-000002/manifest' is a checkpoint of plan ", gp);
    mpi_fails_with(2, args, msg);
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 4 --resume %s/ck --reshard --save %s/res --quiet", ob,
             gp, ob);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --save %s/full --quiet", ob, ob);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args, "%s/res", ob);
    snprintf(msg, sizeof msg, "%s/full", ob);
    compare_exact(args, msg);
    /* another model (here: SGD, not AdamW) is refused even with --reshard */
    char *sgd = compile_plan("1f1b.pp", "-D S=2 -D B=4");
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --resume %s/ck --reshard --quiet",
             sgd, gp);
    mpi_fails_with(2, args, "is a checkpoint of the model 'kind=mlp");
    remove_dir(sgd);
    remove_dir(gp);
    remove_dir(ob);
}
END_TEST

/* Writes `len` bytes of `what` at `off` in path (off < 0: from the end). */
static void poke(const char *path, long off, const char *what, size_t len)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
    ck_assert(fwrite(what, 1, len, f) == len);
    fclose(f);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp %s %s", from, to);
    free(run_expect(cmd, 0));
}

/* A directory holding 1F1B's step 2 and, resharded from it, GPipe's step
 * 4: 1F1B resuming it without --reshard passes over step 4 and resumes
 * step 2, but its checkpoints would overwrite GPipe's step 4: refused,
 * naming it, and GPipe's checkpoint is still there to resume. A run of
 * another seed checkpointing into a directory it resumed leaves the other
 * run's older checkpoint too. */
START_TEST(other_plans_checkpoints_kept)
{
    char *gp = compile_plan("gpipe.pp", "-D S=2 -D B=2");
    char *ob = compile_plan("1f1b.pp", "-D S=2 -D B=2"), args[4096], msg[2048], *out;
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 2 --checkpoint-dir %s/ck --checkpoint-every 2 --quiet",
             ob, ob);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 4 --resume %s/ck --reshard "
             "--checkpoint-every 2 --quiet",
             gp, ob);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 6 --resume %s/ck "
             "--checkpoint-every 2 --quiet",
             ob, ob);
    snprintf(msg, sizeof msg,
             "ppvm: rank 0: --resume: '%s/ck' holds '%s/ck/step-000004', a "
             "checkpoint of another run (plan ",
             ob, ob);
    mpi_fails_with(2, args, msg);
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 6 --resume %s/ck --quiet", gp, ob);
    out = mpi_ok(2, args);
    snprintf(msg, sizeof msg, "resuming from '%s/ck/step-000004' (step 4; plan ", ob);
    ck_assert_msg(strstr(out, msg) != NULL, "expected \"%s\" in\n%s", msg, out);
    free(out);
    remove_dir(gp);
    remove_dir(ob);
}
END_TEST

/* Four checkpoints, each spoilt another way, newest first: a corrupt
 * shard, a missing one, one the manifest does not vouch for; the oldest
 * is used, and the run ends as if never interrupted. A leftover temp file
 * does not matter. With every manifest gone, nothing is resumed. */
START_TEST(bad_checkpoints_fall_back_to_older)
{
    char *dir = compile_plan("1f1b.pp", "-D S=2 -D B=2"), args[4096], p[2048], q[2048], *out;
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 4 --checkpoint-dir %s/ck --checkpoint-every 1 "
             "--checkpoint-keep 4 --save %s/full --quiet",
             dir, dir, dir);
    free(mpi_ok(2, args));
    snprintf(p, sizeof p, "%s/ck/step-000004/stage1.w", dir);
    poke(p, 100, "\x55\xaa", 2);
    snprintf(p, sizeof p, "%s/ck/step-000003/stage0.w", dir);
    ck_assert(unlink(p) == 0);
    snprintf(p, sizeof p, "%s/ck/step-000001/stage1.w", dir);
    snprintf(q, sizeof q, "%s/ck/step-000002/stage1.w", dir);
    copy_file(p, q);
    snprintf(p, sizeof p, "%s/ck/step-000001/stage0.w.tmp", dir);
    write_text(p, "junk");
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --resume %s/ck --save %s/res", dir,
             dir, dir);
    out = mpi_ok(2, args);
    const char *want[] = {
        "step-000004/stage1.w': checksum mismatch",
        "trying the older checkpoint '", /* then the path */
        "cannot open '",                 /* step-000003/stage0.w */
        "step-000002/stage1.w' does not match its manifest",
        "resuming from '",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        ck_assert_msg(strstr(out, want[i]) != NULL, "expected \"%s\" in\n%s", want[i], out);
    snprintf(p, sizeof p, "step-000003/stage0.w': No such file");
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    snprintf(p, sizeof p, "resuming from '%s/ck/step-000001' (step 1", dir);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    free(out);
    snprintf(p, sizeof p, "%s/res", dir);
    snprintf(q, sizeof q, "%s/full", dir);
    compare_exact(p, q);
    for (int s = 1; s <= 4; s++) {
        snprintf(p, sizeof p, "%s/ck/step-%06d/manifest", dir, s);
        unlink(p);
    }
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --resume %s/ck", dir, dir);
    mpi_fails_with(2, args, "no complete checkpoint this run can resume from");
    snprintf(p, sizeof p, "'%s/ck/step-000001/manifest': No such file", dir);
    mpi_fails_with(2, args, p);
    remove_dir(dir);
}
END_TEST

/* A manifest that is a FIFO (or a directory) is passed over at once, not
 * waited on until the start-up timeout: the checkpoint before it is
 * resumed, as for a stage file that is not a regular file. */
START_TEST(special_manifest_falls_back)
{
    char *dir = compile_plan("1f1b.pp", "-D S=2 -D B=2"), args[4096], p[2048], *out, *why;
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 3 --checkpoint-dir %s/ck "
             "--checkpoint-every 1 --checkpoint-keep 3 --quiet",
             dir, dir);
    free(mpi_ok(2, args));
    snprintf(p, sizeof p, "%s/ck/step-000003/manifest", dir);
    ck_assert(unlink(p) == 0 && mkfifo(p, 0666) == 0);
    snprintf(p, sizeof p, "%s/ck/step-000002/manifest", dir);
    ck_assert(unlink(p) == 0 && mkdir(p, 0777) == 0);
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 3 --resume %s/ck --quiet", dir, dir);
    int rc = mpi_run_within(2, args, 60, &out, &why);
    ck_assert_msg(rc == 0, "%s", why);
    snprintf(p, sizeof p,
             "'%s/ck/step-000003/manifest' is a FIFO (named pipe), not a checkpoint "
             "manifest",
             dir);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    snprintf(p, sizeof p,
             "'%s/ck/step-000002/manifest' is a directory, not a checkpoint "
             "manifest",
             dir);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    snprintf(p, sizeof p, "resuming from '%s/ck/step-000001' (step 1", dir);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* A rank killed while a checkpoint is being written (its stage files
 * written, the manifest not) leaves that step's directory incomplete: the
 * previous checkpoint is resumed, to the uninterrupted run's weights. */
START_TEST(crash_while_writing_keeps_previous)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), args[4096], p[2048], q[2048], *out;
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --save %s/full --quiet", dir, dir);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 4 --checkpoint-dir %s/ck --checkpoint-every 2 --quiet",
             dir, dir);
    int rc = run_killed(2, "1:4:checkpoint", args, &out);
    ck_assert_msg(rc != 0, "the killed run succeeded:\n%s", out);
    free(out);
    snprintf(p, sizeof p, "%s/ck/step-000004/stage1.w", dir);
    snprintf(q, sizeof q, "%s/ck/step-000004/manifest", dir);
    ck_assert_msg(exists(p) && !exists(q), "step 4: expected stage files and no manifest");
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --resume %s/ck --save %s/res", dir,
             dir, dir);
    out = mpi_ok(2, args);
    snprintf(p, sizeof p, "'%s/ck/step-000004/manifest': No such file", dir);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    snprintf(p, sizeof p, "resuming from '%s/ck/step-000002'", dir);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    free(out);
    snprintf(p, sizeof p, "%s/res", dir);
    snprintf(q, sizeof q, "%s/full", dir);
    compare_exact(p, q);
    /* a manifest cut short (no 'end') is refused like a missing one */
    snprintf(args, sizeof args,
             "head -n -1 %s/ck/step-000002/manifest > %s/ck/step-000004/manifest", dir, dir);
    free(run_expect(args, 0));
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --resume %s/ck --quiet", dir, dir);
    snprintf(p, sizeof p, "'%s/ck/step-000004/manifest' is not a complete checkpoint manifest",
             dir);
    out = mpi_ok(2, args);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    free(out);
    /* another seed, other data: refused, naming the manifest */
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --resume %s/ck --seed 2", dir,
             dir);
    mpi_fails_with(2, args,
                   "step-000002/manifest' was written by a run with --seed 1, this one has 2");
    snprintf(p, sizeof p, "%s/other-data", dir);
    write_text(p, "a few bytes of other training data, enough for a window");
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 4 --resume %s/ck --data %s", dir,
             dir, p);
    mpi_fails_with(2, args, "step-000002/manifest' was written by a run on other data");
    remove_dir(dir);
}
END_TEST

/* A checkpoint that cannot be written ends every rank with exit 1, the
 * writer naming the file: a step directory that is a file, a stage file's
 * temporary name taken by a directory. An old one that cannot be removed
 * is only said. */
START_TEST(unwritable_checkpoint_fails_every_rank)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), args[4096], p[2048];
    snprintf(p, sizeof p, "%s/ck", dir);
    ck_assert(mkdir(p, 0777) == 0);
    snprintf(p, sizeof p, "%s/ck/step-000002", dir);
    write_text(p, "");
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 4 --checkpoint-dir %s/ck --checkpoint-every 2", dir,
             dir);
    snprintf(p, sizeof p, "ppvm: rank 0: cannot prepare '%s/ck/step-000002': Not a directory", dir);
    mpi_fails_with(2, args, p);
    snprintf(p, sizeof p, "%s/ck/step-000002", dir);
    ck_assert(unlink(p) == 0 && mkdir(p, 0777) == 0);
    snprintf(p, sizeof p, "%s/ck/step-000002/stage1.w.tmp", dir);
    ck_assert(mkdir(p, 0777) == 0);
    snprintf(p, sizeof p,
             "ppvm: rank 1: cannot create '%s/ck/step-000002/stage1.w.tmp': Is a directory", dir);
    mpi_fails_with(2, args, p);
    /* an old checkpoint that cannot be removed is said, and the run goes on */
    snprintf(p, sizeof p, "%s/ck2", dir);
    ck_assert(mkdir(p, 0777) == 0);
    snprintf(p, sizeof p, "%s/ck2/step-000001", dir);
    ck_assert(mkdir(p, 0777) == 0);
    snprintf(p, sizeof p, "%s/ck2/step-000001/in-the-way", dir);
    ck_assert(mkdir(p, 0777) == 0);
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 2 --checkpoint-dir %s/ck2 --checkpoint-every 2 "
             "--checkpoint-keep 1 --quiet",
             dir, dir);
    char *out = mpi_ok(2, args);
    snprintf(p, sizeof p, "cannot remove old checkpoint '%s/ck2/step-000001': Directory not empty",
             dir);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* --save to a path that cannot be a directory fails before step 1, on
 * every rank and in the reference. */
START_TEST(save_checks_its_directory_first)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), args[4096], cmd[4096], path[2048];
    snprintf(path, sizeof path, "%s/file", dir);
    write_text(path, "");
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 2 --save %s/w", dir, path);
    char *out, *why;
    ck_assert(mpi_run(2, args, &out, &why) != 0);
    ck_assert_msg(strstr(out, "--save: cannot create directory '") &&
                      strstr(out, "Not a directory"),
                  "%s", out);
    ck_assert_msg(!strstr(out, "step    1/"), "trained before failing:\n%s", out);
    free(out);
    free(why);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s/plan --steps 2 --save %s/w", PP_ROOT, dir,
             path);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "ppvm: --save: cannot create directory '") &&
                      !strstr(out, "reference step"),
                  "%s", out);
    free(out);
    /* --checkpoint-dir likewise */
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 2 --checkpoint-dir %s/ck --checkpoint-every 1", dir,
             path);
    mpi_fails_with(2, args, "--checkpoint-dir: cannot create directory '");
    remove_dir(dir);
}
END_TEST

/* A --save that fails (rank 1's disk full: a file size limit, SIGXFSZ
 * ignored, so its write fails with EFBIG) or is killed (rank 0, its stage
 * files written, before DIR is replaced) leaves the previous save whole:
 * the weights of step 3, bit for bit, not stage 0 of step 5 beside stage 1
 * of step 3. A later save replaces it whole; a directory holding anything
 * --save does not write (a checkpoint's step directory) is refused before
 * step 1, untouched. */
START_TEST(failed_save_keeps_previous)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), args[4096], p[2048], q[2048], *out;
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 3 --save %s/w --quiet", dir, dir);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args, "cp -r %s/w %s/w3", dir, dir);
    free(run_expect(args, 0));
    snprintf(p, sizeof p, "%s/w", dir);
    snprintf(q, sizeof q, "%s/w3", dir);
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 5 --save %s/w --quiet", dir, dir);
    const char *both[2] = {args, args}, *full[2] = {NULL, "trap \"\" XFSZ; ulimit -f 300;"};
    int rc = mpi_run_mpmd(2, full, both, MPIRUN_TIMEOUT, &out);
    ck_assert_msg(rc != 0 && strstr(out, "File too large"),
                  "expected the save to fail on rank 1 (File too large):\n%s", out);
    free(out);
    compare_exact(p, q);
    snprintf(p, sizeof p, "%s/w.ppvm-new", dir);
    ck_assert_msg(!exists(p), "the failed save left '%s'", p);
    rc = run_killed(2, "0:5:save", args, &out);
    ck_assert_msg(rc != 0, "the run killed while saving succeeded:\n%s", out);
    free(out);
    snprintf(p, sizeof p, "%s/w", dir);
    compare_exact(p, q);
    /* the next save replaces the whole directory (what the kill left is cleared) */
    free(mpi_ok(2, args));
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 5 --save %s/w5 --quiet", dir, dir);
    free(mpi_ok(2, args));
    snprintf(q, sizeof q, "%s/w5", dir);
    compare_exact(p, q);
    snprintf(p, sizeof p, "%s/w.ppvm-new", dir);
    ck_assert_msg(!exists(p), "the save left '%s'", p);
    /* through a symbolic link: the link stays, its target is replaced */
    snprintf(args, sizeof args, "cd %s && ln -s w5 wl", dir);
    free(run_expect(args, 0));
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 3 --save %s/wl --quiet", dir, dir);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args, "test -L %s/wl && test -d %s/w5 && ! test -e %s/wl.ppvm-new", dir,
             dir, dir);
    free(run_expect(args, 0));
    snprintf(p, sizeof p, "%s/w5", dir);
    snprintf(q, sizeof q, "%s/w3", dir);
    compare_exact(p, q);
    /* into a checkpoint's step directory: refused, the checkpoint untouched */
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 2 --checkpoint-dir %s/ck "
             "--checkpoint-every 2 --quiet",
             dir, dir);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 2 --save %s/ck/step-000002", dir,
             dir);
    snprintf(p, sizeof p,
             "ppvm: rank 0: --save: '%s/ck/step-000002' holds 'manifest', which "
             "--save does not write",
             dir);
    mpi_fails_with(2, args, p);
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 2 --resume %s/ck --quiet", dir, dir);
    out = mpi_ok(2, args);
    snprintf(p, sizeof p, "resuming from '%s/ck/step-000002'", dir);
    ck_assert_msg(strstr(out, p) != NULL, "expected \"%s\" in\n%s", p, out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* --compare names a truncated, a padded and a mixed-in file. */
START_TEST(compare_rejects_bad_files)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), cmd[4096], p[2048], q[2048], *out;
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/bin/ppvm --reference plan --steps 1 --save one --quiet && "
             "%s/bin/ppvm --reference plan --steps 2 --save two --quiet && cp -r one bad",
             dir, PP_ROOT, PP_ROOT);
    free(run_expect(cmd, 0));
    snprintf(p, sizeof p, "%s/bad/stage1.w", dir);
    ck_assert(truncate(p, 1000) == 0);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/one %s/bad", PP_ROOT, dir, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "bad/stage1.w' is truncated: its header says "), "%s", out);
    free(out);
    snprintf(q, sizeof q, "%s/one/stage1.w", dir);
    copy_file(q, p);
    snprintf(cmd, sizeof cmd, "printf 'xx' >> %s && %s/bin/ppvm --compare %s/one %s/bad", p,
             PP_ROOT, dir, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "bad/stage1.w' is padded: ") && strstr(out, " but it has "), "%s",
                  out);
    free(out);
    snprintf(q, sizeof q, "%s/two/stage1.w", dir);
    copy_file(q, p);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/one %s/bad", PP_ROOT, dir, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "bad/stage1.w' is from plan ") && strstr(out, "after step 2 but '") &&
                      strstr(out, "the directory mixes files of different runs"),
                  "%s", out);
    free(out);
    /* files of one run in each directory may differ between them: 1 vs 2 steps */
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/one %s/two", PP_ROOT, dir, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "beyond atol"), "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* Sets weight i of the stage file at path to v, its crc32 recomputed (a
 * file as --save writes it, holding a value no run should produce). */
static void set_weight(const char *path, size_t i, float v)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert(fseek(f, 0, SEEK_END) == 0);
    long len = ftell(f);
    uint8_t *buf = malloc((size_t)len);
    ck_assert(buf && fseek(f, 0, SEEK_SET) == 0 && fread(buf, 1, (size_t)len, f) == (size_t)len);
    ck_assert((long)(36 + 4 * (i + 1) + 4) <= len); /* PP_WFILE_HEAD, a weight, the crc */
    memcpy(buf + 36 + 4 * i, &v, 4);
    uint32_t crc = pp_crc32(buf, (size_t)len - 4);
    memcpy(buf + len - 4, &crc, 4);
    ck_assert(fseek(f, 0, SEEK_SET) == 0 && fwrite(buf, 1, (size_t)len, f) == (size_t)len);
    ck_assert(fclose(f) == 0);
    free(buf);
}

/* --compare treats non-finite values exactly: an Inf (or NaN) in one
 * directory only is a difference at any tolerance, never "within
 * tolerance"; the same NaN or Inf at the same place in both is equal. */
START_TEST(compare_nonfinite_exactly)
{
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), cmd[4096], p[2048], q[2048], *out;
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/bin/ppvm --reference plan --steps 1 --save one --quiet "
             "&& cp -r one two",
             dir, PP_ROOT);
    free(run_expect(cmd, 0));
    snprintf(p, sizeof p, "%s/one/stage1.w", dir);
    snprintf(q, sizeof q, "%s/two/stage1.w", dir);
    const float values[] = {INFINITY, -INFINITY, NAN};
    for (int k = 0; k < 3; k++) {
        set_weight(q, 5, values[k]);
        snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/one %s/two --atol 1 --rtol 1", PP_ROOT,
                 dir, dir);
        out = run_expect(cmd, 1);
        ck_assert_msg(strstr(out, "stage 1: ") && strstr(out, "max |diff| inf, 1 beyond atol") &&
                          strstr(out, "(worst at 5: "),
                      "value %g: %s", values[k], out);
        free(out);
        snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/two %s/one", PP_ROOT, dir, dir);
        out = run_expect(cmd, 1); /* either way round */
        ck_assert_msg(strstr(out, "max |diff| inf, 1 beyond atol"), "value %g: %s", values[k], out);
        free(out);
        /* the same value in both: equal, even at zero tolerance */
        set_weight(p, 5, values[k]);
        snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/one %s/two --atol 0 --rtol 0", PP_ROOT,
                 dir, dir);
        out = run_expect(cmd, 0);
        ck_assert_msg(strstr(out, "stage 1: ") &&
                          strstr(out, "max |diff| 0 (1 non-finite, the same in both) (within "
                                      "tolerance)"),
                      "value %g: %s", values[k], out);
        free(out);
    }
    /* Inf against -Inf: different */
    set_weight(p, 5, INFINITY);
    set_weight(q, 5, -INFINITY);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/one %s/two", PP_ROOT, dir, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "1 beyond atol"), "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* The checkpoint flags' errors: exit 2 (usage) or, for what only a run can
 * find, 1 on every rank. */
START_TEST(checkpoint_flag_errors)
{
    static const struct {
        const char *args, *message;
    } bad[] = {
        {"--checkpoint-every 2 p", "--checkpoint-every needs --checkpoint-dir DIR"},
        {"--checkpoint-dir d p", "--checkpoint-dir needs --checkpoint-every N"},
        {"--reshard p", "--reshard needs --resume DIR"},
        {"--reference --resume d p", "they do not go with --reference"},
        {"--checkpoint-every 0 --checkpoint-dir d p",
         "--checkpoint-every 0: expected an integer in [1, "},
        {"--checkpoint-keep x --checkpoint-every 1 --checkpoint-dir d p",
         "--checkpoint-keep x: expected"},
    };
    char cmd[4096];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, "%s/bin/ppvm %s", PP_ROOT, bad[i].args);
        char *out = run_expect(cmd, 2);
        ck_assert_msg(strstr(out, bad[i].message), "%s: expected '%s' in\n%s", cmd, bad[i].message,
                      out);
        free(out);
    }
    char *dir = compile_plan("gpipe.pp", "-D S=2 -D B=2"), args[4096], msg[2048];
    snprintf(args, sizeof args, "--backend cpu %s/plan --resume %s/none", dir, dir);
    snprintf(msg, sizeof msg, "--resume: cannot open checkpoint directory '%s/none'", dir);
    mpi_fails_with(2, args, msg);
    /* --resume of a missing DIR that it would also write to: named as
     * --resume's, and not made (an empty DIR would hide the typo) */
    snprintf(args, sizeof args, "--backend cpu %s/plan --resume %s/none --checkpoint-every 1", dir,
             dir);
    mpi_fails_with(2, args, msg);
    snprintf(msg, sizeof msg, "%s/none", dir);
    ck_assert_msg(!exists(msg), "--resume made its missing directory");
    /* a checkpoint past --steps: refused, not a run of 0 steps saving its weights */
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 2 --checkpoint-dir %s/ck "
             "--checkpoint-every 2 --quiet",
             dir, dir);
    free(mpi_ok(2, args));
    snprintf(args, sizeof args, "--backend cpu %s/plan --steps 1 --resume %s/ck --save %s/w", dir,
             dir, dir);
    snprintf(msg, sizeof msg,
             "ppvm: --resume '%s/ck': its newest usable checkpoint holds 2 steps, "
             "more than --steps 1 (the total, counted from step 0); give --steps 2 or more",
             dir);
    mpi_fails_with(2, args, msg);
    snprintf(msg, sizeof msg, "%s/w/stage0.w", dir);
    ck_assert_msg(!exists(msg), "weights saved by a run refused at start-up");
    /* a run that does not resume ck, checkpointing into it: refused before
     * its first checkpoint would prune ck's newer step 2 */
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 1 --checkpoint-dir %s/ck "
             "--checkpoint-every 1",
             dir, dir);
    snprintf(msg, sizeof msg,
             "ppvm: rank 0: --checkpoint-dir: '%s/ck' already holds the checkpoint "
             "'%s/ck/step-000002' of a run this one does not resume (this run's first checkpoint "
             "would remove it): --resume %s/ck to continue that run, or another directory",
             dir, dir, dir);
    mpi_fails_with(2, args, msg);
    snprintf(msg, sizeof msg, "%s/ck/step-000002/manifest", dir);
    ck_assert_msg(exists(msg), "the refused run removed the checkpoint it was refused for");
    /* resuming it (named another way) writes on into it */
    snprintf(args, sizeof args,
             "--backend cpu %s/plan --steps 3 --resume %s/./ck --checkpoint-dir "
             "%s/ck --checkpoint-every 1 --quiet",
             dir, dir, dir);
    free(mpi_ok(2, args));
    snprintf(msg, sizeof msg, "%s/ck/step-000003/manifest", dir);
    ck_assert_msg(exists(msg), "the resumed run wrote no checkpoint of step 3");
    remove_dir(dir);
}
END_TEST

#define CKPT_TESTS(X)                                                                              \
    X(pipeline_adamw_bf16_resumes_bit_identical, 4)                                                \
    X(fsdp_resumes_bit_identical, 4)                                                               \
    X(lpp_replicas_resume_bit_identical, 4)                                                        \
    X(reshard_gpipe_to_1f1b, 2)                                                                    \
    X(other_plans_checkpoints_kept, 2)                                                             \
    X(bad_checkpoints_fall_back_to_older, 2)                                                       \
    X(special_manifest_falls_back, 2)                                                              \
    X(crash_while_writing_keeps_previous, 2)                                                       \
    X(unwritable_checkpoint_fails_every_rank, 2)                                                   \
    X(save_checks_its_directory_first, 2)                                                          \
    X(failed_save_keeps_previous, 2)                                                               \
    X(compare_rejects_bad_files, 1)                                                                \
    X(compare_nonfinite_exactly, 1)                                                                \
    X(checkpoint_flag_errors, 2)

PP_JOB_SUITE(ckpt, CKPT_TESTS)
