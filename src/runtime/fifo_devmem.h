/* FIFOs in GPU memory, for the p2p transport (transport_shm.c).
 *
 * The receiver allocates its FIFO in its own GPU's memory, so the kernel
 * that polls it reads local memory, and exports it as a CUDA IPC handle;
 * the sender's kernel writes into it through the mapping the handle opens
 * (NVLink or PCIe peer-to-peer on a GPU; the same pages on the emulated
 * driver). The host never dereferences these addresses: they are handed
 * to the CUDA executor as they are.
 *
 * Every call makes the GPU's primary context current for the driver calls
 * it makes and gives the calling thread back the context it had, so a
 * caller's own context (or none) is never disturbed.
 *
 * In builds without the CUDA toolkit every call fails with one line
 * saying so. All functions return 0, or -1 with one line in err. */
#ifndef GCOLL_RUNTIME_FIFO_DEVMEM_H
#define GCOLL_RUNTIME_FIFO_DEVMEM_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_DEVMEM_HANDLE_BYTES 64

struct gcoll_devmem; /* one GPU, its primary context retained */

/* The GPU whose context is current on the calling thread: 0 and *ordinal,
 * or -1 with the reason (no driver, no GPU, no current context). */
int gcoll_devmem_current_device(int *ordinal, char *err, size_t errlen);
/* The PCI bus id of that GPU as the driver reports it ("0000:1B:00.0"):
 * the GPU's identity whatever CUDA_VISIBLE_DEVICES or a cgroup made its
 * ordinal. 0, or -1 with the reason. */
int gcoll_devmem_current_busid(char *busid, size_t len, char *err, size_t errlen);

int gcoll_devmem_open(struct gcoll_devmem **out, int ordinal, char *err, size_t errlen);
void gcoll_devmem_close(struct gcoll_devmem *d);

/* An empty FIFO (fifo.h) of this slot size in the GPU's memory, and the
 * IPC handle another process opens it with. */
int gcoll_devmem_fifo_alloc(struct gcoll_devmem *d, size_t slot_bytes, uint64_t *fifo,
                            unsigned char handle[GCOLL_DEVMEM_HANDLE_BYTES], char *err,
                            size_t errlen);
void gcoll_devmem_fifo_free(struct gcoll_devmem *d, uint64_t fifo);

/* Maps another process's FIFO from its handle into this GPU's address
 * space (peer access enabled as needed). */
int gcoll_devmem_fifo_open(struct gcoll_devmem *d,
                           const unsigned char handle[GCOLL_DEVMEM_HANDLE_BYTES], uint64_t *fifo,
                           char *err, size_t errlen);
void gcoll_devmem_fifo_unmap(struct gcoll_devmem *d, uint64_t fifo);

#endif
