/* Topology model, paths, YAML round trip, reader errors and detection.
 *
 * Round trips go through a memory stream so the writer and the reader are
 * tested against each other on every reference topology, on randomly built
 * ones and on the detected machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/topo.h"
#include "testutil.h"

static const char *const reference_names[] = {"dgx-h100", "dgx-a100", "pcie-2s-4gpu", "cpu-only"};
#define NREFS (sizeof(reference_names) / sizeof(reference_names[0]))

/* ---- helpers ------------------------------------------------------------- */

/* Serialises a topology to a malloc'd NUL-terminated string. */
static char *topo_to_yaml(const struct gcoll_topo *t, size_t *len) {
  char *buf = NULL, err[512] = "";
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  assert_non_null(f);
  int rc = gcoll_topo_write_stream(t, f, err, sizeof(err));
  assert_int_equal(fclose(f), 0);
  if (rc != 0) fail_msg("write of '%s' failed: %s", t->name, err);
  if (len) *len = n;
  return buf;
}

static struct gcoll_topo *round_trip(const struct gcoll_topo *t) {
  char err[512] = "";
  size_t len;
  char *yaml = topo_to_yaml(t, &len);
  struct gcoll_topo *back = gcoll_topo_read_mem(yaml, len, "roundtrip", err, sizeof(err));
  if (back == NULL) fail_msg("re-reading '%s' failed: %s\n%s", t->name, err, yaml);
  free(yaml);
  if (back->paths == NULL) assert_int_equal(gcoll_topo_compute_paths(back, err, sizeof(err)), 0);
  return back;
}

static void assert_same_devices(const struct gcoll_topo *a, const struct gcoll_topo *b) {
  assert_string_equal(a->name, b->name);
  assert_int_equal(a->ndev, b->ndev);
  assert_int_equal(a->ncpu, b->ncpu);
  assert_int_equal(a->npci, b->npci);
  assert_int_equal(a->ngpu, b->ngpu);
  assert_int_equal(a->nnic, b->nnic);
  assert_int_equal(a->nnvs, b->nnvs);
  for (int i = 0; i < a->ndev; i++) {
    const struct gcoll_topo_dev *x = &a->dev[i], *y = &b->dev[i];
    assert_int_equal(x->type, y->type);
    assert_int_equal(x->index, y->index);
    assert_string_equal(x->name, y->name);
    assert_string_equal(x->busid, y->busid);
    assert_int_equal(x->parent, y->parent);
    assert_int_equal(x->nlinks, y->nlinks);
    switch (x->type) {
      case GCOLL_DEV_CPU:
        assert_int_equal(x->u.cpu.cores, y->u.cpu.cores);
        assert_int_equal(x->u.cpu.numa, y->u.cpu.numa);
        break;
      case GCOLL_DEV_GPU:
        assert_int_equal(x->u.gpu.sms, y->u.gpu.sms);
        assert_int_equal(x->u.gpu.cc, y->u.gpu.cc);
        break;
      case GCOLL_DEV_NIC:
        assert_int_equal(x->u.nic.port, y->u.nic.port);
        assert_true(x->u.nic.gbps == y->u.nic.gbps);
        break;
      case GCOLL_DEV_NVS: assert_int_equal(x->u.nvs.multicast, y->u.nvs.multicast); break;
      default: break;
    }
  }
}

/* Same type and bandwidth for every ordered pair. */
static void assert_same_paths(const struct gcoll_topo *a, const struct gcoll_topo *b) {
  assert_int_equal(a->ndev, b->ndev);
  for (int i = 0; i < a->ndev; i++)
    for (int j = 0; j < a->ndev; j++) {
      const struct gcoll_topo_path *p = gcoll_topo_path(a, i, j), *q = gcoll_topo_path(b, i, j);
      assert_non_null(p);
      assert_non_null(q);
      if (p->type != q->type || p->bw != q->bw)
        fail_msg("%s: path %s->%s is %s/%g before and %s/%g after the round trip", a->name,
                 a->dev[i].name, a->dev[j].name, gcoll_path_type_name(p->type), p->bw,
                 gcoll_path_type_name(q->type), q->bw);
    }
}

static void assert_round_trips(const struct gcoll_topo *t) {
  struct gcoll_topo *back = round_trip(t);
  assert_int_equal(gcoll_topo_hash(t), gcoll_topo_hash(back));
  assert_same_devices(t, back);
  assert_same_paths(t, back);
  /* Writing the re-read topology must give the same text: the writer is
   * canonical, so plans and diffs are stable. */
  char *y1 = topo_to_yaml(t, NULL), *y2 = topo_to_yaml(back, NULL);
  assert_string_equal(y1, y2);
  free(y1);
  free(y2);
  gcoll_topo_free(back);
}

/* Path invariants that hold for any topology. */
static void assert_path_properties(const struct gcoll_topo *t) {
  assert_non_null(t->paths);
  for (int a = 0; a < t->ndev; a++) {
    const struct gcoll_topo_path *self = gcoll_topo_path(t, a, a);
    assert_int_equal(self->type, GCOLL_PATH_LOC);
    for (int b = 0; b < t->ndev; b++) {
      if (a == b) continue;
      const struct gcoll_topo_path *p = gcoll_topo_path(t, a, b), *q = gcoll_topo_path(t, b, a);
      if (p->type != q->type || p->bw != q->bw)
        fail_msg("%s: %s->%s is %s/%g but %s->%s is %s/%g", t->name, t->dev[a].name,
                 t->dev[b].name, gcoll_path_type_name(p->type), p->bw, t->dev[b].name,
                 t->dev[a].name, gcoll_path_type_name(q->type), q->bw);
      assert_true(p->type != GCOLL_PATH_LOC && p->type != GCOLL_PATH_NET);
      if (p->type == GCOLL_PATH_DIS) {
        assert_true(p->bw == 0);
        continue;
      }
      assert_true(p->bw > 0);
      assert_in_range(p->nhops, 1, GCOLL_TOPO_MAX_HOPS);
      /* The hops chain from a to b and the bottleneck is the narrowest hop. */
      double narrowest = 1e300;
      int cur = a;
      for (int h = 0; h < p->nhops; h++) {
        assert_int_equal(p->hop_dev[h], cur);
        assert_in_range(p->hop_link[h], 0, t->dev[cur].nlinks - 1);
        const struct gcoll_topo_link *l = &t->dev[cur].links[p->hop_link[h]];
        if (l->bw < narrowest) narrowest = l->bw;
        cur = l->peer;
      }
      assert_int_equal(cur, b);
      assert_true(p->bw == narrowest);
      /* NICs are endpoints: never crossed. */
      for (int h = 1; h < p->nhops; h++)
        assert_int_not_equal(t->dev[p->hop_dev[h]].type, GCOLL_DEV_NIC);
    }
  }
}

static int count_pairs(const struct gcoll_topo *t, enum gcoll_dev_type ta, enum gcoll_dev_type tb,
                       enum gcoll_path_type pt) {
  int n = 0;
  for (int a = 0; a < t->ndev; a++)
    for (int b = 0; b < t->ndev; b++)
      if (a != b && t->dev[a].type == ta && t->dev[b].type == tb &&
          gcoll_topo_path(t, a, b)->type == pt)
        n++;
  return n;
}

/* ---- reference topologies ------------------------------------------------ */

static void test_references_round_trip(void **state) {
  (void)state;
  for (size_t i = 0; i < NREFS; i++) {
    struct gcoll_topo *t = test_topo_load(reference_names[i]);
    assert_string_equal(t->name, reference_names[i]);
    assert_true(t->ncpu >= 1);
    assert_path_properties(t);
    assert_round_trips(t);
    gcoll_topo_free(t);
  }
}

/* Reading the file twice gives the same hash: nothing uninitialised leaks in. */
static void test_references_hash_stable(void **state) {
  (void)state;
  uint32_t h[NREFS];
  for (size_t i = 0; i < NREFS; i++) {
    struct gcoll_topo *a = test_topo_load(reference_names[i]);
    struct gcoll_topo *b = test_topo_load(reference_names[i]);
    h[i] = gcoll_topo_hash(a);
    assert_int_equal(h[i], gcoll_topo_hash(b));
    gcoll_topo_free(a);
    gcoll_topo_free(b);
  }
  for (size_t i = 0; i < NREFS; i++)
    for (size_t j = 0; j < i; j++) assert_int_not_equal(h[i], h[j]);
}

static void test_dgx_h100_facts(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("dgx-h100");
  assert_int_equal(t->ngpu, 8);
  assert_int_equal(t->nnic, 8);
  assert_int_equal(t->ncpu, 2);
  assert_int_equal(t->nnvs, 1);
  assert_true(t->dev[t->nvs[0]].u.nvs.multicast);
  for (int i = 0; i < t->nnic; i++) assert_true(t->dev[t->nic[i]].u.nic.gbps == 400);
  for (int i = 0; i < t->ngpu; i++) {
    assert_int_equal(t->dev[t->gpu[i]].index, i);
    assert_int_equal(t->dev[t->gpu[i]].u.gpu.cc, 90);
    for (int j = 0; j < t->ngpu; j++)
      if (i != j) {
        const struct gcoll_topo_path *p = gcoll_topo_path(t, t->gpu[i], t->gpu[j]);
        assert_int_equal(p->type, GCOLL_PATH_NVL);
        assert_true(p->bw > 100);
      }
    /* GPU i shares a PCIe switch with mlx5_i. */
    assert_int_equal(gcoll_topo_path(t, t->gpu[i], t->nic[i])->type, GCOLL_PATH_PIX);
  }
  /* GPUs on the two sockets reach the other socket's NICs across UPI. */
  assert_int_equal(gcoll_topo_path(t, t->gpu[0], t->nic[7])->type, GCOLL_PATH_SYS);
  gcoll_topo_free(t);
}

static void test_dgx_a100_facts(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("dgx-a100");
  assert_int_equal(t->ngpu, 8);
  assert_true(t->nnic >= 1);
  assert_int_equal(count_pairs(t, GCOLL_DEV_GPU, GCOLL_DEV_GPU, GCOLL_PATH_NVL), 8 * 7);
  for (int i = 0; i < t->ngpu; i++) assert_int_equal(t->dev[t->gpu[i]].u.gpu.cc, 80);
  gcoll_topo_free(t);
}

static void test_pcie_facts(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("pcie-2s-4gpu");
  assert_int_equal(t->ngpu, 4);
  assert_int_equal(t->nnic, 2);
  assert_int_equal(t->ncpu, 2);
  assert_int_equal(t->nnvs, 0);
  assert_true(count_pairs(t, GCOLL_DEV_GPU, GCOLL_DEV_GPU, GCOLL_PATH_SYS) > 0);
  assert_true(count_pairs(t, GCOLL_DEV_GPU, GCOLL_DEV_GPU, GCOLL_PATH_PIX) +
                  count_pairs(t, GCOLL_DEV_GPU, GCOLL_DEV_GPU, GCOLL_PATH_PXB) >
              0);
  assert_int_equal(count_pairs(t, GCOLL_DEV_GPU, GCOLL_DEV_GPU, GCOLL_PATH_NVL), 0);
  /* Crossing sockets is never better than staying under a switch. */
  const struct gcoll_topo_path *near = gcoll_topo_path(t, t->gpu[0], t->gpu[1]);
  const struct gcoll_topo_path *far = gcoll_topo_path(t, t->gpu[0], t->gpu[2]);
  assert_int_equal(near->type, GCOLL_PATH_PIX);
  assert_int_equal(far->type, GCOLL_PATH_SYS);
  assert_true(near->bw >= far->bw);
  gcoll_topo_free(t);
}

static void test_cpu_only_facts(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("cpu-only");
  assert_int_equal(t->ngpu, 0);
  assert_true(t->nnic >= 1);
  assert_true(t->ncpu >= 1);
  assert_true(t->dev[t->cpu[0]].u.cpu.cores >= 1);
  gcoll_topo_free(t);
}

/* ---- constructed topologies --------------------------------------------- */

static int add(struct gcoll_topo *t, enum gcoll_dev_type type, const char *name, int parent) {
  char err[256] = "";
  int i = gcoll_topo_add_dev(t, type, name, parent, err, sizeof(err));
  if (i < 0) fail_msg("add_dev %s: %s", name, err);
  return i;
}

static void connect(struct gcoll_topo *t, int a, int b, enum gcoll_link_type type, int count,
                 double bw) {
  char err[256] = "";
  if (gcoll_topo_add_link(t, a, b, type, count, bw, err, sizeof(err)))
    fail_msg("add_link %d-%d: %s", a, b, err);
}

static void set_gpu(struct gcoll_topo *t, int i) {
  t->dev[i].u.gpu.sms = 100;
  t->dev[i].u.gpu.cc = 90;
  snprintf(t->dev[i].busid, sizeof(t->dev[i].busid), "0000:%02x:00.0", i + 1);
}

/* One topology with every path class at a known place:
 *   cpu0 -sys- cpu1; cpu0 > swA > swB > {gpu0, gpu1}; swA > gpu2;
 *   cpu0 > swC > gpu3; cpu1 > swD > gpu4; gpu5, gpu6 reach gpu4 by NVLink
 *   only (and PCIe under swD); gpu0-gpu1 NVLink. */
static struct gcoll_topo *ladder_topology(void) {
  struct gcoll_topo *t = gcoll_topo_new("ladder");
  assert_non_null(t);
  int c0 = add(t, GCOLL_DEV_CPU, "cpu0", -1), c1 = add(t, GCOLL_DEV_CPU, "cpu1", -1);
  t->dev[c0].u.cpu.cores = t->dev[c1].u.cpu.cores = 8;
  t->dev[c1].u.cpu.numa = 1;
  int swa = add(t, GCOLL_DEV_PCI, "swA", c0), swb = add(t, GCOLL_DEV_PCI, "swB", swa);
  int swc = add(t, GCOLL_DEV_PCI, "swC", c0), swd = add(t, GCOLL_DEV_PCI, "swD", c1);
  int g[7];
  const int parent[7] = {swb, swb, swa, swc, swd, swd, swd};
  for (int i = 0; i < 7; i++) {
    char name[16];
    snprintf(name, sizeof(name), "gpu%d", i);
    g[i] = add(t, GCOLL_DEV_GPU, name, parent[i]);
    set_gpu(t, g[i]);
  }
  int nic = add(t, GCOLL_DEV_NIC, "nic0", swb);
  t->dev[nic].u.nic.port = 1;
  t->dev[nic].u.nic.gbps = 200;
  connect(t, c0, c1, GCOLL_LINK_SYS, 1, 20);
  connect(t, c0, swa, GCOLL_LINK_PCI, 1, 32);
  connect(t, swa, swb, GCOLL_LINK_PCI, 1, 32);
  connect(t, c0, swc, GCOLL_LINK_PCI, 1, 32);
  connect(t, c1, swd, GCOLL_LINK_PCI, 1, 32);
  for (int i = 0; i < 7; i++) connect(t, parent[i], g[i], GCOLL_LINK_PCI, 1, 32);
  connect(t, swb, nic, GCOLL_LINK_PCI, 1, 32);
  connect(t, g[0], g[1], GCOLL_LINK_NVL, 4, 100);
  connect(t, g[4], g[5], GCOLL_LINK_NVL, 2, 50);
  connect(t, g[4], g[6], GCOLL_LINK_NVL, 2, 50);
  char err[256] = "";
  assert_int_equal(gcoll_topo_compute_paths(t, err, sizeof(err)), 0);
  return t;
}

static void test_path_classes_follow_construction(void **state) {
  (void)state;
  struct gcoll_topo *t = ladder_topology();
  const int *g = t->gpu;
  struct {
    int a, b;
    enum gcoll_path_type want;
  } cases[] = {
      {0, 1, GCOLL_PATH_NVL}, /* NVLink beats the shared switch */
      {0, 2, GCOLL_PATH_PXB}, /* swB, swA */
      {1, 2, GCOLL_PATH_PXB},
      {0, 3, GCOLL_PATH_PHB}, /* through cpu0 */
      {2, 3, GCOLL_PATH_PHB},
      {0, 4, GCOLL_PATH_SYS}, /* across the sockets */
      {3, 4, GCOLL_PATH_SYS},
      {4, 5, GCOLL_PATH_NVL},
      {5, 6, GCOLL_PATH_NVB}, /* NVLink through gpu4 beats PCIe under swD */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const struct gcoll_topo_path *p = gcoll_topo_path(t, g[cases[i].a], g[cases[i].b]);
    if (p->type != cases[i].want)
      fail_msg("gpu%d->gpu%d is %s, expected %s", cases[i].a, cases[i].b,
               gcoll_path_type_name(p->type), gcoll_path_type_name(cases[i].want));
  }
  /* Farther in the hierarchy never means a better class. */
  assert_true(gcoll_topo_path(t, g[0], g[2])->type < gcoll_topo_path(t, g[0], g[3])->type);
  assert_true(gcoll_topo_path(t, g[0], g[3])->type < gcoll_topo_path(t, g[0], g[4])->type);
  /* A GPU is never a PCIe relay: gpu2 -> nic0 under swB goes through swA only. */
  const struct gcoll_topo_path *pn = gcoll_topo_path(t, g[2], t->nic[0]);
  assert_int_equal(pn->type, GCOLL_PATH_PXB);
  assert_path_properties(t);
  assert_round_trips(t);
  gcoll_topo_free(t);
}

/* Two GPUs under the same switch without NVLink: PIX. */
static void test_same_switch_is_pix(void **state) {
  (void)state;
  struct gcoll_topo *t = gcoll_topo_new("pix");
  int c = add(t, GCOLL_DEV_CPU, "cpu0", -1);
  t->dev[c].u.cpu.cores = 2;
  int sw = add(t, GCOLL_DEV_PCI, "sw0", c);
  int a = add(t, GCOLL_DEV_GPU, "gpu0", sw), b = add(t, GCOLL_DEV_GPU, "gpu1", sw);
  set_gpu(t, a);
  set_gpu(t, b);
  connect(t, c, sw, GCOLL_LINK_PCI, 1, 16);
  connect(t, sw, a, GCOLL_LINK_PCI, 1, 16);
  connect(t, sw, b, GCOLL_LINK_PCI, 1, 16);
  char err[256] = "";
  assert_int_equal(gcoll_topo_compute_paths(t, err, sizeof(err)), 0);
  assert_int_equal(gcoll_topo_path(t, a, b)->type, GCOLL_PATH_PIX);
  assert_int_equal(gcoll_topo_path(t, a, c)->type, GCOLL_PATH_PIX);
  assert_true(gcoll_topo_path(t, a, b)->bw == 16);
  assert_round_trips(t);
  gcoll_topo_free(t);
}

/* Random trees of switches with GPUs, NICs and random NVLinks: every path
 * invariant and the round trip must hold for all of them. */
static struct gcoll_topo *random_topology(unsigned long long *seed, int idx) {
  char name[32];
  snprintf(name, sizeof(name), "rand%d", idx);
  struct gcoll_topo *t = gcoll_topo_new(name);
  int ncpu = 1 + (int)(test_rand(seed) % 2);
  int cpus[2], bridges[64], nbridges = 0;
  for (int s = 0; s < ncpu; s++) {
    char n[16];
    snprintf(n, sizeof(n), "cpu%d", s);
    cpus[s] = bridges[nbridges++] = add(t, GCOLL_DEV_CPU, n, -1);
    t->dev[cpus[s]].u.cpu.cores = 1 + (int)(test_rand(seed) % 64);
    t->dev[cpus[s]].u.cpu.numa = s;
  }
  if (ncpu == 2) connect(t, cpus[0], cpus[1], GCOLL_LINK_SYS, 1, 10 + (double)(test_rand(seed) % 40));
  int nsw = (int)(test_rand(seed) % 6);
  for (int i = 0; i < nsw; i++) {
    char n[16];
    snprintf(n, sizeof(n), "sw%d", i);
    int p = bridges[test_rand(seed) % (unsigned)nbridges];
    int d = add(t, GCOLL_DEV_PCI, n, p);
    snprintf(t->dev[d].busid, sizeof(t->dev[d].busid), "0000:%02x:00.0", 0x80 + i);
    connect(t, p, d, GCOLL_LINK_PCI, 1, 8 + (double)(test_rand(seed) % 8) * 8);
    bridges[nbridges++] = d;
  }
  int ngpu = (int)(test_rand(seed) % 9), g[16];
  for (int i = 0; i < ngpu; i++) {
    char n[16];
    snprintf(n, sizeof(n), "gpu%d", i);
    int p = bridges[test_rand(seed) % (unsigned)nbridges];
    g[i] = add(t, GCOLL_DEV_GPU, n, p);
    set_gpu(t, g[i]);
    connect(t, p, g[i], GCOLL_LINK_PCI, 1, 16 + (double)(test_rand(seed) % 4) * 16);
  }
  int nnic = (int)(test_rand(seed) % 4);
  for (int i = 0; i < nnic; i++) {
    char n[16];
    snprintf(n, sizeof(n), "nic%d", i);
    int p = bridges[test_rand(seed) % (unsigned)nbridges];
    int d = add(t, GCOLL_DEV_NIC, n, p);
    t->dev[d].u.nic.port = 1;
    t->dev[d].u.nic.gbps = 25.5 * (double)(1 + test_rand(seed) % 16);
    connect(t, p, d, GCOLL_LINK_PCI, 1, 12.5 + (double)(test_rand(seed) % 4) * 16);
  }
  for (int i = 0; i < ngpu; i++)
    for (int j = i + 1; j < ngpu; j++)
      if (test_rand(seed) % 3 == 0) {
        int lanes = 1 + (int)(test_rand(seed) % 6);
        connect(t, g[i], g[j], GCOLL_LINK_NVL, lanes, 25.0 * lanes);
      }
  char err[256] = "";
  if (gcoll_topo_compute_paths(t, err, sizeof(err))) fail_msg("%s", err);
  return t;
}

static void test_random_topologies(void **state) {
  (void)state;
  unsigned long long seed = 0x5eed70b0ULL;
  for (int i = 0; i < 150; i++) {
    struct gcoll_topo *t = random_topology(&seed, i);
    assert_path_properties(t);
    /* In a tree of PCI links plus NVLinks every device is reachable. */
    for (int a = 0; a < t->ndev; a++)
      for (int b = 0; b < t->ndev; b++)
        if (a != b) assert_int_not_equal(gcoll_topo_path(t, a, b)->type, GCOLL_PATH_DIS);
    assert_round_trips(t);
    gcoll_topo_free(t);
  }
}

/* ---- hash ----------------------------------------------------------------- */

static int link_index(const struct gcoll_topo *t, int a, int b) {
  for (int l = 0; l < t->dev[a].nlinks; l++)
    if (t->dev[a].links[l].peer == b) return l;
  return -1;
}

static void test_hash_ignores_name(void **state) {
  (void)state;
  for (size_t i = 0; i < NREFS; i++) {
    struct gcoll_topo *t = test_topo_load(reference_names[i]);
    uint32_t h = gcoll_topo_hash(t);
    snprintf(t->name, sizeof(t->name), "renamed-%zu", i);
    assert_int_equal(gcoll_topo_hash(t), h);
    /* The name survives the round trip, the hash still matches. */
    struct gcoll_topo *back = round_trip(t);
    assert_string_equal(back->name, t->name);
    assert_int_equal(gcoll_topo_hash(back), h);
    gcoll_topo_free(back);
    gcoll_topo_free(t);
  }
}

static void test_hash_sees_content(void **state) {
  (void)state;
  for (size_t i = 0; i < NREFS; i++) {
    struct gcoll_topo *t = test_topo_load(reference_names[i]);
    uint32_t h = gcoll_topo_hash(t);
    /* Every link's bandwidth, changed in both directions, changes the hash. */
    for (int a = 0; a < t->ndev; a++)
      for (int l = 0; l < t->dev[a].nlinks; l++) {
        int b = t->dev[a].links[l].peer, r = link_index(t, b, a);
        assert_true(r >= 0);
        double old = t->dev[a].links[l].bw;
        t->dev[a].links[l].bw = t->dev[b].links[r].bw = old + 1;
        assert_int_not_equal(gcoll_topo_hash(t), h);
        t->dev[a].links[l].bw = t->dev[b].links[r].bw = old;
      }
    assert_int_equal(gcoll_topo_hash(t), h);
    /* Device attributes too. */
    int c = t->cpu[0];
    t->dev[c].u.cpu.cores++;
    assert_int_not_equal(gcoll_topo_hash(t), h);
    t->dev[c].u.cpu.cores--;
    if (t->nnic > 0) {
      int n = t->nic[0];
      double g = t->dev[n].u.nic.gbps;
      t->dev[n].u.nic.gbps = g * 2;
      assert_int_not_equal(gcoll_topo_hash(t), h);
      t->dev[n].u.nic.gbps = g;
    }
    if (t->ngpu > 0) {
      int d = t->gpu[0];
      t->dev[d].u.gpu.sms--;
      assert_int_not_equal(gcoll_topo_hash(t), h);
      t->dev[d].u.gpu.sms++;
    }
    assert_int_equal(gcoll_topo_hash(t), h);
    gcoll_topo_free(t);
  }
}

/* ---- reader errors ------------------------------------------------------- */

/* A small valid topology; cases replace one line of it. */
static const char *const base_lines[] = {
    "gcoll-topo: 1",                                                          /* 1 */
    "name: t",                                                                /* 2 */
    "cpus:",                                                                  /* 3 */
    "  - {name: cpu0, cores: 4, numa: 0}",                                    /* 4 */
    "pci:",                                                                   /* 5 */
    "  - {name: sw0, busid: \"0000:17:00.0\", parent: cpu0}",                 /* 6 */
    "gpus:",                                                                  /* 7 */
    "  - {name: gpu0, busid: \"0000:1a:00.0\", parent: sw0, sms: 10, cc: 90}", /* 8 */
    "nics:",                                                                  /* 9 */
    "  - {name: nic0, busid: \"0000:1e:00.0\", parent: sw0, port: 1, gbps: 100}", /* 10 */
    "links:",                                                                 /* 11 */
    "  - {a: cpu0, b: sw0, type: pci, bw: 32}",                               /* 12 */
    "  - {a: sw0, b: gpu0, type: pci, bw: 32}",                               /* 13 */
    "  - {a: sw0, b: nic0, type: pci, bw: 32}",                               /* 14 */
};
#define NBASE ((int)(sizeof(base_lines) / sizeof(base_lines[0])))

/* The base document with line `line` (1-based) replaced by `text` (0: none). */
static char *doc_with(int line, const char *text) {
  size_t cap = 4096;
  char *s = calloc(1, cap);
  assert_non_null(s);
  for (int i = 1; i <= NBASE; i++) {
    const char *l = i == line ? text : base_lines[i - 1];
    assert_true(strlen(s) + strlen(l) + 2 < cap);
    strcat(s, l);
    strcat(s, "\n");
  }
  return s;
}

static void test_base_document_is_valid(void **state) {
  (void)state;
  char err[512] = "", *doc = doc_with(0, NULL);
  struct gcoll_topo *t = gcoll_topo_read_mem(doc, strlen(doc), "base.yaml", err, sizeof(err));
  if (t == NULL) fail_msg("%s", err);
  assert_int_equal(t->ndev, 4);
  assert_int_equal(gcoll_topo_path(t, t->gpu[0], t->nic[0])->type, GCOLL_PATH_PIX);
  gcoll_topo_free(t);
  free(doc);
}

struct bad_case {
  int line;          /* line replaced (0: whole text below) */
  const char *text;
  int err_line;      /* expected line in the message, 0: only check format */
  const char *field; /* substring the message must contain */
};

static const struct bad_case bad_cases[] = {
    {8, "  - {name: gpu0, busid: \"0000:1a:00.0\", parent: sw0, sms: 10, cc: 90, color: red}", 8,
     "color"},
    {4, "  - {name: cpu0, cores: many, numa: 0}", 4, "cores"},
    {4, "  - {name: cpu0, cores: [1, 2], numa: 0}", 4, "cores"},
    {4, "  - {name: cpu0, cores: 0, numa: 0}", 4, "cores"},
    {12, "  - {a: cpu0, b: sw0, type: pci, bw: -5}", 12, "bw"},
    {12, "  - {a: cpu0, b: sw0, type: pci, bw: 0}", 12, "bw"},
    {12, "  - {a: cpu0, b: sw0, type: pci, bw: .nan}", 12, "bw"},
    {13, "  - {a: sw0, b: gpu9, type: pci, bw: 32}", 13, "gpu9"},
    {13, "  - {a: sw0, b: gpu0, type: nvlink, bw: 32}", 13, "type"},
    {13, "  - {a: sw0, b: gpu0, type: pcie, bw: 32}", 13, "type"},
    {13, "  - {a: sw0, b: sw0, type: pci, bw: 32}", 13, "itself"},
    {13, "  - {a: sw0, b: gpu0, type: pci, count: 2, bw: 32}", 13, "count"},
    {14, "  - {a: sw0, b: gpu0, type: pci, bw: 32}", 14, "twice"},
    {10, "  - {name: gpu0, busid: \"0000:1e:00.0\", parent: sw0, port: 1, gbps: 100}", 10,
     "defined twice"},
    {6, "  - {name: sw0, busid: \"0000:17:00\", parent: cpu0}", 6, "busid"},
    {6, "  - {name: sw0, busid: \"0000:17:00.A\", parent: cpu0}", 6, "busid"},
    {6, "  - {name: sw0, busid: \"0000:17:00.0\", parent: cpu7}", 6, "parent"},
    {8, "  - {name: gpu0, busid: \"0000:1a:00.0\", parent: nic0, sms: 10, cc: 90}", 8, "parent"},
    {8, "  - {name: gpu3, busid: \"0000:1a:00.0\", parent: sw0, sms: 10, cc: 90}", 8, "gpu0"},
    {8, "  - {name: gpu0, busid: \"0000:1a:00.0\", parent: sw0, sms: 0, cc: 90}", 8, "sms"},
    {10, "  - {name: nic0, busid: \"0000:1e:00.0\", parent: sw0, port: 1, gbps: fast}", 10,
     "gbps"},
    {10, "  - {name: \"nic 0\", busid: \"0000:1e:00.0\", parent: sw0, port: 1, gbps: 1}", 10,
     "name"},
    {1, "# no version", 0, "gcoll-topo"},
    {1, "gcoll-topo: 2", 1, "version"},
    {1, "gcoll-topo: one", 1, "gcoll-topo"},
    {2, "name: t\ncolour: blue", 3, "colour"},
    {4, "  - &c {name: cpu0, cores: 4, numa: 0}", 4, "anchor"},
    {4, "  - *c", 4, "alias"},
    {12, "  - {a: cpu0, b: sw0, type: pci, bw: 32", 0, "YAML"},
    /* A parent needs a PCI link to it. */
    {14, "  - {a: cpu0, b: nic0, type: pci, bw: 32}", 10, "parent"},
};

struct whole_case {
  const char *text;
  const char *needle;
};

static const struct whole_case whole_cases[] = {
    {"", "empty"},
    {"# only a comment\n", "empty"},
    {"{[", "YAML"},
    {"\x01\x02 binary", ""},
    {"- just\n- a list\n", "mapping"},
    {"gcoll-topo: 1\nname: x\n", "cpus"},
    {"gcoll-topo: 1\nname: x\ncpus: []\n", "cpus"},
    {"gcoll-topo: 1\nname: x\ncpus: {name: cpu0}\n", "cpus"},
    {"gcoll-topo: 1\nname: x\ncpus:\n  - {name: cpu0, cores: 1, numa: 0}\n---\ngcoll-topo: 1\n",
     "document"},
    {"gcoll-topo: 1\ngcoll-topo: 1\n", "twice"},
};

/* Messages start with "WHAT:N: " where N >= 1 is a line number. */
static int message_line(const char *err, const char *what) {
  size_t wl = strlen(what);
  if (strncmp(err, what, wl) != 0 || err[wl] != ':') return -1;
  char *end;
  long n = strtol(err + wl + 1, &end, 10);
  if (end == err + wl + 1 || *end != ':' || end[1] != ' ') return -1;
  return (int)n;
}

static void test_reader_rejects_malformed(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
    const struct bad_case *c = &bad_cases[i];
    char err[512] = "", *doc = doc_with(c->line, c->text);
    struct gcoll_topo *t = gcoll_topo_read_mem(doc, strlen(doc), "bad.yaml", err, sizeof(err));
    if (t != NULL) fail_msg("case %zu accepted:\n%s", i, doc);
    int line = message_line(err, "bad.yaml");
    if (line < 1) fail_msg("case %zu: message not 'bad.yaml:N: ...': %s", i, err);
    if (c->err_line && line != c->err_line)
      fail_msg("case %zu: line %d, expected %d: %s", i, line, c->err_line, err);
    if (strstr(err, c->field) == NULL)
      fail_msg("case %zu: message does not name '%s': %s", i, c->field, err);
    assert_null(strchr(err, '\n'));
    free(doc);
  }
  for (size_t i = 0; i < sizeof(whole_cases) / sizeof(whole_cases[0]); i++) {
    const struct whole_case *c = &whole_cases[i];
    char err[512] = "";
    struct gcoll_topo *t =
        gcoll_topo_read_mem(c->text, strlen(c->text), "w.yaml", err, sizeof(err));
    if (t != NULL) fail_msg("whole case %zu accepted", i);
    if (message_line(err, "w.yaml") < 1) fail_msg("whole case %zu: bad message: %s", i, err);
    if (strstr(err, c->needle) == NULL)
      fail_msg("whole case %zu: message does not contain '%s': %s", i, c->needle, err);
  }
}

/* Every truncation of a valid file is refused cleanly or read; never a crash. */
static void test_reader_truncations(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("pcie-2s-4gpu");
  size_t len;
  char *yaml = topo_to_yaml(t, &len);
  uint32_t h = gcoll_topo_hash(t);
  for (size_t cut = 0; cut < len; cut += 7) {
    char err[512] = "";
    struct gcoll_topo *u = gcoll_topo_read_mem(yaml, cut, "cut.yaml", err, sizeof(err));
    if (u == NULL) {
      assert_true(message_line(err, "cut.yaml") >= 0);
    } else {
      /* A prefix that parses is a topology with fewer links. */
      assert_true(u->ndev <= t->ndev);
      if (u->ndev == t->ndev && gcoll_topo_hash(u) == h) assert_same_paths(t, u);
      gcoll_topo_free(u);
    }
  }
  free(yaml);
  gcoll_topo_free(t);
}

static void test_read_file_errors(void **state) {
  (void)state;
  char err[512] = "";
  assert_null(gcoll_topo_read_file("/nonexistent/gcoll/topo.yaml", err, sizeof(err)));
  assert_non_null(strstr(err, "/nonexistent/gcoll/topo.yaml"));
  assert_null(gcoll_topo_read_file("/", err, sizeof(err)));
  assert_non_null(strstr(err, "/"));
}

/* gcoll_topo_write_file then read_file through a real file. */
static void test_write_file_round_trip(void **state) {
  (void)state;
  char dir[] = "/tmp/gcoll-topo-XXXXXX", path[64], err[512] = "";
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/t.yaml", dir);
  for (size_t i = 0; i < NREFS; i++) {
    struct gcoll_topo *t = test_topo_load(reference_names[i]);
    assert_int_equal(gcoll_topo_write_file(t, path, err, sizeof(err)), 0);
    struct gcoll_topo *u = gcoll_topo_read_file(path, err, sizeof(err));
    if (u == NULL) fail_msg("%s", err);
    assert_int_equal(gcoll_topo_hash(u), gcoll_topo_hash(t));
    assert_same_devices(t, u);
    gcoll_topo_free(u);
    gcoll_topo_free(t);
  }
  unlink(path);
  assert_int_equal(rmdir(dir), 0);
}

/* ---- building limits ----------------------------------------------------- */

static void test_add_limits(void **state) {
  (void)state;
  char err[256] = "";
  struct gcoll_topo *t = gcoll_topo_new("limits");
  int c = add(t, GCOLL_DEV_CPU, "cpu0", -1);
  for (int i = 0; i < GCOLL_TOPO_MAX_GPUS; i++) {
    char n[16];
    snprintf(n, sizeof(n), "gpu%d", i);
    add(t, GCOLL_DEV_GPU, n, c);
  }
  err[0] = '\0';
  assert_int_equal(gcoll_topo_add_dev(t, GCOLL_DEV_GPU, "gpu16", c, err, sizeof(err)), -1);
  assert_true(err[0] != '\0');
  err[0] = '\0';
  assert_int_equal(gcoll_topo_add_link(t, c, 999, GCOLL_LINK_PCI, 1, 1, err, sizeof(err)), -1);
  assert_true(err[0] != '\0');
  /* No per-device link table to fill: cpu0 links to 300 peers (16 GPUs and
   * 284 switches: a root complex of a node with hundreds of devices), each
   * recorded at both ends. */
  const int npeers = 300;
  for (int i = 0; i < npeers; i++) {
    int peer = t->gpu[i % GCOLL_TOPO_MAX_GPUS];
    if (i >= GCOLL_TOPO_MAX_GPUS) {
      char n[16];
      snprintf(n, sizeof(n), "sw%d", i);
      peer = add(t, GCOLL_DEV_PCI, n, c);
    }
    connect(t, c, peer, GCOLL_LINK_PCI, 1, 1);
  }
  assert_int_equal(t->dev[c].nlinks, npeers);
  for (int l = 0; l < npeers; l++) {
    const struct gcoll_topo_dev *p = &t->dev[t->dev[c].links[l].peer];
    assert_int_equal(p->nlinks, 1);
    assert_int_equal(p->links[0].peer, c);
  }
  /* The same pair again aggregates lanes instead of adding a link. */
  connect(t, c, t->gpu[0], GCOLL_LINK_PCI, 1, 1);
  assert_int_equal(t->dev[c].nlinks, npeers);
  assert_true(t->dev[c].links[0].bw == 2);
  int extra = add(t, GCOLL_DEV_PCI, "extra", -1);
  /* Bad bandwidths and counts. */
  assert_int_equal(gcoll_topo_add_link(t, extra, t->gpu[1], GCOLL_LINK_PCI, 1, 0, err, sizeof(err)), -1);
  assert_int_equal(gcoll_topo_add_link(t, extra, t->gpu[1], GCOLL_LINK_PCI, 0, 1, err, sizeof(err)), -1);
  assert_int_equal(gcoll_topo_add_link(t, extra, extra, GCOLL_LINK_PCI, 1, 1, err, sizeof(err)), -1);
  assert_int_equal(t->dev[extra].nlinks, 0);
  /* Duplicate and empty names. */
  assert_int_equal(gcoll_topo_add_dev(t, GCOLL_DEV_PCI, "extra", -1, err, sizeof(err)), -1);
  assert_int_equal(gcoll_topo_add_dev(t, GCOLL_DEV_PCI, "", -1, err, sizeof(err)), -1);
  assert_int_equal(gcoll_topo_add_dev(t, GCOLL_DEV_PCI, "p", t->ndev, err, sizeof(err)), -1);
  assert_int_equal(gcoll_topo_find(t, "gpu15"), t->gpu[15]);
  assert_int_equal(gcoll_topo_find(t, "gpu16"), -1);
  /* The one bound left is the sanity limit on devices, refused in one line. */
  while (t->ndev < GCOLL_TOPO_MAX_NODES) {
    char n[16];
    snprintf(n, sizeof(n), "n%d", t->ndev);
    add(t, GCOLL_DEV_NIC, n, c);
  }
  assert_int_equal(t->nnic, GCOLL_TOPO_MAX_NODES - 1 - GCOLL_TOPO_MAX_GPUS - (npeers - GCOLL_TOPO_MAX_GPUS) - 1);
  err[0] = '\0';
  assert_int_equal(gcoll_topo_add_dev(t, GCOLL_DEV_NIC, "one-more", c, err, sizeof(err)), -1);
  char want[64];
  snprintf(want, sizeof(want), "more than %d devices in one node", GCOLL_TOPO_MAX_NODES);
  assert_string_equal(err, want);
  struct gcoll_topo *copy = gcoll_topo_clone(t);
  assert_non_null(copy);
  assert_int_equal(gcoll_topo_hash(copy), gcoll_topo_hash(t));
  gcoll_topo_free(t);
  gcoll_topo_free(copy);
}

/* ---- detection ------------------------------------------------------------ */

static void test_detect(void **state) {
  (void)state;
  char err[512] = "";
  struct gcoll_topo *t = gcoll_topo_detect(err, sizeof(err));
  if (t == NULL) fail_msg("detection failed: %s", err);
  assert_true(t->ncpu >= 1);
  assert_true(t->ngpu >= 0 && t->ngpu <= GCOLL_TOPO_MAX_GPUS);
  int cores = 0;
  for (int i = 0; i < t->ncpu; i++) cores += t->dev[t->cpu[i]].u.cpu.cores;
  assert_true(cores >= 1);
  if (t->paths == NULL) assert_int_equal(gcoll_topo_compute_paths(t, err, sizeof(err)), 0);
  assert_path_properties(t);
  assert_round_trips(t);
  gcoll_topo_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_references_round_trip),
      cmocka_unit_test(test_references_hash_stable),
      cmocka_unit_test(test_dgx_h100_facts),
      cmocka_unit_test(test_dgx_a100_facts),
      cmocka_unit_test(test_pcie_facts),
      cmocka_unit_test(test_cpu_only_facts),
      cmocka_unit_test(test_path_classes_follow_construction),
      cmocka_unit_test(test_same_switch_is_pix),
      cmocka_unit_test(test_random_topologies),
      cmocka_unit_test(test_hash_ignores_name),
      cmocka_unit_test(test_hash_sees_content),
      cmocka_unit_test(test_base_document_is_valid),
      cmocka_unit_test(test_reader_rejects_malformed),
      cmocka_unit_test(test_reader_truncations),
      cmocka_unit_test(test_read_file_errors),
      cmocka_unit_test(test_write_file_round_trip),
      cmocka_unit_test(test_add_limits),
      cmocka_unit_test(test_detect),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
