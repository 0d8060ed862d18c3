/* IEEE binary16 ("half") and bfloat16 <-> float conversions.
 *
 * The reduction loops keep 16-bit floats as raw uint16_t bit patterns and do
 * their arithmetic in float, so these four functions are all the 16-bit float
 * support the kernels need. They are bit-exact and portable C: no compiler
 * _Float16/__bf16 extensions (whose availability and rounding differ between
 * compilers and targets) and no libc beyond memcpy, so the same header
 * compiles as CUDA device code (GCOLL_HD).
 *
 * Semantics:
 *  - to-float is exact for every bit pattern (subnormals included); NaN stays
 *    NaN with its payload shifted into the top of the float mantissa.
 *  - from-float rounds to nearest, ties to even, with gradual underflow
 *    (float values below half's normal range become half subnormals, never
 *    flushed) and overflow to infinity exactly where IEEE rounding says so
 *    (|x| >= 65520 for half; above the midpoint of the largest finite bfloat16
 *    and infinity for bfloat16). NaN gives a quiet NaN of the same sign whose
 *    payload keeps the top payload bits: a NaN never turns into infinity.
 */
#ifndef GCOLL_KERNELS_HALF_H
#define GCOLL_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

/* Functions callable from both host and CUDA device code. */
#if defined(__CUDACC__)
#define GCOLL_HD __host__ __device__
#else
#define GCOLL_HD
#endif

GCOLL_HD static inline uint32_t gcoll_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

GCOLL_HD static inline float gcoll_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* Rounds the value `mant * 2^-shift` (1 <= shift <= 31) to the nearest
 * integer, ties to even: the one rounding step every narrowing conversion
 * ends with. Adding just under half, plus the kept part's low bit, carries
 * into the kept part exactly when rounding goes up; being branch-free
 * matters because the discarded bits of real data are random. mant must be
 * below 2^32 - 2^shift. */
GCOLL_HD static inline uint32_t gcoll_shift_round_even(uint32_t mant,
                                                       unsigned shift) {
  uint32_t lsb = (mant >> shift) & 1u;
  return (mant + ((1u << (shift - 1u)) - 1u) + lsb) >> shift;
}

/* All-ones when cond is true, else zero: for selecting with & and |. */
GCOLL_HD static inline uint32_t gcoll_mask32(int cond) {
  return 0u - (uint32_t)(cond != 0);
}

/* Branch-free so that loops over it vectorise. Selection is by bit masks,
 * not ?:, because GCC turns ?: around the int->float conversion into a
 * branch it may not undo (under -ftrapping-math a conversion may raise
 * "inexact", so it cannot be executed speculatively). */
GCOLL_HD static inline float gcoll_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu; /* exponent and mantissa */
  /* Normal: move into place and rebias the exponent (15 -> 127). Inf/NaN:
   * rebias once more so the exponent field becomes all ones, keeping the
   * NaN payload. */
  uint32_t normal = (em << 13) + (112u << 23);
  normal += gcoll_mask32(em >= 0x7c00u) & (112u << 23);
  /* Subnormal, em * 2^-24 with em < 1024: convert em exactly to float and
   * take 24 off its exponent field. Integer work on the bits, so it needs
   * no rounding mode and survives flush-to-zero. Zero is masked to zero. */
  uint32_t sub = gcoll_float_bits((float)(int32_t)em) - (24u << 23);
  uint32_t is_sub = gcoll_mask32(em < 0x0400u);
  uint32_t mag = ((sub & is_sub) | (normal & ~is_sub)) & gcoll_mask32(em != 0);
  return gcoll_bits_float(sign | mag);
}

GCOLL_HD static inline uint16_t gcoll_float_to_half(float f) {
  uint32_t x = gcoll_float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  uint32_t exp = ax >> 23;
  /* Half normal range (>= 2^-14): rebias the exponent in place (127 -> 15)
   * and round away the 13 extra mantissa bits; a carry out of the mantissa
   * correctly bumps the exponent. Garbage for smaller ax, not selected. */
  uint32_t normal = gcoll_shift_round_even(ax - (112u << 23), 13);
  /* Below 2^-14 the result is a subnormal m * 2^-24 (or 0x0400, the
   * smallest normal, when rounding carries). The value is mant * 2^(e-150)
   * with the implicit bit restored, so m = mant * 2^(e-126). The shift is
   * clamped to [14, 25]: 25 already rounds everything below 2^-25 to zero
   * (2^-25 itself ties to even, 0), and float subnormals (e = 0) land
   * there too, where the wrongly restored implicit bit cannot matter. */
  uint32_t e_clamped = exp < 101u ? 101u : exp > 112u ? 112u : exp;
  uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  uint32_t subnormal = gcoll_shift_round_even(mant, 126u - e_clamped);
  uint32_t mag = ax >= 0x38800000u ? normal : subnormal;
  /* >= 65520, the midpoint above 65504, rounds up to infinity. */
  mag = ax >= 0x477ff000u ? 0x7c00u : mag;
  /* NaN: force the quiet bit so the payload cannot shift out to zero and
   * leave an infinity. */
  mag = ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x1ffu)) : mag;
  return (uint16_t)(sign | mag);
}

GCOLL_HD static inline float gcoll_bf16_to_float(uint16_t h) {
  return gcoll_bits_float((uint32_t)h << 16);
}

GCOLL_HD static inline uint16_t gcoll_float_to_bf16(float f) {
  uint32_t x = gcoll_float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet it (see half) */
    return (uint16_t)((x >> 16) | 0x0040u);
  /* bfloat16 is the top half of a float, so rounding is one integer add:
   * below-half remainders never carry, above-half always do, and exactly
   * half carries only when the kept part is odd. A carry out of the
   * mantissa bumps the exponent, up to infinity. Float subnormals need no
   * special case: they map onto bfloat16 subnormals bit for bit. */
  uint32_t lsb = (x >> 16) & 1u;
  return (uint16_t)((x + 0x7fffu + lsb) >> 16);
}

#endif
