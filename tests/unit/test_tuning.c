/* The tuning table against its model (seed 000: time = latency +
 * bytes / algorithm bandwidth). The test re-derives every table from
 * gcoll_tuning_predict on its own: which candidates a job allows, how many
 * channels each size gets, which candidate wins, where rows start and end,
 * for the default model and for randomly perturbed ones. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/plan.h"
#include "graph/tuning.h"
#include "testutil.h"

/* ---- plans under test ---------------------------------------------------- */

struct config {
  const char *topo;
  int nnodes;
};

static const struct config configs[] = {
  {"dgx-h100", 1}, {"dgx-h100", 2}, {"dgx-h100", 4}, {"dgx-h100", 64},
  {"pcie-2s-4gpu", 1}, {"cpu-only", 1}, {"cpu-only", 2}, {"cpu-only", 16},
};
#define NCONFIGS ((int)(sizeof(configs) / sizeof(configs[0])))

struct fixture {
  struct gcoll_topo *topo[NCONFIGS];
  struct gcoll_plan *plan[NCONFIGS];
};

static struct gcoll_plan *build(const struct gcoll_topo *t, int nnodes) {
  const struct gcoll_topo **nodes = calloc((size_t)nnodes, sizeof(*nodes));
  assert_non_null(nodes);
  for (int i = 0; i < nnodes; i++) nodes[i] = t;
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = nodes, .job_id = -1, .step_id = -1};
  char err[256] = "";
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  free(nodes);
  if (p == NULL) fail_msg("plan for %d x %s: %s", nnodes, t->name, err);
  return p;
}

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof(*f));
  if (f == NULL) return -1;
  for (int i = 0; i < NCONFIGS; i++) {
    f->topo[i] = test_topo_load(configs[i].topo);
    f->plan[i] = build(f->topo[i], configs[i].nnodes);
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fixture *f = *state;
  for (int i = 0; i < NCONFIGS; i++) {
    gcoll_plan_free(f->plan[i]);
    gcoll_topo_free(f->topo[i]);
  }
  free(f);
  return 0;
}

/* ---- the model, re-derived ------------------------------------------------- */

/* What the model needs to know about a job, read from the plan the way the
 * docs describe it: the bottleneck per-channel bandwidth over classes (net
 * only counts across nodes), GPU execution only when every class is P2P,
 * NVLS only on one node whose class has heads. */
struct shape {
  int nranks, nnodes, nlocal, nchannels, nvls;
  double bw;
  enum gcoll_tune_exec exec;
};

static struct shape shape_of_plan(const struct gcoll_plan *p, const struct gcoll_tuning_model *m) {
  struct shape s = {.nranks = p->nranks, .nnodes = p->nnodes, .nchannels = p->nchannels};
  double bw = INFINITY;
  int gpu = 1, heads = 1;
  for (int k = 0; k < p->nclasses; k++) {
    const struct gcoll_plan_class *c = &p->classes[k];
    if (c->nlocal > s.nlocal) s.nlocal = c->nlocal;
    if (c->graph.ring_bw > 0) bw = fmin(bw, c->graph.ring_bw);
    if (p->nnodes > 1 && c->graph.net_bw > 0) bw = fmin(bw, c->graph.net_bw);
    gpu &= c->intra_edge == GCOLL_EDGE_P2P;
    heads &= c->graph.nvls_nheads > 0;
  }
  s.bw = isinf(bw) ? m->default_bw : bw;
  s.exec = gpu ? GCOLL_TUNE_GPU : GCOLL_TUNE_HOST;
  s.nvls = gpu && heads && p->nnodes == 1 && p->nranks > 1;
  return s;
}

/* Tree and NVLS are allreduce algorithms; NVLS runs Simple only; LL128
 * exists only where the executor has it. */
static int allowed(const struct gcoll_tuning_model *m, const struct shape *s, int coll, int a,
                   int p) {
  if (!m->exec[s->exec].proto_ok[p]) return 0;
  if (a == GCOLL_ALGO_RING) return 1;
  if (coll != GCOLL_COLL_ALLREDUCE) return 0;
  if (a == GCOLL_ALGO_TREE) return s->nranks > 1;
  return s->nvls && p == GCOLL_PROTO_SIMPLE;
}

/* Largest power of two <= nchannels giving each channel at least
 * min_channel_bytes (at least one channel). */
static int expected_channels(uint64_t min_bytes, int nchannels, uint64_t bytes) {
  int n = 1;
  while (2 * n <= nchannels && bytes / (uint64_t)(2 * n) >= min_bytes) n *= 2;
  return n;
}

static double time_of(const struct gcoll_tuning_model *m, const struct shape *s, int coll, int a,
                      int p, int nch, uint64_t bytes) {
  return gcoll_tuning_predict(m, s->exec, (enum gcoll_coll)coll, (enum gcoll_algo)a,
                              (enum gcoll_proto)p, s->nranks, s->nnodes, s->nlocal, nch, s->bw,
                              bytes);
}

/* The model's winner at one size (first of the fastest in algo, proto order). */
static struct gcoll_tuning_entry winner(const struct gcoll_tuning_model *m, const struct shape *s,
                                        int coll, uint64_t bytes, double *best_t) {
  int nch = expected_channels(m->exec[s->exec].min_channel_bytes, s->nchannels, bytes);
  struct gcoll_tuning_entry best = {bytes, GCOLL_ALGO_RING, GCOLL_PROTO_SIMPLE, nch};
  *best_t = INFINITY;
  int found = 0;
  for (int a = 0; a < GCOLL_NALGOS; a++)
    for (int p = 0; p < GCOLL_NPROTOS; p++) {
      if (!allowed(m, s, coll, a, p)) continue;
      double t = time_of(m, s, coll, a, p, nch, bytes);
      if (!found || t < *best_t) {
        found = 1;
        *best_t = t;
        best.algo = (enum gcoll_algo)a;
        best.proto = (enum gcoll_proto)p;
      }
    }
  return best;
}

/* The whole table: consecutive sizes with the same winner and channel count
 * share a row; returns the row count. */
static int derive_table(const struct gcoll_tuning_model *m, const struct shape *s, int coll,
                        struct gcoll_tuning_entry *rows) {
  int n = 0;
  for (int lg = GCOLL_TUNING_MIN_LOG2; lg <= GCOLL_TUNING_MAX_LOG2; lg++) {
    double t;
    struct gcoll_tuning_entry w = winner(m, s, coll, (uint64_t)1 << lg, &t);
    if (n > 0 && rows[n - 1].algo == w.algo && rows[n - 1].proto == w.proto &&
        rows[n - 1].nchannels == w.nchannels)
      rows[n - 1].max_bytes = w.max_bytes;
    else
      rows[n++] = w;
  }
  rows[n - 1].max_bytes = UINT64_MAX;
  return n;
}

static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

static int count_allowed(const struct gcoll_tuning_model *m, const struct shape *s, int coll) {
  int n = 0;
  for (int a = 0; a < GCOLL_NALGOS; a++)
    for (int p = 0; p < GCOLL_NPROTOS; p++) n += allowed(m, s, coll, a, p);
  return n;
}

static int log2i(int x) {
  int l = 0;
  while ((1 << (l + 1)) <= x) l++;
  return l;
}

/* Structural invariants of a plan's tables, for any model. */
static void check_structure(const struct gcoll_plan *p, const struct gcoll_tuning_model *m,
                            const char *what) {
  struct shape s = shape_of_plan(p, m);
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    int n = p->ntuning[c];
    if (n < 1 || n > GCOLL_MAX_TUNING) fail_msg("%s %s: %d rows", what, gcoll_coll_name(c), n);
    /* Each candidate wins on one interval of bytes per channel (lower
     * envelope of lines), and the channel count changes at most log2 times. */
    assert_true(n <= count_allowed(m, &s, c) + log2i(p->nchannels));
    assert_true(p->tuning[c][n - 1].max_bytes == UINT64_MAX);
    for (int r = 0; r < n; r++) {
      const struct gcoll_tuning_entry *e = &p->tuning[c][r];
      if (r > 0 && !(e->max_bytes > p->tuning[c][r - 1].max_bytes))
        fail_msg("%s %s: row %d not increasing", what, gcoll_coll_name(c), r);
      if (e->nchannels < 1 || e->nchannels > p->nchannels || !is_pow2(e->nchannels))
        fail_msg("%s %s: row %d has %d channels of %d", what, gcoll_coll_name(c), r,
                 e->nchannels, p->nchannels);
      if (!allowed(m, &s, c, e->algo, e->proto))
        fail_msg("%s %s: row %d uses %s/%s", what, gcoll_coll_name(c), r, gcoll_algo_name(e->algo),
                 gcoll_proto_name(e->proto));
      if (e->algo != GCOLL_ALGO_RING) assert_int_equal(c, GCOLL_COLL_ALLREDUCE);
      if (e->algo == GCOLL_ALGO_NVLS) assert_true(p->nnodes == 1 && s.exec == GCOLL_TUNE_GPU);
      if (s.exec == GCOLL_TUNE_HOST) assert_int_not_equal(e->proto, GCOLL_PROTO_LL128);
    }
  }
}

/* The plan's tables equal the re-derived ones, and looking up every size
 * through a rank view returns that size's argmin. */
static void check_against_model(const struct gcoll_plan *p, const struct gcoll_tuning_model *m,
                                const char *what) {
  struct shape s = shape_of_plan(p, m);
  struct gcoll_rank_view *view = malloc(sizeof(*view));
  char err[256] = "";
  assert_non_null(view);
  if (gcoll_plan_rank_view(p, p->nranks - 1, view, err, sizeof(err)) != 0)
    fail_msg("%s: rank view: %s", what, err);
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    struct gcoll_tuning_entry rows[64];
    int n = derive_table(m, &s, c, rows);
    if (n != p->ntuning[c])
      fail_msg("%s %s: %d rows, model gives %d", what, gcoll_coll_name(c), p->ntuning[c], n);
    for (int r = 0; r < n; r++) {
      const struct gcoll_tuning_entry *e = &p->tuning[c][r];
      if (e->max_bytes != rows[r].max_bytes || e->algo != rows[r].algo ||
          e->proto != rows[r].proto || e->nchannels != rows[r].nchannels)
        fail_msg("%s %s row %d: plan %llu %s/%s/%d, model %llu %s/%s/%d", what,
                 gcoll_coll_name(c), r, (unsigned long long)e->max_bytes,
                 gcoll_algo_name(e->algo), gcoll_proto_name(e->proto), e->nchannels,
                 (unsigned long long)rows[r].max_bytes, gcoll_algo_name(rows[r].algo),
                 gcoll_proto_name(rows[r].proto), rows[r].nchannels);
    }
    for (int lg = GCOLL_TUNING_MIN_LOG2; lg <= GCOLL_TUNING_MAX_LOG2; lg++) {
      uint64_t bytes = (uint64_t)1 << lg;
      const struct gcoll_tuning_entry *e = gcoll_rank_view_tuning(view, (enum gcoll_coll)c, bytes);
      assert_non_null(e);
      double best;
      struct gcoll_tuning_entry w = winner(m, &s, c, bytes, &best);
      assert_int_equal(e->nchannels, w.nchannels);
      double t = time_of(m, &s, c, e->algo, e->proto, e->nchannels, bytes);
      if (!(t <= best * (1 + 1e-9) || (isinf(t) && isinf(best))))
        fail_msg("%s %s at %llu B: %s/%s takes %g us, %s/%s %g us", what, gcoll_coll_name(c),
                 (unsigned long long)bytes, gcoll_algo_name(e->algo), gcoll_proto_name(e->proto),
                 t, gcoll_algo_name(w.algo), gcoll_proto_name(w.proto), best);
    }
  }
  free(view);
}

/* ---- tests: plans from gcoll_plan_build ------------------------------------ */

static void test_tables_follow_model(void **state) {
  struct fixture *f = *state;
  for (int i = 0; i < NCONFIGS; i++) {
    char what[64];
    snprintf(what, sizeof(what), "%d x %s", configs[i].nnodes, configs[i].topo);
    check_structure(f->plan[i], &gcoll_tuning_defaults, what);
    check_against_model(f->plan[i], &gcoll_tuning_defaults, what);
  }
}

static void test_algorithms_by_job_shape(void **state) {
  struct fixture *f = *state;
  for (int i = 0; i < NCONFIGS; i++) {
    const struct gcoll_plan *p = f->plan[i];
    struct shape s = shape_of_plan(p, &gcoll_tuning_defaults);
    int gpu = strcmp(configs[i].topo, "cpu-only") != 0;
    assert_int_equal(s.exec, gpu ? GCOLL_TUNE_GPU : GCOLL_TUNE_HOST);
    int nvls_rows = 0;
    for (int c = 0; c < GCOLL_NCOLLS; c++)
      for (int r = 0; r < p->ntuning[c]; r++) nvls_rows += p->tuning[c][r].algo == GCOLL_ALGO_NVLS;
    /* NVLS only on a single NVSwitch node; the H100 box has the heads and
     * its multicast bandwidth makes it the allreduce choice there. */
    if (configs[i].nnodes == 1 && strcmp(configs[i].topo, "dgx-h100") == 0)
      assert_true(nvls_rows > 0);
    else
      assert_int_equal(nvls_rows, 0);
    if (p->nnodes > 1) {
      /* The largest sizes are bandwidth-bound: ring, whose bus bandwidth
       * beats the tree's, with a bandwidth protocol. */
      for (int c = 0; c < GCOLL_NCOLLS; c++) {
        const struct gcoll_tuning_entry *last = &p->tuning[c][p->ntuning[c] - 1];
        assert_int_equal(last->algo, GCOLL_ALGO_RING);
        assert_true(last->proto == GCOLL_PROTO_SIMPLE || last->proto == GCOLL_PROTO_LL128);
        assert_int_equal(last->nchannels, p->nchannels);
      }
      /* and with more than one node the smallest allreduce uses the tree:
       * log2 latency against the ring's linear one */
      assert_int_equal(p->tuning[GCOLL_COLL_ALLREDUCE][0].algo, GCOLL_ALGO_TREE);
    }
  }
}

/* gcoll_rank_view_tuning at row boundaries and outside the evaluated range. */
static void test_rank_view_lookup(void **state) {
  struct fixture *f = *state;
  struct gcoll_rank_view *view = malloc(sizeof(*view));
  char err[256];
  assert_non_null(view);
  for (int i = 0; i < NCONFIGS; i++) {
    const struct gcoll_plan *p = f->plan[i];
    assert_int_equal(gcoll_plan_rank_view(p, 0, view, err, sizeof(err)), 0);
    for (int c = 0; c < GCOLL_NCOLLS; c++) {
      int n = view->ntuning[c];
      assert_int_equal(n, p->ntuning[c]);
      const struct gcoll_tuning_entry *t = view->tuning[c];
      assert_ptr_equal(gcoll_rank_view_tuning(view, (enum gcoll_coll)c, 0), &t[0]);
      assert_ptr_equal(gcoll_rank_view_tuning(view, (enum gcoll_coll)c, 1), &t[0]);
      assert_ptr_equal(gcoll_rank_view_tuning(view, (enum gcoll_coll)c, UINT64_MAX), &t[n - 1]);
      for (int r = 0; r < n; r++) {
        assert_ptr_equal(gcoll_rank_view_tuning(view, (enum gcoll_coll)c, t[r].max_bytes), &t[r]);
        if (r + 1 < n) {
          assert_ptr_equal(gcoll_rank_view_tuning(view, (enum gcoll_coll)c, t[r].max_bytes + 1),
                           &t[r + 1]);
          /* just below the next boundary still belongs to the next row */
          assert_ptr_equal(gcoll_rank_view_tuning(view, (enum gcoll_coll)c,
                                                  t[r + 1].max_bytes - 1),
                           t[r + 1].max_bytes - 1 > t[r].max_bytes ? &t[r + 1] : &t[r]);
        }
      }
    }
  }
  assert_null(gcoll_rank_view_tuning(NULL, GCOLL_COLL_ALLREDUCE, 64));
  assert_null(gcoll_rank_view_tuning(view, GCOLL_NCOLLS, 64));
  assert_null(gcoll_rank_view_tuning(view, (enum gcoll_coll)-1, 64));
  view->ntuning[GCOLL_COLL_REDUCE] = 0;
  assert_null(gcoll_rank_view_tuning(view, GCOLL_COLL_REDUCE, 64));
  view->ntuning[GCOLL_COLL_REDUCE] = GCOLL_MAX_TUNING + 1;
  assert_null(gcoll_rank_view_tuning(view, GCOLL_COLL_REDUCE, 64));
  free(view);
}

/* ---- tests: gcoll_tuning_predict ------------------------------------------ */

static void test_predict_monotone(void **state) {
  (void)state;
  const struct gcoll_tuning_model *m = &gcoll_tuning_defaults;
  static const int shapes[][2] = {{2, 1}, {3, 1}, {8, 1}, {4, 4}, {16, 2}, {32, 4}, {512, 64},
                                  {9, 3}, {64, 64}};
  for (int ex = 0; ex < GCOLL_TUNE_NEXECS; ex++)
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
      for (int c = 0; c < GCOLL_NCOLLS; c++)
        for (int a = 0; a < GCOLL_NALGOS; a++)
          for (int pr = 0; pr < GCOLL_NPROTOS; pr++) {
            if (!m->exec[ex].proto_ok[pr]) continue;
            if (a == GCOLL_ALGO_NVLS && (ex != GCOLL_TUNE_GPU || pr != GCOLL_PROTO_SIMPLE)) continue;
            int nranks = shapes[k][0], nnodes = shapes[k][1], nlocal = nranks / nnodes;
            for (double bw = 0.5; bw < 100; bw *= 4) {
              for (int nch = 1; nch <= GCOLL_MAX_CHANNELS; nch *= 2) {
                double lat = gcoll_tuning_predict(m, (enum gcoll_tune_exec)ex, (enum gcoll_coll)c,
                                                  (enum gcoll_algo)a, (enum gcoll_proto)pr,
                                                  nranks, nnodes, nlocal, nch, bw, 0);
                assert_true(isfinite(lat) && lat > 0);
                double prev = lat;
                for (int lg = 0; lg <= 40; lg++) {
                  uint64_t b = (uint64_t)1 << lg;
                  double t = gcoll_tuning_predict(m, (enum gcoll_tune_exec)ex, (enum gcoll_coll)c,
                                                  (enum gcoll_algo)a, (enum gcoll_proto)pr,
                                                  nranks, nnodes, nlocal, nch, bw, b);
                  double t2 = gcoll_tuning_predict(m, (enum gcoll_tune_exec)ex, (enum gcoll_coll)c,
                                                   (enum gcoll_algo)a, (enum gcoll_proto)pr,
                                                   nranks, nnodes, nlocal, 2 * nch, bw, b);
                  double t2b = gcoll_tuning_predict(m, (enum gcoll_tune_exec)ex, (enum gcoll_coll)c,
                                                    (enum gcoll_algo)a, (enum gcoll_proto)pr,
                                                    nranks, nnodes, nlocal, nch, bw, 2 * b);
                  /* more bytes cost more; more channels cost less */
                  assert_true(t > prev);
                  assert_true(t2 < t);
                  /* time = latency + bytes / algbw: the bandwidth part is
                   * linear in bytes and inverse in channels, the latency
                   * part depends on neither */
                  assert_true(fabs((t2b - lat) - 2 * (t - lat)) <= 1e-9 * t2b);
                  assert_true(fabs((t - lat) - 2 * (t2 - lat)) <= 1e-9 * t);
                  /* bandwidth-bound: doubling channels nearly halves it */
                  if (t - lat >= 100 * lat) assert_true(t2 < 0.5 * t * 1.01);
                  prev = t;
                }
              }
            }
          }
  /* A single rank moves nothing over links: its time does not grow. */
  for (int pr = 0; pr < GCOLL_NPROTOS; pr++) {
    double t0 = gcoll_tuning_predict(m, GCOLL_TUNE_GPU, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING,
                                     (enum gcoll_proto)pr, 1, 1, 1, 1, 10, 64);
    double t1 = gcoll_tuning_predict(m, GCOLL_TUNE_GPU, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING,
                                     (enum gcoll_proto)pr, 1, 1, 1, 1, 10, (uint64_t)1 << 34);
    assert_true(t0 == t1);
  }
}

/* Ring allreduce moves twice what allgather does (reduce-scatter then
 * allgather), per rank: its bandwidth term is twice as long. */
static void test_predict_ring_bus_bandwidth(void **state) {
  (void)state;
  const struct gcoll_tuning_model *m = &gcoll_tuning_defaults;
  for (int nranks = 2; nranks <= 256; nranks *= 2) {
    uint64_t b = (uint64_t)1 << 30;
    for (int pr = 0; pr < GCOLL_NPROTOS; pr++) {
      double ar = gcoll_tuning_predict(m, GCOLL_TUNE_GPU, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING,
                                       (enum gcoll_proto)pr, nranks, 1, nranks, 4, 20, b) -
                  gcoll_tuning_predict(m, GCOLL_TUNE_GPU, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING,
                                       (enum gcoll_proto)pr, nranks, 1, nranks, 4, 20, 0);
      double ag = gcoll_tuning_predict(m, GCOLL_TUNE_GPU, GCOLL_COLL_ALLGATHER, GCOLL_ALGO_RING,
                                       (enum gcoll_proto)pr, nranks, 1, nranks, 4, 20, b) -
                  gcoll_tuning_predict(m, GCOLL_TUNE_GPU, GCOLL_COLL_ALLGATHER, GCOLL_ALGO_RING,
                                       (enum gcoll_proto)pr, nranks, 1, nranks, 4, 20, 0);
      assert_true(fabs(ar - 2 * ag) <= 1e-9 * ar);
      /* and the allgather term is (n-1)/n of the bytes at bus bandwidth */
      double busbw = 4 * 20.0 * m->exec[GCOLL_TUNE_GPU].proto_eff[pr] *
                     m->exec[GCOLL_TUNE_GPU].algo_eff[GCOLL_ALGO_RING] * 1e3;  /* bytes/us */
      double want = (double)b * (nranks - 1) / nranks / busbw;
      assert_true(fabs(ag - want) <= 1e-9 * want);
    }
  }
}

static double lat_of(enum gcoll_tune_exec ex, enum gcoll_coll c, enum gcoll_algo a, enum gcoll_proto p,
                     int nranks, int nnodes) {
  return gcoll_tuning_predict(&gcoll_tuning_defaults, ex, c, a, p, nranks, nnodes,
                              nranks / nnodes, 4, 10, 0);
}

/* Latency counts steps: a ring step inside a node costs intra_lat, each
 * tree level across nodes costs net_lat going up and again going down. */
static void test_predict_latency_counts_steps(void **state) {
  (void)state;
  for (int ex = 0; ex < GCOLL_TUNE_NEXECS; ex++) {
    const struct gcoll_tuning_exec *e = &gcoll_tuning_defaults.exec[ex];
    for (int p = 0; p < GCOLL_NPROTOS; p++) {
      if (!e->proto_ok[p]) continue;
      for (int n = 2; n < 64; n++) {
        /* one node: allreduce = reduce-scatter + allgather, n-1 steps each */
        double d_ar = lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING, p, n + 1, 1) -
                      lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING, p, n, 1);
        double d_ag = lat_of(ex, GCOLL_COLL_ALLGATHER, GCOLL_ALGO_RING, p, n + 1, 1) -
                      lat_of(ex, GCOLL_COLL_ALLGATHER, GCOLL_ALGO_RING, p, n, 1);
        assert_true(fabs(d_ar - 2 * e->intra_lat[GCOLL_ALGO_RING][p]) < 1e-9);
        assert_true(fabs(d_ag - e->intra_lat[GCOLL_ALGO_RING][p]) < 1e-9);
        /* and no step of a one-node job crosses the network */
        double ar = lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING, p, n, 1);
        assert_true(fabs(ar - e->base_lat[GCOLL_ALGO_RING][p] -
                         2 * (n - 1) * e->intra_lat[GCOLL_ALGO_RING][p]) < 1e-9);
        /* the chain inside a node is walked up and down */
        double d_tree = lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE, p, n + 1, 1) -
                        lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE, p, n, 1);
        assert_true(fabs(d_tree - 2 * e->intra_lat[GCOLL_ALGO_TREE][p]) < 1e-9);
      }
      /* across nodes (8 ranks each) the tree adds a level per doubling,
       * while the ring's latency keeps growing with every node */
      for (int nodes = 2; nodes <= 512; nodes *= 2) {
        double d_tree = lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE, p, 16 * nodes, 2 * nodes) -
                        lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE, p, 8 * nodes, nodes);
        assert_true(fabs(d_tree - 2 * e->net_lat[GCOLL_ALGO_TREE][p]) < 1e-9);
        double ring1 = lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING, p, 8 * nodes, nodes);
        double ring2 = lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING, p, 16 * nodes, 2 * nodes);
        double tree1 = lat_of(ex, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE, p, 8 * nodes, nodes);
        assert_true(ring2 - ring1 >= (ring1 - e->base_lat[GCOLL_ALGO_RING][p]) * 0.99);
        if (nodes >= 8) assert_true(tree1 < ring1);
      }
      /* a single rank pays only the base latency */
      assert_true(lat_of(ex, GCOLL_COLL_BROADCAST, GCOLL_ALGO_RING, p, 1, 1) ==
                  e->base_lat[GCOLL_ALGO_RING][p]);
    }
  }
}

/* ---- tests: overrides -------------------------------------------------------- */

static int tune_with_spec(struct gcoll_plan *p, const char *spec, struct gcoll_tuning_model *m) {
  char err[256] = "";
  *m = gcoll_tuning_defaults;
  if (gcoll_tuning_set(m, spec, err, sizeof(err)) != 0) fail_msg("'%s': %s", spec, err);
  gcoll_plan_tune_with(p, m);
  return 0;
}

static int rows_with(const struct gcoll_plan *p, int coll, int algo, int proto) {
  int n = 0;
  for (int c = 0; c < GCOLL_NCOLLS; c++)
    for (int r = 0; r < p->ntuning[c]; r++)
      n += (coll < 0 || c == coll) && (algo < 0 || (int)p->tuning[c][r].algo == algo) &&
           (proto < 0 || (int)p->tuning[c][r].proto == proto);
  return n;
}

/* Field by field: rows have padding that struct copies need not keep. */
static void assert_tables_equal(const struct gcoll_plan *p,
                                struct gcoll_tuning_entry want[GCOLL_NCOLLS][GCOLL_MAX_TUNING],
                                const int *nwant) {
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    assert_int_equal(p->ntuning[c], nwant[c]);
    for (int r = 0; r < nwant[c]; r++) {
      assert_true(p->tuning[c][r].max_bytes == want[c][r].max_bytes);
      assert_int_equal(p->tuning[c][r].algo, want[c][r].algo);
      assert_int_equal(p->tuning[c][r].proto, want[c][r].proto);
      assert_int_equal(p->tuning[c][r].nchannels, want[c][r].nchannels);
    }
  }
}

/* Every documented key writes exactly its field. */
static void test_set_keys_map_to_fields(void **state) {
  (void)state;
  static const char *execs[] = {"gpu", "host"};
  static const char *lat_fields[] = {"base_lat", "intra_lat", "net_lat"};
  char spec[128], err[256];
  double v = 1.25;
  for (int ex = 0; ex < GCOLL_TUNE_NEXECS; ex++) {
    for (int a = 0; a < GCOLL_NALGOS; a++)
      for (int p = 0; p < GCOLL_NPROTOS; p++)
        for (int k = 0; k < 3; k++, v += 0.5) {
          struct gcoll_tuning_model got = gcoll_tuning_defaults, want = gcoll_tuning_defaults;
          snprintf(spec, sizeof(spec), "%s.%s.%s.%s=%g", execs[ex], gcoll_algo_name(a),
                   gcoll_proto_name(p), lat_fields[k], v);
          assert_int_equal(gcoll_tuning_set(&got, spec, err, sizeof(err)), 0);
          double *field = k == 0 ? &want.exec[ex].base_lat[a][p]
                          : k == 1 ? &want.exec[ex].intra_lat[a][p]
                                   : &want.exec[ex].net_lat[a][p];
          *field = v;
          if (memcmp(&got, &want, sizeof(got)) != 0) fail_msg("'%s' set the wrong field", spec);
        }
    for (int a = 0; a < GCOLL_NALGOS; a++, v += 0.5) {
      struct gcoll_tuning_model got = gcoll_tuning_defaults, want = gcoll_tuning_defaults;
      snprintf(spec, sizeof(spec), "%s.%s.eff=%g", execs[ex], gcoll_algo_name(a), v);
      assert_int_equal(gcoll_tuning_set(&got, spec, err, sizeof(err)), 0);
      want.exec[ex].algo_eff[a] = v;
      assert_memory_equal(&got, &want, sizeof(got));
    }
    for (int p = 0; p < GCOLL_NPROTOS; p++, v += 0.5) {
      struct gcoll_tuning_model got = gcoll_tuning_defaults, want = gcoll_tuning_defaults;
      snprintf(spec, sizeof(spec), "%s.%s.eff=%g", execs[ex], gcoll_proto_name(p), v);
      assert_int_equal(gcoll_tuning_set(&got, spec, err, sizeof(err)), 0);
      want.exec[ex].proto_eff[p] = v;
      assert_memory_equal(&got, &want, sizeof(got));
    }
    struct gcoll_tuning_model got = gcoll_tuning_defaults, want = gcoll_tuning_defaults;
    snprintf(spec, sizeof(spec), "%s.min_channel_bytes=4096", execs[ex]);
    assert_int_equal(gcoll_tuning_set(&got, spec, err, sizeof(err)), 0);
    want.exec[ex].min_channel_bytes = 4096;
    assert_memory_equal(&got, &want, sizeof(got));
  }
  struct gcoll_tuning_model got = gcoll_tuning_defaults, want = gcoll_tuning_defaults;
  assert_int_equal(gcoll_tuning_set(&got, "nvls_ratio=0.5,default_bw=3,gpu.ring.eff=0.75", err,
                                    sizeof(err)), 0);
  want.nvls_ratio = 0.5;
  want.default_bw = 3;
  want.exec[GCOLL_TUNE_GPU].algo_eff[GCOLL_ALGO_RING] = 0.75;
  assert_memory_equal(&got, &want, sizeof(got));
  /* empty and NULL specs change nothing */
  assert_int_equal(gcoll_tuning_set(&got, "", err, sizeof(err)), 0);
  assert_int_equal(gcoll_tuning_set(&got, NULL, err, sizeof(err)), 0);
  assert_memory_equal(&got, &want, sizeof(got));
}

static void test_set_rejects_bad_overrides(void **state) {
  (void)state;
  /* {spec, text the message must contain} */
  static const char *bad[][2] = {
    {"gpu.ring.simple.bogus=1", "gpu.ring.simple.bogus"},
    {"cpu.ring.eff=1", "cpu.ring.eff"},
    {"gpu.ring.eff", "gpu.ring.eff"},
    {"gpu.ring.eff=-1", "gpu.ring.eff"},
    {"gpu.ring.eff=abc", "gpu.ring.eff"},
    {"gpu.ring.eff=1x", "gpu.ring.eff"},
    {"gpu.ring.eff=", "gpu.ring.eff"},
    {"gpu.ring.eff=nan", "gpu.ring.eff"},
    {"gpu.ring.eff=inf", "gpu.ring.eff"},
    {"nvls_ratio=1e999", "nvls_ratio"},
    {"gpu.warp.simple.base_lat=1", "gpu.warp.simple.base_lat"},
    {"gpu.ring.ll256.base_lat=1", "gpu.ring.ll256.base_lat"},
    {"gpu.ring.simple.base_lat.x=1", "gpu.ring.simple.base_lat.x"},
    {"gpu.ring.simple=1", "gpu.ring.simple"},
    {"gpu..ring.eff=1", "gpu..ring.eff"},
    {"gpu.ring..eff=1", "gpu.ring..eff"},
    {".gpu.ring.eff=1", ".gpu.ring.eff"},
    {"gpu.ring.eff.=1", "gpu.ring.eff."},
    {"gpu.min_channel_bytes=0", "gpu.min_channel_bytes"},
    {"gpu.min_channel_bytes=0.5", "gpu.min_channel_bytes"},
    {"host.min_channel_bytes=1e30", "host.min_channel_bytes"},
    {"gpu.eff=1", "gpu.eff"},
    {"gpu=1", "gpu"},
    {"GPU.ring.eff=1", "GPU.ring.eff"},
    {"default_bw=1,nvls_ratio=x", "nvls_ratio"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct gcoll_tuning_model m = gcoll_tuning_defaults;
    char err[256] = "";
    if (gcoll_tuning_set(&m, bad[i][0], err, sizeof(err)) != -1)
      fail_msg("accepted '%s'", bad[i][0]);
    if (err[0] == '\0' || strchr(err, '\n') || strstr(err, bad[i][1]) == NULL)
      fail_msg("'%s' gave '%s'", bad[i][0], err);
  }
  /* Items before the bad one are applied, the ones after are not. */
  struct gcoll_tuning_model m = gcoll_tuning_defaults;
  char err[256];
  assert_int_equal(gcoll_tuning_set(&m, "default_bw=7,bogus=1,nvls_ratio=0.1", err, sizeof(err)), -1);
  assert_true(m.default_bw == 7);
  assert_true(m.nvls_ratio == gcoll_tuning_defaults.nvls_ratio);
}

/* Overrides change the tables the way the model says. */
static void test_overrides_change_tables(void **state) {
  struct fixture *f = *state;
  struct gcoll_tuning_model m;
  struct gcoll_plan *h4 = f->plan[2], *h1 = f->plan[0], *c16 = f->plan[7];
  assert_true(rows_with(h4, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_TREE, -1) > 0);
  tune_with_spec(h4, "gpu.tree.simple.base_lat=1e9,gpu.tree.ll.base_lat=1e9,"
                     "gpu.tree.ll128.base_lat=1e9", &m);
  assert_int_equal(rows_with(h4, -1, GCOLL_ALGO_TREE, -1), 0);
  check_against_model(h4, &m, "4 x dgx-h100, slow tree");

  assert_true(rows_with(h1, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_NVLS, -1) > 0);
  tune_with_spec(h1, "nvls_ratio=0", &m);   /* no multicast bandwidth */
  assert_int_equal(rows_with(h1, -1, GCOLL_ALGO_NVLS, -1), 0);
  check_against_model(h1, &m, "1 x dgx-h100, no nvls");

  tune_with_spec(h4, "gpu.ll.eff=0", &m);
  assert_int_equal(rows_with(h4, -1, -1, GCOLL_PROTO_LL), 0);
  check_against_model(h4, &m, "4 x dgx-h100, no ll");

  /* one byte per channel is enough: every size uses every channel */
  tune_with_spec(h4, "gpu.min_channel_bytes=1", &m);
  for (int c = 0; c < GCOLL_NCOLLS; c++)
    for (int r = 0; r < h4->ntuning[c]; r++) assert_int_equal(h4->tuning[c][r].nchannels, h4->nchannels);

  /* host keys leave GPU jobs alone and the other way round */
  struct gcoll_tuning_entry before[GCOLL_NCOLLS][GCOLL_MAX_TUNING];
  int nbefore[GCOLL_NCOLLS];
  gcoll_plan_tune(h4);
  memcpy(before, h4->tuning, sizeof(before));
  memcpy(nbefore, h4->ntuning, sizeof(nbefore));
  tune_with_spec(h4, "host.ring.simple.base_lat=1e6,host.min_channel_bytes=1", &m);
  assert_tables_equal(h4, before, nbefore);
  gcoll_plan_tune(c16);
  memcpy(before, c16->tuning, sizeof(before));
  memcpy(nbefore, c16->ntuning, sizeof(nbefore));
  tune_with_spec(c16, "gpu.ring.simple.base_lat=1e6,gpu.min_channel_bytes=1", &m);
  assert_tables_equal(c16, before, nbefore);
  /* and a host key does change a host job */
  tune_with_spec(c16, "host.min_channel_bytes=1", &m);
  for (int c = 0; c < GCOLL_NCOLLS; c++)
    for (int r = 0; r < c16->ntuning[c]; r++)
      assert_int_equal(c16->tuning[c][r].nchannels, c16->nchannels);

  /* With every protocol disabled nothing is finite; the table must still be
   * a valid one (a row per collective with channels). */
  tune_with_spec(h4, "gpu.simple.eff=0,gpu.ll.eff=0,gpu.ll128.eff=0", &m);
  check_structure(h4, &m, "4 x dgx-h100, no protocol");
  tune_with_spec(c16, "default_bw=0", &m);   /* cpu-only reports bandwidths: no effect */
  check_against_model(c16, &m, "16 x cpu-only, default_bw 0");

  gcoll_plan_tune(h4);
  gcoll_plan_tune(h1);
  gcoll_plan_tune(c16);
}

/* Random models: every latency and efficiency scaled by 1/8..8, random
 * channel thresholds. The tables still equal the model's argmin. */
static void test_random_models(void **state) {
  struct fixture *f = *state;
  unsigned long long seed = 0x7a11e5ULL;
  for (int iter = 0; iter < 400; iter++) {
    struct gcoll_tuning_model m = gcoll_tuning_defaults;
    for (int ex = 0; ex < GCOLL_TUNE_NEXECS; ex++) {
      struct gcoll_tuning_exec *e = &m.exec[ex];
      for (int a = 0; a < GCOLL_NALGOS; a++) {
        for (int p = 0; p < GCOLL_NPROTOS; p++) {
          e->base_lat[a][p] *= pow(2, (double)(test_rand(&seed) % 7) - 3);
          e->intra_lat[a][p] *= pow(2, (double)(test_rand(&seed) % 7) - 3);
          e->net_lat[a][p] *= pow(2, (double)(test_rand(&seed) % 7) - 3);
        }
        e->algo_eff[a] *= 0.25 + (double)(test_rand(&seed) % 100) / 100;
      }
      for (int p = 0; p < GCOLL_NPROTOS; p++)
        e->proto_eff[p] *= 0.25 + (double)(test_rand(&seed) % 100) / 100;
      e->min_channel_bytes = (uint64_t)1 << (test_rand(&seed) % 30);
    }
    m.nvls_ratio = 0.2 + (double)(test_rand(&seed) % 100) / 100;
    int i = (int)(test_rand(&seed) % NCONFIGS);
    char what[96];
    snprintf(what, sizeof(what), "%d x %s, random model %d", configs[i].nnodes, configs[i].topo, iter);
    gcoll_plan_tune_with(f->plan[i], &m);
    check_structure(f->plan[i], &m, what);
    check_against_model(f->plan[i], &m, what);
    gcoll_plan_tune(f->plan[i]);
  }
}

/* The gather-form limit: the largest grid size at which the model
 * predicts it faster than the ring, within the cap; it wins only at small
 * sizes from 3 ranks (its steps save latency, its bytes cost bandwidth)
 * and at every size for 2 (same bytes, one step instead of two). */
static void test_gather_limit(void **state) {
  (void)state;
  const struct gcoll_tuning_model *m = &gcoll_tuning_defaults;
  uint64_t cap = 1u << 20;
  char err[128];
  assert_int_equal(gcoll_tuning_gather_limit(m, GCOLL_PROTO_SIMPLE, 1, 1, 0, cap), 0);
  assert_int_equal(gcoll_tuning_gather_limit(m, GCOLL_PROTO_LL128, 4, 1, 0, cap), 0);
  assert_int_equal(gcoll_tuning_gather_limit(m, GCOLL_PROTO_SIMPLE, 2, 1, 0, cap), cap);
  assert_int_equal(gcoll_tuning_gather_limit(m, GCOLL_PROTO_SIMPLE, 2, 1, 0, 1000), 512);
  assert_int_equal(gcoll_tuning_gather_limit(m, GCOLL_PROTO_SIMPLE, 2, 1, 0, 32), 0);
  for (int n = 3; n <= 64; n++) {
    uint64_t lim = gcoll_tuning_gather_limit(m, GCOLL_PROTO_SIMPLE, n, 1, 0, cap);
    assert_true(lim > 0 && lim < cap);
    assert_true((lim & (lim - 1)) == 0);
    /* A slower step never lowers it: calibrated, or on shared cores. */
    struct gcoll_tuning_model slower = *m;
    slower.exec[GCOLL_TUNE_HOST].intra_lat[GCOLL_ALGO_RING][GCOLL_PROTO_SIMPLE] *= 4;
    assert_true(gcoll_tuning_gather_limit(&slower, GCOLL_PROTO_SIMPLE, n, 1, 0, cap) >= lim);
    assert_true(gcoll_tuning_gather_limit(m, GCOLL_PROTO_SIMPLE, n, 1, 1, cap) > lim);
  }
  /* 4 ranks on shared cores: 3 steps of 1 us against 6, worth up to
   * 16 KB of extra copying at 10 GB/s. */
  assert_int_equal(gcoll_tuning_gather_limit(m, GCOLL_PROTO_SIMPLE, 4, 1, 1, cap), 16384);
  struct gcoll_tuning_model none = *m;
  assert_int_equal(gcoll_tuning_set(&none, "shared_lat=0", err, sizeof(err)), 0);
  assert_int_equal(gcoll_tuning_gather_limit(&none, GCOLL_PROTO_SIMPLE, 4, 1, 1, cap),
                   gcoll_tuning_gather_limit(m, GCOLL_PROTO_SIMPLE, 4, 1, 0, cap));
  /* Calibrated step latency (oversubscribed hosts) raises it to the cap. */
  struct gcoll_tuning_model slow = *m;
  assert_int_equal(gcoll_tuning_set(&slow, "host.ring.simple.intra_lat=20", err, sizeof(err)), 0);
  assert_int_equal(gcoll_tuning_gather_limit(&slow, GCOLL_PROTO_SIMPLE, 4, 1, 0, 131072), 131072);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_tables_follow_model),
    cmocka_unit_test(test_algorithms_by_job_shape),
    cmocka_unit_test(test_rank_view_lookup),
    cmocka_unit_test(test_predict_monotone),
    cmocka_unit_test(test_predict_ring_bus_bandwidth),
    cmocka_unit_test(test_predict_latency_counts_steps),
    cmocka_unit_test(test_set_keys_map_to_fields),
    cmocka_unit_test(test_set_rejects_bad_overrides),
    cmocka_unit_test(test_overrides_change_tables),
    cmocka_unit_test(test_random_models),
    cmocka_unit_test(test_gather_limit),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
