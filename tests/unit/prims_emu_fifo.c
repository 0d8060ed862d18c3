/* C helpers for test_prims_cuda_emu (C++ cannot include fifo.h, which uses
 * C11 atomics): FIFOs formatted by the real gcoll_fifo_init. */
#include <stdlib.h>

#include "kernels/fifo.h"

void *prims_emu_fifo_new(size_t slot_bytes);
void prims_emu_fifo_free(void *f);

void *prims_emu_fifo_new(size_t slot_bytes) {
  void *mem = NULL;
  if (posix_memalign(&mem, GCOLL_FIFO_ALIGN, gcoll_fifo_bytes(slot_bytes)) != 0) return NULL;
  if (gcoll_fifo_init(mem, slot_bytes) == NULL) {
    free(mem);
    return NULL;
  }
  return mem;
}

void prims_emu_fifo_free(void *f) { free(f); }
