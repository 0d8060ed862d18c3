/* Writes a plan as YAML (docs/plan-format.md) with libyaml's emitter.
 * Per-channel maps, node runs and number lists use flow style so a
 * 100,000-rank plan stays around a few hundred kilobytes and each channel
 * reads as one line. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "graph/plan.h"
#include "graph/yaml_doc.h"

/* A hosts expression longer than this starts a new node entry, keeping
 * every value far below the reader's scalar limit. */
#define PLAN_HOSTS_EXPR_MAX 1024

struct emit {
  yaml_emitter_t em;
  int failed;
  char *err;
  size_t errlen;
};

static int emit_fail(struct emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int emit_fail(struct emit *e, const char *fmt, ...) {
  if (!e->failed && e->err && e->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, e->errlen, fmt, ap);
    va_end(ap);
  }
  e->failed = 1;
  return -1;
}

static void emit_event(struct emit *e, yaml_event_t *ev) {
  if (e->failed) {
    yaml_event_delete(ev);
    return;
  }
  if (!yaml_emitter_emit(&e->em, ev))
    emit_fail(e, "cannot write plan: %s", e->em.problem ? e->em.problem : "emitter error");
}

static void scalar_styled(struct emit *e, const char *s, yaml_scalar_style_t style) {
  yaml_event_t ev;
  if (e->failed) return;
  if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                    style)) {
    emit_fail(e, "cannot write plan: out of memory");
    return;
  }
  emit_event(e, &ev);
}

static void scalar(struct emit *e, const char *s) {
  scalar_styled(e, s, YAML_ANY_SCALAR_STYLE);
}

static void quoted(struct emit *e, const char *s) {
  scalar_styled(e, s, YAML_DOUBLE_QUOTED_SCALAR_STYLE);
}

static void scalar_int(struct emit *e, long long v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%lld", v);
  scalar(e, buf);
}

/* Shortest text that reads back as the same double. */
static void scalar_double(struct emit *e, double v) {
  char buf[40];
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  scalar(e, buf);
}

static void map_start(struct emit *e, int flow) {
  yaml_event_t ev;
  if (e->failed) return;
  yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                      flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
  emit_event(e, &ev);
}

static void map_end(struct emit *e) {
  yaml_event_t ev;
  if (e->failed) return;
  yaml_mapping_end_event_initialize(&ev);
  emit_event(e, &ev);
}

static void seq_start(struct emit *e, int flow) {
  yaml_event_t ev;
  if (e->failed) return;
  yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                       flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
  emit_event(e, &ev);
}

static void seq_end(struct emit *e) {
  yaml_event_t ev;
  if (e->failed) return;
  yaml_sequence_end_event_initialize(&ev);
  emit_event(e, &ev);
}

static void int_list(struct emit *e, const int *v, int n) {
  seq_start(e, 1);
  for (int i = 0; i < n; i++) scalar_int(e, v[i]);
  seq_end(e);
}

static void key_int(struct emit *e, const char *k, long long v) {
  scalar(e, k);
  scalar_int(e, v);
}

static void key_str(struct emit *e, const char *k, const char *v) {
  scalar(e, k);
  scalar(e, v);
}

/* ---- checks the writer needs to index safely ----------------------------- */

static int check_writable(struct emit *e, const struct gcoll_plan *p) {
  int nsearch = p->nchannels / 2;
  if (p->nnodes < 1 || p->nranks < 1 || p->nclasses < 1 || p->nclasses > GCOLL_MAX_CLASSES)
    return emit_fail(e, "cannot write plan: %d nodes, %d ranks, %d classes", p->nnodes,
                     p->nranks, p->nclasses);
  if (p->nchannels < 2 || p->nchannels > GCOLL_MAX_CHANNELS || p->nchannels % 2)
    return emit_fail(e, "cannot write plan: %d channels (must be even, 2..%d)", p->nchannels,
                     GCOLL_MAX_CHANNELS);
  if (!p->node_host || !p->node_class || !p->node_first_rank || !p->ring_node_order ||
      !p->t1_parent || !p->t2_parent)
    return emit_fail(e, "cannot write plan: node arrays missing");
  for (int k = 0; k < p->nclasses; k++) {
    const struct gcoll_plan_class *c = &p->classes[k];
    if (c->nlocal < 1 || c->nlocal > GCOLL_MAX_LOCAL_RANKS)
      return emit_fail(e, "cannot write plan: class '%s' has %d local ranks", c->name,
                       c->nlocal);
    if (c->graph.nchannels != nsearch)
      return emit_fail(e, "cannot write plan: class '%s' has %d searched channels, the plan "
                       "%d channels", c->name, c->graph.nchannels, p->nchannels);
    if (c->graph.nvls_nheads < 0 || c->graph.nvls_nheads > GCOLL_MAX_NVLS_HEADS)
      return emit_fail(e, "cannot write plan: class '%s' has %d NVLS heads", c->name,
                       c->graph.nvls_nheads);
  }
  for (int n = 0; n < p->nnodes; n++) {
    if (p->node_class[n] < 0 || p->node_class[n] >= p->nclasses)
      return emit_fail(e, "cannot write plan: node %d has class %d", n, p->node_class[n]);
    if (p->node_host[n] == NULL)
      return emit_fail(e, "cannot write plan: node %d has no host name", n);
    int expect = n == 0 ? 0 : p->node_first_rank[n - 1] + p->classes[p->node_class[n - 1]].nlocal;
    if (p->node_first_rank[n] != expect)
      return emit_fail(e, "cannot write plan: node %d starts at rank %d, expected %d", n,
                       p->node_first_rank[n], expect);
  }
  for (int c = 0; c < GCOLL_NCOLLS; c++)
    if (p->ntuning[c] < 0 || p->ntuning[c] > GCOLL_MAX_TUNING)
      return emit_fail(e, "cannot write plan: %d tuning rows for %s", p->ntuning[c],
                       gcoll_coll_name((enum gcoll_coll)c));
  return 0;
}

/* ---- sections -------------------------------------------------------------- */

static void write_job(struct emit *e, const struct gcoll_plan_job *job) {
  if (job->id < 0 && job->step < 0 && job->created[0] == '\0') return;
  scalar(e, "job");
  map_start(e, 1);
  if (job->id >= 0) key_int(e, "id", job->id);
  if (job->step >= 0) key_int(e, "step", job->step);
  if (job->created[0]) {
    scalar(e, "created");
    quoted(e, job->created);
  }
  map_end(e);
}

static void write_class(struct emit *e, const struct gcoll_plan_class *c, int nsearch) {
  char hash[16];
  const struct gcoll_intra_graph *g = &c->graph;
  scalar(e, c->name);
  map_start(e, 0);
  snprintf(hash, sizeof(hash), "%08" PRIx32, c->hash);
  scalar(e, "hash");
  quoted(e, hash);
  key_int(e, "local_ranks", c->nlocal);
  key_str(e, "intra", gcoll_edge_name(c->intra_edge));
  if (c->has_gpu_map) {
    scalar(e, "gpus");
    int_list(e, c->gpu, c->nlocal);
  }
  if (c->has_gpu_busids) {
    scalar(e, "gpu_busids");
    seq_start(e, 1);
    for (int i = 0; i < c->nlocal; i++) quoted(e, c->gpu_busid[i]);
    seq_end(e);
  }
  scalar(e, "bandwidth");
  map_start(e, 1);
  scalar(e, "ring");
  scalar_double(e, g->ring_bw);
  scalar(e, "net");
  scalar_double(e, g->net_bw);
  map_end(e);
  scalar(e, "ring");
  seq_start(e, 0);
  for (int s = 0; s < nsearch; s++) {
    map_start(e, 1);
    scalar(e, "order");
    int_list(e, g->ch[s].ring, c->nlocal);
    if (g->ch[s].ring_nic_in_name[0]) key_str(e, "nic_in", g->ch[s].ring_nic_in_name);
    if (g->ch[s].ring_nic_out_name[0]) key_str(e, "nic_out", g->ch[s].ring_nic_out_name);
    if (g->ch[s].ring_nic_in_name[0] && g->ch[s].ring_rail_in >= 0)
      key_int(e, "rail_in", g->ch[s].ring_rail_in);
    if (g->ch[s].ring_nic_out_name[0] && g->ch[s].ring_rail_out >= 0)
      key_int(e, "rail_out", g->ch[s].ring_rail_out);
    if (g->ch[s].ring_nic_out_name[0] && g->ch[s].ring_pxn >= 0)
      key_int(e, "pxn", g->ch[s].ring_pxn);
    map_end(e);
  }
  seq_end(e);
  scalar(e, "tree");
  seq_start(e, 0);
  for (int s = 0; s < nsearch; s++) {
    map_start(e, 1);
    scalar(e, "chain");
    int_list(e, g->ch[s].chain, c->nlocal);
    if (g->ch[s].chain_nic_name[0]) key_str(e, "nic", g->ch[s].chain_nic_name);
    if (g->ch[s].chain_nic_name[0] && g->ch[s].chain_rail >= 0)
      key_int(e, "rail", g->ch[s].chain_rail);
    map_end(e);
  }
  seq_end(e);
  if (g->nvls_nheads > 0) {
    scalar(e, "nvls");
    map_start(e, 1);
    scalar(e, "heads");
    int_list(e, g->nvls_heads, g->nvls_nheads);
    map_end(e);
  }
  if (g->nleft_out > 0) {
    scalar(e, "nics_left_out");
    seq_start(e, 0);
    for (int i = 0; i < g->nleft_out; i++) {
      map_start(e, 1);
      key_str(e, "nic", g->left_out[i].nic);
      key_str(e, "reason", g->left_out[i].why);
      map_end(e);
    }
    seq_end(e);
  }
  map_end(e);
}

static void write_rank_range(struct emit *e, int a, int b) {
  char buf[48];
  if (a == b) snprintf(buf, sizeof(buf), "%d", a);
  else snprintf(buf, sizeof(buf), "%d-%d", a, b);
  scalar(e, buf);
}

/* Whether slots [first, first + n) hold consecutive job ranks. */
static int is_block(const struct gcoll_plan *p, int first, int n) {
  for (int j = 1; j < n && p->rank_of_slot != NULL; j++)
    if (p->rank_of_slot[first + j] != p->rank_of_slot[first] + j) return 0;
  return 1;
}

static void write_nodes(struct emit *e, const struct gcoll_plan *p) {
  scalar(e, "nodes");
  seq_start(e, 0);
  for (int i = 0; i < p->nnodes && !e->failed;) {
    int k = p->node_class[i], same = i + 1, dom = gcoll_plan_node_domain(p, i);
    while (same < p->nnodes && p->node_class[same] == k && gcoll_plan_node_domain(p, same) == dom)
      same++;
    int m = gcoll_hostlist_single_run(p->node_host + i, same - i, PLAN_HOSTS_EXPR_MAX);
    /* Under a rank order a run is written as one entry only while its
     * ranks stay one block; a node that is not a block lists its ranks. */
    int first = p->node_first_rank[i];
    int block = is_block(p, first, m * p->classes[k].nlocal);
    if (!block) {
      m = 1;
      block = is_block(p, first, p->classes[k].nlocal);
    }
    map_start(e, 1);
    if (m <= 1) {
      m = 1;
      scalar(e, "host");
      scalar(e, p->node_host[i]);
    } else {
      char *expr = gcoll_hostlist_compress(p->node_host + i, m);
      if (expr == NULL) {
        emit_fail(e, "cannot write plan: out of memory");
        return;
      }
      scalar(e, "hosts");
      quoted(e, expr);
      free(expr);
    }
    key_str(e, "topology", p->classes[k].name);
    if (dom >= 0) key_int(e, "domain", dom);
    scalar(e, "ranks");
    if (block) {
      write_rank_range(e, gcoll_plan_rank_at(p, first),
                       gcoll_plan_rank_at(p, first) + m * p->classes[k].nlocal - 1);
    } else {
      int ranks[GCOLL_MAX_LOCAL_RANKS];
      for (int j = 0; j < p->classes[k].nlocal; j++) ranks[j] = gcoll_plan_rank_at(p, first + j);
      char *list = gcoll_ranklist_format(ranks, p->classes[k].nlocal);
      if (list == NULL) {
        emit_fail(e, "cannot write plan: out of memory");
        return;
      }
      quoted(e, list);
      free(list);
    }
    map_end(e);
    i += m;
  }
  seq_end(e);
}

/* "0-5,7,6": ascending runs collapse to A-B. Returns a malloc'd string and
 * the number of items in *nitems. */
static char *range_list(const int *v, int n, int *nitems) {
  size_t cap = 64, len = 0;
  char *s = malloc(cap);
  *nitems = 0;
  if (s == NULL) return NULL;
  s[0] = '\0';
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && v[j] == v[j - 1] + 1) j++;
    char item[40];
    int k = j - i > 1 ? snprintf(item, sizeof(item), "%s%d-%d", i ? "," : "", v[i], v[j - 1])
                      : snprintf(item, sizeof(item), "%s%d", i ? "," : "", v[i]);
    if (len + (size_t)k + 1 > cap) {
      while (len + (size_t)k + 1 > cap) cap *= 2;
      char *ns = realloc(s, cap);
      if (ns == NULL) {
        free(s);
        return NULL;
      }
      s = ns;
    }
    memcpy(s + len, item, (size_t)k + 1);
    len += (size_t)k;
    (*nitems)++;
    i = j;
  }
  return s;
}

/* One scalar while it fits the reader's scalar limit; beyond that a flow
 * list of the same items. */
static void write_node_order(struct emit *e, const struct gcoll_plan *p) {
  int nitems;
  char *s = range_list(p->ring_node_order, p->nnodes, &nitems);
  if (s == NULL) {
    emit_fail(e, "cannot write plan: out of memory");
    return;
  }
  scalar(e, "ring");
  map_start(e, 1);
  scalar(e, "node_order");
  if (strlen(s) <= YDOC_MAX_SCALAR) {
    scalar(e, s);
  } else {
    seq_start(e, 1);
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) scalar(e, tok);
    seq_end(e);
  }
  map_end(e);
  free(s);
}

static void write_trees(struct emit *e, const struct gcoll_plan *p) {
  scalar(e, "tree");
  map_start(e, 0);
  key_str(e, "kind", "double-binary");
  scalar(e, "t1");
  map_start(e, 1);
  key_int(e, "root", p->t1_root);
  scalar(e, "parent");
  int_list(e, p->t1_parent, p->nnodes);
  map_end(e);
  scalar(e, "t2");
  map_start(e, 1);
  key_int(e, "root", p->t2_root);
  scalar(e, "parent");
  int_list(e, p->t2_parent, p->nnodes);
  key_str(e, "construction", p->t2_construction == GCOLL_T2_SHIFT ? "shift" : "mirror");
  map_end(e);
  map_end(e);
}

static void write_tuning(struct emit *e, const struct gcoll_plan *p) {
  scalar(e, "tuning");
  map_start(e, 0);
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    if (p->ntuning[c] == 0) continue;
    scalar(e, gcoll_coll_name((enum gcoll_coll)c));
    seq_start(e, 0);
    for (int r = 0; r < p->ntuning[c]; r++) {
      const struct gcoll_tuning_entry *t = &p->tuning[c][r];
      char buf[32];
      map_start(e, 1);
      if (t->max_bytes != UINT64_MAX) {
        snprintf(buf, sizeof(buf), "%" PRIu64, t->max_bytes);
        key_str(e, "max_bytes", buf);
      }
      key_str(e, "algo", gcoll_algo_name(t->algo));
      key_str(e, "proto", gcoll_proto_name(t->proto));
      key_int(e, "channels", t->nchannels);
      map_end(e);
    }
    seq_end(e);
  }
  map_end(e);
}

static int write_handler(void *data, unsigned char *buf, size_t size) {
  return fwrite(buf, 1, size, (FILE *)data) == size;
}

int gcoll_plan_write_stream(const struct gcoll_plan *p, void *FILE_stream, char *err,
                            size_t errlen) {
  struct emit e;
  yaml_event_t ev;
  memset(&e, 0, sizeof(e));
  e.err = err;
  e.errlen = errlen;
  if (check_writable(&e, p) != 0) return -1;
  if (!yaml_emitter_initialize(&e.em)) return emit_fail(&e, "cannot write plan: out of memory");
  yaml_emitter_set_output(&e.em, write_handler, FILE_stream);
  yaml_emitter_set_unicode(&e.em, 1);
  yaml_emitter_set_width(&e.em, 100);
  yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
  emit_event(&e, &ev);
  yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
  emit_event(&e, &ev);
  map_start(&e, 0);
  key_int(&e, "gcoll-plan", GCOLL_PLAN_VERSION);
  key_str(&e, "generator", p->generator[0] ? p->generator : "gcoll");
  write_job(&e, &p->job);
  key_int(&e, "ranks", p->nranks);
  key_int(&e, "nodes_count", p->nnodes);
  key_int(&e, "channels", p->nchannels);
  scalar(&e, "topologies");
  map_start(&e, 0);
  for (int k = 0; k < p->nclasses; k++) write_class(&e, &p->classes[k], p->nchannels / 2);
  map_end(&e);
  write_nodes(&e, p);
  write_node_order(&e, p);
  write_trees(&e, p);
  write_tuning(&e, p);
  map_end(&e);
  yaml_document_end_event_initialize(&ev, 1);
  emit_event(&e, &ev);
  yaml_stream_end_event_initialize(&ev);
  emit_event(&e, &ev);
  if (!e.failed && !yaml_emitter_flush(&e.em)) emit_fail(&e, "cannot write plan: write failed");
  yaml_emitter_delete(&e.em);
  return e.failed ? -1 : 0;
}

static int write_cb(void *FILE_stream, const void *arg, char *err, size_t errlen) {
  return gcoll_plan_write_stream(arg, FILE_stream, err, errlen);
}

int gcoll_plan_write_file(const struct gcoll_plan *plan, const char *path, char *err,
                          size_t errlen) {
  return gcoll_atomic_write(path, write_cb, plan, err, errlen);
}
