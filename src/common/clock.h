/* The one monotonic clock every layer measures deadlines and durations
 * with (CLOCK_MONOTONIC: never jumps with the wall clock, so a deadline
 * computed from it neither expires early nor never). Header-only, so the
 * SPANK plugin and the CUDA emulator's host build use it without linking
 * libgcoll. */
#ifndef GCOLL_COMMON_CLOCK_H
#define GCOLL_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t gcoll_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t gcoll_clock_ms(void) { return gcoll_clock_ns() / 1000000u; }

static inline double gcoll_clock_s(void) { return (double)gcoll_clock_ns() * 1e-9; }

#endif
