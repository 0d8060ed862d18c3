/* Rails across nodes, checked the way a runtime sees a plan: every rank's
 * view is loaded from the written file (gcoll_plan_load_rank_view), each
 * edge to another node is paired with the peer's own view, and the two
 * NIC names are mapped to rails through the topology file itself, not
 * through the plan's rail fields. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/plan.h"
#include "graph/tuning.h"
#include "testutil.h"

/* The rail of the NIC named `name` in t, from the topology alone. */
static int rail_of(const struct gcoll_topo *t, const char *name) {
  int d = gcoll_topo_find(t, name);
  if (d < 0 || t->dev[d].type != GCOLL_DEV_NIC) fail_msg("'%s' is not a NIC of %s", name, t->name);
  return t->dev[d].u.nic.rail >= 0 ? t->dev[d].u.nic.rail : t->dev[d].index;
}

static struct gcoll_plan *build(const struct gcoll_topo *t, int nnodes, int cross_rail) {
  const struct gcoll_topo **topos = calloc((size_t)nnodes, sizeof(*topos));
  assert_non_null(topos);
  for (int i = 0; i < nnodes; i++) topos[i] = t;
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = topos, .job_id = -1,
                                .step_id = -1, .cross_rail = cross_rail};
  char err[512];
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("%s", err);
  free(topos);
  return p;
}

struct walk {
  int ring_edges, ring_cross, tree_edges, tree_cross, pxn;
};

/* Loads every rank's view from `path` and pairs each net edge's NICs. */
static void walk_views(const char *path, const struct gcoll_topo *t, struct walk *w) {
  char err[512];
  struct gcoll_rank_view *v = calloc(1, sizeof(*v)), *peer = calloc(1, sizeof(*peer));
  assert_true(v && peer);
  memset(w, 0, sizeof(*w));
  assert_int_equal(gcoll_plan_load_rank_view(path, 0, v, err, sizeof(err)), 0);
  int nranks = v->nranks;
  for (int r = 0; r < nranks; r++) {
    if (gcoll_plan_load_rank_view(path, r, v, err, sizeof(err)) != 0) fail_msg("%s", err);
    for (int c = 0; c < v->nchannels; c++) {
      const struct gcoll_ring_link *l = &v->ring[c];
      if (l->next_edge == GCOLL_EDGE_NET) {
        assert_true(l->nic_out[0] != '\0');
        if (gcoll_plan_load_rank_view(path, l->next, peer, err, sizeof(err)) != 0)
          fail_msg("%s", err);
        assert_int_equal(peer->ring[c].prev, r);
        assert_true(peer->ring[c].nic_in[0] != '\0');
        int a = rail_of(t, l->nic_out), b = rail_of(t, peer->ring[c].nic_in);
        /* The plan's rail fields say what the topology says. */
        assert_int_equal(l->rail_out, a);
        assert_int_equal(peer->ring[c].rail_in, b);
        w->ring_edges++;
        w->ring_cross += a != b;
        if (l->nic_out_via >= 0) {
          /* PXN: a rank of this node, whose GPU is next to the NIC while
           * this rank's GPU is not. */
          struct gcoll_rank_view *via = calloc(1, sizeof(*via));
          assert_non_null(via);
          assert_int_equal(gcoll_plan_load_rank_view(path, l->nic_out_via, via, err, sizeof(err)), 0);
          assert_int_equal(via->node, v->node);
          int nic = gcoll_topo_find(t, l->nic_out);
          assert_true(gcoll_topo_path(t, t->gpu[via->gpu], nic)->type <= GCOLL_PATH_PXB);
          assert_true(gcoll_topo_path(t, t->gpu[v->gpu], nic)->type > GCOLL_PATH_PXB);
          assert_int_equal(gcoll_topo_path(t, t->gpu[v->gpu], t->gpu[via->gpu])->type,
                           GCOLL_PATH_NVL);
          w->pxn++;
          free(via);
        }
      } else {
        assert_int_equal(l->nic_out_via, -1);
      }
      const struct gcoll_tree_link *tl = &v->tree[c];
      if (tl->parent >= 0 && tl->parent_edge == GCOLL_EDGE_NET) {
        if (gcoll_plan_load_rank_view(path, tl->parent, peer, err, sizeof(err)) != 0)
          fail_msg("%s", err);
        assert_true(tl->nic[0] && peer->tree[c].nic[0]);
        int a = rail_of(t, tl->nic), b = rail_of(t, peer->tree[c].nic);
        w->tree_edges++;
        w->tree_cross += a != b;
      }
    }
  }
  free(v);
  free(peer);
}

static void write_plan(const struct gcoll_plan *p, char *path, size_t len) {
  char err[512];
  snprintf(path, len, "/tmp/gcoll-test-rails-%ld.yaml", (long)getpid());
  if (gcoll_plan_write_file(p, path, err, sizeof(err)) != 0) fail_msg("%s", err);
}

/* The figure of merit: 4 DGX-H100 nodes, every channel of every
 * ring and tree on one rail between nodes, the exits through PXN. */
static void test_dgx_h100_rail_aligned(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("dgx-h100");
  struct gcoll_plan *p = build(t, 4, 0);
  char path[256], err[512];
  write_plan(p, path, sizeof(path));
  struct walk w;
  walk_views(path, t, &w);
  /* Each channel crosses every node boundary once: 4 nodes x 16 channels;
   * each tree has 3 edges between nodes, 8 channels each. */
  assert_int_equal(w.ring_edges, 4 * p->nchannels);
  assert_int_equal(w.ring_cross, 0);
  assert_int_equal(w.tree_edges, 2 * 3 * p->nchannels / 2);
  assert_int_equal(w.tree_cross, 0);
  /* No DGX-H100 GPU shares a PCIe switch with another's NIC: every exit
   * that is not its NIC's own GPU goes through PXN. */
  assert_int_equal(w.pxn, w.ring_edges);
  struct gcoll_rail_counts rc;
  gcoll_plan_rail_counts(p, &rc);
  assert_int_equal(rc.ring_edges * 2, w.ring_edges);  /* searched channels, used twice */
  assert_int_equal(rc.ring_cross + rc.tree_cross, 0);
  assert_int_equal(gcoll_plan_verify_rails(p, err, sizeof(err)), 0);
  unlink(path);
  gcoll_plan_free(p);
  gcoll_topo_free(t);
}

/* Every reference topology: rail-aligned plans by default, which also
 * pass the format's own verification. */
static void test_every_topology(void **state) {
  (void)state;
  const char *names[] = {"cpu-only", "pcie-2s-4gpu", "dgx-a100", "dgx-h100", "gb200-tray", "p5"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    struct gcoll_topo *t = test_topo_load(names[i]);
    if (t->ngpu == 0) {
      gcoll_topo_free(t);
      continue;   /* cpu-only plans need a rank count: test_cli.sh covers them */
    }
    struct gcoll_plan *p = build(t, 3, 0);
    char path[256], err[512];
    if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("%s: %s", names[i], err);
    write_plan(p, path, sizeof(path));
    struct walk w;
    walk_views(path, t, &w);
    assert_int_equal(w.ring_edges, 3 * p->nchannels);
    if (w.ring_cross || w.tree_cross) fail_msg("%s: %d ring, %d tree edges cross rails", names[i],
                                               w.ring_cross, w.tree_cross);
    unlink(path);
    gcoll_plan_free(p);
    gcoll_topo_free(t);
  }
}

/* A cross-rail plan is seen as one from the views, by verify and by the
 * counts; and the tuning model charges its spine crossings. */
static void test_cross_rail_counted(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("pcie-2s-4gpu");
  struct gcoll_plan *p = build(t, 3, 1);
  char path[256], err[512];
  write_plan(p, path, sizeof(path));
  struct walk w;
  walk_views(path, t, &w);
  assert_int_equal(w.ring_cross, w.ring_edges);
  assert_int_equal(w.tree_cross, 0);
  struct gcoll_rail_counts rc;
  gcoll_plan_rail_counts(p, &rc);
  assert_int_equal(rc.ring_cross * 2, w.ring_cross);
  assert_int_equal(gcoll_plan_verify_rails(p, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "cross-rail"));
  assert_int_equal(gcoll_plan_verify(p, err, sizeof(err)), 0);

  /* The ring pays the spine, the tree (no crossings) does not: with a
   * costly spine, allreduce keeps the tree to larger sizes. */
  struct gcoll_tuning_model m = gcoll_tuning_defaults;
  uint64_t tree_upto[2];
  for (int costly = 0; costly < 2; costly++) {
    m.spine_lat = costly ? 200.0 : 0.0;
    m.spine_eff = costly ? 0.25 : 1.0;
    gcoll_plan_tune_with(p, &m);
    tree_upto[costly] = 0;
    for (int i = 0; i < p->ntuning[GCOLL_COLL_ALLREDUCE]; i++)
      if (p->tuning[GCOLL_COLL_ALLREDUCE][i].algo == GCOLL_ALGO_TREE)
        tree_upto[costly] = p->tuning[GCOLL_COLL_ALLREDUCE][i].max_bytes;
  }
  assert_true(tree_upto[1] > tree_upto[0]);
  /* A neutral spine leaves the table as the model without spines makes it:
   * the same as a rail-aligned plan of the same bandwidth would get. */
  struct gcoll_plan *q = build(t, 3, 1);
  for (int s = 0; s < q->nchannels / 2; s++)
    q->classes[0].graph.ch[s].ring_rail_out = q->classes[0].graph.ch[s].ring_rail_in;
  m.spine_lat = 0;
  m.spine_eff = 1;
  gcoll_plan_tune_with(p, &m);
  gcoll_plan_tune_with(q, &gcoll_tuning_defaults);
  assert_memory_equal(p->tuning, q->tuning, sizeof(p->tuning));
  unlink(path);
  gcoll_plan_free(p);
  gcoll_plan_free(q);
  gcoll_topo_free(t);
}

/* Sub-communicators of a rail-aligned plan stay rail-aligned. */
static void test_subset_keeps_rails(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("dgx-h100");
  struct gcoll_plan *p = build(t, 3, 0);
  int members[] = {2, 5, 6, 10, 13, 14, 18, 21, 22};
  char err[512];
  struct gcoll_plan *c = gcoll_plan_subset(p, members, 9, err, sizeof(err));
  if (c == NULL) fail_msg("%s", err);
  if (gcoll_plan_verify_rails(c, err, sizeof(err)) != 0) fail_msg("%s", err);
  struct gcoll_rail_counts rc;
  gcoll_plan_rail_counts(c, &rc);
  assert_int_equal(rc.ring_edges, 3 * c->nchannels / 2);
  gcoll_plan_free(c);
  gcoll_plan_free(p);
  gcoll_topo_free(t);
}

/* Nodes of one topology holding different rank counts are different
 * classes, each searched alone; the builder makes them meet on one rail
 * for every count pair. */
static void test_classes_meet_on_rails(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("dgx-h100");
  const struct gcoll_topo *topos[2] = {t, t};
  char err[512];
  for (int a = 1; a <= 8; a++)
    for (int b = 1; b <= 8; b++) {
      int counts[2] = {a, b};
      struct gcoll_plan_input in = {.nnodes = 2, .node_topo = topos, .job_id = -1,
                                    .step_id = -1, .node_ranks = counts};
      struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
      if (p == NULL) fail_msg("%d,%d: %s", a, b, err);
      if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("%d,%d: %s", a, b, err);
      if (gcoll_plan_verify_rails(p, err, sizeof(err)) != 0) fail_msg("%d,%d: %s", a, b, err);
      gcoll_plan_free(p);
    }
  gcoll_topo_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dgx_h100_rail_aligned),
      cmocka_unit_test(test_every_topology),
      cmocka_unit_test(test_cross_rail_counted),
      cmocka_unit_test(test_subset_keeps_rails),
      cmocka_unit_test(test_classes_meet_on_rails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
