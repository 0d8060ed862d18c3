/* Detection of the running node's topology.
 *
 * Sources, each optional: hwloc (sockets, NUMA, the PCI tree), the CUDA
 * driver and NVML loaded at run time (common/driver_libs.h: GPUs and their
 * NVLinks; binaries must run on nodes without a driver), libibverbs (RDMA
 * ports) and getifaddrs (TCP interfaces, used when there is no RDMA port).
 * Whatever is missing degrades to less detail, never to an error.
 *
 * The node's multi-node NVLink domain comes from NVML's fabric info
 * (topo_detect_fabric.c).
 *
 * Facts are gathered first and the topology is built afterwards, in the
 * canonical order the YAML format uses (cpus, pci, gpus, nics, nvswitches),
 * so that the detected topology and its written file hash the same. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "topo.h"

#include <ctype.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/driver_libs.h"

#ifdef HAVE_HWLOC
#include <hwloc.h>
#endif
#ifdef HAVE_VERBS
#include <infiniband/verbs.h>
#endif

/* Defaults when the hardware does not say. PCIe: Gen4 x16 after protocol
 * overhead. SYS: what GPU peer traffic gets across sockets, which is far
 * below the raw UPI/xGMI rate. */
#define DEFAULT_PCI_BW 24.0
#define DEFAULT_SYS_BW 20.0
#define DEFAULT_TCP_GBPS 10.0
#define MAX_CPUS 16
#define NVL_PEER_SWITCH GCOLL_TOPO_MAX_GPUS /* column for the NVSwitch fabric */

struct det_cpu {
  int cores, numa;
};

/* Where a PCI-attached device hangs: parent is a topology device index once
 * known, bw the narrowest PCIe link on the way there. */
struct det_place {
  int parent;
  double bw;
};

struct det_gpu {
  char busid[GCOLL_BUSID_MAX];
  int sms, cc, multicast;
  struct det_place at;
};

struct det_nic {
  char name[GCOLL_NAME_MAX];
  char busid[GCOLL_BUSID_MAX];
  int port;
  double gbps;
  int down;            /* an RDMA port not active at detection */
  double active_gbps;  /* trained below the line rate: the rate it runs at */
  struct det_place at;
};

struct det {
  int ncpu;
  struct det_cpu cpu[MAX_CPUS];
  int ngpu;
  struct det_gpu gpu[GCOLL_TOPO_MAX_GPUS];
  int nnic;
  struct det_nic nic[GCOLL_TOPO_MAX_NODES];
  /* NVLink lanes from GPU i to GPU j, or to the switch fabric. */
  int nvl[GCOLL_TOPO_MAX_GPUS][GCOLL_TOPO_MAX_GPUS + 1];
  double nvl_lane_bw;
};

static void lower(char *s) {
  for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

/* "0000:1B:00.0" (CUDA), "00000000:1b:00.0" (NVML) and sysfs names all
 * compare by their numbers. */
static int parse_busid(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn) {
  return sscanf(s, "%x:%x:%x.%x", dom, bus, dev, fn) == 4 ? 0 : -1;
}

static void format_busid(char *out, unsigned dom, unsigned bus, unsigned dev, unsigned fn) {
  char tmp[48];
  snprintf(tmp, sizeof(tmp), "%04x:%02x:%02x.%x", dom, bus & 0xff, dev & 0x1f, fn & 7);
  if (strlen(tmp) < GCOLL_BUSID_MAX) memcpy(out, tmp, strlen(tmp) + 1);
  else out[0] = '\0';
}

/* Normalises any PCI address spelling to the lower-case "dddd:bb:dd.f". */
static void normalise_busid(char *busid) {
  unsigned d, b, v, f;
  if (parse_busid(busid, &d, &b, &v, &f) == 0) format_busid(busid, d, b, v, f);
  else busid[0] = '\0';
}

static int same_busid(const char *a, unsigned dom, unsigned bus, unsigned dev, unsigned fn) {
  unsigned d, b, v, f;
  return a[0] && parse_busid(a, &d, &b, &v, &f) == 0 && d == dom && b == bus && v == dev &&
         f == fn;
}

/* ---- CPUs without hwloc -------------------------------------------------- */

static void detect_cpus_fallback(struct det *dt) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  dt->ncpu = 1;
  dt->cpu[0].cores = n > 0 ? (n > 65536 ? 65536 : (int)n) : 1;
  dt->cpu[0].numa = 0;
}

/* ---- GPUs through the CUDA driver ---------------------------------------- */

/* CUdevice_attribute values from the driver API; stable ABI. */
enum {
  CU_ATTR_SM_COUNT = 16,
  CU_ATTR_CC_MAJOR = 75,
  CU_ATTR_CC_MINOR = 76,
  CU_ATTR_MULTICAST = 132,
};

struct cuda_api {
  int (*init)(unsigned);
  int (*count)(int *);
  int (*get)(int *, int);
  int (*attr)(int *, int, int);
  int (*busid)(char *, int, int);
};

static int cuda_load(struct cuda_api *api) {
  if (gcoll_driver_lib_fn(GCOLL_LIB_CUDA, "cuInit", &api->init) != 0 ||
      gcoll_driver_lib_fn(GCOLL_LIB_CUDA, "cuDeviceGetCount", &api->count) != 0 ||
      gcoll_driver_lib_fn(GCOLL_LIB_CUDA, "cuDeviceGet", &api->get) != 0 ||
      gcoll_driver_lib_fn(GCOLL_LIB_CUDA, "cuDeviceGetAttribute", &api->attr) != 0 ||
      gcoll_driver_lib_fn(GCOLL_LIB_CUDA, "cuDeviceGetPCIBusId", &api->busid) != 0)
    return -1;
  return 0;
}

/* gpuN is CUDA device N as this process enumerates it, so that local rank
 * i driving "device i" and the topology agree. */
static void detect_gpus(struct det *dt) {
  struct cuda_api api;
  int n = 0;
  if (cuda_load(&api) || api.init(0) != 0 || api.count(&n) != 0) return;
  for (int i = 0; i < n && dt->ngpu < GCOLL_TOPO_MAX_GPUS; i++) {
    int dev, sms = 0, major = 0, minor = 0, mc = 0;
    char busid[64] = "";
    if (api.get(&dev, i) != 0 || api.attr(&sms, CU_ATTR_SM_COUNT, dev) != 0 ||
        api.attr(&major, CU_ATTR_CC_MAJOR, dev) != 0 ||
        api.attr(&minor, CU_ATTR_CC_MINOR, dev) != 0)
      break; /* later devices would be misnumbered; keep the prefix */
    if (api.attr(&mc, CU_ATTR_MULTICAST, dev) != 0) mc = 0; /* older drivers */
    if (api.busid(busid, (int)sizeof(busid), dev) != 0) busid[0] = '\0';
    struct det_gpu *g = &dt->gpu[dt->ngpu++];
    snprintf(g->busid, sizeof(g->busid), "%.15s", busid);
    lower(g->busid);
    normalise_busid(g->busid);
    g->sms = sms < 1 ? 1 : sms > 4096 ? 4096 : sms;
    g->cc = major * 10 + minor;
    if (g->cc < 10 || g->cc > 255) g->cc = 10;
    g->multicast = mc != 0;
    g->at.parent = -1;
    g->at.bw = DEFAULT_PCI_BW;
  }
}

/* ---- NVLinks through NVML ------------------------------------------------- */

/* nvmlPciInfo_t as NVML lays it out (busIdLegacy first). */
struct nvml_pci {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

#define NVML_MAX_LINKS 18
#define NVML_REMOTE_IBMNPU 1

struct nvml_api {
  int (*init)(void);
  int (*shutdown)(void);
  int (*by_busid)(const char *, void **);
  int (*link_state)(void *, unsigned, int *);
  int (*remote_pci)(void *, unsigned, struct nvml_pci *);
  int (*remote_type)(void *, unsigned, int *); /* optional */
};

static int nvml_load(struct nvml_api *api) {
  const enum gcoll_driver_lib nvml = GCOLL_LIB_NVML;
  if (gcoll_driver_lib_fn(nvml, "nvmlInit_v2", &api->init) != 0 ||
      gcoll_driver_lib_fn(nvml, "nvmlShutdown", &api->shutdown) != 0 ||
      gcoll_driver_lib_fn(nvml, "nvmlDeviceGetHandleByPciBusId_v2", &api->by_busid) != 0 ||
      gcoll_driver_lib_fn(nvml, "nvmlDeviceGetNvLinkState", &api->link_state) != 0 ||
      gcoll_driver_lib_fn(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &api->remote_pci) != 0)
    return -1;
  /* Optional: older NVML lacks it. */
  api->remote_type = NULL;
  gcoll_driver_lib_fn(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", &api->remote_type);
  return 0;
}

/* Per-lane, per-direction NVLink bandwidth by GPU generation. */
static double nvlink_lane_bw(int cc) {
  if (cc >= 100) return 50.0; /* NVLink5 */
  if (cc >= 70) return 25.0;  /* NVLink2..4 */
  return 20.0;                /* NVLink1 */
}

static int gpu_by_busid(const struct det *dt, unsigned dom, unsigned bus, unsigned dev) {
  for (int i = 0; i < dt->ngpu; i++)
    if (same_busid(dt->gpu[i].busid, dom, bus, dev, 0)) return i;
  return -1;
}

static void detect_nvlinks(struct det *dt) {
  struct nvml_api api;
  if (dt->ngpu == 0) return;
  if (nvml_load(&api) || api.init() != 0) return;
  dt->nvl_lane_bw = nvlink_lane_bw(dt->gpu[0].cc);
  for (int g = 0; g < dt->ngpu; g++) {
    void *h;
    if (dt->gpu[g].busid[0] == '\0' || api.by_busid(dt->gpu[g].busid, &h) != 0) continue;
    for (unsigned l = 0; l < NVML_MAX_LINKS; l++) {
      int active = 0, rtype = -1;
      struct nvml_pci pci;
      memset(&pci, 0, sizeof(pci));
      if (api.link_state(h, l, &active) != 0 || !active) continue;
      if (api.remote_pci(h, l, &pci) != 0) continue;
      /* NVLink to a POWER CPU is not a GPU peer or a switch: skip it. */
      if (api.remote_type && api.remote_type(h, l, &rtype) == 0 && rtype == NVML_REMOTE_IBMNPU)
        continue;
      int peer = gpu_by_busid(dt, pci.domain, pci.bus, pci.device);
      if (peer == g) continue;
      dt->nvl[g][peer >= 0 ? peer : NVL_PEER_SWITCH]++;
    }
  }
  api.shutdown();
}

/* ---- NICs: RDMA ports, else TCP interfaces -------------------------------- */

static void sysfs_busid(const char *device_link, char *out) {
  char real[PATH_MAX];
  out[0] = '\0';
  if (realpath(device_link, real) == NULL) return;
  const char *base = strrchr(real, '/');
  base = base ? base + 1 : real;
  unsigned d, b, v, f;
  if (parse_busid(base, &d, &b, &v, &f) == 0) format_busid(out, d, b, v, f);
}

static struct det_nic *new_nic(struct det *dt) {
  if (dt->nnic >= GCOLL_TOPO_MAX_NODES) return NULL;
  struct det_nic *n = &dt->nic[dt->nnic++];
  memset(n, 0, sizeof(*n));
  n->port = 1;
  n->at.parent = -1;
  n->at.bw = DEFAULT_PCI_BW;
  return n;
}

#ifdef HAVE_VERBS
/* ibv_port_attr speed codes to Gb/s per lane, width codes to lanes. */
static double ib_lane_gbps(unsigned speed) {
  switch (speed) {
    case 1: return 2.5;
    case 2: return 5.0;
    case 4: case 8: return 10.0;
    case 16: return 14.0;
    case 32: return 25.0;
    case 64: return 50.0;
    case 128: return 100.0;
    default: return 0.0;
  }
}

static int ib_width(unsigned width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

static void detect_verbs_device(struct det *dt, struct ibv_device *dev) {
  struct ibv_context *ctx = ibv_open_device(dev);
  struct ibv_device_attr attr;
  if (ctx == NULL) return;
  if (ibv_query_device(ctx, &attr) == 0) {
    const char *name = ibv_get_device_name(dev);
    char link[PATH_MAX];
    snprintf(link, sizeof(link), "%s/device", dev->ibdev_path);
    for (int port = 1; port <= attr.phys_port_cnt && port <= 255; port++) {
      struct ibv_port_attr pa;
      /* A port that is not active stays, marked down, so the plan can say
       * it was left out (gcoll_port_health). */
      if (ibv_query_port(ctx, (uint8_t)port, &pa) != 0) continue;
      struct det_nic *n = new_nic(dt);
      if (n == NULL) break;
      /* Port 1 keeps the device name users put in NCCL_IB_HCA; other
       * ports get NCCL's "name:port" spelling. */
      if (port == 1) snprintf(n->name, sizeof(n->name), "%.31s", name ? name : "ib");
      else snprintf(n->name, sizeof(n->name), "%.27s:%u", name ? name : "ib",
                    (unsigned)port & 0xffu);
      n->port = port;
      n->gbps = ib_lane_gbps(pa.active_speed) * ib_width(pa.active_width);
      n->down = pa.state != IBV_PORT_ACTIVE;
      sysfs_busid(link, n->busid);
    }
  }
  ibv_close_device(ctx);
}

static void detect_verbs(struct det *dt) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == NULL) return;
  for (int i = 0; i < n; i++) detect_verbs_device(dt, list[i]);
  ibv_free_device_list(list);
  int m = dt->nnic;
  double *rate = malloc(((size_t)m + 1) * 3 * sizeof(double));
  int *active = malloc(((size_t)m + 1) * sizeof(int));
  if (rate != NULL && active != NULL) {
    for (int i = 0; i < m; i++) {
      rate[i] = dt->nic[i].gbps;
      active[i] = !dt->nic[i].down;
    }
    gcoll_port_health(rate, active, m, rate + m, rate + 2 * m);
    for (int i = 0; i < m; i++) {
      dt->nic[i].gbps = rate[m + i];
      dt->nic[i].active_gbps = rate[2 * m + i];
    }
  } else {
    for (int i = 0; i < m; i++)
      if (!(dt->nic[i].gbps > 0)) dt->nic[i].gbps = 100.0;
  }
  free(rate);
  free(active);
}
#endif

static int valid_nic_name(const char *s) {
  if (s[0] == '\0' || strlen(s) >= GCOLL_NAME_MAX || !isalnum((unsigned char)s[0])) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("_-.:", *s)) return 0;
  return 1;
}

static double tcp_speed_gbps(const char *ifname) {
  char path[PATH_MAX];
  long mbps = -1;
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
  FILE *f = fopen(path, "r");
  if (f != NULL) {
    if (fscanf(f, "%ld", &mbps) != 1) mbps = -1;
    fclose(f);
  }
  /* Virtual NICs report -1 or nothing; 100 Tb/s is not a real port. */
  return mbps > 0 && mbps <= 100000000 ? (double)mbps / 1000.0 : DEFAULT_TCP_GBPS;
}

static void detect_tcp(struct det *dt) {
  struct ifaddrs *ifs, *ifa;
  if (getifaddrs(&ifs) != 0) return;
  for (ifa = ifs; ifa != NULL; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || ifa->ifa_name == NULL) continue;
    if (ifa->ifa_addr->sa_family != AF_INET && ifa->ifa_addr->sa_family != AF_INET6) continue;
    if (!(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK)) continue;
    if (!valid_nic_name(ifa->ifa_name)) continue;
    int seen = 0;
    for (int i = 0; i < dt->nnic && !seen; i++) seen = strcmp(dt->nic[i].name, ifa->ifa_name) == 0;
    if (seen) continue;
    struct det_nic *n = new_nic(dt);
    if (n == NULL) break;
    snprintf(n->name, sizeof(n->name), "%s", ifa->ifa_name);
    n->gbps = tcp_speed_gbps(ifa->ifa_name);
    char link[PATH_MAX];
    snprintf(link, sizeof(link), "/sys/class/net/%s/device", ifa->ifa_name);
    sysfs_busid(link, n->busid);
  }
  freeifaddrs(ifs);
}

static void detect_nics(struct det *dt) {
#ifdef HAVE_VERBS
  detect_verbs(dt);
#endif
  /* Without an active RDMA port the network is TCP; ports that are down
   * stay listed, so the plan says why it does not use them. */
  int active = 0;
  for (int i = 0; i < dt->nnic; i++) active += !dt->nic[i].down;
  if (active == 0) detect_tcp(dt);
}

/* ---- hwloc: sockets and the PCI tree ------------------------------------- */

#ifdef HAVE_HWLOC
static void detect_cpus_hwloc(hwloc_topology_t h, struct det *dt) {
  int npkg = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PACKAGE);
  if (npkg <= 0) {
    int cores = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE);
    detect_cpus_fallback(dt);
    if (cores > 0) dt->cpu[0].cores = cores;
    return;
  }
  dt->ncpu = npkg < MAX_CPUS ? npkg : MAX_CPUS;
  for (int i = 0; i < dt->ncpu; i++) {
    hwloc_obj_t pkg = hwloc_get_obj_by_type(h, HWLOC_OBJ_PACKAGE, (unsigned)i);
    int cores = hwloc_get_nbobjs_inside_cpuset_by_type(h, pkg->cpuset, HWLOC_OBJ_CORE);
    dt->cpu[i].cores = cores < 1 ? 1 : cores > 65536 ? 65536 : cores;
    dt->cpu[i].numa = -1;
    hwloc_obj_t numa = NULL;
    while ((numa = hwloc_get_next_obj_by_type(h, HWLOC_OBJ_NUMANODE, numa)) != NULL)
      if (hwloc_bitmap_intersects(numa->cpuset, pkg->cpuset)) {
        dt->cpu[i].numa = numa->os_index <= 4095 ? (int)numa->os_index : -1;
        break;
      }
  }
}

/* The socket whose cores are closest to an I/O object. */
static int hwloc_cpu_of(hwloc_topology_t h, const struct det *dt, hwloc_obj_t io) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h, io);
  for (int i = 0; anc && anc->cpuset && i < dt->ncpu; i++) {
    hwloc_obj_t pkg = hwloc_get_obj_by_type(h, HWLOC_OBJ_PACKAGE, (unsigned)i);
    if (pkg && hwloc_bitmap_isincluded(anc->cpuset, pkg->cpuset)) return i;
  }
  return 0;
}

/* PCIe link bandwidth hwloc reports for an object (GB/s), 0 if unknown. */
static double hwloc_link_bw(hwloc_obj_t o) {
  float s = 0;
  if (o->type == HWLOC_OBJ_PCI_DEVICE) s = o->attr->pcidev.linkspeed;
  else if (o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
    s = o->attr->bridge.upstream.pci.linkspeed;
  return s > 0 ? (double)s : 0.0;
}

static double narrower(double bw, double link) {
  return link > 0 && link < bw ? link : bw;
}

/* The GPU or NIC slot a PCI function belongs to, or NULL. */
static struct det_place *relevant_place(struct det *dt, hwloc_obj_t o) {
  if (o->type != HWLOC_OBJ_PCI_DEVICE) return NULL;
  const struct hwloc_pcidev_attr_s *p = &o->attr->pcidev;
  for (int i = 0; i < dt->ngpu; i++)
    if (same_busid(dt->gpu[i].busid, p->domain, p->bus, p->dev, p->func)) return &dt->gpu[i].at;
  for (int i = 0; i < dt->nnic; i++)
    if (same_busid(dt->nic[i].busid, p->domain, p->bus, p->dev, p->func)) return &dt->nic[i].at;
  return NULL;
}

static int count_relevant(struct det *dt, hwloc_obj_t o) {
  int n = relevant_place(dt, o) != NULL;
  for (hwloc_obj_t c = o->io_first_child; c != NULL; c = c->next_sibling)
    n += count_relevant(dt, c);
  return n;
}

/* Walks a PCI subtree. A bridge becomes a pci switch device only where
 * traffic can fan out (two or more children lead to GPUs or NICs); root
 * ports and single-device downstream ports collapse into their parent,
 * their link speed folded into the narrowest-link bandwidth. */
static int walk_pci(struct gcoll_topo *t, struct det *dt, hwloc_obj_t o, int parent, double bw,
                    int *nsw, char *err, size_t errlen) {
  struct det_place *pl = relevant_place(dt, o);
  if (pl != NULL) {
    pl->parent = parent;
    pl->bw = narrower(bw, hwloc_link_bw(o));
  }
  int branches = 0;
  for (hwloc_obj_t c = o->io_first_child; c != NULL; c = c->next_sibling)
    branches += count_relevant(dt, c) > 0;
  if (branches == 0) return 0;
  int is_pci_bridge = o->type == HWLOC_OBJ_BRIDGE &&
                      o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
  double below = narrower(bw, hwloc_link_bw(o));
  if (is_pci_bridge && branches >= 2) {
    char name[GCOLL_NAME_MAX];
    snprintf(name, sizeof(name), "sw%d", *nsw);
    int idx = gcoll_topo_add_dev(t, GCOLL_DEV_PCI, name, parent, err, errlen);
    if (idx < 0) return -1;
    (*nsw)++;
    const struct hwloc_pcidev_attr_s *p = &o->attr->bridge.upstream.pci;
    format_busid(t->dev[idx].busid, p->domain, p->bus, p->dev, p->func);
    if (gcoll_topo_add_link(t, parent, idx, GCOLL_LINK_PCI, 1, below > 1e5 ? DEFAULT_PCI_BW : below,
                            err, errlen))
      return -1;
    parent = idx;
    below = 1e9;
  }
  for (hwloc_obj_t c = o->io_first_child; c != NULL; c = c->next_sibling)
    if (walk_pci(t, dt, c, parent, below, nsw, err, errlen)) return -1;
  return 0;
}

static int add_pci_switches_hwloc(hwloc_topology_t h, struct gcoll_topo *t, struct det *dt,
                                  char *err, size_t errlen) {
  int nsw = 0;
  hwloc_obj_t br = NULL;
  while ((br = hwloc_get_next_bridge(h, br)) != NULL) {
    if (br->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_HOST) continue;
    int cpu = t->cpu[hwloc_cpu_of(h, dt, br)];
    if (walk_pci(t, dt, br, cpu, 1e9, &nsw, err, errlen)) return -1;
  }
  return 0;
}
#endif

/* ---- building the topology ------------------------------------------------ */

static int add_cpus(struct gcoll_topo *t, const struct det *dt, char *err, size_t errlen) {
  for (int i = 0; i < dt->ncpu; i++) {
    char name[GCOLL_NAME_MAX];
    snprintf(name, sizeof(name), "cpu%d", i);
    int idx = gcoll_topo_add_dev(t, GCOLL_DEV_CPU, name, -1, err, errlen);
    if (idx < 0) return -1;
    t->dev[idx].u.cpu.cores = dt->cpu[i].cores;
    t->dev[idx].u.cpu.numa = dt->cpu[i].numa;
  }
  /* Every socket reaches every other one directly (UPI/xGMI full mesh). */
  for (int i = 0; i < dt->ncpu; i++)
    for (int j = i + 1; j < dt->ncpu; j++)
      if (gcoll_topo_add_link(t, t->cpu[i], t->cpu[j], GCOLL_LINK_SYS, 1, DEFAULT_SYS_BW, err,
                              errlen))
        return -1;
  return 0;
}

/* A device hwloc did not place (no hwloc, or no PCI address) hangs off the
 * first socket. */
static int add_pci_leaf(struct gcoll_topo *t, enum gcoll_dev_type type, const char *name,
                        const char *busid, const struct det_place *at, char *err, size_t errlen) {
  int parent = at->parent >= 0 ? at->parent : t->cpu[0];
  double bw = at->bw > 0 && at->bw <= 1e5 ? at->bw : DEFAULT_PCI_BW;
  int idx = gcoll_topo_add_dev(t, type, name, parent, err, errlen);
  if (idx < 0) return -1;
  snprintf(t->dev[idx].busid, sizeof(t->dev[idx].busid), "%s", busid);
  if (gcoll_topo_add_link(t, parent, idx, GCOLL_LINK_PCI, 1, bw, err, errlen)) return -1;
  return idx;
}

static int add_gpus_nics(struct gcoll_topo *t, const struct det *dt, char *err, size_t errlen) {
  for (int i = 0; i < dt->ngpu; i++) {
    char name[GCOLL_NAME_MAX];
    snprintf(name, sizeof(name), "gpu%d", i);
    int idx = add_pci_leaf(t, GCOLL_DEV_GPU, name, dt->gpu[i].busid, &dt->gpu[i].at, err, errlen);
    if (idx < 0) return -1;
    t->dev[idx].u.gpu.sms = dt->gpu[i].sms;
    t->dev[idx].u.gpu.cc = dt->gpu[i].cc;
  }
  for (int i = 0; i < dt->nnic; i++) {
    /* An interface that happens to be called like a device we named
     * ("cpu0", "sw1") is left out rather than failing detection. */
    if (gcoll_topo_find(t, dt->nic[i].name) >= 0) continue;
    int idx = add_pci_leaf(t, GCOLL_DEV_NIC, dt->nic[i].name, dt->nic[i].busid, &dt->nic[i].at,
                           err, errlen);
    if (idx < 0) return -1;
    t->dev[idx].u.nic.port = dt->nic[i].port;
    t->dev[idx].u.nic.gbps = dt->nic[i].gbps;
    t->dev[idx].u.nic.down = dt->nic[i].down;
    t->dev[idx].u.nic.active_gbps = dt->nic[i].active_gbps;
  }
  return 0;
}

static int add_nvlinks(struct gcoll_topo *t, const struct det *dt, char *err, size_t errlen) {
  int to_switch = 0, multicast = 1;
  for (int i = 0; i < dt->ngpu; i++) {
    to_switch |= dt->nvl[i][NVL_PEER_SWITCH] > 0;
    multicast &= dt->gpu[i].multicast;
  }
  int nvs = -1;
  if (to_switch) {
    nvs = gcoll_topo_add_dev(t, GCOLL_DEV_NVS, "nvs", -1, err, errlen);
    if (nvs < 0) return -1;
    t->dev[nvs].u.nvs.multicast = multicast;
  }
  for (int i = 0; i < dt->ngpu; i++) {
    /* Both ends report a GPU-GPU link; the lower-numbered one adds it. */
    for (int j = i + 1; j < dt->ngpu; j++) {
      int lanes = dt->nvl[i][j];
      if (lanes > 0 && gcoll_topo_add_link(t, t->gpu[i], t->gpu[j], GCOLL_LINK_NVL, lanes,
                                           lanes * dt->nvl_lane_bw, err, errlen))
        return -1;
    }
    int lanes = dt->nvl[i][NVL_PEER_SWITCH];
    if (lanes > 0 && gcoll_topo_add_link(t, t->gpu[i], nvs, GCOLL_LINK_NVL, lanes,
                                         lanes * dt->nvl_lane_bw, err, errlen))
      return -1;
  }
  return 0;
}

static int build(struct gcoll_topo *t, struct det *dt, void *hwloc_topo, char *err,
                 size_t errlen) {
  if (add_cpus(t, dt, err, errlen)) return -1;
#ifdef HAVE_HWLOC
  if (hwloc_topo != NULL && add_pci_switches_hwloc(hwloc_topo, t, dt, err, errlen)) return -1;
#endif
  if (add_gpus_nics(t, dt, err, errlen) || add_nvlinks(t, dt, err, errlen)) return -1;
  return gcoll_topo_compute_paths(t, err, errlen);
}

struct gcoll_topo *gcoll_topo_detect(char *err, size_t errlen) {
  struct det *dt = calloc(1, sizeof(*dt));
  struct gcoll_topo *t = gcoll_topo_new("detected");
  void *hw = NULL;
  char why[256];
  if (dt == NULL || t == NULL) {
    snprintf(err, errlen, "topology detection: out of memory");
    goto fail;
  }
#ifdef HAVE_HWLOC
  hwloc_topology_t h;
  if (hwloc_topology_init(&h) == 0) {
    hwloc_topology_set_io_types_filter(h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
#if HWLOC_API_VERSION >= 0x00020100
    /* GPUs come from our own dlopen of the CUDA driver and NVML; hwloc's
     * GPU plugins (libhwloc-plugins) would initialise those stacks a second
     * time, slowly, and some leak on unload. */
    static const char *const gpu_plugins[] = {"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"};
    for (size_t i = 0; i < sizeof(gpu_plugins) / sizeof(gpu_plugins[0]); i++)
      hwloc_topology_set_components(h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, gpu_plugins[i]);
#ifdef __linux__
    /* On Linux hwloc's own linux component reads the PCI tree from sysfs;
     * the libpciaccess-based "pci" plugin finds the same devices and leaves
     * allocations behind when it is unloaded (LeakSanitizer flags them). */
    hwloc_topology_set_components(h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
#endif
#endif
    if (hwloc_topology_load(h) == 0) hw = h;
    else hwloc_topology_destroy(h);
  }
  if (hw != NULL) detect_cpus_hwloc(hw, dt);
  else detect_cpus_fallback(dt);
#else
  detect_cpus_fallback(dt);
#endif
  detect_gpus(dt);
  detect_nvlinks(dt);
  detect_nics(dt);
  int rc = build(t, dt, hw, why, sizeof(why));
#ifdef HAVE_HWLOC
  if (hw != NULL) hwloc_topology_destroy(hw);
#endif
  if (rc != 0) {
    snprintf(err, errlen, "topology detection: %s", why);
    goto fail;
  }
  char busids[GCOLL_TOPO_MAX_GPUS][GCOLL_BUSID_MAX];
  for (int i = 0; i < t->ngpu; i++) memcpy(busids[i], t->dev[t->gpu[i]].busid, GCOLL_BUSID_MAX);
  gcoll_detect_nvl_domain(busids, t->ngpu, &t->nvl_domain);
  free(dt);
  return t;
fail:
  free(dt);
  gcoll_topo_free(t);
  return NULL;
}
