/* The init paths without a launcher: gcollCommInitAll (ranks as threads of
 * this process, bootstrap "local") and gcollGetUniqueId + gcollCommInitRank
 * (ranks as forked processes around the library's own TCP store).
 *
 * Every rank runs allreduce, allgather and broadcast on inputs that are a
 * function of (seed, rank, index), so each rank computes the expected
 * result serially for itself. Values are small integers, which keeps sums
 * and products exact whatever order the algorithm reduces in, so results
 * are compared exactly. After destroy, no shm name of the job and no plan
 * directory may be left behind. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>

#include "gcoll.h"
#include "runtime/comm.h"
#include "runtime/transport.h"
#include "testutil.h"

static char tmpdir[256];

/* Input element i of rank r: an integer in [-range, range]. */
static int64_t input(uint64_t seed, int r, size_t i, int range) {
  return test_rank_input(seed, r, i, range);
}

/* Counts of elements tried: tiny, odd, and several slots' worth. */
static const size_t counts[] = {1, 7, 1000, 65537, 300001};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

/* Runs the whole sequence as one rank; returns the number of wrong
 * elements plus failed calls (cmocka's asserts are for the main thread). */
static long run_rank(gcollComm_t comm, uint64_t seed) {
  int rank = -1, nranks = 0;
  long bad = 0;
  if (gcollCommUserRank(comm, &rank) != gcollSuccess ||
      gcollCommCount(comm, &nranks) != gcollSuccess || nranks < 1)
    return 1;
  size_t maxc = counts[NCOUNTS - 1];
  int64_t *send = malloc(maxc * sizeof(int64_t) * (size_t)nranks);
  int64_t *recv = malloc(maxc * sizeof(int64_t) * (size_t)nranks);
  float *fsend = malloc(maxc * sizeof(float)), *frecv = malloc(maxc * sizeof(float));
  if (!send || !recv || !fsend || !frecv) {
    bad = 1;
    goto out;
  }
  for (size_t k = 0; k < NCOUNTS; k++) {
    size_t n = counts[k];
    uint64_t s = seed + k;
    /* int64 sum */
    for (size_t i = 0; i < n; i++) send[i] = input(s, rank, i, 1000000);
    if (gcollAllReduce(send, recv, n, gcollInt64, gcollSum, comm, NULL) != gcollSuccess) bad++;
    for (size_t i = 0; i < n; i++) {
      int64_t want = 0;
      for (int r = 0; r < nranks; r++) want += input(s, r, i, 1000000);
      bad += recv[i] != want;
    }
    /* float max, in place */
    for (size_t i = 0; i < n; i++) fsend[i] = (float)input(s + 100, rank, i, 50);
    if (gcollAllReduce(fsend, fsend, n, gcollFloat, gcollMax, comm, NULL) != gcollSuccess) bad++;
    for (size_t i = 0; i < n; i++) {
      float want = -1000.0f;
      for (int r = 0; r < nranks; r++) {
        float v = (float)input(s + 100, r, i, 50);
        if (v > want) want = v;
      }
      bad += fsend[i] != want;
    }
    /* allgather */
    for (size_t i = 0; i < n; i++) send[i] = input(s + 200, rank, i, 1 << 30);
    if (gcollAllGather(send, recv, n, gcollInt64, comm, NULL) != gcollSuccess) bad++;
    for (int r = 0; r < nranks; r++)
      for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != input(s + 200, r, i, 1 << 30);
    /* broadcast from a root that moves with the size */
    int root = (int)(k % (size_t)nranks);
    for (size_t i = 0; i < n; i++) recv[i] = rank == root ? input(s + 300, root, i, 1 << 30) : -1;
    if (gcollBroadcast(recv, recv, n, gcollInt64, root, comm, NULL) != gcollSuccess) bad++;
    for (size_t i = 0; i < n; i++) bad += recv[i] != input(s + 300, root, i, 1 << 30);
  }
out:
  free(send);
  free(recv);
  free(fsend);
  free(frecv);
  return bad;
}

struct rank_job {
  gcollComm_t comm;
  uint64_t seed;
  long bad;
};

static void *rank_thread(void *arg) {
  struct rank_job *j = arg;
  j->bad = run_rank(j->comm, j->seed);
  return NULL;
}

/* Entries of /dev/shm that this process (all its ranks are threads) made. */
static int shm_left(void) {
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "gcoll-%d-", (int)getpid());
  DIR *d = opendir("/dev/shm");
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

/* Plan directories still in our private TMPDIR. */
static int plan_dirs_left(void) {
  DIR *d = opendir(tmpdir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, "gcoll-plan.", 11) == 0;
  closedir(d);
  return n;
}

static void initall_run(int n) {
  gcollComm_t comms[8];
  struct rank_job jobs[8];
  pthread_t th[8];
  int devs[8];
  for (int i = 0; i < n; i++) devs[i] = i;
  gcollResult_t rc = gcollCommInitAll(comms, n, n % 2 ? devs : NULL);
  if (rc != gcollSuccess) fail_msg("InitAll(%d): %s", n, gcollGetLastError(NULL));
  char key[64];
  snprintf(key, sizeof(key), "%s", comms[0]->job_key);
  assert_int_equal(strlen(key), 32);
  for (int i = 0; i < n; i++) {
    int r, c;
    assert_int_equal(gcollCommUserRank(comms[i], &r), gcollSuccess);
    assert_int_equal(gcollCommCount(comms[i], &c), gcollSuccess);
    assert_int_equal(r, i);
    assert_int_equal(c, n);
    assert_string_equal(comms[i]->job_key, key);
  }
  for (int i = 0; i < n; i++) {
    jobs[i] = (struct rank_job){.comm = comms[i], .seed = 1000u * (unsigned)n};
    assert_int_equal(pthread_create(&th[i], NULL, rank_thread, &jobs[i]), 0);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < n; i++) {
    if (jobs[i].bad) fail_msg("%d ranks: rank %d: %ld wrong elements or calls", n, i, jobs[i].bad);
    assert_int_equal(gcollCommDestroy(comms[i]), gcollSuccess);
  }
  assert_int_equal(shm_left(), 0);
  assert_int_equal(plan_dirs_left(), 0);
}

static void test_initall_1(void **state) { initall_run(1); }
static void test_initall_2(void **state) { initall_run(2); }
static void test_initall_3(void **state) { initall_run(3); }
static void test_initall_4(void **state) { initall_run(4); }

/* Two InitAll jobs at once from two threads: distinct keys, no crosstalk. */
static void *initall_thread(void *arg) {
  gcollComm_t *comms = arg;
  return (void *)(intptr_t)gcollCommInitAll(comms, 2, NULL);
}

static void test_initall_two_jobs(void **state) {
  gcollComm_t a[2], b[2];
  pthread_t ta, tb;
  void *ra, *rb;
  assert_int_equal(pthread_create(&ta, NULL, initall_thread, a), 0);
  assert_int_equal(pthread_create(&tb, NULL, initall_thread, b), 0);
  pthread_join(ta, &ra);
  pthread_join(tb, &rb);
  assert_int_equal((intptr_t)ra, gcollSuccess);
  assert_int_equal((intptr_t)rb, gcollSuccess);
  assert_string_not_equal(a[0]->job_key, b[0]->job_key);
  struct rank_job jobs[4] = {{a[0], 7, 0}, {a[1], 7, 0}, {b[0], 9, 0}, {b[1], 9, 0}};
  pthread_t th[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, rank_thread, &jobs[i]), 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) assert_int_equal(jobs[i].bad, 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(gcollCommDestroy(a[i]), gcollSuccess);
    assert_int_equal(gcollCommDestroy(b[i]), gcollSuccess);
  }
}

static void test_initall_bad_args(void **state) {
  gcollComm_t comms[2] = {(gcollComm_t)1, (gcollComm_t)1};
  assert_int_equal(gcollCommInitAll(NULL, 2, NULL), gcollInvalidArgument);
  assert_int_equal(gcollCommInitAll(comms, 0, NULL), gcollInvalidArgument);
  assert_int_equal(gcollCommInitAll(comms, -3, NULL), gcollInvalidArgument);
  assert_non_null(strstr(gcollGetLastError(NULL), "ndev"));
  /* A job that cannot find its topology fails cleanly, leaving nothing. */
  char *old = getenv("GCOLL_TOPO_DIR") ? strdup(getenv("GCOLL_TOPO_DIR")) : NULL;
  setenv("GCOLL_TOPO_DIR", "/nonexistent", 1);
  gcollResult_t rc = gcollCommInitAll(comms, 2, NULL);
  if (old) {
    setenv("GCOLL_TOPO_DIR", old, 1);
    free(old);
  } else {
    unsetenv("GCOLL_TOPO_DIR");
  }
  /* The installed or source directory may still hold cpu-only.yaml. */
  if (rc == gcollSuccess) {
    assert_int_equal(gcollCommDestroy(comms[0]), gcollSuccess);
    assert_int_equal(gcollCommDestroy(comms[1]), gcollSuccess);
  } else {
    assert_null(comms[0]);
    assert_null(comms[1]);
  }
  assert_int_equal(plan_dirs_left(), 0);
}

/* ---- gcollGetUniqueId + gcollCommInitRank through fork ------------------- */

/* One rank of a forked job: 0 when everything matched. */
static int uid_rank(gcollUniqueId id, int nranks, int rank) {
  gcollComm_t comm;
  gcollResult_t rc = gcollCommInitRank(&comm, nranks, id, rank);
  if (rc != gcollSuccess) {
    fprintf(stderr, "rank %d: InitRank: %s\n", rank, gcollGetLastError(NULL));
    return 1;
  }
  long bad = run_rank(comm, 4242u + (unsigned)nranks);
  if (bad) fprintf(stderr, "rank %d of %d: %ld wrong\n", rank, nranks, bad);
  return gcollCommDestroy(comm) != gcollSuccess || bad != 0;
}

/* Children are forked before gcollGetUniqueId starts the library's store
 * thread and get the id through a pipe: a fork while another thread holds
 * the allocator's lock would leave the child deadlocked in malloc. */
static void uid_run(int nranks, const char *nodes) {
  if (nodes) setenv("GCOLL_NODES", nodes, 1);
  gcollUniqueId id;
  pid_t pids[8];
  int pipes[8][2];
  for (int r = 1; r < nranks; r++) {
    assert_int_equal(pipe(pipes[r]), 0);
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      close(pipes[r][1]);
      gcollUniqueId child_id;
      ssize_t n = read(pipes[r][0], &child_id, sizeof(child_id));
      _exit(n == (ssize_t)sizeof(child_id) ? uid_rank(child_id, nranks, r) : 1);
    }
    close(pipes[r][0]);
  }
  assert_int_equal(gcollGetUniqueId(&id), gcollSuccess);
  for (int r = 1; r < nranks; r++) {
    assert_int_equal(write(pipes[r][1], &id, sizeof(id)), (ssize_t)sizeof(id));
    close(pipes[r][1]);
  }
  int bad = uid_rank(id, nranks, 0);
  for (int r = 1; r < nranks; r++) {
    int st;
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  if (nodes) unsetenv("GCOLL_NODES");
  assert_int_equal(bad, 0);
  assert_int_equal(plan_dirs_left(), 0);
}

static void test_uid_2(void **state) { uid_run(2, NULL); }
static void test_uid_3(void **state) { uid_run(3, NULL); }
static void test_uid_4_two_nodes(void **state) { uid_run(4, "2"); }

static void test_uid_bad(void **state) {
  gcollUniqueId id;
  gcollComm_t comm = (gcollComm_t)1;
  assert_int_equal(gcollGetUniqueId(NULL), gcollInvalidArgument);
  memset(&id, 'x', sizeof(id));
  assert_int_equal(gcollCommInitRank(&comm, 2, id, 0), gcollInvalidArgument);
  assert_null(comm);
  memset(&id, 0, sizeof(id));
  snprintf(id.internal, sizeof(id.internal), "gcoll-uid1 127.0.0.1:1 NOTHEX");
  assert_int_equal(gcollCommInitRank(&comm, 2, id, 0), gcollInvalidArgument);
  assert_int_equal(gcollGetUniqueId(&id), gcollSuccess);
  assert_int_equal(gcollCommInitRank(&comm, 2, id, 2), gcollInvalidArgument);
  assert_int_equal(gcollCommInitRank(&comm, 0, id, 0), gcollInvalidArgument);
  assert_int_equal(gcollCommInitRank(NULL, 2, id, 0), gcollInvalidArgument);
  /* A one-rank job on that id still works (the store serves it). */
  assert_int_equal(uid_rank(id, 1, 0), 0);
  /* A job whose GCOLL_NODES does not divide it fails on every rank. */
  setenv("GCOLL_NODES", "2", 1);
  assert_int_equal(gcollGetUniqueId(&id), gcollSuccess);
  assert_int_not_equal(gcollCommInitRank(&comm, 3, id, 0), gcollSuccess);
  assert_non_null(strstr(gcollGetLastError(NULL), "GCOLL_NODES"));
  unsetenv("GCOLL_NODES");
}

/* A job on one host (no GCOLL_NODES) gets a store on loopback, which no
 * other host can reach, whatever interface the transports use. A job on
 * several hosts gets it where the socket transport would listen, so that
 * their ranks can reach it: the id names that address. */
static void test_uid_address(void **state) {
  (void)state;
  gcollUniqueId id;
  setenv("GCOLL_SOCKET_IFADDR", "::1", 1);
  unsetenv("GCOLL_NODES");
  assert_int_equal(gcollGetUniqueId(&id), gcollSuccess);
  assert_non_null(strstr(id.internal, " 127.0.0.1:"));
  assert_int_equal(uid_rank(id, 1, 0), 0);
  setenv("GCOLL_NODES", "2", 1);
  setenv("GCOLL_SOCKET_IFADDR", "127.0.0.1", 1);
  assert_int_equal(gcollGetUniqueId(&id), gcollSuccess);
  assert_non_null(strstr(id.internal, " 127.0.0.1:"));
  setenv("GCOLL_SOCKET_IFADDR", "::1", 1);
  assert_int_equal(gcollGetUniqueId(&id), gcollSystemError);
  assert_non_null(strstr(gcollGetLastError(NULL), "IPv4"));
  assert_null(strchr(gcollGetLastError(NULL), '\n'));
  setenv("GCOLL_SOCKET_IFADDR", "no-such-interface0", 1);
  assert_int_equal(gcollGetUniqueId(&id), gcollSystemError);
  assert_non_null(strstr(gcollGetLastError(NULL), "no-such-interface0"));
  unsetenv("GCOLL_SOCKET_IFADDR");
  unsetenv("GCOLL_NODES");
}

static int setup(void **state) {
  snprintf(tmpdir, sizeof(tmpdir), "%s/gcoll-initall.XXXXXX",
           getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) return -1;
  setenv("TMPDIR", tmpdir, 1);
  setenv("GCOLL_TIMEOUT", "20", 0);
  return 0;
}

static int teardown(void **state) { return rmdir(tmpdir); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_initall_1),      cmocka_unit_test(test_initall_2),
      cmocka_unit_test(test_initall_3),      cmocka_unit_test(test_initall_4),
      cmocka_unit_test(test_initall_two_jobs), cmocka_unit_test(test_initall_bad_args),
      cmocka_unit_test(test_uid_2),          cmocka_unit_test(test_uid_3),
      cmocka_unit_test(test_uid_4_two_nodes), cmocka_unit_test(test_uid_bad),
      cmocka_unit_test(test_uid_address),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
