/* Checks of gcollSend/gcollRecv and groups, run as real ranks under gcollrun
 * (tests/integration/test_p2p.sh).
 *
 *   p2p_check exchange     ring exchange and all-to-all in groups, sizes 0 to
 *                          1M+3 elements of several types; blocking pairs
 *                          (even ranks send first, odd ranks receive first);
 *                          several messages to one peer in one group; self
 *                          send/recv; zero-count messages between others;
 *                          a group of two allreduces and a send/recv ring
 *   p2p_check mismatch     a receive of another size than the send fails with
 *                          gcollInvalidUsage and one line; the next exchange
 *                          between the same ranks still works
 *   p2p_check norecv MODE  rank 1 never receives what rank 0 sends: rank 0
 *                          fails within GCOLL_TIMEOUT. MODE fresh: the first
 *                          message (no connection yet); big: a message larger
 *                          than the connection's buffer after one that worked
 *   p2p_check badargs      invalid arguments and group misuse are refused
 *   p2p_check abort        gcollCommAbort from another thread ends a receive
 *                          nobody sends to
 *   p2p_check die          rank 1 SIGKILLs itself; rank 0, waiting to
 *                          receive from it, fails with gcollRemoteError
 *                          naming rank 1
 *
 * Every byte sent is a function of (sender, receiver, message index, element
 * index, seed), so the receiver recomputes what it must get without any
 * communication. Prints one line per rank and exits 1 on any difference. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"
#include "check_util.h"
#include "kernels/reduce.h"

/* count elements of esize bytes: what src sends dst as message msg. One
 * hash per 8 bytes keeps checking megabytes cheap on a loaded machine. */
static void fill(unsigned char *buf, size_t count, size_t esize, int src, int dst, uint64_t msg,
                 uint64_t seed) {
  uint64_t base = mix(seed ^ mix(((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^ msg));
  size_t bytes = count * esize;
  for (size_t w = 0; w * 8 < bytes; w++) {
    uint64_t h = mix(base + w);
    memcpy(buf + w * 8, &h, bytes - w * 8 < 8 ? bytes - w * 8 : 8);
  }
}

static long wrong_bytes(const unsigned char *got, size_t count, size_t esize, int src, int dst,
                        uint64_t msg, uint64_t seed, unsigned char *scratch) {
  fill(scratch, count, esize, src, dst, msg, seed);
  size_t bytes = count * esize;
  if (memcmp(got, scratch, bytes) == 0) return 0;
  long wrong = 0;
  for (size_t i = 0; i < bytes; i++) wrong += got[i] != scratch[i];
  return wrong;
}

/* ---- exchange ----------------------------------------------------------------- */

struct bufs {
  unsigned char *send, *recv, *scratch;
  size_t cap;                 /* bytes per peer block */
};

/* Ring: send to next, receive from prev, in one group. */
static long ring(gcollComm_t comm, struct bufs *b, gcollDataType_t t, size_t count,
                 uint64_t seed) {
  size_t es = gcoll_dtype_size(t);
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  fill(b->send, count, es, rank, next, 0, seed);
  memset(b->recv, 0xa5, count * es + 64);
  gcollGroupStart();
  gcollResult_t rc = gcollSend(b->send, count, t, next, comm, NULL);
  gcollResult_t rc2 = gcollRecv(b->recv, count, t, prev, comm, NULL);
  gcollResult_t rc3 = gcollGroupEnd();
  char what[96];
  snprintf(what, sizeof(what), "ring %s count %zu", gcoll_dtype_name(t), count);
  if (check_gcoll(rc, what) || check_gcoll(rc2, what) || check_gcoll(rc3, what)) return -1;
  long wrong = wrong_bytes(b->recv, count, es, prev, rank, 0, seed, b->scratch);
  for (size_t i = 0; i < 64; i++) wrong += b->recv[count * es + i] != 0xa5;
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* All-to-all: every rank sends block dst to dst (itself included), posted
 * in a rank-dependent order so that no two ranks post alike. */
static long alltoall(gcollComm_t comm, struct bufs *b, gcollDataType_t t, size_t count,
                     uint64_t seed) {
  size_t es = gcoll_dtype_size(t), bytes = count * es;
  for (int p = 0; p < nranks; p++) {
    fill(b->send + (size_t)p * b->cap, count, es, rank, p, 1, seed);
    memset(b->recv + (size_t)p * b->cap, 0xa5, bytes + 64);
  }
  gcollResult_t rc = gcollGroupStart();
  for (int k = 0; k < nranks && rc == gcollSuccess; k++) {
    int to = (rank + k) % nranks, from = (rank + nranks - k) % nranks;
    unsigned char *out = b->send + (size_t)to * b->cap, *in = b->recv + (size_t)from * b->cap;
    if (rank % 2) {
      rc = gcollRecv(in, count, t, from, comm, NULL);
      if (rc == gcollSuccess) rc = gcollSend(out, count, t, to, comm, NULL);
    } else {
      rc = gcollSend(out, count, t, to, comm, NULL);
      if (rc == gcollSuccess) rc = gcollRecv(in, count, t, from, comm, NULL);
    }
  }
  gcollResult_t end = gcollGroupEnd();
  char what[96];
  snprintf(what, sizeof(what), "alltoall %s count %zu", gcoll_dtype_name(t), count);
  if (check_gcoll(rc, what) || check_gcoll(end, what)) return -1;
  long wrong = 0;
  for (int p = 0; p < nranks; p++) {
    const unsigned char *got = b->recv + (size_t)p * b->cap;
    wrong += wrong_bytes(got, count, es, p, rank, 1, seed, b->scratch);
    for (size_t i = 0; i < 64; i++) wrong += got[bytes + i] != 0xa5;
  }
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* Blocking calls between partners rank ^ 1: even ranks send first. */
static long pairs(gcollComm_t comm, struct bufs *b, size_t count, uint64_t seed) {
  int partner = rank ^ 1;
  if (partner >= nranks) return 0;
  gcollDataType_t t = gcollBfloat16;
  size_t es = 2;
  fill(b->send, count, es, rank, partner, 2, seed);
  memset(b->recv, 0xa5, count * es);
  gcollResult_t rc1, rc2;
  if (rank % 2 == 0) {
    rc1 = gcollSend(b->send, count, t, partner, comm, NULL);
    rc2 = gcollRecv(b->recv, count, t, partner, comm, NULL);
  } else {
    rc2 = gcollRecv(b->recv, count, t, partner, comm, NULL);
    rc1 = gcollSend(b->send, count, t, partner, comm, NULL);
  }
  char what[64];
  snprintf(what, sizeof(what), "blocking pair count %zu", count);
  if (check_gcoll(rc1, what) || check_gcoll(rc2, what)) return -1;
  long wrong = wrong_bytes(b->recv, count, es, partner, rank, 2, seed, b->scratch);
  if (wrong) fprintf(stderr, "rank %d: %s: %ld wrong bytes\n", rank, what, wrong);
  return wrong;
}

/* Several messages of different sizes to next in one group; prev receives
 * them with blocking calls, in order: each must be the one sent in that
 * position. Sizes are such that a swap would also change the size. */
#define NORDER 5
static long order(gcollComm_t comm, struct bufs *b, uint64_t seed) {
  static const size_t counts[NORDER] = {3, 70000, 0, 1, 40000};
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  size_t off[NORDER + 1] = {0};
  for (int m = 0; m < NORDER; m++) off[m + 1] = off[m] + counts[m] * 8;
  for (int m = 0; m < NORDER; m++) fill(b->send + off[m], counts[m], 8, rank, next, 10 + m, seed);
  memset(b->recv, 0xa5, off[NORDER]);
  gcollResult_t rc = gcollGroupStart();
  for (int m = 0; m < NORDER && rc == gcollSuccess; m++)
    rc = gcollSend(b->send + off[m], counts[m], gcollUint64, next, comm, NULL);
  /* Odd ranks run their group first, even ones receive first: both orders
   * of "group of sends" and "blocking receives" meet. */
  gcollResult_t end = gcollSuccess;
  if (rank % 2) end = gcollGroupEnd();
  for (int m = 0; m < NORDER && rc == gcollSuccess; m++)
    rc = gcollRecv(b->recv + off[m], counts[m], gcollUint64, prev, comm, NULL);
  if (rank % 2 == 0) end = gcollGroupEnd();
  if (check_gcoll(rc, "ordered messages") || check_gcoll(end, "ordered messages")) return -1;
  long wrong = 0;
  for (int m = 0; m < NORDER; m++)
    wrong += wrong_bytes(b->recv + off[m], counts[m], 8, prev, rank, 10 + m, seed, b->scratch);
  if (wrong) fprintf(stderr, "rank %d: ordered messages: %ld wrong bytes\n", rank, wrong);
  return wrong;
}

/* Two sends to self and two receives from self in one group, sizes differ,
 * plus a send alone to self outside a group, which must be refused. */
static long self(gcollComm_t comm, struct bufs *b, uint64_t seed) {
  size_t c0 = 5, c1 = 9000;
  fill(b->send, c0, 2, rank, rank, 20, seed);
  fill(b->send + b->cap, c1, 2, rank, rank, 21, seed);
  gcollGroupStart();
  gcollResult_t rc = gcollRecv(b->recv, c0, gcollHalf, rank, comm, NULL);
  if (rc == gcollSuccess) rc = gcollSend(b->send, c0, gcollHalf, rank, comm, NULL);
  if (rc == gcollSuccess) rc = gcollSend(b->send + b->cap, c1, gcollHalf, rank, comm, NULL);
  if (rc == gcollSuccess) rc = gcollRecv(b->recv + b->cap, c1, gcollHalf, rank, comm, NULL);
  gcollResult_t end = gcollGroupEnd();
  if (check_gcoll(rc, "self") || check_gcoll(end, "self")) return -1;
  long wrong = wrong_bytes(b->recv, c0, 2, rank, rank, 20, seed, b->scratch) +
               wrong_bytes(b->recv + b->cap, c1, 2, rank, rank, 21, seed, b->scratch);
  rc = gcollSend(b->send, 4, gcollInt32, rank, comm, NULL);
  if (rc != gcollInvalidUsage) {
    fprintf(stderr, "rank %d: a lone send to self returned %s\n", rank, gcollGetErrorString(rc));
    wrong++;
  }
  if (wrong) fprintf(stderr, "rank %d: self: %ld wrong\n", rank, wrong);
  return wrong;
}

static int exchange(gcollComm_t comm) {
  static const size_t sizes[] = {0, 1, 7, 1023, 4097, (1u << 20) + 3};
  static const gcollDataType_t types[] = {gcollInt8, gcollFloat16, gcollFloat32, gcollFloat64};
  int nsizes = 6, ntypes = 4;
  struct bufs b;
  b.cap = ((1u << 20) + 3) * 2 + 128;
  size_t blocks = nranks < 2 ? 2 : (size_t)nranks;  /* self() uses two */
  b.send = xmalloc(b.cap * blocks);
  b.recv = xmalloc(b.cap * blocks);
  b.scratch = xmalloc(b.cap);
  long wrong = 0, calls = 0, w;
  uint64_t seed = 777;
  double t0 = now_s();
  for (int ti = 0; ti < ntypes; ti++)
    for (int s = 0; s < nsizes; s++) {
      /* The largest size is about chunking, not types: two types. */
      if (s == nsizes - 1 && types[ti] != gcollInt8 && types[ti] != gcollFloat16) continue;
      if ((w = ring(comm, &b, types[ti], sizes[s], seed + (uint64_t)calls++)) < 0) return 1;
      wrong += w;
      if ((w = alltoall(comm, &b, types[ti], sizes[s], seed + (uint64_t)calls++)) < 0) return 1;
      wrong += w;
    }
  for (int s = 0; s < nsizes; s++) {
    if ((w = pairs(comm, &b, sizes[s], seed + (uint64_t)calls++)) < 0) return 1;
    wrong += w;
  }
  for (int k = 0; k < 3 && nranks > 1; k++) {
    if ((w = order(comm, &b, seed + (uint64_t)calls++)) < 0) return 1;
    wrong += w;
  }
  if ((w = self(comm, &b, seed + (uint64_t)calls++)) < 0) return 1;
  wrong += w;
  /* Collectives and send/recv share the communicator. */
  float x = (float)(rank + 1);
  if (check_gcoll(gcollAllReduce(&x, &x, 1, gcollFloat, gcollSum, comm, NULL), "allreduce after"))
    return 1;
  wrong += x != (float)nranks * (nranks + 1) / 2;
  /* Collectives grouped with sends and receives, between processes. */
  int32_t v[3] = {rank, 2 * rank, 3 * rank}, sum[3] = {0}, top = rank, token = 7 * rank, in = -1;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  gcollGroupStart();
  gcollAllReduce(v, sum, 3, gcollInt32, gcollSum, comm, NULL);
  gcollSend(&token, 1, gcollInt32, next, comm, NULL);
  gcollRecv(&in, 1, gcollInt32, prev, comm, NULL);
  gcollAllReduce(&top, &top, 1, gcollInt32, gcollMax, comm, NULL);
  if (check_gcoll(gcollGroupEnd(), "group of collectives and send/recv")) return 1;
  for (int i = 0; i < 3; i++) wrong += sum[i] != (i + 1) * nranks * (nranks - 1) / 2;
  wrong += (top != nranks - 1) + (in != 7 * prev);
  printf("rank %d: %ld exchanges, %ld wrong bytes, %.2f s\n", rank, calls, wrong, now_s() - t0);
  free(b.send);
  free(b.recv);
  free(b.scratch);
  return wrong ? 1 : 0;
}

/* ---- failures ----------------------------------------------------------------- */

static int mismatch(gcollComm_t comm) {
  if (nranks < 2) return 2;
  if (rank > 1) return printf("rank %d: not involved\n", rank), 0;
  int bad = 0;
  int32_t buf[200], got[200];
  /* Smaller, then larger receive than the send; each is consumed whole. */
  for (int k = 0; k < 2; k++) {
    size_t send_count = 100, recv_count = k == 0 ? 50 : 150;
    fill((unsigned char *)buf, send_count, 4, 0, 1, 30 + k, 5);
    gcollResult_t rc = rank == 0 ? gcollSend(buf, send_count, gcollInt32, 1, comm, NULL)
                                 : gcollRecv(got, recv_count, gcollInt32, 0, comm, NULL);
    if (rank == 0 && rc != gcollSuccess)
      bad += !!printf("rank 0: send failed: %s\n", gcollGetLastError(NULL));
    if (rank == 1) {
      const char *why = gcollGetLastError(NULL);
      printf("rank 1: receive of %zu for a send of %zu: %s: %s\n", recv_count, send_count,
             gcollGetErrorString(rc), why);
      bad += rc != gcollInvalidUsage || strchr(why, '\n') != NULL ||
             strstr(why, "400 bytes") == NULL;
    }
  }
  /* The connection is still in step: a matching exchange works. */
  fill((unsigned char *)buf, 200, 4, 0, 1, 40, 5);
  gcollResult_t rc = rank == 0 ? gcollSend(buf, 200, gcollInt32, 1, comm, NULL)
                               : gcollRecv(got, 200, gcollInt32, 0, comm, NULL);
  if (check_gcoll(rc, "exchange after mismatch")) return 1;
  unsigned char scratch[800];
  if (rank == 1) bad += wrong_bytes((unsigned char *)got, 200, 4, 0, 1, 40, 5, scratch) != 0;
  printf("rank %d: %s\n", rank, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}

static int norecv(gcollComm_t comm, const char *mode) {
  /* Survivors must report, not be stopped by gcollrun first. */
  signal(SIGTERM, SIG_IGN);
  int big = strcmp(mode, "big") == 0;
  size_t count = big ? (8u << 20) : 16;  /* big: 32 MiB, more than any FIFO */
  float *buf = xmalloc(count * sizeof(float));
  if (big) {
    /* A first message that works, so the connection exists. */
    gcollResult_t rc = rank == 0 ? gcollSend(buf, 16, gcollFloat, 1, comm, NULL)
                     : rank == 1 ? gcollRecv(buf, 16, gcollFloat, 0, comm, NULL) : gcollSuccess;
    if (check_gcoll(rc, "first message")) return 1;
  }
  int status = 0;
  if (rank == 0) {
    double t0 = now_s();
    gcollResult_t rc = gcollSend(buf, count, gcollFloat, 1, comm, NULL);
    double dt = now_s() - t0;
    printf("rank 0: send nobody receives returned %s after %.2f s: %s\n", gcollGetErrorString(rc),
           dt, gcollGetLastError(NULL));
    status = rc == gcollSystemError && strstr(gcollGetLastError(NULL), "rank 1") != NULL ? 0 : 1;
  } else {
    /* Rank 1 stays alive past rank 0's deadline without receiving. */
    sleep(3);
    printf("rank %d: done\n", rank);
  }
  free(buf);
  return status;
}

static int expect(gcollResult_t got, gcollResult_t want, const char *what) {
  if (got == want) {
    printf("rank %d: %s refused: %s\n", rank, what, gcollGetLastError(NULL));
    return 0;
  }
  printf("rank %d: %s returned %s, expected %s\n", rank, what, gcollGetErrorString(got),
         gcollGetErrorString(want));
  return 1;
}

static int badargs(gcollComm_t comm) {
  float buf[16] = {0};
  int bad = 0, peer = (rank + 1) % nranks;
  bad += expect(gcollSend(buf, 16, gcollFloat, nranks, comm, NULL), gcollInvalidArgument, "send to rank nranks");
  bad += expect(gcollRecv(buf, 16, gcollFloat, -1, comm, NULL), gcollInvalidArgument, "recv from rank -1");
  bad += expect(gcollSend(NULL, 16, gcollFloat, peer, comm, NULL), gcollInvalidArgument, "NULL sendbuff");
  bad += expect(gcollRecv(NULL, 16, gcollFloat, peer, comm, NULL), gcollInvalidArgument, "NULL recvbuff");
  bad += expect(gcollSend(buf, 16, (gcollDataType_t)42, peer, comm, NULL), gcollInvalidArgument, "bad type");
  bad += expect(gcollRecv(buf, SIZE_MAX / 2, gcollFloat, peer, comm, NULL), gcollInvalidArgument, "count overflow");
  bad += expect(gcollSend(buf, 16, gcollFloat, peer, NULL, NULL), gcollInvalidArgument, "NULL comm");
  bad += expect(gcollSend(buf, 16, gcollFloat, peer, comm, (void *)buf), gcollInvalidUsage, "a stream");
  bad += expect(gcollGroupEnd(), gcollInvalidUsage, "gcollGroupEnd without gcollGroupStart");
  /* A collective refused in a group fails the whole group: the valid
   * send queued before it is not run (its peer posts no receive). */
  gcollGroupStart();
  gcollResult_t q = gcollSend(buf, 16, gcollFloat, peer, comm, NULL);
  bad += q != gcollSuccess;
  bad += expect(gcollBroadcast(buf, buf, 16, gcollFloat, nranks, comm, NULL),
                gcollInvalidArgument, "broadcast from rank nranks in a group");
  bad += expect(gcollGroupEnd(), gcollInvalidArgument, "group with a refused call");
  /* Nested groups: a bad call in the inner one fails the outer end. */
  gcollGroupStart();
  gcollGroupStart();
  bad += expect(gcollSend(buf, 16, gcollFloat, -5, comm, NULL), gcollInvalidArgument, "bad peer in a nested group");
  bad += gcollGroupEnd() != gcollSuccess;
  bad += expect(gcollGroupEnd(), gcollInvalidArgument, "outer group of a refused call");
  /* Nothing moved: the communicator and its connections still work. */
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  float out[16], in[16];
  for (int i = 0; i < 16; i++) out[i] = (float)(rank * 100 + i);
  gcollGroupStart();
  gcollGroupStart();
  gcollSend(out, 16, gcollFloat, next, comm, NULL);
  gcollGroupEnd();
  gcollRecv(in, 16, gcollFloat, prev, comm, NULL);
  if (check_gcoll(gcollGroupEnd(), "ring after refusals")) return 1;
  for (int i = 0; i < 16; i++) bad += in[i] != (float)(prev * 100 + i);
  printf("rank %d: %s\n", rank, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}

static int abort_test(gcollComm_t comm) {
  if (rank != 0) {
    sleep(3);
    gcollCommDestroy(comm);
    printf("rank %d: done\n", rank);
    return 0;
  }
  pthread_t th;
  float buf[256];
  double t0 = now_s();
  pthread_create(&th, NULL, abort_later, comm);
  gcollResult_t rc = gcollRecv(buf, 256, gcollFloat, nranks - 1, comm, NULL);
  double dt = now_s() - t0;
  pthread_join(th, NULL);
  printf("rank 0: recv returned %s after %.2f s\n", gcollGetErrorString(rc), dt);
  return rc == gcollInvalidUsage && dt < 5.0 ? 0 : 1;
}

static int die(gcollComm_t comm) {
  signal(SIGTERM, SIG_IGN);
  float buf[64] = {0};
  /* Connect first, so rank 0 holds a connection from rank 1. */
  gcollResult_t rc = rank == 0 ? gcollRecv(buf, 64, gcollFloat, 1, comm, NULL)
                   : rank == 1 ? gcollSend(buf, 64, gcollFloat, 0, comm, NULL) : gcollSuccess;
  if (check_gcoll(rc, "first message")) return 1;
  if (rank == 1) {
    usleep(200000);
    raise(SIGKILL);
  }
  if (rank != 0) {
    sleep(4);
    return 0;
  }
  double t0 = now_s();
  rc = gcollRecv(buf, 64, gcollFloat, 1, comm, NULL);
  double dt = now_s() - t0;
  printf("rank 0: receive from a dead rank returned %s after %.2f s: %s\n",
         gcollGetErrorString(rc), dt, gcollGetLastError(NULL));
  return rc == gcollRemoteError && strstr(gcollGetLastError(NULL), "rank 1 ") != NULL ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: p2p_check exchange | mismatch | norecv fresh|big | badargs | abort | "
                    "die\n");
    return 2;
  }
  gcollComm_t comm;
  gcollResult_t rc = gcollCommInitFromPlan(&comm, NULL, -1);
  if (rc != gcollSuccess) {
    fprintf(stderr, "p2p_check: init: %s: %s\n", gcollGetErrorString(rc), gcollGetLastError(NULL));
    return 3;
  }
  gcollCommUserRank(comm, &rank);
  gcollCommCount(comm, &nranks);
  int status;
  if (strcmp(argv[1], "exchange") == 0) status = exchange(comm);
  else if (strcmp(argv[1], "mismatch") == 0) status = mismatch(comm);
  else if (strcmp(argv[1], "norecv") == 0 && argc == 3) status = norecv(comm, argv[2]);
  else if (strcmp(argv[1], "badargs") == 0) status = badargs(comm);
  else if (strcmp(argv[1], "abort") == 0) return abort_test(comm);
  else if (strcmp(argv[1], "die") == 0) status = die(comm);
  else {
    fprintf(stderr, "p2p_check: unknown mode '%s'\n", argv[1]);
    status = 2;
  }
  gcollCommDestroy(comm);
  return status;
}
