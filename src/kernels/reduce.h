/* Element-wise reductions for the collective kernels.
 *
 * Semantics, shared by every executor (host loops here, CUDA later):
 *
 *  - Integers wrap modulo 2^bits for sum and prod, signed types included:
 *    the arithmetic is done in the unsigned type of the same width, so there
 *    is no signed-overflow UB and the result is the two's complement bit
 *    pattern every GPU produces.
 *  - float and double use their own IEEE arithmetic, one rounding per op.
 *  - half and bfloat16 are converted to float, combined, and rounded back once
 *    per element (round to nearest even, see half.h). Float carries enough
 *    precision for one op on two 16-bit values that this equals the correctly
 *    rounded 16-bit result.
 *  - max/min on floating types ignore NaN like C's fmax/fmin (IEEE 754-2019
 *    maximumNumber/minimumNumber): NaN op x = x, and the result is NaN only
 *    when both inputs are. This is what NCCL does on GPUs (fmaxf/fminf,
 *    __hmax/__hmin), so NCCL programs see the same results, and it is
 *    independent of the order in which ranks are combined. Which of two
 *    zeros (+0/-0) max/min return is unspecified.
 *  - avg reduces as sum; the division by the rank count is the separate last
 *    step gcoll_avg_finish.
 *
 * Buffers hold `count` elements of the type, aligned for it. For
 * gcoll_reduce, dst may be the same pointer as a or b (in-place); any other
 * overlap is not allowed. Invalid types or ops make the functions do nothing
 * (they cannot report errors): callers validate with gcoll_dtype_size() and
 * gcoll_redop_name() first.
 */
#ifndef GCOLL_KERNELS_REDUCE_H
#define GCOLL_KERNELS_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "kernels/half.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(id, sfx, T) for every gcollDataType_t once, in enum order (16-bit
 * floats as their bits): the host loops, the CUDA kernels and their tables
 * expand it, so adding a type touches one line. */
#define GCOLL_FOR_EACH_TYPE(X)  \
  X(gcollInt8, i8, int8_t)      \
  X(gcollUint8, u8, uint8_t)    \
  X(gcollInt32, i32, int32_t)   \
  X(gcollUint32, u32, uint32_t) \
  X(gcollInt64, i64, int64_t)   \
  X(gcollUint64, u64, uint64_t) \
  X(gcollFloat16, f16, uint16_t) \
  X(gcollFloat32, f32, float)   \
  X(gcollFloat64, f64, double)  \
  X(gcollBfloat16, bf16, uint16_t)

size_t gcoll_dtype_size(gcollDataType_t t); /* 0 when t is invalid */
/* nccl-tests names ("int8" ... "bfloat16"); NULL when t is invalid. */
const char *gcoll_dtype_name(gcollDataType_t t);
/* "sum","prod","max","min","avg"; NULL when op is invalid. */
const char *gcoll_redop_name(gcollRedOp_t op);
/* The type for a name: the canonical names above plus the nccl-tests
 * aliases float16, float32, float64, bf16, char and int; -1 when unknown.
 * Names are case-sensitive, as in nccl-tests. */
int gcoll_dtype_from_name(const char *s);
int gcoll_redop_from_name(const char *s); /* -1 when unknown */

/* dst[i] = a[i] OP b[i] for i < count (avg reduces as sum). */
void gcoll_reduce(void *dst, const void *a, const void *b, size_t count,
                  gcollDataType_t t, gcollRedOp_t op);

/* The instruction sets gcoll_reduce's loops are built for. Calls of
 * GCOLL_REDUCE_WIDE_BYTES or more run the widest the CPU has (or the one
 * set below); smaller ones the baseline loops, whose few elements are
 * mostly the scalar tail anyway. Every ISA gives the same bits: each
 * element is one operation of the type (reduce.h's semantics), whatever
 * the vector width, so ranks on different CPUs still agree.
 * Open MPI's op/avx component does the same for MPI_Op; on the 2-core VM
 * it made 2-rank in-place allreduce of 4-16 MB 1.5x faster (issue 17),
 * since those ring steps run in cache. */
enum {
  GCOLL_REDUCE_BASELINE = 0, /* x86-64 (SSE2), or the only one elsewhere */
  GCOLL_REDUCE_AVX2 = 1,
  GCOLL_REDUCE_AVX512 = 2,   /* F, BW, DQ and VL: x86-64-v4 */
  GCOLL_REDUCE_NUM_ISAS = 3
};
#define GCOLL_REDUCE_WIDE_BYTES 256
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define GCOLL_REDUCE_X86_ISAS 1
#else
#define GCOLL_REDUCE_X86_ISAS 0
#endif

/* The widest ISA this CPU has and this build has loops for. */
int gcoll_reduce_best_isa(void);
/* The ISA in use (the best until set). */
int gcoll_reduce_isa(void);
/* Uses isa from now on in this process, capped at the best (isa < 0: the
 * best); returns the one in use. */
int gcoll_reduce_set_isa(int isa);
/* "baseline", "avx2", "avx512" (NULL out of range), and back (-1). */
const char *gcoll_reduce_isa_name(int isa);
int gcoll_reduce_isa_from_name(const char *s);

/* A pre-mul-sum (NCCL's ncclRedOpCreatePreMulSum): the sum over ranks of
 * each rank's input times that rank's scalar. The executors scale the
 * input as they read it, so no scaled copy of it is ever made. */
enum gcoll_premul_kind {
  GCOLL_PREMUL_NONE = 0,
  GCOLL_PREMUL_IMMEDIATE,   /* the scalar travels with the call */
  GCOLL_PREMUL_DEVICE       /* device memory, read when the kernel runs */
};

/* dst[i] = src[i] * k for i < count, k being the scalar in t's own bits
 * (zero-extended into 64): integers wrap (the product of the unsigned
 * bits, as gcoll's prod), floats round once (16-bit floats multiply in
 * float, which is their correctly rounded product). dst may equal src. */
void gcoll_scale(void *dst, const void *src, size_t count, gcollDataType_t t, uint64_t k);

/* buf[i] = buf[i] / n, the last step of avg; does nothing when n < 1.
 * Integers use C division (signed types truncate toward zero). Floating
 * types divide (half/bfloat16 in float, rounded once) rather than multiply
 * by 1/n: 1/n is inexact for most n, so multiplying rounds twice and can be
 * one ulp off the correctly rounded quotient, while this pass is memory
 * bound and the division costs nothing measurable. */
void gcoll_avg_finish(void *buf, size_t count, gcollDataType_t t, int n);

/* Serial reference for tests: out[i] = in[0][i] OP in[1][i] OP ... OP
 * in[n-1][i], combined left to right in rank order with the type's
 * arithmetic at every step (so 16-bit floats round after each op, like a
 * ring does), then gcoll_avg_finish for avg. Scalar code, independent of the
 * vector loops of gcoll_reduce. out may be one of the inputs. Does nothing
 * when n < 1. */
void gcoll_reduce_reference(void *out, const void *const *in, int n,
                            size_t count, gcollDataType_t t, gcollRedOp_t op);

/* ---- Element-wise operations ----------------------------------------------
 * gcoll_elt_<op>_<type>(a, b) for op in sum, prod, max, min and type in
 * i8 u8 i32 u32 i64 u64 f32 f64 f16 bf16 (16-bit floats as raw bits). The
 * host loops and the CUDA kernels both build on these, so the semantics
 * above live in one place. */

/* Signed sum/prod go through the unsigned type: `0u +` widens at least to
 * unsigned int, so even the 8-bit types never hit signed int arithmetic.
 * The final conversion back to the signed type is modulo 2^bits on every
 * compiler gcoll supports (GCC, Clang, NVCC define it so). */
#define GCOLL_ELT_INT_OPS(sfx, T, U)                                         \
  GCOLL_HD static inline T gcoll_elt_sum_##sfx(T a, T b) {                   \
    return (T)(U)(0u + (U)a + (U)b);                                         \
  }                                                                          \
  GCOLL_HD static inline T gcoll_elt_prod_##sfx(T a, T b) {                  \
    return (T)(U)((0u + (U)a) * (U)b);                                       \
  }                                                                          \
  GCOLL_HD static inline T gcoll_elt_max_##sfx(T a, T b) {                   \
    return a > b ? a : b;                                                    \
  }                                                                          \
  GCOLL_HD static inline T gcoll_elt_min_##sfx(T a, T b) {                   \
    return a < b ? a : b;                                                    \
  }

GCOLL_ELT_INT_OPS(i8, int8_t, uint8_t)
GCOLL_ELT_INT_OPS(u8, uint8_t, uint8_t)
GCOLL_ELT_INT_OPS(i32, int32_t, uint32_t)
GCOLL_ELT_INT_OPS(u32, uint32_t, uint32_t)
GCOLL_ELT_INT_OPS(i64, int64_t, uint64_t)
GCOLL_ELT_INT_OPS(u64, uint64_t, uint64_t)

/* max/min as selects on comparisons (no libm): b is NaN -> a (NaN only if a
 * is too); a is NaN -> the comparison is false -> b. Compilers turn these
 * into vector compare+blend. */
#define GCOLL_ELT_FLOAT_OPS(sfx, T)                                          \
  GCOLL_HD static inline T gcoll_elt_sum_##sfx(T a, T b) { return a + b; }   \
  GCOLL_HD static inline T gcoll_elt_prod_##sfx(T a, T b) { return a * b; }  \
  GCOLL_HD static inline T gcoll_elt_max_##sfx(T a, T b) {                   \
    return (a > b || b != b) ? a : b;                                        \
  }                                                                          \
  GCOLL_HD static inline T gcoll_elt_min_##sfx(T a, T b) {                   \
    return (a < b || b != b) ? a : b;                                        \
  }

GCOLL_ELT_FLOAT_OPS(f32, float)
GCOLL_ELT_FLOAT_OPS(f64, double)

#define GCOLL_ELT_16BIT_OPS(sfx, to_float, from_float)                       \
  GCOLL_HD static inline uint16_t gcoll_elt_sum_##sfx(uint16_t a,            \
                                                      uint16_t b) {          \
    return from_float(to_float(a) + to_float(b));                            \
  }                                                                          \
  GCOLL_HD static inline uint16_t gcoll_elt_prod_##sfx(uint16_t a,           \
                                                       uint16_t b) {         \
    return from_float(to_float(a) * to_float(b));                            \
  }                                                                          \
  GCOLL_HD static inline uint16_t gcoll_elt_max_##sfx(uint16_t a,            \
                                                      uint16_t b) {          \
    return from_float(gcoll_elt_max_f32(to_float(a), to_float(b)));          \
  }                                                                          \
  GCOLL_HD static inline uint16_t gcoll_elt_min_##sfx(uint16_t a,            \
                                                      uint16_t b) {          \
    return from_float(gcoll_elt_min_f32(to_float(a), to_float(b)));          \
  }

GCOLL_ELT_16BIT_OPS(f16, gcoll_half_to_float, gcoll_float_to_half)
GCOLL_ELT_16BIT_OPS(bf16, gcoll_bf16_to_float, gcoll_float_to_bf16)

#ifdef __cplusplus
}
#endif
#endif
