/* Deterministic inputs and exact checking for gcoll-perf.
 *
 * Input element i of rank r is a hash of (seed, r, i), so any rank can
 * regenerate any other rank's input and compute the expected result alone,
 * with the independent serial reference (gcoll_reduce_reference), in blocks
 * so that checking needs only a small scratch area, not nranks buffers.
 *
 * Integers take the full hash bits: sum and prod wrap, and wrapping is
 * exact and order independent. Floating types take small integers: for
 * sum/avg, |value| <= K with nranks * K below the type's largest run of
 * consecutive integers (2^11 half, 2^8 bfloat16, 2^24 float, 2^53 double),
 * so every partial sum in any order is exact; for prod, values are +-1 or
 * +-2, whose partial products are exact powers of two or overflow to the
 * same infinity in every order. So results compare exactly, whatever order
 * the algorithm combined ranks in. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/reduce.h"
#include "launcher/gcoll_perf.h"

/* Elements per checking block: the scratch holds nranks + 1 blocks. */
#define BLOCK_BYTES_TOTAL ((size_t)8 << 20)
#define BLOCK_MIN_ELEMS 256
#define BLOCK_MAX_ELEMS ((size_t)64 << 10)
#define FLOAT_SPAN_CAP 1000

struct perf_data {
  int nranks;
  uint64_t seed;
  size_t block;        /* elements per block */
  unsigned char *rows; /* (nranks + 1) * block * 8 bytes */
  const void **in;     /* nranks pointers into rows */
};

struct perf_data *perf_data_new(int nranks, uint64_t seed) {
  if (nranks < 1) return NULL;
  struct perf_data *d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  d->nranks = nranks;
  d->seed = seed;
  size_t b = BLOCK_BYTES_TOTAL / 8 / ((size_t)nranks + 1);
  d->block = b < BLOCK_MIN_ELEMS ? BLOCK_MIN_ELEMS : b > BLOCK_MAX_ELEMS ? BLOCK_MAX_ELEMS : b;
  d->rows = malloc(((size_t)nranks + 1) * d->block * 8);
  d->in = malloc((size_t)nranks * sizeof(*d->in));
  if (d->rows == NULL || d->in == NULL) {
    perf_data_free(d);
    return NULL;
  }
  for (int r = 0; r < nranks; r++) d->in[r] = d->rows + (size_t)r * d->block * 8;
  return d;
}

void perf_data_free(struct perf_data *d) {
  if (d == NULL) return;
  free(d->rows);
  free(d->in);
  free(d);
}

void perf_data_reseed(struct perf_data *d, uint64_t seed) { d->seed = seed; }

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t elem_hash(uint64_t seed, int rank, size_t i) {
  return mix64(seed + 0x9e3779b97f4a7c15ull * ((uint64_t)i + 1) +
               0xd6e8feb86659fd93ull * (uint64_t)(rank + 1));
}

/* Largest N such that every integer of magnitude <= N is exact. */
static double exact_int_limit(gcollDataType_t t) {
  switch (t) {
  case gcollHalf: return 2048.0;
  case gcollBfloat16: return 256.0;
  case gcollFloat: return 16777216.0;
  default: return 9007199254740992.0;
  }
}

/* The small integer a floating-point input holds. Ranks beyond what the
 * exactness bound allows (only with hundreds of ranks and 16-bit types)
 * contribute 0 to sums. */
static double float_value(uint64_t h, int rank, int nranks, gcollDataType_t t, gcollRedOp_t op) {
  if (op == gcollProd) return (double)((h & 1) ? 1 : 2) * ((h & 2) ? -1.0 : 1.0);
  double limit = exact_int_limit(t);
  double span = FLOAT_SPAN_CAP < limit ? FLOAT_SPAN_CAP : limit;
  if (op == gcollSum || op == gcollAvg) {
    double per_rank = floor(limit / nranks);
    if (per_rank < 1) {
      if ((double)rank >= limit) return 0;
      per_rank = 1;
    }
    if (per_rank < span) span = per_rank;
  }
  uint64_t k = (uint64_t)span;
  return (double)(int64_t)(h % (2 * k + 1)) - (double)k;
}

static void store(void *buf, size_t i, uint64_t h, double f, gcollDataType_t t) {
  switch (t) {
  case gcollInt8: case gcollUint8: ((uint8_t *)buf)[i] = (uint8_t)h; break;
  case gcollInt32: case gcollUint32: ((uint32_t *)buf)[i] = (uint32_t)h; break;
  case gcollInt64: case gcollUint64: ((uint64_t *)buf)[i] = h; break;
  case gcollHalf: ((uint16_t *)buf)[i] = gcoll_float_to_half((float)f); break;
  case gcollBfloat16: ((uint16_t *)buf)[i] = gcoll_float_to_bf16((float)f); break;
  case gcollFloat: ((float *)buf)[i] = (float)f; break;
  case gcollDouble: ((double *)buf)[i] = f; break;
  default: break;
  }
}

static int is_float_type(gcollDataType_t t) {
  return t == gcollHalf || t == gcollBfloat16 || t == gcollFloat || t == gcollDouble;
}

void perf_data_fill(const struct perf_data *d, void *buf, int rank, size_t first, size_t count,
                    gcollDataType_t t, gcollRedOp_t op) {
  int fl = is_float_type(t);
  for (size_t i = 0; i < count; i++) {
    uint64_t h = elem_hash(d->seed, rank, first + i);
    store(buf, i, h, fl ? float_value(h, rank, d->nranks, t, op) : 0.0, t);
  }
}

static double load_float(const void *buf, size_t i, gcollDataType_t t) {
  switch (t) {
  case gcollHalf: return gcoll_half_to_float(((const uint16_t *)buf)[i]);
  case gcollBfloat16: return gcoll_bf16_to_float(((const uint16_t *)buf)[i]);
  case gcollFloat: return ((const float *)buf)[i];
  default: return ((const double *)buf)[i];
  }
}

/* Floating values compare by value (so +0 equals -0, which max/min may pick
 * either of), NaN equal to NaN; integers compare by bits. */
static size_t count_differences(const void *got, const void *want, size_t count,
                                gcollDataType_t t) {
  size_t wrong = 0;
  if (is_float_type(t)) {
    for (size_t i = 0; i < count; i++) {
      double g = load_float(got, i, t), w = load_float(want, i, t);
      if (!(g == w || (isnan(g) && isnan(w)))) wrong++;
    }
    return wrong;
  }
  size_t ts = gcoll_dtype_size(t);
  const unsigned char *g = got, *w = want;
  for (size_t i = 0; i < count; i++)
    if (memcmp(g + i * ts, w + i * ts, ts) != 0) wrong++;
  return wrong;
}

size_t perf_data_wrong_copy(struct perf_data *d, const void *got, int rank, size_t first,
                            size_t count, gcollDataType_t t, gcollRedOp_t op) {
  size_t ts = gcoll_dtype_size(t), wrong = 0;
  unsigned char *want = d->rows;
  for (size_t done = 0; done < count; done += d->block) {
    size_t n = count - done < d->block ? count - done : d->block;
    perf_data_fill(d, want, rank, first + done, n, t, op);
    wrong += count_differences((const unsigned char *)got + done * ts, want, n, t);
  }
  return wrong;
}

size_t perf_data_wrong_reduced(struct perf_data *d, const void *got, size_t first, size_t count,
                               gcollDataType_t t, gcollRedOp_t op) {
  size_t ts = gcoll_dtype_size(t), wrong = 0;
  unsigned char *want = d->rows + (size_t)d->nranks * d->block * 8;
  for (size_t done = 0; done < count; done += d->block) {
    size_t n = count - done < d->block ? count - done : d->block;
    for (int r = 0; r < d->nranks; r++)
      perf_data_fill(d, (void *)d->in[r], r, first + done, n, t, op);
    gcoll_reduce_reference(want, d->in, d->nranks, n, t, op);
    wrong += count_differences((const unsigned char *)got + done * ts, want, n, t);
  }
  return wrong;
}

size_t perf_data_wrong_untouched(const void *got, size_t count, gcollDataType_t t) {
  size_t ts = gcoll_dtype_size(t), wrong = 0;
  const unsigned char *g = got;
  for (size_t i = 0; i < count; i++)
    for (size_t b = 0; b < ts; b++)
      if (g[i * ts + b] != PERF_POISON_BYTE) {
        wrong++;
        break;
      }
  return wrong;
}
