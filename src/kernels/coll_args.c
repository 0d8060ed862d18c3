/* Shared collective argument checks (see coll_args.h). */
#include "kernels/coll_args.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/errf.h"
#include "kernels/prims.h"
#include "kernels/reduce.h"

gcollResult_t gcoll_coll_args_check(enum gcoll_coll coll, gcollDataType_t dtype, gcollRedOp_t op,
                                    int root, int nranks, enum gcoll_proto proto,
                                    const char *executor, char *err, size_t errlen) {
  if ((int)coll < 0 || coll >= GCOLL_NCOLLS) {
    gcoll_errf(err, errlen, "invalid collective %d", (int)coll);
    return gcollInvalidArgument;
  }
  if (gcoll_dtype_size(dtype) == 0) {
    gcoll_errf(err, errlen, "invalid data type %d", (int)dtype);
    return gcollInvalidArgument;
  }
  if ((int)op < 0 || op >= gcollNumOps) {
    gcoll_errf(err, errlen, "invalid reduction op %d", (int)op);
    return gcollInvalidArgument;
  }
  if ((coll == GCOLL_COLL_BROADCAST || coll == GCOLL_COLL_REDUCE) && (root < 0 || root >= nranks)) {
    gcoll_errf(err, errlen, "root %d out of range [0, %d)", root, nranks);
    return gcollInvalidArgument;
  }
  if (proto != GCOLL_PROTO_SIMPLE && proto != GCOLL_PROTO_LL) {
    gcoll_errf(err, errlen, "protocol %d: %s runs SIMPLE and LL only", (int)proto, executor);
    return proto == GCOLL_PROTO_LL128 ? gcollInvalidUsage : gcollInvalidArgument;
  }
  return gcollSuccess;
}

gcollResult_t gcoll_coll_premul_check(enum gcoll_coll coll, gcollRedOp_t op, int premul,
                                      int device_scalar, const char *executor, char *err,
                                      size_t errlen) {
  if (premul == GCOLL_PREMUL_NONE) return gcollSuccess;
  if (premul != GCOLL_PREMUL_IMMEDIATE && premul != GCOLL_PREMUL_DEVICE) {
    gcoll_errf(err, errlen, "invalid pre-mul-sum kind %d", premul);
    return gcollInvalidArgument;
  }
  if (op != gcollSum || (coll != GCOLL_COLL_ALLREDUCE && coll != GCOLL_COLL_REDUCE &&
                         coll != GCOLL_COLL_REDUCESCATTER)) {
    gcoll_errf(err, errlen, "a pre-mul-sum goes with op sum on allreduce, reduce or "
               "reducescatter, not %s %s", gcoll_redop_name(op) ? gcoll_redop_name(op) : "?",
               gcoll_coll_name(coll));
    return gcollInvalidArgument;
  }
  if (premul == GCOLL_PREMUL_DEVICE && !device_scalar) {
    gcoll_errf(err, errlen, "%s cannot read a pre-mul-sum scalar in device memory", executor);
    return gcollInvalidUsage;
  }
  return gcollSuccess;
}

int gcoll_exec_frame_set(struct gcoll_exec_frame *f, int rank, int nranks, int nchannels,
                         int max_channels, uint64_t timeout_ns) {
  if (nranks < 1 || rank < 0 || rank >= nranks || nchannels < 1 || nchannels > max_channels ||
      nchannels > 64)
    return -1;
  *f = (struct gcoll_exec_frame){
      .rank = rank, .nranks = nranks, .nchannels = nchannels, .timeout_ns = timeout_ns};
  return 0;
}

/* Whether the ring holds every rank once: a seen-flag per rank, so a
 * 100,000-rank ring costs one pass, not a pass per rank. */
static int check_ring(const struct gcoll_exec_frame *f, int c,
                      const struct gcoll_exec_channel_shape *s, char *err, size_t errlen) {
  const int *r = s->ring_ranks;
  if (r == NULL || s->ring_pos < 0 || s->ring_pos >= f->nranks || r[s->ring_pos] != f->rank) {
    gcoll_errf(err, errlen, "channel %d: ring position %d does not hold rank %d", c, s->ring_pos,
               f->rank);
    return -1;
  }
  unsigned char *seen = calloc((size_t)f->nranks, 1);
  if (seen == NULL) {
    gcoll_errf(err, errlen, "out of memory");
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < f->nranks && rc == 0; i++) {
    if (r[i] < 0 || r[i] >= f->nranks) {
      gcoll_errf(err, errlen, "channel %d: ring rank %d out of range", c, r[i]);
      rc = -1;
    } else if (seen[r[i]]++) {
      gcoll_errf(err, errlen, "channel %d: rank %d twice in the ring", c, r[i]);
      rc = -1;
    }
  }
  free(seen);
  return rc;
}

int gcoll_exec_frame_channel(struct gcoll_exec_frame *f, int c,
                             const struct gcoll_exec_channel_shape *s, char *err, size_t errlen) {
  if (check_ring(f, c, s, err, errlen) != 0) return -1;
  if (!s->has_tree) return 0;
  if (s->tree_nchildren < 0 || s->tree_nchildren > GCOLL_PRIMS_MAX_PEERS ||
      s->tree_parent < -1 || s->tree_parent >= f->nranks || s->tree_parent == f->rank ||
      (f->nranks > 1 && s->tree_parent < 0 && s->tree_nchildren == 0)) {
    gcoll_errf(err, errlen, "channel %d: invalid tree (parent %d, %d children)", c, s->tree_parent,
               s->tree_nchildren);
    return -1;
  }
  f->tree_mask |= (uint64_t)1 << c;
  return 0;
}

void *gcoll_exec_frame_alloc(size_t size, const struct gcoll_exec_frame *f, char *err,
                             size_t errlen) {
  void *e = size >= sizeof(*f) ? calloc(1, size) : NULL;
  if (e == NULL) {
    gcoll_errf(err, errlen, "out of memory");
    return NULL;
  }
  memcpy(e, f, sizeof(*f));
  return e;
}

gcollResult_t gcoll_exec_frame_check_channels(const struct gcoll_exec_frame *f, int nchannels,
                                              enum gcoll_algo algo, char *err, size_t errlen) {
  if (nchannels < 0 || nchannels > f->nchannels) {
    gcoll_errf(err, errlen, "%d channels requested, %d connected", nchannels, f->nchannels);
    return gcollInvalidArgument;
  }
  if (algo != GCOLL_ALGO_TREE) return gcollSuccess;
  for (int i = 0; i < gcoll_exec_frame_nch(f, nchannels); i++)
    if (!(f->tree_mask >> i & 1)) {
      gcoll_errf(err, errlen, "channel %d has no tree connections", i);
      return gcollInvalidUsage;
    }
  return gcollSuccess;
}

gcollResult_t gcoll_exec_frame_check_buffers(const struct gcoll_exec_frame *f,
                                             enum gcoll_coll coll, size_t count, size_t esize,
                                             int root, uint64_t send, uint64_t recv, char *err,
                                             size_t errlen) {
  size_t bytes;
  if (__builtin_mul_overflow(count, esize, &bytes) ||
      __builtin_mul_overflow(bytes, (size_t)f->nranks, &bytes)) {
    gcoll_errf(err, errlen, "count %zu overflows the buffer size", count);
    return gcollInvalidArgument;
  }
  switch (gcoll_geom_check_buffers(coll, count, esize, f->nranks, f->rank, root, send, recv)) {
    case GCOLL_GEOM_OK: return gcollSuccess;
    case GCOLL_GEOM_NULL:
      gcoll_errf(err, errlen, "NULL buffer for %zu elements", count);
      return gcollInvalidArgument;
    default:
      gcoll_errf(err, errlen, "sendbuf and recvbuf overlap other than in place");
      return gcollInvalidArgument;
  }
}
