/* Node topology model: the devices of one node, the links between them and
 * the best path between every pair. Pure data + computation; the only I/O is
 * YAML (topo_yaml_*.c), NCCL's topology XML (topo_nccl_xml.c) and detection
 * (topo_detect.c). */
#ifndef GCOLL_GRAPH_TOPO_H
#define GCOLL_GRAPH_TOPO_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_TOPO_VERSION 1
/* Devices, links and NICs are stored in arrays that grow as they are added,
 * so no node shape hits a table size (a p5 has 32 NICs, NCCL's XML stops
 * at 256 elements). One bound is a sanity limit on input from files
 * and other nodes: paths are ndev x ndev, so 1024 devices cost about
 * 130 MB and 0.15 s, and more would let one bad file stall the
 * plugin's daemon. GPUs stay at 16 per node: the intra-node search tracks
 * them in bit masks and orders them exhaustively. */
#define GCOLL_TOPO_MAX_NODES 1024  /* devices of all kinds in one node */
#define GCOLL_TOPO_MAX_GPUS 16
#define GCOLL_TOPO_MAX_NVS 4
#define GCOLL_TOPO_MAX_HOPS 12     /* longest device-to-device path kept */
#define GCOLL_NAME_MAX 32          /* device names: "gpu3", "mlx5_0", "eth0" */
#define GCOLL_BUSID_MAX 16         /* "0000:1b:00.0" + NUL */

enum gcoll_dev_type {
  GCOLL_DEV_CPU = 0,  /* a socket / NUMA node: root of a PCI hierarchy */
  GCOLL_DEV_PCI,      /* a PCIe switch (or host bridge below a CPU) */
  GCOLL_DEV_GPU,
  GCOLL_DEV_NIC,      /* an RDMA port, or a TCP interface on CPU-only nodes */
  GCOLL_DEV_NVS,      /* an NVSwitch fabric, modelled as one device */
  GCOLL_DEV_NTYPES
};

enum gcoll_link_type {
  GCOLL_LINK_NVL = 0, /* NVLink (GPU-GPU or GPU-NVSwitch); count = lanes */
  GCOLL_LINK_PCI,     /* PCIe (CPU-switch, switch-switch, switch-device) */
  GCOLL_LINK_SYS,     /* inter-socket interconnect (UPI / xGMI) */
  GCOLL_LINK_NTYPES
};

/* Path classes, best first, with NCCL's names since users know them. */
enum gcoll_path_type {
  GCOLL_PATH_LOC = 0, /* same device */
  GCOLL_PATH_NVL,     /* NVLink, direct or through NVSwitch */
  GCOLL_PATH_NVB,     /* NVLink through an intermediate GPU */
  GCOLL_PATH_PIX,     /* at most one PCIe switch */
  GCOLL_PATH_PXB,     /* several PCIe switches, no CPU */
  GCOLL_PATH_PHB,     /* through a CPU host bridge */
  GCOLL_PATH_SYS,     /* across sockets */
  GCOLL_PATH_NET,     /* across nodes (never inside a topology) */
  GCOLL_PATH_DIS,     /* disconnected */
  GCOLL_PATH_NTYPES
};

struct gcoll_topo_link {
  enum gcoll_link_type type;
  int peer;        /* index into gcoll_topo.dev */
  int count;       /* NVLink lanes; 1 for PCI/SYS */
  double bw;       /* GB/s, one direction, whole link (all lanes) */
};

struct gcoll_topo_dev {
  enum gcoll_dev_type type;
  int index;                    /* index within its type: gpu 0..n-1, nic 0.. */
  char name[GCOLL_NAME_MAX];    /* "cpu0", "sw2", "gpu5", "mlx5_3", "nvs" */
  char busid[GCOLL_BUSID_MAX];  /* PCI address, "" when none */
  int parent;                   /* PCI parent device (CPU or PCI), -1 at root */
  union {
    struct { int cores; int numa; } cpu;      /* cores 0: unknown */
    struct { int sms; int cc; /* compute capability*10: 90; 0: unknown */ } gpu;
    /* rail: the leaf switch (rail) of a rail-optimised fabric this port is
     * cabled to, -1 when the topology does not say (then its NIC index:
     * NIC k of every node on leaf k, as DGX and HGX clusters are cabled).
     * down: the port was not active at detection; active_gbps: the rate
     * it trained to when below gbps (0: at gbps). Either leaves the NIC
     * out of plans (gcoll_topo_nic_usable). */
    struct {
      int port;
      double gbps; /* line rate; 0: unknown */
      int rail;
      int down;
      double active_gbps;
    } nic;
    struct { int multicast; /* NVLS capable (NVSwitch gen3+) */ } nvs;
  } u;
  int nlinks, links_cap;
  struct gcoll_topo_link *links;  /* nlinks entries, owned by the topology */
};

/* Best path from one device to another: widest (max bottleneck bandwidth),
 * then fewest hops. hop_link[i] is the link index taken out of hop_dev[i]. */
struct gcoll_topo_path {
  enum gcoll_path_type type;
  double bw;                         /* bottleneck, GB/s; 0 when DIS */
  int nhops;
  int hop_dev[GCOLL_TOPO_MAX_HOPS];
  int hop_link[GCOLL_TOPO_MAX_HOPS];
};

/* The multi-node NVLink domain a node belongs to (GB200/GB300 NVL72: the
 * NVML fabric's cluster UUID and clique id once the GPU's fabric
 * registration has completed). Nodes whose domains are equal reach each
 * other's GPUs over NVLink. */
#define GCOLL_UUID_TEXT 37          /* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL */
struct gcoll_nvl_domain {
  int set;                          /* 0: the node is in no multi-node domain */
  char cluster[GCOLL_UUID_TEXT];    /* lower-case UUID text */
  uint32_t clique;
};

struct gcoll_topo {
  char name[64];                /* class name in plans: "dgx-h100" */
  int ndev, dev_cap;
  struct gcoll_topo_dev *dev;   /* ndev entries (dev_cap allocated) */
  /* Index lists by type, in index order (ngpu GPUs: gpu[i] is dev index).
   * cpu, pci and nic have dev_cap entries allocated. */
  int ncpu, npci, ngpu, nnic, nnvs;
  int *cpu, *pci, *nic;
  int gpu[GCOLL_TOPO_MAX_GPUS], nvs[GCOLL_TOPO_MAX_NVS];
  /* ndev*ndev, filled by gcoll_topo_compute_paths(); NULL before. */
  struct gcoll_topo_path *paths;
  /* Set by the readers when the file left out something a plan needs (a
   * GPU's compute capability, a NIC's speed, a socket's core count: an NCCL
   * override file, or a YAML file that omits those fields). Not part of the
   * hash: it follows from the content. Plans refuse such a topology, naming
   * what is missing (gcoll_topo_missing). */
  int incomplete;
  /* Which node this is, not what it is: left out of the hash, so the trays
   * of every rack share one topology class. */
  struct gcoll_nvl_domain nvl_domain;
};

/* Lifetime. gcoll_topo_new returns an empty topology named `name`; a
 * topology owns its arrays, so copies are made with gcoll_topo_clone (never
 * by assigning the struct). */
struct gcoll_topo *gcoll_topo_new(const char *name);
void gcoll_topo_free(struct gcoll_topo *topo);
/* A deep copy (paths included when computed); NULL when out of memory. */
struct gcoll_topo *gcoll_topo_clone(const struct gcoll_topo *topo);

/* Building (used by the YAML reader, detection and tests). Return the new
 * device index, or -1 with a reason in err when a limit is hit. */
int gcoll_topo_add_dev(struct gcoll_topo *topo, enum gcoll_dev_type type,
                       const char *name, int parent, char *err, size_t errlen);
/* Adds a link in both directions. */
int gcoll_topo_add_link(struct gcoll_topo *topo, int a, int b,
                        enum gcoll_link_type type, int count, double bw,
                        char *err, size_t errlen);
int gcoll_topo_find(const struct gcoll_topo *topo, const char *name);
/* The rail of NIC k (index into topo->nic): its `rail`, else k. */
#define GCOLL_TOPO_MAX_RAIL 1023
int gcoll_topo_nic_rail(const struct gcoll_topo *topo, int k);
/* 1 when plans may use NIC k: its port is up and runs at its line rate.
 * Otherwise 0, with why (may be NULL) set to "down" or "slow" and detail
 * (may be NULL) to a phrase: "port down", "200 of 400 Gb/s". */
int gcoll_topo_nic_usable(const struct gcoll_topo *topo, int k, const char **why, char *detail,
                          size_t detaillen);

/* Computes every pair's path; must be called after the last add. */
int gcoll_topo_compute_paths(struct gcoll_topo *topo, char *err, size_t errlen);
const struct gcoll_topo_path *gcoll_topo_path(const struct gcoll_topo *topo,
                                              int from, int to);

/* 1 when both nodes are in the same multi-node NVLink domain. */
int gcoll_nvl_domain_equal(const struct gcoll_nvl_domain *a, const struct gcoll_nvl_domain *b);
/* Parses "UUID" text (any case) into d->cluster (lower case); 0 or -1. */
int gcoll_nvl_domain_set_cluster(struct gcoll_nvl_domain *d, const char *uuid);

/* Stable hash of the topology's content (not its name: nodes whose hashes
 * are equal share one topology class in a plan. */
uint32_t gcoll_topo_hash(const struct gcoll_topo *topo);

const char *gcoll_path_type_name(enum gcoll_path_type t);   /* "NVL", ... */
const char *gcoll_dev_type_name(enum gcoll_dev_type t);     /* "gpu", ... */
const char *gcoll_link_type_name(enum gcoll_link_type t);   /* "nvlink", ... */

/* YAML (topo_yaml_read.c / topo_yaml_write.c). Errors are one line:
 * "FILE:LINE: field 'x': reason". */
struct gcoll_topo *gcoll_topo_read_file(const char *path, char *err, size_t errlen);
struct gcoll_topo *gcoll_topo_read_mem(const char *buf, size_t len,
                                       const char *what, char *err, size_t errlen);
int gcoll_topo_write_file(const struct gcoll_topo *topo, const char *path,
                          char *err, size_t errlen);  /* atomic */
/* Writes to an open stream (stdout for `gcoll-plan topo`). */
int gcoll_topo_write_stream(const struct gcoll_topo *topo, void *FILE_stream,
                            char *err, size_t errlen);

/* Describes, in one phrase, the first thing a plan needs that `topo` lacks
 * (unknown compute capability, NIC speed or core count). Returns 1 and
 * fills why (may be NULL) when something is missing, 0 when complete. */
int gcoll_topo_missing(const struct gcoll_topo *topo, char *why, size_t whylen);

/* NCCL's topology XML (`<system version="1">`, as NCCL_TOPO_FILE takes it;
 * topo_nccl_xml.c, libxml2). Mapping and quirks: docs/topology-format.md.
 * Errors are one line "FILE:LINE: reason"; warnings (ignored quirks) go to
 * stderr, one line each. The topology is named after `what`'s base name
 * without ".xml". gcoll_topo_read_mem/_file sniff the format (first
 * non-blank character '<') and come here for XML. */
struct gcoll_topo *gcoll_topo_read_nccl_xml_mem(const char *buf, size_t len, const char *what,
                                                char *err, size_t errlen);
/* Reads FILE (at most 4 MiB) as NCCL XML whatever its first character. */
struct gcoll_topo *gcoll_topo_read_nccl_xml_file(const char *path, char *err, size_t errlen);
/* Writes NCCL's topology XML for NCCL_TOPO_FILE (topo_nccl_xml_write.c);
 * gcoll_* attributes keep gcoll's exact values, so reading it back gives the
 * same hash. Refuses, in one line, what the XML cannot hold. */
int gcoll_topo_write_nccl_xml_stream(const struct gcoll_topo *topo, void *FILE_stream, char *err,
                                     size_t errlen);
int gcoll_topo_write_nccl_xml_file(const struct gcoll_topo *topo, const char *path, char *err,
                                   size_t errlen); /* atomic */
/* 1 when buf looks like XML (first non-blank character, after a UTF-8 BOM,
 * is '<'). */
int gcoll_topo_is_xml(const char *buf, size_t len);

/* Overrides (topo_merge.c; rules in docs/topology-format.md, "Overrides:
 * merging with detection"). A file that only places devices (Azure's, AWS's
 * NCCL_TOPO_FILE) is merged with a base, the node's detected topology or a
 * reference one: the file's devices, placement, PCIe links, NIC names and
 * speeds and NVLinks win; the base fills in what the file lacks (GPU cc and
 * SMs, NVLinks and NVSwitch fabric when the file has none, NIC names and
 * speeds of NICs the file gives no speed, socket core counts) and adds the
 * NICs the file does not place. GPUs are matched by PCI bus id (any case,
 * any domain width); every GPU of the file must be in the base and every
 * GPU of the base in the file, else one line names the first that is not.
 * GCOLL_MATCH_BUSID_OR_ORDER (offline: a reference base is another
 * machine) matches in order when no bus id is shared and the GPU counts
 * are equal. Returns the merged topology, paths computed and `incomplete`
 * set as a reader would, named as the file; summary gets one line saying
 * what came from each side. */
enum gcoll_topo_match { GCOLL_MATCH_BUSID = 0, GCOLL_MATCH_BUSID_OR_ORDER };
struct gcoll_topo *gcoll_topo_merge(const struct gcoll_topo *file, const struct gcoll_topo *base,
                                    enum gcoll_topo_match match, char *summary, size_t sumlen,
                                    char *err, size_t errlen);
/* "00000001:00:00.0", "0001:00:00.0", "1:00:00.0" -> "0001:00:00.0" (lower
 * case, a domain of at least 4 digits). 0, or -1 when `in` is not
 * DOMAIN:BB:DD.F with a 1 to 8 digit domain. */
int gcoll_busid_normalize(const char *in, char *out, size_t outlen);

/* Line and active rates of a node's n RDMA ports (topo_detect_ports.c):
 * rate[i] is the Gb/s port i trained to (0: unknown), active[i] whether
 * its state is active. The line rate of every port is the fastest active
 * port's (100 when none is active); active_gbps[i] is rate[i] where that is
 * below it, else 0 (at line rate, or down: down ports are marked apart). */
void gcoll_port_health(const double *rate, const int *active, int n, double *line_gbps,
                       double *active_gbps);

/* Detection of the running machine (topo_detect.c): hwloc for CPUs/NUMA/PCI,
 * the CUDA driver and NVML through dlopen, libibverbs when built with it,
 * TCP interfaces otherwise. Never fails for lack of GPUs. */
struct gcoll_topo *gcoll_topo_detect(char *err, size_t errlen);

/* One GPU's NVML fabric info (topo_detect_fabric.c): known 0 when NVML
 * gave none. status is NVML's return for the registration, state its
 * nvmlGpuFabricState_t (3: completed). */
struct gcoll_fabric_info {
  int known;
  unsigned char cluster[16];
  int status;
  uint32_t clique;
  unsigned state;
};
/* The node's domain from its GPUs' fabric info: 1 and out set when every GPU
 * completed registration with one non-zero cluster UUID and clique; 0 (out
 * unset) when some GPU has no fabric or has not completed; -1 (out unset)
 * when GPUs disagree. */
int gcoll_nvl_domain_from_fabric(const struct gcoll_fabric_info *gpus, int n,
                                 struct gcoll_nvl_domain *out);
/* Asks NVML (dlopen) for the GPUs with these bus ids; out unset without
 * NVML, without fabric info, or as gcoll_nvl_domain_from_fabric says. */
void gcoll_detect_nvl_domain(char (*busids)[GCOLL_BUSID_MAX], int n,
                             struct gcoll_nvl_domain *out);

#endif
