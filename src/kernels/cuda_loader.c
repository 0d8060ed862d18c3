/* The CUDA driver API's table (see cuda_loader.h), from the one loader of
 * the driver library (common/driver_libs.h). */
#include "kernels/cuda_loader.h"

#include <pthread.h>
#include <stdio.h>

#include "common/driver_libs.h"

/* Entry points by their ABI names: cuda.h maps the unversioned names to
 * these _v2 symbols, which are the ones with 64-bit sizes and pointers. */
#define GCOLL_CUDA_SYMBOLS(X)                                   \
  X(init, "cuInit")                                             \
  X(driver_get_version, "cuDriverGetVersion")                   \
  X(device_get_count, "cuDeviceGetCount")                       \
  X(device_get, "cuDeviceGet")                                  \
  X(device_get_attribute, "cuDeviceGetAttribute")               \
  X(device_get_name, "cuDeviceGetName")                         \
  X(device_get_pci_bus_id, "cuDeviceGetPCIBusId")               \
  X(primary_ctx_retain, "cuDevicePrimaryCtxRetain")             \
  X(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2")        \
  X(ctx_set_current, "cuCtxSetCurrent")                         \
  X(ctx_get_current, "cuCtxGetCurrent")                         \
  X(ctx_get_device, "cuCtxGetDevice")                           \
  X(pointer_get_attribute, "cuPointerGetAttribute")             \
  X(pointer_get_attributes, "cuPointerGetAttributes")           \
  X(mem_host_register, "cuMemHostRegister_v2")                  \
  X(mem_host_unregister, "cuMemHostUnregister")                 \
  X(module_load_data, "cuModuleLoadData")                       \
  X(module_unload, "cuModuleUnload")                            \
  X(module_get_function, "cuModuleGetFunction")                 \
  X(launch_kernel, "cuLaunchKernel")                            \
  X(stream_create, "cuStreamCreate")                            \
  X(stream_destroy, "cuStreamDestroy_v2")                       \
  X(stream_query, "cuStreamQuery")                              \
  X(stream_synchronize, "cuStreamSynchronize")                  \
  X(stream_wait_event, "cuStreamWaitEvent")                     \
  X(stream_is_capturing, "cuStreamIsCapturing")                 \
  X(thread_exchange_stream_capture_mode, "cuThreadExchangeStreamCaptureMode") \
  X(event_create, "cuEventCreate")                              \
  X(event_record, "cuEventRecord")                              \
  X(event_destroy, "cuEventDestroy_v2")                         \
  X(mem_alloc, "cuMemAlloc_v2")                                 \
  X(mem_free, "cuMemFree_v2")                                   \
  X(mem_host_alloc, "cuMemHostAlloc")                           \
  X(mem_free_host, "cuMemFreeHost")                             \
  X(mem_host_get_device_pointer, "cuMemHostGetDevicePointer_v2") \
  X(memcpy_htod, "cuMemcpyHtoD_v2")                             \
  X(memcpy_dtoh, "cuMemcpyDtoH_v2")                             \
  X(memset_d8, "cuMemsetD8_v2")                                 \
  X(memcpy_dtod_async, "cuMemcpyDtoDAsync_v2")                  \
  X(ipc_get_mem_handle, "cuIpcGetMemHandle")                    \
  X(ipc_open_mem_handle, "cuIpcOpenMemHandle_v2")               \
  X(ipc_close_mem_handle, "cuIpcCloseMemHandle")                \
  X(get_error_name, "cuGetErrorName")                           \
  X(get_error_string, "cuGetErrorString")

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct gcoll_cuda_api api;
static const struct gcoll_cuda_api *loaded;
static char load_error[256];

static void load_driver(void) {
  const char *path = NULL;
  char why[200];
  if (gcoll_driver_lib_open(GCOLL_LIB_CUDA_GCOLL, &path, why, sizeof(why)) == NULL) {
    snprintf(load_error, sizeof(load_error), "no CUDA driver: %s", why);
    return;
  }
#define GCOLL_CUDA_RESOLVE(field, name)                                        \
  if (gcoll_driver_lib_fn(GCOLL_LIB_CUDA_GCOLL, name, &api.field) != 0) {      \
    snprintf(load_error, sizeof(load_error),                                   \
             "no CUDA driver: %s lacks %s (driver too old?)", path, name);     \
    return;                                                                    \
  }
  GCOLL_CUDA_SYMBOLS(GCOLL_CUDA_RESOLVE)
#undef GCOLL_CUDA_RESOLVE
  loaded = &api;
}

const struct gcoll_cuda_api *gcoll_cuda_api_get(char *err, size_t errlen) {
  pthread_once(&load_once, load_driver);
  if (loaded == NULL && err != NULL && errlen > 0) snprintf(err, errlen, "%s", load_error);
  return loaded;
}

/* Names of the results gcoll reports itself, for drivers that cannot name
 * them: the toolkit's stub library answers every call, cuGetErrorName
 * included, with CUDA_ERROR_STUB_LIBRARY. */
static const char *known_name(gcoll_cu_result r) {
  switch (r) {
    case GCOLL_CU_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case GCOLL_CU_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case GCOLL_CU_ERROR_NO_BINARY_FOR_GPU: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case GCOLL_CU_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    default: return NULL;
  }
}

const char *gcoll_cuda_result_text(const struct gcoll_cuda_api *a, gcoll_cu_result r) {
  static _Thread_local char buf[192];
  const char *name = NULL, *text = NULL;
  if (a != NULL) {
    if (a->get_error_name(r, &name) != GCOLL_CU_SUCCESS) name = NULL;
    if (a->get_error_string(r, &text) != GCOLL_CU_SUCCESS) text = NULL;
  }
  if (name == NULL) name = known_name(r);
  if (name == NULL)
    snprintf(buf, sizeof(buf), "CUresult %d", r);
  else if (text == NULL)
    snprintf(buf, sizeof(buf), "%s", name);
  else
    snprintf(buf, sizeof(buf), "%s (%s)", name, text);
  return buf;
}

enum gcoll_cuda_probe_result gcoll_cuda_probe(int *ndev, char *msg, size_t msglen) {
  char line[256];
  if (ndev != NULL) *ndev = 0;
  if (msg == NULL || msglen == 0) {
    msg = line;
    msglen = sizeof(line);
  }
  const struct gcoll_cuda_api *a = gcoll_cuda_api_get(msg, msglen);
  if (a == NULL) return GCOLL_CUDA_NO_DRIVER;
  gcoll_cu_result r = a->init(0);
  if (r != GCOLL_CU_SUCCESS) {
    snprintf(msg, msglen, "no GPU: cuInit: %s", gcoll_cuda_result_text(a, r));
    return GCOLL_CUDA_NO_GPU;
  }
  int count = 0, version = 0;
  if ((r = a->device_get_count(&count)) != GCOLL_CU_SUCCESS) {
    snprintf(msg, msglen, "no GPU: cuDeviceGetCount: %s", gcoll_cuda_result_text(a, r));
    return GCOLL_CUDA_NO_GPU;
  }
  if (count < 1) {
    snprintf(msg, msglen, "no GPU: the CUDA driver sees no device");
    return GCOLL_CUDA_NO_GPU;
  }
  if (a->driver_get_version(&version) != GCOLL_CU_SUCCESS) version = 0;
  snprintf(msg, msglen, "%d GPU%s, driver %d.%d", count, count == 1 ? "" : "s",
           version / 1000, version % 1000 / 10);
  if (ndev != NULL) *ndev = count;
  return GCOLL_CUDA_AVAILABLE;
}

int gcoll_cuda_use_device(const struct gcoll_cuda_api *cu, int ordinal, gcoll_cu_device *dev,
                          gcoll_cu_context *ctx, char *err, size_t errlen) {
  const char *what = "cuDeviceGet";
  gcoll_cu_result r = cu->device_get(dev, ordinal);
  if (r == GCOLL_CU_SUCCESS) {
    what = "cuDevicePrimaryCtxRetain";
    r = cu->primary_ctx_retain(ctx, *dev);
  }
  if (r == GCOLL_CU_SUCCESS) {
    what = "cuCtxSetCurrent";
    r = cu->ctx_set_current(*ctx);
    if (r != GCOLL_CU_SUCCESS) cu->primary_ctx_release(*dev);
  }
  if (r == GCOLL_CU_SUCCESS) return 0;
  snprintf(err, errlen, "GPU %d: %s: %s", ordinal, what, gcoll_cuda_result_text(cu, r));
  return -1;
}
