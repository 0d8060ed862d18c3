/* The host half of NCCL 2.28's device API (nccl_device.h): device
 * communicators, teams, barriers and LL all-to-all resources for kernels
 * that talk to peers themselves. gcoll does not implement device-initiated
 * communication, but programs built against NCCL 2.28 (PyTorch's
 * libtorch_cuda.so among them) reference these functions, and the dynamic
 * loader refuses a library that lacks one before the program runs a line.
 *
 * So: the teams are answered exactly (they are arithmetic on the
 * communicator: the world team is every rank with stride 1; the LSA team,
 * ranks whose memory a kernel may load and store through the device API,
 * is this rank alone, since gcoll maps no peer memory for user kernels;
 * the rail team is then the world), and every call that would create
 * device-API resources fails with ncclInvalidUsage and one line saying so,
 * as NCCL itself answers on hardware without the feature. */
#include <stddef.h>
#include <stdint.h>

#include "nccl/nccl_shim.h"
#include "runtime/comm.h"

/* nccl_device/core.h's struct ncclTeam, returned by value. */
typedef struct {
  int nRanks, rank, stride;
} nccl_abi_team;

struct ncclDevCommRequirements;
struct ncclDevComm;
struct ncclDevResourceRequirements;
struct ncclLsaBarrierHandle;
struct ncclGinBarrierHandle;
struct ncclLLA2AHandle;

static nccl_abi_result_t no_device_api(const char *fn) {
  return gcoll_fail(gcollInvalidUsage,
                    "%s: gcoll does not implement NCCL's device API (device communicators, "
                    "LSA/GIN barriers, LL all-to-all); use the host collectives",
                    fn);
}

static int comm_rank_count(struct ncclComm *comm, int *rank, int *nranks) {
  if (comm == NULL || comm->gcoll == NULL) return -1;
  return gcollCommUserRank(comm->gcoll, rank) == gcollSuccess &&
                 gcollCommCount(comm->gcoll, nranks) == gcollSuccess
             ? 0
             : -1;
}

nccl_abi_team ncclTeamWorld(struct ncclComm *comm) {
  nccl_abi_team t = {0, 0, 1};
  if (comm_rank_count(comm, &t.rank, &t.nRanks) != 0) t.nRanks = t.rank = 0;
  return t;
}

nccl_abi_team ncclTeamLsa(struct ncclComm *comm) {
  nccl_abi_team t = {1, 0, 1};
  (void)comm;
  return t;
}

nccl_abi_team ncclTeamRail(struct ncclComm *comm) { return ncclTeamWorld(comm); }

/* A team's rank r, counted from this rank's place in the team. */
int ncclTeamRankToWorld(struct ncclComm *comm, nccl_abi_team team, int r) {
  int rank, nranks;
  if (comm_rank_count(comm, &rank, &nranks) != 0) return -1;
  return rank + (r - team.rank) * team.stride;
}

int ncclTeamRankToLsa(struct ncclComm *comm, nccl_abi_team team, int r) {
  int world = ncclTeamRankToWorld(comm, team, r), rank, nranks;
  if (world < 0 || comm_rank_count(comm, &rank, &nranks) != 0) return -1;
  return world - rank; /* the LSA team is {this rank}: 0 for it, out of range otherwise */
}

nccl_abi_result_t ncclDevCommCreate(struct ncclComm *comm,
                                    const struct ncclDevCommRequirements *reqs,
                                    struct ncclDevComm *out) {
  (void)comm, (void)reqs, (void)out;
  return no_device_api("ncclDevCommCreate");
}

nccl_abi_result_t ncclDevCommDestroy(struct ncclComm *comm, const struct ncclDevComm *devcomm) {
  (void)comm, (void)devcomm;
  return no_device_api("ncclDevCommDestroy");
}

nccl_abi_result_t ncclLsaBarrierCreateRequirement(nccl_abi_team team, int nbarriers,
                                                  struct ncclLsaBarrierHandle *out,
                                                  struct ncclDevResourceRequirements *req) {
  (void)team, (void)nbarriers, (void)out, (void)req;
  return no_device_api("ncclLsaBarrierCreateRequirement");
}

nccl_abi_result_t ncclGinBarrierCreateRequirement(struct ncclComm *comm, nccl_abi_team team,
                                                  int nbarriers, struct ncclGinBarrierHandle *out,
                                                  struct ncclDevResourceRequirements *req) {
  (void)comm, (void)team, (void)nbarriers, (void)out, (void)req;
  return no_device_api("ncclGinBarrierCreateRequirement");
}

nccl_abi_result_t ncclLLA2ACreateRequirement(int nblocks, int nslots, struct ncclLLA2AHandle *out,
                                             struct ncclDevResourceRequirements *req) {
  (void)nblocks, (void)nslots, (void)out, (void)req;
  return no_device_api("ncclLLA2ACreateRequirement");
}

/* No LL all-to-all resources can be made, so none are needed: 0 slots,
 * and the reason in ncclGetLastError. */
int ncclLLA2ACalcSlots(int max_elts, int max_elt_size) {
  (void)max_elts, (void)max_elt_size;
  no_device_api("ncclLLA2ACalcSlots");
  return 0;
}
