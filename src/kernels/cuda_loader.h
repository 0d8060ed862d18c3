/* The CUDA driver API, loaded at run time.
 *
 * libgcoll must load and run its host path on machines without the CUDA
 * driver, so it never links libcuda or libcudart: the driver is opened on
 * first use (common/driver_libs.h: libcuda.so.1, or the file
 * $GCOLL_CUDA_DRIVER names, for tests) and the few entry points gcoll needs
 * are resolved by their versioned ABI names. The types and constants below are the driver
 * ABI's, spelled here so that this header needs no toolkit headers;
 * coll_kernels.cu checks every one against cuda.h at build time.
 */
#ifndef GCOLL_KERNELS_CUDA_LOADER_H
#define GCOLL_KERNELS_CUDA_LOADER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int gcoll_cu_result;                       /* CUresult */
typedef int gcoll_cu_device;                       /* CUdevice */
typedef unsigned long long gcoll_cu_deviceptr;     /* CUdeviceptr */
typedef struct gcoll_cu_ctx *gcoll_cu_context;     /* CUcontext */
typedef struct gcoll_cu_mod *gcoll_cu_module;      /* CUmodule */
typedef struct gcoll_cu_func *gcoll_cu_function;   /* CUfunction */
typedef struct gcoll_cu_strm *gcoll_cu_stream;     /* CUstream */
typedef struct gcoll_cu_evt *gcoll_cu_event;       /* CUevent */
typedef struct {
  char reserved[64];
} gcoll_cu_ipc_mem_handle;                         /* CUipcMemHandle, passed by value */

#define GCOLL_CU_SUCCESS 0
#define GCOLL_CU_ERROR_STUB_LIBRARY 34
#define GCOLL_CU_ERROR_NO_DEVICE 100
#define GCOLL_CU_ERROR_NO_BINARY_FOR_GPU 209
#define GCOLL_CU_ERROR_NOT_READY 600
#define GCOLL_CU_MEMHOSTALLOC_PORTABLE 0x01
#define GCOLL_CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define GCOLL_CU_STREAM_NON_BLOCKING 0x1
#define GCOLL_CU_EVENT_DISABLE_TIMING 0x2
#define GCOLL_CU_DEVICE_ATTRIBUTE_CC_MAJOR 75
#define GCOLL_CU_DEVICE_ATTRIBUTE_CC_MINOR 76
#define GCOLL_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING 41
#define GCOLL_CU_ERROR_INVALID_VALUE 1
#define GCOLL_CU_ERROR_INVALID_CONTEXT 201
#define GCOLL_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define GCOLL_CU_MEMHOSTREGISTER_PORTABLE 0x01
#define GCOLL_CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define GCOLL_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define GCOLL_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define GCOLL_CU_MEMORYTYPE_HOST 1
#define GCOLL_CU_MEMORYTYPE_DEVICE 2
#define GCOLL_CU_MEMORYTYPE_UNIFIED 4
#define GCOLL_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
/* CUstreamCaptureStatus */
#define GCOLL_CU_STREAM_CAPTURE_STATUS_NONE 0
#define GCOLL_CU_STREAM_CAPTURE_STATUS_ACTIVE 1
#define GCOLL_CU_STREAM_CAPTURE_STATUS_INVALIDATED 2
/* CUstreamCaptureMode */
#define GCOLL_CU_STREAM_CAPTURE_MODE_GLOBAL 0
#define GCOLL_CU_STREAM_CAPTURE_MODE_RELAXED 2

struct gcoll_cuda_api {
  gcoll_cu_result (*init)(unsigned flags);
  gcoll_cu_result (*driver_get_version)(int *version);
  gcoll_cu_result (*device_get_count)(int *count);
  gcoll_cu_result (*device_get)(gcoll_cu_device *dev, int ordinal);
  gcoll_cu_result (*device_get_attribute)(int *value, int attrib, gcoll_cu_device dev);
  gcoll_cu_result (*device_get_name)(char *name, int len, gcoll_cu_device dev);
  gcoll_cu_result (*device_get_pci_bus_id)(char *busid, int len, gcoll_cu_device dev);
  gcoll_cu_result (*primary_ctx_retain)(gcoll_cu_context *ctx, gcoll_cu_device dev);
  gcoll_cu_result (*primary_ctx_release)(gcoll_cu_device dev);
  gcoll_cu_result (*ctx_set_current)(gcoll_cu_context ctx);
  gcoll_cu_result (*ctx_get_current)(gcoll_cu_context *ctx);
  gcoll_cu_result (*ctx_get_device)(gcoll_cu_device *dev);
  gcoll_cu_result (*pointer_get_attribute)(void *data, int attribute, gcoll_cu_deviceptr ptr);
  /* Several attributes in one call; memory the driver does not know reads
   * as type 0 and succeeds, where the single form fails. */
  gcoll_cu_result (*pointer_get_attributes)(unsigned count, int *attributes, void **data,
                                            gcoll_cu_deviceptr ptr);
  gcoll_cu_result (*mem_host_register)(void *ptr, size_t bytes, unsigned flags);
  gcoll_cu_result (*mem_host_unregister)(void *ptr);
  gcoll_cu_result (*module_load_data)(gcoll_cu_module *mod, const void *image);
  gcoll_cu_result (*module_unload)(gcoll_cu_module mod);
  gcoll_cu_result (*module_get_function)(gcoll_cu_function *fn, gcoll_cu_module mod,
                                         const char *name);
  gcoll_cu_result (*launch_kernel)(gcoll_cu_function fn, unsigned gx, unsigned gy,
                                   unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                   unsigned shared_bytes, gcoll_cu_stream stream,
                                   void **params, void **extra);
  gcoll_cu_result (*stream_create)(gcoll_cu_stream *stream, unsigned flags);
  gcoll_cu_result (*stream_destroy)(gcoll_cu_stream stream);
  gcoll_cu_result (*stream_query)(gcoll_cu_stream stream);
  gcoll_cu_result (*stream_synchronize)(gcoll_cu_stream stream);
  gcoll_cu_result (*stream_wait_event)(gcoll_cu_stream stream, gcoll_cu_event event,
                                       unsigned flags);
  gcoll_cu_result (*stream_is_capturing)(gcoll_cu_stream stream, int *status);
  gcoll_cu_result (*thread_exchange_stream_capture_mode)(int *mode);
  gcoll_cu_result (*event_create)(gcoll_cu_event *event, unsigned flags);
  gcoll_cu_result (*event_record)(gcoll_cu_event event, gcoll_cu_stream stream);
  gcoll_cu_result (*event_destroy)(gcoll_cu_event event);
  gcoll_cu_result (*mem_alloc)(gcoll_cu_deviceptr *ptr, size_t bytes);
  gcoll_cu_result (*mem_free)(gcoll_cu_deviceptr ptr);
  gcoll_cu_result (*mem_host_alloc)(void **ptr, size_t bytes, unsigned flags);
  gcoll_cu_result (*mem_free_host)(void *ptr);
  gcoll_cu_result (*mem_host_get_device_pointer)(gcoll_cu_deviceptr *dptr, void *host,
                                                 unsigned flags);
  gcoll_cu_result (*memcpy_htod)(gcoll_cu_deviceptr dst, const void *src, size_t bytes);
  gcoll_cu_result (*memcpy_dtoh)(void *dst, gcoll_cu_deviceptr src, size_t bytes);
  gcoll_cu_result (*memset_d8)(gcoll_cu_deviceptr dst, unsigned char value, size_t bytes);
  gcoll_cu_result (*memcpy_dtod_async)(gcoll_cu_deviceptr dst, gcoll_cu_deviceptr src,
                                       size_t bytes, gcoll_cu_stream stream);
  gcoll_cu_result (*ipc_get_mem_handle)(gcoll_cu_ipc_mem_handle *handle, gcoll_cu_deviceptr ptr);
  gcoll_cu_result (*ipc_open_mem_handle)(gcoll_cu_deviceptr *ptr, gcoll_cu_ipc_mem_handle handle,
                                         unsigned flags);
  gcoll_cu_result (*ipc_close_mem_handle)(gcoll_cu_deviceptr ptr);
  gcoll_cu_result (*get_error_name)(gcoll_cu_result r, const char **name);
  gcoll_cu_result (*get_error_string)(gcoll_cu_result r, const char **text);
};

/* The driver's entry points, loaded once per process (thread-safe). NULL
 * when the library cannot be opened or lacks an entry point; err says
 * which. Does not call cuInit. */
const struct gcoll_cuda_api *gcoll_cuda_api_get(char *err, size_t errlen);

enum gcoll_cuda_probe_result {
  GCOLL_CUDA_AVAILABLE = 0,   /* driver loaded, cuInit ok, >= 1 GPU */
  GCOLL_CUDA_NO_DRIVER,       /* libcuda.so.1 missing or incomplete */
  GCOLL_CUDA_NO_GPU           /* driver present, but no usable device */
};

/* Loads the driver, calls cuInit(0) and counts devices. *ndev (may be NULL)
 * gets the count (0 unless AVAILABLE); msg gets one line: why CUDA is not
 * usable ("no CUDA driver: ...", "no GPU: cuInit: CUDA_ERROR_NO_DEVICE ..."),
 * or what was found ("2 GPUs, driver 13.0"). Never fails otherwise. */
enum gcoll_cuda_probe_result gcoll_cuda_probe(int *ndev, char *msg, size_t msglen);

/* Retains GPU `ordinal`'s primary context and makes it current on the
 * calling thread; on success the caller owns one reference
 * (primary_ctx_release(*dev)). -1 with one line in err, holding nothing. */
int gcoll_cuda_use_device(const struct gcoll_cuda_api *cu, int ordinal, gcoll_cu_device *dev,
                          gcoll_cu_context *ctx, char *err, size_t errlen);

/* "NAME (description)" of a driver result, for error lines; valid until the
 * next call on the same thread. */
const char *gcoll_cuda_result_text(const struct gcoll_cuda_api *api, gcoll_cu_result r);

#ifdef __cplusplus
}
#endif
#endif
