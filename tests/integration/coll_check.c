/* Correctness and failure checks of the collective API, run as real ranks
 * under gcollrun (tests/integration/test_coll.sh).
 *
 *   coll_check matrix [--full]   every collective x type x op x size, in and
 *                                out of place, against a serial reference
 *   coll_check matrix --sizes N,N,... [--allreduce]  the same at these
 *                                counts (of allreduce alone)
 *   coll_check die RANK ITER [COUNT [COLL]]  RANK SIGKILLs itself in
 *                                iteration ITER of an allreduce loop (COLL
 *                                reduce: of reduces to rank 0; allgather,
 *                                broadcast from rank 0) of COUNT floats
 *                                (1024; per rank for allgather); the others
 *                                must fail with gcollRemoteError naming RANK
 *   coll_check abort             a thread aborts the communicator while rank
 *                                0 waits in a collective its peers never join
 *   coll_check stall             rank 0 waits in an allreduce its peers join
 *                                only after its deadline (set GCOLL_TIMEOUT
 *                                short): it must fail with the deadline
 *   coll_check badargs           invalid arguments are refused, and the
 *                                communicator still works afterwards
 *   coll_check init              only initialise (for plan mismatch tests)
 *   coll_check [--device] digest one FNV-1a digest per (type, size) of
 *                                allreduce and reducescatter sums of
 *                                random non-integer floats (whose rounding
 *                                depends on the reduction order), for
 *                                test_reproducible.sh to compare across
 *                                ranks, runs and executors
 *   coll_check [--device] hostcall  one allreduce on host buffers: its result,
 *                                or the refusal of a communicator whose FIFOs
 *                                are in GPU memory (p2p)
 *
 *   coll_check --device queue N  N allreduces on device buffers queued on
 *                                the default stream without waiting (more
 *                                than the executor's launch slots), then one
 *                                wait, then every result checked
 *   coll_check --device graph N  allreduce (sum, out of place), allreduce
 *                                (max, in place), broadcast and allgather
 *                                captured into one CUDA graph, replayed N
 *                                times with new inputs before each replay
 *                                and an eager allreduce between replays;
 *                                every result checked
 *
 * `coll_check --device MODE` runs die, abort and stall on device buffers (CUDA
 * device memory of the driver $GCOLL_CUDA_DRIVER names, e.g. the emulator):
 * the kernel, not the host threads, must then stop on the dead peer, the
 * abort or its deadline (tests/cudaemu/test_emu_comm.sh).
 *
 * Without a launcher, `coll_check --uid FILE NRANKS RANK MODE...` joins
 * through gcollGetUniqueId (rank 0 writes the id to FILE) and
 * gcollCommInitRank, for ranks that run on different hosts
 * (tests/integration/test_netns.sh).
 *
 * Inputs are a function of (seed, rank, index), so every rank computes every
 * other rank's input and the expected result locally, with
 * gcoll_reduce_reference: an independent serial fold in rank order. Floating
 * inputs are small integers, which makes sums, products and averages exact
 * in every type whatever order the algorithm reduces in, so results are
 * compared bit for bit; integer types use their full range (wrapping sums
 * are exact too). Prints one line per rank and exits 1 on any difference. */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"
#include "check_util.h"
#include "kernels/half.h"
#include "kernels/reduce.h"
#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"
#endif

/* --device: the buffers of die and abort live in device memory. */
static int on_device;
static void *buffer;      /* test_buffer's, freed by free_buffer */

/* A zeroed buffer of `bytes` where the collectives of this run take them:
 * host memory, or device memory of GPU 0 with --device. */
#ifdef HAVE_CUDA
static const struct gcoll_cuda_api *cuda_api;
#endif

/* Device collectives return once queued: waits for the default stream,
 * where they are ordered. */
static void device_sync(void) {
#ifdef HAVE_CUDA
  if (on_device && cuda_api != NULL) cuda_api->stream_synchronize(NULL);
#endif
}

/* --device: GPU 0 current before init, as NCCL programs call cudaSetDevice
 * first (a communicator may put its FIFOs on that GPU: p2p). */
static void open_device(void) {
#ifdef HAVE_CUDA
  char err[256];
  int ndev = 0;
  gcoll_cu_device dev;
  gcoll_cu_context ctx;
  const struct gcoll_cuda_api *cu = NULL;
  if (gcoll_cuda_probe(&ndev, err, sizeof(err)) == GCOLL_CUDA_AVAILABLE &&
      (cu = gcoll_cuda_api_get(err, sizeof(err))) != NULL &&
      gcoll_cuda_use_device(cu, 0, &dev, &ctx, err, sizeof(err)) == 0) {
    cuda_api = cu;
    return;
  }
  fprintf(stderr, "coll_check: --device: GPU 0: %s\n", err);
#else
  fprintf(stderr, "coll_check: --device: this build has no CUDA\n");
#endif
  exit(2);
}

static void *test_buffer(size_t bytes) {
  if (!on_device) return buffer = calloc(1, bytes);
#ifdef HAVE_CUDA
  gcoll_cu_deviceptr p = 0;
  int r;
  const char *step = "cuMemAlloc";
  if ((r = cuda_api->mem_alloc(&p, bytes)) == 0 &&
      (step = "cuMemsetD8", r = cuda_api->memset_d8(p, 0, bytes)) == 0)
    return buffer = (void *)(uintptr_t)p;
  fprintf(stderr, "coll_check: --device: %s: %s\n", step, gcoll_cuda_result_text(cuda_api, r));
#endif
  exit(2);
}

/* Device memory goes with the process (and its context). */
static void free_buffer(void) {
  if (!on_device) free(buffer);
  buffer = NULL;
}

/* Element i of rank r's input. Floats: integers in [-2, 2] for prod (so a
 * product of 8 ranks stays exact even in half), [-8, 8] otherwise. */
static void fill(void *buf, size_t first, size_t count, gcollDataType_t t, gcollRedOp_t op, int r,
                 uint64_t seed) {
  for (size_t i = 0; i < count; i++) {
    uint64_t h = mix(seed ^ mix((uint64_t)r * 0x9e3779b97f4a7c15ULL + first + i));
    int small = op == gcollProd ? (int)(h % 5) - 2 : (int)(h % 17) - 8;
    switch (t) {
    case gcollInt8: ((int8_t *)buf)[i] = (int8_t)h; break;
    case gcollUint8: ((uint8_t *)buf)[i] = (uint8_t)h; break;
    case gcollInt32: ((int32_t *)buf)[i] = (int32_t)h; break;
    case gcollUint32: ((uint32_t *)buf)[i] = (uint32_t)h; break;
    case gcollInt64: ((int64_t *)buf)[i] = (int64_t)h; break;
    case gcollUint64: ((uint64_t *)buf)[i] = h; break;
    case gcollFloat16: ((uint16_t *)buf)[i] = gcoll_float_to_half((float)small); break;
    case gcollFloat32: ((float *)buf)[i] = (float)small; break;
    case gcollFloat64: ((double *)buf)[i] = small; break;
    case gcollBfloat16: ((uint16_t *)buf)[i] = gcoll_float_to_bf16((float)small); break;
    default: break;
    }
  }
}

/* Inputs are regenerated in blocks of BLOCK elements per rank, so checking
 * a 17M-element call needs nranks * BLOCK elements of scratch, not nranks
 * copies of the message. */
#define BLOCK 65536

struct bufs {
  unsigned char *send, *recv, *expect;
  unsigned char *block;       /* nranks * BLOCK * 8 bytes */
};

/* dst[0..n) = reference reduction over ranks of elements [first, first+n). */
static void expected_reduction(struct bufs *b, unsigned char *dst, size_t first, size_t n,
                               gcollDataType_t t, gcollRedOp_t op, uint64_t seed) {
  size_t es = gcoll_dtype_size(t);
  const void *in[64];
  for (size_t done = 0; done < n; done += BLOCK) {
    size_t m = n - done < BLOCK ? n - done : BLOCK;
    for (int r = 0; r < nranks; r++) {
      in[r] = b->block + (size_t)r * BLOCK * 8;
      fill(b->block + (size_t)r * BLOCK * 8, first + done, m, t, op, r, seed);
    }
    gcoll_reduce_reference(dst + done * es, in, nranks, m, t, op);
  }
}

static const char *coll_names[] = {"allreduce", "broadcast", "reduce", "allgather",
                                   "reducescatter"};

/* One collective call and its check; returns the number of wrong bytes or
 * -1 when the call failed. count is per rank for allgather/reducescatter. */
static long run_one(gcollComm_t comm, struct bufs *b, int coll, gcollDataType_t t, gcollRedOp_t op,
                    size_t count, int in_place, int root, uint64_t seed) {
  size_t es = gcoll_dtype_size(t), nbytes = count * es;
  int blocks = coll == 3 || coll == 4;
  size_t total = blocks ? nbytes * (size_t)nranks : nbytes;
  memset(b->recv, 0xa5, total + 64);
  gcollResult_t rc = gcollSuccess;
  void *sendp = b->send, *recvp = b->recv;
  switch (coll) {
  case 0:  /* allreduce */
    expected_reduction(b, b->expect, 0, count, t, op, seed);
    fill(in_place ? b->recv : b->send, 0, count, t, op, rank, seed);
    rc = gcollAllReduce(in_place ? recvp : sendp, recvp, count, t, op, comm, NULL);
    break;
  case 1:  /* broadcast */
    fill(b->expect, 0, count, t, op, root, seed);
    fill(in_place ? b->recv : b->send, 0, count, t, op, rank, seed);
    rc = gcollBroadcast(in_place ? recvp : sendp, recvp, count, t, root, comm, NULL);
    break;
  case 2:  /* reduce: only root's buffer changes */
    if (rank == root) expected_reduction(b, b->expect, 0, count, t, op, seed);
    else if (in_place) fill(b->expect, 0, count, t, op, rank, seed);
    else memset(b->expect, 0xa5, nbytes);
    fill(in_place ? b->recv : b->send, 0, count, t, op, rank, seed);
    rc = gcollReduce(in_place ? recvp : sendp, recvp, count, t, op, root, comm, NULL);
    break;
  case 3:  /* allgather */
    for (int r = 0; r < nranks; r++) fill(b->expect + (size_t)r * nbytes, 0, count, t, op, r, seed);
    if (in_place) sendp = b->recv + (size_t)rank * nbytes;
    fill(sendp, 0, count, t, op, rank, seed);
    rc = gcollAllGather(sendp, recvp, count, t, comm, NULL);
    break;
  default:  /* reducescatter: rank r gets block r of the reduction */
    expected_reduction(b, b->expect, (size_t)rank * count, count, t, op, seed);
    fill(in_place ? b->recv : b->send, 0, count * nranks, t, op, rank, seed);
    if (in_place) recvp = b->recv + (size_t)rank * nbytes;
    rc = gcollReduceScatter(in_place ? b->recv : sendp, recvp, count, t, op, comm, NULL);
    break;
  }
  char what[160];
  snprintf(what, sizeof(what), "%s %s %s count %zu %s", coll_names[coll], gcoll_dtype_name(t),
           gcoll_redop_name(op), count, in_place ? "in-place" : "out-of-place");
  if (check_gcoll(rc, what) != 0) return -1;
  const unsigned char *got = coll == 4 && in_place ? b->recv + (size_t)rank * nbytes : b->recv;
  size_t check_bytes = coll == 3 ? total : nbytes;
  long wrong = 0;
  for (size_t i = 0; i < check_bytes; i++) wrong += got[i] != b->expect[i];
  /* Nothing written past the result (in-place reducescatter: past the
   * whole input it overwrote). */
  const unsigned char *end = coll == 4 && in_place ? b->recv + total : got + check_bytes;
  for (size_t i = 0; i < 64; i++) wrong += end[i] != 0xa5;
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* matrix --sizes N,N,...: these counts (per rank) instead, every type and
 * op at each, e.g. around the host executor's gather-form limit. */
#define MAX_SIZES 32

static int parse_sizes(const char *list, size_t *sizes) {
  int n = 0;
  for (const char *p = list; *p != '\0' && n < MAX_SIZES;) {
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || v > (1u << 24)) return -1;
    sizes[n++] = (size_t)v;
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') return -1;
  }
  return n;
}

static int matrix(gcollComm_t comm, int full, const char *size_list, int allreduce_only) {
  static const size_t sizes_quick[] = {0, 1, 7, 1023, 4097, 65539};
  static const size_t sizes_full[] = {0, 1, 7, 1023, 4097, (1u << 20) + 3, 17u << 20};
  size_t listed[MAX_SIZES];
  const size_t *sizes = full ? sizes_full : sizes_quick;
  int nsizes = full ? 7 : 6;
  if (size_list != NULL) {
    if ((nsizes = parse_sizes(size_list, listed)) <= 0) {
      fprintf(stderr, "coll_check: --sizes '%s': expected counts N,N,... (at most %d)\n",
              size_list, MAX_SIZES);
      return 2;
    }
    sizes = listed;
  }
  /* Large sizes are the message size (as nccl-tests counts), so that
   * allgather/reducescatter stay within memory at 8 ranks; they run for
   * 4-byte types only. Small sizes are per rank, so every rank gets at
   * least one element; listed sizes are all per rank. */
  size_t big = 0;
  for (int s = 0; s < nsizes; s++) big = sizes[s] > big ? sizes[s] : big;
  size_t cap = size_list != NULL ? 8 * big * (size_t)nranks + 128
                                 : big * 4 + 8 * 4097 * (size_t)nranks + 128;
  struct bufs b;
  b.send = xmalloc(cap);
  b.recv = xmalloc(cap);
  b.expect = xmalloc(cap);
  b.block = xmalloc((size_t)nranks * BLOCK * 8);
  long wrong = 0, calls = 0;
  uint64_t seed = 12345;
  for (int coll = 0; coll < (allreduce_only ? 1 : 5); coll++)
    for (int t = 0; t < gcollNumTypes; t++)
      for (int op = 0; op < gcollNumOps; op++) {
        if ((coll == 1 || coll == 3) && op > 0) continue;   /* no op: once per type */
        for (int s = 0; s < nsizes; s++) {
          size_t count = sizes[s];
          if (count > 5000 && size_list == NULL) {
            /* They test chunking, not arithmetic: float sum always, and in
             * the full matrix also the other 4-byte and 16-bit types. */
            int four = gcoll_dtype_size((gcollDataType_t)t) <= 4;
            if (!(t == gcollFloat32 && op == gcollSum) && !(full && four && op == gcollSum)) continue;
            if (coll == 3 || coll == 4) count /= (size_t)nranks;
          }
          for (int in_place = 0; in_place < 2; in_place++) {
            int root = (int)((seed + (uint64_t)calls) % (uint64_t)nranks);
            long w = run_one(comm, &b, coll, (gcollDataType_t)t, (gcollRedOp_t)op, count,
                             in_place, root, seed + (uint64_t)calls);
            if (w < 0) return 1;
            wrong += w;
            calls++;
          }
        }
      }
  printf("rank %d: %ld calls, %ld wrong bytes\n", rank, calls, wrong);
  free(b.send);
  free(b.recv);
  free(b.expect);
  free(b.block);
  return wrong ? 1 : 0;
}

enum die_coll { DIE_ALLREDUCE, DIE_REDUCE, DIE_ALLGATHER, DIE_BROADCAST };

static gcollResult_t die_call(float *buf, size_t count, enum die_coll coll, gcollComm_t comm) {
  switch (coll) {
    case DIE_REDUCE: return gcollReduce(buf, buf, count, gcollFloat, gcollSum, 0, comm, NULL);
    case DIE_ALLGATHER:
      return gcollAllGather(buf + (size_t)rank * count, buf, count, gcollFloat, comm, NULL);
    case DIE_BROADCAST: return gcollBroadcast(buf, buf, count, gcollFloat, 0, comm, NULL);
    default: return gcollAllReduce(buf, buf, count, gcollFloat, gcollSum, comm, NULL);
  }
}

static int die(gcollComm_t comm, int victim, int iter, size_t count, enum die_coll coll) {
  /* main ignores SIGTERM: survivors must report, not be stopped by it. */
  size_t elems = (count ? count : 1) * (coll == DIE_ALLGATHER ? (size_t)nranks : 1);
  float *buf = test_buffer(elems * sizeof(float));
  /* Bounded by time, not iterations: a reduce's leaf only sends, and a
   * socket's kernel buffer lets it run thousands of calls ahead before the
   * root's goodbye (naming the victim) reaches it. */
  const double limit_s = 6.0;
  double passed_victim = 0;
  for (int i = 0;; i++) {
    if (rank == victim && i == iter) raise(SIGKILL);
    if (!on_device)
      for (size_t k = 0; k < elems; k++) buf[k] = (float)k;
    double t0 = now_s();
    gcollResult_t rc = die_call(buf, count, coll, comm);
    if (rc != gcollSuccess) {
      printf("rank %d: iteration %d: %s after %.2f s: %s\n", rank, i, gcollGetErrorString(rc),
             now_s() - t0, gcollGetLastError(comm));
      fflush(stdout);
      char want[32];
      snprintf(want, sizeof(want), "rank %d ", victim);
      return rc == gcollRemoteError && strstr(gcollGetLastError(comm), want) ? 0 : 1;
    }
    if (i == iter) passed_victim = now_s();
    if (i > iter && now_s() - passed_victim > limit_s) {
      printf("rank %d: still running %d iterations (%.0f s) past rank %d's death\n", rank,
             i - iter, limit_s, victim);
      return 1;
    }
  }
}

/* Rank 0 enters an allreduce the others join only after its deadline
 * (GCOLL_TIMEOUT, set short by the caller) has passed: it must fail with a
 * deadline and, on device buffers, say what the FIFO it waited on holds
 * (the step it waited for never came: tail == head). */
static int stall_test(gcollComm_t comm) {
  float *buf = test_buffer(256 * sizeof(float));
  /* A few calls first, so that the FIFOs' counters are past 0. */
  for (int i = 0; i < 3; i++)
    if (gcollAllReduce(buf, buf, 256, gcollFloat, gcollSum, comm, NULL) != gcollSuccess) {
      printf("rank %d: allreduce %d before the stall: %s\n", rank, i, gcollGetLastError(comm));
      return 1;
    }
  device_sync();
  if (rank != 0) {
    free_buffer();
    /* Well past rank 0's deadline (twice it, and 2 s more), so that the
     * deadline and not this rank's arrival ends its wait. */
    const char *t = getenv("GCOLL_TIMEOUT");
    double timeout_s = t != NULL ? atof(t) : 0;
    if (timeout_s <= 0 || timeout_s > 10) {
      printf("rank %d: stall needs GCOLL_TIMEOUT of at most 10 s\n", rank);
      return 2;
    }
    usleep((useconds_t)((2 * timeout_s + 2) * 1e6));
    gcollCommDestroy(comm);
    printf("rank %d: done\n", rank);
    return 0;
  }
  gcollResult_t rc = gcollAllReduce(buf, buf, 256, gcollFloat, gcollSum, comm, NULL);
  device_sync();
  if (rc == gcollSuccess && gcollCommGetAsyncError(comm, &rc) != gcollSuccess) rc = gcollSuccess;
  printf("rank 0: allreduce: %s: %s\n", gcollGetErrorString(rc),
         rc == gcollSuccess ? "" : gcollGetLastError(comm));
  free_buffer();
  return rc == gcollSystemError ? 0 : 1;
}

static int abort_test(gcollComm_t comm) {
  /* Rank 0 enters an allreduce nobody else joins; another thread aborts. */
  if (rank != 0) {
    sleep(3);
    gcollCommDestroy(comm);
    printf("rank %d: done\n", rank);
    return 0;
  }
  pthread_t th;
  float *buf = test_buffer(256 * sizeof(float));
  double t0 = now_s();
  pthread_create(&th, NULL, abort_later, comm);
  gcollResult_t rc = gcollAllReduce(buf, buf, 256, gcollFloat, gcollSum, comm, NULL);
  /* On device buffers the call returns once queued; the abort must then
   * stop the kernel, which the default stream waits for. */
  device_sync();
  double dt = now_s() - t0;
  pthread_join(th, NULL);
  free_buffer();
  if (on_device) {
    printf("rank 0: allreduce queued (%s); the aborted kernel ended after %.2f s\n",
           gcollGetErrorString(rc), dt);
    return dt < 5.0 ? 0 : 1;
  }
  printf("rank 0: allreduce returned %s after %.2f s\n", gcollGetErrorString(rc), dt);
  return rc != gcollSuccess && dt < 5.0 ? 0 : 1;
}

#ifdef HAVE_CUDA
/* Collectives queued back to back return at once and still come out right
 * and in order: each call reduces its own slice, and slice 0 is reduced
 * again and again between them. */
static int queue_test(gcollComm_t comm, int n) {
  const size_t count = 1031;                 /* prime: not a multiple of any chunk */
  float *dev = test_buffer((size_t)n * count * sizeof(float));
  float *host = xmalloc((size_t)n * count * sizeof(float));
  for (int i = 0; i < n; i++)
    for (size_t k = 0; k < count; k++) host[(size_t)i * count + k] = (float)(rank + 1 + (int)(k % 7));
  gcoll_cu_deviceptr d = (gcoll_cu_deviceptr)(uintptr_t)dev;
  if (cuda_api->memcpy_htod(d, host, (size_t)n * count * sizeof(float)) != 0) return 1;
  double t0 = now_s();
  for (int i = 0; i < n; i++) {
    gcollResult_t rc = gcollAllReduce(dev + (size_t)i * count, dev + (size_t)i * count, count,
                                      gcollFloat, gcollSum, comm, NULL);
    /* Slice 0 again every 8 calls (a max over equal values leaves it as
     * it is): calls on one slice must run in the order they were made. */
    if (rc == gcollSuccess && i % 8 == 7)
      rc = gcollAllReduce(dev, dev, count, gcollFloat, gcollMax, comm, NULL);
    if (check_gcoll(rc, "queued allreduce")) return 1;
  }
  double queued = now_s() - t0;
  device_sync();
  if (cuda_api->memcpy_dtoh(host, d, (size_t)n * count * sizeof(float)) != 0) return 1;
  long wrong = 0;
  for (int i = 0; i < n; i++)
    for (size_t k = 0; k < count; k++) {
      /* sum over ranks of (r + 1 + k % 7); max leaves a sum unchanged. */
      float want = (float)(nranks * (nranks + 1) / 2 + nranks * (int)(k % 7));
      wrong += host[(size_t)i * count + k] != want;
    }
  free(host);
  printf("rank %d: %d allreduces queued in %.3f s, %ld wrong after one wait\n", rank, n, queued,
         wrong);
  return wrong != 0;
}
#endif

#ifdef HAVE_CUDA
/* The capture and graph calls of the driver gcoll loads ($GCOLL_CUDA_DRIVER,
 * else libcuda.so.1): gcoll itself only asks whether a stream captures. */
struct graph_api {
  int (*begin)(void *stream, int mode);
  int (*end)(void *stream, void **graph);
  int (*instantiate)(void **exec, void *graph, unsigned long long flags);
  int (*launch)(void *exec, void *stream);
  int (*exec_destroy)(void *exec);
  int (*destroy)(void *graph);
};

static int load_graph_api(struct graph_api *g) {
  const char *path = getenv("GCOLL_CUDA_DRIVER");
  if (path == NULL || *path == '\0') path = "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const char *names[] = {"cuStreamBeginCapture_v2", "cuStreamEndCapture",
                         "cuGraphInstantiateWithFlags", "cuGraphLaunch", "cuGraphExecDestroy",
                         "cuGraphDestroy"};
  void **slots[] = {(void **)&g->begin, (void **)&g->end, (void **)&g->instantiate,
                    (void **)&g->launch, (void **)&g->exec_destroy, (void **)&g->destroy};
  for (int i = 0; i < 6; i++)
    if (h == NULL || (*slots[i] = dlsym(h, names[i])) == NULL) {
      fprintf(stderr, "rank %d: --device graph: %s lacks %s\n", rank, path, names[i]);
      return -1;
    }
  return 0;
}

#define GRAPH_COUNT 100003 /* prime: not a multiple of any chunk or slot */
#define GRAPH_PART 4099    /* allgather elements per rank */

/* This rank's inputs for replay `seed`, into the host images of A (float
 * sum), C (int32 max, in place), D (int32 broadcast from the last rank)
 * and E (int32 allgather part). */
static void graph_inputs(int r, int seed, float *a, int32_t *c, int32_t *d, int32_t *e) {
  for (size_t i = 0; i < GRAPH_COUNT; i++) {
    a[i] = (float)(r + 1 + (int)((i + (size_t)seed) % 13));
    c[i] = (int32_t)(((size_t)r * 7919 + i * 31 + (size_t)seed * 101) % 100000);
    d[i] = r == nranks - 1 ? (int32_t)(i * 5 + (size_t)seed) : -1;
  }
  for (size_t k = 0; k < GRAPH_PART; k++) e[k] = r * 1000000 + (int32_t)k + seed;
}

static int graph_test(gcollComm_t comm, int replays) {
  struct graph_api g;
  if (load_graph_api(&g) != 0) return 1;
  const struct gcoll_cuda_api *cu = cuda_api;
  const size_t n = GRAPH_COUNT, m = GRAPH_PART;
  /* One device allocation: A, B (A's sum), C, D, E, F (gathered). */
  size_t off_b = n * 4, off_c = 2 * n * 4, off_d = 3 * n * 4, off_e = 4 * n * 4,
         off_f = off_e + m * 4, total = off_f + (size_t)nranks * m * 4;
  char *dev = test_buffer(total);
  gcoll_cu_deviceptr base = (gcoll_cu_deviceptr)(uintptr_t)dev;
  float *a = xmalloc(n * 4), *b = xmalloc(n * 4);
  int32_t *c = xmalloc(n * 4), *d = xmalloc(n * 4), *e = xmalloc(m * 4);
  int32_t *f = xmalloc((size_t)nranks * m * 4), *want_c = xmalloc(n * 4);
  float *eager = xmalloc(n * 4);
  gcoll_cu_stream s = NULL;
  void *graph = NULL, *exec = NULL;
  long wrong = 0;
  int rc = 1;
  if (cu->stream_create(&s, GCOLL_CU_STREAM_NON_BLOCKING) != 0) goto out;
  /* Capture: nothing may run until a replay. */
  if (g.begin(s, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */) != 0) {
    fprintf(stderr, "rank %d: cuStreamBeginCapture failed\n", rank);
    goto out;
  }
  gcollResult_t r = gcollAllReduce(dev, dev + off_b, n, gcollFloat, gcollSum, comm, s);
  if (r == gcollSuccess) r = gcollAllReduce(dev + off_c, dev + off_c, n, gcollInt32, gcollMax, comm, s);
  if (r == gcollSuccess) r = gcollBroadcast(dev + off_d, dev + off_d, n, gcollInt32, nranks - 1, comm, s);
  if (r == gcollSuccess) r = gcollAllGather(dev + off_e, dev + off_f, m, gcollInt32, comm, s);
  int end_rc = g.end(s, &graph);
  if (check_gcoll(r, "collective captured into a CUDA graph")) goto out;
  if (end_rc != 0 || g.instantiate(&exec, graph, 0) != 0) {
    fprintf(stderr, "rank %d: cuStreamEndCapture/cuGraphInstantiate failed (%d)\n", rank, end_rc);
    goto out;
  }
  if (cu->memcpy_dtoh(b, base + off_b, n * 4) != 0) goto out;
  for (size_t i = 0; i < n; i++) wrong += b[i] != 0.0f; /* the capture ran nothing */
  if (wrong) printf("rank %d: %ld elements written during the capture\n", rank, wrong);
  for (int rep = 0; rep < replays; rep++) {
    graph_inputs(rank, rep, a, c, d, e);
    if (cu->memcpy_htod(base, a, n * 4) != 0 || cu->memcpy_htod(base + off_c, c, n * 4) != 0 ||
        cu->memcpy_htod(base + off_d, d, n * 4) != 0 || cu->memcpy_htod(base + off_e, e, m * 4) != 0)
      goto out;
    if (g.launch(exec, s) != 0 || cu->stream_synchronize(s) != 0) {
      fprintf(stderr, "rank %d: replay %d: cuGraphLaunch or the stream failed\n", rank, rep);
      goto out;
    }
    if (cu->memcpy_dtoh(b, base + off_b, n * 4) != 0 || cu->memcpy_dtoh(c, base + off_c, n * 4) != 0 ||
        cu->memcpy_dtoh(d, base + off_d, n * 4) != 0 ||
        cu->memcpy_dtoh(f, base + off_f, (size_t)nranks * m * 4) != 0)
      goto out;
    /* The references, serially: C's max over every rank's input. */
    for (size_t i = 0; i < n; i++) want_c[i] = INT32_MIN;
    for (int q = 0; q < nranks; q++)
      for (size_t i = 0; i < n; i++) {
        int32_t v = (int32_t)(((size_t)q * 7919 + i * 31 + (size_t)rep * 101) % 100000);
        if (v > want_c[i]) want_c[i] = v;
      }
    for (size_t i = 0; i < n; i++) {
      float want_b = (float)(nranks * (nranks + 1) / 2 + nranks * (int)((i + (size_t)rep) % 13));
      wrong += b[i] != want_b;
      wrong += c[i] != want_c[i];
      wrong += d[i] != (int32_t)(i * 5 + (size_t)rep);
    }
    for (int q = 0; q < nranks; q++)
      for (size_t k = 0; k < m; k++) wrong += f[(size_t)q * m + k] != q * 1000000 + (int32_t)k + rep;
    /* An eager call between replays: FIFO positions carry on across both. */
    for (size_t i = 0; i < n; i++) eager[i] = (float)(rank + rep % 3);
    if (cu->memcpy_htod(base + off_b, eager, n * 4) != 0) goto out;
    if (check_gcoll(gcollAllReduce(dev + off_b, dev + off_b, n, gcollFloat, gcollSum, comm, s),
                    "eager allreduce between replays") ||
        cu->stream_synchronize(s) != 0 || cu->memcpy_dtoh(eager, base + off_b, n * 4) != 0)
      goto out;
    for (size_t i = 0; i < n; i++)
      wrong += eager[i] != (float)(nranks * (nranks - 1) / 2 + nranks * (rep % 3));
  }
  if (check_gcoll(gcollCommGetAsyncError(comm, &r), "async error query") || check_gcoll(r, "replays"))
    goto out;
  /* Device send/recv are staged by the calling thread: refused under
   * capture, in one line, on every rank alike (nothing moves). */
  if (nranks > 1) {
    void *g2 = NULL;
    if (g.begin(s, 0) != 0) goto out;
    gcollResult_t sr = gcollGroupStart();
    if (sr == gcollSuccess) sr = gcollSend(dev, 16, gcollFloat, (rank + 1) % nranks, comm, s);
    if (sr == gcollSuccess)
      sr = gcollRecv(dev + off_b, 16, gcollFloat, (rank + nranks - 1) % nranks, comm, s);
    gcollResult_t end = gcollGroupEnd();
    if (sr == gcollSuccess) sr = end;
    int end2 = g.end(s, &g2);
    if (g2 != NULL) g.destroy(g2);
    if (sr != gcollInvalidUsage || strstr(gcollGetLastError(NULL), "CUDA graph") == NULL) {
      printf("rank %d: captured device send/recv gave %s (%s), not a refusal\n", rank,
             gcollGetErrorString(sr), gcollGetLastError(NULL));
      goto out;
    }
    printf("rank %d: captured device send/recv refused: %s (capture ended with %d)\n", rank,
           gcollGetLastError(NULL), end2);
  }
  printf("rank %d: 4 collectives captured into a CUDA graph, %d replays and %d eager calls "
         "between them, %ld wrong\n", rank, replays, replays, wrong);
  rc = wrong != 0;
out:
  if (exec != NULL) g.exec_destroy(exec);
  if (graph != NULL) g.destroy(graph);
  if (s != NULL) cu->stream_destroy(s);
  free(a), free(b), free(c), free(d), free(e), free(f), free(want_c), free(eager);
  return rc;
}
#endif

/* Reproducibility: the bits of sums whose rounding depends on the order of
 * the additions. Inputs are random floats in [-1, 1) (or doubles, halves,
 * bfloat16s), a function of (rank, index) only; one digest line per
 * collective, type and size. */
static uint64_t fnv1a(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

static void fill_uniform(void *buf, size_t count, gcollDataType_t t, int r) {
  for (size_t i = 0; i < count; i++) {
    double v = (double)(mix((uint64_t)r << 40 ^ i) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    switch (t) {
    case gcollFloat32: ((float *)buf)[i] = (float)v; break;
    case gcollFloat64: ((double *)buf)[i] = v; break;
    case gcollFloat16: ((uint16_t *)buf)[i] = gcoll_float_to_half((float)v); break;
    default: ((uint16_t *)buf)[i] = gcoll_float_to_bf16((float)v); break;
    }
  }
}

static int digest(gcollComm_t comm) {
  static const gcollDataType_t types[] = {gcollFloat32, gcollFloat64, gcollFloat16, gcollBfloat16};
  static const char *const names[] = {"float", "double", "half", "bfloat16"};
  static const size_t counts[] = {1, 1000, 65537, (1u << 20) + 3};
  const size_t max = counts[3] * (size_t)nranks * 8;
  char *host = xmalloc(max);
  char *buf = test_buffer(2 * max);
  for (int t = 0; t < 4; t++)
    for (int k = 0; k < 4; k++)
      for (int rs = 0; rs < 2; rs++) {
        size_t esize = gcoll_dtype_size(types[t]), count = counts[k];
        size_t in = rs ? count * (size_t)nranks : count;
        fill_uniform(host, in, types[t], rank);
#ifdef HAVE_CUDA
        if (on_device && cuda_api->memcpy_htod((gcoll_cu_deviceptr)(uintptr_t)buf, host,
                                               in * esize) != 0)
          return 1;
#endif
        if (!on_device) memcpy(buf, host, in * esize);
        gcollResult_t rc = rs ? gcollReduceScatter(buf, buf + max, count, types[t], gcollSum, comm, NULL)
                              : gcollAllReduce(buf, buf + max, count, types[t], gcollSum, comm, NULL);
        if (check_gcoll(rc, rs ? "reducescatter" : "allreduce")) return 1;
        device_sync();
#ifdef HAVE_CUDA
        if (on_device && cuda_api->memcpy_dtoh(host, (gcoll_cu_deviceptr)(uintptr_t)(buf + max),
                                               count * esize) != 0)
          return 1;
#endif
        if (!on_device) memcpy(host, buf + max, count * esize);
        printf("rank %d: digest %s %s %zu %016llx\n", rank, rs ? "reducescatter" : "allreduce",
               names[t], count, (unsigned long long)fnv1a(host, count * esize, 0xcbf29ce484222325ULL));
      }
  free(host);
  return 0;
}

/* A program's start as nccl_host_check's launcher_id makes it: rank 0
 * broadcasts 128 bytes (an NCCL id), and every rank destroys the
 * communicator right away (main), the root first: its broadcast returns
 * at once. The others must still get the bytes. */
static int bcast_destroy(gcollComm_t comm) {
  unsigned char id[128];
  for (int i = 0; i < 128; i++) id[i] = rank == 0 ? (unsigned char)(i * 7 + 3) : 0;
  gcollResult_t rc = gcollBroadcast(id, id, sizeof(id), gcollUint8, 0, comm, NULL);
  if (check_gcoll(rc, "broadcast")) return 1;
  for (int i = 0; i < 128; i++)
    if (id[i] != (unsigned char)(i * 7 + 3)) {
      printf("rank %d: byte %d of the broadcast is %u: WRONG\n", rank, i, id[i]);
      return 1;
    }
  printf("rank %d: broadcast right\n", rank);
  return 0;
}

static int expect_invalid(gcollResult_t rc, const char *what) {
  if (rc == gcollInvalidArgument || rc == gcollInvalidUsage) {
    printf("rank %d: %s refused: %s\n", rank, what, gcollGetLastError(NULL));
    return 0;
  }
  printf("rank %d: %s was not refused (%s)\n", rank, what, gcollGetErrorString(rc));
  return 1;
}

static int badargs(gcollComm_t comm) {
  float buf[16] = {0};
  int bad = 0;
  bad += expect_invalid(gcollAllReduce(NULL, buf, 16, gcollFloat, gcollSum, comm, NULL), "NULL sendbuff");
  bad += expect_invalid(gcollAllReduce(buf, NULL, 16, gcollFloat, gcollSum, comm, NULL), "NULL recvbuff");
  bad += expect_invalid(gcollAllReduce(buf, buf, 16, (gcollDataType_t)42, gcollSum, comm, NULL), "bad type");
  bad += expect_invalid(gcollAllReduce(buf, buf, 16, gcollFloat, (gcollRedOp_t)9, comm, NULL), "bad op");
  bad += expect_invalid(gcollBroadcast(buf, buf, 16, gcollFloat, nranks, comm, NULL), "root out of range");
  bad += expect_invalid(gcollReduce(buf, buf, 16, gcollFloat, gcollSum, -1, comm, NULL), "negative root");
  bad += expect_invalid(gcollAllGather(buf, buf, SIZE_MAX / 2, gcollFloat, comm, NULL), "count overflow");
  bad += expect_invalid(gcollAllReduce(buf, buf, SIZE_MAX / 2, gcollFloat, gcollSum, comm, NULL),
                        "allreduce count overflow");
  /* count * size fits, times the ranks does not. */
  if (nranks > 1)
    bad += expect_invalid(gcollReduceScatter(buf, buf, SIZE_MAX / sizeof(float) / nranks + 1,
                                             gcollFloat, gcollSum, comm, NULL),
                          "reducescatter count overflow across ranks");
  bad += expect_invalid(gcollAllReduce(buf, buf, 16, gcollFloat, gcollSum, NULL, NULL), "NULL comm");
  bad += expect_invalid(gcollAllReduce(buf, buf, 16, gcollFloat, gcollSum, comm, (void *)buf), "a stream");
  if (on_device) {
    float *dev = test_buffer(16 * sizeof(float));
    bad += expect_invalid(gcollAllReduce(dev, buf, 16, gcollFloat, gcollSum, comm, NULL),
                          "device sendbuff with host recvbuff");
    bad += expect_invalid(gcollAllReduce(buf, dev, 16, gcollFloat, gcollSum, comm, NULL),
                          "host sendbuff with device recvbuff");
  }
  /* Refused calls moved nothing: the communicator still works. */
  for (int i = 0; i < 16; i++) buf[i] = (float)(rank + 1);
  if (check_gcoll(gcollAllReduce(buf, buf, 16, gcollFloat, gcollSum, comm, NULL), "allreduce after refusals"))
    return 1;
  float want = (float)nranks * (nranks + 1) / 2;
  for (int i = 0; i < 16; i++) bad += buf[i] != want;
  printf("rank %d: %s\n", rank, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}

/* Rank 0 makes the id and publishes it by rename; the others wait for the
 * file (bounded) and read it. */
static gcollResult_t init_from_uid(gcollComm_t *comm, const char *file, int n, int r) {
  gcollUniqueId id;
  if (r == 0) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", file);
    gcollResult_t rc = gcollGetUniqueId(&id);
    if (rc != gcollSuccess) return rc;
    FILE *f = fopen(tmp, "wb");
    if (f == NULL || fwrite(&id, sizeof(id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, file) != 0) {
      fprintf(stderr, "coll_check: cannot write %s\n", file);
      return gcollSystemError;
    }
  } else {
    size_t got = 0;
    for (int tries = 0; got != 1 && tries < 600; tries++) {
      FILE *f = fopen(file, "rb");
      if (f != NULL) {
        got = fread(&id, sizeof(id), 1, f);
        fclose(f);
      }
      if (got != 1) usleep(50000);
    }
    if (got != 1) {
      fprintf(stderr, "coll_check: no id in %s after 30 s\n", file);
      return gcollSystemError;
    }
  }
  return gcollCommInitRank(comm, n, id, r);
}

/* One allreduce on host buffers, whatever the communicator: prints the
 * result, or the one-line refusal (a communicator whose FIFOs are in GPU
 * memory refuses host buffers). */
static int host_call(gcollComm_t comm) {
  float v[4] = {1, 2, 3, 4};
  gcollResult_t rc = gcollAllReduce(v, v, 4, gcollFloat, gcollSum, comm, NULL);
  if (rc != gcollSuccess) {
    printf("rank %d: host allreduce refused: %s\n", rank, gcollGetLastError(NULL));
    return 0;
  }
  int good = v[0] == nranks && v[3] == 4.0f * nranks;
  printf("rank %d: host allreduce %s\n", rank, good ? "right" : "WRONG");
  return good ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *uid_file = NULL;
  int uid_n = 0, uid_r = 0;
  if (argc >= 5 && strcmp(argv[1], "--uid") == 0) {
    uid_file = argv[2];
    uid_n = atoi(argv[3]);
    uid_r = atoi(argv[4]);
    argv += 4;
    argc -= 4;
  }
  if (argc >= 2 && strcmp(argv[1], "--device") == 0) {
    on_device = 1;
    open_device();
    argv++;
    argc--;
  }
  if (argc < 2) {
    fprintf(stderr, "usage: coll_check [--uid FILE NRANKS RANK] [--device] matrix [--full | --sizes N,N,...] | "
                    "die RANK ITER [COUNT] | abort | stall | badargs | init | bcast-destroy | hostcall\n");
    return 2;
  }
  /* die: survivors must report, not be stopped by gcollrun's SIGTERM when
   * the victim dies. Set before init: leaves of a reduce run calls ahead
   * of a root still in init, so the victim can die before the root is in
   * die() (it then ended silently, 2 runs in 100). */
  if (strcmp(argv[1], "die") == 0) signal(SIGTERM, SIG_IGN);
  gcollComm_t comm;
  gcollResult_t rc = uid_file ? init_from_uid(&comm, uid_file, uid_n, uid_r)
                              : gcollCommInitFromPlan(&comm, NULL, -1);
  if (rc != gcollSuccess) {
    fprintf(stderr, "coll_check: init: %s: %s\n", gcollGetErrorString(rc), gcollGetLastError(NULL));
    return 3;
  }
  gcollCommUserRank(comm, &rank);
  gcollCommCount(comm, &nranks);
  if (nranks > 64) {
    fprintf(stderr, "coll_check: at most 64 ranks\n");
    return 2;
  }
  int status;
  if (strcmp(argv[1], "matrix") == 0)
    status = matrix(comm, argc > 2 && strcmp(argv[2], "--full") == 0,
                    argc > 3 && strcmp(argv[2], "--sizes") == 0 ? argv[3] : NULL,
                    argc > 4 && strcmp(argv[4], "--allreduce") == 0);
  else if (strcmp(argv[1], "die") == 0 && argc >= 4 && argc <= 6 &&
           (argc < 6 || strcmp(argv[5], "allreduce") == 0 || strcmp(argv[5], "reduce") == 0 ||
            strcmp(argv[5], "allgather") == 0 || strcmp(argv[5], "broadcast") == 0))
    status = die(comm, atoi(argv[2]), atoi(argv[3]), argc >= 5 ? (size_t)atol(argv[4]) : 1024,
                 argc < 6 || strcmp(argv[5], "allreduce") == 0 ? DIE_ALLREDUCE
                 : strcmp(argv[5], "reduce") == 0        ? DIE_REDUCE
                 : strcmp(argv[5], "allgather") == 0     ? DIE_ALLGATHER
                                                         : DIE_BROADCAST);
  else if (strcmp(argv[1], "abort") == 0) return abort_test(comm);
  else if (strcmp(argv[1], "stall") == 0) return stall_test(comm);
  else if (strcmp(argv[1], "badargs") == 0) status = badargs(comm);
#ifdef HAVE_CUDA
  else if (strcmp(argv[1], "queue") == 0 && argc == 3 && on_device)
    status = queue_test(comm, atoi(argv[2]));
  else if (strcmp(argv[1], "graph") == 0 && argc == 3 && on_device)
    status = graph_test(comm, atoi(argv[2]));
#endif
  else if (strcmp(argv[1], "init") == 0) status = 0, printf("rank %d: initialised\n", rank);
  else if (strcmp(argv[1], "bcast-destroy") == 0) status = bcast_destroy(comm);
  else if (strcmp(argv[1], "digest") == 0) status = digest(comm);
  else if (strcmp(argv[1], "hostcall") == 0) status = host_call(comm);
  else {
    fprintf(stderr, "coll_check: unknown mode '%s'\n", argv[1]);
    status = 2;
  }
  gcollCommDestroy(comm);
  free_buffer();
  return status;
}
