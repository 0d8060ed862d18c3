# Transports (shm, the generic net transport with its socket device) and
# the proxy thread that drives the network ones. Tables of operations: a
# new transport is one file plus one line in transport.c's table; a new net
# device one file with its table (net.h).
libgcoll_la_SOURCES += src/runtime/transport.h src/runtime/transport.c \
	src/runtime/transport_shm.c src/runtime/shm_segment.h src/runtime/shm_segment.c \
	src/runtime/fifo_devmem.c src/runtime/fifo_devmem.h \
	src/runtime/net.h src/runtime/net.c src/runtime/net_steps.c src/runtime/net_socket.c \
	src/runtime/net_tcp.h src/runtime/net_tcp.c \
	src/runtime/auth.h src/runtime/auth.c \
	src/runtime/proxy.h src/runtime/proxy.c src/runtime/peer_process.c \
	src/runtime/peer_memory.h src/runtime/peer_memory.c

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_transport
TESTS += tests/unit/test_transport
tests_unit_test_transport_SOURCES = tests/unit/test_transport.c
# net/plugin cases run over gcoll's test plugin (src/runtime/net_plugin.mk).
tests_unit_test_transport_CFLAGS = $(UNIT_CFLAGS) \
	-DGCOLL_TEST_NET_PLUGIN='"$(abs_builddir)/tests/net_plugin/.libs/libnccl-net-gcolltest.so"'
tests_unit_test_transport_LDADD = $(UNIT_LDADD)
check_PROGRAMS += tests/unit/test_shm_segment
TESTS += tests/unit/test_shm_segment
tests_unit_test_shm_segment_SOURCES = tests/unit/test_shm_segment.c
tests_unit_test_shm_segment_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_shm_segment_LDADD = $(UNIT_LDADD)
check_PROGRAMS += tests/unit/test_auth
TESTS += tests/unit/test_auth
tests_unit_test_auth_SOURCES = tests/unit/test_auth.c
tests_unit_test_auth_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_auth_LDADD = $(UNIT_LDADD)
endif

# Settings: GCOLL_* variables, else NCCL's from the environment and from
# NCCL's configuration files (settings.h), checked by a unit test and, for
# the ones that reach a communicator, through real processes.
libgcoll_la_SOURCES += src/runtime/settings.h src/runtime/settings.c
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_settings
TESTS += tests/unit/test_settings
tests_unit_test_settings_SOURCES = tests/unit/test_settings.c
tests_unit_test_settings_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_settings_LDADD = $(UNIT_LDADD)
endif
TESTS += tests/integration/test_nccl_settings.sh
EXTRA_DIST += tests/integration/test_nccl_settings.sh
