/* save.c - --save as a whole (save.h): the new weights are written into a
 * sibling directory that then takes the old directory's place in one
 * rename, so that a save cut short by a full disk, a failed rank or a kill
 * leaves the previous save as it was, never half of each. */
#include "save.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weights.h"

#define PATHLEN 4200

/* dir as renamed: where it exists, its real path (a symbolic link to a
 * save directory stays a link, its target replaced beside it); else dir
 * without trailing slashes (a lone "/" kept). */
static void trimmed(const char *dir, char *buf, size_t n)
{
    char *real = realpath(dir, NULL);
    snprintf(buf, n, "%s", real ? real : dir);
    free(real);
    for (size_t len = strlen(buf); len > 1 && buf[len - 1] == '/'; len--)
        buf[len - 1] = 0;
}

static void sibling(const char *dir, const char *suffix, char *buf, size_t n)
{
    char d[PATHLEN];
    trimmed(dir, d, sizeof d);
    snprintf(buf, n, "%s%s", d, suffix);
}

void pp_save_staging(const char *dir, char *buf, size_t n) { sibling(dir, ".ppvm-new", buf, n); }

/* The directory that holds dir ("." when none), for fsyncing a rename. */
static void parent_of(const char *dir, char *buf, size_t n)
{
    char d[PATHLEN];
    trimmed(dir, d, sizeof d);
    char *slash = strrchr(d, '/');
    if (!slash)
        snprintf(buf, n, ".");
    else
        snprintf(buf, n, "%.*s", slash == d ? 1 : (int)(slash - d), d);
}

/* Whether name is one that --save writes (or left behind when an earlier
 * version of it was cut short, or the ranks' writability probe). */
static int save_file(const char *name)
{
    int stage, end = -1;
    if (!strncmp(name, ".ppvm-probe-", 12))
        return 1;
    if (sscanf(name, "stage%d.w%n", &stage, &end) == 1 && end > 0 && stage >= 0)
        return !name[end] || !strcmp(name + end, ".tmp");
    return 0;
}

/* Removes dir's files (all of them save files, else -1 with errno ENOTEMPTY
 * and *foreign its first other entry) and dir itself. Missing: 0. */
static int remove_save_dir(const char *dir, char *foreign, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char path[PATHLEN + 300];
    int rc = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            if (!save_file(e->d_name)) {
                if (foreign)
                    snprintf(foreign, n, "%s", e->d_name);
                rc = -1;
                errno = ENOTEMPTY;
                break;
            }
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) && errno != ENOENT) {
                rc = -1;
                break;
            }
        }
    int saved = errno;
    closedir(d);
    errno = saved;
    return rc ? -1 : rmdir(dir);
}

/* The first entry of dir that --save does not write, into name; 1 if any,
 * 0 if none, -1 when dir cannot be read. */
static int foreign_entry(const char *dir, char *name, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !save_file(e->d_name)) {
            snprintf(name, n, "%s", e->d_name);
            found = 1;
        }
    closedir(d);
    return found;
}

int pp_save_check(const char *dir, char *err, size_t errlen)
{
    char d[PATHLEN], staging[PATHLEN + 16], old[PATHLEN + 16], name[256];
    struct stat st;
    snprintf(d, sizeof d, "%s", dir); /* the name as given: '.' is refused, not resolved */
    for (size_t len = strlen(d); len > 1 && d[len - 1] == '/'; len--)
        d[len - 1] = 0;
    const char *base = strrchr(d, '/') ? strrchr(d, '/') + 1 : d;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        snprintf(err, errlen,
                 "'%s': --save replaces the whole directory, so it must be one "
                 "that can be renamed (not '.', '..' or '/'): name a directory of its own",
                 dir);
        return -1;
    }
    trimmed(dir, d, sizeof d);
    pp_save_staging(d, staging, sizeof staging);
    sibling(d, ".ppvm-old", old, sizeof old);
    if (stat(d, &st) && errno == ENOENT && !stat(old, &st)) {
        snprintf(err, errlen,
                 "a save into '%s' was cut short while replacing it: the previous "
                 "weights are in '%s' and the new ones in '%s'; move the one to keep to '%s'",
                 d, old, staging, d);
        return -1;
    }
    if (pp_dir_writable(d, 0, err, errlen))
        return -1;
    int found = foreign_entry(d, name, sizeof name);
    if (found) {
        if (found < 0)
            snprintf(err, errlen, "cannot read directory '%s': %s", d, strerror(errno));
        else
            snprintf(err, errlen,
                     "'%s' holds '%s', which --save does not write: --save replaces "
                     "the whole directory, so it must be new, empty or an earlier --save's",
                     d, name);
        return -1;
    }
    /* the sibling it writes into: made and removed again (what a save cut
     * short left there is only a part of that save) */
    if (remove_save_dir(staging, name, sizeof name)) {
        snprintf(err, errlen, "cannot remove '%s' (left by a save cut short): %s%s%s", staging,
                 strerror(errno), errno == ENOTEMPTY ? "; it holds " : "",
                 errno == ENOTEMPTY ? name : "");
        return -1;
    }
    if (pp_dir_writable(staging, 0, err, errlen))
        return -1;
    rmdir(staging);
    return 0;
}

int pp_save_begin(const char *dir, char *err, size_t errlen)
{
    char staging[PATHLEN + 16], parent[PATHLEN], name[256] = "";
    pp_save_staging(dir, staging, sizeof staging);
    parent_of(dir, parent, sizeof parent);
    if (remove_save_dir(staging, name, sizeof name) || mkdir(staging, 0777) ||
        pp_fsync_dir(parent)) {
        snprintf(err, errlen, "cannot make '%s' empty: %s%s%s", staging, strerror(errno),
                 name[0] ? "; it holds " : "", name);
        return -1;
    }
    return 0;
}

int pp_save_commit(const char *dir, char *err, size_t errlen)
{
    char d[PATHLEN], staging[PATHLEN + 16], old[PATHLEN + 16], parent[PATHLEN];
    trimmed(dir, d, sizeof d);
    pp_save_staging(d, staging, sizeof staging);
    sibling(d, ".ppvm-old", old, sizeof old);
    parent_of(d, parent, sizeof parent);
    if (pp_fsync_dir(staging)) {
        snprintf(err, errlen, "cannot fsync '%s': %s", staging, strerror(errno));
        return -1;
    }
    /* one rename: DIR is the old save or the new one, never a mix */
    const char *gone = staging; /* where the previous files are after the swap */
    if (renameat2(AT_FDCWD, staging, AT_FDCWD, d, RENAME_EXCHANGE)) {
        if (errno == ENOENT && !rename(staging, d))
            gone = NULL; /* there was no previous save */
        else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
            snprintf(err, errlen,
                     "cannot put '%s' in the place of '%s': %s (the previous save "
                     "is untouched)",
                     staging, d, strerror(errno));
            return -1;
        } else if (rename(d, old) || rename(staging, d)) {
            /* a file system without exchange: two renames; a crash between
             * them is found by the next --save's check (DIR.ppvm-old) */
            snprintf(err, errlen, "cannot replace '%s' by '%s': %s", d, staging, strerror(errno));
            rename(old, d);
            return -1;
        } else
            gone = old;
    }
    if (pp_fsync_dir(parent)) {
        snprintf(err, errlen, "cannot fsync '%s' after renaming '%s': %s", parent, d,
                 strerror(errno));
        return -1;
    }
    if (gone)
        remove_save_dir(gone, NULL, 0); /* only save files: checked before training */
    return 0;
}

void pp_save_abandon(const char *dir)
{
    char staging[PATHLEN + 16];
    pp_save_staging(dir, staging, sizeof staging);
    remove_save_dir(staging, NULL, 0);
}
