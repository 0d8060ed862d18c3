/* The tuning table: for each collective, which algorithm, protocol and
 * channel count to use by message size.
 *
 * The model is seed 000's: time = latency + bytes / algorithm bandwidth,
 * evaluated for every candidate at every power-of-two size; consecutive
 * sizes with the same winner become one row. All constants live in
 * gcoll_tuning_defaults so a site can override them (gcoll_tuning_set,
 * GCOLL_TUNING in gcoll-plan) without touching the model. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "tuning.h"

/* Constants. Latencies in microseconds, efficiencies are fractions of the
 * searched channel bandwidth. GPU figures are of the magnitude NCCL's model
 * uses (kernel launch + flag polling per step); host figures reflect a
 * shared-memory/TCP step costing a few microseconds of CPU time. */
const struct gcoll_tuning_model gcoll_tuning_defaults = {
  .exec = {
    [GCOLL_TUNE_GPU] = {
      /* Simple pays a flag write and memory fence per step, so its per-step
       * latency is high; LL and LL128 carry flags inside the data. */
      .base_lat = {  /* [algo][proto]: simple, ll, ll128 */
        [GCOLL_ALGO_RING] = {8.0, 6.5, 12.0},
        [GCOLL_ALGO_TREE] = {8.0, 7.0, 14.0},
        [GCOLL_ALGO_NVLS] = {12.0, 0, 0},
      },
      .intra_lat = {
        [GCOLL_ALGO_RING] = {3.5, 0.6, 1.5},
        [GCOLL_ALGO_TREE] = {4.0, 0.6, 1.3},
        [GCOLL_ALGO_NVLS] = {1.0, 0, 0},
      },
      .net_lat = {
        [GCOLL_ALGO_RING] = {14.0, 2.7, 4.0},
        [GCOLL_ALGO_TREE] = {14.0, 5.0, 8.5},
        [GCOLL_ALGO_NVLS] = {0, 0, 0},
      },
      .proto_eff = {1.0, 0.25, 0.92},
      .algo_eff = {1.0, 0.92, 1.0},
      .proto_ok = {1, 1, 1},
      .min_channel_bytes = 32768,
    },
    [GCOLL_TUNE_HOST] = {
      /* Measured on a 2-core host, np=2 over shm (gcoll-perf, 1 channel):
       * Simple allreduce takes 0.5 us at 8 B and 1.2 us at 8 KB; LL moves
       * only ~0.9 GB/s (a CPU polls and copies it a 4-byte word at a time)
       * against Simple's 10-15 GB/s. But a Simple step makes its reader
       * fetch three or four cache lines from the writer's core (the
       * counter, the step's size and protocol, the data) and an LL step
       * of up to 32 bytes one (data and flags share it): when moving a
       * line between cores is slow, as on this VM in some hours (a 2-rank
       * 32 B allreduce at 0.9 us a call, not 0.2), LL took 8-64 B
       * collectives 1.07-1.53x faster, all five and in and out of place,
       * and was even at 128-512 B (even at 8-128 B in the fast hours). So the
       * model takes LL below about 64 B per step on shared memory
       * (allgather and reducescatter up to 128 B: their steps carry a
       * block), and Simple beyond; comm_coll.c keeps Simple where the
       * host's ranks outnumber its cores (4 ranks on 2: no gain). */
      .base_lat = {
        [GCOLL_ALGO_RING] = {0.4, 0.3, 0},
        [GCOLL_ALGO_TREE] = {0.4, 0.3, 0},
        [GCOLL_ALGO_NVLS] = {0, 0, 0},
      },
      .intra_lat = {
        [GCOLL_ALGO_RING] = {0.1, 0.07, 0},
        [GCOLL_ALGO_TREE] = {0.1, 0.07, 0},
        [GCOLL_ALGO_NVLS] = {0, 0, 0},
      },
      .net_lat = {
        [GCOLL_ALGO_RING] = {25.0, 25.0, 0},
        [GCOLL_ALGO_TREE] = {25.0, 25.0, 0},
        [GCOLL_ALGO_NVLS] = {0, 0, 0},
      },
      .proto_eff = {1.0, 0.06, 0},
      .algo_eff = {1.0, 0.92, 0},
      .proto_ok = {1, 1, 0},
      .min_channel_bytes = 262144,
    },
  },
  .nvls_ratio = 5.0 / 6.0,
  .default_bw = 10.0,
  /* 4 ranks on 2 cores, float sum allreduce of 128 B to 2 KB, waits that
   * yield at once (wait.h): the ring's 6 steps took 8.1-8.9 us (median of
   * 8 runs; best 7.4), the gather form's 3 took 6.3-6.8 (best 4.4), so a
   * step costs about 1 us, 0.9 more than on dedicated cores. */
  .shared_lat = 0.9,
  /* Assumptions, not measurements (no multi-rail fabric here): two more
   * switch hops and some queueing at the spine per crossing, and a spine
   * that gives cross-rail traffic 3/4 of a NIC's rate. Calibrate with
   * GCOLL_TUNING=spine_lat=...,spine_eff=... */
  .spine_lat = 1.0,
  .spine_eff = 0.75,
};

/* Facts about the job the model needs, taken from the plan. */
struct job_shape {
  int nranks, nnodes, max_local, nchannels;
  double bw_ch;        /* GB/s per channel, the bottleneck of intra and net */
  /* Per algorithm: bw_ch with the spine's share of cross-rail edges, and
   * the extra latency per network step those edges add. */
  double algo_bw[GCOLL_NALGOS], spine_lat[GCOLL_NALGOS];
  int nvls;            /* every node has NVLS heads and there is one node */
  enum gcoll_tune_exec exec;
};

static struct job_shape shape_of(const struct gcoll_plan *p, const struct gcoll_tuning_model *m) {
  struct job_shape s = {.nranks = p->nranks, .nnodes = p->nnodes, .nchannels = p->nchannels};
  double bw = INFINITY;
  int all_gpu = p->nclasses > 0, all_nvls = p->nclasses > 0;
  for (int k = 0; k < p->nclasses; k++) {
    const struct gcoll_plan_class *c = &p->classes[k];
    const struct gcoll_intra_graph *g = &c->graph;
    if (c->nlocal > s.max_local) s.max_local = c->nlocal;
    if (g->ring_bw > 0 && g->ring_bw < bw) bw = g->ring_bw;
    if (p->nnodes > 1 && g->net_bw > 0 && g->net_bw < bw) bw = g->net_bw;
    if (c->intra_edge != GCOLL_EDGE_P2P) all_gpu = 0;
    if (g->nvls_nheads == 0) all_nvls = 0;
  }
  s.bw_ch = isfinite(bw) ? bw : m->default_bw;
  /* Spine crossings: a share f of the inter-node edges at spine_eff of the
   * rate slows the channel's network side to 1 / ((1 - f) + f / eff). */
  double net = INFINITY, intra = INFINITY;
  for (int k = 0; k < p->nclasses; k++) {
    const struct gcoll_intra_graph *g = &p->classes[k].graph;
    if (g->ring_bw > 0 && g->ring_bw < intra) intra = g->ring_bw;
    if (p->nnodes > 1 && g->net_bw > 0 && g->net_bw < net) net = g->net_bw;
  }
  struct gcoll_rail_counts rc;
  gcoll_plan_rail_counts(p, &rc);
  for (int a = 0; a < GCOLL_NALGOS; a++) {
    int edges = a == GCOLL_ALGO_TREE ? rc.tree_edges : rc.ring_edges;
    int cross = a == GCOLL_ALGO_TREE ? rc.tree_cross : rc.ring_cross;
    double f = edges > 0 && a != GCOLL_ALGO_NVLS ? (double)cross / edges : 0;
    s.spine_lat[a] = f * m->spine_lat;
    s.algo_bw[a] = s.bw_ch;
    if (f > 0 && isfinite(net) && m->spine_eff > 0) {
      double slowed = net / ((1 - f) + f / m->spine_eff);
      s.algo_bw[a] = slowed < intra ? slowed : intra;
    }
  }
  s.exec = all_gpu ? GCOLL_TUNE_GPU : GCOLL_TUNE_HOST;
  s.nvls = all_gpu && all_nvls && p->nnodes == 1 && p->nranks > 1;
  return s;
}

static int ceil_log2(int n) {
  int d = 0;
  while ((1 << d) < n) d++;
  return d;
}

static int algo_allowed(enum gcoll_coll coll, enum gcoll_algo a, const struct job_shape *s) {
  if (a == GCOLL_ALGO_RING) return 1;
  if (coll != GCOLL_COLL_ALLREDUCE) return 0;
  if (a == GCOLL_ALGO_TREE) return s->nranks > 1;
  return s->nvls;
}

/* Predicted time in microseconds of one collective of `bytes` bytes. */
double gcoll_tuning_predict(const struct gcoll_tuning_model *m, enum gcoll_tune_exec exec,
                            enum gcoll_coll coll, enum gcoll_algo a, enum gcoll_proto p,
                            int nranks, int nnodes, int nlocal, int nch, double bw_ch,
                            uint64_t bytes) {
  const struct gcoll_tuning_exec *e = &m->exec[exec];
  if (nranks <= 1) return e->base_lat[GCOLL_ALGO_RING][p];
  int steps, inter;
  double ratio;
  switch (a) {
  case GCOLL_ALGO_TREE:
    inter = 2 * ceil_log2(nnodes);
    steps = inter + 2 * (nlocal - 1);
    ratio = 0.5;   /* every byte goes up and then down */
    break;
  case GCOLL_ALGO_NVLS:
    inter = 0;
    steps = 2;
    ratio = m->nvls_ratio;
    break;
  default:
    if (coll == GCOLL_COLL_ALLREDUCE) {
      steps = 2 * (nranks - 1);
      inter = nnodes > 1 ? 2 * nnodes : 0;
    } else if (coll == GCOLL_COLL_ALLGATHER || coll == GCOLL_COLL_REDUCESCATTER) {
      steps = nranks - 1;
      inter = nnodes - 1;
    } else {
      steps = nranks;
      inter = nnodes;
    }
    ratio = (double)nranks / steps;
    break;
  }
  /* Seed 000 counts 2*nnodes network steps for ring allreduce; with one
   * rank per node that exceeds the 2*(n-1) steps there are. */
  if (inter > steps) inter = steps;
  double lat = e->base_lat[a][p] + (steps - inter) * e->intra_lat[a][p] + inter * e->net_lat[a][p];
  double busbw = nch * bw_ch * e->proto_eff[p] * e->algo_eff[a];  /* GB/s = 1e3 bytes/us */
  double algbw = busbw * ratio;
  return lat + (double)bytes / (algbw * 1e3);
}

/* Time of the gather form (tuning.h) in the model's terms: one pass around
 * the ring, crossing each node boundary once, (nranks-1) x bytes in. */
static double predict_gather(const struct gcoll_tuning_exec *e, enum gcoll_proto p, int nranks,
                             int nnodes, double bw_ch, uint64_t bytes) {
  int steps = nranks - 1, inter = nnodes > 1 ? nnodes : 0;
  if (inter > steps) inter = steps;
  double lat = e->base_lat[GCOLL_ALGO_RING][p] +
               (steps - inter) * e->intra_lat[GCOLL_ALGO_RING][p] +
               inter * e->net_lat[GCOLL_ALGO_RING][p];
  double bw = bw_ch * e->proto_eff[p];
  return lat + (double)steps * (double)bytes / (bw * 1e3);
}

uint64_t gcoll_tuning_gather_limit(const struct gcoll_tuning_model *model, enum gcoll_proto p,
                                   int nranks, int nnodes, int shared_cores, uint64_t cap) {
  if (nranks < 2 || (int)p < 0 || p >= GCOLL_NPROTOS || !model->exec[GCOLL_TUNE_HOST].proto_ok[p])
    return 0;
  struct gcoll_tuning_model shared = *model;
  if (shared_cores) shared.exec[GCOLL_TUNE_HOST].intra_lat[GCOLL_ALGO_RING][p] += model->shared_lat;
  const struct gcoll_tuning_model *m = &shared;
  const struct gcoll_tuning_exec *e = &m->exec[GCOLL_TUNE_HOST];
  int nlocal = (nranks + nnodes - 1) / (nnodes > 0 ? nnodes : 1);
  uint64_t limit = 0;
  for (int lg = GCOLL_TUNING_MIN_LOG2; lg <= GCOLL_TUNING_MAX_LOG2; lg++) {
    uint64_t bytes = (uint64_t)1 << lg;
    if (bytes > cap) break;
    double ring = gcoll_tuning_predict(m, GCOLL_TUNE_HOST, GCOLL_COLL_ALLREDUCE, GCOLL_ALGO_RING, p,
                                       nranks, nnodes, nlocal, 1, m->default_bw, bytes);
    if (!(predict_gather(e, p, nranks, nnodes, m->default_bw, bytes) < ring)) break;
    limit = bytes;
  }
  return limit;
}

/* Channels for a message: enough that each gets min_channel_bytes, a power
 * of two, at most the plan's count. Small messages gain nothing from more
 * channels but pay their synchronisation. */
static int channels_for(const struct gcoll_tuning_exec *e, int max, uint64_t bytes) {
  int n = 1;
  while (n * 2 <= max && bytes / (uint64_t)(n * 2) >= e->min_channel_bytes) n *= 2;
  return n;
}

static int same_choice(const struct gcoll_tuning_entry *a, const struct gcoll_tuning_entry *b) {
  return a->algo == b->algo && a->proto == b->proto && a->nchannels == b->nchannels;
}

/* The row count is bounded by GCOLL_MAX_TUNING: when the model flips more
 * often than that, the extra boundaries at the small end are merged into
 * their larger neighbour (the larger size's choice is the safer one). */
static void tune_coll(struct gcoll_plan *plan, const struct gcoll_tuning_model *model,
                      const struct job_shape *s, enum gcoll_coll coll) {
  struct gcoll_tuning_model spine = *model;
  for (int a = 0; a < GCOLL_NALGOS; a++)
    for (int p = 0; p < GCOLL_NPROTOS; p++) spine.exec[s->exec].net_lat[a][p] += s->spine_lat[a];
  const struct gcoll_tuning_model *m = &spine;
  const struct gcoll_tuning_exec *e = &m->exec[s->exec];
  struct gcoll_tuning_entry rows[64];
  int nrows = 0;
  for (int lg = GCOLL_TUNING_MIN_LOG2; lg <= GCOLL_TUNING_MAX_LOG2; lg++) {
    uint64_t bytes = (uint64_t)1 << lg;
    int nch = channels_for(e, s->nchannels, bytes);
    /* Overrides can make every candidate infinite (all efficiencies 0):
     * ring/simple then stands, so the row stays a usable one. */
    struct gcoll_tuning_entry best = {bytes, GCOLL_ALGO_RING, GCOLL_PROTO_SIMPLE, nch};
    double best_t = INFINITY;
    for (int a = 0; a < GCOLL_NALGOS; a++) {
      if (!algo_allowed(coll, (enum gcoll_algo)a, s)) continue;
      for (int p = 0; p < GCOLL_NPROTOS; p++) {
        if (!e->proto_ok[p] || (a == GCOLL_ALGO_NVLS && p != GCOLL_PROTO_SIMPLE)) continue;
        double t = gcoll_tuning_predict(m, s->exec, coll, (enum gcoll_algo)a,
                                        (enum gcoll_proto)p, s->nranks, s->nnodes,
                                        s->max_local, nch, s->algo_bw[a], bytes);
        if (t < best_t) {
          best_t = t;
          best = (struct gcoll_tuning_entry){bytes, (enum gcoll_algo)a, (enum gcoll_proto)p, nch};
        }
      }
    }
    if (nrows > 0 && same_choice(&rows[nrows - 1], &best))
      rows[nrows - 1].max_bytes = bytes;
    else
      rows[nrows++] = best;
  }
  rows[nrows - 1].max_bytes = UINT64_MAX;
  int skip = nrows > GCOLL_MAX_TUNING ? nrows - GCOLL_MAX_TUNING : 0;
  /* Dropping the first `skip` rows' boundaries: their sizes fall into the
   * first kept row, which therefore covers from 0. */
  for (int r = 0; r < nrows - skip; r++) plan->tuning[coll][r] = rows[r + skip];
  plan->ntuning[coll] = nrows - skip;
}

void gcoll_plan_tune_with(struct gcoll_plan *plan, const struct gcoll_tuning_model *m) {
  struct job_shape s = shape_of(plan, m);
  for (int c = 0; c < GCOLL_NCOLLS; c++) tune_coll(plan, m, &s, (enum gcoll_coll)c);
}

void gcoll_plan_tune(struct gcoll_plan *plan) {
  gcoll_plan_tune_with(plan, &gcoll_tuning_defaults);
}

int gcoll_plan_retune(struct gcoll_plan *plan, const char *spec, char *err, size_t errlen) {
  if (spec == NULL || *spec == '\0') return 0;
  struct gcoll_tuning_model model = gcoll_tuning_defaults;
  if (gcoll_tuning_set(&model, spec, err, errlen) != 0) return -1;
  gcoll_plan_tune_with(plan, &model);
  return 0;
}

/* ---- overrides --------------------------------------------------------- */

static int parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0) return -1;
  *out = v;
  return 0;
}

/* One "exec.algo.proto.field=value" or "exec.field=value" or "field=value". */
static int set_one(struct gcoll_tuning_model *m, char *item, char *err, size_t errlen) {
  char *eq = strchr(item, '=');
  if (eq == NULL) {
    snprintf(err, errlen, "tuning override '%s': expected key=value", item);
    return -1;
  }
  *eq = '\0';
  double v;
  if (parse_double(eq + 1, &v) != 0) {
    snprintf(err, errlen, "tuning override '%s': '%s' is not a non-negative number", item, eq + 1);
    return -1;
  }
  char key[128];
  snprintf(key, sizeof(key), "%s", item);  /* the split below cuts item up */
  /* Split by hand: strtok would let "gpu..ring.eff" pass as gpu.ring.eff. */
  char *parts[5];
  int np = 0;
  for (char *tok = item;;) {
    if (np == 5) goto unknown;
    parts[np++] = tok;
    char *dot = strchr(tok, '.');
    if (dot == NULL) break;
    *dot = '\0';
    tok = dot + 1;
  }
  for (int i = 0; i < np; i++)
    if (parts[i][0] == '\0') goto unknown;
  if (np == 1 && strcmp(parts[0], "nvls_ratio") == 0) { m->nvls_ratio = v; return 0; }
  if (np == 1 && strcmp(parts[0], "default_bw") == 0) { m->default_bw = v; return 0; }
  if (np == 1 && strcmp(parts[0], "shared_lat") == 0) { m->shared_lat = v; return 0; }
  if (np == 1 && strcmp(parts[0], "spine_lat") == 0) { m->spine_lat = v; return 0; }
  if (np == 1 && strcmp(parts[0], "spine_eff") == 0) {
    if (v <= 0 || v > 1) {
      snprintf(err, errlen, "tuning override '%s': must be in (0, 1]", key);
      return -1;
    }
    m->spine_eff = v;
    return 0;
  }
  int ex = np >= 2 ? (strcmp(parts[0], "gpu") == 0 ? GCOLL_TUNE_GPU
                      : strcmp(parts[0], "host") == 0 ? GCOLL_TUNE_HOST : -1) : -1;
  if (ex < 0) goto unknown;
  struct gcoll_tuning_exec *e = &m->exec[ex];
  if (np == 2 && strcmp(parts[1], "min_channel_bytes") == 0) {
    /* Whole bytes, and below 2^62 so the conversion is defined. */
    if (v < 1 || v != floor(v) || v > 0x1p62) {
      snprintf(err, errlen, "tuning override '%s': must be a whole number of bytes, 1 to 2^62",
               key);
      return -1;
    }
    e->min_channel_bytes = (uint64_t)v;
    return 0;
  }
  if (np == 3 && strcmp(parts[2], "eff") == 0) {
    int a = gcoll_algo_from_name(parts[1]), p = gcoll_proto_from_name(parts[1]);
    if (a >= 0) { e->algo_eff[a] = v; return 0; }
    if (p >= 0) { e->proto_eff[p] = v; return 0; }
  }
  if (np == 4) {
    int a = gcoll_algo_from_name(parts[1]), p = gcoll_proto_from_name(parts[2]);
    if (a >= 0 && p >= 0) {
      if (strcmp(parts[3], "base_lat") == 0) { e->base_lat[a][p] = v; return 0; }
      if (strcmp(parts[3], "intra_lat") == 0) { e->intra_lat[a][p] = v; return 0; }
      if (strcmp(parts[3], "net_lat") == 0) { e->net_lat[a][p] = v; return 0; }
    }
  }
unknown:
  snprintf(err, errlen, "tuning override: unknown key '%s' (see docs/plan-format.md#tuning)", key);
  return -1;
}

int gcoll_tuning_set(struct gcoll_tuning_model *m, const char *spec, char *err, size_t errlen) {
  if (spec == NULL || *spec == '\0') return 0;
  char *copy = strdup(spec);
  if (copy == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  int rc = 0;
  for (char *save = NULL, *item = strtok_r(copy, ",", &save); item && rc == 0;
       item = strtok_r(NULL, ",", &save))
    rc = set_one(m, item, err, errlen);
  free(copy);
  return rc;
}
