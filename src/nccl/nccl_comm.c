/* The shim's communicator: its life (wrap, finalize, revoke, destroy,
 * abort), its queries, NCCL's error functions, and ncclGroupSimulateEnd. */
#include <stdlib.h>
#include <string.h>

#include "nccl/nccl_shim.h"
#include "runtime/comm.h"

nccl_abi_result_t nccl_shim_wrap(struct ncclComm **out, gcollComm_t g, int cuda_device) {
  struct ncclComm *comm = calloc(1, sizeof(*comm));
  if (comm == NULL) {
    gcollCommDestroy(g);
    return gcoll_fail(gcollSystemError, "out of memory for an NCCL communicator");
  }
  comm->gcoll = g;
  comm->cuda_device = cuda_device;
  *out = comm;
  return gcollSuccess;
}

nccl_abi_result_t nccl_shim_check_comm(const struct ncclComm *comm, const char *what) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", what);
  if (comm->finalized)
    return gcoll_fail(gcollInvalidUsage, "%s: the communicator was finalized", what);
  return gcollSuccess;
}

static void comm_free(struct ncclComm *comm) {
  /* Windows still registered go with their communicator, as in NCCL. */
  while (comm->windows != NULL) {
    struct ncclWindow_vidmem *w = comm->windows;
    comm->windows = w->next;
    w->magic = 0;
    free(w);
  }
  free(comm);
}

/* Every operation completed before its call returned: nothing is left to
 * flush, only new operations to refuse. */
nccl_abi_result_t ncclCommFinalize(struct ncclComm *comm) {
  nccl_abi_result_t rc = nccl_shim_check_comm(comm, "ncclCommFinalize");
  if (rc != gcollSuccess) return rc;
  if (comm->revoked)   /* nccl.h: "Calling ncclCommFinalize after revoke is invalid" */
    return gcoll_fail(gcollInvalidArgument, "ncclCommFinalize: the communicator was revoked");
  comm->finalized = 1;
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclCommFinalize);

nccl_abi_result_t ncclCommDestroy(struct ncclComm *comm) {
  if (comm == NULL) return gcollSuccess;   /* as NCCL */
  gcollResult_t rc = gcollCommDestroy(comm->gcoll);
  comm_free(comm);
  return rc;
}
NCCL_PROFILER_ALIAS(ncclCommDestroy);

/* gcollCommAbort returns once no call of another thread is inside gcoll on
 * this comm; the shim's calls touch nothing of comm after gcoll returns, so
 * freeing it then is safe. */
nccl_abi_result_t ncclCommAbort(struct ncclComm *comm) {
  if (comm == NULL) return gcollSuccess;
  gcollResult_t rc = gcollCommAbort(comm->gcoll);
  comm_free(comm);
  return rc;
}
NCCL_PROFILER_ALIAS(ncclCommAbort);

/* NCCL 2.28: "ncclCommRevoke ... marks communicator state as ncclInProgress.
 * The state will change to ncclSuccess when the communicator is quiescent";
 * gcollCommRevoke returns quiescent, so a revoke's own mark reads as
 * success. A peer's death (gcollRemoteError) is still reported. */
nccl_abi_result_t ncclCommGetAsyncError(struct ncclComm *comm, nccl_abi_result_t *asyncError) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommGetAsyncError: comm is NULL");
  gcollResult_t rc = gcollCommGetAsyncError(comm->gcoll, asyncError);
  if (rc == gcollSuccess && comm->revoked && *asyncError == gcollInvalidUsage)
    *asyncError = gcollSuccess;
  return rc;
}
NCCL_PROFILER_ALIAS(ncclCommGetAsyncError);

/* As NCCL: local, and a NULL comm is success, as for destroy (NCCL 2.31's
 * behaviour as observed; 2.28's header does not say). Calls
 * running on comm in other threads return with an error, later ones are
 * refused (ncclInvalidUsage, or ncclRemoteError once a peer died); comm
 * stays valid for ncclCommShrink and ncclCommDestroy. ncclCommSplit of a
 * revoked comm is refused by gcollCommSplit (NCCL allows it). */
nccl_abi_result_t ncclCommRevoke(struct ncclComm *comm, int revokeFlags) {
  if (comm == NULL) return gcollSuccess;
  if (revokeFlags != NCCL_ABI_REVOKE_DEFAULT)
    return gcoll_fail(gcollInvalidArgument, "ncclCommRevoke: revokeFlags %d must be "
                                            "NCCL_REVOKE_DEFAULT (0)", revokeFlags);
  if (comm->revoked)
    return gcoll_fail(gcollInvalidArgument, "ncclCommRevoke: the communicator was revoked already");
  gcollResult_t rc = gcollCommRevoke(comm->gcoll);
  if (rc == gcollSuccess) comm->revoked = 1;
  return rc;
}
NCCL_PROFILER_ALIAS(ncclCommRevoke);

nccl_abi_result_t ncclCommCount(struct ncclComm *const comm, int *count) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommCount: comm is NULL");
  return gcollCommCount(comm->gcoll, count);
}
NCCL_PROFILER_ALIAS(ncclCommCount);

nccl_abi_result_t ncclCommUserRank(struct ncclComm *const comm, int *rank) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommUserRank: comm is NULL");
  return gcollCommUserRank(comm->gcoll, rank);
}
NCCL_PROFILER_ALIAS(ncclCommUserRank);

nccl_abi_result_t ncclCommCuDevice(struct ncclComm *const comm, int *device) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommCuDevice: comm is NULL");
  if (device == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = comm->cuda_device;
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclCommCuDevice);

const char *ncclGetErrorString(nccl_abi_result_t result) {
  switch ((int)result) {
  case gcollSuccess: return "no error";
  case gcollUnhandledCudaError: return "unhandled cuda error";
  case gcollSystemError:
    return "unhandled system error (a system call failed or a deadline passed)";
  case gcollInternalError: return "internal error in gcoll's NCCL library";
  case gcollInvalidArgument: return "invalid argument";
  case gcollInvalidUsage: return "invalid usage (wrong call order, a stream or a device buffer)";
  case gcollRemoteError: return "remote process exited or there was a network error";
  case gcollInProgress: return "operation in progress";
  default: return "unknown result code";
  }
}
NCCL_PROFILER_ALIAS(ncclGetErrorString);

/* Per thread, like gcoll's (comm is not needed, and may be a failed init's
 * NULL). */
const char *ncclGetLastError(struct ncclComm *comm) {
  (void)comm;
  return gcollGetLastError(NULL);
}
NCCL_PROFILER_ALIAS(ncclGetLastError);

/* Logging follows GCOLL_DEBUG, or NCCL_DEBUG, read from the environment at
 * every log line: a changed variable already counts, nothing is cached to
 * reload (nccl.conf files are read once per process, as NCCL reads them). */
void ncclResetDebugInit(void) {}
NCCL_PROFILER_ALIAS(ncclResetDebugInit);

/* As NCCL's: closes the group, and the outermost call drops its operations
 * without running them (a NULL simInfo ends the group for real, as NCCL's
 * code does). NCCL puts its tuning model's time in estimatedTime; gcoll's
 * model needs the plan's per-channel bandwidth, which a communicator does
 * not keep (its rank view has only the chosen algorithm, protocol and
 * channels), so estimatedTime is NCCL_UNDEF_FLOAT, the initializer's "not
 * estimated", which NCCL also leaves for a group without collectives. */
nccl_abi_result_t ncclGroupSimulateEnd(nccl_abi_sim_info *simInfo) {
  if (simInfo == NULL) return gcollGroupEnd();
  if (gcoll_group_depth() == 0)
    return gcoll_fail(gcollInvalidUsage, "ncclGroupSimulateEnd: not in a group (no "
                                         "ncclGroupStart)");
  if (gcoll_group_depth() > 1) return gcoll_group_end_unrun();
  /* The group's error first, then the struct, as NCCL; both drop the group. */
  gcollResult_t rc = gcoll_group_end_unrun();
  if (rc != gcollSuccess) return rc;
  /* A caller's older struct is shorter: only its own bytes are read and written. */
  nccl_abi_sim_info info;
  size_t size;
  memset(&info, 0, sizeof(info));
  memcpy(&size, &simInfo->size, sizeof(size));
  if (size > sizeof(info)) size = sizeof(info);
  memcpy(&info, simInfo, size);
  if (info.magic != NCCL_ABI_SIM_INFO_MAGIC)
    return gcoll_fail(gcollInvalidArgument, "ncclGroupSimulateEnd: simInfo magic 0x%x is not "
                                            "NCCL_SIM_INFO_INITIALIZER's (0x%x)",
                      info.magic, NCCL_ABI_SIM_INFO_MAGIC);
  info.estimatedTime = NCCL_ABI_UNDEF_FLOAT;
  memcpy(simInfo, &info, size);
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclGroupSimulateEnd);
