/* Plan and topology files as an attacker or a mistake presents them: FIFOs,
 * devices and directories are refused at once and in one line; huge maps and
 * dense documents cost time and memory in proportion to their size; and the
 * atomic writer's temporaries are unpredictable, private while written, and
 * never left behind. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gcoll.h"
#include "gcoll_plan.h"
#include "graph/plan.h"
#include "graph/topo.h"
#include "graph/topo_lookup.h"
#include "graph/yaml_doc.h"

/* No read here may take more than this; a blocked open would hang forever,
 * so SIGALRM ends the program and the test fails instead of hanging. */
#define HANG_LIMIT_S 10

struct tmpdir {
  char dir[64];
  char path[128];
};

static void tmpdir_make(struct tmpdir *t) {
  snprintf(t->dir, sizeof(t->dir), "/tmp/gcoll-fileio-XXXXXX");
  assert_non_null(mkdtemp(t->dir));
  snprintf(t->path, sizeof(t->path), "%s/plan.yaml", t->dir);
}

static int count_entries(const char *dir) {
  int n = 0;
  DIR *d = opendir(dir);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void tmpdir_remove(struct tmpdir *t) {
  DIR *d = opendir(t->dir);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      char p[512];
      snprintf(p, sizeof(p), "%s/%s", t->dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  assert_int_equal(rmdir(t->dir), 0);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
}

static char *read_text(const char *path) {
  char *buf = NULL, err[512];
  size_t len;
  if (gcoll_read_file(path, 1 << 20, &buf, &len, err, sizeof(err)) != 0) fail_msg("%s", err);
  return buf;
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One line that names the path and says what the file is. */
static void assert_refusal(const char *err, const char *path, const char *what) {
  if (strstr(err, path) == NULL || strstr(err, what) == NULL || strchr(err, '\n') != NULL)
    fail_msg("expected one line naming %s and '%s', got '%s'", path, what, err);
}

/* ---- tests: what a path may lead to -------------------------------------------- */

/* Every reader of a user-given path: plan, rank view, topology, lookup. */
static void assert_all_readers_refuse(const char *path, const char *what) {
  char err[512] = "";
  struct gcoll_rank_view view;
  char *buf = NULL;
  size_t len;
  assert_int_equal(gcoll_read_file(path, 1 << 20, &buf, &len, err, sizeof(err)), -1);
  assert_refusal(err, path, what);
  assert_null(gcoll_plan_read_file(path, err, sizeof(err)));
  assert_refusal(err, path, what);
  assert_int_equal(gcoll_plan_load_rank_view(path, 0, &view, err, sizeof(err)), -1);
  assert_refusal(err, path, what);
  assert_null(gcoll_topo_read_file(path, err, sizeof(err)));
  assert_refusal(err, path, what);
  assert_null(gcoll_topo_load_name(path, err, sizeof(err)));
  assert_refusal(err, path, what);
}

static void test_fifo_refused_at_once(void **state) {
  (void)state;
  struct tmpdir td;
  char link[160];
  tmpdir_make(&td);
  assert_int_equal(mkfifo(td.path, 0600), 0);
  snprintf(link, sizeof(link), "%s/link.yaml", td.dir);
  assert_int_equal(symlink(td.path, link), 0);
  double t0 = wall_seconds();
  alarm(HANG_LIMIT_S);
  assert_all_readers_refuse(td.path, "is a FIFO");
  assert_all_readers_refuse(link, "is a FIFO");
  alarm(0);
  assert_true(wall_seconds() - t0 < HANG_LIMIT_S / 2);
  tmpdir_remove(&td);
}

/* A rank's plan from GCOLL_PLAN, as gcollrun and the SPANK plugin pass it. */
static void test_runtime_plan_fifo(void **state) {
  (void)state;
  struct tmpdir td;
  tmpdir_make(&td);
  assert_int_equal(mkfifo(td.path, 0600), 0);
  assert_int_equal(setenv("GCOLL_PLAN", td.path, 1), 0);
  gcollComm_t comm = NULL;
  alarm(HANG_LIMIT_S);
  assert_int_not_equal(gcollCommInitFromPlan(&comm, NULL, 0), gcollSuccess);
  alarm(0);
  assert_null(comm);
  assert_refusal(gcollGetLastError(NULL), td.path, "is a FIFO");
  unsetenv("GCOLL_PLAN");
  tmpdir_remove(&td);
}

static void test_directory_and_devices_refused(void **state) {
  (void)state;
  struct tmpdir td;
  tmpdir_make(&td);
  alarm(HANG_LIMIT_S);
  assert_all_readers_refuse(td.dir, "is a directory");
  assert_all_readers_refuse("/dev/zero", "is a character device");
  assert_all_readers_refuse("/dev/null", "is a character device");
  alarm(0);
  tmpdir_remove(&td);
}

static void test_missing_file_one_line(void **state) {
  (void)state;
  char err[512] = "";
  assert_null(gcoll_plan_read_file("/nonexistent/gcoll/plan.yaml", err, sizeof(err)));
  assert_refusal(err, "/nonexistent/gcoll/plan.yaml", "No such file");
}

/* Regular files, directly or through a link, are still read whole. */
static void test_regular_file_read(void **state) {
  (void)state;
  struct tmpdir td;
  char link[160];
  tmpdir_make(&td);
  write_text(td.path, "a: 1\n");
  snprintf(link, sizeof(link), "%s/link.yaml", td.dir);
  assert_int_equal(symlink(td.path, link), 0);
  char *a = read_text(td.path), *b = read_text(link);
  assert_string_equal(a, "a: 1\n");
  assert_string_equal(b, "a: 1\n");
  free(a);
  free(b);
  tmpdir_remove(&td);
}

/* ---- tests: cost of hostile documents -------------------------------------------- */

/* "k0: 0\nk1: 1\n..." with `extra` appended. */
static char *many_keys(int n, const char *extra, size_t *len) {
  size_t cap = (size_t)n * 24 + strlen(extra) + 1, at = 0;
  char *s = malloc(cap);
  assert_non_null(s);
  for (int i = 0; i < n; i++) at += (size_t)snprintf(s + at, cap - at, "k%d: %d\n", i, i);
  at += (size_t)snprintf(s + at, cap - at, "%s", extra);
  *len = at;
  return s;
}

/* CPU seconds to parse n distinct keys (best of three, against noise). */
static double parse_keys_cpu(int n) {
  size_t len;
  char *text = many_keys(n, "", &len), err[512] = "";
  double best = 1e9;
  for (int rep = 0; rep < 3; rep++) {
    struct ydoc doc;
    double t0 = cpu_seconds();
    if (gcoll_ydoc_parse(&doc, text, len, "keys", err, sizeof(err)) != 0) fail_msg("%s", err);
    double t = cpu_seconds() - t0;
    assert_int_equal(gcoll_ydoc_count(doc.root), (size_t)n);
    gcoll_ydoc_free(&doc);
    if (t < best) best = t;
  }
  free(text);
  return best;
}

/* 80,000 keys took 12 s with the pairwise duplicate check; and four times
 * the keys must cost about four times as much, not sixteen. */
static void test_many_keys_linear(void **state) {
  (void)state;
  alarm(60);
  double t80k = parse_keys_cpu(80000);
  if (t80k > 1.0) fail_msg("80,000 keys took %.2f s of CPU", t80k);
  double t20k = parse_keys_cpu(20000);
  if (t80k > 8.0 * t20k + 0.05)
    fail_msg("4x the keys cost %.1fx the time (%.3f s vs %.3f s)", t80k / t20k, t80k, t20k);
  alarm(0);
}

static void assert_parse_error(const char *text, size_t len, const char *want) {
  struct ydoc doc;
  char err[512] = "";
  assert_int_equal(gcoll_ydoc_parse(&doc, text, len, "doc", err, sizeof(err)), -1);
  if (strcmp(err, want) != 0) fail_msg("expected '%s', got '%s'", want, err);
}

static void test_duplicate_keys_detected(void **state) {
  (void)state;
  const char *small = "a: 1\nb: 2\nc: {x: 1, x: 2}\n";
  assert_parse_error(small, strlen(small), "doc:3: field 'x' appears twice");
  const char *top = "a: 1\nb: 2\na: 3\n";
  assert_parse_error(top, strlen(top), "doc:3: field 'a' appears twice");
  size_t len;
  /* Large maps: the first repeated entry is named, as in small ones. */
  char *text = many_keys(80000, "k79999: 1\nk5: 2\n", &len);
  assert_parse_error(text, len, "doc:80001: field 'k79999' appears twice");
  free(text);
  text = many_keys(50, "k7: 1\nk3: 2\n", &len);
  assert_parse_error(text, len, "doc:51: field 'k7' appears twice");
  free(text);
}

/* One node per two bytes: refused by the memory budget, long before the
 * node limit, and before the document grows past a small multiple of the
 * file's size. */
static void test_dense_document_refused(void **state) {
  (void)state;
  size_t n = 1 << 20, len = 2 * n + 2;
  char *text = malloc(len + 1), err[512] = "";
  assert_non_null(text);
  text[0] = '[';
  for (size_t i = 0; i < n; i++) memcpy(text + 1 + 2 * i, "1,", 2);
  memcpy(text + len - 2, "1]", 3);
  struct ydoc doc;
  assert_true(n + 1 < YDOC_MAX_NODES);
  assert_int_equal(gcoll_ydoc_parse(&doc, text, len, "dense", err, sizeof(err)), -1);
  if (strstr(err, "dense:1: document needs more than") != err || strchr(err, '\n'))
    fail_msg("unexpected message '%s'", err);
  /* Written less densely the same values load. */
  free(text);
  len = 1 + 6 * (n / 4) + 2;
  text = malloc(len + 1);
  assert_non_null(text);
  text[0] = '[';
  for (size_t i = 0; i < n / 4; i++) memcpy(text + 1 + 6 * i, "12345,", 6);
  memcpy(text + len - 2, "1]", 3);
  if (gcoll_ydoc_parse(&doc, text, len, "sparse", err, sizeof(err)) != 0) fail_msg("%s", err);
  assert_int_equal(gcoll_ydoc_count(doc.root), n / 4 + 1);
  gcoll_ydoc_free(&doc);
  free(text);
}

/* ---- tests: atomic writes ------------------------------------------------------- */

struct probe {
  const char *dir, *final_name;
  int mode;              /* temporary's permission bits while written */
  char tmp_name[256];    /* its name */
  const char *text;
  int fail;              /* 1: write text, then fail */
};

/* Finds the one entry in dir that is not the final file. */
static void find_temp(struct probe *p) {
  DIR *d = opendir(p->dir);
  assert_non_null(d);
  p->tmp_name[0] = '\0';
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, p->final_name))
      snprintf(p->tmp_name, sizeof(p->tmp_name), "%s", e->d_name);
  closedir(d);
}

static int probe_cb(void *stream, const void *arg, char *err, size_t errlen) {
  struct probe *p = (struct probe *)arg;
  FILE *f = stream;
  struct stat st;
  assert_int_equal(fstat(fileno(f), &st), 0);
  p->mode = (int)(st.st_mode & 07777);
  find_temp(p);
  fputs(p->text, f);
  if (p->fail) snprintf(err, errlen, "refused by the test");
  return p->fail ? -1 : 0;
}

static void test_temp_private_and_unpredictable(void **state) {
  (void)state;
  struct tmpdir td;
  char err[512] = "", names[2][256], pidname[64];
  tmpdir_make(&td);
  snprintf(pidname, sizeof(pidname), "plan.yaml.tmp.%ld", (long)getpid());
  for (int i = 0; i < 2; i++) {
    struct probe p = {.dir = td.dir, .final_name = "plan.yaml", .mode = -1,
                      .text = i == 0 ? "first\n" : "second\n"};
    if (gcoll_atomic_write(td.path, probe_cb, &p, err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_int_equal(p.mode, 0600);
    assert_true(strncmp(p.tmp_name, "plan.yaml.tmp.", 14) == 0);
    assert_string_not_equal(p.tmp_name, pidname);
    snprintf(names[i], sizeof(names[i]), "%s", p.tmp_name);
  }
  assert_string_not_equal(names[0], names[1]);
  struct stat st;
  assert_int_equal(stat(td.path, &st), 0);
  assert_int_equal(st.st_mode & 07777, GCOLL_ATOMIC_WRITE_MODE);
  char *text = read_text(td.path);
  assert_string_equal(text, "second\n");
  free(text);
  assert_int_equal(count_entries(td.dir), 1);
  tmpdir_remove(&td);
}

/* fsync is interposed (libgcoll calls it through the PLT) to see which
 * directory is synced, and whether the renamed file was already there. */
static struct {
  const char *dir, *path;
  int dir_syncs, renamed_before_sync;
} fsync_watch;

int fsync(int fd) {
  static int (*real_fsync)(int);
  if (real_fsync == NULL) real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  struct stat st, dir;
  if (fsync_watch.dir != NULL && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) &&
      stat(fsync_watch.dir, &dir) == 0 && st.st_ino == dir.st_ino && st.st_dev == dir.st_dev) {
    fsync_watch.dir_syncs++;
    fsync_watch.renamed_before_sync = access(fsync_watch.path, F_OK) == 0;
  }
  return real_fsync(fd);
}

static void test_directory_synced_after_rename(void **state) {
  (void)state;
  struct tmpdir td;
  char err[512] = "";
  tmpdir_make(&td);
  struct probe p = {.dir = td.dir, .final_name = "plan.yaml", .mode = -1, .text = "x\n"};
  fsync_watch.dir = td.dir;
  fsync_watch.path = td.path;
  int rc = gcoll_atomic_write(td.path, probe_cb, &p, err, sizeof(err));
  fsync_watch.dir = NULL;
  if (rc != 0) fail_msg("%s", err);
  assert_int_equal(fsync_watch.dir_syncs, 1);
  assert_true(fsync_watch.renamed_before_sync);
  tmpdir_remove(&td);
}

static void test_failed_write_leaves_nothing(void **state) {
  (void)state;
  struct tmpdir td;
  char err[512] = "";
  tmpdir_make(&td);
  write_text(td.path, "old\n");
  struct probe p = {.dir = td.dir, .final_name = "plan.yaml", .mode = -1,
                    .text = "new and partial", .fail = 1};
  assert_int_equal(gcoll_atomic_write(td.path, probe_cb, &p, err, sizeof(err)), -1);
  assert_string_equal(err, "refused by the test");
  assert_true(p.tmp_name[0] != '\0');
  assert_int_equal(count_entries(td.dir), 1);
  char *text = read_text(td.path);
  assert_string_equal(text, "old\n");
  free(text);
  /* A fresh target: nothing at all is left. */
  char other[160];
  snprintf(other, sizeof(other), "%s/other.yaml", td.dir);
  p.final_name = "other.yaml";
  assert_int_equal(gcoll_atomic_write(other, probe_cb, &p, err, sizeof(err)), -1);
  assert_int_equal(count_entries(td.dir), 1);
  tmpdir_remove(&td);
}

static void assert_write_refused(const char *path, const char *dir) {
  char err[512] = "";
  struct probe p = {.dir = dir, .final_name = "plan.yaml", .mode = -1, .text = "x\n"};
  assert_int_equal(gcoll_atomic_write(path, probe_cb, &p, err, sizeof(err)), -1);
  assert_int_equal(p.mode, -1); /* the callback never ran */
  assert_refusal(err, path, dir);
  if (strstr(err, ".tmp.") != NULL) fail_msg("names a temporary, not the file: '%s'", err);
}

static void test_write_into_missing_or_readonly_dir(void **state) {
  (void)state;
  struct tmpdir td;
  char missing[160], path[200];
  tmpdir_make(&td);
  snprintf(missing, sizeof(missing), "%s/missing", td.dir);
  snprintf(path, sizeof(path), "%s/plan.yaml", missing);
  assert_write_refused(path, missing);
  if (geteuid() == 0) {
    /* Root writes through permission bits; sysfs refuses new files. */
    assert_write_refused("/sys/gcoll-test-plan.yaml", "/sys");
  } else {
    assert_int_equal(chmod(td.dir, 0500), 0);
    assert_write_refused(td.path, td.dir);
    assert_int_equal(chmod(td.dir, 0700), 0);
  }
  assert_int_equal(count_entries(td.dir), 0);
  tmpdir_remove(&td);
}

/* A failed test leaves its alarm armed; it must not kill the next one. */
static int cancel_alarm(void **state) {
  (void)state;
  alarm(0);
  return 0;
}

#define TEST(f) cmocka_unit_test_teardown(f, cancel_alarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      TEST(test_fifo_refused_at_once),
      TEST(test_runtime_plan_fifo),
      TEST(test_directory_and_devices_refused),
      TEST(test_missing_file_one_line),
      TEST(test_regular_file_read),
      TEST(test_many_keys_linear),
      TEST(test_duplicate_keys_detected),
      TEST(test_dense_document_refused),
      TEST(test_temp_private_and_unpredictable),
      TEST(test_directory_synced_after_rename),
      TEST(test_failed_write_leaves_nothing),
      TEST(test_write_into_missing_or_readonly_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
