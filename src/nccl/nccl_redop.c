/* NCCL's datatypes and reduction ops on gcoll's. Pre-mul-sum ops
 * (ncclRedOpCreatePreMulSum) are gcoll's own (gcollRedOpCreatePreMulSum:
 * the executors scale each input as they read it). */
#include "kernels/reduce.h"
#include "nccl/nccl_shim.h"
#include "runtime/comm.h"


nccl_abi_result_t nccl_shim_type(nccl_abi_datatype_t t, const char *what, gcollDataType_t *out) {
  if (t == NCCL_ABI_FLOAT8E4M3 || t == NCCL_ABI_FLOAT8E5M2)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d (%s) is not supported by gcoll", what,
                      t, t == NCCL_ABI_FLOAT8E4M3 ? "ncclFloat8e4m3" : "ncclFloat8e5m2");
  if (t < 0 || t >= gcollNumTypes)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d is not an ncclDataType_t", what, t);
  *out = (gcollDataType_t)t;
  return gcollSuccess;
}

/* NCCL numbers created ops from ncclNumOps up, as gcoll does from
 * gcollNumOps, and both put device scalars at 0 and host ones at 1, so ops
 * and residences pass through: gcoll keeps the ops and checks each use. */
_Static_assert((int)NCCL_ABI_NUM_OPS == (int)gcollNumOps, "op numbering");
_Static_assert((int)NCCL_ABI_SCALAR_DEVICE == (int)gcollScalarDevice &&
               (int)NCCL_ABI_SCALAR_HOST_IMMEDIATE == (int)gcollScalarHostImmediate,
               "scalar residences");

nccl_abi_result_t ncclRedOpCreatePreMulSum(nccl_abi_redop_t *op, void *scalar,
                                           nccl_abi_datatype_t datatype,
                                           nccl_abi_residence_t residence, struct ncclComm *comm) {
  const char *what = "ncclRedOpCreatePreMulSum";
  nccl_abi_result_t rc = nccl_shim_check_comm(comm, what);
  if (rc != gcollSuccess) return rc;
  gcollDataType_t type;
  rc = nccl_shim_type(datatype, what, &type);
  if (rc != gcollSuccess) return rc;
  if (residence != NCCL_ABI_SCALAR_DEVICE && residence != NCCL_ABI_SCALAR_HOST_IMMEDIATE)
    return gcoll_fail(gcollInvalidArgument, "%s: residence %d is not an ncclScalarResidence_t",
                      what, residence);
  /* A scalar in the program's device memory that gcoll's executor cannot
   * reach would be read by the host (immediate) or never (device). */
  if (scalar != NULL && nccl_cuda_is_device_memory(scalar) &&
      residence == NCCL_ABI_SCALAR_HOST_IMMEDIATE)
    return gcoll_fail(gcollInvalidUsage, "%s: the scalar is in CUDA device memory, but its "
                                         "residence says host", what);
  gcollRedOp_t g_op = gcollSum;
  rc = gcollRedOpCreatePreMulSum(op != NULL ? &g_op : NULL, scalar, type,
                                 (gcollScalarResidence_t)residence, comm->gcoll);
  if (rc == gcollSuccess) *op = (nccl_abi_redop_t)g_op;
  return rc;
}
NCCL_PROFILER_ALIAS(ncclRedOpCreatePreMulSum);

nccl_abi_result_t ncclRedOpDestroy(nccl_abi_redop_t op, struct ncclComm *comm) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclRedOpDestroy: comm is NULL");
  return gcollRedOpDestroy((gcollRedOp_t)op, comm->gcoll);
}
NCCL_PROFILER_ALIAS(ncclRedOpDestroy);
