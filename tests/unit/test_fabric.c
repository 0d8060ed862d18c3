/* Switch-aware node order (issue 23 part 2): Slurm's topology.conf read
 * strictly, and plans whose rings and trees follow it.
 *
 * The generated fabrics put hosts under leaves at random (seeded), so host
 * order is not switch order, as on clusters whose node names were given
 * before the cabling. What each check expects is computed here from the
 * generator's own leaf assignment, not from the fabric reader: how many
 * ring hops must cross each level when every switch's hosts are visited
 * together (one per non-empty subtree below that level, when there are
 * several), against what the node-order ring crosses. Trees are counted
 * edge by edge on the plans' parent arrays. The counts are printed for the
 * README. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/fabric.h"
#include "graph/plan.h"
#include "testutil.h"

static void expect_refused(const char *text, const char *line_and_words) {
  char err[512] = "";
  struct gcoll_fabric *f = gcoll_fabric_parse(text, strlen(text), "t.conf", err, sizeof(err));
  if (f != NULL) {
    gcoll_fabric_free(f);
    fail_msg("accepted: %s", text);
  }
  if (strstr(err, line_and_words) == NULL || strchr(err, '\n') != NULL)
    fail_msg("'%s' gave '%s', expected '%s'", text, err, line_and_words);
}

static void test_refusals(void **state) {
  (void)state;
  expect_refused("SwitchName=s0 Switches=nope\n", "t.conf:1: switch nope is not defined");
  expect_refused("SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b\n", "t.conf:2: s0 is named twice");
  expect_refused("SwitchName=a Nodes=x\nSwitchName=b Switches=a\nSwitchName=c Switches=a\n",
                 "switch a is below b and c");
  expect_refused("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", "is in a cycle");
  expect_refused("SwitchName=a Switches=a\n", "t.conf:1: a lists itself");
  expect_refused("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n2\n",
                 "node n2 is under a and b");
  expect_refused("SwitchName=a Nodes=n1\nBlockName=b Nodes=n2\n",
                 "t.conf:2: SwitchName and BlockName lines mixed");
  expect_refused("BlockName=b Switches=a\n", "t.conf:1: block b: a block has no Switches=");
  expect_refused("SwitchName=a Nodes\n", "t.conf:1: 'Nodes' is not KEY=VALUE");
  expect_refused("Nodes=n1\n", "t.conf:1: Nodes= or Switches= without SwitchName");
  expect_refused("# nothing\n\n", "no SwitchName= or BlockName=");
  expect_refused("SwitchName=a Nodes=n[1-\n", "t.conf:1: Nodes=n[1-:");
  expect_refused("SwitchName=a SwitchName=b\n", "t.conf:1: two names on one line");
  const char nul[] = "SwitchName=a Nodes=n1\0x\n";
  char err[256];
  assert_null(gcoll_fabric_parse(nul, sizeof(nul) - 1, "t.conf", err, sizeof(err)));
  assert_non_null(strstr(err, "NUL"));
}

/* Slurm's own examples: keys in any case, comments, LinkSpeed ignored. */
static void test_levels(void **state) {
  (void)state;
  const char *conf =
      "# topology/tree\n"
      "switchname=core switches=agg[0-1]\n"
      "SwitchName=agg0 Switches=leaf[0-1] LinkSpeed=400\n"
      "SwitchName=agg1 Switches=leaf[2-3]\n"
      "SwitchName=leaf0 Nodes=n[0-1]\n"
      "SwitchName=leaf1 Nodes=n[2-3]\n"
      "SwitchName=leaf2 Nodes=n[4-5]  # trailing comment\n"
      "SwitchName=leaf3 Nodes=n[6-7]\n";
  char err[256];
  struct gcoll_fabric *f = gcoll_fabric_parse(conf, strlen(conf), "tree.conf", err, sizeof(err));
  if (f == NULL) fail_msg("%s", err);
  assert_int_equal(gcoll_fabric_levels(f), 2);
  assert_int_equal(gcoll_fabric_cross_level(f, "n0", "n1"), 0);
  assert_int_equal(gcoll_fabric_cross_level(f, "n0", "n3"), 1);
  assert_int_equal(gcoll_fabric_cross_level(f, "n1", "n6"), 2);
  assert_int_equal(gcoll_fabric_cross_level(f, "n1", "elsewhere"), 2);
  const char *hosts[] = {"n7", "x", "n0", "n5", "n2", "n1", "n6", "n3", "n4"};
  int order[9];
  assert_int_equal(gcoll_fabric_order(f, hosts, 9, order), 0);
  /* leaf0: n0 n1, leaf1: n2 n3, leaf2: n5 n4 (hosts[] order), leaf3: n7 n6, then x. */
  const int want[9] = {2, 5, 4, 7, 3, 8, 0, 6, 1};
  assert_memory_equal(order, want, sizeof(want));
  gcoll_fabric_free(f);

  const char *blocks = "BlockName=b1 Nodes=g[1-4]\nBlockName=b2 Nodes=g[5-8]\nBlockSizes=4,8\n";
  f = gcoll_fabric_parse(blocks, strlen(blocks), "block.conf", err, sizeof(err));
  if (f == NULL) fail_msg("%s", err);
  assert_int_equal(gcoll_fabric_levels(f), 1);
  assert_int_equal(gcoll_fabric_cross_level(f, "g1", "g4"), 0);
  assert_int_equal(gcoll_fabric_cross_level(f, "g4", "g5"), 1);
  gcoll_fabric_free(f);
}

/* ---- generated fabrics ------------------------------------------------------ */

struct gen {
  int nodes, leaf_size, fanout, levels;   /* levels: 2 (leaf, spine) or 3 (leaf, agg, core) */
  int *leaf;                              /* the generator's leaf of host i */
  char **names;
};

static uint64_t rnd_state;
static uint64_t rnd(void) {
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 7;
  rnd_state ^= rnd_state << 17;
  return rnd_state;
}

/* A topology.conf with hosts h00000.. spread over the leaves at random. */
static char *generate(struct gen *g) {
  int nleaves = (g->nodes + g->leaf_size - 1) / g->leaf_size;
  int *slot = malloc((size_t)g->nodes * sizeof(int));
  g->leaf = malloc((size_t)g->nodes * sizeof(int));
  g->names = malloc((size_t)g->nodes * sizeof(char *));
  for (int i = 0; i < g->nodes; i++) slot[i] = i;
  for (int i = g->nodes - 1; i > 0; i--) {   /* Fisher-Yates: host -> position */
    int j = (int)(rnd() % (uint64_t)(i + 1)), t = slot[i];
    slot[i] = slot[j];
    slot[j] = t;
  }
  size_t cap = (size_t)g->nodes * 24 + (size_t)nleaves * 64 + 4096, len = 0;
  char *conf = malloc(cap);
  for (int i = 0; i < g->nodes; i++) {
    g->leaf[i] = slot[i] / g->leaf_size;
    if (asprintf(&g->names[i], "h%05d", i) < 0) abort();
  }
  for (int l = 0; l < nleaves; l++) {
    len += (size_t)snprintf(conf + len, cap - len, "SwitchName=leaf%d Nodes=", l);
    int first = 1;
    for (int i = 0; i < g->nodes; i++)
      if (g->leaf[i] == l) {
        len += (size_t)snprintf(conf + len, cap - len, "%s%s", first ? "" : ",", g->names[i]);
        first = 0;
      }
    len += (size_t)snprintf(conf + len, cap - len, "\n");
  }
  if (g->levels == 2) {
    len += (size_t)snprintf(conf + len, cap - len, "SwitchName=spine Switches=leaf[0-%d]\n",
                            nleaves - 1);
  } else {
    int nagg = (nleaves + g->fanout - 1) / g->fanout;
    for (int a = 0; a < nagg; a++) {
      int hi = (a + 1) * g->fanout - 1 < nleaves - 1 ? (a + 1) * g->fanout - 1 : nleaves - 1;
      len += (size_t)snprintf(conf + len, cap - len, "SwitchName=agg%d Switches=leaf[%d-%d]\n", a,
                              a * g->fanout, hi);
    }
    len += (size_t)snprintf(conf + len, cap - len, "SwitchName=core Switches=agg[0-%d]\n",
                            nagg - 1);
  }
  free(slot);
  return conf;
}

/* The level hosts a and b cross, from the generator's leaves. */
static int gen_level(const struct gen *g, int a, int b) {
  if (g->leaf[a] == g->leaf[b]) return 0;
  if (g->levels == 2) return 1;
  return g->leaf[a] / g->fanout == g->leaf[b] / g->fanout ? 1 : 2;
}

/* Distinct non-empty subtrees of level L-1 (leaves for L = 1). */
static int subtrees_below(const struct gen *g, int level) {
  int nleaves = (g->nodes + g->leaf_size - 1) / g->leaf_size, count = 0;
  int ngroups = level == 1 ? nleaves : (nleaves + g->fanout - 1) / g->fanout;
  char *used = calloc((size_t)ngroups, 1);
  for (int i = 0; i < g->nodes; i++) {
    int k = level == 1 ? g->leaf[i] : g->leaf[i] / g->fanout;
    if (!used[k]++) count++;
  }
  free(used);
  return count;
}

static struct gcoll_plan *plan_for(const struct gen *g, const int *order) {
  static struct gcoll_topo *cpu;
  if (cpu == NULL) cpu = test_topo_load("cpu-only");
  const struct gcoll_topo **topos = malloc((size_t)g->nodes * sizeof(*topos));
  for (int i = 0; i < g->nodes; i++) topos[i] = cpu;
  char err[512];
  struct gcoll_plan_input in = {.nnodes = g->nodes, .node_topo = topos,
                                .node_host = (const char **)g->names, .ranks_per_node = 1,
                                .job_id = -1, .step_id = -1, .node_order = order};
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  free(topos);
  if (p == NULL) fail_msg("%s", err);
  if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("plan invalid: %s", err);
  return p;
}

static void count_tree(const struct gen *g, const int *parent, int *cross) {
  for (int n = 0; n < g->nodes; n++)
    if (parent[n] >= 0) cross[gen_level(g, n, parent[n])]++;
}

static void one_fabric(int nodes, int leaf_size, int fanout, int levels) {
  struct gen g = {.nodes = nodes, .leaf_size = leaf_size, .fanout = fanout, .levels = levels};
  char *conf = generate(&g), err[512];
  struct gcoll_fabric *f = gcoll_fabric_parse(conf, strlen(conf), "gen.conf", err, sizeof(err));
  if (f == NULL) fail_msg("%s", err);
  int *order = malloc((size_t)nodes * sizeof(int));
  assert_int_equal(gcoll_fabric_order(f, (const char *const *)g.names, nodes, order), 0);
  struct gcoll_plan *by_fabric = plan_for(&g, order), *by_node = plan_for(&g, NULL);
  int ring_f[3] = {0}, ring_n[3] = {0}, tree_f[3] = {0}, tree_n[3] = {0};
  for (int i = 0; i < nodes; i++) {
    int a = by_fabric->ring_node_order[i], b = by_fabric->ring_node_order[(i + 1) % nodes];
    if (nodes > 1) ring_f[gen_level(&g, a, b)]++;
    if (nodes > 1) ring_n[gen_level(&g, i, (i + 1) % nodes)]++;
    /* The reader's levels are the generator's. */
    assert_int_equal(gcoll_fabric_cross_level(f, g.names[a], g.names[b]), gen_level(&g, a, b));
  }
  count_tree(&g, by_fabric->t1_parent, tree_f);
  count_tree(&g, by_fabric->t2_parent, tree_f);
  count_tree(&g, by_node->t1_parent, tree_n);
  count_tree(&g, by_node->t2_parent, tree_n);
  /* Visiting each switch's hosts together crosses level >= L once per
   * non-empty subtree below L, when there are several. */
  for (int level = 1; level <= levels - 1; level++) {
    int want = subtrees_below(&g, level), got = 0, base = 0;
    for (int l = level; l < 3; l++) got += ring_f[l], base += ring_n[l];
    if (want == 1) want = 0;
    if (got != want)
      fail_msg("%d nodes, %d levels: the ring crosses level %d %d times, expected %d", nodes,
               levels, level, got, want);
    assert_true(got <= base);
  }
  int top = levels - 1;
  assert_true(tree_f[top] <= tree_n[top]);
  if (subtrees_below(&g, top) > 2 && nodes >= 64) {
    assert_true(ring_f[top] < ring_n[top]);
    assert_true(tree_f[top] < tree_n[top]);
  }
  printf("  %d levels, %5d nodes, %2d per leaf: ring hops across level 1/2: fabric %d/%d, "
         "node order %d/%d; tree edges (both trees): fabric %d/%d, node order %d/%d\n",
         levels, nodes, leaf_size, ring_f[1], ring_f[2], ring_n[1], ring_n[2], tree_f[1],
         tree_f[2], tree_n[1], tree_n[2]);
  gcoll_plan_free(by_fabric);
  gcoll_plan_free(by_node);
  gcoll_fabric_free(f);
  for (int i = 0; i < nodes; i++) free(g.names[i]);
  free(g.names);
  free(g.leaf);
  free(order);
  free(conf);
}

static void test_generated(void **state) {
  (void)state;
  rnd_state = 0x9e3779b97f4a7c15ull;
  static const int sizes[] = {8, 64, 512, 4096};
  for (int s = 0; s < 4; s++) {
    one_fabric(sizes[s], 8, 0, 2);
    one_fabric(sizes[s], 16, 8, 3);
  }
  one_fabric(100, 7, 3, 3);   /* partial leaves and aggregation switches */
}

/* A fabric plan survives writing and reading: the ring order and the trees
 * over it are what the reader sees, and verify accepts them. */
static void test_round_trip(void **state) {
  (void)state;
  struct gen g = {.nodes = 40, .leaf_size = 4, .fanout = 0, .levels = 2};
  rnd_state = 42;
  char *conf = generate(&g), err[512];
  struct gcoll_fabric *f = gcoll_fabric_parse(conf, strlen(conf), "gen.conf", err, sizeof(err));
  assert_non_null(f);
  int order[40];
  assert_int_equal(gcoll_fabric_order(f, (const char *const *)g.names, 40, order), 0);
  struct gcoll_plan *p = plan_for(&g, order);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  assert_int_equal(gcoll_plan_write_stream(p, m, err, sizeof(err)), 0);
  fclose(m);
  struct gcoll_plan *q = gcoll_plan_read_mem(buf, len, "mem", err, sizeof(err));
  if (q == NULL) fail_msg("%s", err);
  assert_int_equal(gcoll_plan_verify(q, err, sizeof(err)), 0);
  /* The fabric's order, started at node 0 (the same cycle). */
  int zero = 0;
  while (order[zero] != 0) zero++;
  for (int i = 0; i < 40; i++) assert_int_equal(q->ring_node_order[i], order[(zero + i) % 40]);
  assert_memory_equal(q->t1_parent, p->t1_parent, 40 * sizeof(int));
  assert_memory_equal(q->t2_parent, p->t2_parent, 40 * sizeof(int));
  /* A reader given other trees than the order's refuses the plan. */
  q->t1_parent[order[1]] = order[3] == q->t1_parent[order[1]] ? order[2] : order[3];
  assert_int_not_equal(gcoll_plan_verify(q, err, sizeof(err)), 0);
  gcoll_plan_free(q);
  gcoll_plan_free(p);
  free(buf);
  gcoll_fabric_free(f);
  for (int i = 0; i < 40; i++) free(g.names[i]);
  free(g.names);
  free(g.leaf);
  free(conf);
}

/* topology/block: blocks are NVLink domains where the topologies name
 * none (GB200 racks described to Slurm's block plugin), and the ring
 * crosses the network once per block; a tree fabric gives no domains. */
static void test_blocks_as_domains(void **state) {
  (void)state;
  /* Racks of 4 trays over interleaved host names. */
  const char *conf = "BlockName=r0 Nodes=t[0,2,4,6]\nBlockName=r1 Nodes=t[1,3,5,7]\n";
  char err[512];
  struct gcoll_fabric *f = gcoll_fabric_parse(conf, strlen(conf), "block.conf", err, sizeof(err));
  assert_non_null(f);
  const char *hosts[8] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"};
  int *blocks = gcoll_fabric_block_domains(f, hosts, 8), order[8];
  assert_non_null(blocks);
  for (int i = 0; i < 8; i++) assert_int_equal(blocks[i], i % 2);
  assert_int_equal(gcoll_fabric_order(f, hosts, 8, order), 0);
  struct gcoll_topo *tray = test_topo_load("gb200-tray");
  const struct gcoll_topo *topos[8];
  for (int i = 0; i < 8; i++) topos[i] = tray;
  struct gcoll_plan_input in = {.nnodes = 8, .node_topo = topos, .node_host = hosts,
                                .job_id = -1, .step_id = -1, .node_order = order,
                                .block_domain = blocks};
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("%s", err);
  assert_int_equal(gcoll_plan_verify(p, err, sizeof(err)), 0);
  int net_hops = 0;
  for (int i = 0; i < 8; i++) {
    int a = p->ring_node_order[i], b = p->ring_node_order[(i + 1) % 8];
    assert_int_equal(gcoll_plan_node_domain(p, a) == gcoll_plan_node_domain(p, b),
                     blocks[a] == blocks[b]);
    net_hops += blocks[a] != blocks[b];
  }
  assert_int_equal(net_hops, 2);   /* once each way between the two racks */
  gcoll_plan_free(p);
  /* Domains given outright win over blocks. */
  int mine[8] = {0, 0, 0, 0, 1, 1, 1, 1};
  in.node_domain = mine;
  p = gcoll_plan_build(&in, err, sizeof(err));
  assert_non_null(p);
  for (int i = 0; i < 8; i++)
    assert_int_equal(gcoll_plan_node_domain(p, i) == gcoll_plan_node_domain(p, 0), i < 4);
  gcoll_plan_free(p);
  free(blocks);
  gcoll_fabric_free(f);
  gcoll_topo_free(tray);
  const char *tree = "SwitchName=s Nodes=t[0-7]\n";
  f = gcoll_fabric_parse(tree, strlen(tree), "tree.conf", err, sizeof(err));
  assert_non_null(f);
  assert_null(gcoll_fabric_block_domains(f, hosts, 8));
  gcoll_fabric_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_levels),
      cmocka_unit_test(test_generated),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_blocks_as_domains),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
