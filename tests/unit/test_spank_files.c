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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "launcher/spank/spank_gcoll.h"

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
  assert_true(c.timeout_s > 0);

  struct { char *arg; const char *says; } bad[] = {
      {"plandr=/x", "unknown plugstack argument 'plandr'"},
      {"plandir=relative", "absolute"},
      {"timeout=0", "timeout="},
      {"timeout=5s", "timeout="},
      {"cache=maybe", "cache="},
      {"novalue", "not key=value"},
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_option),
      cmocka_unit_test(test_step_name),
      cmocka_unit_test(test_private_dir_created_0700),
      cmocka_unit_test(test_private_dir_refuses_symlink),
      cmocka_unit_test(test_private_dir_refuses_open_mode),
      cmocka_unit_test(test_private_dir_ownership),
      cmocka_unit_test(test_write_replaces_link_not_target),
      cmocka_unit_test(test_write_failure_keeps_old),
      cmocka_unit_test(test_read_refuses_link_fifo_and_big),
      cmocka_unit_test(test_remove_follows_nothing),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
