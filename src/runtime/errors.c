/* Result names, the per-thread last error, and init-time logging. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/settings.h"

static _Thread_local char last_error[512];

const char *gcollGetErrorString(gcollResult_t result) {
  switch (result) {
  case gcollSuccess: return "no error";
  case gcollUnhandledCudaError: return "unhandled cuda error";
  case gcollSystemError:
    return "unhandled system error (a system call failed or a deadline passed)";
  case gcollInternalError:
    return "internal error - please report this issue to the gcoll developers";
  case gcollInvalidArgument: return "invalid argument";
  case gcollInvalidUsage: return "invalid usage (bad plan, wrong call order, or aborted)";
  case gcollRemoteError: return "remote process exited or there was a network error";
  case gcollInProgress: return "operation in progress";
  default: return "unknown result code";
  }
}

/* comm is accepted for NCCL's signature; the reason is kept per thread, which
 * is also what makes it available for failed inits (comm == NULL). */
const char *gcollGetLastError(gcollComm_t comm) {
  (void)comm;
  return last_error;
}

gcollResult_t gcoll_fail(gcollResult_t result, const char *fmt, ...) {
  /* Formatted aside first: callers wrap the previous reason, passing
   * gcollGetLastError(NULL), which is last_error itself, and vsnprintf
   * into its own argument garbles the line. */
  char line[sizeof(last_error)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  memcpy(last_error, line, sizeof(line));
  /* One line, whatever the pieces contained. */
  for (char *p = last_error; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  return result;
}

static void log_line(const struct gcollComm *comm, const char *fmt, va_list ap) {
  char line[512];
  vsnprintf(line, sizeof(line), fmt, ap);
  if (comm != NULL && comm->name[0] != '\0')
    fprintf(stderr, "gcoll rank %d (%s): %s\n", comm->rank, comm->name, line);
  else
    fprintf(stderr, "gcoll rank %d: %s\n", comm ? comm->rank : -1, line);
}

void gcoll_log_info(const struct gcollComm *comm, const char *fmt, ...) {
  if (!gcoll_log_info_enabled()) return;
  va_list ap;
  va_start(ap, fmt);
  log_line(comm, fmt, ap);
  va_end(ap);
}

void gcoll_log_trace(const struct gcollComm *comm, const char *fmt, ...) {
  if (comm == NULL || !comm->trace) return;
  va_list ap;
  va_start(ap, fmt);
  log_line(comm, fmt, ap);
  va_end(ap);
}

gcollResult_t gcollGetVersion(int *version) {
  if (version == NULL) return gcoll_fail(gcollInvalidArgument, "gcollGetVersion: version is NULL");
  *version = GCOLL_MAJOR * 10000 + GCOLL_MINOR * 100 + GCOLL_PATCH;
  return gcollSuccess;
}
