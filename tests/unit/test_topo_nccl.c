/* NCCL topology XML reader (src/graph/topo_nccl_xml.c): the cloud files
 * operators publish (tests/data/nccl-topo/, and IBM Cloud's full dump from
 * the workspace's ../shared when present), gcoll's own quirks fixture, a
 * p5-shaped node, the XML -> YAML -> same hash round trip, plans from
 * complete files and refusals of override files, and malformed input with
 * one-line FILE:LINE errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/plan.h"
#include "graph/topo.h"
#include "testutil.h"

#ifndef GCOLL_TEST_DATA_DIR
#error "GCOLL_TEST_DATA_DIR must name tests/data"
#endif
#ifndef GCOLL_SHARED_NCCL_DIR
#error "GCOLL_SHARED_NCCL_DIR must name ../shared/topologies/nccl"
#endif

#define NCCL_DIR GCOLL_TEST_DATA_DIR "/nccl-topo"
#define IBM_FILE GCOLL_SHARED_NCCL_DIR "/ibmcloud-h100-vsi-topo.xml"

/* ---- helpers ------------------------------------------------------------- */

static struct gcoll_topo *load(const char *path) {
  char err[1024] = "";
  struct gcoll_topo *t = gcoll_topo_read_file(path, err, sizeof(err));
  if (t == NULL) fail_msg("%s: %s", path, err);
  assert_non_null(t->paths);
  return t;
}

static int have_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *to_yaml(const struct gcoll_topo *t, size_t *len) {
  char *buf = NULL, err[512] = "";
  FILE *f = open_memstream(&buf, len);
  assert_non_null(f);
  int rc = gcoll_topo_write_stream(t, f, err, sizeof(err));
  assert_int_equal(fclose(f), 0);
  if (rc != 0) fail_msg("write of '%s': %s", t->name, err);
  return buf;
}

/* XML -> YAML -> topology: same hash, same devices, same incompleteness. */
static void assert_yaml_round_trip(const struct gcoll_topo *t) {
  size_t len = 0;
  char err[1024] = "";
  char *yaml = to_yaml(t, &len);
  assert_false(gcoll_topo_is_xml(yaml, len));
  struct gcoll_topo *back = gcoll_topo_read_mem(yaml, len, "roundtrip.yaml", err, sizeof(err));
  if (back == NULL) fail_msg("re-reading '%s': %s\n%s", t->name, err, yaml);
  assert_int_equal(gcoll_topo_hash(back), gcoll_topo_hash(t));
  assert_int_equal(back->ndev, t->ndev);
  assert_string_equal(back->name, t->name);
  assert_int_equal(back->incomplete, t->incomplete);
  for (int i = 0; i < t->ndev; i++) {
    assert_string_equal(back->dev[i].name, t->dev[i].name);
    assert_string_equal(back->dev[i].busid, t->dev[i].busid);
  }
  gcoll_topo_free(back);
  free(yaml);
}

static int dev_by_busid(const struct gcoll_topo *t, enum gcoll_dev_type type, const char *busid) {
  for (int i = 0; i < t->ndev; i++)
    if (t->dev[i].type == type && strcmp(t->dev[i].busid, busid) == 0) return i;
  return -1;
}

/* The NICs at PIX from GPU `gpu_busid` are exactly `nics` (bus ids or
 * names, NULL-terminated): the NIC(s) under the GPU's own switch. */
static void assert_pix_nics(const struct gcoll_topo *t, const char *gpu_busid,
                            const char *const *nics) {
  int g = dev_by_busid(t, GCOLL_DEV_GPU, gpu_busid);
  if (g < 0) fail_msg("%s: no GPU %s", t->name, gpu_busid);
  int want = 0;
  for (const char *const *n = nics; *n; n++) want++;
  int got = 0;
  for (int k = 0; k < t->nnic; k++) {
    const struct gcoll_topo_dev *nic = &t->dev[t->nic[k]];
    const struct gcoll_topo_path *p = gcoll_topo_path(t, g, t->nic[k]);
    int expected = 0;
    for (const char *const *n = nics; *n; n++)
      expected |= strcmp(nic->busid, *n) == 0 || strcmp(nic->name, *n) == 0;
    if (expected && p->type != GCOLL_PATH_PIX)
      fail_msg("%s: %s -> %s is %s, expected PIX", t->name, gpu_busid, nic->name,
               gcoll_path_type_name(p->type));
    if (!expected && p->type <= GCOLL_PATH_PIX)
      fail_msg("%s: %s -> %s is %s, expected farther than PIX", t->name, gpu_busid, nic->name,
               gcoll_path_type_name(p->type));
    got += expected;
  }
  assert_int_equal(got, want);
}

/* 4 nodes of t: built, verified. */
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
  assert_int_equal(p->nnodes, 4);
  if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("verify 4 x %s: %s", t->name, err);
  gcoll_plan_free(p);
}

/* An override's plan is refused, naming the first thing missing. */
static void assert_plan_refused(const struct gcoll_topo *t, const char *names) {
  const struct gcoll_topo *nodes[4] = {t, t, t, t};
  struct gcoll_plan_input in;
  memset(&in, 0, sizeof(in));
  in.nnodes = 4;
  in.node_topo = nodes;
  in.job_id = in.step_id = -1;
  char err[1024] = "";
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p != NULL) fail_msg("plan of override %s was built", t->name);
  assert_non_null(strstr(err, "lacks what a plan needs"));
  if (strstr(err, names) == NULL) fail_msg("'%s' does not name '%s'", err, names);
  assert_null(strchr(err, '\n'));
}

/* ---- the cloud files ----------------------------------------------------- */

static void test_aws_p4d(void **state) {
  (void)state;
  struct gcoll_topo *t = load(NCCL_DIR "/aws-p4d-24xl-topo.xml");
  assert_string_equal(t->name, "aws-p4d-24xl-topo");
  assert_int_equal(t->ncpu, 2);
  assert_int_equal(t->npci, 4);
  assert_int_equal(t->ngpu, 8);
  assert_int_equal(t->nnic, 4);
  assert_int_equal(t->nnvs, 0);
  /* GPUs numbered by bus id (no <gpu dev>); 2 GPUs + 1 EFA per switch. */
  static const char *const gpus[8] = {"0000:10:1c.0", "0000:10:1d.0", "0000:20:1c.0",
                                      "0000:20:1d.0", "0000:90:1c.0", "0000:90:1d.0",
                                      "0000:a0:1c.0", "0000:a0:1d.0"};
  static const char *const nics[4] = {"0000:10:1b.0", "0000:20:1b.0", "0000:90:1b.0",
                                      "0000:a0:1b.0"};
  for (int g = 0; g < 8; g++) {
    assert_string_equal(t->dev[t->gpu[g]].busid, gpus[g]);
    const char *pix[2] = {nics[g / 2], NULL};
    assert_pix_nics(t, gpus[g], pix);
    assert_int_equal(t->dev[t->gpu[g]].u.gpu.sms, 108); /* device 0x20b0: A100-SXM4-40GB */
    assert_int_equal(t->dev[t->gpu[g]].u.gpu.cc, 0);    /* no <gpu sm>: unknown */
  }
  /* Affinity masks: 48 CPUs per socket; Skylake-SP interconnect. */
  assert_int_equal(t->dev[t->cpu[0]].u.cpu.cores, 48);
  assert_int_equal(t->dev[t->cpu[1]].u.cpu.numa, 1);
  const struct gcoll_topo_path *p = gcoll_topo_path(t, t->gpu[0], t->gpu[7]);
  assert_int_equal(p->type, GCOLL_PATH_SYS);
  assert_true(p->bw > 9.99 && p->bw < 10.01);
  /* An override: no <net> (no NIC name or speed), no <gpu>. */
  assert_true(t->incomplete);
  assert_string_equal(t->dev[t->nic[0]].name, "nic0");
  assert_true(t->dev[t->nic[0]].u.nic.gbps == 0);
  assert_yaml_round_trip(t);
  assert_plan_refused(t, "gpu0 (0000:10:1c.0) has no compute capability");
  gcoll_topo_free(t);
}

static void test_azure_ndv4(void **state) {
  (void)state;
  struct gcoll_topo *t = load(NCCL_DIR "/azure-ndv4-topo.xml");
  assert_int_equal(t->ncpu, 4);
  assert_int_equal(t->npci, 4);
  assert_int_equal(t->ngpu, 8);
  assert_int_equal(t->nnic, 8);
  assert_int_equal(t->nnvs, 0);
  /* Each virtual bridge holds 2 GPUs and 2 HDR NICs. */
  struct { const char *gpu; const char *nic[3]; } pairs[] = {
      {"0001:00:00.0", {"0101:00:00.0", "0102:00:00.0", NULL}},
      {"0002:00:00.0", {"0101:00:00.0", "0102:00:00.0", NULL}},
      {"0003:00:00.0", {"0103:00:00.0", "0104:00:00.0", NULL}},
      {"0004:00:00.0", {"0103:00:00.0", "0104:00:00.0", NULL}},
      {"000b:00:00.0", {"0105:00:00.0", "0106:00:00.0", NULL}},
      {"000c:00:00.0", {"0105:00:00.0", "0106:00:00.0", NULL}},
      {"000d:00:00.0", {"0107:00:00.0", "0108:00:00.0", NULL}},
      {"000e:00:00.0", {"0107:00:00.0", "0108:00:00.0", NULL}},
  };
  for (int g = 0; g < 8; g++) {
    /* gpuN in bus-id order, NVML's. */
    assert_string_equal(t->dev[t->gpu[g]].busid, pairs[g].gpu);
    assert_pix_nics(t, pairs[g].gpu, pairs[g].nic);
  }
  /* 4 NUMA nodes of 24 CPUs, each other's neighbours over AMD's fabric. */
  for (int c = 0; c < 4; c++) assert_int_equal(t->dev[t->cpu[c]].u.cpu.cores, 24);
  assert_int_equal(gcoll_topo_path(t, t->gpu[0], t->gpu[2])->type, GCOLL_PATH_SYS);
  assert_true(t->incomplete);
  assert_yaml_round_trip(t);
  assert_plan_refused(t, "gpu0 (0001:00:00.0)");
  gcoll_topo_free(t);
}

static void test_azure_ndv5(void **state) {
  (void)state;
  struct gcoll_topo *t = load(NCCL_DIR "/azure-ndv5-topo.xml");
  assert_int_equal(t->ncpu, 2);
  assert_int_equal(t->npci, 8);
  assert_int_equal(t->ngpu, 8);
  assert_int_equal(t->nnic, 8);
  static const char *const gpus[8] = {"0001:00:00.0", "0002:00:00.0", "0003:00:00.0",
                                      "0008:00:00.0", "0009:00:00.0", "000a:00:00.0",
                                      "000b:00:00.0", "000c:00:00.0"};
  static const char *const nics[8] = {"0101:00:00.0", "0102:00:00.0", "0103:00:00.0",
                                      "0104:00:00.0", "0105:00:00.0", "0106:00:00.0",
                                      "0107:00:00.0", "0108:00:00.0"};
  for (int g = 0; g < 8; g++) {
    const char *pix[2] = {nics[g], NULL};
    assert_string_equal(t->dev[t->gpu[g]].busid, gpus[g]);
    assert_pix_nics(t, gpus[g], pix);
  }
  /* Gen5 x16 switch links: 16 x 240 / 80 = 48 GB/s. */
  const struct gcoll_topo_path *p = gcoll_topo_path(t, t->gpu[0], t->nic[0]);
  assert_true(p->bw > 47.99 && p->bw < 48.01);
  assert_true(t->incomplete);
  assert_yaml_round_trip(t);
  assert_plan_refused(t, "has no compute capability");
  gcoll_topo_free(t);
}

/* IBM Cloud's full dump: 8 H100 with 5+5+4+4 lanes to 4 NVSwitches that the
 * file names only as NVLink targets, 8 RoCE NICs each beside one GPU under
 * a 2.5 GT/s x1 virtual bridge, link_width="0" on every device. */
static void test_ibm_h100(void **state) {
  (void)state;
  if (!have_file(IBM_FILE)) {
    print_message("skipped: %s not present (the workspace's ../shared)\n", IBM_FILE);
    skip();
  }
  struct gcoll_topo *t = load(IBM_FILE);
  assert_int_equal(t->ncpu, 2);
  assert_int_equal(t->npci, 8);
  assert_int_equal(t->ngpu, 8);
  assert_int_equal(t->nnic, 8);
  assert_int_equal(t->nnvs, 1);
  assert_false(t->incomplete);
  static const char *const gpus[8] = {"0000:a4:00.0", "0000:ae:00.0", "0000:b8:00.0",
                                      "0000:c2:00.0", "0000:cc:00.0", "0000:d6:00.0",
                                      "0000:e0:00.0", "0000:ea:00.0"};
  static const char *const nics[8] = {"mlx5_7", "mlx5_6", "mlx5_5", "mlx5_4",
                                      "mlx5_3", "mlx5_2", "mlx5_1", "mlx5_0"};
  int nvs = t->nvs[0];
  assert_false(t->dev[nvs].u.nvs.multicast); /* the file does not say */
  for (int g = 0; g < 8; g++) {
    const struct gcoll_topo_dev *d = &t->dev[t->gpu[g]];
    char name[8];
    snprintf(name, sizeof(name), "gpu%d", g);
    assert_string_equal(d->name, name);
    assert_string_equal(d->busid, gpus[g]); /* <gpu dev="g"> */
    assert_int_equal(d->u.gpu.cc, 90);
    assert_int_equal(d->u.gpu.sms, 132);    /* device 0x2330 */
    const char *pix[2] = {nics[g], NULL};
    assert_pix_nics(t, gpus[g], pix);
    /* 18 lanes into the one fabric device, at NCCL's sm90 rate. */
    int found = 0;
    for (int l = 0; l < d->nlinks; l++)
      if (d->links[l].type == GCOLL_LINK_NVL) {
        assert_int_equal(d->links[l].peer, nvs);
        assert_int_equal(d->links[l].count, 18);
        assert_true(d->links[l].bw > 370.79 && d->links[l].bw < 370.81);
        found++;
      }
    assert_int_equal(found, 1);
    for (int h = 0; h < 8; h++)
      if (h != g) assert_int_equal(gcoll_topo_path(t, t->gpu[g], t->gpu[h])->type, GCOLL_PATH_NVL);
  }
  /* The virtual bridges' 2.5 GT/s x1 does not throttle the GPU to its
   * socket: the bridge is as wide as its devices (x16 assumed for
   * link_width 0, 32 GT/s: 48 GB/s). */
  const struct gcoll_topo_path *p = gcoll_topo_path(t, t->gpu[0], t->cpu[0]);
  assert_true(p->bw > 47.99 && p->bw < 48.01);
  /* NICs: 200 Gb/s, port 1. */
  assert_true(t->dev[t->nic[0]].u.nic.gbps == 200.0);
  assert_string_equal(t->dev[t->nic[0]].name, "mlx5_0"); /* by <net dev> */
  /* Rings inside the node never leave NVLink, alone or between nodes. */
  struct gcoll_intra_graph *g = malloc(sizeof(*g));
  assert_non_null(g);
  char err[512] = "";
  for (int multi = 0; multi <= 1; multi++) {
    if (gcoll_search_intra(t, 8, multi, 0, g, err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_true(g->nchannels >= 1);
    assert_int_equal(g->ring_worst_path, GCOLL_PATH_NVL);
    for (int c = 0; c < g->nchannels; c++)
      for (int i = 0; i < 8; i++) {
        int a = g->ch[c].ring[i], b = g->ch[c].ring[(i + 1) % 8];
        assert_int_equal(gcoll_topo_path(t, t->gpu[a], t->gpu[b])->type, GCOLL_PATH_NVL);
      }
  }
  free(g);
  assert_yaml_round_trip(t);
  assert_plan_verifies(t);
  gcoll_topo_free(t);
}

/* ---- gcoll's quirks fixture ---------------------------------------------- */

static const struct gcoll_topo_link *link_to(const struct gcoll_topo *t, int a, int b,
                                             enum gcoll_link_type type) {
  for (int l = 0; l < t->dev[a].nlinks; l++)
    if (t->dev[a].links[l].peer == b && t->dev[a].links[l].type == type) return &t->dev[a].links[l];
  return NULL;
}

static void test_quirks_fixture(void **state) {
  (void)state;
  /* The self-link warning goes to stderr; keep it out of the test log. */
  fflush(stderr);
  int saved = dup(2);
  FILE *capture = tmpfile();
  assert_non_null(capture);
  dup2(fileno(capture), 2);
  struct gcoll_topo *t = load(NCCL_DIR "/gcoll-quirks.xml");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char line[512] = "";
  rewind(capture);
  assert_non_null(fgets(line, sizeof(line), capture));
  assert_string_equal(line, NCCL_DIR "/gcoll-quirks.xml:28: warning: <nvlink> from GPU "
                            "0000:10:00.0 to itself ignored\n");
  assert_null(fgets(line, sizeof(line), capture)); /* one line */
  fclose(capture);

  assert_false(t->incomplete);
  assert_int_equal(t->ngpu, 4);
  assert_int_equal(t->nnic, 3);
  assert_int_equal(t->nnvs, 1);
  /* gpuN by <gpu dev>, not file order. */
  assert_string_equal(t->dev[t->gpu[0]].busid, "0000:10:00.0");
  assert_string_equal(t->dev[t->gpu[1]].busid, "0000:01:00.0");
  assert_string_equal(t->dev[t->gpu[2]].busid, "0001:02:00.0");
  assert_string_equal(t->dev[t->gpu[3]].busid, "0001:01:00.0");
  /* A listed NVSwitch (10 lanes) and the invisible one (8): one fabric. */
  const struct gcoll_topo_link *l = link_to(t, t->gpu[1], t->nvs[0], GCOLL_LINK_NVL);
  assert_non_null(l);
  assert_int_equal(l->count, 18);
  /* The self link added nothing: gpu0 has 18 lanes to the fabric only. */
  l = link_to(t, t->gpu[0], t->nvs[0], GCOLL_LINK_NVL);
  assert_non_null(l);
  assert_int_equal(l->count, 18);
  int nvl = 0;
  for (int k = 0; k < t->dev[t->gpu[0]].nlinks; k++) nvl += t->dev[t->gpu[0]].links[k].type == GCOLL_LINK_NVL;
  assert_int_equal(nvl, 1);
  /* GPU-GPU listed at both ends: 4 lanes, once. */
  l = link_to(t, t->gpu[2], t->gpu[3], GCOLL_LINK_NVL);
  assert_non_null(l);
  assert_int_equal(l->count, 4);
  assert_true(l->bw > 82.39 && l->bw < 82.41);
  /* C2C: 10 x 45000 MB/s = 450 GB/s from gpu1 to its socket. */
  l = link_to(t, t->gpu[1], t->cpu[0], GCOLL_LINK_PCI);
  assert_non_null(l);
  assert_true(l->bw == 450.0);
  /* The 2.5 GT/s x1 bridge is widened to its fastest device (48). */
  int sw0 = gcoll_topo_find(t, "sw0");
  l = link_to(t, sw0, t->cpu[0], GCOLL_LINK_PCI);
  assert_non_null(l);
  assert_true(l->bw == 48.0);
  /* link_width 0 -> x16 at 32 GT/s = 48; 16 GT/s x8 = 12. */
  assert_true(link_to(t, t->gpu[1], sw0, GCOLL_LINK_PCI)->bw == 48.0);
  assert_true(link_to(t, gcoll_topo_find(t, "sw1"), t->cpu[1], GCOLL_LINK_PCI)->bw == 12.0);
  /* Dual-port NIC: two ports, one bus id; a socket NIC without one. */
  int m0 = gcoll_topo_find(t, "mlx5_0"), m1 = gcoll_topo_find(t, "mlx5_1");
  int eth = gcoll_topo_find(t, "eth0");
  assert_true(m0 >= 0 && m1 >= 0 && eth >= 0);
  assert_string_equal(t->dev[m0].busid, t->dev[m1].busid);
  assert_int_equal(t->dev[m1].u.nic.port, 2);
  assert_true(t->dev[m0].u.nic.gbps == 400.0);
  assert_int_equal(t->dev[eth].parent, t->cpu[0]);
  assert_string_equal(t->dev[eth].busid, "");
  /* Arm sockets: NCCL's 6 GB/s. */
  assert_true(link_to(t, t->cpu[0], t->cpu[1], GCOLL_LINK_SYS)->bw == 6.0);
  assert_yaml_round_trip(t);
  assert_plan_verifies(t);
  gcoll_topo_free(t);
}

/* ---- big nodes ------------------------------------------------------------- */

/* A p5.48xlarge-shaped node: 8 GPUs, 32 NICs (4 per GPU under its switch),
 * two sockets. Returns the malloc'd XML. */
static char *p5_xml(int nics_per_gpu) {
  size_t cap = 1 << 18, len = 0;
  char *x = malloc(cap);
  assert_non_null(x);
#define P(...) len += (size_t)snprintf(x + len, cap - len, __VA_ARGS__)
  P("<system version=\"1\">\n");
  int nic = 0;
  for (int s = 0; s < 2; s++) {
    P("  <cpu numaid=\"%d\" affinity=\"ffffffff,ffffffff\" arch=\"x86_64\" "
      "vendor=\"AuthenticAMD\" familyid=\"25\" modelid=\"1\">\n", s);
    for (int g = 4 * s; g < 4 * s + 4; g++) {
      P("    <pci busid=\"0000:%02x:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" "
        "link_width=\"16\">\n", 0x10 + 0x10 * g);
      P("      <pci busid=\"0000:%02x:01.0\" class=\"0x030200\" vendor=\"0x10de\" "
        "device=\"0x2330\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n", 0x10 + 0x10 * g);
      P("        <gpu dev=\"%d\" sm=\"90\"><nvlink target=\"fffffff:ff:ff.0\" count=\"18\" "
        "tclass=\"0x068000\"/></gpu>\n      </pci>\n", g);
      for (int k = 0; k < nics_per_gpu; k++, nic++)
        P("      <pci busid=\"0000:%02x:%02x.0\" class=\"0x020000\" link_speed=\"32.0 GT/s PCIe\" "
          "link_width=\"16\"><nic><net name=\"rdmap%d\" dev=\"%d\" speed=\"100000\" port=\"1\"/>"
          "</nic></pci>\n", 0x10 + 0x10 * g, 2 + k, nic, nic);
      P("    </pci>\n");
    }
    P("  </cpu>\n");
  }
  P("</system>\n");
#undef P
  assert_true(len < cap);
  return x;
}

static void test_p5_shaped(void **state) {
  (void)state;
  char err[1024] = "";
  char *x = p5_xml(4);
  struct gcoll_topo *t = gcoll_topo_read_mem(x, strlen(x), "p5.xml", err, sizeof(err));
  if (t == NULL) fail_msg("%s", err);
  assert_int_equal(t->ngpu, 8);
  assert_int_equal(t->nnic, 32);
  for (int g = 0; g < 8; g++) {
    int pix = 0;
    for (int k = 0; k < 32; k++)
      pix += gcoll_topo_path(t, t->gpu[g], t->nic[k])->type == GCOLL_PATH_PIX;
    assert_int_equal(pix, 4);
  }
  assert_false(t->incomplete);
  assert_yaml_round_trip(t);
  assert_plan_verifies(t);
  gcoll_topo_free(t);
  free(x);
  /* No table size stops a bigger node (NCCL's XML stops at 256 elements):
   * 20 NICs per GPU, 160 in all plus GPUs, switches and sockets, read and
   * plan, each GPU with its own 20 under its switch. */
  x = p5_xml(20);
  t = gcoll_topo_read_mem(x, strlen(x), "p5x20.xml", err, sizeof(err));
  if (t == NULL) fail_msg("%s", err);
  assert_int_equal(t->nnic, 160);
  for (int g = 0; g < 8; g++) {
    int pix = 0;
    for (int k = 0; k < 160; k++)
      pix += gcoll_topo_path(t, t->gpu[g], t->nic[k])->type == GCOLL_PATH_PIX;
    assert_int_equal(pix, 20);
  }
  assert_yaml_round_trip(t);
  assert_plan_verifies(t);
  gcoll_topo_free(t);
  free(x);
}

/* ---- errors ---------------------------------------------------------------- */

struct bad_case {
  const char *xml;
  /* Exact message after "bad.xml:"; for libxml2's own (well-formedness)
   * errors, whose wording varies between its versions, the line and
   * "XML: " only. */
  const char *err;
};

#define HEAD "<system version=\"1\">\n  <cpu numaid=\"0\" affinity=\"ff\">\n"
#define TAIL "  </cpu>\n</system>\n"
#define GPU(dev, body) \
  "    <pci busid=\"0000:0" #dev ":00.0\" class=\"0x030200\">\n      <gpu dev=\"" #dev "\" sm=\"90\">" body "</gpu>\n    </pci>\n"

static void test_malformed(void **state) {
  (void)state;
  static const struct bad_case cases[] = {
      {"<graphs version=\"1\">\n</graphs>\n",
       "1: root element is <graphs>, expected <system version=\"1\"> (an NCCL topology file)"},
      {"<system version=\"2\">\n</system>\n", "1: <system version=\"2\">: this reader knows version 1"},
      {"<system version=\"1\">\n</system>\n", "1: <system> has no <cpu>"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x030200\">\n      <gpu dev=\"x\"/>\n"
            "    </pci>\n" TAIL,
       "4: <gpu dev=\"x\">: not an integer"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x030200\">\n      <gpu dev=\"0\" sm=\"9O\"/>\n"
            "    </pci>\n" TAIL,
       "4: <gpu sm=\"9O\">: not an integer"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x0302zz\"/>\n" TAIL,
       "3: <pci class=\"0x0302zz\">: not a hex number like 0x030200"},
      {HEAD "    <pci busid=\"0000:1:00.0\" class=\"0x030200\"/>\n" TAIL,
       "3: <pci busid=\"0000:1:00.0\">: not a PCI address like 0000:1b:00.0"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"fast\"/>\n" TAIL,
       "3: <pci link_speed=\"fast\">: not a rate like \"16 GT/s\""},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_width=\"64\"/>\n" TAIL,
       "3: <pci link_width=\"64\">: out of range [0, 32]"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_width=\"-1\"/>\n" TAIL,
       "3: <pci link_width=\"-1\">: out of range [0, 32]"},
      {"<system version=\"1\">\n  <cpu affinity=\"ffzz\">\n  </cpu>\n</system>\n",
       "2: <cpu affinity=\"ffzz\">: not a CPU mask like ffffffff,0000ffff"},
      /* nvlink to a GPU that is not in the file */
      {HEAD GPU(0, "\n        <nvlink target=\"0000:09:00.0\" count=\"4\" tclass=\"0x030200\"/>\n      ")
            TAIL,
       "5: <nvlink target=\"0000:09:00.0\">: no GPU or NVSwitch with that bus id in this file"},
      {HEAD GPU(0, "\n        <nvlink target=\"0000:09:00.0\" count=\"4\" tclass=\"0x068001\"/>\n      ")
            TAIL,
       "5: <nvlink target=\"0000:09:00.0\">: NVLink to a CPU is not supported"},
      {HEAD GPU(0, "\n        <nvlink count=\"4\"/>\n      ") TAIL, "5: <nvlink>: no target"},
      /* huge counts */
      {HEAD GPU(0, "\n        <nvlink target=\"fffffff:ff:ff.0\" count=\"100000\"/>\n      ") TAIL,
       "5: <nvlink count=\"100000\">: out of range [1, 1024]"},
      {HEAD GPU(0, "\n        <nvlink target=\"fffffff:ff:ff.0\" count=\"99999999999999999999\"/>\n      ")
            TAIL,
       "5: <nvlink count=\"99999999999999999999\">: not an integer"},
      {HEAD GPU(0, "\n        <c2c bw=\"1e300\" count=\"2\"/>\n      ") TAIL,
       "5: <c2c bw=\"1e300\">: out of range (0, 1e+07]"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x020000\">\n      <nic><net name=\"ib0\" "
            "speed=\"1e12\"/></nic>\n    </pci>\n" TAIL,
       "4: <net speed=\"1e12\">: out of range (0, 1e+08]"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x020000\">\n      <nic><net name=\"ib 0\"/>"
            "</nic>\n    </pci>\n" TAIL,
       "4: <net name=\"ib 0\">: a device name is 1 to 31 letters, digits, '_', '-', '.', ':' and "
       "starts with a letter or digit"},
      /* structure */
      {HEAD GPU(1, "") GPU(1, "") TAIL, "6: <pci busid=\"0000:01:00.0\">: bus id listed twice"},
      {HEAD GPU(0, "") GPU(1, "") "    <pci busid=\"0000:05:00.0\" class=\"0x030200\">\n"
            "      <gpu dev=\"1\" sm=\"90\"/>\n    </pci>\n" TAIL,
       "9: GPU 0000:05:00.0: <gpu dev=\"1\"> already used by GPU 0000:01:00.0 (line 6)"},
      {HEAD GPU(3, "") TAIL, "3: GPU 0000:03:00.0: <gpu dev=\"3\"> but the file has 1 GPUs (dev "
                             "must be 0 to 0)"},
      {HEAD "    <pci busid=\"0000:01:00.0\"/>\n" TAIL,
       "3: <pci busid=\"0000:01:00.0\">: no class and nothing below it: cannot tell a GPU from a "
       "NIC (an override for merging with detection, which this reader does not do)"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x030200\">\n      <gpu dev=\"0\"/>\n"
            "      <gpu dev=\"0\"/>\n    </pci>\n" TAIL,
       "5: a second <gpu> in one <pci>"},
      {HEAD "    <pci busid=\"0000:01:00.0\" class=\"0x030200\">\n      <gpu dev=\"0\">\n"
            "        <nvlink target=\"fffffff:ff:ff.0\" count=\"2\"/>\n      </gpu>\n    </pci>\n" TAIL,
       "5: <nvlink>: GPU 0000:01:00.0 has no <gpu sm>, so the NVLink rate is unknown"},
      /* XML-level */
      {"<!DOCTYPE system [\n<!ENTITY a \"aaaaaaaaaa\">\n]>\n<system version=\"1\"/>\n",
       "1: DOCTYPE and ENTITY declarations are not accepted"},
      {"<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\"\n",
       "4: XML: "},
      {"<system version=\"1\">\n  <cpu numaid=\"0\">\n  </gpu>\n</system>\n",
       "3: XML: "},
      {"<system version=\"1\">\n  <cpu numaid=\"0\"></cpu>\n</system>\n<system/>\n",
       "4: XML: "},
      {"   \n", "2: XML: "},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char err[1024] = "", want[1024];
    struct gcoll_topo *t =
        gcoll_topo_read_nccl_xml_mem(cases[i].xml, strlen(cases[i].xml), "bad.xml", err, sizeof(err));
    if (t != NULL) fail_msg("case %zu accepted:\n%s", i, cases[i].xml);
    snprintf(want, sizeof(want), "bad.xml:%s", cases[i].err);
    size_t wl = strlen(want);
    int libxml = wl > 5 && strcmp(want + wl - 5, "XML: ") == 0;
    if (libxml ? strncmp(err, want, wl) != 0 || strlen(err) <= wl : strcmp(err, want) != 0)
      fail_msg("case %zu:\n got  '%s'\n want '%s'", i, err, want);
    assert_null(strchr(err, '\n'));
  }
}

/* Every prefix of a valid file fails cleanly (one line naming the file) or,
 * if it happens to be complete, reads. */
static void test_truncations(void **state) {
  (void)state;
  char *x = p5_xml(1);
  size_t n = strlen(x);
  for (size_t cut = 0; cut < n; cut += 7) {
    char err[1024] = "";
    struct gcoll_topo *t = gcoll_topo_read_nccl_xml_mem(x, cut, "cut.xml", err, sizeof(err));
    if (t != NULL) {
      gcoll_topo_free(t);
      continue;
    }
    if (strncmp(err, "cut.xml:", 8) != 0 || strchr(err, '\n') != NULL)
      fail_msg("cut at %zu: '%s'", cut, err);
    long line = strtol(err + 8, NULL, 10);
    assert_true(line >= 1);
  }
  free(x);
}

/* ---- format sniffing and the YAML side -------------------------------------- */

static void test_sniffing(void **state) {
  (void)state;
  char err[1024] = "";
  assert_true(gcoll_topo_is_xml("<system/>", 9));
  assert_true(gcoll_topo_is_xml("\xef\xbb\xbf \n\t<x", 8));
  assert_false(gcoll_topo_is_xml("gcoll-topo: 1", 13));
  assert_false(gcoll_topo_is_xml("# <comment>\n", 12));
  assert_false(gcoll_topo_is_xml("", 0));
  /* gcoll_topo_read_mem takes XML, with a BOM and blank lines first. */
  const char *x = "\xef\xbb\xbf\n\n<system version=\"1\">\n<cpu numaid=\"0\" affinity=\"f\"/>\n</system>\n";
  struct gcoll_topo *t = gcoll_topo_read_mem(x, strlen(x), "/some/dir/node-7.xml", err, sizeof(err));
  if (t == NULL) fail_msg("%s", err);
  assert_string_equal(t->name, "node-7");
  assert_int_equal(t->ncpu, 1);
  assert_int_equal(t->dev[t->cpu[0]].u.cpu.cores, 4);
  gcoll_topo_free(t);
  /* ... and the XML reader's errors carry the XML's line numbers. */
  const char *bad = "\n\n<system version=\"1\">\n<cpu numaid=\"zero\"/>\n</system>\n";
  assert_null(gcoll_topo_read_mem(bad, strlen(bad), "n.xml", err, sizeof(err)));
  assert_string_equal(err, "n.xml:4: <cpu numaid=\"zero\">: not an integer");
}

/* YAML may leave out sms, cc, gbps and cores (what an override's conversion
 * writes); such a topology reads, round-trips, and plans refuse it. */
static void test_yaml_unknown_fields(void **state) {
  (void)state;
  const char *y =
      "gcoll-topo: 1\nname: partial\ncpus:\n  - {name: cpu0, numa: 0}\n"
      "gpus:\n  - {name: gpu0, busid: \"0000:01:00.0\", parent: cpu0}\n"
      "nics:\n  - {name: nic0, parent: cpu0}\n"
      "links:\n  - {a: cpu0, b: gpu0, type: pci, bw: 12}\n  - {a: cpu0, b: nic0, type: pci, bw: 12}\n";
  char err[1024] = "", why[256];
  struct gcoll_topo *t = gcoll_topo_read_mem(y, strlen(y), "p.yaml", err, sizeof(err));
  if (t == NULL) fail_msg("%s", err);
  assert_true(t->incomplete);
  assert_int_equal(gcoll_topo_missing(t, why, sizeof(why)), 1);
  assert_string_equal(why, "cpu0 has no core count (NCCL: <cpu affinity>)");
  t->dev[t->cpu[0]].u.cpu.cores = 4;
  assert_int_equal(gcoll_topo_missing(t, why, sizeof(why)), 1);
  assert_non_null(strstr(why, "gpu0 (0000:01:00.0) has no compute capability"));
  t->dev[t->gpu[0]].u.gpu.cc = 80;
  assert_int_equal(gcoll_topo_missing(t, why, sizeof(why)), 1);
  assert_non_null(strstr(why, "NIC nic0 (no bus id) has no device name or speed"));
  t->dev[t->nic[0]].u.nic.gbps = 100;
  assert_int_equal(gcoll_topo_missing(t, why, sizeof(why)), 0);
  gcoll_topo_free(t);
  /* A reference topology is complete. */
  t = test_topo_load("dgx-h100");
  assert_false(t->incomplete);
  gcoll_topo_free(t);
}

/* ---- export (gcoll-plan topo --to-nccl) -------------------------------------- */

static char *to_xml(const struct gcoll_topo *t, size_t *len) {
  char *buf = NULL, err[512] = "";
  FILE *f = open_memstream(&buf, len);
  assert_non_null(f);
  int rc = gcoll_topo_write_nccl_xml_stream(t, f, err, sizeof(err));
  assert_int_equal(fclose(f), 0);
  if (rc != 0) fail_msg("XML export of '%s': %s", t->name, err);
  return buf;
}

/* Export, import: the same topology (hash, names, flags). */
static void assert_xml_round_trip(const struct gcoll_topo *t) {
  size_t len = 0;
  char err[1024] = "", what[96];
  char *xml = to_xml(t, &len);
  assert_true(gcoll_topo_is_xml(xml, len));
  snprintf(what, sizeof(what), "%s.xml", t->name);
  struct gcoll_topo *back = gcoll_topo_read_mem(xml, len, what, err, sizeof(err));
  if (back == NULL) fail_msg("re-reading the export of '%s': %s\n%s", t->name, err, xml);
  if (gcoll_topo_hash(back) != gcoll_topo_hash(t)) fail_msg("'%s': export changes the hash\n%s", t->name, xml);
  assert_string_equal(back->name, t->name);
  assert_int_equal(back->ndev, t->ndev);
  assert_int_equal(back->incomplete, t->incomplete);
  for (int i = 0; i < t->ndev; i++) {
    assert_string_equal(back->dev[i].name, t->dev[i].name);
    if (t->dev[i].type == GCOLL_DEV_NVS)
      assert_int_equal(back->dev[i].u.nvs.multicast, t->dev[i].u.nvs.multicast);
  }
  gcoll_topo_free(back);
  free(xml);
}

static void test_export_references(void **state) {
  (void)state;
  for (int i = 0; i < TEST_NREF; i++) {
    struct gcoll_topo *t = test_topo_load(test_ref_names[i]);
    assert_xml_round_trip(t);
    gcoll_topo_free(t);
  }
  /* What NCCL reads is there: dgx-h100's GPU 0 with its SM generation and
   * 18 lanes to the (invisible) NVSwitch, its NIC by name and speed, and
   * 56 CPUs in socket 0's affinity. */
  struct gcoll_topo *t = test_topo_load("dgx-h100");
  size_t len;
  char *xml = to_xml(t, &len);
  assert_non_null(strstr(xml, "<gpu dev=\"0\" sm=\"90\""));
  assert_non_null(strstr(xml, "<nvlink target=\"fffffff:ff:ff.0\" count=\"18\" tclass=\"0x068000\""));
  assert_non_null(strstr(xml, "<net name=\"mlx5_0\" dev=\"0\" speed=\"400000\" port=\"1\"/>"));
  assert_non_null(strstr(xml, "<cpu numaid=\"0\" affinity=\"00ffffff,ffffffff\""));
  free(xml);
  gcoll_topo_free(t);
}

static void test_export_nccl_files(void **state) {
  (void)state;
  const char *files[] = {NCCL_DIR "/aws-p4d-24xl-topo.xml", NCCL_DIR "/azure-ndv4-topo.xml",
                         NCCL_DIR "/azure-ndv5-topo.xml", NCCL_DIR "/gcoll-quirks.xml", IBM_FILE};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    if (!have_file(files[i])) continue; /* IBM's: see test_ibm_h100 */
    fflush(stderr);
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2); /* the quirks fixture's self-link warning */
    struct gcoll_topo *t = load(files[i]);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(devnull);
    assert_xml_round_trip(t);
    gcoll_topo_free(t);
  }
  char *x = p5_xml(4), err[512];
  struct gcoll_topo *t = gcoll_topo_read_mem(x, strlen(x), "p5.xml", err, sizeof(err));
  assert_non_null(t);
  assert_xml_round_trip(t);
  gcoll_topo_free(t);
  free(x);
}

static void expect_export_refused(struct gcoll_topo *t, const char *why) {
  char *buf = NULL, err[512] = "", want[512];
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  assert_int_equal(gcoll_topo_write_nccl_xml_stream(t, f, err, sizeof(err)), -1);
  fclose(f);
  free(buf);
  snprintf(want, sizeof(want), "topology '%s' cannot be written as NCCL XML: %s", t->name, why);
  assert_string_equal(err, want);
}

static void test_export_refusals(void **state) {
  (void)state;
  char err[256];
  /* A switch without a bus id. */
  struct gcoll_topo *t = gcoll_topo_new("nobus");
  int cpu = gcoll_topo_add_dev(t, GCOLL_DEV_CPU, "cpu0", -1, err, sizeof(err));
  t->dev[cpu].u.cpu.cores = 4;
  int sw = gcoll_topo_add_dev(t, GCOLL_DEV_PCI, "sw0", cpu, err, sizeof(err));
  assert_int_equal(gcoll_topo_add_link(t, cpu, sw, GCOLL_LINK_PCI, 1, 16, err, sizeof(err)), 0);
  expect_export_refused(t, "'sw0' has no bus id");
  /* A PCI link between two switches that are not parent and child. */
  snprintf(t->dev[sw].busid, GCOLL_BUSID_MAX, "0000:01:00.0");
  int sw1 = gcoll_topo_add_dev(t, GCOLL_DEV_PCI, "sw1", cpu, err, sizeof(err));
  snprintf(t->dev[sw1].busid, GCOLL_BUSID_MAX, "0000:02:00.0");
  assert_int_equal(gcoll_topo_add_link(t, cpu, sw1, GCOLL_LINK_PCI, 1, 16, err, sizeof(err)), 0);
  assert_int_equal(gcoll_topo_add_link(t, sw, sw1, GCOLL_LINK_PCI, 1, 16, err, sizeof(err)), 0);
  expect_export_refused(t, "link from 'sw0' is not a parent, C2C, NVLink or socket link");
  gcoll_topo_free(t);
  /* A GPU with no socket above it. */
  t = gcoll_topo_new("orphan");
  cpu = gcoll_topo_add_dev(t, GCOLL_DEV_CPU, "cpu0", -1, err, sizeof(err));
  int g = gcoll_topo_add_dev(t, GCOLL_DEV_GPU, "gpu0", -1, err, sizeof(err));
  snprintf(t->dev[g].busid, GCOLL_BUSID_MAX, "0000:01:00.0");
  assert_int_equal(gcoll_topo_add_link(t, cpu, g, GCOLL_LINK_PCI, 1, 16, err, sizeof(err)), 0);
  expect_export_refused(t, "'gpu0' has no socket above it");
  gcoll_topo_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_aws_p4d),         cmocka_unit_test(test_azure_ndv4),
      cmocka_unit_test(test_azure_ndv5),      cmocka_unit_test(test_ibm_h100),
      cmocka_unit_test(test_quirks_fixture),  cmocka_unit_test(test_p5_shaped),
      cmocka_unit_test(test_malformed),       cmocka_unit_test(test_truncations),
      cmocka_unit_test(test_sniffing),        cmocka_unit_test(test_yaml_unknown_fields),
      cmocka_unit_test(test_export_references), cmocka_unit_test(test_export_nccl_files),
      cmocka_unit_test(test_export_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
