/* Topology YAML writer (format: docs/topology-format.md). The output is
 * canonical: reading it back gives the same devices in the same order, the
 * same per-device link order and therefore the same gcoll_topo_hash. */
#include "topo.h"
#include "yaml_doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

struct writer {
  yaml_emitter_t em;
  int failed;
  FILE *out;
  int last_byte; /* to end the file with a newline whatever libyaml did */
};

static void emit(struct writer *w, yaml_event_t *ev, int ok) {
  if (w->failed) {
    if (ok) yaml_event_delete(ev);
    return;
  }
  if (!ok || !yaml_emitter_emit(&w->em, ev)) w->failed = 1;
}

static void emit_str(struct writer *w, const char *s) {
  yaml_event_t ev;
  int ok = yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                        YAML_ANY_SCALAR_STYLE);
  emit(w, &ev, ok);
}

static void emit_int(struct writer *w, long long v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%lld", v);
  emit_str(w, buf);
}

/* Shortest decimal that reads back as exactly the same double, so files
 * show "450" rather than "450.00000000000000" and still round-trip. */
static void emit_double(struct writer *w, double v) {
  char buf[40];
  if (v == (double)(long long)v && v > -1e15 && v < 1e15) {
    emit_int(w, (long long)v);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  emit_str(w, buf);
}

static void begin_map(struct writer *w, int flow) {
  yaml_event_t ev;
  int ok = yaml_mapping_start_event_initialize(
      &ev, NULL, NULL, 1, flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
  emit(w, &ev, ok);
}

static void end_map(struct writer *w) {
  yaml_event_t ev;
  emit(w, &ev, yaml_mapping_end_event_initialize(&ev));
}

static void begin_seq(struct writer *w) {
  yaml_event_t ev;
  emit(w, &ev, yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE));
}

static void end_seq(struct writer *w) {
  yaml_event_t ev;
  emit(w, &ev, yaml_sequence_end_event_initialize(&ev));
}

static void kv_str(struct writer *w, const char *k, const char *v) {
  emit_str(w, k);
  emit_str(w, v);
}

static void kv_int(struct writer *w, const char *k, long long v) {
  emit_str(w, k);
  emit_int(w, v);
}

static void kv_double(struct writer *w, const char *k, double v) {
  emit_str(w, k);
  emit_double(w, v);
}

/* busid and parent are optional in the format: written only when set. */
static void emit_pci_fields(struct writer *w, const struct gcoll_topo *t,
                            const struct gcoll_topo_dev *d) {
  kv_str(w, "name", d->name);
  if (d->busid[0]) kv_str(w, "busid", d->busid);
  if (d->parent >= 0) kv_str(w, "parent", t->dev[d->parent].name);
}

static void emit_device(struct writer *w, const struct gcoll_topo *t,
                        const struct gcoll_topo_dev *d) {
  begin_map(w, 1);
  switch (d->type) {
    case GCOLL_DEV_CPU:
      kv_str(w, "name", d->name);
      if (d->u.cpu.cores > 0) kv_int(w, "cores", d->u.cpu.cores);  /* 0: unknown */
      kv_int(w, "numa", d->u.cpu.numa);
      break;
    case GCOLL_DEV_PCI: emit_pci_fields(w, t, d); break;
    case GCOLL_DEV_GPU:
      emit_pci_fields(w, t, d);
      if (d->u.gpu.sms > 0) kv_int(w, "sms", d->u.gpu.sms);  /* 0: unknown */
      if (d->u.gpu.cc > 0) kv_int(w, "cc", d->u.gpu.cc);
      break;
    case GCOLL_DEV_NIC:
      emit_pci_fields(w, t, d);
      kv_int(w, "port", d->u.nic.port);
      if (d->u.nic.gbps > 0) kv_double(w, "gbps", d->u.nic.gbps);  /* 0: unknown */
      if (d->u.nic.rail >= 0) kv_int(w, "rail", d->u.nic.rail);
      if (d->u.nic.active_gbps > 0) kv_double(w, "active_gbps", d->u.nic.active_gbps);
      if (d->u.nic.down) kv_str(w, "state", "down");
      break;
    case GCOLL_DEV_NVS:
      kv_str(w, "name", d->name);
      kv_str(w, "multicast", d->u.nvs.multicast ? "true" : "false");
      break;
    default: break;
  }
  end_map(w);
}

static const char *const section_names[GCOLL_DEV_NTYPES] = {"cpus", "pci", "gpus", "nics",
                                                            "nvswitches"};

/* The file lists devices by kind, and the reader numbers them in file
 * order; a topology whose kinds are interleaved would come back renumbered
 * with another hash, so it is refused rather than silently changed. */
static int check_device_order(const struct gcoll_topo *t, char *err, size_t errlen) {
  if (t->ndev < 0 || t->ndev > GCOLL_TOPO_MAX_NODES) {
    snprintf(err, errlen, "topology '%s': invalid device count %d", t->name, t->ndev);
    return -1;
  }
  for (int i = 0; i < t->ndev; i++) {
    const struct gcoll_topo_dev *d = &t->dev[i];
    if ((unsigned)d->type >= GCOLL_DEV_NTYPES || d->parent >= i || d->parent < -1 ||
        d->nlinks < 0 || (d->nlinks > 0 && d->links == NULL)) {
      snprintf(err, errlen, "topology '%s': device %d ('%s') is malformed", t->name, i, d->name);
      return -1;
    }
    if (i > 0 && d->type < t->dev[i - 1].type) {
      snprintf(err, errlen,
               "topology '%s': device '%s' comes after a %s device; devices must be grouped "
               "as cpus, pci, gpus, nics, nvswitches to be written",
               t->name, d->name, gcoll_dev_type_name(t->dev[i - 1].type));
      return -1;
    }
  }
  return 0;
}

/* Index of the link on `d` that mirrors link `l` of device `from`. */
static int mirror_link(const struct gcoll_topo *t, int from, const struct gcoll_topo_link *l) {
  if (l->peer < 0 || l->peer >= t->ndev) return -1;
  const struct gcoll_topo_dev *d = &t->dev[l->peer];
  for (int i = 0; i < d->nlinks; i++)
    if (d->links[i].peer == from && d->links[i].type == l->type) return i;
  return -1;
}

/* Finds an order of the links such that adding them one by one reproduces
 * every device's link list exactly: a link can be written once it is next
 * in line on both of its devices. Any topology built with add_link has such
 * an order (the order it was built in). out[] receives device indices: one
 * entry per link, the side whose links[] entry is written. */
static int order_links(const struct gcoll_topo *t, int *out_dev, int *out_link, int *nout,
                       char *err, size_t errlen) {
  int *next = calloc((size_t)t->ndev + 1, sizeof(int));
  int total = 0, done = 0;
  if (next == NULL) {
    snprintf(err, errlen, "topology '%s': out of memory", t->name);
    return -1;
  }
  for (int i = 0; i < t->ndev; i++) total += t->dev[i].nlinks;
  while (2 * done < total) {
    int progressed = 0;
    /* Lowest ready device first: a file written in a natural order (as the
     * reference files are) comes back out in the same order. */
    for (int i = 0; i < t->ndev && !progressed; i++) {
      const struct gcoll_topo_dev *d = &t->dev[i];
      if (next[i] >= d->nlinks) continue;
      const struct gcoll_topo_link *l = &d->links[next[i]];
      int m = mirror_link(t, i, l);
      if (m < 0 || l->peer == i) {
        snprintf(err, errlen, "topology '%s': link %s-%s has no reverse direction", t->name,
                 d->name, l->peer >= 0 && l->peer < t->ndev ? t->dev[l->peer].name : "?");
        free(next);
        return -1;
      }
      if (next[l->peer] != m) continue;
      out_dev[done] = i;
      out_link[done] = next[i];
      done++;
      next[i]++;
      next[l->peer]++;
      progressed = 1;
    }
    if (!progressed) {
      snprintf(err, errlen, "topology '%s': link lists are not symmetric", t->name);
      free(next);
      return -1;
    }
  }
  free(next);
  *nout = done;
  return 0;
}

static void emit_link(struct writer *w, const struct gcoll_topo *t, int from,
                      const struct gcoll_topo_link *l) {
  begin_map(w, 1);
  kv_str(w, "a", t->dev[from].name);
  kv_str(w, "b", t->dev[l->peer].name);
  kv_str(w, "type", gcoll_link_type_name(l->type));
  if (l->type == GCOLL_LINK_NVL || l->count != 1) kv_int(w, "count", l->count);
  kv_double(w, "bw", l->bw);
  end_map(w);
}

static int write_handler(void *data, unsigned char *buffer, size_t size) {
  struct writer *w = data;
  if (size > 0) w->last_byte = buffer[size - 1];
  return fwrite(buffer, 1, size, w->out) == size;
}

int gcoll_topo_write_stream(const struct gcoll_topo *topo, void *FILE_stream, char *err,
                            size_t errlen) {
  struct writer w;
  int nlinks, *ldev = NULL, *link_idx = NULL;
  if (topo == NULL || FILE_stream == NULL) {
    snprintf(err, errlen, "topology writer: no topology or no stream");
    return -1;
  }
  if (check_device_order(topo, err, errlen)) return -1;
  size_t total = 1;
  for (int i = 0; i < topo->ndev; i++) total += (size_t)topo->dev[i].nlinks;
  ldev = malloc(total * sizeof(int));
  link_idx = malloc(total * sizeof(int));
  if (ldev == NULL || link_idx == NULL) {
    free(ldev);
    free(link_idx);
    snprintf(err, errlen, "topology '%s': out of memory", topo->name);
    return -1;
  }
  if (order_links(topo, ldev, link_idx, &nlinks, err, errlen)) {
    free(ldev);
    free(link_idx);
    return -1;
  }

  memset(&w, 0, sizeof(w));
  if (!yaml_emitter_initialize(&w.em)) {
    snprintf(err, errlen, "topology writer: cannot initialise the YAML emitter");
    free(ldev);
    free(link_idx);
    return -1;
  }
  w.out = FILE_stream;
  w.last_byte = '\n';
  yaml_emitter_set_output(&w.em, write_handler, &w);
  yaml_emitter_set_unicode(&w.em, 1);
  yaml_emitter_set_width(&w.em, -1); /* one entry per line, however long */

  yaml_event_t ev;
  emit(&w, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING));
  emit(&w, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1));
  begin_map(&w, 0);
  kv_int(&w, "gcoll-topo", GCOLL_TOPO_VERSION);
  kv_str(&w, "name", topo->name);
  if (topo->nvl_domain.set) {
    emit_str(&w, "nvlink_domain");
    begin_map(&w, 1);
    kv_str(&w, "cluster", topo->nvl_domain.cluster);
    kv_int(&w, "clique", topo->nvl_domain.clique);
    end_map(&w);
  }
  for (int type = 0; type < GCOLL_DEV_NTYPES; type++) {
    int any = 0;
    for (int i = 0; i < topo->ndev; i++) {
      if (topo->dev[i].type != (enum gcoll_dev_type)type) continue;
      if (!any) {
        emit_str(&w, section_names[type]);
        begin_seq(&w);
        any = 1;
      }
      emit_device(&w, topo, &topo->dev[i]);
    }
    if (any) end_seq(&w);
  }
  if (nlinks > 0) {
    emit_str(&w, "links");
    begin_seq(&w);
    for (int k = 0; k < nlinks; k++)
      emit_link(&w, topo, ldev[k], &topo->dev[ldev[k]].links[link_idx[k]]);
    end_seq(&w);
  }
  end_map(&w);
  emit(&w, &ev, yaml_document_end_event_initialize(&ev, 1));
  emit(&w, &ev, yaml_stream_end_event_initialize(&ev));
  if (!w.failed && !yaml_emitter_flush(&w.em)) w.failed = 1;
  if (!w.failed && w.last_byte != '\n' && fputc('\n', w.out) == EOF) w.failed = 1;
  if (w.failed)
    snprintf(err, errlen, "topology '%s': YAML emitter failed: %s", topo->name,
             w.em.problem ? w.em.problem : "write error");
  yaml_emitter_delete(&w.em);
  free(ldev);
  free(link_idx);
  return w.failed ? -1 : 0;
}

static int write_cb(void *FILE_stream, const void *arg, char *err, size_t errlen) {
  return gcoll_topo_write_stream(arg, FILE_stream, err, errlen);
}

int gcoll_topo_write_file(const struct gcoll_topo *topo, const char *path, char *err,
                          size_t errlen) {
  if (topo == NULL || path == NULL) {
    snprintf(err, errlen, "topology writer: no topology or no path");
    return -1;
  }
  return gcoll_atomic_write(path, write_cb, topo, err, errlen);
}
