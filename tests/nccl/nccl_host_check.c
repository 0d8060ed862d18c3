/* An NCCL program, compiled against the system's nccl.h and linked to
 * gcoll's libnccl.so.2 (tests/nccl/test_nccl_abi.sh), checking that it runs
 * on gcoll with NCCL's semantics. Host buffers, stream 0.
 *
 *   nccl_host_check matrix       under gcollrun: every collective x type x op
 *                                x size {0,1,7,1023,4097}, in and out of
 *                                place (in-place ncclAlltoAll refused),
 *                                ncclBcast, ncclAlltoAll/Gather/Scatter,
 *                                pre-mul-sum ops with per-rank scalars, a
 *                                send/recv ring in a group, an alltoall,
 *                                a gather and a scatter grouped with an
 *                                allreduce; against a serial reference
 *   nccl_host_check refusals     under gcollrun: what the library refuses
 *                                (fp8, a stream, bad/destroyed/foreign ops,
 *                                bad configs, 0 ranks)
 *                                gives NCCL's result and one line of reason,
 *                                and the communicator still works afterwards
 *   nccl_host_check auto N       no launcher: N processes, ncclGetUniqueId
 *                                plus ncclCommInitRank (plan computed in
 *                                process)
 *   nccl_host_check initall N    ncclCommInitAll, one thread per comm
 *   nccl_host_check initall-grouped N
 *                                ncclCommInitAll, one thread driving all comms in a group
 *   nccl_host_check abort        under gcollrun, 2 ranks: ncclCommAbort from
 *                                another thread ends rank 0's allreduce that
 *                                rank 1 never joins, and frees the comm
 *   nccl_host_check device       under gcollrun, with $GCOLL_CUDA_DRIVER (the
 *                                emulated GPU): the matrix's collectives on
 *                                device buffers and a stream, as a CUDA
 *                                program calls them (pre-mul-sum refused);
 *                                ncclSend/ncclRecv rings on device buffers
 *                                and the stream, and from device memory
 *                                into host memory
 *   nccl_host_check config       under gcollrun: ncclCommInitRankConfig with
 *                                maxCTAs 1, minCTAs 1, netName "Socket"
 *                                and commName "tp"; collectives 0 wrong (the
 *                                test reads the log for what was honoured)
 *   nccl_host_check identity     under gcollrun, with $GCOLL_CUDA_DRIVER: the
 *                                GPU is current before init (as after
 *                                cudaSetDevice), then a world communicator
 *                                from an id, collectives on device buffers,
 *                                and a split in two; the test gives ranks
 *                                other GPUs than the plan's (by bus id) and
 *                                reads the plans they got from the log
 *   nccl_host_check devmem MODE  with the test's fake libcuda.so.1: buffers the
 *                                "driver" calls device memory are refused,
 *                                managed memory is used (MODE refuse), or
 *                                all is host memory when cuInit fails (MODE
 *                                host); ncclCommCuDevice of ncclCommInitRank
 *                                is cudaGetDevice's ($FAKE_CUDA_DEVICE)
 *
 * Every mode first proves that the ncclAllReduce it calls is in the library
 * named by $NCCL_SHIM_LIB (not a real NCCL found through ld.so.cache).
 * Inputs are a function of (seed, rank, index), so each rank recomputes
 * every rank's input; floating inputs are small integers (and scalars
 * halves), which keeps every result exact in every type and order, so
 * results are compared bit for bit. One line per rank; exit 1 on any
 * difference. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

#include "check_util.h"
#include "kernels/half.h"
#include "kernels/reduce.h"

#define SIZES 5
static const size_t sizes[SIZES] = {0, 1, 7, 1023, 4097};
#define MAX_COUNT 4097

static const char *coll_names[] = {"allreduce",     "broadcast", "reduce", "allgather",
                                   "reducescatter", "bcast",     "alltoall", "gather",
                                   "scatter"};

/* Stands in for libcudart's cudaGetDevice, exported by this program
 * (the test links it -rdynamic), where the library looks for it: the device is
 * $FAKE_CUDA_DEVICE; without it the call fails as without a GPU, and the
 * library must then say device 0. */
cudaError_t cudaGetDevice(int *device) {
  const char *s = getenv("FAKE_CUDA_DEVICE");
  if (s == NULL) return cudaErrorNoDevice;
  *device = atoi(s);
  return cudaSuccess;
}

static int check_nccl(ncclResult_t rc, const char *what) {
  if (rc == ncclSuccess) return 0;
  fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, ncclGetErrorString(rc),
          ncclGetLastError(NULL));
  return -1;
}

/* The library that defines ncclAllReduce for this process is ours. */
static int check_loaded_library(void) {
  void *sym = dlsym(RTLD_DEFAULT, "ncclAllReduce");
  Dl_info info;
  if (sym == NULL || dladdr(sym, &info) == 0 || info.dli_fname == NULL) {
    fprintf(stderr, "rank %d: cannot locate ncclAllReduce\n", rank);
    return -1;
  }
  const char *want = getenv("NCCL_SHIM_LIB");
  char got_real[PATH_MAX], want_real[PATH_MAX];
  if (want == NULL || realpath(info.dli_fname, got_real) == NULL ||
      realpath(want, want_real) == NULL || strcmp(got_real, want_real) != 0) {
    fprintf(stderr, "rank %d: ncclAllReduce comes from %s, not from $NCCL_SHIM_LIB (%s)\n", rank,
            info.dli_fname, want ? want : "unset");
    return -1;
  }
  /* Ours brings libgcoll with it, a real NCCL does not: a second,
   * independent sign. */
  if (dlsym(RTLD_DEFAULT, "gcollGetVersion") == NULL) {
    fprintf(stderr, "rank %d: gcollGetVersion is not defined: a real NCCL is loaded\n", rank);
    return -1;
  }
  int version = 0;
  if (check_nccl(ncclGetVersion(&version), "ncclGetVersion") || version != NCCL_VERSION_CODE) {
    fprintf(stderr, "rank %d: ncclGetVersion %d, header %d\n", rank, version, NCCL_VERSION_CODE);
    return -1;
  }
  return 0;
}

/* ---- inputs and references --------------------------------------------- */

static int small_value(uint64_t h, ncclRedOp_t op) {
  /* [-2, 2] for prod keeps 4 ranks' products exact even in half. */
  return op == ncclProd ? (int)(h % 5) - 2 : (int)(h % 17) - 8;
}

static void store(void *buf, size_t i, ncclDataType_t t, uint64_t h, double v) {
  switch (t) {
  case ncclInt8: ((int8_t *)buf)[i] = (int8_t)h; break;
  case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)h; break;
  case ncclInt32: ((int32_t *)buf)[i] = (int32_t)h; break;
  case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)h; break;
  case ncclInt64: ((int64_t *)buf)[i] = (int64_t)h; break;
  case ncclUint64: ((uint64_t *)buf)[i] = h; break;
  case ncclFloat16: ((uint16_t *)buf)[i] = gcoll_float_to_half((float)v); break;
  case ncclFloat32: ((float *)buf)[i] = (float)v; break;
  case ncclFloat64: ((double *)buf)[i] = v; break;
  case ncclBfloat16: ((uint16_t *)buf)[i] = gcoll_float_to_bf16((float)v); break;
  default: break;
  }
}

/* Element first+i of rank r's input. */
static void fill(void *buf, size_t first, size_t count, ncclDataType_t t, ncclRedOp_t op, int r,
                 uint64_t seed) {
  for (size_t i = 0; i < count; i++) {
    uint64_t h = mix(seed ^ mix((uint64_t)r * 0x9e3779b97f4a7c15ULL + first + i));
    store(buf, i, t, h, small_value(h, op));
  }
}

/* Rank r's pre-mul-sum scalar: integers -2, 1, 4, 7, ...; floats 0.5, -1,
 * 1.5, -2, ... (halves keep products of small integers exact). */
static int64_t int_scalar(int r) { return (int64_t)r * 3 - 2; }
static double float_scalar(int r) { return 0.5 * (r + 1) * (r % 2 ? -1 : 1); }

/* Rank r's input, scaled as a pre-mul-sum must: integers wrap (the product
 * of the two's complement bits), floats are exact. */
static void fill_scaled(void *buf, size_t first, size_t count, ncclDataType_t t, int r,
                        uint64_t seed) {
  uint64_t k = (uint64_t)int_scalar(r);
  for (size_t i = 0; i < count; i++) {
    uint64_t h = mix(seed ^ mix((uint64_t)r * 0x9e3779b97f4a7c15ULL + first + i));
    uint64_t bits = h;
    switch (t) {   /* the input as stored, sign-extended, times k, mod 2^64 */
    case ncclInt8: bits = (uint64_t)(int64_t)(int8_t)h; break;
    case ncclInt32: bits = (uint64_t)(int64_t)(int32_t)h; break;
    case ncclUint8: bits = (uint8_t)h; break;
    case ncclUint32: bits = (uint32_t)h; break;
    default: break;
    }
    store(buf, i, t, bits * k, small_value(h, ncclSum) * float_scalar(r));
  }
}

/* dst = the serial reduction over ranks of elements [first, first+n). */
static void expected(unsigned char *dst, unsigned char *block, size_t first, size_t n,
                     ncclDataType_t t, ncclRedOp_t op, int premul, uint64_t seed) {
  const void *in[64];
  for (int r = 0; r < nranks; r++) {
    unsigned char *b = block + (size_t)r * MAX_COUNT * 8;
    in[r] = b;
    if (premul) fill_scaled(b, first, n, t, r, seed);
    else fill(b, first, n, t, op, r, seed);
  }
  gcoll_reduce_reference(dst, in, nranks, n, (gcollDataType_t)t, premul ? gcollSum : (gcollRedOp_t)op);
}

struct bufs {
  unsigned char *send, *recv, *expect, *block;
  size_t cap;
};

/* ---- device mode: the driver a CUDA program would use through cudart ---- */

static int on_device;
static struct {
  int (*mem_alloc)(unsigned long long *p, size_t bytes);
  int (*htod)(unsigned long long dst, const void *src, size_t bytes);
  int (*dtoh)(void *dst, unsigned long long src, size_t bytes);
  int (*sync)(void *stream);
  unsigned long long send, recv;   /* device mirrors of bufs.send and bufs.recv */
  void *stream;
} gpu;

/* Opens $GCOLL_CUDA_DRIVER as this program's CUDA, device 0, and mirrors
 * the send and receive buffers in device memory. */
static int gpu_open(struct bufs *b) {
  const char *path = getenv("GCOLL_CUDA_DRIVER");
  void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  int (*init)(unsigned), (*get)(int *, int), (*retain)(void **, int), (*set)(void *),
      (*screate)(void **, unsigned);
  int dev = 0;
  void *ctx = NULL;
#define SYM(var, name) *(void **)&var = h ? dlsym(h, name) : NULL
  SYM(init, "cuInit"); SYM(get, "cuDeviceGet"); SYM(retain, "cuDevicePrimaryCtxRetain");
  SYM(set, "cuCtxSetCurrent"); SYM(screate, "cuStreamCreate");
  SYM(gpu.mem_alloc, "cuMemAlloc_v2"); SYM(gpu.htod, "cuMemcpyHtoD_v2");
  SYM(gpu.dtoh, "cuMemcpyDtoH_v2"); SYM(gpu.sync, "cuStreamSynchronize");
#undef SYM
  if (h == NULL || init == NULL || get == NULL || retain == NULL || set == NULL ||
      screate == NULL || gpu.mem_alloc == NULL || gpu.htod == NULL || gpu.dtoh == NULL ||
      gpu.sync == NULL || init(0) != 0 || get(&dev, 0) != 0 || retain(&ctx, dev) != 0 ||
      set(ctx) != 0 || screate(&gpu.stream, 0) != 0 || gpu.mem_alloc(&gpu.send, b->cap) != 0 ||
      gpu.mem_alloc(&gpu.recv, b->cap) != 0) {
    fprintf(stderr, "rank %d: no usable CUDA driver at $GCOLL_CUDA_DRIVER (%s)\n", rank,
            path ? path : "unset");
    return -1;
  }
  on_device = 1;
  return 0;
}

/* Where the collective runs on a host-buffer address: the device mirror. */
static void *at(const struct bufs *b, const void *p) {
  if (!on_device || p == NULL) return (void *)p;
  const unsigned char *c = p;
  if (c >= b->send && c < b->send + b->cap) return (void *)(uintptr_t)(gpu.send + (size_t)(c - b->send));
  return (void *)(uintptr_t)(gpu.recv + (size_t)(c - b->recv));
}

static void *stream_of(void) { return on_device ? gpu.stream : NULL; }

/* Host buffers to their mirrors before a call, results back after it. */
static int gpu_copy(const struct bufs *b, int to_device) {
  if (!on_device) return 0;
  int rc = to_device ? gpu.htod(gpu.send, b->send, b->cap) || gpu.htod(gpu.recv, b->recv, b->cap)
                     : gpu.sync(gpu.stream) || gpu.dtoh(b->recv, gpu.recv, b->cap);
  if (rc) fprintf(stderr, "rank %d: device copy failed\n", rank);
  return rc ? -1 : 0;
}

/* One call and its check: wrong bytes, or -1 when the call failed. op is
 * the NCCL op to pass (a pre-mul-sum handle when premul). */
static long run_one(ncclComm_t comm, struct bufs *b, int coll, ncclDataType_t t, ncclRedOp_t op,
                    int premul, size_t count, int in_place, int root, uint64_t seed) {
  size_t es = gcoll_dtype_size((gcollDataType_t)t), nbytes = count * es;
  int blocks = coll == 3 || coll == 4 || coll >= 6;
  size_t total = blocks ? nbytes * (size_t)nranks : nbytes;
  memset(b->recv, 0xa5, total + 64);
  void *sendp = b->send, *recvp = b->recv, *src = in_place ? b->recv : b->send;
  ncclResult_t rc = ncclSuccess, want_rc = ncclSuccess;
  ncclRedOp_t ref_op = premul ? ncclSum : op;
  switch (coll) {
  case 0:
    expected(b->expect, b->block, 0, count, t, ref_op, premul, seed);
    fill(src, 0, count, t, ref_op, rank, seed);
    if (gpu_copy(b, 1)) return -1;
    rc = ncclAllReduce(at(b, src), at(b, recvp), count, t, op, comm, stream_of());
    break;
  case 1:
  case 5:
    fill(b->expect, 0, count, t, ref_op, root, seed);
    fill(coll == 5 ? recvp : src, 0, count, t, ref_op, rank, seed);
    if (gpu_copy(b, 1)) return -1;
    rc = coll == 5 ? ncclBcast(at(b, recvp), count, t, root, comm, stream_of())
                   : ncclBroadcast(at(b, src), at(b, recvp), count, t, root, comm, stream_of());
    break;
  case 2:   /* only root's recvbuff changes */
    if (rank == root) expected(b->expect, b->block, 0, count, t, ref_op, premul, seed);
    else if (in_place) fill(b->expect, 0, count, t, ref_op, rank, seed);
    else memset(b->expect, 0xa5, nbytes);
    fill(src, 0, count, t, ref_op, rank, seed);
    if (gpu_copy(b, 1)) return -1;
    rc = ncclReduce(at(b, src), at(b, recvp), count, t, op, root, comm, stream_of());
    break;
  case 3:
    for (int r = 0; r < nranks; r++) fill(b->expect + (size_t)r * nbytes, 0, count, t, ref_op, r, seed);
    if (in_place) sendp = b->recv + (size_t)rank * nbytes;
    fill(sendp, 0, count, t, ref_op, rank, seed);
    if (gpu_copy(b, 1)) return -1;
    rc = ncclAllGather(at(b, sendp), at(b, recvp), count, t, comm, stream_of());
    break;
  case 4:   /* reducescatter: block `rank` of the reduction */
    expected(b->expect, b->block, (size_t)rank * count, count, t, ref_op, premul, seed);
    fill(src, 0, count * nranks, t, ref_op, rank, seed);
    if (in_place) recvp = b->recv + (size_t)rank * nbytes;
    if (gpu_copy(b, 1)) return -1;
    rc = ncclReduceScatter(at(b, src), at(b, recvp), count, t, op, comm, stream_of());
    break;
  case 6:   /* alltoall: block p is rank p's input block `rank` */
    for (int r = 0; r < nranks; r++)
      fill(b->expect + (size_t)r * nbytes, (size_t)rank * count, count, t, ref_op, r, seed);
    fill(src, 0, count * nranks, t, ref_op, rank, seed);
    if (in_place) {   /* refused, as by NCCL: the buffer stays this rank's input */
      fill(b->expect, 0, count * nranks, t, ref_op, rank, seed);
      want_rc = count > 0 ? ncclInvalidArgument : ncclSuccess;
    }
    if (gpu_copy(b, 1)) return -1;
    rc = ncclAlltoAll(at(b, src), at(b, recvp), count, t, comm, stream_of());
    break;
  case 7:   /* gather: root holds every rank's input; elsewhere recvbuff is left alone */
    memset(b->expect, 0xa5, total);
    for (int r = 0; r < nranks; r++)
      if (rank == root || (in_place && r == rank))
        fill(b->expect + (size_t)r * nbytes, 0, count, t, ref_op, r, seed);
    if (in_place) sendp = b->recv + (size_t)rank * nbytes;
    fill(sendp, 0, count, t, ref_op, rank, seed);
    if (gpu_copy(b, 1)) return -1;
    rc = ncclGather(at(b, sendp), at(b, recvp), count, t, root, comm, stream_of());
    break;
  default:  /* scatter: root's input block `rank` */
    fill(b->expect, (size_t)rank * count, count, t, ref_op, root, seed);
    fill(src, 0, count * nranks, t, ref_op, rank, seed);
    if (in_place) recvp = b->recv + (size_t)rank * nbytes;
    if (gpu_copy(b, 1)) return -1;
    rc = ncclScatter(at(b, src), at(b, recvp), count, t, root, comm, stream_of());
    break;
  }
  char what[160];
  snprintf(what, sizeof(what), "%s %s %s count %zu %s", coll_names[coll],
           gcoll_dtype_name((gcollDataType_t)t), premul ? "premulsum" : gcoll_redop_name((gcollRedOp_t)op),
           count, in_place ? "in-place" : "out-of-place");
  if (rc != want_rc) {
    if (want_rc == ncclSuccess) check_nccl(rc, what);
    else fprintf(stderr, "rank %d: %s: returned %s, expected a refusal\n", rank, what,
                 ncclGetErrorString(rc));
    return -1;
  }
  if (gpu_copy(b, 0)) return -1;
  int own_block = (coll == 4 || coll == 8) && in_place;
  const unsigned char *got = own_block ? b->recv + (size_t)rank * nbytes : b->recv;
  size_t check_bytes = coll == 3 || coll == 6 || coll == 7 ? total : nbytes;
  long wrong = 0;
  for (size_t i = 0; i < check_bytes; i++) wrong += got[i] != b->expect[i];
  const unsigned char *end = own_block ? b->recv + total : got + check_bytes;
  for (size_t i = 0; i < 64; i++) wrong += end[i] != 0xa5;
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

static void bufs_alloc(struct bufs *b) {
  b->cap = (size_t)MAX_COUNT * 8 * (size_t)nranks + 128;
  b->send = xmalloc(b->cap);
  b->recv = xmalloc(b->cap);
  b->expect = xmalloc(b->cap);
  b->block = xmalloc((size_t)nranks * MAX_COUNT * 8);
}

static void bufs_free(struct bufs *b) {
  free(b->send);
  free(b->recv);
  free(b->expect);
  free(b->block);
}

/* Every collective, type, op and size, in and out of place. */
static long builtin_matrix(ncclComm_t comm, struct bufs *b, long *calls) {
  long wrong = 0;
  for (int coll = 0; coll < 9; coll++)
    for (int t = 0; t < ncclFloat8e4m3; t++)
      for (int op = 0; op < ncclNumOps; op++) {
        if ((coll == 1 || coll == 3 || coll >= 5) && op > 0) continue;   /* no op */
        for (int s = 0; s < SIZES; s++)
          for (int in_place = 0; in_place < (coll == 5 ? 1 : 2); in_place++) {
            uint64_t seed = 777 + (uint64_t)*calls;
            int root = (int)(seed % (uint64_t)nranks);
            long w = run_one(comm, b, coll, (ncclDataType_t)t, (ncclRedOp_t)op, 0, sizes[s],
                             in_place, root, seed);
            if (w < 0) return -1;
            wrong += w;
            (*calls)++;
          }
      }
  return wrong;
}

/* Pre-mul-sum ops with this rank's scalar, through every reduction; the
 * scalar in host memory, or (device mode) in device memory, read by the
 * kernel. */
static long premul_matrix(ncclComm_t comm, struct bufs *b, long *calls,
                          ncclScalarResidence_t residence) {
  long wrong = 0;
  unsigned long long dev_scalar = 0;
  if (residence == ncclScalarDevice && gpu.mem_alloc(&dev_scalar, 8) != 0) {
    fprintf(stderr, "rank %d: no device memory for a scalar\n", rank);
    return -1;
  }
  for (int t = 0; t < ncclFloat8e4m3; t++) {
    unsigned char scalar[8];
    store(scalar, 0, (ncclDataType_t)t, (uint64_t)int_scalar(rank), float_scalar(rank));
    void *where = scalar;
    if (residence == ncclScalarDevice) {
      if (gpu.htod(dev_scalar, scalar, 8) != 0) return -1;
      where = (void *)(uintptr_t)dev_scalar;
    }
    ncclRedOp_t op;
    if (check_nccl(ncclRedOpCreatePreMulSum(&op, where, (ncclDataType_t)t, residence, comm),
                   "premulsum create"))
      return -1;
    if (op < ncclNumOps) {
      fprintf(stderr, "rank %d: created op %d is a built-in value\n", rank, (int)op);
      return -1;
    }
    for (int coll = 0; coll < 5; coll++) {
      if (coll == 1 || coll == 3) continue;
      for (int s = 0; s < SIZES; s++)
        for (int in_place = 0; in_place < 2; in_place++) {
          uint64_t seed = 999 + (uint64_t)*calls;
          int root = (int)(seed % (uint64_t)nranks);
          long w = run_one(comm, b, coll, (ncclDataType_t)t, op, 1, sizes[s], in_place, root, seed);
          if (w < 0) return -1;
          wrong += w;
          (*calls)++;
        }
    }
    if (check_nccl(ncclRedOpDestroy(op, comm), "premulsum destroy")) return -1;
  }
  return wrong;
}

/* Two pre-mul-sum allreduces in one group, one with this rank's scalar
 * and one with 1 (a plain sum), the second's op destroyed before
 * ncclGroupEnd: each call keeps the scalar its op had when it was made. */
static long premul_group(ncclComm_t comm, struct bufs *b) {
  const size_t n = 1000, bytes = n * 4;
  unsigned char scalar[8];
  store(scalar, 0, ncclFloat, 0, float_scalar(rank));
  float one = 1.0f;
  ncclRedOp_t a, c;
  if (check_nccl(ncclRedOpCreatePreMulSum(&a, scalar, ncclFloat, ncclScalarHostImmediate, comm),
                 "premulsum create") ||
      check_nccl(ncclRedOpCreatePreMulSum(&c, &one, ncclFloat, ncclScalarHostImmediate, comm),
                 "premulsum create"))
    return -1;
  memset(b->recv, 0xa5, 2 * bytes + 64);
  fill(b->send, 0, n, ncclFloat, ncclSum, rank, 4711);
  fill(b->send + bytes, 0, n, ncclFloat, ncclSum, rank, 4712);
  if (gpu_copy(b, 1)) return -1;
  ncclGroupStart();
  ncclAllReduce(at(b, b->send), at(b, b->recv), n, ncclFloat, a, comm, stream_of());
  ncclAllReduce(at(b, b->send + bytes), at(b, b->recv + bytes), n, ncclFloat, c, comm,
                stream_of());
  ncclResult_t destroyed = ncclRedOpDestroy(c, comm);
  if (check_nccl(ncclGroupEnd(), "grouped pre-mul-sums") || check_nccl(destroyed, "destroy") ||
      gpu_copy(b, 0) || check_nccl(ncclRedOpDestroy(a, comm), "premulsum destroy"))
    return -1;
  expected(b->expect, b->block, 0, n, ncclFloat, ncclSum, 1, 4711);
  expected(b->expect + bytes, b->block, 0, n, ncclFloat, ncclSum, 0, 4712);
  long wrong = 0;
  for (size_t i = 0; i < 2 * bytes; i++) wrong += b->recv[i] != b->expect[i];
  for (size_t i = 0; i < 64; i++) wrong += b->recv[2 * bytes + i] != 0xa5;
  if (wrong) fprintf(stderr, "rank %d: grouped pre-mul-sums: %ld wrong bytes\n", rank, wrong);
  return wrong;
}

/* Send to the next rank, receive from the previous, in one group (with one
 * rank: to and from itself). */
static long ring_exchange(ncclComm_t comm) {
  static const size_t counts[] = {0, 1, 4097, 300000};   /* 1.2 MB: past a FIFO */
  long wrong = 0;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (int i = 0; i < 4; i++) {
    size_t n = counts[i], bytes = n * 4;
    unsigned char *out = xmalloc(bytes), *in = xmalloc(bytes + 64), *want = xmalloc(bytes);
    fill(out, 0, n, ncclInt32, ncclSum, rank * 1000 + next, 31 + i);
    fill(want, 0, n, ncclInt32, ncclSum, prev * 1000 + rank, 31 + i);
    memset(in, 0xa5, bytes + 64);
    ncclResult_t rc = ncclGroupStart();
    if (rc == ncclSuccess) rc = ncclSend(out, n, ncclInt32, next, comm, 0);
    if (rc == ncclSuccess) rc = ncclRecv(in, n, ncclInt32, prev, comm, 0);
    ncclResult_t end = ncclGroupEnd();
    if (check_nccl(rc != ncclSuccess ? rc : end, "send/recv ring")) wrong = -1;
    for (size_t k = 0; wrong >= 0 && k < bytes; k++) wrong += in[k] != want[k];
    for (size_t k = 0; wrong >= 0 && k < 64; k++) wrong += in[bytes + k] != 0xa5;
    free(out);
    free(in);
    free(want);
    if (wrong) {
      fprintf(stderr, "rank %d: ring exchange of %zu int32: %ld wrong\n", rank, n, wrong);
      return wrong;
    }
  }
  return 0;
}

/* ncclAllReduce, ncclAlltoAll, ncclGather and ncclScatter in one group,
 * host buffers; 0 when every result is right. */
static long grouped_colls(ncclComm_t comm) {
  enum { N = 1031 };
  int root = nranks - 1;
  size_t bytes = (size_t)N * nranks * 4;
  int32_t v = rank + 1;
  unsigned char *a_out = xmalloc(bytes), *a_in = xmalloc(bytes), *g_in = xmalloc(bytes),
                *s_out = xmalloc(bytes), *s_in = xmalloc(N * 4), *want = xmalloc(bytes);
  fill(a_out, 0, (size_t)N * nranks, ncclInt32, ncclSum, rank, 61);
  fill(s_out, 0, (size_t)N * nranks, ncclInt32, ncclSum, rank, 62);
  fill(g_in + (size_t)rank * N * 4, 0, N, ncclInt32, ncclSum, rank, 63);   /* in place */
  ncclResult_t rc = ncclGroupStart();
  if (rc == ncclSuccess) rc = ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, 0);
  if (rc == ncclSuccess) rc = ncclAlltoAll(a_out, a_in, N, ncclInt32, comm, 0);
  if (rc == ncclSuccess)
    rc = ncclGather(g_in + (size_t)rank * N * 4, g_in, N, ncclInt32, root, comm, 0);
  if (rc == ncclSuccess) rc = ncclScatter(s_out, s_in, N, ncclInt32, root, comm, 0);
  ncclResult_t end = ncclGroupEnd();
  long wrong = check_nccl(rc != ncclSuccess ? rc : end, "grouped alltoall, gather, scatter") ? -1
               : v != nranks * (nranks + 1) / 2;
  for (int r = 0; wrong >= 0 && r < nranks; r++) {
    fill(want, (size_t)rank * N, N, ncclInt32, ncclSum, r, 61);
    wrong += memcmp(a_in + (size_t)r * N * 4, want, N * 4) != 0;
    fill(want, 0, N, ncclInt32, ncclSum, r, 63);
    wrong += rank == root && memcmp(g_in + (size_t)r * N * 4, want, N * 4) != 0;
  }
  fill(want, (size_t)rank * N, N, ncclInt32, ncclSum, root, 62);
  if (wrong >= 0) wrong += memcmp(s_in, want, N * 4) != 0;
  if (wrong) fprintf(stderr, "rank %d: grouped alltoall, gather, scatter: %ld wrong\n", rank, wrong);
  free(a_out), free(a_in), free(g_in), free(s_out), free(s_in), free(want);
  return wrong;
}

/* The matrix's collectives on device buffers and a stream; a pre-mul-sum
 * op on them is refused (its scaling runs on the host). */
/* ncclMemAlloc'd memory, registered, carries an allreduce; 0 when right. */
static long memalloc_check(ncclComm_t comm) {
  enum { N = 4099 };
  float *dev = NULL, host[N];
  void *handle = NULL;
  if (check_nccl(ncclMemAlloc((void **)&dev, sizeof(host)), "ncclMemAlloc") || dev == NULL ||
      check_nccl(ncclCommRegister(comm, dev, sizeof(host), &handle), "ncclCommRegister"))
    return -1;
  for (int i = 0; i < N; i++) host[i] = (float)(rank + i % 5);
  long wrong = 0;
  if (gpu.htod((unsigned long long)(uintptr_t)dev, host, sizeof(host)) != 0 ||
      check_nccl(ncclAllReduce(dev, dev, N, ncclFloat, ncclSum, comm, gpu.stream), "allreduce") ||
      gpu.sync(gpu.stream) != 0 || gpu.dtoh(host, (unsigned long long)(uintptr_t)dev, sizeof(host)))
    wrong = -1;
  for (int i = 0; wrong >= 0 && i < N; i++)
    wrong += host[i] != (float)(nranks * (nranks - 1) / 2 + nranks * (i % 5));
  if (check_nccl(ncclCommDeregister(comm, handle), "ncclCommDeregister") ||
      check_nccl(ncclMemFree(dev), "ncclMemFree"))
    return -1;
  return wrong;
}

/* ncclSend/ncclRecv in a group on device buffers and the stream, as a
 * ring; per type one more where even ranks receive into host memory
 * (stream 0), so device sends meet host receives. Wrong bytes, -1 when a
 * call failed. */
static long device_sendrecv(ncclComm_t comm, struct bufs *b, long *calls) {
  static const ncclDataType_t types[] = {ncclInt8, ncclFloat16, ncclBfloat16, ncclFloat64};
  static const size_t counts[] = {0, 1, 7, 4097};
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  long wrong = 0;
  for (int t = 0; t < 4; t++)
    for (int c = 0; c < 5; c++) {
      int mixed = c == 4;
      size_t n = counts[mixed ? 3 : c], bytes = n * gcoll_dtype_size((gcollDataType_t)types[t]);
      uint64_t seed = 555 + (uint64_t)(*calls)++;
      int recv_host = mixed && rank % 2 == 0;
      fill(b->send, 0, n, types[t], ncclSum, rank * 1000 + next, seed);
      fill(b->expect, 0, n, types[t], ncclSum, prev * 1000 + rank, seed);
      memset(b->recv, 0xa5, bytes + 64);
      if (gpu_copy(b, 1)) return -1;
      void *out = (void *)(uintptr_t)gpu.send;
      void *in = recv_host ? (void *)b->recv : (void *)(uintptr_t)gpu.recv;
      ncclResult_t rc = ncclGroupStart();
      if (rc == ncclSuccess) rc = ncclSend(out, n, types[t], next, comm, gpu.stream);
      if (rc == ncclSuccess) rc = ncclRecv(in, n, types[t], prev, comm, recv_host ? 0 : gpu.stream);
      ncclResult_t end = ncclGroupEnd();
      char what[96];
      snprintf(what, sizeof(what), "device send/recv ring %s count %zu%s",
               gcoll_dtype_name((gcollDataType_t)types[t]), n, mixed ? " (host receives)" : "");
      if (check_nccl(rc != ncclSuccess ? rc : end, what) || (!recv_host && gpu_copy(b, 0)))
        return -1;
      long w = 0;
      for (size_t k = 0; k < bytes; k++) w += b->recv[k] != b->expect[k];
      for (size_t k = 0; k < 64; k++) w += b->recv[bytes + k] != 0xa5;
      if (w) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, w);
      wrong += w;
    }
  return wrong;
}

static int device_mode(ncclComm_t comm) {
  struct bufs b;
  bufs_alloc(&b);
  long calls = 0, wrong = -1, mem_wrong = -1, sr_calls = 0, sr_wrong = -1;
  if (gpu_open(&b) == 0) wrong = builtin_matrix(comm, &b, &calls);
  if (wrong == 0) sr_wrong = device_sendrecv(comm, &b, &sr_calls);
  if (wrong == 0) mem_wrong = memalloc_check(comm);
  /* Pre-mul-sums on device buffers, the scalar in host and in device
   * memory, and grouped. */
  long pm_calls = 0, pm_wrong = -1, pm_dev_calls = 0, pm_dev_wrong = -1, pm_group = -1;
  if (wrong == 0)
    pm_wrong = premul_matrix(comm, &b, &pm_calls, ncclScalarHostImmediate);
  if (pm_wrong == 0)
    pm_dev_wrong = premul_matrix(comm, &b, &pm_dev_calls, ncclScalarDevice);
  if (pm_dev_wrong == 0) pm_group = premul_group(comm, &b);
  /* A device scalar cannot serve host buffers: one line, nothing runs. */
  int refused = 0;
  unsigned long long dev_scalar = 0;
  ncclRedOp_t op;
  if (pm_group == 0 && gpu.mem_alloc(&dev_scalar, 8) == 0 &&
      check_nccl(ncclRedOpCreatePreMulSum(&op, (void *)(uintptr_t)dev_scalar, ncclFloat,
                                          ncclScalarDevice, comm), "premulsum create") == 0) {
    float h[4] = {1, 2, 3, 4};
    ncclResult_t rc = ncclAllReduce(h, h, 4, ncclFloat, op, comm, NULL);
    refused = rc == ncclInvalidUsage && strstr(ncclGetLastError(comm), "host buffers") != NULL &&
              h[3] == 4;
    if (!refused) fprintf(stderr, "rank %d: a device scalar with host buffers: %s (%s)\n", rank,
                          ncclGetErrorString(rc), ncclGetLastError(comm));
    ncclRedOpDestroy(op, comm);
  }
  bufs_free(&b);
  printf("rank %d: %ld calls on device buffers, %ld wrong; %ld send/recv rings on device "
         "buffers, %ld wrong; ncclMemAlloc'd and registered: %ld wrong; pre-mul-sum on device "
         "buffers: %ld calls (host scalar) %ld wrong, %ld calls (device scalar) %ld wrong, "
         "grouped %ld wrong; a device scalar on host buffers %s\n", rank, calls, wrong,
         sr_calls, sr_wrong, mem_wrong, pm_calls, pm_wrong, pm_dev_calls, pm_dev_wrong, pm_group,
         refused ? "refused" : "NOT refused");
  return wrong != 0 || sr_wrong != 0 || mem_wrong != 0 || pm_wrong != 0 || pm_dev_wrong != 0 ||
         pm_group != 0 || !refused;
}

static int env_int(const char *name) {
  const char *s = getenv(name);
  return s ? atoi(s) : -1;
}

/* The communicator's id as NCCL programs share it: rank 0 makes it and
 * sends it to the others (nccl-tests with MPI_Bcast, PyTorch through its
 * store); here a broadcast over gcoll's own communicator on the launcher's
 * plan stands in for MPI. */
static int launcher_id(ncclUniqueId *id) {
  gcollComm_t world;
  memset(id, 0, sizeof(*id));
  if (check_gcoll(gcollCommInitFromPlan(&world, NULL, -1), "gcollCommInitFromPlan")) return -1;
  int rc = rank == 0 ? check_nccl(ncclGetUniqueId(id), "ncclGetUniqueId") : 0;
  if (check_gcoll(gcollBroadcast(id, id, sizeof(*id), gcollUint8, 0, world, NULL), "id broadcast"))
    rc = -1;
  gcollCommDestroy(world);
  return rc;
}

static int matrix(int device) {
  rank = env_int("GCOLL_RANK");
  nranks = env_int("GCOLL_NRANKS");
  if (check_loaded_library()) return 1;
  if (rank < 0 || nranks < 1 || nranks > 64) {
    fprintf(stderr, "nccl_host_check matrix: run me under gcollrun (GCOLL_RANK, GCOLL_NRANKS)\n");
    return 2;
  }
  /* A program's usual start: rank 0's id and a config asking for
   * non-blocking init, which gcoll accepts and runs blocking. */
  ncclUniqueId id;
  ncclComm_t comm;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (launcher_id(&id) ||
      check_nccl(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), "init"))
    return 3;
  int r = -1, n = -1, dev = -1;
  ncclResult_t async = ncclInternalError;
  if (check_nccl(ncclCommUserRank(comm, &r), "rank") || check_nccl(ncclCommCount(comm, &n), "count") ||
      check_nccl(ncclCommCuDevice(comm, &dev), "device") ||
      check_nccl(ncclCommGetAsyncError(comm, &async), "async") || r != rank || n != nranks ||
      dev != 0 || async != ncclSuccess) {
    fprintf(stderr, "rank %d: comm says rank %d of %d, device %d, async %d\n", rank, r, n, dev,
            (int)async);
    return 1;
  }
  if (device) {
    int bad = device_mode(comm);
    bad |= check_nccl(ncclCommDestroy(comm), "destroy") != 0;
    return bad;
  }
  struct bufs b;
  bufs_alloc(&b);
  long calls = 0, wrong = builtin_matrix(comm, &b, &calls), pm_calls = 0, pm_wrong = -1, ring = -1;
  long grouped = -1;
  if (wrong >= 0) pm_wrong = premul_matrix(comm, &b, &pm_calls, ncclScalarHostImmediate);
  if (pm_wrong >= 0) {
    long g = premul_group(comm, &b);
    pm_wrong = g < 0 ? -1 : pm_wrong + g;
  }
  if (pm_wrong >= 0) ring = ring_exchange(comm);
  if (ring >= 0) grouped = grouped_colls(comm);
  bufs_free(&b);
  int bad = wrong != 0 || pm_wrong != 0 || ring != 0 || grouped != 0;
  bad |= check_nccl(ncclCommFinalize(comm), "finalize") != 0;
  bad |= check_nccl(ncclCommDestroy(comm), "destroy") != 0;
  printf("rank %d: %ld calls, %ld wrong; %ld pre-mul-sum calls, %ld wrong; ring %s; grouped "
         "alltoall/gather/scatter %s\n", rank, calls, wrong, pm_calls, pm_wrong,
         ring == 0 ? "ok" : "FAILED", grouped == 0 ? "ok" : "FAILED");
  return bad;
}

/* ---- refusals --------------------------------------------------------- */

static int refusal_failures;

/* rc must be `want`, and a refusal must come with a one-line reason
 * containing `word`. */
static void expect_refusal(ncclResult_t rc, ncclResult_t want, const char *word, const char *what) {
  const char *why = ncclGetLastError(NULL);
  if (want == ncclSuccess && rc == ncclSuccess) {
    printf("rank %d: %s: accepted\n", rank, what);
    return;
  }
  if (want != ncclSuccess && rc == want && why[0] != '\0' && strchr(why, '\n') == NULL &&
      strstr(why, word) != NULL) {
    printf("rank %d: %s: %s: %s\n", rank, what, ncclGetErrorString(rc), why);
    return;
  }
  printf("rank %d: %s: got %d (%s), want %d; reason '%s' should mention '%s'\n", rank, what,
         (int)rc, ncclGetErrorString(rc), (int)want, why, word);
  refusal_failures++;
}

static int refusals(void) {
  rank = env_int("GCOLL_RANK");
  nranks = env_int("GCOLL_NRANKS");
  if (check_loaded_library()) return 1;
  if (rank < 0 || nranks < 2) {
    fprintf(stderr, "nccl_host_check refusals: run me under gcollrun with 2+ ranks\n");
    return 2;
  }
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  if (launcher_id(&id)) return 3;
  /* Before the real init: nothing collective happens in these. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0x12345678;
  expect_refusal(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), ncclInvalidArgument,
                 "magic", "config with a wrong magic");
  ncclConfig_t config2 = NCCL_CONFIG_INITIALIZER;
  config2.blocking = 5;
  expect_refusal(ncclCommInitRankConfig(&comm, nranks, id, rank, &config2), ncclInvalidArgument,
                 "blocking", "config with blocking 5");
  ncclConfig_t config3 = NCCL_CONFIG_INITIALIZER;
  config3.netName = "EFA";
  expect_refusal(ncclCommInitRankConfig(&comm, nranks, id, rank, &config3), ncclInvalidArgument,
                 "netName 'EFA'", "config with netName EFA (gcoll has IB and Socket)");
  expect_refusal(ncclCommInitRank(&comm, 0, id, rank), ncclInvalidArgument, "rank",
                 "a communicator of 0 ranks");
  if (comm != NULL) {
    printf("rank %d: a refused init left a communicator\n", rank);
    refusal_failures++;
  }
  if (check_nccl(ncclCommInitRank(&comm, nranks, id, rank), "init")) return 3;

  float buf[16] = {0}, scalar = 2.0f;
  expect_refusal(ncclAllReduce(buf, buf, 16, ncclFloat8e4m3, ncclSum, comm, 0), ncclInvalidArgument,
                 "ncclFloat8e4m3", "allreduce of fp8 e4m3");
  expect_refusal(ncclSend(buf, 16, ncclFloat8e5m2, (rank + 1) % nranks, comm, 0),
                 ncclInvalidArgument, "ncclFloat8e5m2", "send of fp8 e5m2");
  expect_refusal(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, (cudaStream_t)buf),
                 ncclInvalidUsage, "stream", "allreduce on a stream");
  expect_refusal(ncclAllGather(buf, buf, 1, ncclFloat, comm, (cudaStream_t)buf), ncclInvalidUsage,
                 "stream", "allgather on a stream");
  expect_refusal(ncclAllReduce(buf, buf, 16, ncclFloat, (ncclRedOp_t)42, comm, 0),
                 ncclInvalidArgument, "op 42", "allreduce with op 42");
  ncclRedOp_t op;
  expect_refusal(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarDevice, comm),
                 ncclInvalidUsage, "device memory", "pre-mul-sum with a device scalar in host memory");
  if (check_nccl(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, comm),
                 "premulsum create"))
    return 1;
  expect_refusal(ncclAllReduce(buf, buf, 16, ncclDouble, op, comm, 0), ncclInvalidArgument,
                 "datatype", "pre-mul-sum op with another datatype");
  expect_refusal(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "built in",
                 "destroying ncclSum");
  check_nccl(ncclRedOpDestroy(op, comm), "premulsum destroy");
  expect_refusal(ncclReduce(buf, buf, 16, ncclFloat, op, 0, comm, 0), ncclInvalidArgument,
                 "live", "reduce with a destroyed op");
  expect_refusal(ncclRedOpDestroy(op, comm), ncclInvalidArgument, "live", "destroying it twice");
  expect_refusal(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, NULL, 0), ncclInvalidArgument,
                 "NULL", "allreduce on a NULL comm");
  /* A refusal inside a group poisons it on every rank alike: nothing runs. */
  float in[4] = {0};
  ncclGroupStart();
  ncclRecv(in, 4, ncclFloat, (rank + nranks - 1) % nranks, comm, 0);
  ncclResult_t refused = ncclSend(buf, 4, ncclFloat, (rank + 1) % nranks, comm, (cudaStream_t)buf);
  expect_refusal(ncclGroupEnd(), ncclInvalidUsage, "stream", "a group with a refused send");
  if (refused != ncclInvalidUsage) {
    printf("rank %d: the send on a stream inside a group returned %d\n", rank, (int)refused);
    refusal_failures++;
  }
  /* NCCL 2.19's memory calls without a CUDA driver (on a machine with
   * one, `device` mode tests them), and registrations. */
  void *driver = getenv("GCOLL_CUDA_DRIVER") ? NULL : dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == NULL && getenv("GCOLL_CUDA_DRIVER") == NULL) {
    void *mem = (void *)buf;
    expect_refusal(ncclMemAlloc(&mem, 4096), ncclUnhandledCudaError, "ncclMemAlloc",
                   "ncclMemAlloc without a CUDA driver");
    if (mem != NULL) {
      printf("rank %d: a failed ncclMemAlloc left %p\n", rank, mem);
      refusal_failures++;
    }
  }
  if (driver != NULL) dlclose(driver);
  void *handle = NULL;
  if (check_nccl(ncclCommRegister(comm, buf, sizeof(float) * 16, &handle), "register") ||
      check_nccl(ncclCommDeregister(comm, handle), "deregister"))
    refusal_failures++;
  expect_refusal(ncclCommDeregister(comm, buf), ncclInvalidArgument, "not a registration",
                 "deregistering what is not a handle");
  const char *unknown = ncclGetErrorString((ncclResult_t)99);
  if (unknown == NULL || strstr(unknown, "unknown") == NULL) {
    printf("rank %d: ncclGetErrorString(99) = '%s'\n", rank, unknown ? unknown : "(null)");
    refusal_failures++;
  }

  /* Refused calls moved nothing: the communicator still works. */
  for (int i = 0; i < 16; i++) buf[i] = (float)(rank + 1);
  if (check_nccl(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, 0), "allreduce after refusals"))
    return 1;
  for (int i = 0; i < 16; i++)
    if (buf[i] != (float)nranks * (nranks + 1) / 2) {
      printf("rank %d: allreduce after refusals: element %d is %g\n", rank, i, buf[i]);
      refusal_failures++;
      break;
    }
  check_nccl(ncclCommFinalize(comm), "finalize");
  expect_refusal(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, 0), ncclInvalidUsage,
                 "finalized", "allreduce after ncclCommFinalize");
  check_nccl(ncclCommDestroy(comm), "destroy");
  printf("rank %d: %s\n", rank, refusal_failures ? "FAILED" : "refusals ok");
  return refusal_failures ? 1 : 0;
}

/* ---- without a launcher ------------------------------------------------- */

/* A few collectives on a fresh communicator, with a pre-mul-sum. */
static long small_checks(ncclComm_t comm, long *calls) {
  struct bufs b;
  bufs_alloc(&b);
  long wrong = 0;
  static const ncclDataType_t types[] = {ncclInt32, ncclFloat, ncclBfloat16};
  for (int i = 0; i < 3 && wrong >= 0; i++)
    for (int coll = 0; coll < 5 && wrong >= 0; coll++) {
      long w = run_one(comm, &b, coll, types[i], ncclSum, 0, 1023, coll & 1, coll % nranks,
                       4242 + (uint64_t)*calls);
      wrong = w < 0 ? -1 : wrong + w;
      (*calls)++;
    }
  unsigned char scalar[8];
  store(scalar, 0, ncclFloat, 0, float_scalar(rank));
  ncclRedOp_t op;
  if (wrong >= 0 &&
      check_nccl(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat, ncclScalarHostImmediate, comm),
                 "premulsum create") == 0) {
    long w = run_one(comm, &b, 0, ncclFloat, op, 1, 4097, 0, 0, 99);
    wrong = w < 0 ? -1 : wrong + w;
    (*calls)++;
    ncclRedOpDestroy(op, comm);
  }
  bufs_free(&b);
  return wrong;
}

static int auto_rank(ncclUniqueId id) {
  ncclComm_t comm;
  if (check_nccl(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank")) return 3;
  long calls = 0, wrong = small_checks(comm, &calls);
  int bad = wrong != 0;
  bad |= check_nccl(ncclCommDestroy(comm), "destroy") != 0;
  printf("rank %d of %d (plan=auto): %ld calls, %ld wrong\n", rank, nranks, calls, wrong);
  return bad;
}

/* The other ranks are forked before ncclGetUniqueId and get the id through a
 * pipe, as gcollGetUniqueId asks: a fork while its store thread might hold
 * the allocator's lock could leave a child deadlocked. */
static int auto_job(int n) {
  if (getenv("GCOLL_PLAN") != NULL) {
    fprintf(stderr, "nccl_host_check auto: GCOLL_PLAN must not be set\n");
    return 2;
  }
  nranks = n;
  if (check_loaded_library()) return 1;
  pid_t pids[64];
  int pipes[64][2];
  for (int r = 1; r < n; r++) {
    if (pipe(pipes[r]) != 0 || (pids[r] = fork()) < 0) {
      perror("nccl_host_check auto");
      return 2;
    }
    if (pids[r] == 0) {
      rank = r;
      ncclUniqueId id;
      close(pipes[r][1]);
      ssize_t got = read(pipes[r][0], &id, sizeof(id));
      int status = got == (ssize_t)sizeof(id) ? auto_rank(id) : 4;
      fflush(stdout);   /* _exit does not, and the forked stdio buffers are the child's */
      _exit(status);
    }
    close(pipes[r][0]);
  }
  ncclUniqueId id;
  rank = 0;
  int bad = check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId") != 0;
  for (int r = 1; r < n; r++) {
    /* A failed id still goes out, so the children fail at once, not later. */
    if (write(pipes[r][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) bad = 1;
    close(pipes[r][1]);
  }
  if (!bad) bad = auto_rank(id);
  for (int r = 1; r < n; r++) {
    int st;
    if (waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d (pid %d) failed\n", r, (int)pids[r]);
      bad = 1;
    }
  }
  return bad;
}

struct initall_rank {
  ncclComm_t comm;
  int index, device;
  long wrong, calls;
};

/* rank and nranks are per process in check_util.h: the threads of this mode
 * only use rank-free checks. */
static void *initall_thread(void *arg) {
  struct initall_rank *t = arg;
  int r = -1, n = -1, dev = -1;
  ncclCommUserRank(t->comm, &r);
  ncclCommCount(t->comm, &n);
  ncclCommCuDevice(t->comm, &dev);
  t->wrong = r != t->index || n != nranks || dev != t->device;
  /* Each rank contributes index+1 in every element; all must see the sum. */
  int32_t buf[1023];
  for (int round = 0; round < 3 && t->wrong == 0; round++) {
    for (int i = 0; i < 1023; i++) buf[i] = (t->index + 1) * (i + round);
    if (ncclAllReduce(buf, buf, 1023, ncclInt32, ncclSum, t->comm, 0) != ncclSuccess) {
      fprintf(stderr, "initall rank %d: %s\n", t->index, ncclGetLastError(NULL));
      t->wrong = -1;
      break;
    }
    t->calls++;
    for (int i = 0; i < 1023; i++) t->wrong += buf[i] != nranks * (nranks + 1) / 2 * (i + round);
  }
  return NULL;
}

static int initall(int n) {
  nranks = n;
  if (check_loaded_library()) return 1;
  ncclComm_t comms[64];
  int devlist[64];
  for (int i = 0; i < n; i++) devlist[i] = n - 1 - i;   /* not the identity: it is kept */
  if (check_nccl(ncclCommInitAll(comms, n, devlist), "ncclCommInitAll")) return 3;
  struct initall_rank ranks[64];
  pthread_t threads[64];
  for (int i = 0; i < n; i++) {
    ranks[i] = (struct initall_rank){.comm = comms[i], .index = i, .device = devlist[i]};
    pthread_create(&threads[i], NULL, initall_thread, &ranks[i]);
  }
  int bad = 0;
  long calls = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(threads[i], NULL);
    bad |= ranks[i].wrong != 0;
    calls += ranks[i].calls;
    bad |= check_nccl(ncclCommDestroy(comms[i]), "destroy") != 0;
  }
  printf("initall %d comms: %ld calls, %s\n", n, calls, bad ? "FAILED" : "ok");
  return bad;
}

/* One thread drives every comm of ncclCommInitAll: an allreduce and an
 * allgather per comm in one group (NCCL's single-process multi-GPU
 * pattern; without grouping the first call would wait for the others). */
static int initall_grouped(int n) {
  nranks = n;
  if (check_loaded_library()) return 1;
  ncclComm_t comms[64];
  if (check_nccl(ncclCommInitAll(comms, n, NULL), "ncclCommInitAll")) return 3;
  static int32_t bufs[64][1023], gath[64][64 * 7];
  int32_t mine[64][7];
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < 1023; i++) bufs[r][i] = (r + 1) * i;
    for (int i = 0; i < 7; i++) mine[r][i] = 100 * r + i;
  }
  ncclResult_t rc = ncclGroupStart();
  for (int r = 0; r < n && rc == ncclSuccess; r++) {
    rc = ncclAllReduce(bufs[r], bufs[r], 1023, ncclInt32, ncclSum, comms[r], 0);
    if (rc == ncclSuccess) rc = ncclAllGather(mine[r], gath[r], 7, ncclInt32, comms[r], 0);
  }
  ncclResult_t end = ncclGroupEnd();
  int bad = check_nccl(rc != ncclSuccess ? rc : end, "grouped allreduce and allgather") != 0;
  for (int r = 0; r < n && !bad; r++) {
    for (int i = 0; i < 1023; i++) bad |= bufs[r][i] != n * (n + 1) / 2 * i;
    for (int q = 0; q < n; q++)
      for (int i = 0; i < 7; i++) bad |= gath[r][q * 7 + i] != 100 * q + i;
  }
  for (int r = 0; r < n; r++) bad |= check_nccl(ncclCommDestroy(comms[r]), "destroy") != 0;
  printf("initall %d comms, grouped: %s\n", n, bad ? "FAILED" : "ok");
  return bad;
}

/* ---- abort ------------------------------------------------------------- */

static void *nccl_abort_later(void *arg) {
  usleep(300000);
  ncclCommAbort((ncclComm_t)arg);
  return NULL;
}

static int abort_test(void) {
  rank = env_int("GCOLL_RANK");
  nranks = env_int("GCOLL_NRANKS");
  if (check_loaded_library()) return 1;
  ncclUniqueId id;
  ncclComm_t comm;
  if (launcher_id(&id) || check_nccl(ncclCommInitRank(&comm, nranks, id, rank), "init")) return 3;
  if (rank != 0) {
    sleep(3);
    ncclCommDestroy(comm);
    printf("rank %d: done\n", rank);
    return 0;
  }
  pthread_t th;
  float buf[256] = {0};
  double t0 = now_s();
  pthread_create(&th, NULL, nccl_abort_later, comm);
  ncclResult_t rc = ncclAllReduce(buf, buf, 256, ncclFloat, ncclSum, comm, 0);
  double dt = now_s() - t0;
  pthread_join(th, NULL);
  printf("rank 0: allreduce returned '%s' after %.2f s: %s\n", ncclGetErrorString(rc), dt,
         ncclGetLastError(NULL));
  return rc != ncclSuccess && dt < 2.5 ? 0 : 1;
}

/* ---- the device-memory probe, with a fake driver --------------------------- */

static int devmem(const char *mode) {
  nranks = 1;
  if (check_loaded_library()) return 1;
  int refuse = strcmp(mode, "refuse") == 0;
  enum { N = 64 };
  float *dev = xmalloc(N * 4), *managed = xmalloc(N * 4), *host = xmalloc(N * 4);
  char addr[32];
  snprintf(addr, sizeof(addr), "%llx", (unsigned long long)(uintptr_t)dev);
  setenv("FAKE_CUDA_DEVICE_PTR", addr, 1);
  snprintf(addr, sizeof(addr), "%llx", (unsigned long long)(uintptr_t)managed);
  setenv("FAKE_CUDA_MANAGED_PTR", addr, 1);
  setenv("FAKE_CUDA_DEVICE", "3", 1);
  ncclUniqueId id;
  ncclComm_t comm;
  if (check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId") ||
      check_nccl(ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank"))
    return 3;
  int device = -1;
  ncclCommCuDevice(comm, &device);
  if (device != 3) {
    printf("ncclCommCuDevice says %d, cudaGetDevice 3\n", device);
    refusal_failures++;
  }
  for (int i = 0; i < N; i++) dev[i] = managed[i] = host[i] = (float)i;
  ncclResult_t want = refuse ? ncclInvalidUsage : ncclSuccess;
  const char *word = refuse ? "device memory" : "";
  expect_refusal(ncclAllReduce(dev, host, N, ncclFloat, ncclSum, comm, 0), want, word,
                 "allreduce from \"device\" memory");
  expect_refusal(ncclAllGather(host, dev, N, ncclFloat, comm, 0), want, word,
                 "allgather into \"device\" memory");
  expect_refusal(ncclBcast(dev, N, ncclFloat, 0, comm, 0), want, word, "bcast of \"device\" memory");
  ncclRedOp_t op;
  expect_refusal(ncclRedOpCreatePreMulSum(&op, dev, ncclFloat, ncclScalarHostImmediate, comm),
                 want, refuse ? "device" : "", "pre-mul-sum scalar in \"device\" memory");
  if (!refuse) ncclRedOpDestroy(op, comm);
  ncclGroupStart();
  ncclSend(dev, N, ncclFloat, 0, comm, 0);
  ncclRecv(host, N, ncclFloat, 0, comm, 0);
  expect_refusal(ncclGroupEnd(), want, word, "send to self from \"device\" memory");
  /* Managed memory is host-accessible: used, and right. */
  memset(host, 0, N * 4);
  if (check_nccl(ncclAllReduce(managed, host, N, ncclFloat, ncclSum, comm, 0), "managed allreduce"))
    refusal_failures++;
  for (int i = 0; i < N; i++)
    if (host[i] != (float)i) {
      printf("allreduce of managed memory: element %d is %g\n", i, host[i]);
      refusal_failures++;
      break;
    }
  /* The probe really asked our fake driver. */
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cuda == NULL || dlsym(cuda, "cuPointerGetAttribute") == NULL) {
    printf("libcuda.so.1 was not loaded by the library\n");
    refusal_failures++;
  }
  if (cuda != NULL) dlclose(cuda);
  check_nccl(ncclCommDestroy(comm), "destroy");
  free(dev);
  free(managed);
  free(host);
  printf("devmem %s: %s\n", mode, refusal_failures ? "FAILED" : "ok");
  return refusal_failures ? 1 : 0;
}

/* The config fields gcoll honours, as PyTorch's ProcessGroupNCCL options
 * set them. */
static int config_mode(void) {
  rank = env_int("GCOLL_RANK");
  nranks = env_int("GCOLL_NRANKS");
  if (check_loaded_library()) return 1;
  if (rank < 0 || nranks < 1 || nranks > 64) {
    fprintf(stderr, "nccl_host_check config: run me under gcollrun\n");
    return 2;
  }
  ncclUniqueId id;
  ncclComm_t comm;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.maxCTAs = 1;
  config.minCTAs = 1;
  config.netName = "Socket";
  config.commName = "tp";
  config.cgaClusterSize = 2;   /* accepted, no effect */
  config.splitShare = 1;       /* accepted, no effect */
  if (launcher_id(&id) ||
      check_nccl(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), "init"))
    return 3;
  long calls = 0, wrong = small_checks(comm, &calls);
  int bad = wrong != 0 || check_nccl(ncclCommDestroy(comm), "destroy") != 0;
  printf("rank %d: config: %ld calls, %ld wrong\n", rank, calls, wrong);
  return bad;
}

/* The GPU first, as a CUDA program's cudaSetDevice: init sees which GPU
 * this rank drives. */
static int identity(void) {
  rank = env_int("GCOLL_RANK");
  nranks = env_int("GCOLL_NRANKS");
  if (check_loaded_library()) return 1;
  if (rank < 0 || nranks < 2 || nranks > 64) {
    fprintf(stderr, "nccl_host_check identity: run me under gcollrun, 2 ranks or more\n");
    return 2;
  }
  struct bufs b;
  bufs_alloc(&b);
  ncclUniqueId id;
  ncclComm_t comm, half = NULL;
  if (gpu_open(&b) || launcher_id(&id) ||
      check_nccl(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank"))
    return 3;
  long calls = 0, wrong = 0;
  static const ncclDataType_t types[] = {ncclInt32, ncclFloat};
  for (int i = 0; i < 2 && wrong >= 0; i++)
    for (int coll = 0; coll < 5 && wrong >= 0; coll++) {
      long w = run_one(comm, &b, coll, types[i], ncclSum, 0, 1021, coll & 1, coll % nranks,
                       31 + (uint64_t)calls);
      wrong = w < 0 ? -1 : wrong + w;
      calls++;
    }
  int bad = wrong != 0;
  bad |= check_nccl(ncclCommSplit(comm, rank % 2, rank, &half, NULL), "ncclCommSplit") != 0;
  if (half != NULL) bad |= check_nccl(ncclCommDestroy(half), "destroy half") != 0;
  bad |= check_nccl(ncclCommDestroy(comm), "destroy") != 0;
  bufs_free(&b);
  printf("rank %d: identity: %ld calls on device buffers, %ld wrong; split %s\n", rank, calls,
         wrong, half != NULL ? "ok" : "FAILED");
  return bad;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "matrix") == 0) return matrix(0);
  if (argc >= 2 && strcmp(argv[1], "device") == 0) return matrix(1);
  if (argc >= 2 && strcmp(argv[1], "refusals") == 0) return refusals();
  if (argc >= 2 && strcmp(argv[1], "abort") == 0) return abort_test();
  if (argc >= 2 && strcmp(argv[1], "identity") == 0) return identity();
  if (argc >= 2 && strcmp(argv[1], "config") == 0) return config_mode();
  int n = argc >= 3 ? atoi(argv[2]) : 0;
  if (argc >= 3 && strcmp(argv[1], "auto") == 0 && n >= 1 && n <= 64) return auto_job(n);
  if (argc >= 3 && strcmp(argv[1], "initall") == 0 && n >= 1 && n <= 64) return initall(n);
  if (argc >= 3 && strcmp(argv[1], "initall-grouped") == 0 && n >= 1 && n <= 64)
    return initall_grouped(n);
  if (argc >= 3 && strcmp(argv[1], "devmem") == 0 &&
      (strcmp(argv[2], "refuse") == 0 || strcmp(argv[2], "host") == 0))
    return devmem(argv[2]);
  fprintf(stderr, "usage: nccl_host_check matrix | device | refusals | abort | identity | config | "
                  "auto N | initall N | devmem refuse|host\n");
  return 2;
}
