/* The SPANK plugin's argument parsing and its file layer, on a real
 * filesystem: planted symlinks, FIFOs, foreign and world-readable
 * directories are refused and nothing outside the job's directory is
 * touched. Ownership cases run only as root (they chown to another uid). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/endpoints.h"
#include "launcher/spank/spank_gcoll.h"
#include "runtime/endpoint_server.h"

#define OTHER_UID 65534

static char base[256];
static int basefd = -1;

static int setup(void **state) {
  (void)state;
  snprintf(base, sizeof(base), "%s/gcoll-spank-test.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(base) == NULL) return -1;
  basefd = open(base, O_RDONLY | O_DIRECTORY);
  return basefd >= 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[400];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
  close(basefd);
  return system(cmd) == 0 ? 0 : -1;
}

static void write_plain(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", base, rel);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static char *slurp(const char *rel) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", base, rel);
  FILE *f = fopen(p, "r");
  if (f == NULL) return NULL;
  static char buf[256];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* ---- arguments ------------------------------------------------------------ */

/* topo_file= and the job's GCOLL_TOPO_FILE / NCCL_TOPO_FILE: the job's
 * GCOLL_TOPO_FILE, then its NCCL_TOPO_FILE, then the plugstack default. */
static void test_topo_file(void **state) {
  (void)state;
  struct gcoll_spank_config c;
  char err[GCOLL_SPANK_ERRLEN];
  const char *from = "x";
  char *none[] = {"plandir=/p"};
  assert_int_equal(gcoll_spank_config_parse(&c, 1, none, err, sizeof(err)), 0);
  assert_string_equal(c.topo_file, "");
  assert_null(gcoll_spank_topo_file(&c, NULL, "", &from));
  assert_string_equal(from, "");
  assert_string_equal(gcoll_spank_topo_file(&c, "", "/job/nccl.xml", &from), "/job/nccl.xml");
  assert_string_equal(from, "NCCL_TOPO_FILE");
  char *site[] = {"plandir=/p", "topo_file=/etc/azure/ndv4-topo.xml"};
  assert_int_equal(gcoll_spank_config_parse(&c, 2, site, err, sizeof(err)), 0);
  assert_string_equal(c.topo_file, "/etc/azure/ndv4-topo.xml");
  assert_string_equal(gcoll_spank_topo_file(&c, NULL, NULL, &from), "/etc/azure/ndv4-topo.xml");
  assert_string_equal(from, "plugstack topo_file=");
  assert_string_equal(gcoll_spank_topo_file(&c, "", "/job/nccl.xml", &from), "/job/nccl.xml");
  assert_string_equal(from, "NCCL_TOPO_FILE");
  assert_string_equal(gcoll_spank_topo_file(&c, "/job/gcoll.yaml", "/job/nccl.xml", &from),
                      "/job/gcoll.yaml");
  assert_string_equal(from, "GCOLL_TOPO_FILE");
}

static void test_config(void **state) {
  (void)state;
  struct gcoll_spank_config c;
  char err[GCOLL_SPANK_ERRLEN];
  char *good[] = {"plandir=/shared/gcoll", "topo=/etc/dgx.yaml", "timeout=7", "cache=no"};
  assert_int_equal(gcoll_spank_config_parse(&c, 4, good, err, sizeof(err)), 0);
  assert_string_equal(c.plandir, "/shared/gcoll");
  assert_string_equal(c.topo, "/etc/dgx.yaml");
  assert_int_equal(c.timeout_s, 7);
  assert_int_equal(c.cache, 0);
  char *defaults[] = {"plandir=/p"};
  assert_int_equal(gcoll_spank_config_parse(&c, 1, defaults, err, sizeof(err)), 0);
  assert_string_equal(c.topo, "auto");
  assert_int_equal(c.cache, 1);
  assert_int_equal(c.endpoints, 1);
  assert_true(c.timeout_s > 0);
  char *noep[] = {"plandir=/p", "endpoints=no"};
  assert_int_equal(gcoll_spank_config_parse(&c, 2, noep, err, sizeof(err)), 0);
  assert_int_equal(c.endpoints, 0);

  struct { char *arg; const char *says; } bad[] = {
      {"plandr=/x", "unknown plugstack argument 'plandr'"},
      {"plandir=relative", "absolute"},
      {"timeout=0", "timeout="},
      {"timeout=5s", "timeout="},
      {"cache=maybe", "cache="},
      {"endpoints=sometimes", "endpoints=sometimes must be yes or no"},
      {"novalue", "not key=value"},
      {"topo_file=rel/topo.xml", "topo_file=rel/topo.xml must be an absolute path"},
      {"topo_file=", "topo_file= must be a non-empty path"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *argv[] = {"plandir=/ok", bad[i].arg};
    err[0] = '\0';
    assert_int_equal(gcoll_spank_config_parse(&c, 2, argv, err, sizeof(err)), -1);
    assert_non_null(strstr(err, bad[i].says));
    assert_null(strchr(err, '\n'));
  }
  assert_int_equal(gcoll_spank_config_parse(&c, 0, NULL, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "plandir= is required"));
}

/* Endpoints (spank_endpoints.c): two nodes of a -m cyclic step bind their
 * tasks' sockets, node 0 merges the fragments into a file every node
 * accepts; a node's own error, a missing fragment and another step's key
 * are refused with one line. */
static void node_of(struct gcoll_gather_node *me, uint32_t index, int r0, int r1) {
  memset(me, 0, sizeof(*me));
  me->node_index = index;
  me->nnodes = 1;                 /* loopback, whatever the host has */
  me->ntasks_total = 4;
  me->ntasks_local = 2;
  me->ranks[0] = r0;
  me->ranks[1] = r1;
}

static void test_endpoints_merge(void **state) {
  (void)state;
  struct gcoll_gather_node n0, n1;
  struct gcoll_spank_endpoints e0, e1;
  char err[GCOLL_SPANK_ERRLEN];
  node_of(&n0, 0, 0, 2);
  node_of(&n1, 1, 1, 3);
  assert_int_equal(gcoll_spank_endpoints_bind(&e0, &n0, err, sizeof(err)), 0);
  assert_int_equal(gcoll_spank_endpoints_bind(&e1, &n1, err, sizeof(err)), 0);
  assert_string_equal(e0.host, "127.0.0.1");
  for (int i = 0; i < 2; i++) {
    int fl = fcntl(e0.fd[i], F_GETFD), on = 0;
    socklen_t len = sizeof(on);
    assert_true(fl >= 0 && (fl & FD_CLOEXEC));
    assert_int_equal(getsockopt(e0.fd[i], SOL_SOCKET, SO_ACCEPTCONN, &on, &len), 0);
    assert_int_equal(on, 1);
    assert_true(e0.port[i] > 0);
  }
  size_t l0, l1, len;
  char *frag[2] = {gcoll_spank_endpoints_fragment(&e0, NULL, &l0),
                   gcoll_spank_endpoints_fragment(&e1, NULL, &l1)};
  assert_non_null(frag[0]);
  assert_non_null(frag[1]);
  int tasks[2] = {2, 2}, slots[4] = {0, 2, 1, 3}, fault = -1;
  const char *key = "0123456789abcdef0123456789abcdef";
  char *text = gcoll_spank_endpoints_merge(frag, tasks, 2, slots, 4, key, &len, &fault, err,
                                           sizeof(err));
  assert_non_null(text);
  assert_int_equal(fault, 0);
  struct gcoll_endpoints *ep = gcoll_endpoints_read_mem(text, len, "t", err, sizeof(err));
  assert_non_null(ep);
  char job[33];
  assert_int_equal(gcoll_endpoints_job_id(key, job, err, sizeof(err)), 0);
  assert_string_equal(ep->job, job);
  assert_int_equal(ep->rank[2].port, e0.port[1]);
  assert_int_equal(ep->rank[1].port, e1.port[0]);
  gcoll_endpoints_free(ep);
  assert_int_equal(gcoll_spank_endpoints_check(text, len, key, &n0, &e0, err, sizeof(err)), 0);
  assert_int_equal(gcoll_spank_endpoints_check(text, len, key, &n1, &e1, err, sizeof(err)), 0);
  /* Node 1's sockets are not node 0's. */
  assert_int_equal(gcoll_spank_endpoints_check(text, len, key, &n0, &e1, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "its socket is"));
  assert_int_equal(gcoll_spank_endpoints_check(text, len, "ffff", &n0, &e0, err, sizeof(err)),
                   -1);
  assert_non_null(strstr(err, "endpoints of another job"));
  free(text);

  /* Node 1 could not bind: its reason, marked as its own. */
  char *bad = gcoll_spank_endpoints_fragment(NULL, "listen: \"no\"\nsecond line", &l1);
  char *frag2[2] = {frag[0], bad};
  assert_null(gcoll_spank_endpoints_merge(frag2, tasks, 2, slots, 4, key, &len, &fault, err,
                                          sizeof(err)));
  assert_int_equal(fault, 1);
  assert_non_null(strstr(err, "node 1: listen: ?no??second line"));
  /* No fragment at all, and one of the wrong task count. */
  char *frag3[2] = {frag[0], NULL};
  assert_null(gcoll_spank_endpoints_merge(frag3, tasks, 2, slots, 4, key, &len, &fault, err,
                                          sizeof(err)));
  assert_int_equal(fault, 0);
  assert_non_null(strstr(err, "node 1 wrote no endpoints"));
  int tasks3[2] = {1, 3};
  assert_null(gcoll_spank_endpoints_merge(frag, tasks3, 2, slots, 4, key, &len, &fault, err,
                                          sizeof(err)));
  assert_non_null(strstr(err, "are not 1 ports"));
  assert_null(strchr(err, '\n'));
  free(bad);
  free(frag[0]);
  free(frag[1]);
  gcoll_spank_endpoints_close(&e0);
  gcoll_spank_endpoints_close(&e1);
  assert_int_equal(e0.ntasks, 0);

  /* An address no interface has: one line, nothing left open. */
  strcpy(n0.job_ifaddr, "203.0.113.7");
  assert_int_equal(gcoll_spank_endpoints_bind(&e0, &n0, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "local task 0 on 203.0.113.7: listen on 203.0.113.7:0: "));
  assert_int_equal(e0.ntasks, 0);
}

static void test_option(void **state) {
  (void)state;
  struct gcoll_spank_option o;
  char err[GCOLL_SPANK_ERRLEN];
  assert_int_equal(gcoll_spank_option_parse(&o, "plan", err, sizeof(err)), 0);
  assert_int_equal(o.mode, GCOLL_MODE_PLAN);
  assert_int_equal(gcoll_spank_option_parse(&o, "plan:strict", err, sizeof(err)), 0);
  assert_int_equal(o.mode, GCOLL_MODE_STRICT);
  assert_int_equal(gcoll_spank_option_parse(&o, "off", err, sizeof(err)), 0);
  assert_int_equal(o.mode, GCOLL_MODE_OFF);
  assert_int_equal(gcoll_spank_option_parse(&o, "/a/plan.yaml", err, sizeof(err)), 0);
  assert_int_equal(o.mode, GCOLL_MODE_FILE);
  assert_string_equal(o.file, "/a/plan.yaml");
  assert_int_equal(gcoll_spank_option_parse(&o, "plan.yaml", err, sizeof(err)), -1);
  assert_non_null(strstr(err, "absolute path"));
  assert_int_equal(gcoll_spank_option_parse(&o, "plan:lenient", err, sizeof(err)), -1);
}

static void test_step_name(void **state) {
  (void)state;
  char n[32];
  assert_int_equal(gcoll_jobdir_step_name(42, 3, n, sizeof(n)), 0);
  assert_string_equal(n, "42.3");
  assert_int_equal(gcoll_jobdir_step_name(42, 0xFFFFFFFBu, n, sizeof(n)), -1); /* batch */
  assert_int_equal(gcoll_jobdir_step_name(42, 0xFFFFFFFCu, n, sizeof(n)), -1); /* extern */
  assert_int_equal(gcoll_jobdir_step_name(0, 1, n, sizeof(n)), -1);
}

/* ---- directories ------------------------------------------------------------ */

static void test_private_dir_created_0700(void **state) {
  (void)state;
  char err[GCOLL_SPANK_ERRLEN];
  int fd;
  assert_int_equal(gcoll_jobdir_open_private(basefd, "1.0", 1, geteuid(), getegid(), &fd, err,
                                             sizeof(err)), 0);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0700);
  assert_int_equal(st.st_uid, geteuid());
  close(fd);
  /* A second node opening the same directory is fine. */
  assert_int_equal(gcoll_jobdir_open_private(basefd, "1.0", 1, geteuid(), getegid(), &fd, err,
                                             sizeof(err)), 0);
  close(fd);
}

static void test_private_dir_refuses_symlink(void **state) {
  (void)state;
  char err[GCOLL_SPANK_ERRLEN], target[400], link[400];
  int fd = -1;
  assert_int_equal(mkdirat(basefd, "elsewhere", 0700), 0);
  snprintf(target, sizeof(target), "%s/elsewhere", base);
  snprintf(link, sizeof(link), "%s/2.0", base);
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(gcoll_jobdir_open_private(basefd, "2.0", 1, geteuid(), getegid(), &fd, err,
                                             sizeof(err)), -1);
  assert_int_equal(fd, -1);
  assert_non_null(strstr(err, "symlink"));
}

static void test_private_dir_refuses_open_mode(void **state) {
  (void)state;
  char err[GCOLL_SPANK_ERRLEN], p[400];
  int fd = -1;
  assert_int_equal(mkdirat(basefd, "3.0", 0700), 0);
  snprintf(p, sizeof(p), "%s/3.0", base);
  assert_int_equal(chmod(p, 0755), 0);
  assert_int_equal(gcoll_jobdir_open_private(basefd, "3.0", 1, geteuid(), getegid(), &fd, err,
                                             sizeof(err)), -1);
  assert_non_null(strstr(err, "mode 0755"));
}

static void test_private_dir_ownership(void **state) {
  (void)state;
  if (geteuid() != 0) {
    printf("skipped: ownership cases need root\n");
    return;
  }
  char err[GCOLL_SPANK_ERRLEN], p[400];
  int fd = -1;
  /* Created by root for a job of another user: handed over to that user. */
  assert_int_equal(gcoll_jobdir_open_private(basefd, "4.0", 1, OTHER_UID, OTHER_UID, &fd, err,
                                             sizeof(err)), 0);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  assert_int_equal(st.st_uid, OTHER_UID);
  close(fd);
  /* Another user's job directory (same name, planted in advance) is
   * refused: a root job must not read or replace what it holds. */
  assert_int_equal(mkdirat(basefd, "5.0", 0700), 0);
  snprintf(p, sizeof(p), "%s/5.0", base);
  assert_int_equal(chown(p, OTHER_UID, OTHER_UID), 0);
  assert_int_equal(gcoll_jobdir_open_private(basefd, "5.0", 1, 0, 0, &fd, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "owned by uid 65534"));
}

/* ---- files ------------------------------------------------------------------ */

static void test_write_replaces_link_not_target(void **state) {
  (void)state;
  char err[GCOLL_SPANK_ERRLEN], target[400], link[400];
  write_plain("victim", "precious\n");
  snprintf(target, sizeof(target), "%s/victim", base);
  snprintf(link, sizeof(link), "%s/plan.yaml", base);
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(gcoll_jobdir_write(basefd, "plan.yaml", "new\n", 4, err, sizeof(err)), 0);
  assert_string_equal(slurp("victim"), "precious\n");
  assert_string_equal(slurp("plan.yaml"), "new\n");
  struct stat st;
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 07777, 0600);
}

static void test_write_failure_keeps_old(void **state) {
  (void)state;
  /* A disk that fills up mid-write: RLIMIT_FSIZE makes write() fail with
   * EFBIG the way ENOSPC would, for root too. The old file must survive
   * whole and no temporary file may be left behind. */
  char err[GCOLL_SPANK_ERRLEN];
  assert_int_equal(mkdirat(basefd, "full", 0700), 0);
  int d = openat(basefd, "full", O_RDONLY | O_DIRECTORY);
  assert_int_equal(gcoll_jobdir_write(d, "plan.yaml", "old", 3, err, sizeof(err)), 0);
  struct rlimit saved, tiny = {.rlim_cur = 4, .rlim_max = RLIM_INFINITY};
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
  tiny.rlim_max = saved.rlim_max;
  signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &tiny), 0);
  int rc = gcoll_jobdir_write(d, "plan.yaml", "much longer than four bytes", 27, err, sizeof(err));
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
  assert_int_equal(rc, -1);
  assert_non_null(strstr(err, "cannot write plan.yaml"));
  assert_null(strchr(err, '\n'));
  assert_string_equal(slurp("full/plan.yaml"), "old");
  DIR *dir = fdopendir(dup(d));
  struct dirent *e;
  int entries = 0;
  while ((e = readdir(dir)) != NULL) entries += e->d_name[0] != '.' || strlen(e->d_name) > 2;
  closedir(dir);
  assert_int_equal(entries, 1); /* plan.yaml only: the temp file is gone */
  close(d);
}

static void test_read_refuses_link_fifo_and_big(void **state) {
  (void)state;
  char err[GCOLL_SPANK_ERRLEN], target[400], link[400], fifo[400];
  char *buf = NULL;
  size_t len = 0;
  write_plain("secret", "root only\n");
  snprintf(target, sizeof(target), "%s/secret", base);
  snprintf(link, sizeof(link), "%s/topo.yaml", base);
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(gcoll_jobdir_read(basefd, "topo.yaml", 1024, &buf, &len, err, sizeof(err)), -1);
  assert_null(buf);
  assert_non_null(strstr(err, "symlink"));
  snprintf(fifo, sizeof(fifo), "%s/fifo.yaml", base);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  /* Would block forever if opened without O_NONBLOCK and never written. */
  assert_int_equal(gcoll_jobdir_read(basefd, "fifo.yaml", 1024, &buf, &len, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "not a regular file"));
  write_plain("big.yaml", "0123456789");
  assert_int_equal(gcoll_jobdir_read(basefd, "big.yaml", 9, &buf, &len, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "more than the 9 allowed"));
  assert_int_equal(gcoll_jobdir_read(basefd, "big.yaml", 10, &buf, &len, err, sizeof(err)), 0);
  assert_int_equal(len, 10);
  assert_string_equal(buf, "0123456789");
  free(buf);
  assert_int_equal(gcoll_jobdir_read(basefd, "absent", 10, &buf, &len, err, sizeof(err)), 1);
}

static void test_remove_follows_nothing(void **state) {
  (void)state;
  char err[GCOLL_SPANK_ERRLEN], p[400], q[400];
  int fd;
  assert_int_equal(mkdirat(basefd, "outside", 0700), 0);
  write_plain("outside/keep", "keep\n");
  assert_int_equal(gcoll_jobdir_open_private(basefd, "7.1", 1, geteuid(), getegid(), &fd, err,
                                             sizeof(err)), 0);
  assert_int_equal(mkdirat(fd, "topo", 0700), 0);
  write_plain("7.1/topo/0.yaml", "x");
  write_plain("7.1/plan.yaml", "y");
  snprintf(p, sizeof(p), "%s/outside", base);
  snprintf(q, sizeof(q), "%s/7.1/link", base);
  assert_int_equal(symlink(p, q), 0);
  close(fd);
  assert_int_equal(gcoll_jobdir_remove(basefd, "7.1", err, sizeof(err)), 0);
  struct stat st;
  assert_int_equal(fstatat(basefd, "7.1", &st, AT_SYMLINK_NOFOLLOW), -1);
  assert_string_equal(slurp("outside/keep"), "keep\n");
  /* A link planted under the job's own name goes, its target stays. */
  snprintf(q, sizeof(q), "%s/7.2", base);
  assert_int_equal(symlink(p, q), 0);
  assert_int_equal(gcoll_jobdir_remove(basefd, "7.2", err, sizeof(err)), 0);
  assert_string_equal(slurp("outside/keep"), "keep\n");
  assert_int_equal(gcoll_jobdir_remove(basefd, "absent", err, sizeof(err)), 0);
}

/* ---- plan directory hardening (issue 13, part 4) ---------------------------- */

static int count_prefix(int dfd, const char *prefix) {
  DIR *dir = fdopendir(dup(dfd));
  struct dirent *e;
  int n = 0;
  while ((e = readdir(dir)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(dir);
  return n;
}

static void test_write_temp_name_unpredictable(void **state) {
  (void)state;
  /* A temporary named after the pid can be taken in advance: a
   * directory under that name (unlinkat cannot remove it) made every
   * write fail. Random names leave nothing to squat. */
  char err[GCOLL_SPANK_ERRLEN], tmp[128];
  assert_int_equal(mkdirat(basefd, "wt", 0700), 0);
  int d = openat(basefd, "wt", O_RDONLY | O_DIRECTORY);
  snprintf(tmp, sizeof(tmp), ".plan.yaml.%ld.tmp", (long)getpid());
  assert_int_equal(mkdirat(d, tmp, 0700), 0);
  mode_t old = umask(0);
  int rc = gcoll_jobdir_write(d, "plan.yaml", "x", 1, err, sizeof(err));
  umask(old);
  assert_int_equal(rc, 0);
  struct stat st;
  assert_int_equal(fstatat(d, "plan.yaml", &st, AT_SYMLINK_NOFOLLOW), 0);
  assert_int_equal(st.st_mode & 07777, 0600); /* even with umask 0 */
  /* plan.yaml and the planted directory only: no temporary left. */
  assert_int_equal(count_prefix(d, ".plan.yaml."), 1);
  close(d);
}

static void test_belongs_to_job(void **state) {
  (void)state;
  assert_true(gcoll_jobdir_belongs_to_job("12.0", 12));
  assert_true(gcoll_jobdir_belongs_to_job("12.cache", 12));
  assert_true(gcoll_jobdir_belongs_to_job(".12.3.0123abcd", 12));
  assert_false(gcoll_jobdir_belongs_to_job("123.0", 12));
  assert_false(gcoll_jobdir_belongs_to_job("12.", 12));
  assert_false(gcoll_jobdir_belongs_to_job("12", 12));
  assert_false(gcoll_jobdir_belongs_to_job("x12.0", 12));
  assert_false(gcoll_jobdir_belongs_to_job(".refused.12.0", 12));
}

static void test_nonce(void **state) {
  (void)state;
  char a[GCOLL_SPANK_NONCE_LEN + 1], b[GCOLL_SPANK_NONCE_LEN + 1], err[GCOLL_SPANK_ERRLEN];
  assert_int_equal(gcoll_jobdir_nonce(a, sizeof(a), err, sizeof(err)), 0);
  assert_int_equal(gcoll_jobdir_nonce(b, sizeof(b), err, sizeof(err)), 0);
  assert_int_equal(strlen(a), GCOLL_SPANK_NONCE_LEN);
  assert_int_equal(strspn(a, "0123456789abcdef"), GCOLL_SPANK_NONCE_LEN);
  assert_string_not_equal(a, b);
  assert_int_equal(gcoll_jobdir_nonce(a, 8, err, sizeof(err)), -1);
}

static void pd_stat(int pd, const char *name, struct stat *st) {
  assert_int_equal(fstatat(pd, name, st, AT_SYMLINK_NOFOLLOW), 0);
}

static void test_user_parent(void **state) {
  (void)state;
  if (geteuid() != 0) {
    printf("skipped: per-uid directories are made by root\n");
    return;
  }
  char err[GCOLL_SPANK_ERRLEN], moved[64], p[400], q[400], name[16];
  struct stat st;
  int fd = -1;
  assert_int_equal(mkdirat(basefd, "pd", 01777), 0);
  snprintf(p, sizeof(p), "%s/pd", base);
  assert_int_equal(chmod(p, 01777), 0);
  int pd = openat(basefd, "pd", O_RDONLY | O_DIRECTORY);
  snprintf(name, sizeof(name), "%u", OTHER_UID);

  /* Missing: made for the user, 0700, nothing moved. */
  assert_int_equal(gcoll_jobdir_user_parent(pd, OTHER_UID, OTHER_UID, moved, sizeof(moved), err,
                                            sizeof(err)), 0);
  assert_string_equal(moved, "");
  pd_stat(pd, name, &st);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(st.st_uid, OTHER_UID);
  assert_int_equal(st.st_mode & 07777, 0700);
  assert_int_equal(gcoll_jobdir_open_user(pd, OTHER_UID, &fd, err, sizeof(err)), 0);
  close(fd);

  /* The user's own, opened up by the user: closed again, content kept. */
  snprintf(q, sizeof(q), "%s/pd/%s", base, name);
  assert_int_equal(chmod(q, 0755), 0);
  assert_int_equal(gcoll_jobdir_open_user(pd, OTHER_UID, &fd, err, sizeof(err)), -1);
  write_plain("pd/65534/7.cache", "mine");
  assert_int_equal(gcoll_jobdir_user_parent(pd, OTHER_UID, OTHER_UID, moved, sizeof(moved), err,
                                            sizeof(err)), 0);
  assert_string_equal(moved, "");
  pd_stat(pd, name, &st);
  assert_int_equal(st.st_mode & 07777, 0700);
  assert_string_equal(slurp("pd/65534/7.cache"), "mine");

  /* Squatted by another user, with a planted plan: moved aside whole, a
   * fresh empty directory takes the name. */
  assert_int_equal(gcoll_jobdir_user_parent(pd, 4242, 4242, moved, sizeof(moved), err,
                                            sizeof(err)), 0);
  assert_int_equal(mkdirat(pd, "4243", 0755), 0);
  write_plain("pd/4243/9.0", "planted");
  snprintf(q, sizeof(q), "%s/pd/4243", base);
  assert_int_equal(chown(q, 4242, 4242), 0);
  assert_int_equal(gcoll_jobdir_open_user(pd, 4243, &fd, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "owned by uid 4242"));
  assert_int_equal(gcoll_jobdir_user_parent(pd, 4243, 4243, moved, sizeof(moved), err,
                                            sizeof(err)), 0);
  assert_int_equal(strncmp(moved, ".4243.refused.", 14), 0);
  pd_stat(pd, moved, &st);
  assert_int_equal(st.st_uid, 4242);
  assert_int_equal(gcoll_jobdir_open_user(pd, 4243, &fd, err, sizeof(err)), 0);
  assert_int_equal(count_prefix(fd, "9.0"), 0);
  close(fd);

  /* A symlink to another user's directory, and a plain file: moved, the
   * link's target untouched. */
  snprintf(p, sizeof(p), "%s/pd/4242", base);
  snprintf(q, sizeof(q), "%s/pd/4244", base);
  assert_int_equal(symlink(p, q), 0);
  assert_int_equal(gcoll_jobdir_user_parent(pd, 4244, 4244, moved, sizeof(moved), err,
                                            sizeof(err)), 0);
  assert_int_not_equal(moved[0], '\0');
  pd_stat(pd, "4242", &st);
  assert_int_equal(st.st_uid, 4242);
  pd_stat(pd, "4244", &st);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(st.st_uid, 4244);
  write_plain("pd/4245", "a file");
  assert_int_equal(gcoll_jobdir_user_parent(pd, 4245, 4245, moved, sizeof(moved), err,
                                            sizeof(err)), 0);
  pd_stat(pd, "4245", &st);
  assert_true(S_ISDIR(st.st_mode));

  /* Root's own 0700 directory: a step of the same user making it at the
   * same time. Handed over, not moved. */
  assert_int_equal(mkdirat(pd, "4246", 0700), 0);
  assert_int_equal(gcoll_jobdir_user_parent(pd, 4246, 4246, moved, sizeof(moved), err,
                                            sizeof(err)), 0);
  assert_string_equal(moved, "");
  pd_stat(pd, "4246", &st);
  assert_int_equal(st.st_uid, 4246);
  close(pd);
}

static void test_fresh_replaces_leftovers(void **state) {
  (void)state;
  char err[GCOLL_SPANK_ERRLEN], nonce[GCOLL_SPANK_NONCE_LEN + 1], seen[GCOLL_SPANK_NONCE_LEN + 1];
  char p[400], q[400];
  int fd = -1, j = -1;
  uid_t u = geteuid();
  gid_t g = getegid();
  assert_int_equal(mkdirat(basefd, "fr", 0700), 0);
  int ud = openat(basefd, "fr", O_RDONLY | O_DIRECTORY);
  /* Not made yet: the other nodes wait. */
  assert_int_equal(gcoll_jobdir_join(ud, "30.0", u, g, &j, seen, sizeof(seen), err, sizeof(err)),
                   1);
  /* An earlier run's complete directory (a requeue). */
  assert_int_equal(mkdirat(ud, "30.0", 0700), 0);
  write_plain("fr/30.0/plan.yaml", "stale plan");
  write_plain("fr/30.0/nonce", "0123456789abcdef0123456789abcdef");
  assert_int_equal(mkdirat(basefd, "fr/30.0/nodes", 0700), 0);
  write_plain("fr/30.0/nodes/1.yaml", "old");
  assert_int_equal(gcoll_jobdir_join(ud, "30.0", u, g, &j, seen, sizeof(seen), err, sizeof(err)),
                   0);
  assert_string_equal(seen, "0123456789abcdef0123456789abcdef");
  close(j);
  assert_int_equal(gcoll_jobdir_nonce(nonce, sizeof(nonce), err, sizeof(err)), 0);
  assert_int_equal(gcoll_jobdir_fresh(ud, "30.0", nonce, u, g, &fd, err, sizeof(err)), 0);
  assert_null(slurp("fr/30.0/plan.yaml"));
  assert_null(slurp("fr/30.0/nodes/1.yaml"));
  assert_string_equal(slurp("fr/30.0/nonce"), nonce);
  struct stat st;
  assert_int_equal(fstatat(fd, "topo", &st, AT_SYMLINK_NOFOLLOW), 0);
  assert_int_equal(st.st_mode & 07777, 0700);
  assert_int_equal(fstat(fd, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0700);
  assert_int_equal(count_prefix(ud, ".30.0."), 0); /* the temporary was renamed */
  /* The other nodes now see the fresh nonce, and notice a replacement. */
  assert_int_equal(gcoll_jobdir_join(ud, "30.0", u, g, &j, seen, sizeof(seen), err, sizeof(err)),
                   0);
  assert_string_equal(seen, nonce);
  close(j);
  close(fd);

  /* A link left under the step's name: removed, its target kept. */
  assert_int_equal(mkdirat(basefd, "fr-target", 0700), 0);
  write_plain("fr-target/keep", "keep");
  snprintf(p, sizeof(p), "%s/fr-target", base);
  snprintf(q, sizeof(q), "%s/fr/31.0", base);
  assert_int_equal(symlink(p, q), 0);
  assert_int_equal(gcoll_jobdir_join(ud, "31.0", u, g, &j, seen, sizeof(seen), err, sizeof(err)),
                   -1);
  assert_int_equal(gcoll_jobdir_fresh(ud, "31.0", nonce, u, g, &fd, err, sizeof(err)), 0);
  close(fd);
  assert_string_equal(slurp("fr-target/keep"), "keep");
  assert_int_equal(fstatat(ud, "31.0", &st, AT_SYMLINK_NOFOLLOW), 0);
  assert_true(S_ISDIR(st.st_mode));

  /* A directory without a nonce (not node 0's) is not joined; a
   * malformed nonce is refused. */
  assert_int_equal(mkdirat(ud, "32.0", 0700), 0);
  assert_int_equal(gcoll_jobdir_join(ud, "32.0", u, g, &j, seen, sizeof(seen), err, sizeof(err)),
                   1);
  write_plain("fr/32.0/nonce", "../../etc/passwd");
  assert_int_equal(gcoll_jobdir_join(ud, "32.0", u, g, &j, seen, sizeof(seen), err, sizeof(err)),
                   -1);
  assert_int_equal(j, -1);
  close(ud);
}

static void test_read_absolute_fifo(void **state) {
  (void)state;
  /* --gcoll=/path/to/fifo: refused at once, not read (it would block). */
  char err[GCOLL_SPANK_ERRLEN], p[400];
  char *buf = NULL;
  size_t len = 0;
  snprintf(p, sizeof(p), "%s/given.fifo", base);
  assert_int_equal(mkfifo(p, 0600), 0);
  assert_int_equal(gcoll_jobdir_read(AT_FDCWD, p, 1024, &buf, &len, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "not a regular file"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config), cmocka_unit_test(test_topo_file),
      cmocka_unit_test(test_option),
      cmocka_unit_test(test_step_name),
      cmocka_unit_test(test_endpoints_merge),
      cmocka_unit_test(test_private_dir_created_0700),
      cmocka_unit_test(test_private_dir_refuses_symlink),
      cmocka_unit_test(test_private_dir_refuses_open_mode),
      cmocka_unit_test(test_private_dir_ownership),
      cmocka_unit_test(test_write_replaces_link_not_target),
      cmocka_unit_test(test_write_failure_keeps_old),
      cmocka_unit_test(test_read_refuses_link_fifo_and_big),
      cmocka_unit_test(test_remove_follows_nothing),
      cmocka_unit_test(test_write_temp_name_unpredictable),
      cmocka_unit_test(test_belongs_to_job),
      cmocka_unit_test(test_nonce),
      cmocka_unit_test(test_user_parent),
      cmocka_unit_test(test_fresh_replaces_leftovers),
      cmocka_unit_test(test_read_absolute_fifo),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
