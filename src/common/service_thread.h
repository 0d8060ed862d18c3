/* Background threads gcoll starts inside the application's process (the
 * rendezvous listener, the unique id's key-value store): detached, since
 * they live until the process ends, and created with every signal blocked,
 * so they inherit a full mask and the application's signals (SIGINT,
 * SIGCHLD, its timers) keep going to its own threads. */
#ifndef GCOLL_COMMON_SERVICE_THREAD_H
#define GCOLL_COMMON_SERVICE_THREAD_H

/* Starts fn(arg) on such a thread. 0, or pthread_create's error number. */
int gcoll_service_thread_start(void *(*fn)(void *), void *arg);

#endif
