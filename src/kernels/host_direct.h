/* The direct (single-copy) form of host allgather and broadcast, and of
 * the second half of allreduce, between ranks of one host: each rank
 * reads its peers' buffers straight into its output, one copy, where the
 * ring moves every byte twice (into the FIFO, out of it).
 *
 * A call takes it when it is large enough, the ring is not the faster,
 * and a back-off says to try. Large enough, from peer_reads.min_bytes
 * (the runtime sets it only when every rank is on this host; 128 KiB by
 * default). Where the ring is the faster is timed on each size class's
 * first calls (peer_reads.tune, the default; "Tuning" below), or, with
 * tuning off, judged by whether the call fits in the host's caches
 * (peer_reads.cache_bytes), as measured on one of the 2-core VMs (README,
 * issue 17: "Single copy from 128 KiB"):
 *   - broadcast: from min_bytes. 2 ranks took 0.36-0.53x the ring's time
 *     out of place and 0.47-0.98x in place at 128 KiB - 16 MiB (the ring
 *     copies twice, into the FIFO and out of it; Open MPI's broadcast
 *     reads its peer the same way from 64 KiB), 3 and 4 ranks 0.32-0.84x
 *     within the caches (readers at once instead of a chain of ring
 *     hops). At 64 KiB 2 ranks took 1.0-1.4x: the descriptors' and the
 *     status's round trips cost what the copy saves. Past the caches 3
 *     or more ranks keep the ring (below).
 *   - allgather: within the caches, each rank's reads at least half
 *     min_bytes, as a pair's at min_bytes (so from min_bytes x nranks / 2
 *     beyond 2 ranks). 2 ranks took 0.25-0.59x the ring's time at
 *     128-512 KiB, 3 and 4 ranks 0.47-0.78x at 256 KiB - 64 MiB
 *     (1.00-1.10x at 128 KiB).
 *   - allreduce's second half, below: 2 ranks whose vector fits in the
 *     caches and is at least GCOLL_DIRECT_ALLREDUCE_FACTOR times
 *     min_bytes.
 * Past the caches the kernel's copy, which does not stream its stores
 * past the cache as glibc's memcpy does, ran at 11-15 GB/s against
 * memcpy's 24-32 on a VM with 32 MiB of L3 (where every rank writes its
 * whole output through it, allgathers, and 3 or more ranks' broadcasts
 * kept the ring); on one with 260 MiB, reads of 128-256 MiB took
 * 0.62-1.01x the ring's time, so the rule costs little where it is
 * wrong. That first VM also had the ring ahead for 2-rank broadcasts
 * within the caches and for allgathers among 3 or more (every input
 * having several readers at once); the second, on today's tree, did not.
 * Then the ranks allgather a 64-byte descriptor each (this process's
 * identity, the address peers read: the input's, an allreduce's output's;
 * flags) over channel 0's ring, and every
 * rank reads the same verdict from the same descriptors:
 *   - every rank has probed every peer (read a random word at a known
 *     address and found it) and can read them all, and
 *   - the buffers peers would read are cheap to read (huge pages),
 * else the ring runs the call as usual, after the descriptors' steps,
 * which every rank took alike. A rank that cannot read a peer (ptrace
 * rules, containers, another pid namespace) says so in its next
 * descriptor and the form is off for good; buffers in small pages make
 * the next 2, 4, ... 64 candidate calls skip the exchange.
 * After its reads, each rank puts its status in a second allgather,
 * which is also the barrier that keeps every input alive until the last
 * reader is done; a failed read fails the call on every rank.
 *
 * Allgather and broadcast results are the ring's byte for byte: neither
 * reduces. Allreduce and reducescatter were first built the same way
 * (each rank reducing the ring's blocks from its peers' inputs, in the
 * ring's order) and measured 0.4-1.0x the ring at 2 ranks and 0.65-1.3x
 * at 4 on the 2-core VM: a reduction reads both operands anyway, the FIFO
 * copy it saves stays in cache, and a read of a peer's pages runs at
 * 40-50 GB/s against memcpy's 60-130. What does pay is the allreduce's
 * second half, which only copies: between 2 ranks whose vector fits in
 * the caches and is at least GCOLL_DIRECT_ALLREDUCE_FACTOR (16) times
 * min_bytes (256 KiB - 1 MiB measured 0.80-1.28x the ring), on one
 * channel, the ranks run the ring's reduce-scatter half
 * (gcoll_ring_allreduce_steps, the same blocks and order, so the ring's
 * bits), a first status exchange
 * says every block is reduced, and each rank reads its peer's blocks from
 * the peer's output in batches of ranges, one copy where the ring moves
 * every byte twice. 2-8 MiB then took 0.80-0.89x the ring's time, in and
 * out of place (in place was where Open MPI's single-copy ring led). */
#ifndef GCOLL_KERNELS_HOST_DIRECT_H
#define GCOLL_KERNELS_HOST_DIRECT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/algo_ring.h"
#include "kernels/host_exec.h"

struct gcoll_direct_desc {
  uint8_t id[GCOLL_PEER_ID_BYTES];  /* peer_reads.identity */
  uint64_t src;                     /* what peers read: the input, an allreduce's output */
  uint32_t flags;                   /* DIRECT_* (host_direct.c) */
  /* While the call's size class is tuned: this rank's fastest timed call
   * of each form so far, in ns (UINT32_MAX: none). */
  uint32_t ring_ns, direct_ns;
  uint32_t unused;
  uint64_t reserved;
};
_Static_assert(sizeof(struct gcoll_direct_desc) == 64, "one cache line per rank");

/* Tuning (peer_reads.tune): which form is the faster depends on the
 * machine more than on anything the ranks can read off it. On two VMs of
 * this project's with the same 2 cores, a 2-rank 1 MiB in-place broadcast
 * read its peer in 0.6x the ring's time on one (260 MiB of L3) and 1.4x
 * on the other (32 MiB; the kernel's copy there ran at 33 GB/s against
 * the ring's pipelined memcpy at 45). So each (collective, size class)
 * (in place or not) of a communicator times both forms on its first candidate calls and
 * keeps the faster: calls 0 and 1 of a class run the direct form and the
 * ring untimed (first touches, the probe's aftermath), the next
 * 2 x GCOLL_DIRECT_TUNE_SAMPLES alternate them timed, and the call after
 * decides. Each rank keeps its fastest time of each form (the least
 * disturbed by other work on the machine) and puts it in its descriptor;
 * the deciding call's exchange gives every rank every rank's figures,
 * and each takes the form whose slowest rank was the faster: the same
 * figures, the same verdict on every rank. The ring's time is its run
 * alone, since a class decided for the ring skips the descriptor
 * exchange; the direct form's includes its exchanges. Size classes are
 * powers of two from where the form may start (a call's class: the
 * floor of log2(bytes / start)), the last one open-ended. */
#define GCOLL_DIRECT_TUNE_SAMPLES 3
#define GCOLL_DIRECT_TUNE_CLASSES 20
/* broadcast, allgather, allreduce, each out of place and in place (an
 * out-of-place ring broadcast's root copies its input twice, into the
 * FIFO and its output, where the direct form's root copies once while
 * its readers read) */
#define GCOLL_DIRECT_TUNE_KINDS 6
enum { GCOLL_DIRECT_TUNE_OPEN = 0, GCOLL_DIRECT_TUNE_RING, GCOLL_DIRECT_TUNE_DIRECT };
struct gcoll_direct_tune {
  uint32_t calls;                   /* tuning calls of this class so far */
  uint32_t ring_ns, direct_ns;      /* this rank's fastest timed call of each; UINT32_MAX: none */
  int choice;                       /* GCOLL_DIRECT_TUNE_* */
};

/* Buffers this rank found in huge pages: peer_reads.cheap asks the
 * kernel (PAGEMAP_SCAN, about 1 us), and the root's answer is on every
 * reader's path before its copy (128-256 KiB 2-rank broadcasts: 0.67-0.93x
 * the time without the question). A range inside a remembered one is
 * taken as cheap without asking, GCOLL_DIRECT_CHEAP_REUSES times, then
 * asked again: memory freed and mapped again at the same address in
 * small pages costs at most that many slower reads, never a wrong one. */
#define GCOLL_DIRECT_CHEAP_RANGES 8
#define GCOLL_DIRECT_CHEAP_REUSES 256
struct gcoll_direct_cheap_range {
  uint64_t start, end;              /* [start, end) of this process; end 0: empty */
  uint32_t reuses;
};

struct gcoll_host_direct {
  struct gcoll_exec_peer_reads ops;
  struct gcoll_direct_cheap_range cheap[GCOLL_DIRECT_CHEAP_RANGES];
  unsigned cheap_next;              /* the entry the next new range replaces */
  int rank, nranks;
  int probed;                       /* 0: not yet; 1: can read every peer; -1: cannot */
  int off;                          /* every rank saw a rank that cannot read */
  uint32_t skip, misses;            /* back-off after buffers in small pages */
  struct gcoll_direct_desc *descs;  /* nranks */
  uint64_t *status;                 /* nranks */
  uint64_t calls, taken;            /* candidates and direct calls, for the log */
  struct gcoll_direct_tune tune[GCOLL_DIRECT_TUNE_KINDS][GCOLL_DIRECT_TUNE_CLASSES];
  struct gcoll_direct_tune *cur;    /* the candidate's class (tuning on), else NULL */
  int timing;                       /* the running call is timed: 0, or the form's choice value */
  uint64_t t0;                      /* when the timed part began */
};

/* Allocates the descriptors; d->ops.min_bytes == 0 leaves it off. */
int gcoll_host_direct_init(struct gcoll_host_direct *d, const struct gcoll_exec_peer_reads *ops,
                           int rank, int nranks);
void gcoll_host_direct_free(struct gcoll_host_direct *d);

/* Whether call c goes through the descriptor exchange; every rank
 * answers the same for the same calls (it counts the back-off down).
 * one_channel: the ring would run c on one channel in this thread (an
 * allreduce's first half keeps to that channel). */
int gcoll_host_direct_candidate(struct gcoll_host_direct *d, const struct gcoll_host_coll *c,
                                int one_channel);

/* A candidate's descriptor exchange over p (channel 0's ring prims, set
 * up SIMPLE with byte elements) and ring (its order and this rank's
 * position): *taken is 1 when the direct form runs the call, 0 when the
 * ring must. */
gcollResult_t gcoll_host_direct_begin(struct gcoll_host_direct *d, struct gcoll_prims *p,
                                      const struct gcoll_ring_work *ring,
                                      const struct gcoll_host_coll *c, int *taken);

/* The reads of a call begin took, and the status exchange that ends it,
 * over p as above. An allreduce comes here once the ring's reduce-scatter
 * half (gcoll_ring_allreduce_steps with gather 0, chunk_max elements a
 * block) ran on every rank: a first exchange says so. A failed read puts
 * its line in err. */
/* After the ring ran a candidate call that begin gave back (*taken 0):
 * its time, if tuning timed it (r: the call's result; a failed call's
 * time is not kept). */
void gcoll_host_direct_ring_done(struct gcoll_host_direct *d, gcollResult_t r);

/* The tuned classes' verdicts, for the log: "broadcast 128K ring, 512K
 * direct; broadcast in place 128K ring; ..." (empty when nothing was
 * decided). */
void gcoll_host_direct_tuned(const struct gcoll_host_direct *d, char *out, size_t len);

gcollResult_t gcoll_host_direct_finish(struct gcoll_host_direct *d, struct gcoll_prims *p,
                                       const struct gcoll_ring_work *ring,
                                       const struct gcoll_host_coll *c, size_t chunk_max,
                                       char *err, size_t errlen);

#endif
