/* Host reduction loops and the type/op name tables.
 *
 * Each (type, op) pair gets its own plain loop so that the compiler sees a
 * fixed element operation and can vectorise it; gcoll_reduce picks the loop
 * with one switch per call. The loops are restrict-free because in-place
 * calls (dst == a or dst == b) are the common case in ring kernels. */
#include "kernels/reduce.h"

#include <stdatomic.h>
#include <string.h>

/* Without restrict, GCC at -O2 (its "very cheap" vector cost model) will not
 * add the runtime alias check the loops need, so they would stay scalar.
 * ivdep states what the API contract guarantees: dst is a, b, or disjoint
 * from both, so element i is read before it is written and no iteration
 * depends on another. Clang adds the alias check itself (and its
 * assume_safety hint turns every loop it cannot vectorise into a warning). */
#if defined(__GNUC__) && !defined(__clang__)
#define GCOLL_NO_LOOP_CARRIED_DEPS _Pragma("GCC ivdep")
#else
#define GCOLL_NO_LOOP_CARRIED_DEPS
#endif

/* ---- Names ---------------------------------------------------------------- */

static const char *const dtype_names[gcollNumTypes] = {
    "int8", "uint8", "int32", "uint32", "int64",
    "uint64", "half", "float", "double", "bfloat16"};

static const size_t dtype_sizes[gcollNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

static const char *const redop_names[gcollNumOps] = {"sum", "prod", "max",
                                                     "min", "avg"};

/* Extra spellings nccl-tests and NCCL users type. */
static const struct {
  const char *name;
  gcollDataType_t type;
} dtype_aliases[] = {
    {"float16", gcollFloat16}, {"float32", gcollFloat32},
    {"float64", gcollFloat64}, {"bf16", gcollBfloat16},
    {"char", gcollChar},       {"int", gcollInt},
};

static int dtype_valid(gcollDataType_t t) {
  return (int)t >= 0 && (int)t < gcollNumTypes;
}

static int redop_valid(gcollRedOp_t op) {
  return (int)op >= 0 && (int)op < gcollNumOps;
}

size_t gcoll_dtype_size(gcollDataType_t t) {
  return dtype_valid(t) ? dtype_sizes[t] : 0;
}

const char *gcoll_dtype_name(gcollDataType_t t) {
  return dtype_valid(t) ? dtype_names[t] : NULL;
}

const char *gcoll_redop_name(gcollRedOp_t op) {
  return redop_valid(op) ? redop_names[op] : NULL;
}

int gcoll_dtype_from_name(const char *s) {
  if (s == NULL)
    return -1;
  for (int t = 0; t < gcollNumTypes; t++)
    if (strcmp(s, dtype_names[t]) == 0)
      return t;
  for (size_t i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++)
    if (strcmp(s, dtype_aliases[i].name) == 0)
      return (int)dtype_aliases[i].type;
  return -1;
}

int gcoll_redop_from_name(const char *s) {
  if (s == NULL)
    return -1;
  for (int op = 0; op < gcollNumOps; op++)
    if (strcmp(s, redop_names[op]) == 0)
      return op;
  return -1;
}

/* ---- Element-wise loops ---------------------------------------------------- */

/* The main loop covers a whole number of GCOLL_VEC_BYTES blocks, so the
 * compiler knows its trip count is a multiple of every vector width up to
 * AVX-512 and can vectorise it with no scalar epilogue: GCC's -O2 cost
 * model ("very cheap") vectorises nothing that would need one. The tail
 * loop takes the last partial block. */
#define GCOLL_VEC_BYTES 64

/* Each loop is compiled once per instruction set (reduce.h: the ISA), the
 * wider ones with a target attribute, so one build runs the baseline
 * x86-64 code anywhere and AVX-512 where the CPU has it. */
#define ISA_ATTR_baseline
#if GCOLL_REDUCE_X86_ISAS
#define ISA_ATTR_avx2 __attribute__((target("avx2")))
#define ISA_ATTR_avx512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#endif

#define DEFINE_BINARY_LOOP(op, sfx, T, isa)                                  \
  ISA_ATTR_##isa static void loop_##op##_##sfx##_##isa(                      \
      void *dst, const void *a, const void *b, size_t count) {               \
    T *d = dst;                                                              \
    const T *x = a, *y = b;                                                  \
    const size_t block = GCOLL_VEC_BYTES / sizeof(T);                        \
    const size_t bulk = count / block * block;                               \
    size_t i;                                                                \
    GCOLL_NO_LOOP_CARRIED_DEPS                                               \
    for (i = 0; i < bulk; i++)                                               \
      d[i] = gcoll_elt_##op##_##sfx(x[i], y[i]);                             \
    for (; i < count; i++)                                                   \
      d[i] = gcoll_elt_##op##_##sfx(x[i], y[i]);                             \
  }

/* The loops of one ISA, and its row of the dispatch table: indexed by
 * type, then by op (sum, prod, max, min: gcollRedOp_t's order; avg
 * reduces as sum). */
#define DEFINE_ISA_LOOPS(sfx, T, isa)                                        \
  DEFINE_BINARY_LOOP(sum, sfx, T, isa)                                       \
  DEFINE_BINARY_LOOP(prod, sfx, T, isa)                                      \
  DEFINE_BINARY_LOOP(max, sfx, T, isa)                                       \
  DEFINE_BINARY_LOOP(min, sfx, T, isa)
#define ISA_ROW(id, sfx, isa)                                                \
  [id] = {loop_sum_##sfx##_##isa, loop_prod_##sfx##_##isa,                   \
          loop_max_##sfx##_##isa, loop_min_##sfx##_##isa},

#define DEFINE_LOOPS_BASELINE(id, sfx, T) DEFINE_ISA_LOOPS(sfx, T, baseline)
#define ROW_BASELINE(id, sfx, T) ISA_ROW(id, sfx, baseline)
GCOLL_FOR_EACH_TYPE(DEFINE_LOOPS_BASELINE)
#if GCOLL_REDUCE_X86_ISAS
#define DEFINE_LOOPS_AVX2(id, sfx, T) DEFINE_ISA_LOOPS(sfx, T, avx2)
#define DEFINE_LOOPS_AVX512(id, sfx, T) DEFINE_ISA_LOOPS(sfx, T, avx512)
#define ROW_AVX2(id, sfx, T) ISA_ROW(id, sfx, avx2)
#define ROW_AVX512(id, sfx, T) ISA_ROW(id, sfx, avx512)
GCOLL_FOR_EACH_TYPE(DEFINE_LOOPS_AVX2)
GCOLL_FOR_EACH_TYPE(DEFINE_LOOPS_AVX512)
#endif

typedef void (*binary_loop)(void *dst, const void *a, const void *b, size_t count);
static const binary_loop binary_loops[GCOLL_REDUCE_NUM_ISAS][gcollNumTypes][gcollAvg] = {
    [GCOLL_REDUCE_BASELINE] = {GCOLL_FOR_EACH_TYPE(ROW_BASELINE)},
#if GCOLL_REDUCE_X86_ISAS
    [GCOLL_REDUCE_AVX2] = {GCOLL_FOR_EACH_TYPE(ROW_AVX2)},
    [GCOLL_REDUCE_AVX512] = {GCOLL_FOR_EACH_TYPE(ROW_AVX512)},
#endif
};

static const char *const isa_names[GCOLL_REDUCE_NUM_ISAS] = {"baseline", "avx2", "avx512"};

static int cpu_best_isa(void) {
#if GCOLL_REDUCE_X86_ISAS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return GCOLL_REDUCE_AVX512;
  if (__builtin_cpu_supports("avx2")) return GCOLL_REDUCE_AVX2;
#endif
  return GCOLL_REDUCE_BASELINE;
}

/* -1 until the first call looks at the CPU; any thread may do that, and
 * all of them find the same. */
static _Atomic int g_isa = -1;

int gcoll_reduce_best_isa(void) {
  static _Atomic int best = -1;
  int b = atomic_load_explicit(&best, memory_order_relaxed);
  if (b < 0) {
    b = cpu_best_isa();
    atomic_store_explicit(&best, b, memory_order_relaxed);
  }
  return b;
}

int gcoll_reduce_isa(void) {
  int isa = atomic_load_explicit(&g_isa, memory_order_relaxed);
  if (isa < 0) {
    isa = gcoll_reduce_best_isa();
    atomic_store_explicit(&g_isa, isa, memory_order_relaxed);
  }
  return isa;
}

int gcoll_reduce_set_isa(int isa) {
  int best = gcoll_reduce_best_isa();
  if (isa < 0 || isa > best) isa = best;
  atomic_store_explicit(&g_isa, isa, memory_order_relaxed);
  return isa;
}

const char *gcoll_reduce_isa_name(int isa) {
  return isa >= 0 && isa < GCOLL_REDUCE_NUM_ISAS ? isa_names[isa] : NULL;
}

int gcoll_reduce_isa_from_name(const char *s) {
  for (int i = 0; s != NULL && i < GCOLL_REDUCE_NUM_ISAS; i++)
    if (strcmp(s, isa_names[i]) == 0) return i;
  return -1;
}

void gcoll_reduce(void *dst, const void *a, const void *b, size_t count,
                  gcollDataType_t t, gcollRedOp_t op) {
  if (count == 0 || !dtype_valid(t) || !redop_valid(op))
    return;
  const int isa = count * dtype_sizes[t] >= GCOLL_REDUCE_WIDE_BYTES ? gcoll_reduce_isa()
                                                                     : GCOLL_REDUCE_BASELINE;
  binary_loops[isa][t][op == gcollAvg ? gcollSum : op](dst, a, b, count);
}

/* ---- avg ------------------------------------------------------------------
 * Integers divide in int or in their own type, whichever is wider, so n is
 * never truncated to 8 bits. */
#define DEFINE_DIV_LOOP(sfx, T, D)                                           \
  static void avg_##sfx(void *buf, size_t count, int n) {                    \
    T *d = buf;                                                              \
    const D div = (D)n;                                                      \
    const size_t block = GCOLL_VEC_BYTES / sizeof(T);                        \
    const size_t bulk = count / block * block;                               \
    size_t i;                                                                \
    for (i = 0; i < bulk; i++)                                               \
      d[i] = (T)(d[i] / div);                                                \
    for (; i < count; i++)                                                   \
      d[i] = (T)(d[i] / div);                                                \
  }

DEFINE_DIV_LOOP(i8, int8_t, int)
DEFINE_DIV_LOOP(u8, uint8_t, int)
DEFINE_DIV_LOOP(i32, int32_t, int32_t)
DEFINE_DIV_LOOP(u32, uint32_t, uint32_t)
DEFINE_DIV_LOOP(i64, int64_t, int64_t)
DEFINE_DIV_LOOP(u64, uint64_t, uint64_t)
DEFINE_DIV_LOOP(f32, float, float)
DEFINE_DIV_LOOP(f64, double, double)

#define DEFINE_DIV_LOOP_16BIT(sfx, to_float, from_float)                     \
  static void avg_##sfx(void *buf, size_t count, int n) {                    \
    uint16_t *d = buf;                                                       \
    const float div = (float)n;                                              \
    const size_t block = GCOLL_VEC_BYTES / sizeof(uint16_t);                 \
    const size_t bulk = count / block * block;                               \
    size_t i;                                                                \
    for (i = 0; i < bulk; i++)                                               \
      d[i] = from_float(to_float(d[i]) / div);                               \
    for (; i < count; i++)                                                   \
      d[i] = from_float(to_float(d[i]) / div);                               \
  }

DEFINE_DIV_LOOP_16BIT(f16, gcoll_half_to_float, gcoll_float_to_half)
DEFINE_DIV_LOOP_16BIT(bf16, gcoll_bf16_to_float, gcoll_float_to_bf16)

/* Pre-mul-sum scaling (reduce.h). The integer product goes through the
 * unsigned type (`0u +` widens the 8-bit ones past int), as gcoll's prod. */
#define DEFINE_SCALE_INT(sfx, T, U)                                          \
  static void scale_##sfx(void *dst, const void *src, size_t count,          \
                          uint64_t k) {                                      \
    const T *s = src;                                                        \
    T *d = dst;                                                              \
    const U kk = (U)k;                                                       \
    for (size_t i = 0; i < count; i++)                                       \
      d[i] = (T)(U)((0u + (U)s[i]) * kk);                                    \
  }

DEFINE_SCALE_INT(i8, int8_t, uint8_t)
DEFINE_SCALE_INT(u8, uint8_t, uint8_t)
DEFINE_SCALE_INT(i32, int32_t, uint32_t)
DEFINE_SCALE_INT(u32, uint32_t, uint32_t)
DEFINE_SCALE_INT(i64, int64_t, uint64_t)
DEFINE_SCALE_INT(u64, uint64_t, uint64_t)

static void scale_f32(void *dst, const void *src, size_t count, uint64_t k) {
  const float *s = src;
  float *d = dst, kk;
  uint32_t bits = (uint32_t)k;
  memcpy(&kk, &bits, sizeof(kk));
  for (size_t i = 0; i < count; i++) d[i] = s[i] * kk;
}

static void scale_f64(void *dst, const void *src, size_t count, uint64_t k) {
  const double *s = src;
  double *d = dst, kk;
  memcpy(&kk, &k, sizeof(kk));
  for (size_t i = 0; i < count; i++) d[i] = s[i] * kk;
}

#define DEFINE_SCALE_16BIT(sfx, to_float, from_float)                        \
  static void scale_##sfx(void *dst, const void *src, size_t count,          \
                          uint64_t k) {                                      \
    const uint16_t *s = src;                                                 \
    uint16_t *d = dst;                                                       \
    const float kk = to_float((uint16_t)k);                                  \
    for (size_t i = 0; i < count; i++)                                       \
      d[i] = from_float(to_float(s[i]) * kk);                                \
  }

DEFINE_SCALE_16BIT(f16, gcoll_half_to_float, gcoll_float_to_half)
DEFINE_SCALE_16BIT(bf16, gcoll_bf16_to_float, gcoll_float_to_bf16)

#define DISPATCH_SCALE(id, sfx, T)                                           \
  case id:                                                                   \
    scale_##sfx(dst, src, count, k);                                         \
    return;

void gcoll_scale(void *dst, const void *src, size_t count, gcollDataType_t t, uint64_t k) {
  if (count == 0)
    return;
  switch (t) {
    GCOLL_FOR_EACH_TYPE(DISPATCH_SCALE)
  default:
    return;
  }
}

#define DISPATCH_AVG(id, sfx, T)                                             \
  case id:                                                                   \
    avg_##sfx(buf, count, n);                                                \
    return;

void gcoll_avg_finish(void *buf, size_t count, gcollDataType_t t, int n) {
  if (count == 0 || n < 1)
    return;
  switch (t) {
    GCOLL_FOR_EACH_TYPE(DISPATCH_AVG)
  default:
    return;
  }
}

/* ---- Serial reference ------------------------------------------------------
 * Deliberately the naive shape: one element at a time, folding over the ranks
 * with a per-element op switch, so it shares only the element functions (the
 * definition of the semantics) with the loops it is used to check. */
#define DEFINE_REFERENCE(id, sfx, T)                                         \
  static T ref_combine_##sfx(T acc, T v, gcollRedOp_t op) {                  \
    switch (op) {                                                            \
    case gcollProd:                                                          \
      return gcoll_elt_prod_##sfx(acc, v);                                   \
    case gcollMax:                                                           \
      return gcoll_elt_max_##sfx(acc, v);                                    \
    case gcollMin:                                                           \
      return gcoll_elt_min_##sfx(acc, v);                                    \
    default:                                                                 \
      return gcoll_elt_sum_##sfx(acc, v);                                    \
    }                                                                        \
  }                                                                          \
  static void ref_##sfx(void *out, const void *const *in, int n,             \
                        size_t count, gcollRedOp_t op) {                     \
    T *o = out;                                                              \
    for (size_t i = 0; i < count; i++) {                                     \
      T acc = ((const T *)in[0])[i];                                         \
      for (int r = 1; r < n; r++)                                            \
        acc = ref_combine_##sfx(acc, ((const T *)in[r])[i], op);             \
      o[i] = acc;                                                            \
    }                                                                        \
  }

GCOLL_FOR_EACH_TYPE(DEFINE_REFERENCE)

#define DISPATCH_REFERENCE(id, sfx, T)                                       \
  case id:                                                                   \
    ref_##sfx(out, in, n, count, op);                                        \
    break;

void gcoll_reduce_reference(void *out, const void *const *in, int n,
                            size_t count, gcollDataType_t t, gcollRedOp_t op) {
  if (n < 1 || count == 0 || !redop_valid(op))
    return;
  switch (t) {
    GCOLL_FOR_EACH_TYPE(DISPATCH_REFERENCE)
  default:
    return;
  }
  if (op == gcollAvg)
    gcoll_avg_finish(out, count, t, n);
}
