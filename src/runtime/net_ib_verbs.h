/* net/ib: the device and the reliable-connected queue pairs, nothing about
 * FIFOs or the proxy (net_ib.c).
 *
 * Device choice: GCOLL_IB_HCA names a device ("mlx5_0") or a device port
 * ("mlx5_0:1"); without it the first device with an ACTIVE port wins.
 * Addressing: InfiniBand ports use the LID; Ethernet ports (RoCE) a GID,
 * index GCOLL_IB_GID_INDEX, else the first RoCE v2 GID that maps an IPv4
 * address, else the first RoCE v2 GID, else index 0. */
#ifndef GCOLL_RUNTIME_NET_IB_VERBS_H
#define GCOLL_RUNTIME_NET_IB_VERBS_H

#include <infiniband/verbs.h>
#include <stddef.h>

#include "runtime/net_ib_addr.h"

struct gcoll_ib_dev {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_comp_channel *channel; /* non-blocking; every CQ reports here */
  uint8_t port;
  uint8_t gid_index;
  struct gcoll_ib_qp_info local;    /* lid, gid, mtu, link; no qpn/psn */
  char name[IBV_SYSFS_NAME_MAX];
};

/* One connection's completion queue and RC queue pair. */
struct gcoll_ib_qp {
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct gcoll_ib_qp_info info;     /* this end, for the peer */
};

/* Opens the device, its PD and completion channel; -1 with one line in err
 * ("no RDMA device ...") when there is none to use. */
int gcoll_ib_dev_open(struct gcoll_ib_dev *d, char *err, size_t errlen);
/* Frees in reverse order of gcoll_ib_dev_open; every QP and CQ must be
 * destroyed first. */
void gcoll_ib_dev_close(struct gcoll_ib_dev *d);

/* A CQ (armed on the device channel, cq_context for its events) and a QP
 * in INIT whose queues hold send_wr / recv_wr requests. */
int gcoll_ib_qp_create(struct gcoll_ib_dev *d, void *cq_context, unsigned send_wr,
                       unsigned recv_wr, struct gcoll_ib_qp *q, char *err, size_t errlen);
/* INIT -> RTR -> RTS against the remote end. */
int gcoll_ib_qp_connect(struct gcoll_ib_dev *d, struct gcoll_ib_qp *q,
                        const struct gcoll_ib_qp_info *remote, char *err, size_t errlen);
/* QP, then CQ; either may be missing. */
void gcoll_ib_qp_destroy(struct gcoll_ib_qp *q);

#endif
