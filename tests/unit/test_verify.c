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
  struct gcoll_plan_input in = {nnodes, topo, NULL, rpn, 0, -1, -1};
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

/* Permuting the ring's node order keeps a valid plan: any permutation is
 * one cycle. */
static void test_permuted_node_order_verifies(void **state) {
  (void)state;
  unsigned long long seed = 42;
  struct gcoll_plan *p = build_mixed(23);
  for (int round = 0; round < 50; round++) {
    for (int i = p->nnodes - 1; i > 0; i--) {
      int j = (int)(test_rand(&seed) % (unsigned)(i + 1)), t = p->ring_node_order[i];
      p->ring_node_order[i] = p->ring_node_order[j];
      p->ring_node_order[j] = t;
    }
    assert_verifies(p, "permuted node order");
  }
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
