/* Reading another rank's memory on this host (Linux cross-memory attach,
 * process_vm_readv): the single-copy reads of the host executor's direct
 * form (kernels/host_direct.h), which reaches them through the table
 * struct gcoll_exec_peer_reads.
 *
 * The kernel allows a read when the reader may ptrace the peer: same
 * user, and where Yama's ptrace_scope is 1 only an ancestor or a process
 * the peer named (gcoll names none: that would open the rank to every
 * process of its user); a container's seccomp profile may refuse the call
 * outright. So every pair is probed before use: the reader reads a random
 * word at the address the peer announced and compares it, which also
 * proves the pid means the same process in both pid namespaces. */
#ifndef GCOLL_RUNTIME_PEER_MEMORY_H
#define GCOLL_RUNTIME_PEER_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kernels/host_exec.h"

/* This process's identity for peers (GCOLL_PEER_ID_BYTES): its pid, a
 * random word and that word's address. */
void gcoll_peer_memory_identity(uint8_t id[GCOLL_PEER_ID_BYTES]);

/* 0 when this process can read the process id names, else an errno
 * value (ENXIO: the pid names another process here). */
int gcoll_peer_memory_probe(const uint8_t id[GCOLL_PEER_ID_BYTES]);

/* Reads n bytes at addr in the process id names into dst: 0 or errno. */
int gcoll_peer_memory_read(const uint8_t id[GCOLL_PEER_ID_BYTES], void *dst, uint64_t addr,
                           size_t n);

/* Reads n ranges at once (remote[i] in the process id names into
 * local[i], the same lengths): one system call where the kernel copies
 * them whole, range by range otherwise (a fault, a signal). 0 or errno. */
int gcoll_peer_memory_readv(const uint8_t id[GCOLL_PEER_ID_BYTES], const struct iovec *local,
                            const struct iovec *remote, size_t n);

/* 1 when at least 7/8 of [p, p+n) of this process is in huge pages (the
 * kernel's PAGEMAP_SCAN, Linux 6.7), so a peer's read of it pins a few
 * large pages, not one per 4 KiB; 0 otherwise or where the kernel cannot
 * tell. */
int gcoll_peer_memory_cheap(const void *p, size_t n);

#endif
