/* Wire format of the bootstrap key-value store that gcollrun hosts and
 * bootstrap_tcp.c talks to.
 *
 * Every message is a 16-byte header followed by body_len bytes of body;
 * all integers are big-endian:
 *
 *   u32 magic "gcKV"  u16 version  u16 op  u32 status  u32 body_len
 *
 * A connection starts with the server's CHALLENGE (a reply-typed message,
 * body: a 16-byte nonce). The client's first request must be HELLO, which
 * proves that it holds the job's store key without sending it: its tag is
 * gcoll_auth_tag(store secret, KVS_HELLO_PURPOSE, server nonce, rank ||
 * nranks || client nonce), the store secret derived from the key with
 * GCOLL_AUTH_LABEL_STORE (auth.h). The server's OK reply to HELLO carries
 * gcoll_auth_tag(store secret, KVS_PROOF_PURPOSE, client nonce, server
 * nonce), so the client knows it talks to the job's store and not to a
 * process that took its port. Everything after HELLO rides on that
 * authenticated connection. Request bodies by op:
 *
 *   HELLO    u32 rank, u32 nranks, client nonce (16), tag (32)
 *   PUT      u16 key_len, key, u32 value_len, value
 *   GET      u16 key_len, key, u32 timeout_ms
 *   FENCE    u32 timeout_ms
 *   BARRIER  u32 timeout_ms
 *   BYE      (nothing)
 *
 * Replies carry op = KVS_OP_REPLY | request op and a status; the body is
 * the value for a successful GET, a one-line reason for an error, and empty
 * otherwise. Sizes are bounded so that neither side ever allocates more
 * than KVS_MAX_MSG for one message. */
#ifndef GCOLL_RUNTIME_KVS_PROTO_H
#define GCOLL_RUNTIME_KVS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/auth.h"
#include "runtime/bootstrap.h"

#define KVS_MAGIC 0x67634b56u      /* "gcKV" */
#define KVS_VERSION 2
#define KVS_LOST_RANK_KEY GCOLL_BOOTSTRAP_LOST_RANK_KEY
#define KVS_HEADER_LEN 16
#define KVS_MAX_KEY 256            /* bytes, printable ASCII without spaces */
#define KVS_MAX_VALUE 65536        /* bytes, binary */
#define KVS_MAX_JOB_KEY 64        /* the store key the server and clients are given */
#define KVS_NONCE_BYTES GCOLL_AUTH_NONCE_BYTES
#define KVS_TAG_BYTES GCOLL_AUTH_TAG_BYTES
#define KVS_HELLO_BODY (8 + KVS_NONCE_BYTES + KVS_TAG_BYTES)
#define KVS_HELLO_PURPOSE "gcoll store hello v2"
#define KVS_PROOF_PURPOSE "gcoll store proof v2"
#define KVS_MAX_REASON 256         /* error text in replies */
#define KVS_MAX_TIMEOUT_MS (7u * 24 * 3600 * 1000)
#define KVS_MAX_BODY (2 + KVS_MAX_KEY + 4 + KVS_MAX_VALUE)
#define KVS_MAX_MSG (KVS_HEADER_LEN + KVS_MAX_BODY)

enum kvs_op {
  KVS_OP_HELLO = 1,
  KVS_OP_PUT,
  KVS_OP_GET,
  KVS_OP_FENCE,
  KVS_OP_BARRIER,
  KVS_OP_BYE,
  KVS_OP_LAST = KVS_OP_BYE,   /* the last request op */
  KVS_OP_CHALLENGE,           /* server -> client only, with the reply bit */
  KVS_OP_REPLY = 0x80
};

enum kvs_status {
  KVS_OK = 0,
  KVS_ERR_PROTO,      /* malformed message; the server closes the connection */
  KVS_ERR_AUTH,       /* wrong job key, rank out of range or already connected */
  KVS_ERR_LIMIT,      /* too many keys or bytes in the store */
  KVS_ERR_EXISTS,     /* key already holds a different value */
  KVS_ERR_TIMEOUT,    /* the wait's deadline passed */
  KVS_ERR_PEER_LOST,  /* a rank disconnected without saying goodbye */
  KVS_ERR_STATE,      /* request not valid now (no HELLO yet, HELLO twice) */
  KVS_STATUS_LAST = KVS_ERR_STATE
};

struct kvs_header {
  uint16_t version;
  uint16_t op;
  uint32_t status;
  uint32_t body_len;
};

/* A decoded request. Pointers point into the body it was decoded from. */
struct kvs_request {
  enum kvs_op op;
  const uint8_t *nonce;     /* HELLO: the client's nonce and its tag */
  const uint8_t *tag;
  const char *key;
  size_t key_len;
  const void *value;
  size_t value_len;
  uint32_t rank, nranks;
  uint32_t timeout_ms;
};

const char *gcoll_kvs_op_name(int op);          /* "put", "get", ... */
const char *gcoll_kvs_status_name(uint32_t st); /* "timeout", "auth", ... */

/* Checks a header read off the wire: magic, version, a known op (requests
 * when `reply` is 0, replies and the challenge otherwise) and body_len <=
 * KVS_MAX_BODY.
 * Returns 0, or -1 with a one-line reason. */
int gcoll_kvs_header_decode(const uint8_t buf[KVS_HEADER_LEN], int reply, struct kvs_header *h,
                            char *err, size_t errlen);
void gcoll_kvs_header_encode(uint8_t buf[KVS_HEADER_LEN], uint16_t op, uint32_t status,
                             uint32_t body_len);

/* Decodes and validates a request body: every length in range, every byte
 * accounted for, keys printable. Returns 0, or -1 with a one-line reason. */
int gcoll_kvs_request_decode(uint16_t op, const uint8_t *body, size_t len, struct kvs_request *r,
                             char *err, size_t errlen);
/* Encodes header + body into buf; returns the message length, or 0 when
 * the request breaks a limit or buf is too small (reason in err). */
size_t gcoll_kvs_request_encode(const struct kvs_request *r, uint8_t *buf, size_t buflen,
                                char *err, size_t errlen);
/* Encodes a reply (header + body); returns its length, or 0 when body_len
 * is over KVS_MAX_BODY or buf too small. */
size_t gcoll_kvs_reply_encode(uint16_t request_op, uint32_t status, const void *body,
                              size_t body_len, uint8_t *buf, size_t buflen);

/* The HELLO message bytes the tag covers: rank, nranks, client nonce. */
void gcoll_kvs_hello_signed_part(uint32_t rank, uint32_t nranks,
                                 const uint8_t nonce[KVS_NONCE_BYTES],
                                 uint8_t out[8 + KVS_NONCE_BYTES]);

/* A key is 1..KVS_MAX_KEY printable ASCII characters without spaces. */
int gcoll_kvs_key_valid(const char *key, size_t len);

#endif
