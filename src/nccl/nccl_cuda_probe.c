/* What the shim asks of CUDA, without linking it: is a buffer device memory
 * (which this build cannot touch), and which device is current. libcuda is
 * opened once, lazily (common/driver_libs.h), so the library loads and runs on machines without a
 * driver; any failure on the way means "host memory", because then no device
 * memory can exist in this process. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "common/driver_libs.h"
#include "nccl/nccl_shim.h"

/* The few driver API values used (cuda.h, stable since CUDA 4). */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_MEMORYTYPE_DEVICE 2

typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_pointer_get_attribute_fn)(void *data, int attribute, unsigned long long ptr);

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static cu_pointer_get_attribute_fn pointer_get_attribute;

/* The program's driver (libcuda.so.1), not $GCOLL_CUDA_DRIVER: the
 * question is what the program's own CUDA made of its buffer. */
static void probe_open(void) {
  cu_init_fn init = NULL;
  cu_pointer_get_attribute_fn get = NULL;
  if (gcoll_driver_lib_fn(GCOLL_LIB_CUDA, "cuInit", &init) != 0 ||
      gcoll_driver_lib_fn(GCOLL_LIB_CUDA, "cuPointerGetAttribute", &get) != 0)
    return;
  /* A stub library or a machine without a GPU fails cuInit. */
  if (init(0) != 0) return;
  pointer_get_attribute = get;
}

int nccl_cuda_is_device_memory(const void *ptr) {
  if (ptr == NULL) return 0;
  pthread_once(&probe_once, probe_open);
  if (pointer_get_attribute == NULL) return 0;
  unsigned int type = 0, managed = 0;
  /* Plain host memory is unknown to the driver: the call fails. */
  if (pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)ptr) != 0)
    return 0;
  if (type != CU_MEMORYTYPE_DEVICE) return 0;
  /* Managed memory reads as device memory but the CPU may touch it. */
  if (pointer_get_attribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (uintptr_t)ptr) == 0 &&
      managed)
    return 0;
  return 1;
}

int nccl_cuda_current_device(void) {
  /* Only a program that uses the runtime itself has a current device; the
   * shim does not load libcudart for it. */
  typedef int (*cuda_get_device_fn)(int *device);
  cuda_get_device_fn get_device = (cuda_get_device_fn)dlsym(RTLD_DEFAULT, "cudaGetDevice");
  int device = 0;
  if (get_device == NULL || get_device(&device) != 0) return 0;
  return device;
}
