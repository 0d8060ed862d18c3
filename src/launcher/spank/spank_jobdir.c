/* Files under plandir. The plugin runs inside slurmstepd (root, or the job's
 * user with root's process around it) on a directory every user of the
 * cluster can write to, so every path step is taken relative to a
 * directory fd with O_NOFOLLOW: a symlink or FIFO planted by someone else
 * is refused, never followed, and a directory that is not the job user's
 * own, or that others can read, is refused too. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/spank/spank_gcoll.h"

int gcoll_jobdir_step_name(uint32_t job, uint32_t step, char *out, size_t outlen) {
  if (job == 0 || job >= GCOLL_SPANK_SPECIAL_STEP || step >= GCOLL_SPANK_SPECIAL_STEP) return -1;
  int n = snprintf(out, outlen, "%u.%u", job, step);
  return n > 0 && (size_t)n < outlen ? 0 : -1;
}

int gcoll_jobdir_open_root(const char *plandir, int *fd, char *err, size_t errlen) {
  *fd = open(plandir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0) {
    snprintf(err, errlen, "plandir %.256s: %s", plandir, strerror(errno));
    return -1;
  }
  return 0;
}

int gcoll_jobdir_open_private(int parent, const char *name, int create, uid_t uid, gid_t gid,
                              int *fd, char *err, size_t errlen) {
  *fd = -1;
  int made = 0;
  if (create) {
    if (mkdirat(parent, name, 0700) == 0) {
      made = 1;
    } else if (errno != EEXIST) {
      snprintf(err, errlen, "cannot create %s: %s", name, strerror(errno));
      return -1;
    }
  }
  int d = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d < 0) {
    snprintf(err, errlen, "%s: %s", name,
             errno == ELOOP || errno == ENOTDIR ? "not a directory (a symlink?), refusing to use it"
                                                : strerror(errno));
    return -1;
  }
  /* Created by root on the user's behalf: hand it over before checking,
   * so the check below is the same for every caller. */
  if (made && geteuid() == 0 && uid != 0 && fchown(d, uid, gid) != 0) {
    snprintf(err, errlen, "%s: chown to %u: %s", name, (unsigned)uid, strerror(errno));
    close(d);
    return -1;
  }
  struct stat st;
  if (fstat(d, &st) != 0) {
    snprintf(err, errlen, "%s: %s", name, strerror(errno));
    close(d);
    return -1;
  }
  if (st.st_uid != uid) {
    snprintf(err, errlen, "%s is owned by uid %u, not by the job's user (uid %u), refusing to "
                          "use it", name, (unsigned)st.st_uid, (unsigned)uid);
    close(d);
    return -1;
  }
  if ((st.st_mode & 077) != 0) {
    snprintf(err, errlen, "%s has mode %04o: other users could read or replace it, refusing to "
                          "use it", name, (unsigned)(st.st_mode & 07777));
    close(d);
    return -1;
  }
  *fd = d;
  return 0;
}

static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

int gcoll_jobdir_write(int dfd, const char *name, const void *buf, size_t len, char *err,
                       size_t errlen) {
  char tmp[300];
  int n = snprintf(tmp, sizeof(tmp), ".%s.%ld.tmp", name, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof(tmp)) {
    snprintf(err, errlen, "%s: name too long", name);
    return -1;
  }
  /* A stale temp file of ours (a crashed earlier attempt) is removed; if
   * it is something planted, unlinkat removes the link, not its target. */
  unlinkat(dfd, tmp, 0);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot write %s: %s", name, strerror(errno));
    return -1;
  }
  if (write_all(fd, buf, len) != 0 || fsync(fd) != 0) {
    snprintf(err, errlen, "cannot write %s: %s", name, strerror(errno));
    close(fd);
    unlinkat(dfd, tmp, 0);
    return -1;
  }
  if (close(fd) != 0 || renameat(dfd, tmp, dfd, name) != 0) {
    snprintf(err, errlen, "cannot write %s: %s", name, strerror(errno));
    unlinkat(dfd, tmp, 0);
    return -1;
  }
  return 0;
}

int gcoll_jobdir_read(int dfd, const char *name, size_t max, char **buf, size_t *len,
                      char *err, size_t errlen) {
  *buf = NULL;
  *len = 0;
  /* O_NONBLOCK: opening a planted FIFO must not block; regular files
   * ignore it. */
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 1;
    snprintf(err, errlen, "%s: %s", name,
             errno == ELOOP ? "is a symlink, refusing to follow it" : strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file, refusing to read it", name);
    close(fd);
    return -1;
  }
  if ((uint64_t)st.st_size > max) {
    snprintf(err, errlen, "%s: %lld bytes, more than the %zu allowed", name,
             (long long)st.st_size, max);
    close(fd);
    return -1;
  }
  size_t size = (size_t)st.st_size, have = 0;
  char *b = malloc(size + 1);
  if (b == NULL) {
    snprintf(err, errlen, "%s: out of memory", name);
    close(fd);
    return -1;
  }
  while (have < size) {
    ssize_t n = read(fd, b + have, size - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += (size_t)n;
  }
  close(fd);
  if (have != size) {
    snprintf(err, errlen, "%s: short read (%zu of %zu bytes)", name, have, size);
    free(b);
    return -1;
  }
  b[size] = '\0';
  *buf = b;
  *len = size;
  return 0;
}

/* Files of one directory, and (depth > 0) its subdirectories' files. */
static int remove_entries(int dfd, int depth) {
  int copy = dup(dfd);
  if (copy < 0) return -1;
  DIR *d = fdopendir(copy);
  if (d == NULL) {
    close(copy);
    return -1;
  }
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (unlinkat(dfd, e->d_name, 0) == 0) continue;
    if ((errno == EISDIR || errno == EPERM) && depth > 0) {
      int sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        if (remove_entries(sub, depth - 1) != 0) rc = -1;
        close(sub);
      }
      if (unlinkat(dfd, e->d_name, AT_REMOVEDIR) != 0) rc = -1;
    } else {
      rc = -1;
    }
  }
  closedir(d);
  return rc;
}

int gcoll_jobdir_remove(int parent, const char *name, char *err, size_t errlen) {
  int d = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d < 0) {
    if (errno == ENOENT) return 0;
    if (errno == ELOOP || errno == ENOTDIR) {
      /* Something planted in the job's name: remove the link itself. */
      if (unlinkat(parent, name, 0) == 0) return 0;
    }
    snprintf(err, errlen, "cannot remove %s: %s", name, strerror(errno));
    return -1;
  }
  int rc = remove_entries(d, 1);
  close(d);
  if (unlinkat(parent, name, AT_REMOVEDIR) != 0 || rc != 0) {
    snprintf(err, errlen, "cannot remove %s completely: %s", name, strerror(errno));
    return -1;
  }
  return 0;
}
