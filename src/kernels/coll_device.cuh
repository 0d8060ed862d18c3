/* The body of the gcoll CUDA kernel, shared by coll_kernels.cu (the
 * fatbin) and the CPU emulation test: channel partition, the ring and tree
 * algorithms (algo_ring.h, algo_tree.h) on the device primitives, avg's
 * division and the per-channel status report. */
#ifndef GCOLL_KERNELS_COLL_DEVICE_CUH
#define GCOLL_KERNELS_COLL_DEVICE_CUH

#include <stddef.h>
#include <stdint.h>

#include "kernels/prims_cuda.cuh"

#include "kernels/algo_ring.h"
#include "kernels/algo_tree.h"
#include "kernels/coll_geometry.h"

GCOLL_DEV static gcollResult_t gcoll_dev_ring(const struct gcoll_cuda_work &w,
                                              const struct gcoll_cuda_channel *ch, int coll,
                                              gcoll_cuda_reduce_fn fn, size_t esize,
                                              size_t lo, size_t n, struct gcoll_dev_block *blk) {
  struct gcoll_prims ring;
  const int peers = w.nranks > 1;
  gcollResult_t r = gcoll_dev_prims_setup(&ring, &ch->ring_recv_prev, peers, &ch->ring_send_next,
                                          peers, w.proto, w.dtype, esize, fn,
                                          (char *)ch->scratch, ch->scratch_bytes, blk);
  if (r != gcollSuccess) return r;
  if (w.premul != GCOLL_PREMUL_NONE) ring.pre = &blk->pre;
  struct gcoll_ring_work wk;
  wk.sendbuf = (const void *)w.sendbuf;
  wk.recvbuf = (void *)w.recvbuf;
  wk.offset = lo;
  wk.count = n;
  wk.stride = w.stride;
  wk.nranks = w.nranks;
  wk.pos = ch->ring_pos;
  wk.root = w.root;
  wk.ranks = (const int *)ch->ring_ranks;
  switch (coll) {
    case GCOLL_COLL_ALLREDUCE: return gcoll_ring_allreduce(&ring, &wk);
    case GCOLL_COLL_BROADCAST: return gcoll_ring_broadcast(&ring, &wk);
    case GCOLL_COLL_REDUCE: return gcoll_ring_reduce(&ring, &wk);
    case GCOLL_COLL_ALLGATHER: return gcoll_ring_allgather(&ring, &wk);
    case GCOLL_COLL_REDUCESCATTER: return gcoll_ring_reducescatter(&ring, &wk);
    default: return gcollInvalidArgument;
  }
}

GCOLL_DEV static gcollResult_t gcoll_dev_tree(const struct gcoll_cuda_work &w,
                                              const struct gcoll_cuda_channel *ch,
                                              gcoll_cuda_reduce_fn fn, size_t esize,
                                              size_t lo, size_t n, struct gcoll_dev_block *blk) {
  if (!ch->has_tree || ch->tree_nchildren < 0 || ch->tree_nchildren > GCOLL_PRIMS_MAX_PEERS)
    return gcollInvalidArgument;
  const int has_parent = ch->tree_parent >= 0;
  struct gcoll_prims up, down;
  gcollResult_t r = gcoll_dev_prims_setup(&up, ch->tree_recv_child, ch->tree_nchildren,
                                          &ch->tree_send_parent, has_parent, w.proto, w.dtype,
                                          esize, fn, (char *)ch->scratch, ch->scratch_bytes,
                                          blk);
  if (r != gcollSuccess) return r;
  r = gcoll_dev_prims_setup(&down, &ch->tree_recv_parent, has_parent, ch->tree_send_child,
                            ch->tree_nchildren, w.proto, w.dtype, esize, fn,
                            (char *)ch->scratch, ch->scratch_bytes, blk);
  if (r != gcollSuccess) return r;
  /* Only the way up reads the input. */
  if (w.premul != GCOLL_PREMUL_NONE) up.pre = &blk->pre;
  struct gcoll_tree_work wk;
  wk.sendbuf = (const void *)w.sendbuf;
  wk.recvbuf = (void *)w.recvbuf;
  wk.offset = lo;
  wk.count = n;
  wk.parent = ch->tree_parent;
  wk.nchildren = ch->tree_nchildren;
  return gcoll_tree_allreduce(&up, &down, &wk);
}

/* Whether this rank's share of recvbuf holds a reduced sum that avg must
 * divide (host_exec.c's finish_avg). */
GCOLL_DEV static inline int gcoll_dev_needs_avg(const struct gcoll_cuda_work &w, int coll) {
  if (w.op != gcollAvg) return 0;
  if (coll == GCOLL_COLL_ALLGATHER || coll == GCOLL_COLL_BROADCAST) return 0;
  return coll != GCOLL_COLL_REDUCE || w.rank == w.root;
}

/* An algorithm entry (generated table, or the emulation's direct call). */
typedef gcollResult_t (*gcoll_dev_algo_fn)(const struct gcoll_cuda_work &w,
                                           const struct gcoll_cuda_channel *ch,
                                           gcoll_cuda_reduce_fn fn, size_t esize, size_t lo,
                                           size_t n, struct gcoll_dev_block *blk);

GCOLL_DEV static inline gcollResult_t gcoll_dev_algo(const struct gcoll_cuda_work &w,
                                                     const struct gcoll_cuda_channel *ch, int coll,
                                                     int algo, gcoll_cuda_reduce_fn fn,
                                                     size_t esize, size_t lo, size_t n,
                                                     struct gcoll_dev_block *blk) {
  return algo == GCOLL_ALGO_TREE ? gcoll_dev_tree(w, ch, fn, esize, lo, n, blk)
                                 : gcoll_dev_ring(w, ch, coll, fn, esize, lo, n, blk);
}

/* What block c of a launch does, on every thread: set up the block state
 * (blk is block-shared), run the channel's algorithm (algo_fn NULL: the
 * pair is not implemented), finish avg, and report in w.status[c]. */
GCOLL_DEV static inline void gcoll_dev_block_main(const struct gcoll_cuda_work &w, int c,
                                                  struct gcoll_dev_block *blk,
                                                  gcoll_dev_algo_fn algo_fn,
                                                  gcoll_cuda_reduce_fn fn) {
  const int coll = w.coll;
  const struct gcoll_cuda_channel *ch = (const struct gcoll_cuda_channel *)w.channels + c;
  if (gcoll_dev_tid() == 0) {
    gcoll_dev_block_start(blk, w.abort_word, w.local_abort, w.timeout_ns);
    /* A device scalar is read now, as NCCL does: a graph replay or a
     * queued call sees the value the stream left there. */
    blk->pre = w.scalar;
    if (w.premul == GCOLL_PREMUL_DEVICE) {
      blk->pre = 0;
      memcpy(&blk->pre, (const void *)w.scalar, gcoll_geom_esize(w.dtype));
    }
  }
  gcoll_dev_barrier();
  gcollResult_t r = gcollInvalidArgument;
  if (algo_fn != NULL && fn != NULL && c < w.nchannels) {
    const size_t esize = gcoll_geom_esize(w.dtype);
    size_t lo, n;
    gcoll_geom_partition(w.count, esize, w.nchannels, c, &lo, &n);
    r = algo_fn(w, ch, fn, esize, lo, n, blk);
    if (r == gcollSuccess && n > 0 && gcoll_dev_needs_avg(w, coll)) {
      gcoll_cuda_avg_finish(gcoll_dev_tid(), gcoll_dev_nthreads(),
                            (char *)w.recvbuf + lo * esize, n, w.dtype, w.nranks);
    }
  }
  gcoll_dev_barrier();
  if (gcoll_dev_tid() == 0) {
    if (r != gcollSuccess) {
      if (blk->result == 0) blk->what = GCOLL_CUDA_FAIL_SETUP;
      if (w.local_abort != 0) gcoll_dev_cas_system((int *)w.local_abort, 0, (int)r);
    }
    gcoll_dev_block_report(blk, (int)r, (struct gcoll_cuda_status *)w.status + c);
  }
}

#endif
