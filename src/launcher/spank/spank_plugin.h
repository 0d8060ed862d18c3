/* State the SPANK callbacks of one process share (each slurmstepd, srun,
 * slurmd epilog loads the plugin once), and the per-context handlers. */
#ifndef GCOLL_SPANK_PLUGIN_H
#define GCOLL_SPANK_PLUGIN_H

#include <slurm/spank.h>

#include "launcher/spank/spank_gcoll.h"

struct gcoll_spank_state {
  int config_ok;
  struct gcoll_spank_config config;
  struct gcoll_spank_option option;
  /* slurmstepd: outcome of the plan phase */
  int have_plan;
  int failed;                      /* strict mode fails the tasks */
  char reason[GCOLL_SPANK_ERRLEN];
  /* slurmstepd, init_post_opt (root): plandir/<uid> could not be made */
  char setup_err[GCOLL_SPANK_ERRLEN];
  /* slurmstepd: this node's tasks' listening sockets (each task keeps its
   * own from task_init; slurmstepd closes its copies after the forks) and
   * the step's endpoints file, "" when the tasks use the store */
  struct gcoll_spank_endpoints ep;
  char endpoints_path[GCOLL_SPANK_PATH_MAX];
  uint32_t nranks;
};

extern struct gcoll_spank_state gcoll_spank;

int gcoll_spank_remote_init_post_opt(spank_t sp);
int gcoll_spank_remote_user_init(spank_t sp);
int gcoll_spank_remote_task_init_privileged(spank_t sp);
int gcoll_spank_remote_task_init(spank_t sp);
int gcoll_spank_remote_task_post_fork(spank_t sp);
void gcoll_spank_remote_exit(void);
int gcoll_spank_job_epilog(spank_t sp);

#endif
