/* The one-shot board (see host_oneshot.h). */
#include "kernels/host_oneshot.h"

#include <string.h>

#include "common/errf.h"
#include "kernels/fifo.h"

static size_t lines_offset(void) { return sizeof(struct gcoll_oneshot_header); }
static size_t areas_offset(int nranks) {
  return lines_offset() + (size_t)nranks * sizeof(struct gcoll_oneshot_line);
}

size_t gcoll_oneshot_bytes(int nranks, uint64_t slot_bytes) {
  if (nranks < 1 || nranks > GCOLL_ONESHOT_MAX_RANKS || slot_bytes == 0 || slot_bytes % 64 != 0 ||
      slot_bytes > ((uint64_t)1 << 40))
    return 0;
  uint64_t areas = 2ull * (uint64_t)nranks * slot_bytes;
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

void gcoll_oneshot_bind(struct gcoll_oneshot *o, void *mem, int rank) {
  memset(o, 0, sizeof(*o));
  if (mem == NULL) return;
  o->hdr = mem;
  o->nranks = (int)o->hdr->nranks;
  o->slot_bytes = o->hdr->slot_bytes;
  o->lines = (void *)((char *)mem + lines_offset());
  o->areas = (char *)mem + areas_offset(o->nranks);
  o->rank = rank;
  o->calls = atomic_load_explicit(&o->lines[rank].arrived, memory_order_relaxed);
}

gcollResult_t gcoll_oneshot_exchange(struct gcoll_oneshot *o, struct gcoll_wait *w,
                                     const void *src, size_t nbytes, const char **area,
                                     int *waited_for, uint64_t *call) {
  uint64_t k = ++o->calls;
  char *a = o->areas + (size_t)(k & 1) * (size_t)o->nranks * o->slot_bytes;
  *call = k;
  if (nbytes > 0) memcpy(a + (size_t)o->rank * o->slot_bytes, src, nbytes);
  struct gcoll_oneshot_line *mine = &o->lines[o->rank];
  atomic_store_explicit(&mine->arrived, k, memory_order_release);
  gcoll_fifo_fence();
  gcoll_fifo_wake_if_asleep(&mine->arrived, &mine->asleep);
  /* Ranks after this one first: they are the likelier to still be on
   * their way, and the order changes only where this rank waits. */
  for (int i = 1; i < o->nranks; i++) {
    int r = (o->rank + i) % o->nranks;
    gcollResult_t rc = gcoll_wait_counter(w, &o->lines[r].arrived, k, &o->lines[r].asleep);
    if (rc != gcollSuccess) {
      *waited_for = r;
      return rc;
    }
  }
  *area = a;
  return gcollSuccess;
}
