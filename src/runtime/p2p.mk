# Point-to-point send/recv with connections made on first use, and groups.
libgcoll_la_SOURCES += src/runtime/comm_p2p.h src/runtime/comm_p2p.c src/runtime/comm_group.c \
	src/runtime/comm_p2p_run.h src/runtime/comm_p2p_stage.c src/runtime/comm_p2p_gpu.c

check_PROGRAMS += tests/integration/p2p_check
tests_integration_p2p_check_SOURCES = tests/integration/p2p_check.c tests/integration/check_util.h
tests_integration_p2p_check_LDADD = libgcoll.la
TESTS += tests/integration/test_p2p.sh
EXTRA_DIST += tests/integration/test_p2p.sh

# Grouped collectives: one thread driving several communicators.
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_group
TESTS += tests/unit/test_group
tests_unit_test_group_SOURCES = tests/unit/test_group.c tests/unit/testutil.h
tests_unit_test_group_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_group_LDADD = $(UNIT_LDADD)
endif
