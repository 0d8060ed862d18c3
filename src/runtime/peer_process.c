/* Whether a peer's process lives (transport.h): the shm transport asks it
 * for every connection each time the proxy checks (~100 ms), and a sender
 * asks before it frees memory a receiver may still read.
 *
 * Reading /proc/<pid>/stat (open, format, parse, close) costs 10-20 us; a
 * rank with a few local peers and several channels asks dozens of times a
 * round, and a process waiting seconds for a large job's others to start
 * (256 ranks on 2 cores) spent more CPU on these checks than on its whole
 * init. So each (pid, start time) seen alive once is watched through a
 * pidfd (Linux 5.3), which turns readable when the process ends, zombie
 * included: one poll() with no timeout, about 1 us, and no pid reuse
 * question, as the descriptor names the process, not the number. Where
 * pidfd_open is missing or refused, /proc is read every time, as before. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/transport.h"

/* Processes watched at once; past this, /proc is read (a host's ranks are
 * far fewer). */
#define MAX_WATCHED 512

/* State letter and starttime from /proc/<pid>/stat; -1 when unreadable.
 * The command name may hold spaces and parentheses: fields are counted from
 * the last ')'. */
static int proc_stat(int pid, char *state, uint64_t *start) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (p == NULL || p[1] != ' ' || p[2] == '\0') return -1;
  *state = p[2];
  /* starttime is field 22; the state is field 3. */
  p += 2;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (p == NULL) return -1;
    p++;
  }
  *start = strtoull(p, NULL, 10);
  return 0;
}

uint64_t gcoll_process_start_ticks(int pid) {
  char state;
  uint64_t start;
  return proc_stat(pid, &state, &start) == 0 ? start : 0;
}

/* The answer from /proc alone. A zombie is dead to its peers (its parent
 * may not have reaped it yet); a different start time means the pid was
 * reused. Without /proc (or for a process we may not inspect) kill() is
 * all we know. */
static int alive_by_proc(int pid, uint64_t start_ticks, int *known) {
  *known = 0;
  if (kill(pid, 0) == -1 && errno == ESRCH) return 0;
  char state;
  uint64_t start;
  if (proc_stat(pid, &state, &start) != 0) return 1;
  if (state == 'Z' || state == 'X' || state == 'x') return 0;
  *known = 1;
  return start_ticks == 0 || start == start_ticks;
}

struct watched {
  int pid;
  int fd;            /* the pidfd; -1 once the process was seen to end */
  uint64_t start;
};

static struct {
  pthread_mutex_t lock;
  struct watched w[MAX_WATCHED];
  int n;
  int unsupported;   /* pidfd_open failed with ENOSYS (or is not in the headers) */
} W = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int pidfd_open_of(int pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, pid, 0);
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

/* A pidfd for (pid, start), or -1: opened only after /proc says this very
 * process lives, and checked again after, so the descriptor cannot name a
 * process that took the number in between. */
static int watch(int pid, uint64_t start) {
  if (W.unsupported || W.n == MAX_WATCHED) return -1;
  int fd = pidfd_open_of(pid);
  if (fd < 0) {
    if (errno == ENOSYS) W.unsupported = 1;
    return -1;
  }
  int known;
  if (!alive_by_proc(pid, start, &known) || !known) {
    close(fd);
    return -1;
  }
  W.w[W.n++] = (struct watched){.pid = pid, .fd = fd, .start = start};
  return fd;
}

int gcoll_process_alive(int pid, uint64_t start_ticks) {
  if (pid <= 0) return 0;
  int known;
  /* Without a start time the pid alone cannot be watched safely. */
  if (start_ticks == 0) return alive_by_proc(pid, 0, &known);
  pthread_mutex_lock(&W.lock);
  struct watched *w = NULL;
  for (int i = 0; i < W.n && w == NULL; i++)
    if (W.w[i].pid == pid && W.w[i].start == start_ticks) w = &W.w[i];
  int alive;
  if (w != NULL && w->fd < 0) {
    alive = 0;
  } else if (w != NULL) {
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
    int r = poll(&p, 1, 0);
    if (r == 1 && (p.revents & POLLNVAL)) {
      /* The application closed our descriptor (a daemon closing every fd):
       * back to /proc for this process. */
      w->fd = -1;
      alive = alive_by_proc(pid, start_ticks, &known);
      if (alive) *w = W.w[--W.n];
    } else if (r == 1) {
      close(w->fd);
      w->fd = -1;
      alive = 0;
    } else {
      alive = 1;
    }
  } else {
    alive = alive_by_proc(pid, start_ticks, &known);
    if (alive && known) (void)watch(pid, start_ticks);
  }
  pthread_mutex_unlock(&W.lock);
  return alive;
}
