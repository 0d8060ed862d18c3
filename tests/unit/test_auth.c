/* Connection authentication (runtime/auth.h) and what it protects: the
 * challenge-response hello of the network transports (net_tcp.h) and of
 * the bootstrap store, each against forged hellos and floods of strangers,
 * with real sockets. The attacks as another user, through whole jobs, are
 * in tests/security/. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/auth.h"
#include "runtime/bootstrap.h"
#include "runtime/kvs_proto.h"
#include "runtime/kvs_thread.h"
#include "runtime/net_tcp.h"
#include "runtime/transport.h"

#define PURPOSE "test hello"
#define HELLO_LEN 24
#define STRANGERS 300

/* ---- HMAC, derivation ---------------------------------------------------- */

static void test_derive_and_tag(void **state) {
  (void)state;
  char err[256];
  struct gcoll_auth_secret a, b, c;
  assert_int_equal(gcoll_auth_derive("0123abcd", 8, GCOLL_AUTH_LABEL_CONN, &a, err, sizeof(err)),
                   0);
  assert_int_equal(gcoll_auth_derive("0123abcd", 8, GCOLL_AUTH_LABEL_CONN, &b, err, sizeof(err)),
                   0);
  assert_memory_equal(a.bytes, b.bytes, sizeof(a.bytes));
  /* Another label, another secret: the store's secret says nothing about
   * the connections'. */
  assert_int_equal(gcoll_auth_derive("0123abcd", 8, GCOLL_AUTH_LABEL_STORE, &c, err, sizeof(err)),
                   0);
  assert_memory_not_equal(a.bytes, c.bytes, sizeof(a.bytes));
  assert_int_equal(gcoll_auth_derive("", 0, GCOLL_AUTH_LABEL_CONN, &c, err, sizeof(err)), -1);
  assert_null(strchr(err, '\n'));

  unsigned char nonce[GCOLL_AUTH_NONCE_BYTES], other[GCOLL_AUTH_NONCE_BYTES];
  unsigned char tag[GCOLL_AUTH_TAG_BYTES], msg[40];
  assert_int_equal(gcoll_auth_nonce(nonce, err, sizeof(err)), 0);
  assert_int_equal(gcoll_auth_nonce(other, err, sizeof(err)), 0);
  assert_memory_not_equal(nonce, other, sizeof(nonce));
  for (size_t i = 0; i < sizeof(msg); i++) msg[i] = (unsigned char)(i * 7);
  gcoll_auth_tag(&a, PURPOSE, nonce, msg, sizeof(msg), tag);
  assert_true(gcoll_auth_verify(&a, PURPOSE, nonce, msg, sizeof(msg), tag));
  /* Any change to what the tag covers breaks it. */
  assert_false(gcoll_auth_verify(&a, PURPOSE, other, msg, sizeof(msg), tag));
  assert_false(gcoll_auth_verify(&a, "another purpose", nonce, msg, sizeof(msg), tag));
  assert_false(gcoll_auth_verify(&c, PURPOSE, nonce, msg, sizeof(msg), tag));
  assert_false(gcoll_auth_verify(&a, PURPOSE, nonce, msg, sizeof(msg) - 1, tag));
  for (int bit = 0; bit < 8 * GCOLL_AUTH_TAG_BYTES; bit += 13) {
    tag[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    assert_false(gcoll_auth_verify(&a, PURPOSE, nonce, msg, sizeof(msg), tag));
    tag[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
  msg[3] ^= 1;
  assert_false(gcoll_auth_verify(&a, PURPOSE, nonce, msg, sizeof(msg), tag));
}

/* ---- a listener with the transports' hello table ---------------------------- */

struct listener {
  int fd;
  struct gcoll_tcp_endpoint ep;
  struct gcoll_auth_secret secret;
  struct gcoll_tcp_hellos hellos;
  pthread_t thread;
  _Atomic int stop;
  _Atomic int matched;  /* hellos handed to match */
  int matched_fds[8];
};

/* Takes hellos that start with "HELO" and answers "accepted" as the
 * transports answer a matched hello. */
static int match(void *ctx, const unsigned char *hello, int fd) {
  struct listener *l = ctx;
  if (memcmp(hello, "HELO", 4) != 0) return -1;
  int n = atomic_load(&l->matched);
  if (n >= 8) return -1;
  /* Counted before the answer goes out: the client checks the count as
   * soon as it has the answer. */
  l->matched_fds[n] = fd;
  atomic_store(&l->matched, n + 1);
  unsigned char ok[GCOLL_TCP_HDR_BYTES];
  gcoll_tcp_hdr_encode(ok, 0, 0, GCOLL_TCP_PROTO_ACCEPTED);
  if (send(fd, ok, sizeof(ok), MSG_NOSIGNAL) != (ssize_t)sizeof(ok)) {
    atomic_store(&l->matched, n);
    return -1;
  }
  return 0;
}

static void *listener_main(void *arg) {
  struct listener *l = arg;
  while (!atomic_load(&l->stop)) {
    struct pollfd p = {.fd = l->fd, .events = gcoll_tcp_hellos_listen_events(&l->hellos)};
    int r = poll(&p, 1, 5);
    gcoll_tcp_hellos_progress(&l->hellos, l->fd, r > 0 && (p.revents & POLLIN), match, l);
  }
  return NULL;
}

static void listener_start(struct listener *l, const char *key) {
  char err[256];
  memset(l, 0, sizeof(*l));
  l->ep.family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", l->ep.ip);
  l->fd = gcoll_tcp_listen(&l->ep, err, sizeof(err));
  assert_true(l->fd >= 0);
  assert_int_equal(gcoll_auth_derive(key, strlen(key), GCOLL_AUTH_LABEL_CONN, &l->secret, err,
                                     sizeof(err)), 0);
  l->hellos.hello_bytes = HELLO_LEN;
  l->hellos.secret = &l->secret;
  l->hellos.purpose = PURPOSE;
  assert_int_equal(pthread_create(&l->thread, NULL, listener_main, l), 0);
}

static void listener_stop(struct listener *l) {
  atomic_store(&l->stop, 1);
  pthread_join(l->thread, NULL);
  gcoll_tcp_hellos_close(&l->hellos);
  for (int i = 0; i < atomic_load(&l->matched); i++) close(l->matched_fds[i]);
  close(l->fd);
}

/* Everything the peer sends until it closes (or 3 s pass). */
static size_t read_until_closed(int fd, unsigned char *buf, size_t cap) {
  size_t got = 0;
  uint64_t end = gcoll_transport_now_ms() + 3000;
  while (got < cap && gcoll_transport_now_ms() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t r = recv(fd, buf + got, cap - got, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) break;
    if (r > 0) got += (size_t)r;
  }
  return got;
}

static int connect_plain(const struct gcoll_tcp_endpoint *ep) {
  char err[256];
  return gcoll_tcp_connect(ep, gcoll_transport_now_ms() + 2000, err, sizeof(err));
}

static int hello_as(const struct listener *l, const char *key, char *err, size_t errlen) {
  struct gcoll_auth_secret s;
  unsigned char hello[HELLO_LEN] = "HELO", answer[GCOLL_TCP_HDR_BYTES];
  if (gcoll_auth_derive(key, strlen(key), GCOLL_AUTH_LABEL_CONN, &s, err, errlen) != 0) return -1;
  int fd = gcoll_tcp_hello_connect(&l->ep, &s, PURPOSE, hello, sizeof(hello), answer,
                                   gcoll_transport_now_ms() + 4000, err, errlen);
  uint64_t step;
  uint32_t nb, proto;
  gcoll_tcp_hdr_decode(answer, &step, &nb, &proto);
  if (fd >= 0 && proto != GCOLL_TCP_PROTO_ACCEPTED) {
    close(fd);
    return -1;
  }
  return fd;
}

static void test_hello_right_key_only(void **state) {
  (void)state;
  static struct listener l;
  char err[512];
  listener_start(&l, "feedface");
  int fd = hello_as(&l, "feedface", err, sizeof(err));
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(atomic_load(&l.matched), 1);
  /* Someone without the key is refused at once, nothing is matched, and
   * the error names what happened. */
  uint64_t t0 = gcoll_transport_now_ms();
  fd = hello_as(&l, "deadbeef", err, sizeof(err));
  assert_int_equal(fd, -1);
  assert_true(gcoll_transport_now_ms() - t0 < 1000);
  assert_non_null(strstr(err, "refused our hello"));
  assert_null(strchr(err, '\n'));
  assert_int_equal(atomic_load(&l.matched), 1);
  assert_true(l.hellos.refused >= 1);
  listener_stop(&l);
}

/* The old attack: a hello with the right fields and no tag (or a made-up
 * one), sent at once without reading the challenge. */
static void test_forged_hello_refused(void **state) {
  (void)state;
  static struct listener l;
  listener_start(&l, "feedface");
  unsigned char forged[HELLO_LEN + GCOLL_AUTH_TAG_BYTES] = "HELO";
  for (size_t i = HELLO_LEN; i < sizeof(forged); i++) forged[i] = (unsigned char)rand();
  for (int i = 0; i < 20; i++) {
    int fd = connect_plain(&l.ep);
    assert_true(fd >= 0);
    assert_int_equal(gcoll_tcp_send_all(fd, forged, sizeof(forged), gcoll_transport_now_ms() + 1000),
                     0);
    /* The listener sends its challenge and a refusal, then closes. */
    unsigned char buf[64];
    assert_int_equal(read_until_closed(fd, buf, sizeof(buf)),
                     GCOLL_TCP_CHALLENGE_BYTES + GCOLL_TCP_HDR_BYTES);
    close(fd);
  }
  assert_int_equal(atomic_load(&l.matched), 0);
  assert_int_equal(l.hellos.refused, 20);
  listener_stop(&l);
}

/* Hundreds of strangers that connect and say nothing: the pool evicts the
 * oldest, and the job's hello still gets through at once. */
static void test_flood_of_silent_strangers(void **state) {
  (void)state;
  static struct listener l;
  char err[512];
  listener_start(&l, "feedface");
  static int fds[STRANGERS];
  for (int i = 0; i < STRANGERS; i++) fds[i] = connect_plain(&l.ep);
  uint64_t t0 = gcoll_transport_now_ms();
  int fd = hello_as(&l, "feedface", err, sizeof(err));
  assert_true(fd >= 0);
  /* Bounded by the pool, not by the strangers' hello deadline. */
  assert_true(gcoll_transport_now_ms() - t0 < GCOLL_TCP_HELLO_DEADLINE_MS);
  assert_true(l.hellos.npending <= GCOLL_TCP_MAX_PENDING);
  close(fd);
  for (int i = 0; i < STRANGERS; i++)
    if (fds[i] >= 0) close(fds[i]);
  listener_stop(&l);
}

/* ---- the bootstrap store --------------------------------------------------- */

static void start_store(const char *key, int nranks, char *addr, size_t len) {
  char err[256];
  uint16_t port = 0;
  assert_int_equal(gcoll_kvs_thread_start(key, "127.0.0.1", nranks,
                                          GCOLL_KVS_THREAD_WHILE_USED, NULL, &port, err, sizeof(err)),
                   0);
  snprintf(addr, len, "127.0.0.1:%u", (unsigned)port);
}

static int connect_addr(const char *addr) {
  struct gcoll_tcp_endpoint ep = {.family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", ep.ip);
  ep.port = (uint16_t)atoi(strchr(addr, ':') + 1);
  return connect_plain(&ep);
}

static void test_store_refuses_wrong_key(void **state) {
  (void)state;
  char addr[64], err[512];
  start_store("00112233445566778899aabbccddeeff", 2, addr, sizeof(addr));
  struct gcoll_bootstrap *bs = NULL;
  assert_int_equal(gcoll_bootstrap_tcp_open(&bs, addr, "ffeeddccbbaa99887766554433221100", 0, 2,
                                            err, sizeof(err)), -1);
  assert_non_null(strstr(err, "not signed with this job's key"));
  assert_null(strchr(err, '\n'));
  /* A stranger that skips the hello is refused before it can put. */
  int fd = connect_addr(addr);
  assert_true(fd >= 0);
  uint8_t msg[256];
  struct kvs_request r = {.op = KVS_OP_PUT, .key = "k", .key_len = 1, .value = "v",
                          .value_len = 1};
  size_t n = gcoll_kvs_request_encode(&r, msg, sizeof(msg), err, sizeof(err));
  assert_true(n > 0);
  assert_int_equal(gcoll_tcp_send_all(fd, msg, n, gcoll_transport_now_ms() + 1000), 0);
  uint8_t in[512];
  size_t got = read_until_closed(fd, in, sizeof(in));
  close(fd);
  /* challenge, then an error reply: "put before hello" */
  assert_true(got > 2 * KVS_HEADER_LEN + KVS_NONCE_BYTES);
  assert_non_null(memmem(in, got, "before hello", 12));
  /* The right key still joins (both ranks, so the store can finish). */
  struct gcoll_bootstrap *b0 = NULL, *b1 = NULL;
  assert_int_equal(gcoll_bootstrap_tcp_open(&b0, addr, "00112233445566778899aabbccddeeff", 0, 2,
                                            err, sizeof(err)), 0);
  assert_int_equal(gcoll_bootstrap_tcp_open(&b1, addr, "00112233445566778899aabbccddeeff", 1, 2,
                                            err, sizeof(err)), 0);
  gcoll_bootstrap_close(b1);
  gcoll_bootstrap_close(b0);
}

static void test_store_survives_flood(void **state) {
  (void)state;
  char addr[64], err[512];
  const char *key = "0badc0de0badc0de0badc0de0badc0de";
  start_store(key, 2, addr, sizeof(addr));
  static int fds[STRANGERS];
  for (int i = 0; i < STRANGERS; i++) fds[i] = connect_addr(addr);
  struct gcoll_bootstrap *b0 = NULL, *b1 = NULL;
  uint64_t t0 = gcoll_transport_now_ms();
  assert_int_equal(gcoll_bootstrap_tcp_open(&b0, addr, key, 0, 2, err, sizeof(err)), 0);
  assert_int_equal(gcoll_bootstrap_tcp_open(&b1, addr, key, 1, 2, err, sizeof(err)), 0);
  assert_int_equal(gcoll_bootstrap_put(b0, "a", "1", 2, err, sizeof(err)), 0);
  char v[8];
  size_t len = 0;
  assert_int_equal(gcoll_bootstrap_get(b1, "a", v, sizeof(v), &len, gcoll_transport_now_ms() + 5000,
                                       err, sizeof(err)), 0);
  assert_string_equal(v, "1");
  assert_true(gcoll_transport_now_ms() - t0 < 5000);
  for (int i = 0; i < STRANGERS; i++)
    if (fds[i] >= 0) close(fds[i]);
  gcoll_bootstrap_close(b1);
  gcoll_bootstrap_close(b0);
}

/* A store that runs out of descriptors rests its listener instead of
 * spinning on accept(): a child with a small descriptor limit hosts it, a
 * flood fills the table, and the child's CPU time over a second of flood
 * stays small. */
static void test_store_no_busy_loop_at_fd_limit(void **state) {
  (void)state;
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct rlimit rl = {.rlim_cur = 48, .rlim_max = 48};
    char err[256];
    uint16_t port = 0;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 ||
        gcoll_kvs_thread_start("abcdef0123456789", "127.0.0.1", 2, GCOLL_KVS_THREAD_WHILE_USED,
                               NULL, &port, err, sizeof(err)) != 0)
      _exit(2);
    if (write(pipefd[1], &port, sizeof(port)) != sizeof(port)) _exit(3);
    struct timespec wait_flood = {.tv_sec = 0, .tv_nsec = 300000000};
    nanosleep(&wait_flood, NULL);
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    struct timespec second = {.tv_sec = 1, .tv_nsec = 0};
    nanosleep(&second, NULL);
    getrusage(RUSAGE_SELF, &after);
    double cpu = (double)(after.ru_utime.tv_sec - before.ru_utime.tv_sec) +
                 (double)(after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                 1e-6 * (double)(after.ru_utime.tv_usec - before.ru_utime.tv_usec +
                                 after.ru_stime.tv_usec - before.ru_stime.tv_usec);
    fprintf(stderr, "store CPU over 1 s of flood at the descriptor limit: %.3f s\n", cpu);
    _exit(cpu < 0.5 ? 0 : 1);
  }
  uint16_t port = 0;
  assert_int_equal(read(pipefd[0], &port, sizeof(port)), (ssize_t)sizeof(port));
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
  static int fds[200];
  for (int i = 0; i < 200; i++) fds[i] = connect_addr(addr);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  for (int i = 0; i < 200; i++)
    if (fds[i] >= 0) close(fds[i]);
  close(pipefd[0]);
  close(pipefd[1]);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void) {
  /* Setup waits and these tests' sockets: one short GCOLL_TIMEOUT. */
  setenv("GCOLL_TIMEOUT", "20", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_derive_and_tag),
      cmocka_unit_test(test_hello_right_key_only),
      cmocka_unit_test(test_forged_hello_refused),
      cmocka_unit_test(test_flood_of_silent_strangers),
      cmocka_unit_test(test_store_refuses_wrong_key),
      cmocka_unit_test(test_store_survives_flood),
      cmocka_unit_test(test_store_no_busy_loop_at_fd_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
