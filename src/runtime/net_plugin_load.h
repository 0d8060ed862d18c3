/* Loading an NCCL net plugin by NCCL's rules, once per process, and
 * calling it through one interface whatever ABI version it exports
 * (net_plugin_abi.h).
 *
 * Which library (GCOLL_NET_PLUGIN, else NCCL_NET_PLUGIN from the
 * environment or NCCL's configuration files, runtime/settings.h):
 *   unset or empty   libnccl-net.so, on the library path;
 *   "none"           no plugin;
 *   NAME             NAME itself (a path, or a file on the library path);
 *                    then, when NAME has no '/' and is not already
 *                    "lib....so", libnccl-net-NAME.so (so "aws-ofi" loads
 *                    libnccl-net-aws-ofi.so).
 * In the library, ncclNetPlugin_v10, then _v9, then _v8; a library that
 * exports only an older version is refused as too old. The plugin's init
 * runs once; a plugin that fails it, or has no device, is not used.
 *
 * A plugin that cannot be used is never an error here: the caller falls
 * back to its own devices (as NCCL does), unless the user named the
 * plugin's network (GCOLL_NET / NCCL_NET). */
#ifndef GCOLL_RUNTIME_NET_PLUGIN_LOAD_H
#define GCOLL_RUNTIME_NET_PLUGIN_LOAD_H

#include <stddef.h>

#include "runtime/net_plugin_abi.h"

struct gcoll_ncclnet {
  const char *name;   /* the plugin's network name ("AWS Libfabric", ...) */
  char lib[256];      /* the library that opened, as named */
  int version;        /* 8, 9 or 10 */
  int ndev;
  union {
    const struct gcoll_nccl_net_v8 *v8;
    const struct gcoll_nccl_net_v9 *v9;
    const struct gcoll_nccl_net_v10 *v10;
  } u;
};

/* What gcoll uses of a device's properties. */
struct gcoll_ncclnet_props {
  char name[64];
  char pci_path[256];
  int ptr_support;    /* GCOLL_NCCL_PTR_* */
  int speed;          /* Mbps */
  int max_comms;
};

/* The process's plugin: 0 with *out; 1 when there is none to use, with why
 * (one line); *named tells whether the user named a library (then a
 * failure deserves a warning, not only an INFO line). */
int gcoll_ncclnet_get(const struct gcoll_ncclnet **out, int *named, char *why, size_t whylen);

/* The calls, each returning the plugin's result (0 success). Sizes are
 * size_t; v8's int sizes are checked against INT_MAX. */
gcoll_ncclres gcoll_ncclnet_props(const struct gcoll_ncclnet *p, int dev,
                                  struct gcoll_ncclnet_props *out);
gcoll_ncclres gcoll_ncclnet_listen(const struct gcoll_ncclnet *p, int dev, void *handle,
                                   void **listen_comm);
gcoll_ncclres gcoll_ncclnet_connect(const struct gcoll_ncclnet *p, int dev, void *handle,
                                    void **send_comm);
gcoll_ncclres gcoll_ncclnet_accept(const struct gcoll_ncclnet *p, void *listen_comm,
                                   void **recv_comm);
gcoll_ncclres gcoll_ncclnet_reg_mr(const struct gcoll_ncclnet *p, void *comm, void *data,
                                   size_t size, void **mhandle);
gcoll_ncclres gcoll_ncclnet_dereg_mr(const struct gcoll_ncclnet *p, void *comm, void *mhandle);
gcoll_ncclres gcoll_ncclnet_isend(const struct gcoll_ncclnet *p, void *send_comm, void *data,
                                  size_t size, void *mhandle, void **request);
gcoll_ncclres gcoll_ncclnet_irecv(const struct gcoll_ncclnet *p, void *recv_comm, void *data,
                                  size_t size, void *mhandle, void **request);
gcoll_ncclres gcoll_ncclnet_test(const struct gcoll_ncclnet *p, void *request, int *done,
                                 size_t *size);
gcoll_ncclres gcoll_ncclnet_close_send(const struct gcoll_ncclnet *p, void *send_comm);
gcoll_ncclres gcoll_ncclnet_close_recv(const struct gcoll_ncclnet *p, void *recv_comm);
gcoll_ncclres gcoll_ncclnet_close_listen(const struct gcoll_ncclnet *p, void *listen_comm);

#endif
