/* Best path between every pair of devices of a node.
 *
 * "Best" is the widest path (largest bottleneck bandwidth), then the one
 * with fewest hops. Paths are at most GCOLL_TOPO_MAX_HOPS long, so the
 * search is a hop-layered relaxation (Bellman-Ford by number of hops)
 * rather than Dijkstra: it is exact under the hop limit, which a
 * label-setting search is not, and ndev <= 128 keeps it cheap.
 *
 * Routing rules, as NCCL routes: NICs are endpoints only; a GPU may be
 * crossed only by NVLink traffic (entering and leaving over NVLink, which
 * makes the path NVB), never by PCIe traffic. */
#include "topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A GPU reached over NVLink may forward over NVLink; reached otherwise it
 * is a dead end. So a label is (device, arrived over NVLink). */
#define NSTATE(ndev) (2 * (ndev))
#define STATE(dev, nvl) (2 * (dev) + (nvl))

struct layer_label {
  double bw;    /* bottleneck so far, 0 = unreached */
  int pred;     /* previous state, -1 at the source */
  int link;     /* link index taken out of the previous device */
};

static int may_forward(const struct gcoll_topo *t, int dev, int arrived_nvl,
                       const struct gcoll_topo_link *out) {
  switch (t->dev[dev].type) {
    case GCOLL_DEV_NIC: return 0;
    case GCOLL_DEV_GPU: return arrived_nvl && out->type == GCOLL_LINK_NVL;
    default: return 1;
  }
}

static enum gcoll_path_type classify(const struct gcoll_topo *t, const struct gcoll_topo_path *p) {
  int all_nvl = 1, sys = 0, cpu = 0, gpu_mid = 0, switches = 0;
  for (int h = 0; h < p->nhops; h++) {
    const struct gcoll_topo_link *l = &t->dev[p->hop_dev[h]].links[p->hop_link[h]];
    if (l->type != GCOLL_LINK_NVL) all_nvl = 0;
    if (l->type == GCOLL_LINK_SYS) sys = 1;
    if (h == 0) continue;  /* the source is not an intermediate device */
    switch (t->dev[p->hop_dev[h]].type) {
      case GCOLL_DEV_CPU: cpu = 1; break;
      case GCOLL_DEV_GPU: gpu_mid = 1; break;
      case GCOLL_DEV_PCI: switches++; break;
      default: break;
    }
  }
  if (sys) return GCOLL_PATH_SYS;
  if (cpu) return GCOLL_PATH_PHB;
  if (all_nvl) return gpu_mid ? GCOLL_PATH_NVB : GCOLL_PATH_NVL;
  return switches <= 1 ? GCOLL_PATH_PIX : GCOLL_PATH_PXB;
}

/* Fills paths[src][*] from the hop layers; lab is (MAX_HOPS+1) x nstate. */
static void paths_from_source(struct gcoll_topo *t, int src, struct layer_label *lab) {
  const int ns = NSTATE(t->ndev);
  for (int i = 0; i < (GCOLL_TOPO_MAX_HOPS + 1) * ns; i++) lab[i] = (struct layer_label){0, -1, -1};
  /* The source forwards anything: give it the permissive "arrived by NVLink" state. */
  lab[STATE(src, 1)].bw = 1e300;
  for (int h = 1; h <= GCOLL_TOPO_MAX_HOPS; h++) {
    struct layer_label *prev = lab + (size_t)(h - 1) * ns, *cur = lab + (size_t)h * ns;
    for (int s = 0; s < ns; s++) {
      if (prev[s].bw <= 0) continue;
      int dev = s / 2, nvl = s % 2;
      const struct gcoll_topo_dev *d = &t->dev[dev];
      for (int l = 0; l < d->nlinks; l++) {
        const struct gcoll_topo_link *lk = &d->links[l];
        if (dev != src && !may_forward(t, dev, nvl, lk)) continue;
        if (lk->peer == src) continue;
        double bw = prev[s].bw < lk->bw ? prev[s].bw : lk->bw;
        int to = STATE(lk->peer, lk->type == GCOLL_LINK_NVL);
        if (bw > cur[to].bw) cur[to] = (struct layer_label){bw, s, l};
      }
    }
  }
  for (int dst = 0; dst < t->ndev; dst++) {
    struct gcoll_topo_path *p = &t->paths[(size_t)src * t->ndev + dst];
    memset(p, 0, sizeof(*p));
    if (dst == src) {
      p->type = GCOLL_PATH_LOC;  /* no link used: bw 0, nhops 0 */
      continue;
    }
    /* Widest over all hop counts; the first layer reaching it is the fewest hops. */
    int best_h = -1, best_s = -1;
    double best_bw = 0;
    for (int h = 1; h <= GCOLL_TOPO_MAX_HOPS; h++)
      for (int nvl = 0; nvl < 2; nvl++) {
        double bw = lab[(size_t)h * ns + STATE(dst, nvl)].bw;
        if (bw > best_bw) { best_bw = bw; best_h = h; best_s = STATE(dst, nvl); }
      }
    if (best_h < 0) {
      p->type = GCOLL_PATH_DIS;
      continue;
    }
    p->bw = best_bw;
    p->nhops = best_h;
    for (int h = best_h, s = best_s; h > 0; h--) {
      const struct layer_label *l = &lab[(size_t)h * ns + s];
      p->hop_dev[h - 1] = l->pred / 2;
      p->hop_link[h - 1] = l->link;
      s = l->pred;
    }
    p->type = classify(t, p);
  }
}

int gcoll_topo_compute_paths(struct gcoll_topo *topo, char *err, size_t errlen) {
  if (topo == NULL || topo->ndev < 0 || topo->ndev > GCOLL_TOPO_MAX_NODES) {
    snprintf(err, errlen, "invalid topology");
    return -1;
  }
  for (int i = 0; i < topo->ndev; i++)
    for (int l = 0; l < topo->dev[i].nlinks; l++) {
      int peer = topo->dev[i].links[l].peer;
      if (peer < 0 || peer >= topo->ndev || peer == i || !(topo->dev[i].links[l].bw > 0)) {
        snprintf(err, errlen, "device '%s': link %d is invalid", topo->dev[i].name, l);
        return -1;
      }
    }
  free(topo->paths);
  topo->paths = NULL;
  if (topo->ndev == 0) return 0;
  size_t n = (size_t)topo->ndev;
  struct gcoll_topo_path *paths = calloc(n * n, sizeof(*paths));
  struct layer_label *lab =
      malloc((GCOLL_TOPO_MAX_HOPS + 1) * (size_t)NSTATE(topo->ndev) * sizeof(*lab));
  if (paths == NULL || lab == NULL) {
    free(paths);
    free(lab);
    snprintf(err, errlen, "out of memory computing paths");
    return -1;
  }
  topo->paths = paths;
  for (int src = 0; src < topo->ndev; src++) paths_from_source(topo, src, lab);
  free(lab);
  return 0;
}
