/* The bootstrap KVS wire format: round trips of random valid requests,
 * and rejection of every truncation, every oversized field and random
 * corruption. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/kvs_proto.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

static uint8_t msg[KVS_MAX_MSG + 64];
static char keybuf[KVS_MAX_KEY + 8];
static uint8_t noncebuf[KVS_NONCE_BYTES], tagbuf[KVS_TAG_BYTES];
static uint8_t valbuf[KVS_MAX_VALUE + 8];

static void random_printable(char *s, size_t n) {
  for (size_t i = 0; i < n; i++) s[i] = (char)(0x21 + rnd() % (0x7f - 0x21));
}

static struct kvs_request random_request(void) {
  struct kvs_request r;
  memset(&r, 0, sizeof(r));
  r.op = (enum kvs_op)(KVS_OP_HELLO + rnd() % KVS_OP_LAST);
  for (size_t i = 0; i < sizeof(noncebuf); i++) noncebuf[i] = (uint8_t)rnd();
  for (size_t i = 0; i < sizeof(tagbuf); i++) tagbuf[i] = (uint8_t)rnd();
  r.nonce = noncebuf;
  r.tag = tagbuf;
  r.key_len = 1 + (rnd() % 4 == 0 ? KVS_MAX_KEY - 1 : rnd() % 40);
  random_printable(keybuf, r.key_len);
  r.key = keybuf;
  r.value_len = rnd() % 8 == 0 ? KVS_MAX_VALUE : rnd() % 3000;
  for (size_t i = 0; i < r.value_len; i++) valbuf[i] = (uint8_t)rnd();
  r.value = valbuf;
  r.nranks = 1 + rnd() % 1000;
  r.rank = rnd() % r.nranks;
  r.timeout_ms = rnd() % (KVS_MAX_TIMEOUT_MS + 1);
  return r;
}

static int decode_msg(const uint8_t *m, size_t len, struct kvs_request *out, char *err) {
  struct kvs_header h;
  if (len < KVS_HEADER_LEN || gcoll_kvs_header_decode(m, 0, &h, err, 256) != 0) return -1;
  if (h.body_len != len - KVS_HEADER_LEN) {
    snprintf(err, 256, "length mismatch");
    return -1;
  }
  return gcoll_kvs_request_decode(h.op, m + KVS_HEADER_LEN, h.body_len, out, err, 256);
}

static void test_round_trip(void **state) {
  char err[256];
  for (int iter = 0; iter < 2000; iter++) {
    struct kvs_request r = random_request(), d;
    size_t n = gcoll_kvs_request_encode(&r, msg, sizeof(msg), err, sizeof(err));
    assert_true(n >= KVS_HEADER_LEN);
    assert_int_equal(decode_msg(msg, n, &d, err), 0);
    assert_int_equal(d.op, r.op);
    if (r.op == KVS_OP_PUT || r.op == KVS_OP_GET) {
      assert_int_equal(d.key_len, r.key_len);
      assert_memory_equal(d.key, r.key, r.key_len);
    }
    if (r.op == KVS_OP_PUT) {
      assert_int_equal(d.value_len, r.value_len);
      if (r.value_len) assert_memory_equal(d.value, r.value, r.value_len);
    }
    if (r.op == KVS_OP_HELLO) {
      assert_int_equal(d.rank, r.rank);
      assert_int_equal(d.nranks, r.nranks);
      assert_memory_equal(d.nonce, r.nonce, KVS_NONCE_BYTES);
      assert_memory_equal(d.tag, r.tag, KVS_TAG_BYTES);
    }
    if (r.op == KVS_OP_GET || r.op == KVS_OP_FENCE || r.op == KVS_OP_BARRIER)
      assert_int_equal(d.timeout_ms, r.timeout_ms);
  }
}

/* Every proper prefix of a valid body, and every body with a byte added,
 * is refused: lengths are exact. */
static void test_truncated_and_trailing(void **state) {
  char err[256];
  for (int iter = 0; iter < 200; iter++) {
    struct kvs_request r = random_request(), d;
    if (r.op == KVS_OP_PUT) r.value_len %= 200; /* keep the prefix loop short */
    size_t n = gcoll_kvs_request_encode(&r, msg, sizeof(msg), err, sizeof(err));
    size_t body = n - KVS_HEADER_LEN;
    for (size_t cut = 0; cut < body; cut++)
      assert_int_equal(gcoll_kvs_request_decode((uint16_t)r.op, msg + KVS_HEADER_LEN, cut, &d, err,
                                                sizeof(err)), -1);
    msg[n] = 0x41;
    assert_int_equal(gcoll_kvs_request_decode((uint16_t)r.op, msg + KVS_HEADER_LEN, body + 1, &d, err,
                                              sizeof(err)), -1);
    assert_non_null(strstr(err, "trailing"));
  }
}

static void test_oversized_fields(void **state) {
  char err[256];
  struct kvs_request r = random_request(), d;
  r.op = KVS_OP_PUT;
  r.key_len = 10;
  r.value_len = 10;
  size_t n = gcoll_kvs_request_encode(&r, msg, sizeof(msg), err, sizeof(err));
  assert_true(n > 0);
  /* The encoder refuses what the decoder would refuse. */
  r.value_len = KVS_MAX_VALUE + 1;
  assert_int_equal(gcoll_kvs_request_encode(&r, msg, sizeof(msg), err, sizeof(err)), 0);
  r.value_len = 10;
  r.key_len = KVS_MAX_KEY + 1;
  random_printable(keybuf, r.key_len);
  assert_int_equal(gcoll_kvs_request_encode(&r, msg, sizeof(msg), err, sizeof(err)), 0);
  r.key_len = 10;
  r.op = KVS_OP_HELLO;
  r.tag = NULL;                                      /* a hello must be signed */
  assert_int_equal(gcoll_kvs_request_encode(&r, msg, sizeof(msg), err, sizeof(err)), 0);

  /* Hand-built bodies with oversized lengths: value, key. */
  uint8_t b[64];
  size_t o = 0;
  b[o++] = 0; b[o++] = 1; b[o++] = 'a';             /* key "a" */
  uint32_t big = KVS_MAX_VALUE + 1;
  b[o++] = (uint8_t)(big >> 24); b[o++] = (uint8_t)(big >> 16);
  b[o++] = (uint8_t)(big >> 8); b[o++] = (uint8_t)big;
  assert_int_equal(gcoll_kvs_request_decode(KVS_OP_PUT, b, o, &d, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "exceeds the limit"));
  uint8_t kb[] = {0x01, 0x01, 'a'};                  /* key length 257 */
  assert_int_equal(gcoll_kvs_request_decode(KVS_OP_GET, kb, sizeof(kb), &d, err, sizeof(err)), -1);
  uint8_t jb[] = {0, 1, 'k'};                        /* a bye carries nothing */
  assert_int_equal(gcoll_kvs_request_decode(KVS_OP_BYE, jb, sizeof(jb), &d, err, sizeof(err)), -1);
  uint8_t sp[] = {0, 3, 'a', ' ', 'b', 0, 0, 0, 1};  /* key with a space */
  assert_int_equal(gcoll_kvs_request_decode(KVS_OP_GET, sp, sizeof(sp), &d, err, sizeof(err)), -1);
  uint8_t to[] = {0xff, 0xff, 0xff, 0xff};           /* absurd timeout */
  assert_int_equal(gcoll_kvs_request_decode(KVS_OP_BARRIER, to, sizeof(to), &d, err, sizeof(err)), -1);
  uint8_t hr[KVS_HELLO_BODY] = {0, 0, 0, 5, 0, 0, 0, 5};  /* rank 5 of 5 */
  assert_int_equal(gcoll_kvs_request_decode(KVS_OP_HELLO, hr, sizeof(hr), &d, err, sizeof(err)), -1);
  uint8_t hs[8 + KVS_NONCE_BYTES] = {0, 0, 0, 1, 0, 0, 0, 5}; /* hello without its tag */
  assert_int_equal(gcoll_kvs_request_decode(KVS_OP_HELLO, hs, sizeof(hs), &d, err, sizeof(err)), -1);
}

static void test_headers(void **state) {
  char err[256];
  uint8_t h[KVS_HEADER_LEN];
  struct kvs_header d;
  gcoll_kvs_header_encode(h, KVS_OP_GET, 0, 10);
  assert_int_equal(gcoll_kvs_header_decode(h, 0, &d, err, sizeof(err)), 0);
  assert_int_equal(gcoll_kvs_header_decode(h, 1, &d, err, sizeof(err)), -1); /* not a reply */
  gcoll_kvs_header_encode(h, KVS_OP_GET | KVS_OP_REPLY, KVS_ERR_TIMEOUT, 10);
  assert_int_equal(gcoll_kvs_header_decode(h, 1, &d, err, sizeof(err)), 0);
  assert_int_equal(d.status, KVS_ERR_TIMEOUT);
  gcoll_kvs_header_encode(h, KVS_OP_GET, 0, KVS_MAX_BODY + 1);
  assert_int_equal(gcoll_kvs_header_decode(h, 0, &d, err, sizeof(err)), -1);
  gcoll_kvs_header_encode(h, KVS_OP_GET, 1, 0);                /* request with a status */
  assert_int_equal(gcoll_kvs_header_decode(h, 0, &d, err, sizeof(err)), -1);
  gcoll_kvs_header_encode(h, KVS_OP_LAST + 1, 0, 0);       /* the challenge is not a request */
  assert_int_equal(gcoll_kvs_header_decode(h, 0, &d, err, sizeof(err)), -1);
  gcoll_kvs_header_encode(h, KVS_OP_CHALLENGE | KVS_OP_REPLY, 0, KVS_NONCE_BYTES);
  assert_int_equal(gcoll_kvs_header_decode(h, 1, &d, err, sizeof(err)), 0);
  gcoll_kvs_header_encode(h, KVS_OP_CHALLENGE + 1, 0, 0);
  assert_int_equal(gcoll_kvs_header_decode(h, 0, &d, err, sizeof(err)), -1);
  gcoll_kvs_header_encode(h, 0, 0, 0);
  assert_int_equal(gcoll_kvs_header_decode(h, 0, &d, err, sizeof(err)), -1);
  gcoll_kvs_header_encode(h, KVS_OP_GET, 0, 0);
  h[5] = KVS_VERSION + 1;
  assert_int_equal(gcoll_kvs_header_decode(h, 0, &d, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "version"));
  gcoll_kvs_header_encode(h, KVS_OP_GET, 0, 0);
  h[0] ^= 0x20;
  assert_int_equal(gcoll_kvs_header_decode(h, 0, &d, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "magic"));
}

/* Random corruption never crashes the decoder (ASan watches), and what it
 * accepts re-encodes to the same bytes. */
static void test_random_corruption(void **state) {
  char err[256];
  uint8_t again[KVS_MAX_MSG];
  int accepted = 0, refused = 0;
  for (int iter = 0; iter < 3000; iter++) {
    struct kvs_request r = random_request(), d;
    if (r.op == KVS_OP_PUT) r.value_len %= 64;
    size_t n = gcoll_kvs_request_encode(&r, msg, sizeof(msg), err, sizeof(err));
    int flips = 1 + (int)(rnd() % 3);
    for (int f = 0; f < flips; f++) msg[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
    size_t len = n - (rnd() % 4 == 0 ? rnd() % n : 0);
    if (decode_msg(msg, len, &d, err) != 0) {
      refused++;
      assert_true(strlen(err) > 0 && strchr(err, '\n') == NULL);
      continue;
    }
    accepted++;
    size_t m = gcoll_kvs_request_encode(&d, again, sizeof(again), err, sizeof(err));
    assert_int_equal(m, len);
    assert_memory_equal(again, msg, len);
  }
  assert_true(refused > 0);
  assert_true(accepted > 0);
}

static void test_reply_encode(void **state) {
  uint8_t body[100], buf[200];
  for (int i = 0; i < 100; i++) body[i] = (uint8_t)i;
  size_t n = gcoll_kvs_reply_encode(KVS_OP_GET, KVS_OK, body, sizeof(body), buf, sizeof(buf));
  assert_int_equal(n, KVS_HEADER_LEN + sizeof(body));
  struct kvs_header h;
  char err[256];
  assert_int_equal(gcoll_kvs_header_decode(buf, 1, &h, err, sizeof(err)), 0);
  assert_int_equal(h.op, KVS_OP_GET | KVS_OP_REPLY);
  assert_int_equal(h.body_len, sizeof(body));
  assert_memory_equal(buf + KVS_HEADER_LEN, body, sizeof(body));
  assert_int_equal(gcoll_kvs_reply_encode(KVS_OP_GET, KVS_OK, body, sizeof(body), buf, 50), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_truncated_and_trailing),
      cmocka_unit_test(test_oversized_fields), cmocka_unit_test(test_headers),
      cmocka_unit_test(test_random_corruption), cmocka_unit_test(test_reply_encode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
