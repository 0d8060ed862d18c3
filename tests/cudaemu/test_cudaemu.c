/* The CUDA driver stand-in (libcudaemu.so) by itself, loaded with dlopen
 * as gcoll's loader does: what it exports, devices and attributes,
 * contexts, memory types and strict copies, stream order and the legacy
 * stream, events, kernels (gcoll_cuda_coll at full block width, a blocked
 * one, a fault), stream capture and graph replay with the capture rules,
 * and IPC between two forked processes that must really share pages. Each check prints its line on failure; exit 0 when all pass.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"
#include "kernels/cuda_fatbin.h"
#include "kernels/cuda_work.h"
#include "kernels/fifo.h"

#ifndef CUDAEMU_LIB
#define CUDAEMU_LIB "libcudaemu.so"
#endif

static int failures;
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: FAIL: %s\n", __FILE__, __LINE__, #cond);  \
      failures++;                                                        \
    }                                                                    \
  } while (0)
#define CHECK_RC(call, want)                                                          \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != (want)) {                                                               \
      fprintf(stderr, "%s:%d: FAIL: %s gave %d, expected %d\n", __FILE__, __LINE__,  \
              #call, (int)r_, (int)(want));                                           \
      failures++;                                                                     \
    }                                                                                 \
  } while (0)
#define OK(call) CHECK_RC(call, CUDA_SUCCESS)

/* The entry points, resolved by the ABI names cuda.h maps to (cuMemAlloc
 * is cuMemAlloc_v2, ...), with cuda.h's prototypes. */
#define API(X)                                                                            \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute) \
  X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)             \
  X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuDeviceCanAccessPeer)         \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel)           \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamQuery) X(cuStreamSynchronize)             \
  X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventRecord) X(cuEventQuery)                   \
  X(cuEventSynchronize) X(cuEventDestroy) X(cuMemAlloc) X(cuMemFree) X(cuMemHostAlloc)     \
  X(cuMemFreeHost) X(cuMemHostGetDevicePointer) X(cuMemHostRegister) X(cuMemHostUnregister) \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async) X(cuPointerGetAttribute)           \
  X(cuPointerGetAttributes)                                                                 \
  X(cuMemGetAddressRange) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle) \
  X(cuGetErrorName) X(cuGetErrorString) X(cuStreamBeginCapture) X(cuStreamEndCapture)     \
  X(cuStreamIsCapturing) X(cuThreadExchangeStreamCaptureMode) X(cuGraphInstantiate)         \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)

#define DECLARE(name) static __typeof__(&name) p_##name;
API(DECLARE)
#undef DECLARE
#define XSTR(x) #x
#define ABI_NAME(x) XSTR(x)

static void load(void) {
  const char *path = getenv("GCOLL_CUDA_DRIVER");
  if (path == NULL || path[0] == '\0') path = CUDAEMU_LIB;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "FAIL: dlopen %s: %s\n", path, dlerror());
    exit(1);
  }
#define RESOLVE(name)                                                         \
  {                                                                           \
    void *sym = dlsym(h, ABI_NAME(name));                                     \
    if (sym == NULL) {                                                        \
      fprintf(stderr, "FAIL: %s does not export %s\n", path, ABI_NAME(name)); \
      exit(1);                                                                \
    }                                                                         \
    memcpy(&p_##name, &sym, sizeof(sym));                                     \
  }
  API(RESOLVE)
#undef RESOLVE
  /* Not implemented means not exported; internals stay hidden. */
  static const char *const absent[] = {"cuMemAllocManaged", "cuCtxCreate_v2", "cuMemcpy",
                                       "cuMemAllocHost_v2", "cuIpcOpenEventHandle",
                                       "cudaemu_device_accessible", "__cudaRegisterFatBinary",
                                       "cudaemu_kernel_table", "gcoll_cuda_algo_supported",
                                       /* older ABI names, other prototypes */
                                       "cuStreamBeginCapture", "cuGraphInstantiate",
                                       "cuGraphInstantiate_v2"};
  for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
    if (dlsym(h, absent[i]) != NULL) {
      fprintf(stderr, "FAIL: %s exports %s\n", path, absent[i]);
      failures++;
    }
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- IPC between two processes (before this process initialises) ---------- */

static void die_unless(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL (child %d): %s\n", (int)getpid(), what);
    _exit(1);
  }
}
#define CHILD_OK(call) die_unless((call) == CUDA_SUCCESS, #call)

static void child_context(void) {
  CUcontext ctx;
  CHILD_OK(p_cuInit(0));
  CHILD_OK(p_cuDevicePrimaryCtxRetain(&ctx, 0));
  CHILD_OK(p_cuCtxSetCurrent(ctx));
}

#define IPC_BYTES (3 * 4096 + 100)

/* Exports an allocation of 0x11s, waits for the importer to write 0x22s
 * into it, checks them in its own mapping, frees it, says so. */
static void ipc_exporter(int to_importer, int from_importer) {
  child_context();
  CUdeviceptr d;
  CHILD_OK(p_cuMemAlloc(&d, IPC_BYTES));
  CHILD_OK(p_cuMemsetD8(d, 0x11, IPC_BYTES));
  CUipcMemHandle h;
  CHILD_OK(p_cuIpcGetMemHandle(&h, d + 100)); /* inside: the handle is the allocation's */
  CUdeviceptr self;
  die_unless(p_cuIpcOpenMemHandle(&self, h, 0) == CUDA_ERROR_INVALID_CONTEXT,
             "a process must not open its own handle");
  die_unless(write(to_importer, &h, sizeof(h)) == (ssize_t)sizeof(h), "write handle");
  char c;
  die_unless(read(from_importer, &c, 1) == 1 && c == 'w', "importer wrote");
  unsigned char *buf = malloc(IPC_BYTES);
  CHILD_OK(p_cuMemcpyDtoH(buf, d, IPC_BYTES));
  for (size_t i = 0; i < IPC_BYTES; i++) die_unless(buf[i] == 0x22, "importer's bytes seen");
  free(buf);
  CHILD_OK(p_cuMemFree(d));
  die_unless(write(to_importer, "f", 1) == 1, "write freed");
  die_unless(read(from_importer, &c, 1) == 1 && c == 'd', "importer done");
  _exit(0);
}

static void ipc_importer(int from_exporter, int to_exporter) {
  child_context();
  CUipcMemHandle h, bad;
  die_unless(read(from_exporter, &h, sizeof(h)) == (ssize_t)sizeof(h), "read handle");
  memset(&bad, 0x5a, sizeof(bad));
  CUdeviceptr d, again, base;
  die_unless(p_cuIpcOpenMemHandle(&d, bad, 0) == CUDA_ERROR_INVALID_HANDLE, "bad handle");
  CHILD_OK(p_cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  /* In this process's device range: device memory here, whole allocation. */
  unsigned type = 0;
  size_t size = 0;
  CHILD_OK(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
  die_unless(type == CU_MEMORYTYPE_DEVICE, "IPC mapping is device memory");
  CHILD_OK(p_cuMemGetAddressRange(&base, &size, d + 5));
  die_unless(base == d && size == IPC_BYTES, "IPC mapping's range");
  die_unless(p_cuMemFree(d) == CUDA_ERROR_INVALID_VALUE, "cuMemFree refuses an IPC mapping");
  CHILD_OK(p_cuIpcOpenMemHandle(&again, h, 0));
  die_unless(again == d, "the same handle opens the same mapping");
  unsigned char *buf = malloc(IPC_BYTES);
  CHILD_OK(p_cuMemcpyDtoH(buf, d, IPC_BYTES));
  for (size_t i = 0; i < IPC_BYTES; i++) die_unless(buf[i] == 0x11, "exporter's bytes seen");
  memset(buf, 0x22, IPC_BYTES);
  CHILD_OK(p_cuMemcpyHtoD(d, buf, IPC_BYTES));
  free(buf);
  CHILD_OK(p_cuIpcCloseMemHandle(d));
  CHILD_OK(p_cuIpcCloseMemHandle(d)); /* opened twice, closed twice */
  die_unless(p_cuIpcCloseMemHandle(d) == CUDA_ERROR_INVALID_VALUE, "third close");
  die_unless(write(to_exporter, "w", 1) == 1, "write wrote");
  char c;
  die_unless(read(from_exporter, &c, 1) == 1 && c == 'f', "exporter freed");
  die_unless(p_cuIpcOpenMemHandle(&d, h, 0) == CUDA_ERROR_INVALID_HANDLE,
             "a freed allocation's handle");
  die_unless(write(to_exporter, "d", 1) == 1, "write done");
  _exit(0);
}

static void test_ipc(void) {
  int a2b[2], b2a[2];
  if (pipe(a2b) != 0 || pipe(b2a) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t a = fork();
  if (a == 0) ipc_exporter(a2b[1], b2a[0]);
  pid_t b = fork();
  if (b == 0) ipc_importer(a2b[0], b2a[1]);
  close(a2b[0]);
  close(a2b[1]);
  close(b2a[0]);
  close(b2a[1]);
  int sa = -1, sb = -1;
  waitpid(a, &sa, 0);
  waitpid(b, &sb, 0);
  CHECK(WIFEXITED(sa) && WEXITSTATUS(sa) == 0);
  CHECK(WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
}

/* ---- devices and contexts ---------------------------------------------------- */

static void test_devices(void) {
  int n = -1, v = 0;
  char name[64];
  CHECK_RC(p_cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  OK(p_cuDriverGetVersion(&v)); /* allowed before cuInit */
  CHECK(v >= 12000);
  CHECK_RC(p_cuInit(1), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuInit(0));
  OK(p_cuDeviceGetCount(&n));
  CHECK(n == 2); /* GCOLL_CUDAEMU_DEVICES=2, set by main */
  CUdevice d;
  CHECK_RC(p_cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
  OK(p_cuDeviceGet(&d, 1));
  CHECK(d == 1);
  OK(p_cuDeviceGetName(name, sizeof(name), 0));
  CHECK(strcmp(name, "gcoll emulated GPU") == 0);
  OK(p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  CHECK(v == 9);
  OK(p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
  CHECK(v == 0);
  OK(p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1));
  CHECK(v == 1);
  /* Attributes not modelled say so; numbers that are no attribute are invalid. */
  CHECK_RC(p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_PITCH, 0),
           CUDA_ERROR_NOT_SUPPORTED);
  CHECK_RC(p_cuDeviceGetAttribute(&v, (CUdevice_attribute)100000, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5),
           CUDA_ERROR_INVALID_DEVICE);
  OK(p_cuDeviceCanAccessPeer(&v, 0, 1));
  CHECK(v == 1);
  OK(p_cuDeviceCanAccessPeer(&v, 1, 1));
  CHECK(v == 0);
  const char *s = NULL;
  OK(p_cuGetErrorName(CUDA_ERROR_NOT_READY, &s));
  CHECK(s != NULL && strcmp(s, "CUDA_ERROR_NOT_READY") == 0);
  CHECK_RC(p_cuGetErrorString((CUresult)123456, &s), CUDA_ERROR_INVALID_VALUE);
}

/* ---- memory ----------------------------------------------------------------- */

static void test_memory(void) {
  CUdeviceptr d, d2, base;
  size_t size;
  /* The driver API makes no context implicitly. */
  CHECK_RC(p_cuMemAlloc(&d, 64), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext ctx, cur;
  CUdevice dev = -1;
  OK(p_cuDevicePrimaryCtxRetain(&ctx, 0));
  OK(p_cuCtxSetCurrent(ctx));
  OK(p_cuCtxGetCurrent(&cur));
  CHECK(cur == ctx);
  OK(p_cuCtxGetDevice(&dev));
  CHECK(dev == 0);
  CHECK_RC(p_cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuMemAlloc(&d, 1000));
  OK(p_cuMemAlloc(&d2, 1000));
  void *pinned = NULL, *dev_view = NULL;
  CUdeviceptr pinned_dev;
  OK(p_cuMemHostAlloc(&pinned, 1000, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  OK(p_cuMemHostGetDevicePointer(&pinned_dev, pinned, 0));
  CHECK(pinned_dev == (CUdeviceptr)(uintptr_t)pinned); /* UVA */
  unsigned char *plain = malloc(4096);
  CHECK_RC(p_cuMemHostGetDevicePointer(&pinned_dev, plain, 0), CUDA_ERROR_INVALID_VALUE);

  /* Pointer attributes. */
  unsigned type = 0;
  int ordinal = -1;
  OK(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 10));
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  OK(p_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
  CHECK(ordinal == 0);
  OK(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pinned_dev));
  CHECK(type == CU_MEMORYTYPE_HOST);
  OK(p_cuPointerGetAttribute(&dev_view, CU_POINTER_ATTRIBUTE_HOST_POINTER, pinned_dev));
  CHECK(dev_view == pinned);
  CHECK_RC(p_cuPointerGetAttribute(&dev_view, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
           CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   (CUdeviceptr)(uintptr_t)plain),
           CUDA_ERROR_INVALID_VALUE); /* not the driver's memory */
  CHECK_RC(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 1000),
           CUDA_ERROR_INVALID_VALUE); /* one past the end */
  CHECK_RC(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_P2P_TOKENS, d),
           CUDA_ERROR_NOT_SUPPORTED);
  CHECK_RC(p_cuPointerGetAttribute(&type, (CUpointer_attribute)1000, d),
           CUDA_ERROR_INVALID_VALUE);
  /* The plural form: one call for both, and unknown memory is type 0. */
  CUpointer_attribute both[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void *answers[2] = {&type, &ordinal};
  type = 7, ordinal = 7;
  OK(p_cuPointerGetAttributes(2, both, answers, d + 999));
  CHECK(type == CU_MEMORYTYPE_DEVICE && ordinal == 0);
  OK(p_cuPointerGetAttributes(2, both, answers, (CUdeviceptr)(uintptr_t)plain));
  CHECK(type == 0 && ordinal == -2);
  OK(p_cuPointerGetAttributes(2, both, answers, d + 1000));
  CHECK(type == 0 && ordinal == -2);
  OK(p_cuPointerGetAttributes(1, both, answers, pinned_dev));
  CHECK(type == CU_MEMORYTYPE_HOST);
  CUpointer_attribute host_view = CU_POINTER_ATTRIBUTE_HOST_POINTER;
  CHECK_RC(p_cuPointerGetAttributes(1, &host_view, (void *[]){&dev_view}, d),
           CUDA_ERROR_INVALID_VALUE); /* known memory's refusals stay */
  OK(p_cuMemGetAddressRange(&base, &size, d + 999));
  CHECK(base == d && size == 1000);
  CHECK_RC(p_cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)plain),
           CUDA_ERROR_NOT_FOUND);

  /* Strict copies: each side must have the memory type the direction says. */
  for (int i = 0; i < 1000; i++) plain[i] = (unsigned char)i;
  OK(p_cuMemcpyHtoD(d, plain, 1000));
  CHECK_RC(p_cuMemcpyHtoD((CUdeviceptr)(uintptr_t)plain, plain + 2000, 100),
           CUDA_ERROR_INVALID_VALUE); /* host memory as the device side */
  CHECK_RC(p_cuMemcpyHtoD(d2, (const void *)(uintptr_t)d, 100),
           CUDA_ERROR_INVALID_VALUE); /* device memory as the host side */
  CHECK_RC(p_cuMemcpyDtoH((void *)(uintptr_t)d2, d, 100), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuMemcpyDtoH(plain, (CUdeviceptr)(uintptr_t)(plain + 2000), 100),
           CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuMemcpyHtoD(d, plain, 1001), CUDA_ERROR_INVALID_VALUE); /* past the end */
  CHECK_RC(p_cuMemcpyDtoD(d2 + 500, d, 501), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuMemsetD8((CUdeviceptr)(uintptr_t)plain, 0, 10), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuMemcpyHtoD(0, plain, 10), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuMemcpyHtoD(d, plain, 0)); /* nothing to copy */
  OK(p_cuMemcpyDtoD(d2, d, 1000));
  OK(p_cuMemsetD8(d2, 0x77, 10));
  OK(p_cuMemcpyDtoD(pinned_dev, d2, 1000)); /* mapped pinned memory is a device address */
  CHECK(((unsigned char *)pinned)[5] == 0x77 && ((unsigned char *)pinned)[10] == 10 &&
        ((unsigned char *)pinned)[999] == (unsigned char)999);
  memset(plain, 0, 1000);
  OK(p_cuMemcpyDtoH(plain, d2, 1000));
  CHECK(plain[9] == 0x77 && plain[10] == 10);

  /* Registered host memory: host type, device-accessible, once only. */
  OK(p_cuMemHostRegister(plain, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CHECK_RC(p_cuMemHostRegister(plain + 100, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK_RC(p_cuMemHostRegister(pinned, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK_RC(p_cuMemHostRegister((void *)(uintptr_t)d, 10, 0), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                             (CUdeviceptr)(uintptr_t)(plain + 4095)));
  CHECK(type == CU_MEMORYTYPE_HOST);
  OK(p_cuMemsetD8((CUdeviceptr)(uintptr_t)plain, 0x33, 4096));
  CHECK(plain[4095] == 0x33);
  CHECK_RC(p_cuMemHostUnregister(plain + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  OK(p_cuMemHostUnregister(plain));
  CHECK_RC(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   (CUdeviceptr)(uintptr_t)plain),
           CUDA_ERROR_INVALID_VALUE);

  CHECK_RC(p_cuMemFree(d + 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuMemFree((CUdeviceptr)(uintptr_t)pinned), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuMemFreeHost((void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuMemFree(d));
  CHECK_RC(p_cuMemFree(d), CUDA_ERROR_INVALID_VALUE); /* twice */
  CHECK_RC(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d),
           CUDA_ERROR_INVALID_VALUE);
  OK(p_cuMemFree(d2));
  OK(p_cuMemFreeHost(pinned));
  free(plain);
}

/* ---- kernels, streams, events ------------------------------------------------ */

static CUmodule mod;
static CUfunction coll_fn;

/* Device memory holding a copy of host bytes. */
static CUdeviceptr dev_copy(const void *src, size_t n) {
  CUdeviceptr d = 0;
  OK(p_cuMemAlloc(&d, n));
  OK(p_cuMemcpyHtoD(d, src, n));
  return d;
}

/* A 2-rank ring allreduce of 4096 floats on `s` whose peer never runs: the
 * kernel waits on its FIFO until its deadline or the abort word. The
 * FIFOs, channel table, scratch and status live in device or mapped
 * memory the caller frees with free_blocked. */
struct blocked {
  CUdeviceptr fifo[2], channels, ranks, scratch, buf;
  void *mapped; /* status[1], abort word, local abort */
  struct gcoll_cuda_work w;
};

static void launch_blocked(struct blocked *b, CUstream s, uint64_t timeout_ns, int rank_for_buf) {
  const size_t slot = 4096, fbytes = gcoll_fifo_bytes(slot);
  void *staging = NULL;
  CHECK(posix_memalign(&staging, GCOLL_FIFO_ALIGN, fbytes) == 0);
  CHECK(gcoll_fifo_init(staging, slot) != NULL);
  for (int i = 0; i < 2; i++) b->fifo[i] = dev_copy(staging, fbytes);
  free(staging);
  int32_t ranks[2] = {0, 1};
  b->ranks = dev_copy(ranks, sizeof(ranks));
  OK(p_cuMemAlloc(&b->scratch, GCOLL_CUDA_SCRATCH * slot));
  OK(p_cuMemAlloc(&b->buf, 4096 * sizeof(float)));
  OK(p_cuMemsetD8(b->buf, 0, 4096 * sizeof(float)));
  struct gcoll_cuda_channel ch;
  memset(&ch, 0, sizeof(ch));
  ch.ring_recv_prev = b->fifo[1];
  ch.ring_send_next = b->fifo[0];
  ch.ring_ranks = b->ranks;
  ch.tree_parent = -1;
  ch.scratch = b->scratch;
  ch.scratch_bytes = slot;
  b->channels = dev_copy(&ch, sizeof(ch));
  OK(p_cuMemHostAlloc(&b->mapped, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  memset(b->mapped, 0, 4096);
  CUdeviceptr m;
  OK(p_cuMemHostGetDevicePointer(&m, b->mapped, 0));
  memset(&b->w, 0, sizeof(b->w));
  b->w.channels = b->channels;
  b->w.status = m;
  b->w.abort_word = m + 1024;
  b->w.local_abort = m + 1028;
  b->w.sendbuf = b->w.recvbuf = b->buf;
  if (rank_for_buf < 0) b->w.recvbuf = (uint64_t)(uintptr_t)&b->w; /* not device memory */
  b->w.count = b->w.stride = 4096;
  b->w.timeout_ns = timeout_ns;
  b->w.coll = GCOLL_COLL_ALLREDUCE;
  b->w.algo = GCOLL_ALGO_RING;
  b->w.proto = GCOLL_PROTO_SIMPLE;
  b->w.dtype = gcollFloat32;
  b->w.op = gcollSum;
  b->w.nranks = 2;
  b->w.nchannels = 1;
  void *params[] = {&b->w};
  OK(p_cuLaunchKernel(coll_fn, 1, 1, 1, GCOLL_CUDA_THREADS, 1, 1, 0, s, params, NULL));
}

static const struct gcoll_cuda_status *blocked_status(const struct blocked *b) {
  return (const struct gcoll_cuda_status *)b->mapped;
}
static void blocked_abort(struct blocked *b) {
  __atomic_store_n((int32_t *)((char *)b->mapped + 1024), (int32_t)gcollRemoteError,
                   __ATOMIC_RELEASE);
}
static void free_blocked(struct blocked *b) {
  p_cuMemFree(b->fifo[0]);
  p_cuMemFree(b->fifo[1]);
  p_cuMemFree(b->ranks);
  p_cuMemFree(b->scratch);
  p_cuMemFree(b->buf);
  p_cuMemFree(b->channels);
  p_cuMemFreeHost(b->mapped);
}

static void test_module(void) {
  static const unsigned char junk[64] = {1, 2, 3};
  CUmodule m;
  CHECK_RC(p_cuModuleLoadData(&m, junk), CUDA_ERROR_INVALID_IMAGE);
  OK(p_cuModuleLoadData(&mod, gcoll_cuda_fatbin));
  CHECK_RC(p_cuModuleGetFunction(&coll_fn, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  OK(p_cuModuleGetFunction(&coll_fn, mod, GCOLL_CUDA_KERNEL_NAME));
  struct gcoll_cuda_work w;
  memset(&w, 0, sizeof(w));
  void *params[] = {&w}, *extra[] = {NULL};
  CHECK_RC(p_cuLaunchKernel(coll_fn, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL),
           CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuLaunchKernel(coll_fn, 1, 2, 1, 32, 1, 1, 0, NULL, params, NULL),
           CUDA_ERROR_NOT_SUPPORTED);
  CHECK_RC(p_cuLaunchKernel(coll_fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra),
           CUDA_ERROR_NOT_SUPPORTED);
  CHECK_RC(p_cuLaunchKernel(coll_fn, 1, 1, 1, 32, 1, 1, 0, (CUstream)(uintptr_t)0x1234, params,
                            NULL),
           CUDA_ERROR_INVALID_HANDLE);
}

/* A 1-rank allreduce (avg) at the executor's full block width, on the
 * NULL stream: the result is the input. */
static void test_full_width_kernel(void) {
  enum { N = 100003 };
  float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) in[i] = (float)(i % 97);
  CUdeviceptr dsend = dev_copy(in, N * sizeof(float)), drecv;
  OK(p_cuMemAlloc(&drecv, N * sizeof(float)));
  int32_t rank0 = 0;
  CUdeviceptr dranks = dev_copy(&rank0, sizeof(rank0)), scratch;
  OK(p_cuMemAlloc(&scratch, GCOLL_CUDA_SCRATCH * 4096));
  struct gcoll_cuda_channel ch[2];
  memset(ch, 0, sizeof(ch));
  for (int c = 0; c < 2; c++) {
    ch[c].ring_ranks = dranks;
    ch[c].tree_parent = -1;
    ch[c].scratch = scratch;
    ch[c].scratch_bytes = 2048;
  }
  CUdeviceptr dch = dev_copy(ch, sizeof(ch));
  void *mapped;
  CUdeviceptr m;
  OK(p_cuMemHostAlloc(&mapped, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  memset(mapped, 0, 4096);
  OK(p_cuMemHostGetDevicePointer(&m, mapped, 0));
  struct gcoll_cuda_work w;
  memset(&w, 0, sizeof(w));
  w.channels = dch;
  w.status = m;
  w.abort_word = m + 1024;
  w.local_abort = m + 1028;
  w.sendbuf = dsend;
  w.recvbuf = drecv;
  w.count = w.stride = N;
  w.timeout_ns = 20000000000ull;
  w.coll = GCOLL_COLL_ALLREDUCE;
  w.algo = GCOLL_ALGO_RING;
  w.dtype = gcollFloat32;
  w.op = gcollAvg;
  w.nranks = 1;
  w.nchannels = 2;
  void *params[] = {&w};
  OK(p_cuLaunchKernel(coll_fn, 2, 1, 1, GCOLL_CUDA_THREADS, 1, 1, 0, NULL, params, NULL));
  memset(&w, 0xff, sizeof(w)); /* the launch copied its arguments */
  OK(p_cuStreamSynchronize(NULL));
  const struct gcoll_cuda_status *st = mapped;
  CHECK(st[0].done == 1 && st[0].result == 0 && st[1].done == 1 && st[1].result == 0);
  OK(p_cuMemcpyDtoH(out, drecv, N * sizeof(float)));
  CHECK(memcmp(in, out, N * sizeof(float)) == 0);
  p_cuMemFree(dsend);
  p_cuMemFree(drecv);
  p_cuMemFree(dranks);
  p_cuMemFree(scratch);
  p_cuMemFree(dch);
  p_cuMemFreeHost(mapped);
  free(in);
  free(out);
}

static void test_streams_events(void) {
  CUstream s1, s2, sb;
  CUevent ev, never;
  CHECK_RC(p_cuStreamCreate(&s1, 0x80), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  OK(p_cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  OK(p_cuStreamCreate(&sb, CU_STREAM_DEFAULT)); /* blocking: ordered with the NULL stream */
  OK(p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  OK(p_cuEventCreate(&never, 0));
  CHECK_RC(p_cuEventCreate(&never, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING),
           CUDA_ERROR_NOT_SUPPORTED);
  OK(p_cuEventQuery(never)); /* never recorded: complete */

  /* In-order execution of async work on one stream. */
  enum { N = 1 << 20 };
  unsigned char *a = malloc(N), *r = malloc(N);
  for (int i = 0; i < N; i++) a[i] = (unsigned char)(i * 7);
  CUdeviceptr d, d2;
  OK(p_cuMemAlloc(&d, N));
  OK(p_cuMemAlloc(&d2, N));
  OK(p_cuMemsetD8Async(d, 0xaa, N, s1));
  OK(p_cuMemcpyHtoDAsync(d, a, N, s1));
  OK(p_cuMemcpyDtoDAsync(d2, d, N, s1));
  OK(p_cuMemsetD8Async(d2, 0x01, 1, s1));
  OK(p_cuMemcpyDtoHAsync(r, d2, N, s1));
  OK(p_cuStreamSynchronize(s1));
  CHECK(r[0] == 0x01 && memcmp(r + 1, a + 1, N - 1) == 0);
  CHECK_RC(p_cuMemcpyHtoDAsync(d, a, N + 1, s1), CUDA_ERROR_INVALID_VALUE);

  /* A kernel that waits for a peer: its stream is NOT_READY, an event
   * recorded after it is pending, a stream waiting for the event holds
   * its own work back; the abort word ends it all. */
  struct blocked b;
  launch_blocked(&b, s1, 60000000000ull, 0);
  OK(p_cuEventRecord(ev, s1));
  OK(p_cuStreamWaitEvent(s2, ev, 0));
  OK(p_cuMemsetD8Async(d, 0x5c, N, s2));
  OK(p_cuStreamWaitEvent(s2, never, 0)); /* a no-op */
  usleep(100000);
  CHECK_RC(p_cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
  CHECK_RC(p_cuEventQuery(ev), CUDA_ERROR_NOT_READY);
  CHECK_RC(p_cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
  OK(p_cuMemcpyDtoH(r, d, 16)); /* s2's memset has not run */
  CHECK(r[0] == a[0] && r[15] == a[15]);
  CHECK(blocked_status(&b)->done == 0);
  blocked_abort(&b);
  OK(p_cuEventSynchronize(ev));
  OK(p_cuEventQuery(ev));
  OK(p_cuStreamSynchronize(s2));
  OK(p_cuStreamQuery(s1));
  const struct gcoll_cuda_status *st = blocked_status(&b);
  CHECK(st->done == 1 && st->result == gcollRemoteError &&
        st->reason == GCOLL_CUDA_REASON_ABORTED && st->what == GCOLL_CUDA_FAIL_RECV_DATA);
  OK(p_cuMemcpyDtoH(r, d, 16));
  CHECK(r[0] == 0x5c && r[15] == 0x5c);
  free_blocked(&b);

  /* The legacy NULL stream waits for a blocking stream's earlier work: a
   * synchronous memset after a kernel that ends at its 300 ms deadline. */
  launch_blocked(&b, sb, 300000000ull, 0);
  uint64_t t0 = now_ms();
  OK(p_cuMemsetD8(d, 0, 16));
  uint64_t took = now_ms() - t0;
  CHECK(took >= 250);
  CHECK(blocked_status(&b)->done == 1 && blocked_status(&b)->result == gcollSystemError &&
        blocked_status(&b)->reason == GCOLL_CUDA_REASON_DEADLINE);
  OK(p_cuStreamQuery(sb));
  free_blocked(&b);

  OK(p_cuEventDestroy(ev));
  CHECK_RC(p_cuEventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
  OK(p_cuEventDestroy(never));
  OK(p_cuStreamDestroy(s2));
  CHECK_RC(p_cuStreamQuery(s2), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RC(p_cuMemsetD8Async(d, 0, 1, s2), CUDA_ERROR_INVALID_HANDLE);
  OK(p_cuStreamDestroy(s1));
  OK(p_cuStreamDestroy(sb));
  p_cuMemFree(d);
  p_cuMemFree(d2);
  free(a);
  free(r);
}

/* ---- stream capture and graphs ------------------------------------------------ */

/* A call made from another thread (capture modes are about threads). */
enum other_call { OTHER_EVENT_QUERY, OTHER_END_CAPTURE };
struct other {
  CUcontext ctx;
  enum other_call call;
  CUevent ev;
  CUstream s;
  CUgraph g;
  CUresult r;
};
static void *other_thread(void *arg) {
  struct other *o = arg;
  o->r = p_cuCtxSetCurrent(o->ctx);
  if (o->r == CUDA_SUCCESS)
    o->r = o->call == OTHER_EVENT_QUERY ? p_cuEventQuery(o->ev) : p_cuStreamEndCapture(o->s, &o->g);
  return NULL;
}
static CUresult from_other_thread(enum other_call call, CUevent ev, CUstream s, CUgraph *g) {
  struct other o = {.call = call, .ev = ev, .s = s, .r = CUDA_ERROR_UNKNOWN};
  OK(p_cuCtxGetCurrent(&o.ctx));
  pthread_t t;
  if (pthread_create(&t, NULL, other_thread, &o) != 0) return CUDA_ERROR_UNKNOWN;
  pthread_join(t, NULL);
  if (g != NULL) *g = o.g;
  return o.r;
}

static CUstreamCaptureStatus capture_status(CUstream s) {
  CUstreamCaptureStatus st = (CUstreamCaptureStatus)-1;
  OK(p_cuStreamIsCapturing(s, &st));
  return st;
}

/* Begins a capture on s, records a memset, makes `call` fail with `want`,
 * and checks the capture is then invalidated: later work is refused, the
 * end gives no graph, the stream is usable again and nothing ran. */
#define EXPECT_INVALIDATES(s, mode, call, want, probe)                          \
  do {                                                                          \
    CUgraph g_ = (CUgraph)(uintptr_t)1;                                         \
    unsigned char b_[16];                                                       \
    OK(p_cuStreamBeginCapture(s, mode));                                        \
    OK(p_cuMemsetD8Async(probe, 0xee, 16, s));                                  \
    CHECK_RC(call, want);                                                       \
    CHECK(capture_status(s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);           \
    CHECK_RC(p_cuMemsetD8Async(probe, 0xee, 16, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED); \
    CHECK_RC(p_cuStreamEndCapture(s, &g_), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED); \
    CHECK(g_ == NULL);                                                          \
    CHECK(capture_status(s) == CU_STREAM_CAPTURE_STATUS_NONE);                  \
    OK(p_cuStreamSynchronize(s));                                               \
    OK(p_cuMemcpyDtoH(b_, probe, 16));                                          \
    CHECK(b_[0] != 0xee && b_[15] != 0xee);                                     \
  } while (0)

static void test_graphs(void) {
  enum { N = 4099 };
  const size_t bytes = N * sizeof(float);
  CUstream s, s2, sb;
  CUevent ev;
  CUgraph g = NULL, g2 = NULL;
  CUgraphExec x = NULL, x2 = NULL;
  OK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  OK(p_cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  OK(p_cuStreamCreate(&sb, CU_STREAM_DEFAULT)); /* blocking: the legacy stream waits for it */
  OK(p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));

  /* Where capture can begin and end. */
  CHECK(capture_status(s) == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(capture_status(NULL) == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK_RC(p_cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
           CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK_RC(p_cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_RELAXED),
           CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK_RC(p_cuStreamBeginCapture(s, (CUstreamCaptureMode)7), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuStreamBeginCapture((CUstream)(uintptr_t)0x1234, CU_STREAM_CAPTURE_MODE_GLOBAL),
           CUDA_ERROR_INVALID_HANDLE);
  CHECK_RC(p_cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  CHECK_RC(p_cuStreamIsCapturing(s, NULL), CUDA_ERROR_INVALID_VALUE);

  /* The 1-rank allreduce kernel (avg: a copy) between device buffers,
   * pinned host input and output. */
  float *in, *out, *after;
  OK(p_cuMemHostAlloc((void **)&in, bytes, 0));
  OK(p_cuMemHostAlloc((void **)&out, bytes, 0));
  OK(p_cuMemHostAlloc((void **)&after, bytes, 0));
  CUdeviceptr dsend, drecv, dcopy, probe, scratch, dch, m;
  OK(p_cuMemAlloc(&dsend, bytes));
  OK(p_cuMemAlloc(&drecv, bytes));
  OK(p_cuMemAlloc(&dcopy, bytes));
  OK(p_cuMemAlloc(&probe, 16));
  OK(p_cuMemsetD8(probe, 0, 16));
  OK(p_cuMemsetD8(dsend, 0x11, bytes));
  OK(p_cuMemsetD8(drecv, 0x11, bytes));
  OK(p_cuMemsetD8(dcopy, 0x22, bytes));
  int32_t rank0 = 0;
  CUdeviceptr dranks = dev_copy(&rank0, sizeof(rank0));
  OK(p_cuMemAlloc(&scratch, GCOLL_CUDA_SCRATCH * 4096));
  struct gcoll_cuda_channel ch;
  memset(&ch, 0, sizeof(ch));
  ch.ring_ranks = dranks;
  ch.tree_parent = -1;
  ch.scratch = scratch;
  ch.scratch_bytes = 4096;
  dch = dev_copy(&ch, sizeof(ch));
  void *mapped;
  OK(p_cuMemHostAlloc(&mapped, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  memset(mapped, 0, 4096);
  OK(p_cuMemHostGetDevicePointer(&m, mapped, 0));
  const struct gcoll_cuda_status *kst = mapped;
  struct gcoll_cuda_work w;
  memset(&w, 0, sizeof(w));
  w.channels = dch;
  w.status = m;
  w.abort_word = m + 1024;
  w.local_abort = m + 1028;
  w.sendbuf = dsend;
  w.recvbuf = drecv;
  w.count = w.stride = N;
  w.timeout_ns = 20000000000ull;
  w.coll = GCOLL_COLL_ALLREDUCE;
  w.algo = GCOLL_ALGO_RING;
  w.dtype = gcollFloat32;
  w.op = gcollAvg;
  w.nranks = 1;
  w.nchannels = 1;
  void *params[] = {&w};
  for (int i = 0; i < N; i++) out[i] = -1.0f;

  /* Capture: memset, copy in, kernel, device copy, copy out. */
  OK(p_cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK(capture_status(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK_RC(p_cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  CHECK(capture_status(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(capture_status(s2) == CU_STREAM_CAPTURE_STATUS_NONE);
  OK(p_cuMemsetD8Async(dcopy, 0, bytes, s));
  OK(p_cuMemcpyHtoDAsync(dsend, in, bytes, s));
  OK(p_cuLaunchKernel(coll_fn, 1, 1, 1, GCOLL_CUDA_THREADS, 1, 1, 0, s, params, NULL));
  memset(&w, 0xff, sizeof(w)); /* the capture copied the arguments */
  OK(p_cuMemcpyDtoDAsync(dcopy, drecv, bytes - sizeof(float), s)); /* the last stays 0 */
  OK(p_cuMemcpyDtoHAsync(out, dcopy, bytes, s));
  CHECK_RC(p_cuMemcpyHtoDAsync(dsend, in, bytes + 1, s), CUDA_ERROR_INVALID_VALUE);
  CHECK(capture_status(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  usleep(50000);
  CHECK(out[0] == -1.0f && out[N - 1] == -1.0f); /* nothing ran */
  CHECK(kst->done == 0);
  /* A THREAD_LOCAL capture does not restrict other threads. */
  OK(from_other_thread(OTHER_EVENT_QUERY, ev, s, NULL));
  /* ... and only its own thread ends it. */
  CHECK_RC(from_other_thread(OTHER_END_CAPTURE, ev, s, NULL),
           CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  CHECK(capture_status(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  OK(p_cuStreamEndCapture(s, &g));
  CHECK(g != NULL);
  CHECK(capture_status(s) == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK_RC(p_cuStreamEndCapture(s, &g2), CUDA_ERROR_ILLEGAL_STATE);
  {
    unsigned char b[8];
    OK(p_cuMemcpyDtoH(b, dcopy, 8));
    CHECK(b[0] == 0x22 && b[7] == 0x22);
    OK(p_cuMemcpyDtoH(b, drecv, 8));
    CHECK(b[0] == 0x11 && b[7] == 0x11);
  }

  CHECK_RC(p_cuGraphInstantiate(&x, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuGraphInstantiate(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH),
           CUDA_ERROR_NOT_SUPPORTED);
  CHECK_RC(p_cuGraphInstantiate(&x, g, 1ull << 40), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuGraphInstantiate(&x, g, 0));
  OK(p_cuGraphDestroy(g)); /* the executable graph is its own */
  CHECK_RC(p_cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);

  /* Three replays, new input each time, each ordered with the stream's
   * work around it: the copy enqueued after the launch sees its result. */
  for (int rep = 0; rep < 3; rep++) {
    for (int i = 0; i < N; i++) in[i] = (float)(i % 251) * (float)(rep + 1) + (float)rep;
    memset(mapped, 0, 4096);
    CUstream on = rep == 2 ? sb : s; /* any stream of the context */
    OK(p_cuGraphLaunch(x, on));
    OK(p_cuMemcpyDtoHAsync(after, drecv, bytes, on));
    OK(p_cuStreamSynchronize(on));
    CHECK(kst->done == 1 && kst->result == 0);
    CHECK(memcmp(out, in, bytes - sizeof(float)) == 0);
    CHECK(out[N - 1] == 0.0f);
    CHECK(memcmp(after, in, bytes) == 0);
  }

  /* Launched into a capture, a graph's work becomes part of it. */
  OK(p_cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_GLOBAL));
  OK(p_cuGraphLaunch(x, s2));
  OK(p_cuMemsetD8Async(probe, 0x5a, 16, s2));
  OK(p_cuStreamEndCapture(s2, &g2));
  OK(p_cuGraphInstantiate(&x2, g2, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  for (int i = 0; i < N; i++) in[i] = (float)(N - i);
  OK(p_cuGraphLaunch(x2, s));
  OK(p_cuGraphLaunch(x2, s2)); /* the same graph on two streams: one launch after the other */
  OK(p_cuStreamSynchronize(s));
  OK(p_cuStreamSynchronize(s2));
  CHECK(memcmp(out, in, bytes - sizeof(float)) == 0);
  {
    unsigned char b[16];
    OK(p_cuMemcpyDtoH(b, probe, 16));
    CHECK(b[0] == 0x5a && b[15] == 0x5a);
    OK(p_cuMemsetD8(probe, 0, 16));
  }
  OK(p_cuGraphExecDestroy(x2));
  OK(p_cuGraphDestroy(g2));

  /* Waiting for or querying a capturing stream invalidates its capture. */
  EXPECT_INVALIDATES(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, p_cuStreamSynchronize(s),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, probe);
  EXPECT_INVALIDATES(s, CU_STREAM_CAPTURE_MODE_RELAXED, p_cuStreamQuery(s),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, probe);
  /* Single-stream capture only: events in or out of it are refused. */
  EXPECT_INVALIDATES(s, CU_STREAM_CAPTURE_MODE_GLOBAL, p_cuEventRecord(ev, s),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, probe);
  OK(p_cuEventQuery(ev)); /* the refused record left the event alone */
  OK(p_cuEventRecord(ev, s2));
  EXPECT_INVALIDATES(s, CU_STREAM_CAPTURE_MODE_GLOBAL, p_cuStreamWaitEvent(s, ev, 0),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, probe);
  /* Unsafe calls while this thread captures (not RELAXED), or any thread
   * captures in GLOBAL mode. */
  CUdeviceptr tmp = 0;
  EXPECT_INVALIDATES(s, CU_STREAM_CAPTURE_MODE_GLOBAL, p_cuMemAlloc(&tmp, 16),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, probe);
  EXPECT_INVALIDATES(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, p_cuMemsetD8(dcopy, 0, 16),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, probe);
  EXPECT_INVALIDATES(s, CU_STREAM_CAPTURE_MODE_GLOBAL,
                     from_other_thread(OTHER_EVENT_QUERY, ev, s, NULL),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, probe);
  /* The legacy stream cannot work while a blocking stream captures. */
  OK(p_cuStreamBeginCapture(sb, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUstreamCaptureStatus st;
  CHECK_RC(p_cuStreamIsCapturing(NULL, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(capture_status(sb) == CU_STREAM_CAPTURE_STATUS_ACTIVE); /* a query invalidates nothing */
  OK(p_cuStreamEndCapture(sb, &g));
  OK(p_cuGraphDestroy(g)); /* empty */
  EXPECT_INVALIDATES(sb, CU_STREAM_CAPTURE_MODE_RELAXED, p_cuMemsetD8Async(dcopy, 0, 16, NULL),
                     CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, probe);
  EXPECT_INVALIDATES(sb, CU_STREAM_CAPTURE_MODE_RELAXED, p_cuStreamSynchronize(NULL),
                     CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, probe);

  /* What is allowed: a RELAXED capture lets its thread allocate and copy
   * synchronously, and so does a RELAXED thread mode; the legacy stream
   * works beside a non-blocking stream's capture. */
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  OK(p_cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  OK(p_cuMemAlloc(&tmp, 16));
  OK(p_cuMemsetD8(tmp, 0x3c, 16));
  OK(p_cuMemsetD8Async(tmp, 0x3d, 16, NULL));
  OK(p_cuStreamSynchronize(NULL));
  OK(p_cuMemsetD8Async(tmp, 0x3e, 16, s)); /* recorded */
  OK(p_cuStreamEndCapture(s, &g));
  OK(p_cuGraphInstantiate(&x2, g, 0));
  {
    unsigned char b[16];
    OK(p_cuMemcpyDtoH(b, tmp, 16));
    CHECK(b[0] == 0x3d && b[15] == 0x3d);
  }
  OK(p_cuMemFree(tmp));
  /* The graph's memset would write freed memory. */
  CHECK_RC(p_cuGraphLaunch(x2, s), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuGraphExecDestroy(x2));
  OK(p_cuGraphDestroy(g));
  OK(p_cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  OK(p_cuThreadExchangeStreamCaptureMode(&mode));
  CHECK(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
  OK(p_cuMemAlloc(&tmp, 16));
  OK(p_cuMemFree(tmp));
  OK(p_cuThreadExchangeStreamCaptureMode(&mode));
  CHECK(mode == CU_STREAM_CAPTURE_MODE_RELAXED);
  mode = (CUstreamCaptureMode)9;
  CHECK_RC(p_cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuStreamEndCapture(s, &g));
  OK(p_cuGraphDestroy(g));

  /* Handles. */
  CHECK_RC(p_cuGraphLaunch(NULL, s), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuGraphLaunch(x, (CUstream)(uintptr_t)0x1234), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RC(p_cuGraphExecDestroy(NULL), CUDA_ERROR_INVALID_VALUE);
  OK(p_cuGraphExecDestroy(x));
  CHECK_RC(p_cuGraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuGraphExecDestroy(x), CUDA_ERROR_INVALID_VALUE);
  CHECK_RC(p_cuGraphDestroy(NULL), CUDA_ERROR_INVALID_VALUE);
  /* A stream destroyed while capturing takes its capture with it. */
  OK(p_cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_GLOBAL));
  OK(p_cuMemsetD8Async(probe, 0xee, 16, s2));
  OK(p_cuStreamDestroy(s2));
  CHECK_RC(p_cuStreamEndCapture(s2, &g), CUDA_ERROR_INVALID_HANDLE);
  OK(p_cuMemAlloc(&tmp, 16)); /* no capture left to forbid it */
  OK(p_cuMemFree(tmp));
  const char *name = NULL;
  OK(p_cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, &name));
  CHECK(name != NULL && strcmp(name, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED") == 0);

  OK(p_cuEventDestroy(ev));
  OK(p_cuStreamDestroy(s));
  OK(p_cuStreamDestroy(sb));
  p_cuMemFree(dsend);
  p_cuMemFree(drecv);
  p_cuMemFree(dcopy);
  p_cuMemFree(probe);
  p_cuMemFree(dranks);
  p_cuMemFree(scratch);
  p_cuMemFree(dch);
  p_cuMemFreeHost(mapped);
  p_cuMemFreeHost(in);
  p_cuMemFreeHost(out);
  p_cuMemFreeHost(after);
}

/* On device 1: a kernel given a host address faults the launch, stickily
 * for the context (as on a GPU); releasing the primary context resets it
 * and frees what it owned. */
static void test_fault(void) {
  CUcontext c0, c1;
  OK(p_cuCtxGetCurrent(&c0));
  CUmodule m1;
  CUfunction f1;
  OK(p_cuDevicePrimaryCtxRetain(&c1, 1));
  OK(p_cuCtxSetCurrent(c1));
  CHECK_RC(p_cuLaunchKernel(coll_fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL),
           CUDA_ERROR_INVALID_HANDLE); /* device 0's module */
  OK(p_cuModuleLoadData(&m1, gcoll_cuda_fatbin));
  OK(p_cuModuleGetFunction(&f1, m1, GCOLL_CUDA_KERNEL_NAME));
  CUfunction keep = coll_fn;
  coll_fn = f1;
  struct blocked b;
  launch_blocked(&b, NULL, 1000000000ull, -1); /* recvbuf: a host stack address */
  coll_fn = keep;
  CHECK_RC(p_cuStreamSynchronize(NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUdeviceptr d;
  CHECK_RC(p_cuMemAlloc(&d, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(blocked_status(&b)->done == 0); /* it never ran */
  unsigned type;
  CUdeviceptr fifo = b.fifo[0];
  OK(p_cuDevicePrimaryCtxRelease(1));
  CHECK_RC(p_cuMemAlloc(&d, 16), CUDA_ERROR_INVALID_CONTEXT); /* destroyed */
  OK(p_cuDevicePrimaryCtxRetain(&c1, 1));
  CHECK_RC(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, fifo),
           CUDA_ERROR_INVALID_VALUE); /* freed with the old one */
  OK(p_cuMemAlloc(&d, 16)); /* a fresh context */
  OK(p_cuMemFree(d));
  OK(p_cuDevicePrimaryCtxRelease(1));
  OK(p_cuCtxSetCurrent(c0));
}

int main(void) {
  /* Two devices; full-width blocks (the executor's 512 threads), which
   * the GPU matrix runs narrower for time. */
  setenv("GCOLL_CUDAEMU_DEVICES", "2", 1);
  setenv("GCOLL_CUDAEMU_BLOCK_THREADS", "512", 1);
  load();
  test_ipc(); /* forks: before this process initialises the driver */
  test_devices();
  test_memory();
  test_module();
  test_full_width_kernel();
  test_streams_events();
  test_graphs();
  test_fault();
  OK(p_cuModuleUnload(mod));
  CHECK_RC(p_cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
  OK(p_cuDevicePrimaryCtxRelease(0));
  if (failures == 0) printf("test_cudaemu: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
