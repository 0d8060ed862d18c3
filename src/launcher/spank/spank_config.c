/* plugstack.conf arguments and the --gcoll option value. Parsed once, and
 * refused loudly: a plugin that silently ignores `plandr=/shared` would
 * leave an administrator wondering why no job ever gets a plan. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/spank/spank_gcoll.h"

#define DEFAULT_TIMEOUT_S 30
#define MAX_TIMEOUT_S 3600

static int parse_bool(const char *v, int *out) {
  if (strcmp(v, "yes") == 0 || strcmp(v, "1") == 0 || strcmp(v, "true") == 0) *out = 1;
  else if (strcmp(v, "no") == 0 || strcmp(v, "0") == 0 || strcmp(v, "false") == 0) *out = 0;
  else return -1;
  return 0;
}

static int copy_path(char *dst, size_t dstlen, const char *key, const char *v, char *err,
                     size_t errlen) {
  if (*v == '\0' || strlen(v) >= dstlen) {
    snprintf(err, errlen, "%s= must be a non-empty path shorter than %zu bytes", key, dstlen);
    return -1;
  }
  snprintf(dst, dstlen, "%s", v);
  return 0;
}

int gcoll_spank_config_parse(struct gcoll_spank_config *cfg, int argc, char **argv, char *err,
                             size_t errlen) {
  memset(cfg, 0, sizeof(*cfg));
  snprintf(cfg->topo, sizeof(cfg->topo), "auto");
  cfg->timeout_s = DEFAULT_TIMEOUT_S;
  cfg->cache = 1;
  cfg->endpoints = 1;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i], *eq = strchr(arg, '=');
    if (eq == NULL) {
      snprintf(err, errlen, "plugstack argument '%.64s' is not key=value", arg);
      return -1;
    }
    size_t klen = (size_t)(eq - arg);
    const char *v = eq + 1;
    if (klen == 7 && strncmp(arg, "plandir", 7) == 0) {
      if (copy_path(cfg->plandir, sizeof(cfg->plandir), "plandir", v, err, errlen) != 0)
        return -1;
      if (v[0] != '/') {
        snprintf(err, errlen, "plandir=%.64s must be an absolute path", v);
        return -1;
      }
    } else if (klen == 4 && strncmp(arg, "topo", 4) == 0) {
      if (copy_path(cfg->topo, sizeof(cfg->topo), "topo", v, err, errlen) != 0) return -1;
    } else if (klen == 9 && strncmp(arg, "topo_file", 9) == 0) {
      if (copy_path(cfg->topo_file, sizeof(cfg->topo_file), "topo_file", v, err, errlen) != 0)
        return -1;
      if (v[0] != '/') {
        snprintf(err, errlen, "topo_file=%.64s must be an absolute path", v);
        return -1;
      }
    } else if (klen == 6 && strncmp(arg, "fabric", 6) == 0) {
      if (copy_path(cfg->fabric, sizeof(cfg->fabric), "fabric", v, err, errlen) != 0) return -1;
      if (v[0] != '/') {
        snprintf(err, errlen, "fabric=%.64s must be an absolute path", v);
        return -1;
      }
    } else if (klen == 7 && strncmp(arg, "timeout", 7) == 0) {
      char *end;
      errno = 0;
      long t = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || errno != 0 || t < 1 || t > MAX_TIMEOUT_S) {
        snprintf(err, errlen, "timeout=%.32s must be whole seconds in 1..%d", v, MAX_TIMEOUT_S);
        return -1;
      }
      cfg->timeout_s = (int)t;
    } else if (klen == 5 && strncmp(arg, "cache", 5) == 0) {
      if (parse_bool(v, &cfg->cache) != 0) {
        snprintf(err, errlen, "cache=%.32s must be yes or no", v);
        return -1;
      }
    } else if (klen == 9 && strncmp(arg, "endpoints", 9) == 0) {
      if (parse_bool(v, &cfg->endpoints) != 0) {
        snprintf(err, errlen, "endpoints=%.32s must be yes or no", v);
        return -1;
      }
    } else {
      snprintf(err, errlen,
               "unknown plugstack argument '%.*s' (known: plandir, topo, topo_file, "
               "fabric, timeout, cache, endpoints)",
               (int)(klen > 64 ? 64 : klen), arg);
      return -1;
    }
  }
  if (cfg->plandir[0] == '\0') {
    snprintf(err, errlen, "plandir= is required (a directory every node of a job shares)");
    return -1;
  }
  return 0;
}

int gcoll_spank_option_parse(struct gcoll_spank_option *opt, const char *value, char *err,
                             size_t errlen) {
  memset(opt, 0, sizeof(*opt));
  if (value == NULL || strcmp(value, "off") == 0) {
    opt->mode = GCOLL_MODE_OFF;
  } else if (strcmp(value, "plan") == 0) {
    opt->mode = GCOLL_MODE_PLAN;
  } else if (strcmp(value, "plan:strict") == 0) {
    opt->mode = GCOLL_MODE_STRICT;
  } else if (value[0] == '/') {
    if (strlen(value) >= sizeof(opt->file)) {
      snprintf(err, errlen, "--gcoll: plan path too long");
      return -1;
    }
    opt->mode = GCOLL_MODE_FILE;
    snprintf(opt->file, sizeof(opt->file), "%s", value);
  } else {
    /* A relative path would be resolved in slurmstepd's directory, not the
     * user's: refuse it rather than read some other file. */
    snprintf(err, errlen, "--gcoll=%.64s: expected off, plan, plan:strict or an absolute path "
                          "to a plan file", value);
    return -1;
  }
  return 0;
}

const char *gcoll_spank_mode_name(enum gcoll_spank_mode mode) {
  switch (mode) {
    case GCOLL_MODE_OFF: return "off";
    case GCOLL_MODE_PLAN: return "plan";
    case GCOLL_MODE_STRICT: return "plan:strict";
    case GCOLL_MODE_FILE: return "file";
  }
  return "?";
}

const char *gcoll_spank_topo_file(const struct gcoll_spank_config *cfg, const char *job_gcoll,
                                  const char *job_nccl, const char **from) {
  if (job_gcoll != NULL && job_gcoll[0] != '\0') {
    *from = "GCOLL_TOPO_FILE";
    return job_gcoll;
  }
  if (job_nccl != NULL && job_nccl[0] != '\0') {
    *from = "NCCL_TOPO_FILE";
    return job_nccl;
  }
  if (cfg->topo_file[0] != '\0') {
    *from = "plugstack topo_file=";
    return cfg->topo_file;
  }
  *from = "";
  return NULL;
}
