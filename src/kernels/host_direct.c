/* The direct form of host allgather and broadcast (see host_direct.h). */
#include "kernels/host_direct.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errf.h"
#include "kernels/reduce.h"
#include "kernels/wait.h"

enum {
  DIRECT_PROBED = 1u << 0,  /* this rank has probed every peer */
  DIRECT_READS = 1u << 1,   /* ... and can read every one of them */
  DIRECT_CHEAP = 1u << 2,   /* what peers would read of this rank is in huge pages */
};
/* Longest back-off, in candidate calls, after buffers in small pages. */
#define DIRECT_MAX_SKIP_LOG2 6

int gcoll_host_direct_init(struct gcoll_host_direct *d, const struct gcoll_exec_peer_reads *ops,
                           int rank, int nranks) {
  memset(d, 0, sizeof(*d));
  d->rank = rank;
  d->nranks = nranks;
  if (ops == NULL || ops->min_bytes == 0 || nranks < 2 || ops->identity == NULL ||
      ops->probe == NULL || ops->read == NULL || ops->cheap == NULL)
    return 0;
  d->descs = calloc((size_t)nranks, sizeof(*d->descs));
  d->status = calloc((size_t)nranks, sizeof(*d->status));
  if (d->descs == NULL || d->status == NULL) {
    gcoll_host_direct_free(d);
    return -1;
  }
  d->ops = *ops;
  for (int k = 0; k < GCOLL_DIRECT_TUNE_KINDS; k++)
    for (int i = 0; i < GCOLL_DIRECT_TUNE_CLASSES; i++)
      d->tune[k][i] = (struct gcoll_direct_tune){.ring_ns = UINT32_MAX, .direct_ns = UINT32_MAX};
  return 0;
}

void gcoll_host_direct_free(struct gcoll_host_direct *d) {
  if (d->calls > 0 && d->ops.report != NULL) {
    char tuned[512];
    gcoll_host_direct_tuned(d, tuned, sizeof(tuned));
    d->ops.report(d->ops.arg, d->calls, d->taken, tuned);
  }
  d->calls = 0;
  free(d->descs);
  free(d->status);
  d->descs = NULL;
  d->status = NULL;
  d->ops.min_bytes = 0;
}

/* The bytes of the output, as nccl-tests count a call's size (an
 * allreduce's vector). */
static size_t call_bytes(const struct gcoll_host_direct *d, const struct gcoll_host_coll *c) {
  size_t bytes = c->count * gcoll_dtype_size(c->dtype);
  return c->coll == GCOLL_COLL_ALLGATHER ? bytes * (size_t)d->nranks : bytes;
}

/* Where the ring is the faster (host_direct.h), by what the ranks share:
 * the group's size and whether the call fits in cache. */
static int ring_faster(const struct gcoll_host_direct *d, const struct gcoll_host_coll *c,
                       size_t bytes) {
  if (d->ops.cache_bytes == 0) return 0; /* not told: no judgement */
  int fits = bytes <= d->ops.cache_bytes, pair = d->nranks == 2;
  if (c->coll == GCOLL_COLL_ALLGATHER) return !fits;
  /* An allreduce's second half is an allgather of the reduced blocks. */
  if (c->coll == GCOLL_COLL_ALLREDUCE) return !(pair && fits);
  return !pair && !fits; /* broadcast: pairs always, larger groups within it */
}

/* Where coll's direct form may start, in output bytes: min_bytes; for an
 * allreduce GCOLL_DIRECT_ALLREDUCE_FACTOR times it; for an allgather
 * among more than 2, n / 2 times it (each of its reads at least half
 * min_bytes, as a pair's: 3 and 4 ranks at 128 KiB took 1.00-1.10x the
 * ring's time, at 256 KiB 0.53-0.65x). */
static uint64_t form_start(const struct gcoll_host_direct *d, enum gcoll_coll coll) {
  uint64_t need = d->ops.min_bytes;
  if (coll == GCOLL_COLL_ALLREDUCE) need *= GCOLL_DIRECT_ALLREDUCE_FACTOR;
  if (coll == GCOLL_COLL_ALLGATHER && d->nranks > 2) need = need * (uint64_t)d->nranks / 2;
  return need;
}

static const enum gcoll_coll tune_kind_colls[GCOLL_DIRECT_TUNE_KINDS / 2] = {
    GCOLL_COLL_BROADCAST, GCOLL_COLL_ALLGATHER, GCOLL_COLL_ALLREDUCE};

static const char *const tune_kind_names[GCOLL_DIRECT_TUNE_KINDS] = {
    "broadcast", "broadcast in place", "allgather", "allgather in place", "allreduce",
    "allreduce in place"};

/* A call's row of d->tune: its collective, in place or not (host_direct.h). */
static int tune_kind(const struct gcoll_host_direct *d, const struct gcoll_host_coll *c) {
  size_t own = c->coll == GCOLL_COLL_ALLGATHER
                   ? (size_t)d->rank * c->count * gcoll_dtype_size(c->dtype)
                   : 0;
  int in_place = (const char *)c->recvbuf + own == (const char *)c->sendbuf;
  int coll = c->coll == GCOLL_COLL_BROADCAST ? 0 : c->coll == GCOLL_COLL_ALLGATHER ? 1 : 2;
  return 2 * coll + in_place;
}

/* The tuning entry of a call of `bytes` (at least need, where its form
 * may start): classes are powers of two from need (host_direct.h). */
static struct gcoll_direct_tune *tune_class(struct gcoll_host_direct *d,
                                            const struct gcoll_host_coll *c, size_t bytes,
                                            uint64_t need) {
  int k = 0;
  while (k < GCOLL_DIRECT_TUNE_CLASSES - 1 && bytes / 2 >= (need << k)) k++;
  return &d->tune[tune_kind(d, c)][k];
}

static uint64_t tune_now(const struct gcoll_host_direct *d) {
  return d->ops.clock != NULL ? d->ops.clock(d->ops.arg) : gcoll_wait_now_ns();
}

/* Keeps a timed call's time (since d->t0) as its form's fastest. */
static void tune_record(struct gcoll_host_direct *d) {
  if (d->timing == 0 || d->cur == NULL) return;
  uint64_t dt = tune_now(d) - d->t0;
  uint32_t ns = dt >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)dt;
  uint32_t *best = d->timing == GCOLL_DIRECT_TUNE_RING ? &d->cur->ring_ns : &d->cur->direct_ns;
  if (ns < *best) *best = ns;
  d->timing = 0;
}

/* The form a tuning call of an open class runs (1 direct, 0 ring), the
 * direct form being possible: the schedule of host_direct.h, and at its
 * end the verdict from every rank's figures in d->descs. */
static int tune_step(struct gcoll_host_direct *d) {
  struct gcoll_direct_tune *t = d->cur;
  const uint32_t k = t->calls++, timed_end = 2 * (GCOLL_DIRECT_TUNE_SAMPLES + 1);
  if (k < timed_end) {
    int direct = k % 2 == 0;
    d->timing = k < 2 ? 0 : direct ? GCOLL_DIRECT_TUNE_DIRECT : GCOLL_DIRECT_TUNE_RING;
    return direct;
  }
  uint32_t ring = 0, direct = 0;
  for (int q = 0; q < d->nranks; q++) {
    if (d->descs[q].ring_ns > ring) ring = d->descs[q].ring_ns;
    if (d->descs[q].direct_ns > direct) direct = d->descs[q].direct_ns;
  }
  t->choice = direct < ring ? GCOLL_DIRECT_TUNE_DIRECT : GCOLL_DIRECT_TUNE_RING;
  return t->choice == GCOLL_DIRECT_TUNE_DIRECT;
}

/* "128K", "3M": a class's first size, for the log. */
static void size_text(uint64_t b, char *out, size_t len) {
  static const char unit[] = " KMG";
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) b >>= 10, u++;
  if (u == 0) snprintf(out, len, "%llu", (unsigned long long)b);
  else snprintf(out, len, "%llu%c", (unsigned long long)b, unit[u]);
}

void gcoll_host_direct_tuned(const struct gcoll_host_direct *d, char *out, size_t len) {
  size_t used = 0;
  if (len > 0) out[0] = '\0';
  for (int k = 0; k < GCOLL_DIRECT_TUNE_KINDS; k++) {
    const uint64_t need = form_start(d, tune_kind_colls[k / 2]);
    int named = 0;
    for (int i = 0; i < GCOLL_DIRECT_TUNE_CLASSES && used + 1 < len; i++) {
      const struct gcoll_direct_tune *t = &d->tune[k][i];
      if (t->choice == GCOLL_DIRECT_TUNE_OPEN) continue;
      char size[24];
      size_text(need << i, size, sizeof(size));
      const char *form = t->choice == GCOLL_DIRECT_TUNE_DIRECT ? "direct" : "ring";
      int w = named ? snprintf(out + used, len - used, ", %s %s", size, form)
                    : snprintf(out + used, len - used, "%s%s %s %s", used ? "; " : "",
                               tune_kind_names[k], size, form);
      if (w < 0 || (size_t)w >= len - used) {
        used = len - 1;
        break;
      }
      used += (size_t)w;
      named = 1;
    }
  }
}

int gcoll_host_direct_candidate(struct gcoll_host_direct *d, const struct gcoll_host_coll *c,
                                int one_channel) {
  if (d->ops.min_bytes == 0 || d->off) return 0;
  if (c->coll == GCOLL_COLL_ALLREDUCE) {
    if (!one_channel || c->algo != GCOLL_ALGO_RING) return 0;
  } else if (c->coll != GCOLL_COLL_ALLGATHER && c->coll != GCOLL_COLL_BROADCAST) {
    return 0;
  }
  size_t bytes = call_bytes(d, c);
  const uint64_t need = form_start(d, c->coll);
  if (bytes < need) return 0;
  d->cur = NULL;
  if (d->ops.tune) {
    d->cur = tune_class(d, c, bytes, need);
    if (d->cur->choice == GCOLL_DIRECT_TUNE_RING) return 0;
  } else if (ring_faster(d, c, bytes)) {
    return 0;
  }
  if (d->skip > 0) {
    d->skip--;
    return 0;
  }
  d->calls++;
  return 1;
}

/* Every rank's descriptor, or status word, into table (nranks x bytes). */
static gcollResult_t exchange(struct gcoll_prims *p, const struct gcoll_ring_work *ring,
                              const void *mine, void *table, size_t bytes) {
  struct gcoll_ring_work w = *ring;
  w.sendbuf = mine;
  w.recvbuf = table;
  w.offset = 0;
  w.count = bytes;
  w.stride = bytes;
  return gcoll_ring_allgather(p, &w);
}

static void probe_peers(struct gcoll_host_direct *d) {
  d->probed = 1;
  for (int q = 0; q < d->nranks; q++)
    if (q != d->rank && d->ops.probe(d->ops.arg, q, d->descs[q].id) != 0) d->probed = -1;
}

/* Whether peers read [p, p + n) of this rank fast (host_direct.h: asked
 * once, remembered a while). */
static int cheap(struct gcoll_host_direct *d, const void *p, size_t n) {
  const uint64_t start = (uint64_t)(uintptr_t)p, end = start + n;
  for (int i = 0; i < GCOLL_DIRECT_CHEAP_RANGES; i++) {
    struct gcoll_direct_cheap_range *r = &d->cheap[i];
    if (r->end != 0 && r->start <= start && end <= r->end) {
      if (r->reuses < GCOLL_DIRECT_CHEAP_REUSES) {
        r->reuses++;
        return 1;
      }
      r->end = 0; /* asked again below */
    }
  }
  if (!d->ops.cheap(d->ops.arg, p, n)) return 0;
  if (n > 0) {
    d->cheap[d->cheap_next] = (struct gcoll_direct_cheap_range){.start = start, .end = end};
    d->cheap_next = (d->cheap_next + 1) % GCOLL_DIRECT_CHEAP_RANGES;
  }
  return 1;
}

/* The verdict every rank reaches from the same descriptors: 1 direct,
 * 0 ring this time. */
static int verdict(struct gcoll_host_direct *d, const struct gcoll_host_coll *c) {
  int all_probed = 1, all_read = 1, cheap = 1;
  for (int q = 0; q < d->nranks; q++) {
    uint32_t f = d->descs[q].flags;
    all_probed &= (f & DIRECT_PROBED) != 0;
    all_read &= (f & DIRECT_READS) != 0;
    if (c->coll != GCOLL_COLL_BROADCAST || q == c->root) cheap &= (f & DIRECT_CHEAP) != 0;
  }
  if (!all_read) {
    if (all_probed) d->off = 1; /* someone cannot read a peer: for good */
    return 0;
  }
  if (!cheap) {
    if (d->misses < DIRECT_MAX_SKIP_LOG2) d->misses++;
    d->skip = 1u << d->misses;
    return 0;
  }
  d->misses = 0;
  return 1;
}

/* A read's status word: 0, or the errno value in the low half and the
 * peer + 1 in the high half. */
static uint64_t read_ranges(struct gcoll_host_direct *d, int peer,
                            const struct gcoll_peer_range *r, int n) {
  int rc = n > 0 ? d->ops.read(d->ops.arg, d->descs[peer].id, r, n) : 0;
  return rc == 0 ? 0 : (uint64_t)(peer + 1) << 32 | (uint32_t)rc;
}

static uint64_t read_from(struct gcoll_host_direct *d, int peer, void *dst, size_t n) {
  struct gcoll_peer_range r = {.dst = dst, .addr = d->descs[peer].src, .n = n};
  return read_ranges(d, peer, &r, 1);
}

/* An allreduce's reduced blocks of peer q (the blocks of its ring
 * position in every loop, algo_ring.h), from its output into this
 * rank's, the ranges batched into few system calls. */
static uint64_t read_blocks(struct gcoll_host_direct *d, const struct gcoll_ring_work *ring,
                            const struct gcoll_host_coll *c, size_t chunk_max, int q) {
  const size_t es = gcoll_dtype_size(c->dtype), k = (size_t)d->nranks;
  struct gcoll_ring_work w = *ring;
  w.offset = 0;
  w.count = c->count;
  const int qpos = gcoll_ring_pos_of(ring, q);
  struct gcoll_peer_range r[GCOLL_PEER_RANGES_MAX];
  int n = 0;
  for (size_t base = 0; base < c->count; base += k * chunk_max) {
    size_t off, len;
    gcoll_ring_allreduce_block(&w, chunk_max, base, qpos, &off, &len);
    if (len == 0) continue;
    r[n++] = (struct gcoll_peer_range){.dst = (char *)c->recvbuf + off * es,
                                       .addr = d->descs[q].src + off * es, .n = len * es};
    if (n == GCOLL_PEER_RANGES_MAX) {
      uint64_t s = read_ranges(d, q, r, n);
      if (s != 0) return s;
      n = 0;
    }
  }
  return read_ranges(d, q, r, n);
}

/* This rank's reads: the first failure's status word, or 0. */
static uint64_t read_peers(struct gcoll_host_direct *d, const struct gcoll_ring_work *ring,
                           const struct gcoll_host_coll *c, size_t chunk_max) {
  size_t bytes = c->count * gcoll_dtype_size(c->dtype);
  char *out = c->recvbuf;
  if (c->coll == GCOLL_COLL_ALLREDUCE) {
    /* This rank's blocks are in place already. */
    for (int i = 1; i < d->nranks; i++) {
      uint64_t s = read_blocks(d, ring, c, chunk_max, (d->rank + i) % d->nranks);
      if (s != 0) return s;
    }
    return 0;
  }
  if (c->coll == GCOLL_COLL_BROADCAST) {
    if (d->rank == c->root) {
      if (c->sendbuf != c->recvbuf) memcpy(out, c->sendbuf, bytes);
      return 0;
    }
    return read_from(d, c->root, out, bytes);
  }
  char *own = out + (size_t)d->rank * bytes;
  if (c->sendbuf != own) memcpy(own, c->sendbuf, bytes);
  /* Each rank starts at its successor, so the readers of one input come
   * at different times. */
  for (int i = 1; i < d->nranks; i++) {
    int q = (d->rank + i) % d->nranks;
    uint64_t s = read_from(d, q, out + (size_t)q * bytes, bytes);
    if (s != 0) return s;
  }
  return 0;
}

gcollResult_t gcoll_host_direct_begin(struct gcoll_host_direct *d, struct gcoll_prims *p,
                                      const struct gcoll_ring_work *ring,
                                      const struct gcoll_host_coll *c, int *taken) {
  *taken = 1; /* a failed exchange fails the call */
  const int tuning = d->cur != NULL && d->cur->choice == GCOLL_DIRECT_TUNE_OPEN;
  d->timing = 0;
  struct gcoll_direct_desc mine;
  memset(&mine, 0, sizeof(mine));
  if (tuning) {
    d->t0 = tune_now(d);
    mine.ring_ns = d->cur->ring_ns;
    mine.direct_ns = d->cur->direct_ns;
  }
  d->ops.identity(d->ops.arg, mine.id);
  /* What peers read: an allreduce's reduced blocks are in its output. */
  const void *readable = c->coll == GCOLL_COLL_ALLREDUCE ? c->recvbuf : c->sendbuf;
  mine.src = (uint64_t)(uintptr_t)readable;
  if (d->probed != 0) mine.flags |= DIRECT_PROBED;
  if (d->probed > 0) mine.flags |= DIRECT_READS;
  size_t bytes = c->count * gcoll_dtype_size(c->dtype);
  if ((c->coll != GCOLL_COLL_BROADCAST || d->rank == c->root) &&
      cheap(d, readable, bytes))
    mine.flags |= DIRECT_CHEAP;
  gcollResult_t r = exchange(p, ring, &mine, d->descs, sizeof(mine));
  if (r != gcollSuccess) return r;
  int direct = verdict(d, c);
  if (d->probed == 0) probe_peers(d); /* for the next call's descriptor */
  if (direct && tuning) {
    direct = tune_step(d);
    /* The ring's time is its run alone (host_direct.h). */
    if (d->timing == GCOLL_DIRECT_TUNE_RING) d->t0 = tune_now(d);
  }
  *taken = direct;
  return gcollSuccess;
}

void gcoll_host_direct_ring_done(struct gcoll_host_direct *d, gcollResult_t r) {
  if (d->timing == GCOLL_DIRECT_TUNE_RING && r == gcollSuccess) tune_record(d);
  d->timing = 0;
}

gcollResult_t gcoll_host_direct_finish(struct gcoll_host_direct *d, struct gcoll_prims *p,
                                       const struct gcoll_ring_work *ring,
                                       const struct gcoll_host_coll *c, size_t chunk_max,
                                       char *err, size_t errlen) {
  gcollResult_t r;
  uint64_t status = 0;
  /* An allreduce's peers have reduced their blocks once they are here. */
  if (c->coll == GCOLL_COLL_ALLREDUCE &&
      (r = exchange(p, ring, &status, d->status, sizeof(status))) != gcollSuccess)
    return r;
  status = read_peers(d, ring, c, chunk_max);
  r = exchange(p, ring, &status, d->status, sizeof(status));
  if (r != gcollSuccess) {
    d->timing = 0;
    return r;
  }
  d->taken++;
  int clean = 1;
  for (int q = 0; q < d->nranks; q++) clean &= d->status[q] == 0;
  if (d->timing == GCOLL_DIRECT_TUNE_DIRECT && clean) tune_record(d);
  d->timing = 0;
  for (int q = 0; q < d->nranks; q++) {
    uint64_t s = d->status[q];
    if (s == 0) continue;
    int peer = (int)(s >> 32) - 1, e = (int)(uint32_t)s;
    if (q == d->rank) {
      gcoll_errf(err, errlen, "single-copy read of rank %d's buffer: %s", peer, strerror(e));
      return gcollSystemError;
    }
    gcoll_errf(err, errlen, "rank %d's single-copy read of rank %d's buffer: %s", q, peer,
               strerror(e));
    return gcollRemoteError;
  }
  return gcollSuccess;
}
