/* A plan the ranks make themselves, when no launcher made one.
 *
 * `srun --mpi=pmi2 app` on a site without the SPANK plugin (or a user who
 * forgot `--gcoll=plan`) still has a bootstrap, so the job still gets a
 * plan, the one the plugin would have made: the first rank of each node
 * describes the node's topology as the plugin does in slurmstepd
 * (detection merged with GCOLL_TOPO_FILE / NCCL_TOPO_FILE, or $GCOLL_TOPO),
 * the descriptions meet at rank 0 through the bootstrap's store, rank 0
 * builds the plan with the function every launcher uses (gcoll_plan_build)
 * over the nodes in rank order, and every rank reads the YAML back from the
 * store and keeps a private copy. What that costs each step (a detection
 * per node and a build at rank 0 at init, instead of once per step in
 * slurmstepd) is why the plugin stays the better way; the INFO line says
 * what it cost.
 *
 * Store traffic: rank 0 makes O(nranks) requests (hosts, roles) plus one
 * per node; every other rank O(1 + plan size / chunk). Any layout is
 * planned: Slurm's block distribution gives node-order blocks, -m cyclic
 * or plane interleave them, and the plan then carries the rank order. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/plan.h"
#include "graph/topo.h"
#include "graph/tuning.h"
#include "runtime/comm.h"
#include "runtime/comm_init_paths.h"
#include "runtime/kvs_proto.h"
#include "kernels/wait.h"

#define JP_HOST_KEY "jobplan/host/%d"
#define JP_ROLE_KEY "jobplan/role/%d"   /* "L" describe the node, "M", "!why" */
#define JP_TOPO_KEY "jobplan/topo/%d"   /* a leader's topology YAML, or "!why" */
#define JP_PLAN_KEY "jobplan/plan"      /* "<chunks> <bytes>", or "!why" */
#define JP_CHUNK_KEY "jobplan/plan/%d"
#define JP_CHUNK (KVS_MAX_VALUE - 1024)
#define JP_HOST_MAX 256

struct job_plan_ctx {
  struct gcoll_bootstrap *bs;
  int rank, nranks;
  uint64_t deadline;
  char err[1024];
};

static int put(struct job_plan_ctx *c, const char *key, const void *v, size_t len) {
  return gcoll_bootstrap_put(c->bs, key, v, len, c->err, sizeof(c->err));
}

static int put_text(struct job_plan_ctx *c, const char *key, const char *v) {
  return put(c, key, v, strlen(v) + 1);
}

/* A NUL-terminated value of at most cap bytes, malloc'd. */
static char *get_text(struct job_plan_ctx *c, const char *key, size_t cap) {
  char *buf = malloc(cap);
  size_t len = 0;
  if (buf == NULL) {
    snprintf(c->err, sizeof(c->err), "out of memory");
    return NULL;
  }
  if (gcoll_bootstrap_get(c->bs, key, buf, cap, &len, c->deadline, c->err, sizeof(c->err)) != 0) {
    free(buf);
    return NULL;
  }
  if (len == 0 || buf[len - 1] != '\0') {
    snprintf(c->err, sizeof(c->err), "%s: malformed value", key);
    free(buf);
    return NULL;
  }
  return buf;
}

/* The job's layout as rank 0 works it out: nodes in the order their first
 * rank comes, each node's ranks ascending (Slurm's block layout gives
 * node-order blocks, -m cyclic interleaves them). */
struct layout {
  int nnodes;
  int *first;          /* per node: its lowest rank, the one describing it */
  int *count;          /* per node: its ranks */
  int *rank_of_slot;   /* the ranks node by node */
};

static char **sort_hosts;   /* qsort has no context argument */
static int by_host_rank(const void *x, const void *y) {
  int a = *(const int *)x, b = *(const int *)y, c = strcmp(sort_hosts[a], sort_hosts[b]);
  return c != 0 ? c : (a > b) - (a < b);
}
static int by_first(const void *x, const void *y) {
  const int *a = x, *b = y;   /* pairs (first rank, group start) */
  return (a[0] > b[0]) - (a[0] < b[0]);
}

/* O(nranks log nranks): sort by (host, rank); each host's group starts at
 * its lowest rank; the groups ordered by that rank are the nodes. */
static int group_nodes(struct job_plan_ctx *c, char **hosts, struct layout *l) {
  int n = c->nranks;
  int *idx = malloc((size_t)n * sizeof(int)), *groups = malloc((size_t)n * 2 * sizeof(int));
  if (idx == NULL || groups == NULL) {
    free(idx);
    free(groups);
    snprintf(c->err, sizeof(c->err), "out of memory for %d ranks", n);
    return -1;
  }
  for (int r = 0; r < n; r++) idx[r] = r;
  sort_hosts = hosts;
  qsort(idx, (size_t)n, sizeof(int), by_host_rank);
  int ng = 0;
  for (int i = 0; i < n; i++)
    if (i == 0 || strcmp(hosts[idx[i]], hosts[idx[i - 1]]) != 0) {
      groups[2 * ng] = idx[i];
      groups[2 * ng + 1] = i;
      ng++;
    }
  qsort(groups, (size_t)ng, 2 * sizeof(int), by_first);
  l->nnodes = ng;
  for (int m = 0, slot = 0; m < ng; m++) {
    int at = groups[2 * m + 1];
    l->first[m] = idx[at];
    l->count[m] = 0;
    while (at < n && strcmp(hosts[idx[at]], hosts[l->first[m]]) == 0) {
      l->rank_of_slot[slot++] = idx[at++];
      l->count[m]++;
    }
  }
  free(idx);
  free(groups);
  return 0;
}

/* Rank 0: the nodes, and every rank's role. */
static int assign_roles(struct job_plan_ctx *c, char **hosts, struct layout *l) {
  char key[64];
  for (int r = 0; r < c->nranks; r++) {
    snprintf(key, sizeof(key), JP_HOST_KEY, r);
    if ((hosts[r] = get_text(c, key, JP_HOST_MAX)) == NULL) return -1;
  }
  if (group_nodes(c, hosts, l) != 0) return -1;
  unsigned char *leader = calloc((size_t)c->nranks, 1);
  if (leader == NULL) {
    snprintf(c->err, sizeof(c->err), "out of memory");
    return -1;
  }
  for (int m = 0; m < l->nnodes; m++) leader[l->first[m]] = 1;
  int rc = 0;
  for (int r = 0; r < c->nranks && rc == 0; r++) {
    snprintf(key, sizeof(key), JP_ROLE_KEY, r);
    rc = put_text(c, key, leader[r] ? "L" : "M");
  }
  free(leader);
  return rc;
}

/* This node's topology as YAML, described once per process: a process
 * that makes several communicators (PyTorch's groups) detects once. */
static pthread_mutex_t described_lock = PTHREAD_MUTEX_INITIALIZER;
static char *described_yaml, *described_as;

static char *node_yaml(char *why, size_t whylen) {
  const char *name = getenv("GCOLL_TOPO");
  if (name == NULL || *name == '\0') name = "auto";
  char *copy = NULL;
  pthread_mutex_lock(&described_lock);
  if (described_yaml != NULL && strcmp(described_as, name) == 0) {
    copy = strdup(described_yaml);
  } else {
    char *yaml = NULL;
    size_t len = 0;
    struct gcoll_topo *t = gcoll_local_topology(name, "auto", why, whylen);
    FILE *f = t != NULL ? open_memstream(&yaml, &len) : NULL;
    int ok = f != NULL && gcoll_topo_write_stream(t, f, why, whylen) == 0;
    if (f != NULL) fclose(f);
    gcoll_topo_free(t);
    if (ok && (copy = strdup(yaml)) != NULL) {
      free(described_yaml);
      free(described_as);
      described_yaml = yaml;
      described_as = strdup(name);
      if (described_as == NULL) {
        free(described_yaml);
        described_yaml = NULL;
      }
    } else {
      free(yaml);
    }
  }
  pthread_mutex_unlock(&described_lock);
  return copy;
}

/* A leader: this node's topology as YAML, or "!why". */
static int describe_node(struct job_plan_ctx *c) {
  char why[1024], key[64];
  char *yaml = node_yaml(why, sizeof(why));
  size_t len = yaml != NULL ? strlen(yaml) : 0;
  snprintf(key, sizeof(key), JP_TOPO_KEY, c->rank);
  int rc;
  if (yaml != NULL && len + 1 <= KVS_MAX_VALUE) {
    rc = put(c, key, yaml, len + 1);
  } else {
    char msg[1100];
    snprintf(msg, sizeof(msg), "!%s", yaml != NULL ? "the topology is larger than the store takes"
                                                   : why);
    rc = put_text(c, key, msg);
  }
  free(yaml);
  return rc;
}

static int64_t env_id(const char *name) {
  const char *v = getenv(name);
  char *end;
  if (v == NULL || *v == '\0') return -1;
  long long x = strtoll(v, &end, 10);
  return *end == '\0' && x >= 0 ? x : -1;
}

/* Rank 0: the plan of the nodes, from their leaders' topologies, as YAML. */
static char *build_plan_yaml(struct job_plan_ctx *c, char **hosts, const struct layout *l,
                             size_t *len) {
  int nnodes = l->nnodes;
  const int *first = l->first;
  struct gcoll_topo **topo = calloc((size_t)nnodes, sizeof(*topo));
  char **text = calloc((size_t)nnodes, sizeof(*text));
  const char **node_host = calloc((size_t)nnodes, sizeof(*node_host));
  struct gcoll_topo **parsed = calloc((size_t)nnodes, sizeof(*parsed)), *shared = NULL;
  char *yaml = NULL, key[64];
  struct gcoll_plan *plan = NULL;
  if (!topo || !text || !node_host || !parsed) {
    snprintf(c->err, sizeof(c->err), "out of memory for %d nodes", nnodes);
    goto out;
  }
  for (int m = 0; m < nnodes; m++) {
    node_host[m] = hosts[first[m]];
    snprintf(key, sizeof(key), JP_TOPO_KEY, first[m]);
    if ((text[m] = get_text(c, key, KVS_MAX_VALUE)) == NULL) goto out;
    if (text[m][0] == '!') {
      snprintf(c->err, sizeof(c->err), "node %s (rank %d): %s", hosts[first[m]], first[m],
               text[m] + 1);
      goto out;
    }
    /* Nodes of one kind describe themselves alike: parse each text once. */
    if (m > 0 && strcmp(text[m], text[m - 1]) == 0) {
      topo[m] = topo[m - 1];
      continue;
    }
    char why[512];
    topo[m] = gcoll_topo_read_mem(text[m], strlen(text[m]), hosts[first[m]], why, sizeof(why));
    if (topo[m] == NULL || gcoll_topo_compute_paths(topo[m], why, sizeof(why)) != 0) {
      snprintf(c->err, sizeof(c->err), "node %s: its topology: %s", hosts[first[m]], why);
      goto out;
    }
  }
  /* More ranks than GPUs on a node (several ranks per GPU, which gcoll
   * allows and NCCL does not): a GPU plan has one rank per GPU, so such a
   * node is planned as a CPU node; its ranks' GPU edges then use shm. */
  for (int m = 0; m < nnodes; m++) {
    if (topo[m]->ngpu < 1 || l->count[m] <= topo[m]->ngpu) continue;
    char why[512];
    if (shared == NULL && (shared = gcoll_local_topology("cpu-only", "cpu-only", why,
                                                         sizeof(why))) == NULL) {
      snprintf(c->err, sizeof(c->err), "%s", why);
      goto out;
    }
    gcoll_log_info(NULL, "node %s runs %d ranks on %d GPU%s: planned as a CPU node (ranks share "
                   "GPUs)", hosts[first[m]], l->count[m], topo[m]->ngpu,
                   topo[m]->ngpu == 1 ? "" : "s");
    /* Keep the parsed topology for freeing: it may be shared with m + 1. */
    parsed[m] = topo[m];
    topo[m] = shared;
  }
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = (const struct gcoll_topo **)topo,
                                .node_host = node_host, .node_ranks = l->count,
                                .rank_of_slot = l->rank_of_slot,
                                .job_id = env_id("SLURM_JOB_ID"),
                                .step_id = env_id("SLURM_STEP_ID")};
  char why[768];
  if ((plan = gcoll_plan_build(&in, why, sizeof(why))) == NULL) {
    snprintf(c->err, sizeof(c->err), "plan of %d nodes: %s", nnodes, why);
    goto out;
  }
  if (gcoll_plan_retune(plan, getenv("GCOLL_TUNING"), why, sizeof(why)) != 0) {
    snprintf(c->err, sizeof(c->err), "GCOLL_TUNING: %s", why);
    goto out;
  }
  /* A copy to look at (gcoll-plan show/diff), as the plugin's plandir has. */
  const char *save = getenv("GCOLL_PLAN_SAVE");
  if (save != NULL && *save != '\0' && gcoll_plan_write_file(plan, save, why, sizeof(why)) != 0) {
    snprintf(c->err, sizeof(c->err), "GCOLL_PLAN_SAVE: %s", why);
    goto out;
  }
  FILE *f = open_memstream(&yaml, len);
  if (f == NULL || gcoll_plan_write_stream(plan, f, why, sizeof(why)) != 0) {
    snprintf(c->err, sizeof(c->err), "writing the plan: %s", f ? why : "out of memory");
    if (f != NULL) fclose(f);
    free(yaml);
    yaml = NULL;
    goto out;
  }
  fclose(f);
out:
  gcoll_plan_free(plan);
  /* Each parsed topology once (consecutive nodes share one). */
  for (int m = 0; topo != NULL && m < nnodes; m++) {
    if (parsed != NULL && parsed[m] != NULL) topo[m] = parsed[m];
    if (topo[m] != NULL && (m == 0 || topo[m] != topo[m - 1])) gcoll_topo_free(topo[m]);
  }
  free(parsed);
  gcoll_topo_free(shared);
  for (int m = 0; text != NULL && m < nnodes; m++) free(text[m]);
  free(topo);
  free(text);
  free(node_host);
  return yaml;
}

/* Rank 0: builds and publishes the plan, or publishes why not. */
static int publish_plan(struct job_plan_ctx *c) {
  char **hosts = calloc((size_t)c->nranks, sizeof(*hosts));
  size_t n = (size_t)c->nranks;
  struct layout l = {0, malloc(n * sizeof(int)), malloc(n * sizeof(int)), malloc(n * sizeof(int))};
  int rc = -1;
  char *yaml = NULL, key[64], head[64];
  size_t len = 0;
  if (hosts == NULL || l.first == NULL || l.count == NULL || l.rank_of_slot == NULL) {
    snprintf(c->err, sizeof(c->err), "out of memory");
  } else if (assign_roles(c, hosts, &l) == 0 && describe_node(c) == 0 &&
             (yaml = build_plan_yaml(c, hosts, &l, &len)) != NULL) {
    int chunks = (int)((len + JP_CHUNK - 1) / JP_CHUNK);
    rc = 0;
    for (int i = 0; i < chunks && rc == 0; i++) {
      size_t at = (size_t)i * JP_CHUNK, part = len - at < JP_CHUNK ? len - at : JP_CHUNK;
      snprintf(key, sizeof(key), JP_CHUNK_KEY, i);
      rc = put(c, key, yaml + at, part);
    }
    snprintf(head, sizeof(head), "%d %zu", chunks, len);
    if (rc == 0) rc = put_text(c, JP_PLAN_KEY, head);
  }
  if (rc != 0) {
    /* Everyone else waits for the header: tell them why there is none. */
    char msg[1100];
    snprintf(msg, sizeof(msg), "!%s", c->err);
    put_text(c, JP_PLAN_KEY, msg);
  }
  for (int r = 0; hosts != NULL && r < c->nranks; r++) free(hosts[r]);
  free(hosts);
  free(l.first);
  free(l.count);
  free(l.rank_of_slot);
  free(yaml);
  return rc;
}

/* Every rank: the published plan into a private file. */
static int fetch_plan(struct job_plan_ctx *c, char *dir, size_t dirlen, char *path,
                      size_t pathlen) {
  char *head = get_text(c, JP_PLAN_KEY, sizeof(c->err) + 8), key[64];
  if (head == NULL) return -1;
  int chunks = 0;
  size_t len = 0;
  if (head[0] == '!' || sscanf(head, "%d %zu", &chunks, &len) != 2 || chunks < 1 ||
      len > (size_t)chunks * JP_CHUNK) {
    snprintf(c->err, sizeof(c->err), "rank 0: %s",
             head[0] == '!' ? head + 1 : "a malformed plan header");
    free(head);
    return -1;
  }
  free(head);
  char *yaml = malloc(len + 1);
  int rc = yaml == NULL ? -1 : 0;
  for (int i = 0; i < chunks && rc == 0; i++) {
    size_t at = (size_t)i * JP_CHUNK, want = len - at < JP_CHUNK ? len - at : JP_CHUNK, got = 0;
    snprintf(key, sizeof(key), JP_CHUNK_KEY, i);
    rc = gcoll_bootstrap_get(c->bs, key, yaml + at, want, &got, c->deadline, c->err,
                             sizeof(c->err));
    if (rc == 0 && got != want) {
      snprintf(c->err, sizeof(c->err), "plan chunk %d: %zu bytes, expected %zu", i, got, want);
      rc = -1;
    }
  }
  struct gcoll_plan *plan = NULL;
  char why[1024];
  if (rc == 0 && (plan = gcoll_plan_read_mem(yaml, len, "the plan rank 0 made", why,
                                             sizeof(why))) == NULL) {
    snprintf(c->err, sizeof(c->err), "%s", why);
    rc = -1;
  }
  if (rc == 0 && gcoll_local_plan_save(plan, getenv("GCOLL_PLAN_DIR"), dir, dirlen, path,
                                       pathlen, why, sizeof(why)) != 0) {
    snprintf(c->err, sizeof(c->err), "%s", why);
    rc = -1;
  }
  gcoll_plan_free(plan);
  free(yaml);
  return rc;
}

gcollResult_t gcoll_job_plan(struct gcoll_bootstrap *bs, const char *node, char *dir,
                             size_t dirlen, char *path, size_t pathlen, double *ms) {
  struct job_plan_ctx c = {.bs = bs, .rank = bs->rank, .nranks = bs->nranks,
                           .deadline = gcoll_bootstrap_deadline(bs)};
  uint64_t t0 = gcoll_wait_now_ns();
  char host[JP_HOST_MAX], key[64];
  dir[0] = '\0';
  if (node != NULL)
    snprintf(host, sizeof(host), "%s", node);
  else
    gcoll_this_node_name(host, sizeof(host));
  snprintf(key, sizeof(key), JP_HOST_KEY, c.rank);
  if (put_text(&c, key, host) != 0)
    return gcoll_fail(gcollSystemError, "planning the job in-process: %s", c.err);
  int rc;
  if (c.rank == 0) {
    rc = publish_plan(&c);
  } else {
    char *role;
    snprintf(key, sizeof(key), JP_ROLE_KEY, c.rank);
    rc = (role = get_text(&c, key, sizeof(c.err) + 8)) == NULL ? -1 : 0;
    if (rc == 0 && role[0] == '!') {
      snprintf(c.err, sizeof(c.err), "%s", role + 1);
      rc = -1;
    } else if (rc == 0 && strcmp(role, "L") == 0) {
      rc = describe_node(&c);
    }
    free(role);
  }
  if (rc == 0) rc = fetch_plan(&c, dir, dirlen, path, pathlen);
  if (rc != 0)
    return gcoll_fail(gcollInvalidUsage, "planning in-process failed: %s", c.err);
  *ms = (double)(gcoll_wait_now_ns() - t0) / 1e6;
  return gcollSuccess;
}
