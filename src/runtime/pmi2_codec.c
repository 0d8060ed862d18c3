/* Keys and values of the pmi2 bootstrap (format in pmi2_codec.h). */
#include "runtime/pmi2_codec.h"

#include <stdio.h>
#include <string.h>

#include "runtime/bootstrap.h"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

_Static_assert(GCOLL_PMI2_PART_BYTES % 3 == 0, "parts must not need base64 padding");
_Static_assert(sizeof("65536,") - 1 + GCOLL_PMI2_PART_BYTES / 3 * 4 < GCOLL_PMI2_VALLEN,
               "part 0 must fit a PMI2 value");
_Static_assert((GCOLL_BOOTSTRAP_MAX_VALUE + GCOLL_PMI2_PART_BYTES - 1) / GCOLL_PMI2_PART_BYTES <
                   100,
               "part numbers must fit two digits");
_Static_assert(GCOLL_PMI2_DIRECT_KEY_MAX + 3 <= GCOLL_PMI2_KEYLEN, "part keys must fit PMI2");

uint64_t gcoll_fnv1a64(uint64_t h, const void *data, size_t n) {
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static int direct_key(const char *key) {
  size_t n = strlen(key);
  if (n == 0 || n > GCOLL_PMI2_DIRECT_KEY_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (key[i] <= ' ' || key[i] > '~' || key[i] == '=' || key[i] == ';' || key[i] == '#') return 0;
  return 1;
}

void gcoll_pmi2_part_key(const char *key, int part, char *out) {
  char base[GCOLL_PMI2_DIRECT_KEY_MAX + 1];
  if (direct_key(key))
    snprintf(base, sizeof(base), "%s", key);
  else
    snprintf(base, sizeof(base), "#%016llx",
             (unsigned long long)gcoll_fnv1a64(GCOLL_FNV1A64_INIT, key, strlen(key)));
  if (part == 0)
    snprintf(out, GCOLL_PMI2_KEY_BUF, "%s", base);
  else
    snprintf(out, GCOLL_PMI2_KEY_BUF, "%s#%d", base, part);
}

int gcoll_pmi2_nparts(size_t len) {
  return len == 0 ? 1 : (int)((len + GCOLL_PMI2_PART_BYTES - 1) / GCOLL_PMI2_PART_BYTES);
}

size_t gcoll_pmi2_part_len(size_t total, int part) {
  size_t start = (size_t)part * GCOLL_PMI2_PART_BYTES;
  if (start >= total) return 0;
  return total - start < GCOLL_PMI2_PART_BYTES ? total - start : GCOLL_PMI2_PART_BYTES;
}

static char *b64_encode(const uint8_t *p, size_t n, char *out) {
  for (; n >= 3; p += 3, n -= 3) {
    uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
    for (int k = 3; k >= 0; k--) *out++ = b64_alphabet[(v >> (6 * k)) & 63];
  }
  if (n > 0) {
    uint32_t v = (uint32_t)p[0] << 16 | (n == 2 ? (uint32_t)p[1] << 8 : 0);
    *out++ = b64_alphabet[v >> 18];
    *out++ = b64_alphabet[(v >> 12) & 63];
    if (n == 2) *out++ = b64_alphabet[(v >> 6) & 63];
  }
  *out = '\0';
  return out;
}

static int b64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

/* Decodes exactly `want` bytes from s, which must be their canonical
 * encoding and nothing more. */
static int b64_decode(const char *s, size_t want, uint8_t *out) {
  size_t n = strlen(s);
  if (n != want / 3 * 4 + (want % 3 ? want % 3 + 1 : 0)) return -1;
  uint32_t acc = 0;
  int bits = 0;
  size_t got = 0;
  for (size_t i = 0; i < n; i++) {
    int d = b64_digit(s[i]);
    if (d < 0) return -1;
    acc = (acc << 6 | (uint32_t)d) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[got++] = (uint8_t)(acc >> bits);
    }
  }
  /* Leftover bits must be zero, so that every value has one encoding. */
  return got == want && (acc & ((1u << bits) - 1)) == 0 ? 0 : -1;
}

void gcoll_pmi2_encode_part(const void *value, size_t len, int part, char *out) {
  const uint8_t *p = (const uint8_t *)value + (size_t)part * GCOLL_PMI2_PART_BYTES;
  if (part == 0) out += sprintf(out, "%zu,", len);
  b64_encode(p, gcoll_pmi2_part_len(len, part), out);
}

int gcoll_pmi2_decode_head(const char *s, size_t *total, uint8_t *out, char *err,
                           size_t errlen) {
  size_t v = 0, digits = 0;
  for (; s[digits] >= '0' && s[digits] <= '9' && digits < 6; digits++)
    v = v * 10 + (size_t)(s[digits] - '0');
  if (digits == 0 || s[digits] != ',' || v > GCOLL_BOOTSTRAP_MAX_VALUE ||
      (digits > 1 && s[0] == '0')) {
    snprintf(err, errlen, "value does not start with its length");
    return -1;
  }
  if (b64_decode(s + digits + 1, gcoll_pmi2_part_len(v, 0), out) != 0) {
    snprintf(err, errlen, "first part is not the base64url of %zu bytes",
             gcoll_pmi2_part_len(v, 0));
    return -1;
  }
  *total = v;
  return 0;
}

int gcoll_pmi2_decode_part(const char *s, size_t total, int part, uint8_t *out, char *err,
                           size_t errlen) {
  size_t want = gcoll_pmi2_part_len(total, part);
  if (part <= 0 || part >= gcoll_pmi2_nparts(total) || b64_decode(s, want, out) != 0) {
    snprintf(err, errlen, "part %d is not the base64url of %zu bytes", part, want);
    return -1;
  }
  return 0;
}
