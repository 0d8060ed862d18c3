/* The job id an endpoints file names (endpoint_server.h): in a file of
 * its own, since the SPANK plugin, which writes the endpoints file of a
 * Slurm step, links it (with auth.c) but not the rest of the runtime. */
#include <stdio.h>
#include <string.h>

#include "runtime/auth.h"
#include "runtime/endpoint_server.h"

#define JOB_ID_LABEL "gcoll endpoints job id v1"

int gcoll_endpoints_job_id(const char *job_key, char out[33], char *err, size_t errlen) {
  struct gcoll_auth_secret s;
  if (gcoll_auth_derive(job_key, strlen(job_key), JOB_ID_LABEL, &s, err, errlen) != 0) return -1;
  for (int i = 0; i < GCOLL_AUTH_SECRET_BYTES && 2 * i + 2 < 33; i++)
    snprintf(out + 2 * i, 3, "%02x", s.bytes[i]);
  return 0;
}
