/* HMAC-based connection authentication (auth.h) on libsodium: HMAC-SHA256
 * (crypto_auth_hmacsha256, any key length through its multi-part API) and
 * sodium_memcmp for constant-time compares. libsodium keeps no per-thread
 * state, so the proxy and store threads that verify hellos leave nothing
 * behind when they end. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runtime/auth.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

_Static_assert(GCOLL_AUTH_TAG_BYTES == crypto_auth_hmacsha256_BYTES, "HMAC-SHA256 tag size");

/* sodium_init is thread-safe and idempotent; HMAC needs no more of it than
 * its SHA-256 implementation choice, but the library asks for the call. */
static int ready(char *err, size_t errlen) {
  if (sodium_init() < 0) {
    snprintf(err, errlen, "libsodium failed to initialise");
    return -1;
  }
  return 0;
}

static void hmac(const unsigned char *key, size_t keylen, const unsigned char *const *parts,
                 const size_t *lens, int nparts, unsigned char out[GCOLL_AUTH_TAG_BYTES]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key, keylen);
  for (int i = 0; i < nparts; i++)
    if (lens[i] > 0) crypto_auth_hmacsha256_update(&st, parts[i], lens[i]);
  crypto_auth_hmacsha256_final(&st, out);
  sodium_memzero(&st, sizeof(st));
}

int gcoll_auth_derive(const void *key, size_t keylen, const char *label,
                      struct gcoll_auth_secret *secret, char *err, size_t errlen) {
  if (keylen == 0) {
    snprintf(err, errlen, "no job key to derive a connection secret from");
    return -1;
  }
  if (ready(err, errlen) != 0) return -1;
  unsigned char md[GCOLL_AUTH_TAG_BYTES];
  const unsigned char *parts[] = {(const unsigned char *)label};
  size_t lens[] = {strlen(label)};
  hmac(key, keylen, parts, lens, 1, md);
  memcpy(secret->bytes, md, GCOLL_AUTH_SECRET_BYTES);
  sodium_memzero(md, sizeof(md));
  return 0;
}

int gcoll_auth_nonce(unsigned char nonce[GCOLL_AUTH_NONCE_BYTES], char *err, size_t errlen) {
  size_t got = 0;
  while (got < GCOLL_AUTH_NONCE_BYTES) {
    ssize_t r = getrandom(nonce + got, GCOLL_AUTH_NONCE_BYTES - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      snprintf(err, errlen, "getrandom: %s", r < 0 ? strerror(errno) : "no bytes");
      return -1;
    }
    got += (size_t)r;
  }
  return 0;
}

void gcoll_auth_tag(const struct gcoll_auth_secret *secret, const char *purpose,
                    const unsigned char nonce[GCOLL_AUTH_NONCE_BYTES], const void *msg,
                    size_t msglen, unsigned char tag[GCOLL_AUTH_TAG_BYTES]) {
  char ignored[64];
  (void)ready(ignored, sizeof(ignored));
  /* The purpose goes in with its NUL, so no purpose is a prefix of
   * another's input. */
  const unsigned char *parts[] = {(const unsigned char *)purpose, nonce, msg};
  size_t lens[] = {strlen(purpose) + 1, GCOLL_AUTH_NONCE_BYTES, msglen};
  hmac(secret->bytes, GCOLL_AUTH_SECRET_BYTES, parts, lens, 3, tag);
}

int gcoll_auth_verify(const struct gcoll_auth_secret *secret, const char *purpose,
                      const unsigned char nonce[GCOLL_AUTH_NONCE_BYTES], const void *msg,
                      size_t msglen, const unsigned char tag[GCOLL_AUTH_TAG_BYTES]) {
  unsigned char want[GCOLL_AUTH_TAG_BYTES];
  gcoll_auth_tag(secret, purpose, nonce, msg, msglen, want);
  int ok = gcoll_auth_equal(want, tag, GCOLL_AUTH_TAG_BYTES);
  sodium_memzero(want, sizeof(want));
  return ok;
}

int gcoll_auth_equal(const void *a, const void *b, size_t n) {
  return sodium_memcmp(a, b, n) == 0;
}
