/* gcoll: plan-driven collective communication.
 *
 * The types mirror NCCL's (same names with a gcoll prefix, same numeric
 * values), so NCCL users can read this header at a glance and gcoll's
 * NCCL-ABI library can pass values through unchanged. The communicator API
 * arrives with the runtime (issue 4); this header holds what the collective
 * kernels and the runtime share. */
#ifndef GCOLL_H
#define GCOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GCOLL_MAJOR 0
#define GCOLL_MINOR 1
#define GCOLL_PATCH 0

typedef enum {
  gcollSuccess = 0,
  gcollUnhandledCudaError = 1,
  gcollSystemError = 2,       /* a system call failed, or a deadline passed */
  gcollInternalError = 3,
  gcollInvalidArgument = 4,   /* bad buffer, type, op, root or count */
  gcollInvalidUsage = 5,      /* bad plan, wrong call order */
  gcollRemoteError = 6,       /* a peer died or closed its connection */
  gcollInProgress = 7,
  gcollNumResults = 8
} gcollResult_t;

typedef enum {
  gcollInt8 = 0, gcollChar = 0,
  gcollUint8 = 1,
  gcollInt32 = 2, gcollInt = 2,
  gcollUint32 = 3,
  gcollInt64 = 4,
  gcollUint64 = 5,
  gcollFloat16 = 6, gcollHalf = 6,
  gcollFloat32 = 7, gcollFloat = 7,
  gcollFloat64 = 8, gcollDouble = 8,
  gcollBfloat16 = 9,
  gcollNumTypes = 10
} gcollDataType_t;

typedef enum {
  gcollSum = 0,
  gcollProd = 1,
  gcollMax = 2,
  gcollMin = 3,
  gcollAvg = 4,    /* sum divided by the number of ranks */
  gcollNumOps = 5
} gcollRedOp_t;

#ifdef __cplusplus
}
#endif
#endif
