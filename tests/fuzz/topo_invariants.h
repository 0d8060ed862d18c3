/* Invariants every accepted topology must satisfy, shared by the topology
 * fuzz targets (fuzz_topo.c: gcoll's YAML, fuzz_topo_xml.c: NCCL's XML):
 * index lists and link peers in range, names unique, paths sane, and a YAML
 * write/read round trip that keeps the content hash and the incompleteness.
 * Violations abort so the fuzzer records them. */
#ifndef GCOLL_FUZZ_TOPO_INVARIANTS_H
#define GCOLL_FUZZ_TOPO_INVARIANTS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/topo.h"

static void broken(const char *what, const char *why) {
  fprintf(stderr, "fuzz: invariant broken: %s: %s\n", what, why);
  abort();
}

static void check_index_list(const struct gcoll_topo *t, const int *list, int n, int cap,
                             enum gcoll_dev_type type) {
  if (n < 0 || n > cap) broken("index list", "count out of range");
  for (int i = 0; i < n; i++) {
    if (list[i] < 0 || list[i] >= t->ndev) broken("index list", "device index out of range");
    if (t->dev[list[i]].type != type) broken("index list", "device of another type");
    if (t->dev[list[i]].index != i) broken("index list", "device index within type differs");
  }
}

/* What callers index with, unchecked, once the reader said yes. */
static void check_structure(const struct gcoll_topo *t) {
  if (t->ndev < 0 || t->ndev > GCOLL_TOPO_MAX_NODES) broken("ndev", "out of range");
  if (memchr(t->name, '\0', sizeof(t->name)) == NULL) broken("name", "not NUL-terminated");
  check_index_list(t, t->cpu, t->ncpu, GCOLL_TOPO_MAX_NODES, GCOLL_DEV_CPU);
  check_index_list(t, t->pci, t->npci, GCOLL_TOPO_MAX_NODES, GCOLL_DEV_PCI);
  check_index_list(t, t->gpu, t->ngpu, GCOLL_TOPO_MAX_GPUS, GCOLL_DEV_GPU);
  check_index_list(t, t->nic, t->nnic, GCOLL_TOPO_MAX_NODES, GCOLL_DEV_NIC);
  check_index_list(t, t->nvs, t->nnvs, GCOLL_TOPO_MAX_NVS, GCOLL_DEV_NVS);
  if (t->ndev > t->dev_cap) broken("ndev", "beyond the allocated devices");
  if (t->ncpu + t->npci + t->ngpu + t->nnic + t->nnvs != t->ndev)
    broken("index lists", "do not cover every device exactly once");
  for (int i = 0; i < t->ndev; i++) {
    const struct gcoll_topo_dev *d = &t->dev[i];
    if ((unsigned)d->type >= GCOLL_DEV_NTYPES) broken("device", "type out of range");
    if (memchr(d->name, '\0', sizeof(d->name)) == NULL || d->name[0] == '\0')
      broken("device", "name empty or not NUL-terminated");
    if (memchr(d->busid, '\0', sizeof(d->busid)) == NULL)
      broken("device", "busid not NUL-terminated");
    if (gcoll_topo_find(t, d->name) != i) broken("device", "name not unique");
    if (d->parent < -1 || d->parent >= t->ndev || d->parent == i)
      broken("device", "parent out of range");
    if (d->nlinks < 0 || d->nlinks > d->links_cap || (d->nlinks > 0 && d->links == NULL))
      broken("device", "nlinks out of range");
    for (int l = 0; l < d->nlinks; l++) {
      const struct gcoll_topo_link *k = &d->links[l];
      if ((unsigned)k->type >= GCOLL_LINK_NTYPES) broken("link", "type out of range");
      if (k->peer < 0 || k->peer >= t->ndev) broken("link", "peer out of range");
      if (!(k->bw >= 0.0) || k->bw > 1e9) broken("link", "bandwidth negative, NaN or absurd");
      if (k->count < 1) broken("link", "count below 1");
    }
  }
}

static void check_paths(const struct gcoll_topo *t) {
  for (int a = 0; a < t->ndev; a++) {
    for (int b = 0; b < t->ndev; b++) {
      const struct gcoll_topo_path *p = gcoll_topo_path(t, a, b);
      if (p == NULL) broken("path", "missing after compute_paths");
      if ((unsigned)p->type >= GCOLL_PATH_NTYPES) broken("path", "type out of range");
      if (gcoll_path_type_name(p->type) == NULL) broken("path", "type has no name");
      if (p->nhops < 0 || p->nhops > GCOLL_TOPO_MAX_HOPS) broken("path", "nhops out of range");
      if (a == b && p->type != GCOLL_PATH_LOC) broken("path", "device to itself is not LOC");
      for (int h = 0; h < p->nhops; h++) {
        int dev = p->hop_dev[h];
        if (dev < 0 || dev >= t->ndev) broken("path", "hop device out of range");
        if (p->hop_link[h] < 0 || p->hop_link[h] >= t->dev[dev].nlinks)
          broken("path", "hop link out of range");
      }
    }
  }
}

/* A topology we wrote must read back with the same content. */
static void check_round_trip(const struct gcoll_topo *t) {
  char *buf = NULL, err[512] = "";
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL) return;  /* out of memory: nothing to learn */
  int rc = gcoll_topo_write_stream(t, f, err, sizeof(err));
  if (fclose(f) != 0) rc = -1;
  if (rc != 0) {
    fprintf(stderr, "fuzz_topo: write failed: %s\n", err);
    broken("round trip", "an accepted topology cannot be written");
  }
  struct gcoll_topo *again = gcoll_topo_read_mem(buf, len, "fuzz-roundtrip", err, sizeof(err));
  if (again == NULL) {
    fprintf(stderr, "fuzz_topo: re-read failed: %s\n--- written:\n%s---\n", err, buf);
    broken("round trip", "written topology does not read back");
  }
  if (again->ndev != t->ndev) broken("round trip", "device count changed");
  if (gcoll_topo_hash(again) != gcoll_topo_hash(t)) broken("round trip", "content hash changed");
  if (again->incomplete != t->incomplete) broken("round trip", "incompleteness changed");
  gcoll_topo_free(again);
  free(buf);
}

/* NCCL XML export, read back: the same hash. Only for topologies named as
 * the XML reader names them (its own output), since names are hashed. */
static void __attribute__((unused)) check_xml_round_trip(const struct gcoll_topo *t) {
  char *buf = NULL, err[512] = "";
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL) return;
  int rc = gcoll_topo_write_nccl_xml_stream(t, f, err, sizeof(err));
  if (fclose(f) != 0) rc = -1;
  if (rc != 0) {
    fprintf(stderr, "fuzz: XML export failed: %s\n", err);
    broken("xml round trip", "an imported topology cannot be exported");
  }
  struct gcoll_topo *again = gcoll_topo_read_nccl_xml_mem(buf, len, "fuzz-export.xml", err,
                                                          sizeof(err));
  if (again == NULL) {
    fprintf(stderr, "fuzz: re-import failed: %s\n--- written:\n%s---\n", err, buf);
    broken("xml round trip", "exported XML does not read back");
  }
  if (gcoll_topo_hash(again) != gcoll_topo_hash(t)) broken("xml round trip", "hash changed");
  gcoll_topo_free(again);
  free(buf);
}

/* Everything above, on a topology a reader accepted. */
static void check_accepted(struct gcoll_topo *t) {
  char err[512];
  check_structure(t);
  (void)gcoll_topo_hash(t);
  if (t->incomplete != gcoll_topo_missing(t, NULL, 0)) broken("incomplete", "flag disagrees");
  err[0] = '\0';
  if (gcoll_topo_compute_paths(t, err, sizeof(err)) == 0)
    check_paths(t);
  else if (err[0] == '\0')
    broken("error message", "compute_paths failed without saying why");
  check_round_trip(t);
}

#endif
