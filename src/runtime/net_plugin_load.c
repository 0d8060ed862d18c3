/* Loading an NCCL net plugin and calling it across ABI versions (see
 * net_plugin_load.h). */
#define _GNU_SOURCE
#include "runtime/net_plugin_load.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/settings.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct gcoll_ncclnet plugin;
static int loaded, named;
static char reason[512];

/* ---- what the plugin logs -------------------------------------------------- */

static int log_info(void) {
  const char *v = getenv("GCOLL_DEBUG");
  if (v == NULL || *v == '\0') v = getenv("NCCL_DEBUG");
  return v != NULL && (strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0);
}

/* A plugin's warnings always show, its INFO lines at GCOLL_DEBUG=INFO (or
 * NCCL_DEBUG=INFO); each is one line naming the plugin. */
static void plugin_log(int level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level > GCOLL_NCCL_LOG_WARN && !(level == GCOLL_NCCL_LOG_INFO && log_info())) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  msg[strcspn(msg, "\n")] = '\0';
  fprintf(stderr, "gcoll net plugin %s: %s%s\n", plugin.lib,
          level <= GCOLL_NCCL_LOG_WARN ? "WARN " : "", msg);
}

static gcoll_ncclres no_profiler(void **ehandle, int type, void *phandle, int64_t plugin_id,
                                 void *ext) {
  (void)type;
  (void)phandle;
  (void)plugin_id;
  (void)ext;
  if (ehandle != NULL) *ehandle = NULL;
  return GCOLL_NCCL_SUCCESS;
}

/* ---- finding the library ------------------------------------------------------ */

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), t = strlen(tail);
  return n >= t && strcmp(s + n - t, tail) == 0;
}

/* NCCL's two tries: the name as given, then libnccl-net-NAME.so. */
static void *open_lib(const char *want) {
  char tried[2][256];
  int ntried = 0;
  snprintf(tried[ntried++], sizeof(tried[0]), "%.200s", want);
  if (named && strchr(want, '/') == NULL &&
      !(strncmp(want, "lib", 3) == 0 && ends_with(want, ".so")))
    snprintf(tried[ntried++], sizeof(tried[0]), "libnccl-net-%.200s.so", want);
  char errs[2][200] = {"", ""};
  for (int i = 0; i < ntried; i++) {
    void *dl = dlopen(tried[i], RTLD_NOW | RTLD_LOCAL);
    if (dl != NULL) {
      snprintf(plugin.lib, sizeof(plugin.lib), "%.200s", tried[i]);
      return dl;
    }
    const char *e = dlerror();
    snprintf(errs[i], sizeof(errs[i]), "%s", e != NULL ? e : "unknown error");
  }
  /* Not found under any name is one line; a library that exists but does
   * not load says why. */
  int missing = 1;
  for (int i = 0; i < ntried; i++) missing &= strstr(errs[i], "No such file") != NULL;
  if (missing)
    snprintf(reason, sizeof(reason), "no NCCL net plugin %.200s%s%.200s on the library path",
             tried[0], ntried > 1 ? " or " : "", ntried > 1 ? tried[1] : "");
  else
    snprintf(reason, sizeof(reason), "NCCL net plugin %.200s does not load: %s", want,
             strstr(errs[0], "No such file") == NULL || ntried == 1 ? errs[0] : errs[1]);
  return NULL;
}

/* The newest version we speak; -1 with the reason when none. */
static int find_version(void *dl) {
  static const char *const syms[] = {"ncclNetPlugin_v10", "ncclNetPlugin_v9", "ncclNetPlugin_v8"};
  for (int i = 0; i < 3; i++) {
    void *s = dlsym(dl, syms[i]);
    if (s == NULL) continue;
    plugin.version = 10 - i;
    if (i == 0) plugin.u.v10 = s;
    if (i == 1) plugin.u.v9 = s;
    if (i == 2) plugin.u.v8 = s;
    return 0;
  }
  for (int v = 7; v >= 2; v--) {
    char sym[32];
    snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", v);
    if (dlsym(dl, sym) != NULL) {
      snprintf(reason, sizeof(reason),
               "NCCL net plugin %s exports ncclNet ABI v%d only; gcoll loads v8 to v10",
               plugin.lib, v);
      return -1;
    }
  }
  snprintf(reason, sizeof(reason),
           "%s exports no ncclNetPlugin_v8, _v9 or _v10: not an NCCL net plugin gcoll can load",
           plugin.lib);
  return -1;
}

#define CALL(p, f, ...)                                                           \
  ((p)->version == 8 ? (p)->u.v8->f(__VA_ARGS__)                                  \
                     : (p)->version == 9 ? (p)->u.v9->f(__VA_ARGS__) : (p)->u.v10->f(__VA_ARGS__))

static void load(void) {
  const char *v = gcoll_setting("GCOLL_NET_PLUGIN");
  named = v != NULL && *v != '\0';
  if (named && strcasecmp(v, "none") == 0) {
    named = 0; /* deliberate: no warning */
    snprintf(reason, sizeof(reason), "NCCL net plugins disabled (NET_PLUGIN=none)");
    return;
  }
  void *dl = open_lib(named ? v : "libnccl-net.so");
  if (dl == NULL) return;
  if (find_version(dl) != 0) {
    dlclose(dl);
    return;
  }
  gcoll_ncclres r = plugin.version == 10  ? plugin.u.v10->init(plugin_log, no_profiler)
                     : plugin.version == 9 ? plugin.u.v9->init(plugin_log)
                                           : plugin.u.v8->init(plugin_log);
  const char *name = plugin.version == 10  ? plugin.u.v10->name
                     : plugin.version == 9 ? plugin.u.v9->name
                                           : plugin.u.v8->name;
  plugin.name = name != NULL ? name : "(unnamed)";
  if (r != GCOLL_NCCL_SUCCESS) {
    snprintf(reason, sizeof(reason),
             "NCCL net plugin %s (%s, v%d) failed to initialise (ncclResult %d)", plugin.lib,
             plugin.name, plugin.version, r);
    return; /* a failed init may leave threads behind: the library stays */
  }
  if (CALL(&plugin, devices, &plugin.ndev) != GCOLL_NCCL_SUCCESS || plugin.ndev <= 0) {
    snprintf(reason, sizeof(reason), "NCCL net plugin %s (%s, v%d) has no device", plugin.lib,
             plugin.name, plugin.version);
    return;
  }
  loaded = 1;
}

int gcoll_ncclnet_get(const struct gcoll_ncclnet **out, int *was_named, char *why, size_t whylen) {
  pthread_once(&once, load);
  *out = loaded ? &plugin : NULL;
  *was_named = named;
  if (!loaded) snprintf(why, whylen, "%s", reason);
  return loaded ? 0 : 1;
}

/* ---- the calls ------------------------------------------------------------------ */

gcoll_ncclres gcoll_ncclnet_props(const struct gcoll_ncclnet *p, int dev,
                                  struct gcoll_ncclnet_props *out) {
  memset(out, 0, sizeof(*out));
  const char *name, *pci;
  gcoll_ncclres r;
  if (p->version == 8) {
    struct gcoll_nccl_props_v8 pr;
    memset(&pr, 0, sizeof(pr));
    r = p->u.v8->get_properties(dev, &pr);
    name = pr.name, pci = pr.pci_path;
    out->ptr_support = pr.ptr_support, out->speed = pr.speed, out->max_comms = pr.max_comms;
  } else {
    struct gcoll_nccl_props_v9 pr;
    memset(&pr, 0, sizeof(pr));
    r = p->version == 9 ? p->u.v9->get_properties(dev, &pr) : p->u.v10->get_properties(dev, &pr);
    name = pr.name, pci = pr.pci_path;
    out->ptr_support = pr.ptr_support, out->speed = pr.speed, out->max_comms = pr.max_comms;
  }
  snprintf(out->name, sizeof(out->name), "%s", r == 0 && name != NULL ? name : "");
  snprintf(out->pci_path, sizeof(out->pci_path), "%s", r == 0 && pci != NULL ? pci : "");
  return r;
}

gcoll_ncclres gcoll_ncclnet_listen(const struct gcoll_ncclnet *p, int dev, void *handle,
                                   void **listen_comm) {
  return CALL(p, listen, dev, handle, listen_comm);
}

gcoll_ncclres gcoll_ncclnet_connect(const struct gcoll_ncclnet *p, int dev, void *handle,
                                    void **send_comm) {
  struct gcoll_nccl_dev_handle *no_offload = NULL;
  if (p->version == 10) {
    struct gcoll_nccl_comm_config cfg = {.traffic_class = GCOLL_NCCL_TRAFFIC_CLASS_UNDEF};
    return p->u.v10->connect(dev, &cfg, handle, send_comm, &no_offload);
  }
  if (p->version == 9) return p->u.v9->connect(dev, handle, send_comm, &no_offload);
  return p->u.v8->connect(dev, handle, send_comm, &no_offload);
}

gcoll_ncclres gcoll_ncclnet_accept(const struct gcoll_ncclnet *p, void *listen_comm,
                                   void **recv_comm) {
  struct gcoll_nccl_dev_handle *no_offload = NULL;
  return CALL(p, accept, listen_comm, recv_comm, &no_offload);
}

gcoll_ncclres gcoll_ncclnet_reg_mr(const struct gcoll_ncclnet *p, void *comm, void *data,
                                   size_t size, void **mhandle) {
  return CALL(p, reg_mr, comm, data, size, GCOLL_NCCL_PTR_HOST, mhandle);
}

gcoll_ncclres gcoll_ncclnet_dereg_mr(const struct gcoll_ncclnet *p, void *comm, void *mhandle) {
  return CALL(p, dereg_mr, comm, mhandle);
}

gcoll_ncclres gcoll_ncclnet_isend(const struct gcoll_ncclnet *p, void *send_comm, void *data,
                                  size_t size, void *mhandle, void **request) {
  if (p->version == 8) {
    if (size > INT_MAX) return GCOLL_NCCL_INTERNAL_ERROR;
    return p->u.v8->isend(send_comm, data, (int)size, 0, mhandle, request);
  }
  if (p->version == 9) return p->u.v9->isend(send_comm, data, size, 0, mhandle, request);
  return p->u.v10->isend(send_comm, data, size, 0, mhandle, NULL, request);
}

gcoll_ncclres gcoll_ncclnet_irecv(const struct gcoll_ncclnet *p, void *recv_comm, void *data,
                                  size_t size, void *mhandle, void **request) {
  int tag = 0;
  if (p->version == 8) {
    if (size > INT_MAX) return GCOLL_NCCL_INTERNAL_ERROR;
    int isize = (int)size;
    return p->u.v8->irecv(recv_comm, 1, &data, &isize, &tag, &mhandle, request);
  }
  if (p->version == 9) return p->u.v9->irecv(recv_comm, 1, &data, &size, &tag, &mhandle, request);
  void *phandle = NULL;
  return p->u.v10->irecv(recv_comm, 1, &data, &size, &tag, &mhandle, &phandle, request);
}

gcoll_ncclres gcoll_ncclnet_test(const struct gcoll_ncclnet *p, void *request, int *done,
                                 size_t *size) {
  int isize = 0;
  gcoll_ncclres r = CALL(p, test, request, done, &isize);
  *size = isize < 0 ? 0 : (size_t)isize;
  return r;
}

gcoll_ncclres gcoll_ncclnet_close_send(const struct gcoll_ncclnet *p, void *send_comm) {
  return CALL(p, close_send, send_comm);
}

gcoll_ncclres gcoll_ncclnet_close_recv(const struct gcoll_ncclnet *p, void *recv_comm) {
  return CALL(p, close_recv, recv_comm);
}

gcoll_ncclres gcoll_ncclnet_close_listen(const struct gcoll_ncclnet *p, void *listen_comm) {
  return CALL(p, close_listen, listen_comm);
}
