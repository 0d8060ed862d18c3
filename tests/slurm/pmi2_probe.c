/* Drives the bootstrap chosen by the environment (under srun --mpi=pmi2:
 * pmi2, which finds rank 0's store through PMI2 and then talks to it)
 * through the contract: values of 0..65536 bytes, long keys with odd
 * characters, a key nobody put, the reserved lost-rank key, barrier. Every
 * rank checks what it reads against the bytes its neighbour must have
 * written and prints one line:
 *   pmi2_probe: rank R of N ok: job key K, open A ms, fence B ms, gets C ms,
 *   barrier D ms, missing-key error after E ms: <message>
 *   pmi2_probe: rank R: second open refused: <message>
 * or "pmi2_probe: rank R: FAIL: <reason>" (exit 1). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/bootstrap.h"

static const size_t sizes[] = {0, 1, 128, 755, 756, 757, 4000, GCOLL_BOOTSTRAP_MAX_VALUE};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* The bytes rank r publishes under its i-th key. */
static void pattern(uint8_t *buf, size_t len, int r, size_t i) {
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1) + i;
  for (size_t k = 0; k < len; k++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    buf[k] = (uint8_t)x;
  }
}

/* Plain keys, and long ones with characters PMI2 itself could not take
 * ('=' ';' '#'). */
static void key_of(char *key, size_t keylen, int r, size_t i) {
  if (i % 2 == 0)
    snprintf(key, keylen, "probe/%d/%zu", r, i);
  else
    snprintf(key, keylen, "probe/%d/%zu/with=odd;chars#and_a_length_well_beyond_what_PMI2_"
                          "accepts_as_a_key,_64_characters", r, i);
}

static double ms_since(uint64_t t0) { return (double)(gcoll_bootstrap_now_ms() - t0); }

static int fail(int rank, const char *what, const char *err) {
  printf("pmi2_probe: rank %d: FAIL: %s: %s\n", rank, what, err);
  return 1;
}

int main(void) {
  static uint8_t want[GCOLL_BOOTSTRAP_MAX_VALUE], got[GCOLL_BOOTSTRAP_MAX_VALUE];
  char err[512], key[GCOLL_BOOTSTRAP_MAX_KEY];
  struct gcoll_bootstrap *bs;
  uint64_t t0 = gcoll_bootstrap_now_ms();
  if (gcoll_bootstrap_open_from_env(&bs, err, sizeof(err)) != 0) return fail(-1, "open", err);
  double open_ms = ms_since(t0);
  int rank = bs->rank, peer = (bs->rank + 1) % bs->nranks, rc = 1;
  const char *bs_name = bs->backend;
  for (size_t i = 0; i < NSIZES; i++) {
    pattern(want, sizes[i], rank, i);
    key_of(key, sizeof(key), rank, i);
    if (gcoll_bootstrap_put(bs, key, want, sizes[i], err, sizeof(err)) != 0) {
      rc = fail(rank, "put", err);
      goto out;
    }
  }
  t0 = gcoll_bootstrap_now_ms();
  if (gcoll_bootstrap_fence(bs, gcoll_bootstrap_deadline(bs), err, sizeof(err)) != 0) {
    rc = fail(rank, "fence", err);
    goto out;
  }
  double fence_ms = ms_since(t0);
  t0 = gcoll_bootstrap_now_ms();
  for (size_t i = 0; i < NSIZES; i++) {
    size_t len = 12345;
    key_of(key, sizeof(key), peer, i);
    pattern(want, sizes[i], peer, i);
    if (gcoll_bootstrap_get(bs, key, got, sizeof(got), &len, gcoll_bootstrap_deadline(bs), err,
                            sizeof(err)) != 0) {
      rc = fail(rank, "get", err);
      goto out;
    }
    if (len != sizes[i] || memcmp(got, want, len) != 0) {
      snprintf(err, sizeof(err), "'%s': %zu bytes read, %zu written, or other bytes", key, len,
               sizes[i]);
      rc = fail(rank, "get", err);
      goto out;
    }
  }
  double gets_ms = ms_since(t0);
  /* No rank was lost, so the reserved key has no answer; a key nobody put
   * fails at its deadline (a second here), not later. */
  size_t len;
  if (gcoll_bootstrap_get(bs, GCOLL_BOOTSTRAP_LOST_RANK_KEY, got, sizeof(got), &len,
                          gcoll_bootstrap_now_ms() + 300, err, sizeof(err)) == 0) {
    rc = fail(rank, "lost-rank key", "answered, but no rank was lost");
    goto out;
  }
  char missing[512];
  t0 = gcoll_bootstrap_now_ms();
  if (gcoll_bootstrap_get(bs, "probe/nobody-puts-this", got, sizeof(got), &len,
                          gcoll_bootstrap_now_ms() + 1000, missing, sizeof(missing)) == 0) {
    rc = fail(rank, "missing key", "found");
    goto out;
  }
  if (ms_since(t0) > 3000) {
    rc = fail(rank, "missing key", "its error came more than 2 s after the deadline");
    goto out;
  }
  double missing_ms = ms_since(t0);
  t0 = gcoll_bootstrap_now_ms();
  if (gcoll_bootstrap_barrier(bs, gcoll_bootstrap_deadline(bs), err, sizeof(err)) != 0) {
    rc = fail(rank, "barrier", err);
    goto out;
  }
  printf("pmi2_probe: rank %d of %d ok: backend %s, job key %s, open %.0f ms, fence %.0f ms, "
         "gets %.0f ms, barrier %.0f ms, missing-key error after %.0f ms: %s\n",
         rank, bs->nranks, bs->backend, bs->job_key ? bs->job_key : "(none)", open_ms, fence_ms,
         gets_ms, ms_since(t0), missing_ms, missing);
  rc = 0;
out:
  gcoll_bootstrap_close(bs);
  /* libpmi2 closed PMI_FD in PMI2_Finalize: a second open must refuse,
   * not talk to whatever file now has that number. */
  if (rc == 0 && strcmp(bs_name, "pmi2") == 0) {
    if (gcoll_bootstrap_open_from_env(&bs, err, sizeof(err)) == 0) {
      gcoll_bootstrap_close(bs);
      return fail(rank, "second open", "succeeded after PMI2_Finalize");
    }
    printf("pmi2_probe: rank %d: second open refused: %s\n", rank, err);
  }
  return rc;
}
