/* Tree allreduce and reduce on the primitives, one channel each (seed 000,
 * 004).
 *
 * Same contract as algo_ring.h (primitives only, no libc). The channel's
 * tree: parent < 0 at the root, up to GCOLL_PRIMS_MAX_PEERS children. Two
 * prims objects carry the two directions:
 *   up:   receive from the children, send to the parent;
 *   down: receive from the parent, send to the children.
 * Phase 1 reduces up (leaves send, inner nodes recvReduceSend, the root
 * recvReduceCopy into recvbuf); phase 2 broadcasts down (root sends from
 * recvbuf, inner nodes recvCopySend, leaves recv). Each phase is pipelined
 * slot by slot through the tree. A node starts phase 2 only after its
 * phase 1, as in NCCL's up-down tree: interleaving them per chunk at the
 * root could block the root on a child that is still sending up.
 *
 * Double binary tree: the caller runs this on two channels whose trees
 * differ (e.g. gcoll_btree and gcoll_dtree_t2), each on its own half of the
 * data, so every rank is a leaf in at least one tree and both directions of
 * every link carry data. Splitting the data is the caller's business (the
 * host executor gives each channel a contiguous element range).
 *
 * Reduce is phase 1 alone, to the tree's root, which must be the
 * collective's root (the host executor checks that every rank agrees).
 */
#ifndef GCOLL_KERNELS_ALGO_TREE_H
#define GCOLL_KERNELS_ALGO_TREE_H

#ifndef GCOLL_PRIMS_PROVIDED
#include "kernels/prims.h"
#endif

struct gcoll_tree_work {
  const void *sendbuf;
  void *recvbuf;
  size_t offset, count;   /* the channel's elements of both buffers */
  int parent;             /* -1 at the root */
  int nchildren;
};

GCOLL_KERNEL_FN gcollResult_t gcoll_tree_allreduce(struct gcoll_prims *up,
                                                   struct gcoll_prims *down,
                                                   const struct gcoll_tree_work *w) {
  const size_t off = w->offset, n = w->count;
  const int root = w->parent < 0, leaf = w->nchildren == 0;
  gcollResult_t r;
  gcoll_prims_bind(up, w->sendbuf, w->recvbuf);
  gcoll_prims_bind(down, w->recvbuf, w->recvbuf);
  if (root && leaf) return gcoll_prim_copy(up, off, off, n);
  if (leaf)
    r = gcoll_prim_send(up, off, n);
  else if (!root)
    r = gcoll_prim_recvReduceSend(up, off, n);
  else
    r = gcoll_prim_recvReduceCopy(up, off, off, n);
  if (r != gcollSuccess) return r;
  if (root) return gcoll_prim_send(down, off, n);
  if (leaf) return gcoll_prim_recv(down, off, n);
  return gcoll_prim_recvCopySend(down, off, n);
}

GCOLL_KERNEL_FN gcollResult_t gcoll_tree_reduce(struct gcoll_prims *up,
                                                const struct gcoll_tree_work *w) {
  const size_t off = w->offset, n = w->count;
  const int root = w->parent < 0, leaf = w->nchildren == 0;
  gcoll_prims_bind(up, w->sendbuf, w->recvbuf);
  if (root && leaf) return gcoll_prim_copy(up, off, off, n);
  if (leaf) return gcoll_prim_send(up, off, n);
  if (!root) return gcoll_prim_recvReduceSend(up, off, n);
  return gcoll_prim_recvReduceCopy(up, off, off, n);
}

#endif
