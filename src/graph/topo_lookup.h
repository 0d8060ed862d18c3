/* Topology name lookup: how "cpu-only" becomes a file, the same for
 * gcoll-plan, gcollrun and the runtime's in-process plans. */
#ifndef GCOLL_GRAPH_TOPO_LOOKUP_H
#define GCOLL_GRAPH_TOPO_LOOKUP_H

#include <stddef.h>

#include "graph/topo.h"

/* Resolves a topology argument: an existing path is used as is; a bare name
 * ("dgx-h100" or "dgx-h100.yaml") is searched in $GCOLL_TOPO_DIR, then the
 * installed directory, then the source tree's etc/topologies. Returns 0 with
 * the path in out, or -1 with a one-line reason listing where it looked. */
int gcoll_topo_resolve_name(const char *arg, char *out, size_t outlen, char *err,
                     size_t errlen);
/* Reads and resolves a topology and computes its paths. */
struct gcoll_topo *gcoll_topo_load_name(const char *arg, char *err, size_t errlen);

/* This node's topology: detection, merged (gcoll_topo_merge, GPUs matched
 * by bus id) with the topology file `file` when it is not NULL (an NCCL
 * override or any topology file). A file that cannot be read or does not
 * match is an error, never skipped. info (may be NULL) gets one line: what
 * was detected, or which file was merged and what came from each side. */
struct gcoll_topo *gcoll_topo_detect_merged(const char *file, char *info, size_t infolen,
                                            char *err, size_t errlen);
/* Offline: the topology `file_arg` merged with the base `base_arg` (each a
 * file or a name, as gcoll_topo_load_name takes them), GPUs matched by bus
 * id, or in order when the two share none (a reference base). */
struct gcoll_topo *gcoll_topo_load_merged(const char *file_arg, const char *base_arg,
                                          char *info, size_t infolen, char *err, size_t errlen);

#endif
