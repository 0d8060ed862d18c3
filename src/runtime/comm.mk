# The communicator: plan loading, connections, the collective API.
libgcoll_la_SOURCES += src/runtime/comm.h src/runtime/comm_init.c \
	src/runtime/comm_connect.c src/runtime/comm_coll.c src/runtime/errors.c \
	src/runtime/comm_members.c src/runtime/comm_members.h src/runtime/comm_split.c

check_PROGRAMS += tests/integration/coll_check
tests_integration_coll_check_SOURCES = tests/integration/coll_check.c tests/integration/check_util.h
tests_integration_coll_check_LDADD = libgcoll.la
TESTS += tests/integration/test_coll.sh tests/integration/test_netns.sh
EXTRA_DIST += tests/integration/test_coll.sh tests/integration/test_netns.sh
