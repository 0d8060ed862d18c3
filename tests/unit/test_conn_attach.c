/* The sender's side of connecting (gcoll_comm_conn_attach) when the
 * receiver's published address names a transport this rank never started:
 * the case of a receiver with an RDMA device and a sender without one, which
 * no machine without a device can produce end to end. It must fail in one
 * line that suggests GCOLL_TRANSPORT=net/socket, and touch nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/comm.h"

static void expect_one_line(const char *err, const char *needle) {
  assert_non_null(err);
  assert_null(strchr(err, '\n'));
  if (strstr(err, needle) == NULL) {
    fprintf(stderr, "error '%s' does not mention '%s'\n", err, needle);
    fail();
  }
}

/* A communicator that started no transport at all: every attach must be
 * refused before any transport function runs (they would dereference the
 * missing instance). */
static struct gcollComm *bare_comm(void) {
  struct gcollComm *comm = calloc(1, sizeof(*comm));
  assert_non_null(comm);
  comm->rank = 1;
  comm->nranks = 4;
  return comm;
}

static void test_ib_address_without_ib(void **state) {
  (void)state;
  struct gcollComm *comm = bare_comm();
  unsigned char value[1 + 96];
  memset(value, 0xab, sizeof(value));
  value[0] = GCOLL_TRANSPORT_IB;
  struct gcoll_conn c = {0};
  assert_int_equal(gcoll_comm_conn_attach(comm, 3, 0, value, sizeof(value), &c, UINT64_MAX),
                   gcollRemoteError);
  const char *err = gcollGetLastError(NULL);
  expect_one_line(err, "rank 3 receives over net/ib");
  expect_one_line(err, "GCOLL_TRANSPORT=net/socket");
  assert_null(c.ops);
  assert_null(c.fifo);
  assert_int_equal(comm->has_net, 0);
  free(comm);
}

static void test_malformed_addresses(void **state) {
  (void)state;
  struct gcollComm *comm = bare_comm();
  unsigned char value[8] = {GCOLL_NTRANSPORTS};
  struct gcoll_conn c = {0};
  assert_int_equal(gcoll_comm_conn_attach(comm, 2, 0, value, sizeof(value), &c, UINT64_MAX),
                   gcollRemoteError);
  expect_one_line(gcollGetLastError(NULL), "rank 2 published a malformed address");
  assert_int_equal(gcoll_comm_conn_attach(comm, 2, 0, value, 0, &c, UINT64_MAX),
                   gcollRemoteError);
  expect_one_line(gcollGetLastError(NULL), "rank 2 published a malformed address");
  assert_null(c.ops);
  free(comm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ib_address_without_ib),
      cmocka_unit_test(test_malformed_addresses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
