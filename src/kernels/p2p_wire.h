/* Send/recv messages as they cross a connection's FIFO, the same bytes
 * whichever side moves them (the calling thread on host buffers,
 * comm_p2p.c; the CUDA kernel on device buffers, p2p_device.cuh), so a
 * device send meets a host receive.
 *
 * A message is this 64-byte header followed by the data, cut into SIMPLE
 * FIFO steps of at most the slot size; the header shares the first step.
 * Messages on one connection follow each other in call order (NCCL's
 * matching rule: the k-th send to a peer meets that peer's k-th receive
 * from us), numbered by `seq` from 0. A zero-byte message is a header
 * alone. Plain C with fixed-width fields: it is compiled by nvcc too. */
#ifndef GCOLL_KERNELS_P2P_WIRE_H
#define GCOLL_KERNELS_P2P_WIRE_H

#include <stdint.h>

#define GCOLL_P2P_MAGIC 0x50325047u /* "GP2P" */
#define GCOLL_P2P_HEADER_BYTES 64u

struct gcoll_p2p_header {
  uint32_t magic;
  int32_t sender;
  uint64_t seq;
  uint64_t bytes;
  unsigned char reserved[GCOLL_P2P_HEADER_BYTES - 24];
};

#ifdef __cplusplus
static_assert(sizeof(struct gcoll_p2p_header) == GCOLL_P2P_HEADER_BYTES, "p2p header size");
#else
_Static_assert(sizeof(struct gcoll_p2p_header) == GCOLL_P2P_HEADER_BYTES, "p2p header size");
#endif

#endif
