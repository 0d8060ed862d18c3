/* Pre-mul-sum ops (gcollRedOpCreatePreMulSum): per-communicator op values
 * from gcollNumOps up, as NCCL numbers them, so the NCCL shim passes its
 * ops through unchanged. A collective resolves the op when it is called
 * (comm_coll.c), copying the scalar (or its device address) into the
 * call: destroying the op afterwards, or a grouped call, cannot change
 * what runs. The executors scale each rank's input as they read it
 * (reduce.h), so no scaled copy of the input is made. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce.h"
#include "runtime/comm.h"

/* Live ops of one comm: more means a program that never destroys its ops. */
#define MAX_PREMUL_OPS (1 << 20)

static int is_device_memory(const void *p) {
  const struct gcoll_exec_ops *cuda = gcoll_exec_ops_of(GCOLL_EXEC_CUDA);
  int device = -1;
  return cuda != NULL && p != NULL && cuda->owns(p, &device);
}

gcollResult_t gcollRedOpCreatePreMulSum(gcollRedOp_t *op, void *scalar, gcollDataType_t datatype,
                                        gcollScalarResidence_t residence, gcollComm_t comm) {
  const char *what = "gcollRedOpCreatePreMulSum";
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", what);
  if (op == NULL || scalar == NULL)
    return gcoll_fail(gcollInvalidArgument, "%s: %s is NULL", what, op == NULL ? "op" : "scalar");
  size_t esize = gcoll_dtype_size(datatype);
  if (esize == 0)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d is not a gcollDataType_t", what,
                      (int)datatype);
  struct gcoll_premul_op made = {.live = 1, .type = datatype};
  if (residence == gcollScalarHostImmediate) {
    if (is_device_memory(scalar))
      return gcoll_fail(gcollInvalidUsage, "%s: the scalar is in CUDA device memory, but its "
                                           "residence says host", what);
    made.kind = GCOLL_PREMUL_IMMEDIATE;
    memcpy(&made.k, scalar, esize); /* the type's bits, zero-extended (little endian) */
  } else if (residence == gcollScalarDevice) {
    /* Read by the kernel when it runs, so it must be memory the kernel reaches. */
    if (!is_device_memory(scalar))
      return gcoll_fail(gcollInvalidUsage, "%s: a device scalar at %p, but that is not CUDA "
                                           "device memory gcoll's CUDA executor can reach%s",
                        what, scalar,
                        gcoll_exec_ops_of(GCOLL_EXEC_CUDA) == NULL ? " (a build without CUDA)"
                                                                   : "");
    made.kind = GCOLL_PREMUL_DEVICE;
    made.k = (uint64_t)(uintptr_t)scalar;
  } else {
    return gcoll_fail(gcollInvalidArgument, "%s: residence %d is not a gcollScalarResidence_t",
                      what, (int)residence);
  }
  int idx = 0;
  while (idx < comm->nredops && comm->redops[idx].live) idx++;
  if (idx == comm->nredops) {
    if (comm->nredops == MAX_PREMUL_OPS)
      return gcoll_fail(gcollInvalidUsage, "%s: %d pre-mul-sum ops are live on this "
                                           "communicator: destroy some", what, comm->nredops);
    if (comm->nredops == comm->redops_cap) {
      int cap = comm->redops_cap ? comm->redops_cap * 2 : 8;
      struct gcoll_premul_op *more = realloc(comm->redops, (size_t)cap * sizeof(*more));
      if (more == NULL) return gcoll_fail(gcollSystemError, "%s: out of memory", what);
      comm->redops = more;
      comm->redops_cap = cap;
    }
    comm->nredops++;
  }
  comm->redops[idx] = made;
  *op = (gcollRedOp_t)(gcollNumOps + idx);
  return gcollSuccess;
}

/* The live op behind value op, or NULL. */
static struct gcoll_premul_op *find(struct gcollComm *comm, gcollRedOp_t op) {
  long idx = (long)op - gcollNumOps;
  if (idx < 0 || idx >= comm->nredops || !comm->redops[idx].live) return NULL;
  return &comm->redops[idx];
}

gcollResult_t gcollRedOpDestroy(gcollRedOp_t op, gcollComm_t comm) {
  const char *what = "gcollRedOpDestroy";
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", what);
  if ((int)op >= 0 && op < gcollNumOps)
    return gcoll_fail(gcollInvalidArgument, "%s: op %d is built in", what, (int)op);
  struct gcoll_premul_op *p = find(comm, op);
  if (p == NULL)
    return gcoll_fail(gcollInvalidArgument, "%s: op %d is not a live pre-mul-sum op of this "
                                            "communicator", what, (int)op);
  p->live = 0;
  while (comm->nredops > 0 && !comm->redops[comm->nredops - 1].live) comm->nredops--;
  return gcollSuccess;
}

gcollResult_t gcoll_comm_resolve_op(struct gcollComm *comm, gcollRedOp_t *op,
                                    gcollDataType_t dtype, struct gcoll_host_coll *hc,
                                    const char *what) {
  hc->premul = GCOLL_PREMUL_NONE;
  hc->premul_k = 0;
  if ((int)*op >= 0 && *op < gcollNumOps) return gcollSuccess;
  const struct gcoll_premul_op *p = find(comm, *op);
  if (p == NULL)
    return gcoll_fail(gcollInvalidArgument, "%s: op %d is neither built in nor a live "
                                            "pre-mul-sum op of this communicator", what, (int)*op);
  if (p->type != dtype)
    return gcoll_fail(gcollInvalidArgument, "%s: pre-mul-sum op %d was made for datatype %s, "
                                            "not %s", what, (int)*op, gcoll_dtype_name(p->type),
                      gcoll_dtype_name(dtype));
  *op = gcollSum;
  hc->premul = p->kind;
  hc->premul_k = p->k;
  return gcollSuccess;
}

void gcoll_comm_redops_free(struct gcollComm *comm) {
  free(comm->redops);
  comm->redops = NULL;
  comm->nredops = comm->redops_cap = 0;
}
