/* Connecting the edges the plan names for this rank, and only those; and
 * the one-connection helpers that comm_p2p.c also uses for peers the plan
 * does not name (connected on first use, under GCOLL_CONN_ID_P2P).
 *
 * Each connection is one direction between two ranks for one channel and
 * purpose. The receiver creates the FIFO (so its memory is local to the
 * reader) and publishes its address under a key naming sender, receiver and
 * connection id; after one fence every sender fetches exactly the keys of
 * its own send edges. With endpoints that came with the plan (issue 16,
 * bootstrap_endpoints.c) "publishes" sends the address straight to the
 * sender's listener and "fetches" waits for it there: no store, no fence. A
 * rank therefore reads at most GCOLL_COMM_MAX_CONNS/2 keys, whatever the job
 * size: no all-to-all of addresses.
 *
 * The plan's edge class picks the transport: shm inside a node, p2p
 * (FIFOs in GPU memory, CUDA IPC) for GPU-to-GPU edges when this rank has a
 * GPU at init and GCOLL_P2P_DISABLE is not set; between nodes net/ib when
 * this rank could start it, else net/socket. Only the receiver decides, and
 * it is the one that needs the GPU: a p2p FIFO lives in its memory.
 * GCOLL_TRANSPORT=net/socket sends every edge over TCP, which is how the
 * network path is tested on one host.
 *
 * net/ib is started only by ranks of a job that spans nodes (any rank may
 * then need a cross-node connection: a plan edge, or a send/recv peer the
 * plan does not name) and only when GCOLL_TRANSPORT forces nothing else.
 * Without a usable device it stays unstarted and cross-node edges use
 * net/socket; forced with GCOLL_TRANSPORT=net/ib, that is an init failure.
 *
 * The plan also says p2p for edges between nodes of one multi-node NVLink
 * domain (GB200 NVL72 trays). The p2p transport maps its peer's GPU memory
 * with CUDA IPC, which only reaches GPUs of the same host (across trays it
 * would need fabric memory handles, which this runtime does not have), so
 * those edges are carried as net edges, said once at GCOLL_DEBUG=INFO:
 * such plans run everywhere, over the network between trays.
 *
 * An NCCL net plugin (NCCL_NET_PLUGIN, else libnccl-net.so; docs/net.md)
 * comes first across nodes, as NCCL prefers an external network to its
 * own: where one loads and has a device, cross-node edges use net/plugin
 * and net/ib is not started. GCOLL_NET (else NCCL_NET) names the network:
 * Socket or IB leave the plugin out; any other name must be the plugin's,
 * or the init fails. A plugin that cannot be used otherwise is one line
 * (a warning when NCCL_NET_PLUGIN named it) and the built-in devices.
 *
 * The receiver writes the transport it chose (enum gcoll_transport_kind) as
 * the first byte of the published value, so both ends always agree, and a
 * sender that lacks that transport (the receiver has an RDMA device, the
 * sender none) fails in one line instead of guessing. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/comm.h"
#include "runtime/fifo_devmem.h"
#include "runtime/net_plugin.h"
#include "runtime/proxy.h"
#include "runtime/settings.h"

/* Connection purposes, part of the connection id. */
enum conn_kind { CONN_RING = 0, CONN_TREE_UP = 1, CONN_TREE_DOWN = 2 };

struct edge {
  int peer;
  int is_send;
  enum gcoll_edge cls;
  uint32_t id;
  struct gcoll_fifo **fifo;   /* where the executor finds it */
};

static uint32_t conn_id(int channel, enum conn_kind kind) { return (uint32_t)channel * 4u + kind; }

static const struct gcoll_transport_ops *const transport_ops[GCOLL_NTRANSPORTS] = {
    [GCOLL_TRANSPORT_SHM] = &gcoll_transport_shm_ops,
    [GCOLL_TRANSPORT_SOCKET] = &gcoll_transport_socket_ops,
#ifdef HAVE_VERBS
    [GCOLL_TRANSPORT_IB] = &gcoll_transport_ib_ops,
#endif
#ifdef HAVE_CUDA
    [GCOLL_TRANSPORT_P2P] = &gcoll_transport_p2p_ops,
#endif
    [GCOLL_TRANSPORT_PLUGIN] = &gcoll_transport_plugin_ops,
};


static struct gcoll_transport *transport_of(struct gcollComm *comm, const struct gcoll_conn *c) {
  for (int k = 0; k < GCOLL_NTRANSPORTS; k++)
    if (transport_ops[k] != NULL && c->ops == transport_ops[k]) return comm->transport[k];
  return NULL;
}

static int add_edge(struct edge *edges, int *n, int peer, int is_send, enum gcoll_edge cls,
                    uint32_t id, struct gcoll_fifo **fifo) {
  if (*n >= GCOLL_COMM_MAX_CONNS) return -1;
  edges[(*n)++] = (struct edge){peer, is_send, cls, id, fifo};
  return 0;
}

/* Plan channels c < S use tree t1, c >= S tree t2. The executor runs the
 * first k of its channels when the tuning row asks for k, so they are
 * interleaved (t1, t2, t1, ...): any even k splits a tree allreduce evenly
 * over both trees of the double binary tree, as it must. */
static int executor_slot(int c, int nchannels) {
  int half = nchannels / 2;
  return c < half ? 2 * c : 2 * (c - half) + 1;
}

/* The edges of plan channel c, filling the executor's channel description. */
static int channel_edges(struct gcollComm *comm, int c, struct edge *edges, int *n) {
  const struct gcoll_ring_link *r = &comm->view->ring[c];
  const struct gcoll_tree_link *t = &comm->view->tree[c];
  struct gcoll_host_channel *hc = &comm->channels[executor_slot(c, comm->nchannels)];
  const int *ranks = comm->ring_ranks + (size_t)c * comm->nranks;
  hc->ring.ranks = ranks;
  hc->ring.pos = 0;
  for (int i = 0; i < comm->nranks; i++)
    if (ranks[i] == comm->rank) hc->ring.pos = i;
  if (comm->nranks == 1) return 0;   /* self edges: nothing to connect */
  int rc =
      add_edge(edges, n, r->prev, 0, r->prev_edge, conn_id(c, CONN_RING), &hc->ring.recv_prev) |
      add_edge(edges, n, r->next, 1, r->next_edge, conn_id(c, CONN_RING), &hc->ring.send_next);
  hc->has_tree = 1;
  hc->tree.parent = t->parent;
  hc->tree.nchildren = t->nchildren;
  if (t->parent >= 0)
    rc |= add_edge(edges, n, t->parent, 1, t->parent_edge, conn_id(c, CONN_TREE_UP),
                   &hc->tree.send_parent) |
          add_edge(edges, n, t->parent, 0, t->parent_edge, conn_id(c, CONN_TREE_DOWN),
                   &hc->tree.recv_parent);
  for (int k = 0; k < t->nchildren && k < GCOLL_PRIMS_MAX_PEERS; k++)
    rc |= add_edge(edges, n, t->children[k], 0, t->child_edge[k], conn_id(c, CONN_TREE_UP),
                   &hc->tree.recv_child[k]) |
          add_edge(edges, n, t->children[k], 1, t->child_edge[k], conn_id(c, CONN_TREE_DOWN),
                   &hc->tree.send_child[k]);
  return rc;
}

/* GCOLL_TRANSPORT forces one transport for every edge; -1 when unset.
 * transport.c parses it, so every reader accepts the same names. */
static int forced_transport(gcollResult_t *rc) {
  const struct gcoll_transport_ops *ops = NULL;
  char err[256];
  *rc = gcollSuccess;
  if (gcoll_transport_from_env(&ops, err, sizeof(err)) != 0) {
    *rc = gcoll_fail(gcollInvalidArgument, "%s", err);
    return -1;
  }
  if (ops == NULL) return -1;
  for (int k = 0; k < GCOLL_NTRANSPORTS; k++)
    if (transport_ops[k] == ops) return k;
  *rc = gcoll_fail(gcollInvalidArgument, "GCOLL_TRANSPORT=%s: not a transport of communicators",
                   ops->name);
  return -1;
}

static int transport_for(const struct gcollComm *comm, enum gcoll_edge cls, int forced) {
  if (forced >= 0) return forced;
  if (cls == GCOLL_EDGE_P2P && comm->transport[GCOLL_TRANSPORT_P2P] != NULL)
    return GCOLL_TRANSPORT_P2P;
  if (cls != GCOLL_EDGE_NET) return GCOLL_TRANSPORT_SHM;
  if (comm->net_transport >= 0) return comm->net_transport;   /* gcollConfig_t.netName */
  if (comm->transport[GCOLL_TRANSPORT_PLUGIN] != NULL) return GCOLL_TRANSPORT_PLUGIN;
  return comm->transport[GCOLL_TRANSPORT_IB] != NULL ? GCOLL_TRANSPORT_IB : GCOLL_TRANSPORT_SOCKET;
}

/* Whether this rank may connect across nodes at all. A node that does not
 * hold the whole job has peers elsewhere. Not "has a cross-node plan edge":
 * a send/recv peer on another node connects lazily and must find net/ib
 * started at both ends or at neither. */
static int job_spans_nodes(const struct gcollComm *comm) {
  return comm->view->local_nranks < comm->nranks;
}

/* The network GCOLL_NET (else NCCL_NET, settings.h) names, NULL when
 * unset; from says where it came from ("NCCL_NET=IB (environment)"). */
static const char *named_net(char *from, size_t len) {
  const char *v = gcoll_setting("GCOLL_NET");
  if (v == NULL || *v == '\0') return NULL;
  gcoll_setting_origin("GCOLL_NET", from, len);
  if (strchr(from, '=') == NULL) snprintf(from, len, "GCOLL_NET=%.64s", v);
  return v;
}

static int names_builtin(const char *net) {
  return net != NULL && (strcasecmp(net, "Socket") == 0 || strcasecmp(net, "IB") == 0);
}

/* An NCCL net plugin, tried where net/ib would be (or forced), unless the
 * communicator or GCOLL_NET/NCCL_NET chose a built-in network. */
static gcollResult_t start_plugin(struct gcollComm *comm, const struct gcoll_transport_config *cfg,
                                  int forced) {
  const struct gcoll_transport_ops *ops = transport_ops[GCOLL_TRANSPORT_PLUGIN];
  char from[512];
  const char *net = named_net(from, sizeof(from));
  if ((forced >= 0 && forced != GCOLL_TRANSPORT_PLUGIN) ||
      (forced < 0 && (!job_spans_nodes(comm) || comm->net_transport >= 0 || names_builtin(net))))
    return gcollSuccess;
  char err[512], why[512];
  int named;
  const char *name = gcoll_net_plugin_name(&named, why, sizeof(why));
  if (name != NULL && net != NULL && strcasecmp(net, name) != 0) {
    snprintf(why, sizeof(why), "the NCCL net plugin serves network '%.64s'", name);
    name = NULL;
  }
  if (name != NULL &&
      ops->init(&comm->transport[GCOLL_TRANSPORT_PLUGIN], cfg, err, sizeof(err)) == 0) {
    char what[512];
    gcoll_net_plugin_describe(comm->transport[GCOLL_TRANSPORT_PLUGIN], what, sizeof(what));
    gcoll_log_info(comm, "net/plugin: %s; hellos on %s", what,
                   comm->transport[GCOLL_TRANSPORT_PLUGIN]->listen_addr);
    return gcollSuccess;
  }
  comm->transport[GCOLL_TRANSPORT_PLUGIN] = NULL;
  if (name != NULL) snprintf(why, sizeof(why), "%s", err);
  if (forced == GCOLL_TRANSPORT_PLUGIN)
    return gcoll_fail(gcollSystemError, "GCOLL_TRANSPORT=net/plugin: %s", why);
  if (net != NULL)
    return gcoll_fail(gcollInvalidUsage, "%s: no such network (%s)", from, why);
  /* Asked for by name, a plugin that cannot serve deserves more than an
   * INFO line; the default libnccl-net.so being absent is normal. */
  if (named)
    fprintf(stderr, "gcoll rank %d: %s; cross-node edges use net/ib or net/socket\n", comm->rank,
            why);
  else
    gcoll_log_info(comm, "net/plugin not used (%s)", why);
  return gcollSuccess;
}

/* net/ib is optional: tried only where it can matter, and its absence is a
 * failure only when GCOLL_TRANSPORT asked for it. */
static gcollResult_t start_ib(struct gcollComm *comm, const struct gcoll_transport_config *cfg,
                              int forced) {
  const struct gcoll_transport_ops *ops = transport_ops[GCOLL_TRANSPORT_IB];
  if (ops == NULL || (forced >= 0 && forced != GCOLL_TRANSPORT_IB) ||
      (forced < 0 && !job_spans_nodes(comm)))
    return gcollSuccess;
  char err[512];
  /* The communicator's netName (ncclConfig_t's) chooses for it. */
  if (forced < 0 && comm->net_transport == GCOLL_TRANSPORT_SOCKET) {
    gcoll_log_info(comm, "net/ib not started (netName Socket); cross-node edges use net/socket");
    return gcollSuccess;
  }
  char from[512];
  const char *net = named_net(from, sizeof(from));
  if (forced < 0 && comm->net_transport < 0 && net != NULL && strcasecmp(net, "Socket") == 0) {
    gcoll_log_info(comm, "net/ib not started (%s); cross-node edges use net/socket", from);
    return gcollSuccess;
  }
  if (forced < 0 && comm->transport[GCOLL_TRANSPORT_PLUGIN] != NULL) {
    gcoll_log_info(comm, "net/ib not started: net/plugin serves cross-node edges");
    return gcollSuccess;
  }
  /* GCOLL_IB_DISABLE (NCCL_IB_DISABLE, NCCL_NET=Socket); GCOLL_TRANSPORT and
   * netName IB win. */
  const char *off = gcoll_setting("GCOLL_IB_DISABLE");
  if (forced < 0 && comm->net_transport < 0 && off != NULL && strcmp(off, "0") != 0) {
    gcoll_setting_origin("GCOLL_IB_DISABLE", err, sizeof(err));
    gcoll_log_info(comm, "net/ib not started (%s); cross-node edges use net/socket", err);
    return gcollSuccess;
  }
  if (ops->init(&comm->transport[GCOLL_TRANSPORT_IB], cfg, err, sizeof(err)) == 0) {
    gcoll_log_info(comm, "net/ib side channel listens on %s",
                   comm->transport[GCOLL_TRANSPORT_IB]->listen_addr);
    return gcollSuccess;
  }
  comm->transport[GCOLL_TRANSPORT_IB] = NULL;
  if (forced == GCOLL_TRANSPORT_IB)
    return gcoll_fail(gcollSystemError, "GCOLL_TRANSPORT=net/ib: %s", err);
  if (forced < 0 && comm->net_transport == GCOLL_TRANSPORT_IB)
    return gcoll_fail(gcollSystemError, "netName IB: %s", err);
  gcoll_log_info(comm, "net/ib unavailable (%s); cross-node edges use net/socket", err);
  return gcollSuccess;
}

static int p2p_disabled(void) {
  const char *v = gcoll_setting("GCOLL_P2P_DISABLE");
  return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

int gcoll_comm_thread_gpu(const int *devlist, int i) {
  if (devlist != NULL) return devlist[i];
  gcollResult_t rc;
  int gpu = -1;
  char err[256];
  if (forced_transport(&rc) == GCOLL_TRANSPORT_P2P &&
      gcoll_devmem_current_device(&gpu, err, sizeof(err)) != 0)
    gpu = -1;
  return gpu;
}

/* p2p is started where GPU edges could use it: forced, or this rank has a
 * GPU-to-GPU plan edge and GCOLL_P2P_DISABLE is unset. Without a GPU at
 * init those edges use shm (forced: an init failure). The GPU is then this
 * communicator's for good: its FIFOs live there. */
static gcollResult_t start_p2p(struct gcollComm *comm, const struct gcoll_transport_config *base,
                               int forced, int has_gpu_edges) {
  const struct gcoll_transport_ops *ops = transport_ops[GCOLL_TRANSPORT_P2P];
  if (ops == NULL || (forced >= 0 && forced != GCOLL_TRANSPORT_P2P) ||
      (forced < 0 && (!has_gpu_edges || p2p_disabled())))
    return gcollSuccess;
  char err[512];
  struct gcoll_transport_config cfg = *base;
  cfg.gpu = comm->gpu_at_init;
  if (cfg.gpu < 0 && gcoll_devmem_current_device(&cfg.gpu, err, sizeof(err)) != 0) cfg.gpu = -1;
  if (cfg.gpu >= 0 &&
      ops->init(&comm->transport[GCOLL_TRANSPORT_P2P], &cfg, err, sizeof(err)) == 0) {
    comm->cuda_device = cfg.gpu;
    gcoll_log_info(comm, "p2p: FIFOs in the memory of GPU %d", cfg.gpu);
    return gcollSuccess;
  }
  comm->transport[GCOLL_TRANSPORT_P2P] = NULL;
  if (forced == GCOLL_TRANSPORT_P2P)
    return gcoll_fail(gcollInvalidUsage, "GCOLL_TRANSPORT=p2p: %s", err);
  gcoll_log_info(comm, "p2p unavailable (%s); GPU edges use shm", err);
  return gcollSuccess;
}

static gcollResult_t start_transports(struct gcollComm *comm, int forced, int has_gpu_edges) {
  char err[512];
  if (gcoll_proxy_create(&comm->proxy, err, sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "proxy: %s", err);
  struct gcoll_transport_config cfg = {
      .rank = comm->rank,
      .nranks = comm->nranks,
      .job_key = comm->job_key,
      .slot_bytes = comm->slot_bytes,
      .abort_word = &comm->abort_word,
      .failed_peer = &comm->failed_peer,
      .timeout_ms = comm->timeout_ms,
      .proxy = comm->proxy,
  };
  for (int k = 0; k < GCOLL_NTRANSPORTS; k++) {
    if (transport_ops[k] == NULL || k == GCOLL_TRANSPORT_IB || k == GCOLL_TRANSPORT_P2P ||
        k == GCOLL_TRANSPORT_PLUGIN)
      continue;
    if (transport_ops[k]->init(&comm->transport[k], &cfg, err, sizeof(err)) != 0)
      return gcoll_fail(gcollSystemError, "transport %s: %s", transport_ops[k]->name, err);
    if (comm->transport[k]->listen_addr[0] != '\0')
      gcoll_log_info(comm, "%s listens on %s", transport_ops[k]->name,
                     comm->transport[k]->listen_addr);
  }
  gcollResult_t rc = start_p2p(comm, &cfg, forced, has_gpu_edges);
  if (rc == gcollSuccess) rc = start_plugin(comm, &cfg, forced);
  return rc != gcollSuccess ? rc : start_ib(comm, &cfg, forced);
}

/* ---- one direction of one connection, shared with comm_p2p.c ------------- */

void gcoll_comm_conn_key(char *key, size_t len, int sender, int receiver, uint32_t id) {
  snprintf(key, len, "conn/%d/%d/%u", sender, receiver, id);
}

gcollResult_t gcoll_comm_conn_recv_setup(struct gcollComm *comm, int peer, uint32_t id,
                                         int transport, struct gcoll_conn *c) {
  char err[512], key[96];
  unsigned char value[1 + GCOLL_CONN_ADDR_MAX];
  const struct gcoll_transport_ops *ops = transport_ops[transport];
  size_t len = GCOLL_CONN_ADDR_MAX;
  if (ops->recv_setup(comm->transport[transport], peer, id, c, value + 1, &len, err,
                      sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "receive from rank %d over %s: %s", peer, ops->name, err);
  comm->has_net |= transport != GCOLL_TRANSPORT_SHM && transport != GCOLL_TRANSPORT_P2P;
  comm->fifos_on_device |= transport == GCOLL_TRANSPORT_P2P;
  value[0] = (unsigned char)transport;
  gcoll_comm_conn_key(key, sizeof(key), peer, comm->rank, id);
  /* Its only reader is the sender: with endpoints from the plan the value
   * goes straight to it (bootstrap_endpoints.c), else to the store. */
  if (gcoll_bootstrap_put_to(comm->bs, peer, key, value, len + 1, err, sizeof(err)) != 0) {
    ops->conn_close(comm->transport[transport], c);
    return gcoll_fail(gcollSystemError, "%s", err);
  }
  return gcollSuccess;
}

gcollResult_t gcoll_comm_conn_attach(struct gcollComm *comm, int peer, uint32_t id,
                                     const void *value, size_t len, struct gcoll_conn *c,
                                     uint64_t deadline_ms) {
  char err[512];
  const unsigned char *v = value;
  if (len < 1 || v[0] >= GCOLL_NTRANSPORTS)
    return gcoll_fail(gcollRemoteError, "rank %d published a malformed address", peer);
  int k = v[0];
  /* In practice only net/ib is ever unstarted (or out of the build): the
   * others start on every rank or the init fails. */
  if (transport_ops[k] == NULL || comm->transport[k] == NULL) {
    const char *name = transport_ops[k] != NULL ? transport_ops[k]->name
                       : k == GCOLL_TRANSPORT_P2P ? "p2p" : "net/ib";
    return gcoll_fail(gcollRemoteError,
                      "rank %d receives over %s, which this rank has not started (%s); set "
                      "%s on every rank",
                      peer, name,
                      transport_ops[k] == NULL ? "this build lacks it"
                                               : "no usable device: see GCOLL_DEBUG=INFO",
                      k == GCOLL_TRANSPORT_P2P ? "GCOLL_P2P_DISABLE=1"
                                               : "GCOLL_TRANSPORT=net/socket");
  }
  if (transport_ops[k]->send_connect(comm->transport[k], peer, id, v + 1, len - 1, c, deadline_ms,
                                     err, sizeof(err)) != 0)
    return gcoll_fail(gcollRemoteError, "send to rank %d over %s: %s", peer,
                      transport_ops[k]->name, err);
  comm->has_net |= k != GCOLL_TRANSPORT_SHM && k != GCOLL_TRANSPORT_P2P;
  comm->fifos_on_device |= k == GCOLL_TRANSPORT_P2P;
  return gcollSuccess;
}

gcollResult_t gcoll_comm_conn_recv_complete(struct gcollComm *comm, struct gcoll_conn *c,
                                            uint64_t deadline_ms) {
  char err[512];
  if (c->ops->recv_complete == NULL ||
      c->ops->recv_complete(transport_of(comm, c), c, deadline_ms, err, sizeof(err)) == 0)
    return gcollSuccess;
  return gcoll_fail(gcollRemoteError, "receive from rank %d: %s", c->peer, err);
}

void gcoll_comm_conn_close(struct gcollComm *comm, struct gcoll_conn *c) {
  if (c->ops != NULL) c->ops->conn_close(transport_of(comm, c), c);
}

int gcoll_comm_transport_for_peer(const struct gcollComm *comm, int peer, gcollResult_t *rc) {
  int forced = forced_transport(rc);
  if (*rc != gcollSuccess) return -1;
  /* The view lists this node's ranks (not one range under a cyclic
   * layout or an interleaved group). */
  int same_node = 0;
  for (int i = 0; i < comm->view->local_nranks && !same_node; i++)
    same_node = comm->view->node_ranks[i] == peer;
  /* Send/recv moves data with the host (comm_p2p.c): never GPU-memory FIFOs. */
  if (forced == GCOLL_TRANSPORT_P2P) forced = GCOLL_TRANSPORT_SHM;
  return transport_for(comm, same_node ? GCOLL_EDGE_SHM : GCOLL_EDGE_NET, forced);
}

/* ---- the plan's edges, all at init ----------------------------------------- */

/* Whether peer runs on this node: the view lists this node's ranks (not one
 * range under a cyclic layout or an interleaved group). */
static int same_node(const struct gcollComm *comm, int peer) {
  for (int i = 0; i < comm->view->local_nranks; i++)
    if (comm->view->node_ranks[i] == peer) return 1;
  return 0;
}

/* Phase 1: every receive end exists and its address is published. */
static gcollResult_t setup_receivers(struct gcollComm *comm, struct edge *edges, int n,
                                     int forced) {
  for (int i = 0; i < n; i++) {
    struct edge *e = &edges[i];
    if (e->is_send) continue;
    int k = transport_for(comm, e->cls, forced);
    struct gcoll_conn *c = &comm->conns[comm->nconns];
    gcollResult_t rc = gcoll_comm_conn_recv_setup(comm, e->peer, e->id, k, c);
    if (rc != gcollSuccess) return rc;
    comm->nconns++;
    *e->fifo = c->fifo;
    gcoll_log_info(comm, "recv from rank %d (%s edge, id %u) over %s", e->peer,
                   gcoll_edge_name(e->cls), e->id, transport_ops[k]->name);
  }
  return gcollSuccess;
}

/* Phase 2: every send end attaches to its receiver's published address. */
static gcollResult_t connect_senders(struct gcollComm *comm, struct edge *edges, int n) {
  char err[512], key[96];
  unsigned char value[1 + GCOLL_CONN_ADDR_MAX];
  uint64_t deadline = gcoll_bootstrap_deadline(comm->bs);
  for (int i = 0; i < n; i++) {
    struct edge *e = &edges[i];
    if (!e->is_send) continue;
    size_t len = 0;
    gcoll_comm_conn_key(key, sizeof(key), comm->rank, e->peer, e->id);
    if (gcoll_bootstrap_get_from(comm->bs, e->peer, key, value, sizeof(value), &len, deadline,
                                 err, sizeof(err)) != 0)
      return gcoll_fail(gcollRemoteError, "address of rank %d: %s", e->peer, err);
    struct gcoll_conn *c = &comm->conns[comm->nconns];
    gcollResult_t rc = gcoll_comm_conn_attach(comm, e->peer, e->id, value, len, c, deadline);
    if (rc != gcollSuccess) return rc;
    comm->nconns++;
    *e->fifo = c->fifo;
    gcoll_log_info(comm, "send to rank %d (%s edge, id %u) over %s", e->peer,
                   gcoll_edge_name(e->cls), e->id, c->ops->name);
  }
  return gcollSuccess;
}

/* Phase 3: receive ends whose transport needs the sender first (TCP accept). */
static gcollResult_t complete_receivers(struct gcollComm *comm) {
  uint64_t deadline = gcoll_bootstrap_deadline(comm->bs);
  for (int i = 0; i < comm->nconns; i++) {
    struct gcoll_conn *c = &comm->conns[i];
    if (c->is_send) continue;
    gcollResult_t rc = gcoll_comm_conn_recv_complete(comm, c, deadline);
    if (rc != gcollSuccess) return rc;
  }
  return gcollSuccess;
}

gcollResult_t gcoll_comm_connect(struct gcollComm *comm) {
  struct edge *edges = calloc(GCOLL_COMM_MAX_CONNS, sizeof(*edges));
  if (edges == NULL) return gcoll_fail(gcollSystemError, "out of memory");
  int n = 0, forced;
  gcollResult_t rc;
  forced = forced_transport(&rc);
  for (int c = 0; rc == gcollSuccess && c < comm->nchannels; c++)
    if (channel_edges(comm, c, edges, &n) != 0)
      rc = gcoll_fail(gcollInternalError, "more than %d connections", GCOLL_COMM_MAX_CONNS);
  char err[512];
  int has_gpu_edges = 0, across = 0;
  for (int i = 0; i < n; i++) {
    if (edges[i].cls == GCOLL_EDGE_P2P && !same_node(comm, edges[i].peer)) {
      edges[i].cls = GCOLL_EDGE_NET;
      across++;
    }
    has_gpu_edges |= edges[i].cls == GCOLL_EDGE_P2P;
  }
  if (across > 0)
    gcoll_log_info(comm, "%d edge end%s to other nodes of NVLink domain %d use the network: this "
                   "runtime's p2p reaches GPUs of its own node only", across,
                   across == 1 ? "" : "s", comm->view->nvl_domain);
  if (rc == gcollSuccess) rc = start_transports(comm, forced, has_gpu_edges);
  if (rc == gcollSuccess) rc = setup_receivers(comm, edges, n, forced);
  if (rc == gcollSuccess &&
      gcoll_bootstrap_fence(comm->bs, gcoll_bootstrap_deadline(comm->bs), err, sizeof(err)) != 0)
    rc = gcoll_fail(gcollRemoteError, "%s", err);
  if (rc == gcollSuccess) rc = connect_senders(comm, edges, n);
  if (rc == gcollSuccess) rc = complete_receivers(comm);
  free(edges);
  return rc;
}

void gcoll_comm_disconnect(struct gcollComm *comm) {
  /* The proxy goes first: it must stop touching connections before they are
   * closed under it. */
  if (comm->proxy != NULL) gcoll_proxy_destroy(comm->proxy);
  comm->proxy = NULL;
  for (int i = comm->nconns - 1; i >= 0; i--) {
    struct gcoll_conn *c = &comm->conns[i];
    c->ops->conn_close(transport_of(comm, c), c);
  }
  comm->nconns = 0;
  for (int k = 0; k < GCOLL_NTRANSPORTS; k++)
    if (comm->transport[k] != NULL) transport_ops[k]->fini(comm->transport[k]);
}
