/* The double binary tree over nodes (seed 000).
 *
 * T1 is a binary tree rooted at 0 whose odd nodes are leaves and whose even
 * nodes are interior: node ids are read in binary, and with b the lowest set
 * bit of a node,
 *   parent:  xx01[0] -> xx10[0], or xx00[0] when xx10[0] is out of range
 *            xx11[0] -> xx10[0]
 *   children of xx10[0]: xx01[0] (always in range, it is smaller) and
 *            xx11[0], or, when that is out of range, the largest in-range
 *            xx1..01[0] obtained by lowering the added bit.
 * Node 0 has one child: the largest power of two below n.
 *
 * T2 is built so that T1's interior nodes are T2's leaves, letting every
 * node send in one tree while it mostly receives in the other. */
#include "plan.h"

void gcoll_btree(int n, int node, int *parent, int *child0, int *child1) {
  *parent = *child0 = *child1 = -1;
  if (n <= 1 || node < 0 || node >= n) return;
  int bit = 1;
  while (bit < n && !(bit & node)) bit <<= 1;
  if (node == 0) {
    /* bit is now the first power of two >= n: the root's only child is half of it. */
    *child0 = bit >> 1;
    return;
  }
  int up = (node ^ bit) | (bit << 1);
  *parent = up < n ? up : (node ^ bit);
  int low = bit >> 1;
  if (low == 0) return;  /* odd nodes are leaves */
  *child0 = node - low;
  while (low > 0 && node + low >= n) low >>= 1;
  if (low > 0) *child1 = node + low;
}

/* T1's interior nodes are its even nodes, so T2 must map even to odd.
 * Mirror (node -> n-1-node) flips parity only when n is even: on odd n it
 * keeps every even node interior in both trees (the middle node maps onto
 * itself) and every odd node a leaf in both, so half the nodes never use
 * their send bandwidth. Shift (node -> node-1) flips parity for every node
 * but 0, so on odd n only node 0 is interior in both, which is the least
 * possible: each tree has (n+1)/2 interior nodes and 2 * (n+1)/2 > n.
 * NCCL 2.7.8 chose shift for even n and mirror for odd n. Shift on even n
 * is harmless; mirror on odd n is the bug. So: mirror for even, shift for odd. */
enum gcoll_t2_construction gcoll_dtree_construction(int n) {
  return n % 2 == 0 ? GCOLL_T2_MIRROR : GCOLL_T2_SHIFT;
}

static int mirror_back(int n, int v) { return v < 0 ? -1 : n - 1 - v; }
static int shift_back(int n, int v) { return v < 0 ? -1 : (v + 1) % n; }

void gcoll_dtree_t2(int n, int node, int *parent, int *child0, int *child1) {
  *parent = *child0 = *child1 = -1;
  if (n <= 1 || node < 0 || node >= n) return;
  int p, c0, c1;
  if (gcoll_dtree_construction(n) == GCOLL_T2_MIRROR) {
    gcoll_btree(n, n - 1 - node, &p, &c0, &c1);
    *parent = mirror_back(n, p);
    *child0 = mirror_back(n, c0);
    *child1 = mirror_back(n, c1);
  } else {
    gcoll_btree(n, (node - 1 + n) % n, &p, &c0, &c1);
    *parent = shift_back(n, p);
    *child0 = shift_back(n, c0);
    *child1 = shift_back(n, c1);
  }
}
