# src/kernels: collective algorithms on primitives, reduction loops, the host
# executor. Knows nothing of plans, sockets or processes.

# Reduction core (kred): element-wise ops, 16-bit float conversions, names.
libgcoll_la_SOURCES += src/kernels/reduce.c src/kernels/reduce.h src/kernels/half.h
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_reduce
TESTS += tests/unit/test_reduce
tests_unit_test_reduce_SOURCES = tests/unit/test_reduce.c tests/unit/testutil.h
tests_unit_test_reduce_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_reduce_LDADD = $(UNIT_LDADD)
endif

# Algorithms on primitives and the host executor (kprims).
libgcoll_la_SOURCES += src/kernels/fifo.h src/kernels/wait.h src/kernels/wait.c \
	src/kernels/prims.h src/kernels/prims_host.c src/kernels/algo_ring.h \
	src/kernels/algo_tree.h src/kernels/coll_args.h src/kernels/coll_args.c \
	src/kernels/coll_geometry.h \
	src/kernels/host_exec.h src/kernels/host_exec.c \
	src/kernels/host_direct.h src/kernels/host_direct.c \
	src/kernels/host_oneshot.h src/kernels/host_oneshot.c \
	src/kernels/exec.h src/kernels/exec_host.c
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_algos
TESTS += tests/unit/test_algos
tests_unit_test_algos_SOURCES = tests/unit/test_algos.c tests/unit/testutil.h
tests_unit_test_algos_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_algos_LDADD = $(UNIT_LDADD)
# The one-shot board of small host allreduces, forked ranks over one board.
check_PROGRAMS += tests/unit/test_oneshot
TESTS += tests/unit/test_oneshot
tests_unit_test_oneshot_SOURCES = tests/unit/test_oneshot.c
tests_unit_test_oneshot_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_oneshot_LDADD = $(UNIT_LDADD)
# Futex wake-ups of the waits, across a fork over a shared FIFO.
check_PROGRAMS += tests/unit/test_wake
TESTS += tests/unit/test_wake
tests_unit_test_wake_SOURCES = tests/unit/test_wake.c
tests_unit_test_wake_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_wake_LDADD = $(UNIT_LDADD)
endif
