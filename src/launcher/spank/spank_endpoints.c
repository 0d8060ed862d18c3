/* Endpoints with the plugin's plan (issue 16 part 1, the Slurm path): each
 * node binds one listening socket per local task in slurmstepd, before the
 * tasks are forked, and says where in nodes/<i>.endpoints (beside its
 * topology, written before it, so node 0 finds it once the topology is
 * there):
 *
 *   host: "10.0.0.1"
 *   ports: "40001,40002"     # local task 0, 1, ...
 *
 * or `error: "why"` when it has none. Node 0 merges them into the step's
 * endpoints.yaml (graph/endpoints.h, the file gcollrun writes), naming the
 * step by the HMAC of its key, before it publishes plan.yaml. Every task
 * inherits the node's sockets; task_init keeps its own and closes the
 * others (spank_remote.c). Nothing here talks to Slurm. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/netaddr.h"
#include "graph/endpoints.h"
#include "graph/yaml_doc.h"
#include "launcher/spank/spank_gcoll.h"
#include "runtime/endpoint_server.h"

void gcoll_spank_endpoints_close(struct gcoll_spank_endpoints *e) {
  for (int i = 0; i < e->ntasks && i < GCOLL_SPANK_MAX_LOCAL; i++)
    if (e->fd[i] >= 0) close(e->fd[i]), e->fd[i] = -1;
  e->ntasks = 0;
}

int gcoll_spank_endpoints_bind(struct gcoll_spank_endpoints *e,
                               const struct gcoll_gather_node *me, char *err, size_t errlen) {
  memset(e, 0, sizeof(*e));
  if (me->ntasks_local < 1 || me->ntasks_local > GCOLL_SPANK_MAX_LOCAL) {
    snprintf(err, errlen, "%u local tasks (at most %d)", me->ntasks_local, GCOLL_SPANK_MAX_LOCAL);
    return -1;
  }
  for (int i = 0; i < GCOLL_SPANK_MAX_LOCAL; i++) e->fd[i] = -1;
  struct gcoll_tcp_endpoint where;
  char why[GCOLL_SPANK_ERRLEN];
  const char *ifaddr = me->job_ifaddr[0] != '\0' ? me->job_ifaddr : NULL;
  const char *ifname = me->job_ifname[0] != '\0' ? me->job_ifname : NULL;
  /* A step on one node needs nothing another host reaches (as the PMI2
   * bootstrap's store does). */
  if (ifaddr == NULL && me->nnodes == 1) ifaddr = "127.0.0.1";
  if (gcoll_netaddr_pick(ifaddr, ifname, me->job_ifname_from, &where, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "%s", why);
    return -1;
  }
  if (inet_ntop(where.family, where.ip, e->host, sizeof(e->host)) == NULL) {
    snprintf(err, errlen, "inet_ntop: %s", strerror(errno));
    return -1;
  }
  e->ntasks = (int)me->ntasks_local;
  /* Non-blocking, as the runtime's endpoint server expects of the socket
   * it is handed; close-on-exec until task_init keeps a task's own. */
  for (int i = 0; i < e->ntasks; i++) {
    struct gcoll_tcp_endpoint ep = where;
    e->fd[i] = gcoll_tcp_listen(&ep, why, sizeof(why));
    e->port[i] = ep.port;
    if (e->fd[i] < 0) {
      snprintf(err, errlen, "local task %d on %s: %s", i, e->host, why);
      gcoll_spank_endpoints_close(e);
      return -1;
    }
  }
  return 0;
}

char *gcoll_spank_endpoints_fragment(const struct gcoll_spank_endpoints *e, const char *why,
                                     size_t *len) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (f == NULL) return NULL;
  if (e == NULL) {
    /* One line, quoted: nothing in it may end the string. */
    fputs("error: \"", f);
    for (const char *c = why; *c != '\0'; c++)
      fputc(*c == '"' || *c == '\\' || (unsigned char)*c < 0x20 ? '?' : *c, f);
    fputs("\"\n", f);
  } else {
    fprintf(f, "host: \"%s\"\nports: \"", e->host);
    for (int i = 0; i < e->ntasks; i++) fprintf(f, "%s%u", i ? "," : "", (unsigned)e->port[i]);
    fputs("\"\n", f);
  }
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

/* Ports "a,b,c": exactly want of them, each 1..65535. */
static int parse_ports(const char *s, int want, uint16_t *out) {
  int n = 0;
  while (*s != '\0') {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s || errno != 0 || v < 1 || v > 65535 || n >= want) return -1;
    out[n++] = (uint16_t)v;
    if (*end == ',') end++;
    else if (*end != '\0') return -1;
    s = end;
  }
  return n == want ? 0 : -1;
}

/* Node i's fragment: its host and ports, or -1 with the reason (*own set
 * when it is the node's own error line). */
static int read_fragment(const char *text, int i, int tasks, char *host, size_t hostlen,
                         uint16_t *ports, int *own, char *err, size_t errlen) {
  struct ydoc doc;
  const struct ydoc_node *v;
  char what[64], why[GCOLL_SPANK_ERRLEN], buf[GCOLL_SPANK_MAX_LOCAL * 6 + 8];
  snprintf(what, sizeof(what), "nodes/%d.endpoints", i);
  *own = 0;
  if (gcoll_ydoc_parse(&doc, text, strlen(text), what, err, errlen) != 0) return -1;
  int rc = -1;
  if (doc.root != NULL && (v = gcoll_ydoc_get(doc.root, "error")) != NULL) {
    if (gcoll_ydoc_str(&doc, v, "error", why, sizeof(why), err, errlen) == 0) {
      snprintf(err, errlen, "node %d: %.400s", i, why);
      *own = 1;
    }
  } else if (gcoll_ydoc_req(&doc, doc.root, "host", &v, err, errlen) == 0 &&
             gcoll_ydoc_str(&doc, v, "host", host, hostlen, err, errlen) == 0 &&
             gcoll_ydoc_req(&doc, doc.root, "ports", &v, err, errlen) == 0 &&
             gcoll_ydoc_str(&doc, v, "ports", buf, sizeof(buf), err, errlen) == 0) {
    if (parse_ports(buf, tasks, ports) != 0)
      snprintf(err, errlen, "%s: ports '%.64s' are not %d ports", what, buf, tasks);
    else
      rc = 0;
  }
  gcoll_ydoc_free(&doc);
  return rc;
}

static char *to_text(const struct gcoll_endpoints *ep, size_t *len, char *err, size_t errlen) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (f == NULL) {
    snprintf(err, errlen, "endpoints: %s", strerror(errno));
    return NULL;
  }
  int rc = gcoll_endpoints_write_stream(ep, f, err, errlen);
  if (fclose(f) != 0 && rc == 0) {
    snprintf(err, errlen, "endpoints: %s", strerror(errno));
    rc = -1;
  }
  if (rc != 0) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

char *gcoll_spank_endpoints_merge(char *const *nodes, const int *tasks, int nnodes,
                                  const int *rank_of_slot, int nranks, const char *job_key,
                                  size_t *len, int *node_fault, char *err, size_t errlen) {
  *node_fault = 0;
  struct gcoll_endpoints *ep = gcoll_endpoints_new(nranks);
  char *text = NULL, why[GCOLL_SPANK_ERRLEN];
  if (ep == NULL) {
    snprintf(err, errlen, "endpoints for %d ranks: out of memory or too many", nranks);
    return NULL;
  }
  if (gcoll_endpoints_job_id(job_key, ep->job, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "endpoints: %s", why);
    goto out;
  }
  int slot = 0;
  for (int i = 0; i < nnodes; i++) {
    char host[GCOLL_ENDPOINTS_HOST_MAX];
    uint16_t ports[GCOLL_SPANK_MAX_LOCAL];
    if (tasks[i] < 1 || tasks[i] > GCOLL_SPANK_MAX_LOCAL || slot + tasks[i] > nranks) {
      snprintf(err, errlen, "node %d: %d tasks do not fit the step's %d ranks", i, tasks[i],
               nranks);
      goto out;
    }
    if (nodes[i] == NULL) {
      snprintf(err, errlen, "node %d wrote no endpoints (is endpoints=no on that node?)", i);
      goto out;
    }
    if (read_fragment(nodes[i], i, tasks[i], host, sizeof(host), ports, node_fault, err,
                      errlen) != 0)
      goto out;
    for (int k = 0; k < tasks[i]; k++, slot++) {
      int r = rank_of_slot[slot];
      if (r < 0 || r >= nranks) {
        snprintf(err, errlen, "node %d: rank %d out of the step's %d", i, r, nranks);
        goto out;
      }
      snprintf(ep->rank[r].host, sizeof(ep->rank[r].host), "%s", host);
      ep->rank[r].port = ports[k];
    }
  }
  if (slot != nranks) {
    snprintf(err, errlen, "the nodes' %d tasks are not the step's %d ranks", slot, nranks);
    goto out;
  }
  /* The writer refuses what the reader would (a host that is no address,
   * a rank never given one). */
  text = to_text(ep, len, err, errlen);
out:
  gcoll_endpoints_free(ep);
  return text;
}

int gcoll_spank_endpoints_check(const char *text, size_t len, const char *job_key,
                                const struct gcoll_gather_node *me,
                                const struct gcoll_spank_endpoints *e, char *err,
                                size_t errlen) {
  char why[GCOLL_SPANK_ERRLEN], job[GCOLL_ENDPOINTS_JOB_MAX + 1];
  struct gcoll_endpoints *ep = gcoll_endpoints_read_mem(text, len, "endpoints.yaml", why,
                                                        sizeof(why));
  int rc = -1;
  if (ep == NULL) {
    snprintf(err, errlen, "%s", why);
    return -1;
  }
  if (gcoll_endpoints_job_id(job_key, job, why, sizeof(why)) != 0 ||
      gcoll_endpoints_check(ep, (int)me->ntasks_total, job, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "endpoints.yaml: %s", why);
    goto out;
  }
  if (e->ntasks != (int)me->ntasks_local) {
    snprintf(err, errlen, "endpoints.yaml: this node bound %d sockets for %u tasks", e->ntasks,
             me->ntasks_local);
    goto out;
  }
  for (int k = 0; k < e->ntasks; k++) {
    const struct gcoll_endpoint *x = &ep->rank[me->ranks[k]];
    if (strcmp(x->host, e->host) != 0 || x->port != e->port[k]) {
      snprintf(err, errlen, "endpoints.yaml gives rank %d %s:%u, its socket is %s:%u",
               me->ranks[k], x->host, (unsigned)x->port, e->host, (unsigned)e->port[k]);
      goto out;
    }
  }
  rc = 0;
out:
  gcoll_endpoints_free(ep);
  return rc;
}
