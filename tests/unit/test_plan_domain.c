/* Multi-node NVLink domains (issue 21 part 4): GB200 NVL72 racks of 18
 * trays. Every check here recomputes what it expects from the node indices
 * and the domain each node was given (node / 18, or the topology's), not
 * from the plan's own domain array, and counts network hops on the rings
 * and trees the plan's consumers read (gcoll_plan_ring_ranks, rank views,
 * parent arrays). */
#define _GNU_SOURCE
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

#define TRAYS_PER_RACK 18

static struct gcoll_topo *tray;   /* etc/topologies/gb200-tray.yaml */

static int setup(void **state) {
  (void)state;
  tray = test_topo_load("gb200-tray");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  gcoll_topo_free(tray);
  return 0;
}

/* nnodes trays of one topology; node_domain NULL: from the topologies. */
static struct gcoll_plan *build(const struct gcoll_topo *const *topos, int nnodes,
                                const int *node_domain) {
  char err[512];
  const struct gcoll_topo **nt = malloc((size_t)nnodes * sizeof(*nt));
  assert_non_null(nt);
  for (int i = 0; i < nnodes; i++) nt[i] = topos[0];
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = nt, .job_id = -1, .step_id = -1,
                                .node_domain = node_domain};
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("build: %s", err);
  if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("verify: %s", err);
  free(nt);
  return p;
}

static int *racks(int nnodes, int per) {
  int *d = malloc((size_t)nnodes * sizeof(int));
  assert_non_null(d);
  for (int i = 0; i < nnodes; i++) d[i] = i / per;
  return d;
}

/* Ring hops whose two ranks are in different domains (want_dom[node]),
 * for channel c. */
static int ring_domain_crossings(const struct gcoll_plan *p, int c, const int *want_dom) {
  int *r = malloc((size_t)p->nranks * sizeof(int)), n = 0;
  assert_non_null(r);
  assert_int_equal(gcoll_plan_ring_ranks(p, c, r), 0);
  for (int i = 0; i < p->nranks; i++) {
    int a = gcoll_plan_node_of_rank(p, r[i]), b = gcoll_plan_node_of_rank(p, r[(i + 1) % p->nranks]);
    n += want_dom[a] != want_dom[b];
  }
  free(r);
  return n;
}

/* The edge a view must report between ranks of nodes a and b. */
static enum gcoll_edge want_edge(int a, int b, const int *want_dom) {
  return a == b || want_dom[a] == want_dom[b] ? GCOLL_EDGE_P2P : GCOLL_EDGE_NET;
}

/* Every rank's view: each ring and tree edge is p2p inside a domain and net
 * across, NICs are named only where the network is used; returns the net
 * ring edges (next direction) per channel in net_next[]. */
static void check_views(const struct gcoll_plan *p, const int *want_dom, int *net_next) {
  char err[256];
  struct gcoll_rank_view *v = malloc(sizeof(*v));
  assert_non_null(v);
  memset(net_next, 0, sizeof(int) * (size_t)p->nchannels);
  for (int r = 0; r < p->nranks; r++) {
    if (gcoll_plan_rank_view(p, r, v, err, sizeof(err)) != 0) fail_msg("view %d: %s", r, err);
    int me = gcoll_plan_node_of_rank(p, r);
    assert_int_equal(v->nvl_domain >= 0, p->node_domain != NULL);
    for (int c = 0; c < p->nchannels; c++) {
      const struct gcoll_ring_link *l = &v->ring[c];
      int pn = gcoll_plan_node_of_rank(p, l->prev), nn = gcoll_plan_node_of_rank(p, l->next);
      assert_int_equal(l->prev_edge, want_edge(pn, me, want_dom));
      assert_int_equal(l->next_edge, want_edge(me, nn, want_dom));
      net_next[c] += l->next_edge == GCOLL_EDGE_NET;
      /* A NIC is named exactly where the ring leaves by the network. */
      assert_int_equal(l->nic_out[0] != '\0', nn != me && l->next_edge == GCOLL_EDGE_NET);
      assert_int_equal(l->nic_in[0] != '\0', pn != me && l->prev_edge == GCOLL_EDGE_NET);
      const struct gcoll_tree_link *t = &v->tree[c];
      if (t->parent >= 0)
        assert_int_equal(t->parent_edge,
                         want_edge(gcoll_plan_node_of_rank(p, t->parent), me, want_dom));
      for (int k = 0; k < t->nchildren; k++)
        assert_int_equal(t->child_edge[k],
                         want_edge(me, gcoll_plan_node_of_rank(p, t->children[k]), want_dom));
    }
  }
  free(v);
}

/* Node-level tree edges across domains, and a spanning check of our own:
 * every node reaches the root. */
static int tree_domain_crossings(const struct gcoll_plan *p, const int *parent, int root,
                                 const int *want_dom) {
  int n = 0;
  for (int v = 0; v < p->nnodes; v++) {
    int u = v, steps = 0;
    while (parent[u] >= 0 && steps++ <= p->nnodes) u = parent[u];
    assert_int_equal(u, root);
    if (parent[v] >= 0) n += want_dom[v] != want_dom[parent[v]];
  }
  return n;
}

/* The done-when figure: 36 trays in racks of 18 cross the network exactly
 * twice per ring (once between the two racks each way) and once per tree. */
static void test_gb200_36_trays(void **state) {
  (void)state;
  const struct gcoll_topo *t[] = {tray};
  int *dom = racks(36, TRAYS_PER_RACK);
  struct gcoll_plan *p = build(t, 36, dom);
  assert_int_equal(p->nranks, 144);
  int net_next[GCOLL_MAX_CHANNELS];
  for (int c = 0; c < p->nchannels; c++) assert_int_equal(ring_domain_crossings(p, c, dom), 2);
  check_views(p, dom, net_next);
  for (int c = 0; c < p->nchannels; c++) assert_int_equal(net_next[c], 2);
  assert_int_equal(tree_domain_crossings(p, p->t1_parent, p->t1_root, dom), 1);
  assert_int_equal(tree_domain_crossings(p, p->t2_parent, p->t2_root, dom), 1);
  /* NVLS spans the rack: heads on 16 different trays of the rank's rack. */
  struct gcoll_rank_view *v = malloc(sizeof(*v));
  char err[256];
  assert_int_equal(gcoll_plan_rank_view(p, 100, v, err, sizeof(err)), 0);
  assert_int_equal(v->nvl_domain_nnodes, TRAYS_PER_RACK);
  assert_int_equal(v->nvls_nheads, GCOLL_MAX_NVLS_HEADS);
  int seen[36] = {0};
  for (int h = 0; h < v->nvls_nheads; h++) {
    int node = gcoll_plan_node_of_rank(p, v->nvls_heads[h]);
    assert_int_equal(dom[node], 1);
    assert_int_equal(seen[node]++, 0);
  }
  free(v);
  gcoll_plan_free(p);
  free(dom);
}

/* 40 trays: racks of 18, 18 and 4 cross 3 times per ring, twice per tree;
 * the same with domains interleaved (tray i in rack i % 3), where the ring
 * has to visit each rack's trays together to keep to 3. */
static void test_three_racks(void **state) {
  (void)state;
  const struct gcoll_topo *t[] = {tray};
  int net_next[GCOLL_MAX_CHANNELS];
  for (int interleave = 0; interleave < 2; interleave++) {
    int *dom = racks(40, TRAYS_PER_RACK);
    if (interleave)
      for (int i = 0; i < 40; i++) dom[i] = (i * 7) % 3;
    struct gcoll_plan *p = build(t, 40, dom);
    for (int c = 0; c < p->nchannels; c++) assert_int_equal(ring_domain_crossings(p, c, dom), 3);
    check_views(p, dom, net_next);
    for (int c = 0; c < p->nchannels; c++) assert_int_equal(net_next[c], 3);
    assert_int_equal(tree_domain_crossings(p, p->t1_parent, p->t1_root, dom), 2);
    assert_int_equal(tree_domain_crossings(p, p->t2_parent, p->t2_root, dom), 2);
    gcoll_plan_free(p);
    free(dom);
  }
}

static char *plan_text(struct gcoll_plan *p, size_t *len) {
  char err[256], *buf = NULL;
  snprintf(p->job.created, sizeof(p->job.created), "2026-01-01T00:00:00Z");
  FILE *f = open_memstream(&buf, len);
  assert_non_null(f);
  if (gcoll_plan_write_stream(p, f, err, sizeof(err)) != 0) fail_msg("write: %s", err);
  fclose(f);
  return buf;
}

/* The file stays O(nodes): 3600 trays in 200 racks add a few bytes per
 * tray (two tree parents, one node entry per rack), and reading it back
 * gives the same domains and the same rank views. */
static void test_plan_file_size_and_round_trip(void **state) {
  (void)state;
  const struct gcoll_topo *t[] = {tray};
  size_t small_len, big_len;
  int *dom36 = racks(36, TRAYS_PER_RACK), *dom3600 = racks(3600, TRAYS_PER_RACK);
  struct gcoll_plan *small = build(t, 36, dom36), *big = build(t, 3600, dom3600);
  char *s = plan_text(small, &small_len), *b = plan_text(big, &big_len);
  assert_true(small_len < 8192);
  assert_true(big_len - small_len < (size_t)(3600 - 36) * 24);
  char err[256];
  struct gcoll_plan *back = gcoll_plan_read_mem(b, big_len, "big.yaml", err, sizeof(err));
  if (back == NULL) fail_msg("%s", err);
  assert_int_equal(gcoll_plan_verify(back, err, sizeof(err)), 0);
  assert_non_null(back->node_domain);
  for (int n = 0; n < 3600; n++) assert_int_equal(back->node_domain[n], n / TRAYS_PER_RACK);
  struct gcoll_rank_view *v1 = malloc(sizeof(*v1)), *v2 = malloc(sizeof(*v2));
  const int ranks[] = {0, 71, 72, 7000, 14399};
  for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
    assert_int_equal(gcoll_plan_rank_view(big, ranks[i], v1, err, sizeof(err)), 0);
    assert_int_equal(gcoll_plan_rank_view(back, ranks[i], v2, err, sizeof(err)), 0);
    assert_memory_equal(v1->ring, v2->ring, sizeof(v1->ring));
    assert_memory_equal(v1->tree, v2->tree, sizeof(v1->tree));
    assert_memory_equal(v1->nvls_heads, v2->nvls_heads, sizeof(v1->nvls_heads));
    assert_int_equal(v1->nvl_domain, v2->nvl_domain);
  }
  free(v1);
  free(v2);
  gcoll_plan_free(back);
  gcoll_plan_free(small);
  gcoll_plan_free(big);
  free(s);
  free(b);
  free(dom36);
  free(dom3600);
}

/* Plans without domains are what they were: no domain field, the same
 * text whether the input says nothing or -1 for every node, btree.c's
 * trees, and every edge between nodes on the network. */
static void test_no_domain_unchanged(void **state) {
  (void)state;
  struct gcoll_topo *h100 = test_topo_load("dgx-h100");
  const struct gcoll_topo *t[] = {h100};
  int none[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  size_t la, lb;
  struct gcoll_plan *a = build(t, 8, NULL), *b = build(t, 8, none);
  assert_null(a->node_domain);
  assert_null(b->node_domain);
  char *ta = plan_text(a, &la), *tb = plan_text(b, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(ta, tb, la);
  assert_null(strstr(ta, "domain"));
  for (int n = 0; n < 8; n++) {
    int par, c0, c1;
    gcoll_btree(8, n, &par, &c0, &c1);
    assert_int_equal(a->t1_parent[n], par);
    gcoll_dtree_t2(8, n, &par, &c0, &c1);
    assert_int_equal(a->t2_parent[n], par);
  }
  int dom[8] = {0, 1, 2, 3, 4, 5, 6, 7}, net_next[GCOLL_MAX_CHANNELS];
  check_views(a, dom, net_next);
  gcoll_plan_free(a);
  gcoll_plan_free(b);
  free(ta);
  free(tb);
  gcoll_topo_free(h100);
}

/* Domains named by the nodes' topologies (detection's nvlink_domain): trays
 * of two racks, alternating in node order, share one class (the domain is
 * not hashed), and the ring visits each rack's trays together. */
static void test_domains_from_topologies(void **state) {
  (void)state;
  struct gcoll_topo *a = gcoll_topo_clone(tray), *b = gcoll_topo_clone(tray);
  assert_true(a && b);
  assert_int_equal(gcoll_nvl_domain_set_cluster(&a->nvl_domain,
                                                "4F1C2D3E-0000-4000-8000-00000000002A"), 0);
  a->nvl_domain.clique = 7;
  a->nvl_domain.set = 1;
  b->nvl_domain = a->nvl_domain;
  b->nvl_domain.clique = 8;
  assert_int_equal(gcoll_topo_hash(a), gcoll_topo_hash(tray));
  const struct gcoll_topo *nt[6] = {a, b, a, b, a, b};
  struct gcoll_plan_input in = {.nnodes = 6, .node_topo = nt, .job_id = -1, .step_id = -1};
  char err[256];
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("%s", err);
  assert_int_equal(gcoll_plan_verify(p, err, sizeof(err)), 0);
  assert_int_equal(p->nclasses, 1);
  int dom[6] = {7, 8, 7, 8, 7, 8}, net_next[GCOLL_MAX_CHANNELS];
  for (int c = 0; c < p->nchannels; c++) assert_int_equal(ring_domain_crossings(p, c, dom), 2);
  check_views(p, dom, net_next);
  /* A sub-communicator keeps its nodes' domains. */
  int members[8] = {0, 1, 8, 9, 4, 5, 12, 13};   /* nodes 0, 2 (clique 7), 1, 3 (clique 8) */
  struct gcoll_plan *sub = gcoll_plan_subset(p, members, 8, err, sizeof(err));
  if (sub == NULL) fail_msg("%s", err);
  int subdom[4] = {7, 7, 8, 8};
  for (int c = 0; c < sub->nchannels; c++) assert_int_equal(ring_domain_crossings(sub, c, subdom), 2);
  check_views(sub, subdom, net_next);
  gcoll_plan_free(sub);
  gcoll_plan_free(p);
  gcoll_topo_free(a);
  gcoll_topo_free(b);
}

/* Malformed domain values in a plan are refused with FILE:LINE. */
static void test_plan_reader_rejects_bad_domain(void **state) {
  (void)state;
  const struct gcoll_topo *t[] = {tray};
  int *dom = racks(4, 2);
  struct gcoll_plan *p = build(t, 4, dom);
  size_t len;
  char *text = plan_text(p, &len);
  const char *bad[] = {"domain: -1", "domain: x", "domain: 99", "domain: [1]", "domain: 1.5"};
  const char *at = strstr(text, "domain: 0");
  assert_non_null(at);
  long line = 1;
  for (const char *c = text; c < at; c++) line += *c == '\n';
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *mod = malloc(len + 64), err[256];
    size_t pre = (size_t)(at - text);
    memcpy(mod, text, pre);
    strcpy(mod + pre, bad[i]);
    strcat(mod + pre, at + strlen("domain: 0"));
    assert_null(gcoll_plan_read_mem(mod, strlen(mod), "bad.yaml", err, sizeof(err)));
    char want[32];
    snprintf(want, sizeof(want), "bad.yaml:%ld:", line);
    if (strncmp(err, want, strlen(want)) != 0 || strstr(err, "domain") == NULL ||
        strchr(err, '\n') != NULL)
      fail_msg("'%s': %s", bad[i], err);
    free(mod);
  }
  gcoll_plan_free(p);
  free(text);
  free(dom);
}

/* nvlink_domain in topology YAML: written back as read, not hashed, and
 * malformed values refused with FILE:LINE. */
static void test_topo_domain_field(void **state) {
  (void)state;
  static const char head[] = "gcoll-topo: 1\nname: t\n";
  static const char tail[] = "cpus:\n  - {name: cpu0, cores: 4, numa: 0}\n";
  char buf[512], err[256];
  snprintf(buf, sizeof(buf), "%snvlink_domain: {cluster: \"4F1C2D3E-0000-4000-8000-00000000002A\", "
           "clique: 4294967295}\n%s", head, tail);
  struct gcoll_topo *t = gcoll_topo_read_mem(buf, strlen(buf), "t.yaml", err, sizeof(err));
  if (t == NULL) fail_msg("%s", err);
  assert_true(t->nvl_domain.set);
  assert_string_equal(t->nvl_domain.cluster, "4f1c2d3e-0000-4000-8000-00000000002a");
  assert_int_equal(t->nvl_domain.clique, 4294967295u);
  snprintf(buf, sizeof(buf), "%s%s", head, tail);
  struct gcoll_topo *plain = gcoll_topo_read_mem(buf, strlen(buf), "p.yaml", err, sizeof(err));
  assert_non_null(plain);
  assert_false(plain->nvl_domain.set);
  assert_int_equal(gcoll_topo_hash(plain), gcoll_topo_hash(t));
  char *out = NULL;
  size_t olen;
  FILE *f = open_memstream(&out, &olen);
  assert_int_equal(gcoll_topo_write_stream(t, f, err, sizeof(err)), 0);
  fclose(f);
  struct gcoll_topo *back = gcoll_topo_read_mem(out, olen, "back.yaml", err, sizeof(err));
  if (back == NULL) fail_msg("%s", err);
  assert_true(gcoll_nvl_domain_equal(&back->nvl_domain, &t->nvl_domain));
  free(out);
  gcoll_topo_free(back);
  gcoll_topo_free(plain);
  gcoll_topo_free(t);
  const char *bad[] = {
      "nvlink_domain: {cluster: \"4f1c2d3e-0000-4000-8000-00000000002\", clique: 1}",
      "nvlink_domain: {cluster: \"4f1c2d3e00000-4000-8000-00000000002a\", clique: 1}",
      "nvlink_domain: {cluster: \"4g1c2d3e-0000-4000-8000-00000000002a\", clique: 1}",
      "nvlink_domain: {cluster: \"4f1c2d3e-0000-4000-8000-00000000002a\", clique: -1}",
      "nvlink_domain: {cluster: \"4f1c2d3e-0000-4000-8000-00000000002a\", clique: 4294967296}",
      "nvlink_domain: {cluster: \"4f1c2d3e-0000-4000-8000-00000000002a\"}",
      "nvlink_domain: {cluster: \"4f1c2d3e-0000-4000-8000-00000000002a\", clique: 1, rack: 2}",
      "nvlink_domain: 7",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(buf, sizeof(buf), "%s%s\n%s", head, bad[i], tail);
    t = gcoll_topo_read_mem(buf, strlen(buf), "bad.yaml", err, sizeof(err));
    if (t != NULL) fail_msg("accepted: %s", bad[i]);
    if (strncmp(err, "bad.yaml:3:", 11) != 0 || strstr(err, "nvlink_domain") == NULL ||
        strchr(err, '\n') != NULL)
      fail_msg("'%s': %s", bad[i], err);
  }
}

/* NVML fabric info to a domain: only completed registrations, all GPUs
 * agreeing, a non-zero cluster. */
static void test_fabric_info(void **state) {
  (void)state;
  struct gcoll_fabric_info g[4];
  struct gcoll_nvl_domain d;
  memset(g, 0, sizeof(g));
  for (int i = 0; i < 4; i++) {
    g[i].known = 1;
    g[i].state = 3;
    g[i].clique = 5;
    for (int k = 0; k < 16; k++) g[i].cluster[k] = (unsigned char)(0xa0 + k);
  }
  assert_int_equal(gcoll_nvl_domain_from_fabric(g, 4, &d), 1);
  assert_true(d.set);
  assert_int_equal(d.clique, 5);
  assert_string_equal(d.cluster, "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
  g[2].state = 2;   /* registration still in progress */
  assert_int_equal(gcoll_nvl_domain_from_fabric(g, 4, &d), 0);
  assert_false(d.set);
  g[2].state = 3;
  g[1].status = 3;  /* NVML: not supported */
  assert_int_equal(gcoll_nvl_domain_from_fabric(g, 4, &d), 0);
  g[1].status = 0;
  g[3].clique = 6;  /* a tray split across partitions */
  assert_int_equal(gcoll_nvl_domain_from_fabric(g, 4, &d), -1);
  assert_false(d.set);
  g[3].clique = 5;
  g[0].known = 0;
  assert_int_equal(gcoll_nvl_domain_from_fabric(g, 4, &d), 0);
  g[0].known = 1;
  for (int i = 0; i < 4; i++) memset(g[i].cluster, 0, 16);
  assert_int_equal(gcoll_nvl_domain_from_fabric(g, 4, &d), 0);
  assert_int_equal(gcoll_nvl_domain_from_fabric(g, 0, &d), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gb200_36_trays),
      cmocka_unit_test(test_three_racks),
      cmocka_unit_test(test_plan_file_size_and_round_trip),
      cmocka_unit_test(test_no_domain_unchanged),
      cmocka_unit_test(test_domains_from_topologies),
      cmocka_unit_test(test_plan_reader_rejects_bad_domain),
      cmocka_unit_test(test_topo_domain_field),
      cmocka_unit_test(test_fabric_info),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
