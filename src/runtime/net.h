/* The generic net transport and the net device table under it.
 *
 * As in NCCL (one net transport over an ncclNet_t), everything a network
 * transport does that is not moving bytes lives once, in net.c and
 * net_steps.c: local FIFOs and their proxy entries, the receiver's address
 * and the sender's authenticated hello (net_tcp.h) on a TCP connection that
 * stays open for the goodbye/blame protocol (transport.h) and whose EOF is
 * how a dead peer is noticed at once; matching hellos to receive
 * connections; turning published steps into sends and completed receives
 * into published steps (LL lines travel decoded: their data bytes only);
 * credits (a receive is posted only for a free slot), flush on close,
 * failures and whom they blame.
 *
 * A device only moves steps. Its table (struct gcoll_net_dev) is NCCL's
 * listen/connect/accept/regMr/isend/irecv/test/close, on FIFO steps:
 *   socket  data on the hello connection itself (net_socket.c);
 *   ib      RDMA writes with immediate over RC queue pairs (net_ib.c);
 *   plugin  an ncclNet plugin, loaded by NCCL's rules (net_plugin.c).
 * Adding a device is one file with one table and one transport entry
 * (GCOLL_NET_TRANSPORT below); no algorithm, no other device changes.
 *
 * Threads: listen and connect run in the caller's thread (connection
 * setup); accept, isend, irecv and test in the proxy thread (accept under
 * the transport's lock); conn_free in the closing thread after the
 * connection left the proxy. */
#ifndef GCOLL_RUNTIME_NET_H
#define GCOLL_RUNTIME_NET_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/net_tcp.h"
#include "runtime/proxy.h"
#include "runtime/transport.h"

/* The receiver's address: this header, then the device's part. */
#define GCOLL_NET_ADDR_HDR_BYTES 48
/* The sender's hello: this header, then the device's part. */
#define GCOLL_NET_HELLO_HDR_BYTES 32
#define GCOLL_NET_DEV_ADDR_MAX (GCOLL_CONN_ADDR_MAX - GCOLL_NET_ADDR_HDR_BYTES)
#define GCOLL_NET_DEV_HELLO_MAX (GCOLL_TCP_HELLO_MAX - GCOLL_NET_HELLO_HDR_BYTES)

enum gcoll_net_state { GCOLL_NET_OPEN = 0, GCOLL_NET_DONE, GCOLL_NET_FAILED };

struct gcoll_net;

/* One direction of one connection. The device's own state is dev_conn
 * (dev->conn_bytes, zeroed). */
struct gcoll_net_conn {
  struct gcoll_proxy_entry entry; /* first: the progress callback's handle */
  struct gcoll_net *n;
  int peer, is_send;
  uint32_t conn_id;
  struct gcoll_fifo *fifo;
  size_t fifo_map;
  int fd;                         /* the hello connection: proxy side (or closing thread) */
  enum gcoll_net_state state;
  int goodbye_seen;
  uint64_t goodbye_steps;         /* the steps a sender said it sent, in its goodbye */
  unsigned char back[GCOLL_TCP_HDR_BYTES]; /* the peer's last header, in pieces */
  size_t back_got;
  /* Receive side, under n->lock: the listener hands the connection over
   * (or says why it could not). */
  int matched_fd, matched, accepted, setup_failed;
  char setup_err[192];
  struct gcoll_net_conn *next_recv;
  /* Send side: steps [0, done) sent (their slots are free again),
   * [done, posted) handed to the device. Receive side: steps [0, done)
   * published, receives posted for [done, posted). */
  uint64_t posted, done;
  /* Set by the device: */
  int want_out;                   /* socket: the kernel buffer is full (poll POLLOUT) */
  int mid_step;                   /* a step is partly on the wire: no header fits now */
  int wait_slot;                  /* a step arrived for a slot that is not free yet */
  int dev_busy;                   /* requests in flight that only polling completes */
  int polled_in;                  /* set by net.c: the last round polled fd for POLLIN */
  void *dev_conn;
};

/* One network transport instance: struct gcoll_transport's impl. */
struct gcoll_net {
  struct gcoll_transport *t;
  const struct gcoll_net_dev *dev;
  void *dev_state;                /* the device's, from open */
  struct gcoll_proxy_entry listen_entry;
  int listen_fd, listen_registered;
  struct gcoll_tcp_endpoint self; /* where the hello listener is */
  /* Guards recv_conns and the hand-over fields; devices may take it to
   * order their own proxy entries against conn_free. */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct gcoll_net_conn *recv_conns;
  struct gcoll_tcp_hellos hellos; /* proxy thread only */
};

/* The device table. Functions return 0, or -1 with one line in err;
 * NULL entries do nothing. */
struct gcoll_net_dev {
  const char *name;               /* the transport's name: "net/socket", "net/ib", ... */
  const char *hello_purpose;      /* binds the hello's tag to this device */
  size_t addr_bytes;              /* device part of the address, <= GCOLL_NET_DEV_ADDR_MAX */
  size_t hello_bytes;             /* device part of the hello, <= GCOLL_NET_DEV_HELLO_MAX */
  size_t conn_bytes;              /* device state per connection */
  int data_on_channel;            /* steps travel on the hello connection (reads its EOF,
                                     goodbye and blame itself: gcoll_net_peer_word) */
  int eager_credits;              /* post a receive as soon as a slot is free: the peer
                                     cannot send without it (the proxy polls head) */
  /* Once per transport: the device (n->dev_state). */
  int (*open)(struct gcoll_net *n, char *err, size_t errlen);
  void (*close)(struct gcoll_net *n);
  /* Receiver, at setup: resources to receive into c->fifo (regMr), and
   * what the sender needs (addr_bytes at addr). */
  int (*listen)(struct gcoll_net_conn *c, unsigned char *addr, char *err, size_t errlen);
  /* Sender, at setup: connects to the receiver's part of the address and
   * writes the hello's part; may wait until deadline_ms. */
  int (*connect)(struct gcoll_net_conn *c, const unsigned char *addr, unsigned char *hello,
                 uint64_t deadline_ms, char *err, size_t errlen);
  /* Receiver, proxy thread, under n->lock: the sender's hello arrived.
   * 0 accepted, 1 not yet (the sender tries its hello again), -1 never. */
  int (*accept)(struct gcoll_net_conn *c, const unsigned char *hello, char *err, size_t errlen);
  /* Receiver, proxy thread, before the hello matched: progress of a
   * connection that needs polling to be accepted; returns whether
   * something moved. */
  int (*setup_progress)(struct gcoll_net_conn *c);
  /* Sender: step `step` of nbytes at data (LL steps decoded). 1 taken, 0 not
   * now (no credit, no request free), -1 the connection broke. */
  int (*isend)(struct gcoll_net_conn *c, uint64_t step, const void *data, uint32_t nbytes,
               uint32_t proto);
  /* Receiver: the slot of `step` is free; its payload may land at buf (up
   * to max bytes). 1 taken, 0 not now, -1 the connection broke. */
  int (*irecv)(struct gcoll_net_conn *c, uint64_t step, void *buf, size_t max);
  /* Proxy round: completes what it can, reporting through
   * gcoll_net_send_done / gcoll_net_recv_done and the failure calls below.
   * revents: this round's poll result for c->fd. Returns whether
   * something moved. */
  int (*test)(struct gcoll_net_conn *c, short revents);
  /* Frees the device's part of a connection (deregMr, close comms). */
  void (*conn_free)(struct gcoll_net_conn *c);
};

/* The generic transport's operations; GCOLL_NET_TRANSPORT puts them in a
 * device's transport entry. */
int gcoll_net_init(struct gcoll_transport **out, const struct gcoll_transport_ops *ops,
                   const struct gcoll_net_dev *dev, const struct gcoll_transport_config *cfg,
                   char *err, size_t errlen);
int gcoll_net_recv_setup(struct gcoll_transport *t, int peer, uint32_t conn_id,
                         struct gcoll_conn *gc, void *addr, size_t *addrlen, char *err,
                         size_t errlen);
int gcoll_net_send_connect(struct gcoll_transport *t, int peer, uint32_t conn_id,
                           const void *addr, size_t addrlen, struct gcoll_conn *gc,
                           uint64_t deadline_ms, char *err, size_t errlen);
int gcoll_net_recv_complete(struct gcoll_transport *t, struct gcoll_conn *gc,
                            uint64_t deadline_ms, char *err, size_t errlen);
void gcoll_net_conn_close(struct gcoll_transport *t, struct gcoll_conn *gc);
void gcoll_net_fini(struct gcoll_transport *t);

/* The transport entry of a device: `var` is a struct gcoll_transport_ops
 * named name_ whose instances run the generic net transport over dev. */
#define GCOLL_NET_TRANSPORT(var, name_, dev)                                                  \
  static int var##_init(struct gcoll_transport **out, const struct gcoll_transport_config *cfg, \
                        char *err, size_t errlen) {                                          \
    return gcoll_net_init(out, &var, dev, cfg, err, errlen);                                  \
  }                                                                                           \
  const struct gcoll_transport_ops var = {                                                    \
      .name = name_,                                                                          \
      .init = var##_init,                                                                     \
      .recv_setup = gcoll_net_recv_setup,                                                     \
      .send_connect = gcoll_net_send_connect,                                                 \
      .recv_complete = gcoll_net_recv_complete,                                               \
      .conn_close = gcoll_net_conn_close,                                                     \
      .fini = gcoll_net_fini,                                                                 \
  }

/* ---- between net.c and net_steps.c ---------------------------------------- */

/* The proxy callbacks of a send and a receive connection. */
int gcoll_net_send_progress(struct gcoll_proxy_entry *e, short revents);
int gcoll_net_recv_progress(struct gcoll_proxy_entry *e, short revents);
/* Sends what the executor published, until deadline_ms (close). */
void gcoll_net_flush(struct gcoll_net_conn *c, uint64_t deadline_ms);

/* ---- for devices: what they report from test ----------------------------- */

/* Sender: step `step` left (its slot may be reused); steps complete in order. */
void gcoll_net_send_done(struct gcoll_net_conn *c, uint64_t step);
/* Receiver: step `step` arrived whole in the buffer of its irecv, nbytes of
 * protocol proto; published here exactly as a local producer would. -1
 * (the connection failed) when it is not the next step or not a step an
 * executor could have published. */
int gcoll_net_recv_done(struct gcoll_net_conn *c, uint64_t step, uint32_t nbytes, uint32_t proto);
/* Whether a step of nbytes under proto fits this connection's FIFO. */
int gcoll_net_step_valid(const struct gcoll_net_conn *c, uint32_t nbytes, uint32_t proto);
/* The peer's goodbye, blame or EOF on the hello connection, for a device
 * that reads it itself (data_on_channel). */
void gcoll_net_peer_word(struct gcoll_net_conn *c, enum gcoll_tcp_word w, uint64_t blamed);
/* The connection broke (protocol violation, failed request): the peer is
 * blamed. */
void gcoll_net_conn_failed(struct gcoll_net_conn *c);

#endif
