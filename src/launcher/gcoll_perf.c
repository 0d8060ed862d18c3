/* gcoll-perf: times gcoll collectives over a size sweep and checks them,
 * nccl-tests style. Every rank runs the same sweep; rank 0 prints.
 *
 * Buffers are allocated and touched once for the largest size: on hosts
 * where a first touch costs microseconds per page, allocating per size
 * would time the page faults, not the collective. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/clock.h"
#include "kernels/reduce.h"
#include "launcher/gcoll_perf.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define PERF_SEED 0x6763f11ba5e5ull

static const char *const coll_names[PERF_NCOLLS] = {
    "allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "gather",
    "scatter", "sendrecv"};

const char *perf_coll_name(enum perf_coll c) { return coll_names[c]; }

int perf_coll_has_op(enum perf_coll c) {
  return c == PERF_ALLREDUCE || c == PERF_REDUCE || c == PERF_REDUCESCATTER;
}

int perf_coll_has_root(enum perf_coll c) {
  return c == PERF_BROADCAST || c == PERF_REDUCE || c == PERF_GATHER || c == PERF_SCATTER;
}

double perf_busbw_factor(enum perf_coll c, int nranks) {
  switch (c) {
  case PERF_ALLREDUCE: return 2.0 * (nranks - 1) / nranks;
  case PERF_ALLGATHER:
  case PERF_REDUCESCATTER:
  case PERF_ALLTOALL:
  case PERF_GATHER:
  case PERF_SCATTER: return (double)(nranks - 1) / nranks;
  default: return 1.0;
  }
}

struct perf_ctx {
  struct perf_opts o;
  gcollComm_t comm;
  int rank, nranks;
  unsigned char *sendbuf, *recvbuf;
  /* -M cuda: the buffers the collectives run on; sendbuf and recvbuf are
   * then their host copies, where inputs are made and results checked. */
  unsigned char *dev_send, *dev_recv;
  void *dev_scalar;           /* -M cuda: where ranks agree on one value */
  struct perf_data *data;
  int inject_rank;          /* GCOLL_PERF_INJECT_ERROR, -1 when unset */
  long long wrong_total;
  double busbw_sum;
  long nresults;
};

/* One row of the table: a collective, type, op and size. */
struct perf_case {
  enum perf_coll coll;
  gcollDataType_t type;
  gcollRedOp_t op;          /* gcollSum for collectives without one */
  int root;                 /* -1 for collectives without one */
  size_t ts;
  size_t count;             /* the count argument: per rank (per block) for
                               allgather, reducescatter, alltoall, gather
                               and scatter, as in nccl-tests */
  size_t bytes;             /* the largest buffer */
};

struct perf_bufs {
  unsigned char *send, *recv;
};

static double now_s(void) {
  return gcoll_clock_s();
}

static void die(struct perf_ctx *cx, const char *what, gcollResult_t rc) {
  fprintf(stderr, PERF_PROG ": rank %d: %s: %s: %s\n", cx->rank, what, gcollGetErrorString(rc),
          gcollGetLastError(cx->comm));
  gcollCommAbort(cx->comm);
  exit(1);
}

/* ---- buffers --------------------------------------------------------------- */

/* 2 MiB-aligned, huge-page advised and touched, so no page fault lands in a
 * timed loop. Never freed: the process ends with the sweep. */
static unsigned char *alloc_touched(size_t bytes) {
  size_t len = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  if (len == 0) len = HUGE_PAGE;
  void *p = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                 0);
  if (p == MAP_FAILED) return NULL;
  unsigned char *aligned =
      (unsigned char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  madvise(aligned, len, MADV_HUGEPAGE); /* a hint: fine if THP is off */
  memset(aligned, 0, len);
  return aligned;
}

/* Collectives whose buffers are nranks blocks of `count` (on some ranks). */
static int per_rank_blocks(enum perf_coll c) {
  return c == PERF_ALLGATHER || c == PERF_REDUCESCATTER || c == PERF_ALLTOALL ||
         c == PERF_GATHER || c == PERF_SCATTER;
}

static void case_setup(struct perf_case *c, size_t size, int nranks) {
  c->ts = gcoll_dtype_size(c->type);
  if (per_rank_blocks(c->coll)) {
    c->count = size / c->ts / (size_t)nranks;
    c->bytes = c->count * c->ts * (size_t)nranks;
  } else {
    c->count = size / c->ts;
    c->bytes = c->count * c->ts;
  }
}

/* Elements of this rank's input and of its whole output buffer. */
/* (Every rank fills and checks the whole extents, also where gather and
 * scatter do not use a buffer.) */
static size_t case_in_elems(const struct perf_case *c, int nranks) {
  int big = c->coll == PERF_REDUCESCATTER || c->coll == PERF_ALLTOALL || c->coll == PERF_SCATTER;
  return big ? c->count * (size_t)nranks : c->count;
}

static size_t case_out_elems(const struct perf_case *c, int nranks) {
  int big = c->coll == PERF_ALLGATHER || c->coll == PERF_ALLTOALL || c->coll == PERF_GATHER;
  return big ? c->count * (size_t)nranks : c->count;
}

/* In place follows the API: the rank's block of the big buffer is the small
 * one, for the input of allgather and gather and the output of
 * reducescatter and scatter. alltoall has none: its in-place half passes
 * one buffer as both, which gcoll refuses. */
static struct perf_bufs case_bufs(const struct perf_ctx *cx, const struct perf_case *c,
                                  int inplace) {
  struct perf_bufs b = {cx->sendbuf, cx->recvbuf};
  if (!inplace) return b;
  unsigned char *own_block = cx->recvbuf + (size_t)cx->rank * c->count * c->ts;
  b.send = b.recv = cx->recvbuf;
  if (c->coll == PERF_ALLGATHER || c->coll == PERF_GATHER) b.send = own_block;
  if (c->coll == PERF_REDUCESCATTER || c->coll == PERF_SCATTER) b.recv = own_block;
  return b;
}

/* The device address of a host-copy address (same offset). */
static unsigned char *on_device(const struct perf_ctx *cx, unsigned char *p) {
  size_t bytes = cx->o.maxbytes;
  if (p >= cx->sendbuf && p <= cx->sendbuf + bytes) return cx->dev_send + (p - cx->sendbuf);
  return cx->dev_recv + (p - cx->recvbuf);
}

static gcollResult_t run_coll(const struct perf_ctx *cx, const struct perf_case *c,
                              struct perf_bufs b) {
  if (cx->o.device_memory) {
    b.send = on_device(cx, b.send);
    b.recv = on_device(cx, b.recv);
  }
  switch (c->coll) {
  case PERF_ALLREDUCE:
    return gcollAllReduce(b.send, b.recv, c->count, c->type, c->op, cx->comm, NULL);
  case PERF_BROADCAST:
    return gcollBroadcast(b.send, b.recv, c->count, c->type, c->root, cx->comm, NULL);
  case PERF_REDUCE:
    return gcollReduce(b.send, b.recv, c->count, c->type, c->op, c->root, cx->comm, NULL);
  case PERF_ALLGATHER:
    return gcollAllGather(b.send, b.recv, c->count, c->type, cx->comm, NULL);
  case PERF_REDUCESCATTER:
    return gcollReduceScatter(b.send, b.recv, c->count, c->type, c->op, cx->comm, NULL);
  case PERF_ALLTOALL:
    return gcollAlltoAll(b.send, b.recv, c->count, c->type, cx->comm, NULL);
  case PERF_GATHER:
    return gcollGather(b.send, b.recv, c->count, c->type, c->root, cx->comm, NULL);
  case PERF_SCATTER:
    return gcollScatter(b.send, b.recv, c->count, c->type, c->root, cx->comm, NULL);
  default: {
    /* nccl-tests' sendrecv_perf: a ring, each rank's send and receive in
     * one group (with one rank, to and from itself). */
    int next = (cx->rank + 1) % cx->nranks, prev = (cx->rank + cx->nranks - 1) % cx->nranks;
    gcollResult_t rc = gcollGroupStart();
    if (rc == gcollSuccess) rc = gcollSend(b.send, c->count, c->type, next, cx->comm, NULL);
    if (rc == gcollSuccess) rc = gcollRecv(b.recv, c->count, c->type, prev, cx->comm, NULL);
    gcollResult_t end = gcollGroupEnd();
    return rc != gcollSuccess ? rc : end;
  }
  }
}

static void run_or_die(struct perf_ctx *cx, const struct perf_case *c, struct perf_bufs b) {
  gcollResult_t rc = run_coll(cx, c, b);
  if (rc != gcollSuccess) die(cx, perf_coll_name(c->coll), rc);
}

/* ---- timing ---------------------------------------------------------------- */

/* With -M cuda the calls return once queued: the GPU's work is done when
 * the default stream is. */
static void device_sync(struct perf_ctx *cx) {
  char err[256];
  if (cx->o.device_memory && perf_mem_sync(err, sizeof(err)) != 0) {
    fprintf(stderr, PERF_PROG ": rank %d: %s\n", cx->rank, err);
    exit(1);
  }
}

/* One 8-byte value reduced over the ranks, in place. With -M cuda through
 * GPU memory: a communicator whose connections are in GPU memory (p2p)
 * takes device buffers only. */
static gcollResult_t agree(struct perf_ctx *cx, void *value, gcollDataType_t type,
                           gcollRedOp_t op) {
  if (!cx->o.device_memory) return gcollAllReduce(value, value, 1, type, op, cx->comm, NULL);
  char err[256];
  if (perf_mem_to_device(cx->dev_scalar, value, 8, err, sizeof(err)) != 0) {
    fprintf(stderr, PERF_PROG ": rank %d: %s\n", cx->rank, err);
    return gcollUnhandledCudaError;
  }
  gcollResult_t rc = gcollAllReduce(cx->dev_scalar, cx->dev_scalar, 1, type, op, cx->comm, NULL);
  if (rc == gcollSuccess && (perf_mem_sync(err, sizeof(err)) != 0 ||
                             perf_mem_to_host(value, cx->dev_scalar, 8, err, sizeof(err)) != 0)) {
    fprintf(stderr, PERF_PROG ": rank %d: %s\n", cx->rank, err);
    return gcollUnhandledCudaError;
  }
  return rc;
}

/* Mean seconds per call on the slowest rank: every rank times its own loop
 * (the calls block, or are synchronised at the end), then they agree on the
 * maximum. The loops start together, after a barrier, as nccl-tests' do:
 * a root whose calls need no data (broadcast, reduce's leaves) runs up to
 * a FIFO's depth ahead of a late peer, and without the barrier its loop
 * timed that peer's lateness (a rank leaving init or the previous size's
 * check a millisecond later cost 8-byte broadcasts 50-400 us a call). */
static double time_calls(struct perf_ctx *cx, const struct perf_case *c, struct perf_bufs b) {
  for (long i = 0; i < cx->o.warmup; i++) run_or_die(cx, c, b);
  device_sync(cx);
  double token = 0;
  gcollResult_t rc = agree(cx, &token, gcollDouble, gcollMax);
  if (rc != gcollSuccess) die(cx, "barrier before the timed calls", rc);
  double t0 = now_s();
  for (long i = 0; i < cx->o.iters; i++) run_or_die(cx, c, b);
  device_sync(cx);
  double sec = (now_s() - t0) / (double)cx->o.iters;
  rc = agree(cx, &sec, gcollDouble, gcollMax);
  if (rc != gcollSuccess) die(cx, "allreduce of the time", rc);
  return sec;
}

/* ---- checking -------------------------------------------------------------- */

/* Poisons the whole output extent, then writes this rank's input where the
 * call reads it (in place: inside the output buffer). */
static void fill_input(struct perf_ctx *cx, const struct perf_case *c, struct perf_bufs b) {
  size_t out_bytes = case_out_elems(c, cx->nranks) * c->ts;
  size_t in_bytes = case_in_elems(c, cx->nranks) * c->ts;
  memset(cx->recvbuf, PERF_POISON_BYTE, out_bytes > in_bytes ? out_bytes : in_bytes);
  perf_data_fill(cx->data, b.send, cx->rank, 0, case_in_elems(c, cx->nranks), c->type, c->op);
}

/* The part of this rank's output that holds a result, NULL if none. */
static unsigned char *result_region(const struct perf_ctx *cx, const struct perf_case *c,
                                    struct perf_bufs b) {
  if ((c->coll == PERF_REDUCE || c->coll == PERF_GATHER) && cx->rank != c->root) return NULL;
  return c->count > 0 ? b.recv : NULL;
}

static void inject_error(const struct perf_ctx *cx, const struct perf_case *c, struct perf_bufs b) {
  unsigned char *res = result_region(cx, c, b);
  if (cx->inject_rank == cx->rank && res != NULL) res[c->ts - 1] ^= 0x40;
}

static size_t count_wrong_output(struct perf_ctx *cx, const struct perf_case *c,
                                 struct perf_bufs b, int inplace) {
  struct perf_data *d = cx->data;
  size_t n = c->count;
  switch (c->coll) {
  case PERF_ALLREDUCE: return perf_data_wrong_reduced(d, b.recv, 0, n, c->type, c->op);
  case PERF_BROADCAST: return perf_data_wrong_copy(d, b.recv, c->root, 0, n, c->type, c->op);
  case PERF_REDUCE:
    if (cx->rank == c->root) return perf_data_wrong_reduced(d, b.recv, 0, n, c->type, c->op);
    /* Non-roots: the buffer is left alone (in place, it is the input). */
    if (inplace) return perf_data_wrong_copy(d, b.recv, cx->rank, 0, n, c->type, c->op);
    return perf_data_wrong_untouched(b.recv, n, c->type);
  case PERF_ALLGATHER: {
    size_t wrong = 0;
    for (int r = 0; r < cx->nranks; r++)
      wrong += perf_data_wrong_copy(d, b.recv + (size_t)r * n * c->ts, r, 0, n, c->type, c->op);
    return wrong;
  }
  case PERF_REDUCESCATTER:
    return perf_data_wrong_reduced(d, b.recv, (size_t)cx->rank * n, n, c->type, c->op);
  case PERF_ALLTOALL: {
    /* Block r: what rank r sent this rank, its input block `rank`. */
    size_t wrong = 0;
    for (int r = 0; r < cx->nranks; r++)
      wrong += perf_data_wrong_copy(d, b.recv + (size_t)r * n * c->ts, r, (size_t)cx->rank * n,
                                    n, c->type, c->op);
    return wrong;
  }
  case PERF_GATHER: {
    /* Root: block r is rank r's input. Elsewhere recvbuff is left alone:
     * untouched, but for the own block that in place is the input. */
    size_t wrong = 0;
    for (int r = 0; r < cx->nranks; r++) {
      unsigned char *blk = b.recv + (size_t)r * n * c->ts;
      if (cx->rank == c->root || (inplace && r == cx->rank))
        wrong += perf_data_wrong_copy(d, blk, r, 0, n, c->type, c->op);
      else
        wrong += perf_data_wrong_untouched(blk, n, c->type);
    }
    return wrong;
  }
  case PERF_SENDRECV: {
    /* The previous rank's input. */
    int prev = (cx->rank + cx->nranks - 1) % cx->nranks;
    return perf_data_wrong_copy(d, b.recv, prev, 0, n, c->type, c->op);
  }
  default: {
    /* Scatter: root's input block `rank`. In place, the other blocks of
     * the buffer (root's input) must not change either. */
    size_t wrong = perf_data_wrong_copy(d, b.recv, c->root, (size_t)cx->rank * n, n, c->type,
                                        c->op);
    for (int r = 0; inplace && r < cx->nranks; r++)
      if (r != cx->rank)
        wrong += perf_data_wrong_copy(d, cx->recvbuf + (size_t)r * n * c->ts, cx->rank,
                                      (size_t)r * n, n, c->type, c->op);
    return wrong;
  }
  }
}

/* One more call on known data; wrong elements summed over ranks. Out of
 * place, the send buffer must come back unchanged too. */
/* -M cuda: the host copies' extents the case uses, to the device before
 * the call and back after it. */
static void sync_buffers(struct perf_ctx *cx, const struct perf_case *c, int to_device) {
  if (!cx->o.device_memory) return;
  size_t out_bytes = case_out_elems(c, cx->nranks) * c->ts;
  size_t in_bytes = case_in_elems(c, cx->nranks) * c->ts;
  size_t recv_bytes = out_bytes > in_bytes ? out_bytes : in_bytes;
  char err[256];
  int rc = to_device
               ? perf_mem_to_device(cx->dev_send, cx->sendbuf, in_bytes, err, sizeof(err)) ||
                     perf_mem_to_device(cx->dev_recv, cx->recvbuf, recv_bytes, err, sizeof(err))
               : perf_mem_to_host(cx->sendbuf, cx->dev_send, in_bytes, err, sizeof(err)) ||
                     perf_mem_to_host(cx->recvbuf, cx->dev_recv, recv_bytes, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, PERF_PROG ": rank %d: %s\n", cx->rank, err);
    exit(1);
  }
}

static long long check_case(struct perf_ctx *cx, const struct perf_case *c, struct perf_bufs b,
                            int inplace) {
  fill_input(cx, c, b);
  sync_buffers(cx, c, 1);
  run_or_die(cx, c, b);
  sync_buffers(cx, c, 0);
  inject_error(cx, c, b);
  size_t wrong = count_wrong_output(cx, c, b, inplace);
  if (!inplace)
    wrong += perf_data_wrong_copy(cx->data, b.send, cx->rank, 0, case_in_elems(c, cx->nranks),
                                  c->type, c->op);
  int64_t total = (int64_t)wrong;
  gcollResult_t rc = agree(cx, &total, gcollInt64, gcollSum);
  if (rc != gcollSuccess) die(cx, "allreduce of the error count", rc);
  return (long long)total;
}

/* alltoall in place (one buffer as both): refused on every rank, as NCCL
 * does, and nothing moved; count 0 is accepted (nothing to move). Counts
 * ranks that accepted it and elements that changed, over all ranks. */
static long long check_refused(struct perf_ctx *cx, const struct perf_case *c,
                               struct perf_bufs b) {
  fill_input(cx, c, b);
  sync_buffers(cx, c, 1);
  gcollResult_t rc = run_coll(cx, c, b);
  gcollResult_t want = c->count > 0 ? gcollInvalidArgument : gcollSuccess;
  if (rc != want)
    fprintf(stderr, PERF_PROG ": rank %d: %s in place, count %zu: returned %s, expected %s: %s\n",
            cx->rank, perf_coll_name(c->coll), c->count, gcollGetErrorString(rc),
            gcollGetErrorString(want), rc != gcollSuccess ? gcollGetLastError(cx->comm) : "-");
  sync_buffers(cx, c, 0);
  inject_error(cx, c, b);
  int64_t total = (rc != want) + (int64_t)perf_data_wrong_copy(
                                     cx->data, b.send, cx->rank, 0, case_in_elems(c, cx->nranks),
                                     c->type, c->op);
  rc = agree(cx, &total, gcollInt64, gcollSum);
  if (rc != gcollSuccess) die(cx, "allreduce of the error count", rc);
  return (long long)total;
}

/* ---- the sweep ------------------------------------------------------------- */

static uint64_t case_seed(const struct perf_case *c, size_t size, int inplace) {
  return PERF_SEED ^ ((uint64_t)c->coll << 56) ^ ((uint64_t)c->type << 48) ^
         ((uint64_t)c->op << 40) ^ ((uint64_t)inplace << 39) ^ (uint64_t)size;
}

static void run_mode(struct perf_ctx *cx, const struct perf_case *c, size_t size, int inplace) {
  struct perf_bufs b = case_bufs(cx, c, inplace);
  struct perf_result r;
  /* A receive into the buffer its own send still reads races with it (on
   * any NCCL too): no in-place form, nothing run. */
  if (inplace && c->coll == PERF_SENDRECV) {
    r.time_us = -1;
    r.algbw = r.busbw = 0;
    r.wrong = -1;
    if (cx->rank == 0) perf_report_result(&r);
    return;
  }
  if (inplace && c->coll == PERF_ALLTOALL) {
    r.time_us = -1;
    r.algbw = r.busbw = 0;
    r.wrong = -1;
    if (cx->o.check) {
      perf_data_reseed(cx->data, case_seed(c, size, inplace));
      r.wrong = check_refused(cx, c, b);
      cx->wrong_total += r.wrong;
    }
    if (cx->rank == 0) perf_report_result(&r);
    return;
  }
  double sec = time_calls(cx, c, b);
  r.time_us = sec * 1e6;
  r.algbw = sec > 0 ? (double)c->bytes / sec / 1e9 : 0;
  r.busbw = r.algbw * perf_busbw_factor(c->coll, cx->nranks);
  r.wrong = -1;
  if (cx->o.check) {
    perf_data_reseed(cx->data, case_seed(c, size, inplace));
    r.wrong = check_case(cx, c, b, inplace);
    cx->wrong_total += r.wrong;
  }
  cx->busbw_sum += r.busbw;
  cx->nresults++;
  if (cx->rank == 0) perf_report_result(&r);
}

static void run_sizes(struct perf_ctx *cx, struct perf_case *c) {
  for (size_t size = cx->o.minbytes;;) {
    case_setup(c, size, cx->nranks);
    if (cx->rank == 0)
      perf_report_row_start(c->bytes, c->count, c->type,
                            perf_coll_has_op(c->coll) ? gcoll_redop_name(c->op) : "none",
                            c->root);
    run_mode(cx, c, size, 0);
    run_mode(cx, c, size, 1);
    if (cx->rank == 0) perf_report_row_end();
    size = perf_next_size(&cx->o, size);
    if (size == 0) break;
  }
}

static void run_collective(struct perf_ctx *cx, enum perf_coll coll, int several) {
  if (cx->rank == 0) perf_report_collective(coll, several);
  for (int t = 0; t < gcollNumTypes; t++) {
    if (!(cx->o.type_mask & (1u << t))) continue;
    for (int op = 0; op < gcollNumOps; op++) {
      /* Collectives without an op run once per type. */
      if (perf_coll_has_op(coll) ? !(cx->o.op_mask & (1u << op)) : op != gcollSum) continue;
      struct perf_case c = {.coll = coll, .type = (gcollDataType_t)t, .op = (gcollRedOp_t)op,
                            .root = perf_coll_has_root(coll) ? (int)cx->o.root : -1};
      run_sizes(cx, &c);
    }
  }
}

/* ---- setup ----------------------------------------------------------------- */

/* Before the communicator exists only the environment says who is rank 0:
 * $GCOLL_RANK (gcollrun), else what srun sets ($PMI_RANK with --mpi=pmi2,
 * $SLURM_PROCID always); one copy of a usage error is enough. */
static int env_is_rank0(void) {
  const char *names[] = {"GCOLL_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const char *r = getenv(names[i]);
    if (r != NULL && *r != '\0') return strcmp(r, "0") == 0;
  }
  return 1;
}

static int parse_env_rank(const char *name) {
  const char *v = getenv(name);
  if (v == NULL || *v < '0' || *v > '9') return -1;
  return atoi(v);
}

static int setup(struct perf_ctx *cx) {
  char err[256];
  /* The GPU first, as nccl-tests sets it before ncclCommInitRank: a
   * communicator whose plan has GPU edges puts its FIFOs on the GPU that is
   * current at init (p2p). */
  int local = parse_env_rank("GCOLL_LOCAL_RANK");
  if (cx->o.device_memory && perf_mem_open(local < 0 ? 0 : local, err, sizeof(err)) != 0) {
    fprintf(stderr, PERF_PROG ": local rank %d: -M cuda: %s\n", local < 0 ? 0 : local, err);
    return 1;
  }
  gcollResult_t rc = gcollCommInitFromPlan(&cx->comm, NULL, -1);
  if (rc != gcollSuccess) {
    /* The hint only helps someone who started it by hand; under gcollrun
     * or srun it would point the wrong way. */
    int launched = getenv("GCOLL_KVS_ADDR") != NULL || getenv("SLURM_STEP_ID") != NULL;
    fprintf(stderr, PERF_PROG ": gcollCommInitFromPlan: %s%s\n", gcollGetLastError(NULL),
            launched ? "" : " (start it with 'gcollrun -n N " PERF_PROG "')");
    return 1;
  }
  gcollCommCount(cx->comm, &cx->nranks);
  gcollCommUserRank(cx->comm, &cx->rank);
  if (cx->o.root >= cx->nranks) {
    if (cx->rank == 0)
      fprintf(stderr, PERF_PROG ": -R %ld: root must be below nranks %d\n", cx->o.root,
              cx->nranks);
    return 2;
  }
  size_t bytes = cx->o.maxbytes;
  cx->sendbuf = alloc_touched(bytes);
  cx->recvbuf = alloc_touched(bytes);
  cx->data = perf_data_new(cx->nranks, PERF_SEED);
  if (cx->sendbuf == NULL || cx->recvbuf == NULL || cx->data == NULL) {
    fprintf(stderr, PERF_PROG ": rank %d: cannot allocate 2 x %zu bytes of buffers\n", cx->rank,
            bytes);
    return 1;
  }
  cx->inject_rank = parse_env_rank("GCOLL_PERF_INJECT_ERROR");
  if (cx->o.device_memory) {
    if ((cx->dev_send = perf_mem_alloc(bytes, err, sizeof(err))) == NULL ||
        (cx->dev_scalar = perf_mem_alloc(8, err, sizeof(err))) == NULL ||
        (cx->dev_recv = perf_mem_alloc(bytes, err, sizeof(err))) == NULL) {
      fprintf(stderr, PERF_PROG ": rank %d: -M cuda: %s\n", cx->rank, err);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  static struct perf_ctx cx;
  char err[512];
  int prc = perf_parse_args(argc, argv, &cx.o, err, sizeof(err));
  if (prc == PERF_ARGS_HELP) {
    if (env_is_rank0()) perf_print_usage();
    return 0;
  }
  if (prc != PERF_ARGS_OK) {
    if (env_is_rank0()) fprintf(stderr, PERF_PROG ": %s\n", err);
    return 2;
  }
  /* The communicator reads these at init. */
  if (cx.o.algo != NULL) setenv("GCOLL_ALGO", cx.o.algo, 1);
  if (cx.o.proto != NULL) setenv("GCOLL_PROTO", cx.o.proto, 1);
  int src = setup(&cx);
  if (src != 0) {
    if (cx.comm != NULL) gcollCommDestroy(cx.comm);
    return src;
  }
  if (cx.rank == 0) perf_report_header(&cx.o, cx.nranks, cx.rank);
  int several = __builtin_popcount(cx.o.coll_mask) > 1;
  for (int coll = 0; coll < PERF_NCOLLS; coll++)
    if (cx.o.coll_mask & (1u << coll)) run_collective(&cx, (enum perf_coll)coll, several);
  if (cx.rank == 0)
    perf_report_summary(cx.wrong_total, cx.nresults ? cx.busbw_sum / (double)cx.nresults : 0);
  /* Nobody exits before rank 0's report is out: with wrong results every
   * rank exits 1, and the first to go makes gcollrun (or srun) stop the
   * others, which cut rank 0's last row in half now and then once small
   * calls stopped waiting for a chain of ranks. */
  fflush(stdout);
  double token = 0;
  gcollResult_t brc = agree(&cx, &token, gcollDouble, gcollMax);
  if (brc != gcollSuccess) die(&cx, "barrier after the report", brc);
  perf_data_free(cx.data);
  perf_mem_free(cx.dev_send);
  perf_mem_free(cx.dev_scalar);
  perf_mem_free(cx.dev_recv);
  gcollResult_t rc = gcollCommDestroy(cx.comm);
  if (rc != gcollSuccess) {
    fprintf(stderr, PERF_PROG ": rank %d: gcollCommDestroy: %s\n", cx.rank,
            gcollGetLastError(NULL));
    return 1;
  }
  return cx.wrong_total != 0 ? 1 : 0;
}
