/* net/ib wire formats and step arithmetic (see net_ib_addr.h). */
#define _GNU_SOURCE
#include "runtime/net_ib_addr.h"

#include <stdio.h>
#include <string.h>

#include "kernels/fifo.h"
#include "runtime/net_tcp.h"

/* Immediate of a data write: nbytes needs 27 bits (up to 64 MiB
 * inclusive), one bit says LL, the top four carry the step modulo 16. */
#define IMM_NBYTES_BITS 27
#define IMM_NBYTES_MASK ((1u << IMM_NBYTES_BITS) - 1)
#define IMM_LL_BIT (1u << IMM_NBYTES_BITS)
#define IMM_STEP_SHIFT 28

_Static_assert(GCOLL_FIFO_MAX_SLOT <= IMM_NBYTES_MASK, "slot size must fit the immediate");

/* QP info: 28 bytes at p. */
static void put_qp(unsigned char *p, const struct gcoll_ib_qp_info *q) {
  gcoll_put_be32(p, q->qpn);
  gcoll_put_be32(p + 4, q->psn);
  gcoll_put_be16(p + 8, q->lid);
  p[10] = q->mtu;
  p[11] = q->link;
  memcpy(p + 12, q->gid, 16);
}

static void get_qp(const unsigned char *p, struct gcoll_ib_qp_info *q) {
  q->qpn = gcoll_get_be32(p);
  q->psn = gcoll_get_be32(p + 4);
  q->lid = gcoll_get_be16(p + 8);
  q->mtu = p[10];
  q->link = p[11];
  memcpy(q->gid, p + 12, 16);
}

static int qp_valid(const struct gcoll_ib_qp_info *q) {
  return q->qpn != 0 && q->qpn < (1u << 24) && q->psn < (1u << 24) && q->mtu >= 1 &&
         q->mtu <= 5 && (q->link == 1 || q->link == 2);
}

/* Layout: 0 QP info (28), 28 rkey, 32 slots addr, 40 slot bytes. */
void gcoll_ib_addr_encode(const struct gcoll_ib_addr *a, unsigned char out[GCOLL_IB_ADDR_BYTES]) {
  memset(out, 0, GCOLL_IB_ADDR_BYTES);
  put_qp(out, &a->qp);
  gcoll_put_be32(out + 28, a->rkey);
  gcoll_put_be64(out + 32, a->slots_addr);
  gcoll_put_be32(out + 40, a->slot_bytes);
}

int gcoll_ib_addr_decode(const unsigned char in[GCOLL_IB_ADDR_BYTES], size_t slot_bytes,
                         struct gcoll_ib_addr *a, char *err, size_t errlen) {
  memset(a, 0, sizeof(*a));
  get_qp(in, &a->qp);
  a->rkey = gcoll_get_be32(in + 28);
  a->slots_addr = gcoll_get_be64(in + 32);
  a->slot_bytes = gcoll_get_be32(in + 40);
  if (a->slot_bytes != slot_bytes)
    snprintf(err, errlen, "net/ib address has %u-byte slots, this rank uses %zu", a->slot_bytes,
             slot_bytes);
  else if (!qp_valid(&a->qp) || a->slots_addr == 0)
    snprintf(err, errlen, "net/ib address has an invalid queue pair (qpn %u, mtu %u, link %u)",
             a->qp.qpn, a->qp.mtu, a->qp.link);
  else
    return 0;
  return -1;
}

void gcoll_ib_hello_encode(const struct gcoll_ib_qp_info *qp,
                           unsigned char out[GCOLL_IB_HELLO_BYTES]) {
  put_qp(out, qp);
}

int gcoll_ib_hello_decode(const unsigned char in[GCOLL_IB_HELLO_BYTES],
                          struct gcoll_ib_qp_info *qp) {
  get_qp(in, qp);
  return qp_valid(qp) ? 0 : -1;
}

uint64_t gcoll_ib_slot_addr(uint64_t slots_addr, uint64_t slot_bytes, uint64_t step) {
  return slots_addr + gcoll_fifo_slot(step) * slot_bytes;
}

uint32_t gcoll_ib_imm_encode(uint64_t step, uint32_t nbytes, int is_ll) {
  return (uint32_t)(step & 15u) << IMM_STEP_SHIFT | (is_ll ? IMM_LL_BIT : 0) |
         (nbytes & IMM_NBYTES_MASK);
}

int gcoll_ib_imm_decode(uint32_t imm, uint64_t expected_step, size_t slot_bytes,
                        uint32_t *nbytes, int *is_ll) {
  *nbytes = imm & IMM_NBYTES_MASK;
  *is_ll = (imm & IMM_LL_BIT) != 0;
  if ((imm >> IMM_STEP_SHIFT) != (expected_step & 15u)) return -1;
  /* An LL step carries at most a quarter of the slot: its lines take
   * half, and half of each line is the flag. */
  if (*is_ll) return *nbytes <= slot_bytes / 4 ? 0 : -1;
  return *nbytes <= slot_bytes ? 0 : -1;
}

int gcoll_ib_credit_decode(uint32_t imm, uint64_t acked, uint64_t sent, uint64_t *head) {
  uint64_t h = acked + (uint32_t)(imm - (uint32_t)acked);
  if (h > sent) return -1;
  *head = h;
  return 0;
}
