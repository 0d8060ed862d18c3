/* Send/recv on device buffers staged by the calling thread (see
 * comm_p2p.c): a context per GPU, the earlier device work done, the
 * driver's synchronous copies between device buffers and the host FIFOs. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/comm_p2p.h"
#include "runtime/comm_p2p_run.h"
#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"
#endif

#ifdef HAVE_CUDA
/* Self send/recv between two device buffers goes through a host buffer of
 * at most this (the loader has no device-to-device copy). */
#define P2P_BOUNCE_BYTES ((size_t)1 << 20)

struct p2p_gpu_dev {
  int ordinal;
  gcoll_cu_device dev;
  gcoll_cu_context ctx;     /* the caller's current context when on this GPU, else the
                               GPU's primary context, retained for the run */
  int retained;
  int wrote;                /* host-to-device copies were made */
};

struct p2p_gpu {
  const struct gcoll_cuda_api *cu;
  gcoll_cu_context prev;    /* the caller's current context, current again at the end */
  struct p2p_gpu_dev *devs; /* the GPUs of the run's device buffers */
  int ndevs;
  int current;              /* the devs entry whose context is current; -1: unknown */
};

static gcoll_cu_result gpu_use(struct p2p_gpu *g, int d) {
  if (g->current == d) return GCOLL_CU_SUCCESS;
  gcoll_cu_result res = g->cu->ctx_set_current(g->devs[d].ctx);
  g->current = res == GCOLL_CU_SUCCESS ? d : -1;
  return res;
}

/* One synchronous copy of n bytes between host memory and r's device
 * buffer (src for GPU_DTOH, dst for GPU_HTOD). */
gcollResult_t gcoll_p2p_gpu_copy(const struct op_run *r, void *dst, const void *src, size_t n,
                              enum gpu_dir dir) {
  struct p2p_gpu *g = r->gpu;
  struct p2p_gpu_dev *d = &g->devs[r->gpu_dev];
  gcoll_cu_result res = gpu_use(g, r->gpu_dev);
  if (res == GCOLL_CU_SUCCESS && dir == GPU_DTOH)
    res = g->cu->memcpy_dtoh(dst, (gcoll_cu_deviceptr)(uintptr_t)src, n);
  else if (res == GCOLL_CU_SUCCESS) {
    d->wrote = 1;
    res = g->cu->memcpy_htod((gcoll_cu_deviceptr)(uintptr_t)dst, src, n);
  }
  if (res == GCOLL_CU_SUCCESS) return gcollSuccess;
  const struct gcoll_p2p_op *op = r->op;
  return gcoll_fail(gcollUnhandledCudaError, "%s %s rank %d: %s of %zu bytes %s device buffer "
                    "%p (GPU %d): %s", op->is_send ? "gcollSend" : "gcollRecv",
                    op->is_send ? "to" : "from", op->peer,
                    dir == GPU_DTOH ? "cuMemcpyDtoH" : "cuMemcpyHtoD", n,
                    dir == GPU_DTOH ? "from" : "into", dir == GPU_DTOH ? src : (const void *)dst,
                    d->ordinal, gcoll_cuda_result_text(g->cu, res));
}

/* A self send s meets its receive q, one of them or both on device memory:
 * one copy, or two per chunk through a host bounce between two device
 * buffers, back to front when the destination lies above the source (an
 * overlap then stays right, as with memmove). */
gcollResult_t gcoll_p2p_gpu_self_copy(const struct op_run *s, const struct op_run *q) {
  const char *src = s->op->sendbuf;
  char *dst = q->op->recvbuf;
  size_t bytes = s->op->bytes;
  if (s->gpu == NULL) return gcoll_p2p_gpu_copy(q, dst, src, bytes, GPU_HTOD);
  if (q->gpu == NULL) return gcoll_p2p_gpu_copy(s, dst, src, bytes, GPU_DTOH);
  size_t chunk = bytes < P2P_BOUNCE_BYTES ? bytes : P2P_BOUNCE_BYTES;
  char *bounce = malloc(chunk);
  if (bounce == NULL)
    return gcoll_fail(gcollSystemError, "gcollSend to self (rank %d): out of memory for a "
                      "%zu-byte bounce buffer", s->op->peer, chunk);
  int backward = (uintptr_t)dst > (uintptr_t)src;
  gcollResult_t rc = gcollSuccess;
  for (size_t done = 0, k; done < bytes && rc == gcollSuccess; done += k) {
    k = bytes - done < chunk ? bytes - done : chunk;
    size_t at = backward ? bytes - done - k : done;
    rc = gcoll_p2p_gpu_copy(s, bounce, src + at, k, GPU_DTOH);
    if (rc == gcollSuccess) rc = gcoll_p2p_gpu_copy(q, dst + at, bounce, k, GPU_HTOD);
  }
  free(bounce);
  return rc;
}

/* Send/recv on device buffers cannot be captured into a CUDA graph: the
 * staging thread moves them now, and the GPU's messages are numbered when
 * queued (a replay would repeat the numbers). Refused before anything
 * moves or connects, on every rank alike. */
gcollResult_t gcoll_p2p_refuse_capture(const struct gcoll_cuda_api *cu,
                                       const struct gcoll_p2p_op *op, const char *what) {
  int capture = GCOLL_CU_STREAM_CAPTURE_STATUS_NONE;
  if (op->device < 0 || cu->stream_is_capturing(op->stream, &capture) != GCOLL_CU_SUCCESS ||
      capture == GCOLL_CU_STREAM_CAPTURE_STATUS_NONE)
    return gcollSuccess;
  return gcoll_fail(gcollInvalidUsage, "%s: %s on device buffers cannot be captured into a CUDA "
                    "graph (the messages are moved or numbered when queued); the stream is %s",
                    what, op->is_send ? "gcollSend" : "gcollRecv",
                    capture == GCOLL_CU_STREAM_CAPTURE_STATUS_ACTIVE ? "capturing"
                                                                     : "in an invalidated capture");
}

/* Before a run with device buffers: the driver, a context for each GPU
 * (the caller's, or the primary one retained), the communicators' earlier
 * device collectives done, and each distinct (GPU, stream) of the device
 * operations synchronized. *out stays NULL for a run on host memory only;
 * otherwise gcoll_p2p_stage_end must follow, whatever this returns. */
gcollResult_t gcoll_p2p_stage_begin(struct op_run *runs, int n, struct gcollComm **comms,
                               int ncomms, const char *what, struct p2p_gpu **out) {
  *out = NULL;
  int any = 0;
  for (int i = 0; i < n && !any; i++) any = runs[i].op->device >= 0;
  if (!any) return gcollSuccess;
  char err[512];
  const struct gcoll_cuda_api *cu = gcoll_cuda_api_get(err, sizeof(err));
  if (cu == NULL)
    return gcoll_fail(gcollUnhandledCudaError, "%s: device buffers, but no CUDA driver: %s", what,
                      err);
  struct p2p_gpu *g = calloc(1, sizeof(*g));
  if (g != NULL && (g->devs = calloc((size_t)n, sizeof(*g->devs))) == NULL) {
    free(g);
    g = NULL;
  }
  if (g == NULL) return gcoll_fail(gcollSystemError, "%s: out of memory", what);
  g->cu = cu;
  g->current = -1;
  /* The caller's context serves its own GPU (its legacy stream is the one
   * a NULL stream means); a thread without one gets the primary context. */
  gcoll_cu_device prev_dev = -1;
  if (cu->ctx_get_current(&g->prev) != GCOLL_CU_SUCCESS) g->prev = NULL;
  if (g->prev != NULL && cu->ctx_get_device(&prev_dev) != GCOLL_CU_SUCCESS) prev_dev = -1;
  *out = g;
  for (int i = 0; i < n; i++) {
    int ordinal = runs[i].op->device, d = 0;
    if (ordinal < 0) continue;
    while (d < g->ndevs && g->devs[d].ordinal != ordinal) d++;
    if (d == g->ndevs) {
      struct p2p_gpu_dev *gd = &g->devs[d];
      gd->ordinal = ordinal;
      if (g->prev != NULL && prev_dev >= 0 &&
          cu->device_get(&gd->dev, ordinal) == GCOLL_CU_SUCCESS && gd->dev == prev_dev) {
        gd->ctx = g->prev;
      } else {
        if (gcoll_cuda_use_device(cu, ordinal, &gd->dev, &gd->ctx, err, sizeof(err)) != 0)
          return gcoll_fail(gcollUnhandledCudaError, "%s: %s", what, err);
        gd->retained = 1;
        g->current = d;
      }
      g->ndevs++;
    }
    runs[i].gpu = g;
    runs[i].gpu_dev = d;
  }
  for (int c = 0; c < ncomms; c++) {
    struct gcollComm *comm = comms[c];
    struct gcoll_exec *e = comm->exec[GCOLL_EXEC_CUDA].e;
    int uses = 0;
    for (int i = 0; i < n && e != NULL && !uses; i++)
      uses = runs[i].gpu != NULL && runs[i].op->comm == comm;
    if (!uses) continue;
    g->current = -1; /* the executor makes its own context current */
    gcollResult_t rc = comm->exec[GCOLL_EXEC_CUDA].ops->wait(e, err, sizeof(err));
    if (rc != gcollSuccess) return gcoll_comm_explain(comm, what, rc, err);
  }
  for (int i = 0; i < n; i++) {
    const struct op_run *r = &runs[i];
    int seen = r->gpu == NULL;
    for (int j = 0; j < i && !seen; j++)
      seen = runs[j].gpu != NULL && runs[j].gpu_dev == r->gpu_dev &&
             runs[j].op->stream == r->op->stream;
    if (seen) continue;
    gcoll_cu_result res = gpu_use(g, r->gpu_dev);
    /* The calling thread stages device send/recv through the host FIFOs
     * right now, so there is nothing a CUDA graph could replay: refused
     * before the synchronisation below would invalidate the capture. */
    if (res == GCOLL_CU_SUCCESS) {
      gcollResult_t rc = gcoll_p2p_refuse_capture(cu, r->op, what);
      if (rc != gcollSuccess) return rc;
    }
    if (res == GCOLL_CU_SUCCESS) res = cu->stream_synchronize(r->op->stream);
    if (res != GCOLL_CU_SUCCESS)
      return gcoll_fail(gcollUnhandledCudaError, "%s: %s %s rank %d: cuStreamSynchronize of %s "
                        "on GPU %d: %s", what, r->op->is_send ? "gcollSend" : "gcollRecv",
                        r->op->is_send ? "to" : "from", r->op->peer,
                        r->op->stream != NULL ? "its stream" : "the legacy default stream",
                        g->devs[r->gpu_dev].ordinal, gcoll_cuda_result_text(cu, res));
  }
  return gcollSuccess;
}

/* After the run: the copies into device memory complete (one from pageable
 * memory may return before its DMA is done; they run on the legacy
 * stream), the caller's context current again, the contexts released. */
gcollResult_t gcoll_p2p_stage_end(struct p2p_gpu *g, gcollResult_t rc, const char *what) {
  if (g == NULL) return rc;
  for (int d = 0; d < g->ndevs && rc == gcollSuccess; d++) {
    if (!g->devs[d].wrote) continue;
    gcoll_cu_result res = gpu_use(g, d);
    if (res == GCOLL_CU_SUCCESS) res = g->cu->stream_synchronize(NULL);
    if (res != GCOLL_CU_SUCCESS)
      rc = gcoll_fail(gcollUnhandledCudaError, "%s: cuStreamSynchronize after the copies to GPU "
                      "%d: %s", what, g->devs[d].ordinal, gcoll_cuda_result_text(g->cu, res));
  }
  if (g->current < 0 || g->devs[g->current].ctx != g->prev) g->cu->ctx_set_current(g->prev);
  for (int d = 0; d < g->ndevs; d++)
    if (g->devs[d].retained) g->cu->primary_ctx_release(g->devs[d].dev);
  free(g->devs);
  free(g);
  return rc;
}
#else
/* Without CUDA no buffer is device memory: these never see one. */
struct p2p_gpu {
  int none;
};

gcollResult_t gcoll_p2p_gpu_copy(const struct op_run *r, void *dst, const void *src, size_t n,
                              enum gpu_dir dir) {
  (void)r, (void)dst, (void)src, (void)n, (void)dir;
  return gcoll_fail(gcollInternalError, "send/recv: a device buffer in a build without CUDA");
}

gcollResult_t gcoll_p2p_gpu_self_copy(const struct op_run *s, const struct op_run *q) {
  return gcoll_p2p_gpu_copy(s, q->op->recvbuf, s->op->sendbuf, s->op->bytes, GPU_DTOH);
}

gcollResult_t gcoll_p2p_stage_begin(struct op_run *runs, int n, struct gcollComm **comms,
                               int ncomms, const char *what, struct p2p_gpu **out) {
  (void)runs, (void)n, (void)comms, (void)ncomms, (void)what;
  *out = NULL;
  return gcollSuccess;
}

gcollResult_t gcoll_p2p_stage_end(struct p2p_gpu *g, gcollResult_t rc, const char *what) {
  (void)g, (void)what;
  return rc;
}
#endif
