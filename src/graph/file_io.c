/* The one way plan and topology files are read and written. Paths come
 * from users, environment variables and shared directories, so reading
 * must never block on a FIFO or reach a device, and writing must never
 * leave a half-written, guessable or world-readable-while-written file. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkostemp */
#endif
#include "yaml_doc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- reading ---------------------------------------------------------------- */

static const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

static int refuse_kind(const char *path, mode_t mode, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: is %s, not a regular file", path, file_kind(mode));
  return -1;
}

static int sys_error(const char *path, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s: %s", path, what, strerror(errno));
  return -1;
}

/* The stat before open keeps devices from ever being opened (opening one
 * can rewind a tape or hang up a line); O_NONBLOCK keeps a FIFO swapped in
 * after the stat from blocking the open, and the fstat then refuses it. */
static int open_regular(const char *path, struct stat *st, char *err, size_t errlen) {
  struct stat pre;
  if (stat(path, &pre) != 0) return sys_error(path, "cannot open", err, errlen);
  if (!S_ISREG(pre.st_mode)) return refuse_kind(path, pre.st_mode, err, errlen);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return sys_error(path, "cannot open", err, errlen);
  int flags = fcntl(fd, F_GETFL);
  if (fstat(fd, st) != 0 || flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    sys_error(path, "cannot open", err, errlen);
  } else if (!S_ISREG(st->st_mode)) {
    refuse_kind(path, st->st_mode, err, errlen);
  } else if (st->st_dev != pre.st_dev || st->st_ino != pre.st_ino) {
    snprintf(err, errlen, "%s: replaced while being opened", path);
  } else {
    return fd;
  }
  close(fd);
  return -1;
}

/* Reads up to size bytes; a file truncated meanwhile gives what is there. */
static int read_all(int fd, const char *path, char *p, size_t size, size_t *got, char *err,
                    size_t errlen) {
  *got = 0;
  while (*got < size) {
    ssize_t r = read(fd, p + *got, size - *got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sys_error(path, "read failed", err, errlen);
    if (r == 0) break;
    *got += (size_t)r;
  }
  return 0;
}

int gcoll_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, char *err,
                    size_t errlen) {
  struct stat st;
  int fd = open_regular(path, &st, err, errlen);
  if (fd < 0) return -1;
  char *p = NULL;
  size_t got = 0;
  if ((uint64_t)st.st_size > max_bytes) {
    snprintf(err, errlen, "%s: %lld bytes is larger than the %zu-byte limit", path,
             (long long)st.st_size, max_bytes);
  } else if ((p = malloc((size_t)st.st_size + 1)) == NULL) {
    snprintf(err, errlen, "%s: out of memory", path);
  } else if (read_all(fd, path, p, (size_t)st.st_size, &got, err, errlen) == 0) {
    close(fd);
    p[got] = '\0';
    *buf = p;
    *len = got;
    return 0;
  }
  free(p);
  close(fd);
  return -1;
}

/* ---- atomic writing ------------------------------------------------------------ */

/* The directory is opened first: it is what gets fsync'ed after the rename,
 * and a missing or unusable one is reported by name before anything is
 * created. */
static int open_parent(const char *path, char *err, size_t errlen) {
  const char *slash = strrchr(path, '/');
  char *dir = slash == NULL ? strdup(".")
              : slash == path ? strdup("/")
                              : strndup(path, (size_t)(slash - path));
  if (dir == NULL) {
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) snprintf(err, errlen, "%s: cannot write into %s: %s", path, dir, strerror(errno));
  free(dir);
  return dfd;
}

/* A random name that other users cannot predict and pre-create (O_EXCL,
 * O_NOFOLLOW), mode 0600 until complete. */
static int make_temp(const char *path, char **tmp, char *err, size_t errlen) {
  size_t n = strlen(path) + sizeof(".tmp.XXXXXX");
  *tmp = malloc(n);
  if (*tmp == NULL) {
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  snprintf(*tmp, n, "%s.tmp.XXXXXX", path);
  int fd = mkostemp(*tmp, O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot create a temporary file: %s", path, strerror(errno));
    free(*tmp);
    *tmp = NULL;
  }
  return fd;
}

/* Writes and closes the temporary; the final mode is set only once the
 * content is complete, and made durable with it. */
static int write_temp(int fd, const char *path,
                      int (*fn)(void *FILE_stream, const void *arg, char *err, size_t errlen),
                      const void *arg, char *err, size_t errlen) {
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    sys_error(path, "cannot write", err, errlen);
    close(fd);
    return -1;
  }
  int rc = fn(f, arg, err, errlen);
  if (rc == 0 && (fflush(f) != 0 || ferror(f)))
    rc = sys_error(path, "write failed", err, errlen);
  if (rc == 0 && fchmod(fd, GCOLL_ATOMIC_WRITE_MODE) != 0)
    rc = sys_error(path, "cannot set the mode", err, errlen);
  if (rc == 0 && fsync(fd) != 0) rc = sys_error(path, "fsync failed", err, errlen);
  if (fclose(f) != 0 && rc == 0) rc = sys_error(path, "write failed", err, errlen);
  return rc;
}

/* Without this the rename may be lost in a crash even though the file's
 * data was synced. Filesystems that cannot sync directories say EINVAL. */
static int sync_dir(int dfd, const char *path, char *err, size_t errlen) {
  if (fsync(dfd) == 0 || errno == EINVAL) return 0;
  return sys_error(path, "written, but syncing its directory failed", err, errlen);
}

int gcoll_atomic_write(const char *path,
                       int (*fn)(void *FILE_stream, const void *arg, char *err, size_t errlen),
                       const void *arg, char *err, size_t errlen) {
  char *tmp = NULL;
  int dfd = open_parent(path, err, errlen);
  if (dfd < 0) return -1;
  int rc = -1, fd = make_temp(path, &tmp, err, errlen);
  if (fd >= 0) {
    if (write_temp(fd, path, fn, arg, err, errlen) != 0) {
      unlink(tmp);
    } else if (rename(tmp, path) != 0) {
      sys_error(path, "cannot rename into place", err, errlen);
      unlink(tmp);
    } else {
      rc = sync_dir(dfd, path, err, errlen);
    }
  }
  free(tmp);
  close(dfd);
  return rc;
}
