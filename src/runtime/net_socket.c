/* net/socket: the socket device of the generic net transport (net.h).
 *
 * Steps travel on the hello connection itself as {header, payload}: the
 * 16-byte header {step, nbytes, proto} (net_tcp.h, little-endian), then
 * nbytes of data. Sends are queued by isend and written by test, as many
 * steps as the kernel takes in one sendmsg; a step is done once its last
 * byte is in the kernel. The receiver reads whenever its cache is empty
 * (so a goodbye, a blame or an EOF is seen even while the FIFO is full)
 * and moves a payload only into a posted receive: a large payload in one
 * read straight into its slot with the next header behind it, small steps
 * as many per system call as the cache holds.
 *
 * Failures: EOF, ECONNRESET, EPIPE or a malformed header mark the peer
 * failed, unless it said goodbye first (net_steps.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "runtime/net.h"

/* Small steps are read SOCK_CACHE_BYTES at a time and copied out of the
 * cache, so a receiver that fell behind a stream of small calls takes
 * many of them per system call (as Open MPI's TCP endpoint cache does);
 * a payload of SOCK_DIRECT_BYTES or more still to come is read straight
 * into its slot. */
#define SOCK_CACHE_BYTES 8192
#define SOCK_DIRECT_BYTES 1024

struct sock_conn {
  /* Send side: steps [done, queued) wait for the kernel; `off` bytes of
   * step `done` are in it already. */
  uint64_t queued;
  size_t off;
  unsigned char shdr[GCOLL_STEPS][GCOLL_TCP_HDR_BYTES];
  const char *sdata[GCOLL_STEPS];
  uint32_t snb[GCOLL_STEPS];
  /* Receive side: the header of step `done` and its payload, and the
   * bytes read behind them, not yet moved: [cache_off, cache_len). */
  char *rbuf[GCOLL_STEPS];
  unsigned char rhdr[GCOLL_TCP_HDR_BYTES];
  size_t rhdr_got, pay_got;
  uint32_t rnb, rproto;
  size_t cache_off, cache_len;
  unsigned char cache[SOCK_CACHE_BYTES];
};

static struct sock_conn *sock_of(struct gcoll_net_conn *c) { return c->dev_conn; }

/* ---- send side ------------------------------------------------------------ */

static int sock_isend(struct gcoll_net_conn *c, uint64_t step, const void *data, uint32_t nbytes,
                      uint32_t proto) {
  struct sock_conn *s = sock_of(c);
  unsigned slot = gcoll_fifo_slot(step);
  gcoll_tcp_hdr_encode(s->shdr[slot], step, nbytes, proto);
  s->sdata[slot] = data;
  s->snb[slot] = nbytes;
  s->queued = step + 1;
  return 1;
}

static size_t step_bytes(const struct sock_conn *s, uint64_t step) {
  return GCOLL_TCP_HDR_BYTES + s->snb[gcoll_fifo_slot(step)];
}

/* Writes as much of the queued steps as the socket takes. Returns 1 when
 * bytes moved, 0 when the socket is full, -1 on a dead connection. */
static int send_some(struct gcoll_net_conn *c) {
  struct sock_conn *s = sock_of(c);
  struct iovec iov[2 * GCOLL_STEPS];
  int n = 0;
  size_t skip = s->off;
  for (uint64_t st = c->done; st < s->queued; st++) {
    unsigned slot = gcoll_fifo_slot(st);
    const char *parts[2] = {(const char *)s->shdr[slot], s->sdata[slot]};
    size_t lens[2] = {GCOLL_TCP_HDR_BYTES, s->snb[slot]};
    for (int k = 0; k < 2; k++) {
      if (skip >= lens[k]) {
        skip -= lens[k];
        continue;
      }
      iov[n].iov_base = (void *)(parts[k] + skip);
      iov[n].iov_len = lens[k] - skip;
      skip = 0;
      n++;
    }
  }
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0) {
    if (gcoll_tcp_transient(errno)) {
      c->want_out = errno != EINTR;
      return 0;
    }
    return -1;
  }
  s->off += (size_t)w;
  while (c->done < s->queued && s->off >= step_bytes(s, c->done)) {
    s->off -= step_bytes(s, c->done);
    gcoll_net_send_done(c, c->done);
  }
  c->want_out = c->done < s->queued;
  c->mid_step = s->off != 0;
  return 1;
}

static int send_test(struct gcoll_net_conn *c, short revents) {
  if (c->done >= sock_of(c)->queued || (c->want_out && !(revents & (POLLOUT | POLLERR | POLLHUP))))
    return 0;
  int r = send_some(c);
  if (r < 0) {
    gcoll_net_peer_word(c, GCOLL_TCP_CLOSED, 0);
    return 1;
  }
  return r;
}

/* ---- receive side --------------------------------------------------------- */

static int sock_irecv(struct gcoll_net_conn *c, uint64_t step, void *buf, size_t max) {
  (void)max; /* the header is checked against the FIFO's payload limits */
  sock_of(c)->rbuf[gcoll_fifo_slot(step)] = buf;
  return 1;
}

/* Validates a complete header; -1 on a protocol violation (or a blame). */
static int parse_rhdr(struct gcoll_net_conn *c) {
  struct sock_conn *s = sock_of(c);
  uint64_t step;
  gcoll_tcp_hdr_decode(s->rhdr, &step, &s->rnb, &s->rproto);
  s->pay_got = 0;
  if (s->rproto == GCOLL_TCP_PROTO_BLAME && s->rnb == 0) {
    gcoll_net_peer_word(c, GCOLL_TCP_BLAME, step);
    return -1;
  }
  if (c->goodbye_seen || step != c->done) return -1;
  if (s->rproto == GCOLL_TCP_PROTO_GOODBYE) return s->rnb == 0 ? 0 : -1;
  return gcoll_net_step_valid(c, s->rnb, s->rproto) ? 0 : -1;
}

/* Moves bytes already read into the cache to where they belong: the rest
 * of the header, or the payload of step `done` (whose slot recv_test saw
 * posted). Returns 0, or -2 on a bad header. */
static int take_cached(struct gcoll_net_conn *c) {
  struct sock_conn *s = sock_of(c);
  size_t avail = s->cache_len - s->cache_off;
  const unsigned char *from = s->cache + s->cache_off;
  if (s->rhdr_got < GCOLL_TCP_HDR_BYTES) {
    size_t n = GCOLL_TCP_HDR_BYTES - s->rhdr_got < avail ? GCOLL_TCP_HDR_BYTES - s->rhdr_got
                                                           : avail;
    memcpy(s->rhdr + s->rhdr_got, from, n);
    s->rhdr_got += n;
    s->cache_off += n;
    return s->rhdr_got == GCOLL_TCP_HDR_BYTES && parse_rhdr(c) != 0 ? -2 : 0;
  }
  size_t n = s->rnb - s->pay_got < avail ? s->rnb - s->pay_got : avail;
  memcpy(s->rbuf[gcoll_fifo_slot(c->done)] + s->pay_got, from, n);
  s->pay_got += n;
  s->cache_off += n;
  return 0;
}

/* One read, with the cache empty (and step `done`'s slot posted once its
 * header is in, as recv_test checks): a payload of at least
 * SOCK_DIRECT_BYTES still to come goes straight into its slot and the
 * next header into the cache; otherwise (a header, a small payload) as
 * much as the cache holds. Returns 1 when bytes arrived, 0 when none were
 * there, -1 when the connection ended. */
static int recv_some(struct gcoll_net_conn *c) {
  struct sock_conn *s = sock_of(c);
  struct iovec iov[2];
  int n = 0;
  size_t direct = 0;
  if (s->rhdr_got == GCOLL_TCP_HDR_BYTES && s->rnb - s->pay_got >= SOCK_DIRECT_BYTES) {
    direct = s->rnb - s->pay_got;
    iov[n++] = (struct iovec){s->rbuf[gcoll_fifo_slot(c->done)] + s->pay_got, direct};
  }
  /* Behind a large payload only the next header: a copy out of the cache
   * costs more than it saves once steps are that large. */
  iov[n++] = (struct iovec){s->cache, direct > 0 ? GCOLL_TCP_HDR_BYTES : sizeof(s->cache)};
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t r = recvmsg(c->fd, &msg, MSG_DONTWAIT);
  if (r < 0 && gcoll_tcp_transient(errno)) return 0;
  if (r <= 0) return -1;
  size_t got = (size_t)r, pay = got < direct ? got : direct;
  s->pay_got += pay;
  s->cache_off = 0;
  s->cache_len = got - pay;
  return 1;
}

/* Reads and publishes until the socket is empty or the next step's slot
 * is not free. */
static int recv_test(struct gcoll_net_conn *c, short revents) {
  struct sock_conn *s = sock_of(c);
  if (c->state != GCOLL_NET_OPEN) return 0;
  int moved = 0, may_read = !c->polled_in || (revents & (POLLIN | POLLHUP | POLLERR));
  c->wait_slot = 0;
  for (;;) {
    int header_done = s->rhdr_got == GCOLL_TCP_HDR_BYTES;
    if (header_done && s->rproto == GCOLL_TCP_PROTO_GOODBYE) {
      c->goodbye_seen = 1;
      s->rhdr_got = 0;
      continue;
    }
    if (header_done && s->pay_got == s->rnb && c->done < c->posted) {
      if (gcoll_net_recv_done(c, c->done, s->rnb, s->rproto) != 0) return 1;
      s->rhdr_got = 0;
      moved = 1;
      continue;
    }
    /* A payload lands in its slot, so the slot must be free first. */
    if (header_done && c->done >= c->posted) {
      c->wait_slot = 1;
      return moved;
    }
    if (s->cache_off < s->cache_len) {
      if (take_cached(c) == -2) {
        gcoll_net_conn_failed(c);
        return 1;
      }
      continue;
    }
    if (!may_read) return moved;
    int r = recv_some(c);
    if (r == 0) return moved;
    if (r < 0) {
      gcoll_net_peer_word(c, GCOLL_TCP_CLOSED, 0);
      return 1;
    }
    moved = 1;
  }
}

static int sock_test(struct gcoll_net_conn *c, short revents) {
  return c->is_send ? send_test(c, revents) : recv_test(c, revents);
}

static const struct gcoll_net_dev socket_dev = {
    .name = "net/socket",
    .hello_purpose = "gcoll net/socket hello v2",
    .conn_bytes = sizeof(struct sock_conn),
    .data_on_channel = 1,
    .isend = sock_isend,
    .irecv = sock_irecv,
    .test = sock_test,
};

GCOLL_NET_TRANSPORT(gcoll_transport_socket_ops, "net/socket", &socket_dev);
