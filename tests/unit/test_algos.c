/* Collective algorithms on the host primitives, N ranks as threads.
 *
 * Every rank of a "world" (N ranks, C channels, one FIFO slot size) owns a
 * host executor created once; the FIFOs, buffers and executors live for the
 * whole program, so FIFO step counters carry over from one collective to
 * the next as they do in a real communicator. Channel c uses its own random
 * ring order; trees: channel c%3 == 0 the binary tree of seed 000, 1 its
 * double-binary-tree partner gcoll_dtree_t2, 2 a ternary heap over a random
 * rank order (3 children: the widest tree the primitives take).
 *
 * Results are checked against gcoll_reduce_reference over the same inputs:
 * integers exactly (wrapping sum/prod are associative, so ring order cannot
 * change them); min/max and data movement exactly; floating sum/avg/prod
 * within 2*N*u*S + 2*u*|ref|, where u is the type's unit roundoff and S the
 * sum of |inputs|: each of two summation orders is within (N-1)*u*S of the
 * exact sum. Inputs are multiples of 1/16 in [-2, 2] (prod: +-0.5, 1, 2),
 * so most results are exact anyway and real errors stand out.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "graph/plan.h"
#include "kernels/exec.h"
#include "kernels/fifo.h"
#include "kernels/half.h"
#include "kernels/host_direct.h"
#include "kernels/host_exec.h"
#include "kernels/reduce.h"
#include "kernels/wait.h"
#include "testutil.h"

#define MAX_RANKS 8
#define MAX_CH 4
#define MAX_COUNT (65537 + 3)
#define CANARY 0xA5

/* ---- worlds ------------------------------------------------------------- */

struct world {
  int n, nch;
  size_t slot;
  int ring[MAX_CH][MAX_RANKS];                /* ring[c][pos] = rank */
  struct gcoll_fifo *ring_fifo[MAX_CH][MAX_RANKS]; /* from position p to p+1 */
  int parent[MAX_CH][MAX_RANKS];
  int nchild[MAX_CH][MAX_RANKS];
  int child[MAX_CH][MAX_RANKS][3];
  struct gcoll_fifo *up[MAX_CH][MAX_RANKS];   /* rank -> its parent */
  struct gcoll_fifo *down[MAX_CH][MAX_RANKS]; /* parent -> rank */
  struct gcoll_host_exec *exec[MAX_RANKS];
  struct gcoll_host_exec *gather_exec[MAX_RANKS];
  struct gcoll_host_exec *direct_exec[MAX_RANKS];
  _Atomic int abort_word;
  void *mem[MAX_CH * MAX_RANKS * 3];
  int nmem;
};

static unsigned long long g_seed = 0x9e3779b97f4a7c15ULL;

static int rand_below(int n) { return (int)(test_rand(&g_seed) % (unsigned)n); }

static void shuffle(int *a, int n) {
  for (int i = 0; i < n; i++) a[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = rand_below(i + 1), t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

static struct gcoll_fifo *new_fifo(struct world *w) {
  void *mem = NULL;
  size_t bytes = gcoll_fifo_bytes(w->slot);
  assert_true(bytes > 0);
  assert_int_equal(posix_memalign(&mem, 64, bytes), 0);
  w->mem[w->nmem++] = mem;
  struct gcoll_fifo *f = gcoll_fifo_init(mem, w->slot);
  assert_non_null(f);
  return f;
}

static void build_tree(struct world *w, int c) {
  int order[MAX_RANKS], kind = c % 3;
  shuffle(order, w->n);
  for (int node = 0; node < w->n; node++) {
    int p = -1, kids[3] = {-1, -1, -1};
    if (kind == 0) {
      gcoll_btree(w->n, node, &p, &kids[0], &kids[1]);
    } else if (kind == 1) {
      gcoll_dtree_t2(w->n, node, &p, &kids[0], &kids[1]);
    } else {
      p = node == 0 ? -1 : (node - 1) / 3;
      for (int k = 0; k < 3; k++) kids[k] = 3 * node + 1 + k < w->n ? 3 * node + 1 + k : -1;
    }
    int rank = kind == 2 ? order[node] : node;
    w->parent[c][rank] = p < 0 ? -1 : (kind == 2 ? order[p] : p);
    w->nchild[c][rank] = 0;
    for (int k = 0; k < 3; k++)
      if (kids[k] >= 0)
        w->child[c][rank][w->nchild[c][rank]++] = kind == 2 ? order[kids[k]] : kids[k];
  }
  for (int r = 0; r < w->n; r++)
    if (w->parent[c][r] >= 0) {
      w->up[c][r] = new_fifo(w);
      w->down[c][r] = new_fifo(w);
    }
}

/* Peer reads for the direct form (host_direct.h) between threads: an
 * identity is the rank, a read a memcpy, and each rank's behaviour is
 * set per test. */
struct fake_peer {
  int rank;
  int refuse;          /* probes fail (EPERM) */
  int cheap;           /* what cheap answers */
  _Atomic int cheap_asks;
  int fail_read;       /* reads fail (EFAULT) */
  _Atomic int reads, probes;
  _Atomic int ranges, most_ranges;  /* over all reads; the most in one */
  /* Tuning's clock (fake_clock): 1 us a reading, plus read_ns a read.
   * A negative read_ns makes a direct call take less than the ring's,
   * which is how a test makes the direct form the faster without timing
   * anything real. Only the rank's own thread uses it. */
  uint64_t clock;
  int64_t read_ns;
  uint64_t candidates;              /* what the executor reported at destroy */
  char tuned[512];
};
static struct fake_peer g_fake[MAX_RANKS];
/* The direct executors' cache_bytes and min_bytes (worlds made while
 * they are set; min_bytes 0 means 1), and whether they tune. */
static uint64_t g_cache_bytes, g_min_bytes;
static int g_tune;

static void fake_identity(void *arg, uint8_t id[GCOLL_PEER_ID_BYTES]) {
  const struct fake_peer *f = arg;
  memset(id, 0, GCOLL_PEER_ID_BYTES);
  memcpy(id, &f->rank, sizeof(f->rank));
}
static int fake_probe(void *arg, int peer, const uint8_t id[GCOLL_PEER_ID_BYTES]) {
  struct fake_peer *f = arg;
  int who;
  memcpy(&who, id, sizeof(who));
  f->probes++;
  return f->refuse ? EPERM : who == peer ? 0 : ENXIO;
}
static int fake_read(void *arg, const uint8_t id[GCOLL_PEER_ID_BYTES],
                     const struct gcoll_peer_range *r, int n) {
  struct fake_peer *f = arg;
  (void)id;
  f->reads++;
  f->ranges += n;
  if (n > f->most_ranges) f->most_ranges = n;
  if (n < 1 || n > GCOLL_PEER_RANGES_MAX) return EINVAL;
  if (f->fail_read) return EFAULT;
  for (int i = 0; i < n; i++) memcpy(r[i].dst, (const void *)(uintptr_t)r[i].addr, r[i].n);
  f->clock += (uint64_t)f->read_ns;
  return 0;
}
static uint64_t fake_clock(void *arg) {
  struct fake_peer *f = arg;
  f->clock += 1000;
  return f->clock;
}
static void fake_report(void *arg, uint64_t candidates, uint64_t direct, const char *tuned) {
  struct fake_peer *f = arg;
  (void)direct;
  f->candidates = candidates;
  snprintf(f->tuned, sizeof(f->tuned), "%s", tuned);
}
static int fake_cheap(void *arg, const void *p, size_t n) {
  (void)p;
  (void)n;
  struct fake_peer *f = arg;
  f->cheap_asks++;
  return f->cheap;
}

static void reset_fakes(void) {
  for (int r = 0; r < MAX_RANKS; r++) {
    g_fake[r].rank = r;
    g_fake[r].refuse = g_fake[r].fail_read = 0;
    g_fake[r].cheap = 1;
    g_fake[r].reads = g_fake[r].probes = g_fake[r].cheap_asks = 0;
    g_fake[r].ranges = g_fake[r].most_ranges = 0;
    g_fake[r].clock = 1000000000ull;
    g_fake[r].read_ns = 0;
    g_fake[r].candidates = 0;
    g_fake[r].tuned[0] = '\0';
  }
}

static void make_exec(struct world *w, int rank, uint64_t timeout_ns) {
  struct gcoll_host_channel ch[MAX_CH];
  memset(ch, 0, sizeof(ch));
  for (int c = 0; c < w->nch; c++) {
    int pos = 0;
    while (w->ring[c][pos] != rank) pos++;
    ch[c].ring.ranks = w->ring[c];
    ch[c].ring.pos = pos;
    if (w->n > 1) {
      ch[c].ring.send_next = w->ring_fifo[c][pos];
      ch[c].ring.recv_prev = w->ring_fifo[c][(pos + w->n - 1) % w->n];
    }
    ch[c].has_tree = 1;
    ch[c].tree.parent = w->parent[c][rank];
    if (ch[c].tree.parent >= 0) {
      ch[c].tree.send_parent = w->up[c][rank];
      ch[c].tree.recv_parent = w->down[c][rank];
    }
    ch[c].tree.nchildren = w->nchild[c][rank];
    for (int k = 0; k < w->nchild[c][rank]; k++) {
      int kid = w->child[c][rank][k];
      ch[c].tree.recv_child[k] = w->up[c][kid];
      ch[c].tree.send_child[k] = w->down[c][kid];
    }
  }
  struct gcoll_exec_config cfg = {.rank = rank, .nranks = w->n, .nchannels = w->nch,
                                  .channels = ch, .abort_word = &w->abort_word,
                                  .timeout_ns = timeout_ns};
  char err[256] = "";
  w->exec[rank] = gcoll_host_exec_create(&cfg, err, sizeof(err));
  if (w->exec[rank] == NULL) fail_msg("executor: %s", err);
  /* A second executor on the same FIFOs that takes the gather form up to
   * one step of either protocol (test_gather_form). */
  cfg.gather_bytes[GCOLL_PROTO_SIMPLE] = w->slot;
  cfg.gather_bytes[GCOLL_PROTO_LL] = w->slot / 4;
  w->gather_exec[rank] = gcoll_host_exec_create(&cfg, err, sizeof(err));
  if (w->gather_exec[rank] == NULL) fail_msg("gather executor: %s", err);
  /* A third whose allgathers and broadcasts of any size are candidates for
   * the direct form (test_direct_*). */
  cfg.gather_bytes[GCOLL_PROTO_SIMPLE] = cfg.gather_bytes[GCOLL_PROTO_LL] = 0;
  g_fake[rank].rank = rank;
  cfg.peer_reads = (struct gcoll_exec_peer_reads){
      .min_bytes = g_min_bytes ? g_min_bytes : 1,
      .cache_bytes = g_cache_bytes,
      .identity = fake_identity,
      .probe = fake_probe,
      .read = fake_read,
      .cheap = fake_cheap,
      .report = fake_report,
      .tune = g_tune,
      .clock = fake_clock,
      .arg = &g_fake[rank]};
  w->direct_exec[rank] = gcoll_host_exec_create(&cfg, err, sizeof(err));
  if (w->direct_exec[rank] == NULL) fail_msg("direct executor: %s", err);
}

static struct world *world_new(int n, int nch, size_t slot, uint64_t timeout_ns) {
  struct world *w = calloc(1, sizeof(*w));
  assert_non_null(w);
  w->n = n;
  w->nch = nch;
  w->slot = slot;
  atomic_init(&w->abort_word, 0);
  for (int c = 0; c < nch; c++) {
    shuffle(w->ring[c], n);
    if (n > 1)
      for (int p = 0; p < n; p++) w->ring_fifo[c][p] = new_fifo(w);
    build_tree(w, c);
  }
  for (int r = 0; r < n; r++) make_exec(w, r, timeout_ns);
  return w;
}

static void world_free(struct world *w) {
  for (int r = 0; r < w->n; r++) {
    gcoll_host_exec_destroy(w->exec[r]);
    gcoll_host_exec_destroy(w->gather_exec[r]);
    gcoll_host_exec_destroy(w->direct_exec[r]);
  }
  for (int i = 0; i < w->nmem; i++) free(w->mem[i]);
  free(w);
}

/* ---- running one collective on every rank ------------------------------ */

struct rank_call {
  struct world *w;
  int rank;
  struct gcoll_host_coll coll;
  gcollResult_t result;
  char err[256];
  double seconds;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *rank_main(void *arg) {
  struct rank_call *rc = arg;
  double t0 = now_s();
  rc->err[0] = 0;
  rc->result = gcoll_host_exec_run(rc->w->exec[rc->rank], &rc->coll, rc->err,
                                   sizeof(rc->err));
  rc->seconds = now_s() - t0;
  return NULL;
}

/* Runs calls[r] for every rank r whose `skip` bit is clear, one thread each. */
static void run_ranks(struct rank_call *calls, int n, unsigned skip) {
  pthread_t th[MAX_RANKS];
  for (int r = 0; r < n; r++)
    if (!(skip & (1u << r))) assert_int_equal(pthread_create(&th[r], NULL, rank_main, &calls[r]), 0);
  for (int r = 0; r < n; r++)
    if (!(skip & (1u << r))) pthread_join(th[r], NULL);
}

/* ---- data and comparison ------------------------------------------------ */

static const gcollDataType_t k_types[] = {gcollInt8,  gcollInt32,  gcollUint64, gcollHalf,
                                          gcollFloat, gcollDouble, gcollBfloat16};
static const gcollRedOp_t k_ops[] = {gcollSum, gcollProd, gcollMin, gcollMax, gcollAvg};
static const size_t k_counts[] = {0, 1, 7, 1023, 4097, MAX_COUNT};
static const int k_nranks[] = {1, 2, 3, 4, 5, 8};
static const int k_nch[] = {1, 2, 4};

static int is_float(gcollDataType_t t) {
  return t == gcollHalf || t == gcollFloat || t == gcollDouble || t == gcollBfloat16;
}

static double unit_roundoff(gcollDataType_t t) {
  switch (t) {
    case gcollHalf: return ldexp(1, -11);
    case gcollBfloat16: return ldexp(1, -8);
    case gcollFloat: return ldexp(1, -24);
    default: return ldexp(1, -53);
  }
}

static double get_f(const void *buf, size_t i, gcollDataType_t t) {
  switch (t) {
    case gcollHalf: return gcoll_half_to_float(((const uint16_t *)buf)[i]);
    case gcollBfloat16: return gcoll_bf16_to_float(((const uint16_t *)buf)[i]);
    case gcollFloat: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
  }
}

static void put_f(void *buf, size_t i, gcollDataType_t t, double v) {
  switch (t) {
    case gcollHalf: ((uint16_t *)buf)[i] = gcoll_float_to_half((float)v); break;
    case gcollBfloat16: ((uint16_t *)buf)[i] = gcoll_float_to_bf16((float)v); break;
    case gcollFloat: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
  }
}

static void fill(void *buf, size_t count, gcollDataType_t t, gcollRedOp_t op) {
  static const double prod_vals[] = {-2, -1, -0.5, 0.5, 1, 2};
  size_t es = gcoll_dtype_size(t);
  for (size_t i = 0; i < count; i++) {
    unsigned long long x = test_rand(&g_seed);
    if (is_float(t)) {
      double v = op == gcollProd ? prod_vals[x % 6] : (double)((int)(x % 65) - 32) / 16.0;
      put_f(buf, i, t, v);
    } else {
      /* Any bits work (wrapping is exact); small values keep prod nonzero. */
      uint64_t v = op == gcollProd ? (uint64_t)(x % 5) - 2 : x >> 7;
      memcpy((char *)buf + i * es, &v, es);  /* little-endian low bytes */
    }
  }
}

/* Compares got against ref; in[] are the N inputs (for the tolerance). */
static void expect_reduced(const void *got, const void *ref, const void *const *in, int n,
                           size_t count, gcollDataType_t t, gcollRedOp_t op,
                           const char *what) {
  size_t es = gcoll_dtype_size(t);
  if (!is_float(t) || op == gcollMin || op == gcollMax) {
    for (size_t i = 0; i < count; i++)
      if (memcmp((const char *)got + i * es, (const char *)ref + i * es, es) != 0)
        fail_msg("%s: element %zu of %zu differs from the reference", what, i, count);
    return;
  }
  double u = unit_roundoff(t);
  for (size_t i = 0; i < count; i++) {
    double s = 0, r = get_f(ref, i, t), g = get_f(got, i, t);
    if (op == gcollProd) {
      s = 1;
      for (int k = 0; k < n; k++) s *= fabs(get_f(in[k], i, t));
    } else {
      for (int k = 0; k < n; k++) s += fabs(get_f(in[k], i, t));
    }
    double tol = 2.0 * n * u * s + 2.0 * u * fabs(r);
    if (!(fabs(g - r) <= tol))
      fail_msg("%s: element %zu: got %.9g, reference %.9g (tolerance %.3g)", what, i, g, r,
               tol);
  }
}

/* ---- one collective, checked ------------------------------------------- */

struct rank_bufs {
  unsigned char *input;  /* original inputs, never handed to the executor */
  unsigned char *a, *b;  /* sendbuf / recvbuf storage */
};
static struct rank_bufs g_bufs[MAX_RANKS];
static unsigned char *g_ref;

struct case_desc {
  enum gcoll_coll coll;
  enum gcoll_algo algo;
  gcollDataType_t dtype;
  gcollRedOp_t op;
  enum gcoll_proto proto;
  size_t count;
  int nch, root, in_place;
};

static const char *coll_name(enum gcoll_coll c) {
  static const char *names[] = {"allreduce", "broadcast", "reduce", "allgather",
                                "reducescatter"};
  return names[c];
}

static void prepare_rank(struct world *w, const struct case_desc *d, int r,
                         struct rank_call *call) {
  size_t es = gcoll_dtype_size(d->dtype), bytes = d->count * es;
  size_t in_elems = d->coll == GCOLL_COLL_REDUCESCATTER ? d->count * (size_t)w->n : d->count;
  size_t out_bytes = d->coll == GCOLL_COLL_ALLGATHER ? bytes * (size_t)w->n
                     : d->coll == GCOLL_COLL_REDUCESCATTER ? bytes : bytes;
  struct rank_bufs *b = &g_bufs[r];
  fill(b->input, in_elems, d->dtype, d->op);
  memset(b->b, CANARY, bytes * (size_t)w->n);
  const void *send = b->a;
  void *recv = b->b;
  if (!d->in_place) {
    memcpy(b->a, b->input, in_elems * es);
  } else if (d->coll == GCOLL_COLL_ALLGATHER) {
    memcpy(b->b + (size_t)r * bytes, b->input, bytes);
    send = b->b + (size_t)r * bytes;
  } else if (d->coll == GCOLL_COLL_REDUCESCATTER) {
    memcpy(b->b, b->input, in_elems * es);
    send = b->b;
    recv = b->b + (size_t)r * bytes;
  } else {
    memcpy(b->b, b->input, bytes);
    send = b->b;
  }
  (void)out_bytes;
  call->w = w;
  call->rank = r;
  call->coll = (struct gcoll_host_coll){.coll = d->coll, .sendbuf = send, .recvbuf = recv,
                                        .count = d->count, .dtype = d->dtype, .op = d->op,
                                        .root = d->root, .algo = d->algo, .proto = d->proto,
                                        .nchannels = d->nch};
}

static void check_rank(struct world *w, const struct case_desc *d, int r,
                       const struct rank_call *call, const char *what) {
  size_t es = gcoll_dtype_size(d->dtype), bytes = d->count * es;
  const void *in[MAX_RANKS];
  const unsigned char *got = call->coll.recvbuf;
  for (int k = 0; k < w->n; k++) in[k] = g_bufs[k].input;
  switch (d->coll) {
    case GCOLL_COLL_ALLREDUCE:
      expect_reduced(got, g_ref, in, w->n, d->count, d->dtype, d->op, what);
      break;
    case GCOLL_COLL_REDUCE:
      if (r == d->root) {
        expect_reduced(got, g_ref, in, w->n, d->count, d->dtype, d->op, what);
      } else if (d->in_place) {
        if (memcmp(got, g_bufs[r].input, bytes) != 0) fail_msg("%s: non-root input changed", what);
      } else {
        for (size_t i = 0; i < bytes; i++)
          if (got[i] != CANARY) fail_msg("%s: non-root recvbuf written at byte %zu", what, i);
      }
      break;
    case GCOLL_COLL_BROADCAST:
      if (memcmp(got, g_bufs[d->root].input, bytes) != 0)
        fail_msg("%s: rank %d differs from the root's data", what, r);
      break;
    case GCOLL_COLL_ALLGATHER:
      for (int k = 0; k < w->n; k++)
        if (memcmp(got + (size_t)k * bytes, g_bufs[k].input, bytes) != 0)
          fail_msg("%s: block of rank %d differs", what, k);
      break;
    default: {
      const void *blocks[MAX_RANKS];
      for (int k = 0; k < w->n; k++) blocks[k] = g_bufs[k].input + (size_t)r * bytes;
      gcoll_reduce_reference(g_ref, blocks, w->n, d->count, d->dtype, d->op);
      expect_reduced(got, g_ref, blocks, w->n, d->count, d->dtype, d->op, what);
    }
  }
  /* Nothing past the output may be written (out-of-place allreduce etc.). */
  if (!d->in_place && d->coll != GCOLL_COLL_ALLGATHER && (d->coll != GCOLL_COLL_REDUCE || r == d->root)) {
    for (size_t i = bytes; i < bytes + 64 && i < bytes * (size_t)w->n; i++)
      if (got[i] != CANARY) fail_msg("%s: recvbuf written past its end", what);
  }
}

static void run_case(struct world *w, const struct case_desc *d) {
  struct rank_call calls[MAX_RANKS];
  char what[200];
  snprintf(what, sizeof(what), "%s/%s %s %s %s count=%zu n=%d ch=%d/%d root=%d %s",
           coll_name(d->coll), d->algo == GCOLL_ALGO_TREE ? "tree" : "ring",
           gcoll_dtype_name(d->dtype), gcoll_redop_name(d->op),
           d->proto == GCOLL_PROTO_LL ? "LL" : "SIMPLE", d->count, w->n, d->nch, w->nch,
           d->root, d->in_place ? "in-place" : "out-of-place");
  for (int r = 0; r < w->n; r++) prepare_rank(w, d, r, &calls[r]);
  if (d->coll == GCOLL_COLL_ALLREDUCE || d->coll == GCOLL_COLL_REDUCE) {
    const void *in[MAX_RANKS];
    for (int k = 0; k < w->n; k++) in[k] = g_bufs[k].input;
    gcoll_reduce_reference(g_ref, in, w->n, d->count, d->dtype, d->op);
  }
  run_ranks(calls, w->n, 0);
  for (int r = 0; r < w->n; r++)
    if (calls[r].result != gcollSuccess)
      fail_msg("%s: rank %d returned %d: %s", what, r, calls[r].result, calls[r].err);
  for (int r = 0; r < w->n; r++) check_rank(w, d, r, &calls[r], what);
}

/* ---- the worlds of the matrix ------------------------------------------ */

static struct world *g_worlds[6][3];

static struct world *world_for(int ni, int ci) {
  if (g_worlds[ni][ci] == NULL) {
    /* Small slots give many steps per call; the larger one covers LL slots
     * bigger than a typical message. */
    size_t slot = (ni + ci) % 2 ? 512 : 4096;
    g_worlds[ni][ci] = world_new(k_nranks[ni], k_nch[ci], slot, 20ull * 1000000000ull);
  }
  return g_worlds[ni][ci];
}

static int setup_all(void **state) {
  (void)state;
  size_t max_bytes = (size_t)MAX_COUNT * 8 * MAX_RANKS;
  for (int r = 0; r < MAX_RANKS; r++) {
    g_bufs[r].input = malloc(max_bytes);
    g_bufs[r].a = malloc(max_bytes);
    g_bufs[r].b = malloc(max_bytes + 64);
    if (!g_bufs[r].input || !g_bufs[r].a || !g_bufs[r].b) return -1;
  }
  g_ref = malloc(max_bytes);
  return g_ref ? 0 : -1;
}

static int teardown_all(void **state) {
  (void)state;
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 3; j++)
      if (g_worlds[i][j]) world_free(g_worlds[i][j]);
  for (int r = 0; r < MAX_RANKS; r++) {
    free(g_bufs[r].input);
    free(g_bufs[r].a);
    free(g_bufs[r].b);
  }
  free(g_ref);
  return 0;
}

/* Every (collective/algorithm, type, op, protocol) twice, with random ranks,
 * channels, count, root and in-place choice from a fixed seed; the biggest
 * count is drawn less often to keep the run short. */
static void test_matrix(void **state) {
  (void)state;
  static const struct { enum gcoll_coll coll; enum gcoll_algo algo; } k_colls[] = {
      {GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING}, {GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE},
      {GCOLL_COLL_BROADCAST, GCOLL_ALGO_RING}, {GCOLL_COLL_REDUCE, GCOLL_ALGO_RING},
      {GCOLL_COLL_ALLGATHER, GCOLL_ALGO_RING}, {GCOLL_COLL_REDUCESCATTER, GCOLL_ALGO_RING}};
  const int ncolls = (int)(sizeof(k_colls) / sizeof(k_colls[0]));
  const int ntypes = (int)(sizeof(k_types) / sizeof(k_types[0]));
  const int nops = (int)(sizeof(k_ops) / sizeof(k_ops[0]));
  int seen_counts[6] = {0}, seen_n[6] = {0}, seen_in_place = 0;
  for (int i = 0; i < 2 * ncolls * ntypes * nops * 2; i++) {
    int proto = i % 2, oi = i / 2 % nops, ti = i / 2 / nops % ntypes;
    int ci = i / 2 / nops / ntypes % ncolls;
    int ni = rand_below(6), chi = rand_below(3);
    int cnt = rand_below(8);
    cnt = cnt >= 6 ? rand_below(5) : (cnt == 5 && rand_below(3) ? 3 : cnt);
    struct world *w = world_for(ni, chi);
    struct case_desc d = {.coll = k_colls[ci].coll, .algo = k_colls[ci].algo,
                          .dtype = k_types[ti], .op = k_ops[oi],
                          .proto = (enum gcoll_proto)proto, .count = k_counts[cnt],
                          .nch = rand_below(2) ? 0 : 1 + rand_below(w->nch),
                          .root = rand_below(w->n), .in_place = rand_below(2)};
    seen_counts[cnt]++;
    seen_n[ni]++;
    seen_in_place += d.in_place;
    run_case(w, &d);
  }
  for (int i = 0; i < 6; i++) {
    assert_true(seen_counts[i] > 0);
    assert_true(seen_n[i] > 0);
  }
  assert_true(seen_in_place > 0);
}

/* All counts on every world for the two allreduce algorithms and both
 * protocols: the partition, chunking and step edge cases of each shape. */
static void test_allreduce_shapes(void **state) {
  (void)state;
  for (int ni = 0; ni < 6; ni++)
    for (int chi = 0; chi < 3; chi++)
      for (int cnt = 0; cnt < 5; cnt++) {
        struct world *w = world_for(ni, chi);
        struct case_desc d = {.coll = GCOLL_COLL_ALLREDUCE,
                              .algo = (ni + chi + cnt) % 2 ? GCOLL_ALGO_TREE : GCOLL_ALGO_RING,
                              .dtype = cnt % 2 ? gcollFloat : gcollInt32, .op = gcollSum,
                              .proto = (enum gcoll_proto)((ni + cnt) % 2), .count = k_counts[cnt],
                              .nch = 0, .root = 0, .in_place = cnt % 3 == 0};
        run_case(w, &d);
      }
}

/* ---- failures ----------------------------------------------------------- */

/* One rank never joins: the others must give up at the deadline with
 * gcollSystemError and say so, not hang. */
static void test_deadline(void **state) {
  (void)state;
  for (int proto = 0; proto < 2; proto++)
    for (int algo = 0; algo < 2; algo++) {
      const double timeout = 0.3;
      struct world *w = world_new(3, 2, 1024, (uint64_t)(timeout * 1e9));
      struct case_desc d = {.coll = GCOLL_COLL_ALLREDUCE, .algo = (enum gcoll_algo)algo,
                            .dtype = gcollFloat, .op = gcollSum,
                            .proto = (enum gcoll_proto)proto, .count = 4097, .nch = 0};
      struct rank_call calls[MAX_RANKS];
      for (int r = 0; r < w->n; r++) prepare_rank(w, &d, r, &calls[r]);
      run_ranks(calls, w->n, 1u << 2);
      for (int r = 0; r < 2; r++) {
        assert_int_equal(calls[r].result, gcollSystemError);
        assert_non_null(strstr(calls[r].err, "deadline"));
        assert_true(calls[r].seconds >= timeout * 0.9);
        assert_true(calls[r].seconds < timeout + 2.0);
      }
      world_free(w);
    }
}

struct aborter {
  _Atomic int *word;
  int value;
};

static void *abort_later(void *arg) {
  struct aborter *a = arg;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_store(a->word, a->value);
  return NULL;
}

/* Setting the abort word from another thread unblocks waiting ranks with
 * that value, long before the deadline. */
static void test_abort(void **state) {
  (void)state;
  for (int proto = 0; proto < 2; proto++) {
    struct world *w = world_new(2, 1, 256, 60ull * 1000000000ull);
    struct case_desc d = {.coll = GCOLL_COLL_BROADCAST, .algo = GCOLL_ALGO_RING,
                          .dtype = gcollInt8, .op = gcollSum,
                          .proto = (enum gcoll_proto)proto, .count = 100000, .root = 0};
    struct rank_call calls[MAX_RANKS];
    for (int r = 0; r < w->n; r++) prepare_rank(w, &d, r, &calls[r]);
    struct aborter a = {.word = &w->abort_word, .value = gcollRemoteError};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, abort_later, &a), 0);
    run_ranks(calls, w->n, 1u << (proto ? 0 : 1)); /* waiting receiver, then sender */
    pthread_join(t, NULL);
    int r = proto ? 1 : 0;
    assert_int_equal(calls[r].result, gcollRemoteError);
    assert_non_null(strstr(calls[r].err, "aborted"));
    assert_true(calls[r].seconds < 5.0);
    world_free(w);
  }
}

/* ---- small units -------------------------------------------------------- */

static void test_fifo_layout(void **state) {
  (void)state;
  assert_int_equal(gcoll_fifo_bytes(0), 0);
  assert_int_equal(gcoll_fifo_bytes(100), 0);
  assert_int_equal(gcoll_fifo_bytes(GCOLL_FIFO_MAX_SLOT + 64), 0);
  for (size_t slot = 64; slot <= 65536; slot *= 4) {
    size_t bytes = gcoll_fifo_bytes(slot);
    void *mem = NULL;
    assert_int_equal(posix_memalign(&mem, 64, bytes), 0);
    assert_null(gcoll_fifo_init((char *)mem + 8, slot));
    struct gcoll_fifo *f = gcoll_fifo_init(mem, slot);
    assert_non_null(f);
    assert_int_equal(gcoll_fifo_payload(f, GCOLL_PROTO_SIMPLE), slot);
    assert_int_equal(gcoll_fifo_payload(f, GCOLL_PROTO_LL), slot / 4);
    for (uint64_t s = 0; s < 2 * GCOLL_STEPS; s++) {
      char *a = gcoll_fifo_simple_slot(f, s);
      char *l = (char *)gcoll_fifo_ll_slot(f, s);
      assert_true((uintptr_t)a % 64 == 0 && (uintptr_t)l % 16 == 0);
      assert_true(a >= (char *)mem + sizeof(*f) && a + slot <= (char *)mem + bytes);
      assert_true(l >= (char *)mem + sizeof(*f) && l + f->ll_slot_bytes <= (char *)mem + bytes);
      assert_true(l >= a + slot || l + f->ll_slot_bytes <= a); /* regions apart */
      uint64_t line = gcoll_ll_line(0xdeadbeef, s);
      assert_true(gcoll_ll_line_ready(line, s));
      assert_false(gcoll_ll_line_ready(line, s + GCOLL_STEPS));
      assert_false(gcoll_ll_line_ready(0, s));
    }
    free(mem);
  }
}

/* The wait rule itself: the deadline and both abort words stop it. */
static void test_wait_rule(void **state) {
  (void)state;
  _Atomic int word, local;
  atomic_init(&word, 0);
  atomic_init(&local, 0);
  _Atomic uint64_t ctr;
  atomic_init(&ctr, 5);
  struct gcoll_wait w;
  /* The deadline counts from the first round that reads the clock, after
   * gcoll_wait_init, so the time is taken before it: taken after, a thread
   * descheduled in between (a loaded machine, a slow ASan build) saw less
   * than the timeout and failed a correct wait. */
  double t0 = now_s();
  gcoll_wait_init(&w, &word, &local, 50 * 1000 * 1000);
  assert_int_equal(gcoll_wait_counter(&w, &ctr, 5, NULL), gcollSuccess);
  assert_int_equal(gcoll_wait_counter(&w, &ctr, 6, NULL), gcollSystemError);
  assert_int_equal(w.reason, GCOLL_WAIT_DEADLINE);
  double waited = now_s() - t0;
  assert_true(gcoll_wait_now_ns() >= w.deadline_ns);   /* never before the deadline */
  assert_true(waited >= 0.0499 && waited < 1.0);
  gcoll_wait_init(&w, &word, &local, 60ull * 1000000000ull);
  atomic_store(&local, gcollInternalError);
  assert_int_equal(gcoll_wait_counter(&w, &ctr, 6, NULL), gcollInternalError);
  assert_int_equal(w.reason, GCOLL_WAIT_ABORTED);
  atomic_store(&word, gcollRemoteError);
  assert_int_equal(gcoll_wait_counter(&w, &ctr, 6, NULL), gcollRemoteError);
}

/* Bad arguments come back as errors with nothing moved: the same world
 * still runs a correct collective afterwards. */
static void test_invalid_args(void **state) {
  (void)state;
  struct world *w = world_new(2, 1, 256, 5ull * 1000000000ull);
  struct gcoll_host_coll c = {.coll = GCOLL_COLL_ALLREDUCE, .sendbuf = g_bufs[0].a,
                              .recvbuf = g_bufs[0].b, .count = 16, .dtype = gcollFloat,
                              .op = gcollSum};
  char err[256];
  struct gcoll_host_coll bad = c;
  bad.dtype = (gcollDataType_t)42;
  assert_int_equal(gcoll_host_exec_run(w->exec[0], &bad, err, sizeof(err)), gcollInvalidArgument);
  bad = c;
  bad.op = (gcollRedOp_t)9;
  assert_int_equal(gcoll_host_exec_run(w->exec[0], &bad, err, sizeof(err)), gcollInvalidArgument);
  bad = c;
  bad.coll = GCOLL_COLL_BROADCAST;
  bad.root = 2;
  assert_int_equal(gcoll_host_exec_run(w->exec[0], &bad, err, sizeof(err)), gcollInvalidArgument);
  bad = c;
  bad.recvbuf = g_bufs[0].a + 4; /* partial overlap */
  assert_int_equal(gcoll_host_exec_run(w->exec[0], &bad, err, sizeof(err)), gcollInvalidArgument);
  bad = c;
  bad.count = SIZE_MAX / 2;
  assert_int_equal(gcoll_host_exec_run(w->exec[0], &bad, err, sizeof(err)), gcollInvalidArgument);
  bad = c;
  bad.algo = GCOLL_ALGO_TREE;
  bad.coll = GCOLL_COLL_ALLGATHER;
  assert_int_equal(gcoll_host_exec_run(w->exec[0], &bad, err, sizeof(err)), gcollInvalidUsage);
  bad = c;
  bad.nchannels = 2;
  assert_int_equal(gcoll_host_exec_run(w->exec[0], &bad, err, sizeof(err)), gcollInvalidArgument);
  bad = c;
  bad.sendbuf = NULL;
  assert_int_equal(gcoll_host_exec_run(w->exec[0], &bad, err, sizeof(err)), gcollInvalidArgument);
  struct case_desc d = {.coll = GCOLL_COLL_ALLREDUCE, .dtype = gcollDouble, .op = gcollMax,
                        .count = 1023};
  run_case(w, &d);

  /* A ring that does not hold the rank at its position is refused. */
  int ranks[2] = {1, 0};
  struct gcoll_host_channel ch = {.ring = {.ranks = ranks, .pos = 0}};
  struct gcoll_exec_config cfg = {.rank = 0, .nranks = 2, .nchannels = 1, .channels = &ch,
                                  .timeout_ns = 1};
  assert_null(gcoll_host_exec_create(&cfg, err, sizeof(err)));
  assert_non_null(strstr(err, "ring position"));
  world_free(w);
}

/* The back-off phases (wait.h): with GCOLL_WAIT_SHARED_SPINS a wait
 * yields from its second round, and sleeps only once GCOLL_WAIT_YIELD_NS
 * has passed since its first yield; a new wait starts over. */
static void test_wait_phases(void **state) {
  (void)state;
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, 60ull * 1000000000ull);
  w.spins = GCOLL_WAIT_SHARED_SPINS;
  for (int pass = 0; pass < 2; pass++) {
    gcoll_wait_begin(&w);
    assert_int_equal(gcoll_wait_round(&w), gcollSuccess);  /* the pause */
    assert_int_equal(w.yield_end_ns, 0);
    uint64_t t0 = gcoll_wait_now_ns();
    while (w.sleeps == 0) assert_int_equal(gcoll_wait_round(&w), gcollSuccess);
    assert_true(gcoll_wait_now_ns() - t0 >= GCOLL_WAIT_YIELD_NS);
    assert_int_equal(gcoll_wait_round(&w), gcollSuccess);  /* a sleep */
    assert_int_equal(w.sleeps, 2);
  }
}

/* The gather form (host_exec.h) against the ring on the same FIFOs, calls
 * alternating between the two executors (FIFO positions must carry over):
 * every type, op and protocol, counts around the limit (one step), in and
 * out of place; results checked and bitwise equal to the ring's. */
static void test_gather_form(void **state) {
  (void)state;
  static unsigned char saved[MAX_RANKS][4096 + 64];
  const int ntypes = (int)(sizeof(k_types) / sizeof(k_types[0]));
  const int nops = (int)(sizeof(k_ops) / sizeof(k_ops[0]));
  for (int ni = 1; ni < 6; ni++) {
    struct world *w = world_new(k_nranks[ni], 1, 4096, 20ull * 1000000000ull);
    for (int proto = 0; proto < 2; proto++)
      for (int ti = 0; ti < ntypes; ti++)
        for (int oi = 0; oi < nops; oi++) {
          size_t es = gcoll_dtype_size(k_types[ti]);
          size_t limit = (proto == GCOLL_PROTO_LL ? w->slot / 4 : w->slot) / es;
          const size_t counts[] = {0, 1, 7, limit - 1, limit, limit + 1};
          for (int ci = 0; ci < 6; ci++) {
            struct case_desc d = {.coll = GCOLL_COLL_ALLREDUCE, .algo = GCOLL_ALGO_RING,
                                  .dtype = k_types[ti], .op = k_ops[oi],
                                  .proto = (enum gcoll_proto)proto, .count = counts[ci],
                                  .in_place = (ti + oi + ci) % 2};
            char what[160];
            snprintf(what, sizeof(what), "gather form %s %s %s count=%zu n=%d",
                     gcoll_dtype_name(d.dtype), gcoll_redop_name(d.op),
                     proto ? "LL" : "SIMPLE", d.count, w->n);
            size_t bytes = d.count * es;
            assert_true(bytes <= 4096 + 64);
            unsigned long long seed = g_seed;
            struct rank_call calls[MAX_RANKS];
            for (int r = 0; r < w->n; r++) prepare_rank(w, &d, r, &calls[r]);
            run_ranks(calls, w->n, 0);
            for (int r = 0; r < w->n; r++) {
              if (calls[r].result != gcollSuccess) fail_msg("%s: ring: %s", what, calls[r].err);
              memcpy(saved[r], calls[r].coll.recvbuf, bytes);
            }
            /* The same inputs through the gather executor. */
            g_seed = seed;
            const void *in[MAX_RANKS];
            for (int r = 0; r < w->n; r++) prepare_rank(w, &d, r, &calls[r]);
            for (int k = 0; k < w->n; k++) in[k] = g_bufs[k].input;
            gcoll_reduce_reference(g_ref, in, w->n, d.count, d.dtype, d.op);
            struct gcoll_host_exec *ring_exec[MAX_RANKS];
            memcpy(ring_exec, w->exec, sizeof(ring_exec));
            memcpy(w->exec, w->gather_exec, sizeof(ring_exec));
            run_ranks(calls, w->n, 0);
            memcpy(w->exec, ring_exec, sizeof(ring_exec));
            for (int r = 0; r < w->n; r++) {
              if (calls[r].result != gcollSuccess) fail_msg("%s: gather: %s", what, calls[r].err);
              check_rank(w, &d, r, &calls[r], what);
              if (memcmp(saved[r], calls[r].coll.recvbuf, bytes) != 0)
                fail_msg("%s: rank %d: not the ring's bits", what, r);
            }
          }
        }
    world_free(w);
  }
}

/* ---- the direct form (host_direct.h) ------------------------------------ */

static int total_reads(int n) {
  int t = 0;
  for (int r = 0; r < n; r++) t += g_fake[r].reads;
  return t;
}

/* Runs d on the direct executors of w. */
static void run_direct_case(struct world *w, const struct case_desc *d) {
  struct gcoll_host_exec *ring_exec[MAX_RANKS];
  memcpy(ring_exec, w->exec, sizeof(ring_exec));
  memcpy(w->exec, w->direct_exec, sizeof(ring_exec));
  run_case(w, d);
  memcpy(w->exec, ring_exec, sizeof(ring_exec));
}

/* Allgather and broadcast through the direct form give the ring's data on
 * every rank, roots rotating, in and out of place, odd sizes, 1 and 2
 * channels; the first call of each executor probes and takes the ring,
 * the others read their peers. */
static void test_direct_form(void **state) {
  (void)state;
  static const gcollDataType_t types[] = {gcollInt8, gcollHalf, gcollFloat, gcollDouble};
  static const size_t counts[] = {1, 7, 1023, 4097};
  for (int ni = 1; ni < 6; ni++)
    for (int ci = 0; ci < 2; ci++) {
      reset_fakes();
      struct world *w = world_new(k_nranks[ni], k_nch[ci], 4096, 20ull * 1000000000ull);
      int calls = 0;
      for (int coll = 0; coll < 2; coll++)
        for (int ti = 0; ti < 4; ti++)
          for (int k = 0; k < 4; k++, calls++) {
            struct case_desc d = {
                .coll = coll ? GCOLL_COLL_BROADCAST : GCOLL_COLL_ALLGATHER,
                .algo = GCOLL_ALGO_RING, .dtype = types[ti], .op = gcollSum,
                .proto = GCOLL_PROTO_SIMPLE, .count = counts[k], .nch = k_nch[ci],
                .root = calls % w->n, .in_place = (ti + k) % 2};
            run_direct_case(w, &d);
          }
      /* Every call but the first read: an allgather n-1 blocks per rank,
       * a broadcast one per non-root. */
      int expect = 15 * w->n * (w->n - 1) + 16 * (w->n - 1);
      if (total_reads(w->n) != expect)
        fail_msg("n=%d ch=%d: %d reads, expected %d", w->n, w->nch, total_reads(w->n), expect);
      world_free(w);
    }
}

/* A rank that cannot read its peers turns the form off on every rank, and
 * buffers in small pages make every rank take the ring for that call. */
static void test_direct_fallbacks(void **state) {
  (void)state;
  struct case_desc d = {.coll = GCOLL_COLL_BROADCAST, .algo = GCOLL_ALGO_RING,
                        .dtype = gcollFloat, .op = gcollSum, .proto = GCOLL_PROTO_SIMPLE,
                        .count = 1000, .nch = 1};
  reset_fakes();
  g_fake[1].refuse = 1;
  struct world *w = world_new(3, 1, 4096, 20ull * 1000000000ull);
  for (int i = 0; i < 6; i++) {
    d.root = i % 3;
    run_direct_case(w, &d);
  }
  assert_int_equal(total_reads(3), 0);
  for (int r = 0; r < 3; r++) assert_int_equal(g_fake[r].probes, 2); /* once, each peer */
  world_free(w);

  /* Rank 2's buffers are in small pages: allgathers (which read them) and
   * broadcasts from rank 2 take the ring, broadcasts from 0 read. */
  reset_fakes();
  g_fake[2].cheap = 0;
  w = world_new(3, 1, 4096, 20ull * 1000000000ull);
  d.root = 0;
  run_direct_case(w, &d); /* probes */
  d.coll = GCOLL_COLL_ALLGATHER;
  for (int i = 0; i < 8; i++) run_direct_case(w, &d);
  assert_int_equal(total_reads(3), 0);
  d.coll = GCOLL_COLL_BROADCAST;
  d.root = 2;
  run_direct_case(w, &d);
  assert_int_equal(total_reads(3), 0);
  /* Each miss doubles the candidate calls the form then skips: the
   * allgathers exchanged descriptors on calls 1 and 4 (skipping 2, then
   * 4), the broadcast from 2 was the third miss, so the next 8 calls take
   * the ring without asking, the 9th reads, and a hit ends the back-off. */
  d.root = 0;
  for (int i = 0; i < 8; i++) run_direct_case(w, &d);
  assert_int_equal(total_reads(3), 0);
  run_direct_case(w, &d);
  assert_int_equal(total_reads(3), 2);
  run_direct_case(w, &d);
  assert_int_equal(total_reads(3), 4);
  world_free(w);
}

/* The root asks whether its buffer is in huge pages once, then takes the
 * answer for GCOLL_DIRECT_CHEAP_REUSES calls on that buffer or inside it,
 * then asks again (host_direct.h); an answer of small pages is not
 * remembered. So pages that changed cost a bounded run of slower reads. */
static void test_direct_cheap_remembered(void **state) {
  (void)state;
  reset_fakes();
  struct world *w = world_new(2, 1, 4096, 20ull * 1000000000ull);
  struct case_desc d = {.coll = GCOLL_COLL_BROADCAST, .algo = GCOLL_ALGO_RING,
                        .dtype = gcollFloat, .op = gcollSum, .proto = GCOLL_PROTO_SIMPLE,
                        .count = 1000, .nch = 1};
  run_direct_case(w, &d); /* probes, and asks */
  assert_int_equal(g_fake[0].cheap_asks, 1);
  assert_int_equal(total_reads(2), 0);
  d.count = 500; /* inside the range asked about */
  run_direct_case(w, &d);
  d.count = 1000;
  for (int i = 1; i < GCOLL_DIRECT_CHEAP_REUSES; i++) run_direct_case(w, &d);
  assert_int_equal(g_fake[0].cheap_asks, 1);
  assert_int_equal(g_fake[1].cheap_asks, 0); /* a broadcast's reader is not read */
  assert_int_equal(total_reads(2), GCOLL_DIRECT_CHEAP_REUSES);
  run_direct_case(w, &d);
  assert_int_equal(g_fake[0].cheap_asks, 2);
  /* Now in small pages: read as remembered, at most the reuses, then the
   * ring. */
  g_fake[0].cheap = 0;
  for (int i = 0; i < GCOLL_DIRECT_CHEAP_REUSES; i++) run_direct_case(w, &d);
  assert_int_equal(g_fake[0].cheap_asks, 2);
  assert_int_equal(total_reads(2), 2 * GCOLL_DIRECT_CHEAP_REUSES + 1);
  run_direct_case(w, &d);
  assert_int_equal(g_fake[0].cheap_asks, 3);
  assert_int_equal(total_reads(2), 2 * GCOLL_DIRECT_CHEAP_REUSES + 1);
  /* Not remembered: the next candidate after the back-off asks again. */
  for (int i = 0; i < 3; i++) run_direct_case(w, &d);
  assert_int_equal(g_fake[0].cheap_asks, 4);
  assert_int_equal(total_reads(2), 2 * GCOLL_DIRECT_CHEAP_REUSES + 1);
  world_free(w);
}

/* Allreduce through the direct form (the ring's reduce-scatter half, then
 * reads of the peers' reduced blocks) against the ring on the same FIFOs:
 * every type and op, odd counts, in and out of place, results checked
 * against the serial reference and bitwise equal to the ring's. Calls
 * on one channel take it (with no cache size set, 3 ranks too: which
 * groups do is test_direct_cache_rules'); small slots make the largest
 * count read its blocks in several batches of ranges. */
static void test_direct_allreduce(void **state) {
  (void)state;
  static const size_t counts[] = {1, 7, 1023, 4097, MAX_COUNT};
  const int ntypes = (int)(sizeof(k_types) / sizeof(k_types[0]));
  const int nops = (int)(sizeof(k_ops) / sizeof(k_ops[0]));
  const size_t max_bytes = (size_t)MAX_COUNT * 8;
  for (int n = 2; n <= 3; n++)
    for (int nch = 1; nch <= 2; nch++) {
      reset_fakes();
      struct world *w = world_new(n, nch, 512, 20ull * 1000000000ull);
      int taken = nch == 1, first = 1;
      for (int ti = 0; ti < ntypes; ti++)
        for (int oi = 0; oi < nops; oi++)
          for (int ci = 0; ci < 5; ci++) {
            struct case_desc d = {.coll = GCOLL_COLL_ALLREDUCE, .algo = GCOLL_ALGO_RING,
                                  .dtype = k_types[ti], .op = k_ops[oi],
                                  .proto = GCOLL_PROTO_SIMPLE, .count = counts[ci], .nch = nch,
                                  .in_place = (ti + oi + ci) % 2};
            char what[160];
            snprintf(what, sizeof(what), "direct allreduce %s %s count=%zu n=%d ch=%d %s",
                     gcoll_dtype_name(d.dtype), gcoll_redop_name(d.op), d.count, n, nch,
                     d.in_place ? "in place" : "out of place");
            size_t bytes = d.count * gcoll_dtype_size(d.dtype);
            unsigned char *saved[MAX_RANKS];
            unsigned long long seed = g_seed;
            struct rank_call calls[MAX_RANKS];
            for (int r = 0; r < n; r++) prepare_rank(w, &d, r, &calls[r]);
            run_ranks(calls, n, 0);
            for (int r = 0; r < n; r++) {
              if (calls[r].result != gcollSuccess) fail_msg("%s: ring: %s", what, calls[r].err);
              saved[r] = malloc(max_bytes);
              assert_non_null(saved[r]);
              memcpy(saved[r], calls[r].coll.recvbuf, bytes);
            }
            g_seed = seed; /* the same inputs */
            int reads_before = total_reads(n);
            const void *in[MAX_RANKS];
            for (int r = 0; r < n; r++) prepare_rank(w, &d, r, &calls[r]);
            for (int r = 0; r < n; r++) in[r] = g_bufs[r].input;
            gcoll_reduce_reference(g_ref, in, n, d.count, d.dtype, d.op);
            struct gcoll_host_exec *ring_exec[MAX_RANKS];
            memcpy(ring_exec, w->exec, sizeof(ring_exec));
            memcpy(w->exec, w->direct_exec, sizeof(ring_exec));
            run_ranks(calls, n, 0);
            memcpy(w->exec, ring_exec, sizeof(ring_exec));
            for (int r = 0; r < n; r++) {
              if (calls[r].result != gcollSuccess) fail_msg("%s: direct: %s", what, calls[r].err);
              check_rank(w, &d, r, &calls[r], what);
              if (memcmp(saved[r], calls[r].coll.recvbuf, bytes) != 0)
                fail_msg("%s: rank %d: not the ring's bits", what, r);
              free(saved[r]);
            }
            /* The first candidate probes and takes the ring; then each
             * rank reads its peer's blocks. */
            int read_now = total_reads(n) > reads_before;
            int candidate = taken && bytes >= GCOLL_DIRECT_ALLREDUCE_FACTOR; /* x min_bytes */
            if (read_now != (candidate && !first))
              fail_msg("%s: %s", what, read_now ? "read its peers" : "did not read its peers");
            if (candidate) first = 0;
          }
      if (taken) {
        int most = 0;
        for (int r = 0; r < n; r++)
          if (g_fake[r].most_ranges > most) most = g_fake[r].most_ranges;
        assert_int_equal(most, GCOLL_PEER_RANGES_MAX);
      }
      world_free(w);
    }
}

/* Where the ring is the faster (host_direct.h), with a cache size set:
 * allgathers direct where they fit, allreduces only between 2 ranks that
 * fit, broadcasts between 2 ranks always, among 3 only within the cache. */
static void test_direct_cache_rules(void **state) {
  (void)state;
  for (int n = 2; n <= 3; n++) {
    reset_fakes();
    g_cache_bytes = 4000;
    struct world *w = world_new(n, 1, 4096, 20ull * 1000000000ull);
    g_cache_bytes = 0;
    int pair = n == 2, reads = 0;
    struct case_desc d = {.coll = GCOLL_COLL_BROADCAST, .algo = GCOLL_ALGO_RING,
                          .dtype = gcollInt32, .op = gcollSum, .proto = GCOLL_PROTO_SIMPLE,
                          .count = 1000, .nch = 1}; /* 4000 bytes: fits */
    for (int i = 0; i < 4; i++) {
      d.root = i % n;
      d.in_place = i / 2;
      if (i == 0) run_direct_case(w, &d); /* probes: the first direct candidate */
      run_direct_case(w, &d);
      reads += n - 1;
      assert_int_equal(total_reads(n), reads);
    }
    d.count = 1001; /* past the cache */
    run_direct_case(w, &d);
    reads += pair ? 1 : 0;
    assert_int_equal(total_reads(n), reads);
    d.coll = GCOLL_COLL_ALLGATHER;
    d.count = 4000 / (4 * (size_t)n); /* output fits */
    run_direct_case(w, &d);
    reads += n * (n - 1);
    assert_int_equal(total_reads(n), reads);
    d.count = 4000 / (4 * (size_t)n) + 1;
    run_direct_case(w, &d);
    assert_int_equal(total_reads(n), reads);
    /* An allreduce as its allgather half: pairs whose vector fits. */
    d.coll = GCOLL_COLL_ALLREDUCE;
    d.count = 1000;
    run_direct_case(w, &d);
    reads += pair ? 2 : 0;
    assert_int_equal(total_reads(n), reads);
    d.count = 1001;
    run_direct_case(w, &d);
    assert_int_equal(total_reads(n), reads);
    world_free(w);
  }
}

/* Where min_bytes starts each form: broadcasts at it, allgathers among
 * n > 2 ranks at n / 2 times it (each read half of it, as a pair's),
 * 2-rank allreduces at GCOLL_DIRECT_ALLREDUCE_FACTOR times it. */
static void test_direct_thresholds(void **state) {
  (void)state;
  for (int n = 2; n <= 4; n++) {
    reset_fakes();
    g_min_bytes = 1000;
    struct world *w = world_new(n, 1, 4096, 20ull * 1000000000ull);
    g_min_bytes = 0;
    struct case_desc d = {.coll = GCOLL_COLL_BROADCAST, .algo = GCOLL_ALGO_RING,
                          .dtype = gcollInt8, .op = gcollSum, .proto = GCOLL_PROTO_SIMPLE,
                          .count = 1000, .nch = 1};
    run_direct_case(w, &d); /* probes */
    int reads = 0;
    d.count = 999;
    run_direct_case(w, &d);
    assert_int_equal(total_reads(n), reads);
    d.count = 1000;
    run_direct_case(w, &d);
    reads += n - 1;
    assert_int_equal(total_reads(n), reads);
    d.coll = GCOLL_COLL_ALLGATHER;
    size_t need = n > 2 ? 1000 * (size_t)n / 2 : 1000; /* output bytes */
    d.count = (need + (size_t)n - 1) / (size_t)n - 1;
    run_direct_case(w, &d);
    assert_int_equal(total_reads(n), reads);
    d.count++;
    run_direct_case(w, &d);
    reads += n * (n - 1);
    assert_int_equal(total_reads(n), reads);
    d.coll = GCOLL_COLL_ALLREDUCE;
    d.count = GCOLL_DIRECT_ALLREDUCE_FACTOR * 1000 - 1;
    run_direct_case(w, &d);
    assert_int_equal(total_reads(n), reads);
    d.count++;
    run_direct_case(w, &d);
    reads += n * (n - 1); /* no cache size set: 3 and 4 ranks too */
    assert_int_equal(total_reads(n), reads);
    world_free(w);
  }
}

/* Tuning (host_direct.h): a class's first calls alternate the direct
 * form and the ring, then every rank keeps the form whose slowest rank
 * was the faster, and a class kept for the ring exchanges no descriptors
 * any more. Allgathers, where every rank reads (fake_clock charges
 * read_ns a read): with reads cheap everywhere the direct form wins; with
 * one rank's dear, the ring wins on every rank alike (a rank that went
 * its own way would leave the others waiting: the 20 s deadline fails the
 * test). Another size class, and in place, tune anew. */
static void test_direct_tuning(void **state) {
  (void)state;
  const int schedule = 2 * (GCOLL_DIRECT_TUNE_SAMPLES + 1), after = 4;
  for (int n = 2; n <= 4; n++) {
    for (int dear = -1; dear <= 0; dear++) {
      reset_fakes();
      for (int r = 0; r < n; r++) g_fake[r].read_ns = r == dear ? 3000 : -100;
      g_tune = 1;
      struct world *w = world_new(n, 1, 4096, 20ull * 1000000000ull);
      g_tune = 0;
      const int direct_wins = dear < 0, per_call = n * (n - 1);
      struct case_desc d = {.coll = GCOLL_COLL_ALLGATHER, .algo = GCOLL_ALGO_RING,
                            .dtype = gcollInt8, .op = gcollSum, .proto = GCOLL_PROTO_SIMPLE,
                            .count = 1000, .nch = 1};
      run_direct_case(w, &d); /* probes: the ring, no tuning call */
      int reads = 0;
      assert_int_equal(total_reads(n), reads);
      for (int i = 0; i < schedule; i++) {
        run_direct_case(w, &d);
        if (i % 2 == 0) reads += per_call;
        assert_int_equal(total_reads(n), reads);
      }
      for (int i = 0; i < after; i++) { /* the first of these decides */
        run_direct_case(w, &d);
        if (direct_wins) reads += per_call;
        assert_int_equal(total_reads(n), reads);
      }
      d.count = 2000; /* the next class: its first call is direct */
      run_direct_case(w, &d);
      reads += per_call;
      assert_int_equal(total_reads(n), reads);
      d.count = 1000;
      d.in_place = 1; /* in place: its own row */
      run_direct_case(w, &d);
      reads += per_call;
      assert_int_equal(total_reads(n), reads);
      world_free(w);
      const uint64_t candidates = 1 + (uint64_t)schedule + (direct_wins ? after : 1) + 2;
      for (int r = 0; r < n; r++) {
        assert_int_equal(g_fake[r].candidates, candidates);
        assert_string_equal(g_fake[r].tuned, g_fake[0].tuned);
      }
      const char *want = direct_wins ? " direct" : " ring";
      if (strncmp(g_fake[0].tuned, "allgather ", 10) != 0 || strstr(g_fake[0].tuned, want) == NULL ||
          strchr(g_fake[0].tuned, ',') != NULL || strchr(g_fake[0].tuned, ';') != NULL)
        fail_msg("n=%d, dear rank %d: tuned \"%s\", expected one allgather class,%s", n, dear,
                 g_fake[0].tuned, want);
    }
  }
}

/* A failed read fails the call on every rank, with the reader and the
 * peer named, and leaves the connections in step for the next call. */
static void test_direct_read_failure(void **state) {
  (void)state;
  reset_fakes();
  struct world *w = world_new(3, 1, 4096, 20ull * 1000000000ull);
  struct case_desc d = {.coll = GCOLL_COLL_ALLGATHER, .algo = GCOLL_ALGO_RING,
                        .dtype = gcollInt32, .op = gcollSum, .proto = GCOLL_PROTO_SIMPLE,
                        .count = 333, .nch = 1};
  run_direct_case(w, &d); /* probes */
  g_fake[1].fail_read = 1;
  struct rank_call calls[MAX_RANKS];
  for (int r = 0; r < 3; r++) prepare_rank(w, &d, r, &calls[r]);
  struct gcoll_host_exec *ring_exec[MAX_RANKS];
  memcpy(ring_exec, w->exec, sizeof(ring_exec));
  memcpy(w->exec, w->direct_exec, sizeof(ring_exec));
  run_ranks(calls, 3, 0);
  memcpy(w->exec, ring_exec, sizeof(ring_exec));
  assert_int_equal(calls[1].result, gcollSystemError);
  if (strstr(calls[1].err, "single-copy read of rank 2's buffer") == NULL)
    fail_msg("rank 1: %s", calls[1].err);
  for (int r = 0; r < 3; r += 2) {
    assert_int_equal(calls[r].result, gcollRemoteError);
    if (strstr(calls[r].err, "rank 1's single-copy read of rank 2's buffer") == NULL)
      fail_msg("rank %d: %s", r, calls[r].err);
  }
  g_fake[1].fail_read = 0;
  run_direct_case(w, &d);
  d.coll = GCOLL_COLL_BROADCAST;
  run_direct_case(w, &d);
  world_free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fifo_layout),
      cmocka_unit_test(test_wait_rule),
      cmocka_unit_test(test_wait_phases),
      cmocka_unit_test(test_invalid_args),
      cmocka_unit_test(test_allreduce_shapes),
      cmocka_unit_test(test_matrix),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_gather_form),
      cmocka_unit_test(test_direct_form),
      cmocka_unit_test(test_direct_fallbacks),
      cmocka_unit_test(test_direct_cheap_remembered),
      cmocka_unit_test(test_direct_thresholds),
      cmocka_unit_test(test_direct_tuning),
      cmocka_unit_test(test_direct_allreduce),
      cmocka_unit_test(test_direct_cache_rules),
      cmocka_unit_test(test_direct_read_failure),
  };
  return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
