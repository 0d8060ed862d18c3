/* Plan scaling benchmark, in process so process start-up and the libtool
 * wrapper do not hide what we measure: for each node count, the time to
 * build a plan, to write it, its size, the time one rank needs to load its
 * view (gcoll_plan_load_rank_view, as gcoll-plan show --rank does), and
 * the time a rank's init spends on the plan (gcoll_plan_load_rank: view,
 * ring orders, verification), for the first and the last rank.
 *
 *   plan_bench TOPOLOGY.yaml [NODES...]     (default 1 16 256 4096 12500)
 *
 * DOMAIN=N puts every N consecutive nodes in one multi-node NVLink domain
 * (gcoll-plan generate --nvlink-domain N: GB200 NVL72 racks are 18 trays).
 *
 * Prints a markdown table; best of REPEAT (env, default 5) runs per cell.
 * Exit status 1 only when something fails, never for a slow figure: these
 * machines are noisy, so figures are for people to read, not to gate CI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graph/plan.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double min_d(double a, double b) { return a < b ? a : b; }

/* One row of the table; returns 0 or -1 with a message on stderr. */
static int bench_nodes(const struct gcoll_topo *topo, int nnodes, int repeat, const char *dir,
                       int domain) {
  char err[512], path[4096];
  snprintf(path, sizeof(path), "%s/plan-%d.yaml", dir, nnodes);
  const struct gcoll_topo **node_topo = malloc(sizeof(*node_topo) * (size_t)nnodes);
  int *node_domain = domain > 0 ? malloc(sizeof(int) * (size_t)nnodes) : NULL;
  if (node_topo == NULL || (domain > 0 && node_domain == NULL)) {
    free(node_topo);
    return -1;
  }
  for (int i = 0; i < nnodes; i++) node_topo[i] = topo;
  for (int i = 0; node_domain && i < nnodes; i++) node_domain[i] = i / domain;
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = node_topo, .job_id = -1,
                                .step_id = -1, .node_domain = node_domain};
  double build = 1e30, write = 1e30, view_first = 1e30, view_last = 1e30;
  double init_first = 1e30, init_last = 1e30;
  int rc = 0, nranks = 0;
  for (int r = 0; r < repeat && rc == 0; r++) {
    double t0 = now_ms();
    struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
    double t1 = now_ms();
    if (p == NULL) {
      fprintf(stderr, "plan_bench: build for %d nodes: %s\n", nnodes, err);
      rc = -1;
      break;
    }
    nranks = p->nranks;
    if (gcoll_plan_write_file(p, path, err, sizeof(err)) != 0) {
      fprintf(stderr, "plan_bench: write for %d nodes: %s\n", nnodes, err);
      rc = -1;
    }
    double t2 = now_ms();
    gcoll_plan_free(p);
    build = min_d(build, t1 - t0);
    write = min_d(write, t2 - t1);
    int ranks[2] = {0, nranks - 1};
    double *slot[2] = {&view_first, &view_last};
    for (int k = 0; k < 2 && rc == 0; k++) {
      static struct gcoll_rank_view view;
      double v0 = now_ms();
      if (gcoll_plan_load_rank_view(path, ranks[k], &view, err, sizeof(err)) != 0) {
        fprintf(stderr, "plan_bench: view of rank %d: %s\n", ranks[k], err);
        rc = -1;
      }
      *slot[k] = min_d(*slot[k], now_ms() - v0);
    }
    double *init_slot[2] = {&init_first, &init_last};
    for (int k = 0; k < 2 && rc == 0; k++) {
      static struct gcoll_rank_view view;
      int *rings = NULL;
      double v0 = now_ms();
      if (gcoll_plan_load_rank(path, ranks[k], &view, &rings, err, sizeof(err)) != 0) {
        fprintf(stderr, "plan_bench: init load of rank %d: %s\n", ranks[k], err);
        rc = -1;
      }
      *init_slot[k] = min_d(*init_slot[k], now_ms() - v0);
      free(rings);
    }
  }
  struct stat st;
  if (rc == 0 && stat(path, &st) == 0)
    printf("| %d | %d | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f |\n", nnodes, nranks, build,
           write, st.st_size / 1024.0, view_first, view_last, init_first, init_last);
  unlink(path);
  free(node_topo);
  free(node_domain);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: plan_bench TOPOLOGY.yaml [NODES...]\n");
    return 2;
  }
  char err[512];
  /* Reading a node's file computes its paths (ndev^2): on nodes with
   * hundreds of devices that, not the plan, is what grows. */
  double r0 = now_ms();
  struct gcoll_topo *topo = gcoll_topo_read_file(argv[1], err, sizeof(err));
  double read_ms = now_ms() - r0;
  if (topo == NULL || gcoll_topo_compute_paths(topo, err, sizeof(err)) != 0) {
    fprintf(stderr, "plan_bench: %s\n", err);
    gcoll_topo_free(topo);
    return 1;
  }
  const char *rep = getenv("REPEAT");
  int repeat = rep && atoi(rep) > 0 ? atoi(rep) : 5;
  char dir[] = "/tmp/gcoll-bench.XXXXXX";
  if (mkdtemp(dir) == NULL) {
    perror("plan_bench: mkdtemp");
    gcoll_topo_free(topo);
    return 1;
  }
  static const int defaults[] = {1, 16, 256, 4096, 12500};
  const char *dom = getenv("DOMAIN");
  int domain = dom && atoi(dom) > 0 ? atoi(dom) : 0;
  printf("plan scaling, topology %s (%d devices, %d GPUs, %d NICs)", topo->name, topo->ndev,
         topo->ngpu, topo->nnic);
  if (domain > 0) printf(", NVLink domains of %d nodes", domain);
  printf(", best of %d; reading the topology (paths included): %.1f ms\n\n", repeat, read_ms);
  printf("| nodes | ranks | build (ms) | write (ms) | size (KB) | view rank 0 (ms) | view last rank (ms) "
         "| init load rank 0 (ms) | init load last rank (ms) |\n");
  printf("|------:|------:|-----------:|-----------:|----------:|-----------------:|--------------------:"
         "|----------------------:|-------------------------:|\n");
  int rc = 0;
  int n = argc > 2 ? argc - 2 : (int)(sizeof(defaults) / sizeof(defaults[0]));
  for (int i = 0; i < n && rc == 0; i++)
    rc = bench_nodes(topo, argc > 2 ? atoi(argv[i + 2]) : defaults[i], repeat, dir, domain);
  rmdir(dir);
  gcoll_topo_free(topo);
  return rc == 0 ? 0 : 1;
}
