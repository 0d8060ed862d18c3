/* Plans of sub-communicators derived from a parent plan (plan_subset.c) and
 * the rank lists that name them (ranklist.c).
 *
 * The derived plan is checked against the parent rank by rank, not against
 * the derivation's own steps: every member keeps its host and the GPU it
 * drives (rank views of both plans), each channel's ring visits a node's
 * members in the order the parent's ring visits them, the child passes
 * gcoll_plan_verify and survives a YAML round trip, and on DGX-H100 nodes
 * (GPU i sits next to mlx5_i) every ring and chain end uses the NIC of the
 * GPU at that end. Random parents (1-5 nodes of mixed topologies and
 * counts) and random members cover what the named cases do not. */
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
#include "testutil.h"

static struct gcoll_plan *make_plan(const struct gcoll_topo *const *topos, const int *counts,
                                    int nnodes) {
  const struct gcoll_topo **nt = calloc((size_t)nnodes, sizeof(*nt));
  assert_non_null(nt);
  for (int i = 0; i < nnodes; i++) nt[i] = topos[i];
  char err[512];
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = nt, .node_ranks = counts,
                                .job_id = 7, .step_id = 3};
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("build: %s", err);
  free(nt);
  return p;
}

static struct gcoll_plan *dgx_plan(int nnodes) {
  const struct gcoll_topo *t[8];
  int counts[8];
  for (int i = 0; i < nnodes; i++) {
    t[i] = test_ref[TEST_H100];
    counts[i] = 8;
  }
  return make_plan(t, counts, nnodes);
}

static struct gcoll_plan *subset_ok(const struct gcoll_plan *p, const int *m, int n) {
  char err[512];
  struct gcoll_plan *c = gcoll_plan_subset(p, m, n, err, sizeof(err));
  if (c == NULL) fail_msg("subset: %s", err);
  return c;
}

static void subset_fails(const struct gcoll_plan *p, const int *m, int n, const char *needle) {
  char err[512] = "";
  struct gcoll_plan *c = gcoll_plan_subset(p, m, n, err, sizeof(err));
  if (c != NULL) {
    gcoll_plan_free(c);
    fail_msg("subset of %d members accepted, expected '%s'", n, needle);
  }
  if (strstr(err, needle) == NULL) fail_msg("error '%s' lacks '%s'", err, needle);
}

/* The plan as its YAML text (malloc'd, *len bytes). */
static char *plan_yaml(const struct gcoll_plan *c, size_t *len) {
  char *buf = NULL, err[512];
  FILE *f = open_memstream(&buf, len);
  assert_non_null(f);
  if (gcoll_plan_write_stream(c, f, err, sizeof(err)) != 0) fail_msg("write: %s", err);
  fclose(f);
  return buf;
}

/* What plan_yaml wrote, read back; fails the test if it does not read. */
static struct gcoll_plan *read_back(const char *buf, size_t len, const char *what) {
  char err[512];
  struct gcoll_plan *back = gcoll_plan_read_mem(buf, len, what, err, sizeof(err));
  if (back == NULL) fail_msg("read back: %s\n%s", err, buf);
  return back;
}

/* The properties every derived plan has, checked against its parent. */
static void check_against_parent(const struct gcoll_plan *p, const struct gcoll_plan *c,
                                 const int *m, int n) {
  char err[512];
  if (gcoll_plan_verify(c, err, sizeof(err)) != 0) fail_msg("verify: %s", err);
  assert_int_equal(c->nranks, n);
  assert_int_equal(c->nchannels, p->nchannels);
  assert_int_equal(c->job.id, p->job.id);
  struct gcoll_rank_view *pv = malloc(sizeof(*pv)), *cv = malloc(sizeof(*cv));
  assert_non_null(pv);
  assert_non_null(cv);
  for (int i = 0; i < n; i++) {
    assert_int_equal(gcoll_plan_rank_view(p, m[i], pv, err, sizeof(err)), 0);
    assert_int_equal(gcoll_plan_rank_view(c, i, cv, err, sizeof(err)), 0);
    assert_string_equal(cv->host, pv->host);
    assert_int_equal(cv->gpu, pv->gpu);
    assert_string_equal(cv->gpu_busid, pv->gpu_busid);
    assert_int_equal(cv->topology_hash, pv->topology_hash);
  }
  free(pv);
  free(cv);
  /* Ring order inside each node: the members in the parent's order. */
  int *pr = malloc((size_t)p->nranks * sizeof(int)), *cr = malloc((size_t)n * sizeof(int));
  int *ppos = malloc((size_t)p->nranks * sizeof(int));
  assert_non_null(pr);
  assert_non_null(cr);
  assert_non_null(ppos);
  for (int ch = 0; ch < c->nchannels; ch++) {
    assert_int_equal(gcoll_plan_ring_ranks(p, ch, pr), 0);
    assert_int_equal(gcoll_plan_ring_ranks(c, ch, cr), 0);
    for (int i = 0; i < p->nranks; i++) ppos[pr[i]] = i;
    for (int i = 0; i + 1 < n; i++) {
      int a = m[cr[i]], b = m[cr[i + 1]];
      if (gcoll_plan_node_of_rank(p, a) != gcoll_plan_node_of_rank(p, b)) continue;
      /* Within one node the parent reaches a before b, counted from where
       * its ring enters the node (the class ring's first local rank). */
      int node = gcoll_plan_node_of_rank(p, a);
      const struct gcoll_plan_class *k = &p->classes[p->node_class[node]];
      int entry = ppos[gcoll_plan_rank_at(p, p->node_first_rank[node] + k->graph.ch[ch % (p->nchannels / 2)].ring[0])];
      int da = (ppos[a] - entry + p->nranks) % p->nranks;
      int db = (ppos[b] - entry + p->nranks) % p->nranks;
      if (da >= db)
        fail_msg("channel %d: child visits parent ranks %d then %d, parent the other way", ch, a,
                 b);
    }
  }
  free(pr);
  free(cr);
  free(ppos);
}

/* Channel ends of class `cls` pair with the NICs next to their own GPUs
 * (what the parent paired those GPUs with), the ring leaving by the NIC it
 * enters by, through the entry GPU (PXN). */
static int ring_local(const struct gcoll_plan_class *cls, const struct gcoll_intra_channel *ch) {
  char want[32];
  int in = ch->ring[0], out = ch->ring[cls->nlocal - 1];
  snprintf(want, sizeof(want), "mlx5_%d", cls->has_gpu_map ? cls->gpu[in] : in);
  return strcmp(ch->ring_nic_in_name, want) == 0 && strcmp(ch->ring_nic_out_name, want) == 0 &&
         ch->ring_pxn == (out == in ? -1 : in);
}

static int chain_local(const struct gcoll_plan_class *cls, const struct gcoll_intra_channel *ch) {
  char want[32];
  int end = ch->chain[0];
  snprintf(want, sizeof(want), "mlx5_%d", cls->has_gpu_map ? cls->gpu[end] : end);
  return strcmp(ch->chain_nic_name, want) == 0;
}

/* For each channel, every class pairs its ring (chain) ends locally, or,
 * where that would put the child's nodes on different rails, every class
 * has the parent's NICs for it; either way the rails agree across nodes. */
static void check_dgx_nics(const struct gcoll_plan *parent, const struct gcoll_plan *c) {
  char err[256];
  if (c->nnodes < 2) return;
  if (gcoll_plan_verify_rails(c, err, sizeof(err)) != 0) fail_msg("%s", err);
  for (int s = 0; s < c->nchannels / 2; s++) {
    int rl = 1, cl = 1, rp = parent != NULL, cp = parent != NULL;
    for (int k = 0; k < c->nclasses; k++) {
      const struct gcoll_intra_channel *ch = &c->classes[k].graph.ch[s];
      rl &= ring_local(&c->classes[k], ch);
      cl &= chain_local(&c->classes[k], ch);
      if (parent == NULL) continue;
      const struct gcoll_intra_channel *pch = &parent->classes[0].graph.ch[s];
      rp &= strcmp(ch->ring_nic_in_name, pch->ring_nic_in_name) == 0 &&
            strcmp(ch->ring_nic_out_name, pch->ring_nic_out_name) == 0;
      cp &= strcmp(ch->chain_nic_name, pch->chain_nic_name) == 0;
    }
    if (!(rl || rp)) fail_msg("channel %d: ring NICs neither local nor the parent's", s);
    if (!(cl || cp)) fail_msg("channel %d: chain NICs neither local nor the parent's", s);
  }
}

static void test_identity(void **state) {
  (void)state;
  struct gcoll_plan *p = dgx_plan(3);
  int m[24];
  for (int i = 0; i < 24; i++) m[i] = i;
  struct gcoll_plan *c = subset_ok(p, m, 24);
  check_against_parent(p, c, m, 24);
  assert_int_equal(c->nclasses, 1);
  assert_string_equal(c->classes[0].name, p->classes[0].name);
  assert_int_equal(c->classes[0].has_gpu_map, 0);
  assert_memory_equal(&c->classes[0].graph.ch, &p->classes[0].graph.ch,
                      sizeof(p->classes[0].graph.ch[0]) * (size_t)(p->nchannels / 2));
  gcoll_plan_free(c);
  gcoll_plan_free(p);
}

static void test_even_gpus(void **state) {
  (void)state;
  struct gcoll_plan *p = dgx_plan(3);
  int m[] = {0, 2, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15};
  struct gcoll_plan *c = subset_ok(p, m, 12);
  check_against_parent(p, c, m, 12);
  check_dgx_nics(p, c);
  assert_int_equal(c->nnodes, 2);
  const struct gcoll_plan_class *k0 = &c->classes[c->node_class[0]];
  assert_string_equal(k0->name, "dgx-h100:0-6:2");
  assert_int_equal(k0->nlocal, 4);
  assert_int_equal(k0->has_gpu_map, 1);
  int gpus[] = {0, 2, 4, 6};
  assert_memory_equal(k0->gpu, gpus, sizeof(gpus));
  assert_int_equal(k0->graph.nvls_nheads, 4);
  /* A split of the split composes: GPUs 6 and 2, named by GPU. */
  int m2[] = {3, 1};
  struct gcoll_plan *g = subset_ok(c, m2, 2);
  check_against_parent(c, g, m2, 2);
  assert_string_equal(g->classes[0].name, "dgx-h100:6,2");
  assert_int_equal(g->classes[0].gpu[0], 6);
  assert_int_equal(g->classes[0].gpu[1], 2);
  assert_string_equal(g->classes[0].graph.ch[0].ring_nic_in_name, "");  /* one node */
  gcoll_plan_free(g);
  gcoll_plan_free(c);
  gcoll_plan_free(p);
}

static void test_strided_and_reordered(void **state) {
  (void)state;
  struct gcoll_plan *p = dgx_plan(4);
  int dp[] = {3, 11, 19, 27};  /* local rank 3 of every node: a data-parallel group */
  struct gcoll_plan *c = subset_ok(p, dp, 4);
  check_against_parent(p, c, dp, 4);
  check_dgx_nics(p, c);
  assert_int_equal(c->nnodes, 4);
  assert_int_equal(c->classes[0].gpu[0], 3);
  gcoll_plan_free(c);
  int rev[] = {24, 25, 26, 27, 28, 29, 30, 31, 8, 9, 10, 11, 12, 13, 14, 15};
  c = subset_ok(p, rev, 16);
  check_against_parent(p, c, rev, 16);
  assert_string_equal(c->node_host[0], p->node_host[3]);
  assert_string_equal(c->node_host[1], p->node_host[1]);
  /* The parent's ring visits node 1 before node 3: so does the child's. */
  assert_int_equal(c->ring_node_order[0], 1);
  assert_int_equal(c->ring_node_order[1], 0);
  gcoll_plan_free(c);
  gcoll_plan_free(p);
}

static void test_round_trip(void **state) {
  (void)state;
  struct gcoll_plan *p = dgx_plan(2);
  int m[] = {7, 5, 1, 8, 10};
  struct gcoll_plan *c = subset_ok(p, m, 5);
  char err[512];
  size_t len = 0;
  char *buf = plan_yaml(c, &len);
  assert_non_null(strstr(buf, "gpus: [7, 5, 1]"));
  struct gcoll_plan *back = read_back(buf, len, "subset");
  check_against_parent(p, back, m, 5);
  for (int k = 0; k < c->nclasses; k++) {
    assert_string_equal(back->classes[k].name, c->classes[k].name);
    assert_int_equal(back->classes[k].has_gpu_map, c->classes[k].has_gpu_map);
    assert_memory_equal(back->classes[k].gpu, c->classes[k].gpu,
                        sizeof(int) * (size_t)c->classes[k].nlocal);
  }
  /* Bus ids follow the members: GPU 7 of a DGX H100 is 0000:df:00.0. */
  assert_string_equal(back->classes[back->node_class[0]].gpu_busid[0], "0000:df:00.0");
  gcoll_plan_free(back);
  /* A bus id twice, or one that is not a bus id, is refused. */
  char *ids = strstr(buf, "\"0000:c3:00.0\"");
  assert_non_null(ids);
  memcpy(ids, "\"0000:df:00.0\"", 14);
  back = gcoll_plan_read_mem(buf, len, "subset", err, sizeof(err));
  assert_null(back);
  assert_non_null(strstr(err, "GPU 0000:df:00.0 appears twice"));
  memcpy(ids, "\"0000:zz:00.0\"", 14);
  back = gcoll_plan_read_mem(buf, len, "subset", err, sizeof(err));
  assert_null(back);
  assert_non_null(strstr(err, "'0000:zz:00.0' is not a PCI bus id"));
  memcpy(ids, "\"0000:c3:00.0\"", 14);
  /* A GPU named twice, or a map on a CPU class, is refused by the reader. */
  char *dup = strstr(buf, "gpus: [7, 5, 1]");
  memcpy(dup, "gpus: [7, 5, 7]", 15);
  back = gcoll_plan_read_mem(buf, len, "subset", err, sizeof(err));
  assert_null(back);
  assert_non_null(strstr(err, "GPU 7 appears twice"));
  free(buf);
  gcoll_plan_free(c);
  gcoll_plan_free(p);
}

static void test_refused(void **state) {
  (void)state;
  struct gcoll_plan *p = dgx_plan(2);
  int twice[] = {4, 4};
  subset_fails(p, twice, 2, "rank 4 is a member twice");
  int outside[] = {0, 16};
  subset_fails(p, outside, 2, "outside the plan's 0..15");
  subset_fails(p, twice, 0, "needs 1 to 16");
  gcoll_plan_free(p);
}

/* Members of one node need not be adjacent: the child gets a rank order,
 * every member keeps its node and GPU, and the order survives YAML. */
static void test_interleaved(void **state) {
  (void)state;
  struct gcoll_plan *p = dgx_plan(2);
  int m[] = {0, 8, 1, 9, 2, 10};
  struct gcoll_plan *c = subset_ok(p, m, 6);
  check_against_parent(p, c, m, 6);
  assert_int_equal(c->nnodes, 2);
  assert_non_null(c->rank_of_slot);
  /* Node 0 holds child ranks 0, 2, 4 (parent ranks 0, 1, 2). */
  assert_int_equal(gcoll_plan_rank_at(c, 0), 0);
  assert_int_equal(gcoll_plan_rank_at(c, 1), 2);
  assert_int_equal(gcoll_plan_rank_at(c, 2), 4);
  char err[512];
  size_t len = 0;
  char *buf = plan_yaml(c, &len);
  assert_non_null(strstr(buf, "ranks: \"0-4:2\""));
  struct gcoll_plan *back = read_back(buf, len, "interleaved");
  check_against_parent(p, back, m, 6);
  /* One rank's view read the streaming way finds its node by its list. */
  char path[] = "/tmp/gcoll-subset-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, buf, len), (ssize_t)len);
  close(fd);
  struct gcoll_rank_view *v = malloc(sizeof(*v));
  assert_non_null(v);
  assert_int_equal(gcoll_plan_load_rank_view(path, 3, v, err, sizeof(err)), 0);
  assert_int_equal(v->node, 1);
  assert_int_equal(v->local_rank, 1);
  assert_int_equal(v->gpu, 1);
  assert_int_equal(v->node_ranks[0], 1);
  assert_int_equal(v->node_ranks[2], 5);
  unlink(path);
  free(v);
  free(buf);
  gcoll_plan_free(back);
  gcoll_plan_free(c);
  gcoll_plan_free(p);
}

/* A step that owns GPUs 5 and 6 of each DGX node: the plan drives them,
 * with their NICs and bus ids, in block and in cyclic placement. */
static void test_step_gpus(void **state) {
  (void)state;
  const struct gcoll_topo *t[] = {test_ref[TEST_H100], test_ref[TEST_H100]};
  int counts[] = {2, 2}, gpus[] = {5, 6, 5, 6}, cyclic[] = {0, 2, 1, 3};
  char err[512];
  for (int order = 0; order < 2; order++) {
    struct gcoll_plan_input in = {.nnodes = 2, .node_topo = t, .node_ranks = counts,
                                  .node_gpus = gpus, .rank_of_slot = order ? cyclic : NULL,
                                  .job_id = -1, .step_id = -1};
    struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
    if (p == NULL) fail_msg("build: %s", err);
    if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("verify: %s", err);
    assert_int_equal(p->nranks, 4);
    assert_int_equal(p->nclasses, 1);
    assert_int_equal(p->classes[0].gpu[0], 5);
    assert_int_equal(p->classes[0].gpu[1], 6);
    assert_string_equal(p->classes[0].gpu_busid[0], "0000:c3:00.0");
    check_dgx_nics(NULL, p);
    struct gcoll_rank_view *v = malloc(sizeof(*v));
    assert_non_null(v);
    for (int r = 0; r < 4; r++) {
      assert_int_equal(gcoll_plan_rank_view(p, r, v, err, sizeof(err)), 0);
      int node = order ? r % 2 : r / 2, local = order ? r / 2 : r % 2;
      assert_int_equal(v->node, node);
      assert_int_equal(v->gpu, 5 + local);
    }
    free(v);
    gcoll_plan_free(p);
  }
  int twice[] = {5, 5, 5, 6};
  struct gcoll_plan_input in = {.nnodes = 2, .node_topo = t, .node_ranks = counts,
                                .node_gpus = twice, .job_id = -1, .step_id = -1};
  assert_null(gcoll_plan_build(&in, err, sizeof(err)));
  assert_non_null(strstr(err, "node 0: rank 1 on GPU 5, which another rank of the node drives"));
  int outside[] = {5, 8, 5, 6};
  in.node_gpus = outside;
  assert_null(gcoll_plan_build(&in, err, sizeof(err)));
  assert_non_null(strstr(err, "node 0: rank 1 on GPU 8 (the node has GPUs 0..7)"));
  const struct gcoll_topo *cpu[] = {test_ref[TEST_CPU], test_ref[TEST_CPU]};
  in.node_topo = cpu;
  in.node_gpus = gpus;
  assert_null(gcoll_plan_build(&in, err, sizeof(err)));
  assert_non_null(strstr(err, "GPUs named for a node without GPUs"));
}

static void test_cpu_classes(void **state) {
  (void)state;
  const struct gcoll_topo *t[] = {test_ref[TEST_CPU], test_ref[TEST_CPU]};
  int counts[] = {4, 4};
  struct gcoll_plan *p = make_plan(t, counts, 2);
  int m[] = {1, 3, 4, 5, 6, 7};
  struct gcoll_plan *c = subset_ok(p, m, 6);
  check_against_parent(p, c, m, 6);
  assert_int_equal(c->classes[c->node_class[0]].has_gpu_map, 0);
  assert_string_equal(c->classes[c->node_class[0]].name, "cpu-only:1,3");
  gcoll_plan_free(c);
  gcoll_plan_free(p);
}

/* Random parents and members: the invariants above on every one. */
static void test_random(void **state) {
  (void)state;
  unsigned long long seed = 0x5eed5ab5e7ULL;
  const struct gcoll_topo *kinds[] = {test_ref[TEST_H100], test_ref[TEST_A100],
                                      test_ref[TEST_PCIE], test_ref[TEST_CPU]};
  for (int iter = 0; iter < 200; iter++) {
    int nnodes = 1 + (int)(test_rand(&seed) % 5);
    const struct gcoll_topo *t[5];
    int counts[5];
    for (int i = 0; i < nnodes; i++) {
      t[i] = kinds[test_rand(&seed) % 4];
      int max = t[i]->ngpu > 0 ? t[i]->ngpu : 8;
      counts[i] = 1 + (int)(test_rand(&seed) % (unsigned)max);
    }
    struct gcoll_plan *p = make_plan(t, counts, nnodes);
    /* Nodes in a random order, each a random non-empty part in random
     * order; sometimes a node is left out entirely. */
    int order[5], m[64], n = 0;
    for (int i = 0; i < nnodes; i++) order[i] = i;
    for (int i = nnodes - 1; i > 0; i--) {
      int j = (int)(test_rand(&seed) % (unsigned)(i + 1)), x = order[i];
      order[i] = order[j];
      order[j] = x;
    }
    for (int i = 0; i < nnodes; i++) {
      int node = order[i];
      if (nnodes > 1 && test_rand(&seed) % 4 == 0) continue;
      int local[16], nl = 0;
      for (int l = 0; l < counts[node]; l++)
        if (test_rand(&seed) % 3 != 0) local[nl++] = l;
      if (nl == 0) local[nl++] = (int)(test_rand(&seed) % (unsigned)counts[node]);
      for (int l = nl - 1; l > 0; l--) {
        int j = (int)(test_rand(&seed) % (unsigned)(l + 1)), x = local[l];
        local[l] = local[j];
        local[j] = x;
      }
      for (int l = 0; l < nl; l++) m[n++] = p->node_first_rank[node] + local[l];
    }
    if (n == 0) m[n++] = 0;
    /* Every third set: members in any order, nodes interleaved. */
    for (int l = n - 1; iter % 3 == 0 && l > 0; l--) {
      int j = (int)(test_rand(&seed) % (unsigned)(l + 1)), x = m[l];
      m[l] = m[j];
      m[j] = x;
    }
    struct gcoll_plan *c = subset_ok(p, m, n);
    check_against_parent(p, c, m, n);
    /* A rail-aligned parent has rail-aligned children. */
    char why[256];
    if (gcoll_plan_verify_rails(p, why, sizeof(why)) == 0 &&
        gcoll_plan_verify_rails(c, why, sizeof(why)) != 0)
      fail_msg("iteration %d: %s", iter, why);
    /* What is written reads back as the same plan. */
    size_t len = 0;
    char *buf = plan_yaml(c, &len);
    struct gcoll_plan *back = read_back(buf, len, "random");
    check_against_parent(p, back, m, n);
    gcoll_plan_free(back);
    free(buf);
    gcoll_plan_free(c);
    gcoll_plan_free(p);
  }
}

static void test_ranklist(void **state) {
  (void)state;
  int *r = NULL, n = 0;
  char err[256];
  assert_int_equal(gcoll_ranklist_parse("0-6:2,9,3-4", 100, &r, &n, err, sizeof(err)), 0);
  int want[] = {0, 2, 4, 6, 9, 3, 4};
  assert_int_equal(n, 7);
  assert_memory_equal(r, want, sizeof(want));
  free(r);
  static const char *const bad[] = {"", "a", "5-3", "0-", "1,,2", "0-10:0", "1,", "-1", "0-7:",
                                    "101", "0-101"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    if (gcoll_ranklist_parse(bad[i], 100, &r, &n, err, sizeof(err)) == 0)
      fail_msg("'%s' accepted", bad[i]);
    assert_null(r);
  }
  /* Format then parse gives the list back, for random lists. */
  unsigned long long seed = 42;
  for (int iter = 0; iter < 500; iter++) {
    int len = (int)(test_rand(&seed) % 40), v[40];
    int cur = (int)(test_rand(&seed) % 10);
    for (int i = 0; i < len; i++) {
      v[i] = cur;
      int kind = (int)(test_rand(&seed) % 4);
      cur = kind == 0 ? cur + 1 : kind == 1 ? cur + 8 : (int)(test_rand(&seed) % 200);
    }
    char *s = gcoll_ranklist_format(v, len);
    assert_non_null(s);
    if (len == 0) {
      assert_string_equal(s, "");
    } else {
      if (gcoll_ranklist_parse(s, 1000, &r, &n, err, sizeof(err)) != 0) fail_msg("%s: %s", s, err);
      assert_int_equal(n, len);
      assert_memory_equal(r, v, sizeof(int) * (size_t)len);
      free(r);
    }
    free(s);
  }
  char *s = gcoll_ranklist_format((int[]){0, 8, 16, 24, 1, 2}, 6);
  assert_string_equal(s, "0-24:8,1-2");
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identity),      cmocka_unit_test(test_even_gpus),
      cmocka_unit_test(test_strided_and_reordered), cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_refused),       cmocka_unit_test(test_cpu_classes),
      cmocka_unit_test(test_interleaved),   cmocka_unit_test(test_step_gpus),
      cmocka_unit_test(test_random),        cmocka_unit_test(test_ranklist),
  };
  return cmocka_run_group_tests(tests, test_ref_load, test_ref_free);
}
