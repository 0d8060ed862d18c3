/* Background threads gcoll starts inside the application's process (the
 * rendezvous listener, the unique id's key-value store): detached, since
 * they live until the process ends, and created with every signal blocked,
 * so they inherit a full mask and the application's signals (SIGINT,
 * SIGCHLD, its timers) keep going to its own threads. */
#ifndef GCOLL_COMMON_SERVICE_THREAD_H
#define GCOLL_COMMON_SERVICE_THREAD_H

#include <pthread.h>

/* Starts fn(arg) on such a thread, named `name` (at most 15 characters).
 * 0, or pthread_create's error number. */
int gcoll_service_thread_start(const char *name, void *(*fn)(void *), void *arg);

/* Names one of gcoll's threads, so that `top -H`, perf and gdb tell the
 * proxy, the channels and the listeners from the application's threads
 * (a name past 15 characters is cut, as the kernel's limit is 16 bytes). */
void gcoll_thread_name(pthread_t thread, const char *name);

#endif
