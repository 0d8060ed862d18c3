/* The one-shot board (kernels/host_oneshot.h) of a communicator whose
 * ranks are all on this host, or of the ranks of one node (the node form,
 * host_exec.h): its members, in the order of their board slots. The first
 * member (rank 0, or the node's first rank) creates it as the shm
 * transport creates a FIFO (O_EXCL, mode 0600, a random name that says
 * nothing about the job) and sends the name to each member through the
 * authenticated bootstrap; a member maps only a regular file its own user
 * created with mode 0600 and the announced size, so a segment planted by
 * another user is refused. The last member to map it removes the name,
 * and the creator removes it again at close (ENOENT expected), which
 * covers a member that never came; gcoll_shm_cleanup() covers a whole job
 * that died before that.
 *
 * Every member maps the board or init fails on the one that could not:
 * the executors must all take it or all not (a rank taking the ring while
 * its peers wait on the board would stall them until their deadline).
 * Each member tells the creator whether it mapped it, and the creator's
 * init ends only then (failing, naming the rank, if one could not):
 * otherwise a root that broadcast at once and destroyed the communicator
 * removed the name before a slower rank opened it (seen in CI under
 * load). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/host_oneshot.h"
#include "runtime/comm.h"
#include "runtime/shm_segment.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels say EINVAL, harmless */
#endif

struct board_addr {
  uint32_t magic, version;
  uint64_t bytes;
  char name[GCOLL_SHM_NAME_MAX];
};

static void board_key(char *key, size_t len, int rank) {
  snprintf(key, len, "oneshot/%d", rank);
}

/* Rank `rank` to rank 0: it mapped the board (1) or not (0). */
static void ack_key(char *key, size_t len, int rank) {
  snprintf(key, len, "oneshot-ack/%d", rank);
}

static gcollResult_t create_board(struct gcollComm *comm, size_t bytes, char *err, size_t errlen) {
  if (gcoll_shm_random_name(comm->oneshot_name, err, errlen) != 0) return gcollSystemError;
  void *map = gcoll_shm_create(comm->oneshot_name, bytes, err, errlen);
  if (map == NULL) {
    comm->oneshot_name[0] = '\0';
    return gcollSystemError;
  }
  /* Every page touched now, once: a first touch costs microseconds here
   * (../shared/notes/machine.md), more than a whole small call. */
  memset(map, 0, bytes);
  comm->oneshot_map = map;
  comm->oneshot_bytes = bytes;
  return gcollSuccess;
}

static gcollResult_t attach_board(struct gcollComm *comm, const struct board_addr *a,
                                  int creator, int nmembers, char *err, size_t errlen) {
  int gone;
  char who[32];
  snprintf(who, sizeof(who), "rank %d", creator);
  void *map = gcoll_shm_attach(a->name, (size_t)a->bytes, 0, who, &gone, err, errlen);
  if (map == NULL) return gone ? gcollRemoteError : gcollSystemError;
  comm->oneshot_map = map;
  comm->oneshot_bytes = (size_t)a->bytes;
  if (gcoll_oneshot_check(map, comm->oneshot_bytes, nmembers, err, errlen) != 0)
    return gcollSystemError;
  /* The page-table entries now, not at the first calls (a speed-up only). */
  (void)madvise(map, comm->oneshot_bytes, MADV_POPULATE_WRITE);
  struct gcoll_oneshot_header *h = map;
  if (atomic_fetch_add(&h->attached, 1) + 1 == (uint32_t)nmembers - 1)
    shm_unlink(a->name);
  return gcollSuccess;
}

/* What a rank checks of the creator's message before opening anything. */
static gcollResult_t check_addr(const struct board_addr *a, size_t len, int creator, char *err,
                                size_t errlen) {
  if (len == sizeof(*a) && a->magic == 0)
    snprintf(err, errlen, "rank %d could not create it", creator);
  else if (len != sizeof(*a) || a->magic != GCOLL_ONESHOT_MAGIC ||
           a->version != GCOLL_ONESHOT_VERSION)
    snprintf(err, errlen, "rank %d sent no board address of this version (%zu bytes)", creator,
             len);
  else if (memchr(a->name, '\0', sizeof(a->name)) == NULL || !gcoll_shm_name_valid(a->name))
    snprintf(err, errlen, "rank %d named segment '%.*s', not a gcoll segment name", creator,
             (int)strnlen(a->name, sizeof(a->name)), a->name);
  else
    return gcollSuccess;
  return gcollSystemError;
}

gcollResult_t gcoll_comm_oneshot_open(struct gcollComm *comm, const int *members, int nmembers,
                                      uint64_t slot_bytes) {
  char err[512], key[64], ferr[256];
  uint64_t deadline = gcoll_bootstrap_deadline(comm->bs);
  if (nmembers == 1) {
    /* A node of one rank has no board, but the fences are everybody's. */
    for (int i = 0; i < 2; i++)
      if (gcoll_bootstrap_fence(comm->bs, deadline, ferr, sizeof(ferr)) != 0)
        return gcoll_fail(gcollRemoteError, "one-shot board for small collectives: %s", ferr);
    return gcollSuccess;
  }
  size_t bytes = gcoll_oneshot_bytes(nmembers, slot_bytes);
  if (bytes == 0)
    return gcoll_fail(gcollInternalError, "one-shot board: %d ranks with %llu-byte slots",
                      nmembers, (unsigned long long)slot_bytes);
  gcollResult_t rc = gcollSuccess;
  struct board_addr a;
  memset(&a, 0, sizeof(a));
  const int creator = members[0], me = comm->rank;
  if (me == creator) {
    rc = create_board(comm, bytes, err, sizeof(err));
    if (rc == gcollSuccess) {
      gcoll_oneshot_format(comm->oneshot_map, nmembers, slot_bytes);
      a.magic = GCOLL_ONESHOT_MAGIC;
      a.version = GCOLL_ONESHOT_VERSION;
      a.bytes = bytes;
      snprintf(a.name, sizeof(a.name), "%s", comm->oneshot_name);
    }
    /* A rank waiting for the name gets it or, when creating failed, a
     * zero magic and a line of its own instead of a deadline. */
    for (int i = 1; i < nmembers; i++) {
      board_key(key, sizeof(key), members[i]);
      char perr[256];
      if (gcoll_bootstrap_put_to(comm->bs, members[i], key, &a, sizeof(a), perr, sizeof(perr)) !=
              0 &&
          rc == gcollSuccess) {
        snprintf(err, sizeof(err), "sending its name to rank %d: %s", members[i], perr);
        rc = gcollRemoteError;
      }
    }
  }
  /* The bootstrap's contract: puts are visible after the next fence
   * (comm_connect.c fences the same way; with endpoints from the plan the
   * value went straight to its reader and the fence waits for nothing).
   * Every rank of the communicator fences, members of every board. */
  if (gcoll_bootstrap_fence(comm->bs, deadline, ferr, sizeof(ferr)) != 0 && rc == gcollSuccess) {
    snprintf(err, sizeof(err), "%s", ferr);
    rc = gcollRemoteError;
  }
  if (me != creator && rc == gcollSuccess) {
    size_t len = 0;
    /* Tests only: a rank that comes late to the board (test_coll.sh). */
    const char *late = getenv("GCOLL_TEST_ONESHOT_LATE_MS");
    if (late != NULL) usleep((useconds_t)strtoul(late, NULL, 10) * 1000u);
    board_key(key, sizeof(key), me);
    if (gcoll_bootstrap_get_from(comm->bs, creator, key, &a, sizeof(a), &len, deadline, err,
                                 sizeof(err)) != 0)
      rc = gcollRemoteError;
    else if ((rc = check_addr(&a, len, creator, err, sizeof(err))) == gcollSuccess)
      rc = attach_board(comm, &a, creator, nmembers, err, sizeof(err));
  }
  /* The creator finishes only once every member has mapped the board (or
   * said it could not): a broadcast's root returns at once, and its
   * gcollCommDestroy right after (a program sharing an NCCL id that way)
   * removed the name before a slower rank had opened it. Every rank acks
   * and fences whatever happened, so none waits for a deadline. */
  if (me != creator) {
    uint8_t mapped = rc == gcollSuccess;
    char aerr[256];
    ack_key(key, sizeof(key), me);
    if (gcoll_bootstrap_put_to(comm->bs, creator, key, &mapped, sizeof(mapped), aerr,
                               sizeof(aerr)) != 0 &&
        rc == gcollSuccess) {
      snprintf(err, sizeof(err), "telling rank %d it mapped the board: %s", creator, aerr);
      rc = gcollRemoteError;
    }
  }
  if (gcoll_bootstrap_fence(comm->bs, deadline, ferr, sizeof(ferr)) != 0 && rc == gcollSuccess) {
    snprintf(err, sizeof(err), "%s", ferr);
    rc = gcollRemoteError;
  }
  for (int i = 1; me == creator && rc == gcollSuccess && i < nmembers; i++) {
    uint8_t mapped = 0;
    size_t len = 0;
    ack_key(key, sizeof(key), members[i]);
    if (gcoll_bootstrap_get_from(comm->bs, members[i], key, &mapped, sizeof(mapped), &len,
                                 deadline, err, sizeof(err)) != 0) {
      rc = gcollRemoteError;
    } else if (len != sizeof(mapped) || mapped != 1) {
      snprintf(err, sizeof(err), "rank %d could not map it", members[i]);
      rc = gcollRemoteError;
    }
  }
  if (rc != gcollSuccess) {
    gcoll_comm_oneshot_close(comm);
    return gcoll_fail(rc, "one-shot board for small collectives: %s", err);
  }
  return gcollSuccess;
}

void gcoll_comm_oneshot_close(struct gcollComm *comm) {
  if (comm->oneshot_map != NULL) munmap(comm->oneshot_map, comm->oneshot_bytes);
  comm->oneshot_map = NULL;
  comm->oneshot_bytes = 0;
  if (comm->oneshot_name[0] != '\0') shm_unlink(comm->oneshot_name);
  comm->oneshot_name[0] = '\0';
}
