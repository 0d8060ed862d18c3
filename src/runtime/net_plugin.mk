# net/plugin: NCCL net plugins (ncclNet v8-v10), loaded by NCCL's rules, as
# a device of the generic net transport (docs/net.md).
libgcoll_la_SOURCES += src/runtime/net_plugin.h src/runtime/net_plugin.c \
	src/runtime/net_plugin_load.h src/runtime/net_plugin_load.c src/runtime/net_plugin_abi.h

# gcoll's own test plugin (the ABI over loopback TCP: tests/net_plugin), in
# each ABI version gcoll loads and in the ways a plugin can be unusable.
# Shared objects only for the tests, never installed.
# One source serves every version: the entries a version does not export
# are unused there.
NET_PLUGIN_CFLAGS = $(AM_CFLAGS) -Wno-unused-function
NET_PLUGIN_LDFLAGS = -module -shared -avoid-version -rpath $(abs_builddir)/tests/net_plugin
net_test_plugins = tests/net_plugin/libnccl-net-gcolltest.la \
	tests/net_plugin/libnccl-net-gcolltest9.la tests/net_plugin/libnccl-net-gcolltest8.la \
	tests/net_plugin/libnccl-net-gcolltest7.la tests/net_plugin/libnccl-net-gcolltestfail.la \
	tests/net_plugin/libnccl-net-gcolltestnodev.la
check_LTLIBRARIES += $(net_test_plugins)
tests_net_plugin_libnccl_net_gcolltest_la_SOURCES = tests/net_plugin/tcp_plugin.c
tests_net_plugin_libnccl_net_gcolltest_la_CFLAGS = $(NET_PLUGIN_CFLAGS) -DABI=10
tests_net_plugin_libnccl_net_gcolltest_la_LDFLAGS = $(NET_PLUGIN_LDFLAGS)
tests_net_plugin_libnccl_net_gcolltest9_la_SOURCES = tests/net_plugin/tcp_plugin.c
tests_net_plugin_libnccl_net_gcolltest9_la_CFLAGS = $(NET_PLUGIN_CFLAGS) -DABI=9
tests_net_plugin_libnccl_net_gcolltest9_la_LDFLAGS = $(NET_PLUGIN_LDFLAGS)
tests_net_plugin_libnccl_net_gcolltest8_la_SOURCES = tests/net_plugin/tcp_plugin.c
tests_net_plugin_libnccl_net_gcolltest8_la_CFLAGS = $(NET_PLUGIN_CFLAGS) -DABI=8
tests_net_plugin_libnccl_net_gcolltest8_la_LDFLAGS = $(NET_PLUGIN_LDFLAGS)
tests_net_plugin_libnccl_net_gcolltest7_la_SOURCES = tests/net_plugin/tcp_plugin.c
tests_net_plugin_libnccl_net_gcolltest7_la_CFLAGS = $(NET_PLUGIN_CFLAGS) -DABI=7
tests_net_plugin_libnccl_net_gcolltest7_la_LDFLAGS = $(NET_PLUGIN_LDFLAGS)
tests_net_plugin_libnccl_net_gcolltestfail_la_SOURCES = tests/net_plugin/tcp_plugin.c
tests_net_plugin_libnccl_net_gcolltestfail_la_CFLAGS = $(NET_PLUGIN_CFLAGS) -DABI=10 -DFAIL_INIT
tests_net_plugin_libnccl_net_gcolltestfail_la_LDFLAGS = $(NET_PLUGIN_LDFLAGS)
tests_net_plugin_libnccl_net_gcolltestnodev_la_SOURCES = tests/net_plugin/tcp_plugin.c
tests_net_plugin_libnccl_net_gcolltestnodev_la_CFLAGS = $(NET_PLUGIN_CFLAGS) -DABI=10 -DNO_DEVICE
tests_net_plugin_libnccl_net_gcolltestnodev_la_LDFLAGS = $(NET_PLUGIN_LDFLAGS)

# The plugin through real ranks: NCCL's name rules, each ABI version, the
# fallbacks (tests/integration/test_net_plugin.sh).
TESTS += tests/integration/test_net_plugin.sh
EXTRA_DIST += tests/integration/test_net_plugin.sh tests/net_plugin/tcp_plugin.c
