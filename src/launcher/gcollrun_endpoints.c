/* gcollrun's endpoints (issue 16): one listening socket per rank, bound
 * here before any rank starts, and the endpoints file that says where each
 * is, beside the plan. Each rank inherits its own socket (all of them are
 * close-on-exec; the child clears the flag on its own one only, between
 * fork and exec) and finds its plan neighbours in the file, so its init
 * asks no central store where they are.
 *
 * Why inherited sockets rather than ports agreed in advance: a port that is
 * bound before the rank exists cannot be taken by anyone else in between,
 * and needs no range reserved on the nodes (Slurm's MpiParams=ports); the
 * price is that only a launcher whose process the ranks are forked from
 * can do it (the SPANK plugin binds them in slurmstepd, before it forks
 * the tasks: src/launcher/spank/spank_endpoints.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/endpoints.h"
#include "launcher/gcollrun.h"
#include "runtime/endpoint_server.h"
#include "runtime/net_tcp.h"

/* Where the ranks listen: GCOLL_SOCKET_IFADDR as the transports read it,
 * else loopback, as gcollrun_spawn.c tells the ranks (every rank is on
 * this host). */
static int listen_address(struct gcoll_tcp_endpoint *ep, char *err, size_t errlen) {
  const char *v = getenv("GCOLL_SOCKET_IFADDR");
  if (v != NULL && *v != '\0') return gcoll_tcp_pick_address(ep, err, errlen);
  memset(ep, 0, sizeof(*ep));
  ep->family = AF_INET;
  ep->ip[0] = 127;
  ep->ip[3] = 1;
  return 0;
}

int gcollrun_endpoints_prepare(struct gcollrun_endpoints *e, const struct gcollrun_plan *p,
                               const char *job_key, char *err, size_t errlen) {
  memset(e, 0, sizeof(*e));
  e->nranks = p->nranks;
  e->fd = malloc((size_t)p->nranks * sizeof(int));
  struct gcoll_endpoints *ep = gcoll_endpoints_new(p->nranks);
  int rc = -1;
  if (e->fd == NULL || ep == NULL) {
    snprintf(err, errlen, "out of memory for %d endpoints", p->nranks);
    goto out;
  }
  for (int r = 0; r < p->nranks; r++) e->fd[r] = -1;
  char why[512];
  if (gcoll_endpoints_job_id(job_key, ep->job, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "endpoints: %s", why);
    goto out;
  }
  struct gcoll_tcp_endpoint where;
  if (listen_address(&where, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "endpoints: %s", why);
    goto out;
  }
  for (int r = 0; r < p->nranks; r++) {
    struct gcoll_tcp_endpoint mine = where;
    e->fd[r] = gcoll_tcp_listen(&mine, why, sizeof(why));
    if (e->fd[r] < 0) {
      snprintf(err, errlen, "endpoint of rank %d: %s", r, why);
      goto out;
    }
    if (inet_ntop(mine.family, mine.ip, ep->rank[r].host, sizeof(ep->rank[r].host)) == NULL) {
      snprintf(err, errlen, "endpoint of rank %d: %s", r, strerror(errno));
      goto out;
    }
    ep->rank[r].port = mine.port;
  }
  /* Beside the plan when gcollrun wrote it; a --plan FILE's directory may
   * not be ours to write, so then a private one. */
  const char *dir = p->dir;
  if (dir[0] == '\0') {
    const char *tmp = getenv("TMPDIR");
    snprintf(e->dir, sizeof(e->dir), "%s/gcollrun-endpoints.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(e->dir) == NULL) {
      snprintf(err, errlen, "endpoints: mkdtemp %.256s: %s", e->dir, strerror(errno));
      e->dir[0] = '\0';
      goto out;
    }
    dir = e->dir;
  }
  if (strlen(dir) + sizeof("/endpoints.yaml") > sizeof(e->path)) {
    snprintf(err, errlen, "endpoints: directory name too long");
    goto out;
  }
  memcpy(e->path, dir, strlen(dir));
  memcpy(e->path + strlen(dir), "/endpoints.yaml", sizeof("/endpoints.yaml"));
  rc = gcoll_endpoints_write_file(ep, e->path, err, errlen);
out:
  gcoll_endpoints_free(ep);
  if (rc != 0) gcollrun_endpoints_cleanup(e);
  return rc;
}

void gcollrun_endpoints_release(struct gcollrun_endpoints *e, int rank) {
  if (e->fd != NULL && rank >= 0 && rank < e->nranks && e->fd[rank] >= 0) {
    close(e->fd[rank]);
    e->fd[rank] = -1;
  }
}

void gcollrun_endpoints_cleanup(struct gcollrun_endpoints *e) {
  for (int r = 0; e->fd != NULL && r < e->nranks; r++) gcollrun_endpoints_release(e, r);
  free(e->fd);
  e->fd = NULL;
  if (e->path[0] != '\0') unlink(e->path);
  if (e->dir[0] != '\0') rmdir(e->dir);
  e->path[0] = e->dir[0] = '\0';
}
