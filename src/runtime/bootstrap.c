/* Backend selection and the environment parsing every backend shares. */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include "runtime/bootstrap.h"

#include "kernels/wait.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

/* Order matters only when several are set up at once: the launcher's own
 * store wins over whatever the scheduler offers. */
static const struct gcoll_bootstrap_backend *const backends[] = {
    &gcoll_bootstrap_tcp_backend,
#ifdef HAVE_PMI2
    &gcoll_bootstrap_pmi2_backend,
#endif
};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

uint64_t gcoll_bootstrap_now_ms(void) {
  return gcoll_clock_ms();
}

uint64_t gcoll_bootstrap_deadline(const struct gcoll_bootstrap *bs) {
  return gcoll_bootstrap_now_ms() + bs->timeout_ms;
}

void gcoll_bootstrap_requests(const struct gcoll_bootstrap *bs, uint64_t *requests,
                              uint64_t *request_ns, char *to, size_t tolen) {
  *requests = bs->requests;
  *request_ns = bs->request_ns;
  int n = snprintf(to, tolen, "%llu to %s", (unsigned long long)bs->requests, bs->store);
  if (bs->via == NULL) return;
  *requests += bs->via->requests;
  *request_ns += bs->via->request_ns;
  if (to != NULL && n >= 0 && (size_t)n < tolen)
    snprintf(to + n, tolen - (size_t)n, ", %llu to %s", (unsigned long long)bs->via->requests,
             bs->via->store);
}

int gcoll_bootstrap_env_int(const char *name, long min, long max, long *out, char *err,
                            size_t errlen) {
  const char *s = getenv(name);
  if (s == NULL || *s == '\0') {
    snprintf(err, errlen, "bootstrap: %s is not set", name);
    return -1;
  }
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*end != '\0' || errno != 0 || v < min || v > max) {
    snprintf(err, errlen, "bootstrap: %s='%.64s' is not an integer in %ld..%ld", name, s, min,
             max);
    return -1;
  }
  *out = v;
  return 0;
}

/* GCOLL_TIMEOUT: seconds, fractions allowed (tests use short ones). */
int gcoll_bootstrap_timeout_from_env(uint64_t *ms, char *err, size_t errlen) {
  const char *s = getenv("GCOLL_TIMEOUT");
  if (s == NULL || *s == '\0') {
    *ms = (uint64_t)GCOLL_BOOTSTRAP_DEFAULT_TIMEOUT_S * 1000u;
    return 0;
  }
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*end != '\0' || errno != 0 || !(v >= 0.001 && v <= 604800.0)) {
    snprintf(err, errlen, "bootstrap: GCOLL_TIMEOUT='%.64s' is not a number of seconds in "
                          "0.001..604800", s);
    return -1;
  }
  *ms = (uint64_t)(v * 1000.0 + 0.5);
  return 0;
}

static int env_set(const char *name) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0';
}

/* Says what the user must add. Under Slurm a silent fallback to some other
 * bootstrap would hide a misconfigured step, so the answer is an error. */
static void no_backend_reason(char *err, size_t errlen) {
#ifdef HAVE_PMI2
  if (env_set("SLURM_STEP_ID"))
    snprintf(err, errlen, "bootstrap: running under srun without PMI2: use srun --mpi=pmi2 (or "
                          "MpiDefault=pmi2 in slurm.conf)");
  else if (env_set("SLURM_JOB_ID"))
    snprintf(err, errlen, "bootstrap: in Slurm job %.32s but not in an srun step: start the "
                          "ranks with srun --mpi=pmi2 (or gcollrun)", getenv("SLURM_JOB_ID"));
#else
  if (env_set("SLURM_STEP_ID") || env_set("SLURM_JOB_ID"))
    snprintf(err, errlen, "bootstrap: running under Slurm, but this libgcoll was built without "
                          "PMI2 (libpmi2-0-dev): start the job with gcollrun");
#endif
  else
    snprintf(err, errlen, "bootstrap: no bootstrap found (GCOLL_KVS_ADDR unset: start the "
                          "job with gcollrun)");
}

static const struct gcoll_bootstrap_backend *pick_backend(char *err, size_t errlen) {
  const char *want = getenv("GCOLL_BOOTSTRAP");
  for (size_t i = 0; i < NBACKENDS; i++) {
    if (want && *want ? strcmp(want, backends[i]->name) == 0 : backends[i]->detect())
      return backends[i];
  }
  if (want && *want)
    snprintf(err, errlen, "bootstrap: GCOLL_BOOTSTRAP='%.64s' names no known backend", want);
  else
    no_backend_reason(err, errlen);
  return NULL;
}

/* Endpoints that came with the plan (GCOLL_ENDPOINTS), unless
 * GCOLL_BOOTSTRAP names another backend: 1 with *out open, 0 with the
 * reason they were not used in note ("" when none were offered), -1 on a
 * setting that cannot be read. */
static int try_endpoints(struct gcoll_bootstrap **out, char *note, size_t notelen) {
  const char *want = getenv("GCOLL_BOOTSTRAP");
  note[0] = '\0';
  if (!gcoll_bootstrap_endpoints_backend.detect() ||
      (want != NULL && *want != '\0' && strcmp(want, "endpoints") != 0))
    return 0;
  struct gcoll_bootstrap *bs = calloc(1, sizeof(*bs));
  if (bs == NULL) {
    snprintf(note, notelen, "out of memory");
    return 0;
  }
  bs->backend = gcoll_bootstrap_endpoints_backend.name;
  bs->opened_ns = gcoll_wait_now_ns();
  if (gcoll_bootstrap_timeout_from_env(&bs->timeout_ms, note, notelen) != 0) {
    free(bs);
    return -1;
  }
  if (gcoll_bootstrap_endpoints_backend.open(bs, note, notelen) != 0) {
    free(bs);
    if (note[0] == '\0') snprintf(note, notelen, "unusable");
    return 0;
  }
  *out = bs;
  return 1;
}

int gcoll_bootstrap_open_from_env(struct gcoll_bootstrap **out, char *err, size_t errlen) {
  *out = NULL;
  char note[sizeof(((struct gcoll_bootstrap *)0)->endpoints_note)];
  int ep = try_endpoints(out, note, sizeof(note));
  if (ep != 0) {
    if (ep < 0) snprintf(err, errlen, "%s", note);
    return ep > 0 ? 0 : -1;
  }
  const char *want = getenv("GCOLL_BOOTSTRAP");
  if (want != NULL && strcmp(want, "endpoints") == 0) {
    snprintf(err, errlen, "bootstrap: GCOLL_BOOTSTRAP=endpoints: %s",
             note[0] ? note : "GCOLL_ENDPOINTS is not set");
    return -1;
  }
  const struct gcoll_bootstrap_backend *be = pick_backend(err, errlen);
  if (be == NULL) return -1;
  struct gcoll_bootstrap *bs = calloc(1, sizeof(*bs));
  if (bs == NULL) {
    snprintf(err, errlen, "bootstrap: out of memory");
    return -1;
  }
  bs->backend = be->name;
  bs->opened_ns = gcoll_wait_now_ns();
  if (gcoll_bootstrap_timeout_from_env(&bs->timeout_ms, err, errlen) != 0 ||
      be->open(bs, err, errlen) != 0) {
    free(bs);
    return -1;
  }
  /* Said on the INFO line: the store served a job whose plan came with
   * endpoints, and why. */
  snprintf(bs->endpoints_note, sizeof(bs->endpoints_note), "%s", note);
  *out = bs;
  return 0;
}
