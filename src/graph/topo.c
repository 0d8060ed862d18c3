/* Topology model: building, lookup, names and the content hash. */
#include "topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gcoll_topo *gcoll_topo_new(const char *name) {
  struct gcoll_topo *t = calloc(1, sizeof(*t));
  if (t == NULL) return NULL;
  snprintf(t->name, sizeof(t->name), "%s", name ? name : "");
  return t;
}

void gcoll_topo_free(struct gcoll_topo *topo) {
  if (topo == NULL) return;
  for (int i = 0; topo->dev != NULL && i < topo->ndev; i++) free(topo->dev[i].links);
  free(topo->dev);
  free(topo->cpu);
  free(topo->pci);
  free(topo->nic);
  free(topo->paths);
  free(topo);
}

static void *dup_array(const void *src, size_t count, size_t size) {
  if (count == 0 || src == NULL) return NULL;
  void *p = malloc(count * size);
  if (p != NULL) memcpy(p, src, count * size);
  return p;
}

struct gcoll_topo *gcoll_topo_clone(const struct gcoll_topo *t) {
  struct gcoll_topo *c = malloc(sizeof(*c));
  if (c == NULL) return NULL;
  *c = *t;
  c->dev = NULL;
  c->cpu = c->pci = c->nic = NULL;
  c->paths = NULL;
  c->ndev = 0;
  size_t cap = (size_t)t->dev_cap;
  if (cap > 0) {
    c->dev = dup_array(t->dev, cap, sizeof(*t->dev));
    c->cpu = dup_array(t->cpu, cap, sizeof(int));
    c->pci = dup_array(t->pci, cap, sizeof(int));
    c->nic = dup_array(t->nic, cap, sizeof(int));
    if (!c->dev || !c->cpu || !c->pci || !c->nic) goto fail;
  }
  for (int i = 0; i < t->ndev; i++) {
    c->dev[i].links = NULL;
    c->dev[i].links_cap = 0;
    c->ndev = i + 1;
    if (t->dev[i].nlinks > 0) {
      c->dev[i].links = dup_array(t->dev[i].links, (size_t)t->dev[i].nlinks,
                                  sizeof(*t->dev[i].links));
      if (c->dev[i].links == NULL) goto fail;
      c->dev[i].links_cap = t->dev[i].nlinks;
    }
  }
  c->ndev = t->ndev;
  if (t->paths != NULL) {
    c->paths = dup_array(t->paths, (size_t)t->ndev * (size_t)t->ndev, sizeof(*t->paths));
    if (c->paths == NULL) goto fail;
  }
  return c;
fail:
  gcoll_topo_free(c);
  return NULL;
}

/* Makes room for one more device: the device array and the per-type index
 * lists grow together, doubling. */
static int reserve_dev(struct gcoll_topo *t, char *err, size_t errlen) {
  if (t->ndev < t->dev_cap) return 0;
  int cap = t->dev_cap ? 2 * t->dev_cap : 16;
  if (cap > GCOLL_TOPO_MAX_NODES) cap = GCOLL_TOPO_MAX_NODES;
  struct gcoll_topo_dev *d = realloc(t->dev, (size_t)cap * sizeof(*d));
  if (d != NULL) t->dev = d;
  int *lists[3] = {t->cpu, t->pci, t->nic};
  int ok = d != NULL;
  for (int k = 0; k < 3 && ok; k++) {
    int *l = realloc(lists[k], (size_t)cap * sizeof(int));
    if (l == NULL) ok = 0;
    else lists[k] = l;
  }
  t->cpu = lists[0];
  t->pci = lists[1];
  t->nic = lists[2];
  if (!ok) {
    snprintf(err, errlen, "out of memory for %d devices", cap);
    return -1;
  }
  t->dev_cap = cap;
  return 0;
}

int gcoll_topo_find(const struct gcoll_topo *topo, const char *name) {
  for (int i = 0; i < topo->ndev; i++)
    if (strcmp(topo->dev[i].name, name) == 0) return i;
  return -1;
}

int gcoll_topo_nic_rail(const struct gcoll_topo *topo, int k) {
  int r = topo->dev[topo->nic[k]].u.nic.rail;
  return r >= 0 ? r : k;
}

int gcoll_topo_nic_usable(const struct gcoll_topo *topo, int k, const char **why, char *detail,
                          size_t detaillen) {
  const struct gcoll_topo_dev *d = &topo->dev[topo->nic[k]];
  const char *w = NULL;
  char buf[64] = "";
  if (d->u.nic.down) {
    w = "down";
    snprintf(buf, sizeof(buf), "port down");
  } else if (d->u.nic.active_gbps > 0 && d->u.nic.gbps > 0 &&
             d->u.nic.active_gbps < d->u.nic.gbps * (1 - 1e-9)) {
    w = "slow";
    snprintf(buf, sizeof(buf), "%g of %g Gb/s", d->u.nic.active_gbps, d->u.nic.gbps);
  }
  if (why != NULL) *why = w;
  if (detail != NULL && detaillen > 0) snprintf(detail, detaillen, "%s", buf);
  return w == NULL;
}

/* Appends `idx` to the per-type index list, respecting its capacity. */
static int index_list_add(struct gcoll_topo *t, enum gcoll_dev_type type, int idx,
                          char *err, size_t errlen) {
  int *list, *count, cap;
  switch (type) {
    case GCOLL_DEV_CPU: list = t->cpu; count = &t->ncpu; cap = t->dev_cap; break;
    case GCOLL_DEV_PCI: list = t->pci; count = &t->npci; cap = t->dev_cap; break;
    case GCOLL_DEV_GPU: list = t->gpu; count = &t->ngpu; cap = GCOLL_TOPO_MAX_GPUS; break;
    case GCOLL_DEV_NIC: list = t->nic; count = &t->nnic; cap = t->dev_cap; break;
    case GCOLL_DEV_NVS: list = t->nvs; count = &t->nnvs; cap = GCOLL_TOPO_MAX_NVS; break;
    default:
      snprintf(err, errlen, "unknown device type %d", (int)type);
      return -1;
  }
  if (*count >= cap) {
    snprintf(err, errlen, "more than %d %s devices", cap, gcoll_dev_type_name(type));
    return -1;
  }
  list[*count] = idx;
  return (*count)++;
}

int gcoll_topo_add_dev(struct gcoll_topo *topo, enum gcoll_dev_type type, const char *name,
                       int parent, char *err, size_t errlen) {
  if (topo->ndev >= GCOLL_TOPO_MAX_NODES) {
    snprintf(err, errlen, "more than %d devices in one node", GCOLL_TOPO_MAX_NODES);
    return -1;
  }
  if (name == NULL || name[0] == '\0' || strlen(name) >= GCOLL_NAME_MAX) {
    snprintf(err, errlen, "device name must be 1 to %d characters", GCOLL_NAME_MAX - 1);
    return -1;
  }
  if (gcoll_topo_find(topo, name) >= 0) {
    snprintf(err, errlen, "device '%s' defined twice", name);
    return -1;
  }
  if (parent < -1 || parent >= topo->ndev) {
    snprintf(err, errlen, "device '%s': parent index %d does not exist", name, parent);
    return -1;
  }
  if (reserve_dev(topo, err, errlen)) return -1;
  int idx = topo->ndev;
  int sub = index_list_add(topo, type, idx, err, errlen);
  if (sub < 0) return -1;
  struct gcoll_topo_dev *d = &topo->dev[idx];
  memset(d, 0, sizeof(*d));
  d->type = type;
  d->index = sub;
  d->parent = parent;
  if (type == GCOLL_DEV_NIC) d->u.nic.rail = -1;
  snprintf(d->name, sizeof(d->name), "%s", name);
  topo->ndev++;
  return idx;
}

static int add_half_link(struct gcoll_topo *t, int from, int to, enum gcoll_link_type type,
                         int count, double bw, char *err, size_t errlen) {
  struct gcoll_topo_dev *d = &t->dev[from];
  for (int i = 0; i < d->nlinks; i++)
    if (d->links[i].peer == to && d->links[i].type == type) {
      /* Several lanes listed separately aggregate into one link. */
      d->links[i].count += count;
      d->links[i].bw += bw;
      return 0;
    }
  (void)err;
  (void)errlen;
  d->links[d->nlinks].type = type;
  d->links[d->nlinks].peer = to;
  d->links[d->nlinks].count = count;
  d->links[d->nlinks].bw = bw;
  d->nlinks++;
  return 0;
}

/* Whether `from` can take a link to `to` (an existing link of that type
 * only aggregates; a new one needs room, made here). A device links to
 * each other device at most once per type, so that bounds its links. */
static int has_room(struct gcoll_topo *t, int from, int to, enum gcoll_link_type type,
                    char *err, size_t errlen) {
  const struct gcoll_topo_dev *d = &t->dev[from];
  for (int i = 0; i < d->nlinks; i++)
    if (d->links[i].peer == to && d->links[i].type == type) return 1;
  if (d->nlinks >= GCOLL_LINK_NTYPES * GCOLL_TOPO_MAX_NODES) {
    snprintf(err, errlen, "device '%s' has more than %d links", d->name,
             GCOLL_LINK_NTYPES * GCOLL_TOPO_MAX_NODES);
    return 0;
  }
  if (d->nlinks < d->links_cap) return 1;
  /* Grown here, before either end is written, so an allocation failure
   * cannot leave a link recorded at one end only. */
  int cap = d->links_cap ? 2 * d->links_cap : 4;
  struct gcoll_topo_link *l = realloc(d->links, (size_t)cap * sizeof(*l));
  if (l == NULL) {
    snprintf(err, errlen, "device '%s': out of memory for %d links", d->name, cap);
    return 0;
  }
  t->dev[from].links = l;
  t->dev[from].links_cap = cap;
  return 1;
}

int gcoll_topo_add_link(struct gcoll_topo *topo, int a, int b, enum gcoll_link_type type,
                        int count, double bw, char *err, size_t errlen) {
  if (a < 0 || b < 0 || a >= topo->ndev || b >= topo->ndev || a == b) {
    snprintf(err, errlen, "link between invalid devices %d and %d", a, b);
    return -1;
  }
  if (!(bw > 0) || bw > 1e6 || count < 1 || count > 1024) {
    snprintf(err, errlen, "link %s-%s: bandwidth must be in (0, 1e6] GB/s and count in [1, 1024]",
             topo->dev[a].name, topo->dev[b].name);
    return -1;
  }
  /* Both ends are checked before either is touched: a link recorded at one
   * end only would make paths asymmetric. */
  if (!has_room(topo, a, b, type, err, errlen) || !has_room(topo, b, a, type, err, errlen))
    return -1;
  if (add_half_link(topo, a, b, type, count, bw, err, errlen)) return -1;
  return add_half_link(topo, b, a, type, count, bw, err, errlen);
}

const struct gcoll_topo_path *gcoll_topo_path(const struct gcoll_topo *topo, int from, int to) {
  if (topo->paths == NULL || from < 0 || to < 0 || from >= topo->ndev || to >= topo->ndev)
    return NULL;
  return &topo->paths[(size_t)from * (size_t)topo->ndev + (size_t)to];
}

/* FNV-1a over the canonical content: device kinds, attributes, parents and
 * links in index order. The name is left out on purpose: two nodes built
 * alike are one class whatever their files were called. */
static uint32_t fnv(uint32_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) {
    h ^= c[i];
    h *= 16777619u;
  }
  return h;
}

static uint32_t fnv_int(uint32_t h, long long v) { return fnv(h, &v, sizeof(v)); }

/* Bandwidths are hashed at 1/1000 GB/s so the text round trip is stable. */
static uint32_t fnv_bw(uint32_t h, double bw) { return fnv_int(h, (long long)(bw * 1000.0 + 0.5)); }

uint32_t gcoll_topo_hash(const struct gcoll_topo *topo) {
  uint32_t h = 2166136261u;
  h = fnv_int(h, topo->ndev);
  for (int i = 0; i < topo->ndev; i++) {
    const struct gcoll_topo_dev *d = &topo->dev[i];
    h = fnv_int(h, d->type);
    h = fnv(h, d->name, strlen(d->name));
    h = fnv(h, d->busid, strlen(d->busid));
    h = fnv_int(h, d->parent);
    switch (d->type) {
      case GCOLL_DEV_CPU: h = fnv_int(h, d->u.cpu.cores); h = fnv_int(h, d->u.cpu.numa); break;
      case GCOLL_DEV_GPU: h = fnv_int(h, d->u.gpu.sms); h = fnv_int(h, d->u.gpu.cc); break;
      case GCOLL_DEV_NIC:
        h = fnv_int(h, d->u.nic.port);
        h = fnv_bw(h, d->u.nic.gbps);
        /* Only a rail the file names: topologies written before rails
         * existed keep their hashes, and so do the plans made from them. */
        if (d->u.nic.rail >= 0) h = fnv_int(h, 0x7261696cLL + d->u.nic.rail);
        /* Likewise the health of a port: a healthy node keeps its hash, a
         * degraded one gets a class of its own. */
        if (d->u.nic.down) h = fnv_int(h, 0x646f776eLL);
        if (d->u.nic.active_gbps > 0) h = fnv_bw(h, d->u.nic.active_gbps + 1e6);
        break;
      case GCOLL_DEV_NVS: h = fnv_int(h, d->u.nvs.multicast); break;
      default: break;
    }
    h = fnv_int(h, d->nlinks);
    for (int l = 0; l < d->nlinks; l++) {
      h = fnv_int(h, d->links[l].type);
      h = fnv_int(h, d->links[l].peer);
      h = fnv_int(h, d->links[l].count);
      h = fnv_bw(h, d->links[l].bw);
    }
  }
  return h;
}

const char *gcoll_path_type_name(enum gcoll_path_type t) {
  static const char *names[GCOLL_PATH_NTYPES] = {"LOC", "NVL", "NVB", "PIX", "PXB",
                                                 "PHB", "SYS", "NET", "DIS"};
  return (unsigned)t < GCOLL_PATH_NTYPES ? names[t] : "?";
}

const char *gcoll_dev_type_name(enum gcoll_dev_type t) {
  static const char *names[GCOLL_DEV_NTYPES] = {"cpu", "pci", "gpu", "nic", "nvswitch"};
  return (unsigned)t < GCOLL_DEV_NTYPES ? names[t] : "?";
}

const char *gcoll_link_type_name(enum gcoll_link_type t) {
  static const char *names[GCOLL_LINK_NTYPES] = {"nvlink", "pci", "sys"};
  return (unsigned)t < GCOLL_LINK_NTYPES ? names[t] : "?";
}

int gcoll_topo_missing(const struct gcoll_topo *topo, char *why, size_t whylen) {
  char tmp[8];
  if (why == NULL || whylen == 0) {
    why = tmp;
    whylen = sizeof(tmp);
  }
  why[0] = '\0';
  for (int i = 0; i < topo->ndev; i++) {
    const struct gcoll_topo_dev *d = &topo->dev[i];
    const char *bus = d->busid[0] ? d->busid : "no bus id";
    switch (d->type) {
      case GCOLL_DEV_CPU:
        if (d->u.cpu.cores > 0) continue;
        snprintf(why, whylen, "%s has no core count (NCCL: <cpu affinity>)", d->name);
        return 1;
      case GCOLL_DEV_GPU:
        if (d->u.gpu.cc > 0) continue;
        snprintf(why, whylen,
                 "%s (%s) has no compute capability and no NVLink list (NCCL: <gpu sm> and "
                 "<nvlink>)", d->name, bus);
        return 1;
      case GCOLL_DEV_NIC:
        if (d->u.nic.gbps > 0) continue;
        snprintf(why, whylen, "NIC %s (%s) has no device name or speed (NCCL: <nic><net name "
                 "speed>)", d->name, bus);
        return 1;
      default: continue;
    }
  }
  return 0;
}
