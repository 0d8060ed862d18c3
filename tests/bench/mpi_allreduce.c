/* The Open MPI side of tests/bench/compare-mpi.sh: the same size sweep,
 * options and output columns as gcoll-perf, timing MPI_Allreduce (and
 * MPI_Bcast, MPI_Reduce, MPI_Allgather, MPI_Reduce_scatter_block).
 *
 *   mpicc -O2 -o mpi_allreduce tests/bench/mpi_allreduce.c
 *   mpirun -np 2 ./mpi_allreduce -o allreduce -b 8 -e 128M -f 4 -t float -r sum
 *
 * Buffers are allocated and touched once for the largest size, exactly as
 * gcoll-perf does, so both sides are timed on warm memory and any
 * difference comes from the libraries. Inputs are small integers whose
 * reductions are exact in every type and order; each rank regenerates all
 * inputs to check its result. Standalone: it does not link gcoll. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum coll { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, NCOLLS };
static const char *const coll_names[NCOLLS] = {"allreduce", "broadcast", "reduce", "allgather",
                                               "reducescatter"};

struct type_info {
  const char *name;
  MPI_Datatype mpi;
  size_t size;
  double limit; /* largest magnitude every partial result may reach exactly */
  int is_unsigned;
};

enum op { SUM, PROD, MAX, MIN, NOPS };
static const char *const op_names[NOPS] = {"sum", "prod", "max", "min"};

struct opts {
  int coll, type, op;
  size_t minbytes, maxbytes, stepbytes, stepfactor;
  long root, warmup, iters;
  int check;
};

static struct type_info types[] = {
    {"int8", MPI_INT8_T, 1, 127, 0},          {"uint8", MPI_UINT8_T, 1, 255, 1},
    {"int32", MPI_INT32_T, 4, 2147483647.0, 0}, {"uint32", MPI_UINT32_T, 4, 4294967295.0, 1},
    {"int64", MPI_INT64_T, 8, 9007199254740992.0, 0},
    {"uint64", MPI_UINT64_T, 8, 9007199254740992.0, 1},
    {"float", MPI_FLOAT, 4, 16777216.0, 0},   {"double", MPI_DOUBLE, 8, 9007199254740992.0, 0},
};
#define NTYPES ((int)(sizeof(types) / sizeof(types[0])))

static int rank, nranks;

static void usage_error(const char *fmt, const char *arg) {
  if (rank == 0) {
    fprintf(stderr, "mpi_allreduce: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
  }
  MPI_Finalize();
  exit(2);
}

static size_t parse_size(const char *s) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift) end++;
  if (*s < '0' || *s > '9' || errno || *end || v > (1ull << 40) >> shift)
    usage_error("'%s' is not a size", s);
  return (size_t)(v << shift);
}

static long parse_long(const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end || errno || v < lo || v > hi) usage_error("'%s': bad number", s);
  return v;
}

static int lookup(const char *s, const char *const *names, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return i;
  usage_error(what, s);
  return -1;
}

static void parse_args(int argc, char **argv, struct opts *o) {
  const char *tnames[NTYPES];
  for (int i = 0; i < NTYPES; i++) tnames[i] = types[i].name;
  *o = (struct opts){ALLREDUCE, 6, SUM, 32u << 20, 32u << 20, 1u << 20, 2, 0, 5, 20, 1};
  int ch;
  while ((ch = getopt(argc, argv, "o:b:e:f:i:t:d:r:R:w:n:c:z:")) != -1) {
    switch (ch) {
    case 'o': o->coll = lookup(optarg, coll_names, NCOLLS, "unknown collective '%s'"); break;
    case 'b': o->minbytes = parse_size(optarg); break;
    case 'e': o->maxbytes = parse_size(optarg); break;
    case 'f': o->stepfactor = (size_t)parse_long(optarg, 1, 1 << 20); break;
    case 'i': o->stepbytes = parse_size(optarg); o->stepfactor = 1; break;
    case 't': case 'd': o->type = lookup(optarg, tnames, NTYPES, "unsupported type '%s'"); break;
    case 'r': o->op = lookup(optarg, op_names, NOPS, "unsupported op '%s'"); break;
    case 'R': o->root = parse_long(optarg, 0, INT_MAX); break;
    case 'w': o->warmup = parse_long(optarg, 0, 100000000); break;
    case 'n': o->iters = parse_long(optarg, 1, 100000000); break;
    case 'c': o->check = (int)parse_long(optarg, 0, 1); break;
    case 'z': break;
    default: usage_error("bad option%s (see the top of mpi_allreduce.c)", "");
    }
  }
  if (o->minbytes > o->maxbytes || o->root >= nranks ||
      (o->stepfactor == 1 && o->stepbytes == 0 && o->minbytes < o->maxbytes) ||
      (o->stepfactor > 1 && o->minbytes == 0 && o->maxbytes > 0))
    usage_error("inconsistent -b/-e/-f/-i/-R%s", "");
}

static size_t next_size(const struct opts *o, size_t size) {
  if (size >= o->maxbytes) return 0;
  if (o->stepfactor > 1) return size > o->maxbytes / o->stepfactor ? 0 : size * o->stepfactor;
  return o->stepbytes > o->maxbytes - size ? 0 : size + o->stepbytes;
}

static unsigned char *alloc_touched(size_t bytes) {
  size_t huge = 2u << 20, len = (bytes + huge - 1) / huge * huge + huge;
  void *p = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  unsigned char *a = (unsigned char *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
  madvise(a, len, MADV_HUGEPAGE);
  memset(a, 0, len);
  return a;
}

/* ---- data ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double input_value(const struct opts *o, uint64_t seed, int r, size_t i) {
  const struct type_info *t = &types[o->type];
  uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1) + 0xd6e8feb86659fd93ull * (r + 1));
  if (o->op == PROD) {
    double mag = (h & 1) && (double)(1ull << (nranks < 62 ? nranks : 62)) <= t->limit ? 2 : 1;
    return (h & 2) && !t->is_unsigned ? -mag : mag;
  }
  double k = o->op == SUM ? t->limit / nranks : t->limit;
  if (k > 1000) k = 1000;
  if (k < 1) k = 1;
  uint64_t span = (uint64_t)k;
  if (t->is_unsigned) return (double)(h % (span + 1));
  return (double)(int64_t)(h % (2 * span + 1)) - (double)span;
}

static void set_elem(void *buf, size_t i, int type, double v) {
  switch (type) {
  case 0: ((int8_t *)buf)[i] = (int8_t)v; break;
  case 1: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case 2: ((int32_t *)buf)[i] = (int32_t)v; break;
  case 3: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case 4: ((int64_t *)buf)[i] = (int64_t)v; break;
  case 5: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case 6: ((float *)buf)[i] = (float)v; break;
  default: ((double *)buf)[i] = v; break;
  }
}

static double get_elem(const void *buf, size_t i, int type) {
  switch (type) {
  case 0: return ((const int8_t *)buf)[i];
  case 1: return ((const uint8_t *)buf)[i];
  case 2: return ((const int32_t *)buf)[i];
  case 3: return ((const uint32_t *)buf)[i];
  case 4: return (double)((const int64_t *)buf)[i];
  case 5: return (double)((const uint64_t *)buf)[i];
  case 6: return ((const float *)buf)[i];
  default: return ((const double *)buf)[i];
  }
}

static void fill(const struct opts *o, uint64_t seed, void *buf, int r, size_t first, size_t n) {
  for (size_t i = 0; i < n; i++) set_elem(buf, i, o->type, input_value(o, seed, r, first + i));
}

static double reduced(const struct opts *o, uint64_t seed, size_t i) {
  double acc = input_value(o, seed, 0, i);
  for (int r = 1; r < nranks; r++) {
    double v = input_value(o, seed, r, i);
    switch (o->op) {
    case SUM: acc += v; break;
    case PROD: acc *= v; break;
    case MAX: acc = v > acc ? v : acc; break;
    default: acc = v < acc ? v : acc; break;
    }
  }
  return acc;
}

/* ---- one case --------------------------------------------------------------- */

struct run {
  const struct opts *o;
  unsigned char *send, *recv;
  size_t count; /* per rank for allgather and reducescatter */
  int inplace;
  MPI_Op mop;
};

static void call(const struct run *x) {
  const struct opts *o = x->o;
  MPI_Datatype dt = types[o->type].mpi;
  int c = (int)x->count, root = (int)o->root;
  switch (o->coll) {
  case ALLREDUCE:
    MPI_Allreduce(x->inplace ? MPI_IN_PLACE : x->send, x->recv, c, dt, x->mop, MPI_COMM_WORLD);
    break;
  case BROADCAST: MPI_Bcast(x->recv, c, dt, root, MPI_COMM_WORLD); break;
  case REDUCE:
    if (x->inplace)
      /* Non-roots' recvbuf is not significant: NULL avoids aliasing it. */
      MPI_Reduce(rank == root ? MPI_IN_PLACE : x->recv, rank == root ? x->recv : NULL, c, dt,
                 x->mop, root, MPI_COMM_WORLD);
    else
      MPI_Reduce(x->send, x->recv, c, dt, x->mop, root, MPI_COMM_WORLD);
    break;
  case ALLGATHER:
    if (x->inplace)
      MPI_Allgather(MPI_IN_PLACE, c, dt, x->recv, c, dt, MPI_COMM_WORLD);
    else
      MPI_Allgather(x->send, c, dt, x->recv, c, dt, MPI_COMM_WORLD);
    break;
  default:
    MPI_Reduce_scatter_block(x->inplace ? MPI_IN_PLACE : x->send, x->recv, c, dt, x->mop,
                             MPI_COMM_WORLD);
    break;
  }
}

static double time_calls(const struct run *x) {
  for (long i = 0; i < x->o->warmup; i++) call(x);
  MPI_Barrier(MPI_COMM_WORLD); /* as gcoll-perf and nccl-tests: loops start together */
  double t0 = MPI_Wtime();
  for (long i = 0; i < x->o->iters; i++) call(x);
  double sec = (MPI_Wtime() - t0) / (double)x->o->iters;
  MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return sec;
}

static long long count_wrong(const struct run *x, uint64_t seed) {
  const struct opts *o = x->o;
  size_t n = x->count, wrong = 0;
  for (size_t i = 0; i < n; i++) {
    switch (o->coll) {
    case ALLREDUCE: wrong += get_elem(x->recv, i, o->type) != reduced(o, seed, i); break;
    case BROADCAST:
      wrong += get_elem(x->recv, i, o->type) != input_value(o, seed, (int)o->root, i);
      break;
    case REDUCE:
      if (rank == o->root) wrong += get_elem(x->recv, i, o->type) != reduced(o, seed, i);
      break;
    case ALLGATHER:
      for (int r = 0; r < nranks; r++)
        wrong += get_elem(x->recv, (size_t)r * n + i, o->type) != input_value(o, seed, r, i);
      break;
    default:
      wrong += get_elem(x->recv, i, o->type) != reduced(o, seed, (size_t)rank * n + i);
      break;
    }
  }
  long long total = (long long)wrong;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

/* Puts this rank's input where the call reads it, then runs it once. */
static long long check(const struct run *x, uint64_t seed) {
  const struct opts *o = x->o;
  size_t ts = types[o->type].size, n = x->count;
  size_t in_n = o->coll == REDUCESCATTER ? n * (size_t)nranks : n;
  unsigned char *in = x->inplace ? x->recv : x->send;
  if (o->coll == BROADCAST) in = x->recv;
  if (x->inplace && o->coll == ALLGATHER) in = x->recv + (size_t)rank * n * ts;
  memset(x->recv, 0xA5, (o->coll == ALLGATHER || o->coll == REDUCESCATTER ? n * nranks : n) * ts);
  fill(o, seed, in, rank, 0, in_n);
  call(x);
  return count_wrong(x, seed);
}

static void print_result(double sec, size_t bytes, double factor, long long wrong, double *bwsum) {
  double us = sec * 1e6, algbw = sec > 0 ? (double)bytes / sec / 1e9 : 0;
  char wrong_s[32];
  if (wrong < 0)
    snprintf(wrong_s, sizeof(wrong_s), "N/A");
  else
    snprintf(wrong_s, sizeof(wrong_s), "%lld", wrong);
  *bwsum += algbw * factor;
  if (rank != 0) return;
  printf("  %7.*f  %6.2f  %6.2f  %5s", us >= 10000 ? 0 : us >= 100 ? 1 : 2, us, algbw,
         algbw * factor, wrong_s);
}

static void print_header(const struct opts *o) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  version[strcspn(version, ",\n")] = '\0'; /* "Open MPI v4.1.4" */
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  printf("# mpi_allreduce: %s, %s, nranks %d minBytes %zu maxBytes %zu ", version,
         coll_names[o->coll], nranks, o->minbytes, o->maxbytes);
  if (o->stepfactor > 1)
    printf("step: %zu(factor)", o->stepfactor);
  else
    printf("step: %zu(bytes)", o->stepbytes);
  printf(" warmup iters: %ld iters: %ld validation: %d\n#\n# Using devices\n", o->warmup,
         o->iters, o->check);
  printf("#  Rank %2d Pid %6d on %10s device host memory\n", rank, (int)getpid(), host);
  printf("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
         "          \n",
         "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
         "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  struct opts o;
  parse_args(argc, argv, &o);
  const MPI_Op mops[NOPS] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  size_t ts = types[o.type].size;
  int split = o.coll == ALLGATHER || o.coll == REDUCESCATTER;
  int rooted = o.coll == BROADCAST || o.coll == REDUCE, has_op = rooted ? o.coll == REDUCE
                                                                         : o.coll != ALLGATHER;
  double factor = o.coll == ALLREDUCE ? 2.0 * (nranks - 1) / nranks
                  : split             ? (double)(nranks - 1) / nranks
                                      : 1.0;
  struct run x = {&o, alloc_touched(o.maxbytes), alloc_touched(o.maxbytes), 0, 0, mops[o.op]};
  if (x.send == NULL || x.recv == NULL) {
    fprintf(stderr, "mpi_allreduce: cannot allocate 2 x %zu bytes\n", o.maxbytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) print_header(&o);
  long long wrong_total = 0;
  double bwsum = 0;
  int nbw = 0;
  for (size_t size = o.minbytes;;) {
    x.count = split ? size / ts / (size_t)nranks : size / ts;
    if (x.count > INT_MAX) usage_error("%s: count too large for MPI", "-e");
    size_t bytes = x.count * ts * (split ? (size_t)nranks : 1);
    if (rank == 0)
      printf("%12zu  %12zu  %8s  %6s  %6d", bytes, x.count, types[o.type].name,
             has_op ? op_names[o.op] : "none", rooted ? (int)o.root : -1);
    for (x.inplace = 0; x.inplace < 2; x.inplace++) {
      double sec = time_calls(&x);
      long long wrong = o.check ? check(&x, 0x6763f11ba5e5ull ^ size ^ ((uint64_t)x.inplace << 40))
                                : -1;
      if (wrong > 0) wrong_total += wrong;
      print_result(sec, bytes, factor, wrong, &bwsum);
      nbw++;
    }
    if (rank == 0) {
      printf("\n");
      fflush(stdout);
    }
    size = next_size(&o, size);
    if (size == 0) break;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", nbw ? bwsum / nbw : 0);
  }
  MPI_Finalize();
  return wrong_total != 0;
}
