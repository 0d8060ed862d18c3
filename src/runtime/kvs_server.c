/* The bootstrap KVS server (kvs_server.h): a poll()-driven state machine
 * over non-blocking sockets. Each connection is read one message at a time
 * and is not read again until its reply is sent and it no longer waits, so
 * per-connection memory is one request plus one reply whatever a client
 * sends. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runtime/kvs_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "runtime/auth.h"
#include "runtime/kvs_proto.h"

/* A client must answer the challenge within this time or lose its slot. */
#define HELLO_DEADLINE_MS 2000
/* Connections that have not said a valid hello yet. Anyone who can reach
 * the port can open them, so they get a small pool of their own: a new one
 * evicts the oldest when it is full, and the job's ranks (whose hello takes
 * a round trip) retry if evicted. Identified ranks have their own slots
 * (max_conns), which strangers can never take. */
#define UNAUTH_POOL 32
/* Descriptors kept free for the owner (gcollrun's pipes, the runtime's
 * sockets) when the connection table is sized to RLIMIT_NOFILE. */
#define FD_RESERVE 64
/* After accept() ran out of descriptors, the listener rests this long: a
 * full table must not become a busy loop. */
#define ACCEPT_PAUSE_MS 100

struct entry {
  struct entry *next;
  size_t klen, vlen;
  char data[];               /* key, then value */
};

enum wait_kind { WAIT_NONE = 0, WAIT_GET, WAIT_FENCE, WAIT_BARRIER };

struct conn {
  int fd;                    /* -1: free slot */
  int rank;                  /* -1 until HELLO */
  int said_bye;
  int close_after_reply;
  uint64_t hello_deadline;
  uint8_t nonce[KVS_NONCE_BYTES]; /* our challenge to this connection */
  uint8_t hdr[KVS_HEADER_LEN];
  size_t hdr_have;
  struct kvs_header h;
  uint8_t *body;             /* h.body_len bytes once the header is in */
  size_t body_have;
  uint8_t *out;              /* pending reply */
  size_t out_len, out_off;
  enum wait_kind wait;
  char wait_key[KVS_MAX_KEY + 1];
  uint32_t wait_ms;
  uint64_t deadline;
};

struct kvs_server {
  struct kvs_server_config cfg;
  struct gcoll_auth_secret secret; /* from the store key; never sent */
  int listen_fd;
  uint64_t paused_until;     /* accept() hit the descriptor limit */
  uint16_t port;
  struct conn *conns;
  int nconns_max;            /* identified ranks' slots + UNAUTH_POOL */
  int *pollmap;              /* pollfd index -> conn index; -1 for the listener */
  struct entry **buckets;
  size_t nbuckets, nkeys, nbytes;
  int broken_rank;           /* first rank lost without BYE, -1 if none */
  int nbye;                  /* ranks that said goodbye */
  uint64_t nrequests;        /* whole messages handled, hellos included */
};

static uint64_t now_ms(void) {
  return gcoll_clock_ms();
}

/* ---- key store ---------------------------------------------------------- */

static size_t hash_key(const char *k, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)k[i]) * 1099511628211ull;
  return (size_t)h;
}

static struct entry **find_slot(struct kvs_server *s, const char *k, size_t n) {
  struct entry **pp = &s->buckets[hash_key(k, n) & (s->nbuckets - 1)];
  while (*pp && !((*pp)->klen == n && memcmp((*pp)->data, k, n) == 0)) pp = &(*pp)->next;
  return pp;
}

static const struct entry *lookup(struct kvs_server *s, const char *k, size_t n) {
  return *find_slot(s, k, n);
}

/* ---- replies ------------------------------------------------------------ */

static void conn_drop(struct kvs_server *s, struct conn *c);

static void queue_reply(struct kvs_server *s, struct conn *c, uint16_t op, uint32_t status,
                        const void *body, size_t len) {
  size_t cap = KVS_HEADER_LEN + len;
  uint8_t *buf = malloc(cap);
  if (buf == NULL) {
    conn_drop(s, c);
    return;
  }
  c->out_len = gcoll_kvs_reply_encode(op, status, body, len, buf, cap);
  c->out = buf;
  c->out_off = 0;
}

static void queue_error(struct kvs_server *s, struct conn *c, uint16_t op, uint32_t status,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void queue_error(struct kvs_server *s, struct conn *c, uint16_t op, uint32_t status,
                        const char *fmt, ...) {
  char msg[KVS_MAX_REASON];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof(msg)) n = (int)sizeof(msg) - 1;
  queue_reply(s, c, op, status, msg, (size_t)n);
}

static uint16_t wait_op(enum wait_kind w) {
  return w == WAIT_GET ? KVS_OP_GET : w == WAIT_FENCE ? KVS_OP_FENCE : KVS_OP_BARRIER;
}

static int count_waiting(const struct kvs_server *s, enum wait_kind w) {
  int n = 0;
  for (int i = 0; i < s->nconns_max; i++)
    if (s->conns[i].fd >= 0 && s->conns[i].wait == w) n++;
  return n;
}

static void fail_all_waiters(struct kvs_server *s) {
  for (int i = 0; i < s->nconns_max; i++) {
    struct conn *c = &s->conns[i];
    if (c->fd < 0 || c->wait == WAIT_NONE) continue;
    enum wait_kind w = c->wait;
    c->wait = WAIT_NONE;
    queue_error(s, c, wait_op(w), KVS_ERR_PEER_LOST,
                "rank %d disconnected from the bootstrap KVS without saying goodbye",
                s->broken_rank);
  }
}

/* ---- connections -------------------------------------------------------- */

static void conn_reset_input(struct conn *c) {
  free(c->body);
  c->body = NULL;
  c->hdr_have = c->body_have = 0;
}

static void conn_drop(struct kvs_server *s, struct conn *c) {
  int lost = c->rank >= 0 && !c->said_bye;
  int rank = c->rank;
  /* Unread input makes close() reset the connection, which can discard
   * the error reply just sent: read what is there first (bounded). */
  char sink[4096];
  shutdown(c->fd, SHUT_WR);
  (void)recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
  close(c->fd);
  conn_reset_input(c);
  free(c->out);
  memset(c, 0, sizeof(*c));
  c->fd = -1;
  c->rank = -1;
  if (lost && s->broken_rank < 0) {
    s->broken_rank = rank;
    if (s->cfg.rank_lost) s->cfg.rank_lost(s->cfg.ctx, rank);
    fail_all_waiters(s);
  }
}

static void complete_collective(struct kvs_server *s, enum wait_kind w) {
  if (count_waiting(s, w) < s->cfg.nranks) return;
  for (int i = 0; i < s->nconns_max; i++) {
    struct conn *c = &s->conns[i];
    if (c->fd < 0 || c->wait != w) continue;
    c->wait = WAIT_NONE;
    queue_reply(s, c, wait_op(w), KVS_OK, NULL, 0);
  }
}

static void wake_getters(struct kvs_server *s, const struct entry *e) {
  for (int i = 0; i < s->nconns_max; i++) {
    struct conn *c = &s->conns[i];
    if (c->fd < 0 || c->wait != WAIT_GET || strlen(c->wait_key) != e->klen ||
        memcmp(c->wait_key, e->data, e->klen) != 0)
      continue;
    c->wait = WAIT_NONE;
    queue_reply(s, c, KVS_OP_GET, KVS_OK, e->data + e->klen, e->vlen);
  }
}

static void handle_hello(struct kvs_server *s, struct conn *c, const struct kvs_request *r) {
  if (c->rank >= 0) {
    queue_error(s, c, r->op, KVS_ERR_STATE, "hello twice (already rank %d)", c->rank);
    return;
  }
  uint8_t signed_part[8 + KVS_NONCE_BYTES];
  gcoll_kvs_hello_signed_part(r->rank, r->nranks, r->nonce, signed_part);
  if (!gcoll_auth_verify(&s->secret, KVS_HELLO_PURPOSE, c->nonce, signed_part,
                         sizeof(signed_part), r->tag)) {
    c->close_after_reply = 1;
    queue_error(s, c, r->op, KVS_ERR_AUTH, "hello not signed with this job's key (not a "
                                           "client of this job)");
    return;
  }
  /* A store opened before the job size was known takes the first hello's. */
  if (s->cfg.nranks == 0 && r->nranks >= 1 && r->nranks <= (1u << 20))
    s->cfg.nranks = (int)r->nranks;
  if ((int)r->nranks != s->cfg.nranks) {
    c->close_after_reply = 1;
    queue_error(s, c, r->op, KVS_ERR_AUTH, "this job has %d ranks, not %u", s->cfg.nranks,
                r->nranks);
    return;
  }
  for (int i = 0; i < s->nconns_max; i++) {
    if (s->conns[i].fd >= 0 && s->conns[i].rank == (int)r->rank) {
      c->close_after_reply = 1;
      queue_error(s, c, r->op, KVS_ERR_AUTH, "rank %u is already connected", r->rank);
      return;
    }
  }
  c->rank = (int)r->rank;
  uint8_t proof[KVS_TAG_BYTES];
  gcoll_auth_tag(&s->secret, KVS_PROOF_PURPOSE, r->nonce, c->nonce, KVS_NONCE_BYTES, proof);
  queue_reply(s, c, r->op, KVS_OK, proof, sizeof(proof));
}

static void handle_put(struct kvs_server *s, struct conn *c, const struct kvs_request *r) {
  struct entry **pp = find_slot(s, r->key, r->key_len);
  if (*pp != NULL) {
    const struct entry *e = *pp;
    if (e->vlen == r->value_len && memcmp(e->data + e->klen, r->value, e->vlen) == 0)
      queue_reply(s, c, r->op, KVS_OK, NULL, 0);
    else
      queue_error(s, c, r->op, KVS_ERR_EXISTS, "key '%.*s' already holds a different value",
                  (int)r->key_len, r->key);
    return;
  }
  size_t bytes = r->key_len + r->value_len;
  if (s->nkeys >= s->cfg.max_keys || s->nbytes + bytes > s->cfg.max_bytes) {
    queue_error(s, c, r->op, KVS_ERR_LIMIT, "store full (%zu keys, %zu bytes; limits %zu, %zu)",
                s->nkeys, s->nbytes, s->cfg.max_keys, s->cfg.max_bytes);
    return;
  }
  struct entry *e = malloc(sizeof(*e) + bytes);
  if (e == NULL) {
    queue_error(s, c, r->op, KVS_ERR_LIMIT, "out of memory");
    return;
  }
  e->next = NULL;
  e->klen = r->key_len;
  e->vlen = r->value_len;
  memcpy(e->data, r->key, r->key_len);
  if (r->value_len) memcpy(e->data + r->key_len, r->value, r->value_len);
  *pp = e;
  s->nkeys++;
  s->nbytes += bytes;
  queue_reply(s, c, r->op, KVS_OK, NULL, 0);
  wake_getters(s, e);
}

static void park(struct conn *c, enum wait_kind w, uint32_t timeout_ms) {
  c->wait = w;
  c->wait_ms = timeout_ms;
  c->deadline = now_ms() + timeout_ms;
}

static void handle_get(struct kvs_server *s, struct conn *c, const struct kvs_request *r) {
  const struct entry *e = lookup(s, r->key, r->key_len);
  /* The job's first lost rank, for a rank whose collective timed out and
   * wants to know whether a peer it never talked to died. */
  if (r->key_len == strlen(KVS_LOST_RANK_KEY) &&
      memcmp(r->key, KVS_LOST_RANK_KEY, r->key_len) == 0 && s->broken_rank >= 0) {
    char v[16];
    int n = snprintf(v, sizeof(v), "%d", s->broken_rank);
    queue_reply(s, c, r->op, KVS_OK, v, (size_t)n);
  } else if (e != NULL) {
    queue_reply(s, c, r->op, KVS_OK, e->data + e->klen, e->vlen);
  } else if (s->broken_rank >= 0) {
    queue_error(s, c, r->op, KVS_ERR_PEER_LOST,
                "rank %d disconnected from the bootstrap KVS without saying goodbye",
                s->broken_rank);
  } else if (r->timeout_ms == 0) {
    queue_error(s, c, r->op, KVS_ERR_TIMEOUT, "no key '%.*s'", (int)r->key_len, r->key);
  } else {
    memcpy(c->wait_key, r->key, r->key_len);
    c->wait_key[r->key_len] = '\0';
    park(c, WAIT_GET, r->timeout_ms);
  }
}

static void handle_collective(struct kvs_server *s, struct conn *c,
                              const struct kvs_request *r, enum wait_kind w) {
  if (s->broken_rank >= 0) {
    queue_error(s, c, r->op, KVS_ERR_PEER_LOST,
                "rank %d disconnected from the bootstrap KVS without saying goodbye",
                s->broken_rank);
    return;
  }
  park(c, w, r->timeout_ms);
  complete_collective(s, w);
}

static void handle_request(struct kvs_server *s, struct conn *c) {
  struct kvs_request r;
  char err[KVS_MAX_REASON];
  s->nrequests++;
  if (gcoll_kvs_request_decode(c->h.op, c->body, c->h.body_len, &r, err, sizeof(err)) != 0) {
    c->close_after_reply = 1;
    queue_error(s, c, c->h.op, KVS_ERR_PROTO, "%s", err);
    return;
  }
  if (r.op != KVS_OP_HELLO && c->rank < 0) {
    c->close_after_reply = 1;
    queue_error(s, c, r.op, KVS_ERR_STATE, "%s before hello", gcoll_kvs_op_name(r.op));
    return;
  }
  switch (r.op) {
  case KVS_OP_HELLO: handle_hello(s, c, &r); break;
  case KVS_OP_PUT: handle_put(s, c, &r); break;
  case KVS_OP_GET: handle_get(s, c, &r); break;
  case KVS_OP_FENCE: handle_collective(s, c, &r, WAIT_FENCE); break;
  case KVS_OP_BARRIER: handle_collective(s, c, &r, WAIT_BARRIER); break;
  case KVS_OP_BYE:
    if (!c->said_bye) s->nbye++;
    c->said_bye = 1;
    queue_reply(s, c, r.op, KVS_OK, NULL, 0);
    break;
  default: break;
  }
}

/* Reads what the current message still needs. Returns 1 when a whole
 * message is in, 0 when more is needed, -1 when the connection is done. */
static int read_message(struct kvs_server *s, struct conn *c) {
  char err[KVS_MAX_REASON];
  while (c->hdr_have < KVS_HEADER_LEN) {
    ssize_t n = recv(c->fd, c->hdr + c->hdr_have, KVS_HEADER_LEN - c->hdr_have, 0);
    if (n > 0) {
      c->hdr_have += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    return -1;
  }
  if (c->body == NULL) {
    if (gcoll_kvs_header_decode(c->hdr, 0, &c->h, err, sizeof(err)) != 0) {
      c->close_after_reply = 1;
      uint16_t op = c->hdr[7] >= KVS_OP_HELLO && c->hdr[7] <= KVS_OP_LAST ? c->hdr[7]
                                                                           : KVS_OP_HELLO;
      queue_error(s, c, op, KVS_ERR_PROTO, "%s", err);
      return 0;
    }
    /* A stranger gets no more memory than a hello takes. */
    if (c->rank < 0 && (c->h.op != KVS_OP_HELLO || c->h.body_len != KVS_HELLO_BODY)) {
      c->close_after_reply = 1;
      if (c->h.op != KVS_OP_HELLO)
        queue_error(s, c, c->h.op, KVS_ERR_STATE, "%s before hello", gcoll_kvs_op_name(c->h.op));
      else
        queue_error(s, c, c->h.op, KVS_ERR_PROTO, "hello of %u bytes, expected %d",
                    c->h.body_len, KVS_HELLO_BODY);
      return 0;
    }
    c->body = malloc(c->h.body_len ? c->h.body_len : 1);
    if (c->body == NULL) return -1;
  }
  while (c->body_have < c->h.body_len) {
    ssize_t n = recv(c->fd, c->body + c->body_have, c->h.body_len - c->body_have, 0);
    if (n > 0) {
      c->body_have += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    return -1;
  }
  return 1;
}

/* Sends what is pending; returns -1 when the connection is done. */
static int flush_reply(struct conn *c) {
  while (c->out != NULL && c->out_off < c->out_len) {
    ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    return -1;
  }
  free(c->out);
  c->out = NULL;
  c->out_len = c->out_off = 0;
  return c->close_after_reply ? -1 : 0;
}

static void conn_readable(struct kvs_server *s, struct conn *c) {
  int rc = read_message(s, c);
  if (rc < 0) {
    conn_drop(s, c);
    return;
  }
  if (c->out != NULL) return; /* a header error was queued */
  if (rc == 1) {
    handle_request(s, c);
    if (c->fd >= 0) conn_reset_input(c);
  }
}

/* Closes the unidentified connection that has waited longest, when the
 * pool of them is full. */
static void make_unauth_room(struct kvs_server *s) {
  int n = 0, oldest = -1;
  for (int i = 0; i < s->nconns_max; i++) {
    struct conn *c = &s->conns[i];
    if (c->fd < 0 || c->rank >= 0) continue;
    n++;
    if (oldest < 0 || c->hello_deadline < s->conns[oldest].hello_deadline) oldest = i;
  }
  if (n >= UNAUTH_POOL && oldest >= 0) conn_drop(s, &s->conns[oldest]);
}

static void accept_all(struct kvs_server *s) {
  if (now_ms() < s->paused_until) return;
  for (;;) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        s->paused_until = now_ms() + ACCEPT_PAUSE_MS;
      return;
    }
    make_unauth_room(s);
    int slot = -1;
    for (int i = 0; i < s->nconns_max && slot < 0; i++)
      if (s->conns[i].fd < 0) slot = i;
    if (slot < 0) {
      close(fd); /* every slot is an identified rank's: nothing to evict */
      continue;
    }
    struct conn *c = &s->conns[slot];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->rank = -1;
    c->hello_deadline = now_ms() + HELLO_DEADLINE_MS;
    char err[128];
    if (gcoll_auth_nonce(c->nonce, err, sizeof(err)) != 0) {
      conn_drop(s, c);
      continue;
    }
    queue_reply(s, c, KVS_OP_CHALLENGE, KVS_OK, c->nonce, sizeof(c->nonce));
  }
}

static void expire(struct kvs_server *s) {
  uint64_t now = now_ms();
  for (int i = 0; i < s->nconns_max; i++) {
    struct conn *c = &s->conns[i];
    if (c->fd < 0) continue;
    if (c->rank < 0 && now >= c->hello_deadline) {
      conn_drop(s, c);
      continue;
    }
    if (c->wait == WAIT_NONE || now < c->deadline) continue;
    enum wait_kind w = c->wait;
    if (w == WAIT_GET) {
      c->wait = WAIT_NONE;
      /* Say whether the rank that should have put it ever joined: a rank
       * that could not reach the store reads differently from a slow one. */
      int joined = 0, missing = -1;
      for (int r = 0; r < s->cfg.nranks; r++) {
        int in = 0;
        for (int k = 0; k < s->nconns_max && !in; k++)
          in = s->conns[k].fd >= 0 && s->conns[k].rank == r;
        joined += in;
        if (!in && missing < 0) missing = r;
      }
      if (missing >= 0)
        queue_error(s, c, KVS_OP_GET, KVS_ERR_TIMEOUT,
                    "no rank put this key within %u ms; %d of %d ranks have joined the store "
                    "(rank %d never did: it could not reach the store, or has not started)",
                    c->wait_ms, joined, s->cfg.nranks, missing);
      else
        queue_error(s, c, KVS_OP_GET, KVS_ERR_TIMEOUT,
                    "no rank put this key within %u ms, though all %d ranks joined the store",
                    c->wait_ms, s->cfg.nranks);
    } else {
      int arrived = count_waiting(s, w);
      c->wait = WAIT_NONE;
      queue_error(s, c, wait_op(w), KVS_ERR_TIMEOUT,
                  "only %d of %d ranks entered the %s within %u ms", arrived, s->cfg.nranks,
                  gcoll_kvs_op_name(wait_op(w)), c->wait_ms);
    }
  }
}

/* ---- public ------------------------------------------------------------- */

static int open_listener(struct kvs_server *s, char *err, size_t errlen) {
  s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd < 0) {
    snprintf(err, errlen, "KVS socket: %s", strerror(errno));
    return -1;
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  const char *ip = s->cfg.bind_ip ? s->cfg.bind_ip : "127.0.0.1";
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    snprintf(err, errlen, "KVS listen on '%.64s': not an IPv4 address", ip);
    return -1;
  }
  socklen_t alen = sizeof(a);
  int backlog = s->nconns_max < 4096 ? s->nconns_max : 4096;
  if (bind(s->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(s->listen_fd, backlog) != 0 ||
      getsockname(s->listen_fd, (struct sockaddr *)&a, &alen) != 0) {
    snprintf(err, errlen, "KVS listen on %s: %s", ip, strerror(errno));
    return -1;
  }
  s->port = ntohs(a.sin_port);
  return 0;
}

static int config_defaults(struct kvs_server *s, const struct kvs_server_config *cfg,
                           char *err, size_t errlen) {
  size_t jk = cfg->job_key ? strlen(cfg->job_key) : 0;
  if (cfg->nranks < 0 || cfg->nranks > (1 << 20)) {
    snprintf(err, errlen, "KVS: %d ranks, must be 0 (unknown yet) to %d", cfg->nranks, 1 << 20);
    return -1;
  }
  if (jk == 0 || jk > KVS_MAX_JOB_KEY) {
    snprintf(err, errlen, "KVS: job key of %zu bytes, must be 1..%d", jk, KVS_MAX_JOB_KEY);
    return -1;
  }
  s->cfg = *cfg;
  s->cfg.job_key = NULL; /* the caller's string may go; only the secret stays */
  if (gcoll_auth_derive(cfg->job_key, jk, GCOLL_AUTH_LABEL_STORE, &s->secret, err, errlen) != 0)
    return -1;
  if (s->cfg.max_keys == 0) s->cfg.max_keys = 1024 + 64 * (size_t)cfg->nranks;
  if (s->cfg.max_bytes == 0) s->cfg.max_bytes = (size_t)64 << 20;
  if (s->cfg.max_conns <= 0) s->cfg.max_conns = 2 * cfg->nranks + 16;
  s->nconns_max = s->cfg.max_conns + UNAUTH_POOL;
  /* Never more connections than descriptors: beyond the limit accept()
   * fails with EMFILE, and the owner's own files would fail with it. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < (rlim_t)s->nconns_max + FD_RESERVE) {
    long cap = (long)rl.rlim_cur - FD_RESERVE;
    s->nconns_max = cap > 2 * UNAUTH_POOL ? (int)cap : 2 * UNAUTH_POOL;
  }
  s->nbuckets = 64;
  while (s->nbuckets < s->cfg.max_keys && s->nbuckets < ((size_t)1 << 20)) s->nbuckets <<= 1;
  return 0;
}

struct kvs_server *gcoll_kvs_server_open(const struct kvs_server_config *cfg, char *err,
                                         size_t errlen) {
  struct kvs_server *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    snprintf(err, errlen, "KVS: out of memory");
    return NULL;
  }
  s->listen_fd = -1;
  s->broken_rank = -1;
  if (config_defaults(s, cfg, err, errlen) != 0) goto fail;
  s->conns = calloc((size_t)s->nconns_max, sizeof(*s->conns));
  s->pollmap = calloc((size_t)s->nconns_max + 1, sizeof(int));
  s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
  if (s->conns == NULL || s->pollmap == NULL || s->buckets == NULL) {
    snprintf(err, errlen, "KVS: out of memory for %d connections", s->nconns_max);
    goto fail;
  }
  for (int i = 0; i < s->nconns_max; i++) {
    s->conns[i].fd = -1;
    s->conns[i].rank = -1;
  }
  if (open_listener(s, err, errlen) != 0) goto fail;
  return s;
fail:
  gcoll_kvs_server_close(s);
  return NULL;
}

void gcoll_kvs_server_close(struct kvs_server *s) {
  if (s == NULL) return;
  for (int i = 0; s->conns && i < s->nconns_max; i++) {
    struct conn *c = &s->conns[i];
    if (c->fd < 0) continue;
    close(c->fd);
    free(c->body);
    free(c->out);
  }
  for (size_t b = 0; s->buckets && b < s->nbuckets; b++) {
    struct entry *e = s->buckets[b];
    while (e) {
      struct entry *n = e->next;
      free(e);
      e = n;
    }
  }
  if (s->listen_fd >= 0) close(s->listen_fd);
  free(s->buckets);
  free(s->pollmap);
  free(s->conns);
  free(s);
}

uint16_t gcoll_kvs_server_port(const struct kvs_server *s) { return s->port; }

size_t gcoll_kvs_server_nkeys(const struct kvs_server *s) { return s->nkeys; }

int gcoll_kvs_server_nranks(const struct kvs_server *s) { return s->cfg.nranks; }

int gcoll_kvs_server_nbye(const struct kvs_server *s) { return s->nbye; }

uint64_t gcoll_kvs_server_nrequests(const struct kvs_server *s) { return s->nrequests; }

int gcoll_kvs_server_broken_rank(const struct kvs_server *s) { return s->broken_rank; }

void gcoll_kvs_server_rank_gone(struct kvs_server *s, int rank) {
  if (s == NULL || s->broken_rank >= 0 || rank < 0) return;
  s->broken_rank = rank;
  fail_all_waiters(s);
}

int gcoll_kvs_server_max_pollfds(const struct kvs_server *s) { return s->nconns_max + 1; }

int gcoll_kvs_server_fill_pollfds(struct kvs_server *s, struct pollfd *fds) {
  int n = 0;
  fds[n] = (struct pollfd){.fd = s->listen_fd, .events = now_ms() < s->paused_until ? 0 : POLLIN};
  s->pollmap[n++] = -1;
  for (int i = 0; i < s->nconns_max; i++) {
    struct conn *c = &s->conns[i];
    if (c->fd < 0) continue;
    short ev;
    if (c->out != NULL)
      ev = POLLOUT;
    else if (c->wait != WAIT_NONE)
      ev = POLLRDHUP; /* only notice a close: the client must not send now */
    else
      ev = POLLIN;
    fds[n] = (struct pollfd){.fd = c->fd, .events = ev};
    s->pollmap[n++] = i;
  }
  return n;
}

void gcoll_kvs_server_dispatch(struct kvs_server *s, const struct pollfd *fds, int n) {
  for (int i = 0; i < n; i++) {
    if (fds[i].revents == 0) continue;
    if (s->pollmap[i] < 0) {
      accept_all(s);
      continue;
    }
    struct conn *c = &s->conns[s->pollmap[i]];
    if (c->fd != fds[i].fd) continue; /* dropped earlier in this round */
    short re = fds[i].revents;
    if (c->out != NULL && (re & POLLOUT)) {
      if (flush_reply(c) < 0) conn_drop(s, c);
    } else if (c->wait != WAIT_NONE && (re & (POLLRDHUP | POLLHUP | POLLERR))) {
      conn_drop(s, c);
    } else if (c->out == NULL && c->wait == WAIT_NONE && (re & (POLLIN | POLLHUP | POLLERR))) {
      conn_readable(s, c);
    } else if (re & (POLLHUP | POLLERR | POLLNVAL)) {
      conn_drop(s, c);
    }
  }
  /* Replies queued above are usually sendable at once; trying now saves a
   * poll round trip per request. */
  for (int i = 0; i < s->nconns_max; i++) {
    struct conn *c = &s->conns[i];
    if (c->fd >= 0 && c->out != NULL && flush_reply(c) < 0) conn_drop(s, c);
  }
  expire(s);
}

int gcoll_kvs_server_timeout_ms(const struct kvs_server *s) {
  uint64_t now = now_ms(), best = UINT64_MAX;
  for (int i = 0; i < s->nconns_max; i++) {
    const struct conn *c = &s->conns[i];
    if (c->fd < 0) continue;
    if (c->wait != WAIT_NONE && c->deadline < best) best = c->deadline;
    if (c->rank < 0 && c->hello_deadline < best) best = c->hello_deadline;
  }
  if (s->paused_until > now && s->paused_until < best) best = s->paused_until;
  if (best == UINT64_MAX) return -1;
  if (best <= now) return 0;
  uint64_t d = best - now;
  return d > 60000 ? 60000 : (int)d;
}
