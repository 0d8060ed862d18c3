/* Settings (runtime/settings.h): GCOLL_* over NCCL_* over NCCL's files,
 * NCCL_CONF_FILE in place of ~/.nccl.conf, the files' lines as NCCL reads
 * them and odd files refused without hanging, NCCL values translated into
 * gcoll's, NCCL_SOCKET_IFNAME's interface lists, and the one line per NCCL
 * setting at GCOLL_DEBUG=INFO. HOME is a temporary directory and
 * /etc/nccl.conf is replaced by a file there, so the user's and the
 * system's files neither pollute nor are polluted by the test. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/net_tcp.h"
#include "runtime/settings.h"

/* A read that blocked (a FIFO) would hang the test: SIGALRM ends it. */
#define HANG_LIMIT_S 10

static char dir[64], home_conf[128], sys_conf[128], other_conf[128];

static const char *const vars[] = {
    "GCOLL_ALGO",         "GCOLL_PROTO",         "GCOLL_DEBUG",        "GCOLL_SLOT_BYTES",
    "GCOLL_P2P_DISABLE",  "GCOLL_IB_HCA",        "GCOLL_IB_GID_INDEX", "GCOLL_IB_DISABLE",
    "GCOLL_SOCKET_IFNAME", "GCOLL_SOCKET_IFADDR", "GCOLL_TIMEOUT",     "NCCL_ALGO",
    "NCCL_PROTO",         "NCCL_DEBUG",          "NCCL_BUFFSIZE",      "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",     "NCCL_IB_HCA",         "NCCL_IB_GID_INDEX",  "NCCL_IB_DISABLE",
    "NCCL_NET",           "NCCL_SOCKET_IFNAME",  "NCCL_CONF_FILE",     "NCCL_TIMEOUT",
    "GCOLL_MAX_GPU_CHANNELS", "GCOLL_MIN_GPU_CHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS",
    "NCCL_MIN_NCHANNELS", "NCCL_MIN_CTAS", "GCOLL_TOPO_FILE", "NCCL_TOPO_FILE",
    "GCOLL_NET", "GCOLL_NET_PLUGIN", "NCCL_NET_PLUGIN"};

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  assert_int_equal(fclose(f), 0);
}

/* A clean slate: no variable set, the files (re)read on next use. */
static void fresh(void) {
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
  unlink(home_conf);
  unlink(sys_conf);
  unlink(other_conf);
  gcoll_settings_reset_for_test(sys_conf);
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/gcoll-settings-XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(home_conf, sizeof(home_conf), "%s/.nccl.conf", dir);
  snprintf(sys_conf, sizeof(sys_conf), "%s/etc-nccl.conf", dir);
  snprintf(other_conf, sizeof(other_conf), "%s/other.conf", dir);
  setenv("HOME", dir, 1);
  fresh();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  DIR *d = opendir(dir);
  if (d != NULL) {
    char path[512];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      if (unlink(path) != 0) rmdir(path);
    }
    closedir(d);
  }
  rmdir(dir);
  return 0;
}

static int cancel_alarm(void **state) {
  (void)state;
  alarm(0);
  return 0;
}

/* gcoll_setting(name) is want (NULL: unset). */
static void expect_setting(const char *name, const char *want) {
  const char *got = gcoll_setting(name);
  if (want == NULL) {
    if (got != NULL) fail_msg("%s: want unset, got '%s'", name, got);
  } else {
    if (got == NULL) fail_msg("%s: want '%s', got unset", name, want);
    if (strcmp(got, want) != 0) fail_msg("%s: want '%s', got '%s'", name, want, got);
  }
}

/* NCCL variable nccl=raw alone in the environment gives gcoll=want. */
static void expect_translation(const char *nccl, const char *raw, const char *gcoll,
                               const char *want) {
  fresh();
  setenv(nccl, raw, 1);
  const char *got = gcoll_setting(gcoll);
  if (want == NULL && got != NULL) fail_msg("%s=%s: want %s unset, got '%s'", nccl, raw, gcoll, got);
  if (want != NULL && (got == NULL || strcmp(got, want) != 0))
    fail_msg("%s=%s: want %s=%s, got %s", nccl, raw, gcoll, want, got ? got : "(unset)");
}

/* ---- precedence ---------------------------------------------------------------- */

static void test_precedence(void **state) {
  (void)state;
  char origin[512], want[512];
  fresh();
  expect_setting("GCOLL_ALGO", NULL);
  gcoll_setting_origin("GCOLL_ALGO", origin, sizeof(origin));
  assert_string_equal(origin, "");

  /* The system file alone. */
  fresh();
  write_file(sys_conf, "NCCL_ALGO=Ring\nNCCL_PROTO=LL\n");
  expect_setting("GCOLL_ALGO", "ring");
  gcoll_setting_origin("GCOLL_ALGO", origin, sizeof(origin));
  snprintf(want, sizeof(want), "NCCL_ALGO=Ring (%s:1)", sys_conf);
  assert_string_equal(origin, want);

  /* ~/.nccl.conf over /etc/nccl.conf, key by key. */
  fresh();
  write_file(sys_conf, "NCCL_ALGO=Ring\nNCCL_PROTO=LL\n");
  write_file(home_conf, "NCCL_ALGO=Tree\n");
  expect_setting("GCOLL_ALGO", "tree");
  expect_setting("GCOLL_PROTO", "ll");
  gcoll_setting_origin("GCOLL_ALGO", origin, sizeof(origin));
  snprintf(want, sizeof(want), "NCCL_ALGO=Tree (%s:1)", home_conf);
  assert_string_equal(origin, want);

  /* The files are read once: a change is not seen until the next process. */
  write_file(home_conf, "NCCL_ALGO=Ring\n");
  expect_setting("GCOLL_ALGO", "tree");

  /* NCCL's environment over both files. */
  setenv("NCCL_ALGO", "ring", 1);
  expect_setting("GCOLL_ALGO", "ring");
  gcoll_setting_origin("GCOLL_ALGO", origin, sizeof(origin));
  assert_string_equal(origin, "NCCL_ALGO=ring (environment)");

  /* gcoll's own variable over everything, exactly as given. */
  setenv("GCOLL_ALGO", "Tree", 1);
  expect_setting("GCOLL_ALGO", "Tree");
  gcoll_setting_origin("GCOLL_ALGO", origin, sizeof(origin));
  assert_string_equal(origin, "GCOLL_ALGO");
  /* Empty is unset, as everywhere in gcoll. */
  setenv("GCOLL_ALGO", "", 1);
  expect_setting("GCOLL_ALGO", "ring");
  setenv("NCCL_ALGO", "", 1);
  expect_setting("GCOLL_ALGO", "tree");

  /* NCCL_CONF_FILE replaces ~/.nccl.conf; /etc/nccl.conf is still read. */
  fresh();
  write_file(home_conf, "NCCL_ALGO=Tree\nNCCL_BUFFSIZE=4194304\n");
  write_file(other_conf, "NCCL_ALGO=Ring\n");
  write_file(sys_conf, "NCCL_PROTO=Simple\nNCCL_ALGO=Tree\n");
  setenv("NCCL_CONF_FILE", other_conf, 1);
  expect_setting("GCOLL_ALGO", "ring");
  expect_setting("GCOLL_PROTO", "simple");
  expect_setting("GCOLL_SLOT_BYTES", NULL);

  /* An empty NCCL_CONF_FILE is unset: ~/.nccl.conf again. */
  fresh();
  write_file(home_conf, "NCCL_ALGO=Tree\n");
  setenv("NCCL_CONF_FILE", "", 1);
  expect_setting("GCOLL_ALGO", "tree");

  /* Names without an NCCL counterpart read only the environment. */
  fresh();
  write_file(home_conf, "NCCL_TIMEOUT=5\nGCOLL_TIMEOUT=7\n");
  setenv("NCCL_TIMEOUT", "3", 1);
  expect_setting("GCOLL_TIMEOUT", NULL);
  setenv("GCOLL_TIMEOUT", "9", 1);
  expect_setting("GCOLL_TIMEOUT", "9");
}

/* ---- parsing -------------------------------------------------------------------- */

static void test_parsing(void **state) {
  (void)state;
  char origin[512], want[512];
  fresh();
  const char text[] =
      "# NCCL_PROTO=LL in a comment\n"            /* 1 */
      "   NCCL_ALGO   =   Tree   \n"              /* 2 */
      "garbage without an equals sign\n"          /* 3 */
      "=no key\n"                                 /* 4 */
      "NCCL_DEBUG=\n"                             /* 5: empty, unset */
      "NCCL_BUFFSIZE=8388608\n"                   /* 6 */
      "NCCL_BUFFSIZE=1024\n"                      /* 7: the first line wins */
      "NCCL_SOCKET_IFNAME==eth0\n"                /* 8: value "=eth0" */
      "NCCL_PROTO=LL\r\n"                         /* 9: CRLF */
      "\t# NCCL_P2P_DISABLE=1 indented comment\n" /* 10 */
      "NCCL IB HCA=mlx5_0\n"                      /* 11: not a key */
      "nccl_ib_gid_index=3\n"                     /* 12: names are case-sensitive */
      "\n"                                        /* 13 */
      "NCCL_IB_GID_INDEX=4";                      /* 14: no final newline */
  write_file(home_conf, text);
  /* A line with a NUL in it is skipped, the next one read. */
  FILE *f = fopen(sys_conf, "w");
  assert_non_null(f);
  const char nul[] = "NCCL_IB_HCA=mlx\0_0\nNCCL_P2P_DISABLE=1\n";
  assert_int_equal(fwrite(nul, 1, sizeof(nul) - 1, f), sizeof(nul) - 1);
  assert_int_equal(fclose(f), 0);

  expect_setting("GCOLL_ALGO", "tree");
  expect_setting("GCOLL_PROTO", "ll");
  expect_setting("GCOLL_DEBUG", NULL);
  expect_setting("GCOLL_SLOT_BYTES", "1048576");
  expect_setting("GCOLL_SOCKET_IFNAME", "=eth0");
  expect_setting("GCOLL_IB_HCA", NULL);
  expect_setting("GCOLL_IB_GID_INDEX", "4");
  expect_setting("GCOLL_P2P_DISABLE", "1");
  gcoll_setting_origin("GCOLL_SLOT_BYTES", origin, sizeof(origin));
  snprintf(want, sizeof(want), "NCCL_BUFFSIZE=8388608 (%s:6)", home_conf);
  assert_string_equal(origin, want);
  gcoll_setting_origin("GCOLL_PROTO", origin, sizeof(origin));
  snprintf(want, sizeof(want), "NCCL_PROTO=LL (%s:9)", home_conf);
  assert_string_equal(origin, want);
  gcoll_setting_origin("GCOLL_IB_GID_INDEX", origin, sizeof(origin));
  snprintf(want, sizeof(want), "NCCL_IB_GID_INDEX=4 (%s:14)", home_conf);
  assert_string_equal(origin, want);
  gcoll_setting_origin("GCOLL_P2P_DISABLE", origin, sizeof(origin));
  snprintf(want, sizeof(want), "NCCL_P2P_DISABLE=1 (%s:2)", sys_conf);
  assert_string_equal(origin, want);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Directories, FIFOs, devices and huge files are refused at once; the other
 * file is still read. */
static void test_odd_files(void **state) {
  (void)state;
  alarm(HANG_LIMIT_S);
  char path[160];
  const char *odd[] = {dir, path, "/dev/zero", "/dev/null"};
  snprintf(path, sizeof(path), "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
    fresh();
    write_file(sys_conf, "NCCL_PROTO=LL\n");
    setenv("NCCL_CONF_FILE", odd[i], 1);
    double t0 = now_s();
    expect_setting("GCOLL_ALGO", NULL);
    expect_setting("GCOLL_PROTO", "ll");
    assert_true(now_s() - t0 < 2.0);
  }
  unlink(path);

  /* The FIFO as ~/.nccl.conf, and as /etc/nccl.conf. */
  fresh();
  snprintf(path, sizeof(path), "%s/.nccl.conf", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  gcoll_settings_reset_for_test(path);
  expect_setting("GCOLL_ALGO", NULL);
  unlink(path);

  /* A sparse 4 GiB file is refused by its size, not read. */
  fresh();
  int fd = open(home_conf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "NCCL_ALGO=Tree\n", 15), 15);
  assert_int_equal(ftruncate(fd, 4LL << 30), 0);
  close(fd);
  write_file(sys_conf, "NCCL_PROTO=Simple\n");
  double t0 = now_s();
  expect_setting("GCOLL_ALGO", NULL);
  expect_setting("GCOLL_PROTO", "simple");
  assert_true(now_s() - t0 < 2.0);

  /* Just under the limit: read whole, quickly; an over-long value skipped. */
  fresh();
  size_t size = GCOLL_SETTINGS_FILE_MAX - 64;
  char *big = malloc(size + 1);
  assert_non_null(big);
  size_t n = 0;
  n += (size_t)sprintf(big + n, "NCCL_SOCKET_IFNAME=");
  memset(big + n, 'e', 400000);
  n += 400000;
  big[n++] = '\n';
  while (n + 40 < size - 32) n += (size_t)sprintf(big + n, "NCCL_UNRELATED_%08zu=%s\n", n, "x");
  n += (size_t)sprintf(big + n, "NCCL_ALGO=Tree\n");
  big[n] = '\0';
  write_file(home_conf, big);
  free(big);
  t0 = now_s();
  expect_setting("GCOLL_ALGO", "tree");
  expect_setting("GCOLL_SOCKET_IFNAME", NULL);
  assert_true(now_s() - t0 < 2.0);
  alarm(0);
}

/* ---- translations ----------------------------------------------------------------- */

static void test_translations(void **state) {
  (void)state;
  /* NCCL_ALGO: any case; lists honoured when they leave one of ring, tree. */
  expect_translation("NCCL_ALGO", "Ring", "GCOLL_ALGO", "ring");
  expect_translation("NCCL_ALGO", "TREE", "GCOLL_ALGO", "tree");
  expect_translation("NCCL_ALGO", " Ring , NVLS ", "GCOLL_ALGO", "ring");
  expect_translation("NCCL_ALGO", "Ring,Tree", "GCOLL_ALGO", NULL);
  expect_translation("NCCL_ALGO", "^Ring", "GCOLL_ALGO", "tree");
  expect_translation("NCCL_ALGO", "^NVLS,CollnetDirect", "GCOLL_ALGO", NULL);
  expect_translation("NCCL_ALGO", "^Tree,Ring", "GCOLL_ALGO", NULL);
  expect_translation("NCCL_ALGO", "NVLS", "GCOLL_ALGO", NULL);
  expect_translation("NCCL_ALGO", "PAT,CollnetChain", "GCOLL_ALGO", NULL);
  expect_translation("NCCL_ALGO", "Rign", "GCOLL_ALGO", NULL);
  expect_translation("NCCL_ALGO", "allreduce:tree;broadcast:ring", "GCOLL_ALGO", NULL);
  /* NCCL_PROTO: gcoll has Simple and LL, no LL128. */
  expect_translation("NCCL_PROTO", "LL", "GCOLL_PROTO", "ll");
  expect_translation("NCCL_PROTO", "Simple", "GCOLL_PROTO", "simple");
  expect_translation("NCCL_PROTO", "simple", "GCOLL_PROTO", "simple");
  expect_translation("NCCL_PROTO", "^LL128", "GCOLL_PROTO", NULL);
  expect_translation("NCCL_PROTO", "^LL,LL128", "GCOLL_PROTO", "simple");
  expect_translation("NCCL_PROTO", "^Simple", "GCOLL_PROTO", "ll");
  expect_translation("NCCL_PROTO", "LL128", "GCOLL_PROTO", NULL);
  expect_translation("NCCL_PROTO", "LL,LL128", "GCOLL_PROTO", "ll");
  /* NCCL_DEBUG: levels in gcoll's spelling. */
  expect_translation("NCCL_DEBUG", "info", "GCOLL_DEBUG", "INFO");
  expect_translation("NCCL_DEBUG", "TRACE", "GCOLL_DEBUG", "TRACE");
  expect_translation("NCCL_DEBUG", "WARN", "GCOLL_DEBUG", "WARN");
  expect_translation("NCCL_DEBUG", "loud", "GCOLL_DEBUG", NULL);
  /* NCCL_BUFFSIZE spans 8 steps: one slot, a multiple of 64 in 4 KiB..16 MiB. */
  expect_translation("NCCL_BUFFSIZE", "4194304", "GCOLL_SLOT_BYTES", "524288");
  expect_translation("NCCL_BUFFSIZE", "0x400000", "GCOLL_SLOT_BYTES", "524288");
  expect_translation("NCCL_BUFFSIZE", "1000000", "GCOLL_SLOT_BYTES", "124992");
  expect_translation("NCCL_BUFFSIZE", "16384", "GCOLL_SLOT_BYTES", "4096");
  expect_translation("NCCL_BUFFSIZE", "1073741824", "GCOLL_SLOT_BYTES", "16777216");
  expect_translation("NCCL_BUFFSIZE", "4M", "GCOLL_SLOT_BYTES", NULL);
  expect_translation("NCCL_BUFFSIZE", "-5", "GCOLL_SLOT_BYTES", NULL);
  expect_translation("NCCL_BUFFSIZE", "0", "GCOLL_SLOT_BYTES", NULL);
  /* Channel counts bound device collectives' GPU blocks. */
  expect_translation("NCCL_MAX_NCHANNELS", "8", "GCOLL_MAX_GPU_CHANNELS", "8");
  expect_translation("NCCL_MAX_CTAS", "16", "GCOLL_MAX_GPU_CHANNELS", "16");
  expect_translation("NCCL_MIN_NCHANNELS", "4", "GCOLL_MIN_GPU_CHANNELS", "4");
  expect_translation("NCCL_MIN_CTAS", "2", "GCOLL_MIN_GPU_CHANNELS", "2");
  expect_translation("NCCL_MAX_NCHANNELS", "0", "GCOLL_MAX_GPU_CHANNELS", NULL);
  expect_translation("NCCL_MAX_NCHANNELS", "lots", "GCOLL_MAX_GPU_CHANNELS", NULL);
  expect_translation("NCCL_MIN_CTAS", "5000", "GCOLL_MIN_GPU_CHANNELS", NULL);
  /* Flags. */
  expect_translation("NCCL_P2P_DISABLE", "1", "GCOLL_P2P_DISABLE", "1");
  expect_translation("NCCL_P2P_DISABLE", "0", "GCOLL_P2P_DISABLE", "0");
  expect_translation("NCCL_P2P_DISABLE", "yes", "GCOLL_P2P_DISABLE", NULL);
  expect_translation("NCCL_P2P_LEVEL", "LOC", "GCOLL_P2P_DISABLE", "1");
  expect_translation("NCCL_P2P_LEVEL", "0", "GCOLL_P2P_DISABLE", "1");
  expect_translation("NCCL_P2P_LEVEL", "NVL", "GCOLL_P2P_DISABLE", NULL);
  fresh();
  setenv("NCCL_P2P_DISABLE", "0", 1);
  setenv("NCCL_P2P_LEVEL", "LOC", 1);
  expect_setting("GCOLL_P2P_DISABLE", "0");
  expect_translation("NCCL_IB_DISABLE", "1", "GCOLL_IB_DISABLE", "1");
  expect_translation("NCCL_IB_DISABLE", "0", "GCOLL_IB_DISABLE", NULL);
  expect_translation("NCCL_NET", "Socket", "GCOLL_IB_DISABLE", "1");
  expect_translation("NCCL_NET", "IB", "GCOLL_IB_DISABLE", NULL);
  expect_translation("NCCL_NET", "AWS Libfabric", "GCOLL_IB_DISABLE", NULL);
  /* The network's name and the plugin library, as given (docs/net.md). */
  expect_translation("NCCL_NET", "AWS Libfabric", "GCOLL_NET", "AWS Libfabric");
  expect_translation("NCCL_NET", "Socket", "GCOLL_NET", "Socket");
  expect_translation("NCCL_NET_PLUGIN", "aws-ofi", "GCOLL_NET_PLUGIN", "aws-ofi");
  expect_translation("NCCL_NET_PLUGIN", "/opt/lib/libnccl-net.so", "GCOLL_NET_PLUGIN",
                     "/opt/lib/libnccl-net.so");
  fresh();
  setenv("NCCL_IB_DISABLE", "0", 1);
  setenv("NCCL_NET", "socket", 1);
  expect_setting("GCOLL_IB_DISABLE", "1");
  /* NCCL_IB_HCA: the first entry, device and port. */
  expect_translation("NCCL_IB_HCA", "mlx5_0:1,mlx5_1", "GCOLL_IB_HCA", "mlx5_0:1");
  expect_translation("NCCL_IB_HCA", "=mlx5_1", "GCOLL_IB_HCA", "mlx5_1");
  expect_translation("NCCL_IB_HCA", "mlx5_2:x", "GCOLL_IB_HCA", "mlx5_2");
  expect_translation("NCCL_IB_HCA", "mlx5_0:1:2:3,mlx5_3", "GCOLL_IB_HCA", "mlx5_0:1");
  expect_translation("NCCL_IB_HCA", "^mlx5_0", "GCOLL_IB_HCA", NULL);
  expect_translation("NCCL_IB_HCA", ":1", "GCOLL_IB_HCA", NULL);
  expect_translation("NCCL_IB_GID_INDEX", "3", "GCOLL_IB_GID_INDEX", "3");
  expect_translation("NCCL_IB_GID_INDEX", "-1", "GCOLL_IB_GID_INDEX", NULL);
  expect_translation("NCCL_IB_GID_INDEX", "300", "GCOLL_IB_GID_INDEX", NULL);
  /* NCCL_SOCKET_IFNAME passes as given, unless it lists nothing. */
  expect_translation("NCCL_SOCKET_IFNAME", "^docker,lo", "GCOLL_SOCKET_IFNAME", "^docker,lo");
  expect_translation("NCCL_SOCKET_IFNAME", "^", "GCOLL_SOCKET_IFNAME", NULL);
  expect_translation("NCCL_SOCKET_IFNAME", "=,", "GCOLL_SOCKET_IFNAME", NULL);

  /* As integers: NCCL's translated value, and gcoll's own refused by name. */
  long v = 0;
  char err[512];
  fresh();
  setenv("NCCL_BUFFSIZE", "4194304", 1);
  assert_int_equal(gcoll_setting_long("GCOLL_SLOT_BYTES", 4096, 16L << 20, &v, err, sizeof(err)),
                   0);
  assert_int_equal(v, 524288);
  setenv("GCOLL_SLOT_BYTES", "lots", 1);
  assert_int_equal(gcoll_setting_long("GCOLL_SLOT_BYTES", 4096, 16L << 20, &v, err, sizeof(err)),
                   -1);
  assert_non_null(strstr(err, "GCOLL_SLOT_BYTES='lots'"));
  fresh();
  assert_int_equal(gcoll_setting_long("GCOLL_SLOT_BYTES", 4096, 16L << 20, &v, err, sizeof(err)),
                   1);
}

/* ---- interface lists ----------------------------------------------------------------- */

struct fake_if {
  struct ifaddrs ifa;
  struct sockaddr_storage addr;
  char name[16];
};

static struct ifaddrs *fake_ifs(struct fake_if *f, int n, const char *const spec[][3],
                                const unsigned *flags) {
  for (int i = 0; i < n; i++) {
    memset(&f[i], 0, sizeof(f[i]));
    snprintf(f[i].name, sizeof(f[i].name), "%s", spec[i][0]);
    f[i].ifa.ifa_name = f[i].name;
    f[i].ifa.ifa_flags = flags[i];
    f[i].ifa.ifa_next = i + 1 < n ? &f[i + 1].ifa : NULL;
    if (strcmp(spec[i][1], "4") == 0) {
      struct sockaddr_in *a = (struct sockaddr_in *)&f[i].addr;
      a->sin_family = AF_INET;
      assert_int_equal(inet_pton(AF_INET, spec[i][2], &a->sin_addr), 1);
      f[i].ifa.ifa_addr = (struct sockaddr *)a;
    } else {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&f[i].addr;
      a->sin6_family = AF_INET6;
      assert_int_equal(inet_pton(AF_INET6, spec[i][2], &a->sin6_addr), 1);
      f[i].ifa.ifa_addr = (struct sockaddr *)a;
    }
  }
  return &f[0].ifa;
}

static void test_ifname_lists(void **state) {
  (void)state;
  char err[256];
  int inc = -1;
  struct {
    const char *spec, *name;
    int want, included;
  } cases[] = {
      {"eth", "eth0", 1, 1},        {"eth", "ib0", 0, 1},         {"eth", "et", 0, 1},
      {"=eth0", "eth0", 1, 1},      {"=eth0", "eth01", 0, 1},     {"=eth0,eth1", "eth1", 1, 1},
      {"^docker", "docker0", 0, 0}, {"^docker", "eth0", 1, 0},    {"^=docker0", "docker01", 1, 0},
      {"^=docker0", "docker0", 0, 0}, {"eth0:1234", "eth0", 1, 1}, {"ib,eth", "eth3", 1, 1},
      {",,lo,,", "lo", 1, 1},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int got = gcoll_ifname_match(cases[i].spec, cases[i].name, &inc, err, sizeof(err));
    if (got != cases[i].want || inc != cases[i].included)
      fail_msg("'%s' on %s: %d (included %d), want %d (%d)", cases[i].spec, cases[i].name, got,
               inc, cases[i].want, cases[i].included);
  }
  assert_int_equal(gcoll_ifname_match("^", "eth0", &inc, err, sizeof(err)), -1);
  assert_int_equal(gcoll_ifname_match("", "eth0", &inc, err, sizeof(err)), -1);
  assert_int_equal(gcoll_ifname_match("=:1,", "eth0", &inc, err, sizeof(err)), -1);

  const unsigned up = IFF_UP | IFF_RUNNING, lo = up | IFF_LOOPBACK;
  const char *const host[][3] = {{"lo", "4", "127.0.0.1"},      {"lo", "6", "::1"},
                                 {"docker0", "4", "172.17.0.1"}, {"eth0", "6", "fe80::1"},
                                 {"eth0", "4", "10.1.2.3"},      {"eth1", "6", "2001:db8::1"},
                                 {"ib0", "4", "192.168.7.7"}};
  const unsigned flags[] = {lo, lo, up, up, up, up, 0};
  struct fake_if f[8];
  struct ifaddrs *list = fake_ifs(f, 7, host, flags);
  struct {
    const char *spec, *want;
  } picks[] = {
      {"lo", "lo 127.0.0.1"},         {"=eth1", "eth1 2001:db8::1"},
      {"eth", "eth0 10.1.2.3"},       {"^docker", "eth0 10.1.2.3"},
      {"^eth,ib", "lo 127.0.0.1"},    {"^eth,ib,lo", "docker0 172.17.0.1"},
      {"docker,eth", "docker0 172.17.0.1"}, {"^=eth0,lo,docker", "eth1 2001:db8::1"},
      {"ib", NULL},                   {"=eth", NULL},
      {"^", NULL},
  };
  for (size_t i = 0; i < sizeof(picks) / sizeof(picks[0]); i++) {
    struct gcoll_tcp_endpoint ep;
    char name[32] = "", ip[INET6_ADDRSTRLEN] = "", got[96];
    err[0] = '\0';
    int rc = gcoll_tcp_choose_listed(list, picks[i].spec, &ep, name, sizeof(name), err,
                                     sizeof(err));
    if (rc == 0) {
      assert_non_null(inet_ntop(ep.family, ep.ip, ip, sizeof(ip)));
      snprintf(got, sizeof(got), "%s %s", name, ip);
    }
    if (picks[i].want == NULL) {
      if (rc != -1) fail_msg("'%s' picked %s, want none", picks[i].spec, got);
      assert_true(err[0] != '\0' && strchr(err, '\n') == NULL);
    } else if (rc != 0 || strcmp(got, picks[i].want) != 0) {
      fail_msg("'%s': rc %d, picked '%s' (%s), want '%s'", picks[i].spec, rc, rc == 0 ? got : "",
               err, picks[i].want);
    }
  }

  /* Through the settings: NCCL_SOCKET_IFNAME=lo listens on loopback, where
   * the default would avoid it; GCOLL_SOCKET_IFADDR wins; a list naming no
   * interface is an error that says where it came from. */
  struct gcoll_tcp_endpoint ep;
  char ip[INET6_ADDRSTRLEN];
  fresh();
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  assert_int_equal(gcoll_tcp_pick_address(&ep, err, sizeof(err)), 0);
  assert_non_null(inet_ntop(ep.family, ep.ip, ip, sizeof(ip)));
  assert_string_equal(ip, "127.0.0.1");
  setenv("GCOLL_SOCKET_IFADDR", "127.0.0.2", 1);
  assert_int_equal(gcoll_tcp_pick_address(&ep, err, sizeof(err)), 0);
  assert_non_null(inet_ntop(ep.family, ep.ip, ip, sizeof(ip)));
  assert_string_equal(ip, "127.0.0.2");
  fresh();
  write_file(home_conf, "NCCL_SOCKET_IFNAME==gcoll-none0\n");
  assert_int_equal(gcoll_tcp_pick_address(&ep, err, sizeof(err)), -1);
  char want[512];
  snprintf(want, sizeof(want), "NCCL_SOCKET_IFNAME==gcoll-none0 (%s:1): no interface", home_conf);
  if (strstr(err, want) == NULL) fail_msg("error '%s' lacks '%s'", err, want);
  setenv("GCOLL_SOCKET_IFNAME", "lo", 1);
  assert_int_equal(gcoll_tcp_pick_address(&ep, err, sizeof(err)), 0);
  assert_non_null(inet_ntop(ep.family, ep.ip, ip, sizeof(ip)));
  assert_string_equal(ip, "127.0.0.1");
}

/* ---- logging ----------------------------------------------------------------------- */

/* Runs fn with stderr in a file; returns what it wrote (static buffer). */
static const char *captured(void (*fn)(void)) {
  static char out[8192];
  char path[160];
  snprintf(path, sizeof(path), "%s/stderr", dir);
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  assert_true(saved >= 0 && fd >= 0);
  assert_true(dup2(fd, 2) == 2);
  fn();
  fflush(stderr);
  assert_true(dup2(saved, 2) == 2);
  close(saved);
  ssize_t n = pread(fd, out, sizeof(out) - 1, 0);
  close(fd);
  unlink(path);
  out[n > 0 ? n : 0] = '\0';
  return out;
}

static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static void read_some(void) {
  for (int i = 0; i < 3; i++) {
    gcoll_setting("GCOLL_ALGO");
    gcoll_setting("GCOLL_PROTO");
    gcoll_setting("GCOLL_SLOT_BYTES");
    gcoll_setting("GCOLL_DEBUG");
  }
}

static void test_debug_lines(void **state) {
  (void)state;
  char want[512];
  /* Silent without GCOLL_DEBUG / NCCL_DEBUG. */
  fresh();
  setenv("NCCL_ALGO", "Tree", 1);
  assert_string_equal(captured(read_some), "");

  /* One line per NCCL variable, however often it is read. */
  fresh();
  setenv("GCOLL_DEBUG", "INFO", 1);
  setenv("NCCL_ALGO", "Tree", 1);
  setenv("NCCL_PROTO", "LL128", 1);
  write_file(home_conf, "\nNCCL_BUFFSIZE=4194304\n");
  const char *out = captured(read_some);
  assert_int_equal(count(out, "\n"), 3);
  assert_int_equal(count(out, "NCCL_ALGO=Tree (environment) gives GCOLL_ALGO=tree\n"), 1);
  assert_int_equal(count(out, "NCCL_PROTO=LL128 (environment) ignored: it leaves no protocol "
                              "gcoll has (only simple and ll)\n"),
                   1);
  snprintf(want, sizeof(want), "NCCL_BUFFSIZE=4194304 (%s:2) gives GCOLL_SLOT_BYTES=524288",
           home_conf);
  assert_int_equal(count(out, want), 1);
  assert_int_equal(count(out, "gcoll pid "), 3);

  /* NCCL_DEBUG=INFO turns the lines on as well, and says so; a GCOLL_*
   * variable that wins over NCCL's is named. */
  fresh();
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_ALGO", "Tree", 1);
  setenv("GCOLL_ALGO", "ring", 1);
  out = captured(read_some);
  assert_int_equal(count(out, "NCCL_DEBUG=INFO (environment) gives GCOLL_DEBUG=INFO\n"), 1);
  assert_int_equal(count(out, "NCCL_ALGO=Tree (environment) ignored: GCOLL_ALGO is set\n"), 1);
  assert_int_equal(count(out, "\n"), 2);

  /* A configuration file that exists but cannot be read is named once. */
  fresh();
  setenv("GCOLL_DEBUG", "INFO", 1);
  setenv("NCCL_CONF_FILE", dir, 1);
  out = captured(read_some);
  snprintf(want, sizeof(want), "NCCL configuration file not read: %s: is a directory", dir);
  assert_int_equal(count(out, want), 1);
  assert_int_equal(count(out, "\n"), 1);
}

/* ---- threads -------------------------------------------------------------------------- */

static void *reader(void *arg) {
  const char **got = arg;
  for (int i = 0; i < 2000; i++) {
    const char *v = gcoll_setting("GCOLL_SLOT_BYTES");
    if (i == 0) *got = v;
    else if (v != *got) *got = "differs";
  }
  return NULL;
}

/* NCCL_TOPO_FILE gives GCOLL_TOPO_FILE (a path, as is) from the
 * environment and from NCCL's files; GCOLL_TOPO_FILE wins over both, the
 * environment over the files, and the origin names where it came from. */
static void test_topo_file(void **state) {
  (void)state;
  char origin[512];
  expect_translation("NCCL_TOPO_FILE", "/opt/azure/ndv4-topo.xml", "GCOLL_TOPO_FILE",
                     "/opt/azure/ndv4-topo.xml");
  expect_translation("NCCL_TOPO_FILE", "rel/topo.xml", "GCOLL_TOPO_FILE", "rel/topo.xml");
  gcoll_setting_origin("GCOLL_TOPO_FILE", origin, sizeof(origin));
  assert_string_equal(origin, "NCCL_TOPO_FILE=rel/topo.xml (environment)");
  /* /etc/nccl.conf, as the clouds ship it. */
  fresh();
  write_file(sys_conf, "# Azure\nNCCL_IB_PCI_RELAXED_ORDERING=1\n"
                       "NCCL_TOPO_FILE=/opt/microsoft/ndv4-topo.xml\n");
  expect_setting("GCOLL_TOPO_FILE", "/opt/microsoft/ndv4-topo.xml");
  gcoll_setting_origin("GCOLL_TOPO_FILE", origin, sizeof(origin));
  if (strstr(origin, "etc-nccl.conf:3") == NULL) fail_msg("origin '%s'", origin);
  /* ~/.nccl.conf before /etc/nccl.conf; the environment before both. */
  write_file(home_conf, "NCCL_TOPO_FILE=/home/me/topo.xml\n");
  gcoll_settings_reset_for_test(sys_conf);
  expect_setting("GCOLL_TOPO_FILE", "/home/me/topo.xml");
  setenv("NCCL_TOPO_FILE", "/env/topo.xml", 1);
  expect_setting("GCOLL_TOPO_FILE", "/env/topo.xml");
  /* GCOLL_TOPO_FILE wins over NCCL_TOPO_FILE wherever that is set. */
  setenv("GCOLL_TOPO_FILE", "/gcoll/node.yaml", 1);
  expect_setting("GCOLL_TOPO_FILE", "/gcoll/node.yaml");
  gcoll_setting_origin("GCOLL_TOPO_FILE", origin, sizeof(origin));
  assert_string_equal(origin, "GCOLL_TOPO_FILE");
  unsetenv("NCCL_TOPO_FILE");
  expect_setting("GCOLL_TOPO_FILE", "/gcoll/node.yaml");
  /* Unset everywhere: no file. */
  fresh();
  expect_setting("GCOLL_TOPO_FILE", NULL);
  fresh();
}

/* The first readers race to load the files; all see the same value, one
 * process-lifetime string. */
static void test_threads(void **state) {
  (void)state;
  fresh();
  write_file(sys_conf, "NCCL_BUFFSIZE=2097152\n");
  pthread_t t[8];
  const char *got[8] = {0};
  for (int i = 0; i < 8; i++) assert_int_equal(pthread_create(&t[i], NULL, reader, &got[i]), 0);
  for (int i = 0; i < 8; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < 8; i++) {
    assert_non_null(got[i]);
    assert_string_equal(got[i], "262144");
    assert_ptr_equal(got[i], got[0]);
  }
}

#define TEST(f) cmocka_unit_test_teardown(f, cancel_alarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      TEST(test_precedence), TEST(test_parsing),      TEST(test_odd_files),
      TEST(test_translations), TEST(test_ifname_lists), TEST(test_debug_lines),
      TEST(test_threads),    TEST(test_topo_file),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
