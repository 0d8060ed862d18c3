/* The bootstrap store on a thread (see kvs_thread.h). */
#include "runtime/kvs_thread.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/service_thread.h"
#include "runtime/bootstrap.h"
#include "runtime/kvs_server.h"

/* Room for this many ranks when the job size is not known in advance: the
 * store's limits are fixed when it opens. */
#define UNKNOWN_JOB_MAX_RANKS 4096

struct gcoll_kvs_thread {
  struct kvs_server *kvs;
  uint64_t timeout_ms;
  enum gcoll_kvs_thread_life life;
  /* A stoppable store is shared by its thread and its owner: the last of
   * the two to let go frees it. */
  _Atomic int stop, refs;
};

static void let_go(struct gcoll_kvs_thread *u) {
  if (atomic_fetch_sub(&u->refs, 1) == 1) free(u);
}

void gcoll_kvs_thread_stop(struct gcoll_kvs_thread *handle) {
  if (handle == NULL) return;
  atomic_store(&handle->stop, 1);
  let_go(handle);
}

static void *kvs_thread_main(void *arg) {
  struct gcoll_kvs_thread *u = arg;
  int maxfds = gcoll_kvs_server_max_pollfds(u->kvs);
  struct pollfd *fds = calloc((size_t)maxfds, sizeof(*fds));
  uint64_t idle_since = gcoll_bootstrap_now_ms(), broken_at = 0;
  while (fds != NULL && !atomic_load(&u->stop)) {
    int nr = gcoll_kvs_server_nranks(u->kvs);
    uint64_t now = gcoll_bootstrap_now_ms();
    int used = u->life == GCOLL_KVS_THREAD_WHILE_USED;
    if (used && nr > 0 && gcoll_kvs_server_nbye(u->kvs) >= nr) break;
    if (used && gcoll_kvs_server_broken_rank(u->kvs) >= 0) {
      if (broken_at == 0) broken_at = now;
      if (now - broken_at > u->timeout_ms + 2000) break;
    }
    /* The listener is always there; anything more is a client. */
    int n = gcoll_kvs_server_fill_pollfds(u->kvs, fds);
    if (n > 1) idle_since = now;
    else if (used && now - idle_since > u->timeout_ms) break;
    int t = gcoll_kvs_server_timeout_ms(u->kvs);
    /* Wake now and then to notice the end conditions above. */
    if (t < 0 || t > 200) t = 200;
    int rc = poll(fds, (nfds_t)n, t);
    if (rc < 0 && errno != EINTR) break;
    gcoll_kvs_server_dispatch(u->kvs, fds, rc > 0 ? n : 0);
  }
  free(fds);
  gcoll_kvs_server_close(u->kvs);
  let_go(u);
  return NULL;
}

int gcoll_kvs_thread_start(const char *job_key, const char *bind_ip, int nranks,
                           enum gcoll_kvs_thread_life life, struct gcoll_kvs_thread **handle,
                           uint16_t *port, char *err, size_t errlen) {
  struct gcoll_kvs_thread *u = calloc(1, sizeof(*u));
  if (u == NULL) {
    snprintf(err, errlen, "out of memory for the bootstrap store");
    return -1;
  }
  u->life = life;
  int stoppable = life == GCOLL_KVS_THREAD_UNTIL_STOPPED && handle != NULL;
  atomic_init(&u->stop, 0);
  atomic_init(&u->refs, stoppable ? 2 : 1);
  if (gcoll_bootstrap_timeout_from_env(&u->timeout_ms, err, errlen) != 0) {
    free(u);
    return -1;
  }
  int room = nranks > 0 ? nranks : UNKNOWN_JOB_MAX_RANKS;
  struct kvs_server_config cfg = {.nranks = nranks, .job_key = job_key, .bind_ip = bind_ip,
                                  /* Connections made on first use add a key
                                   * per pair of ranks that talk. */
                                  .max_keys = (size_t)(1 << 16) + 64 * (size_t)room,
                                  .max_conns = 2 * room + 16};
  u->kvs = gcoll_kvs_server_open(&cfg, err, errlen);
  if (u->kvs == NULL) {
    free(u);
    return -1;
  }
  *port = gcoll_kvs_server_port(u->kvs);
  int e = gcoll_service_thread_start("gcoll-store", kvs_thread_main, u);
  if (e != 0) {
    gcoll_kvs_server_close(u->kvs);
    free(u);
    snprintf(err, errlen, "bootstrap store thread: %s", strerror(e));
    return -1;
  }
  if (handle != NULL) *handle = stoppable ? u : NULL;
  return 0;
}
