/* Bootstrap: how ranks of one job find each other before any transport is
 * up. One small interface over interchangeable backends: the TCP key-value
 * store hosted by gcollrun (bootstrap_tcp.c, chosen when GCOLL_KVS_ADDR is
 * set) and, later, Slurm's PMI2. Callers only use the functions below; a
 * backend is one file defining a struct gcoll_bootstrap_backend plus one
 * line in bootstrap.c's table.
 *
 * Contract (what lets a rank fetch only its plan neighbours' endpoints,
 * never an all-to-all):
 *   put      stores key -> value. Visible to every rank no later than after
 *            the next fence; a key is written once.
 *   fence    collective over all ranks: when it returns, every put made
 *            before any rank's fence is visible.
 *   get      waits until the key is visible or the deadline passes.
 *   barrier  collective synchronisation without data.
 * Every wait takes an absolute deadline (gcoll_bootstrap_deadline() gives
 * now + GCOLL_TIMEOUT) and fails with a one-line reason when it passes.
 * Functions return 0, or -1 with one line in err. */
#ifndef GCOLL_RUNTIME_BOOTSTRAP_H
#define GCOLL_RUNTIME_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_BOOTSTRAP_MAX_KEY 256
#define GCOLL_BOOTSTRAP_MAX_VALUE 65536
#define GCOLL_BOOTSTRAP_DEFAULT_TIMEOUT_S 60
/* Reserved key: backends that notice a rank vanish (the TCP KVS sees its
 * connection drop without a goodbye) answer it with that rank, in decimal.
 * A rank whose collective timed out asks it to name a dead peer it never
 * talked to directly. */
#define GCOLL_BOOTSTRAP_LOST_RANK_KEY "job/lost-rank"

struct gcoll_bootstrap;

struct gcoll_bootstrap_ops {
  int (*put)(struct gcoll_bootstrap *bs, const char *key, const void *value, size_t len,
             char *err, size_t errlen);
  /* Copies at most buflen bytes; *len is the value's full length (a value
   * longer than buflen is an error). */
  int (*get)(struct gcoll_bootstrap *bs, const char *key, void *buf, size_t buflen,
             size_t *len, uint64_t deadline_ms, char *err, size_t errlen);
  int (*fence)(struct gcoll_bootstrap *bs, uint64_t deadline_ms, char *err, size_t errlen);
  int (*barrier)(struct gcoll_bootstrap *bs, uint64_t deadline_ms, char *err, size_t errlen);
  /* Says goodbye (so that peers do not take the exit for a crash) and
   * frees everything, bs included. */
  void (*close)(struct gcoll_bootstrap *bs);
  /* Optional: a put whose only reader is rank `reader`, and a get of a
   * value only rank `writer` puts. A backend that knows where ranks listen
   * (bootstrap_endpoints.c) sends the value straight to its reader instead
   * of to a store; NULL: plain put and get (the store serves everyone). */
  int (*put_to)(struct gcoll_bootstrap *bs, int reader, const char *key, const void *value,
                size_t len, char *err, size_t errlen);
  int (*get_from)(struct gcoll_bootstrap *bs, int writer, const char *key, void *buf,
                  size_t buflen, size_t *len, uint64_t deadline_ms, char *err, size_t errlen);
};

struct gcoll_bootstrap {
  const struct gcoll_bootstrap_ops *ops;
  const char *backend;      /* "tcp", "pmi2" */
  int rank, nranks;
  uint64_t timeout_ms;      /* GCOLL_TIMEOUT */
  /* Hex string naming the job's shm segments when GCOLL_JOB_KEY is unset
   * (pmi2 derives it from the Slurm job step); owned by the backend, or
   * NULL. */
  const char *job_key;
  /* Random, known to the job's ranks only (pmi2: rank 0's store key, passed
   * through PMI2), or NULL: mixed into the job key, so that nobody outside
   * the job can predict the shm names and the hellos of its connections
   * from the job and step ids that GCOLL_JOB_KEY or job_key derive from. */
  const char *job_secret;
  void *impl;               /* backend state */
  /* What this handle asked of its store, counted by the backend where a
   * request leaves (a hello and a goodbye count like any other): requests
   * sent, nanoseconds spent waiting for their answers (opening included),
   * and to whom they went. Init reports them on its INFO line, and
   * tests/bench/init-scale.sh reads them there. */
  uint64_t requests, request_ns;
  uint64_t opened_ns;       /* when opening began (gcoll_wait_now_ns): the
                             * start of an init that was handed bs */
  char store[320];
  /* The handle this one forwards its puts, gets, fences and barriers to
   * (pmi2: rank 0's store), whose counts are reported beside this one's;
   * NULL when it talks to its store itself. */
  const struct gcoll_bootstrap *via;
  /* Endpoints (issue 16): peer_routed when this handle reaches ranks
   * directly at the endpoints the launcher fixed (put_to/get_from go to the
   * ranks, fence has nothing to wait for, and init replaces the store's
   * barrier by a wave over the plan's tree); peer_messages and peers count
   * what it sent to whom. endpoints_note says, for the INFO line, why
   * endpoints that came with the plan were not used ("" when none came). */
  int peer_routed;
  uint64_t peer_messages, peers;
  char endpoints_note[256];
};

/* Picks the backend the environment describes: $GCOLL_BOOTSTRAP names one
 * explicitly; otherwise the first whose variables are set (GCOLL_KVS_ADDR
 * for tcp). */
int gcoll_bootstrap_open_from_env(struct gcoll_bootstrap **bs, char *err, size_t errlen);

/* CLOCK_MONOTONIC milliseconds: the clock deadlines are expressed in. */
uint64_t gcoll_bootstrap_now_ms(void);
/* now + the job's GCOLL_TIMEOUT. */
uint64_t gcoll_bootstrap_deadline(const struct gcoll_bootstrap *bs);

/* The requests bs and the handle it forwards to sent, and the time spent on
 * them; `to` says to whom, e.g. "41 to the store at 127.0.0.1:5000" or
 * "3 to slurmstepd (PMI2), 38 to rank 0's store at 10.0.0.1:5000" (to may
 * be NULL with tolen 0). */
void gcoll_bootstrap_requests(const struct gcoll_bootstrap *bs, uint64_t *requests,
                              uint64_t *request_ns, char *to, size_t tolen);

static inline int gcoll_bootstrap_put(struct gcoll_bootstrap *bs, const char *key,
                                      const void *value, size_t len, char *err,
                                      size_t errlen) {
  return bs->ops->put(bs, key, value, len, err, errlen);
}
static inline int gcoll_bootstrap_get(struct gcoll_bootstrap *bs, const char *key, void *buf,
                                      size_t buflen, size_t *len, uint64_t deadline_ms,
                                      char *err, size_t errlen) {
  return bs->ops->get(bs, key, buf, buflen, len, deadline_ms, err, errlen);
}
static inline int gcoll_bootstrap_fence(struct gcoll_bootstrap *bs, uint64_t deadline_ms,
                                        char *err, size_t errlen) {
  return bs->ops->fence(bs, deadline_ms, err, errlen);
}
static inline int gcoll_bootstrap_barrier(struct gcoll_bootstrap *bs, uint64_t deadline_ms,
                                          char *err, size_t errlen) {
  return bs->ops->barrier(bs, deadline_ms, err, errlen);
}
static inline int gcoll_bootstrap_put_to(struct gcoll_bootstrap *bs, int reader,
                                         const char *key, const void *value, size_t len,
                                         char *err, size_t errlen) {
  if (bs->ops->put_to != NULL) return bs->ops->put_to(bs, reader, key, value, len, err, errlen);
  return bs->ops->put(bs, key, value, len, err, errlen);
}
static inline int gcoll_bootstrap_get_from(struct gcoll_bootstrap *bs, int writer,
                                           const char *key, void *buf, size_t buflen,
                                           size_t *len, uint64_t deadline_ms, char *err,
                                           size_t errlen) {
  if (bs->ops->get_from != NULL)
    return bs->ops->get_from(bs, writer, key, buf, buflen, len, deadline_ms, err, errlen);
  return bs->ops->get(bs, key, buf, buflen, len, deadline_ms, err, errlen);
}
static inline void gcoll_bootstrap_close(struct gcoll_bootstrap *bs) {
  if (bs != NULL) bs->ops->close(bs);
}

/* ---- for backends ------------------------------------------------------- */

struct gcoll_bootstrap_backend {
  const char *name;
  /* Whether the environment sets this backend up (e.g. GCOLL_KVS_ADDR). */
  int (*detect)(void);
  /* Fills bs (ops, rank, nranks, impl); bs->timeout_ms is already set. */
  int (*open)(struct gcoll_bootstrap *bs, char *err, size_t errlen);
};

extern const struct gcoll_bootstrap_backend gcoll_bootstrap_tcp_backend;
/* Endpoints from the launcher (GCOLL_ENDPOINTS + GCOLL_LISTEN_FD): tried
 * first by gcoll_bootstrap_open_from_env when offered; a file or listener
 * that does not match the step falls back to the store, the reason in
 * endpoints_note. Plain puts and gets go to the store (GCOLL_KVS_ADDR;
 * under srun --gcoll=plan --mpi=pmi2, PMI2's), opened on first use only. */
extern const struct gcoll_bootstrap_backend gcoll_bootstrap_endpoints_backend;
/* Only in builds with PMI2 (HAVE_PMI2). */
extern const struct gcoll_bootstrap_backend gcoll_bootstrap_pmi2_backend;

/* Reads an integer environment variable in [min, max]; -1 with a one-line
 * reason when unset or malformed. */
int gcoll_bootstrap_env_int(const char *name, long min, long max, long *out, char *err,
                            size_t errlen);

/* GCOLL_TIMEOUT in milliseconds (default 60 s); -1 when malformed. */
int gcoll_bootstrap_timeout_from_env(uint64_t *ms, char *err, size_t errlen);

/* The TCP backend with its identity given, not read from the environment
 * (gcollCommInitRank: the address and key come from a gcollUniqueId). */
int gcoll_bootstrap_tcp_open(struct gcoll_bootstrap **bs, const char *addr, const char *job_key,
                             int rank, int nranks, char *err, size_t errlen);

/* A handle whose endpoints came with the plan and that no launcher's store
 * serves (bootstrap_endpoints.c): host_store starts the job's store in this
 * process (the plan tree's root does, at init) and writes its address to
 * addr, "" when this handle needs none or cannot serve one; offer_store
 * tells a handle where that store is, for its first plain request. Both
 * do nothing on other handles. 0, or -1 with one line in err. */
int gcoll_bootstrap_endpoints_host_store(struct gcoll_bootstrap *bs, char *addr, size_t cap,
                                         char *err, size_t errlen);
int gcoll_bootstrap_endpoints_offer_store(struct gcoll_bootstrap *bs, const char *addr,
                                          char *err, size_t errlen);

/* Backend "local" (bootstrap_local.c): the ranks are threads of one
 * process. create() makes the shared store for nranks ranks; each rank's
 * thread opens its own handle on it; the store lives until the creator
 * released it and every handle is closed. */
struct gcoll_bootstrap_local;
struct gcoll_bootstrap_local *gcoll_bootstrap_local_create(int nranks, char *err, size_t errlen);
int gcoll_bootstrap_local_open(struct gcoll_bootstrap_local *shared, int rank,
                               struct gcoll_bootstrap **bs, char *err, size_t errlen);
void gcoll_bootstrap_local_release(struct gcoll_bootstrap_local *shared);

#endif
