/* The pmi2 bootstrap's mapping of keys and binary values onto PMI2's
 * string limits: published test vectors (RFC 4648 base64url, FNV-1a 64),
 * round trips of random values at every part boundary, PMI2's length and
 * character limits on everything written, distinct PMI2 keys for distinct
 * (key, part) pairs, and rejection of malformed strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/bootstrap.h"
#include "runtime/pmi2_codec.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

static uint8_t value[GCOLL_BOOTSTRAP_MAX_VALUE], back[GCOLL_BOOTSTRAP_MAX_VALUE];
static char enc[GCOLL_PMI2_VALLEN];

/* Part 0 of a value shorter than one part is "<len>," and its base64url. */
static void expect_head(const char *raw, const char *b64) {
  char want[64];
  snprintf(want, sizeof(want), "%zu,%s", strlen(raw), b64);
  gcoll_pmi2_encode_part(raw, strlen(raw), 0, enc);
  assert_string_equal(enc, want);
}

static void test_vectors(void **state) {
  (void)state;
  /* RFC 4648 section 10, without the padding. */
  expect_head("", "");
  expect_head("f", "Zg");
  expect_head("fo", "Zm8");
  expect_head("foo", "Zm9v");
  expect_head("foob", "Zm9vYg");
  expect_head("fooba", "Zm9vYmE");
  expect_head("foobar", "Zm9vYmFy");
  /* The two characters where base64url differs from base64. */
  const uint8_t hi[] = {0xfb, 0xff, 0xbf}, mix[] = {0, 1, 2, 3, 0xfe};
  gcoll_pmi2_encode_part(hi, sizeof(hi), 0, enc);
  assert_string_equal(enc, "3,-_-_");
  gcoll_pmi2_encode_part(mix, sizeof(mix), 0, enc);
  assert_string_equal(enc, "5,AAECA_4");
  /* FNV-1a 64 reference values. */
  assert_true(gcoll_fnv1a64(GCOLL_FNV1A64_INIT, "", 0) == 0xcbf29ce484222325ull);
  assert_true(gcoll_fnv1a64(GCOLL_FNV1A64_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
  assert_true(gcoll_fnv1a64(GCOLL_FNV1A64_INIT, "foobar", 6) == 0x85944171f73967e8ull);
  /* Hashing in pieces is hashing the whole. */
  assert_true(gcoll_fnv1a64(gcoll_fnv1a64(GCOLL_FNV1A64_INIT, "foo", 3), "bar", 3) ==
              0x85944171f73967e8ull);
}

/* Everything sent to PMI2 must fit PMI2_MAX_VALLEN with its NUL and avoid
 * the characters of its wire format. */
static void assert_pmi2_safe(const char *s) {
  assert_true(strlen(s) < GCOLL_PMI2_VALLEN);
  for (const char *p = s; *p; p++) assert_non_null(strchr("0123456789,ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                          "abcdefghijklmnopqrstuvwxyz-_", *p));
}

static void round_trip(size_t len) {
  for (size_t i = 0; i < len; i++) value[i] = (uint8_t)rnd();
  memset(back, 0xa5, sizeof(back));
  int nparts = gcoll_pmi2_nparts(len);
  assert_int_equal(nparts, len == 0 ? 1 : (int)((len + 755) / 756));
  size_t total = 12345, sum = 0;
  char err[256];
  for (int part = 0; part < nparts; part++) {
    gcoll_pmi2_encode_part(value, len, part, enc);
    assert_pmi2_safe(enc);
    uint8_t *out = back + (size_t)part * GCOLL_PMI2_PART_BYTES;
    if (part == 0)
      assert_int_equal(gcoll_pmi2_decode_head(enc, &total, out, err, sizeof(err)), 0);
    else
      assert_int_equal(gcoll_pmi2_decode_part(enc, len, part, out, err, sizeof(err)), 0);
    sum += gcoll_pmi2_part_len(len, part);
  }
  assert_int_equal(total, len);
  assert_int_equal(sum, len);
  assert_memory_equal(back, value, len);
  /* Nothing written past the value. */
  if (len < sizeof(back)) assert_int_equal(back[len], 0xa5);
}

static void test_round_trips(void **state) {
  (void)state;
  const size_t edges[] = {0, 1, 2, 3, 4, 127, 128, 755, 756, 757, 1511, 1512, 1513,
                          GCOLL_BOOTSTRAP_MAX_VALUE - 1, GCOLL_BOOTSTRAP_MAX_VALUE};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) round_trip(edges[i]);
  for (int i = 0; i < 200; i++) round_trip(rnd() % (GCOLL_BOOTSTRAP_MAX_VALUE + 1));
}

static void test_keys(void **state) {
  (void)state;
  char k[GCOLL_PMI2_KEY_BUF];
  gcoll_pmi2_part_key("conn/3/12/5", 0, k);
  assert_string_equal(k, "conn/3/12/5");
  gcoll_pmi2_part_key("conn/3/12/5", 86, k);
  assert_string_equal(k, "conn/3/12/5#86");
  /* Keys PMI2 cannot take as they are become '#' and their hash. */
  char longkey[GCOLL_BOOTSTRAP_MAX_KEY];
  memset(longkey, 'x', sizeof(longkey) - 1);
  longkey[sizeof(longkey) - 1] = '\0';
  const char *hashed[] = {"a=b", "a;b", "a b", "a#1", "\x7f", longkey};
  for (size_t i = 0; i < sizeof(hashed) / sizeof(hashed[0]); i++) {
    gcoll_pmi2_part_key(hashed[i], 0, k);
    char want[32];
    snprintf(want, sizeof(want), "#%016llx",
             (unsigned long long)gcoll_fnv1a64(GCOLL_FNV1A64_INIT, hashed[i], strlen(hashed[i])));
    assert_string_equal(k, want);
  }
  longkey[GCOLL_PMI2_DIRECT_KEY_MAX] = '\0';
  gcoll_pmi2_part_key(longkey, 0, k);
  assert_string_equal(k, longkey);
  longkey[GCOLL_PMI2_DIRECT_KEY_MAX] = 'x';
  longkey[GCOLL_PMI2_DIRECT_KEY_MAX + 1] = '\0';
  gcoll_pmi2_part_key(longkey, 0, k);
  assert_int_equal(k[0], '#');
}

static int cmp_str(const void *a, const void *b) { return strcmp(a, b); }

/* Distinct (key, part) pairs never share a PMI2 key, even for keys that
 * look like part keys or hashes, and every PMI2 key fits PMI2_MAX_KEYLEN. */
static void test_keys_distinct(void **state) {
  (void)state;
  char h[32];
  snprintf(h, sizeof(h), "#%016llx",
           (unsigned long long)gcoll_fnv1a64(GCOLL_FNV1A64_INIT, "a=b", 3));
  char longkey[GCOLL_PMI2_DIRECT_KEY_MAX + 1];
  memset(longkey, 'y', sizeof(longkey) - 1);
  longkey[sizeof(longkey) - 1] = '\0';
  const char *keys[] = {"a", "a#1", "a#01", "a=b", h, "conn/0/1/4", "conn/0/1/4#1", longkey,
                        "job/lost-rank", "#", "b"};
  enum { NKEYS = sizeof(keys) / sizeof(keys[0]), NPARTS = 87 };
  assert_int_equal(gcoll_pmi2_nparts(GCOLL_BOOTSTRAP_MAX_VALUE), NPARTS);
  static char all[NKEYS * NPARTS][GCOLL_PMI2_KEY_BUF];
  for (int i = 0; i < NKEYS; i++)
    for (int p = 0; p < NPARTS; p++) {
      char *k = all[i * NPARTS + p];
      gcoll_pmi2_part_key(keys[i], p, k);
      assert_true(strlen(k) >= 1 && strlen(k) <= GCOLL_PMI2_KEYLEN);
      for (const char *c = k; *c; c++) assert_true(*c > ' ' && *c <= '~' && *c != '=' && *c != ';');
    }
  qsort(all, NKEYS * NPARTS, sizeof(all[0]), cmp_str);
  for (int i = 1; i < NKEYS * NPARTS; i++) assert_string_not_equal(all[i - 1], all[i]);
}

static void expect_bad_head(const char *s) {
  size_t total;
  uint8_t out[GCOLL_PMI2_PART_BYTES];
  char err[256] = "";
  if (gcoll_pmi2_decode_head(s, &total, out, err, sizeof(err)) == 0)
    fail_msg("accepted part 0 '%s'", s);
  assert_true(err[0] != '\0' && strchr(err, '\n') == NULL);
}

static void test_malformed(void **state) {
  (void)state;
  expect_bad_head("");
  expect_bad_head(",");
  expect_bad_head("Zg");          /* no length */
  expect_bad_head("01,Zg");       /* leading zero */
  expect_bad_head("2,Zg");        /* too short */
  expect_bad_head("1,Zm8");       /* too long */
  expect_bad_head("1,Zh");        /* non-canonical: stray low bits */
  expect_bad_head("1,Z=");
  expect_bad_head("1,Zg=");       /* padding is not written */
  expect_bad_head("3,Zm9+");      /* '+' is base64, not base64url */
  expect_bad_head("65537,");      /* above GCOLL_BOOTSTRAP_MAX_VALUE */
  expect_bad_head("1000000,");
  expect_bad_head("-1,");
  char err[256];
  uint8_t out[GCOLL_PMI2_PART_BYTES];
  /* Part 1 of a 760-byte value is 4 bytes: "AAAAAA" is the encoding of 4
   * zero bytes; one character less or more is not. */
  assert_int_equal(gcoll_pmi2_decode_part("AAAAAA", 760, 1, out, err, sizeof(err)), 0);
  assert_int_equal(gcoll_pmi2_decode_part("AAAAA", 760, 1, out, err, sizeof(err)), -1);
  assert_int_equal(gcoll_pmi2_decode_part("AAAAAAA", 760, 1, out, err, sizeof(err)), -1);
  /* A part the value does not have. */
  assert_int_equal(gcoll_pmi2_decode_part("AAAAAA", 760, 2, out, err, sizeof(err)), -1);
  assert_int_equal(gcoll_pmi2_decode_part("", 760, 0, out, err, sizeof(err)), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vectors),       cmocka_unit_test(test_round_trips),
      cmocka_unit_test(test_keys),          cmocka_unit_test(test_keys_distinct),
      cmocka_unit_test(test_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
