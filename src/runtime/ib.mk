# net/ib: RDMA (libibverbs) transport, built only when the verbs headers and
# library are there; registered in transport.c's table under HAVE_VERBS.
if HAVE_VERBS
libgcoll_la_SOURCES += src/runtime/net_ib.c src/runtime/net_ib_addr.h \
	src/runtime/net_ib_addr.c src/runtime/net_ib_verbs.h src/runtime/net_ib_verbs.c

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_net_ib
TESTS += tests/unit/test_net_ib
tests_unit_test_net_ib_SOURCES = tests/unit/test_net_ib.c
tests_unit_test_net_ib_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_net_ib_LDADD = $(UNIT_LDADD) $(VERBS_LIBS)
endif
endif

# Which transport each edge gets (comm_connect.c): in every build, an
# address naming net/ib on a rank without it; in verbs builds without a
# device, the fallback to net/socket and forced net/ib, through gcollrun.
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_conn_attach
TESTS += tests/unit/test_conn_attach
tests_unit_test_conn_attach_SOURCES = tests/unit/test_conn_attach.c
tests_unit_test_conn_attach_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_conn_attach_LDADD = $(UNIT_LDADD)
endif
if HAVE_VERBS
TESTS += tests/integration/test_transport_choice.sh
endif
EXTRA_DIST += tests/integration/test_transport_choice.sh
