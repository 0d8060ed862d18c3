/* Overrides merged with detection (src/graph/topo_merge.c, issue 21 part
 * 2): bus ids compared in any case and domain width; Azure's NDv4 override
 * merged with dgx-a100 as a reference base (GPUs in order) and as a
 * "detected" base (dgx-a100 carrying the node's bus ids, matched by bus
 * id): the file's GPU-NIC pairing wins, the base's GPU model, NVLinks and
 * NIC names/speeds fill in, plans build and verify; a file's NVLinks win
 * over the base's; bus-id mismatches either way are one-line errors naming
 * the GPU; and the detection path as far as it runs on a machine without
 * GPUs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "graph/plan.h"
#include "graph/topo.h"
#include "graph/topo_lookup.h"
#include "testutil.h"

#ifndef GCOLL_TEST_DATA_DIR
#error "GCOLL_TEST_DATA_DIR must name tests/data"
#endif
#define NDV4 GCOLL_TEST_DATA_DIR "/nccl-topo/azure-ndv4-topo.xml"

/* The NDv4 file's GPUs (bus-id order = gpuN) and the NICs under each
 * GPU's switch. */
static const char *const ndv4_gpu[8] = {"0001:00:00.0", "0002:00:00.0", "0003:00:00.0",
                                        "0004:00:00.0", "000b:00:00.0", "000c:00:00.0",
                                        "000d:00:00.0", "000e:00:00.0"};
static const char *const ndv4_nic[8] = {"0101:00:00.0", "0102:00:00.0", "0103:00:00.0",
                                        "0104:00:00.0", "0105:00:00.0", "0106:00:00.0",
                                        "0107:00:00.0", "0108:00:00.0"};

static struct gcoll_topo *load_file(const char *path) {
  char err[1024] = "";
  struct gcoll_topo *t = gcoll_topo_read_file(path, err, sizeof(err));
  if (t == NULL) fail_msg("%s: %s", path, err);
  return t;
}

static int dev_by_busid(const struct gcoll_topo *t, enum gcoll_dev_type type, const char *busid) {
  for (int i = 0; i < t->ndev; i++)
    if (t->dev[i].type == type && strcmp(t->dev[i].busid, busid) == 0) return i;
  return -1;
}

static enum gcoll_path_type path_type(const struct gcoll_topo *t, const char *gpu,
                                      const char *nic) {
  int g = dev_by_busid(t, GCOLL_DEV_GPU, gpu), n = dev_by_busid(t, GCOLL_DEV_NIC, nic);
  if (g < 0 || n < 0) fail_msg("%s: no GPU %s or NIC %s", t->name, gpu, nic);
  return gcoll_topo_path(t, g, n)->type;
}

static void assert_plan_verifies(const struct gcoll_topo *t) {
  const struct gcoll_topo *nodes[4] = {t, t, t, t};
  struct gcoll_plan_input in;
  memset(&in, 0, sizeof(in));
  in.nnodes = 4;
  in.node_topo = nodes;
  in.job_id = in.step_id = -1;
  char err[1024] = "";
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("plan of 4 x %s: %s", t->name, err);
  if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("verify 4 x %s: %s", t->name, err);
  gcoll_plan_free(p);
}

static void assert_plan_refused(const struct gcoll_topo *t) {
  const struct gcoll_topo *nodes[1] = {t};
  struct gcoll_plan_input in;
  memset(&in, 0, sizeof(in));
  in.nnodes = 1;
  in.node_topo = nodes;
  in.job_id = in.step_id = -1;
  char err[1024] = "";
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p != NULL) fail_msg("plan of %s was built", t->name);
  assert_non_null(strstr(err, "lacks what a plan needs"));
}

/* One line, naming `what`. */
static void assert_error(const struct gcoll_topo *merged, const char *err, const char *what) {
  assert_null(merged);
  if (strstr(err, what) == NULL) fail_msg("'%s' does not name '%s'", err, what);
  assert_null(strchr(err, '\n'));
}

/* ---- bus ids ------------------------------------------------------------- */

static void test_busid_normalize(void **state) {
  (void)state;
  static const char *const same[][2] = {
      {"0001:00:00.0", "0001:00:00.0"},     {"00000001:00:00.0", "0001:00:00.0"},
      {"1:00:00.0", "0001:00:00.0"},        {"0000:1B:00.0", "0000:1b:00.0"},
      {"00000000:C1:1F.7", "0000:c1:1f.7"}, {"000B:00:00.0", "000b:00:00.0"},
      {"fffffff:ff:ff.0", "fffffff:ff:ff.0"}, {"10000:01:00.0", "10000:01:00.0"},
  };
  char out[GCOLL_BUSID_MAX + 8];
  for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
    if (gcoll_busid_normalize(same[i][0], out, sizeof(out)) != 0)
      fail_msg("'%s' refused", same[i][0]);
    assert_string_equal(out, same[i][1]);
  }
  static const char *const bad[] = {"",           "0000:00:00",     "000000001:00:00.0",
                                    "0000:0:00.0", "0000:00:00.8",
                                    "g000:00:00.0", "0000:00:00.0 ", ":00:00.0",
                                    "0000-00:00.0", "0000:+1:00.0",  "0000:00:00.00"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    if (gcoll_busid_normalize(bad[i], out, sizeof(out)) == 0)
      fail_msg("'%s' accepted as '%s'", bad[i], out);
  /* Too small a buffer is refused, not truncated. */
  char tiny[8];
  assert_int_equal(gcoll_busid_normalize("0000:00:00.0", tiny, sizeof(tiny)), -1);
}

/* ---- Azure NDv4 + a reference base ---------------------------------------- */

static void test_ndv4_with_reference(void **state) {
  (void)state;
  struct gcoll_topo *file = load_file(NDV4), *base = test_topo_load("dgx-a100");
  char summary[1024] = "", err[1024] = "";
  assert_true(file->incomplete);
  assert_plan_refused(file);
  /* Detection-style matching: dgx-a100's bus ids are another machine's. */
  struct gcoll_topo *m = gcoll_topo_merge(file, base, GCOLL_MATCH_BUSID, summary,
                                          sizeof(summary), err, sizeof(err));
  assert_error(m, err, "gpu0 (0001:00:00.0)");
  /* Offline: no bus id in common, 8 GPUs each: matched in order. */
  m = gcoll_topo_merge(file, base, GCOLL_MATCH_BUSID_OR_ORDER, summary, sizeof(summary), err,
                       sizeof(err));
  if (m == NULL) fail_msg("merge: %s", err);
  assert_non_null(strstr(summary, "in order"));
  assert_null(strchr(summary, '\n'));
  assert_false(m->incomplete);
  assert_string_equal(m->name, file->name);
  assert_int_equal(m->ngpu, 8);
  assert_int_equal(m->nnic, 8);
  assert_int_equal(m->ncpu, 4); /* the file's sockets, not the base's 2 */
  assert_int_equal(m->nnvs, 1);
  for (int i = 0; i < 8; i++) {
    const struct gcoll_topo_dev *g = &m->dev[m->gpu[i]];
    assert_string_equal(g->busid, ndv4_gpu[i]); /* the file's GPUs, in its order */
    assert_int_equal(g->u.gpu.cc, 80);
    assert_int_equal(g->u.gpu.sms, 108);
    for (int j = 0; j < 8; j++)
      if (i != j) assert_int_equal(gcoll_topo_path(m, m->gpu[i], m->gpu[j])->type,
                                   GCOLL_PATH_NVL);
    const struct gcoll_topo_dev *n = &m->dev[m->nic[i]];
    assert_true(n->u.nic.gbps == 200.0);
    assert_non_null(strstr(n->name, "mlx5_"));
  }
  /* The file's pairing, not dgx-a100's: 0003:00:00.0 (gpu2) sits with
   * 0103/0104 under the file's sw0; dgx-a100's gpu2 has mlx5_2/3 at PIX. */
  assert_int_equal(path_type(m, "0003:00:00.0", "0103:00:00.0"), GCOLL_PATH_PIX);
  assert_int_equal(path_type(m, "0003:00:00.0", "0104:00:00.0"), GCOLL_PATH_PIX);
  assert_true(path_type(m, "0003:00:00.0", "0101:00:00.0") > GCOLL_PATH_PIX);
  assert_int_equal(path_type(m, "0001:00:00.0", "0101:00:00.0"), GCOLL_PATH_PIX);
  assert_int_equal(path_type(m, "000e:00:00.0", "0108:00:00.0"), GCOLL_PATH_PIX);
  assert_int_equal(gcoll_topo_path(base, base->gpu[2], gcoll_topo_find(base, "mlx5_2"))->type,
                   GCOLL_PATH_PIX);
  assert_plan_verifies(m);
  gcoll_topo_free(m);

  /* The same through the offline entry point gcoll-plan uses. */
  char info[2048] = "";
  m = gcoll_topo_load_merged(NDV4, "dgx-a100", info, sizeof(info), err, sizeof(err));
  if (m == NULL) fail_msg("load_merged: %s", err);
  assert_non_null(strstr(info, "dgx-a100"));
  assert_false(m->incomplete);
  gcoll_topo_free(m);
  m = gcoll_topo_load_merged(NDV4, "no-such-base", info, sizeof(info), err, sizeof(err));
  assert_error(m, err, "no-such-base");
  /* A base with other GPU counts cannot be matched in order. */
  m = gcoll_topo_load_merged(NDV4, "pcie-2s-4gpu", info, sizeof(info), err, sizeof(err));
  assert_error(m, err, "0001:00:00.0");
  gcoll_topo_free(file);
  gcoll_topo_free(base);
}

/* ---- Azure NDv4 + a "detected" base ---------------------------------------- */

/* dgx-a100 as detection would see this VM: the file's bus ids, spelled
 * differently (upper case, a 5-digit domain) and in another order, each
 * GPU with its own SM count so the test can tell which one was taken; the
 * NICs named ib0.. with their own speeds; and a TCP interface eth0 the file
 * does not place. */
static struct gcoll_topo *detected_like(void) {
  struct gcoll_topo *b = test_topo_load("dgx-a100");
  char err[256];
  for (int j = 0; j < 8; j++) {
    struct gcoll_topo_dev *g = &b->dev[b->gpu[j]];
    const char *bus = ndv4_gpu[7 - j];
    snprintf(g->busid, sizeof(g->busid), "%s%s", j == 0 ? "0" : "", bus);
    for (char *c = g->busid; *c; c++)
      if (*c >= 'a' && *c <= 'f') *c = (char)(*c - 'a' + 'A');
    g->u.gpu.sms = 100 + (7 - j); /* 100 + the file's index */
    struct gcoll_topo_dev *n = &b->dev[b->nic[j]];
    snprintf(n->busid, sizeof(n->busid), "%s", ndv4_nic[7 - j]);
    snprintf(n->name, sizeof(n->name), "ib%d", 7 - j);
    n->u.nic.gbps = 100.0 + 10 * (7 - j);
  }
  int eth = gcoll_topo_add_dev(b, GCOLL_DEV_NIC, "eth0", b->cpu[1], err, sizeof(err));
  assert_true(eth >= 0);
  b->dev[eth].u.nic.port = 1;
  b->dev[eth].u.nic.gbps = 40;
  assert_int_equal(gcoll_topo_add_link(b, b->cpu[1], eth, GCOLL_LINK_PCI, 1, 5, err,
                                       sizeof(err)), 0);
  return b;
}

static void test_ndv4_with_detected(void **state) {
  (void)state;
  struct gcoll_topo *file = load_file(NDV4), *base = detected_like();
  char summary[1024] = "", err[1024] = "";
  struct gcoll_topo *m = gcoll_topo_merge(file, base, GCOLL_MATCH_BUSID, summary,
                                          sizeof(summary), err, sizeof(err));
  if (m == NULL) fail_msg("merge: %s", err);
  assert_non_null(strstr(summary, "by bus id"));
  assert_non_null(strstr(summary, "eth0"));
  assert_false(m->incomplete);
  assert_int_equal(m->ngpu, 8);
  for (int i = 0; i < 8; i++) {
    const struct gcoll_topo_dev *g = &m->dev[m->gpu[i]];
    assert_string_equal(g->busid, ndv4_gpu[i]);
    assert_int_equal(g->u.gpu.sms, 100 + i); /* the base GPU with this bus id */
    assert_int_equal(g->u.gpu.cc, 80);
  }
  /* NICs: matched by bus id, detection's names and speeds; eth0 added
   * below the file's socket that matches its own (numa 1). */
  assert_int_equal(m->nnic, 9);
  for (int i = 0; i < 8; i++) {
    int n = dev_by_busid(m, GCOLL_DEV_NIC, ndv4_nic[i]);
    assert_true(n >= 0);
    char name[8];
    snprintf(name, sizeof(name), "ib%d", i);
    assert_string_equal(m->dev[n].name, name);
    assert_true(m->dev[n].u.nic.gbps == 100.0 + 10 * i);
  }
  int eth = gcoll_topo_find(m, "eth0");
  assert_true(eth >= 0);
  assert_int_equal(m->dev[m->dev[eth].parent].u.cpu.numa, 1);
  /* The file's pairing. */
  assert_int_equal(path_type(m, "0003:00:00.0", "0103:00:00.0"), GCOLL_PATH_PIX);
  assert_int_equal(path_type(m, "000b:00:00.0", "0105:00:00.0"), GCOLL_PATH_PIX);
  assert_true(path_type(m, "000b:00:00.0", "0101:00:00.0") > GCOLL_PATH_PIX);
  assert_plan_verifies(m);
  gcoll_topo_free(m);

  /* The file names a GPU detection does not have. */
  snprintf(base->dev[base->gpu[0]].busid, sizeof(base->dev[0].busid), "0000:c1:00.0");
  m = gcoll_topo_merge(file, base, GCOLL_MATCH_BUSID, summary, sizeof(summary), err, sizeof(err));
  assert_error(m, err, "gpu7 (000e:00:00.0)");
  /* Offline matching falls back to order only when no bus id is shared. */
  m = gcoll_topo_merge(file, base, GCOLL_MATCH_BUSID_OR_ORDER, summary, sizeof(summary), err,
                       sizeof(err));
  assert_error(m, err, "gpu7 (000e:00:00.0)");
  gcoll_topo_free(base);

  /* Detection has a GPU the file does not place: refused, naming it. */
  base = detected_like();
  int extra = gcoll_topo_add_dev(base, GCOLL_DEV_GPU, "gpu8", base->cpu[0], err, sizeof(err));
  assert_true(extra >= 0);
  snprintf(base->dev[extra].busid, sizeof(base->dev[extra].busid), "0000:c1:00.0");
  base->dev[extra].u.gpu.cc = 80;
  m = gcoll_topo_merge(file, base, GCOLL_MATCH_BUSID, summary, sizeof(summary), err, sizeof(err));
  assert_error(m, err, "GPU 0000:c1:00.0");
  gcoll_topo_free(base);
  gcoll_topo_free(file);
}

/* A file with NVLinks keeps them (and its GPU model); the base only fills
 * NVLS multicast the file could not state. */
static void test_file_nvlinks_win(void **state) {
  (void)state;
  struct gcoll_topo *file = test_topo_load("dgx-h100"), *base = test_topo_load("dgx-a100");
  char summary[1024] = "", err[1024] = "";
  struct gcoll_topo *m = gcoll_topo_merge(file, base, GCOLL_MATCH_BUSID_OR_ORDER, summary,
                                          sizeof(summary), err, sizeof(err));
  if (m == NULL) fail_msg("merge: %s", err);
  assert_int_equal(gcoll_topo_hash(m), gcoll_topo_hash(file)); /* nothing to fill */
  assert_non_null(strstr(summary, "from the file: NVLinks"));
  gcoll_topo_free(m);
  /* Without multicast in the file (NCCL XML cannot say), the base's. */
  file->dev[file->nvs[0]].u.nvs.multicast = 0;
  base->dev[base->nvs[0]].u.nvs.multicast = 1;
  m = gcoll_topo_merge(file, base, GCOLL_MATCH_BUSID_OR_ORDER, summary, sizeof(summary), err,
                       sizeof(err));
  if (m == NULL) fail_msg("merge: %s", err);
  assert_int_equal(m->dev[m->nvs[0]].u.nvs.multicast, 1);
  const struct gcoll_topo_dev *g0 = &m->dev[m->gpu[0]];
  assert_int_equal(g0->u.gpu.cc, 90);
  assert_int_equal(g0->links[g0->nlinks - 1].type, GCOLL_LINK_NVL);
  assert_int_equal(g0->links[g0->nlinks - 1].count, 18);
  gcoll_topo_free(m);
  gcoll_topo_free(file);
  gcoll_topo_free(base);
}

/* ---- detection on this machine --------------------------------------------- */

static void test_detect_merged(void **state) {
  (void)state;
  char info[2048] = "", err[2048] = "";
  struct gcoll_topo *d = gcoll_topo_detect_merged(NULL, info, sizeof(info), err, sizeof(err));
  if (d == NULL) fail_msg("detection: %s", err);
  assert_non_null(d->paths);
  assert_non_null(strstr(info, "no topology file"));
  int ngpu = d->ngpu;
  gcoll_topo_free(d);
  /* A file that is not there is an error naming it, never skipped. */
  d = gcoll_topo_detect_merged("/nonexistent/topo.xml", info, sizeof(info), err, sizeof(err));
  assert_error(d, err, "/nonexistent/topo.xml");
  if (ngpu == 0) {
    /* No GPU here: an 8-GPU override names its first GPU. */
    d = gcoll_topo_detect_merged(NDV4, info, sizeof(info), err, sizeof(err));
    assert_error(d, err, "gpu0 (0001:00:00.0)");
    assert_non_null(strstr(err, NDV4));
    /* A CPU-only file merges: its sockets and NICs, detection's NICs
     * that it does not place added. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/cpu-only.yaml", test_topo_dir());
    d = gcoll_topo_detect_merged(path, info, sizeof(info), err, sizeof(err));
    if (d == NULL) fail_msg("cpu-only merged with detection: %s", err);
    assert_non_null(strstr(info, path));
    assert_non_null(strstr(info, "merged with detection"));
    assert_int_equal(d->ngpu, 0);
    assert_true(gcoll_topo_find(d, "eth0") >= 0);
    assert_int_equal(d->dev[d->cpu[0]].u.cpu.cores, 2); /* the file's */
    assert_false(d->incomplete);
    gcoll_topo_free(d);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_busid_normalize),   cmocka_unit_test(test_ndv4_with_reference),
      cmocka_unit_test(test_ndv4_with_detected), cmocka_unit_test(test_file_nvlinks_win),
      cmocka_unit_test(test_detect_merged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
