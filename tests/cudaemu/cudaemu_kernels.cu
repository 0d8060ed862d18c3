/* The kernels libcudaemu.so can launch: gcoll's real kernel body compiled
 * by nvcc for the host (GCOLL_CUDA_EMULATE), as tests/unit/
 * test_prims_cuda_emu.cu does, behind the same entry gcoll_cuda_coll has in
 * coll_kernels.cu.
 *
 * A launch runs every block at once (the blocks of one collective, and the
 * kernels of other ranks on other streams, wait for each other as they do
 * on a GPU), each block as a group of pthreads: a barrier stands in for
 * __syncthreads, three rotating OR words for __syncthreads_or, the
 * block's __shared__ state is one struct per block.
 *
 * Before it runs, the kernel's pointer arguments are checked the way a GPU
 * would fault on them: every buffer, FIFO, status word and table the
 * kernel will touch must be device, IPC-mapped or host-pinned memory of
 * the emulator, else the launch fails with CUDA_ERROR_ILLEGAL_ADDRESS
 * (host code passing a malloc'd pointer as a device address is caught
 * here; on the CPU it would silently work).
 *
 * What this cannot show: the GPU memory model, warp scheduling, speed. */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/coll_device.cuh"
#include "kernels/cuda_fatbin.h"
#include "kernels/p2p_device.cuh"
#include "cudaemu.h"

GCOLL_CUDA_FOR_EACH_TYPE(GCOLL_CUDA_DEFINE_REDUCE)
static const gcoll_cuda_reduce_fn reduce_table[gcollNumTypes][4] = {
#define ROW(id, sfx, T)                                                           \
  {GCOLL_CUDA_REDUCE_NAME(sfx, sum), GCOLL_CUDA_REDUCE_NAME(sfx, prod),           \
   GCOLL_CUDA_REDUCE_NAME(sfx, max), GCOLL_CUDA_REDUCE_NAME(sfx, min)},
    GCOLL_CUDA_FOR_EACH_TYPE(ROW)
#undef ROW
};

/* ---- the emulated block ----------------------------------------------------- */

struct emu_block {
  pthread_barrier_t bar;
  int orv[3];
  struct gcoll_dev_block blk;      /* gcoll_cuda_coll's __shared__ block state */
  struct gcoll_dev_p2p_shared p2p; /* gcoll_cuda_p2p's */
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

/* The kernel's __nanosleep in a long wait: give the CPU to the peers'
 * threads, which on a small machine are what the wait is for. */
void gcoll_emu_pause(void) { sched_yield(); }

/* ---- running a grid ----------------------------------------------------------
 * Each stream worker keeps a pool of emulated threads between launches
 * (thread_local: a stream runs one kernel at a time), grown to the
 * largest grid it ran and ended by cudaemu_kernels_thread_exit. A launch
 * hands thread i block i / threads, thread index i % threads, bumps the
 * generation and waits until all have returned. */

typedef void (*emu_body_fn)(const void *args, unsigned block, struct emu_block *shared);

struct emu_pool;

struct emu_thread {
  pthread_t thread;
  struct emu_pool *pool;
  size_t index;
  unsigned long start_gen; /* the generation when created: launches after it are its */
};

struct emu_pool {
  pthread_mutex_t lock;
  pthread_cond_t go, done;
  unsigned long gen;        /* bumped per launch */
  int quit;
  size_t nthreads, cap;
  struct emu_thread **threads;
  /* the launch in progress */
  size_t active, remaining;
  unsigned per_block;
  const void *args;
  emu_body_fn body;
  struct emu_block *blocks;
  struct emu_pool *next;    /* in all_pools */
};

static thread_local struct emu_pool *emu_pool;
/* Every pool, also reachable from here: a leak checker need not scan the
 * dlopen'd library's thread-local storage to see them. */
static pthread_mutex_t all_pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct emu_pool *all_pools;

static void *emu_thread_main(void *arg) {
  struct emu_thread *t = (struct emu_thread *)arg;
  struct emu_pool *p = t->pool;
  unsigned long seen = t->start_gen;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->lock);
    if (p->quit) break;
    seen = p->gen;
    if (t->index >= p->active) continue; /* not part of this (smaller) grid */
    const unsigned block = (unsigned)(t->index / p->per_block);
    struct emu_block *b = &p->blocks[block];
    const void *args = p->args;
    emu_body_fn body = p->body;
    gcoll_emu_tid = (int)(t->index % p->per_block);
    gcoll_emu_nthreads = (int)p->per_block;
    pthread_mutex_unlock(&p->lock);
    emu_cur = b;
    emu_gen = 0;
    body(args, block, b);
    pthread_mutex_lock(&p->lock);
    if (--p->remaining == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* Grows the calling worker's pool to n threads; -1 if it cannot. */
static int pool_reserve(size_t n) {
  struct emu_pool *p = emu_pool;
  if (p == NULL) {
    p = (struct emu_pool *)calloc(1, sizeof(*p));
    if (p == NULL) return -1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    pthread_mutex_lock(&all_pools_lock);
    p->next = all_pools;
    all_pools = p;
    pthread_mutex_unlock(&all_pools_lock);
    emu_pool = p;
  }
  if (n > p->cap) {
    struct emu_thread **grown =
        (struct emu_thread **)realloc(p->threads, n * sizeof(*grown));
    if (grown == NULL) return -1;
    p->threads = grown;
    p->cap = n;
  }
  while (p->nthreads < n) {
    struct emu_thread *t = (struct emu_thread *)calloc(1, sizeof(*t));
    if (t == NULL) return -1;
    t->pool = p;
    t->index = p->nthreads;
    t->start_gen = p->gen; /* only this worker changes gen */
    if (pthread_create(&t->thread, NULL, emu_thread_main, t) != 0) {
      free(t);
      cudaemu_report("cannot start emulated thread %zu of %zu", p->nthreads, n);
      return -1;
    }
    p->threads[p->nthreads++] = t;
  }
  return 0;
}

extern "C" void cudaemu_kernels_thread_exit(void) {
  struct emu_pool *p = emu_pool;
  if (p == NULL) return;
  pthread_mutex_lock(&p->lock);
  p->quit = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->lock);
  for (size_t i = 0; i < p->nthreads; i++) {
    pthread_join(p->threads[i]->thread, NULL);
    free(p->threads[i]);
  }
  free(p->threads);
  pthread_mutex_lock(&all_pools_lock);
  for (struct emu_pool **l = &all_pools; *l != NULL; l = &(*l)->next)
    if (*l == p) {
      *l = p->next;
      break;
    }
  pthread_mutex_unlock(&all_pools_lock);
  pthread_mutex_destroy(&p->lock);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  free(p);
  emu_pool = NULL;
}

/* Runs `grid` blocks of `threads` threads of body to completion. */
static int run_grid(const void *args, unsigned grid, unsigned threads, emu_body_fn body) {
  const size_t n = (size_t)grid * threads;
  struct emu_block *blocks = (struct emu_block *)calloc(grid, sizeof(*blocks));
  if (blocks == NULL || pool_reserve(n) != 0) {
    free(blocks);
    return 701; /* CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES */
  }
  for (unsigned b = 0; b < grid; b++) pthread_barrier_init(&blocks[b].bar, NULL, threads);
  struct emu_pool *p = emu_pool;
  pthread_mutex_lock(&p->lock);
  p->active = p->remaining = n;
  p->per_block = threads;
  p->args = args;
  p->body = body;
  p->blocks = blocks;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  while (p->remaining > 0) pthread_cond_wait(&p->done, &p->lock);
  pthread_mutex_unlock(&p->lock);
  for (unsigned b = 0; b < grid; b++) pthread_barrier_destroy(&blocks[b].bar);
  free(blocks);
  return 0;
}

/* ---- gcoll_cuda_coll -------------------------------------------------------- */

static gcollResult_t emu_algo(const struct gcoll_cuda_work &w, const struct gcoll_cuda_channel *ch,
                              gcoll_cuda_reduce_fn fn, size_t esize, size_t lo, size_t n,
                              struct gcoll_dev_block *blk) {
  return gcoll_dev_algo(w, ch, w.coll, w.algo, fn, esize, lo, n, blk);
}

/* coll_kernels.cu's gcoll_cuda_coll, with the host tables: the same
 * validation, the same block body. */
static void coll_body(const void *args, unsigned block, struct emu_block *shared) {
  const struct gcoll_cuda_work &w = *(const struct gcoll_cuda_work *)args;
  struct gcoll_dev_block *blk = &shared->blk;
  const int coll = w.coll, algo = w.algo;
  const int valid = coll >= 0 && coll < GCOLL_NCOLLS && algo >= 0 && algo < GCOLL_NALGOS &&
                    w.dtype >= 0 && w.dtype < gcollNumTypes && w.op >= 0 &&
                    w.op < gcollNumOps;
  gcoll_dev_block_main(w, (int)block, blk,
                       valid && gcoll_cuda_algo_supported[coll][algo] ? emu_algo : NULL,
                       valid ? reduce_table[w.dtype][w.op == gcollAvg ? (int)gcollSum : w.op]
                             : NULL);
}

/* One device address the kernel will use; reports and fails if the GPU
 * could not reach [p, p + n). */
static int reach(const char *what, int c, uint64_t p, uint64_t n) {
  if (n == 0 || cudaemu_device_accessible(p, n)) return 0;
  if (c >= 0)
    cudaemu_report("gcoll_cuda_coll: channel %d: %s %#llx (%llu bytes) is not device memory", c,
                   what, (unsigned long long)p, (unsigned long long)n);
  else
    cudaemu_report("gcoll_cuda_coll: %s %#llx (%llu bytes) is not device memory", what,
                   (unsigned long long)p, (unsigned long long)n);
  return -1;
}

/* A FIFO: its header, then all of its SIMPLE and LL slots as the header
 * describes them (what the peer formatted is what the kernel indexes). */
static int reach_fifo(const char *what, int c, uint64_t p) {
  if (reach(what, c, p, GCOLL_CUDA_FIFO_HEADER) != 0) return -1;
  const struct gcoll_dev_fifo *f = (const struct gcoll_dev_fifo *)(uintptr_t)p;
  uint64_t end = GCOLL_CUDA_FIFO_HEADER;
  const uint64_t simple = f->simple_offset + GCOLL_CUDA_FIFO_STEPS * f->slot_bytes;
  const uint64_t ll = f->ll_offset + GCOLL_CUDA_FIFO_STEPS * f->ll_slot_bytes;
  if (simple > end) end = simple;
  if (ll > end) end = ll;
  return reach(what, c, p, end);
}

/* Everything the kernel dereferences, as it will (coll_device.cuh). */
static int check_coll_args(const struct gcoll_cuda_work &w, unsigned grid) {
  int bad = 0;
  bad |= reach("status", -1, w.status, (uint64_t)grid * sizeof(struct gcoll_cuda_status));
  if (w.abort_word != 0) bad |= reach("abort word", -1, w.abort_word, sizeof(int32_t));
  if (w.local_abort != 0) bad |= reach("local abort word", -1, w.local_abort, sizeof(int32_t));
  const int valid = w.coll >= 0 && w.coll < GCOLL_NCOLLS && w.dtype >= 0 &&
                    w.dtype < gcollNumTypes && w.nranks >= 1 && w.rank >= 0 &&
                    w.rank < w.nranks;
  if (bad || !valid) return bad; /* invalid arguments: the kernel reports them */
  const uint64_t nch = w.nchannels > 0 && (uint64_t)w.nchannels < grid ? (uint64_t)w.nchannels
                                                                       : grid;
  bad |= reach("channel table", -1, w.channels, nch * sizeof(struct gcoll_cuda_channel));
  if (bad) return bad;
  for (unsigned c = 0; c < nch; c++) {
    const struct gcoll_cuda_channel *ch = (const struct gcoll_cuda_channel *)w.channels + c;
    bad |= reach("ring ranks", (int)c, ch->ring_ranks, (uint64_t)w.nranks * sizeof(int32_t));
    bad |= reach("LL scratch", (int)c, ch->scratch, GCOLL_CUDA_SCRATCH * ch->scratch_bytes);
    if (w.algo == GCOLL_ALGO_TREE) {
      if (ch->tree_parent >= 0) {
        bad |= reach_fifo("FIFO from the tree parent", (int)c, ch->tree_recv_parent);
        bad |= reach_fifo("FIFO to the tree parent", (int)c, ch->tree_send_parent);
      }
      for (int k = 0; k < ch->tree_nchildren && k < GCOLL_CUDA_MAX_PEERS; k++) {
        bad |= reach_fifo("FIFO from a tree child", (int)c, ch->tree_recv_child[k]);
        bad |= reach_fifo("FIFO to a tree child", (int)c, ch->tree_send_child[k]);
      }
    } else if (w.nranks > 1) {
      bad |= reach_fifo("FIFO from the ring's previous rank", (int)c, ch->ring_recv_prev);
      bad |= reach_fifo("FIFO to the ring's next rank", (int)c, ch->ring_send_next);
    }
  }
  /* cuda_exec.c's buffer rules: what each rank reads and writes. */
  const uint64_t bytes = w.count * gcoll_geom_esize(w.dtype), n = (uint64_t)w.nranks;
  const int is_root = w.rank == w.root;
  uint64_t send_len = bytes, recv_len = bytes;
  switch (w.coll) {
    case GCOLL_COLL_BROADCAST: if (!is_root) send_len = 0; break;
    case GCOLL_COLL_REDUCE: if (!is_root) recv_len = 0; break;
    case GCOLL_COLL_ALLGATHER: recv_len = bytes * n; break;
    case GCOLL_COLL_REDUCESCATTER: send_len = bytes * n; break;
    default: break;
  }
  bad |= reach("sendbuf", -1, w.sendbuf, send_len);
  bad |= reach("recvbuf", -1, w.recvbuf, recv_len);
  /* A pre-mul-sum's device scalar is read by every block. */
  if (w.premul == GCOLL_PREMUL_DEVICE)
    bad |= reach("pre-mul-sum scalar", -1, w.scalar, gcoll_geom_esize(w.dtype));
  return bad;
}

static int run_coll(void *const *params, unsigned grid, unsigned threads) {
  const struct gcoll_cuda_work *w = (const struct gcoll_cuda_work *)params[0];
  if (check_coll_args(*w, grid) != 0) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
  return run_grid(w, grid, threads, coll_body);
}

/* ---- gcoll_cuda_p2p ----------------------------------------------------------- */

static void p2p_body(const void *args, unsigned block, struct emu_block *shared) {
  gcoll_dev_p2p_block_main(*(const struct gcoll_cuda_p2p_work *)args, (int)block, &shared->p2p);
}

/* Everything gcoll_cuda_p2p dereferences (p2p_device.cuh): its operations,
 * their FIFOs and buffers. */
static int check_p2p_args(const struct gcoll_cuda_p2p_work &w, unsigned grid) {
  int bad = 0;
  bad |= reach("status", -1, w.status, (uint64_t)grid * sizeof(struct gcoll_cuda_status));
  if (w.abort_word != 0) bad |= reach("abort word", -1, w.abort_word, sizeof(int32_t));
  if (w.local_abort != 0) bad |= reach("local abort word", -1, w.local_abort, sizeof(int32_t));
  if (w.nops < 0 || bad) return bad;
  bad |= reach("send/recv operations", -1, w.ops,
               (uint64_t)w.nops * sizeof(struct gcoll_cuda_p2p_op));
  if (bad) return bad;
  const struct gcoll_cuda_p2p_op *ops = (const struct gcoll_cuda_p2p_op *)(uintptr_t)w.ops;
  for (int i = 0; i < w.nops; i++) {
    const struct gcoll_cuda_p2p_op &o = ops[i];
    if (o.kind == GCOLL_CUDA_P2P_COPY) {
      bad |= reach("copy source", -1, o.buf, o.bytes);
      bad |= reach("copy target", -1, o.dst, o.bytes);
      continue;
    }
    bad |= reach_fifo(o.kind == GCOLL_CUDA_P2P_SEND ? "FIFO to the receiver"
                                                    : "FIFO from the sender", -1, o.fifo);
    bad |= reach(o.kind == GCOLL_CUDA_P2P_SEND ? "send buffer" : "receive buffer", -1, o.buf,
                 o.bytes);
  }
  return bad;
}

static int run_p2p(void *const *params, unsigned grid, unsigned threads) {
  const struct gcoll_cuda_p2p_work *w = (const struct gcoll_cuda_p2p_work *)params[0];
  if (check_p2p_args(*w, grid) != 0) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
  return run_grid(w, grid, threads, p2p_body);
}

extern "C" const struct cudaemu_kernel cudaemu_kernel_table[] = {
    {GCOLL_CUDA_KERNEL_NAME, 1, {sizeof(struct gcoll_cuda_work)}, run_coll},
    {GCOLL_CUDA_P2P_KERNEL_NAME, 1, {sizeof(struct gcoll_cuda_p2p_work)}, run_p2p},
};
extern "C" const int cudaemu_kernel_count =
    (int)(sizeof(cudaemu_kernel_table) / sizeof(cudaemu_kernel_table[0]));
