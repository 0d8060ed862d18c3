# The communicator: plan loading, connections, the collective API.
libgcoll_la_SOURCES += src/runtime/comm.h src/runtime/comm_init.c \
	src/runtime/comm_init_timings.h src/runtime/comm_init_timings.c \
	src/runtime/comm_connect.c src/runtime/comm_coll.c src/runtime/errors.c \
	src/runtime/comm_members.c src/runtime/comm_members.h src/runtime/comm_gpu_identity.c \
	src/runtime/comm_split.c src/runtime/comm_redop.c \
	src/runtime/comm_alltoall.c src/runtime/comm_oneshot.c

# ncclCommShrink / ncclCommRevoke on gcoll's communicator.
libgcoll_la_SOURCES += src/runtime/comm_shrink.c
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_shrink
TESTS += tests/unit/test_shrink
tests_unit_test_shrink_SOURCES = tests/unit/test_shrink.c
tests_unit_test_shrink_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_shrink_LDADD = $(UNIT_LDADD)
endif

check_PROGRAMS += tests/integration/coll_check
tests_integration_coll_check_SOURCES = tests/integration/coll_check.c tests/integration/check_util.h
tests_integration_coll_check_LDADD = libgcoll.la
TESTS += tests/integration/test_coll.sh tests/integration/test_netns.sh \
	tests/integration/test_reproducible.sh tests/integration/test_domain_edges.sh
EXTRA_DIST += tests/integration/test_coll.sh tests/integration/test_netns.sh \
	tests/integration/test_reproducible.sh tests/integration/test_domain_edges.sh
