/* reduceCopy for the CUDA executor: dst[k][i] = src[0][i] OP ... OP src[n-1][i].
 *
 * One cooperative pass of a thread block: thread `tid` of `nthreads` takes
 * every nthreads-th 16-byte pack, so a warp's loads coalesce. Everything is
 * __host__ __device__ and takes (tid, nthreads) as arguments instead of
 * reading threadIdx, so the host unit test runs the very same vector and
 * tail logic, simulating a block by calling it once per tid.
 *
 * Semantics are reduce.h's, element for element: integers and float/double
 * use the gcoll_elt_* functions themselves; half and bfloat16 are widened to
 * float, combined once and rounded once to nearest-even (cuda_fp16/cuda_bf16
 * conversions; both round to nearest even like half.h, so every non-NaN
 * result is bit-identical to gcoll_reduce). A NaN result is a quiet NaN
 * built by half.h's rule from whatever NaN float arithmetic produced; GPU
 * float arithmetic returns the canonical NaN where x86 keeps the input's
 * payload, so NaN payloads are the one thing that may differ from the host.
 *
 * Layout: when dst and every src have the same address modulo 16, a scalar
 * head reaches the 16-byte boundary, GCOLL_CUDA_UNROLL packs per thread per
 * round are loaded (all sources first, so the loads are in flight together)
 * and combined, and a scalar tail finishes. Pointers that disagree modulo 16
 * take the scalar loop for the whole range (correct, slower; the executor's
 * buffers and FIFO slots are 16-byte aligned in the common case).
 *
 * Aliasing: any dst may equal any src (in place); other overlap is not
 * allowed. Each element is read and written by one thread only, so in-place
 * calls are safe without barriers.
 */
#ifndef GCOLL_KERNELS_REDUCE_CUDA_CUH
#define GCOLL_KERNELS_REDUCE_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "kernels/reduce.h"

#define GCOLL_CUDA_MAX_SRCS 4   /* src + GCOLL_PRIMS_MAX_PEERS receive peers */
#define GCOLL_CUDA_MAX_DSTS 4   /* dst + GCOLL_PRIMS_MAX_PEERS send slots */
#define GCOLL_CUDA_UNROLL 4
#define GCOLL_CUDA_PACK 16

/* Loop hints for the device compiler only (the host compiler warns about
 * pragmas it does not know). */
#if defined(__CUDA_ARCH__)
#define GCOLL_CUDA_PRAGMA(x) _Pragma(#x)
#else
#define GCOLL_CUDA_PRAGMA(x)
#endif

/* ---- 16-bit float conversions -------------------------------------------- */

GCOLL_HD static inline float gcoll_cuda_half_to_float(uint16_t h) {
  __half_raw raw;
  raw.x = h;
  return __half2float(__half(raw));
}

/* NaN: half.h's rule (quiet, sign and top payload bits kept), spelled out
 * rather than calling gcoll_float_to_half, whose full integer rounding path
 * would be inlined into every lane of every unrolled pack. */
GCOLL_HD static inline uint16_t gcoll_cuda_float_to_half(float f) {
  __half_raw raw = __float2half_rn(f);
  if (f != f) {
    uint32_t x = gcoll_float_bits(f);
    raw.x = (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x1ffu));
  }
  return raw.x;
}

GCOLL_HD static inline float gcoll_cuda_bf16_to_float(uint16_t h) {
  __nv_bfloat16_raw raw;
  raw.x = h;
  return __bfloat162float(__nv_bfloat16(raw));
}

GCOLL_HD static inline uint16_t gcoll_cuda_float_to_bf16(float f) {
  __nv_bfloat16_raw raw = __float2bfloat16_rn(f);
  if (f != f) raw.x = (uint16_t)((gcoll_float_bits(f) >> 16) | 0x0040u);
  return raw.x;
}

/* ---- element operations as functors -------------------------------------
 * OP is gcollSum/Prod/Max/Min (avg is handled as sum by the caller). */

template <typename T, int OP> struct gcoll_cuda_elt;

/* scale(x, k): a pre-mul-sum's x * k, where k is the scalar in the type's
 * own bits (reduce.h's gcoll_scale, element for element): integers wrap
 * (the product of the unsigned bits), floats round once. */
#define GCOLL_CUDA_ELT(T, sfx, SCALE)                                           \
  template <int OP> struct gcoll_cuda_elt_##sfx {                               \
    GCOLL_HD static inline T apply(T a, T b) {                                  \
      return OP == gcollProd ? gcoll_elt_prod_##sfx(a, b)                       \
           : OP == gcollMax  ? gcoll_elt_max_##sfx(a, b)                        \
           : OP == gcollMin  ? gcoll_elt_min_##sfx(a, b)                        \
                             : gcoll_elt_sum_##sfx(a, b);                       \
    }                                                                           \
    GCOLL_HD static inline T scale(T x, uint64_t k) { SCALE; }                  \
  };
#define GCOLL_CUDA_SCALE_INT(T, U) return (T)(U)((U)x * (U)k)
GCOLL_CUDA_ELT(int8_t, i8, GCOLL_CUDA_SCALE_INT(int8_t, uint8_t))
GCOLL_CUDA_ELT(uint8_t, u8, GCOLL_CUDA_SCALE_INT(uint8_t, uint8_t))
GCOLL_CUDA_ELT(int32_t, i32, GCOLL_CUDA_SCALE_INT(int32_t, uint32_t))
GCOLL_CUDA_ELT(uint32_t, u32, GCOLL_CUDA_SCALE_INT(uint32_t, uint32_t))
GCOLL_CUDA_ELT(int64_t, i64, GCOLL_CUDA_SCALE_INT(int64_t, uint64_t))
GCOLL_CUDA_ELT(uint64_t, u64, GCOLL_CUDA_SCALE_INT(uint64_t, uint64_t))
GCOLL_CUDA_ELT(float, f32, float f; uint32_t b = (uint32_t)k; memcpy(&f, &b, 4); return x * f)
GCOLL_CUDA_ELT(double, f64, double d; memcpy(&d, &k, 8); return x * d)
#undef GCOLL_CUDA_SCALE_INT
#undef GCOLL_CUDA_ELT

template <int OP> GCOLL_HD static inline float gcoll_cuda_f32_op(float a, float b) {
  return gcoll_cuda_elt_f32<OP>::apply(a, b);
}

/* 16-bit floats travel as their bit patterns (uint16_t), like reduce.c. */
template <int OP> struct gcoll_cuda_elt_f16 {
  GCOLL_HD static inline uint16_t apply(uint16_t a, uint16_t b) {
    return gcoll_cuda_float_to_half(
        gcoll_cuda_f32_op<OP>(gcoll_cuda_half_to_float(a), gcoll_cuda_half_to_float(b)));
  }
  GCOLL_HD static inline uint16_t scale(uint16_t x, uint64_t k) {
    return gcoll_cuda_float_to_half(gcoll_cuda_half_to_float(x) *
                                    gcoll_cuda_half_to_float((uint16_t)k));
  }
};
template <int OP> struct gcoll_cuda_elt_bf16 {
  GCOLL_HD static inline uint16_t apply(uint16_t a, uint16_t b) {
    return gcoll_cuda_float_to_bf16(
        gcoll_cuda_f32_op<OP>(gcoll_cuda_bf16_to_float(a), gcoll_cuda_bf16_to_float(b)));
  }
  GCOLL_HD static inline uint16_t scale(uint16_t x, uint64_t k) {
    return gcoll_cuda_float_to_bf16(gcoll_cuda_bf16_to_float(x) *
                                    gcoll_cuda_bf16_to_float((uint16_t)k));
  }
};

/* ---- the pass ------------------------------------------------------------ */

union gcoll_cuda_pack {
  uint4 v;
  unsigned char bytes[GCOLL_CUDA_PACK];
};

template <typename T, typename E>
GCOLL_HD static inline void gcoll_cuda_pack_op(union gcoll_cuda_pack *acc,
                                               const union gcoll_cuda_pack *in) {
  const int per = GCOLL_CUDA_PACK / (int)sizeof(T);
  T a[GCOLL_CUDA_PACK / sizeof(T)], b[GCOLL_CUDA_PACK / sizeof(T)];
  memcpy(a, acc->bytes, GCOLL_CUDA_PACK);
  memcpy(b, in->bytes, GCOLL_CUDA_PACK);
GCOLL_CUDA_PRAGMA(unroll)
  for (int e = 0; e < per; e++) a[e] = E::apply(a[e], b[e]);
  memcpy(acc->bytes, a, GCOLL_CUDA_PACK);
}

template <typename T, typename E>
GCOLL_HD static inline void gcoll_cuda_pack_scale(union gcoll_cuda_pack *acc, uint64_t k) {
  const int per = GCOLL_CUDA_PACK / (int)sizeof(T);
  T a[GCOLL_CUDA_PACK / sizeof(T)];
  memcpy(a, acc->bytes, GCOLL_CUDA_PACK);
GCOLL_CUDA_PRAGMA(unroll)
  for (int e = 0; e < per; e++) a[e] = E::scale(a[e], k);
  memcpy(acc->bytes, a, GCOLL_CUDA_PACK);
}

/* PRE: src[0] (the caller's input) is scaled by k as it is read, which is
 * how a pre-mul-sum reaches every algorithm without a scaled copy. */
template <typename T, typename E, bool PRE>
GCOLL_HD static inline void gcoll_cuda_scalar_range(int tid, int nthreads, T *const *dst,
                                                    int ndst, const T *const *src, int nsrc,
                                                    size_t lo, size_t hi, uint64_t k) {
  /* Head and tail are under one pack per thread: not worth unrolled code. */
GCOLL_CUDA_PRAGMA(unroll 1)
  for (size_t i = lo + (size_t)tid; i < hi; i += (size_t)nthreads) {
    T acc = PRE ? E::scale(src[0][i], k) : src[0][i];
GCOLL_CUDA_PRAGMA(unroll 1)
    for (int k = 1; k < nsrc; k++) acc = E::apply(acc, src[k][i]);
GCOLL_CUDA_PRAGMA(unroll 1)
    for (int k = 0; k < ndst; k++) dst[k][i] = acc;
  }
}

/* True when every pointer has the same address modulo 16; *head gets the
 * element count up to the first 16-byte boundary. */
template <typename T>
GCOLL_HD static inline int gcoll_cuda_common_alignment(T *const *dst, int ndst,
                                                       const T *const *src, int nsrc,
                                                       size_t *head) {
  const uintptr_t mis = (uintptr_t)src[0] % GCOLL_CUDA_PACK;
  for (int k = 1; k < nsrc; k++)
    if ((uintptr_t)src[k] % GCOLL_CUDA_PACK != mis) return 0;
  for (int k = 0; k < ndst; k++)
    if ((uintptr_t)dst[k] % GCOLL_CUDA_PACK != mis) return 0;
  if (mis % sizeof(T) != 0) return 0; /* not aligned for T: scalar only */
  *head = ((GCOLL_CUDA_PACK - mis) % GCOLL_CUDA_PACK) / sizeof(T);
  return 1;
}

template <typename T, typename E, bool PRE>
GCOLL_HD static inline void gcoll_cuda_reduce_copy_t(int tid, int nthreads, void *const *dstv,
                                                     int ndst, const void *const *srcv,
                                                     int nsrc, size_t n, uint64_t k) {
  T *dst[GCOLL_CUDA_MAX_DSTS];
  const T *src[GCOLL_CUDA_MAX_SRCS];
  if (n == 0 || nsrc < 1 || nsrc > GCOLL_CUDA_MAX_SRCS || ndst < 0 ||
      ndst > GCOLL_CUDA_MAX_DSTS)
    return;
  for (int k = 0; k < ndst; k++) dst[k] = (T *)dstv[k];
  for (int k = 0; k < nsrc; k++) src[k] = (const T *)srcv[k];
  size_t head = 0;
  if (!gcoll_cuda_common_alignment<T>(dst, ndst, src, nsrc, &head)) {
    gcoll_cuda_scalar_range<T, E, PRE>(tid, nthreads, dst, ndst, src, nsrc, 0, n, k);
    return;
  }
  if (head > n) head = n;
  gcoll_cuda_scalar_range<T, E, PRE>(tid, nthreads, dst, ndst, src, nsrc, 0, head, k);
  const size_t per_pack = GCOLL_CUDA_PACK / sizeof(T);
  const size_t npacks = (n - head) / per_pack;
  /* Packs in rounds of nthreads * UNROLL: thread tid takes packs
   * round + tid + u * nthreads, so each unrolled load is a coalesced warp
   * access. The last partial round checks bounds per pack. */
  const size_t round_packs = (size_t)nthreads * GCOLL_CUDA_UNROLL;
GCOLL_CUDA_PRAGMA(unroll 1)
  for (size_t base = 0; base < npacks; base += round_packs) {
    union gcoll_cuda_pack acc[GCOLL_CUDA_UNROLL], in[GCOLL_CUDA_UNROLL];
    size_t idx[GCOLL_CUDA_UNROLL];
    int valid[GCOLL_CUDA_UNROLL];
GCOLL_CUDA_PRAGMA(unroll)
    for (int u = 0; u < GCOLL_CUDA_UNROLL; u++) {
      idx[u] = base + (size_t)tid + (size_t)u * (size_t)nthreads;
      valid[u] = idx[u] < npacks;
      if (valid[u]) acc[u].v = ((const uint4 *)(src[0] + head))[idx[u]];
      if (PRE && valid[u]) gcoll_cuda_pack_scale<T, E>(&acc[u], k);
    }
GCOLL_CUDA_PRAGMA(unroll 1)
    for (int k = 1; k < nsrc; k++) {
GCOLL_CUDA_PRAGMA(unroll)
      for (int u = 0; u < GCOLL_CUDA_UNROLL; u++)
        if (valid[u]) in[u].v = ((const uint4 *)(src[k] + head))[idx[u]];
GCOLL_CUDA_PRAGMA(unroll)
      for (int u = 0; u < GCOLL_CUDA_UNROLL; u++)
        if (valid[u]) gcoll_cuda_pack_op<T, E>(&acc[u], &in[u]);
    }
GCOLL_CUDA_PRAGMA(unroll 1)
    for (int k = 0; k < ndst; k++) {
GCOLL_CUDA_PRAGMA(unroll)
      for (int u = 0; u < GCOLL_CUDA_UNROLL; u++)
        if (valid[u]) ((uint4 *)(dst[k] + head))[idx[u]] = acc[u].v;
    }
  }
  gcoll_cuda_scalar_range<T, E, PRE>(tid, nthreads, dst, ndst, src, nsrc,
                                     head + npacks * per_pack, n, k);
}

/* ---- avg's division, reduce.c's gcoll_avg_finish per thread -------------- */

template <typename T, typename D>
GCOLL_HD static inline void gcoll_cuda_div_range(int tid, int nthreads, T *buf, size_t count,
                                                 int n) {
  const D div = (D)n;
  for (size_t i = (size_t)tid; i < count; i += (size_t)nthreads) buf[i] = (T)(buf[i] / div);
}

GCOLL_HD static inline void gcoll_cuda_avg_finish(int tid, int nthreads, void *buf,
                                                  size_t count, int dtype, int n) {
  if (count == 0 || n < 1) return;
  switch (dtype) {
#define GCOLL_CUDA_AVG_CASE(id, T, D)                                                 \
  case id:                                                                            \
    gcoll_cuda_div_range<T, D>(tid, nthreads, (T *)buf, count, n);                    \
    return;
    GCOLL_CUDA_AVG_CASE(gcollInt8, int8_t, int)
    GCOLL_CUDA_AVG_CASE(gcollUint8, uint8_t, int)
    GCOLL_CUDA_AVG_CASE(gcollInt32, int32_t, int32_t)
    GCOLL_CUDA_AVG_CASE(gcollUint32, uint32_t, uint32_t)
    GCOLL_CUDA_AVG_CASE(gcollInt64, int64_t, int64_t)
    GCOLL_CUDA_AVG_CASE(gcollUint64, uint64_t, uint64_t)
    GCOLL_CUDA_AVG_CASE(gcollFloat32, float, float)
    GCOLL_CUDA_AVG_CASE(gcollFloat64, double, double)
#undef GCOLL_CUDA_AVG_CASE
    case gcollFloat16: {
      uint16_t *h = (uint16_t *)buf;
      for (size_t i = (size_t)tid; i < count; i += (size_t)nthreads)
        h[i] = gcoll_cuda_float_to_half(gcoll_cuda_half_to_float(h[i]) / (float)n);
      return;
    }
    case gcollBfloat16: {
      uint16_t *h = (uint16_t *)buf;
      for (size_t i = (size_t)tid; i < count; i += (size_t)nthreads)
        h[i] = gcoll_cuda_float_to_bf16(gcoll_cuda_bf16_to_float(h[i]) / (float)n);
      return;
    }
    default: return;
  }
}

/* ---- the (type, op) list ----------------------------------------------------
 * reduce.h's type list; gen_kernels.sh emits the device function table from
 * the same suffixes, and the host test walks it to reach every
 * instantiation. */
#define GCOLL_CUDA_FOR_EACH_TYPE(X) GCOLL_FOR_EACH_TYPE(X)

/* One (type, op) instantiation behind a plain signature, for tables. pre:
 * NULL, or (sum only: a pre-mul-sum) the scalar src[0] is multiplied by as
 * it is read, in the type's own bits; the other ops ignore it. */
typedef void (*gcoll_cuda_reduce_fn)(int tid, int nthreads, void *const *dst, int ndst,
                                     const void *const *src, int nsrc, size_t n,
                                     const uint64_t *pre);

#define GCOLL_CUDA_REDUCE_NAME(sfx, opname) gcoll_cuda_reduce_copy_##sfx##_##opname

/* Defines the four functions of one type (sum, prod, max, min), noinline so
 * each is compiled once however many callers reach it through a table. */
#if defined(__CUDACC__)
#define GCOLL_CUDA_NOINLINE __noinline__
#else
#define GCOLL_CUDA_NOINLINE __attribute__((noinline))
#endif
#define GCOLL_CUDA_DEFINE_REDUCE_OP(sfx, T, opname, OP)                                  \
  GCOLL_HD GCOLL_CUDA_NOINLINE static void GCOLL_CUDA_REDUCE_NAME(sfx, opname)(          \
      int tid, int nthreads, void *const *dst, int ndst, const void *const *src,         \
      int nsrc, size_t n, const uint64_t *pre) {                                         \
    (void)pre;                                                                           \
    gcoll_cuda_reduce_copy_t<T, gcoll_cuda_elt_##sfx<OP>, false>(tid, nthreads, dst,     \
                                                                 ndst, src, nsrc, n, 0); \
  }
/* Sum also serves pre-mul-sum: the scaling loop exists in these ten only. */
#define GCOLL_CUDA_DEFINE_REDUCE_SUM(sfx, T)                                             \
  GCOLL_HD GCOLL_CUDA_NOINLINE static void GCOLL_CUDA_REDUCE_NAME(sfx, sum)(             \
      int tid, int nthreads, void *const *dst, int ndst, const void *const *src,         \
      int nsrc, size_t n, const uint64_t *pre) {                                         \
    if (pre != NULL)                                                                     \
      gcoll_cuda_reduce_copy_t<T, gcoll_cuda_elt_##sfx<gcollSum>, true>(                 \
          tid, nthreads, dst, ndst, src, nsrc, n, *pre);                                 \
    else                                                                                 \
      gcoll_cuda_reduce_copy_t<T, gcoll_cuda_elt_##sfx<gcollSum>, false>(                \
          tid, nthreads, dst, ndst, src, nsrc, n, 0);                                    \
  }
#define GCOLL_CUDA_DEFINE_REDUCE(id, sfx, T)                  \
  GCOLL_CUDA_DEFINE_REDUCE_SUM(sfx, T)                        \
  GCOLL_CUDA_DEFINE_REDUCE_OP(sfx, T, prod, gcollProd)        \
  GCOLL_CUDA_DEFINE_REDUCE_OP(sfx, T, max, gcollMax)          \
  GCOLL_CUDA_DEFINE_REDUCE_OP(sfx, T, min, gcollMin)

#endif
