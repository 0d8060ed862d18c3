/* NCCL 2.19's memory calls. ncclMemAlloc/ncclMemFree give device memory of
 * the current device through the driver gcoll loads (NCCL uses cuMem* to
 * get NVLS-capable memory; gcoll has no NVLS yet, so plain cuMemAlloc
 * memory serves). ncclCommRegister records the buffer and returns a
 * handle: gcoll's transports copy through their FIFOs and need no
 * registration, so registered and unregistered buffers behave alike. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "nccl/nccl_shim.h"
#include "runtime/comm.h"
#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"
#endif

/* What a registration handle points at; the magic catches a handle that is
 * not one (or was deregistered: it is cleared first). */
#define NCCL_REG_MAGIC 0x67726567u /* "greg" */
struct nccl_registration {
  uint32_t magic;
  const struct ncclComm *comm;
  void *buff;
  size_t size;
};

#ifdef HAVE_CUDA
/* The driver, with a context current on this thread: the program's (cudart
 * made the current device's primary context current), else the primary
 * context of the device cudaGetDevice names. */
static const struct gcoll_cuda_api *driver_with_context(const char *what, gcollResult_t *rc) {
  char msg[256];
  const struct gcoll_cuda_api *cu = NULL;
  gcoll_cu_context ctx = NULL;
  gcoll_cu_device dev;
  *rc = gcollSuccess;
  if (gcoll_cuda_probe(NULL, msg, sizeof(msg)) != GCOLL_CUDA_AVAILABLE ||
      (cu = gcoll_cuda_api_get(msg, sizeof(msg))) == NULL) {
    *rc = gcoll_fail(gcollUnhandledCudaError, "%s: %s", what, msg);
    return NULL;
  }
  if (cu->ctx_get_current(&ctx) == GCOLL_CU_SUCCESS && ctx != NULL) return cu;
  if (gcoll_cuda_use_device(cu, nccl_cuda_current_device(), &dev, &ctx, msg, sizeof(msg)) != 0) {
    *rc = gcoll_fail(gcollUnhandledCudaError, "%s: no CUDA context: %s", what, msg);
    return NULL;
  }
  return cu;
}
#endif

nccl_abi_result_t ncclMemAlloc(void **ptr, size_t size) {
  if (ptr == NULL) return gcoll_fail(gcollInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = NULL;
  if (size == 0) return gcollSuccess;
#ifdef HAVE_CUDA
  gcollResult_t rc;
  const struct gcoll_cuda_api *cu = driver_with_context("ncclMemAlloc", &rc);
  if (cu == NULL) return rc;
  gcoll_cu_deviceptr p = 0;
  gcoll_cu_result r = cu->mem_alloc(&p, size);
  if (r != GCOLL_CU_SUCCESS)
    return gcoll_fail(gcollUnhandledCudaError, "ncclMemAlloc of %zu bytes: %s", size,
                      gcoll_cuda_result_text(cu, r));
  *ptr = (void *)(uintptr_t)p;
  return gcollSuccess;
#else
  return gcoll_fail(gcollUnhandledCudaError,
                    "ncclMemAlloc: this build of gcoll has no CUDA (configured without nvcc)");
#endif
}
NCCL_PROFILER_ALIAS(ncclMemAlloc);

nccl_abi_result_t ncclMemFree(void *ptr) {
  if (ptr == NULL) return gcollSuccess;
#ifdef HAVE_CUDA
  gcollResult_t rc;
  const struct gcoll_cuda_api *cu = driver_with_context("ncclMemFree", &rc);
  if (cu == NULL) return rc;
  gcoll_cu_result r = cu->mem_free((gcoll_cu_deviceptr)(uintptr_t)ptr);
  if (r != GCOLL_CU_SUCCESS)
    return gcoll_fail(gcollUnhandledCudaError, "ncclMemFree(%p): %s", ptr,
                      gcoll_cuda_result_text(cu, r));
  return gcollSuccess;
#else
  return gcoll_fail(gcollInvalidArgument, "ncclMemFree(%p): not memory of ncclMemAlloc (this "
                                          "build has no CUDA)", ptr);
#endif
}
NCCL_PROFILER_ALIAS(ncclMemFree);

nccl_abi_result_t ncclCommRegister(struct ncclComm *const comm, void *buff, size_t size,
                                   void **handle) {
  nccl_abi_result_t rc = nccl_shim_check_comm(comm, "ncclCommRegister");
  if (rc != gcollSuccess) return rc;
  if (handle == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommRegister: handle is NULL");
  if (buff == NULL && size > 0)
    return gcoll_fail(gcollInvalidArgument, "ncclCommRegister: buff is NULL with size %zu", size);
  struct nccl_registration *reg = malloc(sizeof(*reg));
  if (reg == NULL) return gcoll_fail(gcollSystemError, "ncclCommRegister: out of memory");
  *reg = (struct nccl_registration){.magic = NCCL_REG_MAGIC, .comm = comm, .buff = buff,
                                    .size = size};
  *handle = reg;
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclCommRegister);

nccl_abi_result_t ncclCommDeregister(struct ncclComm *const comm, void *handle) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommDeregister: comm is NULL");
  struct nccl_registration *reg = handle;
  if (reg == NULL || reg->magic != NCCL_REG_MAGIC || reg->comm != comm)
    return gcoll_fail(gcollInvalidArgument, "ncclCommDeregister: %p is not a registration of "
                                            "this communicator", handle);
  reg->magic = 0;
  free(reg);
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclCommDeregister);

/* NCCL 2.27's windows: NCCL maps a buffer (of ncclMemAlloc) into every
 * rank's address space for its symmetric kernels, collectively. gcoll
 * needs no registration (its transports copy through their FIFOs, so a
 * window's buffer and any other behave alike), so a window only records
 * what was registered, on its communicator's list: deregistering checks the
 * handle against that list (nothing freed is read), and destroy frees what
 * is left. The call is local; NCCL_WIN_REQUIRED_ALIGNMENT is not required.
 * Refused as by NCCL: a NULL comm or win, a NULL buff or size 0; and flags
 * other than NCCL_WIN_COLL_SYMMETRIC (the only one nccl.h 2.28.9 has). */
#define NCCL_WIN_MAGIC 0x6777696eu /* "gwin" */

nccl_abi_result_t ncclCommWindowRegister(struct ncclComm *comm, void *buff, size_t size,
                                         struct ncclWindow_vidmem **win, int winFlags) {
  if (win == NULL) return gcoll_fail(gcollInvalidArgument, "ncclCommWindowRegister: win is NULL");
  *win = NULL;
  nccl_abi_result_t rc = nccl_shim_check_comm(comm, "ncclCommWindowRegister");
  if (rc != gcollSuccess) return rc;
  if (buff == NULL || size == 0)
    return gcoll_fail(gcollInvalidArgument, "ncclCommWindowRegister: buff %p with size %zu (a "
                                            "window needs both)", buff, size);
  if ((winFlags & ~NCCL_ABI_WIN_COLL_SYMMETRIC) != 0)
    return gcoll_fail(gcollInvalidArgument, "ncclCommWindowRegister: winFlags 0x%x (known: "
                                            "NCCL_WIN_COLL_SYMMETRIC = 0x%x)", (unsigned)winFlags,
                      (unsigned)NCCL_ABI_WIN_COLL_SYMMETRIC);
  struct ncclWindow_vidmem *w = malloc(sizeof(*w));
  if (w == NULL) return gcoll_fail(gcollSystemError, "ncclCommWindowRegister: out of memory");
  *w = (struct ncclWindow_vidmem){.magic = NCCL_WIN_MAGIC, .comm = comm, .buff = buff,
                                  .size = size, .flags = winFlags, .next = comm->windows};
  comm->windows = w;
  *win = w;
  return gcollSuccess;
}
NCCL_PROFILER_ALIAS(ncclCommWindowRegister);

/* A NULL window is nothing to deregister, as in NCCL. */
nccl_abi_result_t ncclCommWindowDeregister(struct ncclComm *comm, struct ncclWindow_vidmem *win) {
  if (comm == NULL)
    return gcoll_fail(gcollInvalidArgument, "ncclCommWindowDeregister: comm is NULL");
  if (win == NULL) return gcollSuccess;
  for (struct ncclWindow_vidmem **p = &comm->windows; *p != NULL; p = &(*p)->next) {
    if (*p != win) continue;
    *p = win->next;
    win->magic = 0;
    free(win);
    return gcollSuccess;
  }
  return gcoll_fail(gcollInvalidArgument, "ncclCommWindowDeregister: %p is not a window of this "
                                          "communicator", (void *)win);
}
NCCL_PROFILER_ALIAS(ncclCommWindowDeregister);
