/* Which plan a communicator made from a unique id runs on.
 *
 * PyTorch (and everything built on it) makes a communicator per process
 * group from a fresh id: the world, then tensor-, data- and pipeline-
 * parallel groups, each a subset of the job in its own rank order; under
 * `srun torchrun` the NCCL ranks are not even the Slurm tasks. So the id's
 * members say who they are through the id's own store, and rank 0 decides
 * for all of them:
 *   - the launcher's plan (GCOLL_PLAN, from gcollrun or the SPANK plugin)
 *     when the members are exactly the launcher's ranks in its order: the
 *     plan computed at job start, GPU topology and all;
 *   - a plan derived from the launcher's when every member holds a rank of
 *     it (a group of the job, e.g. gcollCommSplit's children, or PyTorch's
 *     new_group): gcoll_plan_subset keeps each member's node, GPU and NICs
 *     and reads no topology. Rank 0 sends the members' launcher ranks as a
 *     rank list (strided groups stay a few bytes) and every member derives
 *     the same plan from the same file;
 *   - otherwise the members plan themselves, as ranks with no plan under a
 *     launcher's bootstrap do (comm_plan_job.c): one node per distinct
 *     node name (Slurm's node, the host, or GCOLL_NODES's virtual nodes),
 *     whose first member describes it ($GCOLL_TOPO, else detected and
 *     merged with GCOLL_TOPO_FILE/NCCL_TOPO_FILE, once per process); rank
 *     0 builds the plan and serves it through the id's store.
 * Members of one node may come in any order (plans carry a rank order).
 *
 * Rank 0 reads nranks member records (one round trip each), every other
 * rank one record back: O(nranks) at rank 0, O(1) elsewhere. A derived
 * plan costs each member one read of the launcher's plan file. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gcoll_plan.h"
#include "graph/plan.h"
#include "graph/tuning.h"
#include "runtime/comm.h"
#include "runtime/comm_init_paths.h"
#include "runtime/comm_members.h"
#include "runtime/kvs_proto.h"

#define MEMBER_KEY "members/%d"
#define CHOICE_KEY "members/plan"
#define CHOICE_MAX KVS_MAX_VALUE
#define NODE_MAX GCOLL_PLAN_HOST_MAX

struct member {
  int launcher_rank, launcher_nranks; /* -1 without a launcher plan */
  int gpu_rank;   /* the launcher rank planned on the GPU this process drives */
  char node[NODE_MAX];
};

/* This process's launcher rank: GCOLL_RANK, else Slurm's task id. */
static int launcher_rank(void) {
  static const char *const names[] = {"GCOLL_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const char *v = getenv(names[i]);
    char *end;
    if (v == NULL || *v == '\0') continue;
    errno = 0;
    long r = strtol(v, &end, 10);
    if (*end == '\0' && errno == 0 && r >= 0 && r < GCOLL_MAX_RANKS) return (int)r;
  }
  return -1;
}

/* Whether this process is the launcher's rank lr of a job of nranks, or
 * one of several ranks a launcher task started itself (`srun torchrun`:
 * torchrun's RANK/WORLD_SIZE describe the process, while GCOLL_RANK is the
 * task's, shared by every rank the task started). A RANK or WORLD_SIZE
 * that contradicts the launcher's says the latter. */
static int is_launcher_rank(int lr, int nranks) {
  const char *rank = getenv("RANK"), *size = getenv("WORLD_SIZE");
  if (size != NULL && *size != '\0' && strtol(size, NULL, 10) != nranks) return 0;
  if (rank != NULL && *rank != '\0' && strtol(rank, NULL, 10) != lr) return 0;
  return 1;
}

/* Who this member is, for rank 0's decision. */
static gcollResult_t describe_self(struct member *m, int rank, int nranks) {
  m->launcher_rank = m->launcher_nranks = m->gpu_rank = -1;
  const char *plan = getenv("GCOLL_PLAN");
  int lr = launcher_rank();
  if (plan != NULL && *plan != '\0' && lr >= 0) {
    struct gcoll_rank_view *view = malloc(sizeof(*view));
    char err[512];
    if (view == NULL) return gcoll_fail(gcollSystemError, "out of memory");
    if (gcoll_plan_load_rank_view(plan, lr, view, err, sizeof(err)) != 0) {
      free(view);
      return gcoll_fail(gcollInvalidUsage, "the launcher's plan (GCOLL_PLAN): %s", err);
    }
    /* A rank a task started itself is still on the task's node. */
    if (is_launcher_rank(lr, view->nranks)) {
      m->launcher_rank = m->gpu_rank = lr;
      m->launcher_nranks = view->nranks;
      m->gpu_rank = gcoll_gpu_plan_rank(plan, view);
    }
    snprintf(m->node, sizeof(m->node), "%s", view->host);
    free(view);
    return gcollSuccess;
  }
  const char *nodes = getenv("GCOLL_NODES");
  long k = nodes != NULL && *nodes != '\0' ? strtol(nodes, NULL, 10) : 1;
  if (k > 1) {
    /* Virtual nodes of this host, as gcollrun --nodes K makes them. */
    char host[NODE_MAX - 32];
    gcoll_short_hostname(host, sizeof(host));
    if (k > nranks || nranks % k != 0)
      return gcoll_fail(gcollInvalidArgument, "GCOLL_NODES must divide the %d ranks", nranks);
    snprintf(m->node, sizeof(m->node), "%s-v%ld", host, rank / (nranks / k));
  } else {
    gcoll_this_node_name(m->node, sizeof(m->node));
  }
  return gcollSuccess;
}

static int parse_member(const char *s, struct member *m) {
  int used = 0;
  return sscanf(s, "%d %d %d %63s%n", &m->launcher_rank, &m->gpu_rank, &m->launcher_nranks,
                m->node, &used) == 4 &&
         s[used] == '\0' && m->launcher_rank >= -1 && m->gpu_rank >= -1 &&
         m->launcher_nranks >= -1;
}

/* The members' launcher ranks, by the GPU each drives (by_gpu) or as the
 * launcher numbered them, when they are distinct ranks of one launcher
 * plan: malloc'd, or NULL. Under `srun torchrun` the ranks a Slurm task
 * starts all hold that task's rank; ranks sharing one GPU (several ranks
 * per GPU are allowed) all hold its launcher rank. */
static int *job_ranks(const struct member *all, int nranks, int by_gpu) {
  int job = all[0].launcher_nranks;
  if (job < 1 || nranks > job) return NULL;
  int *ranks = malloc((size_t)nranks * sizeof(*ranks));
  unsigned char *taken = calloc((size_t)job, 1);
  int ok = ranks != NULL && taken != NULL;
  for (int r = 0; r < nranks && ok; r++) {
    int l = by_gpu ? all[r].gpu_rank : all[r].launcher_rank;
    ok = l >= 0 && l < job && all[r].launcher_nranks == job && !taken[l]++;
    ranks[r] = l;
  }
  free(taken);
  if (!ok) {
    free(ranks);
    return NULL;
  }
  return ranks;
}

/* "L" when ranks are the launcher's job in order, "S <list>" for other
 * launcher ranks; 0 when the list does not fit (the members plan themselves). */
static int choose_launcher(const int *ranks, int nranks, int job, char *choice, size_t len) {
  int same = nranks == job;
  for (int r = 0; r < nranks && same; r++) same = ranks[r] == r;
  if (same) {
    snprintf(choice, len, "L");
    return 1;
  }
  char *list = gcoll_ranklist_format(ranks, nranks);
  int ok = list != NULL && strlen(list) + 3 <= len;
  if (ok) snprintf(choice, len, "S %s", list);
  free(list);
  return ok;
}

/* Rank 0: the choice line every member acts on. "L": the launcher's plan;
 * "S <launcher ranks>": derived from it; "J": the members plan themselves,
 * as ranks without a launcher plan do (comm_plan_job.c); "!why". Launcher ranks are matched by GPU
 * first: a rank whose CUDA_VISIBLE_DEVICES or cgroup gave it another GPU
 * than the launcher planned takes the place of the rank planned there. */
static void decide(const struct member *all, int nranks, char *choice, size_t len) {
  int *ranks = job_ranks(all, nranks, 1);
  if (ranks == NULL) ranks = job_ranks(all, nranks, 0);
  /* Ranks of the launcher's plan, in any order and any mix of nodes: its
   * plan, or one derived from it. */
  if (ranks != NULL) {
    int ok = choose_launcher(ranks, nranks, all[0].launcher_nranks, choice, len);
    free(ranks);
    if (ok) return;
  }
  /* No launcher plan covers them: they plan themselves (comm_plan_job.c). */
  snprintf(choice, len, "J");
}

/* Acts on an "S <launcher ranks>" line: the launcher's plan restricted to
 * the members, in a private dir. */
static gcollResult_t write_derived_plan(const char *line, int nranks,
                                        struct gcoll_members_plan *out) {
  const char *launcher = getenv("GCOLL_PLAN");
  char err[1024];
  int *members = NULL, n = 0;
  gcollResult_t rc = gcollSuccess;
  struct gcoll_plan *child = NULL, *parent = gcoll_plan_read_file(launcher, err, sizeof(err));
  if (parent == NULL)
    return gcoll_fail(gcollInvalidUsage, "the launcher's plan (GCOLL_PLAN): %s", err);
  if (gcoll_plan_verify(parent, err, sizeof(err)) != 0)
    rc = gcoll_fail(gcollInvalidUsage, "%s: invalid plan: %s", launcher, err);
  else if (gcoll_ranklist_parse(line + 2, parent->nranks - 1, &members, &n, err,
                                sizeof(err)) != 0 || n != nranks)
    rc = gcoll_fail(gcollRemoteError, "rank 0 sent a malformed plan choice");
  else if ((child = gcoll_plan_subset(parent, members, n, err, sizeof(err))) == NULL)
    rc = gcoll_fail(gcollInvalidUsage, "plan derived from %s: %s", launcher, err);
  else if (gcoll_plan_retune(child, getenv("GCOLL_TUNING"), err, sizeof(err)) != 0)
    rc = gcoll_fail(gcollInvalidUsage, "GCOLL_TUNING: %s", err);
  else if (gcoll_local_plan_save(child, getenv("GCOLL_PLAN_DIR"), out->dir, sizeof(out->dir),
                                 out->path, sizeof(out->path), err, sizeof(err)) != 0)
    rc = gcoll_fail(gcollSystemError, "plan derived from %s: %s", launcher, err);
  else
    snprintf(out->origin, sizeof(out->origin), "derived from the launcher's plan %s for its "
             "ranks %.200s", launcher, line + 2);
  free(members);
  gcoll_plan_free(child);
  gcoll_plan_free(parent);
  return rc;
}


gcollResult_t gcoll_members_plan(struct gcoll_bootstrap *bs, int rank, int nranks,
                                 struct gcoll_members_plan *out) {
  char err[1024], key[64], value[32 + NODE_MAX];
  out->dir[0] = out->origin[0] = '\0';
  out->from_launcher = out->real_hosts = 0;
  struct member me;
  gcollResult_t rc = describe_self(&me, rank, nranks);
  /* A member that cannot describe itself still says so, so that rank 0
   * does not wait for it until the deadline. */
  if (rc != gcollSuccess)
    snprintf(value, sizeof(value), "!");
  else
    snprintf(value, sizeof(value), "%d %d %d %s", me.launcher_rank, me.gpu_rank,
             me.launcher_nranks, me.node);
  snprintf(key, sizeof(key), MEMBER_KEY, rank);
  if (gcoll_bootstrap_put(bs, key, value, strlen(value) + 1, err, sizeof(err)) != 0)
    return rc != gcollSuccess ? rc : gcoll_fail(gcollSystemError, "%s", err);
  if (rc != gcollSuccess) return rc;

  char *choice = calloc(1, CHOICE_MAX);
  if (choice == NULL) return gcoll_fail(gcollSystemError, "out of memory");
  uint64_t deadline = gcoll_bootstrap_deadline(bs);
  if (rank == 0) {
    struct member *all = calloc((size_t)nranks, sizeof(*all));
    if (all == NULL) rc = gcoll_fail(gcollSystemError, "out of memory");
    for (int r = 0; rc == gcollSuccess && r < nranks; r++) {
      size_t len = 0;
      snprintf(key, sizeof(key), MEMBER_KEY, r);
      if (gcoll_bootstrap_get(bs, key, value, sizeof(value), &len, deadline, err, sizeof(err)) != 0)
        snprintf(choice, CHOICE_MAX, "!rank %d of the communicator: %s", r, err);
      else if (len == 0 || value[len - 1] != '\0' || !parse_member(value, &all[r]))
        snprintf(choice, CHOICE_MAX, "!rank %d of the communicator could not say where it runs "
                 "(its own error says why)", r);
      else
        continue;
      break;
    }
    if (rc == gcollSuccess && choice[0] == '\0') decide(all, nranks, choice, CHOICE_MAX);
    free(all);
    if (rc == gcollSuccess &&
        gcoll_bootstrap_put(bs, CHOICE_KEY, choice, strlen(choice) + 1, err, sizeof(err)) != 0)
      rc = gcoll_fail(gcollSystemError, "%s", err);
  } else {
    size_t len = 0;
    if (gcoll_bootstrap_get(bs, CHOICE_KEY, choice, CHOICE_MAX, &len, deadline, err,
                            sizeof(err)) != 0)
      rc = gcoll_fail(gcollRemoteError, "plan choice from rank 0: %s", err);
    else if (len == 0 || choice[len - 1] != '\0')
      rc = gcoll_fail(gcollRemoteError, "rank 0 sent a malformed plan choice");
  }
  if (rc == gcollSuccess) {
    if (choice[0] == '!') {
      rc = gcoll_fail(gcollInvalidUsage, "%s", choice + 1);
    } else if (strcmp(choice, "L") == 0) {
      snprintf(out->path, sizeof(out->path), "%s", getenv("GCOLL_PLAN"));
      snprintf(out->origin, sizeof(out->origin), "the launcher's plan");
      out->from_launcher = out->real_hosts = 1;
    } else if (choice[0] == 'S' && choice[1] == ' ') {
      rc = write_derived_plan(choice, nranks, out);
      out->real_hosts = rc == gcollSuccess;
    } else if (strcmp(choice, "J") == 0) {
      double ms = 0;
      rc = gcoll_job_plan(bs, me.node, out->dir, sizeof(out->dir), out->path, sizeof(out->path),
                          &ms);
      snprintf(out->origin, sizeof(out->origin), "computed for the members' nodes (each node's "
               "topology, built at rank 0, %.1f ms)", ms);
    } else {
      rc = gcoll_fail(gcollRemoteError, "rank 0 sent a malformed plan choice");
    }
  }
  free(choice);
  return rc;
}
