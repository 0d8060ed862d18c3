/* gcoll-perf output, column for column as nccl-tests prints it, so that
 * scripts written for all_reduce_perf parse it unchanged. Rank 0 only. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "kernels/reduce.h"
#include "launcher/gcoll_perf.h"
#include "runtime/settings.h"

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? v : dflt;
}

/* A setting as the communicator sees it (GCOLL_*, else NCCL's). */
static const char *setting_or(const char *name, const char *dflt) {
  const char *v = gcoll_setting(name);
  return v != NULL ? v : dflt;
}

static void print_sweep(const struct perf_opts *o, int nranks) {
  int version = 0;
  gcollGetVersion(&version);
  printf("# " PERF_PROG ": gcoll %d.%d.%d nranks %d minBytes %zu maxBytes %zu ", version / 10000,
         version / 100 % 100, version % 100, nranks, o->minbytes, o->maxbytes);
  if (o->stepfactor > 1)
    printf("step: %zu(factor)", o->stepfactor);
  else
    printf("step: %zu(bytes)", o->stepbytes);
  printf(" warmup iters: %ld iters: %ld validation: %d blocking: 1\n", o->warmup, o->iters,
         o->check);
  printf("# algo: %s  proto: %s  transport: %s\n", setting_or("GCOLL_ALGO", "plan"),
         setting_or("GCOLL_PROTO", "plan"), setting_or("GCOLL_TRANSPORT", "plan"));
}

void perf_report_header(const struct perf_opts *o, int nranks, int rank) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  print_sweep(o, nranks);
  printf("#\n# Using devices\n");
  printf("#  Rank %2d Pid %6d on %10s device %s, virtual node %s, local rank %s\n", rank,
         (int)getpid(), host, o->device_memory ? "CUDA device memory" : "host memory",
         env_or("GCOLL_NODE", "0"), env_or("GCOLL_LOCAL_RANK", "0"));
  printf("#  nranks %d, one process per rank (only rank 0 is listed)\n", nranks);
  fflush(stdout);
}

void perf_report_collective(enum perf_coll c, int several) {
  if (several) printf("#\n# Collective: %s\n", perf_coll_name(c));
  printf("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
         "          \n",
         "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
         "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  fflush(stdout);
}

void perf_report_row_start(size_t bytes, size_t count, gcollDataType_t t, const char *redop,
                           int root) {
  printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, gcoll_dtype_name(t), redop, root);
  fflush(stdout);
}

void perf_report_result(const struct perf_result *r) {
  char time[32], wrong[32];
  if (r->time_us < 0)
    snprintf(time, sizeof(time), "N/A");
  else if (r->time_us >= 10000.0)
    snprintf(time, sizeof(time), "%7.0f", r->time_us);
  else if (r->time_us >= 100.0)
    snprintf(time, sizeof(time), "%7.1f", r->time_us);
  else
    snprintf(time, sizeof(time), "%7.2f", r->time_us);
  if (r->wrong < 0)
    snprintf(wrong, sizeof(wrong), "N/A");
  else
    snprintf(wrong, sizeof(wrong), "%lld", r->wrong);
  if (r->time_us < 0)
    printf("  %7s  %6s  %6s  %5s", time, "N/A", "N/A", wrong);
  else
    printf("  %7s  %6.2f  %6.2f  %5s", time, r->algbw, r->busbw, wrong);
  fflush(stdout);
}

void perf_report_row_end(void) {
  printf("\n");
  fflush(stdout);
}

void perf_report_summary(long long wrong, double avg_busbw) {
  printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", avg_busbw);
  printf("#\n");
  fflush(stdout);
}
