/* A small NCCL net plugin of gcoll's own, for tests: the ncclNet ABI over
 * loopback TCP, so gcoll's loader and its use of the ABI run for real in
 * `make check` (NCCL's own example plugin is a skeleton that moves nothing,
 * and real plugins need fabrics or CUDA this machine lacks).
 *
 * It is written to the ABI as a plugin author would: connect and accept
 * never block (they return no comm until the connection is there), at most
 * MAX_REQS requests per comm (isend/irecv return no request beyond that),
 * requests complete in order and only in test, regMr must cover what is
 * sent or received (a send outside a registered region fails), a message
 * longer than its receive fails. Each message travels as {le64 size,
 * bytes}. It logs through NCCL's logger what each comm moved when closed.
 *
 * Built several times (tests/net_plugin/net_plugin.mk):
 *   ABI=10, 9 or 8   which ncclNetPlugin_vN symbol it exports;
 *   ABI=7            exports only a v7 symbol: too old for gcoll;
 *   FAIL_INIT        init returns ncclInternalError;
 *   NO_DEVICE        devices() reports none. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/net_plugin_abi.h"

#ifndef ABI
#define ABI 10
#endif
#define MAX_REQS 8
#define MAGIC 0x47544350u /* "GTCP" */

static gcoll_nccl_logger logf_;

#define LOG(level, ...) \
  do {                  \
    if (logf_ != NULL) logf_(level, 16, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

struct handle {
  uint32_t magic;
  uint16_t port;
  int stage_fd; /* connect in progress: the caller passes the same handle again */
};

struct mr {
  char *base;
  size_t size;
};

struct comm;
struct req {
  struct comm *comm;
  int used, is_send, done;
  char *data;
  size_t size, off;     /* send: bytes of {size, data} written; recv: read */
  unsigned char prefix[8];
};

struct comm {
  int fd, is_send;
  struct req reqs[MAX_REQS]; /* a ring: [head, head + n) outstanding, in order */
  int head, n;
  uint64_t messages, bytes;
};

struct listen_comm {
  int fd, pending; /* accepted, magic not read yet */
};

static gcoll_ncclres init_common(gcoll_nccl_logger log) {
  logf_ = log;
#ifdef FAIL_INIT
  LOG(GCOLL_NCCL_LOG_INFO, "gcolltest: failing init on purpose");
  return GCOLL_NCCL_INTERNAL_ERROR;
#else
  return GCOLL_NCCL_SUCCESS;
#endif
}

static gcoll_ncclres devices(int *ndev) {
#ifdef NO_DEVICE
  *ndev = 0;
#else
  *ndev = 1;
#endif
  return GCOLL_NCCL_SUCCESS;
}

static void fill_props(char **name, char **pci, int *ptr, int *speed, int *max_comms,
                       int *max_recvs) {
  *name = "lo";
  *pci = NULL;
  *ptr = GCOLL_NCCL_PTR_HOST;
  *speed = 10000;
  *max_comms = 65536;
  *max_recvs = 1;
}

static gcoll_ncclres props_v8(int dev, struct gcoll_nccl_props_v8 *p) {
  if (dev != 0) return GCOLL_NCCL_INTERNAL_ERROR;
  memset(p, 0, sizeof(*p));
  fill_props(&p->name, &p->pci_path, &p->ptr_support, &p->speed, &p->max_comms, &p->max_recvs);
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres props_v9(int dev, struct gcoll_nccl_props_v9 *p) {
  if (dev != 0) return GCOLL_NCCL_INTERNAL_ERROR;
  memset(p, 0, sizeof(*p));
  fill_props(&p->name, &p->pci_path, &p->ptr_support, &p->speed, &p->max_comms, &p->max_recvs);
  p->vprops.ndevs = 1;
  p->max_p2p_bytes = p->max_coll_bytes = (size_t)1 << 40;
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres plugin_listen(int dev, void *handle, void **listen_comm) {
  struct handle *h = handle;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (dev != 0 || fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    if (fd >= 0) close(fd);
    LOG(GCOLL_NCCL_LOG_WARN, "gcolltest: listen: %s", strerror(errno));
    return GCOLL_NCCL_INTERNAL_ERROR;
  }
  struct listen_comm *l = calloc(1, sizeof(*l));
  l->fd = fd;
  l->pending = -1;
  memset(h, 0, sizeof(*h));
  h->magic = MAGIC;
  h->port = ntohs(a.sin_port);
  h->stage_fd = -1;
  *listen_comm = l;
  return GCOLL_NCCL_SUCCESS;
}

static struct comm *new_comm(int fd, int is_send) {
  struct comm *c = calloc(1, sizeof(*c));
  c->fd = fd;
  c->is_send = is_send;
  return c;
}

/* Never blocks: the first call starts the connection, later ones finish
 * it and introduce it with the magic. */
static gcoll_ncclres connect_common(int dev, void *handle, void **send_comm) {
  struct handle *h = handle;
  *send_comm = NULL;
  if (dev != 0 || h->magic != MAGIC) return GCOLL_NCCL_INTERNAL_ERROR;
  if (h->stage_fd < 0) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons(h->port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return GCOLL_NCCL_INTERNAL_ERROR;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
      close(fd);
      return GCOLL_NCCL_INTERNAL_ERROR;
    }
    h->stage_fd = fd;
    return GCOLL_NCCL_SUCCESS;
  }
  struct pollfd p = {.fd = h->stage_fd, .events = POLLOUT};
  if (poll(&p, 1, 0) == 0) return GCOLL_NCCL_SUCCESS;
  int soerr = 0;
  socklen_t sl = sizeof(soerr);
  getsockopt(h->stage_fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
  uint32_t magic = MAGIC;
  if (soerr != 0 || send(h->stage_fd, &magic, 4, MSG_NOSIGNAL) != 4) {
    close(h->stage_fd);
    h->stage_fd = -1;
    return GCOLL_NCCL_INTERNAL_ERROR;
  }
  int one = 1;
  setsockopt(h->stage_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *send_comm = new_comm(h->stage_fd, 1);
  h->stage_fd = -1;
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres plugin_accept(void *listen_comm, void **recv_comm,
                                   struct gcoll_nccl_dev_handle **dev_comm) {
  (void)dev_comm;
  struct listen_comm *l = listen_comm;
  *recv_comm = NULL;
  if (l->pending < 0) {
    l->pending = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (l->pending < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK ? GCOLL_NCCL_SUCCESS : GCOLL_NCCL_INTERNAL_ERROR;
  }
  uint32_t magic;
  ssize_t r = recv(l->pending, &magic, 4, MSG_PEEK);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return GCOLL_NCCL_SUCCESS;
  if (r < 4) return r <= 0 ? GCOLL_NCCL_INTERNAL_ERROR : GCOLL_NCCL_SUCCESS;
  if (recv(l->pending, &magic, 4, 0) != 4 || magic != MAGIC) return GCOLL_NCCL_INTERNAL_ERROR;
  int one = 1;
  setsockopt(l->pending, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *recv_comm = new_comm(l->pending, 0);
  l->pending = -1;
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  if (comm == NULL || type != GCOLL_NCCL_PTR_HOST) return GCOLL_NCCL_INTERNAL_ERROR;
  struct mr *m = malloc(sizeof(*m));
  m->base = data;
  m->size = size;
  *mhandle = m;
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                   int fd, void **mhandle) {
  (void)comm, (void)data, (void)size, (void)type, (void)offset, (void)fd, (void)mhandle;
  return GCOLL_NCCL_INTERNAL_ERROR;
}

static gcoll_ncclres dereg_mr(void *comm, void *mhandle) {
  (void)comm;
  free(mhandle);
  return GCOLL_NCCL_SUCCESS;
}

/* A request for data within the registered region, or NULL (busy). */
static gcoll_ncclres post(struct comm *c, int is_send, void *data, size_t size, void *mhandle,
                          void **request) {
  const struct mr *m = mhandle;
  *request = NULL;
  if (c == NULL || c->is_send != is_send || m == NULL || (char *)data < m->base ||
      (char *)data + size > m->base + m->size) {
    LOG(GCOLL_NCCL_LOG_WARN, "gcolltest: %s outside its registered region", is_send ? "isend" : "irecv");
    return GCOLL_NCCL_INTERNAL_ERROR;
  }
  if (c->n == MAX_REQS) return GCOLL_NCCL_SUCCESS;
  struct req *r = &c->reqs[(c->head + c->n++) % MAX_REQS];
  *r = (struct req){.comm = c, .used = 1, .is_send = is_send, .data = data, .size = size};
  for (int i = 0; i < 8; i++) r->prefix[i] = (unsigned char)((uint64_t)size >> (8 * i));
  *request = r;
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres isend_common(void *send_comm, void *data, size_t size, void *mhandle,
                                  void **request) {
  return post(send_comm, 1, data, size, mhandle, request);
}

static gcoll_ncclres irecv_common(void *recv_comm, int n, void **data, size_t size, void **mhandles,
                                  void **request) {
  if (n != 1) return GCOLL_NCCL_INTERNAL_ERROR;
  return post(recv_comm, 0, data[0], size, mhandles[0], request);
}

/* Moves the oldest request as far as the socket allows; -1 on failure. */
static int progress_one(struct comm *c, struct req *r) {
  size_t total = 8 + r->size;
  while (r->off < total) {
    char *p = r->off < 8 ? (char *)r->prefix + r->off : r->data + (r->off - 8);
    size_t len = r->off < 8 ? 8 - r->off : total - r->off;
    ssize_t k = r->is_send ? send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                           : recv(c->fd, p, len, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    if (k <= 0) return -1;
    r->off += (size_t)k;
    if (!r->is_send && r->off == 8) {
      /* The sender's size: at most what this receive can hold. */
      uint64_t sz = 0;
      for (int i = 0; i < 8; i++) sz |= (uint64_t)r->prefix[i] << (8 * i);
      if (sz > r->size) {
        LOG(GCOLL_NCCL_LOG_WARN, "gcolltest: a %llu-byte message for a %zu-byte receive",
            (unsigned long long)sz, r->size);
        return -1;
      }
      r->size = sz;
      total = 8 + sz;
    }
  }
  r->done = 1;
  c->messages++;
  c->bytes += r->size;
  return 0;
}

static gcoll_ncclres test(void *request, int *done, int *size) {
  struct req *r = request;
  struct comm *c = r->comm;
  *done = 0;
  /* In order: every request before this one finishes first. */
  while (c->n > 0 && !r->done) {
    struct req *oldest = &c->reqs[c->head];
    if (progress_one(c, oldest) != 0) return GCOLL_NCCL_INTERNAL_ERROR;
    if (!oldest->done) break;
    c->head = (c->head + 1) % MAX_REQS;
    c->n--;
  }
  if (!r->done) return GCOLL_NCCL_SUCCESS;
  *done = 1;
  if (size != NULL) *size = (int)r->size;
  r->used = 0;
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                            void **request) {
  (void)recv_comm, (void)n, (void)data, (void)sizes, (void)mhandles;
  *request = NULL; /* host memory: nothing to flush */
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres close_comm(void *comm) {
  struct comm *c = comm;
  LOG(GCOLL_NCCL_LOG_INFO, "gcolltest: %s comm closed after %llu messages, %llu bytes",
      c->is_send ? "send" : "receive", (unsigned long long)c->messages,
      (unsigned long long)c->bytes);
  close(c->fd);
  free(c);
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres close_listen(void *listen_comm) {
  struct listen_comm *l = listen_comm;
  if (l->pending >= 0) close(l->pending);
  close(l->fd);
  free(l);
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres get_device_mr(void *comm, void *mhandle, void **dptr) {
  (void)comm, (void)mhandle;
  *dptr = NULL;
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres irecv_consumed(void *recv_comm, int n, void *request) {
  (void)recv_comm, (void)n, (void)request;
  return GCOLL_NCCL_SUCCESS;
}

static gcoll_ncclres make_vdevice(int *d, struct gcoll_nccl_vprops *props) {
  (void)d, (void)props;
  return GCOLL_NCCL_INTERNAL_ERROR;
}

static gcoll_ncclres connect_v8(int dev, void *handle, void **send_comm,
                                struct gcoll_nccl_dev_handle **dev_comm) {
  (void)dev_comm;
  return connect_common(dev, handle, send_comm);
}

#define NAME "GcollTest"

#if ABI == 10
static gcoll_ncclres init_v10(gcoll_nccl_logger log, gcoll_nccl_profiler_cb prof) {
  (void)prof;
  return init_common(log);
}
static gcoll_ncclres connect_v10(int dev, struct gcoll_nccl_comm_config *cfg, void *handle,
                                 void **send_comm, struct gcoll_nccl_dev_handle **dev_comm) {
  (void)dev_comm;
  if (cfg == NULL) return GCOLL_NCCL_INTERNAL_ERROR;
  return connect_common(dev, handle, send_comm);
}
static gcoll_ncclres isend_v10(void *c, void *data, size_t size, int tag, void *mh, void *ph,
                               void **req) {
  (void)tag, (void)ph;
  return isend_common(c, data, size, mh, req);
}
static gcoll_ncclres irecv_v10(void *c, int n, void **data, size_t *sizes, int *tags, void **mhs,
                               void **phs, void **req) {
  (void)tags, (void)phs;
  return irecv_common(c, n, data, sizes[0], mhs, req);
}
const struct gcoll_nccl_net_v10 ncclNetPlugin_v10 = {
    NAME, init_v10, devices, props_v9, plugin_listen, connect_v10, plugin_accept, reg_mr,
    reg_mr_dmabuf, dereg_mr, isend_v10, irecv_v10, iflush, test, close_comm, close_comm,
    close_listen, get_device_mr, irecv_consumed, make_vdevice};
#elif ABI == 9
static gcoll_ncclres isend_v9(void *c, void *data, size_t size, int tag, void *mh, void **req) {
  (void)tag;
  return isend_common(c, data, size, mh, req);
}
static gcoll_ncclres irecv_v9(void *c, int n, void **data, size_t *sizes, int *tags, void **mhs,
                              void **req) {
  (void)tags;
  return irecv_common(c, n, data, sizes[0], mhs, req);
}
const struct gcoll_nccl_net_v9 ncclNetPlugin_v9 = {
    NAME, init_common, devices, props_v9, plugin_listen, connect_v8, plugin_accept, reg_mr,
    reg_mr_dmabuf, dereg_mr, isend_v9, irecv_v9, iflush, test, close_comm, close_comm,
    close_listen, get_device_mr, irecv_consumed, make_vdevice};
#elif ABI == 8
static gcoll_ncclres isend_v8(void *c, void *data, int size, int tag, void *mh, void **req) {
  (void)tag;
  if (size < 0) return GCOLL_NCCL_INTERNAL_ERROR;
  return isend_common(c, data, (size_t)size, mh, req);
}
static gcoll_ncclres irecv_v8(void *c, int n, void **data, int *sizes, int *tags, void **mhs,
                              void **req) {
  (void)tags;
  if (sizes[0] < 0) return GCOLL_NCCL_INTERNAL_ERROR;
  return irecv_common(c, n, data, (size_t)sizes[0], mhs, req);
}
const struct gcoll_nccl_net_v8 ncclNetPlugin_v8 = {
    NAME, init_common, devices, props_v8, plugin_listen, connect_v8, plugin_accept, reg_mr,
    reg_mr_dmabuf, dereg_mr, isend_v8, irecv_v8, iflush, test, close_comm, close_comm,
    close_listen, get_device_mr, irecv_consumed};
#elif ABI == 7
/* Only the symbol matters: gcoll must refuse the version without calling it. */
const struct gcoll_nccl_net_v8 ncclNetPlugin_v7 = {.name = NAME};
#endif
