/* --tag-output: ranks write into pipes; gcollrun is the only writer of its
 * stdout/stderr and writes whole lines, so lines of different ranks never
 * interleave. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "launcher/gcollrun.h"

/* Write errors (a closed pipe downstream, a full disk) drop the output but
 * never stop the pump: a rank blocked on a full pipe would hang the job. */
static void write_all_iov(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
}

static void emit_line(const struct gcollrun_stream *s, const char *line, size_t len,
                      int add_newline) {
  char prefix[24];
  int plen = snprintf(prefix, sizeof(prefix), "[%d] ", s->rank);
  struct iovec iov[3] = {{prefix, (size_t)plen}, {(void *)line, len}, {(void *)"\n", 1}};
  write_all_iov(s->dest, iov, add_newline ? 3 : 2);
}

/* Emits every complete line in the buffer and keeps the rest. */
static void emit_complete_lines(struct gcollrun_stream *s) {
  size_t start = 0;
  for (;;) {
    char *nl = memchr(s->buf + start, '\n', s->len - start);
    if (nl == NULL) break;
    size_t end = (size_t)(nl - s->buf) + 1;
    emit_line(s, s->buf + start, end - start, 0);
    start = end;
  }
  if (start == 0 && s->len == sizeof(s->buf)) {
    emit_line(s, s->buf, s->len, 1);
    start = s->len;
  }
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
}

int gcollrun_stream_pump(struct gcollrun_stream *s) {
  if (s->fd < 0) return 1;
  for (;;) {
    ssize_t n = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    if (n > 0) {
      s->len += (size_t)n;
      emit_complete_lines(s);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return 0;
    gcollrun_stream_finish(s);
    return 1;
  }
}

void gcollrun_stream_finish(struct gcollrun_stream *s) {
  if (s->len > 0) emit_line(s, s->buf, s->len, 1);
  s->len = 0;
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}
