/* Properties of the intra-node channel search (search.c) on the reference
 * topologies and on randomly built ones: rings and chains are permutations
 * of the local ranks, channel counts respect the limit, NIC indices and
 * names agree with the topology, rings never need more bandwidth on a link
 * than it has (the search's capacity accounting), socket crossings are
 * minimal, results are deterministic, and bad inputs are refused with a
 * message. */
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

#define NREF TEST_NREF
#define ref test_ref
#define ref_names test_ref_names

static struct gcoll_topo *ref_topo(const char *name) {
  for (int i = 0; i < NREF; i++)
    if (strcmp(ref_names[i], name) == 0) return ref[i];
  fail_msg("no reference topology %s", name);
  return NULL;
}

/* The graph is large (channels x 256 local ranks x 2): keep it off the stack. */
static struct gcoll_intra_graph *graph_new(void) {
  struct gcoll_intra_graph *g = malloc(sizeof(*g));
  assert_non_null(g);
  return g;
}

static int run_search(const struct gcoll_topo *t, int nlocal, int multi_node, int max_channels,
                  struct gcoll_intra_graph *g, char *err, size_t errlen) {
  memset(g, 0xA5, sizeof(*g)); /* garbage in: the search must not rely on a clean output */
  err[0] = '\0';
  return gcoll_search_intra(t, nlocal, multi_node, max_channels, g, err, errlen);
}

static void assert_permutation(const int *v, int n) {
  unsigned char seen[GCOLL_MAX_LOCAL_RANKS] = {0};
  for (int i = 0; i < n; i++) {
    assert_true(v[i] >= 0 && v[i] < n);
    assert_false(seen[v[i]]);
    seen[v[i]] = 1;
  }
}

static const struct gcoll_topo_path *gpu_path(const struct gcoll_topo *t, int a, int b) {
  const struct gcoll_topo_path *p = gcoll_topo_path(t, t->gpu[a], t->gpu[b]);
  assert_non_null(p);
  return p;
}

static const struct gcoll_topo_path *nic_gpu_path(const struct gcoll_topo *t, int k, int g,
                                                  int nic_to_gpu) {
  const struct gcoll_topo_path *p =
      nic_to_gpu ? gcoll_topo_path(t, t->nic[k], t->gpu[g]) : gcoll_topo_path(t, t->gpu[g], t->nic[k]);
  assert_non_null(p);
  return p;
}

/* A NIC index and its name must agree: -1 with "", or a NIC of `t`. */
static void assert_nic(const struct gcoll_topo *t, int k, const char *name, int must_exist) {
  if (k < 0) {
    assert_int_equal(k, -1);
    assert_false(must_exist);
    assert_string_equal(name, "");
    return;
  }
  assert_true(k < t->nnic);
  assert_string_equal(name, t->dev[t->nic[k]].name);
}

static int max_channels_allowed(int max_channels) {
  return max_channels > 0 && max_channels < GCOLL_MAX_SEARCH_CHANNELS ? max_channels
                                                                     : GCOLL_MAX_SEARCH_CHANNELS;
}

/* The search's promise: each channel reserves ring_bw on every directed link
 * of every hop it uses (intra hops, closing hop of a single-node ring, NIC to
 * first GPU, last GPU to NIC) and on each NIC's line rate, so summed over all
 * channels no link is asked for more than it has. */
static void assert_no_oversubscription(const struct gcoll_topo *t, const struct gcoll_intra_graph *g,
                                       int multi_node) {
  /* Hops per directed link: link l of device d is use[base[d] + l]. */
  int *base = calloc((size_t)t->ndev + 1, sizeof(int)), total = 0;
  assert_non_null(base);
  for (int d = 0; d < t->ndev; d++) {
    base[d] = total;
    total += t->dev[d].nlinks;
  }
  int *use = calloc((size_t)total + 1, sizeof(int));
  int *nic_in = calloc((size_t)t->nnic + 1, sizeof(int)), *nic_out = calloc((size_t)t->nnic + 1, sizeof(int));
  assert_true(use && nic_in && nic_out);
  int n = g->nlocal;
  for (int c = 0; c < g->nchannels; c++) {
    const struct gcoll_intra_channel *ch = &g->ch[c];
    const struct gcoll_topo_path *hops[GCOLL_TOPO_MAX_GPUS + 3];
    int nh = 0;
    for (int i = 0; i + 1 < n; i++) hops[nh++] = gpu_path(t, ch->ring[i], ch->ring[i + 1]);
    if (!multi_node && n > 1) hops[nh++] = gpu_path(t, ch->ring[n - 1], ch->ring[0]);
    if (ch->ring_nic_in >= 0) {
      hops[nh++] = nic_gpu_path(t, ch->ring_nic_in, ch->ring[0], 1);
      nic_in[ch->ring_nic_in]++;
    }
    if (ch->ring_nic_out >= 0 && ch->ring_pxn >= 0) {
      /* PXN: over NVLink to a peer GPU, then that GPU's path to the NIC. */
      assert_int_not_equal(ch->ring_pxn, ch->ring[n - 1]);
      assert_int_equal(gpu_path(t, ch->ring[n - 1], ch->ring_pxn)->type, GCOLL_PATH_NVL);
      hops[nh++] = gpu_path(t, ch->ring[n - 1], ch->ring_pxn);
      hops[nh++] = nic_gpu_path(t, ch->ring_nic_out, ch->ring_pxn, 0);
      nic_out[ch->ring_nic_out]++;
    } else if (ch->ring_nic_out >= 0) {
      hops[nh++] = nic_gpu_path(t, ch->ring_nic_out, ch->ring[n - 1], 0);
      nic_out[ch->ring_nic_out]++;
    }
    for (int i = 0; i < nh; i++) {
      assert_int_not_equal(hops[i]->type, GCOLL_PATH_DIS);
      for (int h = 0; h < hops[i]->nhops; h++) use[base[hops[i]->hop_dev[h]] + hops[i]->hop_link[h]]++;
    }
  }
  for (int d = 0; d < t->ndev; d++)
    for (int l = 0; l < t->dev[d].nlinks; l++)
      if (use[base[d] + l] * g->ring_bw > t->dev[d].links[l].bw * (1 + 1e-9) + 1e-9)
        fail_msg("%s: link %s->%s used by %d hops at %.3f GB/s but has %.3f GB/s", t->name,
                 t->dev[d].name, t->dev[t->dev[d].links[l].peer].name, use[base[d] + l],
                 g->ring_bw, t->dev[d].links[l].bw);
  for (int k = 0; k < t->nnic; k++) {
    double gbps = t->dev[t->nic[k]].u.nic.gbps;
    if (gbps <= 0) continue;
    assert_true(nic_in[k] * g->ring_bw <= gbps / 8 * (1 + 1e-9) + 1e-9);
    assert_true(nic_out[k] * g->ring_bw <= gbps / 8 * (1 + 1e-9) + 1e-9);
  }
  free(base);
  free(use);
  free(nic_in);
  free(nic_out);
}

static enum gcoll_path_type best_nic_gpu_type(const struct gcoll_topo *t, int k, int n) {
  enum gcoll_path_type best = GCOLL_PATH_DIS;
  for (int gi = 0; gi < n; gi++)
    if (nic_gpu_path(t, k, gi, 1)->type < best) best = nic_gpu_path(t, k, gi, 1)->type;
  return best;
}

static int nvls_expected(const struct gcoll_topo *t, int n) {
  if (n < 2) return 0;
  for (int s = 0; s < t->nnvs; s++) {
    if (!t->dev[t->nvs[s]].u.nvs.multicast) continue;
    int all = 1;
    for (int gi = 0; gi < n && all; gi++) {
      const struct gcoll_topo_dev *d = &t->dev[t->gpu[gi]];
      int linked = 0;
      for (int l = 0; l < d->nlinks; l++)
        linked |= d->links[l].peer == t->nvs[s] && d->links[l].type == GCOLL_LINK_NVL;
      all = linked;
    }
    if (all) return 1;
  }
  return 0;
}

/* Every property a successful GPU or CPU search promises. */
static void check_graph(const struct gcoll_topo *t, int nlocal, int multi_node, int max_channels,
                        const struct gcoll_intra_graph *g) {
  assert_int_equal(g->nlocal, nlocal);
  assert_true(g->nchannels >= 1 && g->nchannels <= max_channels_allowed(max_channels));
  assert_true(g->ring_bw > 0);
  for (int c = 0; c < g->nchannels; c++) {
    const struct gcoll_intra_channel *ch = &g->ch[c];
    assert_permutation(ch->ring, nlocal);
    assert_permutation(ch->chain, nlocal);
    int nics = multi_node && t->nnic > 0;
    assert_nic(t, ch->ring_nic_in, ch->ring_nic_in_name, nics);
    assert_nic(t, ch->ring_nic_out, ch->ring_nic_out_name, nics);
    assert_nic(t, ch->chain_nic, ch->chain_nic_name, 0);
    if (!nics) {
      assert_int_equal(ch->ring_nic_in, -1);
      assert_int_equal(ch->ring_nic_out, -1);
      assert_int_equal(ch->chain_nic, -1);
    }
  }
  if (!multi_node || t->nnic == 0) assert_true(g->net_bw == 0);
  if (t->ngpu == 0) {
    assert_int_equal(g->nvls_nheads, 0);
    return;
  }
  if (multi_node && t->nnic > 0) assert_true(g->net_bw == g->ring_bw);
  assert_no_oversubscription(t, g, multi_node);
  /* ring_worst_path is the worst hop the rings really take. */
  enum gcoll_path_type worst = GCOLL_PATH_LOC;
  for (int c = 0; c < g->nchannels; c++)
    for (int i = 0; i + 1 < nlocal + (!multi_node && nlocal > 1); i++) {
      enum gcoll_path_type ty = gpu_path(t, g->ch[c].ring[i], g->ch[c].ring[(i + 1) % nlocal])->type;
      if (ty > worst) worst = ty;
    }
  assert_int_equal(g->ring_worst_path, worst);
  /* Rings and chains start at a GPU as close to their NIC as any. */
  for (int c = 0; c < g->nchannels; c++) {
    const struct gcoll_intra_channel *ch = &g->ch[c];
    if (ch->ring_nic_in >= 0)
      assert_int_equal(nic_gpu_path(t, ch->ring_nic_in, ch->ring[0], 1)->type,
                       best_nic_gpu_type(t, ch->ring_nic_in, nlocal));
    if (ch->chain_nic >= 0)
      assert_int_equal(nic_gpu_path(t, ch->chain_nic, ch->chain[0], 1)->type,
                       best_nic_gpu_type(t, ch->chain_nic, nlocal));
  }
  if (nvls_expected(t, nlocal)) {
    assert_true(g->nvls_nheads >= 1 && g->nvls_nheads <= GCOLL_MAX_NVLS_HEADS);
    unsigned char seen[GCOLL_MAX_LOCAL_RANKS] = {0};
    for (int h = 0; h < g->nvls_nheads; h++) {
      assert_true(g->nvls_heads[h] >= 0 && g->nvls_heads[h] < nlocal);
      assert_false(seen[g->nvls_heads[h]]);
      seen[g->nvls_heads[h]] = 1;
    }
  } else {
    assert_int_equal(g->nvls_nheads, 0);
  }
}

static int sys_crossings(const struct gcoll_topo *t, const int *ring, int n) {
  int x = 0;
  for (int i = 0; i < n && n > 1; i++) x += gpu_path(t, ring[i], ring[(i + 1) % n])->type == GCOLL_PATH_SYS;
  return x;
}

/* ---- tests -------------------------------------------------------------- */

static void test_reference_gpu_topologies(void **state) {
  (void)state;
  static const int limits[] = {0, 1, 2, 3, 5, 8, 16, 100};
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  for (int i = 0; i < NREF; i++) {
    const struct gcoll_topo *t = ref[i];
    if (t->ngpu == 0) continue;
    for (int n = 1; n <= t->ngpu; n++)
      for (int mn = 0; mn < 2; mn++)
        for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
          if (run_search(t, n, mn, limits[l], g, err, sizeof(err)) != 0)
            fail_msg("%s nlocal=%d multi_node=%d max=%d: %s", t->name, n, mn, limits[l], err);
          check_graph(t, n, mn, limits[l], g);
        }
  }
  free(g);
}

static void test_multi_node_uses_every_nic(void **state) {
  (void)state;
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  /* p5: 32 NICs, 4 per GPU; gb200-tray: NICs under the Grace sockets. */
  const char *names[] = {"dgx-h100", "dgx-a100", "pcie-2s-4gpu", "p5", "gb200-tray"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    struct gcoll_topo *own = i < 3 ? NULL : test_topo_load(names[i]);
    const struct gcoll_topo *t = own ? own : ref_topo(names[i]);
    /* pcie-2s-4gpu has one NIC per socket: a rail-aligned ring must come
     * back to the socket it entered, so only the cross-rail search (its
     * two rings of 16 GB/s beat one rail-aligned ring of 20) uses both. */
    int cross = strcmp(names[i], "pcie-2s-4gpu") == 0;
    memset(g, 0xA5, sizeof(*g));
    assert_int_equal(gcoll_search_intra_rails(t, t->ngpu, 1, 0, &(struct gcoll_search_opts){cross, NULL, 0, 0}, g, err, sizeof(err)), 0);
    check_graph(t, t->ngpu, 1, 0, g);
    int used[GCOLL_TOPO_MAX_NODES] = {0}, entered[GCOLL_TOPO_MAX_NODES] = {0};
    for (int c = 0; c < g->nchannels; c++) {
      used[g->ch[c].ring_nic_in] = used[g->ch[c].ring_nic_out] = 1;
      entered[g->ch[c].ring_nic_in]++;
    }
    /* A rail-aligned channel enters and leaves by one NIC, so p5's 16
     * channels use 16 of its 32 NICs. */
    int nused = 0;
    for (int k = 0; k < t->nnic; k++) nused += used[k];
    if (nused < (t->nnic < g->nchannels ? t->nnic : g->nchannels))
      fail_msg("%s: %d NICs carry rings, %d channels", t->name, nused, g->nchannels);
    /* Channels enter round robin over the NICs: no NIC takes a second
     * channel before every NIC has one. */
    for (int k = 0; k < t->nnic; k++)
      assert_true(entered[k] <= (g->nchannels + t->nnic - 1) / t->nnic);
    gcoll_topo_free(own);
  }
  free(g);
}

/* Rails: every channel of a multi-node search leaves by a NIC of the rail
 * it entered by, checked against the topology's own rails; where the last
 * GPU's own path to that NIC crosses a host bridge, the channel may go
 * through an NVLink peer within PCIe switches of it (PXN), and on whole
 * DGX nodes every channel does. */
static void test_rails(void **state) {
  (void)state;
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  const char *names[] = {"dgx-h100", "dgx-a100", "pcie-2s-4gpu", "p5", "gb200-tray"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    struct gcoll_topo *t = test_topo_load(names[i]);
    for (int n = 1; n <= t->ngpu; n++) {
      assert_int_equal(run_search(t, n, 1, 0, g, err, sizeof(err)), 0);
      check_graph(t, n, 1, 0, g);
      for (int c = 0; c < g->nchannels; c++) {
        const struct gcoll_intra_channel *ch = &g->ch[c];
        int last = ch->ring[n - 1], k = ch->ring_nic_out;
        assert_true(ch->ring_nic_in >= 0 && k >= 0);
        assert_int_equal(gcoll_topo_nic_rail(t, ch->ring_nic_in), gcoll_topo_nic_rail(t, k));
        assert_int_equal(ch->ring_rail_in, ch->ring_rail_out);
        const struct gcoll_topo_path *own = nic_gpu_path(t, k, last, 0);
        if (ch->ring_pxn >= 0) {
          assert_true(own->type > GCOLL_PATH_PXB);
          assert_true(nic_gpu_path(t, k, ch->ring_pxn, 0)->type <= GCOLL_PATH_PXB);
        }
      }
    }
    /* The whole node: DGX rings keep their 8 channels, each entering at
     * the GPU next to its NIC and leaving through it where the last GPU
     * is not next to the NIC itself. */
    if (strncmp(names[i], "dgx", 3) == 0) {
      assert_int_equal(run_search(t, t->ngpu, 1, 0, g, err, sizeof(err)), 0);
      assert_int_equal(g->nchannels, 8);
      for (int c = 0; c < g->nchannels; c++) {
        const struct gcoll_intra_channel *ch = &g->ch[c];
        if (nic_gpu_path(t, ch->ring_nic_out, ch->ring[t->ngpu - 1], 0)->type <= GCOLL_PATH_PXB)
          assert_int_equal(ch->ring_pxn, -1);  /* A100: GPU pairs share a switch */
        else
          assert_int_equal(ch->ring_pxn, ch->ring[0]);
      }
    }
    gcoll_topo_free(t);
  }
  free(g);
}

/* A topology's rail field overrides the index: NICs 0..7 on rails 7..0
 * keep rings on one rail each, checked against the file's rails. */
static void test_named_rails(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("dgx-h100");
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  for (int k = 0; k < t->nnic; k++) t->dev[t->nic[k]].u.nic.rail = 100 + (k + 3) % t->nnic;
  assert_int_equal(run_search(t, t->ngpu, 1, 0, g, err, sizeof(err)), 0);
  for (int c = 0; c < g->nchannels; c++) {
    assert_int_equal(g->ch[c].ring_rail_in, 100 + (g->ch[c].ring_nic_in + 3) % t->nnic);
    assert_int_equal(g->ch[c].ring_rail_out, g->ch[c].ring_rail_in);
  }
  /* Two NICs on one rail: a ring may enter by one and leave by the other. */
  for (int k = 0; k < t->nnic; k++) t->dev[t->nic[k]].u.nic.rail = k / 2;
  assert_int_equal(run_search(t, t->ngpu, 1, 0, g, err, sizeof(err)), 0);
  for (int c = 0; c < g->nchannels; c++)
    assert_int_equal(g->ch[c].ring_nic_in / 2, g->ch[c].ring_nic_out / 2);
  free(g);
  gcoll_topo_free(t);
}

/* Fabrics without rails: cross-rail rings where they carry more. */
static void test_cross_rail(void **state) {
  (void)state;
  struct gcoll_topo *t = test_topo_load("pcie-2s-4gpu");
  struct gcoll_intra_graph *g = graph_new(), *r = graph_new();
  char err[256];
  assert_int_equal(gcoll_search_intra_rails(t, t->ngpu, 1, 0, &(struct gcoll_search_opts){0, NULL, 0, 0}, r, err, sizeof(err)), 0);
  assert_int_equal(gcoll_search_intra_rails(t, t->ngpu, 1, 0, &(struct gcoll_search_opts){1, NULL, 0, 0}, g, err, sizeof(err)), 0);
  check_graph(t, t->ngpu, 1, 0, g);
  assert_true(g->nchannels * g->ring_bw > r->nchannels * r->ring_bw);
  for (int c = 0; c < g->nchannels; c++) assert_int_not_equal(g->ch[c].ring_rail_in, g->ch[c].ring_rail_out);
  /* Where rails cost nothing they stay. */
  struct gcoll_topo *h = test_topo_load("dgx-h100");
  assert_int_equal(gcoll_search_intra_rails(h, h->ngpu, 1, 0, &(struct gcoll_search_opts){1, NULL, 0, 0}, g, err, sizeof(err)), 0);
  for (int c = 0; c < g->nchannels; c++) assert_int_equal(g->ch[c].ring_rail_in, g->ch[c].ring_rail_out);
  free(g);
  free(r);
  gcoll_topo_free(t);
  gcoll_topo_free(h);
}

static void test_pcie_socket_crossings(void **state) {
  (void)state;
  const struct gcoll_topo *t = ref_topo("pcie-2s-4gpu");
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  for (int n = 1; n <= t->ngpu; n++)
    for (int mn = 0; mn < 2; mn++)
      for (int lim = 0; lim <= 4; lim++) {
        assert_int_equal(run_search(t, n, mn, lim, g, err, sizeof(err)), 0);
        /* The least a cyclic order can cross: 0 when all GPUs share a
         * socket, else 2 (out of the first socket and back). */
        int spans = 0;
        for (int a = 0; a < n; a++)
          for (int b = 0; b < n; b++) spans |= a != b && gpu_path(t, a, b)->type == GCOLL_PATH_SYS;
        for (int c = 0; c < g->nchannels; c++) {
          int x = sys_crossings(t, g->ch[c].ring, n);
          assert_true(x <= 2);
          assert_int_equal(x, spans ? 2 : 0);
        }
      }
  free(g);
}

static void test_single_node_has_no_nics(void **state) {
  (void)state;
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  for (int i = 0; i < NREF; i++) {
    const struct gcoll_topo *t = ref[i];
    int nmax = t->ngpu > 0 ? t->ngpu : 2;
    for (int n = 1; n <= nmax; n++) {
      assert_int_equal(run_search(t, n, 0, 0, g, err, sizeof(err)), 0);
      assert_true(g->net_bw == 0);
      for (int c = 0; c < g->nchannels; c++) {
        assert_int_equal(g->ch[c].ring_nic_in, -1);
        assert_int_equal(g->ch[c].ring_nic_out, -1);
        assert_int_equal(g->ch[c].chain_nic, -1);
        assert_string_equal(g->ch[c].ring_nic_in_name, "");
        assert_string_equal(g->ch[c].ring_nic_out_name, "");
        assert_string_equal(g->ch[c].chain_nic_name, "");
      }
    }
  }
  free(g);
}

static void test_cpu_only(void **state) {
  (void)state;
  const struct gcoll_topo *t = ref_topo("cpu-only");
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  static const int counts[] = {1, 2, 3, 17, GCOLL_MAX_LOCAL_RANKS};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
    for (int mn = 0; mn < 2; mn++)
      for (int lim = 0; lim <= 3; lim++) {
        int n = counts[i];
        if (run_search(t, n, mn, lim, g, err, sizeof(err)) != 0)
          fail_msg("cpu-only nlocal=%d multi_node=%d: %s", n, mn, err);
        check_graph(t, n, mn, lim, g);
        if (mn) {
          for (int c = 0; c < g->nchannels; c++) assert_true(g->ch[c].ring_nic_in >= 0);
          assert_true(g->net_bw > 0);
        }
      }
  static const int bad[] = {0, -1, -1000, GCOLL_MAX_LOCAL_RANKS + 1, 1 << 30};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    for (int mn = 0; mn < 2; mn++) {
      assert_int_equal(run_search(t, bad[i], mn, 0, g, err, sizeof(err)), -1);
      assert_true(strlen(err) > 0);
      assert_null(strchr(err, '\n'));
    }
  free(g);
}

static void test_gpu_rejects_bad_counts(void **state) {
  (void)state;
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  for (int i = 0; i < NREF; i++) {
    const struct gcoll_topo *t = ref[i];
    if (t->ngpu == 0) continue;
    int bad[] = {t->ngpu + 1, t->ngpu + 7, 0, -2, GCOLL_MAX_LOCAL_RANKS + 1};
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++)
      for (int mn = 0; mn < 2; mn++) {
        assert_int_equal(run_search(t, bad[b], mn, 0, g, err, sizeof(err)), -1);
        assert_true(strlen(err) > 0);
      }
    assert_int_equal(run_search(t, t->ngpu, 0, -1, g, err, sizeof(err)), -1);
    assert_true(strlen(err) > 0);
  }
  assert_int_equal(gcoll_search_intra(NULL, 1, 0, 0, g, err, sizeof(err)), -1);
  assert_true(strlen(err) > 0);
  err[0] = '\0';
  assert_int_equal(gcoll_search_intra(ref[0], 1, 0, 0, NULL, err, sizeof(err)), -1);
  assert_true(strlen(err) > 0);
  /* A topology whose paths were never computed. */
  struct gcoll_topo *raw = gcoll_topo_new("raw");
  assert_non_null(raw);
  int cpu = gcoll_topo_add_dev(raw, GCOLL_DEV_CPU, "cpu0", -1, err, sizeof(err));
  assert_true(cpu >= 0);
  assert_true(gcoll_topo_add_dev(raw, GCOLL_DEV_GPU, "gpu0", cpu, err, sizeof(err)) >= 0);
  assert_int_equal(run_search(raw, 1, 0, 0, g, err, sizeof(err)), -1);
  assert_true(strlen(err) > 0);
  gcoll_topo_free(raw);
  free(g);
}

static void test_deterministic(void **state) {
  (void)state;
  struct gcoll_intra_graph *a = graph_new(), *b = graph_new();
  char err[256];
  for (int i = 0; i < NREF; i++) {
    const struct gcoll_topo *t = ref[i];
    int nmax = t->ngpu > 0 ? t->ngpu : 4;
    for (int n = 1; n <= nmax; n++)
      for (int mn = 0; mn < 2; mn++) {
        assert_int_equal(run_search(t, n, mn, 0, a, err, sizeof(err)), 0);
        memset(b, 0x5A, sizeof(*b));
        assert_int_equal(gcoll_search_intra(t, n, mn, 0, b, err, sizeof(err)), 0);
        assert_memory_equal(a, b, sizeof(*a));
      }
  }
  free(a);
  free(b);
}

/* ---- random topologies -------------------------------------------------- */

static int rnd(unsigned long long *s, int n) { return (int)(test_rand(s) % (unsigned long long)n); }

static int add(struct gcoll_topo *t, enum gcoll_dev_type type, const char *prefix, int i, int parent) {
  char name[GCOLL_NAME_MAX], err[256];
  snprintf(name, sizeof(name), "%s%d", prefix, i);
  int d = gcoll_topo_add_dev(t, type, name, parent, err, sizeof(err));
  if (d < 0) fail_msg("add %s: %s", name, err);
  return d;
}

static void link_or_fail(struct gcoll_topo *t, int a, int b, enum gcoll_link_type type, int count, double bw) {
  char err[256];
  if (gcoll_topo_add_link(t, a, b, type, count, bw, err, sizeof(err)) != 0) fail_msg("%s", err);
}

/* One or two sockets, PCIe switches below them, GPUs and NICs below the
 * switches, and sometimes NVLink: point to point between random GPU pairs,
 * or an NVSwitch every GPU reaches. Always connected. */
static struct gcoll_topo *random_topo(unsigned long long *s) {
  static const double pci_bw[] = {12, 16, 24, 32, 64};
  struct gcoll_topo *t = gcoll_topo_new("random");
  assert_non_null(t);
  int ncpu = 1 + rnd(s, 2), nsw = 1 + rnd(s, 4), ngpu = 1 + rnd(s, 8), nnic = rnd(s, 4);
  int cpu[2], sw[4], gpu[8];
  for (int i = 0; i < ncpu; i++) {
    cpu[i] = add(t, GCOLL_DEV_CPU, "cpu", i, -1);
    t->dev[cpu[i]].u.cpu.cores = 1 + rnd(s, 64);
  }
  if (ncpu == 2) link_or_fail(t, cpu[0], cpu[1], GCOLL_LINK_SYS, 1, 10 + rnd(s, 60));
  for (int i = 0; i < nsw; i++) {
    int c = cpu[rnd(s, ncpu)];
    sw[i] = add(t, GCOLL_DEV_PCI, "sw", i, c);
    link_or_fail(t, c, sw[i], GCOLL_LINK_PCI, 1, pci_bw[rnd(s, 5)]);
  }
  for (int i = 0; i < ngpu; i++) {
    int p = sw[rnd(s, nsw)];
    gpu[i] = add(t, GCOLL_DEV_GPU, "gpu", i, p);
    link_or_fail(t, p, gpu[i], GCOLL_LINK_PCI, 1, pci_bw[rnd(s, 5)]);
  }
  for (int i = 0; i < nnic; i++) {
    int p = sw[rnd(s, nsw)];
    int d = add(t, GCOLL_DEV_NIC, "nic", i, p);
    t->dev[d].u.nic.gbps = 100.0 * (1 + rnd(s, 4));
    link_or_fail(t, p, d, GCOLL_LINK_PCI, 1, pci_bw[rnd(s, 5)]);
  }
  int nvl = rnd(s, 3);
  if (nvl == 1 && ngpu > 1) {
    for (int k = rnd(s, 2 * ngpu); k > 0; k--) {
      int a = rnd(s, ngpu), b = rnd(s, ngpu);
      int lanes = 1 + rnd(s, 4);
      if (a != b) link_or_fail(t, gpu[a], gpu[b], GCOLL_LINK_NVL, lanes, 25.0 * lanes);
    }
  } else if (nvl == 2) {
    int nvs = add(t, GCOLL_DEV_NVS, "nvs", 0, -1);
    t->dev[nvs].u.nvs.multicast = rnd(s, 2);
    int lanes = 6 + rnd(s, 13);
    for (int i = 0; i < ngpu; i++) link_or_fail(t, gpu[i], nvs, GCOLL_LINK_NVL, lanes, 25.0 * lanes);
  }
  char err[256];
  if (gcoll_topo_compute_paths(t, err, sizeof(err)) != 0) fail_msg("%s", err);
  return t;
}

static void test_random_topologies(void **state) {
  (void)state;
  unsigned long long seed = 0x9e3779b97f4a7c15ULL;
  struct gcoll_intra_graph *g = graph_new(), *again = graph_new();
  char err[256];
  for (int iter = 0; iter < 600; iter++) {
    struct gcoll_topo *t = random_topo(&seed);
    int counts[] = {1, t->ngpu, 1 + rnd(&seed, t->ngpu)};
    for (size_t i = 0; i < 3; i++)
      for (int mn = 0; mn < 2; mn++) {
        int n = counts[i], lim = rnd(&seed, 2) ? 0 : 1 + rnd(&seed, 6);
        if (run_search(t, n, mn, lim, g, err, sizeof(err)) != 0)
          fail_msg("random topology %d, nlocal=%d multi_node=%d: %s", iter, n, mn, err);
        check_graph(t, n, mn, lim, g);
        memset(again, 0, sizeof(*again));
        assert_int_equal(gcoll_search_intra(t, n, mn, lim, again, err, sizeof(err)), 0);
        assert_memory_equal(g, again, sizeof(*g));
      }
    gcoll_topo_free(t);
  }
  free(g);
  free(again);
}

/* CPU-only nodes with two sockets: ranks are split in blocks over the
 * sockets, so every channel crosses the socket link once each way, and all
 * channels together must fit in it. */
static void test_cpu_two_sockets(void **state) {
  (void)state;
  unsigned long long seed = 42;
  struct gcoll_intra_graph *g = graph_new();
  char err[256];
  for (int iter = 0; iter < 300; iter++) {
    struct gcoll_topo *t = gcoll_topo_new("cpu-2s");
    assert_non_null(t);
    int c0 = add(t, GCOLL_DEV_CPU, "cpu", 0, -1), c1 = add(t, GCOLL_DEV_CPU, "cpu", 1, -1);
    int cores0 = 1 + rnd(&seed, 64), cores1 = 1 + rnd(&seed, 64);
    t->dev[c0].u.cpu.cores = cores0;
    t->dev[c1].u.cpu.cores = cores1;
    double sys_bw = 1 + rnd(&seed, 80);
    link_or_fail(t, c0, c1, GCOLL_LINK_SYS, 1, sys_bw);
    int nic = add(t, GCOLL_DEV_NIC, "eth", 0, c0 + rnd(&seed, 2));
    t->dev[nic].u.nic.gbps = 10.0 * (1 + rnd(&seed, 20));
    link_or_fail(t, t->dev[nic].parent, nic, GCOLL_LINK_PCI, 1, 16);
    assert_int_equal(gcoll_topo_compute_paths(t, err, sizeof(err)), 0);
    int n = 1 + rnd(&seed, GCOLL_MAX_LOCAL_RANKS), mn = rnd(&seed, 2), lim = rnd(&seed, 4);
    if (run_search(t, n, mn, lim, g, err, sizeof(err)) != 0) fail_msg("cpu-2s nlocal=%d: %s", n, err);
    check_graph(t, n, mn, lim, g);
    /* Both sockets get ranks when each one's proportional share is >= 1. */
    int both = (long)n * cores0 >= cores0 + cores1 && (long)n * cores1 >= cores0 + cores1;
    if (both) assert_int_equal(g->ring_worst_path, GCOLL_PATH_SYS);
    if (g->ring_worst_path == GCOLL_PATH_SYS)
      assert_true(g->nchannels * g->ring_bw <= sys_bw * (1 + 1e-9));
    if (n == 1) assert_true(g->ring_worst_path < GCOLL_PATH_SYS);
    gcoll_topo_free(t);
  }
  free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_gpu_topologies),
      cmocka_unit_test(test_multi_node_uses_every_nic),
      cmocka_unit_test(test_pcie_socket_crossings),
      cmocka_unit_test(test_rails),
      cmocka_unit_test(test_named_rails),
      cmocka_unit_test(test_cross_rail),
      cmocka_unit_test(test_single_node_has_no_nics),
      cmocka_unit_test(test_cpu_only),
      cmocka_unit_test(test_gpu_rejects_bad_counts),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_random_topologies),
      cmocka_unit_test(test_cpu_two_sockets),
  };
  return cmocka_run_group_tests(tests, test_ref_load, test_ref_free);
}
