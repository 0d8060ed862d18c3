/* Checks of gcollSend/gcollRecv and groups, run as real ranks under gcollrun
 * (tests/integration/test_p2p.sh).
 *
 *   p2p_check exchange     ring exchange and all-to-all in groups, sizes 0 to
 *                          1M+3 elements of several types; blocking pairs
 *                          (even ranks send first, odd ranks receive first);
 *                          several messages to one peer in one group; self
 *                          send/recv; zero-count messages between others;
 *                          a group of two allreduces and a send/recv ring
 *   p2p_check colls        gcollAlltoAll, gcollGather, gcollScatter: every
 *                          datatype, counts 0, 1, 7, 13, 4099 and 65537
 *                          (many FIFO steps), roots 0 and last, out of place
 *                          and in place (NCCL's positions), NULL buffers
 *                          where a rank does not use them, every third call
 *                          in a group with an allreduce and a send/recv
 *                          ring; all three with an allreduce in one
 *                          (nested) group; an alltoall grouped behind a
 *                          receive whose blocking sender reaches its own
 *                          alltoall only once that receive runs (so a
 *                          grouped call must only queue); what they
 *                          refuse, one line each
 *                          (overlaps, NULL buffers, roots, type, overflow,
 *                          a stream with host buffers), and a refusal
 *                          poisoning its group. Unwritten guards, unused
 *                          buffers and send buffers are checked too
 *   p2p_check --device colls
 *                          the same calls on device buffers and a stream
 *                          (with $GCOLL_CUDA_DRIVER); refused: one buffer
 *                          of each kind, alltoall in place
 *   p2p_check mismatch     a receive of another size than the send fails with
 *                          gcollInvalidUsage and one line; the next exchange
 *                          between the same ranks still works
 *   p2p_check norecv MODE  rank 1 never receives what rank 0 sends: rank 0
 *                          fails within GCOLL_TIMEOUT. MODE fresh: the first
 *                          message (no connection yet); big: a message larger
 *                          than the connection's buffer after one that worked
 *   p2p_check --device async queue|mismatch|die|abort
 *                          device send/recv as queued GPU work: returns at
 *                          once, failures reported asynchronously (see
 *                          dev_async)
 *   p2p_check badargs      invalid arguments and group misuse are refused
 *   p2p_check abort        gcollCommAbort from another thread ends a receive
 *                          nobody sends to
 *   p2p_check die          rank 1 SIGKILLs itself; rank 0, waiting to
 *                          receive from it, fails with gcollRemoteError
 *                          naming rank 1
 *   p2p_check --device exchange
 *                          the same on CUDA device memory of GPU 0 (the
 *                          driver $GCOLL_CUDA_DRIVER names, e.g. the
 *                          emulator; tests/cudaemu/test_emu_sendrecv.sh):
 *                          every datatype at sizes 0, 1, primes and many
 *                          FIFO slots, as a ring and as all-pairs (self
 *                          included) in groups, on a stream and on the
 *                          legacy stream; device send to host receive and
 *                          host send to device receive; self send/recv
 *                          between every memory pair, past the bounce
 *                          buffer, overlapping; stream order (a send buffer
 *                          written, a receive buffer still being cleared,
 *                          by work queued on a non-blocking stream just
 *                          before the call; the received data read by work
 *                          queued after it); the result of a device
 *                          allreduce queued just before, sent on another
 *                          stream; with two GPUs, a call on GPU 0's
 *                          buffers while GPU 1's context is current (which
 *                          it must stay); a host buffer with a stream
 *                          refused; a failing driver copy reported
 *
 * Every byte sent is a function of (sender, receiver, message index, element
 * index, seed), so the receiver recomputes what it must get without any
 * communication. Prints one line per rank and exits 1 on any difference. */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"
#include "check_util.h"
#include "kernels/reduce.h"
#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"
#endif

/* count elements of esize bytes: what src sends dst as message msg. One
 * hash per 8 bytes keeps checking megabytes cheap on a loaded machine. */
static void fill(unsigned char *buf, size_t count, size_t esize, int src, int dst, uint64_t msg,
                 uint64_t seed) {
  uint64_t base = mix(seed ^ mix(((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^ msg));
  size_t bytes = count * esize;
  for (size_t w = 0; w * 8 < bytes; w++) {
    uint64_t h = mix(base + w);
    memcpy(buf + w * 8, &h, bytes - w * 8 < 8 ? bytes - w * 8 : 8);
  }
}

static long wrong_bytes(const unsigned char *got, size_t count, size_t esize, int src, int dst,
                        uint64_t msg, uint64_t seed, unsigned char *scratch) {
  fill(scratch, count, esize, src, dst, msg, seed);
  size_t bytes = count * esize;
  if (memcmp(got, scratch, bytes) == 0) return 0;
  long wrong = 0;
  size_t first = bytes, last = 0;
  for (size_t i = 0; i < bytes; i++)
    if (got[i] != scratch[i]) {
      wrong++;
      if (first == bytes) first = i;
      last = i;
    }
  /* What the wrong bytes hold tells a stale buffer (its old fill) from a
   * misdirected message (another sender's pattern). */
  fprintf(stderr, "rank %d: message %llu from %d: bytes %zu..%zu of %zu wrong, first 0x%02x "
          "(want 0x%02x)\n", rank, (unsigned long long)msg, src, first, last, bytes, got[first],
          scratch[first]);
  return wrong;
}

/* ---- exchange ----------------------------------------------------------------- */

struct bufs {
  unsigned char *send, *recv, *scratch;
  size_t cap;                 /* bytes per peer block */
};

/* Ring: send to next, receive from prev, in one group. */
static long ring(gcollComm_t comm, struct bufs *b, gcollDataType_t t, size_t count,
                 uint64_t seed) {
  size_t es = gcoll_dtype_size(t);
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  fill(b->send, count, es, rank, next, 0, seed);
  memset(b->recv, 0xa5, count * es + 64);
  gcollGroupStart();
  gcollResult_t rc = gcollSend(b->send, count, t, next, comm, NULL);
  gcollResult_t rc2 = gcollRecv(b->recv, count, t, prev, comm, NULL);
  gcollResult_t rc3 = gcollGroupEnd();
  char what[96];
  snprintf(what, sizeof(what), "ring %s count %zu", gcoll_dtype_name(t), count);
  if (check_gcoll(rc, what) || check_gcoll(rc2, what) || check_gcoll(rc3, what)) return -1;
  long wrong = wrong_bytes(b->recv, count, es, prev, rank, 0, seed, b->scratch);
  for (size_t i = 0; i < 64; i++) wrong += b->recv[count * es + i] != 0xa5;
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* All-to-all: every rank sends block dst to dst (itself included), posted
 * in a rank-dependent order so that no two ranks post alike. */
static long alltoall(gcollComm_t comm, struct bufs *b, gcollDataType_t t, size_t count,
                     uint64_t seed) {
  size_t es = gcoll_dtype_size(t), bytes = count * es;
  for (int p = 0; p < nranks; p++) {
    fill(b->send + (size_t)p * b->cap, count, es, rank, p, 1, seed);
    memset(b->recv + (size_t)p * b->cap, 0xa5, bytes + 64);
  }
  gcollResult_t rc = gcollGroupStart();
  for (int k = 0; k < nranks && rc == gcollSuccess; k++) {
    int to = (rank + k) % nranks, from = (rank + nranks - k) % nranks;
    unsigned char *out = b->send + (size_t)to * b->cap, *in = b->recv + (size_t)from * b->cap;
    if (rank % 2) {
      rc = gcollRecv(in, count, t, from, comm, NULL);
      if (rc == gcollSuccess) rc = gcollSend(out, count, t, to, comm, NULL);
    } else {
      rc = gcollSend(out, count, t, to, comm, NULL);
      if (rc == gcollSuccess) rc = gcollRecv(in, count, t, from, comm, NULL);
    }
  }
  gcollResult_t end = gcollGroupEnd();
  char what[96];
  snprintf(what, sizeof(what), "alltoall %s count %zu", gcoll_dtype_name(t), count);
  if (check_gcoll(rc, what) || check_gcoll(end, what)) return -1;
  long wrong = 0;
  for (int p = 0; p < nranks; p++) {
    const unsigned char *got = b->recv + (size_t)p * b->cap;
    wrong += wrong_bytes(got, count, es, p, rank, 1, seed, b->scratch);
    for (size_t i = 0; i < 64; i++) wrong += got[bytes + i] != 0xa5;
  }
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* Blocking calls between partners rank ^ 1: even ranks send first. */
static long pairs(gcollComm_t comm, struct bufs *b, size_t count, uint64_t seed) {
  int partner = rank ^ 1;
  if (partner >= nranks) return 0;
  gcollDataType_t t = gcollBfloat16;
  size_t es = 2;
  fill(b->send, count, es, rank, partner, 2, seed);
  memset(b->recv, 0xa5, count * es);
  gcollResult_t rc1, rc2;
  if (rank % 2 == 0) {
    rc1 = gcollSend(b->send, count, t, partner, comm, NULL);
    rc2 = gcollRecv(b->recv, count, t, partner, comm, NULL);
  } else {
    rc2 = gcollRecv(b->recv, count, t, partner, comm, NULL);
    rc1 = gcollSend(b->send, count, t, partner, comm, NULL);
  }
  char what[64];
  snprintf(what, sizeof(what), "blocking pair count %zu", count);
  if (check_gcoll(rc1, what) || check_gcoll(rc2, what)) return -1;
  long wrong = wrong_bytes(b->recv, count, es, partner, rank, 2, seed, b->scratch);
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* Several messages of different sizes to next in one group; prev receives
 * them with blocking calls, in order: each must be the one sent in that
 * position. Sizes are such that a swap would also change the size. */
#define NORDER 5
static long order(gcollComm_t comm, struct bufs *b, uint64_t seed) {
  static const size_t counts[NORDER] = {3, 70000, 0, 1, 40000};
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  size_t off[NORDER + 1] = {0};
  for (int m = 0; m < NORDER; m++) off[m + 1] = off[m] + counts[m] * 8;
  for (int m = 0; m < NORDER; m++) fill(b->send + off[m], counts[m], 8, rank, next, 10 + m, seed);
  memset(b->recv, 0xa5, off[NORDER]);
  gcollResult_t rc = gcollGroupStart();
  for (int m = 0; m < NORDER && rc == gcollSuccess; m++)
    rc = gcollSend(b->send + off[m], counts[m], gcollUint64, next, comm, NULL);
  /* Odd ranks run their group first, even ones receive first: both orders
   * of "group of sends" and "blocking receives" meet. */
  gcollResult_t end = gcollSuccess;
  if (rank % 2) end = gcollGroupEnd();
  for (int m = 0; m < NORDER && rc == gcollSuccess; m++)
    rc = gcollRecv(b->recv + off[m], counts[m], gcollUint64, prev, comm, NULL);
  if (rank % 2 == 0) end = gcollGroupEnd();
  if (check_gcoll(rc, "ordered messages") || check_gcoll(end, "ordered messages")) return -1;
  long wrong = 0;
  for (int m = 0; m < NORDER; m++)
    wrong += wrong_bytes(b->recv + off[m], counts[m], 8, prev, rank, 10 + m, seed, b->scratch);
  if (wrong) fprintf(stderr, "rank %d: ordered messages: %ld wrong bytes\n", rank, wrong);
  return wrong;
}

/* Two sends to self and two receives from self in one group, sizes differ,
 * plus a send alone to self outside a group, which must be refused. */
static long self(gcollComm_t comm, struct bufs *b, uint64_t seed) {
  size_t c0 = 5, c1 = 9000;
  fill(b->send, c0, 2, rank, rank, 20, seed);
  fill(b->send + b->cap, c1, 2, rank, rank, 21, seed);
  gcollGroupStart();
  gcollResult_t rc = gcollRecv(b->recv, c0, gcollHalf, rank, comm, NULL);
  if (rc == gcollSuccess) rc = gcollSend(b->send, c0, gcollHalf, rank, comm, NULL);
  if (rc == gcollSuccess) rc = gcollSend(b->send + b->cap, c1, gcollHalf, rank, comm, NULL);
  if (rc == gcollSuccess) rc = gcollRecv(b->recv + b->cap, c1, gcollHalf, rank, comm, NULL);
  gcollResult_t end = gcollGroupEnd();
  if (check_gcoll(rc, "self") || check_gcoll(end, "self")) return -1;
  long wrong = wrong_bytes(b->recv, c0, 2, rank, rank, 20, seed, b->scratch) +
               wrong_bytes(b->recv + b->cap, c1, 2, rank, rank, 21, seed, b->scratch);
  rc = gcollSend(b->send, 4, gcollInt32, rank, comm, NULL);
  if (rc != gcollInvalidUsage) {
    fprintf(stderr, "rank %d: a lone send to self returned %s\n", rank, gcollGetErrorString(rc));
    wrong++;
  }
  if (wrong) fprintf(stderr, "rank %d: self: %ld wrong\n", rank, wrong);
  return wrong;
}

static int exchange(gcollComm_t comm) {
  static const size_t sizes[] = {0, 1, 7, 1023, 4097, (1u << 20) + 3};
  static const gcollDataType_t types[] = {gcollInt8, gcollFloat16, gcollFloat32, gcollFloat64};
  int nsizes = 6, ntypes = 4;
  struct bufs b;
  b.cap = ((1u << 20) + 3) * 2 + 128;
  size_t blocks = nranks < 2 ? 2 : (size_t)nranks;  /* self() uses two */
  b.send = xmalloc(b.cap * blocks);
  b.recv = xmalloc(b.cap * blocks);
  b.scratch = xmalloc(b.cap);
  long wrong = 0, calls = 0, w;
  uint64_t seed = 777;
  double t0 = now_s();
  for (int ti = 0; ti < ntypes; ti++)
    for (int s = 0; s < nsizes; s++) {
      /* The largest size is about chunking, not types: two types. */
      if (s == nsizes - 1 && types[ti] != gcollInt8 && types[ti] != gcollFloat16) continue;
      if ((w = ring(comm, &b, types[ti], sizes[s], seed + (uint64_t)calls++)) < 0) return 1;
      wrong += w;
      if ((w = alltoall(comm, &b, types[ti], sizes[s], seed + (uint64_t)calls++)) < 0) return 1;
      wrong += w;
    }
  for (int s = 0; s < nsizes; s++) {
    if ((w = pairs(comm, &b, sizes[s], seed + (uint64_t)calls++)) < 0) return 1;
    wrong += w;
  }
  for (int k = 0; k < 3 && nranks > 1; k++) {
    if ((w = order(comm, &b, seed + (uint64_t)calls++)) < 0) return 1;
    wrong += w;
  }
  if ((w = self(comm, &b, seed + (uint64_t)calls++)) < 0) return 1;
  wrong += w;
  /* Collectives and send/recv share the communicator. */
  float x = (float)(rank + 1);
  if (check_gcoll(gcollAllReduce(&x, &x, 1, gcollFloat, gcollSum, comm, NULL), "allreduce after"))
    return 1;
  wrong += x != (float)nranks * (nranks + 1) / 2;
  /* Collectives grouped with sends and receives, between processes. */
  int32_t v[3] = {rank, 2 * rank, 3 * rank}, sum[3] = {0}, top = rank, token = 7 * rank, in = -1;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  gcollGroupStart();
  gcollAllReduce(v, sum, 3, gcollInt32, gcollSum, comm, NULL);
  gcollSend(&token, 1, gcollInt32, next, comm, NULL);
  gcollRecv(&in, 1, gcollInt32, prev, comm, NULL);
  gcollAllReduce(&top, &top, 1, gcollInt32, gcollMax, comm, NULL);
  if (check_gcoll(gcollGroupEnd(), "group of collectives and send/recv")) return 1;
  for (int i = 0; i < 3; i++) wrong += sum[i] != (i + 1) * nranks * (nranks - 1) / 2;
  wrong += (top != nranks - 1) + (in != 7 * prev);
  printf("rank %d: %ld exchanges, %ld wrong bytes, %.2f s\n", rank, calls, wrong, now_s() - t0);
  free(b.send);
  free(b.recv);
  free(b.scratch);
  return wrong ? 1 : 0;
}

/* ---- device buffers (--device) ------------------------------------------------- */

#ifdef HAVE_CUDA
static const struct gcoll_cuda_api *cu;
static void *dstream;             /* this rank's non-blocking CUstream */
/* Stream-ordered calls the loader does not have, from the same driver. */
static int (*htod_async)(gcoll_cu_deviceptr dst, const void *src, size_t n, void *stream);
static int (*dtoh_async)(void *dst, gcoll_cu_deviceptr src, size_t n, void *stream);
static int (*memset_async)(gcoll_cu_deviceptr dst, unsigned char v, size_t n, void *stream);

#define DPTR(p) ((gcoll_cu_deviceptr)(uintptr_t)(p))

static void cuda_or_die(gcoll_cu_result r, const char *what) {
  if (r == GCOLL_CU_SUCCESS) return;
  fprintf(stderr, "rank %d: --device: %s: %s\n", rank, what, gcoll_cuda_result_text(cu, r));
  exit(2);
}

/* GPU 0's primary context current on this thread, a non-blocking stream,
 * and the async calls from the driver gcoll loads: $GCOLL_CUDA_DRIVER, else
 * the system's libcuda.so.1. */
static void dev_open(void) {
  char err[256];
  int ndev = 0;
  gcoll_cu_device dev;
  gcoll_cu_context ctx;
  const char *path = getenv("GCOLL_CUDA_DRIVER");
  if (path == NULL || *path == '\0') path = "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h != NULL) {
    *(void **)&htod_async = dlsym(h, "cuMemcpyHtoDAsync_v2");
    *(void **)&dtoh_async = dlsym(h, "cuMemcpyDtoHAsync_v2");
    *(void **)&memset_async = dlsym(h, "cuMemsetD8Async");
  }
  if (htod_async == NULL || dtoh_async == NULL || memset_async == NULL) {
    fprintf(stderr, "rank %d: --device: no async copies in the CUDA driver %s\n", rank, path);
    exit(2);
  }
  if (gcoll_cuda_probe(&ndev, err, sizeof(err)) != GCOLL_CUDA_AVAILABLE ||
      (cu = gcoll_cuda_api_get(err, sizeof(err))) == NULL ||
      gcoll_cuda_use_device(cu, 0, &dev, &ctx, err, sizeof(err)) != 0) {
    fprintf(stderr, "rank %d: --device: %s\n", rank, err);
    exit(2);
  }
  cuda_or_die(cu->stream_create((gcoll_cu_stream *)&dstream, GCOLL_CU_STREAM_NON_BLOCKING),
              "cuStreamCreate");
}

/* Device fills done now. The driver's synchronous copy from pageable
 * memory returns once the data is staged, before it reaches the device,
 * and both it and cuMemsetD8 run on the legacy stream, which a
 * non-blocking stream's later work does not wait for: a check that fills
 * a buffer and then queues a send on dstream must wait for the legacy
 * stream first (on an H100 under MPS, the GPU read the last 16 KB of a
 * send buffer before the copy landed otherwise). */
static void htod_now(void *dst, const void *src, size_t bytes) {
  cuda_or_die(cu->memcpy_htod(DPTR(dst), src, bytes), "cuMemcpyHtoD");
  cuda_or_die(cu->stream_synchronize(NULL), "cuStreamSynchronize (legacy stream)");
}

static void memset_now(void *dst, unsigned char value, size_t bytes) {
  cuda_or_die(cu->memset_d8(DPTR(dst), value, bytes), "cuMemsetD8");
  cuda_or_die(cu->stream_synchronize(NULL), "cuStreamSynchronize (legacy stream)");
}

static unsigned char *dev_alloc(size_t bytes) {
  gcoll_cu_deviceptr p = 0;
  cuda_or_die(cu->mem_alloc(&p, bytes), "cuMemAlloc");
  memset_now((void *)(uintptr_t)p, 0, bytes);
  return (unsigned char *)(uintptr_t)p;
}

/* A checked exchange's buffers: device blocks and their host twins. */
struct dbufs {
  unsigned char *dsend, *drecv;   /* device, nranks blocks of cap */
  unsigned char *hsend, *hrecv;   /* host, the same */
  unsigned char *got, *scratch;   /* host, one block */
  size_t cap, blocks;
};

/* Message msg of count elements from rank to dst in block blk of the
 * send buffer, in device memory or host memory; the address to send. */
static unsigned char *put_send(struct dbufs *b, int on_dev, int blk, size_t count, size_t es,
                               int dst, uint64_t msg, uint64_t seed) {
  unsigned char *h = b->hsend + (size_t)blk * b->cap;
  fill(h, count, es, rank, dst, msg, seed);
  if (!on_dev) return h;
  unsigned char *d = b->dsend + (size_t)blk * b->cap;
  htod_now(d, h, count * es);
  return d;
}

/* Block blk of the receive buffer, set to 0xa5 for bytes + 64 (the 64
 * bytes after the message must stay so). */
static unsigned char *put_recv(struct dbufs *b, int on_dev, int blk, size_t bytes) {
  if (!on_dev) return memset(b->hrecv + (size_t)blk * b->cap, 0xa5, bytes + 64);
  unsigned char *d = b->drecv + (size_t)blk * b->cap;
  memset_now(d, 0xa5, bytes + 64);
  return d;
}

/* Wrong bytes in what arrived at p (device or host memory), against what
 * src generated, and in the 64 bytes after it. */
static long check_recv(struct dbufs *b, int on_dev, const unsigned char *p, size_t count,
                       size_t es, int src, uint64_t msg, uint64_t seed) {
  size_t bytes = count * es;
  /* Device send/recv is queued on the stream (as NCCL's): the caller
   * synchronizes it before reading (the legacy stream too, for mode 1). */
  if (on_dev) {
    cuda_or_die(cu->stream_synchronize(dstream), "cuStreamSynchronize");
    cuda_or_die(cu->stream_synchronize(NULL), "cuStreamSynchronize(legacy)");
    cuda_or_die(cu->memcpy_dtoh(b->got, DPTR(p), bytes + 64), "cuMemcpyDtoH");
  }
  else memcpy(b->got, p, bytes + 64);
  long wrong = wrong_bytes(b->got, count, es, src, rank, msg, seed, b->scratch);
  for (size_t i = 0; i < 64; i++) wrong += b->got[bytes + i] != 0xa5;
  return wrong;
}

/* Ring in a group: send to next, receive from prev. mode 0: device
 * buffers on the stream; 1: device buffers on the legacy stream (NULL);
 * 2: mixed, even ranks send from device memory and receive into host
 * memory, odd ranks the other way round (so device send meets host
 * receive and host send meets device receive). */
static long dev_ring(gcollComm_t comm, struct dbufs *b, gcollDataType_t t, size_t count,
                     int mode, uint64_t seed) {
  size_t es = gcoll_dtype_size(t), bytes = count * es;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  int send_dev = mode < 2 || rank % 2 == 0, recv_dev = mode < 2 || rank % 2 == 1;
  void *stream = mode == 1 ? NULL : dstream;
  unsigned char *out = put_send(b, send_dev, 0, count, es, next, 3, seed);
  unsigned char *in = put_recv(b, recv_dev, 0, bytes);
  gcollGroupStart();
  gcollResult_t rc = gcollSend(out, count, t, next, comm, send_dev ? stream : NULL);
  gcollResult_t rc2 = gcollRecv(in, count, t, prev, comm, recv_dev ? stream : NULL);
  gcollResult_t rc3 = gcollGroupEnd();
  char what[128];
  snprintf(what, sizeof(what), "device ring (%s) %s count %zu",
           mode == 0 ? "stream" : mode == 1 ? "legacy stream" : "mixed", gcoll_dtype_name(t),
           count);
  if (check_gcoll(rc, what) || check_gcoll(rc2, what) || check_gcoll(rc3, what)) return -1;
  long wrong = check_recv(b, recv_dev, in, count, es, prev, 3, seed);
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* All pairs in a group, self included, device buffers on the stream,
 * posted in a rank-dependent order. */
static long dev_alltoall(gcollComm_t comm, struct dbufs *b, gcollDataType_t t, size_t count,
                         uint64_t seed) {
  size_t es = gcoll_dtype_size(t), bytes = count * es;
  unsigned char *out[64], *in[64];
  for (int p = 0; p < nranks; p++) {
    out[p] = put_send(b, 1, p, count, es, p, 4, seed);
    in[p] = put_recv(b, 1, p, bytes);
  }
  gcollResult_t rc = gcollGroupStart();
  for (int k = 0; k < nranks && rc == gcollSuccess; k++) {
    int to = (rank + k) % nranks, from = (rank + nranks - k) % nranks;
    if (rank % 2) {
      rc = gcollRecv(in[from], count, t, from, comm, dstream);
      if (rc == gcollSuccess) rc = gcollSend(out[to], count, t, to, comm, dstream);
    } else {
      rc = gcollSend(out[to], count, t, to, comm, dstream);
      if (rc == gcollSuccess) rc = gcollRecv(in[from], count, t, from, comm, dstream);
    }
  }
  gcollResult_t end = gcollGroupEnd();
  char what[96];
  snprintf(what, sizeof(what), "device all-pairs %s count %zu", gcoll_dtype_name(t), count);
  if (check_gcoll(rc, what) || check_gcoll(end, what)) return -1;
  long wrong = 0;
  for (int p = 0; p < nranks; p++) wrong += check_recv(b, 1, in[p], count, es, p, 4, seed);
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* Self send/recv in one group for every pair of memory kinds, device to
 * device past the 1 MiB bounce buffer; then device to device within one
 * buffer, overlapping, upwards and downwards (both must read the source
 * as it was before the call, as memmove). */
static long dev_self(gcollComm_t comm, struct dbufs *b, uint64_t seed) {
  static const size_t counts[4] = {300001, 4099, 7, 0};   /* in int64: 2.4 MB first */
  long wrong = 0;
  gcollResult_t rc = gcollGroupStart();
  unsigned char *in[4];
  for (int k = 0; k < 4 && rc == gcollSuccess; k++) {
    int send_dev = k != 2, recv_dev = k != 1;   /* dd, dh, hd, dd */
    unsigned char *out = put_send(b, send_dev, k, counts[k], 8, rank, 50 + (uint64_t)k, seed);
    in[k] = put_recv(b, recv_dev, k, counts[k] * 8);
    rc = gcollSend(out, counts[k], gcollInt64, rank, comm, send_dev ? dstream : NULL);
    if (rc == gcollSuccess)
      rc = gcollRecv(in[k], counts[k], gcollInt64, rank, comm, recv_dev ? dstream : NULL);
  }
  gcollResult_t end = gcollGroupEnd();
  if (check_gcoll(rc, "device self") || check_gcoll(end, "device self")) return -1;
  for (int k = 0; k < 4; k++)
    wrong += check_recv(b, k != 1, in[k], counts[k], 8, rank, 50 + (uint64_t)k, seed);
  /* Overlaps: 2.4 MB moved by +1000 and by -1000 bytes inside block 0. */
  size_t n = counts[0] * 8;
  for (int up = 0; up < 2; up++) {
    unsigned char *base = b->dsend, *src = base + (up ? 0 : 1000), *dst = base + (up ? 1000 : 0);
    fill(b->hsend, counts[0], 8, rank, rank, 60 + (uint64_t)up, seed);
    htod_now(src, b->hsend, n);
    gcollGroupStart();
    gcollRecv(dst, counts[0], gcollInt64, rank, comm, dstream);
    gcollSend(src, counts[0], gcollInt64, rank, comm, dstream);
    if (check_gcoll(gcollGroupEnd(), "device self, overlapping")) return -1;
    cuda_or_die(cu->stream_synchronize(dstream), "cuStreamSynchronize");
    cuda_or_die(cu->memcpy_dtoh(b->got, DPTR(dst), n), "cuMemcpyDtoH");
    long w = wrong_bytes(b->got, counts[0], 8, rank, rank, 60 + (uint64_t)up, seed, b->scratch);
    if (w) fprintf(stderr, "rank %d: self copy moved %s: %ld wrong\n", rank, up ? "up" : "down", w);
    wrong += w;
  }
  if (wrong) fprintf(stderr, "rank %d: device self: %ld wrong\n", rank, wrong);
  return wrong;
}

/* Stream order on a non-blocking stream (which the driver's synchronous
 * copies do not wait for): just before the ring, the stream gets a long
 * copy, then (sender) the message into the send buffer, (receiver) a
 * clearing of the receive buffer; after it, the received data is read by
 * a copy on the stream. Without the stream synchronized first, the send
 * would read the old contents and the clearing would land on what
 * arrived. */
static long dev_stream_order(gcollComm_t comm, struct dbufs *b, unsigned char *djunk,
                             unsigned char *hjunk, size_t junk, uint64_t seed) {
  size_t count = 30011, es = 4, bytes = count * es;   /* many 4 KiB steps */
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  unsigned char *out = b->dsend, *in = b->drecv;
  memset_now(out, 0x11, bytes);
  put_recv(b, 1, 0, bytes);
  fill(b->hsend, count, es, rank, next, 7, seed);
  cuda_or_die(htod_async(DPTR(djunk), hjunk, junk, dstream), "cuMemcpyHtoDAsync");
  cuda_or_die(htod_async(DPTR(out), b->hsend, bytes, dstream), "cuMemcpyHtoDAsync");
  cuda_or_die(htod_async(DPTR(djunk), hjunk, junk, dstream), "cuMemcpyHtoDAsync");
  cuda_or_die(memset_async(DPTR(in), 0x5a, bytes, dstream), "cuMemsetD8Async");
  gcollGroupStart();
  gcollSend(out, count, gcollUint32, next, comm, dstream);
  gcollRecv(in, count, gcollUint32, prev, comm, dstream);
  if (check_gcoll(gcollGroupEnd(), "stream order")) return -1;
  memset(b->got, 0, bytes + 64);
  cuda_or_die(dtoh_async(b->got, DPTR(in), bytes + 64, dstream), "cuMemcpyDtoHAsync");
  cuda_or_die(cu->stream_synchronize(dstream), "cuStreamSynchronize");
  long wrong = wrong_bytes(b->got, count, es, prev, rank, 7, seed, b->scratch);
  for (size_t i = 0; i < 64; i++) wrong += b->got[bytes + i] != 0xa5;
  if (wrong) fprintf(stderr, "rank %d: stream order: %ld wrong bytes\n", rank, wrong);
  return wrong;
}

/* A ring on device buffers of GPU 0 called while GPU 1's context is
 * current (an emulator with two devices): the run makes GPU 0's primary
 * context current for its copies and leaves GPU 1's current. 0 when there
 * is one GPU only. */
static long dev_other_context(gcollComm_t comm, struct dbufs *b, uint64_t seed) {
  int ndev = 0;
  gcoll_cu_device dev1;
  gcoll_cu_context mine = NULL, other = NULL, during = NULL;
  if (cu->device_get_count(&ndev) != GCOLL_CU_SUCCESS || ndev < 2) return 0;
  size_t count = 9973, es = 2;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  unsigned char *out = put_send(b, 1, 0, count, es, next, 9, seed);
  unsigned char *in = put_recv(b, 1, 0, count * es);
  cuda_or_die(cu->ctx_get_current(&mine), "cuCtxGetCurrent");
  cuda_or_die(cu->device_get(&dev1, 1), "cuDeviceGet");
  cuda_or_die(cu->primary_ctx_retain(&other, dev1), "cuDevicePrimaryCtxRetain");
  cuda_or_die(cu->ctx_set_current(other), "cuCtxSetCurrent");
  gcollGroupStart();
  gcollSend(out, count, gcollFloat16, next, comm, dstream);
  gcollRecv(in, count, gcollFloat16, prev, comm, NULL);
  gcollResult_t rc = gcollGroupEnd();
  cu->ctx_get_current(&during);
  cuda_or_die(cu->ctx_set_current(mine), "cuCtxSetCurrent");
  if (check_gcoll(rc, "ring on GPU 0 with GPU 1 current")) return -1;
  long wrong = check_recv(b, 1, in, count, es, prev, 9, seed);
  if (wrong || during != other)
    fprintf(stderr, "rank %d: ring on GPU 0 with GPU 1 current: %ld wrong bytes; context after "
            "%p, GPU 1's %p\n", rank, wrong, (void *)during, (void *)other);
  cu->primary_ctx_release(dev1);
  printf("rank %d: ring on GPU 0 with GPU 1's context current: %s\n", rank,
         wrong || during != other ? "FAILED" : "ok");
  return wrong + (during != other);
}

/* A device allreduce queued on the stream (it returns once queued), its
 * result then sent on the legacy stream: the send must come after the
 * communicator's earlier collective. */
static long dev_after_collective(gcollComm_t comm, struct dbufs *b, uint64_t seed) {
  size_t count = 50021, bytes = count * 4;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  uint32_t *want = (uint32_t *)b->scratch, *part = (uint32_t *)b->hrecv;
  memset(want, 0, bytes);
  for (int r = 0; r < nranks; r++) {   /* the sum, wrapping, in rank order */
    fill((unsigned char *)part, count, 4, r, 0, 8, seed);
    for (size_t i = 0; i < count; i++) want[i] += part[i];
  }
  unsigned char *mine = put_send(b, 1, 0, count, 4, 0, 8, seed), *sum = b->dsend + b->cap;
  unsigned char *in = put_recv(b, 1, 0, bytes);
  if (check_gcoll(gcollAllReduce(mine, sum, count, gcollUint32, gcollSum, comm, dstream),
                  "device allreduce before a send"))
    return -1;
  gcollGroupStart();
  gcollSend(sum, count, gcollUint32, next, comm, NULL);
  gcollRecv(in, count, gcollUint32, prev, comm, NULL);
  if (check_gcoll(gcollGroupEnd(), "send of an allreduce's result")) return -1;
  cuda_or_die(cu->memcpy_dtoh(b->got, DPTR(in), bytes), "cuMemcpyDtoH");
  long wrong = 0;
  for (size_t i = 0; i < bytes; i++) wrong += b->got[i] != ((unsigned char *)want)[i];
  if (wrong) fprintf(stderr, "rank %d: send after a device allreduce: %ld wrong bytes\n", rank,
                     wrong);
  return wrong;
}

/* A host buffer with a stream is refused, alone or in a group (which is
 * then not run); a failing driver copy fails the call in one line; a NULL
 * buffer of count 0 goes with a stream, over connections still in step. */
static long dev_refusals(gcollComm_t comm, struct dbufs *b) {
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  long bad = 0;
  gcollResult_t rc = gcollSend(b->hsend, 16, gcollFloat, next, comm, dstream);
  bad += rc != gcollInvalidUsage || strstr(gcollGetLastError(NULL), "host buffer") == NULL;
  printf("rank %d: host send buffer with a stream: %s: %s\n", rank, gcollGetErrorString(rc),
         gcollGetLastError(NULL));
  rc = gcollRecv(b->hrecv, 0, gcollFloat, prev, comm, dstream);
  bad += rc != gcollInvalidUsage || strstr(gcollGetLastError(NULL), "host buffer") == NULL;
  printf("rank %d: host receive buffer with a stream: %s: %s\n", rank, gcollGetErrorString(rc),
         gcollGetLastError(NULL));
  gcollGroupStart();
  gcollSend(b->dsend, 16, gcollFloat, next, comm, dstream);
  gcollRecv(b->hrecv, 16, gcollFloat, prev, comm, dstream);
  bad += gcollGroupEnd() != gcollInvalidUsage;
  /* A driver copy that fails (a send buffer running past its allocation)
   * fails the call with the driver's error in one line. */
  gcollGroupStart();
  gcollSend(b->dsend + b->cap * b->blocks - 16, 64, gcollInt8, rank, comm, dstream);
  gcollRecv(b->hrecv, 64, gcollInt8, rank, comm, NULL);
  rc = gcollGroupEnd();
  const char *why = gcollGetLastError(NULL);
  bad += rc != gcollUnhandledCudaError || strstr(why, "cuMemcpyDtoH") == NULL ||
         strstr(why, "CUDA_ERROR_INVALID_VALUE") == NULL || strchr(why, '\n') != NULL;
  printf("rank %d: send past the end of a device buffer: %s: %s\n", rank,
         gcollGetErrorString(rc), why);
  /* Then (the connections still in step) a NULL buffer of count 0 goes
   * with a stream. */
  gcollGroupStart();
  gcollSend(NULL, 0, gcollFloat, next, comm, dstream);
  gcollRecv(NULL, 0, gcollFloat, prev, comm, dstream);
  bad += check_gcoll(gcollGroupEnd(), "NULL buffers of count 0 with a stream") != 0;
  if (bad) fprintf(stderr, "rank %d: device refusals: %ld wrong\n", rank, bad);
  return bad;
}

static int dev_exchange(gcollComm_t comm) {
  static const size_t sizes[] = {0, 1, 7, 13, 4099, 65537};
  const int nsizes = 6;
  if (nranks > 64) return 2;
  dev_open();
  struct dbufs b;
  b.cap = 300001 * 8 + 2048;   /* dev_self's largest, with room to overlap */
  b.blocks = nranks < 4 ? 4 : (size_t)nranks;
  b.dsend = dev_alloc(b.cap * b.blocks);
  b.drecv = dev_alloc(b.cap * b.blocks);
  b.hsend = xmalloc(b.cap * b.blocks);
  b.hrecv = xmalloc(b.cap * b.blocks);
  b.got = xmalloc(b.cap);
  b.scratch = xmalloc(b.cap);
  size_t junk = 32u << 20;
  unsigned char *djunk = dev_alloc(junk), *hjunk = xmalloc(junk);
  long wrong = 0, calls = 0, w;
  uint64_t seed = 4242;
  double t0 = now_s();
  for (int t = 0; t < gcollNumTypes; t++)
    for (int s = 0; s < nsizes; s++) {
      /* The largest size is about many steps, not types: two types. */
      if (s == nsizes - 1 && t != gcollInt8 && t != gcollFloat64) continue;
      int mode = (int)(calls % 3);
      w = dev_ring(comm, &b, (gcollDataType_t)t, sizes[s], mode, seed + (uint64_t)calls++);
      if (w < 0) return 1;
      wrong += w;
      if ((w = dev_alltoall(comm, &b, (gcollDataType_t)t, sizes[s], seed + (uint64_t)calls++)) < 0)
        return 1;
      wrong += w;
    }
  /* Every ring mode at a multi-step size. */
  for (int mode = 0; mode < 3; mode++) {
    w = dev_ring(comm, &b, gcollBfloat16, 20011, mode, seed + (uint64_t)calls++);
    if (w < 0) return 1;
    wrong += w;
  }
  if ((w = dev_self(comm, &b, seed + (uint64_t)calls++)) < 0) return 1;
  wrong += w;
  for (int k = 0; k < 3; k++) {
    if ((w = dev_stream_order(comm, &b, djunk, hjunk, junk, seed + (uint64_t)calls++)) < 0)
      return 1;
    wrong += w;
  }
  if ((w = dev_after_collective(comm, &b, seed + (uint64_t)calls++)) < 0) return 1;
  wrong += w;
  if ((w = dev_other_context(comm, &b, seed + (uint64_t)calls++)) < 0) return 1;
  wrong += w;
  wrong += dev_refusals(comm, &b);
  printf("rank %d: device: %ld exchanges, %ld wrong bytes, %.2f s\n", rank, calls, wrong,
         now_s() - t0);
  free(b.hsend);
  free(b.hrecv);
  free(b.got);
  free(b.scratch);
  free(hjunk);
  return wrong ? 1 : 0;
}

/* The asynchronous side of device send/recv (queued on the stream, moved by
 * the GPU), on ranks 0 and 1 after one exchange connected them:
 *   queue     rank 1 posts its receive 2 s late; rank 0's 32 MiB send (many
 *             times what the connection buffers) returns at once, and its
 *             stream is done only once rank 1 received; the data is right
 *   mismatch  rank 1 receives 200 bytes of rank 0's 100: the kernel ends
 *             (no hang) and rank 1's gcollCommGetAsyncError reports
 *             gcollInvalidUsage naming the sizes; rank 0 is fine
 *   die       rank 1 SIGKILLs itself while rank 0's receive waits on the
 *             GPU: gcollCommGetAsyncError reports gcollRemoteError naming
 *             rank 1 within 10 s
 *   abort     gcollCommAbort from another thread stops rank 0's receive
 *             that nobody sends to: its stream is done within 5 s */
static int dev_async(gcollComm_t comm, const char *mode) {
  if (nranks < 2) return 2;
  dev_open();
  /* Far more than the connection holds: its FIFO, and over net/socket the
   * kernel's socket buffers too (several MiB on loopback), so the send
   * cannot complete before its receiver takes it. */
  const size_t big = 32u << 20;
  unsigned char *dsend = dev_alloc(big), *drecv = dev_alloc(big), *h = xmalloc(big),
                *scratch = xmalloc(big), *got = xmalloc(big);
  int peer = rank == 0 ? 1 : 0, status = 1;
  gcollResult_t async = gcollSuccess;
  /* Connected both ways first: a first send waits for its receiver's address. */
  if (rank < 2) {
    gcollGroupStart();
    gcollSend(dsend, 16, gcollUint8, peer, comm, dstream);
    gcollRecv(drecv, 16, gcollUint8, peer, comm, dstream);
    if (check_gcoll(gcollGroupEnd(), "connecting exchange")) goto out;
    cuda_or_die(cu->stream_synchronize(dstream), "cuStreamSynchronize");
  }
  if (strcmp(mode, "queue") == 0) {
    if (rank == 0) {
      fill(h, big, 1, 0, 1, 9, 77);
      htod_now(dsend, h, big);
      double t0 = now_s();
      gcollResult_t rc = gcollSend(dsend, big, gcollUint8, 1, comm, dstream);
      double queued = now_s() - t0;
      cuda_or_die(cu->stream_synchronize(dstream), "cuStreamSynchronize");
      double done = now_s() - t0;
      printf("rank 0: a 32 MiB device send returned %s after %.2f s, its stream was done after "
             "%.2f s\n", gcollGetErrorString(rc), queued, done);
      status = rc != gcollSuccess || queued > 1.0 || done < 1.5;
    } else if (rank == 1) {
      sleep(2);
      gcollResult_t rc = gcollRecv(drecv, big, gcollUint8, 0, comm, dstream);
      cuda_or_die(cu->stream_synchronize(dstream), "cuStreamSynchronize");
      cuda_or_die(cu->memcpy_dtoh(got, DPTR(drecv), big), "cuMemcpyDtoH");
      long wrong = wrong_bytes(got, big, 1, 0, 1, 9, 77, scratch);
      printf("rank 1: the late receive: %s, %ld wrong bytes\n", gcollGetErrorString(rc), wrong);
      status = rc != gcollSuccess || wrong != 0;
    } else {
      status = 0;
    }
  } else if (strcmp(mode, "mismatch") == 0) {
    gcollResult_t rc = rank == 0 ? gcollSend(dsend, 100, gcollUint8, 1, comm, dstream)
                     : rank == 1 ? gcollRecv(drecv, 200, gcollUint8, 0, comm, dstream)
                                 : gcollSuccess;
    cuda_or_die(cu->stream_synchronize(dstream), "cuStreamSynchronize");
    gcollResult_t q = gcollCommGetAsyncError(comm, &async);
    const char *why = gcollGetLastError(NULL);
    printf("rank %d: call %s, then async error %s: %s\n", rank, gcollGetErrorString(rc),
           gcollGetErrorString(async), async != gcollSuccess ? why : "");
    status = rc != gcollSuccess || q != gcollSuccess ||
             (rank == 1 ? async != gcollInvalidUsage || strstr(why, "100 bytes") == NULL ||
                              strchr(why, '\n') != NULL
                        : async != gcollSuccess);
  } else if (strcmp(mode, "die") == 0) {
    signal(SIGTERM, SIG_IGN);   /* gcollrun stops the others when rank 1 dies */
    if (rank == 1) {
      usleep(200000);
      raise(SIGKILL);
    }
    if (rank != 0) {
      sleep(4);
      status = 0;
      goto out;
    }
    gcollResult_t rc = gcollRecv(drecv, 64, gcollUint8, 1, comm, dstream);
    double t0 = now_s();
    while (now_s() - t0 < 10.0 && gcollCommGetAsyncError(comm, &async) == gcollSuccess &&
           async == gcollSuccess)
      usleep(20000);
    const char *why = gcollGetLastError(NULL);
    printf("rank 0: a device receive from a dead rank: call %s, async error %s after %.2f s: "
           "%s\n", gcollGetErrorString(rc), gcollGetErrorString(async), now_s() - t0, why);
    status = rc != gcollSuccess || async != gcollRemoteError || strstr(why, "rank 1") == NULL;
  } else if (strcmp(mode, "abort") == 0) {
    if (rank != 0) {
      sleep(3);
      printf("rank %d: done\n", rank);
      status = 0;   /* main destroys the communicator */
      goto out;
    }
    pthread_t th;
    double t0 = now_s();
    gcollResult_t rc = gcollRecv(drecv, 64, gcollUint8, nranks - 1, comm, dstream);
    pthread_create(&th, NULL, abort_later, comm);
    gcoll_cu_result sync = cu->stream_synchronize(dstream);
    double dt = now_s() - t0;
    pthread_join(th, NULL);
    printf("rank 0: a device receive nobody sends to, aborted: call %s, stream done (%d) after "
           "%.2f s\n", gcollGetErrorString(rc), (int)sync, dt);
    /* The communicator is gone (gcollCommAbort frees it): main must not
     * destroy it. */
    free(h), free(scratch), free(got);
    exit(rc == gcollSuccess && sync == GCOLL_CU_SUCCESS && dt < 5.0 ? 0 : 1);
  } else {
    fprintf(stderr, "p2p_check: --device async: unknown mode '%s'\n", mode);
    status = 2;
  }
out:
  free(h), free(scratch), free(got);
  return status;
}
#else
static int dev_exchange(gcollComm_t comm) {
  (void)comm;
  fprintf(stderr, "p2p_check: --device: this build has no CUDA\n");
  return 2;
}

static int dev_async(gcollComm_t comm, const char *mode) {
  (void)comm, (void)mode;
  fprintf(stderr, "p2p_check: --device: this build has no CUDA\n");
  return 2;
}
#endif

/* ---- alltoall, gather, scatter (colls) ------------------------------------------ */

/* Buffers of one collective: where the call runs (host memory, or device
 * memory with --device) and their host views, where data is made and
 * checked. Each is nranks blocks of the largest size plus a guard. */
struct cbufs {
  unsigned char *send, *recv;     /* passed to the call */
  unsigned char *hsend, *hrecv;   /* host views (the same as send, recv on the host) */
  unsigned char *scratch;
  int32_t *vec;                   /* the grouped allreduce's 3 values */
  int32_t *hvec;
  size_t cap;
  int dev;
  void *stream;
};

enum { C_ALLTOALL, C_GATHER, C_SCATTER };
static const char *const cname[] = {"alltoall", "gather", "scatter"};

/* Host views to the call's buffers (device mode), whole extents. */
static void cb_put(struct cbufs *b) {
  if (!b->dev) return;
#ifdef HAVE_CUDA
  htod_now(b->send, b->hsend, b->cap);
  htod_now(b->recv, b->hrecv, b->cap);
  htod_now(b->vec, b->hvec, 3 * sizeof(int32_t));
#endif
}

/* The call's buffers back to the host views, once the stream is done. */
static void cb_get(struct cbufs *b) {
  if (!b->dev) return;
#ifdef HAVE_CUDA
  cuda_or_die(cu->stream_synchronize(b->stream), "cuStreamSynchronize");
  cuda_or_die(cu->memcpy_dtoh(b->hsend, DPTR(b->send), b->cap), "cuMemcpyDtoH");
  cuda_or_die(cu->memcpy_dtoh(b->hrecv, DPTR(b->recv), b->cap), "cuMemcpyDtoH");
  cuda_or_die(cu->memcpy_dtoh(b->hvec, DPTR(b->vec), 3 * sizeof(int32_t)), "cuMemcpyDtoH");
#endif
}

/* Bytes of [p, p + n) that are not 0xa5. */
static long not_poison(const unsigned char *p, size_t n) {
  long wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += p[i] != 0xa5;
  return wrong;
}

/* One alltoall, gather or scatter of count elements of t with root, out of
 * place or in place, alone or in a group with an allreduce and a send/recv
 * ring. Block p of what rank s sends is fill(s, p): what a receiver must
 * hold is known without the implementation. Also checks that what a call
 * must not write (guards, unused buffers, a send buffer, the blocks around
 * an in-place result) is unchanged. Wrong bytes, -1 when a call failed. */
static long one_coll(gcollComm_t comm, struct cbufs *b, int kind, gcollDataType_t t, size_t count,
                     int root, int in_place, int grouped, uint64_t seed) {
  size_t es = gcoll_dtype_size(t), blk = count * es, all = blk * (size_t)nranks;
  int me = rank, is_root = kind == C_ALLTOALL || me == root;
  memset(b->hsend, 0x5a, b->cap);
  memset(b->hrecv, 0xa5, b->cap);
  /* What this rank sends, where the call reads it. */
  unsigned char *in_src = in_place && kind != C_ALLTOALL ? b->hrecv : b->hsend;
  if (kind == C_ALLTOALL || (kind == C_SCATTER && is_root))
    for (int p = 0; p < nranks; p++) fill(in_src + (size_t)p * blk, count, es, me, p, 70, seed);
  if (kind == C_GATHER)
    fill(in_place ? b->hrecv + (size_t)me * blk : b->hsend, count, es, me, root, 70, seed);
  for (int i = 0; i < 3; i++) b->hvec[i] = (i + 1) * (me + 1);
  cb_put(b);
  /* The arguments, as NCCL programs pass them: in place, the rank's block
   * of the big buffer; buffers a rank does not use may be NULL. */
  const unsigned char *sendp = b->send;
  unsigned char *recvp = b->recv;
  if (in_place && kind == C_GATHER) sendp = b->recv + (size_t)me * blk;
  if (in_place && kind == C_SCATTER) sendp = b->recv, recvp = b->recv + (size_t)me * blk;
  if (!in_place && kind == C_SCATTER && !is_root && seed % 2) sendp = NULL;
  if (!in_place && kind == C_GATHER && !is_root && seed % 2) recvp = NULL;
  int next = (me + 1) % nranks, prev = (me + nranks - 1) % nranks;
  int32_t token = 1000 + me, got_token = -1;
  gcollResult_t rc = gcollSuccess, end = gcollSuccess;
  void *st = b->dev ? b->stream : NULL;
  if (grouped) {
    gcollGroupStart();
    rc = gcollAllReduce(b->vec, b->vec, 3, gcollInt32, gcollSum, comm, st);
  }
  if (rc == gcollSuccess) {
    if (kind == C_ALLTOALL) rc = gcollAlltoAll(sendp, recvp, count, t, comm, st);
    else if (kind == C_GATHER) rc = gcollGather(sendp, recvp, count, t, root, comm, st);
    else rc = gcollScatter(sendp, recvp, count, t, root, comm, st);
  }
  if (grouped) {
    /* Host memory, no stream: a send/recv of the same group may differ. */
    if (rc == gcollSuccess) rc = gcollSend(&token, 1, gcollInt32, next, comm, NULL);
    if (rc == gcollSuccess) rc = gcollRecv(&got_token, 1, gcollInt32, prev, comm, NULL);
    end = gcollGroupEnd();
  }
  char what[160];
  snprintf(what, sizeof(what), "%s%s %s count %zu root %d%s%s", b->dev ? "device " : "",
           cname[kind], gcoll_dtype_name(t), count, kind == C_ALLTOALL ? -1 : root,
           in_place ? " in place" : "", grouped ? " in a group with an allreduce" : "");
  if (check_gcoll(rc, what) || check_gcoll(end, what)) return -1;
  cb_get(b);
  long wrong = 0;
  switch (kind) {
  case C_ALLTOALL:
    for (int p = 0; p < nranks; p++)
      wrong += wrong_bytes(b->hrecv + (size_t)p * blk, count, es, p, me, 70, seed, b->scratch);
    wrong += not_poison(b->hrecv + all, 64);
    break;
  case C_GATHER:
    for (int p = 0; p < nranks; p++) {
      unsigned char *got = b->hrecv + (size_t)p * blk;
      if (is_root) wrong += wrong_bytes(got, count, es, p, root, 70, seed, b->scratch);
      else if (in_place && p == me) wrong += wrong_bytes(got, count, es, me, root, 70, seed, b->scratch);
      else wrong += not_poison(got, blk);
    }
    wrong += not_poison(b->hrecv + all, 64);
    break;
  default: {
    unsigned char *got = b->hrecv + (in_place ? (size_t)me * blk : 0);
    wrong += wrong_bytes(got, count, es, root, me, 70, seed, b->scratch);
    for (int p = 0; in_place && p < nranks; p++) {
      if (p == me) continue;
      unsigned char *other = b->hrecv + (size_t)p * blk;
      wrong += is_root ? wrong_bytes(other, count, es, me, p, 70, seed, b->scratch)
                       : not_poison(other, blk);
    }
    wrong += not_poison(in_place ? b->hrecv + all : got + blk, 64);
    break;
  }
  }
  /* Out of place, what was sent is unchanged. */
  if (!in_place && (kind == C_ALLTOALL || (kind == C_SCATTER && is_root)))
    for (int p = 0; p < nranks; p++)
      wrong += wrong_bytes(b->hsend + (size_t)p * blk, count, es, me, p, 70, seed, b->scratch);
  if (!in_place && kind == C_GATHER) wrong += wrong_bytes(b->hsend, count, es, me, root, 70, seed, b->scratch);
  if (grouped) {
    for (int i = 0; i < 3; i++) wrong += b->hvec[i] != (i + 1) * nranks * (nranks + 1) / 2;
    wrong += got_token != 1000 + prev;
  }
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* rc must be `want` with a one-line reason naming `name` and containing
 * `word`; 0 when so. */
static int refused(gcollResult_t rc, gcollResult_t want, const char *name, const char *word,
                   const char *what) {
  const char *why = gcollGetLastError(NULL);
  if (rc == want && strchr(why, '\n') == NULL && strstr(why, name) != NULL &&
      strstr(why, word) != NULL) {
    if (rank == 0) printf("rank 0: %s refused: %s\n", what, why);
    return 0;
  }
  printf("rank %d: %s returned %s (%s), expected %s with '%s'\n", rank, what,
         gcollGetErrorString(rc), why, gcollGetErrorString(want), word);
  return 1;
}

/* What the three refuse, each on its own (every rank refuses locally, so
 * nothing waits), and a refused call poisoning its group; then the
 * communicator still works. Host memory. */
static long colls_refusals(gcollComm_t comm) {
  float *buf = xmalloc(64 * (size_t)nranks * sizeof(float) + 64);
  long bad = 0;
  const gcollResult_t A = gcollInvalidArgument;
  bad += refused(gcollAlltoAll(buf, buf, 4, gcollFloat, comm, NULL), A, "gcollAlltoAll",
                 "overlap", "alltoall in place");
  bad += refused(gcollAlltoAll(buf + 1, buf, 4, gcollFloat, comm, NULL), A, "gcollAlltoAll",
                 "overlap", "alltoall with overlapping buffers");
  /* Each rank its own root: a partial overlap is refused on root only. */
  bad += refused(gcollGather(buf + 1, buf, 4, gcollFloat, rank, comm, NULL), A, "gcollGather",
                 "in place", "gather with sendbuff inside recvbuff, not at root's block");
  bad += refused(gcollScatter(buf, buf + 1, 4, gcollFloat, rank, comm, NULL), A, "gcollScatter",
                 "in place", "scatter with recvbuff inside sendbuff, not at root's block");
  bad += refused(gcollAlltoAll(NULL, buf, 4, gcollFloat, comm, NULL), A, "gcollAlltoAll",
                 "sendbuff is NULL", "alltoall of a NULL sendbuff");
  bad += refused(gcollAlltoAll(buf, NULL, 4, gcollFloat, comm, NULL), A, "gcollAlltoAll",
                 "recvbuff is NULL", "alltoall into a NULL recvbuff");
  bad += refused(gcollGather(buf, NULL, 4, gcollFloat, rank, comm, NULL), A, "gcollGather",
                 "recvbuff is NULL", "gather into a NULL recvbuff on root");
  bad += refused(gcollGather(NULL, buf, 4, gcollFloat, 0, comm, NULL), A, "gcollGather",
                 "sendbuff is NULL", "gather of a NULL sendbuff");
  bad += refused(gcollScatter(NULL, buf, 4, gcollFloat, rank, comm, NULL), A, "gcollScatter",
                 "sendbuff is NULL", "scatter of a NULL sendbuff on root");
  bad += refused(gcollScatter(buf, NULL, 4, gcollFloat, 0, comm, NULL), A, "gcollScatter",
                 "recvbuff is NULL", "scatter into a NULL recvbuff");
  bad += refused(gcollGather(buf, buf + 64, 4, gcollFloat, -1, comm, NULL), A, "gcollGather",
                 "root -1", "gather to root -1");
  bad += refused(gcollScatter(buf, buf + 64, 4, gcollFloat, nranks, comm, NULL), A,
                 "gcollScatter", "is not a rank", "scatter from root nranks");
  bad += refused(gcollAlltoAll(buf, buf + 64, 4, (gcollDataType_t)42, comm, NULL), A,
                 "gcollAlltoAll", "datatype 42", "alltoall of datatype 42");
  bad += refused(gcollAlltoAll(buf, buf + 64, SIZE_MAX / 2, gcollFloat, comm, NULL), A,
                 "gcollAlltoAll", "overflows", "alltoall of SIZE_MAX / 2 floats");
  bad += refused(gcollGather(buf, buf + 64, SIZE_MAX / 2 + 1, gcollInt8, 0, comm, NULL), A,
                 "gcollGather", "overflows", "gather of SIZE_MAX / 2 + 1 bytes");
  bad += refused(gcollScatter(buf, buf + 64, 4, gcollFloat, 0, NULL, NULL), A, "gcollScatter",
                 "comm is NULL", "scatter on a NULL comm");
  bad += refused(gcollAlltoAll(buf, buf + 64, 4, gcollFloat, comm, (void *)buf), gcollInvalidUsage,
                 "gcollAlltoAll", "stream", "alltoall of host buffers with a stream");
  /* A refused call inside a group: nothing of the group runs (the
   * allreduce queued before it would change v). */
  float v = 1.0f;
  gcollGroupStart();
  bad += gcollAllReduce(&v, &v, 1, gcollFloat, gcollSum, comm, NULL) != gcollSuccess;
  bad += refused(gcollAlltoAll(buf, buf, 4, gcollFloat, comm, NULL), A, "gcollAlltoAll",
                 "overlap", "alltoall in place in a group");
  bad += refused(gcollGroupEnd(), A, "gcollAlltoAll", "overlap", "the group of a refused call");
  bad += v != 1.0f;
  /* count 0 moves nothing, NULL buffers included; then a real one. */
  bad += check_gcoll(gcollAlltoAll(NULL, NULL, 0, gcollFloat, comm, NULL), "alltoall count 0") != 0;
  bad += check_gcoll(gcollGather(NULL, NULL, 0, gcollFloat, nranks - 1, comm, NULL), "gather count 0") != 0;
  bad += check_gcoll(gcollScatter(NULL, NULL, 0, gcollFloat, 0, comm, NULL), "scatter count 0") != 0;
  for (int p = 0; p < nranks; p++) buf[p] = (float)(rank * 100 + p);
  if (check_gcoll(gcollAlltoAll(buf, buf + nranks, 1, gcollFloat, comm, NULL), "alltoall after refusals"))
    bad++;
  else
    for (int p = 0; p < nranks; p++) bad += buf[nranks + p] != (float)(p * 100 + rank);
  free(buf);
  if (bad) fprintf(stderr, "rank %d: refusals: %ld wrong\n", rank, bad);
  return bad;
}

/* Inside a group the three only queue, like send/recv: rank 0 groups a
 * receive of a message larger than any FIFO (whose blocking sender, rank
 * 1, cannot reach its own alltoall before that receive is posted) with an
 * alltoall. Run at the call, rank 0's alltoall would wait for rank 1
 * forever. The alltoall's messages follow the big one on 1 -> 0. */
static long colls_group_order(gcollComm_t comm) {
  if (nranks < 2) return 0;
  size_t big = 300007, es = 4;   /* 1.2 MB: more than 8 slots of 128 KiB */
  unsigned char *msg = xmalloc(big * es), *out = xmalloc((size_t)nranks * es),
                *in = xmalloc((size_t)nranks * es), *want = xmalloc(big * es);
  for (int p = 0; p < nranks; p++) fill(out + (size_t)p * es, 1, es, rank, p, 90, 3);
  gcollResult_t rc = gcollSuccess, end = gcollSuccess;
  if (rank == 0) {
    gcollGroupStart();
    rc = gcollRecv(msg, big, gcollInt32, 1, comm, NULL);
    if (rc == gcollSuccess) rc = gcollAlltoAll(out, in, 1, gcollInt32, comm, NULL);
    end = gcollGroupEnd();
  } else {
    if (rank == 1) {
      fill(msg, big, es, 1, 0, 91, 3);
      rc = gcollSend(msg, big, gcollInt32, 0, comm, NULL);
    }
    if (rc == gcollSuccess) rc = gcollAlltoAll(out, in, 1, gcollInt32, comm, NULL);
  }
  long wrong = 0;
  if (check_gcoll(rc, "alltoall grouped after a receive") ||
      check_gcoll(end, "alltoall grouped after a receive"))
    wrong = -1;
  for (int p = 0; wrong >= 0 && p < nranks; p++)
    wrong += wrong_bytes(in + (size_t)p * es, 1, es, p, rank, 90, 3, want);
  if (wrong >= 0 && rank == 0) wrong += wrong_bytes(msg, big, es, 1, 0, 91, 3, want);
  if (wrong) fprintf(stderr, "rank %d: alltoall grouped after a receive: %ld wrong\n", rank, wrong);
  free(msg), free(out), free(in), free(want);
  return wrong;
}

static int colls(gcollComm_t comm, int dev) {
  static const size_t counts[] = {0, 1, 7, 13, 4099, 65537};
  const int ncounts = 6;
  struct cbufs b = {0};
  b.dev = dev;
  b.cap = 65537 * 8 * (size_t)nranks + 64;
  b.hsend = xmalloc(b.cap);
  b.hrecv = xmalloc(b.cap);
  b.scratch = xmalloc(65537 * 8);
  b.hvec = xmalloc(3 * sizeof(int32_t));
  b.send = b.hsend;
  b.recv = b.hrecv;
  b.vec = b.hvec;
#ifdef HAVE_CUDA
  if (dev) {
    dev_open();
    b.send = dev_alloc(b.cap);
    b.recv = dev_alloc(b.cap);
    b.vec = (int32_t *)dev_alloc(3 * sizeof(int32_t));
    b.stream = dstream;
  }
#else
  if (dev) {
    fprintf(stderr, "p2p_check: --device: this build has no CUDA\n");
    return 2;
  }
#endif
  long wrong = 0, calls = 0, w;
  double t0 = now_s();
  for (int kind = 0; kind < 3; kind++)
    for (int t = 0; t < gcollNumTypes; t++)
      for (int s = 0; s < ncounts; s++) {
        /* 65537 elements is about many FIFO steps, not types: two types. */
        if (s == ncounts - 1 && t != gcollInt8 && t != gcollFloat64) continue;
        for (int r = 0; r < (kind == C_ALLTOALL || nranks == 1 ? 1 : 2); r++)
          for (int in_place = 0; in_place < (kind == C_ALLTOALL ? 1 : 2); in_place++) {
            uint64_t seed = 9000 + (uint64_t)calls;
            int grouped = calls % 3 == 1;
            w = one_coll(comm, &b, kind, (gcollDataType_t)t, counts[s], r ? nranks - 1 : 0,
                         in_place, grouped, seed);
            calls++;
            if (w < 0) return 1;
            wrong += w;
          }
      }
  /* All three and an allreduce in one group, with a nested group: the
   * messages of alltoall, gather and scatter between two ranks share a
   * connection and must meet in call order. */
  {
    size_t count = 4099, es = 4, blk = count * es;
    int root = nranks - 1;
    unsigned char *h = xmalloc(blk * (size_t)nranks * 4 + blk), *a2a_out = h,
                  *a2a_in = h + blk * (size_t)nranks;
    unsigned char *g_in = h + 2 * blk * (size_t)nranks, *sc_out = h + 3 * blk * (size_t)nranks;
    unsigned char *sc_in = h + 4 * blk * (size_t)nranks;
    if (!dev) {
      for (int p = 0; p < nranks; p++) {
        fill(a2a_out + (size_t)p * blk, count, es, rank, p, 80, 1);
        fill(sc_out + (size_t)p * blk, count, es, rank, p, 81, 1);
      }
      fill(g_in + (size_t)rank * blk, count, es, rank, root, 82, 1);   /* in place on root */
      int32_t v = rank + 1;
      gcollGroupStart();
      gcollAllReduce(&v, &v, 1, gcollInt32, gcollSum, comm, NULL);
      gcollGroupStart();
      gcollAlltoAll(a2a_out, a2a_in, count, gcollFloat, comm, NULL);
      gcollGather(g_in + (size_t)rank * blk, g_in, count, gcollFloat, root, comm, NULL);
      gcollGroupEnd();
      /* Root scatters in place into its block of sc_out. */
      gcollScatter(sc_out, rank == root ? sc_out + (size_t)rank * blk : sc_in, count,
                   gcollFloat, root, comm, NULL);
      if (check_gcoll(gcollGroupEnd(), "alltoall, gather, scatter and an allreduce in one group"))
        return 1;
      long gw = v != nranks * (nranks + 1) / 2;
      for (int p = 0; p < nranks; p++) {
        gw += wrong_bytes(a2a_in + (size_t)p * blk, count, es, p, rank, 80, 1, b.scratch);
        if (rank == root) {
          gw += wrong_bytes(g_in + (size_t)p * blk, count, es, p, root, 82, 1, b.scratch);
          gw += wrong_bytes(sc_out + (size_t)p * blk, count, es, rank, p, 81, 1, b.scratch);
        }
      }
      if (rank != root) gw += wrong_bytes(sc_in, count, es, root, rank, 81, 1, b.scratch);
      if (gw) fprintf(stderr, "rank %d: one group of everything: %ld wrong\n", rank, gw);
      wrong += gw;
      calls += 4;
    }
    free(h);
  }
  if (!dev) {
    if ((w = colls_group_order(comm)) < 0) return 1;
    wrong += w;
    wrong += colls_refusals(comm);
  }
  /* One buffer of each kind is refused, as for the other collectives
   * (each rank its own root: refused before anything moves). */
  if (dev) {
    wrong += refused(gcollAlltoAll(b.send, b.hrecv, 4, gcollFloat, comm, b.stream),
                     gcollInvalidArgument, "gcollAlltoAll", "host memory",
                     "alltoall from device into host memory");
    wrong += refused(gcollScatter(b.hsend, b.recv, 4, gcollFloat, rank, comm, b.stream),
                     gcollInvalidArgument, "gcollScatter", "device memory",
                     "scatter from host into device memory");
    wrong += refused(gcollAlltoAll(b.send, b.send, 4, gcollFloat, comm, b.stream),
                     gcollInvalidArgument, "gcollAlltoAll", "overlap",
                     "alltoall in place on device memory");
  }
  printf("rank %d: %s%ld alltoall/gather/scatter calls, %ld wrong bytes, %.2f s\n", rank,
         dev ? "device: " : "", calls, wrong, now_s() - t0);
  free(b.hsend);
  free(b.hrecv);
  free(b.scratch);
  free(b.hvec);
  return wrong ? 1 : 0;
}

/* ---- failures ----------------------------------------------------------------- */

static int mismatch(gcollComm_t comm) {
  if (nranks < 2) return 2;
  if (rank > 1) return printf("rank %d: not involved\n", rank), 0;
  int bad = 0;
  int32_t buf[200], got[200];
  /* Smaller, then larger receive than the send; each is consumed whole. */
  for (int k = 0; k < 2; k++) {
    size_t send_count = 100, recv_count = k == 0 ? 50 : 150;
    fill((unsigned char *)buf, send_count, 4, 0, 1, 30 + k, 5);
    gcollResult_t rc = rank == 0 ? gcollSend(buf, send_count, gcollInt32, 1, comm, NULL)
                                 : gcollRecv(got, recv_count, gcollInt32, 0, comm, NULL);
    if (rank == 0 && rc != gcollSuccess)
      bad += !!printf("rank 0: send failed: %s\n", gcollGetLastError(NULL));
    if (rank == 1) {
      const char *why = gcollGetLastError(NULL);
      printf("rank 1: receive of %zu for a send of %zu: %s: %s\n", recv_count, send_count,
             gcollGetErrorString(rc), why);
      bad += rc != gcollInvalidUsage || strchr(why, '\n') != NULL ||
             strstr(why, "400 bytes") == NULL;
    }
  }
  /* The connection is still in step: a matching exchange works. */
  fill((unsigned char *)buf, 200, 4, 0, 1, 40, 5);
  gcollResult_t rc = rank == 0 ? gcollSend(buf, 200, gcollInt32, 1, comm, NULL)
                               : gcollRecv(got, 200, gcollInt32, 0, comm, NULL);
  if (check_gcoll(rc, "exchange after mismatch")) return 1;
  unsigned char scratch[800];
  if (rank == 1) bad += wrong_bytes((unsigned char *)got, 200, 4, 0, 1, 40, 5, scratch) != 0;
  printf("rank %d: %s\n", rank, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}

static int norecv(gcollComm_t comm, const char *mode) {
  /* Survivors must report, not be stopped by gcollrun first. */
  signal(SIGTERM, SIG_IGN);
  int big = strcmp(mode, "big") == 0;
  size_t count = big ? (8u << 20) : 16;  /* big: 32 MiB, more than any FIFO */
  float *buf = xmalloc(count * sizeof(float));
  if (big) {
    /* A first message that works, so the connection exists. */
    gcollResult_t rc = rank == 0 ? gcollSend(buf, 16, gcollFloat, 1, comm, NULL)
                     : rank == 1 ? gcollRecv(buf, 16, gcollFloat, 0, comm, NULL) : gcollSuccess;
    if (check_gcoll(rc, "first message")) return 1;
  }
  int status = 0;
  if (rank == 0) {
    double t0 = now_s();
    gcollResult_t rc = gcollSend(buf, count, gcollFloat, 1, comm, NULL);
    double dt = now_s() - t0;
    printf("rank 0: send nobody receives returned %s after %.2f s: %s\n", gcollGetErrorString(rc),
           dt, gcollGetLastError(NULL));
    status = rc == gcollSystemError && strstr(gcollGetLastError(NULL), "rank 1") != NULL ? 0 : 1;
  } else {
    /* Rank 1 stays alive past rank 0's deadline without receiving. */
    sleep(3);
    printf("rank %d: done\n", rank);
  }
  free(buf);
  return status;
}

static int expect(gcollResult_t got, gcollResult_t want, const char *what) {
  if (got == want) {
    printf("rank %d: %s refused: %s\n", rank, what, gcollGetLastError(NULL));
    return 0;
  }
  printf("rank %d: %s returned %s, expected %s\n", rank, what, gcollGetErrorString(got),
         gcollGetErrorString(want));
  return 1;
}

static int badargs(gcollComm_t comm) {
  float buf[16] = {0};
  int bad = 0, peer = (rank + 1) % nranks;
  bad += expect(gcollSend(buf, 16, gcollFloat, nranks, comm, NULL), gcollInvalidArgument, "send to rank nranks");
  bad += expect(gcollRecv(buf, 16, gcollFloat, -1, comm, NULL), gcollInvalidArgument, "recv from rank -1");
  bad += expect(gcollSend(NULL, 16, gcollFloat, peer, comm, NULL), gcollInvalidArgument, "NULL sendbuff");
  bad += expect(gcollRecv(NULL, 16, gcollFloat, peer, comm, NULL), gcollInvalidArgument, "NULL recvbuff");
  bad += expect(gcollSend(buf, 16, (gcollDataType_t)42, peer, comm, NULL), gcollInvalidArgument, "bad type");
  bad += expect(gcollRecv(buf, SIZE_MAX / 2, gcollFloat, peer, comm, NULL), gcollInvalidArgument, "count overflow");
  bad += expect(gcollSend(buf, 16, gcollFloat, peer, NULL, NULL), gcollInvalidArgument, "NULL comm");
  bad += expect(gcollSend(buf, 16, gcollFloat, peer, comm, (void *)buf), gcollInvalidUsage, "a stream");
  bad += expect(gcollGroupEnd(), gcollInvalidUsage, "gcollGroupEnd without gcollGroupStart");
  /* A collective refused in a group fails the whole group: the valid
   * send queued before it is not run (its peer posts no receive). */
  gcollGroupStart();
  gcollResult_t q = gcollSend(buf, 16, gcollFloat, peer, comm, NULL);
  bad += q != gcollSuccess;
  bad += expect(gcollBroadcast(buf, buf, 16, gcollFloat, nranks, comm, NULL),
                gcollInvalidArgument, "broadcast from rank nranks in a group");
  bad += expect(gcollGroupEnd(), gcollInvalidArgument, "group with a refused call");
  /* Nested groups: a bad call in the inner one fails the outer end. */
  gcollGroupStart();
  gcollGroupStart();
  bad += expect(gcollSend(buf, 16, gcollFloat, -5, comm, NULL), gcollInvalidArgument, "bad peer in a nested group");
  bad += gcollGroupEnd() != gcollSuccess;
  bad += expect(gcollGroupEnd(), gcollInvalidArgument, "outer group of a refused call");
  /* Nothing moved: the communicator and its connections still work. */
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  float out[16], in[16];
  for (int i = 0; i < 16; i++) out[i] = (float)(rank * 100 + i);
  gcollGroupStart();
  gcollGroupStart();
  gcollSend(out, 16, gcollFloat, next, comm, NULL);
  gcollGroupEnd();
  gcollRecv(in, 16, gcollFloat, prev, comm, NULL);
  if (check_gcoll(gcollGroupEnd(), "ring after refusals")) return 1;
  for (int i = 0; i < 16; i++) bad += in[i] != (float)(prev * 100 + i);
  printf("rank %d: %s\n", rank, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}

static int abort_test(gcollComm_t comm) {
  if (rank != 0) {
    sleep(3);
    gcollCommDestroy(comm);
    printf("rank %d: done\n", rank);
    return 0;
  }
  pthread_t th;
  float buf[256];
  double t0 = now_s();
  pthread_create(&th, NULL, abort_later, comm);
  gcollResult_t rc = gcollRecv(buf, 256, gcollFloat, nranks - 1, comm, NULL);
  double dt = now_s() - t0;
  pthread_join(th, NULL);
  printf("rank 0: recv returned %s after %.2f s\n", gcollGetErrorString(rc), dt);
  return rc == gcollInvalidUsage && dt < 5.0 ? 0 : 1;
}

static int die(gcollComm_t comm) {
  signal(SIGTERM, SIG_IGN);
  float buf[64] = {0};
  /* Connect first, so rank 0 holds a connection from rank 1. */
  gcollResult_t rc = rank == 0 ? gcollRecv(buf, 64, gcollFloat, 1, comm, NULL)
                   : rank == 1 ? gcollSend(buf, 64, gcollFloat, 0, comm, NULL) : gcollSuccess;
  if (check_gcoll(rc, "first message")) return 1;
  if (rank == 1) {
    usleep(200000);
    raise(SIGKILL);
  }
  if (rank != 0) {
    sleep(4);
    return 0;
  }
  double t0 = now_s();
  rc = gcollRecv(buf, 64, gcollFloat, 1, comm, NULL);
  double dt = now_s() - t0;
  printf("rank 0: receive from a dead rank returned %s after %.2f s: %s\n",
         gcollGetErrorString(rc), dt, gcollGetLastError(NULL));
  return rc == gcollRemoteError && strstr(gcollGetLastError(NULL), "rank 1 ") != NULL ? 0 : 1;
}

int main(int argc, char **argv) {
  int on_device = argc >= 2 && strcmp(argv[1], "--device") == 0;
  if (on_device) argc--, argv++;
  if (argc < 2 ||
      (on_device && strcmp(argv[1], "exchange") != 0 && strcmp(argv[1], "colls") != 0 &&
       (strcmp(argv[1], "async") != 0 || argc != 3))) {
    fprintf(stderr, "usage: p2p_check exchange | colls | mismatch | norecv fresh|big | badargs | "
                    "abort | die | --device exchange|colls|async MODE\n");
    return 2;
  }
  gcollComm_t comm;
  gcollResult_t rc = gcollCommInitFromPlan(&comm, NULL, -1);
  if (rc != gcollSuccess) {
    fprintf(stderr, "p2p_check: init: %s: %s\n", gcollGetErrorString(rc), gcollGetLastError(NULL));
    return 3;
  }
  gcollCommUserRank(comm, &rank);
  gcollCommCount(comm, &nranks);
  int status;
  if (strcmp(argv[1], "colls") == 0) status = colls(comm, on_device);
  else if (on_device && strcmp(argv[1], "async") == 0) status = dev_async(comm, argv[2]);
  else if (on_device) status = dev_exchange(comm);
  else if (strcmp(argv[1], "exchange") == 0) status = exchange(comm);
  else if (strcmp(argv[1], "mismatch") == 0) status = mismatch(comm);
  else if (strcmp(argv[1], "norecv") == 0 && argc == 3) status = norecv(comm, argv[2]);
  else if (strcmp(argv[1], "badargs") == 0) status = badargs(comm);
  else if (strcmp(argv[1], "abort") == 0) return abort_test(comm);
  else if (strcmp(argv[1], "die") == 0) status = die(comm);
  else {
    fprintf(stderr, "p2p_check: unknown mode '%s'\n", argv[1]);
    status = 2;
  }
  gcollCommDestroy(comm);
  return status;
}
