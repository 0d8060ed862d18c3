/* TCP plumbing shared by net/socket and net/ib (see net_tcp.h). */
#define _GNU_SOURCE
#include "runtime/net_tcp.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/settings.h"
#include "runtime/transport.h"

void gcoll_tcp_backoff(uint64_t *backoff_ms) {
  struct timespec ts = {.tv_sec = (time_t)(*backoff_ms / 1000),
                        .tv_nsec = (long)(*backoff_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  *backoff_ms = *backoff_ms * 2 > 500 ? 500 : *backoff_ms * 2;
}

int gcoll_tcp_remaining_ms(uint64_t deadline_ms) {
  uint64_t now = gcoll_transport_now_ms();
  if (now >= deadline_ms) return 0;
  return deadline_ms - now > 1000000 ? 1000000 : (int)(deadline_ms - now);
}

int gcoll_tcp_pick_address(struct gcoll_tcp_endpoint *ep, char *err, size_t errlen) {
  char from[512] = "";
  const char *spec = gcoll_setting("GCOLL_SOCKET_IFNAME");
  if (spec != NULL) gcoll_setting_origin("GCOLL_SOCKET_IFNAME", from, sizeof(from));
  return gcoll_netaddr_pick(gcoll_setting("GCOLL_SOCKET_IFADDR"), spec, from, ep, err, errlen);
}

int gcoll_tcp_pick_ipv4(char *ip, size_t len, char *err, size_t errlen) {
  struct gcoll_tcp_endpoint ep;
  if (gcoll_tcp_pick_address(&ep, err, errlen) != 0) return -1;
  if (ep.family != AF_INET || inet_ntop(AF_INET, ep.ip, ip, (socklen_t)len) == NULL) {
    snprintf(err, errlen, "it needs an IPv4 address: set GCOLL_SOCKET_IFADDR to one");
    return -1;
  }
  return 0;
}

/* Small messages (hellos, headers) would otherwise wait for Nagle. */
static void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int gcoll_tcp_connect(const struct gcoll_tcp_endpoint *to, uint64_t deadline_ms, char *err,
                      size_t errlen) {
  int fd = socket(to->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return -1;
  }
  no_delay(fd);
  struct sockaddr_storage ss;
  socklen_t len = gcoll_tcp_sockaddr(to, &ss);
  int e = 0;
  if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
    e = errno;
    if (e == EINPROGRESS) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int r;
      while ((r = poll(&p, 1, gcoll_tcp_remaining_ms(deadline_ms))) < 0 && errno == EINTR) {
      }
      socklen_t el = sizeof(e);
      if (r == 0) e = ETIMEDOUT;
      else if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0) e = errno;
    }
  }
  if (e != 0) {
    char where[80];
    gcoll_tcp_format(to, where, sizeof(where));
    snprintf(err, errlen, "connect to %s: %s", where, strerror(e));
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static int xfer_all(int fd, char *p, size_t len, int want_send, uint64_t deadline_ms) {
  while (len > 0) {
    ssize_t r = want_send ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                          : recv(fd, p, len, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      len -= (size_t)r;
      continue;
    }
    if (r == 0) {
      errno = 0;
      return -1;
    }
    if (!gcoll_tcp_transient(errno)) return -1;
    int ms = gcoll_tcp_remaining_ms(deadline_ms);
    if (ms == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    struct pollfd pf = {.fd = fd, .events = want_send ? POLLOUT : POLLIN};
    if (poll(&pf, 1, ms) < 0 && errno != EINTR) return -1;
  }
  return 0;
}

int gcoll_tcp_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ms) {
  /* send() only reads through the pointer. */
  return xfer_all(fd, (char *)buf, len, 1, deadline_ms);
}

int gcoll_tcp_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ms) {
  return xfer_all(fd, buf, len, 0, deadline_ms);
}

void gcoll_tcp_last_word_and_close(int fd, const void *msg, size_t len) {
  (void)gcoll_tcp_send_all(fd, msg, len, gcoll_transport_now_ms() + 1000);
  shutdown(fd, SHUT_WR);
  char sink[4096];
  while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
  }
  close(fd);
}

enum gcoll_tcp_word gcoll_tcp_watch_peer(int fd, unsigned char buf[GCOLL_TCP_HDR_BYTES],
                                         size_t *got, int *goodbye_seen, uint64_t *step_out) {
  for (;;) {
    ssize_t r = recv(fd, buf + *got, GCOLL_TCP_HDR_BYTES - *got, MSG_DONTWAIT);
    if (r < 0 && gcoll_tcp_transient(errno)) return GCOLL_TCP_NOTHING;
    if (r <= 0) return GCOLL_TCP_CLOSED;
    *got += (size_t)r;
    if (*got < GCOLL_TCP_HDR_BYTES) continue;
    *got = 0;
    uint64_t step;
    uint32_t nb, proto;
    gcoll_tcp_hdr_decode(buf, &step, &nb, &proto);
    if (proto == GCOLL_TCP_PROTO_BLAME && nb == 0) {
      *step_out = step;
      return GCOLL_TCP_BLAME;
    }
    if (proto != GCOLL_TCP_PROTO_GOODBYE || nb != 0 || *goodbye_seen) return GCOLL_TCP_BROKEN;
    *step_out = step;
    /* The peer may still close: that is no failure now. */
    *goodbye_seen = 1;
  }
}

/* ---- the connecting side of a hello ----------------------------------------- */

/* One attempt: 0 with *fd set; 1 when the listener closed or went silent
 * before answering (worth another try); -1 on anything else. */
static int hello_attempt(const struct gcoll_tcp_endpoint *to,
                         const struct gcoll_auth_secret *secret, const char *purpose,
                         const void *hello, size_t hello_len,
                         unsigned char answer[GCOLL_TCP_HDR_BYTES], uint64_t deadline_ms,
                         int *fd, char *err, size_t errlen) {
  *fd = gcoll_tcp_connect(to, deadline_ms, err, errlen);
  if (*fd < 0) return errno == ECONNREFUSED || errno == ETIMEDOUT ? -1 : 1;
  /* The listener drops a silent connection after its own hello deadline;
   * waiting a little longer than that is enough to know it did. */
  uint64_t attempt_end = gcoll_transport_now_ms() + GCOLL_TCP_HELLO_DEADLINE_MS + 1000;
  if (attempt_end > deadline_ms) attempt_end = deadline_ms;
  unsigned char ch[GCOLL_TCP_CHALLENGE_BYTES];
  unsigned char msg[GCOLL_TCP_HELLO_MAX + GCOLL_AUTH_TAG_BYTES];
  char where[80];
  gcoll_tcp_format(to, where, sizeof(where));
  if (gcoll_tcp_recv_all(*fd, ch, sizeof(ch), attempt_end) != 0) {
    snprintf(err, errlen, "%s closed the connection before sending its challenge (%s)", where,
             errno == ETIMEDOUT ? "timed out" : errno ? strerror(errno) : "end of stream");
    goto retry;
  }
  if (gcoll_get_be32(ch) != GCOLL_TCP_CHALLENGE_MAGIC ||
      gcoll_get_be16(ch + 4) != GCOLL_TCP_CHALLENGE_VERSION) {
    snprintf(err, errlen, "%s is not a gcoll listener of this version (challenge %08x v%u)",
             where, gcoll_get_be32(ch), gcoll_get_be16(ch + 4));
    goto fail;
  }
  memcpy(msg, hello, hello_len);
  gcoll_auth_tag(secret, purpose, ch + 8, hello, hello_len, msg + hello_len);
  if (gcoll_tcp_send_all(*fd, msg, hello_len + GCOLL_AUTH_TAG_BYTES, attempt_end) != 0) {
    snprintf(err, errlen, "hello to %s: %s", where,
             errno == ETIMEDOUT ? "timed out" : errno ? strerror(errno) : "connection closed");
    goto retry;
  }
  if (gcoll_tcp_recv_all(*fd, answer, GCOLL_TCP_HDR_BYTES, attempt_end) != 0) {
    snprintf(err, errlen,
             "%s closed the connection without accepting our hello (%s): a flood of "
             "connections evicted ours, or nothing there expects it",
             where, errno == ETIMEDOUT ? "timed out" : errno ? strerror(errno) : "end of stream");
    goto retry;
  }
  uint64_t step;
  uint32_t nb, proto;
  gcoll_tcp_hdr_decode(answer, &step, &nb, &proto);
  if (proto == GCOLL_TCP_PROTO_REFUSED) {
    snprintf(err, errlen, "%s refused our hello: it belongs to a job whose key we do not hold "
                          "(a stale or foreign address)", where);
    goto fail;
  }
  return 0;
retry:
  close(*fd);
  *fd = -1;
  return 1;
fail:
  close(*fd);
  *fd = -1;
  return -1;
}

int gcoll_tcp_hello_connect(const struct gcoll_tcp_endpoint *to,
                            const struct gcoll_auth_secret *secret, const char *purpose,
                            const void *hello, size_t hello_len,
                            unsigned char answer[GCOLL_TCP_HDR_BYTES], uint64_t deadline_ms,
                            char *err, size_t errlen) {
  if (hello_len > GCOLL_TCP_HELLO_MAX) {
    snprintf(err, errlen, "hello of %zu bytes, at most %d", hello_len, GCOLL_TCP_HELLO_MAX);
    return -1;
  }
  uint64_t backoff_ms = 10;
  for (int attempt = 1;; attempt++) {
    int fd;
    char why[400];
    int rc = hello_attempt(to, secret, purpose, hello, hello_len, answer, deadline_ms, &fd, why,
                           sizeof(why));
    if (rc == 0) return fd;
    uint64_t now = gcoll_transport_now_ms();
    if (rc < 0 || now + backoff_ms >= deadline_ms) {
      if (attempt > 1)
        snprintf(err, errlen, "%s (after %d attempts)", why, attempt);
      else
        snprintf(err, errlen, "%s", why);
      return -1;
    }
    gcoll_tcp_backoff(&backoff_ms);
  }
}

/* ---- accepted connections waiting for their hello -------------------------- */

static void drop_pending(struct gcoll_tcp_hellos *h, int i, int close_fd) {
  if (close_fd) close(h->pending[i].fd);
  h->pending[i] = h->pending[--h->npending];
}

static void evict_oldest(struct gcoll_tcp_hellos *h) {
  int oldest = 0;
  for (int i = 1; i < h->npending; i++)
    if (h->pending[i].since_ms < h->pending[oldest].since_ms) oldest = i;
  drop_pending(h, oldest, 1);
}

/* Sends the challenge on a fresh connection; its send buffer is empty, so
 * a short send means something is wrong with it. 0 when sent. */
static int challenge(struct gcoll_tcp_hellos *h, int i) {
  unsigned char ch[GCOLL_TCP_CHALLENGE_BYTES] = {0};
  char err[128];
  if (gcoll_auth_nonce(h->pending[i].nonce, err, sizeof(err)) != 0) return -1;
  gcoll_put_be32(ch, GCOLL_TCP_CHALLENGE_MAGIC);
  gcoll_put_be16(ch + 4, GCOLL_TCP_CHALLENGE_VERSION);
  memcpy(ch + 8, h->pending[i].nonce, GCOLL_AUTH_NONCE_BYTES);
  return send(h->pending[i].fd, ch, sizeof(ch), MSG_NOSIGNAL | MSG_DONTWAIT) ==
                 (ssize_t)sizeof(ch) ? 0 : -1;
}

static int accept_new(struct gcoll_tcp_hellos *h, int listen_fd, uint64_t now) {
  int moved = 0;
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        h->paused_until_ms = now + GCOLL_TCP_ACCEPT_PAUSE_MS;
      return moved;
    }
    moved = 1;
    if (h->npending == GCOLL_TCP_MAX_PENDING) evict_oldest(h);
    no_delay(fd);
    int i = h->npending++;
    h->pending[i].fd = fd;
    h->pending[i].got = 0;
    h->pending[i].since_ms = now;
    if (challenge(h, i) != 0) drop_pending(h, i, 1);
  }
}

short gcoll_tcp_hellos_listen_events(const struct gcoll_tcp_hellos *h) {
  return gcoll_transport_now_ms() < h->paused_until_ms ? 0 : POLLIN;
}

int gcoll_tcp_hellos_progress(struct gcoll_tcp_hellos *h, int listen_fd, int readable,
                              gcoll_tcp_hello_match_fn match, void *ctx) {
  uint64_t now = gcoll_transport_now_ms();
  int moved = readable && now >= h->paused_until_ms ? accept_new(h, listen_fd, now) : 0;
  size_t want = h->hello_bytes + GCOLL_AUTH_TAG_BYTES;
  for (int i = 0; i < h->npending;) {
    __typeof__(h->pending[0]) *p = &h->pending[i];
    ssize_t r = recv(p->fd, p->buf + p->got, want - p->got, MSG_DONTWAIT);
    if (r < 0 && gcoll_tcp_transient(errno)) {
      /* A connection that never answers must not hold a slot. */
      if (now - p->since_ms > GCOLL_TCP_HELLO_DEADLINE_MS) drop_pending(h, i, 1);
      else i++;
      continue;
    }
    moved = 1;
    if (r <= 0) {
      drop_pending(h, i, 1);
      continue;
    }
    p->got += (size_t)r;
    if (p->got < want) continue;
    if (!gcoll_auth_verify(h->secret, h->purpose, p->nonce, p->buf, h->hello_bytes,
                           p->buf + h->hello_bytes)) {
      h->refused++;
      unsigned char no[GCOLL_TCP_HDR_BYTES];
      gcoll_tcp_hdr_encode(no, 0, 0, GCOLL_TCP_PROTO_REFUSED);
      (void)send(p->fd, no, sizeof(no), MSG_NOSIGNAL | MSG_DONTWAIT);
      drop_pending(h, i, 1);
      continue;
    }
    drop_pending(h, i, match(ctx, p->buf, p->fd) != 0);
  }
  return moved;
}

void gcoll_tcp_hellos_close(struct gcoll_tcp_hellos *h) {
  for (int i = 0; i < h->npending; i++) close(h->pending[i].fd);
  h->npending = 0;
}
