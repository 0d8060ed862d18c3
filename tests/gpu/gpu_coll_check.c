/* gpu_coll_check NRANKS [device|host]: every collective, algorithm,
 * protocol, type, op and several sizes on the CUDA executor, NRANKS ranks
 * sharing one GPU in this process (one executor and stream per rank, ring
 * and binary-tree FIFOs between them in device memory, or in host-pinned
 * mapped memory with "host"), each result compared with a host reference
 * (reduce.c's serial gcoll_reduce_reference); allreduce also in place.
 * Then a deadline and an abort with a missing peer must end the kernel with
 * the right error. Ranks share one process, so this checks the kernels and
 * the executor, not CUDA IPC between processes (no such transport yet).
 *
 * Inputs: integer types random (wrapping arithmetic is order-free), floating
 * types small integers (-8..8; products of 1, 2, -1 and 0.5), so every
 * result is exact whatever order the ring combines ranks in, and the
 * comparison is bit for bit.
 *
 * Prints exactly "skipped: no GPU" and exits 77 when the driver or a GPU is
 * missing. Written without a GPU: it has run only on the emulated GPU
 * (tests/cudaemu/test_emu_gpu_check.sh, GCOLL_CUDA_DRIVER=libcudaemu.so),
 * never on a real one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_exec.h"
#include "kernels/cuda_loader.h"
#include "kernels/fifo.h"
#include "kernels/reduce.h"

#define NCHANNELS 2
#define SLOT_BYTES 16384
#define MAX_RANKS 8
#define TIMEOUT_NS 20000000000ull /* 20 s per collective */

static const struct gcoll_cuda_api *cu;
static int use_host_fifos;
static int failures, checks;

#define CU_CHECK(call)                                                                   \
  do {                                                                                   \
    gcoll_cu_result r_ = (call);                                                         \
    if (r_ != GCOLL_CU_SUCCESS) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                      \
              gcoll_cuda_result_text(cu, r_));                                           \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

/* ---- FIFOs the GPU can reach ------------------------------------------------ */

struct fifo_mem {
  gcoll_cu_deviceptr dev;
  void *host; /* mapped host memory, or NULL for device memory */
};

static struct fifo_mem fifo_new(void) {
  struct fifo_mem m = {0, NULL};
  size_t bytes = gcoll_fifo_bytes(SLOT_BYTES);
  if (use_host_fifos) {
    CU_CHECK(cu->mem_host_alloc(&m.host, bytes,
                                GCOLL_CU_MEMHOSTALLOC_PORTABLE | GCOLL_CU_MEMHOSTALLOC_DEVICEMAP));
    if (gcoll_fifo_init(m.host, SLOT_BYTES) == NULL) exit(1);
    CU_CHECK(cu->mem_host_get_device_pointer(&m.dev, m.host, 0));
  } else {
    void *staging = NULL;
    if (posix_memalign(&staging, GCOLL_FIFO_ALIGN, bytes) != 0 ||
        gcoll_fifo_init(staging, SLOT_BYTES) == NULL)
      exit(1);
    CU_CHECK(cu->mem_alloc(&m.dev, bytes));
    CU_CHECK(cu->memcpy_htod(m.dev, staging, bytes));
    free(staging);
  }
  return m;
}

static void fifo_free(struct fifo_mem *m) {
  if (m->host != NULL) cu->mem_free_host(m->host);
  else if (m->dev != 0) cu->mem_free(m->dev);
  m->dev = 0;
  m->host = NULL;
}

/* ---- a world of nranks executors --------------------------------------------- */

struct world {
  int nranks;
  struct gcoll_cuda_exec *exec[MAX_RANKS];
  /* A stream per rank, as each rank of a real job has its own: ranks that
   * shared one would queue behind each other and never meet. */
  gcoll_cu_stream stream[MAX_RANKS];
  int ring_order[NCHANNELS][MAX_RANKS];
  /* ring[c][r]: FIFO from ring position r to r+1; up/down[c][r]: tree edge
   * between rank r and its parent (child -> parent, parent -> child). */
  struct fifo_mem ring[NCHANNELS][MAX_RANKS];
  struct fifo_mem up[NCHANNELS][MAX_RANKS], down[NCHANNELS][MAX_RANKS];
};

/* Channel 0 rings in rank order, channel 1 in reverse; the trees are binary
 * heaps over the ring order, so the two channels have different trees. */
static int tree_parent(const struct world *w, int c, int rank) {
  int pos = 0;
  while (w->ring_order[c][pos] != rank) pos++;
  return pos == 0 ? -1 : w->ring_order[c][(pos - 1) / 2];
}

static void world_create(struct world *w, int nranks, uint64_t timeout_ns) {
  memset(w, 0, sizeof(*w));
  w->nranks = nranks;
  for (int c = 0; c < NCHANNELS; c++)
    for (int p = 0; p < nranks; p++) w->ring_order[c][p] = c == 0 ? p : nranks - 1 - p;
  for (int c = 0; c < NCHANNELS; c++)
    for (int r = 0; r < nranks; r++) {
      if (nranks > 1) w->ring[c][r] = fifo_new();
      if (tree_parent(w, c, r) >= 0) {
        w->up[c][r] = fifo_new();
        w->down[c][r] = fifo_new();
      }
    }
  for (int r = 0; r < nranks; r++) {
    struct gcoll_cuda_exec_channel ch[NCHANNELS];
    memset(ch, 0, sizeof(ch));
    for (int c = 0; c < NCHANNELS; c++) {
      int pos = 0;
      while (w->ring_order[c][pos] != r) pos++;
      ch[c].ring_ranks = w->ring_order[c];
      ch[c].ring_pos = pos;
      ch[c].slot_bytes = SLOT_BYTES;
      if (nranks > 1) {
        ch[c].ring_recv_prev = w->ring[c][(pos + nranks - 1) % nranks].dev;
        ch[c].ring_send_next = w->ring[c][pos].dev;
      }
      ch[c].has_tree = 1;
      ch[c].tree_parent = tree_parent(w, c, r);
      if (ch[c].tree_parent >= 0) {
        ch[c].tree_send_parent = w->up[c][r].dev;
        ch[c].tree_recv_parent = w->down[c][r].dev;
      }
      for (int k = 0; k < nranks; k++)
        if (k != r && tree_parent(w, c, k) == r) {
          int i = ch[c].tree_nchildren++;
          ch[c].tree_recv_child[i] = w->up[c][k].dev;
          ch[c].tree_send_child[i] = w->down[c][k].dev;
        }
    }
    struct gcoll_cuda_exec_config cfg = {.device = 0, .rank = r, .nranks = nranks,
                                         .nchannels = NCHANNELS, .channels = ch,
                                         .timeout_ns = timeout_ns};
    char err[256];
    w->exec[r] = gcoll_cuda_exec_create(&cfg, err, sizeof(err));
    if (w->exec[r] == NULL) {
      fprintf(stderr, "rank %d: %s\n", r, err);
      exit(1);
    }
    CU_CHECK(cu->stream_create(&w->stream[r], GCOLL_CU_STREAM_NON_BLOCKING));
  }
}

static void world_destroy(struct world *w) {
  for (int r = 0; r < w->nranks; r++) {
    gcoll_cuda_exec_destroy(w->exec[r]);
    cu->stream_destroy(w->stream[r]);
  }
  for (int c = 0; c < NCHANNELS; c++)
    for (int r = 0; r < w->nranks; r++) {
      fifo_free(&w->ring[c][r]);
      fifo_free(&w->up[c][r]);
      fifo_free(&w->down[c][r]);
    }
}

/* ---- data ------------------------------------------------------------------- */

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Element i of a rank's input: exact under any combination order. */
static void fill(void *buf, size_t n, gcollDataType_t t, gcollRedOp_t op) {
  static const double prod_values[] = {1, 2, -1, 0.5};
  for (size_t i = 0; i < n; i++) {
    double v = op == gcollProd ? prod_values[rnd() % 4] : (double)((int)(rnd() % 17) - 8);
    switch (t) {
      case gcollInt8: ((int8_t *)buf)[i] = (int8_t)rnd(); break;
      case gcollUint8: ((uint8_t *)buf)[i] = (uint8_t)rnd(); break;
      case gcollInt32: ((int32_t *)buf)[i] = (int32_t)rnd(); break;
      case gcollUint32: ((uint32_t *)buf)[i] = (uint32_t)rnd(); break;
      case gcollInt64: ((int64_t *)buf)[i] = (int64_t)rnd(); break;
      case gcollUint64: ((uint64_t *)buf)[i] = rnd(); break;
      case gcollFloat16: ((uint16_t *)buf)[i] = gcoll_float_to_half((float)v); break;
      case gcollFloat32: ((float *)buf)[i] = (float)v; break;
      case gcollFloat64: ((double *)buf)[i] = v; break;
      default: ((uint16_t *)buf)[i] = gcoll_float_to_bf16((float)v); break;
    }
  }
}

struct coll_case {
  enum gcoll_coll coll;
  enum gcoll_algo algo;
};
static const struct coll_case cases[] = {
    {GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING}, {GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE},
    {GCOLL_COLL_BROADCAST, GCOLL_ALGO_RING}, {GCOLL_COLL_REDUCE, GCOLL_ALGO_RING},
    {GCOLL_COLL_ALLGATHER, GCOLL_ALGO_RING}, {GCOLL_COLL_REDUCESCATTER, GCOLL_ALGO_RING},
};
static const size_t counts[] = {0, 1, 7, 1031, 100003};
/* GCOLL_GPU_CHECK_QUICK=1 (the emulated GPU, tests/cudaemu): the largest
 * size smaller, still several FIFO steps per channel for every type (a
 * 1-byte type's channel carries 20 KB over 16 KB slots). On an emulator
 * the time goes into steps, not bytes. */
#define QUICK_LARGEST 40009

static int is_reduction(enum gcoll_coll c) {
  return c == GCOLL_COLL_ALLREDUCE || c == GCOLL_COLL_REDUCE || c == GCOLL_COLL_REDUCESCATTER;
}

/* Runs one collective on every rank and compares recvbufs with the host
 * reference. Returns 0 when all match. */
static int run_one(struct world *w, struct coll_case cc, enum gcoll_proto proto,
                   gcollDataType_t t, gcollRedOp_t op, size_t count, int root, int in_place) {
  const int k = w->nranks;
  const size_t es = gcoll_dtype_size(t);
  const size_t send_n = cc.coll == GCOLL_COLL_REDUCESCATTER ? count * (size_t)k : count;
  const size_t recv_n = cc.coll == GCOLL_COLL_ALLGATHER ? count * (size_t)k : count;
  const size_t send_b = send_n * es + 1, recv_b = recv_n * es + 1;
  unsigned char *send[MAX_RANKS], *recv[MAX_RANKS], *want = malloc(recv_b);
  gcoll_cu_deviceptr dsend[MAX_RANKS], drecv[MAX_RANKS];
  const void *in[MAX_RANKS];
  int bad = 0;
  for (int r = 0; r < k; r++) {
    send[r] = malloc(send_b);
    recv[r] = malloc(recv_b);
    fill(send[r], send_n, t, op);
    memset(recv[r], 0x5a, recv_b);
    CU_CHECK(cu->mem_alloc(&dsend[r], send_b));
    CU_CHECK(cu->mem_alloc(&drecv[r], recv_b));
    CU_CHECK(cu->memcpy_htod(dsend[r], send[r], send_b));
    CU_CHECK(cu->memcpy_htod(drecv[r], recv[r], recv_b));
    if (in_place) /* allreduce only: the input in recvbuf, sendbuf == recvbuf */
      CU_CHECK(cu->memcpy_htod(drecv[r], send[r], count * es));
  }
  for (int r = 0; r < k; r++) {
    struct gcoll_cuda_coll c = {.coll = cc.coll,
                                .sendbuf = in_place ? drecv[r] : dsend[r], .recvbuf = drecv[r],
                                .count = count, .dtype = t, .op = op, .root = root,
                                .algo = cc.algo, .proto = proto, .nchannels = 0};
    char err[256];
    gcollResult_t res = gcoll_cuda_exec_launch(w->exec[r], &c, w->stream[r], err, sizeof(err));
    if (res != gcollSuccess) {
      fprintf(stderr, "launch rank %d: %s\n", r, err);
      exit(1);
    }
  }
  for (int r = 0; r < k; r++) {
    char err[256];
    gcollResult_t res = gcoll_cuda_exec_wait(w->exec[r], err, sizeof(err));
    if (res != gcollSuccess) {
      fprintf(stderr, "rank %d: result %d: %s\n", r, (int)res, err);
      exit(1); /* the FIFOs are out of step now; nothing later can pass */
    }
    CU_CHECK(cu->memcpy_dtoh(recv[r], drecv[r], recv_b));
  }
  for (int r = 0; r < k; r++) {
    /* The expected recvbuf of rank r; NULL: must be untouched. */
    const unsigned char *expect = want;
    switch (cc.coll) {
      case GCOLL_COLL_ALLREDUCE:
        for (int q = 0; q < k; q++) in[q] = send[q];
        gcoll_reduce_reference(want, in, k, count, t, op);
        break;
      case GCOLL_COLL_REDUCE:
        for (int q = 0; q < k; q++) in[q] = send[q];
        gcoll_reduce_reference(want, in, k, count, t, op);
        if (r != root) expect = NULL;
        break;
      case GCOLL_COLL_BROADCAST:
        memcpy(want, send[root], count * es);
        break;
      case GCOLL_COLL_ALLGATHER:
        for (int q = 0; q < k; q++) memcpy(want + (size_t)q * count * es, send[q], count * es);
        break;
      default:
        for (int q = 0; q < k; q++) in[q] = send[q] + (size_t)r * count * es;
        gcoll_reduce_reference(want, in, k, count, t, op);
        break;
    }
    checks++;
    if (expect == NULL) {
      for (size_t b = 0; b < recv_b; b++)
        if (recv[r][b] != 0x5a) {
          bad = 1;
          break;
        }
    } else if ((recv_n > 0 && memcmp(recv[r], want, recv_n * es) != 0) ||
               recv[r][recv_b - 1] != 0x5a) {
      bad = 1;
    }
    if (bad) {
      fprintf(stderr, "FAIL: %d ranks, %s %s %s, %s %s, count %zu, root %d: rank %d differs\n",
              k, gcoll_coll_name(cc.coll), gcoll_algo_name(cc.algo), gcoll_proto_name(proto),
              gcoll_dtype_name(t), gcoll_redop_name(op), count, root, r);
      failures++;
      break;
    }
  }
  for (int r = 0; r < k; r++) {
    cu->mem_free(dsend[r]);
    cu->mem_free(drecv[r]);
    free(send[r]);
    free(recv[r]);
  }
  free(want);
  return bad;
}

/* A rank whose ring peer never runs must stop at the deadline, and an
 * abort must stop a waiting kernel with the abort's value. */
static void check_dead_peer(int nranks) {
  struct world w;
  const gcollResult_t expected[2] = {gcollSystemError, gcollRemoteError};
  for (int mode = 0; mode < 2; mode++) {
    world_create(&w, nranks, mode == 0 ? 200000000ull : TIMEOUT_NS);
    gcoll_cu_deviceptr buf;
    CU_CHECK(cu->mem_alloc(&buf, 1 << 20));
    struct gcoll_cuda_coll c = {.coll = GCOLL_COLL_ALLREDUCE, .sendbuf = buf, .recvbuf = buf,
                                .count = (1 << 20) / 4, .dtype = gcollFloat32,
                                .op = gcollSum, .algo = GCOLL_ALGO_RING,
                                .proto = GCOLL_PROTO_SIMPLE};
    char err[256];
    if (gcoll_cuda_exec_launch(w.exec[0], &c, w.stream[0], err, sizeof(err)) != gcollSuccess) {
      fprintf(stderr, "launch: %s\n", err);
      exit(1);
    }
    if (mode == 1) gcoll_cuda_exec_abort(w.exec[0], gcollRemoteError);
    gcollResult_t r = gcoll_cuda_exec_wait(w.exec[0], err, sizeof(err));
    checks++;
    if (r != expected[mode]) {
      fprintf(stderr, "FAIL: %s with a missing peer gave %d (%s), expected %d\n",
              mode == 0 ? "deadline" : "abort", (int)r, err, (int)expected[mode]);
      failures++;
    }
    cu->mem_free(buf);
    world_destroy(&w);
  }
}

int main(int argc, char **argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 2;
  use_host_fifos = argc > 2 && strcmp(argv[2], "host") == 0;
  const char *quick = getenv("GCOLL_GPU_CHECK_QUICK");
  const size_t largest = quick != NULL && strcmp(quick, "1") == 0 ? QUICK_LARGEST : counts[4];
  if (nranks < 1 || nranks > MAX_RANKS) {
    fprintf(stderr, "usage: gpu_coll_check NRANKS(1-%d) [device|host]\n", MAX_RANKS);
    return 2;
  }
  char msg[256];
  if (gcoll_cuda_probe(NULL, msg, sizeof(msg)) != GCOLL_CUDA_AVAILABLE) {
    fprintf(stderr, "gpu_coll_check: %s\n", msg);
    printf("skipped: no GPU\n");
    return 77;
  }
  cu = gcoll_cuda_api_get(NULL, 0);
  /* The FIFOs are allocated before any executor exists, and freed after
   * the last one is gone: the driver API has no implicit context, and the
   * primary context (with all its memory) dies with its last reference, so
   * the test holds one of its own for the whole run. */
  gcoll_cu_device dev;
  gcoll_cu_context ctx;
  CU_CHECK(cu->device_get(&dev, 0));
  CU_CHECK(cu->primary_ctx_retain(&ctx, dev));
  CU_CHECK(cu->ctx_set_current(ctx));
  struct world w;
  world_create(&w, nranks, TIMEOUT_NS);
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++)
    for (int proto = GCOLL_PROTO_SIMPLE; proto <= GCOLL_PROTO_LL; proto++)
      for (int t = 0; t < gcollNumTypes; t++)
        for (int op = 0; op < gcollNumOps; op++) {
          if (!is_reduction(cases[ci].coll) && op != gcollSum) continue;
          for (size_t si = 0; si < sizeof(counts) / sizeof(counts[0]); si++) {
            int root = (int)(si % (size_t)nranks);
            run_one(&w, cases[ci], (enum gcoll_proto)proto, (gcollDataType_t)t,
                    (gcollRedOp_t)op, si == 4 ? largest : counts[si], root,
                    cases[ci].coll == GCOLL_COLL_ALLREDUCE && si % 2 == 1);
          }
        }
  world_destroy(&w);
  if (nranks > 1) check_dead_peer(nranks);
  CU_CHECK(cu->primary_ctx_release(dev));
  printf("gpu_coll_check: %d ranks, %s FIFOs, sizes up to %zu: %d checks, %d failures\n",
         nranks, use_host_fifos ? "host-pinned" : "device", largest, checks, failures);
  return failures == 0 ? 0 : 1;
}
