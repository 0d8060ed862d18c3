/* The argument checks every executor (host, CUDA) makes before running a
 * collective, so both refuse the same calls with the same words. */
#ifndef GCOLL_KERNELS_COLL_ARGS_H
#define GCOLL_KERNELS_COLL_ARGS_H

#include <stddef.h>

#include "gcoll.h"
#include "gcoll_plan.h"
#include "kernels/coll_geometry.h"

/* Collective, type, op, root (broadcast and reduce, in [0, nranks)) and
 * protocol (SIMPLE or LL: what the executors run; `executor` names the
 * caller in that line). gcollSuccess, or gcollInvalidArgument /
 * gcollInvalidUsage (LL128) with one line in err. */
gcollResult_t gcoll_coll_args_check(enum gcoll_coll coll, gcollDataType_t dtype, gcollRedOp_t op,
                                    int root, int nranks, enum gcoll_proto proto,
                                    const char *executor, char *err, size_t errlen);

/* A pre-mul-sum (reduce.h's enum gcoll_premul_kind) goes with op sum on a
 * reducing collective (allreduce, reduce, reducescatter); a DEVICE scalar
 * only where device_scalar (the CUDA executor). gcollSuccess, or
 * gcollInvalidArgument / gcollInvalidUsage with one line in err. */
gcollResult_t gcoll_coll_premul_check(enum gcoll_coll coll, gcollRedOp_t op, int premul,
                                      int device_scalar, const char *executor, char *err,
                                      size_t errlen);

/* gcoll_geom_check_buffers' verdict as the executors report it: gcollSuccess,
 * or gcollInvalidArgument with one line in err. */
gcollResult_t gcoll_exec_buffers_result(enum gcoll_geom_buffers verdict, size_t count, char *err,
                                        size_t errlen);

#endif
