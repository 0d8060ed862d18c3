/* The CUDA kernel's body (coll_device.cuh: prims_cuda.cuh under the shared
 * algo_ring.h/algo_tree.h) run on the CPU: nvcc compiles it for the host
 * with GCOLL_CUDA_EMULATE, and each thread block is a group of pthreads
 * with a real barrier standing in for __syncthreads/__syncthreads_or.
 * Ranks exchange data through FIFOs in host memory formatted by
 * gcoll_fifo_init, exactly as kernels would through device memory.
 *
 * Checked against reduce.c's serial reference, bit for bit: every
 * collective and algorithm, SIMPLE and LL, 1-4 ranks (8 for allreduce), two
 * channels with different ring orders and trees, sizes from 0 to many FIFO
 * steps, roots other than 0, out of place and in place; then a dead peer must end a block at the
 * deadline, an abort word must stop it with the abort's value, and the
 * sibling channel must be stopped too.
 *
 * What this covers: the step protocol (slot indexing, SIMPLE size/proto
 * checks, LL lines with partial last lines and flags, back-pressure through
 * head), multi-peer tree steps, uniform failure handling across a block's
 * threads, the partition and avg. What it cannot: the GPU memory model,
 * device code generation, timing. Those need gpu_coll_check on a GPU. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include <cmocka.h>
}

#include "kernels/coll_device.cuh"
#include "kernels/cuda_fatbin.h"
#include "kernels/reduce.h"

extern "C" {
void *prims_emu_fifo_new(size_t slot_bytes);
void prims_emu_fifo_free(void *f);
}

GCOLL_CUDA_FOR_EACH_TYPE(GCOLL_CUDA_DEFINE_REDUCE)
static const gcoll_cuda_reduce_fn reduce_table[gcollNumTypes][4] = {
#define ROW(id, sfx, T)                                                           \
  {GCOLL_CUDA_REDUCE_NAME(sfx, sum), GCOLL_CUDA_REDUCE_NAME(sfx, prod),           \
   GCOLL_CUDA_REDUCE_NAME(sfx, max), GCOLL_CUDA_REDUCE_NAME(sfx, min)},
    GCOLL_CUDA_FOR_EACH_TYPE(ROW)
#undef ROW
};

/* ---- the emulated block ------------------------------------------------------ */

#define THREADS 3          /* odd, so strided loops leave remainders */
#define NCHANNELS 2
#define MAX_RANKS 8
#define SLOT_BYTES 256     /* small slots: many steps per collective */

struct emu_block {
  pthread_barrier_t bar;
  int orv[3];
  struct gcoll_dev_block blk;
};

thread_local int gcoll_emu_tid, gcoll_emu_nthreads;
static thread_local struct emu_block *emu_cur;
static thread_local unsigned emu_gen;

void gcoll_emu_barrier(void) { pthread_barrier_wait(&emu_cur->bar); }

/* Three OR words in rotation: call g ORs into g%3; thread 0 clears the
 * word of call g+1 before the barrier of call g, when every thread has read
 * it (at call g-2) and none can write it yet. */
int gcoll_emu_barrier_or(int v) {
  unsigned g = emu_gen++;
  if (gcoll_emu_tid == 0) __atomic_store_n(&emu_cur->orv[(g + 1) % 3], 0, __ATOMIC_SEQ_CST);
  if (v) __atomic_fetch_or(&emu_cur->orv[g % 3], 1, __ATOMIC_SEQ_CST);
  pthread_barrier_wait(&emu_cur->bar);
  return __atomic_load_n(&emu_cur->orv[g % 3], __ATOMIC_SEQ_CST);
}

void gcoll_emu_pause(void) { sched_yield(); }

static gcollResult_t emu_algo(const struct gcoll_cuda_work &w, const struct gcoll_cuda_channel *ch,
                              gcoll_cuda_reduce_fn fn, size_t esize, size_t lo, size_t n,
                              struct gcoll_dev_block *blk) {
  return gcoll_dev_algo(w, ch, w.coll, w.algo, fn, esize, lo, n, blk);
}

struct emu_thread {
  pthread_t thread;
  const struct gcoll_cuda_work *w;
  int channel, tid;
  struct emu_block *block;
};

/* The kernel's dispatch (coll_kernels.cu), with host tables. */
static void *emu_thread_main(void *arg) {
  struct emu_thread *t = (struct emu_thread *)arg;
  const struct gcoll_cuda_work &w = *t->w;
  gcoll_emu_tid = t->tid;
  gcoll_emu_nthreads = THREADS;
  emu_cur = t->block;
  emu_gen = 0;
  const int valid = w.coll >= 0 && w.coll < GCOLL_NCOLLS && w.algo >= 0 &&
                    w.algo < GCOLL_NALGOS && w.dtype >= 0 && w.dtype < gcollNumTypes &&
                    w.op >= 0 && w.op < gcollNumOps;
  gcoll_dev_block_main(w, t->channel, &t->block->blk,
                       valid && gcoll_cuda_algo_supported[w.coll][w.algo] ? emu_algo : NULL,
                       valid ? reduce_table[w.dtype][w.op == gcollAvg ? 0 : w.op] : NULL);
  return NULL;
}

/* ---- a world of ranks -------------------------------------------------------- */

struct world {
  int nranks;
  int order[NCHANNELS][MAX_RANKS];
  void *ring[NCHANNELS][MAX_RANKS];
  void *up[NCHANNELS][MAX_RANKS], *down[NCHANNELS][MAX_RANKS];
  struct gcoll_cuda_channel ch[MAX_RANKS][NCHANNELS];
  char *scratch[MAX_RANKS];
  struct gcoll_cuda_status status[MAX_RANKS][NCHANNELS];
  int32_t abort_word[MAX_RANKS], local_abort[MAX_RANKS];
  uint64_t timeout_ns;
};

static uint64_t u64(const void *p) { return (uint64_t)(uintptr_t)p; }

static int pos_of(const struct world *w, int c, int rank) {
  for (int p = 0; p < w->nranks; p++)
    if (w->order[c][p] == rank) return p;
  return -1;
}
static int parent_of(const struct world *w, int c, int rank) {
  int p = pos_of(w, c, rank);
  return p == 0 ? -1 : w->order[c][(p - 1) / 2];
}

static void world_init(struct world *w, int nranks, uint64_t timeout_ns) {
  memset(w, 0, sizeof(*w));
  w->nranks = nranks;
  w->timeout_ns = timeout_ns;
  for (int c = 0; c < NCHANNELS; c++)
    for (int p = 0; p < nranks; p++) w->order[c][p] = c == 0 ? p : nranks - 1 - p;
  for (int c = 0; c < NCHANNELS; c++)
    for (int r = 0; r < nranks; r++) {
      if (nranks > 1) assert_non_null(w->ring[c][r] = prims_emu_fifo_new(SLOT_BYTES));
      if (parent_of(w, c, r) >= 0) {
        assert_non_null(w->up[c][r] = prims_emu_fifo_new(SLOT_BYTES));
        assert_non_null(w->down[c][r] = prims_emu_fifo_new(SLOT_BYTES));
      }
    }
  const size_t sbytes = SLOT_BYTES / 4;
  for (int r = 0; r < nranks; r++) {
    w->scratch[r] = (char *)aligned_alloc(64, NCHANNELS * GCOLL_CUDA_SCRATCH * sbytes);
    assert_non_null(w->scratch[r]);
    for (int c = 0; c < NCHANNELS; c++) {
      struct gcoll_cuda_channel *d = &w->ch[r][c];
      int pos = pos_of(w, c, r);
      d->ring_ranks = u64(w->order[c]);
      d->ring_pos = pos;
      if (nranks > 1) {
        d->ring_recv_prev = u64(w->ring[c][(pos + nranks - 1) % nranks]);
        d->ring_send_next = u64(w->ring[c][pos]);
      }
      d->has_tree = 1;
      d->tree_parent = parent_of(w, c, r);
      if (d->tree_parent >= 0) {
        d->tree_send_parent = u64(w->up[c][r]);
        d->tree_recv_parent = u64(w->down[c][r]);
      }
      for (int k = 0; k < nranks; k++)
        if (k != r && parent_of(w, c, k) == r) {
          int i = d->tree_nchildren++;
          d->tree_recv_child[i] = u64(w->up[c][k]);
          d->tree_send_child[i] = u64(w->down[c][k]);
        }
      d->scratch = u64(w->scratch[r] + (size_t)c * GCOLL_CUDA_SCRATCH * sbytes);
      d->scratch_bytes = sbytes;
    }
  }
}

static void world_free(struct world *w) {
  for (int c = 0; c < NCHANNELS; c++)
    for (int r = 0; r < w->nranks; r++) {
      prims_emu_fifo_free(w->ring[c][r]);
      prims_emu_fifo_free(w->up[c][r]);
      prims_emu_fifo_free(w->down[c][r]);
    }
  for (int r = 0; r < w->nranks; r++) free(w->scratch[r]);
}

/* Runs the blocks of the given ranks (mask) to completion. */
static void launch(struct world *w, struct gcoll_cuda_work *work, unsigned mask) {
  struct emu_block blocks[MAX_RANKS][NCHANNELS];
  struct emu_thread threads[MAX_RANKS][NCHANNELS][THREADS];
  for (int r = 0; r < w->nranks; r++) {
    if (!(mask & (1u << r))) continue;
    memset(w->status[r], 0, sizeof(w->status[r]));
    w->local_abort[r] = 0;
    work[r].channels = u64(w->ch[r]);
    work[r].status = u64(w->status[r]);
    work[r].abort_word = u64(&w->abort_word[r]);
    work[r].local_abort = u64(&w->local_abort[r]);
    work[r].timeout_ns = w->timeout_ns;
    work[r].rank = r;
    work[r].nranks = w->nranks;
    work[r].nchannels = NCHANNELS;
    for (int c = 0; c < NCHANNELS; c++) {
      memset(&blocks[r][c], 0, sizeof(blocks[r][c]));
      pthread_barrier_init(&blocks[r][c].bar, NULL, THREADS);
      for (int t = 0; t < THREADS; t++) {
        struct emu_thread *th = &threads[r][c][t];
        th->w = &work[r];
        th->channel = c;
        th->tid = t;
        th->block = &blocks[r][c];
        assert_int_equal(pthread_create(&th->thread, NULL, emu_thread_main, th), 0);
      }
    }
  }
  for (int r = 0; r < w->nranks; r++) {
    if (!(mask & (1u << r))) continue;
    for (int c = 0; c < NCHANNELS; c++) {
      for (int t = 0; t < THREADS; t++) pthread_join(threads[r][c][t].thread, NULL);
      pthread_barrier_destroy(&blocks[r][c].bar);
    }
  }
}

/* ---- data and the reference ---------------------------------------------------- */

static uint64_t rng = 0x13198a2e03707344ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Exact under any combination order (see gpu_coll_check.c). */
static void fill(void *buf, size_t n, gcollDataType_t t, gcollRedOp_t op) {
  static const double prod_values[] = {1, 2, -1, 0.5};
  for (size_t i = 0; i < n; i++) {
    double v = op == gcollProd ? prod_values[rnd() % 4] : (double)((int)(rnd() % 17) - 8);
    switch (t) {
      case gcollUint8: ((uint8_t *)buf)[i] = (uint8_t)rnd(); break;
      case gcollInt64: ((int64_t *)buf)[i] = (int64_t)rnd(); break;
      case gcollFloat16: ((uint16_t *)buf)[i] = gcoll_float_to_half((float)v); break;
      case gcollFloat32: ((float *)buf)[i] = (float)v; break;
      case gcollFloat64: ((double *)buf)[i] = v; break;
      default: ((uint16_t *)buf)[i] = gcoll_float_to_bf16((float)v); break;
    }
  }
}

struct variant {
  enum gcoll_coll coll;
  enum gcoll_algo algo;
};
static const struct variant variants[] = {
    {GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING}, {GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE},
    {GCOLL_COLL_BROADCAST, GCOLL_ALGO_RING}, {GCOLL_COLL_REDUCE, GCOLL_ALGO_RING},
    {GCOLL_COLL_ALLGATHER, GCOLL_ALGO_RING}, {GCOLL_COLL_REDUCESCATTER, GCOLL_ALGO_RING},
};
struct typed_op {
  gcollDataType_t t;
  gcollRedOp_t op;
};
static const struct typed_op typed_ops[] = {
    {gcollUint8, gcollSum}, {gcollFloat16, gcollProd}, {gcollFloat64, gcollMax},
    {gcollFloat32, gcollAvg}, {gcollInt64, gcollMin}, {gcollBfloat16, gcollSum}};
static const size_t counts[] = {0, 1, 7, 333, 3001};

/* in_place: sendbuf inside recvbuf where host_exec.h says (allgather: this
 * rank's block; reducescatter: recvbuf is this rank's block of sendbuf;
 * others: the same buffer). */
static void run_checked(struct world *w, struct variant v, enum gcoll_proto proto,
                        struct typed_op to, size_t count, int root, int in_place) {
  const int k = w->nranks;
  const size_t es = gcoll_dtype_size(to.t);
  const size_t send_n = v.coll == GCOLL_COLL_REDUCESCATTER ? count * (size_t)k : count;
  const size_t recv_n = v.coll == GCOLL_COLL_ALLGATHER ? count * (size_t)k : count;
  const size_t recv_b = recv_n * es + 8;
  unsigned char *send[MAX_RANKS], *recv[MAX_RANKS];
  unsigned char *want = (unsigned char *)malloc(recv_b);
  const void *in[MAX_RANKS];
  struct gcoll_cuda_work work[MAX_RANKS];
  for (int r = 0; r < k; r++) {
    send[r] = (unsigned char *)malloc(send_n * es + 8);
    recv[r] = (unsigned char *)malloc(recv_b);
    fill(send[r], send_n, to.t, to.op);
    memset(recv[r], 0x5a, recv_b);
    memset(&work[r], 0, sizeof(work[r]));
    work[r].sendbuf = u64(send[r]);
    work[r].recvbuf = u64(recv[r]);
    if (in_place) {
      if (v.coll == GCOLL_COLL_REDUCESCATTER) {
        /* recvbuf = sendbuf + r*count: run on a copy of the input */
        recv[r] = (unsigned char *)realloc(recv[r], send_n * es + 8);
        memcpy(recv[r], send[r], send_n * es);
        work[r].sendbuf = u64(recv[r]);
        work[r].recvbuf = u64(recv[r] + (size_t)r * count * es);
      } else if (v.coll == GCOLL_COLL_ALLGATHER) {
        memcpy(recv[r] + (size_t)r * count * es, send[r], count * es);
        work[r].sendbuf = u64(recv[r] + (size_t)r * count * es);
      } else {
        memcpy(recv[r], send[r], count * es);
        work[r].sendbuf = u64(recv[r]);
      }
    }
    work[r].count = count;
    work[r].stride = count;
    work[r].coll = v.coll;
    work[r].algo = v.algo;
    work[r].proto = proto;
    work[r].dtype = to.t;
    work[r].op = to.op;
    work[r].root = root;
  }
  launch(w, work, (1u << k) - 1);
  for (int r = 0; r < k; r++) {
    for (int c = 0; c < NCHANNELS; c++)
      if (w->status[r][c].done != 1 || w->status[r][c].result != gcollSuccess)
        fail_msg("%d ranks %s %s %s %s %s count %zu: rank %d channel %d result %d what %d",
                 k, gcoll_coll_name(v.coll), gcoll_algo_name(v.algo), gcoll_proto_name(proto),
                 gcoll_dtype_name(to.t), gcoll_redop_name(to.op), count, r, c,
                 w->status[r][c].result, w->status[r][c].what);
    const unsigned char *expect = want;
    switch (v.coll) {
      case GCOLL_COLL_ALLREDUCE:
      case GCOLL_COLL_REDUCE:
        for (int q = 0; q < k; q++) in[q] = send[q];
        gcoll_reduce_reference(want, in, k, count, to.t, to.op);
        if (v.coll == GCOLL_COLL_REDUCE && r != root) expect = NULL;
        break;
      case GCOLL_COLL_BROADCAST: memcpy(want, send[root], count * es); break;
      case GCOLL_COLL_ALLGATHER:
        for (int q = 0; q < k; q++) memcpy(want + (size_t)q * count * es, send[q], count * es);
        break;
      default:
        for (int q = 0; q < k; q++) in[q] = send[q] + (size_t)r * count * es;
        gcoll_reduce_reference(want, in, k, count, to.t, to.op);
        break;
    }
    int bad = 0;
    if (in_place && v.coll == GCOLL_COLL_REDUCESCATTER) {
      bad = count > 0 && memcmp(recv[r] + (size_t)r * count * es, want, count * es) != 0;
    } else if (in_place && v.coll == GCOLL_COLL_REDUCE && r != root) {
      bad = count > 0 && memcmp(recv[r], send[r], count * es) != 0; /* input kept */
    } else if (expect == NULL) {
      for (size_t b = 0; b < recv_b; b++) bad |= recv[r][b] != 0x5a;
    } else {
      bad = (recv_n > 0 && memcmp(recv[r], want, recv_n * es) != 0);
      for (size_t b = recv_n * es; b < recv_b; b++) bad |= recv[r][b] != 0x5a;
    }
    if (bad)
      fail_msg("%d ranks %s %s %s %s %s count %zu root %d%s: rank %d's result differs", k,
               gcoll_coll_name(v.coll), gcoll_algo_name(v.algo), gcoll_proto_name(proto),
               gcoll_dtype_name(to.t), gcoll_redop_name(to.op), count, root,
               in_place ? " in place" : "", r);
  }
  for (int r = 0; r < k; r++) {
    free(send[r]);
    free(recv[r]);
  }
  free(want);
}

static void test_collectives(void **state) {
  (void)state;
  for (int k = 1; k <= 4; k++) {
    struct world w;
    world_init(&w, k, 20000000000ull);
    for (size_t vi = 0; vi < sizeof(variants) / sizeof(variants[0]); vi++)
      for (int proto = GCOLL_PROTO_SIMPLE; proto <= GCOLL_PROTO_LL; proto++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
          /* One (type, op) per size keeps the run short while every pair
           * meets every collective across the sizes. */
          struct typed_op to = typed_ops[(ci + vi + (size_t)proto) % 6];
          run_checked(&w, variants[vi], (enum gcoll_proto)proto, to, counts[ci],
                      (int)(ci % (size_t)k), 0);
        }
    /* In place, every collective, both protocols, several steps. */
    for (size_t vi = 0; vi < sizeof(variants) / sizeof(variants[0]); vi++)
      for (int proto = GCOLL_PROTO_SIMPLE; proto <= GCOLL_PROTO_LL; proto++)
        run_checked(&w, variants[vi], (enum gcoll_proto)proto, typed_ops[vi % 6], 1031,
                    k - 1, 1);
    world_free(&w);
  }
  struct world w8;
  world_init(&w8, 8, 20000000000ull);
  for (int proto = GCOLL_PROTO_SIMPLE; proto <= GCOLL_PROTO_LL; proto++)
    for (int a = 0; a < 2; a++)
      run_checked(&w8, variants[a], (enum gcoll_proto)proto, typed_ops[3], 3001, 0, a);
  world_free(&w8);
}

/* Rank 1 never runs: rank 0's blocks stop at the deadline (one of them by
 * itself, the other possibly as its sibling), or at an abort word set
 * while they wait, with the abort's value. */
static void test_dead_peer(void **state) {
  (void)state;
  for (int mode = 0; mode < 2; mode++) {
    struct world w;
    world_init(&w, 2, mode == 0 ? 100000000ull : 60000000000ull);
    const size_t count = 4096;
    float *buf = (float *)calloc(count, sizeof(float));
    struct gcoll_cuda_work work[2];
    memset(work, 0, sizeof(work));
    work[0].sendbuf = work[0].recvbuf = u64(buf);
    work[0].count = work[0].stride = count;
    work[0].coll = GCOLL_COLL_ALLREDUCE;
    work[0].algo = GCOLL_ALGO_RING;
    work[0].proto = GCOLL_PROTO_SIMPLE;
    work[0].dtype = gcollFloat32;
    work[0].op = gcollSum;
    if (mode == 1) w.abort_word[0] = gcollRemoteError; /* seen at the first wait */
    uint64_t t0 = gcoll_dev_now_ns();
    launch(&w, work, 1u);
    uint64_t took = gcoll_dev_now_ns() - t0;
    const gcollResult_t expected = mode == 0 ? gcollSystemError : gcollRemoteError;
    const int reason = mode == 0 ? GCOLL_CUDA_REASON_DEADLINE : GCOLL_CUDA_REASON_ABORTED;
    int by_itself = 0;
    for (int c = 0; c < NCHANNELS; c++) {
      assert_int_equal(w.status[0][c].done, 1);
      assert_int_equal(w.status[0][c].result, expected);
      assert_int_equal(w.status[0][c].what, GCOLL_CUDA_FAIL_RECV_DATA);
      by_itself += w.status[0][c].reason == reason;
      if (w.status[0][c].reason != reason)
        assert_int_equal(w.status[0][c].reason, GCOLL_CUDA_REASON_SIBLING);
    }
    assert_true(by_itself >= 1);
    assert_int_equal(w.local_abort[0], expected);
    if (mode == 0) assert_true(took >= 100000000ull && took < 10000000000ull);
    free(buf);
    world_free(&w);
  }
}

/* A peer whose step carries another size than expected is reported as a
 * protocol mismatch, not read. */
static void test_size_mismatch(void **state) {
  (void)state;
  struct world w;
  world_init(&w, 2, 5000000000ull);
  float *a = (float *)calloc(64, sizeof(float)), *b = (float *)calloc(64, sizeof(float));
  struct gcoll_cuda_work work[2];
  memset(work, 0, sizeof(work));
  for (int r = 0; r < 2; r++) {
    work[r].sendbuf = work[r].recvbuf = u64(r == 0 ? a : b);
    work[r].count = work[r].stride = r == 0 ? 64 : 32; /* ranks disagree */
    work[r].coll = GCOLL_COLL_BROADCAST;
    work[r].algo = GCOLL_ALGO_RING;
    work[r].proto = GCOLL_PROTO_SIMPLE;
    work[r].dtype = gcollFloat32;
    work[r].op = gcollSum;
    work[r].root = 0;
  }
  launch(&w, work, 3u);
  int mismatches = 0;
  for (int c = 0; c < NCHANNELS; c++)
    mismatches += w.status[1][c].result == gcollInternalError &&
                  w.status[1][c].what == GCOLL_CUDA_FAIL_MISMATCH;
  assert_true(mismatches >= 1);
  free(a);
  free(b);
  world_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_dead_peer),
      cmocka_unit_test(test_size_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
