/* The one-shot board (see host_oneshot.h). */
#include "kernels/host_oneshot.h"

#include <stdlib.h>
#include <string.h>

#include "common/errf.h"
#include "kernels/fifo.h"

static size_t lines_offset(void) { return sizeof(struct gcoll_oneshot_header); }
static size_t tiny_offset(int nranks) {
  return lines_offset() + (size_t)nranks * sizeof(struct gcoll_oneshot_line);
}
static size_t small_areas_offset(int nranks) {
  return tiny_offset(nranks) + (size_t)gcoll_oneshot_small_areas(nranks) * (size_t)nranks *
                                   sizeof(struct gcoll_oneshot_tiny);
}
static size_t areas_offset(int nranks) {
  return small_areas_offset(nranks) +
         (size_t)gcoll_oneshot_small_areas(nranks) * (size_t)nranks * GCOLL_ONESHOT_SMALL_SLOT;
}

size_t gcoll_oneshot_bytes(int nranks, uint64_t slot_bytes) {
  if (nranks < 1 || nranks > GCOLL_ONESHOT_MAX_RANKS || slot_bytes == 0 || slot_bytes % 64 != 0 ||
      slot_bytes > ((uint64_t)1 << 40))
    return 0;
  uint64_t areas = (uint64_t)GCOLL_ONESHOT_AREAS * (uint64_t)nranks * slot_bytes;
  if (areas > SIZE_MAX - areas_offset(nranks)) return 0;
  return areas_offset(nranks) + (size_t)areas;
}

void gcoll_oneshot_format(void *mem, int nranks, uint64_t slot_bytes) {
  struct gcoll_oneshot_header *h = mem;
  h->nranks = (uint32_t)nranks;
  h->slot_bytes = slot_bytes;
  atomic_init(&h->attached, 0);
  struct gcoll_oneshot_line *lines = (void *)((char *)mem + lines_offset());
  for (int r = 0; r < nranks; r++) {
    atomic_init(&lines[r].arrived, 0);
    atomic_init(&lines[r].asleep, 0);
  }
  h->version = GCOLL_ONESHOT_VERSION;
  /* Last: a board whose magic is in place is whole. */
  atomic_thread_fence(memory_order_release);
  h->magic = GCOLL_ONESHOT_MAGIC;
}

int gcoll_oneshot_check(const void *mem, size_t bytes, int nranks, char *err, size_t errlen) {
  const struct gcoll_oneshot_header *h = mem;
  if (mem == NULL || bytes < sizeof(*h)) {
    gcoll_errf(err, errlen, "one-shot board of %zu bytes: too small", bytes);
    return -1;
  }
  if (h->magic != GCOLL_ONESHOT_MAGIC || h->version != GCOLL_ONESHOT_VERSION) {
    gcoll_errf(err, errlen, "not a gcoll one-shot board (magic %08x, version %u)",
               (unsigned)h->magic, (unsigned)h->version);
    return -1;
  }
  if ((int)h->nranks != nranks || gcoll_oneshot_bytes(nranks, h->slot_bytes) != bytes) {
    gcoll_errf(err, errlen, "one-shot board for %u ranks with %llu-byte slots in %zu bytes, "
               "expected %d ranks", (unsigned)h->nranks, (unsigned long long)h->slot_bytes,
               bytes, nranks);
    return -1;
  }
  return 0;
}

int gcoll_oneshot_bind(struct gcoll_oneshot *o, void *mem, int rank) {
  memset(o, 0, sizeof(*o));
  if (mem == NULL) return 0;
  struct gcoll_oneshot_header *h = mem;
  o->known = calloc(h->nranks, sizeof(*o->known));
  if (o->known == NULL) return -1;
  o->hdr = h;
  o->nranks = (int)h->nranks;
  o->slot_bytes = h->slot_bytes;
  o->lines = (void *)((char *)mem + lines_offset());
  o->tiny = (void *)((char *)mem + tiny_offset(o->nranks));
  o->small_areas = (char *)mem + small_areas_offset(o->nranks);
  o->areas = (char *)mem + areas_offset(o->nranks);
  o->rank = rank;
  o->calls = atomic_load_explicit(&o->lines[rank].arrived, memory_order_relaxed);
  return 0;
}

void gcoll_oneshot_unbind(struct gcoll_oneshot *o) {
  free(o->known);
  memset(o, 0, sizeof(*o));
}

/* Asks for p's line in a state this core may write (PREFETCHW; older x86
 * cores run it as a no-op). */
static inline void prefetch_for_write(const void *p) {
#if defined(__x86_64__)
  __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

/* The tiny lines of call k, one per rank: tiny calls take the small
 * set's turns. */
static inline struct gcoll_oneshot_tiny *tiny_lines_of(const struct gcoll_oneshot *o, uint64_t k) {
  return o->tiny + (size_t)(k % gcoll_oneshot_small_areas(o->nranks)) * (size_t)o->nranks;
}

/* Waits until rank r has arrived at target (acquire), noting it. */
static gcollResult_t wait_arrived(struct gcoll_oneshot *o, struct gcoll_wait *w, int r,
                                  uint64_t target) {
  if (o->known[r] >= target) return gcollSuccess;
  gcollResult_t rc =
      gcoll_wait_counter_shared(w, &o->lines[r].arrived, target, &o->lines[r].asleep);
  /* All it has arrived at: fewer looks at its line later. */
  if (rc == gcollSuccess)
    o->known[r] = atomic_load_explicit(&o->lines[r].arrived, memory_order_acquire);
  return rc;
}

/* The same through rank r's tiny line of call k (t: the call's area of
 * them): its input comes with it. A rank writes it in call k only once
 * done with call k-1, so it has arrived at k. */
static gcollResult_t wait_tiny(struct gcoll_oneshot *o, struct gcoll_wait *w, int r,
                               struct gcoll_oneshot_tiny *t, uint64_t k) {
  /* Known from its counter (loaded with acquire, stored after the line):
   * the line is call k's until this rank arrives at k + 1. */
  if (o->known[r] >= k) return gcollSuccess;
  gcollResult_t rc = gcoll_wait_counter_shared(w, &t[r].call, k, &o->lines[r].asleep);
  if (rc == gcollSuccess) o->known[r] = k;
  return rc;
}

/* Before call k writes its area, rank r must be done with the area's
 * last use, call k - depth: arrived at need = k - depth + 1. A rank that
 * waits for nobody (a broadcast's root, a reduce's leaves) meets that
 * limit on every call once it is depth - 1 calls ahead, and looking at
 * r's counter each call moved that line between the cores twice a call
 * (r's store, our load) on top of the data: in a 2-rank 8 B broadcast,
 * r's load of its own sleep flag on that line was most of r's time on
 * the board. So a rank that
 * must wait waits for half the areas more (target <= k - 1: r needs
 * nothing from this rank's call k to get there), and the next depth / 2
 * calls pass on known[]. And where the target call was tiny it waits on
 * r's tiny line of that call, which r writes once for it, instead of
 * r's counter, which r writes every call: r's counter line then stays
 * in r's cache. A tiny line of that area holding a later call means r
 * went further still. */
static gcollResult_t wait_reusable(struct gcoll_oneshot *o, struct gcoll_wait *w, int r,
                                   uint64_t k, uint64_t depth) {
  if (o->known[r] >= k - depth + 1) return gcollSuccess;
  const uint64_t target = k - depth / 2;
  if (!(o->tiny_calls >> (target % 64) & 1)) return wait_arrived(o, w, r, target);
  struct gcoll_oneshot_tiny *t = tiny_lines_of(o, target);
  gcollResult_t rc = gcoll_wait_counter_shared(w, &t[r].call, target, &o->lines[r].asleep);
  if (rc == gcollSuccess && o->known[r] < target) o->known[r] = target;
  return rc;
}

gcollResult_t gcoll_oneshot_run(struct gcoll_oneshot *o, struct gcoll_wait *w,
                                const struct gcoll_oneshot_part *part, const char **area,
                                size_t *stride, int *waited_for, uint64_t *call) {
  const uint64_t k = ++o->calls;
  /* Small and large calls have areas of their own, each reused only by
   * calls as many apart as its set has areas: the guard below covers
   * both. Tiny calls take the small set's turn with their lines. */
  const int small = part->need <= GCOLL_ONESHOT_SMALL_SLOT;
  const int tiny = part->need <= GCOLL_ONESHOT_TINY_BYTES;
  const size_t step = tiny    ? sizeof(struct gcoll_oneshot_tiny)
                      : small ? GCOLL_ONESHOT_SMALL_SLOT
                              : (size_t)o->slot_bytes;
  const uint64_t depth = small ? gcoll_oneshot_small_areas(o->nranks) : GCOLL_ONESHOT_AREAS;
  struct gcoll_oneshot_tiny *t = tiny_lines_of(o, k);
  char *a = tiny ? (char *)t
                 : (small ? o->small_areas : o->areas) +
                       (size_t)(k % depth) * (size_t)o->nranks * step;
  *call = k;
  /* Which of the last 64 calls were tiny: the same on every rank. */
  const uint64_t bit = (uint64_t)1 << (k % 64);
  o->tiny_calls = tiny ? o->tiny_calls | bit : o->tiny_calls & ~bit;
  if (part->nbytes > 0) {
    /* Everybody done with the area's last use: arrived there or beyond.
     * Ranks that this rank waited for in the last calls are known to be. */
    if (k > depth)
      for (int i = 1; i < o->nranks; i++) {
        int r = (o->rank + i) % o->nranks;
        gcollResult_t rc = wait_reusable(o, w, r, k, depth);
        if (rc != gcollSuccess) {
          *waited_for = r;
          return rc;
        }
      }
    memcpy(a + (size_t)o->rank * step, part->src, part->nbytes);
  }
  struct gcoll_oneshot_line *mine = &o->lines[o->rank];
  if (tiny) atomic_store_explicit(&t[o->rank].call, k, memory_order_release);
  atomic_store_explicit(&mine->arrived, k, memory_order_release);
  gcoll_fifo_fence();
  /* One flag for both counters: whoever sleeps on either is woken. */
  if (gcoll_fifo_take_asleep(&mine->asleep)) {
    gcoll_wait_wake(&mine->arrived);
    if (tiny) gcoll_wait_wake(&t[o->rank].call);
  }
  /* A rank that waits for nobody (a broadcast's root, a reduce's leaves)
   * runs ahead of its readers, and its next call's line is in the cache
   * of the core that read it depth calls ago: each call's store then
   * waited for that line, and with the call's other stores queued behind
   * it the root stalled (a third of its time in a 2-rank 8 B broadcast).
   * Asked for now, the line travels while this call returns. A rank that
   * waits for others does not: they poll its next line already, and
   * taking it from them measured 1.02-1.04x slower 2-rank allreduces. */
  if (tiny && part->nbytes > 0 && part->sources == GCOLL_ONESHOT_NONE)
    prefetch_for_write(&tiny_lines_of(o, k + 1)[o->rank]);
  /* Ranks after this one first: they are the likelier to still be on
   * their way, and the order changes only where this rank waits. */
  for (int i = 1; i < o->nranks; i++) {
    int r = (o->rank + i) % o->nranks;
    if (part->sources != GCOLL_ONESHOT_ALL && part->sources != r) continue;
    gcollResult_t rc = tiny ? wait_tiny(o, w, r, t, k) : wait_arrived(o, w, r, k);
    if (rc != gcollSuccess) {
      *waited_for = r;
      return rc;
    }
  }
  *area = a;
  *stride = step;
  return gcollSuccess;
}
