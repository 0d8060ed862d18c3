/* gcollrun: options, then one poll() loop over the KVS sockets, the ranks'
 * output pipes and a self-pipe for signals, until every rank is reaped.
 * Failure policy: the first rank that fails (non-zero exit or a signal)
 * is named on one line; the others get SIGTERM, then SIGKILL after a grace
 * period; gcollrun exits with that rank's status. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "graph/plan.h"
#include "kernels/wait.h"
#include "launcher/gcollrun.h"
#include "runtime/kvs_server.h"
#include "runtime/settings.h"
#include "runtime/transport.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "(unversioned build)"
#endif

/* SIGTERM to SIGKILL when nothing else is said (--kill-wait). */
#define KILL_WAIT_DEFAULT_S 3.0
/* How long a rank whose KVS connection dropped gets to be reaped before the
 * survivors' waits are failed, so that the rank that really died is the
 * one reported rather than a survivor reacting to it. */
#define LOST_RANK_REAP_MS 300
#define USER_SIGNAL_DEBOUNCE_MS 500

static const char usage_text[] =
    "usage: gcollrun -n N [--nodes K [--distribution block|cyclic]]\n"
    "                [--topo TOPO | --plan FILE | --no-plan] [--no-endpoints]\n"
    "                [--tag-output] [--cpu-bind cores|none]\n"
    "                [--timeout SEC] [--kill-wait SEC] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Starts N ranks of PROGRAM on this host with a gcoll plan and a bootstrap\n"
    "key-value store, as a scheduler would.\n"
    "\n"
    "  -n, --np N          number of ranks (1.." "1024" ")\n"
    "  -N, --nodes K       split the ranks into K virtual nodes (K <= N; default\n"
    "                      1) in blocks, as Slurm's block distribution: node i\n"
    "                      gets N/K ranks, one more for the first N mod K nodes\n"
    "                      (-n 7 --nodes 3: 3+2+2); ranks on different virtual\n"
    "                      nodes talk over TCP as if on different hosts\n"
    "  -m, --distribution block|cyclic\n"
    "                      place the ranks as srun -m does: block (default) or\n"
    "                      cyclic, rank r on node r mod K (the plan lists each\n"
    "                      node's ranks)\n"
    "  -t, --topo TOPO     node topology, a file or a name looked up like\n"
    "                      gcoll-plan does, or auto: this host as detected,\n"
    "                      merged with GCOLL_TOPO_FILE/NCCL_TOPO_FILE if set\n"
    "                      (default $GCOLL_TOPO, else cpu-only)\n"
    "  -p, --plan FILE     use this plan instead of computing one (must have N\n"
    "                      ranks, and K nodes if --nodes is given)\n"
    "      --no-plan       give the ranks no GCOLL_PLAN: they plan the job\n"
    "                      themselves through the store, as under srun\n"
    "                      --mpi=pmi2 without the SPANK plugin (each node's\n"
    "                      topology from $GCOLL_TOPO, else detected)\n"
    "      --no-endpoints  give the ranks no endpoints file and listening\n"
    "                      sockets: they find each other through the store\n"
    "                      (by default each rank inherits a socket bound here\n"
    "                      and reaches its plan neighbours directly)\n"
    "  -T, --tag-output    prefix every output line with \"[RANK] \"\n"
    "      --cpu-bind cores|none\n"
    "                      cores: give each rank an equal block of the CPUs\n"
    "                      gcollrun may use (hyperthreads of a core together)\n"
    "                      and bind it there, as srun --cpu-bind=cores and\n"
    "                      mpirun --bind-to core do; none: every rank may run\n"
    "                      anywhere. Default: cores when there are at least as\n"
    "                      many CPUs as ranks, else none\n"
    "      --timeout SEC   kill the job after SEC seconds (exit status 124)\n"
    "      --kill-wait SEC when ranks are killed (a rank failed, --timeout), the\n"
    "                      seconds between SIGTERM and SIGKILL, as Slurm's\n"
    "                      KillWait: time for the others to report or save\n"
    "                      their state (default 3; 0: SIGKILL at once)\n"
    "  -h, --help          this help\n"
    "  -V, --version       version\n"
    "\n"
    "Each rank gets GCOLL_PLAN, GCOLL_RANK, GCOLL_NRANKS, GCOLL_LOCAL_RANK,\n"
    "GCOLL_NODE, GCOLL_KVS_ADDR, GCOLL_JOB_KEY and GCOLL_SOCKET_IFADDR (yours,\n"
    "else 127.0.0.1: every rank is on this host), with a plan also\n"
    "GCOLL_ENDPOINTS and GCOLL_LISTEN_FD, when bound GCOLL_CPU_BIND=cores,\n"
    "runs in its own process\n"
    "group with stdin from /dev/null. SIGINT/SIGTERM/SIGHUP are forwarded to\n"
    "all ranks; another one (0.5 s later or more) kills them (SIGKILL). If a\n"
    "rank fails the others are killed\n"
    "(SIGTERM, SIGKILL after --kill-wait).\n"
    "\n"
    "Exit status: 0 all ranks succeeded; the first failing rank's status\n"
    "(128+N when killed by signal N); 1 plan or launch failure; 2 usage;\n"
    "124 timeout; 126 PROGRAM not executable; 127 PROGRAM not found.\n";

struct opts {
  long nranks, nnodes;        /* nnodes 0: not given */
  const char *topo, *plan;
  int tag, no_plan, cyclic, no_endpoints;
  enum gcollrun_bind bind;
  double timeout_s;           /* 0: none */
  double kill_wait_s;         /* SIGTERM to SIGKILL */
  char **argv;                /* PROGRAM ARGS... */
};

struct rank {
  pid_t pid;                  /* -1 once reaped (or never started) */
  struct gcollrun_stream out, err;
};

struct job {
  struct opts o;
  cpu_set_t *cpus;            /* per rank, NULL: ranks not bound */
  struct gcollrun_plan plan;
  struct gcollrun_endpoints ep;
  struct kvs_server *kvs;
  struct rank *ranks;
  int nlive;
  int first_fail;             /* rank, -1 none */
  int exit_status;            /* decided by the first failure */
  int killing;                /* 0 no, 1 SIGTERM sent, 2 SIGKILL sent */
  uint64_t kill_at;           /* when SIGTERM turns into SIGKILL */
  uint64_t deadline;          /* --timeout, 0: none */
  int timed_out;
  int user_signals;           /* received so far */
  uint64_t first_signal_at;
};

static int sig_pipe[2] = {-1, -1};

void gcollrun_say(const char *fmt, ...) {
  char msg[2 * GCOLLRUN_ERRLEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  for (char *p = msg; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  fprintf(stderr, GCOLLRUN_PROG ": %s\n", msg);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  char msg[GCOLLRUN_ERRLEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  gcollrun_say("%s (see '" GCOLLRUN_PROG " --help')", msg);
  return GCOLLRUN_EXIT_USAGE;
}

static uint64_t now_ms(void) {
  return gcoll_clock_ms();
}

/* ---- options ------------------------------------------------------------ */

static int parse_count(const char *opt, const char *s, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || errno != 0)
    return usage_error("%s: '%s' is not an integer", opt, s);
  if (v < 1 || v > max) return usage_error("%s: %ld is out of range 1..%ld", opt, v, max);
  *out = v;
  return 0;
}

/* SEC for OPTION: (0, 1e7] seconds, or [0, 1e7] where zero is allowed. */
static int parse_seconds(const char *option, const char *s, int zero_ok, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == '\0' || *end != '\0' || errno != 0 || !isfinite(v) || v < 0 || (v == 0 && !zero_ok) ||
      v > 1e7)
    return usage_error("%s: '%s' is not a number of seconds in %s, 1e7]", option, s,
                       zero_ok ? "[0" : "(0");
  *out = v;
  return 0;
}

static int check_shape(const struct opts *o) {
  if (o->nranks == 0) return usage_error("missing -n N");
  if (o->argv == NULL || o->argv[0] == NULL) return usage_error("missing PROGRAM");
  if (o->plan && o->topo) return usage_error("--plan and --topo exclude each other");
  if (o->no_plan && (o->plan || o->topo))
    return usage_error("--no-plan excludes --plan and --topo (the ranks plan the job: set "
                       "GCOLL_TOPO for their topology)");
  long k = o->nnodes ? o->nnodes : 1;
  if (k > o->nranks) return usage_error("--nodes %ld is more than -n %ld", k, o->nranks);
  /* Block distribution: the first nodes hold the rounded-up share. */
  long most = (o->nranks + k - 1) / k;
  if (!o->plan && most > GCOLL_MAX_LOCAL_RANKS)
    return usage_error("%ld ranks per node, at most %d (use --nodes)", most,
                       GCOLL_MAX_LOCAL_RANKS);
  return 0;
}

enum { OPT_TIMEOUT = 256, OPT_NO_PLAN, OPT_NO_ENDPOINTS, OPT_CPU_BIND, OPT_KILL_WAIT };

static int parse_distribution(const char *s, int *cyclic) {
  if (strcmp(s, "block") == 0 || strcmp(s, "cyclic") == 0) {
    *cyclic = strcmp(s, "cyclic") == 0;
    return 0;
  }
  return usage_error("--distribution '%s': expected block or cyclic", s);
}

/* Returns 0 to run, -1 after --help/--version, or an exit status. */
static int parse_opts(int argc, char **argv, struct opts *o) {
  static const struct option longopts[] = {
      {"np", required_argument, NULL, 'n'},      {"nodes", required_argument, NULL, 'N'},
      {"topo", required_argument, NULL, 't'},    {"plan", required_argument, NULL, 'p'},
      {"tag-output", no_argument, NULL, 'T'},    {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"no-plan", no_argument, NULL, OPT_NO_PLAN},
      {"no-endpoints", no_argument, NULL, OPT_NO_ENDPOINTS},
      {"distribution", required_argument, NULL, 'm'},
      {"cpu-bind", required_argument, NULL, OPT_CPU_BIND},
      {"kill-wait", required_argument, NULL, OPT_KILL_WAIT},
      {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof(*o));
  o->kill_wait_s = KILL_WAIT_DEFAULT_S;
  opterr = 0;
  int c;
  /* '+': options end at PROGRAM, whose own options are its business. */
  while ((c = getopt_long(argc, argv, "+:n:N:m:t:p:ThV", longopts, NULL)) != -1) {
    int rc = 0;
    switch (c) {
    case 'n': rc = parse_count("-n", optarg, GCOLLRUN_MAX_RANKS, &o->nranks); break;
    case 'N': rc = parse_count("--nodes", optarg, GCOLLRUN_MAX_RANKS, &o->nnodes); break;
    case 't': o->topo = optarg; break;
    case 'p': o->plan = optarg; break;
    case 'T': o->tag = 1; break;
    case OPT_TIMEOUT: rc = parse_seconds("--timeout", optarg, 0, &o->timeout_s); break;
    case OPT_KILL_WAIT: rc = parse_seconds("--kill-wait", optarg, 1, &o->kill_wait_s); break;
    case OPT_NO_PLAN: o->no_plan = 1; break;
    case OPT_NO_ENDPOINTS: o->no_endpoints = 1; break;
    case 'm': rc = parse_distribution(optarg, &o->cyclic); break;
    case OPT_CPU_BIND:
      if (gcollrun_bind_parse(optarg, &o->bind) != 0)
        rc = usage_error("--cpu-bind '%s': expected cores or none", optarg);
      break;
    case 'h': fputs(usage_text, stdout); return -1;
    case 'V': printf(GCOLLRUN_PROG " (gcoll) %s\n", PACKAGE_VERSION); return -1;
    case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
    default:
      if (optopt != 0 && optopt < 256) return usage_error("unrecognized option '-%c'", optopt);
      return usage_error("unrecognized option '%s'", argv[optind - 1]);
    }
    if (rc != 0) return rc;
  }
  o->argv = argv + optind;
  return check_shape(o);
}

/* ---- signals ------------------------------------------------------------ */

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  ssize_t unused = write(sig_pipe[1], &b, 1);
  (void)unused;
  errno = saved;
}

static int install_signals(char *err, size_t errlen) {
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    return -1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  static const int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) sigaction(sigs[i], &sa, NULL);
  /* Output to a closed pipe must show up as EPIPE, not kill the launcher
   * while ranks still run. */
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

static const char *signal_name(int sig, char *buf, size_t len) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev)
    snprintf(buf, len, "SIG%s", abbrev);
  else
    snprintf(buf, len, "%d", sig);
  return buf;
}

/* ---- ranks -------------------------------------------------------------- */

static void signal_live(struct job *j, int sig) {
  for (long r = 0; r < j->o.nranks; r++)
    if (j->ranks[r].pid > 0) kill(-j->ranks[r].pid, sig);
}

static void start_killing(struct job *j) {
  if (j->killing) return;
  j->killing = 1;
  j->kill_at = now_ms() + (uint64_t)llround(j->o.kill_wait_s * 1000);
  signal_live(j, SIGTERM);
}

static void escalate_kill(struct job *j) {
  if (j->killing == 2) return;
  j->killing = 2;
  signal_live(j, SIGKILL);
}

static void rank_exited(struct job *j, int r, int status) {
  pid_t pid = j->ranks[r].pid;
  j->ranks[r].pid = -1;
  j->nlive--;
  int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* After a reported failure or a timeout, later deaths are our doing,
   * not news. (Deaths after a user's signal are news: they are the
   * outcome the user asked for.) */
  if (!failed || j->first_fail >= 0 || j->timed_out) return;
  j->first_fail = r;
  /* Ranks with endpoints from the plan never joined the store, which
   * then learns of a death only from us. */
  gcoll_kvs_server_rank_gone(j->kvs, r);
  if (WIFSIGNALED(status)) {
    char name[32];
    j->exit_status = 128 + WTERMSIG(status);
    gcollrun_say("rank %d (pid %ld) killed by signal %s", r, (long)pid,
                 signal_name(WTERMSIG(status), name, sizeof(name)));
  } else {
    j->exit_status = WEXITSTATUS(status);
    gcollrun_say("rank %d (pid %ld) exited with status %d", r, (long)pid, j->exit_status);
  }
  start_killing(j);
}

static int rank_of_pid(const struct job *j, pid_t pid) {
  for (long r = 0; r < j->o.nranks; r++)
    if (j->ranks[r].pid == pid) return (int)r;
  return -1;
}

static void reap_all(struct job *j) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    int r = rank_of_pid(j, pid);
    if (r >= 0) rank_exited(j, r, status);
  }
}

/* KVS callback: rank r's connection dropped without goodbye. Its exit is
 * usually a few microseconds behind; reap it first. */
static void on_rank_lost(void *ctx, int r) {
  struct job *j = ctx;
  if (r < 0 || r >= j->o.nranks || j->ranks[r].pid <= 0) return;
  uint64_t until = now_ms() + LOST_RANK_REAP_MS;
  do {
    int status;
    if (waitpid(j->ranks[r].pid, &status, WNOHANG) == j->ranks[r].pid) {
      rank_exited(j, r, status);
      return;
    }
    nanosleep(&(struct timespec){0, 2000000}, NULL);
  } while (now_ms() < until);
}

static void handle_signals(struct job *j) {
  unsigned char b[64];
  ssize_t n;
  while ((n = read(sig_pipe[0], b, sizeof(b))) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (b[i] == SIGCHLD) continue;
      /* First one: the ranks decide how to stop. A later one: we decide.
       * Signals within USER_SIGNAL_DEBOUNCE_MS count once, because
       * wrappers like timeout(1) deliver to the child and to its group. */
      uint64_t now = now_ms();
      if (j->user_signals++ == 0) {
        j->first_signal_at = now;
        signal_live(j, b[i]);
      } else if (now - j->first_signal_at >= USER_SIGNAL_DEBOUNCE_MS) {
        escalate_kill(j);
      }
    }
  }
  reap_all(j);
}

/* ---- launch ------------------------------------------------------------- */

/* gcollrun's own INFO lines (the plan's cost, the store's load) follow the
 * ranks' GCOLL_DEBUG (or NCCL_DEBUG, gcoll_log_info_enabled), so one switch
 * shows both sides of an init in one log. The store's count is printed
 * rather than written to a file a setting names: no new setting, nothing
 * left behind, and whoever reads the ranks' "init timings" lines
 * (tests/bench/init-scale.sh) reads this one from the same stream. */

static int make_job_key(char *key, size_t len) {
  unsigned char raw[16];
  if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) return -1;
  for (size_t i = 0; i < sizeof(raw) && 2 * i + 2 < len; i++)
    snprintf(key + 2 * i, 3, "%02x", raw[i]);
  return 0;
}

/* Pipes and sockets need about three descriptors per rank, and each rank's
 * listening socket one more until the rank holds it. */
static void raise_fd_limit(long nranks) {
  struct rlimit rl;
  rlim_t want = (rlim_t)(5 * nranks + 64);
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
  rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
  setrlimit(RLIMIT_NOFILE, &rl);
}

/* --cpu-bind: each rank's block of the CPUs gcollrun may use itself. */
static int plan_binding(struct job *j, char *err, size_t errlen) {
  cpu_set_t allowed;
  if (j->o.bind == GCOLLRUN_BIND_NONE) return 0;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    if (j->o.bind == GCOLLRUN_BIND_AUTO) return 0;
    snprintf(err, errlen, "--cpu-bind=cores: cannot read this process's CPUs: %s",
             strerror(errno));
    return -1;
  }
  j->cpus = calloc((size_t)j->o.nranks, sizeof(*j->cpus));
  if (j->cpus == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  int rc = gcollrun_bind_plan(j->o.bind, (int)j->o.nranks, &allowed, j->cpus, err, errlen);
  if (rc <= 0) {
    free(j->cpus);
    j->cpus = NULL;
    return rc;
  }
  if (gcoll_log_info_enabled())
    gcollrun_say("each rank bound to a block of %d%s of the %d CPUs this process may use "
                 "(--cpu-bind=cores; none lets them share)", CPU_COUNT(&j->cpus[0]),
                 CPU_COUNT(&j->cpus[0]) != CPU_COUNT(&j->cpus[j->o.nranks - 1]) ? " or one less"
                                                                                : "",
                 CPU_COUNT(&allowed));
  return 0;
}

static int start_ranks(struct job *j, const char *path, const char *addr, const char *key) {
  char err[GCOLLRUN_ERRLEN];
  for (long r = 0; r < j->o.nranks; r++) {
    struct gcollrun_rank_env e = {.plan_path = j->o.no_plan ? NULL : j->plan.path, .rank = (int)r,
                                  .nranks = (int)j->o.nranks, .local_rank = j->plan.local_of[r],
                                  .node = j->plan.node_of[r], .kvs_addr = addr, .job_key = key,
                                  .endpoints_path = j->ep.path[0] ? j->ep.path : NULL,
                                  .listen_fd = j->ep.fd != NULL ? j->ep.fd[r] : -1,
                                  .cpus = j->cpus != NULL ? &j->cpus[r] : NULL};
    struct gcollrun_child c;
    int rc = gcollrun_spawn(path, j->o.argv, &e, j->o.tag, &c, err, sizeof(err));
    /* The rank holds its own copy now: a connection to a rank that died
     * is then refused, not left in a backlog nobody accepts from. */
    gcollrun_endpoints_release(&j->ep, (int)r);
    if (c.pid > 0) {
      j->ranks[r].pid = c.pid;
      j->nlive++;
    }
    j->ranks[r].out = (struct gcollrun_stream){.fd = c.out_fd, .rank = (int)r, .dest = 1};
    j->ranks[r].err = (struct gcollrun_stream){.fd = c.err_fd, .rank = (int)r, .dest = 2};
    if (rc != 0) {
      gcollrun_say("%s", err);
      j->first_fail = (int)r;
      j->exit_status = rc;
      start_killing(j);
      return -1;
    }
  }
  return 0;
}

/* ---- event loop --------------------------------------------------------- */

static int poll_timeout(const struct job *j) {
  uint64_t now = now_ms(), next = UINT64_MAX;
  if (j->deadline && !j->timed_out) next = j->deadline;
  if (j->killing == 1 && j->kill_at < next) next = j->kill_at;
  int t = gcoll_kvs_server_timeout_ms(j->kvs);
  if (t >= 0 && now + (uint64_t)t < next) next = now + (uint64_t)t;
  if (next == UINT64_MAX) return -1;
  return next <= now ? 0 : next - now > 60000 ? 60000 : (int)(next - now);
}

static void check_deadlines(struct job *j) {
  uint64_t now = now_ms();
  if (j->deadline && !j->timed_out && now >= j->deadline) {
    j->timed_out = 1;
    gcollrun_say("job timed out after %g s; killing %d running rank%s", j->o.timeout_s,
                 j->nlive, j->nlive == 1 ? "" : "s");
    start_killing(j);
  }
  if (j->killing == 1 && now >= j->kill_at) escalate_kill(j);
}

static int add_stream(struct pollfd *fds, struct gcollrun_stream **map, int n,
                      struct gcollrun_stream *s) {
  if (s->fd < 0) return n;
  fds[n] = (struct pollfd){.fd = s->fd, .events = POLLIN};
  map[n] = s;
  return n + 1;
}

static int run_loop(struct job *j) {
  int max = gcoll_kvs_server_max_pollfds(j->kvs) + 1 + 2 * (int)j->o.nranks;
  struct pollfd *fds = calloc((size_t)max, sizeof(*fds));
  struct gcollrun_stream **map = calloc((size_t)max, sizeof(*map));
  if (fds == NULL || map == NULL) {
    free(fds);
    free(map);
    gcollrun_say("out of memory");
    escalate_kill(j);
    return -1;
  }
  while (j->nlive > 0) {
    fds[0] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
    int nk = gcoll_kvs_server_fill_pollfds(j->kvs, fds + 1);
    int n = 1 + nk;
    for (long r = 0; r < j->o.nranks; r++) {
      n = add_stream(fds, map, n, &j->ranks[r].out);
      n = add_stream(fds, map, n, &j->ranks[r].err);
    }
    int rc = poll(fds, (nfds_t)n, poll_timeout(j));
    if (rc < 0 && errno != EINTR) {
      gcollrun_say("poll: %s", strerror(errno));
      escalate_kill(j);
      break;
    }
    /* Exits first: a rank that died is reaped before the KVS tells the
     * survivors, so it is the one reported. */
    handle_signals(j);
    if (rc > 0) {
      gcoll_kvs_server_dispatch(j->kvs, fds + 1, nk);
      for (int i = 1 + nk; i < n; i++)
        if (fds[i].revents) gcollrun_stream_pump(map[i]);
    } else {
      gcoll_kvs_server_dispatch(j->kvs, fds + 1, 0); /* expire waits */
    }
    check_deadlines(j);
  }
  free(fds);
  free(map);
  return 0;
}

/* After the last rank is gone: what is left in the pipes, then EOF. A
 * rank's orphaned child may keep a pipe open; we do not wait for it. */
static void drain_output(struct job *j) {
  for (long r = 0; r < j->o.nranks; r++) {
    struct gcollrun_stream *s[2] = {&j->ranks[r].out, &j->ranks[r].err};
    for (int k = 0; k < 2; k++) {
      if (gcollrun_stream_pump(s[k]) == 0) gcollrun_stream_finish(s[k]);
    }
  }
}

static int launch(struct job *j) {
  char err[GCOLLRUN_ERRLEN], path[4096], key[40], addr[64];
  int rc = gcollrun_find_program(j->o.argv[0], path, sizeof(path), err, sizeof(err));
  if (rc != 0) {
    gcollrun_say("%s", err);
    return rc;
  }
  uint64_t t0 = gcoll_wait_now_ns();
  /* --no-plan: the ranks' layout only; their plan is theirs to make. */
  if (gcollrun_plan_prepare(&j->plan, (int)j->o.nranks, (int)j->o.nnodes, j->o.cyclic,
                            j->o.no_plan ? "cpu-only" : j->o.topo, j->o.plan,
                            err, sizeof(err)) != 0) {
    gcollrun_say("%s", err);
    return GCOLLRUN_EXIT_FAIL;
  }
  if (gcoll_log_info_enabled())
    gcollrun_say("plan for %d ranks on %d nodes %s in %.2f ms: %s", j->plan.nranks,
                 j->plan.nnodes, j->o.plan ? "read" : "computed and written",
                 (double)(gcoll_wait_now_ns() - t0) / 1e6, j->plan.path);
  if (plan_binding(j, err, sizeof(err)) != 0) {
    gcollrun_say("%s", err);
    return GCOLLRUN_EXIT_FAIL;
  }
  if (make_job_key(key, sizeof(key)) != 0) {
    gcollrun_say("cannot make a job key: %s", strerror(errno));
    return GCOLLRUN_EXIT_FAIL;
  }
  /* Endpoints with the plan: the ranks then need the store only for what
   * is not their plan neighbours' business (splits, shrinks). */
  raise_fd_limit(j->o.nranks);
  if (!j->o.no_plan && !j->o.no_endpoints) {
    t0 = gcoll_wait_now_ns();
    if (gcollrun_endpoints_prepare(&j->ep, &j->plan, key, err, sizeof(err)) != 0) {
      gcollrun_say("%s", err);
      return GCOLLRUN_EXIT_FAIL;
    }
    if (gcoll_log_info_enabled())
      gcollrun_say("endpoints of %d ranks bound and written in %.2f ms: %s", j->plan.nranks,
                   (double)(gcoll_wait_now_ns() - t0) / 1e6, j->ep.path);
  }
  struct kvs_server_config cfg = {.nranks = (int)j->o.nranks, .job_key = key,
                                  .rank_lost = on_rank_lost, .ctx = j};
  j->kvs = gcoll_kvs_server_open(&cfg, err, sizeof(err));
  j->ranks = calloc((size_t)j->o.nranks, sizeof(*j->ranks));
  for (long r = 0; j->ranks && r < j->o.nranks; r++) {
    j->ranks[r].pid = -1;
    j->ranks[r].out.fd = j->ranks[r].err.fd = -1;
  }
  if (j->kvs == NULL || j->ranks == NULL || install_signals(err, sizeof(err)) != 0) {
    gcollrun_say("%s", j->ranks ? err : "out of memory");
    return GCOLLRUN_EXIT_FAIL;
  }
  snprintf(addr, sizeof(addr), "127.0.0.1:%u", gcoll_kvs_server_port(j->kvs));
  if (j->o.timeout_s > 0) j->deadline = now_ms() + (uint64_t)llround(j->o.timeout_s * 1000);
  start_ranks(j, path, addr, key);
  run_loop(j);
  drain_output(j);
  if (gcoll_log_info_enabled()) {
    /* gcollrun's own CPU time bounds the store's from above (it also
     * forked the ranks and carried their output): what one central process
     * paid for this job's bootstrap. */
    struct rusage ru;
    double cpu_ms = getrusage(RUSAGE_SELF, &ru) != 0 ? -1.0
                    : (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                          (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
    gcollrun_say("the store served %llu requests for %ld ranks (%zu keys); gcollrun used "
                 "%.1f ms of CPU", (unsigned long long)gcoll_kvs_server_nrequests(j->kvs),
                 j->o.nranks, gcoll_kvs_server_nkeys(j->kvs), cpu_ms);
  }
  /* Ranks unlink their shared-memory segments as soon as both ends map
   * them; a rank killed in between leaves one, whose creator is now gone. */
  if (j->first_fail >= 0 || j->timed_out) gcoll_shm_cleanup();
  if (j->timed_out) return GCOLLRUN_EXIT_TIMEOUT;
  return j->first_fail >= 0 ? j->exit_status : 0;
}

int main(int argc, char **argv) {
  struct job j;
  memset(&j, 0, sizeof(j));
  j.first_fail = -1;
  int rc = parse_opts(argc, argv, &j.o);
  if (rc < 0) return 0;
  if (rc > 0) return rc;
  rc = launch(&j);
  if (j.ranks) {
    for (long r = 0; r < j.o.nranks; r++) {
      gcollrun_stream_finish(&j.ranks[r].out);
      gcollrun_stream_finish(&j.ranks[r].err);
    }
  }
  gcoll_kvs_server_close(j.kvs);
  gcollrun_endpoints_cleanup(&j.ep);
  gcollrun_plan_cleanup(&j.plan);
  free(j.ranks);
  free(j.cpus);
  return rc;
}
