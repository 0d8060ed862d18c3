/* Shared collective argument checks (see coll_args.h). */
#include "kernels/coll_args.h"

#include <stdio.h>

#include "kernels/reduce.h"

gcollResult_t gcoll_coll_args_check(enum gcoll_coll coll, gcollDataType_t dtype, gcollRedOp_t op,
                                    int root, int nranks, enum gcoll_proto proto,
                                    const char *executor, char *err, size_t errlen) {
  if ((int)coll < 0 || coll >= GCOLL_NCOLLS) {
    snprintf(err, errlen, "invalid collective %d", (int)coll);
    return gcollInvalidArgument;
  }
  if (gcoll_dtype_size(dtype) == 0) {
    snprintf(err, errlen, "invalid data type %d", (int)dtype);
    return gcollInvalidArgument;
  }
  if ((int)op < 0 || op >= gcollNumOps) {
    snprintf(err, errlen, "invalid reduction op %d", (int)op);
    return gcollInvalidArgument;
  }
  if ((coll == GCOLL_COLL_BROADCAST || coll == GCOLL_COLL_REDUCE) && (root < 0 || root >= nranks)) {
    snprintf(err, errlen, "root %d out of range [0, %d)", root, nranks);
    return gcollInvalidArgument;
  }
  if (proto != GCOLL_PROTO_SIMPLE && proto != GCOLL_PROTO_LL) {
    snprintf(err, errlen, "protocol %d: %s runs SIMPLE and LL only", (int)proto, executor);
    return proto == GCOLL_PROTO_LL128 ? gcollInvalidUsage : gcollInvalidArgument;
  }
  return gcollSuccess;
}

gcollResult_t gcoll_exec_buffers_result(enum gcoll_geom_buffers verdict, size_t count, char *err,
                                        size_t errlen) {
  switch (verdict) {
    case GCOLL_GEOM_OK: return gcollSuccess;
    case GCOLL_GEOM_NULL:
      snprintf(err, errlen, "NULL buffer for %zu elements", count);
      return gcollInvalidArgument;
    default:
      snprintf(err, errlen, "sendbuf and recvbuf overlap other than in place");
      return gcollInvalidArgument;
  }
}
