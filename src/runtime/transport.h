/* Transports: how one direction of one connection between two ranks gets a
 * FIFO (src/kernels/fifo.h) that the executor can write or read.
 *
 * A transport is a table of operations (like a libfabric provider or a UCX
 * uct), so adding one (net/ib) touches no algorithm and no caller: the
 * executor only ever sees `struct gcoll_fifo *`, local memory it writes
 * (send side) or reads (receive side). Where the FIFO's other end lives is
 * the transport's business:
 *   shm         the receiver's FIFO is a POSIX shm segment the sender maps;
 *               both ends touch the same bytes, no proxy work per step.
 *   net/...     each end has a local FIFO; the process's proxy thread
 *               (proxy.h) turns published steps into network sends on the
 *               send side and fills free slots from the network on the
 *               receive side: one generic net transport (net.h) over a
 *               device (socket, ib, an NCCL net plugin), one table entry
 *               per device.
 *   p2p         as shm, but the receiver's FIFO is in its GPU's memory,
 *               reached by the sender's kernel through CUDA IPC; only the
 *               CUDA executor can use it (the host cannot read GPU memory).
 *
 * Connecting, driven by the communicator:
 *   1. every rank: init once per transport, then recv_setup per receive
 *      edge; the opaque address goes to the sender through the bootstrap.
 *   2. every rank: send_connect per send edge with the receiver's address.
 *   3. every rank: recv_complete per receive edge (TCP: the sender's
 *      connection arrived and introduced itself; shm: the sender mapped).
 * Teardown: conn_close per connection (any order relative to
 * gcoll_proxy_destroy), then fini.
 *
 * Failures of a peer after connecting (death, closed connection, protocol
 * violation) are never returned: the transport stores the peer's rank in
 * *failed_peer (first failure wins) and gcollRemoteError in *abort_word,
 * which every executor wait polls. A peer that closes cleanly (its
 * communicator was destroyed) says goodbye first and is not a failure.
 *
 * All functions return 0, or -1 with one line in err. */
#ifndef GCOLL_RUNTIME_TRANSPORT_H
#define GCOLL_RUNTIME_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/fifo.h"
#include "runtime/auth.h"

#define GCOLL_CONN_ADDR_MAX 192 /* net/plugin: 48 + a 128-byte ncclNet handle */

struct gcoll_transport;
struct gcoll_proxy;

struct gcoll_transport_config {
  int rank;
  int nranks;
  const char *job_key;       /* the job's secret key: hellos are authenticated with
                                a secret derived from it (auth.h) */
  size_t slot_bytes;         /* SIMPLE slot size of every FIFO */
  _Atomic int *abort_word;   /* set to gcollRemoteError when a peer dies */
  _Atomic int *failed_peer;  /* rank of the first dead peer, -1 */
  uint64_t timeout_ms;       /* bounds waits that have no caller deadline */
  struct gcoll_proxy *proxy; /* required by net/socket; shm uses it for
                                liveness checks when present */
  int gpu;                   /* p2p: the GPU ordinal of this rank's FIFOs */
};

struct gcoll_conn {
  struct gcoll_fifo *fifo;   /* what the executor writes (send) or reads */
  int peer;
  int is_send;
  const struct gcoll_transport_ops *ops;
  void *impl;                /* transport state of this connection */
};

struct gcoll_transport_ops {
  const char *name; /* "shm", "net/socket", "net/ib", "net/plugin", "p2p" */
  int (*init)(struct gcoll_transport **t, const struct gcoll_transport_config *cfg, char *err,
              size_t errlen);
  /* Receiver: creates the FIFO this rank reads from `peer` and writes an
   * opaque address (*addrlen in: buffer size, out: bytes used, at most
   * GCOLL_CONN_ADDR_MAX) for the sender. conn_id is unique per (peer,
   * direction, channel, purpose) and chosen by the caller. On failure c
   * needs no conn_close. */
  int (*recv_setup)(struct gcoll_transport *t, int peer, uint32_t conn_id, struct gcoll_conn *c,
                    void *addr, size_t *addrlen, char *err, size_t errlen);
  /* Sender: attaches to the receiver's address; c->fifo is then the FIFO to
   * write. Deadlines are CLOCK_MONOTONIC milliseconds. */
  int (*send_connect)(struct gcoll_transport *t, int peer, uint32_t conn_id, const void *addr,
                      size_t addrlen, struct gcoll_conn *c, uint64_t deadline_ms, char *err,
                      size_t errlen);
  /* Receiver: waits until the sender attached (bounded by deadline_ms). */
  int (*recv_complete)(struct gcoll_transport *t, struct gcoll_conn *c, uint64_t deadline_ms,
                       char *err, size_t errlen);
  /* Sends what the executor published but the peer has not received yet
   * (bounded), says goodbye, frees. With *abort_word set it neither flushes
   * nor says goodbye but tells the peer whom it blames (*failed_peer, or
   * itself): the peer then fails at once with gcollRemoteError naming the
   * same rank, instead of waiting for its deadline. */
  void (*conn_close)(struct gcoll_transport *t, struct gcoll_conn *c);
  void (*fini)(struct gcoll_transport *t);
};

extern const struct gcoll_transport_ops gcoll_transport_shm_ops, gcoll_transport_socket_ops;
/* Usable only in builds with the CUDA toolkit (HAVE_CUDA): transport_shm.c. */
extern const struct gcoll_transport_ops gcoll_transport_p2p_ops;
/* Only in builds with libibverbs (HAVE_VERBS): net_ib.c. */
extern const struct gcoll_transport_ops gcoll_transport_ib_ops;
/* An NCCL net plugin (net_plugin.c), in every build; its init fails in
 * one line when no plugin can be used. */
extern const struct gcoll_transport_ops gcoll_transport_plugin_ops;

/* "shm", "net/socket" (and the alias "socket"), "net/plugin" (alias
 * "plugin"), in verbs builds "net/ib" (alias "ib"), in CUDA builds "p2p";
 * NULL for anything else. */
const struct gcoll_transport_ops *gcoll_transport_by_name(const char *name);

/* GCOLL_TRANSPORT: *ops = the forced transport, or NULL when the variable
 * is unset or empty; -1 with one line in err for an unknown name. */
int gcoll_transport_from_env(const struct gcoll_transport_ops **ops, char *err, size_t errlen);

/* ---- shared by the transports -------------------------------------------- */

#define GCOLL_JOB_KEY_MAX 128

/* What every transport instance starts with; each transport file keeps its
 * own state behind impl. */
struct gcoll_transport {
  const struct gcoll_transport_ops *ops;
  struct gcoll_transport_config cfg; /* cfg.job_key points at job_key */
  char job_key[GCOLL_JOB_KEY_MAX];
  /* Secret of this job's connection hellos (auth.h), from the job key. */
  struct gcoll_auth_secret conn_secret;
  /* Identifies the job in addresses, which travel through the (already
   * authenticated) bootstrap, so that an address of another job is named
   * as such; an HMAC of the key, so it reveals nothing about it. */
  uint64_t job_hash;
  int pid;
  uint64_t start_ticks;              /* this process's /proc starttime */
  char listen_addr[64];              /* "ip:port" of a network transport's
                                        listener, for logs; "" for shm */
  void *impl;
};

/* Validates cfg and fills the common part of t (takes a proxy reference
 * when cfg->proxy is set). */
int gcoll_transport_base_init(struct gcoll_transport *t, const struct gcoll_transport_ops *ops,
                              const struct gcoll_transport_config *cfg, char *err, size_t errlen);
/* Drops the proxy reference taken by gcoll_transport_base_init. */
void gcoll_transport_base_fini(struct gcoll_transport *t);

/* Shared-memory names carry nothing about the job (an attacker who lists
 * /dev/shm learns only that a process has segments): "/gcoll-<pid of the
 * creating process>-<128 random bits in hex>". The receiver publishes the
 * name through the authenticated bootstrap. */
#define GCOLL_SHM_NAME_MAX 64
/* A fresh name for a segment this process creates. 0, or -1 with one line
 * in err. */
int gcoll_shm_random_name(char name[GCOLL_SHM_NAME_MAX], char *err, size_t errlen);
/* Whether name has the shape gcoll_shm_random_name gives. */
int gcoll_shm_name_valid(const char *name);

/* Removes every gcoll shm name that this user owns and whose creating
 * process is gone (normally none: a name lives only until the sender
 * mapped it). For a launcher after a job that crashed during connection
 * setup; the names of live processes, of this job or another, stay.
 * Returns the number removed. */
int gcoll_shm_cleanup(void);

/* Records a dead or misbehaving peer: first failure wins the failed_peer
 * slot; the abort word gets gcollRemoteError unless already set. */
void gcoll_transport_peer_failed(_Atomic int *abort_word, _Atomic int *failed_peer, int peer);

/* The rank a communicator in error blames when it closes its connections:
 * the first dead peer it saw, else itself (an abort). */
int gcoll_transport_blame(const struct gcoll_transport_config *cfg);

/* CLOCK_MONOTONIC milliseconds, the clock of every deadline here. */
uint64_t gcoll_transport_now_ms(void);

/* Whether pid is a live process (not gone, not a zombie) that started at
 * start_ticks (its /proc starttime; 0 = unknown, not compared). Cheap
 * after the first call for a (pid, start_ticks): peer_process.c. */
int gcoll_process_alive(int pid, uint64_t start_ticks);
/* /proc starttime of pid, 0 when unknown. */
uint64_t gcoll_process_start_ticks(int pid);

/* Memory for a FIFO that lives in this process only: mapped, touched once
 * (MAP_POPULATE, huge pages when available), gcoll_fifo_init'ed. */
struct gcoll_fifo *gcoll_local_fifo_alloc(size_t slot_bytes, size_t *mapped_bytes, char *err,
                                          size_t errlen);
void gcoll_local_fifo_free(struct gcoll_fifo *f, size_t mapped_bytes);

#endif
