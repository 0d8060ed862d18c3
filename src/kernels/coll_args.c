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

gcollResult_t gcoll_coll_premul_check(enum gcoll_coll coll, gcollRedOp_t op, int premul,
                                      int device_scalar, const char *executor, char *err,
                                      size_t errlen) {
  if (premul == GCOLL_PREMUL_NONE) return gcollSuccess;
  if (premul != GCOLL_PREMUL_IMMEDIATE && premul != GCOLL_PREMUL_DEVICE) {
    snprintf(err, errlen, "invalid pre-mul-sum kind %d", premul);
    return gcollInvalidArgument;
  }
  if (op != gcollSum || (coll != GCOLL_COLL_ALLREDUCE && coll != GCOLL_COLL_REDUCE &&
                         coll != GCOLL_COLL_REDUCESCATTER)) {
    snprintf(err, errlen, "a pre-mul-sum goes with op sum on allreduce, reduce or "
             "reducescatter, not %s %s", gcoll_redop_name(op) ? gcoll_redop_name(op) : "?",
             gcoll_coll_name(coll));
    return gcollInvalidArgument;
  }
  if (premul == GCOLL_PREMUL_DEVICE && !device_scalar) {
    snprintf(err, errlen, "%s cannot read a pre-mul-sum scalar in device memory", executor);
    return gcollInvalidUsage;
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
