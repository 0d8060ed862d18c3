/* Slurm's topology.conf as a fabric (see fabric.h). */
#include "graph/fabric.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "graph/plan.h"
#include "graph/yaml_doc.h"

#define FABRIC_MAX_BYTES ((size_t)16 << 20)
#define FABRIC_MAX_SWITCHES 65536

struct sw {
  char *name;
  int line;
  int parent;            /* -1: a top switch */
  int level;             /* -1 until computed */
  char *children_list;   /* Switches=, resolved after the whole file is read */
  int *children;
  int nchildren;
};

struct host_at {
  char *name;
  int leaf;
};

struct gcoll_fabric {
  struct sw *sw;
  int nsw, capsw;
  struct host_at *hosts;   /* sorted by name */
  int nhosts, caphosts;
  int blocks;              /* BlockName= lines (topology/block) */
  int top;                 /* level of the top (a real or the virtual switch) */
  int virtual_top;         /* several top switches, or blocks: one above them */
};

static int fail(char *err, size_t errlen, const char *name, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(char *err, size_t errlen, const char *name, int line, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "%s:%d: %s", name, line, msg);
  return -1;
}

void gcoll_fabric_free(struct gcoll_fabric *f) {
  if (f == NULL) return;
  for (int i = 0; i < f->nsw; i++) {
    free(f->sw[i].name);
    free(f->sw[i].children_list);
    free(f->sw[i].children);
  }
  for (int i = 0; i < f->nhosts; i++) free(f->hosts[i].name);
  free(f->sw);
  free(f->hosts);
  free(f);
}

static int find_switch(const struct gcoll_fabric *f, const char *name) {
  for (int i = 0; i < f->nsw; i++)
    if (strcmp(f->sw[i].name, name) == 0) return i;
  return -1;
}

static int add_hosts(struct gcoll_fabric *f, const char *list, int leaf, const char *name,
                     int line, char *err, size_t errlen) {
  char **hosts = NULL, why[256];
  int n = 0;
  if (gcoll_hostlist_expand(list, &hosts, &n, why, sizeof(why)) != 0)
    return fail(err, errlen, name, line, "Nodes=%.80s: %s", list, why);
  int rc = 0;
  if (f->nhosts + n > f->caphosts) {
    int cap = f->caphosts ? f->caphosts : 64;
    while (cap < f->nhosts + n) cap *= 2;
    struct host_at *more = realloc(f->hosts, (size_t)cap * sizeof(*more));
    if (more == NULL) rc = fail(err, errlen, name, line, "out of memory");
    else f->hosts = more, f->caphosts = cap;
  }
  for (int i = 0; i < n && rc == 0; i++) {
    f->hosts[f->nhosts].name = hosts[i];
    f->hosts[f->nhosts++].leaf = leaf;
    hosts[i] = NULL;
  }
  gcoll_hostlist_free(hosts, n);
  return rc;
}

/* One SwitchName= or BlockName= line, split into KEY=VALUE words. */
static int parse_line(struct gcoll_fabric *f, char *s, const char *name, int line, char *err,
                      size_t errlen) {
  char *sw_name = NULL, *nodes = NULL, *children = NULL;
  int block = 0;
  for (char *save = NULL, *w = strtok_r(s, " \t\r", &save); w != NULL;
       w = strtok_r(NULL, " \t\r", &save)) {
    char *eq = strchr(w, '=');
    if (eq == NULL || eq == w || eq[1] == '\0')
      return fail(err, errlen, name, line, "'%.60s' is not KEY=VALUE", w);
    *eq = '\0';
    char *v = eq + 1;
    if (strcasecmp(w, "SwitchName") == 0 || strcasecmp(w, "BlockName") == 0) {
      if (sw_name != NULL) return fail(err, errlen, name, line, "two names on one line");
      sw_name = v;
      block = strcasecmp(w, "BlockName") == 0;
    } else if (strcasecmp(w, "Nodes") == 0) {
      nodes = v;
    } else if (strcasecmp(w, "Switches") == 0) {
      children = v;
    }
    /* LinkSpeed, BlockSizes and the rest do not change the order. */
  }
  if (sw_name == NULL) {
    if (nodes != NULL || children != NULL)
      return fail(err, errlen, name, line, "Nodes= or Switches= without SwitchName=/BlockName=");
    return 0;   /* BlockSizes=... alone, or only unknown keys */
  }
  if (block && children != NULL)
    return fail(err, errlen, name, line, "block %.60s: a block has no Switches=", sw_name);
  if ((block && f->nsw > f->blocks) || (!block && f->blocks > 0))
    return fail(err, errlen, name, line, "SwitchName and BlockName lines mixed in one file");
  if (find_switch(f, sw_name) >= 0)
    return fail(err, errlen, name, line, "%.60s is named twice", sw_name);
  if (f->nsw == FABRIC_MAX_SWITCHES)
    return fail(err, errlen, name, line, "more than %d switches", FABRIC_MAX_SWITCHES);
  if (f->nsw == f->capsw) {
    int cap = f->capsw ? f->capsw * 2 : 16;
    struct sw *more = realloc(f->sw, (size_t)cap * sizeof(*more));
    if (more == NULL) return fail(err, errlen, name, line, "out of memory");
    f->sw = more;
    f->capsw = cap;
  }
  struct sw *x = &f->sw[f->nsw];
  memset(x, 0, sizeof(*x));
  x->name = strdup(sw_name);
  x->children_list = children != NULL ? strdup(children) : NULL;
  x->line = line;
  x->parent = -1;
  x->level = -1;
  if (x->name == NULL || (children != NULL && x->children_list == NULL)) {
    free(x->name);
    free(x->children_list);
    return fail(err, errlen, name, line, "out of memory");
  }
  f->nsw++;
  f->blocks += block;
  return nodes != NULL ? add_hosts(f, nodes, f->nsw - 1, name, line, err, errlen) : 0;
}

/* Switches= names resolved to indices; each switch below one parent. */
static int link_switches(struct gcoll_fabric *f, const char *name, char *err, size_t errlen) {
  for (int i = 0; i < f->nsw; i++) {
    struct sw *x = &f->sw[i];
    if (x->children_list == NULL) continue;
    char **kids = NULL, why[256];
    int n = 0;
    if (gcoll_hostlist_expand(x->children_list, &kids, &n, why, sizeof(why)) != 0)
      return fail(err, errlen, name, x->line, "Switches=%.80s: %s", x->children_list, why);
    int rc = 0;
    x->children = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    if (x->children == NULL) rc = fail(err, errlen, name, x->line, "out of memory");
    for (int k = 0; k < n && rc == 0; k++) {
      int c = find_switch(f, kids[k]);
      if (c < 0) rc = fail(err, errlen, name, x->line, "switch %.60s is not defined", kids[k]);
      else if (c == i) rc = fail(err, errlen, name, x->line, "%.60s lists itself", kids[k]);
      else if (f->sw[c].parent >= 0)
        rc = fail(err, errlen, name, x->line, "switch %.60s is below %.60s and %.60s", kids[k],
                  f->sw[f->sw[c].parent].name, x->name);
      else {
        f->sw[c].parent = i;
        x->children[x->nchildren++] = c;
      }
    }
    gcoll_hostlist_free(kids, n);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Levels from the leaves up; a cycle has no top and is refused. */
static int set_levels(struct gcoll_fabric *f, const char *name, char *err, size_t errlen) {
  int ntop = 0;
  for (int i = 0; i < f->nsw; i++) {
    int depth = 0;
    for (int j = i; f->sw[j].parent >= 0; j = f->sw[j].parent)
      if (++depth > f->nsw)
        return fail(err, errlen, name, f->sw[i].line, "switch %.60s is in a cycle",
                    f->sw[i].name);
    ntop += f->sw[i].parent < 0;
  }
  for (int i = 0; i < f->nsw; i++)
    if (f->sw[i].nchildren == 0) {
      int level = 0;
      for (int j = i; j >= 0; j = f->sw[j].parent, level++)
        if (f->sw[j].level < level) f->sw[j].level = level;
    }
  f->top = 0;
  for (int i = 0; i < f->nsw; i++)
    if (f->sw[i].parent < 0 && f->sw[i].level > f->top) f->top = f->sw[i].level;
  f->virtual_top = ntop > 1;
  if (f->virtual_top) f->top++;
  return 0;
}

static int cmp_host(const void *a, const void *b) {
  return strcmp(((const struct host_at *)a)->name, ((const struct host_at *)b)->name);
}

struct gcoll_fabric *gcoll_fabric_parse(const char *text, size_t len, const char *name, char *err,
                                        size_t errlen) {
  struct gcoll_fabric *f = calloc(1, sizeof(*f));
  char *copy = malloc(len + 1);
  int rc = f == NULL || copy == NULL ? fail(err, errlen, name, 0, "out of memory") : 0;
  if (copy != NULL) {
    memcpy(copy, text, len);
    copy[len] = '\0';
  }
  if (rc == 0 && memchr(text, '\0', len) != NULL)
    rc = fail(err, errlen, name, 1, "a NUL byte in the file: not a topology.conf");
  int line = 0;
  for (char *p = copy; rc == 0 && p != NULL && *p != '\0';) {
    char *nl = strchr(p, '\n');
    if (nl != NULL) *nl = '\0';
    line++;
    char *hash = strchr(p, '#');
    if (hash != NULL) *hash = '\0';
    rc = parse_line(f, p, name, line, err, errlen);
    p = nl != NULL ? nl + 1 : NULL;
  }
  if (rc == 0 && f->nsw == 0) rc = fail(err, errlen, name, line, "no SwitchName= or BlockName=");
  if (rc == 0) rc = link_switches(f, name, err, errlen);
  if (rc == 0) rc = set_levels(f, name, err, errlen);
  if (rc == 0) {
    qsort(f->hosts, (size_t)f->nhosts, sizeof(*f->hosts), cmp_host);
    for (int i = 1; i < f->nhosts && rc == 0; i++)
      if (strcmp(f->hosts[i].name, f->hosts[i - 1].name) == 0)
        rc = fail(err, errlen, name, f->sw[f->hosts[i].leaf].line, "node %.60s is under %.60s "
                  "and %.60s", f->hosts[i].name, f->sw[f->hosts[i - 1].leaf].name,
                  f->sw[f->hosts[i].leaf].name);
  }
  free(copy);
  if (rc != 0) {
    gcoll_fabric_free(f);
    return NULL;
  }
  return f;
}

struct gcoll_fabric *gcoll_fabric_read_file(const char *path, char *err, size_t errlen) {
  char *buf = NULL;
  size_t len = 0;
  if (gcoll_read_file(path, FABRIC_MAX_BYTES, &buf, &len, err, errlen) != 0) return NULL;
  struct gcoll_fabric *f = gcoll_fabric_parse(buf, len, path, err, errlen);
  free(buf);
  return f;
}

int gcoll_fabric_levels(const struct gcoll_fabric *f) { return f->top; }

/* The leaf holding host, -1 when the fabric does not name it. */
static int leaf_of(const struct gcoll_fabric *f, const char *host) {
  struct host_at key = {.name = (char *)host};
  const struct host_at *h =
      bsearch(&key, f->hosts, (size_t)f->nhosts, sizeof(*f->hosts), cmp_host);
  return h != NULL ? h->leaf : -1;
}

int *gcoll_fabric_block_domains(const struct gcoll_fabric *f, const char *const *hosts, int n) {
  if (f->blocks == 0) return NULL;
  int *d = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  for (int i = 0; d != NULL && i < n; i++) d[i] = leaf_of(f, hosts[i]);
  return d;
}

int gcoll_fabric_cross_level(const struct gcoll_fabric *f, const char *a, const char *b) {
  int x = leaf_of(f, a), y = leaf_of(f, b);
  if (x < 0 || y < 0) return f->top;
  while (x != y) {
    /* Climb the lower one; a top switch climbs into the virtual top. */
    if (f->sw[x].level <= f->sw[y].level) x = f->sw[x].parent;
    else y = f->sw[y].parent;
    if (x < 0 || y < 0) return f->top;
  }
  return f->sw[x].level;
}

/* Depth-first: a switch's own hosts, then its children in the file's order. */
static void emit(const struct gcoll_fabric *f, int s, const int *start, const int *bucket,
                 int *order, int *at) {
  for (int i = start[s]; i < start[s + 1]; i++) order[(*at)++] = bucket[i];
  for (int k = 0; k < f->sw[s].nchildren; k++)
    emit(f, f->sw[s].children[k], start, bucket, order, at);
}

int gcoll_fabric_order(const struct gcoll_fabric *f, const char *const *hosts, int n, int *order) {
  int *leaf = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  int *start = calloc((size_t)f->nsw + 2, sizeof(int));
  int *bucket = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  if (leaf == NULL || start == NULL || bucket == NULL) {
    free(leaf);
    free(start);
    free(bucket);
    return -1;
  }
  /* Hosts by leaf, each leaf's in hosts[] order (a counting sort); those
   * outside the fabric in the extra bucket nsw. */
  for (int i = 0; i < n; i++) {
    leaf[i] = leaf_of(f, hosts[i]);
    if (leaf[i] < 0) leaf[i] = f->nsw;
    start[leaf[i] + 1]++;
  }
  for (int s = 0; s <= f->nsw; s++) start[s + 1] += start[s];
  int *fill = malloc(((size_t)f->nsw + 1) * sizeof(int));
  if (fill == NULL) {
    free(leaf);
    free(start);
    free(bucket);
    return -1;
  }
  memcpy(fill, start, ((size_t)f->nsw + 1) * sizeof(int));
  for (int i = 0; i < n; i++) bucket[fill[leaf[i]]++] = i;
  int at = 0;
  for (int s = 0; s < f->nsw; s++)
    if (f->sw[s].parent < 0) emit(f, s, start, bucket, order, &at);
  for (int i = start[f->nsw]; i < start[f->nsw + 1]; i++) order[at++] = bucket[i];
  free(fill);
  free(leaf);
  free(start);
  free(bucket);
  return 0;
}
