/* The host executor: runs one collective over a rank's channels with the
 * host primitives, a worker thread per channel.
 *
 * Threads and scratch memory are created once, in gcoll_host_exec_create;
 * gcoll_host_exec_run allocates nothing, creates no thread and clears no
 * memory. Channel 0 runs on the calling thread; idle workers sleep on a
 * condition variable. One collective at a time per executor.
 *
 * Connections are FIFOs (fifo.h) the caller owns and keeps alive: a ring
 * per channel (receive from the previous position, send to the next) and
 * optionally a tree per channel. All FIFOs of one channel, on every rank,
 * must have the same slot size: chunk sizes derive from it and every rank
 * must compute the same ones.
 *
 * Data partition and buffer rules: coll_geometry.h's (shared with the CUDA
 * kernel). A double binary tree is two channels with different trees: each
 * reduces its own half.
 *
 * avg reduces as sum and divides the final result once (gcoll_avg_finish).
 *
 * Small allreduces (at most gather_bytes[proto] bytes, one channel, ring)
 * take the gather form: the ring allgather of every rank's whole vector
 * into executor scratch, nranks-1 steps instead of the ring allreduce's
 * 2(nranks-1), then every rank reduces the nranks vectors itself, in the
 * ring's blocks and order, so the result has the ring's bits on every
 * rank. A small message costs
 * its steps, not its bytes, and with more ranks than cores every step waits
 * for the scheduler to run the peer. Each step is a FIFO step like any
 * other, so FIFO positions stay consistent with the other forms. The limit
 * must be the same on every rank (it decides the steps each rank takes):
 * the runtime derives it from the tuning model (gcoll_tuning_gather_limit).
 *
 * Where the runtime hands over a one-shot board (host_oneshot.h: every
 * rank of the host maps it), the gather form's vectors go through the
 * board instead of the ring, one wait instead of nranks-1 steps, and so do
 * allgathers whose vector and reducescatters whose whole input fit a
 * board slot; the results are the ring's bits. A board call takes no FIFO
 * step on any rank, so FIFO positions stay consistent too.
 *
 * The node form (config node, calls marked node_form): an allreduce
 * between 2 nodes whose ranks are each a run of channel 0's ring. Each
 * node sums its members' vectors on its own board, in slot order; the
 * node's last rank on the ring sends that partial to the other node's
 * first, one ring step (the only FIFO step of the call, on the two edges
 * between the nodes); each first rank adds the two partials, the first
 * node's first, and hands the sum to its node on the board. So a call
 * crosses the network once each way, at once, where the ring crosses it
 * at each of its 2(nranks-1) steps. The bits are the form's own, the same
 * on every rank and in every run (as the tree's are).
 */
#ifndef GCOLL_KERNELS_HOST_EXEC_H
#define GCOLL_KERNELS_HOST_EXEC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "gcoll_plan.h"
#include "kernels/fifo.h"
#include "kernels/prims.h"
#include "kernels/reduce.h"

#define GCOLL_HOST_MAX_CHANNELS 32

/* enum gcoll_coll and enum gcoll_algo come from gcoll_plan.h (the plan's
 * values pass through); the host implements ring and tree (allreduce, and
 * reduce when the root is every used channel's tree root). */

struct gcoll_host_ring {
  struct gcoll_fifo *recv_prev;   /* NULL when nranks == 1 */
  struct gcoll_fifo *send_next;
  const int *ranks;               /* ranks[pos] = global rank; copied */
  int pos;                        /* this rank's position */
};

struct gcoll_host_tree {
  int parent;                     /* global rank, -1 at the root */
  struct gcoll_fifo *recv_parent, *send_parent;
  int nchildren;                  /* 0..GCOLL_PRIMS_MAX_PEERS */
  struct gcoll_fifo *recv_child[GCOLL_PRIMS_MAX_PEERS];
  struct gcoll_fifo *send_child[GCOLL_PRIMS_MAX_PEERS];
};

struct gcoll_host_channel {
  struct gcoll_host_ring ring;
  int has_tree;                   /* 0: the tree algorithm is unavailable */
  struct gcoll_host_tree tree;
};

/* Network steps moved by the executor's own threads (runtime/proxy.h's
 * inline polling), for collectives marked poll_inline: begin before the
 * first step, poll in every wait (wait.h), end after the last step, each
 * with arg. poll == NULL: never. */
struct gcoll_exec_poll {
  void (*begin)(void *arg);
  int (*poll)(void *arg);
  void (*end)(void *arg);
  void *arg;
};

/* Reading a peer rank's memory by address (single copy, host_direct.h):
 * the runtime's table (runtime/peer_memory.c: process_vm_readv). An
 * identity is what a peer needs to read this process, opaque here; each
 * rank puts its own in every direct call's descriptor. probe and read
 * return 0 or an errno value; cheap says whether peers read [p, p+n) of
 * this process fast (whole huge pages: the kernel pins a 4 KiB page at a
 * time otherwise, which makes the read slower than two copies through a
 * FIFO). min_bytes == 0: never. */
#define GCOLL_PEER_ID_BYTES 32
/* A range of a peer's memory (addr, in its address space) to copy into
 * this process's (dst). */
struct gcoll_peer_range {
  void *dst;
  uint64_t addr;
  size_t n;
};
/* The most ranges one read call takes. */
#define GCOLL_PEER_RANGES_MAX 64
/* A 2-rank allreduce reads its peer's half from this many times
 * min_bytes (2 MiB at the default 128 KiB): a reduction reads both
 * operands anyway, so only a large second half gains (host_direct.h). */
#define GCOLL_DIRECT_ALLREDUCE_FACTOR 16

struct gcoll_exec_peer_reads {
  uint64_t min_bytes;             /* direct form from this many bytes (the same on every rank) */
  /* Calls up to this many bytes fit in the host's caches (the same on
   * every rank; 0: the verdict does not judge by it): host_direct.h. */
  uint64_t cache_bytes;
  void (*identity)(void *arg, uint8_t id[GCOLL_PEER_ID_BYTES]);
  int (*probe)(void *arg, int peer, const uint8_t id[GCOLL_PEER_ID_BYTES]);
  /* Reads n ranges of the peer id names (0 or an errno value). */
  int (*read)(void *arg, const uint8_t id[GCOLL_PEER_ID_BYTES], const struct gcoll_peer_range *r,
              int n);
  int (*cheap)(void *arg, const void *p, size_t n);
  /* At destroy, when some call was a candidate: how many, how many read
   * their peers, and the tuned classes' verdicts (host_direct.h:
   * gcoll_host_direct_tuned; NULL: not told). */
  void (*report)(void *arg, uint64_t candidates, uint64_t direct, const char *tuned);
  /* 1: each (collective, size class) times both forms on its first calls
   * and keeps the faster (host_direct.h); 0: the static rules
   * (cache_bytes). The same on every rank. */
  int tune;
  /* Tuning's clock in ns (NULL: CLOCK_MONOTONIC). */
  uint64_t (*clock)(void *arg);
  void *arg;
};

struct gcoll_host_coll {
  enum gcoll_coll coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count;                   /* elements (per rank for allgather/rs) */
  gcollDataType_t dtype;
  gcollRedOp_t op;
  int root;                       /* broadcast, reduce */
  enum gcoll_algo algo;           /* tree: allreduce, reduce to the tree's root */
  enum gcoll_proto proto;
  int nchannels;                  /* 0 = all configured */
  /* A pre-mul-sum (op is sum; allreduce, reduce, reducescatter): the host
   * executor takes IMMEDIATE only, the CUDA one both (reduce.h). */
  enum gcoll_premul_kind premul;
  uint64_t premul_k;              /* the scalar's bits, or its device address */
  int poll_inline;                /* waits drive the network (config's poll) */
  int node_form;                  /* an allreduce in the node form (every rank alike) */
};

struct gcoll_host_exec;

/* The executors' config (exec.h); the host executor takes nchannels up
 * to GCOLL_HOST_MAX_CHANNELS and ignores slot_bytes and device. */
struct gcoll_exec_config;

/* Validates the connections, copies the ring orders, allocates scratch and
 * starts nchannels-1 workers. NULL with a one-line reason on failure. */
struct gcoll_host_exec *gcoll_host_exec_create(const struct gcoll_exec_config *cfg, char *err,
                                               size_t errlen);
void gcoll_host_exec_destroy(struct gcoll_host_exec *e);

/* Runs one collective; every rank must make the same call (same coll,
 * count, dtype, op, root, algo, proto, nchannels). Returns gcollSuccess,
 * gcollInvalidArgument/gcollInvalidUsage for bad arguments (nothing moved),
 * gcollSystemError when the deadline passed, or the abort word's value;
 * err names the first failing channel and what it waited for. */
gcollResult_t gcoll_host_exec_run(struct gcoll_host_exec *e,
                                  const struct gcoll_host_coll *c,
                                  char *err, size_t errlen);

#endif
