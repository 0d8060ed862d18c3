/* Ring algorithms on the primitives, one channel each (seed 004).
 *
 * Written once for every executor: the functions use only the names
 * prims.h lists (a CUDA executor includes its own primitives first, with its
 * own GCOLL_KERNEL_FN, and defines GCOLL_PRIMS_PROVIDED) and no libc.
 *
 * A channel works on its share of the buffers, described in elements:
 *   allreduce, broadcast, reduce: elements [offset, offset+count) of
 *     sendbuf and recvbuf.
 *   allgather: elements [offset, offset+count) of each rank's block; rank
 *     r's block starts at r*stride in recvbuf; sendbuf holds this rank's
 *     block (stride elements).
 *   reducescatter: the same share of each block of sendbuf (block r at
 *     r*stride); recvbuf holds this rank's block (stride elements).
 * The ring: nranks ranks, ranks[pos] is the global rank at ring position
 * pos, this rank is at position `pos`; the prims receive from position pos-1
 * and send to pos+1. Data blocks and roots are global ranks, so any ring
 * order yields the same result layout.
 */
#ifndef GCOLL_KERNELS_ALGO_RING_H
#define GCOLL_KERNELS_ALGO_RING_H

#ifndef GCOLL_PRIMS_PROVIDED
#include "kernels/prims.h"
#endif

struct gcoll_ring_work {
  const void *sendbuf;
  void *recvbuf;
  size_t offset, count, stride;
  int nranks, pos, root;
  const int *ranks;
};

#define GCOLL_ALGO_TRY(expr)                                  \
  do {                                                        \
    gcollResult_t gcoll_algo_r_ = (expr);                     \
    if (gcoll_algo_r_ != gcollSuccess) return gcoll_algo_r_; \
  } while (0)

GCOLL_KERNEL_FN int gcoll_ring_mod(int i, int n) {
  return ((i % n) + n) % n;
}

GCOLL_KERNEL_FN size_t gcoll_min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Position of a global rank in the ring; -1 when absent. */
GCOLL_KERNEL_FN int gcoll_ring_pos_of(const struct gcoll_ring_work *w, int rank) {
  for (int i = 0; i < w->nranks; i++)
    if (w->ranks[i] == rank) return i;
  return -1;
}

/* Seed 004: each loop covers nranks chunks; block c (ring position c) is
 * reduce-scattered then all-gathered around the ring. The last loop's chunk
 * shrinks to ceil(remaining / nranks) so all ranks get work; trailing blocks
 * may be empty, and every rank computes the same sizes. This is where
 * block c of the loop at base lies (elements of the channel's share). */
GCOLL_KERNEL_FN void gcoll_ring_allreduce_block(const struct gcoll_ring_work *w, size_t chunk_max,
                                                size_t base, int c, size_t *off, size_t *len) {
  const size_t k = (size_t)w->nranks, rem = w->count - base;
  const size_t chunk = gcoll_min_size(chunk_max, (rem + k - 1) / k);
  *off = w->offset + base + (size_t)c * chunk;
  *len = (size_t)c * chunk >= rem ? 0 : gcoll_min_size(chunk, rem - (size_t)c * chunk);
}

/* The ring allreduce; with gather 0 only its reduce-scatter half: each
 * loop's own block (position pos) is finished into recvbuf and not sent
 * on, so that a single-copy allgather of those blocks (host_direct.h)
 * ends the call with the ring's bits. */
GCOLL_KERNEL_FN gcollResult_t gcoll_ring_allreduce_steps(struct gcoll_prims *p,
                                                         const struct gcoll_ring_work *w,
                                                         int gather) {
  const int k = w->nranks, pos = w->pos;
  gcoll_prims_bind(p, w->sendbuf, w->recvbuf);
  if (k == 1) return gcoll_prim_copy(p, w->offset, w->offset, w->count);
  const size_t chunk_max = gcoll_prims_chunk_elems(p);
  size_t off, len;
  for (size_t base = 0; base < w->count; base += (size_t)k * chunk_max) {
    gcoll_ring_allreduce_block(w, chunk_max, base, gcoll_ring_mod(pos - 1, k), &off, &len);
    GCOLL_ALGO_TRY(gcoll_prim_send(p, off, len));
    for (int s = 1; s < k - 1; s++) {
      gcoll_ring_allreduce_block(w, chunk_max, base, gcoll_ring_mod(pos - 1 - s, k), &off, &len);
      GCOLL_ALGO_TRY(gcoll_prim_recvReduceSend(p, off, len));
    }
    gcoll_ring_allreduce_block(w, chunk_max, base, pos, &off, &len);
    if (!gather) {
      GCOLL_ALGO_TRY(gcoll_prim_recvReduceCopy(p, off, off, len));
      continue;
    }
    GCOLL_ALGO_TRY(gcoll_prim_recvReduceCopySend(p, off, off, len));
    for (int s = 1; s < k - 1; s++) {
      gcoll_ring_allreduce_block(w, chunk_max, base, gcoll_ring_mod(pos - s, k), &off, &len);
      GCOLL_ALGO_TRY(gcoll_prim_recvCopySend(p, off, len));
    }
    gcoll_ring_allreduce_block(w, chunk_max, base, gcoll_ring_mod(pos + 1, k), &off, &len);
    GCOLL_ALGO_TRY(gcoll_prim_recv(p, off, len));
  }
  return gcollSuccess;
}

GCOLL_KERNEL_FN gcollResult_t gcoll_ring_allreduce(struct gcoll_prims *p,
                                                   const struct gcoll_ring_work *w) {
  return gcoll_ring_allreduce_steps(p, w, 1);
}

/* Step s moves the block of ring position pos-s: own block first (copied
 * into place and sent), then each received block is stored and passed on,
 * the last one only stored. */
GCOLL_KERNEL_FN gcollResult_t gcoll_ring_allgather(struct gcoll_prims *p,
                                                   const struct gcoll_ring_work *w) {
  const int k = w->nranks, pos = w->pos;
  gcoll_prims_bind(p, w->sendbuf, w->recvbuf);
  const size_t own = (size_t)w->ranks[pos] * w->stride + w->offset;
  if (k == 1) return gcoll_prim_copy(p, w->offset, own, w->count);
  const size_t chunk = gcoll_prims_chunk_elems(p);
  for (size_t base = 0; base < w->count; base += chunk) {
    const size_t n = gcoll_min_size(chunk, w->count - base);
    GCOLL_ALGO_TRY(gcoll_prim_copySend(p, w->offset + base, own + base, n));
    for (int s = 1; s < k; s++) {
      const int c = gcoll_ring_mod(pos - s, k);
      const size_t off = (size_t)w->ranks[c] * w->stride + w->offset + base;
      if (s < k - 1)
        GCOLL_ALGO_TRY(gcoll_prim_recvCopySend(p, off, n));
      else
        GCOLL_ALGO_TRY(gcoll_prim_recv(p, off, n));
    }
  }
  return gcollSuccess;
}

/* Step s reduces the block of ring position pos-1-s; the block that
 * arrives last is this rank's own, finished into recvbuf. */
GCOLL_KERNEL_FN gcollResult_t gcoll_ring_reducescatter(struct gcoll_prims *p,
                                                       const struct gcoll_ring_work *w) {
  const int k = w->nranks, pos = w->pos;
  gcoll_prims_bind(p, w->sendbuf, w->recvbuf);
#define GCOLL_SRC_OFF(c) ((size_t)w->ranks[(c)] * w->stride + w->offset + base)
  if (k == 1) {
    const size_t base = 0;
    return gcoll_prim_copy(p, GCOLL_SRC_OFF(pos), w->offset, w->count);
  }
  const size_t chunk = gcoll_prims_chunk_elems(p);
  for (size_t base = 0; base < w->count; base += chunk) {
    const size_t n = gcoll_min_size(chunk, w->count - base);
    GCOLL_ALGO_TRY(gcoll_prim_send(p, GCOLL_SRC_OFF(gcoll_ring_mod(pos - 1, k)), n));
    for (int s = 1; s < k - 1; s++)
      GCOLL_ALGO_TRY(
          gcoll_prim_recvReduceSend(p, GCOLL_SRC_OFF(gcoll_ring_mod(pos - 1 - s, k)), n));
    GCOLL_ALGO_TRY(gcoll_prim_recvReduceCopy(p, GCOLL_SRC_OFF(pos), w->offset + base, n));
  }
#undef GCOLL_SRC_OFF
  return gcollSuccess;
}

/* Pipeline from the root along the ring; the rank before the root only
 * receives. Flow is one-way, so whole shares go through the primitives
 * (they step slot by slot) without deadlock. */
GCOLL_KERNEL_FN gcollResult_t gcoll_ring_broadcast(struct gcoll_prims *p,
                                                   const struct gcoll_ring_work *w) {
  const int k = w->nranks, pos = w->pos;
  const int rp = gcoll_ring_pos_of(w, w->root);
  gcoll_prims_bind(p, w->sendbuf, w->recvbuf);
  if (rp < 0) return gcollInvalidArgument;
  if (k == 1) return gcoll_prim_copy(p, w->offset, w->offset, w->count);
  if (pos == rp) return gcoll_prim_copySend(p, w->offset, w->offset, w->count);
  if (gcoll_ring_mod(pos + 1, k) == rp) return gcoll_prim_recv(p, w->offset, w->count);
  return gcoll_prim_recvCopySend(p, w->offset, w->count);
}

/* Partial sums flow from the rank after the root around to the root. */
GCOLL_KERNEL_FN gcollResult_t gcoll_ring_reduce(struct gcoll_prims *p,
                                                const struct gcoll_ring_work *w) {
  const int k = w->nranks, pos = w->pos;
  const int rp = gcoll_ring_pos_of(w, w->root);
  gcoll_prims_bind(p, w->sendbuf, w->recvbuf);
  if (rp < 0) return gcollInvalidArgument;
  if (k == 1) return gcoll_prim_copy(p, w->offset, w->offset, w->count);
  if (pos == rp) return gcoll_prim_recvReduceCopy(p, w->offset, w->offset, w->count);
  if (pos == gcoll_ring_mod(rp + 1, k)) return gcoll_prim_send(p, w->offset, w->count);
  return gcoll_prim_recvReduceSend(p, w->offset, w->count);
}

#endif
