/* slurmstepd (remote context): init_post_opt, as root, makes the job
 * user's own directory plandir/<uid> (spank_jobdir.c says why); the plan
 * phase runs once per node in user_init, before any task is forked, with
 * the job user's privileges; task_init then gives every task its rank. A failure never blocks the
 * step in `plan` mode: the tasks run without GCOLL_PLAN, and the reason
 * reaches the job's stderr. In `plan:strict` the tasks are failed from
 * task_init_privileged (see there). */
#include <fcntl.h>
#include <slurm/spank.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "launcher/spank/spank_plugin.h"

static int get_u32(spank_t sp, spank_item_t item, uint32_t *out) {
  return spank_get_item(sp, item, out) == ESPANK_SUCCESS ? 0 : -1;
}

/* What this node knows about the step; -1 with a reason if Slurm cannot
 * tell, 1 for steps that never get a plan (batch script, extern, ...). */
/* A job variable's value, "" when unset or too long (a path that does not
 * fit is reported by the reader as missing, never cut short). */
static void job_env(spank_t sp, const char *name, char *buf, int len) {
  if (spank_getenv(sp, name, buf, len) != ESPANK_SUCCESS) buf[0] = '\0';
}

static int describe_node(spank_t sp, struct gcoll_gather_node *me, char *err, size_t errlen) {
  memset(me, 0, sizeof(*me));
  if (get_u32(sp, S_JOB_ID, &me->job) != 0 || get_u32(sp, S_JOB_STEPID, &me->step) != 0) {
    snprintf(err, errlen, "cannot read the job and step id");
    return -1;
  }
  if (me->step >= GCOLL_SPANK_SPECIAL_STEP) return 1;
  if (get_u32(sp, S_JOB_NNODES, &me->nnodes) != 0 ||
      get_u32(sp, S_JOB_NODEID, &me->node_index) != 0 ||
      get_u32(sp, S_JOB_TOTAL_TASK_COUNT, &me->ntasks_total) != 0 ||
      get_u32(sp, S_JOB_LOCAL_TASK_COUNT, &me->ntasks_local) != 0 ||
      spank_get_item(sp, S_JOB_UID, &me->uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &me->gid) != ESPANK_SUCCESS) {
    snprintf(err, errlen, "cannot read the step's layout from Slurm");
    return -1;
  }
  /* A step over several components of a heterogeneous job (srun A : B):
   * each component is its own job to the plugin, with its own task count
   * and plan, while the step's ranks (PMI2, SLURM_PROCID) span them all.
   * No component's plan fits that step; without one the ranks plan the
   * whole step themselves through PMI2. */
  char step_tasks[32], *end;
  job_env(sp, "SLURM_STEP_NUM_TASKS", step_tasks, (int)sizeof(step_tasks));
  long all = step_tasks[0] != '\0' ? strtol(step_tasks, &end, 10) : 0;
  if (step_tasks[0] != '\0' && *end == '\0' && all > (long)me->ntasks_total) {
    snprintf(err, errlen, "the step spans several components of a heterogeneous job (%ld tasks; "
             "this component has %u): the plugin plans one component", all, me->ntasks_total);
    return -1;
  }
  if (me->ntasks_local == 0 || me->node_index >= me->nnodes) {
    snprintf(err, errlen, "node %u of %u runs %u tasks", me->node_index, me->nnodes,
             me->ntasks_local);
    return -1;
  }
  /* The global ids of this node's tasks: plans take any layout (block,
   * cyclic, plane, arbitrary) as each node's list of ranks. */
  if (me->ntasks_local > sizeof(me->ranks) / sizeof(me->ranks[0])) {
    snprintf(err, errlen, "node %u runs %u tasks, a plan takes at most %zu per node",
             me->node_index, me->ntasks_local, sizeof(me->ranks) / sizeof(me->ranks[0]));
    return -1;
  }
  for (uint32_t i = 0; i < me->ntasks_local; i++) {
    uint32_t g = 0;
    if (spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, i, &g) != ESPANK_SUCCESS ||
        g >= me->ntasks_total) {
      snprintf(err, errlen, "no global id for local task %u", i);
      return -1;
    }
    me->ranks[i] = (int)g;
  }
  /* Slurm's name for the node, which plans use: several slurmd may share
   * one host, and NodeName need not be the hostname. */
  const char *name = getenv("SLURMD_NODENAME");
  if (name != NULL && *name != '\0') snprintf(me->node_name, sizeof(me->node_name), "%s", name);
  else if (gethostname(me->node_name, sizeof(me->node_name) - 1) != 0)
    snprintf(me->node_name, sizeof(me->node_name), "node%u", me->node_index);
  return 0;
}


/* GCOLL_DEBUG (or NCCL_DEBUG) at INFO or TRACE in the job's environment. */
static int job_debug_info(spank_t sp) {
  static const char *const vars[] = {"GCOLL_DEBUG", "NCCL_DEBUG"};
  for (int i = 0; i < 2; i++) {
    char v[16];
    job_env(sp, vars[i], v, (int)sizeof(v));
    if (v[0] != '\0')
      return strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0;
  }
  return 0;
}

static int export_plan(spank_t sp, const struct gcoll_gather_result *res, char *err,
                       size_t errlen) {
  if (spank_setenv(sp, "GCOLL_PLAN", res->plan_path, 1) != ESPANK_SUCCESS ||
      spank_setenv(sp, "GCOLL_JOB_KEY", res->job_key, 1) != ESPANK_SUCCESS) {
    snprintf(err, errlen, "cannot set GCOLL_PLAN in the job's environment");
    return -1;
  }
  return 0;
}

int gcoll_spank_remote_init_post_opt(spank_t sp) {
  struct gcoll_spank_state *st = &gcoll_spank;
  uint32_t job = 0, step = 0;
  uid_t uid;
  gid_t gid;
  int root = -1;
  char moved[64], err[GCOLL_SPANK_ERRLEN];
  st->setup_err[0] = '\0';
  if (st->option.mode != GCOLL_MODE_PLAN && st->option.mode != GCOLL_MODE_STRICT) goto out;
  if (get_u32(sp, S_JOB_ID, &job) != 0 || get_u32(sp, S_JOB_STEPID, &step) != 0 ||
      spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
    snprintf(st->setup_err, sizeof(st->setup_err), "cannot read the step's ids and user");
    goto out;
  }
  if (step >= GCOLL_SPANK_SPECIAL_STEP) goto out;
  if (gcoll_jobdir_open_root(st->config.plandir, &root, st->setup_err,
                             sizeof(st->setup_err)) != 0)
    goto out;
  if (gcoll_jobdir_user_parent(root, uid, gid, moved, sizeof(moved), err, sizeof(err)) != 0) {
    snprintf(st->setup_err, sizeof(st->setup_err), "%.200s/%.300s", st->config.plandir, err);
    goto out;
  }
  /* Someone else's entry held the user's name: a squatting attempt on a
   * world-writable plandir. The step goes on; the administrator hears. */
  if (moved[0] != '\0')
    slurm_error("gcoll: %s/%u was not uid %u's own directory; moved it aside to %s",
                st->config.plandir, (unsigned)uid, (unsigned)uid, moved);
out:
  if (root >= 0) close(root);
  /* user_init reports a failure, as the step's one line per node. */
  return 0;
}

/* --gcoll=FILE with endpoints: node 0's copy of the file, the step's key
 * and endpoints.yaml replace the file as checked. When the nodes cannot
 * meet (an unshared plandir: every node times out alike), the step runs
 * on the file as checked, through the store, and says why. */
static void publish_given(struct gcoll_spank_state *st, const struct gcoll_gather_node *me,
                          int have_ep, const char *ep_err, struct gcoll_gather_result *res) {
  struct gcoll_gather_result pub;
  char why[GCOLL_SPANK_ERRLEN];
  if (gcoll_spank_publish_file(&st->config, st->option.file, me, have_ep ? &st->ep : NULL,
                               ep_err, &pub, why, sizeof(why)) == 0) {
    *res = pub;
    return;
  }
  snprintf(res->endpoints_err, sizeof(res->endpoints_err), "%s", why);
  res->endpoints_report = 1;
}

int gcoll_spank_remote_user_init(spank_t sp) {
  struct gcoll_spank_state *st = &gcoll_spank;
  if (st->option.mode == GCOLL_MODE_OFF) return 0;
  struct gcoll_gather_node me;
  struct gcoll_gather_result res;
  char err[GCOLL_SPANK_ERRLEN] = "";
  double t0 = gcoll_spank_now_ms();
  int rc = describe_node(sp, &me, err, sizeof(err));
  if (rc > 0) return 0;
  if (rc == 0) {
    job_env(sp, "GCOLL_TOPO_FILE", me.job_topo_file, (int)sizeof(me.job_topo_file));
    job_env(sp, "NCCL_TOPO_FILE", me.job_nccl_topo_file, (int)sizeof(me.job_nccl_topo_file));
    job_env(sp, "GCOLL_FABRIC_FILE", me.job_fabric_file, (int)sizeof(me.job_fabric_file));
    job_env(sp, "SLURM_STEP_GPUS", me.step_gpus, (int)sizeof(me.step_gpus));
    /* Where the tasks listen: the job's settings, as the runtime reads
     * them (the NCCL name when gcoll's is unset; NCCL's configuration
     * files are not read here). */
    job_env(sp, "GCOLL_SOCKET_IFADDR", me.job_ifaddr, (int)sizeof(me.job_ifaddr));
    job_env(sp, "GCOLL_SOCKET_IFNAME", me.job_ifname, (int)sizeof(me.job_ifname));
    snprintf(me.job_ifname_from, sizeof(me.job_ifname_from), "GCOLL_SOCKET_IFNAME");
    if (me.job_ifname[0] == '\0') {
      job_env(sp, "NCCL_SOCKET_IFNAME", me.job_ifname, (int)sizeof(me.job_ifname));
      snprintf(me.job_ifname_from, sizeof(me.job_ifname_from), "NCCL_SOCKET_IFNAME");
    }
  }
  if (rc == 0 && st->setup_err[0] != '\0') {
    snprintf(err, sizeof(err), "%.500s", st->setup_err);
    rc = -1;
  }
  /* Endpoints come with the step's plan, computed, cached or given: the
   * sockets are bound here, before the gather, and the tasks inherit
   * them. A failure costs only the endpoints. */
  char ep_err[GCOLL_SPANK_ERRLEN] = "";
  int want_ep = rc == 0 && st->config.endpoints;
  int have_ep = want_ep && gcoll_spank_endpoints_bind(&st->ep, &me, ep_err, sizeof(ep_err)) == 0;
  if (rc == 0 && st->option.mode == GCOLL_MODE_FILE) {
    /* Each node judges the given file itself first, so a file that does
     * not fit fails the step with this node's own reason; only then do
     * the nodes meet for the endpoints. */
    rc = gcoll_spank_check_file(st->option.file, &me, &res, err, sizeof(err));
    if (rc == 0 && want_ep) publish_given(st, &me, have_ep, ep_err, &res);
  } else if (rc == 0) {
    rc = gcoll_spank_gather_ep(&st->config, &me, have_ep ? &st->ep : NULL,
                               want_ep ? ep_err : "", &res, err, sizeof(err));
  }
  if (rc == 0 && want_ep && res.endpoints_path[0] != '\0') {
    snprintf(st->endpoints_path, sizeof(st->endpoints_path), "%s", res.endpoints_path);
    st->nranks = me.ntasks_total;
  } else {
    gcoll_spank_endpoints_close(&st->ep);
    if (rc == 0 && want_ep && res.endpoints_report)
      slurm_error("gcoll: step %u.%u node %u: no endpoints, the tasks find each other through "
                  "the store: %s", me.job, me.step, me.node_index, res.endpoints_err);
  }
  if (rc == 0 && res.topo_info[0] != '\0' && job_debug_info(sp))
    slurm_info("gcoll: step %u.%u node %u: %s", me.job, me.step, me.node_index, res.topo_info);
  if (rc == 0) rc = export_plan(sp, &res, err, sizeof(err));
  if (rc == 0) {
    st->have_plan = 1;
    if (me.node_index == 0)
      slurm_info("gcoll: step %u.%u: plan phase %.1f ms on node 0 (%s, %u nodes, %u tasks, "
                 "%d distinct node topologies): %s%s",
                 me.job, me.step, gcoll_spank_now_ms() - t0,
                 st->option.mode == GCOLL_MODE_FILE ? "given file"
                 : res.from_cache                   ? "from cache"
                                                    : "computed",
                 me.nnodes, me.ntasks_total, res.distinct_topologies, res.plan_path,
                 st->endpoints_path[0] != '\0' ? " with endpoints.yaml" : "");
    return 0;
  }
  /* A GCOLL_PLAN the user exported by hand must not be mistaken for this
   * step's plan. */
  spank_unsetenv(sp, "GCOLL_PLAN");
  snprintf(st->reason, sizeof(st->reason), "%s", err);
  /* A plan file the user named must fit: running without it would hide
   * the mistake. */
  if (st->option.mode == GCOLL_MODE_STRICT || st->option.mode == GCOLL_MODE_FILE) {
    st->failed = 1;
    slurm_error("gcoll: no plan for this step (--gcoll=%s fails it): %s",
                st->option.mode == GCOLL_MODE_FILE ? st->option.file : "plan:strict", err);
  } else {
    slurm_error("gcoll: no plan for this step, running without GCOLL_PLAN: %s", err);
  }
  return 0;
}

int gcoll_spank_remote_task_init_privileged(spank_t sp) {
  (void)sp;
  /* Slurm ignores what an `optional` plugin's callbacks return (only a
   * `required` one can fail a task that way), and gcoll is shipped
   * optional so that a broken gcoll never stops jobs that did not ask for
   * it. A step that asked for plan:strict is failed by ending each task
   * here, in the forked child before exec: srun then reports the tasks'
   * exit code 1 after the reason user_init already logged. */
  if (gcoll_spank.failed) _exit(1);
  return 0;
}

int gcoll_spank_remote_task_post_fork(spank_t sp) {
  struct gcoll_spank_endpoints *e = &gcoll_spank.ep;
  int local = -1;
  if (e->ntasks == 0 || spank_get_item(sp, S_TASK_ID, &local) != ESPANK_SUCCESS) return 0;
  /* The task holds its own copy now: a connection to a task that died is
   * then refused, not queued at a socket nobody accepts on. */
  if (local >= 0 && local < e->ntasks && e->fd[local] >= 0) {
    close(e->fd[local]);
    e->fd[local] = -1;
  }
  return 0;
}

void gcoll_spank_remote_exit(void) { gcoll_spank_endpoints_close(&gcoll_spank.ep); }

/* In the task, before exec: its own socket survives the exec (the node's
 * others are closed), and GCOLL_LISTEN_FD and GCOLL_ENDPOINTS say where
 * it and its peers are. Any failure: the task runs without (its peers'
 * neighbours then wait for it, and its own line says why). */
static void task_endpoints(spank_t sp, uint32_t global, int local) {
  struct gcoll_spank_endpoints *e = &gcoll_spank.ep;
  if (gcoll_spank.endpoints_path[0] == '\0' || e->ntasks == 0) return;
  int mine = local >= 0 && local < e->ntasks ? e->fd[local] : -1;
  for (int i = 0; i < e->ntasks; i++)
    if (i != local && e->fd[i] >= 0) close(e->fd[i]), e->fd[i] = -1;
  char buf[32];
  int flags = mine >= 0 ? fcntl(mine, F_GETFD) : -1;
  if (flags < 0 || fcntl(mine, F_SETFD, flags & ~FD_CLOEXEC) != 0) {
    slurm_error("gcoll: task %u: its endpoint socket is not open in the task; it runs without "
                "GCOLL_ENDPOINTS", global);
    return;
  }
  snprintf(buf, sizeof(buf), "%d", mine);
  if (spank_setenv(sp, "GCOLL_LISTEN_FD", buf, 1) != ESPANK_SUCCESS ||
      (snprintf(buf, sizeof(buf), "%u", gcoll_spank.nranks),
       spank_setenv(sp, "GCOLL_NRANKS", buf, 1) != ESPANK_SUCCESS) ||
      spank_setenv(sp, "GCOLL_ENDPOINTS", gcoll_spank.endpoints_path, 1) != ESPANK_SUCCESS) {
    spank_unsetenv(sp, "GCOLL_ENDPOINTS");
    slurm_error("gcoll: task %u: cannot set GCOLL_ENDPOINTS in its environment", global);
  }
}

int gcoll_spank_remote_task_init(spank_t sp) {
  if (!gcoll_spank.have_plan) return 0;
  uint32_t global = 0;
  int local = 0;
  char buf[16];
  if (spank_get_item(sp, S_TASK_GLOBAL_ID, &global) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_TASK_ID, &local) != ESPANK_SUCCESS) {
    slurm_error("gcoll: cannot read the task's rank; GCOLL_RANK not set");
    return 0;
  }
  snprintf(buf, sizeof(buf), "%u", global);
  spank_setenv(sp, "GCOLL_RANK", buf, 1);
  snprintf(buf, sizeof(buf), "%d", local);
  spank_setenv(sp, "GCOLL_LOCAL_RANK", buf, 1);
  task_endpoints(sp, global, local);
  return 0;
}
