/* The plan phase of one step, as a file barrier in the step's private
 * directory plandir/<uid>/<job>.<step>/ (see spank_jobdir.c for why under
 * <uid>):
 *   nonce            this run's random id, written by node 0
 *   nodes/<i>.yaml   node i's name, task count, first rank and the nonce
 *   nodes/<i>.endpoints  where node i's tasks listen (spank_endpoints.c),
 *                    written before its topology; absent with endpoints=no
 *   topo/<i>.yaml    node i's topology (written last: its presence says
 *                    node i is done)
 *   key              the step's job key (random; names shm segments)
 *   endpoints.yaml   every rank's endpoint, or
 *   endpoints.error  why node 0 could not make it (one line); either one
 *                    is written before plan.yaml, so every node finds it
 *                    when the plan is there. Never cached: per step.
 *   plan.yaml        the plan, or
 *   plan.error       why node 0 could not make one (one line)
 * With a given plan (--gcoll=FILE and endpoints) no topologies are written:
 * a node is done when its nodes/<i>.yaml is there (after its endpoints),
 * and plan.yaml is node 0's copy of the file, stamped with the step.
 * Node 0 removes what an earlier run under the same job id left there (a
 * requeue), puts a fresh directory with a fresh nonce in its place, waits
 * for every topology, computes the plan (or copies it from
 * plandir/<uid>/<job>.cache/ when the node list and topologies are
 * unchanged). The other nodes join the directory holding a nonce, write
 * theirs, and wait for plan.yaml or plan.error. A directory that already
 * holds an outcome when a node joins is a leftover (node 0 cannot finish
 * without this node), and one whose nonce changes under a node was
 * replaced by node 0: either way the node joins again. Every node checks
 * the plan fits its step before its tasks get it. Each write is atomic
 * (rename), so a reader never sees half a file; each wait is bounded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graph/endpoints.h"
#include "graph/plan.h"
#include "graph/fabric.h"
#include "graph/topo.h"
#include "graph/topo_lookup.h"
#include "graph/yaml_doc.h"
#include "launcher/spank/spank_gcoll.h"

/* Node 0 gives up gathering this much before the others stop waiting for
 * the plan, so they read its plan.error instead of timing out blind. */
#define GATHER_SHARE 0.8
/* Far beyond any cluster; bounds what node 0 allocates. */
#define GCOLL_SPANK_MAX_NODES 100000u

struct stepdir {
  int root, user, step, topo, nodes;
  /* --gcoll=FILE: the given plan, which node 0 publishes as the step's
   * plan.yaml in place of one it computes; no topologies are gathered,
   * and a node's nodes/<i>.yaml (written last) says it is done. NULL for
   * --gcoll=plan. */
  const char *given;
  char name[64];
  char nonce[GCOLL_SPANK_NONCE_LEN + 1];
};

static void nap(double *step_ms) {
  struct timespec ts = {0, (long)(*step_ms * 1e6)};
  nanosleep(&ts, NULL);
  if (*step_ms < 50) *step_ms *= 2;
}

static int exists(int dfd, const char *name) {
  struct stat st;
  return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* The step directory and its subdirectories only: the root and user
 * directories stay open for joining again. */
static void stepdir_leave(struct stepdir *d) {
  int *fds[] = {&d->nodes, &d->topo, &d->step};
  for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
    if (*fds[i] >= 0) close(*fds[i]), *fds[i] = -1;
}

static void stepdir_close(struct stepdir *d) {
  stepdir_leave(d);
  if (d->user >= 0) close(d->user), d->user = -1;
  if (d->root >= 0) close(d->root), d->root = -1;
}

static int stepdir_subdirs(struct stepdir *d, const struct gcoll_gather_node *me, char *err,
                           size_t errlen) {
  char why[GCOLL_SPANK_ERRLEN];
  if (gcoll_jobdir_open_private(d->step, "topo", 0, me->uid, me->gid, &d->topo, why,
                                sizeof(why)) != 0 ||
      gcoll_jobdir_open_private(d->step, "nodes", 0, me->uid, me->gid, &d->nodes, why,
                                sizeof(why)) != 0) {
    snprintf(err, errlen, "%s/%s", d->name, why);
    return -1;
  }
  return 0;
}

/* plandir/<uid>, which root made in init_post_opt, checked again here as
 * the user; node 0 also makes the step's fresh directory. */
static int stepdir_open(const struct gcoll_spank_config *cfg, const struct gcoll_gather_node *me,
                        struct stepdir *d, char *err, size_t errlen) {
  d->root = d->user = d->step = d->topo = d->nodes = -1;
  d->given = NULL;
  d->nonce[0] = '\0';
  char why[GCOLL_SPANK_ERRLEN] = "";
  if (gcoll_jobdir_step_name(me->job, me->step, d->name, sizeof(d->name)) != 0) {
    snprintf(err, errlen, "step %u.%u has no plan directory (special step id)", me->job, me->step);
    return -1;
  }
  if (gcoll_jobdir_open_root(cfg->plandir, &d->root, err, errlen) != 0) return -1;
  if (gcoll_jobdir_open_user(d->root, me->uid, &d->user, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "%s/%s", cfg->plandir, why);
    stepdir_close(d);
    return -1;
  }
  if (me->node_index != 0) return 0;
  if (gcoll_jobdir_nonce(d->nonce, sizeof(d->nonce), err, errlen) != 0 ||
      gcoll_jobdir_fresh(d->user, d->name, d->nonce, me->uid, me->gid, &d->step, why,
                         sizeof(why)) != 0 ||
      stepdir_subdirs(d, me, why, sizeof(why)) != 0) {
    if (why[0] != '\0') snprintf(err, errlen, "%s/%u/%s", cfg->plandir, (unsigned)me->uid, why);
    stepdir_close(d);
    return -1;
  }
  return 0;
}

/* Serialises through a memory stream, so that the file itself is written
 * by gcoll_jobdir_write (atomic, no symlinks). */
static int write_yaml(int dfd, const char *name,
                      int (*fn)(const void *obj, void *stream, char *err, size_t errlen),
                      const void *obj, char *err, size_t errlen) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL) {
    snprintf(err, errlen, "%s: %s", name, strerror(errno));
    return -1;
  }
  int rc = fn(obj, f, err, errlen);
  if (fclose(f) != 0 && rc == 0) {
    snprintf(err, errlen, "%s: %s", name, strerror(errno));
    rc = -1;
  }
  if (rc == 0) rc = gcoll_jobdir_write(dfd, name, buf, len, err, errlen);
  free(buf);
  return rc;
}

static int topo_writer(const void *obj, void *stream, char *err, size_t errlen) {
  return gcoll_topo_write_stream(obj, stream, err, errlen);
}
static int plan_writer(const void *obj, void *stream, char *err, size_t errlen) {
  return gcoll_plan_write_stream(obj, stream, err, errlen);
}

/* topo=auto: this node's detection, merged with the topology file the job
 * or the administrator names (gcoll_spank_topo_file); a file that cannot
 * be used fails the node's plan phase rather than being skipped. */
static struct gcoll_topo *load_topology(const struct gcoll_spank_config *cfg,
                                        const struct gcoll_gather_node *me, char *info,
                                        size_t infolen, char *err, size_t errlen) {
  if (strcmp(cfg->topo, "auto") != 0) {
    snprintf(info, infolen, "topology %.900s", cfg->topo);
    return gcoll_topo_load_name(cfg->topo, err, errlen);
  }
  const char *from = "";
  const char *file = gcoll_spank_topo_file(cfg, me->job_topo_file, me->job_nccl_topo_file, &from);
  char why[GCOLL_SPANK_ERRLEN], what[768];
  struct gcoll_topo *t = gcoll_topo_detect_merged(file, what, sizeof(what), why, sizeof(why));
  /* Cut, not refused, when long: these are messages. */
  if (t == NULL && file != NULL) snprintf(err, errlen, "%.400s (from %s)", why, from);
  else if (t == NULL) snprintf(err, errlen, "%.480s", why);
  else if (file != NULL) snprintf(info, infolen, "%.700s (file from %s)", what, from);
  else snprintf(info, infolen, "%.700s", what);
  return t;
}

/* ---- this node's contribution ---------------------------------------- */

/* Where this node's tasks listen, or why they do not (none when endpoints
 * are off): before the topology, so node 0 has it once the topology is
 * there. A fragment that cannot be written only costs the endpoints. */
struct ep_part {
  const struct gcoll_spank_endpoints *ep;
  const char *why;                 /* ep NULL: "" off, else the reason */
  struct gcoll_gather_result *out;
};

static void write_fragment(const struct stepdir *d, const struct gcoll_gather_node *me,
                           const struct ep_part *p) {
  if (p->ep == NULL && p->why[0] == '\0') return;
  char name[32], why[GCOLL_SPANK_ERRLEN];
  size_t len = 0;
  char *text = gcoll_spank_endpoints_fragment(p->ep, p->why, &len);
  snprintf(name, sizeof(name), "%u.endpoints", me->node_index);
  if (text == NULL)
    snprintf(why, sizeof(why), "out of memory");
  if (text == NULL || gcoll_jobdir_write(d->nodes, name, text, len, why, sizeof(why)) != 0) {
    snprintf(p->out->endpoints_err, sizeof(p->out->endpoints_err), "nodes/%s: %.400s", name, why);
    p->out->endpoints_report = 1;
  }
  free(text);
}

static int write_node(const struct stepdir *d, const struct gcoll_spank_config *cfg,
                      const struct gcoll_gather_node *me, const struct ep_part *part,
                      char *topo_info, size_t topo_infolen, char *err, size_t errlen) {
  char why[GCOLL_SPANK_ERRLEN], name[32], info[4096];
  struct gcoll_topo *topo = NULL;
  if (d->given == NULL &&
      (topo = load_topology(cfg, me, topo_info, topo_infolen, why, sizeof(why))) == NULL) {
    snprintf(err, errlen, "topology (%s): %s", cfg->topo, why);
    return -1;
  }
  snprintf(name, sizeof(name), "%u.yaml", me->node_index);
  /* The node's name is quoted: YAML must not read "n1" or "1e3" as
   * anything but a string. Its ranks are a rank list ("0-6:2"). */
  char *ranks = gcoll_ranklist_format(me->ranks, (int)me->ntasks_local);
  int n = ranks == NULL ? -1
                        : snprintf(info, sizeof(info),
                                   "node: \"%s\"\ntasks: %u\nranks: \"%s\"\ngpus: \"%s\"\n"
                                   "nonce: \"%s\"\n",
                                   me->node_name, me->ntasks_local, ranks, me->step_gpus,
                                   d->nonce);
  free(ranks);
  int rc = -1;
  if (n < 0 || (size_t)n >= sizeof(info) || strpbrk(me->node_name, "\"\\\n") != NULL ||
      strpbrk(me->step_gpus, "\"\\\n") != NULL)
    snprintf(err, errlen, "node name '%.64s' or its ranks cannot be recorded", me->node_name);
  /* The fragment first: whatever file says this node is done (its
   * topology, or with a given plan its description) comes after it. */
  else if (write_fragment(d, me, part),
           gcoll_jobdir_write(d->nodes, name, info, (size_t)n, why, sizeof(why)) != 0)
    snprintf(err, errlen, "%s: %s", d->name, why);
  else if (topo != NULL && write_yaml(d->topo, name, topo_writer, topo, why, sizeof(why)) != 0)
    snprintf(err, errlen, "%s: %s", d->name, why);
  else
    rc = 0;
  gcoll_topo_free(topo);
  return rc;
}

/* ---- node 0: gather, compute or reuse, publish -------------------------- */

/* Nodes of one kind write byte-identical topology files, and a parsed
 * topology holds its devices' paths (devices^2 entries, ~80 KB for a
 * DGX-H100, megabytes for a node of hundreds of devices): node 0 parses
 * each distinct file once and its nodes share it, so slurmstepd's memory
 * grows with the kinds of node, not with the nodes (12,500 DGX-H100s
 * parsed one by one would take about 1 GB). Keyed by a hash of the text,
 * confirmed byte for byte. */
struct topo_text {
  uint64_t hash;
  char *text;          /* the file, kept for the comparison */
  size_t len;
  int node;            /* the node whose parse the others share */
};

struct gathered {
  int nnodes;
  int *tasks;          /* per node: Slurm's tasks on it */
  int *rank_of_slot;   /* the nodes' task ids, node by node */
  int *gpu_of_slot;    /* the step's GPU each task drives, slot by slot */
  int have_gpus;       /* every node named its step GPUs, one per task */
  char **host;
  struct gcoll_topo **topo;   /* shared between nodes of identical files */
  unsigned char *owns_topo;   /* 1 where topo[i] is node i's own parse */
  uint32_t *hash;
  struct topo_text *texts;    /* open addressing, ntexts_cap slots */
  int ntexts, ntexts_cap;
};

static void gathered_free(struct gathered *g) {
  for (int i = 0; i < g->nnodes; i++) {
    if (g->host) free(g->host[i]);
    if (g->topo && g->owns_topo && g->owns_topo[i]) gcoll_topo_free(g->topo[i]);
  }
  for (int i = 0; g->texts && i < g->ntexts_cap; i++) free(g->texts[i].text);
  free(g->texts);
  free(g->owns_topo);
  free(g->host);
  free(g->topo);
  free(g->hash);
  free(g->tasks);
  free(g->rank_of_slot);
  free(g->gpu_of_slot);
}

static uint64_t fnv64(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* The slot of text (hash h) in g->texts: its entry, or the empty slot
 * where it goes. The table has twice as many slots as nodes. */
static struct topo_text *text_slot(struct gathered *g, uint64_t h, const char *text, size_t len) {
  for (int k = (int)(h % (uint64_t)g->ntexts_cap);; k = (k + 1) % g->ntexts_cap) {
    struct topo_text *t = &g->texts[k];
    if (t->text == NULL) return t;
    if (t->hash == h && t->len == len && memcmp(t->text, text, len) == 0) return t;
  }
}

/* Node i's topology from its file's text (consumed): shared with an
 * earlier node whose file is the same, else parsed. */
static int node_topology(struct gathered *g, int i, char *text, size_t len, const char *what,
                         char *err, size_t errlen) {
  uint64_t h = fnv64(14695981039346656037ull, text, len);
  struct topo_text *t = text_slot(g, h, text, len);
  if (t->text != NULL) {
    free(text);
    g->topo[i] = g->topo[t->node];
    g->hash[i] = g->hash[t->node];
    return 0;
  }
  g->topo[i] = gcoll_topo_read_mem(text, len, what, err, errlen);
  if (g->topo[i] == NULL) {
    free(text);
    return -1;
  }
  g->owns_topo[i] = 1;
  g->hash[i] = gcoll_topo_hash(g->topo[i]);
  *t = (struct topo_text){.hash = h, .text = text, .len = len, .node = i};
  g->ntexts++;
  return 0;
}

/* Until every node has written the file that says it is done: its
 * topology, or with a given plan its description. */
static int wait_nodes(const struct stepdir *d, int nnodes, double deadline, char *err,
                      size_t errlen) {
  double nap_ms = 1;
  int dir = d->given != NULL ? d->nodes : d->topo;
  for (int i = 0; i < nnodes;) {
    char name[32];
    snprintf(name, sizeof(name), "%d.yaml", i);
    if (exists(dir, name)) {
      i++;
      continue;
    }
    if (gcoll_spank_now_ms() > deadline) {
      snprintf(err, errlen, "node %d of %d did not write its %s in time", i, nnodes,
               d->given != NULL ? "description" : "topology");
      return -1;
    }
    nap(&nap_ms);
  }
  return 0;
}

/* Node i's description; its task ids go to g->rank_of_slot from slot. */
static int read_node(const struct stepdir *d, int i, struct gathered *g, int64_t *tasks,
                     int64_t slot, int64_t total, char *err, size_t errlen) {
  char name[32], what[64], why[GCOLL_SPANK_ERRLEN];
  char *buf = NULL;
  size_t len;
  snprintf(name, sizeof(name), "%d.yaml", i);
  snprintf(what, sizeof(what), "nodes/%d.yaml", i);
  int rc = gcoll_jobdir_read(d->nodes, name, 4096, &buf, &len, why, sizeof(why));
  if (rc != 0) {
    if (rc > 0) snprintf(err, errlen, "nodes/%s is missing", name);
    else snprintf(err, errlen, "nodes/%s", why);
    return -1;
  }
  struct ydoc doc;
  const struct ydoc_node *v;
  char host[256], nonce[GCOLL_SPANK_NONCE_LEN + 1], ranks[4096], gpus[256];
  rc = -1;
  if (gcoll_ydoc_parse(&doc, buf, len, what, err, errlen) == 0) {
    if (gcoll_ydoc_req(&doc, doc.root, "node", &v, err, errlen) == 0 &&
        gcoll_ydoc_str(&doc, v, "node", host, sizeof(host), err, errlen) == 0 &&
        gcoll_ydoc_req(&doc, doc.root, "tasks", &v, err, errlen) == 0 &&
        gcoll_ydoc_int(&doc, v, "tasks", 1, GCOLL_MAX_LOCAL_RANKS, tasks, err, errlen) == 0 &&
        gcoll_ydoc_req(&doc, doc.root, "ranks", &v, err, errlen) == 0 &&
        gcoll_ydoc_str(&doc, v, "ranks", ranks, sizeof(ranks), err, errlen) == 0 &&
        gcoll_ydoc_req(&doc, doc.root, "gpus", &v, err, errlen) == 0 &&
        gcoll_ydoc_str(&doc, v, "gpus", gpus, sizeof(gpus), err, errlen) == 0 &&
        gcoll_ydoc_req(&doc, doc.root, "nonce", &v, err, errlen) == 0 &&
        gcoll_ydoc_str(&doc, v, "nonce", nonce, sizeof(nonce), err, errlen) == 0) {
      /* Only a node that joined this run's directory knows its nonce. */
      int *list = NULL, nlist = 0;
      if (strcmp(nonce, d->nonce) != 0)
        snprintf(err, errlen, "nodes/%s is from another run of this step", name);
      else if (gcoll_ranklist_parse(ranks, (int)total - 1, &list, &nlist, why, sizeof(why)) != 0 ||
               nlist != *tasks || slot + nlist > total)
        snprintf(err, errlen, "nodes/%s: ranks '%.64s' are not its %lld tasks of the step's %lld",
                 name, ranks, (long long)*tasks, (long long)total);
      else if ((g->host[i] = strdup(host)) != NULL) {
        memcpy(g->rank_of_slot + slot, list, (size_t)nlist * sizeof(int));
        rc = 0;
        /* The step's GPUs, one per task (local task k drives the k-th, as
         * frameworks pick by LOCAL_RANK); any other count: not used. */
        int *dev = NULL, ndev = 0;
        if (gpus[0] != '\0' &&
            gcoll_ranklist_parse(gpus, GCOLL_MAX_GPU_INDEX, &dev, &ndev, why, sizeof(why)) == 0 &&
            ndev == nlist)
          memcpy(g->gpu_of_slot + slot, dev, (size_t)ndev * sizeof(int));
        else
          g->have_gpus = 0;
        free(dev);
      }
      free(list);
    }
    gcoll_ydoc_free(&doc);
  }
  free(buf);
  if (rc != 0) return -1;
  if (d->given != NULL) return 0;
  buf = NULL;
  snprintf(what, sizeof(what), "topo/%d.yaml", i);
  rc = gcoll_jobdir_read(d->topo, name, GCOLL_SPANK_MAX_FILE, &buf, &len, why, sizeof(why));
  if (rc != 0) {
    snprintf(err, errlen, "topo/%s", rc > 0 ? "file vanished" : why);
    return -1;
  }
  return node_topology(g, i, buf, len, what, err, errlen);
}

static int gather(const struct stepdir *d, const struct gcoll_gather_node *me, struct gathered *g,
                  char *err, size_t errlen) {
  if (me->nnodes == 0 || me->nnodes > GCOLL_SPANK_MAX_NODES) {
    snprintf(err, errlen, "a step of %u nodes is not supported", me->nnodes);
    return -1;
  }
  int n = (int)me->nnodes;
  g->nnodes = n;
  g->host = calloc((size_t)n, sizeof(*g->host));
  g->topo = calloc((size_t)n, sizeof(*g->topo));
  g->owns_topo = calloc((size_t)n, 1);
  g->ntexts_cap = 2 * n;
  g->texts = calloc((size_t)g->ntexts_cap, sizeof(*g->texts));
  g->hash = calloc((size_t)n, sizeof(*g->hash));
  g->tasks = calloc((size_t)n, sizeof(*g->tasks));
  g->rank_of_slot = calloc(me->ntasks_total > 0 ? me->ntasks_total : 1, sizeof(int));
  g->gpu_of_slot = calloc(me->ntasks_total > 0 ? me->ntasks_total : 1, sizeof(int));
  g->have_gpus = 1;
  if (g->host == NULL || g->topo == NULL || g->owns_topo == NULL || g->texts == NULL ||
      g->hash == NULL || g->tasks == NULL ||
      g->rank_of_slot == NULL || g->gpu_of_slot == NULL) {
    snprintf(err, errlen, "out of memory for %d nodes", n);
    return -1;
  }
  /* Any layout: each node's task ids, node by node, are the plan's rank
   * order (block: 0-1, 2-3; -m cyclic: 0,2 and 1,3; any count per node). */
  int64_t next = 0;
  for (int i = 0; i < n; i++) {
    int64_t tasks;
    if (read_node(d, i, g, &tasks, next, me->ntasks_total, err, errlen) != 0) return -1;
    g->tasks[i] = (int)tasks;
    next += tasks;
  }
  if ((uint64_t)next != me->ntasks_total) {
    snprintf(err, errlen, "the %d nodes run %lld tasks, not the step's %u", n, (long long)next,
             me->ntasks_total);
    return -1;
  }
  return 0;
}

/* What a plan depends on: node names in order, their topologies and
 * multi-node NVLink domains (outside the topology hash, and a domain can
 * change with the fabric's registration while the hardware stays), the
 * task ids of each node, the ring's node order and the blocks a fabric
 * gives (NULL: none). */
static uint64_t cache_key(const struct gathered *g, const int *order, const int *blocks) {
  uint64_t h = 14695981039346656037ull;
  h = fnv64(h, &g->nnodes, sizeof(g->nnodes));
  for (int i = 0; i < g->nnodes; i++) {
    h = fnv64(h, g->host[i], strlen(g->host[i]) + 1);
    h = fnv64(h, &g->hash[i], sizeof(g->hash[i]));
    const struct gcoll_nvl_domain *d = &g->topo[i]->nvl_domain;
    h = fnv64(h, &d->set, sizeof(d->set));
    if (d->set) {
      h = fnv64(h, d->cluster, strlen(d->cluster) + 1);
      h = fnv64(h, &d->clique, sizeof(d->clique));
    }
    h = fnv64(h, &g->tasks[i], sizeof(g->tasks[i]));
  }
  int total = 0;
  for (int i = 0; i < g->nnodes; i++) total += g->tasks[i];
  h = fnv64(h, g->rank_of_slot, sizeof(int) * (size_t)total);
  if (g->have_gpus) h = fnv64(h, g->gpu_of_slot, sizeof(int) * (size_t)total);
  if (order != NULL) h = fnv64(h, order, sizeof(int) * (size_t)g->nnodes);
  if (blocks != NULL) h = fnv64(h, blocks, sizeof(int) * (size_t)g->nnodes);
  return h;
}

/* A cached plan is used only if it says what we would compute: same nodes
 * in the same order and valid (a hash collision or a damaged cache entry
 * falls back to computing). */
static struct gcoll_plan *cache_lookup(int cdir, const char *name, const struct gathered *g,
                                       const struct gcoll_gather_node *me) {
  char *buf = NULL, why[GCOLL_SPANK_ERRLEN];
  size_t len;
  if (gcoll_jobdir_read(cdir, name, GCOLL_SPANK_MAX_FILE, &buf, &len, why, sizeof(why)) != 0)
    return NULL;
  struct gcoll_plan *plan = gcoll_plan_read_mem(buf, len, name, why, sizeof(why));
  free(buf);
  int ok = plan != NULL && gcoll_plan_verify(plan, why, sizeof(why)) == 0 &&
           plan->nnodes == g->nnodes && plan->nranks == (int)me->ntasks_total;
  for (int i = 0; ok && i < g->nnodes; i++)
    ok = strcmp(plan->node_host[i], g->host[i]) == 0 &&
         plan->classes[plan->node_class[i]].nlocal == g->tasks[i];
  for (int slot = 0; ok && slot < plan->nranks; slot++)
    ok = gcoll_plan_rank_at(plan, slot) == g->rank_of_slot[slot];
  if (!ok) {
    gcoll_plan_free(plan);
    return NULL;
  }
  plan->job.id = me->job;
  plan->job.step = me->step;
  return plan;
}

/* SLURM_STEP_GPUS is used only where every node has GPUs to name. */
static int all_gpu_nodes(const struct gathered *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->topo[i]->ngpu < 1) return 0;
  return 1;
}

/* The ring's node order from the switch fabric the job (GCOLL_FABRIC_FILE)
 * or the administrator (fabric=) names, by Slurm node name; *order stays
 * NULL without one. A named file that cannot be read fails the plan, as a
 * topology file does. */
static int fabric_order(const struct gcoll_spank_config *cfg, const struct gathered *g,
                        const struct gcoll_gather_node *me, int **order, int **blocks,
                        char *err, size_t errlen) {
  const char *path = me->job_fabric_file[0] != '\0' ? me->job_fabric_file : cfg->fabric;
  *order = *blocks = NULL;
  if (path[0] == '\0') return 0;
  char why[GCOLL_SPANK_ERRLEN];
  struct gcoll_fabric *f = gcoll_fabric_read_file(path, why, sizeof(why));
  if (f == NULL) {
    snprintf(err, errlen, "fabric (from %s): %.400s",
             me->job_fabric_file[0] != '\0' ? "GCOLL_FABRIC_FILE" : "plugstack fabric=", why);
    return -1;
  }
  *order = malloc((size_t)g->nnodes * sizeof(int));
  int rc = *order == NULL || gcoll_fabric_order(f, (const char *const *)g->host, g->nnodes,
                                                *order) != 0;
  /* topology/block: blocks are NVLink domains where NVML names none. */
  if (!rc) *blocks = gcoll_fabric_block_domains(f, (const char *const *)g->host, g->nnodes);
  gcoll_fabric_free(f);
  if (rc) {
    free(*order);
    *order = NULL;
    snprintf(err, errlen, "out of memory for the fabric order of %d nodes", g->nnodes);
    return -1;
  }
  return 0;
}

static struct gcoll_plan *compute(const struct gathered *g, const int *order, const int *blocks,
                                  const struct gcoll_gather_node *me, char *err, size_t errlen) {
  struct gcoll_plan_input in = {
      .nnodes = g->nnodes,
      .node_topo = (const struct gcoll_topo **)g->topo,
      .node_host = (const char **)g->host,
      .node_ranks = g->tasks,
      .rank_of_slot = g->rank_of_slot,
      .node_gpus = g->have_gpus && all_gpu_nodes(g) ? g->gpu_of_slot : NULL,
      .job_id = me->job,
      .step_id = me->step,
      .node_order = order,
      .block_domain = blocks,
  };
  struct gcoll_plan *plan = gcoll_plan_build(&in, err, errlen);
  if (plan != NULL && gcoll_plan_verify(plan, err, errlen) != 0) {
    gcoll_plan_free(plan);
    plan = NULL;
  }
  return plan;
}

static int write_key(const struct stepdir *d, char *hex, char *err, size_t errlen) {
  unsigned char raw[16];
  if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
    snprintf(err, errlen, "getrandom: %s", strerror(errno));
    return -1;
  }
  for (size_t i = 0; i < sizeof(raw); i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  return gcoll_jobdir_write(d->step, "key", hex, strlen(hex), err, errlen);
}

/* Node 0, before the plan is published: every node's fragment merged into
 * endpoints.yaml, or endpoints.error saying why not. Never fails the plan. */
static void node0_endpoints(const struct stepdir *d, const struct gcoll_gather_node *me,
                            const struct gathered *g, const char *key, const struct ep_part *p) {
  if (p->ep == NULL && p->why[0] == '\0') return;
  char **frag = calloc((size_t)g->nnodes, sizeof(char *));
  char err[GCOLL_SPANK_ERRLEN] = "", why[GCOLL_SPANK_ERRLEN], name[32];
  char *text = NULL;
  size_t len = 0;
  int node_fault = 0;
  if (frag == NULL) {
    snprintf(err, sizeof(err), "out of memory for %d nodes' endpoints", g->nnodes);
    goto out;
  }
  for (int i = 0; i < g->nnodes; i++) {
    snprintf(name, sizeof(name), "%d.endpoints", i);
    size_t n;
    int rc = gcoll_jobdir_read(d->nodes, name, 4096, &frag[i], &n, why, sizeof(why));
    if (rc < 0) {
      snprintf(err, sizeof(err), "nodes/%.480s", why);
      goto out;
    }
  }
  text = gcoll_spank_endpoints_merge(frag, g->tasks, g->nnodes, g->rank_of_slot,
                                     (int)me->ntasks_total, key, &len, &node_fault, err,
                                     sizeof(err));
  if (text != NULL && gcoll_jobdir_write(d->step, "endpoints.yaml", text, len, why,
                                         sizeof(why)) != 0)
    snprintf(err, sizeof(err), "%s", why);
out:
  if (err[0] != '\0') {
    /* The others read it and run without; whoever failed says so. */
    gcoll_jobdir_write(d->step, "endpoints.error", err, strlen(err), why, sizeof(why));
    if (p->out->endpoints_err[0] == '\0') {
      snprintf(p->out->endpoints_err, sizeof(p->out->endpoints_err), "%s", err);
      p->out->endpoints_report = !node_fault;
    }
  }
  for (int i = 0; frag != NULL && i < g->nnodes; i++) free(frag[i]);
  free(frag);
  free(text);
}

static struct gcoll_plan *read_given(const char *path, const struct gcoll_gather_node *me,
                                     char *err, size_t errlen);

static int node0_plan(const struct gcoll_spank_config *cfg, const struct stepdir *d,
                      const struct gcoll_gather_node *me, const struct ep_part *part,
                      double deadline, struct gcoll_gather_result *out, char *err,
                      size_t errlen) {
  struct gathered g = {0};
  struct gcoll_plan *plan = NULL;
  int cdir = -1, rc = -1, *order = NULL, *blocks = NULL;
  char cname[64], centry[40], why[GCOLL_SPANK_ERRLEN], key[33];
  if (wait_nodes(d, (int)me->nnodes, deadline, err, errlen) != 0 ||
      gather(d, me, &g, err, errlen) != 0)
    goto out;
  if (d->given != NULL) {
    /* Published as the step's own copy, so every node runs the same bytes
     * even if the user rewrites the file while the step starts. */
    if ((plan = read_given(d->given, me, err, errlen)) == NULL) goto out;
    plan->job.id = me->job;
    plan->job.step = me->step;
    goto publish;
  }
  if (fabric_order(cfg, &g, me, &order, &blocks, err, errlen) != 0) goto out;
  snprintf(centry, sizeof(centry), "%016llx.yaml",
           (unsigned long long)cache_key(&g, order, blocks));
  snprintf(cname, sizeof(cname), "%u.cache", me->job);
  /* The cache is an optimisation: if its directory is unusable the plan is
   * computed, never refused. */
  if (cfg->cache &&
      gcoll_jobdir_open_private(d->user, cname, 1, me->uid, me->gid, &cdir, why, sizeof(why)) == 0)
    plan = cache_lookup(cdir, centry, &g, me);
  out->from_cache = plan != NULL;
  out->distinct_topologies = g.ntexts;
  if (plan == NULL && (plan = compute(&g, order, blocks, me, err, errlen)) == NULL) goto out;
publish:
  if (write_key(d, key, err, errlen) != 0) goto out;
  /* Per step, whether the plan came from the cache or not. */
  node0_endpoints(d, me, &g, key, part);
  if (write_yaml(d->step, "plan.yaml", plan_writer, plan, err, errlen) != 0) goto out;
  if (cdir >= 0 && !out->from_cache)
    write_yaml(cdir, centry, plan_writer, plan, why, sizeof(why)); /* best effort */
  rc = 0;
out:
  if (cdir >= 0) close(cdir);
  gcoll_plan_free(plan);
  gathered_free(&g);
  free(order);
  free(blocks);
  return rc;
}

/* ---- every node: wait for the outcome ----------------------------------- */

/* 1 while `name` under the user directory is still the run this node
 * joined (its nonce unchanged), 0 when node 0 replaced or removed it. */
static int same_run(const struct stepdir *d, const struct gcoll_gather_node *me) {
  char nonce[GCOLL_SPANK_NONCE_LEN + 1], why[GCOLL_SPANK_ERRLEN];
  int fd = -1;
  int rc = gcoll_jobdir_join(d->user, d->name, me->uid, me->gid, &fd, nonce, sizeof(nonce), why,
                             sizeof(why));
  if (fd >= 0) close(fd);
  return rc == 0 && strcmp(nonce, d->nonce) == 0;
}

/* node 0's one-line reason, when it wrote one: 1 and err set, 0 if none,
 * -1 when it cannot be read. */
static int read_error(const struct stepdir *d, char *err, size_t errlen) {
  char *buf = NULL;
  size_t len;
  int rc = gcoll_jobdir_read(d->step, "plan.error", 1024, &buf, &len, err, errlen);
  if (rc != 0) return rc > 0 ? 0 : -1;
  len = strcspn(buf, "\n");
  snprintf(err, errlen, "node 0: %.*s", (int)len, buf);
  free(buf);
  return 1;
}

/* Nodes other than 0: join the run node 0 made, write this node's part,
 * and wait for the outcome, joining again whenever the directory turns
 * out to be a leftover or is replaced. 0 when plan.yaml is there. */
static int join_and_wait(struct stepdir *d, const struct gcoll_spank_config *cfg,
                         const struct gcoll_gather_node *me, const struct ep_part *part,
                         double deadline, char *topo_info, size_t topo_infolen, char *err,
                         size_t errlen) {
  char why[GCOLL_SPANK_ERRLEN] = "";
  double nap_ms = 1;
  for (;;) {
    if (d->step < 0) {
      int rc = gcoll_jobdir_join(d->user, d->name, me->uid, me->gid, &d->step, d->nonce,
                                 sizeof(d->nonce), why, sizeof(why));
      if (rc == 0 && (exists(d->step, "plan.yaml") || exists(d->step, "plan.error"))) {
        /* An outcome before this node took part: an earlier run's. Its
         * reason is kept in case node 0 never replaces it (then it is
         * this run's: node 0 failed before this node came). */
        if (read_error(d, why, sizeof(why)) <= 0)
          snprintf(why, sizeof(why), "%s holds an earlier run's plan", d->name);
        stepdir_leave(d);
      } else if (rc == 0) {
        if (stepdir_subdirs(d, me, err, errlen) != 0 ||
            write_node(d, cfg, me, part, topo_info, topo_infolen, err, errlen) != 0) {
          /* Node 0 removed a leftover under us: join the new one. */
          if (!same_run(d, me)) {
            stepdir_leave(d);
            continue;
          }
          return -1;
        }
      }
      /* rc > 0: node 0 has not made it yet; rc < 0: not usable (yet) */
    } else {
      if (exists(d->step, "plan.yaml")) return 0;
      int rc = read_error(d, err, errlen);
      if (rc != 0) return -1;
      if (!same_run(d, me)) {
        stepdir_leave(d);
        continue;
      }
      snprintf(why, sizeof(why), "no plan from node 0 in time (is plandir shared by all nodes?)");
    }
    if (gcoll_spank_now_ms() > deadline) {
      snprintf(err, errlen, "%s", why[0] != '\0' ? why : "node 0 did not start the step in time "
                                                         "(is plandir shared by all nodes?)");
      return -1;
    }
    nap(&nap_ms);
  }
}

static int read_key(const struct stepdir *d, char *key, size_t keylen, char *err, size_t errlen) {
  char *buf = NULL;
  size_t len;
  int rc = gcoll_jobdir_read(d->step, "key", 256, &buf, &len, err, errlen);
  if (rc != 0) {
    if (rc > 0) snprintf(err, errlen, "the step's key file is missing");
    return -1;
  }
  rc = len > 0 && len < keylen && strspn(buf, "0123456789abcdef") == len ? 0 : -1;
  if (rc == 0) snprintf(key, keylen, "%s", buf);
  else snprintf(err, errlen, "the step's key file is malformed");
  free(buf);
  return rc;
}

/* The plan suits this step as this node sees it: rank and node counts,
 * this node's name, and the ranks of its tasks. what names the plan in the
 * reason. */
static int node_ranks_match(const struct gcoll_plan *plan, int i,
                            const struct gcoll_gather_node *me) {
  const struct gcoll_plan_class *k = &plan->classes[plan->node_class[i]];
  if (k->nlocal != (int)me->ntasks_local) return 0;
  for (int j = 0; j < k->nlocal; j++)
    if (gcoll_plan_rank_at(plan, plan->node_first_rank[i] + j) != me->ranks[j]) return 0;
  return 1;
}

static int plan_fits(const struct gcoll_plan *plan, const char *what,
                     const struct gcoll_gather_node *me, char *err, size_t errlen) {
  char why[GCOLL_SPANK_ERRLEN];
  int i = (int)me->node_index;
  if (gcoll_plan_verify(plan, why, sizeof(why)) != 0)
    snprintf(err, errlen, "%s: invalid plan: %s", what, why);
  else if (plan->nranks != (int)me->ntasks_total || plan->nnodes != (int)me->nnodes)
    snprintf(err, errlen, "%s: plan is for %d ranks on %d nodes, the step has %u tasks on %u "
                          "nodes", what, plan->nranks, plan->nnodes, me->ntasks_total, me->nnodes);
  else if (strcmp(plan->node_host[i], me->node_name) != 0)
    snprintf(err, errlen, "%s: plan puts node %d on '%s', the step runs it on '%s'", what, i,
             plan->node_host[i], me->node_name);
  else if (!node_ranks_match(plan, i, me))
    snprintf(err, errlen, "%s: plan gives node %s other ranks than the step runs there (%u "
                          "tasks from rank %d)", what, me->node_name, me->ntasks_local,
             me->ranks[0]);
  else
    return 0;
  return -1;
}

/* Every node, before its tasks get the plan node 0 published: it is this
 * step's (job and step ids) and fits this node. */
static int check_published(const struct stepdir *d, const struct gcoll_gather_node *me,
                           char *err, size_t errlen) {
  char *buf = NULL, why[GCOLL_SPANK_ERRLEN], what[96];
  size_t len;
  snprintf(what, sizeof(what), "%s/plan.yaml", d->name);
  int rc = gcoll_jobdir_read(d->step, "plan.yaml", GCOLL_SPANK_MAX_FILE, &buf, &len, why,
                             sizeof(why));
  if (rc != 0) {
    snprintf(err, errlen, "%s/%s", d->name, rc > 0 ? "plan.yaml vanished" : why);
    return -1;
  }
  struct gcoll_plan *plan = gcoll_plan_read_mem(buf, len, what, why, sizeof(why));
  free(buf);
  rc = -1;
  if (plan == NULL)
    snprintf(err, errlen, "%s", why);
  else if (plan->job.id != (int64_t)me->job || plan->job.step != (int64_t)me->step)
    snprintf(err, errlen, "%s: plan is for step %lld.%lld, not %u.%u", what,
             (long long)plan->job.id, (long long)plan->job.step, me->job, me->step);
  else
    rc = plan_fits(plan, what, me, err, errlen);
  gcoll_plan_free(plan);
  return rc;
}

/* Every node once the plan is there: node 0's endpoints file is this
 * step's and names this node's sockets, else why not. */
static void take_endpoints(const struct stepdir *d, const struct gcoll_spank_config *cfg,
                           const struct gcoll_gather_node *me, const struct ep_part *p) {
  struct gcoll_gather_result *out = p->out;
  if (p->ep == NULL) {
    /* This node's own failure: it says so (node 0's merge only names it). */
    if (p->why[0] != '\0') {
      snprintf(out->endpoints_err, sizeof(out->endpoints_err), "%s", p->why);
      out->endpoints_report = 1;
    }
    return;
  }
  if (out->endpoints_err[0] != '\0') return;
  char *buf = NULL, why[GCOLL_SPANK_ERRLEN];
  size_t len;
  int rc = gcoll_jobdir_read(d->step, "endpoints.yaml",
                             4096 + (size_t)GCOLL_ENDPOINTS_BYTES_PER_RANK * me->ntasks_total,
                             &buf, &len, why, sizeof(why));
  if (rc == 0) {
    if (gcoll_spank_endpoints_check(buf, len, out->job_key, me, p->ep, why, sizeof(why)) == 0) {
      int n = snprintf(out->endpoints_path, sizeof(out->endpoints_path),
                       "%s/%u/%s/endpoints.yaml", cfg->plandir, (unsigned)me->uid, d->name);
      if (n < 0 || (size_t)n >= sizeof(out->endpoints_path)) {
        out->endpoints_path[0] = '\0';
        snprintf(why, sizeof(why), "endpoints path too long");
        rc = -1;
      }
    } else {
      rc = -1;
    }
    if (rc != 0) {
      snprintf(out->endpoints_err, sizeof(out->endpoints_err), "%s", why);
      out->endpoints_report = 1;
    }
  } else if (rc > 0) {
    /* Node 0 said why (and reported it, or the node at fault did). */
    free(buf);
    buf = NULL;
    rc = gcoll_jobdir_read(d->step, "endpoints.error", 1024, &buf, &len, why, sizeof(why));
    if (rc == 0) {
      len = strcspn(buf, "\n");
      snprintf(out->endpoints_err, sizeof(out->endpoints_err), "node 0: %.*s", (int)len, buf);
    } else {
      snprintf(out->endpoints_err, sizeof(out->endpoints_err), "node 0 published no endpoints "
               "(is endpoints=no on node 0?)");
      out->endpoints_report = 1;
    }
  } else {
    snprintf(out->endpoints_err, sizeof(out->endpoints_err), "%s", why);
    out->endpoints_report = 1;
  }
  free(buf);
}

int gcoll_spank_gather(const struct gcoll_spank_config *cfg, const struct gcoll_gather_node *me,
                       struct gcoll_gather_result *out, char *err, size_t errlen) {
  return gcoll_spank_gather_ep(cfg, me, NULL, "", out, err, errlen);
}

static int plan_phase(const struct gcoll_spank_config *cfg, const struct gcoll_gather_node *me,
                      const char *given, const struct gcoll_spank_endpoints *ep,
                      const char *ep_err, struct gcoll_gather_result *out, char *err,
                      size_t errlen) {
  memset(out, 0, sizeof(*out));
  struct ep_part part = {.ep = ep, .why = ep_err != NULL ? ep_err : "", .out = out};
  double t0 = gcoll_spank_now_ms(), deadline = t0 + cfg->timeout_s * 1e3;
  struct stepdir d;
  if (stepdir_open(cfg, me, &d, err, errlen) != 0) return -1;
  d.given = given;
  int rc = -1;
  char why[GCOLL_SPANK_ERRLEN];
  if (me->node_index == 0) {
    if (write_node(&d, cfg, me, &part, out->topo_info, sizeof(out->topo_info), err, errlen) != 0 ||
        node0_plan(cfg, &d, me, &part, t0 + GATHER_SHARE * cfg->timeout_s * 1e3, out, err,
                   errlen) != 0) {
      /* Node 0 tells the others why (its own topology, or the plan,
       * failed), so they stop waiting with the reason instead of at the
       * deadline. */
      gcoll_jobdir_write(d.step, "plan.error", err, strlen(err), why, sizeof(why));
      goto out;
    }
    out->build_ms = gcoll_spank_now_ms() - t0;
  } else if (join_and_wait(&d, cfg, me, &part, deadline, out->topo_info, sizeof(out->topo_info),
                           err, errlen) != 0) {
    goto out;
  }
  if (check_published(&d, me, err, errlen) != 0 ||
      read_key(&d, out->job_key, sizeof(out->job_key), err, errlen) != 0)
    goto out;
  /* Last: the path handed to the tasks still names this run's directory
   * (node 0 has not replaced it since this node checked the plan). */
  if (!same_run(&d, me)) {
    snprintf(err, errlen, "%s was replaced while this node read its plan", d.name);
    goto out;
  }
  int n = snprintf(out->plan_path, sizeof(out->plan_path), "%s/%u/%s/plan.yaml", cfg->plandir,
                   (unsigned)me->uid, d.name);
  if (n < 0 || (size_t)n >= sizeof(out->plan_path)) {
    snprintf(err, errlen, "plan path too long");
    goto out;
  }
  take_endpoints(&d, cfg, me, &part);
  rc = 0;
out:
  stepdir_close(&d);
  return rc;
}

int gcoll_spank_gather_ep(const struct gcoll_spank_config *cfg, const struct gcoll_gather_node *me,
                          const struct gcoll_spank_endpoints *ep, const char *ep_err,
                          struct gcoll_gather_result *out, char *err, size_t errlen) {
  return plan_phase(cfg, me, NULL, ep, ep_err, out, err, errlen);
}

int gcoll_spank_publish_file(const struct gcoll_spank_config *cfg, const char *path,
                             const struct gcoll_gather_node *me,
                             const struct gcoll_spank_endpoints *ep, const char *ep_err,
                             struct gcoll_gather_result *out, char *err, size_t errlen) {
  return plan_phase(cfg, me, path, ep, ep_err, out, err, errlen);
}

/* ---- --gcoll=FILE --------------------------------------------------------- */

/* The plan at path, read as the plugin reads what a user names (not by
 * gcoll_plan_read_file: O_NONBLOCK|O_NOFOLLOW, regular files only, so a
 * FIFO cannot hang slurmstepd beyond the plugin's timeout), if it fits
 * this node's part of the step. */
static struct gcoll_plan *read_given(const char *path, const struct gcoll_gather_node *me,
                                     char *err, size_t errlen) {
  char why[GCOLL_SPANK_ERRLEN], *buf = NULL;
  size_t len;
  int rc = gcoll_jobdir_read(AT_FDCWD, path, GCOLL_SPANK_MAX_FILE, &buf, &len, why, sizeof(why));
  if (rc != 0) {
    if (rc > 0) snprintf(err, errlen, "%s: %s", path, strerror(ENOENT));
    else snprintf(err, errlen, "%s", why);
    return NULL;
  }
  struct gcoll_plan *plan = gcoll_plan_read_mem(buf, len, path, why, sizeof(why));
  free(buf);
  if (plan == NULL) {
    snprintf(err, errlen, "%s", why);
    return NULL;
  }
  if (plan_fits(plan, path, me, err, errlen) != 0) {
    gcoll_plan_free(plan);
    return NULL;
  }
  return plan;
}

int gcoll_spank_check_file(const char *path, const struct gcoll_gather_node *me,
                           struct gcoll_gather_result *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  struct gcoll_plan *plan = read_given(path, me, err, errlen);
  if (plan == NULL) return -1;
  gcoll_plan_free(plan);
  snprintf(out->plan_path, sizeof(out->plan_path), "%s", path);
  /* Every node derives the same key without talking to the others. */
  char id[32];
  snprintf(id, sizeof(id), "%u.%u", me->job, me->step);
  snprintf(out->job_key, sizeof(out->job_key), "%016llx",
           (unsigned long long)fnv64(14695981039346656037ull, id, strlen(id)));
  return 0;
}
