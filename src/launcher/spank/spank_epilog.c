/* slurmd's job epilog (root, after the job's last step): removes the
 * job's step directories and plan cache from plandir, so a busy cluster's
 * plandir does not fill up. Only names this job owns ("<job>.<n>",
 * "<job>.cache") are touched, and no link is followed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <fcntl.h>
#include <slurm/spank.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launcher/spank/spank_plugin.h"

static int belongs_to_job(const char *name, const char *prefix) {
  size_t n = strlen(prefix);
  if (strncmp(name, prefix, n) != 0) return 0;
  const char *rest = name + n;
  if (strcmp(rest, "cache") == 0) return 1;
  return *rest != '\0' && strspn(rest, "0123456789") == strlen(rest);
}

int gcoll_spank_job_epilog(spank_t sp) {
  uint32_t job = 0;
  char err[GCOLL_SPANK_ERRLEN], prefix[16];
  int root = -1;
  DIR *d = NULL;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || job == 0) goto out;
  if (gcoll_jobdir_open_root(gcoll_spank.config.plandir, &root, err, sizeof(err)) != 0) goto out;
  int listing = dup(root);
  if (listing < 0 || (d = fdopendir(listing)) == NULL) {
    if (listing >= 0) close(listing);
    goto out;
  }
  snprintf(prefix, sizeof(prefix), "%u.", job);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (belongs_to_job(e->d_name, prefix) &&
        gcoll_jobdir_remove(root, e->d_name, err, sizeof(err)) != 0)
      slurm_error("gcoll: job %u epilog: %s/%s", job, gcoll_spank.config.plandir, err);
out:
  if (d != NULL) closedir(d);
  if (root >= 0) close(root);
  return 0;
}
