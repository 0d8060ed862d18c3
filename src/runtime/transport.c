/* Transport lookup and what the transports share. */
#define _GNU_SOURCE
#include "config.h"
#include "runtime/transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "gcoll.h"
#include "runtime/proxy.h"

static const struct gcoll_transport_ops *const all_transports[] = {
    &gcoll_transport_shm_ops,
    &gcoll_transport_socket_ops,
    &gcoll_transport_plugin_ops,
#ifdef HAVE_VERBS
    &gcoll_transport_ib_ops,
#endif
#ifdef HAVE_CUDA
    &gcoll_transport_p2p_ops,
#endif
};

const struct gcoll_transport_ops *gcoll_transport_by_name(const char *name) {
  if (name == NULL) return NULL;
  if (strcmp(name, "socket") == 0) return &gcoll_transport_socket_ops;
  if (strcmp(name, "plugin") == 0) return &gcoll_transport_plugin_ops;
#ifdef HAVE_VERBS
  if (strcmp(name, "ib") == 0) return &gcoll_transport_ib_ops;
#endif
  for (size_t i = 0; i < sizeof(all_transports) / sizeof(all_transports[0]); i++)
    if (strcmp(name, all_transports[i]->name) == 0) return all_transports[i];
  return NULL;
}

#ifdef HAVE_VERBS
#define TRANSPORT_NAMES_IB ", net/ib"
#else
#define TRANSPORT_NAMES_IB " (no net/ib: no libibverbs at configure)"
#endif
#ifdef HAVE_CUDA
#define TRANSPORT_NAMES "shm, net/socket" TRANSPORT_NAMES_IB ", net/plugin or p2p"
#else
#define TRANSPORT_NAMES \
  "shm, net/socket" TRANSPORT_NAMES_IB ", net/plugin (no p2p: no CUDA toolkit at configure)"
#endif

int gcoll_transport_from_env(const struct gcoll_transport_ops **ops, char *err, size_t errlen) {
  const char *v = getenv("GCOLL_TRANSPORT");
  *ops = NULL;
  if (v == NULL || *v == '\0') return 0;
  *ops = gcoll_transport_by_name(v);
  if (*ops != NULL) return 0;
  snprintf(err, errlen, "GCOLL_TRANSPORT='%.64s': expected " TRANSPORT_NAMES, v);
  return -1;
}

int gcoll_shm_random_name(char name[GCOLL_SHM_NAME_MAX], char *err, size_t errlen) {
  unsigned char raw[16];
  if (gcoll_auth_nonce(raw, err, errlen) != 0) return -1;
  int n = snprintf(name, GCOLL_SHM_NAME_MAX, "/gcoll-%d-", (int)getpid());
  for (int i = 0; i < 16; i++)
    n += snprintf(name + n, GCOLL_SHM_NAME_MAX - (size_t)n, "%02x", raw[i]);
  return 0;
}

int gcoll_shm_name_valid(const char *name) {
  int pid = 0, used = 0;
  if (strncmp(name, "/gcoll-", 7) != 0 || sscanf(name + 7, "%d-%n", &pid, &used) != 1 ||
      used == 0 || pid <= 0)
    return 0;
  const char *hex = name + 7 + used;
  return strlen(hex) == 32 && strspn(hex, "0123456789abcdef") == 32;
}

int gcoll_shm_cleanup(void) {
  int dfd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (d == NULL) {
    if (dfd >= 0) close(dfd);
    return 0;
  }
  int removed = 0;
  struct dirent *de;
  char name[320];
  while ((de = readdir(d)) != NULL) {
    snprintf(name, sizeof(name), "/%s", de->d_name);
    struct stat st;
    int pid = 0;
    if (!gcoll_shm_name_valid(name) || sscanf(name, "/gcoll-%d-", &pid) != 1 ||
        fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid() ||
        gcoll_process_alive(pid, 0))
      continue;
    if (shm_unlink(name) == 0) removed++;
  }
  closedir(d);
  return removed;
}

void gcoll_transport_peer_failed(_Atomic int *abort_word, _Atomic int *failed_peer, int peer) {
  int none = -1;
  if (failed_peer != NULL) atomic_compare_exchange_strong(failed_peer, &none, peer);
  int ok = 0;
  if (abort_word != NULL) atomic_compare_exchange_strong(abort_word, &ok, (int)gcollRemoteError);
}

int gcoll_transport_blame(const struct gcoll_transport_config *cfg) {
  int peer = atomic_load(cfg->failed_peer);
  return peer >= 0 && peer < cfg->nranks ? peer : cfg->rank;
}

uint64_t gcoll_transport_now_ms(void) {
  return gcoll_clock_ms();
}

/* Private memory for a FIFO, *bytes rounded up to what is mapped. A FIFO
 * of half a huge page or more is mapped as whole, aligned huge pages: the
 * first touch of a 4 KiB page costs 2-12 us on these VMs (host-side
 * faults), and a net FIFO of 1.5 MiB was 385 of them, 85% of a rank's
 * init CPU at 8 ranks. One fault per 2 MiB instead, for at most a third
 * more memory. THP in "madvise" mode honours MADV_HUGEPAGE, which must
 * precede the first touch; where the kernel gives no huge page the
 * mapping still works, page by page. */
static void *map_huge_aligned(size_t *bytes) {
  const size_t huge = (size_t)2 << 20;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (*bytes < huge / 2) {
    *bytes = (*bytes + page - 1) / page * page;
    void *mem = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mem == MAP_FAILED ? NULL : mem;
  }
  size_t len = (*bytes + huge - 1) / huge * huge;
  char *raw = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char *start = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
  /* Trim the slack: start - raw before, the rest of the extra huge page
   * after (never empty, as start < raw + huge). */
  if (start > raw) munmap(raw, (size_t)(start - raw));
  munmap(start + len, (size_t)(raw + huge - start));
  (void)madvise(start, len, MADV_HUGEPAGE);
  *bytes = len;
  return start;
}

struct gcoll_fifo *gcoll_local_fifo_alloc(size_t slot_bytes, size_t *mapped_bytes, char *err,
                                          size_t errlen) {
  size_t bytes = gcoll_fifo_bytes(slot_bytes);
  if (bytes == 0) {
    snprintf(err, errlen, "FIFO slot size %zu is not a multiple of %d in [%d, %u]", slot_bytes,
             GCOLL_FIFO_ALIGN, GCOLL_FIFO_MIN_SLOT, GCOLL_FIFO_MAX_SLOT);
    return NULL;
  }
  void *mem = map_huge_aligned(&bytes);
  if (mem == NULL) {
    snprintf(err, errlen, "mmap of a %zu-byte FIFO: %s", bytes, strerror(errno));
    return NULL;
  }
  *mapped_bytes = bytes;
  /* Touches the pages steps use once, here at setup rather than in a step
   * (fresh anonymous memory is zero, as gcoll_fifo_init_zeroed needs). */
  return gcoll_fifo_init_zeroed(mem, slot_bytes);
}

void gcoll_local_fifo_free(struct gcoll_fifo *f, size_t mapped_bytes) {
  if (f != NULL) munmap(f, mapped_bytes);
}

int gcoll_transport_base_init(struct gcoll_transport *t, const struct gcoll_transport_ops *ops,
                              const struct gcoll_transport_config *cfg, char *err, size_t errlen) {
  memset(t, 0, sizeof(*t));
  if (cfg == NULL || cfg->nranks < 1 || cfg->rank < 0 || cfg->rank >= cfg->nranks) {
    snprintf(err, errlen, "rank %d of %d is not a valid rank", cfg ? cfg->rank : -1,
             cfg ? cfg->nranks : 0);
    return -1;
  }
  if (cfg->job_key == NULL || cfg->job_key[0] == '\0' ||
      strlen(cfg->job_key) >= sizeof(t->job_key)) {
    snprintf(err, errlen, "job key must have 1 to %zu characters", sizeof(t->job_key) - 1);
    return -1;
  }
  if (!gcoll_fifo_slot_bytes_valid(cfg->slot_bytes)) {
    snprintf(err, errlen, "FIFO slot size %zu is not a multiple of %d in [%d, %u]",
             cfg->slot_bytes, GCOLL_FIFO_ALIGN, GCOLL_FIFO_MIN_SLOT, GCOLL_FIFO_MAX_SLOT);
    return -1;
  }
  if (cfg->abort_word == NULL || cfg->failed_peer == NULL) {
    snprintf(err, errlen, "abort word and failed-peer slot are required");
    return -1;
  }
  t->ops = ops;
  t->cfg = *cfg;
  snprintf(t->job_key, sizeof(t->job_key), "%s", cfg->job_key);
  t->cfg.job_key = t->job_key;
  if (t->cfg.timeout_ms == 0) t->cfg.timeout_ms = 60000;
  unsigned char tag[GCOLL_AUTH_SECRET_BYTES];
  struct gcoll_auth_secret tag_secret;
  if (gcoll_auth_derive(t->job_key, strlen(t->job_key), GCOLL_AUTH_LABEL_CONN, &t->conn_secret,
                        err, errlen) != 0 ||
      gcoll_auth_derive(t->job_key, strlen(t->job_key), "gcoll job tag v1", &tag_secret, err,
                        errlen) != 0)
    return -1;
  memcpy(tag, tag_secret.bytes, sizeof(tag));
  t->job_hash = 0;
  for (int i = 0; i < 8; i++) t->job_hash = t->job_hash << 8 | tag[i];
  t->pid = (int)getpid();
  t->start_ticks = gcoll_process_start_ticks(t->pid);
  if (cfg->proxy != NULL) gcoll_proxy_retain(cfg->proxy);
  return 0;
}

void gcoll_transport_base_fini(struct gcoll_transport *t) {
  if (t->cfg.proxy != NULL) gcoll_proxy_release(t->cfg.proxy);
  t->cfg.proxy = NULL;
}
