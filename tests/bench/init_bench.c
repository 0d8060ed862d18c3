/* Init benchmark, one rank (tests/bench/init-scale.sh starts N of them
 * under gcollrun): joins the job from GCOLL_PLAN, proves the communicator
 * works with one allreduce whose result it checks, and prints its own
 * figures on one line:
 *
 *   init_bench rank R of N: wall_ms W cpu_ms C main_cpu_ms T maxrss_kb M
 *
 * wall and cpu cover gcollCommInitFromPlan only (cpu: this process, all of
 * its threads, so a proxy thread's polling counts; main_cpu: the calling
 * thread alone, which tells the proxy's share apart); maxrss is the process's
 * peak (getrusage), init and the allreduce included. The bootstrap request
 * counts come from the runtime's own "init timings" line (GCOLL_DEBUG=INFO),
 * not from here, so the benchmark reports what users see.
 *
 * Exit status 1 on an error or a wrong sum, never for a slow figure. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "gcoll.h"

#define COUNT 4096

static double clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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

int main(void) {
  gcollComm_t comm = NULL;
  double wall0 = clock_ms(CLOCK_MONOTONIC), cpu0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
  double main0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
  gcollResult_t rc = gcollCommInitFromPlan(&comm, NULL, -1);
  double wall = clock_ms(CLOCK_MONOTONIC) - wall0, cpu = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
  double main_cpu = clock_ms(CLOCK_THREAD_CPUTIME_ID) - main0;
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
    printf("init_bench rank %d of %d: wall_ms %.3f cpu_ms %.3f main_cpu_ms %.3f maxrss_kb %ld\n",
           rank, nranks, wall, cpu, main_cpu, maxrss);
  if (gcollCommDestroy(comm) != gcollSuccess) {
    fprintf(stderr, "init_bench rank %d: destroy: %s\n", rank, gcollGetLastError(NULL));
    status = 1;
  }
  return status;
}
