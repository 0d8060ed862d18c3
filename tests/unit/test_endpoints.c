/* The endpoints file (graph/endpoints.h): the strict reader's one-line
 * refusals (malformed, wrong rank count, wrong job, duplicate rank, bad
 * port, bad host, unknown fields), the check against the step, and the
 * atomic writer's round trip; and the rendezvous mailbox
 * (runtime/endpoint_server.h) that the runtime builds on it: a value pushed
 * over an authenticated connection is taken once, a wrong key is refused,
 * and every wait ends at its deadline. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/endpoints.h"
#include "runtime/auth.h"
#include "runtime/endpoint_server.h"
#include "runtime/net_tcp.h"
#include "runtime/transport.h"

static const char *good =
    "gcoll-endpoints: 1\n"
    "job: 0123456789abcdef\n"
    "ranks: 3\n"
    "endpoints:\n"
    "  - {rank: 1, host: 127.0.0.1, port: 40002}\n"
    "  - {rank: 0, host: '::1', port: 40001}\n"
    "  - {rank: 2, host: 10.1.2.3, port: 65535}\n";

static struct gcoll_endpoints *parse(const char *text, char *err, size_t errlen) {
  err[0] = '\0';
  return gcoll_endpoints_read_mem(text, strlen(text), "ep.yaml", err, errlen);
}

static void test_good(void **state) {
  (void)state;
  char err[512];
  struct gcoll_endpoints *ep = parse(good, err, sizeof(err));
  assert_non_null(ep);
  assert_int_equal(ep->nranks, 3);
  assert_string_equal(ep->job, "0123456789abcdef");
  assert_string_equal(ep->rank[0].host, "::1");
  assert_int_equal(ep->rank[0].port, 40001);
  assert_string_equal(ep->rank[1].host, "127.0.0.1");
  assert_int_equal(ep->rank[2].port, 65535);
  assert_int_equal(gcoll_endpoints_check(ep, 3, "0123456789abcdef", err, sizeof(err)), 0);
  assert_int_equal(gcoll_endpoints_check(ep, 4, NULL, err, sizeof(err)), -1);
  assert_string_equal(err, "endpoints for 3 ranks, but this step has 4");
  assert_int_equal(gcoll_endpoints_check(ep, 3, "fedcba", err, sizeof(err)), -1);
  assert_non_null(strstr(err, "endpoints of another job"));
  gcoll_endpoints_free(ep);
}

/* Each bad file is refused with one line naming the file, line and field. */
static void refused(const char *text, const char *expect) {
  char err[512];
  struct gcoll_endpoints *ep = parse(text, err, sizeof(err));
  if (ep != NULL || strstr(err, expect) == NULL || strchr(err, '\n') != NULL)
    fail_msg("expected a refusal containing '%s', got %s: '%s'", expect,
             ep ? "a table" : "a refusal", err);
}

#define HDR(n) "gcoll-endpoints: 1\njob: ab\nranks: " #n "\nendpoints:\n"

static void test_refusals(void **state) {
  (void)state;
  refused("", "empty endpoints file");
  refused("[", "ep.yaml:");
  refused(HDR(2) "  - {rank: 0, host: 127.0.0.1, port: 1}\n  - {rank: 0, host: 127.0.0.1, port: 2}\n",
          "ep.yaml:6: field 'rank': duplicate rank 0");
  refused(HDR(3) "  - {rank: 0, host: 127.0.0.1, port: 1}\n", "1 entries for 3 ranks");
  refused(HDR(1) "  - {rank: 1, host: 127.0.0.1, port: 1}\n", "field 'rank'");
  refused(HDR(1) "  - {rank: 0, host: 127.0.0.1, port: 0}\n", "field 'port'");
  refused(HDR(1) "  - {rank: 0, host: 127.0.0.1, port: 65536}\n", "field 'port'");
  refused(HDR(1) "  - {rank: 0, host: 127.0.0.1, port: x}\n", "field 'port'");
  refused(HDR(1) "  - {rank: 0, host: node1, port: 5}\n",
          "'node1' is not a numeric IPv4 or IPv6 address");
  refused(HDR(1) "  - {rank: 0, port: 5}\n", "field 'host'");
  refused(HDR(1) "  - {rank: 0, host: 127.0.0.1, port: 5, pid: 7}\n",
          "field 'pid': unknown field");
  refused("gcoll-endpoints: 2\njob: ab\nranks: 1\nendpoints: []\n", "field 'gcoll-endpoints'");
  refused("gcoll-endpoints: 1\njob: AB\nranks: 1\nendpoints: []\n", "field 'job'");
  refused("gcoll-endpoints: 1\njob: ab\nranks: 0\nendpoints: []\n", "field 'ranks'");
  refused("gcoll-endpoints: 1\njob: ab\nranks: 1\nendpoints: {}\n", "field 'endpoints'");
  refused("gcoll-endpoints: 1\njob: ab\nranks: 1\nmore: 1\nendpoints: []\n",
          "field 'more': unknown field");
  refused("gcoll-endpoints: 1\nranks: 1\nendpoints: []\n", "field 'job'");
}

static void test_write_read(void **state) {
  (void)state;
  char dir[] = "/tmp/test-endpoints.XXXXXX", path[96], err[512];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/endpoints.yaml", dir);
  struct gcoll_endpoints *ep = gcoll_endpoints_new(4);
  assert_non_null(ep);
  snprintf(ep->job, sizeof(ep->job), "00ff");
  for (int r = 0; r < 4; r++) {
    snprintf(ep->rank[r].host, sizeof(ep->rank[r].host), r % 2 ? "127.0.0.1" : "::1");
    ep->rank[r].port = (uint16_t)(1000 + r);
  }
  assert_int_equal(gcoll_endpoints_write_file(ep, path, err, sizeof(err)), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0644);
  struct gcoll_endpoints *back = gcoll_endpoints_read_file(path, err, sizeof(err));
  assert_non_null(back);
  assert_int_equal(back->nranks, 4);
  assert_string_equal(back->job, "00ff");
  for (int r = 0; r < 4; r++) {
    assert_string_equal(back->rank[r].host, ep->rank[r].host);
    assert_int_equal(back->rank[r].port, ep->rank[r].port);
  }
  gcoll_endpoints_free(back);
  /* Nothing unreadable is written, and a refused write leaves the old file. */
  ep->rank[2].port = 0;
  assert_int_equal(gcoll_endpoints_write_file(ep, path, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "refusing to write rank 2"));
  back = gcoll_endpoints_read_file(path, err, sizeof(err));
  assert_non_null(back);
  assert_int_equal(back->rank[2].port, 1002);
  gcoll_endpoints_free(back);
  gcoll_endpoints_free(ep);
  unlink(path);
  assert_int_equal(rmdir(dir), 0); /* no temporary left behind */
}

/* The mailbox over a real listener: rank 1 of 2 pushes to rank 0 (this
 * process serves rank 0), as bootstrap_endpoints.c does. */
static void test_mailbox(void **state) {
  (void)state;
  char err[512];
  struct gcoll_tcp_endpoint ep = {.family = AF_INET, .ip = {127, 0, 0, 1}};
  int lfd = gcoll_tcp_listen(&ep, err, sizeof(err));
  assert_true(lfd >= 0);
  struct gcoll_auth_secret secret, wrong;
  assert_int_equal(gcoll_auth_derive("abcd", 4, GCOLL_AUTH_LABEL_ENDPOINTS, &secret, err,
                                     sizeof(err)), 0);
  assert_int_equal(gcoll_auth_derive("abce", 4, GCOLL_AUTH_LABEL_ENDPOINTS, &wrong, err,
                                     sizeof(err)), 0);
  assert_int_equal(gcoll_epsrv_start(lfd, &secret, 0, 2, err, sizeof(err)), 0);
  assert_int_equal(gcoll_epsrv_start(lfd, &secret, 0, 2, err, sizeof(err)), 0); /* idempotent */
  assert_int_equal(gcoll_epsrv_start(lfd, &secret, 1, 2, err, sizeof(err)), -1);
  unsigned char hello[GCOLL_EPSRV_HELLO_BYTES] = {0}, answer[GCOLL_TCP_HDR_BYTES];
  gcoll_put_be32(hello, 0x47455048u);
  gcoll_put_be16(hello + 4, 1);
  gcoll_put_be32(hello + 8, 1);
  gcoll_put_be32(hello + 12, 0);
  gcoll_put_be32(hello + 16, 7);
  uint64_t deadline = gcoll_transport_now_ms() + 5000;
  /* Someone without the job key is refused at once. */
  int bad = gcoll_tcp_hello_connect(&ep, &wrong, GCOLL_EPSRV_PURPOSE, hello, sizeof(hello),
                                    answer, deadline, err, sizeof(err));
  assert_int_equal(bad, -1);
  assert_non_null(strstr(err, "refused our hello"));
  int fd = gcoll_tcp_hello_connect(&ep, &secret, GCOLL_EPSRV_PURPOSE, hello, sizeof(hello),
                                   answer, deadline, err, sizeof(err));
  assert_true(fd >= 0);
  unsigned char msg[64];
  gcoll_put_be16(msg, 5);
  gcoll_put_be16(msg + 2, 0);
  gcoll_put_be32(msg + 4, 3);
  memcpy(msg + 8, "k/1/0abc", 8);
  assert_int_equal(gcoll_tcp_send_all(fd, msg, 16, deadline), 0);
  char value[8];
  size_t len = 0;
  /* Another generation's or another sender's value is not this one. */
  assert_int_equal(gcoll_epsrv_take(8, 1, "k/1/0", value, sizeof(value), &len,
                                    gcoll_transport_now_ms() + 200, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "sent no 'k/1/0' before the deadline"));
  assert_int_equal(gcoll_epsrv_take(7, 0, "k/1/0", value, sizeof(value), &len,
                                    gcoll_transport_now_ms() + 100, err, sizeof(err)), -1);
  assert_int_equal(gcoll_epsrv_take(7, 1, "k/1/0", value, sizeof(value), &len, deadline, err,
                                    sizeof(err)), 0);
  assert_int_equal(len, 3);
  assert_memory_equal(value, "abc", 3);
  /* Taken once. */
  assert_int_equal(gcoll_epsrv_take(7, 1, "k/1/0", value, sizeof(value), &len,
                                    gcoll_transport_now_ms(), err, sizeof(err)), -1);
  /* A message to oneself, and forgetting a generation's leftovers. */
  assert_int_equal(gcoll_epsrv_deliver(9, 0, "self", "x", 1, err, sizeof(err)), 0);
  assert_int_equal(gcoll_epsrv_deliver(9, 0, "self", "x", 1, err, sizeof(err)), -1);
  gcoll_epsrv_forget(9);
  assert_int_equal(gcoll_epsrv_take(9, 0, "self", value, sizeof(value), &len,
                                    gcoll_transport_now_ms(), err, sizeof(err)), -1);
  close(fd);
}

static void test_job_id(void **state) {
  (void)state;
  char a[33], b[33], err[256];
  assert_int_equal(gcoll_endpoints_job_id("00112233", a, err, sizeof(err)), 0);
  assert_int_equal(gcoll_endpoints_job_id("00112234", b, err, sizeof(err)), 0);
  assert_int_equal(strlen(a), 32);
  assert_int_equal(strspn(a, "0123456789abcdef"), 32);
  assert_string_not_equal(a, b);
  assert_null(strstr(a, "00112233")); /* the key itself does not show */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good),       cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_write_read), cmocka_unit_test(test_mailbox),
      cmocka_unit_test(test_job_id),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
