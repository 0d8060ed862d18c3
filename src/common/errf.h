/* One line of error text into a caller's buffer, the way every function
 * of gcoll that takes (char *err, size_t errlen) reports a failure: err
 * may be NULL or errlen 0, and then nothing is written. Header-only, so
 * every layer and program uses it without linking anything. */
#ifndef GCOLL_COMMON_ERRF_H
#define GCOLL_COMMON_ERRF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline void gcoll_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void gcoll_errf(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

#endif
