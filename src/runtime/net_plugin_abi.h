/* NCCL's network plugin ABI, the versions gcoll loads (v8, v9, v10): the
 * structures a plugin library exports as `ncclNetPlugin_v<N>` and the
 * types its functions take, declared here from the ABI (field order, types
 * and sizes are the contract; the names are ours). An ncclResult_t is an
 * int-sized enum whose 0 is success.
 *
 * What changed between the versions gcoll uses:
 *   v8   isend/irecv sizes are int; init(logger).
 *   v9   sizes are size_t; properties gain forceFlush, virtual-device
 *        members and transfer limits; a makeVDevice entry at the end.
 *   v10  init(logger, profiler callback); connect takes a comm config
 *        (traffic class) first; isend/irecv take profiler handles.
 * v11 and later take a per-communicator context in init/listen/connect and
 * are not loaded (yet); v7 and older are refused as too old. */
#ifndef GCOLL_RUNTIME_NET_PLUGIN_ABI_H
#define GCOLL_RUNTIME_NET_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int gcoll_ncclres;          /* ncclResult_t */
#define GCOLL_NCCL_SUCCESS 0
#define GCOLL_NCCL_INTERNAL_ERROR 3

#define GCOLL_NCCL_NET_HANDLE_MAXSIZE 128
#define GCOLL_NCCL_PTR_HOST 0x1
#define GCOLL_NCCL_NET_MAX_REQUESTS 8 /* per comm, the least any version promises */
#define GCOLL_NCCL_NET_DEVICE_HOST 0
#define GCOLL_NCCL_MAX_DEVS_PER_NIC 4
#define GCOLL_NCCL_TRAFFIC_CLASS_UNDEF (-1)

/* Log levels a plugin logs at (ncclDebugLogLevel). */
enum { GCOLL_NCCL_LOG_WARN = 2, GCOLL_NCCL_LOG_INFO = 3, GCOLL_NCCL_LOG_TRACE = 5 };

typedef void (*gcoll_nccl_logger)(int level, unsigned long flags, const char *file, int line,
                                  const char *fmt, ...);
typedef gcoll_ncclres (*gcoll_nccl_profiler_cb)(void **ehandle, int type, void *phandle,
                                                int64_t plugin_id, void *ext);

/* Device offload handle (ncclNetDeviceHandle_v7..v10): gcoll never asks
 * for offload, it passes a pointer to NULL. */
struct gcoll_nccl_dev_handle {
  int type;
  int version;
  void *handle;
  size_t size;
  int needs_proxy_progress;
};

struct gcoll_nccl_props_v8 {
  char *name;
  char *pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int speed;        /* Mbps */
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int net_device_type;
  int net_device_version;
};

struct gcoll_nccl_vprops {
  int ndevs;
  int devs[GCOLL_NCCL_MAX_DEVS_PER_NIC];
};

/* v9 and v10 share this layout. */
struct gcoll_nccl_props_v9 {
  char *name;
  char *pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int net_device_type;
  int net_device_version;
  struct gcoll_nccl_vprops vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
};

struct gcoll_nccl_comm_config {
  int traffic_class;
};

struct gcoll_nccl_net_v8 {
  const char *name;
  gcoll_ncclres (*init)(gcoll_nccl_logger log);
  gcoll_ncclres (*devices)(int *ndev);
  gcoll_ncclres (*get_properties)(int dev, struct gcoll_nccl_props_v8 *props);
  gcoll_ncclres (*listen)(int dev, void *handle, void **listen_comm);
  gcoll_ncclres (*connect)(int dev, void *handle, void **send_comm,
                           struct gcoll_nccl_dev_handle **send_dev_comm);
  gcoll_ncclres (*accept)(void *listen_comm, void **recv_comm,
                          struct gcoll_nccl_dev_handle **recv_dev_comm);
  gcoll_ncclres (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  gcoll_ncclres (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle);
  gcoll_ncclres (*dereg_mr)(void *comm, void *mhandle);
  gcoll_ncclres (*isend)(void *send_comm, void *data, int size, int tag, void *mhandle,
                         void **request);
  gcoll_ncclres (*irecv)(void *recv_comm, int n, void **data, int *sizes, int *tags,
                         void **mhandles, void **request);
  gcoll_ncclres (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                          void **request);
  gcoll_ncclres (*test)(void *request, int *done, int *sizes);
  gcoll_ncclres (*close_send)(void *send_comm);
  gcoll_ncclres (*close_recv)(void *recv_comm);
  gcoll_ncclres (*close_listen)(void *listen_comm);
  gcoll_ncclres (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
  gcoll_ncclres (*irecv_consumed)(void *recv_comm, int n, void *request);
};

struct gcoll_nccl_net_v9 {
  const char *name;
  gcoll_ncclres (*init)(gcoll_nccl_logger log);
  gcoll_ncclres (*devices)(int *ndev);
  gcoll_ncclres (*get_properties)(int dev, struct gcoll_nccl_props_v9 *props);
  gcoll_ncclres (*listen)(int dev, void *handle, void **listen_comm);
  gcoll_ncclres (*connect)(int dev, void *handle, void **send_comm,
                           struct gcoll_nccl_dev_handle **send_dev_comm);
  gcoll_ncclres (*accept)(void *listen_comm, void **recv_comm,
                          struct gcoll_nccl_dev_handle **recv_dev_comm);
  gcoll_ncclres (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  gcoll_ncclres (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle);
  gcoll_ncclres (*dereg_mr)(void *comm, void *mhandle);
  gcoll_ncclres (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                         void **request);
  gcoll_ncclres (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                         void **mhandles, void **request);
  gcoll_ncclres (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                          void **request);
  gcoll_ncclres (*test)(void *request, int *done, int *sizes);
  gcoll_ncclres (*close_send)(void *send_comm);
  gcoll_ncclres (*close_recv)(void *recv_comm);
  gcoll_ncclres (*close_listen)(void *listen_comm);
  gcoll_ncclres (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
  gcoll_ncclres (*irecv_consumed)(void *recv_comm, int n, void *request);
  gcoll_ncclres (*make_vdevice)(int *d, struct gcoll_nccl_vprops *props);
};

struct gcoll_nccl_net_v10 {
  const char *name;
  gcoll_ncclres (*init)(gcoll_nccl_logger log, gcoll_nccl_profiler_cb prof);
  gcoll_ncclres (*devices)(int *ndev);
  gcoll_ncclres (*get_properties)(int dev, struct gcoll_nccl_props_v9 *props);
  gcoll_ncclres (*listen)(int dev, void *handle, void **listen_comm);
  gcoll_ncclres (*connect)(int dev, struct gcoll_nccl_comm_config *config, void *handle,
                           void **send_comm, struct gcoll_nccl_dev_handle **send_dev_comm);
  gcoll_ncclres (*accept)(void *listen_comm, void **recv_comm,
                          struct gcoll_nccl_dev_handle **recv_dev_comm);
  gcoll_ncclres (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  gcoll_ncclres (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle);
  gcoll_ncclres (*dereg_mr)(void *comm, void *mhandle);
  gcoll_ncclres (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                         void *phandle, void **request);
  gcoll_ncclres (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                         void **mhandles, void **phandles, void **request);
  gcoll_ncclres (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                          void **request);
  gcoll_ncclres (*test)(void *request, int *done, int *sizes);
  gcoll_ncclres (*close_send)(void *send_comm);
  gcoll_ncclres (*close_recv)(void *recv_comm);
  gcoll_ncclres (*close_listen)(void *listen_comm);
  gcoll_ncclres (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
  gcoll_ncclres (*irecv_consumed)(void *recv_comm, int n, void *request);
  gcoll_ncclres (*make_vdevice)(int *d, struct gcoll_nccl_vprops *props);
};

/* The layouts on LP64, as NCCL's ext-net headers give them (compared with
 * offsetof over those headers when this file was written). */
#if defined(__LP64__)
#include <stddef.h>
_Static_assert(sizeof(struct gcoll_nccl_props_v8) == 64, "ncclNetProperties_v8_t");
_Static_assert(offsetof(struct gcoll_nccl_props_v9, vprops) == 64, "ncclNetProperties_v9_t");
_Static_assert(sizeof(struct gcoll_nccl_props_v9) == 104, "ncclNetProperties_v9/v10_t");
_Static_assert(offsetof(struct gcoll_nccl_net_v8, isend) == 80, "ncclNet_v8_t");
_Static_assert(sizeof(struct gcoll_nccl_net_v8) == 152, "ncclNet_v8_t");
_Static_assert(offsetof(struct gcoll_nccl_net_v9, make_vdevice) == 152, "ncclNet_v9_t");
_Static_assert(offsetof(struct gcoll_nccl_net_v10, test) == 104, "ncclNet_v10_t");
_Static_assert(sizeof(struct gcoll_nccl_net_v10) == 160, "ncclNet_v10_t");
_Static_assert(sizeof(struct gcoll_nccl_dev_handle) == 32, "ncclNetDeviceHandle_v8_t");
#endif

#endif
