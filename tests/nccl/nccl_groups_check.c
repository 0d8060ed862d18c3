/* PyTorch's calls on NCCL, replayed in C against the real nccl.h and
 * gcoll's libnccl.so.2 (tests/nccl/test_nccl_groups.sh): what
 * torch.distributed does for a job with a 2-D device mesh.
 *
 *   nccl_groups_check DIR TP [--device]
 *
 * Every rank of the job (gcollrun, srun, or torchrun-style: the rank and
 * size come from RANK/WORLD_SIZE, else GCOLL_RANK/GCOLL_NRANKS, else
 * SLURM_PROCID/SLURM_NTASKS) runs it with a directory they all see, which
 * stands in for PyTorch's TCPStore: each group's rank 0 creates a unique id
 * and publishes it there (write + rename), the members poll for it. Then:
 *   1. the world communicator from a fresh id;
 *   2. a second world communicator from another id, used interleaved with
 *      the first (two process groups over the same ranks);
 *   3. the mesh: tensor-parallel groups of TP consecutive ranks, and
 *      data-parallel groups of the ranks TP apart, each from its own id,
 *      the data-parallel ones with ncclCommInitRankConfig(blocking = 0)
 *      and ncclCommGetAsyncError polled until the init is done;
 *   4. the same groups again with ncclCommSplit of the world communicator
 *      (tensor-parallel by colour, data-parallel with keys that reverse
 *      the order), a split that leaves the odd ranks out
 *      (NCCL_SPLIT_NOCOLOR) and one that gives the whole world back;
 *   5. allreduce (sum, max) and allgather on every communicator, sizes 0,
 *      1, primes and more than a FIFO slot, against a serial reference of
 *      the group's inputs; a group call over the tensor- and data-parallel
 *      communicators at once;
 *   6. ncclCommFinalize + ncclCommDestroy of the tensor-parallel
 *      communicator; ncclCommAbort of the data-parallel one from a second
 *      thread while the first waits in an allreduce that no peer joins.
 * Inputs are small integers derived from (global rank, index, seed), so
 * every rank computes every expected value exactly. One line per rank;
 * exit 1 on any difference.
 *
 * --device: the collectives of 5 take GPU memory from ncclMemAlloc and
 * run on a non-blocking stream of the rank's GPU 0, as PyTorch's do (the
 * driver is $GCOLL_CUDA_DRIVER, the emulator in make check, else
 * libcuda.so.1); the stuck allreduce of 6 stays on host memory, where the
 * call itself waits. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

static int world_rank = -1, world_size = -1;
static const char *store_dir;
static long wrong, calls;

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return -1;
  char *end;
  long x = strtol(v, &end, 10);
  return *end == '\0' && x >= 0 ? (int)x : -1;
}

static void job_identity(void) {
  /* torchrun's first: under `srun torchrun` the launcher's are the agent's. */
  static const char *const pairs[][2] = {
      {"RANK", "WORLD_SIZE"}, {"GCOLL_RANK", "GCOLL_NRANKS"}, {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
    int r = env_int(pairs[i][0]), n = env_int(pairs[i][1]);
    if (r >= 0 && n > r) {
      world_rank = r;
      world_size = n;
      return;
    }
  }
  fprintf(stderr, "nccl_groups_check: no rank and size in the environment\n");
  exit(2);
}

static int nccl_ok(ncclResult_t rc, ncclComm_t comm, const char *what) {
  if (rc == ncclSuccess) return 1;
  fprintf(stderr, "rank %d: %s: %s: %s\n", world_rank, what, ncclGetErrorString(rc),
          ncclGetLastError(comm));
  return 0;
}

/* ---- buffers: host memory, or GPU memory with --device ----------------- */

static int on_device;
static void *stream;   /* the rank's CUstream with --device, else NULL */
static int (*cu_htod)(unsigned long long dst, const void *src, size_t bytes);
static int (*cu_dtoh)(void *dst, unsigned long long src, size_t bytes);
static int (*cu_stream_sync)(void *stream);

static void *driver_symbol(void *h, const char *name) {
  void *f = dlsym(h, name);
  if (f == NULL) {
    fprintf(stderr, "rank %d: --device: the driver lacks %s\n", world_rank, name);
    exit(2);
  }
  return f;
}

/* GPU 0's primary context made current and a non-blocking stream on it. */
static void device_setup(void) {
  const char *path = getenv("GCOLL_CUDA_DRIVER");
  if (path == NULL || *path == '\0') path = "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "rank %d: --device: %s\n", world_rank, dlerror());
    exit(2);
  }
  int (*init)(unsigned) = driver_symbol(h, "cuInit");
  int (*device_get)(int *, int) = driver_symbol(h, "cuDeviceGet");
  int (*retain)(void **, int) = driver_symbol(h, "cuDevicePrimaryCtxRetain");
  int (*set_current)(void *) = driver_symbol(h, "cuCtxSetCurrent");
  int (*stream_create)(void **, unsigned) = driver_symbol(h, "cuStreamCreate");
  cu_htod = driver_symbol(h, "cuMemcpyHtoD_v2");
  cu_dtoh = driver_symbol(h, "cuMemcpyDtoH_v2");
  cu_stream_sync = driver_symbol(h, "cuStreamSynchronize");
  int dev = -1;
  void *ctx = NULL;
  if (init(0) != 0 || device_get(&dev, 0) != 0 || retain(&ctx, dev) != 0 ||
      set_current(ctx) != 0 || stream_create(&stream, 1 /* CU_STREAM_NON_BLOCKING */) != 0) {
    fprintf(stderr, "rank %d: --device: no GPU 0 context and stream from %s\n", world_rank, path);
    exit(2);
  }
  on_device = 1;
}

/* A buffer the calls take: GPU memory with --device, else `host` itself. */
static void *call_buffer(void *host, size_t bytes) {
  if (!on_device) return host;
  void *p = NULL;
  if (!nccl_ok(ncclMemAlloc(&p, bytes), NULL, "ncclMemAlloc")) exit(2);
  return p;
}

static void call_buffer_free(void *p) {
  if (on_device) ncclMemFree(p);
}

/* The host twin's bytes into a call buffer, landed before the stream's
 * next work: the driver's synchronous copy runs on the legacy stream and
 * may return before the data lands, and a non-blocking stream does not
 * wait for the legacy one. */
static void to_call(void *dst, const void *host, size_t bytes) {
  if (!on_device || bytes == 0) return;
  if (cu_htod((unsigned long long)(uintptr_t)dst, host, bytes) != 0 || cu_stream_sync(NULL) != 0) {
    fprintf(stderr, "rank %d: cuMemcpyHtoD failed\n", world_rank);
    exit(2);
  }
}

/* A call buffer's bytes into its host twin, after the stream's work. */
static void from_call(void *host, const void *src, size_t bytes) {
  if (!on_device) return;
  if (cu_stream_sync(stream) != 0 ||
      (bytes > 0 && cu_dtoh(host, (unsigned long long)(uintptr_t)src, bytes) != 0)) {
    fprintf(stderr, "rank %d: the stream or cuMemcpyDtoH failed\n", world_rank);
    exit(2);
  }
}

/* ---- the "store": ids through files in DIR ------------------------------ */

static void publish_id(const char *name, const ncclUniqueId *id) {
  char tmp[4300], path[4200];
  snprintf(path, sizeof(path), "%s/%s.id", store_dir, name);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, world_rank);
  FILE *f = fopen(tmp, "wb");
  if (f == NULL || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "rank %d: publishing %s: %s\n", world_rank, path, strerror(errno));
    exit(2);
  }
}

static void fetch_id(const char *name, ncclUniqueId *id) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s.id", store_dir, name);
  for (int tries = 0; tries < 6000; tries++) {
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
      size_t n = fread(id, sizeof(*id), 1, f);
      fclose(f);
      if (n == 1) return;
    }
    usleep(10000);
  }
  fprintf(stderr, "rank %d: no id at %s after 60 s\n", world_rank, path);
  exit(2);
}

/* The group's communicator: its first member makes the id. */
static ncclComm_t join(const char *name, const int *members, int n, int blocking) {
  int me = -1;
  for (int i = 0; i < n; i++)
    if (members[i] == world_rank) me = i;
  ncclUniqueId id;
  if (me == 0) {
    if (!nccl_ok(ncclGetUniqueId(&id), NULL, "ncclGetUniqueId")) exit(1);
    publish_id(name, &id);
  } else {
    fetch_id(name, &id);
  }
  ncclComm_t comm = NULL;
  ncclResult_t rc;
  if (blocking) {
    rc = ncclCommInitRank(&comm, n, id, me);
  } else {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    rc = ncclCommInitRankConfig(&comm, n, id, me, &config);
    /* Non-blocking init: in progress until the async error says otherwise. */
    while (rc == ncclInProgress || rc == ncclSuccess) {
      ncclResult_t async = ncclSuccess;
      rc = ncclCommGetAsyncError(comm, &async);
      if (rc != ncclSuccess) break;
      rc = async;
      if (rc != ncclInProgress) break;
      usleep(1000);
    }
  }
  if (!nccl_ok(rc, comm, name)) exit(1);
  int count = -1, r = -1;
  ncclCommCount(comm, &count);
  ncclCommUserRank(comm, &r);
  if (count != n || r != me) {
    fprintf(stderr, "rank %d: %s: comm says rank %d of %d, expected %d of %d\n", world_rank, name,
            r, count, me, n);
    exit(1);
  }
  return comm;
}

/* ---- checked collectives ----------------------------------------------- */

static float input(int grank, size_t i, unsigned seed) {
  uint64_t x = (uint64_t)grank * 0x9e3779b97f4a7c15ULL ^ (i + 1) * 0xbf58476d1ce4e5b9ULL ^ seed;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  return (float)((int)(x % 17) - 8);
}

static const size_t sizes[] = {0, 1, 7, 1021, 40009};

/* Allreduce (sum or max) and allgather over comm, whose members are
 * members[0..n) in rank order, against the serial reference. */
static void check_comm(ncclComm_t comm, const int *members, int n, unsigned seed) {
  size_t max = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
  size_t cap = (max * (size_t)n + 1) * sizeof(float);
  float *buf = calloc(1, cap), *out = calloc(1, cap);
  if (buf == NULL || out == NULL) exit(2);
  float *cbuf = call_buffer(buf, cap), *cout = call_buffer(out, cap);
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    size_t count = sizes[s];
    for (int op = 0; op < 2; op++) {
      for (size_t i = 0; i < count; i++) buf[i] = input(world_rank, i, seed + (unsigned)s);
      to_call(cbuf, buf, count * sizeof(float));
      calls++;
      if (!nccl_ok(ncclAllReduce(cbuf, cout, count, ncclFloat, op ? ncclMax : ncclSum, comm,
                                 stream),
                   comm, "ncclAllReduce")) {
        wrong++;
        continue;
      }
      from_call(out, cout, count * sizeof(float));
      for (size_t i = 0; i < count; i++) {
        float want = op ? -1e30f : 0;
        for (int m = 0; m < n; m++) {
          float v = input(members[m], i, seed + (unsigned)s);
          want = op ? (v > want ? v : want) : want + v;
        }
        if (out[i] != want) {
          wrong++;
          break;
        }
      }
    }
    for (size_t i = 0; i < count; i++) buf[i] = input(world_rank, i, seed ^ 0x5a5a);
    to_call(cbuf, buf, count * sizeof(float));
    calls++;
    if (!nccl_ok(ncclAllGather(cbuf, cout, count, ncclFloat, comm, stream), comm,
                 "ncclAllGather")) {
      wrong++;
      continue;
    }
    from_call(out, cout, (size_t)n * count * sizeof(float));
    for (int m = 0; m < n; m++)
      for (size_t i = 0; i < count; i++)
        if (out[(size_t)m * count + i] != input(members[m], i, seed ^ 0x5a5a)) {
          wrong++;
          m = n;
          break;
        }
  }
  call_buffer_free(cbuf);
  call_buffer_free(cout);
  free(buf);
  free(out);
}

/* One allreduce on each of two communicators inside one group. */
static void check_group_call(ncclComm_t a, const int *ma, int na, ncclComm_t b, const int *mb,
                             int nb) {
  enum { N = 4099 };
  static float in_a[N], in_b[N], out_a[N], out_b[N];
  for (int i = 0; i < N; i++) {
    in_a[i] = input(world_rank, (size_t)i, 77);
    in_b[i] = input(world_rank, (size_t)i, 78);
  }
  float *c_in_a = call_buffer(in_a, sizeof(in_a)), *c_in_b = call_buffer(in_b, sizeof(in_b));
  float *c_out_a = call_buffer(out_a, sizeof(out_a)), *c_out_b = call_buffer(out_b, sizeof(out_b));
  to_call(c_in_a, in_a, sizeof(in_a));
  to_call(c_in_b, in_b, sizeof(in_b));
  calls += 2;
  ncclGroupStart();
  ncclAllReduce(c_in_a, c_out_a, N, ncclFloat, ncclSum, a, stream);
  ncclAllReduce(c_in_b, c_out_b, N, ncclFloat, ncclSum, b, stream);
  ncclResult_t rc = ncclGroupEnd();
  from_call(out_a, c_out_a, sizeof(out_a));
  from_call(out_b, c_out_b, sizeof(out_b));
  call_buffer_free(c_in_a);
  call_buffer_free(c_in_b);
  call_buffer_free(c_out_a);
  call_buffer_free(c_out_b);
  if (!nccl_ok(rc, NULL, "ncclGroupEnd over two communicators")) {
    wrong += 2;
    return;
  }
  for (int i = 0; i < N; i++) {
    float wa = 0, wb = 0;
    for (int m = 0; m < na; m++) wa += input(ma[m], (size_t)i, 77);
    for (int m = 0; m < nb; m++) wb += input(mb[m], (size_t)i, 78);
    if (out_a[i] != wa || out_b[i] != wb) {
      wrong++;
      return;
    }
  }
}

struct stuck {
  ncclComm_t comm;
  ncclResult_t rc;
  double seconds;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* An allreduce no peer joins: only an abort ends it. */
static void *stuck_allreduce(void *arg) {
  struct stuck *s = arg;
  static float v[64];
  double t0 = now_s();
  s->rc = ncclAllReduce(v, v, 64, ncclFloat, ncclSum, s->comm, NULL);
  s->seconds = now_s() - t0;
  return NULL;
}

static ncclComm_t split(ncclComm_t parent, int color, int key, int want_rank, int want_size,
                        const char *what) {
  ncclComm_t c = NULL;
  if (!nccl_ok(ncclCommSplit(parent, color, key, &c, NULL), parent, what)) return NULL;
  int r = -1, n = -1;
  if (c != NULL) {
    ncclCommUserRank(c, &r);
    ncclCommCount(c, &n);
  }
  if (c == NULL || r != want_rank || n != want_size) {
    fprintf(stderr, "rank %d: %s: rank %d of %d, expected %d of %d\n", world_rank, what, r, n,
            want_rank, want_size);
    if (c != NULL) ncclCommDestroy(c);
    return NULL;
  }
  return c;
}

/* Returns 1 when every split gave the right members in the right order and
 * their collectives were right (wrong counts the latter). */
static int check_splits(ncclComm_t w, const int *world, int tp_group, int dp_group,
                        const int *tp_members, int tp, const int *dp_members, int dp) {
  int ok = 1;
  ncclComm_t c = split(w, tp_group, world_rank, world_rank % tp, tp, "split by tensor-parallel group");
  if (c == NULL) return 0;
  check_comm(c, tp_members, tp, 11);
  ncclCommDestroy(c);
  /* Keys reverse the data-parallel order: new rank i is member dp-1-i. */
  int *reversed = malloc(sizeof(int) * (size_t)dp);
  if (reversed == NULL) return 0;
  for (int i = 0; i < dp; i++) reversed[i] = dp_members[dp - 1 - i];
  c = split(w, dp_group, -world_rank, dp - 1 - world_rank / tp, dp,
            "split by data-parallel group, keys reversed");
  if (c == NULL) ok = 0;
  else {
    check_comm(c, reversed, dp, 12);
    ncclCommDestroy(c);
  }
  free(reversed);
  /* The odd ranks join nothing; the even ones keep their order. */
  int nevens = (world_size + 1) / 2;
  int *evens = malloc(sizeof(int) * (size_t)nevens);
  if (evens == NULL) return 0;
  for (int i = 0; i < nevens; i++) evens[i] = 2 * i;
  if (world_rank % 2) {
    ncclComm_t none = (ncclComm_t)1;
    if (!nccl_ok(ncclCommSplit(w, NCCL_SPLIT_NOCOLOR, 0, &none, NULL), w, "split, no colour") ||
        none != NULL)
      ok = 0;
  } else if ((c = split(w, 7, 0, world_rank / 2, nevens, "split of the even ranks")) == NULL) {
    ok = 0;
  } else {
    check_comm(c, evens, nevens, 13);
    ncclCommDestroy(c);
  }
  free(evens);
  /* One colour, keys in rank order: the world again (the launcher's plan). */
  if ((c = split(w, 0, 0, world_rank, world_size, "split of the whole world")) == NULL) {
    ok = 0;
  } else {
    check_comm(c, world, world_size, 14);
    ncclCommDestroy(c);
  }
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 3 && !(argc == 4 && strcmp(argv[3], "--device") == 0)) {
    fprintf(stderr, "usage: nccl_groups_check DIR TP [--device]\n");
    return 2;
  }
  store_dir = argv[1];
  int tp = atoi(argv[2]);
  job_identity();
  if (argc == 4) device_setup();
  if (tp < 1 || world_size % tp != 0) {
    fprintf(stderr, "nccl_groups_check: TP %d must divide the %d ranks\n", tp, world_size);
    return 2;
  }
  int dp = world_size / tp;
  int *world = malloc(sizeof(int) * (size_t)world_size);
  int *tp_members = malloc(sizeof(int) * (size_t)tp), *dp_members = malloc(sizeof(int) * (size_t)dp);
  if (world == NULL || tp_members == NULL || dp_members == NULL) return 2;
  for (int r = 0; r < world_size; r++) world[r] = r;
  int tp_group = world_rank / tp, dp_group = world_rank % tp;
  for (int i = 0; i < tp; i++) tp_members[i] = tp_group * tp + i;
  for (int i = 0; i < dp; i++) dp_members[i] = dp_group + i * tp;
  char name[64];

  ncclComm_t w1 = join("world", world, world_size, 1);
  ncclComm_t w2 = join("world-2", world, world_size, 1);
  check_comm(w1, world, world_size, 1);
  check_comm(w2, world, world_size, 2);
  check_comm(w1, world, world_size, 3);
  snprintf(name, sizeof(name), "tp-%d", tp_group);
  ncclComm_t tpc = join(name, tp_members, tp, 1);
  snprintf(name, sizeof(name), "dp-%d", dp_group);
  ncclComm_t dpc = join(name, dp_members, dp, 0);
  check_comm(tpc, tp_members, tp, 4);
  check_comm(dpc, dp_members, dp, 5);
  check_group_call(tpc, tp_members, tp, dpc, dp_members, dp);
  check_comm(w1, world, world_size, 6);

  /* The same mesh by ncclCommSplit, as PyTorch does for groups of an
   * eagerly initialised world. */
  int splits_ok = check_splits(w1, world, tp_group, dp_group, tp_members, tp, dp_members, dp);

  /* Teardown as PyTorch does it: finalize, then destroy. */
  int finalized = nccl_ok(ncclCommFinalize(tpc), tpc, "ncclCommFinalize") &&
                  nccl_ok(ncclCommDestroy(tpc), NULL, "ncclCommDestroy");
  /* The watchdog's abort: the data-parallel group's first member waits in
   * an allreduce nobody joins; every member aborts from another thread. */
  struct stuck s = {.comm = dpc, .rc = ncclSuccess, .seconds = 0};
  pthread_t waiter;
  int waiting = dp > 1 && dp_members[0] == world_rank;
  if (waiting) pthread_create(&waiter, NULL, stuck_allreduce, &s);
  usleep(300000);
  int aborted = nccl_ok(ncclCommAbort(dpc), NULL, "ncclCommAbort");
  if (waiting) {
    pthread_join(waiter, NULL);
    if (s.rc == ncclSuccess || s.seconds > 10) aborted = 0;
  }
  check_comm(w2, world, world_size, 7);
  int destroyed = nccl_ok(ncclCommDestroy(w2), NULL, "ncclCommDestroy") &&
                  nccl_ok(ncclCommDestroy(w1), NULL, "ncclCommDestroy");
  printf("rank %d: world x2, tp group %d (%d ranks), dp group %d (%d ranks): %ld calls%s, %ld "
         "wrong; finalize+destroy %s; abort %s; splits %s%s\n", world_rank, tp_group, tp, dp_group,
         dp, calls, on_device ? " on device buffers" : "", wrong, finalized ? "ok" : "FAILED", aborted ? "ok" : "FAILED",
         splits_ok ? "ok" : "FAILED",
         waiting ? " (ended a waiting allreduce)" : "");
  free(world);
  free(tp_members);
  free(dp_members);
  return wrong == 0 && finalized && aborted && destroyed && splits_ok ? 0 : 1;
}
