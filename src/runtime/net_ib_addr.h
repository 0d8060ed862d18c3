/* net/ib wire formats and step arithmetic: everything of net/ib that needs
 * no RDMA device, kept apart so it is unit-tested on any machine.
 *
 *   address  receiver -> sender through the bootstrap (GCOLL_IB_ADDR_BYTES,
 *            within GCOLL_CONN_ADDR_MAX): the receiver's QP (number, PSN,
 *            LID, GID, MTU), where its FIFO's SIMPLE slots are (address,
 *            rkey, slot size), and the TCP side channel (ip, port) the
 *            sender introduces its own QP on; plus rank, connection id and
 *            job hash so a foreign or misrouted address is rejected.
 *   hello    sender -> receiver on the side channel: the sender's QP, so the
 *            receiver can bring its end of the RC pair to RTR/RTS.
 *   header   16 bytes {step, nbytes, proto} on the side channel afterwards:
 *            ready (receiver's QP is connected), goodbye, blame.
 *   immediate of each RDMA write: the step's size, protocol and step number
 *            modulo 16 (a check: RC delivers in order).
 *   credit   immediate of the receiver's send-with-immediate that returns
 *            FIFO slots: the low 32 bits of its head.
 *
 * Multi-byte fields of address and hello are big-endian; headers
 * little-endian like net/socket's. */
#ifndef GCOLL_RUNTIME_NET_IB_ADDR_H
#define GCOLL_RUNTIME_NET_IB_ADDR_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_IB_ADDR_BYTES 96
#define GCOLL_IB_HELLO_BYTES 64
#define GCOLL_IB_HDR_BYTES 16

#define GCOLL_IB_PROTO_READY 0x47524459u   /* "GRDY": receiver's QP is at RTS */
#define GCOLL_IB_PROTO_GOODBYE 0x47425945u /* "GBYE": clean close */
#define GCOLL_IB_PROTO_BLAME 0x47424c4du   /* "GBLM": close in error; step = blamed rank */

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
  int rank;          /* the receiver */
  uint32_t conn_id;
  uint64_t job_hash;
  struct gcoll_ib_qp_info qp;
  uint64_t slots_addr; /* SIMPLE slot 0 of the receiver's FIFO */
  uint32_t rkey;
  uint32_t slot_bytes;
  int family;          /* side channel: 4 or 6 */
  uint16_t port;
  uint8_t ip[16];
};

struct gcoll_ib_hello {
  int sender, receiver;
  uint32_t conn_id;
  uint64_t job_hash;
  struct gcoll_ib_qp_info qp;
};

void gcoll_ib_addr_encode(const struct gcoll_ib_addr *a, unsigned char out[GCOLL_IB_ADDR_BYTES]);
/* Decodes and checks an address for the connection (peer, conn_id) of job
 * job_hash whose FIFOs have slot_bytes slots; -1 with one line in err when
 * it is malformed, foreign or for another connection. */
int gcoll_ib_addr_decode(const void *buf, size_t len, uint64_t job_hash, int peer,
                         uint32_t conn_id, size_t slot_bytes, struct gcoll_ib_addr *a,
                         char *err, size_t errlen);

void gcoll_ib_hello_encode(const struct gcoll_ib_hello *h,
                           unsigned char out[GCOLL_IB_HELLO_BYTES]);
/* -1 when not a hello of job job_hash addressed to rank `receiver`. */
int gcoll_ib_hello_decode(const unsigned char in[GCOLL_IB_HELLO_BYTES], uint64_t job_hash,
                          int receiver, struct gcoll_ib_hello *h);

void gcoll_ib_hdr_encode(unsigned char out[GCOLL_IB_HDR_BYTES], uint64_t step, uint32_t nbytes,
                         uint32_t proto);
void gcoll_ib_hdr_decode(const unsigned char in[GCOLL_IB_HDR_BYTES], uint64_t *step,
                         uint32_t *nbytes, uint32_t *proto);

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
