/* What the host passes to a gcoll CUDA kernel: the ABI between cuda_exec.c
 * (C, compiled by the host compiler) and coll_kernels.cu (nvcc). Plain C
 * with fixed-width fields only; device addresses are uint64_t (CUdeviceptr)
 * so the host never dereferences them by mistake.
 *
 * Launch: GCOLL_CUDA_KERNEL_NAME, grid = nchannels blocks of
 * GCOLL_CUDA_THREADS threads, block c runs channel c; the only argument is
 * a struct gcoll_cuda_work by value. Every block writes its struct
 * gcoll_cuda_status before it exits.
 */
#ifndef GCOLL_KERNELS_CUDA_WORK_H
#define GCOLL_KERNELS_CUDA_WORK_H

#include <stdint.h>

#define GCOLL_CUDA_KERNEL_NAME "gcoll_cuda_coll"
#define GCOLL_CUDA_THREADS 512
#define GCOLL_CUDA_MAX_CHANNELS 32
#define GCOLL_CUDA_MAX_PEERS 3   /* = GCOLL_PRIMS_MAX_PEERS */
#define GCOLL_CUDA_SCRATCH 4     /* LL buffers per channel: = GCOLL_PRIMS_SCRATCH */

/* struct gcoll_fifo (fifo.h) seen as bytes: C11 _Atomic does not exist in
 * CUDA C++, so the device side declares its own struct with these offsets
 * and both sides check them at compile time (cuda_exec.c against fifo.h,
 * prims_cuda.cuh against its mirror). */
#define GCOLL_CUDA_FIFO_STEPS 8
#define GCOLL_CUDA_FIFO_OFF_TAIL 0
#define GCOLL_CUDA_FIFO_OFF_NBYTES 12
#define GCOLL_CUDA_FIFO_OFF_PROTO 44      /* one byte per step */
#define GCOLL_CUDA_FIFO_OFF_HEAD 64
#define GCOLL_CUDA_FIFO_OFF_SLOT_BYTES 128
#define GCOLL_CUDA_FIFO_OFF_LL_SLOT_BYTES 136
#define GCOLL_CUDA_FIFO_OFF_SIMPLE_OFFSET 144
#define GCOLL_CUDA_FIFO_OFF_LL_OFFSET 152
#define GCOLL_CUDA_FIFO_HEADER 192

/* One channel's connections; FIFO addresses as the GPU sees them (device
 * memory, a peer's memory mapped by IPC, or host-pinned mapped memory). */
struct gcoll_cuda_channel {
  uint64_t ring_recv_prev;          /* 0 when nranks == 1 */
  uint64_t ring_send_next;
  uint64_t ring_ranks;              /* device int32_t[nranks] */
  int32_t ring_pos;
  int32_t has_tree;
  int32_t tree_parent;              /* -1 at the root */
  int32_t tree_nchildren;
  uint64_t tree_recv_parent, tree_send_parent;
  uint64_t tree_recv_child[GCOLL_CUDA_MAX_PEERS];
  uint64_t tree_send_child[GCOLL_CUDA_MAX_PEERS];
  uint64_t scratch;                 /* device, GCOLL_CUDA_SCRATCH * scratch_bytes */
  uint64_t scratch_bytes;           /* >= the LL payload of a step, 16-aligned */
};

/* What a channel reports; `what` indexes gcoll_cuda_fail_names. */
enum gcoll_cuda_fail {
  GCOLL_CUDA_FAIL_NONE = 0,
  GCOLL_CUDA_FAIL_RECV_DATA,        /* data from receive peer */
  GCOLL_CUDA_FAIL_SEND_SLOT,        /* a free slot at send peer */
  GCOLL_CUDA_FAIL_MISMATCH,         /* the peer's step has another size/protocol */
  GCOLL_CUDA_FAIL_SETUP,            /* invalid connections or arguments */
  GCOLL_CUDA_FAIL_SIZE,             /* send/recv: the message announced another size (step) */
  GCOLL_CUDA_FAIL_NFAILS
};

enum gcoll_cuda_reason {
  GCOLL_CUDA_REASON_NONE = 0,
  GCOLL_CUDA_REASON_ABORTED,        /* the abort word was set */
  GCOLL_CUDA_REASON_SIBLING,        /* another channel of this launch failed */
  GCOLL_CUDA_REASON_DEADLINE        /* globaltimer passed the deadline */
};

struct gcoll_cuda_status {
  int32_t result;                   /* gcollResult_t */
  int32_t what;                     /* enum gcoll_cuda_fail */
  int32_t reason;                   /* enum gcoll_cuda_reason */
  int32_t peer;
  uint64_t step;
  uint64_t done;                    /* 1 once the block has finished */
};

struct gcoll_cuda_work {
  uint64_t channels;                /* device struct gcoll_cuda_channel[nchannels] */
  uint64_t status;                  /* struct gcoll_cuda_status[nchannels], host-mapped */
  uint64_t abort_word;              /* int32_t, host-mapped; 0 = go on; 0 = none */
  uint64_t local_abort;             /* int32_t, set by the first failing block */
  uint64_t sendbuf, recvbuf;
  uint64_t count;                   /* elements (per rank for allgather/rs) */
  uint64_t stride;                  /* allgather/rs block stride; = count */
  uint64_t timeout_ns;              /* from the block's start */
  int32_t coll, algo, proto, dtype, op, root;
  int32_t rank, nranks, nchannels;
  int32_t premul;                   /* enum gcoll_premul_kind (host_exec.h); op is sum */
  uint64_t scalar;                  /* IMMEDIATE: the scalar in dtype's bits; DEVICE: its
                                       device address, read when the kernel starts */
};

/* ---- send/recv: the second entry, gcoll_cuda_p2p ---------------------------
 * Launch: GCOLL_CUDA_P2P_KERNEL_NAME, grid = nblocks blocks of
 * GCOLL_CUDA_THREADS threads; the argument is a struct gcoll_cuda_p2p_work
 * by value. Block b runs the operations whose `queue` % nblocks == b, those
 * of one queue (one connection and direction) in array order, every queue
 * of the block advanced as far as its FIFO allows in turn, so no
 * operation waits behind another's peer. Messages are p2p_wire.h's. */
#define GCOLL_CUDA_P2P_KERNEL_NAME "gcoll_cuda_p2p"
#define GCOLL_CUDA_P2P_MAX_BLOCK_OPS 128 /* operations one block keeps in shared memory */

enum gcoll_cuda_p2p_kind {
  GCOLL_CUDA_P2P_SEND = 0,          /* buf -> the FIFO at `fifo` */
  GCOLL_CUDA_P2P_RECV,              /* the FIFO at `fifo` -> buf */
  GCOLL_CUDA_P2P_COPY               /* buf -> dst (send/recv to self) */
};

struct gcoll_cuda_p2p_op {
  uint64_t fifo;                    /* device view of the connection's FIFO */
  uint64_t buf;                     /* device: the send source, receive target, copy source */
  uint64_t dst;                     /* COPY: the target */
  uint64_t bytes;
  uint64_t seq;                     /* the message's number on its connection */
  int32_t kind;                     /* enum gcoll_cuda_p2p_kind */
  int32_t peer;                     /* the other rank (the header's sender for RECV) */
  int32_t queue;                    /* operations of one connection share a queue */
  int32_t pad;
};

struct gcoll_cuda_p2p_work {
  uint64_t ops;                     /* struct gcoll_cuda_p2p_op[nops], host-mapped */
  uint64_t status;                  /* struct gcoll_cuda_status[nblocks], host-mapped */
  uint64_t abort_word;
  uint64_t local_abort;
  uint64_t timeout_ns;              /* from the block's start */
  int32_t nops, nblocks;
  int32_t rank, pad;
};

#endif
