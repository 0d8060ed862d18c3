/* A gcoll topology written as NCCL's topology XML (`gcoll-plan topo TOPO
 * --to-nccl`), for NCCL_TOPO_FILE, so that a site can give NCCL and gcoll
 * the same node.
 *
 * NCCL's own attributes carry what NCCL reads (bus ids, classes, PCIe speed
 * and width closest to the link's bandwidth, <gpu dev sm>, <nvlink>, <net
 * name dev speed port>, CPU affinity and NUMA id). gcoll's exact values,
 * which NCCL's model cannot express (its bandwidths are derived from speeds
 * and SM generations), ride along in gcoll_* attributes that NCCL ignores
 * and topo_nccl_xml.c reads back: gcoll_bw (a link's GB/s), gcoll_sys_bw,
 * gcoll_sms, gcoll_multicast. Reading the export back gives the same
 * content hash for any topology this writer accepts; what XML cannot hold
 * (a device without a socket above it, a switch or GPU without a bus id, a
 * link that is not a parent link, C2C, NVLink or between sockets, two
 * NVSwitch fabrics) is refused in one line rather than written differently.
 *
 * Names: the reader names sockets cpuN, switches swN in document order,
 * GPUs gpuN by dev and NICs by their net name, so topologies named that way
 * (every reference topology, every detected one, every conversion) keep
 * their names; the hash does not depend on names. */
#include "topo.h"
#include "yaml_doc.h" /* gcoll_atomic_write */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct xw {
  const struct gcoll_topo *t;
  FILE *f;
  char *err;
  size_t errlen;
  int next_pci; /* the switch index document order has reached */
  int core_base;
};

/* Integers as integers (NCCL reads bw, speed with atoi-like parsers), else
 * the shortest decimal that reads back as the same double ("370.8", not
 * "370.80000000000001"). */
/* A port's health (gcoll_down, gcoll_active_gbps): NCCL's XML has no place
 * for it, and reading the export back must give the same hash. */
static void fprintf_health(FILE *f, const struct gcoll_topo_dev *d) {
  if (d->u.nic.down) fprintf(f, " gcoll_down=\"1\"");
  if (d->u.nic.active_gbps > 0) fprintf(f, " gcoll_active_gbps=\"%.17g\"", d->u.nic.active_gbps);
}

static const char *num(char *buf, size_t len, double v) {
  if (v == (double)(long long)v && v > -1e15 && v < 1e15) { /* NCCL reads integers */
    snprintf(buf, len, "%lld", (long long)v);
    return buf;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}

static int refuse(struct xw *w, const char *fmt, const char *name) {
  char msg[256];
  snprintf(msg, sizeof(msg), fmt, name);
  snprintf(w->err, w->errlen, "topology '%s' cannot be written as NCCL XML: %s", w->t->name, msg);
  return -1;
}

/* The bandwidth of the PCI link between d and its parent. */
static double uplink_bw(const struct gcoll_topo *t, int d) {
  const struct gcoll_topo_dev *x = &t->dev[d];
  for (int l = 0; l < x->nlinks; l++)
    if (x->links[l].peer == x->parent && x->links[l].type == GCOLL_LINK_PCI) return x->links[l].bw;
  return 0;
}

/* NCCL's link_speed/link_width closest to a bandwidth (GB/s = width x
 * rate / 80): for NCCL's eyes only, gcoll_bw is exact. */
static void pcie_attrs(FILE *f, double bw) {
  static const struct { const char *speed; double rate; } gen[] = {
      {"64.0 GT/s PCIe", 480}, {"32.0 GT/s PCIe", 240}, {"16.0 GT/s PCIe", 120},
      {"8.0 GT/s PCIe", 60},   {"5.0 GT/s PCIe", 30},   {"2.5 GT/s PCIe", 15}};
  size_t g = 0;
  while (g + 1 < sizeof(gen) / sizeof(gen[0]) && 16 * gen[g].rate / 80 > bw) g++;
  int width = (int)(bw * 80 / gen[g].rate + 0.5);
  if (width < 1) width = 1;
  if (width > 16) width = 16;
  char b[40];
  fprintf(f, " link_speed=\"%s\" link_width=\"%d\" gcoll_bw=\"%s\"", gen[g].speed, width,
          num(b, sizeof(b), bw));
}

static int socket_of(const struct gcoll_topo *t, int d) {
  for (int hops = 0; d >= 0 && hops <= t->ndev; hops++, d = t->dev[d].parent)
    if (t->dev[d].type == GCOLL_DEV_CPU) return d;
  return -1;
}

/* Every link must be one XML can say: a PCI link to the parent, a GPU's
 * second PCI link to its own socket (written as C2C), NVLink between GPUs
 * or to the NVSwitch, SYS between sockets. */
static int check_links(struct xw *w) {
  const struct gcoll_topo *t = w->t;
  if (t->nnvs > 1) return refuse(w, "%s: more than one NVSwitch fabric", "nvswitches");
  for (int i = 0; i < t->ndev; i++) {
    const struct gcoll_topo_dev *d = &t->dev[i];
    if (d->type == GCOLL_DEV_PCI || d->type == GCOLL_DEV_GPU || d->type == GCOLL_DEV_NIC) {
      if (socket_of(t, i) < 0) return refuse(w, "'%s' has no socket above it", d->name);
      if (d->busid[0] == '\0' &&
          !(d->type == GCOLL_DEV_NIC && t->dev[d->parent].type == GCOLL_DEV_CPU))
        return refuse(w, "'%s' has no bus id", d->name);
      if (uplink_bw(t, i) <= 0) return refuse(w, "'%s' has no PCI link to its parent", d->name);
    }
    if (d->type == GCOLL_DEV_GPU && d->u.gpu.cc == 0)
      for (int l = 0; l < d->nlinks; l++)
        if (d->links[l].type == GCOLL_LINK_NVL)
          return refuse(w, "'%s' has NVLinks but no compute capability", d->name);
    if (d->type == GCOLL_DEV_NVS) {
      int linked = 0;
      for (int l = 0; l < d->nlinks; l++) linked |= t->dev[d->links[l].peer].type == GCOLL_DEV_GPU;
      if (!linked) return refuse(w, "NVSwitch '%s' reaches no GPU", d->name);
    }
  }
  for (int i = 0; i < t->ndev; i++) {
    const struct gcoll_topo_dev *d = &t->dev[i];
    for (int l = 0; l < d->nlinks; l++) {
      const struct gcoll_topo_link *k = &d->links[l];
      const struct gcoll_topo_dev *p = &t->dev[k->peer];
      int ok = 0;
      if (k->type == GCOLL_LINK_SYS) ok = d->type == GCOLL_DEV_CPU && p->type == GCOLL_DEV_CPU;
      else if (k->type == GCOLL_LINK_NVL)
        ok = (d->type == GCOLL_DEV_GPU || p->type == GCOLL_DEV_GPU) &&
             (d->type != GCOLL_DEV_NVS || p->type != GCOLL_DEV_NVS);
      else
        ok = d->parent == k->peer || p->parent == i ||
             (d->type == GCOLL_DEV_GPU && p->type == GCOLL_DEV_CPU && socket_of(t, i) == k->peer) ||
             (p->type == GCOLL_DEV_GPU && d->type == GCOLL_DEV_CPU && socket_of(t, k->peer) == i);
      if (!ok)
        return refuse(w, "link from '%s' is not a parent, C2C, NVLink or socket link", d->name);
    }
  }
  return 0;
}

static void indent(FILE *f, int depth) {
  for (int i = 0; i < depth; i++) fputs("  ", f);
}

static void write_gpu(struct xw *w, int g, int depth) {
  const struct gcoll_topo *t = w->t;
  const struct gcoll_topo_dev *d = &t->dev[g];
  FILE *f = w->f;
  indent(f, depth);
  fprintf(f, "<pci busid=\"%s\" class=\"0x030200\" vendor=\"0x10de\"", d->busid);
  pcie_attrs(f, uplink_bw(t, g));
  fprintf(f, ">\n");
  indent(f, depth + 1);
  fprintf(f, "<gpu dev=\"%d\"", d->index);
  if (d->u.gpu.cc > 0) fprintf(f, " sm=\"%d\"", d->u.gpu.cc);
  if (d->u.gpu.sms > 0) fprintf(f, " gcoll_sms=\"%d\"", d->u.gpu.sms);
  fprintf(f, ">\n");
  for (int l = 0; l < d->nlinks; l++) {
    const struct gcoll_topo_link *k = &d->links[l];
    const struct gcoll_topo_dev *p = &t->dev[k->peer];
    int c2c = k->type == GCOLL_LINK_PCI && p->type == GCOLL_DEV_CPU && k->peer != d->parent;
    if (k->type != GCOLL_LINK_NVL && !c2c) continue; /* the parent link: the <pci> itself */
    indent(f, depth + 2);
    char b[40];
    if (c2c)
      fprintf(f, "<c2c bw=\"%s\" count=\"1\"/>\n", num(b, sizeof(b), k->bw * 1000.0));
    else if (p->type == GCOLL_DEV_NVS)
      fprintf(f, "<nvlink target=\"fffffff:ff:ff.0\" count=\"%d\" tclass=\"0x068000\" "
              "gcoll_bw=\"%s\"%s/>\n", k->count, num(b, sizeof(b), k->bw),
              p->u.nvs.multicast ? " gcoll_multicast=\"1\"" : "");
    else
      fprintf(f, "<nvlink target=\"%s\" count=\"%d\" tclass=\"0x030200\" gcoll_bw=\"%s\"/>\n",
              p->busid, k->count, num(b, sizeof(b), k->bw));
  }
  indent(f, depth + 1);
  fprintf(f, "</gpu>\n");
  indent(f, depth);
  fprintf(f, "</pci>\n");
}

static void write_nets(struct xw *w, int first, int depth) {
  char b[40];
  const struct gcoll_topo *t = w->t;
  FILE *f = w->f;
  const struct gcoll_topo_dev *d0 = &t->dev[first];
  indent(f, depth);
  fprintf(f, "<nic>\n");
  for (int k = 0; k < t->nnic; k++) {
    const struct gcoll_topo_dev *d = &t->dev[t->nic[k]];
    if (d->parent != d0->parent || strcmp(d->busid, d0->busid) != 0) continue;
    if (d0->busid[0] == '\0' && t->nic[k] != first) continue; /* socket NICs: one each */
    indent(f, depth + 1);
    fprintf(f, "<net name=\"%s\" dev=\"%d\"", d->name, d->index);
    if (d->u.nic.gbps > 0) fprintf(f, " speed=\"%s\"", num(b, sizeof(b), d->u.nic.gbps * 1000.0));
    fprintf(f, " port=\"%d\"", d->u.nic.port);
    if (d->u.nic.rail >= 0) fprintf(f, " gcoll_rail=\"%d\"", d->u.nic.rail);
    fprintf_health(f, d);
    fprintf(f, "/>\n");
  }
  indent(f, depth);
  fprintf(f, "</nic>\n");
}

static int write_children(struct xw *w, int parent, int depth);

static int write_pci_dev(struct xw *w, int i, int depth) {
  char b[40];
  const struct gcoll_topo *t = w->t;
  const struct gcoll_topo_dev *d = &t->dev[i];
  FILE *f = w->f;
  switch (d->type) {
    case GCOLL_DEV_PCI:
      if (d->index != w->next_pci)
        return refuse(w, "switch '%s' is not in document order (switches must be listed "
                      "depth-first below their sockets)", d->name);
      w->next_pci++;
      indent(f, depth);
      fprintf(f, "<pci busid=\"%s\" class=\"0x060400\"", d->busid);
      pcie_attrs(f, uplink_bw(t, i));
      fprintf(f, ">\n");
      if (write_children(w, i, depth + 1)) return -1;
      indent(f, depth);
      fprintf(f, "</pci>\n");
      return 0;
    case GCOLL_DEV_GPU: write_gpu(w, i, depth); return 0;
    case GCOLL_DEV_NIC:
      /* Ports sharing a bus id are one <pci> with several <net>, written at
       * the first of them. */
      for (int k = 0; k < d->index; k++) {
        const struct gcoll_topo_dev *o = &t->dev[t->nic[k]];
        if (d->busid[0] && o->parent == d->parent && strcmp(o->busid, d->busid) == 0) return 0;
      }
      if (d->busid[0] == '\0') { /* a socket NIC */
        indent(f, depth);
        fprintf(f, "<nic gcoll_bw=\"%s\">\n", num(b, sizeof(b), uplink_bw(t, i)));
        indent(f, depth + 1);
        fprintf(f, "<net name=\"%s\" dev=\"%d\"", d->name, d->index);
        if (d->u.nic.gbps > 0)
          fprintf(f, " speed=\"%s\"", num(b, sizeof(b), d->u.nic.gbps * 1000.0));
        fprintf(f, " port=\"%d\"", d->u.nic.port);
        if (d->u.nic.rail >= 0) fprintf(f, " gcoll_rail=\"%d\"", d->u.nic.rail);
        fprintf_health(f, d);
        fprintf(f, "/>\n");
        indent(f, depth);
        fprintf(f, "</nic>\n");
        return 0;
      }
      indent(f, depth);
      fprintf(f, "<pci busid=\"%s\" class=\"0x020000\"", d->busid);
      pcie_attrs(f, uplink_bw(t, i));
      fprintf(f, ">\n");
      write_nets(w, i, depth + 1);
      indent(f, depth);
      fprintf(f, "</pci>\n");
      return 0;
    default: return 0;
  }
}

static int write_children(struct xw *w, int parent, int depth) {
  for (int i = 0; i < w->t->ndev; i++)
    if (w->t->dev[i].parent == parent && write_pci_dev(w, i, depth)) return -1;
  return 0;
}

/* Sockets' CPUs as consecutive bits: cpu0 the lowest `cores`, and so on. */
static void write_affinity(FILE *f, int base, int cores) {
  int top = base + cores, words = (top + 31) / 32;
  for (int wd = words - 1; wd >= 0; wd--) {
    unsigned v = 0;
    for (int b = 0; b < 32; b++) {
      int bit = 32 * wd + b;
      if (bit >= base && bit < top) v |= 1u << b;
    }
    fprintf(f, "%08x%s", v, wd ? "," : "");
  }
}

/* A socket's rate: its fastest socket link. The reader joins two sockets at
 * the lower of their rates, which gives back every link of a topology
 * whose socket links are "the lower of two per-socket rates" (NCCL's model,
 * and every conversion). */
static double socket_sys_bw(const struct gcoll_topo *t, int c) {
  double bw = 0;
  for (int l = 0; l < t->dev[c].nlinks; l++)
    if (t->dev[c].links[l].type == GCOLL_LINK_SYS && t->dev[c].links[l].bw > bw)
      bw = t->dev[c].links[l].bw;
  return bw;
}

int gcoll_topo_write_nccl_xml_stream(const struct gcoll_topo *topo, void *FILE_stream, char *err,
                                     size_t errlen) {
  struct xw w = {topo, FILE_stream, err, errlen, 0, 0};
  if (topo == NULL || FILE_stream == NULL) {
    snprintf(err, errlen, "NCCL XML writer: no topology or no stream");
    return -1;
  }
  if (check_links(&w)) return -1;
  /* Socket links: every pair present, each the lower of its sockets'
   * rates, or it would not read back the same. */
  for (int a = 0; a < topo->ncpu; a++)
    for (int b = a + 1; b < topo->ncpu; b++) {
      int ca = topo->cpu[a], cb = topo->cpu[b];
      double want = socket_sys_bw(topo, ca), other = socket_sys_bw(topo, cb), have = 0;
      if (other < want) want = other;
      for (int l = 0; l < topo->dev[ca].nlinks; l++)
        if (topo->dev[ca].links[l].peer == cb && topo->dev[ca].links[l].type == GCOLL_LINK_SYS)
          have = topo->dev[ca].links[l].bw;
      if (have == 0 || have != want)
        return refuse(&w, "the links between sockets ('%s' and others) are not one rate per "
                      "socket pair as NCCL models them", topo->dev[ca].name);
    }
  FILE *f = FILE_stream;
  fprintf(f, "<!-- gcoll topology '%s' (hash %08x) for NCCL_TOPO_FILE. gcoll_* attributes "
          "carry gcoll's exact values; NCCL ignores them. -->\n",
          topo->name, (unsigned)gcoll_topo_hash(topo));
  fprintf(f, "<system version=\"1\">\n");
  for (int c = 0; c < topo->ncpu; c++) {
    const struct gcoll_topo_dev *d = &topo->dev[topo->cpu[c]];
    fprintf(f, "  <cpu");
    if (d->u.cpu.numa >= 0) fprintf(f, " numaid=\"%d\"", d->u.cpu.numa);
    if (d->u.cpu.cores > 0) {
      fprintf(f, " affinity=\"");
      write_affinity(f, w.core_base, d->u.cpu.cores);
      fprintf(f, "\"");
      w.core_base += d->u.cpu.cores;
    }
    double sys = socket_sys_bw(topo, topo->cpu[c]);
    char b[40];
    if (sys > 0) fprintf(f, " gcoll_sys_bw=\"%s\"", num(b, sizeof(b), sys));
    fprintf(f, ">\n");
    if (write_children(&w, topo->cpu[c], 2)) return -1;
    fprintf(f, "  </cpu>\n");
  }
  fprintf(f, "</system>\n");
  if (ferror(f)) {
    snprintf(err, errlen, "topology '%s': write error", topo->name);
    return -1;
  }
  return 0;
}

static int write_cb(void *FILE_stream, const void *arg, char *err, size_t errlen) {
  return gcoll_topo_write_nccl_xml_stream(arg, FILE_stream, err, errlen);
}

int gcoll_topo_write_nccl_xml_file(const struct gcoll_topo *topo, const char *path, char *err,
                                   size_t errlen) {
  if (topo == NULL || path == NULL) {
    snprintf(err, errlen, "NCCL XML writer: no topology or no path");
    return -1;
  }
  return gcoll_atomic_write(path, write_cb, topo, err, errlen);
}
