/* Init's closing wave over the plan's tree (comm_init_wave.h). */
#include "runtime/comm_init_wave.h"

#include <stdio.h>
#include <string.h>

static gcollResult_t get_one(struct gcollComm *comm, int from, const char *key, char *buf,
                             size_t cap, uint64_t deadline, const char *what) {
  char err[512];
  size_t len = 0;
  if (gcoll_bootstrap_get_from(comm->bs, from, key, buf, cap, &len, deadline, err,
                               sizeof(err)) != 0)
    return gcoll_fail(gcollRemoteError, "init wave: %s rank %d: %s", what, from, err);
  if (len == 0 || buf[len - 1] != '\0')
    return gcoll_fail(gcollRemoteError, "init wave: rank %d sent a malformed '%s'", from, key);
  return gcollSuccess;
}

static gcollResult_t put_one(struct gcollComm *comm, int to, const char *key, const char *value) {
  char err[512];
  if (gcoll_bootstrap_put_to(comm->bs, to, key, value, strlen(value) + 1, err, sizeof(err)) != 0)
    return gcoll_fail(gcollRemoteError, "init wave: to rank %d: %s", to, err);
  return gcollSuccess;
}

gcollResult_t gcoll_comm_init_wave(struct gcollComm *comm, const char *root_value, char *value,
                                   size_t cap, int *root) {
  const struct gcoll_tree_link *t = &comm->view->tree[0];
  uint64_t deadline = gcoll_bootstrap_deadline(comm->bs);
  char key[64], buf[64];
  gcollResult_t rc = gcollSuccess;
  for (int k = 0; rc == gcollSuccess && k < t->nchildren; k++) {
    snprintf(key, sizeof(key), "init/up/%d", t->children[k]);
    rc = get_one(comm, t->children[k], key, buf, sizeof(buf), deadline, "waiting for child");
  }
  if (rc == gcollSuccess && t->parent >= 0) {
    snprintf(key, sizeof(key), "init/up/%d", comm->rank);
    rc = put_one(comm, t->parent, key, "connected");
  }
  if (rc != gcollSuccess) return rc;
  if (t->parent < 0) {
    snprintf(value, cap, "%d %s", comm->rank, root_value);
  } else {
    snprintf(key, sizeof(key), "init/down/%d", comm->rank);
    rc = get_one(comm, t->parent, key, value, cap, deadline, "waiting for parent");
  }
  for (int k = 0; rc == gcollSuccess && k < t->nchildren; k++) {
    snprintf(key, sizeof(key), "init/down/%d", t->children[k]);
    rc = put_one(comm, t->children[k], key, value);
  }
  if (rc != gcollSuccess) return rc;
  /* "ROOT VALUE": hand back the value alone. */
  int n = 0;
  if (sscanf(value, "%d %n", root, &n) != 1 || n <= 0 || *root < 0 || *root >= comm->nranks)
    return gcoll_fail(gcollRemoteError, "init wave: malformed value from the tree's root");
  memmove(value, value + n, strlen(value + n) + 1);
  return gcollSuccess;
}
