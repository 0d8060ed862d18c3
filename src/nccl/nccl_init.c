/* The NCCL ways into a communicator, on gcoll's: a launcher's plan when
 * there is one (GCOLL_PLAN), else a plan computed in process from a unique
 * id, or every rank a thread (ncclCommInitAll). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/nccl_shim.h"
#include "runtime/comm.h"

/* The id under a launcher: recognisable, and holding no store address, so a
 * rank that gets it without GCOLL_PLAN is told so by gcollCommInitRank. */
#define PLAN_ID_MARK "gcoll-plan (the job's plan is in GCOLL_PLAN; this id is not used)"

static int under_launcher(void) {
  const char *plan = getenv("GCOLL_PLAN");
  return plan != NULL && *plan != '\0';
}

nccl_abi_result_t ncclGetVersion(int *version) {
  if (version == NULL) return gcoll_fail(gcollInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_ABI_VERSION_CODE;
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclGetVersion);

nccl_abi_result_t ncclGetUniqueId(nccl_abi_unique_id *uniqueId) {
  _Static_assert(sizeof(nccl_abi_unique_id) == sizeof(gcollUniqueId), "id sizes differ");
  if (uniqueId == NULL) return gcoll_fail(gcollInvalidArgument, "ncclGetUniqueId: id is NULL");
  if (under_launcher()) {
    /* The launcher already hosts the job's store: starting another would
     * only leave a thread serving nobody until GCOLL_TIMEOUT. */
    memset(uniqueId, 0, sizeof(*uniqueId));
    snprintf(uniqueId->internal, sizeof(uniqueId->internal), "%s", PLAN_ID_MARK);
    return gcollSuccess;
  }
  gcollUniqueId id;
  gcollResult_t rc = gcollGetUniqueId(&id);
  if (rc == gcollSuccess) memcpy(uniqueId, &id, sizeof(id));
  return rc;
}
NCCL_PROFILER_ALIAS(ncclGetUniqueId);

/* An integer environment variable the launcher set; 0 when unset. */
static int env_rank_value(const char *name, long *value) {
  const char *s = getenv(name);
  if (s == NULL || *s == '\0') return 0;
  char *end;
  errno = 0;
  *value = strtol(s, &end, 10);
  return *end == '\0' && errno == 0 ? 1 : -1;
}

/* The launcher's job must be the one the caller describes: a rank that
 * joined the wrong slot would leave its peers waiting for GCOLL_TIMEOUT. */
static gcollResult_t check_launcher_job(int nranks, int rank) {
  long v;
  int set = env_rank_value("GCOLL_RANK", &v);
  if (set < 0) return gcoll_fail(gcollInvalidArgument, "ncclCommInitRank: GCOLL_RANK is not a number");
  if (set && v != rank)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRank: rank %d, but the launcher started "
                                            "this process as rank %ld (GCOLL_RANK)", rank, v);
  set = env_rank_value("GCOLL_NRANKS", &v);
  if (set < 0)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRank: GCOLL_NRANKS is not a number");
  if (set && v != nranks)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRank: %d ranks, but the launcher's job "
                                            "has %ld (GCOLL_NRANKS)", nranks, v);
  return gcollSuccess;
}

static gcollResult_t init_from_plan(gcollComm_t *g, int nranks, int rank) {
  gcollResult_t rc = check_launcher_job(nranks, rank);
  if (rc != gcollSuccess) return rc;
  /* -1: the rank comes from GCOLL_RANK or the bootstrap (PMI2), checked
   * against the caller's below, as is the plan's size. */
  rc = gcollCommInitFromPlan(g, NULL, -1);
  if (rc != gcollSuccess) return rc;
  int plan_rank = -1, plan_nranks = -1;
  gcollCommUserRank(*g, &plan_rank);
  gcollCommCount(*g, &plan_nranks);
  if (plan_rank == rank && plan_nranks == nranks) return gcollSuccess;
  gcollCommDestroy(*g);
  *g = NULL;
  return gcoll_fail(gcollInvalidArgument, "ncclCommInitRank: rank %d of %d ranks, but the plan "
                                          "(GCOLL_PLAN) makes this process rank %d of %d",
                    rank, nranks, plan_rank, plan_nranks);
}

static nccl_abi_result_t init_rank(struct ncclComm **comm, int nranks, nccl_abi_unique_id id,
                                   int rank) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommInitRank: comm is NULL");
  *comm = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRank: rank %d of %d ranks", rank, nranks);
  gcollComm_t g = NULL;
  gcollResult_t rc;
  if (under_launcher()) {
    rc = init_from_plan(&g, nranks, rank);
  } else {
    gcollUniqueId gid;
    memcpy(&gid, &id, sizeof(gid));
    rc = gcollCommInitRank(&g, nranks, gid, rank);
  }
  if (rc != gcollSuccess) return rc;
  return nccl_shim_wrap(comm, g, nccl_cuda_current_device());
}

nccl_abi_result_t ncclCommInitRank(struct ncclComm **comm, int nranks, nccl_abi_unique_id commId,
                                   int rank) {
  return init_rank(comm, nranks, commId, rank);
}
NCCL_PROFILER_ALIAS(ncclCommInitRank);

/* What NCCL checks before trusting a config: it was made by
 * NCCL_CONFIG_INITIALIZER of a release that has ncclConfig_t, and its size
 * covers the fields read here. Attributes that tune CUDA execution (CTAs,
 * NVLS, collnet, ...) have no meaning on the host and are ignored. */
static gcollResult_t check_config(const nccl_abi_config *config) {
  if (config->magic != NCCL_ABI_CONFIG_MAGIC)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRankConfig: config magic 0x%x is not "
                                            "NCCL_CONFIG_INITIALIZER's (0x%x)",
                      config->magic, NCCL_ABI_CONFIG_MAGIC);
  if (config->version < NCCL_ABI_CONFIG_MIN_VERSION)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRankConfig: config version %u is older "
                                            "than ncclConfig_t (%d)",
                      config->version, NCCL_ABI_CONFIG_MIN_VERSION);
  size_t need = offsetof(nccl_abi_config, blocking) + sizeof(config->blocking);
  if (config->size < need)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRankConfig: config size %zu is smaller "
                                            "than its fixed fields (%zu)", config->size, need);
  int blocking = config->blocking;
  if (blocking != NCCL_ABI_CONFIG_UNDEF_INT && blocking != 0 && blocking != 1)
    return gcoll_fail(gcollInvalidArgument, "ncclCommInitRankConfig: blocking %d is not 0 or 1",
                      blocking);
  return gcollSuccess;
}

/* blocking = 0 is accepted, but init still blocks: the caller then sees
 * ncclSuccess at once rather than ncclInProgress, which NCCL allows. */
nccl_abi_result_t ncclCommInitRankConfig(struct ncclComm **comm, int nranks,
                                         nccl_abi_unique_id commId, int rank,
                                         nccl_abi_config *config) {
  if (comm != NULL) *comm = NULL;
  if (config != NULL) {
    gcollResult_t rc = check_config(config);
    if (rc != gcollSuccess) return rc;
  }
  return init_rank(comm, nranks, commId, rank);
}
NCCL_PROFILER_ALIAS(ncclCommInitRankConfig);

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
