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
