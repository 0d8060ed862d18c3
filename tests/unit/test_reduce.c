/* The reduction core: every type x op x count against an expectation the
 * test computes on its own (exact integer arithmetic in __int128 wrapped to
 * the type's width; floating ops in double rounded to the type), in-place
 * calls, misaligned starts, the 16-bit float conversions (exhaustive over
 * all bit patterns and all rounding midpoints), integer wrap on edge values,
 * avg truncation, the name tables, and the serial reference against chains
 * of gcoll_reduce. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/reduce.h"
#include "testutil.h"

typedef __int128 wide_t;

static const size_t counts[] = {0, 1, 7, 64, 1023, 4097};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

/* ---- Type facts, written out here rather than asked of the library ------ */

static int is_int_type(gcollDataType_t t) { return t <= gcollUint64; }

static int is_signed_int(gcollDataType_t t) {
  return t == gcollInt8 || t == gcollInt32 || t == gcollInt64;
}

static int int_bits(gcollDataType_t t) {
  switch (t) {
  case gcollInt8: case gcollUint8: return 8;
  case gcollInt32: case gcollUint32: return 32;
  default: return 64;
  }
}

static size_t elem_size(gcollDataType_t t) {
  switch (t) {
  case gcollInt8: return sizeof(int8_t);
  case gcollUint8: return sizeof(uint8_t);
  case gcollInt32: return sizeof(int32_t);
  case gcollUint32: return sizeof(uint32_t);
  case gcollInt64: return sizeof(int64_t);
  case gcollUint64: return sizeof(uint64_t);
  case gcollFloat16: case gcollBfloat16: return sizeof(uint16_t);
  case gcollFloat32: return sizeof(float);
  default: return sizeof(double);
  }
}

/* ---- Reading elements into wide values ---------------------------------- */

static wide_t get_int(gcollDataType_t t, const void *p, size_t i) {
  switch (t) {
  case gcollInt8: return ((const int8_t *)p)[i];
  case gcollUint8: return ((const uint8_t *)p)[i];
  case gcollInt32: return ((const int32_t *)p)[i];
  case gcollUint32: return ((const uint32_t *)p)[i];
  case gcollInt64: return ((const int64_t *)p)[i];
  default: return ((const uint64_t *)p)[i];
  }
}

static double get_float(gcollDataType_t t, const void *p, size_t i) {
  switch (t) {
  case gcollFloat16: return gcoll_half_to_float(((const uint16_t *)p)[i]);
  case gcollBfloat16: return gcoll_bf16_to_float(((const uint16_t *)p)[i]);
  case gcollFloat32: return ((const float *)p)[i];
  default: return ((const double *)p)[i];
  }
}

/* The value v reduced modulo 2^bits into the type's range. Arithmetic on
 * unsigned __int128 is modulo 2^128, a multiple of 2^bits, so sums and
 * products can be formed there first (a uint64 product needs 128 bits). */
static wide_t wrap_to_type(gcollDataType_t t, unsigned __int128 v) {
  int bits = int_bits(t);
  unsigned __int128 mod = (unsigned __int128)1 << bits;
  wide_t m = (wide_t)(v & (mod - 1));
  if (is_signed_int(t) && m >= (wide_t)(mod / 2))
    m -= (wide_t)mod;
  return m;
}

/* The double x rounded to the type, as a double again. One op on two values
 * of a type computed exactly or in double and rounded here is the correctly
 * rounded result: double (53 bits) and float (24 bits) are both at least
 * 2p+2 bits wide for float (24) and the 16-bit types (11, 8). */
static double round_to_type(gcollDataType_t t, double x) {
  switch (t) {
  case gcollFloat16: return gcoll_half_to_float(gcoll_float_to_half((float)x));
  case gcollBfloat16: return gcoll_bf16_to_float(gcoll_float_to_bf16((float)x));
  case gcollFloat32: return (float)x;
  default: return x;
  }
}

static wide_t expect_int(gcollDataType_t t, gcollRedOp_t op, wide_t a, wide_t b) {
  switch (op) {
  case gcollProd: return wrap_to_type(t, (unsigned __int128)a * (unsigned __int128)b);
  case gcollMax: return a >= b ? a : b;
  case gcollMin: return a <= b ? a : b;
  default: return wrap_to_type(t, (unsigned __int128)a + (unsigned __int128)b);
  }
}

/* max/min ignore a NaN operand (fmax-like, as NCCL). */
static double expect_float(gcollDataType_t t, gcollRedOp_t op, double a, double b) {
  double r;
  switch (op) {
  case gcollProd: r = a * b; break;
  case gcollMax:
    r = isnan(a) ? b : isnan(b) ? a : (a >= b ? a : b);
    break;
  case gcollMin:
    r = isnan(a) ? b : isnan(b) ? a : (a <= b ? a : b);
    break;
  default: r = a + b; break;
  }
  return round_to_type(t, r);
}

/* Equal values; NaN matches any NaN and the zeros match each other. */
static int same_float(double x, double y) {
  return (isnan(x) && isnan(y)) || x == y;
}

/* Decimal text of a wide value (printf has no __int128 conversion). */
static const char *wide_str(char *buf, size_t len, wide_t v) {
  unsigned __int128 mag = v < 0 ? -(unsigned __int128)v : (unsigned __int128)v;
  char digits[48];
  int n = 0;
  do {
    digits[n++] = (char)('0' + (int)(mag % 10));
    mag /= 10;
  } while (mag != 0);
  size_t k = 0;
  if (v < 0 && k + 1 < len)
    buf[k++] = '-';
  while (n > 0 && k + 1 < len)
    buf[k++] = digits[--n];
  buf[k] = '\0';
  return buf;
}

/* Checks dst[i] == a[i] OP b[i] for i < count against the expectation. */
static void check_binary(gcollDataType_t t, gcollRedOp_t op, const void *dst,
                         const void *a, const void *b, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (is_int_type(t)) {
      wide_t want = expect_int(t, op, get_int(t, a, i), get_int(t, b, i));
      wide_t got = get_int(t, dst, i);
      if (want != got) {
        char w[64], g[64];
        fail_msg("%s %s element %zu of %zu: got %s, want %s", gcoll_dtype_name(t),
                 gcoll_redop_name(op), i, count, wide_str(g, sizeof(g), got),
                 wide_str(w, sizeof(w), want));
      }
    } else {
      double x = get_float(t, a, i), y = get_float(t, b, i);
      double want = expect_float(t, op, x, y), got = get_float(t, dst, i);
      if (!same_float(want, got))
        fail_msg("%s %s element %zu of %zu: %.17g op %.17g = %.17g, want %.17g",
                 gcoll_dtype_name(t), gcoll_redop_name(op), i, count, x, y, got,
                 want);
    }
  }
}

/* ---- Random data ----------------------------------------------------------
 * Floats: mostly values within a few binades of 1 (so sums round in
 * interesting ways and products stay finite), plus NaN, infinities, zeros,
 * subnormals and the full exponent range. */

static float random_float(unsigned long long r) {
  uint32_t sign = (uint32_t)(r >> 63) << 31;
  uint32_t mant = (uint32_t)(r >> 20) & 0x7fffffu;
  uint32_t bits;
  switch (r & 31) {
  case 0: bits = 0x7fc00000u | (mant & 0x3fffffu); break; /* NaN */
  case 1: bits = 0x7f800000u; break;                       /* Inf */
  case 2: bits = 0; break;                                 /* zero */
  case 3: bits = mant | 1u; break;                         /* subnormal */
  case 4: case 5: case 6: case 7:
    bits = (uint32_t)(1 + (r >> 50) % 254) << 23 | mant;   /* any exponent */
    break;
  default:
    bits = (uint32_t)(124 + (r >> 50) % 7) << 23 | mant;   /* near 1 */
    break;
  }
  return gcoll_bits_float(sign | bits);
}

static double random_double(unsigned long long r, unsigned long long r2) {
  uint64_t sign = (uint64_t)(r >> 63) << 63;
  uint64_t mant = r2 & 0xfffffffffffffull;
  uint64_t bits;
  switch (r & 31) {
  case 0: bits = 0x7ff8000000000000ull | (mant >> 1); break;
  case 1: bits = 0x7ff0000000000000ull; break;
  case 2: bits = 0; break;
  case 3: bits = mant | 1u; break;
  case 4: case 5: case 6: case 7:
    bits = (uint64_t)(1 + (r >> 40) % 2046) << 52 | mant;
    break;
  default:
    bits = (uint64_t)(1020 + (r >> 40) % 7) << 52 | mant;
    break;
  }
  bits |= sign;
  double d;
  memcpy(&d, &bits, sizeof(d));
  return d;
}

/* 16-bit floats: a quarter raw bit patterns (every class, by chance), the
 * rest near 1 with full mantissas. */
static uint16_t random_16bit(unsigned long long r, int exp_shift, int bias) {
  uint16_t sign = (uint16_t)((r >> 63) << 15);
  uint16_t mant_mask = (uint16_t)((1u << exp_shift) - 1u);
  if ((r & 3) == 0)
    return (uint16_t)(r >> 20);
  uint16_t mant = (uint16_t)((r >> 20) & mant_mask);
  uint16_t exp = (uint16_t)(bias - 3 + (int)((r >> 40) % 7));
  return (uint16_t)(sign | exp << exp_shift | mant);
}

static void fill_random(gcollDataType_t t, void *p, size_t count,
                        unsigned long long *seed) {
  for (size_t i = 0; i < count; i++) {
    unsigned long long r = test_rand(seed);
    switch (t) {
    case gcollFloat32: ((float *)p)[i] = random_float(r); break;
    case gcollFloat64: ((double *)p)[i] = random_double(r, test_rand(seed)); break;
    case gcollFloat16: ((uint16_t *)p)[i] = random_16bit(r, 10, 15); break;
    case gcollBfloat16: ((uint16_t *)p)[i] = random_16bit(r, 7, 127); break;
    default: memcpy((char *)p + i * elem_size(t), &r, elem_size(t)); break;
    }
  }
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

static void *random_buffer(gcollDataType_t t, size_t count, unsigned long long *seed) {
  void *p = xmalloc(count * elem_size(t));
  fill_random(t, p, count, seed);
  return p;
}

static void *copy_buffer(const void *src, size_t bytes) {
  void *p = xmalloc(bytes);
  memcpy(p, src, bytes);
  return p;
}

/* ---- gcoll_reduce --------------------------------------------------------- */

static void test_all_types_ops_counts(void **state) {
  unsigned long long seed = 0x5eed0001ull;
  for (int t = 0; t < gcollNumTypes; t++)
    for (int op = 0; op < gcollNumOps; op++)
      for (size_t c = 0; c < NCOUNTS; c++) {
        size_t n = counts[c], bytes = n * elem_size(t);
        void *a = random_buffer(t, n, &seed), *b = random_buffer(t, n, &seed);
        void *a0 = copy_buffer(a, bytes), *b0 = copy_buffer(b, bytes);
        void *dst = xmalloc(bytes);
        gcoll_reduce(dst, a, b, n, t, op);
        check_binary(t, op, dst, a, b, n);
        assert_memory_equal(a, a0, bytes);
        assert_memory_equal(b, b0, bytes);
        free(a); free(b); free(a0); free(b0); free(dst);
      }
}

static void test_in_place(void **state) {
  unsigned long long seed = 0x5eed0002ull;
  for (int t = 0; t < gcollNumTypes; t++)
    for (int op = 0; op < gcollNumOps; op++)
      for (size_t c = 0; c < NCOUNTS; c++) {
        size_t n = counts[c], bytes = n * elem_size(t);
        void *a = random_buffer(t, n, &seed), *b = random_buffer(t, n, &seed);
        void *a0 = copy_buffer(a, bytes), *b0 = copy_buffer(b, bytes);
        gcoll_reduce(a, a, b, n, t, op); /* dst == a */
        check_binary(t, op, a, a0, b0, n);
        assert_memory_equal(b, b0, bytes);
        memcpy(a, a0, bytes);
        gcoll_reduce(b, a, b, n, t, op); /* dst == b */
        check_binary(t, op, b, a0, b0, n);
        assert_memory_equal(a, a0, bytes);
        memcpy(b, b0, bytes);
        gcoll_reduce(a, a, a, n, t, op); /* both inputs the output */
        check_binary(t, op, a, a0, a0, n);
        free(a); free(b); free(a0); free(b0);
      }
}

/* Starting points that are element- but not vector-aligned, and lengths
 * that end mid-block, so vector body and scalar tail split differently;
 * elements outside the range must stay untouched. */
static void test_misaligned_ranges(void **state) {
  unsigned long long seed = 0x5eed0003ull;
  const size_t total = 300;
  for (int t = 0; t < gcollNumTypes; t++)
    for (int op = 0; op < gcollNumOps; op++)
      for (size_t off = 0; off < 5; off++) {
        size_t es = elem_size(t), n = total - 2 * off - (size_t)op * 3;
        void *a = random_buffer(t, total, &seed), *b = random_buffer(t, total, &seed);
        void *dst = random_buffer(t, total, &seed);
        void *dst0 = copy_buffer(dst, total * es);
        char *d = (char *)dst + off * es;
        gcoll_reduce(d, (char *)a + off * es, (char *)b + off * es, n, t, op);
        check_binary(t, op, d, (char *)a + off * es, (char *)b + off * es, n);
        assert_memory_equal(dst, dst0, off * es);
        assert_memory_equal(d + n * es, (char *)dst0 + (off + n) * es,
                            (total - off - n) * es);
        free(a); free(b); free(dst); free(dst0);
      }
}

/* The documented NaN rule on all floating types, both operand orders.
 * The grid of pairs repeats so that every type's call is past
 * GCOLL_REDUCE_WIDE_BYTES and runs the vector loops. */
static void test_minmax_nan(void **state) {
  const gcollDataType_t types[] = {gcollFloat16, gcollFloat32, gcollFloat64,
                                   gcollBfloat16};
  const double values[] = {-2.5, 0.0, 1.0, 3.75, INFINITY, -INFINITY, NAN};
  const size_t nv = sizeof(values) / sizeof(values[0]), total = 8 * nv * nv;
  for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
    gcollDataType_t t = types[k];
    size_t es = elem_size(t);
    assert_true(total * es >= GCOLL_REDUCE_WIDE_BYTES);
    char *a = xmalloc(total * es), *b = xmalloc(total * es);
    char *mx = xmalloc(total * es), *mn = xmalloc(total * es);
    for (size_t e = 0; e < total; e++) {
      size_t i = e / nv % nv, j = e % nv;
      {
        float x = (float)values[i], y = (float)values[j];
        switch (t) {
        case gcollFloat16:
          ((uint16_t *)a)[e] = gcoll_float_to_half(x);
          ((uint16_t *)b)[e] = gcoll_float_to_half(y);
          break;
        case gcollBfloat16:
          ((uint16_t *)a)[e] = gcoll_float_to_bf16(x);
          ((uint16_t *)b)[e] = gcoll_float_to_bf16(y);
          break;
        case gcollFloat32: ((float *)a)[e] = x; ((float *)b)[e] = y; break;
        default: ((double *)a)[e] = values[i]; ((double *)b)[e] = values[j]; break;
        }
      }
    }
    gcoll_reduce(mx, a, b, total, t, gcollMax);
    gcoll_reduce(mn, a, b, total, t, gcollMin);
    for (size_t e = 0; e < total; e++) {
      double x = get_float(t, a, e), y = get_float(t, b, e);
      double gmax = get_float(t, mx, e), gmin = get_float(t, mn, e);
      if (isnan(x) && isnan(y)) {
        assert_true(isnan(gmax) && isnan(gmin));
      } else if (isnan(x) || isnan(y)) {
        double other = isnan(x) ? y : x;
        if (gmax != other || gmin != other)
          fail_msg("%s: max/min(%g, %g) = %g/%g, want the non-NaN operand",
                   gcoll_dtype_name(t), x, y, gmax, gmin);
      } else {
        assert_true(gmax == (x > y ? x : y));
        assert_true(gmin == (x < y ? x : y));
      }
    }
    free(a); free(b); free(mx); free(mn);
  }
}

/* Wrap-around on sums and products of edge values of the signed types:
 * the library must produce the two's complement result and (under UBSan)
 * without signed overflow. */
static void test_integer_wrap(void **state) {
  const gcollDataType_t types[] = {gcollInt8, gcollInt32, gcollInt64,
                                   gcollUint8, gcollUint32, gcollUint64};
  for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
    gcollDataType_t t = types[k];
    int bits = int_bits(t);
    wide_t lo = is_signed_int(t) ? -((wide_t)1 << (bits - 1)) : 0;
    wide_t hi = is_signed_int(t) ? ((wide_t)1 << (bits - 1)) - 1
                                 : ((wide_t)1 << bits) - 1;
    const wide_t edges[] = {lo, lo + 1, lo + 2, -1, 0, 1, 2, hi - 1, hi,
                            hi / 2, hi / 2 + 1, lo / 2};
    const size_t ne = sizeof(edges) / sizeof(edges[0]);
    size_t es = elem_size(t), n = ne * ne;
    char *a = xmalloc(n * es), *b = xmalloc(n * es), *d = xmalloc(n * es);
    for (size_t i = 0; i < ne; i++)
      for (size_t j = 0; j < ne; j++) {
        /* Converting to uint64_t and then to the width's unsigned type is
         * reduction modulo 2^bits: the two's complement bit pattern. */
        uint64_t x = (uint64_t)wrap_to_type(t, edges[i]);
        uint64_t y = (uint64_t)wrap_to_type(t, edges[j]);
        size_t e = i * ne + j;
        switch (bits) {
        case 8: ((uint8_t *)a)[e] = (uint8_t)x; ((uint8_t *)b)[e] = (uint8_t)y; break;
        case 32: ((uint32_t *)a)[e] = (uint32_t)x; ((uint32_t *)b)[e] = (uint32_t)y; break;
        default: ((uint64_t *)a)[e] = x; ((uint64_t *)b)[e] = y; break;
        }
      }
    for (int op = 0; op < gcollNumOps; op++) {
      gcoll_reduce(d, a, b, n, t, op);
      check_binary(t, op, d, a, b, n);
    }
    free(a); free(b); free(d);
  }
  /* The classic cases spelled out, so a broken wrap_to_type cannot hide a
   * broken library. */
  int8_t i8a = INT8_MAX, i8b = 1, i8d;
  gcoll_reduce(&i8d, &i8a, &i8b, 1, gcollInt8, gcollSum);
  assert_int_equal(i8d, INT8_MIN);
  int32_t i32a = INT32_MIN, i32b = -1, i32d;
  gcoll_reduce(&i32d, &i32a, &i32b, 1, gcollInt32, gcollProd);
  assert_int_equal(i32d, INT32_MIN);
  int64_t i64a = INT64_MAX, i64b = INT64_MAX, i64d;
  gcoll_reduce(&i64d, &i64a, &i64b, 1, gcollInt64, gcollSum);
  assert_true(i64d == -2);
}

/* ---- avg -------------------------------------------------------------------- */

/* a / n truncated toward zero, from the magnitude. */
static wide_t trunc_div(wide_t a, int n) {
  wide_t mag = a < 0 ? -a : a;
  wide_t q = mag / n;
  return a < 0 ? -q : q;
}

static void check_avg(gcollDataType_t t, const void *before, const void *after,
                      size_t count, int n) {
  for (size_t i = 0; i < count; i++) {
    if (is_int_type(t)) {
      wide_t want = trunc_div(get_int(t, before, i), n), got = get_int(t, after, i);
      char w[64], g[64];
      if (want != got)
        fail_msg("%s avg element %zu, n=%d: got %s, want %s", gcoll_dtype_name(t), i, n,
                 wide_str(g, sizeof(g), got), wide_str(w, sizeof(w), want));
    } else {
      double x = get_float(t, before, i);
      double want = round_to_type(t, x / n), got = get_float(t, after, i);
      if (!same_float(want, got))
        fail_msg("%s avg element %zu, n=%d: %.17g / n = %.17g, want %.17g",
                 gcoll_dtype_name(t), i, n, x, got, want);
    }
  }
}

static void test_avg_finish(void **state) {
  unsigned long long seed = 0x5eed0004ull;
  const int ns[] = {1, 2, 3, 7, 8, 128, 1000, 65537};
  for (int t = 0; t < gcollNumTypes; t++)
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
      for (size_t c = 0; c < NCOUNTS; c++) {
        size_t count = counts[c], bytes = count * elem_size(t);
        void *buf = random_buffer(t, count, &seed), *before = copy_buffer(buf, bytes);
        gcoll_avg_finish(buf, count, t, ns[k]);
        check_avg(t, before, buf, count, ns[k]);
        free(buf); free(before);
      }
}

/* Negative integers truncate toward zero (-7/2 = -3, not -4), the most
 * negative value included; n < 1 leaves the buffer alone. */
static void test_avg_negative_ints(void **state) {
  int8_t v8[] = {-7, -1, INT8_MIN, 7, -128, -3};
  gcoll_avg_finish(v8, 6, gcollInt8, 2);
  const int8_t w8[] = {-3, 0, -64, 3, -64, -1};
  assert_memory_equal(v8, w8, sizeof(w8));
  const int32_t in32[] = {-7, -5, INT32_MIN, INT32_MAX, -2, 2};
  int32_t v32[6];
  memcpy(v32, in32, sizeof(v32));
  gcoll_avg_finish(v32, 6, gcollInt32, 3);
  for (int i = 0; i < 6; i++)
    assert_true(v32[i] == trunc_div(in32[i], 3));
  assert_int_equal(v32[0], -2);
  assert_int_equal(v32[4], 0);
  int64_t v64[] = {INT64_MIN, -9};
  gcoll_avg_finish(v64, 2, gcollInt64, 4);
  assert_true(v64[0] == INT64_MIN / 4);
  assert_true(v64[1] == -2);
  int32_t keep[] = {-9, 9};
  gcoll_avg_finish(keep, 2, gcollInt32, 0);
  gcoll_avg_finish(keep, 2, gcollInt32, -3);
  assert_int_equal(keep[0], -9);
  assert_int_equal(keep[1], 9);
}

/* ---- half ------------------------------------------------------------------ */

/* The value of a half bit pattern from its definition. */
static double half_value(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double mag = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
  if (exp == 0x1f)
    mag = mant ? NAN : INFINITY;
  return sign ? -mag : mag;
}

static double bf16_value(uint16_t h) {
  int sign = h >> 15, exp = (h >> 7) & 0xff, mant = h & 0x7f;
  double mag = exp == 0 ? ldexp(mant, -133) : ldexp(128 + mant, exp - 134);
  if (exp == 0xff)
    mag = mant ? NAN : INFINITY;
  return sign ? -mag : mag;
}

/* Every bit pattern converts to its exact value (sign of zero included) and
 * back to itself; NaNs stay NaN with sign and payload, quieted. */
static void check_exhaustive_16bit(double (*value)(uint16_t), float (*to_float)(uint16_t),
                                   uint16_t (*from_float)(float), uint16_t exp_mask,
                                   uint16_t quiet_bit) {
  for (uint32_t u = 0; u <= 0xffff; u++) {
    uint16_t h = (uint16_t)u;
    double want = value(h);
    float f = to_float(h);
    uint16_t back = from_float(f);
    if (isnan(want)) {
      if (!isnan(f) || !!signbit(f) != !!(h & 0x8000))
        fail_msg("0x%04x: NaN converts to %g", h, f);
      if (back != (h | quiet_bit))
        fail_msg("0x%04x: NaN round-trips to 0x%04x", h, back);
      assert_true((back & exp_mask) == exp_mask && (back & ~exp_mask & 0x7fff) != 0);
      continue;
    }
    if ((double)f != want || !!signbit(f) != !!(h & 0x8000))
      fail_msg("0x%04x converts to %.10g, want %.10g", h, f, want);
    if (back != h)
      fail_msg("0x%04x round-trips to 0x%04x", h, back);
  }
}

static void test_half_exhaustive(void **state) {
  check_exhaustive_16bit(half_value, gcoll_half_to_float, gcoll_float_to_half,
                         0x7c00, 0x0200);
}

static void test_bf16_exhaustive(void **state) {
  check_exhaustive_16bit(bf16_value, gcoll_bf16_to_float, gcoll_float_to_bf16,
                         0x7f80, 0x0040);
}

/* Rounding at every boundary: for each pair of adjacent finite values
 * (h, h+1) of one sign, the exact midpoint rounds to the even one of the
 * two, and the floats just below/above it to h and h+1. This walks through
 * every subnormal, the subnormal/normal edge and each binade change. The
 * last finite value's upper neighbour is the infinity pattern, so the
 * overflow threshold is checked the same way. */
static void check_midpoints(uint16_t (*from_float)(float), float (*to_float)(uint16_t),
                            uint16_t inf_bits) {
  for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000)
    for (uint32_t h = 0; h < inf_bits; h++) {
      uint16_t lo_bits = (uint16_t)(sign | h), hi_bits = (uint16_t)(sign | (h + 1));
      double lo = to_float(lo_bits);
      double hi = h + 1 == inf_bits ? 2 * (double)to_float((uint16_t)(sign | h)) -
                                          (double)to_float((uint16_t)(sign | (h - 1)))
                                    : (double)to_float(hi_bits);
      float mid = (float)((lo + hi) / 2);
      assert_true((double)mid == (lo + hi) / 2); /* exact in float */
      float below = nextafterf(mid, (float)lo), above = nextafterf(mid, (float)hi);
      uint16_t even = (h & 1) ? hi_bits : lo_bits;
      if (from_float(mid) != even)
        fail_msg("midpoint %.10g of 0x%04x/0x%04x gives 0x%04x, want 0x%04x", mid,
                 lo_bits, hi_bits, from_float(mid), even);
      if (from_float(below) != lo_bits || from_float(above) != hi_bits)
        fail_msg("around midpoint %.10g of 0x%04x/0x%04x: 0x%04x/0x%04x", mid, lo_bits,
                 hi_bits, from_float(below), from_float(above));
      if (from_float((float)lo) != lo_bits)
        fail_msg("0x%04x does not convert back exactly", lo_bits);
    }
}

static void test_half_rounding(void **state) {
  check_midpoints(gcoll_float_to_half, gcoll_half_to_float, 0x7c00);
  /* Named boundaries, computed from their definitions. */
  assert_int_equal(gcoll_float_to_half(65504.0f), 0x7bff);
  assert_int_equal(gcoll_float_to_half(nextafterf(65520.0f, 0)), 0x7bff);
  assert_int_equal(gcoll_float_to_half(65520.0f), 0x7c00);
  assert_int_equal(gcoll_float_to_half(-65520.0f), 0xfc00);
  assert_int_equal(gcoll_float_to_half(FLT_MAX), 0x7c00);
  assert_int_equal(gcoll_float_to_half(INFINITY), 0x7c00);
  assert_int_equal(gcoll_float_to_half(-INFINITY), 0xfc00);
  assert_int_equal(gcoll_float_to_half(1.0f + ldexpf(1, -11)), 0x3c00); /* tie -> even */
  assert_int_equal(gcoll_float_to_half(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
  assert_int_equal(gcoll_float_to_half(ldexpf(1, -24)), 0x0001); /* smallest subnormal */
  assert_int_equal(gcoll_float_to_half(ldexpf(1, -25)), 0x0000); /* tie -> even zero */
  assert_int_equal(gcoll_float_to_half(nextafterf(ldexpf(1, -25), 1)), 0x0001);
  assert_int_equal(gcoll_float_to_half(-ldexpf(1, -26)), 0x8000); /* keeps the sign */
  assert_int_equal(gcoll_float_to_half(FLT_TRUE_MIN), 0x0000);
  assert_int_equal(gcoll_float_to_half(ldexpf(1023.5f, -24)), 0x0400); /* into normal */
  assert_int_equal(gcoll_float_to_half(ldexpf(1, -14)), 0x0400);
  assert_true(isnan(gcoll_half_to_float(gcoll_float_to_half(NAN))));
  assert_true(isnan(gcoll_half_to_float(gcoll_float_to_half(-NAN))));
  /* A float NaN whose payload lives only in bits a half drops stays NaN. */
  assert_true(isnan(gcoll_half_to_float(gcoll_float_to_half(gcoll_bits_float(0x7f800001u)))));
}

static void test_bf16_rounding(void **state) {
  check_midpoints(gcoll_float_to_bf16, gcoll_bf16_to_float, 0x7f80);
  assert_int_equal(gcoll_float_to_bf16(FLT_MAX), 0x7f80); /* above max's midpoint */
  assert_int_equal(gcoll_float_to_bf16(-FLT_MAX), 0xff80);
  assert_int_equal(gcoll_float_to_bf16(gcoll_bits_float(0x7f7f7fffu)), 0x7f7f);
  assert_int_equal(gcoll_float_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80); /* tie -> even */
  assert_int_equal(gcoll_float_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);
  assert_int_equal(gcoll_float_to_bf16(FLT_TRUE_MIN), 0x0000); /* below half an ulp */
  /* subnormal ties: to the even neighbour, down from 0, up from 1 */
  assert_int_equal(gcoll_float_to_bf16(gcoll_bits_float(0x00008000u)), 0x0000);
  assert_int_equal(gcoll_float_to_bf16(gcoll_bits_float(0x00018000u)), 0x0002);
  assert_int_equal(gcoll_float_to_bf16(gcoll_bits_float(0x00008001u)), 0x0001);
  assert_true(isnan(gcoll_bf16_to_float(gcoll_float_to_bf16(gcoll_bits_float(0x7f800001u)))));
  assert_true(isnan(gcoll_bf16_to_float(gcoll_float_to_bf16(gcoll_bits_float(0xff800001u)))));
}

/* Random floats across the whole range: the result is the nearest value
 * (ties to even), judged against both neighbours of the result. */
static void check_random_nearest(uint16_t (*from_float)(float), double (*value)(uint16_t),
                                 uint16_t inf_bits, unsigned long long seed) {
  for (int k = 0; k < 200000; k++) {
    unsigned long long r = test_rand(&seed);
    float f = gcoll_bits_float((uint32_t)r);
    if (isnan(f))
      continue;
    uint16_t h = from_float(f), mag = h & 0x7fff, sign = h & 0x8000;
    if (!!signbit(f) != !!sign)
      fail_msg("%.9g converts to 0x%04x with the wrong sign", f, h);
    assert_true(mag <= inf_bits);
    double err = fabs((double)f - value(h));
    if (mag == inf_bits) { /* overflow: f must be at or past the midpoint */
      double maxv = value((uint16_t)(inf_bits - 1)), next_up = 2 * maxv - value(inf_bits - 2);
      if (fabs((double)f) < (maxv + next_up) / 2)
        fail_msg("%.9g overflows to infinity below the threshold", f);
      continue;
    }
    for (int d = -1; d <= 1; d += 2) {
      int nb = mag + d;
      if (nb < 0 || nb >= inf_bits)
        continue;
      double nerr = fabs((double)f - value((uint16_t)(sign | nb)));
      if (nerr < err || (nerr == err && (mag & 1)))
        fail_msg("%.9g -> 0x%04x but 0x%04x is nearer or even", f, h, sign | nb);
    }
  }
}

static void test_random_nearest(void **state) {
  check_random_nearest(gcoll_float_to_half, half_value, 0x7c00, 0x5eed0005ull);
  check_random_nearest(gcoll_float_to_bf16, bf16_value, 0x7f80, 0x5eed0006ull);
}

/* ---- Names ------------------------------------------------------------------ */

/* The ISA choice: names round-trip, and asking for more than the CPU has
 * (or for nothing) gives the best it has. */
static void test_isa_choice(void **state) {
  const int best = gcoll_reduce_best_isa(), before = gcoll_reduce_isa();
  for (int i = 0; i < GCOLL_REDUCE_NUM_ISAS; i++)
    assert_int_equal(gcoll_reduce_isa_from_name(gcoll_reduce_isa_name(i)), i);
  assert_null(gcoll_reduce_isa_name(-1));
  assert_null(gcoll_reduce_isa_name(GCOLL_REDUCE_NUM_ISAS));
  assert_int_equal(gcoll_reduce_isa_from_name("sse9"), -1);
  assert_int_equal(gcoll_reduce_isa_from_name(NULL), -1);
  assert_int_equal(gcoll_reduce_set_isa(-1), best);
  assert_int_equal(gcoll_reduce_set_isa(GCOLL_REDUCE_NUM_ISAS + 5), best);
  assert_int_equal(gcoll_reduce_isa(), best);
  assert_int_equal(gcoll_reduce_set_isa(GCOLL_REDUCE_BASELINE), GCOLL_REDUCE_BASELINE);
  assert_int_equal(gcoll_reduce_set_isa(before), before);
}

static void test_names(void **state) {
  const size_t sizes[] = {sizeof(int8_t), sizeof(uint8_t), sizeof(int32_t),
                          sizeof(uint32_t), sizeof(int64_t), sizeof(uint64_t),
                          2, sizeof(float), sizeof(double), 2};
  for (int t = 0; t < gcollNumTypes; t++) {
    const char *name = gcoll_dtype_name(t);
    assert_non_null(name);
    assert_int_equal(gcoll_dtype_from_name(name), t);
    assert_int_equal(gcoll_dtype_size(t), sizes[t]);
    for (int u = 0; u < t; u++)
      assert_string_not_equal(name, gcoll_dtype_name(u));
  }
  for (int op = 0; op < gcollNumOps; op++) {
    const char *name = gcoll_redop_name(op);
    assert_non_null(name);
    assert_int_equal(gcoll_redop_from_name(name), op);
  }
  assert_string_equal(gcoll_dtype_name(gcollHalf), "half");
  assert_string_equal(gcoll_dtype_name(gcollBfloat16), "bfloat16");
  assert_string_equal(gcoll_redop_name(gcollAvg), "avg");
  assert_int_equal(gcoll_dtype_from_name("float16"), gcollHalf);
  assert_int_equal(gcoll_dtype_from_name("float32"), gcollFloat);
  assert_int_equal(gcoll_dtype_from_name("float64"), gcollDouble);
  assert_int_equal(gcoll_dtype_from_name("bf16"), gcollBfloat16);
  assert_int_equal(gcoll_dtype_from_name("char"), gcollInt8);
  assert_int_equal(gcoll_dtype_from_name("int"), gcollInt32);
  const char *bad[] = {"", "Float", "int16", "fp8", "float ", "sum", "half2", "i"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(gcoll_dtype_from_name(bad[i]), -1);
    if (strcmp(bad[i], "sum") != 0)
      assert_int_equal(gcoll_redop_from_name(bad[i]), -1);
  }
  assert_int_equal(gcoll_redop_from_name("mulsum"), -1);
  assert_int_equal(gcoll_redop_from_name("float"), -1);
  assert_int_equal(gcoll_dtype_from_name(NULL), -1);
  assert_int_equal(gcoll_redop_from_name(NULL), -1);
  assert_null(gcoll_dtype_name(gcollNumTypes));
  assert_null(gcoll_dtype_name((gcollDataType_t)-1));
  assert_int_equal(gcoll_dtype_size(gcollNumTypes), 0);
  assert_int_equal(gcoll_dtype_size((gcollDataType_t)-1), 0);
  assert_null(gcoll_redop_name(gcollNumOps));
  assert_null(gcoll_redop_name((gcollRedOp_t)-1));
}

/* Invalid types and ops write nothing. */
static void test_invalid_args_untouched(void **state) {
  uint64_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, d[4] = {9, 9, 9, 9};
  gcoll_reduce(d, a, b, 4, gcollNumTypes, gcollSum);
  gcoll_reduce(d, a, b, 4, (gcollDataType_t)-1, gcollSum);
  gcoll_reduce(d, a, b, 4, gcollUint64, gcollNumOps);
  gcoll_reduce(d, a, b, 4, gcollUint64, (gcollRedOp_t)-1);
  gcoll_avg_finish(d, 4, gcollNumTypes, 2);
  const void *in[2] = {a, b};
  gcoll_reduce_reference(d, in, 2, 4, gcollNumTypes, gcollSum);
  gcoll_reduce_reference(d, in, 2, 4, gcollUint64, gcollNumOps);
  gcoll_reduce_reference(d, in, 0, 4, gcollUint64, gcollSum);
  for (int i = 0; i < 4; i++)
    assert_true(d[i] == 9);
  gcoll_reduce(NULL, NULL, NULL, 0, gcollFloat, gcollSum); /* count 0: no access */
}

/* ---- Serial reference ------------------------------------------------------ */

static void assert_same_elements(gcollDataType_t t, const void *x, const void *y,
                                 size_t count, const char *what, int n, int op) {
  for (size_t i = 0; i < count; i++) {
    int same = is_int_type(t) ? get_int(t, x, i) == get_int(t, y, i)
                              : same_float(get_float(t, x, i), get_float(t, y, i));
    if (!same)
      fail_msg("%s: %s %s n=%d element %zu differs", what, gcoll_dtype_name(t),
               gcoll_redop_name(op), n, i);
  }
}

/* The reference equals the chain ((in0 OP in1) OP in2) ... of gcoll_reduce
 * calls (then avg_finish), including when out is one of the inputs. */
static void test_reference_matches_chain(void **state) {
  unsigned long long seed = 0x5eed0007ull;
  const size_t count = 261;
  for (int t = 0; t < gcollNumTypes; t++)
    for (int op = 0; op < gcollNumOps; op++)
      for (int n = 1; n <= 8; n++) {
        size_t bytes = count * elem_size(t);
        void *in[8];
        for (int r = 0; r < n; r++)
          in[r] = random_buffer(t, count, &seed);
        void *chain = copy_buffer(in[0], bytes);
        for (int r = 1; r < n; r++)
          gcoll_reduce(chain, chain, in[r], count, t, op);
        if (op == gcollAvg)
          gcoll_avg_finish(chain, count, t, n);
        void *ref = xmalloc(bytes);
        gcoll_reduce_reference(ref, (const void *const *)in, n, count, t, op);
        assert_same_elements(t, ref, chain, count, "reference vs chain", n, op);
        /* out aliasing the last input */
        gcoll_reduce_reference(in[n - 1], (const void *const *)in, n, count, t, op);
        assert_same_elements(t, in[n - 1], chain, count, "reference in place", n, op);
        for (int r = 0; r < n; r++)
          free(in[r]);
        free(chain); free(ref);
      }
}

/* For n = 3 the reference is also checked against the test's own
 * expectation, step by step, so reference and loops cannot agree on a
 * shared mistake. */
static void test_reference_independent(void **state) {
  unsigned long long seed = 0x5eed0008ull;
  const size_t count = 333;
  for (int t = 0; t < gcollNumTypes; t++)
    for (int op = 0; op < gcollNumOps; op++) {
      size_t bytes = count * elem_size(t);
      void *in[3] = {random_buffer(t, count, &seed), random_buffer(t, count, &seed),
                     random_buffer(t, count, &seed)};
      void *ref = xmalloc(bytes), *step = xmalloc(bytes);
      gcoll_reduce_reference(ref, (const void *const *)in, 3, count, t, op);
      gcoll_reduce_reference(step, (const void *const *)in, 2, count, t,
                             op == gcollAvg ? gcollSum : op);
      check_binary(t, op, step, in[0], in[1], count);
      if (op == gcollAvg) {
        void *sum3 = xmalloc(bytes);
        gcoll_reduce_reference(sum3, (const void *const *)in, 3, count, t, gcollSum);
        check_binary(t, gcollSum, sum3, step, in[2], count);
        check_avg(t, sum3, ref, count, 3);
        free(sum3);
      } else {
        check_binary(t, op, ref, step, in[2], count);
      }
      for (int r = 0; r < 3; r++)
        free(in[r]);
      free(ref); free(step);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_types_ops_counts),
      cmocka_unit_test(test_in_place),
      cmocka_unit_test(test_misaligned_ranges),
      cmocka_unit_test(test_minmax_nan),
      cmocka_unit_test(test_integer_wrap),
      cmocka_unit_test(test_avg_finish),
      cmocka_unit_test(test_avg_negative_ints),
      cmocka_unit_test(test_half_exhaustive),
      cmocka_unit_test(test_bf16_exhaustive),
      cmocka_unit_test(test_half_rounding),
      cmocka_unit_test(test_bf16_rounding),
      cmocka_unit_test(test_random_nearest),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_isa_choice),
      cmocka_unit_test(test_invalid_args_untouched),
      cmocka_unit_test(test_reference_matches_chain),
      cmocka_unit_test(test_reference_independent),
  };
  /* Every loop the CPU can run, not only the one gcoll picks. */
  int failed = 0, best = gcoll_reduce_best_isa();
  for (int isa = GCOLL_REDUCE_BASELINE; isa <= best; isa++) {
    char name[64];
    snprintf(name, sizeof(name), "reduce loops: %s", gcoll_reduce_isa_name(isa));
    if (gcoll_reduce_set_isa(isa) != isa) {
      fprintf(stderr, "gcoll_reduce_set_isa(%s) did not take\n", gcoll_reduce_isa_name(isa));
      return 1;
    }
    failed += cmocka_run_group_tests_name(name, tests, NULL, NULL);
  }
  return failed;
}
