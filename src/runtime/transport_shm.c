/* shm: the receiver's FIFO is a POSIX shm segment that the sender maps.
 * p2p: the same, except that the FIFO lives in the receiver's GPU memory
 * (fifo_devmem.h) and the segment carries only the control block, with the
 * FIFO's CUDA IPC handle in it.
 *
 * The receiver creates the segment (O_EXCL, 0600, under a random name that
 * says nothing about the job: transport.h), so the FIFO memory is first
 * touched by the reader, and publishes the name in its address through the
 * authenticated bootstrap. Nobody else can guess the name to squat it first,
 * and the sender maps only a segment that its own user created with mode
 * 0600, so a segment planted by another user is refused. The segment holds
 * the FIFO followed by a small control block the two processes use to find
 * and watch each other: the sender writes its pid there when it attaches,
 * and each side sets a "closed" flag when it closes cleanly.
 *
 * The name lives only as long as it must: the sender unlinks it right after
 * mapping it (the sender is the last process that needs the name, and the
 * receiver had mapped it before publishing the address, so this is the
 * earliest safe moment and costs no extra synchronisation). The receiver
 * unlinks it again in recv_complete and conn_close (ENOENT is expected),
 * which covers a sender that never arrives. A receiver that crashes before
 * its sender attached leaves the name until the sender maps it; for a whole
 * job that dies during setup, gcoll_shm_cleanup() removes the names its
 * processes created.
 *
 * Dead peers: the proxy's check callback (every ~100 ms) tests the peer's
 * pid (kill(pid, 0), zombie state and start time from /proc, so neither an
 * unreaped child nor a reused pid passes for alive) unless the peer closed
 * cleanly. A peer that closed while its communicator was in error counts as
 * failed at once, like a socket closed without a goodbye.
 *
 * p2p's FIFO travels as an IPC handle inside the segment (0600, this user's,
 * published through the authenticated bootstrap), never in the address, so
 * it is exactly as hard to reach as a shm FIFO. Ranks of one process use
 * the address itself (a process cannot open its own IPC handles), which
 * needs them on one GPU. The sender unmaps at close; the receiver frees the
 * memory only once the sender has closed or died (freeing memory another
 * process still has open is undefined in CUDA), waiting at most
 * P2P_FREE_WAIT_MS and otherwise leaving the allocation to the process's
 * end rather than risk it. The FIFO is the kernel's only: the host
 * executor cannot read GPU memory, so a communicator with p2p connections
 * runs device buffers only (comm_coll.c says so to a host-buffer call). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "runtime/fifo_devmem.h"
#include "runtime/proxy.h"
#include "runtime/shm_segment.h"
#include "runtime/transport.h"

#define SHM_ADDR_MAGIC 0x48534347u /* "GCSH" */
#define SHM_CTL_MAGIC 0x4c544347u  /* "GCTL" */
#define P2P_ADDR_MAGIC 0x50324347u /* "GC2P" */
#define SHM_VERSION 3
#define P2P_FREE_WAIT_MS 2000
#define SHM_NAME_MAX GCOLL_SHM_NAME_MAX
/* Values of the closed flags. A side that closes while its communicator is
 * in error (its abort word is set) did not finish the collective protocol,
 * so its peer must fail now rather than wait for a deadline. */
#define SHM_CLOSED_CLEAN 1u
#define SHM_CLOSED_ABORTED 2u

struct shm_ctl {
  uint32_t magic, version;
  _Atomic int32_t sender_pid;
  _Atomic uint32_t sender_attached; /* release: pid and start are written */
  uint64_t sender_start;
  _Atomic uint32_t sender_closed;
  _Atomic uint32_t receiver_closed;
  /* Written before a closed flag becomes SHM_CLOSED_ABORTED: the rank the
   * closing side blames (the peer it saw die, or itself after an abort), so
   * the failure is named after its cause all along the job. */
  _Atomic int32_t sender_blames, receiver_blames;
  /* p2p only, written by the receiver before it publishes the address. */
  uint64_t fifo_dev;               /* the FIFO's address in the receiver's process */
  int32_t fifo_gpu;                /* the receiver's GPU ordinal */
  uint32_t reserved;
  unsigned char fifo_handle[GCOLL_DEVMEM_HANDLE_BYTES];
};

/* The receiver sleeps on sender_attached (a futex in the shared segment)
 * until the sender says it attached, instead of polling it: in a large
 * job's init the sender may start seconds later (256 ranks on 2 cores),
 * and a poll doubling to 2 ms cost the waiting rank up to ~100 ms of CPU.
 * Woken rounds are at most WAIT_ATTACHED_MS, so the deadline holds even
 * without a wake-up. 0, or -1 when the futex call is unavailable (then
 * the caller polls as before). */
#define WAIT_ATTACHED_MS 100
static int wait_attached(struct shm_ctl *ctl, uint64_t left_ms) {
  uint64_t ms = left_ms < WAIT_ATTACHED_MS ? left_ms : WAIT_ATTACHED_MS;
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
  long r = syscall(SYS_futex, (uint32_t *)&ctl->sender_attached, FUTEX_WAIT, 0u, &ts, NULL, 0);
  return r == 0 || errno == EAGAIN || errno == EINTR || errno == ETIMEDOUT ? 0 : -1;
}

static void wake_attached(struct shm_ctl *ctl) {
  (void)syscall(SYS_futex, (uint32_t *)&ctl->sender_attached, FUTEX_WAKE, INT32_MAX, NULL, NULL,
                0);
}

/* Same host, same ABI on both ends: the address is the struct's bytes. */
struct shm_addr {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  int32_t receiver_rank;
  int32_t receiver_pid;
  uint32_t conn_id;
  uint32_t reserved2;
  uint64_t receiver_start;
  uint64_t slot_bytes;
  uint64_t seg_bytes;
  uint64_t job_hash;
  char name[SHM_NAME_MAX];
};
_Static_assert(sizeof(struct shm_addr) <= GCOLL_CONN_ADDR_MAX, "shm address too long");

struct shm_conn {
  struct gcoll_proxy_entry entry; /* first: the check callback's handle */
  struct gcoll_transport *t;
  int peer, is_send;
  void *map;
  size_t map_bytes;
  struct shm_ctl *ctl;
  char name[SHM_NAME_MAX];
  int peer_pid;                   /* sender: the receiver's, from the address */
  uint64_t peer_start;
  int failed;                     /* proxy thread only */
  int registered;
  uint64_t dev_fifo;              /* p2p: the FIFO in GPU memory, 0 */
  int dev_fifo_opened;            /* p2p sender: through an IPC handle */
};

/* What a transport instance of this file holds: nothing for shm; the GPU
 * for p2p. */
struct shm_transport {
  struct gcoll_devmem *gpu;       /* NULL for shm */
};

static int is_p2p(const struct gcoll_transport *t) {
  return ((const struct shm_transport *)t->impl)->gpu != NULL;
}

static struct gcoll_devmem *gpu_of(const struct gcoll_transport *t) {
  return ((const struct shm_transport *)t->impl)->gpu;
}

/* The control block follows the FIFO in a shm segment; a p2p segment
 * holds the control block alone. */
static size_t ctl_offset(const struct gcoll_transport *t) {
  return is_p2p(t) ? 0 : (gcoll_fifo_bytes(t->cfg.slot_bytes) + 63) / 64 * 64;
}

static size_t segment_bytes(const struct gcoll_transport *t) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (ctl_offset(t) + sizeof(struct shm_ctl) + page - 1) / page * page;
}

static uint32_t addr_magic(const struct gcoll_transport *t) {
  return is_p2p(t) ? P2P_ADDR_MAGIC : SHM_ADDR_MAGIC;
}

static void shm_check(struct gcoll_proxy_entry *e) {
  struct shm_conn *c = (struct shm_conn *)e;
  if (c->failed) return;
  int pid;
  uint64_t start;
  uint32_t closed;
  int blamed;
  if (c->is_send) {
    closed = atomic_load_explicit(&c->ctl->receiver_closed, memory_order_acquire);
    blamed = atomic_load_explicit(&c->ctl->receiver_blames, memory_order_relaxed);
    pid = c->peer_pid;
    start = c->peer_start;
  } else {
    if (!atomic_load_explicit(&c->ctl->sender_attached, memory_order_acquire)) return;
    closed = atomic_load_explicit(&c->ctl->sender_closed, memory_order_acquire);
    blamed = atomic_load_explicit(&c->ctl->sender_blames, memory_order_relaxed);
    pid = atomic_load_explicit(&c->ctl->sender_pid, memory_order_relaxed);
    start = c->ctl->sender_start;
  }
  if (closed == SHM_CLOSED_CLEAN) return;
  if (closed != SHM_CLOSED_ABORTED && gcoll_process_alive(pid, start)) return;
  c->failed = 1;
  if (closed != SHM_CLOSED_ABORTED || blamed < 0 || blamed >= c->t->cfg.nranks) blamed = c->peer;
  gcoll_transport_peer_failed(c->t->cfg.abort_word, c->t->cfg.failed_peer, blamed);
}

static int watch_peer(struct gcoll_transport *t, struct shm_conn *c, char *err, size_t errlen) {
  if (t->cfg.proxy == NULL) return 0;
  c->entry.fd = -1;
  c->entry.check = shm_check;
  if (gcoll_proxy_add(t->cfg.proxy, &c->entry, err, errlen) != 0) return -1;
  c->registered = 1;
  return 0;
}

static void shm_fini(struct gcoll_transport *t);

static int init_either(struct gcoll_transport **out, const struct gcoll_transport_ops *ops,
                       const struct gcoll_transport_config *cfg, char *err, size_t errlen) {
  *out = NULL;
  struct gcoll_transport *t = calloc(1, sizeof(*t));
  struct shm_transport *st = calloc(1, sizeof(*st));
  if (t == NULL || st == NULL) {
    free(t);
    free(st);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (gcoll_transport_base_init(t, ops, cfg, err, errlen) != 0) {
    free(t);
    free(st);
    return -1;
  }
  t->impl = st;
  if (ops == &gcoll_transport_p2p_ops) {
    if (cfg->gpu < 0) {
      snprintf(err, errlen, "no GPU for its FIFOs (no CUDA device was current at init)");
      shm_fini(t);
      return -1;
    }
    if (gcoll_devmem_open(&st->gpu, cfg->gpu, err, errlen) != 0) {
      shm_fini(t);
      return -1;
    }
  }
  *out = t;
  return 0;
}

static int shm_init(struct gcoll_transport **out, const struct gcoll_transport_config *cfg,
                    char *err, size_t errlen) {
  return init_either(out, &gcoll_transport_shm_ops, cfg, err, errlen);
}

static int p2p_init(struct gcoll_transport **out, const struct gcoll_transport_config *cfg,
                    char *err, size_t errlen) {
  return init_either(out, &gcoll_transport_p2p_ops, cfg, err, errlen);
}

/* Whether the sender is done with a p2p FIFO: closed, dead, or in this
 * process (which opened no handle). Waits up to P2P_FREE_WAIT_MS. */
static int sender_let_go(const struct shm_conn *c) {
  if (!atomic_load_explicit(&c->ctl->sender_attached, memory_order_acquire) ||
      atomic_load_explicit(&c->ctl->sender_pid, memory_order_relaxed) == c->t->pid)
    return 1;
  uint64_t deadline = gcoll_transport_now_ms() + P2P_FREE_WAIT_MS;
  for (;;) {
    if (atomic_load_explicit(&c->ctl->sender_closed, memory_order_acquire) != 0 ||
        !gcoll_process_alive(atomic_load_explicit(&c->ctl->sender_pid, memory_order_relaxed),
                             c->ctl->sender_start))
      return 1;
    if (gcoll_transport_now_ms() >= deadline) return 0;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&ts, NULL);
  }
}

/* Releases the GPU side of a p2p connection (nothing for shm). */
static void release_dev_fifo(struct shm_conn *c) {
  if (c->dev_fifo == 0) return;
  if (c->is_send) {
    if (c->dev_fifo_opened) gcoll_devmem_fifo_unmap(gpu_of(c->t), c->dev_fifo);
  } else if (sender_let_go(c)) {
    gcoll_devmem_fifo_free(gpu_of(c->t), c->dev_fifo);
  } /* else: a live sender may still have it open; the process's end frees it */
  c->dev_fifo = 0;
}

static void shm_conn_free(struct shm_conn *c) {
  if (c->map != NULL) munmap(c->map, c->map_bytes);
  free(c);
}

/* Creates, sizes and maps the segment; the FIFO is formatted (every page
 * touched) by the reader, the process that will poll it. */
static int create_segment(struct gcoll_transport *t, struct shm_conn *c, char *err,
                          size_t errlen) {
  size_t bytes = segment_bytes(t);
  void *map = gcoll_shm_create(c->name, bytes, err, errlen);
  if (map == NULL) return -1;
  /* Huge pages are requested before the first touch (gcoll_fifo_init). */
  (void)madvise(map, bytes, MADV_HUGEPAGE);
  c->map = map;
  c->map_bytes = bytes;
  return 0;
}

static int shm_recv_setup(struct gcoll_transport *t, int peer, uint32_t conn_id,
                          struct gcoll_conn *gc, void *addr, size_t *addrlen, char *err,
                          size_t errlen) {
  if (peer < 0 || peer >= t->cfg.nranks) {
    snprintf(err, errlen, "peer rank %d out of range [0, %d)", peer, t->cfg.nranks);
    return -1;
  }
  if (*addrlen < sizeof(struct shm_addr)) {
    snprintf(err, errlen, "address buffer of %zu bytes, need %zu", *addrlen,
             sizeof(struct shm_addr));
    return -1;
  }
  struct shm_conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  c->t = t;
  c->peer = peer;
  if (gcoll_shm_random_name(c->name, err, errlen) != 0 || create_segment(t, c, err, errlen) != 0) {
    free(c);
    return -1;
  }
  c->ctl = (struct shm_ctl *)((char *)c->map + ctl_offset(t));
  c->ctl->magic = SHM_CTL_MAGIC;
  c->ctl->version = SHM_VERSION;
  struct gcoll_fifo *f = NULL;
  if (is_p2p(t)) {
    if (gcoll_devmem_fifo_alloc(gpu_of(t), t->cfg.slot_bytes, &c->dev_fifo, c->ctl->fifo_handle,
                                err, errlen) == 0) {
      c->ctl->fifo_dev = c->dev_fifo;
      c->ctl->fifo_gpu = t->cfg.gpu;
      f = (struct gcoll_fifo *)(uintptr_t)c->dev_fifo;
    }
  } else if ((f = gcoll_fifo_init_zeroed(c->map, t->cfg.slot_bytes)) == NULL) {
    snprintf(err, errlen, "cannot format the FIFO in %s", c->name);
  }
  if (f == NULL || watch_peer(t, c, err, errlen) != 0) {
    release_dev_fifo(c);
    shm_unlink(c->name);
    shm_conn_free(c);
    return -1;
  }
  struct shm_addr a;
  memset(&a, 0, sizeof(a));
  a.magic = addr_magic(t);
  a.version = SHM_VERSION;
  a.receiver_rank = t->cfg.rank;
  a.receiver_pid = t->pid;
  a.conn_id = conn_id;
  a.receiver_start = t->start_ticks;
  a.slot_bytes = t->cfg.slot_bytes;
  a.seg_bytes = c->map_bytes;
  a.job_hash = t->job_hash;
  snprintf(a.name, sizeof(a.name), "%s", c->name);
  memcpy(addr, &a, sizeof(a));
  *addrlen = sizeof(a);
  *gc = (struct gcoll_conn){.fifo = f, .peer = peer, .is_send = 0, .ops = t->ops, .impl = c};
  return 0;
}

/* Checks everything a sender can check about an address before mapping. */
static int parse_addr(const struct gcoll_transport *t, int peer, uint32_t conn_id,
                      const void *addr, size_t addrlen, struct shm_addr *a, char *err,
                      size_t errlen) {
  if (addr == NULL || addrlen != sizeof(*a)) {
    snprintf(err, errlen, "shm address of %zu bytes, expected %zu", addrlen, sizeof(*a));
    return -1;
  }
  memcpy(a, addr, sizeof(*a));
  if (a->magic != addr_magic(t) || a->version != SHM_VERSION)
    snprintf(err, errlen, "not a gcoll %s address (version %u)", t->ops->name, a->version);
  else if (a->job_hash != t->job_hash)
    snprintf(err, errlen, "shm address is from another job (job hash %016llx, ours %016llx)",
             (unsigned long long)a->job_hash, (unsigned long long)t->job_hash);
  else if (a->receiver_rank != peer || a->conn_id != conn_id)
    snprintf(err, errlen,
             "shm address is for rank %d connection %u, expected rank %d connection %u",
             a->receiver_rank, a->conn_id, peer, conn_id);
  else if (a->slot_bytes != t->cfg.slot_bytes || a->seg_bytes != segment_bytes(t))
    snprintf(err, errlen, "shm FIFO slot size %llu differs from ours (%zu)",
             (unsigned long long)a->slot_bytes, t->cfg.slot_bytes);
  else if (memchr(a->name, '\0', sizeof(a->name)) == NULL || !gcoll_shm_name_valid(a->name))
    snprintf(err, errlen, "shm address names segment '%.*s', not a gcoll segment name",
             (int)strnlen(a->name, sizeof(a->name)), a->name);
  else
    return 0;
  return -1;
}

/* Maps the receiver's segment and unlinks its name (see the top comment). */
static int map_segment(struct shm_conn *c, const struct shm_addr *a, char *err, size_t errlen) {
  int gone;
  void *map = gcoll_shm_attach(a->name, (size_t)a->seg_bytes, 1, "the receiver", &gone, err,
                               errlen);
  if (map == NULL) return -1;
  /* The pages steps use are mapped now (as MAP_POPULATE would, read faults
   * that map 16 pages each): the header and SIMPLE slots, and the control
   * block. Not the LL region, which the receiver left uncommitted
   * (gcoll_fifo_init_zeroed): mapping it would make the kernel commit it
   * here. Only a speed-up (Linux 5.14). */
  size_t page = (size_t)sysconf(_SC_PAGESIZE), ctl = ctl_offset(c->t) / page * page;
  if (!is_p2p(c->t))
    (void)madvise(map, gcoll_fifo_ll_offset(c->t->cfg.slot_bytes), MADV_POPULATE_READ);
  (void)madvise((char *)map + ctl, (size_t)a->seg_bytes - ctl, MADV_POPULATE_READ);
  c->map = map;
  c->map_bytes = a->seg_bytes;
  return 0;
}

static int shm_send_connect(struct gcoll_transport *t, int peer, uint32_t conn_id,
                            const void *addr, size_t addrlen, struct gcoll_conn *gc,
                            uint64_t deadline_ms, char *err, size_t errlen) {
  struct shm_addr a;
  if (parse_addr(t, peer, conn_id, addr, addrlen, &a, err, errlen) != 0) return -1;
  struct shm_conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  c->t = t;
  c->peer = peer;
  c->is_send = 1;
  c->peer_pid = a.receiver_pid;
  c->peer_start = a.receiver_start;
  snprintf(c->name, sizeof(c->name), "%s", a.name);
  if (map_segment(c, &a, err, errlen) != 0) {
    free(c);
    return -1;
  }
  struct gcoll_fifo *f = is_p2p(t) ? NULL : c->map;
  c->ctl = (struct shm_ctl *)((char *)c->map + ctl_offset(t));
  if ((f != NULL && (f->slot_bytes != t->cfg.slot_bytes ||
                     f->simple_offset != sizeof(struct gcoll_fifo) ||
                     f->ll_offset != f->simple_offset + GCOLL_STEPS * f->slot_bytes)) ||
      c->ctl->magic != SHM_CTL_MAGIC || c->ctl->version != SHM_VERSION) {
    snprintf(err, errlen, "shm segment %s does not hold a gcoll FIFO", a.name);
    shm_conn_free(c);
    return -1;
  }
  if (!gcoll_process_alive(a.receiver_pid, a.receiver_start)) {
    snprintf(err, errlen, "receiver (rank %d, pid %d) is gone", peer, a.receiver_pid);
    shm_conn_free(c);
    return -1;
  }
  if (is_p2p(t)) {
    if (a.receiver_pid != t->pid) {
      if (gcoll_devmem_fifo_open(gpu_of(t), c->ctl->fifo_handle, &c->dev_fifo, err, errlen) != 0) {
        shm_conn_free(c);
        return -1;
      }
      c->dev_fifo_opened = 1;
    } else if (c->ctl->fifo_gpu == t->cfg.gpu) {
      c->dev_fifo = c->ctl->fifo_dev;
    } else {
      snprintf(err, errlen, "ranks of one process on GPUs %d and %d: p2p needs them on one GPU "
               "(GCOLL_P2P_DISABLE=1 uses host memory instead)", t->cfg.gpu, c->ctl->fifo_gpu);
      shm_conn_free(c);
      return -1;
    }
    f = (struct gcoll_fifo *)(uintptr_t)c->dev_fifo;
  }
  atomic_store_explicit(&c->ctl->sender_pid, t->pid, memory_order_relaxed);
  c->ctl->sender_start = t->start_ticks;
  atomic_store_explicit(&c->ctl->sender_attached, 1, memory_order_release);
  wake_attached(c->ctl);
  if (watch_peer(t, c, err, errlen) != 0) {
    release_dev_fifo(c);
    shm_conn_free(c);
    return -1;
  }
  *gc = (struct gcoll_conn){.fifo = f, .peer = peer, .is_send = 1, .ops = t->ops, .impl = c};
  return 0;
}

static void sleep_us(unsigned us) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
  nanosleep(&ts, NULL);
}

static int shm_recv_complete(struct gcoll_transport *t, struct gcoll_conn *gc,
                             uint64_t deadline_ms, char *err, size_t errlen) {
  struct shm_conn *c = gc->impl;
  unsigned pause = 20;
  while (!atomic_load_explicit(&c->ctl->sender_attached, memory_order_acquire)) {
    uint64_t now = gcoll_transport_now_ms();
    if (now >= deadline_ms) {
      snprintf(err, errlen, "rank %d did not attach to shm segment %s before the deadline",
               c->peer, c->name);
      return -1;
    }
    if (wait_attached(c->ctl, deadline_ms - now) != 0) {
      sleep_us(pause);
      if (pause < 2000) pause *= 2;
    }
  }
  /* Normally already done by the sender. */
  shm_unlink(c->name);
  return 0;
}

static void shm_conn_close(struct gcoll_transport *t, struct gcoll_conn *gc) {
  struct shm_conn *c = gc->impl;
  if (c == NULL) return;
  if (c->registered) gcoll_proxy_remove(t->cfg.proxy, &c->entry);
  /* The sender lets go of the receiver's GPU memory before it says so. */
  if (c->is_send) release_dev_fifo(c);
  uint32_t how = atomic_load(t->cfg.abort_word) == 0 ? SHM_CLOSED_CLEAN : SHM_CLOSED_ABORTED;
  atomic_store_explicit(c->is_send ? &c->ctl->sender_blames : &c->ctl->receiver_blames,
                        gcoll_transport_blame(&t->cfg), memory_order_relaxed);
  atomic_store_explicit(c->is_send ? &c->ctl->sender_closed : &c->ctl->receiver_closed, how,
                        memory_order_release);
  if (!c->is_send) {
    shm_unlink(c->name);
    release_dev_fifo(c);
  }
  shm_conn_free(c);
  gc->impl = NULL;
  gc->fifo = NULL;
}

static void shm_fini(struct gcoll_transport *t) {
  if (t == NULL) return;
  struct shm_transport *st = t->impl;
  if (st != NULL) gcoll_devmem_close(st->gpu);
  free(st);
  gcoll_transport_base_fini(t);
  free(t);
}

const struct gcoll_transport_ops gcoll_transport_shm_ops = {
    .name = "shm",
    .init = shm_init,
    .recv_setup = shm_recv_setup,
    .send_connect = shm_send_connect,
    .recv_complete = shm_recv_complete,
    .conn_close = shm_conn_close,
    .fini = shm_fini,
};

const struct gcoll_transport_ops gcoll_transport_p2p_ops = {
    .name = "p2p",
    .init = p2p_init,
    .recv_setup = shm_recv_setup,
    .send_connect = shm_send_connect,
    .recv_complete = shm_recv_complete,
    .conn_close = shm_conn_close,
    .fini = shm_fini,
};
