/* gcoll-perf: the collective benchmark, in the look of nccl-tests.
 *
 * gcoll_perf.c runs the size sweep, gcoll_perf_args.c reads the options,
 * gcoll_perf_data.c makes the deterministic inputs and counts wrong results,
 * gcoll_perf_report.c prints the nccl-tests tables. */
#ifndef GCOLL_LAUNCHER_GCOLL_PERF_H
#define GCOLL_LAUNCHER_GCOLL_PERF_H

#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"

#define PERF_PROG "gcoll-perf"

enum perf_coll {
  PERF_ALLREDUCE = 0,
  PERF_BROADCAST,
  PERF_REDUCE,
  PERF_ALLGATHER,
  PERF_REDUCESCATTER,
  PERF_ALLTOALL,
  PERF_GATHER,
  PERF_SCATTER,
  PERF_SENDRECV,          /* send to the next rank, receive from the previous, in a group */
  PERF_NCOLLS
};

const char *perf_coll_name(enum perf_coll c);
int perf_coll_has_op(enum perf_coll c);   /* takes a reduction op */
int perf_coll_has_root(enum perf_coll c);
/* nccl-tests' bus bandwidth factor for nranks ranks. */
double perf_busbw_factor(enum perf_coll c, int nranks);

struct perf_opts {
  unsigned coll_mask;     /* bit per enum perf_coll, run in enum order */
  unsigned type_mask;     /* bit per gcollDataType_t */
  unsigned op_mask;       /* bit per gcollRedOp_t */
  size_t minbytes, maxbytes;
  size_t stepbytes;       /* used when stepfactor is 1 */
  size_t stepfactor;
  long root;
  long warmup, iters;
  int check;
  const char *algo, *proto; /* NULL: the plan chooses */
  int device_memory;      /* -M cuda */
};

enum { PERF_ARGS_OK = 0, PERF_ARGS_HELP = 1, PERF_ARGS_BAD = 2 };

/* Fills o from argv; PERF_ARGS_BAD leaves a one-line reason in err. */
int perf_parse_args(int argc, char **argv, struct perf_opts *o, char *err, size_t errlen);
void perf_print_usage(void);
/* The size after `size` in the sweep, or 0 when the sweep is over. */
size_t perf_next_size(const struct perf_opts *o, size_t size);

/* ---- data and checking (gcoll_perf_data.c) -------------------------------
 * Every rank can regenerate every rank's input from (seed, rank, index), so
 * each rank computes its expected results locally with the serial reference
 * gcoll_reduce_reference. Floating-point inputs are small integers (and
 * +-1, +-2 for prod) chosen so that every partial result a reduction in any
 * order can produce is exactly representable: the comparison is exact. */
struct perf_data;

struct perf_data *perf_data_new(int nranks, uint64_t seed);
void perf_data_free(struct perf_data *d);
/* Inputs change with the seed: one per case keeps cases independent. */
void perf_data_reseed(struct perf_data *d, uint64_t seed);

/* Writes input elements [first, first + count) of `rank` for (type, op). */
void perf_data_fill(const struct perf_data *d, void *buf, int rank, size_t first, size_t count,
                    gcollDataType_t t, gcollRedOp_t op);

/* Elements of got[0..count) that differ from rank `rank`'s inputs
 * [first, first + count). */
size_t perf_data_wrong_copy(struct perf_data *d, const void *got, int rank, size_t first,
                            size_t count, gcollDataType_t t, gcollRedOp_t op);

/* Elements of got[0..count) that differ from the reduction over all ranks
 * of inputs [first, first + count). */
size_t perf_data_wrong_reduced(struct perf_data *d, const void *got, size_t first, size_t count,
                               gcollDataType_t t, gcollRedOp_t op);

/* ---- device buffers (gcoll_perf_mem.c) -----------------------------------
 * With -M cuda the collectives run on device memory; inputs are made and
 * results checked in host copies moved with the driver's copies. */
/* Opens GPU `local_rank mod GPUs` (primary context, current on this
 * thread). 0, or -1 with one line in err (no driver, no GPU, no CUDA in
 * this build). */
int perf_mem_open(int local_rank, char *err, size_t errlen);
void *perf_mem_alloc(size_t bytes, char *err, size_t errlen);
void perf_mem_free(void *dev);
/* Copies between a host buffer and device memory; 0, or -1 with err. */
int perf_mem_to_device(void *dev, const void *host, size_t bytes, char *err, size_t errlen);
int perf_mem_to_host(void *host, const void *dev, size_t bytes, char *err, size_t errlen);
/* Waits for the work queued on the default stream (collectives on device
 * buffers return once queued); 0, or -1 with err. */
int perf_mem_sync(char *err, size_t errlen);

/* Marks memory that a collective must overwrite (or must leave alone). */
#define PERF_POISON_BYTE 0xA5
/* Elements of got[0..count) that are not entirely the poison pattern. */
size_t perf_data_wrong_untouched(const void *got, size_t count, gcollDataType_t t);

/* ---- output (gcoll_perf_report.c), rank 0 only ---------------------------- */
struct perf_result {
  double time_us, algbw, busbw;
  long long wrong;        /* < 0: not checked */
};

void perf_report_header(const struct perf_opts *o, int nranks, int rank);
void perf_report_collective(enum perf_coll c, int several);
void perf_report_row_start(size_t bytes, size_t count, gcollDataType_t t, const char *redop,
                           int root);
/* time_us < 0: not run (alltoall in place): time and bandwidths print N/A. */
void perf_report_result(const struct perf_result *r);
void perf_report_row_end(void);
void perf_report_summary(long long wrong, double avg_busbw);

#endif
