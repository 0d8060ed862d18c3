/* Merging a topology file that only places devices (an NCCL override such
 * as Azure's or AWS's) with what detection finds, as NCCL merges
 * NCCL_TOPO_FILE with its own detection: the file wins where both speak,
 * detection fills in what the file lacks. Rules: docs/topology-format.md,
 * "Overrides: merging with detection". Pure computation, no I/O. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/topo.h"

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int gcoll_busid_normalize(const char *in, char *out, size_t outlen) {
  if (outlen > 0) out[0] = '\0';
  if (in == NULL) return -1;
  /* DOMAIN:BB:DD.F, the domain 1 to 8 hex digits (NVML writes 8, CUDA and
   * sysfs 4), any case. */
  unsigned long dom = 0;
  size_t nd = 0;
  for (; hexval(in[nd]) >= 0; nd++) {
    if (nd == 8) return -1;
    dom = dom * 16 + (unsigned long)hexval(in[nd]);
  }
  const char *p = in + nd;
  if (nd == 0 || p[0] != ':' || hexval(p[1]) < 0 || hexval(p[2]) < 0 || p[3] != ':' ||
      hexval(p[4]) < 0 || hexval(p[5]) < 0 || p[6] != '.' || hexval(p[7]) < 0 || p[8] != '\0')
    return -1;
  unsigned bus = (unsigned)(hexval(p[1]) * 16 + hexval(p[2]));
  unsigned dev = (unsigned)(hexval(p[4]) * 16 + hexval(p[5]));
  unsigned fn = (unsigned)hexval(p[7]);
  /* No range check on the device: NVML's invisible NVSwitch is
   * fffffff:ff:ff.0. */
  if (fn > 7) return -1;
  /* The domain keeps at least 4 digits, as the topology files write it. */
  int w = snprintf(out, outlen, "%04lx:%02x:%02x.%x", dom, bus, dev, fn);
  if (w < 0 || (size_t)w >= outlen) {
    if (outlen > 0) out[0] = '\0';
    return -1;
  }
  return 0;
}

/* Same PCI function, whatever the spelling; never equal when either is not
 * an address. */
static int same_busid(const char *a, const char *b) {
  char na[GCOLL_BUSID_MAX + 8], nb[GCOLL_BUSID_MAX + 8];
  return gcoll_busid_normalize(a, na, sizeof(na)) == 0 &&
         gcoll_busid_normalize(b, nb, sizeof(nb)) == 0 && strcmp(na, nb) == 0;
}

/* The socket a device hangs below (following parents), or -1. */
static int root_cpu(const struct gcoll_topo *t, int d) {
  for (int hops = 0; d >= 0 && hops <= GCOLL_TOPO_MAX_NODES; hops++) {
    if (t->dev[d].type == GCOLL_DEV_CPU) return d;
    d = t->dev[d].parent;
  }
  return -1;
}

static double parent_link_bw(const struct gcoll_topo *t, int d) {
  const struct gcoll_topo_dev *x = &t->dev[d];
  for (int l = 0; l < x->nlinks; l++)
    if (x->links[l].peer == x->parent && x->links[l].type == GCOLL_LINK_PCI) return x->links[l].bw;
  return 0;
}

static int has_nvlink(const struct gcoll_topo *t) {
  for (int i = 0; i < t->ndev; i++)
    for (int l = 0; l < t->dev[i].nlinks; l++)
      if (t->dev[i].links[l].type == GCOLL_LINK_NVL) return 1;
  return 0;
}

/* Appends to a one-line summary, comma separated. */
static void say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= len) return;
  if (used > 0 && buf[used - 1] != ' ') {
    snprintf(buf + used, len - used, ", ");
    used = strlen(buf);
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}

/* Matches the file's GPUs to the base's: gmap[i] is the base GPU (index in
 * base->gpu) of the file's GPU i. */
static int match_gpus(const struct gcoll_topo *f, const struct gcoll_topo *b,
                      enum gcoll_topo_match match, int *gmap, int *by_order, char *err,
                      size_t errlen) {
  int taken[GCOLL_TOPO_MAX_GPUS] = {0}, nmatched = 0;
  *by_order = 0;
  for (int i = 0; i < f->ngpu; i++) {
    gmap[i] = -1;
    for (int j = 0; j < b->ngpu; j++)
      if (!taken[j] && same_busid(f->dev[f->gpu[i]].busid, b->dev[b->gpu[j]].busid)) {
        gmap[i] = j;
        taken[j] = 1;
        nmatched++;
        break;
      }
  }
  /* A reference base (dgx-a100) describes a model of node, not this node:
   * its bus ids are another machine's. With no bus id in common and as
   * many GPUs, the i-th GPU of each is the same GPU (both are in bus-id
   * order, NVML's). */
  if (match == GCOLL_MATCH_BUSID_OR_ORDER && nmatched == 0 && f->ngpu == b->ngpu) {
    for (int i = 0; i < f->ngpu; i++) gmap[i] = i;
    *by_order = f->ngpu > 0;
    return 0;
  }
  for (int i = 0; i < f->ngpu; i++)
    if (gmap[i] < 0) {
      const struct gcoll_topo_dev *g = &f->dev[f->gpu[i]];
      snprintf(err, errlen, "the file's %s (%s) is not among the %d GPU%s found (%s)", g->name,
               g->busid[0] ? g->busid : "no bus id", b->ngpu, b->ngpu == 1 ? "" : "s",
               b->ngpu > 0 ? "no GPU at that bus id" : "no GPU at all");
      return -1;
    }
  for (int j = 0; j < b->ngpu; j++)
    if (!taken[j]) {
      const struct gcoll_topo_dev *g = &b->dev[b->gpu[j]];
      snprintf(err, errlen, "GPU %s (%s) was found but the file does not place it (the file "
               "must place every GPU of the node)", g->busid[0] ? g->busid : "no bus id",
               g->name);
      return -1;
    }
  return 0;
}

/* Base CPU for each of the file's sockets: the same NUMA id when both
 * know it, else the same index; -1 when none. */
static void match_cpus(const struct gcoll_topo *f, const struct gcoll_topo *b, int *cmap) {
  for (int i = 0; i < f->ncpu; i++) {
    const struct gcoll_topo_dev *c = &f->dev[f->cpu[i]];
    cmap[i] = i < b->ncpu ? i : -1;
    if (c->u.cpu.numa < 0) continue;
    for (int j = 0; j < b->ncpu; j++)
      if (b->dev[b->cpu[j]].u.cpu.numa == c->u.cpu.numa) {
        cmap[i] = j;
        break;
      }
  }
}

struct gcoll_topo *gcoll_topo_merge(const struct gcoll_topo *file, const struct gcoll_topo *base,
                                    enum gcoll_topo_match match, char *summary, size_t sumlen,
                                    char *err, size_t errlen) {
  char took_file[256] = "", took_base[512] = "";
  int gmap[GCOLL_TOPO_MAX_GPUS], by_order = 0;
  if (summary != NULL && sumlen > 0) summary[0] = '\0';
  if (match_gpus(file, base, match, gmap, &by_order, err, errlen) != 0) return NULL;

  struct gcoll_topo *out = gcoll_topo_clone(file);
  if (out == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  free(out->paths);
  out->paths = NULL;
  out->incomplete = 0;
  /* NCCL's XML says nothing of the NVLink domain: the node's detection does. */
  if (!out->nvl_domain.set) out->nvl_domain = base->nvl_domain;

  /* Sockets: the file's, with detection's core count (and NUMA id) where
   * the file has none. */
  int cmap[GCOLL_TOPO_MAX_NODES], ncores = 0;
  match_cpus(file, base, cmap);
  for (int i = 0; i < out->ncpu; i++) {
    struct gcoll_topo_dev *c = &out->dev[out->cpu[i]];
    if (cmap[i] < 0) continue;
    const struct gcoll_topo_dev *bc = &base->dev[base->cpu[cmap[i]]];
    if (c->u.cpu.cores <= 0 && bc->u.cpu.cores > 0) {
      c->u.cpu.cores = bc->u.cpu.cores;
      ncores++;
    }
    if (c->u.cpu.numa < 0 && bc->u.cpu.numa >= 0) c->u.cpu.numa = bc->u.cpu.numa;
  }

  /* GPUs: the file's placement, detection's model. */
  int ncc = 0;
  for (int i = 0; i < out->ngpu; i++) {
    struct gcoll_topo_dev *g = &out->dev[out->gpu[i]];
    const struct gcoll_topo_dev *bg = &base->dev[base->gpu[gmap[i]]];
    int filled = 0;
    if (g->u.gpu.cc <= 0 && bg->u.gpu.cc > 0) g->u.gpu.cc = bg->u.gpu.cc, filled = 1;
    if (g->u.gpu.sms <= 0 && bg->u.gpu.sms > 0) g->u.gpu.sms = bg->u.gpu.sms, filled = 1;
    ncc += filled;
  }

  /* NVLinks: the file's when it lists any, else all of detection's (with
   * its NVSwitch fabric). */
  int nnvl = 0;
  const char *fabric = NULL;
  if (has_nvlink(file)) {
    say(took_file, sizeof(took_file), "NVLinks");
    for (int i = 0; i < out->nnvs && base->nnvs > 0; i++)
      if (!out->dev[out->nvs[i]].u.nvs.multicast && base->dev[base->nvs[0]].u.nvs.multicast) {
        out->dev[out->nvs[i]].u.nvs.multicast = 1;
        say(took_base, sizeof(took_base), "NVLS multicast");
      }
  } else if (has_nvlink(base)) {
    int nvsmap[GCOLL_TOPO_MAX_NODES];
    for (int i = 0; i < base->ndev; i++) nvsmap[i] = -1;
    for (int k = 0; k < base->nnvs; k++) {
      const struct gcoll_topo_dev *s = &base->dev[base->nvs[k]];
      int idx = gcoll_topo_add_dev(out, GCOLL_DEV_NVS, s->name, -1, err, errlen);
      if (idx < 0) goto fail;
      out->dev[idx].u.nvs.multicast = s->u.nvs.multicast;
      nvsmap[base->nvs[k]] = idx;
      fabric = s->name;
    }
    /* Base device -> merged device, for NVLink ends (GPUs and NVSwitches). */
    int inv[GCOLL_TOPO_MAX_NODES];
    for (int i = 0; i < base->ndev; i++) inv[i] = nvsmap[i];
    for (int i = 0; i < out->ngpu; i++) inv[base->gpu[gmap[i]]] = out->gpu[i];
    for (int a = 0; a < base->ndev; a++)
      for (int l = 0; l < base->dev[a].nlinks; l++) {
        const struct gcoll_topo_link *k = &base->dev[a].links[l];
        if (k->type != GCOLL_LINK_NVL || k->peer < a) continue; /* each link once */
        if (inv[a] < 0 || inv[k->peer] < 0) continue;
        if (gcoll_topo_add_link(out, inv[a], inv[k->peer], GCOLL_LINK_NVL, k->count, k->bw, err,
                                errlen) != 0)
          goto fail;
        nnvl++;
      }
  }

  /* NICs: matched by bus id and port (in GPU order mode, by order when no
   * bus id is shared). The file's name and speed win; a NIC the file gives
   * no speed (an override's NIC without <net>) takes detection's name and
   * speed. Detected NICs the file does not place are added below their
   * socket. */
  int nmap[GCOLL_TOPO_MAX_NODES], btaken[GCOLL_TOPO_MAX_NODES] = {0}, nnic_match = 0;
  for (int i = 0; i < file->nnic; i++) {
    const struct gcoll_topo_dev *n = &file->dev[file->nic[i]];
    nmap[i] = -1;
    for (int j = 0; j < base->nnic && n->busid[0]; j++) {
      const struct gcoll_topo_dev *bn = &base->dev[base->nic[j]];
      if (!btaken[j] && bn->u.nic.port == n->u.nic.port && same_busid(n->busid, bn->busid)) {
        nmap[i] = j;
        btaken[j] = 1;
        nnic_match++;
        break;
      }
    }
  }
  int nic_order = 0;
  if (by_order && nnic_match == 0) {
    for (int i = 0; i < file->nnic && i < base->nnic; i++) {
      nmap[i] = i;
      btaken[i] = 1;
    }
    nic_order = file->nnic > 0 && base->nnic > 0;
  }
  int nnames = 0, nspeeds = 0;
  for (int i = 0; i < out->nnic; i++) {
    if (nmap[i] < 0) continue;
    struct gcoll_topo_dev *n = &out->dev[out->nic[i]];
    const struct gcoll_topo_dev *bn = &base->dev[base->nic[nmap[i]]];
    /* A rail is where the port is cabled: the base's, unless the file says. */
    if (n->u.nic.rail < 0) n->u.nic.rail = bn->u.nic.rail;
    /* Only detection knows whether a port is up: an override file cannot say. */
    if (!n->u.nic.down && !(n->u.nic.active_gbps > 0)) {
      n->u.nic.down = bn->u.nic.down;
      n->u.nic.active_gbps = bn->u.nic.active_gbps;
    }
    if (n->u.nic.gbps > 0 || !(bn->u.nic.gbps > 0)) continue;
    n->u.nic.gbps = bn->u.nic.gbps;
    nspeeds++;
    int other = gcoll_topo_find(out, bn->name);
    if (strcmp(n->name, bn->name) != 0 && other < 0) {
      snprintf(n->name, sizeof(n->name), "%s", bn->name);
      nnames++;
    }
  }
  char added[128] = "";
  int nadded = 0;
  for (int j = 0; j < base->nnic; j++) {
    if (btaken[j]) continue;
    const struct gcoll_topo_dev *bn = &base->dev[base->nic[j]];
    int bcpu = root_cpu(base, base->nic[j]), cpu = -1;
    for (int i = 0; i < out->ncpu && bcpu >= 0; i++)
      if (cmap[i] >= 0 && base->cpu[cmap[i]] == bcpu) cpu = out->cpu[i];
    if (cpu < 0 && out->ncpu > 0) cpu = out->cpu[0];
    if (cpu < 0 || gcoll_topo_find(out, bn->name) >= 0) continue;
    int idx = gcoll_topo_add_dev(out, GCOLL_DEV_NIC, bn->name, cpu, err, errlen);
    if (idx < 0) goto fail;
    snprintf(out->dev[idx].busid, sizeof(out->dev[idx].busid), "%s", bn->busid);
    out->dev[idx].u.nic = bn->u.nic;
    double bw = parent_link_bw(base, base->nic[j]);
    if (gcoll_topo_add_link(out, cpu, idx, GCOLL_LINK_PCI, 1, bw > 0 ? bw : 12.0, err, errlen))
      goto fail;
    size_t used = strlen(added);
    if (used + strlen(bn->name) + 3 < sizeof(added))
      snprintf(added + used, sizeof(added) - used, "%s%s", nadded ? " " : "", bn->name);
    nadded++;
  }

  /* The one-line account of what came from where. */
  if (summary != NULL && sumlen > 0) {
    say(took_file, sizeof(took_file), "placement of %d GPU%s and %d NIC%s", file->ngpu,
        file->ngpu == 1 ? "" : "s", file->nnic, file->nnic == 1 ? "" : "s");
    if (ncc) say(took_base, sizeof(took_base), "GPU model (cc/sms) of %d", ncc);
    if (nnvl)
      say(took_base, sizeof(took_base), "%d NVLink%s%s%s", nnvl, nnvl == 1 ? "" : "s",
          fabric ? " with NVSwitch " : "", fabric ? fabric : "");
    if (nspeeds) say(took_base, sizeof(took_base), "speed of %d NIC%s", nspeeds,
                     nspeeds == 1 ? "" : "s");
    if (nnames) say(took_base, sizeof(took_base), "names of %d NIC%s", nnames,
                    nnames == 1 ? "" : "s");
    if (ncores) say(took_base, sizeof(took_base), "cores of %d socket%s", ncores,
                    ncores == 1 ? "" : "s");
    if (nadded) say(took_base, sizeof(took_base), "%d NIC%s the file does not place (%s)",
                    nadded, nadded == 1 ? "" : "s", added);
    snprintf(summary, sumlen, "GPUs matched %s%s; from the file: %s; from %s: %s",
             by_order ? "in order (no bus id in common)" : "by bus id",
             nic_order ? ", NICs in order" : "", took_file,
             match == GCOLL_MATCH_BUSID ? "detection" : "the base",
             took_base[0] ? took_base : "nothing");
  }

  if (gcoll_topo_compute_paths(out, err, errlen) != 0) goto fail;
  out->incomplete = gcoll_topo_missing(out, NULL, 0);
  return out;
fail:
  gcoll_topo_free(out);
  return NULL;
}
