/* The NCCL ways into a communicator, on gcoll's: a unique id, whose
 * members use the launcher's plan (GCOLL_PLAN) when they are its ranks and
 * a plan computed for them otherwise (gcollCommInitRank), so any number of
 * communicators, subsets included, coexist in a job; or every rank a
 * thread (ncclCommInitAll). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "nccl/nccl_shim.h"
#include "runtime/comm.h"

nccl_abi_result_t ncclGetVersion(int *version) {
  if (version == NULL) return gcoll_fail(gcollInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_ABI_VERSION_CODE;
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclGetVersion);

nccl_abi_result_t ncclGetUniqueId(nccl_abi_unique_id *uniqueId) {
  _Static_assert(sizeof(nccl_abi_unique_id) == sizeof(gcollUniqueId), "id sizes differ");
  if (uniqueId == NULL) return gcoll_fail(gcollInvalidArgument, "ncclGetUniqueId: id is NULL");
  gcollUniqueId id;
  gcollResult_t rc = gcollGetUniqueId(&id);
  if (rc == gcollSuccess) memcpy(uniqueId, &id, sizeof(id));
  return rc;
}
NCCL_PROFILER_ALIAS(ncclGetUniqueId);

static nccl_abi_result_t init_rank(struct ncclComm **comm, int nranks, nccl_abi_unique_id id,
                                   int rank, const gcollConfig_t *config, const char *what) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", what);
  *comm = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return gcoll_fail(gcollInvalidArgument, "%s: rank %d of %d ranks", what, rank, nranks);
  gcollComm_t g = NULL;
  gcollUniqueId gid;
  memcpy(&gid, &id, sizeof(gid));
  gcollResult_t rc = gcollCommInitRankConfig(&g, nranks, gid, rank, config);
  if (rc != gcollSuccess) return rc;
  return nccl_shim_wrap(comm, g, nccl_cuda_current_device());
}

nccl_abi_result_t ncclCommInitRank(struct ncclComm **comm, int nranks, nccl_abi_unique_id commId,
                                   int rank) {
  return init_rank(comm, nranks, commId, rank, NULL, "ncclCommInitRank");
}
NCCL_PROFILER_ALIAS(ncclCommInitRank);

/* What NCCL checks before trusting a config: it was made by
 * NCCL_CONFIG_INITIALIZER of a release that has ncclConfig_t, and its size
 * covers the fields read here. What gcoll does with the fields:
 * minCTAs/maxCTAs bound the communicator's channels, netName ("IB",
 * "Socket") picks its transport between nodes, commName names it in log
 * lines (to_gcoll_config); cgaClusterSize, splitShare, trafficClass,
 * collnet, CTAPolicy, nvlsCTAs and the rest are accepted and have no
 * effect (gcoll's kernels use no clusters, a split makes its own
 * connections, there is no CollNet or NVLS yet). */
static gcollResult_t check_config(const nccl_abi_config *config, const char *what) {
  if (config->magic != NCCL_ABI_CONFIG_MAGIC)
    return gcoll_fail(gcollInvalidArgument, "%s: config magic 0x%x is not "
                                            "NCCL_CONFIG_INITIALIZER's (0x%x)", what,
                      config->magic, NCCL_ABI_CONFIG_MAGIC);
  if (config->version < NCCL_ABI_CONFIG_MIN_VERSION)
    return gcoll_fail(gcollInvalidArgument, "%s: config version %u is older "
                                            "than ncclConfig_t (%d)", what,
                      config->version, NCCL_ABI_CONFIG_MIN_VERSION);
  size_t need = offsetof(nccl_abi_config, blocking) + sizeof(config->blocking);
  if (config->size < need)
    return gcoll_fail(gcollInvalidArgument,
                      "%s: config size %zu is smaller "
                      "than its fixed fields (%zu)",
                      what, config->size, need);
  int blocking = config->blocking;
  if (blocking != NCCL_ABI_CONFIG_UNDEF_INT && blocking != 0 && blocking != 1)
    return gcoll_fail(gcollInvalidArgument, "%s: blocking %d is not 0 or 1", what,
                      blocking);
  return gcollSuccess;
}

/* The fields of an NCCL config that gcoll honours, those the caller's
 * header has (its size) and set (not NCCL_CONFIG_UNDEF_*). */
static gcollConfig_t to_gcoll_config(const nccl_abi_config *c) {
  gcollConfig_t g = GCOLL_CONFIG_INITIALIZER;
#define HAS(field) (c->size >= offsetof(nccl_abi_config, field) + sizeof(c->field))
  if (HAS(minCTAs) && c->minCTAs != NCCL_ABI_CONFIG_UNDEF_INT && c->minCTAs > 0)
    g.minChannels = c->minCTAs < GCOLL_MAX_CHANNELS ? c->minCTAs : GCOLL_MAX_CHANNELS;
  if (HAS(maxCTAs) && c->maxCTAs != NCCL_ABI_CONFIG_UNDEF_INT && c->maxCTAs > 0)
    g.maxChannels = c->maxCTAs < GCOLL_MAX_CHANNELS ? c->maxCTAs : GCOLL_MAX_CHANNELS;
  if (g.maxChannels > 0 && g.minChannels > g.maxChannels) g.minChannels = g.maxChannels;
  if (HAS(netName) && c->netName != NULL) g.netName = c->netName;
  if (HAS(commName) && c->commName != NULL) g.commName = c->commName;
#undef HAS
  return g;
}

/* blocking = 0 is accepted, but init still blocks: the caller then sees
 * ncclSuccess at once rather than ncclInProgress, which NCCL allows. */
nccl_abi_result_t ncclCommInitRankConfig(struct ncclComm **comm, int nranks,
                                         nccl_abi_unique_id commId, int rank,
                                         nccl_abi_config *config) {
  if (comm != NULL) *comm = NULL;
  gcollConfig_t g = GCOLL_CONFIG_INITIALIZER;
  if (config != NULL) {
    gcollResult_t rc = check_config(config, "ncclCommInitRankConfig");
    if (rc != gcollSuccess) return rc;
    g = to_gcoll_config(config);
  }
  return init_rank(comm, nranks, commId, rank, &g, "ncclCommInitRankConfig");
}
NCCL_PROFILER_ALIAS(ncclCommInitRankConfig);

/* The child gets its plan as any communicator from an id does; config is
 * checked as for init (its sharing hints have nothing to share yet: a
 * child makes its own connections). */
nccl_abi_result_t ncclCommSplit(struct ncclComm *comm, int color, int key,
                                struct ncclComm **newcomm, nccl_abi_config *config) {
  if (newcomm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommSplit: newcomm is NULL");
  *newcomm = NULL;
  gcollResult_t rc = nccl_shim_check_comm(comm, "ncclCommSplit");
  if (rc == gcollSuccess && config != NULL) rc = check_config(config, "ncclCommSplit");
  gcollComm_t g = NULL;
  if (rc == gcollSuccess) rc = gcollCommSplit(comm->gcoll, color, key, &g);
  if (rc != gcollSuccess || g == NULL) return rc;
  return nccl_shim_wrap(newcomm, g, comm->cuda_device);
}
NCCL_PROFILER_ALIAS(ncclCommSplit);

nccl_abi_result_t ncclCommInitAll(struct ncclComm **comms, int ndev, const int *devlist) {
  if (comms == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommInitAll: comms is NULL");
  if (ndev < 1) return gcoll_fail(gcollInvalidArgument, "ncclCommInitAll: ndev %d < 1", ndev);
  for (int i = 0; devlist != NULL && i < ndev; i++)
    if (devlist[i] < 0)
      return gcoll_fail(gcollInvalidArgument, "ncclCommInitAll: devlist[%d] = %d is not a device",
                        i, devlist[i]);
  gcollComm_t *g = calloc((size_t)ndev, sizeof(*g));
  if (g == NULL) return gcoll_fail(gcollSystemError, "ncclCommInitAll: out of memory");
  gcollResult_t rc = gcollCommInitAll(g, ndev, devlist);
  int wrapped = 0;
  while (rc == gcollSuccess && wrapped < ndev) {
    rc = nccl_shim_wrap(&comms[wrapped], g[wrapped], devlist != NULL ? devlist[wrapped] : wrapped);
    if (rc == gcollSuccess) wrapped++;
  }
  if (rc != gcollSuccess) {
    /* All or nothing, as NCCL. A failed wrap destroyed its own gcoll comm. */
    for (int i = 0; i < wrapped; i++) ncclCommDestroy(comms[i]);
    for (int i = wrapped + 1; i < ndev; i++)
      if (g[i] != NULL) gcollCommDestroy(g[i]);
    for (int i = 0; i < ndev; i++) comms[i] = NULL;
  }
  free(g);
  return rc;
}
NCCL_PROFILER_ALIAS(ncclCommInitAll);

/* gcollCommShrink: each survivor computes its new rank (the parent's order
 * without the excluded ranks) and the lowest one's fresh id reaches the
 * others through the parent's bootstrap; excluded ranks, dead or alive, do
 * not call. NCCL_SHRINK_ABORT first stops the parent's calls in progress;
 * the parent then refuses new operations and is still the caller's to
 * destroy. config is checked as for init (blocking = 0 still blocks; the
 * sharing hint has nothing to share: the child makes its own connections). */
nccl_abi_result_t ncclCommShrink(struct ncclComm *comm, int *excludeRanksList,
                                 int excludeRanksCount, struct ncclComm **newcomm,
                                 nccl_abi_config *config, int shrinkFlags) {
  if (newcomm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommShrink: newcomm is NULL");
  *newcomm = NULL;
  gcollResult_t rc = nccl_shim_check_comm(comm, "ncclCommShrink");
  if (rc == gcollSuccess && config != NULL) rc = check_config(config, "ncclCommShrink");
  if (rc == gcollSuccess && shrinkFlags != NCCL_ABI_SHRINK_DEFAULT &&
      shrinkFlags != NCCL_ABI_SHRINK_ABORT)
    rc = gcoll_fail(gcollInvalidArgument, "ncclCommShrink: shrinkFlags %d is not "
                                          "NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)",
                    shrinkFlags);
  gcollComm_t g = NULL;
  if (rc == gcollSuccess)
    rc = gcollCommShrink(comm->gcoll, excludeRanksList, excludeRanksCount, &g,
                         shrinkFlags == NCCL_ABI_SHRINK_ABORT ? GCOLL_SHRINK_ABORT
                                                              : GCOLL_SHRINK_DEFAULT);
  if (rc != gcollSuccess) return rc;
  return nccl_shim_wrap(newcomm, g, comm->cuda_device);
}
NCCL_PROFILER_ALIAS(ncclCommShrink);

/* NCCL spreads its bootstrap over nId roots to speed up very large inits;
 * every rank is given all nId ids, in the same order. gcoll joins every
 * rank through commIds[0]'s store: the ids were made by the root processes
 * NCCL would use, so the first id's store is alive and reachable by every
 * rank like any id's, and its load is one plan agreement (O(nranks) small
 * keys at rank 0, O(1) elsewhere) plus each rank's own connection keys; a
 * second store would only split the same requests. The other ids are not
 * read (their stores close once idle for GCOLL_TIMEOUT). */
nccl_abi_result_t ncclCommInitRankScalable(struct ncclComm **newcomm, int nranks, int myrank,
                                           int nId, nccl_abi_unique_id *commIds,
                                           nccl_abi_config *config) {
  if (newcomm == NULL)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRankScalable: newcomm is NULL");
  *newcomm = NULL;
  if (nId < 1 || (nranks >= 1 && nId > nranks))
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRankScalable: nId %d is not in 1..%d "
                                            "(at most one id per rank)", nId, nranks);
  if (commIds == NULL)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRankScalable: commIds is NULL");
  gcollConfig_t g = GCOLL_CONFIG_INITIALIZER;
  if (config != NULL) {
    gcollResult_t rc = check_config(config, "ncclCommInitRankScalable");
    if (rc != gcollSuccess) return rc;
    g = to_gcoll_config(config);
  }
  return init_rank(newcomm, nranks, commIds[0], myrank, &g, "ncclCommInitRankScalable");
}
NCCL_PROFILER_ALIAS(ncclCommInitRankScalable);
