/* reduce_cuda.cuh's reduceCopy and avg division, compiled by nvcc for the
 * host and checked against reduce.c (gcoll_reduce_reference and
 * gcoll_avg_finish), bit for bit: every type and op, 1-4 sources, 1-2
 * destinations, sizes around the 16-byte pack and unroll boundaries,
 * sources and destinations at equal and at different offsets modulo 16
 * (vector path and scalar fallback), in place, and a block of several
 * "threads" simulated by calling the pass once per thread index. Bytes
 * around each destination must stay untouched.
 *
 * Inputs are random bit patterns, so 16-bit and wider floats include NaN,
 * infinities and subnormals. Only NaN payloads may differ from reduce.c
 * (see reduce_cuda.cuh), so two NaNs compare equal; every other value must
 * match exactly. This runs the real pack/unroll/tail code, but on the CPU:
 * it says nothing about GPU memory ordering or the device conversions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include <cmocka.h>
}

#include "kernels/reduce.h"
#include "kernels/reduce_cuda.cuh"

GCOLL_CUDA_FOR_EACH_TYPE(GCOLL_CUDA_DEFINE_REDUCE)

#define NOPS 4 /* sum prod max min; avg reduces as sum */
static const gcoll_cuda_reduce_fn table[gcollNumTypes][NOPS] = {
#define ROW(id, sfx, T)                                                           \
  {GCOLL_CUDA_REDUCE_NAME(sfx, sum), GCOLL_CUDA_REDUCE_NAME(sfx, prod),           \
   GCOLL_CUDA_REDUCE_NAME(sfx, max), GCOLL_CUDA_REDUCE_NAME(sfx, min)},
    GCOLL_CUDA_FOR_EACH_TYPE(ROW)
#undef ROW
};

static const size_t sizes[] = {0, 1, 7, 15, 16, 17, 1023, 4097};
static const int thread_counts[] = {1, 5, 128};
#define GUARD 64                 /* bytes checked on each side of a destination */
#define MAX_BYTES (4097 * 8 + 2 * GUARD + 64)

static size_t esize_of(int t) { return gcoll_dtype_size((gcollDataType_t)t); }

static int is_float_type(int t) {
  return t == gcollFloat16 || t == gcollFloat32 || t == gcollFloat64 || t == gcollBfloat16;
}

static int is_nan(int t, const unsigned char *p) {
  switch (t) {
    case gcollFloat16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    }
    case gcollBfloat16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    }
    case gcollFloat32: { float f; memcpy(&f, p, 4); return f != f; }
    case gcollFloat64: { double d; memcpy(&d, p, 8); return d != d; }
    default: return 0;
  }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static void fill_random(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)rnd();
}

/* Equal bit for bit, or both NaN; reports the first difference. */
static void expect_same(int t, int op, size_t n, const unsigned char *got,
                        const unsigned char *want, const char *what) {
  const size_t es = esize_of(t);
  for (size_t i = 0; i < n; i++) {
    const unsigned char *g = got + i * es, *w = want + i * es;
    if (memcmp(g, w, es) == 0) continue;
    if (is_float_type(t) && is_nan(t, g) && is_nan(t, w)) continue;
    fail_msg("%s: type %s op %s n %zu: element %zu differs", what,
             gcoll_dtype_name((gcollDataType_t)t), gcoll_redop_name((gcollRedOp_t)op), n, i);
  }
}

struct buffers {
  unsigned char *src[GCOLL_CUDA_MAX_SRCS];
  unsigned char *dst[2];
  unsigned char *want;
};

static unsigned char *alloc_aligned(void) {
  void *p = NULL;
  assert_int_equal(posix_memalign(&p, 64, MAX_BYTES), 0);
  return (unsigned char *)p;
}

/* Runs one case: nsrc sources at src_off elements, ndst destinations at
 * dst_off elements past GUARD, with nthreads simulated threads. */
static void run_case(struct buffers *b, int t, int op, size_t n, int nsrc, int ndst,
                     size_t src_off, size_t dst_off, int nthreads) {
  const size_t es = esize_of(t);
  const void *src[GCOLL_CUDA_MAX_SRCS];
  void *dst[2];
  for (int k = 0; k < nsrc; k++) {
    fill_random(b->src[k], MAX_BYTES);
    src[k] = b->src[k] + GUARD + src_off * es;
  }
  for (int k = 0; k < ndst; k++) {
    memset(b->dst[k], 0xa5, MAX_BYTES);
    dst[k] = b->dst[k] + GUARD + dst_off * es;
  }
  gcoll_reduce_reference(b->want, src, nsrc, n, (gcollDataType_t)t, (gcollRedOp_t)op);
  if (nsrc == 1 && n > 0) memcpy(b->want, src[0], n * es); /* reference needs n >= 1 ops */
  for (int tid = 0; tid < nthreads; tid++) table[t][op](tid, nthreads, dst, ndst, src, nsrc, n, NULL);
  for (int k = 0; k < ndst; k++) {
    expect_same(t, op, n, (const unsigned char *)dst[k], b->want, "reduceCopy");
    const unsigned char *lo = b->dst[k], *hi = (const unsigned char *)dst[k] + n * es;
    for (const unsigned char *q = lo; q < (const unsigned char *)dst[k]; q++)
      if (*q != 0xa5) fail_msg("byte before the destination written (n %zu)", n);
    for (size_t q = 0; q < GUARD; q++)
      if (hi[q] != 0xa5) fail_msg("byte after the destination written (n %zu)", n);
  }
}

static void test_reduce_copy_all(void **state) {
  (void)state;
  struct buffers b;
  for (int k = 0; k < GCOLL_CUDA_MAX_SRCS; k++) b.src[k] = alloc_aligned();
  for (int k = 0; k < 2; k++) b.dst[k] = alloc_aligned();
  b.want = alloc_aligned();
  for (int t = 0; t < gcollNumTypes; t++) {
    const size_t per_pack = GCOLL_CUDA_PACK / esize_of(t);
    /* (src, dst) offsets in elements: both aligned, both equally
     * misaligned (vector path after a head), and disagreeing (scalar). */
    const size_t offsets[][2] = {{0, 0}, {1, 1}, {per_pack - 1, per_pack - 1}, {0, 1},
                                 {1, 0}};
    const int noffsets = per_pack > 1 ? 5 : 1;
    for (int op = 0; op < NOPS; op++)
      for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
        for (int o = 0; o < noffsets; o++)
          for (int nsrc = 1; nsrc <= GCOLL_CUDA_MAX_SRCS; nsrc++) {
            const int nthreads = thread_counts[(si + (size_t)nsrc + (size_t)o) % 3];
            run_case(&b, t, op, sizes[si], nsrc, 1 + (nsrc + o) % 2, offsets[o][0],
                     offsets[o][1], nthreads);
          }
  }
  for (int k = 0; k < GCOLL_CUDA_MAX_SRCS; k++) free(b.src[k]);
  for (int k = 0; k < 2; k++) free(b.dst[k]);
  free(b.want);
}

/* dst == src[0] and dst == src[1]: the ring's in-place recvReduceCopy. */
static void test_reduce_copy_in_place(void **state) {
  (void)state;
  unsigned char *a = alloc_aligned(), *c = alloc_aligned(), *want = alloc_aligned();
  for (int t = 0; t < gcollNumTypes; t++)
    for (int op = 0; op < NOPS; op++)
      for (int which = 0; which < 2; which++) {
        const size_t n = 1023, es = esize_of(t);
        fill_random(a, MAX_BYTES);
        fill_random(c, MAX_BYTES);
        const void *in[2] = {a + es, c + es};
        gcoll_reduce_reference(want, in, 2, n, (gcollDataType_t)t, (gcollRedOp_t)op);
        void *dst[1] = {which == 0 ? a + es : c + es};
        for (int tid = 0; tid < 32; tid++) table[t][op](tid, 32, dst, 1, in, 2, n, NULL);
        expect_same(t, op, n, (const unsigned char *)dst[0], want, "in-place reduceCopy");
      }
  free(a);
  free(c);
  free(want);
}

/* Pre-mul-sum: sum's instantiations with a scalar scale src[0] as they
 * read it; the reference scales with reduce.c's gcoll_scale (separate
 * code) and sums with gcoll_reduce_reference. Random scalar bits: floats
 * include NaN and infinities, integers wrap. Other ops ignore the scalar. */
static void test_premul_sum(void **state) {
  (void)state;
  struct buffers b;
  for (int k = 0; k < GCOLL_CUDA_MAX_SRCS; k++) b.src[k] = alloc_aligned();
  for (int k = 0; k < 2; k++) b.dst[k] = alloc_aligned();
  b.want = alloc_aligned();
  unsigned char *scaled = alloc_aligned();
  for (int t = 0; t < gcollNumTypes; t++) {
    const size_t es = esize_of(t), per_pack = GCOLL_CUDA_PACK / es;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
      for (int nsrc = 1; nsrc <= GCOLL_CUDA_MAX_SRCS; nsrc++)
        for (int misalign = 0; misalign < 2; misalign++) {
          const size_t n = sizes[si], off = misalign ? (per_pack > 1 ? 1 : 0) : 0;
          uint64_t k = (uint64_t)rnd() << 32 | (uint64_t)rnd();
          if (es < 8) k &= (1ull << (8 * es)) - 1; /* the scalar in the type's bits */
          const void *src[GCOLL_CUDA_MAX_SRCS], *ref[GCOLL_CUDA_MAX_SRCS];
          for (int j = 0; j < nsrc; j++) {
            fill_random(b.src[j], MAX_BYTES);
            src[j] = ref[j] = b.src[j] + GUARD + off * es;
          }
          gcoll_scale(scaled, src[0], n, (gcollDataType_t)t, k);
          ref[0] = scaled;
          if (nsrc == 1) memcpy(b.want, scaled, n * es);
          else gcoll_reduce_reference(b.want, ref, nsrc, n, (gcollDataType_t)t, gcollSum);
          /* Out of place, and in place over src[0] (the ring's in-place
           * recvReduceCopy of a pre-mul-sum). */
          memset(b.dst[0], 0xa5, MAX_BYTES);
          void *dst[1] = {b.dst[0] + GUARD + (misalign ? 0 : off) * es};
          const int nthreads = thread_counts[(si + (size_t)nsrc) % 3];
          for (int tid = 0; tid < nthreads; tid++)
            table[t][gcollSum](tid, nthreads, dst, 1, src, nsrc, n, &k);
          expect_same(t, gcollSum, n, (const unsigned char *)dst[0], b.want, "pre-mul-sum");
          void *in_place[1] = {(void *)src[0]};
          for (int tid = 0; tid < 5; tid++)
            table[t][gcollSum](tid, 5, in_place, 1, src, nsrc, n, &k);
          expect_same(t, gcollSum, n, (const unsigned char *)src[0], b.want,
                      "in-place pre-mul-sum");
        }
    /* max ignores a scalar: the same as without one. */
    fill_random(b.src[0], MAX_BYTES);
    fill_random(b.src[1], MAX_BYTES);
    const void *in[2] = {b.src[0], b.src[1]};
    void *dst[1] = {b.dst[0]};
    uint64_t k = 3;
    gcoll_reduce_reference(b.want, in, 2, 1023, (gcollDataType_t)t, gcollMax);
    table[t][gcollMax](0, 1, dst, 1, in, 2, 1023, &k);
    expect_same(t, gcollMax, 1023, b.dst[0], b.want, "max with a scalar");
  }
  for (int k = 0; k < GCOLL_CUDA_MAX_SRCS; k++) free(b.src[k]);
  for (int k = 0; k < 2; k++) free(b.dst[k]);
  free(b.want);
  free(scaled);
}

static void test_avg_finish(void **state) {
  (void)state;
  unsigned char *got = alloc_aligned(), *want = alloc_aligned();
  for (int t = 0; t < gcollNumTypes; t++)
    for (int nranks = 1; nranks <= 8; nranks += 3)
      for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        /* One element in: aligned for the type, not to 16 bytes. */
        const size_t n = sizes[si], off = esize_of(t), end = off + n * esize_of(t);
        fill_random(got, MAX_BYTES);
        memcpy(want, got, MAX_BYTES);
        gcoll_avg_finish(want + off, n, (gcollDataType_t)t, nranks);
        for (int tid = 0; tid < 5; tid++) gcoll_cuda_avg_finish(tid, 5, got + off, n, t, nranks);
        expect_same(t, gcollAvg, n, got + off, want + off, "avg division");
        assert_memory_equal(got, want, off);                         /* nothing before */
        assert_memory_equal(got + end, want + end, MAX_BYTES - end); /* or after */
      }
  free(got);
  free(want);
}

/* The 16-bit conversions reduce_cuda.cuh uses (cuda_fp16/cuda_bf16) against
 * half.h on every bit pattern: widening exactly, narrowing the widened
 * value back, and narrowing 2 million random float bit patterns. */
static void test_16bit_conversions(void **state) {
  (void)state;
  for (uint32_t h = 0; h <= 0xffff; h++) {
    const float a = gcoll_cuda_half_to_float((uint16_t)h), b = gcoll_half_to_float((uint16_t)h);
    if (memcmp(&a, &b, 4) != 0 && !(a != a && b != b)) fail_msg("half %#x widens differently", h);
    const float c = gcoll_cuda_bf16_to_float((uint16_t)h), d = gcoll_bf16_to_float((uint16_t)h);
    if (memcmp(&c, &d, 4) != 0 && !(c != c && d != d)) fail_msg("bf16 %#x widens differently", h);
    if (gcoll_cuda_float_to_half(b) != gcoll_float_to_half(b))
      fail_msg("half %#x narrows differently", h);
    if (gcoll_cuda_float_to_bf16(d) != gcoll_float_to_bf16(d))
      fail_msg("bf16 %#x narrows differently", h);
  }
  for (int i = 0; i < 2000000; i++) {
    const uint32_t bits = (uint32_t)rnd();
    float f;
    memcpy(&f, &bits, 4);
    if (gcoll_cuda_float_to_half(f) != gcoll_float_to_half(f))
      fail_msg("float %#x narrows to half differently", bits);
    if (gcoll_cuda_float_to_bf16(f) != gcoll_float_to_bf16(f))
      fail_msg("float %#x narrows to bf16 differently", bits);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_copy_all),
      cmocka_unit_test(test_premul_sum),
      cmocka_unit_test(test_reduce_copy_in_place),
      cmocka_unit_test(test_avg_finish),
      cmocka_unit_test(test_16bit_conversions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
