/* The host executor (see host_exec.h). */
#include "kernels/host_exec.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errf.h"
#include "common/service_thread.h"
#include "kernels/algo_ring.h"
#include "kernels/algo_tree.h"
#include "kernels/coll_args.h"
#include "kernels/exec.h"
#include "kernels/host_direct.h"
#include "kernels/host_oneshot.h"
#include "kernels/reduce.h"

struct channel {
  struct gcoll_host_exec *exec;
  int index;
  struct gcoll_host_channel conf;
  int *ranks;                       /* owned copy of the ring order */
  struct gcoll_prims ring, up, down;
  struct gcoll_prims *failed;       /* prims of the last failure */
  const char *phase;
  struct gcoll_wait wait;
  void *scratch[GCOLL_PRIMS_SCRATCH];
  size_t scratch_bytes;
  void *prescale;                   /* a step of a pre-mul-sum's scaled input; its pages
                                       are touched only by the first pre-mul-sum */
  size_t lo, n;                     /* this collective's element range */
  gcollResult_t result;
  pthread_t thread;
  int started;
};

struct gcoll_host_exec {
  struct gcoll_exec_frame frame;    /* first: gcoll_exec_frame_alloc */
  _Atomic int *abort_word;
  uint32_t spin_rounds;
  struct channel *ch;
  void *scratch_mem;
  uint64_t gather_bytes[GCOLL_NPROTOS];
  void *gather;                     /* nranks x the largest gather_bytes */
  struct gcoll_exec_poll poll;
  struct gcoll_host_direct direct;  /* single-copy allgather and broadcast */
  struct gcoll_oneshot oneshot;     /* the gather form's board, when every rank has it;
                                       with node.on, this node's (NULL on a node of one) */
  struct gcoll_exec_node_form node; /* members: owned copy */
  void *node_scratch;               /* the other node's partial, node.max_bytes */

  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  uint64_t generation;              /* bumped per collective */
  int pending;                      /* workers still running it */
  int stop;

  struct gcoll_host_coll job;
  int job_channels;
  enum job_form {
    FORM_CHANNELS = 0,              /* ring or tree over the channels */
    FORM_GATHER,                    /* allreduce: the gather form around the ring */
    FORM_BOARD,                     /* through the one-shot board (host_oneshot.h) */
    FORM_NODES,                     /* allreduce: the node form (host_exec.h) */
  } job_form;
  _Atomic int local_abort;          /* first failure, stops sibling channels */
  _Atomic int first_failed;         /* its channel, -1 when none */
};
_Static_assert(offsetof(struct gcoll_host_exec, frame) == 0, "gcoll_exec_frame_alloc");

/* ---- creation ---------------------------------------------------------- */

static size_t channel_slot_bytes(const struct gcoll_host_channel *c, int nranks,
                                 char *err, size_t errlen, int idx) {
  struct gcoll_fifo *f[2 + 2 + 2 * GCOLL_PRIMS_MAX_PEERS];
  int n = 0;
  if (nranks > 1) {
    f[n++] = c->ring.recv_prev;
    f[n++] = c->ring.send_next;
  }
  if (c->has_tree) {
    if (c->tree.parent >= 0) {
      f[n++] = c->tree.recv_parent;
      f[n++] = c->tree.send_parent;
    }
    for (int i = 0; i < c->tree.nchildren; i++) {
      f[n++] = c->tree.recv_child[i];
      f[n++] = c->tree.send_child[i];
    }
  }
  size_t slot = 0;
  for (int i = 0; i < n; i++) {
    if (f[i] == NULL) {
      gcoll_errf(err, errlen, "channel %d: missing FIFO", idx);
      return 0;
    }
    if (!gcoll_fifo_slot_bytes_valid(f[i]->slot_bytes) ||
        (slot != 0 && f[i]->slot_bytes != slot)) {
      gcoll_errf(err, errlen, "channel %d: FIFO slot sizes differ or are invalid", idx);
      return 0;
    }
    slot = f[i]->slot_bytes;
  }
  return slot == 0 ? GCOLL_FIFO_MIN_SLOT : slot;
}

static void *worker_main(void *arg);

static void stop_workers(struct gcoll_host_exec *e) {
  pthread_mutex_lock(&e->mu);
  e->stop = 1;
  pthread_cond_broadcast(&e->work_cv);
  pthread_mutex_unlock(&e->mu);
  for (int c = 1; c < e->frame.nchannels; c++)
    if (e->ch[c].started) pthread_join(e->ch[c].thread, NULL);
}

void gcoll_host_exec_destroy(struct gcoll_host_exec *e) {
  if (e == NULL) return;
  stop_workers(e);
  pthread_cond_destroy(&e->work_cv);
  pthread_cond_destroy(&e->done_cv);
  pthread_mutex_destroy(&e->mu);
  for (int c = 0; c < e->frame.nchannels; c++) {
    free(e->ch[c].ranks);
    free(e->ch[c].prescale);
  }
  free(e->ch);
  free(e->scratch_mem);
  free(e->gather);
  free((void *)e->node.members);
  free(e->node_scratch);
  gcoll_host_direct_free(&e->direct);
  gcoll_oneshot_unbind(&e->oneshot);
  free(e);
}

static int alloc_channels(struct gcoll_host_exec *e, const struct gcoll_exec_config *cfg,
                          char *err, size_t errlen) {
  size_t total = 0;
  for (int c = 0; c < e->frame.nchannels; c++) {
    struct channel *ch = &e->ch[c];
    size_t slot = channel_slot_bytes(&cfg->channels[c], cfg->nranks, err, errlen, c);
    if (slot == 0) return -1;
    ch->exec = e;
    ch->index = c;
    ch->conf = cfg->channels[c];
    ch->ranks = malloc((size_t)cfg->nranks * sizeof(int));
    if (posix_memalign(&ch->prescale, 64, slot) != 0) ch->prescale = NULL;
    if (ch->ranks == NULL || ch->prescale == NULL) {
      gcoll_errf(err, errlen, "out of memory");
      return -1;
    }
    memcpy(ch->ranks, cfg->channels[c].ring.ranks, (size_t)cfg->nranks * sizeof(int));
    ch->conf.ring.ranks = ch->ranks;
    /* LL payload, rounded to whole 64-byte lines. */
    ch->scratch_bytes = (slot / 4 + 63) / 64 * 64;
    total += GCOLL_PRIMS_SCRATCH * ch->scratch_bytes;
  }
  if (posix_memalign(&e->scratch_mem, 64, total) != 0) {
    e->scratch_mem = NULL;
    gcoll_errf(err, errlen, "out of memory for %zu bytes of scratch", total);
    return -1;
  }
  memset(e->scratch_mem, 0, total); /* touch once, never per collective */
  uint64_t gather = 0;
  for (int p = 0; p < GCOLL_NPROTOS; p++)
    if (cfg->nranks > 1 && cfg->gather_bytes[p] > gather) gather = cfg->gather_bytes[p];
  if (gather > SIZE_MAX / (size_t)cfg->nranks) {
    gcoll_errf(err, errlen, "gather limit %llu too large", (unsigned long long)gather);
    return -1;
  }
  if (gather > 0) {
    if (posix_memalign(&e->gather, 64, gather * (size_t)cfg->nranks) != 0) {
      e->gather = NULL;
      gcoll_errf(err, errlen, "out of memory for %llu bytes of gather scratch",
                 (unsigned long long)(gather * (size_t)cfg->nranks));
      return -1;
    }
    memset(e->gather, 0, gather * (size_t)cfg->nranks);
    for (int p = 0; p < GCOLL_NPROTOS; p++) e->gather_bytes[p] = cfg->gather_bytes[p];
  }
  char *p = e->scratch_mem;
  for (int c = 0; c < e->frame.nchannels; c++)
    for (int i = 0; i < GCOLL_PRIMS_SCRATCH; i++) {
      e->ch[c].scratch[i] = p;
      p += e->ch[c].scratch_bytes;
    }
  return 0;
}

/* The node form's terms, checked, and its scratch (host_exec.h). */
static int init_node_form(struct gcoll_host_exec *e, const struct gcoll_exec_config *cfg,
                          char *err, size_t errlen) {
  const struct gcoll_exec_node_form *n = &cfg->node;
  if (n->members == NULL || n->nmembers < 1 || n->nmembers > cfg->nranks || n->index < 0 ||
      n->index >= n->nmembers || n->members[n->index] != cfg->rank || n->entry < 0 ||
      n->entry >= n->nmembers || (n->is_entry != (n->entry == n->index)) ||
      (n->nmembers > 1) != (cfg->oneshot_board != NULL) || n->max_bytes == 0 ||
      (cfg->oneshot_board != NULL &&
       n->max_bytes > ((const struct gcoll_oneshot_header *)cfg->oneshot_board)->slot_bytes) ||
      cfg->nchannels < 1 || cfg->nranks < 2) {
    gcoll_errf(err, errlen, "invalid node form (members, slot, entry or board)");
    return -1;
  }
  int *members = malloc((size_t)n->nmembers * sizeof(int));
  if (members == NULL || posix_memalign(&e->node_scratch, 64, n->max_bytes) != 0) {
    free(members);
    e->node_scratch = NULL;
    gcoll_errf(err, errlen, "out of memory");
    return -1;
  }
  memcpy(members, n->members, (size_t)n->nmembers * sizeof(int));
  memset(e->node_scratch, 0, n->max_bytes);
  e->node = *n;
  e->node.members = members;
  return 0;
}

struct gcoll_host_exec *gcoll_host_exec_create(const struct gcoll_exec_config *cfg, char *err,
                                               size_t errlen) {
  struct gcoll_exec_frame frame;
  if (cfg == NULL || cfg->channels == NULL ||
      gcoll_exec_frame_set(&frame, cfg->rank, cfg->nranks, cfg->nchannels,
                           GCOLL_HOST_MAX_CHANNELS, cfg->timeout_ns) != 0) {
    gcoll_errf(err, errlen, "invalid executor config (rank/nranks/nchannels)");
    return NULL;
  }
  for (int c = 0; c < cfg->nchannels; c++) {
    const struct gcoll_host_channel *ch = &cfg->channels[c];
    struct gcoll_exec_channel_shape shape = {
        .ring_ranks = ch->ring.ranks, .ring_pos = ch->ring.pos, .has_tree = ch->has_tree,
        .tree_parent = ch->tree.parent, .tree_nchildren = ch->tree.nchildren};
    if (gcoll_exec_frame_channel(&frame, c, &shape, err, errlen) != 0) return NULL;
  }
  struct gcoll_host_exec *e = gcoll_exec_frame_alloc(sizeof(*e), &frame, err, errlen);
  if (e == NULL) return NULL;
  e->abort_word = cfg->abort_word;
  e->spin_rounds = cfg->spin_rounds;
  e->poll = cfg->poll;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->work_cv, NULL);
  pthread_cond_init(&e->done_cv, NULL);
  atomic_init(&e->local_abort, 0);
  atomic_init(&e->first_failed, -1);
  e->ch = calloc((size_t)cfg->nchannels, sizeof(*e->ch));
  if (e->ch == NULL || alloc_channels(e, cfg, err, errlen) != 0) {
    if (e->ch == NULL) gcoll_errf(err, errlen, "out of memory");
    gcoll_host_exec_destroy(e);
    return NULL;
  }
  if (gcoll_host_direct_init(&e->direct, &cfg->peer_reads, cfg->rank, cfg->nranks) != 0) {
    gcoll_errf(err, errlen, "out of memory");
    gcoll_host_exec_destroy(e);
    return NULL;
  }
  if (cfg->node.on && init_node_form(e, cfg, err, errlen) != 0) {
    gcoll_host_exec_destroy(e);
    return NULL;
  }
  if (cfg->oneshot_board != NULL) {
    const int members = cfg->node.on ? cfg->node.nmembers : cfg->nranks;
    if (gcoll_oneshot_check(cfg->oneshot_board, cfg->oneshot_bytes, members, err, errlen) != 0) {
      gcoll_host_exec_destroy(e);
      return NULL;
    }
    if (gcoll_oneshot_bind(&e->oneshot, cfg->oneshot_board,
                           cfg->node.on ? cfg->node.index : cfg->rank) != 0) {
      gcoll_errf(err, errlen, "out of memory");
      gcoll_host_exec_destroy(e);
      return NULL;
    }
  }
  for (int c = 1; c < e->frame.nchannels; c++) {
    int rc = pthread_create(&e->ch[c].thread, NULL, worker_main, &e->ch[c]);
    if (rc != 0) {
      gcoll_errf(err, errlen, "cannot start channel worker %d: %s", c, strerror(rc));
      gcoll_host_exec_destroy(e);
      return NULL;
    }
    char name[24];
    snprintf(name, sizeof(name), "gcoll-ch%d", c);
    gcoll_thread_name(e->ch[c].thread, name);
    e->ch[c].started = 1;
  }
  return e;
}

/* ---- one channel's work ------------------------------------------------ */

static gcollResult_t setup_ring(struct channel *ch, const struct gcoll_host_coll *c) {
  struct gcoll_fifo *recv[1] = {ch->conf.ring.recv_prev};
  struct gcoll_fifo *send[1] = {ch->conf.ring.send_next};
  int peers = ch->exec->frame.nranks > 1;
  gcollResult_t r = gcoll_prims_setup(&ch->ring, recv, peers, send, peers, c->proto, c->dtype,
                                      c->op, &ch->wait, ch->scratch, ch->scratch_bytes);
  if (r == gcollSuccess && c->premul == GCOLL_PREMUL_IMMEDIATE)
    gcoll_prims_premul(&ch->ring, c->premul_k, ch->prescale);
  return r;
}

static gcollResult_t setup_tree(struct channel *ch, const struct gcoll_host_coll *c) {
  const struct gcoll_host_tree *t = &ch->conf.tree;
  int has_parent = t->parent >= 0;
  struct gcoll_fifo *const up_send[1] = {t->send_parent};
  struct gcoll_fifo *const down_recv[1] = {t->recv_parent};
  gcollResult_t r = gcoll_prims_setup(&ch->up, t->recv_child, t->nchildren, up_send,
                                      has_parent, c->proto, c->dtype, c->op, &ch->wait,
                                      ch->scratch, ch->scratch_bytes);
  if (r != gcollSuccess) return r;
  /* Only the way up reads the input. */
  if (c->premul == GCOLL_PREMUL_IMMEDIATE) gcoll_prims_premul(&ch->up, c->premul_k, ch->prescale);
  return gcoll_prims_setup(&ch->down, down_recv, has_parent, t->send_child,
                           t->nchildren, c->proto, c->dtype, c->op, &ch->wait,
                           ch->scratch, ch->scratch_bytes);
}

static gcollResult_t run_tree(struct channel *ch, const struct gcoll_host_coll *c) {
  gcollResult_t r = setup_tree(ch, c);
  if (r != gcollSuccess) return r;
  struct gcoll_tree_work w = {
      .sendbuf = c->sendbuf, .recvbuf = c->recvbuf, .offset = ch->lo, .count = ch->n,
      .parent = ch->conf.tree.parent, .nchildren = ch->conf.tree.nchildren};
  ch->phase = "tree";
  r = c->coll == GCOLL_COLL_REDUCE ? gcoll_tree_reduce(&ch->up, &w)
                                    : gcoll_tree_allreduce(&ch->up, &ch->down, &w);
  if (r != gcollSuccess) ch->failed = ch->up.fail_what ? &ch->up : &ch->down;
  return r;
}

static gcollResult_t run_ring(struct channel *ch, const struct gcoll_host_coll *c) {
  gcollResult_t r = setup_ring(ch, c);
  if (r != gcollSuccess) return r;
  struct gcoll_ring_work w = {
      .sendbuf = c->sendbuf, .recvbuf = c->recvbuf, .offset = ch->lo, .count = ch->n,
      .stride = c->count, .nranks = ch->exec->frame.nranks, .pos = ch->conf.ring.pos,
      .root = c->root, .ranks = ch->ranks};
  ch->phase = "ring";
  switch (c->coll) {
    case GCOLL_COLL_ALLREDUCE: r = gcoll_ring_allreduce(&ch->ring, &w); break;
    case GCOLL_COLL_BROADCAST: r = gcoll_ring_broadcast(&ch->ring, &w); break;
    case GCOLL_COLL_REDUCE: r = gcoll_ring_reduce(&ch->ring, &w); break;
    case GCOLL_COLL_ALLGATHER: r = gcoll_ring_allgather(&ch->ring, &w); break;
    default: r = gcoll_ring_reducescatter(&ch->ring, &w); break;
  }
  if (r != gcollSuccess) ch->failed = &ch->ring;
  return r;
}

/* Elements of one ring chunk, as gcoll_prims_chunk_elems would say after
 * setting up channel 0's ring for c (one-rank executors have no FIFO). */
static size_t ring_chunk_elems(const struct channel *ch, const struct gcoll_host_coll *c) {
  const struct gcoll_fifo *f = ch->conf.ring.recv_prev;
  return gcoll_fifo_payload(f, c->proto) / gcoll_dtype_size(c->dtype) * GCOLL_CHUNK_STEPS;
}

/* out[0, n) = the ring's reduction of the block whose chain ends at ring
 * position b (algo_ring.h): position b+1's elements combined with b+2's
 * (own OP received), then each next position's, ending at b; elements
 * [off, off + n) of each rank's vector, rank r's at g + r * stride. */
static void reduce_chain(const struct channel *ch, const struct gcoll_host_coll *c,
                         const char *g, size_t stride, int b, size_t off, size_t n, char *out) {
  const int k = ch->exec->frame.nranks;
  size_t es = gcoll_dtype_size(c->dtype);
#define VEC(j) (g + (size_t)ch->ranks[gcoll_ring_mod(b + (j), k)] * stride + off * es)
  gcoll_reduce(out, VEC(2), VEC(1), n, c->dtype, c->op);
  for (int j = 3; j <= k; j++) gcoll_reduce(out, VEC(j), out, n, c->dtype, c->op);
#undef VEC
}

/* The allreduce of the gathered vectors (rank r's at g + r * stride) with
 * the ring allreduce's bits: its blocks (one pass, chunk = ceil(count /
 * nranks), as count fits in one step), block b's chain ending at ring
 * position b. So the form changes the steps, never the result: results
 * stay reproducible across forms, channel counts and executors. */
static void reduce_as_ring(const struct channel *ch, const struct gcoll_host_coll *c,
                           const char *g, size_t stride) {
  const int k = ch->exec->frame.nranks;
  size_t es = gcoll_dtype_size(c->dtype);
  size_t chunk = gcoll_min_size(ring_chunk_elems(ch, c), (c->count + (size_t)k - 1) / (size_t)k);
  for (int b = 0; b < k && (size_t)b * chunk < c->count; b++) {
    size_t lo = (size_t)b * chunk, n = gcoll_min_size(chunk, c->count - lo);
    reduce_chain(ch, c, g, stride, b, lo, n, (char *)c->recvbuf + lo * es);
  }
}

/* Whether c goes through the one-shot board (host_oneshot.h): every rank
 * has one or none (the runtime makes it for all or fails init), and the
 * other terms are the call's, the same on every rank. Allreduce: the
 * gather form's calls (gather: the caller's verdict); a pre-mul-sum
 * scales its input in the ring's primitives, so it keeps the ring.
 * Allgather, broadcast and reduce: each rank's vector fits a slot;
 * reducescatter: each rank's whole input does. Empty calls move nothing
 * on any path, and stay so. */
static int takes_board(const struct gcoll_host_exec *e, const struct gcoll_host_coll *c,
                       int gather) {
  if (e->oneshot.hdr == NULL || e->node.on || c->premul != GCOLL_PREMUL_NONE ||
      c->algo != GCOLL_ALGO_RING || c->count == 0)
    return 0;
  uint64_t nb = (uint64_t)c->count * gcoll_dtype_size(c->dtype);
  switch (c->coll) {
    case GCOLL_COLL_ALLREDUCE: return gather && nb <= e->oneshot.slot_bytes;
    case GCOLL_COLL_ALLGATHER:
    case GCOLL_COLL_BROADCAST:
    case GCOLL_COLL_REDUCE: return nb <= e->oneshot.slot_bytes;
    case GCOLL_COLL_REDUCESCATTER: return nb <= e->oneshot.slot_bytes / (uint64_t)e->frame.nranks;
    default: return 0;
  }
}

/* One call on the board; a failure names the rank waited for (a node
 * board's slot is a member's). */
static gcollResult_t board_call(struct channel *ch, const struct gcoll_oneshot_part *part,
                                const char **area, size_t *slot) {
  struct gcoll_host_exec *e = ch->exec;
  int waited_for = -1;
  uint64_t call = 0;
  gcollResult_t r = gcoll_oneshot_run(&e->oneshot, &ch->wait, part, area, slot, &waited_for, &call);
  if (r != gcollSuccess) {
    ch->ring.fail_what = "rank";
    ch->ring.fail_peer = e->node.on && waited_for >= 0 && waited_for < e->node.nmembers
                             ? e->node.members[waited_for]
                             : waited_for;
    ch->ring.fail_step = call;
    ch->ring.fail_unit = "call";
    ch->failed = &ch->ring;
  }
  return r;
}

/* c through the board: the inputs it needs (every rank's; a broadcast's
 * root's), one wait, then this rank's result from the call's area with
 * the ring's bits. */
static gcollResult_t run_board(struct channel *ch, const struct gcoll_host_coll *c) {
  struct gcoll_host_exec *e = ch->exec;
  const size_t es = gcoll_dtype_size(c->dtype), nb = c->count * es;
  const int k = e->frame.nranks, me = e->frame.rank;
  struct gcoll_oneshot_part part = {.src = c->sendbuf, .nbytes = nb,
                                    .sources = GCOLL_ONESHOT_ALL, .need = nb};
  switch (c->coll) {
    case GCOLL_COLL_BROADCAST:
      part.nbytes = me == c->root ? nb : 0;
      part.sources = me == c->root ? GCOLL_ONESHOT_NONE : c->root;
      break;
    case GCOLL_COLL_REDUCE: part.sources = me == c->root ? GCOLL_ONESHOT_ALL : GCOLL_ONESHOT_NONE; break;
    case GCOLL_COLL_REDUCESCATTER: part.nbytes = part.need = nb * (size_t)k; break;
    default: break;
  }
  const char *area = NULL;
  size_t slot = 0;
  ch->phase = "one-shot";
  gcollResult_t r = board_call(ch, &part, &area, &slot);
  if (r != gcollSuccess) return r;
  char *out = c->recvbuf;
  switch (c->coll) {
    case GCOLL_COLL_ALLREDUCE: reduce_as_ring(ch, c, area, slot); break;
    case GCOLL_COLL_ALLGATHER:
      for (int q = 0; q < k; q++) memcpy(out + (size_t)q * nb, area + (size_t)q * slot, nb);
      break;
    case GCOLL_COLL_BROADCAST:
      if (me != c->root) memcpy(out, area + (size_t)c->root * slot, nb);
      else if (out != c->sendbuf) memcpy(out, c->sendbuf, nb);
      break;
    case GCOLL_COLL_REDUCE:
      /* The chain ends at the root (algo_ring.h), which alone has a result. */
      if (me == c->root) reduce_chain(ch, c, area, slot, ch->conf.ring.pos, 0, c->count, out);
      break;
    default:
      /* This rank's block, its chain ending at its own position. */
      reduce_chain(ch, c, area, slot, ch->conf.ring.pos, (size_t)me * c->count, c->count, out);
      break;
  }
  return gcollSuccess;
}

/* The node form (host_exec.h). avg sums here; run_channel divides. */
static gcollResult_t run_nodes(struct channel *ch, const struct gcoll_host_coll *c) {
  struct gcoll_host_exec *e = ch->exec;
  const struct gcoll_exec_node_form *n = &e->node;
  const size_t es = gcoll_dtype_size(c->dtype), nb = c->count * es;
  char *out = c->recvbuf;
  const char *area = NULL;
  size_t slot = 0;
  gcollResult_t r;
  /* This node's partial, in slot order, in every member's output. */
  if (n->nmembers > 1) {
    struct gcoll_oneshot_part part = {
        .src = c->sendbuf, .nbytes = nb, .sources = GCOLL_ONESHOT_ALL, .need = nb};
    ch->phase = "node: partial";
    if ((r = board_call(ch, &part, &area, &slot)) != gcollSuccess) return r;
    gcoll_reduce(out, area, area + slot, c->count, c->dtype, c->op);
    for (int i = 2; i < n->nmembers; i++)
      gcoll_reduce(out, out, area + (size_t)i * slot, c->count, c->dtype, c->op);
  } else if (out != c->sendbuf) {
    memcpy(out, c->sendbuf, nb);
  }
  /* The one step between the nodes: this node's last rank on the ring
   * sends, the other node's first receives (a node of one rank does
   * both, its send first). */
  if (n->is_exit || n->is_entry) {
    ch->phase = "node: between the nodes";
    if ((r = setup_ring(ch, c)) != gcollSuccess) return r;
    gcoll_prims_bind(&ch->ring, out, e->node_scratch);
    if (n->is_exit && (r = gcoll_prim_send(&ch->ring, 0, c->count)) != gcollSuccess) {
      ch->failed = &ch->ring;
      return r;
    }
    if (n->is_entry) {
      if ((r = gcoll_prim_recv(&ch->ring, 0, c->count)) != gcollSuccess) {
        ch->failed = &ch->ring;
        return r;
      }
      const char *other = e->node_scratch;
      if (n->first)
        gcoll_reduce(out, out, other, c->count, c->dtype, c->op);
      else
        gcoll_reduce(out, other, out, c->count, c->dtype, c->op);
    }
  }
  /* The sum, from the node's first rank to the others. */
  if (n->nmembers > 1) {
    struct gcoll_oneshot_part part = {.src = out,
                                      .nbytes = n->is_entry ? nb : 0,
                                      .sources = n->is_entry ? GCOLL_ONESHOT_NONE : n->entry,
                                      .need = nb};
    ch->phase = "node: sum";
    if ((r = board_call(ch, &part, &area, &slot)) != gcollSuccess) return r;
    if (!n->is_entry) memcpy(out, area + (size_t)n->entry * slot, nb);
  }
  return gcollSuccess;
}

/* The gather form (host_exec.h): a ring allgather of whole vectors into
 * e->gather, then the reduction as the ring would have done it. */
static gcollResult_t run_gather(struct channel *ch, const struct gcoll_host_coll *c) {
  struct gcoll_host_exec *e = ch->exec;
  gcollResult_t r = setup_ring(ch, c);
  if (r != gcollSuccess) return r;
  struct gcoll_ring_work w = {
      .sendbuf = c->sendbuf, .recvbuf = e->gather, .offset = 0, .count = c->count,
      .stride = c->count, .nranks = e->frame.nranks, .pos = ch->conf.ring.pos, .ranks = ch->ranks};
  ch->phase = "gather";
  r = gcoll_ring_allgather(&ch->ring, &w);
  if (r != gcollSuccess) {
    ch->failed = &ch->ring;
    return r;
  }
  reduce_as_ring(ch, c, e->gather, c->count * gcoll_dtype_size(c->dtype));
  return gcollSuccess;
}

static void finish_avg(struct channel *ch, const struct gcoll_host_coll *c) {
  struct gcoll_host_exec *e = ch->exec;
  if (c->op != gcollAvg || ch->n == 0) return;
  if (c->coll == GCOLL_COLL_ALLGATHER || c->coll == GCOLL_COLL_BROADCAST) return;
  if (c->coll == GCOLL_COLL_REDUCE && e->frame.rank != c->root) return;
  char *buf = (char *)c->recvbuf + ch->lo * gcoll_dtype_size(c->dtype);
  gcoll_avg_finish(buf, ch->n, c->dtype, e->frame.nranks);
}

/* Channel 0's ring prims as the direct form's exchanges use them. */
static gcollResult_t setup_bytes(struct channel *ch) {
  struct gcoll_fifo *recv[1] = {ch->conf.ring.recv_prev};
  struct gcoll_fifo *send[1] = {ch->conf.ring.send_next};
  return gcoll_prims_setup(&ch->ring, recv, 1, send, 1, GCOLL_PROTO_SIMPLE, gcollUint8, gcollSum,
                           &ch->wait, ch->scratch, ch->scratch_bytes);
}

/* The direct form (host_direct.h) on channel 0's ring; *taken = 0: the
 * ring runs the call after all. An allreduce runs the ring's
 * reduce-scatter half in between, on the whole vector (one channel). */
static gcollResult_t run_direct(struct channel *ch, const struct gcoll_host_coll *c, int *taken,
                                char *err, size_t errlen) {
  struct gcoll_host_exec *e = ch->exec;
  ch->failed = NULL;
  ch->phase = "direct";
  *taken = 1;
  struct gcoll_ring_work w = {
      .sendbuf = c->sendbuf, .recvbuf = c->recvbuf, .offset = 0, .count = c->count,
      .stride = c->count, .nranks = e->frame.nranks, .pos = ch->conf.ring.pos, .root = c->root,
      .ranks = ch->ranks};
  size_t chunk_max = 0;
  gcollResult_t r = setup_bytes(ch);
  if (r == gcollSuccess) r = gcoll_host_direct_begin(&e->direct, &ch->ring, &w, c, taken);
  if (r == gcollSuccess && *taken && c->coll == GCOLL_COLL_ALLREDUCE) {
    r = setup_ring(ch, c);
    if (r == gcollSuccess) {
      ch->phase = "direct: reduce-scatter";
      chunk_max = gcoll_prims_chunk_elems(&ch->ring);
      r = gcoll_ring_allreduce_steps(&ch->ring, &w, 0);
      if (r == gcollSuccess) r = setup_bytes(ch);
      ch->phase = "direct";
    }
  }
  if (r == gcollSuccess && *taken)
    r = gcoll_host_direct_finish(&e->direct, &ch->ring, &w, c, chunk_max, err, errlen);
  if (r != gcollSuccess && ch->ring.fail_what != NULL) {
    ch->failed = &ch->ring;
    if (errlen > 0) err[0] = '\0'; /* describe_failure names the step */
  }
  /* The whole vector: an allreduce takes this form on one channel only. */
  if (r == gcollSuccess && *taken) finish_avg(ch, c);
  if (r != gcollSuccess) {
    int zero = 0;
    if (atomic_compare_exchange_strong(&e->local_abort, &zero, (int)r))
      atomic_store(&e->first_failed, 0);
  }
  return r;
}

static gcollResult_t run_channel(struct channel *ch) {
  struct gcoll_host_exec *e = ch->exec;
  const struct gcoll_host_coll *c = &e->job;
  ch->failed = NULL;
  ch->phase = "setup";
  gcollResult_t r = e->job_form == FORM_BOARD    ? run_board(ch, c)
                    : e->job_form == FORM_NODES  ? run_nodes(ch, c)
                    : e->job_form == FORM_GATHER ? run_gather(ch, c)
                    : c->algo == GCOLL_ALGO_TREE ? run_tree(ch, c)
                                                 : run_ring(ch, c);
  if (r == gcollSuccess) {
    finish_avg(ch, c);
  } else {
    int zero = 0;
    if (atomic_compare_exchange_strong(&e->local_abort, &zero, (int)r))
      atomic_store(&e->first_failed, ch->index);
  }
  ch->result = r;
  return r;
}

static void *worker_main(void *arg) {
  struct channel *ch = arg;
  struct gcoll_host_exec *e = ch->exec;
  uint64_t seen = 0;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while (!e->stop && (e->generation == seen || ch->index >= e->job_channels)) {
      seen = e->generation;
      pthread_cond_wait(&e->work_cv, &e->mu);
    }
    if (e->stop) break;
    seen = e->generation;
    pthread_mutex_unlock(&e->mu);
    run_channel(ch);
    pthread_mutex_lock(&e->mu);
    if (--e->pending == 0) pthread_cond_signal(&e->done_cv);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

/* ---- validation and partition ----------------------------------------- */

static gcollResult_t check_coll(const struct gcoll_host_exec *e,
                                const struct gcoll_host_coll *c, char *err,
                                size_t errlen) {
  size_t esize = gcoll_dtype_size(c->dtype);
  gcollResult_t r = gcoll_coll_args_check(c->coll, c->dtype, c->op, c->root, e->frame.nranks,
                                          c->proto, "the host executor", err, errlen);
  if (r == gcollSuccess)
    r = gcoll_coll_premul_check(c->coll, c->op, c->premul, 0, "the host executor", err, errlen);
  if (r != gcollSuccess) return r;
  r = gcoll_exec_frame_check_channels(&e->frame, c->nchannels, c->algo, err, errlen);
  if (r != gcollSuccess) return r;
  if (c->algo == GCOLL_ALGO_TREE) {
    if (c->coll != GCOLL_COLL_ALLREDUCE && c->coll != GCOLL_COLL_REDUCE) {
      gcoll_errf(err, errlen, "the tree algorithm implements allreduce and reduce only");
      return gcollInvalidUsage;
    }
    for (int i = 0; i < gcoll_exec_frame_nch(&e->frame, c->nchannels); i++) {
      /* Each rank sees only its own end of the tree; a root that is not the
       * tree's would have partial sums go up to a rank that drops them.
       * Both ranks that can tell refuse it, before anything moved. */
      int tree_root = e->ch[i].conf.tree.parent < 0;
      if (c->coll == GCOLL_COLL_REDUCE && e->frame.nranks > 1 &&
          tree_root != (e->frame.rank == c->root)) {
        gcoll_errf(err, errlen, "channel %d: the tree's root is %s, the reduce's root rank %d", i,
                   tree_root ? "this rank" : "another rank", c->root);
        return gcollInvalidUsage;
      }
    }
  } else if (c->algo != GCOLL_ALGO_RING) {
    gcoll_errf(err, errlen, "algorithm %d: the host executor runs ring and tree only",
               (int)c->algo);
    return c->algo == GCOLL_ALGO_NVLS ? gcollInvalidUsage : gcollInvalidArgument;
  }
  return gcoll_exec_frame_check_buffers(&e->frame, c->coll, c->count, esize, c->root,
                                        (uint64_t)(uintptr_t)c->sendbuf,
                                        (uint64_t)(uintptr_t)c->recvbuf, err, errlen);
}

static void partition(struct gcoll_host_exec *e, size_t count, size_t esize, int nch) {
  /* What the geometry gives one channel, without its three divisions (a
   * fifth of a small call's time in this function). */
  if (nch == 1) {
    e->ch[0].lo = 0;
    e->ch[0].n = count;
    return;
  }
  for (int c = 0; c < nch; c++)
    gcoll_geom_partition(count, esize, nch, c, &e->ch[c].lo, &e->ch[c].n);
}

static const char *reason_text(const struct channel *ch, gcollResult_t r) {
  if (ch->wait.reason == GCOLL_WAIT_DEADLINE) return "deadline passed";
  if (ch->wait.reason == GCOLL_WAIT_ABORTED) return "aborted";
  if (r == gcollInternalError) return "protocol mismatch";
  return "failed";
}

static void describe_failure(const struct gcoll_host_exec *e, gcollResult_t r,
                             char *err, size_t errlen) {
  int idx = atomic_load(&e->first_failed);
  if (idx < 0) idx = 0;
  const struct channel *ch = &e->ch[idx];
  const struct gcoll_prims *p = ch->failed;
  /* A step that does not match the peer's is most often a setting that
   * decides the steps and differs between ranks. */
  const char *hint = r != gcollInternalError ? ""
                     : " (the ranks took different steps: is a setting that must match, such as "
                       "GCOLL_ALGO, GCOLL_PROTO, GCOLL_TUNING, GCOLL_SINGLE_COPY_BYTES, "
                       "GCOLL_SINGLE_COPY_TUNE or GCOLL_HOST_ONESHOT, different on some rank?)";
  if (p == NULL || p->fail_what == NULL) {
    gcoll_errf(err, errlen, "channel %d (%s): %s (result %d)%s", idx, ch->phase,
               reason_text(ch, r), (int)r, hint);
    return;
  }
  gcoll_errf(err, errlen, "channel %d (%s): %s while waiting for %s %d at %s %llu%s",
             idx, ch->phase, reason_text(ch, r), p->fail_what, p->fail_peer,
             p->fail_unit != NULL ? p->fail_unit : "step", (unsigned long long)p->fail_step,
             hint);
}

/* ---- running ------------------------------------------------------------ */

static void run_collective(struct gcoll_host_exec *e, const struct gcoll_host_coll *c, int nch,
                           enum job_form form);

/* The form of c on nch channels; the same on every rank (host_exec.h). */
static enum job_form job_form(const struct gcoll_host_exec *e, const struct gcoll_host_coll *c,
                              int nch) {
  /* Marked by the runtime for every rank alike; the executor's terms are
   * the same on every rank too. */
  if (c->node_form && e->node.on && c->coll == GCOLL_COLL_ALLREDUCE && c->count > 0 &&
      c->premul == GCOLL_PREMUL_NONE &&
      c->count * gcoll_dtype_size(c->dtype) <= e->node.max_bytes)
    return FORM_NODES;
  int gather = c->coll == GCOLL_COLL_ALLREDUCE && c->algo == GCOLL_ALGO_RING && nch == 1 &&
               e->frame.nranks > 1 &&
               c->count * gcoll_dtype_size(c->dtype) <= e->gather_bytes[c->proto];
  return takes_board(e, c, gather) ? FORM_BOARD : gather ? FORM_GATHER : FORM_CHANNELS;
}

gcollResult_t gcoll_host_exec_run(struct gcoll_host_exec *e,
                                  const struct gcoll_host_coll *c, char *err,
                                  size_t errlen) {
  if (e == NULL || c == NULL) {
    gcoll_errf(err, errlen, "NULL executor or collective");
    return gcollInvalidArgument;
  }
  gcollResult_t r = check_coll(e, c, err, errlen);
  if (r != gcollSuccess) return r;
  /* One rank: every collective is a copy of its input (the ring's single
   * step is gcoll_prim_copy, so the same bits), made in this thread, as
   * NCCL's and Open MPI's are; handing it to the channels' workers cost
   * 0.13-0.19 us a call. A pre-mul-sum scales, so it takes the ring. */
  if (e->frame.nranks == 1 && c->premul == GCOLL_PREMUL_NONE) {
    size_t nb = c->count * gcoll_dtype_size(c->dtype);
    if (nb > 0 && c->recvbuf != c->sendbuf) memcpy(c->recvbuf, c->sendbuf, nb);
    if (errlen > 0) err[0] = '\0';
    return gcollSuccess;
  }
  int nch = gcoll_exec_frame_nch(&e->frame, c->nchannels);
  enum job_form form = job_form(e, c, nch);
  if (form != FORM_CHANNELS) nch = 1; /* in this thread, the whole range */
  partition(e, c->count, gcoll_dtype_size(c->dtype), nch);
  struct gcoll_wait w;
  gcoll_wait_init(&w, e->abort_word, &e->local_abort, e->frame.timeout_ns);
  if (e->spin_rounds > 0) w.spins = e->spin_rounds;
  int inline_poll = c->poll_inline && e->poll.poll != NULL;
  if (inline_poll) {
    w.poll = e->poll.poll;
    w.poll_arg = e->poll.arg;
    if (e->poll.begin != NULL) e->poll.begin(e->poll.arg);
  }
  for (int i = 0; i < nch; i++) e->ch[i].wait = w;
  /* Reset only after a failure, and without a locked instruction: a
   * seq_cst store is an xchg, which waits for every store before it to
   * reach the cache, and a small call's last store (its line of the
   * one-shot board) waits for the line to come back from the reader's
   * core: a quarter of this function's time in a 2-rank 8 B broadcast.
   * The workers see these through the hand-off's lock. */
  if (atomic_load_explicit(&e->local_abort, memory_order_relaxed) != 0)
    atomic_store_explicit(&e->local_abort, 0, memory_order_relaxed);
  if (atomic_load_explicit(&e->first_failed, memory_order_relaxed) != -1)
    atomic_store_explicit(&e->first_failed, -1, memory_order_relaxed);

  if (errlen > 0) err[0] = '\0';
  int taken = 0;
  /* run_direct records a failure as a channel's would be, or in err. */
  const int candidate =
      gcoll_host_direct_candidate(&e->direct, c, nch == 1 && form == FORM_CHANNELS);
  if (candidate) run_direct(&e->ch[0], c, &taken, err, errlen);
  if (!taken) {
    run_collective(e, c, nch, form);
    /* A candidate's ring run may be a tuning sample (host_direct.h). */
    if (candidate)
      gcoll_host_direct_ring_done(&e->direct, (gcollResult_t)atomic_load(&e->local_abort));
  }

  if (inline_poll && e->poll.end != NULL) e->poll.end(e->poll.arg);
  r = (gcollResult_t)atomic_load(&e->local_abort);
  if (r != gcollSuccess && (errlen == 0 || err[0] == '\0')) describe_failure(e, r, err, errlen);
  return r;
}

/* The ring, tree or gather form over nch channels: channel 0 in this
 * thread, the others handed to their workers. */
static void run_collective(struct gcoll_host_exec *e, const struct gcoll_host_coll *c, int nch,
                           enum job_form form) {
  if (nch == 1) {
    /* Channel 0 is this thread's: no worker takes part, and none reads
     * the job (the last call waited for all of them), so no hand-off. */
    e->job = *c;
    e->job_form = form;
    run_channel(&e->ch[0]);
  } else {
    pthread_mutex_lock(&e->mu);
    e->job = *c;
    e->job_form = FORM_CHANNELS;
    e->job_channels = nch;
    e->pending = nch - 1;
    e->generation++;
    pthread_cond_broadcast(&e->work_cv);
    pthread_mutex_unlock(&e->mu);

    run_channel(&e->ch[0]);

    pthread_mutex_lock(&e->mu);
    while (e->pending > 0) pthread_cond_wait(&e->done_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
  }
}
