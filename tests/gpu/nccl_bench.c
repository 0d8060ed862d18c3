/* nccl_bench: ncclAllReduce on CUDA device buffers through any libnccl.so.2,
 * in nccl-tests' row format, so gcoll's library and a real NCCL are
 * measured by the same program in the same run.
 *
 *   nccl_bench [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUP] [-i ITERS] LIBNCCL...
 *
 * Each library is opened with dlopen (RTLD_LOCAL, so two NCCLs never mix)
 * in its own forked processes: RANKS processes share GPU 0 (NCCL refuses
 * that for RANKS > 1; gcoll allows it, which is how one GPU tests several
 * ranks). Rank 0 makes the unique id and hands it to the others through a
 * shared anonymous mapping; nothing touches CUDA before the fork.
 *
 * Every size is timed as nccl-tests does (warm-up calls, then ITERS calls
 * between two events on one stream, out of place), then the result is
 * copied back and checked element by element against the serial sum of
 * what every rank put in (small integers in float: exact), so #wrong is
 * independent of the library under test. Rows come from rank 0; each rank
 * adds its wrong elements to a shared total that the parent prints and
 * turns into the exit status. Buffers are allocated once, at the largest
 * size (this machine's notes: allocate once). Exit 77 without a GPU. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The slice of NCCL's ABI this program calls (nccl.h, stable since 2.0). */
typedef struct { char internal[128]; } nccl_id;
typedef void *nccl_comm;
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };
struct nccl_api {
  int (*get_version)(int *);
  int (*get_unique_id)(nccl_id *);
  int (*comm_init_rank)(nccl_comm *, int, nccl_id, int);
  int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, cudaStream_t);
  int (*comm_destroy)(nccl_comm);
  const char *(*error_string)(int);
};

struct shared {
  _Atomic int id_ready;
  nccl_id id;
  _Atomic unsigned long long wrong;
};

struct opts {
  int nranks, warmup, iters;
  size_t min_bytes, max_bytes;
  double factor;
};

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  size_t mult = *end == 'K' ? 1u << 10 : *end == 'M' ? 1u << 20 : *end == 'G' ? 1u << 30 : 1;
  return (size_t)(v * (double)mult);
}

static int load(const char *path, struct nccl_api *api) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "nccl_bench: %s\n", dlerror());
    return -1;
  }
#define SYM(field, name)                                              \
  if (!(*(void **)&api->field = dlsym(h, name))) {                    \
    fprintf(stderr, "nccl_bench: %s has no %s\n", path, name);        \
    return -1;                                                        \
  }
  SYM(get_version, "ncclGetVersion")
  SYM(get_unique_id, "ncclGetUniqueId")
  SYM(comm_init_rank, "ncclCommInitRank")
  SYM(all_reduce, "ncclAllReduce")
  SYM(comm_destroy, "ncclCommDestroy")
  SYM(error_string, "ncclGetErrorString")
#undef SYM
  return 0;
}

#define CK(call)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "nccl_bench rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_)); \
      _exit(1);                                                                       \
    }                                                                                 \
  } while (0)
#define NK(call)                                                                          \
  do {                                                                                    \
    int r_ = (call);                                                                      \
    if (r_ != 0) {                                                                        \
      fprintf(stderr, "nccl_bench rank %d: %s: %s\n", rank, #call, api.error_string(r_)); \
      _exit(1);                                                                           \
    }                                                                                     \
  } while (0)

static float input_value(int rank, size_t i) { return (float)((rank + 1) * (int)(i % 97 + 1)); }

static void run_rank(const char *lib, int rank, const struct opts *o, struct shared *sh) {
  struct nccl_api api;
  if (load(lib, &api) != 0) _exit(1);
  if (rank == 0) {
    NK(api.get_unique_id(&sh->id));
    atomic_store(&sh->id_ready, 1);
  } else {
    struct timespec ts = {0, 1000000};
    for (int waited = 0; !atomic_load(&sh->id_ready); waited++) {
      if (waited > 60000) {
        fprintf(stderr, "nccl_bench rank %d: no unique id from rank 0 in 60 s\n", rank);
        _exit(1);
      }
      nanosleep(&ts, NULL);
    }
  }
  CK(cudaSetDevice(0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  size_t max_count = o->max_bytes / sizeof(float);
  float *send, *recv, *host = malloc(max_count * sizeof(float) + 1);
  CK(cudaMalloc((void **)&send, max_count * sizeof(float) + 16));
  CK(cudaMalloc((void **)&recv, max_count * sizeof(float) + 16));
  for (size_t i = 0; i < max_count; i++) host[i] = input_value(rank, i);
  CK(cudaMemcpy(send, host, max_count * sizeof(float), cudaMemcpyHostToDevice));
  nccl_comm comm;
  NK(api.comm_init_rank(&comm, o->nranks, sh->id, rank));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  int version = 0;
  api.get_version(&version);
  if (rank == 0) {
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s: NCCL version code %d, %d rank(s) on GPU 0 (%s), float sum, out of place\n", lib,
           version, o->nranks, prop.name);
    printf("#%11s %12s %8s %6s %10s %8s %8s %6s\n", "size", "count", "type", "redop", "time",
           "algbw", "busbw", "#wrong");
    printf("#%11s %12s %8s %6s %10s %8s %8s %6s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
  }
  unsigned long long total_wrong = 0;
  for (size_t bytes = o->min_bytes; bytes <= o->max_bytes;) {
    size_t count = bytes / sizeof(float);
    for (int i = 0; i < o->warmup; i++)
      NK(api.all_reduce(send, recv, count, NCCL_FLOAT32, NCCL_SUM, comm, stream));
    CK(cudaStreamSynchronize(stream));
    CK(cudaMemset(recv, 0, count * sizeof(float) + 4));
    CK(cudaEventRecord(t0, stream));
    for (int i = 0; i < o->iters; i++)
      NK(api.all_reduce(send, recv, count, NCCL_FLOAT32, NCCL_SUM, comm, stream));
    CK(cudaEventRecord(t1, stream));
    CK(cudaEventSynchronize(t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    CK(cudaMemcpy(host, recv, count * sizeof(float), cudaMemcpyDeviceToHost));
    unsigned long long wrong = 0;
    int sum_ranks = o->nranks * (o->nranks + 1) / 2;
    for (size_t i = 0; i < count; i++)
      wrong += host[i] != (float)(sum_ranks * (int)(i % 97 + 1));
    total_wrong += wrong;
    double us = ms * 1000.0 / o->iters;
    double algbw = us > 0 ? (double)bytes / us / 1000.0 : 0;
    double busbw = algbw * 2.0 * (o->nranks - 1) / (o->nranks > 1 ? o->nranks : 1);
    if (o->nranks == 1) busbw = algbw;
    if (rank == 0) {
      printf("%12zu %12zu %8s %6s %10.2f %8.2f %8.2f %6llu\n", bytes, count, "float", "sum", us,
             algbw, busbw, wrong);
      fflush(stdout);
    }
    size_t next = (size_t)((double)bytes * o->factor);
    bytes = next > bytes ? next : bytes + 1;
  }
  atomic_fetch_add(&sh->wrong, total_wrong);
  NK(api.comm_destroy(comm));
  cudaFree(send);
  cudaFree(recv);
  _exit(0);
}

int main(int argc, char **argv) {
  struct opts o = {1, 5, 20, 8, 64u << 20, 2.0};
  int c;
  while ((c = getopt(argc, argv, "n:b:e:f:w:i:")) != -1) {
    switch (c) {
      case 'n': o.nranks = atoi(optarg); break;
      case 'b': o.min_bytes = parse_size(optarg); break;
      case 'e': o.max_bytes = parse_size(optarg); break;
      case 'f': o.factor = atof(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'i': o.iters = atoi(optarg); break;
      default: goto usage;
    }
  }
  if (optind >= argc || o.nranks < 1 || o.nranks > 64 || o.min_bytes < 4 ||
      o.max_bytes < o.min_bytes || o.factor <= 1.0 || o.iters < 1 || o.warmup < 0)
    goto usage;
  /* CUDA initialised in this process would be unusable in the forks, so a
   * child of its own asks whether there is a GPU. */
  pid_t probe = fork();
  if (probe == 0) {
    int ndev = 0;
    _exit(cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 ? 0 : 77);
  }
  int st;
  if (probe < 0 || waitpid(probe, &st, 0) != probe || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  int failed = 0;
  for (int l = optind; l < argc; l++) {
    struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    if (sh == MAP_FAILED) return 1;
    memset(sh, 0, sizeof(*sh));
    fflush(stdout);
    for (int r = 0; r < o.nranks; r++) {
      pid_t p = fork();
      if (p == 0) run_rank(argv[l], r, &o, sh);
      if (p < 0) return 1;
    }
    int bad = 0;
    while (wait(&st) > 0) bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    printf("# %s: %s, %llu wrong elements over all ranks\n", argv[l], bad ? "FAILED" : "done",
           (unsigned long long)atomic_load(&sh->wrong));
    failed |= bad || atomic_load(&sh->wrong) != 0;
    munmap(sh, sizeof(*sh));
  }
  return failed;
usage:
  fprintf(stderr,
          "usage: nccl_bench [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUP] [-i ITERS] "
          "LIBNCCL...\n");
  return 2;
}
