/* NCCL's topology XML (`<system version="1">`, what NCCL_TOPO_FILE names and
 * NCCL_TOPO_DUMP_FILE writes) read into gcoll's topology model, with libxml2.
 *
 * The file is a tree: <cpu> sockets holding nested <pci> bridges and
 * switches, the GPUs (<pci class 0x03....> with a <gpu dev sm> child and its
 * <nvlink>/<c2c> links) and NICs (<pci class 0x02....> with <nic><net>).
 * What is mapped, what is ignored, the bandwidth rules and the quirks are in
 * docs/topology-format.md ("NCCL topology XML"). In short:
 *
 *  - devices are numbered as a YAML file would list them (cpus in file
 *    order, switches in document order, GPUs by <gpu dev> or else by bus
 *    id, NICs by <net dev> then file order), so that writing the result as
 *    YAML and reading it back gives the same content hash;
 *  - every NVSwitch a GPU reaches (listed or NVML-invisible, bus id
 *    fffffff:ff:ff.0) is one fabric device "nvs", as in gcoll's reference
 *    topologies; GPU-GPU NVLinks listed at both ends count once;
 *  - what a file leaves out (an override: no <gpu>, no <net>) stays
 *    unknown (0), never guessed; such a topology converts, and plans refuse
 *    it naming what is missing (gcoll_topo_missing);
 *  - bandwidths follow NCCL's own model for its files (PCIe width x lane
 *    rate / 80, NVLink per lane by SM generation, CPU interconnect by
 *    vendor), so paths rank as NCCL ranks them for the same file.
 *
 * Errors are one line "FILE:LINE: reason". Input is bounded: 4 MiB, 65536
 * elements, no DTD (so no entities to expand), no network; devices and
 * links are bounded by the model's own limits. */
#include "topo.h"
#include "yaml_doc.h" /* gcoll_read_file */

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#define XML_MAX_BYTES (4u << 20)
#define XML_MAX_ELEMENTS 65536
#define XML_MAX_NVSWITCH_PCI 64         /* <pci class 0x068000> elements */
/* <nvlink> elements: 16 GPUs with up to 96 each (lanes may be listed one by
 * one, to each peer and to switches). */
#define XML_MAX_NVLINKS (GCOLL_TOPO_MAX_GPUS * 96)
#define ATTR_MAX 256
#define INVISIBLE_NVSWITCH "fffffff:ff:ff.0"

enum xkind { XK_CPU, XK_PCI, XK_GPU, XK_NIC };

struct xref {          /* a parent: a socket or a switch, by collection index */
  enum xkind kind;
  int idx;
};

struct xcpu {
  long line;
  int numa, cores;
  double sys_bw;       /* this socket's interconnect rate (GB/s) */
  double gcoll_sys_bw; /* gcoll_sys_bw="..." (gcoll's export), 0 when absent */
  int dev;             /* device index once built */
};

struct xpci {
  long line;
  char busid[GCOLL_BUSID_MAX];
  struct xref parent;
  double bw;           /* uplink, GB/s */
  int virtual_bridge;  /* reports 2.5 GT/s x1: a VM's placeholder */
  int dev;
};

struct xgpu {
  long line;
  char busid[GCOLL_BUSID_MAX];
  struct xref parent;
  int cpu;             /* the socket above it (for C2C) */
  double bw;
  int has_gpu_elem, gpu_dev, sm, sms;
  double c2c_bw;       /* GB/s, 0 when none */
  int dev;
};

struct xnic {
  long line;
  char busid[GCOLL_BUSID_MAX];
  struct xref parent;
  double bw;
  char name[GCOLL_NAME_MAX];
  int named, port, net_dev;
  int rail;            /* gcoll_rail="..." (gcoll's export), -1 when absent */
  int down;            /* gcoll_down="1" (gcoll's export) */
  double active_gbps;  /* gcoll_active_gbps="..." (gcoll's export), 0 when absent */
  double gbps;
  int dev;
};

struct xnvlink {
  long line;
  int gpu;             /* collection index of the GPU declaring it */
  char target[GCOLL_BUSID_MAX];
  long tclass;         /* -1 when absent */
  int count;
  double gcoll_bw;     /* whole link (gcoll's export), 0 when absent */
  int gcoll_multicast; /* gcoll_multicast="1" on a link to an NVSwitch */
};

struct xr {
  const char *what;
  char *err;
  size_t errlen;
  long elements;
  struct xcpu cpu[GCOLL_TOPO_MAX_NODES];
  struct xpci pci[GCOLL_TOPO_MAX_NODES];
  struct xgpu gpu[GCOLL_TOPO_MAX_GPUS];
  struct xnic nic[GCOLL_TOPO_MAX_NODES];
  struct xnvlink nvl[XML_MAX_NVLINKS];
  char nvs_busid[XML_MAX_NVSWITCH_PCI][GCOLL_BUSID_MAX];
  int ncpu, npci, ngpu, nnic, nnvl, nnvs_pci, unnamed_nics;
};

/* ---- errors ---------------------------------------------------------------- */

static int fail(struct xr *r, long line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct xr *r, long line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(r->err, r->errlen, "%s:%ld: %s", r->what, line, msg);
  return -1;
}

static void warn(struct xr *r, long line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void warn(struct xr *r, long line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s:%ld: warning: %s\n", r->what, line, msg);
}

/* Values are echoed in messages: printable ASCII only, and short. */
static const char *shown(const char *s, char *buf, size_t len) {
  size_t i = 0;
  for (; s[i] && i + 1 < len && i < 40; i++)
    buf[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
  buf[i] = '\0';
  return buf;
}

/* ---- attributes ------------------------------------------------------------ */

static int is_elem(const xmlNode *n, const char *name) {
  return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

/* Copies attribute `name` into out. Returns 1 present, 0 absent, -1 (error
 * set) when longer than the buffer. */
static int attr(struct xr *r, xmlNode *n, const char *name, char *out, size_t outlen) {
  xmlChar *v = xmlGetNoNsProp(n, (const xmlChar *)name);
  if (v == NULL) {
    out[0] = '\0';
    return 0;
  }
  size_t len = strlen((const char *)v);
  if (len >= outlen) {
    xmlFree(v);
    return fail(r, xmlGetLineNo(n), "<%s %s=...>: value longer than %zu characters",
                (const char *)n->name, name, outlen - 1);
  }
  memcpy(out, v, len + 1);
  xmlFree(v);
  return 1;
}

/* Whole-string decimal integer in [min, max]. Absent or empty: dflt. */
static int attr_int(struct xr *r, xmlNode *n, const char *name, long min, long max, long dflt,
                    long *out) {
  char v[ATTR_MAX], b[48];
  int has = attr(r, n, name, v, sizeof(v));
  if (has < 0) return -1;
  if (!has || v[0] == '\0') {
    *out = dflt;
    return 0;
  }
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || !(isdigit((unsigned char)v[0]) || v[0] == '-'))
    return fail(r, xmlGetLineNo(n), "<%s %s=\"%s\">: not an integer", (const char *)n->name,
                name, shown(v, b, sizeof(b)));
  if (x < min || x > max)
    return fail(r, xmlGetLineNo(n), "<%s %s=\"%s\">: out of range [%ld, %ld]",
                (const char *)n->name, name, shown(v, b, sizeof(b)), min, max);
  *out = x;
  return 0;
}

/* "0x" and 1 to 8 hex digits. Absent or empty: -1. */
static int attr_hex(struct xr *r, xmlNode *n, const char *name, long *out) {
  char v[ATTR_MAX], b[48];
  int has = attr(r, n, name, v, sizeof(v));
  *out = -1;
  if (has < 0) return -1;
  if (!has || v[0] == '\0') return 0;
  size_t len = strlen(v);
  int ok = len >= 3 && len <= 10 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
  for (size_t i = 2; ok && i < len; i++) ok = isxdigit((unsigned char)v[i]) != 0;
  if (!ok)
    return fail(r, xmlGetLineNo(n), "<%s %s=\"%s\">: not a hex number like 0x030200",
                (const char *)n->name, name, shown(v, b, sizeof(b)));
  *out = strtol(v + 2, NULL, 16);
  return 0;
}

/* Positive decimal number (may have a fraction) in (0, max]. */
static int attr_num(struct xr *r, xmlNode *n, const char *name, double max, double *out) {
  char v[ATTR_MAX], b[48];
  int has = attr(r, n, name, v, sizeof(v));
  *out = 0;
  if (has < 0) return -1;
  if (!has || v[0] == '\0') return 0;
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !isdigit((unsigned char)v[0]))
    return fail(r, xmlGetLineNo(n), "<%s %s=\"%s\">: not a number", (const char *)n->name, name,
                shown(v, b, sizeof(b)));
  if (!(x > 0) || x > max)
    return fail(r, xmlGetLineNo(n), "<%s %s=\"%s\">: out of range (0, %g]",
                (const char *)n->name, name, shown(v, b, sizeof(b)), max);
  *out = x;
  return 0;
}

/* PCI addresses: "dddd:bb:dd.f" with a 4- to 7-hex-digit domain, stored in
 * lower case (gcoll's YAML spelling). Attribute `name` is required. */
static int attr_busid(struct xr *r, xmlNode *n, const char *name, char *out) {
  char v[ATTR_MAX], b[48];
  int has = attr(r, n, name, v, sizeof(v));
  if (has < 0) return -1;
  if (!has) return fail(r, xmlGetLineNo(n), "<%s>: no %s", (const char *)n->name, name);
  size_t len = strlen(v), dom = 0;
  while (dom < len && v[dom] != ':') dom++;
  int ok = dom >= 4 && dom <= 7 && len == dom + 8 && len < GCOLL_BUSID_MAX;
  for (size_t i = 0; ok && i < len; i++) {
    size_t k = i - dom;
    char c = (char)tolower((unsigned char)v[i]);
    int hex = isxdigit((unsigned char)c) != 0;
    ok = i < dom ? hex : k == 0 || k == 3 ? c == ':' : k == 6 ? c == '.'
       : k == 7 ? (c >= '0' && c <= '7') : hex;
    v[i] = c;
  }
  if (!ok)
    return fail(r, xmlGetLineNo(n), "<%s %s=\"%s\">: not a PCI address like 0000:1b:00.0",
                (const char *)n->name, name, shown(v, b, sizeof(b)));
  memcpy(out, v, len + 1);
  return 0;
}

/* ---- bandwidth rules (see docs/topology-format.md) ------------------------ */

/* NCCL's per-lane PCIe rate, in units of 100 Mb/s: 2.5 and 5 GT/s (8b/10b)
 * x 6, 8 GT/s and up (128b/130b) x 7.5, so 8 GT/s = 60, 32 GT/s = 240.
 * Returns 0 for "unknown" (absent, empty, "Unknown"), -1 for garbage. */
static double lane_rate(const char *s) {
  if (s[0] == '\0' || strcmp(s, "Unknown") == 0 || strcmp(s, "unknown") == 0) return 0;
  char *end;
  errno = 0;
  double gt = strtod(s, &end);
  if (errno != 0 || end == s || !isdigit((unsigned char)s[0]) || !(gt > 0) || gt > 1024)
    return -1;
  if (strcmp(end, " GT/s") != 0 && strcmp(end, " GT/s PCIe") != 0) return -1;
  return gt < 8 ? gt * 6.0 : gt * 7.5;
}

#define DEFAULT_LANE_RATE 60.0 /* unknown speed: PCIe Gen3's, as NCCL assumes */
#define DEFAULT_WIDTH 16       /* unknown width (0 or empty): x16 */

/* A <pci>'s uplink from link_speed and link_width, or gcoll's exact
 * gcoll_bw when a gcoll export wrote one. */
static int pci_link_bw(struct xr *r, xmlNode *n, double *bw, int *virtual_bridge) {
  char speed[ATTR_MAX], b[48];
  long width;
  double exact;
  if (attr(r, n, "link_speed", speed, sizeof(speed)) < 0 ||
      attr_int(r, n, "link_width", 0, 32, 0, &width) || attr_num(r, n, "gcoll_bw", 1e6, &exact))
    return -1;
  double rate = lane_rate(speed);
  if (rate < 0)
    return fail(r, xmlGetLineNo(n), "<pci link_speed=\"%s\">: not a rate like \"16 GT/s\"",
                shown(speed, b, sizeof(b)));
  *virtual_bridge = rate == 15.0 && width == 1 && exact == 0;
  if (exact > 0) {
    *bw = exact;
    return 0;
  }
  if (rate == 0) rate = DEFAULT_LANE_RATE;
  if (width == 0) width = DEFAULT_WIDTH;
  *bw = (double)width * rate / 80.0;
  return 0;
}

/* NVLink per lane, one direction (GB/s), by SM generation: NCCL's figures. */
static double nvlink_lane_bw(int sm) {
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm >= 86) return 12.0;
  if (sm >= 70) return 20.0;
  if (sm >= 60) return 18.0;
  return 0;
}

/* CPU interconnect (GB/s) by architecture, vendor and model: NCCL's
 * figures; unknown CPUs get the lowest (6). */
static double cpu_sys_bw(const char *arch, const char *vendor, long family, long model) {
  if (strcmp(arch, "ppc64") == 0) return 32;
  if (strcmp(arch, "arm64") == 0 || strcmp(arch, "aarch64") == 0) return 6;
  if (strcmp(vendor, "AuthenticAMD") == 0) return 16;
  if (strcmp(vendor, "GenuineIntel") == 0 && family == 6) {
    if (model == 207) return 40;  /* Emerald Rapids */
    if (model >= 143) return 22;  /* Sapphire Rapids and later */
    if (model >= 85) return 10;   /* Skylake-SP and later */
  }
  return 6;
}

/* SM count of a few data-centre GPUs by PCI device id; 0 (unknown) else.
 * Plans do not need it. */
static int sms_of_device(long vendor, long device) {
  static const struct { long device; int sms; } known[] = {
      {0x20b0, 108}, /* A100-SXM4-40GB */
      {0x20b2, 108}, /* A100-SXM4-80GB */
      {0x2330, 132}, /* H100 SXM5 80GB */
      {0x2335, 132}, /* H200 SXM 141GB */
  };
  if (vendor != 0x10de) return 0;
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
    if (known[i].device == device) return known[i].sms;
  return 0;
}

/* ---- the walk -------------------------------------------------------------- */

static int count_element(struct xr *r, xmlNode *n) {
  if (++r->elements > XML_MAX_ELEMENTS)
    return fail(r, xmlGetLineNo(n), "more than %d XML elements", XML_MAX_ELEMENTS);
  return 0;
}

static int read_net(struct xr *r, xmlNode *net, const char *busid, struct xref parent, double bw) {
  char name[ATTR_MAX], b[48];
  long port, dev, rail, down;
  double speed, active;
  if (count_element(r, net)) return -1;
  if (r->nnic >= GCOLL_TOPO_MAX_NODES)
    return fail(r, xmlGetLineNo(net), "more than %d NICs", GCOLL_TOPO_MAX_NODES);
  struct xnic *x = &r->nic[r->nnic];
  memset(x, 0, sizeof(*x));
  x->line = xmlGetLineNo(net);
  int has = attr(r, net, "name", name, sizeof(name));
  if (has < 0 || attr_num(r, net, "speed", 1e8, &speed) ||
      attr_int(r, net, "port", 1, 255, 1, &port) ||
      attr_int(r, net, "dev", 0, 1 << 20, -1, &dev) ||
      attr_int(r, net, "gcoll_rail", 0, GCOLL_TOPO_MAX_RAIL, -1, &rail) ||
      attr_int(r, net, "gcoll_down", 0, 1, 0, &down) ||
      attr_num(r, net, "gcoll_active_gbps", 1e5, &active))
    return -1;
  if (has) {
    int ok = name[0] != '\0' && strlen(name) < GCOLL_NAME_MAX && isalnum((unsigned char)name[0]);
    for (size_t i = 0; ok && name[i]; i++)
      ok = isalnum((unsigned char)name[i]) || strchr("_-.:", name[i]) != NULL;
    if (!ok)
      return fail(r, x->line,
                  "<net name=\"%s\">: a device name is 1 to %d letters, digits, '_', '-', '.', "
                  "':' and starts with a letter or digit",
                  shown(name, b, sizeof(b)), GCOLL_NAME_MAX - 1);
    snprintf(x->name, sizeof(x->name), "%s", name);
    x->named = 1;
  }
  snprintf(x->busid, sizeof(x->busid), "%s", busid);
  x->parent = parent;
  x->bw = bw;
  x->port = (int)port;
  x->net_dev = (int)dev;
  x->rail = (int)rail;
  x->down = (int)down;
  x->active_gbps = active;
  x->gbps = speed / 1000.0; /* Mb/s */
  r->nnic++;
  return 0;
}

/* A NIC: each <net> of its <nic> is a port; none at all is a NIC whose
 * name and speed the file does not say. */
static int read_nic_elem(struct xr *r, xmlNode *nic, const char *busid, struct xref parent,
                         double bw, int *nets) {
  if (count_element(r, nic)) return -1;
  for (xmlNode *c = nic->children; c; c = c->next) {
    if (!is_elem(c, "net")) continue;
    if (read_net(r, c, busid, parent, bw)) return -1;
    (*nets)++;
  }
  return 0;
}

static int add_unnamed_nic(struct xr *r, long line, const char *busid, struct xref parent,
                           double bw) {
  if (r->nnic >= GCOLL_TOPO_MAX_NODES)
    return fail(r, line, "more than %d NICs", GCOLL_TOPO_MAX_NODES);
  struct xnic *x = &r->nic[r->nnic++];
  memset(x, 0, sizeof(*x));
  x->line = line;
  snprintf(x->busid, sizeof(x->busid), "%s", busid);
  x->parent = parent;
  x->bw = bw;
  x->port = 1;
  x->net_dev = -1;
  x->rail = -1;
  return 0;
}

static int read_gpu_elem(struct xr *r, xmlNode *g, struct xgpu *x) {
  long dev, sm, sms;
  if (count_element(r, g) || attr_int(r, g, "dev", 0, 1 << 20, -1, &dev) ||
      attr_int(r, g, "sm", 10, 255, 0, &sm) || attr_int(r, g, "gcoll_sms", 0, 4096, 0, &sms))
    return -1;
  if (sms > 0) x->sms = (int)sms;
  x->has_gpu_elem = 1;
  x->gpu_dev = (int)dev;
  x->sm = (int)sm;
  for (xmlNode *c = g->children; c; c = c->next) {
    if (is_elem(c, "nvlink")) {
      long count, tclass;
      if (count_element(r, c)) return -1;
      if (r->nnvl >= XML_MAX_NVLINKS)
        return fail(r, xmlGetLineNo(c), "more than %d <nvlink> entries", XML_MAX_NVLINKS);
      struct xnvlink *l = &r->nvl[r->nnvl];
      l->line = xmlGetLineNo(c);
      l->gpu = (int)(x - r->gpu);
      long mc;
      if (attr_int(r, c, "count", 1, 1024, 1, &count) || attr_hex(r, c, "tclass", &tclass) ||
          attr_num(r, c, "gcoll_bw", 1e6, &l->gcoll_bw) ||
          attr_int(r, c, "gcoll_multicast", 0, 1, 0, &mc))
        return -1;
      l->gcoll_multicast = (int)mc;
      if (attr_busid(r, c, "target", l->target)) return -1;
      l->tclass = tclass;
      l->count = (int)count;
      r->nnvl++;
    } else if (is_elem(c, "c2c")) {
      long count;
      double bw;
      if (count_element(r, c) || attr_num(r, c, "bw", 1e7, &bw) ||
          attr_int(r, c, "count", 1, 1024, 1, &count))
        return -1;
      if (bw == 0) return fail(r, xmlGetLineNo(c), "<c2c>: no bw");
      x->c2c_bw += bw * (double)count / 1000.0; /* MB/s per link */
    }
  }
  return 0;
}

static int read_pci(struct xr *r, xmlNode *n, struct xref parent, int cpu, int depth);

static int read_children(struct xr *r, xmlNode *n, struct xref self, int cpu, int depth) {
  for (xmlNode *c = n->children; c; c = c->next) {
    if (is_elem(c, "pci")) {
      if (read_pci(r, c, self, cpu, depth + 1)) return -1;
    } else if (is_elem(c, "nic") && self.kind == XK_CPU) {
      /* A NIC straight under a socket (eth0): no PCI address, and an
       * unknown link (Gen3 x16: 12 GB/s) unless gcoll's export says. */
      int nets = 0;
      double bw;
      if (attr_num(r, c, "gcoll_bw", 1e6, &bw)) return -1;
      if (bw == 0) bw = 16.0 * DEFAULT_LANE_RATE / 80.0;
      if (read_nic_elem(r, c, "", self, bw, &nets)) return -1;
      if (nets == 0 && add_unnamed_nic(r, xmlGetLineNo(c), "", self, bw)) return -1;
    }
  }
  return 0;
}

static int has_child(xmlNode *n, const char *name) {
  for (xmlNode *c = n->children; c; c = c->next)
    if (is_elem(c, name)) return 1;
  return 0;
}

static int check_busid_unique(struct xr *r, long line, const char *busid) {
  for (int i = 0; i < r->npci; i++)
    if (strcmp(r->pci[i].busid, busid) == 0) goto dup;
  for (int i = 0; i < r->ngpu; i++)
    if (strcmp(r->gpu[i].busid, busid) == 0) goto dup;
  for (int i = 0; i < r->nnic; i++)
    if (strcmp(r->nic[i].busid, busid) == 0) goto dup;
  for (int i = 0; i < r->nnvs_pci; i++)
    if (strcmp(r->nvs_busid[i], busid) == 0) goto dup;
  return 0;
dup:
  return fail(r, line, "<pci busid=\"%s\">: bus id listed twice", busid);
}

static int read_pci(struct xr *r, xmlNode *n, struct xref parent, int cpu, int depth) {
  char busid[GCOLL_BUSID_MAX];
  long cls, vendor, device;
  double bw = 0;
  int vb = 0;
  long line = xmlGetLineNo(n);
  if (count_element(r, n)) return -1;
  if (depth > GCOLL_TOPO_MAX_NODES) return fail(r, line, "<pci> nested too deeply");
  if (attr_busid(r, n, "busid", busid) || attr_hex(r, n, "class", &cls) ||
      attr_hex(r, n, "vendor", &vendor) || attr_hex(r, n, "device", &device) ||
      pci_link_bw(r, n, &bw, &vb) || check_busid_unique(r, line, busid))
    return -1;
  int gpu = has_child(n, "gpu") || (cls >= 0 && (cls >> 16) == 0x03);
  int nic = has_child(n, "nic") || (cls >= 0 && (cls >> 16) == 0x02);
  int sub = has_child(n, "pci");
  if (gpu && nic) return fail(r, line, "<pci busid=\"%s\">: both a GPU and a NIC", busid);
  if ((gpu || nic) && sub)
    return fail(r, line, "<pci busid=\"%s\">: a %s with PCI devices below it", busid,
                gpu ? "GPU" : "NIC");
  if (gpu) {
    if (r->ngpu >= GCOLL_TOPO_MAX_GPUS)
      return fail(r, line, "more than %d GPUs", GCOLL_TOPO_MAX_GPUS);
    struct xgpu *x = &r->gpu[r->ngpu++];
    memset(x, 0, sizeof(*x));
    x->line = line;
    memcpy(x->busid, busid, sizeof(busid));
    x->parent = parent;
    x->cpu = cpu;
    x->bw = bw;
    x->gpu_dev = -1;
    x->sms = sms_of_device(vendor, device);
    for (xmlNode *c = n->children; c; c = c->next)
      if (is_elem(c, "gpu")) {
        if (x->has_gpu_elem) return fail(r, xmlGetLineNo(c), "a second <gpu> in one <pci>");
        if (read_gpu_elem(r, c, x)) return -1;
      }
    return 0;
  }
  if (nic) {
    int nets = 0;
    for (xmlNode *c = n->children; c; c = c->next)
      if (is_elem(c, "nic") && read_nic_elem(r, c, busid, parent, bw, &nets)) return -1;
    return nets > 0 ? 0 : add_unnamed_nic(r, line, busid, parent, bw);
  }
  if (cls == 0x068000) { /* an NVSwitch NCCL listed: part of the fabric */
    if (r->nnvs_pci >= XML_MAX_NVSWITCH_PCI)
      return fail(r, line, "more than %d NVSwitch <pci> entries", XML_MAX_NVSWITCH_PCI);
    memcpy(r->nvs_busid[r->nnvs_pci++], busid, sizeof(busid));
    return 0;
  }
  if (cls < 0 && !sub)
    return fail(r, line,
                "<pci busid=\"%s\">: no class and nothing below it: cannot tell a GPU from a "
                "NIC (an override for merging with detection, which this reader does not do)",
                busid);
  /* Anything else is a bridge or switch, as NCCL treats it. */
  if (r->npci >= GCOLL_TOPO_MAX_NODES)
    return fail(r, line, "more than %d PCI switches", GCOLL_TOPO_MAX_NODES);
  int self = r->npci++;
  struct xpci *x = &r->pci[self];
  memset(x, 0, sizeof(*x));
  x->line = line;
  memcpy(x->busid, busid, sizeof(busid));
  x->parent = parent;
  x->bw = bw;
  x->virtual_bridge = vb;
  struct xref me = {XK_PCI, self};
  return read_children(r, n, me, cpu, depth);
}

static int affinity_count(struct xr *r, xmlNode *n, char *v, size_t cap, char *b, int *cores);

/* Number of CPUs an affinity mask ("ffffffff,0000ffff": 32-bit hex words,
 * most significant first) holds. */
static int affinity_cores(struct xr *r, xmlNode *n, int *cores) {
  static const size_t cap = 24576; /* 65536 CPUs: 2048 words of 9 characters */
  char *v = malloc(cap), b[48];
  if (v == NULL) return fail(r, xmlGetLineNo(n), "out of memory");
  int rc = affinity_count(r, n, v, cap, b, cores);
  free(v);
  return rc;
}

static int affinity_count(struct xr *r, xmlNode *n, char *v, size_t cap, char *b, int *cores) {
  int has = attr(r, n, "affinity", v, cap);
  *cores = 0;
  if (has < 0) return -1;
  if (!has || v[0] == '\0') return 0;
  long total = 0;
  size_t digits = 0;
  for (size_t i = 0; v[i]; i++) {
    char c = v[i];
    if (c == ',') {
      if (digits == 0) goto bad;
      digits = 0;
      continue;
    }
    if (!isxdigit((unsigned char)c) || ++digits > 8) goto bad;
    int d = isdigit((unsigned char)c) ? c - '0' : tolower((unsigned char)c) - 'a' + 10;
    total += __builtin_popcount((unsigned)d);
  }
  if (digits == 0) goto bad;
  if (total < 1 || total > 65536)
    return fail(r, xmlGetLineNo(n), "<cpu affinity=...>: %ld CPUs, must be 1 to 65536", total);
  *cores = (int)total;
  return 0;
bad:
  return fail(r, xmlGetLineNo(n), "<cpu affinity=\"%s\">: not a CPU mask like ffffffff,0000ffff",
              shown(v, b, 48));
}

static int read_cpu(struct xr *r, xmlNode *n) {
  char arch[ATTR_MAX], vendor[ATTR_MAX];
  long numa, family, model;
  int cores;
  double gcoll_sys_bw;
  if (count_element(r, n)) return -1;
  if (r->ncpu >= GCOLL_TOPO_MAX_NODES)
    return fail(r, xmlGetLineNo(n), "more than %d CPUs", GCOLL_TOPO_MAX_NODES);
  if (attr_int(r, n, "numaid", -1, 4095, -1, &numa) || affinity_cores(r, n, &cores) ||
      attr(r, n, "arch", arch, sizeof(arch)) < 0 ||
      attr(r, n, "vendor", vendor, sizeof(vendor)) < 0 ||
      attr_int(r, n, "familyid", 0, 1L << 20, -1, &family) ||
      attr_int(r, n, "modelid", 0, 1L << 20, -1, &model) ||
      attr_num(r, n, "gcoll_sys_bw", 1e6, &gcoll_sys_bw))
    return -1;
  int self = r->ncpu++;
  struct xcpu *x = &r->cpu[self];
  x->line = xmlGetLineNo(n);
  x->numa = (int)numa;
  x->cores = cores;
  x->sys_bw = cpu_sys_bw(arch, vendor, family, model);
  x->gcoll_sys_bw = gcoll_sys_bw;
  struct xref me = {XK_CPU, self};
  return read_children(r, n, me, self, 0);
}

/* ---- building the model ---------------------------------------------------- */

static int parent_dev(const struct xr *r, struct xref p) {
  return p.kind == XK_CPU ? r->cpu[p.idx].dev : r->pci[p.idx].dev;
}

static int add_dev(struct xr *r, struct gcoll_topo *t, long line, enum gcoll_dev_type type,
                   const char *name, int parent, const char *busid) {
  char why[256];
  int d = gcoll_topo_add_dev(t, type, name, parent, why, sizeof(why));
  if (d < 0) return fail(r, line, "%s", why);
  snprintf(t->dev[d].busid, sizeof(t->dev[d].busid), "%s", busid);
  return d;
}

static int add_link(struct xr *r, struct gcoll_topo *t, long line, int a, int b,
                    enum gcoll_link_type type, int count, double bw) {
  char why[256];
  if (gcoll_topo_add_link(t, a, b, type, count, bw, why, sizeof(why)))
    return fail(r, line, "%s", why);
  return 0;
}

static int find_gpu(const struct xr *r, const char *busid) {
  for (int i = 0; i < r->ngpu; i++)
    if (strcmp(r->gpu[i].busid, busid) == 0) return i;
  return -1;
}

static int is_nvswitch_target(const struct xr *r, const struct xnvlink *l) {
  if (l->tclass == 0x068000 || strcmp(l->target, INVISIBLE_NVSWITCH) == 0) return 1;
  for (int i = 0; i < r->nnvs_pci; i++)
    if (strcmp(r->nvs_busid[i], l->target) == 0) return 1;
  return 0;
}

/* GPU order: by <gpu dev> when every GPU has one (a permutation of
 * 0..n-1), by bus id when none has (NVML's and CUDA_DEVICE_ORDER=
 * PCI_BUS_ID's order), an error when only some have. */
static int order_gpus(struct xr *r, int *order) {
  int with = 0;
  for (int i = 0; i < r->ngpu; i++) with += r->gpu[i].gpu_dev >= 0;
  if (with == 0) {
    for (int i = 0; i < r->ngpu; i++) order[i] = i;
    for (int i = 1; i < r->ngpu; i++)
      for (int j = i; j > 0 && strcmp(r->gpu[order[j - 1]].busid, r->gpu[order[j]].busid) > 0;
           j--) {
        int tmp = order[j];
        order[j] = order[j - 1];
        order[j - 1] = tmp;
      }
    return 0;
  }
  for (int i = 0; i < r->ngpu; i++) order[i] = -1;
  for (int i = 0; i < r->ngpu; i++) {
    const struct xgpu *g = &r->gpu[i];
    if (g->gpu_dev < 0)
      return fail(r, g->line, "GPU %s has no <gpu dev> while other GPUs have one", g->busid);
    if (g->gpu_dev >= r->ngpu)
      return fail(r, g->line, "GPU %s: <gpu dev=\"%d\"> but the file has %d GPUs (dev must be "
                  "0 to %d)", g->busid, g->gpu_dev, r->ngpu, r->ngpu - 1);
    if (order[g->gpu_dev] >= 0)
      return fail(r, g->line, "GPU %s: <gpu dev=\"%d\"> already used by GPU %s (line %ld)",
                  g->busid, g->gpu_dev, r->gpu[order[g->gpu_dev]].busid,
                  r->gpu[order[g->gpu_dev]].line);
    order[g->gpu_dev] = i;
  }
  return 0;
}

/* NIC order: NICs with a <net dev> by dev, then the others in file order. */
static void order_nics(const struct xr *r, int *order) {
  for (int i = 0; i < r->nnic; i++) order[i] = i;
  for (int i = 1; i < r->nnic; i++)
    for (int j = i; j > 0; j--) {
      const struct xnic *a = &r->nic[order[j - 1]], *b = &r->nic[order[j]];
      unsigned ka = a->net_dev < 0 ? ~0u : (unsigned)a->net_dev;
      unsigned kb = b->net_dev < 0 ? ~0u : (unsigned)b->net_dev;
      if (ka <= kb) break;
      int tmp = order[j];
      order[j] = order[j - 1];
      order[j - 1] = tmp;
    }
}

/* Virtual bridges report 2.5 GT/s x1 whatever sits below them; such a
 * bridge's uplink is taken as wide as the widest link below it. Switches
 * are in document order, so children come after their parent. */
static void fix_virtual_bridges(struct xr *r) {
  for (int i = r->npci - 1; i >= 0; i--) {
    if (!r->pci[i].virtual_bridge) continue;
    double widest = 0;
    for (int k = i + 1; k < r->npci; k++)
      if (r->pci[k].parent.kind == XK_PCI && r->pci[k].parent.idx == i && r->pci[k].bw > widest)
        widest = r->pci[k].bw;
    for (int k = 0; k < r->ngpu; k++)
      if (r->gpu[k].parent.kind == XK_PCI && r->gpu[k].parent.idx == i && r->gpu[k].bw > widest)
        widest = r->gpu[k].bw;
    for (int k = 0; k < r->nnic; k++)
      if (r->nic[k].parent.kind == XK_PCI && r->nic[k].parent.idx == i && r->nic[k].bw > widest)
        widest = r->nic[k].bw;
    if (widest > r->pci[i].bw) r->pci[i].bw = widest;
  }
}

/* Links are added in GPU order (gpuN), whatever order the file lists them
 * in, so that any file describing the same node (gcoll's own export of it
 * included) gives the same link order and hash. */
static int build_nvlinks(struct xr *r, struct gcoll_topo *t, int nvs, const int *gorder) {
  /* GPU -> fabric: all lanes to any NVSwitch, summed per GPU. */
  for (int k = 0; k < r->ngpu; k++) {
    int g = gorder[k], lanes = 0, exact = 1;
    long line = 0;
    double exact_bw = 0;
    for (int i = 0; i < r->nnvl; i++)
      if (r->nvl[i].gpu == g && strcmp(r->nvl[i].target, r->gpu[g].busid) != 0 &&
          is_nvswitch_target(r, &r->nvl[i])) {
        lanes += r->nvl[i].count;
        exact_bw += r->nvl[i].gcoll_bw;
        exact &= r->nvl[i].gcoll_bw > 0;
        if (line == 0) line = r->nvl[i].line;
      }
    if (lanes == 0) continue;
    if (lanes > 1024) return fail(r, line, "GPU %s: more than 1024 NVLink lanes", r->gpu[g].busid);
    double bw = exact ? exact_bw : lanes * nvlink_lane_bw(r->gpu[g].sm);
    if (add_link(r, t, line, r->gpu[g].dev, nvs, GCOLL_LINK_NVL, lanes, bw)) return -1;
  }
  /* GPU <-> GPU, pairs in GPU order: listed at one or both ends, the
   * larger count once. */
  for (int ka = 0; ka < r->ngpu; ka++)
    for (int kb = ka + 1; kb < r->ngpu; kb++) {
      int a = gorder[ka], b = gorder[kb], count = 0;
      long line = 0;
      double exact = 0;
      for (int i = 0; i < r->nnvl; i++) {
        const struct xnvlink *m = &r->nvl[i];
        if (is_nvswitch_target(r, m)) continue;
        int q = find_gpu(r, m->target);
        if (!((m->gpu == a && q == b) || (m->gpu == b && q == a))) continue;
        if (m->count > count) {
          count = m->count;
          exact = m->gcoll_bw;
          line = m->line;
        }
      }
      if (count == 0) continue;
      double lane = nvlink_lane_bw(r->gpu[a].sm);
      double lb = nvlink_lane_bw(r->gpu[b].sm);
      if (lb < lane) lane = lb;
      if (add_link(r, t, line, r->gpu[a].dev, r->gpu[b].dev, GCOLL_LINK_NVL, count,
                   exact > 0 ? exact : count * lane))
        return -1;
    }
  return 0;
}

/* Checks every <nvlink> before anything is built, so the reason points at
 * the entry. Returns whether any link reaches an NVSwitch. */
static int check_nvlinks(struct xr *r, int *any_nvs) {
  *any_nvs = 0;
  for (int i = 0; i < r->nnvl; i++) {
    struct xnvlink *l = &r->nvl[i];
    const struct xgpu *g = &r->gpu[l->gpu];
    if (strcmp(l->target, g->busid) == 0) {
      warn(r, l->line, "<nvlink> from GPU %s to itself ignored", g->busid);
      continue;
    }
    if (g->sm == 0)
      return fail(r, l->line, "<nvlink>: GPU %s has no <gpu sm>, so the NVLink rate is unknown",
                  g->busid);
    if (nvlink_lane_bw(g->sm) == 0)
      return fail(r, l->line, "<nvlink>: GPU %s is sm %d, which has no NVLink", g->busid, g->sm);
    if (is_nvswitch_target(r, l)) {
      *any_nvs = 1;
      continue;
    }
    if (l->tclass == 0x068001)
      return fail(r, l->line, "<nvlink target=\"%s\">: NVLink to a CPU is not supported",
                  l->target);
    if (l->tclass >= 0 && (l->tclass >> 16) != 0x03)
      return fail(r, l->line, "<nvlink target=\"%s\" tclass=\"0x%06lx\">: unknown target class",
                  l->target, l->tclass);
    int peer = find_gpu(r, l->target);
    if (peer < 0)
      return fail(r, l->line, "<nvlink target=\"%s\">: no GPU or NVSwitch with that bus id in "
                  "this file", l->target);
    if (r->gpu[peer].sm == 0 || nvlink_lane_bw(r->gpu[peer].sm) == 0)
      return fail(r, l->line, "<nvlink target=\"%s\">: that GPU has no NVLink rate (no <gpu sm>)",
                  l->target);
  }
  return 0;
}

static int build(struct xr *r, struct gcoll_topo *t) {
  char name[GCOLL_NAME_MAX];
  int gorder[GCOLL_TOPO_MAX_GPUS], norder[GCOLL_TOPO_MAX_NODES], any_nvs;
  if (r->ncpu == 0) return fail(r, 1, "<system> has no <cpu>");
  if (order_gpus(r, gorder) || check_nvlinks(r, &any_nvs)) return -1;
  order_nics(r, norder);
  fix_virtual_bridges(r);
  /* Devices by kind, as the YAML lists them: cpus, pci, gpus, nics, nvs. */
  for (int i = 0; i < r->ncpu; i++) {
    snprintf(name, sizeof(name), "cpu%d", i);
    if ((r->cpu[i].dev = add_dev(r, t, r->cpu[i].line, GCOLL_DEV_CPU, name, -1, "")) < 0)
      return -1;
    t->dev[r->cpu[i].dev].u.cpu.cores = r->cpu[i].cores;
    t->dev[r->cpu[i].dev].u.cpu.numa = r->cpu[i].numa;
  }
  for (int i = 0; i < r->npci; i++) {
    snprintf(name, sizeof(name), "sw%d", i);
    if ((r->pci[i].dev = add_dev(r, t, r->pci[i].line, GCOLL_DEV_PCI, name,
                                 parent_dev(r, r->pci[i].parent), r->pci[i].busid)) < 0)
      return -1;
  }
  for (int k = 0; k < r->ngpu; k++) {
    struct xgpu *g = &r->gpu[gorder[k]];
    snprintf(name, sizeof(name), "gpu%d", k);
    if ((g->dev = add_dev(r, t, g->line, GCOLL_DEV_GPU, name, parent_dev(r, g->parent),
                          g->busid)) < 0)
      return -1;
    t->dev[g->dev].u.gpu.cc = g->sm;
    t->dev[g->dev].u.gpu.sms = g->sms;
  }
  for (int k = 0; k < r->nnic; k++) {
    struct xnic *x = &r->nic[norder[k]];
    if (!x->named) snprintf(x->name, sizeof(x->name), "nic%d", r->unnamed_nics++);
    if ((x->dev = add_dev(r, t, x->line, GCOLL_DEV_NIC, x->name, parent_dev(r, x->parent),
                          x->busid)) < 0)
      return -1;
    t->dev[x->dev].u.nic.port = x->port;
    t->dev[x->dev].u.nic.gbps = x->gbps;
    t->dev[x->dev].u.nic.rail = x->rail;
    t->dev[x->dev].u.nic.down = x->down;
    t->dev[x->dev].u.nic.active_gbps = x->active_gbps < x->gbps ? x->active_gbps : 0;
  }
  int nvs = -1;
  if (any_nvs) {
    /* Multicast (NVLS) is what the driver says at run time; the file does
     * not, so it is left off. */
    if ((nvs = add_dev(r, t, r->nvl[0].line, GCOLL_DEV_NVS, "nvs", -1, "")) < 0) return -1;
    /* ... except in gcoll's own export, which keeps the model's flag. */
    for (int i = 0; i < r->nnvl; i++)
      if (r->nvl[i].gcoll_multicast && is_nvswitch_target(r, &r->nvl[i]))
        t->dev[nvs].u.nvs.multicast = 1;
  }
  /* Links: sockets pairwise, then each device's uplink, then NVLink. */
  for (int i = 0; i < r->ncpu; i++)
    for (int j = i + 1; j < r->ncpu; j++) {
      double bw = r->cpu[i].sys_bw < r->cpu[j].sys_bw ? r->cpu[i].sys_bw : r->cpu[j].sys_bw;
      if (r->cpu[i].gcoll_sys_bw > 0 && r->cpu[j].gcoll_sys_bw > 0)
        bw = r->cpu[i].gcoll_sys_bw < r->cpu[j].gcoll_sys_bw ? r->cpu[i].gcoll_sys_bw
                                                             : r->cpu[j].gcoll_sys_bw;
      if (add_link(r, t, r->cpu[j].line, r->cpu[i].dev, r->cpu[j].dev, GCOLL_LINK_SYS, 1, bw))
        return -1;
    }
  for (int i = 0; i < r->npci; i++)
    if (add_link(r, t, r->pci[i].line, parent_dev(r, r->pci[i].parent), r->pci[i].dev,
                 GCOLL_LINK_PCI, 1, r->pci[i].bw))
      return -1;
  for (int k = 0; k < r->ngpu; k++) {
    const struct xgpu *g = &r->gpu[gorder[k]];
    int up = parent_dev(r, g->parent), cpu = r->cpu[g->cpu].dev;
    double bw = g->bw;
    /* NVLink-C2C (Grace): the GPU's link to its socket at C2C rate. */
    if (g->c2c_bw > 0 && up == cpu && g->c2c_bw > bw) bw = g->c2c_bw;
    if (add_link(r, t, g->line, up, g->dev, GCOLL_LINK_PCI, 1, bw)) return -1;
    if (g->c2c_bw > 0 && up != cpu &&
        add_link(r, t, g->line, cpu, g->dev, GCOLL_LINK_PCI, 1, g->c2c_bw))
      return -1;
  }
  for (int k = 0; k < r->nnic; k++) {
    const struct xnic *x = &r->nic[norder[k]];
    if (add_link(r, t, x->line, parent_dev(r, x->parent), x->dev, GCOLL_LINK_PCI, 1, x->bw))
      return -1;
  }
  return build_nvlinks(r, t, nvs, gorder);
}

/* ---- entry ----------------------------------------------------------------- */

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;
static void xml_init(void) { xmlInitParser(); }

/* Topology name: the file's base name without ".xml", in name characters. */
static void topo_name_from(const char *what, char *out, size_t outlen) {
  const char *base = strrchr(what, '/');
  base = base ? base + 1 : what;
  size_t n = strlen(base);
  if (n > 4 && strcmp(base + n - 4, ".xml") == 0) n -= 4;
  size_t o = 0;
  for (size_t i = 0; i < n && o + 1 < outlen; i++) {
    char c = base[i];
    out[o++] = isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-' ? c : '-';
  }
  out[o] = '\0';
  if (o == 0 || !isalnum((unsigned char)out[0])) snprintf(out, outlen, "nccl-topo");
}

/* The first "<!DOCTYPE" or "<!ENTITY": NCCL's files have none, and refusing
 * them before parsing leaves no entity to expand. Returns its line or 0. */
static long find_dtd(const char *buf, size_t len) {
  long line = 1;
  for (size_t i = 0; i < len; i++) {
    if (buf[i] == '\n') line++;
    if (buf[i] == '<' && i + 2 < len && buf[i + 1] == '!' &&
        ((len - i >= 9 && memcmp(buf + i, "<!DOCTYPE", 9) == 0) ||
         (len - i >= 8 && memcmp(buf + i, "<!ENTITY", 8) == 0)))
      return line;
  }
  return 0;
}

/* One line from libxml2's message: no newline, printable ASCII. */
static void clean_message(const char *in, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; in && in[i] && o + 1 < outlen; i++) {
    unsigned char c = (unsigned char)in[i];
    if (c == '\n' || c == '\r') continue;
    out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  out[o] = '\0';
  if (o == 0) snprintf(out, outlen, "not well-formed XML");
}

struct gcoll_topo *gcoll_topo_read_nccl_xml_mem(const char *buf, size_t len, const char *what,
                                                char *err, size_t errlen) {
  struct gcoll_topo *t = NULL;
  xmlParserCtxtPtr ctxt = NULL;
  xmlDocPtr doc = NULL;
  struct xr *r = NULL;
  char tname[64];
  if (what == NULL) what = "<input>";
  if (buf == NULL) {
    snprintf(err, errlen, "%s:0: no input", what);
    return NULL;
  }
  if (len > XML_MAX_BYTES) {
    snprintf(err, errlen, "%s:0: larger than %u bytes", what, XML_MAX_BYTES);
    return NULL;
  }
  long dtd = find_dtd(buf, len);
  if (dtd > 0) {
    snprintf(err, errlen, "%s:%ld: DOCTYPE and ENTITY declarations are not accepted", what, dtd);
    return NULL;
  }
  r = calloc(1, sizeof(*r));
  if (r == NULL) {
    snprintf(err, errlen, "%s:0: out of memory", what);
    return NULL;
  }
  r->what = what;
  r->err = err;
  r->errlen = errlen;
  pthread_once(&xml_once, xml_init);
  ctxt = xmlNewParserCtxt();
  if (ctxt == NULL) {
    fail(r, 0, "out of memory");
    goto out;
  }
  doc = xmlCtxtReadMemory(ctxt, buf, (int)len, what, NULL,
                          XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
                              XML_PARSE_BIG_LINES | XML_PARSE_NOCDATA);
  if (doc == NULL) {
    const xmlError *e = xmlCtxtGetLastError(ctxt);
    char msg[300];
    clean_message(e ? e->message : NULL, msg, sizeof(msg));
    fail(r, e && e->line > 0 ? e->line : 1, "XML: %s", msg);
    goto out;
  }
  xmlNode *root = xmlDocGetRootElement(doc);
  if (root == NULL) {
    fail(r, 1, "no root element");
    goto out;
  }
  if (!is_elem(root, "system")) {
    char b[48];
    fail(r, xmlGetLineNo(root), "root element is <%s>, expected <system version=\"1\"> (an NCCL "
         "topology file)", shown((const char *)root->name, b, sizeof(b)));
    goto out;
  }
  long version;
  if (attr_int(r, root, "version", 0, 1L << 30, -1, &version)) goto out;
  if (version != 1) {
    fail(r, xmlGetLineNo(root), "<system version=\"%ld\">: this reader knows version 1",
         version);
    goto out;
  }
  for (xmlNode *c = root->children; c; c = c->next)
    if (is_elem(c, "cpu") && read_cpu(r, c)) goto out;
  topo_name_from(what, tname, sizeof(tname));
  t = gcoll_topo_new(tname);
  if (t == NULL) {
    fail(r, 0, "out of memory");
    goto out;
  }
  char why[512];
  if (build(r, t)) goto fail_topo;
  if (gcoll_topo_compute_paths(t, why, sizeof(why))) {
    fail(r, xmlGetLineNo(root), "%s", why);
    goto fail_topo;
  }
  t->incomplete = gcoll_topo_missing(t, NULL, 0);
  goto out;
fail_topo:
  gcoll_topo_free(t);
  t = NULL;
out:
  if (doc) xmlFreeDoc(doc);
  if (ctxt) xmlFreeParserCtxt(ctxt);
  free(r);
  return t;
}

struct gcoll_topo *gcoll_topo_read_nccl_xml_file(const char *path, char *err, size_t errlen) {
  char *buf;
  size_t len;
  if (gcoll_read_file(path, XML_MAX_BYTES, &buf, &len, err, errlen)) return NULL;
  struct gcoll_topo *t = gcoll_topo_read_nccl_xml_mem(buf, len, path, err, errlen);
  free(buf);
  return t;
}
