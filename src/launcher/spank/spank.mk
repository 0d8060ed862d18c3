# The SPANK plugin (srun --gcoll=plan). A self-contained module: the graph
# code is linked in, nothing but the SPANK symbols is exported, and it is
# never built with the sanitizers (slurmstepd does not load the ASan
# runtime first, so an instrumented plugin could not be loaded).
SPANK_PLUGIN_SOURCES = src/launcher/spank/spank_gcoll.h src/launcher/spank/spank_config.c \
	src/launcher/spank/spank_jobdir.c src/launcher/spank/spank_endpoints.c
EXTRA_DIST += src/launcher/spank/spank.map etc/plugstack.conf.d/gcoll.conf
if HAVE_SPANK
spankdir = $(libdir)/slurm
spank_LTLIBRARIES = spank_gcoll.la
spank_gcoll_la_SOURCES = $(SPANK_PLUGIN_SOURCES) \
	src/launcher/spank/spank_plugin.h src/launcher/spank/spank_plugin.c \
	src/launcher/spank/spank_remote.c src/launcher/spank/spank_gather.c \
	src/launcher/spank/spank_epilog.c \
	src/graph/endpoints.h src/graph/endpoints_file.c \
	src/runtime/auth.h src/runtime/auth.c src/runtime/endpoints_job_id.c $(GRAPH_SOURCES)
spank_gcoll_la_CFLAGS = $(WARN_CFLAGS) $(AX_PTHREAD_CFLAGS) $(YAML_CFLAGS) $(XML_CFLAGS) \
	$(HWLOC_CFLAGS) $(CRYPTO_CFLAGS)
spank_gcoll_la_LDFLAGS = -module -avoid-version -shared \
	-Wl,--version-script=$(srcdir)/src/launcher/spank/spank.map
spank_gcoll_la_LIBADD = $(YAML_LIBS) $(XML_LIBS) $(HWLOC_LIBS) $(VERBS_LIBS) $(CRYPTO_LIBS) -ldl -lm
endif

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_spank_files
TESTS += tests/unit/test_spank_files
tests_unit_test_spank_files_SOURCES = tests/unit/test_spank_files.c $(SPANK_PLUGIN_SOURCES)
tests_unit_test_spank_files_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_spank_files_LDADD = $(UNIT_LDADD)
endif

# Tests on a real Slurm (contrib/slurm). They skip unless GCOLL_TEST_SLURM=1,
# because they install packages and start daemons as root; CI runs them in a
# step of their own (.ci/run).
TESTS += tests/slurm/test_cluster.sh tests/slurm/test_spank.sh tests/slurm/test_spank_endpoints.sh
EXTRA_DIST += contrib/slurm/up contrib/slurm/down contrib/slurm/lib.sh contrib/slurm/README.md \
	tests/slurm/lib.sh tests/slurm/test_cluster.sh tests/slurm/test_spank.sh \
	tests/slurm/test_spank_endpoints.sh

# The plan-directory attack (issue 13, part 4): another user squats the next
# job's names in plandir; needs the same Slurm, so it skips the same way and
# CI's Slurm step runs it (.ci/run).
TESTS += tests/security/test_plandir.sh
EXTRA_DIST += tests/security/test_plandir.sh
