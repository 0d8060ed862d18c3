/* The tuning model behind the plan's tuning table (tuning.c). */
#ifndef GCOLL_GRAPH_TUNING_H
#define GCOLL_GRAPH_TUNING_H

#include <stddef.h>
#include <stdint.h>

#include "gcoll_plan.h"

/* Sizes the model evaluates: 2^6 = 64 B to 2^34 = 16 GiB. */
#define GCOLL_TUNING_MIN_LOG2 6
#define GCOLL_TUNING_MAX_LOG2 34

/* Who executes the collective: GPU kernels or host threads. The job is GPU
 * only when every node class is. */
enum gcoll_tune_exec { GCOLL_TUNE_GPU = 0, GCOLL_TUNE_HOST, GCOLL_TUNE_NEXECS };

struct gcoll_tuning_exec {
  double base_lat[GCOLL_NALGOS][GCOLL_NPROTOS];   /* us per collective */
  double intra_lat[GCOLL_NALGOS][GCOLL_NPROTOS];  /* us per step inside a node */
  double net_lat[GCOLL_NALGOS][GCOLL_NPROTOS];    /* us per step across nodes */
  double proto_eff[GCOLL_NPROTOS];                /* share of channel bw carrying data */
  double algo_eff[GCOLL_NALGOS];
  int proto_ok[GCOLL_NPROTOS];                    /* protocol exists on this executor */
  uint64_t min_channel_bytes;                     /* bytes per channel before adding one */
};

struct gcoll_tuning_model {
  struct gcoll_tuning_exec exec[GCOLL_TUNE_NEXECS];
  double nvls_ratio;   /* NVLS algorithm bandwidth / bus bandwidth */
  double default_bw;   /* GB/s per channel when the search reported none */
  /* us a host step costs on top of intra_lat when a host's ranks (their
   * channel threads) outnumber its cores: the scheduler must run the peer
   * first. Known at run time only, so only the gather-form limit uses it. */
  double shared_lat;
  /* Edges between nodes that change rails go up to the spine and back:
   * spine_lat us more per such step, and spine_eff of the NIC bandwidth
   * (spines are often oversubscribed, and such traffic meets other rails'
   * there). Applied in proportion to the share of a ring's or a tree's
   * inter-node edges that cross (gcoll_plan_rail_counts). */
  double spine_lat;
  double spine_eff;
};

extern const struct gcoll_tuning_model gcoll_tuning_defaults;

/* Predicted time (us) of one collective; exposed for tests and `gcoll-plan
 * show --tuning`. bw_ch is GB/s per channel. */
double gcoll_tuning_predict(const struct gcoll_tuning_model *m, enum gcoll_tune_exec exec,
                            enum gcoll_coll coll, enum gcoll_algo a, enum gcoll_proto p,
                            int nranks, int nnodes, int nlocal, int nch, double bw_ch,
                            uint64_t bytes);

/* The largest message (bytes, a power of two from 2^GCOLL_TUNING_MIN_LOG2,
 * at most cap) up to which host allreduce should take its gather form
 * rather than the ring: one pass of every rank's whole vector around the
 * ring (nranks-1 steps, against the ring's 2(nranks-1)), then each rank
 * reduces the nranks vectors itself. The form wins while the steps it
 * saves cost more than the (nranks-1) x bytes it moves instead of the
 * ring's 2(nranks-1)/nranks x bytes; it is predicted with the host model's
 * latencies and bandwidth (default_bw per channel, one channel), sizes
 * from the bottom up on the tuning grid; with shared_cores, every step
 * inside a node also costs shared_lat. 0 when it never wins (or with one
 * rank). Every rank computes the same from the same model and arguments. */
uint64_t gcoll_tuning_gather_limit(const struct gcoll_tuning_model *m, enum gcoll_proto p,
                                   int nranks, int nnodes, int shared_cores, uint64_t cap);

/* Applies overrides "key=value[,key=value...]" to m. Keys:
 *   gpu|host.ALGO.PROTO.base_lat|intra_lat|net_lat, gpu|host.ALGO.eff,
 *   gpu|host.PROTO.eff, gpu|host.min_channel_bytes, nvls_ratio, default_bw,
 *   shared_lat, spine_lat, spine_eff.
 * Returns 0, or -1 with a one-line reason; m is unchanged up to the bad key. */
int gcoll_tuning_set(struct gcoll_tuning_model *m, const char *spec, char *err, size_t errlen);

struct gcoll_plan;
/* Fills plan->tuning from model m (gcoll_plan_tune uses the defaults). */
void gcoll_plan_tune_with(struct gcoll_plan *plan, const struct gcoll_tuning_model *m);
/* Site calibration: refills plan->tuning from the defaults with the
 * overrides of spec (GCOLL_TUNING's syntax, see gcoll_tuning_set) applied;
 * nothing to do for NULL or "". Every tool that computes a plan calls it
 * with $GCOLL_TUNING, so one variable calibrates them all. */
int gcoll_plan_retune(struct gcoll_plan *plan, const char *spec, char *err, size_t errlen);

#endif
