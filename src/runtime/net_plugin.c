/* net/plugin: an NCCL net plugin (net_plugin_load.h) as a device of the
 * generic net transport (net.h), on host memory.
 *
 * The plugin's own listen/connect/accept make its connection: the
 * receiver's listen handle travels in its address, the sender connects
 * (the ABI's connect never blocks: it is called again until it returns a
 * comm, up to the setup deadline), and the receiver's proxy calls accept
 * until it returns one; the generic hello then still authenticates the
 * sender and is the liveness and goodbye/blame channel. The FIFO and the
 * step headers are registered (regMr, NCCL_PTR_HOST) on each comm.
 *
 * A step is two messages in order: a 16-byte header {step, nbytes, proto}
 * (net_tcp.h's layout) and the payload, straight from and into the
 * step's SIMPLE slot. The ABI gives a receiver only the size, and the
 * protocol must travel too; receives are matched in the order they are
 * posted, so both receives of a step are posted together. Each comm keeps
 * at most GCOLL_NCCL_NET_MAX_REQUESTS requests in flight, the least any
 * ABI version promises. A plugin that returns no request (busy) is asked
 * again in the next round; a failed call ends the connection, cleanly if
 * the peer said goodbye on the hello connection (plugin_broken). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/net.h"
#include "runtime/net_plugin.h"
#include "runtime/net_plugin_load.h"

#define MAX_STEPS_IN_FLIGHT (GCOLL_NCCL_NET_MAX_REQUESTS / 2)
_Static_assert(GCOLL_NCCL_NET_HANDLE_MAXSIZE <= GCOLL_NET_DEV_ADDR_MAX,
               "a handle fits the address");

struct plugin_state {
  const struct gcoll_ncclnet *p;
  int dev;
};

struct plugin_conn {
  void *listen_comm, *comm;       /* comm: the send or receive comm */
  void *fifo_mh, *hdr_mh;
  unsigned char hdr[GCOLL_STEPS][GCOLL_TCP_HDR_BYTES];
  void *req[GCOLL_STEPS][2];      /* header, payload */
  int posted_parts[GCOLL_STEPS];  /* of the step in this slot: 0, 1 or 2 */
  int done_parts[GCOLL_STEPS];
  size_t got[GCOLL_STEPS][2];
  uint64_t broken_ms;             /* when a request failed; 0: none did */
};

static const struct gcoll_ncclnet *net_of(const struct gcoll_net_conn *c) {
  return ((const struct plugin_state *)c->n->dev_state)->p;
}
static struct plugin_conn *pc_of(struct gcoll_net_conn *c) { return c->dev_conn; }

/* ---- the device ------------------------------------------------------------- */

static int plugin_open(struct gcoll_net *n, char *err, size_t errlen) {
  const struct gcoll_ncclnet *p;
  int named;
  char why[512];
  if (gcoll_ncclnet_get(&p, &named, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "%s", why);
    return -1;
  }
  struct gcoll_ncclnet_props props;
  if (gcoll_ncclnet_props(p, 0, &props) != 0) {
    snprintf(err, errlen, "NCCL net plugin %s: getProperties of device 0 failed", p->name);
    return -1;
  }
  if (!(props.ptr_support & GCOLL_NCCL_PTR_HOST)) {
    snprintf(err, errlen,
             "NCCL net plugin %s: device 0 (%s) cannot use host memory (ptrSupport %#x)", p->name,
             props.name, props.ptr_support);
    return -1;
  }
  struct plugin_state *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  s->p = p;
  s->dev = 0;
  n->dev_state = s;
  return 0;
}

static void plugin_close(struct gcoll_net *n) {
  free(n->dev_state);
  n->dev_state = NULL;
}

int gcoll_net_plugin_describe(const struct gcoll_transport *t, char *buf, size_t len) {
  const struct gcoll_net *n = t->impl;
  const struct plugin_state *s = n->dev_state;
  struct gcoll_ncclnet_props props;
  if (gcoll_ncclnet_props(s->p, s->dev, &props) != 0) props.name[0] = '\0';
  return snprintf(buf, len, "NCCL net plugin %s (%s, ncclNet v%d), device %d of %d (%s, %d Mbps)",
                  s->p->name, s->p->lib, s->p->version, s->dev, s->p->ndev, props.name,
                  props.speed);
}

/* ---- connections ---------------------------------------------------------------- */

/* Registers the FIFO and the headers on the comm just made. */
static int register_memory(struct gcoll_net_conn *c, char *err, size_t errlen) {
  struct plugin_conn *pc = pc_of(c);
  const struct gcoll_ncclnet *p = net_of(c);
  if (gcoll_ncclnet_reg_mr(p, pc->comm, c->fifo, c->fifo_map, &pc->fifo_mh) != 0 ||
      gcoll_ncclnet_reg_mr(p, pc->comm, pc->hdr, sizeof(pc->hdr), &pc->hdr_mh) != 0) {
    snprintf(err, errlen, "NCCL net plugin %s: regMr of %zu host bytes failed", p->name,
             c->fifo_map);
    return -1;
  }
  return 0;
}

/* Plugins cast the handle to their own structures: it must be aligned as
 * NCCL's own buffers are, which an address's bytes are not. */
struct handle_buf {
  _Alignas(16) unsigned char bytes[GCOLL_NCCL_NET_HANDLE_MAXSIZE];
};

static int plugin_listen(struct gcoll_net_conn *c, unsigned char *addr, char *err, size_t errlen) {
  const struct plugin_state *s = c->n->dev_state;
  struct handle_buf h = {{0}};
  if (gcoll_ncclnet_listen(s->p, s->dev, h.bytes, &pc_of(c)->listen_comm) != 0) {
    snprintf(err, errlen, "NCCL net plugin %s: listen on device %d failed", s->p->name, s->dev);
    return -1;
  }
  memcpy(addr, h.bytes, sizeof(h.bytes));
  return 0;
}

static int plugin_connect(struct gcoll_net_conn *c, const unsigned char *addr,
                          unsigned char *hello, uint64_t deadline_ms, char *err, size_t errlen) {
  (void)hello;
  const struct plugin_state *s = c->n->dev_state;
  struct plugin_conn *pc = pc_of(c);
  /* The same buffer every call: plugins keep connect's progress in it. */
  struct handle_buf handle;
  memcpy(handle.bytes, addr, sizeof(handle.bytes));
  for (;;) {
    if (gcoll_ncclnet_connect(s->p, s->dev, handle.bytes, &pc->comm) != 0) {
      snprintf(err, errlen, "NCCL net plugin %s: connect to rank %d failed", s->p->name, c->peer);
      return -1;
    }
    if (pc->comm != NULL) break;
    if (gcoll_transport_now_ms() >= deadline_ms) {
      snprintf(err, errlen, "NCCL net plugin %s: no connection to rank %d before the deadline",
               s->p->name, c->peer);
      return -1;
    }
    /* The receiver's proxy accepts meanwhile. */
    nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
  }
  return register_memory(c, err, errlen);
}

/* Accepts by polling, from the receiver's proxy, until a comm comes. */
static int try_accept(struct gcoll_net_conn *c, char *err, size_t errlen) {
  struct plugin_conn *pc = pc_of(c);
  const struct gcoll_ncclnet *p = net_of(c);
  if (pc->comm != NULL) return 0;
  if (gcoll_ncclnet_accept(p, pc->listen_comm, &pc->comm) != 0) {
    snprintf(err, errlen, "NCCL net plugin %s: accept failed", p->name);
    return -1;
  }
  if (pc->comm == NULL) return 1;
  return register_memory(c, err, errlen);
}

static int plugin_setup_progress(struct gcoll_net_conn *c) {
  char err[192];
  int r = try_accept(c, err, sizeof(err));
  if (r < 0 && !c->setup_failed) {
    snprintf(c->setup_err, sizeof(c->setup_err), "%s", err);
    c->setup_failed = 1;
    pthread_cond_broadcast(&c->n->cond);
  }
  c->dev_busy = r == 1;
  return r == 0;
}

static int plugin_accept(struct gcoll_net_conn *c, const unsigned char *hello, char *err,
                         size_t errlen) {
  (void)hello;
  return try_accept(c, err, errlen);
}

static void plugin_conn_free(struct gcoll_net_conn *c) {
  struct plugin_conn *pc = pc_of(c);
  const struct gcoll_ncclnet *p = net_of(c);
  if (pc->comm != NULL) {
    if (pc->fifo_mh != NULL) gcoll_ncclnet_dereg_mr(p, pc->comm, pc->fifo_mh);
    if (pc->hdr_mh != NULL) gcoll_ncclnet_dereg_mr(p, pc->comm, pc->hdr_mh);
    if (c->is_send)
      gcoll_ncclnet_close_send(p, pc->comm);
    else
      gcoll_ncclnet_close_recv(p, pc->comm);
  }
  if (pc->listen_comm != NULL) gcoll_ncclnet_close_listen(p, pc->listen_comm);
}

/* ---- steps ------------------------------------------------------------------ */

/* A request failed: the plugin's connection ended. The hello connection
 * says whether the peer closed cleanly (a goodbye first) or died (EOF);
 * the two connections are not ordered, so the plugin's end may be seen
 * first, and the hello connection gets BROKEN_GRACE_MS to tell. */
#define BROKEN_GRACE_MS 1000
static int plugin_broken(struct gcoll_net_conn *c) {
  struct plugin_conn *pc = pc_of(c);
  uint64_t now = gcoll_transport_now_ms();
  if (c->goodbye_seen) {
    gcoll_net_peer_word(c, GCOLL_TCP_CLOSED, 0);
    return 1;
  }
  if (pc->broken_ms == 0) pc->broken_ms = now;
  if (now - pc->broken_ms >= BROKEN_GRACE_MS) {
    gcoll_net_conn_failed(c);
    return 1;
  }
  c->dev_busy = 1;
  return 0;
}

/* Posts what is left of step `step`'s two messages: 1 both posted, 0 the
 * plugin is busy or its connection ended (plugin_broken decides). */
static int post_parts(struct gcoll_net_conn *c, uint64_t step, void *data, size_t size) {
  struct plugin_conn *pc = pc_of(c);
  const struct gcoll_ncclnet *p = net_of(c);
  unsigned slot = gcoll_fifo_slot(step);
  if (step >= c->done + MAX_STEPS_IN_FLIGHT) return 0;
  while (pc->posted_parts[slot] < 2) {
    int part = pc->posted_parts[slot];
    void *buf = part == 0 ? (void *)pc->hdr[slot] : data;
    size_t len = part == 0 ? GCOLL_TCP_HDR_BYTES : size;
    void *mh = part == 0 ? pc->hdr_mh : pc->fifo_mh;
    void **req = &pc->req[slot][part];
    *req = NULL;
    gcoll_ncclres r = c->is_send ? gcoll_ncclnet_isend(p, pc->comm, buf, len, mh, req)
                                 : gcoll_ncclnet_irecv(p, pc->comm, buf, len, mh, req);
    if (r != 0) {
      plugin_broken(c);
      return 0;
    }
    if (*req == NULL) {
      c->dev_busy = 1;
      return 0;
    }
    pc->posted_parts[slot]++;
  }
  pc->done_parts[slot] = 0;
  return 1;
}

static int plugin_isend(struct gcoll_net_conn *c, uint64_t step, const void *data,
                        uint32_t nbytes, uint32_t proto) {
  struct plugin_conn *pc = pc_of(c);
  unsigned slot = gcoll_fifo_slot(step);
  if (pc->posted_parts[slot] == 0) gcoll_tcp_hdr_encode(pc->hdr[slot], step, nbytes, proto);
  /* isend does not write through the pointer. */
  return post_parts(c, step, (void *)data, nbytes);
}

static int plugin_irecv(struct gcoll_net_conn *c, uint64_t step, void *buf, size_t max) {
  return post_parts(c, step, buf, max);
}

/* Completes step `step` when both its messages did; 1 when it did, 0 not
 * yet, -1 on a malformed step, -2 on a failed request. */
static int complete(struct gcoll_net_conn *c, uint64_t step) {
  struct plugin_conn *pc = pc_of(c);
  const struct gcoll_ncclnet *p = net_of(c);
  unsigned slot = gcoll_fifo_slot(step);
  while (pc->done_parts[slot] < 2) {
    int part = pc->done_parts[slot], done = 0;
    if (gcoll_ncclnet_test(p, pc->req[slot][part], &done, &pc->got[slot][part]) != 0) return -2;
    if (!done) return 0;
    pc->done_parts[slot]++;
  }
  pc->posted_parts[slot] = 0;
  if (c->is_send) {
    gcoll_net_send_done(c, step);
    return 1;
  }
  uint64_t hstep;
  uint32_t nb, proto;
  gcoll_tcp_hdr_decode(pc->hdr[slot], &hstep, &nb, &proto);
  if (pc->got[slot][0] != GCOLL_TCP_HDR_BYTES || hstep != step || pc->got[slot][1] != nb)
    return -1;
  return gcoll_net_recv_done(c, step, nb, proto) == 0 ? 1 : -1;
}

static int plugin_test(struct gcoll_net_conn *c, short revents) {
  (void)revents;
  struct plugin_conn *pc = pc_of(c);
  int moved = 0;
  if (pc->broken_ms != 0) return c->state == GCOLL_NET_OPEN ? plugin_broken(c) : 0;
  while (c->state != GCOLL_NET_FAILED && c->done < c->posted) {
    int r = complete(c, c->done);
    if (r == -1) {
      gcoll_net_conn_failed(c);
      return 1;
    }
    if (r == -2) return plugin_broken(c) | moved;
    if (r == 0) break;
    moved = 1;
  }
  /* Requests complete only when tested: keep the proxy polling while any
   * is in flight, or a step is half posted. */
  c->dev_busy = c->done < c->posted || pc->posted_parts[gcoll_fifo_slot(c->posted)] != 0;
  return moved;
}

static const struct gcoll_net_dev plugin_dev = {
    .name = "net/plugin",
    .hello_purpose = "gcoll net/plugin hello v1",
    .addr_bytes = GCOLL_NCCL_NET_HANDLE_MAXSIZE,
    .conn_bytes = sizeof(struct plugin_conn),
    .eager_credits = 1,
    .open = plugin_open,
    .close = plugin_close,
    .listen = plugin_listen,
    .connect = plugin_connect,
    .accept = plugin_accept,
    .setup_progress = plugin_setup_progress,
    .isend = plugin_isend,
    .irecv = plugin_irecv,
    .test = plugin_test,
    .conn_free = plugin_conn_free,
};

GCOLL_NET_TRANSPORT(gcoll_transport_plugin_ops, "net/plugin", &plugin_dev);

const char *gcoll_net_plugin_name(int *named, char *why, size_t whylen) {
  const struct gcoll_ncclnet *p;
  return gcoll_ncclnet_get(&p, named, why, whylen) == 0 ? p->name : NULL;
}
