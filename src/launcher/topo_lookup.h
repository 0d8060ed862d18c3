/* Topology name lookup shared by the launcher tools (gcoll-plan, gcollrun). */
#ifndef GCOLL_LAUNCHER_TOPO_LOOKUP_H
#define GCOLL_LAUNCHER_TOPO_LOOKUP_H

#include <stddef.h>

#include "graph/topo.h"

/* Resolves a topology argument: an existing path is used as is; a bare name
 * ("dgx-h100" or "dgx-h100.yaml") is searched in $GCOLL_TOPO_DIR, then the
 * installed directory, then the source tree's etc/topologies. Returns 0 with
 * the path in out, or -1 with a one-line reason listing where it looked. */
int cli_resolve_topo(const char *arg, char *out, size_t outlen, char *err,
                     size_t errlen);
/* Reads and resolves a topology and computes its paths. */
struct gcoll_topo *cli_load_topo(const char *arg, char *err, size_t errlen);

#endif
