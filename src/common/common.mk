# The common layer: what every other layer may use (issue 19 step 4). So
# far: the declared table of GCOLL_* settings with gcoll-info, which prints
# it (tests/cli/test_params.sh keeps table, sources and README in step),
# the monotonic clock, error lines (errf.h), the service threads and the
# collective names (coll_names.c, in GRAPH_SOURCES because the SPANK plugin
# needs it too).
libgcoll_la_SOURCES += src/common/params.h src/common/params.c \
	src/common/clock.h src/common/errf.h src/common/service_thread.h \
	src/common/service_thread.c

bin_PROGRAMS += gcoll-info
gcoll_info_SOURCES = src/launcher/gcoll_info.c
gcoll_info_LDADD = libgcoll.la

TESTS += tests/cli/test_params.sh
