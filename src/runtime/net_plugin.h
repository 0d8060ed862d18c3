/* net/plugin: the NCCL net plugin device of the generic net transport
 * (net_plugin.c); its transport entry is gcoll_transport_plugin_ops
 * (transport.h). */
#ifndef GCOLL_RUNTIME_NET_PLUGIN_H
#define GCOLL_RUNTIME_NET_PLUGIN_H

#include <stddef.h>

#include "runtime/transport.h"

/* One line for logs about a started net/plugin transport: the plugin's
 * name, library, ABI version and the device it uses. */
int gcoll_net_plugin_describe(const struct gcoll_transport *t, char *buf, size_t len);

/* The network the process's plugin serves (its ncclNet name), or NULL when
 * no plugin can be used; why says why not (one line), *named whether the
 * user named a library. Loads the plugin on first use. */
const char *gcoll_net_plugin_name(int *named, char *why, size_t whylen);

#endif
