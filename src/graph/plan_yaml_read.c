/* Reads a plan file (docs/plan-format.md) into a struct gcoll_plan.
 *
 * Plans come from shared directories and may be truncated, hand-edited or
 * hostile, so every value is type- and range-checked before it is used as
 * an index, unknown fields are refused (a typo must not silently change a
 * plan), and counts are checked against each other before anything of that
 * size is allocated. Graph properties (one ring cycle, tree roots, ...) are
 * gcoll_plan_verify's job; what is checked here is what every consumer of
 * the struct needs in order never to index out of bounds. */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/plan.h"
#include "graph/yaml_doc.h"

#define PLAN_FILE_MAX ((size_t)64 << 20)

struct rd {
  const struct ydoc *doc;
  char *err;
  size_t errlen;
};

static int rd_err(struct rd *r, const struct ydoc_node *n, const char *field, const char *fmt,
                  ...) __attribute__((format(printf, 4, 5)));
static int rd_err(struct rd *r, const struct ydoc_node *n, const char *field, const char *fmt,
                  ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return gcoll_ydoc_error(r->doc, n, field, r->err, r->errlen, "%s", msg);
}

/* Refuses fields not in `allowed` (NULL-terminated). */
static int only_keys(struct rd *r, const struct ydoc_node *map, const char *where,
                     const char *const *allowed) {
  for (size_t i = 0; i < gcoll_ydoc_count(map); i++) {
    const char *k = gcoll_ydoc_key(map, i);
    int ok = 0;
    for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, k) == 0;
    if (!ok) return rd_err(r, map->items[2 * i], k, "unknown field in %s", where);
  }
  return 0;
}

static int get_map(struct rd *r, const struct ydoc_node *parent, const char *field,
                   const struct ydoc_node **out) {
  if (gcoll_ydoc_req(r->doc, parent, field, out, r->err, r->errlen)) return -1;
  return gcoll_ydoc_expect(r->doc, *out, YDOC_MAP, field, r->err, r->errlen);
}

static int get_int(struct rd *r, const struct ydoc_node *map, const char *field,
                   const char *name, int64_t min, int64_t max, int64_t *out) {
  const struct ydoc_node *n;
  if (gcoll_ydoc_req(r->doc, map, field, &n, r->err, r->errlen)) return -1;
  return gcoll_ydoc_int(r->doc, n, name, min, max, out, r->err, r->errlen);
}

/* A list of exactly `count` integers in [min, max]. */
static int int_list(struct rd *r, const struct ydoc_node *n, const char *field, int count,
                    int min, int max, int *out) {
  if (gcoll_ydoc_expect(r->doc, n, YDOC_SEQ, field, r->err, r->errlen)) return -1;
  if (gcoll_ydoc_count(n) != (size_t)count)
    return rd_err(r, n, field, "has %zu entries, expected %d", gcoll_ydoc_count(n), count);
  for (int i = 0; i < count; i++) {
    int64_t v;
    if (gcoll_ydoc_int(r->doc, gcoll_ydoc_item(n, (size_t)i), field, min, max, &v, r->err,
                       r->errlen))
      return -1;
    out[i] = (int)v;
  }
  return 0;
}

/* A permutation of 0..count-1. */
static int perm_list(struct rd *r, const struct ydoc_node *n, const char *field, int count,
                     int *out) {
  unsigned char seen[GCOLL_MAX_LOCAL_RANKS] = {0};
  if (gcoll_ydoc_expect(r->doc, n, YDOC_SEQ, field, r->err, r->errlen)) return -1;
  if (gcoll_ydoc_count(n) != (size_t)count)
    return rd_err(r, n, field, "has %zu entries, local_ranks is %d", gcoll_ydoc_count(n), count);
  if (int_list(r, n, field, count, 0, count - 1, out)) return -1;
  for (int i = 0; i < count; i++) {
    if (seen[out[i]])
      return rd_err(r, gcoll_ydoc_item(n, (size_t)i), field,
                    "%d appears twice (must be a permutation of 0..%d)", out[i], count - 1);
    seen[out[i]] = 1;
  }
  return 0;
}

/* Optional NIC name; ordinal numbering stands in for topology indices. */
static int nic_field(struct rd *r, const struct ydoc_node *map, const char *key,
                     const char *field, char *name, int *index, int *nnics) {
  const struct ydoc_node *n = gcoll_ydoc_get(map, key);
  *index = -1;
  name[0] = '\0';
  if (n == NULL) return 0;
  if (gcoll_ydoc_str(r->doc, n, field, name, 32, r->err, r->errlen)) return -1;
  if (name[0] == '\0') return rd_err(r, n, field, "empty NIC name");
  *index = (*nnics)++;
  return 0;
}

/* Optional integer `key` of an entry that names the NIC `nic` ("" when it
 * names none): a rail, or a PXN local rank. -1 when absent. */
static int opt_nic_int(struct rd *r, const struct ydoc_node *map, const char *key,
                       const char *field, const char *nic, const char *nic_key, int64_t max,
                       int *out) {
  const struct ydoc_node *n = gcoll_ydoc_get(map, key);
  int64_t v;
  *out = -1;
  if (n == NULL) return 0;
  if (nic[0] == '\0') return rd_err(r, n, field, "given without '%s'", nic_key);
  if (gcoll_ydoc_int(r->doc, n, field, 0, max, &v, r->err, r->errlen)) return -1;
  *out = (int)v;
  return 0;
}

static int parse_hash(struct rd *r, const struct ydoc_node *n, const char *field,
                      uint32_t *out) {
  if (gcoll_ydoc_expect(r->doc, n, YDOC_SCALAR, field, r->err, r->errlen)) return -1;
  uint32_t h = 0;
  int ok = n->len == 8;
  for (size_t i = 0; ok && i < 8; i++) {
    char c = n->scalar[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    ok = d >= 0;
    h = h << 4 | (uint32_t)(d & 15);
  }
  if (!ok) return rd_err(r, n, field, "expected 8 hex digits, found '%.40s'", n->scalar);
  *out = h;
  return 0;
}

static int parse_channels(struct rd *r, const struct ydoc_node *cls, const char *cname,
                          struct gcoll_plan_class *c, int nsearch) {
  static const char *const ring_keys[] = {"order", "nic_in", "nic_out", "rail_in", "rail_out",
                                          "pxn", NULL};
  static const char *const tree_keys[] = {"chain", "nic", "rail", NULL};
  const struct ydoc_node *ring, *tree;
  char f[160];
  int nnics = 0;
  if (gcoll_ydoc_req(r->doc, cls, "ring", &ring, r->err, r->errlen) ||
      gcoll_ydoc_req(r->doc, cls, "tree", &tree, r->err, r->errlen))
    return -1;
  snprintf(f, sizeof(f), "topologies.%s.ring", cname);
  if (gcoll_ydoc_expect(r->doc, ring, YDOC_SEQ, f, r->err, r->errlen)) return -1;
  if (gcoll_ydoc_count(ring) != (size_t)nsearch)
    return rd_err(r, ring, f, "has %zu entries, channels/2 is %d", gcoll_ydoc_count(ring), nsearch);
  snprintf(f, sizeof(f), "topologies.%s.tree", cname);
  if (gcoll_ydoc_expect(r->doc, tree, YDOC_SEQ, f, r->err, r->errlen)) return -1;
  if (gcoll_ydoc_count(tree) != (size_t)nsearch)
    return rd_err(r, tree, f, "has %zu entries, channels/2 is %d", gcoll_ydoc_count(tree), nsearch);
  for (int s = 0; s < nsearch; s++) {
    struct gcoll_intra_channel *ch = &c->graph.ch[s];
    const struct ydoc_node *e = gcoll_ydoc_item(ring, (size_t)s), *order;
    snprintf(f, sizeof(f), "topologies.%s.ring[%d]", cname, s);
    if (gcoll_ydoc_expect(r->doc, e, YDOC_MAP, f, r->err, r->errlen) ||
        only_keys(r, e, f, ring_keys))
      return -1;
    if (gcoll_ydoc_req(r->doc, e, "order", &order, r->err, r->errlen)) return -1;
    snprintf(f, sizeof(f), "topologies.%s.ring[%d].order", cname, s);
    if (perm_list(r, order, f, c->nlocal, ch->ring)) return -1;
    snprintf(f, sizeof(f), "topologies.%s.ring[%d].nic_in", cname, s);
    if (nic_field(r, e, "nic_in", f, ch->ring_nic_in_name, &ch->ring_nic_in, &nnics)) return -1;
    snprintf(f, sizeof(f), "topologies.%s.ring[%d].nic_out", cname, s);
    if (nic_field(r, e, "nic_out", f, ch->ring_nic_out_name, &ch->ring_nic_out, &nnics))
      return -1;
    snprintf(f, sizeof(f), "topologies.%s.ring[%d].rail_in", cname, s);
    if (opt_nic_int(r, e, "rail_in", f, ch->ring_nic_in_name, "nic_in", GCOLL_TOPO_MAX_RAIL,
                    &ch->ring_rail_in))
      return -1;
    snprintf(f, sizeof(f), "topologies.%s.ring[%d].rail_out", cname, s);
    if (opt_nic_int(r, e, "rail_out", f, ch->ring_nic_out_name, "nic_out", GCOLL_TOPO_MAX_RAIL,
                    &ch->ring_rail_out))
      return -1;
    snprintf(f, sizeof(f), "topologies.%s.ring[%d].pxn", cname, s);
    if (opt_nic_int(r, e, "pxn", f, ch->ring_nic_out_name, "nic_out", c->nlocal - 1,
                    &ch->ring_pxn))
      return -1;
    if (ch->ring_pxn >= 0 && ch->ring_pxn == ch->ring[c->nlocal - 1])
      return rd_err(r, gcoll_ydoc_get(e, "pxn"), f, "local rank %d is the ring's last: it sends "
                    "through its own NIC", ch->ring_pxn);

    const struct ydoc_node *t = gcoll_ydoc_item(tree, (size_t)s), *chain;
    snprintf(f, sizeof(f), "topologies.%s.tree[%d]", cname, s);
    if (gcoll_ydoc_expect(r->doc, t, YDOC_MAP, f, r->err, r->errlen) ||
        only_keys(r, t, f, tree_keys))
      return -1;
    if (gcoll_ydoc_req(r->doc, t, "chain", &chain, r->err, r->errlen)) return -1;
    snprintf(f, sizeof(f), "topologies.%s.tree[%d].chain", cname, s);
    if (perm_list(r, chain, f, c->nlocal, ch->chain)) return -1;
    snprintf(f, sizeof(f), "topologies.%s.tree[%d].nic", cname, s);
    if (nic_field(r, t, "nic", f, ch->chain_nic_name, &ch->chain_nic, &nnics)) return -1;
    snprintf(f, sizeof(f), "topologies.%s.tree[%d].rail", cname, s);
    if (opt_nic_int(r, t, "rail", f, ch->chain_nic_name, "nic", GCOLL_TOPO_MAX_RAIL,
                    &ch->chain_rail))
      return -1;
  }
  c->graph.nchannels = nsearch;
  return 0;
}

static int parse_nvls(struct rd *r, const struct ydoc_node *cls, const char *cname,
                      struct gcoll_plan_class *c) {
  static const char *const keys[] = {"heads", NULL};
  const struct ydoc_node *nvls = gcoll_ydoc_get(cls, "nvls"), *heads;
  char f[160];
  if (nvls == NULL) return 0;
  snprintf(f, sizeof(f), "topologies.%s.nvls", cname);
  if (gcoll_ydoc_expect(r->doc, nvls, YDOC_MAP, f, r->err, r->errlen) ||
      only_keys(r, nvls, f, keys))
    return -1;
  if (gcoll_ydoc_req(r->doc, nvls, "heads", &heads, r->err, r->errlen)) return -1;
  snprintf(f, sizeof(f), "topologies.%s.nvls.heads", cname);
  if (gcoll_ydoc_expect(r->doc, heads, YDOC_SEQ, f, r->err, r->errlen)) return -1;
  size_t n = gcoll_ydoc_count(heads);
  if (n < 1 || n > GCOLL_MAX_NVLS_HEADS || n > (size_t)c->nlocal)
    return rd_err(r, heads, f, "has %zu heads, expected 1..%d", n,
                  c->nlocal < GCOLL_MAX_NVLS_HEADS ? c->nlocal : GCOLL_MAX_NVLS_HEADS);
  if (int_list(r, heads, f, (int)n, 0, c->nlocal - 1, c->graph.nvls_heads)) return -1;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++)
      if (c->graph.nvls_heads[i] == c->graph.nvls_heads[j])
        return rd_err(r, gcoll_ydoc_item(heads, i), f, "local rank %d appears twice",
                      c->graph.nvls_heads[i]);
  c->graph.nvls_nheads = (int)n;
  return 0;
}

/* Optional: which GPU of the node each local rank drives (a class made
 * from part of a node); GPU classes only, distinct. */
static int parse_gpu_map(struct rd *r, const struct ydoc_node *cls, const char *cname,
                         struct gcoll_plan_class *c) {
  const struct ydoc_node *n = gcoll_ydoc_get(cls, "gpus");
  char f[160];
  if (n == NULL) return 0;
  snprintf(f, sizeof(f), "topologies.%s.gpus", cname);
  if (c->intra_edge != GCOLL_EDGE_P2P)
    return rd_err(r, n, f, "only GPU classes (intra: p2p) drive GPUs");
  if (int_list(r, n, f, c->nlocal, 0, GCOLL_MAX_GPU_INDEX, c->gpu)) return -1;
  for (int i = 0; i < c->nlocal; i++)
    for (int j = 0; j < i; j++)
      if (c->gpu[i] == c->gpu[j])
        return rd_err(r, gcoll_ydoc_item(n, (size_t)i), f, "GPU %d appears twice", c->gpu[i]);
  c->has_gpu_map = 1;
  return 0;
}

/* Optional: the PCI bus id of the GPU each local rank drives; GPU
 * classes only, distinct, normalised as topologies write them. */
static int parse_gpu_busids(struct rd *r, const struct ydoc_node *cls, const char *cname,
                            struct gcoll_plan_class *c) {
  const struct ydoc_node *n = gcoll_ydoc_get(cls, "gpu_busids");
  char f[160], raw[64];
  if (n == NULL) return 0;
  snprintf(f, sizeof(f), "topologies.%s.gpu_busids", cname);
  if (c->intra_edge != GCOLL_EDGE_P2P)
    return rd_err(r, n, f, "only GPU classes (intra: p2p) drive GPUs");
  if (gcoll_ydoc_expect(r->doc, n, YDOC_SEQ, f, r->err, r->errlen)) return -1;
  if (gcoll_ydoc_count(n) != (size_t)c->nlocal)
    return rd_err(r, n, f, "has %zu entries, expected %d", gcoll_ydoc_count(n), c->nlocal);
  for (int i = 0; i < c->nlocal; i++) {
    const struct ydoc_node *item = gcoll_ydoc_item(n, (size_t)i);
    if (gcoll_ydoc_str(r->doc, item, f, raw, sizeof(raw), r->err, r->errlen)) return -1;
    if (gcoll_busid_normalize(raw, c->gpu_busid[i], sizeof(c->gpu_busid[i])) != 0)
      return rd_err(r, item, f, "'%.40s' is not a PCI bus id (DOMAIN:BB:DD.F)", raw);
    for (int j = 0; j < i; j++)
      if (strcmp(c->gpu_busid[i], c->gpu_busid[j]) == 0)
        return rd_err(r, item, f, "GPU %s appears twice", c->gpu_busid[i]);
  }
  c->has_gpu_busids = 1;
  return 0;
}

/* Optional: the node's NICs the plan leaves out, each {nic, reason}. */
static int parse_left_out(struct rd *r, const struct ydoc_node *cls, const char *cname,
                          struct gcoll_intra_graph *g) {
  static const char *const keys[] = {"nic", "reason", NULL};
  const struct ydoc_node *lo = gcoll_ydoc_get(cls, "nics_left_out");
  char f[160];
  g->nleft_out = g->left_out_more = 0;
  if (lo == NULL) return 0;
  snprintf(f, sizeof(f), "topologies.%s.nics_left_out", cname);
  if (gcoll_ydoc_expect(r->doc, lo, YDOC_SEQ, f, r->err, r->errlen)) return -1;
  if (gcoll_ydoc_count(lo) < 1 || gcoll_ydoc_count(lo) > GCOLL_MAX_LEFT_OUT)
    return rd_err(r, lo, f, "has %zu entries, expected 1..%d", gcoll_ydoc_count(lo),
                  GCOLL_MAX_LEFT_OUT);
  for (size_t i = 0; i < gcoll_ydoc_count(lo); i++) {
    const struct ydoc_node *e = gcoll_ydoc_item(lo, i), *n;
    snprintf(f, sizeof(f), "topologies.%s.nics_left_out[%zu]", cname, i);
    if (gcoll_ydoc_expect(r->doc, e, YDOC_MAP, f, r->err, r->errlen) || only_keys(r, e, f, keys))
      return -1;
    snprintf(f, sizeof(f), "topologies.%s.nics_left_out[%zu].nic", cname, i);
    if (gcoll_ydoc_req(r->doc, e, "nic", &n, r->err, r->errlen) ||
        gcoll_ydoc_str(r->doc, n, f, g->left_out[i].nic, sizeof(g->left_out[i].nic), r->err,
                       r->errlen))
      return -1;
    if (g->left_out[i].nic[0] == '\0') return rd_err(r, n, f, "empty NIC name");
    snprintf(f, sizeof(f), "topologies.%s.nics_left_out[%zu].reason", cname, i);
    if (gcoll_ydoc_req(r->doc, e, "reason", &n, r->err, r->errlen) ||
        gcoll_ydoc_str(r->doc, n, f, g->left_out[i].why, sizeof(g->left_out[i].why), r->err,
                       r->errlen))
      return -1;
    if (strcmp(g->left_out[i].why, "down") != 0 && strcmp(g->left_out[i].why, "slow") != 0)
      return rd_err(r, n, f, "expected down or slow, found '%s'", g->left_out[i].why);
    snprintf(f, sizeof(f), "topologies.%s.nics_left_out[%zu].nic", cname, i);
    for (size_t j = 0; j < i; j++)
      if (strcmp(g->left_out[j].nic, g->left_out[i].nic) == 0)
        return rd_err(r, e, f, "NIC '%s' is listed twice", g->left_out[i].nic);
    g->nleft_out = (int)i + 1;
  }
  return 0;
}

static int parse_class(struct rd *r, const char *name, const struct ydoc_node *keynode,
                       const struct ydoc_node *cls, int nsearch, struct gcoll_plan_class *c) {
  static const char *const keys[] = {"hash", "local_ranks", "intra", "gpus", "gpu_busids",
                                     "bandwidth", "ring", "tree", "nvls", "nics_left_out", NULL};
  static const char *const bw_keys[] = {"ring", "net", NULL};
  const struct ydoc_node *n, *bw;
  char f[160];
  int64_t v;
  if (name[0] == '\0') return rd_err(r, keynode, "topologies", "empty topology class name");
  if (strlen(name) >= sizeof(c->name))
    return rd_err(r, keynode, "topologies", "class name longer than %zu characters",
                  sizeof(c->name) - 1);
  snprintf(c->name, sizeof(c->name), "%s", name);
  snprintf(f, sizeof(f), "topologies.%s", name);
  if (gcoll_ydoc_expect(r->doc, cls, YDOC_MAP, f, r->err, r->errlen) || only_keys(r, cls, f, keys))
    return -1;
  snprintf(f, sizeof(f), "topologies.%s.hash", name);
  if (gcoll_ydoc_req(r->doc, cls, "hash", &n, r->err, r->errlen) || parse_hash(r, n, f, &c->hash))
    return -1;
  snprintf(f, sizeof(f), "topologies.%s.local_ranks", name);
  if (get_int(r, cls, "local_ranks", f, 1, GCOLL_MAX_LOCAL_RANKS, &v)) return -1;
  c->nlocal = (int)v;
  c->graph.nlocal = c->nlocal;
  snprintf(f, sizeof(f), "topologies.%s.intra", name);
  if (gcoll_ydoc_req(r->doc, cls, "intra", &n, r->err, r->errlen) ||
      gcoll_ydoc_expect(r->doc, n, YDOC_SCALAR, f, r->err, r->errlen))
    return -1;
  int e = gcoll_edge_from_name(n->scalar);
  if (e != GCOLL_EDGE_SHM && e != GCOLL_EDGE_P2P)
    return rd_err(r, n, f, "expected shm or p2p, found '%.40s'", n->scalar);
  c->intra_edge = (enum gcoll_edge)e;
  if (parse_gpu_map(r, cls, name, c) || parse_gpu_busids(r, cls, name, c)) return -1;
  snprintf(f, sizeof(f), "topologies.%s.bandwidth", name);
  if (get_map(r, cls, "bandwidth", &bw) || only_keys(r, bw, f, bw_keys)) return -1;
  snprintf(f, sizeof(f), "topologies.%s.bandwidth.ring", name);
  if (gcoll_ydoc_req(r->doc, bw, "ring", &n, r->err, r->errlen) ||
      gcoll_ydoc_double(r->doc, n, f, 0, 1e9, &c->graph.ring_bw, r->err, r->errlen))
    return -1;
  snprintf(f, sizeof(f), "topologies.%s.bandwidth.net", name);
  if (gcoll_ydoc_req(r->doc, bw, "net", &n, r->err, r->errlen) ||
      gcoll_ydoc_double(r->doc, n, f, 0, 1e9, &c->graph.net_bw, r->err, r->errlen))
    return -1;
  if (parse_channels(r, cls, name, c, nsearch) || parse_left_out(r, cls, name, &c->graph))
    return -1;
  return parse_nvls(r, cls, name, c);
}

static int parse_classes(struct rd *r, const struct ydoc_node *root, struct gcoll_plan *p) {
  const struct ydoc_node *t;
  if (get_map(r, root, "topologies", &t)) return -1;
  if (gcoll_ydoc_count(t) < 1 || gcoll_ydoc_count(t) > GCOLL_MAX_CLASSES)
    return rd_err(r, t, "topologies", "has %zu classes, expected 1..%d", gcoll_ydoc_count(t),
                  GCOLL_MAX_CLASSES);
  p->nclasses = (int)gcoll_ydoc_count(t);
  for (int k = 0; k < p->nclasses; k++)
    if (parse_class(r, gcoll_ydoc_key(t, (size_t)k), t->items[2 * k],
                    gcoll_ydoc_value(t, (size_t)k), p->nchannels / 2, &p->classes[k]))
      return -1;
  return 0;
}

/* "A-B" or "A" with 0 <= A <= B <= max. */
static int parse_range(const char *s, int64_t max, int64_t *a, int64_t *b) {
  char *end;
  if (*s < '0' || *s > '9') return -1;
  long long x = strtoll(s, &end, 10), y = x;
  if (x > max) return -1;
  if (*end == '-') {
    const char *q = end + 1;
    if (*q < '0' || *q > '9') return -1;
    y = strtoll(q, &end, 10);
    if (y > max) return -1;
  }
  if (*end != '\0' || y < x) return -1;
  *a = x;
  *b = y;
  return 0;
}

/* ---- nodes ----------------------------------------------------------------- */

struct node_fill {
  int next_node, next_rank, last_class;   /* next_rank: the next slot */
  int host_rank;
  char *host_out;
  size_t host_outlen;
  int *rank_of_slot;   /* the job rank of every slot read so far */
  int permuted;        /* some node's ranks are not the next block */
};

static int find_class(const struct gcoll_plan *p, const char *name, int hint) {
  if (hint >= 0 && strcmp(p->classes[hint].name, name) == 0) return hint;
  for (int k = 0; k < p->nclasses; k++)
    if (strcmp(p->classes[k].name, name) == 0) return k;
  return -1;
}

/* Keeps a node's host name; in rank-view mode also copies it out. */
static int keep_host(struct rd *r, struct gcoll_plan *p, struct node_fill *nf, int node,
                     const char *name, const struct ydoc_node *at) {
  if ((p->node_host[node] = strdup(name)) == NULL) return rd_err(r, at, "nodes", "out of memory");
  if (nf->host_rank >= 0 && nf->host_out) snprintf(nf->host_out, nf->host_outlen, "%s", name);
  return 0;
}

/* domain: K, optional (plans before NVLink domains have none): the
 * entry's nodes are in multi-node NVLink domain K. Nodes of entries
 * without it are in none. */
static int parse_domain(struct rd *r, const struct ydoc_node *e, int idx, struct gcoll_plan *p,
                        int first, int count) {
  char f[64];
  int64_t v;
  if (gcoll_ydoc_get(e, "domain") == NULL) {
    for (int j = 0; p->node_domain != NULL && j < count; j++) p->node_domain[first + j] = -1;
    return 0;
  }
  snprintf(f, sizeof(f), "nodes[%d].domain", idx);
  if (get_int(r, e, "domain", f, 0, p->nnodes - 1, &v)) return -1;
  if (p->node_domain == NULL) {
    if ((p->node_domain = malloc((size_t)p->nnodes * sizeof(int))) == NULL)
      return rd_err(r, e, f, "out of memory");
    for (int n = 0; n < p->nnodes; n++) p->node_domain[n] = -1;
  }
  for (int j = 0; j < count; j++) p->node_domain[first + j] = (int)v;
  return 0;
}

static int parse_node_entry(struct rd *r, const struct ydoc_node *e, int idx,
                            struct gcoll_plan *p, struct node_fill *nf) {
  static const char *const keys[] = {"host", "hosts", "topology", "domain", "ranks", NULL};
  const struct ydoc_node *topo, *ranks;
  const struct ydoc_node *host = gcoll_ydoc_get(e, "host"), *hosts = gcoll_ydoc_get(e, "hosts");
  char f[64], name[GCOLL_PLAN_HOST_MAX];
  snprintf(f, sizeof(f), "nodes[%d]", idx);
  if (gcoll_ydoc_expect(r->doc, e, YDOC_MAP, f, r->err, r->errlen) || only_keys(r, e, f, keys))
    return -1;
  if ((host == NULL) == (hosts == NULL))
    return rd_err(r, e, f, "needs exactly one of 'host' and 'hosts'");
  snprintf(f, sizeof(f), "nodes[%d].topology", idx);
  if (gcoll_ydoc_req(r->doc, e, "topology", &topo, r->err, r->errlen) ||
      gcoll_ydoc_expect(r->doc, topo, YDOC_SCALAR, f, r->err, r->errlen))
    return -1;
  int k = find_class(p, topo->scalar, nf->last_class);
  if (k < 0) return rd_err(r, topo, f, "topology class '%.64s' is not defined", topo->scalar);
  nf->last_class = k;
  int nlocal = p->classes[k].nlocal;
  snprintf(f, sizeof(f), "nodes[%d].ranks", idx);
  int64_t a = 0, b = -1;
  int *list = NULL, nlist = 0;
  char why[160];
  if (gcoll_ydoc_req(r->doc, e, "ranks", &ranks, r->err, r->errlen) ||
      gcoll_ydoc_expect(r->doc, ranks, YDOC_SCALAR, f, r->err, r->errlen))
    return -1;
  /* A-B: a block of ranks; else a rank list ("3-99995:12500", "0,4"),
   * for nodes of a cyclic or other non-block layout. */
  if (parse_range(ranks->scalar, (int64_t)p->nranks - 1, &a, &b) != 0 &&
      gcoll_ranklist_parse(ranks->scalar, p->nranks - 1, &list, &nlist, why, sizeof(why)) != 0)
    return rd_err(r, ranks, f, "expected A-B or a rank list with ranks 0..%d: %s", p->nranks - 1,
                  why);
  int64_t count = list != NULL ? nlist : b - a + 1;
  if (count % nlocal) {
    free(list);
    return rd_err(r, ranks, f, "%lld ranks is not a multiple of local_ranks %d of '%s'",
                  (long long)count, nlocal, p->classes[k].name);
  }
  if (count > (int64_t)p->nranks - nf->next_rank) {
    free(list);
    return rd_err(r, ranks, f, "more ranks than the plan's %d", p->nranks);
  }
  int64_t host_at = -1;   /* index of host_rank in this entry */
  for (int64_t i = 0; i < count; i++) {
    int rank = list != NULL ? list[i] : (int)(a + i);
    nf->rank_of_slot[nf->next_rank + i] = rank;
    nf->permuted |= rank != nf->next_rank + i;
    if (rank == nf->host_rank) host_at = i;
  }
  free(list);
  int64_t nh = count / nlocal, listed;
  if (host) {
    snprintf(f, sizeof(f), "nodes[%d].host", idx);
    if (gcoll_ydoc_str(r->doc, host, f, name, sizeof(name), r->err, r->errlen)) return -1;
    if (name[0] == '\0') return rd_err(r, host, f, "empty host name");
    listed = 1;
  } else {
    int cnt;
    snprintf(f, sizeof(f), "nodes[%d].hosts", idx);
    if (gcoll_ydoc_expect(r->doc, hosts, YDOC_SCALAR, f, r->err, r->errlen)) return -1;
    if (gcoll_hostlist_count(hosts->scalar, &cnt, name, sizeof(name)))
      return rd_err(r, hosts, f, "%s", name);
    listed = cnt;
  }
  if (listed != nh)
    return rd_err(r, host ? host : hosts, f, "names %lld node%s but its %lld ranks hold %lld",
                  (long long)listed, listed == 1 ? "" : "s", (long long)count, (long long)nh);
  if (nh > p->nnodes - nf->next_node)
    return rd_err(r, e, f, "more nodes than nodes_count %d", p->nnodes);
  for (int64_t j = 0; j < nh; j++) {
    p->node_class[nf->next_node + j] = k;
    p->node_first_rank[nf->next_node + j] = (int)(nf->next_rank + j * nlocal);
  }
  if (parse_domain(r, e, idx, p, nf->next_node, (int)nh)) return -1;
  if (host) {
    if ((nf->host_rank < 0 || host_at >= 0) && keep_host(r, p, nf, nf->next_node, name, host))
      return -1;
  } else if (nf->host_rank < 0) {
    char **names;
    int cnt;
    if (gcoll_hostlist_expand(hosts->scalar, &names, &cnt, name, sizeof(name)))
      return rd_err(r, hosts, f, "%s", name);
    for (int j = 0; j < cnt; j++) p->node_host[nf->next_node + j] = names[j];
    free(names);
  } else if (host_at >= 0) {
    int j = (int)(host_at / nlocal);
    if (gcoll_hostlist_nth(hosts->scalar, j, name, sizeof(name), name, sizeof(name)))
      return rd_err(r, hosts, f, "%s", name);
    if (keep_host(r, p, nf, nf->next_node + j, name, hosts)) return -1;
  }
  nf->next_node += (int)nh;
  nf->next_rank += (int)count;
  return 0;
}

static int parse_nodes(struct rd *r, const struct ydoc_node *root, struct gcoll_plan *p,
                       struct node_fill *nf) {
  const struct ydoc_node *nodes;
  if (gcoll_ydoc_req(r->doc, root, "nodes", &nodes, r->err, r->errlen) ||
      gcoll_ydoc_expect(r->doc, nodes, YDOC_SEQ, "nodes", r->err, r->errlen))
    return -1;
  for (size_t i = 0; i < gcoll_ydoc_count(nodes); i++) {
    if (i > (size_t)INT_MAX / 2) return rd_err(r, nodes, "nodes", "too many entries");
    if (parse_node_entry(r, gcoll_ydoc_item(nodes, i), (int)i, p, nf)) return -1;
  }
  if (nf->next_node != p->nnodes)
    return rd_err(r, nodes, "nodes", "lists %d nodes, nodes_count is %d", nf->next_node,
                  p->nnodes);
  if (nf->next_rank != p->nranks)
    return rd_err(r, nodes, "nodes", "hold %d ranks, ranks is %d", nf->next_rank, p->nranks);
  char why[160];
  if (nf->permuted && gcoll_plan_set_rank_order(p, nf->rank_of_slot, why, sizeof(why)) != 0)
    return rd_err(r, nodes, "nodes", "%s", why);
  return 0;
}

/* ---- ring and trees -------------------------------------------------------- */

static int order_item(struct rd *r, const struct ydoc_node *n, struct gcoll_plan *p, int *count,
                      unsigned char *seen) {
  int64_t a, b;
  if (gcoll_ydoc_expect(r->doc, n, YDOC_SCALAR, "ring.node_order", r->err, r->errlen)) return -1;
  for (const char *s = n->scalar; *s;) {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    char item[48];
    if (len == 0 || len >= sizeof(item) ||
        (memcpy(item, s, len), item[len] = '\0', parse_range(item, (int64_t)p->nnodes - 1, &a, &b)))
      return rd_err(r, n, "ring.node_order",
                    "expected node ranges like 0-5,7,6 with nodes 0..%d, found '%.40s'",
                    p->nnodes - 1, s);
    for (int64_t v = a; v <= b; v++) {
      if (seen[v])
        return rd_err(r, n, "ring.node_order", "node %lld appears twice (must be a "
                      "permutation of the nodes)", (long long)v);
      seen[v] = 1;
      p->ring_node_order[(*count)++] = (int)v;
    }
    s += len;
    if (*s == ',') {
      s++;
      if (*s == '\0') return rd_err(r, n, "ring.node_order", "ends with ','");
    }
  }
  return 0;
}

static int parse_ring(struct rd *r, const struct ydoc_node *root, struct gcoll_plan *p) {
  static const char *const keys[] = {"node_order", NULL};
  const struct ydoc_node *ring, *order;
  if (get_map(r, root, "ring", &ring) || only_keys(r, ring, "ring", keys)) return -1;
  if (gcoll_ydoc_req(r->doc, ring, "node_order", &order, r->err, r->errlen)) return -1;
  unsigned char *seen = calloc((size_t)p->nnodes, 1);
  int count = 0, rc = 0;
  if (seen == NULL) return rd_err(r, order, "ring.node_order", "out of memory");
  if (order->kind == YDOC_SEQ) {
    for (size_t i = 0; i < gcoll_ydoc_count(order) && rc == 0; i++)
      rc = order_item(r, gcoll_ydoc_item(order, i), p, &count, seen);
  } else if (order->kind == YDOC_SCALAR) {
    rc = order_item(r, order, p, &count, seen);
  } else {
    rc = rd_err(r, order, "ring.node_order", "expected a range list like 0-5,7,6");
  }
  free(seen);
  if (rc == 0 && count != p->nnodes)
    rc = rd_err(r, order, "ring.node_order", "has %d nodes, nodes_count is %d", count,
                p->nnodes);
  return rc;
}

/* Parent array with values in [-1, n) and at most two children per node, so
 * rank views can never overflow their child arrays. */
static int parse_tree(struct rd *r, const struct ydoc_node *tree, const char *which,
                      struct gcoll_plan *p, int *root, int *parent, int *children) {
  static const char *const t1_keys[] = {"root", "parent", NULL};
  static const char *const t2_keys[] = {"root", "parent", "construction", NULL};
  const struct ydoc_node *t, *par;
  char f[32];
  int64_t v;
  int is_t2 = strcmp(which, "t2") == 0;
  snprintf(f, sizeof(f), "tree.%s", which);
  if (get_map(r, tree, which, &t) || only_keys(r, t, f, is_t2 ? t2_keys : t1_keys)) return -1;
  snprintf(f, sizeof(f), "tree.%s.root", which);
  if (get_int(r, t, "root", f, 0, p->nnodes - 1, &v)) return -1;
  *root = (int)v;
  snprintf(f, sizeof(f), "tree.%s.parent", which);
  if (gcoll_ydoc_req(r->doc, t, "parent", &par, r->err, r->errlen) ||
      int_list(r, par, f, p->nnodes, -1, p->nnodes - 1, parent))
    return -1;
  memset(children, 0, (size_t)p->nnodes * sizeof(*children));
  for (int n = 0; n < p->nnodes; n++)
    if (parent[n] >= 0 && ++children[parent[n]] > 2)
      return rd_err(r, gcoll_ydoc_item(par, (size_t)n), f,
                    "node %d has more than 2 children in tree %s", parent[n], which);
  if (is_t2) {
    const struct ydoc_node *c;
    snprintf(f, sizeof(f), "tree.t2.construction");
    if (gcoll_ydoc_req(r->doc, t, "construction", &c, r->err, r->errlen) ||
        gcoll_ydoc_expect(r->doc, c, YDOC_SCALAR, f, r->err, r->errlen))
      return -1;
    if (strcmp(c->scalar, "mirror") == 0) p->t2_construction = GCOLL_T2_MIRROR;
    else if (strcmp(c->scalar, "shift") == 0) p->t2_construction = GCOLL_T2_SHIFT;
    else return rd_err(r, c, f, "expected mirror or shift, found '%.40s'", c->scalar);
  }
  return 0;
}

/* Checked before the node arrays are allocated: a file claiming a million
 * nodes must actually list a million parents. */
static int check_tree_sizes(struct rd *r, const struct ydoc_node *root, int nnodes,
                            const struct ydoc_node **tree) {
  static const char *const keys[] = {"kind", "t1", "t2", NULL};
  const struct ydoc_node *kind;
  if (get_map(r, root, "tree", tree) || only_keys(r, *tree, "tree", keys)) return -1;
  if (gcoll_ydoc_req(r->doc, *tree, "kind", &kind, r->err, r->errlen) ||
      gcoll_ydoc_expect(r->doc, kind, YDOC_SCALAR, "tree.kind", r->err, r->errlen))
    return -1;
  if (strcmp(kind->scalar, "double-binary") != 0)
    return rd_err(r, kind, "tree.kind", "expected double-binary, found '%.40s'", kind->scalar);
  for (int i = 0; i < 2; i++) {
    const char *which = i ? "t2" : "t1";
    const struct ydoc_node *t, *par;
    char f[32];
    snprintf(f, sizeof(f), "tree.%s.parent", which);
    if (get_map(r, *tree, which, &t) ||
        gcoll_ydoc_req(r->doc, t, "parent", &par, r->err, r->errlen) ||
        gcoll_ydoc_expect(r->doc, par, YDOC_SEQ, f, r->err, r->errlen))
      return -1;
    if (gcoll_ydoc_count(par) != (size_t)nnodes)
      return rd_err(r, par, f, "has %zu entries, nodes_count is %d", gcoll_ydoc_count(par), nnodes);
  }
  return 0;
}

/* ---- tuning ---------------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *out) {
  uint64_t v = 0;
  if (*s == '\0') return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    uint64_t d = (uint64_t)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

static int parse_tuning_row(struct rd *r, const struct ydoc_node *e, const char *f, int last,
                            int nchannels, struct gcoll_tuning_entry *t) {
  static const char *const keys[] = {"max_bytes", "algo", "proto", "channels", NULL};
  const struct ydoc_node *n;
  char ff[96];
  int64_t v;
  if (gcoll_ydoc_expect(r->doc, e, YDOC_MAP, f, r->err, r->errlen) || only_keys(r, e, f, keys))
    return -1;
  n = gcoll_ydoc_get(e, "max_bytes");
  snprintf(ff, sizeof(ff), "%s.max_bytes", f);
  if (n == NULL) {
    if (!last) return rd_err(r, e, ff, "missing (only the last row has no limit)");
    t->max_bytes = UINT64_MAX;
  } else {
    if (last) return rd_err(r, n, ff, "the last row must have no max_bytes (no limit)");
    if (gcoll_ydoc_expect(r->doc, n, YDOC_SCALAR, ff, r->err, r->errlen)) return -1;
    if (parse_u64(n->scalar, &t->max_bytes) || t->max_bytes == UINT64_MAX)
      return rd_err(r, n, ff, "expected a byte count below 2^64-1, found '%.40s'", n->scalar);
  }
  snprintf(ff, sizeof(ff), "%s.algo", f);
  if (gcoll_ydoc_req(r->doc, e, "algo", &n, r->err, r->errlen) ||
      gcoll_ydoc_expect(r->doc, n, YDOC_SCALAR, ff, r->err, r->errlen))
    return -1;
  int a = gcoll_algo_from_name(n->scalar);
  if (a < 0) return rd_err(r, n, ff, "expected ring, tree or nvls, found '%.40s'", n->scalar);
  t->algo = (enum gcoll_algo)a;
  snprintf(ff, sizeof(ff), "%s.proto", f);
  if (gcoll_ydoc_req(r->doc, e, "proto", &n, r->err, r->errlen) ||
      gcoll_ydoc_expect(r->doc, n, YDOC_SCALAR, ff, r->err, r->errlen))
    return -1;
  int pr = gcoll_proto_from_name(n->scalar);
  if (pr < 0) return rd_err(r, n, ff, "expected simple, ll or ll128, found '%.40s'", n->scalar);
  t->proto = (enum gcoll_proto)pr;
  snprintf(ff, sizeof(ff), "%s.channels", f);
  if (get_int(r, e, "channels", ff, 1, nchannels, &v)) return -1;
  t->nchannels = (int)v;
  return 0;
}

static int parse_tuning(struct rd *r, const struct ydoc_node *root, struct gcoll_plan *p) {
  const struct ydoc_node *tun;
  if (get_map(r, root, "tuning", &tun)) return -1;
  for (size_t i = 0; i < gcoll_ydoc_count(tun); i++)
    if (gcoll_coll_from_name(gcoll_ydoc_key(tun, i)) < 0)
      return rd_err(r, tun->items[2 * i], gcoll_ydoc_key(tun, i), "unknown collective in tuning");
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    const char *cname = gcoll_coll_name((enum gcoll_coll)c);
    const struct ydoc_node *rows;
    char f[64];
    snprintf(f, sizeof(f), "tuning.%s", cname);
    if (gcoll_ydoc_req(r->doc, tun, cname, &rows, r->err, r->errlen) ||
        gcoll_ydoc_expect(r->doc, rows, YDOC_SEQ, f, r->err, r->errlen))
      return -1;
    size_t n = gcoll_ydoc_count(rows);
    if (n < 1 || n > GCOLL_MAX_TUNING)
      return rd_err(r, rows, f, "has %zu rows, expected 1..%d", n, GCOLL_MAX_TUNING);
    for (size_t i = 0; i < n; i++) {
      char fr[64];
      snprintf(fr, sizeof(fr), "tuning.%s[%zu]", cname, i);
      if (parse_tuning_row(r, gcoll_ydoc_item(rows, i), fr, i + 1 == n, p->nchannels,
                           &p->tuning[c][i]))
        return -1;
      if (i > 0 && p->tuning[c][i].max_bytes <= p->tuning[c][i - 1].max_bytes)
        return rd_err(r, gcoll_ydoc_item(rows, i), fr, "max_bytes must increase from row to row");
    }
    p->ntuning[c] = (int)n;
  }
  return 0;
}

/* ---- header ---------------------------------------------------------------- */

static int parse_version(struct rd *r, const struct ydoc_node *root) {
  const struct ydoc_node *n;
  int64_t v;
  if (root == NULL) return rd_err(r, NULL, NULL, "empty file: not a gcoll plan");
  if (gcoll_ydoc_expect(r->doc, root, YDOC_MAP, "gcoll-plan", r->err, r->errlen)) return -1;
  n = gcoll_ydoc_get(root, "gcoll-plan");
  if (n == NULL) return rd_err(r, root, "gcoll-plan", "missing: not a gcoll plan file");
  if (gcoll_ydoc_int(r->doc, n, "gcoll-plan", 0, INT_MAX, &v, r->err, r->errlen)) return -1;
  if (v != GCOLL_PLAN_VERSION)
    return rd_err(r, n, "gcoll-plan", "unsupported plan version %lld (this gcoll reads %d)",
                  (long long)v, GCOLL_PLAN_VERSION);
  return 0;
}

static int parse_job(struct rd *r, const struct ydoc_node *root, struct gcoll_plan_job *job) {
  static const char *const keys[] = {"id", "step", "created", NULL};
  const struct ydoc_node *j = gcoll_ydoc_get(root, "job"), *n;
  job->id = job->step = -1;
  job->created[0] = '\0';
  if (j == NULL) return 0;
  if (gcoll_ydoc_expect(r->doc, j, YDOC_MAP, "job", r->err, r->errlen) ||
      only_keys(r, j, "job", keys))
    return -1;
  if ((n = gcoll_ydoc_get(j, "id")) &&
      gcoll_ydoc_int(r->doc, n, "job.id", 0, INT64_MAX, &job->id, r->err, r->errlen))
    return -1;
  if ((n = gcoll_ydoc_get(j, "step")) &&
      gcoll_ydoc_int(r->doc, n, "job.step", 0, INT64_MAX, &job->step, r->err, r->errlen))
    return -1;
  if ((n = gcoll_ydoc_get(j, "created")) &&
      gcoll_ydoc_str(r->doc, n, "job.created", job->created, sizeof(job->created), r->err,
                     r->errlen))
    return -1;
  return 0;
}

static int parse_header(struct rd *r, const struct ydoc_node *root, struct gcoll_plan *p) {
  static const char *const keys[] = {"gcoll-plan", "generator", "job", "ranks", "nodes_count",
                                     "channels", "topologies", "nodes", "ring", "tree",
                                     "tuning", NULL};
  const struct ydoc_node *n;
  int64_t v;
  if (parse_version(r, root) || only_keys(r, root, "the plan", keys)) return -1;
  p->version = GCOLL_PLAN_VERSION;
  if (gcoll_ydoc_req(r->doc, root, "generator", &n, r->err, r->errlen) ||
      gcoll_ydoc_str(r->doc, n, "generator", p->generator, sizeof(p->generator), r->err, r->errlen))
    return -1;
  if (parse_job(r, root, &p->job)) return -1;
  if (get_int(r, root, "ranks", "ranks", 1, GCOLL_MAX_RANKS, &v)) return -1;
  p->nranks = (int)v;
  if (get_int(r, root, "nodes_count", "nodes_count", 1, GCOLL_MAX_NODES, &v)) return -1;
  p->nnodes = (int)v;
  if (get_int(r, root, "channels", "channels", 2, GCOLL_MAX_CHANNELS, &v)) return -1;
  if (v % 2) {
    gcoll_ydoc_req(r->doc, root, "channels", &n, r->err, r->errlen);
    return rd_err(r, n, "channels", "%lld is odd (channels come in duplicated pairs)",
                  (long long)v);
  }
  p->nchannels = (int)v;
  if (p->nnodes > p->nranks)
    return rd_err(r, root, "nodes_count", "%d nodes for %d ranks", p->nnodes, p->nranks);
  return 0;
}

struct gcoll_plan *gcoll_plan_from_ydoc(const struct ydoc *doc, int host_rank, char *host_out,
                                        size_t host_outlen, char *err, size_t errlen) {
  struct rd r = {doc, err, errlen};
  const struct ydoc_node *root = doc->root, *tree;
  struct node_fill nf = {0, 0, -1, host_rank, host_out, host_outlen, NULL, 0};
  int *children = NULL;
  struct gcoll_plan *p = gcoll_plan_new();
  if (p == NULL) {
    rd_err(&r, root, NULL, "out of memory");
    return NULL;
  }
  if (host_out && host_outlen) host_out[0] = '\0';
  if (parse_header(&r, root, p) || parse_classes(&r, root, p) ||
      check_tree_sizes(&r, root, p->nnodes, &tree))
    goto fail;
  if (gcoll_plan_alloc_nodes(p, p->nnodes) != 0 ||
      (children = malloc((size_t)p->nnodes * sizeof(*children))) == NULL ||
      (nf.rank_of_slot = malloc((size_t)p->nranks * sizeof(int))) == NULL) {
    rd_err(&r, root, "nodes_count", "out of memory for %d nodes", p->nnodes);
    goto fail;
  }
  if (parse_nodes(&r, root, p, &nf) || parse_ring(&r, root, p) ||
      parse_tree(&r, tree, "t1", p, &p->t1_root, p->t1_parent, children) ||
      parse_tree(&r, tree, "t2", p, &p->t2_root, p->t2_parent, children) ||
      parse_tuning(&r, root, p))
    goto fail;
  free(children);
  free(nf.rank_of_slot);
  return p;
fail:
  free(children);
  free(nf.rank_of_slot);
  gcoll_plan_free(p);
  return NULL;
}

struct gcoll_plan *gcoll_plan_read_mem(const char *buf, size_t len, const char *what,
                                       char *err, size_t errlen) {
  struct ydoc doc;
  if (gcoll_ydoc_parse(&doc, buf, len, what, err, errlen)) return NULL;
  struct gcoll_plan *p = gcoll_plan_from_ydoc(&doc, -1, NULL, 0, err, errlen);
  gcoll_ydoc_free(&doc);
  return p;
}

struct gcoll_plan *gcoll_plan_read_file(const char *path, char *err, size_t errlen) {
  char *buf;
  size_t len;
  if (gcoll_read_file(path, PLAN_FILE_MAX, &buf, &len, err, errlen)) return NULL;
  struct gcoll_plan *p = gcoll_plan_read_mem(buf, len, path, err, errlen);
  free(buf);
  return p;
}
