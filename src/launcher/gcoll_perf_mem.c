/* gcoll-perf's device buffers (gcoll_perf.h), through the CUDA driver that
 * libgcoll loads itself: the benchmark links no CUDA library either. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>

#include "launcher/gcoll_perf.h"

#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"

static const struct gcoll_cuda_api *cu;

static int check(gcoll_cu_result r, const char *what, char *err, size_t errlen) {
  if (r == GCOLL_CU_SUCCESS) return 0;
  snprintf(err, errlen, "%s: %s", what, gcoll_cuda_result_text(cu, r));
  return -1;
}

int perf_mem_open(int local_rank, char *err, size_t errlen) {
  int ndev = 0;
  if (gcoll_cuda_probe(&ndev, err, errlen) != GCOLL_CUDA_AVAILABLE) return -1;
  cu = gcoll_cuda_api_get(err, errlen);
  gcoll_cu_device dev;
  gcoll_cu_context ctx;
  int ordinal = (local_rank < 0 ? 0 : local_rank) % ndev;
  return gcoll_cuda_use_device(cu, ordinal, &dev, &ctx, err, errlen);
}

void *perf_mem_alloc(size_t bytes, char *err, size_t errlen) {
  gcoll_cu_deviceptr p = 0;
  if (check(cu->mem_alloc(&p, bytes ? bytes : 1), "cuMemAlloc", err, errlen) != 0) return NULL;
  return (void *)(uintptr_t)p;
}

void perf_mem_free(void *dev) {
  if (dev != NULL && cu != NULL) cu->mem_free((gcoll_cu_deviceptr)(uintptr_t)dev);
}

int perf_mem_to_device(void *dev, const void *host, size_t bytes, char *err, size_t errlen) {
  if (bytes == 0) return 0;
  return check(cu->memcpy_htod((gcoll_cu_deviceptr)(uintptr_t)dev, host, bytes), "cuMemcpyHtoD",
               err, errlen);
}

int perf_mem_to_host(void *host, const void *dev, size_t bytes, char *err, size_t errlen) {
  if (bytes == 0) return 0;
  return check(cu->memcpy_dtoh(host, (gcoll_cu_deviceptr)(uintptr_t)dev, bytes), "cuMemcpyDtoH",
               err, errlen);
}

int perf_mem_sync(char *err, size_t errlen) {
  return check(cu->stream_synchronize(NULL), "cuStreamSynchronize", err, errlen);
}

#else

int perf_mem_sync(char *err, size_t errlen) {
  snprintf(err, errlen, "no CUDA in this build");
  return -1;
}

int perf_mem_open(int local_rank, char *err, size_t errlen) {
  (void)local_rank;
  snprintf(err, errlen, "this build of gcoll has no CUDA (configured without nvcc)");
  return -1;
}

void *perf_mem_alloc(size_t bytes, char *err, size_t errlen) {
  (void)bytes;
  snprintf(err, errlen, "no CUDA in this build");
  return NULL;
}

void perf_mem_free(void *dev) { (void)dev; }

int perf_mem_to_device(void *dev, const void *host, size_t bytes, char *err, size_t errlen) {
  (void)dev, (void)host, (void)bytes;
  snprintf(err, errlen, "no CUDA in this build");
  return -1;
}

int perf_mem_to_host(void *host, const void *dev, size_t bytes, char *err, size_t errlen) {
  (void)dev, (void)host, (void)bytes;
  snprintf(err, errlen, "no CUDA in this build");
  return -1;
}

#endif
