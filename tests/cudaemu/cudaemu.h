/* Between the emulated driver (cudaemu.c, C) and the host-compiled kernels
 * it can launch (cudaemu_kernels.cu, nvcc host pass). Internal to
 * libcudaemu.so: nothing here is exported. */
#ifndef GCOLL_TESTS_CUDAEMU_H
#define GCOLL_TESTS_CUDAEMU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDAEMU_MAX_PARAMS 8

/* A kernel the emulator can run, found by its (unmangled) name as
 * cuModuleGetFunction would find it in a module. */
struct cudaemu_kernel {
  const char *name;
  int nparams;
  size_t param_size[CUDAEMU_MAX_PARAMS];
  /* Runs all `grid` blocks of `threads` emulated threads each at once and
   * returns when every block has finished: 0, or a CUresult the stream
   * reports (CUDA_ERROR_ILLEGAL_ADDRESS for an argument that points at
   * memory the device could not reach). params[i] points at the launch's
   * copy of argument i. */
  int (*run)(void *const *params, unsigned grid, unsigned threads);
};

extern const struct cudaemu_kernel cudaemu_kernel_table[];
extern const int cudaemu_kernel_count;

/* Ends the kernel threads the calling stream worker kept for its launches
 * (cudaemu_kernels.cu keeps them between launches: creating a few
 * thousand threads per second costs more than the kernels). */
void cudaemu_kernels_thread_exit(void);

/* Whether [p, p + n) lies inside one allocation a GPU could reach: device
 * memory, an IPC mapping, or host-pinned memory. */
int cudaemu_device_accessible(uint64_t p, uint64_t n);

/* One line on stderr, prefixed "cudaemu: ". */
void cudaemu_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif
#endif
