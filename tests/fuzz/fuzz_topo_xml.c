/* libFuzzer target for the NCCL topology XML reader
 * (gcoll_topo_read_nccl_xml_mem, libxml2 underneath).
 *
 * Never crash, never leak, fail with one line naming the input, and what it
 * accepts satisfies the same invariants as the YAML reader's topologies,
 * including the XML -> YAML -> same hash round trip, and its NCCL XML
 * export reads back with the same hash (topo_invariants.h).
 * Built with replay_main.c it is the `make check` corpus replayer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/topo.h"
#include "topo_invariants.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[1024];
  /* Warnings (an ignored NVLink to itself) go to stderr, one line each;
   * stderr stays open for the sanitizers' reports. */
  if (size > FUZZ_MAX_INPUT) return 0;
  err[0] = '\0';
  struct gcoll_topo *t =
      gcoll_topo_read_nccl_xml_mem((const char *)data, size, "fuzz.xml", err, sizeof(err));
  if (t == NULL) {
    if (err[0] == '\0') broken("error message", "reader failed without saying why");
    if (strncmp(err, "fuzz.xml:", 9) != 0 || strchr(err, '\n') != NULL)
      broken("error message", "not one line starting with the input's name");
    return 0;
  }
  check_accepted(t);
  check_xml_round_trip(t);
  gcoll_topo_free(t);
  return 0;
}
