/* NCCL 2.28's fault-tolerance and newer calls through real processes, in C
 * against the real nccl.h and gcoll's libnccl.so.2
 * (tests/nccl/test_nccl_shrink.sh):
 *
 *   nccl_shrink_check MODE DIR      every rank, under gcollrun
 *
 * DIR stands in for the application's store (ids and "rank X died" travel
 * as files). The world communicator comes from an id made by rank 0.
 *
 *   kill      4 ranks. After one checked allreduce on the world, rank 1's
 *             NCCL process is killed with SIGKILL. gcollrun tears the job
 *             down when one of its ranks fails (non-zero exit or a signal),
 *             so rank 1 runs NCCL in a child of the process gcollrun
 *             started: the child is SIGKILLed, the parent reaps it, checks
 *             it died of SIGKILL, writes DIR/dead.1 and exits 0. The
 *             survivors, once told, start an allreduce on the world in a
 *             second thread (in flight: rank 1 never joins it), shrink the
 *             world with rank 1 excluded and NCCL_SHRINK_ABORT, check that
 *             the in-flight allreduce returned an error promptly, and check
 *             the new communicator (0, 2, 3 become 0, 1, 2) against a
 *             serial reference.
 *   exclude0  4 ranks, no failure: ranks 1-3 shrink the world without rank 0
 *             (alive, not calling; it hosts the world's store, so it waits
 *             until they are done). The in-flight allreduce can only end
 *             by the abort here. Then a second shrink of the same parent
 *             (NCCL_SHRINK_DEFAULT), a shrink of the shrunk communicator,
 *             and the argument refusals.
 *   revoke    ranks 1.. revoke the world while an allreduce rank 0 never
 *             joins is in flight (it must end at once), rank 0 revokes too;
 *             then the revoked world refuses operations, a second revoke
 *             and finalize, reports ncclSuccess as its state, shrinks (no
 *             rank excluded) into a working communicator, and is destroyed.
 *   scalable  ncclCommInitRankScalable with 2 ids (made by rank 0 and rank
 *             N/2, as NCCL's roots), its refusals, and the communicator.
 *   window    ncclCommWindowRegister/Deregister: handles, refusals, a
 *             window's buffer in an allreduce, destroy with one left.
 *   simulate  ncclGroupSimulateEnd: nothing runs, estimatedTime is
 *             NCCL_UNDEF_FLOAT, a short struct is not written past its
 *             size, refusals; a nested simulate and a NULL one; and
 *             ncclResetDebugInit.
 *
 * Inputs are small integers from (world rank, index, seed), so every rank
 * computes every expected value exactly. One line per rank ending in
 * ", 0 wrong" when all is right; exit 1 otherwise. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A failed expectation: counted, and said on stderr. */
static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: ", world_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  wrong++;
}

static int nccl_ok(ncclResult_t rc, ncclComm_t comm, const char *what) {
  calls++;
  if (rc == ncclSuccess) return 1;
  bad("%s: %s: %s", what, ncclGetErrorString(rc), ncclGetLastError(comm));
  return 0;
}

/* A call that must be refused with `want`. */
static void refused(ncclResult_t rc, ncclResult_t want, const char *what) {
  calls++;
  if (rc != want)
    bad("%s: got %s, expected %s (%s)", what, ncclGetErrorString(rc), ncclGetErrorString(want),
        ncclGetLastError(NULL));
}

/* ---- the "store": files in DIR ----------------------------------------- */

static void put_file(const char *name, const void *data, size_t len) {
  char tmp[4300], path[4200];
  snprintf(path, sizeof(path), "%s/%s", store_dir, name);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, world_rank);
  FILE *f = fopen(tmp, "wb");
  if (f == NULL || fwrite(data, len, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "rank %d: writing %s: %s\n", world_rank, path, strerror(errno));
    exit(2);
  }
}

static void get_file(const char *name, void *data, size_t len) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", store_dir, name);
  for (int tries = 0; tries < 6000; tries++) {
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
      size_t n = fread(data, len, 1, f);
      fclose(f);
      if (n == 1) return;
    }
    usleep(10000);
  }
  fprintf(stderr, "rank %d: nothing at %s after 60 s\n", world_rank, path);
  exit(2);
}

static ncclComm_t join_world(void) {
  ncclUniqueId id;
  if (world_rank == 0) {
    if (!nccl_ok(ncclGetUniqueId(&id), NULL, "ncclGetUniqueId")) exit(1);
    put_file("world.id", &id, sizeof(id));
  } else {
    get_file("world.id", &id, sizeof(id));
  }
  ncclComm_t comm = NULL;
  if (!nccl_ok(ncclCommInitRank(&comm, world_size, id, world_rank), NULL, "world init")) exit(1);
  return comm;
}

/* comm must be rank want_rank of want_size. */
static int is_rank(ncclComm_t comm, int want_rank, int want_size, const char *what) {
  int r = -1, n = -1;
  if (comm == NULL || ncclCommUserRank(comm, &r) != ncclSuccess ||
      ncclCommCount(comm, &n) != ncclSuccess || r != want_rank || n != want_size) {
    bad("%s: rank %d of %d, expected %d of %d", what, r, n, want_rank, want_size);
    return 0;
  }
  return 1;
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
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Allreduce (sum, max) and allgather over comm, whose members are the world
 * ranks members[0..n) in its rank order, against the serial reference. */
static void check_comm(ncclComm_t comm, const int *members, int n, unsigned seed,
                       const char *what) {
  size_t max = sizes[NSIZES - 1];
  float *buf = calloc(max * (size_t)n + 1, sizeof(float));
  float *out = calloc(max * (size_t)n + 1, sizeof(float));
  if (buf == NULL || out == NULL) exit(2);
  for (size_t s = 0; s < NSIZES; s++) {
    size_t count = sizes[s];
    for (int op = 0; op < 2; op++) {
      for (size_t i = 0; i < count; i++) buf[i] = input(world_rank, i, seed + (unsigned)s);
      if (!nccl_ok(ncclAllReduce(buf, out, count, ncclFloat, op ? ncclMax : ncclSum, comm, NULL),
                   comm, what))
        continue;
      for (size_t i = 0; i < count; i++) {
        float want = op ? -1e30f : 0;
        for (int m = 0; m < n; m++) {
          float v = input(members[m], i, seed + (unsigned)s);
          want = op ? (v > want ? v : want) : want + v;
        }
        if (out[i] != want) {
          bad("%s: allreduce of %zu: element %zu is %g, expected %g", what, count, i,
              (double)out[i], (double)want);
          break;
        }
      }
    }
    for (size_t i = 0; i < count; i++) buf[i] = input(world_rank, i, seed ^ 0x5a5a);
    if (!nccl_ok(ncclAllGather(buf, out, count, ncclFloat, comm, NULL), comm, what)) continue;
    for (int m = 0; m < n; m++)
      for (size_t i = 0; i < count; i++)
        if (out[(size_t)m * count + i] != input(members[m], i, seed ^ 0x5a5a)) {
          bad("%s: allgather of %zu: member %d element %zu", what, count, m, i);
          m = n;
          break;
        }
  }
  free(buf);
  free(out);
}

/* ---- an allreduce in flight on another thread ---------------------------- */

struct in_flight {
  ncclComm_t comm;
  ncclResult_t rc;
  double seconds;
  pthread_t thread;
};

static void *in_flight_main(void *arg) {
  struct in_flight *f = arg;
  static float v[1021];
  double t0 = now_s();
  f->rc = ncclAllReduce(v, v, 1021, ncclFloat, ncclSum, f->comm, NULL);
  f->seconds = now_s() - t0;
  return NULL;
}

static void start_in_flight(struct in_flight *f, ncclComm_t comm) {
  f->comm = comm;
  f->rc = ncclSuccess;
  if (pthread_create(&f->thread, NULL, in_flight_main, f) != 0) exit(2);
  usleep(300000);   /* let it get inside the allreduce */
}

/* The allreduce must have failed, and well before GCOLL_TIMEOUT (which
 * is what would end it without the abort). */
static void end_in_flight(struct in_flight *f, const char *what) {
  pthread_join(f->thread, NULL);
  int timeout = env_int("GCOLL_TIMEOUT");
  double limit = (timeout > 0 ? timeout : 60) / 2.0;
  calls++;
  if (f->rc == ncclSuccess)
    bad("%s: the allreduce in flight succeeded", what);
  else if (f->seconds > limit)
    bad("%s: the allreduce in flight took %.1f s to fail (limit %.0f s: half GCOLL_TIMEOUT)",
        what, f->seconds, limit);
}

/* ---- modes --------------------------------------------------------------- */

/* Rank 1's NCCL process is a child that dies by SIGKILL; see the top. */
static int kill_mode(void) {
  const int victim = 1;
  if (world_size != 4) {
    fprintf(stderr, "kill: run with 4 ranks\n");
    return 2;
  }
  if (world_rank == victim) {
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) return 2;
    if (child > 0) {
      int status = 0;
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
      int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      put_file("dead.1", "1", 1);
      printf("rank %d: kill: its NCCL process (pid %ld) %s after one allreduce; this parent "
             "exits 0 so that gcollrun keeps the job, %d wrong\n", world_rank, (long)child,
             killed ? "died of SIGKILL" : "did NOT die of SIGKILL", killed ? 0 : 1);
      return killed ? 0 : 1;
    }
  }
  ncclComm_t world = join_world();
  const int all[] = {0, 1, 2, 3}, survivors[] = {0, 2, 3};
  check_comm(world, all, 4, 1, "world allreduce before the kill");
  /* The victim dies only once every rank has its results: a collective
   * returns on the victim when its data is in the FIFOs, and on 2 virtual
   * nodes its proxy may still be sending when SIGKILL would land, which
   * would fail the survivors' checks above instead of the in-flight call
   * below. */
  char mark[32];
  snprintf(mark, sizeof(mark), "checked.%d", world_rank);
  put_file(mark, "1", 1);
  if (world_rank == victim) {
    for (int r = 0; r < 4; r++) {
      char other[32], one;
      snprintf(other, sizeof(other), "checked.%d", r);
      get_file(other, &one, 1);
    }
    raise(SIGKILL);   /* no destroy, no goodbye: a crash */
    _exit(3);
  }
  char dead;
  get_file("dead.1", &dead, 1);
  struct in_flight f;
  start_in_flight(&f, world);
  int exclude[] = {victim};
  ncclComm_t shrunk = NULL;
  double t0 = now_s();
  int shrunk_ok = nccl_ok(ncclCommShrink(world, exclude, 1, &shrunk, NULL, NCCL_SHRINK_ABORT),
                          world, "ncclCommShrink excluding the dead rank 1, NCCL_SHRINK_ABORT");
  double shrink_s = now_s() - t0;
  end_in_flight(&f, "kill");
  int want = world_rank == 0 ? 0 : world_rank - 1;
  if (shrunk_ok && is_rank(shrunk, want, 3, "shrunk world"))
    check_comm(shrunk, survivors, 3, 2, "allreduce on the shrunk world");
  static float v[16];
  calls++;
  if (ncclAllReduce(v, v, 16, ncclFloat, ncclSum, world, NULL) == ncclSuccess)
    bad("the aborted world ran an allreduce");
  if (shrunk != NULL) nccl_ok(ncclCommDestroy(shrunk), NULL, "destroy of the shrunk world");
  nccl_ok(ncclCommDestroy(world), NULL, "destroy of the aborted world");
  printf("rank %d: kill: rank 1 SIGKILLed, in-flight allreduce failed after %.2f s (%s), shrink "
         "%.2f s, rank %d of 3 now, %ld calls, %ld wrong\n", world_rank, f.seconds,
         ncclGetErrorString(f.rc), shrink_s, want, calls, wrong);
  return wrong == 0 ? 0 : 1;
}

static void shrink_refusals(ncclComm_t world) {
  ncclComm_t c = (ncclComm_t)1;
  int self[] = {world_rank}, range[] = {world_size}, negative[] = {-1}, twice[] = {0, 0};
  refused(ncclCommShrink(world, self, 1, &c, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink excluding the caller");
  if (c != NULL) bad("a refused shrink left *newcomm set");
  refused(ncclCommShrink(world, range, 1, &c, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink excluding rank nranks");
  refused(ncclCommShrink(world, negative, 1, &c, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink excluding rank -1");
  refused(ncclCommShrink(world, twice, 2, &c, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink excluding rank 0 twice");
  refused(ncclCommShrink(world, NULL, 1, &c, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink with a NULL list of 1");
  refused(ncclCommShrink(world, twice, -1, &c, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink with count -1");
  refused(ncclCommShrink(world, twice, 1, &c, NULL, 2), ncclInvalidArgument,
          "shrink with unknown flags");
  refused(ncclCommShrink(world, twice, 1, NULL, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink with newcomm NULL");
  refused(ncclCommShrink(NULL, twice, 1, &c, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink of NULL");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  refused(ncclCommShrink(world, twice, 1, &c, &config, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
          "shrink with an uninitialised config");
}

static int exclude0_mode(void) {
  if (world_size != 4) {
    fprintf(stderr, "exclude0: run with 4 ranks\n");
    return 2;
  }
  ncclComm_t world = join_world();
  const int all[] = {0, 1, 2, 3}, survivors[] = {1, 2, 3}, two[] = {1, 2};
  check_comm(world, all, 4, 3, "world allreduce");
  if (world_rank == 0) {
    /* Alive but excluded: never calls shrink; its process keeps the
     * world's store until the others are done with it. */
    char done;
    for (int r = 1; r < 4; r++) {
      char name[32];
      snprintf(name, sizeof(name), "done.%d", r);
      get_file(name, &done, 1);
    }
    nccl_ok(ncclCommDestroy(world), NULL, "destroy of the world");
    printf("rank 0: exclude0: excluded, took no part, %ld calls, %ld wrong\n", calls, wrong);
    return wrong == 0 ? 0 : 1;
  }
  shrink_refusals(world);
  struct in_flight f;
  start_in_flight(&f, world);
  int exclude[] = {0};
  ncclComm_t a = NULL, b = NULL, c = NULL;
  if (nccl_ok(ncclCommShrink(world, exclude, 1, &a, NULL, NCCL_SHRINK_ABORT), world,
              "shrink without rank 0, NCCL_SHRINK_ABORT") &&
      is_rank(a, world_rank - 1, 3, "first shrink"))
    check_comm(a, survivors, 3, 4, "allreduce on the first shrink");
  end_in_flight(&f, "exclude0 (only the abort can end it)");
  /* The same parent again (a second shrink count), now without abort. */
  if (nccl_ok(ncclCommShrink(world, exclude, 1, &b, NULL, NCCL_SHRINK_DEFAULT), world,
              "second shrink of the aborted world, NCCL_SHRINK_DEFAULT") &&
      is_rank(b, world_rank - 1, 3, "second shrink"))
    check_comm(b, survivors, 3, 5, "allreduce on the second shrink");
  /* The shrunk communicator shrinks too: its rank 2 (world rank 3) leaves. */
  if (a != NULL && world_rank != 3) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    int last[] = {2};
    if (nccl_ok(ncclCommShrink(a, last, 1, &c, &config, NCCL_SHRINK_DEFAULT), a,
                "shrink of the shrunk world") &&
        is_rank(c, world_rank - 1, 2, "shrink of a shrink"))
      check_comm(c, two, 2, 6, "allreduce on the shrink of a shrink");
  }
  static float v[16];
  calls++;
  if (ncclAllReduce(v, v, 16, ncclFloat, ncclSum, world, NULL) == ncclSuccess)
    bad("the aborted world ran an allreduce");
  if (c != NULL) nccl_ok(ncclCommDestroy(c), NULL, "destroy");
  if (b != NULL) nccl_ok(ncclCommDestroy(b), NULL, "destroy");
  if (a != NULL) nccl_ok(ncclCommDestroy(a), NULL, "destroy");
  nccl_ok(ncclCommDestroy(world), NULL, "destroy of the aborted world");
  char name[32];
  snprintf(name, sizeof(name), "done.%d", world_rank);
  put_file(name, "1", 1);
  printf("rank %d: exclude0: in-flight allreduce aborted after %.2f s (%s), 3 shrinks, "
         "%ld calls, %ld wrong\n", world_rank, f.seconds, ncclGetErrorString(f.rc), calls, wrong);
  return wrong == 0 ? 0 : 1;
}

static int revoke_mode(void) {
  ncclComm_t world = join_world();
  int *all = malloc(sizeof(int) * (size_t)world_size);
  if (all == NULL) return 2;
  for (int i = 0; i < world_size; i++) all[i] = i;
  check_comm(world, all, world_size, 7, "world allreduce");
  refused(ncclCommRevoke(world, 1), ncclInvalidArgument, "revoke with flags 1");
  nccl_ok(ncclCommRevoke(NULL, NCCL_REVOKE_DEFAULT), NULL, "revoke of NULL");
  struct in_flight f = {.rc = ncclInternalError};
  if (world_rank > 0) start_in_flight(&f, world);   /* rank 0 never joins it */
  nccl_ok(ncclCommRevoke(world, NCCL_REVOKE_DEFAULT), world, "revoke");
  if (world_rank > 0) end_in_flight(&f, "revoke (only the revoke can end it)");
  refused(ncclCommRevoke(world, NCCL_REVOKE_DEFAULT), ncclInvalidArgument, "a second revoke");
  static float v[16];
  refused(ncclAllReduce(v, v, 16, ncclFloat, ncclSum, world, NULL), ncclInvalidUsage,
          "allreduce on a revoked communicator");
  refused(ncclSend(v, 16, ncclFloat, (world_rank + 1) % world_size, world, NULL),
          ncclInvalidUsage, "send on a revoked communicator");
  refused(ncclCommFinalize(world), ncclInvalidArgument, "finalize after revoke");
  ncclResult_t state = ncclInternalError;
  if (nccl_ok(ncclCommGetAsyncError(world, &state), world, "async error after revoke") &&
      state != ncclSuccess)
    bad("a revoked, quiescent communicator's state is %s, not ncclSuccess",
        ncclGetErrorString(state));
  ncclComm_t again = NULL;
  if (nccl_ok(ncclCommShrink(world, NULL, 0, &again, NULL, NCCL_SHRINK_DEFAULT), world,
              "shrink of the revoked world, no rank excluded") &&
      is_rank(again, world_rank, world_size, "shrink after revoke"))
    check_comm(again, all, world_size, 8, "allreduce after revoke and shrink");
  if (again != NULL) nccl_ok(ncclCommDestroy(again), NULL, "destroy");
  nccl_ok(ncclCommDestroy(world), NULL, "destroy of the revoked world");
  free(all);
  printf("rank %d: revoke: in-flight allreduce ended after %.2f s, %ld calls, %ld wrong\n",
         world_rank, world_rank > 0 ? f.seconds : 0.0, calls, wrong);
  return wrong == 0 ? 0 : 1;
}

static int scalable_mode(void) {
  /* NCCL's roots for 2 ids: the first rank of each half. */
  int second_root = world_size / 2;
  ncclUniqueId ids[2];
  if (world_rank == 0 || world_rank == second_root) {
    int which = world_rank == 0 ? 0 : 1;
    if (!nccl_ok(ncclGetUniqueId(&ids[which]), NULL, "ncclGetUniqueId")) return 1;
    put_file(which ? "scal.1" : "scal.0", &ids[which], sizeof(ids[which]));
  }
  get_file("scal.0", &ids[0], sizeof(ids[0]));
  get_file("scal.1", &ids[1], sizeof(ids[1]));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER, bad_config = NCCL_CONFIG_INITIALIZER;
  bad_config.magic = 0;
  ncclComm_t c = (ncclComm_t)1;
  refused(ncclCommInitRankScalable(&c, world_size, world_rank, 0, ids, &config),
          ncclInvalidArgument, "scalable init with nId 0");
  if (c != NULL) bad("a refused scalable init left *newcomm set");
  refused(ncclCommInitRankScalable(&c, world_size, world_rank, world_size + 1, ids, &config),
          ncclInvalidArgument, "scalable init with more ids than ranks");
  refused(ncclCommInitRankScalable(&c, world_size, world_rank, 2, NULL, &config),
          ncclInvalidArgument, "scalable init with commIds NULL");
  refused(ncclCommInitRankScalable(&c, world_size, world_rank, 2, ids, &bad_config),
          ncclInvalidArgument, "scalable init with an uninitialised config");
  refused(ncclCommInitRankScalable(NULL, world_size, world_rank, 2, ids, &config),
          ncclInvalidArgument, "scalable init with newcomm NULL");
  refused(ncclCommInitRankScalable(&c, world_size, world_size, 2, ids, &config),
          ncclInvalidArgument, "scalable init with rank nranks");
  int *all = malloc(sizeof(int) * (size_t)world_size);
  if (all == NULL) return 2;
  for (int i = 0; i < world_size; i++) all[i] = i;
  if (nccl_ok(ncclCommInitRankScalable(&c, world_size, world_rank, 2, ids, &config), NULL,
              "ncclCommInitRankScalable with 2 ids") &&
      is_rank(c, world_rank, world_size, "scalable init")) {
    check_comm(c, all, world_size, 9, "allreduce after scalable init");
    nccl_ok(ncclCommDestroy(c), NULL, "destroy");
  }
  free(all);
  printf("rank %d: scalable: 2 ids, %ld calls, %ld wrong\n", world_rank, calls, wrong);
  return wrong == 0 ? 0 : 1;
}

static int window_mode(void) {
  ncclComm_t world = join_world();
  ncclComm_t other = NULL;
  if (!nccl_ok(ncclCommSplit(world, 0, world_rank, &other, NULL), world, "split")) return 1;
  enum { N = 4096 };
  float *buf = aligned_alloc(NCCL_WIN_REQUIRED_ALIGNMENT, N * sizeof(float));
  float *buf2 = aligned_alloc(NCCL_WIN_REQUIRED_ALIGNMENT, N * sizeof(float));
  if (buf == NULL || buf2 == NULL) return 2;
  ncclWindow_t win = (ncclWindow_t)1, win2 = NULL;
  refused(ncclCommWindowRegister(world, buf, sizeof(float) * N, NULL, NCCL_WIN_DEFAULT),
          ncclInvalidArgument, "window register with win NULL");
  refused(ncclCommWindowRegister(NULL, buf, sizeof(float) * N, &win, NCCL_WIN_DEFAULT),
          ncclInvalidArgument, "window register on comm NULL");
  if (win != NULL) bad("a refused window register left *win set");
  refused(ncclCommWindowRegister(world, NULL, sizeof(float) * N, &win, NCCL_WIN_DEFAULT),
          ncclInvalidArgument, "window register of NULL");
  refused(ncclCommWindowRegister(world, buf, 0, &win, NCCL_WIN_DEFAULT), ncclInvalidArgument,
          "window register of 0 bytes");
  refused(ncclCommWindowRegister(world, buf, sizeof(float) * N, &win, 0x80), ncclInvalidArgument,
          "window register with unknown flags");
  if (nccl_ok(ncclCommWindowRegister(world, buf, sizeof(float) * N, &win,
                                     NCCL_WIN_COLL_SYMMETRIC),
              world, "window register, symmetric") &&
      win == NULL)
    bad("window register gave a NULL window");
  nccl_ok(ncclCommWindowRegister(world, buf2, sizeof(float) * N, &win2, NCCL_WIN_DEFAULT), world,
          "window register, default");
  /* A window's buffer is a buffer like any other. */
  for (int i = 0; i < N; i++) buf[i] = input(world_rank, (size_t)i, 10);
  if (nccl_ok(ncclAllReduce(buf, buf, N, ncclFloat, ncclSum, world, NULL), world,
              "allreduce in a window"))
    for (int i = 0; i < N; i++) {
      float want = 0;
      for (int m = 0; m < world_size; m++) want += input(m, (size_t)i, 10);
      if (buf[i] != want) {
        bad("allreduce in a window: element %d", i);
        break;
      }
    }
  struct { int junk[8]; } not_a_window = {{0}};
  refused(ncclCommWindowDeregister(other, win), ncclInvalidArgument,
          "deregister of another communicator's window");
  refused(ncclCommWindowDeregister(world, (ncclWindow_t)(void *)&not_a_window),
          ncclInvalidArgument, "deregister of something not a window");
  refused(ncclCommWindowDeregister(NULL, win), ncclInvalidArgument, "deregister on comm NULL");
  nccl_ok(ncclCommWindowDeregister(world, NULL), world, "deregister of NULL");
  nccl_ok(ncclCommWindowDeregister(world, win), world, "deregister");
  refused(ncclCommWindowDeregister(world, win), ncclInvalidArgument, "a second deregister");
  /* win2 stays registered: destroy frees it. */
  nccl_ok(ncclCommDestroy(other), NULL, "destroy");
  nccl_ok(ncclCommDestroy(world), NULL, "destroy with a window registered");
  free(buf);
  free(buf2);
  printf("rank %d: window: %ld calls, %ld wrong\n", world_rank, calls, wrong);
  return wrong == 0 ? 0 : 1;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void reset_debug_init(void) { ncclResetDebugInit(); }
#pragma GCC diagnostic pop

static int simulate_mode(void) {
  ncclComm_t world = join_world();
  enum { N = 1021 };
  static float in[N], out[N];
  const float sentinel = 12345.0f;
  float want0 = 0;
  for (int i = 0; i < N; i++) in[i] = input(world_rank, (size_t)i, 11);
  for (int m = 0; m < world_size; m++) want0 += input(m, 0, 11);
  ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
  refused(ncclGroupSimulateEnd(&si), ncclInvalidUsage, "simulate end outside a group");

  /* Simulated: nothing runs, the group is closed. */
  for (int i = 0; i < N; i++) out[i] = sentinel;
  ncclGroupStart();
  ncclAllReduce(in, out, N, ncclFloat, ncclSum, world, NULL);
  si.estimatedTime = 42.0f;
  if (nccl_ok(ncclGroupSimulateEnd(&si), world, "simulate end") &&
      si.estimatedTime != NCCL_UNDEF_FLOAT)
    bad("estimatedTime is %g, not NCCL_UNDEF_FLOAT", (double)si.estimatedTime);
  if (out[0] != sentinel) bad("a simulated group ran its allreduce");
  refused(ncclGroupEnd(), ncclInvalidUsage, "group end after simulate end");

  /* An older, shorter struct: nothing past its size is written. */
  ncclSimInfo_t short_si = NCCL_SIM_INFO_INITIALIZER;
  short_si.size = offsetof(ncclSimInfo_t, estimatedTime);
  short_si.estimatedTime = 42.0f;
  ncclGroupStart();
  ncclAllReduce(in, out, N, ncclFloat, ncclSum, world, NULL);
  if (nccl_ok(ncclGroupSimulateEnd(&short_si), world, "simulate end, short struct") &&
      short_si.estimatedTime != 42.0f)
    bad("simulate end wrote past a short struct's size");

  /* A struct not from NCCL_SIM_INFO_INITIALIZER: refused, group dropped. */
  ncclSimInfo_t raw;
  memset(&raw, 0, sizeof(raw));
  raw.size = sizeof(raw);
  ncclGroupStart();
  ncclAllReduce(in, out, N, ncclFloat, ncclSum, world, NULL);
  refused(ncclGroupSimulateEnd(&raw), ncclInvalidArgument, "simulate end, magic 0");
  if (out[0] != sentinel) bad("a refused simulate ran its group");
  refused(ncclGroupEnd(), ncclInvalidUsage, "group end after a refused simulate end");

  /* Nested: the inner simulate only closes a level; the outer end runs. */
  ncclGroupStart();
  ncclGroupStart();
  ncclAllReduce(in, out, N, ncclFloat, ncclSum, world, NULL);
  nccl_ok(ncclGroupSimulateEnd(&si), world, "inner simulate end");
  if (nccl_ok(ncclGroupEnd(), world, "outer group end") && out[0] != want0)
    bad("the outer group end did not run the allreduce (%g, expected %g)", (double)out[0],
        (double)want0);

  /* NULL: a real group end, as NCCL's code. */
  out[0] = sentinel;
  ncclGroupStart();
  ncclAllReduce(in, out, N, ncclFloat, ncclSum, world, NULL);
  if (nccl_ok(ncclGroupSimulateEnd(NULL), world, "simulate end with NULL") && out[0] != want0)
    bad("simulate end with NULL did not run the group");

  reset_debug_init();
  const int *members = NULL;
  int *all = malloc(sizeof(int) * (size_t)world_size);
  if (all == NULL) return 2;
  for (int i = 0; i < world_size; i++) all[i] = i;
  members = all;
  check_comm(world, members, world_size, 12, "allreduce after the simulations");
  free(all);
  nccl_ok(ncclCommDestroy(world), NULL, "destroy");
  printf("rank %d: simulate: %ld calls, %ld wrong\n", world_rank, calls, wrong);
  return wrong == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nccl_shrink_check kill|exclude0|revoke|scalable|window|simulate DIR\n");
    return 2;
  }
  world_rank = env_int("GCOLL_RANK");
  world_size = env_int("GCOLL_NRANKS");
  if (world_rank < 0 || world_size <= world_rank) {
    fprintf(stderr, "nccl_shrink_check: run under gcollrun (no GCOLL_RANK/GCOLL_NRANKS)\n");
    return 2;
  }
  store_dir = argv[2];
  const char *mode = argv[1];
  if (strcmp(mode, "kill") == 0) return kill_mode();
  if (strcmp(mode, "exclude0") == 0) return exclude0_mode();
  if (strcmp(mode, "revoke") == 0) return revoke_mode();
  if (strcmp(mode, "scalable") == 0) return scalable_mode();
  if (strcmp(mode, "window") == 0) return window_mode();
  if (strcmp(mode, "simulate") == 0) return simulate_mode();
  fprintf(stderr, "nccl_shrink_check: unknown mode %s\n", mode);
  return 2;
}
