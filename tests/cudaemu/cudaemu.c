/* libcudaemu.so: a CUDA driver stand-in over host memory, for tests.
 *
 * gcoll opens it instead of libcuda.so.1 when $GCOLL_CUDA_DRIVER names it,
 * so the GPU code path (the executor, the kernel body, memory handling,
 * IPC) runs in every CI job although no machine there has a GPU. It
 * exports the driver-API subset gcoll uses under the real ABI names, with
 * the real prototypes (cuda.h is included so the compiler checks every
 * signature); anything not implemented is not exported, so a new call in
 * gcoll fails to load here instead of half-working.
 *
 * Strict on purpose, so host code that treats memory the wrong way fails
 * here as it would on a GPU:
 *  - device memory lives in an address range reserved at cuInit (PROT_NONE
 *    between allocations, a guard page after each), each allocation its own
 *    memfd mapped MAP_SHARED|MAP_FIXED inside it, so IPC can map the same
 *    pages in another process;
 *  - a copy or memset whose pointers do not have the memory type its
 *    direction says (device side: device, IPC or host-pinned memory; host
 *    side: anything outside the device range) is CUDA_ERROR_INVALID_VALUE,
 *    as is a range running past its allocation;
 *  - memory calls need a current context (the driver API creates none
 *    implicitly); the primary context's memory, streams, events and
 *    modules go away when its last reference is released;
 *  - the kernel's pointer arguments are checked before it runs (the
 *    kernel table knows what each one spans); one the GPU could not reach
 *    fails the launch with CUDA_ERROR_ILLEGAL_ADDRESS, sticky for the
 *    context as on a GPU.
 * Streams run in order, one worker thread each (the NULL stream too, with
 * the legacy stream's implicit ordering against blocking streams); a
 * kernel runs every block at once as a group of pthreads (cudaemu_kernels.cu).
 * Stream capture and graphs, single-stream only (what capturing a
 * collective into a CUDA graph needs): a capturing stream records its
 * kernels, copies and memsets instead of running them, a graph replays
 * them in order on any stream of its context; the driver's capture rules
 * are enforced (synchronising with a capturing stream, the legacy
 * stream's implicit dependency on it, unsafe calls in GLOBAL or
 * THREAD_LOCAL mode fail and invalidate the capture), and an event record
 * or wait involving a capturing stream, which would fork or join the
 * capture across streams, is refused the same way
 * (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
 *
 * Environment: GCOLL_CUDAEMU_DEVICES (devices, default 1, 0 makes cuInit
 * report CUDA_ERROR_NO_DEVICE), GCOLL_CUDAEMU_BLOCK_THREADS (threads run
 * per block, default 4: the kernel sees that as blockDim.x; a full 512-
 * thread block works but makes the test matrix far slower on small CI
 * machines), GCOLL_CUDAEMU_BUSIDS (the PCI bus id cuDeviceGetPCIBusId
 * reports for each ordinal, comma-separated; default 0000:NN:00.0 with NN
 * = 0x10 + ordinal). A test gives each process the bus ids its
 * CUDA_VISIBLE_DEVICES or cgroup would leave it: the driver numbers the
 * devices a process sees from 0, whichever physical GPUs they are.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Every cu* declaration in cuda.h gets default visibility; everything
 * else in this library is hidden (-fvisibility=hidden), so only the
 * driver entry points are exported. */
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include "kernels/cuda_fatbin.h"
#include "kernels/cuda_loader.h"
#include "cudaemu.h"

/* The loader's spelling of the ABI, against cuda.h once more. */
_Static_assert(GCOLL_CU_ERROR_NOT_READY == CUDA_ERROR_NOT_READY, "driver ABI");
_Static_assert(sizeof(gcoll_cu_deviceptr) == sizeof(CUdeviceptr), "driver ABI");
_Static_assert(sizeof(CUipcMemHandle) == CU_IPC_HANDLE_SIZE, "driver ABI");

#define MAX_DEVICES 16
#define DEVICE_RANGE (16ull << 30) /* address space per emulated device */
#define GUARD 4096ull              /* unmapped bytes after each allocation */
#define DRIVER_VERSION 13000
#define DEFAULT_BLOCK_THREADS 4u
#define IPC_MAGIC 0x43554549u     /* "IEUC" */

/* ---- global state ---------------------------------------------------------- */

struct CUctx_st {
  int dev;
  int refs;                 /* primary context retains */
  int active;
  CUresult sticky;          /* a kernel's fault, reported from then on */
  struct CUstream_st *null_stream;
  int workers;              /* stream workers still running */
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static int initialized;
static int ndevices;
static unsigned block_threads = DEFAULT_BLOCK_THREADS;
static uintptr_t range_lo, range_hi; /* the device reservation */
static struct CUctx_st ctxs[MAX_DEVICES];
static _Thread_local struct CUctx_st *current;

void cudaemu_report(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "cudaemu: %s\n", line);
}

/* nvcc's host objects register their (unused) device code at load time
 * through the runtime; the emulator links no runtime, so these accept the
 * registration and do nothing. Hidden: never seen outside this library. */
void **__cudaRegisterFatBinary(void *fatbin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaUnregisterFatBinary(void **handle);
static void *registration_handle;
void **__cudaRegisterFatBinary(void *fatbin) {
  (void)fatbin;
  return &registration_handle;
}
void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }
void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

/* ---- allocations --------------------------------------------------------------
 * One sorted table of everything the emulator handed out: device
 * allocations and IPC mappings (inside the reservation), host-pinned
 * allocations and registered host ranges (outside it). */

enum mem_kind { MEM_DEVICE = 1, MEM_HOST = 2, MEM_IPC = 3, MEM_REGISTERED = 4 };

struct alloc {
  uintptr_t base;
  size_t size;              /* as requested: accesses past it are errors */
  size_t span;              /* mapped bytes (pages) */
  enum mem_kind kind;
  struct CUctx_st *ctx;
  int fd;                   /* the memfd (device), the opened file (IPC), -1 */
  uint64_t id;              /* in the memfd's name; IPC openers check it */
  pid_t ipc_pid;            /* IPC: the exporter and its allocation id */
  uint64_t ipc_id;
  int ipc_refs;
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *allocs;
static size_t nallocs, allocs_cap;
static uint64_t next_id = 1;

/* Index of the last allocation with base <= p, or -1. Under mem_lock. */
static long find_le(uintptr_t p) {
  long lo = 0, hi = (long)nallocs - 1, best = -1;
  while (lo <= hi) {
    long mid = (lo + hi) / 2;
    if (allocs[mid].base <= p) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

/* The allocation holding all of [p, p + n) (n >= 1 counts p itself). */
static struct alloc *find_range(uintptr_t p, size_t n) {
  long i = find_le(p);
  if (i < 0) return NULL;
  struct alloc *a = &allocs[i];
  if (n == 0) n = 1;
  if (p - a->base >= a->size || n > a->size - (p - a->base)) return NULL;
  return a;
}

static int insert_alloc(const struct alloc *a) {
  if (nallocs == allocs_cap) {
    size_t cap = allocs_cap ? allocs_cap * 2 : 64;
    struct alloc *n = realloc(allocs, cap * sizeof(*n));
    if (n == NULL) return -1;
    allocs = n;
    allocs_cap = cap;
  }
  long at = find_le(a->base) + 1;
  memmove(&allocs[at + 1], &allocs[at], (nallocs - (size_t)at) * sizeof(*a));
  allocs[at] = *a;
  nallocs++;
  return 0;
}

static void remove_alloc(struct alloc *a) {
  size_t at = (size_t)(a - allocs);
  memmove(&allocs[at], &allocs[at + 1], (nallocs - at - 1) * sizeof(*a));
  nallocs--;
}

static size_t page_round(size_t n) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) / pg * pg;
}

/* A free stretch of span + GUARD bytes in device dev's part of the
 * reservation (first fit), or 0. Under mem_lock. */
static uintptr_t find_gap(int dev, size_t span) {
  const uintptr_t lo = range_lo + (uintptr_t)dev * DEVICE_RANGE, hi = lo + DEVICE_RANGE;
  uintptr_t at = lo;
  for (long i = find_le(lo) < 0 ? 0 : find_le(lo); i < (long)nallocs; i++) {
    const struct alloc *a = &allocs[i];
    if (a->base + a->span + GUARD <= at) continue;
    if (a->base >= hi) break;
    if (a->base >= at + span + GUARD) break;
    at = a->base + a->span + GUARD;
  }
  return at + span + GUARD <= hi ? at : 0;
}

/* Puts the reservation back over [p, p + span) (MAP_FIXED replaces the
 * mapping in place, so no other mmap can take the hole meanwhile). */
static void unmap_to_reserved(uintptr_t p, size_t span) {
  if (mmap((void *)p, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
           -1, 0) == MAP_FAILED)
    cudaemu_report("cannot re-reserve %#lx: %s", (unsigned long)p, strerror(errno));
}

int cudaemu_device_accessible(uint64_t p, uint64_t n) {
  pthread_mutex_lock(&mem_lock);
  const struct alloc *a = p != 0 ? find_range((uintptr_t)p, (size_t)n) : NULL;
  const int ok = a != NULL && a->ctx->active;
  pthread_mutex_unlock(&mem_lock);
  return ok;
}

/* A copy's device side: all of [p, p + n) in device, IPC or host-pinned
 * memory (the latter's device address is its host address, as with UVA). */
static int device_side(CUdeviceptr p, size_t n) {
  return p != 0 && cudaemu_device_accessible(p, n);
}

/* A copy's host side: not NULL and nowhere in the device range. */
static int host_side(const void *p, size_t n) {
  const uintptr_t a = (uintptr_t)p;
  if (p == NULL) return 0;
  if (n == 0) n = 1;
  return a + n <= range_lo || a >= range_hi;
}

/* ---- initialisation ---------------------------------------------------------- */

static void do_init(void) {
  const char *s = getenv("GCOLL_CUDAEMU_DEVICES");
  ndevices = 1;
  if (s != NULL && s[0] != '\0') {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0 || v > MAX_DEVICES) {
      cudaemu_report("GCOLL_CUDAEMU_DEVICES=%s is not 0..%d", s, MAX_DEVICES);
      init_result = CUDA_ERROR_INVALID_VALUE;
      return;
    }
    ndevices = (int)v;
  }
  s = getenv("GCOLL_CUDAEMU_BLOCK_THREADS");
  if (s != NULL && s[0] != '\0') {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 1 || v > 1024) {
      cudaemu_report("GCOLL_CUDAEMU_BLOCK_THREADS=%s is not 1..1024", s);
      init_result = CUDA_ERROR_INVALID_VALUE;
      return;
    }
    block_threads = (unsigned)v;
  }
  if (ndevices == 0) {
    init_result = CUDA_ERROR_NO_DEVICE;
    return;
  }
  const size_t bytes = (size_t)ndevices * DEVICE_RANGE;
  void *r = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) {
    cudaemu_report("cannot reserve %zu bytes of address space: %s", bytes, strerror(errno));
    init_result = CUDA_ERROR_OUT_OF_MEMORY;
    return;
  }
  range_lo = (uintptr_t)r;
  range_hi = range_lo + bytes;
  for (int d = 0; d < ndevices; d++) ctxs[d].dev = d;
  initialized = 1;
  init_result = CUDA_SUCCESS;
}

CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_once(&init_once, do_init);
  return init_result;
}

/* Before cuInit: NOT_INITIALIZED; after a failed cuInit: its error. */
#define REQUIRE_INIT()                     \
  do {                                     \
    if (!initialized) return init_result;  \
  } while (0)

/* A current, active context (the driver API has no implicit one); a
 * context a kernel fault poisoned reports that fault. */
#define REQUIRE_CTX()                                                      \
  REQUIRE_INIT();                                                          \
  if (current == NULL || !current->active) return CUDA_ERROR_INVALID_CONTEXT; \
  if (current->sticky != CUDA_SUCCESS) return current->sticky

CUresult CUDAAPI cuDriverGetVersion(int *version) {
  if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
  *version = DRIVER_VERSION;
  return CUDA_SUCCESS;
}

/* ---- devices ------------------------------------------------------------------ */

CUresult CUDAAPI cuDeviceGetCount(int *count) {
  if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  *count = ndevices;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *dev, int ordinal) {
  if (dev == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  if (ordinal < 0 || ordinal >= ndevices) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

static int valid_device(CUdevice d) { return d >= 0 && d < ndevices; }

CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev) {
  if (value == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 0x7fffffff; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 49152; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = dev + 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    default:
      /* A real attribute the emulator does not model is NOT_SUPPORTED (a
       * test then says which); a number outside the enum is invalid. */
      return (int)attrib > 0 && (int)attrib < (int)CU_DEVICE_ATTRIBUTE_MAX
                 ? CUDA_ERROR_NOT_SUPPORTED
                 : CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
  static const char model[] = "gcoll emulated GPU";
  if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "%s", model);
  return CUDA_SUCCESS;
}

/* The ordinal-th entry of GCOLL_CUDAEMU_BUSIDS, or the default. */
CUresult CUDAAPI cuDeviceGetPCIBusId(char *out, int len, CUdevice dev) {
  if (out == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  char id[32];
  snprintf(id, sizeof(id), "0000:%02x:00.0", 0x10 + (int)dev);
  const char *list = getenv("GCOLL_CUDAEMU_BUSIDS");
  for (int i = 0; list != NULL && *list != '\0'; i++) {
    size_t n = strcspn(list, ",");
    if (i == (int)dev && n > 0 && n < sizeof(id)) {
      memcpy(id, list, n);
      id[n] = '\0';
      break;
    }
    list += n + (list[n] == ',');
  }
  /* The real driver writes upper-case hex digits ("0000:1B:00.0"). */
  for (char *p = id; *p; p++)
    if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
  if ((size_t)len <= strlen(id)) return CUDA_ERROR_INVALID_VALUE;
  snprintf(out, (size_t)len, "%s", id);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
  if (can == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer; /* as the driver: a device is not its own peer */
  return CUDA_SUCCESS;
}

/* ---- streams and the work they run --------------------------------------------
 * One lock for all queues; q_cond announces completions (markers, ops),
 * each stream's own condition wakes its idle worker, so finishing one op
 * does not wake every idle worker of the process. */

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;

/* Something a stream reaches (an event record, an implicit legacy-stream
 * dependency) and other work can wait for; refcounted under q_lock. */
struct marker {
  int done;
  int refs;
};

enum op_type { OP_KERNEL, OP_COPY, OP_SET, OP_MARK, OP_WAIT };

struct op {
  struct op *next;
  enum op_type type;
  const struct cudaemu_kernel *kernel;
  unsigned grid, threads;
  void *params[CUDAEMU_MAX_PARAMS];
  void *dst;
  const void *src;
  size_t n;
  unsigned char value;
  unsigned char dst_dev, src_dev; /* copies, memsets: which sides are device memory */
  struct marker *m;
  struct marker *done;      /* completed with the op (synchronous calls) */
};

struct CUstream_st {
  struct CUctx_st *ctx;
  unsigned flags;
  int is_null;
  pthread_t worker;
  pthread_cond_t cond;      /* work appended, or stop */
  struct op *head, *tail;
  uint64_t submitted, completed;
  int stop;
  /* Stream capture (single-stream only): while cap_status is not NONE,
   * work enqueued here goes to cap_graph instead of the queue. */
  CUstreamCaptureStatus cap_status;
  CUstreamCaptureMode cap_mode;
  pthread_t cap_thread;     /* the thread that began it */
  struct CUgraph_st *cap_graph;
  struct CUstream_st *next_live;
};

static struct CUstream_st *live_streams;

/* A graph: the operations captured on one stream, in capture order (a
 * chain: single-stream capture makes every graph a straight line). The
 * ops are templates, never run: an instantiation clones them and a launch
 * clones the instantiation's. Both lists under q_lock. */
struct CUgraph_st {
  struct CUctx_st *ctx;
  struct op *head, *tail;
  struct CUgraph_st *next_live;
};

struct CUgraphExec_st {
  struct CUctx_st *ctx;
  struct op *head;
  struct marker *last;      /* the latest launch's end: launches never overlap */
  struct CUgraphExec_st *next_live;
};

static struct CUgraph_st *live_graphs;
static struct CUgraphExec_st *live_execs;

/* The calling thread's capture interaction mode
 * (cuThreadExchangeStreamCaptureMode); GLOBAL, 0, by default. */
static _Thread_local CUstreamCaptureMode thread_capture_mode;

static void marker_put(struct marker *m) {
  if (m != NULL && --m->refs == 0) free(m);
}

static struct marker *marker_new(int refs) {
  struct marker *m = calloc(1, sizeof(*m));
  if (m != NULL) m->refs = refs;
  return m;
}

static void op_free(struct op *o) {
  if (o->type == OP_KERNEL)
    for (int i = 0; i < CUDAEMU_MAX_PARAMS; i++) free(o->params[i]);
  marker_put(o->m);
  marker_put(o->done);
  free(o);
}

/* Frees a chain of ops linked by next (under q_lock if any holds a marker). */
static void chain_free(struct op *o) {
  while (o != NULL) {
    struct op *next = o->next;
    op_free(o);
    o = next;
  }
}

/* A copy of a recorded op (kernel arguments copied again, no markers), or
 * NULL when out of memory. */
static struct op *op_clone(const struct op *o) {
  struct op *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  *c = *o;
  c->next = NULL;
  c->m = c->done = NULL;
  memset(c->params, 0, sizeof(c->params));
  if (o->type == OP_KERNEL)
    for (int i = 0; i < o->kernel->nparams; i++) {
      if ((c->params[i] = malloc(o->kernel->param_size[i])) == NULL) {
        op_free(c);
        return NULL;
      }
      memcpy(c->params[i], o->params[i], o->kernel->param_size[i]);
    }
  return c;
}

/* A copy of a chain, or NULL (also for an empty one: *ok says which). */
static struct op *chain_clone(const struct op *o, int *ok) {
  struct op *head = NULL, **at = &head;
  *ok = 1;
  for (; o != NULL; o = o->next) {
    if ((*at = op_clone(o)) == NULL) {
      chain_free(head);
      *ok = 0;
      return NULL;
    }
    at = &(*at)->next;
  }
  return head;
}

static CUresult run_op(struct op *o) {
  switch (o->type) {
    case OP_KERNEL: return (CUresult)o->kernel->run(o->params, o->grid, o->threads);
    case OP_COPY: memmove(o->dst, o->src, o->n); return CUDA_SUCCESS;
    case OP_SET: memset(o->dst, o->value, o->n); return CUDA_SUCCESS;
    default: return CUDA_SUCCESS;
  }
}

static void *stream_worker(void *arg) {
  struct CUstream_st *s = arg;
  pthread_mutex_lock(&q_lock);
  for (;;) {
    while (s->head == NULL && !s->stop) pthread_cond_wait(&s->cond, &q_lock);
    if (s->head == NULL) break;
    struct op *o = s->head;
    if (o->type == OP_WAIT)
      while (!o->m->done) pthread_cond_wait(&q_cond, &q_lock);
    /* After a fault the context is dead: later work is skipped, as a GPU
     * would not run it either; markers still complete so nobody hangs. */
    if (s->ctx->sticky == CUDA_SUCCESS && o->type != OP_MARK && o->type != OP_WAIT) {
      pthread_mutex_unlock(&q_lock);
      CUresult r = run_op(o);
      pthread_mutex_lock(&q_lock);
      if (r != CUDA_SUCCESS && s->ctx->sticky == CUDA_SUCCESS) s->ctx->sticky = r;
    }
    if (o->type == OP_MARK) o->m->done = 1;
    if (o->done != NULL) o->done->done = 1;
    s->head = o->next;
    if (s->head == NULL) s->tail = NULL;
    s->completed++;
    op_free(o);
    pthread_cond_broadcast(&q_cond);
  }
  /* Destroyed: the handle is gone already; the worker frees the stream
   * (and the kernel threads it kept) once its work is done. */
  pthread_mutex_unlock(&q_lock);
  cudaemu_kernels_thread_exit();
  pthread_mutex_lock(&q_lock);
  s->ctx->workers--;
  pthread_cond_broadcast(&q_cond);
  pthread_mutex_unlock(&q_lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return NULL;
}

/* Under q_lock. */
static int stream_is_live(const struct CUstream_st *s) {
  for (const struct CUstream_st *l = live_streams; l != NULL; l = l->next_live)
    if (l == s) return 1;
  return 0;
}

static void append(struct CUstream_st *s, struct op *o) {
  o->next = NULL;
  if (s->tail != NULL) s->tail->next = o;
  else s->head = o;
  s->tail = o;
  s->submitted++;
  pthread_cond_signal(&s->cond);
}

/* A marker op at the end of s, and a wait for it at the end of t: t's
 * later work runs after s's current work. Under q_lock. */
static int order_after(struct CUstream_st *t, struct CUstream_st *s) {
  if (s->submitted == s->completed) return 0;
  struct marker *m = marker_new(2);
  struct op *mark = calloc(1, sizeof(*mark)), *wait = calloc(1, sizeof(*wait));
  if (m == NULL || mark == NULL || wait == NULL) {
    free(m);
    free(mark);
    free(wait);
    return -1;
  }
  mark->type = OP_MARK;
  mark->m = m;
  wait->type = OP_WAIT;
  wait->m = m;
  append(s, mark);
  append(t, wait);
  return 0;
}

static CUresult stream_start(struct CUstream_st *s) {
  pthread_cond_init(&s->cond, NULL);
  s->ctx->workers++;
  if (pthread_create(&s->worker, NULL, stream_worker, s) != 0) {
    s->ctx->workers--;
    pthread_cond_destroy(&s->cond);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_detach(s->worker);
  s->next_live = live_streams;
  live_streams = s;
  return CUDA_SUCCESS;
}

/* The stream a call names: NULL and CU_STREAM_LEGACY are the context's
 * legacy stream (created on first use). Under q_lock; NULL when invalid. */
static struct CUstream_st *resolve_stream(CUstream h, CUresult *why) {
  struct CUctx_st *c = current;
  if (h == NULL || h == CU_STREAM_LEGACY) {
    if (c->null_stream == NULL) {
      struct CUstream_st *s = calloc(1, sizeof(*s));
      if (s == NULL) {
        *why = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
      }
      s->ctx = c;
      s->is_null = 1;
      if ((*why = stream_start(s)) != CUDA_SUCCESS) {
        free(s);
        return NULL;
      }
      c->null_stream = s;
    }
    return c->null_stream;
  }
  if (h == CU_STREAM_PER_THREAD) {
    *why = CUDA_ERROR_NOT_SUPPORTED;
    return NULL;
  }
  if (!stream_is_live(h) || h->ctx != c) {
    *why = CUDA_ERROR_INVALID_HANDLE;
    return NULL;
  }
  return h;
}

/* ---- stream capture: the rules ------------------------------------------------
 * As the driver: work on a capturing stream is recorded, not run; what
 * would make a capture depend on work outside it, or the host wait for
 * work that never runs, fails and invalidates the capture. Single-stream
 * capture only: an event recorded on or waited for by a capturing stream
 * is refused (the driver would fork or join the capture). */

static void graph_free(struct CUgraph_st *g);

/* Under q_lock: the capture on s becomes INVALIDATED (its graph is
 * dropped: cuStreamEndCapture returns none). */
static void capture_invalidate(struct CUstream_st *s) {
  if (s->cap_status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return;
  s->cap_status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  graph_free(s->cap_graph);
  s->cap_graph = NULL;
}

/* Under q_lock: whether the legacy stream s may not be used because a
 * blocking stream of its context captures (the legacy stream's implicit
 * ordering would join the capture: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
 * with invalidate, those captures are invalidated, as the driver does for
 * work issued there (not for a mere cuStreamIsCapturing). */
static int legacy_implicit(struct CUstream_st *s, int invalidate) {
  int hit = 0;
  if (!s->is_null) return 0;
  for (struct CUstream_st *l = live_streams; l != NULL; l = l->next_live)
    if (l != s && l->ctx == s->ctx && !(l->flags & CU_STREAM_NON_BLOCKING) &&
        l->cap_status != CU_STREAM_CAPTURE_STATUS_NONE) {
      hit = 1;
      if (invalidate) capture_invalidate(l);
    }
  return hit;
}

/* Whether the calling thread may make a "potentially unsafe" call
 * (cuThreadExchangeStreamCaptureMode): it may not while it has a capture
 * of its own begun in GLOBAL or THREAD_LOCAL mode, nor, in GLOBAL mode
 * (the default), while any thread has a GLOBAL capture; the thread's
 * RELAXED mode lifts both. The emulator counts as unsafe what
 * synchronises with or changes memory outside the stream order: memory
 * allocation and freeing, host registration, the synchronous copies and
 * memsets, cuEventQuery and cuEventSynchronize. A refused call is
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that
 * forbade it. */
static CUresult capture_unsafe_call(void) {
  if (thread_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  const pthread_t self = pthread_self();
  pthread_mutex_lock(&q_lock);
  for (struct CUstream_st *l = live_streams; l != NULL; l = l->next_live) {
    if (l->cap_status == CU_STREAM_CAPTURE_STATUS_NONE) continue;
    const int own = pthread_equal(l->cap_thread, self);
    if ((own && l->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        (thread_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
         l->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      capture_invalidate(l);
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  pthread_mutex_unlock(&q_lock);
  return r;
}

#define REFUSE_UNSAFE_IN_CAPTURE()                        \
  do {                                                    \
    CUresult unsafe_ = capture_unsafe_call();             \
    if (unsafe_ != CUDA_SUCCESS) return unsafe_;          \
  } while (0)

/* Under q_lock: whether a call that would synchronise with stream s or
 * fork or join its capture is refused: cuStreamSynchronize and
 * cuStreamQuery (a capturing stream's work never runs), cuEventRecord and
 * cuStreamWaitEvent (multi-stream capture is not emulated). On a
 * capturing stream that is CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the
 * capture is invalidated; on the legacy stream while a blocking stream
 * captures, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (that capture invalidated). */
static CUresult capture_refuses(struct CUstream_st *s) {
  if (legacy_implicit(s, 1)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (s->cap_status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  capture_invalidate(s);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

static int exec_is_live(const struct CUgraphExec_st *x) {
  for (const struct CUgraphExec_st *l = live_execs; l != NULL; l = l->next_live)
    if (l == x) return 1;
  return 0;
}

/* Enqueues the chain of ops (linked by next; at least one) on stream h
 * with the legacy stream's implicit ordering: work on the NULL stream
 * waits for all blocking streams' earlier work, and a blocking stream's
 * work waits for the NULL stream's. On a capturing stream the ops are
 * recorded into the capture's graph instead. x: the chain is a launch of
 * that executable graph, which then starts after its previous launch has
 * ended (whatever stream that ran on). On failure the chain is freed. */
static CUresult enqueue_chain(CUstream h, struct op *chain, struct CUgraphExec_st *x) {
  CUresult why = CUDA_SUCCESS;
  pthread_mutex_lock(&q_lock);
  struct CUstream_st *s = resolve_stream(h, &why);
  if (s == NULL) goto fail;
  if (legacy_implicit(s, 1)) {
    why = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    goto fail;
  }
  if (x != NULL && !exec_is_live(x)) { /* destroyed while the launch cloned it */
    why = CUDA_ERROR_INVALID_VALUE;
    goto fail;
  }
  if (s->cap_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    why = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    goto fail;
  }
  if (s->cap_status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    for (const struct op *o = chain; o != NULL; o = o->next)
      if (o->type == OP_MARK || o->type == OP_WAIT) { /* callers refuse these first */
        capture_invalidate(s);
        why = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        goto fail;
      }
    /* A graph launched into a capture becomes part of it: its ops, in order. */
    struct CUgraph_st *g = s->cap_graph;
    if (g->tail != NULL) g->tail->next = chain;
    else g->head = chain;
    while (chain->next != NULL) chain = chain->next;
    g->tail = chain;
    pthread_mutex_unlock(&q_lock);
    return CUDA_SUCCESS;
  }
  int bad = 0;
  if (s->is_null) {
    for (struct CUstream_st *l = live_streams; l != NULL; l = l->next_live)
      if (l != s && l->ctx == s->ctx && !(l->flags & CU_STREAM_NON_BLOCKING))
        bad |= order_after(s, l);
  } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && s->ctx->null_stream != NULL) {
    bad |= order_after(s, s->ctx->null_stream);
  }
  struct op *wait = NULL, *mark = NULL;
  struct marker *end = NULL;
  if (x != NULL && !bad) {
    mark = calloc(1, sizeof(*mark));
    end = marker_new(2); /* the mark op's reference and the exec's */
    if (x->last != NULL && !x->last->done) wait = calloc(1, sizeof(*wait));
    if (mark == NULL || end == NULL || (x->last != NULL && !x->last->done && wait == NULL)) {
      free(mark);
      free(end);
      free(wait);
      bad = 1;
    } else {
      mark->type = OP_MARK;
      mark->m = end;
      if (wait != NULL) {
        wait->type = OP_WAIT;
        wait->m = x->last;
        wait->m->refs++;
      }
      marker_put(x->last);
      x->last = end;
    }
  }
  if (bad) {
    why = CUDA_ERROR_OUT_OF_MEMORY;
    goto fail;
  }
  if (wait != NULL) append(s, wait);
  for (struct op *o = chain, *next; o != NULL; o = next) {
    next = o->next;
    append(s, o);
  }
  if (mark != NULL) append(s, mark);
  pthread_mutex_unlock(&q_lock);
  return CUDA_SUCCESS;
fail:
  chain_free(chain); /* under q_lock: an op may drop marker references */
  pthread_mutex_unlock(&q_lock);
  return why;
}

static CUresult enqueue(CUstream h, struct op *o) {
  o->next = NULL;
  return enqueue_chain(h, o, NULL);
}

/* Enqueues o on the legacy stream and waits for it: the synchronous copies
 * and memsets, ordered like the driver's. */
static CUresult run_sync(struct op *o) {
  struct marker *m = marker_new(2);
  if (m == NULL) {
    op_free(o);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  o->done = m;
  CUresult r = enqueue(NULL, o);
  pthread_mutex_lock(&q_lock);
  if (r == CUDA_SUCCESS) /* on failure o, and its reference, are gone */
    while (!m->done) pthread_cond_wait(&q_cond, &q_lock);
  marker_put(m);
  CUresult sticky = current->sticky;
  pthread_mutex_unlock(&q_lock);
  return r != CUDA_SUCCESS ? r : sticky;
}

CUresult CUDAAPI cuStreamCreate(CUstream *out, unsigned int flags) {
  if (out == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  struct CUstream_st *s = calloc(1, sizeof(*s));
  if (s == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = current;
  s->flags = flags;
  pthread_mutex_lock(&q_lock);
  CUresult r = stream_start(s);
  pthread_mutex_unlock(&q_lock);
  if (r != CUDA_SUCCESS) {
    free(s);
    return r;
  }
  *out = s;
  return CUDA_SUCCESS;
}

/* Under q_lock: unlinks a live stream and lets its worker finish the
 * queued work and free it (the driver also returns at once). A capture
 * still open on it is dropped with it. */
static void stream_retire(struct CUstream_st *s) {
  graph_free(s->cap_graph);
  s->cap_graph = NULL;
  s->cap_status = CU_STREAM_CAPTURE_STATUS_NONE;
  for (struct CUstream_st **l = &live_streams; *l != NULL; l = &(*l)->next_live)
    if (*l == s) {
      *l = s->next_live;
      break;
    }
  s->stop = 1;
  pthread_cond_signal(&s->cond);
}

CUresult CUDAAPI cuStreamDestroy(CUstream h) {
  REQUIRE_CTX();
  pthread_mutex_lock(&q_lock);
  if (h == NULL || !stream_is_live(h) || h->is_null) {
    pthread_mutex_unlock(&q_lock);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  stream_retire(h);
  pthread_mutex_unlock(&q_lock);
  return CUDA_SUCCESS;
}

/* Stream queries work on a poisoned context too: they are how the fault
 * is learned. */
#define REQUIRE_LIVE_CTX()                                                    \
  REQUIRE_INIT();                                                             \
  if (current == NULL || !current->active) return CUDA_ERROR_INVALID_CONTEXT

CUresult CUDAAPI cuStreamQuery(CUstream h) {
  REQUIRE_LIVE_CTX();
  CUresult why = CUDA_SUCCESS;
  pthread_mutex_lock(&q_lock);
  struct CUstream_st *s = resolve_stream(h, &why);
  if (s != NULL)
    why = capture_refuses(s);
  if (s != NULL && why == CUDA_SUCCESS)
    why = current->sticky != CUDA_SUCCESS ? current->sticky
          : s->completed < s->submitted   ? CUDA_ERROR_NOT_READY
                                          : CUDA_SUCCESS;
  pthread_mutex_unlock(&q_lock);
  return why;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream h) {
  REQUIRE_LIVE_CTX();
  CUresult why = CUDA_SUCCESS;
  pthread_mutex_lock(&q_lock);
  struct CUstream_st *s = resolve_stream(h, &why);
  if (s != NULL && (why = capture_refuses(s)) != CUDA_SUCCESS) s = NULL;
  if (s != NULL) {
    const uint64_t target = s->submitted;
    while (s->completed < target) pthread_cond_wait(&q_cond, &q_lock);
    why = current->sticky;
  }
  pthread_mutex_unlock(&q_lock);
  return why;
}

/* ---- events -------------------------------------------------------------------- */

struct CUevent_st {
  struct CUctx_st *ctx;
  unsigned flags;
  struct marker *m;         /* the latest record; NULL: never recorded */
  struct CUevent_st *next_live;
};

static struct CUevent_st *live_events;

static int event_is_live(const struct CUevent_st *e) {
  for (const struct CUevent_st *l = live_events; l != NULL; l = l->next_live)
    if (l == e) return 1;
  return 0;
}

CUresult CUDAAPI cuEventCreate(CUevent *out, unsigned int flags) {
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING;
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_EVENT_INTERPROCESS) return CUDA_ERROR_NOT_SUPPORTED; /* no IPC events */
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  struct CUevent_st *e = calloc(1, sizeof(*e));
  if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  e->ctx = current;
  e->flags = flags;
  pthread_mutex_lock(&q_lock);
  e->next_live = live_events;
  live_events = e;
  pthread_mutex_unlock(&q_lock);
  *out = e;
  return CUDA_SUCCESS;
}

/* Under q_lock. */
static void event_free(struct CUevent_st *e) {
  for (struct CUevent_st **l = &live_events; *l != NULL; l = &(*l)->next_live)
    if (*l == e) {
      *l = e->next_live;
      break;
    }
  marker_put(e->m);
  free(e);
}

CUresult CUDAAPI cuEventDestroy(CUevent e) {
  REQUIRE_LIVE_CTX();
  pthread_mutex_lock(&q_lock);
  if (e == NULL || !event_is_live(e)) {
    pthread_mutex_unlock(&q_lock);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  event_free(e); /* a pending record still completes: the op holds a reference */
  pthread_mutex_unlock(&q_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent e, CUstream h) {
  REQUIRE_CTX();
  struct op *o = calloc(1, sizeof(*o));
  struct marker *m = marker_new(2);
  if (o == NULL || m == NULL) {
    free(o);
    free(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  o->type = OP_MARK;
  o->m = m;
  pthread_mutex_lock(&q_lock);
  if (e == NULL || !event_is_live(e)) {
    pthread_mutex_unlock(&q_lock);
    free(o);
    free(m);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  CUresult why = CUDA_SUCCESS;
  struct CUstream_st *s = resolve_stream(h, &why);
  if (s == NULL || (why = capture_refuses(s)) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&q_lock);
    free(o);
    free(m);
    return why;
  }
  /* The event takes the new record before the op can complete it, so a
   * query right after the record sees it pending. */
  struct marker *old = e->m;
  e->m = m;
  marker_put(old);
  pthread_mutex_unlock(&q_lock);
  CUresult r = enqueue(h, o);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_lock(&q_lock);
    /* o (one reference) is freed; the event keeps a marker that never
     * completes unless marked done here. */
    m->done = 1;
    pthread_cond_broadcast(&q_cond);
    pthread_mutex_unlock(&q_lock);
  }
  return r;
}

CUresult CUDAAPI cuEventQuery(CUevent e) {
  REQUIRE_LIVE_CTX();
  REFUSE_UNSAFE_IN_CAPTURE();
  pthread_mutex_lock(&q_lock);
  CUresult r = e == NULL || !event_is_live(e) ? CUDA_ERROR_INVALID_HANDLE
               : e->m != NULL && !e->m->done  ? CUDA_ERROR_NOT_READY
                                              : e->ctx->sticky;
  pthread_mutex_unlock(&q_lock);
  return r;
}

CUresult CUDAAPI cuEventSynchronize(CUevent e) {
  REQUIRE_LIVE_CTX();
  REFUSE_UNSAFE_IN_CAPTURE();
  pthread_mutex_lock(&q_lock);
  if (e == NULL || !event_is_live(e)) {
    pthread_mutex_unlock(&q_lock);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  struct marker *m = e->m;
  if (m != NULL) {
    m->refs++; /* the event may be re-recorded or destroyed meanwhile */
    while (!m->done) pthread_cond_wait(&q_cond, &q_lock);
    marker_put(m);
  }
  CUresult r = e->ctx->sticky;
  pthread_mutex_unlock(&q_lock);
  return r;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE; /* CU_EVENT_WAIT_EXTERNAL: graphs only */
  REQUIRE_CTX();
  struct op *o = calloc(1, sizeof(*o));
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  o->type = OP_WAIT;
  pthread_mutex_lock(&q_lock);
  if (e == NULL || !event_is_live(e)) {
    pthread_mutex_unlock(&q_lock);
    free(o);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  CUresult why = CUDA_SUCCESS;
  struct CUstream_st *s = resolve_stream(h, &why);
  if (s != NULL) why = capture_refuses(s);
  /* The record current at the call, as the driver specifies; waiting for
   * an event never recorded is a no-op. */
  if (why != CUDA_SUCCESS || e->m == NULL || e->m->done) {
    pthread_mutex_unlock(&q_lock);
    free(o);
    return why;
  }
  o->m = e->m;
  o->m->refs++;
  pthread_mutex_unlock(&q_lock);
  return enqueue(h, o);
}

/* ---- contexts ------------------------------------------------------------------- */

static void free_alloc_pages(struct alloc *a);
static void graphs_drop(struct CUctx_st *c);

/* The primary context's last release: the driver destroys it with all it
 * owns. Streams finish their queued work first (so a kernel still using
 * the memory is not pulled from under it). */
static void ctx_deactivate(struct CUctx_st *c) {
  pthread_mutex_lock(&q_lock);
  for (struct CUstream_st *l = live_streams, *next; l != NULL; l = next) {
    next = l->next_live;
    if (l->ctx == c) stream_retire(l);
  }
  c->null_stream = NULL;
  while (c->workers > 0) pthread_cond_wait(&q_cond, &q_lock);
  for (struct CUevent_st *l = live_events, *next; l != NULL; l = next) {
    next = l->next_live;
    if (l->ctx == c) event_free(l);
  }
  graphs_drop(c);
  c->active = 0;
  c->sticky = CUDA_SUCCESS;
  pthread_mutex_unlock(&q_lock);
  pthread_mutex_lock(&mem_lock);
  for (size_t i = 0; i < nallocs;) {
    if (allocs[i].ctx == c) {
      free_alloc_pages(&allocs[i]);
      remove_alloc(&allocs[i]);
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&mem_lock);
}

static void modules_drop(struct CUctx_st *c);

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice dev) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&q_lock);
  struct CUctx_st *c = &ctxs[dev];
  c->refs++;
  c->active = 1;
  pthread_mutex_unlock(&q_lock);
  *out = c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  REQUIRE_INIT();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&q_lock);
  struct CUctx_st *c = &ctxs[dev];
  if (c->refs == 0) {
    pthread_mutex_unlock(&q_lock);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  const int last = --c->refs == 0;
  pthread_mutex_unlock(&q_lock);
  if (last) {
    ctx_deactivate(c);
    modules_drop(c);
  }
  return CUDA_SUCCESS;
}

static int valid_ctx(CUcontext c) {
  for (int d = 0; d < ndevices; d++)
    if (c == &ctxs[d]) return 1;
  return 0;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext c) {
  REQUIRE_INIT();
  if (c != NULL && (!valid_ctx(c) || !c->active)) return CUDA_ERROR_INVALID_CONTEXT;
  current = c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *out) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  *out = current;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *out) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_LIVE_CTX();
  *out = current->dev;
  return CUDA_SUCCESS;
}

/* ---- memory ------------------------------------------------------------------- */

/* Under mem_lock: unmaps an allocation's pages (device and IPC ranges go
 * back to the reservation) and closes its file. */
static void free_alloc_pages(struct alloc *a) {
  if (a->kind == MEM_REGISTERED) return; /* the caller's memory */
  if (a->kind == MEM_HOST) munmap((void *)a->base, a->span);
  else unmap_to_reserved(a->base, a->span);
  if (a->fd >= 0) close(a->fd);
}

/* Maps fd's span bytes at a free place of device dev's range. */
static uintptr_t map_in_range(int dev, int fd, size_t span) {
  uintptr_t at = find_gap(dev, span);
  if (at == 0) return 0;
  void *p = mmap((void *)at, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  return p == MAP_FAILED ? 0 : at;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *out, size_t bytes) {
  if (out == NULL || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  REFUSE_UNSAFE_IN_CAPTURE();
  const size_t span = page_round(bytes);
  if (span > DEVICE_RANGE) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&mem_lock);
  struct alloc a = {.size = bytes, .span = span, .kind = MEM_DEVICE, .ctx = current,
                    .fd = -1, .id = next_id++};
  char name[64];
  snprintf(name, sizeof(name), "cudaemu.%d.%llu", (int)getpid(), (unsigned long long)a.id);
  a.fd = memfd_create(name, MFD_CLOEXEC);
  if (a.fd < 0 || ftruncate(a.fd, (off_t)span) != 0 ||
      (a.base = map_in_range(current->dev, a.fd, span)) == 0 || insert_alloc(&a) != 0) {
    if (a.base != 0) unmap_to_reserved(a.base, span);
    if (a.fd >= 0) close(a.fd);
    pthread_mutex_unlock(&mem_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_unlock(&mem_lock);
  *out = a.base;
  return CUDA_SUCCESS;
}

/* Waits for every stream of the context: freeing memory is synchronous in
 * the driver too, and a kernel must not lose pages it still uses. */
static void ctx_drain(struct CUctx_st *c) {
  pthread_mutex_lock(&q_lock);
  for (;;) {
    int busy = 0;
    for (struct CUstream_st *l = live_streams; l != NULL; l = l->next_live)
      busy |= l->ctx == c && l->completed < l->submitted;
    if (!busy) break;
    pthread_cond_wait(&q_cond, &q_lock);
  }
  pthread_mutex_unlock(&q_lock);
}

static CUresult free_kind(uintptr_t p, enum mem_kind kind) {
  ctx_drain(current);
  pthread_mutex_lock(&mem_lock);
  long i = find_le(p);
  if (i < 0 || allocs[i].base != p || allocs[i].kind != kind) {
    pthread_mutex_unlock(&mem_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (kind == MEM_IPC && --allocs[i].ipc_refs > 0) {
    pthread_mutex_unlock(&mem_lock);
    return CUDA_SUCCESS;
  }
  free_alloc_pages(&allocs[i]);
  remove_alloc(&allocs[i]);
  pthread_mutex_unlock(&mem_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  REQUIRE_LIVE_CTX();
  if (p == 0) return CUDA_SUCCESS;
  REFUSE_UNSAFE_IN_CAPTURE();
  return free_kind((uintptr_t)p, MEM_DEVICE);
}

CUresult CUDAAPI cuMemHostAlloc(void **out, size_t bytes, unsigned int flags) {
  const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                         CU_MEMHOSTALLOC_WRITECOMBINED;
  if (out == NULL || bytes == 0 || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  REFUSE_UNSAFE_IN_CAPTURE();
  const size_t span = page_round(bytes);
  void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  struct alloc a = {.base = (uintptr_t)p, .size = bytes, .span = span, .kind = MEM_HOST,
                    .ctx = current, .fd = -1};
  pthread_mutex_lock(&mem_lock);
  a.id = next_id++;
  int bad = insert_alloc(&a);
  pthread_mutex_unlock(&mem_lock);
  if (bad) {
    munmap(p, span);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void *p) {
  REQUIRE_LIVE_CTX();
  REFUSE_UNSAFE_IN_CAPTURE();
  return free_kind((uintptr_t)p, MEM_HOST);
}

/* Page-locks the caller's memory and maps it for the device: recorded, so
 * copies, kernels and cuPointerGetAttribute treat it as the driver does.
 * Overlapping another registration or pinned allocation is an error. */
CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytes, unsigned int flags) {
  const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                         CU_MEMHOSTREGISTER_READ_ONLY;
  if (p == NULL || bytes == 0 || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_MEMHOSTREGISTER_IOMEMORY) return CUDA_ERROR_NOT_SUPPORTED;
  REQUIRE_CTX();
  REFUSE_UNSAFE_IN_CAPTURE();
  if (!host_side(p, bytes)) return CUDA_ERROR_INVALID_VALUE; /* device memory */
  const uintptr_t lo = (uintptr_t)p;
  pthread_mutex_lock(&mem_lock);
  long i = find_le(lo + bytes - 1);
  /* The allocation starting last below the end either overlaps or none does. */
  const int overlap = i >= 0 && allocs[i].base + allocs[i].size > lo;
  struct alloc a = {.base = lo, .size = bytes, .kind = MEM_REGISTERED, .ctx = current, .fd = -1,
                    .id = next_id++};
  const int bad = overlap || insert_alloc(&a) != 0;
  pthread_mutex_unlock(&mem_lock);
  if (overlap) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  return bad ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void *p) {
  REQUIRE_LIVE_CTX();
  REFUSE_UNSAFE_IN_CAPTURE();
  ctx_drain(current); /* as the driver: no copy may still read it */
  pthread_mutex_lock(&mem_lock);
  long i = find_le((uintptr_t)p);
  const int ok = p != NULL && i >= 0 && allocs[i].base == (uintptr_t)p &&
                 allocs[i].kind == MEM_REGISTERED;
  if (ok) remove_alloc(&allocs[i]);
  pthread_mutex_unlock(&mem_lock);
  return ok ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* With unified addressing, pinned and registered memory's device address
 * is its host address, whatever flags it was allocated with (true of
 * every GPU gcoll supports: they can use host pointers for registered
 * memory). */
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *out, void *p, unsigned int flags) {
  if (out == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  pthread_mutex_lock(&mem_lock);
  const struct alloc *a = find_range((uintptr_t)p, 1);
  const int ok = a != NULL && (a->kind == MEM_HOST || a->kind == MEM_REGISTERED);
  pthread_mutex_unlock(&mem_lock);
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  *out = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  REQUIRE_CTX();
  pthread_mutex_lock(&mem_lock);
  const struct alloc *a = find_range((uintptr_t)p, 1);
  const int ok = a != NULL && (a->kind == MEM_DEVICE || a->kind == MEM_IPC);
  if (ok) {
    if (base != NULL) *base = a->base;
    if (size != NULL) *size = a->size;
  }
  pthread_mutex_unlock(&mem_lock);
  return ok ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p) {
  if (data == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  pthread_mutex_lock(&mem_lock);
  const struct alloc *found = find_range((uintptr_t)p, 1);
  struct alloc a;
  if (found != NULL) a = *found;
  pthread_mutex_unlock(&mem_lock);
  /* Memory the driver did not allocate, map or register: INVALID_VALUE,
   * as the driver answers for plain malloc'd memory. */
  if (found == NULL) return CUDA_ERROR_INVALID_VALUE;
  const int host = a.kind == MEM_HOST || a.kind == MEM_REGISTERED;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = a.ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = p; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!host) return CUDA_ERROR_INVALID_VALUE; /* device memory has no host address */
      *(void **)data = (void *)(uintptr_t)p;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a.ctx->dev; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *(unsigned *)data = a.kind == MEM_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = a.base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a.size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned *)data = 1; break;
    default:
      return (int)attr >= (int)CU_POINTER_ATTRIBUTE_CONTEXT &&
                     (int)attr <= (int)CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE
                 ? CUDA_ERROR_NOT_SUPPORTED
                 : CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* The driver's plural form differs from the single one on memory it does
 * not know: every attribute reads as its empty value (0, an ordinal of
 * -2) and the call succeeds. */
CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                        CUdeviceptr p) {
  if (n > 0 && (attrs == NULL || data == NULL)) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  for (unsigned i = 0; i < n; i++) {
    if (data[i] == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuPointerGetAttribute(data[i], attrs[i], p);
    if (r != CUDA_ERROR_INVALID_VALUE) {
      if (r != CUDA_SUCCESS) return r;
      continue;
    }
    pthread_mutex_lock(&mem_lock);
    const int known = find_range((uintptr_t)p, 1) != NULL;
    pthread_mutex_unlock(&mem_lock);
    if (known) return r; /* a real refusal, e.g. the host address of device memory */
    switch (attrs[i]) {
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
      case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data[i] = NULL; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data[i] = 0; break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data[i] = NULL; break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[i] = 0; break;
      default: *(unsigned *)data[i] = 0; break;
    }
  }
  return CUDA_SUCCESS;
}

/* ---- copies and memsets --------------------------------------------------------- */

static struct op *copy_op(void *dst, int dst_dev, const void *src, int src_dev, size_t n) {
  struct op *o = calloc(1, sizeof(*o));
  if (o != NULL) {
    o->type = OP_COPY;
    o->dst = dst;
    o->src = src;
    o->n = n;
    o->dst_dev = (unsigned char)dst_dev;
    o->src_dev = (unsigned char)src_dev;
  }
  return o;
}

/* Checks a copy's sides, then runs it synchronously or on a stream. */
static CUresult copy(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                     int async, CUstream h) {
  REQUIRE_CTX();
  if (!async) REFUSE_UNSAFE_IN_CAPTURE();
  if (n == 0) return CUDA_SUCCESS;
  if (!(dst_dev ? device_side((CUdeviceptr)(uintptr_t)dst, n) : host_side(dst, n)) ||
      !(src_dev ? device_side((CUdeviceptr)(uintptr_t)src, n) : host_side(src, n)))
    return CUDA_ERROR_INVALID_VALUE;
  struct op *o = copy_op(dst, dst_dev, src, src_dev, n);
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  return async ? enqueue(h, o) : run_sync(o);
}

#define DPTR(p) ((void *)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  return copy(DPTR(dst), 1, src, 0, n, 0, NULL);
}
CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  return copy(dst, 0, DPTR(src), 1, n, 0, NULL);
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(DPTR(dst), 1, DPTR(src), 1, n, 0, NULL);
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream h) {
  return copy(DPTR(dst), 1, src, 0, n, 1, h);
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(dst, 0, DPTR(src), 1, n, 1, h);
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(DPTR(dst), 1, DPTR(src), 1, n, 1, h);
}

static CUresult memset8(CUdeviceptr dst, unsigned char v, size_t n, int async, CUstream h) {
  REQUIRE_CTX();
  if (!async) REFUSE_UNSAFE_IN_CAPTURE();
  if (n == 0) return CUDA_SUCCESS;
  if (!device_side(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  struct op *o = calloc(1, sizeof(*o));
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  o->type = OP_SET;
  o->dst_dev = 1;
  o->dst = DPTR(dst);
  o->n = n;
  o->value = v;
  return async ? enqueue(h, o) : run_sync(o);
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) {
  return memset8(dst, v, n, 0, NULL);
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream h) {
  return memset8(dst, v, n, 1, h);
}

/* ---- IPC --------------------------------------------------------------------------
 * The handle names the exporter's memfd: its pid, its descriptor number
 * and the allocation id in the memfd's name. The opener reopens the file
 * through /proc/PID/fd/FD (same user; no ptrace attach needed) or, where
 * /proc does not allow it, pidfd_getfd; it checks the name, so a handle to
 * a freed allocation (the descriptor number reused) fails cleanly, and
 * maps the pages into its own device range. */

struct ipc_payload {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t dev;
  uint64_t id;
  uint64_t size;
  uint64_t span;
};
_Static_assert(sizeof(struct ipc_payload) <= CU_IPC_HANDLE_SIZE, "IPC handle");

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr p) {
  if (handle == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  pthread_mutex_lock(&mem_lock);
  const struct alloc *a = find_range((uintptr_t)p, 1);
  struct ipc_payload pl = {0};
  const int ok = a != NULL && a->kind == MEM_DEVICE;
  if (ok) {
    pl = (struct ipc_payload){.magic = IPC_MAGIC, .pid = (int32_t)getpid(), .fd = a->fd,
                              .dev = a->ctx->dev, .id = a->id, .size = a->size,
                              .span = a->span};
  }
  pthread_mutex_unlock(&mem_lock);
  if (!ok) return CUDA_ERROR_INVALID_VALUE; /* the handle covers a whole device allocation */
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->reserved, &pl, sizeof(pl));
  return CUDA_SUCCESS;
}

static int open_remote_fd(pid_t pid, int fd) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
  int f = open(path, O_RDWR | O_CLOEXEC);
  if (f >= 0) return f;
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pfd >= 0) {
    f = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
    close(pfd);
  }
#endif
  return f;
}

/* Whether f is the memfd of allocation id of process pid. */
static int is_exported_memfd(int f, pid_t pid, uint64_t id, uint64_t span) {
  char path[64], target[256], want[96];
  struct stat st;
  snprintf(path, sizeof(path), "/proc/self/fd/%d", f);
  ssize_t n = readlink(path, target, sizeof(target) - 1);
  if (n < 0) return 0;
  target[n] = '\0';
  snprintf(want, sizeof(want), "/memfd:cudaemu.%d.%llu (deleted)", (int)pid,
           (unsigned long long)id);
  return strcmp(target, want) == 0 && fstat(f, &st) == 0 && (uint64_t)st.st_size == span;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *out, CUipcMemHandle handle, unsigned int flags) {
  if (out == NULL || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
    return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  struct ipc_payload pl;
  memcpy(&pl, handle.reserved, sizeof(pl));
  if (pl.magic != IPC_MAGIC || pl.pid <= 0 || pl.fd < 0 || pl.size == 0 || pl.span < pl.size ||
      pl.span > DEVICE_RANGE)
    return CUDA_ERROR_INVALID_HANDLE;
  /* A process opens other processes' handles only. */
  if (pl.pid == (int32_t)getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&mem_lock);
  for (size_t i = 0; i < nallocs; i++)
    if (allocs[i].kind == MEM_IPC && allocs[i].ipc_pid == pl.pid && allocs[i].ipc_id == pl.id &&
        allocs[i].ctx == current) {
      allocs[i].ipc_refs++; /* opened before: the same mapping, counted */
      *out = allocs[i].base;
      pthread_mutex_unlock(&mem_lock);
      return CUDA_SUCCESS;
    }
  pthread_mutex_unlock(&mem_lock);
  int f = open_remote_fd(pl.pid, pl.fd);
  if (f < 0) return CUDA_ERROR_INVALID_HANDLE; /* exporter gone, or not ours to open */
  if (!is_exported_memfd(f, pl.pid, pl.id, pl.span)) {
    close(f);
    return CUDA_ERROR_INVALID_HANDLE; /* freed since, descriptor reused */
  }
  pthread_mutex_lock(&mem_lock);
  struct alloc a = {.size = pl.size, .span = pl.span, .kind = MEM_IPC, .ctx = current, .fd = f,
                    .id = next_id++, .ipc_pid = pl.pid, .ipc_id = pl.id, .ipc_refs = 1};
  a.base = map_in_range(current->dev, f, pl.span);
  if (a.base == 0 || insert_alloc(&a) != 0) {
    if (a.base != 0) unmap_to_reserved(a.base, pl.span);
    pthread_mutex_unlock(&mem_lock);
    close(f);
    return CUDA_ERROR_MAP_FAILED;
  }
  pthread_mutex_unlock(&mem_lock);
  *out = a.base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr p) {
  REQUIRE_LIVE_CTX();
  return free_kind((uintptr_t)p, MEM_IPC);
}

/* ---- modules and kernels ---------------------------------------------------------- */

struct CUfunc_st {
  struct CUmod_st *mod;
  const struct cudaemu_kernel *kernel;
};

struct CUmod_st {
  struct CUctx_st *ctx;
  unsigned char *image;     /* a copy, as the driver keeps its own */
  size_t image_len;
  struct CUfunc_st *funcs;  /* one per kernel of the table */
  struct CUmod_st *next_live;
};

static pthread_mutex_t mod_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUmod_st *live_modules;

static int module_is_live(const struct CUmod_st *m) {
  for (const struct CUmod_st *l = live_modules; l != NULL; l = l->next_live)
    if (l == m) return 1;
  return 0;
}

/* The fatbin's length from its header, or 0 when it is not one. */
static size_t fatbin_length(const unsigned char *p) {
  uint32_t magic;
  uint16_t hdr;
  uint64_t body;
  memcpy(&magic, p, 4);
  if (magic != 0xba55ed50u) return 0;
  memcpy(&hdr, p + 6, 2);
  memcpy(&body, p + 8, 8);
  if (hdr < 16 || body > (1ull << 32)) return 0;
  return (size_t)hdr + (size_t)body;
}

/* Only a fatbin (what gcoll embeds) is accepted, and only one with code
 * this device could run: sm_90 SASS or PTX for compute_90 or older. */
CUresult CUDAAPI cuModuleLoadData(CUmodule *out, const void *image) {
  if (out == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  const size_t len = fatbin_length(image);
  if (len == 0) return CUDA_ERROR_INVALID_IMAGE;
  struct gcoll_fatbin_image imgs[64];
  char why[128];
  int n = gcoll_fatbin_list(image, len, imgs, 64, why, sizeof(why));
  if (n < 0) {
    cudaemu_report("cuModuleLoadData: %s", why);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  int runnable = 0;
  for (int i = 0; i < n && i < 64; i++)
    runnable |= (imgs[i].kind == GCOLL_FATBIN_CUBIN && imgs[i].arch == 90) ||
                (imgs[i].kind == GCOLL_FATBIN_PTX && imgs[i].arch <= 90);
  if (!runnable) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  struct CUmod_st *m = calloc(1, sizeof(*m));
  if (m == NULL || (m->image = malloc(len)) == NULL ||
      (m->funcs = calloc((size_t)cudaemu_kernel_count, sizeof(*m->funcs))) == NULL) {
    if (m != NULL) free(m->image);
    free(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(m->image, image, len);
  m->image_len = len;
  m->ctx = current;
  for (int i = 0; i < cudaemu_kernel_count; i++) {
    m->funcs[i].mod = m;
    m->funcs[i].kernel = &cudaemu_kernel_table[i];
  }
  pthread_mutex_lock(&mod_lock);
  m->next_live = live_modules;
  live_modules = m;
  pthread_mutex_unlock(&mod_lock);
  *out = m;
  return CUDA_SUCCESS;
}

static void module_free(struct CUmod_st *m) {
  free(m->funcs);
  free(m->image);
  free(m);
}

CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  REQUIRE_LIVE_CTX();
  pthread_mutex_lock(&mod_lock);
  for (struct CUmod_st **l = &live_modules; *l != NULL; l = &(*l)->next_live)
    if (*l == m) {
      *l = m->next_live;
      pthread_mutex_unlock(&mod_lock);
      ctx_drain(m->ctx); /* a kernel of it may still run */
      module_free(m);
      return CUDA_SUCCESS;
    }
  pthread_mutex_unlock(&mod_lock);
  return CUDA_ERROR_INVALID_HANDLE;
}

static void modules_drop(struct CUctx_st *c) {
  pthread_mutex_lock(&mod_lock);
  for (struct CUmod_st **l = &live_modules; *l != NULL;) {
    struct CUmod_st *m = *l;
    if (m->ctx == c) {
      *l = m->next_live;
      module_free(m);
    } else {
      l = &m->next_live;
    }
  }
  pthread_mutex_unlock(&mod_lock);
}

/* A kernel is found when the emulator has a host build of it AND the
 * module's image names it (its symbol table is not compressed), so a
 * kernel missing from the fatbin is missing here too. */
CUresult CUDAAPI cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name) {
  if (out == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  pthread_mutex_lock(&mod_lock);
  if (!module_is_live(m)) {
    pthread_mutex_unlock(&mod_lock);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  CUresult r = CUDA_ERROR_NOT_FOUND;
  for (int i = 0; i < cudaemu_kernel_count; i++)
    if (strcmp(cudaemu_kernel_table[i].name, name) == 0 &&
        memmem(m->image, m->image_len, name, strlen(name) + 1) != NULL) {
      *out = &m->funcs[i];
      r = CUDA_SUCCESS;
    }
  pthread_mutex_unlock(&mod_lock);
  return r;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shared_bytes, CUstream h, void **params,
                                void **extra) {
  REQUIRE_CTX();
  /* f must be a function of a live module of this context (checked
   * without dereferencing f: a stale handle must not crash). */
  int live = 0;
  pthread_mutex_lock(&mod_lock);
  for (const struct CUmod_st *l = live_modules; l != NULL && !live; l = l->next_live)
    for (int i = 0; i < cudaemu_kernel_count; i++)
      live |= f == &l->funcs[i] && l->ctx == current;
  pthread_mutex_unlock(&mod_lock);
  if (!live) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
      (unsigned long long)bx * by * bz > 1024 || shared_bytes > 49152)
    return CUDA_ERROR_INVALID_VALUE;
  /* The host kernels are one-dimensional; `extra` (packed arguments) is
   * not implemented. */
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || extra != NULL) return CUDA_ERROR_NOT_SUPPORTED;
  const struct cudaemu_kernel *k = f->kernel;
  if (k->nparams > 0 && params == NULL) return CUDA_ERROR_INVALID_VALUE;
  struct op *o = calloc(1, sizeof(*o));
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  o->type = OP_KERNEL;
  o->kernel = k;
  o->grid = gx;
  o->threads = bx < block_threads ? bx : block_threads;
  /* The arguments are copied now, as the driver does: the caller's
   * variables may be gone when the stream reaches the kernel. */
  for (int i = 0; i < k->nparams; i++) {
    if (params[i] == NULL || (o->params[i] = malloc(k->param_size[i])) == NULL) {
      op_free(o);
      return params[i] == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(o->params[i], params[i], k->param_size[i]);
  }
  return enqueue(h, o);
}

/* ---- stream capture and graphs -------------------------------------------------
 * Single-stream capture: the kernels, copies and memsets enqueued on a
 * capturing stream are recorded in order (a kernel's arguments copied at
 * the call, as for a launch), and a graph replays them in that order on
 * the stream it is launched on, as stream work like any other. The rules
 * the driver enforces around a capture are in "stream capture: the rules"
 * above. Graph nodes (cuGraphAdd*, cuGraphGetNodes, updates) are not
 * emulated; a graph comes only from cuStreamEndCapture. */

static int graph_is_live(const struct CUgraph_st *g) {
  for (const struct CUgraph_st *l = live_graphs; l != NULL; l = l->next_live)
    if (l == g) return 1;
  return 0;
}

/* Under q_lock: a graph not (or no longer) in live_graphs: a capture's. */
static void graph_free(struct CUgraph_st *g) {
  if (g == NULL) return;
  chain_free(g->head);
  free(g);
}

static void graph_unlink(struct CUgraph_st *g) {
  for (struct CUgraph_st **l = &live_graphs; *l != NULL; l = &(*l)->next_live)
    if (*l == g) {
      *l = g->next_live;
      return;
    }
}

/* Under q_lock; a launch still queued keeps its own copies of the ops, and
 * its end marker its reference. */
static void exec_free(struct CUgraphExec_st *x) {
  for (struct CUgraphExec_st **l = &live_execs; *l != NULL; l = &(*l)->next_live)
    if (*l == x) {
      *l = x->next_live;
      break;
    }
  chain_free(x->head);
  marker_put(x->last);
  free(x);
}

/* Under q_lock: the context's graphs and executable graphs go with it. */
static void graphs_drop(struct CUctx_st *c) {
  for (struct CUgraph_st *l = live_graphs, *next; l != NULL; l = next) {
    next = l->next_live;
    if (l->ctx == c) {
      graph_unlink(l);
      graph_free(l);
    }
  }
  for (struct CUgraphExec_st *l = live_execs, *next; l != NULL; l = next) {
    next = l->next_live;
    if (l->ctx == c) exec_free(l);
  }
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  if (mode == NULL || (unsigned)*mode > (unsigned)CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT();
  const CUstreamCaptureMode old = thread_capture_mode;
  thread_capture_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode) {
  if ((unsigned)mode > (unsigned)CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  if (h == NULL || h == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  struct CUgraph_st *g = calloc(1, sizeof(*g));
  if (g == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  g->ctx = current;
  CUresult why = CUDA_SUCCESS;
  pthread_mutex_lock(&q_lock);
  struct CUstream_st *s = resolve_stream(h, &why);
  if (s != NULL && s->cap_status != CU_STREAM_CAPTURE_STATUS_NONE) {
    s = NULL;
    why = CUDA_ERROR_ILLEGAL_STATE; /* capturing already (or invalidated, not ended) */
  }
  if (s == NULL) {
    pthread_mutex_unlock(&q_lock);
    free(g);
    return why;
  }
  s->cap_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  s->cap_mode = mode;
  s->cap_thread = pthread_self();
  s->cap_graph = g;
  pthread_mutex_unlock(&q_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph *out) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_LIVE_CTX();
  CUresult why = CUDA_SUCCESS;
  pthread_mutex_lock(&q_lock);
  struct CUstream_st *s = resolve_stream(h, &why);
  if (s != NULL && s->cap_status == CU_STREAM_CAPTURE_STATUS_NONE) {
    why = CUDA_ERROR_ILLEGAL_STATE; /* not capturing: the legacy stream never is */
    s = NULL;
  } else if (s != NULL && s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
             !pthread_equal(s->cap_thread, pthread_self())) {
    why = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD; /* the capture goes on */
    s = NULL;
  }
  if (s == NULL) {
    pthread_mutex_unlock(&q_lock);
    return why;
  }
  struct CUgraph_st *g = s->cap_graph;
  const int invalidated = s->cap_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  s->cap_status = CU_STREAM_CAPTURE_STATUS_NONE;
  s->cap_graph = NULL;
  if (invalidated) {
    graph_free(g); /* NULL: dropped when invalidated */
    *out = NULL;
    why = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    g->next_live = live_graphs;
    live_graphs = g;
    *out = g;
  }
  pthread_mutex_unlock(&q_lock);
  return why;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status) {
  if (status == NULL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_LIVE_CTX();
  CUresult why = CUDA_SUCCESS;
  pthread_mutex_lock(&q_lock);
  struct CUstream_st *s = resolve_stream(h, &why);
  if (s != NULL) {
    if (legacy_implicit(s, 0)) why = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; /* not invalidated */
    else *status = s->cap_status;
  }
  pthread_mutex_unlock(&q_lock);
  return why;
}

/* Flags: the ones that change nothing here are accepted; launching from
 * the device is not emulated. */
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *out, CUgraph g, unsigned long long flags) {
  const unsigned long long harmless = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                      CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                      CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) return CUDA_ERROR_NOT_SUPPORTED;
  if (flags & ~harmless) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CTX();
  struct CUgraphExec_st *x = calloc(1, sizeof(*x));
  if (x == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&q_lock);
  if (g == NULL || !graph_is_live(g)) {
    pthread_mutex_unlock(&q_lock);
    free(x);
    return CUDA_ERROR_INVALID_VALUE;
  }
  int ok;
  x->ctx = g->ctx;
  x->head = chain_clone(g->head, &ok); /* the graph may be destroyed or reused after */
  if (!ok) {
    pthread_mutex_unlock(&q_lock);
    free(x);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  x->next_live = live_execs;
  live_execs = x;
  pthread_mutex_unlock(&q_lock);
  *out = x;
  return CUDA_SUCCESS;
}

/* Enqueues a copy of the graph's operations on the stream (recorded, when
 * that stream captures). A copy or memset whose memory has been freed
 * since the capture fails the launch with CUDA_ERROR_INVALID_VALUE before
 * anything runs (a kernel's arguments are checked when it runs, as for
 * any launch). */
CUresult CUDAAPI cuGraphLaunch(CUgraphExec x, CUstream h) {
  REQUIRE_CTX();
  pthread_mutex_lock(&q_lock);
  if (x == NULL || !exec_is_live(x)) {
    pthread_mutex_unlock(&q_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (x->ctx != current) {
    pthread_mutex_unlock(&q_lock);
    return CUDA_ERROR_INVALID_CONTEXT; /* a graph runs in the context it was captured in */
  }
  int ok;
  struct op *chain = chain_clone(x->head, &ok);
  pthread_mutex_unlock(&q_lock);
  if (!ok) return CUDA_ERROR_OUT_OF_MEMORY;
  for (const struct op *o = chain; o != NULL; o = o->next)
    if ((o->type == OP_COPY || o->type == OP_SET) &&
        ((o->dst_dev && !device_side((CUdeviceptr)(uintptr_t)o->dst, o->n)) ||
         (o->src_dev && !device_side((CUdeviceptr)(uintptr_t)o->src, o->n)))) {
      pthread_mutex_lock(&q_lock);
      chain_free(chain);
      pthread_mutex_unlock(&q_lock);
      return CUDA_ERROR_INVALID_VALUE;
    }
  if (chain == NULL) { /* an empty graph: nothing to run, but the stream must exist */
    CUresult why = CUDA_SUCCESS;
    pthread_mutex_lock(&q_lock);
    struct CUstream_st *s = resolve_stream(h, &why);
    if (s != NULL && legacy_implicit(s, 1)) why = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else if (s != NULL && s->cap_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
      why = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    pthread_mutex_unlock(&q_lock);
    return why;
  }
  return enqueue_chain(h, chain, x);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec x) {
  REQUIRE_LIVE_CTX();
  pthread_mutex_lock(&q_lock);
  const int ok = x != NULL && exec_is_live(x);
  if (ok) exec_free(x);
  pthread_mutex_unlock(&q_lock);
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
  REQUIRE_LIVE_CTX();
  pthread_mutex_lock(&q_lock);
  const int ok = g != NULL && graph_is_live(g);
  if (ok) {
    graph_unlink(g);
    graph_free(g);
  }
  pthread_mutex_unlock(&q_lock);
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- error names ------------------------------------------------------------------- */

#define ERRORS(X)                                                                        \
  X(CUDA_SUCCESS, "no error")                                                            \
  X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                        \
  X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                           \
  X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                  \
  X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                    \
  X(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")                            \
  X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                          \
  X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                 \
  X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                          \
  X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                \
  X(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed")                            \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device") \
  X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                \
  X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                      \
  X(CUDA_ERROR_NOT_READY, "device not ready")                                            \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")              \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")       \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,                                           \
    "part or all of the requested memory range is already mapped")                       \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,                                               \
    "pointer does not correspond to a registered memory region")                          \
  X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                 \
  X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")  \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing") \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,                                               \
    "operation failed due to a previous error during capture")                           \
  X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,                                                  \
    "operation would make the legacy stream depend on a capturing blocking stream")      \
  X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,                                              \
    "attempt to terminate a thread-local capture sequence from another thread")          \
  X(CUDA_ERROR_UNKNOWN, "unknown error")

CUresult CUDAAPI cuGetErrorName(CUresult r, const char **out) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
#define NAME(code, text) \
  if (r == code) {       \
    *out = #code;        \
    return CUDA_SUCCESS; \
  }
  ERRORS(NAME)
#undef NAME
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult r, const char **out) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
#define TEXT(code, text) \
  if (r == code) {       \
    *out = text;         \
    return CUDA_SUCCESS; \
  }
  ERRORS(TEXT)
#undef TEXT
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}
