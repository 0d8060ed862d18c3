/* The NVIDIA libraries opened once (see driver_libs.h). */
#include "common/driver_libs.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errf.h"

_Static_assert(sizeof(void (*)(void)) == sizeof(void *), "function pointers as dlsym gives them");

struct lib {
  int tried;
  void *handle;
  const char *path;
  char error[256];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct lib libs[GCOLL_NDRIVER_LIBS];

static const char *path_of(enum gcoll_driver_lib which) {
  if (which == GCOLL_LIB_NVML) return "libnvidia-ml.so.1";
  if (which == GCOLL_LIB_CUDA_GCOLL) {
    const char *p = getenv("GCOLL_CUDA_DRIVER");
    if (p != NULL && p[0] != '\0') return p;
  }
  return "libcuda.so.1";
}

void *gcoll_driver_lib_open(enum gcoll_driver_lib which, const char **path, char *err,
                            size_t errlen) {
  if ((int)which < 0 || which >= GCOLL_NDRIVER_LIBS) {
    gcoll_errf(err, errlen, "no library %d", (int)which);
    return NULL;
  }
  pthread_mutex_lock(&mu);
  struct lib *l = &libs[which];
  if (!l->tried) {
    l->tried = 1;
    l->path = path_of(which);
    l->handle = dlopen(l->path, RTLD_NOW | RTLD_LOCAL);
    if (l->handle == NULL) {
      const char *why = dlerror();
      snprintf(l->error, sizeof(l->error), "%s", why != NULL ? why : l->path);
    }
  }
  pthread_mutex_unlock(&mu);
  if (path != NULL) *path = l->path;
  if (l->handle == NULL) gcoll_errf(err, errlen, "%s", l->error);
  return l->handle;
}

int gcoll_driver_lib_fn(enum gcoll_driver_lib which, const char *name, void *fn) {
  void *h = gcoll_driver_lib_open(which, NULL, NULL, 0);
  void *sym = h != NULL ? dlsym(h, name) : NULL;
  if (sym == NULL) return -1;
  /* dlsym returns void *; POSIX guarantees it converts to a function
   * pointer, which memcpy says without a cast ISO C frowns upon. */
  memcpy(fn, &sym, sizeof(sym));
  return 0;
}
