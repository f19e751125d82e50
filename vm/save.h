/* save.h - --save as a whole (vm/save.c): the weights of a run replace an
 * earlier --save's directory all at once or not at all, so that a full
 * disk, a failed rank or a kill while saving leaves the previous save
 * whole (issue 25).
 *
 * DIR's new files are written into DIR.ppvm-new (a sibling, on the same
 * file system), which then takes DIR's place in one rename
 * (renameat2 RENAME_EXCHANGE; where the file system cannot exchange, DIR
 * is first renamed to DIR.ppvm-old), and the old files are removed. DIR
 * may hold only what --save writes (stage<s>.w): a directory holding
 * anything else (a checkpoint's step directory, a plan, the current
 * directory) is refused before training, since replacing it would remove
 * what it holds. */
#ifndef PP_VM_SAVE_H
#define PP_VM_SAVE_H

#include <stddef.h>

/* Before training: DIR exists (it is made) or can be, is a directory
 * holding nothing but an earlier --save's files, and DIR.ppvm-new can be
 * made beside it. 0, or -1 with err. */
int pp_save_check(const char *dir, char *err, size_t errlen);

/* The directory the files of a save are written to: DIR.ppvm-new. */
void pp_save_staging(const char *dir, char *buf, size_t n);

/* Makes DIR.ppvm-new empty (removing what a save cut short left there).
 * 0, or -1 with err. */
int pp_save_begin(const char *dir, char *err, size_t errlen);

/* Once every stage file is written (and synced) in DIR.ppvm-new: puts it
 * in DIR's place and removes the previous files. 0, or -1 with err (DIR
 * then still holds the previous save). */
int pp_save_commit(const char *dir, char *err, size_t errlen);

/* Removes DIR.ppvm-new after a save that failed (best effort). */
void pp_save_abandon(const char *dir);

#endif
