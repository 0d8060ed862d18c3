/* The SPANK entry points. Each only dispatches on spank_context(): the
 * work of a context lives in its own file (spank_remote.c for slurmstepd,
 * spank_epilog.c for slurmd's job epilog). srun, salloc and sbatch only
 * register and check the option. */
#include <slurm/spank.h>
#include <string.h>

#include "launcher/spank/spank_plugin.h"

SPANK_PLUGIN(gcoll, 1);

struct gcoll_spank_state gcoll_spank = {.config_ok = 0, .ep = {.ntasks = 0}};

static int option_cb(int val, const char *optarg, int remote) {
  (void)val;
  (void)remote;
  char err[GCOLL_SPANK_ERRLEN];
  if (gcoll_spank_option_parse(&gcoll_spank.option, optarg, err, sizeof(err)) != 0) {
    slurm_error("gcoll: %s", err);
    return -1;
  }
  return 0;
}

/* Registered with spank_option_register in slurm_spank_init: sbatch and
 * salloc ignore an exported spank_options table (see notes/slurm.md). */
static struct spank_option gcoll_option = {
    "gcoll", "MODE",
    "collective plans for gcoll: off (default), plan (compute one for the step; on failure the "
    "step runs without), plan:strict (a failure fails the step), or /path/to/plan.yaml",
    1, 0, option_cb};

int slurm_spank_init(spank_t sp, int argc, char **argv) {
  spank_context_t ctx = spank_context();
  int rc = 0;
  char err[GCOLL_SPANK_ERRLEN];
  if (ctx == S_CTX_LOCAL || ctx == S_CTX_REMOTE || ctx == S_CTX_ALLOCATOR) {
    if (spank_option_register(sp, &gcoll_option) != ESPANK_SUCCESS) {
      slurm_error("gcoll: cannot register the --gcoll option");
      rc = -1;
      goto out;
    }
  }
  if (gcoll_spank_config_parse(&gcoll_spank.config, argc, argv, err, sizeof(err)) != 0) {
    slurm_error("gcoll: plugstack.conf: %s", err);
    rc = -1;
    goto out;
  }
  gcoll_spank.config_ok = 1;
out:
  return rc;
}

/* slurmstepd calls this as root, after the options are known and before
 * privileges are dropped for user_init: the one place per step and node
 * where root's help is at hand. */
int slurm_spank_init_post_opt(spank_t sp, int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (spank_context() != S_CTX_REMOTE || !gcoll_spank.config_ok) return 0;
  return gcoll_spank_remote_init_post_opt(sp);
}

int slurm_spank_user_init(spank_t sp, int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (spank_context() != S_CTX_REMOTE || !gcoll_spank.config_ok) return 0;
  return gcoll_spank_remote_user_init(sp);
}

int slurm_spank_task_init_privileged(spank_t sp, int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (spank_context() != S_CTX_REMOTE || !gcoll_spank.config_ok) return 0;
  return gcoll_spank_remote_task_init_privileged(sp);
}

int slurm_spank_task_init(spank_t sp, int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (spank_context() != S_CTX_REMOTE || !gcoll_spank.config_ok) return 0;
  return gcoll_spank_remote_task_init(sp);
}

/* slurmstepd, after each task is forked (before any of them runs
 * task_init): its copy of the task's socket is closed. */
int slurm_spank_task_post_fork(spank_t sp, int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (spank_context() != S_CTX_REMOTE || !gcoll_spank.config_ok) return 0;
  return gcoll_spank_remote_task_post_fork(sp);
}

int slurm_spank_exit(spank_t sp, int argc, char **argv) {
  (void)sp;
  (void)argc;
  (void)argv;
  if (spank_context() == S_CTX_REMOTE) gcoll_spank_remote_exit();
  return 0;
}

/* Slurm runs the job epilog in a process of its own that does not call
 * slurm_spank_init, so the plugstack arguments are parsed here. */
int slurm_spank_job_epilog(spank_t sp, int argc, char **argv) {
  char err[GCOLL_SPANK_ERRLEN];
  if (spank_context() != S_CTX_JOB_SCRIPT) return 0;
  if (gcoll_spank_config_parse(&gcoll_spank.config, argc, argv, err, sizeof(err)) != 0) {
    slurm_error("gcoll: plugstack.conf: %s", err);
    return 0;
  }
  return gcoll_spank_job_epilog(sp);
}
