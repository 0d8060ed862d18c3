/* Init's closing wave over the plan's own tree, for communicators whose
 * ranks reach each other at the endpoints that came with the plan (issue
 * 16): what the central store's barrier and its channel-cap key did, with
 * no central store. */
#ifndef GCOLL_RUNTIME_COMM_INIT_WAVE_H
#define GCOLL_RUNTIME_COMM_INIT_WAVE_H

#include <stddef.h>

#include "runtime/comm.h"

/* Up channel 0's tree (t1: it spans every rank, plan_verify checks it):
 * each rank waits for "connected" from each child, then tells its parent;
 * so the root hears once every rank of the job connected. Then down: the
 * root sends root_value, each rank passes on what its parent sent. On
 * return value holds the root's value and *root its rank. A rank that never
 * connects stops the wave: its tree neighbours fail at GCOLL_TIMEOUT naming
 * it, the others at theirs, as behind a barrier. 2 x depth messages of
 * latency; each rank sends one message per tree edge each way. */
gcollResult_t gcoll_comm_init_wave(struct gcollComm *comm, const char *root_value, char *value,
                                   size_t cap, int *root);

#endif
