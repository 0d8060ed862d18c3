/* The CUDA executor behind the executor table (exec.h): cuda_exec.c's
 * kernel, driven on the caller's stream.
 *
 * The channels come as the host maps their FIFOs (shared-memory segments,
 * the proxy's local FIFOs of the network transports). The GPU reaches them
 * as mapped host memory: each FIFO is registered with the driver
 * (cuMemHostRegister, device-mapped) and the kernel gets the device address
 * of that mapping. So every transport carries device-buffer collectives
 * unchanged: the kernel plays the part the host threads play, the proxy
 * still moves network FIFOs, and the FIFO protocol (fifo.h) is the same
 * bytes on both sides. The p2p transport's FIFOs are GPU memory already
 * (the receiver's, or its CUDA IPC mapping in the sender): those the
 * kernel gets as they are. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda_exec.h"
#include "kernels/exec.h"
#include "kernels/fifo.h"

struct gcoll_exec {
  const struct gcoll_cuda_api *cu;
  gcoll_cu_device dev;
  gcoll_cu_context ctx;
  int ctx_retained;
  struct gcoll_cuda_exec *cuda;
  size_t fifo_map_bytes;            /* registered bytes of each FIFO */
  /* The FIFOs registered so far: the channels' at create, send/recv
   * connections' as their first device operation comes. */
  int nfifos, fifos_cap;
  struct {
    void *host;
    gcoll_cu_deviceptr dev;
  } *fifos;
  /* The channels' FIFOs as the host maps them and the ring neighbours'
   * ranks, for the message of a kernel that stalled on one (stall_note). */
  int nchannels;
  struct gcoll_host_channel chan[GCOLL_CUDA_MAX_CHANNELS];
  int ring_prev[GCOLL_CUDA_MAX_CHANNELS], ring_next[GCOLL_CUDA_MAX_CHANNELS];
};

static void destroy(struct gcoll_exec *e);

/* Whether f is GPU memory (a p2p FIFO), which needs no mapping. */
static int in_gpu_memory(const struct gcoll_exec *e, const struct gcoll_fifo *f) {
  unsigned int type = 0;
  return e->cu->pointer_get_attribute(&type, GCOLL_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      (gcoll_cu_deviceptr)(uintptr_t)f) == GCOLL_CU_SUCCESS &&
         type == GCOLL_CU_MEMORYTYPE_DEVICE;
}

/* The device address of a FIFO, registering host memory on first sight
 * (a FIFO may appear twice, e.g. as ring and tree peer). 0 with err set on
 * failure; 0 without error for a NULL FIFO. */
static gcoll_cu_deviceptr device_view(struct gcoll_exec *e, struct gcoll_fifo *f, char *err,
                                      size_t errlen) {
  if (f == NULL) return 0;
  for (int i = 0; i < e->nfifos; i++)
    if (e->fifos[i].host == f) return e->fifos[i].dev;
  if (in_gpu_memory(e, f)) return (gcoll_cu_deviceptr)(uintptr_t)f;
  if (e->nfifos == e->fifos_cap) {
    int cap = e->fifos_cap ? e->fifos_cap * 2 : 64;
    void *more = realloc(e->fifos, (size_t)cap * sizeof(*e->fifos));
    if (more == NULL) {
      snprintf(err, errlen, "out of memory for %d FIFOs", cap);
      return 0;
    }
    e->fifos = more;
    e->fifos_cap = cap;
  }
  gcoll_cu_result r = e->cu->mem_host_register(
      f, e->fifo_map_bytes, GCOLL_CU_MEMHOSTREGISTER_PORTABLE | GCOLL_CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r != GCOLL_CU_SUCCESS) {
    snprintf(err, errlen, "cuMemHostRegister of a %zu-byte FIFO: %s", e->fifo_map_bytes,
             gcoll_cuda_result_text(e->cu, r));
    return 0;
  }
  gcoll_cu_deviceptr d = 0;
  e->fifos[e->nfifos].host = f;
  e->fifos[e->nfifos].dev = 0;
  e->nfifos++;
  r = e->cu->mem_host_get_device_pointer(&d, f, 0);
  if (r != GCOLL_CU_SUCCESS || d == 0) {
    snprintf(err, errlen, "cuMemHostGetDevicePointer of a FIFO: %s",
             gcoll_cuda_result_text(e->cu, r));
    return 0;
  }
  e->fifos[e->nfifos - 1].dev = d;
  return d;
}

/* Fills out, the GPU's view of host channel in; -1 with err set. */
static int channel_view(struct gcoll_exec *e, const struct gcoll_host_channel *in,
                        size_t slot_bytes, struct gcoll_cuda_exec_channel *out, char *err,
                        size_t errlen) {
  memset(out, 0, sizeof(*out));
  err[0] = '\0';
  out->ring_recv_prev = device_view(e, in->ring.recv_prev, err, errlen);
  out->ring_send_next = device_view(e, in->ring.send_next, err, errlen);
  out->ring_ranks = in->ring.ranks;
  out->ring_pos = in->ring.pos;
  out->has_tree = in->has_tree;
  out->slot_bytes = slot_bytes;
  if (in->has_tree) {
    out->tree_parent = in->tree.parent;
    out->tree_nchildren = in->tree.nchildren;
    out->tree_recv_parent = device_view(e, in->tree.recv_parent, err, errlen);
    out->tree_send_parent = device_view(e, in->tree.send_parent, err, errlen);
    for (int k = 0; k < in->tree.nchildren && k < GCOLL_CUDA_EXEC_MAX_PEERS; k++) {
      out->tree_recv_child[k] = device_view(e, in->tree.recv_child[k], err, errlen);
      out->tree_send_child[k] = device_view(e, in->tree.send_child[k], err, errlen);
    }
  }
  return err[0] == '\0' ? 0 : -1;
}

static struct gcoll_exec *create(const struct gcoll_exec_config *cfg, char *err, size_t errlen);

/* The executor is made at a communicator's first device call, which may
 * be on a stream being captured into a CUDA graph (PyTorch, vLLM and
 * nccl-tests -G capture the first call when they warm up nothing). In the
 * default (global) capture mode the driver refuses allocations and host
 * registrations on every thread while a capture runs, so this thread
 * relaxes its mode for the setup, as NCCL does, and restores it after. */
static struct gcoll_exec *cuda_create(const struct gcoll_exec_config *cfg, char *err,
                                      size_t errlen) {
  int ndev = 0;
  if (gcoll_cuda_probe(&ndev, err, errlen) != GCOLL_CUDA_AVAILABLE) return NULL;
  const struct gcoll_cuda_api *cu = gcoll_cuda_api_get(NULL, 0);
  int mode = GCOLL_CU_STREAM_CAPTURE_MODE_RELAXED;
  gcoll_cu_result r = cu->thread_exchange_stream_capture_mode(&mode);
  if (r != GCOLL_CU_SUCCESS) {
    snprintf(err, errlen, "cuThreadExchangeStreamCaptureMode: %s", gcoll_cuda_result_text(cu, r));
    return NULL;
  }
  struct gcoll_exec *e = create(cfg, err, errlen);
  cu->thread_exchange_stream_capture_mode(&mode);
  return e;
}

static struct gcoll_exec *create(const struct gcoll_exec_config *cfg, char *err, size_t errlen) {
  if (cfg->nchannels < 1 || cfg->nchannels > GCOLL_CUDA_MAX_CHANNELS) {
    snprintf(err, errlen, "%d channels: the CUDA executor takes 1 to %d", cfg->nchannels,
             GCOLL_CUDA_MAX_CHANNELS);
    return NULL;
  }
  struct gcoll_exec *e = calloc(1, sizeof(*e));
  if (e == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  e->cu = gcoll_cuda_api_get(NULL, 0);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  e->fifo_map_bytes = (gcoll_fifo_bytes(cfg->slot_bytes) + page - 1) / page * page;
  struct gcoll_cuda_exec_channel ch[GCOLL_CUDA_MAX_CHANNELS];
  char why[384];
  if (gcoll_cuda_use_device(e->cu, cfg->device, &e->dev, &e->ctx, err, errlen) != 0) goto fail;
  e->ctx_retained = 1;
  for (int c = 0; c < cfg->nchannels; c++) {
    if (channel_view(e, &cfg->channels[c], cfg->slot_bytes, &ch[c], why, sizeof(why)) != 0) {
      snprintf(err, errlen, "channel %d: %s", c, why);
      goto fail;
    }
    const struct gcoll_host_ring *ring = &cfg->channels[c].ring;
    e->chan[c] = cfg->channels[c];
    e->chan[c].ring.ranks = NULL; /* the caller's array: the two that matter are kept */
    e->ring_prev[c] = ring->ranks[(ring->pos + cfg->nranks - 1) % cfg->nranks];
    e->ring_next[c] = ring->ranks[(ring->pos + 1) % cfg->nranks];
  }
  e->nchannels = cfg->nchannels;
  struct gcoll_cuda_exec_config cc = {.device = cfg->device, .rank = cfg->rank,
                                      .nranks = cfg->nranks, .nchannels = cfg->nchannels,
                                      .channels = ch, .timeout_ns = cfg->timeout_ns,
                                      .extern_abort = cfg->abort_word};
  e->cuda = gcoll_cuda_exec_create(&cc, err, errlen);
  if (e->cuda == NULL) goto fail;
  return e;
fail:
  destroy(e);
  return NULL;
}

static gcollResult_t cuda_launch(struct gcoll_exec *e, const struct gcoll_host_coll *c,
                                 void *stream, char *err, size_t errlen) {
  struct gcoll_cuda_coll cc = {
      .coll = c->coll,
      .sendbuf = (gcoll_cu_deviceptr)(uintptr_t)c->sendbuf,
      .recvbuf = (gcoll_cu_deviceptr)(uintptr_t)c->recvbuf,
      .count = c->count,
      .dtype = c->dtype,
      .op = c->op,
      .root = c->root,
      .algo = c->algo,
      .proto = c->proto,
      .nchannels = c->nchannels,
      .premul = c->premul,
      .premul_k = c->premul_k,
  };
  /* The caller's thread may have another context current (or none). */
  e->cu->ctx_set_current(e->ctx);
  return gcoll_cuda_exec_launch(e->cuda, &cc, stream, err, errlen);
}

/* Appends "name [rank R] tail/head" for a FIFO the host can read (not
 * GPU memory), after a comma from the second on (*notes counts them). */
static void fifo_note(struct gcoll_exec *e, const char *name, int rank,
                      struct gcoll_fifo *f, int *notes, char *err, size_t errlen) {
  size_t n = strlen(err);
  if (f == NULL || n + 1 >= errlen) return;
  const char *sep = (*notes)++ ? ", " : " ";
  char who[24] = "";
  if (rank >= 0) snprintf(who, sizeof(who), " rank %d", rank);
  if (in_gpu_memory(e, f)) {
    snprintf(err + n, errlen - n, "%s%s%s in GPU memory", sep, name, who);
    return;
  }
  snprintf(err + n, errlen - n, "%s%s%s %llu/%llu", sep, name, who,
           (unsigned long long)atomic_load_explicit(&f->tail, memory_order_acquire),
           (unsigned long long)atomic_load_explicit(&f->head, memory_order_acquire));
}

/* A kernel that passed its deadline waiting on a FIFO: says what the FIFOs
 * it waited on hold now, as the host sees them. tail > step on a receive
 * FIFO means the step had come and the GPU did not see it; tail == step,
 * that it never came (a stalled peer, or a proxy that did not move it). */
static void stall_note(struct gcoll_exec *e, char *err, size_t errlen) {
  struct gcoll_cuda_stall st;
  if (!gcoll_cuda_exec_stall(e->cuda, &st) || st.channel < 0 || st.channel >= e->nchannels)
    return;
  const struct gcoll_host_channel *ch = &e->chan[st.channel];
  const int recv = st.what == GCOLL_CUDA_FAIL_RECV_DATA;
  int notes = 0;
  size_t n = strlen(err);
  if (n + 1 < errlen)
    snprintf(err + n, errlen - n, "; channel %d's %s FIFOs now (tail/head):", st.channel,
             recv ? "receive" : "send");
  if (st.algo != GCOLL_ALGO_TREE) {
    fifo_note(e, recv ? "from ring prev" : "to ring next",
              recv ? e->ring_prev[st.channel] : e->ring_next[st.channel],
              recv ? ch->ring.recv_prev : ch->ring.send_next, &notes, err, errlen);
    return;
  }
  if (!ch->has_tree) return;
  if (ch->tree.parent >= 0)
    fifo_note(e, recv ? "from tree parent" : "to tree parent", ch->tree.parent,
              recv ? ch->tree.recv_parent : ch->tree.send_parent, &notes, err, errlen);
  for (int k = 0; k < ch->tree.nchildren && k < GCOLL_PRIMS_MAX_PEERS; k++) {
    char name[32];
    snprintf(name, sizeof(name), "%s child %d", recv ? "from" : "to", k);
    fifo_note(e, name, -1, recv ? ch->tree.recv_child[k] : ch->tree.send_child[k], &notes, err,
              errlen);
  }
}

static gcollResult_t cuda_poll(struct gcoll_exec *e, char *err, size_t errlen) {
  e->cu->ctx_set_current(e->ctx);
  gcollResult_t r = gcoll_cuda_exec_poll(e->cuda, err, errlen);
  if (r != gcollSuccess && r != gcollInProgress) stall_note(e, err, errlen);
  return r;
}

static gcollResult_t cuda_wait(struct gcoll_exec *e, char *err, size_t errlen) {
  e->cu->ctx_set_current(e->ctx);
  gcollResult_t r = gcoll_cuda_exec_wait(e->cuda, err, errlen);
  if (r != gcollSuccess) stall_note(e, err, errlen);
  return r;
}

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static const struct gcoll_cuda_api *probed;
/* Set once probed: every call asks cuda_owns twice, and pthread_once is a
 * call through the PLT each time. */
static _Atomic int probe_done;

static void probe_driver(void) {
  char msg[256];
  if (gcoll_cuda_probe(NULL, msg, sizeof(msg)) == GCOLL_CUDA_AVAILABLE)
    probed = gcoll_cuda_api_get(NULL, 0);
  atomic_store_explicit(&probe_done, 1, memory_order_release);
}

/* Device (or managed) memory by the driver's account; plain host memory is
 * unknown to it (type 0), pinned host memory is HOST. One driver call for
 * both answers: every collective asks this of each buffer, and each call
 * into the driver is ~0.1-0.2 us on an H100 (nccl-tests in place on one
 * GPU: 2.0 us a call against NCCL's 0.4 us, with two calls per buffer). */
static int cuda_owns(const void *ptr, int *device) {
  if (!atomic_load_explicit(&probe_done, memory_order_acquire))
    pthread_once(&probe_once, probe_driver);
  *device = -1;
  if (probed == NULL || ptr == NULL) return 0;
  unsigned int type = 0;
  int ordinal = -1;
  int attributes[2] = {GCOLL_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                       GCOLL_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void *data[2] = {&type, &ordinal};
  if (probed->pointer_get_attributes(2, attributes, data, (gcoll_cu_deviceptr)(uintptr_t)ptr) !=
          GCOLL_CU_SUCCESS ||
      (type != GCOLL_CU_MEMORYTYPE_DEVICE && type != GCOLL_CU_MEMORYTYPE_UNIFIED))
    return 0;
  *device = ordinal >= 0 ? ordinal : -1;
  return 1;
}

static void cuda_abort(struct gcoll_exec *e, gcollResult_t why) {
  if (e != NULL && e->cuda != NULL) gcoll_cuda_exec_abort(e->cuda, why);
}

static void destroy(struct gcoll_exec *e) {
  if (e == NULL) return;
  if (e->ctx_retained) e->cu->ctx_set_current(e->ctx);
  gcoll_cuda_exec_destroy(e->cuda); /* waits for what is in flight */
  for (int i = 0; i < e->nfifos; i++) e->cu->mem_host_unregister(e->fifos[i].host);
  free(e->fifos);
  if (e->ctx_retained) e->cu->primary_ctx_release(e->dev);
  free(e);
}

_Static_assert((int)GCOLL_EXEC_P2P_SEND == (int)GCOLL_CUDA_P2P_SEND &&
                   (int)GCOLL_EXEC_P2P_RECV == (int)GCOLL_CUDA_P2P_RECV &&
                   (int)GCOLL_EXEC_P2P_COPY == (int)GCOLL_CUDA_P2P_COPY,
               "send/recv kinds");

/* Send/recv: each FIFO as the GPU sees it (registered on first sight),
 * the buffers as they are (device memory). */
static gcollResult_t cuda_launch_p2p(struct gcoll_exec *e, const struct gcoll_exec_p2p_op *ops,
                                     int nops, void *const *streams, int nstreams, char *err,
                                     size_t errlen) {
  if (nstreams < 1 || nstreams > nops + 1) {
    snprintf(err, errlen, "%d streams for %d send/recv operations", nstreams, nops);
    return gcollInvalidArgument;
  }
  struct gcoll_cuda_p2p_op *dev = calloc((size_t)nops + 1, sizeof(*dev));
  gcoll_cu_stream *s = calloc((size_t)nstreams, sizeof(*s));
  if (dev == NULL || s == NULL) {
    free(dev);
    free(s);
    snprintf(err, errlen, "out of memory for %d send/recv operations", nops);
    return gcollSystemError;
  }
  e->cu->ctx_set_current(e->ctx);
  for (int i = 0; i < nstreams; i++) s[i] = (gcoll_cu_stream)streams[i];
  /* Before any registration, which a capture would refuse. */
  gcollResult_t r = gcoll_cuda_exec_p2p_streams_ok(e->cuda, s, nstreams, err, errlen);
  for (int i = 0; i < nops && r == gcollSuccess; i++) {
    const struct gcoll_exec_p2p_op *o = &ops[i];
    dev[i] = (struct gcoll_cuda_p2p_op){
        .buf = (uint64_t)(uintptr_t)(o->kind == GCOLL_EXEC_P2P_RECV ? o->dst : o->src),
        .dst = (uint64_t)(uintptr_t)(o->kind == GCOLL_EXEC_P2P_COPY ? o->dst : NULL),
        .bytes = o->bytes, .seq = o->seq, .kind = (int32_t)o->kind, .peer = o->peer,
        .queue = o->queue};
    if (o->kind != GCOLL_EXEC_P2P_COPY) {
      err[0] = '\0';
      dev[i].fifo = device_view(e, o->fifo, err, errlen);
      if (dev[i].fifo == 0) r = gcollUnhandledCudaError;
    }
  }
  if (r == gcollSuccess)
    r = gcoll_cuda_exec_launch_p2p(e->cuda, dev, nops, s, nstreams, err, errlen);
  free(dev);
  free(s);
  return r;
}

const struct gcoll_exec_ops gcoll_exec_cuda_ops = {
    .name = "cuda",
    .owns = cuda_owns,
    .create = cuda_create,
    .launch = cuda_launch,
    .poll = cuda_poll,
    .wait = cuda_wait,
    .launch_p2p = cuda_launch_p2p,
    .abort = cuda_abort,
    .destroy = destroy,
};
