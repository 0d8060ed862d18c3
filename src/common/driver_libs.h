/* The NVIDIA libraries gcoll asks at run time: the CUDA driver and NVML.
 *
 * libgcoll links neither, so that it loads and runs its host path on
 * machines without them. Each is opened here with dlopen, once per process
 * whoever asks first (topology detection, the CUDA executor, libnccl.so.2),
 * and never closed: the driver keeps threads and state that do not survive
 * being unmapped, and a second dlopen elsewhere would only be another copy
 * of the same rules. A missing library or entry point is an answer, not an
 * error: the callers then see no GPU.
 *
 * Two names lead to the CUDA driver, the same library unless
 * $GCOLL_CUDA_DRIVER is set:
 *   GCOLL_LIB_CUDA        libcuda.so.1, the driver of the node and the
 *                         program: detection counts the node's GPUs with
 *                         it, and libnccl.so.2 asks it whether a program's
 *                         buffer is device memory;
 *   GCOLL_LIB_CUDA_GCOLL  $GCOLL_CUDA_DRIVER, else libcuda.so.1: the driver
 *                         gcoll's CUDA executor runs on. Tests name the CUDA
 *                         emulator there, which must not change what
 *                         detection sees of the node. */
#ifndef GCOLL_COMMON_DRIVER_LIBS_H
#define GCOLL_COMMON_DRIVER_LIBS_H

#include <stddef.h>

enum gcoll_driver_lib {
  GCOLL_LIB_CUDA = 0,
  GCOLL_LIB_CUDA_GCOLL,
  GCOLL_LIB_NVML,              /* libnvidia-ml.so.1 */
  GCOLL_NDRIVER_LIBS
};

/* The library's handle, opened on the first call (thread-safe); *path (may
 * be NULL) gets the file it is. NULL when it cannot be opened, with
 * dlopen's reason in err. */
void *gcoll_driver_lib_open(enum gcoll_driver_lib lib, const char **path, char *err,
                            size_t errlen);

/* Entry point `name` of lib into the function pointer at fn (any function
 * pointer type: POSIX makes them the size of a void *). 0, or -1 leaving
 * *fn as it was when the library or the name is missing. */
int gcoll_driver_lib_fn(enum gcoll_driver_lib lib, const char *name, void *fn);

#endif
