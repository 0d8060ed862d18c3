/* HMAC-based connection authentication (auth.h) on OpenSSL's libcrypto. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runtime/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define MSG_MAX 256
#define PURPOSE_MAX 64

int gcoll_auth_derive(const void *key, size_t keylen, const char *label,
                      struct gcoll_auth_secret *secret, char *err, size_t errlen) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (keylen == 0) {
    snprintf(err, errlen, "no job key to derive a connection secret from");
    return -1;
  }
  if (HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)label, strlen(label), md,
           &mdlen) == NULL ||
      mdlen < GCOLL_AUTH_SECRET_BYTES) {
    snprintf(err, errlen, "HMAC-SHA256 failed in libcrypto");
    return -1;
  }
  memcpy(secret->bytes, md, GCOLL_AUTH_SECRET_BYTES);
  OPENSSL_cleanse(md, sizeof(md));
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
  unsigned char in[PURPOSE_MAX + GCOLL_AUTH_NONCE_BYTES + MSG_MAX];
  size_t plen = strnlen(purpose, PURPOSE_MAX - 1) + 1;
  if (msglen > MSG_MAX) msglen = MSG_MAX; /* callers' messages are fixed and small */
  memcpy(in, purpose, plen - 1);
  in[plen - 1] = '\0';
  memcpy(in + plen, nonce, GCOLL_AUTH_NONCE_BYTES);
  if (msglen > 0) memcpy(in + plen + GCOLL_AUTH_NONCE_BYTES, msg, msglen);
  unsigned int mdlen = 0;
  unsigned char md[EVP_MAX_MD_SIZE];
  if (HMAC(EVP_sha256(), secret->bytes, GCOLL_AUTH_SECRET_BYTES, in,
           plen + GCOLL_AUTH_NONCE_BYTES + msglen, md, &mdlen) == NULL ||
      mdlen != GCOLL_AUTH_TAG_BYTES) {
    /* Cannot happen with a working libcrypto; a tag nobody can match
     * fails every check rather than accepting anything. */
    if (getrandom(md, GCOLL_AUTH_TAG_BYTES, 0) != GCOLL_AUTH_TAG_BYTES)
      memset(md, 0xa5, GCOLL_AUTH_TAG_BYTES);
  }
  memcpy(tag, md, GCOLL_AUTH_TAG_BYTES);
  OPENSSL_cleanse(in, sizeof(in));
}

int gcoll_auth_verify(const struct gcoll_auth_secret *secret, const char *purpose,
                      const unsigned char nonce[GCOLL_AUTH_NONCE_BYTES], const void *msg,
                      size_t msglen, const unsigned char tag[GCOLL_AUTH_TAG_BYTES]) {
  unsigned char want[GCOLL_AUTH_TAG_BYTES];
  gcoll_auth_tag(secret, purpose, nonce, msg, msglen, want);
  int ok = gcoll_auth_equal(want, tag, GCOLL_AUTH_TAG_BYTES);
  OPENSSL_cleanse(want, sizeof(want));
  return ok;
}

int gcoll_auth_equal(const void *a, const void *b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}
