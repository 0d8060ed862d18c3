/* libFuzzer target for the topology reader (gcoll_topo_read_mem).
 *
 * Besides "never crash", a topology the reader accepts must satisfy what
 * the rest of the library relies on without re-checking: index lists and
 * link peers in range, names unique, and a write/read round trip that keeps
 * the content hash. Violations abort so the fuzzer records them. Built with
 * replay_main.c it is the `make check` corpus replayer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/topo.h"
#include "topo_invariants.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Larger inputs only make each run slower without reaching new code: the
 * reader's limits (128 devices, 24 links each) are hit far below this. */
#define FUZZ_MAX_INPUT (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512];
  if (size > FUZZ_MAX_INPUT) return 0;
  err[0] = '\0';
  struct gcoll_topo *t = gcoll_topo_read_mem((const char *)data, size, "fuzz", err, sizeof(err));
  if (t == NULL) {
    if (err[0] == '\0') broken("error message", "reader failed without saying why");
    return 0;
  }
  check_accepted(t);
  gcoll_topo_free(t);
  return 0;
}
