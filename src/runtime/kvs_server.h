/* The bootstrap key-value store gcollrun hosts for its ranks (wire format in
 * runtime/kvs_proto.h). Single-threaded and non-blocking: the owner puts
 * the server's descriptors into its own poll() set, so the launcher runs
 * one event loop for sockets, rank output and signals, with no threads to
 * make fork() unsafe.
 *
 * Semantics: PUT makes a key visible at once (a key is written once; an
 * identical re-put is accepted); GET waits until the key exists or its
 * timeout; FENCE and BARRIER complete when all nranks ranks have entered
 * them. A rank whose connection closes without BYE breaks the job: every
 * pending and later wait fails with "rank R disconnected", so nobody
 * waits for a peer that is gone. Memory is bounded by max_keys,
 * max_bytes and max_conns, and each connection holds at most one request
 * and one reply. */
#ifndef GCOLL_LAUNCHER_KVS_SERVER_H
#define GCOLL_LAUNCHER_KVS_SERVER_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

struct kvs_server_config {
  int nranks;                   /* 0: taken from the first HELLO */
  const char *job_key;          /* 1..KVS_MAX_JOB_KEY bytes */
  size_t max_keys;              /* 0: 1024 + 64 per rank */
  size_t max_bytes;             /* keys + values; 0: 64 MiB */
  int max_conns;                /* 0: 2 per rank + 16 */
  /* Called when an identified rank disconnects without BYE, before the
   * waiters are failed (gcollrun reaps that rank first, so the rank that
   * really died is the one it reports). May be NULL. */
  void (*rank_lost)(void *ctx, int rank);
  void *ctx;
  const char *bind_ip;          /* IPv4 address to listen on; NULL: 127.0.0.1 */
};

struct kvs_server;

/* Listens on cfg->bind_ip (127.0.0.1 by default), ephemeral port. NULL
 * with a one-line reason. */
struct kvs_server *gcoll_kvs_server_open(const struct kvs_server_config *cfg, char *err,
                                         size_t errlen);
void gcoll_kvs_server_close(struct kvs_server *s);
uint16_t gcoll_kvs_server_port(const struct kvs_server *s);

/* Upper bound on the descriptors gcoll_kvs_server_fill_pollfds() writes. */
int gcoll_kvs_server_max_pollfds(const struct kvs_server *s);
/* Writes the server's descriptors and events; returns how many. */
int gcoll_kvs_server_fill_pollfds(struct kvs_server *s, struct pollfd *fds);
/* Handles the revents of the descriptors last filled (same array, same
 * count), then expires timed-out waits. */
void gcoll_kvs_server_dispatch(struct kvs_server *s, const struct pollfd *fds, int n);
/* Milliseconds until the next wait expires; -1 when none is pending. */
int gcoll_kvs_server_timeout_ms(const struct kvs_server *s);

/* Number of keys stored (tests and diagnostics). */
size_t gcoll_kvs_server_nkeys(const struct kvs_server *s);
/* The job size (0 until the first HELLO when opened with nranks 0), how
 * many ranks said goodbye, and the first rank lost without one (-1). */
int gcoll_kvs_server_nranks(const struct kvs_server *s);
int gcoll_kvs_server_nbye(const struct kvs_server *s);
int gcoll_kvs_server_broken_rank(const struct kvs_server *s);
/* The launcher saw rank die: the store answers as if its connection had
 * dropped without goodbye (the first lost rank wins; rank_lost is not
 * called). With endpoints from the plan a rank may never have connected,
 * and its survivors still ask the store which rank died. */
void gcoll_kvs_server_rank_gone(struct kvs_server *s, int rank);
/* Requests handled so far, every message counted (hellos, goodbyes and
 * malformed ones too): the load on the store, which grows with the job as
 * long as ranks find their peers through it. */
uint64_t gcoll_kvs_server_nrequests(const struct kvs_server *s);

#endif
