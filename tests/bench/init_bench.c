/* Init benchmark, one rank (tests/bench/init-scale.sh starts N of them
 * under gcollrun): joins the job from GCOLL_PLAN, proves the communicator
 * works with one allreduce whose result it checks, and prints its own
 * figures on one line:
 *
 *   init_bench rank R of N: wall_ms W cpu_ms C main_cpu_ms T maxrss_kb M faults F
 *
 * wall and cpu cover gcollCommInitFromPlan only (cpu: this process, all of
 * its threads, so a proxy thread's polling counts; main_cpu: the calling
 * thread alone, which tells the proxy's share apart); maxrss is the process's
 * peak (getrusage), init and the allreduce included; faults counts the
 * process's page faults during init (each a first touch of a page: on a
 * VM whose host has not backed that memory yet, ~12 us apiece, so a large
 * share of init's CPU that the job's total memory, not the rank's, moves).
 * The bootstrap request
 * counts come from the runtime's own "init timings" line (GCOLL_DEBUG=INFO),
 * not from here, so the benchmark reports what users see. A second line
 * splits the process's CPU time by thread name at the end of init (the
 * calling thread is "main"; gcoll names its own threads):
 *
 *   init_bench rank R threads: main 15.2 gcoll-proxy 1.3 gcoll-endpoints 0.4
 *
 * Exit status 1 on an error or a wrong sum, never for a slow figure. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"

#define COUNT 4096

static double clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU ms of each of this process's threads so far, summed by name, from
 * /proc/self/task/TID/{comm,schedstat} (schedstat's first field is the
 * time on a CPU in ns). Printed as "NAME MS ..." into line. */
static void threads_cpu(char *line, size_t cap) {
  struct { char name[20]; double ms; } by[16];
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  line[0] = '\0';
  if (d == NULL) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char path[96], name[20] = "";
    unsigned long long ns = 0;
    snprintf(path, sizeof(path), "/proc/self/task/%.32s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(name, sizeof(name), f) != NULL) name[strcspn(name, "\n")] = '\0';
    fclose(f);
    snprintf(path, sizeof(path), "/proc/self/task/%.32s/schedstat", e->d_name);
    if ((f = fopen(path, "r")) == NULL) continue;
    int ok = fscanf(f, "%llu", &ns) == 1;
    fclose(f);
    if (!ok) continue;
    if (atoi(e->d_name) == (int)getpid()) snprintf(name, sizeof(name), "main");
    int i = 0;
    while (i < n && strcmp(by[i].name, name) != 0) i++;
    if (i == n) {
      if (n == 16) continue;
      snprintf(by[n].name, sizeof(by[n].name), "%s", name);
      by[n++].ms = 0;
    }
    by[i].ms += (double)ns / 1e6;
  }
  closedir(d);
  size_t at = 0;
  for (int i = 0; i < n && at < cap; i++)
    at += (size_t)snprintf(line + at, cap - at, " %s %.1f", by[i].name, by[i].ms);
}

/* Element i of rank r is r + 1 + i % 7: every element's sum differs, and
 * every sum is an integer far below 2^24, so float addition is exact in
 * any order and a misrouted or missing chunk shows. */
static int check_allreduce(gcollComm_t comm, int rank, int nranks) {
  float *buf = malloc(COUNT * sizeof(*buf));
  if (buf == NULL) {
    fprintf(stderr, "init_bench rank %d: out of memory\n", rank);
    return -1;
  }
  for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1 + i % 7);
  gcollResult_t rc = gcollAllReduce(buf, buf, COUNT, gcollFloat, gcollSum, comm, NULL);
  int bad = -1;
  if (rc == gcollSuccess) {
    for (int i = 0; i < COUNT && bad < 0; i++) {
      double want = (double)nranks * (nranks + 1) / 2 + (double)nranks * (i % 7);
      if ((double)buf[i] != want) bad = i;
    }
    if (bad >= 0)
      fprintf(stderr, "init_bench rank %d: allreduce element %d is %g, expected %g\n", rank,
              bad, (double)buf[bad], (double)nranks * (nranks + 1) / 2 + nranks * (bad % 7));
  } else {
    fprintf(stderr, "init_bench rank %d: allreduce: %s\n", rank, gcollGetLastError(comm));
  }
  free(buf);
  return rc == gcollSuccess && bad < 0 ? 0 : -1;
}

/* --more K: K more communicators from the same plan, alive at once beside
 * the first, each checked, then destroyed, then one more after them: with
 * endpoints from the plan each takes the next generation of this process's
 * rendezvous mailbox (runtime/endpoint_server.h). */
static int more_comms(int k, int rank, int nranks) {
  gcollComm_t extra[8] = {NULL};
  int status = 0;
  for (int i = 0; i < k && status == 0; i++)
    if (gcollCommInitFromPlan(&extra[i], NULL, -1) != gcollSuccess) {
      fprintf(stderr, "init_bench rank %d: communicator %d: %s\n", rank, i + 2,
              gcollGetLastError(NULL));
      status = 1;
    }
  for (int i = 0; i < k && status == 0; i++)
    if (check_allreduce(extra[i], rank, nranks) != 0) status = 1;
  for (int i = 0; i < k; i++)
    if (extra[i] != NULL) gcollCommDestroy(extra[i]);
  gcollComm_t last = NULL;
  if (status == 0 && (gcollCommInitFromPlan(&last, NULL, -1) != gcollSuccess ||
                      check_allreduce(last, rank, nranks) != 0)) {
    fprintf(stderr, "init_bench rank %d: the communicator after them: %s\n", rank,
            gcollGetLastError(last));
    status = 1;
  }
  if (last != NULL) gcollCommDestroy(last);
  if (status == 0) printf("init_bench rank %d: %d more communicators checked\n", rank, k + 1);
  return status;
}

/* --split: the world split into even and odd ranks, each half checked;
 * a split needs every rank's view, so with endpoints from the plan it is
 * the store's (opened then, not at init). */
static int split_check(gcollComm_t comm, int rank) {
  gcollComm_t half = NULL;
  int n = 0;
  if (gcollCommSplit(comm, rank % 2, rank, &half) != gcollSuccess || half == NULL ||
      gcollCommCount(half, &n) != gcollSuccess) {
    fprintf(stderr, "init_bench rank %d: split: %s\n", rank, gcollGetLastError(comm));
    return 1;
  }
  int hrank = -1;
  gcollCommUserRank(half, &hrank);
  int status = check_allreduce(half, hrank, n) == 0 ? 0 : 1;
  gcollCommDestroy(half);
  if (status == 0) printf("init_bench rank %d: split into %d ranks checked\n", rank, n);
  return status;
}

/* --shrink: the last rank leaves at once, with no goodbye (as a crash, but
 * exit status 0 so that the launcher keeps the others), and the others
 * shrink the world without it, check the new communicator and abort the
 * old one. Only the survivors take part in the shrink: its store must be
 * reachable by a subset of the ranks, as PMI2's, opened by a fence of all
 * of them, is not. */
static int shrink_check(gcollComm_t comm, int rank, int nranks) {
  if (rank == nranks - 1) {
    fflush(stdout);
    _exit(0);
  }
  int gone = nranks - 1, n = 0, nrank = -1;
  gcollComm_t less = NULL;
  if (gcollCommShrink(comm, &gone, 1, &less, GCOLL_SHRINK_DEFAULT) != gcollSuccess ||
      less == NULL || gcollCommCount(less, &n) != gcollSuccess || n != nranks - 1) {
    fprintf(stderr, "init_bench rank %d: shrink: %s\n", rank, gcollGetLastError(comm));
    return 1;
  }
  gcollCommUserRank(less, &nrank);
  int status = check_allreduce(less, nrank, n) == 0 ? 0 : 1;
  gcollCommDestroy(less);
  if (status == 0) printf("init_bench rank %d: shrink to %d ranks checked\n", rank, n);
  return status;
}

int main(int argc, char **argv) {
  int more = 0, split = argc == 2 && strcmp(argv[1], "--split") == 0;
  int shrink = argc == 2 && strcmp(argv[1], "--shrink") == 0;
  if (argc == 3 && strcmp(argv[1], "--more") == 0) more = atoi(argv[2]);
  if (argc != 1 && !split && !shrink && (more < 1 || more > 8)) {
    fprintf(stderr, "usage: init_bench [--more K | --split | --shrink], K in 1..8\n");
    return 2;
  }
  gcollComm_t comm = NULL;
  struct rusage ru0;
  long faults0 = getrusage(RUSAGE_SELF, &ru0) == 0 ? ru0.ru_minflt + ru0.ru_majflt : 0;
  double wall0 = clock_ms(CLOCK_MONOTONIC), cpu0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
  double main0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
  gcollResult_t rc = gcollCommInitFromPlan(&comm, NULL, -1);
  double wall = clock_ms(CLOCK_MONOTONIC) - wall0, cpu = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
  double main_cpu = clock_ms(CLOCK_THREAD_CPUTIME_ID) - main0;
  struct rusage ru1;
  long faults = getrusage(RUSAGE_SELF, &ru1) == 0 ? ru1.ru_minflt + ru1.ru_majflt - faults0 : -1;
  char threads[512];
  threads_cpu(threads, sizeof(threads));
  if (rc != gcollSuccess) {
    fprintf(stderr, "init_bench: init: %s\n", gcollGetLastError(NULL));
    return 1;
  }
  int rank = -1, nranks = 0;
  gcollCommUserRank(comm, &rank);
  gcollCommCount(comm, &nranks);
  int status = check_allreduce(comm, rank, nranks) == 0 ? 0 : 1;
  struct rusage ru;
  long maxrss = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
  if (status == 0)
    printf("init_bench rank %d of %d: wall_ms %.3f cpu_ms %.3f main_cpu_ms %.3f maxrss_kb %ld "
           "faults %ld\n", rank, nranks, wall, cpu, main_cpu, maxrss, faults);
  if (status == 0) printf("init_bench rank %d threads:%s\n", rank, threads);
  if (status == 0 && more > 0) status = more_comms(more, rank, nranks);
  if (status == 0 && split) status = split_check(comm, rank);
  if (status == 0 && shrink) {
    status = shrink_check(comm, rank, nranks);
    gcollCommAbort(comm);
    return status;
  }
  if (gcollCommDestroy(comm) != gcollSuccess) {
    fprintf(stderr, "init_bench rank %d: destroy: %s\n", rank, gcollGetLastError(NULL));
    status = 1;
  }
  return status;
}
