/* net/ib wire formats and step arithmetic (see net_ib_addr.h). */
#define _GNU_SOURCE
#include "runtime/net_ib_addr.h"

#include <stdio.h>
#include <string.h>

#include "kernels/fifo.h"
#include "runtime/net_tcp.h"

#define ADDR_MAGIC 0x47434942u  /* "GCIB" */
#define HELLO_MAGIC 0x47494248u /* "GIBH" */
#define WIRE_VERSION 2

/* net/ib's side channel speaks net/socket's goodbye/blame headers. */
_Static_assert(GCOLL_IB_HDR_BYTES == GCOLL_TCP_HDR_BYTES, "one side channel header");
_Static_assert(GCOLL_IB_PROTO_GOODBYE == GCOLL_TCP_PROTO_GOODBYE, "one goodbye");
_Static_assert(GCOLL_IB_PROTO_BLAME == GCOLL_TCP_PROTO_BLAME, "one blame");

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

/* Layout: 0 magic, 4 version, 6 family, 8 port, 12 conn_id, 16 rank,
 * 24 job hash, 32 QP info (28), 60 rkey, 64 slots addr, 72 slot bytes,
 * 76 ip (16), 92 reserved. */
void gcoll_ib_addr_encode(const struct gcoll_ib_addr *a, unsigned char out[GCOLL_IB_ADDR_BYTES]) {
  memset(out, 0, GCOLL_IB_ADDR_BYTES);
  gcoll_put_be32(out, ADDR_MAGIC);
  gcoll_put_be16(out + 4, WIRE_VERSION);
  gcoll_put_be16(out + 6, (uint16_t)a->family);
  gcoll_put_be16(out + 8, a->port);
  gcoll_put_be32(out + 12, a->conn_id);
  gcoll_put_be32(out + 16, (uint32_t)a->rank);
  gcoll_put_be64(out + 24, a->job_hash);
  put_qp(out + 32, &a->qp);
  gcoll_put_be32(out + 60, a->rkey);
  gcoll_put_be64(out + 64, a->slots_addr);
  gcoll_put_be32(out + 72, a->slot_bytes);
  memcpy(out + 76, a->ip, 16);
}

int gcoll_ib_addr_decode(const void *buf, size_t len, uint64_t job_hash, int peer,
                         uint32_t conn_id, size_t slot_bytes, struct gcoll_ib_addr *a,
                         char *err, size_t errlen) {
  const unsigned char *p = buf;
  if (p == NULL || len != GCOLL_IB_ADDR_BYTES) {
    snprintf(err, errlen, "net/ib address of %zu bytes, expected %d", len, GCOLL_IB_ADDR_BYTES);
    return -1;
  }
  if (gcoll_get_be32(p) != ADDR_MAGIC || gcoll_get_be16(p + 4) != WIRE_VERSION) {
    snprintf(err, errlen, "not a gcoll net/ib address (version %u)", gcoll_get_be16(p + 4));
    return -1;
  }
  memset(a, 0, sizeof(*a));
  a->family = gcoll_get_be16(p + 6);
  a->port = gcoll_get_be16(p + 8);
  a->conn_id = gcoll_get_be32(p + 12);
  a->rank = (int32_t)gcoll_get_be32(p + 16);
  a->job_hash = gcoll_get_be64(p + 24);
  get_qp(p + 32, &a->qp);
  a->rkey = gcoll_get_be32(p + 60);
  a->slots_addr = gcoll_get_be64(p + 64);
  a->slot_bytes = gcoll_get_be32(p + 72);
  memcpy(a->ip, p + 76, 16);
  if (a->job_hash != job_hash)
    snprintf(err, errlen, "net/ib address is from another job (job hash %016llx, ours %016llx)",
             (unsigned long long)a->job_hash, (unsigned long long)job_hash);
  else if (a->rank != peer || a->conn_id != conn_id)
    snprintf(err, errlen,
             "net/ib address is for rank %d connection %u, expected rank %d connection %u",
             a->rank, a->conn_id, peer, conn_id);
  else if (a->slot_bytes != slot_bytes)
    snprintf(err, errlen, "net/ib address has %u-byte slots, this rank uses %zu", a->slot_bytes,
             slot_bytes);
  else if ((a->family != 4 && a->family != 6) || a->port == 0)
    snprintf(err, errlen, "net/ib address has no side channel (family %d, port %u)", a->family,
             a->port);
  else if (!qp_valid(&a->qp) || a->slots_addr == 0)
    snprintf(err, errlen, "net/ib address has an invalid queue pair (qpn %u, mtu %u, link %u)",
             a->qp.qpn, a->qp.mtu, a->qp.link);
  else
    return 0;
  return -1;
}

/* Layout: 0 magic, 4 version, 8 sender, 12 receiver, 16 conn_id,
 * 24 job hash, 32 QP info (28), 60 reserved. */
void gcoll_ib_hello_encode(const struct gcoll_ib_hello *h,
                           unsigned char out[GCOLL_IB_HELLO_BYTES]) {
  memset(out, 0, GCOLL_IB_HELLO_BYTES);
  gcoll_put_be32(out, HELLO_MAGIC);
  gcoll_put_be16(out + 4, WIRE_VERSION);
  gcoll_put_be32(out + 8, (uint32_t)h->sender);
  gcoll_put_be32(out + 12, (uint32_t)h->receiver);
  gcoll_put_be32(out + 16, h->conn_id);
  gcoll_put_be64(out + 24, h->job_hash);
  put_qp(out + 32, &h->qp);
}

int gcoll_ib_hello_decode(const unsigned char in[GCOLL_IB_HELLO_BYTES], uint64_t job_hash,
                          int receiver, struct gcoll_ib_hello *h) {
  if (gcoll_get_be32(in) != HELLO_MAGIC || gcoll_get_be16(in + 4) != WIRE_VERSION ||
      gcoll_get_be64(in + 24) != job_hash ||
      (int32_t)gcoll_get_be32(in + 12) != receiver)
    return -1;
  h->sender = (int32_t)gcoll_get_be32(in + 8);
  h->receiver = receiver;
  h->conn_id = gcoll_get_be32(in + 16);
  h->job_hash = job_hash;
  get_qp(in + 32, &h->qp);
  return h->sender >= 0 && qp_valid(&h->qp) ? 0 : -1;
}

/* The same header as net/socket's, so the goodbye/blame protocol is one. */
void gcoll_ib_hdr_encode(unsigned char out[GCOLL_IB_HDR_BYTES], uint64_t step, uint32_t nbytes,
                         uint32_t proto) {
  gcoll_tcp_hdr_encode(out, step, nbytes, proto);
}

void gcoll_ib_hdr_decode(const unsigned char in[GCOLL_IB_HDR_BYTES], uint64_t *step,
                         uint32_t *nbytes, uint32_t *proto) {
  gcoll_tcp_hdr_decode(in, step, nbytes, proto);
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
