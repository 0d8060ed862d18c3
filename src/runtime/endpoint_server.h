/* The rank's own rendezvous listener: the socket gcollrun bound before it
 * started the rank (GCOLL_LISTEN_FD) and announced in the endpoints file.
 *
 * Where a central store keeps every rank's published values until their
 * readers ask, here a value is pushed straight to the one rank that will
 * read it (the receiver of a connection sends its address to the sender),
 * and waits in that rank's mailbox until it is taken. A process-wide thread
 * serves the listener: it challenges every connection, accepts only hellos
 * authenticated under the job key (auth.h, the same scheme as the
 * transports' listeners), and files each message under (generation, sender
 * rank, key). Generation = the how-manieth communicator of this process
 * took its endpoints from the file: the same communicator on every rank,
 * since inits are collective, so a value of the next communicator that
 * arrives early waits for it instead of being mistaken for this one's.
 *
 * The thread is started once and serves until the process exits: the
 * listener must stay open anyway (peers' later communicators reach us
 * there), and a rank needs no teardown ordering with its peers. */
#ifndef GCOLL_RUNTIME_ENDPOINT_SERVER_H
#define GCOLL_RUNTIME_ENDPOINT_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/auth.h"

#define GCOLL_EPSRV_HELLO_BYTES 20
#define GCOLL_EPSRV_MSG_HDR_BYTES 8
#define GCOLL_EPSRV_MAX_KEY 256
#define GCOLL_EPSRV_MAX_VALUE 65536
#define GCOLL_EPSRV_PURPOSE "gcoll endpoint hello v1"
#define GCOLL_AUTH_LABEL_ENDPOINTS "gcoll endpoint secret v1"

/* Starts serving listen_fd for rank `rank` of nranks (idempotent for the
 * same fd; another fd is an error). 0, or -1 with one line in err. */
int gcoll_epsrv_start(int listen_fd, const struct gcoll_auth_secret *secret, int rank,
                      int nranks, char *err, size_t errlen);

/* Files a value as if `from` had pushed it (a rank's message to itself). */
int gcoll_epsrv_deliver(uint32_t gen, int from, const char *key, const void *value, size_t len,
                        char *err, size_t errlen);

/* Takes the value `from` pushed under key in generation gen, waiting until
 * deadline_ms (CLOCK_MONOTONIC ms; a deadline already passed looks once).
 * 0 with *len set (a value longer than buflen is an error), or -1 with one
 * line in err. */
int gcoll_epsrv_take(uint32_t gen, int from, const char *key, void *buf, size_t buflen,
                     size_t *len, uint64_t deadline_ms, char *err, size_t errlen);

/* Drops whatever generation gen left untaken (its communicator is gone). */
void gcoll_epsrv_forget(uint32_t gen);

/* The job id an endpoints file names (endpoints.h's `job`): 32 hex digits
 * of an HMAC of the job key, so the file identifies the job without
 * revealing the key. */
int gcoll_endpoints_job_id(const char *job_key, char out[33], char *err, size_t errlen);

#endif
