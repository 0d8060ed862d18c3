/* Reads of another rank's memory (see peer_memory.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runtime/peer_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/types.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* PAGEMAP_SCAN (Linux 6.7, <linux/fs.h>): older headers lack it; the
 * layout is the kernel's ABI. */
#ifndef PAGEMAP_SCAN
struct page_region {
  __u64 start, end, categories;
};
struct pm_scan_arg {
  __u64 size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted,
      category_mask, category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PAGE_IS_HUGE (1 << 6)
#endif

struct identity {
  int32_t pid;
  uint32_t zero;
  uint64_t nonce;
  uint64_t nonce_addr;
  uint64_t reserved;
};
_Static_assert(sizeof(struct identity) == GCOLL_PEER_ID_BYTES, "identity fits the descriptor");

static uint64_t process_nonce;
static pthread_once_t nonce_once = PTHREAD_ONCE_INIT;

static void make_nonce(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    v = (uint64_t)t.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)t.tv_sec ^ (uint64_t)getpid();
  }
  __atomic_store_n(&process_nonce, v | 1, __ATOMIC_RELEASE); /* never 0: unset memory */
}

void gcoll_peer_memory_identity(uint8_t id[GCOLL_PEER_ID_BYTES]) {
  pthread_once(&nonce_once, make_nonce);
  struct identity me = {.pid = (int32_t)getpid(),
                        .nonce = __atomic_load_n(&process_nonce, __ATOMIC_ACQUIRE),
                        .nonce_addr = (uint64_t)(uintptr_t)&process_nonce};
  memcpy(id, &me, sizeof(me));
}

int gcoll_peer_memory_read(const uint8_t id[GCOLL_PEER_ID_BYTES], void *dst, uint64_t addr,
                           size_t n) {
  struct identity peer;
  memcpy(&peer, id, sizeof(peer));
  char *out = dst;
  while (n > 0) {
    struct iovec local = {.iov_base = out, .iov_len = n};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = n};
    ssize_t got = process_vm_readv((pid_t)peer.pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return EFAULT; /* a partial read stops at an unmapped page */
    out += got;
    addr += (uint64_t)got;
    n -= (size_t)got;
  }
  return 0;
}

int gcoll_peer_memory_readv(const uint8_t id[GCOLL_PEER_ID_BYTES], const struct iovec *local,
                            const struct iovec *remote, size_t n) {
  struct identity peer;
  memcpy(&peer, id, sizeof(peer));
  while (n > 0) {
    size_t batch = n < IOV_MAX ? n : IOV_MAX, want = 0;
    for (size_t i = 0; i < batch; i++) want += local[i].iov_len;
    ssize_t got = process_vm_readv((pid_t)peer.pid, local, batch, remote, batch, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if ((size_t)got != want)
      /* Where it stopped is for gcoll_peer_memory_read to find. */
      for (size_t i = 0; i < batch; i++) {
        int rc = gcoll_peer_memory_read(id, local[i].iov_base,
                                        (uint64_t)(uintptr_t)remote[i].iov_base, local[i].iov_len);
        if (rc != 0) return rc;
      }
    local += batch;
    remote += batch;
    n -= batch;
  }
  return 0;
}

int gcoll_peer_memory_probe(const uint8_t id[GCOLL_PEER_ID_BYTES]) {
  struct identity peer;
  memcpy(&peer, id, sizeof(peer));
  if (peer.pid <= 0 || peer.nonce == 0) return EINVAL;
  uint64_t seen = 0;
  int rc = gcoll_peer_memory_read(id, &seen, peer.nonce_addr, sizeof(seen));
  if (rc != 0) return rc;
  return seen == peer.nonce ? 0 : ENXIO;
}

/* /proc/self/pagemap of this process: reopened after a fork, as the
 * inherited descriptor still shows the parent's pages. */
static pthread_mutex_t pagemap_lock = PTHREAD_MUTEX_INITIALIZER;
static int pagemap_fd = -1;
static pid_t pagemap_pid;

static int pagemap(void) {
  pid_t me = getpid();
  pthread_mutex_lock(&pagemap_lock);
  if (pagemap_fd >= 0 && pagemap_pid != me) {
    close(pagemap_fd);
    pagemap_fd = -1;
  }
  if (pagemap_fd < 0) {
    pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    pagemap_pid = me;
  }
  int fd = pagemap_fd;
  pthread_mutex_unlock(&pagemap_lock);
  return fd;
}

int gcoll_peer_memory_cheap(const void *p, size_t n) {
  if (n == 0) return 1;
  int fd = pagemap();
  if (fd < 0) return 0;
  uint64_t start = (uint64_t)(uintptr_t)p & ~4095ull;
  uint64_t end = ((uint64_t)(uintptr_t)p + n + 4095) & ~4095ull, huge = 0;
  for (uint64_t at = start; at < end;) {
    struct page_region regions[16];
    struct pm_scan_arg scan = {.size = sizeof(scan),
                               .start = at,
                               .end = end,
                               .vec = (uint64_t)(uintptr_t)regions,
                               .vec_len = 16,
                               .category_mask = PAGE_IS_HUGE,
                               .return_mask = PAGE_IS_HUGE};
    int found = ioctl(fd, PAGEMAP_SCAN, &scan);
    if (found < 0) return 0; /* ENOTTY before Linux 6.7: cannot tell */
    for (int i = 0; i < found; i++) huge += regions[i].end - regions[i].start;
    if (scan.walk_end <= at) break;
    at = scan.walk_end;
  }
  return huge >= (end - start) / 8 * 7;
}
