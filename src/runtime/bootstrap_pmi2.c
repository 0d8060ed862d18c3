/* Bootstrap backend "pmi2": Slurm's PMI2 key-value store, set up by
 * `srun --mpi=pmi2` (which passes the task its end of a socket to
 * slurmstepd in PMI_FD, plus PMI_RANK, PMI_SIZE and PMI_JOBID).
 *
 * libpmi2 is loaded with dlopen when a job uses it, so that libgcoll runs
 * on machines without Slurm; pmi2.h only supplies prototypes and limits.
 *
 * libpmi2 blocks in read() on PMI_FD without a timeout, retrying only on
 * EINTR. Before every call the socket's SO_RCVTIMEO/SO_SNDTIMEO are set to
 * the time left before the caller's deadline, so that a fence some rank
 * never joins makes that read fail with EAGAIN and the call return an
 * error. The reply may still come later, so the request/reply stream is out
 * of step from then on: the backend refuses further calls and skips
 * PMI2_Finalize.
 *
 * libpmi2 keeps its connection in static variables and PMI2_Finalize closes
 * PMI_FD, so PMI2 can be opened once per process (and is not thread-safe).
 * Keys and values are mapped onto PMI2's limits by pmi2_codec.h.
 *
 * PMI2 only finds the job's own store. Its keys become visible at a fence
 * every rank joins, but connections made on first use (gcollSend to a rank
 * the plan does not name) publish an address when one rank wants it. So,
 * as NCCL's bootstrap root does, rank 0 serves the TCP store gcollrun
 * would host (kvs_thread.h) on GCOLL_SOCKET_IFADDR, with a fresh random
 * key, and publishes "ADDR KEY" through PMI2 in one put and one fence;
 * every rank then joins that store, and all later puts, gets, fences and
 * barriers go to it. Rank 0's process ending ends the store: the others'
 * waits then fail at once with the connection lost. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <slurm/pmi2.h>

#include "kernels/wait.h"
#include "runtime/bootstrap.h"
#include "runtime/comm_init_paths.h"
#include "runtime/kvs_thread.h"
#include "runtime/net_tcp.h"
#include "runtime/pmi2_codec.h"

#define PMI2_LIBRARY "libpmi2.so.0"
/* The bound on PMI2_Finalize, which slurmstepd answers at once. */
#define FINALIZE_WAIT_MS 2000
#define MAX_JOBID 256
/* The PMI2 key of rank 0's store: "IPV4:PORT KEY". */
#define STORE_KEY "gcoll-store"
#define STORE_KEY_BYTES 16

_Static_assert(GCOLL_PMI2_KEYLEN == PMI2_MAX_KEYLEN && GCOLL_PMI2_VALLEN == PMI2_MAX_VALLEN,
               "pmi2_codec.h must follow slurm/pmi2.h");

struct pmi2_lib {
  void *handle;
  __typeof__(&PMI2_Init) init;
  __typeof__(&PMI2_Finalize) finalize;
  __typeof__(&PMI2_Job_GetId) job_get_id;
  __typeof__(&PMI2_KVS_Put) kvs_put;
  __typeof__(&PMI2_KVS_Fence) kvs_fence;
  __typeof__(&PMI2_KVS_Get) kvs_get;
};

struct pmi2_state {
  struct pmi2_lib lib;
  int fd;                        /* PMI_FD: libpmi2's socket to slurmstepd */
  int initialized;               /* PMI2_Init succeeded */
  int broken;                    /* a call failed mid-stream: no more calls */
  char job_key[17];              /* 16 hex digits */
  char store_key[2 * STORE_KEY_BYTES + 1]; /* rank 0's random key: the job's secret */
  struct gcoll_bootstrap *store; /* rank 0's TCP store, once joined */
  struct gcoll_bootstrap *bs;    /* the handle counting our PMI2 calls */
  char value[GCOLL_PMI2_VALLEN + 1];
};

/* libpmi2's connection is process-wide: one open at a time, and none after
 * a PMI2_Finalize closed PMI_FD (its number may name another file by then). */
static atomic_int pmi2_claimed;

static int pmi2_detect(void) {
  const char *fd = getenv("PMI_FD");
  return fd != NULL && *fd != '\0';
}

static int load_library(struct pmi2_lib *lib, char *err, size_t errlen) {
  lib->handle = dlopen(PMI2_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (lib->handle == NULL) {
    snprintf(err, errlen, "bootstrap(pmi2): cannot load %s (install package libpmi2-0): %s",
             PMI2_LIBRARY, dlerror());
    return -1;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"PMI2_Init", (void **)&lib->init},         {"PMI2_Finalize", (void **)&lib->finalize},
      {"PMI2_Job_GetId", (void **)&lib->job_get_id}, {"PMI2_KVS_Put", (void **)&lib->kvs_put},
      {"PMI2_KVS_Fence", (void **)&lib->kvs_fence}, {"PMI2_KVS_Get", (void **)&lib->kvs_get},
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
    if ((*syms[i].slot = dlsym(lib->handle, syms[i].name)) == NULL) {
      snprintf(err, errlen, "bootstrap(pmi2): %s has no %s", PMI2_LIBRARY, syms[i].name);
      dlclose(lib->handle);
      lib->handle = NULL;
      return -1;
    }
  return 0;
}

/* Bounds libpmi2's next blocking read and write on PMI_FD by deadline.
 * Every call to slurmstepd comes through here first, so it is where they
 * are counted. */
static int bound_next_call(struct pmi2_state *s, uint64_t deadline, const char *what, char *err,
                           size_t errlen) {
  if (s->broken) {
    snprintf(err, errlen, "bootstrap(pmi2): %s: the PMI2 connection is unusable after an "
                          "earlier error", what);
    return -1;
  }
  s->bs->requests++;
  uint64_t now = gcoll_bootstrap_now_ms();
  /* A zero timeval means "no timeout": never pass it. */
  uint64_t left = deadline > now ? deadline - now : 1;
  struct timeval tv = {.tv_sec = (time_t)(left / 1000),
                       .tv_usec = (suseconds_t)(left % 1000) * 1000};
  if (setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(s->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    snprintf(err, errlen, "bootstrap(pmi2): %s: cannot bound the wait on PMI_FD=%d: %s", what,
             s->fd, strerror(errno));
    return -1;
  }
  return 0;
}

/* Whether slurmstepd closed our end (the step is going away). */
static int server_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  char c;
  return poll(&p, 1, 0) == 1 &&
         ((p.revents & (POLLHUP | POLLERR)) || recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0);
}

/* Whether a failed call ran into the SO_RCVTIMEO bound_next_call set (the
 * kernel rounds that timer up, so the deadline has passed by then; the
 * slack only absorbs clock granularity). */
static int hit_deadline(uint64_t deadline) { return gcoll_bootstrap_now_ms() + 5 >= deadline; }

/* A PMI2 call that waits (fence, barrier) failed with rc. */
static void wait_failed(struct pmi2_state *s, const char *what, int rc, uint64_t start,
                        uint64_t deadline, char *err, size_t errlen) {
  s->broken = 1;
  if (hit_deadline(deadline))
    snprintf(err, errlen, "bootstrap: PMI2 %s timed out after %.3gs (a rank did not arrive)",
             what, (double)(gcoll_bootstrap_now_ms() - start) / 1000.0);
  else
    snprintf(err, errlen, "bootstrap(pmi2): %s failed (PMI2 error %d%s)", what, rc,
             server_gone(s->fd) ? ", slurmstepd closed PMI_FD" : "");
}

static int pmi2_put(struct gcoll_bootstrap *bs, const char *key, const void *value, size_t len,
                    char *err, size_t errlen) {
  struct pmi2_state *s = bs->impl;
  if (len > GCOLL_BOOTSTRAP_MAX_VALUE || *key == '\0') {
    snprintf(err, errlen, "bootstrap(pmi2): put '%.64s': the key must not be empty and the value "
                          "at most %d bytes (it is %zu)", key, GCOLL_BOOTSTRAP_MAX_VALUE, len);
    return -1;
  }
  uint64_t deadline = gcoll_bootstrap_deadline(bs);
  int nparts = gcoll_pmi2_nparts(len);
  for (int part = 0; part < nparts; part++) {
    char pkey[GCOLL_PMI2_KEY_BUF];
    gcoll_pmi2_part_key(key, part, pkey);
    gcoll_pmi2_encode_part(value, len, part, s->value);
    if (bound_next_call(s, deadline, "put", err, errlen) != 0) return -1;
    int rc = s->lib.kvs_put(pkey, s->value);
    if (rc != PMI2_SUCCESS) {
      /* slurmstepd accepts any put it can parse: whatever failed left the
       * stream in an unknown state. */
      s->broken = 1;
      snprintf(err, errlen, "bootstrap(pmi2): put '%.64s' (PMI2 key '%s'): PMI2 error %d", key,
               pkey, rc);
      return -1;
    }
  }
  return 0;
}

/* One PMI2 key into s->value. */
static int get_part(struct pmi2_state *s, const char *key, const char *pkey, uint64_t deadline,
                    char *err, size_t errlen) {
  if (bound_next_call(s, deadline, "get", err, errlen) != 0) return -1;
  int vallen = 0;
  int rc = s->lib.kvs_get(NULL, PMI2_ID_NULL, pkey, s->value, (int)sizeof(s->value), &vallen);
  if (rc == PMI2_SUCCESS && vallen >= 0) return 0;
  if (rc == PMI2_SUCCESS) {
    snprintf(err, errlen, "bootstrap(pmi2): get '%.64s': value of PMI2 key '%s' is longer than "
                          "%d characters", key, pkey, GCOLL_PMI2_VALLEN - 1);
    return -1;
  }
  /* A key not found is a complete reply (the stream stays usable); a
   * timeout or a closed socket is not. */
  s->broken = hit_deadline(deadline) || server_gone(s->fd);
  if (s->broken)
    snprintf(err, errlen, "bootstrap(pmi2): get '%.64s': no answer from slurmstepd (PMI2 error "
                          "%d)", key, rc);
  else
    snprintf(err, errlen, "bootstrap(pmi2): get '%.64s': not found after the fence (no rank "
                          "put PMI2 key '%s')", key, pkey);
  return -1;
}

/* After a fence a key is either there or was never put: no waiting. */
static int pmi2_get(struct gcoll_bootstrap *bs, const char *key, void *buf, size_t buflen,
                    size_t *len, uint64_t deadline, char *err, size_t errlen) {
  struct pmi2_state *s = bs->impl;
  if (strcmp(key, GCOLL_BOOTSTRAP_LOST_RANK_KEY) == 0) {
    snprintf(err, errlen, "bootstrap(pmi2): get '%s': not available with PMI2", key);
    return -1;
  }
  uint8_t part_bytes[GCOLL_PMI2_PART_BYTES];
  char pkey[GCOLL_PMI2_KEY_BUF], why[128];
  size_t total = 0;
  gcoll_pmi2_part_key(key, 0, pkey);
  if (get_part(s, key, pkey, deadline, err, errlen) != 0) return -1;
  if (gcoll_pmi2_decode_head(s->value, &total, part_bytes, why, sizeof(why)) != 0) goto garbled;
  *len = total;
  if (total > buflen) {
    snprintf(err, errlen, "bootstrap(pmi2): get '%.64s': value of %zu bytes does not fit %zu",
             key, total, buflen);
    return -1;
  }
  memcpy(buf, part_bytes, gcoll_pmi2_part_len(total, 0));
  for (int part = 1; part < gcoll_pmi2_nparts(total); part++) {
    gcoll_pmi2_part_key(key, part, pkey);
    if (get_part(s, key, pkey, deadline, err, errlen) != 0) return -1;
    if (gcoll_pmi2_decode_part(s->value, total, part, part_bytes, why, sizeof(why)) != 0)
      goto garbled;
    memcpy((uint8_t *)buf + (size_t)part * GCOLL_PMI2_PART_BYTES, part_bytes,
           gcoll_pmi2_part_len(total, part));
  }
  return 0;
garbled:
  snprintf(err, errlen, "bootstrap(pmi2): get '%.64s': PMI2 key '%s' holds no gcoll value: %s",
           key, pkey, why);
  return -1;
}

static int fence_as(struct gcoll_bootstrap *bs, const char *what, uint64_t deadline, char *err,
                    size_t errlen) {
  struct pmi2_state *s = bs->impl;
  uint64_t start = gcoll_bootstrap_now_ms();
  if (bound_next_call(s, deadline, what, err, errlen) != 0) return -1;
  int rc = s->lib.kvs_fence();
  if (rc == PMI2_SUCCESS) return 0;
  wait_failed(s, what, rc, start, deadline, err, errlen);
  return -1;
}

static int pmi2_fence(struct gcoll_bootstrap *bs, uint64_t deadline, char *err, size_t errlen) {
  return fence_as(bs, "fence", deadline, err, errlen);
}

/* PMI2 has no barrier of its own: a fence with nothing put is one. */
static int pmi2_barrier(struct gcoll_bootstrap *bs, uint64_t deadline, char *err,
                        size_t errlen) {
  return fence_as(bs, "barrier", deadline, err, errlen);
}

/* Finalizes when the stream is in step, and frees s. */
static void pmi2_shutdown(struct pmi2_state *s) {
  char why[256];
  int finalized = 0;
  if (s->initialized && !s->broken &&
      bound_next_call(s, gcoll_bootstrap_now_ms() + FINALIZE_WAIT_MS, "finalize", why,
                      sizeof(why)) == 0)
    finalized = s->lib.finalize() == PMI2_SUCCESS;
  /* Without a clean finalize libpmi2 still holds PMI_FD, out of step:
   * closing it is all that is left to do. */
  if (s->initialized && !finalized) close(s->fd);
  /* PMI2_Init never ran: PMI_FD is untouched and a later open may use it. */
  if (!s->initialized && !s->broken) atomic_store(&pmi2_claimed, 0);
  if (s->lib.handle != NULL) dlclose(s->lib.handle);
  free(s);
}

/* PMI2 has no goodbye: a rank that exits while others wait in a fence
 * leaves them to their deadline. */
static void pmi2_close(struct gcoll_bootstrap *bs) {
  pmi2_shutdown(bs->impl);
  free(bs);
}

/* ---- rank 0's store ------------------------------------------------------ */

static int store_put(struct gcoll_bootstrap *bs, const char *key, const void *value, size_t len,
                     char *err, size_t errlen) {
  struct pmi2_state *s = bs->impl;
  return gcoll_bootstrap_put(s->store, key, value, len, err, errlen);
}

static int store_get(struct gcoll_bootstrap *bs, const char *key, void *buf, size_t buflen,
                     size_t *len, uint64_t deadline, char *err, size_t errlen) {
  struct pmi2_state *s = bs->impl;
  return gcoll_bootstrap_get(s->store, key, buf, buflen, len, deadline, err, errlen);
}

static int store_fence(struct gcoll_bootstrap *bs, uint64_t deadline, char *err, size_t errlen) {
  struct pmi2_state *s = bs->impl;
  return gcoll_bootstrap_fence(s->store, deadline, err, errlen);
}

static int store_barrier(struct gcoll_bootstrap *bs, uint64_t deadline, char *err,
                         size_t errlen) {
  struct pmi2_state *s = bs->impl;
  return gcoll_bootstrap_barrier(s->store, deadline, err, errlen);
}

/* Says goodbye to the store (so it does not take the exit for a crash),
 * then finalizes PMI2. */
static void store_close(struct gcoll_bootstrap *bs) {
  struct pmi2_state *s = bs->impl;
  gcoll_bootstrap_close(s->store);
  s->store = NULL;
  pmi2_close(bs);
}

static const struct gcoll_bootstrap_ops store_ops = {
    .put = store_put, .get = store_get, .fence = store_fence, .barrier = store_barrier,
    .close = store_close};

/* Rank 0: starts the store and puts its address and key into PMI2. */
static int serve_store(struct gcoll_bootstrap *bs, char *err, size_t errlen) {
  char ip[64], key[2 * STORE_KEY_BYTES + 1], value[160], why[384];
  /* A step on one node needs no store reachable from other hosts. */
  const char *nodes = getenv("SLURM_STEP_NUM_NODES");
  if (nodes != NULL && strcmp(nodes, "1") == 0) {
    snprintf(ip, sizeof(ip), "127.0.0.1");
  } else if (gcoll_tcp_pick_ipv4(ip, sizeof(ip), why, sizeof(why)) != 0) {
    snprintf(err, errlen, "bootstrap(pmi2): rank 0's store: %s", why);
    return -1;
  }
  uint16_t port = 0;
  if (gcoll_random_hex(key, STORE_KEY_BYTES, why, sizeof(why)) != 0 ||
      gcoll_kvs_thread_start(key, ip, bs->nranks, GCOLL_KVS_THREAD_WHILE_USED, NULL, &port, why,
                             sizeof(why)) != 0) {
    snprintf(err, errlen, "bootstrap(pmi2): rank 0's store on %s: %s", ip, why);
    return -1;
  }
  snprintf(value, sizeof(value), "%s:%u %s", ip, (unsigned)port, key);
  return pmi2_put(bs, STORE_KEY, value, strlen(value) + 1, err, errlen);
}

/* Every rank: one PMI2 fence, then the store named under STORE_KEY. */
static int join_store(struct gcoll_bootstrap *bs, char *err, size_t errlen) {
  struct pmi2_state *s = bs->impl;
  char value[160], addr[96], key[2 * STORE_KEY_BYTES + 1], why[512];
  size_t len = 0;
  uint64_t deadline = gcoll_bootstrap_deadline(bs);
  if ((bs->rank == 0 && serve_store(bs, err, errlen) != 0) ||
      pmi2_fence(bs, deadline, err, errlen) != 0 ||
      pmi2_get(bs, STORE_KEY, value, sizeof(value) - 1, &len, deadline, err, errlen) != 0)
    return -1;
  value[len] = '\0';
  if (len == 0 || value[len - 1] != '\0' || sscanf(value, "%95s %32s", addr, key) != 2) {
    snprintf(err, errlen, "bootstrap(pmi2): PMI2 key '%s' holds no store address", STORE_KEY);
    return -1;
  }
  if (gcoll_bootstrap_tcp_open(&s->store, addr, key, bs->rank, bs->nranks, why, sizeof(why)) !=
      0) {
    snprintf(err, errlen, "bootstrap(pmi2): rank 0's store at %s: %s", addr, why);
    return -1;
  }
  bs->ops = &store_ops;
  bs->via = s->store;
  snprintf(s->store->store, sizeof(s->store->store), "rank 0's store at %s", addr);
  snprintf(s->store_key, sizeof(s->store_key), "%s", key);
  bs->job_secret = s->store_key;
  return 0;
}

static const struct gcoll_bootstrap_ops pmi2_ops = {
    .put = pmi2_put, .get = pmi2_get, .fence = pmi2_fence, .barrier = pmi2_barrier,
    .close = pmi2_close};

/* PMI_FD must name the socket srun set up: anything else (a number a shell
 * reused, a pipe) cannot be bounded with SO_RCVTIMEO. */
static int read_fd(struct pmi2_state *s, char *err, size_t errlen) {
  long fd;
  char why[256];
  if (gcoll_bootstrap_env_int("PMI_FD", 0, 1L << 20, &fd, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "%s: start the job with srun --mpi=pmi2", why);
    return -1;
  }
  int type = 0;
  socklen_t tl = sizeof(type);
  errno = 0;
  if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) {
    snprintf(err, errlen, "bootstrap(pmi2): PMI_FD=%ld is not a stream socket (%s): was it "
                          "closed since srun started the task?", fd,
             errno ? strerror(errno) : "wrong type");
    return -1;
  }
  s->fd = (int)fd;
  return 0;
}

/* GCOLL_RANK / GCOLL_NRANKS, when set (by hand or a launcher), must agree
 * with Slurm's view, or two numbering schemes would silently mix. */
static int check_env_identity(const struct gcoll_bootstrap *bs, char *err, size_t errlen) {
  const char *names[] = {"GCOLL_RANK", "GCOLL_NRANKS"};
  const int values[] = {bs->rank, bs->nranks};
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(names[i]);
    if (v == NULL || *v == '\0') continue;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || errno != 0 || n != values[i]) {
      snprintf(err, errlen, "bootstrap(pmi2): %s=%.32s, but srun started this process as rank "
                            "%d of %d", names[i], v, bs->rank, bs->nranks);
      return -1;
    }
  }
  return 0;
}

/* A hex key naming the job step's shared-memory segments: the PMI2 job id
 * (Slurm's is "<job>.<step>"), with the step and cluster in case another
 * Slurm's job ids are in use on the same host. */
static int derive_job_key(struct pmi2_state *s, char *err, size_t errlen) {
  char jobid[MAX_JOBID] = "";
  int rc = s->lib.job_get_id(jobid, (int)sizeof(jobid));
  if (rc != PMI2_SUCCESS) {
    snprintf(err, errlen, "bootstrap(pmi2): PMI2_Job_GetId failed (PMI2 error %d)", rc);
    return -1;
  }
  uint64_t h = gcoll_fnv1a64(GCOLL_FNV1A64_INIT, jobid, strnlen(jobid, sizeof(jobid)));
  const char *extra[] = {getenv("SLURM_STEP_ID"), getenv("SLURM_CLUSTER_NAME")};
  for (int i = 0; i < 2; i++) {
    h = gcoll_fnv1a64(h, "/", 1);
    if (extra[i] != NULL) h = gcoll_fnv1a64(h, extra[i], strlen(extra[i]));
  }
  snprintf(s->job_key, sizeof(s->job_key), "%016llx", (unsigned long long)h);
  return 0;
}

static int pmi2_start(struct gcoll_bootstrap *bs, struct pmi2_state *s, char *err,
                      size_t errlen) {
  if (read_fd(s, err, errlen) != 0 || load_library(&s->lib, err, errlen) != 0 ||
      bound_next_call(s, gcoll_bootstrap_deadline(bs), "init", err, errlen) != 0)
    return -1;
  int spawned = 0, size = 0, rank = -1, appnum = 0;
  int rc = s->lib.init(&spawned, &size, &rank, &appnum);
  if (rc != PMI2_SUCCESS) {
    snprintf(err, errlen, "bootstrap(pmi2): PMI2_Init failed (PMI2 error %d)", rc);
    /* Whatever libpmi2 sent or read is not known: do not talk to it again. */
    s->broken = 1;
    return -1;
  }
  s->initialized = 1;
  if (size < 1 || rank < 0 || rank >= size) {
    snprintf(err, errlen, "bootstrap(pmi2): PMI2_Init gave rank %d of %d", rank, size);
    return -1;
  }
  bs->rank = rank;
  bs->nranks = size;
  if (check_env_identity(bs, err, errlen) != 0 || derive_job_key(s, err, errlen) != 0) return -1;
  bs->job_key = s->job_key;
  return 0;
}

static int pmi2_open(struct gcoll_bootstrap *bs, char *err, size_t errlen) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&pmi2_claimed, &expected, 1)) {
    snprintf(err, errlen, "bootstrap(pmi2): PMI2 was already opened in this process (libpmi2 "
                          "allows one connection per process)");
    return -1;
  }
  struct pmi2_state *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    atomic_store(&pmi2_claimed, 0);
    snprintf(err, errlen, "bootstrap(pmi2): out of memory");
    return -1;
  }
  s->fd = -1;
  s->bs = bs;
  bs->impl = s;
  bs->ops = &pmi2_ops;
  snprintf(bs->store, sizeof(bs->store), "slurmstepd (PMI2)");
  /* Opening is all this handle itself waits for (everything after goes to
   * rank 0's store, which counts its own time, its joining included). */
  uint64_t t0 = gcoll_wait_now_ns();
  if (pmi2_start(bs, s, err, errlen) == 0 && join_store(bs, err, errlen) == 0) {
    bs->request_ns = gcoll_wait_now_ns() - t0 - s->store->request_ns;
    return 0;
  }
  pmi2_shutdown(s);
  bs->impl = NULL;
  bs->ops = NULL;
  bs->job_key = NULL;
  bs->job_secret = NULL;
  return -1;
}

const struct gcoll_bootstrap_backend gcoll_bootstrap_pmi2_backend = {
    .name = "pmi2", .detect = pmi2_detect, .open = pmi2_open};
