/* A stand-in for the CUDA driver, built as libcuda.so.1 by test_nccl_abi.sh
 * so that the shim's device-memory probe (src/nccl/nccl_cuda_probe.c) runs
 * on a machine without one. It knows two host addresses, given in the
 * environment, and reports them as device memory and as managed memory;
 * every other pointer is unknown to it, as plain host memory is to the real
 * driver. FAKE_CUDA_INIT_FAILS makes cuInit fail like a driver without GPU.
 * Only the two entry points and values the probe uses (cuda.h's). */
#include <stdint.h>
#include <stdlib.h>

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NO_DEVICE 100
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_MEMORYTYPE_DEVICE 2

int cuInit(unsigned int flags);
int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr);

int cuInit(unsigned int flags) {
  (void)flags;
  return getenv("FAKE_CUDA_INIT_FAILS") ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

static int is(const char *var, unsigned long long ptr) {
  const char *s = getenv(var);
  return s != NULL && strtoull(s, NULL, 16) == ptr;
}

int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) {
  int device = is("FAKE_CUDA_DEVICE_PTR", ptr), managed = is("FAKE_CUDA_MANAGED_PTR", ptr);
  if (!device && !managed) return CUDA_ERROR_INVALID_VALUE;
  if (attribute == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
  else if (attribute == CU_POINTER_ATTRIBUTE_IS_MANAGED) *(unsigned int *)data = (unsigned)managed;
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
