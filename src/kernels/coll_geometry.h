/* The geometry of a collective: how a buffer splits into channels and which
 * bytes of sendbuf and recvbuf a rank touches. Every executor (host threads,
 * the CUDA kernel, the CUDA executor's launch checks) must agree on it byte
 * for byte, so it is written once, here, for the host compiler and nvcc
 * alike (plain C, no allocation, addresses as integers).
 *
 * Partition: each channel takes a contiguous element range of the buffer
 * (for allgather/reducescatter: of every rank's block), in channel order,
 * each ceil(count / nchannels) rounded up to 64 bytes of elements, so that
 * ranges start 64-byte aligned when the buffer does; the last channels may
 * get less or nothing.
 *
 * Buffers: broadcast reads sendbuf on the root only, reduce writes recvbuf
 * on the root only, allgather writes nranks blocks, reducescatter reads
 * nranks blocks. In place: sendbuf == recvbuf (allreduce, broadcast,
 * reduce), sendbuf == recvbuf + rank * block (allgather), recvbuf ==
 * sendbuf + rank * block (reducescatter); any other overlap is refused. */
#ifndef GCOLL_KERNELS_COLL_GEOMETRY_H
#define GCOLL_KERNELS_COLL_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "gcoll_plan.h"

#ifdef __CUDACC__
#define GCOLL_GEOM_FN __host__ __device__ static inline
#else
#define GCOLL_GEOM_FN static inline
#endif

/* Bytes of one element of a gcollDataType_t (8 for anything unknown: the
 * callers check types first). */
GCOLL_GEOM_FN size_t gcoll_geom_esize(int dtype) {
  switch (dtype) {
    case gcollInt8: case gcollUint8: return 1;
    case gcollFloat16: case gcollBfloat16: return 2;
    case gcollInt32: case gcollUint32: case gcollFloat32: return 4;
    default: return 8;
  }
}

/* Channel c's element range [*lo, *lo + *n) of count elements over nch
 * channels. */
GCOLL_GEOM_FN void gcoll_geom_partition(size_t count, size_t esize, int nch, int c, size_t *lo,
                                        size_t *n) {
  size_t align = esize >= 64 ? 1 : 64 / esize;
  size_t per = (count + (size_t)nch - 1) / (size_t)nch;
  per = (per + align - 1) / align * align;
  size_t l = (size_t)c * per < count ? (size_t)c * per : count;
  size_t h = count - l < per ? count : l + per;
  *lo = l;
  *n = h - l;
}

enum gcoll_geom_buffers {
  GCOLL_GEOM_OK = 0,
  GCOLL_GEOM_NULL,      /* a buffer the rank touches is NULL (0) */
  GCOLL_GEOM_OVERLAP    /* sendbuf and recvbuf overlap other than in place */
};

/* Whether this rank's buffers suit coll: count elements of esize bytes
 * (per rank for allgather and reducescatter; the caller checked that
 * count * esize * nranks does not overflow). */
GCOLL_GEOM_FN enum gcoll_geom_buffers gcoll_geom_check_buffers(int coll, uint64_t count,
                                                               uint64_t esize, int nranks,
                                                               int rank, int root, uint64_t send,
                                                               uint64_t recv) {
  const uint64_t bytes = count * esize, n = (uint64_t)nranks, own = (uint64_t)rank * bytes;
  uint64_t send_len = bytes, recv_len = bytes;
  int in_place = send == recv;
  switch (coll) {
    case GCOLL_COLL_BROADCAST: if (rank != root) send_len = 0; break;
    case GCOLL_COLL_REDUCE: if (rank != root) recv_len = 0; break;
    case GCOLL_COLL_ALLGATHER:
      recv_len = bytes * n;
      in_place = send == recv + own;
      break;
    case GCOLL_COLL_REDUCESCATTER:
      send_len = bytes * n;
      in_place = recv == send + own;
      break;
    default: break;
  }
  if ((send_len > 0 && send == 0) || (recv_len > 0 && recv == 0)) return GCOLL_GEOM_NULL;
  if (send_len > 0 && recv_len > 0 && !in_place && send < recv + recv_len &&
      recv < send + send_len)
    return GCOLL_GEOM_OVERLAP;
  return GCOLL_GEOM_OK;
}

#endif
