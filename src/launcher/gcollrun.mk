# gcollrun: the launcher without a scheduler, and its TCP key-value store.

# The bootstrap interface (its TCP KVS client here; PMI2, endpoints and
# local backends in runtime/*.mk) is part of libgcoll: the runtime calls
# it, gcollrun only hosts the server.
libgcoll_la_SOURCES += src/runtime/bootstrap.h src/runtime/bootstrap.c \
	src/runtime/bootstrap_tcp.c src/runtime/kvs_proto.h src/runtime/kvs_proto.c

bin_PROGRAMS += gcollrun
gcollrun_SOURCES = src/launcher/gcollrun.h src/launcher/gcollrun.c \
	src/launcher/gcollrun_plan.c src/launcher/gcollrun_spawn.c \
	src/launcher/gcollrun_output.c src/launcher/gcollrun_endpoints.c \
	src/launcher/gcollrun_bind.c
# kvs_server.c comes from libgcoll (src/runtime/auto.mk), which also hosts
# the store for gcollGetUniqueId.
gcollrun_LDADD = libgcoll.la -lm

check_PROGRAMS += tests/integration/kvs_client
tests_integration_kvs_client_SOURCES = tests/integration/kvs_client.c
tests_integration_kvs_client_LDADD = libgcoll_internal.la
TESTS += tests/integration/test_gcollrun.sh
EXTRA_DIST += tests/integration/test_gcollrun.sh

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_kvs_proto
TESTS += tests/unit/test_kvs_proto
tests_unit_test_kvs_proto_SOURCES = tests/unit/test_kvs_proto.c
tests_unit_test_kvs_proto_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_kvs_proto_LDADD = $(UNIT_LDADD)
endif
