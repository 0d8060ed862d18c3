# The common layer: what every other layer may use (issue 19 step 4). So
# far the declared table of GCOLL_* settings and gcoll-info, which prints
# it; tests/cli/test_params.sh keeps the table, the sources and the README
# in step.
libgcoll_la_SOURCES += src/common/params.h src/common/params.c

bin_PROGRAMS += gcoll-info
gcoll_info_SOURCES = src/launcher/gcoll_info.c
gcoll_info_LDADD = libgcoll.la

TESTS += tests/cli/test_params.sh
