# Endpoints that come with the plan (issue 16): the endpoints file (strict
# reader, atomic writer), the rank's rendezvous listener inherited from
# gcollrun, the bootstrap backend over it, and init's closing wave over the
# plan's tree.
libgcoll_la_SOURCES += src/graph/endpoints.h src/graph/endpoints_file.c \
	src/runtime/endpoint_server.h src/runtime/endpoint_server.c \
	src/runtime/endpoints_job_id.c \
	src/runtime/bootstrap_endpoints.c \
	src/runtime/comm_init_wave.h src/runtime/comm_init_wave.c

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_endpoints
TESTS += tests/unit/test_endpoints
tests_unit_test_endpoints_SOURCES = tests/unit/test_endpoints.c
tests_unit_test_endpoints_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_endpoints_LDADD = $(UNIT_LDADD)
endif

# The reader's fuzz target, also a corpus replayer under make check
# (tests/fuzz/replay.sh).
check_PROGRAMS += tests/fuzz/fuzz_endpoints_replay
tests_fuzz_fuzz_endpoints_replay_SOURCES = tests/fuzz/fuzz_endpoints.c tests/fuzz/replay_main.c
tests_fuzz_fuzz_endpoints_replay_LDADD = libgcoll_internal.la

# gcollrun with endpoints from the plan: 0 store requests at init, and the
# fallback to the store when the file or the listener does not match.
TESTS += tests/integration/test_endpoints.sh
EXTRA_DIST += tests/integration/test_endpoints.sh tests/fuzz/endpoints.dict
