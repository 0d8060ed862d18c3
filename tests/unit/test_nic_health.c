/* Degraded links: ports down or below their line rate at detection are
 * left out of plans, and the plans say so. No RDMA device exists here, so
 * detection's verbs path is tested through its seam (gcoll_port_health,
 * what it feeds the port states and rates into) and the rest through
 * topology files that mark ports as detection writes them. */
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

static void test_port_health(void **state) {
  (void)state;
  /* Ports of 400, 200 (trained low), unknown-but-down, 400. */
  double rate[] = {400, 200, 0, 400}, line[4], active[4];
  int up[] = {1, 1, 0, 1};
  gcoll_port_health(rate, up, 4, line, active);
  for (int i = 0; i < 4; i++) assert_true(line[i] == 400);
  assert_true(active[0] == 0 && active[1] == 200 && active[2] == 0 && active[3] == 0);
  /* Nothing active: no rate to trust, the ports stay down anyway. */
  double r2[] = {0, 0}, l2[2], a2[2];
  int none[] = {0, 0};
  gcoll_port_health(r2, none, 2, l2, a2);
  assert_true(l2[0] == 100 && l2[1] == 100 && a2[0] == 0 && a2[1] == 0);
}

/* The text of etc/topologies/dgx-h100.yaml with ", e3" and ", e5" added
 * to the entries of mlx5_3 and mlx5_5 (NULL: unchanged), malloc'd. */
static char *with_fields(const char *e3, const char *e5) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/dgx-h100.yaml", test_topo_dir());
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char buf[1 << 16];
  size_t len = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[len] = '\0';
  char *out = malloc(len + 256), *o = out;
  assert_non_null(out);
  for (char *line = buf; *line;) {
    size_t l = strcspn(line, "\n");
    const char *extra = strncmp(line, "  - {name: mlx5_3,", 18) == 0   ? e3
                        : strncmp(line, "  - {name: mlx5_5,", 18) == 0 ? e5
                                                                        : NULL;
    if (extra != NULL && line[l - 1] == '}') {
      memcpy(o, line, l - 1);
      o += l - 1;
      o += sprintf(o, ", %s}", extra);
    } else {
      memcpy(o, line, l);
      o += l;
    }
    *o++ = '\n';
    line += l + (line[l] == '\n');
  }
  *o = '\0';
  return out;
}

/* dgx-h100 with those fields, as detection would write a degraded node. */
static struct gcoll_topo *degraded(const char *e3, const char *e5) {
  char err[512], *text = with_fields(e3, e5);
  struct gcoll_topo *t = gcoll_topo_read_mem(text, strlen(text), "degraded.yaml", err, sizeof(err));
  free(text);
  if (t == NULL || gcoll_topo_compute_paths(t, err, sizeof(err)) != 0) fail_msg("%s", err);
  return t;
}

static void test_topology_fields(void **state) {
  (void)state;
  struct gcoll_topo *h = test_topo_load("dgx-h100");
  /* Healthy values are no change: same hash as the file without them. */
  struct gcoll_topo *same = degraded("state: up", "active_gbps: 400");
  assert_int_equal(gcoll_topo_hash(same), gcoll_topo_hash(h));
  struct gcoll_topo *d = degraded("state: down", "active_gbps: 200");
  assert_int_not_equal(gcoll_topo_hash(d), gcoll_topo_hash(h));
  const char *why;
  char detail[64];
  assert_int_equal(gcoll_topo_nic_usable(d, 3, &why, detail, sizeof(detail)), 0);
  assert_string_equal(why, "down");
  assert_string_equal(detail, "port down");
  assert_int_equal(gcoll_topo_nic_usable(d, 5, &why, detail, sizeof(detail)), 0);
  assert_string_equal(why, "slow");
  assert_string_equal(detail, "200 of 400 Gb/s");
  assert_int_equal(gcoll_topo_nic_usable(d, 4, &why, NULL, 0), 1);
  assert_null(why);
  /* Written and read back: the same topology. */
  char err[512];
  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(gcoll_topo_write_stream(d, f, err, sizeof(err)), 0);
  long len = ftell(f);
  rewind(f);
  char *text = malloc((size_t)len + 1);
  assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  struct gcoll_topo *back = gcoll_topo_read_mem(text, (size_t)len, "back.yaml", err, sizeof(err));
  if (back == NULL) fail_msg("%s", err);
  assert_int_equal(gcoll_topo_hash(back), gcoll_topo_hash(d));
  free(text);
  gcoll_topo_free(back);
  gcoll_topo_free(d);
  gcoll_topo_free(same);
  gcoll_topo_free(h);
}

static void expect_refused(const char *e3, const char *want) {
  char err[512], *text = with_fields(e3, NULL);
  struct gcoll_topo *t = gcoll_topo_read_mem(text, strlen(text), "bad.yaml", err, sizeof(err));
  free(text);
  assert_null(t);
  /* One line naming the file and the line of mlx5_3's entry. */
  if (strstr(err, want) == NULL || strncmp(err, "bad.yaml:", 9) != 0 || strchr(err, '\n'))
    fail_msg("'%s': got '%s', expected '%s'", e3, err, want);
}

static void test_topology_refuses(void **state) {
  (void)state;
  expect_refused("state: sideways", "expected up or down");
  expect_refused("active_gbps: 800", "needs a line rate");
  expect_refused("active_gbps: -1", "out of range");
  expect_refused("state: [down]", "");
}

static struct gcoll_plan *two_nodes(const struct gcoll_topo *a, const struct gcoll_topo *b) {
  const struct gcoll_topo *topos[2] = {a, b};
  struct gcoll_plan_input in = {.nnodes = 2, .node_topo = topos, .job_id = -1, .step_id = -1};
  char err[512];
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("%s", err);
  if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("%s", err);
  if (gcoll_plan_verify_rails(p, err, sizeof(err)) != 0) fail_msg("%s", err);
  return p;
}

/* A degraded node plans around its bad ports, lists them, and no rank of
 * any node is given them; the healthy node's plan lists nothing. */
static void test_plan_leaves_out(void **state) {
  (void)state;
  struct gcoll_topo *h = test_topo_load("dgx-h100");
  struct gcoll_topo *d = degraded("state: down", "active_gbps: 200");
  struct gcoll_plan *healthy = two_nodes(h, h), *p = two_nodes(h, d);
  assert_int_equal(healthy->classes[0].graph.nleft_out, 0);
  assert_int_equal(p->nclasses, 2);
  const struct gcoll_intra_graph *g = &p->classes[p->node_class[1]].graph;
  assert_int_equal(g->nleft_out, 2);
  assert_string_equal(g->left_out[0].nic, "mlx5_3");
  assert_string_equal(g->left_out[0].why, "down");
  assert_string_equal(g->left_out[1].nic, "mlx5_5");
  assert_string_equal(g->left_out[1].why, "slow");
  /* Every other NIC still carries a channel, and the rank views name no
   * left-out NIC on either node (the healthy node meets the degraded one on
   * the rails it has). */
  assert_int_equal(p->nchannels, 2 * 6);
  struct gcoll_rank_view *v = malloc(sizeof(*v));
  char err[512];
  for (int r = 0; r < p->nranks; r++) {
    assert_int_equal(gcoll_plan_rank_view(p, r, v, err, sizeof(err)), 0);
    for (int c = 0; c < v->nchannels; c++) {
      const char *names[] = {v->ring[c].nic_in, v->ring[c].nic_out, v->tree[c].nic};
      for (int i = 0; i < 3; i++)
        if (strcmp(names[i], "mlx5_3") == 0 || strcmp(names[i], "mlx5_5") == 0)
          fail_msg("rank %d channel %d uses %s", r, c, names[i]);
    }
  }
  /* The list survives the file. */
  FILE *f = tmpfile();
  assert_int_equal(gcoll_plan_write_stream(p, f, err, sizeof(err)), 0);
  long len = ftell(f);
  rewind(f);
  char *text = malloc((size_t)len + 1);
  assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  struct gcoll_plan *back = gcoll_plan_read_mem(text, (size_t)len, "p.yaml", err, sizeof(err));
  if (back == NULL) fail_msg("%s", err);
  const struct gcoll_intra_graph *gb = &back->classes[back->node_class[1]].graph;
  assert_int_equal(gb->nleft_out, 2);
  assert_string_equal(gb->left_out[1].nic, "mlx5_5");
  /* A sub-communicator on the degraded node keeps the list. */
  int members[] = {1, 9};
  struct gcoll_plan *c = gcoll_plan_subset(p, members, 2, err, sizeof(err));
  if (c == NULL) fail_msg("%s", err);
  assert_int_equal(c->classes[c->node_class[1]].graph.nleft_out, 2);
  gcoll_plan_free(c);
  gcoll_plan_free(back);
  free(text);
  free(v);
  gcoll_plan_free(p);
  gcoll_plan_free(healthy);
  gcoll_topo_free(d);
  gcoll_topo_free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_port_health),
      cmocka_unit_test(test_topology_fields),
      cmocka_unit_test(test_topology_refuses),
      cmocka_unit_test(test_plan_leaves_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
