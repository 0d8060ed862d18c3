# libnccl.so.2: NCCL's API and ABI on gcoll (host buffers). Installed in
# $(pkglibdir), so that it never shadows a real NCCL in $(libdir): a program
# picks it with LD_LIBRARY_PATH=$(pkglibdir) or an rpath.
pkglib_LTLIBRARIES = libnccl.la
libnccl_la_SOURCES = src/nccl/nccl_shim.h src/nccl/nccl_init.c src/nccl/nccl_comm.c \
	src/nccl/nccl_coll.c src/nccl/nccl_redop.c src/nccl/nccl_cuda_probe.c src/nccl/nccl_mem.c \
	src/nccl/nccl_devapi.c
libnccl_la_LIBADD = libgcoll.la -ldl
# -version-info 2:0:0 gives the soname libnccl.so.2; -R: the installed
# library finds libgcoll in $(libdir) whatever the program's search path.
libnccl_la_LDFLAGS = $(AM_LDFLAGS) -version-info 2:0:0 -R $(libdir) \
	-Wl,--version-script=$(srcdir)/src/nccl/nccl.map
EXTRA_libnccl_la_DEPENDENCIES = src/nccl/nccl.map
EXTRA_DIST += src/nccl/nccl.map tests/nccl/test_nccl_abi.sh tests/nccl/nccl_host_check.c \
	tests/nccl/nccl_abi_layout.c tests/nccl/fake_libcuda.c \
	tests/nccl/nccl_groups_check.c tests/nccl/test_nccl_groups.sh

# Compiled by the test itself against the system's nccl.h (skipped without one).
TESTS += tests/nccl/test_nccl_abi.sh
# Every function of the system's nccl.h is defined by libnccl.so.2.
TESTS += tests/nccl/test_nccl_symbols.sh
EXTRA_DIST += tests/nccl/test_nccl_symbols.sh
# PyTorch's communicators (world, 2-D mesh groups from fresh ids) replayed.
TESTS += tests/nccl/test_nccl_groups.sh
# ncclCommShrink (after a SIGKILL), ncclCommRevoke, ncclCommInitRankScalable,
# windows and ncclGroupSimulateEnd through real processes.
TESTS += tests/nccl/test_nccl_shrink.sh
EXTRA_DIST += tests/nccl/test_nccl_shrink.sh tests/nccl/nccl_shrink_check.c
# LD_PRELOAD beats a wheel's RPATH to another libnccl.so.2.
TESTS += tests/nccl/test_nccl_preload.sh
EXTRA_DIST += tests/nccl/test_nccl_preload.sh
if HAVE_CMOCKA
# The host half of NCCL 2.28's device API: exact teams, clear refusals.
check_PROGRAMS += tests/unit/test_nccl_devapi
TESTS += tests/unit/test_nccl_devapi
tests_unit_test_nccl_devapi_SOURCES = tests/unit/test_nccl_devapi.c
tests_unit_test_nccl_devapi_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_nccl_devapi_LDADD = libnccl.la $(CMOCKA_LIBS)
endif
