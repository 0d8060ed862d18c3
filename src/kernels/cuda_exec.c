/* The CUDA executor (see cuda_exec.h). */
#include "kernels/cuda_exec.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errf.h"
#include "kernels/coll_args.h"
#include "kernels/cuda_fatbin.h"
#include "kernels/fifo.h"
#include "kernels/prims.h"
#include "kernels/reduce.h"
#include "kernels/wait.h"

/* The device mirror of struct gcoll_fifo (prims_cuda.cuh) is checked against
 * the same numbers. */
_Static_assert(GCOLL_STEPS == GCOLL_CUDA_FIFO_STEPS, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, tail) == GCOLL_CUDA_FIFO_OFF_TAIL, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, head) == GCOLL_CUDA_FIFO_OFF_HEAD, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, slot_bytes) == GCOLL_CUDA_FIFO_OFF_SLOT_BYTES,
               "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, ll_slot_bytes) == GCOLL_CUDA_FIFO_OFF_LL_SLOT_BYTES,
               "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, simple_offset) ==
                   GCOLL_CUDA_FIFO_OFF_SIMPLE_OFFSET, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, ll_offset) == GCOLL_CUDA_FIFO_OFF_LL_OFFSET,
               "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, nbytes) == GCOLL_CUDA_FIFO_OFF_NBYTES, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, proto) == GCOLL_CUDA_FIFO_OFF_PROTO, "FIFO layout");
_Static_assert(sizeof(struct gcoll_fifo) == GCOLL_CUDA_FIFO_HEADER, "FIFO layout");
_Static_assert(GCOLL_CUDA_MAX_PEERS == GCOLL_PRIMS_MAX_PEERS, "peer count");
_Static_assert(GCOLL_CUDA_SCRATCH == GCOLL_PRIMS_SCRATCH, "scratch count");
_Static_assert(sizeof(((struct gcoll_cuda_work *)0)->premul) == sizeof(int32_t) &&
               GCOLL_PREMUL_DEVICE == 2, "pre-mul-sum kinds in the kernel's argument");

/* Host-mapped words the kernel writes and the host reads (or vice versa):
 * a status row and a local abort word per launch slot, so that launches
 * queue on the stream without waiting for each other. */
struct mapped {
  struct gcoll_cuda_status status[GCOLL_CUDA_EXEC_SLOTS][GCOLL_CUDA_MAX_CHANNELS];
  int32_t local_abort[GCOLL_CUDA_EXEC_SLOTS];
  int32_t abort_word;
  /* Every kernel captured into a CUDA graph reports here, on every replay:
   * the host never learns when a replay runs, so it cannot reap slots for
   * them; a failure stays in graph_abort (kernels never clear it), which
   * poll turns into the executor's sticky failure. */
  int32_t graph_abort;
  struct gcoll_cuda_status graph_status[GCOLL_CUDA_MAX_CHANNELS];
};

struct gcoll_cuda_exec {
  struct gcoll_exec_frame frame;    /* first: gcoll_exec_frame_alloc */
  const struct gcoll_cuda_api *cu;
  gcoll_cu_device dev;
  gcoll_cu_context ctx;
  int ctx_retained;
  gcoll_cu_module mod;
  gcoll_cu_function fn;
  gcoll_cu_function fn_p2p;          /* send/recv (p2p_device.cuh) */
  gcoll_cu_stream own_stream;        /* every launch runs here, in order */
  gcoll_cu_event caller_ready, done; /* ordering with the caller's stream */
  uint64_t launched, reaped;        /* launches so far; those whose result is known */
  uint64_t captured;                /* launches recorded into CUDA graphs */
  int copies_queued;                /* single-rank copies on own_stream since the last wait:
                                       they have no slot, so wait syncs the stream */
  struct gcoll_cuda_coll graph_job; /* the widest captured launch, for messages */
  gcollResult_t failed;             /* the first failed launch's result, sticky */
  char failed_msg[256];
  int stalled;                      /* failed at a channel's deadline on a FIFO: stall */
  struct gcoll_cuda_stall stall;
  _Atomic int *extern_abort;
  gcoll_cu_deviceptr channels;      /* struct gcoll_cuda_channel[nchannels] */
  gcoll_cu_deviceptr ranks;         /* int32_t[nchannels][nranks] */
  gcoll_cu_deviceptr scratch;
  struct mapped *host;              /* host view of the mapped words */
  gcoll_cu_deviceptr host_dev;      /* the device's view */
  struct gcoll_cuda_coll jobs[GCOLL_CUDA_EXEC_SLOTS]; /* what each slot runs, for messages */
  /* Send/recv operations, a ring of host-mapped entries made at the first
   * send/recv launch: a launch takes a contiguous run of them, freed when
   * its slot is reaped (slots are reaped in launch order). Positions count
   * up forever; entry = position % P2P_RING. */
  struct gcoll_cuda_p2p_op *p2p_ring;
  gcoll_cu_deviceptr p2p_ring_dev;
  uint64_t p2p_next, p2p_free;
  uint64_t p2p_end[GCOLL_CUDA_EXEC_SLOTS];  /* the ring position after a slot's entries */
  int p2p_ops[GCOLL_CUDA_EXEC_SLOTS];       /* a slot's send/recv count; 0: a collective */
};
_Static_assert(offsetof(struct gcoll_cuda_exec, frame) == 0, "gcoll_exec_frame_alloc");

/* Send/recv entries the ring holds: one group's operations must fit. */
#define P2P_RING 4096

/* Runs a driver call; on failure writes "what: CUDA_ERROR_..." and returns -1. */
#define CU_TRY(e, call, what)                                                          \
  do {                                                                                 \
    gcoll_cu_result cu_r_ = (call);                                                    \
    if (cu_r_ != GCOLL_CU_SUCCESS) {                                                   \
      gcoll_errf(err, errlen, "%s: %s", what, gcoll_cuda_result_text((e)->cu, cu_r_)); \
      return -1;                                                                       \
    }                                                                                  \
  } while (0)

/* ---- creation ------------------------------------------------------------ */

static int check_config(const struct gcoll_cuda_exec_config *cfg,
                        struct gcoll_exec_frame *frame, char *err, size_t errlen) {
  if (cfg == NULL || cfg->channels == NULL || cfg->device < 0 ||
      gcoll_exec_frame_set(frame, cfg->rank, cfg->nranks, cfg->nchannels,
                           GCOLL_CUDA_MAX_CHANNELS, cfg->timeout_ns) != 0) {
    gcoll_errf(err, errlen, "invalid CUDA executor config (device/rank/nranks/nchannels)");
    return -1;
  }
  for (int c = 0; c < cfg->nchannels; c++) {
    const struct gcoll_cuda_exec_channel *ch = &cfg->channels[c];
    struct gcoll_exec_channel_shape shape = {
        .ring_ranks = ch->ring_ranks, .ring_pos = ch->ring_pos, .has_tree = ch->has_tree,
        .tree_parent = ch->tree_parent, .tree_nchildren = ch->tree_nchildren};
    if (gcoll_exec_frame_channel(frame, c, &shape, err, errlen) != 0) return -1;
    if (cfg->nranks > 1 && (ch->ring_recv_prev == 0 || ch->ring_send_next == 0)) {
      gcoll_errf(err, errlen, "channel %d: missing ring FIFO", c);
      return -1;
    }
    if (!gcoll_fifo_slot_bytes_valid(ch->slot_bytes)) {
      gcoll_errf(err, errlen, "channel %d: invalid FIFO slot size %zu", c, ch->slot_bytes);
      return -1;
    }
  }
  return 0;
}

static int open_device(struct gcoll_cuda_exec *e, int ordinal, char *err, size_t errlen) {
  int ndev = 0, major = 0, minor = 0, uva = 0;
  if (gcoll_cuda_probe(&ndev, err, errlen) != GCOLL_CUDA_AVAILABLE) return -1;
  e->cu = gcoll_cuda_api_get(NULL, 0);
  if (ordinal >= ndev) {
    gcoll_errf(err, errlen, "no GPU %d: the driver sees %d", ordinal, ndev);
    return -1;
  }
  CU_TRY(e, e->cu->device_get(&e->dev, ordinal), "cuDeviceGet");
  CU_TRY(e, e->cu->device_get_attribute(&major, GCOLL_CU_DEVICE_ATTRIBUTE_CC_MAJOR, e->dev),
         "cuDeviceGetAttribute");
  CU_TRY(e, e->cu->device_get_attribute(&minor, GCOLL_CU_DEVICE_ATTRIBUTE_CC_MINOR, e->dev),
         "cuDeviceGetAttribute");
  CU_TRY(e, e->cu->device_get_attribute(&uva, GCOLL_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
                                        e->dev), "cuDeviceGetAttribute");
  /* The fatbin holds sm_80 and sm_90 code and compute_90 PTX. */
  if (major < 8) {
    gcoll_errf(err, errlen, "GPU %d is sm_%d%d; the kernels need sm_80 or newer", ordinal, major,
               minor);
    return -1;
  }
  if (!uva) {
    gcoll_errf(err, errlen, "GPU %d lacks unified addressing (mapped host memory)", ordinal);
    return -1;
  }
  CU_TRY(e, e->cu->primary_ctx_retain(&e->ctx, e->dev), "cuDevicePrimaryCtxRetain");
  e->ctx_retained = 1;
  CU_TRY(e, e->cu->ctx_set_current(e->ctx), "cuCtxSetCurrent");
  return 0;
}

static int load_module(struct gcoll_cuda_exec *e, char *err, size_t errlen) {
  CU_TRY(e, e->cu->module_load_data(&e->mod, gcoll_cuda_fatbin), "cuModuleLoadData");
  CU_TRY(e, e->cu->module_get_function(&e->fn, e->mod, GCOLL_CUDA_KERNEL_NAME),
         "cuModuleGetFunction(" GCOLL_CUDA_KERNEL_NAME ")");
  CU_TRY(e, e->cu->module_get_function(&e->fn_p2p, e->mod, GCOLL_CUDA_P2P_KERNEL_NAME),
         "cuModuleGetFunction(" GCOLL_CUDA_P2P_KERNEL_NAME ")");
  return 0;
}

/* LL payload of a step, rounded to 16 bytes for the vector loops. */
static size_t scratch_bytes_for(size_t slot_bytes) { return (slot_bytes / 4 + 15) / 16 * 16; }

static int copy_channels(struct gcoll_cuda_exec *e, const struct gcoll_cuda_exec_config *cfg,
                         char *err, size_t errlen) {
  const size_t nch = (size_t)cfg->nchannels, nr = (size_t)cfg->nranks;
  size_t scratch_total = 0;
  for (size_t c = 0; c < nch; c++)
    scratch_total += GCOLL_CUDA_SCRATCH * scratch_bytes_for(cfg->channels[c].slot_bytes);
  CU_TRY(e, e->cu->mem_alloc(&e->channels, nch * sizeof(struct gcoll_cuda_channel)),
         "cuMemAlloc(channels)");
  CU_TRY(e, e->cu->mem_alloc(&e->ranks, nch * nr * sizeof(int32_t)), "cuMemAlloc(ranks)");
  CU_TRY(e, e->cu->mem_alloc(&e->scratch, scratch_total), "cuMemAlloc(scratch)");
  CU_TRY(e, e->cu->memset_d8(e->scratch, 0, scratch_total), "cuMemsetD8(scratch)");
  struct gcoll_cuda_channel dev[GCOLL_CUDA_MAX_CHANNELS];
  int32_t *ranks = calloc(nch * nr, sizeof(int32_t));
  if (ranks == NULL) {
    gcoll_errf(err, errlen, "out of memory");
    return -1;
  }
  gcoll_cu_deviceptr scratch = e->scratch;
  memset(dev, 0, sizeof(dev));
  for (size_t c = 0; c < nch; c++) {
    const struct gcoll_cuda_exec_channel *in = &cfg->channels[c];
    struct gcoll_cuda_channel *d = &dev[c];
    for (size_t i = 0; i < nr; i++) ranks[c * nr + i] = in->ring_ranks[i];
    d->ring_recv_prev = in->ring_recv_prev;
    d->ring_send_next = in->ring_send_next;
    d->ring_ranks = e->ranks + c * nr * sizeof(int32_t);
    d->ring_pos = in->ring_pos;
    d->has_tree = in->has_tree;
    d->tree_parent = in->has_tree ? in->tree_parent : -1;
    d->tree_nchildren = in->has_tree ? in->tree_nchildren : 0;
    d->tree_recv_parent = in->tree_recv_parent;
    d->tree_send_parent = in->tree_send_parent;
    for (int k = 0; k < GCOLL_CUDA_MAX_PEERS; k++) {
      d->tree_recv_child[k] = in->tree_recv_child[k];
      d->tree_send_child[k] = in->tree_send_child[k];
    }
    d->scratch = scratch;
    d->scratch_bytes = scratch_bytes_for(in->slot_bytes);
    scratch += GCOLL_CUDA_SCRATCH * d->scratch_bytes;
  }
  gcoll_cu_result r = e->cu->memcpy_htod(e->ranks, ranks, nch * nr * sizeof(int32_t));
  free(ranks);
  if (r != GCOLL_CU_SUCCESS) {
    gcoll_errf(err, errlen, "cuMemcpyHtoD(ranks): %s", gcoll_cuda_result_text(e->cu, r));
    return -1;
  }
  CU_TRY(e, e->cu->memcpy_htod(e->channels, dev, nch * sizeof(struct gcoll_cuda_channel)),
         "cuMemcpyHtoD(channels)");
  return 0;
}

static int alloc_mapped(struct gcoll_cuda_exec *e, char *err, size_t errlen) {
  void *p = NULL;
  CU_TRY(e, e->cu->mem_host_alloc(&p, sizeof(struct mapped),
                                  GCOLL_CU_MEMHOSTALLOC_PORTABLE |
                                      GCOLL_CU_MEMHOSTALLOC_DEVICEMAP),
         "cuMemHostAlloc");
  e->host = p;
  memset(e->host, 0, sizeof(*e->host));
  CU_TRY(e, e->cu->mem_host_get_device_pointer(&e->host_dev, p, 0),
         "cuMemHostGetDevicePointer");
  return 0;
}

struct gcoll_cuda_exec *gcoll_cuda_exec_create(const struct gcoll_cuda_exec_config *cfg,
                                               char *err, size_t errlen) {
  struct gcoll_exec_frame frame;
  if (check_config(cfg, &frame, err, errlen) != 0) return NULL;
  struct gcoll_cuda_exec *e = gcoll_exec_frame_alloc(sizeof(*e), &frame, err, errlen);
  if (e == NULL) return NULL;
  e->extern_abort = cfg->extern_abort;
  if (open_device(e, cfg->device, err, errlen) != 0 || load_module(e, err, errlen) != 0 ||
      copy_channels(e, cfg, err, errlen) != 0 || alloc_mapped(e, err, errlen) != 0) {
    gcoll_cuda_exec_destroy(e);
    return NULL;
  }
  gcoll_cu_result r = e->cu->stream_create(&e->own_stream, GCOLL_CU_STREAM_NON_BLOCKING);
  const char *what = "cuStreamCreate";
  if (r == GCOLL_CU_SUCCESS) {
    what = "cuEventCreate";
    r = e->cu->event_create(&e->caller_ready, GCOLL_CU_EVENT_DISABLE_TIMING);
  }
  if (r == GCOLL_CU_SUCCESS) r = e->cu->event_create(&e->done, GCOLL_CU_EVENT_DISABLE_TIMING);
  if (r != GCOLL_CU_SUCCESS) {
    gcoll_errf(err, errlen, "%s: %s", what, gcoll_cuda_result_text(e->cu, r));
    gcoll_cuda_exec_destroy(e);
    return NULL;
  }
  return e;
}

void gcoll_cuda_exec_destroy(struct gcoll_cuda_exec *e) {
  if (e == NULL) return;
  if (e->cu != NULL && e->ctx_retained) {
    e->cu->ctx_set_current(e->ctx);
    if (e->launched > e->reaped) {
      char ignored[256];
      gcoll_cuda_exec_wait(e, ignored, sizeof(ignored));
    }
    if (e->caller_ready != NULL) e->cu->event_destroy(e->caller_ready);
    if (e->done != NULL) e->cu->event_destroy(e->done);
    if (e->own_stream != NULL) e->cu->stream_destroy(e->own_stream);
    if (e->host != NULL) e->cu->mem_free_host(e->host);
    if (e->p2p_ring != NULL) e->cu->mem_free_host(e->p2p_ring);
    if (e->scratch != 0) e->cu->mem_free(e->scratch);
    if (e->ranks != 0) e->cu->mem_free(e->ranks);
    if (e->channels != 0) e->cu->mem_free(e->channels);
    if (e->mod != NULL) e->cu->module_unload(e->mod);
    e->cu->primary_ctx_release(e->dev);
  }
  free(e);
}

/* ---- launching ------------------------------------------------------------ */

static gcollResult_t check_coll(const struct gcoll_cuda_exec *e, const struct gcoll_cuda_coll *c,
                                char *err, size_t errlen) {
  gcollResult_t r = gcoll_coll_args_check(c->coll, c->dtype, c->op, c->root, e->frame.nranks,
                                          c->proto, "the CUDA kernel", err, errlen);
  if (r == gcollSuccess)
    r = gcoll_coll_premul_check(c->coll, c->op, c->premul, 1, "the CUDA kernel", err, errlen);
  if (r == gcollSuccess && c->premul == GCOLL_PREMUL_DEVICE && c->premul_k == 0) {
    gcoll_errf(err, errlen, "the pre-mul-sum scalar's device address is 0");
    r = gcollInvalidArgument;
  }
  if (r != gcollSuccess) return r;
  size_t esize = gcoll_dtype_size(c->dtype);
  if ((int)c->algo < 0 || c->algo >= GCOLL_NALGOS) {
    gcoll_errf(err, errlen, "invalid algorithm %d", (int)c->algo);
    return gcollInvalidArgument;
  }
  if (!gcoll_cuda_algo_supported[c->coll][c->algo]) {
    gcoll_errf(err, errlen, "the CUDA kernel has no %s %s", gcoll_algo_name(c->algo),
               gcoll_coll_name(c->coll));
    return gcollInvalidUsage;
  }
  r = gcoll_exec_frame_check_channels(&e->frame, c->nchannels, c->algo, err, errlen);
  if (r != gcollSuccess) return r;
  return gcoll_exec_frame_check_buffers(&e->frame, c->coll, c->count, esize, c->root, c->sendbuf,
                                        c->recvbuf, err, errlen);
}

/* The stream work the host must wait for before reusing the oldest slot:
 * bounded like any wait (gcoll_cuda_exec_wait's rule). */
static gcollResult_t free_a_slot(struct gcoll_cuda_exec *e, char *err, size_t errlen) {
  if (e->launched - e->reaped < GCOLL_CUDA_EXEC_SLOTS) return gcollSuccess;
  return gcoll_cuda_exec_wait_until(e, e->reaped + 1, err, errlen);
}

/* Runs `what` on the driver, or says why not. */
static gcollResult_t driver_ok(struct gcoll_cuda_exec *e, gcoll_cu_result r, const char *what,
                               char *err, size_t errlen) {
  if (r == GCOLL_CU_SUCCESS) return gcollSuccess;
  gcoll_errf(err, errlen, "%s: %s", what, gcoll_cuda_result_text(e->cu, r));
  return gcollUnhandledCudaError;
}

/* Work on the executor's stream is ordered like work on the caller's own:
 * after the caller's earlier work (before it is queued) and before the
 * caller's later work (after). */
static gcollResult_t after_caller(struct gcoll_cuda_exec *e, gcoll_cu_stream caller, char *err,
                                  size_t errlen) {
  gcollResult_t r = driver_ok(e, e->cu->event_record(e->caller_ready, caller), "cuEventRecord",
                              err, errlen);
  if (r != gcollSuccess) return r;
  return driver_ok(e, e->cu->stream_wait_event(e->own_stream, e->caller_ready, 0),
                   "cuStreamWaitEvent", err, errlen);
}

static gcollResult_t before_caller(struct gcoll_cuda_exec *e, gcoll_cu_stream caller, char *err,
                                   size_t errlen) {
  gcollResult_t r = driver_ok(e, e->cu->event_record(e->done, e->own_stream), "cuEventRecord",
                              err, errlen);
  if (r != gcollSuccess) return r;
  return driver_ok(e, e->cu->stream_wait_event(caller, e->done, 0), "cuStreamWaitEvent", err,
                   errlen);
}

/* One rank's collective, its input copied to its output on `stream`
 * (nothing to do in place or for 0 elements). */
static gcollResult_t copy_one_rank(struct gcoll_cuda_exec *e, const struct gcoll_cuda_coll *c,
                                   gcoll_cu_stream stream, char *err, size_t errlen) {
  size_t bytes = c->count * gcoll_dtype_size(c->dtype);
  if (bytes == 0 || c->sendbuf == c->recvbuf) return gcollSuccess;
  return driver_ok(e, e->cu->memcpy_dtod_async(c->recvbuf, c->sendbuf, bytes, stream),
                   "cuMemcpyDtoDAsync", err, errlen);
}

/* The kernel's argument for collective c on nch channels, reporting to the
 * status row and local abort word at these device addresses. */
static void fill_work(const struct gcoll_cuda_exec *e, const struct gcoll_cuda_coll *c, int nch,
                      gcoll_cu_deviceptr status, gcoll_cu_deviceptr local_abort,
                      struct gcoll_cuda_work *w) {
  memset(w, 0, sizeof(*w));
  w->channels = e->channels;
  w->status = status;
  w->abort_word = e->host_dev + offsetof(struct mapped, abort_word);
  w->local_abort = local_abort;
  w->sendbuf = c->sendbuf;
  w->recvbuf = c->recvbuf;
  w->count = c->count;
  w->stride = c->count;
  w->timeout_ns = e->frame.timeout_ns;
  w->coll = (int32_t)c->coll;
  w->algo = (int32_t)c->algo;
  w->proto = (int32_t)c->proto;
  w->dtype = (int32_t)c->dtype;
  w->op = (int32_t)c->op;
  w->root = c->root;
  w->rank = e->frame.rank;
  w->nranks = e->frame.nranks;
  w->nchannels = nch;
  w->premul = (int32_t)c->premul;
  w->scalar = c->premul_k;
}

/* Whether the caller's stream is being captured into a CUDA graph (as
 * torch.compile, vLLM and nccl-tests -G do). */
static gcollResult_t capture_status(struct gcoll_cuda_exec *e, gcoll_cu_stream caller,
                                    int *capturing, char *err, size_t errlen) {
  int status = GCOLL_CU_STREAM_CAPTURE_STATUS_NONE;
  gcollResult_t r = driver_ok(e, e->cu->stream_is_capturing(caller, &status),
                              "cuStreamIsCapturing", err, errlen);
  if (r != gcollSuccess) return r;
  if (status == GCOLL_CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    gcoll_errf(err, errlen, "the stream's CUDA graph capture was invalidated before this call");
    return gcollInvalidUsage;
  }
  *capturing = status == GCOLL_CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return gcollSuccess;
}

/* A collective on a stream being captured: recorded into the caller's
 * graph and run at each replay, which the host does not see. So it goes
 * on the caller's stream itself (the executor's stream never joins a
 * capture, and the caller's later eager calls are not captured by
 * accident), reports to the graph row instead of a slot, and is
 * replay-safe because the kernel takes its FIFO positions from the FIFOs
 * (fifo.h), never from this launch. Replays must be ordered with the
 * communicator's other collectives by the caller (the same stream, or a
 * synchronisation), as every rank must replay them in the same order. */
static gcollResult_t launch_captured(struct gcoll_cuda_exec *e, const struct gcoll_cuda_coll *c,
                                     void *stream, char *err, size_t errlen) {
  gcoll_cu_stream caller = (gcoll_cu_stream)stream;
  gcollResult_t r;
  if (e->frame.nranks == 1 && c->premul == GCOLL_PREMUL_NONE) {
    if ((r = copy_one_rank(e, c, caller, err, errlen)) != gcollSuccess) return r;
    e->captured++;
    return gcollSuccess;
  }
  const int nch = gcoll_exec_frame_nch(&e->frame, c->nchannels);
  struct gcoll_cuda_work w;
  fill_work(e, c, nch, e->host_dev + offsetof(struct mapped, graph_status),
            e->host_dev + offsetof(struct mapped, graph_abort), &w);
  void *params[] = {&w};
  if ((r = driver_ok(e, e->cu->launch_kernel(e->fn, (unsigned)nch, 1, 1, GCOLL_CUDA_THREADS, 1,
                                             1, 0, caller, params, NULL),
                     "cuLaunchKernel (captured)", err, errlen)) != gcollSuccess)
    return r;
  e->captured++;
  if (nch > e->graph_job.nchannels) {
    e->graph_job = *c;
    e->graph_job.nchannels = nch;
  }
  return gcollSuccess;
}

/* One rank: every collective's result is its own input (one part to
 * gather or scatter, one operand to reduce, avg dividing by 1), so it is a
 * device-to-device copy, which the copy engine runs at memory speed, as
 * NCCL does for one rank; in place only the ordering remains. The kernel
 * with no peers copied through its channels' blocks: 2.4x NCCL's time at
 * 8 B and 12x at 512 MB on an H200. Ordered like a launch (the executor's
 * stream after the caller's earlier work, the caller's later work after
 * it); no slot, since there is no kernel to report. */
static gcollResult_t launch_copy(struct gcoll_cuda_exec *e, const struct gcoll_cuda_coll *c,
                                 void *stream, char *err, size_t errlen) {
  gcoll_cu_stream caller = (gcoll_cu_stream)stream;
  gcollResult_t r;
  /* In place or empty there is nothing to order: two events and two
   * waits cost ~3 us a call on an H100 (nccl-tests in place: 2.8-3.7 us
   * against NCCL's 0.35-0.45 us). */
  if (c->count == 0 || c->sendbuf == c->recvbuf) return gcollSuccess;
  if ((r = after_caller(e, caller, err, errlen)) != gcollSuccess ||
      (r = copy_one_rank(e, c, e->own_stream, err, errlen)) != gcollSuccess)
    return r;
  e->copies_queued = 1;
  return before_caller(e, caller, err, errlen);
}

/* An aborted executor, or one whose launch failed, takes nothing new. */
static gcollResult_t launch_allowed(struct gcoll_cuda_exec *e, char *err, size_t errlen) {
  int aborted = atomic_load_explicit((_Atomic int32_t *)&e->host->abort_word,
                                     memory_order_acquire);
  if (aborted != 0) {
    gcoll_errf(err, errlen, "the executor was aborted (result %d)", aborted);
    return (gcollResult_t)aborted;
  }
  if (e->failed != gcollSuccess) {
    gcoll_errf(err, errlen, "an earlier collective failed: %s", e->failed_msg);
    return e->failed;
  }
  return gcollSuccess;
}

gcollResult_t gcoll_cuda_exec_launch(struct gcoll_cuda_exec *e, const struct gcoll_cuda_coll *c,
                                     void *stream, char *err, size_t errlen) {
  if (e == NULL || c == NULL) {
    gcoll_errf(err, errlen, "NULL executor or collective");
    return gcollInvalidArgument;
  }
  gcollResult_t allowed = launch_allowed(e, err, errlen);
  if (allowed != gcollSuccess) return allowed;
  gcollResult_t r = check_coll(e, c, err, errlen);
  int capturing = 0;
  if (r == gcollSuccess) r = capture_status(e, (gcoll_cu_stream)stream, &capturing, err, errlen);
  if (r == gcollSuccess && capturing) return launch_captured(e, c, stream, err, errlen);
  /* One rank's pre-mul-sum scales: the kernel, with no peers. */
  if (r == gcollSuccess && e->frame.nranks == 1 && c->premul == GCOLL_PREMUL_NONE)
    return launch_copy(e, c, stream, err, errlen);
  if (r == gcollSuccess) r = free_a_slot(e, err, errlen);
  if (r != gcollSuccess) return r;
  const int nch = gcoll_exec_frame_nch(&e->frame, c->nchannels);
  const unsigned slot = (unsigned)(e->launched % GCOLL_CUDA_EXEC_SLOTS);
  memset(e->host->status[slot], 0, sizeof(e->host->status[slot]));
  atomic_store_explicit((_Atomic int32_t *)&e->host->local_abort[slot], 0, memory_order_release);
  struct gcoll_cuda_work w;
  fill_work(e, c, nch,
            e->host_dev + offsetof(struct mapped, status) + slot * sizeof(e->host->status[0]),
            e->host_dev + offsetof(struct mapped, local_abort) + slot * sizeof(int32_t), &w);
  /* Every launch runs on the executor's stream, so collectives of this
   * executor never overlap whatever streams callers pass (they share the
   * FIFOs); events order it after the caller's earlier work and the
   * caller's later work after it, as the caller's own stream would. */
  gcoll_cu_stream caller = (gcoll_cu_stream)stream;
  void *params[] = {&w};
  if ((r = after_caller(e, caller, err, errlen)) != gcollSuccess ||
      (r = driver_ok(e, e->cu->launch_kernel(e->fn, (unsigned)nch, 1, 1, GCOLL_CUDA_THREADS, 1,
                                             1, 0, e->own_stream, params, NULL),
                     "cuLaunchKernel", err, errlen)) != gcollSuccess)
    return r;
  e->jobs[slot] = *c;
  e->jobs[slot].nchannels = nch;
  e->p2p_ops[slot] = 0;
  e->launched++;
  return before_caller(e, caller, err, errlen);
}

/* ---- send/recv ------------------------------------------------------------- */

/* Room for n send/recv entries in the ring, contiguous; *start gets their
 * position. Waits for older launches while the ring is full. */
static gcollResult_t p2p_reserve(struct gcoll_cuda_exec *e, int n, uint64_t *start, char *err,
                                 size_t errlen) {
  if (e->p2p_ring == NULL) {
    void *p = NULL;
    gcollResult_t r = driver_ok(e, e->cu->mem_host_alloc(&p, P2P_RING * sizeof(*e->p2p_ring),
                                                         GCOLL_CU_MEMHOSTALLOC_PORTABLE |
                                                             GCOLL_CU_MEMHOSTALLOC_DEVICEMAP),
                                "cuMemHostAlloc (send/recv operations)", err, errlen);
    if (r != gcollSuccess) return r;
    e->p2p_ring = p;
    r = driver_ok(e, e->cu->mem_host_get_device_pointer(&e->p2p_ring_dev, p, 0),
                  "cuMemHostGetDevicePointer (send/recv operations)", err, errlen);
    if (r != gcollSuccess) return r;
  }
  for (;;) {
    uint64_t at = e->p2p_next;
    if (at % P2P_RING + (uint64_t)n > P2P_RING) at += P2P_RING - at % P2P_RING;
    if (at + (uint64_t)n - e->p2p_free <= P2P_RING) {
      *start = at;
      return gcollSuccess;
    }
    /* Every entry still in use belongs to a launch in flight. */
    gcollResult_t r = gcoll_cuda_exec_wait_until(e, e->reaped + 1, err, errlen);
    if (r != gcollSuccess) return r;
    if (e->reaped == e->launched) e->p2p_free = e->p2p_next;
  }
}

gcollResult_t gcoll_cuda_exec_p2p_streams_ok(struct gcoll_cuda_exec *e,
                                             const gcoll_cu_stream *streams, int nstreams,
                                             char *err, size_t errlen) {
  /* The operations' message numbers are fixed when queued: a graph replay
   * would send them again under the same numbers, which the peer refuses. */
  for (int i = 0; i < nstreams; i++) {
    int capture = GCOLL_CU_STREAM_CAPTURE_STATUS_NONE;
    gcollResult_t r = driver_ok(e, e->cu->stream_is_capturing(streams[i], &capture),
                                "cuStreamIsCapturing", err, errlen);
    if (r != gcollSuccess) return r;
    if (capture != GCOLL_CU_STREAM_CAPTURE_STATUS_NONE) {
      gcoll_errf(err, errlen, "send/recv on device buffers cannot be captured into a CUDA graph "
                 "(each message is numbered when it is queued); the stream is %s",
                 capture == GCOLL_CU_STREAM_CAPTURE_STATUS_ACTIVE ? "capturing"
                                                               : "in an invalidated capture");
      return gcollInvalidUsage;
    }
  }
  return gcollSuccess;
}

gcollResult_t gcoll_cuda_exec_launch_p2p(struct gcoll_cuda_exec *e,
                                         const struct gcoll_cuda_p2p_op *ops, int nops,
                                         const gcoll_cu_stream *streams, int nstreams, char *err,
                                         size_t errlen) {
  if (e == NULL || (ops == NULL && nops > 0) || nops < 0 || nstreams < 1) {
    gcoll_errf(err, errlen, "NULL executor, operations or streams");
    return gcollInvalidArgument;
  }
  gcollResult_t allowed = launch_allowed(e, err, errlen);
  if (allowed != gcollSuccess) return allowed;
  if (nops == 0) return gcollSuccess;
  if (nops > P2P_RING) {
    gcoll_errf(err, errlen, "%d send/recv operations in one group on device buffers: at most %d",
               nops, P2P_RING);
    return gcollInvalidUsage;
  }
  int nqueues = 0;
  for (int i = 0; i < nops; i++) {
    if (ops[i].queue < 0 || ops[i].queue >= nops || ops[i].kind < GCOLL_CUDA_P2P_SEND ||
        ops[i].kind > GCOLL_CUDA_P2P_COPY ||
        (ops[i].kind != GCOLL_CUDA_P2P_COPY && ops[i].fifo == 0)) {
      gcoll_errf(err, errlen, "send/recv operation %d is malformed", i);
      return gcollInvalidArgument;
    }
    if (ops[i].queue >= nqueues) nqueues = ops[i].queue + 1;
  }
  /* As many blocks as the collectives use (the plan's channels), more only
   * where a block could not keep its share of the operations: ranks
   * sharing a GPU need every block of their kernels resident at once, and
   * a block serves several queues in turn anyway. */
  int nblocks = (nops + GCOLL_CUDA_P2P_MAX_BLOCK_OPS - 1) / GCOLL_CUDA_P2P_MAX_BLOCK_OPS;
  if (nblocks < e->frame.nchannels) nblocks = e->frame.nchannels;
  if (nblocks > GCOLL_CUDA_MAX_CHANNELS) nblocks = GCOLL_CUDA_MAX_CHANNELS;
  if (nblocks > nqueues) nblocks = nqueues;
  int per_block[GCOLL_CUDA_MAX_CHANNELS] = {0};
  for (int i = 0; i < nops; i++)
    if (++per_block[ops[i].queue % nblocks] > GCOLL_CUDA_P2P_MAX_BLOCK_OPS) {
      gcoll_errf(err, errlen, "more than %d send/recv operations fall to one of the %d GPU blocks: "
                 "split the group", GCOLL_CUDA_P2P_MAX_BLOCK_OPS, nblocks);
      return gcollInvalidUsage;
    }
  gcollResult_t r = gcoll_cuda_exec_p2p_streams_ok(e, streams, nstreams, err, errlen);
  if (r == gcollSuccess) r = free_a_slot(e, err, errlen);
  uint64_t start = 0;
  if (r == gcollSuccess) r = p2p_reserve(e, nops, &start, err, errlen);
  if (r != gcollSuccess) return r;
  memcpy(&e->p2p_ring[start % P2P_RING], ops, (size_t)nops * sizeof(*ops));
  const unsigned slot = (unsigned)(e->launched % GCOLL_CUDA_EXEC_SLOTS);
  memset(e->host->status[slot], 0, sizeof(e->host->status[slot]));
  atomic_store_explicit((_Atomic int32_t *)&e->host->local_abort[slot], 0, memory_order_release);
  struct gcoll_cuda_p2p_work w = {
      .ops = e->p2p_ring_dev + (start % P2P_RING) * sizeof(*ops),
      .status = e->host_dev + offsetof(struct mapped, status) + slot * sizeof(e->host->status[0]),
      .abort_word = e->host_dev + offsetof(struct mapped, abort_word),
      .local_abort = e->host_dev + offsetof(struct mapped, local_abort) + slot * sizeof(int32_t),
      .timeout_ns = e->frame.timeout_ns,
      .nops = nops,
      .nblocks = nblocks,
      .rank = e->frame.rank,
  };
  void *params[] = {&w};
  for (int i = 0; i < nstreams && r == gcollSuccess; i++)
    r = after_caller(e, streams[i], err, errlen);
  if (r == gcollSuccess)
    r = driver_ok(e, e->cu->launch_kernel(e->fn_p2p, (unsigned)nblocks, 1, 1, GCOLL_CUDA_THREADS,
                                          1, 1, 0, e->own_stream, params, NULL),
                  "cuLaunchKernel (send/recv)", err, errlen);
  if (r != gcollSuccess) return r;
  memset(&e->jobs[slot], 0, sizeof(e->jobs[slot]));
  e->jobs[slot].nchannels = nblocks;
  e->p2p_ops[slot] = nops;
  e->p2p_end[slot] = start + (uint64_t)nops;
  e->p2p_next = start + (uint64_t)nops;
  e->launched++;
  for (int i = 0; i < nstreams && r == gcollSuccess; i++)
    r = before_caller(e, streams[i], err, errlen);
  return r;
}

/* ---- completion ------------------------------------------------------------ */

static const char *const fail_names[GCOLL_CUDA_FAIL_NFAILS] = {
    "nothing", "data from receive peer", "a free slot at send peer",
    "a matching step from receive peer", "valid connections", "a message of the posted size"};

static const char *reason_name(int reason, gcollResult_t r) {
  switch (reason) {
    case GCOLL_CUDA_REASON_ABORTED: return "aborted";
    case GCOLL_CUDA_REASON_SIBLING: return "stopped by another channel";
    case GCOLL_CUDA_REASON_DEADLINE: return "deadline passed";
    default: return r == gcollInternalError ? "protocol mismatch" : "failed";
  }
}

/* Whether every block of the launch in slot has reported. */
static int slot_done(const struct gcoll_cuda_exec *e, unsigned slot) {
  for (int c = 0; c < e->jobs[slot].nchannels; c++)
    if (((const volatile struct gcoll_cuda_status *)&e->host->status[slot][c])->done != 1)
      return 0;
  return 1;
}

/* The result a finished launch reported in `row` (its channels' status):
 * the first channel that failed by itself (not stopped by a sibling). */
static gcollResult_t collect_row(const struct gcoll_cuda_coll *job, int p2p_ops,
                                 const volatile struct gcoll_cuda_status *row,
                                 struct gcoll_cuda_stall *stall, int *stalled, char *err,
                                 size_t errlen) {
  int first = -1;
  for (int c = 0; c < job->nchannels; c++) {
    const volatile struct gcoll_cuda_status *st = &row[c];
    if (st->done != 1) {
      gcoll_errf(err, errlen, "channel %d: the kernel ended without reporting", c);
      return gcollInternalError;
    }
    if (st->result == gcollSuccess) continue;
    if (first < 0 || (row[first].reason == GCOLL_CUDA_REASON_SIBLING &&
                      st->reason != GCOLL_CUDA_REASON_SIBLING))
      first = c;
  }
  if (first < 0) return gcollSuccess;
  const volatile struct gcoll_cuda_status *st = &row[first];
  gcollResult_t r = (gcollResult_t)st->result;
  int what = st->what >= 0 && st->what < GCOLL_CUDA_FAIL_NFAILS ? st->what : 0;
  *stalled = p2p_ops == 0 && st->reason == GCOLL_CUDA_REASON_DEADLINE &&
             (what == GCOLL_CUDA_FAIL_RECV_DATA || what == GCOLL_CUDA_FAIL_SEND_SLOT);
  if (*stalled)
    *stall = (struct gcoll_cuda_stall){.channel = first, .algo = job->algo, .what = what,
                                       .peer = st->peer, .step = st->step};
  if (p2p_ops > 0 && what == GCOLL_CUDA_FAIL_SIZE)
    gcoll_errf(err, errlen, "send/recv on the GPU: a receive from rank %d met a send of %llu bytes "
               "of another size: counts and types must agree", st->peer,
               (unsigned long long)st->step);
  else if (p2p_ops > 0)
    gcoll_errf(err, errlen, "send/recv on the GPU (%d operations), block %d: %s while waiting for "
               "%s %d (message %llu)", p2p_ops, first, reason_name(st->reason, r), fail_names[what],
               st->peer, (unsigned long long)st->step);
  else
    gcoll_errf(err, errlen, "channel %d (%s, GPU): %s while waiting for %s %d at step %llu", first,
               gcoll_algo_name(job->algo), reason_name(st->reason, r), fail_names[what], st->peer,
               (unsigned long long)st->step);
  return r;
}

/* A finished launch's result; its stall, if it is the first failure. */
static gcollResult_t collect(struct gcoll_cuda_exec *e, unsigned slot, char *err, size_t errlen) {
  struct gcoll_cuda_stall stall = {0};
  int stalled = 0;
  gcollResult_t r = collect_row(&e->jobs[slot], e->p2p_ops[slot], e->host->status[slot], &stall,
                                &stalled, err, errlen);
  if (r != gcollSuccess && e->failed == gcollSuccess && stalled) {
    e->stall = stall;
    e->stalled = 1;
  }
  return r;
}

int gcoll_cuda_exec_stall(const struct gcoll_cuda_exec *e, struct gcoll_cuda_stall *out) {
  if (e == NULL || e->failed == gcollSuccess || !e->stalled) return 0;
  *out = e->stall;
  return 1;
}

/* The oldest slot is known: its send/recv entries are free again. */
static void reap_slot(struct gcoll_cuda_exec *e, unsigned slot) {
  if (e->p2p_ops[slot] > 0 && e->p2p_end[slot] > e->p2p_free) e->p2p_free = e->p2p_end[slot];
  e->reaped++;
}

/* A failure some replay of a captured kernel reported (graph_abort), made
 * the executor's sticky failure; gcollSuccess when there is none. Which of
 * several captured collectives failed is not known, only the channel. */
static gcollResult_t graph_failure(struct gcoll_cuda_exec *e) {
  if (e->captured == 0 || e->failed != gcollSuccess ||
      atomic_load_explicit((_Atomic int32_t *)&e->host->graph_abort, memory_order_acquire) == 0)
    return e->failed;
  char why[200];
  struct gcoll_cuda_stall stall = {0};
  int stalled = 0;
  gcollResult_t r = collect_row(&e->graph_job, 0, e->host->graph_status, &stall, &stalled, why,
                                sizeof(why));
  if (r == gcollSuccess || r == gcollInternalError) {
    /* The reports of the failing replay may still be on their way. */
    r = (gcollResult_t)atomic_load((_Atomic int32_t *)&e->host->graph_abort);
    snprintf(why, sizeof(why), "result %d", (int)r);
  }
  e->failed = r;
  e->stall = stall;
  e->stalled = stalled;
  snprintf(e->failed_msg, sizeof(e->failed_msg), "a collective replayed from a CUDA graph: %s",
           why);
  return r;
}

/* Reaps the oldest launch if it finished: gcollSuccess or its failure
 * (made sticky), gcollInProgress while it runs. */
static gcollResult_t poll_oldest(struct gcoll_cuda_exec *e, char *err, size_t errlen) {
  int why = e->extern_abort != NULL ? atomic_load(e->extern_abort) : 0;
  if (why != 0) gcoll_cuda_exec_abort(e, (gcollResult_t)why);
  unsigned slot = (unsigned)(e->reaped % GCOLL_CUDA_EXEC_SLOTS);
  if (!slot_done(e, slot)) {
    /* A stream that went idle, or broke, without the blocks reporting. */
    gcoll_cu_result q = e->cu->stream_query(e->own_stream);
    if (q == GCOLL_CU_ERROR_NOT_READY || slot_done(e, slot)) return gcollInProgress;
    gcollResult_t r = q != GCOLL_CU_SUCCESS ? gcollUnhandledCudaError : gcollInternalError;
    if (q != GCOLL_CU_SUCCESS)
      gcoll_errf(err, errlen, "the collective's stream failed: %s",
                 gcoll_cuda_result_text(e->cu, q));
    else
      gcoll_errf(err, errlen, "the kernel ended without reporting");
    reap_slot(e, slot);
    e->failed = r;
    snprintf(e->failed_msg, sizeof(e->failed_msg), "%s", err);
    return r;
  }
  gcollResult_t r = collect(e, slot, err, errlen);
  reap_slot(e, slot);
  if (r != gcollSuccess && e->failed == gcollSuccess) {
    e->failed = r;
    snprintf(e->failed_msg, sizeof(e->failed_msg), "%s", err);
  }
  return r;
}

gcollResult_t gcoll_cuda_exec_poll(struct gcoll_cuda_exec *e, char *err, size_t errlen) {
  if (e == NULL) {
    gcoll_errf(err, errlen, "no executor");
    return gcollInvalidUsage;
  }
  while (e->reaped < e->launched) {
    gcollResult_t r = poll_oldest(e, err, errlen);
    if (r != gcollSuccess) return r;
  }
  graph_failure(e);
  if (e->failed != gcollSuccess) gcoll_errf(err, errlen, "%s", e->failed_msg);
  return e->failed;
}

static void nap(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
  nanosleep(&ts, NULL);
}

gcollResult_t gcoll_cuda_exec_wait_until(struct gcoll_cuda_exec *e, uint64_t reaped, char *err,
                                         size_t errlen) {
  const uint64_t grace = 1000000000u;
  uint64_t limit = e->frame.timeout_ns > UINT64_MAX - 2 * grace ? UINT64_MAX - 2 * grace
                                                                : e->frame.timeout_ns;
  if (reaped > e->launched) reaped = e->launched;
  uint64_t start = gcoll_wait_now_ns(), progress_at = e->reaped;
  int aborted = 0;
  for (uint64_t sleep_ns = 1000;; sleep_ns = sleep_ns < 1000000 ? sleep_ns * 2 : sleep_ns) {
    gcollResult_t r = e->reaped < reaped ? poll_oldest(e, err, errlen) : gcollSuccess;
    if (r != gcollInProgress && r != gcollSuccess) return r;
    if (e->reaped >= reaped) {
      if (e->failed != gcollSuccess) gcoll_errf(err, errlen, "%s", e->failed_msg);
      return e->failed;
    }
    if (r == gcollSuccess) continue;
    /* Each queued launch has its own deadline on the GPU: measure from the
     * last one that finished. */
    if (e->reaped != progress_at) {
      progress_at = e->reaped;
      start = gcoll_wait_now_ns();
    }
    uint64_t waited = gcoll_wait_now_ns() - start;
    if (!aborted && waited > limit + grace) {
      gcoll_cuda_exec_abort(e, gcollSystemError);
      aborted = 1;
    }
    if (waited > limit + 2 * grace) {
      gcoll_errf(err, errlen, "the kernel did not finish %llu ms past its deadline, even aborted",
                 (unsigned long long)((waited - limit) / 1000000u));
      e->failed = gcollSystemError;
      snprintf(e->failed_msg, sizeof(e->failed_msg), "%s", err);
      return gcollSystemError;
    }
    nap(sleep_ns);
  }
}

/* Single-rank copies have no slot: the executor's stream, idle once they
 * are done, says so. Polled with the launches' deadline, though a copy
 * needs no peer and ends. */
static gcollResult_t wait_copies(struct gcoll_cuda_exec *e, char *err, size_t errlen) {
  uint64_t start = gcoll_wait_now_ns();
  for (uint64_t sleep_ns = 1000;; sleep_ns = sleep_ns < 1000000 ? sleep_ns * 2 : sleep_ns) {
    gcoll_cu_result q = e->cu->stream_query(e->own_stream);
    if (q == GCOLL_CU_SUCCESS) {
      e->copies_queued = 0;
      return gcollSuccess;
    }
    if (q != GCOLL_CU_ERROR_NOT_READY)
      return driver_ok(e, q, "the executor's stream (single-rank copies)", err, errlen);
    if (gcoll_wait_now_ns() - start > e->frame.timeout_ns) {
      gcoll_errf(err, errlen, "single-rank copies did not finish within the timeout");
      return gcollSystemError;
    }
    nap(sleep_ns);
  }
}

gcollResult_t gcoll_cuda_exec_wait(struct gcoll_cuda_exec *e, char *err, size_t errlen) {
  gcollResult_t r = gcoll_cuda_exec_wait_until(e, e->launched, err, errlen);
  if (r == gcollSuccess && e->copies_queued) r = wait_copies(e, err, errlen);
  return r;
}

void gcoll_cuda_exec_abort(struct gcoll_cuda_exec *e, gcollResult_t why) {
  if (e == NULL || e->host == NULL) return;
  int32_t expected = 0;
  atomic_compare_exchange_strong((_Atomic int32_t *)&e->host->abort_word, &expected,
                                 (int32_t)(why != gcollSuccess ? why : gcollRemoteError));
}
