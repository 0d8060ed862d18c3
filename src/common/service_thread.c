/* Detached background threads with every signal blocked (service_thread.h). */
#include "common/service_thread.h"

#include <pthread.h>
#include <signal.h>

int gcoll_service_thread_start(void *(*fn)(void *), void *arg) {
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
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return e;
}
