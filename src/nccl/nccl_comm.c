/* The shim's communicator: its life (wrap, finalize, destroy, abort), its
 * queries, and NCCL's error functions. */
#include <stdlib.h>

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
  nccl_shim_redops_free(comm);
  free(comm->scratch);
  free(comm);
}

/* Every operation completed before its call returned: nothing is left to
 * flush, only new operations to refuse. */
nccl_abi_result_t ncclCommFinalize(struct ncclComm *comm) {
  nccl_abi_result_t rc = nccl_shim_check_comm(comm, "ncclCommFinalize");
  if (rc != gcollSuccess) return rc;
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
 * this comm; the shim's calls touch nothing of comm after gcoll returns (a
 * pre-mul-sum's scratch is read inside gcoll), so freeing it then is safe. */
nccl_abi_result_t ncclCommAbort(struct ncclComm *comm) {
  if (comm == NULL) return gcollSuccess;
  gcollResult_t rc = gcollCommAbort(comm->gcoll);
  comm_free(comm);
  return rc;
}
NCCL_PROFILER_ALIAS(ncclCommAbort);

nccl_abi_result_t ncclCommGetAsyncError(struct ncclComm *comm, nccl_abi_result_t *asyncError) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommGetAsyncError: comm is NULL");
  return gcollCommGetAsyncError(comm->gcoll, asyncError);
}
NCCL_PROFILER_ALIAS(ncclCommGetAsyncError);

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
  case gcollSystemError: return "unhandled system error (a system call failed or a deadline passed)";
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
