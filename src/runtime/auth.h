/* Connection authentication: who may talk to a job's listeners.
 *
 * Every listener of a job (net/socket's and net/ib's data listeners, the
 * bootstrap store) is reachable by any user on the host and, off loopback,
 * by anyone on the network, and the identifiers a peer could prove itself
 * with (ranks, connection ids, names in /dev/shm, ports in /proc/net/tcp)
 * are public. What a stranger cannot know is the job key, a 128-bit random
 * value that travels only in the environment of the job's processes (or in
 * the unique id the application passes around itself). So a connection is
 * accepted only when its first message proves knowledge of a secret
 * derived from that key, bound to a fresh nonce of the listener's (no
 * replay) and to who is connecting to whom (no reuse for another edge).
 *
 * The derived secrets never appear in a name, file, argument or log; only
 * their HMAC outputs go on the wire. HMAC-SHA256 and the constant-time
 * compare are libsodium's. */
#ifndef GCOLL_RUNTIME_AUTH_H
#define GCOLL_RUNTIME_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_AUTH_SECRET_BYTES 16
#define GCOLL_AUTH_NONCE_BYTES 16
#define GCOLL_AUTH_TAG_BYTES 32

/* Labels that separate the secrets derived from one key, and the tags
 * computed for one purpose from those of another. */
#define GCOLL_AUTH_LABEL_CONN "gcoll connection secret v1"
#define GCOLL_AUTH_LABEL_STORE "gcoll store secret v1"

struct gcoll_auth_secret {
  unsigned char bytes[GCOLL_AUTH_SECRET_BYTES];
};

/* secret = first 16 bytes of HMAC-SHA256(key, label). 0, or -1 with one
 * line in err (an empty key, a libsodium failure). */
int gcoll_auth_derive(const void *key, size_t keylen, const char *label,
                      struct gcoll_auth_secret *secret, char *err, size_t errlen);

/* A fresh random nonce from getrandom. 0, or -1 with one line in err. */
int gcoll_auth_nonce(unsigned char nonce[GCOLL_AUTH_NONCE_BYTES], char *err, size_t errlen);

/* tag = HMAC-SHA256(secret, purpose || nonce || msg). purpose names the
 * message (a NUL-terminated string, hashed with its NUL so that no
 * purpose is a prefix of another's input). */
void gcoll_auth_tag(const struct gcoll_auth_secret *secret, const char *purpose,
                    const unsigned char nonce[GCOLL_AUTH_NONCE_BYTES], const void *msg,
                    size_t msglen, unsigned char tag[GCOLL_AUTH_TAG_BYTES]);

/* Whether tag is the tag of (purpose, nonce, msg); the comparison takes
 * the same time whatever the bytes, so timing tells a forger nothing. */
int gcoll_auth_verify(const struct gcoll_auth_secret *secret, const char *purpose,
                      const unsigned char nonce[GCOLL_AUTH_NONCE_BYTES], const void *msg,
                      size_t msglen, const unsigned char tag[GCOLL_AUTH_TAG_BYTES]);

/* Equality of two byte strings in time that depends on n only. */
int gcoll_auth_equal(const void *a, const void *b, size_t n);

#endif
