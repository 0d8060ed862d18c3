/* Bootstrap backend "tcp": a client of the key-value store gcollrun hosts
 * (runtime/kvs_server.c, wire format in kvs_proto.h). One connection per
 * rank, one request in flight; every send and receive is bounded by the
 * caller's deadline through poll(), so a dead or silent server is an error
 * message, never a hang.
 *
 * Environment: GCOLL_KVS_ADDR=host:port, GCOLL_JOB_KEY, GCOLL_RANK,
 * GCOLL_NRANKS. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kernels/wait.h"
#include "runtime/auth.h"
#include "runtime/bootstrap.h"
#include "runtime/kvs_proto.h"
#include "runtime/net_tcp.h"

/* The server answers a wait when its own timeout passes; the client gives
 * it this much longer before deciding the server itself is gone. */
#define SERVER_SLACK_MS 2000

struct tcp_state {
  int fd;
  char addr[300];
  struct gcoll_auth_secret secret; /* from the store key; never sent */
  uint8_t *buf;              /* KVS_MAX_MSG bytes, requests and replies */
};

static const char *peer_of(const struct tcp_state *t) { return t->addr; }

static int wait_fd(int fd, short ev, uint64_t deadline, char *err, size_t errlen,
                   const char *what) {
  for (;;) {
    uint64_t now = gcoll_bootstrap_now_ms();
    if (now >= deadline) {
      snprintf(err, errlen, "%s: no answer before the deadline (the store is unreachable, "
                            "overloaded or stopped)", what);
      return -1;
    }
    uint64_t left = deadline - now;
    struct pollfd p = {.fd = fd, .events = ev};
    int rc = poll(&p, 1, left > 60000 ? 60000 : (int)left);
    if (rc > 0) return 0;
    if (rc < 0 && errno != EINTR) {
      snprintf(err, errlen, "%s: poll: %s", what, strerror(errno));
      return -1;
    }
  }
}

/* A failed gcoll_tcp_send_all or _recv_all to the store, by its errno,
 * in one line; returns -1. */
static int store_io_failed(const struct tcp_state *t, int sending, char *err, size_t errlen) {
  if (errno == ETIMEDOUT)
    snprintf(err, errlen, "%s: no answer before the deadline (the store is unreachable, "
                          "overloaded or stopped)",
             sending ? "sending to the KVS" : "waiting for the KVS");
  else if (sending)
    snprintf(err, errlen, "sending to the KVS at %.64s: %s", peer_of(t),
             errno == 0 ? "connection closed" : strerror(errno));
  else
    snprintf(err, errlen, "the KVS at %.64s %s (gcollrun gone?)", peer_of(t),
             errno == 0 ? "closed the connection" : strerror(errno));
  return -1;
}

static int send_all(struct tcp_state *t, const uint8_t *p, size_t n, uint64_t deadline,
                    char *err, size_t errlen) {
  if (gcoll_tcp_send_all(t->fd, p, n, deadline) == 0) return 0;
  return store_io_failed(t, 1, err, errlen);
}

static int recv_all(struct tcp_state *t, uint8_t *p, size_t n, uint64_t deadline, char *err,
                    size_t errlen) {
  if (gcoll_tcp_recv_all(t->fd, p, n, deadline) == 0) return 0;
  return store_io_failed(t, 0, err, errlen);
}

/* Sends the n encoded bytes of request r in t->buf and reads its reply
 * there. Returns the reply's status (>= 0) with body and body_len set, or
 * -1 on a transport failure, which leaves the stream out of step: the
 * connection is closed. */
static int round_trip(struct tcp_state *t, const struct kvs_request *r, size_t n,
                      uint64_t deadline, const uint8_t **body, size_t *body_len, char *err,
                      size_t errlen) {
  struct kvs_header h;
  char why[512] = "";
  if (send_all(t, t->buf, n, deadline, why, sizeof(why)) != 0 ||
      recv_all(t, t->buf, KVS_HEADER_LEN, deadline, why, sizeof(why)) != 0)
    goto broken;
  if (gcoll_kvs_header_decode(t->buf, 1, &h, why, sizeof(why)) != 0) goto broken;
  if ((h.op & ~KVS_OP_REPLY) != r->op && h.status == KVS_OK) {
    snprintf(why, sizeof(why), "%s reply to a %s request", gcoll_kvs_op_name(h.op),
             gcoll_kvs_op_name(r->op));
    goto broken;
  }
  if (recv_all(t, t->buf, h.body_len, deadline, why, sizeof(why)) != 0) goto broken;
  *body = t->buf;
  *body_len = h.body_len;
  return (int)h.status;
broken:
  close(t->fd);
  t->fd = -1;
  snprintf(err, errlen, "%s", why);
  return -1;
}

/* One request and its reply (round_trip's results). Every request the
 * store sees from this rank leaves here, so this is where the handle
 * counts them and the time their answers took. */
static int transact(struct gcoll_bootstrap *bs, struct kvs_request *r, uint64_t deadline,
                    const uint8_t **body, size_t *body_len, char *err, size_t errlen) {
  struct tcp_state *t = bs->impl;
  if (t->fd < 0) {
    snprintf(err, errlen, "connection to the KVS at %.64s is closed after an earlier error",
             peer_of(t));
    return -1;
  }
  size_t n = gcoll_kvs_request_encode(r, t->buf, KVS_MAX_MSG, err, errlen);
  if (n == 0) return -1;
  uint64_t t0 = gcoll_wait_now_ns();
  bs->requests++;
  int status = round_trip(t, r, n, deadline, body, body_len, err, errlen);
  bs->request_ns += gcoll_wait_now_ns() - t0;
  return status;
}

/* Formats a server's error reply: "STATUS: REASON". */
static void reply_error(const char *what, int status, const uint8_t *body, size_t len,
                        char *err, size_t errlen) {
  int n = len > KVS_MAX_REASON ? KVS_MAX_REASON : (int)len;
  char reason[KVS_MAX_REASON + 1];
  for (int i = 0; i < n; i++) reason[i] = body[i] >= 0x20 && body[i] < 0x7f ? (char)body[i] : '?';
  reason[n] = '\0';
  snprintf(err, errlen, "bootstrap(tcp): %s: %s%s", what,
           n ? reason : gcoll_kvs_status_name((uint32_t)status),
           status == KVS_ERR_TIMEOUT ? " (deadline from GCOLL_TIMEOUT)" : "");
}

static uint32_t server_wait_ms(uint64_t deadline) {
  uint64_t now = gcoll_bootstrap_now_ms();
  uint64_t left = deadline > now ? deadline - now : 0;
  return left > KVS_MAX_TIMEOUT_MS ? KVS_MAX_TIMEOUT_MS : (uint32_t)left;
}

/* Runs a request whose only answer is OK or an error. */
static int simple_op(struct gcoll_bootstrap *bs, struct kvs_request *r, const char *what,
                     uint64_t client_deadline, char *err, size_t errlen) {
  const uint8_t *body;
  size_t len;
  char why[512];
  int st = transact(bs, r, client_deadline, &body, &len, why, sizeof(why));
  if (st < 0) {
    snprintf(err, errlen, "bootstrap(tcp): %s: %s", what, why);
    return -1;
  }
  if (st != KVS_OK) {
    reply_error(what, st, body, len, err, errlen);
    return -1;
  }
  return 0;
}

static int tcp_put(struct gcoll_bootstrap *bs, const char *key, const void *value, size_t len,
                   char *err, size_t errlen) {
  size_t klen = strlen(key);
  if (!gcoll_kvs_key_valid(key, klen) || len > KVS_MAX_VALUE) {
    snprintf(err, errlen, "bootstrap(tcp): put '%.64s': key must be 1..%d printable "
                          "characters and the value at most %d bytes (it is %zu)",
             key, KVS_MAX_KEY, KVS_MAX_VALUE, len);
    return -1;
  }
  struct kvs_request r = {.op = KVS_OP_PUT, .key = key, .key_len = klen, .value = value,
                          .value_len = len};
  char what[KVS_MAX_KEY + 16];
  snprintf(what, sizeof(what), "put '%s'", key);
  return simple_op(bs, &r, what, gcoll_bootstrap_deadline(bs), err, errlen);
}

static int tcp_get(struct gcoll_bootstrap *bs, const char *key, void *buf, size_t buflen,
                   size_t *len, uint64_t deadline, char *err, size_t errlen) {
  size_t klen = strlen(key);
  char what[KVS_MAX_KEY + 16];
  snprintf(what, sizeof(what), "get '%.*s'", KVS_MAX_KEY, key);
  if (!gcoll_kvs_key_valid(key, klen)) {
    snprintf(err, errlen, "bootstrap(tcp): %s: key must be 1..%d printable characters", what,
             KVS_MAX_KEY);
    return -1;
  }
  struct kvs_request r = {.op = KVS_OP_GET, .key = key, .key_len = klen,
                          .timeout_ms = server_wait_ms(deadline)};
  const uint8_t *body;
  size_t blen;
  char why[512];
  int st = transact(bs, &r, deadline + SERVER_SLACK_MS, &body, &blen, why, sizeof(why));
  if (st < 0) {
    snprintf(err, errlen, "bootstrap(tcp): %s: %s", what, why);
    return -1;
  }
  if (st != KVS_OK) {
    reply_error(what, st, body, blen, err, errlen);
    return -1;
  }
  *len = blen;
  if (blen > buflen) {
    snprintf(err, errlen, "bootstrap(tcp): %s: value of %zu bytes does not fit %zu", what, blen,
             buflen);
    return -1;
  }
  memcpy(buf, body, blen);
  return 0;
}

static int collective(struct gcoll_bootstrap *bs, enum kvs_op op, uint64_t deadline, char *err,
                      size_t errlen) {
  struct kvs_request r = {.op = op, .timeout_ms = server_wait_ms(deadline)};
  return simple_op(bs, &r, gcoll_kvs_op_name(op), deadline + SERVER_SLACK_MS, err, errlen);
}

static int tcp_fence(struct gcoll_bootstrap *bs, uint64_t deadline, char *err, size_t errlen) {
  return collective(bs, KVS_OP_FENCE, deadline, err, errlen);
}

static int tcp_barrier(struct gcoll_bootstrap *bs, uint64_t deadline, char *err,
                       size_t errlen) {
  return collective(bs, KVS_OP_BARRIER, deadline, err, errlen);
}

static void tcp_free(struct tcp_state *t) {
  if (t == NULL) return;
  if (t->fd >= 0) close(t->fd);
  free(t->buf);
  free(t);
}

static void tcp_close(struct gcoll_bootstrap *bs) {
  struct tcp_state *t = bs->impl;
  if (t->fd >= 0) {
    /* Best effort, briefly: without BYE the server would treat our exit as
     * a crash and fail everyone else's waits. */
    struct kvs_request r = {.op = KVS_OP_BYE};
    const uint8_t *body;
    size_t len;
    char why[512];
    transact(bs, &r, gcoll_bootstrap_now_ms() + 2000, &body, &len, why, sizeof(why));
  }
  tcp_free(t);
  free(bs);
}

static const struct gcoll_bootstrap_ops tcp_ops = {
    .put = tcp_put, .get = tcp_get, .fence = tcp_fence, .barrier = tcp_barrier,
    .close = tcp_close};

/* "host:port" -> connected socket, within the deadline. */
static int tcp_connect(const char *addr, uint64_t deadline, char *err, size_t errlen) {
  char host[256];
  const char *colon = strrchr(addr, ':');
  if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof(host) ||
      colon[1] == '\0') {
    snprintf(err, errlen, "bootstrap(tcp): GCOLL_KVS_ADDR='%.64s' is not host:port", addr);
    return -1;
  }
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = '\0';
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int gai = getaddrinfo(host, colon + 1, &hints, &res);
  if (gai != 0) {
    snprintf(err, errlen, "bootstrap(tcp): GCOLL_KVS_ADDR='%.64s': %s", addr, gai_strerror(gai));
    return -1;
  }
  int fd = -1, last = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last = errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    char why[128];
    int soerr = errno;
    socklen_t sl = sizeof(soerr);
    if (soerr == EINPROGRESS &&
        wait_fd(fd, POLLOUT, deadline, why, sizeof(why), "connect") == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
      break;
    last = soerr == EINPROGRESS ? ETIMEDOUT : soerr;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    snprintf(err, errlen, "bootstrap(tcp): cannot connect to the KVS at %.64s: %s", addr,
             strerror(last));
  return fd;
}

/* The identity's store key becomes the secret the hello is signed with. */
static int set_store_key(struct tcp_state *t, const char *key, char *err, size_t errlen) {
  return gcoll_auth_derive(key, strlen(key), GCOLL_AUTH_LABEL_STORE, &t->secret, err, errlen);
}

static int tcp_detect(void) {
  const char *a = getenv("GCOLL_KVS_ADDR");
  return a != NULL && *a != '\0';
}

static int read_identity(struct gcoll_bootstrap *bs, struct tcp_state *t, char *err,
                         size_t errlen) {
  long rank, nranks;
  const char *addr = getenv("GCOLL_KVS_ADDR"), *key = getenv("GCOLL_JOB_KEY");
  if (addr == NULL || *addr == '\0') {
    snprintf(err, errlen, "bootstrap(tcp): GCOLL_KVS_ADDR is not set");
    return -1;
  }
  if (key == NULL || *key == '\0' || strlen(key) > KVS_MAX_JOB_KEY) {
    snprintf(err, errlen, "bootstrap(tcp): GCOLL_JOB_KEY must be set (1..%d characters)",
             KVS_MAX_JOB_KEY);
    return -1;
  }
  if (gcoll_bootstrap_env_int("GCOLL_NRANKS", 1, 1L << 24, &nranks, err, errlen) ||
      gcoll_bootstrap_env_int("GCOLL_RANK", 0, nranks - 1, &rank, err, errlen))
    return -1;
  snprintf(t->addr, sizeof(t->addr), "%s", addr);
  if (set_store_key(t, key, err, errlen) != 0) return -1;
  bs->rank = (int)rank;
  bs->nranks = (int)nranks;
  return 0;
}

static struct tcp_state *tcp_state_new(struct gcoll_bootstrap *bs, char *err, size_t errlen) {
  struct tcp_state *t = calloc(1, sizeof(*t));
  if (t == NULL || (t->buf = malloc(KVS_MAX_MSG)) == NULL) {
    free(t);
    snprintf(err, errlen, "bootstrap(tcp): out of memory");
    return NULL;
  }
  t->fd = -1;
  bs->impl = t;
  bs->ops = &tcp_ops;
  return t;
}

/* Reads the server's challenge, says an authenticated hello and checks
 * the server's proof. 0; 1 when the connection broke before the answer (a
 * flood of strangers may have evicted it: worth another try); -1 when the
 * server refused us or failed its proof. */
static int tcp_hello(struct gcoll_bootstrap *bs, struct tcp_state *t, uint64_t deadline,
                     char *err, size_t errlen) {
  struct kvs_header h;
  uint8_t server_nonce[KVS_NONCE_BYTES], client_nonce[KVS_NONCE_BYTES], tag[KVS_TAG_BYTES];
  char why[512];
  if (recv_all(t, t->buf, KVS_HEADER_LEN, deadline, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "bootstrap(tcp): no challenge from the KVS: %s", why);
    return 1;
  }
  if (gcoll_kvs_header_decode(t->buf, 1, &h, why, sizeof(why)) != 0 ||
      h.op != (KVS_OP_REPLY | KVS_OP_CHALLENGE) || h.body_len != KVS_NONCE_BYTES) {
    snprintf(err, errlen, "bootstrap(tcp): %.64s is not a gcoll KVS of this version (%s)",
             peer_of(t), why[0] ? why : "no challenge");
    return -1;
  }
  if (recv_all(t, server_nonce, sizeof(server_nonce), deadline, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "bootstrap(tcp): no challenge from the KVS: %s", why);
    return 1;
  }
  if (gcoll_auth_nonce(client_nonce, err, errlen) != 0) return -1;
  uint8_t signed_part[8 + KVS_NONCE_BYTES];
  gcoll_kvs_hello_signed_part((uint32_t)bs->rank, (uint32_t)bs->nranks, client_nonce, signed_part);
  gcoll_auth_tag(&t->secret, KVS_HELLO_PURPOSE, server_nonce, signed_part, sizeof(signed_part),
                 tag);
  struct kvs_request r = {.op = KVS_OP_HELLO, .rank = (uint32_t)bs->rank,
                          .nranks = (uint32_t)bs->nranks, .nonce = client_nonce, .tag = tag};
  const uint8_t *body;
  size_t len;
  int st = transact(bs, &r, deadline, &body, &len, why, sizeof(why));
  if (st < 0) {
    snprintf(err, errlen, "bootstrap(tcp): hello: %s", why);
    return 1;
  }
  if (st != KVS_OK) {
    reply_error("hello", st, body, len, err, errlen);
    return -1;
  }
  if (len != KVS_TAG_BYTES || !gcoll_auth_verify(&t->secret, KVS_PROOF_PURPOSE, client_nonce,
                                                 server_nonce, KVS_NONCE_BYTES, body)) {
    snprintf(err, errlen, "bootstrap(tcp): the KVS at %.64s did not prove it holds this job's "
                          "key: refusing to use it", peer_of(t));
    return -1;
  }
  return 0;
}

/* Connects and says hello once the identity is in bs and t; a connection
 * that breaks before the hello is answered is retried with backoff. */
static int join_with_retries(struct gcoll_bootstrap *bs, struct tcp_state *t, char *err,
                             size_t errlen) {
  uint64_t deadline = gcoll_bootstrap_deadline(bs), backoff_ms = 10;
  for (int attempt = 1;; attempt++) {
    if ((t->fd = tcp_connect(t->addr, deadline, err, errlen)) < 0) return -1;
    int rc = tcp_hello(bs, t, deadline, err, errlen);
    if (rc <= 0) return rc;
    if (t->fd >= 0) close(t->fd);
    t->fd = -1;
    if (gcoll_bootstrap_now_ms() + backoff_ms >= deadline) {
      size_t n = strlen(err);
      snprintf(err + n, errlen > n ? errlen - n : 0, " (after %d attempts)", attempt);
      return -1;
    }
    gcoll_tcp_backoff(&backoff_ms);
  }
}

/* Joining is bootstrap time as a whole: the TCP handshake, the challenge
 * and any retries are the store's cost too, not only the hello's round
 * trip that transact() timed. */
static int tcp_join(struct gcoll_bootstrap *bs, struct tcp_state *t, char *err, size_t errlen) {
  uint64_t t0 = gcoll_wait_now_ns(), before = bs->request_ns;
  snprintf(bs->store, sizeof(bs->store), "the store at %s", t->addr);
  int rc = join_with_retries(bs, t, err, errlen);
  bs->request_ns = before + (gcoll_wait_now_ns() - t0);
  return rc;
}

static int tcp_open(struct gcoll_bootstrap *bs, char *err, size_t errlen) {
  struct tcp_state *t = tcp_state_new(bs, err, errlen);
  if (t == NULL) return -1;
  if (read_identity(bs, t, err, errlen) == 0 && tcp_join(bs, t, err, errlen) == 0) return 0;
  tcp_free(t);
  bs->impl = NULL;
  return -1;
}

int gcoll_bootstrap_tcp_open(struct gcoll_bootstrap **out, const char *addr, const char *job_key,
                             int rank, int nranks, char *err, size_t errlen) {
  *out = NULL;
  if (strlen(addr) >= sizeof(((struct tcp_state *)0)->addr) || *job_key == '\0' ||
      strlen(job_key) > KVS_MAX_JOB_KEY || nranks < 1 || rank < 0 || rank >= nranks) {
    snprintf(err, errlen, "bootstrap(tcp): bad identity (rank %d of %d, job key of %zu bytes)",
             rank, nranks, strlen(job_key));
    return -1;
  }
  struct gcoll_bootstrap *bs = calloc(1, sizeof(*bs));
  if (bs == NULL) {
    snprintf(err, errlen, "bootstrap(tcp): out of memory");
    return -1;
  }
  bs->backend = gcoll_bootstrap_tcp_backend.name;
  bs->opened_ns = gcoll_wait_now_ns();
  bs->rank = rank;
  bs->nranks = nranks;
  struct tcp_state *t = NULL;
  if (gcoll_bootstrap_timeout_from_env(&bs->timeout_ms, err, errlen) != 0 ||
      (t = tcp_state_new(bs, err, errlen)) == NULL)
    goto fail;
  snprintf(t->addr, sizeof(t->addr), "%s", addr);
  if (set_store_key(t, job_key, err, errlen) != 0 || tcp_join(bs, t, err, errlen) != 0) goto fail;
  *out = bs;
  return 0;
fail:
  tcp_free(t);
  free(bs);
  return -1;
}

const struct gcoll_bootstrap_backend gcoll_bootstrap_tcp_backend = {
    .name = "tcp", .detect = tcp_detect, .open = tcp_open};
