/* net/ib wire formats and step arithmetic: everything of net/ib that needs
 * no RDMA device, kept apart so it is unit-tested on any machine.
 *
 *   address  net/ib's part of the receiver's address (net.h puts the
 *            generic part, with rank, connection id, job tag and the hello
 *            listener, in front): the receiver's QP (number, PSN, LID, GID,
 *            MTU) and where its FIFO's SIMPLE slots are (address, rkey,
 *            slot size).
 *   hello    net/ib's part of the sender's hello: the sender's QP, so the
 *            receiver can bring its end of the RC pair to RTR/RTS.
 *   immediate of each RDMA write: the step's size, protocol and step number
 *            modulo 16 (a check: RC delivers in order).
 *   credit   immediate of the receiver's send-with-immediate that returns
 *            FIFO slots: the low 32 bits of its head.
 *
 * Multi-byte fields are big-endian. */
#ifndef GCOLL_RUNTIME_NET_IB_ADDR_H
#define GCOLL_RUNTIME_NET_IB_ADDR_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_IB_ADDR_BYTES 44
#define GCOLL_IB_HELLO_BYTES 28

/* One end of an RC queue pair as its peer needs to know it. */
struct gcoll_ib_qp_info {
  uint32_t qpn;      /* 24 bits */
  uint32_t psn;      /* 24 bits */
  uint16_t lid;
  uint8_t mtu;       /* enum ibv_mtu, 1 (256) to 5 (4096) */
  uint8_t link;      /* 1 InfiniBand, 2 Ethernet (RoCE: GID addressing) */
  uint8_t gid[16];
};

struct gcoll_ib_addr {
  struct gcoll_ib_qp_info qp;
  uint64_t slots_addr; /* SIMPLE slot 0 of the receiver's FIFO */
  uint32_t rkey;
  uint32_t slot_bytes;
};

void gcoll_ib_addr_encode(const struct gcoll_ib_addr *a, unsigned char out[GCOLL_IB_ADDR_BYTES]);
/* Decodes and checks the address of a receiver whose FIFOs must have
 * slot_bytes slots; -1 with one line in err when it is malformed. */
int gcoll_ib_addr_decode(const unsigned char in[GCOLL_IB_ADDR_BYTES], size_t slot_bytes,
                         struct gcoll_ib_addr *a, char *err, size_t errlen);

void gcoll_ib_hello_encode(const struct gcoll_ib_qp_info *qp,
                           unsigned char out[GCOLL_IB_HELLO_BYTES]);
/* -1 when the hello does not name a valid queue pair. */
int gcoll_ib_hello_decode(const unsigned char in[GCOLL_IB_HELLO_BYTES],
                          struct gcoll_ib_qp_info *qp);

/* Remote address of the SIMPLE slot of `step`: where its payload goes (an
 * LL step travels decoded and lands there too; the receiver re-encodes it). */
uint64_t gcoll_ib_slot_addr(uint64_t slots_addr, uint64_t slot_bytes, uint64_t step);

/* Immediate of a data write. nbytes is at most GCOLL_FIFO_MAX_SLOT. */
uint32_t gcoll_ib_imm_encode(uint64_t step, uint32_t nbytes, int is_ll);
/* Checks an immediate against the step expected next and the FIFO's
 * payload limits; -1 on a protocol violation. */
int gcoll_ib_imm_decode(uint32_t imm, uint64_t expected_step, size_t slot_bytes,
                        uint32_t *nbytes, int *is_ll);

/* The full head a credit names, given the last head known (acked) and the
 * steps written so far (sent); -1 when it cannot be a head in [acked, sent]. */
int gcoll_ib_credit_decode(uint32_t imm, uint64_t acked, uint64_t sent, uint64_t *head);

#endif
