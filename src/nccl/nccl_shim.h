/* libnccl.so.2 on gcoll: NCCL's 2.x API with NCCL's ABI, run by gcoll on
 * host memory. A program built against NVIDIA's nccl.h (2.28.9 here) runs on
 * gcoll unchanged when this library is found first (it is installed under
 * $(pkglibdir), so it never shadows a real NCCL in $(libdir)).
 *
 * The shim does not include nccl.h, so it builds without CUDA: the few ABI
 * types are defined here under nccl_abi_* names with NCCL's exact values and
 * layouts. tests/nccl/nccl_abi_layout.c compiles this header against the
 * real nccl.h (NCCL_SHIM_CHECK_AGAINST_NCCL_H): static assertions check the
 * values and layouts, and the prototypes below, then spelled with nccl.h's
 * types, must be the same declarations as nccl.h's.
 *
 * The mapping:
 *  - ncclComm_t is a struct ncclComm (below) around a gcollComm_t.
 *  - ncclUniqueId carries gcollUniqueId unchanged (both 128 bytes). Under a
 *    launcher (GCOLL_PLAN set) ncclGetUniqueId starts no store: the id is not
 *    needed then.
 *  - ncclCommInitRank: with GCOLL_PLAN set, gcollCommInitFromPlan (nranks and
 *    rank must match the job: GCOLL_NRANKS/GCOLL_RANK, then the plan);
 *    otherwise gcollCommInitRank, which computes a plan in process.
 *  - ncclCommInitRankConfig validates the config like NCCL (magic, version,
 *    size, blocking); blocking = 0 is accepted but init still blocks.
 *  - No CUDA executor in this build: collectives and send/recv need
 *    stream == NULL and host buffers (memory the CUDA driver, if present,
 *    does not call device memory; managed memory is accepted) and then
 *    block, with gcoll's semantics. Else ncclInvalidUsage, one line.
 *  - ncclCommCuDevice: InitAll's devlist[i] (or i); InitRank's caller's
 *    current CUDA device when the program links libcudart, else 0.
 *  - ncclRedOpCreatePreMulSum: per-comm handles from ncclNumOps up, host
 *    scalars only; the collective scales this rank's input into a per-comm
 *    scratch buffer and sums it with gcoll. Not inside a group (yet): the
 *    scratch would be reused before ncclGroupEnd reads it.
 *  - Results are gcoll's (same values as NCCL's); ncclGetLastError is
 *    gcollGetLastError, and the shim's own refusals set it through gcoll_fail.
 *  - ncclGetVersion is the NCCL ABI level implemented (22809), not gcoll's
 *    version (gcollGetVersion).
 *  - ncclCommFinalize only makes later calls fail: every call completed
 *    before it returned.
 *  - ncclCommShrink is gcollCommShrink, ncclCommRevoke gcollCommRevoke;
 *    ncclCommInitRankScalable joins through commIds[0] only (nccl_init.c).
 *  - ncclCommWindowRegister returns a checked handle: gcoll needs no
 *    registration (nccl_mem.c). ncclGroupSimulateEnd drops the group
 *    without running it; estimatedTime is NCCL_UNDEF_FLOAT (nccl_comm.c). */
#ifndef GCOLL_NCCL_SHIM_H
#define GCOLL_NCCL_SHIM_H

#include <stddef.h>

#include "gcoll.h"

/* The NCCL release whose nccl.h this ABI follows. */
#define NCCL_ABI_MAJOR 2
#define NCCL_ABI_MINOR 28
#define NCCL_ABI_PATCH 9
#define NCCL_ABI_VERSION_CODE (NCCL_ABI_MAJOR * 10000 + NCCL_ABI_MINOR * 100 + NCCL_ABI_PATCH)
/* ncclConfig_t appeared in NCCL 2.14; NCCL_CONFIG_INITIALIZER's magic. */
#define NCCL_ABI_CONFIG_MIN_VERSION 21400
#define NCCL_ABI_CONFIG_MAGIC 0xcafebeefu
#define NCCL_ABI_CONFIG_UNDEF_INT (-2147483647 - 1)

enum {
  NCCL_ABI_FLOAT8E4M3 = 10,   /* types gcoll lacks: refused */
  NCCL_ABI_FLOAT8E5M2 = 11,
  NCCL_ABI_NUM_TYPES = 12,
  NCCL_ABI_NUM_OPS = 5,       /* first value of a created op */
  NCCL_ABI_SCALAR_DEVICE = 0,
  NCCL_ABI_SCALAR_HOST_IMMEDIATE = 1
};

struct nccl_abi_unique_id_layout { char internal[128]; };

/* Flags of ncclCommShrink, ncclCommRevoke and ncclCommWindowRegister, and
 * ncclSimInfo_t's (NCCL_SIM_INFO_INITIALIZER). */
#define NCCL_ABI_SHRINK_DEFAULT 0x00
#define NCCL_ABI_SHRINK_ABORT 0x01
#define NCCL_ABI_REVOKE_DEFAULT 0x00
#define NCCL_ABI_WIN_DEFAULT 0x00
#define NCCL_ABI_WIN_COLL_SYMMETRIC 0x01
#define NCCL_ABI_WIN_REQUIRED_ALIGNMENT 4096
#define NCCL_ABI_SIM_INFO_MAGIC 0x74685283u
#define NCCL_ABI_UNDEF_FLOAT (-1.0f)

/* ncclSimInfo_v22200. */
struct nccl_abi_sim_info_layout {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
};

/* ncclWindow_t points at one: gcoll needs no registration, so a window
 * only records what was registered, on its communicator's list. */
struct ncclComm;
struct ncclWindow_vidmem {
  unsigned int magic;
  const struct ncclComm *comm;
  void *buff;
  size_t size;
  int flags;
  struct ncclWindow_vidmem *next;
};

/* ncclConfig_v22800: fields a caller's older header lacks are past its
 * `size`, and are never read. */
struct nccl_abi_config_layout {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
};

#ifdef NCCL_SHIM_CHECK_AGAINST_NCCL_H
/* tests/nccl/nccl_abi_layout.c: the prototypes below must then be the
 * same declarations as nccl.h's, or the compiler says "conflicting types". */
typedef ncclResult_t nccl_abi_result_t;
typedef ncclDataType_t nccl_abi_datatype_t;
typedef ncclRedOp_t nccl_abi_redop_t;
typedef ncclScalarResidence_t nccl_abi_residence_t;
typedef ncclUniqueId nccl_abi_unique_id;
typedef ncclConfig_t nccl_abi_config;
typedef cudaStream_t nccl_abi_stream_t;
typedef ncclSimInfo_t nccl_abi_sim_info;
#else
/* gcoll's results have NCCL's values; NCCL's enums are int-sized (ncclMaxRedOp
 * makes sure of it for ops), so int passes them unchanged. */
typedef gcollResult_t nccl_abi_result_t;
typedef int nccl_abi_datatype_t;
typedef int nccl_abi_redop_t;
typedef int nccl_abi_residence_t;
typedef struct nccl_abi_unique_id_layout nccl_abi_unique_id;
typedef struct nccl_abi_config_layout nccl_abi_config;
typedef void *nccl_abi_stream_t;   /* cudaStream_t: a pointer */
typedef struct nccl_abi_sim_info_layout nccl_abi_sim_info;
#endif

/* The exported API (nccl.h's names and argument types). */
struct ncclComm;   /* ncclComm_t; defined below */
nccl_abi_result_t ncclGetVersion(int *version);
nccl_abi_result_t ncclGetUniqueId(nccl_abi_unique_id *uniqueId);
nccl_abi_result_t ncclCommInitRank(struct ncclComm **comm, int nranks, nccl_abi_unique_id commId,
                                   int rank);
nccl_abi_result_t ncclCommInitRankConfig(struct ncclComm **comm, int nranks,
                                         nccl_abi_unique_id commId, int rank,
                                         nccl_abi_config *config);
nccl_abi_result_t ncclCommInitAll(struct ncclComm **comm, int ndev, const int *devlist);
nccl_abi_result_t ncclCommFinalize(struct ncclComm *comm);
nccl_abi_result_t ncclCommSplit(struct ncclComm *comm, int color, int key,
                                struct ncclComm **newcomm, nccl_abi_config *config);
nccl_abi_result_t ncclCommDestroy(struct ncclComm *comm);
nccl_abi_result_t ncclCommAbort(struct ncclComm *comm);
nccl_abi_result_t ncclCommGetAsyncError(struct ncclComm *comm, nccl_abi_result_t *asyncError);
nccl_abi_result_t ncclCommCount(struct ncclComm *const comm, int *count);
nccl_abi_result_t ncclCommCuDevice(struct ncclComm *const comm, int *device);
nccl_abi_result_t ncclCommUserRank(struct ncclComm *const comm, int *rank);
const char *ncclGetErrorString(nccl_abi_result_t result);
const char *ncclGetLastError(struct ncclComm *comm);
nccl_abi_result_t ncclRedOpCreatePreMulSum(nccl_abi_redop_t *op, void *scalar,
                                           nccl_abi_datatype_t datatype,
                                           nccl_abi_residence_t residence, struct ncclComm *comm);
nccl_abi_result_t ncclRedOpDestroy(nccl_abi_redop_t op, struct ncclComm *comm);
nccl_abi_result_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                             nccl_abi_datatype_t datatype, nccl_abi_redop_t op, int root,
                             struct ncclComm *comm, nccl_abi_stream_t stream);
nccl_abi_result_t ncclBcast(void *buff, size_t count, nccl_abi_datatype_t datatype, int root,
                            struct ncclComm *comm, nccl_abi_stream_t stream);
nccl_abi_result_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                nccl_abi_datatype_t datatype, int root, struct ncclComm *comm,
                                nccl_abi_stream_t stream);
nccl_abi_result_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                nccl_abi_datatype_t datatype, nccl_abi_redop_t op,
                                struct ncclComm *comm, nccl_abi_stream_t stream);
nccl_abi_result_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                    nccl_abi_datatype_t datatype, nccl_abi_redop_t op,
                                    struct ncclComm *comm, nccl_abi_stream_t stream);
nccl_abi_result_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                nccl_abi_datatype_t datatype, struct ncclComm *comm,
                                nccl_abi_stream_t stream);
nccl_abi_result_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                               nccl_abi_datatype_t datatype, struct ncclComm *comm,
                               nccl_abi_stream_t stream);
nccl_abi_result_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                             nccl_abi_datatype_t datatype, int root, struct ncclComm *comm,
                             nccl_abi_stream_t stream);
nccl_abi_result_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                              nccl_abi_datatype_t datatype, int root, struct ncclComm *comm,
                              nccl_abi_stream_t stream);
nccl_abi_result_t ncclSend(const void *sendbuff, size_t count, nccl_abi_datatype_t datatype,
                           int peer, struct ncclComm *comm, nccl_abi_stream_t stream);
nccl_abi_result_t ncclRecv(void *recvbuff, size_t count, nccl_abi_datatype_t datatype, int peer,
                           struct ncclComm *comm, nccl_abi_stream_t stream);
nccl_abi_result_t ncclGroupStart(void);
nccl_abi_result_t ncclGroupEnd(void);
nccl_abi_result_t ncclMemAlloc(void **ptr, size_t size);
nccl_abi_result_t ncclMemFree(void *ptr);
nccl_abi_result_t ncclCommRegister(struct ncclComm *const comm, void *buff, size_t size,
                                   void **handle);
nccl_abi_result_t ncclCommDeregister(struct ncclComm *const comm, void *handle);
nccl_abi_result_t ncclCommShrink(struct ncclComm *comm, int *excludeRanksList,
                                 int excludeRanksCount, struct ncclComm **newcomm,
                                 nccl_abi_config *config, int shrinkFlags);
nccl_abi_result_t ncclCommRevoke(struct ncclComm *comm, int revokeFlags);
nccl_abi_result_t ncclCommInitRankScalable(struct ncclComm **newcomm, int nranks, int myrank,
                                           int nId, nccl_abi_unique_id *commIds,
                                           nccl_abi_config *config);
nccl_abi_result_t ncclCommWindowRegister(struct ncclComm *comm, void *buff, size_t size,
                                         struct ncclWindow_vidmem **win, int winFlags);
nccl_abi_result_t ncclCommWindowDeregister(struct ncclComm *comm, struct ncclWindow_vidmem *win);
nccl_abi_result_t ncclGroupSimulateEnd(nccl_abi_sim_info *simInfo);
void ncclResetDebugInit(void);

struct ncclComm {
  gcollComm_t gcoll;
  int cuda_device;
  int finalized;               /* ncclCommFinalize was called: no new operations */
  int revoked;                 /* ncclCommRevoke was called */
  struct ncclWindow_vidmem *windows;   /* registered, freed by destroy/abort */
};

/* nccl_comm.c: wraps a gcoll communicator (which it owns from then on). */
nccl_abi_result_t nccl_shim_wrap(struct ncclComm **out, gcollComm_t g, int cuda_device);
/* A comm usable for a new operation of `what`; else a refusal. */
nccl_abi_result_t nccl_shim_check_comm(const struct ncclComm *comm, const char *what);

/* nccl_cuda_probe.c */
/* 1 when the CUDA driver reports ptr as device memory (not managed). 0 for
 * host memory, NULL, and whenever libcuda is absent or does not initialise. */
int nccl_cuda_is_device_memory(const void *ptr);
/* The calling thread's current device per the program's own libcudart
 * (cudaGetDevice found in the global scope), else 0. */
int nccl_cuda_current_device(void);

/* nccl_redop.c */
/* The gcoll type for an NCCL type; a refusal (fp8, out of range) naming what. */
nccl_abi_result_t nccl_shim_type(nccl_abi_datatype_t t, const char *what, gcollDataType_t *out);

/* Profilers interpose NCCL calls through these second names. */
#define NCCL_PROFILER_ALIAS(fn) extern __typeof(fn) p##fn __attribute__((alias(#fn)))

#endif
