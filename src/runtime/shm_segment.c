/* Shared-memory segments of this user only (see shm_segment.h). */
#include "runtime/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *gcoll_shm_create(const char *name, size_t bytes, char *err, size_t errlen) {
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "shm_open %s: %s", name, strerror(errno));
    return NULL;
  }
  void *map = MAP_FAILED;
  /* Openers refuse anything but 0600, whatever this process's umask. */
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)bytes) != 0)
    snprintf(err, errlen, "sizing %s to %zu bytes: %s", name, bytes, strerror(errno));
  else if ((map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    snprintf(err, errlen, "mmap %s (%zu bytes): %s", name, bytes, strerror(errno));
  close(fd);
  if (map == MAP_FAILED) {
    shm_unlink(name);
    return NULL;
  }
  return map;
}

void *gcoll_shm_attach(const char *name, size_t bytes, int unlink_name, const char *creator,
                       int *gone, char *err, size_t errlen) {
  *gone = 0;
  int fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    *gone = errno == ENOENT;
    snprintf(err, errlen, "shm_open %s: %s (did %s close or die?)", name, strerror(errno),
             creator);
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 07777) != 0600) {
    snprintf(err, errlen, "shm segment %s is owned by uid %u with mode %04o, not by us (uid %u) "
             "with 0600: refusing a segment another user planted", name, (unsigned)st.st_uid,
             (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
    close(fd);
    return NULL;
  }
  if (unlink_name) shm_unlink(name);
  if ((uint64_t)st.st_size != (uint64_t)bytes) {
    snprintf(err, errlen, "shm segment %s has %lld bytes, expected %zu", name,
             (long long)st.st_size, bytes);
    close(fd);
    return NULL;
  }
  void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int saved = errno;
  close(fd);
  if (map == MAP_FAILED) {
    snprintf(err, errlen, "mmap %s: %s", name, strerror(saved));
    return NULL;
  }
  return map;
}
