/* FIFOs in GPU memory through the driver API (fifo_devmem.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fifo.h"
#include "runtime/fifo_devmem.h"

#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"

struct gcoll_devmem {
  const struct gcoll_cuda_api *cu;
  int ordinal;
  gcoll_cu_device dev;
  gcoll_cu_context ctx;
};

/* The driver, initialised; NULL with the reason. */
static const struct gcoll_cuda_api *driver(char *err, size_t errlen) {
  char why[256];
  if (gcoll_cuda_probe(NULL, why, sizeof(why)) != GCOLL_CUDA_AVAILABLE) {
    snprintf(err, errlen, "%s", why);
    return NULL;
  }
  return gcoll_cuda_api_get(err, errlen);
}

int gcoll_devmem_current_device(int *ordinal, char *err, size_t errlen) {
  const struct gcoll_cuda_api *cu = driver(err, errlen);
  if (cu == NULL) return -1;
  gcoll_cu_context ctx = NULL;
  gcoll_cu_device dev = -1;
  if (cu->ctx_get_current(&ctx) != GCOLL_CU_SUCCESS || ctx == NULL) {
    snprintf(err, errlen, "no CUDA context is current on this thread (call cudaSetDevice "
                          "before creating the communicator)");
    return -1;
  }
  gcoll_cu_result r = cu->ctx_get_device(&dev);
  if (r != GCOLL_CU_SUCCESS) {
    snprintf(err, errlen, "cuCtxGetDevice: %s", gcoll_cuda_result_text(cu, r));
    return -1;
  }
  *ordinal = (int)dev;
  return 0;
}

int gcoll_devmem_current_busid(char *busid, size_t len, char *err, size_t errlen) {
  int ordinal;
  if (gcoll_devmem_current_device(&ordinal, err, errlen) != 0) return -1;
  const struct gcoll_cuda_api *cu = gcoll_cuda_api_get(err, errlen);
  if (cu == NULL) return -1;
  gcoll_cu_device dev;
  gcoll_cu_result r = cu->ctx_get_device(&dev);
  if (r == GCOLL_CU_SUCCESS) r = cu->device_get_pci_bus_id(busid, (int)len, dev);
  if (r != GCOLL_CU_SUCCESS) {
    snprintf(err, errlen, "cuDeviceGetPCIBusId: %s", gcoll_cuda_result_text(cu, r));
    return -1;
  }
  return 0;
}

int gcoll_devmem_open(struct gcoll_devmem **out, int ordinal, char *err, size_t errlen) {
  *out = NULL;
  const struct gcoll_cuda_api *cu = driver(err, errlen);
  if (cu == NULL) return -1;
  struct gcoll_devmem *d = calloc(1, sizeof(*d));
  if (d == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  d->cu = cu;
  d->ordinal = ordinal;
  gcoll_cu_context caller = NULL;
  cu->ctx_get_current(&caller);
  int rc = gcoll_cuda_use_device(cu, ordinal, &d->dev, &d->ctx, err, errlen);
  cu->ctx_set_current(caller);
  if (rc != 0) {
    free(d);
    return -1;
  }
  *out = d;
  return 0;
}

void gcoll_devmem_close(struct gcoll_devmem *d) {
  if (d == NULL) return;
  d->cu->primary_ctx_release(d->dev);
  free(d);
}

/* Makes the GPU's context current; returns the caller's, to restore. */
static gcoll_cu_context enter(const struct gcoll_devmem *d) {
  gcoll_cu_context caller = NULL;
  d->cu->ctx_get_current(&caller);
  d->cu->ctx_set_current(d->ctx);
  return caller;
}

static int failed(const struct gcoll_devmem *d, gcoll_cu_context caller, const char *what,
                  gcoll_cu_result r, char *err, size_t errlen) {
  snprintf(err, errlen, "GPU %d: %s: %s", d->ordinal, what, gcoll_cuda_result_text(d->cu, r));
  d->cu->ctx_set_current(caller);
  return -1;
}

int gcoll_devmem_fifo_alloc(struct gcoll_devmem *d, size_t slot_bytes, uint64_t *fifo,
                            unsigned char handle[GCOLL_DEVMEM_HANDLE_BYTES], char *err,
                            size_t errlen) {
  struct gcoll_fifo header;
  size_t bytes = gcoll_fifo_bytes(slot_bytes);
  if (bytes == 0 || gcoll_fifo_header_init(&header, slot_bytes) != 0) {
    snprintf(err, errlen, "invalid FIFO slot size %zu", slot_bytes);
    return -1;
  }
  gcoll_cu_context caller = enter(d);
  gcoll_cu_deviceptr p = 0;
  gcoll_cu_result r = d->cu->mem_alloc(&p, bytes);
  if (r != GCOLL_CU_SUCCESS) return failed(d, caller, "cuMemAlloc of a FIFO", r, err, errlen);
  /* Zero slots matter: LL flags start at 1, so zeroed lines never match. */
  const char *what = "cuMemsetD8";
  r = d->cu->memset_d8(p, 0, bytes);
  if (r == GCOLL_CU_SUCCESS) {
    what = "cuMemcpyHtoD";
    r = d->cu->memcpy_htod(p, &header, sizeof(header));
  }
  gcoll_cu_ipc_mem_handle h;
  if (r == GCOLL_CU_SUCCESS) {
    what = "cuIpcGetMemHandle";
    r = d->cu->ipc_get_mem_handle(&h, p);
  }
  if (r != GCOLL_CU_SUCCESS) {
    d->cu->mem_free(p);
    return failed(d, caller, what, r, err, errlen);
  }
  _Static_assert(sizeof(h) == GCOLL_DEVMEM_HANDLE_BYTES, "IPC handle size");
  memcpy(handle, &h, sizeof(h));
  *fifo = p;
  d->cu->ctx_set_current(caller);
  return 0;
}

void gcoll_devmem_fifo_free(struct gcoll_devmem *d, uint64_t fifo) {
  gcoll_cu_context caller = enter(d);
  d->cu->mem_free(fifo);
  d->cu->ctx_set_current(caller);
}

int gcoll_devmem_fifo_open(struct gcoll_devmem *d,
                           const unsigned char handle[GCOLL_DEVMEM_HANDLE_BYTES], uint64_t *fifo,
                           char *err, size_t errlen) {
  gcoll_cu_ipc_mem_handle h;
  memcpy(&h, handle, sizeof(h));
  gcoll_cu_context caller = enter(d);
  gcoll_cu_deviceptr p = 0;
  gcoll_cu_result r =
      d->cu->ipc_open_mem_handle(&p, h, GCOLL_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (r != GCOLL_CU_SUCCESS)
    return failed(d, caller, "cuIpcOpenMemHandle of the receiver's FIFO (no peer access "
                  "between the GPUs? GCOLL_P2P_DISABLE=1 uses host memory instead)", r, err,
                  errlen);
  *fifo = p;
  d->cu->ctx_set_current(caller);
  return 0;
}

void gcoll_devmem_fifo_unmap(struct gcoll_devmem *d, uint64_t fifo) {
  gcoll_cu_context caller = enter(d);
  d->cu->ipc_close_mem_handle(fifo);
  d->cu->ctx_set_current(caller);
}

#else /* no CUDA toolkit at configure: there is no GPU memory to use */

#define NO_CUDA "this build of gcoll has no CUDA support (no toolkit at configure)"

int gcoll_devmem_current_device(int *ordinal, char *err, size_t errlen) {
  (void)ordinal;
  snprintf(err, errlen, NO_CUDA);
  return -1;
}

int gcoll_devmem_current_busid(char *busid, size_t len, char *err, size_t errlen) {
  (void)busid;
  (void)len;
  snprintf(err, errlen, NO_CUDA);
  return -1;
}

int gcoll_devmem_open(struct gcoll_devmem **out, int ordinal, char *err, size_t errlen) {
  (void)ordinal;
  *out = NULL;
  snprintf(err, errlen, NO_CUDA);
  return -1;
}

void gcoll_devmem_close(struct gcoll_devmem *d) { (void)d; }

int gcoll_devmem_fifo_alloc(struct gcoll_devmem *d, size_t slot_bytes, uint64_t *fifo,
                            unsigned char handle[GCOLL_DEVMEM_HANDLE_BYTES], char *err,
                            size_t errlen) {
  (void)d, (void)slot_bytes, (void)fifo, (void)handle;
  snprintf(err, errlen, NO_CUDA);
  return -1;
}

void gcoll_devmem_fifo_free(struct gcoll_devmem *d, uint64_t fifo) { (void)d, (void)fifo; }

int gcoll_devmem_fifo_open(struct gcoll_devmem *d,
                           const unsigned char handle[GCOLL_DEVMEM_HANDLE_BYTES], uint64_t *fifo,
                           char *err, size_t errlen) {
  (void)d, (void)handle, (void)fifo;
  snprintf(err, errlen, NO_CUDA);
  return -1;
}

void gcoll_devmem_fifo_unmap(struct gcoll_devmem *d, uint64_t fifo) { (void)d, (void)fifo; }

#endif
