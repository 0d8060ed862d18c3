# gcoll-perf: the nccl-tests style benchmark, its functional test, and the
# Open MPI comparison (built by tests/bench/compare-mpi.sh with mpicc, only
# when Open MPI is installed; never needed to build or test gcoll).
bin_PROGRAMS += gcoll-perf
gcoll_perf_SOURCES = src/launcher/gcoll_perf.c src/launcher/gcoll_perf.h \
	src/launcher/gcoll_perf_args.c src/launcher/gcoll_perf_data.c \
	src/launcher/gcoll_perf_report.c src/launcher/gcoll_perf_mem.c
gcoll_perf_LDADD = libgcoll.la -lm

TESTS += tests/integration/test_perf.sh
EXTRA_DIST += tests/integration/test_perf.sh tests/bench/compare-mpi.sh \
	tests/bench/mpi_allreduce.c
