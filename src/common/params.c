/* The GCOLL_* variables (params.h). Keep sorted by name: gcoll_param_find
 * searches it in halves, and test_params.sh checks the order. */
#include "common/params.h"

#include <stdlib.h>
#include <string.h>

#define USER GCOLL_PARAM_USER
#define LAUNCHER GCOLL_PARAM_LAUNCHER
#define TEST GCOLL_PARAM_TEST

static const struct gcoll_param gcoll_params[] = {
    {"GCOLL_ALGO", USER, "ring|tree", "the plan's tuning table", "NCCL_ALGO",
     "force the algorithm of every collective (tree: allreduce only)"},
    {"GCOLL_BOOTSTRAP", USER, "tcp|pmi2", "gcollrun's store when GCOLL_KVS_ADDR is set, else PMI2",
     NULL, "force how ranks find each other"},
    {"GCOLL_CPU_BIND", USER, "cores|none", "none (gcollrun sets cores when it binds)", NULL,
     "cores: this rank's CPUs (its affinity) are its own, not shared with the host's other ranks"},
    {"GCOLL_CUDAEMU_BLOCK_THREADS", TEST, "N", "4", NULL,
     "emulated GPU: host threads per kernel block"},
    {"GCOLL_CUDAEMU_BUSIDS", TEST, "busid,...", "one per device", NULL,
     "emulated GPU: the PCI bus ids its devices report"},
    {"GCOLL_CUDAEMU_DEVICES", TEST, "N", "1", NULL,
     "emulated GPU: devices it reports (0: cuInit says no device)"},
    {"GCOLL_CUDA_DRIVER", USER, "path", "libcuda.so.1", NULL,
     "CUDA driver library to load (the emulated GPU in tests)"},
    {"GCOLL_DEBUG", USER, "INFO|TRACE", "quiet", "NCCL_DEBUG",
     "log init decisions and init timings (TRACE: each collective too) on stderr"},
    {"GCOLL_ENDPOINTS", LAUNCHER, "path", "none (endpoints through the store)", NULL,
     "the endpoints file of gcollrun or srun --gcoll=plan: where every rank of the plan listens"},
    {"GCOLL_FABRIC_FILE", USER, "path", "the plugstack's fabric=", NULL,
     "switch fabric (Slurm topology.conf syntax) a SPANK step's plan orders its nodes by"},
    {"GCOLL_HOST_ISA", USER, "auto|avx512|avx2|baseline", "auto (the CPU's best)", NULL,
     "vector instructions of host reductions from 256 B, capped at what the CPU has"},
    {"GCOLL_HOST_ONESHOT", USER, "0|1", "1", NULL,
     "one-host small allreduces exchange vectors on a shared board, not the ring (same on all ranks)"},
    {"GCOLL_IB_DISABLE", USER, "0|1", "0", "NCCL_IB_DISABLE, NCCL_NET",
     "do not start net/ib; cross-node edges use net/socket"},
    {"GCOLL_IB_GID_INDEX", USER, "0..255", "the first RoCE v2 GID mapping an IPv4 address",
     "NCCL_IB_GID_INDEX", "RoCE GID index of net/ib"},
    {"GCOLL_IB_HCA", USER, "dev[:port]", "the first device with an ACTIVE port", "NCCL_IB_HCA",
     "RDMA device and port of net/ib"},
    {"GCOLL_JOB_KEY", LAUNCHER, "hex", "derived from the bootstrap", NULL,
     "the job's secret: names its shared memory, keys its connection hellos"},
    {"GCOLL_KVS_ADDR", LAUNCHER, "host:port", "none (then PMI2)", NULL,
     "gcollrun's key-value store the ranks bootstrap through"},
    {"GCOLL_LISTEN_FD", LAUNCHER, "fd", "none", NULL,
     "the listening socket gcollrun (or the SPANK plugin) bound for this rank before it started"},
    {"GCOLL_LOCAL_RANK", LAUNCHER, "N", "0", NULL, "the rank's index on its node"},
    {"GCOLL_MAX_GPU_CHANNELS", USER, "N", "the plan's channel count",
     "NCCL_MAX_NCHANNELS, NCCL_MAX_CTAS", "most channels (GPU blocks) of a device collective"},
    {"GCOLL_MAX_NCHANNELS", USER, "N", "host: usable CPUs / ranks on the host; device: the plan's",
     NULL, "most channels one collective runs"},
    {"GCOLL_MIN_GPU_CHANNELS", USER, "N", "the tuning table's", "NCCL_MIN_NCHANNELS, NCCL_MIN_CTAS",
     "fewest channels (GPU blocks) of a device collective"},
    {"GCOLL_NET", USER, "Socket|IB|plugin network", "a loaded plugin, else IB, else Socket",
     "NCCL_NET", "the network between nodes"},
    {"GCOLL_NET_PLUGIN", USER, "NAME|path|none", "libnccl-net.so if it loads", "NCCL_NET_PLUGIN",
     "NCCL net plugin (ncclNet v8-v10) to load"},
    {"GCOLL_NODE", LAUNCHER, "N", "none (a real host)", NULL,
     "gcollrun's virtual node of the rank (several per host in tests)"},
    {"GCOLL_NODES", LAUNCHER, "N", "1", NULL, "gcollrun's virtual node count"},
    {"GCOLL_NRANKS", LAUNCHER, "N", "none", NULL, "the job's rank count"},
    {"GCOLL_P2P_DISABLE", USER, "0|1", "0", "NCCL_P2P_DISABLE, NCCL_P2P_LEVEL",
     "GPU-to-GPU edges of a node use shm instead of p2p (CUDA IPC)"},
    {"GCOLL_P2P_KERNEL", USER, "0|1", "1", NULL,
     "0: stage device send/recv through the calling thread instead of the GPU"},
    {"GCOLL_PERF_INJECT_ERROR", TEST, "rank", "none", NULL,
     "gcoll-perf: this rank corrupts its results, to test the #wrong column"},
    {"GCOLL_PLAN", LAUNCHER, "path", "none (the ranks plan the job)", NULL,
     "the job's plan file"},
    {"GCOLL_PLAN_DIR", USER, "directory", "$TMPDIR or /tmp", NULL,
     "where plans computed by the ranks themselves are written"},
    {"GCOLL_PLAN_SAVE", USER, "path", "none", NULL,
     "rank 0 also writes a plan the ranks computed themselves here"},
    {"GCOLL_PROTO", USER, "simple|ll", "the plan's tuning table", "NCCL_PROTO",
     "force the protocol of every collective"},
    {"GCOLL_RANK", LAUNCHER, "N", "none (PMI2's under srun --mpi=pmi2)", NULL,
     "the process's rank in the job"},
    {"GCOLL_SINGLE_COPY_BYTES", USER, "bytes", "131072", NULL,
     "one-host allgather/broadcast from this size read peers' buffers (0: never; same on all ranks)"},
    {"GCOLL_SINGLE_COPY_PAGES", USER, "huge|any", "huge", NULL,
     "read peers' buffers only in huge pages, or in any pages (kernels before 6.7 cannot tell)"},
    {"GCOLL_SINGLE_COPY_TUNE", USER, "0|1", "1", NULL,
     "1: time the ring and single copy on each size class's first calls and keep the faster; "
     "0: fixed rules (same on all ranks)"},
    {"GCOLL_SLOT_BYTES", USER, "bytes", "131072", "NCCL_BUFFSIZE",
     "bytes per FIFO slot (8 slots per FIFO, allocated once at init)"},
    {"GCOLL_SOCKET_IFADDR", USER, "address|interface", "the first up, non-loopback, non-bridge one",
     NULL, "where the net transports' listeners and PMI2 rank 0's store listen"},
    {"GCOLL_SOCKET_IFNAME", USER, "prefix list", "as GCOLL_SOCKET_IFADDR's default",
     "NCCL_SOCKET_IFNAME", "interfaces the listeners may use, as NCCL_SOCKET_IFNAME"},
    {"GCOLL_TEST_ONESHOT_LATE_MS", TEST, "ms", "0", NULL,
     "ranks but 0 open the one-shot board this much later, to test that rank 0 waits for them"},
    {"GCOLL_TIMEOUT", USER, "seconds", "60", NULL,
     "the longest any wait may last before the call fails"},
    {"GCOLL_TOPO", USER, "name|file|auto", "cpu-only", NULL,
     "node topology of plans computed without a launcher"},
    {"GCOLL_TOPO_DIR", USER, "directory", "the installed topologies", NULL,
     "where topology names (dgx-h100, ...) are looked up first"},
    {"GCOLL_TOPO_FILE", USER, "path", "none", "NCCL_TOPO_FILE",
     "topology file (NCCL XML or gcoll YAML) merged with detection"},
    {"GCOLL_TRANSPORT", USER, "shm|net/socket|net/ib|net/plugin|p2p", "the plan's edge class",
     NULL, "force one transport for every edge"},
    {"GCOLL_TUNING", USER, "key=value,...", "the built-in model", NULL,
     "calibrate the tuning model (set alike on every rank)"},
};

static const size_t gcoll_nparams = sizeof(gcoll_params) / sizeof(gcoll_params[0]);

const struct gcoll_param *gcoll_param_table(size_t *n) {
  *n = gcoll_nparams;
  return gcoll_params;
}

static int by_name(const void *key, const void *entry) {
  return strcmp((const char *)key, ((const struct gcoll_param *)entry)->name);
}

const struct gcoll_param *gcoll_param_find(const char *name) {
  if (name == NULL) return NULL;
  return bsearch(name, gcoll_params, gcoll_nparams, sizeof(gcoll_params[0]), by_name);
}

const char *gcoll_param_scope_name(enum gcoll_param_scope scope) {
  switch (scope) {
  case GCOLL_PARAM_USER: return "user";
  case GCOLL_PARAM_LAUNCHER: return "launcher";
  case GCOLL_PARAM_TEST: return "test";
  }
  return "?";
}
