/* A job's bootstrap store served by a thread of a rank's own process, for
 * jobs no launcher hosts one for: gcollGetUniqueId's, and under srun
 * --mpi=pmi2 rank 0's (PMI2 cannot publish a key without a collective
 * fence, which connections made on first use need). */
#ifndef GCOLL_RUNTIME_KVS_THREAD_H
#define GCOLL_RUNTIME_KVS_THREAD_H

#include <stddef.h>
#include <stdint.h>

/* How long the store lives. */
enum gcoll_kvs_thread_life {
  /* Until every rank said goodbye, GCOLL_TIMEOUT after a rank was lost (so
   * the others can still read why), or once no rank was connected for
   * GCOLL_TIMEOUT: the ranks join at once and stay. */
  GCOLL_KVS_THREAD_WHILE_USED,
  /* Until gcoll_kvs_thread_stop: the ranks join on first use, which may
   * come long after init or never (the store a plan's tree root hosts for
   * a communicator whose endpoints came with the plan, for as long as it
   * lives: bootstrap_endpoints.c). */
  GCOLL_KVS_THREAD_UNTIL_STOPPED
};

struct gcoll_kvs_thread;

/* Starts the store for job_key on bind_ip (IPv4; NULL: 127.0.0.1) and an
 * ephemeral port, served by a detached thread for `life`. nranks 0: the
 * first rank's hello sets the job size. Returns 0 with the port (and, for
 * GCOLL_KVS_THREAD_UNTIL_STOPPED, the handle to stop it in *handle), or -1
 * with one line in err. */
int gcoll_kvs_thread_start(const char *job_key, const char *bind_ip, int nranks,
                           enum gcoll_kvs_thread_life life, struct gcoll_kvs_thread **handle,
                           uint16_t *port, char *err, size_t errlen);

/* Ends a GCOLL_KVS_THREAD_UNTIL_STOPPED store: its thread closes the
 * listener and every connection within ~200 ms. NULL: nothing. */
void gcoll_kvs_thread_stop(struct gcoll_kvs_thread *handle);

#endif
