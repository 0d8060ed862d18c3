/* The host executor behind the executor table (exec.h): host_exec.c's
 * threads, which run a collective to completion inside launch. */
#include <stdlib.h>

#include "kernels/exec.h"

struct gcoll_exec {
  struct gcoll_host_exec *host;
  _Atomic int *abort_word;
};

static struct gcoll_exec *host_create(const struct gcoll_exec_config *cfg, char *err,
                                      size_t errlen) {
  struct gcoll_exec *e = calloc(1, sizeof(*e));
  if (e == NULL) return NULL;
  e->host = gcoll_host_exec_create(cfg, err, errlen);
  if (e->host == NULL) {
    free(e);
    return NULL;
  }
  e->abort_word = cfg->abort_word;
  return e;
}

/* Host buffers have no stream: the call's result is known when it returns. */
static gcollResult_t host_launch(struct gcoll_exec *e, const struct gcoll_host_coll *c,
                                 void *stream, char *err, size_t errlen) {
  (void)stream;
  return gcoll_host_exec_run(e->host, c, err, errlen);
}

/* Nothing is ever pending: launch ran it. */
static gcollResult_t host_wait(struct gcoll_exec *e, char *err, size_t errlen) {
  (void)e;
  (void)err;
  (void)errlen;
  return gcollSuccess;
}

static void host_abort(struct gcoll_exec *e, gcollResult_t why) {
  int none = 0;
  if (e->abort_word != NULL)
    atomic_compare_exchange_strong(e->abort_word, &none, (int)(why ? why : gcollInvalidUsage));
}

static void host_destroy(struct gcoll_exec *e) {
  if (e == NULL) return;
  gcoll_host_exec_destroy(e->host);
  free(e);
}

static int host_owns(const void *ptr, int *device) {
  (void)ptr;
  *device = -1;
  return 1;
}

const struct gcoll_exec_ops gcoll_exec_host_ops = {
    .name = "host",
    .owns = host_owns,
    .create = host_create,
    .launch = host_launch,
    .poll = host_wait,
    .wait = host_wait,
    .abort = host_abort,
    .destroy = host_destroy,
};

/* Defined by exec_cuda.c, which only builds with the CUDA toolkit: a weak
 * reference is NULL in builds without it. */
extern const struct gcoll_exec_ops gcoll_exec_cuda_ops __attribute__((weak));

const struct gcoll_exec_ops *gcoll_exec_ops_of(enum gcoll_exec_kind kind) {
  switch (kind) {
    case GCOLL_EXEC_HOST: return &gcoll_exec_host_ops;
    case GCOLL_EXEC_CUDA: return &gcoll_exec_cuda_ops;
    default: return NULL;
  }
}
