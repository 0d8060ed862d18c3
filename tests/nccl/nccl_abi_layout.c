/* Compiled (not run) by test_nccl_abi.sh against the system's nccl.h: the
 * shim's ABI, which it defines without nccl.h, must be NCCL's. The shim
 * header's prototypes are declared here with nccl.h's own types, so any
 * difference in a signature is a "conflicting types" error; the asserts
 * cover values and layouts. */
#include <stddef.h>

#include <nccl.h>

#define NCCL_SHIM_CHECK_AGAINST_NCCL_H 1
#include "nccl/nccl_shim.h"

#define SAME(a, b) _Static_assert((long long)(a) == (long long)(b), #a " != " #b)

SAME(NCCL_VERSION_CODE, NCCL_ABI_VERSION_CODE);
SAME(NCCL_CONFIG_UNDEF_INT, NCCL_ABI_CONFIG_UNDEF_INT);
SAME(NCCL_SPLIT_NOCOLOR, GCOLL_SPLIT_NOCOLOR);

/* Results: gcoll's values are passed through unchanged. */
SAME(ncclSuccess, gcollSuccess);
SAME(ncclUnhandledCudaError, gcollUnhandledCudaError);
SAME(ncclSystemError, gcollSystemError);
SAME(ncclInternalError, gcollInternalError);
SAME(ncclInvalidArgument, gcollInvalidArgument);
SAME(ncclInvalidUsage, gcollInvalidUsage);
SAME(ncclRemoteError, gcollRemoteError);
SAME(ncclInProgress, gcollInProgress);
SAME(ncclNumResults, gcollNumResults);
SAME(sizeof(ncclResult_t), sizeof(gcollResult_t));

/* Types: every one gcoll has, the ones it refuses, and the count. */
SAME(ncclInt8, gcollInt8);
SAME(ncclChar, gcollChar);
SAME(ncclUint8, gcollUint8);
SAME(ncclInt32, gcollInt32);
SAME(ncclInt, gcollInt);
SAME(ncclUint32, gcollUint32);
SAME(ncclInt64, gcollInt64);
SAME(ncclUint64, gcollUint64);
SAME(ncclFloat16, gcollFloat16);
SAME(ncclHalf, gcollHalf);
SAME(ncclFloat32, gcollFloat32);
SAME(ncclFloat, gcollFloat);
SAME(ncclFloat64, gcollFloat64);
SAME(ncclDouble, gcollDouble);
SAME(ncclBfloat16, gcollBfloat16);
SAME(ncclFloat8e4m3, NCCL_ABI_FLOAT8E4M3);
SAME(ncclFloat8e5m2, NCCL_ABI_FLOAT8E5M2);
SAME(ncclNumTypes, NCCL_ABI_NUM_TYPES);
SAME(sizeof(ncclDataType_t), sizeof(int));

/* Ops, and where created ones start. */
SAME(ncclSum, gcollSum);
SAME(ncclProd, gcollProd);
SAME(ncclMax, gcollMax);
SAME(ncclMin, gcollMin);
SAME(ncclAvg, gcollAvg);
SAME(ncclNumOps, gcollNumOps);
SAME(ncclNumOps, NCCL_ABI_NUM_OPS);
SAME(sizeof(ncclRedOp_t), sizeof(int));
SAME(ncclScalarDevice, NCCL_ABI_SCALAR_DEVICE);
SAME(ncclScalarHostImmediate, NCCL_ABI_SCALAR_HOST_IMMEDIATE);
SAME(sizeof(ncclScalarResidence_t), sizeof(int));

/* The unique id carries gcoll's unchanged. */
SAME(sizeof(ncclUniqueId), sizeof(struct nccl_abi_unique_id_layout));
SAME(sizeof(ncclUniqueId), sizeof(gcollUniqueId));

/* ncclConfig_t, field by field. */
#define FIELD(f)                                                                 \
  SAME(offsetof(ncclConfig_t, f), offsetof(struct nccl_abi_config_layout, f));   \
  SAME(sizeof(((ncclConfig_t *)0)->f), sizeof(((struct nccl_abi_config_layout *)0)->f))
FIELD(size);
FIELD(magic);
FIELD(version);
FIELD(blocking);
FIELD(cgaClusterSize);
FIELD(minCTAs);
FIELD(maxCTAs);
FIELD(netName);
FIELD(splitShare);
FIELD(trafficClass);
FIELD(commName);
FIELD(collnetEnable);
FIELD(CTAPolicy);
FIELD(shrinkShare);
FIELD(nvlsCTAs);
FIELD(nChannelsPerNetPeer);
FIELD(nvlinkCentricSched);
SAME(sizeof(ncclConfig_t), sizeof(struct nccl_abi_config_layout));

/* ncclCommShrink/ncclCommRevoke/ncclCommWindowRegister flags (the
 * simulate magic is NCCL_SIM_INFO_INITIALIZER's alone, not a constant
 * here: nccl_shrink_check's simulate mode passes that initializer). */
SAME(NCCL_SHRINK_DEFAULT, NCCL_ABI_SHRINK_DEFAULT);
SAME(NCCL_SHRINK_ABORT, NCCL_ABI_SHRINK_ABORT);
SAME(NCCL_SHRINK_DEFAULT, GCOLL_SHRINK_DEFAULT);
SAME(NCCL_SHRINK_ABORT, GCOLL_SHRINK_ABORT);
SAME(NCCL_REVOKE_DEFAULT, NCCL_ABI_REVOKE_DEFAULT);
SAME(NCCL_WIN_DEFAULT, NCCL_ABI_WIN_DEFAULT);
SAME(NCCL_WIN_COLL_SYMMETRIC, NCCL_ABI_WIN_COLL_SYMMETRIC);
SAME(NCCL_WIN_REQUIRED_ALIGNMENT, NCCL_ABI_WIN_REQUIRED_ALIGNMENT);
_Static_assert(NCCL_UNDEF_FLOAT == NCCL_ABI_UNDEF_FLOAT, "NCCL_UNDEF_FLOAT differs");

/* ncclSimInfo_t, field by field. */
#define SIM_FIELD(f)                                                                   \
  SAME(offsetof(ncclSimInfo_t, f), offsetof(struct nccl_abi_sim_info_layout, f));      \
  SAME(sizeof(((ncclSimInfo_t *)0)->f), sizeof(((struct nccl_abi_sim_info_layout *)0)->f))
SIM_FIELD(size);
SIM_FIELD(magic);
SIM_FIELD(version);
SIM_FIELD(estimatedTime);
SAME(sizeof(ncclSimInfo_t), sizeof(struct nccl_abi_sim_info_layout));
