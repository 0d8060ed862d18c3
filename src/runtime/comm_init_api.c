/* NCCL-style ways into a communicator that need no launcher:
 *
 *   gcollCommInitAll     every rank a thread of this process; bootstrap
 *                        "local", plan computed here.
 *   gcollGetUniqueId +   the root hosts the TCP key-value store gcollrun
 *   gcollCommInitRank    uses, on a thread of its own; the members agree
 *                        on a plan through it (comm_members.c): the
 *                        launcher's when they are its ranks, else one
 *                        computed for them. Any number of such
 *                        communicators coexist, under a launcher or not:
 *                        each has its own store and key.
 *
 * Both end in gcoll_comm_init_with(), the same path gcollCommInitFromPlan
 * takes. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "graph/plan.h"
#include "runtime/kvs_thread.h"
#include "runtime/comm.h"
#include "runtime/comm_init_paths.h"
#include "runtime/comm_members.h"
#include "runtime/kvs_proto.h"
#include "runtime/net_tcp.h"

/* Enough randomness that another job on the host cannot guess the key that
 * names our shm segments and authenticates our store. */
#define JOB_KEY_BYTES 16
#define UID_MAGIC "gcoll-uid1"
/* Threads of one process: more would not be a sensible job. */
#define MAX_LOCAL_RANKS 4096

/* ---- gcollCommInitAll ---------------------------------------------------- */

struct local_rank {
  int rank;
  const char *plan_path, *job_key;
  int gpu;                      /* gcoll_comm_thread_gpu */
  struct gcoll_bootstrap_local *shared;
  pthread_t thread;
  int started;
  gcollComm_t comm;
  gcollResult_t rc;
  char why[512];
};

static void *local_rank_main(void *arg) {
  struct local_rank *r = arg;
  char err[512];
  struct gcoll_comm_init_args a = {.plan_path = r->plan_path, .rank = r->rank,
                                   .job_key = r->job_key, .check_host = 0, .has_gpu = 1,
                                   .gpu = r->gpu};
  if (gcoll_bootstrap_local_open(r->shared, r->rank, &a.bs, err, sizeof(err)) != 0) {
    r->rc = gcoll_fail(gcollSystemError, "%s", err);
  } else {
    r->rc = gcoll_comm_init_with(&r->comm, &a);
  }
  /* The reason lives in this thread's last-error slot: carry it home. */
  if (r->rc != gcollSuccess) snprintf(r->why, sizeof(r->why), "%s", gcollGetLastError(NULL));
  return NULL;
}

/* A rank whose thread never ran must still leave the store, or the others
 * would wait for it until GCOLL_TIMEOUT. */
static void leave_for(struct local_rank *r) {
  struct gcoll_bootstrap *bs;
  char err[256];
  if (gcoll_bootstrap_local_open(r->shared, r->rank, &bs, err, sizeof(err)) == 0)
    gcoll_bootstrap_close(bs);
}

static gcollResult_t run_local_ranks(struct local_rank *ranks, int n) {
  for (int i = 0; i < n; i++) {
    int e = pthread_create(&ranks[i].thread, NULL, local_rank_main, &ranks[i]);
    ranks[i].started = e == 0;
    if (e != 0) {
      ranks[i].rc = gcollSystemError;
      snprintf(ranks[i].why, sizeof(ranks[i].why), "thread for rank %d: %s", i, strerror(e));
      leave_for(&ranks[i]);
    }
  }
  for (int i = 0; i < n; i++)
    if (ranks[i].started) pthread_join(ranks[i].thread, NULL);
  /* The first rank that failed for its own reason, not because another left. */
  int worst = -1;
  for (int i = 0; i < n; i++)
    if (ranks[i].rc != gcollSuccess &&
        (worst < 0 || (ranks[worst].rc == gcollRemoteError && ranks[i].rc != gcollRemoteError)))
      worst = i;
  if (worst < 0) return gcollSuccess;
  return gcoll_fail(ranks[worst].rc, "rank %d: %s", worst, ranks[worst].why);
}

gcollResult_t gcollCommInitAll(gcollComm_t *comms, int ndev, const int *devlist) {
  if (comms == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommInitAll: comms is NULL");
  if (ndev < 1 || ndev > MAX_LOCAL_RANKS)
    return gcoll_fail(gcollInvalidArgument, "gcollCommInitAll: ndev %d is not in 1..%d", ndev,
                      MAX_LOCAL_RANKS);
  for (int i = 0; i < ndev; i++) comms[i] = NULL;
  char err[1024], key[2 * JOB_KEY_BYTES + 1], dir[4096], path[4200];
  if (gcoll_random_hex(key, JOB_KEY_BYTES, err, sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "job key: %s", err);
  if (gcoll_local_plan_write(ndev, 1, NULL, NULL, dir, sizeof(dir), path, sizeof(path), err,
                             sizeof(err)) != 0)
    return gcoll_fail(gcollInvalidUsage, "plan for %d ranks: %s", ndev, err);
  struct gcoll_bootstrap_local *shared = gcoll_bootstrap_local_create(ndev, err, sizeof(err));
  struct local_rank *ranks = calloc((size_t)ndev, sizeof(*ranks));
  gcollResult_t rc;
  if (shared == NULL || ranks == NULL) {
    rc = gcoll_fail(gcollSystemError, "%s", shared == NULL ? err : "out of memory");
  } else {
    for (int i = 0; i < ndev; i++)
      ranks[i] = (struct local_rank){.rank = i, .plan_path = path, .job_key = key,
                                     .gpu = gcoll_comm_thread_gpu(devlist, i),
                                     .shared = shared};
    rc = run_local_ranks(ranks, ndev);
    for (int i = 0; i < ndev; i++) {
      if (rc == gcollSuccess)
        comms[i] = ranks[i].comm;
      else if (ranks[i].comm != NULL)
        gcollCommDestroy(ranks[i].comm);
    }
  }
  free(ranks);
  gcoll_bootstrap_local_release(shared);
  gcoll_local_plan_remove(dir);
  return rc;
}

/* ---- gcollGetUniqueId ---------------------------------------------------- */

static int env_set(const char *name) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0';
}

/* Whether a communicator's members may run on other hosts: a launcher
 * (its plan, or Slurm) started this process, GCOLL_NODES asks for several
 * nodes, or torchrun's world is larger than this host's share of it. */
static int members_may_be_remote(void) {
  const char *nodes = getenv("GCOLL_NODES");
  const char *world = getenv("WORLD_SIZE"), *local = getenv("LOCAL_WORLD_SIZE");
  return env_set("GCOLL_PLAN") || env_set("SLURM_STEP_ID") ||
         (nodes != NULL && *nodes != '\0' && strcmp(nodes, "1") != 0) ||
         (world != NULL && local != NULL && strcmp(world, local) != 0);
}

gcollResult_t gcollGetUniqueId(gcollUniqueId *id) {
  if (id == NULL) return gcoll_fail(gcollInvalidArgument, "gcollGetUniqueId: id is NULL");
  char err[512], key[2 * JOB_KEY_BYTES + 1], ip[64];
  uint16_t port = 0;
  if (gcoll_random_hex(key, JOB_KEY_BYTES, err, sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "job key: %s", err);
  /* Where members on other hosts reach it, as the socket transport
   * listens, when they may be elsewhere; else loopback, which no other
   * host can even reach. */
  if (!members_may_be_remote())
    snprintf(ip, sizeof(ip), "127.0.0.1");
  else if (gcoll_tcp_pick_ipv4(ip, sizeof(ip), err, sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "bootstrap store: %s", err);
  if (gcoll_kvs_thread_start(key, ip, 0, GCOLL_KVS_THREAD_WHILE_USED, NULL, &port, err,
                             sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "bootstrap store on %s: %s", ip, err);
  memset(id, 0, sizeof(*id));
  snprintf(id->internal, sizeof(id->internal), "%s %s:%u %s", UID_MAGIC, ip, (unsigned)port,
           key);
  return gcollSuccess;
}

/* ---- gcollCommInitRank --------------------------------------------------- */

/* "gcoll-uid1 ADDR KEY": checked field by field, since an id arrives through
 * whatever channel the user chose. */
static gcollResult_t parse_uid(const gcollUniqueId *id, char *addr, size_t addrlen, char *key,
                               size_t keylen) {
  const char *s = id->internal;
  size_t len = strnlen(s, sizeof(id->internal));
  const char *sp1 = memchr(s, ' ', len);
  const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - s)) : NULL;
  if (len == sizeof(id->internal) || sp1 == NULL || sp2 == NULL ||
      (size_t)(sp1 - s) != strlen(UID_MAGIC) || memcmp(s, UID_MAGIC, strlen(UID_MAGIC)) != 0)
    return gcoll_fail(gcollInvalidArgument, "gcollCommInitRank: the id was not made by "
                                            "gcollGetUniqueId");
  size_t alen = (size_t)(sp2 - sp1 - 1), klen = len - (size_t)(sp2 + 1 - s);
  if (alen == 0 || alen >= addrlen || klen == 0 || klen >= keylen ||
      strspn(sp2 + 1, "0123456789abcdef") != klen)
    return gcoll_fail(gcollInvalidArgument, "gcollCommInitRank: malformed id");
  memcpy(addr, sp1 + 1, alen);
  addr[alen] = '\0';
  memcpy(key, sp2 + 1, klen);
  key[klen] = '\0';
  return gcollSuccess;
}

/* The settings that mean something in gcoll; the rest is refused rather
 * than silently dropped. */
static gcollResult_t check_config(const gcollConfig_t *c) {
  if (c == NULL) return gcollSuccess;
  if (c->size != sizeof(*c))
    return gcoll_fail(gcollInvalidArgument, "gcollCommInitRankConfig: config size %zu is not "
                      "sizeof(gcollConfig_t) %zu (use GCOLL_CONFIG_INITIALIZER)", c->size,
                      sizeof(*c));
  if (c->minChannels < 0 || c->maxChannels < 0 || c->minChannels > GCOLL_MAX_CHANNELS ||
      c->maxChannels > GCOLL_MAX_CHANNELS ||
      (c->maxChannels > 0 && c->minChannels > c->maxChannels))
    return gcoll_fail(gcollInvalidArgument, "gcollCommInitRankConfig: channels %d..%d (0 or "
                      "1..%d, min <= max)", c->minChannels, c->maxChannels, GCOLL_MAX_CHANNELS);
  if (c->netName != NULL && strcasecmp(c->netName, "IB") != 0 &&
      strcasecmp(c->netName, "Socket") != 0)
    return gcoll_fail(gcollInvalidArgument, "gcollCommInitRankConfig: netName '%.32s': gcoll "
                      "has IB and Socket", c->netName);
  return gcollSuccess;
}

gcollResult_t gcollCommInitRank(gcollComm_t *comm, int nranks, gcollUniqueId id, int rank) {
  return gcollCommInitRankConfig(comm, nranks, id, rank, NULL);
}

gcollResult_t gcollCommInitRankConfig(gcollComm_t *comm, int nranks, gcollUniqueId id, int rank,
                                      const gcollConfig_t *config) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommInitRank: comm is NULL");
  *comm = NULL;
  if (nranks < 1 || nranks > GCOLL_MAX_RANKS || rank < 0 || rank >= nranks)
    return gcoll_fail(gcollInvalidArgument, "gcollCommInitRank: rank %d of %d ranks", rank,
                      nranks);
  gcollResult_t crc = check_config(config);
  if (crc != gcollSuccess) return crc;
  char addr[300], key[KVS_MAX_JOB_KEY + 1], err[1024];
  gcollResult_t rc = parse_uid(&id, addr, sizeof(addr), key, sizeof(key));
  if (rc != gcollSuccess) return rc;
  struct gcoll_members_plan *plan = calloc(1, sizeof(*plan));
  if (plan == NULL) return gcoll_fail(gcollSystemError, "out of memory");
  struct gcoll_comm_init_args a = {.plan_path = plan->path, .rank = rank, .job_key = key,
                                   .check_host = 0, .config = config};
  if (gcoll_bootstrap_tcp_open(&a.bs, addr, key, rank, nranks, err, sizeof(err)) != 0) {
    free(plan);
    return gcoll_fail(gcollSystemError, "%s", err);
  }
  rc = gcoll_members_plan(a.bs, rank, nranks, plan);
  if (rc != gcollSuccess) {
    gcoll_bootstrap_close(a.bs);
  } else {
    a.check_host = plan->real_hosts;
    rc = gcoll_comm_init_with(comm, &a);
    if (rc == gcollSuccess && (*comm)->view->gpu >= 0)
      gcoll_log_info(*comm, "plan %s; drives GPU %d of %s", plan->origin, (*comm)->view->gpu,
                     (*comm)->view->host);
    else if (rc == gcollSuccess)
      gcoll_log_info(*comm, "plan %s", plan->origin);
  }
  /* Init ends in a barrier, so every rank has read its plan by now. */
  gcoll_local_plan_remove(plan->dir);
  free(plan);
  return rc;
}
