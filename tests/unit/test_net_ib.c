/* net/ib: the wire formats and step arithmetic against hand-computed
 * values, the table entry, init without a device, and (only where an RDMA
 * device with an active port exists) a real stream in both directions
 * between two transports of one process. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/fifo.h"
#include "runtime/net_ib_addr.h"
#include "runtime/net_tcp.h"
#include "runtime/proxy.h"
#include "runtime/transport.h"

#define JOB_HASH 0x0123456789abcdefull
#define SLOT 4096

static void expect_one_line(const char *err, const char *needle) {
  assert_true(strlen(err) > 0);
  assert_null(strchr(err, '\n'));
  if (strstr(err, needle) == NULL) {
    fprintf(stderr, "error '%s' does not mention '%s'\n", err, needle);
    fail();
  }
}

static struct gcoll_ib_addr sample_addr(void) {
  struct gcoll_ib_addr a = {
      .qp = {.qpn = 0x00abcdef, .psn = 0x123456, .lid = 0x1234, .mtu = 5, .link = 1},
      .slots_addr = 0x7f0012345600ull,
      .rkey = 0xdeadbeef,
      .slot_bytes = SLOT,
  };
  for (int i = 0; i < 16; i++) a.qp.gid[i] = (uint8_t)(0xf0 + i);
  return a;
}

static uint32_t be32_at(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return ntohl(v);
}

static void test_addr_roundtrip(void **state) {
  (void)state;
  struct gcoll_ib_addr a = sample_addr(), b;
  unsigned char buf[GCOLL_IB_ADDR_BYTES];
  /* net/ib's part follows the generic net address (net.h). */
  assert_true(48 + GCOLL_IB_ADDR_BYTES <= GCOLL_CONN_ADDR_MAX);
  gcoll_ib_addr_encode(&a, buf);
  /* Spot checks of the documented layout, big-endian. */
  assert_int_equal(be32_at(buf), 0x00abcdef);
  assert_int_equal(be32_at(buf + 28), 0xdeadbeef);
  assert_int_equal(be32_at(buf + 40), SLOT);
  char err[256] = "";
  assert_int_equal(gcoll_ib_addr_decode(buf, SLOT, &b, err, sizeof(err)), 0);
  assert_int_equal(b.qp.qpn, 0x00abcdef);
  assert_int_equal(b.qp.psn, 0x123456);
  assert_int_equal(b.qp.lid, 0x1234);
  assert_int_equal(b.qp.mtu, 5);
  assert_int_equal(b.qp.link, 1);
  assert_memory_equal(b.qp.gid, a.qp.gid, 16);
  assert_true(b.slots_addr == 0x7f0012345600ull);
  assert_int_equal(b.rkey, 0xdeadbeef);
  assert_int_equal(b.slot_bytes, SLOT);
}

/* Encodes a modified sample and expects decode to refuse it. */
static void expect_rejected(void (*change)(struct gcoll_ib_addr *), const char *needle) {
  struct gcoll_ib_addr a = sample_addr(), b;
  change(&a);
  unsigned char buf[GCOLL_IB_ADDR_BYTES];
  gcoll_ib_addr_encode(&a, buf);
  char err[256] = "";
  assert_int_equal(gcoll_ib_addr_decode(buf, SLOT, &b, err, sizeof(err)), -1);
  expect_one_line(err, needle);
}

static void other_slot(struct gcoll_ib_addr *a) { a->slot_bytes = SLOT * 2; }
static void qpn_zero(struct gcoll_ib_addr *a) { a->qp.qpn = 0; }
static void qpn_wide(struct gcoll_ib_addr *a) { a->qp.qpn = 1u << 24; }
static void psn_wide(struct gcoll_ib_addr *a) { a->qp.psn = 1u << 24; }
static void mtu_zero(struct gcoll_ib_addr *a) { a->qp.mtu = 0; }
static void mtu_big(struct gcoll_ib_addr *a) { a->qp.mtu = 6; }
static void bad_link(struct gcoll_ib_addr *a) { a->qp.link = 3; }
static void no_slots(struct gcoll_ib_addr *a) { a->slots_addr = 0; }

/* Rank, connection, job and listener checks are the generic net
 * transport's (test_transport's bad addresses). */
static void test_addr_rejects(void **state) {
  (void)state;
  expect_rejected(other_slot, "8192-byte slots");
  expect_rejected(qpn_zero, "queue pair");
  expect_rejected(qpn_wide, "queue pair");
  expect_rejected(psn_wide, "queue pair");
  expect_rejected(mtu_zero, "queue pair");
  expect_rejected(mtu_big, "queue pair");
  expect_rejected(bad_link, "queue pair");
  expect_rejected(no_slots, "queue pair");
}

static void test_hello(void **state) {
  (void)state;
  struct gcoll_ib_qp_info q = {.qpn = 77, .psn = 5, .lid = 0, .mtu = 3, .link = 2}, g;
  q.gid[15] = 1;
  unsigned char buf[GCOLL_IB_HELLO_BYTES];
  assert_true(32 + GCOLL_IB_HELLO_BYTES <= GCOLL_TCP_HELLO_MAX);
  gcoll_ib_hello_encode(&q, buf);
  assert_int_equal(gcoll_ib_hello_decode(buf, &g), 0);
  assert_int_equal(g.qpn, 77);
  assert_int_equal(g.psn, 5);
  assert_int_equal(g.mtu, 3);
  assert_int_equal(g.link, 2);
  assert_int_equal(g.gid[15], 1);
  q.qpn = 0;
  gcoll_ib_hello_encode(&q, buf);
  assert_int_equal(gcoll_ib_hello_decode(buf, &g), -1); /* no QP */
  q.qpn = 77;
  q.link = 0;
  gcoll_ib_hello_encode(&q, buf);
  assert_int_equal(gcoll_ib_hello_decode(buf, &g), -1);
}

static void test_slot_addr(void **state) {
  (void)state;
  const uint64_t base = 0x10000;
  /* Step s goes to slot s mod 8, whatever its size. */
  assert_true(gcoll_ib_slot_addr(base, SLOT, 0) == base);
  assert_true(gcoll_ib_slot_addr(base, SLOT, 1) == base + 4096);
  assert_true(gcoll_ib_slot_addr(base, SLOT, 7) == base + 7 * 4096);
  assert_true(gcoll_ib_slot_addr(base, SLOT, 8) == base);
  assert_true(gcoll_ib_slot_addr(base, SLOT, 8 * 1000003 + 5) == base + 5 * 4096);
  assert_true(gcoll_ib_slot_addr(base, 64u << 20, 15) == base + 7ull * (64u << 20));
  /* The slots the receiver registers are exactly its FIFO's SIMPLE slots. */
  size_t bytes = gcoll_fifo_bytes(SLOT);
  void *mem = aligned_alloc(64, bytes);
  struct gcoll_fifo *f = gcoll_fifo_init(mem, SLOT);
  uint64_t slots = (uintptr_t)gcoll_fifo_simple_slot(f, 0);
  for (uint64_t s = 0; s < 20; s++)
    assert_true(gcoll_ib_slot_addr(slots, SLOT, s) == (uintptr_t)gcoll_fifo_simple_slot(f, s));
  assert_true(gcoll_ib_slot_addr(slots, SLOT, 7) + SLOT <= (uintptr_t)mem + bytes);
  free(mem);
}

static void test_immediate(void **state) {
  (void)state;
  uint32_t nb;
  int ll;
  for (uint64_t s = 0; s < 40; s++) {
    uint32_t want = (uint32_t)(s * 97 % (SLOT + 1));
    assert_int_equal(gcoll_ib_imm_decode(gcoll_ib_imm_encode(s, want, 0), s, SLOT, &nb, &ll), 0);
    assert_int_equal(nb, want);
    assert_int_equal(ll, 0);
    /* Any other step modulo 16 is a protocol violation. */
    assert_int_equal(gcoll_ib_imm_decode(gcoll_ib_imm_encode(s, want, 0), s + 1, SLOT, &nb, &ll),
                     -1);
    assert_int_equal(gcoll_ib_imm_decode(gcoll_ib_imm_encode(s, want, 0), s + 15, SLOT, &nb, &ll),
                     -1);
  }
  /* Hand-computed: step 5, LL, 1000 bytes = 5<<28 | 1<<27 | 1000. */
  assert_int_equal(gcoll_ib_imm_encode(21, 1000, 1), 0x580003e8u);
  assert_int_equal(gcoll_ib_imm_decode(0x580003e8u, 21, SLOT, &nb, &ll), 0);
  assert_int_equal(nb, 1000);
  assert_int_equal(ll, 1);
  /* Payload limits: SIMPLE the slot, LL a quarter of it. */
  assert_int_equal(gcoll_ib_imm_decode(gcoll_ib_imm_encode(3, SLOT, 0), 3, SLOT, &nb, &ll), 0);
  assert_int_equal(gcoll_ib_imm_decode(gcoll_ib_imm_encode(3, SLOT + 1, 0), 3, SLOT, &nb, &ll),
                   -1);
  assert_int_equal(gcoll_ib_imm_decode(gcoll_ib_imm_encode(3, SLOT / 4, 1), 3, SLOT, &nb, &ll), 0);
  assert_int_equal(gcoll_ib_imm_decode(gcoll_ib_imm_encode(3, SLOT / 4 + 1, 1), 3, SLOT, &nb, &ll),
                   -1);
  /* The biggest slot still fits. */
  uint32_t max = GCOLL_FIFO_MAX_SLOT;
  assert_int_equal(gcoll_ib_imm_decode(gcoll_ib_imm_encode(9, max, 0), 9, max, &nb, &ll), 0);
  assert_int_equal(nb, max);
  assert_int_equal(ll, 0);
}

static void test_credit(void **state) {
  (void)state;
  uint64_t head;
  assert_int_equal(gcoll_ib_credit_decode(5, 3, 8, &head), 0);
  assert_true(head == 5);
  assert_int_equal(gcoll_ib_credit_decode(3, 3, 8, &head), 0); /* repeated head */
  assert_true(head == 3);
  assert_int_equal(gcoll_ib_credit_decode(9, 3, 8, &head), -1); /* beyond what was sent */
  assert_int_equal(gcoll_ib_credit_decode(2, 3, 8, &head), -1); /* going back */
  /* Across the 32-bit wrap of the immediate. */
  uint64_t acked = (1ull << 32) - 3, sent = (1ull << 32) + 5;
  assert_int_equal(gcoll_ib_credit_decode(2, acked, sent, &head), 0);
  assert_true(head == (1ull << 32) + 2);
  assert_int_equal(gcoll_ib_credit_decode(0xfffffffeu, acked, sent, &head), 0);
  assert_true(head == (1ull << 32) - 2);
  assert_int_equal(gcoll_ib_credit_decode(6, acked, sent, &head), -1);
}

static void test_table_entry(void **state) {
  (void)state;
  assert_ptr_equal(gcoll_transport_by_name("net/ib"), &gcoll_transport_ib_ops);
  assert_ptr_equal(gcoll_transport_by_name("ib"), &gcoll_transport_ib_ops);
  assert_string_equal(gcoll_transport_ib_ops.name, "net/ib");
  const struct gcoll_transport_ops *ops = NULL;
  char err[256] = "";
  setenv("GCOLL_TRANSPORT", "net/ib", 1);
  assert_int_equal(gcoll_transport_from_env(&ops, err, sizeof(err)), 0);
  assert_ptr_equal(ops, &gcoll_transport_ib_ops);
  unsetenv("GCOLL_TRANSPORT");
}

static int active_device_count(void) {
  int n = 0, active = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  for (int i = 0; list != NULL && i < n; i++) {
    struct ibv_context *ctx = ibv_open_device(list[i]);
    struct ibv_device_attr da;
    if (ctx == NULL) continue;
    if (ibv_query_device(ctx, &da) == 0)
      for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) active++;
      }
    ibv_close_device(ctx);
  }
  if (list != NULL) ibv_free_device_list(list);
  return active;
}

/* ---- endpoints ------------------------------------------------------------ */

struct endpoint {
  struct gcoll_proxy *proxy;
  struct gcoll_transport *t;
  _Atomic int abort_word, failed_peer;
};

static int ep_init(struct endpoint *ep, const struct gcoll_transport_ops *ops, int rank,
                   const char *job, char *err, size_t errlen) {
  memset(ep, 0, sizeof(*ep));
  atomic_init(&ep->abort_word, 0);
  atomic_init(&ep->failed_peer, -1);
  if (gcoll_proxy_create(&ep->proxy, err, errlen) != 0) return -1;
  struct gcoll_transport_config cfg = {.rank = rank, .nranks = 2, .job_key = job,
                                       .slot_bytes = SLOT, .abort_word = &ep->abort_word,
                                       .failed_peer = &ep->failed_peer, .timeout_ms = 5000,
                                       .proxy = ep->proxy};
  if (ops->init(&ep->t, &cfg, err, errlen) != 0) {
    gcoll_proxy_destroy(ep->proxy);
    ep->proxy = NULL;
    return -1;
  }
  return 0;
}

static void ep_fini(struct endpoint *ep, const struct gcoll_transport_ops *ops) {
  if (ep->proxy != NULL) gcoll_proxy_destroy(ep->proxy);
  if (ep->t != NULL) ops->fini(ep->t);
  memset(ep, 0, sizeof(*ep));
}

/* Without a device, init fails with one line naming the cause, and
 * net/socket (what a caller uses instead) initialises with the same
 * configuration. */
static void test_init_without_device(void **state) {
  (void)state;
  if (active_device_count() > 0) {
    printf("skipped: a verbs device with an active port exists\n");
    skip();
  }
  char err[512] = "";
  struct endpoint ep;
  assert_int_equal(ep_init(&ep, &gcoll_transport_ib_ops, 0, "ib-nodev", err, sizeof(err)), -1);
  expect_one_line(err, "no RDMA device");
  assert_null(ep.t);
  setenv("GCOLL_IB_HCA", "mlx5_99", 1);
  assert_int_equal(ep_init(&ep, &gcoll_transport_ib_ops, 0, "ib-nodev", err, sizeof(err)), -1);
  expect_one_line(err, "no RDMA device");
  unsetenv("GCOLL_IB_HCA");
  assert_int_equal(ep_init(&ep, &gcoll_transport_socket_ops, 0, "ib-nodev", err, sizeof(err)), 0);
  assert_non_null(ep.t);
  ep_fini(&ep, &gcoll_transport_socket_ops);
}

/* ---- a real stream (needs a device) ---------------------------------------- */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Step s of a stream: protocol, size and bytes derived from the seed, so
 * the consumer knows what must arrive. */
static void step_spec(uint64_t seed, uint64_t s, enum gcoll_proto *proto, size_t *nb) {
  uint64_t r = mix(seed ^ mix(s));
  *proto = (r & 1) ? GCOLL_PROTO_LL : GCOLL_PROTO_SIMPLE;
  *nb = *proto == GCOLL_PROTO_LL ? 1 + (r >> 8) % (SLOT / 4) : (r >> 8) % (SLOT + 1);
}

static unsigned char step_byte(uint64_t seed, uint64_t s, size_t i) {
  return (unsigned char)(mix(seed ^ mix(s) ^ (i / 8 * 0x51ull)) >> (8 * (i % 8)));
}

struct stream {
  struct gcoll_fifo *f;
  uint64_t seed, step, total, bad;
};

static int produce(struct stream *st) {
  struct gcoll_fifo *f = st->f;
  uint64_t s = st->step;
  if (s == st->total || atomic_load_explicit(&f->head, memory_order_acquire) + GCOLL_STEPS <= s)
    return 0;
  enum gcoll_proto proto;
  size_t nb;
  step_spec(st->seed, s, &proto, &nb);
  if (proto == GCOLL_PROTO_LL) {
    _Atomic uint64_t *lines = gcoll_fifo_ll_slot(f, s);
    for (size_t l = 0; 4 * l < nb; l++) {
      unsigned char w[4] = {0};
      for (size_t k = 0; k < 4 && 4 * l + k < nb; k++) w[k] = step_byte(st->seed, s, 4 * l + k);
      uint32_t word;
      memcpy(&word, w, 4);
      atomic_store_explicit(&lines[l], gcoll_ll_line(word, s), memory_order_relaxed);
    }
  } else {
    unsigned char *d = gcoll_fifo_simple_slot(f, s);
    for (size_t i = 0; i < nb; i++) d[i] = step_byte(st->seed, s, i);
  }
  f->nbytes[gcoll_fifo_slot(s)] = (uint32_t)nb;
  f->proto[gcoll_fifo_slot(s)] = (uint32_t)proto;
  atomic_store_explicit(&f->tail, s + 1, memory_order_release);
  st->step++;
  return 1;
}

static int consume(struct stream *st) {
  struct gcoll_fifo *f = st->f;
  uint64_t s = st->step;
  if (s == st->total) return 0;
  enum gcoll_proto proto;
  size_t nb;
  step_spec(st->seed, s, &proto, &nb);
  if (proto == GCOLL_PROTO_LL) {
    _Atomic uint64_t *lines = gcoll_fifo_ll_slot(f, s);
    for (size_t l = 0; 4 * l < nb; l++)
      if (!gcoll_ll_line_ready(atomic_load_explicit(&lines[l], memory_order_relaxed), s)) return 0;
    for (size_t l = 0; 4 * l < nb; l++) {
      uint32_t word = (uint32_t)atomic_load_explicit(&lines[l], memory_order_relaxed);
      unsigned char w[4];
      memcpy(w, &word, 4);
      for (size_t k = 0; k < 4 && 4 * l + k < nb; k++)
        if (w[k] != step_byte(st->seed, s, 4 * l + k) && !st->bad) st->bad = s + 1;
    }
  } else {
    if (atomic_load_explicit(&f->tail, memory_order_acquire) <= s) return 0;
    if (f->nbytes[gcoll_fifo_slot(s)] != nb && !st->bad) st->bad = s + 1;
    const unsigned char *d = gcoll_fifo_simple_slot(f, s);
    for (size_t i = 0; i < nb; i++)
      if (d[i] != step_byte(st->seed, s, i) && !st->bad) st->bad = s + 1;
  }
  atomic_store_explicit(&f->head, s + 1, memory_order_release);
  st->step++;
  return 1;
}

/* Connects `from` -> `to` (ranks 0/1) over net/ib. */
static void connect_pair(struct endpoint *from, int from_rank, struct endpoint *to,
                         struct gcoll_conn *send, struct gcoll_conn *recv) {
  const struct gcoll_transport_ops *ops = &gcoll_transport_ib_ops;
  unsigned char addr[GCOLL_CONN_ADDR_MAX];
  size_t len = sizeof(addr);
  char err[512] = "";
  uint64_t dl = gcoll_transport_now_ms() + 5000;
  if (ops->recv_setup(to->t, from_rank, 1, recv, addr, &len, err, sizeof(err)) != 0 ||
      ops->send_connect(from->t, 1 - from_rank, 1, addr, len, send, dl, err, sizeof(err)) != 0 ||
      ops->recv_complete(to->t, recv, dl, err, sizeof(err)) != 0) {
    fprintf(stderr, "net/ib connect: %s\n", err);
    fail();
  }
}

static void test_stream_both_ways(void **state) {
  (void)state;
  if (active_device_count() == 0) {
    printf("skipped: no verbs device\n");
    skip();
  }
  const struct gcoll_transport_ops *ops = &gcoll_transport_ib_ops;
  char job[64], err[512] = "";
  snprintf(job, sizeof(job), "ib-stream-%d", (int)getpid());
  struct endpoint a, b;
  if (ep_init(&a, ops, 0, job, err, sizeof(err)) != 0 ||
      ep_init(&b, ops, 1, job, err, sizeof(err)) != 0) {
    fprintf(stderr, "net/ib init: %s\n", err);
    fail();
  }
  struct gcoll_conn a_send, b_recv, b_send, a_recv;
  connect_pair(&a, 0, &b, &a_send, &b_recv);
  connect_pair(&b, 1, &a, &b_send, &a_recv);
  const uint64_t total = 5000;
  struct stream p0 = {.f = a_send.fifo, .seed = 11, .total = total},
                c1 = {.f = b_recv.fifo, .seed = 11, .total = total},
                p1 = {.f = b_send.fifo, .seed = 22, .total = total},
                c0 = {.f = a_recv.fifo, .seed = 22, .total = total};
  uint64_t deadline = gcoll_transport_now_ms() + 20000;
  while ((c0.step < total || c1.step < total) && gcoll_transport_now_ms() < deadline &&
         atomic_load(&a.abort_word) == 0 && atomic_load(&b.abort_word) == 0) {
    int moved = produce(&p0) | produce(&p1) | consume(&c0) | consume(&c1);
    if (!moved) {
      gcoll_proxy_wake(a.proxy);
      gcoll_proxy_wake(b.proxy);
      usleep(10);
    }
  }
  assert_int_equal(atomic_load(&a.abort_word), 0);
  assert_int_equal(atomic_load(&b.abort_word), 0);
  assert_true(c0.step == total && c1.step == total);
  assert_true(c0.bad == 0 && c1.bad == 0);
  /* Clean close: no side sees a failure. */
  gcoll_proxy_destroy(a.proxy);
  gcoll_proxy_destroy(b.proxy);
  a.proxy = b.proxy = NULL;
  ops->conn_close(a.t, &a_send);
  ops->conn_close(b.t, &b_recv);
  ops->conn_close(b.t, &b_send);
  ops->conn_close(a.t, &a_recv);
  assert_int_equal(atomic_load(&a.failed_peer), -1);
  assert_int_equal(atomic_load(&b.failed_peer), -1);
  ep_fini(&a, ops);
  ep_fini(&b, ops);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_addr_roundtrip),
      cmocka_unit_test(test_addr_rejects),
      cmocka_unit_test(test_hello),
      cmocka_unit_test(test_slot_addr),
      cmocka_unit_test(test_immediate),
      cmocka_unit_test(test_credit),
      cmocka_unit_test(test_table_entry),
      cmocka_unit_test(test_init_without_device),
      cmocka_unit_test(test_stream_both_ways),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
