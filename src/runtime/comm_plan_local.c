/* Plans for ranks on virtual nodes of this host, computed by whoever has no
 * scheduler to ask: gcollrun, gcollCommInitAll and gcollCommInitRank. One
 * function for all three, so the same job gets the same plan whichever way
 * it started. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/plan.h"
#include "graph/topo.h"
#include "graph/topo_lookup.h"
#include "graph/tuning.h"
#include "runtime/comm.h"
#include "runtime/comm_init_paths.h"
#include "runtime/settings.h"

void gcoll_short_hostname(char *out, size_t len) {
  if (gethostname(out, len) != 0) snprintf(out, len, "localhost");
  out[len - 1] = '\0';
  out[strcspn(out, ".")] = '\0';
}

/* This host's short name; with several nodes "<host>-v<i>", like gcollrun's
 * virtual nodes (the plan's hosts are not checked on these init paths). */
static char **node_hosts(int nnodes) {
  char host[256];
  gcoll_short_hostname(host, sizeof(host));
  char **names = calloc((size_t)nnodes, sizeof(*names));
  if (names == NULL) return NULL;
  for (int i = 0; i < nnodes; i++) {
    int n = nnodes == 1 ? asprintf(&names[i], "%s", host)
                        : asprintf(&names[i], "%.200s-v%d", host, i);
    if (n < 0) {
      names[i] = NULL;
      gcoll_hostlist_free(names, nnodes);
      return NULL;
    }
  }
  return names;
}

void gcoll_this_node_name(char *out, size_t len) {
  const char *slurm_node = getenv("SLURMD_NODENAME"), *virtual_node = getenv("GCOLL_NODE");
  if (virtual_node == NULL && slurm_node != NULL && *slurm_node != '\0') {
    snprintf(out, len, "%s", slurm_node);
    return;
  }
  char host[200];
  gcoll_short_hostname(host, sizeof(host));
  if (virtual_node != NULL && *virtual_node != '\0')
    snprintf(out, len, "%s-v%s", host, virtual_node);
  else
    snprintf(out, len, "%s", host);
}

struct gcoll_topo *gcoll_detect_this_node(char *info, size_t infolen, char *err,
                                          size_t errlen) {
  const char *file = gcoll_setting("GCOLL_TOPO_FILE");
  char from[512] = "", what[1024], why[512];
  if (file != NULL) gcoll_setting_origin("GCOLL_TOPO_FILE", from, sizeof(from));
  struct gcoll_topo *t = gcoll_topo_detect_merged(file, what, sizeof(what), why, sizeof(why));
  if (t == NULL) {
    snprintf(err, errlen, "%s%s%s%s", why, file ? " (from " : "", from, file ? ")" : "");
    return NULL;
  }
  snprintf(info, infolen, "%s%s%s%s", what, file ? " (file from " : "", from, file ? ")" : "");
  return t;
}

struct gcoll_topo *gcoll_local_topology(const char *name, const char *fallback, char *err,
                                        size_t errlen) {
  if (name == NULL || *name == '\0') name = fallback;
  if (strcmp(name, "auto") != 0) return gcoll_topo_load_name(name, err, errlen);
  char info[1600], why[1024];
  struct gcoll_topo *t = gcoll_detect_this_node(info, sizeof(info), why, sizeof(why));
  if (t == NULL || (t->paths == NULL && gcoll_topo_compute_paths(t, why, sizeof(why)) != 0)) {
    snprintf(err, errlen, "topology auto: %s", why);
    gcoll_topo_free(t);
    return NULL;
  }
  gcoll_log_info(NULL, "topology auto: %s", info);
  return t;
}

/* The topology of every virtual node: a name or file, or "auto" (above);
 * without a name, $GCOLL_TOPO, else cpu-only. */
static struct gcoll_topo *node_topology(const char *name, char *err, size_t errlen) {
  if (name == NULL || *name == '\0') name = getenv("GCOLL_TOPO");
  return gcoll_local_topology(name, "cpu-only", err, errlen);
}

static struct gcoll_plan *build(int nnodes, const int *node_ranks, const int *rank_of_slot,
                                const char *topo_name, char *err, size_t errlen) {
  if (nnodes < 1 || nnodes > GCOLL_MAX_NODES || node_ranks == NULL) {
    snprintf(err, errlen, "%d nodes, must be 1 to %d with a rank count each", nnodes,
             GCOLL_MAX_NODES);
    return NULL;
  }
  for (int i = 0; i < nnodes; i++)
    if (node_ranks[i] < 1) {
      snprintf(err, errlen, "node %d has %d ranks, every node needs at least 1", i,
               node_ranks[i]);
      return NULL;
    }
  struct gcoll_topo *topo = node_topology(topo_name, err, errlen);
  if (topo == NULL) return NULL;
  struct gcoll_plan *plan = NULL;
  const struct gcoll_topo **node_topo = calloc((size_t)nnodes, sizeof(*node_topo));
  char **hosts = node_hosts(nnodes);
  if (node_topo == NULL || hosts == NULL) {
    snprintf(err, errlen, "out of memory for %d nodes", nnodes);
  } else {
    for (int i = 0; i < nnodes; i++) node_topo[i] = topo;
    /* Rank counts are explicit even on CPU-only nodes with fewer cores:
     * the user asked for N ranks, oversubscription is theirs to choose. */
    struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = node_topo,
                                  .node_host = (const char **)hosts,
                                  .node_ranks = node_ranks, .rank_of_slot = rank_of_slot,
                                  .job_id = -1, .step_id = -1};
    plan = gcoll_plan_build(&in, err, errlen);
    char why[512];
    if (plan != NULL && gcoll_plan_retune(plan, getenv("GCOLL_TUNING"), why, sizeof(why)) != 0) {
      snprintf(err, errlen, "GCOLL_TUNING: %s", why);
      gcoll_plan_free(plan);
      plan = NULL;
    }
  }
  if (hosts) gcoll_hostlist_free(hosts, nnodes);
  free(node_topo);
  gcoll_topo_free(topo);
  return plan;
}

int gcoll_local_plan_save(const struct gcoll_plan *plan, const char *parent, char *dir,
                          size_t dirlen, char *path, size_t pathlen, char *err, size_t errlen) {
  dir[0] = '\0';
  if (parent == NULL || *parent == '\0') parent = getenv("TMPDIR");
  if (parent == NULL || *parent == '\0') parent = "/tmp";
  int rc = -1;
  int n = snprintf(dir, dirlen, "%s/gcoll-plan.XXXXXX", parent);
  if (n < 0 || (size_t)n >= dirlen || mkdtemp(dir) == NULL) {
    snprintf(err, errlen, "cannot create a temp directory in %.256s: %s", parent,
             n < 0 || (size_t)n >= dirlen ? "path too long" : strerror(errno));
    dir[0] = '\0';
  } else if ((n = snprintf(path, pathlen, "%s/plan.yaml", dir)) < 0 || (size_t)n >= pathlen) {
    snprintf(err, errlen, "%.256s/plan.yaml: path too long", dir);
  } else {
    rc = gcoll_plan_write_file(plan, path, err, errlen);
  }
  if (rc != 0 && dir[0] != '\0') gcoll_local_plan_remove(dir);
  return rc;
}

int gcoll_local_plan_write_layout(int nnodes, const int *node_ranks, const int *rank_of_slot,
                                  const char *topo, const char *parent, char *dir, size_t dirlen,
                                  char *path, size_t pathlen, char *err, size_t errlen) {
  dir[0] = '\0';
  struct gcoll_plan *plan = build(nnodes, node_ranks, rank_of_slot, topo, err, errlen);
  if (plan == NULL) return -1;
  int rc = gcoll_local_plan_save(plan, parent, dir, dirlen, path, pathlen, err, errlen);
  gcoll_plan_free(plan);
  return rc;
}

int gcoll_local_plan_write_nodes(int nnodes, const int *node_ranks, const char *topo,
                                 const char *parent, char *dir, size_t dirlen, char *path,
                                 size_t pathlen, char *err, size_t errlen) {
  return gcoll_local_plan_write_layout(nnodes, node_ranks, NULL, topo, parent, dir, dirlen, path,
                                       pathlen, err, errlen);
}

int gcoll_local_plan_write(int nranks, int nnodes, const char *topo, const char *parent,
                           char *dir, size_t dirlen, char *path, size_t pathlen, char *err,
                           size_t errlen) {
  dir[0] = '\0';
  if (nranks < 1 || nnodes < 1 || nnodes > GCOLL_MAX_NODES || nranks % nnodes != 0) {
    snprintf(err, errlen, "%d ranks do not split evenly over %d nodes", nranks, nnodes);
    return -1;
  }
  int *node_ranks = malloc((size_t)nnodes * sizeof(*node_ranks));
  if (node_ranks == NULL) {
    snprintf(err, errlen, "out of memory for %d nodes", nnodes);
    return -1;
  }
  for (int i = 0; i < nnodes; i++) node_ranks[i] = nranks / nnodes;
  int rc = gcoll_local_plan_write_nodes(nnodes, node_ranks, topo, parent, dir, dirlen, path,
                                        pathlen, err, errlen);
  free(node_ranks);
  return rc;
}

/* Only plain entries are expected (the plan and the writer's temp file);
 * unlinkat never follows links. */
void gcoll_local_plan_remove(const char *dir) {
  if (dir == NULL || dir[0] == '\0') return;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd >= 0) {
    DIR *d = fdopendir(dfd);
    if (d != NULL) {
      struct dirent *e;
      while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
          unlinkat(dirfd(d), e->d_name, 0);
      closedir(d);
    } else {
      close(dfd);
    }
  }
  rmdir(dir);
}

int gcoll_random_hex(char *out, size_t count, char *err, size_t errlen) {
  unsigned char bytes[64];
  if (count > sizeof(bytes)) count = sizeof(bytes);
  size_t have = 0;
  while (have < count) {
    ssize_t n = getrandom(bytes + have, count - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      snprintf(err, errlen, "getrandom: %s", strerror(errno));
      return -1;
    }
    have += (size_t)n;
  }
  for (size_t i = 0; i < count; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
  return 0;
}
