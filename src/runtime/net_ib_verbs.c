/* net/ib: device, completion queues and RC queue pairs (see net_ib_verbs.h). */
#define _GNU_SOURCE
#include "runtime/net_ib_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/settings.h"

/* RTS timers: ack timeout 4.096 us * 2^14 = 67 ms, 7 retries, so a dead
 * peer's HCA fails our writes within about half a second; RNR retries are
 * unbounded (7) because every receive is reposted by our own proxy. */
#define QP_TIMEOUT 14
#define QP_RETRY 7
#define QP_RNR_RETRY 7
#define QP_MIN_RNR_TIMER 12
#define GID_TABLE_MAX 256

static uint32_t random_psn(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 20) ^ (uint64_t)ts.tv_sec;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)(x ^ (x >> 31)) & 0xffffffu;
}

static int active_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *pa) {
  return ibv_query_port(ctx, port, pa) == 0 && pa->state == IBV_PORT_ACTIVE;
}

/* The first ACTIVE port of ctx (or `want` when nonzero); 0 when none. */
static uint8_t pick_port(struct ibv_context *ctx, uint8_t want, struct ibv_port_attr *pa) {
  struct ibv_device_attr da;
  if (ibv_query_device(ctx, &da) != 0) return 0;
  for (unsigned p = 1; p <= da.phys_port_cnt; p++)
    if ((want == 0 || p == want) && active_port(ctx, (uint8_t)p, pa)) return (uint8_t)p;
  return 0;
}

static int is_ipv4_mapped(const union ibv_gid *g) {
  static const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

static int pick_gid_index(struct gcoll_ib_dev *d, int ethernet, char *err, size_t errlen) {
  const char *v = gcoll_setting("GCOLL_IB_GID_INDEX");
  if (v != NULL && *v != '\0') {
    char *end;
    long idx = strtol(v, &end, 10);
    if (*end != '\0' || idx < 0 || idx > 255) {
      snprintf(err, errlen, "GCOLL_IB_GID_INDEX='%.32s': expected 0 to 255", v);
      return -1;
    }
    d->gid_index = (uint8_t)idx;
    return 0;
  }
  d->gid_index = 0;
  if (!ethernet) return 0;
  struct ibv_gid_entry *e = calloc(GID_TABLE_MAX, sizeof(*e));
  if (e == NULL) return 0;
  ssize_t n = ibv_query_gid_table(d->ctx, e, GID_TABLE_MAX, 0);
  int v2 = -1, v2_ipv4 = -1;
  for (ssize_t i = 0; i < n; i++) {
    if (e[i].port_num != d->port || e[i].gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    if (v2 < 0) v2 = (int)e[i].gid_index;
    if (v2_ipv4 < 0 && is_ipv4_mapped(&e[i].gid)) v2_ipv4 = (int)e[i].gid_index;
  }
  free(e);
  int idx = v2_ipv4 >= 0 ? v2_ipv4 : v2;
  if (idx >= 0 && idx <= 255) d->gid_index = (uint8_t)idx;
  return 0;
}

/* Opens the device GCOLL_IB_HCA names, or the first with an active port. */
static int open_device(struct gcoll_ib_dev *d, struct ibv_port_attr *pa, char *err,
                       size_t errlen) {
  const char *want = gcoll_setting("GCOLL_IB_HCA");
  char name[IBV_SYSFS_NAME_MAX] = "";
  unsigned long want_port = 0;
  if (want != NULL && *want != '\0') {
    snprintf(name, sizeof(name), "%s", want);
    char *colon = strchr(name, ':');
    if (colon != NULL) {
      *colon = '\0';
      char *end;
      want_port = strtoul(colon + 1, &end, 10);
      if (*end != '\0' || want_port < 1 || want_port > 255) {
        snprintf(err, errlen, "GCOLL_IB_HCA='%.64s': expected a device or device:port", want);
        return -1;
      }
    }
  }
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    snprintf(err, errlen, "no RDMA device (libibverbs found none%s%s)",
             list == NULL && errno ? ": " : "", list == NULL && errno ? strerror(errno) : "");
    if (list != NULL) ibv_free_device_list(list);
    return -1;
  }
  for (int i = 0; i < n && d->ctx == NULL; i++) {
    const char *dev = ibv_get_device_name(list[i]);
    if (name[0] != '\0' && strcmp(dev, name) != 0) continue;
    struct ibv_context *ctx = ibv_open_device(list[i]);
    if (ctx == NULL) continue;
    uint8_t port = pick_port(ctx, (uint8_t)want_port, pa);
    if (port == 0) {
      ibv_close_device(ctx);
      continue;
    }
    d->ctx = ctx;
    d->port = port;
    snprintf(d->name, sizeof(d->name), "%s", dev);
  }
  ibv_free_device_list(list);
  if (d->ctx != NULL) return 0;
  if (name[0] != '\0') {
    char from[512];
    gcoll_setting_origin("GCOLL_IB_HCA", from, sizeof(from));
    snprintf(err, errlen,
             "no RDMA device: GCOLL_IB_HCA='%.64s'%s%.300s%s names no device with an active port",
             want, strchr(from, '=') ? " (from " : "", strchr(from, '=') ? from : "",
             strchr(from, '=') ? ")" : "");
  } else
    snprintf(err, errlen, "no RDMA device with an active port (%d devices found)", n);
  return -1;
}

int gcoll_ib_dev_open(struct gcoll_ib_dev *d, char *err, size_t errlen) {
  memset(d, 0, sizeof(*d));
  struct ibv_port_attr pa;
  if (open_device(d, &pa, err, errlen) != 0) return -1;
  int ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  d->local.lid = pa.lid;
  d->local.mtu = (uint8_t)pa.active_mtu;
  d->local.link = ethernet ? 2 : 1;
  union ibv_gid gid;
  if (pick_gid_index(d, ethernet, err, errlen) != 0) goto fail;
  if (ibv_query_gid(d->ctx, d->port, d->gid_index, &gid) != 0) {
    snprintf(err, errlen, "%s port %u: no GID at index %u", d->name, d->port, d->gid_index);
    goto fail;
  }
  memcpy(d->local.gid, gid.raw, 16);
  if (!ethernet && pa.lid == 0) {
    snprintf(err, errlen, "%s port %u is InfiniBand without a LID (no subnet manager?)", d->name,
             d->port);
    goto fail;
  }
  d->pd = ibv_alloc_pd(d->ctx);
  if (d->pd == NULL) {
    snprintf(err, errlen, "%s: ibv_alloc_pd failed", d->name);
    goto fail;
  }
  d->channel = ibv_create_comp_channel(d->ctx);
  if (d->channel == NULL) {
    snprintf(err, errlen, "%s: ibv_create_comp_channel failed", d->name);
    goto fail;
  }
  int fl = fcntl(d->channel->fd, F_GETFL);
  if (fl < 0 || fcntl(d->channel->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    snprintf(err, errlen, "%s: completion channel: %s", d->name, strerror(errno));
    goto fail;
  }
  return 0;
fail:
  gcoll_ib_dev_close(d);
  return -1;
}

void gcoll_ib_dev_close(struct gcoll_ib_dev *d) {
  if (d->channel != NULL) ibv_destroy_comp_channel(d->channel);
  if (d->pd != NULL) ibv_dealloc_pd(d->pd);
  if (d->ctx != NULL) ibv_close_device(d->ctx);
  d->channel = NULL;
  d->pd = NULL;
  d->ctx = NULL;
}

int gcoll_ib_qp_create(struct gcoll_ib_dev *d, void *cq_context, unsigned send_wr,
                       unsigned recv_wr, struct gcoll_ib_qp *q, char *err, size_t errlen) {
  memset(q, 0, sizeof(*q));
  q->cq = ibv_create_cq(d->ctx, (int)(send_wr + recv_wr), cq_context, d->channel, 0);
  if (q->cq == NULL) {
    snprintf(err, errlen, "%s: ibv_create_cq: %s", d->name, strerror(errno));
    return -1;
  }
  struct ibv_qp_init_attr ia = {
      .send_cq = q->cq,
      .recv_cq = q->cq,
      .cap = {.max_send_wr = send_wr, .max_recv_wr = recv_wr, .max_send_sge = 1,
              .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  q->qp = ibv_create_qp(d->pd, &ia);
  if (q->qp == NULL) {
    snprintf(err, errlen, "%s: ibv_create_qp: %s", d->name, strerror(errno));
    gcoll_ib_qp_destroy(q);
    return -1;
  }
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = d->port,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  int rc = ibv_modify_qp(q->qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) {
    snprintf(err, errlen, "%s: queue pair to INIT: %s", d->name, strerror(rc));
    gcoll_ib_qp_destroy(q);
    return -1;
  }
  q->info = d->local;
  q->info.qpn = q->qp->qp_num;
  q->info.psn = random_psn();
  return 0;
}

int gcoll_ib_qp_connect(struct gcoll_ib_dev *d, struct gcoll_ib_qp *q,
                        const struct gcoll_ib_qp_info *remote, char *err, size_t errlen) {
  if (remote->link != d->local.link) {
    snprintf(err, errlen, "%s is %s but the peer's port is %s", d->name,
             d->local.link == 2 ? "Ethernet (RoCE)" : "InfiniBand",
             remote->link == 2 ? "Ethernet (RoCE)" : "InfiniBand");
    return -1;
  }
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = (enum ibv_mtu)(remote->mtu < d->local.mtu ? remote->mtu : d->local.mtu),
      .dest_qp_num = remote->qpn,
      .rq_psn = remote->psn,
      .max_dest_rd_atomic = 1,
      .min_rnr_timer = QP_MIN_RNR_TIMER,
      .ah_attr = {.dlid = remote->lid, .sl = 0, .src_path_bits = 0, .port_num = d->port},
  };
  /* RoCE has no LIDs; an InfiniBand peer without one is only reachable
   * through a router, by GID, too. */
  if (remote->link == 2 || remote->lid == 0) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, remote->gid, 16);
    a.ah_attr.grh.sgid_index = d->gid_index;
    a.ah_attr.grh.hop_limit = 255;
  }
  int rc = ibv_modify_qp(q->qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) {
    snprintf(err, errlen, "%s: queue pair to RTR (peer qpn %u): %s", d->name, remote->qpn,
             strerror(rc));
    return -1;
  }
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = QP_TIMEOUT;
  a.retry_cnt = QP_RETRY;
  a.rnr_retry = QP_RNR_RETRY;
  a.sq_psn = q->info.psn;
  a.max_rd_atomic = 1;
  rc = ibv_modify_qp(q->qp, &a,
                     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) {
    snprintf(err, errlen, "%s: queue pair to RTS: %s", d->name, strerror(rc));
    return -1;
  }
  return 0;
}

void gcoll_ib_qp_destroy(struct gcoll_ib_qp *q) {
  if (q->qp != NULL) ibv_destroy_qp(q->qp);
  if (q->cq != NULL) ibv_destroy_cq(q->cq);
  q->qp = NULL;
  q->cq = NULL;
}
