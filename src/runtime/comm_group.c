/* gcollGroupStart/gcollGroupEnd: a per-thread nesting depth and the queue of
 * send/recv operations made inside it. The outermost gcollGroupEnd runs
 * the whole queue at once (comm_p2p.c), which is what lets a rank send to
 * one peer and receive from another without either waiting for the other.
 *
 * A call refused inside a group (bad argument, a collective) poisons the
 * group, as in NCCL: its gcollGroupEnd runs nothing and returns that
 * error, since running the rest would leave the refused call's peer
 * waiting for a message that never comes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/comm.h"
#include "runtime/comm_p2p.h"

struct group {
  int depth;
  struct gcoll_p2p_op *ops;
  int nops, cap;
  gcollResult_t error;         /* first refused call, gcollSuccess if none */
  char reason[512];
};

static _Thread_local struct group group;

int gcoll_group_depth(void) { return group.depth; }

gcollResult_t gcoll_group_note(gcollResult_t rc) {
  if (group.depth > 0 && rc != gcollSuccess && group.error == gcollSuccess) {
    group.error = rc;
    snprintf(group.reason, sizeof(group.reason), "%s", gcollGetLastError(NULL));
  }
  return rc;
}

gcollResult_t gcoll_group_enqueue(const struct gcoll_p2p_op *op) {
  if (group.nops == group.cap) {
    int cap = group.cap ? group.cap * 2 : 16;
    struct gcoll_p2p_op *ops =
        group.cap > INT_MAX / 2 ? NULL : realloc(group.ops, (size_t)cap * sizeof(*ops));
    if (ops == NULL)
      return gcoll_group_note(
          gcoll_fail(gcollSystemError, "out of memory for %d grouped operations", group.nops + 1));
    group.ops = ops;
    group.cap = cap;
  }
  group.ops[group.nops++] = *op;
  return gcollSuccess;
}

static void group_reset(void) {
  free(group.ops);
  group.ops = NULL;
  group.nops = group.cap = 0;
  group.error = gcollSuccess;
  group.reason[0] = '\0';
}

gcollResult_t gcollGroupStart(void) {
  if (group.depth == INT_MAX)
    return gcoll_fail(gcollInvalidUsage, "gcollGroupStart: groups nested too deeply");
  group.depth++;
  return gcollSuccess;
}

gcollResult_t gcollGroupEnd(void) {
  if (group.depth == 0)
    return gcoll_fail(gcollInvalidUsage, "gcollGroupEnd without a matching gcollGroupStart");
  if (--group.depth > 0) return gcollSuccess;
  gcollResult_t rc;
  if (group.error != gcollSuccess)
    rc = gcoll_fail(group.error, "gcollGroupEnd: the group was not run, a call in it failed: %s",
                    group.reason);
  else if (group.nops == 0)
    rc = gcollSuccess;
  else
    rc = gcoll_p2p_run(group.ops, group.nops, "gcollGroupEnd");
  group_reset();
  return rc;
}
