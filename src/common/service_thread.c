/* Detached background threads with every signal blocked (service_thread.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "common/service_thread.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

void gcoll_thread_name(pthread_t thread, const char *name) {
  char cut[16];
  snprintf(cut, sizeof(cut), "%s", name);
  (void)pthread_setname_np(thread, cut);
}

int gcoll_service_thread_start(const char *name, void *(*fn)(void *), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pthread_t th;
  pthread_attr_t attr;
  int e = pthread_attr_init(&attr);
  if (e == 0) {
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    e = pthread_create(&th, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (e == 0) gcoll_thread_name(th, name);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return e;
}
