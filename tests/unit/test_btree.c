/* Properties of the double binary tree over nodes (btree.c), checked for
 * every node count 1..4096: both trees span all nodes with one root, no
 * cycles, consistent parent/child links, arity 2 and logarithmic depth, and
 * the two trees' interior nodes are disjoint as far as the construction
 * allows. The NCCL 2.7.8 choice (mirror on odd n) is rebuilt here from the
 * first tree to show why it is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/plan.h"

#define MAX_N 4096

/* One tree over n nodes: parent and up to two children per node. */
struct tree {
  int n;
  int parent[MAX_N];
  int child[MAX_N][2];
};

typedef void (*tree_fn)(int n, int node, int *parent, int *child0, int *child1);

static void tree_fill(struct tree *t, int n, tree_fn fn) {
  t->n = n;
  for (int i = 0; i < n; i++) fn(n, i, &t->parent[i], &t->child[i][0], &t->child[i][1]);
}

/* A second tree built from T1 by relabeling: node x of the result is node
 * to_t1(x) of T1, and T1's node y is node from_t1(y) of the result. */
enum relabel { RELABEL_MIRROR, RELABEL_SHIFT };

static int to_t1(int n, enum relabel r, int x) { return r == RELABEL_MIRROR ? n - 1 - x : (x - 1 + n) % n; }
static int from_t1(int n, enum relabel r, int y) {
  if (y < 0) return -1;
  return r == RELABEL_MIRROR ? n - 1 - y : (y + 1) % n;
}

static void tree_relabeled(struct tree *t, int n, enum relabel r) {
  t->n = n;
  for (int x = 0; x < n; x++) {
    int p, c0, c1;
    gcoll_btree(n, to_t1(n, r, x), &p, &c0, &c1);
    t->parent[x] = from_t1(n, r, p);
    t->child[x][0] = from_t1(n, r, c0);
    t->child[x][1] = from_t1(n, r, c1);
  }
}

static int nchildren(const struct tree *t, int x) { return (t->child[x][0] >= 0) + (t->child[x][1] >= 0); }
static int is_interior(const struct tree *t, int x) { return nchildren(t, x) > 0; }

static int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) k++;
  return k;
}

/* Every structural property of a rooted binary tree over 0..n-1; returns
 * the root. Depth bound: T1 gives a node whose lowest set bit is 2^j a depth
 * of at most k - j where 2^k is the first power of two >= n (the root's
 * child is 2^(k-1) at depth 1, and every step down lowers the lowest set
 * bit by at least one), so no node is deeper than ceil(log2 n). T2 is a
 * relabeling of T1 and has the same depths. */
static int check_tree(const struct tree *t) {
  int n = t->n, root = -1;
  int *kids = calloc((size_t)n, sizeof(int));
  assert_non_null(kids);
  for (int x = 0; x < n; x++) {
    int p = t->parent[x];
    assert_true(p >= -1 && p < n);
    assert_int_not_equal(p, x);
    if (p < 0) {
      assert_int_equal(root, -1); /* exactly one root */
      root = x;
    } else {
      kids[p]++;
    }
    for (int j = 0; j < 2; j++) {
      int c = t->child[x][j];
      assert_true(c >= -1 && c < n);
      if (c >= 0) assert_int_equal(t->parent[c], x); /* listed child points back */
    }
    /* Two distinct children when both exist; child0 filled first. */
    if (t->child[x][1] >= 0) {
      assert_int_not_equal(t->child[x][0], t->child[x][1]);
    }
  }
  assert_true(n == 1 ? root == -1 || root == 0 : root >= 0);
  /* c is a child of p iff parent(c) == p: the counts agree too, so no
   * node points at a parent that does not list it. */
  for (int x = 0; x < n; x++) {
    assert_true(kids[x] <= 2);
    assert_int_equal(kids[x], nchildren(t, x));
  }
  free(kids);
  if (n == 1) return 0;
  /* Walk up from every node: no cycles, all reach the root, depth bounded. */
  int bound = ceil_log2(n);
  for (int x = 0; x < n; x++) {
    int y = x, steps = 0;
    while (t->parent[y] >= 0 && steps <= n) {
      y = t->parent[y];
      steps++;
    }
    assert_int_equal(y, root);
    assert_true(steps <= bound);
  }
  return root;
}

static int interior_overlap(const struct tree *a, const struct tree *b, int *only) {
  int count = 0;
  *only = -1;
  for (int x = 0; x < a->n; x++)
    if (is_interior(a, x) && is_interior(b, x)) {
      count++;
      *only = x;
    }
  return count;
}

static void test_out_of_range_all_absent(void **state) {
  (void)state;
  tree_fn fns[] = {gcoll_btree, gcoll_dtree_t2};
  int cases[][2] = {{0, 0}, {1, 0}, {-3, 0}, {5, -1}, {5, 5}, {5, 6}, {4096, 4096},
                    {4096, -4096}, {1, 1}, {INT32_MIN, 0}, {7, INT32_MAX}, {7, INT32_MIN}};
  for (size_t f = 0; f < 2; f++)
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
      int p = 123, c0 = 456, c1 = 789;
      fns[f](cases[i][0], cases[i][1], &p, &c0, &c1);
      assert_int_equal(p, -1);
      assert_int_equal(c0, -1);
      assert_int_equal(c1, -1);
    }
}

static void test_t1_spans_all_sizes(void **state) {
  (void)state;
  struct tree *t = malloc(sizeof(*t));
  assert_non_null(t);
  for (int n = 1; n <= MAX_N; n++) {
    tree_fill(t, n, gcoll_btree);
    int root = check_tree(t);
    assert_int_equal(root, 0);
    /* Node 0 has a single child; the documented alternation: odd nodes are
     * leaves, even nodes interior. */
    if (n > 1) {
      assert_int_equal(nchildren(t, 0), 1);
    }
    for (int x = 1; x < n; x++) assert_int_equal(is_interior(t, x), x % 2 == 0);
  }
  free(t);
}

static void test_t2_spans_all_sizes(void **state) {
  (void)state;
  struct tree *t = malloc(sizeof(*t));
  assert_non_null(t);
  for (int n = 1; n <= MAX_N; n++) {
    tree_fill(t, n, gcoll_dtree_t2);
    check_tree(t);
  }
  free(t);
}

static void test_construction_rule(void **state) {
  (void)state;
  for (int n = 1; n <= MAX_N; n++)
    assert_int_equal(gcoll_dtree_construction(n), n % 2 == 0 ? GCOLL_T2_MIRROR : GCOLL_T2_SHIFT);
}

/* T2 must be T1 relabeled by the construction gcoll_dtree_construction
 * names, so plan files that record the construction describe the tree. */
static void test_t2_is_relabeled_t1(void **state) {
  (void)state;
  struct tree *t2 = malloc(sizeof(*t2)), *ref = malloc(sizeof(*ref));
  assert_non_null(t2);
  assert_non_null(ref);
  for (int n = 2; n <= MAX_N; n++) {
    tree_fill(t2, n, gcoll_dtree_t2);
    tree_relabeled(ref, n, gcoll_dtree_construction(n) == GCOLL_T2_MIRROR ? RELABEL_MIRROR : RELABEL_SHIFT);
    for (int x = 0; x < n; x++) {
      assert_int_equal(t2->parent[x], ref->parent[x]);
      /* Children as a set: relabeling may swap their order. */
      int a0 = t2->child[x][0], a1 = t2->child[x][1], b0 = ref->child[x][0], b1 = ref->child[x][1];
      assert_true((a0 == b0 && a1 == b1) || (a0 == b1 && a1 == b0));
    }
  }
  free(t2);
  free(ref);
}

static void test_interior_disjoint(void **state) {
  (void)state;
  struct tree *t1 = malloc(sizeof(*t1)), *t2 = malloc(sizeof(*t2));
  assert_non_null(t1);
  assert_non_null(t2);
  for (int n = 1; n <= MAX_N; n++) {
    tree_fill(t1, n, gcoll_btree);
    tree_fill(t2, n, gcoll_dtree_t2);
    int only, both = interior_overlap(t1, t2, &only);
    if (n % 2 == 0) {
      assert_int_equal(both, 0);
    } else {
      assert_true(both <= 1);
      if (both == 1) assert_int_equal(only, 0);
    }
  }
  free(t1);
  free(t2);
}

/* NCCL 2.7.8 used mirror for odd n. Rebuilt from T1 here, that tree keeps
 * every even node interior in both trees, while the shift the library uses
 * keeps at most node 0; and on every n the library's choice is at least as
 * good as the other construction. */
static void test_mirror_on_odd_is_wrong(void **state) {
  (void)state;
  struct tree *t1 = malloc(sizeof(*t1)), *mirror = malloc(sizeof(*mirror)),
              *shift = malloc(sizeof(*shift));
  assert_non_null(t1);
  assert_non_null(mirror);
  assert_non_null(shift);
  for (int n = 2; n <= MAX_N; n++) {
    tree_fill(t1, n, gcoll_btree);
    tree_relabeled(mirror, n, RELABEL_MIRROR);
    tree_relabeled(shift, n, RELABEL_SHIFT);
    check_tree(mirror);
    check_tree(shift);
    int only, om = interior_overlap(t1, mirror, &only), os = interior_overlap(t1, shift, &only);
    int chosen = gcoll_dtree_construction(n) == GCOLL_T2_MIRROR ? om : os;
    int other = gcoll_dtree_construction(n) == GCOLL_T2_MIRROR ? os : om;
    assert_true(chosen <= other);
    if (n % 2 == 1 && n >= 5) {
      assert_true(om > 1);
      assert_true(os <= 1);
      /* The mirror's overlap grows with n: half the nodes never send
       * in one tree while receiving in the other. */
      assert_true(om >= (n + 1) / 2);
    }
  }
  free(t1);
  free(mirror);
  free(shift);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_out_of_range_all_absent),
      cmocka_unit_test(test_t1_spans_all_sizes),
      cmocka_unit_test(test_t2_spans_all_sizes),
      cmocka_unit_test(test_construction_rule),
      cmocka_unit_test(test_t2_is_relabeled_t1),
      cmocka_unit_test(test_interior_disjoint),
      cmocka_unit_test(test_mirror_on_odd_is_wrong),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
