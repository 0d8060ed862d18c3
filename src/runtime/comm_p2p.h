/* Send/recv operations as comm_group.c queues them and comm_p2p.c runs
 * them. */
#ifndef GCOLL_RUNTIME_COMM_P2P_H
#define GCOLL_RUNTIME_COMM_P2P_H

#include <stddef.h>

#include "gcoll.h"

struct gcollComm;

/* One gcollSend or gcollRecv, arguments already checked. */
struct gcoll_p2p_op {
  struct gcollComm *comm;
  int is_send;
  int peer;
  const void *sendbuf;   /* is_send */
  void *recvbuf;         /* !is_send */
  size_t bytes;
  int device;            /* the buffer is CUDA device memory of this GPU; -1: host memory */
  void *stream;          /* the caller's CUstream (device buffers only; NULL: legacy stream) */
};

/* Runs ops concurrently until every one completed: a failure of one ends
 * them all. Self operations (peer == own rank) are matched in order, the
 * k-th send to self with the k-th receive from self of the same
 * communicator. `what` names the caller in the one-line reason. */
gcollResult_t gcoll_p2p_run(const struct gcoll_p2p_op *ops, int nops, const char *what);

/* Adds op to this thread's open group (comm_group.c). */
gcollResult_t gcoll_group_enqueue(const struct gcoll_p2p_op *op);

#endif
