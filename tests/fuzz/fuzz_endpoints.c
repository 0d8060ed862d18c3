/* libFuzzer target for the endpoints file reader (graph/endpoints.h).
 *
 * Beyond "never crash": a file the reader accepts must hold every rank once
 * with a numeric host and a port in 1..65535, must write (atomically, to a
 * temporary directory) and read back to the same table, and must pass the
 * check against its own step and fail it against any other rank count.
 * Violations abort so the fuzzer records them. Built with replay_main.c it
 * is the `make check` corpus replayer. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/endpoints.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT (1u << 20)

static void broken(const char *what) {
  fprintf(stderr, "fuzz_endpoints: invariant broken: %s\n", what);
  abort();
}

static void check_table(const struct gcoll_endpoints *ep) {
  unsigned char buf[16];
  if (ep->nranks < 1 || ep->rank == NULL) broken("rank count");
  if (memchr(ep->job, '\0', sizeof(ep->job)) == NULL || ep->job[0] == '\0') broken("job");
  for (int r = 0; r < ep->nranks; r++) {
    const struct gcoll_endpoint *e = &ep->rank[r];
    if (memchr(e->host, '\0', sizeof(e->host)) == NULL) broken("host not NUL-terminated");
    if (inet_pton(AF_INET, e->host, buf) != 1 && inet_pton(AF_INET6, e->host, buf) != 1)
      broken("host not numeric");
    if (e->port == 0) broken("port 0 (a rank missing)");
  }
}

static void round_trip(const struct gcoll_endpoints *ep) {
  char dir[] = "/tmp/fuzz-endpoints.XXXXXX", path[64], err[512];
  if (mkdtemp(dir) == NULL) return;
  snprintf(path, sizeof(path), "%s/endpoints.yaml", dir);
  if (gcoll_endpoints_write_file(ep, path, err, sizeof(err)) != 0) broken(err);
  struct gcoll_endpoints *back = gcoll_endpoints_read_file(path, err, sizeof(err));
  if (back == NULL) broken(err);
  if (back->nranks != ep->nranks || strcmp(back->job, ep->job) != 0) broken("round trip header");
  for (int r = 0; r < ep->nranks; r++)
    if (strcmp(back->rank[r].host, ep->rank[r].host) != 0 || back->rank[r].port != ep->rank[r].port)
      broken("round trip entry");
  gcoll_endpoints_free(back);
  unlink(path);
  rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MAX_INPUT) return 0;
  char err[512];
  struct gcoll_endpoints *ep =
      gcoll_endpoints_read_mem((const char *)data, size, "fuzz", err, sizeof(err));
  if (ep == NULL) {
    if (err[0] == '\0' || strchr(err, '\n') != NULL) broken("refusal without a one-line reason");
    return 0;
  }
  check_table(ep);
  if (gcoll_endpoints_check(ep, ep->nranks, ep->job, err, sizeof(err)) != 0)
    broken("a file does not match its own step");
  if (gcoll_endpoints_check(ep, ep->nranks + 1, NULL, err, sizeof(err)) == 0)
    broken("a file matches another rank count");
  /* Writing costs an fsync: only for small tables. */
  if (ep->nranks <= 64) round_trip(ep);
  gcoll_endpoints_free(ep);
  return 0;
}
