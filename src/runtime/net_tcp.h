/* TCP plumbing shared by the network transports: net/socket carries its
 * data on these connections, net/ib its queue-pair handshake and its
 * goodbye/blame side channel. Both listen on one socket per transport,
 * bound to GCOLL_SOCKET_IFADDR, and match each accepted connection to a
 * receive connection by a fixed-size hello the connecting side sends first;
 * only the hello's format and what a match does differ, so those stay with
 * the transport (the match callback).
 *
 * Every wait is bounded by a deadline (CLOCK_MONOTONIC milliseconds, as
 * gcoll_transport_now_ms). */
#ifndef GCOLL_RUNTIME_NET_TCP_H
#define GCOLL_RUNTIME_NET_TCP_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "common/netaddr.h"
#include "runtime/auth.h"

/* Accepted connections that have not proven they belong to the job yet.
 * Strangers can open connections as fast as they like, so the pool is
 * small, each connection gets GCOLL_TCP_HELLO_DEADLINE_MS to answer the
 * challenge, and a new connection evicts the oldest one when the pool is
 * full: a flood costs its own connections, and the job's senders, whose
 * hellos take well under a millisecond, retry with backoff if evicted. */
#define GCOLL_TCP_MAX_PENDING 64
#define GCOLL_TCP_HELLO_DEADLINE_MS 2000
#define GCOLL_TCP_HELLO_MAX 64    /* the largest hello of any transport, tag excluded */
/* After accept() ran out of descriptors (EMFILE), the listener is not
 * polled for this long: a full table must not turn into a busy loop. */
#define GCOLL_TCP_ACCEPT_PAUSE_MS 100

/* What a listener sends first on every connection it accepts:
 * be32 "GCHL", be16 version, be16 0, a fresh nonce. The connecting side
 * answers with its hello and gcoll_auth_tag(conn secret, purpose, nonce,
 * hello). */
#define GCOLL_TCP_CHALLENGE_MAGIC 0x4743484cu /* "GCHL" */
#define GCOLL_TCP_CHALLENGE_VERSION 2
#define GCOLL_TCP_CHALLENGE_BYTES (8 + GCOLL_AUTH_NONCE_BYTES)

/* Where a listener is, or where to connect: AF_INET or AF_INET6, the
 * address in network order (4 or 16 bytes used), the port. */

/* Big-endian fields of addresses and hellos. */
static inline void gcoll_put_be16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)(v >> 8);
  p[1] = (unsigned char)v;
}
static inline void gcoll_put_be32(unsigned char *p, uint32_t v) {
  gcoll_put_be16(p, (uint16_t)(v >> 16));
  gcoll_put_be16(p + 2, (uint16_t)v);
}
static inline void gcoll_put_be64(unsigned char *p, uint64_t v) {
  gcoll_put_be32(p, (uint32_t)(v >> 32));
  gcoll_put_be32(p + 4, (uint32_t)v);
}
static inline uint16_t gcoll_get_be16(const unsigned char *p) {
  return (uint16_t)(p[0] << 8 | p[1]);
}
static inline uint32_t gcoll_get_be32(const unsigned char *p) {
  return (uint32_t)gcoll_get_be16(p) << 16 | gcoll_get_be16(p + 2);
}
static inline uint64_t gcoll_get_be64(const unsigned char *p) {
  return (uint64_t)gcoll_get_be32(p) << 32 | gcoll_get_be32(p + 4);
}

/* The 16-byte header both transports send on their TCP connections:
 * {step, nbytes, proto}, little-endian. After setup it carries only
 * control words on net/ib, data steps too on net/socket. */
#define GCOLL_TCP_HDR_BYTES 16
#define GCOLL_TCP_PROTO_GOODBYE 0x47425945u /* "GBYE": the peer closes cleanly */
#define GCOLL_TCP_PROTO_BLAME 0x47424c4du   /* "GBLM": the peer closes in error; the step
                                               field names the rank it blames */
#define GCOLL_TCP_PROTO_ACCEPTED 0x47414343u /* "GACC": the listener took our hello */
#define GCOLL_TCP_PROTO_REFUSED 0x47524546u  /* "GREF": the hello's tag is not the job's */

static inline void gcoll_tcp_hdr_encode(unsigned char out[GCOLL_TCP_HDR_BYTES], uint64_t step,
                                        uint32_t nbytes, uint32_t proto) {
  for (int i = 0; i < 8; i++) out[i] = (unsigned char)(step >> (8 * i));
  for (int i = 0; i < 4; i++) out[8 + i] = (unsigned char)(nbytes >> (8 * i));
  for (int i = 0; i < 4; i++) out[12 + i] = (unsigned char)(proto >> (8 * i));
}

static inline void gcoll_tcp_hdr_decode(const unsigned char in[GCOLL_TCP_HDR_BYTES],
                                        uint64_t *step, uint32_t *nbytes, uint32_t *proto) {
  *step = 0;
  *nbytes = 0;
  *proto = 0;
  for (int i = 0; i < 8; i++) *step |= (uint64_t)in[i] << (8 * i);
  for (int i = 0; i < 4; i++) *nbytes |= (uint32_t)in[8 + i] << (8 * i);
  for (int i = 0; i < 4; i++) *proto |= (uint32_t)in[12 + i] << (8 * i);
}

/* What a peer said on a connection that, by now, carries nothing but its
 * last header: goodbye (a clean close follows) or blame. */
enum gcoll_tcp_word {
  GCOLL_TCP_NOTHING = 0, /* nothing more to act on (a goodbye is only noted) */
  GCOLL_TCP_CLOSED,      /* EOF or an error on the socket */
  GCOLL_TCP_BLAME,       /* *step: the rank it names, unchecked */
  GCOLL_TCP_BROKEN,      /* a header that is neither, or a second goodbye */
};

/* Reads without blocking, buf holding *got bytes of the next header across
 * calls, and sets *goodbye_seen on a goodbye. *step gets the header's step
 * field: for a blame the rank it names, for a goodbye the steps its sender
 * sent (so a receiver whose data travels apart knows what is still due). */
enum gcoll_tcp_word gcoll_tcp_watch_peer(int fd, unsigned char buf[GCOLL_TCP_HDR_BYTES],
                                         size_t *got, int *goodbye_seen, uint64_t *step);

/* Errors that only mean "not now" on a non-blocking socket. */
static inline int gcoll_tcp_transient(int e) {
  return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

/* Sleeps *backoff_ms, then doubles it up to half a second: the pause
 * between attempts of a connection that a flood may have cut. */
void gcoll_tcp_backoff(uint64_t *backoff_ms);

/* Milliseconds left until deadline_ms, 0 once passed, capped so it fits
 * poll's int timeout. */
int gcoll_tcp_remaining_ms(uint64_t deadline_ms);

/* The address to listen on from GCOLL_SOCKET_IFADDR: a numeric IPv4 or
 * IPv6 address or an interface name (its IPv4 address, else its IPv6 one);
 * when unset, gcoll_tcp_choose_listed over this host's interfaces if
 * GCOLL_SOCKET_IFNAME (NCCL_SOCKET_IFNAME, see runtime/settings.h) is set,
 * else gcoll_tcp_choose_interface, else 127.0.0.1; port 0. -1 with one
 * line in err when the setting names nothing usable or the unspecified
 * address. */
int gcoll_tcp_pick_address(struct gcoll_tcp_endpoint *ep, char *err, size_t errlen);

/* gcoll_tcp_pick_address as a dotted IPv4 string, for the bootstrap
 * stores (whose addresses are IPv4): -1 with one line in err when the
 * address picked is IPv6. */
int gcoll_tcp_pick_ipv4(char *ip, size_t len, char *err, size_t errlen);

/* A non-blocking TCP_NODELAY socket connected to `to` before deadline_ms;
 * the fd, or -1 with one line in err (errno kept). */
int gcoll_tcp_connect(const struct gcoll_tcp_endpoint *to, uint64_t deadline_ms, char *err,
                      size_t errlen);

/* All of buf over a non-blocking socket before deadline_ms; -1 with errno
 * set (ETIMEDOUT at the deadline; 0 when recv_all met an orderly EOF). */
int gcoll_tcp_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ms);
int gcoll_tcp_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ms);

/* Sends a last message (within a second), shuts the connection down and
 * closes fd. Unread bytes are drained first: closing a socket with unread
 * data makes the kernel reset the connection, which could discard what
 * was just sent. */
void gcoll_tcp_last_word_and_close(int fd, const void *msg, size_t len);

/* The connecting side of an authenticated hello: connects to `to`, reads
 * the listener's challenge, sends hello (hello_len bytes, at most
 * GCOLL_TCP_HELLO_MAX) followed by its tag under `purpose`, and reads the
 * listener's answer, a header: the sign that it matched the hello to one of
 * its receive connections (what it says is the transport's business). When
 * the listener closes first (a flood evicted the connection, or nothing
 * matched yet), it tries again with backoff until deadline_ms; a refused
 * connect (nobody listens: the peer is gone) or a refused tag (we do not
 * hold that listener's job key) fails at once. The fd, or -1 with one line
 * in err. */
int gcoll_tcp_hello_connect(const struct gcoll_tcp_endpoint *to,
                            const struct gcoll_auth_secret *secret, const char *purpose,
                            const void *hello, size_t hello_len,
                            unsigned char answer[GCOLL_TCP_HDR_BYTES], uint64_t deadline_ms,
                            char *err, size_t errlen);

/* The accepted connections of a listener that have not yet answered its
 * challenge. Owned by the proxy thread; the owner sets hello_bytes,
 * secret and purpose before the first round. */
struct gcoll_tcp_hellos {
  size_t hello_bytes; /* at most GCOLL_TCP_HELLO_MAX */
  const struct gcoll_auth_secret *secret;
  const char *purpose;
  uint64_t paused_until_ms; /* accept() hit the descriptor limit */
  uint64_t refused;         /* hellos whose tag did not verify (diagnostics) */
  int npending;
  struct {
    int fd;
    size_t got;
    uint64_t since_ms;
    unsigned char nonce[GCOLL_AUTH_NONCE_BYTES];
    unsigned char buf[GCOLL_TCP_HELLO_MAX + GCOLL_AUTH_TAG_BYTES];
  } pending[GCOLL_TCP_MAX_PENDING];
};

/* Takes a verified hello and the fd it came on; 0 when it took the fd. */
typedef int (*gcoll_tcp_hello_match_fn)(void *ctx, const unsigned char *hello, int fd);

/* One round for the listener's proxy entry: accepts what waits on
 * listen_fd (when `readable`) and challenges it, reads answers without
 * blocking, hands each hello whose tag verifies to match, and closes
 * connections whose hello is refused, cut short, or not complete within
 * GCOLL_TCP_HELLO_DEADLINE_MS (after a GCOLL_TCP_PROTO_REFUSED header when
 * the tag was wrong, so a misconfigured rank fails at once instead of
 * retrying; a stranger learns nothing it did not know). Returns whether
 * anything happened. */
int gcoll_tcp_hellos_progress(struct gcoll_tcp_hellos *h, int listen_fd, int readable,
                              gcoll_tcp_hello_match_fn match, void *ctx);

/* The events the listener's proxy entry should poll for now: none while
 * accepting is paused after EMFILE. */
short gcoll_tcp_hellos_listen_events(const struct gcoll_tcp_hellos *h);

/* Closes the connections still waiting for their hello. */
void gcoll_tcp_hellos_close(struct gcoll_tcp_hellos *h);

#endif
