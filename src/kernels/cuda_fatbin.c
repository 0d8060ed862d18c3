/* Listing a fat binary's images (see cuda_fatbin.h). */
#include "kernels/cuda_fatbin.h"

#include <stdio.h>
#include <string.h>

#define FATBIN_MAGIC 0xba55ed50u
#define FATBIN_HEADER 16u
#define ENTRY_MIN_HEADER 32u

/* Little-endian field reads; the container is little-endian everywhere
 * CUDA runs, and memcpy keeps unaligned offsets legal. */
static uint64_t field(const unsigned char *p, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

int gcoll_fatbin_list(const void *fatbin, size_t len, struct gcoll_fatbin_image *out,
                      int max, char *err, size_t errlen) {
  const unsigned char *p = fatbin;
  if (p == NULL || len < FATBIN_HEADER || field(p, 4) != FATBIN_MAGIC) {
    snprintf(err, errlen, "not a fat binary (no 0xba55ed50 header)");
    return -1;
  }
  uint64_t hdr = field(p + 6, 2), body = field(p + 8, 8);
  if (hdr < FATBIN_HEADER || hdr > len || body > len - hdr) {
    snprintf(err, errlen, "fat binary header claims %llu bytes past its %zu",
             (unsigned long long)(hdr + body), len);
    return -1;
  }
  int n = 0;
  for (uint64_t off = hdr; off < hdr + body;) {
    if (hdr + body - off < ENTRY_MIN_HEADER) {
      snprintf(err, errlen, "truncated fat binary entry at offset %llu",
               (unsigned long long)off);
      return -1;
    }
    const unsigned char *e = p + off;
    uint64_t ehdr = field(e + 4, 4), payload = field(e + 8, 8);
    if (ehdr < ENTRY_MIN_HEADER || ehdr > hdr + body - off ||
        payload > hdr + body - off - ehdr) {
      snprintf(err, errlen, "fat binary entry at offset %llu runs past the end",
               (unsigned long long)off);
      return -1;
    }
    if (n < max && out != NULL) {
      out[n].kind = (int)field(e, 2);
      out[n].arch = (int)field(e + 28, 4);
      out[n].bytes = payload;
    }
    n++;
    off += ehdr + payload;
  }
  return n;
}
