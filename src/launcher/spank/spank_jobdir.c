/* Files under plandir. The plugin runs inside slurmstepd (root, or the job's
 * user with root's process around it), so every path step is taken
 * relative to a directory fd with O_NOFOLLOW: a symlink or FIFO planted by
 * someone else is refused, never followed, and a directory that is not the
 * job user's own, or that others can read, is refused too.
 *
 * Where a job's files live: plandir/<uid>/<job>.<step>/. Job ids are
 * sequential, so any name a job's user could create in a directory
 * everyone writes to could be taken first by another user, and the job's
 * plan phase would then fail (or, without the owner checks, read someone
 * else's plan). So the job's directory is made where only its user can
 * write: plandir/<uid>, made by root from slurmstepd's init_post_opt
 * (before privileges are dropped), owned by the user, 0700, and checked
 * again every time it is used. Chosen over making the directory from the
 * job prolog because init_post_opt runs on every node of every step, with
 * the step's uid at hand, whether or not the cluster runs prologs
 * (PrologFlags, a prolog that only starts with the first step on a node),
 * and because one directory per user is made once, not once per job.
 * plandir itself can then be root's, 0755: no user needs to write it. On a
 * legacy world-writable plandir whatever another user put under the name
 * <uid> is renamed aside by root and a fresh directory made. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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
  struct stat st;
  if (fstat(d, &st) != 0) {
    snprintf(err, errlen, "%s: %s", name, strerror(errno));
    close(d);
    return -1;
  }
  /* Created by root on the user's behalf: hand it over before checking,
   * so the check below is the same for every caller. Only if what was
   * opened is root's own: another directory swapped in between mkdirat
   * and openat must not be handed to the user with its content. */
  if (made && geteuid() == 0 && uid != 0 && st.st_uid == 0) {
    if (fchown(d, uid, gid) != 0) {
      snprintf(err, errlen, "%s: chown to %u: %s", name, (unsigned)uid, strerror(errno));
      close(d);
      return -1;
    }
    st.st_uid = uid;
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

int gcoll_jobdir_nonce(char *out, size_t outlen, char *err, size_t errlen) {
  unsigned char raw[GCOLL_SPANK_NONCE_LEN / 2];
  if (outlen < 2 * sizeof(raw) + 1) {
    snprintf(err, errlen, "nonce buffer too small");
    return -1;
  }
  if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
    snprintf(err, errlen, "getrandom: %s", strerror(errno));
    return -1;
  }
  for (size_t i = 0; i < sizeof(raw); i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
  return 0;
}

/* A new file "<prefix><random>.tmp" in dfd, O_EXCL, mode 0600. The name is
 * unpredictable, so nobody can have planted anything under it (and
 * O_EXCL|O_NOFOLLOW refuses it if they guessed anyway). */
static int open_temp(int dfd, const char *prefix, char *tmp, size_t tmplen) {
  char rnd[GCOLL_SPANK_NONCE_LEN + 1], why[64];
  for (int attempt = 0; attempt < 8; attempt++) {
    if (gcoll_jobdir_nonce(rnd, sizeof(rnd), why, sizeof(why)) != 0) return -1;
    int n = snprintf(tmp, tmplen, "%s%s.tmp", prefix, rnd);
    if (n < 0 || (size_t)n >= tmplen) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

int gcoll_jobdir_write(int dfd, const char *name, const void *buf, size_t len, char *err,
                       size_t errlen) {
  char tmp[300], prefix[280];
  int n = snprintf(prefix, sizeof(prefix), ".%s.", name);
  if (n < 0 || (size_t)n >= sizeof(prefix)) {
    snprintf(err, errlen, "%s: name too long", name);
    return -1;
  }
  int fd = open_temp(dfd, prefix, tmp, sizeof(tmp));
  if (fd < 0) {
    snprintf(err, errlen, "cannot write %s: %s", name, strerror(errno));
    return -1;
  }
  /* 0600 whatever the umask left, before any byte is in it. */
  if (fchmod(fd, 0600) != 0 || write_all(fd, buf, len) != 0 || fsync(fd) != 0) {
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
  /* The rename is only durable once the directory is: without this a
   * crash could leave the name pointing at nothing, or at the old file. */
  if (fsync(dfd) != 0 && errno != EINVAL) {
    snprintf(err, errlen, "cannot write %s: fsync of its directory: %s", name, strerror(errno));
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
    /* ENOENT: another node's epilog (or node 0) removing it too. */
    if (unlinkat(dfd, e->d_name, 0) == 0 || errno == ENOENT) continue;
    if ((errno == EISDIR || errno == EPERM) && depth > 0) {
      int sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        if (remove_entries(sub, depth - 1) != 0) rc = -1;
        close(sub);
      }
      if (unlinkat(dfd, e->d_name, AT_REMOVEDIR) != 0 && errno != ENOENT) rc = -1;
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
  if ((unlinkat(parent, name, AT_REMOVEDIR) != 0 && errno != ENOENT) || rc != 0) {
    snprintf(err, errlen, "cannot remove %s completely: %s", name, strerror(errno));
    return -1;
  }
  return 0;
}

int gcoll_jobdir_belongs_to_job(const char *name, uint32_t job) {
  char prefix[16];
  int n = snprintf(prefix, sizeof(prefix), "%u.", job);
  if (name[0] == '.') name++;
  return n > 0 && strncmp(name, prefix, (size_t)n) == 0 && name[n] != '\0';
}

static int user_dir_name(uid_t uid, char *out, size_t outlen) {
  int n = snprintf(out, outlen, "%u", (unsigned)uid);
  return n > 0 && (size_t)n < outlen ? 0 : -1;
}

/* plandir/<uid> as it stands: 0 usable by uid as is (fixed up when it is
 * root's own or too open, see below), 1 missing, 2 someone else's or not
 * a directory, -1 on error. */
static int user_parent_check(int root, const char *name, uid_t uid, gid_t gid, char *err,
                             size_t errlen) {
  int d = openat(root, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d < 0) {
    if (errno == ENOENT) return 1;
    if (errno == ELOOP || errno == ENOTDIR) return 2;
    snprintf(err, errlen, "%s: %s", name, strerror(errno));
    return -1;
  }
  int rc = 0;
  struct stat st;
  if (fstat(d, &st) != 0) {
    snprintf(err, errlen, "%s: %s", name, strerror(errno));
    rc = -1;
  } else if (st.st_uid != uid && st.st_uid != geteuid()) {
    rc = 2;
  } else if (st.st_uid != uid && fchown(d, uid, gid) != 0) {
    /* Root's own: made by a step of the same user starting at the same
     * time on this node, between its mkdirat and fchown. Only root can
     * make root's directories, so it holds nothing anyone else put. */
    snprintf(err, errlen, "%s: chown to %u: %s", name, (unsigned)uid, strerror(errno));
    rc = -1;
  } else if ((st.st_mode & 077) != 0 && fchmod(d, st.st_mode & 0700) != 0) {
    /* The user's own, opened up by the user: closed again rather than
     * moved, so the user's other running jobs keep their paths. */
    snprintf(err, errlen, "%s: chmod: %s", name, strerror(errno));
    rc = -1;
  }
  close(d);
  return rc;
}

int gcoll_jobdir_user_parent(int root, uid_t uid, gid_t gid, char *moved, size_t movedlen,
                             char *err, size_t errlen) {
  char name[16], aside[64], rnd[GCOLL_SPANK_NONCE_LEN + 1];
  int rc = -1;
  if (movedlen > 0) moved[0] = '\0';
  if (user_dir_name(uid, name, sizeof(name)) != 0) {
    snprintf(err, errlen, "uid %u: no directory name", (unsigned)uid);
    goto out;
  }
  /* A few rounds: another user may put something back between our
   * rename and mkdir (only on a world-writable plandir). */
  for (int round = 0; round < 4; round++) {
    int st = user_parent_check(root, name, uid, gid, err, errlen);
    if (st < 0) goto out;
    if (st == 0) {
      rc = 0;
      goto out;
    }
    if (st == 2) {
      /* Renamed, not removed: root deletes nothing it did not make, and
       * the administrator may want to see what was planted. */
      if (gcoll_jobdir_nonce(rnd, sizeof(rnd), err, errlen) != 0) goto out;
      snprintf(aside, sizeof(aside), ".%s.refused.%.16s", name, rnd);
      if (renameat(root, name, root, aside) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "%s is not the user's and cannot be moved aside: %s", name,
                 strerror(errno));
        goto out;
      }
      if (movedlen > 0) snprintf(moved, movedlen, "%s", aside);
      continue;
    }
    if (mkdirat(root, name, 0700) != 0 && errno != EEXIST) {
      snprintf(err, errlen, "cannot create %s: %s", name, strerror(errno));
      goto out;
    }
    /* The next round checks what is there now, and hands it over. */
  }
  snprintf(err, errlen, "%s keeps being replaced, giving up", name);
out:
  if (rc == 0) fsync(root);
  return rc;
}

int gcoll_jobdir_open_user(int root, uid_t uid, int *fd, char *err, size_t errlen) {
  char name[16];
  *fd = -1;
  if (user_dir_name(uid, name, sizeof(name)) != 0) {
    snprintf(err, errlen, "uid %u: no directory name", (unsigned)uid);
    return -1;
  }
  return gcoll_jobdir_open_private(root, name, 0, uid, (gid_t)-1, fd, err, errlen);
}

int gcoll_jobdir_read_nonce(int dfd, char *nonce, size_t noncelen, char *err, size_t errlen) {
  char *buf = NULL;
  size_t len = 0;
  int rc = gcoll_jobdir_read(dfd, "nonce", 256, &buf, &len, err, errlen);
  if (rc != 0) return rc;
  if (len != GCOLL_SPANK_NONCE_LEN || strspn(buf, "0123456789abcdef") != len || noncelen <= len) {
    snprintf(err, errlen, "nonce: malformed");
    rc = -1;
  } else {
    memcpy(nonce, buf, len + 1);
  }
  free(buf);
  return rc;
}

int gcoll_jobdir_fresh(int parent, const char *name, const char *nonce, uid_t uid, gid_t gid,
                       int *fd, char *err, size_t errlen) {
  char tmp[128], why[GCOLL_SPANK_ERRLEN];
  int d = -1, sub = -1, rc = -1;
  *fd = -1;
  int n = snprintf(tmp, sizeof(tmp), ".%s.%s", name, nonce);
  if (n < 0 || (size_t)n >= sizeof(tmp)) {
    snprintf(err, errlen, "%s: name too long", name);
    goto out;
  }
  if (gcoll_jobdir_open_private(parent, tmp, 1, uid, gid, &d, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "cannot make a fresh %s: %s", name, why);
    goto out;
  }
  static const char *const subdirs[] = {"topo", "nodes"};
  for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]); i++) {
    if (gcoll_jobdir_open_private(d, subdirs[i], 1, uid, gid, &sub, why, sizeof(why)) != 0) {
      snprintf(err, errlen, "cannot make a fresh %s: %s", name, why);
      goto out;
    }
    close(sub);
    sub = -1;
  }
  if (gcoll_jobdir_write(d, "nonce", nonce, strlen(nonce), why, sizeof(why)) != 0) {
    snprintf(err, errlen, "cannot make a fresh %s: %s", name, why);
    goto out;
  }
  /* Leftovers of an earlier run under this job id (a requeue, or a run
   * whose epilog never came) go first: their plan must never be taken
   * for this run's. A node of this run that joined them before they were
   * removed sees the nonce change and joins again. The removal can race
   * with such a node still writing there: a few rounds. */
  for (int round = 0;; round++) {
    if (gcoll_jobdir_remove(parent, name, why, sizeof(why)) == 0) {
      if (renameat(parent, tmp, parent, name) == 0) break;
      snprintf(why, sizeof(why), "%s", strerror(errno));
    }
    if (round == 8) {
      snprintf(err, errlen, "cannot replace what an earlier run left in %s: %s", name, why);
      goto out;
    }
  }
  fsync(parent);
  *fd = d;
  d = -1;
  rc = 0;
out:
  if (sub >= 0) close(sub);
  if (d >= 0) {
    close(d);
    gcoll_jobdir_remove(parent, tmp, why, sizeof(why));
  }
  return rc;
}

int gcoll_jobdir_join(int parent, const char *name, uid_t uid, gid_t gid, int *fd, char *nonce,
                      size_t noncelen, char *err, size_t errlen) {
  *fd = -1;
  struct stat st;
  if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) return 1;
  int d = -1;
  int rc = gcoll_jobdir_open_private(parent, name, 0, uid, gid, &d, err, errlen);
  if (rc != 0) return rc;
  rc = gcoll_jobdir_read_nonce(d, nonce, noncelen, err, errlen);
  if (rc != 0) {
    close(d);
    return rc;
  }
  *fd = d;
  return 0;
}
