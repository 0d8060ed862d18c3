/* The endpoints file: where every rank of a job step listens, fixed by the
 * launcher before the ranks start (gcollrun binds one listening socket per
 * rank and hands it to that rank), so that a rank reaches its plan
 * neighbours directly instead of asking a central store where they are.
 *
 *   gcoll-endpoints: 1
 *   job: 5f0c1e2d3a4b5c6d7e8f901122334455   # a hash of the job key, hex
 *   ranks: 4
 *   endpoints:
 *     - {rank: 0, host: 127.0.0.1, port: 40001}
 *     - ...
 *
 * `job` is not the key: an HMAC of it (computed by whoever holds the key),
 * so a file left in a shared directory names its job without revealing
 * anything. The reader is strict, like the plan's: exactly these fields,
 * every rank once, numeric IPv4/IPv6 hosts, ports 1..65535, and a file that
 * does not match the running step (rank count, job) is refused with a
 * one-line reason that says which. Writes are atomic (temp file + rename).
 *
 * Pure data and YAML: no sockets here (the runtime and gcollrun own those). */
#ifndef GCOLL_GRAPH_ENDPOINTS_H
#define GCOLL_GRAPH_ENDPOINTS_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_ENDPOINTS_VERSION 1
#define GCOLL_ENDPOINTS_JOB_MAX 64   /* hex digits of `job` */
#define GCOLL_ENDPOINTS_HOST_MAX 46  /* INET6_ADDRSTRLEN */
/* A file is at most this many bytes per rank (plus a fixed header). */
#define GCOLL_ENDPOINTS_BYTES_PER_RANK 96

struct gcoll_endpoint {
  char host[GCOLL_ENDPOINTS_HOST_MAX]; /* numeric IPv4 or IPv6 */
  uint16_t port;
};

struct gcoll_endpoints {
  char job[GCOLL_ENDPOINTS_JOB_MAX + 1];
  int nranks;
  struct gcoll_endpoint *rank;          /* nranks entries, by rank */
};

/* Parses a whole file's bytes; `what` names it in messages. NULL with
 * "WHAT:LINE: reason" in err. */
struct gcoll_endpoints *gcoll_endpoints_read_mem(const char *buf, size_t len, const char *what,
                                                 char *err, size_t errlen);
/* Reads a regular file (size-checked before it is read). */
struct gcoll_endpoints *gcoll_endpoints_read_file(const char *path, char *err, size_t errlen);

/* Whether ep is this step's: nranks ranks and job id `job` (either check is
 * skipped when nranks < 1 or job is NULL). 0, or -1 with one line in err
 * saying which differs. */
int gcoll_endpoints_check(const struct gcoll_endpoints *ep, int nranks, const char *job,
                          char *err, size_t errlen);

/* Atomic write (temp file + fsync + rename); -1 with one line in err, and
 * the same validation the reader applies, so nothing written is unreadable. */
int gcoll_endpoints_write_file(const struct gcoll_endpoints *ep, const char *path, char *err,
                               size_t errlen);

/* The same text and checks, to an open stdio stream (a FILE *): for a
 * writer that makes the file itself (the SPANK plugin writes through its
 * private step directory). */
int gcoll_endpoints_write_stream(const struct gcoll_endpoints *ep, void *stream, char *err,
                                 size_t errlen);

/* A fresh table for nranks ranks (hosts empty, ports 0); NULL when out of
 * memory or nranks is out of range. */
struct gcoll_endpoints *gcoll_endpoints_new(int nranks);
void gcoll_endpoints_free(struct gcoll_endpoints *ep);

#endif
