/* The checks every executor (host, CUDA) makes, of its channels at create
 * and of a collective before running it, so both refuse the same
 * configurations and calls with the same words. */
#ifndef GCOLL_KERNELS_COLL_ARGS_H
#define GCOLL_KERNELS_COLL_ARGS_H

#include <stddef.h>
#include <stdint.h>

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

/* A rank's place and its channels as every executor keeps them: set and
 * checked at create, read by the launch checks below. */
struct gcoll_exec_frame {
  int rank, nranks, nchannels;
  uint64_t timeout_ns;            /* per collective */
  uint64_t tree_mask;             /* bit c: channel c has tree connections */
};

/* One channel's ring order and tree, whatever form its FIFOs take (host
 * pointers for the host executor, device addresses for the CUDA one). */
struct gcoll_exec_channel_shape {
  const int *ring_ranks;          /* ranks[pos] = global rank */
  int ring_pos;
  int has_tree;
  int tree_parent;                /* global rank, -1 at the root */
  int tree_nchildren;
};

/* Fills f when rank is in [0, nranks) and nchannels in 1..max_channels
 * (at most 64, tree_mask's bits), else -1: the caller says which of its
 * fields it holds invalid. */
int gcoll_exec_frame_set(struct gcoll_exec_frame *f, int rank, int nranks, int nchannels,
                         int max_channels, uint64_t timeout_ns);

/* Channel c of f: this rank at its ring position, every ring rank in range
 * and there once, and a tree (if any) whose parent is another rank in
 * range, with at most GCOLL_PRIMS_MAX_PEERS children, and a root that has
 * children unless it is alone. Records whether it has a tree. 0, or -1
 * with one line in err. */
int gcoll_exec_frame_channel(struct gcoll_exec_frame *f, int c,
                             const struct gcoll_exec_channel_shape *s, char *err, size_t errlen);

/* An executor's state: size bytes, zeroed, whose first member is a struct
 * gcoll_exec_frame, set to *f. NULL with "out of memory" in err. */
void *gcoll_exec_frame_alloc(size_t size, const struct gcoll_exec_frame *f, char *err,
                             size_t errlen);

/* The channels a call asking for nchannels runs on (0: all). */
static inline int gcoll_exec_frame_nch(const struct gcoll_exec_frame *f, int nchannels) {
  return nchannels ? nchannels : f->nchannels;
}

/* A call's channels: nchannels in [0, f->nchannels], and tree connections
 * on each of them when algo is tree. gcollSuccess, or gcollInvalidArgument
 * / gcollInvalidUsage with one line in err. */
gcollResult_t gcoll_exec_frame_check_channels(const struct gcoll_exec_frame *f, int nchannels,
                                              enum gcoll_algo algo, char *err, size_t errlen);

/* A call's buffers: count elements of esize bytes (per rank for allgather
 * and reducescatter) whose size in bytes, times nranks, does not overflow,
 * at send and recv (device or host addresses) as coll_geometry.h's rules
 * want them. gcollSuccess, or gcollInvalidArgument with one line in err. */
gcollResult_t gcoll_exec_frame_check_buffers(const struct gcoll_exec_frame *f,
                                             enum gcoll_coll coll, size_t count, size_t esize,
                                             int root, uint64_t send, uint64_t recv, char *err,
                                             size_t errlen);

#endif
