/* The endpoints file (endpoints.h): strict reader, check against the step,
 * atomic writer. */
#include "graph/endpoints.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/plan.h"
#include "graph/yaml_doc.h"

#define HEADER_MAX 4096

struct gcoll_endpoints *gcoll_endpoints_new(int nranks) {
  if (nranks < 1 || nranks > GCOLL_MAX_RANKS) return NULL;
  struct gcoll_endpoints *ep = calloc(1, sizeof(*ep));
  if (ep == NULL) return NULL;
  ep->nranks = nranks;
  ep->rank = calloc((size_t)nranks, sizeof(*ep->rank));
  if (ep->rank == NULL) {
    free(ep);
    return NULL;
  }
  return ep;
}

void gcoll_endpoints_free(struct gcoll_endpoints *ep) {
  if (ep == NULL) return;
  free(ep->rank);
  free(ep);
}

/* Numeric only: a name would need a resolver at every rank's init, and two
 * ranks could resolve it differently. */
static int host_valid(const char *h) {
  unsigned char buf[16];
  return inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
}

static int job_valid(const char *j) {
  size_t n = strlen(j);
  return n >= 1 && n <= GCOLL_ENDPOINTS_JOB_MAX && strspn(j, "0123456789abcdef") == n;
}

/* Only the fields a map may have; anything else is a typo or another
 * version's file, and is refused rather than ignored. */
static int only_fields(const struct ydoc *doc, const struct ydoc_node *map,
                       const char *const *allowed, char *err, size_t errlen) {
  for (size_t i = 0; i < gcoll_ydoc_count(map); i++) {
    const char *k = gcoll_ydoc_key(map, i);
    int ok = 0;
    for (const char *const *a = allowed; *a != NULL && !ok; a++)
      ok = k != NULL && strcmp(k, *a) == 0;
    if (!ok)
      return gcoll_ydoc_error(doc, gcoll_ydoc_value(map, i), k ? k : "?", err, errlen,
                              "unknown field in an endpoints file");
  }
  return 0;
}

static int read_entry(const struct ydoc *doc, const struct ydoc_node *n,
                      struct gcoll_endpoints *ep, unsigned char *seen, char *err, size_t errlen) {
  static const char *const fields[] = {"rank", "host", "port", NULL};
  const struct ydoc_node *f;
  int64_t rank, port;
  char host[GCOLL_ENDPOINTS_HOST_MAX];
  if (gcoll_ydoc_expect(doc, n, YDOC_MAP, "endpoints", err, errlen) != 0 ||
      only_fields(doc, n, fields, err, errlen) != 0 ||
      gcoll_ydoc_req(doc, n, "rank", &f, err, errlen) != 0 ||
      gcoll_ydoc_int(doc, f, "rank", 0, ep->nranks - 1, &rank, err, errlen) != 0 ||
      gcoll_ydoc_req(doc, n, "port", &f, err, errlen) != 0 ||
      gcoll_ydoc_int(doc, f, "port", 1, 65535, &port, err, errlen) != 0 ||
      gcoll_ydoc_req(doc, n, "host", &f, err, errlen) != 0 ||
      gcoll_ydoc_str(doc, f, "host", host, sizeof(host), err, errlen) != 0)
    return -1;
  if (!host_valid(host)) {
    /* The message is one line whatever the file holds: the value is
     * echoed with anything unprintable as '?'. */
    for (char *c = host; *c != '\0'; c++)
      if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
    return gcoll_ydoc_error(doc, f, "host", err, errlen,
                            "'%.46s' is not a numeric IPv4 or IPv6 address", host);
  }
  if (seen[rank])
    return gcoll_ydoc_error(doc, n, "rank", err, errlen, "duplicate rank %lld", (long long)rank);
  seen[rank] = 1;
  snprintf(ep->rank[rank].host, sizeof(ep->rank[rank].host), "%s", host);
  ep->rank[rank].port = (uint16_t)port;
  return 0;
}

static struct gcoll_endpoints *from_doc(const struct ydoc *doc, char *err, size_t errlen) {
  static const char *const fields[] = {"gcoll-endpoints", "job", "ranks", "endpoints", NULL};
  const struct ydoc_node *root = doc->root, *f, *list;
  int64_t version, nranks;
  char job[GCOLL_ENDPOINTS_JOB_MAX + 1];
  if (root == NULL) {
    snprintf(err, errlen, "%s: empty endpoints file", doc->what);
    return NULL;
  }
  if (gcoll_ydoc_expect(doc, root, YDOC_MAP, "gcoll-endpoints", err, errlen) != 0 ||
      only_fields(doc, root, fields, err, errlen) != 0 ||
      gcoll_ydoc_req(doc, root, "gcoll-endpoints", &f, err, errlen) != 0 ||
      gcoll_ydoc_int(doc, f, "gcoll-endpoints", GCOLL_ENDPOINTS_VERSION, GCOLL_ENDPOINTS_VERSION,
                     &version, err, errlen) != 0 ||
      gcoll_ydoc_req(doc, root, "job", &f, err, errlen) != 0 ||
      gcoll_ydoc_str(doc, f, "job", job, sizeof(job), err, errlen) != 0)
    return NULL;
  if (!job_valid(job)) {
    gcoll_ydoc_error(doc, f, "job", err, errlen, "expected 1..%d lowercase hex digits",
                     GCOLL_ENDPOINTS_JOB_MAX);
    return NULL;
  }
  if (gcoll_ydoc_req(doc, root, "ranks", &f, err, errlen) != 0 ||
      gcoll_ydoc_int(doc, f, "ranks", 1, GCOLL_MAX_RANKS, &nranks, err, errlen) != 0 ||
      gcoll_ydoc_req(doc, root, "endpoints", &list, err, errlen) != 0 ||
      gcoll_ydoc_expect(doc, list, YDOC_SEQ, "endpoints", err, errlen) != 0)
    return NULL;
  if (gcoll_ydoc_count(list) != (size_t)nranks) {
    gcoll_ydoc_error(doc, list, "endpoints", err, errlen, "%zu entries for %lld ranks",
                     gcoll_ydoc_count(list), (long long)nranks);
    return NULL;
  }
  struct gcoll_endpoints *ep = gcoll_endpoints_new((int)nranks);
  unsigned char *seen = calloc((size_t)nranks, 1);
  if (ep == NULL || seen == NULL) {
    snprintf(err, errlen, "%s: out of memory for %lld ranks", doc->what, (long long)nranks);
    goto fail;
  }
  snprintf(ep->job, sizeof(ep->job), "%s", job);
  /* nranks entries, each rank at most once: every rank is there. */
  for (size_t i = 0; i < gcoll_ydoc_count(list); i++)
    if (read_entry(doc, gcoll_ydoc_item(list, i), ep, seen, err, errlen) != 0) goto fail;
  free(seen);
  return ep;
fail:
  free(seen);
  gcoll_endpoints_free(ep);
  return NULL;
}

struct gcoll_endpoints *gcoll_endpoints_read_mem(const char *buf, size_t len, const char *what,
                                                 char *err, size_t errlen) {
  struct ydoc doc;
  if (gcoll_ydoc_parse(&doc, buf, len, what, err, errlen) != 0) return NULL;
  struct gcoll_endpoints *ep = from_doc(&doc, err, errlen);
  gcoll_ydoc_free(&doc);
  return ep;
}

struct gcoll_endpoints *gcoll_endpoints_read_file(const char *path, char *err, size_t errlen) {
  char *buf;
  size_t len;
  size_t max = HEADER_MAX + (size_t)GCOLL_ENDPOINTS_BYTES_PER_RANK * GCOLL_MAX_RANKS;
  if (gcoll_read_file(path, max, &buf, &len, err, errlen) != 0) return NULL;
  struct gcoll_endpoints *ep = gcoll_endpoints_read_mem(buf, len, path, err, errlen);
  free(buf);
  return ep;
}

int gcoll_endpoints_check(const struct gcoll_endpoints *ep, int nranks, const char *job,
                          char *err, size_t errlen) {
  if (nranks >= 1 && ep->nranks != nranks) {
    snprintf(err, errlen, "endpoints for %d rank%s, but this step has %d", ep->nranks,
             ep->nranks == 1 ? "" : "s", nranks);
    return -1;
  }
  if (job != NULL && strcmp(ep->job, job) != 0) {
    snprintf(err, errlen, "endpoints of another job (job %.16s..., this step's %.16s...)",
             ep->job, job);
    return -1;
  }
  return 0;
}

static int write_cb(void *stream, const void *arg, char *err, size_t errlen) {
  const struct gcoll_endpoints *ep = arg;
  FILE *f = stream;
  fprintf(f, "gcoll-endpoints: %d\njob: %s\nranks: %d\nendpoints:\n", GCOLL_ENDPOINTS_VERSION,
          ep->job, ep->nranks);
  for (int r = 0; r < ep->nranks; r++)
    fprintf(f, "  - {rank: %d, host: '%s', port: %u}\n", r, ep->rank[r].host,
            (unsigned)ep->rank[r].port);
  if (ferror(f)) {
    snprintf(err, errlen, "cannot write the endpoints file: write failed");
    return -1;
  }
  return 0;
}

/* What the reader would refuse is not written. */
static int writable(const struct gcoll_endpoints *ep, const char *path, char *err, size_t errlen) {
  if (!job_valid(ep->job) || ep->nranks < 1 || ep->nranks > GCOLL_MAX_RANKS) {
    snprintf(err, errlen, "%s: refusing to write endpoints with job '%.16s' for %d ranks", path,
             ep->job, ep->nranks);
    return -1;
  }
  for (int r = 0; r < ep->nranks; r++)
    if (!host_valid(ep->rank[r].host) || ep->rank[r].port == 0) {
      snprintf(err, errlen, "%s: refusing to write rank %d's endpoint '%.46s' port %u", path, r,
               ep->rank[r].host, (unsigned)ep->rank[r].port);
      return -1;
    }
  return 0;
}

int gcoll_endpoints_write_file(const struct gcoll_endpoints *ep, const char *path, char *err,
                               size_t errlen) {
  if (writable(ep, path, err, errlen) != 0) return -1;
  return gcoll_atomic_write(path, write_cb, ep, err, errlen);
}

int gcoll_endpoints_write_stream(const struct gcoll_endpoints *ep, void *stream, char *err,
                                 size_t errlen) {
  if (writable(ep, "endpoints", err, errlen) != 0) return -1;
  return write_cb(stream, ep, err, errlen);
}
