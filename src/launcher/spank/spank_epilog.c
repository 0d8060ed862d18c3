/* slurmd's job epilog (root, after the job's last step): removes the
 * job's step directories and plan cache from plandir/<uid>, so a busy
 * cluster's plandir does not fill up. Only names this job owns
 * ("<job>.*", and node 0's temporaries ".<job>.*") are touched, and no
 * link is followed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <fcntl.h>
#include <slurm/spank.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/spank/spank_plugin.h"

/* The job's user: Slurm's item where this Slurm gives it in the epilog,
 * else the epilog's environment. */
static int job_uid(spank_t sp, uid_t *uid) {
  if (spank_get_item(sp, S_JOB_UID, uid) == ESPANK_SUCCESS) return 0;
  const char *s = getenv("SLURM_JOB_UID");
  char *end = NULL;
  unsigned long v = s != NULL ? strtoul(s, &end, 10) : 0;
  if (s == NULL || *s == '\0' || *end != '\0' || v > 0xFFFFFFFEul) return -1;
  *uid = (uid_t)v;
  return 0;
}

int gcoll_spank_job_epilog(spank_t sp) {
  uint32_t job = 0;
  uid_t uid = 0;
  char err[GCOLL_SPANK_ERRLEN], dir[GCOLL_SPANK_PATH_MAX + 16];
  int root = -1, user = -1;
  DIR *d = NULL;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || job == 0) goto out;
  if (job_uid(sp, &uid) != 0) {
    slurm_error("gcoll: job %u epilog: cannot tell the job's user; its plan files stay", job);
    goto out;
  }
  snprintf(dir, sizeof(dir), "%s/%u", gcoll_spank.config.plandir, (unsigned)uid);
  if (gcoll_jobdir_open_root(gcoll_spank.config.plandir, &root, err, sizeof(err)) != 0) goto out;
  /* The user's directory, checked as everywhere: a job that never asked
   * for a plan has none, which is fine. */
  if (gcoll_jobdir_open_user(root, uid, &user, err, sizeof(err)) != 0) goto out;
  int listing = dup(user);
  if (listing < 0 || (d = fdopendir(listing)) == NULL) {
    if (listing >= 0) close(listing);
    goto out;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (gcoll_jobdir_belongs_to_job(e->d_name, job) &&
        gcoll_jobdir_remove(user, e->d_name, err, sizeof(err)) != 0)
      slurm_error("gcoll: job %u epilog: %s: %s", job, dir, err);
out:
  if (d != NULL) closedir(d);
  if (user >= 0) close(user);
  if (root >= 0) close(root);
  return 0;
}
