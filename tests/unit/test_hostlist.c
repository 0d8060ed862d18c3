/* Slurm host lists: expansion semantics, errors, and the round trip
 * compress -> expand on random host sequences, with count, nth and
 * single_run checked against the expansion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/plan.h"
#include "testutil.h"

#define MAX_SEQ 96

/* ---- helpers ------------------------------------------------------------ */

static int one_line(const char *s) { return strchr(s, '\n') == NULL && strchr(s, '\r') == NULL; }

/* Expands `list` and checks it gives exactly want[0..n), and that count and
 * nth agree with the expansion for every index. */
static void assert_expands_to(const char *list, char *const *want, int n) {
  char **hosts = NULL, err[256] = "", name[GCOLL_PLAN_HOST_MAX];
  int nh = -1, cnt = -1;
  if (gcoll_hostlist_expand(list, &hosts, &nh, err, sizeof(err)) != 0)
    fail_msg("expand '%s' failed: %s", list, err);
  if (nh != n) fail_msg("'%s' expands to %d hosts, want %d", list, nh, n);
  for (int i = 0; i < n; i++)
    if (strcmp(hosts[i], want[i]) != 0)
      fail_msg("'%s' host %d is '%s', want '%s'", list, i, hosts[i], want[i]);
  assert_int_equal(gcoll_hostlist_count(list, &cnt, err, sizeof(err)), 0);
  assert_int_equal(cnt, n);
  for (int i = 0; i < n; i++) {
    if (gcoll_hostlist_nth(list, i, name, sizeof(name), err, sizeof(err)) != 0)
      fail_msg("nth('%s', %d) failed: %s", list, i, err);
    assert_string_equal(name, want[i]);
  }
  gcoll_hostlist_free(hosts, nh);
}

/* A list of names built with printf formats, freed with free_names. */
static char **names_new(int n) {
  char **v = calloc((size_t)n + 1, sizeof(*v));
  assert_non_null(v);
  return v;
}

static void names_set(char **v, int i, const char *fmt, ...) {
  char buf[GCOLL_PLAN_HOST_MAX * 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  v[i] = strdup(buf);
  assert_non_null(v[i]);
}

static void names_free(char **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* Whether a host list has a comma outside brackets (more than one item). */
static int has_top_level_comma(const char *s) {
  int depth = 0;
  for (; *s; s++) {
    if (*s == '[') depth++;
    else if (*s == ']') depth--;
    else if (*s == ',' && depth == 0) return 1;
  }
  return 0;
}

/* Expect every reader to reject `list` with a one-line message. */
static void assert_rejected(const char *list) {
  char **hosts = (char **)0x1, err[256], name[64];
  int n = -7;
  err[0] = '\0';
  if (gcoll_hostlist_expand(list, &hosts, &n, err, sizeof(err)) != -1)
    fail_msg("expand accepted bad list '%s'", list);
  if (err[0] == '\0' || !one_line(err)) fail_msg("bad message for '%s': '%s'", list, err);
  assert_ptr_equal(hosts, (char **)0x1);   /* outputs untouched on error */
  assert_int_equal(n, -7);
  err[0] = '\0';
  assert_int_equal(gcoll_hostlist_count(list, &n, err, sizeof(err)), -1);
  assert_true(err[0] != '\0' && one_line(err));
  err[0] = '\0';
  assert_int_equal(gcoll_hostlist_nth(list, 0, name, sizeof(name), err, sizeof(err)), -1);
  assert_true(err[0] != '\0' && one_line(err));
}

/* ---- expansion semantics ----------------------------------------------- */

static void test_range_keeps_padding(void **state) {
  (void)state;
  /* Every width 1..6 for ranges that stay within the width and ranges that
   * grow past it ("n[8-12]" prints n8..n12, "n[098-101]" keeps 3 digits). */
  for (int width = 1; width <= 6; width++) {
    for (int lo = 0; lo < 130; lo += 7) {
      int hi = lo + (lo % 5) * 3;
      char list[64];
      snprintf(list, sizeof(list), "n[%0*d-%0*d]", width, lo, width, hi);
      int n = hi - lo + 1;
      char **want = names_new(n);
      for (int i = 0; i < n; i++) names_set(want, i, "n%0*d", width, lo + i);
      assert_expands_to(list, want, n);
      names_free(want, n);
    }
  }
}

static void test_items_and_mixed_groups(void **state) {
  (void)state;
  /* "n[1-3,7]", plain items, a suffix after the group, several items. */
  const char *list = "n[1-3,7],login,gpu[01-02]-ib,head-a,x[9-11]y";
  const char *parts[] = {"n1", "n2", "n3", "n7", "login", "gpu01-ib", "gpu02-ib", "head-a",
                         "x9y", "x10y", "x11y"};
  int n = (int)(sizeof(parts) / sizeof(parts[0]));
  char **want = names_new(n);
  for (int i = 0; i < n; i++) names_set(want, i, "%s", parts[i]);
  assert_expands_to(list, want, n);
  names_free(want, n);

  char *abc[] = {"a", "b", "c"};
  assert_expands_to("a,b,c", abc, 3);
  char *single[] = {"n0042"};
  assert_expands_to("n[0042]", single, 1);
  assert_expands_to("n0042", single, 1);
}

static void test_multiple_groups_last_varies_fastest(void **state) {
  (void)state;
  /* Random shapes of 1..4 groups: the expansion is the cartesian product
   * with the last group varying fastest, as in Slurm. */
  unsigned long long seed = 0x5eedULL;
  for (int iter = 0; iter < 200; iter++) {
    int ng = 1 + (int)(test_rand(&seed) % 4);
    int lo[4], cnt[4], w[4], total = 1;
    char list[256];
    size_t o = 0;
    for (int g = 0; g < ng; g++) {
      lo[g] = (int)(test_rand(&seed) % 120);
      cnt[g] = 1 + (int)(test_rand(&seed) % 4);
      w[g] = 1 + (int)(test_rand(&seed) % 3);
      total *= cnt[g];
      o += (size_t)snprintf(list + o, sizeof(list) - o, "%c[%0*d-%0*d]", 'a' + g, w[g], lo[g],
                            w[g], lo[g] + cnt[g] - 1);
    }
    snprintf(list + o, sizeof(list) - o, "%s", iter % 2 ? "-ib" : "");
    char **want = names_new(total);
    for (int k = 0; k < total; k++) {
      char buf[256];
      size_t b = 0;
      int rest = k, idx[4];
      for (int g = ng - 1; g >= 0; g--) {
        idx[g] = rest % cnt[g];
        rest /= cnt[g];
      }
      for (int g = 0; g < ng; g++)
        b += (size_t)snprintf(buf + b, sizeof(buf) - b, "%c%0*d", 'a' + g, w[g], lo[g] + idx[g]);
      snprintf(buf + b, sizeof(buf) - b, "%s", iter % 2 ? "-ib" : "");
      names_set(want, k, "%s", buf);
    }
    assert_expands_to(list, want, total);
    names_free(want, total);
  }
}

static void test_rejects_bad_lists(void **state) {
  (void)state;
  const char *bad[] = {
    "", ",", "n1,", ",n1", "n1,,n2", "n[3-1]", "n[1-", "n[1-3", "n1]", "n[a-b]", "n[]",
    "n[1-]", "n[-3]", "n[1--3]", "n[,1]", "n[1,]", "n[1,,2]", "n[[1]]", "n[1]]",
    "n 1", " n1", "n1 ", "n1, n2", "n[1, 2]", "n[ 1]", "n\t1", "n1\nn2", "n[1-2]x\n",
    "n[x]", "n[1-2a]",
    /* 19-digit numbers would not fit the 18-digit limit */
    "n[1234567890123456789]", "n[0-1234567890123456789]",
    /* more hosts than GCOLL_MAX_NODES, by one range, by products, by sums */
    "n[0-1048576]", "n[0-999999999]", "n[0-999999999999999999]",
    "a[0-1023]b[0-1024]", "n[0-524287],m[0-524288]", "a[1-2]b[1-2]c[1-2]d[1-2]e[1-2]f[1-2]g[1-2]h[1-2]i[1-2]",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) assert_rejected(bad[i]);
  char err[128] = "";
  int n;
  assert_int_equal(gcoll_hostlist_count(NULL, &n, err, sizeof(err)), -1);
  assert_true(err[0] != '\0');
}

static void test_limits(void **state) {
  (void)state;
  char err[256] = "", name[64];
  int n = 0;
  /* Exactly GCOLL_MAX_NODES is allowed; counting and indexing work without
   * expanding. */
  assert_int_equal(gcoll_hostlist_count("n[0-1048575]", &n, err, sizeof(err)), 0);
  assert_int_equal(n, GCOLL_MAX_NODES);
  assert_int_equal(gcoll_hostlist_nth("n[0-1048575]", GCOLL_MAX_NODES - 1, name, sizeof(name),
                                      err, sizeof(err)), 0);
  assert_string_equal(name, "n1048575");
  assert_int_equal(gcoll_hostlist_count("a[0-1023]b[0-1023]", &n, err, sizeof(err)), 0);
  assert_int_equal(n, 1024 * 1024);
  assert_int_equal(gcoll_hostlist_nth("a[0-1023]b[0-1023]", 1025, name, sizeof(name), err,
                                      sizeof(err)), 0);
  assert_string_equal(name, "a1b1");
  /* 8 groups are allowed, the 9th is not (test_rejects_bad_lists) */
  assert_int_equal(gcoll_hostlist_count("a[1-2]b[1-2]c[1-2]d[1-2]e[1-2]f[1-2]g[1-2]h[1-2]", &n,
                                        err, sizeof(err)), 0);
  assert_int_equal(n, 256);
  /* 18 digits is the widest number */
  assert_int_equal(gcoll_hostlist_nth("n[999999999999999998-999999999999999999]", 1, name,
                                      sizeof(name), err, sizeof(err)), 0);
  assert_string_equal(name, "n999999999999999999");

  /* nth: index out of range and a buffer too small are errors */
  for (int idx = -2; idx <= 5; idx++) {
    int rc = gcoll_hostlist_nth("n[1-4]", idx, name, sizeof(name), err, sizeof(err));
    assert_int_equal(rc, idx >= 0 && idx < 4 ? 0 : -1);
  }
  err[0] = '\0';
  assert_int_equal(gcoll_hostlist_nth("node[100-200]", 3, name, 4, err, sizeof(err)), -1);
  assert_true(err[0] != '\0' && one_line(err));
  assert_int_equal(gcoll_hostlist_nth("node[100-200]", 3, name, 8, err, sizeof(err)), 0);
  assert_string_equal(name, "node103");

  /* Names up to GCOLL_PLAN_HOST_MAX - 1 characters expand; longer fail. */
  char stem[GCOLL_PLAN_HOST_MAX], list[GCOLL_PLAN_HOST_MAX + 16], expect[GCOLL_PLAN_HOST_MAX + 1];
  size_t stemlen = GCOLL_PLAN_HOST_MAX - 2;   /* + one digit = the longest name */
  memset(stem, 'h', stemlen);
  stem[stemlen] = '\0';
  snprintf(list, sizeof(list), "%s[7]", stem);
  snprintf(expect, sizeof(expect), "%s7", stem);
  assert_int_equal(strlen(expect), GCOLL_PLAN_HOST_MAX - 1);
  char *one[1] = {expect};
  assert_expands_to(list, one, 1);
  snprintf(list, sizeof(list), "ok,%s[9-10]", stem);  /* the second name is one too long */
  char **hosts = NULL;
  err[0] = '\0';
  assert_int_equal(gcoll_hostlist_expand(list, &hosts, &n, err, sizeof(err)), -1);
  assert_true(err[0] != '\0' && one_line(err));
  assert_null(hosts);
  assert_int_equal(gcoll_hostlist_nth(list, 1, expect, GCOLL_PLAN_HOST_MAX, err, sizeof(err)), 0);
  assert_int_equal(gcoll_hostlist_nth(list, 2, expect, GCOLL_PLAN_HOST_MAX, err, sizeof(err)), -1);
}

/* ---- compression --------------------------------------------------------- */

static void test_compress_rejects_bad_names(void **state) {
  (void)state;
  char *ok[] = {"n1", "n2"};
  assert_null(gcoll_hostlist_compress(ok, 0));
  assert_null(gcoll_hostlist_compress(ok, -1));
  assert_null(gcoll_hostlist_compress(NULL, 2));
  const char *bad[] = {"", "a,b", "a[1]", "a]", "a b", "a\tb", "a\n"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *v[3] = {"n1", (char *)bad[i], "n3"};
    assert_null(gcoll_hostlist_compress(v, 3));
    assert_int_equal(gcoll_hostlist_single_run(v + 1, 2, 1000), 0);
  }
  char *withnull[2] = {"n1", NULL};
  assert_null(gcoll_hostlist_compress(withnull, 2));
  char toolong[GCOLL_PLAN_HOST_MAX + 1];
  memset(toolong, 'x', GCOLL_PLAN_HOST_MAX);
  toolong[GCOLL_PLAN_HOST_MAX] = '\0';
  char *v[1] = {toolong};
  assert_null(gcoll_hostlist_compress(v, 1));
}

/* A consecutive run of one pattern compresses to exactly prefix[lo-hi]suffix. */
static void test_compress_runs_are_ranges(void **state) {
  (void)state;
  const char *pre[] = {"n", "gpu", "rack3-n", ""};
  const char *suf[] = {"", "-ib", ".dc"};
  unsigned long long seed = 77;
  for (int iter = 0; iter < 300; iter++) {
    const char *p = pre[test_rand(&seed) % 4], *s = suf[test_rand(&seed) % 3];
    int w = 1 + (int)(test_rand(&seed) % 4);
    int lo = (int)(test_rand(&seed) % 1200), n = 2 + (int)(test_rand(&seed) % 40);
    char **v = names_new(n);
    for (int i = 0; i < n; i++) names_set(v, i, "%s%0*d%s", p, w, lo + i, s);
    char want[128];
    snprintf(want, sizeof(want), "%s[%0*d-%0*d]%s", p, w, lo, w, lo + n - 1, s);
    char *got = gcoll_hostlist_compress(v, n);
    assert_non_null(got);
    assert_string_equal(got, want);
    assert_expands_to(got, v, n);
    assert_int_equal(gcoll_hostlist_single_run(v, n, strlen(got)), n);
    if (strlen(got) > 0)
      assert_true(gcoll_hostlist_single_run(v, n, strlen(got) - 1) < n);
    free(got);
    names_free(v, n);
  }
}

/* Random host sequences: prefixes from a small set, numbers with random
 * padding, ascending runs with gaps, duplicates, shuffles, names without
 * digits, numbers too long for a range. */
static int random_sequence(unsigned long long *seed, char **v) {
  static const char *pre[] = {"n", "gpu", "node-", "rack1n", "a.b", "", "x9y", "N"};
  static const char *suf[] = {"", "", "-ib", ".cluster", "z"};
  static const char *plain[] = {"login", "head-a", "mgmt", "n", "gpu-ib"};
  int n = 1 + (int)(test_rand(seed) % MAX_SEQ);
  int i = 0;
  while (i < n) {
    unsigned kind = (unsigned)(test_rand(seed) % 10);
    if (kind == 0) {
      names_set(v, i++, "%s", plain[test_rand(seed) % 5]);
      continue;
    }
    if (kind == 1) {  /* too many digits to be a range number */
      names_set(v, i++, "n%llu%08llu", 1000000000000ULL + test_rand(seed) % 1000,
                (unsigned long long)(test_rand(seed) % 100000000ULL));
      continue;
    }
    if (kind == 2 && i > 0) {  /* duplicate of an earlier name */
      names_set(v, i, "%s", v[test_rand(seed) % (unsigned)i]);
      i++;
      continue;
    }
    const char *p = pre[test_rand(seed) % 8], *s = suf[test_rand(seed) % 5];
    int w = 1 + (int)(test_rand(seed) % 5);
    unsigned long long val = test_rand(seed) % (kind == 3 ? 12 : 1100);
    int run = 1 + (int)(test_rand(seed) % 12);
    for (int k = 0; k < run && i < n; k++) {
      names_set(v, i++, "%s%0*llu%s", p, w, val, s);
      unsigned step = (unsigned)(test_rand(seed) % 8);
      val += step < 6 ? 1 : step;   /* mostly consecutive, some gaps */
    }
  }
  if (test_rand(seed) % 4 == 0) {  /* shuffle */
    for (int k = n - 1; k > 0; k--) {
      int j = (int)(test_rand(seed) % (unsigned)(k + 1));
      char *t = v[k];
      v[k] = v[j];
      v[j] = t;
    }
  }
  return n;
}

static void test_compress_expand_roundtrip(void **state) {
  (void)state;
  unsigned long long seed = 0xC0FFEEULL;
  for (int iter = 0; iter < 1500; iter++) {
    char *v[MAX_SEQ + 1] = {0};
    int n = random_sequence(&seed, v);
    char *list = gcoll_hostlist_compress(v, n);
    if (list == NULL) fail_msg("compress failed at iteration %d", iter);
    assert_expands_to(list, v, n);
    for (int i = 0; i < n; i++) free(v[i]);
    free(list);
  }
}

/* single_run: the maximal prefix that compresses into one expression of at
 * most maxlen characters. */
static void test_single_run_is_maximal(void **state) {
  (void)state;
  unsigned long long seed = 0xBADC0DEULL;
  for (int iter = 0; iter < 1500; iter++) {
    char *v[MAX_SEQ + 1] = {0};
    int n = random_sequence(&seed, v);
    if (iter % 3 == 0) {  /* long same-pattern runs make the length limit bite */
      for (int i = 0; i < n; i++) free(v[i]);
      n = 1 + (int)(test_rand(&seed) % MAX_SEQ);
      unsigned long long val = test_rand(&seed) % 50;
      for (int i = 0; i < n; i++) {
        names_set(v, i, "n%03llu-ib", val);
        val += test_rand(&seed) % 3 ? 1 : 2 + test_rand(&seed) % 5;
      }
    }
    size_t maxlen = (size_t)(test_rand(&seed) % 80);
    int m = gcoll_hostlist_single_run(v, n, maxlen);
    assert_true(m >= 0 && m <= n);
    if (m == 0) {
      assert_true(strlen(v[0]) > maxlen);
    } else {
      char *c = gcoll_hostlist_compress(v, m);
      assert_non_null(c);
      if (has_top_level_comma(c) || strlen(c) > maxlen)
        fail_msg("single_run %d of %d at maxlen %zu gives '%s'", m, n, maxlen, c);
      assert_expands_to(c, v, m);
      free(c);
    }
    if (m < n) {
      char *c = gcoll_hostlist_compress(v, m + 1);
      assert_non_null(c);
      if (!has_top_level_comma(c) && strlen(c) <= maxlen)
        fail_msg("single_run stopped at %d of %d but '%s' fits %zu", m, n, c, maxlen);
      free(c);
    }
    /* More room never shortens the run. */
    assert_true(gcoll_hostlist_single_run(v, n, maxlen + 1 + (size_t)(test_rand(&seed) % 40)) >= m);
    for (int i = 0; i < n; i++) free(v[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_range_keeps_padding),
    cmocka_unit_test(test_items_and_mixed_groups),
    cmocka_unit_test(test_multiple_groups_last_varies_fastest),
    cmocka_unit_test(test_rejects_bad_lists),
    cmocka_unit_test(test_limits),
    cmocka_unit_test(test_compress_rejects_bad_names),
    cmocka_unit_test(test_compress_runs_are_ranges),
    cmocka_unit_test(test_compress_expand_roundtrip),
    cmocka_unit_test(test_single_run_is_maximal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
