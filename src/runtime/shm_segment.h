/* POSIX shared-memory segments only this user can use: the one shape in
 * which the shm transport's FIFOs and the one-shot board are made and
 * opened. The creator makes the name exclusively (O_EXCL) with mode 0600
 * whatever its umask; an opener refuses anything but a regular file its
 * own user owns, with mode 0600 and the announced size, so a segment
 * another user planted under the name in advance is refused (and left
 * linked: it is not ours to remove). Names come from
 * gcoll_shm_random_name (transport.h). */
#ifndef GCOLL_RUNTIME_SHM_SEGMENT_H
#define GCOLL_RUNTIME_SHM_SEGMENT_H

#include <stddef.h>

/* Creates name, sizes it to bytes and maps it read-write. NULL with one
 * line in err, the name removed again. */
void *gcoll_shm_create(const char *name, size_t bytes, char *err, size_t errlen);

/* Opens name, checks it as above and maps its bytes read-write; with
 * unlink_name the name is removed once the segment proved ours. NULL with
 * one line in err; *gone is 1 when the name did not exist (its creator,
 * `creator` in the line, closed or died), else 0. */
void *gcoll_shm_attach(const char *name, size_t bytes, int unlink_name, const char *creator,
                       int *gone, char *err, size_t errlen);

#endif
