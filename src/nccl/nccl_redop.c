/* NCCL's datatypes and reduction ops on gcoll's, and the pre-mul-sum ops
 * (ncclRedOpCreatePreMulSum): sum over ranks of (input * this rank's
 * scalar). gcoll has no such op, so the collective scales this rank's input
 * into a per-comm scratch buffer and sums the copies. Integer types wrap
 * (product in the unsigned type, as gcoll's prod); half and bfloat16 are
 * multiplied in float and rounded once, which is their correctly rounded
 * product. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/half.h"
#include "kernels/reduce.h"
#include "nccl/nccl_shim.h"
#include "runtime/comm.h"

/* Live ops of one comm: more means a program that never destroys its ops. */
#define MAX_PREMULSUM_OPS (1 << 20)
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

nccl_abi_result_t nccl_shim_type(nccl_abi_datatype_t t, const char *what, gcollDataType_t *out) {
  if (t == NCCL_ABI_FLOAT8E4M3 || t == NCCL_ABI_FLOAT8E5M2)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d (%s) is not supported by gcoll", what,
                      t, t == NCCL_ABI_FLOAT8E4M3 ? "ncclFloat8e4m3" : "ncclFloat8e5m2");
  if (t < 0 || t >= gcollNumTypes)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d is not an ncclDataType_t", what, t);
  *out = (gcollDataType_t)t;
  return gcollSuccess;
}

nccl_abi_result_t nccl_shim_resolve_op(struct ncclComm *comm, nccl_abi_redop_t op,
                                       gcollDataType_t type, const char *what,
                                       gcollRedOp_t *g_op, const struct nccl_premulsum **pms) {
  *pms = NULL;
  if (op >= 0 && op < NCCL_ABI_NUM_OPS) {
    *g_op = (gcollRedOp_t)op;
    return gcollSuccess;
  }
  long idx = (long)op - NCCL_ABI_NUM_OPS;
  if (idx < 0 || idx >= comm->nops || !comm->ops[idx].live)
    return gcoll_fail(gcollInvalidArgument, "%s: op %d is neither built in nor a live "
                                            "pre-mul-sum op of this communicator", what, op);
  if (comm->ops[idx].type != type)
    return gcoll_fail(gcollInvalidArgument, "%s: pre-mul-sum op %d was made for datatype %d, "
                                            "not %d", what, op, (int)comm->ops[idx].type,
                      (int)type);
  *g_op = gcollSum;
  *pms = &comm->ops[idx];
  return gcollSuccess;
}

/* The scalar as the op keeps it: integers as their (sign-extended) bits, so
 * that truncating to any width gives the value's bits modulo 2^width. */
static void read_scalar(struct nccl_premulsum *p, const void *scalar) {
  switch (p->type) {
  case gcollInt8: p->scalar_u = (unsigned long long)(long long)*(const int8_t *)scalar; break;
  case gcollUint8: p->scalar_u = *(const uint8_t *)scalar; break;
  case gcollInt32: p->scalar_u = (unsigned long long)(long long)*(const int32_t *)scalar; break;
  case gcollUint32: p->scalar_u = *(const uint32_t *)scalar; break;
  case gcollInt64: p->scalar_u = (unsigned long long)*(const int64_t *)scalar; break;
  case gcollUint64: p->scalar_u = *(const uint64_t *)scalar; break;
  case gcollFloat16: p->scalar_f = gcoll_half_to_float(*(const uint16_t *)scalar); break;
  case gcollFloat32: p->scalar_f = *(const float *)scalar; break;
  case gcollFloat64: p->scalar_f = *(const double *)scalar; break;
  case gcollBfloat16: p->scalar_f = gcoll_bf16_to_float(*(const uint16_t *)scalar); break;
  default: break;
  }
}

nccl_abi_result_t ncclRedOpCreatePreMulSum(nccl_abi_redop_t *op, void *scalar,
                                           nccl_abi_datatype_t datatype,
                                           nccl_abi_residence_t residence, struct ncclComm *comm) {
  const char *what = "ncclRedOpCreatePreMulSum";
  nccl_abi_result_t rc = nccl_shim_check_comm(comm, what);
  if (rc != gcollSuccess) return rc;
  if (op == NULL || scalar == NULL)
    return gcoll_fail(gcollInvalidArgument, "%s: %s is NULL", what, op == NULL ? "op" : "scalar");
  gcollDataType_t type;
  rc = nccl_shim_type(datatype, what, &type);
  if (rc != gcollSuccess) return rc;
  if (residence == NCCL_ABI_SCALAR_DEVICE)
    return gcoll_fail(gcollInvalidUsage, "%s: ncclScalarDevice needs a CUDA executor, which this "
                                         "build has not: pass ncclScalarHostImmediate", what);
  if (residence != NCCL_ABI_SCALAR_HOST_IMMEDIATE)
    return gcoll_fail(gcollInvalidArgument, "%s: residence %d is not an ncclScalarResidence_t",
                      what, residence);
  if (nccl_cuda_is_device_memory(scalar))
    return gcoll_fail(gcollInvalidUsage, "%s: the scalar is in CUDA device memory, but its "
                                         "residence says host", what);
  int idx = 0;
  while (idx < comm->nops && comm->ops[idx].live) idx++;
  if (idx == comm->nops) {
    if (comm->nops == MAX_PREMULSUM_OPS)
      return gcoll_fail(gcollInvalidUsage, "%s: %d pre-mul-sum ops are live on this "
                                           "communicator: destroy some", what, comm->nops);
    if (comm->nops == comm->ops_cap) {
      int cap = comm->ops_cap ? comm->ops_cap * 2 : 8;
      struct nccl_premulsum *more = realloc(comm->ops, (size_t)cap * sizeof(*more));
      if (more == NULL) return gcoll_fail(gcollSystemError, "%s: out of memory", what);
      comm->ops = more;
      comm->ops_cap = cap;
    }
    comm->nops++;
  }
  struct nccl_premulsum *p = &comm->ops[idx];
  memset(p, 0, sizeof(*p));
  p->type = type;
  read_scalar(p, scalar);
  p->live = 1;
  *op = NCCL_ABI_NUM_OPS + idx;
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclRedOpCreatePreMulSum);

nccl_abi_result_t ncclRedOpDestroy(nccl_abi_redop_t op, struct ncclComm *comm) {
  const char *what = "ncclRedOpDestroy";
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", what);
  if (op >= 0 && op < NCCL_ABI_NUM_OPS)
    return gcoll_fail(gcollInvalidArgument, "%s: op %d is built in", what, op);
  long idx = (long)op - NCCL_ABI_NUM_OPS;
  if (idx < 0 || idx >= comm->nops || !comm->ops[idx].live)
    return gcoll_fail(gcollInvalidArgument, "%s: op %d is not a live pre-mul-sum op of this "
                                            "communicator", what, op);
  comm->ops[idx].live = 0;
  while (comm->nops > 0 && !comm->ops[comm->nops - 1].live) comm->nops--;
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclRedOpDestroy);

void nccl_shim_redops_free(struct ncclComm *comm) {
  free(comm->ops);
  comm->ops = NULL;
  comm->nops = comm->ops_cap = 0;
}

/* Room for bytes in comm's scratch. It only grows (to the largest call, in
 * huge-page multiples when that large), so a training loop's repeated calls
 * pay the first touch of its pages once. */
static gcollResult_t scratch_reserve(struct ncclComm *comm, size_t bytes, const char *what) {
  if (bytes <= comm->scratch_bytes) return gcollSuccess;
  size_t want = bytes;
  if (want < comm->scratch_bytes * 2) want = comm->scratch_bytes * 2;
  size_t align = 64;
  if (want >= HUGE_PAGE_BYTES) {
    align = HUGE_PAGE_BYTES;
    want = (want + HUGE_PAGE_BYTES - 1) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
  } else {
    want = (want + 63) / 64 * 64;
  }
  void *p = NULL;
  if (want < bytes || posix_memalign(&p, align, want) != 0)
    return gcoll_fail(gcollSystemError, "%s: out of memory for %zu bytes of pre-mul-sum scratch",
                      what, bytes);
  if (align == HUGE_PAGE_BYTES) madvise(p, want, MADV_HUGEPAGE);   /* a hint: failure is fine */
  free(comm->scratch);
  comm->scratch = p;
  comm->scratch_bytes = want;
  return gcollSuccess;
}

#define SCALE_INT(T, U)                                                           \
  do {                                                                            \
    const T *s = src;                                                             \
    T *d = dst;                                                                   \
    U k = (U)p->scalar_u;                                                         \
    for (size_t i = 0; i < count; i++) d[i] = (T)(U)((0u + (U)s[i]) * k);         \
  } while (0)

#define SCALE_16(TO_F, FROM_F)                                                    \
  do {                                                                            \
    const uint16_t *s = src;                                                      \
    uint16_t *d = dst;                                                            \
    float k = (float)p->scalar_f;                                                 \
    for (size_t i = 0; i < count; i++) d[i] = FROM_F(TO_F(s[i]) * k);             \
  } while (0)

static void scale(void *dst, const void *src, size_t count, const struct nccl_premulsum *p) {
  switch (p->type) {
  case gcollInt8: SCALE_INT(int8_t, uint8_t); break;
  case gcollUint8: SCALE_INT(uint8_t, uint8_t); break;
  case gcollInt32: SCALE_INT(int32_t, uint32_t); break;
  case gcollUint32: SCALE_INT(uint32_t, uint32_t); break;
  case gcollInt64: SCALE_INT(int64_t, uint64_t); break;
  case gcollUint64: SCALE_INT(uint64_t, uint64_t); break;
  case gcollFloat16: SCALE_16(gcoll_half_to_float, gcoll_float_to_half); break;
  case gcollBfloat16: SCALE_16(gcoll_bf16_to_float, gcoll_float_to_bf16); break;
  case gcollFloat32: {
    const float *s = src;
    float *d = dst, k = (float)p->scalar_f;
    for (size_t i = 0; i < count; i++) d[i] = s[i] * k;
    break;
  }
  case gcollFloat64: {
    const double *s = src;
    double *d = dst, k = p->scalar_f;
    for (size_t i = 0; i < count; i++) d[i] = s[i] * k;
    break;
  }
  default: break;
  }
}

nccl_abi_result_t nccl_shim_premul(struct ncclComm *comm, const struct nccl_premulsum *pms,
                                   const void *src, size_t count, const char *what,
                                   const void **out) {
  *out = src;
  if (count == 0) return gcollSuccess;   /* nothing is read: src may even be NULL */
  size_t size = gcoll_dtype_size(pms->type);
  if (count > SIZE_MAX / size)
    return gcoll_fail(gcollInvalidArgument, "%s: count %zu overflows the buffer size", what, count);
  if (src == NULL)
    return gcoll_fail(gcollInvalidArgument, "%s: sendbuff is NULL with count %zu", what, count);
  gcollResult_t rc = scratch_reserve(comm, count * size, what);
  if (rc != gcollSuccess) return rc;
  scale(comm->scratch, src, count, pms);
  *out = comm->scratch;
  return gcollSuccess;
}
