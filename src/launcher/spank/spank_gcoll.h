/* The gcoll SPANK plugin: `srun --gcoll=plan` gathers every node's topology
 * at step start, one node computes the step's plan, every task gets
 * GCOLL_PLAN. Files, one concern each, like pyxis:
 *   spank_plugin.c   the SPANK symbols: dispatch on spank_context()
 *   spank_config.c   plugstack.conf arguments and the --gcoll value
 *   spank_remote.c   slurmstepd: user_init (the plan phase), task_init
 *   spank_gather.c   the file barrier: topologies in, plan out, cache
 *   spank_jobdir.c   safe files under plandir (no symlinks, 0700, sizes)
 *   spank_epilog.c   slurmd job epilog: removes the job's directories
 *   spank_endpoints.c each node's listening sockets and its endpoints
 *                    fragment; node 0 merges them into endpoints.yaml
 * Only spank_plugin.c, spank_remote.c and spank_epilog.c talk to Slurm;
 * the rest report through err buffers, so the tests can drive them. */
#ifndef GCOLL_SPANK_GCOLL_H
#define GCOLL_SPANK_GCOLL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/clock.h"

#define GCOLL_SPANK_ERRLEN 512
#define GCOLL_SPANK_PATH_MAX 1024

enum gcoll_spank_mode {
  GCOLL_MODE_OFF = 0,   /* default: the job is untouched */
  GCOLL_MODE_PLAN,      /* gather, compute, export; failure = warning */
  GCOLL_MODE_STRICT,    /* plan:strict: failure fails the step */
  GCOLL_MODE_FILE,      /* an existing plan, verified against the step */
};

/* plugstack.conf arguments, parsed once in slurm_spank_init. */
struct gcoll_spank_config {
  char plandir[GCOLL_SPANK_PATH_MAX];  /* required */
  char topo[GCOLL_SPANK_PATH_MAX];     /* "auto" or a topology file/name */
  char topo_file[GCOLL_SPANK_PATH_MAX]; /* topo_file=: merged with detection; "" none */
  char fabric[GCOLL_SPANK_PATH_MAX];    /* fabric=: Slurm's topology.conf; "" none */
  int timeout_s;                       /* every wait of the plan phase */
  int cache;                           /* reuse plans across steps of a job */
  int endpoints;                       /* endpoints=: bind the tasks' sockets (default yes) */
};

struct gcoll_spank_option {
  enum gcoll_spank_mode mode;
  char file[GCOLL_SPANK_PATH_MAX];     /* GCOLL_MODE_FILE */
};

/* Parses "key=value" arguments; unknown keys, bad values and a missing
 * plandir are refused. */
int gcoll_spank_config_parse(struct gcoll_spank_config *cfg, int argc, char **argv, char *err,
                             size_t errlen);
/* Parses --gcoll's value: off, plan, plan:strict, or an absolute path. */
int gcoll_spank_option_parse(struct gcoll_spank_option *opt, const char *value, char *err,
                             size_t errlen);
const char *gcoll_spank_mode_name(enum gcoll_spank_mode mode);
/* The topology file merged with detection (topo=auto) on a node: the job's
 * GCOLL_TOPO_FILE, else its NCCL_TOPO_FILE (values from the job's
 * environment, NULL or "" when unset), else plugstack topo_file=. NULL when
 * none; *from names the source ("GCOLL_TOPO_FILE", "NCCL_TOPO_FILE",
 * "plugstack topo_file="). NCCL's configuration files are not read here. */
const char *gcoll_spank_topo_file(const struct gcoll_spank_config *cfg, const char *job_gcoll,
                                  const char *job_nccl, const char **from);

/* ---- spank_jobdir.c: files under plandir -------------------------------- */

/* Slurm's special step ids (batch script, extern, interactive, ...) start
 * here; they never get a plan. */
#define GCOLL_SPANK_SPECIAL_STEP 0xFFFFFFF0u
/* Largest file the plugin reads (topology, node info, plan). */
#define GCOLL_SPANK_MAX_FILE (16u << 20)

/* Opens plandir itself (the administrator's directory; it may be a link). */
int gcoll_jobdir_open_root(const char *plandir, int *fd, char *err, size_t errlen);
/* Privileged (root, slurmstepd's init_post_opt): makes plandir/<uid> the
 * user's own directory, mode 0700, before the plan phase runs as the user.
 * Whatever else holds that name (another user's directory, a link, a
 * file) is renamed aside to ".<uid>.refused.<random>", named in `moved`
 * (empty when nothing was). */
int gcoll_jobdir_user_parent(int root, uid_t uid, gid_t gid, char *moved, size_t movedlen,
                             char *err, size_t errlen);
/* As the job's user: opens plandir/<uid>, refused unless it is a directory
 * owned by uid with no access for group or others. */
int gcoll_jobdir_open_user(int root, uid_t uid, int *fd, char *err, size_t errlen);
/* 32 hex digits from getrandom, NUL-terminated (out: >= 33 bytes). */
int gcoll_jobdir_nonce(char *out, size_t outlen, char *err, size_t errlen);
#define GCOLL_SPANK_NONCE_LEN 32
/* Node 0 at step start: removes whatever an earlier run left under `name`
 * (a requeued job reuses its id), then puts a fresh directory there with
 * topo/, nodes/ and the file `nonce`, built under a temporary name and
 * renamed into place, so another node never sees it half made. *fd is
 * the new directory. */
int gcoll_jobdir_fresh(int parent, const char *name, const char *nonce, uid_t uid, gid_t gid,
                       int *fd, char *err, size_t errlen);
/* The other nodes: opens `name` (a private directory of uid) and reads its
 * nonce. Returns 0, 1 when node 0 has not made it yet, -1 on error. */
int gcoll_jobdir_join(int parent, const char *name, uid_t uid, gid_t gid, int *fd, char *nonce,
                      size_t noncelen, char *err, size_t errlen);
/* Reads the nonce of `name` by name again: 0 and the nonce, 1 if gone. */
int gcoll_jobdir_read_nonce(int dfd, char *nonce, size_t noncelen, char *err, size_t errlen);
/* Creates (when create) and opens the private directory `name` under
 * parent: never through a symlink, and refused unless owned by uid with no
 * access for group or others. Created 0700; a root caller hands it to
 * uid:gid. */
int gcoll_jobdir_open_private(int parent, const char *name, int create, uid_t uid, gid_t gid,
                              int *fd, char *err, size_t errlen);
/* Writes name atomically: an O_EXCL temporary with an unpredictable name
 * and mode 0600, fsync, rename, fsync of the directory. */
int gcoll_jobdir_write(int dfd, const char *name, const void *buf, size_t len, char *err,
                       size_t errlen);
/* Reads a regular file (no symlink, no FIFO) of at most max bytes into a
 * malloc'd NUL-terminated buffer. Returns 0, 1 when it does not exist
 * (yet), -1 on error. dfd may be AT_FDCWD with an absolute name. */
int gcoll_jobdir_read(int dfd, const char *name, size_t max, char **buf, size_t *len,
                      char *err, size_t errlen);
/* Removes directory `name` under parent with its files and one level of
 * subdirectories, following no link. Missing is not an error. */
int gcoll_jobdir_remove(int parent, const char *name, char *err, size_t errlen);
/* Whether a name in plandir/<uid> is the job's: "<job>.*", or ".<job>.*"
 * (the temporary of gcoll_jobdir_fresh). */
int gcoll_jobdir_belongs_to_job(const char *name, uint32_t job);
/* "<job>.<step>"; -1 for a special step id. */
int gcoll_jobdir_step_name(uint32_t job, uint32_t step, char *out, size_t outlen);

/* ---- spank_gather.c: the plan phase of one node -------------------------- */

struct gcoll_gather_node {
  uint32_t job, step;
  uint32_t node_index, nnodes;  /* this node's index in the step */
  uint32_t ntasks_total;
  uint32_t ntasks_local;
  int ranks[256];               /* global ids of the local tasks, in
                                   local order (any layout: -m cyclic
                                   gives 0, 2, 4 on node 0 of 2) */
  char node_name[256];          /* SLURMD_NODENAME */
  uid_t uid;
  gid_t gid;
  /* The job's GCOLL_TOPO_FILE / NCCL_TOPO_FILE ("" when unset). */
  char job_topo_file[GCOLL_SPANK_PATH_MAX];
  char job_nccl_topo_file[GCOLL_SPANK_PATH_MAX];
  /* The job's GCOLL_FABRIC_FILE ("" when unset): wins over fabric=. */
  char job_fabric_file[GCOLL_SPANK_PATH_MAX];
  /* The step's GPUs on this node (SLURM_STEP_GPUS: Slurm's GPU indices,
   * the node topology's numbering), "" when the step has none named. */
  char step_gpus[256];
  /* The job's GCOLL_SOCKET_IFADDR and GCOLL_SOCKET_IFNAME (else
   * NCCL_SOCKET_IFNAME), "" when unset: where the endpoints listen. */
  char job_ifaddr[256];
  char job_ifname[256];
  char job_ifname_from[32];
};

/* ---- spank_endpoints.c: the tasks' listening sockets (issue 16) ---------- */

#define GCOLL_SPANK_MAX_LOCAL 256

/* This node's part: one listening TCP socket per local task, bound in
 * slurmstepd before the tasks are forked (each task inherits them and
 * keeps its own, spank_remote.c), on one address. */
struct gcoll_spank_endpoints {
  int ntasks;
  int fd[GCOLL_SPANK_MAX_LOCAL];         /* by local task id; -1 closed */
  uint16_t port[GCOLL_SPANK_MAX_LOCAL];
  char host[48];                         /* numeric */
};

/* Binds me->ntasks_local sockets (close-on-exec, listening) on the address
 * the job's settings pick (common/netaddr.h's rules; loopback for a step
 * on one node unless GCOLL_SOCKET_IFADDR names one). -1 with one line in
 * err, nothing left open. */
int gcoll_spank_endpoints_bind(struct gcoll_spank_endpoints *e,
                               const struct gcoll_gather_node *me, char *err, size_t errlen);
void gcoll_spank_endpoints_close(struct gcoll_spank_endpoints *e);
/* The node's fragment (nodes/<i>.endpoints): its host and ports in local
 * task order, or, when e is NULL, the one-line reason it has none. A
 * malloc'd text. */
char *gcoll_spank_endpoints_fragment(const struct gcoll_spank_endpoints *e, const char *why,
                                     size_t *len);
/* Node 0: the step's endpoints file from every node's fragment. nodes[i]
 * is node i's fragment text, tasks[i] its task count, rank_of_slot the
 * nodes' task ids node by node; job_key the step's key. The file's text
 * (malloc'd), or NULL with one line in err (*node_fault set when it is a
 * node's own reason, which that node reported). */
char *gcoll_spank_endpoints_merge(char *const *nodes, const int *tasks, int nnodes,
                                  const int *rank_of_slot, int nranks, const char *job_key,
                                  size_t *len, int *node_fault, char *err, size_t errlen);
/* Every node: whether the published file is this step's and names this
 * node's sockets for its ranks. 0, or -1 with one line in err. */
int gcoll_spank_endpoints_check(const char *text, size_t len, const char *job_key,
                                const struct gcoll_gather_node *me,
                                const struct gcoll_spank_endpoints *e, char *err,
                                size_t errlen);

struct gcoll_gather_result {
  char plan_path[GCOLL_SPANK_PATH_MAX];
  char job_key[64];             /* hex, shared by every node of the step */
  int from_cache;               /* node 0: reused, not recomputed */
  int distinct_topologies;      /* node 0: topology files parsed (nodes share equal ones) */
  double build_ms;              /* node 0: gather wait + compute/cache */
  char topo_info[1024];         /* one line: detected, or which file merged */
  /* Endpoints (when the caller passed its sockets): the file's path, or
   * "" and why not; endpoints_report says whether this node is the one to
   * log that reason (node 0 for its merge, each node for its own part). */
  char endpoints_path[GCOLL_SPANK_PATH_MAX];
  char endpoints_err[GCOLL_SPANK_ERRLEN];
  int endpoints_report;
};

/* The whole plan phase on this node: write the topology, (node 0) compute
 * or reuse the plan, wait for it. Bounded by cfg->timeout_s. On failure a
 * one-line reason (the same on every node when node 0 failed). */
int gcoll_spank_gather(const struct gcoll_spank_config *cfg, const struct gcoll_gather_node *me,
                       struct gcoll_gather_result *out, char *err, size_t errlen);
/* The same with this node's endpoints: ep its bound sockets, or NULL with
 * ep_err saying why it has none (NULL and "": endpoints are off, no
 * fragment is written). Node 0 publishes endpoints.yaml (or
 * endpoints.error) before plan.yaml, so the plan's wait covers it; an
 * endpoints failure never fails the plan phase. */
int gcoll_spank_gather_ep(const struct gcoll_spank_config *cfg, const struct gcoll_gather_node *me,
                          const struct gcoll_spank_endpoints *ep, const char *ep_err,
                          struct gcoll_gather_result *out, char *err, size_t errlen);

/* --gcoll=FILE: checks the plan fits this step (ranks, nodes, this node's
 * name and task count). The plan node 0 made is checked the same way on
 * every node before its tasks get it. */
int gcoll_spank_check_file(const char *path, const struct gcoll_gather_node *me,
                           struct gcoll_gather_result *out, char *err, size_t errlen);
/* --gcoll=FILE with endpoints, after gcoll_spank_check_file passed on this
 * node: the plan phase's file barrier without topologies. Node 0 publishes
 * its copy of the file (stamped with the step) as the step's plan.yaml,
 * with a fresh key and endpoints.yaml; every node checks that copy as it
 * checks a computed plan. Same contract as gcoll_spank_gather_ep. */
int gcoll_spank_publish_file(const struct gcoll_spank_config *cfg, const char *path,
                             const struct gcoll_gather_node *me,
                             const struct gcoll_spank_endpoints *ep, const char *ep_err,
                             struct gcoll_gather_result *out, char *err, size_t errlen);

/* CLOCK_MONOTONIC milliseconds, for the plan phase's deadlines and log. */
static inline double gcoll_spank_now_ms(void) {
  return (double)gcoll_clock_ns() / 1e6;
}

#endif
