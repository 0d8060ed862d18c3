/* Where topology names lead: shared by gcoll-plan and gcollrun, which
 * must resolve "cpu-only" exactly the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "graph/topo_lookup.h"

#ifndef GCOLL_TOPO_DIR
#define GCOLL_TOPO_DIR "/usr/local/share/gcoll/topologies"
#endif
#ifndef GCOLL_SRC_TOPO_DIR
#define GCOLL_SRC_TOPO_DIR GCOLL_TOPO_DIR
#endif

/* Long enough for any error the topology reader reports. */
#define TOPO_LOOKUP_ERRLEN 1024

static int is_regular_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Tries DIR/NAME, then DIR/NAME.yaml. */
static int try_topo_dir(const char *dir, const char *name, char *out, size_t outlen) {
  if (dir == NULL || dir[0] == '\0') return -1;
  if (ends_with(name, ".yaml")) {
    snprintf(out, outlen, "%s/%s", dir, name);
    return is_regular_file(out) ? 0 : -1;
  }
  int n = snprintf(out, outlen, "%s/%s.yaml", dir, name);
  return n > 0 && (size_t)n < outlen && is_regular_file(out) ? 0 : -1;
}

int gcoll_topo_resolve_name(const char *arg, char *out, size_t outlen, char *err,
                     size_t errlen) {
  if (strlen(arg) + 1 > outlen) {
    snprintf(err, errlen, "topology '%.64s...': name too long", arg);
    return -1;
  }
  /* A path (anything with a '/') is never searched for elsewhere: the user
   * meant that file, and the reader will say why it cannot be used. */
  if (strchr(arg, '/') != NULL || is_regular_file(arg)) {
    snprintf(out, outlen, "%s", arg);
    return 0;
  }
  const char *env = getenv("GCOLL_TOPO_DIR");
  const char *dirs[3] = {env, GCOLL_TOPO_DIR, GCOLL_SRC_TOPO_DIR};
  for (int i = 0; i < 3; i++)
    if (try_topo_dir(dirs[i], arg, out, outlen) == 0) return 0;
  snprintf(err, errlen,
           "topology '%s': no such file, and no %s%s in $GCOLL_TOPO_DIR (%s), %s or %s",
           arg, arg, ends_with(arg, ".yaml") ? "" : ".yaml",
           env && *env ? env : "unset", GCOLL_TOPO_DIR, GCOLL_SRC_TOPO_DIR);
  return -1;
}

struct gcoll_topo *gcoll_topo_load_name(const char *arg, char *err, size_t errlen) {
  char path[4096];
  if (gcoll_topo_resolve_name(arg, path, sizeof(path), err, errlen) != 0) return NULL;
  struct gcoll_topo *topo = gcoll_topo_read_file(path, err, errlen);
  if (topo == NULL) return NULL;
  if (topo->paths == NULL && gcoll_topo_compute_paths(topo, err, errlen) != 0) {
    char why[TOPO_LOOKUP_ERRLEN];
    snprintf(why, sizeof(why), "%s", err);
    snprintf(err, errlen, "%s: %s", path, why);
    gcoll_topo_free(topo);
    return NULL;
  }
  return topo;
}

struct gcoll_topo *gcoll_topo_detect_merged(const char *file, char *info, size_t infolen,
                                            char *err, size_t errlen) {
  char why[TOPO_LOOKUP_ERRLEN], summary[768];
  if (info != NULL && infolen > 0) info[0] = '\0';
  struct gcoll_topo *detected = gcoll_topo_detect(why, sizeof(why));
  if (detected == NULL) {
    snprintf(err, errlen, "detection failed: %s", why);
    return NULL;
  }
  if (file == NULL) {
    if (detected->paths == NULL && gcoll_topo_compute_paths(detected, why, sizeof(why)) != 0) {
      snprintf(err, errlen, "detection failed: %s", why);
      gcoll_topo_free(detected);
      return NULL;
    }
    if (info != NULL)
      snprintf(info, infolen, "topology detected (%d GPU%s, %d NIC%s), no topology file",
               detected->ngpu, detected->ngpu == 1 ? "" : "s", detected->nnic,
               detected->nnic == 1 ? "" : "s");
    return detected;
  }
  /* The file is read as given (never searched for by name): a variable
   * that names a file names that file. */
  struct gcoll_topo *over = gcoll_topo_read_file(file, why, sizeof(why));
  struct gcoll_topo *merged = NULL;
  if (over == NULL) {
    snprintf(err, errlen, "%s", why);
  } else {
    merged = gcoll_topo_merge(over, detected, GCOLL_MATCH_BUSID, summary, sizeof(summary), why,
                              sizeof(why));
    if (merged == NULL) snprintf(err, errlen, "%s: merging with detection: %s", file, why);
    else if (info != NULL) snprintf(info, infolen, "topology file %s merged with detection: %s",
                                    file, summary);
  }
  gcoll_topo_free(over);
  gcoll_topo_free(detected);
  return merged;
}

struct gcoll_topo *gcoll_topo_load_merged(const char *file_arg, const char *base_arg,
                                          char *info, size_t infolen, char *err, size_t errlen) {
  char why[TOPO_LOOKUP_ERRLEN], summary[768];
  if (info != NULL && infolen > 0) info[0] = '\0';
  struct gcoll_topo *over = gcoll_topo_load_name(file_arg, err, errlen);
  if (over == NULL) return NULL;
  struct gcoll_topo *base = gcoll_topo_load_name(base_arg, err, errlen);
  struct gcoll_topo *merged = NULL;
  if (base != NULL) {
    merged = gcoll_topo_merge(over, base, GCOLL_MATCH_BUSID_OR_ORDER, summary, sizeof(summary),
                              why, sizeof(why));
    if (merged == NULL) snprintf(err, errlen, "%s merged with %s: %s", file_arg, base_arg, why);
    else if (info != NULL) snprintf(info, infolen, "%s merged with %s: %s", file_arg, base_arg,
                                    summary);
  }
  gcoll_topo_free(base);
  gcoll_topo_free(over);
  return merged;
}
