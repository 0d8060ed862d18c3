/* The generic net transport's data path (net.h): published steps become
 * device sends, completed receives become published steps, and the
 * failures either side can see.
 *
 * Sender: every published step is checked (an executor only publishes
 * SIMPLE or LL steps that fit the slot), LL lines are decoded into the
 * step's own SIMPLE slot, which the executor leaves unused for an LL step,
 * and the step goes to the device; when the device says it left, the slot
 * is free (head). Receiver: a receive is posted for every free slot (head
 * + GCOLL_STEPS > step) into its SIMPLE slot; a completed step is
 * re-encoded into LL lines if it was LL and published exactly as a local
 * producer would (nbytes/proto, then tail with release). */
#define _GNU_SOURCE
#include <poll.h>
#include <string.h>

#include "gcoll.h"
#include "runtime/net.h"

/* ---- failures --------------------------------------------------------------- */

static void conn_stop(struct gcoll_net_conn *c, enum gcoll_net_state st) {
  c->state = st;
  c->entry.events = 0;
  c->entry.busy = 0;
}

static void conn_failed_blaming(struct gcoll_net_conn *c, int rank) {
  if (c->state == GCOLL_NET_FAILED) return;
  conn_stop(c, GCOLL_NET_FAILED);
  const struct gcoll_transport_config *cfg = &c->n->t->cfg;
  gcoll_transport_peer_failed(cfg->abort_word, cfg->failed_peer, rank);
}

void gcoll_net_conn_failed(struct gcoll_net_conn *c) { conn_failed_blaming(c, c->peer); }

/* A broken local invariant (the executor published a step no transport
 * could carry): not the peer's fault, so not a remote error. */
static void conn_internal_error(struct gcoll_net_conn *c) {
  conn_stop(c, GCOLL_NET_FAILED);
  int ok = 0;
  atomic_compare_exchange_strong(c->n->t->cfg.abort_word, &ok, (int)gcollInternalError);
}

/* The peer closed (EOF or reset): clean after a goodbye, a failure before. */
static void peer_closed(struct gcoll_net_conn *c) {
  if (c->goodbye_seen)
    conn_stop(c, GCOLL_NET_DONE);
  else
    gcoll_net_conn_failed(c);
}

void gcoll_net_peer_word(struct gcoll_net_conn *c, enum gcoll_tcp_word w, uint64_t blamed) {
  int nranks = c->n->t->cfg.nranks;
  switch (w) {
    case GCOLL_TCP_NOTHING:
      break;
    case GCOLL_TCP_CLOSED:
      peer_closed(c);
      break;
    case GCOLL_TCP_BLAME:
      /* A rank out of range is the peer's own fault. */
      conn_failed_blaming(c, blamed < (uint64_t)nranks ? (int)blamed : c->peer);
      break;
    case GCOLL_TCP_BROKEN:
      gcoll_net_conn_failed(c);
      break;
  }
}

/* After setup the peer only ever says goodbye or blame on the hello
 * connection (a second goodbye is a broken peer). */
static int watch_peer(struct gcoll_net_conn *c) {
  uint64_t step = 0;
  int had_goodbye = c->goodbye_seen;
  enum gcoll_tcp_word w =
      gcoll_tcp_watch_peer(c->fd, c->back, &c->back_got, &c->goodbye_seen, &step);
  if (!had_goodbye && c->goodbye_seen) c->goodbye_steps = step;
  gcoll_net_peer_word(c, w, step);
  return w != GCOLL_TCP_NOTHING;
}

/* ---- steps ------------------------------------------------------------------- */

int gcoll_net_step_valid(const struct gcoll_net_conn *c, uint32_t nbytes, uint32_t proto) {
  return (proto == GCOLL_PROTO_SIMPLE || proto == GCOLL_PROTO_LL) &&
         nbytes <= gcoll_fifo_payload(c->fifo, (enum gcoll_proto)proto);
}

/* LL lines of step s -> their data bytes in the step's SIMPLE slot; -1
 * when a line is not the step's (the executor did not write it). */
static int ll_decode(struct gcoll_fifo *f, uint64_t s, uint32_t nb) {
  _Atomic uint64_t *lines = gcoll_fifo_ll_slot(f, s);
  char *out = gcoll_fifo_simple_slot(f, s);
  for (size_t l = 0; 4 * l < nb; l++) {
    uint64_t v = atomic_load_explicit(&lines[l], memory_order_relaxed);
    if (!gcoll_ll_line_ready(v, s)) return -1;
    uint32_t word = (uint32_t)v;
    memcpy(out + 4 * l, &word, nb - 4 * l < 4 ? nb - 4 * l : 4);
  }
  return 0;
}

static void ll_encode(struct gcoll_fifo *f, uint64_t s, uint32_t nb) {
  const char *data = gcoll_fifo_simple_slot(f, s);
  _Atomic uint64_t *lines = gcoll_fifo_ll_slot(f, s);
  for (size_t l = 0; 4 * l < nb; l++) {
    uint32_t word = 0;
    memcpy(&word, data + 4 * l, nb - 4 * l < 4 ? nb - 4 * l : 4);
    atomic_store_explicit(&lines[l], gcoll_ll_line(word, s), memory_order_relaxed);
  }
}

void gcoll_net_send_done(struct gcoll_net_conn *c, uint64_t step) {
  if (step != c->done || c->done >= c->posted) {
    gcoll_net_conn_failed(c);
    return;
  }
  c->done = step + 1;
  gcoll_fifo_set_head(c->fifo, c->done);
}

int gcoll_net_recv_done(struct gcoll_net_conn *c, uint64_t step, uint32_t nbytes, uint32_t proto) {
  struct gcoll_fifo *f = c->fifo;
  if (step != c->done || c->done >= c->posted || !gcoll_net_step_valid(c, nbytes, proto)) {
    gcoll_net_conn_failed(c);
    return -1;
  }
  if (proto == GCOLL_PROTO_LL) ll_encode(f, step, nbytes);
  unsigned slot = gcoll_fifo_slot(step);
  f->nbytes[slot] = nbytes;
  f->proto[slot] = (uint8_t)proto;
  gcoll_fifo_set_tail(f, step + 1);
  c->done = step + 1;
  return 0;
}

/* ---- sender ------------------------------------------------------------------ */

/* Hands published steps to the device. Returns whether any went. */
static int post_sends(struct gcoll_net_conn *c) {
  const struct gcoll_net_dev *dev = c->n->dev;
  struct gcoll_fifo *f = c->fifo;
  uint64_t tail = atomic_load_explicit(&f->tail, memory_order_acquire);
  int moved = 0;
  while (c->posted < tail) {
    uint64_t s = c->posted;
    unsigned slot = gcoll_fifo_slot(s);
    uint32_t nb = f->nbytes[slot], proto = f->proto[slot];
    if (!gcoll_net_step_valid(c, nb, proto) ||
        (proto == GCOLL_PROTO_LL && ll_decode(f, s, nb) != 0)) {
      conn_internal_error(c);
      return 1;
    }
    int r = dev->isend(c, s, gcoll_fifo_simple_slot(f, s), nb, proto);
    if (r == 0) break;
    if (r < 0) {
      gcoll_net_conn_failed(c);
      return 1;
    }
    c->posted++;
    moved = 1;
  }
  return moved;
}

int gcoll_net_send_progress(struct gcoll_proxy_entry *e, short revents) {
  struct gcoll_net_conn *c = (struct gcoll_net_conn *)e;
  const struct gcoll_net_dev *dev = c->n->dev;
  int moved = 0;
  if (c->state == GCOLL_NET_OPEN && (revents & (POLLIN | POLLHUP | POLLERR)))
    moved |= watch_peer(c);
  if (c->state == GCOLL_NET_FAILED) return moved;
  moved |= dev->test(c, revents);
  if (c->state == GCOLL_NET_FAILED) return 1;
  uint64_t tail = atomic_load_explicit(&c->fifo->tail, memory_order_acquire);
  if (tail > c->posted && (c->goodbye_seen || c->state == GCOLL_NET_DONE)) {
    /* The receiver left cleanly, yet the executor has more for it. */
    gcoll_net_conn_failed(c);
    return 1;
  }
  if (post_sends(c)) {
    moved = 1;
    if (c->state == GCOLL_NET_FAILED) return 1;
    moved |= dev->test(c, revents);
  }
  if (c->state == GCOLL_NET_FAILED) return 1;
  e->busy = c->dev_busy;
  e->events = c->state == GCOLL_NET_OPEN ? (short)(POLLIN | (c->want_out ? POLLOUT : 0)) : 0;
  return moved;
}

/* ---- receiver ---------------------------------------------------------------- */

/* A receive for every free slot; after a goodbye, only for the steps the
 * sender said it sent. */
static int post_recvs(struct gcoll_net_conn *c) {
  struct gcoll_fifo *f = c->fifo;
  uint64_t head = atomic_load_explicit(&f->head, memory_order_acquire);
  int moved = 0;
  while (c->posted < head + GCOLL_STEPS && (!c->goodbye_seen || c->posted < c->goodbye_steps)) {
    int r = c->n->dev->irecv(c, c->posted, gcoll_fifo_simple_slot(f, c->posted), f->slot_bytes);
    if (r == 0) break;
    if (r < 0) {
      gcoll_net_conn_failed(c);
      return 1;
    }
    c->posted++;
    moved = 1;
  }
  return moved;
}

/* Takes the hello connection the listener matched to c; 0 while none. */
static int take_matched(struct gcoll_net_conn *c) {
  int moved = 0;
  pthread_mutex_lock(&c->n->lock);
  if (c->matched) {
    c->fd = c->matched_fd;
    c->matched_fd = -1;
    c->entry.fd = c->fd;
    c->entry.events = POLLIN;
    moved = 1;
  }
  pthread_mutex_unlock(&c->n->lock);
  return moved;
}

int gcoll_net_recv_progress(struct gcoll_proxy_entry *e, short revents) {
  struct gcoll_net_conn *c = (struct gcoll_net_conn *)e;
  const struct gcoll_net_dev *dev = c->n->dev;
  int moved = 0;
  if (c->fd < 0) {
    if (dev->setup_progress != NULL) {
      pthread_mutex_lock(&c->n->lock);
      moved = dev->setup_progress(c);
      pthread_mutex_unlock(&c->n->lock);
      e->busy = c->dev_busy;
    }
    if (!take_matched(c)) return moved;
    moved = 1;
    revents = 0;
  }
  if (c->state == GCOLL_NET_OPEN && !dev->data_on_channel &&
      (revents & (POLLIN | POLLHUP | POLLERR)))
    moved |= watch_peer(c);
  if (c->state == GCOLL_NET_FAILED) return moved;
  /* After a clean goodbye the sender's last steps may still be on their
   * way when their data travels apart from the hello connection: receives
   * go on until the steps its goodbye counted arrived. */
  int draining = c->state == GCOLL_NET_DONE && !dev->data_on_channel && c->done < c->goodbye_steps;
  /* Posting a receive is bookkeeping, not progress: counted as a move it
   * would keep the proxy spinning after every step the executor consumes
   * (a device that sends something for it, ib's credit, says so in test). */
  if (c->state == GCOLL_NET_OPEN || draining) post_recvs(c);
  if (c->state == GCOLL_NET_FAILED) return 1;
  moved |= dev->test(c, revents);
  if (c->state != GCOLL_NET_OPEN) {
    e->busy = c->state == GCOLL_NET_DONE && c->done < c->goodbye_steps;
    return moved;
  }
  /* A completed step may have made room for nothing new (head moves only
   * when the executor consumes), but a device that cannot receive without
   * a posted buffer needs its credit at once: that is what polling head
   * (busy) buys. */
  int unconsumed = c->posted < c->done + GCOLL_STEPS;
  e->busy = c->dev_busy || (dev->eager_credits ? unconsumed : c->wait_slot);
  e->events = dev->data_on_channel && c->wait_slot ? 0 : POLLIN;
  c->polled_in = (e->events & POLLIN) != 0;
  return moved;
}

/* ---- close ------------------------------------------------------------------- */

void gcoll_net_flush(struct gcoll_net_conn *c, uint64_t deadline_ms) {
  _Atomic int *abort_word = c->n->t->cfg.abort_word;
  uint64_t target = atomic_load_explicit(&c->fifo->tail, memory_order_acquire);
  short revents = 0;
  while (c->state == GCOLL_NET_OPEN && c->done < target && atomic_load(abort_word) == 0) {
    gcoll_net_send_progress(&c->entry, revents);
    if (c->state != GCOLL_NET_OPEN || c->done >= target) break;
    int ms = gcoll_tcp_remaining_ms(deadline_ms);
    if (ms == 0) break;
    /* A socket wakes us when it drains; other devices complete only when
     * polled, so they are polled every millisecond. */
    struct pollfd p = {.fd = c->fd, .events = (short)(POLLIN | (c->want_out ? POLLOUT : 0))};
    revents = poll(&p, 1, c->n->dev->data_on_channel ? ms : 1) > 0 ? p.revents : 0;
  }
}
