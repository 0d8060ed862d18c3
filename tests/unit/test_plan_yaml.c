/* Plan files: write -> read gives the same plan, field by field, for plans
 * of several shapes; a rank view loaded from a file equals the one computed
 * from the in-memory plan; errors of the loader and of the job check; the
 * atomic writer. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/plan.h"
#include "testutil.h"

/* ---- building plans ------------------------------------------------------ */

struct shape {
  const char *label;
  int nnodes;
  const struct gcoll_topo **topo;
  char **hosts;   /* NULL: the builder's default names */
  int ranks_per_node;
  int64_t job_id, step_id;
};

#define h100 (test_ref[TEST_H100])
#define a100 (test_ref[TEST_A100])
#define pcie (test_ref[TEST_PCIE])
#define cpu (test_ref[TEST_CPU])

static struct gcoll_plan *build(int nnodes, const struct gcoll_topo **topo, char **hosts,
                                int ranks_per_node, int64_t job, int64_t step) {
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = topo, .node_host = (const char **)hosts, .ranks_per_node = ranks_per_node, .job_id = job, .step_id = step};
  char err[512] = "";
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("plan build (%d nodes) failed: %s", nnodes, err);
  return p;
}

static struct gcoll_plan *build_uniform(const struct gcoll_topo *t, int nnodes, int rpn) {
  const struct gcoll_topo **topo = malloc((size_t)nnodes * sizeof(*topo));
  assert_non_null(topo);
  for (int i = 0; i < nnodes; i++) topo[i] = t;
  struct gcoll_plan *p = build(nnodes, topo, NULL, rpn, -1, -1);
  free(topo);
  return p;
}

/* 13 nodes, dgx-h100 and pcie-2s-4gpu in an irregular pattern. */
static struct gcoll_plan *build_mixed13(void) {
  const struct gcoll_topo *topo[13];
  char *hosts[13];
  const char pattern[] = "HHPHPPPHHPHPH";
  for (int i = 0; i < 13; i++) {
    topo[i] = pattern[i] == 'H' ? h100 : pcie;
    hosts[i] = malloc(32);
    snprintf(hosts[i], 32, "%s%02d", pattern[i] == 'H' ? "dgx" : "pc", i);
  }
  struct gcoll_plan *p = build(13, topo, hosts, 0, 777, 3);
  for (int i = 0; i < 13; i++) free(hosts[i]);
  return p;
}

/* 1000 CPU nodes named n0001..n1000 with a few irregular names, so the host
 * list of the file has several runs. */
static char **cpu_hosts(int n) {
  char **hosts = calloc((size_t)n, sizeof(*hosts));
  assert_non_null(hosts);
  for (int i = 0; i < n; i++) {
    hosts[i] = malloc(32);
    snprintf(hosts[i], 32, "n%04d", i + 1);
  }
  snprintf(hosts[10], 32, "login-a");
  snprintf(hosts[11], 32, "n9999");            /* out of sequence */
  snprintf(hosts[250], 32, "n0251.cluster");   /* a domain in the middle */
  snprintf(hosts[500], 32, "rack2-n17");
  snprintf(hosts[501], 32, "rack2-n18");
  snprintf(hosts[502], 32, "rack2-n19");
  snprintf(hosts[777], 32, "n778");            /* width changes */
  snprintf(hosts[999], 32, "zz");
  return hosts;
}

static void free_hosts(char **hosts, int n) {
  for (int i = 0; i < n; i++) free(hosts[i]);
  free(hosts);
}

static struct gcoll_plan *build_cpu1000(void) {
  const int n = 1000;
  const struct gcoll_topo **topo = malloc((size_t)n * sizeof(*topo));
  char **hosts = cpu_hosts(n);
  for (int i = 0; i < n; i++) topo[i] = cpu;
  struct gcoll_plan *p = build(n, topo, hosts, 0, 123456789012LL, 0);
  free(topo);
  free_hosts(hosts, n);
  return p;
}

/* ---- comparing ----------------------------------------------------------- */

static void assert_same_class(const struct gcoll_plan_class *a, const struct gcoll_plan_class *b,
                              int nsearch) {
  assert_string_equal(a->name, b->name);
  assert_int_equal(a->hash, b->hash);
  assert_int_equal(a->nlocal, b->nlocal);
  assert_int_equal(a->intra_edge, b->intra_edge);
  const struct gcoll_intra_graph *x = &a->graph, *y = &b->graph;
  assert_int_equal(x->nchannels, y->nchannels);
  assert_int_equal(x->nchannels, nsearch);
  assert_true(x->ring_bw == y->ring_bw);
  assert_true(x->net_bw == y->net_bw);
  for (int s = 0; s < nsearch; s++) {
    const struct gcoll_intra_channel *c = &x->ch[s], *d = &y->ch[s];
    for (int i = 0; i < a->nlocal; i++) {
      assert_int_equal(c->ring[i], d->ring[i]);
      assert_int_equal(c->chain[i], d->chain[i]);
    }
    assert_string_equal(c->ring_nic_in_name, d->ring_nic_in_name);
    assert_string_equal(c->ring_nic_out_name, d->ring_nic_out_name);
    assert_string_equal(c->chain_nic_name, d->chain_nic_name);
    /* Indices are topology indices in a built plan and ordinals in a read
     * one; only "has a NIC" must agree. */
    assert_int_equal(c->ring_nic_in >= 0, d->ring_nic_in >= 0);
    assert_int_equal(c->ring_nic_out >= 0, d->ring_nic_out >= 0);
    assert_int_equal(c->chain_nic >= 0, d->chain_nic >= 0);
  }
  assert_int_equal(x->nvls_nheads, y->nvls_nheads);
  for (int h = 0; h < x->nvls_nheads; h++) assert_int_equal(x->nvls_heads[h], y->nvls_heads[h]);
}

static void assert_same_plan(const struct gcoll_plan *a, const struct gcoll_plan *b) {
  assert_int_equal(a->version, b->version);
  assert_string_equal(a->generator, b->generator);
  assert_int_equal(a->job.id, b->job.id);
  assert_int_equal(a->job.step, b->job.step);
  assert_string_equal(a->job.created, b->job.created);
  assert_int_equal(a->nranks, b->nranks);
  assert_int_equal(a->nnodes, b->nnodes);
  assert_int_equal(a->nchannels, b->nchannels);
  assert_int_equal(a->nclasses, b->nclasses);
  for (int k = 0; k < a->nclasses; k++)
    assert_same_class(&a->classes[k], &b->classes[k], a->nchannels / 2);
  for (int n = 0; n < a->nnodes; n++) {
    assert_non_null(b->node_host[n]);
    assert_string_equal(a->node_host[n], b->node_host[n]);
    assert_int_equal(a->node_class[n], b->node_class[n]);
    assert_int_equal(a->node_first_rank[n], b->node_first_rank[n]);
    assert_int_equal(a->ring_node_order[n], b->ring_node_order[n]);
    assert_int_equal(a->t1_parent[n], b->t1_parent[n]);
    assert_int_equal(a->t2_parent[n], b->t2_parent[n]);
  }
  assert_int_equal(a->t1_root, b->t1_root);
  assert_int_equal(a->t2_root, b->t2_root);
  assert_int_equal(a->t2_construction, b->t2_construction);
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    assert_int_equal(a->ntuning[c], b->ntuning[c]);
    for (int i = 0; i < a->ntuning[c]; i++) {
      const struct gcoll_tuning_entry *x = &a->tuning[c][i], *y = &b->tuning[c][i];
      assert_true(x->max_bytes == y->max_bytes);
      assert_int_equal(x->algo, y->algo);
      assert_int_equal(x->proto, y->proto);
      assert_int_equal(x->nchannels, y->nchannels);
    }
  }
}

/* Field by field: padding makes memcmp meaningless. */
static void assert_same_view(const struct gcoll_rank_view *a, const struct gcoll_rank_view *b) {
  assert_int_equal(a->rank, b->rank);
  assert_int_equal(a->nranks, b->nranks);
  assert_int_equal(a->node, b->node);
  assert_int_equal(a->nnodes, b->nnodes);
  assert_int_equal(a->local_rank, b->local_rank);
  assert_int_equal(a->local_nranks, b->local_nranks);
  assert_string_equal(a->host, b->host);
  assert_string_equal(a->topology, b->topology);
  assert_int_equal(a->topology_hash, b->topology_hash);
  assert_int_equal(a->job_id, b->job_id);
  assert_int_equal(a->step_id, b->step_id);
  assert_int_equal(a->nchannels, b->nchannels);
  for (int c = 0; c < a->nchannels; c++) {
    const struct gcoll_ring_link *r = &a->ring[c], *s = &b->ring[c];
    assert_int_equal(r->prev, s->prev);
    assert_int_equal(r->next, s->next);
    assert_int_equal(r->prev_edge, s->prev_edge);
    assert_int_equal(r->next_edge, s->next_edge);
    assert_string_equal(r->nic_in, s->nic_in);
    assert_string_equal(r->nic_out, s->nic_out);
    const struct gcoll_tree_link *t = &a->tree[c], *u = &b->tree[c];
    assert_int_equal(t->tree, u->tree);
    assert_int_equal(t->parent, u->parent);
    assert_int_equal(t->nchildren, u->nchildren);
    for (int j = 0; j < t->nchildren; j++) {
      assert_int_equal(t->children[j], u->children[j]);
      assert_int_equal(t->child_edge[j], u->child_edge[j]);
    }
    assert_int_equal(t->parent_edge, u->parent_edge);
    assert_string_equal(t->nic, u->nic);
  }
  assert_int_equal(a->nvls_nheads, b->nvls_nheads);
  for (int h = 0; h < a->nvls_nheads; h++) assert_int_equal(a->nvls_heads[h], b->nvls_heads[h]);
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    assert_int_equal(a->ntuning[c], b->ntuning[c]);
    for (int i = 0; i < a->ntuning[c]; i++) {
      assert_true(a->tuning[c][i].max_bytes == b->tuning[c][i].max_bytes);
      assert_int_equal(a->tuning[c][i].algo, b->tuning[c][i].algo);
      assert_int_equal(a->tuning[c][i].proto, b->tuning[c][i].proto);
      assert_int_equal(a->tuning[c][i].nchannels, b->tuning[c][i].nchannels);
    }
  }
}

/* ---- I/O helpers ----------------------------------------------------------- */

static char *plan_to_yaml(const struct gcoll_plan *p, size_t *len) {
  char *buf = NULL, err[512] = "";
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  assert_non_null(f);
  int rc = gcoll_plan_write_stream(p, f, err, sizeof(err));
  assert_int_equal(fclose(f), 0);
  if (rc != 0) fail_msg("plan write failed: %s", err);
  if (len) *len = n;
  return buf;
}

static struct gcoll_plan *plan_round_trip(const struct gcoll_plan *p) {
  size_t len;
  char err[512] = "", *yaml = plan_to_yaml(p, &len);
  struct gcoll_plan *q = gcoll_plan_read_mem(yaml, len, "mem.yaml", err, sizeof(err));
  if (q == NULL) fail_msg("re-reading failed: %s", err);
  /* Canonical: the re-read plan writes the same text. */
  char *again = plan_to_yaml(q, NULL);
  assert_string_equal(yaml, again);
  free(again);
  free(yaml);
  return q;
}

static int count_dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

struct tmpdir {
  char dir[64];
  char path[96];
};

static void tmpdir_make(struct tmpdir *t) {
  snprintf(t->dir, sizeof(t->dir), "/tmp/gcoll-plan-XXXXXX");
  assert_non_null(mkdtemp(t->dir));
  snprintf(t->path, sizeof(t->path), "%s/plan.yaml", t->dir);
}

static void tmpdir_remove(struct tmpdir *t) {
  unlink(t->path);
  assert_int_equal(rmdir(t->dir), 0);
}

/* Every rank (or `sample` random ones) loaded from the file equals the
 * in-memory view. */
static void assert_file_views(const struct gcoll_plan *p, const char *path, int sample,
                              unsigned long long seed) {
  struct gcoll_rank_view *mem = malloc(sizeof(*mem)), *file = malloc(sizeof(*file));
  char err[512];
  assert_non_null(mem);
  assert_non_null(file);
  int count = sample > 0 && sample < p->nranks ? sample : p->nranks;
  for (int i = 0; i < count; i++) {
    int r = count == p->nranks ? i : (int)(test_rand(&seed) % (unsigned)p->nranks);
    if (i == 0 && count != p->nranks) r = p->nranks - 1;
    memset(mem, 0xa5, sizeof(*mem));
    memset(file, 0x5a, sizeof(*file));
    if (gcoll_plan_rank_view(p, r, mem, err, sizeof(err))) fail_msg("rank %d: %s", r, err);
    if (gcoll_plan_load_rank_view(path, r, file, err, sizeof(err)))
      fail_msg("rank %d from file: %s", r, err);
    assert_same_view(mem, file);
    assert_string_equal(file->host, p->node_host[file->node]);
    /* What init keeps: the same view, and every channel's ring order as
     * the in-memory plan gives it. */
    int *rings = NULL, *want = malloc(sizeof(int) * (size_t)p->nranks);
    assert_non_null(want);
    memset(file, 0x5a, sizeof(*file));
    if (gcoll_plan_load_rank(path, r, file, &rings, err, sizeof(err)))
      fail_msg("rank %d, init load: %s", r, err);
    assert_same_view(mem, file);
    assert_string_equal(file->host, p->node_host[file->node]);
    for (int c = 0; c < p->nchannels; c++) {
      assert_int_equal(gcoll_plan_ring_ranks(p, c, want), 0);
      assert_memory_equal(rings + (size_t)c * (size_t)p->nranks, want, sizeof(int) * (size_t)p->nranks);
    }
    free(rings);
    free(want);
  }
  free(mem);
  free(file);
}

/* Rings are consistent across ranks: my next's prev is me. */
static void assert_views_consistent(const struct gcoll_plan *p) {
  struct gcoll_rank_view *v = malloc(sizeof(*v) * 2);
  char err[512];
  for (int r = 0; r < p->nranks; r++) {
    assert_int_equal(gcoll_plan_rank_view(p, r, &v[0], err, sizeof(err)), 0);
    for (int c = 0; c < v[0].nchannels; c++) {
      assert_int_equal(gcoll_plan_rank_view(p, v[0].ring[c].next, &v[1], err, sizeof(err)), 0);
      assert_int_equal(v[1].ring[c].prev, r);
      assert_int_equal(v[1].ring[c].prev_edge, v[0].ring[c].next_edge);
      if (v[0].tree[c].parent >= 0) {
        assert_int_equal(gcoll_plan_rank_view(p, v[0].tree[c].parent, &v[1], err, sizeof(err)), 0);
        int found = 0;
        for (int j = 0; j < v[1].tree[c].nchildren; j++) found += v[1].tree[c].children[j] == r;
        assert_int_equal(found, 1);
      }
    }
  }
  free(v);
}

/* The whole check for one plan: memory round trip, verify on both sides,
 * file round trip and rank views. */
static void check_plan(struct gcoll_plan *p, int sample) {
  char err[512] = "";
  if (gcoll_plan_verify(p, err, sizeof(err))) fail_msg("built plan fails verify: %s", err);
  struct gcoll_plan *q = plan_round_trip(p);
  assert_same_plan(p, q);
  if (gcoll_plan_verify(q, err, sizeof(err))) fail_msg("read plan fails verify: %s", err);
  gcoll_plan_free(q);

  struct tmpdir td;
  tmpdir_make(&td);
  assert_int_equal(gcoll_plan_write_file(p, td.path, err, sizeof(err)), 0);
  assert_int_equal(count_dir_entries(td.dir), 1);
  q = gcoll_plan_read_file(td.path, err, sizeof(err));
  if (q == NULL) fail_msg("read_file: %s", err);
  assert_same_plan(p, q);
  gcoll_plan_free(q);
  assert_file_views(p, td.path, sample, 0x1234567ULL + (unsigned)p->nranks);
  tmpdir_remove(&td);
}

/* ---- tests: shapes ---------------------------------------------------------- */

static void test_single_node(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(h100, 1, 0);
  assert_int_equal(p->nnodes, 1);
  assert_int_equal(p->nranks, 8);
  check_plan(p, 0);
  assert_views_consistent(p);
  gcoll_plan_free(p);
  /* A single CPU rank: self edges all round. */
  p = build_uniform(cpu, 1, 1);
  assert_int_equal(p->nranks, 1);
  check_plan(p, 0);
  struct gcoll_rank_view v;
  char err[256];
  assert_int_equal(gcoll_plan_rank_view(p, 0, &v, err, sizeof(err)), 0);
  assert_int_equal(v.ring[0].prev_edge, GCOLL_EDGE_SELF);
  assert_int_equal(v.ring[0].next, 0);
  gcoll_plan_free(p);
}

static void test_four_dgx_h100(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(h100, 4, 0);
  assert_int_equal(p->nranks, 32);
  assert_int_equal(p->nclasses, 1);
  check_plan(p, 0);
  assert_views_consistent(p);
  gcoll_plan_free(p);
}

static void test_mixed_13(void **state) {
  (void)state;
  struct gcoll_plan *p = build_mixed13();
  assert_int_equal(p->nnodes, 13);
  assert_int_equal(p->nclasses, 2);
  assert_int_equal(p->nranks, 7 * 8 + 6 * 4);
  assert_int_equal(p->job.id, 777);
  check_plan(p, 0);
  assert_views_consistent(p);
  gcoll_plan_free(p);
}

static void test_various_sizes(void **state) {
  (void)state;
  const struct gcoll_topo *tops[] = {h100, a100, pcie, cpu};
  for (int n = 1; n <= 9; n++)
    for (int t = 0; t < 4; t++) {
      struct gcoll_plan *p = build_uniform(tops[t], n, t == 3 ? 1 + n % 2 : 0);
      check_plan(p, 40);
      gcoll_plan_free(p);
    }
}

static void test_cpu_1000(void **state) {
  (void)state;
  struct gcoll_plan *p = build_cpu1000();
  assert_int_equal(p->nnodes, 1000);
  assert_int_equal(p->nranks, 2000);
  size_t len;
  char *yaml = plan_to_yaml(p, &len);
  /* Compression: far fewer node entries than nodes, but more than one run. */
  int entries = 0;
  for (const char *s = yaml; (s = strstr(s, "topology: cpu-only")) != NULL; s++) entries++;
  assert_true(entries >= 5 && entries < 30);
  assert_non_null(strstr(yaml, "host: login-a"));
  assert_true(len < 64 * 1024);
  free(yaml);
  check_plan(p, 300);
  gcoll_plan_free(p);
}

/* The builder visits nodes in order; the format allows any permutation, so
 * permuted orders (the long ones are written as a list) must round-trip. */
static void test_permuted_node_order(void **state) {
  (void)state;
  unsigned long long seed = 99;
  struct gcoll_plan *p = build_cpu1000();
  for (int round = 0; round < 3; round++) {
    int n = p->nnodes;
    if (round == 0) {
      for (int i = 0; i < n; i++) p->ring_node_order[i] = n - 1 - i;
    } else {
      for (int i = n - 1; i > 0; i--) {
        int j = (int)(test_rand(&seed) % (unsigned)(i + 1)), tmp = p->ring_node_order[i];
        p->ring_node_order[i] = p->ring_node_order[j];
        p->ring_node_order[j] = tmp;
      }
    }
    /* The trees follow the ring's node order (plan-format.md). */
    assert_int_equal(gcoll_plan_build_trees(p), 0);
    struct gcoll_plan *q = plan_round_trip(p);
    assert_same_plan(p, q);
    gcoll_plan_free(q);
  }
  check_plan(p, 100);
  gcoll_plan_free(p);
}

/* Host names that cannot appear in a host list, or need YAML quoting, are
 * written one per entry and come back byte for byte. */
static void test_odd_host_names(void **state) {
  (void)state;
  static const char *const odd[] = {"a,b", "n[01]", "with space", "colon: here", "#hash",
                                    "-dash", "'quote'", "\"dq\"", "n001", "n002", "n003",
                                    "tab\there", "{brace}", "?q", "*star", "&amp", "yes",
                                    "null", "0x10", "n004", "n005"};
  const int n = (int)(sizeof(odd) / sizeof(odd[0]));
  const struct gcoll_topo *topo[32];
  char *hosts[32];
  for (int i = 0; i < n; i++) {
    topo[i] = cpu;
    hosts[i] = (char *)odd[i];
  }
  struct gcoll_plan *p = build(n, topo, hosts, 1, 5, 6);
  for (int i = 0; i < n; i++) assert_string_equal(p->node_host[i], odd[i]);
  check_plan(p, 0);
  gcoll_plan_free(p);
}

/* ---- tests: loader and job check --------------------------------------------- */

static void test_load_errors(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(h100, 2, 0);
  struct tmpdir td;
  struct gcoll_rank_view v;
  char err[512] = "";
  tmpdir_make(&td);
  assert_int_equal(gcoll_plan_write_file(p, td.path, err, sizeof(err)), 0);
  const int bad_ranks[] = {-1, -1000, 16, 17, 1 << 30};
  for (size_t i = 0; i < sizeof(bad_ranks) / sizeof(bad_ranks[0]); i++) {
    err[0] = '\0';
    assert_int_equal(gcoll_plan_load_rank_view(td.path, bad_ranks[i], &v, err, sizeof(err)), -1);
    int *rings = (int *)1;
    assert_int_equal(gcoll_plan_load_rank(td.path, bad_ranks[i], &v, &rings, err, sizeof(err)), -1);
    assert_null(rings);
    assert_non_null(strstr(err, td.path));
    char num[16];
    snprintf(num, sizeof(num), "%d", bad_ranks[i]);
    assert_non_null(strstr(err, num));
  }
  assert_int_equal(gcoll_plan_load_rank_view(td.path, 15, &v, err, sizeof(err)), 0);
  char missing[128];
  snprintf(missing, sizeof(missing), "%s/no-such-plan.yaml", td.dir);
  err[0] = '\0';
  assert_int_equal(gcoll_plan_load_rank_view(missing, 0, &v, err, sizeof(err)), -1);
  assert_non_null(strstr(err, missing));
  assert_null(gcoll_plan_read_file(missing, err, sizeof(err)));
  assert_non_null(strstr(err, missing));
  /* A directory is not a plan. */
  assert_int_equal(gcoll_plan_load_rank_view(td.dir, 0, &v, err, sizeof(err)), -1);
  assert_non_null(strstr(err, td.dir));
  tmpdir_remove(&td);
  gcoll_plan_free(p);
}

static void test_check_job(void **state) {
  (void)state;
  const struct gcoll_topo *topo[2] = {h100, pcie};
  char *hosts[2] = {"n001", "n002.example.org"};
  struct gcoll_plan *p = build(2, topo, hosts, 0, -1, -1);
  struct gcoll_rank_view v;
  char err[512] = "";
  assert_int_equal(gcoll_plan_rank_view(p, 3, &v, err, sizeof(err)), 0);
  uint32_t good = gcoll_topo_hash(h100), other = gcoll_topo_hash(pcie);
  assert_int_equal(v.topology_hash, good);
  assert_int_equal(gcoll_rank_view_check_job(&v, 12, "n001", &good, err, sizeof(err)), 0);
  assert_int_equal(gcoll_rank_view_check_job(&v, 12, NULL, NULL, err, sizeof(err)), 0);
  assert_int_equal(gcoll_rank_view_check_job(&v, 12, "n001.domain", &good, err, sizeof(err)), 0);

  assert_int_equal(gcoll_rank_view_check_job(&v, 16, "n001", &good, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "12"));
  assert_non_null(strstr(err, "16"));
  const char *wrong_hosts[] = {"n002", "n0011", "n00", "n001x.domain", "", "N001"};
  for (size_t i = 0; i < sizeof(wrong_hosts) / sizeof(wrong_hosts[0]); i++) {
    err[0] = '\0';
    assert_int_equal(gcoll_rank_view_check_job(&v, 12, wrong_hosts[i], NULL, err, sizeof(err)),
                     -1);
    assert_non_null(strstr(err, "n001"));
  }
  assert_int_equal(gcoll_rank_view_check_job(&v, 12, "n001", &other, err, sizeof(err)), -1);
  char hex[16];
  snprintf(hex, sizeof(hex), "%08x", (unsigned)other);
  assert_non_null(strstr(err, hex));
  assert_non_null(strstr(err, "dgx-h100"));

  /* The node whose plan name has a domain matches its short name. */
  assert_int_equal(gcoll_plan_rank_view(p, 9, &v, err, sizeof(err)), 0);
  assert_int_equal(gcoll_rank_view_check_job(&v, 12, "n002", &other, err, sizeof(err)), 0);
  assert_int_equal(gcoll_rank_view_check_job(&v, 12, "n002.example.org", NULL, err, sizeof(err)),
                   0);
  assert_int_equal(gcoll_rank_view_check_job(&v, 12, "n002.other.org", NULL, err, sizeof(err)),
                   -1);
  assert_int_equal(gcoll_rank_view_check_job(&v, 12, "n001", NULL, err, sizeof(err)), -1);
  gcoll_plan_free(p);
}

static void test_tuning_lookup(void **state) {
  (void)state;
  struct gcoll_plan *p = build_mixed13();
  struct gcoll_rank_view v;
  char err[256];
  assert_int_equal(gcoll_plan_rank_view(p, 0, &v, err, sizeof(err)), 0);
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    int n = v.ntuning[c];
    assert_true(n >= 1);
    for (int i = 0; i < n; i++) {
      uint64_t lo = i == 0 ? 0 : v.tuning[c][i - 1].max_bytes + 1, hi = v.tuning[c][i].max_bytes;
      assert_ptr_equal(gcoll_rank_view_tuning(&v, (enum gcoll_coll)c, lo), &v.tuning[c][i]);
      assert_ptr_equal(gcoll_rank_view_tuning(&v, (enum gcoll_coll)c, hi), &v.tuning[c][i]);
    }
    assert_ptr_equal(gcoll_rank_view_tuning(&v, (enum gcoll_coll)c, UINT64_MAX),
                     &v.tuning[c][n - 1]);
  }
  assert_null(gcoll_rank_view_tuning(&v, GCOLL_NCOLLS, 1));
  gcoll_plan_free(p);
}

/* ---- tests: atomic write ------------------------------------------------------ */

static void test_write_to_missing_dir(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(pcie, 2, 0);
  struct tmpdir td;
  char path[160], err[512] = "";
  tmpdir_make(&td);
  snprintf(path, sizeof(path), "%s/missing/plan.yaml", td.dir);
  assert_int_equal(gcoll_plan_write_file(p, path, err, sizeof(err)), -1);
  assert_non_null(strstr(err, td.dir));
  assert_int_equal(count_dir_entries(td.dir), 0);
  tmpdir_remove(&td);
  gcoll_plan_free(p);
}

/* A plan the writer refuses leaves an existing file untouched and no
 * temporary behind. */
static void test_failed_write_keeps_old_file(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(pcie, 3, 0);
  struct tmpdir td;
  char err[512] = "";
  tmpdir_make(&td);
  assert_int_equal(gcoll_plan_write_file(p, td.path, err, sizeof(err)), 0);
  size_t len;
  char *before = plan_to_yaml(p, &len);
  int saved = p->node_first_rank[1];
  p->node_first_rank[1] = 77;
  err[0] = '\0';
  assert_int_equal(gcoll_plan_write_file(p, td.path, err, sizeof(err)), -1);
  assert_true(err[0] != '\0');
  p->node_first_rank[1] = saved;
  assert_int_equal(count_dir_entries(td.dir), 1);
  char *buf = NULL;
  FILE *f = fopen(td.path, "r");
  assert_non_null(f);
  buf = calloc(1, len + 16);
  assert_int_equal(fread(buf, 1, len + 16, f), len);
  fclose(f);
  assert_string_equal(buf, before);
  free(buf);
  free(before);
  tmpdir_remove(&td);
  gcoll_plan_free(p);
}

static void test_overwrite_replaces_whole(void **state) {
  (void)state;
  struct gcoll_plan *big = build_cpu1000(), *small = build_uniform(h100, 1, 0);
  struct tmpdir td;
  char err[512] = "";
  tmpdir_make(&td);
  assert_int_equal(gcoll_plan_write_file(big, td.path, err, sizeof(err)), 0);
  assert_int_equal(gcoll_plan_write_file(small, td.path, err, sizeof(err)), 0);
  size_t len;
  char *yaml = plan_to_yaml(small, &len);
  struct stat st;
  assert_int_equal(stat(td.path, &st), 0);
  assert_int_equal((size_t)st.st_size, len);
  assert_int_equal(count_dir_entries(td.dir), 1);
  struct gcoll_plan *q = gcoll_plan_read_file(td.path, err, sizeof(err));
  if (q == NULL) fail_msg("%s", err);
  assert_same_plan(small, q);
  gcoll_plan_free(q);
  /* And back to the big one. */
  assert_int_equal(gcoll_plan_write_file(big, td.path, err, sizeof(err)), 0);
  q = gcoll_plan_read_file(td.path, err, sizeof(err));
  assert_non_null(q);
  assert_same_plan(big, q);
  gcoll_plan_free(q);
  free(yaml);
  tmpdir_remove(&td);
  gcoll_plan_free(big);
  gcoll_plan_free(small);
}

/* ---- tests: corrupted text ------------------------------------------------------- */

/* Replaces the first occurrence of `from` after `anchor` with `to`; returns
 * the 1-based line of the replacement. */
static int replace_in(char **yaml, const char *anchor, const char *from, const char *to) {
  char *a = strstr(*yaml, anchor);
  assert_non_null(a);
  char *at = strstr(a, from);
  assert_non_null(at);
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

/* off: the message must point at the damaged line plus off; -1 when the
 * damage is only visible later (a count that disagrees with a list). */
struct corruption {
  const char *anchor, *from, *to, *needle;
  int off;
};

static const struct corruption corruptions[] = {
    {"ranks:", "ranks: 32", "ranks: 33", "ranks", -1},
    {"ranks:", "ranks: 32", "ranks: -1", "ranks", 0},
    {"nodes_count:", "nodes_count: 4", "nodes_count: 5", "nodes", -1},
    {"channels:", "channels: ", "channels: 3 #", "channels", 0},
    {"gcoll-plan:", "gcoll-plan: 1", "gcoll-plan: 2", "version", 0},
    {"hash:", "hash: \"", "hash: \"zz", "hash", 0},
    {"local_ranks:", "local_ranks: 8", "local_ranks: 7", "entries", -1},
    {"intra:", "intra: p2p", "intra: tcp", "intra", 0},
    {"order: [", "order: [", "order: [0, ", "order", 0},
    {"chain: [", "chain: [", "chain: [9, ", "chain", 0},
    {"ranks: 0-", "ranks: 0-", "ranks: 1-", "ranks", 0},
    {"topology: dgx-h100", "topology: dgx-h100", "topology: dgx-h200", "dgx-h200", 0},
    {"node_order:", "node_order: 0-3", "node_order: \"0,0-3\"", "node_order", 0},
    {"node_order:", "node_order: 0-3", "node_order: 0-4", "node_order", 0},
    {"node_order:", "node_order: 0-3", "node_order: 0-2", "node_order", 0},
    {"kind:", "double-binary", "triple", "tree.kind", 0},
    {"t1:", "parent: [", "parent: [5, ", "parent", 0},
    {"construction:", "construction: mirror", "construction: spiral", "construction", 0},
    {"allreduce:", "algo: ", "algo: magic", "algo", 0},
    {"allreduce:", "proto: ", "proto: xl", "proto", 0},
    {"allreduce:", "channels: ", "channels: 9999", "channels", 0},
    {"tuning:", "allreduce:", "allgatherv: []\n  allreduce:", "allgatherv", 0},
    {"ranks:", "ranks: 32", "ranks: 32\nextra: 1", "extra", 1},
};

static void test_corrupted_text(void **state) {
  (void)state;
  struct gcoll_plan *p = build_uniform(h100, 4, 0);
  char *orig = plan_to_yaml(p, NULL);
  for (size_t i = 0; i < sizeof(corruptions) / sizeof(corruptions[0]); i++) {
    const struct corruption *c = &corruptions[i];
    char *yaml = strdup(orig), err[512] = "";
    int line = replace_in(&yaml, c->anchor, c->from, c->to);
    struct gcoll_plan *q = gcoll_plan_read_mem(yaml, strlen(yaml), "bad.yaml", err, sizeof(err));
    if (q != NULL) {
      /* What the reader lets through, verify must catch. */
      char verr[512] = "";
      if (gcoll_plan_verify(q, verr, sizeof(verr)) == 0)
        fail_msg("corruption %zu (%s -> %s) accepted by reader and verify", i, c->from, c->to);
      gcoll_plan_free(q);
    } else {
      int at = -1;
      if (getenv("GCOLL_TEST_VERBOSE")) fprintf(stderr, "%s\n", err);
      if (strncmp(err, "bad.yaml:", 9) == 0) at = atoi(err + 9);
      if (at < 1) fail_msg("corruption %zu: message lacks FILE:LINE: %s", i, err);
      if (strstr(err, c->needle) == NULL)
        fail_msg("corruption %zu: message does not name '%s': %s", i, c->needle, err);
      if (c->off >= 0 && at != line + c->off)
        fail_msg("corruption %zu: line %d, damage on %d: %s", i, at, line + c->off, err);
    }
    free(yaml);
  }
  free(orig);
  gcoll_plan_free(p);
}

/* Every truncation of a plan is refused with FILE:LINE or reads to a plan
 * verify judges; never a crash. */
static void test_truncated_text(void **state) {
  (void)state;
  struct gcoll_plan *p = build_mixed13();
  size_t len;
  char *yaml = plan_to_yaml(p, &len);
  for (size_t cut = 0; cut < len; cut += 11) {
    char err[512] = "";
    struct gcoll_plan *q = gcoll_plan_read_mem(yaml, cut, "cut.yaml", err, sizeof(err));
    if (q == NULL) {
      assert_int_equal(strncmp(err, "cut.yaml:", 9), 0);
    } else {
      gcoll_plan_verify(q, err, sizeof(err));
      gcoll_plan_free(q);
    }
  }
  free(yaml);
  gcoll_plan_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_node),
      cmocka_unit_test(test_four_dgx_h100),
      cmocka_unit_test(test_mixed_13),
      cmocka_unit_test(test_various_sizes),
      cmocka_unit_test(test_cpu_1000),
      cmocka_unit_test(test_permuted_node_order),
      cmocka_unit_test(test_odd_host_names),
      cmocka_unit_test(test_load_errors),
      cmocka_unit_test(test_check_job),
      cmocka_unit_test(test_tuning_lookup),
      cmocka_unit_test(test_write_to_missing_dir),
      cmocka_unit_test(test_failed_write_keeps_old_file),
      cmocka_unit_test(test_overwrite_replaces_whole),
      cmocka_unit_test(test_corrupted_text),
      cmocka_unit_test(test_truncated_text),
  };
  return cmocka_run_group_tests(tests, test_ref_load, test_ref_free);
}
