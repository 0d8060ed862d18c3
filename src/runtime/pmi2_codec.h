/* How the pmi2 bootstrap fits the bootstrap contract's keys and values into
 * PMI2's key-value store, whose values are NUL-terminated strings of at
 * most PMI2_MAX_VALLEN - 1 characters (';' is escaped on the wire, so it is
 * best avoided) and whose keys have at most PMI2_MAX_KEYLEN characters.
 *
 * Keys: a key of 1..GCOLL_PMI2_DIRECT_KEY_MAX printable characters other
 * than '=', ';' and '#' is used as it is; any other key becomes '#' and the
 * 16 hex digits of its FNV-1a 64 hash (deterministic, so every rank maps a
 * key alike; a collision needs two keys of one job with the same 64-bit
 * hash). Such a base key names part 0 of a value; part i > 0 is stored
 * under "<base>#<i>". Direct keys have no '#', so no key maps onto a part
 * of another.
 *
 * Values: base64url without padding, in parts of GCOLL_PMI2_PART_BYTES raw
 * bytes. Part 0 is "<total length in decimal>," followed by the first
 * part, so a reader learns the part count from the first get. */
#ifndef GCOLL_RUNTIME_PMI2_CODEC_H
#define GCOLL_RUNTIME_PMI2_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_PMI2_KEYLEN 64           /* PMI2_MAX_KEYLEN */
#define GCOLL_PMI2_VALLEN 1024         /* PMI2_MAX_VALLEN, NUL included */
#define GCOLL_PMI2_DIRECT_KEY_MAX 56
#define GCOLL_PMI2_PART_BYTES 756      /* 1008 characters: 3 bytes per 4 */
/* Room for any key this codec makes, NUL included. */
#define GCOLL_PMI2_KEY_BUF (GCOLL_PMI2_DIRECT_KEY_MAX + 8)

/* The FNV-1a 64 hash of n bytes, continuing from h (start with
 * GCOLL_FNV1A64_INIT). */
#define GCOLL_FNV1A64_INIT 0xcbf29ce484222325ull
uint64_t gcoll_fnv1a64(uint64_t h, const void *data, size_t n);

/* The PMI2 key of part `part` of key's value into out
 * (GCOLL_PMI2_KEY_BUF bytes). */
void gcoll_pmi2_part_key(const char *key, int part, char *out);

/* How many parts (and keys) a value of len bytes takes: at least 1. */
int gcoll_pmi2_nparts(size_t len);

/* Part `part` of the encoding of value (len bytes) as a NUL-terminated
 * string into out (GCOLL_PMI2_VALLEN bytes). */
void gcoll_pmi2_encode_part(const void *value, size_t len, int part, char *out);

/* Reads part 0: the value's total length into *total, and its first bytes
 * into out (room for GCOLL_PMI2_PART_BYTES). 0, or -1 with one line in err
 * when s is not a part 0 this codec wrote. */
int gcoll_pmi2_decode_head(const char *s, size_t *total, uint8_t *out, char *err,
                           size_t errlen);

/* Reads part `part` (> 0) of a value of total bytes into out (room for
 * GCOLL_PMI2_PART_BYTES). 0, or -1 with one line in err. */
int gcoll_pmi2_decode_part(const char *s, size_t total, int part, uint8_t *out, char *err,
                           size_t errlen);

/* Bytes of part `part` of a value of total bytes. */
size_t gcoll_pmi2_part_len(size_t total, int part);

#endif
