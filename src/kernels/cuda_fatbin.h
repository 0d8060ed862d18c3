/* The kernels' fat binary embedded in libgcoll, and what is in it.
 *
 * make compiles coll_kernels.cu with `nvcc --fatbin` and turns the file
 * into a C array (gcoll-bin2c), so libgcoll carries its GPU code without
 * linking any CUDA library; cuda_exec.c hands the array to
 * cuModuleLoadData. gen_kernels.sh writes the table of what the kernel
 * implements.
 */
#ifndef GCOLL_KERNELS_CUDA_FATBIN_H
#define GCOLL_KERNELS_CUDA_FATBIN_H

#include <stddef.h>
#include <stdint.h>

#include "gcoll_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const unsigned char gcoll_cuda_fatbin[];
extern const size_t gcoll_cuda_fatbin_len;

/* 1 where the kernel implements (collective, algorithm), from the same
 * generated list as its device function table. */
extern const unsigned char gcoll_cuda_algo_supported[GCOLL_NCOLLS][GCOLL_NALGOS];

enum gcoll_fatbin_kind { GCOLL_FATBIN_PTX = 1, GCOLL_FATBIN_CUBIN = 2 };

struct gcoll_fatbin_image {
  int kind;        /* enum gcoll_fatbin_kind, or the raw value if unknown */
  int arch;        /* 80 for sm_80 / compute_80 */
  uint64_t bytes;  /* payload as stored (maybe compressed) */
};

/* Lists the images of a fat binary: fills up to max entries and returns
 * how many there are, or -1 with a one-line reason when the header or an
 * entry is malformed or runs past len. The format is NVIDIA's fatbin
 * container (magic 0xba55ed50), which no toolkit tool here lists (CUDA 13
 * ships no cuobjdump): a 16-byte header {magic, version, header size, data
 * size}, then entries {kind:u16, version:u16, header size:u32,
 * payload size:u64, ..., arch:u32 at +28}, each followed by its payload. */
int gcoll_fatbin_list(const void *fatbin, size_t len, struct gcoll_fatbin_image *out,
                      int max, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
