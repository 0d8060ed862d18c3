# tests/security: the attacks of issue 13 run as a second user against a
# job of a first one (as root the tests create and remove throw-away users;
# otherwise they skip). The attacker is standalone (it links nothing of
# gcoll: it writes the wire formats itself); the victim is an ordinary
# libgcoll program that checks every element it gets back.
check_PROGRAMS += tests/security/attacker tests/security/victim
tests_security_attacker_SOURCES = tests/security/attacker.c
tests_security_victim_SOURCES = tests/security/victim.c
tests_security_victim_LDADD = libgcoll.la

security_tests = tests/security/test_inject.sh tests/security/test_shm_squat.sh \
	tests/security/test_flood.sh
TESTS += $(security_tests)
EXTRA_DIST += $(security_tests) tests/security/lib.sh
