/* NCCL's collectives, send/recv and groups on gcoll's. Buffers and stream go
 * through: gcoll runs collectives on device buffers on its CUDA executor, on
 * the caller's stream; ncclSend/ncclRecv (and ncclAlltoAll, ncclGather,
 * ncclScatter, built on them) on device buffers are queued on the stream and
 * moved by the GPU, or staged by the calling thread when a group mixes host
 * and device memory (comm_p2p.c). The shim refuses what gcoll cannot run
 * (device memory that gcoll's executor cannot reach, fp8) before gcoll sees
 * the call; ops, pre-mul-sum ones included, are gcoll's (nccl_redop.c). A
 * refusal inside a group poisons the group like gcoll's own refusals, so
 * ncclGroupEnd runs none of it. Nothing here touches comm after the gcoll
 * call returns (see ncclCommAbort). */
#include <stdint.h>

#include "kernels/exec.h"
#include "nccl/nccl_shim.h"
#include "runtime/comm.h"

/* Device memory by the driver the program uses that gcoll's CUDA executor
 * cannot run (no executor in this build, or it cannot load that driver):
 * refused rather than touched by host threads. The executor is asked
 * first: what it claims it runs, and device buffers, the common case, then
 * cost it one driver call instead of three. */
static int unreachable_device_memory(const void *buf) {
  const struct gcoll_exec_ops *cuda = gcoll_exec_ops_of(GCOLL_EXEC_CUDA);
  int device = -1;
  if (cuda != NULL && cuda->owns(buf, &device)) return 0;
  return nccl_cuda_is_device_memory(buf);
}

/* Checks shared by every operation on comm; *type is the gcoll type. */
static nccl_abi_result_t prepare(const struct ncclComm *comm, const char *what,
                                 nccl_abi_datatype_t datatype, void *stream, const void *buf1,
                                 const void *buf2, gcollDataType_t *type) {
  nccl_abi_result_t rc = nccl_shim_check_comm(comm, what);
  if (rc != gcollSuccess) return rc;
  (void)stream; /* gcoll checks it goes with device buffers */
  rc = nccl_shim_type(datatype, what, type);
  if (rc != gcollSuccess) return rc;
  const void *bufs[2] = {buf1, buf2};
  const char *names[2] = {"sendbuff", "recvbuff"};
  for (int i = 0; i < 2; i++)
    if (unreachable_device_memory(bufs[i]))
      return gcoll_fail(gcollInvalidUsage, "%s: %s %p is CUDA device memory that gcoll's CUDA "
                                           "executor cannot reach (no executor in this build, or "
                                           "it cannot load the driver)", what, names[i], bufs[i]);
  return gcollSuccess;
}

nccl_abi_result_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                nccl_abi_datatype_t datatype, nccl_abi_redop_t op,
                                struct ncclComm *comm, void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclAllReduce", datatype, stream, sendbuff, recvbuff,
                                 &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollAllReduce(sendbuff, recvbuff, count, type, (gcollRedOp_t)op, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclAllReduce);

nccl_abi_result_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                             nccl_abi_datatype_t datatype, nccl_abi_redop_t op, int root,
                             struct ncclComm *comm, void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclReduce", datatype, stream, sendbuff, recvbuff, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollReduce(sendbuff, recvbuff, count, type, (gcollRedOp_t)op, root, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclReduce);

nccl_abi_result_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                    nccl_abi_datatype_t datatype, nccl_abi_redop_t op,
                                    struct ncclComm *comm, void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclReduceScatter", datatype, stream, sendbuff, recvbuff,
                                 &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollReduceScatter(sendbuff, recvbuff, recvcount, type, (gcollRedOp_t)op, comm->gcoll,
                            stream);
}
NCCL_PROFILER_ALIAS(ncclReduceScatter);

nccl_abi_result_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                nccl_abi_datatype_t datatype, int root, struct ncclComm *comm,
                                void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc =
      prepare(comm, "ncclBroadcast", datatype, stream, sendbuff, recvbuff, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollBroadcast(sendbuff, recvbuff, count, type, root, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclBroadcast);

/* The in-place broadcast of NCCL's first API. */
nccl_abi_result_t ncclBcast(void *buff, size_t count, nccl_abi_datatype_t datatype, int root,
                            struct ncclComm *comm, void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclBcast", datatype, stream, buff, NULL, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollBroadcast(buff, buff, count, type, root, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclBcast);

nccl_abi_result_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                nccl_abi_datatype_t datatype, struct ncclComm *comm,
                                void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc =
      prepare(comm, "ncclAllGather", datatype, stream, sendbuff, recvbuff, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollAllGather(sendbuff, recvbuff, sendcount, type, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclAllGather);

/* NCCL 2.28's all-to-all, gather and scatter: gcoll's, on grouped
 * send/recv (comm_alltoall.c). */
nccl_abi_result_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                               nccl_abi_datatype_t datatype, struct ncclComm *comm,
                               void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclAlltoAll", datatype, stream, sendbuff, recvbuff, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollAlltoAll(sendbuff, recvbuff, count, type, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclAlltoAll);

nccl_abi_result_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                             nccl_abi_datatype_t datatype, int root, struct ncclComm *comm,
                             void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclGather", datatype, stream, sendbuff, recvbuff, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollGather(sendbuff, recvbuff, count, type, root, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclGather);

nccl_abi_result_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                              nccl_abi_datatype_t datatype, int root, struct ncclComm *comm,
                              void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclScatter", datatype, stream, sendbuff, recvbuff, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollScatter(sendbuff, recvbuff, count, type, root, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclScatter);

nccl_abi_result_t ncclSend(const void *sendbuff, size_t count, nccl_abi_datatype_t datatype,
                           int peer, struct ncclComm *comm, void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclSend", datatype, stream, sendbuff, NULL, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollSend(sendbuff, count, type, peer, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclSend);

nccl_abi_result_t ncclRecv(void *recvbuff, size_t count, nccl_abi_datatype_t datatype, int peer,
                           struct ncclComm *comm, void *stream) {
  gcollDataType_t type;
  nccl_abi_result_t rc = prepare(comm, "ncclRecv", datatype, stream, NULL, recvbuff, &type);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  return gcollRecv(recvbuff, count, type, peer, comm->gcoll, stream);
}
NCCL_PROFILER_ALIAS(ncclRecv);

nccl_abi_result_t ncclGroupStart(void) { return gcollGroupStart(); }
NCCL_PROFILER_ALIAS(ncclGroupStart);

nccl_abi_result_t ncclGroupEnd(void) { return gcollGroupEnd(); }
NCCL_PROFILER_ALIAS(ncclGroupEnd);
