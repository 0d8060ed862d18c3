/* Encoding and strict decoding of the bootstrap KVS messages (kvs_proto.h).
 * Both ends use the same decoder, so a message one side accepts is exactly
 * what the other side produced. */
#include "runtime/kvs_proto.h"

#include <stdio.h>
#include <string.h>

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}

static void put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

const char *gcoll_kvs_op_name(int op) {
  static const char *names[] = {"?", "hello", "put", "get", "fence", "barrier", "bye",
                                "challenge"};
  op &= ~KVS_OP_REPLY;
  return op >= KVS_OP_HELLO && op <= KVS_OP_CHALLENGE ? names[op] : "?";
}

const char *gcoll_kvs_status_name(uint32_t st) {
  static const char *names[] = {"ok", "protocol error", "refused", "store full",
                                "key exists", "timeout", "peer lost", "bad state"};
  return st <= KVS_STATUS_LAST ? names[st] : "unknown status";
}

int gcoll_kvs_header_decode(const uint8_t buf[KVS_HEADER_LEN], int reply, struct kvs_header *h,
                            char *err, size_t errlen) {
  uint32_t magic = get_u32(buf);
  if (magic != KVS_MAGIC) {
    snprintf(err, errlen, "bad magic 0x%08x (not a gcoll KVS message)", magic);
    return -1;
  }
  h->version = get_u16(buf + 4);
  h->op = get_u16(buf + 6);
  h->status = get_u32(buf + 8);
  h->body_len = get_u32(buf + 12);
  if (h->version != KVS_VERSION) {
    snprintf(err, errlen, "protocol version %u, expected %d", h->version, KVS_VERSION);
    return -1;
  }
  int is_reply = (h->op & KVS_OP_REPLY) != 0;
  int base = h->op & ~KVS_OP_REPLY;
  int last = reply ? KVS_OP_CHALLENGE : KVS_OP_LAST;
  if (is_reply != (reply != 0) || base < KVS_OP_HELLO || base > last ||
      (h->op & 0xff00) != 0) {
    snprintf(err, errlen, "unexpected op 0x%04x in a %s", h->op, reply ? "reply" : "request");
    return -1;
  }
  if (!reply && h->status != 0) {
    snprintf(err, errlen, "request with non-zero status %u", h->status);
    return -1;
  }
  if (reply && h->status > KVS_STATUS_LAST) {
    snprintf(err, errlen, "unknown reply status %u", h->status);
    return -1;
  }
  if (h->body_len > KVS_MAX_BODY) {
    snprintf(err, errlen, "%s body of %u bytes exceeds the limit of %d", gcoll_kvs_op_name(base),
             h->body_len, KVS_MAX_BODY);
    return -1;
  }
  return 0;
}

void gcoll_kvs_header_encode(uint8_t buf[KVS_HEADER_LEN], uint16_t op, uint32_t status,
                             uint32_t body_len) {
  put_u32(buf, KVS_MAGIC);
  put_u16(buf + 4, KVS_VERSION);
  put_u16(buf + 6, op);
  put_u32(buf + 8, status);
  put_u32(buf + 12, body_len);
}

int gcoll_kvs_key_valid(const char *key, size_t len) {
  if (len == 0 || len > KVS_MAX_KEY) return 0;
  for (size_t i = 0; i < len; i++)
    if (key[i] < 0x21 || key[i] > 0x7e) return 0;
  return 1;
}

/* Bounds-checked reader over a body. */
struct cursor {
  const uint8_t *p;
  size_t left;
};

static int take(struct cursor *c, size_t n, const uint8_t **out) {
  if (c->left < n) return -1;
  *out = c->p;
  c->p += n;
  c->left -= n;
  return 0;
}

static int take_u16(struct cursor *c, uint32_t *v) {
  const uint8_t *p;
  if (take(c, 2, &p)) return -1;
  *v = get_u16(p);
  return 0;
}

static int take_u32(struct cursor *c, uint32_t *v) {
  const uint8_t *p;
  if (take(c, 4, &p)) return -1;
  *v = get_u32(p);
  return 0;
}

static int take_timeout(struct cursor *c, struct kvs_request *r, char *err, size_t errlen) {
  if (take_u32(c, &r->timeout_ms)) {
    snprintf(err, errlen, "%s: truncated timeout", gcoll_kvs_op_name(r->op));
    return -1;
  }
  if (r->timeout_ms > KVS_MAX_TIMEOUT_MS) {
    snprintf(err, errlen, "%s: timeout %u ms exceeds %u ms", gcoll_kvs_op_name(r->op),
             r->timeout_ms, KVS_MAX_TIMEOUT_MS);
    return -1;
  }
  return 0;
}

static int take_key(struct cursor *c, struct kvs_request *r, char *err, size_t errlen) {
  uint32_t n;
  const uint8_t *p;
  if (take_u16(c, &n) || take(c, n, &p)) {
    snprintf(err, errlen, "%s: truncated key", gcoll_kvs_op_name(r->op));
    return -1;
  }
  if (!gcoll_kvs_key_valid((const char *)p, n)) {
    snprintf(err, errlen, "%s: key of %u bytes is not 1..%d printable characters",
             gcoll_kvs_op_name(r->op), n, KVS_MAX_KEY);
    return -1;
  }
  r->key = (const char *)p;
  r->key_len = n;
  return 0;
}

static int take_value(struct cursor *c, struct kvs_request *r, char *err, size_t errlen) {
  uint32_t n;
  const uint8_t *p;
  if (take_u32(c, &n)) {
    snprintf(err, errlen, "put: truncated value length");
    return -1;
  }
  if (n > KVS_MAX_VALUE) {
    snprintf(err, errlen, "put: value of %u bytes exceeds the limit of %d", n, KVS_MAX_VALUE);
    return -1;
  }
  if (take(c, n, &p)) {
    snprintf(err, errlen, "put: truncated value (%u bytes announced)", n);
    return -1;
  }
  r->value = p;
  r->value_len = n;
  return 0;
}

static int take_op_fields(struct cursor *c, struct kvs_request *r, char *err, size_t errlen) {
  switch (r->op) {
  case KVS_OP_HELLO:
    if (take_u32(c, &r->rank) || take_u32(c, &r->nranks)) {
      snprintf(err, errlen, "hello: truncated rank");
      return -1;
    }
    if (r->nranks == 0 || r->rank >= r->nranks) {
      snprintf(err, errlen, "hello: rank %u of %u", r->rank, r->nranks);
      return -1;
    }
    if (take(c, KVS_NONCE_BYTES, &r->nonce) || take(c, KVS_TAG_BYTES, &r->tag)) {
      snprintf(err, errlen, "hello: truncated nonce or tag");
      return -1;
    }
    return 0;
  case KVS_OP_PUT:
    return take_key(c, r, err, errlen) || take_value(c, r, err, errlen) ? -1 : 0;
  case KVS_OP_GET:
    return take_key(c, r, err, errlen) || take_timeout(c, r, err, errlen) ? -1 : 0;
  case KVS_OP_FENCE:
  case KVS_OP_BARRIER:
    return take_timeout(c, r, err, errlen);
  case KVS_OP_BYE:
    return 0;
  default:
    snprintf(err, errlen, "unknown op %d", (int)r->op);
    return -1;
  }
}

int gcoll_kvs_request_decode(uint16_t op, const uint8_t *body, size_t len, struct kvs_request *r,
                             char *err, size_t errlen) {
  memset(r, 0, sizeof(*r));
  r->op = (enum kvs_op)op;
  if (op < KVS_OP_HELLO || op > KVS_OP_LAST) {
    snprintf(err, errlen, "unknown op %u", op);
    return -1;
  }
  struct cursor c = {body, len};
  if (take_op_fields(&c, r, err, errlen)) return -1;
  if (c.left != 0) {
    snprintf(err, errlen, "%s: %zu bytes of trailing garbage", gcoll_kvs_op_name(op), c.left);
    return -1;
  }
  return 0;
}

/* Bounds-checked writer; `over` latches the first overflow. */
struct writer {
  uint8_t *p;
  size_t left;
  int over;
};

static void emit(struct writer *w, const void *src, size_t n) {
  if (w->over || w->left < n) {
    w->over = 1;
    return;
  }
  if (n) memcpy(w->p, src, n);
  w->p += n;
  w->left -= n;
}

static void emit_u16(struct writer *w, uint16_t v) {
  uint8_t b[2];
  put_u16(b, v);
  emit(w, b, 2);
}

static void emit_u32(struct writer *w, uint32_t v) {
  uint8_t b[4];
  put_u32(b, v);
  emit(w, b, 4);
}

static int request_fits_limits(const struct kvs_request *r, char *err, size_t errlen) {
  if (r->op < KVS_OP_HELLO || r->op > KVS_OP_LAST) {
    snprintf(err, errlen, "unknown op %d", (int)r->op);
    return 0;
  }
  if (r->op == KVS_OP_HELLO && (r->nonce == NULL || r->tag == NULL)) {
    snprintf(err, errlen, "hello without nonce or tag");
    return 0;
  }
  if ((r->op == KVS_OP_PUT || r->op == KVS_OP_GET) && !gcoll_kvs_key_valid(r->key, r->key_len)) {
    snprintf(err, errlen, "key of %zu bytes is not 1..%d printable characters", r->key_len,
             KVS_MAX_KEY);
    return 0;
  }
  if (r->op == KVS_OP_PUT && r->value_len > KVS_MAX_VALUE) {
    snprintf(err, errlen, "value of %zu bytes exceeds the limit of %d", r->value_len,
             KVS_MAX_VALUE);
    return 0;
  }
  return 1;
}

size_t gcoll_kvs_request_encode(const struct kvs_request *r, uint8_t *buf, size_t buflen, char *err,
                                size_t errlen) {
  if (!request_fits_limits(r, err, errlen)) return 0;
  if (buflen < KVS_HEADER_LEN) {
    snprintf(err, errlen, "buffer too small");
    return 0;
  }
  struct writer w = {buf + KVS_HEADER_LEN, buflen - KVS_HEADER_LEN, 0};
  switch (r->op) {
  case KVS_OP_HELLO:
    emit_u32(&w, r->rank);
    emit_u32(&w, r->nranks);
    emit(&w, r->nonce, KVS_NONCE_BYTES);
    emit(&w, r->tag, KVS_TAG_BYTES);
    break;
  case KVS_OP_PUT:
    emit_u16(&w, (uint16_t)r->key_len);
    emit(&w, r->key, r->key_len);
    emit_u32(&w, (uint32_t)r->value_len);
    emit(&w, r->value, r->value_len);
    break;
  case KVS_OP_GET:
    emit_u16(&w, (uint16_t)r->key_len);
    emit(&w, r->key, r->key_len);
    emit_u32(&w, r->timeout_ms);
    break;
  case KVS_OP_FENCE:
  case KVS_OP_BARRIER:
    emit_u32(&w, r->timeout_ms);
    break;
  default:
    break;
  }
  if (w.over) {
    snprintf(err, errlen, "buffer too small for a %s request", gcoll_kvs_op_name(r->op));
    return 0;
  }
  size_t body = (size_t)(w.p - buf) - KVS_HEADER_LEN;
  gcoll_kvs_header_encode(buf, (uint16_t)r->op, 0, (uint32_t)body);
  return KVS_HEADER_LEN + body;
}

size_t gcoll_kvs_reply_encode(uint16_t request_op, uint32_t status, const void *body,
                              size_t body_len, uint8_t *buf, size_t buflen) {
  if (body_len > KVS_MAX_BODY || buflen < KVS_HEADER_LEN + body_len) return 0;
  gcoll_kvs_header_encode(buf, (uint16_t)(request_op | KVS_OP_REPLY), status, (uint32_t)body_len);
  if (body_len) memcpy(buf + KVS_HEADER_LEN, body, body_len);
  return KVS_HEADER_LEN + body_len;
}

void gcoll_kvs_hello_signed_part(uint32_t rank, uint32_t nranks,
                                 const uint8_t nonce[KVS_NONCE_BYTES],
                                 uint8_t out[8 + KVS_NONCE_BYTES]) {
  put_u32(out, rank);
  put_u32(out + 4, nranks);
  memcpy(out + 8, nonce, KVS_NONCE_BYTES);
}
