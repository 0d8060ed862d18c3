# Init paths without a launcher: gcollCommInitAll (in-process bootstrap) and
# gcollGetUniqueId/gcollCommInitRank (the library hosts the TCP key-value
# store, the same one gcollrun runs).
libgcoll_la_SOURCES += src/runtime/comm_init_paths.h src/runtime/comm_init_api.c \
	src/runtime/comm_plan_local.c src/runtime/comm_plan_job.c src/runtime/bootstrap_local.c \
	src/runtime/kvs_server.h src/runtime/kvs_server.c src/runtime/kvs_thread.h src/runtime/kvs_thread.c

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_initall
TESTS += tests/unit/test_initall
tests_unit_test_initall_SOURCES = tests/unit/test_initall.c
tests_unit_test_initall_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_initall_LDADD = $(UNIT_LDADD)
endif
