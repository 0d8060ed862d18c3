/* The node's multi-node NVLink domain from NVML's GPU fabric info
 * (nvmlDeviceGetGpuFabricInfoV, else nvmlDeviceGetGpuFabricInfo), loaded
 * at run time like the rest of detection (common/driver_libs.h).
 *
 * A GB200/GB300 tray's GPUs register with the NVLink fabric manager; once
 * registration has completed each reports the cluster UUID and clique id of
 * the NVLink partition it belongs to, and GPUs with equal pairs reach each
 * other over NVLink across trays. Before completion (or on GPUs without a
 * fabric: NOT_SUPPORTED) the values mean nothing, so a node is put in a
 * domain only when every GPU has completed and all agree: a tray whose
 * GPUs disagree is not something a plan can use. */
#include "topo.h"

#include <stdio.h>
#include <string.h>

#include "common/driver_libs.h"

#define NVML_FABRIC_STATE_COMPLETED 3

/* nvmlGpuFabricInfo_v2_t and nvmlGpuFabricInfo_t (v1) as NVML lays them
 * out; the v2 call takes a version word, size | 2 << 24. */
struct nvml_fabric_v2 {
  unsigned version;
  unsigned char cluster[16];
  int status;
  unsigned clique;
  unsigned char state;
  unsigned health_mask;
};

struct nvml_fabric_v1 {
  unsigned char cluster[16];
  int status;
  unsigned clique;
  unsigned char state;
};

static void uuid_text(const unsigned char *u, char *out) {
  snprintf(out, GCOLL_UUID_TEXT,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
           u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
           u[15]);
}

int gcoll_nvl_domain_from_fabric(const struct gcoll_fabric_info *gpus, int n,
                                 struct gcoll_nvl_domain *out) {
  memset(out, 0, sizeof(*out));
  if (n < 1) return 0;
  for (int i = 0; i < n; i++) {
    static const unsigned char zero[16];
    if (!gpus[i].known || gpus[i].status != 0 || gpus[i].state != NVML_FABRIC_STATE_COMPLETED ||
        memcmp(gpus[i].cluster, zero, sizeof(zero)) == 0)
      return 0;
    if (i > 0 && (memcmp(gpus[i].cluster, gpus[0].cluster, 16) != 0 ||
                  gpus[i].clique != gpus[0].clique))
      return -1;
  }
  uuid_text(gpus[0].cluster, out->cluster);
  out->clique = gpus[0].clique;
  out->set = 1;
  return 1;
}

void gcoll_detect_nvl_domain(char (*busids)[GCOLL_BUSID_MAX], int n,
                             struct gcoll_nvl_domain *out) {
  struct gcoll_fabric_info info[GCOLL_TOPO_MAX_GPUS];
  memset(out, 0, sizeof(*out));
  if (n < 1 || n > GCOLL_TOPO_MAX_GPUS) return;
  int (*init)(void), (*shutdown)(void), (*by_busid)(const char *, void **);
  int (*get_v2)(void *, struct nvml_fabric_v2 *) = NULL;
  int (*get_v1)(void *, struct nvml_fabric_v1 *) = NULL;
  gcoll_driver_lib_fn(GCOLL_LIB_NVML, "nvmlDeviceGetGpuFabricInfoV", &get_v2);
  gcoll_driver_lib_fn(GCOLL_LIB_NVML, "nvmlDeviceGetGpuFabricInfo", &get_v1);
  if (gcoll_driver_lib_fn(GCOLL_LIB_NVML, "nvmlInit_v2", &init) != 0 ||
      gcoll_driver_lib_fn(GCOLL_LIB_NVML, "nvmlShutdown", &shutdown) != 0 ||
      gcoll_driver_lib_fn(GCOLL_LIB_NVML, "nvmlDeviceGetHandleByPciBusId_v2", &by_busid) != 0 ||
      (get_v2 == NULL && get_v1 == NULL) || init() != 0)
    return;
  memset(info, 0, sizeof(info));
  for (int g = 0; g < n; g++) {
    void *h;
    if (busids[g][0] == '\0' || by_busid(busids[g], &h) != 0) continue;
    if (get_v2 != NULL) {
      struct nvml_fabric_v2 v;
      memset(&v, 0, sizeof(v));
      v.version = (unsigned)sizeof(v) | 2u << 24;
      if (get_v2(h, &v) != 0) continue;
      memcpy(info[g].cluster, v.cluster, 16);
      info[g].status = v.status;
      info[g].clique = v.clique;
      info[g].state = v.state;
    } else {
      struct nvml_fabric_v1 v;
      memset(&v, 0, sizeof(v));
      if (get_v1(h, &v) != 0) continue;
      memcpy(info[g].cluster, v.cluster, 16);
      info[g].status = v.status;
      info[g].clique = v.clique;
      info[g].state = v.state;
    }
    info[g].known = 1;
  }
  gcoll_nvl_domain_from_fabric(info, n, out);
  shutdown();
}
