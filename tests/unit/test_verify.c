/* gcoll_plan_verify: every built plan passes; every invariant of
 * docs/plan-format.md that verify checks is broken once in memory and must
 * be reported with its own message; damaged plan text is refused by the
 * reader with FILE:LINE or, when it reads, by verify. */
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
#include "testutil.h"

#define h100 (test_ref[TEST_H100])
#define a100 (test_ref[TEST_A100])
#define pcie (test_ref[TEST_PCIE])
#define cpu (test_ref[TEST_CPU])

static struct gcoll_plan *build(int nnodes, const struct gcoll_topo **topo, int rpn) {
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = topo, .ranks_per_node = rpn, .job_id = -1, .step_id = -1};
  char err[512] = "";
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("build of %d nodes failed: %s", nnodes, err);
  return p;
}

static struct gcoll_plan *build_uniform(const struct gcoll_topo *t, int nnodes, int rpn) {
  const struct gcoll_topo *topo[64];
  assert_true(nnodes <= 64);
  for (int i = 0; i < nnodes; i++) topo[i] = t;
  return build(nnodes, topo, rpn);
}

/* dgx-h100 and pcie-2s-4gpu nodes in a fixed irregular pattern. */
static struct gcoll_plan *build_mixed(int nnodes) {
  const struct gcoll_topo *topo[64];
  for (int i = 0; i < nnodes; i++) topo[i] = (i * 7 + i / 3) % 3 ? h100 : pcie;
  return build(nnodes, topo, 0);
}

static void assert_verifies(const struct gcoll_plan *p, const char *what) {
  char err[512] = "";
  if (gcoll_plan_verify(p, err, sizeof(err)) != 0)
    fail_msg("%s: verify refused a built plan: %s", what, err);
}

/* Nodes with different rank counts: node i of topology topo[i] holds
 * counts[i] ranks. */
static struct gcoll_plan *build_uneven(int nnodes, const struct gcoll_topo **topo,
                                       const int *counts) {
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = topo, .node_ranks = counts,
                                .job_id = -1, .step_id = -1};
  char err[512] = "";
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("build of %d uneven nodes failed: %s", nnodes, err);
  int total = 0;
  for (int n = 0; n < nnodes; n++) {
    assert_int_equal(p->classes[p->node_class[n]].nlocal, counts[n]);
    assert_int_equal(p->node_first_rank[n], total);
    total += counts[n];
  }
  assert_int_equal(p->nranks, total);
  return p;
}

/* cpu-only nodes holding 3, 1, 2, 1 ranks: classes of 3, 1 and 2 local
 * ranks, node 0 of class 0, nodes 1 and 3 of class 1, node 2 of class 2. */
static const int uneven_counts[] = {3, 1, 2, 1};
static struct gcoll_plan *build_uneven_cpu(void) {
  const struct gcoll_topo *topo[4] = {cpu, cpu, cpu, cpu};
  struct gcoll_plan *p = build_uneven(4, topo, uneven_counts);
  assert_int_equal(p->nclasses, 3);
  assert_int_equal(p->classes[0].nlocal, 3);
  assert_int_equal(p->classes[1].nlocal, 1);
  assert_int_equal(p->classes[2].nlocal, 2);
  return p;
}

/* ---- accepted ------------------------------------------------------------ */

static void test_built_plans_verify(void **state) {
  (void)state;
  const struct gcoll_topo *tops[] = {h100, a100, pcie, cpu};
  const char *names[] = {"dgx-h100", "dgx-a100", "pcie-2s-4gpu", "cpu-only"};
  for (int t = 0; t < 4; t++)
    for (int n = 1; n <= 33; n += n < 10 ? 1 : 4) {
      char what[64];
      snprintf(what, sizeof(what), "%d x %s", n, names[t]);
      struct gcoll_plan *p = build_uniform(tops[t], n, 0);
      assert_verifies(p, what);
      gcoll_plan_free(p);
    }
  for (int n = 2; n <= 40; n += 3) {
    struct gcoll_plan *p = build_mixed(n);
    assert_verifies(p, "mixed");
    assert_int_equal(p->nclasses, 2);
    gcoll_plan_free(p);
  }
  /* Fewer ranks than GPUs, and one rank per CPU node. */
  struct gcoll_plan *p = build_uniform(h100, 5, 3);
  assert_verifies(p, "5 x dgx-h100, 3 ranks each");
  gcoll_plan_free(p);
  p = build_uniform(cpu, 7, 1);
  assert_verifies(p, "7 x cpu-only, 1 rank each");
  gcoll_plan_free(p);
}

/* Plans whose nodes hold different rank counts pass every check. */
static void test_uneven_plans_verify(void **state) {
  (void)state;
  static const int l21[] = {2, 1}, l312[] = {3, 1, 2}, l114[] = {1, 1, 4}, l5[] = {5},
                   lgpu[] = {8, 3, 1, 8, 4, 2}, lmix[] = {8, 2, 4, 3, 1, 4, 2};
  static const struct { const int *v; int n; } layouts[] = {
      {l21, 2}, {l312, 3}, {l114, 3}, {l5, 1}};
  const struct gcoll_topo *topo[64];
  for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
    for (int n = 0; n < layouts[i].n; n++) topo[n] = cpu;
    struct gcoll_plan *p = build_uneven(layouts[i].n, topo, layouts[i].v);
    assert_verifies(p, "uneven cpu-only");
    gcoll_plan_free(p);
  }
  for (int n = 0; n < 6; n++) topo[n] = h100;
  struct gcoll_plan *p = build_uneven(6, topo, lgpu);
  assert_verifies(p, "uneven dgx-h100");
  gcoll_plan_free(p);
  for (int n = 0; n < 7; n++) topo[n] = n % 3 == 0 ? h100 : n % 3 == 1 ? pcie : cpu;
  p = build_uneven(7, topo, lmix);
  assert_verifies(p, "uneven mixed");
  gcoll_plan_free(p);
  /* Many nodes, counts 1..5 in an irregular pattern; any node order. */
  int counts[64];
  for (int n = 0; n < 64; n++) {
    topo[n] = n % 5 == 4 ? pcie : cpu;
    counts[n] = 1 + (n * 7 + n / 3) % 4;
  }
  p = build_uneven(64, topo, counts);
  assert_verifies(p, "64 uneven nodes");
  unsigned long long seed = 5;
  for (int round = 0; round < 20; round++) {
    for (int i = p->nnodes - 1; i > 0; i--) {
      int j = (int)(test_rand(&seed) % (unsigned)(i + 1)), t = p->ring_node_order[i];
      p->ring_node_order[i] = p->ring_node_order[j];
      p->ring_node_order[j] = t;
    }
    /* The trees follow the ring's node order (plan-format.md). */
    assert_int_equal(gcoll_plan_build_trees(p), 0);
    assert_verifies(p, "64 uneven nodes, permuted node order");
  }
  gcoll_plan_free(p);
}

/* Permuting the ring's node order keeps a valid plan once the trees follow
 * it (any permutation is one cycle); trees left over node order are then
 * refused, since the trees are placed along the ring (plan-format.md). */
static void test_permuted_node_order_verifies(void **state) {
  (void)state;
  unsigned long long seed = 42;
  struct gcoll_plan *p = build_mixed(23);
  char err[512];
  int refused = 0;
  for (int round = 0; round < 50; round++) {
    for (int i = p->nnodes - 1; i > 0; i--) {
      int j = (int)(test_rand(&seed) % (unsigned)(i + 1)), t = p->ring_node_order[i];
      p->ring_node_order[i] = p->ring_node_order[j];
      p->ring_node_order[j] = t;
    }
    refused += gcoll_plan_verify(p, err, sizeof(err)) != 0 && strstr(err, "tree t") != NULL;
    assert_int_equal(gcoll_plan_build_trees(p), 0);
    assert_verifies(p, "permuted node order");
  }
  assert_true(refused >= 45);   /* a permutation that keeps the trees is rare */
  gcoll_plan_free(p);
}

/* ---- in-memory corruptions ------------------------------------------------- */

typedef void (*mutate_fn)(struct gcoll_plan *p);

struct corruption {
  const char *label;
  int nnodes;       /* plan: nnodes x dgx-h100, or mixed when `mixed` */
  int mixed;
  mutate_fn fn;
  const char *needle;
};

static void m_nranks_zero(struct gcoll_plan *p) { p->nranks = 0; }
static void m_nranks_short(struct gcoll_plan *p) { p->nranks -= 1; }
static void m_nranks_long(struct gcoll_plan *p) { p->nranks += 1; }
static void m_nnodes_gt_nranks(struct gcoll_plan *p) { p->nranks = p->nnodes - 1; }
static void m_channels_odd(struct gcoll_plan *p) { p->nchannels += 1; }
static void m_channels_zero(struct gcoll_plan *p) { p->nchannels = 0; }
static void m_channels_many(struct gcoll_plan *p) { p->nchannels = GCOLL_MAX_CHANNELS + 2; }
static void m_classes_zero(struct gcoll_plan *p) { p->nclasses = 0; }
static void m_classes_many(struct gcoll_plan *p) { p->nclasses = GCOLL_MAX_CLASSES + 1; }
static void m_no_arrays(struct gcoll_plan *p) {
  free(p->t2_parent);
  p->t2_parent = NULL;
}
static void m_class_no_name(struct gcoll_plan *p) { p->classes[0].name[0] = '\0'; }
static void m_class_dup_name(struct gcoll_plan *p) {
  memcpy(p->classes[1].name, p->classes[0].name, sizeof(p->classes[0].name));
}
static void m_class_nlocal_zero(struct gcoll_plan *p) { p->classes[0].nlocal = 0; }
static void m_class_edge(struct gcoll_plan *p) { p->classes[0].intra_edge = GCOLL_EDGE_NET; }
static void m_class_bw_nan(struct gcoll_plan *p) { p->classes[0].graph.ring_bw = NAN; }
static void m_class_bw_negative(struct gcoll_plan *p) { p->classes[0].graph.net_bw = -1; }
static void m_class_searched(struct gcoll_plan *p) { p->classes[0].graph.nchannels -= 1; }
static void m_ring_dup(struct gcoll_plan *p) {
  struct gcoll_intra_channel *c = &p->classes[0].graph.ch[p->nchannels / 2 - 1];
  c->ring[3] = c->ring[5];
}
static void m_ring_range(struct gcoll_plan *p) { p->classes[0].graph.ch[0].ring[7] = 8; }
static void m_ring_negative(struct gcoll_plan *p) { p->classes[0].graph.ch[0].ring[0] = -1; }
static void m_chain_dup(struct gcoll_plan *p) {
  struct gcoll_intra_channel *c = &p->classes[0].graph.ch[0];
  c->chain[1] = c->chain[0];
}
static void m_chain_range(struct gcoll_plan *p) { p->classes[0].graph.ch[0].chain[2] = 99; }
static void m_nvls_count(struct gcoll_plan *p) { p->classes[0].graph.nvls_nheads = 9; }
static void m_nvls_range(struct gcoll_plan *p) {
  p->classes[0].graph.nvls_nheads = 2;
  p->classes[0].graph.nvls_heads[1] = 8;
}
static void m_nvls_dup(struct gcoll_plan *p) {
  p->classes[0].graph.nvls_nheads = 3;
  p->classes[0].graph.nvls_heads[0] = 2;
  p->classes[0].graph.nvls_heads[1] = 1;
  p->classes[0].graph.nvls_heads[2] = 2;
}
static void m_node_class(struct gcoll_plan *p) { p->node_class[2] = p->nclasses; }
static void m_node_overlap(struct gcoll_plan *p) { p->node_first_rank[2] = p->node_first_rank[1]; }
static void m_node_gap_last(struct gcoll_plan *p) { p->node_first_rank[p->nnodes - 1] += 1; }
static void m_node_swapped(struct gcoll_plan *p) {
  int t = p->node_first_rank[1];
  p->node_first_rank[1] = p->node_first_rank[2];
  p->node_first_rank[2] = t;
}
static void m_node_negative(struct gcoll_plan *p) { p->node_first_rank[0] = -3; }
static void m_order_range(struct gcoll_plan *p) { p->ring_node_order[1] = p->nnodes; }
static void m_order_dup(struct gcoll_plan *p) { p->ring_node_order[1] = p->ring_node_order[2]; }
static void m_t1_root(struct gcoll_plan *p) { p->t1_root = 1; }
static void m_t1_parent_range(struct gcoll_plan *p) { p->t1_parent[3] = p->nnodes; }
static void m_t1_parent_low(struct gcoll_plan *p) { p->t1_parent[3] = -2; }
static void m_t1_own_parent(struct gcoll_plan *p) { p->t1_parent[3] = 3; }
static void m_t1_two_roots(struct gcoll_plan *p) { p->t1_parent[p->nnodes - 1] = -1; }
static void m_t2_root_moved(struct gcoll_plan *p) { p->t2_root = (p->t2_root + 1) % p->nnodes; }
/* Nodes 1 and 2 parent each other while node 0 stays the root. */
static void m_t1_cycle(struct gcoll_plan *p) {
  p->t1_parent[1] = 2;
  p->t1_parent[2] = 1;
}
static void m_t2_cycle(struct gcoll_plan *p) {
  int a = p->t2_root == 1 ? 3 : 1, b = p->t2_root == 2 ? 4 : 2;
  p->t2_parent[a] = b;
  p->t2_parent[b] = a;
}
/* Four children under the root: more than the endpoint can take. */
static void m_t1_arity(struct gcoll_plan *p) {
  for (int n = 1; n <= 4; n++) p->t1_parent[n] = 0;
}
static void m_construction(struct gcoll_plan *p) {
  p->t2_construction = p->t2_construction == GCOLL_T2_MIRROR ? GCOLL_T2_SHIFT : GCOLL_T2_MIRROR;
}
/* t2 := t1: every interior node of t1 is interior twice. */
static void m_t2_equals_t1(struct gcoll_plan *p) {
  memcpy(p->t2_parent, p->t1_parent, (size_t)p->nnodes * sizeof(int));
  p->t2_root = p->t1_root;
}

static int nchildren(const int *parent, int n, int v) {
  int c = 0;
  for (int i = 0; i < n; i++) c += parent[i] == v;
  return c;
}

static int is_ancestor(const int *parent, int anc, int v) {
  for (int x = v; x >= 0; x = parent[x])
    if (x == anc) return 1;
  return 0;
}

/* Moves one t1 leaf under another node that is a leaf in t2 and has room:
 * a valid tree with no node interior twice, but not the canonical one. */
static void m_t1_not_canonical(struct gcoll_plan *p) {
  int n = p->nnodes;
  for (int v = 1; v < n; v++) {
    if (nchildren(p->t1_parent, n, v) != 0) continue;
    for (int u = 0; u < n; u++) {
      if (u == v || u == p->t1_parent[v] || nchildren(p->t1_parent, n, u) >= 2) continue;
      if (nchildren(p->t2_parent, n, u) != 0 || is_ancestor(p->t1_parent, v, u)) continue;
      if (nchildren(p->t1_parent, n, u) == 0 && nchildren(p->t2_parent, n, u) != 0) continue;
      p->t1_parent[v] = u;
      return;
    }
  }
  fail_msg("no leaf to move in a %d-node plan", n);
}
static void m_tuning_rows_zero(struct gcoll_plan *p) { p->ntuning[GCOLL_COLL_BROADCAST] = 0; }
static void m_tuning_rows_many(struct gcoll_plan *p) {
  p->ntuning[GCOLL_COLL_REDUCE] = GCOLL_MAX_TUNING + 1;
}
/* Two rows where there was one: the first limited, then equal limits. */
static void two_rows(struct gcoll_plan *p, int c) {
  p->ntuning[c] = 2;
  p->tuning[c][0] = (struct gcoll_tuning_entry){4096, GCOLL_ALGO_RING, GCOLL_PROTO_LL, 1};
  p->tuning[c][1] = (struct gcoll_tuning_entry){UINT64_MAX, GCOLL_ALGO_RING, GCOLL_PROTO_SIMPLE,
                                                p->nchannels};
}
static void m_tuning_not_increasing(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_ALLGATHER);
  p->ntuning[GCOLL_COLL_ALLGATHER] = 3;
  p->tuning[GCOLL_COLL_ALLGATHER][2] = p->tuning[GCOLL_COLL_ALLGATHER][1];
  p->tuning[GCOLL_COLL_ALLGATHER][1] = p->tuning[GCOLL_COLL_ALLGATHER][0];
}
static void m_tuning_last_limited(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_REDUCESCATTER);
  p->tuning[GCOLL_COLL_REDUCESCATTER][1].max_bytes = 1 << 30;
}
static void m_tuning_middle_unlimited(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_ALLREDUCE);
  p->tuning[GCOLL_COLL_ALLREDUCE][0].max_bytes = UINT64_MAX;
}
static void m_tuning_algo(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_ALLREDUCE);
  p->tuning[GCOLL_COLL_ALLREDUCE][1].algo = (enum gcoll_algo)GCOLL_NALGOS;
}
static void m_tuning_proto(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_ALLREDUCE);
  p->tuning[GCOLL_COLL_ALLREDUCE][0].proto = (enum gcoll_proto)7;
}
static void m_tuning_channels_zero(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_BROADCAST);
  p->tuning[GCOLL_COLL_BROADCAST][0].nchannels = 0;
}
static void m_tuning_channels_many(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_BROADCAST);
  p->tuning[GCOLL_COLL_BROADCAST][1].nchannels = p->nchannels + 1;
}
/* pcie-2s-4gpu has no NVSwitch, so NVLS anywhere in a mixed plan is wrong. */
static void m_tuning_nvls_no_heads(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_ALLREDUCE);
  p->tuning[GCOLL_COLL_ALLREDUCE][1].algo = GCOLL_ALGO_NVLS;
}

static void m_tuning_tree_broadcast(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_BROADCAST);
  p->tuning[GCOLL_COLL_BROADCAST][0].algo = GCOLL_ALGO_TREE;
}
static void m_tuning_nvls_reduce(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_REDUCE);
  p->tuning[GCOLL_COLL_REDUCE][1].algo = GCOLL_ALGO_NVLS;
}
/* Tree allreduce is what the tuner picks for small messages: allowed. */
static void m_tuning_tree_allreduce(struct gcoll_plan *p) {
  two_rows(p, GCOLL_COLL_ALLREDUCE);
  p->tuning[GCOLL_COLL_ALLREDUCE][0].algo = GCOLL_ALGO_TREE;
}

static const struct corruption corruptions[] = {
    {"nranks 0", 4, 0, m_nranks_zero, "0 ranks"},
    {"nranks short", 4, 0, m_nranks_short, "outside"},
    {"nranks long", 4, 0, m_nranks_long, "belongs to no node"},
    {"more nodes than ranks", 4, 0, m_nnodes_gt_nranks, "nodes for"},
    {"odd channels", 4, 0, m_channels_odd, "even count"},
    {"no channels", 4, 0, m_channels_zero, "even count"},
    {"too many channels", 4, 0, m_channels_many, "even count"},
    {"no classes", 4, 0, m_classes_zero, "topology classes"},
    {"too many classes", 4, 0, m_classes_many, "topology classes"},
    {"missing array", 4, 0, m_no_arrays, "no node arrays"},
    {"class without name", 4, 0, m_class_no_name, "has no name"},
    {"class name twice", 6, 1, m_class_dup_name, "used twice"},
    {"class without ranks", 4, 0, m_class_nlocal_zero, "local ranks"},
    {"class intra net", 4, 0, m_class_edge, "intra edge"},
    {"class bandwidth NaN", 4, 0, m_class_bw_nan, "bandwidth"},
    {"class bandwidth negative", 4, 0, m_class_bw_negative, "bandwidth"},
    {"class searched channels", 4, 0, m_class_searched, "searched channels"},
    {"ring duplicate", 4, 0, m_ring_dup, "ring order"},
    {"ring out of range", 4, 0, m_ring_range, "out of range"},
    {"ring negative", 4, 0, m_ring_negative, "out of range"},
    {"chain duplicate", 4, 0, m_chain_dup, "tree chain 0 is not a permutation"},
    {"chain out of range", 4, 0, m_chain_range, "tree chain"},
    {"nvls head count", 4, 0, m_nvls_count, "NVLS heads"},
    {"nvls head range", 4, 0, m_nvls_range, "NVLS head 1"},
    {"nvls head twice", 4, 0, m_nvls_dup, "appears twice"},
    {"node class", 4, 0, m_node_class, "has class"},
    {"node overlap", 4, 0, m_node_overlap, "duplicate rank"},
    {"node gap at the end", 4, 0, m_node_gap_last, "outside"},
    {"node order of ranks", 4, 0, m_node_swapped, "node ranks must follow"},
    {"node negative rank", 4, 0, m_node_negative, "outside"},
    {"ring node order range", 4, 0, m_order_range, "node_order entry"},
    {"ring node order twice", 4, 0, m_order_dup, "not a permutation"},
    {"t1 root", 4, 0, m_t1_root, "rooted at node 0"},
    {"t1 parent range", 6, 0, m_t1_parent_range, "outside -1"},
    {"t1 parent below -1", 6, 0, m_t1_parent_low, "outside -1"},
    {"t1 own parent", 6, 0, m_t1_own_parent, "its own parent"},
    {"t1 two roots", 6, 0, m_t1_two_roots, "2 roots"},
    {"t2 root moved", 6, 0, m_t2_root_moved, "tree t2: root is node"},
    {"t1 cycle", 6, 0, m_t1_cycle, "tree t1: node 1 has no path to the root"},
    {"t2 cycle", 8, 0, m_t2_cycle, "tree t2"},
    {"t1 arity", 8, 0, m_t1_arity, "children"},
    {"t2 construction", 6, 0, m_construction, "construction"},
    {"t2 construction odd", 7, 0, m_construction, "construction"},
    {"t2 equals t1", 8, 0, m_t2_equals_t1, "interior in both trees"},
    {"t1 not canonical", 16, 0, m_t1_not_canonical, "the double binary tree over 16 nodes"},
    {"tuning no rows", 4, 0, m_tuning_rows_zero, "tuning broadcast has 0 rows"},
    {"tuning too many rows", 4, 0, m_tuning_rows_many, "tuning reduce has 17 rows"},
    {"tuning not increasing", 4, 0, m_tuning_not_increasing, "does not increase"},
    {"tuning last row limited", 4, 0, m_tuning_last_limited, "last row must have no limit"},
    {"tuning middle unlimited", 4, 0, m_tuning_middle_unlimited, "only the last row"},
    {"tuning algo", 4, 0, m_tuning_algo, "unknown algorithm"},
    {"tuning proto", 4, 0, m_tuning_proto, "unknown algorithm or protocol"},
    {"tuning channels 0", 4, 0, m_tuning_channels_zero, "0 channels"},
    {"tuning channels many", 4, 0, m_tuning_channels_many, "channels, expected 1.."},
    {"tuning nvls without heads", 5, 1, m_tuning_nvls_no_heads, "has no NVLS heads"},
    {"tuning tree broadcast", 4, 0, m_tuning_tree_broadcast, "broadcast row 0 uses tree"},
    {"tuning nvls reduce", 1, 0, m_tuning_nvls_reduce, "reduce row 1 uses nvls"},
};

/* ---- uneven nodes: what must still be refused ------------------------------ */

static void identity(int *v, int n) {
  for (int i = 0; i < n; i++) v[i] = i;
}

/* A class whose local_ranks disagrees with its nodes' rank ranges, with its
 * ring and chains still permutations of the new count, so only the node
 * invariants can catch it. */
static void set_nlocal(struct gcoll_plan *p, int k, int nlocal) {
  struct gcoll_plan_class *c = &p->classes[k];
  c->nlocal = nlocal;
  c->graph.nlocal = nlocal;
  for (int s = 0; s < c->graph.nchannels; s++) {
    identity(c->graph.ch[s].ring, nlocal);
    identity(c->graph.ch[s].chain, nlocal);
  }
}
static void u_nlocal_short(struct gcoll_plan *p) { set_nlocal(p, 0, 2); }
static void u_nlocal_long(struct gcoll_plan *p) { set_nlocal(p, 1, 2); }
/* Every rank still in exactly one node, but nodes out of rank order. */
static void u_first_ranks_reversed(struct gcoll_plan *p) {
  static const int first[] = {4, 3, 1, 0};  /* 3, 1, 2 and 1 ranks */
  memcpy(p->node_first_rank, first, sizeof(first));
}
/* Node 1 (1 rank) given the 3-rank class. */
static void u_node_class_bigger(struct gcoll_plan *p) { p->node_class[1] = 0; }
/* Node 0 (3 ranks) given the 1-rank class. */
static void u_node_class_smaller(struct gcoll_plan *p) { p->node_class[0] = 1; }
/* Nodes 1 and 2 swap classes: ranges no longer follow each other. */
static void u_node_classes_swapped(struct gcoll_plan *p) {
  p->node_class[1] = 2;
  p->node_class[2] = 1;
}
static void u_first_rank_even(struct gcoll_plan *p) {
  for (int n = 0; n < p->nnodes; n++) p->node_first_rank[n] = 2 * n;  /* as if 2 per node */
}
static void u_ring_dup(struct gcoll_plan *p) { p->classes[2].graph.ch[0].ring[1] = 0; }
static void u_chain_range(struct gcoll_plan *p) { p->classes[0].graph.ch[1].chain[2] = 3; }
static void u_t2_parent(struct gcoll_plan *p) { p->t2_parent[0] = -1; }
static void u_order_dup(struct gcoll_plan *p) { p->ring_node_order[3] = p->ring_node_order[0]; }

static const struct {
  const char *label;
  mutate_fn fn;
  const char *needle;
} uneven_corruptions[] = {
    {"class local_ranks 3 -> 2", u_nlocal_short, "rank 2 belongs to no node"},
    {"class local_ranks 1 -> 2", u_nlocal_long, "duplicate rank 4 in node 2"},
    {"nodes in reverse rank order", u_first_ranks_reversed,
     "node 1 starts at rank 3, expected 7 (node ranks must follow"},
    {"1-rank node with the 3-rank class", u_node_class_bigger, "duplicate rank"},
    {"3-rank node with the 1-rank class", u_node_class_smaller, "belongs to no node"},
    {"classes of nodes 1 and 2 swapped", u_node_classes_swapped, "duplicate rank 4 in node 2"},
    {"first ranks of an even layout", u_first_rank_even, "duplicate rank"},
    {"ring of the 2-rank class", u_ring_dup, "class 'cpu-only-3' ring order 0"},
    {"chain of the 3-rank class", u_chain_range, "class 'cpu-only' tree chain 1"},
    {"t2 with two roots", u_t2_parent, "tree t2"},
    {"node order twice", u_order_dup, "not a permutation"},
};

static void test_uneven_corruptions_rejected(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(uneven_corruptions) / sizeof(uneven_corruptions[0]); i++) {
    struct gcoll_plan *p = build_uneven_cpu();
    assert_verifies(p, uneven_corruptions[i].label);
    uneven_corruptions[i].fn(p);
    char err[512] = "";
    if (gcoll_plan_verify(p, err, sizeof(err)) != -1)
      fail_msg("'%s' not detected", uneven_corruptions[i].label);
    if (getenv("GCOLL_TEST_VERBOSE")) fprintf(stderr, "%s: %s\n", uneven_corruptions[i].label, err);
    if (strstr(err, uneven_corruptions[i].needle) == NULL)
      fail_msg("'%s': message lacks '%s': %s", uneven_corruptions[i].label,
               uneven_corruptions[i].needle, err);
    assert_null(strchr(err, '\n'));
    gcoll_plan_free(p);
  }
}

static void test_corruptions_rejected(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(corruptions) / sizeof(corruptions[0]); i++) {
    const struct corruption *c = &corruptions[i];
    struct gcoll_plan *p = c->mixed ? build_mixed(c->nnodes) : build_uniform(h100, c->nnodes, 0);
    assert_verifies(p, c->label);
    c->fn(p);
    char err[512] = "";
    int rc = gcoll_plan_verify(p, err, sizeof(err));
    if (rc != -1) fail_msg("'%s' not detected", c->label);
    if (strstr(err, c->needle) == NULL)
      fail_msg("'%s': message lacks '%s': %s", c->label, c->needle, err);
    assert_null(strchr(err, '\n'));
    gcoll_plan_free(p);
  }
}

static void test_tree_allreduce_allowed(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(h100, 4, 0);
  m_tuning_tree_allreduce(p);
  assert_verifies(p, "tree allreduce row");
  gcoll_plan_free(p);
  /* NVLS allreduce on one NVSwitch node: allowed. */
  p = build_uniform(h100, 1, 0);
  two_rows(p, GCOLL_COLL_ALLREDUCE);
  p->tuning[GCOLL_COLL_ALLREDUCE][1].algo = GCOLL_ALGO_NVLS;
  assert_verifies(p, "nvls allreduce row");
  gcoll_plan_free(p);
}

/* The same corruptions applied at random places of random plans: verify
 * must refuse every one (never crash, never accept). */
static void test_random_permutation_damage(void **state) {
  (void)state;
  unsigned long long seed = 7;
  for (int round = 0; round < 200; round++) {
    int n = 2 + (int)(test_rand(&seed) % 12);
    struct gcoll_plan *p = build_mixed(n);
    int k = (int)(test_rand(&seed) % (unsigned)p->nclasses);
    struct gcoll_plan_class *c = &p->classes[k];
    int s = (int)(test_rand(&seed) % (unsigned)(p->nchannels / 2));
    int i = (int)(test_rand(&seed) % (unsigned)c->nlocal);
    int j = (int)((i + 1 + test_rand(&seed) % (unsigned)(c->nlocal - 1)) % (unsigned)c->nlocal);
    int *v = round % 2 ? c->graph.ch[s].ring : c->graph.ch[s].chain;
    v[i] = v[j];
    char err[512] = "";
    assert_int_equal(gcoll_plan_verify(p, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "is not a permutation of the local ranks"));
    assert_non_null(strstr(err, c->name));
    gcoll_plan_free(p);
  }
}

/* Random parent changes in either tree are caught unless they leave the
 * tree unchanged. */
static void test_random_tree_damage(void **state) {
  (void)state;
  unsigned long long seed = 11;
  for (int round = 0; round < 300; round++) {
    int n = 2 + (int)(test_rand(&seed) % 30);
    struct gcoll_plan *p = build_uniform(cpu, n, 1);
    int *parent = round % 2 ? p->t2_parent : p->t1_parent;
    int v = (int)(test_rand(&seed) % (unsigned)n);
    int np = (int)(test_rand(&seed) % (unsigned)(n + 1)) - 1;
    if (np == parent[v]) np = np + 1 < n ? np + 1 : -1;
    parent[v] = np;
    char err[512] = "";
    if (gcoll_plan_verify(p, err, sizeof(err)) != -1)
      fail_msg("tree t%d node %d parent -> %d over %d nodes accepted", round % 2 ? 2 : 1, v, np, n);
    assert_non_null(strstr(err, "tree"));
    gcoll_plan_free(p);
  }
}

/* ---- damaged text ------------------------------------------------------------- */

static char *plan_to_yaml(const struct gcoll_plan *p) {
  char *buf = NULL, err[512] = "";
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  assert_non_null(f);
  assert_int_equal(gcoll_plan_write_stream(p, f, err, sizeof(err)), 0);
  assert_int_equal(fclose(f), 0);
  return buf;
}

/* Replaces the first `from` after `anchor`; returns the 1-based line. */
static int replace_in(char **yaml, const char *anchor, const char *from, const char *to) {
  char *a = strstr(*yaml, anchor);
  if (a == NULL) fail_msg("anchor '%s' not in the plan", anchor);
  char *at = strstr(a, from);
  if (at == NULL) fail_msg("'%s' not after '%s'", from, anchor);
  size_t pre = (size_t)(at - *yaml), fl = strlen(from), tl = strlen(to), total = strlen(*yaml);
  char *out = malloc(total - fl + tl + 1);
  memcpy(out, *yaml, pre);
  memcpy(out + pre, to, tl);
  memcpy(out + pre + tl, at + fl, total - pre - fl + 1);
  int line = 1;
  for (size_t i = 0; i < pre; i++) line += out[i] == '\n';
  free(*yaml);
  *yaml = out;
  return line;
}

struct text_damage {
  const char *anchor, *from, *to;
  int by_reader;      /* 1: the reader refuses it at the damaged line */
  const char *needle; /* in the reader's or verify's message */
};

/* On the 3,1,2,1 cpu-only plan: a class's local_ranks that disagrees with
 * its ring, chains or nodes' rank ranges is refused by the reader, with the
 * file and line. */
static const struct text_damage uneven_damages[] = {
    {"cpu-only-2:", "local_ranks: 1", "local_ranks: 2", 1, "local_ranks is 2"},
    {"cpu-only-3:", "local_ranks: 2", "local_ranks: 1", 1, "local_ranks is 1"},
    {"nodes:", "topology: cpu-only-2, ranks: 3}", "topology: cpu-only, ranks: 3}", 1,
     "not a multiple of local_ranks 3"},
    {"nodes:", "topology: cpu-only-3, ranks: 4-5}", "topology: cpu-only-2, ranks: 4-5}", 1,
     "hold 2"},
    {"nodes:", "ranks: 3}", "ranks: 3-4}", 1, "hold 2"},
    {"nodes:", "ranks: 4-5}", "ranks: 5-6}", 1, "rank 6 is placed twice"},
};

static void test_uneven_damaged_text(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uneven_cpu();
  char *orig = plan_to_yaml(p);
  /* Undamaged, it reads back and verifies. */
  char err[512] = "";
  struct gcoll_plan *q = gcoll_plan_read_mem(orig, strlen(orig), "p.yaml", err, sizeof(err));
  if (q == NULL) fail_msg("%s", err);
  assert_verifies(q, "uneven plan read back");
  assert_int_equal(q->nranks, 7);
  gcoll_plan_free(q);
  for (size_t i = 0; i < sizeof(uneven_damages) / sizeof(uneven_damages[0]); i++) {
    const struct text_damage *d = &uneven_damages[i];
    char *yaml = strdup(orig);
    replace_in(&yaml, d->anchor, d->from, d->to);
    err[0] = '\0';
    q = gcoll_plan_read_mem(yaml, strlen(yaml), "p.yaml", err, sizeof(err));
    if (q != NULL) {
      int vrc = gcoll_plan_verify(q, err, sizeof(err));
      gcoll_plan_free(q);
      fail_msg("uneven damage %zu ('%s' -> '%s') read without error (verify %d: %s)", i,
               d->from, d->to, vrc, err);
    }
    if (getenv("GCOLL_TEST_VERBOSE")) fprintf(stderr, "%s\n", err);
    if (strncmp(err, "p.yaml:", 7) != 0 || strstr(err, d->needle) == NULL)
      fail_msg("uneven damage %zu: expected p.yaml:LINE and '%s', got: %s", i, d->needle, err);
    free(yaml);
  }
  free(orig);
  gcoll_plan_free(p);
}

/* On a 6-node dgx-h100 plan. */
static const struct text_damage damages[] = {
    {"t1:", "root: 0", "root: 1", 0, "rooted at node 0"},
    {"construction:", "mirror", "shift", 0, "construction"},
    {"t2:", "root: ", "root: 9", 1, "tree.t2.root"},
    {"t1:", "parent: [-1", "parent: [-2", 1, "tree.t1.parent"},
    {"order: [", "order: [", "order: [3, 3, ", 1, "order"},
    {"nvls:", "heads: [0, 1", "heads: [1, 1", 1, "heads"},
    {"nvls:", "heads: [0", "heads: [8", 1, "heads"},
    {"ranks:", "ranks: 48", "ranks: 47", 0, "ranks"},
    {"channels:", "channels: ", "channels: 0 #", 1, "channels"},
    {"allgather:", "channels: ", "channels: -", 1, "channels"},
    {"tuning:", "max_bytes: ", "max_bytes: -", 1, "max_bytes"},
    {"tuning:", "max_bytes: ", "max_bytes: 99999999999999999999", 1, "max_bytes"},
    {"hash:", "hash: \"", "hash: \"1", 1, "hash"},
    {"local_ranks:", "local_ranks: 8", "local_ranks: 0", 1, "local_ranks"},
    {"bandwidth:", "ring: ", "ring: -", 1, "bandwidth.ring"},
};

static void test_damaged_text(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(h100, 6, 0);
  char *orig = plan_to_yaml(p);
  for (size_t i = 0; i < sizeof(damages) / sizeof(damages[0]); i++) {
    const struct text_damage *d = &damages[i];
    char *yaml = strdup(orig), err[512] = "";
    int line = replace_in(&yaml, d->anchor, d->from, d->to);
    struct gcoll_plan *q = gcoll_plan_read_mem(yaml, strlen(yaml), "p.yaml", err, sizeof(err));
    if (d->by_reader) {
      if (q != NULL) fail_msg("damage %zu ('%s' -> '%s') read without error", i, d->from, d->to);
      char want[32];
      snprintf(want, sizeof(want), "p.yaml:%d: ", line);
      if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("damage %zu: expected '%s...', got: %s", i, want, err);
    } else {
      if (q == NULL) {
        /* Refused early is fine as long as it says where. */
        if (strncmp(err, "p.yaml:", 7) != 0) fail_msg("damage %zu: %s", i, err);
      } else {
        if (gcoll_plan_verify(q, err, sizeof(err)) == 0)
          fail_msg("damage %zu ('%s' -> '%s') passed verify", i, d->from, d->to);
        gcoll_plan_free(q);
      }
    }
    if (getenv("GCOLL_TEST_VERBOSE")) fprintf(stderr, "%s\n", err);
    if (strstr(err, d->needle) == NULL)
      fail_msg("damage %zu: message lacks '%s': %s", i, d->needle, err);
    free(yaml);
  }
  free(orig);
  gcoll_plan_free(p);
}

/* Node 1's t1 parent rewritten to each other node in turn: whichever way it
 * breaks the tree (cycle, arity, shape, a node interior twice), reader or
 * verify says so. */
static void test_damaged_t1_parent(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(h100, 9, 0);
  char *orig = plan_to_yaml(p);
  const char *key = "t1: {root: 0, parent: [-1, ";
  char *at = strstr(orig, key);
  assert_non_null(at);
  at += strlen(key);
  int old = atoi(at);
  assert_int_equal(old, p->t1_parent[1]);
  const char *rest = strchr(at, ',');
  assert_non_null(rest);
  for (int np = -1; np < 9; np++) {
    if (np == old) continue;
    size_t pre = (size_t)(at - orig), len = strlen(orig) + 16;
    char *yaml = malloc(len), err[512] = "";
    snprintf(yaml, len, "%.*s%d%s", (int)pre, orig, np, rest);
    struct gcoll_plan *q = gcoll_plan_read_mem(yaml, strlen(yaml), "p.yaml", err, sizeof(err));
    if (q == NULL) {
      assert_int_equal(strncmp(err, "p.yaml:", 7), 0);
    } else {
      assert_int_equal(q->t1_parent[1], np);
      if (gcoll_plan_verify(q, err, sizeof(err)) == 0) fail_msg("t1 parent %d accepted", np);
      gcoll_plan_free(q);
    }
    if (strstr(err, "t1") == NULL && strstr(err, "interior in both trees") == NULL)
      fail_msg("t1 parent %d: message does not say t1: %s", np, err);
    free(yaml);
  }
  free(orig);
  gcoll_plan_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_built_plans_verify),
      cmocka_unit_test(test_uneven_plans_verify),
      cmocka_unit_test(test_uneven_corruptions_rejected),
      cmocka_unit_test(test_uneven_damaged_text),
      cmocka_unit_test(test_permuted_node_order_verifies),
      cmocka_unit_test(test_corruptions_rejected),
      cmocka_unit_test(test_tree_allreduce_allowed),
      cmocka_unit_test(test_random_permutation_damage),
      cmocka_unit_test(test_random_tree_damage),
      cmocka_unit_test(test_damaged_text),
      cmocka_unit_test(test_damaged_t1_parent),
  };
  return cmocka_run_group_tests(tests, test_ref_load, test_ref_free);
}
