/* Communicator life cycle: join a job from its plan, destroy, abort. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#endif
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "graph/plan.h"
#include "graph/tuning.h"
#include "kernels/host_oneshot.h"
#include "kernels/reduce.h"
#include "kernels/wait.h"
#include "runtime/auth.h"
#include "runtime/comm.h"
#include "runtime/comm_init_paths.h"
#include "runtime/comm_init_timings.h"
#include "runtime/comm_init_wave.h"
#include "runtime/peer_memory.h"
#include "runtime/proxy.h"
#include "runtime/settings.h"

#define DEFAULT_SLOT_BYTES (128u << 10)

/* Reads an optional enum-valued setting; -1 when unset. Case does not
 * matter, as with NCCL_PROTO=Simple. */
static int env_choice(const char *name, int (*from_name)(const char *), int *out) {
  const char *v = gcoll_setting(name);
  char lower[32];
  *out = -1;
  if (v == NULL || *v == '\0') return 0;
  size_t i = 0;
  for (; v[i] != '\0' && i + 1 < sizeof(lower); i++)
    lower[i] = (char)(v[i] >= 'A' && v[i] <= 'Z' ? v[i] - 'A' + 'a' : v[i]);
  if (v[i] != '\0') return -1;
  lower[i] = '\0';
  *out = from_name(lower);
  return *out < 0 ? -1 : 0;
}

static gcollResult_t read_tuning_env(struct gcollComm *comm) {
  const char *debug = gcoll_setting("GCOLL_DEBUG");
  comm->trace = debug != NULL && strcmp(debug, "TRACE") == 0;
  if (env_choice("GCOLL_ALGO", gcoll_algo_from_name, &comm->force_algo) != 0)
    return gcoll_fail(gcollInvalidArgument, "GCOLL_ALGO='%s': expected ring or tree",
                      gcoll_setting("GCOLL_ALGO"));
  if (env_choice("GCOLL_PROTO", gcoll_proto_from_name, &comm->force_proto) != 0)
    return gcoll_fail(gcollInvalidArgument, "GCOLL_PROTO='%s': expected simple or ll",
                      gcoll_setting("GCOLL_PROTO"));
  comm->slot_bytes = DEFAULT_SLOT_BYTES;
  /* NCCL_BUFFSIZE arrives here already translated to a valid slot size. */
  long v;
  char err[256];
  int rc = gcoll_setting_long("GCOLL_SLOT_BYTES", 4096, 16L << 20, &v, err, sizeof(err));
  if (rc < 0 || (rc == 0 && v % 64 != 0))
    return gcoll_fail(gcollInvalidArgument,
                      "GCOLL_SLOT_BYTES must be a multiple of 64 from 4096 to 16777216");
  if (rc == 0) comm->slot_bytes = (size_t)v;
  return gcollSuccess;
}

/* The key as given, or with the bootstrap's secret mixed in: the ids a
 * given key may derive from (Slurm's job and step) are public, so the
 * result is an HMAC under the secret, 128 bits as hex, which only holders
 * of the secret can compute. */
static gcollResult_t set_job_key(struct gcollComm *comm, const char *key, const char *secret) {
  if (strlen(key) >= sizeof(comm->job_key) || strspn(key, "0123456789abcdefABCDEF") != strlen(key))
    return gcoll_fail(gcollInvalidUsage, "job key must be up to 63 hex digits");
  if (secret == NULL) {
    snprintf(comm->job_key, sizeof(comm->job_key), "%s", key);
    return gcollSuccess;
  }
  struct gcoll_auth_secret mixed;
  char err[256];
  if (gcoll_auth_derive(secret, strlen(secret), key, &mixed, err, sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "job key: %s", err);
  for (int i = 0; i < GCOLL_AUTH_SECRET_BYTES; i++)
    snprintf(comm->job_key + 2 * i, sizeof(comm->job_key) - 2 * (size_t)i, "%02x", mixed.bytes[i]);
  return gcollSuccess;
}

static gcollResult_t job_key_from_env(const struct gcoll_bootstrap *bs, const char **out) {
  /* Names of shared-memory segments derive from the job key, so two jobs on
   * one host never collide; gcollrun and the SPANK plugin set it, and a
   * bootstrap that knows the job (pmi2: the Slurm step) offers one. */
  const char *key = getenv("GCOLL_JOB_KEY");
  if ((key == NULL || *key == '\0') && bs->job_key != NULL) key = bs->job_key;
  if (key == NULL || *key == '\0')
    return gcoll_fail(gcollInvalidUsage, "GCOLL_JOB_KEY is not set: start the job with gcollrun "
                                         "or srun --gcoll=plan");
  if (strlen(key) >= sizeof(((struct gcollComm *)0)->job_key) ||
      strspn(key, "0123456789abcdefABCDEF") != strlen(key))
    return gcoll_fail(gcollInvalidUsage, "GCOLL_JOB_KEY must be up to 63 hex digits");
  *out = key;
  return gcollSuccess;
}

static gcollResult_t resolve_rank(const char *plan_path, int *rank, const char **path) {
  *path = plan_path ? plan_path : getenv("GCOLL_PLAN");
  if (*path == NULL || **path == '\0')
    return gcoll_fail(gcollInvalidArgument, "no plan: pass a path or set GCOLL_PLAN");
  /* Unset: the bootstrap says (srun --mpi=pmi2 sets no GCOLL_RANK). */
  if (*rank < 0 && getenv("GCOLL_RANK") != NULL) {
    long r;
    char err[256];
    if (gcoll_bootstrap_env_int("GCOLL_RANK", 0, GCOLL_MAX_RANKS - 1, &r, err, sizeof(err)) != 0)
      return gcoll_fail(gcollInvalidArgument, "no rank: pass one or set GCOLL_RANK (%s)", err);
    *rank = (int)r;
  }
  return gcollSuccess;
}

/* Everything this rank keeps from the plan: its view and the ring orders,
 * read without expanding the whole job (gcoll_plan_load_rank). */
static gcollResult_t load_plan(struct gcollComm *comm, const char *path) {
  char err[640];
  comm->view = calloc(1, sizeof(*comm->view));
  if (comm->view == NULL) return gcoll_fail(gcollSystemError, "out of memory for a plan view");
  if (gcoll_plan_load_rank(path, comm->rank, comm->view, &comm->ring_ranks, err, sizeof(err)) != 0)
    return gcoll_fail(gcollInvalidUsage, "%s", err);
  comm->nranks = comm->view->nranks;
  comm->nchannels = comm->view->nchannels;
  return gcollSuccess;
}

/* Host channels are threads: a rank runs one per channel, and more threads
 * than this host gives its ranks only take turns on the same cores (on 2
 * cores, 2 ranks x 2 channels ran 512 KB allreduces 5x slower than 1
 * channel). The plan's tuning table does not know the cores a job was
 * given, so the cap is taken here: the CPUs this process may run on,
 * shared by the ranks on this host (all of them on virtual nodes), or its
 * own when the launcher bound it (GCOLL_CPU_BIND=cores).
 * GCOLL_MAX_NCHANNELS replaces it. Device collectives are not capped by
 * the CPUs: their channels are GPU blocks, and a Slurm task with a few
 * cores per GPU (8 ranks, 12 cores each) would otherwise drive a
 * 16-channel DGX plan on one block; only GCOLL_MAX_NCHANNELS caps them. */
static gcollResult_t set_channel_cap(struct gcollComm *comm, int ranks_on_host) {
  comm->max_run_channels = comm->max_device_channels = comm->nchannels;
  comm->host_cpus = comm->ranks_on_host = 0;   /* unknown: no dedicated cores */
  /* NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS and the MIN ones land here. */
  long gpu_max = 0, gpu_min = 0;
  char why[256];
  if (gcoll_setting_long("GCOLL_MAX_GPU_CHANNELS", 1, 1024, &gpu_max, why, sizeof(why)) < 0 ||
      gcoll_setting_long("GCOLL_MIN_GPU_CHANNELS", 1, 1024, &gpu_min, why, sizeof(why)) < 0)
    return gcoll_fail(gcollInvalidArgument, "%s", why);
  if (getenv("GCOLL_MAX_NCHANNELS") != NULL) {
    long v;
    if (gcoll_bootstrap_env_int("GCOLL_MAX_NCHANNELS", 1, GCOLL_MAX_CHANNELS, &v, why,
                                sizeof(why)) != 0)
      return gcoll_fail(gcollInvalidArgument, "%s", why);
    if (v < comm->max_run_channels) comm->max_run_channels = (int)v;
    if (v < comm->max_device_channels) comm->max_device_channels = (int)v;
  } else {
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    if (cpus <= 0) cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    /* A launcher that bound each rank to CPUs of its own says so
     * (gcollrun --cpu-bind=cores): no other rank of the host shares them. */
    const char *bind = gcoll_setting("GCOLL_CPU_BIND");
    if (bind != NULL && *bind != '\0' && strcmp(bind, "cores") != 0 && strcmp(bind, "none") != 0)
      return gcoll_fail(gcollInvalidArgument, "GCOLL_CPU_BIND=%s: expected cores or none", bind);
    if (bind != NULL && strcmp(bind, "cores") == 0) ranks_on_host = 1;
    if (ranks_on_host < 1) ranks_on_host = 1;
    comm->host_cpus = cpus;
    comm->ranks_on_host = ranks_on_host;
    int cap = cpus / ranks_on_host;
    if (cap < 1) cap = 1;
    if (cap < comm->max_run_channels) comm->max_run_channels = cap;
  }
  /* As spin_rounds judges it, less the proxy thread, which is not known yet. */
  comm->shared_cores = !(comm->host_cpus > 0 &&
                         (long)comm->ranks_on_host * comm->max_run_channels <= comm->host_cpus);
  if (gpu_max > 0 && gpu_max < comm->max_device_channels) comm->max_device_channels = (int)gpu_max;
  comm->min_device_channels = gpu_min > 0 ? (int)gpu_min : 1;
  /* gcollConfig_t (ncclConfig_t's maxCTAs/minCTAs) bounds this
   * communicator within what the settings allow. */
  int cmax = comm->config_max_channels, cmin = comm->config_min_channels;
  if (cmax > 0 && cmax < comm->max_run_channels) comm->max_run_channels = cmax;
  if (cmax > 0 && cmax < comm->max_device_channels) comm->max_device_channels = cmax;
  if (cmin > comm->min_device_channels) comm->min_device_channels = cmin;
  if (comm->min_device_channels > comm->max_device_channels)
    comm->min_device_channels = comm->max_device_channels;
  return gcollSuccess;
}

/* Every rank must cut a collective into the same channels, and the caps
 * can differ (nodes with different rank counts or CPUs, cgroups that give
 * tasks different cores, GCOLL_MAX_NCHANNELS set on some ranks only): the
 * cap of the root of channel 0's tree (t1) is the job's. That rank
 * publishes it before the connection fence, with its own rank in front,
 * and the others read it after (agree_channel_cap); with endpoints from
 * the plan the closing wave down the same tree carries both. So every rank
 * also learns which rank that tree's root is (comm->tree_root), which only
 * the root knows from its own view, and which the host reduce needs to
 * take the tree (comm_coll.c). */
#define CHANNEL_CAP_KEY "init/channel-cap"

/* This rank's cap as take_channel_cap reads it: "CAP DCAP DMIN SHARED". */
static void format_channel_cap(const struct gcollComm *comm, char *buf, size_t len) {
  snprintf(buf, len, "%d %d %d %d", comm->max_run_channels, comm->max_device_channels,
           comm->min_device_channels, comm->shared_cores);
}

static int is_tree_root(const struct gcollComm *comm) { return comm->view->tree[0].parent < 0; }

static gcollResult_t publish_channel_cap(struct gcollComm *comm) {
  char err[512], cap[32], value[48];
  if (comm->nranks == 1) comm->tree_root = 0;
  /* With endpoints from the plan, init's closing wave carries the cap. */
  if (!is_tree_root(comm) || comm->nranks == 1 || comm->bs->peer_routed) return gcollSuccess;
  comm->tree_root = comm->rank;
  format_channel_cap(comm, cap, sizeof(cap));
  snprintf(value, sizeof(value), "%d %s", comm->rank, cap);
  if (gcoll_bootstrap_put(comm->bs, CHANNEL_CAP_KEY, value, strlen(value) + 1, err,
                          sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "%s", err);
  return gcollSuccess;
}

static gcollResult_t take_channel_cap(struct gcollComm *comm, const char *value, size_t len,
                                      int from);

/* Endpoints from the plan: the closing wave over the plan's tree is init's
 * barrier and carries the tree root's cap to every rank, in place of the
 * store's key (comm_init_wave.h), followed by the address of the store
 * the root serves when no launcher does (bootstrap.h's host_store):
 * "CAP DCAP DMIN SHARED [IP:PORT]". */
static gcollResult_t wave_channel_cap(struct gcollComm *comm) {
  char mine[128], value[160], store[80] = "", err[512];
  int root = -1, n = 0;
  format_channel_cap(comm, mine, sizeof(mine));
  if (is_tree_root(comm) && comm->nranks > 1) {
    if (gcoll_bootstrap_endpoints_host_store(comm->bs, store, sizeof(store), err, sizeof(err)) !=
        0)
      return gcoll_fail(gcollSystemError, "%s", err);
    if (store[0] != '\0') snprintf(mine + strlen(mine), sizeof(mine) - strlen(mine), " %s", store);
  }
  gcollResult_t rc = gcoll_comm_init_wave(comm, mine, value, sizeof(value), &root);
  if (rc != gcollSuccess) return rc;
  comm->tree_root = root;
  if (root != comm->rank && (rc = take_channel_cap(comm, value, strlen(value) + 1, root)) !=
                                gcollSuccess)
    return rc;
  /* The optional fifth field: the store's address. */
  if (sscanf(value, "%*d %*d %*d %*d %n", &n) >= 0 && n > 0 && value[n] != '\0' &&
      gcoll_bootstrap_endpoints_offer_store(comm->bs, value + n, err, sizeof(err)) != 0)
    return gcoll_fail(gcollRemoteError, "rank %d's init wave: %s", root, err);
  return gcollSuccess;
}

static gcollResult_t agree_channel_cap(struct gcollComm *comm) {
  char err[512], value[48];
  size_t len = 0;
  int root = -1, n = 0;
  if (comm->bs->peer_routed) return wave_channel_cap(comm);
  if (is_tree_root(comm) || comm->nranks == 1) return gcollSuccess;
  if (gcoll_bootstrap_get(comm->bs, CHANNEL_CAP_KEY, value, sizeof(value) - 1, &len,
                          gcoll_bootstrap_deadline(comm->bs), err, sizeof(err)) != 0)
    return gcoll_fail(gcollRemoteError, "channel cap from the tree's root: %s", err);
  /* "ROOT CAP...": the cap alone goes on. */
  if (len == 0 || value[len - 1] != '\0' || sscanf(value, "%d %n", &root, &n) != 1 || n <= 0 ||
      (size_t)n >= len || root < 0 || root >= comm->nranks || root == comm->rank)
    return gcoll_fail(gcollRemoteError, "the tree's root sent a malformed channel cap");
  comm->tree_root = root;
  return take_channel_cap(comm, value + n, len - (size_t)n, root);
}

/* Takes rank `from`'s cap ("CAP DCAP DMIN SHARED"), the job's. */
static gcollResult_t take_channel_cap(struct gcollComm *comm, const char *value, size_t len,
                                      int from) {
  int cap = 0, dcap = 0, dmin = 0, shared = -1;
  if (len == 0 || value[len - 1] != '\0' ||
      sscanf(value, "%d %d %d %d", &cap, &dcap, &dmin, &shared) != 4 || cap < 1 ||
      cap > comm->nchannels || dcap < 1 || dcap > comm->nchannels || dmin < 1 || dmin > dcap ||
      (shared != 0 && shared != 1))
    return gcoll_fail(gcollRemoteError, "rank %d sent a malformed channel cap", from);
  comm->max_device_channels = dcap;
  comm->min_device_channels = dmin;
  comm->shared_cores = shared;
  if (cap != comm->max_run_channels)
    gcoll_log_info(comm, "runs at most %d channels at once, rank %d's cap (its own: %d)", cap,
                   from, comm->max_run_channels);
  comm->max_run_channels = cap;
  return gcollSuccess;
}

/* The plan must be this job's: same rank count as the bootstrap, and (on
 * real nodes, not gcollrun's virtual ones) this rank's node. */
static gcollResult_t check_job(struct gcollComm *comm, const char *path, int check_host) {
  char err[512], host[256] = "";
  if (comm->bs->rank != comm->rank)
    return gcoll_fail(gcollInvalidUsage, "rank %d asked for, but the job started this process "
                                         "as rank %d", comm->rank, comm->bs->rank);
  int virtual_node = !check_host || getenv("GCOLL_NODE") != NULL;
  /* Under Slurm a node is what Slurm calls it: with several slurmd on one
   * host (and on clusters whose NodeName differs from the hostname) the plan
   * names nodes by SLURMD_NODENAME, which srun gives every task. */
  const char *slurm_node = getenv("SLURMD_NODENAME");
  if (!virtual_node && slurm_node != NULL && *slurm_node != '\0')
    snprintf(host, sizeof(host), "%s", slurm_node);
  else if (!virtual_node)
    gethostname(host, sizeof(host) - 1);
  if (gcoll_rank_view_check_job(comm->view, comm->bs->nranks, virtual_node ? NULL : host, NULL,
                                err, sizeof(err)) != 0)
    return gcoll_fail(gcollInvalidUsage, "%s: not for this job: %s", path, err);
  return set_channel_cap(comm, virtual_node ? comm->nranks : comm->view->local_nranks);
}

/* Waits spin long only when every thread of every rank on this host (its
 * channels, and a proxy when it has network connections) has a core, and
 * not at all (they yield at once) when they do not (wait.h). */
static uint32_t spin_rounds(const struct gcollComm *comm) {
  long threads = (long)comm->ranks_on_host * (comm->max_run_channels + (comm->has_net ? 1 : 0));
  return comm->host_cpus > 0 && threads <= comm->host_cpus ? GCOLL_WAIT_DEDICATED_SPINS
                                                          : GCOLL_WAIT_SHARED_SPINS;
}

/* A transport saw a peer die, or the communicator was aborted: kernels
 * waiting on FIFOs must stop now, not at their deadline. */
static void forward_abort(struct gcoll_proxy_entry *entry) {
  struct gcollComm *comm =
      (struct gcollComm *)((char *)entry - offsetof(struct gcollComm, kernel_abort));
  int why = atomic_load(&comm->abort_word);
  if (why != 0) comm->exec[GCOLL_EXEC_CUDA].ops->abort(comm->exec[GCOLL_EXEC_CUDA].e, why);
}

/* The host executor's gather-form limits (host_exec.h), from the tuning
 * model with $GCOLL_TUNING's calibration, as the plan's table is: every
 * rank must come to the same limits (shared_cores is the tree root's).
 * Capped so that one FIFO step carries the whole message (beyond that the ring
 * pipelines anyway) and the gather scratch, nranks x the limit, is at
 * most one FIFO's memory. Between two nodes, also capped at
 * NET_GATHER_MAX_BYTES: with the proxy thread carrying every network step
 * the gather form measured slower than the ring at every size over TCP
 * between virtual nodes, 8 B included; with the small collectives' steps
 * moved inline (comm_coll.c, proxy.h) its nranks-1 steps instead of the
 * ring's 2(nranks-1) won up to 8 KiB (4 ranks on 2 virtual nodes, 2 cores:
 * 40-68 us against 45-110 us) and lost at 32 KiB (115 against 87 us),
 * where it moves (nranks-1) x the bytes. More nodes, and one node whose
 * edges all go through the proxy (GCOLL_TRANSPORT), were not measured
 * with inline steps and keep the ring. The node count is the plan's, the
 * same on every rank (has_net alone is not: on 2 nodes a rank in the
 * middle of its node's ring segment may have no network edge); in one
 * node every edge takes the same transport, so has_net agrees there. */
#define NET_GATHER_MAX_BYTES 8192u
static gcollResult_t gather_limits(const struct gcollComm *comm, uint64_t *limit) {
  for (int p = 0; p < GCOLL_NPROTOS; p++) limit[p] = 0;
  if (comm->view->nnodes > 2 || (comm->view->nnodes == 1 && comm->has_net)) return gcollSuccess;
  struct gcoll_tuning_model model = gcoll_tuning_defaults;
  char why[256];
  const char *spec = getenv("GCOLL_TUNING");
  if (spec != NULL && *spec != '\0' && gcoll_tuning_set(&model, spec, why, sizeof(why)) != 0)
    return gcoll_fail(gcollInvalidArgument, "GCOLL_TUNING: %s", why);
  uint64_t fifo_share = (uint64_t)comm->slot_bytes * GCOLL_STEPS / (uint64_t)comm->nranks;
  for (int p = 0; p < GCOLL_NPROTOS; p++) {
    uint64_t step = p == GCOLL_PROTO_LL ? comm->slot_bytes / 4 : comm->slot_bytes;
    uint64_t cap = step < fifo_share ? step : fifo_share;
    if (comm->view->nnodes == 2 && cap > NET_GATHER_MAX_BYTES)
      cap = NET_GATHER_MAX_BYTES;
    limit[p] = p == GCOLL_PROTO_LL128 ? 0
               : gcoll_tuning_gather_limit(&model, (enum gcoll_proto)p, comm->nranks,
                                           comm->view->nnodes, comm->shared_cores, cap);
  }
  return gcollSuccess;
}

/* Single-copy reads between the ranks (kernels/host_direct.h,
 * peer_memory.h), when every rank is on this host and talks shared
 * memory. The default size is where reading a peer's huge pages beat the
 * ring's two copies on the 2-core VM (README, issue 17): below it the
 * descriptor exchange and the closing barrier cost more than the copy
 * saves. Every rank must use the same value (it decides the steps). */
#define SINGLE_COPY_DEFAULT_BYTES (128u << 10)
/* What fits in cache, for host_direct.h's verdict: a quarter of the
 * last-level cache (the caller's buffers, its peers' and the FIFOs share
 * it); measured on a VM with 32 MiB of L3: allgathers gained up to 8 MiB
 * and lost from 16. Where the size is unknown, that machine's. */
#define SINGLE_COPY_CACHE_BYTES (8u << 20)
static void peer_identity(void *comm, uint8_t id[GCOLL_PEER_ID_BYTES]) {
  (void)comm;
  gcoll_peer_memory_identity(id);
}
static int peer_probe(void *comm, int peer, const uint8_t id[GCOLL_PEER_ID_BYTES]) {
  int rc = gcoll_peer_memory_probe(id);
  if (rc != 0)
    gcoll_log_info(comm, "single-copy reads off: cannot read rank %d's memory (%s); the kernel's "
                         "ptrace rules decide (Yama ptrace_scope, a container's seccomp)",
                   peer, rc == ENXIO ? "its pid names another process here" : strerror(rc));
  return rc;
}
static int peer_read(void *comm, const uint8_t id[GCOLL_PEER_ID_BYTES],
                     const struct gcoll_peer_range *r, int n) {
  (void)comm;
  struct iovec local[GCOLL_PEER_RANGES_MAX], remote[GCOLL_PEER_RANGES_MAX];
  if (n < 0 || n > GCOLL_PEER_RANGES_MAX) return EINVAL;
  for (int i = 0; i < n; i++) {
    local[i] = (struct iovec){.iov_base = r[i].dst, .iov_len = r[i].n};
    remote[i] = (struct iovec){.iov_base = (void *)(uintptr_t)r[i].addr, .iov_len = r[i].n};
  }
  return gcoll_peer_memory_readv(id, local, remote, (size_t)n);
}
static int peer_cheap(void *comm, const void *p, size_t n) {
  (void)comm;
  return gcoll_peer_memory_cheap(p, n);
}

static int any_pages(void *comm, const void *p, size_t n) {
  (void)comm;
  (void)p;
  (void)n;
  return 1;
}
static void peer_report(void *comm, uint64_t candidates, uint64_t direct, const char *tuned) {
  gcoll_log_info(comm, "single copy: %llu of %llu candidate calls read their peers' buffers%s%s",
                 (unsigned long long)direct, (unsigned long long)candidates,
                 tuned[0] != '\0' ? "; tuned: " : "", tuned);
}

/* The largest cache of CPU 0, in bytes, from sysfs (what the kernel was
 * told; glibc's sysconf reports the whole package's L3 on some VMs, 384
 * MiB where the vCPUs share 32); 0 when unknown. CPU 0's, not this
 * rank's: every rank of the host must reach the same verdicts. */
static uint64_t last_level_cache(void) {
  uint64_t best = 0;
  for (int i = 0; i < 8; i++) {
    char path[80], text[32];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "re");
    if (f == NULL) break;
    char *line = fgets(text, sizeof(text), f);
    fclose(f);
    char *end = NULL;
    unsigned long long v = line ? strtoull(text, &end, 10) : 0;
    if (end != NULL && (*end == 'K' || *end == 'k')) v <<= 10;
    else if (end != NULL && *end == 'M') v <<= 20;
    if (v > best) best = v;
  }
  return best;
}

static gcollResult_t peer_reads(struct gcollComm *comm, struct gcoll_exec_peer_reads *reads) {
  *reads = (struct gcoll_exec_peer_reads){0};
  if (comm->nranks < 2 || comm->view->nnodes != 1 || comm->has_net) return gcollSuccess;
  long bytes = SINGLE_COPY_DEFAULT_BYTES;
  char why[256];
  if (gcoll_setting_long("GCOLL_SINGLE_COPY_BYTES", 0, 1L << 40, &bytes, why, sizeof(why)) < 0)
    return gcoll_fail(gcollInvalidArgument, "%s", why);
  const char *pages = getenv("GCOLL_SINGLE_COPY_PAGES");
  if (pages != NULL && *pages != '\0' && strcmp(pages, "huge") != 0 && strcmp(pages, "any") != 0)
    return gcoll_fail(gcollInvalidArgument, "GCOLL_SINGLE_COPY_PAGES=%s: expected huge or any",
                      pages);
  long tune = 1;
  if (gcoll_setting_long("GCOLL_SINGLE_COPY_TUNE", 0, 1, &tune, why, sizeof(why)) < 0)
    return gcoll_fail(gcollInvalidArgument, "%s", why);
  uint64_t llc = last_level_cache();
  *reads = (struct gcoll_exec_peer_reads){
      .min_bytes = (uint64_t)bytes,
      .cache_bytes = llc > 0 ? llc / 4 : SINGLE_COPY_CACHE_BYTES,
      .tune = (int)tune,
      .identity = peer_identity,
      .probe = peer_probe,
      .read = peer_read,
      .cheap = pages != NULL && strcmp(pages, "any") == 0 ? any_pages : peer_cheap,
      .report = peer_report,
      .arg = comm};
  return gcollSuccess;
}

/* The one-shot board (kernels/host_oneshot.h) that carries the gather
 * form's vectors, where every rank is on this host and talks shared
 * memory (as peer_reads) and the gather form runs at all: slots of the
 * largest gather limit. Between 2 ranks both take one step, and the
 * board measured 0.6-0.97x the ring's time up to 512 B-1 KiB (every
 * collective) but 1.1-1.3x from 2 KiB (broadcast, reduce; allreduce from
 * 4 KiB) on the 2-core VM in alternating runs, so their board stops at
 * ONESHOT_PAIR_MAX_BYTES; with 3 or more ranks it replaces dependent
 * steps by one wait and measured 0.4-0.9x up to the gather limit.
 * Every rank reaches the same verdict (the terms
 * are the plan's and the gather limits, the same everywhere, and
 * GCOLL_HOST_ONESHOT, which must be set alike). */
#define ONESHOT_PAIR_MAX_BYTES 1024u

/* The node form of host allreduces between 2 nodes (host_exec.h) up to
 * this size, its node boards' slot: on 2 virtual nodes (TCP, 2 cores),
 * 2-4 ranks took 0.46-1.00x the ring's time up to 128 KiB, 0.87-1.47x at
 * 256 KiB. Every member reads every member's vector from the board, so
 * the limit shrinks with the node: at most NODE_FORM_NODE_BYTES over the
 * larger node's members (8 ranks, 4 a node, took 1.11-1.14x at 128 KiB,
 * 0.66-0.83x at 32 KiB), and a node's board at most NODE_BOARD_BUDGET
 * (its areas hold a slot per member). */
#define NODE_FORM_MAX_BYTES (128u << 10)
#define NODE_FORM_NODE_BYTES (256u << 10)
#define NODE_BOARD_BUDGET (16u << 20)

/* This rank's part in the node form, where the plan has 2 nodes and
 * each node's ranks are one run of channel 0's ring: then the other
 * node's are too, so every rank reaches the same verdict from its own
 * node. Returns 0 where the form does not apply. */
static int node_form_roles(const struct gcollComm *comm, struct gcoll_exec_node_form *n) {
  const struct gcoll_rank_view *v = comm->view;
  const int k = comm->nranks, local = v->local_nranks;
  const int cap = (int)(sizeof(v->node_ranks) / sizeof(v->node_ranks[0]));
  if (v->nnodes != 2 || local < 1 || local > cap || k - local < 1 || k - local > cap ||
      v->local_rank < 0 || v->local_rank >= local || v->node_ranks[v->local_rank] != comm->rank)
    return 0;
  unsigned char *here = calloc((size_t)k, 1);
  if (here == NULL) return 0;
  for (int i = 0; i < local; i++)
    if (v->node_ranks[i] >= 0 && v->node_ranks[i] < k) here[v->node_ranks[i]] = 1;
  const int *ring = comm->ring_ranks; /* channel 0's order */
  int crossings = 0, first_on_ring = -1, last_on_ring = -1;
  for (int i = 0; i < k; i++) {
    int a = ring[i], b = ring[(i + 1) % k];
    if (here[a] && !here[b]) {
      last_on_ring = a;
      crossings++;
    }
    if (!here[a] && here[b]) {
      first_on_ring = b;
      crossings++;
    }
  }
  free(here);
  if (crossings != 2 || first_on_ring < 0 || last_on_ring < 0) return 0;
  /* By the larger node, so that both nodes come to the same limit. */
  const uint64_t most = (uint64_t)(local > k - local ? local : k - local);
  uint64_t max_bytes = NODE_BOARD_BUDGET / (GCOLL_ONESHOT_AREAS * most);
  if (max_bytes > NODE_FORM_NODE_BYTES / most) max_bytes = NODE_FORM_NODE_BYTES / most;
  if (max_bytes > NODE_FORM_MAX_BYTES) max_bytes = NODE_FORM_MAX_BYTES;
  max_bytes = max_bytes / 64 * 64;
  if (max_bytes < 64) return 0;
  *n = (struct gcoll_exec_node_form){.on = 1,
                                     .members = v->node_ranks,
                                     .nmembers = local,
                                     .index = v->local_rank,
                                     .is_entry = comm->rank == first_on_ring,
                                     .is_exit = comm->rank == last_on_ring,
                                     .first = v->node == 0,
                                     .max_bytes = max_bytes};
  for (int i = 0; i < local; i++)
    if (v->node_ranks[i] == first_on_ring) n->entry = i;
  return 1;
}

static gcollResult_t oneshot_board(struct gcollComm *comm, const uint64_t *gather,
                                   struct gcoll_exec_config *cfg) {
  uint64_t slot = 0;
  for (int p = 0; p < GCOLL_NPROTOS; p++)
    if (gather[p] > slot) slot = gather[p];
  if (comm->nranks == 2 && slot > ONESHOT_PAIR_MAX_BYTES) slot = ONESHOT_PAIR_MAX_BYTES;
  long on = 1;
  char why[256];
  if (gcoll_setting_long("GCOLL_HOST_ONESHOT", 0, 1, &on, why, sizeof(why)) < 0)
    return gcoll_fail(gcollInvalidArgument, "%s", why);
  if (!on || comm->nranks < 2 || comm->fifos_on_device) return gcollSuccess;
  struct gcoll_exec_node_form node;
  if (node_form_roles(comm, &node)) {
    if (comm->oneshot_map == NULL) {
      gcollResult_t rc =
          gcoll_comm_oneshot_open(comm, node.members, node.nmembers, node.max_bytes);
      if (rc != gcollSuccess) return rc;
    }
    cfg->node = node;
    comm->node_form_bytes = node.max_bytes;
  } else {
    if (slot == 0 || comm->view->nnodes != 1 || comm->has_net) return gcollSuccess;
    if (comm->oneshot_map == NULL) {
      int *all = malloc((size_t)comm->nranks * sizeof(int));
      if (all == NULL) return gcoll_fail(gcollSystemError, "out of memory for a board's ranks");
      for (int r = 0; r < comm->nranks; r++) all[r] = r;
      gcollResult_t rc = gcoll_comm_oneshot_open(comm, all, comm->nranks, (slot + 63) / 64 * 64);
      free(all);
      if (rc != gcollSuccess) return rc;
    }
  }
  cfg->oneshot_board = comm->oneshot_map;
  cfg->oneshot_bytes = comm->oneshot_bytes;
  return gcollSuccess;
}

/* The instruction set of the host reductions (kernels/reduce.h): the
 * CPU's best, or GCOLL_HOST_ISA's choice, capped at the best as Open MPI
 * caps op_avx_support. Process-wide; every ISA gives the same bits, so
 * ranks need not agree on it. */
static gcollResult_t host_reductions(const struct gcollComm *comm) {
  const char *want = getenv("GCOLL_HOST_ISA");
  int isa = -1;
  if (want != NULL && *want != '\0' && strcmp(want, "auto") != 0) {
    isa = gcoll_reduce_isa_from_name(want);
    if (isa < 0)
      return gcoll_fail(gcollInvalidArgument,
                        "GCOLL_HOST_ISA=%s: expected auto, avx512, avx2 or baseline", want);
  }
  int used = gcoll_reduce_set_isa(isa);
  const char *capped = isa > used ? " (GCOLL_HOST_ISA asks for more than this CPU has)" : "";
  if (used == GCOLL_REDUCE_BASELINE)
    gcoll_log_info(comm, "host reductions use the baseline loops%s", capped);
  else
    gcoll_log_info(comm, "host reductions use the %s loops from %d B%s",
                   gcoll_reduce_isa_name(used), GCOLL_REDUCE_WIDE_BYTES, capped);
  return gcollSuccess;
}

/* The host executor's inline network polling (proxy.h), on this
 * communicator's proxy. */
static void poll_begin(void *proxy) { gcoll_proxy_inline_begin(proxy); }
static int poll_round(void *proxy) { return gcoll_proxy_poll(proxy); }
static void poll_end(void *proxy) { gcoll_proxy_inline_end(proxy); }

gcollResult_t gcoll_comm_executor(struct gcollComm *comm, enum gcoll_exec_kind kind) {
  if (comm->exec[kind].e != NULL) return gcollSuccess;
  const struct gcoll_exec_ops *ops = gcoll_exec_ops_of(kind);
  if (ops == NULL)
    return gcoll_fail(gcollInvalidUsage, "this build of gcoll has no %s executor (configured "
                                         "without the CUDA toolkit)",
                      kind == GCOLL_EXEC_CUDA ? "CUDA" : "such");
  char err[512];
  struct gcoll_exec_config cfg = {
      .rank = comm->rank,
      .nranks = comm->nranks,
      .nchannels = comm->nchannels,
      .channels = comm->channels,
      .slot_bytes = comm->slot_bytes,
      .abort_word = &comm->abort_word,
      .timeout_ns = comm->timeout_ms * 1000000ull,
      .spin_rounds = spin_rounds(comm),
      .device = comm->cuda_device,
  };
  if (comm->has_net)
    cfg.poll = (struct gcoll_exec_poll){
        .begin = poll_begin, .poll = poll_round, .end = poll_end, .arg = comm->proxy};
  if (kind == GCOLL_EXEC_HOST) {
    gcollResult_t rc = host_reductions(comm);
    if (rc == gcollSuccess) rc = gather_limits(comm, cfg.gather_bytes);
    if (rc == gcollSuccess) rc = peer_reads(comm, &cfg.peer_reads);
    if (rc == gcollSuccess) rc = oneshot_board(comm, cfg.gather_bytes, &cfg);
    if (rc != gcollSuccess) return rc;
    if (cfg.peer_reads.min_bytes > 0) {
      char judged[96];
      if (cfg.peer_reads.tune)
        snprintf(judged, sizeof(judged), "as timed on each size class's first calls");
      else
        snprintf(judged, sizeof(judged), "in cache: up to %llu B",
                 (unsigned long long)cfg.peer_reads.cache_bytes);
      gcoll_log_info(comm, "host broadcast and allgather from %llu B (allgather among n > 2 "
                           "ranks from n / 2 times that), and 2-rank allreduce's second half from "
                           "%llu B, read peers' buffers where that is the faster (%s; single "
                           "copy, %s)",
                     (unsigned long long)cfg.peer_reads.min_bytes,
                     GCOLL_DIRECT_ALLREDUCE_FACTOR * (unsigned long long)cfg.peer_reads.min_bytes,
                     judged,
                     cfg.peer_reads.cheap == peer_cheap ? "buffers in huge pages" : "any pages");
    }
    gcoll_log_info(comm, "host allreduce gathers whole vectors up to %llu B (simple), %llu B (ll)",
                   (unsigned long long)cfg.gather_bytes[GCOLL_PROTO_SIMPLE],
                   (unsigned long long)cfg.gather_bytes[GCOLL_PROTO_LL]);
    if (cfg.node.on)
      gcoll_log_info(comm, "host allreduces up to %llu B between the 2 nodes: each node sums on "
                           "its board (this node: %d rank%s), one step between the nodes (this "
                           "rank %s)",
                     (unsigned long long)cfg.node.max_bytes, cfg.node.nmembers,
                     cfg.node.nmembers == 1 ? "" : "s",
                     cfg.node.is_entry && cfg.node.is_exit ? "sends and receives it"
                     : cfg.node.is_entry                   ? "receives it"
                     : cfg.node.is_exit                    ? "sends it"
                                                           : "waits for its node's sum");
    else if (cfg.oneshot_board != NULL)
      gcoll_log_info(comm, "small host collectives on a one-shot board: up to %llu B a rank, "
                           "%llu calls deep up to %d B, %d beyond (%zu B of shared memory)",
                     (unsigned long long)((const struct gcoll_oneshot_header *)cfg.oneshot_board)
                         ->slot_bytes,
                     (unsigned long long)gcoll_oneshot_small_areas(comm->nranks),
                     GCOLL_ONESHOT_SMALL_SLOT, GCOLL_ONESHOT_AREAS, cfg.oneshot_bytes);
  }
  comm->exec[kind].e = ops->create(&cfg, err, sizeof(err));
  if (comm->exec[kind].e == NULL)
    return gcoll_fail(kind == GCOLL_EXEC_CUDA ? gcollUnhandledCudaError : gcollSystemError,
                      "%s executor: %s", ops->name, err);
  comm->exec[kind].ops = ops;
  if (kind == GCOLL_EXEC_CUDA && comm->proxy != NULL) {
    comm->kernel_abort = (struct gcoll_proxy_entry){.fd = -1, .check = forward_abort};
    if (gcoll_proxy_add(comm->proxy, &comm->kernel_abort, err, sizeof(err)) == 0)
      comm->kernel_abort_added = 1;
  }
  gcoll_log_info(comm, "%s executor ready (%d channels)", ops->name, comm->nchannels);
  return gcollSuccess;
}

static void comm_free(struct gcollComm *comm) {
  if (comm == NULL) return;
  if (comm->kernel_abort_added) gcoll_proxy_remove(comm->proxy, &comm->kernel_abort);
  for (int k = 0; k < GCOLL_NEXECS; k++)
    if (comm->exec[k].e != NULL) comm->exec[k].ops->destroy(comm->exec[k].e);
  gcoll_p2p_free(comm);
  gcoll_comm_redops_free(comm);
  gcoll_comm_oneshot_close(comm);
  gcoll_comm_disconnect(comm);
  gcoll_bootstrap_close(comm->bs);
  pthread_mutex_destroy(&comm->busy);
  free(comm->ring_ranks);
  free(comm->view);
  free(comm);
}

/* gcoll_comm_connect, with the store waits inside it told apart. */
static gcollResult_t timed_connect(struct gcollComm *comm, struct gcoll_init_timings *tm) {
  uint64_t n, store0, store1;
  gcoll_bootstrap_requests(comm->bs, &n, &store0, NULL, 0);
  uint64_t t0 = gcoll_wait_now_ns();
  gcollResult_t rc = gcoll_comm_connect(comm);
  tm->connect_ns = gcoll_wait_now_ns() - t0;
  gcoll_bootstrap_requests(comm->bs, &n, &store1, NULL, 0);
  tm->connect_store_ns = store1 - store0;
  return rc;
}

gcollResult_t gcoll_comm_init_with(gcollComm_t *out, const struct gcoll_comm_init_args *a) {
  *out = NULL;
  struct gcoll_init_timings tm;
  gcoll_init_timings_start(&tm, a->bs);
  struct gcollComm *comm = calloc(1, sizeof(*comm));
  if (comm == NULL) {
    gcoll_bootstrap_close(a->bs);
    return gcoll_fail(gcollSystemError, "out of memory for a communicator");
  }
  pthread_mutex_init(&comm->busy, NULL);
  atomic_init(&comm->abort_word, 0);
  atomic_init(&comm->in_call, 0);
  atomic_init(&comm->failed_peer, -1);
  comm->tree_root = -1;
  comm->rank = a->rank;
  comm->bs = a->bs;
  comm->net_transport = -1;
  if (a->config != NULL) {
    comm->config_min_channels = a->config->minChannels;
    comm->config_max_channels = a->config->maxChannels;
    if (a->config->netName != NULL)
      comm->net_transport = strcasecmp(a->config->netName, "IB") == 0 ? GCOLL_TRANSPORT_IB
                                                                       : GCOLL_TRANSPORT_SOCKET;
    if (a->config->commName != NULL)
      snprintf(comm->name, sizeof(comm->name), "%s", a->config->commName);
  }
  comm->gpu_at_init = a->has_gpu ? a->gpu : -1;
  char err[512];
  gcollResult_t rc;
  const char *key = a->job_key;
  if ((rc = read_tuning_env(comm)) != gcollSuccess) goto fail;
  /* Without a rank the bootstrap must name it before the plan can be read. */
  if (comm->rank < 0 && comm->bs == NULL &&
      gcoll_bootstrap_open_from_env(&comm->bs, err, sizeof(err)) != 0) {
    rc = gcoll_fail(gcollInvalidUsage, "%s", err);
    goto fail;
  }
  if (comm->rank < 0) comm->rank = comm->bs->rank;
  uint64_t t0 = gcoll_wait_now_ns();
  if ((rc = load_plan(comm, a->plan_path)) != gcollSuccess) goto fail;
  tm.plan_ns = gcoll_wait_now_ns() - t0;
  /* From the environment only once the plan is known good, so a bad plan
   * is reported as such even outside a job. */
  if (comm->bs == NULL && gcoll_bootstrap_open_from_env(&comm->bs, err, sizeof(err)) != 0) {
    rc = gcoll_fail(gcollInvalidUsage, "%s", err);
    goto fail;
  }
  if ((key == NULL && (rc = job_key_from_env(comm->bs, &key)) != gcollSuccess) ||
      (rc = set_job_key(comm, key, comm->bs->job_secret)) != gcollSuccess)
    goto fail;
  comm->timeout_ms = comm->bs->timeout_ms;
  if ((rc = check_job(comm, a->plan_path, a->check_host)) != gcollSuccess ||
      (rc = publish_channel_cap(comm)) != gcollSuccess ||
      (rc = timed_connect(comm, &tm)) != gcollSuccess ||
      (rc = agree_channel_cap(comm)) != gcollSuccess)
    goto fail;
  /* The host executor reads its FIFOs: not when they are in GPU memory
   * (the CUDA executor starts at the first device collective instead). */
  t0 = gcoll_wait_now_ns();
  if (!comm->fifos_on_device && (rc = gcoll_comm_executor(comm, GCOLL_EXEC_HOST)) != gcollSuccess)
    goto fail;
  tm.executor_ns = gcoll_wait_now_ns() - t0;
  /* Every rank connected before anyone's first collective: a peer that
   * failed to connect shows up here, with its reason on its own stderr.
   * With endpoints from the plan the wave in agree_channel_cap was that
   * barrier, over the plan's tree instead of the store. */
  uint64_t deadline = gcoll_bootstrap_deadline(comm->bs);
  if (!comm->bs->peer_routed &&
      gcoll_bootstrap_barrier(comm->bs, deadline, err, sizeof(err)) != 0) {
    rc = gcoll_fail(gcollRemoteError, "%s", err);
    goto fail;
  }
  gcoll_log_info(comm, "joined %s: %d ranks, node %d, %d channels (at most %d at once), "
                 "%d connections, slot %zu B, %s waits, job key %s", a->plan_path, comm->nranks,
                 comm->view->node, comm->nchannels, comm->max_run_channels, comm->nconns,
                 comm->slot_bytes,
                 spin_rounds(comm) == GCOLL_WAIT_DEDICATED_SPINS ? "long-spinning" : "yielding",
                 comm->bs->job_secret ? "mixed with the bootstrap's secret" : "as given");
  gcoll_init_timings_log(comm, &tm);
  *out = comm;
  return gcollSuccess;
fail:
  comm_free(comm);
  return rc;
}

/* No plan given and no GCOLL_PLAN: under a launcher's bootstrap (srun
 * --mpi=pmi2 without the plugin, gcollrun --no-plan) the ranks plan the
 * job themselves; without one there is nobody to plan with. */
static gcollResult_t init_from_job_plan(gcollComm_t *out) {
  struct gcoll_bootstrap *bs = NULL;
  char err[512], dir[4096], path[4200];
  if (gcoll_bootstrap_open_from_env(&bs, err, sizeof(err)) != 0)
    return gcoll_fail(gcollInvalidArgument, "no plan: pass a path or set GCOLL_PLAN, or start "
                      "the ranks under a launcher (srun --mpi=pmi2, gcollrun) so that they can "
                      "plan the job themselves (%s)", err);
  double ms = 0;
  gcollResult_t rc = gcoll_job_plan(bs, NULL, dir, sizeof(dir), path, sizeof(path), &ms);
  if (rc != gcollSuccess) {
    gcoll_bootstrap_close(bs);
    return gcoll_fail(rc, "no GCOLL_PLAN, and %s", gcollGetLastError(NULL));
  }
  gcoll_log_info(NULL, "rank %d: no GCOLL_PLAN: the ranks planned the job themselves in %.1f ms "
                 "(%s; the plugin, srun --gcoll=plan, does this once per step before the tasks "
                 "start)", bs->rank, ms,
                 bs->rank == 0 ? "topologies of every node, built here" : "fetched from rank 0");
  struct gcoll_comm_init_args a = {.plan_path = path, .rank = bs->rank, .bs = bs,
                                   .job_key = NULL, .check_host = 1};
  rc = gcoll_comm_init_with(out, &a);
  /* Init ends in a barrier: every rank has read its copy. */
  gcoll_local_plan_remove(dir);
  return rc;
}

gcollResult_t gcollCommInitFromPlan(gcollComm_t *out, const char *plan_path, int rank) {
  if (out == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommInitFromPlan: comm is NULL");
  *out = NULL;
  const char *env_plan = getenv("GCOLL_PLAN");
  if ((plan_path == NULL || *plan_path == '\0') && (env_plan == NULL || *env_plan == '\0') &&
      rank < 0)
    return init_from_job_plan(out);
  const char *path;
  gcollResult_t rc = resolve_rank(plan_path, &rank, &path);
  if (rc != gcollSuccess) return rc;
  struct gcoll_comm_init_args a = {.plan_path = path, .rank = rank, .bs = NULL, .job_key = NULL,
                                   .check_host = 1};
  return gcoll_comm_init_with(out, &a);
}

/* The process's futex sleeps so far (wait.h): whether a run's waits slept,
 * and were woken by their peers or ran into their timeout. */
static void log_wait_stats(const struct gcollComm *comm) {
  struct gcoll_wait_stats s;
  gcoll_wait_get_stats(&s);
  gcoll_log_info(comm, "waits of this process so far: %llu futex sleeps (%llu ended by their "
                 "timeout), %llu wake-ups sent", (unsigned long long)s.futex_sleeps,
                 (unsigned long long)s.futex_timeouts, (unsigned long long)s.futex_wakes);
}

gcollResult_t gcollCommDestroy(gcollComm_t comm) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommDestroy: comm is NULL");
  log_wait_stats(comm);
  comm_free(comm);
  return gcollSuccess;
}

gcollResult_t gcollCommAbort(gcollComm_t comm) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommAbort: comm is NULL");
  int expected = 0;
  atomic_compare_exchange_strong(&comm->abort_word, &expected, (int)gcollInvalidUsage);
  /* A collective in another thread sees the abort word in its next wait
   * round and returns; only then is it safe to free. */
  gcoll_comm_wait_calls(comm);
  comm_free(comm);
  return gcollSuccess;
}

gcollResult_t gcollCommGetAsyncError(gcollComm_t comm, gcollResult_t *async_error) {
  if (comm == NULL || async_error == NULL)
    return gcoll_fail(gcollInvalidArgument, "gcollCommGetAsyncError: NULL argument");
  *async_error = (gcollResult_t)atomic_load(&comm->abort_word);
  /* Kernels still queued or running report here too (and get the
   * communicator's abort word, if a transport set it). */
  struct gcoll_exec *cuda = comm->exec[GCOLL_EXEC_CUDA].e;
  if (*async_error == gcollSuccess && cuda != NULL && pthread_mutex_trylock(&comm->busy) == 0) {
    char err[512];
    gcollResult_t r = comm->exec[GCOLL_EXEC_CUDA].ops->poll(cuda, err, sizeof(err));
    pthread_mutex_unlock(&comm->busy);
    if (r == gcollInProgress) r = gcollSuccess;
    if (r != gcollSuccess) {
      *async_error = r;
      gcoll_comm_explain(comm, "work queued on the GPU", r, err);
      return gcollSuccess;
    }
  }
  if (*async_error == gcollRemoteError)
    gcoll_fail(gcollRemoteError, "rank %d died or closed its connection",
               atomic_load(&comm->failed_peer));
  return gcollSuccess;
}

gcollResult_t gcollCommCount(const gcollComm_t comm, int *count) {
  if (comm == NULL || count == NULL)
    return gcoll_fail(gcollInvalidArgument, "gcollCommCount: NULL argument");
  *count = comm->nranks;
  return gcollSuccess;
}

gcollResult_t gcollCommUserRank(const gcollComm_t comm, int *rank) {
  if (comm == NULL || rank == NULL)
    return gcoll_fail(gcollInvalidArgument, "gcollCommUserRank: NULL argument");
  *rank = comm->rank;
  return gcollSuccess;
}
