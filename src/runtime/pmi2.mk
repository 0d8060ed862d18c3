# Bootstrap backend "pmi2" (srun --mpi=pmi2). libpmi2 is loaded at run time
# with dlopen, so libgcoll does not link it and loads where Slurm is absent;
# its header is what the build needs.
if HAVE_PMI2
libgcoll_la_SOURCES += src/runtime/bootstrap_pmi2.c src/runtime/pmi2_codec.h \
	src/runtime/pmi2_codec.c

check_PROGRAMS += tests/slurm/pmi2_probe
tests_slurm_pmi2_probe_SOURCES = tests/slurm/pmi2_probe.c
tests_slurm_pmi2_probe_LDADD = libgcoll_internal.la
TESTS += tests/slurm/test_pmi2.sh

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_pmi2_codec
TESTS += tests/unit/test_pmi2_codec
tests_unit_test_pmi2_codec_SOURCES = tests/unit/test_pmi2_codec.c
tests_unit_test_pmi2_codec_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_pmi2_codec_LDADD = $(UNIT_LDADD)
endif
endif
EXTRA_DIST += tests/slurm/test_pmi2.sh
