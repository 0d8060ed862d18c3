/* Topology YAML reader. The format is described in docs/topology-format.md.
 * Every value is range-checked and every reference resolved, and every
 * failure names FILE:LINE and the field, because these files are written by
 * hand, generated on other nodes, or hostile. */
#include "topo.h"
#include "yaml_doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPO_FILE_MAX_BYTES (4u << 20)
#define FIELD_MAX 96

struct reader {
  const struct ydoc *doc;
  struct gcoll_topo *t;
  int dev_line[GCOLL_TOPO_MAX_NODES]; /* where each device was defined */
  char *err;
  size_t errlen;
};

/* "gpus[3]" + "sms" -> "gpus[3].sms": errors name the full path so users
 * find the entry in a long file even when line numbers shift. */
static const char *field_path(char *buf, const char *ctx, const char *key) {
  if (ctx == NULL || ctx[0] == '\0') snprintf(buf, FIELD_MAX, "%s", key);
  else snprintf(buf, FIELD_MAX, "%s.%s", ctx, key);
  return buf;
}

static int check_keys(struct reader *r, const struct ydoc_node *map, const char *ctx,
                      const char *const *allowed) {
  for (size_t i = 0; i < gcoll_ydoc_count(map); i++) {
    const char *key = gcoll_ydoc_key(map, i);
    int known = 0;
    for (const char *const *a = allowed; *a != NULL && !known; a++) known = strcmp(*a, key) == 0;
    if (!known) {
      char f[FIELD_MAX];
      return gcoll_ydoc_error(r->doc, map->items[2 * i], field_path(f, ctx, key), r->err, r->errlen,
                              "unknown field");
    }
  }
  return 0;
}

/* Like gcoll_ydoc_req, but the message names the full field path. */
static int require(struct reader *r, const struct ydoc_node *map, const char *ctx,
                   const char *key, const struct ydoc_node **out) {
  char f[FIELD_MAX];
  *out = gcoll_ydoc_get(map, key);
  if (*out == NULL)
    return gcoll_ydoc_error(r->doc, map, field_path(f, ctx, key), r->err, r->errlen, "missing");
  return 0;
}

static int get_int(struct reader *r, const struct ydoc_node *map, const char *ctx,
                   const char *key, int64_t min, int64_t max, int *out) {
  char f[FIELD_MAX];
  const struct ydoc_node *n;
  int64_t v;
  field_path(f, ctx, key);
  if (require(r, map, ctx, key, &n)) return -1;
  if (gcoll_ydoc_int(r->doc, n, f, min, max, &v, r->err, r->errlen)) return -1;
  *out = (int)v;
  return 0;
}

static int get_opt_int(struct reader *r, const struct ydoc_node *map, const char *ctx,
                       const char *key, int64_t min, int64_t max, int dflt, int *out) {
  if (gcoll_ydoc_get(map, key) == NULL) {
    *out = dflt;
    return 0;
  }
  return get_int(r, map, ctx, key, min, max, out);
}

static int get_double(struct reader *r, const struct ydoc_node *map, const char *ctx,
                      const char *key, double min, double max, double *out) {
  char f[FIELD_MAX];
  const struct ydoc_node *n;
  field_path(f, ctx, key);
  if (require(r, map, ctx, key, &n)) return -1;
  return gcoll_ydoc_double(r->doc, n, f, min, max, out, r->err, r->errlen);
}

/* Names end up in plan files, log lines and NCCL-style HCA lists, so they
 * are restricted to characters that need no quoting anywhere. */
static int valid_name_char(char c, int first) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
  return !first && (c == '_' || c == '-' || c == '.' || c == ':');
}

static int get_name(struct reader *r, const struct ydoc_node *map, const char *ctx,
                    const char *key, char *out, size_t outlen) {
  char f[FIELD_MAX];
  const struct ydoc_node *n;
  field_path(f, ctx, key);
  if (require(r, map, ctx, key, &n)) return -1;
  if (gcoll_ydoc_str(r->doc, n, f, out, outlen, r->err, r->errlen)) return -1;
  if (out[0] == '\0') return gcoll_ydoc_error(r->doc, n, f, r->err, r->errlen, "must not be empty");
  for (size_t i = 0; out[i]; i++)
    if (!valid_name_char(out[i], i == 0))
      return gcoll_ydoc_error(r->doc, n, f, r->err, r->errlen,
                              "'%.40s' must start with a letter or digit and contain only letters, "
                              "digits, '_', '-', '.', ':'",
                              out);
  return 0;
}

/* PCI addresses as Linux prints them: lower-case hex "dddd:bb:dd.f" with a
 * 4- to 7-digit domain. Lower case only, so one device has one spelling and
 * one hash. */
static int valid_busid(const char *s) {
  size_t len = strlen(s), dom = 0;
  while (dom < len && s[dom] != ':') dom++;
  if (dom < 4 || dom > 7 || len != dom + 8) return 0;
  for (size_t i = 0; i < len; i++) {
    size_t k = i - dom; /* offset after the domain */
    char c = s[i];
    int hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (i < dom ? !hex
        : k == 0 || k == 3 ? c != ':'
        : k == 6          ? c != '.'
        : k == 7          ? !(c >= '0' && c <= '7')
                          : !hex)
      return 0;
  }
  return 1;
}

static int get_busid(struct reader *r, const struct ydoc_node *map, const char *ctx, char *out) {
  char f[FIELD_MAX];
  const struct ydoc_node *n = gcoll_ydoc_get(map, "busid");
  out[0] = '\0';
  if (n == NULL) return 0;
  field_path(f, ctx, "busid");
  if (gcoll_ydoc_str(r->doc, n, f, out, GCOLL_BUSID_MAX, r->err, r->errlen)) return -1;
  if (!valid_busid(out))
    return gcoll_ydoc_error(r->doc, n, f, r->err, r->errlen,
                            "'%.40s' is not a lower-case PCI address like 0000:1b:00.0", out);
  return 0;
}

/* Devices are defined in file order, so a parent must appear above its
 * children; only CPUs and PCI switches can be PCI parents. */
static int get_parent(struct reader *r, const struct ydoc_node *map, const char *ctx,
                      int *parent) {
  char f[FIELD_MAX], name[GCOLL_NAME_MAX];
  const struct ydoc_node *n = gcoll_ydoc_get(map, "parent");
  *parent = -1;
  if (n == NULL) return 0;
  if (get_name(r, map, ctx, "parent", name, sizeof(name))) return -1;
  field_path(f, ctx, "parent");
  int p = gcoll_topo_find(r->t, name);
  if (p < 0)
    return gcoll_ydoc_error(r->doc, n, f, r->err, r->errlen,
                            "device '%s' is not defined above this entry", name);
  enum gcoll_dev_type pt = r->t->dev[p].type;
  if (pt != GCOLL_DEV_CPU && pt != GCOLL_DEV_PCI)
    return gcoll_ydoc_error(r->doc, n, f, r->err, r->errlen,
                            "'%s' is a %s; a parent must be a cpu or a pci switch", name,
                            gcoll_dev_type_name(pt));
  *parent = p;
  return 0;
}

static int add_device(struct reader *r, const struct ydoc_node *entry, const char *ctx,
                      enum gcoll_dev_type type, const char *name, int parent) {
  char f[FIELD_MAX], why[256];
  field_path(f, ctx, "name");
  if (gcoll_topo_find(r->t, name) >= 0)
    return gcoll_ydoc_error(r->doc, gcoll_ydoc_get(entry, "name"), f, r->err, r->errlen,
                            "device '%s' is defined twice", name);
  int idx = gcoll_topo_add_dev(r->t, type, name, parent, why, sizeof(why));
  if (idx < 0) return gcoll_ydoc_error(r->doc, entry, f, r->err, r->errlen, "%s", why);
  r->dev_line[idx] = entry->line;
  return idx;
}

static int read_cpu(struct reader *r, const struct ydoc_node *e, const char *ctx) {
  static const char *const keys[] = {"name", "cores", "numa", NULL};
  char name[GCOLL_NAME_MAX];
  int cores, numa;
  if (check_keys(r, e, ctx, keys) || get_name(r, e, ctx, "name", name, sizeof(name)) ||
      get_opt_int(r, e, ctx, "cores", 1, 65536, 0, &cores) ||
      get_int(r, e, ctx, "numa", -1, 4095, &numa))
    return -1;
  int idx = add_device(r, e, ctx, GCOLL_DEV_CPU, name, -1);
  if (idx < 0) return -1;
  r->t->dev[idx].u.cpu.cores = cores;
  r->t->dev[idx].u.cpu.numa = numa;
  return 0;
}

/* Fields shared by the PCI-attached kinds: name, busid, parent. */
static int read_pci_common(struct reader *r, const struct ydoc_node *e, const char *ctx,
                           enum gcoll_dev_type type, const char *const *keys) {
  char name[GCOLL_NAME_MAX], busid[GCOLL_BUSID_MAX];
  int parent;
  if (check_keys(r, e, ctx, keys) || get_name(r, e, ctx, "name", name, sizeof(name)) ||
      get_busid(r, e, ctx, busid) || get_parent(r, e, ctx, &parent))
    return -1;
  int idx = add_device(r, e, ctx, type, name, parent);
  if (idx < 0) return -1;
  memcpy(r->t->dev[idx].busid, busid, sizeof(busid));
  return idx;
}

static int read_pci(struct reader *r, const struct ydoc_node *e, const char *ctx) {
  static const char *const keys[] = {"name", "busid", "parent", NULL};
  return read_pci_common(r, e, ctx, GCOLL_DEV_PCI, keys) < 0 ? -1 : 0;
}

static int read_gpu(struct reader *r, const struct ydoc_node *e, const char *ctx) {
  static const char *const keys[] = {"name", "busid", "parent", "sms", "cc", NULL};
  int sms, cc;
  /* Range checks first so a bad value is reported before the device exists. */
  if (check_keys(r, e, ctx, keys) || get_opt_int(r, e, ctx, "sms", 1, 4096, 0, &sms) ||
      get_opt_int(r, e, ctx, "cc", 10, 255, 0, &cc))
    return -1;
  int idx = read_pci_common(r, e, ctx, GCOLL_DEV_GPU, keys);
  if (idx < 0) return -1;
  struct gcoll_topo_dev *d = &r->t->dev[idx];
  char expect[GCOLL_NAME_MAX], f[FIELD_MAX];
  /* Local rank i drives gpu i, so the name must say which index it is. */
  snprintf(expect, sizeof(expect), "gpu%d", d->index);
  if (strcmp(expect, d->name) != 0)
    return gcoll_ydoc_error(r->doc, gcoll_ydoc_get(e, "name"), field_path(f, ctx, "name"), r->err,
                            r->errlen, "GPU number %d must be named '%s', found '%s'", d->index,
                            expect, d->name);
  d->u.gpu.sms = sms;
  d->u.gpu.cc = cc;
  return 0;
}

static int read_nic(struct reader *r, const struct ydoc_node *e, const char *ctx) {
  static const char *const keys[] = {"name",        "busid", "parent", "port", "gbps", "rail",
                                     "active_gbps", "state", NULL};
  int port, rail, down = 0;
  double gbps, active = 0;
  char f[FIELD_MAX];
  if (check_keys(r, e, ctx, keys) || get_opt_int(r, e, ctx, "port", 1, 255, 1, &port) ||
      get_opt_int(r, e, ctx, "rail", 0, GCOLL_TOPO_MAX_RAIL, -1, &rail))
    return -1;
  gbps = 0; /* absent: unknown (gcoll_topo_missing names it) */
  if (gcoll_ydoc_get(e, "gbps") != NULL && get_double(r, e, ctx, "gbps", 0.001, 100000.0, &gbps))
    return -1;
  const struct ydoc_node *st = gcoll_ydoc_get(e, "state");
  if (st != NULL) {
    field_path(f, ctx, "state");
    if (gcoll_ydoc_expect(r->doc, st, YDOC_SCALAR, f, r->err, r->errlen)) return -1;
    if (strcmp(st->scalar, "up") != 0 && strcmp(st->scalar, "down") != 0)
      return gcoll_ydoc_error(r->doc, st, f, r->err, r->errlen,
                              "expected up or down, found '%.40s'", st->scalar);
    down = strcmp(st->scalar, "down") == 0;
  }
  if (gcoll_ydoc_get(e, "active_gbps") != NULL) {
    if (get_double(r, e, ctx, "active_gbps", 0.001, 100000.0, &active)) return -1;
    field_path(f, ctx, "active_gbps");
    if (!(gbps > 0) || active > gbps)
      return gcoll_ydoc_error(r->doc, gcoll_ydoc_get(e, "active_gbps"), f, r->err, r->errlen,
                              "%g Gb/s needs a line rate 'gbps' at least as high", active);
  }
  int idx = read_pci_common(r, e, ctx, GCOLL_DEV_NIC, keys);
  if (idx < 0) return -1;
  r->t->dev[idx].u.nic.port = port;
  r->t->dev[idx].u.nic.gbps = gbps;
  r->t->dev[idx].u.nic.rail = rail;
  r->t->dev[idx].u.nic.down = down;
  /* At the line rate is no degradation: stored as 0 so it hashes as absent. */
  r->t->dev[idx].u.nic.active_gbps = active < gbps ? active : 0;
  return 0;
}

static int read_nvs(struct reader *r, const struct ydoc_node *e, const char *ctx) {
  static const char *const keys[] = {"name", "multicast", NULL};
  char name[GCOLL_NAME_MAX], f[FIELD_MAX];
  const struct ydoc_node *n;
  int mc;
  field_path(f, ctx, "multicast");
  if (check_keys(r, e, ctx, keys) || get_name(r, e, ctx, "name", name, sizeof(name)) ||
      require(r, e, ctx, "multicast", &n) ||
      gcoll_ydoc_bool(r->doc, n, f, &mc, r->err, r->errlen))
    return -1;
  int idx = add_device(r, e, ctx, GCOLL_DEV_NVS, name, -1);
  if (idx < 0) return -1;
  r->t->dev[idx].u.nvs.multicast = mc;
  return 0;
}

typedef int (*entry_fn)(struct reader *r, const struct ydoc_node *e, const char *ctx);

/* Reads an optional (or, with `required`, mandatory) list of mappings. */
static int read_list(struct reader *r, const struct ydoc_node *root, const char *key,
                     int required, entry_fn fn) {
  const struct ydoc_node *seq = gcoll_ydoc_get(root, key);
  if (seq == NULL) {
    if (!required) return 0;
    return gcoll_ydoc_error(r->doc, root, key, r->err, r->errlen, "missing");
  }
  if (gcoll_ydoc_expect(r->doc, seq, YDOC_SEQ, key, r->err, r->errlen)) return -1;
  if (required && gcoll_ydoc_count(seq) == 0)
    return gcoll_ydoc_error(r->doc, seq, key, r->err, r->errlen, "must list at least one entry");
  for (size_t i = 0; i < gcoll_ydoc_count(seq); i++) {
    char ctx[FIELD_MAX];
    const struct ydoc_node *e = gcoll_ydoc_item(seq, i);
    snprintf(ctx, sizeof(ctx), "%s[%zu]", key, i);
    if (gcoll_ydoc_expect(r->doc, e, YDOC_MAP, ctx, r->err, r->errlen) || fn(r, e, ctx)) return -1;
  }
  return 0;
}

static int parse_link_type(const char *s, enum gcoll_link_type *out) {
  for (int i = 0; i < GCOLL_LINK_NTYPES; i++)
    if (strcmp(s, gcoll_link_type_name((enum gcoll_link_type)i)) == 0) {
      *out = (enum gcoll_link_type)i;
      return 0;
    }
  return -1;
}

/* Which device kinds each link kind may join: NVLink between GPUs and
 * NVSwitches, SYS between sockets, PCI among the rest (not socket to
 * socket, which is what SYS is for). */
static int link_allowed(enum gcoll_link_type lt, enum gcoll_dev_type a, enum gcoll_dev_type b) {
  switch (lt) {
    case GCOLL_LINK_NVL:
      return (a == GCOLL_DEV_GPU || a == GCOLL_DEV_NVS) &&
             (b == GCOLL_DEV_GPU || b == GCOLL_DEV_NVS);
    case GCOLL_LINK_SYS: return a == GCOLL_DEV_CPU && b == GCOLL_DEV_CPU;
    case GCOLL_LINK_PCI:
      return a != GCOLL_DEV_NVS && b != GCOLL_DEV_NVS &&
             !(a == GCOLL_DEV_CPU && b == GCOLL_DEV_CPU);
    default: return 0;
  }
}

static int link_endpoint(struct reader *r, const struct ydoc_node *e, const char *ctx,
                         const char *key, int *idx) {
  char name[GCOLL_NAME_MAX], f[FIELD_MAX];
  if (get_name(r, e, ctx, key, name, sizeof(name))) return -1;
  *idx = gcoll_topo_find(r->t, name);
  if (*idx < 0)
    return gcoll_ydoc_error(r->doc, gcoll_ydoc_get(e, key), field_path(f, ctx, key), r->err,
                            r->errlen, "device '%s' is not defined", name);
  return 0;
}

static int has_link(const struct gcoll_topo_dev *d, int peer, enum gcoll_link_type type) {
  for (int i = 0; i < d->nlinks; i++)
    if (d->links[i].peer == peer && d->links[i].type == type) return 1;
  return 0;
}

static int read_link(struct reader *r, const struct ydoc_node *e, const char *ctx) {
  static const char *const keys[] = {"a", "b", "type", "count", "bw", NULL};
  char tname[16], f[FIELD_MAX], why[256];
  int a, b, count;
  double bw;
  enum gcoll_link_type lt;
  if (check_keys(r, e, ctx, keys) || link_endpoint(r, e, ctx, "a", &a) ||
      link_endpoint(r, e, ctx, "b", &b))
    return -1;
  const struct ydoc_node *tn;
  field_path(f, ctx, "type");
  if (require(r, e, ctx, "type", &tn) ||
      gcoll_ydoc_str(r->doc, tn, f, tname, sizeof(tname), r->err, r->errlen))
    return -1;
  if (parse_link_type(tname, &lt))
    return gcoll_ydoc_error(r->doc, tn, f, r->err, r->errlen,
                            "'%.40s' is not one of nvlink, pci, sys", tname);
  const struct gcoll_topo_dev *da = &r->t->dev[a], *db = &r->t->dev[b];
  if (a == b)
    return gcoll_ydoc_error(r->doc, e, ctx, r->err, r->errlen, "link from '%s' to itself",
                            da->name);
  if (!link_allowed(lt, da->type, db->type))
    return gcoll_ydoc_error(r->doc, tn, f, r->err, r->errlen, "a %s link cannot join a %s and a %s",
                            tname, gcoll_dev_type_name(da->type), gcoll_dev_type_name(db->type));
  /* Only NVLink has lanes; a PCI or SYS link is one link. */
  if (get_opt_int(r, e, ctx, "count", 1, lt == GCOLL_LINK_NVL ? 1024 : 1, 1, &count) ||
      get_double(r, e, ctx, "bw", 0.001, 1e6, &bw))
    return -1;
  if (has_link(da, b, lt))
    return gcoll_ydoc_error(r->doc, e, ctx, r->err, r->errlen,
                            "%s link %s-%s is listed twice; list it once with its lane count",
                            tname, da->name, db->name);
  if (gcoll_topo_add_link(r->t, a, b, lt, count, bw, why, sizeof(why)))
    return gcoll_ydoc_error(r->doc, e, ctx, r->err, r->errlen, "%s", why);
  return 0;
}

/* The links list is authoritative, but a parent without a PCI link to it
 * would make the hierarchy and the paths disagree, so that is refused. */
static int check_parent_links(struct reader *r) {
  for (int i = 0; i < r->t->ndev; i++) {
    const struct gcoll_topo_dev *d = &r->t->dev[i];
    if (d->parent >= 0 && !has_link(d, d->parent, GCOLL_LINK_PCI)) {
      snprintf(r->err, r->errlen, "%s:%d: field 'parent': no pci link between '%s' and its "
               "parent '%s' in 'links'", r->doc->what, r->dev_line[i], d->name,
               r->t->dev[d->parent].name);
      return -1;
    }
  }
  return 0;
}

static int read_header(struct reader *r, const struct ydoc_node *root) {
  static const char *const keys[] = {"gcoll-topo", "name", "nvlink_domain", "cpus", "pci",
                                     "gpus", "nics", "nvswitches", "links", NULL};
  const struct ydoc_node *vn;
  int64_t version;
  if (gcoll_ydoc_expect(r->doc, root, YDOC_MAP, "gcoll-topo", r->err, r->errlen) ||
      gcoll_ydoc_req(r->doc, root, "gcoll-topo", &vn, r->err, r->errlen) ||
      gcoll_ydoc_int(r->doc, vn, "gcoll-topo", INT64_MIN, INT64_MAX, &version, r->err, r->errlen))
    return -1;
  if (version != GCOLL_TOPO_VERSION)
    return gcoll_ydoc_error(r->doc, vn, "gcoll-topo", r->err, r->errlen,
                            "unsupported version %lld (this reader knows %d)", (long long)version,
                            GCOLL_TOPO_VERSION);
  if (check_keys(r, root, "", keys)) return -1;
  return get_name(r, root, "", "name", r->t->name, sizeof(r->t->name));
}

int gcoll_topo_is_xml(const char *buf, size_t len) {
  size_t i = 0;
  if (buf == NULL) return 0;
  if (len >= 3 && (unsigned char)buf[0] == 0xef && (unsigned char)buf[1] == 0xbb &&
      (unsigned char)buf[2] == 0xbf)
    i = 3;
  while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r')) i++;
  return i < len && buf[i] == '<';
}

static struct gcoll_topo *read_yaml_mem(const char *buf, size_t len, const char *what, char *err,
                                        size_t errlen);

/* nvlink_domain: {cluster: UUID, clique: N}, optional: the multi-node
 * NVLink domain this node is in (detection writes it from NVML's fabric
 * info). */
static int read_nvl_domain(struct reader *r, const struct ydoc_node *root) {
  static const char *const keys[] = {"cluster", "clique", NULL};
  const struct ydoc_node *m = gcoll_ydoc_get(root, "nvlink_domain"), *c;
  char uuid[64];
  int64_t clique;
  if (m == NULL) return 0;
  if (gcoll_ydoc_expect(r->doc, m, YDOC_MAP, "nvlink_domain", r->err, r->errlen) ||
      check_keys(r, m, "nvlink_domain", keys) || require(r, m, "nvlink_domain", "cluster", &c) ||
      gcoll_ydoc_str(r->doc, c, "nvlink_domain.cluster", uuid, sizeof(uuid), r->err, r->errlen))
    return -1;
  if (gcoll_nvl_domain_set_cluster(&r->t->nvl_domain, uuid) != 0)
    return gcoll_ydoc_error(r->doc, c, "nvlink_domain.cluster", r->err, r->errlen,
                            "'%.40s' is not a UUID like 4f1c2d3e-0000-4000-8000-00000000002a",
                            uuid);
  if (require(r, m, "nvlink_domain", "clique", &c) ||
      gcoll_ydoc_int(r->doc, c, "nvlink_domain.clique", 0, UINT32_MAX, &clique, r->err, r->errlen))
    return -1;
  r->t->nvl_domain.clique = (uint32_t)clique;
  r->t->nvl_domain.set = 1;
  return 0;
}

/* Either format: a topology file starting with '<' is NCCL's XML (no YAML
 * topology can start so), anything else is gcoll's YAML. */
struct gcoll_topo *gcoll_topo_read_mem(const char *buf, size_t len, const char *what, char *err,
                                       size_t errlen) {
  if (gcoll_topo_is_xml(buf, len)) return gcoll_topo_read_nccl_xml_mem(buf, len, what, err, errlen);
  return read_yaml_mem(buf, len, what, err, errlen);
}

static struct gcoll_topo *read_yaml_mem(const char *buf, size_t len, const char *what, char *err,
                                        size_t errlen) {
  struct ydoc doc;
  struct reader r;
  char why[512];
  if (what == NULL) what = "<input>";
  if (buf == NULL) {
    snprintf(err, errlen, "%s:0: no input", what);
    return NULL;
  }
  if (gcoll_ydoc_parse(&doc, buf, len, what, err, errlen)) return NULL;
  memset(&r, 0, sizeof(r));
  r.doc = &doc;
  r.err = err;
  r.errlen = errlen;
  r.t = gcoll_topo_new("");
  if (r.t == NULL) {
    snprintf(err, errlen, "%s:0: out of memory", what);
    goto fail;
  }
  if (doc.root == NULL) {
    snprintf(err, errlen, "%s:1: empty document, expected a 'gcoll-topo: %d' topology", what,
             GCOLL_TOPO_VERSION);
    goto fail;
  }
  /* Sections in device-index order: the order fixes indices and the hash. */
  if (read_header(&r, doc.root) || read_nvl_domain(&r, doc.root) ||
      read_list(&r, doc.root, "cpus", 1, read_cpu) ||
      read_list(&r, doc.root, "pci", 0, read_pci) || read_list(&r, doc.root, "gpus", 0, read_gpu) ||
      read_list(&r, doc.root, "nics", 0, read_nic) ||
      read_list(&r, doc.root, "nvswitches", 0, read_nvs) ||
      read_list(&r, doc.root, "links", 0, read_link) || check_parent_links(&r))
    goto fail;
  if (gcoll_topo_compute_paths(r.t, why, sizeof(why))) {
    snprintf(err, errlen, "%s:%d: %s", what, doc.root->line, why);
    goto fail;
  }
  r.t->incomplete = gcoll_topo_missing(r.t, NULL, 0);
  gcoll_ydoc_free(&doc);
  return r.t;
fail:
  gcoll_topo_free(r.t);
  gcoll_ydoc_free(&doc);
  return NULL;
}

struct gcoll_topo *gcoll_topo_read_file(const char *path, char *err, size_t errlen) {
  char *buf;
  size_t len;
  if (gcoll_read_file(path, TOPO_FILE_MAX_BYTES, &buf, &len, err, errlen)) return NULL;
  struct gcoll_topo *t = gcoll_topo_read_mem(buf, len, path, err, errlen);
  free(buf);
  return t;
}
